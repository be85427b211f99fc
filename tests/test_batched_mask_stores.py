"""Masked stores into a tensor the iteration made, as whole-batch operations: `r = x[i].clone();
r[x[i] < 0] = 0` (a number, or one value per iteration) is a masked fill of every row at once,
and `labels[b][sel] = ids[b][sel]` (another row's selection by the store's own mask) a `where`
between the rows (batching._Helpers.masked_fill_rows, own_rows; lowering.batched masked_put).
They ran under vmap, or not at all for the selection. Checked against the loop on every call of
one decorated object: values, dtypes, the arguments after the call, errors and gradients."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes, same_on_every_call


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def zero_negatives(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clone()
        r[r < 0] = 0
        out.append(r)
    return torch.stack(out)


def fill_named(x, c):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        sel = x[i] > 0.5
        r = x[i] * 2
        r[sel] = c
        out[i] = r
    return out


def fill_max(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clone()
        r[x[i] < 0] = x[i].max()
        out.append(r)
    return torch.stack(out)


def prefix_mask(x, keep):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clone()
        r[keep[i]] = -1
        out.append(r)
    return torch.stack(out)


def fresh_zeros(x):
    out = []
    for i in range(x.shape[0]):
        r = torch.zeros(x.shape[1], dtype=torch.long)
        r[x[i] > 0] = 1
        out.append(r)
    return torch.stack(out)


def mlm_labels(ids, prob, mask_id):
    labels = torch.full_like(ids, -100)
    for b in range(ids.shape[0]):
        sel = prob[b] < 0.3
        labels[b][sel] = ids[b][sel]
    return labels


def masked_copy(dst, src, m):
    out = []
    for b in range(dst.shape[0]):
        r = dst[b].clone()
        r[m[b]] = src[b][m[b]]
        out.append(r)
    return torch.stack(out)


CASES = [
    (zero_negatives, lambda: (torch.randn(7, 5),)),
    (zero_negatives, lambda: (torch.randint(-5, 5, (7, 5)),)),
    (fill_named, lambda: (torch.randn(6, 4), 3)),
    (fill_named, lambda: (torch.randn(6, 4), float("nan"))),
    (fill_named, lambda: (torch.randn(6, 4).double(), True)),
    (fill_max, lambda: (torch.randn(6, 4),)),
    (prefix_mask, lambda: (torch.randn(5, 3, 2), torch.rand(5, 3) > 0.5)),      # (a mask over the leading dimension)
    (prefix_mask, lambda: (torch.randn(5, 3, 2), torch.rand(5, 2) > 0.5)),      # (of another shape: the loop raises)
    (fresh_zeros, lambda: (torch.randn(6, 5),)),
    (mlm_labels, lambda: (torch.randint(0, 99, (6, 9)), torch.rand(6, 9), 103)),
    (masked_copy, lambda: (torch.randn(5, 4), torch.randn(5, 4), torch.rand(5, 4) > 0.5)),
    (masked_copy, lambda: (torch.randn(5, 4), torch.randn(5, 4).double(), torch.rand(5, 4) > 0.5)),   # (dtypes differ: the loop raises)
    (masked_copy, lambda: (torch.randn(5, 4, 2), torch.randn(5, 4, 3), torch.rand(5, 4) > 0.5)),      # (shapes differ: the loop raises)
]


@pytest.mark.parametrize("fn, make", CASES)
def test_masked_stores_of_every_row_at_once(fn, make):
    same_on_every_call(fn, make, calls=4)


@pytest.mark.parametrize("fn, make", [CASES[0], CASES[2], CASES[5], CASES[8], CASES[9], CASES[10]])
def test_they_run_as_whole_batch_operations(fn, make):
    fast = autovec(fn)
    fast(*make())
    assert ran_modes(fast) == {"batched"}


def test_a_store_under_autograd_keeps_its_gradients():
    x = torch.randn(6, 4, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    want = torch.autograd.grad(fill_max(x).sum(), x)[0]
    got = torch.autograd.grad(autovec(fill_max)(y).sum(), y)[0]
    torch.testing.assert_close(got, want)


def test_the_selection_by_the_same_mask_is_vectorized():
    ex = explain(mlm_labels, torch.randint(0, 99, (6, 9)), torch.rand(6, 9), 103)
    assert ex.path == "vectorized" and "masked_fill_rows" in " ".join(ex.notes)


@pytest.mark.parametrize("fn, good, bad", [
    (prefix_mask, lambda: (torch.randn(5, 3, 2), torch.rand(5, 3) > 0.5), lambda: (torch.randn(5, 3, 2), torch.rand(5, 2) > 0.5)),
    (prefix_mask, lambda: (torch.randn(5, 3, 2), torch.rand(5, 3) > 0.5), lambda: (torch.randn(5, 3, 2), torch.ones(5, 1) > 0)),   # (a mask of one element would broadcast)
    (masked_copy, lambda: (torch.randn(5, 4, 2), torch.randn(5, 4, 2), torch.rand(5, 4) > 0.5),
     lambda: (torch.randn(5, 4, 2), torch.randn(5, 4, 3), torch.rand(5, 4) > 0.5)),
])
def test_shapes_that_do_not_fit_on_a_later_call_raise_as_the_loop(fn, good, bad):
    # (the same ranks and dtypes as the first call, which checked the rewrite once)
    fast = autovec(fn)
    torch.manual_seed(0)
    a = good()
    torch.manual_seed(0)
    b = good()
    torch.testing.assert_close(fast(*b), fn(*a), rtol=0, atol=0)
    args = bad()
    with pytest.raises(IndexError if fn is prefix_mask else RuntimeError) as want:
        fn(*args)
    with pytest.raises(type(want.value)) as got:
        fast(*args)
    assert str(got.value) == str(want.value)


def mlm_mask(ids, prob, mask_id):
    ids = ids.clone()
    labels = torch.full_like(ids, -100)
    for b in range(ids.shape[0]):
        sel = prob[b] < 0.15
        labels[b][sel] = ids[b][sel]
        ids[b][sel] = mask_id
    return ids, labels


def selected_sum_then_store(ids, prob):
    total = torch.zeros(ids.shape[0], dtype=ids.dtype)
    for b in range(ids.shape[0]):
        sel = prob[b] < 0.5
        total[b] = ids[b][sel].sum()
        ids[b] = 0
    return ids, total


def view_kept_past_the_store(x):
    out = torch.zeros(x.shape[0])
    for b in range(x.shape[0]):
        v = x[b][0:3]
        x[b] = 0
        out[b] = v.sum()       # (the loop's view shows the store: zeros)
    return x, out


def python_bool_mask(ids, k):
    labels = torch.full_like(ids, -100)
    for b in range(ids.shape[0]):
        sel = b < k
        labels[b][sel] = ids[b][sel]
    return labels


@pytest.mark.parametrize("fn, make", [
    (mlm_mask, lambda: (torch.randint(0, 99, (6, 9)), torch.rand(6, 9), 103)),
    (selected_sum_then_store, lambda: (torch.randint(0, 99, (6, 9)), torch.rand(6, 9))),
    (view_kept_past_the_store, lambda: (torch.randn(5, 4),)),
    (python_bool_mask, lambda: (torch.randint(0, 99, (6, 9)), 3)),
])
def test_a_part_of_the_row_read_before_its_store(fn, make):
    """(probeC's MLM masking: `ids[b][sel]` read before `ids[b][sel] = mask_id` counted as a
    loop-carried dependency; a part of the row its own parent turns into new memory, or that a
    store copies, keeps no view of the row past the store)"""
    same_on_every_call(fn, make)


def test_mlm_masking_is_vectorized():
    assert explain(mlm_mask, torch.randint(0, 99, (6, 9)), torch.rand(6, 9), 103).path == "vectorized"
    assert explain(selected_sum_then_store, torch.randint(0, 99, (6, 9)), torch.rand(6, 9)).path == "vectorized"
