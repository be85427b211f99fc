"""Reads before the first row (runtime._read_rows): `x[i - 1]` at i = 0 is Python's negative
index, x's last row, in the loop; the batch reads the same rows, wrapped, for a loop counting up
by 1 from no further back than the tensor's length (further back the loop raises IndexError,
and so does autovec, by running it). Checked against the loop: values bit for bit, gradients,
steady calls, chunks under a memory budget, and the loops that must keep Python."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def circular_difference(x):
    d = torch.empty_like(x)
    for i in range(x.shape[0]):
        d[i] = x[i] - x[i - 1]
    return d


def previous_or_self(x):
    out = []
    for i in range(x.shape[0]):
        prev = x[i - 1] if i > 0 else x[i]      # (the loop never reads x[-1]; the batch reads and drops it)
        out.append(x[i] - prev)
    return torch.stack(out)


def three_back(x):
    return torch.stack([x[i] + 2 * x[i - 3] for i in range(x.shape[0])])


def column_differences(x):
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = x[:, j] - x[:, j - 1]
    return out


def from_two(x):
    out = []
    for i in range(2, x.shape[0]):
        out.append(x[i - 5] * x[i])              # (rows -3, -2, -1, 0, ..: the last three, then the first)
    return torch.stack(out)


def stepped(x):
    out = []
    for i in range(0, x.shape[0], 2):
        out.append(x[i - 1])
    return torch.stack(out)


CASES = [
    (circular_difference, lambda: torch.randn(7, 3)),
    (previous_or_self, lambda: torch.randn(6, 2)),
    (three_back, lambda: torch.randn(5)),
    (three_back, lambda: torch.randn(3)),          # (every row read back from the end)
    (column_differences, lambda: torch.randn(3, 5, dtype=torch.float64)),
    (from_two, lambda: torch.randn(8, 2)),
]


@pytest.mark.parametrize("fn, make", CASES, ids=[f"{fn.__name__}{k}" for k, (fn, _) in enumerate(CASES)])
def test_rows_before_the_first_are_read_from_the_end(fn, make):
    torch.manual_seed(0)
    x = make()
    fast = autovec(fn)
    for _ in range(4):          # (the first call, the checked one, the steady state)
        got, want = fast(x.clone()), fn(x.clone())
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert explain(fn, x).path == "vectorized"
    assert_equivalent(fn, x.clone().requires_grad_(), grad=True)


def test_further_back_than_the_length_raises_as_the_loop():
    raises_as_loop(IndexError, three_back, torch.randn(2))


def test_a_stepped_loop_keeps_python_with_the_loops_values():
    x = torch.randn(7, 2)
    torch.testing.assert_close(autovec(stepped)(x), stepped(x))
    assert explain(stepped, x).path == "python"


def test_wrapped_rows_in_chunks_under_a_memory_budget():
    x = torch.randn(40, 3)
    fast = autovec(circular_difference, memory_budget=1)
    for _ in range(3):
        assert torch.equal(fast(x.clone()), circular_difference(x.clone()))
    assert explain(fast, x).path == "vectorized"


def unit_slice_before(x):
    total = 0.0
    for i in range(x.shape[1] + 1):
        total = total + x[:, i - 1:i] * 2       # (at i = 0, `x[:, -1:0]` is empty, not the last column)
    return total


def unit_slice_window(x):
    outs = []
    for i in range(1, x.shape[1] + 1):
        outs.append(x[:, i - 2:i - 1].sum(1))
    return torch.stack(outs)


def index_and_unit_slice(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i - 1] + x[i - 1:i].sum(0))   # (one tensor, one offset: an index and a unit slice)
    return torch.stack(out)


@pytest.mark.parametrize("fn, make", [(unit_slice_before, lambda: torch.randn(4, 4, 3, dtype=torch.float64)),
                                      (unit_slice_window, lambda: torch.randint(-4, 5, (6, 5, 3))),
                                      (index_and_unit_slice, lambda: torch.randn(5, 2))])
def test_a_unit_slice_before_the_first_row_is_empty_as_in_the_loop(fn, make):
    """(stop 31, the fuzzer's win family, seeds 8600177 and 8600185) `x[:, i - 1:i]` reads as
    `x[:, i - 1]` with a new dimension while i - 1 is a row; before the first row the slice is
    empty: no wrap from the end, the loop's result (or error)."""
    x = make()
    try:
        want, want_exc = fn(x.clone()), None
    except Exception as e:      # (an empty slice whose sum meets another shape: the loop raises)
        want, want_exc = None, e
    for _ in range(3):
        if want_exc is not None:
            with pytest.raises(type(want_exc)):
                autovec(fn)(x.clone())
            continue
        got = autovec(fn)(x.clone())
        assert got.shape == want.shape and torch.equal(got, want)


# (stop 31) another row of the tensor a loop walks: the lowering left every read whose base is
# the walked tensor out of the guard's indexed tensors (meant for the element itself), so such a
# read had no bounds check and the vectorized path raised an internal StopIteration (the loop
# ran); now each is an indexed tensor of its own, checked and read as any other

def walked_and_previous(x):
    out = []
    for i, r in enumerate(x):
        out.append(r * x[i - 1])
    return torch.stack(out)


def zipped_and_back(x, y):
    out = []
    for i, (a, b) in enumerate(zip(x, y)):
        out.append(a + b * x[i - 1] - y[i - 2])
    return torch.stack(out)


def walked_and_next(x):
    out = []
    for i, r in enumerate(x):
        if i + 1 < x.shape[0]:
            out.append(r * x[i + 1])     # (past the end on the last row, which the condition skips)
    return out


@pytest.mark.parametrize("fn, args", [(walked_and_previous, (torch.randn(5, 2),)),
                                      (zipped_and_back, (torch.randn(6, 3), torch.randn(6, 3)))])
def test_another_row_of_the_walked_tensor(fn, args):
    for _ in range(3):
        assert torch.equal(autovec(fn)(*[a.clone() for a in args]), fn(*[a.clone() for a in args]))
    e = explain(fn, *args)
    assert e.path == "vectorized", e.notes
    assert_equivalent(fn, *[a.clone().requires_grad_() for a in args], grad=True)


def walked_and_one_too_far(x):
    out = []
    for i, r in enumerate(x):
        if i + 1 <= x.shape[0]:
            out.append(r * x[i + 1])     # (the last row reads past the end: IndexError)
    return out


def test_a_read_past_the_end_of_the_walked_tensor_is_bounds_checked():
    x = torch.randn(4, 2)
    # (the condition skips the last row: the guard evaluates it there, tests/test_guarded_reads.py)
    got, want = autovec(walked_and_next)(x), walked_and_next(x)
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
    assert explain(walked_and_next, x).path == "vectorized"
    # (a condition that lets the last row read past the end: the loop raises, and autovec runs it)
    raises_as_loop(IndexError, walked_and_one_too_far, x)
    e = explain(walked_and_one_too_far, x)
    assert e.path == "python" and "outside an indexed tensor" in " ".join(e.notes), e.notes
