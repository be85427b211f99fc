"""The cost model prices a loop's operations on Python numbers (`beta * avg`, `tp / (rank + 1)`,
`.item()`) at what they cost in the interpreter, tens of nanoseconds, not a torch operation's
microsecond: estimated as torch operations, a metrics loop over `.item()` values looked twelve
times slower than it is, and ran vectorized at twice the loop's time (probeA's EMA meter and
average precision). Which names hold numbers is read from the call's values (loop-invariant
names) and from the function's bindings before the loop (running values)."""

import math

import pytest
import torch

from autovec import autovec, cost, explain
from conftest import fixed_costs


@pytest.fixture
def costs(monkeypatch, tmp_path):
    fixed_costs(monkeypatch, tmp_path, py_iter=0.2e-6, py_op=1.2e-6, op=3e-6, own_op=2.5e-6)
    yield
    monkeypatch.setattr(cost, "_constants", None)


def ema_meter(losses, beta):
    avg = 0.0
    out = []
    for i, l in enumerate(losses):
        avg = beta * avg + (1 - beta) * l.item()
        out.append(avg / (1 - beta ** (i + 1)))
    return out


def average_precision(scores, labels):
    order = torch.argsort(scores, descending=True)
    tp = 0
    ap = 0.0
    npos = labels.sum().item()
    for rank, idx in enumerate(order):
        if labels[idx]:
            tp += 1
            ap += tp / (rank + 1)
    return ap / max(npos, 1)


def scaled_rows(x, s):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * s + i)
    return torch.stack(out)


def _plan(fn, *args):
    fast = autovec(fn)
    fast(*args)
    rt = fast._autovec_state.runtime
    (m,) = rt.matches.values()
    return rt, m


def test_operations_on_numbers_are_listed_with_the_free_names_they_need():
    rt, m = _plan(ema_meter, torch.rand(8), 0.9)
    entries = rt.number_ops[m.plan.loop_id]
    # `(1 - beta) * l.item()` and `beta ** (i + 1)` read `beta`: numbers where it is one
    assert ("number", frozenset({"beta"})) in entries
    # `l.item()` converts a row: a conversion whatever beta is
    assert ("convert", frozenset()) in entries
    # running values bound to numbers before the loop count as numbers
    rt, m = _plan(average_precision, torch.randn(8), torch.rand(8) < 0.5)
    entries = rt.number_ops[m.plan.loop_id]
    assert entries.count(("number", frozenset())) >= 3     # `tp / (rank + 1)`, `1 * int(..)`, `int(..)`
    assert ("convert", frozenset()) in entries              # `bool(labels[idx])`


def test_a_loop_of_tensor_operations_has_none():
    rt, m = _plan(scaled_rows, torch.randn(4, 3), torch.randn(3))
    assert m.plan.loop_id not in rt.number_ops or all(
        names == {"s"} for _, names in rt.number_ops[m.plan.loop_id])


def test_the_loop_is_estimated_cheaper_when_the_names_hold_numbers(costs):
    x = torch.rand(300)
    as_number = explain(ema_meter, x, 0.9).estimate
    as_tensor = explain(ema_meter, x, torch.tensor(0.9)).estimate
    assert as_number["python"] < as_tensor["python"] / 3


def test_a_cheap_loop_of_numbers_is_kept_by_the_estimate(costs):
    # 4 iterations of number arithmetic: the refined estimate picks the loop at once
    x = torch.rand(4)
    ex = explain(ema_meter, x, 0.9)
    assert ex.path == "python" and any("Python numbers are cheap" in n or "faster" in n for n in ex.notes)
    assert autovec(ema_meter)(x, 0.9) == pytest.approx(ema_meter(x, 0.9))


def test_refine_python_counts_each_class():
    est = {"python": 1.0, "vectorized": 0.5}
    entries = (("number", frozenset({"a"})), ("convert", frozenset()), ("number", frozenset()))
    c = cost.constants("cpu")
    got = cost.refine_python(est, 10, 5, entries, {"a": 2.0})
    cheap = 2 * (1 - cost._NUMBER_OP) + (1 - cost._CONVERT_OP)
    assert got["python"] == pytest.approx(10 * (c["py_iter"] + (5 - cheap) * c["py_op"]))
    # `a` a tensor: its operation costs a whole op
    got = cost.refine_python(est, 10, 5, entries, {"a": torch.tensor(2.0)})
    cheap = (1 - cost._NUMBER_OP) + (1 - cost._CONVERT_OP)
    assert got["python"] == pytest.approx(10 * (c["py_iter"] + (5 - cheap) * c["py_op"]))
    assert cost.refine_python(est, 10, 5, (), {}) is est


def test_a_decision_is_refined_once_and_only_before_any_timing():
    d = cost.Decision({"python": 1.0, "vectorized": 0.01}, 100)
    assert d.final is False and d.probe and d.vec
    d.refine({"python": 0.02, "vectorized": 0.01}, 100)
    assert d.refined and d.vec and not d.final and not d.probe     # not clear-cut now: both timed
    d2 = cost.Decision({"python": 1.0, "vectorized": 0.01}, 100)
    d2.vectorized_ran(0.02, 100)
    d2.refine({"python": 0.001, "vectorized": 0.01}, 100)
    assert d2.refined and d2.vec                                    # timed already: kept


