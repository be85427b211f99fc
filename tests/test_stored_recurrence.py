"""Running values stored into an output and read back (`out[t] = a * x[t] + (1 - a) * out[t - 1]`),
planned as a running value `out_prev` (analysis.hoist stored_recurrences) that starts as the row
the first iteration reads and must be what the store keeps (runtime Token.carried_start /
carried_like); the loop as written is the fallback. Values, dtypes, errors, arguments after the
call, gradients and the path against the loop."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


# ----------------------------------------------------------------------------- vectorized forms

def ema_store(x, a: float):
    out = torch.empty_like(x)
    out[0] = x[0]
    for t in range(1, len(x)):
        out[t] = a * x[t] + (1 - a) * out[t - 1]
    return out


def ar1(eps, phi: float):
    y = torch.zeros_like(eps)
    for t in range(1, len(eps)):
        y[t] = phi * y[t - 1] + eps[t]
    return y


def gae_store(rewards, values, dones, gamma: float, lam: float):
    T = rewards.shape[0]
    adv = torch.zeros(T + 1, *rewards.shape[1:])
    for t in reversed(range(T)):
        delta = rewards[t] + gamma * values[t + 1] * (1 - dones[t]) - values[t]
        adv[t] = delta + gamma * lam * (1 - dones[t]) * adv[t + 1]
    return adv[:T]


def wraps_to_last(x):
    out = x.clone()
    for t in range(len(x)):          # (the first step reads out[-1]: the last row, as it is before the loop)
        out[t] = 0.5 * out[t - 1] + x[t]
    return out


def wraps_with_factor(x, w):
    out = x.clone()
    for t in range(len(x)):          # (out[-1], the start, is stored into last: its copy is what backward keeps)
        out[t] = w * out[t - 1] + x[t]
    return out


def running_sum(x):
    out = torch.zeros_like(x)
    out[0] = x[0]
    for t in range(1, x.shape[0]):
        out[t] = out[t - 1] + x[t]
    return out


def by_column(x, a: float):
    out = torch.zeros_like(x)
    for t in range(1, x.shape[1]):
        out[:, t] = a * out[:, t - 1] + x[:, t]
    return out


def ahead(eps, phi: float):
    y = torch.zeros_like(eps)
    for t in range(len(eps) - 1):
        y[t + 1] = phi * y[t] + eps[t]
    return y


def step_down(x, g: float):
    out = torch.zeros_like(x)
    out[-1] = x[-1]
    for t in range(len(x) - 2, -1, -1):
        out[t] = x[t] + g * out[t + 1]
    return out, t                    # (the index after the loop)


def into(out, eps, phi: float):
    for t in range(1, len(eps)):
        out[t] = phi * out[t - 1] + eps[t]
    return out


def ar1_inplace(y, phi: float):
    for t in range(1, len(y)):       # (the output is the input: y[t] is read before it is stored)
        y[t] = phi * y[t - 1] + y[t]
    return y


def reads_own_row(x):
    out = x.clone()
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + out[t]
    return out


def iir_update(x, a: float):
    for i in range(1, x.shape[0]):
        x[i] += a * x[i - 1]          # (as `x[i] = x[i] + a * x[i - 1]`, in x's dtype)
    return x


def discount_in_place(r, done, gamma: float):
    for t in reversed(range(len(r) - 1)):
        r[t] += gamma * r[t + 1] * ~done[t]
    return r


def decay_rows(x, a: float):
    for i in range(1, len(x)):
        x[i] *= 1 - a * x[i - 1].tanh()   # (not linear: the loop, as written, after the rewrite's try)
    return x


def int_update(x):
    for i in range(1, len(x)):
        x[i] += 0.5 * x[i - 1]            # (a float update of an int tensor: the loop raises)
    return x


def named_like_the_carry(x, a: float):
    out_prev = x.sum()
    out = torch.zeros_like(x)
    for t in range(1, len(x)):
        out[t] = a * out[t - 1] + x[t]
    return out, out_prev


def _grad(make):
    def made():
        args = make()
        return tuple(a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() and k == 0 else a
                     for k, a in enumerate(args))
    return made


T, F = 40, 6
VECTORIZED = [
    # (the stored row read before its store, the input's own value: new memory in the running form)
    (reads_own_row, lambda: (torch.randn(T, F),)),
    (ar1_inplace, lambda: (torch.randn(T, F), 0.5)),
    (iir_update, lambda: (torch.randn(T, F), 0.5)),
    (discount_in_place, lambda: (torch.randn(T), torch.rand(T) < 0.2, 0.9)),
    (ema_store, lambda: (torch.randn(T, F), 0.3)),
    (ema_store, lambda: (torch.randn(T), 0.8)),
    (ema_store, lambda: (torch.randn(T, F, dtype=torch.float64), 0.3)),
    (ar1, lambda: (torch.randn(T, F), 0.9)),
    (gae_store, lambda: (torch.randn(T, F), torch.randn(T + 1, F), (torch.rand(T, F) < 0.1).float(), 0.99, 0.95)),
    (wraps_to_last, lambda: (torch.randn(T, F),)),
    (running_sum, lambda: (torch.randn(T, F),)),
    (running_sum, lambda: (torch.randint(-5, 5, (T, F)),)),
    (by_column, lambda: (torch.randn(F, T), 0.7)),
    (ahead, lambda: (torch.randn(T, F), 0.9)),
    (step_down, lambda: (torch.randn(T, F), 0.9)),
    (into, lambda: (torch.zeros(T, F), torch.randn(T, F), 0.5)),
    (named_like_the_carry, lambda: (torch.randn(T, F), 0.5)),
    (ar1, _grad(lambda: (torch.randn(T, F), 0.9))),
    (wraps_with_factor, lambda: (torch.randn(T, F, requires_grad=True), torch.tensor(0.7))),
    (wraps_with_factor, lambda: (torch.randn(T, F, requires_grad=True), torch.rand(F))),
    (running_sum, _grad(lambda: (torch.randn(T, F),))),
    (ema_store, _grad(lambda: (torch.randn(T, F), 0.3))),
    (gae_store, _grad(lambda: (torch.randn(T, F), torch.randn(T + 1, F), (torch.rand(T, F) < 0.1).float(), 0.99,
                               0.95))),
]


def _outcome(fn, args):
    try:
        return fn(*args), None
    except Exception as e:   # noqa: BLE001
        return None, e


def _same(got, want, exact):
    assert type(got) is type(want)
    if isinstance(want, tuple):
        for g, w in zip(got, want):
            _same(g, w, exact)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.requires_grad == want.requires_grad
        if exact:
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert got == want


def _check(fn, make, exact=False):
    """The loop as written and autovec on the same fresh arguments: the result, the exception,
    the arguments after the call and the gradients of the arguments that require grad."""
    torch.manual_seed(0)
    a = make()
    torch.manual_seed(0)
    b = make()
    want, err = _outcome(fn, a)
    got, err2 = _outcome(autovec(fn), b)
    if err is not None:
        assert type(err2) is type(err) and str(err2) == str(err)
        return
    assert err2 is None, err2
    _same(got, want, exact)
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            _same(y.detach(), x.detach(), exact)       # (in place alike)
    first = want[0] if isinstance(want, tuple) else want
    if isinstance(first, torch.Tensor) and first.requires_grad and first.grad_fn is not None:
        _, err = _outcome(lambda: (first * torch.arange(first.numel()).reshape(first.shape).sin()).sum().backward(), ())
        g = got[0] if isinstance(got, tuple) else got
        _, err2 = _outcome(lambda: (g * torch.arange(g.numel()).reshape(g.shape).sin()).sum().backward(), ())
        assert type(err2) is type(err)       # (the loop's backward raises: so does the rewrite's)
        for x, y in zip(a, b):
            if isinstance(x, torch.Tensor) and x.requires_grad and x.is_leaf:
                torch.testing.assert_close(y.grad, x.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn, make", VECTORIZED)
def test_stored_recurrences_vectorize(fn, make):
    for _ in range(2):
        _check(fn, make)
    ex = explain(fn, *make())
    assert ex.path == "vectorized"
    assert ex.loops[0].strategy == "scan"


def test_an_update_in_place_keeps_the_gradients():
    # `x[i] += a * x[i - 1]` on a tensor autograd tracks (not a leaf: the loop raises on a leaf)
    leaf, leaf2 = torch.randn(T, F, requires_grad=True), None
    leaf2 = leaf.detach().clone().requires_grad_()
    fast = autovec(iir_update)
    for _ in range(2):
        fast(leaf2 * 1, 0.5)
    weights = torch.randn(T, F)
    (iir_update(leaf * 1, 0.5) * weights).sum().backward()
    (fast(leaf2 * 1, 0.5) * weights).sum().backward()
    torch.testing.assert_close(leaf2.grad, leaf.grad, rtol=1e-5, atol=1e-5)
    assert ran_modes(fast)       # (the last call ran the scan, not the loop)


def test_explain_names_the_carried_row():
    ex = explain(gae_store)
    assert "`adv[t + 1]` reads the row the step before stored" in ex.loops[0].reason
    assert "adv_prev = adv[T].clone()" in ex.rewritten_source
    assert "adv[t] = delta" in ex.loops[0].source           # (the loop as written)


def test_the_carry_avoids_user_names():
    ex = explain(named_like_the_carry)
    assert "out_prev11" not in ex.rewritten_source or "out_prev =" in ex.rewritten_source
    assert "out_prev = x.sum()" in ex.rewritten_source


# ----------------------------------------------------------------------------- the loop as written

def int_output(eps, phi: float):
    y = torch.zeros(len(eps), dtype=torch.long)
    for t in range(1, len(eps)):
        y[t] = phi * y[t - 1] + eps[t]      # (truncated on every store)
    return y


def narrower_output(eps, phi: float):
    y = torch.zeros(len(eps), dtype=torch.float32)
    for t in range(1, len(eps)):
        y[t] = phi * y[t - 1] + eps[t]      # (float64 values, rounded to float32 on every store)
    return y


def broadcast_row(eps, phi: float):
    y = torch.zeros(eps.shape[0], eps.shape[2])
    for t in range(1, len(eps)):
        y[t] = phi * y[t - 1] + eps[t]      # ((1, F) values stored into (F,) rows)
    return y


def python_numbers(eps, phi: float):
    y = torch.zeros(len(eps))
    for t in range(1, len(eps)):
        y[t] = phi * y[t - 1].item() + eps[t].item()
    return y


def two_back(x):
    out = torch.zeros_like(x)
    for t in range(2, len(x)):
        out[t] = 0.5 * out[t - 1] + 0.25 * out[t - 2] + x[t]
    return out


def reads_whole(x):
    out = torch.zeros_like(x)
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + x[t] * out.sum()
    return out


def read_in_condition(x):
    out = torch.zeros_like(x)
    for t in range(1, len(x)):
        if out[t - 1].sum() > 0:
            x[t] = -x[t]
        out[t] = 0.5 * out[t - 1] + x[t]
    return out


def second_store(x):
    out = torch.zeros_like(x)
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + x[t]
        out[t - 1] = 0
    return out


def conditional_store(x):
    out = torch.zeros_like(x)
    for t in range(1, len(x)):
        if t % 3:
            out[t] = 0.5 * out[t - 1] + x[t]
    return out


def with_break(x):
    out = torch.zeros_like(x)
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + x[t]
        if t > 5:
            break
    return out


def with_continue(x):
    out = torch.zeros_like(x)
    for t in range(1, len(x)):
        if t == 3:
            continue
        out[t] = 0.5 * out[t - 1] + x[t]
    return out


def step_two(x):
    out = torch.zeros_like(x)
    for t in range(2, len(x), 2):
        out[t] = 0.5 * out[t - 2] + x[t]
    return out


def wrong_offset(x):
    out = torch.zeros_like(x)
    for t in reversed(range(1, len(x))):
        out[t] = 0.5 * out[t - 1] + x[t]     # (reversed: out[t - 1] is not stored yet)
    return out


def short_output(x):
    out = torch.zeros(3, x.shape[1])
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + x[t]     # (IndexError at t = 3, after three stores)
    return out


def first_read_outside(x, y):
    out = torch.zeros(0, x.shape[1])
    for t in range(len(x)):
        v = y[t] * 2                          # (the loop raises here first when y is empty)
        out[t] = 0.5 * out[t - 1] + v
    return out


def empty_range(x):
    out = torch.empty(0, 3)
    for t in range(len(x)):
        out[t] = 0.5 * out[t - 1] + x[t]     # (never runs: out[-1] is never read)
    return out


def running_product(x):
    out = torch.ones_like(x)
    for t in range(1, len(x)):
        out[t] = out[t - 1] * x[t]
    return out


def gae_short(rewards, values, dones, gamma: float, lam: float):
    T = rewards.shape[0]
    adv = torch.zeros(T, *rewards.shape[1:])
    for t in reversed(range(T)):
        delta = rewards[t] + gamma * values[t + 1] * (1 - dones[t]) - values[t]    # (raises first for short values)
        adv[t] = delta + gamma * lam * (1 - dones[t]) * adv[t + 1]                 # (adv[T]: out of range)
    return adv


def test_a_first_read_outside_the_output_keeps_the_loop():
    ex = explain(gae_short, torch.randn(T, F), torch.randn(T + 1, F), torch.zeros(T, F), 0.9, 0.9)
    assert ex.path == "python"
    assert any("reads outside the output" in n for n in ex.notes)


def leaf_output(out, x):
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + x[t]
    return out


def list_output(x):
    out = [0.0] * len(x)
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + x[t]
    return out


def index_after(x):
    out = torch.zeros_like(x)
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + x[t]
    return out, t, out[-1] * 2


PYTHON = [
    (decay_rows, lambda: (torch.randn(T, F, dtype=torch.float64), 0.25)),
    (int_update, lambda: (torch.randint(-5, 5, (T, F)),)),
    (iir_update, lambda: (torch.randn(T, F, requires_grad=True), 0.5)),
    (int_output, lambda: (torch.randn(T) * 10, 0.5)),
    (narrower_output, lambda: (torch.randn(T, dtype=torch.float64), 0.5)),
    (broadcast_row, lambda: (torch.randn(T, 1, F), 0.5)),
    (python_numbers, lambda: (torch.randn(T), 0.5)),
    (two_back, lambda: (torch.randn(T, F),)),
    (reads_whole, lambda: (torch.randn(T, F) * 0.01,)),
    (read_in_condition, lambda: (torch.randn(T, F),)),
    (second_store, lambda: (torch.randn(T, F),)),
    (conditional_store, lambda: (torch.randn(T, F),)),
    (with_break, lambda: (torch.randn(T, F),)),
    (step_two, lambda: (torch.randn(T, F),)),
    (short_output, lambda: (torch.randn(T, F),)),
    (first_read_outside, lambda: (torch.randn(T, F), torch.randn(0, F))),
    (first_read_outside, lambda: (torch.randn(T, F), torch.randn(T, F))),
    (empty_range, lambda: (torch.randn(0, 3),)),
    (leaf_output, lambda: (torch.zeros(T, F, requires_grad=True), torch.randn(T, F))),
    (list_output, lambda: ([float(v) for v in torch.randn(T)],)),
    (gae_short, lambda: (torch.randn(T, F), torch.randn(T + 1, F), torch.zeros(T, F), 0.9, 0.9)),
    # (under gradients, a factor that requires grad keeps the output's row for backward: the loop's
    # backward raises after the later stores, and so must the call's)
    (wraps_with_factor, lambda: (torch.randn(T, F), torch.tensor(0.7, requires_grad=True))),
    (wraps_with_factor, lambda: (torch.randn(T, F, requires_grad=True), torch.rand(F, requires_grad=True))),
    (running_product, lambda: ((torch.rand(T, F) + 0.5).requires_grad_(),)),
    (gae_short, lambda: (torch.randn(T, F), torch.randn(T, F), torch.zeros(T, F), 0.9, 0.9)),
]


@pytest.mark.parametrize("fn, make", PYTHON)
def test_the_loop_as_written_decides(fn, make):
    _check(fn, make, exact=True)
    assert explain(fn, *make()).path == "python"


def test_a_continue_at_one_index_splits_the_range():
    # (`if t == 3: continue`: the pieces before and after index 3 are each a scan, the second
    # starting from the row the first stored; frontend._IndexSplits)
    for n in (0, 1, 3, 4, 5, T):
        _check(with_continue, lambda: (torch.randn(n, F),))
    assert explain(with_continue, torch.randn(T, F)).path == "vectorized"


def test_a_read_no_earlier_iteration_wrote_is_no_recurrence():
    # (reversed: out[t - 1] is stored by a later iteration, so every read sees the zeros it
    # started with, as the batch does: analysis.loops._ahead_read)
    _check(wrong_offset, lambda: (torch.randn(T, F),), exact=True)
    assert explain(wrong_offset, torch.randn(T, F)).path == "vectorized"


@pytest.mark.parametrize("make", [
    lambda: (lambda buf: (buf, buf, 0.5))(torch.randn(T, F)),              # (eps is the output)
    lambda: (lambda buf: (buf[1:], buf[:-1], 0.5))(torch.randn(T + 1, F)),  # (eps a shifted view of it)
    lambda: (lambda buf: (buf[:-1], buf[1:], 0.5))(torch.randn(T + 1, F)),
])
def test_an_output_that_aliases_an_input(make):
    """`into(out, eps)` with eps the output or a view of it: the rewritten loop's read of eps[t]
    meets the stores of earlier steps as the loop's did, or the alias guard keeps the loop."""
    _check(into, make, exact=False)


