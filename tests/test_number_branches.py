"""A conditional expression whose branches are Python numbers of one kind, from the loop index
(`lr = (i + 1) / k if i < k else 1.0`, a warm-up factor): a batch of Python numbers in Python's
precision (float64, int64), which later arithmetic casts as one iteration's number is
(lowering.batched, `where` of numbers). Mixed kinds (an int on one side, a float on the other)
keep the loop."""
from __future__ import annotations

import pytest
import torch

from autovec import autovec, explain


def warmup(x, k: int):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        lr = (i + 1) / k if i < k else 1.0
        out[i] = x[i] * lr
    return out


def stepped(x, k: int):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s = i * 2 if i < k else k
        out[i] = x[i] * s
    return out


def two_constants(x, k: int):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s = 0.1 if i < k else 0.7
        out[i] = x[i] * s
    return out


def appended(x, k: int):
    out = []
    for i in range(x.shape[0]):
        lr = 0.5 ** (i // k) if i % 3 else 2.0
        out.append(x[i] * lr - lr)
    return torch.stack(out)


def mixed_kinds(x, k: int):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s = (i + 1) / k if i < k else 1          # a float on one side, an int on the other
        out[i] = x[i] * s
    return out


def divides_by_zero(x, k: int):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s = 1.0 / (i - k) if i >= k else 0.0     # i == k raises in the loop
        out[i] = x[i] * s
    return out


@pytest.mark.parametrize("fn", [warmup, stepped, two_constants, appended])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_number_branches_are_batched_as_the_loop_computes(fn, dtype):
    x = (torch.randn(3000, 4) * 10).to(dtype)
    f = autovec(fn)
    for _ in range(4):
        got, want = f(x, 700), fn(x, 700)
        assert got.dtype == want.dtype and torch.equal(got, want)
    if dtype != torch.int32:
        assert explain(fn, x, 700).path == "vectorized"
    # (int32 data: `s = i * 2 if ..` carries the index into arithmetic with the int32 rows, which
    # wraps in the loop; runtime._index_uses keeps the loop for every flow it does not follow)


@pytest.mark.parametrize("fn", [mixed_kinds, divides_by_zero])
def test_mixed_kinds_and_raising_branches_keep_the_loop(fn):
    x = torch.randn(3000, 4)
    f = autovec(fn)
    try:
        want = fn(x, 700)
    except ZeroDivisionError:
        for _ in range(3):
            with pytest.raises(ZeroDivisionError):
                f(x, 700)
        return
    for _ in range(3):
        got = f(x, 700)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert explain(fn, x, 700).path == "python"


def float_names_into_doubles(x):
    out = torch.zeros(x.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        if x[i] > 0:
            b = 0.1
        else:
            b = 0.7
        out[i] = b                   # Python doubles: a float32 batch of them would round 0.1
    return out


def float_names_times_rows(x, l):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        if x[i] > 0:
            w = 2.1
        else:
            w = 0.3
        out[i] = w * l[i]            # float32 arithmetic, as the loop's
    return out


def test_python_floats_of_a_branch_keep_their_precision(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    g = torch.Generator().manual_seed(15)
    x, l = torch.randn(40, generator=g), torch.randn(40, generator=g)
    fast = autovec(float_names_into_doubles)
    for _ in range(3):
        assert torch.equal(fast(x), float_names_into_doubles(x))
    fast = autovec(float_names_times_rows)
    for _ in range(3):
        assert torch.equal(fast(x, l), float_names_times_rows(x, l))
    # (one iteration's `w` is the loop's Python float, which the batch holds in float64: no vmap)
    assert fast._autovec_state.runtime.ran == {1: "batched"}
