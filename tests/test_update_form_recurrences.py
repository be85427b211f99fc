"""A running value updated by `+=` / `-=` of an expression of itself: the running mean
`mean += (x[i] - mean) / (i + 1)`, an EMA in update form `ema += a * (x[t] - ema)`
(analysis.loops._walk: `h = h + (..)`, a linear recurrence, payload "+="). The same values as
the assignment where the running value is a Python number, or a tensor the loop made and does
not hand on; a tensor start (updated in place by the loop), a running tensor handed on between
updates (every reference would see the later updates), and tensors that require grad keep the
loop (runtime._linear_prefix). The scan reassociates the loop's arithmetic, as every linear
recurrence here: the values agree to rounding."""
import math

import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def running_mean_of_numbers(x):
    mean = 0.0
    out = []
    for i in range(x.shape[0]):
        mean += (x[i].item() - mean) / (i + 1)
        out.append(mean)
    return out


def ema_stored(x, a: float = 0.1):
    ema = 0.0
    out = torch.zeros(x.shape[0])
    for t in range(x.shape[0]):
        ema += a * (x[t] - ema)
        out[t] = ema
    return out, ema


def ema_subtracted(x, a: float = 0.1):
    ema = 0.0
    for t in range(x.shape[0]):
        ema -= a * (ema - x[t].item())
    return ema


def running_mean_copied(x):
    mean = 0.0
    out = []
    for i in range(x.shape[0]):
        mean += (x[i] - mean) / (i + 1)
        out.append(mean * 1.0)
    return torch.stack(out)


def _close(a, b):
    assert type(a) is type(b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    else:
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("fn", [running_mean_of_numbers, ema_stored, ema_subtracted, running_mean_copied])
@pytest.mark.parametrize("n", [1, 2, 9, 200])
def test_update_form_recurrences(fn, n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    _close(autovec(fn)(x), fn(x))
    if n > 2:
        assert explain(fn, x).path == "vectorized", str(explain(fn, x))


def test_the_running_mean_is_the_mean():
    x = torch.randn(500, dtype=torch.float64)
    got = autovec(running_mean_of_numbers)(x)
    assert math.isclose(got[-1], float(x.mean()), rel_tol=1e-12)


def tensor_start(x):
    mean = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        mean += (x[i] - mean) / (i + 1)      # (in place on the start)
    return mean


def handed_on(x, a: float = 0.1):
    ema = 0.0
    hist = []
    for t in range(x.shape[0]):
        ema += a * (x[t] - ema)               # (a tensor from the first step on, updated in place)
        hist.append(ema)                      # (every element is that one tensor)
    return hist


def test_what_the_loop_updates_in_place_keeps_the_loop():
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    start_of = autovec(tensor_start)(x)
    torch.testing.assert_close(start_of, tensor_start(x), rtol=0, atol=0)
    assert explain(tensor_start, x).path == "python"
    y = torch.randn(8, generator=torch.Generator().manual_seed(1))
    got, want = autovec(handed_on)(y), handed_on(y)
    assert all(g is got[-1] for g in got) and all(w is want[-1] for w in want)
    assert torch.equal(got[0], want[0])
    assert explain(handed_on, y).path == "python"


def test_under_autograd_the_loop_runs():
    x = torch.randn(6, generator=torch.Generator().manual_seed(2))
    grads = []
    for f in (running_mean_copied, autovec(running_mean_copied)):
        xx = x.clone().requires_grad_()
        f(xx).sum().backward()
        grads.append(xx.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    assert explain(running_mean_copied, x.clone().requires_grad_()).path == "python"