def test_index_and_output_read_after_the_loop():
    _check(index_after, lambda: (torch.randn(T, F),))
    assert explain(index_after, torch.randn(T, F)).path == "vectorized"


def grad_output(base, x):
    out = base * 1.0                  # (not a leaf: the stores join its graph)
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + x[t]
    return out


def test_gradients_through_an_output_that_requires_grad():
    make = lambda: (torch.randn(T, F, requires_grad=True), torch.randn(T, F, requires_grad=True))  # noqa: E731
    _check(grad_output, make)
    assert explain(grad_output, *make()).path == "vectorized"


def inside_element_loop(x, y):
    for row in x:
        row -= 1
        for t in range(1, len(y)):
            y[t] = 0.5 * y[t - 1] + row.sum()
    return x, y


def inside_python_loop(x, n: int):
    out = torch.zeros_like(x)
    for k in range(n):
        print(k)                      # (a side effect: this loop stays as written)
        for t in range(1, len(x)):
            out[t] = 0.5 * out[t - 1] + x[t] * k
    return out


@pytest.mark.parametrize("fn, make", [
    (inside_element_loop, lambda: (torch.randn(3, 4), torch.randn(T))),
    (inside_element_loop, lambda: ([1.0, 2.0], torch.randn(T))),
])
def test_a_stored_recurrence_inside_an_element_loop(fn, make):
    """The outer loop, rewritten as `x[k] -= 1`, goes back as written with the inner loop in it."""
    _check(fn, make)


