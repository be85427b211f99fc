"""Reads past a tensor's ends that a condition of the loop index skips (autovec.reach,
runtime's _unread and _padded_rows): `values[t + 1] if t + 1 < T else last`. The guard evaluates
the read's conditions, in Python, on the iterations whose rows are past an end; where none of
them reads it, the batch reads stand-in rows there that only the sides those iterations do not
take see. Checked against the loop: values bit for bit, gradients, steady calls, chunks, and
the loops that must keep Python (a condition that lets a row past the end be read raises
IndexError in the loop, and in autovec; a condition the guard cannot evaluate keeps the loop)."""
import ast

import pytest
import torch

from autovec import assert_equivalent, autovec, explain, reach
from conftest import raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def td_targets(rewards, values, dones, gamma: float):
    T = rewards.shape[0]
    out = torch.empty(T)
    for t in range(T):
        next_v = values[t + 1] if t + 1 < T else torch.zeros(())
        out[t] = rewards[t] + gamma * next_v * (1 - dones[t])
    return out


def td_last_value(rewards, values, last_value, gamma: float):
    T = len(rewards)
    out = []
    for t in range(T):
        if t == T - 1:
            nv = last_value
        else:
            nv = values[t + 1]
        out.append(rewards[t] + gamma * nv - values[t])
    return torch.stack(out)


def forward_difference(x):
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        if t + 1 >= x.shape[0]:
            continue                  # (every statement after it is skipped on the last row)
        y[t] = x[t + 1] - x[t]
    return y


def two_ahead(x):
    T = x.shape[0]
    out = torch.empty_like(x)
    for t in range(T):
        if t + 2 < T:
            out[t] = x[t + 1] + x[t + 2]
        elif t + 1 < T:
            out[t] = x[t + 1]
        else:
            out[t] = x[t]
    return out


def next_if_positive(x, m):
    out = torch.zeros(m.shape[0])
    for t in range(m.shape[0]):
        if t + 1 < len(m) and m[t + 1] > 0:      # (`and`: the data test only where the index test holds)
            out[t] = m[t + 1] * x[t].sum()
    return out


def reversed_next(x):
    y = torch.empty_like(x)
    for t in reversed(range(x.size(0))):
        y[t] = x[t + 1] * 2 if t < x.size(0) - 1 else x[t]
    return y


def stepped_ahead(x):
    out = []
    for t in range(0, len(x), 2):
        out.append(x[t + 2] - x[t] if t + 2 < len(x) else x[t] * 0)
    return torch.stack(out)


def stepped_back(x):
    out = []
    for t in range(0, x.shape[0], 2):
        out.append(x[t - 2] if t >= 2 else x[t])     # (a stepped loop's rows before the first do not wrap)
    return torch.stack(out)


def enumerate_next(x, y):
    out = []
    n = y.shape[0]
    for i, r in enumerate(x):
        out.append(r + y[i + 1] if i + 1 < n else r)    # (y one row shorter or longer than x)
    return torch.stack(out)


def kept_next(x):
    out = []
    for t in range(x.shape[0]):
        if t + 1 < x.shape[0]:
            out.append(x[t + 1] * x[t])
    return torch.stack(out)


def sum_of_products(x):
    s = torch.zeros(x.shape[1:], dtype=x.dtype)
    for t in range(x.shape[0]):
        if t + 1 < x.shape[0]:
            s = s + x[t + 1] * x[t]
    return s


CASES = [
    (td_targets, lambda: (torch.randn(9), torch.randn(9), (torch.rand(9) < 0.3).float(), 0.99)),
    (td_targets, lambda: (torch.randn(6), torch.randn(8), torch.zeros(6), 0.5)),     # (values longer)
    (td_last_value, lambda: (torch.randn(7), torch.randn(7), torch.randn(()), 0.9)),
    (forward_difference, lambda: (torch.randn(6, 3),)),
    (two_ahead, lambda: (torch.randn(5, 2, dtype=torch.float64),)),
    (two_ahead, lambda: (torch.randint(-5, 5, (2, 3)),)),
    (next_if_positive, lambda: (torch.randn(6, 2), torch.randn(6))),
    (reversed_next, lambda: (torch.randn(5, 3),)),
    (stepped_ahead, lambda: (torch.randn(7, 2),)),
    (stepped_ahead, lambda: (torch.randn(8),)),
    (stepped_back, lambda: (torch.randn(9, 2),)),
    (enumerate_next, lambda: (torch.randn(5, 2), torch.randn(5, 2))),
    (enumerate_next, lambda: (torch.randn(5, 2), torch.randn(4, 2))),
    (kept_next, lambda: (torch.randn(6, 2),)),
    (sum_of_products, lambda: (torch.randint(-3, 4, (7, 2)),)),
]


