"""The public entry points: the @autovec decorator, explain(), and per-function state."""
from __future__ import annotations

import ast
import builtins
import contextlib
import dataclasses
import difflib
import functools
import logging
import numbers
import sys
import threading
import types
import weakref

import torch
from torch import Tensor

from . import fastast
from . import cost
from ._config import switches
from .analysis import analyze, blocked_by
from .analysis.hoist import (drop_loop_else, else_as_flag, float_totals, hoisted_walrus, named_iterables, named_receivers, returns_as_breaks, element_views, hoist_no_grad, merged_branch_stores, rectangular_nests, stored_recurrences,
                             strided_indices,
                             sunk_appends)
from .analysis.reversal import front_builds, reversed_walks, settle
from .analysis.unbind import unbind_walks
from . import foreach_rt, ragged_rt  # noqa: F401  (the foreach and ragged strategies' run-time methods)
from .analysis import foreach, pairs, ragged
from .analysis.pairs import pair_lists
from .codegen import Namer, all_names, build_function
from .plan import indexed
from .explain import Explanation, LoopReport
from .frontend import NoSource, capture, scope_lookup
from .compiled import Stepping
from .lowering import choose
from .lowering import compile as compile_lowering
from .purity import Env
from .rewrite import _parents, _replace, apply, namer_for
from . import runtime
from .runtime import FunctionRuntime, NotVectorizable

log = logging.getLogger("autovec")

_FALLBACKS = ("auto", "python", "compile")


def _unscanned(carried, infos, env) -> list:
    """The stored recurrences (analysis.hoist stored_recurrences) whose rewritten loop is not
    planned as a scan of its running value on its own: not planned, planned another way, part of
    a nest, or inside a loop that is planned or has a compiled step."""
    out = []
    for loop, original in carried:
        info = next((i for i in infos if (i.lineno, i.col) == (loop.lineno, loop.col_offset)), None)
        ok = info is not None and info.plan is not None and info.part_of is None
        if ok:
            m, _ = choose(info.plan, env)
            names = {s[0] for s in info.plan.scans}
            ok = m is not None and m.strategy == "scan" and all(c[0] in names for c in info.plan.carried)
        if ok:
            for other in infos:
                span = (other.plan.lineno, other.plan.end_lineno) if other.plan is not None else \
                    (other.step.lineno, other.step.end_lineno) if other.step is not None else None
                if other is not info and span is not None and span[0] <= loop.lineno <= span[1] and not (
                        span == (loop.lineno, loop.end_lineno) and other.col != loop.col_offset):
                    # (a loop on the same lines at another column is a copy beside it, not around
                    # it: frontend._IndexSplits' pieces, _NoneTests' answers)
                    ok = False
        if not ok:
            out.append((loop, original))
    return out


