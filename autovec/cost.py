"""The cost model: when a vectorized path is worth its fixed cost.

Machine constants (interpreter cost of one small torch operation, one batched operation, a
vmap call) are measured once per device kind (the CPU, and each accelerator model the tensors
are on), in a few tens of milliseconds, and cached per torch version, machine and device under
$XDG_CACHE_HOME/autovec (or ~/.cache/autovec). Overrides:
AUTOVEC_MIN_TRIP=<n> (a plain trip-count threshold) and AUTOVEC_COSTS=<file.json> (constants).
"""
from __future__ import annotations

import json
import platform
import time
import warnings
from pathlib import Path

from . import fastast
from ._config import env as _env, unset as _unset

# Used when nothing can be measured; figures from a 2-thread CPU with torch 2.13.
DEFAULTS = {"py_iter": 1.0e-6, "py_op": 0.8e-6, "op": 5e-6, "vmap_call": 25e-6, "own_op": 2e-6,
            "byte_hot": 0.04e-9, "byte_fresh": 0.2e-9}
# autovec's own work per vectorized call (guards, slicing, conversions), in units of one small
# torch op: a base, and what each kind of output adds (a store checks bounds, strides and
# aliasing and fits the value; an accumulator converts the loop's types). Calibrated on this
# project's cases (measured: ~8 us for a broadcast append, ~20 us for a store, at 1.8 us an op).
_BASE = 3.0
_OUTPUT_UNITS = {"store": 5.0, "scatter": 5.0, "accum": 5.0, "best": 5.0, "last": 4.0, "cat": 5.0,
                 "scan": 6.0, "linrec": 8.0, "append": 1.0}
# one batched operation of a small body, in small-op units (whole-tensor ops on a few rows)
_BATCHED_OP = 0.6
# one element of a list of tensors the loop walks: its check in the guard and its share of
# torch.stack, in small-op units (measured: about 1 us an element, at 2 us an op)
_LIST_ELEMENT = 0.5
# under vmap every operation also goes through a batching rule
_VMAP_OP = 1.5
_constants: dict | None = None     # device kind -> constants


def _device_name(kind: str) -> str:
    """The accelerator's model for the cache file's name ('' on the CPU)."""
    if kind == "cpu":
        return ""
    try:
        mod = getattr(__import__("torch"), kind)
        return "-" + mod.get_device_name().replace(" ", "_")
    except Exception:
        return ""


def _cache_file(kind: str = "cpu") -> Path:
    import torch
    base = Path(_env("XDG_CACHE_HOME") or Path.home() / ".cache") / "autovec"
    where = "" if kind == "cpu" else f"-{kind}{_device_name(kind)}"
    tag = f"{torch.__version__}-{platform.machine()}-{platform.python_version()}{where}".replace("/", "_")
    return base / f"costs-v4-{tag}.json"   # v4: bytes (byte_hot, byte_fresh); v3: vmap_call without torch.func's wrapper


def _measure(kind: str = "cpu") -> dict:
    """Time a handful of tiny operations on a device of this kind (about 30 ms in all on the CPU);
    best of several runs. On an accelerator the times are the host's (launches), synchronised
    before and after each run: what a loop of small operations waits for."""
    import torch

    x = torch.randn(8, device=kind)
    sync = getattr(getattr(torch, kind, None), "synchronize", None) if kind != "cpu" else None

    def best(fn, reps):
        out = float("inf")
        for _ in range(5):
            if sync:
                sync()
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            if sync:
                sync()
            out = min(out, (time.perf_counter() - t) / reps)
        return out

    def loop():
        for i in range(8):
            x[i] * 2.0

    py = best(loop, 20) / 8                      # one iteration: index + multiply
    op = best(lambda: x * 2.0, 200)
    from .runtime import vmap_call
    vm = best(lambda: vmap_call(lambda a: (a * 2.0,), (x,), (0,), 8), 50)
    # a loop body mixes cheap steps (indexing, comparisons) with real ops: about half an op each
    out = {"py_iter": max(py - 2 * op, 0.2e-6), "py_op": op * 0.45, "op": op * 1.3, "vmap_call": vm,
           "own_op": op}
    if kind == "cpu":
        out.update(_bytes())
    else:
        # autovec's own per-call work (guards, slicing) runs on the host: the CPU's small op
        out["own_op"] = constants("cpu")["own_op"]
        out["batch_op"] = op      # one batched operation: one launch on the device
    return out


