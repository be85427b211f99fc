"""Two statement spellings read as the forms they are (found lost by the real-world probe):

- a tuple of targets with a subscript among them, `v[i], ix[i] = torch.topk(x[i], 2)`, is the
  unpacking into names of its own and then each target assigned in order
  (analysis._TupleStores);
- a chain of in-place methods on a row, `x[i].sub_(m).div_(s)`, is each method on the row in
  turn (analysis._InPlaceUpdates._chain), then a row read back or updated again
  (analysis._forwarded)."""
import pytest
import torch

from autovec import assert_equivalent, autovec
from conftest import ran_modes as _ran, raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def top2(x):
    v = torch.empty(x.shape[0], 2)
    ix = torch.empty(x.shape[0], 2, dtype=torch.long)
    for i in range(x.shape[0]):
        v[i], ix[i] = torch.topk(x[i], 2)
    return v, ix


def row_max(x):
    v = torch.empty(x.shape[0])
    ix = torch.empty(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        v[i], ix[i] = x[i].max(0)
    return v, ix


def name_and_row(x):
    out = torch.empty_like(x)
    tot = 0.0
    for i in range(x.shape[0]):
        s, out[i] = x[i].sum(), x[i] * 2
        tot = tot + s
    return out, tot


def unpack_rows(x):
    v = torch.empty(x.shape[0])
    w = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        v[i], w[i] = x[i]          # a ValueError where a row has other than two elements
    return v, w


def standardize_chain(x):
    for i in range(x.shape[0]):
        x[i].sub_(x[i].mean()).div_(x[i].std())
    return x


def three_methods(x):
    for i in range(x.shape[0]):
        x[i].mul_(2).clamp_(-1, 1).add_(0.5)
    return x


@pytest.mark.parametrize("fn, make", [
    (top2, lambda: (torch.randn(8, 5),)),
    (row_max, lambda: (torch.randn(8, 5),)),
    (name_and_row, lambda: (torch.randn(8, 5),)),
    (unpack_rows, lambda: (torch.randn(8, 2),)),
    (standardize_chain, lambda: (torch.randn(8, 5),)),
    (three_methods, lambda: (torch.randn(8, 5),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_spellings_are_batched_and_equal_to_the_loop(fn, make):
    f = autovec(fn)
    for _ in range(3):
        args = make()
        a, b = [t.clone() for t in args], [t.clone() for t in args]
        want, got = fn(*a), f(*b)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            assert type(g) is type(w)
            torch.testing.assert_close(g, w)
        for p, q in zip(a, b):
            torch.testing.assert_close(q, p)
    assert _ran(f), fn.__name__
    assert_equivalent(fn, *make(), trials=2)


def test_unpacking_of_the_wrong_length_raises_as_the_loop():
    raises_as_loop(ValueError, unpack_rows, torch.randn(5, 3))


def test_a_chain_under_gradients_keeps_the_loops_error():
    """The loop's chain under gradients: `exp_` on a row of a tensor that requires grad; the
    method's rule keeps the loop (runtime._method_fits), so the same error or gradients."""
    def fn(w):
        x = w * 1
        for i in range(x.shape[0]):
            x[i].mul_(2).exp_()
        return x.sum()

    w = torch.randn(4, 3, requires_grad=True)
    f = autovec(fn)
    try:
        want = torch.autograd.grad(fn(w), w)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            torch.autograd.grad(f(w), w)
    else:
        torch.testing.assert_close(torch.autograd.grad(f(w), w), want)
    assert _ran(f) == set()


# a row's elements as Python numbers: `y, x = offs[i].tolist()` (analysis._TolistUnpacks)

def crop_at(img, offs):
    out = []
    for i in range(img.shape[0]):
        y, x = offs[i].tolist()
        out.append(img[i, :, y:y + 8, x:x + 8])
    return torch.stack(out)


def box_areas(boxes):
    out = []
    for i in range(boxes.shape[0]):
        x1, y1, x2, y2 = boxes[i].tolist()
        out.append((x2 - x1) * (y2 - y1))
    return out


@pytest.mark.parametrize("fn, make", [
    (crop_at, lambda: (torch.randn(4, 3, 20, 20), torch.randint(0, 10, (4, 2)))),
    (box_areas, lambda: (torch.rand(6, 4) * 10,)),
    (box_areas, lambda: (torch.randint(0, 9, (6, 4)),)),
    (box_areas, lambda: (torch.rand(6, 4).half(),)),
], ids=["crop", "areas_float", "areas_int", "areas_half"])
def test_rows_as_python_numbers_are_batched(fn, make):
    f = autovec(fn)
    for _ in range(3):
        args = make()
        want, got = fn(*args), f(*args)
        if isinstance(want, list):
            assert [type(v) for v in got] == [type(v) for v in want] and got == want
        else:
            assert torch.equal(got, want)
    assert _ran(f) == {"batched"}


@pytest.mark.parametrize("boxes, exc", [(torch.rand(6, 4, 2), TypeError), (torch.rand(6, 5), ValueError),
                                        (torch.rand(6), TypeError)], ids=["matrix_rows", "five", "zero_d"])
def test_rows_that_are_no_vectors_of_that_length_are_as_the_loop(boxes, exc):
    """A row of a matrix gives lists (the loop's `(x2 - x1)` then raises TypeError), another
    length a ValueError, a 0-d row a TypeError: the batch raises, the loop runs and raises."""
    raises_as_loop(exc, box_areas, boxes)


def int_add(p):
    out = []
    for i in range(p.shape[0]):
        a, b = p[i].tolist()
        out.append(a + b)
    return out


def int_sub(p):
    out = []
    for i in range(p.shape[0]):
        a, b = p[i].tolist()
        out.append(a - b)
    return out


def int_neg(p):
    out = []
    for i in range(p.shape[0]):
        a, b = p[i].tolist()
        out.append(-a)
    return out


def int_abs(p):
    out = []
    for i in range(p.shape[0]):
        a, b = p[i].tolist()
        out.append(abs(a))
    return out


def int_floordiv(p):
    out = []
    for i in range(p.shape[0]):
        a, b = p[i].tolist()
        out.append(a // b)
    return out


_LO, _HI = -(1 << 63), (1 << 63) - 1


@pytest.mark.parametrize("fn, row", [(int_add, [_HI, 1]), (int_sub, [_LO, 1]), (int_neg, [_LO, 1]),
                                     (int_abs, [_LO, 1]), (int_floordiv, [_LO, -1])],
                         ids=["add", "sub", "neg", "abs", "floordiv"])
def test_python_ints_past_int64_are_the_loops(fn, row):
    """Python's ints do not wrap: `a + b`, `a - b`, `-a`, `abs(a)`, `a // b` past int64 leave the
    call to the loop (found by the third probe; `.item()` numbers wrapped the same before)."""
    f = autovec(fn)
    small = torch.tensor([[3, 4], [-5, 6], [7, -8], [2, 9]])
    for _ in range(3):
        assert f(small) == fn(small)
    assert _ran(f) == {"batched"}
    p = torch.tensor([[3, 4], [7, -8], row, [2, 9]])
    assert f(p) == fn(p)
    assert _ran(f) == set()


def test_uint64_items_past_int64_are_the_loops():
    def firsts(p):
        out = []
        for i in range(p.shape[0]):
            a, b = p[i].tolist()
            out.append(a)
        return out

    f = autovec(firsts)
    p = torch.tensor([[1, 2], [3, 4]], dtype=torch.uint64)
    assert f(p) == firsts(p)
    big = torch.tensor([[1, 2], [(1 << 63) + 5, 4]], dtype=torch.uint64)
    assert f(big) == firsts(big) == [1, (1 << 63) + 5]
