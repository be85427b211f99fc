"""Autograd seen from outside the loop (found by the autograd probe): the result the loop
returns is memory of its own (torch.stack copies, a preallocated output is written into), so an
in-place change of it before backward is fine there; a batch that autograd saved (exp's result,
a product's operand) raised "modified by an inplace operation". Forward-mode AD (dual tensors)
follows the batched form's rules through ties (running maximum, median): such calls keep the
loop. Also torch.tensor of `.item()` numbers as a batched body (it warned and kept the loop)."""
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def exp_rows(x):
    res = []
    for i in range(x.shape[0]):
        res.append(torch.exp(x[i]))
    return torch.stack(res)


def tanh_into(x, W, b):
    out = torch.zeros(x.shape[0], W.shape[0])
    for i in range(x.shape[0]):
        out[i] = torch.tanh(W @ x[i] + b)
    return out


def running_exp(x):
    s = torch.zeros(x.shape[1])
    res = []
    for i in range(x.shape[0]):
        s = s + x[i]
        res.append(s.exp())
    return torch.stack(res)


@pytest.mark.parametrize("fn, make", [
    (exp_rows, lambda: (torch.randn(4, 3, requires_grad=True),)),
    (tanh_into, lambda: (torch.randn(4, 3), torch.randn(2, 3, requires_grad=True), torch.randn(2))),
    (running_exp, lambda: (torch.randn(4, 3, requires_grad=True),)),
])
def test_an_in_place_change_of_the_result_before_backward(fn, make):
    g = autovec(fn)
    for _ in range(3):
        args = make()
        grads = []
        for h in (fn, g):
            out = h(*args)
            out.mul_(2)                      # fine in the loop: its result is a copy
            leaves = [a for a in args if a.requires_grad]
            grads.append(torch.autograd.grad(out.sum(), leaves))
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b)
    assert ran_modes(g)


def running_max(x):
    m = x[0]
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        m = torch.maximum(m, x[i])
        out[i] = m
    return out


def final_max(x):
    m = x[0]
    for i in range(x.shape[0]):
        m = torch.maximum(m, x[i])
    return m


def medians(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i].median()
    return out


@pytest.mark.parametrize("fn, x, t", [
    (running_max, torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.tensor([1.0, 2.0, 3.0, 4.0])),
    (final_max, torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.tensor([1.0, 2.0, 3.0, 4.0])),
    (medians, torch.tensor([[2.0, 2.0, 2.0], [1.0, 1.0, 5.0]]), torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])),
])
def test_dual_tensors_keep_the_loops_tangents(fn, x, t):
    g = autovec(fn)
    g(x)
    g(x)                                     # (the steady state first, without dual tensors)
    with fwAD.dual_level():
        want = fwAD.unpack_dual(fn(fwAD.make_dual(x.clone(), t))).tangent
        got = fwAD.unpack_dual(g(fwAD.make_dual(x.clone(), t))).tangent
    torch.testing.assert_close(got, want)


def item_tensors(x):
    res = []
    for i in range(x.shape[0]):
        res.append(torch.tensor(x[i].item()))
    return torch.stack(res)


def test_torch_tensor_of_an_item_is_a_batched_body_without_warnings():
    x = torch.tensor([1.5, 2.5, 3.5])
    g = autovec(item_tensors)
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # (torch.tensor of a tensor warns: it must not happen)
        for _ in range(3):
            got = g(x)
    want = item_tensors(x)
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert explain(g, x).path == "vectorized"
    ints = torch.tensor([3, -4, 5])
    assert torch.equal(g(ints), item_tensors(ints)) and g(ints).dtype == torch.int64