def test_a_stored_recurrence_inside_a_python_loop(capsys):
    _check(inside_python_loop, lambda: (torch.randn(T, F), 3))
    ex = explain(inside_python_loop, torch.randn(T, F), 3)
    assert ex.path == "vectorized" and [r.strategy for r in ex.loops] == ["python", "scan"]


def two_names(out, out2, x):
    for t in range(1, len(x)):
        out[t] = 0.5 * out[t - 1] + x[t]
        if x[t].sum() > 0:
            out2[t] = x[t] * 3            # (out2 may be out: the next step reads what this stores)
    return out


@pytest.mark.parametrize("make", [
    lambda: (lambda b: (b, b, torch.randn(T, F)))(torch.zeros(T, F)),
    lambda: (lambda b: (b, b[:, :], torch.randn(T, F)))(torch.zeros(T, F)),
    lambda: (lambda b: (b[:T], b[T:], torch.randn(T, F)))(torch.zeros(2 * T, F)),
])
def test_another_output_that_shares_the_outputs_memory(make):
    _check(two_names, make)
    assert explain(two_names, *make()).path == "python"


def test_another_output_of_its_own():
    _check(two_names, lambda: (torch.zeros(T, F), torch.zeros(T, F), torch.randn(T, F)))
    assert explain(two_names, torch.zeros(T, F), torch.zeros(T, F), torch.randn(T, F)).path == "vectorized"


