"""Several updates of one running value in an iteration (`c += a`, then `if m: c += b`; `loss =
loss + a` then `loss = loss + b`): their values, interleaved in the loop's order (a0, b0, a1, b1,
..) with their conditions, are one accumulation (runtime.accum_join), which steps as the loop's.
Values of several kinds, dtypes or shapes, other operators, or a read of the running value in the
loop keep the loop."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def counts(x):
    c = 0
    for i in range(x.shape[0]):
        if x[i] > 0:
            c += 2
        c += 1
    return c


def items_and_bonus(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i].item()             # a float32 tensor's Python float
        if x[i] > 1:
            s += 0.5                 # a Python float literal
    return s


def two_terms(x, y):
    loss = torch.zeros(())
    for i in range(x.shape[0]):
        loss = loss + (x[i] - y[i]).pow(2).sum()
        loss = loss + 0.1 * x[i].abs().sum()
    return loss


def in_place_total(acc, x, y):
    for i in range(len(x)):
        acc += x[i]
        if y[i].sum() > 0:
            acc += y[i]
    return acc


def narrow_ints(a, b):
    c = torch.zeros((), dtype=torch.int8)
    for i in range(a.shape[0]):
        c += a[i]
        c += b[i]                    # wraps around in int8, as every step of the loop
    return c


def flags(x):
    c = 0
    for i in range(x.shape[0]):
        c += (x[i] > 0).item()
        c += (x[i] > 1).item()
    return c


def products(a, b):
    p = torch.ones((), dtype=torch.float64)
    for i in range(a.shape[0]):
        p *= a[i]
        p *= b[i]
    return p


def mixed_kinds(x):
    c = 0
    for i in range(x.shape[0]):
        c += 1                       # a Python int, then a tensor: the loop's own types
        c += x[i]
    return c


def read_between(x):
    out = torch.empty_like(x)
    c = torch.zeros(())
    for i in range(x.shape[0]):
        c += x[i]
        out[i] = c
        c += 1.0
    return out, c


def plus_then_minus(x, y):
    c = 0.0
    for i in range(x.shape[0]):
        c += x[i].item()
        c -= y[i].item()
    return c


def _g(seed):
    return torch.Generator().manual_seed(seed)


def test_python_int_counts_are_exact():
    fast = autovec(counts)
    for seed in range(3):
        x = torch.randn(3000, generator=_g(seed))
        assert fast(x) == counts(x)
    assert _ran(fast) == {"batched"}


def test_python_floats_of_several_dtypes_are_one_sum():
    fast = autovec(items_and_bonus)
    for seed in range(3):
        x = torch.randn(3000, generator=_g(seed))
        got, want = fast(x), items_and_bonus(x)
        assert type(got) is float and got == pytest.approx(want, rel=1e-12, abs=1e-9)
    assert _ran(fast) == {"batched"}


def test_tensor_totals_and_their_gradients():
    fast = autovec(two_terms)
    for seed in range(2):
        g = _g(seed)
        x, y = torch.randn(500, 3, generator=g), torch.randn(500, 3, generator=g)
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = fast(a, y), two_terms(b, y)
        assert got.dtype == want.dtype and torch.allclose(got, want, rtol=1e-5)
        got.backward()
        want.backward()
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    assert _ran(fast)


def test_an_argument_updated_in_place_by_both():
    fast = autovec(in_place_total)
    for seed in range(3):
        g = _g(seed)
        x, y = torch.randn(400, 4, generator=g, dtype=torch.float64), torch.randn(400, 4, generator=g,
                                                                                   dtype=torch.float64)
        a, b = torch.ones(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
        got, want = fast(a, x, y), in_place_total(b, x, y)
        assert got is a and torch.allclose(a, b, rtol=1e-12)
    assert _ran(fast)


def test_narrow_integers_wrap_as_in_the_loop():
    fast = autovec(narrow_ints)
    for seed in range(3):
        g = _g(seed)
        a = torch.randint(-128, 128, (700,), generator=g, dtype=torch.int8)
        b = torch.randint(-128, 128, (700,), generator=g, dtype=torch.int8)
        got, want = fast(a, b), narrow_ints(a, b)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert _ran(fast)


def test_python_bools_count_as_ints():
    fast = autovec(flags)
    for seed in range(3):
        x = torch.randn(2000, generator=_g(seed))
        got, want = fast(x), flags(x)
        assert type(got) is type(want) and got == want
    assert _ran(fast)


def test_products_interleaved():
    fast = autovec(products)
    g = _g(4)
    a = 1 + 0.01 * torch.randn(1000, generator=g, dtype=torch.float64)
    b = 1 + 0.01 * torch.randn(1000, generator=g, dtype=torch.float64)
    for _ in range(2):
        assert torch.allclose(fast(a, b), products(a, b), rtol=1e-12)
    assert _ran(fast)


def test_a_python_int_beside_tensors_keeps_the_loop():
    fast = autovec(mixed_kinds)
    x = torch.randn(300, generator=_g(5))
    for _ in range(2):
        got, want = fast(x), mixed_kinds(x)
        assert got.dtype == want.dtype and torch.allclose(got, want)
    assert _ran(fast) == set()


def test_a_read_between_the_updates_keeps_the_loop():
    fast = autovec(read_between)
    x = torch.randn(300, generator=_g(6))
    got, want = fast(x), read_between(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert "read in it" in explain(fast, x).loops[0].reason


def test_a_sum_and_a_difference_keep_the_loop():
    fast = autovec(plus_then_minus)
    x, y = torch.randn(300, generator=_g(7)), torch.randn(300, generator=_g(8))
    assert fast(x, y) == plus_then_minus(x, y)
    assert explain(fast, x, y).loops[0].strategy == "python"


def item_and_tensor(x):
    c = 0.0
    for i in range(x.shape[0]):
        c += x[i].item()             # a Python float, then a float32 tensor: one dtype, two kinds
        c += x[i]
    return c


def in_place_then_rebound(acc, x):
    for i in range(x.shape[0]):
        acc += x[i]                  # in place on the caller's tensor in the first iteration only
        acc = acc + x[i] * 2
    return acc


def test_a_python_float_beside_a_tensor_of_its_dtype_keeps_the_loop():
    fast = autovec(item_and_tensor)
    x = torch.randn(300, generator=_g(9))
    for _ in range(2):
        got, want = fast(x), item_and_tensor(x)
        assert type(got) is type(want) and got.dtype == want.dtype and torch.allclose(got, want)
    assert _ran(fast) == set()


def test_an_update_in_place_beside_a_rebinding_keeps_the_loop():
    fast = autovec(in_place_then_rebound)
    x = torch.randn(300, 3, generator=_g(10), dtype=torch.float64)
    a, b = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    got, want = fast(a, x), in_place_then_rebound(b, x)
    assert torch.allclose(got, want) and torch.equal(a, b)     # the caller's tensor: x[0] added once


def minus_bools(x, t):
    c = torch.ones((), dtype=torch.float64)
    for i in range(x.shape[0]):
        if x[i] > t:
            c -= (x[i] > t).item()
    return c


def minus_bools_twice(x, y, t):
    c = torch.ones((), dtype=torch.float64)
    for i in range(x.shape[0]):
        c -= (x[i] > t).item()
        c -= (y[i] < 0).item()
    return c


def float_minus_bools(x, t):
    c = 1.0
    for i in range(x.shape[0]):
        c -= (x[i] > t).item()
    return c


@pytest.mark.parametrize("fn, args", [
    (minus_bools, (torch.tensor([-2, 3, 2]), torch.tensor(1))),
    (minus_bools, (torch.tensor([-2, 0, 1]), torch.tensor(1))),       # (no step runs: no error)
    (minus_bools_twice, (torch.tensor([-2, 3, 2]), torch.tensor([-3, 0, -2]), torch.tensor(1))),
    (float_minus_bools, (torch.tensor([-2, 3, 2]), torch.tensor(1))),   # (Python's 1.0 - True is 0.0)
])
def test_subtracting_bools_from_a_tensor_raises_as_the_loop(fn, args, monkeypatch):
    """(fuzz lost/stop44 seed 667443: `c -= (x[i] > t).item()` on a float64 tensor raises in the
    loop, torch refusing `-` with a bool; the batch summed the bools as ints and returned)"""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    from conftest import outcome
    fast = autovec(fn)
    for _ in range(2):
        want, got = outcome(fn, *args), outcome(fast, *args)
        if isinstance(want, tuple):
            assert want == got
        else:
            assert type(want) is type(got) and want == got
