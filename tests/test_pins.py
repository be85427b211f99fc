"""Pins (autovec/pins.py): a helper's purity and gradient verdicts are kept while everything
their walks read is the same object. Every rebinding those walks would see must still be seen
on a steady call (the express and its lane ask the pin first): a global or closure name the
helper calls, an attribute it calls through, a nested helper's names, its code and defaults,
and a tensor's requires_grad, which no identity shows. Each test compares the decorated
function with the loop after the change, on calls made after the steady state."""
import functools
import gc
import sys
import types

import pytest
import torch

from autovec import autovec, pins
from autovec import purity
from autovec import runtime as rt_mod

LOG = []
W = torch.randn(3)
ns = types.SimpleNamespace()


@pytest.fixture
def vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def act(v):
    return torch.tanh(v)


def noisy(v):
    LOG.append(1)
    return torch.tanh(v)


def gate(v):
    return v * act(v)


def outer(v):
    return gate(v) + 1.0


def via_ns(v):
    return ns.f(v) * 2.0


def weighted(v):
    return torch.sqrt(W * W + v * v)


def with_default(v, scale=2.0):
    return v * scale


def gated(x):
    return torch.stack([gate(r) for r in x])


def nested(x):
    return torch.stack([outer(r) for r in x])


def through_ns(x):
    return torch.stack([via_ns(r) for r in x])


def weighted_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = weighted(x[i])
    return out


def defaulted(x):
    return torch.stack([with_default(r) for r in x])


def _steady(f, *args, calls=30):
    for _ in range(calls):
        f(*args)


@pytest.mark.parametrize("loop, helper", [(gated, gate), (nested, outer)])
def test_a_global_the_helper_calls_rebound_to_an_impure_one_is_seen(loop, helper, vectorize, monkeypatch):
    f = autovec(loop)
    x = torch.randn(6, 3)
    _steady(f, x)
    assert pins.held(helper) is not None
    monkeypatch.setattr(sys.modules[__name__], "act", noisy)
    LOG.clear()
    torch.testing.assert_close(f(x), loop(x))
    # the loop's effects, once per row, for each of the two calls
    assert len(LOG) == 2 * x.shape[0]
    monkeypatch.undo()
    LOG.clear()
    torch.testing.assert_close(f(x), loop(x))
    assert len(LOG) == 0


def test_an_attribute_the_helper_calls_through_is_seen(vectorize, monkeypatch):
    monkeypatch.setattr(ns, "f", act, raising=False)
    f = autovec(through_ns)
    x = torch.randn(6, 3)
    _steady(f, x)
    assert purity.why_impure(via_ns) is None
    ns.f = noisy
    LOG.clear()
    torch.testing.assert_close(f(x), through_ns(x))
    assert len(LOG) == 2 * x.shape[0]


def test_a_closure_the_helper_calls_is_seen(vectorize):
    def make():
        fn = act

        def helper(v):
            return fn(v) + 1.0

        def set_fn(new):
            nonlocal fn
            fn = new

        def rows(x):
            return torch.stack([helper(r) for r in x])
        return rows, set_fn
    rows, set_fn = make()
    f = autovec(rows)
    x = torch.randn(6, 3)
    _steady(f, x)
    set_fn(noisy)
    LOG.clear()
    torch.testing.assert_close(f(x), rows(x))
    assert len(LOG) == 2 * x.shape[0]


def test_a_changed_code_or_default_is_seen(vectorize, monkeypatch):
    f = autovec(defaulted)
    x = torch.randn(6, 3)
    _steady(f, x)
    monkeypatch.setattr(with_default, "__defaults__", (-3.0,))
    torch.testing.assert_close(f(x), defaulted(x))
    monkeypatch.setattr(with_default, "__code__", noisy.__code__)
    LOG.clear()
    torch.testing.assert_close(f(x), defaulted(x))
    assert len(LOG) == 2 * x.shape[0]


def test_a_global_tensor_that_starts_to_require_grad_is_seen(vectorize, monkeypatch):
    """The helper puts the global through sqrt (an infinite derivative at 0): once it requires
    grad, the batch would add every iteration's gradient before multiplying, so the loop runs
    (runtime._callee_gradients). Its requires_grad changes without any rebinding."""
    w = torch.tensor([0.0, 1.0, 2.0])
    monkeypatch.setattr(sys.modules[__name__], "W", w)
    f = autovec(weighted_rows)
    x = torch.randn(6, 3)
    _steady(f, x)
    assert pins.held(weighted) is not None
    w.requires_grad_(True)
    got = f(x)
    got.sum().backward()
    g_fast = w.grad.clone()
    w.grad = None
    want = weighted_rows(x)
    want.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g_fast, w.grad, equal_nan=True)
    assert torch.isnan(g_fast[0]) == torch.isnan(w.grad[0])


