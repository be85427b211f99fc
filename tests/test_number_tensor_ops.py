"""A per-iteration Python number (an `.item()` value, the loop index) against a tensor where
torch's operator on a Python number is not its operator on a tensor: `v / t` is
Tensor.__rtruediv__, `t.reciprocal() * v` (batching.rdiv computes the same); `t ** v`,
`torch.pow(t, v)` special-case the number's value (0.5 is sqrt, 3 a cube) and raise for an
integer tensor and a negative int, so they keep the loop. Found by an adversarial probe; each
case fails bit for bit without its rule."""
import pytest
import torch

from autovec import autovec
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def item_over(x, y):
    out = torch.zeros(len(x), dtype=y.dtype if y.is_floating_point() else torch.float32)
    for i in range(len(x)):
        out[i] = x[i].item() / y[i]
    return out


def index_over(y):
    out = torch.zeros(len(y))
    for i in range(len(y)):
        out[i] = i / y[i]
    return out


def half_powers(x, K):
    feats = []
    for k in range(K):
        feats.append(x ** (k / 2))
    return torch.stack(feats)


def row_powers(x, e):
    out = torch.empty_like(x)
    for i in range(len(x)):
        out[i] = x[i] ** e[i].item()
    return out


def int_powers(x, e):
    out = []
    for i in range(len(x)):
        out.append(torch.pow(x[i], e[i].item()))
    return torch.stack(out)


def _equal(a, b):
    return a.dtype == b.dtype and torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) and \
        torch.equal(a.signbit(), b.signbit())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_a_number_over_a_tensor_is_the_reciprocal_times_the_number(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3000, generator=g)
    y = (torch.randn(3000, generator=g) * 5).to(dtype)
    y[y == 0] = 3
    fast = autovec(item_over)
    for _ in range(3):
        assert _equal(fast(x, y), item_over(x, y))
    assert ran_modes(fast) == {"batched"}
    fast = autovec(index_over)
    for _ in range(3):
        assert _equal(fast(y.float()), index_over(y.float()))


def test_a_subnormal_divisor_overflows_as_in_the_loop():
    fast = autovec(item_over)
    for _ in range(4):
        fast(torch.rand(50) + 1, torch.rand(50) + 1)
    x, y = torch.full((50,), 1e-10), torch.full((50,), 1e-39)
    assert _equal(fast(x, y), item_over(x, y))
    assert torch.isinf(fast(x, y)).all()


def test_powers_of_per_iteration_numbers_keep_the_loop():
    x = torch.rand(2000) * 3
    fast = autovec(half_powers)
    for _ in range(3):            # ordinary values first: a one-time check passes on those
        assert _equal(fast(x, 6), half_powers(x, 6))
    x[:3] = torch.tensor([-0.0, float("-inf"), 4.0])
    assert _equal(fast(x, 6), half_powers(x, 6))
    assert ran_modes(fast) == set()
    e = torch.tensor([0.5, -0.5, 2.0, 3.0] * 50)
    xs = torch.randn(200, 3)
    xs[0, 0], xs[1, 0] = -0.0, float("-inf")
    fast = autovec(row_powers)
    for _ in range(3):
        assert _equal(fast(xs.abs() + 1, e), row_powers(xs.abs() + 1, e))
    assert _equal(fast(xs, e), row_powers(xs, e))
    assert ran_modes(fast) == set()


def test_an_integer_power_with_a_negative_exponent_raises_as_the_loop():
    x, e = torch.randint(-3, 4, (300, 3)), torch.randint(0, 3, (300,))
    fast = autovec(int_powers)
    assert torch.equal(fast(x, e), int_powers(x, e))
    e[150] = -1
    with pytest.raises(RuntimeError, match="negative integer powers"):
        int_powers(x, e)
    with pytest.raises(RuntimeError, match="negative integer powers"):
        fast(x, e)


def mean_len(total, counts):
    out = torch.zeros(counts.shape[0])
    for i in range(counts.shape[0]):
        out[i] = total[i].item() / counts[i]
    return out


def inv_counts(counts):
    out = []
    for i in range(counts.shape[0]):
        out.append(i / counts[i])
    return torch.stack(out)


def test_a_number_over_a_narrow_integer_tensor_is_not_cast_to_it():
    """(the reciprocal is the default float dtype's: a cast of the number to uint8 or int32
    would wrap, 256 to 0, 3e9 past int32)"""
    total = torch.tensor([10, 20, 3_000_000_000, 5_000_000_000, 7] * 20)
    counts = torch.tensor([2, 3, 4, 5, 7] * 20, dtype=torch.int32)
    fast = autovec(mean_len)
    for _ in range(3):
        assert _equal(fast(total, counts), mean_len(total, counts))
    c8 = torch.randint(1, 255, (600,), dtype=torch.uint8)
    fast = autovec(inv_counts)
    for _ in range(3):
        assert _equal(fast(c8), inv_counts(c8))
