"""The decorator's contract: wrapping, options, check=True, explain's fields."""
import inspect

import pytest
import torch

import autovec
from autovec import EquivalenceError, assert_equivalent, autovec as av, explain
from autovec.runtime import FunctionRuntime


def rows_add(u, v):
    """Add two vectors element by element."""
    out = []
    for k in range(len(u)):
        out.append(u[k] + v[k])
    return torch.stack(out)


def double(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
    return out


def test_wrapper_keeps_name_doc_signature_and_original():
    f = av(rows_add)
    assert f.__name__ == "rows_add" and f.__doc__ == rows_add.__doc__
    assert f.__wrapped__ is rows_add
    assert inspect.signature(f) == inspect.signature(rows_add)
    assert autovec.is_autovec_wrapper(f)


def test_decorating_never_fails_and_options_are_checked():
    av(lambda x: x)          # analysed lazily, on the first call
    with pytest.raises(TypeError, match="expected a function"):
        av(object())         # not callable at all: a clear error, not a later surprise
    with pytest.raises(ValueError, match="fallback must be one of"):
        av(fallback="sometimes")
    with pytest.raises(ValueError, match="memory_budget"):
        av(memory_budget=-1)
    for bad in (True, 1.5, "1e9"):
        with pytest.raises(ValueError, match="whole number of bytes"):
            av(memory_budget=bad)
    import numpy as np
    for whole in (1e9, np.int64(10 ** 9)):
        assert av(memory_budget=whole)(lambda x: x)._autovec_state.memory_budget == 10 ** 9
    with pytest.raises(ValueError, match="check is True or False"):
        av(check="no")
    with pytest.raises(ValueError, match="strict is True or False"):
        av(strict=1)


def test_autovec_of_an_autovec_function_is_one_rewrite_with_the_outer_options():
    inner = av(double)
    outer = av(inner, strict=True)
    x = torch.randn(5, 3)
    torch.testing.assert_close(outer(x), double(x))
    assert outer.__wrapped__ is double and outer._autovec_state.strict
    assert [r.strategy for r in explain(outer).loops] == [r.strategy for r in explain(inner).loops] != []


def test_assert_equivalent_copies_a_bound_methods_object_and_every_random_generator():
    import random

    class Acc:
        def __init__(self):
            self.total = torch.zeros(())

        def step(self, x):
            for i in range(x.shape[0]):
                self.total = self.total + x[i].sum() * random.random()
            return self.total

    a = Acc()
    assert_equivalent(a.step, torch.randn(4, 3))        # (a false difference before: one self, two runs)
    assert a.total.item() == 0.0                        # the caller's object is untouched
    with pytest.raises(ValueError, match="trials"):
        assert_equivalent(a.step, torch.randn(4, 3), trials="2")


def test_explain_discards_what_the_function_prints_to_stderr(capsys):
    import sys

    def noisy(x):
        print("to stderr", file=sys.stderr)
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] + 1
        return out

    explain(noisy, torch.randn(3))
    assert capsys.readouterr().err == ""