def _bytes() -> dict:
    """Seconds per byte an operation writes (about 20 ms): into memory it reuses (a 1 MB result,
    which a loop's iterations make one after another), and into fresh memory (a 64 MB result,
    which a batch of many iterations makes: above the C allocator's largest reused block, so
    its pages are mapped and zeroed on first touch)."""
    import torch

    def per_byte(n, reps):
        a = torch.ones(n)
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            b = a * 2.0
            best = min(best, time.perf_counter() - t)
            del b
        return best / (4 * n)

    return {"byte_hot": per_byte(1 << 18, 8), "byte_fresh": per_byte(1 << 24, 3)}


def constants(kind: str = "cpu") -> dict:
    """The machine constants for tensors on a device of this kind ("cpu", "cuda", ...)."""
    got = _constants.get(kind) if _constants is not None else None
    if got is not None:
        return got
    path = _env("AUTOVEC_COSTS")
    got = None
    if path:
        got = _read_constants(Path(path))
        if got is None:
            warnings.warn(f"AUTOVEC_COSTS={path!r} is not a readable JSON object of numbers (measured constants, "
                          "as autovec writes them to its cache): autovec uses its built-in constants",
                          RuntimeWarning, stacklevel=2)
            got = dict(DEFAULTS)
    else:
        try:
            cache = _cache_file(kind)
            # (a cache file that does not read as constants, cut short or edited, is measured again)
            got = _read_constants(cache) if cache.is_file() else None
            if got is None:
                measured = _measure(kind)
                got = {**DEFAULTS, **measured}
                try:
                    cache.parent.mkdir(parents=True, exist_ok=True)
                    cache.write_text(json.dumps(measured))
                except OSError:
                    pass  # a read-only home: measure again next process
        except Exception:
            got = dict(DEFAULTS)
    _set(kind, got)
    return got