# ----------------------------------------------------------------------------- several in one loop

def two_moments(g, b1: float, b2: float):
    m = torch.zeros_like(g)
    v = torch.zeros_like(g)
    for t in range(1, g.shape[0]):
        m[t] = b1 * m[t - 1] + (1 - b1) * g[t]
        v[t] = b2 * v[t - 1] + (1 - b2) * g[t] ** 2
    return m, v


def two_moments_into(m, v, g):
    for t in range(1, g.shape[0]):
        m[t] = 0.9 * m[t - 1] + 0.1 * g[t]
        v[t] = 0.99 * v[t - 1] + 0.01 * g[t] * g[t]
    return m.sum() + v.sum()


def two_backwards(r, d):
    T = r.shape[0]
    a = torch.zeros(T + 1, *r.shape[1:])
    b = torch.zeros(T + 1, *r.shape[1:])
    for t in reversed(range(T)):
        a[t] = r[t] + 0.9 * (1 - d[t]) * a[t + 1]
        b[t] = r[t] * 2 + 0.5 * b[t + 1]
    return a[:T], b[:T]


def rows_and_columns(x):
    m = torch.zeros(x.shape[0], x.shape[1])
    v = torch.zeros(x.shape[1], x.shape[0])
    for t in range(1, x.shape[0]):
        m[t] = 0.5 * m[t - 1] + x[t]
        v[:, t] = 0.25 * v[:, t - 1] + x[t] * 2
    return m, v


