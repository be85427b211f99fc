"""A running best under a condition: `if y[t]: best = max(best, v)`, `if ok[t] and v > best:
best = v; idx = t`, or the tracker nested in an `if` (analysis.loops._tracker / _max_call at
depth > 0, _and_tracker; runtime.FunctionRuntime.best's `mask`). The best of the iterations
where the condition holds is the loop's: the same first (strict comparison) or last (`>=`) of
equal values, the same value object kind (a view of the input where the loop's is one, a tensor
of its own where the loop's is), NaN among the compared values keeps the loop, NaN where the
condition fails is never compared. What reads the best in the loop, or decides the condition
from it, keeps the loop."""
import pytest
import torch

from autovec import autovec, explain
from conftest import agrees_with_loop


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def best_of_positives(x, y):
    best = -1.0
    for t in range(x.shape[0]):
        if y[t]:
            best = max(best, x[t].item())
    return best


def best_later_wins(x, y):
    best = -1.0
    for t in range(x.shape[0]):
        if y[t]:
            best = max(x[t].item(), best)
    return best


def tracker_and(x, y):
    best, where = 0.0, -1
    for t in range(x.shape[0]):
        if y[t] and x[t] > best:
            best = x[t]
            where = t
    return best, where


def tracker_nested_from_none(x, y):
    best, where = None, -1
    for t in range(x.shape[0]):
        if y[t]:
            if best is None or x[t] >= best:
                best = x[t]
                where = t
    return best, where


def best_row(x, y):
    score = torch.tensor(-1.0)
    row = None
    for t in range(x.shape[0]):
        if y[t] and x[t].sum() > score:
            score = x[t].sum()
            row = x[t]
    return score, row


def smallest_in_else(x, y):
    lo = 10.0
    for t in range(x.shape[0]):
        if not y[t]:
            pass
        else:
            lo = min(lo, x[t].item())
    return lo


def best_and_count(x, y):
    best = -1.0
    n = 0
    for t in range(x.shape[0]):
        if y[t]:
            n += 1
            best = max(best, x[t].item())
    return best, n


def best_tensor(x, y):
    best = x[0]
    for t in range(x.shape[0]):
        if y[t]:
            best = max(best, x[t])
    return best


@pytest.mark.parametrize("fn", [best_of_positives, best_later_wins, tracker_and, tracker_nested_from_none,
                                smallest_in_else, best_and_count, best_tensor])
@pytest.mark.parametrize("seed", range(4))
def test_best_under_a_condition(fn, seed):
    g = torch.Generator().manual_seed(seed)
    n = 9
    x = torch.randint(0, 4, (n,), generator=g).float() if seed % 2 else torch.randn(n, generator=g)
    y = torch.rand(n, generator=g) < 0.6
    agrees_with_loop(fn, x, y, path="vectorized", strategy="reduction")


@pytest.mark.parametrize("fn", [best_of_positives, tracker_and, tracker_nested_from_none])
def test_ties_pick_the_loops_iteration(fn):
    # equal values where the condition holds, larger ones where it does not
    x = torch.tensor([5.0, 2.0, 9.0, 2.0, 1.0, 2.0])
    y = torch.tensor([False, True, False, True, True, True])
    agrees_with_loop(fn, x, y, path="vectorized")
    if fn is tracker_nested_from_none:
        assert autovec(fn)(x, y)[1] == 5       # (`>=`: the last of the equal values)
    elif fn is tracker_and:
        assert autovec(fn)(x, y)[1] == 1       # (`>`: the first)


def test_condition_that_never_holds_keeps_the_start():
    x = torch.randn(6)
    y = torch.zeros(6, dtype=torch.bool)
    agrees_with_loop(best_of_positives, x, y, path="vectorized")
    agrees_with_loop(tracker_nested_from_none, x, y, path="vectorized")
    assert autovec(tracker_nested_from_none)(x, y) == (None, -1)


def test_nan_where_the_condition_fails_is_never_compared():
    x = torch.tensor([float("nan"), 0.5, float("nan"), 0.25])
    y = torch.tensor([False, True, False, True])
    agrees_with_loop(best_of_positives, x, y, path="vectorized")
    assert autovec(best_of_positives)(x, y) == 0.5


def test_nan_among_the_compared_values_gives_the_loops_answer():
    x = torch.tensor([0.5, float("nan"), 2.0, 0.25])
    y = torch.tensor([True, True, True, False])
    for fn in (best_of_positives, best_later_wins, tracker_and):
        agrees_with_loop(fn, x, y)


def test_float_conditions_use_the_loops_truth():
    x = torch.randn(8)
    y = torch.tensor([0.0, 0.5, float("nan"), 0.0, -1.0, 0.0, 2.0, 0.0])
    agrees_with_loop(best_of_positives, x, y, path="vectorized")


def test_a_view_stays_a_view_and_a_new_value_is_its_own():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 3, generator=g)
    y = torch.rand(7, generator=g) < 0.7
    agrees_with_loop(best_row, x, y, path="vectorized")
    score, row = autovec(best_row)(x, y)
    want_score, want_row = best_row(x, y)
    assert row._base is x and want_row._base is x
    # the loop's score is a tensor of its own, not a view of the batch of sums
    assert want_score._base is None and score._base is None


def test_unconditional_best_of_new_values_is_its_own_tensor():
    def best_sum(x):
        score = torch.tensor(-1.0)
        for t in range(x.shape[0]):
            if x[t].sum() > score:
                score = x[t].sum()
        return score

    x = torch.randn(6, 3)
    agrees_with_loop(best_sum, x, path="vectorized")
    assert autovec(best_sum)(x)._base is None


@pytest.mark.parametrize("requires_grad", [False, True])
def test_gradients_through_a_conditional_best(requires_grad):
    g = torch.Generator().manual_seed(5)
    x0 = torch.randn(8, 3, generator=g)
    y = torch.rand(8, generator=g) < 0.5
    y[2] = True
    grads = []
    for fn in (best_row, autovec(best_row)):
        x = x0.clone().requires_grad_(requires_grad)
        score, row = fn(x, y)
        if requires_grad:
            (score * 2 + row.sum()).backward()
            grads.append(x.grad)
        else:
            grads.append(score)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def best_read_in_the_loop(x, y):
    best = 0.0
    out = []
    for t in range(x.shape[0]):
        if y[t]:
            best = max(best, x[t].item())
        out.append(best)
    return best, out


def condition_reads_the_best(x, y):
    best = 0.5
    for t in range(x.shape[0]):
        if best < 1.0:
            best = max(best, x[t].item())
    return best


def first_operand_reads_the_best(x, y):
    best = -1.0
    for t in range(x.shape[0]):
        if best > 0 and y[t]:
            best = max(best, x[t].item())
    return best


def two_sides(x, y):
    best = 0.0
    for t in range(x.shape[0]):
        if y[t]:
            best = max(best, x[t].item())
        else:
            best = min(best, x[t].item())
    return best


@pytest.mark.parametrize("fn", [best_read_in_the_loop, condition_reads_the_best, first_operand_reads_the_best,
                                two_sides])
def test_what_depends_on_the_best_keeps_the_loop(fn):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, generator=g)
    y = torch.rand(9, generator=g) < 0.5
    agrees_with_loop(fn, x, y, path="python")


def test_explain_shows_the_rows_where_the_condition_holds():
    ex = explain(tracker_and, torch.randn(5), torch.rand(5) < 0.5)
    assert "under a condition" in str(ex)
    assert "nonzero()" in ex.rewritten_source, ex.rewritten_source