def _read_constants(path) -> dict | None:
    """The constants a JSON file holds over the defaults, or None where it does not read as an
    object of numbers."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(loaded, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in loaded.values()):
        return None
    return {**DEFAULTS, **loaded}


def _set(kind, values):
    global _constants
    if _constants is None:
        _constants = {}
    _constants[kind] = values


def min_trip(strategy: str) -> int | None:
    if _unset("AUTOVEC_MIN_TRIP"):
        return None
    text = _env("AUTOVEC_MIN_TRIP")
    if text and text.strip().isdigit():
        return int(text)
    if text not in _WARNED_MIN_TRIP:
        _WARNED_MIN_TRIP.add(text)
        warnings.warn(f"AUTOVEC_MIN_TRIP={text!r} is not a whole number of iterations: ignored, the cost model "
                      "decides", RuntimeWarning, stacklevel=2)
    return None


_WARNED_MIN_TRIP: set = set()


def output_units(plan) -> float:
    """autovec's own per-call work for a loop's outputs, in small-op units (see _OUTPUT_UNITS)."""
    units = 0.0
    for o in plan.outputs:
        units += _OUTPUT_UNITS.get(o.kind, 2.0)
        if o.kind == "append" and not o.consumer:
            units += 1.0   # a caller's list: extended after the batch
    return units


def estimate(strategy: str, n: int, ops: int, units: float = 0.0, vmap: bool = False,
             lists: int = 0, kind: str = "cpu") -> dict[str, float]:
    """Rough seconds per path for a loop of `n` iterations whose body has `ops` operations;
    `units`: the outputs' share of autovec's own work (output_units); `vmap`: the body runs
    under vmap (no direct batched form); `lists`: Python lists of tensors the loop walks, each
    checked and stacked element by element on the vectorized path; `kind`: the tensors' device
    kind, whose constants apply (a loop of small operations costs more on a GPU, a launch each)."""
    c = constants(kind)
    python = n * (c["py_iter"] + ops * c["py_op"])
    own = c.get("own_op", c["py_op"] / 0.45)
    batch = c.get("batch_op", own)
    fixed = (_BASE + units + n * lists * _LIST_ELEMENT) * own
    if vmap:
        vectorized = fixed + c["vmap_call"] + ops * batch * _VMAP_OP
    else:
        vectorized = fixed + ops * batch * _BATCHED_OP
    return {"python": python, "vectorized": vectorized}


# an operation on Python numbers (`beta * avg`, `tp / (rank + 1)`), and a tensor's conversion to one
# (`.item()`, `int(t)`), in small-op units: measured on a 2-thread CPU, about 40 ns and 400 ns
# against 1.2 us for a small torch operation (on an accelerator a conversion waits for the device:
# a whole op at least)
_NUMBER_OP = 0.035
_CONVERT_OP = 0.3
_CONVERSIONS = frozenset({"int", "float", "bool", "complex"})
_NUMBER_FUNCS = frozenset({"abs", "round", "min", "max", "len"})
_MATH_CONSTANTS = frozenset({"pi", "e", "tau", "inf", "nan"})
# an iteration of a loop whose every operation is on Python numbers (a learning-rate schedule,
# `[math.exp(-i / n) for i in range(n)]`): the interpreter's own work, about 30-60 ns measured,
# far below py_iter's (an iteration that indexes a tensor)
_NUMBER_ITER = 0.05e-6


def number_ops(plan, numbers=frozenset(), elements=False) -> tuple:
    """Which operations of one iteration (those _count_ops counts) work on Python numbers: per such
    operation, ("number", names) or ("convert", names): an operation on Python numbers, or a
    tensor's conversion to one (`.item()`, `int(t)`), where the loop-invariant `names` (plan.free)
    all hold Python numbers at run time (refine_python checks them); a conversion of anything
    else costs a conversion. `numbers`: names bound to Python numbers before the loop (running
    values such as `avg = 0.0`). An operation on anything else (a tensor, an unknown value) is
    not listed: it costs a small torch operation, as in estimate. Only a cost estimate: a wrong
    guess costs time (the decision's timed calls correct it), never a wrong value."""
    import ast

    # (builtins are among the free names: `int` is taken to be the builtin, as the estimate goes)
    free = set(plan.free) - _CONVERSIONS - _NUMBER_FUNCS
    # the rows of a walk over `x.tolist()` (planned as `v = row.item()` over x's rows): the loop
    # as written gets its numbers from the list, so their `.item()` costs it nothing but the
    # interpreter's step: an operation on Python numbers
    listed = {u[0] for u in plan.space.unpack if len(u) > 2 and u[2]}
    known = set(numbers)
    space = plan.space
    if space.index:
        known.add(space.index)
    for lv in space.levels or ():
        known.add(lv[0])
    local: dict = {}         # body names bound to numbers: the free names they need
    out = []
    # each iteration's element of an indexed list (`a[i]` read as the parameter `a_i`): a Python
    # number where the list holds them, ("elements", its position in plan.mapped) for refine_python
    # (`elements`: the operations on them alone, element_ops; apart, so that a loop of tensors
    # lists none of its own)
    mapped = (getattr(plan, "mapped", ()) or ()) if elements else ()
    by_param = {mp.param: ("elements", k) for k, mp in enumerate(mapped)}
    by_base = {mp.base: ("elements", k) for k, mp in enumerate(mapped) if not mp.levels}

    def kind(node):
        """The free names `node` is a Python number under (a frozenset), or None (not one)."""
        if isinstance(node, ast.Constant):
            return frozenset() if isinstance(node.value, (int, float, complex)) else None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math" \
                and node.attr in _MATH_CONSTANTS:
            return frozenset()      # (`math.pi`: the module as the estimate takes it)
        if isinstance(node, ast.Name):
            if node.id in local:
                return local[node.id]
            if node.id in known:
                return frozenset()
            if node.id in by_param:
                return frozenset({by_param[node.id]})
            return frozenset({node.id}) if node.id in free else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in by_base:
            return frozenset({by_base[node.value.id]})      # (`a[i]` of an indexed list)
        if isinstance(node, ast.BinOp):
            a, b = kind(node.left), kind(node.right)
            return a | b if a is not None and b is not None else None
        if isinstance(node, ast.UnaryOp):
            return kind(node.operand)
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            parts = [kind(v) for v in ([node.left, *node.comparators] if isinstance(node, ast.Compare) else node.values)]
            return frozenset().union(*parts) if all(p is not None for p in parts) else None
        if isinstance(node, ast.IfExp):
            parts = [kind(node.test), kind(node.body), kind(node.orelse)]
            return frozenset().union(*parts) if all(p is not None for p in parts) else None
        if isinstance(node, ast.Call) and not node.keywords:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args:
                return frozenset()
            if isinstance(f, ast.Name) and (f.id in _CONVERSIONS or f.id in _NUMBER_FUNCS):
                if f.id in _CONVERSIONS or f.id == "len":
                    return frozenset()     # (a number whatever it converts; its cost is the call's)
                parts = [kind(a) for a in node.args]
                return frozenset().union(*parts) if parts and all(p is not None for p in parts) else None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math":
                parts = [kind(a) for a in node.args]
                return frozenset().union(*parts) if all(p is not None for p in parts) else None
        return None

    def cost_of(node):
        """(class, names) of one counted operation, or None (a small torch operation)."""
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args and isinstance(f.value, ast.Name) \
                    and f.value.id in listed:
                return ("number", frozenset())
            if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args:
                inner = kind(f.value)
                if inner is not None and any(type(v) is tuple for v in inner):
                    return ("convert", frozenset())     # (a tensor's element: a list's has no .item())
                return ("number", inner) if inner is not None else ("convert", frozenset())
            if isinstance(f, ast.Name) and f.id in _CONVERSIONS and len(node.args) == 1:
                inner = kind(node.args[0])
                return ("number", inner) if inner is not None else ("convert", frozenset())
        k = kind(node)
        return ("number", k) if k is not None else None

    for text in plan.body:
        tree = ast.parse(text)
        for node in fastast.walk(tree):
            if isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Subscript)):
                c = cost_of(node)
                if c is not None:
                    out.append(c)
        for stmt in fastast.walk(tree):
            # (names bound in the body, in order: a later read of them is typed by their value)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                k = kind(stmt.value)
                if k is None:
                    local.pop(stmt.targets[0].id, None)
                    known.discard(stmt.targets[0].id)
                else:
                    local[stmt.targets[0].id] = k
    return tuple(out)


