"""The compile fallback at run time: when a loop that cannot be vectorized runs its body
through torch.compile, and how that is kept exact.

Policy (per loop):
- `fallback="python"`: never. `fallback="compile"`: from the second call on.
- `fallback="auto"`: only a function called repeatedly, with a body of several operations,
  once the steps run so far would have paid for a compile (the cost model: the Python cost
  of a step's operations against a compiled call's overhead, and an expected compile time).
  A loop that runs once is never compiled.
- Every callable the body uses is checked for side effects before each loop.

Exactness: the first step of a compiled signature runs both ways and must agree bit for bit
(else the loop keeps Python); the next few steps run both ways too, timing each and compared
bit for bit, and in "auto" mode a
compiled step that is not faster is dropped. A compile error or an error inside the compiled
step runs the step the Python way (the step is pure, so running it again is exact).
"""
from __future__ import annotations

import time

import torch

from ._config import env as _env
from .purity import why_impure

_VERIFY_STEPS = 8          # steps run both ways after a compile, to compare and time them
_WARMUP = 2               # of those, not timed
_MAX_SIGNATURES = 4        # compiled signatures per loop; further shapes run in Python
_COMPILE_S = {"cpu": 20.0, "cuda": 30.0}        # expected cold compile, seconds (measured ones replace it)
_CALL_OVERHEAD = {"cpu": 20e-6, "cuda": 10e-6}  # a compiled function call (dynamo's guards), seconds
_OP_COST = {"cuda": 10e-6}                      # per eager op where a launch dominates (else measured)

_BACKEND = None            # tests may set a callable backend; else AUTOVEC_COMPILE_BACKEND or inductor
_measured_compile: list = []


class Stepping:
    """What one loop has learned about its compiled step across calls."""

    def __init__(self, plan, fallback: str):
        self.plan = plan
        self.fallback = fallback
        self.calls = 0
        self.steps = 0
        self.compiled: dict = {}        # signature -> compiled callable
        self.rejected: dict = {}        # signature -> reason
        self.verify: dict = {}          # signature -> [steps left to compare, Python s, compiled s]
        self.failed: str | None = None  # the loop never compiles again (an effect, a slower step)
        self.compile_s: float | None = None
        self.step_s: tuple | None = None   # (python, compiled) seconds per step, measured


def _device_kind(values) -> str:
    for v in values:
        if isinstance(v, torch.Tensor):
            return v.device.type
    return "cpu"


def _expected_compile_s(kind: str) -> float:
    if _measured_compile:
        return sum(_measured_compile) / len(_measured_compile)
    return _COMPILE_S.get(kind, _COMPILE_S["cpu"])


def decide(st: Stepping, kind: str) -> str | None:
    """None when this call should compile (or use) the step, else why not."""
    if st.fallback == "python":
        return "fallback='python'"
    if st.failed:
        return st.failed
    if st.compiled:
        return None
    if st.fallback == "compile":
        return "the first call runs the Python loop; compiling waits for repeated calls" if st.calls < 2 else None
    from . import cost
    c = cost.constants()
    per_op = _OP_COST.get(kind, c["py_op"])
    overhead = _CALL_OVERHEAD.get(kind, _CALL_OVERHEAD["cpu"])
    saving = st.plan.ops * per_op * 0.5 - overhead
    if saving <= 0:
        return (f"each step has {st.plan.ops} operations: too few for a compiled step to beat the Python one "
                f"(a compiled call costs about {overhead * 1e6:.0f} us on {kind})")
    if st.calls < 2:
        return "the first call runs the Python loop; compiling waits for repeated calls"
    expected = _expected_compile_s(kind)
    if st.steps * saving < expected:
        return (f"the cost model expects compiling (about {expected:.0f} s) to pay back only after more calls: "
                f"{st.steps} steps so far, saving about {saving * 1e6:.1f} us each")
    return None


_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _sig(args) -> tuple:
    """The arguments' types, shapes and values, and the modes a compiled graph depends on (grad,
    inference): a step verified under one is verified again under another (dynamo compiles a
    graph per mode, which the first one's checks never saw)."""
    out = [("modes", torch.is_grad_enabled(), torch.is_inference_mode_enabled())]
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append((a.dtype, tuple(a.shape), a.device.type, a.requires_grad))
        elif isinstance(a, (int, float, bool, complex, str)) or a is None:
            out.append((type(a), a))
        else:
            out.append((type(a), id(a)))
    return tuple(out)


def _backend():
    if _BACKEND is not None:
        return _BACKEND
    return _env("AUTOVEC_COMPILE_BACKEND") or "inductor"


def _agree(a, b) -> bool:
    """The compiled step's results are the Python step's bit for bit (NaN equal to NaN): a
    compiled kernel that fuses or reorders float arithmetic (an FMA, another exp) rounds
    otherwise than the loop, and the loop keeps Python (probeG: 2.4e-7 on a float32 step)."""
    from .equivalence import compare
    return compare(a, b, rtol=0.0, atol=0.0) is None