class FunctionState:
    """Everything autovec knows about one decorated function; built on the first call."""

    def __init__(self, fn, check=False, fallback="auto", strict=False, memory_budget=None):
        self.fn = fn
        self.check = check
        self.fallback = fallback
        self.strict = strict
        self.memory_budget = memory_budget
        self.compiled = None
        self.reports: list[LoopReport] = []
        self.rewritten_source = ""
        self.original_source = ""
        self.error: str | None = None
        self.runtime: FunctionRuntime | None = None
        self.steady = None     # set by prepare: the function a plain call runs
        self.assumed = None    # set by prepare: whether the builtins and modules the rewrite rests on hold
        self.code = getattr(fn, "__code__", None)     # the code the rewrite was made from

    # ------------------------------------------------------------------ build

    def prepare(self, raise_strict=True):
        if self.compiled is not None:
            return
        with _PREPARING:      # first calls from several threads: one rewrite, the others wait for it
            if self.compiled is None:
                self._prepare_once()
        if self.strict and self.error and raise_strict:
            raise NotVectorizable(self.error)

    def _prepare_once(self):
        try:
            self._prepare()
        except NotVectorizable as e:
            self.error = str(e)
            self.compiled = self.fn
        except NoSource as e:
            self.error = str(e)
            self.compiled = self.fn
        except Exception as e:  # an autovec bug must never break the user's program
            log.warning("autovec: could not rewrite %s (%s: %s); running the original",
                        getattr(self.fn, "__qualname__", self.fn), type(e).__name__, e)
            self.error = f"internal error while rewriting: {type(e).__name__}: {e}"
            self.reports = [LoopReport(r.lineno, r.source, "python", self.error) for r in self.reports]
            self.compiled = self.fn
        # what a plain call runs from now on (none where checking or a strict error decides)
        self.steady = None if self.check or (self.strict and self.error) else self.compiled

    def _prepare(self, unpaired=frozenset()):
        wrapped = getattr(self.fn, "__wrapped__", None)
        if wrapped is not None:
            raise NoSource(f"`{getattr(self.fn, '__qualname__', self.fn)}` is a wrapper made by another decorator "
                           f"(around `{getattr(wrapped, '__qualname__', wrapped)}`); autovec rewrites only the code "
                           "it is given, so put @autovec directly above the `def`")
        cap = capture(self.fn)
        env = Env(cap)
        self.original_source = cap.written or ast.unparse(cap.tree)
        written = {n.id for n in fastast.walk(cap.tree) if isinstance(n, ast.Name)}    # (the names it reads as written)
        # loops that update lists of tensors in place: `_foreach_` calls (analysis/foreach.py); loops
        # that pad a list of sequences into rows: masked stores (analysis/ragged.py). Each loop goes
        # on through the passes and the analysis below as the `else` of a stand-in `if`: where a
        # call's check refuses, the loop runs as the other strategies make it
        fe_plans = [] if blocked_by(cap, env) else foreach.find(cap, (foreach.match, ragged.match))
        slots = Namer(all_names(cap.tree))
        for k, p in enumerate(fe_plans):
            p.loop_id = _FOREACH_IDS + k
            p.slot = slots.new("autovec_special")   # (not `_av_`: those names block every loop)
            _stand_in(cap.tree, p)
        named_iterables(cap)  # `for i in torch.arange(n)` as `i_values = torch.arange(n); for i in i_values`
        named_receivers(cap)  # `for s, d in e.t().tolist()` as `e_t = e.t(); for s, d in e_t.tolist()`
        drop_loop_else(cap)   # `for ..: body else: tail` without a `break` as the loop followed by `tail`
        hoisted_walrus(cap)   # `if (n := x[i].norm()) > 1:` in a loop as `n = x[i].norm()`, then `if n > 1:`
        returns_as_breaks(cap)   # `for ..: if c: return v` as `returned = v; returning = True; break`, then a return
        else_as_flag(cap)     # `for ..: if c: break` + `else: tail` as `broke = True; break`, then `if not broke: tail`
        hoist_no_grad(cap)    # `for .. in range(..): with torch.no_grad(): ..` as the `with` around the loop
        merged_branch_stores(cap)   # `if c: out[k] = a else: out[k] = b` as `out[k] = a if c else b`
        float_totals(cap)     # `c = 0.0` and in the loop `c += 1` beside `c += 0.5`: `c += 1.0`
        # `for i ..: for j in range(i + 1, n)` as one loop over the triangle's (i, j) pairs, where
        # `i` and `j` only index (analysis/pairs.py); a nest whose flat loop is not planned is
        # analysed again as written (`unpaired`), as a masked rectangle where it is one
        paired = pair_lists(cap, unpaired)
        triangles = [(p.flat, p.original) for p in paired]
        triangles += rectangular_nests(cap)   # `for j in range(i + 1, n)` as a masked rectangle
        views = element_views(cap)           # `for row in x: row -= ..` as `x[k] -= ..` over range(len(x))
        triangles += views
        triangles += strided_indices(cap, [loop for loop, _ in triangles])   # `x[2 * i]` as `x[j]`, j by 2
        carried = stored_recurrences(cap)    # `out[t] = .. out[t - 1]` as a running value `out_prev`
        # (none of the loops moved above, nor a loop around or inside one: each of those goes back
        # as it was when its own move was made, which would drop these)
        moved = [loop for loop, _ in triangles + carried]
        fronts = front_builds(cap, moved)    # `lst.insert(0, v)` into a fresh list as appends, reversed after
        walks, walk_refusals = reversed_walks(cap, moved)   # `for r in reversed(x)` as `r = x[k]`, k reversed
        # `for xt in x.unbind(1)` as `xt = x[:, k]` (not in or around a reversed walk: each walk's
        # fallback is the loop as it was before any walk was moved)
        forward, forward_refusals = unbind_walks(cap, moved + [w.loop for w in walks])
        walks += forward
        walk_refusals.update(forward_refusals)
        infos = analyze(cap, env)
        refused = _unscanned(carried, infos, env)
        if refused:
            # the running value is bound only by the scan's own code: any other plan of that loop (or
            # of a loop around it) would run it unbound, so those loops go back as written, and the
            # analysis sees them so
            for loop, original in refused:
                parent = _parents(cap.tree).get(loop)
                if parent is not None:
                    _replace(parent, loop, original)
            carried = [c for c in carried if c not in refused]
            infos = analyze(cap, env)
        triangles += carried
        # a loop refused as written whose branch ends every way through in an append: that append
        # as one after the branch, and the loop analysed again
        sunk = sunk_appends(cap, moved + [w.loop for w in walks] + [f.loop for f in fronts],
                            {(info.lineno, info.col) for info in infos if info.plan is None and info.part_of is None})
        if sunk:
            triangles += sunk
            infos = analyze(cap, env)
        namer = namer_for(cap.tree)
        pieces, matches, reports, steps = [], {}, [], []
        nest_strategy = {}
        for info in infos:
            if info.part_of is not None:
                parent = nest_strategy.get(info.part_of, "python")
                reports.append(LoopReport(info.lineno, info.source, parent,
                                          f"rewritten as part of the loop nest at line {info.part_of}"))
                continue
            if info.plan is None:
                if info.step is not None and self.fallback != "python":
                    steps.append(info)
                    # "auto" compiles only where the cost model says it pays, per call: the loop is
                    # reported as Python, with the option in the reason (explain(fn, *args) tells)
                    reports.append(LoopReport(info.lineno, info.source,
                                              "compile" if self.fallback == "compile" else "python",
                                              compile_lowering.reason(info.step, info.refusal.reason, self.fallback)))
                    continue
                reports.append(LoopReport(info.lineno, info.source, "python", info.refusal.reason))
                continue
            m, module = choose(info.plan, env)
            if m is None:
                reports.append(LoopReport(info.lineno, info.source, "python", "no strategy matched"))
                continue
            pieces.append((info, module.lower(m, namer)))
            matches[info.plan.loop_id] = m
            nest_strategy[info.lineno] = m.strategy
            reports.append(LoopReport(info.lineno, info.source, m.strategy, m.reason))
        if fronts or walks or walk_refusals:
            # a reversed walk that is not vectorized itself goes back as written; a front-first list
            # goes back where no vectorized loop needs it
            pieces, steps = settle(cap, fronts, walks, walk_refusals, infos, pieces, steps, reports)
            matches = {info.plan.loop_id: matches[info.plan.loop_id] for info, _ in pieces}
        if paired:
            flat_planned = {(info.lineno, info.col) for info, _ in pieces}
            missed = {(p.flat.lineno, p.flat.col_offset) for p in paired} - flat_planned
            if missed:
                return self._prepare(unpaired | missed)
            for p in paired:
                at = next(k for k, r in enumerate(reports) if r.lineno == p.flat.lineno)
                r = reports[at]
                reports[at] = LoopReport(r.lineno, r.source, r.strategy,
                                         f"{r.reason}; the nest runs over the triangle's ({p.i}, {p.j}) pairs "
                                         f"alone, as one batch gathered by index")
                reports.append(LoopReport(p.inner_lineno, p.inner_source, r.strategy,
                                          f"rewritten as part of the loop nest at line {p.flat.lineno}"))
        self.reports = reports
        for p in fe_plans:
            at = next((j for j, r in enumerate(reports) if r.lineno == p.loop.lineno), None)
            p.other = at is not None and reports[at].vectorized
            other = f"; where a call's check refuses, {reports[at].strategy}: {reports[at].reason}" if at is not None else ""
            report = LoopReport(p.loop.lineno, p.header, p.strategy, p.reason + other)
            if at is None:
                reports.append(report)
            else:
                reports[at] = report
        reports.sort(key=lambda r: r.lineno)
        if self.strict:
            blocked = [r for r in reports if not r.vectorized]
            if blocked:
                r = blocked[0]
                raise NotVectorizable(f"{cap.filename}:{r.lineno}: {r.reason}")
        # a triangle (or an element view) that is not vectorized goes back as written (its rectangle
        # does more work; the element loop is the one the user wrote)
        planned = {(info.lineno, info.col) for info, _ in pieces}
        for outer, original in triangles:
            parent = _parents(cap.tree).get(outer)
            # (a loop inside another that went back as written is gone with it: that one holds the original)
            if parent is not None and (outer.lineno, outer.col_offset) not in planned:
                _replace(parent, outer, original)
        # a compiled step never sits inside (or around) a loop that is rewritten
        spans = [(info.plan.lineno, info.plan.end_lineno) for info, _ in pieces]
        kept = []
        for info in steps:
            if any(a <= info.lineno <= b or info.lineno <= a <= info.step.end_lineno for a, b in spans):
                k = next(i for i, r in enumerate(reports) if r.lineno == info.lineno)
                reports[k] = LoopReport(info.lineno, info.source, "python", info.refusal.reason)
            else:
                kept.append(info)
        steps = kept
        self.reports = reports
        if not pieces and not steps and not fe_plans:
            self.rewritten_source = self.original_source
            self.compiled = self.fn
            return
        lower_steps = [(info, functools.partial(compile_lowering.lower, info.step, namer=namer, runtime=namer.runtime))
                       for info in steps]
        rw = apply(cap.tree, pieces, lower_steps)
        for p in fe_plans:
            head, test, fast, display = p.lower(namer, namer.runtime)
            _put_back(rw.tree, p.slot, lambda old: head + [ast.copy_location(ast.If(test=test, body=fast, orelse=old.orelse), old)])
            _put_back(rw.display, p.slot, lambda old: display)
        self.runtime = FunctionRuntime(cap.qualname, matches, env.resolve)
        self.runtime.steps = {info.step.loop_id: Stepping(info.step, self.fallback) for info in steps}
        self.runtime.foreach = {p.loop_id: (p.loop.lineno, p.strategy, p.other) for p in fe_plans}
        self.runtime.layouts = {info.plan.loop_id: low.layout for info, low in pieces}
        # per indexed tensor of the guard's: whether a read before its first row is Python's index
        # from the end (not a unit slice's)
        self.runtime.wraps = {info.plan.loop_id: tuple(mp.wraps for mp in indexed(info.plan)) for info, _ in pieces}
        # the loops that read elements only later iterations write (Mapped.ahead: refused under autograd)
        self.runtime.ahead = {info.plan.loop_id for info, _ in pieces if any(mp.ahead for mp in info.plan.mapped)}
        # per indexed tensor: the conditions of the index under which the loop reads it (reach),
        # which the guard evaluates on iterations whose rows are past an end
        self.runtime.reach = {info.plan.loop_id: _reach_tests(info.plan) for info, _ in pieces
                              if any(mp.reach for mp in indexed(info.plan))}
        # the bodies the batched mode may rewrite, by (loop id, tag): the loop body under "", a
        # `break` condition's and running values' bodies under their own tags
        self.runtime.batchable = {(info.plan.loop_id, ""): low.body for info, low in pieces if low.body is not None}
        for info, low in pieces:
            self.runtime.batchable.update({(info.plan.loop_id, tag): b for tag, b in low.tagged.items()})
        self.runtime.xp_specs = {info.plan.loop_id: low.express for info, low in pieces if low.express != ()}
        self.runtime.ops = {info.plan.loop_id: _count_ops(info.plan) for info, _ in pieces}
        self.runtime.units = {info.plan.loop_id: cost.output_units(info.plan) for info, _ in pieces}
        for info, _ in pieces:
            before = _numbers_before(cap.tree, info.plan.lineno)
            numbers = cost.number_ops(info.plan, before)
            if numbers:
                self.runtime.number_ops[info.plan.loop_id] = numbers
            # (operations on an indexed list's elements, counted where it holds Python numbers)
            more = cost.element_ops(info.plan, before)
            if more:
                self.runtime.element_ops[info.plan.loop_id] = more
        # loops that update a tensor's elements in place as the loop walks it: under autograd the
        # loop's elements are views from unbind, which in-place methods raise on (FunctionRuntime.guard)
        at = {(loop.lineno, loop.col_offset) for loop, _ in views}
        self.runtime.element_views = frozenset(info.plan.loop_id for info, _ in pieces if (info.lineno, info.col) in at
                                               or getattr(info.plan, "row_copies", False))
        self.runtime.strict = self.strict
        self.runtime.memory_budget = self.memory_budget
        self.rewritten_source = ast.unparse(rw.display)
        # (of the names the analysis looked up, those the function reads as written or as
        # rewritten: `zip` of `for t, m in zip(x, m)`, the `len` and `min` of its rewritten header)
        read = written | {n.id for n in fastast.walk(cap.tree) if isinstance(n, ast.Name)}
        self.assumed = _assumptions(self.fn, {k: v for k, v in cap.assumed.items() if k in read or k in cap.rests_on})
        helpers = {p.helper: pairs.index_pairs for p in paired}
        self.compiled = build_function(self.fn, rw.tree, {namer.runtime: self.runtime, **helpers}, cap.filename)

    # ------------------------------------------------------------------ call

    def current(self) -> bool:
        """Whether the rewrite still matches the function: the same code object, defaults and
        keyword defaults (each can be reassigned on the original after decoration)."""
        fn, c = self.fn, self.compiled
        return c is None or c is fn or fn.__code__ is self.code and fn.__defaults__ is c.__defaults__ \
            and fn.__kwdefaults__ is c.__kwdefaults__

    def _refresh(self):
        fn, c = self.fn, self.compiled
        if fn.__code__ is not self.code:
            with _PREPARING:       # new code: a new rewrite, on this call
                self.code, self.compiled, self.steady, self.runtime = fn.__code__, None, None, None
                self.assumed = None
                self.reports, self.error = [], None
        elif c is not None and c is not fn:
            c.__defaults__, c.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__

    def __call__(self, args, kwargs):
        if switches.disabled or _compiling():
            return self.fn(*args, **kwargs)     # (torch.compile traces the original: see AutovecFunction)
        if not self.current():
            self._refresh()
        if self.compiled is None:
            self.prepare()
        elif self.strict and self.error:
            raise NotVectorizable(self.error)
        if self.assumed is not None and not self.assumed():
            return self.fn(*args, **kwargs)     # (a builtin or module the rewrite rests on is rebound)
        _see_device(self.runtime, args)
        if self.check or switches.check:
            return self._checked(args, kwargs)
        return self.compiled(*args, **kwargs)

    def _checked(self, args, kwargs):
        from .equivalence import EquivalenceError, _RngState, clone_args, compare

        if self.compiled is self.fn:
            return self.fn(*args, **kwargs)   # nothing rewritten: nothing to compare (and one run's effects)
        ref_args, ref_kwargs = clone_args(args, kwargs)
        rng = _RngState()
        try:
            expected = self.fn(*ref_args, **ref_kwargs)
        except Exception as e:
            expected_exc = e
        else:
            expected_exc = None
        rng.restore()   # the rewrite draws the same random numbers the original drew
        try:
            got = self.compiled(*args, **kwargs)
        except NotVectorizable:
            raise      # (strict: a refusal, not a difference)
        except Exception as e:
            if expected_exc is None or type(e) is not type(expected_exc) or str(e) != str(expected_exc):
                raise EquivalenceError(f"{self.fn.__qualname__}: the rewrite raised {type(e).__name__}: {e}"
                                       + (f" but the original raised {type(expected_exc).__name__}: {expected_exc}"
                                          if expected_exc else " but the original returned")) from e
            raise
        if expected_exc is not None:
            raise EquivalenceError(f"{self.fn.__qualname__}: the original raised {type(expected_exc).__name__}: "
                                   f"{expected_exc}, the rewrite returned") from expected_exc
        diff = compare(expected, got, path="result")
        if diff is None:
            diff = compare(list(ref_args), list(args), path="arguments after the call")
        if diff is None:
            diff = compare(ref_kwargs, kwargs, path="keyword arguments after the call")
        if diff is not None:
            raise EquivalenceError(f"{self.fn.__qualname__}: {diff}")
        return got