def element_ops(plan, numbers=frozenset()) -> tuple:
    """number_ops' operations on the elements of indexed lists (`a[i] * b[i]` with `a` and `b`
    lists of floats: each a Python number in the loop, which refine_python counts where the
    list holds numbers at run time; probeD's dot product and trapezoid rule)."""
    return tuple(e for e in number_ops(plan, numbers, elements=True) if any(type(v) is tuple for v in e[1]))


def _number_value(v) -> bool:
    """A Python number, or a list or tuple of them (an indexed list's elements: its first one)."""
    t = type(v)
    if t is int or t is float or t is bool:
        return True
    return (t is list or t is tuple) and bool(v) and type(v[0]) in (int, float, bool)


def refine_python(est: dict, n: int, ops: int, entries: tuple, values: dict, kind: str = "cpu") -> dict:
    """`est` with its Python loop re-estimated where some of the `ops` operations of an iteration
    work on Python numbers (number_ops's `entries`, their names' values in `values`)."""
    c = constants(kind)
    convert = _CONVERT_OP if kind == "cpu" else 1.0
    cheap = 0.0
    numbers = 0      # operations on Python numbers alone
    for cls, names in entries:
        if all(_number_value(values.get(v)) for v in names):
            cheap += 1.0 - (_NUMBER_OP if cls == "number" else convert)
            numbers += cls == "number"
        elif cls == "convert":
            cheap += 1.0 - convert
    if not cheap:
        return est
    if numbers >= ops:
        # no torch work in an iteration at all: the estimate's constants are a tensor loop's, off
        # by several times either way for the interpreter's arithmetic, so both paths are timed
        # on the bucket's first calls (Decision: "timed"), the loop's runs costing microseconds
        return {**est, "python": n * (_NUMBER_ITER + ops * _NUMBER_OP * c["py_op"]), "timed": True}
    return {**est, "python": n * (c["py_iter"] + max(ops - cheap, 0.0) * c["py_op"])}


# a batch holding more bytes than this writes into fresh memory (the C allocator maps blocks above
# 32 MB anew each time); the loop's iterations, each far smaller, reuse theirs
_FRESH_BYTES = 32 << 20


