"""A name bound inside an expression (`if (n := x[i].norm()) > 1:`) where the binding is the first
thing its statement evaluates: the binding as its own statement right before (analysis.hoist.
hoisted_walrus), the same evaluation order, and the loop planned as any other. Bindings elsewhere
keep the loop as written."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def elif_binding(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        if x[i].sum() > 2:
            out[i] = 1
        elif (m := x[i].max()) > 0.5:
            out[i] = m
    return out


def value_binding(x):
    s = 0.0
    for i in range(x.shape[0]):
        y = (v := x[i].abs()).sum() * 2
        s = s + y + v.max()
    return s


def read_after(x):
    for i in range(x.shape[0]):
        if (n := x[i].norm()) > 100:
            pass
    return n


def and_binding(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        if (m := x[i].mean()) > 0 and m < 0.5:
            out[i] = m * 2
    return out


def not_first(x):
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > (t := 0.5):
            out.append(x[i] * t)
        else:
            out.append(x[i] * 2)
    return torch.stack(out)


@pytest.mark.parametrize("fn", [elif_binding, value_binding, read_after, and_binding])
def test_first_bindings_vectorize(fn):
    fast = autovec(fn)
    for _ in range(3):
        x = torch.randn(30, 4)
        want, got = fn(x.clone()), fast(x.clone())
        torch.testing.assert_close(torch.as_tensor(got), torch.as_tensor(want), rtol=1e-5, atol=1e-5)
    e = explain(fast, torch.randn(30, 4))
    assert e.path == "vectorized"
    assert ":=" not in e.rewritten_source


def test_a_binding_that_is_not_first_keeps_the_loop():
    fast = autovec(not_first)
    x = torch.randn(30, 4)
    torch.testing.assert_close(fast(x), not_first(x))
    e = explain(fast, x)
    assert e.path == "python" and "binds a name inside an expression" in e.loops[0].reason


def _doubled(x):
    return x * 2


def ordered(x, log):
    def first(i):
        log.append(("first", i))
        return i % 3

    def second(n):
        log.append(("second", n))
        return n == 1
    y = torch.empty_like(x)
    for k in range(x.shape[0]):
        y[k] = x[k] * 3
    out = [y]
    for i in range(x.shape[0]):
        if (n := first(i)) and second(n):
            out.append(i)
        log.append(("after", n))
    return out, _doubled(x)


def method_object(x, log):
    y = torch.empty_like(x)
    for k in range(x.shape[0]):
        y[k] = x[k] * 3
    out = [y]
    for i in range(x.shape[0]):
        log.append(i)
        if (r := x[i]).sum() > 0:
            out.append(r.max().item())
    return out, r, _doubled(x)


@pytest.mark.parametrize("fn", [ordered, method_object])
def test_the_order_of_evaluation_is_the_loops(fn):
    # (the hoisted binding runs on the Python path too, in the rewritten function that the
    # vectorized first loop makes it run: the same calls in the same order)
    fast = autovec(fn)
    for _ in range(3):
        x = torch.randn(12, 3)
        log_a, log_b = [], []
        want, got = fn(x, log_a), fast(x, log_b)
        assert log_a == log_b
        assert str(want) == str(got)
    assert explain(fast, torch.randn(12, 3), []).path == "vectorized"


def statement_binding(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        (n := x[i].sum())
        out[i] = n * 2
    return out, n


def test_a_binding_as_a_statement_is_the_assignment_alone():
    fast = autovec(statement_binding)
    for _ in range(3):
        x = torch.randn(30, 4)
        for a, b in zip(statement_binding(x), fast(x)):
            torch.testing.assert_close(b, a)
    e = explain(fast, torch.randn(30, 4))
    assert e.path == "vectorized" and "    n\n" not in e.rewritten_source
    with pytest.raises(UnboundLocalError):
        fast(torch.randn(0, 4))


class _Loud:
    def __init__(self, log):
        self.log = log

    @property
    def check(self):
        self.log.append("lookup")
        return lambda v: v > 0


def callee_with_effects(x, log):
    obj = _Loud(log)
    y = torch.empty_like(x)
    for k in range(x.shape[0]):
        y[k] = x[k] * 3
    out = [y]
    for i in range(x.shape[0]):
        if obj.check(n := (log.append("value") or x[i].sum())):
            out.append(n)
    return out, _doubled(x)


def test_a_callee_looked_up_with_effects_keeps_its_order():
    # (`obj.check` runs its property before the argument: the binding is not the first thing)
    fast = autovec(callee_with_effects)
    x = torch.randn(6, 3)
    log_a, log_b = [], []
    assert str(callee_with_effects(x, log_a)) == str(fast(x, log_b))
    assert log_a == log_b and log_a[:2] == ["lookup", "value"]
    e = explain(fast, x, [])
    assert e.path == "vectorized" and "n :=" in e.rewritten_source


def _helper(v):
    return ("old", v)


def _rebind(v):
    global _helper
    _helper = lambda w: ("new", w)   # noqa: E731
    return v


def callee_rebound(xs, t):
    y = torch.empty_like(t)
    for i in range(t.shape[0]):
        y[i] = t[i] * 2 + 1
    out = []
    for x in xs:
        r = _helper(n := _rebind(x))
        out.append((r, n))
    return out, y


def test_a_binding_in_a_calls_argument_stays(monkeypatch):
    # (Python looks `_helper` up before the argument rebinds it: the first call is the old one)
    global _helper
    original = _helper
    fast = autovec(callee_rebound)
    for xs in ([1, 2, 3], [5], [7, 8]):
        _helper = original
        want = callee_rebound(xs, torch.arange(40.0))
        _helper = original
        got = fast(xs, torch.arange(40.0))
        assert str(want) == str(got) and want[0][0][0][0] == "old"
    _helper = original