def one_reads_the_other(g):
    m = torch.zeros_like(g)
    v = torch.zeros_like(g)
    for t in range(1, g.shape[0]):
        m[t] = 0.9 * m[t - 1] + g[t]
        v[t] = 0.5 * v[t - 1] + m[t]          # (m read where it is not the step before's: the loop)
    return m, v


SEVERAL = [
    (two_moments, lambda: (torch.randn(T, F), 0.9, 0.999)),
    (two_moments, lambda: (torch.randn(T, F, dtype=torch.float64, requires_grad=True), 0.8, 0.95)),
    (two_moments_into, lambda: (torch.zeros(T, F), torch.ones(T, F), torch.randn(T, F))),
    (two_backwards, lambda: (torch.randn(T, F), (torch.rand(T, 1) < 0.2).float())),
    (rows_and_columns, lambda: (torch.randn(T, T),)),
]


@pytest.mark.parametrize("fn, make", SEVERAL)
def test_several_stored_recurrences_in_one_loop(fn, make):
    for _ in range(2):
        _check(fn, make)
    ex = explain(fn, *make())
    assert ex.path == "vectorized"
    assert ex.loops[0].strategy == "scan"


@pytest.mark.parametrize("make", [
    lambda: (lambda b: (b, b, torch.randn(T, F)))(torch.zeros(T, F)),             # (one tensor for both)
    lambda: (lambda b: (b[:, :F], b[:, 1:], torch.randn(T, F)))(torch.zeros(T, F + 1)),   # (overlapping views)
    lambda: (torch.zeros(T, F), torch.zeros(T, F).t().contiguous().t(), torch.randn(T, F)),
])
def test_several_outputs_that_may_share_memory(make):
    _check(two_moments_into, make)