# ----------------------------------------------------------------------------- decorator

_RAN = {"batched": "whole-batch torch operations (a batched body, no vmap)", "vmap": "torch.func.vmap",
        "broadcast": "one call on whole tensors (broadcasting)", "direct": "batched matrix products",
        "einsum": "one einsum over the nest's levels (a sum of products, no product per iteration)"}


_EXPLAINING = threading.RLock()
_PREPARING = threading.RLock()     # (reentrant: a rewrite may call another decorated function)
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


class _Quiet:
    """sys.stdout / sys.stderr while explain runs the function: what explain's own thread writes
    is dropped, what other threads write goes through (a plain redirect would drop theirs too,
    and two overlapping redirects could leave the stream redirected for good)."""

    def __init__(self, real):
        self._real = real

    def write(self, text):
        if threading.get_ident() == _QUIET_THREAD:
            return len(text)
        return self._real.write(text)

    def flush(self):
        if threading.get_ident() != _QUIET_THREAD:
            self._real.flush()

    def __getattr__(self, name):
        return getattr(self._real, name)


_QUIET_THREAD = None    # the thread whose output explain drops now (one explain at a time)
# each stream's proxy, kept for good: print() in another thread reads sys.stdout as a borrowed
# reference (CPython 3.11), and a proxy freed right after explain puts the stream back crashed it
_PROXIES: dict = {}


