"""In-place arithmetic methods on a row as statements (`x[i].mul_(w[i])`, add_, sub_, div_):
they update the row like `x[i] *= w[i]` (analysis: _InPlaceUpdates), so they vectorize as that
store does. With a tensor in the subscript `x[idx]` is a copy the method updates and drops, so
those loops run as written; on a list of tensors the guard refuses and the loop runs."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop, ran_modes


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def scale_rows(x, w):
    for i in range(x.shape[0]):
        x[i].mul_(w[i])
    return x


def shift_columns(x, w):
    for j in range(1, x.shape[1]):
        x[:, j].add_(w[:, j - 1] * 2)
    return x


def masked_divide(x, w):
    for i in range(x.shape[0]):
        if w[i].sum() > 0:
            x[i].div_(w[i])
    return x


def subtract_scalar(x, s):
    for i in range(x.shape[0]):
        x[i, 1:].sub_(s)
    return x


class Buffer:
    def __init__(self, data):
        self.data = data


def update_attribute(buf, w):
    for i in range(w.shape[0]):
        buf.data[i].add_(w[i])
    return buf.data


def through_tensor_index(x, idx, w):
    for i in range(idx.shape[0]):
        x[idx[i]].add_(w[i])        # idx[i] is a vector: x[idx[i]] is a copy, x is unchanged
    return x


def list_rows(rows, w):
    for i in range(w.shape[0]):
        rows[i].mul_(w[i])
    return rows


def with_alpha(x, w):
    for i in range(x.shape[0]):
        x[i].add_(w[i], alpha=2)
    return x


@pytest.mark.parametrize("fn, make", [
    (scale_rows, lambda: (torch.randn(7, 3), torch.randn(7, 3))),
    (scale_rows, lambda: (torch.randn(7, 3, 2), torch.randn(7, 2))),        # broadcast into the row
    (shift_columns, lambda: (torch.randn(4, 6), torch.randn(4, 6))),
    (masked_divide, lambda: (torch.randn(8, 3), torch.randn(8, 3))),
    (subtract_scalar, lambda: (torch.randn(5, 4, dtype=torch.float64), 0.25)),
    (scale_rows, lambda: (torch.randint(-5, 5, (6, 3)), torch.randint(-5, 5, (6, 3)))),
])
def test_in_place_methods_on_rows_vectorize_like_augmented_stores(fn, make):
    assert_equivalent(fn, *make())
    fast = autovec(fn)
    args = make()
    want = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    got = fast(*args)
    assert torch.equal(want, got) and got is args[0]          # updated in place, as the loop does
    assert ran_modes(fast)


def test_with_gradients():
    x0 = torch.randn(6, 3, requires_grad=True)
    w = torch.randn(6, 3, requires_grad=True)
    for fn in (scale_rows, autovec(scale_rows)):
        y = fn(x0 * 1.0, w)
        y.sum().backward()
    g = torch.autograd.grad(scale_rows(x0 * 1.0, w).sum(), (x0, w))
    g2 = torch.autograd.grad(autovec(scale_rows)(x0 * 1.0, w).sum(), (x0, w))
    assert all(torch.allclose(a, b) for a, b in zip(g, g2))


def test_an_attribute_rooted_row():
    x, w = torch.randn(5, 3), torch.randn(5, 3)
    want = update_attribute(Buffer(x.clone()), w)
    fast = autovec(update_attribute)
    assert torch.equal(fast(Buffer(x.clone()), w), want)
    assert ran_modes(fast)


def test_a_tensor_index_keeps_the_loop_and_its_no_op():
    x, idx, w = torch.randn(9, 2), torch.randint(0, 9, (4, 2)), torch.randn(4, 2, 2)
    fast = autovec(through_tensor_index)
    assert torch.equal(fast(x.clone(), idx, w), x)
    assert explain(through_tensor_index, x.clone(), idx, w).path == "python"


def test_a_list_of_rows_runs_the_loop():
    rows = [torch.randn(3) for _ in range(4)]
    w = torch.randn(4, 3)
    want = list_rows([r.clone() for r in rows], w)
    got = autovec(list_rows)([r.clone() for r in rows], w)
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_keywords_store_the_method_value():
    # (`add_(v, alpha=2)` is `x[i] = x[i].add(v, alpha=2)`, checked as the method: test_inplace_rows)
    x, w = torch.randn(4, 3), torch.randn(4, 3)
    fast = autovec(with_alpha)
    assert torch.equal(fast(x.clone(), w), with_alpha(x.clone(), w))
    assert ran_modes(fast)


def test_integer_division_in_place_raises_as_the_loop():
    def int_div(x, w):
        for i in range(x.shape[0]):
            x[i].div_(w[i])
        return x
    raises_as_loop(RuntimeError, int_div, torch.arange(6).view(3, 2), torch.ones(3, 2, dtype=torch.int64))
