"""Branches that give Python numbers of one type under a per-element condition (`c += 1` /
`c += 0.5` of an AUC with ties, `w = 2.1 if x[i] > 0 else 0.3`). One iteration of the
if-converted body gives the loop's own number (runtime `where`), which the batch holds in
Python's precision (float64, int64): the batched body runs, with no vmap, and gives the loop's
values (sums up to their order of addition, as every reduction)."""
from __future__ import annotations

import math

import pytest
import torch

from autovec import autovec, explain
from test_float_totals import auc as auc_with_ties     # (c += 1 / c += 0.5: the ints written as floats)


def tenths(x):
    c = 0.0
    for i in range(x.shape[0]):
        c += 0.1 if x[i] > 0 else 0.3
    return c


def int_branch_divided(x):
    c = 0
    for i in range(x.shape[0]):
        v = 3 if x[i] > 0 else 2
        c += v / 7            # Python's true division: a float64 number, not a float32 tensor
    return c


def int_branch_scales(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        k = 2 if x[i] > 0 else 3
        out[i] = x[i] * k
    return out


def float_arith_then_store(x):
    out = torch.empty(x.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        v = 0.1 if x[i] > 0 else 0.7
        out[i] = v * 3        # 0.30000000000000004 in Python; float32's 0.1 * 3 is another number
    return out


def bool_flags(x):
    out = torch.empty(x.shape[0], dtype=torch.bool)
    for i in range(x.shape[0]):
        out[i] = True if x[i] > 0 else False
    return out


def scaled_with_grad(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * (0.5 if x[i] > 0 else 2.0)
    return out


@pytest.fixture(autouse=True)
def _every_size(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _ran(fast):
    return set(fast._autovec_state.runtime.ran.values())


def test_an_auc_with_ties_runs_batched_and_exactly():
    g = torch.Generator().manual_seed(0)
    pos = torch.randint(0, 30, (60,), generator=g).float()
    neg = torch.randint(0, 30, (40,), generator=g).float()
    fast = autovec(auc_with_ties)
    for _ in range(3):
        assert fast(pos, neg) == auc_with_ties(pos, neg)    # halves and ones: every sum exact
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("fn", [tenths, int_branch_divided])
def test_number_totals_of_branches_are_the_loops_up_to_the_order_of_addition(fn):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3000, generator=g)
    fast = autovec(fn)
    want = fn(x)
    exact = math.fsum(fn(x[i:i + 1]) for i in range(x.shape[0]))   # each term exactly once
    for _ in range(3):
        got = fast(x)
        assert type(got) is float
        # as close to the exact sum as the loop's own running total, or closer
        assert abs(got - exact) <= max(abs(want - exact), 1e-12 * abs(exact))
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("fn", [int_branch_scales, float_arith_then_store, bool_flags])
def test_stored_values_of_number_branches_are_the_loops_bit_for_bit(fn):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(500, generator=g)
    fast = autovec(fn)
    want = fn(x)
    for _ in range(3):
        got = fast(x)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert "python" not in _ran(fast) and _ran(fast)


def test_gradients_through_number_branches():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(400, generator=g)
    fast = autovec(scaled_with_grad)
    for _ in range(2):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = scaled_with_grad(a), fast(b)
        assert torch.equal(got, want)
        w = torch.randn(400, generator=g)
        (want * w).sum().backward()
        (got * w).sum().backward()
        assert torch.equal(a.grad, b.grad)


def test_under_a_transform_the_branch_stays_a_tensor():
    # torch.func.grad of the decorated function: the body's `where` sees a transform and keeps
    # torch.where (a Python `if` on a traced condition would fail); values and grads as the loop's
    def loss(x):
        return scaled_with_grad(x).sum()

    fast = autovec(scaled_with_grad)

    def fast_loss(x):
        return fast(x).sum()

    x = torch.randn(50, generator=torch.Generator().manual_seed(4))
    assert torch.equal(torch.func.grad(fast_loss)(x), torch.func.grad(loss)(x))


def solved_and_scaled(x, w):
    out = torch.empty(x.shape[0], 3, dtype=x.dtype)
    for i in range(x.shape[0]):
        out[i] = torch.linalg.solve(w, x[i]) * (0.1 if x[i, 0] > 0 else 0.7)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_under_vmap_a_branch_between_numbers_keeps_the_loop(dtype):
    # a body with no batched form runs under vmap, where the picked number would be a tensor
    # (float32's 0.1 times a float64 row is not the loop's 0.1 times it): the loop runs
    g = torch.Generator().manual_seed(5)
    x = torch.randn(50, 3, generator=g, dtype=dtype)
    w = torch.randn(3, 3, generator=g, dtype=dtype) + 3 * torch.eye(3, dtype=dtype)
    fast = autovec(solved_and_scaled)
    for _ in range(3):
        assert torch.equal(fast(x, w), solved_and_scaled(x, w))
    assert _ran(fast) == set()
    assert "a branch between Python numbers under vmap" in str(explain(fast, x, w))


def test_text_of_a_per_iteration_number_keeps_the_loop():
    def negatives(x):
        c = 0
        for i in range(x.shape[0]):
            c += 1 if str(x[i].item())[0] == "-" else 0     # the text of a Python float
        return c

    fast = autovec(negatives)
    x = torch.tensor([5.0, 1.5, -0.0, 2.5, 2.0, -3.0, 4.0])
    for _ in range(3):
        assert fast(x) == negatives(x) == 2
    assert "Python data" in explain(fast, x).loops[0].reason
