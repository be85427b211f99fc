"""Stores through a vector of indices per iteration (`masked[u, idx] = vals` with `idx` from
topk, `hits[i, cols] += 1`): each iteration's positions written as that many one-position
writes, in the loop's order, where the indices do not repeat within one iteration (the loop's
setitem writes a repeated position once, `+=` included: those keep the loop). Checked against the
loop: values, errors, path."""
import pytest
import torch

from autovec import autovec, explain
from conftest import raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def topk_mask(scores, k):
    masked = torch.full_like(scores, float("-inf"))
    for u in range(scores.shape[0]):
        vals, idx = torch.topk(scores[u], k)
        masked[u, idx] = vals
    return masked


def given_columns(out, cols, v):
    for i in range(cols.shape[0]):
        out[i, cols[i]] = v[i]
    return out


def count_columns(hits, cols):
    for i in range(cols.shape[0]):
        hits[i, cols[i]] += 1
    return hits


def shared_bins(out, idx, v):
    for i in range(idx.shape[0]):
        out[idx[i]] = v[i]          # (rows of idx overlap: the last iteration writing a bin wins)
    return out


def kept_rows(out, cols, keep):
    for i in range(cols.shape[0]):
        if keep[i]:
            out[i, cols[i]] = 1.0
    return out


def grid(out, idx):
    for i in range(idx.shape[0]):
        out[i, idx[i]] = 2.0        # (a (2, 2) block of indices per iteration)
    return out


def _check(fn, *args, path="vectorized"):
    f = autovec(fn)
    for _ in range(3):
        a = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
        b = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
        torch.testing.assert_close(f(*a), fn(*b), rtol=0, atol=0)
        for u, w in zip(a, b):
            if isinstance(u, torch.Tensor):
                torch.testing.assert_close(u, w, rtol=0, atol=0)
    if path:
        a = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
        assert explain(f, *a).path == path


def test_top_k_of_each_row():
    _check(topk_mask, torch.randn(30, 12), 4)


def test_given_columns_with_negative_indices_and_rows_of_values():
    cols = torch.stack([torch.randperm(9)[:3] for _ in range(7)])
    cols[2, 1] = -1
    _check(given_columns, torch.zeros(7, 9), cols, torch.randn(7, 3))
    _check(given_columns, torch.zeros(7, 9), cols, torch.randn(7, 1, 3))     # (a leading 1 dropped)
    _check(given_columns, torch.zeros(7, 9), cols, torch.randn(7))           # (one value for the row)


def test_counts_into_distinct_columns():
    cols = torch.stack([torch.randperm(9)[:4] for _ in range(6)])
    _check(count_columns, torch.zeros(6, 9, dtype=torch.int64), cols)


def test_a_column_repeated_within_an_iteration_keeps_the_loop():
    # `hits[i, [2, 2]] += 1` adds one, not two: the loop decides
    cols = torch.tensor([[1, 2, 2], [0, 3, 4]])
    _check(count_columns, torch.zeros(2, 5, dtype=torch.int64), cols, path="python")
    _check(given_columns, torch.zeros(2, 5), cols, torch.randn(2, 3), path="python")
    wrapped = torch.tensor([[1, 4, -1], [0, 3, 2]])      # (4 and -1 are one column of 5)
    _check(count_columns, torch.zeros(2, 5, dtype=torch.int64), wrapped, path="python")


def test_bins_shared_across_iterations():
    idx = torch.tensor([[0, 3], [3, 5], [5, 0], [1, 2]])
    _check(shared_bins, torch.zeros(6), idx, torch.randn(4, 2))


def test_kept_iterations_and_blocks_of_indices():
    cols = torch.stack([torch.randperm(8)[:3] for _ in range(5)])
    _check(kept_rows, torch.zeros(5, 8), cols, torch.tensor([True, False, True, True, False]))
    blocks = torch.stack([torch.randperm(8)[:4].view(2, 2) for _ in range(5)])
    _check(grid, torch.zeros(5, 8), blocks)


def test_an_index_past_the_end_raises_as_the_loop():
    raises_as_loop(IndexError, given_columns, torch.zeros(2, 5), torch.tensor([[0, 5], [1, 2]]), torch.randn(2, 2))


def add_columns(out, cols, v):
    for i in range(cols.shape[0]):
        out[i, cols[i]] += v[i]
    return out


def fill_columns(out, cols):
    for i in range(cols.shape[0]):
        out[i, cols[i]] = 2.5
    return out


@pytest.mark.parametrize("out_dtype, v_dtype", [(torch.float32, torch.float64), (torch.bool, torch.float32),
                                                (torch.int64, torch.float32), (torch.float16, torch.float32)])
def test_values_of_another_dtype_raise_as_the_loop(out_dtype, v_dtype):
    # (the loop's setitem through a tensor of indices is an index_put: one dtype for both)
    cols = torch.tensor([[0, 2], [1, 3], [3, 0]])
    raises_as_loop(RuntimeError, given_columns, torch.zeros(3, 4, dtype=out_dtype), cols,
                   torch.randn(3, 2).to(v_dtype))


