"""Stores under data-dependent branches where one branch stores a Python constant into a whole
row (`if not keep[i]: out[i] = 0 else: out[i] = x[i] / 0.9`), `not` of one element per
iteration in batched bodies, and module functions whose names are also list methods
(`torch.sort`). Checked against the loop: values, dtypes, NaN conditions and the path taken."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def drop_rows(x, keep):
    out = x.clone()
    for i in range(x.shape[0]):
        if not keep[i]:
            out[i] = 0
        else:
            out[i] = x[i] / 0.9
    return out


def fill_or_copy(x, flags, c):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        if flags[i] > 0:
            out[i] = x[i] * 2
        else:
            out[i] = c
    return out


def not_of_values(v):
    out = torch.empty(v.shape[0], dtype=torch.bool)
    for i in range(v.shape[0]):
        out[i] = not v[i]
    return out


def sorted_top(x, k):
    res = torch.empty(x.shape[0], k, dtype=x.dtype)
    for i in range(x.shape[0]):
        s, _ = torch.sort(x[i], descending=True)
        res[i] = s[:k]
    return res


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    torch.testing.assert_close(b, a, equal_nan=True, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_a_constant_row_in_one_branch(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(60, 4, generator=g) * 10).to(dtype)
    keep = torch.rand(60, generator=g) < 0.7
    fast = autovec(drop_rows)
    if dtype == torch.int64:
        # x[i] / 0.9 is a float row stored into an int row: the loop truncates; so must we
        _same(drop_rows(x, keep), fast(x, keep))
    else:
        _same(drop_rows(x, keep), fast(x, keep))
        assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("c", [0, -1.5, 1e30, True])
def test_constants_of_several_kinds_fill_their_rows(c):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 3, generator=g)
    flags = torch.randn(40, generator=g)
    fast = autovec(fill_or_copy)
    _same(fill_or_copy(x, flags, c), fast(x, flags, c))
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("v", [
    torch.tensor([0.0, -0.0, 1.5, float("nan"), float("inf")]),
    torch.tensor([0, 3, -2, 0]),
    torch.tensor([True, False, True]),
])
def test_not_of_one_element(v):
    fast = autovec(not_of_values)
    _same(not_of_values(v), fast(v))
    assert _ran(fast) == {"batched"}


def test_not_of_a_row_keeps_the_loops_error():
    v = torch.randn(4, 2)
    with pytest.raises(RuntimeError) as want:
        not_of_values(v)
    with pytest.raises(RuntimeError) as got:
        autovec(not_of_values)(v)
    assert str(got.value) == str(want.value)


def test_torch_sort_is_a_function_not_a_list_method():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(50, 9, generator=g)
    fast = autovec(sorted_top)
    _same(sorted_top(x, 3), fast(x, 3))
    assert _ran(fast) != set()


def test_a_list_sort_in_the_loop_keeps_the_loop():
    def sorts_a_list(x, seen):
        out = torch.empty(x.shape[0])
        for i in range(x.shape[0]):
            seen.sort()
            out[i] = x[i].sum()
        return out

    x = torch.randn(10, 3)
    seen = [3, 1, 2]
    fast = autovec(sorts_a_list)
    _same(sorts_a_list(x, list(seen)), fast(x, seen))
    assert seen == [1, 2, 3]
    # (the loop runs, or fission with `seen.sort()` called in the loop as written: its value,
    # kept by no one, is never taken from a batch)
    ex = explain(fast, x, seen)
    assert ex.path == "python" or "seen.sort()" in ex.rewritten_source.split("for _av_j")[1]


def _outcome(fn, *args):
    try:
        return "value", fn(*args)
    except Exception as e:
        return "error", f"{type(e).__name__}: {e}"


def stored_constant(x, keep, c, dtype):
    out = torch.zeros(x.shape, dtype=dtype)
    for t in range(x.shape[0]):
        if not keep[t]:
            out[t] = x[t].abs()
        else:
            out[t] = c
    return out


@pytest.mark.parametrize("shape", [(6,), (6, 3)])
@pytest.mark.parametrize("c, dtype", [
    (1e30, torch.int64), (float("nan"), torch.int64), (float("inf"), torch.int32), (70000.0, torch.int16),
    (300, torch.uint8), (-1, torch.uint8), (2 ** 40, torch.int32), (1e300, torch.float32), (1e300, torch.bfloat16),
    (1e10, torch.float16), (-2.7, torch.int64), (2.5, torch.float32),
])
def test_a_constant_out_of_the_outputs_range_gives_the_loops_outcome(shape, c, dtype):
    # setitem checks a Python number's conversion (it raises on overflow); a batch converted
    # as a tensor would wrap or saturate instead
    x = torch.randn(shape, dtype=torch.float64)
    keep = torch.tensor([True, False, True, False, False, True])
    want = _outcome(stored_constant, x, keep, c, dtype)
    got = _outcome(autovec(stored_constant), x, keep, c, dtype)
    assert got[0] == want[0]
    if want[0] == "error":
        assert got[1] == want[1]
    else:
        _same(want[1], got[1])


def unconditional_constant(x, c):
    out = torch.zeros(x.shape[0], dtype=torch.float32)
    for i in range(x.shape[0]):
        out[i] = c
    return out


def test_an_unconditional_constant_too_large_for_float32():
    x = torch.randn(5)
    assert _outcome(autovec(unconditional_constant), x, 1e300)[1] == _outcome(unconditional_constant, x, 1e300)[1]
    _same(unconditional_constant(x, 2.5), autovec(unconditional_constant)(x, 2.5))


def floor_into_ints(x, dtype):
    out = torch.empty(x.shape[0], dtype=dtype)
    for i in range(x.shape[0]):
        out[i] = x[i] // 3
    return out


@pytest.mark.parametrize("dtype, scale", [(torch.int64, 10.0), (torch.int32, 10.0), (torch.uint8, 10.0),
                                          (torch.int8, 500.0), (torch.int64, 1e30)])
def test_float_values_into_integer_outputs(dtype, scale):
    # in range: vectorized, truncated as the loop's setitem of each tensor truncates; out of
    # range (negative into uint8, past int8 or int64): the loop's outcome, whatever the path
    x = torch.randn(40, dtype=torch.float64) * scale
    fast = autovec(floor_into_ints)
    want, got = _outcome(floor_into_ints, x, dtype), _outcome(fast, x, dtype)
    assert got[0] == want[0]
    if want[0] == "value":
        _same(want[1], got[1])
    if dtype in (torch.int64, torch.int32) and scale == 10.0:
        assert explain(floor_into_ints, x, dtype).path == "vectorized"   # (the whole call, commit included)


def count_between(x, lo, hi):
    c = 0
    for i in range(x.shape[0]):
        if lo < x[i] <= hi:
            c += 1
    return c


def flags_between(x, lo, hi):
    out = torch.empty(x.shape[0], dtype=torch.bool)
    for i in range(x.shape[0]):
        v = x[i].item()
        out[i] = lo <= v < hi != v
    return out


@pytest.mark.parametrize("x", [
    torch.tensor([0.0, 0.5, 1.0, 1.5, float("nan"), -0.0, 0.25]),
    torch.tensor([0, 1, 2, 3, -1, 1]),
])
def test_chained_comparisons(x):
    for fn, lo, hi in ((count_between, 0, 1), (count_between, 1, 0), (flags_between, 0, 1), (flags_between, -1, 2)):
        fast = autovec(fn)
        want, got = fn(x, lo, hi), fast(x, lo, hi)
        if isinstance(want, torch.Tensor):
            _same(want, got)
        else:
            assert type(got) is type(want) and got == want
        assert _ran(fast) == {"batched"}


def test_a_chained_comparison_of_rows_raises_like_the_loop():
    x = torch.rand(5, 2)
    want, got = _outcome(count_between, x, 0, 1), _outcome(autovec(count_between), x, 0, 1)
    assert want[0] == got[0] == "error" and want[1] == got[1]


def test_a_chained_comparison_with_an_invariant_vector_keeps_the_loop():
    x = torch.tensor([-1.0, 0.5, 2.0])
    hi = torch.tensor([1.0, 3.0])
    want, got = _outcome(count_between, x, 0, hi), _outcome(autovec(count_between), x, 0, hi)
    assert want[0] == got[0] == "error" and want[1] == got[1]
    x = torch.tensor([-1.0, -2.0])     # the first comparison never holds: no vector reaches `if`
    assert autovec(count_between)(x, 0, hi) == count_between(x, 0, hi) == 0


def test_other_modules_functions_named_like_mutators_keep_the_loop():
    import numpy as np

    def puts(a, x):
        out = torch.empty(x.shape[0])
        for i in range(x.shape[0]):
            r = np.put(a, [i % 3], [float(x[i])])     # writes into `a`
            out[i] = x[i] * 2
        return out, r

    x = torch.randn(6)
    a1, a2 = np.zeros(3), np.zeros(3)
    fast = autovec(puts)
    want, got = puts(a1, x), fast(a2, x)
    torch.testing.assert_close(got[0], want[0])
    assert (a1 == a2).all() and _ran(fast) == set()
    assert "np.put" in explain(puts, np.zeros(3), x).loops[0].reason


# --------------------------------------------------------------- conditional writes into the row read

def zero_nan_rows(x):
    for i in range(x.shape[0]):
        if torch.isnan(x[i]).any():
            x[i] = 0
    return x


def double_positive_rows(x):
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            x[i] = x[i] * 2
    return x


def bump_positive_rows(x):
    for i in range(x.shape[0]):
        if x[i].max() > 0:
            x[i] += 1
    return x


def reads_after_the_write(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            x[i] = 0
        s = s + x[i].sum()
    return x, s


def _rows_with_nans():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(30, 3, generator=g)
    x[3, 1] = x[17, 0] = x[17, 2] = float("nan")
    return x


@pytest.mark.parametrize("fn", [zero_nan_rows, double_positive_rows])
def test_a_conditional_write_into_the_row_the_iteration_reads(fn):
    # the row is written only by its own iteration, after that iteration's reads: the batch
    # reads every row as it was, as the loop does, and commits in place into the argument
    a, b = _rows_with_nans(), _rows_with_nans()
    want, got = fn(a), autovec(fn)(b)
    _same(want, got)
    _same(a, b)
    assert got is b                  # the argument itself, written in place, as the loop returns it
    assert explain(fn, _rows_with_nans()).path == "vectorized"


def test_a_read_after_the_conditional_write_keeps_the_loop():
    a, b = _rows_with_nans(), _rows_with_nans()
    want, got = reads_after_the_write(a), autovec(reads_after_the_write)(b)
    _same(want[0], got[0])
    _same(want[1], got[1])
    assert explain(reads_after_the_write, _rows_with_nans()).path == "python"
    # (a conditional update of the row read, `if x[i].max() > 0: x[i] += 1`, keeps it too)
    a, b = _rows_with_nans(), _rows_with_nans()
    _same(bump_positive_rows(a), autovec(bump_positive_rows)(b))
    _same(a, b)


def test_a_conditional_write_into_a_leaf_that_requires_grad_raises_like_the_loop():
    a = torch.randn(5, 2, requires_grad=True)
    want, got = _outcome(double_positive_rows, a), _outcome(autovec(double_positive_rows), a)
    assert want[0] == got[0] == "error" and want[1] == got[1]
