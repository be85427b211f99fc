"""Comparisons whose operands promote otherwise in one iteration than in a batch: a
per-iteration 0-d tensor against a loop-invariant 0-d tensor of another dtype (two 0-d tensors
promote each other in the loop: float32 against float64 compares in float64; a batch's column
would not be widened by the 0-d one), and a Python int against a Python float (Python compares
them exactly; a batch in float64, which differs past 2**53). Checked against the loop."""
import pytest
import torch

from autovec import autovec


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def first_above(x, t):
    k = -1
    for i in range(x.shape[0]):
        if x[i] > t:
            k = i
            break
    return k


def bins(x, t):
    out = torch.empty(x.shape[0], dtype=torch.int64)
    for i in range(x.shape[0]):
        out[i] = 3 if x[i] > t else 2
    return out


def ties_counted(x, t):
    c = 0.0
    for i in range(x.shape[0]):
        if x[i] > t:
            c += 1
        else:
            c += 0.5
    return c


def shifted(x, t):
    out = torch.empty(x.shape[0], dtype=torch.int64)
    for i in range(x.shape[0]):
        out[i] = x[i] + t            # int8 + a 0-d int64: int64 in the loop, no wrap-around
    return out


def first_equal_item(x, t):
    k = -1
    for i in range(x.shape[0]):
        if x[i].item() == t:
            k = i
            break
    return k


def flags_below(x, t):
    out = []
    for i in range(x.shape[0]):
        out.append(1 if x[i].item() < t else 0)
    return out


@pytest.mark.parametrize("fn", [first_above, bins, ties_counted])
@pytest.mark.parametrize("row, zero", [(torch.float32, torch.float64), (torch.float16, torch.float32)])
def test_rows_against_a_zero_dim_threshold_of_another_dtype(fn, row, zero):
    fast = autovec(fn)
    t = torch.tensor(0.1, dtype=zero)
    x = torch.zeros(20, dtype=row)
    x[5:15] = 0.1                  # 0.1 rounded to `row`: above 0.1 in `zero`'s precision or not
    for data in (torch.zeros(20, dtype=row), x, x.flip(0)):
        got, want = fast(data, t), fn(data, t)
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want)
        else:
            assert got == want


def test_narrow_integers_plus_a_zero_dim_int64():
    fast = autovec(shifted)
    x = torch.tensor([100, 120, -128, 127, 5], dtype=torch.int8)
    t = torch.tensor(100, dtype=torch.int64)
    for _ in range(2):
        assert torch.equal(fast(x, t), shifted(x, t))


@pytest.mark.parametrize("fn", [first_equal_item, flags_below])
def test_python_ints_past_2_53_against_floats(fn):
    fast = autovec(fn)
    x = torch.tensor([2.0 ** 60, 2.0 ** 60, 2.0 ** 53, 5.0, 7.0], dtype=torch.float64)
    for _ in range(3):
        assert fast(x, 2 ** 53 + 1) == fn(x, 2 ** 53 + 1)
        assert fast(x, 2 ** 53) == fn(x, 2 ** 53)
    xi = torch.tensor([5, 2 ** 53 + 1, 7], dtype=torch.int64)
    for _ in range(3):
        assert fast(xi, 2.0 ** 53) == fn(xi, 2.0 ** 53)


def test_small_ints_against_floats_still_vectorize():
    fast = autovec(flags_below)
    x = torch.randn(500, dtype=torch.float64) * 100
    for _ in range(2):
        assert fast(x, 3) == flags_below(x, 3)
    assert set(fast._autovec_state.runtime.ran.values()) == {"batched"}


def in_window(x, lo, hi):
    out = []
    for i in range(x.shape[0]):
        out.append(1 if lo <= x[i].item() < hi else 0)
    return out


def test_a_chained_comparison_of_ints_past_2_53_and_floats():
    fast = autovec(in_window)
    # (the one-time check compares the first rows, where batch and loop agree here)
    x = torch.tensor([2.0 ** 53 + 2, 2.0 ** 53 + 4, 2.0 ** 53, 5.0], dtype=torch.float64)
    for _ in range(3):
        assert fast(x, 2 ** 53 + 1, 2 ** 60) == in_window(x, 2 ** 53 + 1, 2 ** 60) == [1, 1, 0, 0]
        assert fast(x, 0, 10) == in_window(x, 0, 10)


def test_an_operand_the_check_never_saw():
    # `v < hi` after a false `lo <= v` in every probed row: the check never saw `hi`'s kind; an
    # int64 batch against a Python float would compare in float32 (2**53 - 1 < 2.0**53 is False)
    fast = autovec(in_window)
    big = 2 ** 53
    x = torch.tensor([-2 ** 62, 5, big - 1, 0, big])
    for _ in range(3):
        assert fast(x, big - 1, float(big)) == in_window(x, big - 1, float(big)) == [False, False, True, False, False]
    small = torch.tensor([1, 2, 3, 40_000_001, 40_000_003])
    for _ in range(3):
        assert fast(small, 3, 40_000_002.0) == in_window(small, 3, 40_000_002.0) == [False, False, True, True, False]