def test_check_true_passes_when_equal_and_raises_on_a_wrong_rewrite(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    u, v = torch.randn(50), torch.randn(50)
    f = av(check=True)(rows_add)
    torch.testing.assert_close(f(u, v), u + v)
    real = FunctionRuntime.consume

    def broken(kind, o, *a, **k):
        return real(kind, o + 1e-2, *a, **k)
    monkeypatch.setattr(FunctionRuntime, "consume", staticmethod(broken))
    g = av(check=True)(rows_add)
    with pytest.raises(EquivalenceError, match="rows_add"):
        g(u, v)


def test_explain_fields():
    ex = explain(rows_add)
    assert ex.function == "rows_add" and ex.path is None and ex.estimate is None
    (loop,) = ex.loops
    assert loop.lineno == rows_add.__code__.co_firstlineno + 3
    assert loop.source.startswith("for k in range(len(u)):")
    assert loop.strategy == "broadcast" and loop.vectorized and loop.reason
    assert "---" in ex.diff and "+++" in ex.diff
    assert "u + v" in ex.rewritten_source
    text = str(ex)
    assert "strategy: broadcast" in text and "rewritten source" in text
    ex = explain(rows_add, torch.randn(5000), torch.randn(5000))
    assert ex.path == "vectorized" and set(ex.estimate) == {"python", "vectorized"}


def test_disable_switch(monkeypatch):
    monkeypatch.setenv("AUTOVEC_DISABLE", "1")
    assert explain(rows_add, torch.randn(5000), torch.randn(5000)).path == "python"


def test_cost_constants_are_measured_once_and_cached(monkeypatch, tmp_path):
    import json

    from autovec import cost
    monkeypatch.setattr(cost, "_constants", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("AUTOVEC_COSTS", raising=False)
    c = cost.constants()
    files = list((tmp_path / "autovec").glob("costs-*.json"))
    assert len(files) == 1 and set(json.loads(files[0].read_text())) <= set(c)
    assert all(v > 0 for v in c.values())
    # an explicit file wins, and its figures drive the decision
    override = tmp_path / "costs.json"
    override.write_text(json.dumps({"py_op": 1.0, "py_iter": 1.0}))   # a very slow interpreter
    monkeypatch.setattr(cost, "_constants", None)
    monkeypatch.setenv("AUTOVEC_COSTS", str(override))
    assert cost.worth("vmap", 2, cost.estimate("vmap", 2, 1))
    monkeypatch.setattr(cost, "_constants", None)


def test_unreadable_cost_settings_warn_and_a_broken_cache_is_measured_again(monkeypatch, tmp_path):
    # (probeK: a missing or invalid AUTOVEC_COSTS file and a corrupt cache were silently replaced
    # by the built-in constants, the cache for good)
    import json

    from autovec import cost
    monkeypatch.setattr(cost, "_constants", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for bad in (tmp_path / "missing.json", tmp_path / "invalid.json", tmp_path / "list.json"):
        if bad.name != "missing.json":
            bad.write_text("{not json" if bad.name == "invalid.json" else "[1, 2]")
        monkeypatch.setenv("AUTOVEC_COSTS", str(bad))
        monkeypatch.setattr(cost, "_constants", None)
        with pytest.warns(RuntimeWarning, match="AUTOVEC_COSTS"):
            assert cost.constants() == cost.DEFAULTS
    monkeypatch.delenv("AUTOVEC_COSTS")
    monkeypatch.setattr(cost, "_constants", None)
    cache = cost._cache_file("cpu")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text('{"py_iter": 1e-0')           # (cut short)
    c = cost.constants()
    assert set(json.loads(cache.read_text())) <= set(c) and c != cost.DEFAULTS
    monkeypatch.setattr(cost, "_constants", None)


def test_a_min_trip_that_is_no_number_warns_and_is_ignored(monkeypatch):
    from autovec import cost
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "many")
    monkeypatch.setattr(cost, "_WARNED_MIN_TRIP", set())
    with pytest.warns(RuntimeWarning, match="AUTOVEC_MIN_TRIP='many'"):
        assert cost.min_trip("vmap") is None
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1000")
    f = av(double)
    x = torch.randn(64, 4)
    torch.testing.assert_close(f(x), double(x))
    assert "AUTOVEC_MIN_TRIP=1000 keeps loops of fewer iterations on Python" in str(explain(f, x))


def test_cost_decisions_are_cached_per_power_of_two_bucket(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)

    f = av(double)
    for n in (3, 2, 700, 1000):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x), double(x))
    decisions = f._autovec_state.runtime.decisions
    assert set(decisions) == {(1, 2), (1, 10)}        # 2 and 3 share a bucket, 700 and 1000 another
    assert decisions[(1, 10)].vec is True             # a thousand rows: vectorized


