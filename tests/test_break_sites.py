"""Loops with several places that stop them: top-level `if c0: ..; break`, `if c1: ..; break`,
and `if a: ..; break` / `elif b: ..; break` chains (each arm a place of its own). Every condition
runs for every iteration; the batch covers the iterations before the first one where any holds,
and that iteration runs as written from the first `if` on (each earlier `if` with its own test,
the statements up to the next one as its `else`). Checked against the loop: results, rows
written, in-place effects, the loop variable after the loop and gradients."""
import pytest
import torch

from autovec import autovec, explain
from conftest import outcome, ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def two_sites(x, t):
    s = 0.0
    k = -1
    for i in range(x.shape[0]):
        if x[i] < -2.5:
            k = i
            break
        v = x[i] * 2
        if v > t:
            k = -i                       # the second site's own statements
            break
        s += v.item()
    return s, k


def total_between(x, t):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] < -2.5:
            break
        s += x[i].item()                 # counted in the iteration the second site stops
        if x[i] > t:
            break
    return s, i


def elif_chain(x, lo, hi):
    hit = None
    for i in range(len(x)):
        if x[i].sum() < lo:
            hit = ("low", i)
            break
        elif x[i].sum() > hi:
            hit = ("high", i)
            break
        else:
            x[i] = x[i] * 0.5            # rows before the stop, in place
    return hit


def three_sites(x):
    k = -1
    for i in range(x.shape[0]):
        if x[i] > 2.8: k = 1; break      # noqa: E701,E702
        if x[i] < -2.8: k = 2; break     # noqa: E701,E702
        if x[i] == 0: k = 3; break       # noqa: E701,E702
    return k, i


def fill_until(x, out, lim):
    for i in range(x.shape[0]):
        if i >= lim:
            break
        if x[i].abs().max() > 2.5:
            out[i] = -1.0
            break
        out[i] = x[i].sum()
    return out


def search_while(x, t):
    i = 0
    while i < x.shape[0] and x[i] != 0:
        if x[i] > t:
            break
        i += 1
    return i


def rebinds_between(x, t):
    s = 0.0
    for i in range(x.shape[0]):
        v = x[i]
        if v < -2.5:
            break
        v = v * 3                        # the second test reads the new `v`, the first the old
        if v > t:
            break
        s += v.item()
    return s


def grads(x, t):
    tot = x.sum() * 0
    for i in range(x.shape[0]):
        if x[i].sum() > t:
            break
        tot = tot + x[i].pow(2).sum()
        if x[i].max() > 2.9:
            tot = tot * 3.0
            break
    return tot


def with_continue(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] < -2.5:
            break
        if x[i] < 0:
            continue
        if x[i] > 2.5:
            break
        s += x[i].item()
    return s


def _x(seed, n=3000, *shape):
    return torch.randn(n, *shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("t", [1.0, 4.0, 5.5, 1e9])
def test_two_sites_stop_where_the_loop_stops(t):
    fast = autovec(two_sites)
    for seed in range(4):
        x = _x(seed)
        got, want = fast(x, t), two_sites(x, t)
        assert got[1] == want[1]
        assert got[0] == pytest.approx(want[0], rel=1e-12, abs=1e-12)   # (a sum: its order)
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("t", [2.0, 3.0, 1e9])
def test_a_total_between_the_sites_counts_the_iteration_the_second_stops(t):
    fast = autovec(total_between)
    for seed in range(4):
        x = _x(seed)
        got, want = fast(x, t), total_between(x, t)
        assert got[1] == want[1]
        assert got[0] == pytest.approx(want[0], rel=1e-12, abs=1e-12)
    assert _ran(fast)


@pytest.mark.parametrize("lo, hi", [(-5, 5), (-6, 6), (-100, 100)])
def test_an_elif_chain_of_breaks_with_stores_in_its_else(lo, hi):
    fast = autovec(elif_chain)
    for seed in range(3):
        x = _x(seed, 2000, 4).float()
        a, b = x.clone(), x.clone()
        assert fast(a, lo, hi) == elif_chain(b, lo, hi)
        assert torch.equal(a, b)
    assert _ran(fast)


def test_three_sites_on_one_line_each_and_the_index_after_the_loop():
    fast = autovec(three_sites)
    for x in (_x(1), _x(5), _x(2).clamp(-2, 2), torch.zeros(9), torch.full((40,), 3.0), _x(1)):
        assert fast(x) == three_sites(x)
    assert _ran(fast)


@pytest.mark.parametrize("lim", [0, 10, 3000, 10**6])
def test_a_python_condition_beside_a_tensor_one(lim):
    fast = autovec(fill_until)
    for seed in range(3):
        x = _x(seed, 3000, 3)
        a, b = torch.zeros(3000, dtype=torch.float64), torch.zeros(3000, dtype=torch.float64)
        assert torch.equal(fast(x, a, lim), fill_until(x, b, lim))
        assert torch.equal(a, b)


@pytest.mark.parametrize("t", [1.5, 2.5, 9.0])
def test_a_while_search_with_a_break_of_its_own(t):
    fast = autovec(search_while)
    for seed in range(3):
        x = _x(seed).float()
        assert fast(x, t) == search_while(x, t)
    x = _x(0).float()
    x[700] = 0
    assert fast(x, 9.0) == search_while(x, 9.0) == 700
    assert _ran(fast)


@pytest.mark.parametrize("t", [2.0, 7.0, 1e9])
def test_a_name_rebound_between_the_sites(t):
    fast = autovec(rebinds_between)
    for seed in range(3):
        x = _x(seed)
        assert fast(x, t) == pytest.approx(rebinds_between(x, t), rel=1e-12, abs=1e-12)
    assert _ran(fast)


@pytest.mark.parametrize("t", [1.0, 3.0, 100.0])
def test_gradients_up_to_either_stop(t):
    fast = autovec(grads)
    for seed in range(3):
        x = _x(seed, 500, 4).float()
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = fast(a, t), grads(b, t)
        got.backward()
        want.backward()
        assert torch.allclose(got, want, rtol=1e-5)
        assert torch.allclose(a.grad, b.grad)


def test_a_continue_beside_the_breaks_keeps_the_loop():
    fast = autovec(with_continue)
    x = _x(3)
    assert fast(x) == with_continue(x)
    assert "continue" in explain(fast, x).loops[0].reason or explain(fast, x).path == "python"


def test_explain_shows_every_condition():
    text = str(explain(autovec(two_sites), _x(0), 4.0))
    assert "`(x[i] < -2.5) or v > t`" in text


def test_errors_of_the_stopping_iteration_are_the_loops():
    def indexed(x, idx):
        s = 0.0
        for i in range(idx.shape[0]):
            if idx[i] < 0:
                break
            if x[idx[i]] > 2.0:          # an index past the end raises, as in the loop
                break
            s += x[idx[i]].item()
        return s

    fast = autovec(indexed)
    x = _x(4, 100)
    for idx in (torch.arange(100), torch.tensor([3, 5, -1, 500]), torch.tensor([3, 5, 500, -1])):
        got, want = outcome(fast, x, idx), outcome(indexed, x, idx)
        if isinstance(want, float):
            assert got == pytest.approx(want, rel=1e-12)
        else:
            assert got == want