class Runner:
    """The per-call step callable: compiled where it was decided and verified, else Python."""

    def __init__(self, rt, loop_id, st: Stepping, fn):
        self.rt, self.loop_id, self.st, self.fn = rt, loop_id, st, fn
        self.call = self._first

    def __call__(self, *args):
        return self.call(*args)

    def _python(self, reason):
        self.rt._note(self.loop_id, "python", reason)
        self.call = self.fn
        return self.fn

    def _first(self, *args):
        st = self.st
        sig = _sig(args)
        varying = args[:len(args) - st.plan.invariants]
        if any(isinstance(a, (int, float, complex)) and not isinstance(a, bool) for a in varying):
            st.rejected[sig] = "a value that changes every step is a Python number (each would recompile)"
        if sig in st.rejected:
            return self._python(st.rejected[sig])(*args)
        comp = st.compiled.get(sig)
        if comp is None:
            if len(st.compiled) >= _MAX_SIGNATURES:
                return self._python(f"already {_MAX_SIGNATURES} compiled shapes for this loop")(*args)
            return self._compile(sig, args)
        self.comp, self.sig = comp, sig
        self.rt._note(self.loop_id, "compile", "the compiled step")
        left = st.verify.get(sig)
        if left and left[0] > 0:      # (the compared steps not done yet; [0, ..] once they are)
            self.call = self._verify
            return self._verify(*args)
        self.call = self._compiled
        return self._compiled(*args)

    def _compile(self, sig, args):
        st = self.st
        t0 = time.perf_counter()
        try:
            comp = torch.compile(self.fn, backend=_backend(), fullgraph=True, dynamic=False)
            got = comp(*args)
        except Exception as e:  # a compile error: the loop runs as written
            st.rejected[sig] = f"torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
            return self._python(st.rejected[sig])(*args)
        st.compile_s = time.perf_counter() - t0
        _measured_compile.append(st.compile_s)
        want = self.fn(*args)
        if not _agree(want, got):
            st.rejected[sig] = "the compiled step's results differ from the Python step's"
            st.failed = st.rejected[sig]
            self._python(st.rejected[sig])
            return want
        st.compiled[sig] = comp
        self.comp, self.sig = comp, sig
        st.verify[sig] = [_VERIFY_STEPS, 0.0, 0.0]   # steps left, Python and compiled seconds
        self.call = self._verify
        self.rt._note(self.loop_id, "compile", f"compiled in {st.compile_s:.2f} s")
        return want

    def _verify(self, *args):
        t0 = time.perf_counter()
        want = self.fn(*args)
        t1 = time.perf_counter()
        try:
            got = self.comp(*args)
        except Exception:
            got = None
        t2 = time.perf_counter()
        st = self.st
        v = st.verify[self.sig]
        if v[0] <= _VERIFY_STEPS - _WARMUP:   # the first steps may still recompile (aliasing)
            v[1] += t1 - t0
            v[2] += t2 - t1
        if got is None or not _agree(want, got):
            st.failed = "the compiled step's results differ from the Python step's"
            self._python(st.failed)
            return want
        v[0] -= 1
        if v[0] == 0:
            timed = _VERIFY_STEPS - _WARMUP
            st.step_s = (v[1] / timed, v[2] / timed)
            if st.fallback == "auto" and v[2] > 0.9 * v[1]:
                st.failed = (f"the compiled step was not faster ({st.step_s[1] * 1e6:.0f} us against "
                             f"{st.step_s[0] * 1e6:.0f} us in Python), so the loop stays in Python")
                st.compiled.clear()
                self._python(st.failed)
            else:
                self.call = self._compiled
        return want

    def _compiled(self, *args):
        try:
            return self.comp(*args)
        except Exception as e:  # the step is pure: run it again the Python way (which raises if it must)
            self.st.failed = f"the compiled step raised {type(e).__name__}"
            self.call = self.fn
            return self.fn(*args)


def stepper(rt, loop_id, fn, calls, it):
    """A step callable for this run of the loop, or None to run the original loop."""
    st = rt.steps.get(loop_id)
    if st is None:
        return None
    try:
        st.calls += 1
        st.steps += len(it) if hasattr(it, "__len__") else 1
        kind = it.device.type if isinstance(it, torch.Tensor) else "cpu"
        why = decide(st, kind)
        if why is None and _any_autocast():
            # (probeH: a step verified without autocast was reused under it, where dynamo compiled
            # another graph that nothing compared with the Python step)
            why = "autocast is on: the compiled step's precision would be autocast's, never checked"
        if why is not None:
            rt._note(loop_id, "python", why)
            return None
        for c in calls:
            bad = why_impure(c)
            if bad:
                st.failed = bad
                rt._note(loop_id, "python", bad)
                return None
        return Runner(rt, loop_id, st, fn)
    except Exception as e:  # never let the fallback break the program
        st.failed = f"internal error in the compile fallback: {type(e).__name__}: {e}"
        rt._note(loop_id, "python", st.failed)
        return None