def _proxy(stream):
    if stream is None or isinstance(stream, _Quiet):
        return stream
    hit = _PROXIES.get(id(stream))
    if hit is None or hit[0] is not stream:
        hit = _PROXIES[id(stream)] = (stream, _Quiet(stream))
    return hit[1]


@contextlib.contextmanager
def _quiet_this_thread():
    global _QUIET_THREAD
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _proxy(out), _proxy(err)
    _QUIET_THREAD = threading.get_ident()
    try:
        yield
    finally:
        _QUIET_THREAD = None
        sys.stdout, sys.stderr = out, err


_FOREACH_IDS = 10_000     # (foreach loops' ids: apart from the planned loops' and compiled steps')


def _stand_in(tree, plan):
    """Put a foreach or ragged loop in the `else` of `if <slot>(): pass`: the passes and the
    analysis see the loop where it is (planned by the other strategies, or kept), and _put_back
    finds the `if` by its test."""
    parent = _parents(tree)[plan.loop]
    test = ast.Call(func=ast.Name(id=plan.slot, ctx=ast.Load()), args=[], keywords=[])
    node = ast.If(test=test, body=[ast.Pass()], orelse=[plan.loop])
    for n in (node, test, test.func, node.body[0]):
        ast.copy_location(n, plan.loop)
    _replace(parent, plan.loop, node)


