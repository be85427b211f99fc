"""In-place arithmetic methods on a row as statements (`x[i].mul_(w[i])`, add_, sub_, div_):
they update the row like `x[i] *= w[i]` (analysis: _InPlaceUpdates), so they vectorize as that
store does. With a tensor in the subscript `x[idx]` is a copy the method updates and drops, so
those loops run as written; on a list of tensors the guard refuses and the loop runs."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop, ran_modes, same_on_every_call


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


def penalize(logits, prev, penalty):
    out = logits.clone()
    for b in range(logits.shape[0]):
        sc = torch.gather(logits[b], 0, prev[b])
        sc = torch.where(sc < 0, sc * penalty, sc / penalty)
        out[b].scatter_(0, prev[b], sc)
    return out


def penalize_in_place(logits, prev, penalty):
    for b in range(logits.shape[0]):
        sc = torch.gather(logits[b], 0, prev[b])
        sc = torch.where(sc < 0, sc * penalty, sc / penalty)
        logits[b].scatter_(0, prev[b], sc)
    return logits


def penalize_keeps_view(logits, prev, out):
    for b in range(logits.shape[0]):
        row = logits[b]
        sc = torch.gather(row, 0, prev[b])
        logits[b].scatter_(0, prev[b], sc * 2)
        out[b] = row + 1
    return out


def add_counts(counts, idx, v):
    for b in range(counts.shape[0]):
        counts[b].scatter_add_(0, idx[b], v[b])
    return counts


def fill_at(x, idx):
    for b in range(x.shape[0]):
        x[b].index_fill_(0, idx[b], -1)
    return x


def add_at(x, idx, v):
    for b in range(x.shape[0]):
        x[b].index_add_(0, idx[b], v[b], alpha=2)
    return x


def copy_at(x, idx, v):
    for b in range(x.shape[0]):
        x[b].index_copy_(0, idx[b], v[b])
    return x


def scatter_masked(x, m, v):
    for b in range(x.shape[0]):
        x[b].masked_scatter_(m[b], v[b])
    return x


@pytest.mark.parametrize("fn, make", [
    (penalize, lambda: (torch.randn(5, 20), torch.randint(0, 20, (5, 6)), 1.3)),
    (penalize, lambda: (torch.randn(5, 20), torch.randint(0, 20, (5, 0)), 1.3)),
    (penalize_in_place, lambda: (torch.randn(5, 20), torch.randint(0, 20, (5, 6)), 1.3)),
    (penalize_in_place, lambda: (torch.randn(5, 20), torch.randint(-20, 20, (5, 6)), 1.3)),
    (penalize_in_place, lambda: (torch.randn(5, 20), torch.randint(0, 30, (5, 6)), 1.3)),       # (out of range: the loop raises)
    (penalize_keeps_view, lambda: (torch.randn(5, 20), torch.randint(0, 20, (5, 6)), torch.zeros(5, 20))),
    (add_counts, lambda: (torch.zeros(4, 6), torch.randint(0, 6, (4, 9)), torch.rand(4, 9))),      # (repeated indices add up)
    (add_counts, lambda: (torch.zeros(4, 6, dtype=torch.long), torch.randint(0, 6, (4, 9)), torch.ones(4, 9))),  # (a source of another dtype: the loop raises)
    (add_counts, lambda: (torch.zeros(4, 6), torch.randint(0, 9, (4, 9)), torch.rand(4, 9))),      # (an index out of range: the loop raises)
    (fill_at, lambda: (torch.randn(4, 7), torch.randint(0, 7, (4, 3)))),
    (add_at, lambda: (torch.randn(4, 7, 2), torch.randint(0, 7, (4, 3)), torch.randn(4, 3, 2))),
    (copy_at, lambda: (torch.randn(4, 7), torch.stack([torch.randperm(7)[:3] for _ in range(4)]), torch.randn(4, 3))),
    (scatter_masked, lambda: (torch.randn(4, 6), torch.rand(4, 6) > 0.5, torch.randn(4, 6))),
])
def test_indexed_in_place_methods_on_rows(fn, make):
    """(probeC: `out[b].scatter_(0, idx, v)` was refused as 'called for its side effect'; it is the
    store `out[b] = out[b].scatter(0, idx, v)`, whose out-of-place twin gives the same values and
    raises where the method does)"""
    same_on_every_call(fn, make)


def test_a_scatter_on_rows_is_vectorized():
    assert explain(penalize, torch.randn(5, 20), torch.randint(0, 20, (5, 6)), 1.3).path == "vectorized"
    assert explain(add_counts, torch.zeros(4, 6), torch.randint(0, 6, (4, 9)), torch.rand(4, 9)).path == "vectorized"


def test_a_row_gathered_then_scattered_in_place_is_vectorized():
    """(probeC's repetition penalty on the logits themselves: `torch.gather(logits[b], ..)` is a
    copy of the row read before its `scatter_`, which only row b sees; it was refused as a
    loop-carried dependence. A view of the row kept past the scatter still keeps the loop.)"""
    args = (torch.randn(5, 20), torch.randint(0, 20, (5, 6)), 1.3)
    assert explain(penalize_in_place, *args).path == "vectorized"
    assert explain(penalize_keeps_view, torch.randn(5, 20), torch.randint(0, 20, (5, 6)),
                   torch.zeros(5, 20)).path == "python"


def element_iadd(x):
    c = 0.0
    for v in x:
        c += v.__iadd__(1.0)
    return c


def nest_imul(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            c += q.__imul__(2.0) * p
    return c


@pytest.mark.parametrize("fn, make", [
    (element_iadd, lambda: (torch.tensor([1.0, 2.0, 3.0]),)),
    (nest_imul, lambda: (torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0]))),
])
def test_in_place_dunder_calls_keep_the_loop(fn, make):
    # (found by a probe: `v.__iadd__(1.0)` is `v += 1.0` on the row itself, which the analysis
    # took for a pure tensor method; the first call's check ran both and left the rows changed)
    a, b = make(), make()
    f = autovec(fn)
    assert torch.equal(torch.as_tensor(f(*a)), torch.as_tensor(fn(*b)))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert explain(f, *make()).loops[0].strategy == "python"