def test_decision_is_the_model_verdict_when_lopsided():
    from autovec.cost import Decision
    from autovec.cost import _PROBES
    d = Decision({"python": 1e-3, "vectorized": 1e-5}, 100)
    assert not d.final and d.vec and d.choose() and d.probe == _PROBES    # (its first calls timed)
    d.vectorized_ran(2e-5, 100)                             # as fast as estimated, near enough
    assert d.final and d.vec and d.choose()
    d = Decision({"python": 1e-6, "vectorized": 1e-4})
    assert d.final and not d.vec and not d.choose()


def test_a_vectorized_verdict_slower_than_the_estimated_loop_times_the_loop():
    # the estimate counts the interpreter's work, not the rows': a heavy body under a rare
    # condition is computed on every row batched and on a few in the loop
    from autovec.cost import _LONG_RUN, _PY_RUNS, _RETRY, _VEC_RUNS, Decision
    d = Decision({"python": 10e-3, "vectorized": 1e-4}, 2000)
    assert d.choose()
    d.vectorized_ran(0.4, 2000)                     # (one slow call may be a garbage collection)
    assert not d.final and d.choose()
    d.vectorized_ran(0.7, 2000)                     # both far slower than the estimated 10 ms loop
    assert not d.final and not d.choose()           # the loop is timed next
    d.python_ran(0.9, 2000)                         # (the first run may pay one-time work)
    assert not d.final and not d.choose()
    d.python_ran(0.2, 2000)                         # a long run: timed well enough
    assert 0.2 >= _LONG_RUN and d.final and not d.vec and not d.choose()
    # (a passing load can mislead the probes: one more vectorized call after a while)
    waited = 0
    while d.wait():
        waited += 1
    assert waited == _RETRY - 1 and d.choose()
    d.vectorized_ran(0.6, 2000)                     # still slower than the timed loop: the loop, longer
    assert d.final and not d.vec and d.retry == 2 * _RETRY
    while d.wait():
        pass
    assert d.choose()
    d.vectorized_ran(0.01, 2000)                    # now faster than the loop: vectorized from now on
    assert d.final and d.vec and d.choose()
    d = Decision({"python": 10e-3, "vectorized": 1e-4}, 2000)
    d.choose()
    d.vectorized_ran(0.3, 2000)                     # slower than estimated (a pause), then
    d.choose()
    d.vectorized_ran(0.002, 2000)                   # as estimated: settled
    assert d.final and d.vec
    d = Decision({"python": 10e-3, "vectorized": 1e-4}, 2000)
    for _ in range(2):
        d.choose()
        d.vectorized_ran(0.05, 2000)                # slower than estimated, but
    for _ in range(2):
        assert not d.choose()
        d.python_ran(0.4, 2000)                     # the loop is slower still: vectorized
    assert d.final and d.vec and d.choose()
    d = Decision({"python": 1e-3, "vectorized": 1e-5}, 100)
    for _ in range(2):
        d.choose()
        d.vectorized_ran(5e-3, 100)                 # a short loop: timed as a close decision is
    for _ in range(_PY_RUNS):
        assert not d.choose()
        d.python_ran(2e-3, 100)
    for _ in range(_VEC_RUNS):
        assert d.choose()
        d.vectorized_ran(5e-3, 100)
    assert d.final and not d.vec


def test_close_decision_times_both_paths_and_keeps_the_faster():
    from autovec.cost import _PY_RUNS, _VEC_RUNS, Decision
    d = Decision({"python": 10e-6, "vectorized": 8e-6})     # the model leans vectorized
    seen = []
    for _ in range(_VEC_RUNS + _PY_RUNS + 6):
        vec = d.choose()
        seen.append(vec)
        if vec:
            d.vectorized_ran(30e-6, 4)          # in fact 30 us a call
        else:
            d.python_ran(12e-6, 4)              # against 12 us for the loop
    assert d.final and not d.vec
    v, p = _VEC_RUNS, _PY_RUNS
    assert seen[:v] == [True] * v and seen[v:v + p] == [False] * p and not any(seen[v + p:])
    d = Decision({"python": 10e-6, "vectorized": 8e-6})
    for _ in range(3):
        assert d.choose()
        d.vectorized_failed()                   # a guard refuses every call
    for _ in range(3):
        assert not d.choose()
        d.python_ran(12e-6, 4)
    assert d.final and not d.vec


