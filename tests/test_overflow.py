"""Running sums and linear recurrences whose partial sums pass the dtype's largest value in the
loop's order (runtime._sums_in_range): a sum, cumsum or parallel scan adds in another order, and
where the loop reaches inf part-way it may not (or reach NaN instead), so the loop runs. Found
by stop 32's probe (`discounted` over [-3e38, 3e38, 3e38] * 400 in float32: 943 of 1200 values
differed). Values that stay in range, infinities among the inputs included, keep the batch."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def discounted(rewards, gamma: float):
    returns = torch.empty_like(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def gated(x, g):
    h = torch.zeros(x.shape[1:])
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        h = g[t] * h + x[t]               # (a factor per step)
        out[t] = h
    return out


def prefix(x):
    out = torch.empty_like(x)
    run = torch.zeros(())
    for i in range(x.shape[0]):
        run = run + x[i]
        out[i] = run
    return out


def total(x):
    s = torch.zeros(())
    for i in range(x.shape[0]):
        s = s + x[i]
    return s


def total_in_place(x):
    s = torch.zeros(x.shape[1:])
    for i in range(x.shape[0]):
        s += x[i]
    return s


_BIG = torch.tensor([-3e38, 3e38, 3e38] * 40)
_SWING = torch.tensor([3e38, 3e38, -3e38] * 40)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


@pytest.mark.parametrize("fn, args", [(discounted, (_BIG, 0.5)), (discounted, (_SWING, 0.99)),
                                      (gated, (_BIG.reshape(-1, 2), torch.full((60,), 0.5))),
                                      (prefix, (_BIG,)), (prefix, (_SWING,)), (total, (_SWING,)),
                                      (total_in_place, (_SWING.reshape(-1, 3),))])
def test_partial_sums_past_the_largest_value_keep_the_loop(fn, args):
    for _ in range(3):
        assert _same(autovec(fn)(*args), fn(*args))
    e = explain(fn, *args)
    assert e.path == "python" and "largest value" in " ".join(e.notes), e.notes


@pytest.mark.parametrize("fn, args", [(discounted, (torch.tensor([1e36, -2e36, 3e36] * 10), 0.9)),
                                      (prefix, (torch.tensor([1.0, 2.0, float("-inf"), float("nan"), 3.0] * 8),)),
                                      (total, (torch.tensor([1e30, 2e30, 5.0] * 50),))])
def test_infinities_and_large_values_in_range_keep_the_batch(fn, args):
    for _ in range(3):
        got, want = autovec(fn)(*args), fn(*args)
        assert got.dtype == want.dtype and torch.allclose(got, want, equal_nan=True)
        assert bool((got.isinf() == want.isinf()).all())
    assert explain(fn, *args).path == "vectorized"


def total_weighted(x, w, t):
    for i in range(x.shape[0]):
        t += w * x[i]                 # (float64 steps into a float32 total: each step rounds to float32)
    return t


def histogram_add(x, idx, h):
    for i in range(x.shape[0]):
        h[idx[i]] += x[i]
    return h


def python_floats(xs, t):
    for i in range(len(xs)):
        t = t + xs[i]
    return t


_F32_BIG = [3e38, 3e38, -3e38, -3e38] + [0.0] * 60
_F64_PAST_F32 = torch.tensor([1e39, -1e39, 1.0] + [0.0] * 60, dtype=torch.float64)


@pytest.mark.parametrize("fn, make", [
    (total_weighted, lambda: (torch.tensor(_F32_BIG), torch.tensor(1.0, dtype=torch.float64), torch.zeros(()))),
    (total_weighted, lambda: (_F64_PAST_F32, torch.tensor(1.0, dtype=torch.float64), torch.zeros(()))),
    (histogram_add, lambda: (_F64_PAST_F32, torch.zeros(63, dtype=torch.long), torch.zeros(1))),
    (python_floats, lambda: (list(_F32_BIG), torch.zeros(()))),
])
def test_steps_that_round_to_a_narrower_accumulator(fn, make):
    """(stop 32's second probe: the bound was taken in the steps' dtype, float64, where the loop's
    float32 accumulator rounds every step: the loop reached inf, the batch 0.0, 1.0 or NaN)"""
    for _ in range(3):
        assert _same(autovec(fn)(*make()), fn(*make()))


def test_a_histogram_of_its_own_dtype_adds_in_the_loops_order():
    # (index_add on the CPU adds the values of the target's dtype one by one in the loop's order:
    # the same inf where the loop reaches it, with no bound to check)
    x = torch.tensor([3e38, 3e38, -3e38, 1.0] * 20)
    idx = torch.tensor([0, 0, 0, 1] * 20)
    for _ in range(3):
        got, want = autovec(histogram_add)(x, idx, torch.zeros(2)), histogram_add(x, idx, torch.zeros(2))
        assert _same(got, want) and bool(want.isinf().any())
    assert explain(histogram_add, x, idx, torch.zeros(2)).path == "vectorized"
