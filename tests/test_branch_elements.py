"""Values picked by a branch on per-iteration data where the loop does not write the `if`
itself: a conditional expression as a comprehension's element (`torch.stack([r if r.sum() > 0
else -r for r in x])`, which planned as vmap and fell back on every call, where the same
`out.append(...)` in a for loop ran as `where`). Checked against the loop: values, dtypes,
errors, gradients and the path taken."""
import pytest
import torch

from autovec import autovec, explain
from conftest import outcome, ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _same(got, want):
    if isinstance(want, tuple) and len(want) == 2 and isinstance(want[0], type):
        assert got == want           # the loop's exception, type and message
        return
    assert type(got) is type(want)
    if isinstance(want, list):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, equal_nan=True)
    else:
        assert got == pytest.approx(want)


def _strategies(fn, *args):
    return [r.strategy for r in explain(fn, *args).loops]


# ----------------------------------------------------------------- comprehension elements

def stack_pick(x):
    return torch.stack([r if r.sum() > 0 else -r for r in x])


def cat_pick(x):
    return torch.cat([r if r.sum() > 0 else r * 3 for r in x])


def nested_picks(x):
    return torch.stack([r if r.sum() > 1 else (-r if r.sum() < -1 else r * 0) for r in x])


def indexed_pick(x):
    return torch.stack([x[i] if x[i].sum() > 0 else -x[i] for i in range(len(x))])


def index_as_value(x):
    return torch.stack([x[i] * i if x[i].sum() > 0 else -x[i] for i in range(x.shape[0])])


def zipped_pick(x, y):
    return torch.stack([a if a.sum() > b.sum() else b for a, b in zip(x, y)])


def enumerated_pick(x):
    return torch.stack([r * i if r.sum() > 0 else r for i, r in enumerate(x)])


def and_pick(x):
    return torch.stack([r if r.sum() > 0 and r[0] > 0 else -r for r in x])


def items_pick(v):
    return torch.tensor([e.item() * 2 if e > 0 else -e.item() for e in v])


def mask_pick(x):
    return torch.stack([r > 0 if r.sum() > 0 else r < 0 for r in x])


def guarded_division(x):
    return torch.stack([r / r.sum() if r.sum() != 0 else r for r in x])


def sum_of_picks(x):
    return sum(r if r.sum() > 0 else -r for r in x)


def max_of_picks(v):
    return max(e if e > 0 else -e for e in v)


def count_of_picks(v):
    return sum(1 if e > 0 else 0 for e in v)


@pytest.mark.parametrize("fn, make, strategy", [
    (stack_pick, lambda n: (torch.randn(n, 4),), "where"),
    (stack_pick, lambda n: (torch.randint(-3, 4, (n, 4)),), "where"),
    (cat_pick, lambda n: (torch.randn(n, 3),), "where"),
    (nested_picks, lambda n: (torch.randn(n, 4) * 2,), "where"),
    (indexed_pick, lambda n: (torch.randn(n, 4),), "where"),
    (index_as_value, lambda n: (torch.randn(n, 4),), "where"),
    (zipped_pick, lambda n: (torch.randn(n, 4), torch.randn(n, 4)), "where"),
    (enumerated_pick, lambda n: (torch.randn(n, 4),), "where"),
    (and_pick, lambda n: (torch.randn(n, 4),), "where"),
    (items_pick, lambda n: (torch.randn(n),), "where"),
    (mask_pick, lambda n: (torch.randn(n, 4),), "where"),
    (guarded_division, lambda n: (torch.randn(n, 4),), "where"),
    (sum_of_picks, lambda n: (torch.randn(n, 4),), "reduction"),
    (max_of_picks, lambda n: (torch.randn(n),), "reduction"),
    (count_of_picks, lambda n: (torch.randn(n),), "reduction"),
])
def test_a_conditional_element_is_a_where(fn, make, strategy):
    for n in (40, 1, 7):
        args = make(n)
        fast = autovec(fn)
        for _ in range(3):
            _same(fast(*args), fn(*args))
        assert _strategies(fn, *args) == [strategy]
        assert explain(fn, *args).path == "vectorized", str(explain(fn, *args))
        assert ran_modes(fast) in ({"batched"}, {"vmap"})   # (`.item()` numbers, counts: vmap)


def test_no_elements_keep_the_loops_result_or_error():
    for fn, x in ((stack_pick, torch.randn(0, 4)), (sum_of_picks, torch.randn(0, 4)),
                  (max_of_picks, torch.randn(0)), (count_of_picks, torch.randn(0))):
        _same(outcome(autovec(fn), x), outcome(fn, x))


def filtered_picks(x):
    return torch.stack([r if r.sum() > 0 else -r for r in x if r[0] > 0])


def filtered_sum(v):
    return sum(e if e > 0 else -e for e in v if e < 1)


def filtered_max(v):
    return max(e if e > 0 else -e for e in v if e > 2)


@pytest.mark.parametrize("fn, x, strategy", [
    (filtered_picks, torch.randn(50, 4), "mask"),
    (filtered_picks, -torch.rand(50, 4), "mask"),          # nothing passes: the loop's error
    (filtered_sum, torch.randn(50), "reduction"),
    (filtered_max, torch.randn(50), "reduction"),           # an empty max: ValueError
    (filtered_max, torch.randn(50) * 10, "reduction"),
])
def test_a_filter_clause_keeps_its_length(fn, x, strategy):
    """The filter drops elements: the result has the kept ones only, in order."""
    fast = autovec(fn)
    for _ in range(2):
        _same(outcome(fast, x), outcome(fn, x))
    assert _strategies(fn, x) == [strategy]


def number_or_row(x):
    return torch.stack([r if r.sum() > 0 else 0 for r in x])


def float_or_int(x):
    return torch.stack([r if r.sum() > 0 else r * 0.5 for r in x])


def row_or_number(v):
    return torch.tensor([e if e > 0 else 0.0 for e in v])


def far_side(x, idx):
    return torch.stack([x[j] if j < 3 else x[j + 100] for j in idx])


@pytest.mark.parametrize("fn, args, why", [
    (number_or_row, (torch.randn(20, 4),), "different types"),
    (float_or_int, (torch.randint(-3, 4, (20, 4)),), "different dtypes"),
    (row_or_number, (torch.randn(20),), "different types"),
    (far_side, (torch.randn(8, 4), torch.tensor([0, 1, 2, 1])), "IndexError"),
])
def test_sides_the_batch_cannot_pick_keep_the_loop(fn, args, why):
    """Both sides are computed for every element: values of different kinds, or a side that
    raises where the loop never computes it, leave the call to the loop."""
    fast = autovec(fn)
    for _ in range(2):
        _same(outcome(fast, *args), outcome(fn, *args))
    e = explain(fn, *args)
    assert e.path == "python" and why in str(e), str(e)


@pytest.mark.parametrize("fn", [stack_pick, nested_picks, guarded_division, sum_of_picks])
def test_gradients_keep_the_loop(fn):
    x = torch.randn(30, 4)
    x[3] = 0                         # (guarded_division: the side the loop skips has 0 / 0)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    want, got = fn(a), autovec(fn)(b)
    want.sum().backward()
    got.sum().backward()
    _same(got, want)
    torch.testing.assert_close(b.grad, a.grad, equal_nan=True)
    assert explain(fn, b).path == "python"
