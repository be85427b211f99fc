"""Writes into a tensor the iteration itself made (`t = torch.full_like(lp, eps); t[y[i]] = 1 -
eps`, a per-sample one-hot from `torch.zeros(C)`, `r = x[i].clone(); r[k[i]] = 0`, `m.fill_diagonal_(0)`,
`t += v`): each iteration writes its own tensor, so the body runs under vmap with one such tensor per
row (runtime.own gives `torch.zeros(C)` its rows). Anything that could see the difference keeps
the loop: a read of the tensor's element that the loop holds as a view across a later write, a
name bound to an input's memory or rebound since, a write under a branch. Checked against the
loop: values, dtypes, errors, effects on arguments, gradients, path."""
import pytest
import torch
import torch.nn.functional as F

from autovec import autovec, explain
from conftest import check_loop, raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def label_smoothing(logits, targets, smoothing):
    n_classes = logits.size(-1)
    losses = []
    for i in range(logits.size(0)):
        log_probs = torch.log_softmax(logits[i], dim=-1)
        true_dist = torch.full_like(log_probs, smoothing / (n_classes - 1))
        true_dist[targets[i]] = 1.0 - smoothing
        losses.append(torch.sum(-true_dist * log_probs))
    return torch.stack(losses).mean()


def one_hot_rows(y, c):
    out = []
    for i in range(y.shape[0]):
        t = torch.zeros(c)
        t[y[i]] = 1
        out.append(t)
    return torch.stack(out)


def edit_copy(x, k):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        r = x[i].clone()
        r[k[i]] = 0
        r[0] += 5
        out[i] = r * 2
    return out


def not_self(sim):
    n = sim.shape[0]
    res = []
    for i in range(n):
        keep = torch.ones(n, dtype=torch.bool)
        keep[i] = False
        res.append(torch.logsumexp(sim[i].masked_fill(~keep, -1e9), dim=0))
    return torch.stack(res)


def in_place_methods(x, k):
    out = []
    for i in range(x.shape[0]):
        m = torch.ones(x.shape[1], x.shape[1])
        m.fill_diagonal_(0)
        t = x[i] * 2
        t += 1
        t.clamp_(min=0)
        oh = torch.zeros(5)
        oh.scatter_(0, k[i:i + 1], 1.0)
        out.append((m @ t).sum() + oh @ torch.arange(5.0))
    return torch.stack(out)


def from_weight(x, k, w):
    out = []
    for i in range(x.shape[0]):
        t = w.clone()
        t[k[i]] = x[i]
        out.append(t * t)
    return torch.stack(out)