def test_an_output_read_at_its_own_row_by_another_keeps_the_loop():
    _check(one_reads_the_other, lambda: (torch.randn(T, F),))
    assert explain(one_reads_the_other, torch.randn(T, F)).path == "python"


def first_factor_requires_grad(x, w):
    out = torch.zeros_like(x)
    out2 = torch.zeros_like(x)
    for t in range(1, x.shape[0]):
        out[t] = x[t] + w * out[t - 1]
        out2[t] = 0.5 * out2[t - 1] + x[t] * 2
    return out, out2


def test_each_recurrence_is_checked_under_gradients():
    """The first output's factor requires grad: the loop's backward raises (its product keeps the
    row a later store changes), so the loop runs; the second recurrence's terms, computed after
    the first's, must not stand for the first's (found by the fuzzer, lost/stored_rec)."""
    make = lambda: (torch.randn(T, F, requires_grad=True), torch.tensor(-0.4, requires_grad=True))
    _check(first_factor_requires_grad, make)
    assert explain(first_factor_requires_grad, *make()).path == "python"


@pytest.mark.parametrize("shapes", [
    ((2, 1), (1, 3)), ((0,), (1,)), ((3,), (2, 3)), ((), (4,)), ((1,), ()), ((2, 3), (3,), (1, 1, 3)),
    ((0, 1), (5, 0, 4)), ((), ()), ((0,), (3,)), ((2,), (3,)), ((2, 3), (3, 2)), ((4, 1, 2), (3, 0)),
])
def test_broadcast_shapes_is_torchs(shapes):
    """autovec's broadcast_shapes (the scans' and accumulators' checks; torch's imports sympy on
    its first call in torch 2.13) gives torch's sizes and raises where torch's does."""
    from autovec.batching import broadcast_shapes
    try:
        want = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            broadcast_shapes(*shapes)
        return
    got = broadcast_shapes(*shapes)
    assert type(got) is torch.Size and got == want


def own_row_saved(y, phi: float, b):
    for i in range(1, y.shape[0]):
        y[i] = phi * y[i - 1] + y[i] * b[i]     # (y[i] saved by the product: backward raises)
    return y


def scaled_in_place(x, a: float):
    for i in range(1, x.shape[0]):
        x[i] *= 1 + a * x[i - 1]
    return x


@pytest.mark.parametrize("fn, make", [
    (own_row_saved, lambda: (torch.randn(T, F), 0.5, torch.randn(T, F, requires_grad=True))),
    (own_row_saved, lambda: (torch.randn(T, F), 0.5, torch.randn(T, F))),
    (scaled_in_place, lambda: (torch.randn(T, F), 0.1)),
])
def test_the_own_row_outside_a_sum_keeps_the_loop(fn, make):
    # the loop's backward raises where the row it saved was stored into after; a copy would not
    _check(fn, make, exact=True)
    assert explain(fn, *make()).path == "python"