def _put_back(tree, slot, make):
    """Replace the stand-in `if` whose test calls `slot` with make(that if)."""
    for node in fastast.walk(tree):
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):
                for k, v in enumerate(value):
                    if isinstance(v, ast.If) and isinstance(v.test, ast.Call) and isinstance(v.test.func, ast.Name) \
                            and v.test.func.id == slot:
                        value[k:k + 1] = make(v)
                        return
    raise LookupError(f"{slot} not found")


def _see_device(rt, args):
    """The device kind of the first tensor argument picks the cost model's constants and
    decisions (the CPU's, or a GPU's) for this call."""
    for a in args:
        t = type(a)
        if t is Tensor or t not in _NOT_TENSORS and isinstance(a, Tensor):
            if rt is not None and (not a.is_cpu or rt.kind != "cpu"):
                rt.set_kind("cpu" if a.is_cpu else a.device.type)
            return


# argument types that are never tensors: _see_device passes them without an isinstance
_NOT_TENSORS = frozenset({list, tuple, dict, int, float, bool, str, type(None)})


def _assumptions(fn, assumed: dict):
    """A check that the names the rewrite found to be builtins or modules (frontend.Captured.assumed)
    still are, resolved as `fn` resolves them (a closure cell, its globals, then its builtins),
    written out as one expression (about 30 ns a name on each call); None where there are none.
    A name rebound after the first call (`sum = 0` in a notebook, `max` redefined, `builtins.len`
    patched) runs the function as written, which is what it computes then."""
    if not assumed:
        return None
    code = fn.__code__
    g = fn.__globals__
    b = g.get("__builtins__", builtins)
    bd = b if isinstance(b, dict) else vars(b)
    consts = {"G": g, "B": bd}
    terms = []
    for k, (name, obj) in enumerate(assumed.items()):
        consts[f"O{k}"] = obj
        if "." in name:
            # (an attribute of a module the rewrite rests on, `itertools.product`: frontend._ProductNests)
            head, attr = name.split(".", 1)
            holder = scope_lookup(fn, head)[1]
            consts[f"M{k}"] = holder
            terms.append(f"getattr(M{k}, {attr!r}, None) is O{k}")
            continue
        if name in code.co_freevars and fn.__closure__ is not None:
            consts[f"C{k}"] = fn.__closure__[code.co_freevars.index(name)]
            terms.append(f"C{k}.cell_contents is O{k}")
        elif name in g:
            terms.append(f"G.get({name!r}) is O{k}")
        else:
            terms.append(f"{name!r} not in G and B.get({name!r}) is O{k}")
    src = "def held():\n    try:\n        return " + " and ".join(terms) + "\n    except ValueError:\n        return False\n"
    ns = dict(consts)
    exec(compile(src, f"<autovec assumptions {getattr(fn, '__qualname__', '?')}>", "exec"), ns)
    return ns["held"]