def cosine_schedule(steps, warm, base):
    lrs = []
    for s in range(steps):
        if s < warm:
            lrs.append(base * (s + 1) / warm)
        else:
            lrs.append(base * 0.5 * (1 + math.cos(math.pi * (s - warm) / (steps - warm))))
    return lrs


def test_math_constants_are_numbers():
    rt, m = _plan(cosine_schedule, 20, 5, 1e-3)
    entries = rt.number_ops[m.plan.loop_id]
    # every operation, `math.pi * (s - warm)` and the `math.cos` of it included, is on numbers
    assert len(entries) == rt.ops[m.plan.loop_id]
    assert all(cls == "number" for cls, _ in entries)


def test_a_loop_of_numbers_alone_times_both_paths():
    # (its estimate, a tensor loop's constants, said 678 us for a loop of 13 us: it settled on the
    # batch, 160 us, and never timed the loop)
    entries = (("number", frozenset({"a"})), ("number", frozenset()))
    est = {"python": 1e-3, "vectorized": 1e-7}     # (clear-cut for the batch by the estimate alone)
    got = cost.refine_python(est, 100, 2, entries, {"a": 2})
    assert got["timed"] and got["python"] < est["python"]
    d = cost.Decision(got, 100)
    assert not d.final and not d.probe          # neither estimate decides: both paths timed
    # one operation on a tensor in the iteration: the estimate decides as before
    got = cost.refine_python(est, 100, 3, entries, {"a": 2})
    assert "timed" not in got


def test_a_schedule_settles_on_the_loop_by_timing(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    fast = autovec(cosine_schedule)
    for _ in range(40):
        assert fast(100, 10, 1e-3) == pytest.approx(cosine_schedule(100, 10, 1e-3), rel=1e-12)
    rt = fast._autovec_state.runtime
    (d,) = [d for (k, b), d in rt.decisions.items()]
    assert d.final and d.py_runs >= 1 and d.vec_runs >= 1     # decided by timings, not the estimate


def sines_of_list(x):
    out = []
    for v in x.tolist():
        out.append(math.sin(v))
    return out


def test_the_numbers_of_a_tolist_walk_cost_no_conversion():
    """(probeH: `for v in x.tolist()` is planned as `v = row.item()` over x's rows, and each was
    priced as a conversion: the loop's estimate was ten times its time, and the batch, which
    calls Python's math.sin per element, ran at 1.7x the loop's time without ever timing it)"""
    rt, m = _plan(sines_of_list, torch.randn(8, dtype=torch.float64))
    entries = rt.number_ops[m.plan.loop_id]
    assert len(entries) == rt.ops[m.plan.loop_id] and all(cls == "number" for cls, _ in entries)
    got = cost.refine_python({"python": 1e-3, "vectorized": 1e-7}, 100, rt.ops[m.plan.loop_id], entries, {})
    assert got.get("timed")         # (both paths timed on the bucket's first calls)


def _halving(x):
    c = 5.0
    for t in range(x.shape[0]):
        c = 0.5 * c + 1.0
    return c


def test_running_values_of_python_numbers_are_timed_against_the_loop(monkeypatch):
    # (probeR) no tensor's rows are read: the estimate's torch operation per step is far off, so
    # both paths are timed; the loop's tens of nanoseconds a step win at 1,500 steps
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    from autovec import autovec
    f = autovec(_halving)
    x = torch.zeros(1500)
    for _ in range(40):
        assert f(x) == pytest.approx(_halving(x), rel=1e-12)
    rt = f._autovec_state.runtime
    (d,) = rt.decisions.values()
    assert d.final and not d.vec


def dot_of_lists(a, b):
    s = 0
    for i in range(len(a)):
        s += a[i] * b[i]
    return s


def trapezoid_of_list(y, dx):
    s = 0.0
    for i in range(len(y) - 1):
        s += (y[i] + y[i + 1]) * dx / 2
    return s


@pytest.mark.parametrize("fn, make", [
    (dot_of_lists, lambda n: (torch.randn(n).tolist(), torch.randn(n).tolist())),
    (trapezoid_of_list, lambda n: (torch.randn(n).tolist(), 0.1)),
])
def test_operations_on_an_indexed_lists_numbers_are_cheap(fn, make, costs):
    # probeD: the estimate took `a[i] * b[i]` of lists of floats for torch operations (20 ms for
    # 5,000 steps that run in 0.2 ms) and settled on a batch slower than the loop; the elements'
    # operations now count as Python numbers, so both paths are timed
    rt, m = _plan(fn, *make(8))
    assert m.plan.loop_id in rt.element_ops
    args = make(5000)
    as_lists = explain(fn, *args).estimate
    as_tensors = explain(fn, *(torch.tensor(a) if isinstance(a, list) else a for a in args)).estimate
    assert as_lists["python"] < as_tensors["python"] / 3
    fast = autovec(fn)
    for _ in range(3):
        assert fast(*args) == pytest.approx(fn(*args))
