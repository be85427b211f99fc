"""Loops that keep only some iterations (`if ...: continue`, `if c: total += v`, filtered
appends, the last match), at sizes where the runtime takes its faster routes than boolean
indexing (masked_select, index_select, a sum with the other rows replaced by -0.0, the count of
a repeated row), and indexing by several per-iteration integers (`x[i, t[i]]`), which the
batched body does as one advanced index. Each is checked against the loop: values, dtypes,
signed zeros, gradients, errors and the path taken."""
import math

import pytest
import torch

from autovec import assert_equivalent, autovec
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _bits(a, b):
    """Same values to the bit (signed zeros and NaNs included), same dtype and shape."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(torch.signbit(a), torch.signbit(b))
    torch.testing.assert_close(b, a, equal_nan=True, rtol=1e-5, atol=1e-5)


def ignore_mean(loss, targets, ignore):
    total = torch.tensor(0.0)
    kept = 0
    for i in range(targets.shape[0]):
        if targets[i] == ignore:
            continue
        total = total + loss[i]
        kept += 1
    return total / max(kept, 1), kept


def kept_rows_sum(x, keep):
    total = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        if keep[i]:
            total += x[i]
    return total


def positive_rows(x):
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            out.append(x[i])
    return torch.stack(out)


def positive_values(v):
    out = []
    for i in range(v.shape[0]):
        if v[i] > 0:
            out.append(v[i] * 2)
    return torch.stack(out)


def last_above(v, c):
    found = None
    for i in range(v.shape[0]):
        if v[i] > c:
            found = v[i]
    return found


def py_kept_total(v):
    s = 0.0
    for i in range(v.shape[0]):
        if v[i] > 0:
            s += v[i].item()
    return s


@pytest.mark.parametrize("n", [7, 300, 20_000])
def test_ignore_index_mean(n):
    g = torch.Generator().manual_seed(n)
    targets = torch.randint(0, 5, (n,), generator=g)
    targets[torch.rand(n, generator=g) < 0.3] = -100
    loss = torch.rand(n, generator=g)
    fast = autovec(ignore_mean)
    want, got = ignore_mean(loss, targets, -100), fast(loss, targets, -100)
    assert got[1] == want[1] and type(got[1]) is int
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    assert _ran(fast) == {"batched"}


def test_every_row_ignored_keeps_the_initial_values():
    n = 10_000
    fast = autovec(ignore_mean)
    loss, targets = torch.rand(n), torch.full((n,), -100)
    got, want = fast(loss, targets, -100), ignore_mean(loss, targets, -100)
    assert got[1] == want[1] == 0
    _bits(want[0], got[0])


@pytest.mark.parametrize("shape", [(9, 3), (5000, 3), (40, 512)])
def test_kept_rows_sum(shape):
    g = torch.Generator().manual_seed(shape[0])
    x = torch.randn(*shape, generator=g)
    keep = torch.rand(shape[0], generator=g) < 0.5
    fast = autovec(kept_rows_sum)
    assert_equivalent(kept_rows_sum, fast, (x, keep))
    torch.testing.assert_close(fast(x, keep), kept_rows_sum(x, keep))
    assert _ran(fast) == {"batched"}


def test_masked_sum_ignores_nan_and_inf_in_dropped_rows_and_keeps_zero_signs():
    n = 6000
    x = torch.full((n, 2), -0.0)
    keep = torch.zeros(n, dtype=torch.bool)
    keep[::3] = True
    x[~keep] = torch.tensor([float("nan"), float("inf")])
    fast = autovec(kept_rows_sum)
    _bits(kept_rows_sum(x, keep), fast(x, keep))
    x[keep] = torch.tensor([1.5, -2.0])
    _bits(kept_rows_sum(x, keep), fast(x, keep))
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("n", [6, 5000])
def test_filtered_appends_of_rows_and_values(n):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 3, generator=g)
    v = torch.randn(n, generator=g)
    for fn, arg in ((positive_rows, x), (positive_values, v)):
        fast = autovec(fn)
        want, got = fn(arg), fast(arg)
        _bits(want, got)
        # a new tensor of its own, as torch.stack gives: writing to it leaves the input alone
        assert got.untyped_storage().data_ptr() != arg.untyped_storage().data_ptr()
        assert _ran(fast) == {"batched"}


def test_selected_rows_with_gradients_keep_the_loops_gradients():
    # (selected iterations of tensors that require grad keep the loop: see the guard's reason)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3000, 3, generator=g, requires_grad=True)
    keep = torch.rand(3000, generator=g) < 0.5
    for fn, args in ((kept_rows_sum, (x, keep)), (positive_rows, (x,))):
        want = torch.autograd.grad((fn(*args) ** 2).sum(), x)[0]
        got = torch.autograd.grad((autovec(fn)(*args) ** 2).sum(), x)[0]
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("n", [8, 50_000])
def test_last_match(n):
    g = torch.Generator().manual_seed(n)
    v = torch.randn(n, generator=g)
    fast = autovec(last_above)
    for c in (0.0, 2.5, 1e9):
        want, got = last_above(v, c), fast(v, c)
        if want is None:
            assert got is None
        else:
            _bits(want, got)


def test_python_total_of_kept_items():
    v = torch.randn(9000, dtype=torch.float64)
    fast = autovec(py_kept_total)
    want, got = py_kept_total(v), fast(v)
    assert type(got) is float and math.isclose(got, want, rel_tol=1e-12)


# --------------------------------------------------------------- x[i, t[i]]

def pick_nll(logp, targets, mask):
    n = logp.shape[0]
    losses = torch.zeros(n)
    for i in range(n):
        losses[i] = -logp[i, targets[i]] * mask[i]
    return losses


def pick_rows(table, a, b):
    out = []
    for k in range(a.shape[0]):
        out.append(table[a[k], b[k], :2])
    return torch.stack(out)


def pick_sum(scores, idx):
    total = 0.0
    for i in range(idx.shape[0]):
        total = total + scores[i, idx[i]]
    return total


@pytest.mark.parametrize("n", [5, 4000])
def test_per_row_pick_values_gradients_and_path(n):
    g = torch.Generator().manual_seed(n)
    logp = torch.randn(n, 7, generator=g).log_softmax(1).requires_grad_()
    targets = torch.randint(-7, 7, (n,), generator=g)     # negative indices count from the end
    mask = (torch.rand(n, generator=g) < 0.8).float()
    fast = autovec(pick_nll)
    want, got = pick_nll(logp, targets, mask), fast(logp, targets, mask)
    torch.testing.assert_close(got, want)
    gw = torch.autograd.grad(want.sum(), logp)[0]
    gg = torch.autograd.grad(got.sum(), logp)[0]
    torch.testing.assert_close(gg, gw)
    assert _ran(fast) == {"batched"}


def test_two_gathered_indices_with_a_trailing_slice_and_repeats():
    g = torch.Generator().manual_seed(3)
    table = torch.randn(4, 5, 3, generator=g, requires_grad=True)
    a = torch.tensor([0, 3, 3, 1, 0, 3])
    b = torch.tensor([4, 0, 0, -1, 2, 0])     # repeated pairs: their gradients add up
    fast = autovec(pick_rows)
    want, got = pick_rows(table, a, b), fast(table, a, b)
    torch.testing.assert_close(got, want)
    gw = torch.autograd.grad((want ** 2).sum(), table)[0]
    gg = torch.autograd.grad((got ** 2).sum(), table)[0]
    torch.testing.assert_close(gg, gw)
    assert _ran(fast) == {"batched"}


def test_per_row_pick_out_of_range_raises_the_loops_error():
    scores = torch.randn(6, 4)
    idx = torch.tensor([0, 1, 2, 3, 4, 0])
    fast = autovec(pick_sum)
    with pytest.raises(IndexError) as want:
        pick_sum(scores, idx)
    with pytest.raises(IndexError) as got:
        fast(scores, idx)
    assert str(got.value) == str(want.value)
    ok = torch.tensor([0, 1, 2, 3, -4, 0])
    torch.testing.assert_close(fast(scores, ok), pick_sum(scores, ok))


def test_a_free_tensor_read_by_view_is_not_counted_as_memory_per_iteration():
    # each iteration reads one element of a 4 MB table: nothing to chunk, even with a budget
    # far below n times the table's size (the old count took the table's view for new memory)
    n = 2000
    logp = torch.randn(n, 500)
    targets = torch.randint(0, 500, (n,))
    mask = torch.ones(n)
    fast = autovec(pick_nll, memory_budget=64 << 20)
    torch.testing.assert_close(fast(logp, targets, mask), pick_nll(logp, targets, mask))
    assert fast._autovec_state.runtime.chunked == {}
