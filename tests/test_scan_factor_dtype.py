"""A linear recurrence whose factor is a product the loop never forms alone (`gamma * G * (1 -
d)`, scanned as `a = gamma * (1 - d)`) must not be formed in a narrower dtype than the running
value's: the loop multiplies each part by the float64 state in float64, a batch of float32 done
flags made the factor in float32 (probeI: discounted returns 6.9e-6 off). Such calls keep the
loop; factors of the state's own dtype, and plain factors (`m[t] * G`, whose float32 value
widens exactly) still scan."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def discounted(rewards, dones, gamma):
    ret = torch.zeros_like(rewards)
    G = 0.0
    for t in reversed(range(rewards.shape[0])):
        G = rewards[t] + gamma * G * (1.0 - dones[t])
        ret[t] = G
    return ret


def masked(r, m, gamma):
    out = torch.empty_like(r)
    G = torch.zeros((), dtype=r.dtype)
    for t in range(r.shape[0] - 1, -1, -1):
        G = r[t] + G * m[t] * gamma
        out[t] = G
    return out


def fixed_factor(r, w, gamma):
    out = torch.empty_like(r)
    G = torch.zeros((), dtype=r.dtype)
    for t in range(r.shape[0]):
        G = r[t] + G * w * gamma
        out[t] = G
    return out


def plain_factor(r, m):
    out = torch.empty_like(r)
    G = torch.zeros((), dtype=r.dtype)
    for t in range(r.shape[0]):
        G = m[t] * G + r[t]
        out[t] = G
    return out


def _draw(n, state, flags):
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, generator=g, dtype=state), (torch.rand(n, generator=g) < 0.05).to(flags)


@pytest.mark.parametrize("fn, make", [
    (discounted, lambda: (*_draw(2000, torch.float64, torch.float32), 0.99)),
    (masked, lambda: (torch.randn(3000, dtype=torch.float64), torch.rand(3000) * 0.5 + 0.5, 0.99)),
    (fixed_factor, lambda: (torch.randn(300, dtype=torch.float64), torch.tensor(0.7), 0.99)),   # (one factor)
])
def test_a_narrow_computed_factor_keeps_the_loop(fn, make):
    args = make()
    fast = autovec(fn)
    for _ in range(3):
        assert torch.equal(fast(*args), fn(*args))
    assert explain(fn, *args).path == "python"


@pytest.mark.parametrize("fn, make", [
    (discounted, lambda: (*_draw(2000, torch.float64, torch.float64), 0.99)),
    (discounted, lambda: (*_draw(2000, torch.float32, torch.float32), 0.99)),
    (plain_factor, lambda: (torch.randn(500, dtype=torch.float64), torch.rand(500) * 0.5 + 0.5)),
])
def test_factors_in_the_states_dtype_still_scan(fn, make):
    args = make()
    fast = autovec(fn)
    for _ in range(2):
        torch.testing.assert_close(fast(*args), fn(*args), rtol=1e-5, atol=1e-6)
    assert explain(fn, *args).path == "vectorized"


def ema_into_double(x, a):
    h = torch.zeros((), dtype=torch.float64)
    out = torch.empty(x.shape[0], dtype=torch.float64)
    for t in range(x.shape[0]):
        h = h + a * (x[t] - h)
        out[t] = h
    return out


def ema_steps_into_double(x, c):
    h = torch.zeros((), dtype=torch.float64)
    out = torch.empty(x.shape[0], dtype=torch.float64)
    for t in range(x.shape[0]):
        h = c[t] * h + 0.3 * (x[t] - h)       # (factor c[t] - 0.3 in float64, term 0.3 * x[t] in float32)
        out[t] = h
    return out


def test_a_narrow_computed_term_with_a_factor_per_step_keeps_the_loop():
    x, a = torch.randn(300), torch.rand(300, dtype=torch.float64) * 0.5 + 0.3
    fast = autovec(ema_steps_into_double)
    for _ in range(2):
        assert torch.equal(fast(x, a), ema_steps_into_double(x, a))
    assert explain(ema_steps_into_double, x, a).path == "python"


def test_a_narrow_computed_term_keeps_the_loop():
    """(probeJ: the term `a * x[t]` of `h + a * (x[t] - h)` was formed from float32 rows in float32,
    where the loop computes `x[t] - h` with the float64 state: 1e-7 off)"""
    x = torch.randn(300)
    fast = autovec(ema_into_double)
    for _ in range(2):
        assert torch.equal(fast(x, 0.3), ema_into_double(x, 0.3))
    assert explain(ema_into_double, x, 0.3).path == "python"
    xd = x.double()       # (a term in the state's own dtype still scans)
    torch.testing.assert_close(fast(xd, 0.3), ema_into_double(xd, 0.3), rtol=1e-12, atol=1e-12)
    assert explain(ema_into_double, xd, 0.3).path == "vectorized"