def memory(n: int, per: int, kind: str = "cpu") -> tuple[float, float]:
    """Seconds the loop (first) and the batch (second) spend writing what the iterations create,
    `per` bytes each (measured on one iteration), where the loop keeps only one iteration's at a
    time (a running sum, a last value): the loop writes memory it reuses, the batch all `n`
    iterations' at once. (0, 0) below _FRESH_BYTES and off the CPU (a device's caching allocator
    reuses its blocks; its bandwidth is another matter, not modelled)."""
    need = n * per
    if kind != "cpu" or need < _FRESH_BYTES:
        return 0.0, 0.0
    c = constants(kind)
    return need * c["byte_hot"], need * c["byte_fresh"]


def worth(strategy: str, n: int, est: dict) -> bool:
    """Vectorize when the estimate says so (or when AUTOVEC_MIN_TRIP=<n> forces a threshold)."""
    forced = min_trip(strategy)
    if forced is not None:
        return n >= max(forced, 1)
    return n >= 1 and est["vectorized"] < est["python"]


# timed Python runs of a close decision, of which the first four only warm up: in a fresh
# process the loop's first calls are slow too (scatter's and cat's loops at 3-4 rows: 391, 86,
# 54 us, then about 22 us), and with two kept runs of three they lost to a vectorized path
# that was in fact 1.2-1.5x slower than the loop
_PY_RUNS, _PY_WARM = 8, 4
# vectorized: its steady state takes many calls to reach. A vectorized call runs each line of
# autovec's own code once, so it is still warming up (Python's specializing interpreter,
# caches, the allocator) long after the loop, which runs its body n times a call, has: measured
# in a fresh process on the dev cases at 5 rows, calls 4-7 took 1.5-2.5x the steady state,
# calls 10-16 about 1.2-1.5x. Sixteen runs, the best of the last ten kept.
_VEC_RUNS, _VEC_WARM = 16, 6
# vectorized calls all this many times slower than the loop's timed runs, when the loop has been
# timed already, settle the bucket on the loop after _FAR_RUNS of them (warming up, a call is at
# most about 2.5 times its steady state, but one of the first calls also writes the lane and one
# the express, a few hundred microseconds each: the fastest of four is past those)
_FAR_SLOWER, _FAR_RUNS = 8.0, 4
# a bucket the estimate settles on the vectorized path still times its first vectorized calls:
# the estimate counts the interpreter's work and not the rows', so a body that runs heavy work
# under a rare condition (`if m[i]: out[i] = f(x[i])`: the batch computes f on every row, the
# loop on a few) can be far slower batched than the estimate's loop. Timed calls all slower
# than the estimated loop (two: one may meet a garbage collection of a few hundred
# milliseconds, or one-time work) time the loop too, and the faster one is kept
_PROBES = 2
# ... and a probe settles the bucket on the vectorized path only where it is this many times faster
# than the estimated loop (the clear-cut margin of the estimate's own verdict, Decision.__init__):
# the estimate can be off by ten times and more (a schedule of Python floats and `math.cos`
# estimated at 355 us for 64 steps ran in 25 us, and its batch in 210 us stayed, 8x slower than
# the loop; probeL), so a closer probe times the loop too. Against a timed loop (a probe again,
# Decision.wait) the loop's own time is the bar
_PROBE_MARGIN = 5.0
# a Python run at least this long (seconds) is timed well enough by itself, after the bucket's
# first: its interpreter's warming up is a small part of it, and timing it more would cost the
# slow loop again
_LONG_RUN = 0.02
# a bucket settled on the loop by refused vectorized calls tries the vectorized path again after
# this many calls, then twice as many each time it is refused again
_RETRY, _RETRY_MAX = 32, 1 << 17


