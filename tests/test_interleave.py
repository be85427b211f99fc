"""Several unconditional appends into one list in each iteration (`out.append(a); out.append(b)`):
the list holds a0, b0, a1, b1, ..: the batches interleaved (runtime.interleave)."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def pairs(a, b):
    out = []
    for i in range(a.shape[0]):
        out.append(a[i])
        out.append(b[i] * 2)
    return torch.stack(out)


def three_stats(x):
    out = []
    for row in x:
        out.append(row.sum())
        out.append(row.max())
        out.append(row.min())
    return out


def numbers(x):
    vals = []
    for i in range(x.shape[0]):
        vals.append(x[i].sum().item())
        vals.append(x[i].abs().max().item())
    return vals


def caller_log(x, log):
    for i in range(x.shape[0]):
        log.append(x[i].norm())
        log.append(x[i].mean())
    return log


def cat_rows(x, w):
    parts = []
    for i in range(x.shape[0]):
        parts.append(x[i] @ w)
        parts.append(x[i][:2] + 1)
    return torch.cat(parts)


CASES = [
    (pairs, lambda: (torch.randn(20, 3), torch.randn(20, 3))),
    (three_stats, lambda: (torch.randn(15, 4, requires_grad=True),)),
    (numbers, lambda: (torch.randn(12, 5),)),
    (caller_log, lambda: (torch.randn(10, 3), [torch.tensor(-1.0)])),
    (cat_rows, lambda: (torch.randn(9, 4), torch.randn(4, 2))),
]


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_interleaved_appends_are_vectorized_in_the_lists_order(fn, make):
    args = make()
    f = autovec(fn)
    got, want = f(*make()), fn(*make())
    assert _ran(f)
    assert explain(f, *args).path == "vectorized"
    if isinstance(want, list):
        assert len(got) == len(want) and [type(g) for g in got] == [type(w) for w in want]
        if isinstance(want[0], torch.Tensor):
            assert [g.requires_grad for g in got] == [w.requires_grad for w in want]
    assert_equivalent(fn, *args, grad=any(isinstance(a, torch.Tensor) and a.requires_grad for a in args))


def kinds(x):
    vals = []
    for i in range(x.shape[0]):
        vals.append(x[i].sum().item())      # a float
        vals.append(int(x[i].argmax()))     # an int
    return vals


def dtypes(x):
    vals = []
    for i in range(x.shape[0]):
        vals.append(x[i].sum())             # float32
        vals.append(x[i].argmax())          # int64
    return vals


def shapes(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i])
        out.append(x[i, :2])
    return torch.stack(out)                 # the loop raises: rows of two shapes


def one_with_grad(x, w):
    vals = []
    for i in range(x.shape[0]):
        vals.append(x[i] * w)               # requires grad
        vals.append(x[i] * 2)               # does not
    return vals


def conditional(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i])
        if x[i].sum() > 0:
            out.append(-x[i])
    return out


@pytest.mark.parametrize("fn, args", [
    (kinds, (torch.randn(8, 3),)),
    (dtypes, (torch.randn(8, 3),)),
    (one_with_grad, (torch.randn(8, 3), torch.randn(3, requires_grad=True))),
    (conditional, (torch.randn(8, 3),)),
])
def test_lists_of_mixed_elements_keep_the_loop(fn, args):
    f = autovec(fn)
    got, want = f(*args), fn(*args)
    assert not _ran(f)
    assert [type(g) for g in got] == [type(w) for w in want]
    assert [getattr(g, "dtype", None) for g in got] == [getattr(w, "dtype", None) for w in want]
    assert [getattr(g, "requires_grad", None) for g in got] == [getattr(w, "requires_grad", None) for w in want]
    assert_equivalent(fn, *args)


def test_rows_of_two_shapes_raise_as_the_loop():
    x = torch.randn(5, 3)
    with pytest.raises(RuntimeError) as want:
        shapes(x)
    with pytest.raises(RuntimeError) as got:
        autovec(shapes)(x)
    assert str(got.value) == str(want.value)
