"""`if c: out[k] = a` / `else: out[k] = b`, one store to one same subscript in each branch (an
`elif` chain too), read as `out[k] = a if c else b` (analysis.hoist.merged_branch_stores): in
loop nests and scatters, where two stores of one element were refused before. Checked against
the loop: values, dtypes, errors and gradients."""
import pytest
import torch

from autovec import autovec, explain
from conftest import check_loop, raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def shift_labels(input_ids, attention_mask):
    B, T = input_ids.shape
    labels = torch.full_like(input_ids, 7)
    for i in range(B):
        for j in range(T - 1):
            if attention_mask[i, j + 1] == 1:
                labels[i, j] = input_ids[i, j + 1]
            else:
                labels[i, j] = -100
    return labels


def three_ways(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0.5:
                out[i, j] = x[i, j] * 2
            elif x[i, j] < -0.5:
                out[i, j] = 0.1
            else:
                out[i, j] = -3
    return out


def one_row(x, out, r):
    for j in range(x.shape[0]):
        if x[j] > 0:
            out[r, j] = x[j] * 2
        else:
            out[r, j] = 0.1
    return out


def one_row_expression(x, out, r):
    for j in range(x.shape[0]):
        out[r, j] = x[j] * 2 if x[j] > 0 else 0.1
    return out


def test_a_loop_nest_of_branch_stores():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 30000, (6, 9), generator=g)
    mask = (torch.arange(9) < torch.randint(1, 10, (6, 1), generator=g)).long()
    assert check_loop(shift_labels, ids, mask)
    assert explain(shift_labels, ids, mask).path == "vectorized"
    x = torch.randn(5, 7, generator=g)
    for dtype in (torch.float32, torch.float64, torch.int64):
        assert check_loop(three_ways, x, torch.zeros(5, 7, dtype=dtype))
    check_loop(three_ways, x, torch.zeros(5, 7), grad=(0,))     # (branches on data under grad: the loop)
    assert explain(three_ways, x, torch.zeros(5, 7)).path == "vectorized"


@pytest.mark.parametrize("fn", [one_row, one_row_expression])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.float16])
def test_a_conditional_value_scattered_into_a_fixed_row(fn, dtype):
    x = torch.randn(40, generator=torch.Generator().manual_seed(1))
    assert check_loop(fn, x, torch.zeros(3, 40, dtype=dtype), 1)
    assert check_loop(fn, x, torch.zeros(3, 40, dtype=dtype), -1)
    if dtype is torch.float32:
        assert explain(fn, x, torch.zeros(3, 40, dtype=dtype), 1).path == "vectorized"


def reads_past_the_end(x, m):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if m[i, j]:
                out[i, j] = x[i, j + 1]
            else:
                out[i, j] = 0.0
    return out


def reads_ahead(x, m):
    out = torch.zeros(x.shape[0], x.shape[1] - 1)
    for i in range(x.shape[0]):
        for j in range(x.shape[1] - 1):
            if m[i, j]:
                out[i, j] = x[i, j + 1]
            else:
                out[i, j] = 0.0
    return out


def test_a_side_that_reads_out_of_range_raises_as_the_loop():
    x = torch.randn(4, 5)
    m = torch.zeros(4, 5, dtype=torch.bool)
    check_loop(reads_past_the_end, x, m)     # never the last column: no error (the nest's guard keeps the loop)
    assert check_loop(reads_ahead, torch.randn(4, 6), m)
    assert explain(reads_ahead, torch.randn(4, 6), m).path == "vectorized"
    m[2, 4] = True
    raises_as_loop(IndexError, reads_past_the_end, x, m)


def different_elements(x):
    out = torch.zeros(x.shape[0], x.shape[1] + 1)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                out[i, j] = x[i, j]
            else:
                out[i, j + 1] = -x[i, j]    # another element: not one store
    return out


def more_than_a_store(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                print_count = 1
                out[i, j] = x[i, j] + print_count
            else:
                out[i, j] = 0.0
    return out


def test_branches_that_are_not_one_store_each_stay_as_written():
    from autovec.analysis.hoist import merged_branch_stores
    from autovec.frontend import capture
    x = torch.randn(4, 5)
    for fn in (different_elements, more_than_a_store):
        cap = capture(fn)
        assert merged_branch_stores(cap) == 0
        assert check_loop(fn, x) is not None
    cap = capture(three_ways)
    assert merged_branch_stores(cap) == 1
    assert "out[i, j] = x[i, j] * 2 if x[i, j] > 0.5 else 0.1 if x[i, j] < -0.5 else -3" in __import__("ast").unparse(cap.tree)


def test_tracebacks_point_at_the_users_line():
    x = torch.randn(4, 5)
    m = torch.ones(4, 5, dtype=torch.bool)
    got = raises_as_loop(IndexError, reads_past_the_end, x, m)
    import traceback
    frames = [f for f in traceback.extract_tb(got.value.__traceback__) if f.filename == __file__]
    assert frames[-1].lineno == reads_past_the_end.__code__.co_firstlineno + 5      # `out[i, j] = x[i, j + 1]`
