"""A loop-invariant tensor indexed by fixed slices, then one per-iteration integer (`x[:, 2 * i]`,
`x[1:, j[i], 0]`): the batched body gathers the rows along that dimension and moves them first.
And a window of the loop's index (`x[i:i + 3]`) on the kept rows of a branch, whose indices do
not count up (0, 2, 3, 6): read from each kept index, not from the first two. Checked against the
loop: values, errors, gradients, path."""
import math

import pytest
import torch

from autovec import autovec, explain
from conftest import raises_as_loop, ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def pyramid(x):
    b, t, d = x.shape
    out = torch.zeros(b, t // 2, 2 * d)
    for i in range(t // 2):
        out[:, i] = torch.cat([x[:, 2 * i], x[:, 2 * i + 1]], dim=-1)
    return out


def picked_columns(x, j):
    out = []
    for i in range(j.shape[0]):
        out.append(x[1:, j[i], 0] * (i + 1))
    return torch.stack(out)


def columns(x, idx):
    out = []
    for i in range(len(idx)):
        out.append(x[:, idx[i]].exp())
    return out


def kept_windows(x, m):
    out = torch.zeros(m.shape[0])
    for i in range(m.shape[0]):
        if m[i] > 0:
            out[i] = x[i:i + 3].sum()
    return out


def test_pairs_of_frames_at_an_even_index():
    x = torch.randn(3, 11, 4)
    f = autovec(pyramid)
    assert explain(f, x).path == "vectorized"
    torch.testing.assert_close(f(x), pyramid(x), rtol=0, atol=0)
    assert "batched" in ran_modes(f)


def test_fixed_slices_then_a_gathered_index_then_an_integer():
    x = torch.randn(5, 7, 3)
    j = torch.tensor([6, 0, 3, 3, -1])              # (-1: Python's last column, as a gather's)
    f = autovec(picked_columns)
    assert explain(f, x, j).path == "vectorized"
    torch.testing.assert_close(f(x, j), picked_columns(x, j), rtol=0, atol=0)


def test_a_python_list_of_indices():
    x = torch.randn(4, 9)
    idx = [8, 1, -2, 4]
    f = autovec(columns)
    assert explain(f, x, idx).path == "vectorized"
    for a, b in zip(f(x, idx), columns(x, idx)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_an_index_past_the_end_raises_as_the_loop():
    raises_as_loop(IndexError, picked_columns, torch.randn(5, 7, 3), torch.tensor([1, 7]))


def test_gradients_through_the_gathered_frames():
    x = torch.randn(2, 9, 3, requires_grad=True)
    w = torch.randn(2, 4, 6)
    (autovec(pyramid)(x) * w).sum().backward()
    got, x.grad = x.grad.clone(), None
    (pyramid(x) * w).sum().backward()
    torch.testing.assert_close(got, x.grad, rtol=0, atol=0)


def test_windows_of_kept_rows_whose_indices_do_not_count_up():
    # the first calls keep rows 1..17 (they count up, so the windows' fast form passes its
    # check); later calls keep 0, 2, 3, 6, ..: each window is read at its own index
    x = torch.randn(60, requires_grad=True)
    f = autovec(kept_windows)
    m = torch.ones(18)
    m[0] = -1
    for _ in range(4):
        torch.testing.assert_close(f(x, m), kept_windows(x, m), rtol=0, atol=0)
    m = torch.tensor([1., -1, 1, 1, -1, -1, 1, -1, 1, 1] + [1.] * 8)
    for _ in range(3):
        torch.testing.assert_close(f(x, m), kept_windows(x, m), rtol=0, atol=0)


# ---------------------------------------------------------------- every read of the index is c * i

def positional_encoding(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / (10000 ** (2 * i / d_model))
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


def pair_sums(x, out):
    for i in range(x.shape[0] // 2):
        out[2 * i] = x[i * 2] + x[2 * i + 1]        # (only even rows of out)
    return out


def stepped(x, a, b, s):
    out = torch.zeros(x.shape[0])
    for i in range(a, b, s):
        out[2 * i] = x[2 * i + 1] * 3.0
    return out


def index_after(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0] // 2):
        out[2 * i] = x[2 * i + 1]
    return out, i


def two_coefficients(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0] // 3):
        out[2 * i] = x[3 * i]
    return out


def rebound(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0] // 2):
        out[2 * i] = x[2 * i]
        i = 0
    return out


def test_interleaved_sine_and_cosine_columns():
    f = autovec(positional_encoding)
    assert explain(f, 50, 16).path == "vectorized"
    torch.testing.assert_close(f(50, 16), positional_encoding(50, 16), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(f(7, 5), positional_encoding(7, 5), rtol=1e-6, atol=1e-7)   # (odd width)


def test_even_rows_from_pairs():
    x = torch.randn(20)
    out, want = torch.full((21,), -1.0), torch.full((21,), -1.0)
    f = autovec(pair_sums)
    assert explain(f, x, torch.zeros(21)).path == "vectorized"
    assert f(x, out) is out
    pair_sums(x, want)
    torch.testing.assert_close(out, want, rtol=0, atol=0)


@pytest.mark.parametrize("a, b, s", [(0, 6, 1), (1, 7, 2), (6, -1, -1), (5, 0, -2), (3, 3, 1)])
def test_ranges_with_a_start_and_a_step(a, b, s):
    x = torch.randn(16)
    torch.testing.assert_close(autovec(stepped)(x, a, b, s), stepped(x, a, b, s), rtol=0, atol=0)
    if len(range(a, b, s)) > 1:
        assert explain(autovec(stepped), x, a, b, s).path == "vectorized"


def test_a_float_bound_raises_as_the_loop():
    raises_as_loop(TypeError, stepped, torch.randn(16), 0, 6.0, 1)


def test_a_row_past_the_end_raises_as_the_loop():
    raises_as_loop(IndexError, stepped, torch.randn(16), 0, 9, 1)


@pytest.mark.parametrize("fn", [index_after, two_coefficients, rebound])
def test_an_index_read_otherwise_keeps_its_loop(fn):
    x = torch.randn(12)
    got, want = autovec(fn)(x), fn(x)
    if isinstance(want, tuple):
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        assert got[1] == want[1]
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # (the loop as written: no moved name in what runs)
    assert "i_by" not in explain(autovec(fn), x).rewritten_source


def bounded(x, a, b):
    out = torch.zeros(x.shape[0])
    for i in range(a, b):
        out[2 * i] = x[2 * i] + 1.0
    return out


GLOBAL_INDEX = None


def global_index(x):
    global i
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0] // 2):
        out[2 * i] = x[2 * i]
    return out


def test_bounds_of_narrow_integer_types_are_python_ints():
    # range takes a uint8 200 as the int 200: its double is 400, not uint8's 144
    import numpy as np
    x = torch.randn(500)
    for a, b in ((torch.tensor(200, dtype=torch.uint8), torch.tensor(240, dtype=torch.uint8)),
                 (np.uint8(200), np.uint8(240)), (np.int16(3), 9), (True, 5)):
        torch.testing.assert_close(autovec(bounded)(x, a, b), bounded(x, a, b), rtol=0, atol=0)


def test_a_numpy_bool_bound_raises_as_the_loop():
    import numpy as np
    raises_as_loop(TypeError, bounded, torch.randn(50), np.True_, 10)


def test_a_global_index_is_bound_as_the_loop_binds_it():
    import sys
    mod = sys.modules[__name__]
    x = torch.randn(20)
    mod.i = "unset"
    autovec(global_index)(x)
    got = mod.i
    mod.i = "unset"
    global_index(x)
    assert got == mod.i == 9


def py_running(n):
    s = 0
    seen = torch.zeros(n)
    for i in range(n):
        s += i
        seen[i] = s
    return s, seen


def py_running_float(n):
    s = 0.5
    seen = torch.zeros(n)
    for i in range(n):
        s += i * 0.1
        seen[i] = s
    return s, seen


@pytest.mark.parametrize("fn", [py_running, py_running_float])
def test_a_running_sum_of_the_index_from_a_python_number_stays_one(fn):
    for _ in range(3):
        got, want = autovec(fn)(300), fn(300)
        assert type(got[0]) is type(want[0]) and got[0] == want[0]
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    assert explain(autovec(fn), 300).path == "vectorized"


def kept_even_rows(x, idx):
    out = []
    for i in range(idx.shape[0]):
        out.append(x[idx[i]])
    return out


def kept_columns(x, idx):
    out = []
    for i in range(idx.shape[0]):
        out.append(x[:, idx[i]])
    return out


@pytest.mark.parametrize("fn", [kept_even_rows, kept_columns])
@pytest.mark.parametrize("idx", [[0, 2, 4, 6], [1, 4, 7], [3], [5, 6], [2, 2, 3], [6, 4, 2], [-1, 1, 3], [0, 3, 4]])
def test_rows_picked_by_integers_are_the_loop_s_views_or_copies(fn, idx):
    # rows that step evenly up are a view of x (as the loop's rows are: a write through a kept
    # one reaches x); others are gathered, and a kept list of them keeps the loop
    x, y = torch.randn(8, 8), None
    y = x.clone()
    t = torch.tensor(idx)
    got, want = autovec(fn)(x, t), fn(y, t)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    got[0].mul_(-1)
    want[0].mul_(-1)
    torch.testing.assert_close(x, y, rtol=0, atol=0)
    # (integers read from data are gathered, a copy: a list that keeps them keeps the loop)
    assert explain(autovec(fn), torch.randn(8, 8), t).path == "python"


def kept_arithmetic_rows(x, k, o):
    out = []
    for i in range(x.shape[0] // k - 1):
        out.append(x[k * i + o])
    return out


def kept_arithmetic_columns(x, k, o):
    out = []
    for i in range(x.shape[1] // k - 1):
        out.append(x[:, i * k + o])
    return out


@pytest.mark.parametrize("fn", [kept_arithmetic_rows, kept_arithmetic_columns])
@pytest.mark.parametrize("k, o", [(1, 0), (2, 1), (3, 2)])
def test_rows_at_arithmetic_of_the_index_are_views_as_in_the_loop(fn, k, o):
    x = torch.randn(12, 12)
    y = x.clone()
    got, want = autovec(fn)(x, k, o), fn(y, k, o)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    got[-1].mul_(-1)
    want[-1].mul_(-1)
    torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert explain(autovec(fn), torch.randn(12, 12), k, o).path == "vectorized"


def gathered_sums(x, idx):
    out = torch.zeros(idx.shape[0])
    for i in range(idx.shape[0]):
        out[i] = x[idx[i]].sum() + x[:, idx[i]].sum()
    return out


def test_later_calls_whose_integers_do_not_step_evenly():
    # the first calls' integers step evenly (a view passes the one-time check); later calls'
    # do not, run the same batched body, and must gather
    x = torch.randn(9, 9)
    f = autovec(gathered_sums)
    for idx in ([0, 2, 4, 6], [1, 3, 5, 7], [0, 2, 3, 6], [0, 3, 4, 8], [-1, 0, 1, 2], [2, 2, 2, 2], [8, 6, 4, 2], [0, 0, 1, 2]):
        t = torch.tensor(idx)
        torch.testing.assert_close(f(x, t), gathered_sums(x, t))    # (sums of other layouts: rounding)
    assert explain(f, x, torch.tensor([0, 3, 4, 8])).path == "vectorized"


def picked_from_a_slice(x, j, y):
    for i in range(j.shape[0]):
        y[i] = x[1:, j[i], 0].sum()
    return y


def picked_rows_sum(x, idx, y):
    for i in range(idx.shape[0]):
        y[i] = x[idx[i]].sum()
    return y


def pairs_of_integers(x, j, y):
    for i in range(j.shape[0]):
        y[i] = x[i, j[i]].sum()
    return y


def added_rows(x, idx, v):
    for i in range(idx.shape[0]):
        x[idx[i]] += v[i]
    return x


@pytest.mark.parametrize("fn, x, bad", [
    (picked_from_a_slice, torch.zeros(1, 10, 2), [1, 0, 3, 10]),     # (x[1:] has no elements)
    (picked_rows_sum, torch.zeros(10, 0), [0, 2, 4, 10]),
    (pairs_of_integers, torch.zeros(4, 10, 0), [1, 0, 3, 10]),
])
def test_an_index_out_of_range_of_a_tensor_with_no_elements_raises_as_the_loop(fn, x, bad):
    # torch checks no index's range when a tensor with no elements is gathered by a batch of
    # integers; the loop's one integer per iteration is checked (IndexError, after its writes)
    f = autovec(fn)
    for _ in range(3):
        torch.testing.assert_close(f(x, torch.tensor([0, 2, 4, 6]), torch.zeros(4)),
                                   fn(x, torch.tensor([0, 2, 4, 6]), torch.zeros(4)))
    raises_as_loop(IndexError, fn, x, torch.tensor(bad), torch.zeros(4))
    y, z = torch.zeros(4), torch.zeros(4)
    with pytest.raises(IndexError):
        fn(x, torch.tensor(bad), y)
    with pytest.raises(IndexError):
        f(x, torch.tensor(bad), z)
    torch.testing.assert_close(y, z)        # (the same rows written before the error)


def test_an_update_of_rows_with_no_elements_past_the_end_raises_as_the_loop():
    raises_as_loop(IndexError, added_rows, torch.zeros(10, 0), torch.tensor([0, 3, 10]), torch.zeros(3, 0))


def test_later_calls_whose_many_integers_do_not_step_evenly():
    # (more than 64 integers: compared on the device, not as Python ints)
    x = torch.randn(300, 300)
    f = autovec(gathered_sums)
    even = torch.arange(0, 200, 2)
    uneven = even.clone()
    uneven[50] += 1                 # (ends where it would: the comparison of them all finds it)
    for idx in (even, even + 1, uneven, even.flip(0), torch.randint(-300, 300, (100,))):
        torch.testing.assert_close(f(x, idx), gathered_sums(x, idx))


def kept_doubled(x, m):
    out = torch.zeros(m.shape[0])
    for i in range(m.shape[0]):
        if m[i] > 0:
            out[i] = x[2 * i].sum() + x[:, i * 2 + 1].sum()
    return out


@pytest.mark.parametrize("n", [18, 90])
def test_rows_at_arithmetic_of_kept_indices_that_do_not_step_evenly(n):
    # under grad the kept rows' indices are the kept iterations' (0, 2, 3, 6, ..): their
    # doubles do not step evenly, on later calls after ones whose kept rows counted up
    x = torch.randn(2 * n + 2, 2 * n + 2, requires_grad=True)
    f = autovec(kept_doubled)
    m = torch.ones(n)
    m[0] = -1
    for _ in range(4):
        torch.testing.assert_close(f(x, m), kept_doubled(x, m))
    m = torch.tensor(([1., -1, 1, 1, -1, -1, 1, -1, 1, 1] * (n // 10 + 1))[:n])
    for _ in range(3):
        torch.testing.assert_close(f(x, m), kept_doubled(x, m))