def _count_ops(plan) -> int:
    """Operations in one iteration, for the cost model: calls, arithmetic and subscripts."""
    n = 0
    for text in plan.body:
        for node in fastast.walk(ast.parse(text)):
            n += isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Subscript))
    return max(n, 1)


def _numbers_before(tree, lineno) -> frozenset:
    """Names the function binds to Python numbers before line `lineno` (`avg = 0.0`, `tp = 0`,
    `npos = labels.sum().item()`), as its last binding before that line: what the cost model
    takes a loop's running values to be (cost.number_ops; only an estimate)."""
    found: dict = {}
    for node in fastast.walk(tree):
        if isinstance(node, ast.Assign) and node.lineno < lineno and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            v = node.value
            num = isinstance(v, ast.Constant) and type(v.value) in (int, float) or \
                isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "item" \
                or isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("int", "float", "len")
            prev = found.get(node.targets[0].id)
            if prev is None or prev[0] < node.lineno:
                found[node.targets[0].id] = (node.lineno, num)
    return frozenset(k for k, (_, num) in found.items() if num)


def _reach_tests(plan):
    """runtime.reach's entry of a loop: (each indexed tensor's Mapped.reach, parsed, or None;
    the loop index's name; each free name's position in the generated code's `free`)."""
    tests = tuple(ast.parse(mp.reach, mode="eval").body if mp.reach else None for mp in indexed(plan))
    return tests, plan.space.index, {name: k for k, name in enumerate(plan.free)}


def autovec(fn=None, *, check=False, fallback="auto", strict=False, memory_budget=None):
    """Rewrite the loops of `fn` into batched torch code where that is provably the same
    computation; everything else runs the original code. See API.md."""
    if fallback not in _FALLBACKS:
        raise ValueError(f"autovec: fallback must be one of {', '.join(_FALLBACKS)}, not {fallback!r}")
    if memory_budget is not None:
        whole = isinstance(memory_budget, numbers.Integral) or (
            isinstance(memory_budget, float) and memory_budget.is_integer())
        if isinstance(memory_budget, bool) or not whole or memory_budget <= 0:
            raise ValueError(f"autovec: memory_budget is a whole number of bytes above 0 (e.g. 2**30), "
                             f"not {memory_budget!r}")
        memory_budget = int(memory_budget)
    for flag, value in (("check", check), ("strict", strict)):
        if not isinstance(value, bool):
            raise ValueError(f"autovec: {flag} is True or False, not {value!r}")
    options = dict(check=check, fallback=fallback, strict=strict, memory_budget=memory_budget)
    if fn is None:
        return functools.partial(autovec, **options)
    if isinstance(fn, staticmethod):
        return staticmethod(autovec(fn.__func__, **options))
    if isinstance(fn, classmethod):
        return classmethod(autovec(fn.__func__, **options))
    if isinstance(fn, type):
        raise TypeError(f"autovec: expected a function, got the class {fn.__qualname__} (decorate its methods "
                        "instead)")
    if not callable(fn):
        raise TypeError(f"autovec: expected a function, got {type(fn).__name__}")
    if isinstance(fn, AutovecFunction):
        # `autovec(autovec(f))`: one rewrite of f, with the outer options
        return AutovecFunction(fn.__wrapped__, FunctionState(fn.__wrapped__, **options))
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        # `autovec(model.conv)`: the method's function, rewritten, bound to the same instance
        return _BoundAutovec(AutovecFunction(fn.__func__, FunctionState(fn.__func__, **options)), fn.__self__)
    return AutovecFunction(fn, FunctionState(fn, **options))


class AutovecFunction:
    """What @autovec returns: calls like the original (functools.wraps'd), binds like a
    function when used as a method, and has `.explain(*args)`."""

    def __init__(self, fn, state: FunctionState):
        functools.update_wrapper(self, fn)
        self._autovec_state = state

    def __call__(self, *args, **kwargs):
        if _compiling():
            # torch.compile tracing this call: the original function, which it traces as written
            # (autovec's own bookkeeping would break its graph, or fail fullgraph=True)
            return self.__wrapped__(*args, **kwargs)
        st = self._autovec_state
        c = st.steady
        if c is not None and switches.plain() and (st.assumed is None or st.assumed()):
            fn = st.fn
            if c is fn or fn.__code__ is st.code and fn.__defaults__ is c.__defaults__ \
                    and fn.__kwdefaults__ is c.__kwdefaults__:
                # the steady state, in as few steps as possible (_see_device's common case inline:
                # a CPU tensor first, on a runtime that has the CPU's constants)
                a = args[0] if args else None
                if type(a) is not Tensor or not a.is_cpu or st.runtime is not None and st.runtime.kind != "cpu":
                    _see_device(st.runtime, args)
                return c(*args, **kwargs)
        return st(args, kwargs)

    def __get__(self, obj, objtype=None):
        return self if obj is None else _BoundAutovec(self, obj)

    def __reduce__(self):
        # pickled by reference, as a function is (its module and qualified name): multiprocessing's
        # spawn, DataLoader workers
        return self.__qualname__

    def explain(self, *args, **kwargs):
        return explain(self, *args, **kwargs)

    def __repr__(self):
        return f"<autovec {getattr(self, '__qualname__', self.__wrapped__)!r}>"


