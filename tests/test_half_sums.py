"""Running sums and products whose running value is float16 / bfloat16 round to half precision
at every step in the loop (2048 + 1 stays 2048 in float16; a partial sum can overflow to inf
where the total would not): a batched sum accumulates in float32 and rounds once, so those
loops keep Python. And an in-place running sum on a tensor start that holds -0.0 keeps the
sign where the loop does (found by the adversarial probe of this stop)."""
import math

import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def total_of(x):
    total = torch.zeros((), dtype=x.dtype)
    for i in range(x.shape[0]):
        total = total + x[i]
    return total


def total_from_float(x):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + x[i]
    return total


def total_in_place(x, total):
    for i in range(x.shape[0]):
        total += x[i]
    return total


def difference_in_place(x, total):
    for i in range(x.shape[0]):
        total -= x[i]
    return total


def product_of(x):
    p = torch.ones((), dtype=x.dtype)
    for i in range(x.shape[0]):
        p = p * x[i]
    return p


def running(x):
    s = torch.zeros((), dtype=x.dtype)
    out = []
    for i in range(x.shape[0]):
        s = s + x[i]
        out.append(s)
    return torch.stack(out)


def prefix_in_place(x):
    for i in range(1, x.shape[0]):
        x[i] += x[i - 1]
    return x


def ema(x, beta):
    m = torch.zeros(x.shape[1], dtype=x.dtype)
    for t in range(x.shape[0]):
        m = beta * m + (1 - beta) * x[t]
    return m


def _stagnating(dtype):
    x = torch.ones(12, dtype=dtype)
    x[0] = 2048 if dtype == torch.float16 else 256       # where adding 1 rounds back down
    return x


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", [total_of, total_from_float, product_of, running, prefix_in_place])
def test_half_precision_running_values_keep_the_loop(fn, dtype):
    x = _stagnating(dtype) if fn is not product_of else torch.full((12,), 1.0 + 2 ** -8, dtype=dtype)
    want = fn(x.clone())
    fast = autovec(fn)
    got = fast(x.clone())
    assert torch.equal(got, want), (got, want)
    assert not ran_modes(fast)


def test_a_half_partial_sum_overflows_as_in_the_loop():
    x = torch.tensor([[60000.0], [60000.0], [-60000.0]], dtype=torch.float16)
    for fn in (total_of, total_from_float):
        assert torch.equal(autovec(fn)(x), fn(x))                 # inf, as the loop
    got = autovec(total_in_place)(x, torch.zeros(1, dtype=torch.float16))
    assert torch.isinf(got).all()


def test_half_linear_recurrence_keeps_the_loop():
    x = torch.randn(40, 3).half()
    assert torch.equal(autovec(ema)(x, 0.9), ema(x, 0.9))
    assert explain(ema, x, 0.9).path == "python"


def test_float32_sums_still_run_batched():
    x = torch.randn(12, 3)
    fast = autovec(total_of)
    assert torch.allclose(fast(x), total_of(x))
    assert ran_modes(fast)


def _sign(t):
    return [math.copysign(1.0, v) for v in t.flatten().tolist()]


@pytest.mark.parametrize("start", [torch.tensor(-0.0), torch.tensor([-0.0, 0.0, -0.0]), torch.full((2, 3), -0.0)])
@pytest.mark.parametrize("rows", [[-0.0, -0.0], [0.0, -0.0], [-0.0, 0.0, -0.0]])
def test_in_place_sums_keep_a_minus_zero_start(start, rows):
    x = torch.tensor(rows).view(-1, *[1] * start.dim()).expand(-1, *start.shape).contiguous()
    for fn in (total_in_place, difference_in_place):
        want = fn(x, start.clone())
        got = autovec(fn)(x, start.clone())
        assert torch.equal(got, want) and _sign(got) == _sign(want), (fn.__name__, got, want)


def count_into_half(x, c):
    for r in x:
        if r.sum() > 0:
            c = c + 1
    return c


def index_into_half(x, acc):
    for i in range(x.shape[0]):
        acc = acc + i
    return acc


def scaled_half(x, acc):
    for i in range(x.shape[0]):
        acc = acc * 1.001
    return acc


@pytest.mark.parametrize("fn", [count_into_half, index_into_half, scaled_half])
@pytest.mark.parametrize("start", [torch.tensor(2048.0, dtype=torch.float16), torch.tensor(256.0, dtype=torch.bfloat16)])
def test_a_half_running_value_with_python_number_steps_keeps_the_loop(fn, start):
    """Found by the comprehensions probe: a half-precision running value updated by Python
    numbers (a count, the index, a factor) summed its steps first: 2048 + 1 + 1 is 2048 in the
    loop's float16, 2050 summed."""
    x = torch.ones(5, 3)
    g = autovec(fn)
    for _ in range(2):
        want, got = fn(x, start.clone()), g(x, start.clone())
        assert got.dtype == want.dtype and torch.equal(got, want)
