"""Analysis on tiny functions: read/write sets, liveness, plans and refusals as plain values."""
import ast
import textwrap

import pytest
import torch

from autovec.analysis import analyze
from autovec.analysis import names as nm
from autovec.frontend import NoSource, capture
from autovec.purity import Env


def _plans(fn):
    cap = capture(fn)
    return analyze(cap, Env(cap))


def _stmt(src):
    return ast.parse(textwrap.dedent(src)).body[0]


def test_loads_skip_comprehension_scope():
    assert nm.load_ids(_stmt("y = a + sum(b * x for x in c)")) == {"a", "b", "c", "sum"}


def test_stores_and_targets():
    assert nm.stores(_stmt("a, (b, c) = f()")) == {"a", "b", "c"}
    assert nm.target_names(_stmt("x[i] = 1").targets[0]) == []


def test_read_after_loop_is_found_and_killed_by_a_write():
    fn = _stmt("""
    def f(x):
        for k in range(3):
            t = x[k]
        y = t
        t = 1
        return t
    """)
    parent = nm.parents(fn)
    loop = fn.body[0]
    assert nm.read_after(fn, parent, loop, "t") == 5
    fn2 = _stmt("""
    def f(x):
        for k in range(3):
            t = x[k]
        t = 1
        return t
    """)
    assert nm.read_after(fn2, nm.parents(fn2), fn2.body[0], "t") is None


def f_elementwise(u, v):
    out = []
    for k in range(len(u)):
        out.append(u[k] * 2 + v[k])
    return torch.stack(out)


def f_store(x, w, b):
    out = torch.empty(x.shape[0])
    for i in range(1, x.shape[0]):
        out[i] = torch.dot(x[i - 1], w) + b
    return out


def f_carried(x):
    h = torch.zeros(x.shape[1])
    out = []
    for t in range(x.shape[0]):
        h = torch.tanh(h * 0.5 + x[t])
        out.append(h)
    return out


def f_prev(x):
    out = x.clone()
    for i in range(1, x.shape[0]):
        out[i] = out[i - 1] + x[i]
    return out


def f_print(x):
    s = []
    for row in x:
        print(row)
        s.append(row * 2)
    return s


def f_random(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] + torch.randn(x.shape[1])
    return out


def test_plan_of_an_elementwise_append_loop():
    (info,) = _plans(f_elementwise)
    plan = info.plan
    assert plan is not None
    assert plan.space.kind == "range" and plan.space.index == "k"
    assert {(m.base, m.dim, m.offset) for m in plan.mapped} == {("u", 0, 0), ("v", 0, 0)}
    assert set(plan.free) == set()
    (out,) = plan.outputs
    assert (out.kind, out.target, out.consumer) == ("append", "out", "stack")
    assert not plan.index_as_value


def test_plan_of_a_store_with_offset_and_free_names():
    (info,) = _plans(f_store)
    plan = info.plan
    assert {(m.base, m.dim, m.offset) for m in plan.mapped} == {("x", 0, -1)}
    assert set(plan.free) == {"torch", "w", "b"}
    (out,) = plan.outputs
    assert (out.kind, out.target, out.dim, out.offset) == ("store", "out", 0, 0)


def test_carried_dependency_names_variable_and_lines():
    (info,) = _plans(f_carried)
    assert info.plan is None
    assert "`h`" in info.refusal.reason and "line" in info.refusal.reason
    assert info.refusal.lineno == f_carried.__code__.co_firstlineno + 4


def test_reading_the_previous_output_is_a_dependency():
    (info,) = _plans(f_prev)
    assert info.plan is None and "`out`" in info.refusal.reason


def test_print_and_random_are_refused_with_reasons():
    (p,) = _plans(f_print)
    # print keeps the loop in Python; only `row * 2` may run batched ahead of it (fission)
    assert (p.plan is None and "print" in p.refusal.reason) or (
        p.plan.form == "fission" and "print" in p.plan.notes[0])
    (r,) = _plans(f_random)
    assert r.plan is None and "random" in r.refusal.reason


def test_no_source_is_reported():
    with pytest.raises(NoSource, match="lambda"):
        capture(lambda x: x)
    ns = {}
    exec("def g(x):\n    return x\n", ns)
    with pytest.raises(NoSource, match="source"):
        capture(ns["g"])
