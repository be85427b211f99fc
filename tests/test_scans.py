"""The scan strategy (prefix recurrences) against float64 loops.

Each form is a small module-level loop decorated with `@autovec`; `fn.__wrapped__` is the
plain loop. On long sequences the rewrite's float32 error against the same loop run in
float64 must stay within a few times the plain float32 loop's own error; shapes and dtypes
must be those of the float32 loop; gradients are compared with `assert_equivalent` on
smaller inputs; `explain` must report the scan (or, where autovec keeps the loop on
purpose, the Python path with bit-for-bit the loop's results).
"""
import math

import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop

EPS32 = torch.finfo(torch.float32).eps
FACTORS = [0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0, -0.5, -1.0]   # |a| <= 1: the scan is documented


@pytest.fixture
def always_vectorize(monkeypatch):
    """Take the vectorized path whatever the cost model would pick: small inputs, and the accuracy
    tests, whose timings a loaded machine can turn around (two busy cores slowed torch's threaded
    scans 7x, and the cost model rightly chose the loop)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


# ---------------------------------------------------------------------------
# Running sums, products and extremes


@autovec
def cumsum_rows(x):
    s = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s = s + x[i]
        out[i] = s
    return out


@autovec
def cumsum_augmented(x):
    s = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s += x[i]
        out[i] = s
    return out


@autovec
def cumsum_cols(x):
    s = torch.zeros(x.shape[0], dtype=x.dtype)
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        s = s + x[:, j]
        out[:, j] = s
    return out


@autovec
def cumsum_list(x):
    s = torch.zeros_like(x[0])
    res = []
    for i in range(x.shape[0]):
        s = s + x[i]
        res.append(s)
    return torch.stack(res)


@autovec
def suffix_sum(x):
    s = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for i in reversed(range(x.shape[0])):
        s = s + x[i]
        out[i] = s
    return out


@autovec
def running_difference(x):
    s = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s = s - x[i]
        out[i] = s
    return out


@autovec
def cumprod_rows(x):
    p = torch.ones_like(x[0])
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        p = p * x[i]
        out[i] = p
    return out


@autovec
def cumprod_cols_list(x):
    p = torch.ones(x.shape[0], dtype=x.dtype)
    res = []
    for j in range(x.shape[1]):
        p = p * x[:, j]
        res.append(p)
    return torch.stack(res, dim=1)


@autovec
def cummax_rows(x):
    m = torch.full_like(x[0], float("-inf"))
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        m = torch.maximum(m, x[i])
        out[i] = m
    return out


@autovec
def cummin_cols(x):
    m = x[:, 0]
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        m = torch.minimum(m, x[:, j])
        out[:, j] = m
    return out


@autovec
def drawdown(p):
    peak = p[0]
    dd = torch.empty_like(p)
    for i in range(p.shape[0]):
        peak = torch.max(peak, p[i])
        dd[i] = peak - p[i]
    return dd


# In-place prefix updates: the loop mutates its argument and returns it.


@autovec
def prefix_rows(x):
    for i in range(1, x.shape[0]):
        x[i] += x[i - 1]
    return x


@autovec
def prefix_cols(x):
    for j in range(1, x.shape[1]):
        x[:, j] += x[:, j - 1]
    return x


@autovec
def prefix_product_rows(x):
    for i in range(1, x.shape[0]):
        x[i] = x[i] * x[i - 1]
    return x


@autovec
def prefix_product_cols(x):
    for j in range(1, x.shape[1]):
        x[:, j] = x[:, j] * x[:, j - 1]
    return x


@autovec
def prefix_rows_of_copy(x):
    y = x * 1.0
    for i in range(1, y.shape[0]):
        y[i] += y[i - 1]
    return y


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _near_one(*shape, seed=0):
    """Factors of a long product that stays in range: 1 + 1% noise."""
    return 1 + 0.01 * _randn(*shape, seed=seed)


def _positive(*shape, seed=0):
    return _randn(*shape, seed=seed).abs() + 1


# (function, shape: a function of n, data, in place, exact): "n" sequences, "nd" rows of
# d features, "bn" b rows scanned along dimension 1.
SHAPES = {"n": lambda n: (n,), "nd": lambda n: (n, 4), "bn": lambda n: (3, n)}
SCANS = {
    "cumsum_rows-n": (cumsum_rows, "n", _randn, False, False),
    "cumsum_rows-nd": (cumsum_rows, "nd", _randn, False, False),
    "cumsum_augmented-nd": (cumsum_augmented, "nd", _randn, False, False),
    "cumsum_cols-bn": (cumsum_cols, "bn", _randn, False, False),
    "cumsum_list-nd": (cumsum_list, "nd", _randn, False, False),
    "suffix_sum-nd": (suffix_sum, "nd", _randn, False, False),
    "running_difference-n": (running_difference, "n", _randn, False, False),
    "cumprod_rows-nd": (cumprod_rows, "nd", _near_one, False, False),
    "cumprod_cols_list-bn": (cumprod_cols_list, "bn", _near_one, False, False),
    "cummax_rows-nd": (cummax_rows, "nd", _randn, False, True),
    "cummin_cols-bn": (cummin_cols, "bn", _randn, False, True),
    "drawdown-n": (drawdown, "n", _positive, False, True),
    "prefix_rows-n": (prefix_rows, "n", _randn, True, False),
    "prefix_rows-nd": (prefix_rows, "nd", _randn, True, False),
    "prefix_cols-bn": (prefix_cols, "bn", _randn, True, False),
    "prefix_product_rows-nd": (prefix_product_rows, "nd", _near_one, True, False),
    "prefix_product_cols-bn": (prefix_product_cols, "bn", _near_one, True, False),
}


# ---------------------------------------------------------------------------
# First-order linear recurrences with a loop-invariant Python float factor


@autovec
def decay_rows(x, a):
    h = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        h = a * h + x[t]
        out[t] = h
    return out


@autovec
def decay_cols(x, a):
    h = torch.zeros(x.shape[0], dtype=x.dtype)
    out = torch.empty_like(x)
    for t in range(x.shape[1]):
        h = a * h + x[:, t]
        out[:, t] = h
    return out


@autovec
def ema_list(x, a):
    h = torch.zeros_like(x[0])
    trace = []
    for t in range(x.shape[0]):
        h = a * h + (1 - a) * x[t]
        trace.append(h)
    return torch.stack(trace)


@autovec
def returns_reversed(r, gamma):
    g = 0.0
    out = torch.empty_like(r)
    for t in reversed(range(r.shape[0])):
        g = r[t] + gamma * g
        out[t] = g
    return out


@autovec
def returns_negative_step(r, gamma):
    g = torch.zeros_like(r[0])
    out = torch.empty_like(r)
    for t in range(r.shape[0] - 1, -1, -1):
        g = r[t] + gamma * g
        out[t] = g
    return out


@autovec
def returns_cols(r, gamma):
    g = torch.zeros(r.shape[0], dtype=r.dtype)
    out = torch.empty_like(r)
    for t in reversed(range(r.shape[1])):
        g = r[:, t] + gamma * g
        out[:, t] = g
    return out


LINEAR = {
    "decay_rows-n": (decay_rows, "n"),
    "decay_rows-nd": (decay_rows, "nd"),
    "decay_cols-bn": (decay_cols, "bn"),
    "ema_list-nd": (ema_list, "nd"),
    "returns_reversed-n": (returns_reversed, "n"),
    "returns_negative_step-nd": (returns_negative_step, "nd"),
    "returns_cols-bn": (returns_cols, "bn"),
}


# ---------------------------------------------------------------------------
# Helpers


def _error_against_float64(fn, x, *rest, inplace=False):
    """(autovec's error, the float32 loop's error, largest exact value, autovec's result,
    the float32 loop's result): errors are max abs differences from the float64 loop."""
    loop_fn = fn.__wrapped__
    exact = loop_fn(x.double().clone(), *rest)
    assert exact.dtype == torch.float64
    loop = loop_fn(x.clone(), *rest)
    arg = x.clone()
    got = fn(arg, *rest)
    if inplace:   # the loop returns its argument, updated in place
        assert got is arg
        assert not torch.equal(arg, x)
    assert type(got) is type(loop) and got.shape == loop.shape and got.dtype == loop.dtype == x.dtype
    assert got.device == loop.device
    err = (got.double() - exact).abs().max().item()
    loop_err = (loop.double() - exact).abs().max().item()
    return err, loop_err, exact.abs().max().item(), got, loop


def _assert_close_to_float64(fn, x, *rest, inplace=False, factor=4.0):
    err, loop_err, scale, got, loop = _error_against_float64(fn, x, *rest, inplace=inplace)
    # a few times the loop's own error, plus two float32 ulps of the largest value
    atol = 2 * EPS32 * max(scale, 1.0)
    assert err <= factor * loop_err + atol, (
        f"autovec error {err:.3g} vs float32 loop error {loop_err:.3g} (scale {scale:.3g})")
    return got, loop


def _assert_scan(fn, *args):
    ex = explain(fn, *args)
    assert ex.path == "vectorized", str(ex)
    assert [lp.strategy for lp in ex.loops] == ["scan"], str(ex)
    assert all(lp.vectorized for lp in ex.loops)
    return ex


def _assert_python_and_exact(fn, *args):
    """autovec keeps the loop: the result is the loop's, bit for bit."""
    ex = explain(fn, *args)
    assert ex.path == "python", str(ex)
    want = fn.__wrapped__(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    got = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num())
    return ex


# ---------------------------------------------------------------------------
# Long sequences against float64


@pytest.mark.parametrize("n", [2000, 10000])
@pytest.mark.parametrize("name", sorted(SCANS))
def test_scan_error_against_float64(name, n, always_vectorize):
    fn, shape, data, inplace, exact = SCANS[name]
    x = data(*SHAPES[shape](n), seed=n)
    _assert_scan(fn, x.clone())          # the cost model picks the scan on its own at this size
    got, loop = _assert_close_to_float64(fn, x, inplace=inplace)
    if exact:   # running extremes pick elements: no rounding at all
        assert torch.equal(got, loop)


LONG_LINEAR = [(name, 2000) for name in LINEAR] + [("decay_rows-nd", 10000), ("returns_reversed-n", 10000)]


@pytest.mark.parametrize("a", FACTORS)
@pytest.mark.parametrize("name, n", LONG_LINEAR)
def test_linear_recurrence_error_against_float64(name, n, a, always_vectorize):
    fn, shape = LINEAR[name]
    x = _randn(*SHAPES[shape](n), seed=n)
    _assert_scan(fn, x, a)
    _assert_close_to_float64(fn, x, a)


def test_decay_one_is_a_plain_cumsum(always_vectorize):
    x = _randn(10000, 4, seed=1)
    got = decay_rows(x, 1.0)
    want = torch.cumsum(x.double(), 0)
    # the blocked evaluation is no worse than float32 cumsum's own rounding
    err = (got.double() - want).abs().max().item()
    ref = (torch.cumsum(x, 0).double() - want).abs().max().item()
    assert err <= 4 * ref + 2 * EPS32 * want.abs().max().item()


def test_decay_zero_is_the_input(always_vectorize):
    x = _randn(2000, 4, seed=2)
    assert torch.equal(decay_rows(x, 0.0), x)
    assert torch.equal(returns_reversed(x[:, 0].contiguous(), 0.0), x[:, 0])


# ---------------------------------------------------------------------------
# Gradients and strategies on small inputs


GRAD_SCANS = sorted(name for name, (_, _, _, inplace, _) in SCANS.items() if not inplace)


@pytest.mark.parametrize("name", GRAD_SCANS)
def test_scan_gradients(name, always_vectorize):
    fn, shape, data, _, exact = SCANS[name]
    x = data(*SHAPES[shape](60), seed=3)
    _assert_scan(fn, x)
    assert_equivalent(fn, x, trials=3)
    x.requires_grad_()
    if not exact:
        # running extremes with grad keep the loop today (selections under grad are
        # refused, see the README's known limits): only equivalence is asserted for them
        _assert_scan(fn, x)
    assert_equivalent(fn, x, grad=True)


@pytest.mark.parametrize("a", [0.0, 0.5, 0.9, 0.999, 1.0, -1.0])
@pytest.mark.parametrize("name", sorted(LINEAR))
def test_linear_recurrence_gradients(name, a, always_vectorize):
    fn, shape = LINEAR[name]
    x = _randn(*SHAPES[shape](150), seed=4).requires_grad_()
    _assert_scan(fn, x, a)
    assert_equivalent(fn, x, a, grad=True)


@pytest.mark.parametrize("name", sorted(n for n, spec in SCANS.items() if spec[3]))
def test_inplace_prefix_small(name, always_vectorize):
    fn, shape, data, _, _ = SCANS[name]
    x = data(*SHAPES[shape](40), seed=5)
    _assert_scan(fn, x)
    assert_equivalent(fn, x, trials=3)


def test_inplace_prefix_on_a_tensor_that_requires_grad_keeps_the_loop(always_vectorize):
    x = _randn(40, 3, seed=6)
    _assert_scan(prefix_rows_of_copy, x)
    xg = x.clone().requires_grad_()
    assert explain(prefix_rows_of_copy, xg).path == "python"   # documented guard
    assert_equivalent(prefix_rows_of_copy, xg, grad=True)


@pytest.mark.parametrize("fn", [prefix_rows, prefix_cols])
def test_inplace_prefix_on_a_transposed_argument(fn, always_vectorize):
    base = _randn(40, 5, seed=7)
    x = base.clone().t()                     # non-contiguous: the loop writes through the view
    want = fn.__wrapped__(base.clone().t())
    got = fn(x)
    assert got is x
    torch.testing.assert_close(got, want)


def test_running_extreme_ties_keep_the_loop_gradient(always_vectorize):
    # torch.maximum splits the gradient between equal values; cummax does not
    x = torch.tensor([[1.0, 2.0], [1.0, 2.0], [3.0, 2.0], [3.0, 0.0]], requires_grad=True)
    assert_equivalent(cummax_rows, x, grad=True)
    assert_equivalent(cummin_cols, torch.randint(0, 3, (3, 20)).float().requires_grad_(), grad=True)


@pytest.mark.parametrize("n", [0, 1, 2])
@pytest.mark.parametrize("fn, args", [(cumsum_rows, ()), (cumprod_rows, ()), (cummax_rows, ()),
                                      (decay_rows, (0.9,)), (returns_reversed, (0.99,))],
                         ids=["cumsum", "cumprod", "cummax", "decay", "returns"])
def test_short_sequences(fn, args, n, always_vectorize):
    x = _randn(n, 3, seed=8)
    assert_equivalent(fn, x, *args)
    if n:
        _assert_scan(fn, x, *args)


def test_decay_with_initial_state_argument(always_vectorize):
    @autovec
    def ema_from(x, h, a):
        trace = []
        for t in range(x.shape[0]):
            h = a * h + (1 - a) * x[t]
            trace.append(h)
        return torch.stack(trace), h

    x, h0 = _randn(2000, 4, seed=9), _randn(4, seed=10)
    _assert_scan(ema_from, x, h0, 0.99)
    exact, exact_h = ema_from.__wrapped__(x.double(), h0.double(), 0.99)
    loop, loop_h = ema_from.__wrapped__(x, h0, 0.99)
    got, got_h = ema_from(x, h0, 0.99)
    assert got_h.shape == loop_h.shape and got_h.dtype == loop_h.dtype
    for g, lp, e in ((got, loop, exact), (got_h, loop_h, exact_h)):
        assert (g.double() - e).abs().max() <= 4 * (lp.double() - e).abs().max() + 2 * EPS32 * e.abs().max()
    assert_equivalent(ema_from, x[:100], h0.clone().requires_grad_(), 0.9, grad=True)


def test_per_feature_tensor_factor(always_vectorize):
    x = _randn(2000, 3, seed=11)
    a = torch.tensor([0.5, 0.99, -0.9])
    _assert_scan(decay_rows, x, a)
    _assert_close_to_float64(decay_rows, x, a)
    assert_equivalent(decay_rows, x[:100], a.clone().requires_grad_(), grad=True)


# ---------------------------------------------------------------------------
# Where autovec keeps the loop on purpose


@pytest.mark.parametrize("a", [1.5, -1.5, 1.001, -1.0001, 2])
def test_growing_factor_keeps_the_loop(a, always_vectorize):
    # documented: |a| > 1 would lose accuracy in the blocked form
    _assert_python_and_exact(decay_rows, _randn(300, 3, seed=12), a)
    _assert_python_and_exact(returns_reversed, _randn(300, seed=13), a)


def test_growing_tensor_factor_keeps_the_loop(always_vectorize):
    _assert_python_and_exact(decay_rows, _randn(300, 3, seed=14), torch.tensor([0.5, 1.5, 0.9]))


@pytest.mark.parametrize("fn, args", [(decay_rows, (0.9,)), (cummax_rows, ()), (cumsum_rows, ())],
                         ids=["decay", "cummax", "cumsum"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_values(fn, args, bad, always_vectorize):
    x = _randn(200, 3, seed=15)
    x[50, 1] = bad
    want = fn.__wrapped__(x.clone(), *args)
    got = fn(x.clone(), *args)
    torch.testing.assert_close(got, want, equal_nan=True)
    # non-finite values in a linear recurrence, and NaN in a running extreme, keep the loop
    if fn is decay_rows or (fn is cummax_rows and math.isnan(bad)):
        _assert_python_and_exact(fn, x, *args)


@autovec
def returns_with_dones(r, done, gamma):
    g = 0.0
    out = torch.empty_like(r)
    for t in reversed(range(r.shape[0])):
        g = r[t] + gamma * g * (1 - done[t])
        out[t] = g
    return out


@autovec
def gated_rows(x, z):
    h = torch.zeros(x.shape[1])
    out = []
    for t in range(x.shape[0]):
        gate = torch.sigmoid(z[t])
        h = gate * h + (1 - gate) * x[t]
        out.append(h)
    return torch.stack(out)


@autovec
def ema_lerp_form(x, a):
    h = x[0]
    res = []
    for t in range(x.shape[0]):
        h = h + a * (x[t] - h)
        res.append(h)
    return torch.stack(res)


@autovec
def decay_after_add(x, a):
    h = torch.zeros(x.shape[1])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        h = a * (h + x[t])
        out[t] = h
    return out


@pytest.mark.parametrize("n", [300, 4000])
@pytest.mark.parametrize("gamma", [0.9, 0.99, 1.0])
def test_discounted_returns_with_dones_are_a_parallel_scan(n, gamma, always_vectorize):
    g = torch.Generator().manual_seed(16)
    r, done = torch.randn(n, generator=g), (torch.rand(n, generator=g) < 0.05).float()
    ex = _assert_scan(returns_with_dones, r, done, gamma)
    assert "changes every step" in ex.loops[0].reason
    _assert_close_to_float64(returns_with_dones, r, done, gamma)


@pytest.mark.parametrize("n", [50, 3000])
def test_gated_recurrence_with_a_per_step_gate(n, always_vectorize):
    x, z = _randn(n, 4, seed=21), _randn(n, 4, seed=22)
    _assert_scan(gated_rows, x, z)
    _assert_close_to_float64(gated_rows, x, z)


@pytest.mark.parametrize("fn", [ema_lerp_form, decay_after_add], ids=["lerp-form", "factor-outside"])
@pytest.mark.parametrize("a", [0.01, 0.5, 0.9])
def test_other_spellings_of_a_decay(fn, a, always_vectorize):
    x = _randn(2000, 3, seed=23)
    _assert_scan(fn, x, a)
    _assert_close_to_float64(fn, x, a)


def test_per_step_factors_keep_gradients(always_vectorize):
    g = torch.Generator().manual_seed(24)
    r = torch.randn(40, 3, generator=g, requires_grad=True)
    done = (torch.rand(40, 3, generator=g) < 0.2).float()
    assert_equivalent(returns_with_dones, r, done, 0.95, grad=True)
    x, z = _randn(30, 4, seed=25).requires_grad_(), _randn(30, 4, seed=26).requires_grad_()
    assert_equivalent(gated_rows, x, z, grad=True)


def test_a_per_step_factor_above_one_keeps_the_loop(always_vectorize):
    r = _randn(100, seed=29)
    done = torch.zeros(100)
    done[40] = -1.0   # a factor of gamma * 2 at one step
    _assert_python_and_exact(returns_with_dones, r, done, 0.9)


# Related forms autovec does not rewrite as a scan today: they must still give the loop's
# answer (no path assertion: these are missing rewrites, not decisions).


@autovec
def suffix_inplace(x):
    for i in reversed(range(x.shape[0] - 1)):
        x[i] += x[i + 1]
    return x


@autovec
def alternating_inplace(x):
    for i in range(1, x.shape[0]):
        x[i] -= x[i - 1]
    return x


@autovec
def cumprod_clone_list(x):
    p = torch.ones_like(x[0])
    res = []
    for i in range(x.shape[0]):
        p *= x[i]
        res.append(p.clone())
    return torch.stack(res)


@autovec
def ema_lerp_form(x, a):
    h = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        h = h + a * (x[t] - h)
        out[t] = h
    return out


@autovec
def ema_torch_lerp(x, a):
    h = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        h = torch.lerp(h, x[t], a)
        out[t] = h
    return out


@autovec
def decay_two_statements(x, a):
    h = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        h *= a
        h += x[t]
        out[t] = h
    return out


@pytest.mark.parametrize("fn, args", [
    (suffix_inplace, ()), (alternating_inplace, ()), (cumprod_clone_list, ()),
    (ema_lerp_form, (0.1,)), (ema_torch_lerp, (0.1,)), (decay_two_statements, (0.9,)),
], ids=["suffix_inplace", "alternating_inplace", "cumprod_clone_list", "ema_lerp_form", "ema_torch_lerp",
        "decay_two_statements"])
def test_unrewritten_recurrences_stay_exact(fn, args, always_vectorize):
    x = _near_one(100, 3, seed=18)
    assert_equivalent(fn, x, *args, trials=2)


# ---------------------------------------------------------------------------
# Regressions: bugs this file found (both fixed)


@pytest.mark.parametrize("a", [0.9, 0.999])
def test_float64_decay_keeps_float64_accuracy(a, always_vectorize):
    x = _randn(2000, 3, seed=19).double()
    _assert_scan(decay_rows, x, a)
    assert_equivalent(decay_rows, x, a)


@pytest.mark.parametrize("fn, shape", [(decay_rows, (64, 2048)), (decay_cols, (2048, 64))],
                         ids=["rows", "cols"])
def test_wide_state_linear_recurrence_is_vectorized(fn, shape, always_vectorize):
    x = _randn(*shape, seed=20)
    _assert_close_to_float64(fn, x, 0.9)
    ex = explain(fn, x, 0.9)
    assert ex.path == "vectorized", str(ex)


# ---------------------------------------------------------------------------
# Running log-sum-exp: torch.logaddexp accumulators (logcumsumexp / logsumexp)


@autovec
def lse_rows(x):
    s = torch.full_like(x[0], float("-inf"))
    out = []
    for t in range(x.shape[0]):
        s = torch.logaddexp(s, x[t])
        out.append(s)
    return torch.stack(out)


@autovec
def lse_cols_reversed(x):
    s = torch.full((x.shape[0],), float("-inf"), dtype=x.dtype)
    out = torch.empty_like(x)
    for j in reversed(range(x.shape[1])):
        s = torch.logaddexp(x[:, j], s)
        out[:, j] = s
    return out


@autovec
def lse_total(x):
    s = torch.tensor(float("-inf"), dtype=x.dtype)
    for row in x:
        s = torch.logaddexp(s, row.sum())
    return s


@pytest.mark.parametrize("fn, shape, strategy", [
    (lse_rows, (2000, 3), "scan"), (lse_rows, (10000,), "scan"),
    (lse_cols_reversed, (4, 3000), "scan"), (lse_total, (3000, 5), "reduction")],
    ids=["rows", "long", "cols-reversed", "total"])
def test_running_log_sum_exp(fn, shape, strategy, always_vectorize):
    x = _randn(*shape, seed=31) * 10
    ex = explain(fn, x)
    assert ex.path == "vectorized" and [lp.strategy for lp in ex.loops] == [strategy], str(ex)
    assert "log-sum-exp" in ex.loops[0].reason
    _assert_close_to_float64(fn, x)
    assert_equivalent(fn, _randn(*[min(s, 40) for s in shape], seed=32).requires_grad_(), grad=True)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_log_sum_exp_with_nan_or_inf_keeps_the_loop(bad, always_vectorize):
    x = _randn(100, 3, seed=33)
    x[17, 2] = bad
    _assert_python_and_exact(lse_rows, x)


def test_log_sum_exp_with_minus_inf_is_a_scan(always_vectorize):
    x = _randn(100, 3, seed=34)
    x[:10] = float("-inf")
    _assert_scan(lse_rows, x)
    got, want = lse_rows(x), lse_rows.__wrapped__(x)
    torch.testing.assert_close(got, want)


# ---------------------------------------------------------------------------
# Running extremes with Python's max / min or an `if` tracker, read in the loop


@autovec
def py_running_max(x):
    m = float("-inf")
    out = []
    for i in range(x.shape[0]):
        m = max(m, x[i].item())
        out.append(m)
    return out


@autovec
def tensor_running_min(x):
    m = x[0]
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        m = min(x[i], m)
        out[i] = m * 2
    return out


@autovec
def tracker_read_in_loop(x):
    best = x[0]
    gap = torch.empty_like(x)
    for i in range(x.shape[0]):
        if x[i] > best:
            best = x[i]
        gap[i] = best - x[i]
    return gap, best


@autovec
def int_start_float_values(x):
    m = 0
    out = []
    for i in range(x.shape[0]):
        m = max(m, x[i].item())
        out.append(m)
    return out


@pytest.mark.parametrize("fn", [py_running_max, tensor_running_min, tracker_read_in_loop])
@pytest.mark.parametrize("n", [1, 7, 3000])
def test_running_extremes_read_in_the_loop(fn, n, always_vectorize):
    x = _randn(n, seed=35)
    ex = explain(fn, x)
    assert ex.path == "vectorized" and [lp.strategy for lp in ex.loops] == ["scan"], str(ex)
    assert_equivalent(fn, x)
    got, want = fn(x.clone()), fn.__wrapped__(x.clone())
    if isinstance(want, list):
        assert got == want and [type(v) for v in got] == [type(v) for v in want]


def test_running_extremes_with_ties_and_repeats(always_vectorize):
    x = torch.tensor([1.0, 3.0, 3.0, -2.0, 3.0, 5.0, 5.0])
    for fn in (py_running_max, tensor_running_min, tracker_read_in_loop):
        assert_equivalent(fn, x)


@pytest.mark.parametrize("x", [torch.tensor([-1.0, 0.5, 2.0]), torch.tensor([0.5, -1.0, 2.0])],
                         ids=["start-survives", "start-beaten"])
def test_an_int_start_keeps_the_loops_types(x, always_vectorize):
    got, want = int_start_float_values(x), int_start_float_values.__wrapped__(x)
    assert got == want and [type(v) for v in got] == [type(v) for v in want]


def test_running_extremes_with_nan_or_grad_keep_the_loop(always_vectorize):
    x = _randn(50, seed=36)
    x[20] = float("nan")
    assert explain(tracker_read_in_loop, x).path == "python"
    assert_equivalent(tracker_read_in_loop, x)
    y = _randn(50, seed=37).requires_grad_()
    assert explain(tensor_running_min, y).path == "python"
    assert_equivalent(tensor_running_min, y, grad=True)


# Running arg-best read in the loop: cummax / cummin with the index (or any payload) as the loop had it


@autovec
def running_argmax_items(x):
    best = float("-inf")
    idx = -1
    vals, where = [], []
    for i in range(x.shape[0]):
        v = x[i].item()
        if v > best:
            best, idx = v, i
        vals.append(best)
        where.append(idx)
    return vals, where, best, idx


@autovec
def running_argmin_ties_last(x):
    best = x[0]
    j = 0
    out_v = torch.empty_like(x)
    out_j = torch.zeros(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        if x[i] <= best:
            best = x[i]
            j = i
        out_v[i] = best
        out_j[i] = j
    return out_v, out_j, j


@autovec
def running_argmax_none_start(x):
    best = 10.0
    idx = None
    where = []
    for i in range(x.shape[0]):
        v = x[i].item()
        if v > best:
            best, idx = v, i
        where.append(idx)
    return where


@pytest.mark.parametrize("fn", [running_argmax_items, running_argmin_ties_last])
@pytest.mark.parametrize("x", [torch.tensor([0.5, 2.0, 2.0, -1.0, 3.0, 3.0, 1.0]), _randn(3000, seed=38),
                               torch.tensor([1.0]), torch.zeros(6)], ids=["ties", "long", "one", "all-equal"])
def test_running_arg_extremes_read_in_the_loop(fn, x, always_vectorize):
    ex = _assert_scan(fn, x)
    assert "follows the running best" in ex.loops[0].reason
    got, want = fn(x.clone()), fn.__wrapped__(x.clone())
    assert_equivalent(fn, x)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert g == w and [type(a) for a in g] == [type(a) for a in w]


def test_a_payload_that_starts_as_none_keeps_the_loop_while_it_survives(always_vectorize):
    x = torch.tensor([1.0, 12.0, 3.0])        # the first step keeps best = 10.0 and idx = None
    assert explain(running_argmax_none_start, x).path == "python"
    assert running_argmax_none_start(x) == running_argmax_none_start.__wrapped__(x)
    y = torch.tensor([11.0, 12.0, 3.0])       # beaten at once: None never reaches the output
    assert explain(running_argmax_none_start, y).path == "vectorized"
    assert running_argmax_none_start(y) == running_argmax_none_start.__wrapped__(y)


@pytest.mark.parametrize("x", [[float("-inf")], [float("-inf"), float("-inf"), 1.0], [float("-inf"), 1.0]])
@pytest.mark.parametrize("start", [0.0, float("-inf")])
def test_log_sum_exp_gradients_with_minus_inf_are_the_loops(x, start, always_vectorize):
    # fuzzer family scan2 (seeds 1121, 5266): logcumsumexp's gradient over -inf differs from the loop's
    @autovec
    def running(x):
        s = torch.tensor(start)
        for t in range(x.shape[0]):
            s = torch.logaddexp(s, x[t])
        return s
    assert_equivalent(running, torch.tensor(x, requires_grad=True), grad=True)


def test_the_running_values_own_body_runs_batched(monkeypatch):
    """The body that computes what a running sum adds (the scan's pre-body) is rewritten into
    whole-batch operations like the loop body, under its own tag (no vmap)."""
    import sys
    from autovec import autovec
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from corpus import CORPUS
    for name in ("running_sum", "discounted_returns", "drawdown"):
        fn, inputs, _, _ = CORPUS[name]
        fast = autovec(fn)
        for _ in range(2):
            torch.testing.assert_close(fast(*inputs()), fn(*inputs()))
        modes = fast._autovec_state.runtime.fast
        assert any(tag for _, _, tag in modes) and set(modes.values()) == {"batched"}, (name, modes)


# ----------------------------------------------------------------------------- counts read in the loop
# `if c: k += 1` then `ids[i] = k`, with `k = 0` before the loop: `k += 1 * int(bool(c))`, a
# running sum of Python ints (analysis/loops.py, _counted)


def segment_ids(x, thr: float):
    ids = torch.empty(x.shape[0], dtype=torch.long)
    k = 0
    for i in range(x.shape[0]):
        if x[i] > thr:
            k += 1
        ids[i] = k
    return ids


def countdown(x):
    out = []
    k = 10
    for i in range(x.shape[0]):
        if x[i].item() < 0:
            k -= 2
        out.append(k * 3)
    return out, k


def truthy_count(x):
    out = torch.empty(x.shape[0], dtype=torch.long)
    k = 0
    for i in range(x.shape[0]):
        if x[i]:
            k += 1
        out[i] = k
    return out


@pytest.mark.parametrize("fn, args", [
    (segment_ids, (torch.randn(40), 0.3)),
    (countdown, (torch.randn(25),)),
    (truthy_count, (torch.tensor([0.0, 0.5, -0.0, 2.0, float("nan"), 0.0]),)),
], ids=["segment_ids", "countdown", "truthy_count"])
def test_counts_read_in_the_loop_are_scans_of_python_ints(fn, args, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    f = autovec(fn)
    got = f(*args)
    assert explain(f, *args).path == "vectorized"
    assert repr(got) == repr(fn(*args))        # Python ints stay ints, tensors their dtype


def float_count(x):
    out = []
    k = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:
            k += 1
        out.append(k)
    return out


def rows_count(x):
    out = torch.empty(x.shape[0], dtype=torch.long)
    k = 0
    for i in range(x.shape[0]):
        if x[i] > 0:          # a row of several elements: the loop raises
            k += 1
        out[i] = k
    return out


def test_other_counts_keep_the_loop_and_its_errors(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(12)
    f = autovec(float_count)
    assert repr(f(x)) == repr(float_count(x))
    assert explain(f, x).path == "python"      # (a float start: not rewritten)
    raises_as_loop(RuntimeError, rows_count, torch.randn(5, 2))


# (stop 22, the scans probe)

def running_max_list(x, m):
    out = []
    for i in range(x.shape[0]):
        m = torch.maximum(m, x[i])
        out.append(m)
    return out, m


def running_lse(x, s):
    for t in range(x.shape[0]):
        s = torch.logaddexp(s, x[t])
    return s


def count_ids(c):
    k = 0
    ids = torch.zeros(c.shape[0], dtype=torch.long)
    for i in range(c.shape[0]):
        k += int(c[i])
        ids[i] = k
    return ids, k


def flip_from(x, s):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s = x[i] - s
        out[i] = s
    return out, s


def ema_small_factor(x, a):
    h = torch.zeros(x.shape[1])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        h = h + a * (x[t] - h)
        out[t] = h
    return out


@pytest.mark.parametrize("start, data", [(lambda: torch.full((1,), -1e9), lambda: torch.randn(7)),
                                         (lambda: torch.tensor(-1e9), lambda: torch.randn(7).half())],
                         ids=["start with a dimension", "float32 start, float16 rows"])
def test_running_extremes_take_the_starts_shape_and_dtype(start, data, always_vectorize):
    fast = autovec(running_max_list)
    for _ in range(3):
        x = data()
        (wo, wm), (go, gm) = running_max_list(x, start()), fast(x, start())
        assert [(t.shape, t.dtype) for t in go] == [(t.shape, t.dtype) for t in wo]
        assert gm.shape == wm.shape and gm.dtype == wm.dtype and torch.equal(gm, wm)


def test_log_sum_exp_of_half_rows_from_a_float32_start(always_vectorize):
    x, s = torch.randn(50, 2).half(), torch.full((2,), -float("inf"))
    want = running_lse(x, s)
    for _ in range(3):
        torch.testing.assert_close(autovec(running_lse)(x, s), want, rtol=1e-6, atol=1e-6)


def test_counts_of_int_conversions_stay_ints(always_vectorize):
    fast = autovec(count_ids)
    for c in (torch.tensor([1, 0, 1, 1]), torch.tensor([True, False, True]), torch.tensor([1.5, 2.5, 0.5])):
        for _ in range(3):
            (wi, wk), (gi, gk) = count_ids(c), fast(c)
            assert torch.equal(gi, wi) and type(gk) is type(wk) and gk == wk


def test_a_linear_recurrence_from_a_bool_raises_as_the_loop(always_vectorize):
    fast = autovec(flip_from)
    x = torch.randn(7, 3)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="bool"):
            flip_from(x, True)
        with pytest.raises(RuntimeError, match="bool"):
            fast(x, True)


@pytest.mark.parametrize("a", [1e-3, 1e-5])
def test_a_small_factor_keeps_its_digits(a):
    x = torch.randn(20_000, 2) + 3
    exact = ema_small_factor(x.double(), a)
    loop_err = (ema_small_factor(x, a).double() - exact).abs().max().item()
    fast = autovec(ema_small_factor)
    fast(x, a)
    got = fast(x, a)
    assert (got.double() - exact).abs().max().item() <= 2 * loop_err + 1e-6
    assert explain(fast, x, a).path == "vectorized"


# ---------------------------------------------------------------------------
# Tensor factors near 1 (found by a probe: 24-32 times the loop's error at a = 1e-4)


def _ema_tensor_rate(x, a, h0):
    h = h0
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        h = h + a * (x[t] - h)       # the factor 1 - a is computed, never by the loop
        out[t] = h
    return out


def _decay_tensor(x, a, h0):
    h = h0
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        h = a * h + x[t]             # the factor is the loop's own value
        out[t] = h
    return out


def _errors(fn, x, a, h0):
    got = autovec(fn)(x, a, h0)
    loop = fn(x, a, h0)
    exact = fn(x.double(), a.double(), h0.double())
    return (got.double() - exact).abs().max().item(), (loop.double() - exact).abs().max().item(), got, loop


@pytest.mark.parametrize("rate", [1e-4, 1e-3])
def test_a_computed_float32_factor_near_one_keeps_the_loop(rate):
    x, h0 = 3 + _randn(20000, 4, seed=3), torch.full((4,), 3.0)
    a = torch.tensor(rate)
    assert explain(_ema_tensor_rate, x, a, h0).path == "python"
    err, loop_err, got, loop = _errors(_ema_tensor_rate, x, a, h0)
    assert torch.equal(got, loop)


@pytest.mark.parametrize("a", [0.999, 0.9999, -0.999, 0.995])
def test_a_plain_float32_factor_near_one_runs_in_float64(a):
    x, h0 = _randn(20000, 4, seed=4), torch.zeros(4)
    a = torch.tensor(a)
    _assert_scan(_decay_tensor, x, a, h0)
    err, loop_err, got, loop = _errors(_decay_tensor, x, a, h0)
    assert got.dtype == torch.float32
    assert err <= loop_err + 2 * EPS32 * loop.abs().max().item()


# A running value stored back into the row it read (`s = s + x[t]; x[t] = s`): the term is consumed
# by the update's arithmetic at its step, so the row's view is no value kept past the store

def cumsum_back_into_rows(x):
    s = 0.0
    for t in range(x.shape[0]):
        s = s + x[t]
        x[t] = s
    return x, s


def running_max_back_into_rows(x):
    m = torch.full_like(x[0], -1e9)
    for t in range(x.shape[0]):
        m = torch.maximum(m, x[t])
        x[t] = m
    return x, m


@pytest.mark.parametrize("fn", [cumsum_back_into_rows, running_max_back_into_rows])
def test_a_running_value_stored_back_into_its_rows(fn, always_vectorize):
    x = torch.randint(-5, 6, (40, 3)).double()
    a, b = x.clone(), x.clone()
    (wx, ws), (gx, gs) = fn(a), autovec(fn)(b)
    assert torch.equal(a, b) and torch.equal(ws, gs) and gx is b
    assert explain(fn, x.clone()).path == "vectorized"


def test_a_running_value_kept_as_the_rows_view_keeps_the_loop(always_vectorize):
    def kept(x, y):
        for t in range(x.shape[0]):
            r = x[t]             # (a view of the row, read after the store: the loop's shows it)
            x[t] = r * 2
            y[t] = r + 1
        return x, y
    x = torch.randn(10, 2)
    a, b = (x.clone(), torch.zeros(10, 2)), (x.clone(), torch.zeros(10, 2))
    kept(*a), autovec(kept)(*b)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# ---------------------------------------------------------------------------
# A running sum of several terms per step, `s = s + a[t] + b[t]` (analysis._terms_output), read
# in the loop: one cumsum of each step's terms combined (runtime.sum_terms checks their types)


@autovec
def two_terms_rows(x, y):
    s = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        s = s + x[t] - y[t]
        out[t] = s
    return out


@autovec
def two_terms_stored(x, y):
    out = torch.zeros_like(x)
    out[0] = x[0]
    for t in range(1, x.shape[0]):
        out[t] = out[t - 1] + x[t] + y[t]
    return out


@autovec
def terms_of_numbers(x, bonus):
    s = 0.0
    trace = []
    for t in range(x.shape[0]):
        s = s + x[t].sum().item() + bonus
        trace.append(s)
    return trace


@autovec
def terms_before(x, y):
    s = torch.zeros_like(x[0])
    starts = torch.empty_like(x)
    for t in range(x.shape[0]):
        starts[t] = s
        s = s + x[t] + 2 * y[t]
    return starts, s


@autovec
def terms_mixed_dtypes(x, y):
    s = torch.zeros_like(x[0])
    out = []
    for t in range(x.shape[0]):
        s = s + x[t] + y[t].double()
        out.append(s)
    return torch.stack(out)


@pytest.mark.parametrize("fn", [two_terms_rows, two_terms_stored], ids=["running", "stored"])
def test_a_running_sum_of_two_terms_is_one_cumsum(fn, always_vectorize):
    x, y = _randn(3000, 4, seed=41), _randn(3000, 4, seed=42)
    _assert_scan(fn, x, y)
    _assert_close_to_float64(fn, x, y)
    assert_equivalent(fn, _randn(30, 4, seed=43).requires_grad_(), _randn(30, 4, seed=44).requires_grad_(),
                      grad=True)


def test_terms_of_python_numbers_stay_python_numbers(always_vectorize):
    x = _randn(200, 3, seed=45)
    _assert_scan(terms_of_numbers, x, 0.25)
    got, want = terms_of_numbers(x, 0.25), terms_of_numbers.__wrapped__(x, 0.25)
    assert all(type(v) is float for v in got) and got == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_terms_read_before_the_update(always_vectorize):
    x, y = _randn(40, 3, seed=46), _randn(40, 3, seed=47)
    _assert_scan(terms_before, x, y)
    assert_equivalent(terms_before, x, y)
    starts, s = terms_before(x, y)
    assert torch.equal(starts[0], torch.zeros(3)) and torch.allclose(starts[1:], torch.cumsum(x + 2 * y, 0)[:-1],
                                                                     atol=1e-5)


def test_terms_of_several_dtypes_keep_the_loop(always_vectorize):
    # (the loop promotes at every step: float32 + float64 rows)
    _assert_python_and_exact(terms_mixed_dtypes, _randn(50, 3, seed=48), _randn(50, 3, seed=49))


@autovec
def terms_around(x, y):
    s = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        s = x[t] + (s - y[t])
        out[t] = s
    return out


@autovec
def in_place_with_a_term(x, y):
    for i in range(1, x.shape[0]):
        x[i] += x[i - 1] + y[i]
    return x


@autovec
def subtracted_from(x, y):
    s = torch.zeros_like(x[0])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        s = x[t] - (s + y[t])
        out[t] = s
    return out


def test_the_running_value_anywhere_in_a_sum(always_vectorize):
    # (`a + (s - b)` is `(s - b) + a` bit for bit: the running value first, its terms after it)
    x, y = _randn(3000, 4, seed=50), _randn(3000, 4, seed=51)
    _assert_scan(terms_around, x, y)
    _assert_close_to_float64(terms_around, x, y)
    _assert_scan(in_place_with_a_term, x.clone(), y)
    _assert_close_to_float64(in_place_with_a_term, x, y, inplace=True)
    assert_equivalent(in_place_with_a_term, _randn(30, 4, seed=52), _randn(30, 4, seed=53))


def test_a_subtracted_running_value_is_no_running_sum(always_vectorize):
    # (`x[t] - (s + y[t])` alternates the sign of s: a recurrence with factor -1, not a cumsum)
    x, y = _randn(200, 4, seed=54), _randn(200, 4, seed=55)
    ex = explain(subtracted_from, x, y)
    assert "cumsum" not in str(ex)
    torch.testing.assert_close(subtracted_from(x, y), subtracted_from.__wrapped__(x, y), rtol=1e-4, atol=1e-4)


def test_python_number_steps_onto_a_tensor_keep_its_dtype(always_vectorize):
    # (fuzz lost/stop48 seed 853023, pre-existing: the steps, Python floats in the loop, came as a
    # float64 tensor, and the running float32 tensor became float64)
    def floats(x):
        s = torch.zeros(())
        out = []
        for t in range(x.shape[0]):
            s = (x[t].sum().item() + 1) + s
            out.append(s)
        return s, out

    def ints(x):
        s = torch.zeros((), dtype=torch.int32)
        out = []
        for t in range(x.shape[0]):
            s = s + (int(x[t].sum()) + 1)
            out.append(s)
        return s, out
    x = _randn(20, 3, seed=56)
    for fn in (floats, ints):
        want, got = fn(x), autovec(fn)(x)
        assert got[0].dtype == want[0].dtype and [v.dtype for v in got[1]] == [v.dtype for v in want[1]]
        torch.testing.assert_close(got[0], want[0])