def test_close_decision_waits_for_the_vectorized_steady_state():
    from autovec.cost import _PY_RUNS, _VEC_RUNS, _VEC_WARM, Decision
    d = Decision({"python": 10e-6, "vectorized": 8e-6})
    # a vectorized call warming up: slower than the loop for its first calls, 11 us once warm
    times = [60e-6, 40e-6, 30e-6, 24e-6, 20e-6, 18e-6] + [11e-6] * (_VEC_RUNS - 6)
    assert _VEC_WARM >= 2 and len(times) == _VEC_RUNS
    for t in times:
        assert d.choose()
        d.vectorized_ran(t, 4)
    for _ in range(_PY_RUNS):
        assert not d.choose()
        d.python_ran(16e-6, 4)                  # the loop: 16 us
    assert d.final and d.vec                    # 11 us once warm: vectorized
    d = Decision({"python": 10e-6, "vectorized": 8e-6})
    for t in [60e-6] * _VEC_WARM + [30e-6] * (_VEC_RUNS - _VEC_WARM):
        d.choose()
        d.vectorized_ran(t, 4)
    for _ in range(_PY_RUNS):
        d.choose()
        d.python_ran(16e-6, 4)
    assert d.final and not d.vec                # never faster than the loop: the loop


def test_a_vectorized_path_far_slower_than_the_timed_loop_stops_early():
    from autovec.cost import _FAR_RUNS, _FAR_SLOWER, _PY_RUNS, _VEC_RUNS, Decision
    d = Decision({"python": 8e-6, "vectorized": 10e-6})     # the model leans to the loop
    for _ in range(_PY_RUNS):
        assert not d.choose()
        d.python_ran(12e-6, 4)                  # 3 us an iteration
    for _ in range(_FAR_RUNS - 1):              # (the first calls may be writing a lane or an express)
        assert d.choose()
        d.vectorized_ran(_FAR_SLOWER * 13e-6, 4)
        assert not d.final
    d.vectorized_ran(_FAR_SLOWER * 13e-6, 4)    # all of them that slow: the loop, at once
    assert d.final and not d.vec and not d.choose()
    d = Decision({"python": 8e-6, "vectorized": 10e-6})
    for _ in range(_PY_RUNS):
        d.choose()
        d.python_ran(12e-6, 4)
    for t in [500e-6, 400e-6, 30e-6] + [11e-6] * (_VEC_RUNS - 3):   # one-time work, then 11 us
        assert d.choose()
        d.vectorized_ran(t, 4)
    assert d.final and d.vec                    # (one fast call among the first: timed to the end)
    d = Decision({"python": 8e-6, "vectorized": 10e-6})
    for _ in range(_PY_RUNS):
        d.choose()
        d.python_ran(12e-6, 4)
    for _ in range(_VEC_RUNS):                  # 4 times slower: timed to the end, as before
        assert d.choose()
        d.vectorized_ran(48e-6, 4)
    assert d.final and not d.vec


def test_timed_decision_settles_on_real_calls(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)

    def scale_rows(x, y):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * 2 + y[i]
        return out

    f = av(scale_rows)
    x, y = torch.randn(6, 3), torch.randn(6, 3)
    for _ in range(30):
        torch.testing.assert_close(f(x, y), scale_rows(x, y))
    (d,) = f._autovec_state.runtime.decisions.values()
    assert d.final                      # timed both ways (or the model was clear-cut)
    ex = explain(f, x, y)
    assert ex.path == ("vectorized" if d.vec else "python")


