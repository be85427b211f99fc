"""The loop index as a Python number (`pow(t, 0.5)`, `c, u = 0.1, t; c * u`, `t.__truediv__(3)`,
`obj[t / 3]` on an object that takes float keys, big ints in an inner loop): in the loop these are
Python's floats and exact ints, where vmap holds the index as an int64 tensor (float32 results,
wrapping products). Such loops run where the index stays a Python number (a batched body) or as
written. Checked against the loop: values and types, errors."""
import pytest
import torch

from autovec import autovec, explain
from conftest import outcome


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def pow_call(x):
    out = torch.zeros(x.shape[0], dtype=torch.float64)
    for t in range(x.shape[0]):
        u = pow(t, 0.5)             # (a Python float, stored as it is)
        out[t] = u
    return out


def tuple_bound(x):
    out = torch.zeros(x.shape[0], dtype=torch.float64)
    for t in range(x.shape[0]):
        c, u = 0.1, t
        v = c * u
        out[t] = v
    return out


def dunder(x):
    out = torch.zeros(x.shape[0], dtype=torch.float64)
    for t in range(x.shape[0]):
        u = t.__truediv__(3)
        out[t] = u
    return out


class FloatKeys:
    def __getitem__(self, key):
        return key * 1e8


def float_key(x, tab):
    out = torch.zeros(x.shape[0], dtype=torch.float64)
    for t in range(x.shape[0]):
        out[t] = x[t] + tab[t / 3]
    return out


def big_ints(x):
    out = []
    for t in range(x.shape[0]):
        s = 1
        for k in range(30):
            s = s * (t % 7 + 2)     # past int64 for some t: Python's ints are exact
        out.append(x[t] + s % 1000)
    return torch.stack(out)


def negative_shift(x):
    out = []
    for t in range(x.shape[0]):
        s = 0
        for k in range(3):
            s = s + (1 << (k - (t == 2) * 5))
        out.append(x[t] + s)
    return torch.stack(out)


@pytest.mark.parametrize("fn", [pow_call, tuple_bound, dunder])
def test_the_index_in_python_float_arithmetic_gives_the_loops_doubles(fn):
    x = torch.zeros(9, dtype=torch.float64)
    assert torch.equal(autovec(fn)(x), fn(x))


def test_a_float_key_into_an_object_of_the_callers():
    x = torch.zeros(7, dtype=torch.float64)
    assert torch.equal(autovec(float_key)(x, FloatKeys()), float_key(x, FloatKeys()))


@pytest.mark.parametrize("fn", [big_ints, negative_shift])
def test_python_ints_of_the_index_in_an_inner_loop(fn):
    x = torch.zeros(9, dtype=torch.float64)
    want, got = outcome(fn, x), outcome(autovec(fn), x)
    if isinstance(want, tuple):
        assert got == want
    else:
        assert torch.equal(got, want)
