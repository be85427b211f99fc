"""Python's `max` / `min` of a number and a value in a loop's running total or store (`loss +=
max(0, d)`, `out[i] = min(x[i].sum(), 1.5)`: hinge losses, clipping) are the statements they
are (frontend._NumberExtremes): `max(a, b)` is `b if b > a else a`, so a total adds the value
under the test and a store picks by it, each of which batches. Every test compares with the
loop: values, types (a total no row adds to stays the Python number it started as) and NaN."""
import ast
import math

import pytest
import torch

from autovec import autovec, explain
from autovec.frontend import capture
from conftest import same_within


def hinge(a, p, n, margin: float = 1.0):
    loss = 0.0
    for i in range(a.shape[0]):
        d = (a[i] - p[i]).norm() - (a[i] - n[i]).norm() + margin
        loss += max(0, d)
    return loss


def hinge_int_start(a, p, n, margin: float = 1.0):
    loss = 0
    for i in range(a.shape[0]):
        loss = loss + max((a[i] - p[i]).norm() - (a[i] - n[i]).norm() + margin, 0)
    return loss


def negative_part(x):
    total = 0.0
    count = 0
    for i in range(x.shape[0]):
        total += min(x[i].sum(), 0.0)
        count += 1
    return total, count


def clipped(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = min(x[i].sum(), 1.5)
    return out


def floored(x):
    out = torch.zeros(x.shape[0], dtype=x.dtype)
    for i in range(x.shape[0]):
        s = x[i].sum()
        out[i] = max(s, -0.5)
    return out


def multiclass_hinge(s, y, m: float = 1.0):
    # (the total started before the outer loop, summed in the inner one; probeN)
    loss = 0.0
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            if j == y[i]:
                continue
            loss += max(0, s[i, j] - s[i, y[i]] + m)
    return loss


FNS = [hinge, hinge_int_start, negative_part, clipped, floored, multiclass_hinge]


def _args(fn, n, scale=1.0):
    if fn is multiclass_hinge:
        return torch.randn(n, 6) * scale, torch.randint(0, 6, (n,))
    if fn in (hinge, hinge_int_start):
        return tuple(torch.randn(n, 8) * scale for _ in range(3))
    return (torch.randn(n, 4) * scale,)


def _same(want, got):
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for w, g in zip(want, got):
            _same(w, g)
    elif isinstance(want, torch.Tensor):
        same_within(want, got)
    else:
        assert type(got) is type(want) and (got == want or math.isnan(got) and math.isnan(want))


@pytest.mark.parametrize("fn", FNS)
def test_values_and_types_are_the_loops(fn):
    torch.manual_seed(0)
    fast = autovec(fn)
    for n, scale in ((0, 1.0), (1, 1.0), (3, 1.0), (200, 1.0), (200, 1.0), (200, -1e-3), (5, 1.0)):
        args = _args(fn, n, scale)
        if fn in (hinge, hinge_int_start) and scale < 0:
            args = (args[0], args[0], args[0] + 100.0)      # (no row's hinge is positive)
        _same(fn(*args), fast(*args))


@pytest.mark.parametrize("fn", FNS)
def test_they_batch(fn):
    fast = autovec(fn)
    args = _args(fn, 400)
    for _ in range(3):
        fast(*args)
    assert explain(fast, *args).path == "vectorized"


def test_nan_takes_the_side_pythons_max_takes():
    # (max(0, nan) is 0 and max(nan, 0) is nan: the first operand stays unless the second is greater)
    x = torch.tensor([[float("nan"), 1.0], [2.0, 3.0], [-4.0, 0.0]] * 40)
    for fn in (clipped, floored, negative_part):
        fast = autovec(fn)
        for _ in range(3):
            want, got = fn(x), fast(x)
            if isinstance(want, tuple):
                want, got = want[0], got[0]
            assert torch.equal(want.isnan(), got.isnan()) and torch.equal(want.nan_to_num(), got.nan_to_num())


def test_ties_keep_the_first_operand():
    # (max(0, d) with d == 0 is the int 0: a float total no row exceeds stays a float; a store
    # of max(-0.0, ..) keeps the sign of the operand Python's max keeps)
    a = torch.randn(100, 8)
    fast = autovec(hinge)
    for _ in range(3):
        want, got = hinge(a, a, a, 0.0), fast(a, a, a, 0.0)
        assert type(want) is type(got) is float and want == got

    def signed(x):
        out = torch.ones(x.shape[0])
        for i in range(x.shape[0]):
            out[i] = max(-0.0, x[i].sum())
        return out
    x = torch.zeros(100, 3)
    fast = autovec(signed)
    for _ in range(3):
        want, got = signed(x), fast(x)
        assert torch.equal(want.signbit(), got.signbit())


def test_gradients_are_the_loops():
    a, p, n = (torch.randn(300, 8, requires_grad=True) for _ in range(3))
    fast = autovec(hinge)
    for fn in (hinge, fast):
        for t in (a, p, n):
            t.grad = None
        fn(a, p, n).backward()
        if fn is hinge:
            want = [t.grad.clone() for t in (a, p, n)]
    for w, t in zip(want, (a, p, n)):
        torch.testing.assert_close(t.grad, w)


def tensor_start(x):
    total = torch.zeros(())
    for i in range(x.shape[0]):
        total += max(0, x[i].sum())      # (a tensor start: of a dtype the capture cannot see)
    return total


def nonzero_number(x):
    total = 0.0
    for i in range(x.shape[0]):
        total += max(1.0, x[i].sum())
    return total


def scaled_total(x):
    total = 0.0
    for i in range(x.shape[0]):
        total += max(0, x[i].sum())
        total *= 0.5
    return total


def float_number_on_int(x):
    total = 0
    for i in range(x.shape[0]):
        total += max(0.0, x[i].sum().item())     # (an int plus 0.0 is a float: the number's side counts)
    return total


def own_max(x):
    def max(a, b):       # noqa: A001 (the function's own `max`: not taken for the builtin)
        return a if a > b else b
    total = 0.0
    for i in range(x.shape[0]):
        total += max(0, x[i].sum())
    return total


@pytest.mark.parametrize("fn", [tensor_start, nonzero_number, scaled_total, float_number_on_int, own_max])
def test_totals_that_keep_the_call(fn):
    # (the total's statement stays a `max(..)` call; values are the loop's, whatever the path)
    assert "max(" in ast.unparse(capture(fn).tree)
    for n in (0, 2, 50):
        for x in (torch.randn(n, 3), -torch.rand(n, 3)):     # (and no row above the number)
            _same(fn(x), autovec(fn)(x))


def test_a_tensor_of_several_elements_raises_as_min_does():
    def plain(x):
        out = torch.zeros(x.shape[0], 2)
        for i in range(x.shape[0]):
            out[i] = min(x[i], 0.5)
        return out
    x = torch.randn(30, 2)
    for fn in (plain, autovec(plain)):
        with pytest.raises(RuntimeError, match="ambiguous"):
            fn(x)


def total_handed_on(d, e):
    loss = 0
    hist = []
    for i in range(d.shape[0]):
        loss = loss + max(0, d[i])
        hist.append(loss)            # (the total read besides its updates: each step's object)
        loss += e[i]
    return hist


def total_saved_for_backward(d, w):
    loss = 0.0
    prod = w
    for i in range(d.shape[0]):
        loss += max(0, d[i])         # (`loss += 0` changes the tensor in place: autograd sees it)
        prod = prod * loss
    return prod


def test_a_total_read_besides_its_updates_keeps_its_number_side():
    # (probeM: dropping `loss + 0` kept one object that a later `+=` changed; dropping `loss += 0`
    # hid an in-place change from autograd)
    assert "max(" in ast.unparse(capture(total_handed_on).tree)
    assert "max(" in ast.unparse(capture(total_saved_for_backward).tree)
    d, e = torch.tensor([1.0, -1.0, -1.0]), torch.ones(3)
    assert [float(v) for v in autovec(total_handed_on)(d, e)] == [float(v) for v in total_handed_on(d, e)] == [2, 3, 4]
    for fn in (total_saved_for_backward, autovec(total_saved_for_backward)):
        d, w = torch.tensor([1.0, -1.0], requires_grad=True), torch.tensor(2.0, requires_grad=True)
        with pytest.raises(RuntimeError, match="inplace"):
            fn(d, w).backward()


def outer_reads_total(d):
    loss = 0.0
    hist = []
    for i in range(d.shape[0]):
        for j in range(d.shape[1]):
            loss = loss + max(0, d[i, j])
        hist.append(loss)          # (the outer loop reads the total: the inner keeps the number's side)
        loss += 1.0
    return hist


def test_a_total_the_outer_loop_reads_keeps_its_number_side():
    d = torch.tensor([[1.0, -1.0], [-1.0, -2.0], [-3.0, -1.0]])
    want = [float(v) for v in outer_reads_total(d)]
    assert [float(v) for v in autovec(outer_reads_total)(d)] == want
    assert "max(" in ast.unparse(capture(outer_reads_total).tree)
