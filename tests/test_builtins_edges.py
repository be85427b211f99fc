"""Edges found by the builtins and comprehensions probe of stop 22: an iteration's `sum` over an
empty range is the int 0 where it is a tensor otherwise, at one argument signature (the kind
the first call saw was reused), and Python's `(-0.0) ** 0.5` is +0.0 where torch's is -0.0."""
import math

import pytest
import torch

from autovec import autovec, explain


def sums_of_generators(x):
    return [sum(x[j, i] * 2 for i in range(x.shape[1])) for j in range(x.shape[0])]


def sums_of_rows(x):
    out = []
    for j in range(x.shape[0]):
        out.append(sum(x[j]))
    return out


def _same(got, want):
    assert type(got) is type(want) and len(got) == len(want)
    for a, b in zip(got, want):
        assert type(a) is type(b)
        if isinstance(b, torch.Tensor):
            torch.testing.assert_close(a, b)
        else:
            assert a == b


@pytest.mark.parametrize("fn", [sums_of_generators, sums_of_rows])
@pytest.mark.parametrize("empty_first", [True, False])
def test_an_empty_inner_range_at_the_same_signature(fn, empty_first):
    empty, full = torch.zeros(300, 0), torch.randn(300, 7)
    first, then = (empty, full) if empty_first else (full, empty)
    fast = autovec(fn)
    for _ in range(3):
        _same(fast(first), fn(first))
    for _ in range(3):
        _same(fast(then), fn(then))
    for _ in range(3):          # and back: each kind again, as the loop gives it
        _same(fast(first), fn(first))
    assert explain(fast, full).path == "vectorized"


def roots(x, e):
    return [x[i].item() ** e for i in range(x.shape[0])]


@pytest.mark.parametrize("e", [0.5, 1.5, 0.25, 2.0, 3.0])
def test_python_powers_of_minus_zero(e, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.tensor([1.0, -0.0, 4.0, 0.0, -0.0, 2.5])
    fast = autovec(roots)
    for _ in range(3):
        got, want = fast(x, e), roots(x, e)
        assert got == want
        assert [math.copysign(1, v) for v in got] == [math.copysign(1, v) for v in want]
    assert explain(fast, x, e).path == "vectorized"


def roots_of_items(x, p):
    return [v ** p for v in x.tolist()]


@pytest.mark.parametrize("p", [0.5, -0.5, 1.5, 2.0, -1.0])
def test_python_powers_of_minus_infinity(p, monkeypatch):
    """Found by the comprehensions probe: Python's (-inf) ** 0.5 is inf and (-inf) ** -0.5 is
    0.0, torch's pow gives NaN; after a first call on ordinary values the batch gave NaN."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    g = autovec(roots_of_items)
    for x in (torch.tensor([1.0, 9.0]), torch.tensor([float("-inf"), 4.0]), torch.tensor([float("-inf"), 4.0])):
        want, got = roots_of_items(x, p), g(x, p)
        assert got == want and [math.copysign(1, v) for v in got] == [math.copysign(1, v) for v in want]