class _BoundAutovec:
    """An @autovec method bound to its instance."""

    def __init__(self, fn: AutovecFunction, obj):
        self.__func__, self.__self__ = fn, obj
        self.__wrapped__ = types.MethodType(fn.__wrapped__, obj)
        self.__name__ = getattr(fn, "__name__", "")
        self.__qualname__ = getattr(fn, "__qualname__", "")
        self.__doc__ = fn.__doc__
        self._autovec_state = fn._autovec_state

    def __call__(self, *args, **kwargs):
        return self._autovec_state((self.__self__,) + args, kwargs)

    def __reduce__(self):
        return getattr, (self.__self__, self.__name__)

    def explain(self, *args, **kwargs):
        return explain(self.__func__, self.__self__, *args, **kwargs)


def is_autovec_wrapper(obj) -> bool:
    return isinstance(getattr(obj, "_autovec_state", None), FunctionState)


_plain_states: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _state_of(fn) -> FunctionState:
    if is_autovec_wrapper(fn):
        return fn._autovec_state
    if isinstance(fn, (staticmethod, classmethod)):
        fn = fn.__func__
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    try:
        state = _plain_states.get(fn)
    except TypeError:
        state = None
    if state is None:
        state = FunctionState(fn)
        try:
            _plain_states[fn] = state
        except TypeError:
            pass
    return state


