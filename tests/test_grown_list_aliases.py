"""A list the loop grows (`res.append(v)`, `counts[int(l)] += 1`) and also reads another way:
under a second name, inside a dict, through a helper's global, or passed twice (probeB). Each
iteration of the loop sees the list as the earlier ones left it; a batch computed first would
see it as it was before the loop, so these keep the loop (runtime._appended_aliasing), on the
first call and after the steady state's lanes are written."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def second_name(x):
    res = []
    alias = res
    for i in range(len(x)):
        res.append(x[i] * len(alias))
    return res


def inside_a_dict(x):
    res = []
    box = {"r": res}
    for i in range(len(x)):
        res.append(x[i] * len(box["r"]))
    return res


LOG = []


def _scale(v):
    return v * len(LOG)


def through_a_helper(x, log):
    for i in range(len(x)):
        log.append(_scale(x[i]))
    return log


def passed_twice(x, log, w):
    for i in range(len(x)):
        log.append(x[i] * w[-1])
    return log


def counts_read_twice(labels, c, view):
    tot = 0
    for lab in labels:
        c[int(lab)] += 1
        tot += view[0]
    return c, tot


def _values(v):
    return [t.item() if isinstance(t, torch.Tensor) else t for t in v]


@pytest.mark.parametrize("fn", [second_name, inside_a_dict], ids=lambda f: f.__name__)
def test_a_list_read_under_another_name_keeps_the_loop(fn):
    x = torch.ones(20)
    f = autovec(fn)
    for _ in range(3):
        assert _values(f(x)) == _values(fn(x)) == list(range(20))
    assert "a list the loop grows is also read another way" in str(explain(f, x))


def test_a_list_read_through_a_helpers_global_keeps_the_loop():
    x = torch.ones(20)
    f = autovec(through_a_helper)
    # warm calls on a list of its own (batched), then the helper's own list: the loop
    for _ in range(4):
        LOG.clear()
        got = _values(f(x, []))
        assert got == [0.0] * 20
    LOG.clear()
    want = _values(through_a_helper(x, LOG))
    LOG.clear()
    assert _values(f(x, LOG)) == want == list(range(20))


def test_a_list_passed_twice_keeps_the_loop():
    x = torch.full((10,), 2.0)
    f = autovec(passed_twice)
    for _ in range(4):
        assert _values(f(x, [1.0], [3.0])) == _values(passed_twice(x, [1.0], [3.0]))
    a, b = [1.0], [1.0]
    got, want = f(x, a, a), passed_twice(x, b, b)
    assert _values(got) == _values(want) == [1.0] + [2.0 ** k for k in range(1, 11)]


def test_a_count_list_read_twice_keeps_the_loop():
    labels = torch.zeros(50, dtype=torch.long)
    f = autovec(counts_read_twice)
    c1, c2 = [0, 0], [0, 0]
    assert f(labels, c1, c1) == counts_read_twice(labels, c2, c2) == ([50, 0], 1275)
    c1, c2, v = [0, 0], [0, 0], [7, 7]
    assert f(labels, c1, v) == counts_read_twice(labels, c2, list(v)) == ([50, 0], 350)


# --- containers the aliasing walk looks into (probeC): slots, deques, mapping proxies, numpy
# object arrays, the program's own modules ---

import collections
import types

import numpy as np

import grown_list_module


class _Slotted:
    __slots__ = ("lst",)


def through_slots(x, res, o):
    for i in range(len(x)):
        res.append(x[i] * len(o.lst))
    return res


def through_a_deque(x, res, dq):
    for i in range(len(x)):
        res.append(x[i] * len(dq[0]))
    return res


def through_a_proxy(x, res, d):
    for i in range(len(x)):
        res.append(x[i] * len(d["k"]))
    return res


def through_a_module(x, res):
    for i in range(len(x)):
        res.append(x[i] * len(grown_list_module.LOG))
    return res


def _slotted(lst):
    o = _Slotted()
    o.lst = lst
    return o


@pytest.mark.parametrize("fn, wrap", [
    (through_slots, _slotted),
    (through_a_deque, lambda lst: collections.deque([lst])),
    (through_a_proxy, lambda lst: types.MappingProxyType({"k": lst})),
], ids=["slots", "deque", "mappingproxy"])
def test_a_grown_list_inside_other_containers_keeps_the_loop(fn, wrap):
    x = torch.ones(12)
    f = autovec(fn)
    for _ in range(3):          # (warm calls on a list of its own: batched)
        assert _values(f(x, [1.0], wrap([0.0]))) == [1.0] + [1.0] * 12
    assert explain(f, x, [1.0], wrap([0.0])).path == "vectorized"
    a, b = [1.0], [1.0]
    assert _values(f(x, a, wrap(a))) == _values(fn(x, b, wrap(b))) == [1.0] + [float(k) for k in range(1, 13)]


def test_a_grown_list_held_by_a_module_of_the_program_keeps_the_loop():
    x = torch.ones(12)
    f = autovec(through_a_module)
    grown_list_module.LOG = [0.0]
    for _ in range(3):
        assert _values(f(x, [])) == [1.0] * 12
    a = grown_list_module.LOG = [0.0]
    want = _values(through_a_module(x, a))
    a = grown_list_module.LOG = [0.0]
    assert _values(f(x, a)) == want == [0.0] + [float(k) for k in range(1, 13)]


def stored_through_an_object_array(x, arr):
    out = arr[0]
    for i in range(1, x.shape[0]):
        out[i] = x[i] + arr[0][i - 1]       # (arr[0] is out: the loop reads the row it wrote)
    return out


def test_a_written_tensor_inside_a_numpy_object_array_keeps_the_loop():
    x = torch.ones(10)
    f = autovec(stored_through_an_object_array)
    arr, arr2 = np.empty(1, dtype=object), np.empty(1, dtype=object)
    arr[0], arr2[0] = torch.zeros(10), torch.zeros(10)
    got, want = f(x, arr), stored_through_an_object_array(x, arr2)
    assert torch.equal(got, want) and got[9].item() == 9.0      # (a running sum, as the loop reads back)


# --- more paths to the list (probeE): a callable object's attribute, a class attribute, a
# submodule of the program's package, a module inside a dict, a dict view ---

import grown_pkg


class _Callable:
    def __call__(self):
        return 0


class _Shared:
    lst: list = []


def through_an_attribute(x, res, o):
    for i in range(len(x)):
        res.append(x[i] * len(o.lst))
    return res


def through_a_submodule(x, res):
    for i in range(len(x)):
        res.append(x[i] * len(grown_pkg.sub.LOG))
    return res


def through_a_dict_of_modules(x, res, cfg):
    for i in range(len(x)):
        res.append(x[i] * len(cfg["m"].LOG))
    return res


def through_a_view(x, res, vals):
    for i in range(len(x)):
        res.append(x[i] * len(next(iter(vals))))
    return res


def _callable_holding(lst):
    o = _Callable()
    o.lst = lst
    return o


def _class_holding(lst):
    _Shared.lst = lst
    return _Shared()


@pytest.mark.parametrize("fn, wrap", [
    (through_an_attribute, _callable_holding),
    (through_an_attribute, _class_holding),
    (through_a_dict_of_modules, lambda lst: (setattr(grown_list_module, "LOG", lst), {"m": grown_list_module})[1]),
    (through_a_view, lambda lst: {"k": lst}.values()),
], ids=["callable", "class_attribute", "module_in_dict", "dict_view"])
def test_more_paths_to_a_grown_list_keep_the_loop(fn, wrap):
    x = torch.ones(12)
    f = autovec(fn)
    a, b = [1.0], [1.0]
    want = _values(fn(x, b, wrap(b)))
    got = _values(f(x, a, wrap(a)))
    assert got == want == [1.0] + [float(k) for k in range(1, 13)]


def test_a_grown_list_in_a_submodule_keeps_the_loop():
    x = torch.ones(12)
    f = autovec(through_a_submodule)
    a = grown_pkg.sub.LOG = [0.0]
    want = _values(through_a_submodule(x, a))
    a = grown_pkg.sub.LOG = [0.0]
    assert _values(f(x, a)) == want == [0.0] + [float(k) for k in range(1, 13)]
