"""In-place recurrences on a tensor with a lag of k rows (`x[i] += x[i - k]`) and running
extremes in place (`x[i] = torch.maximum(x[i], x[i - 1])`): one cumsum, cumprod, cummax or
cummin of the k interleaved chains of rows (analysis.loops._inplace_prefix,
runtime._prefix_region). The loop mutates its argument; the tests compare the argument after
the call, bit for bit where no sum is reordered."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def lag2(x):
    for i in range(2, x.shape[0]):
        x[i] += x[i - 2]
    return x


def lag3_spelled(x):
    for i in range(3, x.shape[0]):
        x[i] = x[i - 3] + x[i]
    return x


def lag2_product(x):
    for i in range(2, x.shape[0]):
        x[i] *= x[i - 2]
    return x


def lag4_cols(x):
    for j in range(4, x.shape[1]):
        x[:, j] += x[:, j - 4]
    return x


def running_max(x):
    for i in range(1, x.shape[0]):
        x[i] = torch.maximum(x[i], x[i - 1])
    return x


def running_min_lag2(x):
    for i in range(2, x.shape[0]):
        x[i] = torch.min(x[i - 2], x[i])
    return x


def drawdown_peak(prices):
    peak = prices.clone()
    for t in range(1, peak.shape[0]):
        peak[t] = torch.max(peak[t], peak[t - 1])
    return (prices - peak) / peak


def _ints(*shape, seed=0):
    return torch.randint(-9, 10, shape, generator=torch.Generator().manual_seed(seed))


def _floats(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _same_call(fn, x):
    """fn and autovec(fn) on copies of x: the argument after the call and the result."""
    a, b = x.clone(), x.clone()
    want, got = fn(a), autovec(fn)(b)
    return a, b, want, got


@pytest.mark.parametrize("fn", [lag2, lag3_spelled, lag4_cols, running_max, running_min_lag2])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 17])
def test_integer_chains_are_exact(fn, n):
    x = _ints(n, 6) if fn is not lag4_cols else _ints(3, n)
    fast = autovec(fn)
    a, b = x.clone(), x.clone()
    want, got = fn(a), fast(b)
    assert torch.equal(a, b) and got is b and want is a
    if (x.shape[0] if fn is not lag4_cols else x.shape[1]) > 5:
        ex = explain(fn, x.clone())
        assert ex.path == "vectorized" and ex.loops[0].strategy == "scan"


@pytest.mark.parametrize("fn", [lag2, lag3_spelled, lag2_product, lag4_cols])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_chains_match_the_loop(fn, dtype):
    x = _floats(40, 40, dtype=dtype) if fn is not lag2_product else 1 + 0.01 * _floats(40, 3, dtype=dtype)
    a, b, _, _ = _same_call(fn, x)
    assert a.dtype == b.dtype
    torch.testing.assert_close(b, a)


def test_the_explanation_names_the_lag_and_the_chains():
    loop = explain(lag2, _floats(10, 2)).loops[0]
    assert loop.strategy == "scan"
    assert "the element 2 before" in loop.reason and "2 interleaved chains" in loop.reason
    assert "maximum of itself and the previous element" in explain(running_max, _floats(10, 2)).loops[0].reason


def test_a_start_before_the_lag_keeps_the_loops_wraparound():
    # x[i - 2] at i = 1 is x[-1], the last row: the loop's own read, which a scan would not make
    def wraps(x):
        for i in range(1, x.shape[0]):
            x[i] += x[i - 2]
        return x
    x = _ints(7, 2)
    a, b, _, _ = _same_call(wraps, x)
    assert torch.equal(a, b)
    assert explain(wraps, x.clone()).path == "python"


@pytest.mark.parametrize("bad", [float("nan"), -0.0])
def test_running_extremes_with_nan_or_signed_zeros_keep_the_loop(bad):
    # which of +0.0 and -0.0 a tie keeps is the loop's argument order: bit for bit, signs included
    x = _floats(12, 3)
    x[4, 1] = bad
    x[7, 1] = 0.0
    x[:, 2] = 0.0
    x[5, 2] = -0.0
    for fn in (running_max, running_min_lag2):
        a, b, _, _ = _same_call(fn, x)
        assert torch.equal(a.isnan(), b.isnan())
        keep = ~a.isnan()
        assert torch.equal(a[keep], b[keep]) and torch.equal(a[keep].signbit(), b[keep].signbit())


def test_running_max_of_a_copy_as_a_drawdown():
    prices = 100 + _floats(64).cumsum(0)
    torch.testing.assert_close(autovec(drawdown_peak)(prices), drawdown_peak(prices), rtol=0, atol=0)
    assert explain(drawdown_peak, prices).loops[0].strategy == "scan"


def test_a_tensor_that_requires_grad_keeps_the_loop():
    x = _floats(10, 2).requires_grad_()
    w = torch.arange(20.0).reshape(10, 2)
    want = torch.autograd.grad((lag2(x * 1.0) * w).sum(), x)[0]
    got = torch.autograd.grad((autovec(lag2)(x * 1.0) * w).sum(), x)[0]
    assert torch.equal(got, want)
    assert explain(lag2, x * 1.0).path == "python"


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.bfloat16, torch.float16])
def test_running_extremes_of_other_dtypes(dtype):
    x = (torch.rand(9, 2, generator=torch.Generator().manual_seed(3)) * 4).to(dtype)
    for fn in (running_max, running_min_lag2):
        a, b, _, _ = _same_call(fn, x)
        assert torch.equal(a, b)
    assert explain(running_max, x.clone()).path == "vectorized"


def test_complex_extremes_raise_as_the_loop():
    x = torch.randn(5, dtype=torch.complex64)
    with pytest.raises(RuntimeError) as want:
        running_max(x.clone())
    with pytest.raises(RuntimeError) as got:
        autovec(running_max)(x.clone())
    assert str(got.value) == str(want.value)


def test_a_non_contiguous_argument_is_updated_in_place():
    base = _ints(6, 10)
    a, b = base.clone(), base.clone()
    lag2(a.t()), autovec(lag2)(b.t())
    assert torch.equal(a, b)


def test_python_max_of_two_rows_is_not_a_running_maximum():
    # Python's max compares whole rows (an error for rows of several elements), not elements
    def py_max(x):
        for i in range(1, x.shape[0]):
            x[i] = max(x[i], x[i - 1])
        return x
    x = _floats(6)
    a, b, _, _ = _same_call(py_max, x)
    assert torch.equal(a, b)
    with pytest.raises(RuntimeError) as want:
        py_max(_floats(6, 2))
    with pytest.raises(RuntimeError) as got:
        autovec(py_max)(_floats(6, 2))
    assert str(got.value) == str(want.value)


# Other entries after the index (probeQ: `x[i, c] += x[i - 1, c]` ran as a cumsum of whole rows,
# every column of the argument changed): the recurrence runs on the view `x[:, c]`

def column_cumsum(x, c):
    for i in range(1, x.shape[0]):
        x[i, c] += x[i - 1, c]
    return x


def column_slice(x):
    for i in range(2, x.shape[0]):
        x[i, :2] += x[i - 2, :2]
    return x


def column_ellipsis_max(x):
    for i in range(1, x.shape[0]):
        x[i, ..., 0] = torch.maximum(x[i, ..., 0], x[i - 1, ..., 0])
    return x


def middle_dimension(x):
    for t in range(1, x.shape[1]):
        x[:, t, 0] *= x[:, t - 1, 0]
    return x


def tensor_column(x, cols):
    for i in range(1, x.shape[0]):
        x[i, cols] += x[i - 1, cols]     # (advanced indexing: `x[:, cols]` is a copy, not a view)
    return x


@pytest.mark.parametrize("fn, make", [
    (column_cumsum, lambda: (_ints(40, 3), 1)),
    (column_cumsum, lambda: (_ints(40, 3), -1)),
    (column_slice, lambda: (_ints(40, 4),)),
    (column_ellipsis_max, lambda: (_ints(40, 2, 3),)),
    (middle_dimension, lambda: ((_ints(3, 30, 2) % 2) + 1,)),
    (tensor_column, lambda: (_ints(40, 4), torch.tensor([0, 2]))),
])
def test_other_entries_after_the_index_update_only_their_part(fn, make):
    args = make()
    a, b = args[0].clone(), args[0].clone()
    fn(a, *args[1:])
    autovec(fn)(b, *args[1:])
    assert torch.equal(a, b)
    if fn is not tensor_column:
        assert explain(fn, *[x.clone() if isinstance(x, torch.Tensor) else x for x in args]).path == "vectorized"


# Forward fills: `if test(x[i]): x[i] = x[i - k]` and `x[i] = torch.where(test(x[i]), x[i - k], x[i])`
# (analysis.loops._fill_prefix, runtime._fill_region): copies alone, exact

def ffill(x):
    for i in range(1, x.shape[0]):
        if torch.isnan(x[i]):
            x[i] = x[i - 1]
    return x


def ffill_columns(x):
    for i in range(1, x.shape[0]):
        x[i] = torch.where(torch.isnan(x[i]) | (x[i] < 0), x[i - 1], x[i])
    return x


def zero_fill_lag2(x, lo):
    for i in range(2, x.shape[0]):
        if x[i] <= lo:
            x[i] = x[i - 2]
    return x


def _holes(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g).to(dtype)
    return torch.where(torch.rand(*shape, generator=g) < 0.35, float("nan"), x)


@pytest.mark.parametrize("fn, make", [
    (ffill, lambda s: (_holes(30, seed=s),)),
    (ffill, lambda s: (_holes(30, seed=s, dtype=torch.float64),)),
    (ffill_columns, lambda s: (_holes(30, 4, seed=s),)),
    (zero_fill_lag2, lambda s: (_ints(30, seed=s), 0)),
    (zero_fill_lag2, lambda s: (_floats(30, seed=s), torch.tensor(-0.5))),
])
def test_forward_fills_are_exact(fn, make):
    for seed in range(3):
        args = make(seed)
        a, b = args[0].clone(), args[0].clone()
        fn(a, *args[1:])
        autovec(fn)(b, *args[1:])
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    assert explain(fn, *[x.clone() if isinstance(x, torch.Tensor) else x for x in args]).path == "vectorized"


def test_a_fill_whose_test_reads_another_row_or_has_several_elements_keeps_the_loop():
    def from_before(x):
        for i in range(1, x.shape[0]):
            if x[i] < x[i - 1]:          # (the row before as the loop left it: a running maximum)
                x[i] = x[i - 1]
        return x
    def from_a_row_it_fills(x):
        for i in range(1, x.shape[0]):
            if x[i] < x[3]:              # (x[3] as the loop left it, from the fourth step on)
                x[i] = x[i - 1]
        return x
    x = _floats(20)
    x[3] = -5.0
    for fn in (from_before, from_a_row_it_fills):
        a, b = x.clone(), x.clone()
        fn(a), autovec(fn)(b)
        assert torch.equal(a, b) and explain(fn, x.clone()).path == "python"
    with pytest.raises(RuntimeError) as want:
        ffill(_holes(6, 2))
    with pytest.raises(RuntimeError) as got:
        autovec(ffill)(_holes(6, 2))
    assert str(got.value) == str(want.value)


# Walking back (`reversed(range(..))`, reading t[i + k]): the same scans and fills on the region
# flipped, flipped back

def suffix_sum(x):
    for i in reversed(range(x.shape[0] - 1)):
        x[i] += x[i + 1]
    return x


def suffix_min_lag2(x):
    for i in reversed(range(x.shape[0] - 2)):
        x[i] = torch.minimum(x[i], x[i + 2])
    return x


def bfill(x):
    for i in reversed(range(x.shape[0] - 1)):
        if torch.isnan(x[i]):
            x[i] = x[i + 1]
    return x


@pytest.mark.parametrize("fn, make", [
    (suffix_sum, lambda s: _ints(30, 3, seed=s)),
    (suffix_min_lag2, lambda s: _ints(30, 2, seed=s)),
    (bfill, lambda s: _holes(30, seed=s)),
])
@pytest.mark.parametrize("n", [0, 1, 2, 30])
def test_scans_and_fills_walking_back(fn, make, n):
    for seed in range(3):
        x = make(seed)[:n]
        a, b = x.clone(), x.clone()
        fn(a), autovec(fn)(b)
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    if n > 5:
        loop = explain(fn, x.clone()).loops[0]
        assert loop.strategy == "scan" and explain(fn, x.clone()).path == "vectorized"


def test_a_walk_back_reading_the_row_before_keeps_the_loop():
    def wrong_way(x):
        for i in reversed(range(1, x.shape[0])):
            x[i] += x[i - 1]             # (each row the one before as it was: no running sum)
        return x
    x = _ints(10, 2)
    a, b = x.clone(), x.clone()
    wrong_way(a), autovec(wrong_way)(b)
    assert torch.equal(a, b)
    assert explain(wrong_way, x.clone()).loops[0].strategy != "scan"


def test_a_fill_test_with_a_tensor_of_the_rows_count_raises_as_the_loop():
    # `x[i] < lo` with lo of the rows' own count: each step's test has several elements in the
    # loop (its `if` raises); all rows at once would compare element by element
    def below(x, lo):
        for i in range(1, x.shape[0]):
            if x[i] < lo:
                x[i] = x[i - 1]
        return x
    x, lo = _floats(8), torch.zeros(7)
    with pytest.raises(RuntimeError) as want:
        below(x.clone(), lo)
    with pytest.raises(RuntimeError) as got:
        autovec(below)(x.clone(), lo)
    assert str(got.value) == str(want.value)


def test_complex_inf_keeps_the_loop():
    # (probeR) the loop's complex steps give inf+nanj where cumsum / cumprod keep the other part
    x = torch.tensor([complex("inf"), 1 + 1j, 0j, 2 + 0j, 3 + 1j, 4 + 0j], dtype=torch.complex64)
    for fn in (lag2, lag2_product):
        a, b, _, _ = _same_call(fn, x)
        assert torch.equal(torch.view_as_real(a).isnan(), torch.view_as_real(b).isnan())
        assert torch.equal(torch.view_as_real(a).nan_to_num(), torch.view_as_real(b).nan_to_num())


# A lag held in a name (`x[i - period]`, probeR's false refusal): its value checked on each call

def undiff(x, period):
    for i in range(period, x.shape[0]):
        x[i] += x[i - period]
    return x


def suffix_max_by(x, k):
    for i in reversed(range(x.shape[0] - k)):
        x[i] = torch.maximum(x[i], x[i + k])
    return x


@pytest.mark.parametrize("fn", [undiff, suffix_max_by])
@pytest.mark.parametrize("k", [1, 3, 7, 0, -2, 2.0, True, torch.tensor(2)])
def test_a_lag_held_in_a_name(fn, k):
    x = _ints(30, 2)
    try:
        want, err = fn(x.clone(), k), None
    except Exception as e:      # noqa: BLE001 (the loop's own error, compared)
        want, err = None, type(e)
    if err is not None:
        with pytest.raises(err):
            autovec(fn)(x.clone(), k)
        return
    assert torch.equal(autovec(fn)(x.clone(), k), want)
    assert explain(fn, x.clone(), k).path == ("vectorized" if type(k) is int and k >= 1 else "python")


def test_a_negative_lag_by_name_reads_ahead_as_the_loop():
    # x[i - period] with period -2 reads two rows ahead, which no step has written: no running sum
    def ahead(x, period):
        for i in range(3, x.shape[0] - 5):
            x[i] += x[i - period]
        return x
    x = _ints(20, 2)
    assert torch.equal(autovec(ahead)(x.clone(), -2), ahead(x.clone(), -2))