def test_a_loop_settled_by_refusals_says_so_not_that_python_was_timed_faster(monkeypatch):
    # (found by a probe: the note said "timings show the Python loop is faster (about 116 us
    # against 60 us)", the estimates of a loop whose vectorized path had never run)
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    from autovec.cost import Decision

    def scale_rows(x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * 2
        return out

    f = av(scale_rows)
    x = torch.randn(6, 3)
    f(x)
    rt = f._autovec_state.runtime
    d = Decision({"python": 10e-6, "vectorized": 8e-6})
    for _ in range(3):
        d.vectorized_failed()
    assert d.refused() and d.final and not d.vec
    rt.decisions[(1, (6).bit_length())] = d
    ex = explain(f, x)
    assert ex.path == "python"
    note = " ".join(ex.notes)
    assert "refused on 3 earlier calls" in note and "timings" not in note
    timed = Decision({"python": 10e-6, "vectorized": 8e-6})
    for _ in range(30):
        if timed.choose():
            timed.vectorized_ran(40e-6, 6)
        else:
            timed.python_ran(12e-6, 6)
    assert timed.final and not timed.vec and not timed.refused()
    rt.decisions[(1, (6).bit_length())] = timed
    note = " ".join(explain(f, x).notes)
    assert "timings of earlier calls show the Python loop is faster (about 12 us against 40 us)" in note


def test_a_list_of_tensors_costs_the_vectorized_path_per_element(monkeypatch):
    # each element of a list is checked and stacked: for a body as cheap as `.item()` the two
    # paths are close, so the decision times them instead of taking the model's verdict
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    from autovec.cost import Decision

    def item_total(xs):
        total = 0.0
        for v in xs:
            total += v.item()
        return total

    values = torch.rand(4000)
    on_list, on_tensor = explain(item_total, list(values)), explain(item_total, values)
    assert on_list.estimate["python"] == on_tensor.estimate["python"]
    assert on_list.estimate["vectorized"] > 5 * on_tensor.estimate["vectorized"]
    close, lopsided = Decision(on_list.estimate), Decision(on_tensor.estimate)
    assert not close.final and not close.probe and lopsided.probe     # (lopsided: its first calls timed)
    f = av(item_total)
    for _ in range(30):
        assert f(list(values)) == pytest.approx(item_total(list(values)), rel=1e-6)


def test_a_bucket_settled_by_refusals_tries_the_vectorized_path_again(monkeypatch):
    # (found by a probe: three calls refused for one signature, an input requiring grad or an
    # index out of range, kept every later call at that size on the loop for good)
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    from autovec.cost import _RETRY, Decision

    d = Decision({"python": 10e-6, "vectorized": 8e-6})
    for _ in range(3):
        d.vectorized_failed()
    assert d.final and not d.vec and d.retry == _RETRY
    waits = 0
    while d.wait():
        waits += 1
    assert waits == _RETRY - 1 and not d.final and d.vec and d.choose()
    for _ in range(3):
        d.vectorized_failed()
    assert d.final and d.retry == 2 * _RETRY        # twice as long the next time

    def gather(x, idx):
        out = []
        for i in range(idx.shape[0]):
            out.append(x[idx[i]] * 2 + 1)
        return torch.stack(out)

    f = av(gather)
    x = torch.randn(8, 3)
    bad = torch.tensor([0, 1, 2, 3, 4, 5, 6, 9])
    for _ in range(3):
        with pytest.raises(IndexError):
            f(x, bad)                          # the loop's own error, every time
    good = torch.arange(8).flip(0)
    for _ in range(4 * _RETRY):
        torch.testing.assert_close(f(x, good), gather(x, good))
    assert explain(f, x, good).path == "vectorized"


def test_refusals_count_for_a_bucket_the_estimate_settled(monkeypatch):
    # (found by a probe: an inner loop the estimate sent to the vectorized path, refused on every
    # call, paid for the attempt on every outer iteration: 4x the undecorated time)
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)

    def span_pool(h, starts, ends):
        out = torch.empty(starts.shape[0], h.shape[1])
        for i in range(starts.shape[0]):
            out[i] = h[starts[i]:ends[i]].mean(0)      # windows of several widths: refused
        return out

    f = av(span_pool)
    h, s, e = torch.randn(200, 8), torch.randint(0, 100, (64,)), torch.randint(101, 200, (64,))
    for _ in range(6):
        torch.testing.assert_close(f(h, s, e), span_pool(h, s, e))
    (d,) = f._autovec_state.runtime.decisions.values()
    assert d.final and not d.vec and d.retry > 0         # settled on the loop, to be tried again later