def test_a_pin_is_checked_against_what_the_walks_read():
    # (the pin of a helper just found pure; its verdicts; every rebinding the walks see undoes it)
    assert purity.why_impure(gate) is None
    p = pins.held(gate)
    assert p is not None and p.pure and p.inert
    assert rt_mod._reaches_grad(gate) is False
    assert pins.quiet(gate, False)
    saved = sys.modules[__name__].act
    try:
        sys.modules[__name__].act = noisy
        assert pins.held(gate) is None
        assert purity.why_impure(gate) is not None
    finally:
        sys.modules[__name__].act = saved
    assert purity.why_impure(gate) is None


def test_a_helper_that_reads_a_tensor_is_pinned_for_purity_only():
    assert purity.why_impure(weighted) is None
    p = pins.held(weighted)
    assert p is not None and p.pure and not p.inert
    assert not pins.quiet(weighted, False)


def test_a_helper_rebound_on_every_call_stops_being_pinned(monkeypatch):
    def h(v):
        return act(v) * k

    for i in range(pins._REBUILDS + 3):
        monkeypatch.setitem(h.__globals__, "k", float(i))
        assert purity.why_impure(h) is None
    assert pins.held(h) is None
    assert pins._pins[id(h)].check is None


def test_a_pin_keeps_neither_its_helper_nor_a_tensor_alive(monkeypatch):
    import weakref
    t = torch.randn(3)
    monkeypatch.setattr(sys.modules[__name__], "W", t)
    assert purity.why_impure(weighted) is None and pins.held(weighted) is not None
    gone = weakref.ref(t)
    sys.modules[__name__].W = torch.randn(3)     # (monkeypatch restores the first W)
    del t
    gc.collect()
    assert gone() is None

    def make():
        def h(v):
            return act(v) + 1.0
        return h
    h = make()
    assert purity.why_impure(h) is None and pins.held(h) is not None
    key = id(h)
    purity._parsed.pop(h.__code__, None)    # (the source cache keeps the first function it parsed)
    del h
    gc.collect()
    assert key not in pins._pins


def test_every_value_the_walks_read_undoes_the_pin(monkeypatch):
    """Unit level: each kind of value a pin records, changed, makes it fail (the walks would read
    the new value): defaults, keyword defaults, code, a closure's contents, a global, a global
    the code names as an attribute only, a builtin the helper calls."""
    def make():
        k = 1.0

        def h(v, s=2.0):
            return abs(act(v)) * s + k

        def set_k(new):
            nonlocal k
            k = new
        return h, set_k
    h, set_k = make()

    def fresh():
        assert purity.why_impure(h) is None and rt_mod._reaches_grad(h) is False
        p = pins.held(h)
        assert p is not None and p.pure and p.inert
        pins._pins[id(h)].rebuilds = 0

    fresh()
    monkeypatch.setattr(h, "__defaults__", (torch.ones(1, requires_grad=True),))
    assert pins.held(h) is None
    assert purity.why_impure(h) is None and pins.held(h) is not None and not pins.held(h).inert
    monkeypatch.undo()
    fresh()
    set_k(torch.ones(1, requires_grad=True))
    assert pins.held(h) is None
    set_k(1.0)
    fresh()
    monkeypatch.setattr(h, "__code__", h.__code__.replace())     # (an equal code object, not the same one)
    assert pins.held(h) is None
    monkeypatch.undo()
    fresh()
    monkeypatch.setattr(sys.modules[__name__], "tanh", object(), raising=False)   # (a name act's code uses)
    assert pins.held(h) is None
    monkeypatch.undo()
    fresh()
    monkeypatch.setattr(sys.modules["builtins"], "abs", lambda v: v)
    assert pins.held(h) is None
    monkeypatch.undo()
    fresh()


NET = torch.nn.Sequential(torch.nn.Linear(3, 3)).eval()


def through_net(v):
    return NET(v) + 1.0


def net_rows(x):
    return torch.stack([through_net(r) for r in x])


def inner_call(v):
    return act(v) * 2.0


PART = functools.partial(inner_call)


def through_partial(v):
    return PART(v) + 1.0


def partial_rows(x):
    return torch.stack([through_partial(r) for r in x])


