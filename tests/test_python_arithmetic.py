"""Arithmetic of Python numbers (`.item()` values, the loop index) batched as int64 / float64
tensors must compute what Python computes, or leave the call to the loop where Python raises:
int / int is a float64 division, a zero divisor raises ZeroDivisionError, an int to a negative
power is a float, powers and products do not wrap, a float remainder keeps the divisor's
sign, and a -0.0 start keeps its sign through sums of -0.0 (batching.pynum,
runtime._minus_zero_rest, runtime._pysum). Found by this project's adversarial probes."""
import math

import pytest
import torch

from autovec import autovec, explain
from conftest import raises_as_loop, ran_modes as _ran


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def same(a, b):
    """Exactly the loop's result: types, values, signs of zero, NaN where NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(p, q) for p, q in zip(a, b))
    if isinstance(a, float):
        return (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.nan_to_num(7), b.nan_to_num(7)) \
            and torch.equal(torch.signbit(a), torch.signbit(b))
    return a == b


def check(fn, *args, vectorized=True):
    f = autovec(fn)
    for _ in range(2):           # the first call, then the steady state
        assert same(f(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]), fn(*args))
    if vectorized:
        assert explain(f, *args).path == "vectorized"
    return f


def int_over_int(x):
    return [x[i].item() / 3 for i in range(x.shape[0])]

def int_over_item(x, y):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].item() / y[i].item())
    return out

def reciprocal(x):
    out = []
    for i in range(x.shape[0]):
        out.append(1.0 / x[i].item())
    return out

def floor_and_mod(x, y):
    return [(x[i].item() // y[i].item(), x[i].item() % y[i].item()) for i in range(x.shape[0])]

def power_of_items(x, y):
    return [x[i].item() ** y[i].item() for i in range(x.shape[0])]

def two_to_the(x):
    return [2 ** x[i].item() for i in range(x.shape[0])]

def scaled_by_index_power(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2 ** i
    return out

def times_four(x):
    out = torch.empty(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        out[i] = x[i].item() * 4
    return out

def shifted(x):
    return [x[i].item() << 3 for i in range(x.shape[0])]

def float_mod(x):
    return [x[i].item() % (x[i].item() - 2.0) for i in range(x.shape[0])]


def test_int_over_int_is_pythons_float64_division_in_the_batched_body():
    x = torch.randint(1, 10 ** 6, (40,))
    f = check(int_over_int, x)
    assert _ran(f) == {"batched"}      # (vmap would divide int64 tensors into float32)
    check(int_over_item, torch.randint(-50, 50, (30,)), torch.randint(1, 9, (30,)))


def test_without_the_batched_body_the_loop_runs_rather_than_vmap(monkeypatch):
    """vmap would divide the int64 batch into float32 and never raise ZeroDivisionError: where
    `.item()` values meet `/`, `//`, `%` or `**`, only the batched body may run them."""
    monkeypatch.setenv("AUTOVEC_BATCHED", "0")
    x = torch.randint(1, 10 ** 6, (40,))
    f = autovec(int_over_int)
    assert same(f(x), int_over_int(x))
    assert _ran(f) == set()
    assert f._autovec_state.runtime.py_arith


@pytest.mark.parametrize("values", [[1.0, 0.0, 4.0], [1.0, 2.0, 4.0, 0.0], [-0.0, 3.0]])
def test_a_zero_divisor_raises_as_the_loop(values):
    f = autovec(reciprocal)
    f(torch.tensor([1.0, 2.0, 4.0]))        # a first call that vectorizes
    x = torch.tensor(values)
    with pytest.raises(ZeroDivisionError) as got:
        f(x)
    with pytest.raises(ZeroDivisionError) as want:
        reciprocal(x)
    assert str(got.value) == str(want.value)
    assert same(f(torch.tensor([2.0, 8.0])), [0.5, 0.125])     # other values vectorize again
    assert explain(f, torch.tensor([2.0, 8.0])).path == "vectorized"


def test_a_zero_divisor_on_the_first_call_raises_as_the_loop():
    """The first call also checks the batched body on two rows: a zero there must not send
    the loop to vmap (which divides by zero without raising)."""
    raises_as_loop(ZeroDivisionError, reciprocal, torch.tensor([1.0, 0.0, 4.0]))
    raises_as_loop(ZeroDivisionError, reciprocal, torch.tensor([1.0, 2.0, 4.0, 0.0]))


def test_floor_division_and_remainder_by_zero_raise_as_the_loop():
    raises_as_loop(ZeroDivisionError, floor_and_mod, torch.tensor([3, 4]), torch.tensor([2, 0]))
    raises_as_loop(ZeroDivisionError, floor_and_mod, torch.tensor([3.0, 4.0]), torch.tensor([2.0, 0.0]))
    check(floor_and_mod, torch.randint(-20, 20, (30,)), torch.randint(1, 5, (30,)) * torch.tensor([1, -1]).repeat(15))
    check(floor_and_mod, torch.randn(30, dtype=torch.float64) * 5, torch.rand(30, dtype=torch.float64) + 0.5)


def test_powers_give_pythons_types_or_raise_as_the_loop():
    assert same(autovec(two_to_the)(torch.tensor([1, -3, 4])), [2, 0.125, 16])      # an int, then a float
    check(two_to_the, torch.randint(0, 20, (30,)))
    check(power_of_items, torch.rand(20, dtype=torch.float64) * 3, torch.randn(20, dtype=torch.float64))
    # a negative float to a fractional power is a complex number in Python
    for k in range(3):     # (past the two rows the batched body is first checked on, too)
        b = torch.tensor([4.0, 9.0, 16.0], dtype=torch.float64)
        e = torch.full((3,), 0.5, dtype=torch.float64)
        b[k], e[k] = -8.0, 1 / 3
        assert same(autovec(power_of_items)(b, e), power_of_items(b, e))
    raises_as_loop(OverflowError, power_of_items, torch.tensor([2.0, 1e200], dtype=torch.float64),
                   torch.tensor([2.0, 2.0], dtype=torch.float64))
    raises_as_loop(ZeroDivisionError, power_of_items, torch.tensor([2.0, 0.0], dtype=torch.float64),
                   torch.tensor([2.0, -1.0], dtype=torch.float64))


def test_ints_do_not_wrap():
    # the index as an int: 2 ** 70 is no int64; the loop raises converting it
    check(scaled_by_index_power, torch.ones(20))
    raises_as_loop(OverflowError, scaled_by_index_power, torch.ones(70))
    check(times_four, torch.randint(-9, 9, (20,)))
    raises_as_loop((ValueError, RuntimeError), times_four, torch.tensor([1, 2 ** 62]))
    check(shifted, torch.randint(0, 99, (20,)))
    assert same(autovec(shifted)(torch.tensor([1, 2 ** 61])), shifted(torch.tensor([1, 2 ** 61])))

    def total(x):
        s = 0
        for i in range(x.shape[0]):
            s += x[i].item()
        return s
    big = torch.tensor([2 ** 62, 2 ** 62, 2 ** 62])
    assert autovec(total)(big) == total(big) == 3 * 2 ** 62


def test_a_float_remainder_keeps_the_divisors_sign_of_zero():
    x = torch.tensor([1.0, 3.0, 5.0, -1.0, 0.5], dtype=torch.float64)
    check(float_mod, x)
    assert math.copysign(1, autovec(float_mod)(x)[0]) == -1.0     # 1.0 % -1.0 is -0.0
    raises_as_loop(ZeroDivisionError, float_mod, torch.tensor([2.0], dtype=torch.float64).repeat(3))


def minus_zero_py(x):
    s = -0.0
    for i in range(x.shape[0]):
        s += x[i].item()
    return s

def minus_zero_py_sub(x):
    s = -0.0
    for i in range(x.shape[0]):
        s -= x[i].item()
    return s

def minus_zero_float_start(x):
    s = -0.0
    for i in range(x.shape[0]):
        s = s + x[i]
    return s

def minus_zero_tensor(x):
    s = torch.tensor(-0.0)
    for i in range(x.shape[0]):
        s = s + x[i]
    return s

def minus_zero_tensor_sub(x):
    s = torch.zeros(2).neg()
    for i in range(x.shape[0]):
        s = s - x[i]
    return s


@pytest.mark.parametrize("values", [[-0.0, -0.0, -0.0], [0.0, -0.0], [-0.0, 0.0], [1.0, -1.0], [-0.0], [2.0, -0.0]])
def test_a_minus_zero_start_keeps_its_sign_as_in_the_loop(values):
    x = torch.tensor(values)
    for fn in (minus_zero_py, minus_zero_py_sub, minus_zero_float_start, minus_zero_tensor):
        assert same(autovec(fn)(x), fn(x)), fn.__name__
    rows = torch.tensor(values).unsqueeze(1).repeat(1, 2)
    rows[:, 1] = -rows[:, 1]
    assert same(autovec(minus_zero_tensor_sub)(rows), minus_zero_tensor_sub(rows))