# (stop 22, the API probe)

def _gather_rows(x, idx, out):
    for i in range(idx.shape[0]):
        out[i] = x[idx[i]] * 2.0
    return out


def test_strict_lets_the_users_own_error_through(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    import traceback
    fast = av(_gather_rows, strict=True)
    x = torch.ones(64, 3)
    fast(x, torch.arange(64), torch.zeros(64, 3))
    bad = torch.zeros(64, dtype=torch.long)
    bad[10] = 99
    out = torch.zeros(64, 3)
    with pytest.raises(IndexError) as e:
        fast(x, bad, out)
    last = traceback.extract_tb(e.value.__traceback__)[-1]
    assert last.filename == __file__ and last.line.strip() == "out[i] = x[idx[i]] * 2.0"
    assert int((out[:, 0] != 0).sum()) == 10          # the rows before the error, as the loop writes


def _double_into(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * 2.0
    return out


def test_strict_and_check_report_a_refusal_as_one(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    from autovec.runtime import NotVectorizable
    fast = av(_double_into, strict=True, check=True)
    x = torch.randn(50, 3)
    fast(x, torch.zeros(50, 3))
    with pytest.raises(NotVectorizable, match="shares memory"):
        fast(x, x)


class _Handle:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _with_handle(x, name):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
    return out, _Handle(name), object()


def test_check_compares_objects_by_their_slots(monkeypatch):
    from autovec import EquivalenceError
    from autovec.equivalence import compare
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = av(_with_handle, check=True)
    x = torch.randn(40, 3)
    fast(x, "h")                                      # (no false difference)
    assert_equivalent(_with_handle, x, "h")
    assert "name" in compare(_Handle("a"), _Handle("b"))
    assert issubclass(EquivalenceError, AssertionError)


def _noisy_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
    return out + torch.randn(())


def test_explain_leaves_the_random_state_alone():
    x = torch.randn(40, 3)
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    explain(_noisy_rows, x)
    assert torch.equal(torch.rand(3), want)


@av
def _pickled_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 3
    return out


class _Scaler:
    def __init__(self, s):
        self.s = s

    @av
    def apply(self, x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * self.s
        return out


def test_decorated_functions_pickle_by_reference():
    import pickle
    f = pickle.loads(pickle.dumps(_pickled_rows))
    assert f is _pickled_rows
    m = pickle.loads(pickle.dumps(_Scaler(2.0).apply))
    x = torch.randn(5, 2)
    assert torch.equal(m(x), x * 2.0)


def test_decorating_a_class_is_a_clear_error():
    with pytest.raises(TypeError, match="class .*decorate its methods"):
        av(_Scaler)


def test_heavy_work_under_a_rare_condition_settles_on_the_loop(monkeypatch):
    # the estimate sees a cheap loop body; batched, the body runs on every row where the loop
    # runs it on a few: the timed calls find the loop faster and keep it from then on
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)

    def rare_rows(x, m, w):
        out = torch.zeros(x.shape[0], x.shape[1], w.shape[1])
        for i in range(x.shape[0]):
            if m[i]:
                out[i] = torch.tanh(x[i] @ w) @ w.T @ w
        return out

    # (one thread: on a busy machine a batch's threaded operations can stall for hundreds of
    # milliseconds, and a stalled loop run can look as slow as the batch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, w = torch.randn(1024, 32, 192), torch.randn(192, 192) / 14
    m = torch.zeros(1024, dtype=torch.bool)
    m[411] = True                                   # one row in a thousand: a hundredfold apart
    f = av(rare_rows)
    assert explain(rare_rows, x, m, w).path == "vectorized"      # the estimate alone: vectorized
    try:
        for _ in range(24):
            torch.testing.assert_close(f(x, m, w), rare_rows(x, m, w))
    finally:
        torch.set_num_threads(threads)
    (d,) = f._autovec_state.runtime.decisions.values()
    assert d.final and not d.vec


def test_a_doubted_verdict_settled_on_a_short_loop_is_probed_again_later():
    from autovec.cost import _FAR_RUNS, _PY_RUNS, _RETRY, Decision
    d = Decision({"python": 1e-3, "vectorized": 1e-5}, 100)
    for _ in range(2):
        d.choose()
        d.vectorized_ran(50e-3, 100)                # both far slower than the estimated 1 ms loop
    for _ in range(_PY_RUNS):
        assert not d.choose()
        d.python_ran(1e-3, 100)                     # a short loop: timed as a close decision is
    for _ in range(_FAR_RUNS):
        assert d.choose()
        d.vectorized_ran(50e-3, 100)
    assert d.final and not d.vec and d.retry == _RETRY      # the loop, and a probe after 32 calls
    while d.wait():
        pass
    assert d.choose()
    d.vectorized_ran(0.5e-3, 100)                   # the load passed: faster than the timed loop
    assert d.final and d.vec


def test_a_probe_close_to_the_estimated_loop_times_the_loop():
    # the estimate can be off by ten times for a loop of Python numbers (a learning-rate schedule
    # estimated at 355 us ran in 25 us; its batch took 210 us and stayed: probeL): a probe settles
    # the bucket on the vectorized path only where it is clearly faster than the estimated loop
    from autovec.cost import _PROBE_MARGIN, _PROBES, Decision
    est = {"python": 355e-6, "vectorized": 35e-6}
    d = Decision(est, 64)
    assert d.choose() and d.probe == _PROBES
    for _ in range(_PROBES):
        assert d.choose()
        d.vectorized_ran(210e-6, 64)              # faster than the estimated loop, not clearly
    assert not d.final and not d.choose()         # the loop is timed next
    d = Decision(est, 64)
    d.choose()
    d.vectorized_ran(355e-6 / _PROBE_MARGIN * 0.9, 64)     # clearly faster: settled at once
    assert d.final and d.vec


def test_a_schedule_of_python_numbers_settles_on_the_faster_loop():
    import math

    def warmup_cosine(total, warm, base):
        lrs = []
        for s in range(total):
            if s < warm:
                lrs.append(base * (s + 1) / warm)
            else:
                p = (s - warm) / max(1, total - warm)
                lrs.append(0.5 * base * (1 + math.cos(math.pi * p)))
        return torch.tensor(lrs)

    f = av(warmup_cosine)
    for _ in range(60):
        assert torch.equal(f(64, 10, 0.1), warmup_cosine(64, 10, 0.1))
    (d,) = f._autovec_state.runtime.decisions.values()
    assert d.py_runs > 0          # timed, not taken on the estimate's word (before: never timed)


def test_a_loop_far_slower_than_the_probed_batch_settles_at_its_second_run():
    # probeA: label smoothing's batch 1.2 ms against an estimated loop of 3 ms (not five times
    # faster: the loop is timed), which ran 15 ms a call: eight loops before the verdict
    from autovec.cost import Decision
    d = Decision({"python": 3e-3, "vectorized": 4e-5}, 2000)
    for _ in range(2):
        assert d.choose()
        d.vectorized_ran(1.2e-3, 2000)
    assert not d.choose()
    d.python_ran(30e-3, 2000)                      # (the first run may pay one-time work)
    assert not d.final and not d.choose()
    d.python_ran(15e-3, 2000)                      # far slower than any batch timed: settled
    assert d.final and d.vec and d.choose()
    d = Decision({"python": 3e-3, "vectorized": 4e-5}, 2000)
    for _ in range(2):
        d.choose()
        d.vectorized_ran(1.2e-3, 2000)
    d.python_ran(30e-3, 2000)
    d.python_ran(2e-3, 2000)                       # a close race: timed as before
    assert not d.final