class Decision:
    """The path a loop takes at the trip counts of one power-of-two bucket.

    The cost model's verdict comes first; a verdict for the vectorized path still times its first
    _PROBES vectorized calls, and where none is five times faster than the estimated loop
    (_PROBE_MARGIN) the loop is timed too (the estimate does not see rows' work, a heavy body
    under a rare condition, and can be far off for a loop of Python numbers). Where it is not clear-cut (neither estimate is five
    times the other), the actual calls time each path: the loop eight times (the first four
    only warm up), the vectorized path sixteen times (the first six only warm up: its fixed
    cost keeps falling for a dozen calls or more as the interpreter, caches and the allocator
    settle; a call that ran its one-time check does not count). The faster best time is kept from then on; three refused
    vectorized attempts with none timed settle on the loop. A decision is a few attribute
    reads on the hot path."""

    __slots__ = ("vec", "final", "py_iter", "vec_call", "py_runs", "vec_runs", "vec_failed", "retry", "backoff",
                 "vec_any", "probe", "est_iter", "again", "cold_seen", "doubted", "weighed", "refined")

    def __init__(self, est: dict, n: int = 1):
        p, v = est["python"], est["vectorized"]
        self.vec = v < p
        self.final = (v > 5 * p or p > 5 * v) and not est.get("timed")   # ("timed": refine_python's)
        self.probe = 0            # vectorized calls still timed against the estimated loop (_PROBES)
        self.est_iter = p / max(n, 1)
        if self.final and self.vec:
            self.final, self.probe = False, _PROBES
        self.py_iter = float("inf")     # best seconds per iteration of the loop as written
        self.vec_call = float("inf")    # best seconds of a vectorized call
        self.vec_any = float("inf")     # best seconds of any vectorized call, warming up included
        self.py_runs = self.vec_runs = self.vec_failed = 0
        self.retry = 0            # settled by refusals alone: calls until the vectorized path is tried again
        self.backoff = _RETRY
        self.again = False        # settled on the loop by timed probes: one more probe when the retry is due
        self.cold_seen = False    # a cold vectorized call (a check, a build, chunks) seen while probing
        self.doubted = False      # the probes found the vectorized path slower than the estimated loop
        self.weighed = False      # the bytes of an iteration were added to the estimate (weigh)
        self.refined = False      # the loop re-estimated from the call's Python numbers (refine)

    def refine(self, est: dict, n: int) -> None:
        """The estimate `est` with the loop re-estimated from the values of this call (operations
        on Python numbers: refine_python), before any call of the bucket was timed: the verdict
        is made again, as at the start."""
        self.refined = True
        if self.py_runs or self.vec_runs or self.vec_any < float("inf") or self.vec_failed or self.weighed:
            return
        self.__init__(est, n)
        self.refined = True

    def weigh(self, est: dict, n: int, loop_s: float, batch_s: float) -> bool:
        """The estimate `est` with the seconds each path spends writing memory added (memory),
        before any call of the bucket was timed; True when the loop is now the choice. A batch
        estimated at more than twice the loop settles the bucket on the loop (one probe after
        `backoff` calls, as a timed verdict): its calls would each cost several loops."""
        self.weighed = True
        if self.py_runs or self.vec_runs or self.vec_any < float("inf") or self.vec_failed:
            return False
        p, v = est["python"] + loop_s, est["vectorized"] + batch_s
        self.est_iter = p / max(n, 1)
        if v <= 2 * p:
            return False
        self.py_iter = self.est_iter
        self.vec, self.final, self.probe, self.doubted = False, True, 0, True
        self._later()
        return True

    def choose(self) -> bool:
        """True: try the vectorized path on this call."""
        if self.final:
            return self.vec
        if self.probe:
            return True
        if self.vec_runs < _VEC_RUNS and (self.vec or self.py_runs >= _PY_RUNS):
            return True
        if self.py_runs < _PY_RUNS:
            return False
        return self.vec

    def python_ran(self, seconds: float, n: int):
        self.py_runs += 1
        if self.py_runs > 1 and self.vec_any < float("inf") and seconds > _FAR_SLOWER * self.vec_any:
            # (the loop, past its first run, far slower than a vectorized call already timed,
            # warming up included: settled on the vectorized path, without six more slow loops;
            # probeA's label smoothing ran 8 loops of 15 ms after batches of 1.5 ms)
            self.py_iter = seconds / max(n, 1)
            self.vec_call = self.vec_any
            self.vec, self.final = True, True
            return
        if self.py_runs > _PY_WARM:   # the first run of a bucket warms caches (often it is the first call ever)
            self.py_iter = min(self.py_iter, seconds / max(n, 1))
        elif self.py_runs > 1 and seconds >= _LONG_RUN and self.vec_any < float("inf"):
            # (a long loop against the vectorized calls timed so far, slower than its estimate:
            # settled by its second run; the first may pay one-time work, tens of milliseconds)
            self.py_iter = seconds / max(n, 1)
            self.vec_call = self.vec_any
            self.vec, self.final = self.vec_any < seconds, True
            if not self.vec:
                self._later()
            return
        self._settle(n)

    def vectorized_ran(self, seconds: float, n: int):
        if self.probe:
            self.vec_any = min(self.vec_any, seconds)
            self.probe -= 1
            bar = self.py_iter * n if self.again else self.est_iter * n / _PROBE_MARGIN
            if seconds <= bar:
                # as fast as the estimated loop (or, probed again, as the timed one): vectorized
                self.probe, self.final, self.vec, self.again = 0, True, True, False
            elif not self.probe:
                self.vec, self.doubted = False, True  # each slower: the loop is timed next
                if self.again:
                    self.final = True                 # (timed already: the loop again, and a probe later)
                    self._later()
            return
        self.vec_runs += 1
        self.vec_any = min(self.vec_any, seconds)
        if self.vec_runs > _VEC_WARM:
            self.vec_call = min(self.vec_call, seconds)
        elif self.vec_runs >= _FAR_RUNS and self.py_runs >= _PY_RUNS and self.vec_any > _FAR_SLOWER * self.py_iter * n:
            # (the loop timed first, every vectorized call so far far slower: no more of them)
            self.vec_call = self.vec_any
            self.vec, self.final = False, True
            if self.doubted:
                self._later()
            return
        self._settle(n)

    def vectorized_cold(self, seconds: float, n: int, warm: bool = False):
        """A vectorized call, while probing, that was not a steady-state one but is the call the
        user gets: its cached mode failed (`warm`: it has been checked), or it ran in chunks (the
        first such call skipped: it may have run a check)."""
        if warm or self.cold_seen:
            self.vectorized_ran(seconds, n)
        self.cold_seen = True

    def vectorized_failed(self):
        """The vectorized path refused this call (a guard, or an error in the batched code)."""
        self.vec_failed += 1
        if self.vec_failed >= 3 and self.vec_call == float("inf"):
            # settled on the loop; the refusals may have been one signature's (an input that
            # requires grad), so the vectorized path is tried again after `backoff` calls, each
            # time twice as many (at most a few hundred microseconds of checks in 2**17 calls)
            self.vec, self.final = False, True
            self.retry = self.backoff
            self.backoff = min(self.backoff * 2, _RETRY_MAX)

    def _later(self):
        """Settled on the loop by timed probes, which a passing load can mislead (on a busy
        machine a batch's multithreaded operations can stall for hundreds of milliseconds where
        the loop's small ones do not): one vectorized call again after `backoff` calls, each time
        twice as many."""
        self.again = True
        self.retry = self.backoff
        self.backoff = min(self.backoff * 2, _RETRY_MAX)

    def wait(self) -> bool:
        """A call of a bucket settled by refusals: True to keep the loop, False (and the bucket
        open to timing again) when its retry is due."""
        self.retry -= 1
        if self.retry > 0:
            return True
        if self.again:
            self.final, self.probe, self.vec_any = False, 1, float("inf")   # one probe against the timed loop
            return False
        self.final, self.vec, self.vec_failed = False, True, 0
        return False

    def refused(self) -> bool:
        """Settled on the loop because the vectorized path was refused, never timed."""
        return self.final and not self.vec and self.vec_failed >= 3 and self.vec_call == float("inf")

    def _settle(self, n):
        if self.py_runs >= _PY_RUNS and self.vec_runs >= _VEC_RUNS:
            self.vec = self.vec_call < self.py_iter * n
            self.final = True
            if self.doubted and not self.vec:
                self._later()     # (the estimate's verdict overturned by timings: checked again later)

    def measured(self, n: int) -> dict | None:
        if self.py_runs and (self.vec_runs or self.vec_any < float("inf")):
            # (the probes' calls count as timings too: vec_any, where none has been kept as
            # a steady-state timing yet)
            vec = self.vec_call if self.vec_call < float("inf") else self.vec_any
            return {"python": self.py_iter * n, "vectorized": vec}
        return None
