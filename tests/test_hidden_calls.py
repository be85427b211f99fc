"""Python code a loop runs without naming it: operators of a tensor subclass or of an outside
object, an iterator an outside value advances, helpers that change an argument, their own
attributes or a module imported inside them, and autocast's cast of a tensor that requires grad.
The loop runs such code once per iteration; a batch would run it once, or not at all, so each
keeps the loop (probeM). Every test compares with the loop itself, the same number of calls
included, and forces the vectorized path where it can (AUTOVEC_MIN_TRIP=1)."""
from __future__ import annotations

import dataclasses
import heapq  # noqa: F401  (the helper below imports it again inside its body)
import itertools

import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _forced(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


class Saturating(torch.Tensor):
    def __add__(self, other):
        return torch.Tensor.__add__(self, other).clamp(-1, 1)
    __radd__ = __add__


class Logged(torch.Tensor):
    writes = 0

    def __setitem__(self, k, v):
        Logged.writes += 1
        return torch.Tensor.__setitem__(self, k, v)


def running(x):
    s = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        s = x[i] + s
    return s


def copy_rows(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
    return out


def test_a_subclass_with_its_own_operator_keeps_the_loop():
    f = autovec(running)
    for _ in range(3):
        x = torch.tensor([[0.9], [0.9], [-0.9], [-0.9]] * 5).as_subclass(Saturating)
        assert torch.equal(f(x.clone()), running(x.clone()))
    assert "Saturating" in explain(f, x).loops[0].reason or explain(f, x).path == "python"


def test_a_subclass_written_into_with_its_own_setitem_keeps_the_loop():
    f = autovec(copy_rows)
    x = torch.randn(10, 3)
    for _ in range(3):
        Logged.writes = 0
        want = copy_rows(x, torch.zeros(10, 3).as_subclass(Logged))
        n_loop = Logged.writes
        Logged.writes = 0
        got = f(x, torch.zeros(10, 3).as_subclass(Logged))
        assert torch.equal(got, want) and Logged.writes == n_loop == 10


def test_parameters_still_vectorize():
    f = autovec(running)
    x = torch.nn.Parameter(torch.randn(50, 4), requires_grad=False)
    torch.testing.assert_close(f(x), running(x))
    assert explain(f, x).path == "vectorized"


def one_from(x, out, it):
    for i in range(x.shape[0]):
        out[i] = x[i] * sum(itertools.islice(it, 1))
    return out


def test_an_iterator_read_by_the_body_keeps_the_loop():
    f = autovec(one_from)
    for _ in range(3):
        it1, it2 = iter(range(100)), iter(range(100))
        want = one_from(torch.ones(8, 2), torch.zeros(8, 2), it1)
        got = f(torch.ones(8, 2), torch.zeros(8, 2), it2)
        assert torch.equal(got, want) and next(it1) == next(it2) == 8


class Ramp:
    """Each use gives the next factor."""

    def __init__(self):
        self.calls = 0

    def __rmul__(self, other):
        self.calls += 1
        return other * self.calls


def scaled(x, out, o):
    for i in range(x.shape[0]):
        out[i] = x[i] * o
    return out


def test_an_outside_object_with_its_own_operator_keeps_the_loop():
    f = autovec(scaled)
    for _ in range(3):
        a, b = Ramp(), Ramp()
        want = scaled(torch.ones(12, 2), torch.zeros(12, 2), a)
        got = f(torch.ones(12, 2), torch.zeros(12, 2), b)
        assert torch.equal(got, want) and a.calls == b.calls == 12


@dataclasses.dataclass
class Cfg:
    scale: float = 2.0


def from_config(x, out, cfg):
    for i in range(x.shape[0]):
        out[i] = x[i] * cfg.scale
    return out


def test_a_dataclass_config_still_vectorizes():
    f = autovec(from_config)
    x = torch.randn(40, 3)
    torch.testing.assert_close(f(x, torch.zeros(40, 3), Cfg()), from_config(x, torch.zeros(40, 3), Cfg()))
    assert explain(f, x, torch.zeros(40, 3), Cfg()).path == "vectorized"


class Counter:
    """A stateful factor read by a method of the object the loop calls."""

    def __init__(self):
        self.t = 0

    def next_factor(self):
        self.t += 1
        return float(self.t)

    def apply(self, v):
        return v * self.next_factor()


def through_method(x, s):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = s.apply(x[i])
    return out


def test_a_method_calling_a_stateful_method_of_its_object_keeps_the_loop():
    # (`self.next_factor()` inside `s.apply`: checked as the object's own method, which writes
    # `self.t`; probeN)
    f = autovec(through_method)
    for _ in range(3):
        a, b = Counter(), Counter()
        assert torch.equal(f(torch.ones(8, 2), b), through_method(torch.ones(8, 2), a)) and a.t == b.t == 8


def _numbers():
    yield from range(100)


GEN = _numbers()
RAMP = Ramp()


def _from_global(v):
    return v * sum(itertools.islice(GEN, 1))


def _times_global(v):
    return v * RAMP


def through_global_generator(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = _from_global(x[i])
    return out


def through_global_object(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = _times_global(x[i])
    return out


def test_a_helper_reading_an_outside_generator_or_object_keeps_the_loop():
    global GEN, RAMP
    f, g = autovec(through_global_generator), autovec(through_global_object)
    for _ in range(3):
        GEN = _numbers()
        want = through_global_generator(torch.ones(6, 2))
        after = next(GEN)
        GEN = _numbers()
        assert torch.equal(f(torch.ones(6, 2)), want) and next(GEN) == after
        RAMP = Ramp()
        want = through_global_object(torch.ones(6, 2))
        RAMP = Ramp()
        assert torch.equal(g(torch.ones(6, 2)), want) and RAMP.calls == 6


class Normalizing(torch.utils.data.Dataset):
    """A Dataset (its class defines `__len__` and `__getitem__`) whose method reads attributes."""

    def __init__(self):
        self.data, self.mean, self.std = torch.randn(10, 3), 0.5, 2.0

    def __len__(self):
        return len(self.data)

    def __getitem__(self, k):
        return self.data[k]

    def normalize(self, x):
        out = torch.empty_like(x)
        for t in range(x.shape[0]):
            out[t] = (x[t] - self.mean) / self.std
        return out


def _scaled(v):
    import math
    return v * math.sqrt(2.0)


def through_math(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = _scaled(x[i])
    return out


def test_objects_read_only_through_attributes_and_pure_imports_still_vectorize():
    ds = Normalizing()
    f = autovec(Normalizing.normalize)
    x = torch.randn(20, 3)
    torch.testing.assert_close(f(ds, x), ds.normalize(x))
    assert explain(f, ds, x).path == "vectorized"
    g = autovec(through_math)
    torch.testing.assert_close(g(x), through_math(x))
    assert explain(g, x).path == "vectorized"


def _counted(v):
    _counted.calls = getattr(_counted, "calls", 0) + 1
    return v * 2


def through_counted(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = _counted(x[i])
    return out


def test_a_helper_setting_its_own_attribute_keeps_the_loop():
    f = autovec(through_counted)
    for _ in range(3):
        _counted.calls = 0
        through_counted(torch.ones(16, 3))
        n_loop = _counted.calls
        _counted.calls = 0
        f(torch.ones(16, 3))
        assert _counted.calls == n_loop == 16


def _pushed(v, h):
    import heapq
    heapq.heappush(h, 1)
    return v * 2


def through_push(x, h):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = _pushed(x[i], h)
    return out


def test_a_helper_importing_inside_its_body_keeps_the_loop():
    f = autovec(through_push)
    for _ in range(3):
        h1, h2 = [], []
        assert torch.equal(f(torch.ones(12, 2), h2), through_push(torch.ones(12, 2), h1))
        assert len(h1) == len(h2) == 12


def rows_times(x, w):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] @ w)
    return torch.stack(out)


def test_autocast_with_a_weight_that_requires_grad_keeps_the_loop():
    f = autovec(rows_times)
    torch.manual_seed(0)
    x0, w0, g = torch.randn(24, 5), torch.randn(5, 5), torch.randn(24, 5)
    grads = []
    for fn in (rows_times, f):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        with torch.autocast("cpu"):
            y = fn(x, w)
        (y.float() * g).sum().backward()
        grads.append((y.detach(), x.grad, w.grad))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    with torch.autocast("cpu"), torch.no_grad():    # no gradients: vectorized as before
        torch.testing.assert_close(f(x0, w0), rows_times(x0, w0))


class RowsTimes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(5, 5))

    def forward(self, x):
        out = []
        for i in range(x.shape[0]):
            out.append(x[i] @ self.W)
        return torch.stack(out)


def test_autocast_with_a_module_weight_that_requires_grad_keeps_the_loop():
    torch.manual_seed(0)
    m1 = RowsTimes()
    m2 = RowsTimes()
    m2.load_state_dict(m1.state_dict())
    f = autovec(RowsTimes.forward)
    x, g = torch.randn(24, 5), torch.randn(24, 5)
    with torch.autocast("cpu"):
        y1, y2 = m1(x), f(m2, x)
    (y1.float() * g).sum().backward()
    (y2.float() * g).sum().backward()
    assert torch.equal(y1, y2) and torch.equal(m1.W.grad, m2.W.grad)


def through_listed(x, ss):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        v = x[i]
        for s in ss:
            v = v * s
        out[i] = v
    return out


def test_objects_with_their_own_operators_in_a_list_keep_the_loop():
    f = autovec(through_listed)
    for _ in range(3):
        a, b = [Ramp(), 2.0], [Ramp(), 2.0]
        assert torch.equal(f(torch.ones(6, 2), b), through_listed(torch.ones(6, 2), a))
        assert a[0].calls == b[0].calls == 6


class Traced(torch.Tensor):
    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        Traced.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def scaled_by_first(x, ws):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * ws[0]
    return out


def test_a_subclass_with_its_own_torch_function_read_through_a_list_keeps_the_loop():
    f = autovec(scaled_by_first)
    ws = [torch.full((2,), 3.0).as_subclass(Traced)]
    assert torch.equal(f(torch.ones(6, 2), ws), scaled_by_first(torch.ones(6, 2), ws))
    assert explain(f, torch.ones(6, 2), ws).path == "python"


class Stepping:
    def __init__(self):
        self.t = 0

    @property
    def factor(self):
        self.t += 1
        return float(self.t)

    def apply(self, v):
        return v * self.factor


def through_property(x, s):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = s.apply(x[i])
    return out


def by_key(x, d, k):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * d[k]
    return out


def test_a_property_that_counts_and_objects_in_a_dict_keep_the_loop():
    f, g = autovec(through_property), autovec(by_key)
    for _ in range(3):
        a, b = Stepping(), Stepping()
        assert torch.equal(f(torch.ones(6, 2), b), through_property(torch.ones(6, 2), a)) and a.t == b.t == 6
        d1, d2 = {"r": Ramp()}, {"r": Ramp()}
        assert torch.equal(g(torch.ones(6, 2), d2, "r"), by_key(torch.ones(6, 2), d1, "r"))
        assert d1["r"].calls == d2["r"].calls == 6


# A helper's calls of methods of its parameters: checked on the objects its call site passes
# (analysis.loops._bound_methods). The one-time check calls the helper too, so without the
# check the loop that runs after a failed check would start from an advanced generator.

class Ticker:
    def __init__(self):
        self.k = 0

    def next(self):
        self.k += 1
        return self.k

    def scale(self):
        return 2.0


def jitter(rng, v):
    return v + float(rng.normal())


def bump(o, v):
    return v + o.next()


def scaled_by(v, *, by):
    return v * by.scale()


class Augment:
    def __init__(self, rng):
        self.rng = rng

    def noisy(self, src, v):
        return v * src.random()

    def run(self, x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = self.noisy(self.rng, x[i])
        return out


def apply_jitter(x, rng):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = jitter(rng, x[i])
    return out


def apply_bump(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = bump(o, x[i])
    return out


def apply_scaled(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = scaled_by(x[i], by=o)
    return out


def test_a_helper_drawing_from_a_generator_it_is_passed_keeps_the_loop():
    import numpy as np
    x = torch.randn(20, 3)
    fast = autovec(apply_jitter)
    for seed in range(2):
        assert torch.equal(fast(x, np.random.default_rng(seed)), apply_jitter(x, np.random.default_rng(seed)))
    assert "random numbers" in " ".join(explain(apply_jitter, x, np.random.default_rng(0)).notes)


def test_a_helper_calling_a_stateful_method_of_its_argument_keeps_the_loop():
    x = torch.randn(20, 3)
    a, b = Ticker(), Ticker()
    assert torch.equal(autovec(apply_bump)(x, b), apply_bump(x, a))
    assert a.k == b.k == 20


def test_a_method_helper_and_keyword_arguments_are_mapped_to_their_parameters():
    import random
    x = torch.randn(20, 3)
    assert torch.equal(autovec(Augment.run)(Augment(random.Random(1)), x), Augment(random.Random(1)).run(x))
    # a pure method of the object passed by keyword: vectorized
    o = Ticker()
    assert torch.equal(autovec(apply_scaled)(x, o), apply_scaled(x, o))
    assert explain(apply_scaled, x, o).path == "vectorized"


def test_pure_methods_of_arguments_still_vectorize():
    def head(model, v):
        return model.proj(v).relu()

    def lookup(cfg, v):
        return v * cfg.get("scale", 1.0)

    def apply(x, model, cfg):
        out = torch.empty(x.shape[0], 4)
        for i in range(x.shape[0]):
            out[i] = lookup(cfg, head(model, x[i]))
        return out
    model = torch.nn.Module()
    model.proj = torch.nn.Linear(3, 4)
    x, cfg = torch.randn(16, 3), {"scale": 0.5}
    with torch.no_grad():
        torch.testing.assert_close(autovec(apply)(x, model, cfg), apply(x, model, cfg))
        assert explain(apply, x, model, cfg).path == "vectorized"


def relay(o, v):
    return bump(o, v) * 1.0


def apply_relay(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = relay(o, x[i])
    return out


def test_an_argument_handed_on_to_another_helper_is_checked_there():
    x = torch.randn(12, 3)
    a, b = Ticker(), Ticker()
    assert torch.equal(autovec(apply_relay)(x, b), apply_relay(x, a))
    assert a.k == b.k == 12
    assert "Ticker.next" in " ".join(explain(apply_relay, x, Ticker()).notes)


# probeR's escapes from the check of a helper's argument objects

class Counted:
    made = 0

    def __init__(self):
        self.n = 0

    def tick(self):
        self.n += 1
        return 1.0

    @property
    def val(self):
        self.n += 1
        return 1.0

    @classmethod
    def bump(cls):
        cls.made += 1
        return 1.0


def h_subscript(lst, v):
    return v * lst[0].tick()


def h_alias(o, v):
    p = o
    return v * p.tick()


def h_property(o, v):
    return v * o.val


def h_class(c, v):
    return v * c.bump()


def h_numpy(a, v):
    a.fill(a[0] + 1)
    return v * 2


def _apply(helper, x, obj):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = helper(obj, x[i])
    return out


def apply_subscript(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_subscript(o, x[i])
    return out


def apply_alias(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_alias(o, x[i])
    return out


def apply_property(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_property(o, x[i])
    return out


def apply_class(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_class(o, x[i])
    return out


def apply_numpy(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_numpy(o, x[i])
    return out


def apply_partial(x, o):
    import functools
    h = functools.partial(h_alias, o)
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h(x[i])
    return out


def h_tick(o, v):
    return v * o.tick()


def apply_per_iteration(x, objs):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_tick(objs[i % 2], x[i])
    return out


def test_a_compiled_method_that_changes_its_object_keeps_the_loop():
    import numpy as np

    def h_fill(a, v):
        a.fill(3.0)
        return v * 2

    def apply_fill(x, a):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = h_fill(a, x[i])
        return out
    x, a = torch.randn(6, 2), np.zeros(3)
    assert torch.equal(autovec(apply_fill)(x, a), apply_fill(x, np.zeros(3)))
    assert "changes its object" in " ".join(explain(apply_fill, x, np.zeros(3)).notes)


def _state(o):
    import numpy as np
    if isinstance(o, type):
        return o.made
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, list):
        return [_state(e) for e in o]
    return o.n


@pytest.mark.parametrize("fn, make", [
    (apply_subscript, lambda: [Counted()]),
    (apply_alias, Counted),
    (apply_property, Counted),
    (apply_class, lambda: Counted),
    (apply_numpy, lambda: __import__("numpy").zeros(3)),
    (apply_partial, Counted),
    (apply_per_iteration, lambda: [Counted(), Counted()]),
])
def test_argument_objects_reached_otherwise_keep_the_loop(fn, make):
    # each step changes the object; the batch, or the one-time check, would change it a different
    # number of times (probeR)
    x = torch.randn(12, 3)
    for _ in range(3):
        Counted.made = 0
        a = make()
        want = fn(x, a)
        sa = _state(a)
        Counted.made = 0
        b = make()
        got = autovec(fn)(x, b)
        assert torch.equal(got, want) and _state(b) == sa


def test_a_getter_on_the_first_parameter_is_not_read_through_a_global_of_its_name():
    # (probeR: the pins' walk read `o.val` through a module global named `o`, running its getter)
    global o
    o = Counted()
    try:
        autovec(apply_property)(torch.randn(4, 2), Counted())
        assert o.n == 0
    finally:
        del o


# probeS: defaults, starred arguments and expressions at the call site

_DEFAULT = Counted()


def h_default(v, c=_DEFAULT):
    return v * c.tick()


def h_tuple(t, v):
    o, k = t
    return v * o.tick() * k


def h_kwdefault(v, *, c=_DEFAULT):
    return v * c.tick()


def apply_default(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_default(x[i])
    return out


def apply_kwdefault(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_kwdefault(x[i])
    return out


def apply_starred(x, o):
    args = (o,)
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_tick(*args, x[i])
    return out


def apply_keywords(x, o):
    kw = {"o": o}
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_tick(v=x[i], **kw)
    return out


def apply_tuple(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_tuple((o, 2.0), x[i])
    return out


def apply_or(x, o):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = h_tick(o or None, x[i])
    return out


@pytest.mark.parametrize("fn", [apply_starred, apply_keywords, apply_tuple, apply_or])
def test_objects_passed_through_stars_or_expressions_keep_the_loop(fn):
    x = torch.randn(10, 2)
    a, b = Counted(), Counted()
    assert torch.equal(autovec(fn)(x, b), fn(x, a)) and a.n == b.n == 10


@pytest.mark.parametrize("fn", [apply_default, apply_kwdefault])
def test_an_object_in_a_helpers_default_keeps_the_loop(fn):
    x = torch.randn(10, 2)
    before = _DEFAULT.n
    want = fn(x, None)
    mid = _DEFAULT.n
    got = autovec(fn)(x, None)
    assert torch.equal(got, want) and mid - before == _DEFAULT.n - mid == 10


def test_inert_values_in_expressions_and_defaults_still_vectorize():
    def scaled(v, cfg, eps=1e-5):
        return v * cfg["scale"] + eps

    def apply_cfg(x, cfg, fallback):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = scaled(x[i], cfg or fallback)
        return out
    x = torch.randn(10, 2)
    args = (x, {"scale": 2.0}, {"scale": 1.0})
    assert torch.equal(autovec(apply_cfg)(*args), apply_cfg(*args))
    assert explain(apply_cfg, *args).path == "vectorized"


# probeB (stop 51): a helper reads an active object through a subscript or an attribute chain of
# an outside value; the loop calls its `__rmul__` once per row

class Stepper:
    def __init__(self):
        self.k = 0

    def __rmul__(self, other):
        self.k += 1
        return other * self.k


class _Cfg:
    pass


R_LIST = [None]
R_CFG = _Cfg()
R_CFG.inner = _Cfg()
R_DICT: dict = {}


def r_list(v):
    return v * R_LIST[0]


def r_attr(v):
    return v * R_CFG.s


def r_nested(v):
    return v * R_CFG.inner.s


def r_dict(v):
    return v * R_DICT["a"]["b"]


def r_any(v, k):
    return v * R_LIST[k]


def r_outer(v):
    return r_list(v) + 0


class Holder:
    def __init__(self):
        self.lst = [None]

    def scale(self, v):
        return v * self.lst[0]

    def apply(self, x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = self.scale(x[i])
        return out


def _reach_loop(helper):
    def f(x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = helper(x[i])
        return out
    return f


def reach_any(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = r_any(x[i], 0)
    return out


def _set_ramps():
    R_LIST[0] = Stepper()
    R_CFG.s = Stepper()
    R_CFG.inner.s = Stepper()
    R_DICT["a"] = {"b": Stepper()}


@pytest.mark.parametrize("helper", [r_list, r_attr, r_nested, r_dict, r_outer, None],
                         ids=["list", "attr", "nested", "dict", "helper_helper", "any_index"])
def test_an_active_object_a_helper_reaches_keeps_the_loop(helper):
    x = torch.ones(6, 2)
    fn = reach_any if helper is None else _reach_loop(helper)
    for _ in range(2):
        _set_ramps()
        want = fn(x)
        _set_ramps()
        fast = autovec(fn)
        got = fast(x)
        assert torch.equal(got, want)
        assert want[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert explain(fast, x).path == "python"


def test_an_active_object_a_method_reaches_through_self_keeps_the_loop():
    x = torch.ones(5, 2)
    h = Holder()
    h.lst[0] = Stepper()
    want = h.apply(x)
    h.lst[0] = Stepper()
    got = autovec(Holder.apply)(h, x)
    assert torch.equal(got, want)


def test_plain_values_reached_the_same_way_still_batch():
    x = torch.randn(40, 3)
    R_LIST[0], R_CFG.s, R_CFG.inner.s, R_DICT["a"] = 2.0, 3.0, torch.tensor(0.5), {"b": 4}
    for helper in (r_list, r_attr, r_nested, r_dict):
        fn = _reach_loop(helper)
        fast = autovec(fn)
        torch.testing.assert_close(fast(x), fn(x))
        assert explain(fast, x).path == "vectorized"


def test_an_active_object_put_in_after_plain_calls_is_seen(monkeypatch):
    # the verdict of plain values must not be kept once the element read is an active object
    x = torch.ones(6, 2)
    fn = _reach_loop(r_list)
    fast = autovec(fn)
    R_LIST[0] = 2.0
    for _ in range(4):
        torch.testing.assert_close(fast(x), fn(x))
    R_LIST[0] = Stepper()
    want = fn(x)
    R_LIST[0] = Stepper()
    assert torch.equal(fast(x), want)


# probeC: a helper reads through an object whose class reads attributes or elements in Python

class CountingAttrs:
    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        self.calls += 1
        return float(self.calls)


class CountingLookups:
    def __init__(self):
        object.__getattribute__(self, "__dict__").update(calls=0, scale=2.0)

    def __getattribute__(self, name):
        d = object.__getattribute__(self, "__dict__")
        d["calls"] += 1
        return d[name]


class CountingMissing(dict):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __missing__(self, key):
        self.calls += 1
        return float(self.calls)


HOOKED = {}


def h_getattr(v):
    return v * HOOKED["a"].scale


def h_missing(v):
    return v * HOOKED["m"]["k"]


@pytest.mark.parametrize("helper, key, make", [(h_getattr, "a", CountingAttrs), (h_missing, "m", CountingMissing),
                                               (h_getattr, "a", CountingLookups)])
def test_objects_that_read_with_python_code_keep_the_loop(helper, key, make):
    x = torch.ones(5, 2)
    fn = _reach_loop(helper)
    HOOKED[key] = make()
    want = fn(x)
    calls = object.__getattribute__(HOOKED[key], "__dict__")["calls"]
    HOOKED[key] = make()
    got = autovec(fn)(x)
    assert torch.equal(got, want)
    if make is not CountingLookups:     # (its count also sees the guards' reads: values only)
        assert object.__getattribute__(HOOKED[key], "__dict__")["calls"] == calls


# probeE: a value a helper reads that changes kind between calls (a float, then a vector): the
# batched body calls the helper with whole batches, as the one-time check saw it

W_READ = 2.0


def scale_by_global(v):
    return v * W_READ


def stacked_scales(x):
    res = []
    for t in range(len(x)):
        res.append(scale_by_global(x[t]))
    return torch.stack(res)


def stored_scales(x):
    out = torch.empty_like(x)
    for t in range(len(x)):
        out[t] = scale_by_global(x[t])
    return out


@pytest.mark.parametrize("fn", [stacked_scales, stored_scales])
def test_a_helpers_global_that_becomes_a_vector_is_a_new_signature(fn):
    global W_READ
    x = torch.randn(300)
    fast = autovec(fn)
    try:
        W_READ = 2.0
        for _ in range(3):
            torch.testing.assert_close(fast(x), fn(x))
        W_READ = torch.randn(300)
        for _ in range(2):
            want_err = got_err = None
            try:
                want = fn(x)
            except RuntimeError as e:
                want_err = type(e)
            try:
                got = fast(x)
            except RuntimeError as e:
                got_err = type(e)
            assert got_err == want_err
            if want_err is None:
                assert got.shape == want.shape
                torch.testing.assert_close(got, want)
    finally:
        W_READ = 2.0


class _PlainFactor:
    def __init__(self):
        self.factor = 2.0


class _CountingFactor:
    def __init__(self):
        self.reads = 0

    def __getattr__(self, name):
        self.reads += 1
        return float(self.reads)


class _PropertyFactor:
    def __init__(self):
        self.reads = 0

    @property
    def factor(self):
        self.reads += 1
        return float(self.reads)


SWAPPED = _PlainFactor()


def scale_by_factor(v):
    return v * SWAPPED.factor


def factor_rows(x):
    out = torch.zeros_like(x)
    for t in range(len(x)):
        out[t] = scale_by_factor(x[t])
    return out


@pytest.mark.parametrize("kind", [_CountingFactor, _PropertyFactor])
def test_an_object_swapped_in_after_warm_calls_is_read_as_often_as_in_the_loop(kind):
    # (probeE: the gradient walk and the pins read `SWAPPED.factor` with getattr, running the
    # user's `__getattr__` or getter once more per call)
    global SWAPPED
    x = torch.ones(300)
    fast = autovec(factor_rows)
    try:
        for _ in range(3):
            SWAPPED = _PlainFactor()
            torch.testing.assert_close(fast(x), factor_rows(x))
        SWAPPED = kind()
        want, reads = factor_rows(x), SWAPPED.__dict__["reads"]
        SWAPPED = kind()
        got = fast(x)
        assert SWAPPED.__dict__["reads"] == reads
        assert torch.equal(got, want)
    finally:
        SWAPPED = _PlainFactor()


# probeF: a list, tuple or dict read by a key that changes between calls, holding values of
# several kinds (a 1-d and a 2-d tensor): the one a call reads decides the batched form

MIXED_D = {}
MIXED_L = []


def read_by_key(v, k):
    return (v * MIXED_D[k]).sum()


def read_by_index(v, j):
    return (v * MIXED_L[j]).sum()


def keyed_rows(x, k):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = read_by_key(x[i], k)
    return out


def indexed_rows(x, j):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = read_by_index(x[i], j)
    return out


def list_argument_rows(x, ls, j):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = (x[i] * ls[j]).sum()
    return out


def test_containers_of_several_kinds_read_by_a_changing_key():
    n = 40
    x = torch.randn(n, 3)
    MIXED_D.clear()
    MIXED_D.update(a=torch.randn(3), b=torch.randn(n, 3))
    MIXED_L[:] = [2.0, torch.randn(n, 3)]
    ls = [torch.randn(3), torch.randn(n, 3)]
    for fn, keys, extra in ((keyed_rows, ("a", "b", "a"), ()), (indexed_rows, (0, 1, 0), ()),
                            (list_argument_rows, (0, 1, 0), (ls,))):
        fast = autovec(fn)
        for key in keys:
            for _ in range(2):
                args = (x, *extra, key)
                torch.testing.assert_close(fast(*args), fn(*args))