def test_an_update_whose_result_has_another_dtype_raises_as_the_loop():
    cols = torch.tensor([[0, 2], [1, 3], [3, 0]])
    raises_as_loop(RuntimeError, add_columns, torch.zeros(3, 4, dtype=torch.int64), cols, torch.randn(3, 2))
    # (`+=` adds float64 values in place into the gathered float32 copy: no error, and the loop
    # decides, as for a 0-d float64 value per row)
    _check(add_columns, torch.zeros(3, 4), cols, torch.randn(3, 2).double(), path="python")
    _check(add_columns, torch.zeros(3, 4), cols, torch.randn(3).double(), path="python")
    _check(add_columns, torch.zeros(3, 4), cols, torch.randn(3, 2))


def test_a_python_number_is_converted_as_the_loop_converts_it():
    cols = torch.tensor([[0, 2], [1, 3], [3, 0]])
    _check(fill_columns, torch.zeros(3, 4, dtype=torch.int64), cols)


@pytest.mark.parametrize("dtype", [torch.int16, torch.int8])
def test_index_dtypes_the_loop_refuses(dtype):
    raises_as_loop(IndexError, count_columns, torch.zeros(3, 4, dtype=torch.int64),
                   torch.tensor([[0, 2], [1, 3], [3, 0]], dtype=dtype))


def test_int32_indices():
    _check(count_columns, torch.zeros(3, 4, dtype=torch.int64), torch.tensor([[0, 2], [1, 3], [3, 0]], dtype=torch.int32))


def add_columns_spelled_out(out, cols, v):
    for i in range(cols.shape[0]):
        out[i, cols[i]] = out[i, cols[i]] + v[i]
    return out


def test_an_update_spelled_out_whose_result_has_another_dtype_raises_as_the_loop():
    # (a new float64 result written into float32 through a tensor of indices: index_put raises)
    cols = torch.tensor([[0, 2], [1, 3], [3, 0]])
    raises_as_loop(RuntimeError, add_columns_spelled_out, torch.zeros(3, 4), cols, torch.randn(3, 2).double())
    _check(add_columns_spelled_out, torch.zeros(3, 4), cols, torch.randn(3, 2))


# A boolean mask per iteration as the last index (runtime._mask_iterations)

def mask_fill(img, masks, v):
    for i in range(img.shape[0]):
        img[i][masks[i]] = v
    return img


def mask_rows_of_values(img, masks, v):
    for i in range(masks.shape[0]):
        img[i, masks[i]] = v[i]
    return img


def mask_update(img, masks, w):
    for i in range(img.shape[0]):
        img[i][masks[i]] += w[i]         # (w[i] a row of the dimensions after the mask's)
    return img


def mask_gathered(img, masks):
    for i in range(img.shape[0]):
        img[i][masks[i]] = img[i][masks[i]] * 2   # (a value per selected position: its length varies)
    return img


@pytest.mark.parametrize("shape, mshape", [((20, 6), (20, 6)), ((20, 4, 5), (20, 4, 5)), ((20, 4, 5), (20, 4)),
                                           ((1, 6), (1, 6)), ((0, 6), (0, 6))])
@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_boolean_masks_per_iteration(shape, mshape, p):
    g = torch.Generator().manual_seed(7)
    img, masks = torch.randn(shape, generator=g), torch.rand(mshape, generator=g) < p
    _check(mask_fill, img, masks, -1.5, path="vectorized" if shape[0] > 1 and p else None)
    _check(mask_rows_of_values, img, masks, torch.randn(shape[0], generator=g), path=None)
    _check(mask_update, img, masks, torch.randn(shape[0], *shape[len(mshape):], generator=g), path=None)


def test_a_value_per_selected_position_keeps_the_loop():
    img, masks = torch.randn(10, 6), torch.rand(10, 6) < 0.5
    _check(mask_gathered, img, masks, path="python")


def test_a_mask_of_another_shape_raises_as_the_loop():
    raises_as_loop(IndexError, mask_fill, torch.randn(5, 6), torch.ones(5, 7, dtype=torch.bool), 0.0)


def test_values_of_another_dtype_through_a_mask():
    # a 0-d value is converted as a number (a masked fill); a row of another dtype raises
    _check(mask_rows_of_values, torch.zeros(5, 6), torch.rand(5, 6) < 0.5, torch.randn(5, dtype=torch.float64))
    _check(mask_rows_of_values, torch.zeros(5, 6, dtype=torch.int64), torch.rand(5, 6) < 0.5, torch.randn(5),
           path=None)
    raises_as_loop(RuntimeError, mask_update, torch.zeros(5, 4, 3, dtype=torch.int64),
                   torch.ones(5, 4, dtype=torch.bool), torch.ones(5, 3))


def test_complex_inf_through_a_mask_keeps_the_loop():
    img = torch.randn(3, 4, dtype=torch.complex64)
    masks = torch.ones(3, 4, dtype=torch.bool)
    w = torch.tensor([float("inf"), 1.0, float("nan")]).to(torch.complex64)
    a, b = img.clone(), img.clone()
    mask_update(a.unsqueeze(-1).expand(3, 4, 1).clone(), masks, w.view(3, 1))
    want = mask_update(img.clone().unsqueeze(-1), masks, w.view(3, 1))
    got = autovec(mask_update)(img.clone().unsqueeze(-1), masks, w.view(3, 1))
    assert torch.equal(torch.view_as_real(want).isnan(), torch.view_as_real(got).isnan())
    assert torch.equal(torch.view_as_real(want).nan_to_num(), torch.view_as_real(got).nan_to_num())
