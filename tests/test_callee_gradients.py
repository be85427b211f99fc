"""A helper the loop calls may reach a tensor that requires grad through what it calls: a
function of another module (`mod.fn(v)`), a class attribute (`Cls.f(v)`), a partial, a bound
method, or a lambda or nested function of its own. Where that tensor goes through an operation
whose derivative can be infinite (sqrt at 0), one batched call would add the iterations'
gradients before multiplying, where the loop multiplies each (inf * 0 gives NaN per row, in the
loop; the batch gives inf): the loop runs (runtime._reach_walk, _callable_reaches). Found by a
probe: each of these gave the loop's NaN gradient as inf before. Each test compares gradients
with the loop, with the tensor requiring grad, and checks that without it the loop vectorizes."""
import functools

import pytest
import torch

import reach_helpers
from autovec import autovec, explain

V = torch.zeros(3)


def _global_sqrt(v):
    return v * torch.sqrt(V)


class Holder:
    f = staticmethod(_global_sqrt)

    def __init__(self, w):
        self.w = w

    def compute(self, v):
        return v * torch.sqrt(self.w)


PARTIAL = functools.partial(_global_sqrt)
HOLDER = Holder(V)
METHOD = HOLDER.compute
Holder.bound = METHOD        # (a bound method reached through a class attribute only)


def via_module(v):
    return reach_helpers.scaled(v) + 1.0


def via_class(v):
    return Holder.f(v) + 1.0


def via_partial(v):
    return PARTIAL(v) + 1.0


def via_method(v):
    return METHOD(v) + 1.0


def via_attribute_method(v):
    return Holder.bound(v) + 1.0


def via_lambda(v):
    f = lambda t: t * torch.sqrt(V)     # noqa: E731
    return f(v)


def via_inner_def(v):
    def f(t):
        return t * torch.sqrt(V)
    return f(v)


# (the loops, defined at module level so that their source is readable)
def rows_module(x):
    return torch.stack([via_module(r) for r in x])


def rows_class(x):
    return torch.stack([via_class(r) for r in x])


def rows_partial(x):
    return torch.stack([via_partial(r) for r in x])


def rows_method(x):
    return torch.stack([via_method(r) for r in x])


def rows_attribute_method(x):
    return torch.stack([via_attribute_method(r) for r in x])


def rows_lambda(x):
    return torch.stack([via_lambda(r) for r in x])


def rows_inner_def(x):
    return torch.stack([via_inner_def(r) for r in x])


LOOPS = [(rows_module, "module"), (rows_class, "class"), (rows_partial, "partial"), (rows_method, "method"), (rows_attribute_method, "attribute_method"),
         (rows_lambda, "lambda"), (rows_inner_def, "inner")]


@pytest.fixture
def tensors(monkeypatch):
    """V and reach_helpers.W: zeros (sqrt's derivative there is infinite), shared by the holder."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    v = torch.zeros(3)
    monkeypatch.setattr(reach_helpers, "W", v)
    monkeypatch.setitem(globals(), "V", v)
    monkeypatch.setattr(HOLDER, "w", v)
    return v


@pytest.mark.parametrize("loop, how", LOOPS, ids=[h for _, h in LOOPS])
def test_a_tensor_that_requires_grad_reached_through_a_callee_keeps_the_loop(loop, how, tensors):
    x = torch.tensor([[0.0, 1.0, 2.0], [1.0, -1.0, 0.0]])
    f = autovec(loop)
    for _ in range(3):       # (without grad: vectorized, and the steady state's pins made)
        torch.testing.assert_close(f(x), loop(x), equal_nan=True)
    assert explain(f, x).path == "vectorized"
    tensors.requires_grad_(True)
    for _ in range(2):
        loop(x).sum().backward()
        want, tensors.grad = tensors.grad.clone(), None
        f(x).sum().backward()
        got, tensors.grad = tensors.grad.clone(), None
        torch.testing.assert_close(got, want, equal_nan=True)
    assert explain(f, x).path == "python"