def _concrete_products(text: str, seen: dict) -> str:
    """With example arguments the ranks are known: show `@` products as the einsum that ran."""
    import re

    def sub(m):
        kind, a, la, b, lb = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
        spec = seen.get((kind, ast.literal_eval(la), ast.literal_eval(lb)))
        return f"torch.einsum({spec!r}, {a}, {b})" if spec else m.group(0)
    return re.sub(r"autovec\.runtime\.mm\('(\w+)', (\w[\w\.]*), (\([\d, ]*\)), (\w[\w\.]*), "
                  r"(\([\d, ]*\)), _av_sizes\)", sub, text)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def explain(fn, *args, **kwargs) -> Explanation:
    """What autovec does with `fn`: each loop, the strategy and why, the rewritten source and
    a diff. With arguments, also which path a call with them takes (the function runs once,
    on copies of the arguments, with its printed output discarded)."""
    bound_self = None
    if isinstance(fn, (types.MethodType, _BoundAutovec)):
        bound_self, fn = fn.__self__, fn.__func__
    state = _state_of(fn)
    state.prepare(raise_strict=False)
    name = getattr(state.fn, "__qualname__", repr(state.fn))
    loops = list(state.reports)
    notes = [state.error] if state.error else []
    diff = "".join(difflib.unified_diff(
        (state.original_source + "\n").splitlines(True), (state.rewritten_source + "\n").splitlines(True),
        fromfile=f"{name} (original)", tofile=f"{name} (autovec)")) if state.rewritten_source != state.original_source else ""
    ex = Explanation(name, loops, state.rewritten_source or state.original_source, diff, notes=notes)
    if not args and not kwargs:
        return ex
    if bound_self is not None:
        args = (bound_self,) + args
    if switches.disabled:
        ex.path = "python"
        ex.notes.append("AUTOVEC_DISABLE is set: every call runs the original code")
        return ex
    rt = state.runtime
    if rt is None:
        ex.path = "python"
        return ex
    from .equivalence import _RngState, clone_args

    a, k = clone_args(args, kwargs)
    rng = _RngState()     # (the call's random numbers are not the caller's: the state is put back)
    with _EXPLAINING:     # one explain at a time (its record and its quieted output are shared)
        rt.events, rt.events_thread = [], threading.get_ident()
        rt.chunked.clear()
        rt.kept.clear()
        rt.batched_seen.clear()
        try:
            with _quiet_this_thread():
                state.compiled(*a, **k)
        except Exception as e:
            ex.notes.append(f"the call raised {type(e).__name__}: {e}")
        finally:
            events, rt.events, rt.events_thread = rt.events, None, None
            rng.restore()
    last = {}
    for loop_id, path, reason, _ in events:
        if path != "estimate":
            last[loop_id] = path   # a loop's final word: a later failure overrides an earlier phase
    ex.path = ("vectorized" if "vectorized" in last.values() else
               "compile" if "compile" in last.values() else "python")
    ex.rewritten_source = _concrete_products(ex.rewritten_source, rt.mm_seen)
    estimate = {"python": 0.0, "vectorized": 0.0}
    by_line = {}
    compile_notes = {}
    timed = {}
    for loop_id, path, reason, est in events:
        lineno = rt.matches[loop_id].plan.lineno if loop_id in rt.matches else \
            rt.foreach[loop_id][0] if loop_id in rt.foreach else rt.steps[loop_id].plan.lineno
        if loop_id in rt.foreach and path == "python":
            # (the loop then runs as the other strategies make it: their word on the line follows)
            ex.notes.append(f"line {lineno}: the {rt.foreach[loop_id][1]} form does not take this call: {reason}")
            continue
        if path != "estimate":
            by_line[lineno] = (path, reason)
        if loop_id in rt.steps and path in ("python", "compile"):
            compile_notes[lineno] = (path, reason, rt.steps[loop_id])
        if est:
            for key in estimate:
                estimate[key] += est.get(key, 0.0)
            if "measured python" in est and path == "estimate" or "measured python" in est and lineno not in timed:
                timed[lineno] = (est["measured python"], est["measured vectorized"])
    for k2, r in enumerate(ex.loops):
        if r.lineno in by_line and by_line[r.lineno][0] == "vectorized" and by_line[r.lineno][1] in _RAN \
                and r.vectorized:      # (not a loop kept as written on the same line: a split range's fallback)
            ex.loops[k2] = r = dataclasses.replace(r, ran=_RAN[by_line[r.lineno][1]])
        if r.lineno in by_line and by_line[r.lineno][0] == "python" and r.vectorized:
            ex.notes.append(f"line {r.lineno}: this call keeps the Python loop: {by_line[r.lineno][1]}")
        elif r.lineno in by_line and r.strategy == "broadcast" and by_line[r.lineno][1] == "vmap":
            ex.notes.append(f"line {r.lineno}: the slices did not align for broadcasting; ran as vmap")
    for lineno, (path, reason, st) in compile_notes.items():
        if path == "compile":
            timing = (f"; measured {st.step_s[1] * 1e6:.0f} us a step compiled against {st.step_s[0] * 1e6:.0f} us "
                      "in Python" if st.step_s else "")
            took = f" (the compile took {st.compile_s:.2f} s)" if st.compile_s is not None else ""
            ex.notes.append(f"line {lineno}: this call runs the loop body as a torch.compile'd step{took}{timing}")
        else:
            ex.notes.append(f"line {lineno}: not compiled for this call: {reason}")
    for lineno, (py, vec) in sorted(timed.items()):
        # (a path not timed yet: the model's estimate decided without it)
        ex.notes.append(f"line {lineno}: timed on earlier calls at this size: python "
                        f"{'not timed' if py == float('inf') else f'{py * 1e6:.0f} us'}, "
                        f"vectorized {'not timed' if vec == float('inf') else f'{vec * 1e6:.0f} us'}")
    for loop_id, code in rt.batched_seen.items():
        lineno = rt.matches[loop_id].plan.lineno
        if last.get(loop_id) != "vectorized":
            continue
        if isinstance(code, str):
            ex.notes.append(f"line {lineno}: ran under vmap (no whole-batch form: {code})")
        else:
            ex.notes.append(f"line {lineno}: ran as whole-batch torch operations (no vmap), batch first:\n"
                            + code.source)
    for loop_id, (chunks, rows, need, budget, fresh) in rt.chunked.items():
        why = (f"on the CPU, a batch over {_mib(runtime._FRESH_SPLIT)} runs in pieces of about {_mib(budget)}, "
               "which reuse their memory where the whole batch's would be new pages") if fresh else \
            f"the memory budget is {_mib(budget)}"
        ex.notes.append(f"line {rt.matches[loop_id].plan.lineno}: ran in {chunks} chunks of {rows} iterations "
                        f"(all at once would need about {_mib(need)} for intermediates; {why})")
    for loop_id, (k, n, grad) in rt.kept.items():
        plan = rt.matches[loop_id].plan
        if last.get(loop_id) != "vectorized":
            continue
        if plan.two_way:
            counts = ", ".join(str(c) for c in k) if len(k) > 2 else f"{k[0]} where it holds, {k[1]} where it does not"
            ex.notes.append(f"line {plan.lineno}: " + ("tensors require grad" if grad else "the batch of all sides "
                            "over every row failed on an earlier call") + f": the condition ran for all {n} "
                            f"iterations first, without grad, then each side of the branch on its own rows alone "
                            f"({counts}): no row computes a side the loop skips in it (the rewritten source "
                            "shows the batch of `where` that runs without grad)")
        elif grad:
            ex.notes.append(f"line {plan.lineno}: tensors require grad: the condition ran for all "
                            f"{n} iterations without grad, then the body with grad on the {k} kept ones alone (an "
                            "iteration the loop skips sends nothing into the gradients)")
        else:
            ex.notes.append(f"line {plan.lineno}: the body's batch over every row failed on an "
                            f"earlier call: the condition ran for all {n} iterations first, then the body on the {k} "
                            "kept ones alone (it never meets a row the loop skips)")
    ex.estimate = estimate if any(estimate.values()) else None
    return ex
