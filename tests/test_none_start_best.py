"""`if best is None or v < best: best, idx = v, i`: a running best that starts from None (the
first iteration takes its value, with no comparison against None). Read as the running best of
analysis._tracker with runtime best's `none_start`: the extreme over all iterations (the first
of equals for a strict comparison, the last for `<=` / `>=`), its payloads taken along; a start
that is not None is compared as before. Checked against the loop: values, Python types, ties,
NaN, empty inputs, and the errors of a comparison with None."""
import math

import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def argmin_none(x):
    best = None
    bi = -1
    for i, v in enumerate(x):
        if best is None or v < best:
            best, bi = v, i
    return best, bi


def argmax_last(x):
    best = None
    at = None
    for i in range(x.shape[0]):
        if best is None or x[i] >= best:
            best = x[i]
            at = i
    return best, at


def best_item(losses):
    best = None
    epoch = 0
    for i in range(len(losses)):
        loss = losses[i].item()
        if best is None or loss < best:
            best = loss
            epoch = i
    return best, epoch


def flipped(x):
    best = None
    for v in x:
        if best is None or best < v:
            best = v
    return best


def started(x, best):
    idx = -1
    for i, v in enumerate(x):
        if best is None or v < best:
            best, idx = v, i
    return best, idx


def no_none_test(x):
    best = None
    for v in x:
        if v < best:
            best = v
    return best


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, tuple):
        for p, q in zip(a, b):
            _same(p, q)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


@pytest.mark.parametrize("fn", [argmin_none, argmax_last, best_item, flipped])
@pytest.mark.parametrize("make", [
    lambda: torch.randn(50),
    lambda: torch.randint(0, 4, (40,)).float(),           # (ties: the first, or with >= the last)
    lambda: torch.randint(-3, 3, (30,)),                   # (ints)
    lambda: torch.tensor([float("nan"), 1.0, -2.0]),       # (NaN first: the loop keeps it)
    lambda: torch.tensor([1.0, float("nan"), -2.0]),
    lambda: torch.randn(1),
    lambda: torch.randn(0),                                # (no iteration: None stays)
    lambda: torch.randn(20, dtype=torch.float64),
])
def test_a_best_from_none_is_the_loops(fn, make):
    torch.manual_seed(0)
    x = make()
    fast = autovec(fn)
    for _ in range(2):
        _same(fn(x.clone()), fast(x.clone()))


def test_it_is_vectorized():
    for fn in (argmin_none, argmax_last, best_item, flipped):
        assert explain(fn, torch.randn(50)).path == "vectorized", fn.__name__


@pytest.mark.parametrize("start", [None, 0.0, -10.0, 10.0, torch.tensor(0.5)])
def test_a_start_that_is_not_none_is_compared(start):
    x = torch.randn(30)
    _same(started(x, start), autovec(started)(x, start))


def test_a_comparison_with_none_raises_as_the_loop():
    x = torch.randn(5)
    with pytest.raises(TypeError) as want:
        no_none_test(x)
    with pytest.raises(TypeError) as got:
        autovec(no_none_test)(x)
    assert str(got.value) == str(want.value)


def other_name(x, flag):
    best = 100.0
    for v in x:
        if flag is None or v < best:
            best = v
    return best


@pytest.mark.parametrize("flag", [None, 1])
def test_a_none_test_of_another_name_is_not_a_start(flag):
    # with flag None every iteration takes its value (the last one wins); otherwise the minimum
    x = torch.randn(20)
    _same(other_name(x, flag), autovec(other_name)(x, flag))