def _clones(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


@pytest.mark.parametrize("fn, make", CASES, ids=[f"{fn.__name__}{k}" for k, (fn, _) in enumerate(CASES)])
def test_rows_past_the_end_that_no_iteration_reads(fn, make):
    torch.manual_seed(0)
    args = make()
    fast = autovec(fn)
    for _ in range(4):          # (the first call, the checked one, the steady state)
        got, want = fast(*_clones(args)), fn(*_clones(args))
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    e = explain(fn, *_clones(args))
    assert e.path == "vectorized", e.notes


def test_gradients_of_the_kept_rows():
    # (tensors that require grad: the condition first, then the kept rows alone with grad)
    x = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    assert_equivalent(kept_next, x, grad=True)
    e = explain(kept_next, x)
    assert e.path == "vectorized", e.notes


def test_in_chunks_under_a_memory_budget():
    args = (torch.randn(40), torch.randn(40), torch.zeros(40), 0.9)
    fast = autovec(td_targets, memory_budget=1)
    for _ in range(3):
        assert torch.equal(fast(*_clones(args)), td_targets(*_clones(args)))
    assert explain(fast, *args).path == "vectorized"


# ----------------------------------------------------------------------------- the loop decides

def one_too_far(x):
    out = []
    for t in range(x.shape[0]):
        out.append(x[t + 1] if t + 1 <= x.shape[0] else x[t])    # (the last row reads x[T])
    return torch.stack(out)


def float_bound(x, lim: float):
    out = []
    for t in range(x.shape[0]):
        out.append(x[t + 1] if t + 1 < lim else x[t])     # (a float: not the guard's to evaluate)
    return torch.stack(out)


def bound_in_the_body(x):
    out = []
    for t in range(x.shape[0]):
        lim = x.shape[0]                 # (bound in the body)
        out.append(x[t + 1] if t + 1 < lim else x[t])
    return torch.stack(out)


def data_condition(x):
    out = []
    for t in range(x.shape[0]):
        out.append(x[t + 1] if x[t].sum() > -100 else x[t])
    return torch.stack(out)


def also_unconditional(x):
    out = []
    for t in range(x.shape[0]):
        a = x[t + 1] if t + 1 < x.shape[0] else x[t]
        out.append(a + x[t + 1])          # (the same row read on every iteration)
    return torch.stack(out)


def after_an_if_that_does_not_exit(x):
    out = []
    for t in range(x.shape[0]):
        w = 2.0
        if t + 1 >= x.shape[0]:
            w = 1.0                       # (no `continue`: the read below runs on the last row too)
        out.append(x[t + 1] * w)
    return torch.stack(out)


def stepped_back_reached(x):
    out = []
    for t in range(0, x.shape[0], 2):
        out.append(x[t - 2] if t >= 0 else x[t])     # (t = 0 reads x[-2], Python's from the end)
    return torch.stack(out)


def either_side(x):
    out = []
    for t in range(x.shape[0]):
        out.append(x[t + 1] if t + 1 < x.shape[0] or x[t].sum() > 0 else x[t])
    return torch.stack(out)


@pytest.mark.parametrize("fn", [one_too_far, also_unconditional, after_an_if_that_does_not_exit])
def test_a_row_past_the_end_that_is_read_raises_as_the_loop(fn):
    raises_as_loop(IndexError, fn, torch.randn(5, 2))


@pytest.mark.parametrize("fn", [bound_in_the_body, data_condition, either_side, stepped_back_reached])
def test_a_read_the_guard_cannot_rule_out_keeps_the_loop(fn):
    x = torch.randn(5, 2)
    x[-1] = -1000.0           # (the data tests skip the last row: the loop reads no row past the end)
    for _ in range(3):
        assert torch.equal(autovec(fn)(x.clone()), fn(x.clone()))
    e = explain(fn, x)
    assert e.path == "python" and "outside an indexed tensor" in " ".join(e.notes), e.notes


def test_a_float_bound_keeps_the_loop():
    x = torch.randn(5, 2)
    for lim in (5.0, 3.5):
        assert torch.equal(autovec(float_bound)(x, lim), float_bound(x, lim))
    raises_as_loop(IndexError, float_bound, x, 1000.0)
    e = explain(float_bound, x, 5.0)
    assert e.path == "python" and "outside an indexed tensor" in " ".join(e.notes), e.notes


# ----------------------------------------------------------------------------- reach itself

def _conds_of(source, name):
    """The conditions (as source, truth) of the first subscript of `name` in a loop body."""
    body = ast.parse(source).body
    where = reach.conditioned(body)
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Subscript) and ast.unparse(node) == name:
            return [(ast.unparse(t), truth) for t, truth in reach.conjuncts(where[id(node)])]
    raise AssertionError(name)


