"""`out[i][mask] = v`, a mask store into the loop's own row of a tensor from outside the
iteration (`labels[i][labels[i] == pad] = -100`, `pos[b][mask[b] == 0] = 1` after
`pos[b] = ...`, `labels[i, :-1][m] = v`): read as a clone of the row, the mask store into it
and a store of the row (analysis.loops._row_mask_stores). Checked against the loop: values,
arguments after the call, gradients, errors, a list of rows (the loop as written)."""
import pytest
import torch

from autovec import autovec, explain
from conftest import check_loop, raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def ignore_pad(labels, pad):
    for i in range(labels.shape[0]):
        labels[i][labels[i] == pad] = -100
    return labels


def position_ids(mask):
    pos = torch.empty_like(mask)
    for b in range(mask.shape[0]):
        pos[b] = torch.cumsum(mask[b], 0) - 1
        pos[b][mask[b] == 0] = 1
    return pos


def zero_small(x, thr):
    out = x.clone()
    for i in range(x.shape[0]):
        m = x[i].abs() < thr
        out[i][m & (x[i] != 0)] = 0.0
    return out


def shift_and_ignore(labels, mask):
    for i in range(labels.shape[0]):
        labels[i, :-1][mask[i, 1:] == 0] = -100
    return labels


def fill_by_value(x, out):
    for i in range(x.shape[0]):
        out[i][torch.isnan(x[i])] = x[i].nanmean()
    return out


def float_into_ints(x, out):
    for i in range(x.shape[0]):
        out[i][x[i] > 0] = 2.7          # converted as setitem converts it: 2
    return out


def test_mask_stores_into_rows_match_the_loop():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 5, (30, 12), generator=g)
    mask = (torch.rand(30, 12, generator=g) > 0.3).long()
    x = torch.randn(30, 12, generator=g)
    assert check_loop(ignore_pad, labels, 0)
    assert check_loop(position_ids, mask)
    assert check_loop(zero_small, x, 0.5)
    assert check_loop(shift_and_ignore, labels, mask)
    xn = x.clone()
    xn[xn > 1] = float("nan")
    want = fill_by_value(xn, torch.zeros(30, 12, dtype=torch.float64))
    fast = autovec(fill_by_value)
    for _ in range(3):
        assert torch.equal(fast(xn, torch.zeros(30, 12, dtype=torch.float64)), want)
    assert check_loop(float_into_ints, x, torch.zeros(30, 12, dtype=torch.int64))
    for fn, args in ((ignore_pad, (labels, 0)), (position_ids, (mask,)), (shift_and_ignore, (labels, mask))):
        ex = explain(fn, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        assert ex.path == "vectorized" and ex.loops[0].strategy not in ("python", "fission"), fn.__name__


def test_gradients_through_a_masked_row():
    x = torch.randn(20, 6)
    check_loop(zero_small, x, 0.5, grad=(0,))


def test_a_list_of_rows_runs_as_written():
    rows1 = [torch.randint(0, 3, (5,)) for _ in range(4)]
    rows2 = [r.clone() for r in rows1]

    class Rows(list):
        shape = (4,)
    kept = rows2[1]
    want = ignore_pad(Rows(rows1), 0)
    got = autovec(ignore_pad)(Rows(rows2), 0)
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert got[1] is kept            # each row written in place, as the loop writes it


def test_a_mask_of_another_shape_raises_as_the_loop():
    labels = torch.randint(0, 5, (4, 6))
    mask = torch.ones(4, 7, dtype=torch.long)
    raises_as_loop(IndexError, shift_and_ignore, labels, mask)


def reads_another_row(x):
    for i in range(1, x.shape[0]):
        x[i][x[i - 1] > 0] = 0.0        # the row before, which the iteration before wrote
    return x


def test_a_mask_from_another_row_keeps_the_loop():
    x = torch.randn(10, 4)
    assert check_loop(reads_another_row, x) == set()
    assert explain(reads_another_row, x).loops[0].strategy == "python"


def clamp_positions(mask):
    pos = torch.empty_like(mask)
    for b in range(mask.shape[0]):
        pos[b] = torch.cumsum(mask[b], 0) - 1
        pos[b][pos[b] < 0] = 0            # the mask reads the row the store before wrote
    return pos


def clean_nans(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.log(x[i])
        out[i][torch.isnan(out[i])] = 0
    return out


def clamp_then_flag(x):
    for i in range(x.shape[0]):
        x[i].clamp_(min=-1)
        x[i][x[i] == -1] = 5
    return x


def two_masks(x):
    for i in range(x.shape[0]):
        x[i][x[i] < 0] = 0
        x[i][x[i] == 0] = 0.5             # sees the zeros the first one wrote
    return x


def value_reads_the_row(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i]
        out[i][x[i] < 0] = out[i].max()
    return out


@pytest.mark.parametrize("fn", [clamp_positions, clean_nans, clamp_then_flag, two_masks, value_reads_the_row])
def test_a_mask_store_reading_a_row_the_iteration_wrote_sees_the_write(fn):
    """(found by an adversarial probe: the clone's mask and value read the row as it was before
    the iteration's earlier write; such stores keep their statements, fission or the loop)"""
    g = torch.Generator().manual_seed(7)
    x = (torch.rand(40, 9, generator=g) > 0.5).long() if fn is clamp_positions else torch.randn(40, 9, generator=g)
    fast = autovec(fn)
    for _ in range(3):
        assert torch.equal(fast(x.clone()).nan_to_num(9.0), fn(x.clone()).nan_to_num(9.0))