def test_a_helper_calling_something_with_state_is_walked_on_every_call(vectorize, monkeypatch):
    """A module (hooks, training mode) or a partial of a Python function (what that function
    calls) has a purity verdict the pin cannot see: the helper that calls it is pinned, never as
    pure, however many calls find it so (found by a probe: a second pure verdict marked it pure,
    and a hook registered later ran once a call)."""
    f, g = autovec(net_rows), autovec(partial_rows)
    x = torch.randn(6, 3)
    _steady(f, x)
    _steady(g, x)
    for helper in (through_net, through_partial):
        p = pins.held(helper)
        assert p is not None and not p.pure
    handle = NET.register_forward_hook(lambda m, i, o: LOG.append(1))
    try:
        LOG.clear()
        torch.testing.assert_close(f(x), net_rows(x))
        assert len(LOG) == 2 * x.shape[0]
    finally:
        handle.remove()
    monkeypatch.setattr(sys.modules[__name__], "act", noisy)
    LOG.clear()
    torch.testing.assert_close(g(x), partial_rows(x))
    assert len(LOG) == 2 * x.shape[0]


# ----------------------------------------------------------------------------- module stamps
# (stop 31) a model's verdicts (purity, its layer-by-layer form, the gradient walk's code part)
# kept while its tree is the same: every change those walks would see must still be seen on a
# steady call


def _rows(model, x):
    out = []
    for i in range(x.shape[0]):
        out.append(model(x[i]))
    return torch.stack(out)


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                               torch.nn.Linear(4, 3), torch.nn.Softmax(dim=-1)).eval()


def _same_as_loop(f, model, x, rng=True):
    torch.manual_seed(3)
    want = _rows(model, x)
    torch.manual_seed(3)
    got = f(model, x)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("change", ["train", "softmax_dim", "replace_layer", "inplace", "add_layer",
                                    "new_weight_shape", "parametrize", "hook"])
def test_every_change_to_a_stamped_tree_is_seen(change, vectorize):
    model, x = _net(), torch.randn(6, 4)
    f = autovec(_rows)
    _steady(f, model, x, calls=5)
    assert pins.stamped(model) is not None and pins.stamped(model).get("pure")
    if change == "train":
        model.train()                       # (Dropout draws: the loop, one draw per row)
    elif change == "softmax_dim":
        model[4].dim = 0                    # (across the rows it is given: no row-by-row form)
    elif change == "replace_layer":
        model[1] = torch.nn.Softmax(dim=0)
    elif change == "inplace":
        model[0] = torch.nn.ReLU(inplace=True)   # (writes into the caller's rows)
    elif change == "add_layer":
        model.append(torch.nn.Softmax(dim=0))
    elif change == "new_weight_shape":
        model[3].weight = torch.nn.Parameter(torch.randn(3, 4) * 9)
    elif change == "parametrize":
        torch.nn.utils.parametrize.register_parametrization(model[0], "weight", _Doubled())
    elif change == "hook":
        model[3].register_forward_pre_hook(lambda m, a: LOG.append(1))
    LOG.clear()
    for _ in range(3):
        _same_as_loop(f, model, x)
    if change == "hook":
        assert len(LOG) == 2 * 3 * 6        # (the loop's and autovec's calls, once per row each)


class _Doubled(torch.nn.Module):
    def forward(self, w):
        return w * 2


def test_a_stamp_holds_no_tensor_alive_and_custom_classes_are_not_stamped(vectorize):
    model, x = _net(), torch.randn(6, 4)
    f = autovec(_rows)
    _steady(f, model, x, calls=3)
    old = pins.weakref.ref(model[0].weight)
    model[0].weight = torch.nn.Parameter(torch.randn(4, 4))
    gc.collect()
    assert old() is None
    _same_as_loop(f, model, x)

    class Mine(torch.nn.Module):
        def forward(self, v):
            return v * 2
    assert pins.stamped(Mine()) is None
    assert pins.stamped(torch.nn.Sequential(torch.nn.Linear(2, 2), Mine())) is None


def test_a_tree_that_changes_on_every_call_stops_being_stamped(vectorize):
    model, x = _net(), torch.randn(6, 4)
    f = autovec(_rows)
    for k in range(pins._REBUILDS + 3):
        model[4].dim = -1 if k % 2 else 0     # (the same meaning on a row, another attribute value)
        _same_as_loop(f, model, x)
    assert pins.stamped(model) is None
    _same_as_loop(f, model, x)