def test_conditions_of_a_read():
    assert _conds_of("v = x[t + 1] if t + 1 < T else 0", "x[t + 1]") == [("t + 1 < T", True)]
    assert _conds_of("if t == T - 1:\n    v = a\nelse:\n    v = x[t + 1]", "x[t + 1]") == [("t == T - 1", False)]
    assert _conds_of("if not t + 1 < T:\n    continue\ny = x[t + 1]", "x[t + 1]") == [("t + 1 < T", True)]
    assert _conds_of("if t + 1 < T and m[t] > 0:\n    y = x[t + 1]", "x[t + 1]") == [
        ("t + 1 < T", True), ("m[t] > 0", True)]
    assert _conds_of("y = t + 1 < T and x[t + 1]", "x[t + 1]") == [("t + 1 < T", True)]
    assert _conds_of("y = t + 1 >= T or x[t + 1]", "x[t + 1]") == [("t + 1 >= T", False)]
    # (no exit: the statements after an `if` run on both of its sides)
    assert _conds_of("if t + 1 >= T:\n    y = 0\nz = x[t + 1]", "x[t + 1]") == []
    # (a lambda runs where it is called: no condition known)
    assert _conds_of("if t + 1 < T:\n    f = lambda: x[t + 1]", "x[t + 1]") == []
    # (a `continue` of an inner loop ends that loop's iteration, not this one's)
    assert _conds_of("for k in r:\n    if t + 1 >= T:\n        continue\n    y = x[t + 1]", "x[t + 1]") == []


@pytest.mark.parametrize("text, ok", [("t + 1 < T", True), ("t < len(x) - 1", True), ("t + 2 <= x.shape[0]", True),
                                      ("t != x.size(0) - 1", True), ("t % 2 == 0 and t // 2 < n", True),
                                      ("t < x.shape[-1]", True), ("t + 1 < T / 2", False), ("t < x[0]", False),
                                      ("t + 1 < lim", False), ("t < f(T)", False), ("t < x.foo", False),
                                      ("t < 1.5", False), ("(n := t) < T", False)])
def test_tests_the_guard_evaluates(text, ok):
    assert reach.index_test(ast.parse(text, mode="eval").body, "t", {"lim", "t"}) is ok


def test_evaluation_takes_python_ints_alone():
    expr = ast.parse("t + 1 < T", mode="eval").body
    assert reach.holds(expr, {"t": 4, "T": 5}.__getitem__) is False
    assert reach.holds(expr, {"t": 3, "T": 5}.__getitem__) is True
    assert reach.holds(expr, {"t": 4, "T": 5.0}.__getitem__) is None           # (a float)
    assert reach.holds(expr, {"t": 4, "T": torch.tensor(5)}.__getitem__) is None
    shape = ast.parse("t < len(x) - 1", mode="eval").body
    assert reach.holds(shape, {"t": 4, "x": torch.zeros(5), "len": len}.__getitem__) is False
    assert reach.holds(shape, {"t": 4, "x": torch.zeros(5), "len": lambda v: 99}.__getitem__) is None


# ----------------------------------------------------------------------------- sides of two kinds

def td_zero_tail(rewards, values, gamma: float):
    T = len(rewards)
    out = torch.zeros(T)
    for t in range(T):
        # (a tensor on one side, a Python float on the other; the bound read in the test, not in the
        # range, so the loop is not split at it: frontend._IndexSplits)
        nv = values[t + 1] if t < len(values) - 1 else 0.0
        out[t] = rewards[t] + gamma * nv - values[t]
    return out


def mixed_list(values):
    out = []
    for t in range(values.shape[0]):
        out.append(values[t + 1] * 2 if t + 1 < values.shape[0] else 0.0)   # (the list holds both kinds)
    return out


def test_sides_of_two_kinds_run_each_on_its_own_rows():
    """A `where` has no one kind for a tensor and a Python number: after the first call refuses
    it, each side's body runs on its own rows (Token._run_sides), as under grad."""
    args = (torch.randn(30), torch.randn(30), 0.9)
    fast = autovec(td_zero_tail)
    for _ in range(4):
        got, want = fast(*_clones(args)), td_zero_tail(*_clones(args))
        assert torch.equal(got, want)
    e = explain(fast, *args)
    assert e.path == "vectorized" and "each side of the branch on its own rows" in " ".join(e.notes), e.notes


def test_outputs_of_two_kinds_keep_the_loop():
    x = torch.randn(7)
    fast = autovec(mixed_list)
    for _ in range(4):
        got, want = fast(x.clone()), mixed_list(x.clone())
        assert [type(v) for v in got] == [type(v) for v in want]
        assert all(torch.equal(torch.as_tensor(a), torch.as_tensor(b)) for a, b in zip(got, want))
    assert explain(fast, x).path == "python"
    # (the sides refused once for these types: not tried again on every call)
    assert fast._autovec_state.runtime.sel_failed
