"""Calls that write into their argument without a `_` in their name: `inplace=True` (functional
and module activations), `out=`, and an `@torch.enable_grad()` helper under `no_grad`. The loop
writes each row of the caller's tensor once; the first call's attempts ran the body several
times on them (found by the code-structure probe: -0.1 became -1e-6). Such calls keep the loop;
an inplace activation inside a module, on the module's own intermediate values, does not."""
import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def apply_each(act, x):
    out = []
    for i in range(x.shape[0]):
        out.append(act(x[i]))
    return torch.stack(out)


def elu_in_place(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = F.elu(x[i], inplace=True) * 2
    return out


def leaky_statement(x):
    for row in x:
        F.leaky_relu(row, 0.1, inplace=True)
    return x


def triple(v):
    return torch.mul(v, 3, out=v)


def triples(x):
    out = []
    for i in range(x.shape[0]):
        out.append(triple(x[i]))
    return torch.stack(out)


def mul_out(x):
    for i in range(x.shape[0]):
        torch.mul(x[i], 3, out=x[i])
    return x


class ActLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.LeakyReLU(0.1, inplace=True)
        self.lin = nn.Linear(2, 2)

    def forward(self, v):
        return self.act(self.lin(v))


class ActFirst(ActLast):
    def forward(self, v):
        return self.lin(self.act(v))


def _same(fn, make, calls=3):
    g = autovec(fn)
    for _ in range(calls):
        base = make()
        a, b = ([v.clone() if isinstance(v, torch.Tensor) else v for v in base] for _ in range(2))
        want, got = fn(*a), g(*b)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        for u, v in zip(a, b):
            if isinstance(u, torch.Tensor):
                assert torch.equal(u, v)          # the caller's tensors, written as the loop writes them
    return g


@pytest.mark.parametrize("act", [nn.LeakyReLU(0.1, inplace=True), nn.ELU(inplace=True), nn.SiLU(inplace=True),
                                 nn.Sequential(nn.LeakyReLU(0.1, inplace=True), nn.Hardtanh(inplace=True))])
def test_an_inplace_activation_module_keeps_the_loop(act):
    g = _same(apply_each, lambda: (act, -torch.ones(3, 2)))
    assert ran_modes(g) == set()
    assert "inplace=True" in explain(g, act, -torch.ones(3, 2)).loops[0].reason or \
        explain(g, act, -torch.ones(3, 2)).path == "python"


@pytest.mark.parametrize("fn", [elu_in_place, leaky_statement, triples, mul_out])
def test_inplace_and_out_arguments_keep_the_loop(fn):
    g = _same(fn, lambda: (-torch.ones(3, 2),))
    assert ran_modes(g) == set()


def test_an_inplace_activation_on_a_modules_own_values_still_vectorizes():
    """Inside a Sequential after a Linear, or in a custom forward on its own intermediate value,
    the activation writes nothing the caller holds; on the forward's input it does."""
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True))
    g = _same(apply_each, lambda: (seq, torch.randn(5, 2)))
    assert ran_modes(g)
    inner = ActLast()
    g = _same(apply_each, lambda: (inner, torch.randn(5, 2)))
    assert ran_modes(g)
    outer = ActFirst()
    g = _same(apply_each, lambda: (outer, -torch.ones(5, 2)))
    assert ran_modes(g) == set()


@torch.enable_grad()
def scaled(v, w):
    return v * w


def scaled_rows(x, w):
    out = []
    for i in range(x.shape[0]):
        out.append(scaled(x[i], w))
    return torch.stack(out)


def test_a_stack_under_no_grad_has_no_gradient_even_from_a_grad_enabled_helper():
    x, w = torch.randn(5, 4), torch.randn(4, requires_grad=True)
    g = autovec(scaled_rows)
    for _ in range(3):
        with torch.no_grad():
            want, got = scaled_rows(x, w), g(x, w)
        assert want.requires_grad is got.requires_grad is False and got.grad_fn is None
        torch.testing.assert_close(got, want)
    assert ran_modes(g)


class Normalizer(nn.Module):
    def _helper(self, v):
        return (v - v.mean()) * 2

    @autovec
    def forward(self, x):
        out = []
        for i in range(x.shape[0]):
            out.append(self._helper(x[i]))
        return torch.stack(out)


def test_a_helper_method_of_a_module_with_an_autovec_forward_vectorizes():
    """The module's purity check reads its forward: an @autovec forward is its original
    function (it said "no Python forward to check" and kept the loop)."""
    m, x = Normalizer(), torch.randn(50, 8)
    torch.testing.assert_close(m(x), Normalizer.forward.__wrapped__(m, x))
    assert explain(m.forward, x).path == "vectorized"
