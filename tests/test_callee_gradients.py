"""A helper the loop calls may reach a tensor that requires grad through what it calls: a
function of another module (`mod.fn(v)`), a class attribute (`Cls.f(v)`), a partial, a bound
method, or a lambda or nested function of its own. Where that tensor goes through an operation
whose derivative can be infinite (sqrt at 0), one batched call would add the iterations'
gradients before multiplying, where the loop multiplies each (inf * 0 gives NaN per row, in the
loop; the batch gives inf): the loop runs (runtime._reach_walk, _callable_reaches). Found by a
probe: each of these gave the loop's NaN gradient as inf before (an object with `__slots__`,
`getattr` on a class or module, a module's forward calling its own methods: the third probe).
Each test compares gradients with the loop, with the tensor requiring grad, and checks that
without it the loop vectorizes."""
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

    def root_scaled(self, v):
        return torch.sqrt(v) * self.w


class Cls:
    CW = torch.zeros(3)

    @classmethod
    def cm(cls, v):
        return v * torch.sqrt(cls.CW)


class SelfCalls:
    def __init__(self, w):
        self.w = w

    def compute(self, v):
        return self.inner(v) + 1.0

    def inner(self, v):
        return v * torch.sqrt(self.w)


class NoParams(torch.nn.Module):
    def forward(self, v):
        return v * torch.sqrt(V)


class Slotted:
    __slots__ = ("w",)

    def __init__(self, w):
        self.w = w

    def compute(self, v):
        return v * torch.sqrt(self.w)


class ModuleSelfCalls(torch.nn.Module):
    def forward(self, v):
        return self.helper(v) + 1.0

    def helper(self, v):
        return v * torch.sqrt(V)


SLOTTED = Slotted(V)
MODULE_SELF_CALLS = ModuleSelfCalls()
SELF_CALLS = SelfCalls(V)
NO_PARAMS = NoParams()
PARTIAL = functools.partial(_global_sqrt)
HOLDER = Holder(V)
METHOD = HOLDER.compute
ROOT_SCALED = HOLDER.root_scaled
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


def via_module_attribute(v):
    return v * torch.sqrt(reach_helpers.W)      # (read, not called: `mod.W`)


def via_class_attribute(v):
    return v * torch.sqrt(Cls.CW)


def via_classmethod(v):
    return Cls.cm(v) + 1.0


def via_self_calls(v):
    return SELF_CALLS.compute(v)


def via_slots(v):
    return SLOTTED.compute(v) + 1.0


def via_getattr_class(v):
    return v * torch.sqrt(getattr(Cls, "CW"))


def via_getattr_module(v):
    return v * torch.sqrt(getattr(reach_helpers, "W"))


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


def rows_module_attribute(x):
    return torch.stack([via_module_attribute(r) for r in x])


def rows_class_attribute(x):
    return torch.stack([via_class_attribute(r) for r in x])


def rows_classmethod(x):
    return torch.stack([via_classmethod(r) for r in x])


def rows_self_calls(x):
    return torch.stack([via_self_calls(r) for r in x])


def rows_no_params(x):
    return torch.stack([NO_PARAMS(r) for r in x])


def rows_slots(x):
    return torch.stack([via_slots(r) for r in x])


def rows_getattr_class(x):
    return torch.stack([via_getattr_class(r) for r in x])


def rows_getattr_module(x):
    return torch.stack([via_getattr_module(r) for r in x])


def rows_module_self_calls(x):
    return torch.stack([MODULE_SELF_CALLS(r) for r in x])


def rows_lambda(x):
    return torch.stack([via_lambda(r) for r in x])


def rows_inner_def(x):
    return torch.stack([via_inner_def(r) for r in x])


LOOPS = [(rows_module, "module"), (rows_class, "class"), (rows_partial, "partial"), (rows_method, "method"), (rows_attribute_method, "attribute_method"),
         (rows_module_attribute, "module_attribute"),
         (rows_class_attribute, "class_attribute"), (rows_classmethod, "classmethod"),
         (rows_self_calls, "self_calls"), (rows_no_params, "module_without_parameters"), (rows_slots, "slots"), (rows_getattr_class, "getattr_class"),
         (rows_getattr_module, "getattr_module"), (rows_module_self_calls, "module_self_calls"), (rows_lambda, "lambda"), (rows_inner_def, "inner")]


@pytest.fixture
def tensors(monkeypatch):
    """V and reach_helpers.W: zeros (sqrt's derivative there is infinite), shared by the holder."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    v = torch.zeros(3)
    monkeypatch.setattr(reach_helpers, "W", v)
    monkeypatch.setitem(globals(), "V", v)
    monkeypatch.setattr(HOLDER, "w", v)
    monkeypatch.setattr(SELF_CALLS, "w", v)
    monkeypatch.setattr(SLOTTED, "w", v)
    monkeypatch.setattr(Cls, "CW", v)
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


def taken_side_calls_a_method(x):
    total = torch.zeros(3)
    for r in x:
        if r.sum() > 0:
            total = total + ROOT_SCALED(r)       # (a bound method: its object is not a free value)
        else:
            total = total + r * 2
    return total


def test_a_branch_whose_side_calls_a_method_reaching_grad_keeps_the_loop(tensors):
    """Under grad, the batch of `where` computes both sides on every row: the skipped rows'
    sqrt of the holder's tensor sends NaN into its gradient, where the loop's is finite (found
    by a probe: callees that are not plain functions were not looked into there)."""
    tensors.data.fill_(1.0)
    tensors.requires_grad_(True)
    x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, -2.0, -4.0], [2.0, 1.0, 1.0], [-3.0, 1.0, -1.0]])
    f = autovec(taken_side_calls_a_method)
    for _ in range(3):
        taken_side_calls_a_method(x).sum().backward()
        want, tensors.grad = tensors.grad.clone(), None
        f(x).sum().backward()
        got, tensors.grad = tensors.grad.clone(), None
        assert torch.isfinite(want).all()
        torch.testing.assert_close(got, want)


class _WeightBehindProperty:
    def __init__(self, w):
        self._w = w

    @property
    def w(self):
        return self._w


HELD = _WeightBehindProperty(torch.ones(3))


def by_held_weight(v):
    return v * HELD.w


def held_rows(x):
    out = []
    for i in range(x.shape[0]):
        out.append(by_held_weight(x[i]))
    return torch.stack(out)


def test_a_tensor_behind_a_property_counts_as_reachable(monkeypatch):
    # the gradient walk reads no property (its getter is the user's code: probeE), so a helper that
    # reads one is taken to reach a tensor that may require grad, as one without source is
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    global HELD
    x = torch.randn(6, 3)
    HELD = _WeightBehindProperty(torch.randn(3, requires_grad=True))
    want = held_rows(x)
    got = autovec(held_rows)(x)
    torch.testing.assert_close(got, want)
    g1, = torch.autograd.grad(want.sum(), HELD._w)
    g2, = torch.autograd.grad(got.sum(), HELD._w)
    torch.testing.assert_close(g2, g1)
