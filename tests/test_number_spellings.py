"""Python-number arithmetic in its other spellings and corners (probeH): the `operator`
module's functions are their operators (`operator.truediv(a, b)` is `a / b`, with Python's
zero-divisor error and exact float powers), a dunder method called by name keeps the loop, a
float remainder is Python's where torch's overflows (`-1e308 % -0.1`), and `a >> b` with a
negative count raises as in the loop."""
import math
import operator

import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def op_div(x, y):
    out = []
    for i in range(x.shape[0]):
        out.append(operator.truediv(x[i].item(), y[i].item()))
    return out


def op_mixed(x):
    out = []
    for i in range(x.shape[0]):
        v = x[i].item()
        out.append((operator.__pow__(v, 3), operator.mod(v, -0.7), operator.neg(v), operator.lt(v, 0.5)))
    return out


def op_comprehension(x):
    return [operator.pow(v.item(), 0.5) for v in x]


def dunder_div(x, y):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].item().__truediv__(y[i].item()))
    return out


def remainders(x, y):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].item() % y[i].item())
    return out


def shifts(x, s):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].item() >> s[i].item())
    return out


def _bits(a, b):
    assert len(a) == len(b)
    for p, q in zip(a, b):
        p, q = (p, q) if isinstance(p, tuple) else ((p,), (q,))
        for u, v in zip(p, q):
            assert type(u) is type(v)
            assert u == v or (u != u and v != v)
            if type(u) is float:
                assert math.copysign(1, u) == math.copysign(1, v)


def test_operator_functions_are_their_operators():
    x = torch.linspace(0.1, 3.0, 64, dtype=torch.float64)
    y = torch.arange(1, 65, dtype=torch.float64)
    for fn, args in ((op_div, (x, y)), (op_mixed, (x,)), (op_comprehension, (x,))):
        fast = autovec(fn)
        for _ in range(2):
            _bits(fn(*args), fast(*args))
        assert ran_modes(fast) == {"batched"}, fn.__name__
    y[7] = 0
    fast = autovec(op_div)
    fast(x, torch.arange(1, 65, dtype=torch.float64))
    with pytest.raises(ZeroDivisionError):
        fast(x, y)
    with pytest.raises(ZeroDivisionError):
        op_div(x, y)


def test_a_dunder_method_called_by_name_keeps_the_loop():
    x = torch.linspace(0.1, 3.0, 16, dtype=torch.float64)
    y = torch.arange(1, 17)
    _bits(dunder_div(x, y), autovec(dunder_div)(x, y))
    r = explain(dunder_div, x, y).loops[0]
    assert r.strategy == "python" and "dunder" in r.reason


def test_float_remainders_are_pythons():
    x = torch.full((64,), 5.5, dtype=torch.float64)
    y = torch.full((64,), 2.0, dtype=torch.float64)
    x[7], y[7] = -1e308, -0.1          # (torch's remainder: NaN)
    x[8], y[8] = 0.0, -0.7             # (-0.0, the divisor's sign)
    x[9], y[9] = 1e20, 0.3
    x[10], y[10] = 2.0, -float("inf")  # (-inf in Python)
    fast = autovec(remainders)
    for _ in range(2):
        _bits(remainders(x, y), fast(x, y))
    assert ran_modes(fast) == {"batched"}


def test_a_negative_shift_count_raises_as_in_the_loop():
    x = torch.arange(-8, 8)
    s = torch.tensor([1, 2, 70, 0] * 4)
    fast = autovec(shifts)
    _bits(shifts(x, s), fast(x, s))
    assert ran_modes(fast) == {"batched"}
    s[5] = -1
    with pytest.raises(ValueError, match="negative shift count"):
        fast(x, s)


OP = operator.mul


def through_a_name(x):
    out = []
    for i in range(x.shape[0]):
        out.append(OP(x[i].item(), 2))
    return out


def test_an_operator_function_through_a_name_keeps_the_loop():
    """(probeJ: `OP(x[i], 2)` with `OP = operator.mul` was read as `x[i] * 2` on the first call,
    and a later `OP = operator.add` went unseen: only the module's own attribute, which the call
    checks again, is read as its operator)"""
    global OP
    x = torch.linspace(0.1, 3.0, 8, dtype=torch.float64)
    fast = autovec(through_a_name)
    try:
        _bits(through_a_name(x), fast(x))
        OP = operator.add
        _bits(through_a_name(x), fast(x))
    finally:
        OP = operator.mul
    r = explain(through_a_name, x).loops[0]
    assert r.strategy == "python" and "through a name" in r.reason