def nest(x, k):
    out = torch.zeros(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            t = torch.zeros(3)
            t[k[i, j]] = x[i, j]
            out[i, j] = (t * torch.arange(3.0)).sum()
    return out


def last_one(x, k):
    for i in range(x.shape[0]):
        t = torch.zeros(4)
        t[k[i]] = x[i]
    return t


def _check(fn, *args, grad=()):
    return check_loop(fn, *args, grad=grad)


def test_label_smoothing_runs_under_vmap_with_the_loops_values_and_gradients():
    g = torch.Generator().manual_seed(0)
    logits, y = torch.randn(40, 7, generator=g), torch.randint(0, 7, (40,), generator=g)
    assert _check(label_smoothing, logits, y, 0.1, grad=(0,)) & _VECTORIZED
    assert explain(label_smoothing, logits, y, 0.1).path == "vectorized"


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_a_one_hot_from_zeros_gets_a_row_per_iteration(dtype):
    y = torch.randint(-6, 6, (50,), generator=torch.Generator().manual_seed(1)).to(dtype)
    assert _check(one_hot_rows, y, 6) & _VECTORIZED


def test_rows_kept_from_fresh_tensors_are_separate_tensors():
    y = torch.tensor([0, 2, 1])
    got = autovec(one_hot_rows)(y, 3)
    kept = autovec(lambda_free_list)(y, 3)
    kept[0][1] = 7.0            # the loop's tensors are its own: a write into one leaves the others
    assert kept[1][1] == 0 and kept[2][1] == 1
    torch.testing.assert_close(got, one_hot_rows(y, 3))


def lambda_free_list(y, c):
    out = []
    for i in range(y.shape[0]):
        t = torch.zeros(c)
        t[y[i]] = 1
        out.append(t)
    return out


def test_a_cloned_row_edited_in_place():
    g = torch.Generator().manual_seed(2)
    x, k = torch.randn(30, 6, generator=g), torch.randint(0, 6, (30,), generator=g)
    assert _check(edit_copy, x, k, grad=(0,)) & _VECTORIZED


def test_the_loop_index_as_the_written_position():
    sim = torch.randn(20, 20, generator=torch.Generator().manual_seed(3))
    assert _check(not_self, sim, grad=(0,)) & _VECTORIZED


def test_in_place_methods_and_updates_of_fresh_tensors():
    g = torch.Generator().manual_seed(4)
    x, k = torch.randn(25, 6, generator=g), torch.randint(0, 5, (25,), generator=g)
    assert _check(in_place_methods, x, k, grad=(0,)) & _VECTORIZED


def test_a_copy_of_a_weight_that_requires_grad():
    g = torch.Generator().manual_seed(5)
    x, k, w = torch.randn(20, generator=g), torch.randint(0, 4, (20,), generator=g), torch.randn(4, generator=g)
    assert _check(from_weight, x, k, w, grad=(0,)) & _VECTORIZED
    _check(from_weight, x, k, w, grad=(0, 2))     # (w's clone is loop-invariant: autograd's guards decide)


def test_a_loop_nest_with_a_fresh_tensor():
    g = torch.Generator().manual_seed(6)
    x, k = torch.randn(6, 5, generator=g), torch.randint(0, 3, (6, 5), generator=g)
    _check(nest, x, k, grad=(0,))
    assert explain(nest, x, k).path == "vectorized"


def test_the_last_iterations_tensor_after_the_loop():
    g = torch.Generator().manual_seed(7)
    x, k = torch.randn(12, generator=g), torch.randint(0, 4, (12,), generator=g)
    _check(last_one, x, k, grad=(0,))


def test_an_index_out_of_range_raises_the_loops_error():
    raises_as_loop(IndexError, one_hot_rows, torch.tensor([0, 1, 6, 2]), 6)


def long_store(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(4, dtype=torch.long)
        t[k[i]] = x[i]          # a 0-d index: the loop's copy_ converts, a batched index_put raises
        out.append(t)
    return torch.stack(out)


def test_stores_vmap_cannot_batch_run_the_loop():
    g = torch.Generator().manual_seed(8)
    x, k = torch.randn(20, generator=g) * 5, torch.randint(0, 4, (20,), generator=g)
    _check(long_store, x, k)


def mask_store(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        r = x[i].clone()
        r[r < 0] = 0            # a boolean mask: runtime.put's masked_fill_ under vmap
        out[i] = r
    return out


def mask_named(x, lo):
    out = []
    for i in range(x.shape[0]):
        r = x[i] * 2
        m = (r < lo) | torch.isnan(torch.log(r + 0.5))
        r[m] = -1.5
        r[~m & (r > 1)] = 7
        out.append(r)
    return torch.stack(out)


def mask_of_rows(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clone()                 # (4, 3): the mask picks whole rows
        r[r.sum(1) > 0] = 0.25
        out.append(r)
    return torch.stack(out)


def mask_by_row_value(x, keep):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clone()
        r[keep[i]] = x[i].max()          # a per-iteration 0-d tensor of r's dtype
        out.append(r)
    return torch.stack(out)


def mask_into_long(x):
    out = []
    for i in range(x.shape[0]):
        r = torch.zeros(x.shape[1], dtype=torch.long)
        r[x[i] > 0] = 2.7                # the loop's store truncates: so does masked_fill_
        r[x[i] < -1] = True
        out.append(r)
    return torch.stack(out)


# a mask store into a tensor the iteration made runs under vmap (runtime masked_put's masked
# fill) or, by a number or by another tensor's selection by the same mask, as whole-batch
# operations (batching._Helpers.masked_fill_rows)
_VECTORIZED = {"vmap", "batched"}


def test_a_boolean_mask_store_into_a_fresh_tensor_runs_under_vmap():
    g = torch.Generator().manual_seed(8)
    x = torch.randn(9, 5, generator=g)
    assert _check(mask_store, x, grad=(0,)) & _VECTORIZED
    assert _check(mask_named, x, -1.5, grad=(0,)) & _VECTORIZED
    assert _check(mask_of_rows, torch.randn(6, 4, 3, generator=g), grad=(0,)) & _VECTORIZED
    keep = torch.rand(9, 5, generator=g) > 0.5
    assert _check(mask_by_row_value, x, keep) & _VECTORIZED
    # (a value that carries a gradient: index_put_ and masked_fill_ save different things for
    # backward, so where the loop's raises the other's may not: the loop)
    assert _check(mask_by_row_value, x, keep, grad=(0,)) == set()
    assert _check(mask_into_long, x) & _VECTORIZED


def mask_values_tensor(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clone()
        m = r > 0
        r[m] = r[m] * 10                 # values as many as the mask holds: the loop runs
        out.append(r)
    return torch.stack(out)


def mask_other_dtype(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clone()
        r[r > 0] = torch.tensor(3, dtype=torch.long)    # a value of another dtype: the store itself
        out.append(r)
    return torch.stack(out)


def mask_wrong_shape(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clone()
        r[torch.ones(3, dtype=torch.bool)] = 0
        out.append(r)
    return torch.stack(out)


def mask_overflow(x):
    out = []
    for i in range(x.shape[0]):
        r = torch.zeros(x.shape[1], dtype=torch.uint8)
        r[x[i] > 0] = 300
        out.append(r)
    return torch.stack(out)


def test_mask_stores_with_no_masked_fill_form_give_the_loops_outcome():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(7, 5, generator=g)
    _check(mask_values_tensor, x, grad=(0,))
    _check(mask_other_dtype, x)
    raises_as_loop(IndexError, mask_wrong_shape, x)
    raises_as_loop(RuntimeError, mask_overflow, x)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.bool])
def test_index_dtypes_other_than_int64_and_int32_give_the_loops_outcome(dtype):
    from conftest import outcome
    k = torch.tensor([1, 0, 1, 1]).to(dtype)
    want = outcome(one_hot_rows, k, 3)
    got = outcome(autovec(one_hot_rows), k, 3)
    if isinstance(want, tuple):
        assert got == want
    else:
        torch.testing.assert_close(got, want)


def view_then_write(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(4)
        v = t[k[i]]             # the loop's v is a view of t: it sees the write below
        t[k[i]] = x[i]
        out.append(v * 1 + t[0])
    return torch.stack(out)


def view_then_fill(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(4)
        v = t[k[i]]
        t.fill_(3)
        out.append(v + 0)
    return torch.stack(out)


@pytest.mark.parametrize("fn", [view_then_write, view_then_fill])
def test_a_view_read_before_a_write_keeps_the_loop(fn):
    g = torch.Generator().manual_seed(9)
    x, k = torch.randn(16, generator=g), torch.randint(0, 4, (16,), generator=g)
    assert _check(fn, x, k) == set()
    ex = explain(fn, x, k)
    assert ex.path == "python" and "a batched read of it would be a copy" in ex.loops[0].reason


def alias_read(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(4)
        a = t                   # the same tensor: a[k[i]] below is a view of t in the loop
        v = a[k[i]]
        t[k[i]] = x[i]
        out.append(v * 1)
    return torch.stack(out)


def constant_view_then_index(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(2, 4)
        r = t[1]
        v = r[k[i]]
        t[1, k[i]] = x[i]
        out.append(v + 0)
    return torch.stack(out)


def consumed_reads(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(4)
        s = t[k[i]] * 2 + t.sum()   # new memory at once: the loop's and the batch's agree
        t[k[i]] = x[i] + s
        out.append(t)
    return torch.stack(out)


@pytest.mark.parametrize("fn", [alias_read, constant_view_then_index])
def test_an_alias_or_a_view_kept_before_a_write_keeps_the_loop(fn):
    g = torch.Generator().manual_seed(12)
    x, k = torch.randn(16, generator=g), torch.randint(0, 4, (16,), generator=g)
    assert _check(fn, x, k) == set()
    assert explain(fn, x, k).path == "python"


def test_reads_into_new_memory_before_a_write_vectorize():
    g = torch.Generator().manual_seed(13)
    x, k = torch.randn(16, generator=g), torch.randint(0, 4, (16,), generator=g)
    assert _check(consumed_reads, x, k, grad=(0,)) & _VECTORIZED


def alias_of_input(x):
    for i in range(x.shape[0]):
        t = x[i]                # x's own row: the write is the caller's
        t[0] = t[1] * 2
    return x


def rebound(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(3)
        t[k[i]] = 1
        t = x[i]                # from here on x's row
        t[0] = 5.0
        out.append(t.sum())
    return torch.stack(out)


def under_a_branch(x, k):
    out = []
    for i in range(x.shape[0]):
        if x[i, 0] > 0:
            t = torch.zeros(3)
        else:
            t = x[i].clone()
        t[k[i]] = 1.0
        out.append(t)
    return torch.stack(out)


def write_in_branch(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(3)
        if x[i, 0] > 0:
            t[k[i]] = 1.0
        out.append(t)
    return torch.stack(out)


@pytest.mark.parametrize("fn", [rebound, under_a_branch, write_in_branch])
def test_other_writes_keep_the_loop_and_its_effects_on_arguments(fn):
    g = torch.Generator().manual_seed(10)
    x, k = torch.randn(8, 3, generator=g), torch.randint(0, 3, (8,), generator=g)
    _check(fn, x, k)
    assert explain(fn, x, k).path == "python"


def test_a_write_through_a_name_for_an_input_row_is_the_callers():
    # (`t = x[i]` is x's own row: its writes are stores into x, analysis.loops._row_aliases)
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(10))
    _check(alias_of_input, x)
    assert explain(alias_of_input, x).path == "vectorized"


def chained(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(4, 3)
        t[k[i]][0] = x[i]       # the loop writes through a view of row k[i]; a batched gather is a copy
        out.append(t)
    return torch.stack(out)


def test_a_write_through_a_subscript_of_a_subscript_keeps_the_loop():
    g = torch.Generator().manual_seed(11)
    x, k = torch.randn(10, generator=g), torch.randint(0, 4, (10,), generator=g)
    _check(chained, x, k, grad=(0,))
    assert explain(chained, x, k).path == "python"


# ----------------------------------------------------------------------------- found by a probe

def relu_in_place_positionally(x):
    out = []
    for i in range(x.shape[0]):
        t = torch.nn.functional.relu(x[i], True)    # inplace by position: t is x's row
        t += 1
        out.append(t * 1)
    return torch.stack(out)


def list_of_the_callers_tensor(x):
    out = []
    for i in range(x.shape[0]):
        t = [x[i]] * 2              # a new list holding x's own row
        t[0] += 1
        out.append(t[1] * 1)
    return torch.stack(out)


def number_times_index(x):
    out = []
    for i in range(x.shape[0]):
        t = 0.1 * 1                 # a Python float: the loop's arithmetic is in double precision
        t *= i
        out.append(t)
    return out


def view_by_positional_inplace(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(5)
        a = torch.nn.functional.relu(t[k[i]], True)     # a view of t, which the write below changes
        t[k[i]] = x[i]
        out.append(a * 1)
    return torch.stack(out)


def leaf_requiring_grad(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(4, requires_grad=True)
        t[k[i]] = x[i]
        out.append(t)
    return out


def new_from_weight(x, k, w):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(0).new(w)   # w's own memory
        t[k[i]] = x[i]
        out.append(t * 1)
    return torch.stack(out)


def transposed(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(3, 4).t()
        t[k[i]] = x[i]
        out.append(t)
    return out


def expanded(x, k):
    out = []
    for i in range(x.shape[0]):
        t = torch.zeros(3).expand(4, 3)     # one row's memory for all four
        t[k[i]] = x[i]
        out.append(t * 1)
    return torch.stack(out)


def kept_twice(x, k):
    a, b = [], []
    for i in range(x.shape[0]):
        t = torch.zeros(4)
        t[k[i]] = x[i]
        a.append(t)
        b.append(t[:2])             # a view of a's element in the loop
    return a, b


def _same_outcome(fn, *args):
    a1 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    a2 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    want, got = fn(*a1), autovec(fn)(*a2)
    for u, v in zip(*(w if isinstance(w, (list, tuple)) else [w] for w in (want, got))):
        if isinstance(u, torch.Tensor):
            assert type(v) is torch.Tensor and v.dtype == u.dtype and v.stride() == u.stride()
            assert v.requires_grad == u.requires_grad
            torch.testing.assert_close(v.detach(), u.detach())
        else:
            assert type(v) is type(u) and v == u
    for x1, x2 in zip(a1, a2):
        if isinstance(x1, torch.Tensor):
            assert torch.equal(x1, x2)
    return want, got


@pytest.mark.parametrize("fn", [relu_in_place_positionally, list_of_the_callers_tensor])
def test_values_that_may_be_the_callers_memory_are_not_tensors_of_their_own(fn):
    _same_outcome(fn, torch.randn(6, 3, generator=torch.Generator().manual_seed(14)))


def test_a_python_number_times_the_index_stays_a_python_number():
    _same_outcome(number_times_index, torch.zeros(9))


def test_a_view_made_by_a_positional_inplace_flag_keeps_the_loop():
    g = torch.Generator().manual_seed(15)
    _same_outcome(view_by_positional_inplace, torch.randn(8, generator=g), torch.randint(0, 5, (8,), generator=g))


def test_a_leaf_that_requires_grad_keeps_the_loop():
    g = torch.Generator().manual_seed(16)
    x, k = torch.randn(5, generator=g), torch.randint(0, 4, (5,), generator=g)
    raises_as_loop(RuntimeError, leaf_requiring_grad, x, k)
    with torch.no_grad():
        want, got = _same_outcome(leaf_requiring_grad, x, k)
    assert all(t.is_leaf for t in got)


def test_tensor_new_of_another_tensor_is_its_memory():
    g = torch.Generator().manual_seed(17)
    _same_outcome(new_from_weight, torch.randn(3, generator=g), torch.tensor([0, 1, 2]), torch.zeros(4))


@pytest.mark.parametrize("fn", [transposed, expanded])
def test_the_layout_of_a_fresh_tensor_is_the_loops(fn):
    g = torch.Generator().manual_seed(18)
    x, k = torch.randn(6, 3, generator=g), torch.randint(0, 3 if fn is transposed else 4, (6,), generator=g)
    _same_outcome(fn, x[:, :(4 if fn is transposed else 3)] if fn is transposed else x, k)


def test_a_tensor_kept_twice_keeps_the_loop():
    g = torch.Generator().manual_seed(19)
    x, k = torch.randn(5, generator=g), torch.randint(0, 4, (5,), generator=g)
    a, b = autovec(kept_twice)(x, k)
    a[0][0] = 99.0
    assert b[0][0] == 99.0          # b's rows are views of a's, as in the loop
    assert "kept twice" in explain(kept_twice, x, k).loops[0].reason


def number_name_times_index(x):
    out = []
    for i in range(x.shape[0]):
        t = 0.1 * 1
        u = t * i                   # a Python float in the loop, whatever holds the index
        out.append(x[i] + u)
    return torch.stack(out)


def test_a_python_number_name_times_the_index_is_computed_in_double_precision():
    x = torch.zeros(9, dtype=torch.float64)
    want, got = _same_outcome(number_name_times_index, x)
    assert torch.equal(got, want)


class _Pre:
    """A user object whose `normalize` may return its argument itself (not new memory)."""

    def normalize(self, w):
        return w


def user_method_mask(x, w, pre):
    out = []
    for i in range(x.shape[0]):
        r = pre.normalize(w)
        r[x[i] > 0] = 2.0
        out.append(r * 1)
    return torch.stack(out)


def user_method_store(x, w, pre):
    out = []
    for i in range(x.shape[0]):
        r = pre.normalize(w)
        r[1] = x[i, 0]
        out.append(r * 1)
    return torch.stack(out)


def normalize_out_by_position(x, w):
    out = []
    for i in range(x.shape[0]):
        r = F.normalize(w, 2.0, 0, 1e-12, w)     # `out=` by position: w itself
        r[x[i] > 0] = 2.0
        out.append(r * 1)
    return torch.stack(out)


def mask_store_of_its_own_max(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clone()
        r[r < 0] = r.max()                       # under grad the loop's backward raises
        out.append(r)
    return torch.stack(out)


def test_probe_findings_on_fresh_writes_give_the_loops_outcome():
    g = torch.Generator().manual_seed(13)
    x = torch.randn(6, 5, generator=g)
    for fn, extra in ((user_method_mask, (_Pre(),)), (user_method_store, (_Pre(),)), (normalize_out_by_position, ())):
        fast = autovec(fn)
        for _ in range(3):
            w1, w2 = torch.randn(5, generator=g), None
            w2 = w1.clone()
            want, got = fn(x, w1, *extra), fast(x, w2, *extra)
            assert torch.equal(want, got) and torch.equal(w1, w2)
        rt = fast._autovec_state.runtime
        assert rt is None or not rt.ran
    fast = autovec(mask_store_of_its_own_max)
    for f in (mask_store_of_its_own_max, fast):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            f(x.clone().requires_grad_()).sum().backward()
    assert _check(mask_store_of_its_own_max, x) & _VECTORIZED


def dropout_in_place(x, m):
    out = []
    for i in range(x.shape[0]):
        v = x[i] * 1
        w = F.dropout(v, 1.0, True, True)        # zeroes v, which the sum after reads
        out.append(v.sum() + w.sum())
    return torch.stack(out)


def dropout_on_a_selection(x, m):
    out = []
    for i in range(x.shape[0]):
        v = x[i][m[i]]
        w = F.dropout(v, p=1.0, training=True, inplace=True)
        out.append(v.sum() + w.sum())
    return torch.stack(out)


def like_leaf(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.zeros_like(x[i] * i, requires_grad=True))    # a leaf per iteration
    return out


def test_in_place_functions_and_leaves_are_the_loops():
    g = torch.Generator().manual_seed(14)
    x, m = torch.randn(5, 7, generator=g), torch.rand(5, 7, generator=g) > 0.5
    for fn in (dropout_in_place, dropout_on_a_selection):
        assert torch.equal(autovec(fn)(x, m), fn(x, m))
    got = autovec(like_leaf)(x)
    assert all(t.is_leaf and t.requires_grad for t in got) and len(got) == 5


def shifted_mask(x, p):
    out = torch.empty(x.shape, dtype=torch.bool)
    for i in range(x.shape[0]):
        rm = x[i].softmax(0).cumsum(0) > p      # a comparison's result: the iteration's own
        rm[1:] = rm[:-1].clone()
        rm[0] = False
        out[i] = rm
    return out


def top_marked(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        m = x[i] == x[i].max()
        m[0] |= True
        out[i] = m * x[i]
    return out


def bumped_mask(x):
    out = torch.empty(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        b = x[i] > 0
        b += 1               # a bool tensor updated by an int: the loop raises
        out[i] = b
    return out


def test_writes_into_a_comparisons_result():
    x = torch.randn(30, 8)
    check_loop(shifted_mask, x, 0.6)
    check_loop(top_marked, x)
    assert explain(shifted_mask, x, 0.6).path == "vectorized" and explain(top_marked, x).path == "vectorized"
    raises_as_loop(RuntimeError, bumped_mask, torch.randn(10))
