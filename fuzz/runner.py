"""Differential fuzzing of autovec: run each generated program's `f` and `autovec(f)` on
copies of the same inputs and report any difference in what they compute.

Compared, for the original against each of two autovec calls (the first call, which
analyses and checks, and the second, which runs from the cache):
- the return value: exact types; tensors by dtype, shape, device, requires_grad and values
  (torch.testing.assert_close default tolerances, equal_nan); ints, bools and strings
  exactly; Python floats with a relative tolerance of 1e-5 (absolute 1e-6 near zero);
- the arguments after the call (in-place effects), also when the call raised;
- the exception raised (type and message), or that neither raised;
- the text printed to stdout;
- the global torch RNG state after the call;
- for inputs that require grad: the gradients of a fixed weighted sum of the float outputs
  with respect to each leaf input (or the same error from backward).

    python -m fuzz.runner --n 1000 --seed 0 [--timeout 20] [--time-limit SECONDS] [--jobs 1]
    python -m fuzz.runner --repro SEED
    python -m fuzz.runner --family rec --n 2000     # linear recurrences in their many spellings
    python -m fuzz.runner --compile --n 200         # the compile fallback (family "compile")
    python -m fuzz.runner --steady --n 500          # three more calls each: express lanes, audited

`--family` picks the generator's family of forms: "default" (the vec/ and exact/ forms),
"rec" (spellings of linear recurrences), "scan2" (running extremes, log-sum-exp, fission
invariants), "brk" (loops that stop at a `break`: work before it, assignments in its `if`,
loop variables read after), "win" (sliding windows), "lost" (compaction counts, `while`
stop conditions with several `and` terms, sums of several terms), the others listed in the README, or
"compile" (sequential loops for the compile fallback). `--compile` runs `autovec(f, fallback="compile")` with dynamo's eager backend
(`autovec.compiled._BACKEND = "eager"`: a compile takes about a second) and calls each
program three times on fresh copies of its inputs (the first call runs Python, the second
compiles, the third runs the compiled step), then, where `make_inputs` takes a variant,
once more on other inputs (another trip count, batch shape or Python number); every call is
compared with the original. Its family is "compile" unless `--family` says otherwise.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import io
import logging
import math
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field

import torch

from autovec import autovec, explain
from autovec import _config
from autovec import compiled as av_compiled
from fuzz.generator import DEFAULT_OUT, FAMILIES, generate

RNG_SEED = 20240601
FLOAT_RTOL, FLOAT_ATOL = 1e-5, 1e-6


class Hang(BaseException):
    """Raised by the per-program alarm; a BaseException so that `except Exception` in the
    code under test cannot swallow it."""


@dataclass
class Outcome:
    """What one call did."""
    value: object = None
    error: tuple | None = None          # (type name, message)
    args: tuple = ()                    # the arguments after the call
    stdout: str = ""
    rng: torch.Tensor | None = None
    grads: object = None                # list of gradients, ("error", type, msg), or None
    trace: str = ""


@dataclass
class Result:
    seed: int
    kind: str
    file: str
    status: str = "ok"                  # ok | mismatch | crash | hang | fuzzer
    detail: str = ""
    path: str | None = None             # explain(...).path
    seconds: float = 0.0
    notes: list = field(default_factory=list)   # autovec's own warnings (internal errors)
    precision: list = field(default_factory=list)   # float64 results within float32 tolerance only

    @property
    def failed(self) -> bool:
        return self.status != "ok"

    def line(self) -> str:
        return f"seed {self.seed} [{self.kind}] {self.file}: {self.status}: {self.detail}"


# ----------------------------------------------------------------------------- comparing


def diff(want, got, path="result", notes=None, ref=None) -> str | None:
    """None when `got` is what the original gave (`want`), else one line saying where not.
    A float64 tensor that differs by more than float64 tolerances but within float32 ones
    passes (float32 arithmetic reassociated inside the program shows up at that size in a
    float64 result), with a line added to `notes` if given. `ref`, where given, is what the
    original gave on the inputs in float64 (the same structure): a float32 tensor that differs
    from the original's passes when it is no further from that reference than the original's
    own result is (see `refereed`), with a line starting "refereed" added to `notes`."""
    if type(want) is not type(got):
        return f"{path}: type {type(want).__name__} != {type(got).__name__} (original vs autovec)"
    if isinstance(want, torch.Tensor):
        return diff_tensor(want, got, path, notes, ref if isinstance(ref, torch.Tensor) else None)
    if isinstance(want, (list, tuple, collections.deque)):
        if len(want) != len(got):
            return f"{path}: length {len(want)} != {len(got)}"
        refs = ref if isinstance(ref, (list, tuple)) and len(ref) == len(want) else [None] * len(want)
        for k, (a, b, r) in enumerate(zip(want, got, refs)):
            d = diff(a, b, f"{path}[{k}]", notes, r)
            if d:
                return d
        return None
    if isinstance(want, dict):
        if list(want) != list(got):
            return f"{path}: keys {list(want)} != {list(got)}"
        for k in want:
            d = diff(want[k], got[k], f"{path}[{k!r}]", notes, ref.get(k) if isinstance(ref, dict) else None)
            if d:
                return d
        return None
    if isinstance(want, torch.nn.Module):
        return diff(module_state(want), module_state(got), path, notes)
    if hasattr(want, "__dict__") and not callable(want):
        return diff(vars(want), vars(got), path, notes)
    if isinstance(want, float):
        if math.isnan(want) and math.isnan(got):
            return None
        if want == got or math.isclose(want, got, rel_tol=FLOAT_RTOL, abs_tol=FLOAT_ATOL):
            return None
        return f"{path}: {want!r} != {got!r}"
    if want != got:
        return f"{path}: {want!r} != {got!r}"
    return None


def module_state(m: torch.nn.Module) -> dict:
    """What a call can change in a module: parameters, buffers (running stats), the mode."""
    state = {f"param {k}": v for k, v in m.named_parameters()}
    state.update({f"buffer {k}": v for k, v in m.named_buffers()})
    state["training"] = m.training
    return state


def diff_tensor(want: torch.Tensor, got: torch.Tensor, path: str, notes=None, ref=None) -> str | None:
    for attr in ("dtype", "shape", "device", "requires_grad"):
        if getattr(want, attr) != getattr(got, attr):
            return f"{path}: {attr} {getattr(want, attr)} != {getattr(got, attr)}"
    # gradients are sums over iterations: batched and looped sums differ by reassociation
    loose = dict(rtol=1e-4, atol=1e-5) if "gradient" in path and want.dtype == torch.float32 else {}
    if "gradient" in path and want.dtype in (torch.float16, torch.bfloat16):
        # half-precision sums over iterations round at every step of the loop (8 bits of
        # mantissa for bfloat16): reassociated, they differ by several units in the last place
        eps = torch.finfo(want.dtype).eps
        loose = dict(rtol=16 * eps, atol=16 * eps)
    try:
        torch.testing.assert_close(got.detach(), want.detach(), equal_nan=True, **loose)
    except AssertionError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        where = next((ln for ln in lines if "index" in ln.lower()), lines[-1] if lines else "")
        if want.dtype == torch.float64 and _close_as_float32(want, got):
            if notes is not None:
                notes.append(f"{path}: float64 values differ beyond float64 tolerances, within float32 ones ({where})")
            return None
        # float64 outputs may hold float32 arithmetic (a float32 recurrence stored into a float64
        # tensor): the same referee judges them, unless the float64 run reproduces the original
        # exactly (a real float64 computation, judged at float64 tolerances)
        if ref is not None and want.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64) \
                and not (want.dtype == torch.float64 and ref.shape == want.shape
                         and torch.equal(want.detach(), ref.detach().to(want.dtype))) \
                and refereed(want, got, ref):
            if notes is not None:
                notes.append(f"refereed {path}: float32 values differ from the original's ({where}), but are no "
                             "further than the original's from a float64 run of it")
            return None
        return f"{path}: values differ ({where}); original {short(want)}, autovec {short(got)}"
    return None


def refereed(want: torch.Tensor, got: torch.Tensor, ref: torch.Tensor) -> bool:
    """True when `got` (autovec, float32) is as close to `ref` (the original run in float64) as
    `want` (the original, float32) is: reassociated float32 arithmetic (a scan instead of a
    loop) differs from the loop by rounding, which shows as a difference where the loop
    rounds to exactly zero by cancellation (allowed: twice the loop's error, plus 1e-5 of the
    largest value). Abstains (False) where the float64 run is not close to the loop itself
    (a branch taken differently, a chaotic recurrence)."""
    if ref.shape != want.shape:
        return False
    w, g, r = want.detach().double(), got.detach().double(), ref.detach().double()
    if not torch.equal(w.isnan(), g.isnan()) or not torch.equal(w.isinf(), g.isinf()) or \
            not torch.equal(w[w.isinf()], g[g.isinf()]):
        return False
    fin = w.isfinite() & r.isfinite()
    if not torch.equal(fin, g.isfinite() & r.isfinite()) or not fin.any():
        return False
    eps = torch.finfo(want.dtype).eps if want.dtype.is_floating_point else 0.0
    w, g, r = w[fin], g[fin], r[fin]
    scale = 1.0 + r.abs().max().item()
    loop_err = (w - r).abs().max().item()
    if loop_err > max(1e-3, 30 * eps) * scale:      # (half precision rounds at 1e-3 on every step)
        return False
    return (g - r).abs().max().item() <= 2.0 * loop_err + max(1e-5, 4 * eps) * scale


def in_float64(obj):
    """A copy of `obj` with float32 (and half) tensors as float64 ones, leaves kept leaves."""
    if isinstance(obj, torch.Tensor):
        if obj.dtype in (torch.float32, torch.float16, torch.bfloat16):
            t = obj.detach().to(torch.float64)
        else:
            t = obj.detach().clone()
        return t.requires_grad_() if obj.requires_grad else t
    if isinstance(obj, list):
        return [in_float64(o) for o in obj]
    if isinstance(obj, tuple):
        return tuple(in_float64(o) for o in obj)
    if isinstance(obj, dict):
        return {k: in_float64(v) for k, v in obj.items()}
    return copy.deepcopy(obj)


def _close_as_float32(want, got) -> bool:
    try:
        torch.testing.assert_close(got.detach(), want.detach(), equal_nan=True, rtol=1.3e-6, atol=1e-5)
    except AssertionError:
        return False
    return True


def short(t: torch.Tensor) -> str:
    vals = t.detach().flatten()[:6].tolist()
    more = ", ..." if t.numel() > 6 else ""
    return f"[{', '.join(f'{v:.4g}' if isinstance(v, float) else str(v) for v in vals)}{more}]"


def compare(want: Outcome, got: Outcome, label: str, notes=None, ref: Outcome | None = None) -> tuple[str, str] | None:
    """(status, detail) for the first difference between two outcomes, else None. `ref`: the
    original's outcome on the inputs in float64 (a referee for float32 values, see `diff`)."""
    if want.error != got.error:
        status = "crash" if got.error and not want.error else "mismatch"
        w = f"raised {want.error[0]}: {want.error[1]}" if want.error else "returned"
        g = f"raised {got.error[0]}: {got.error[1]}" if got.error else "returned"
        return status, f"{label}: the original {w}; autovec {g}"
    checks = [] if want.error else [("return value", want.value, got.value, ref.value if ref else None)]
    checks.append(("arguments after the call", list(want.args), list(got.args), list(ref.args) if ref else None))
    for what, a, b, r in checks:
        d = diff(a, b, what, notes, r)
        if d:
            return "mismatch", f"{label}: {d}"
    if want.stdout != got.stdout:
        return "mismatch", f"{label}: printed {want.stdout[:80]!r} vs {got.stdout[:80]!r}"
    if not torch.equal(want.rng, got.rng):
        return "mismatch", f"{label}: the global torch RNG state differs after the call"
    if isinstance(want.grads, tuple) or isinstance(got.grads, tuple):
        if want.grads != got.grads:
            return "mismatch", f"{label}: gradients: original {describe(want.grads)}, autovec {describe(got.grads)}"
    elif want.grads is not None or got.grads is not None:
        d = diff(want.grads, got.grads, "gradients", notes, ref.grads if ref and isinstance(ref.grads, list) else None)
        if d:
            return "mismatch", f"{label}: {d}"
    return None


def describe(grads) -> str:
    if isinstance(grads, tuple):
        return f"backward raised {grads[1]}: {grads[2]}"
    return "no gradient" if grads is None else "gradients"


# ----------------------------------------------------------------------------- running


def tensors_in(obj, depth=3):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, torch.nn.Module):
        yield from obj.parameters()
    elif depth and hasattr(obj, "__dict__") and not callable(obj):
        yield from tensors_in(list(vars(obj).values()), depth - 1)
    elif depth and isinstance(obj, (list, tuple)):
        for o in obj:
            yield from tensors_in(o, depth - 1)
    elif depth and isinstance(obj, dict):
        for o in obj.values():
            yield from tensors_in(o, depth - 1)


def gradients(value, args):
    """Gradients of sum((o.float() * w).sum()) over the float outputs (returned, or arguments
    written in place) with respect to each leaf argument that requires grad."""
    leaves = [t for t in tensors_in(args) if t.is_leaf and t.requires_grad]
    if not leaves:
        return None
    outs = [t for t in tensors_in(value) if t.requires_grad and t.is_floating_point()]
    outs += [t for t in tensors_in(args) if t.requires_grad and not t.is_leaf and t.is_floating_point()]
    if not outs:
        return None
    try:
        loss = sum((o.float() * torch.linspace(-1.0, 1.0, o.numel()).reshape(o.shape)).sum() for o in outs)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    except Exception as e:
        return ("error", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    return list(grads)


def device() -> str | None:
    """The device the programs run on: AUTOVEC_FUZZ_DEVICE (set by --device), or None for the CPU."""
    return os.environ.get("AUTOVEC_FUZZ_DEVICE") or None


def on_device(obj, dev):
    """Inputs made on the CPU (the programs' generators are CPU generators), moved to `dev`:
    tensors keep requires_grad, modules move in place, containers are rebuilt."""
    if dev is None:
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(dev).requires_grad_(obj.requires_grad)
    if isinstance(obj, torch.nn.Module):
        return obj.to(dev)
    if isinstance(obj, (list, tuple)):
        moved = [on_device(v, dev) for v in obj]
        return type(obj)(moved) if type(obj) in (list, tuple) else obj
    if isinstance(obj, dict):
        return {k: on_device(v, dev) for k, v in obj.items()}
    return obj


def call(fn, inputs) -> Outcome:
    args = copy.deepcopy(inputs)
    out = Outcome()
    buf = io.StringIO()
    torch.manual_seed(RNG_SEED)
    dev = device()
    # tensors the program makes (torch.zeros(n), torch.tensor(..)) go to the inputs' device
    where = torch.device(dev) if dev else contextlib.nullcontext()
    with where:
        try:
            with contextlib.redirect_stdout(buf):
                out.value = fn(*args)
        except Exception as e:
            out.error = (type(e).__name__, str(e))
            out.trace = traceback.format_exc()
        out.rng = torch.get_rng_state()
        out.stdout = buf.getvalue()
        out.args = args
        if out.error is None:
            out.grads = gradients(out.value, args)
    return out


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise Hang in this (main) thread after `seconds`."""
    if not seconds or not hasattr(signal, "setitimer"):
        yield
        return

    def fire(signum, frame):
        raise Hang()
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


@contextlib.contextmanager
def vectorize_always():
    """AUTOVEC_MIN_TRIP=1 (the vectorized path whatever the trip count), for this block only."""
    old = os.environ.get("AUTOVEC_MIN_TRIP")
    os.environ["AUTOVEC_MIN_TRIP"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["AUTOVEC_MIN_TRIP"]
        else:
            os.environ["AUTOVEC_MIN_TRIP"] = old


@contextlib.contextmanager
def eager_compiles():
    """The compile fallback through dynamo's eager backend (about a second a compile, where
    inductor takes many), for this block only."""
    old = av_compiled._BACKEND
    av_compiled._BACKEND = "eager"
    # a compiled step that raises is rerun the Python way (which raises the loop's error);
    # dynamo's own logs of that error would only clutter the output
    quiet = [logging.getLogger(n) for n in ("torch._dynamo", "torch._subclasses.fake_tensor")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        av_compiled._BACKEND = old
        for q, lv in zip(quiet, levels):
            q.setLevel(lv)


COMPILE_CALLS = 3   # compile mode: Python, then the compile, then the compiled step
STEADY_CALLS = 3    # --steady: calls after the second (a loop's express lane is written on its second
STEADY_ENV = "AUTOVEC_FUZZ_STEADY"    # vectorized call and runs from the third: autovec/lanes.py)
BUDGET_ENV = "AUTOVEC_FUZZ_BUDGET"    # memory_budget for autovec(f), from --budget
LANE_PROBLEMS: list = []


def _audit_lanes():
    """Check every express lane's answer against the general guard (as tests/test_lanes.py
    does): a lane that accepts what the general pass refuses, or gives another signature, is a
    mismatch even where the result happens to agree. Installed once per process."""
    from autovec import lanes
    if not getattr(lanes.build, "audited", False):
        lanes.build = lanes.audited(lanes.build, LANE_PROBLEMS)


def run(seed: int, timeout: float = 20.0, out_dir=None, verbose=False, family: str = "default",
        compile: bool = False) -> Result:
    """Generate, run and compare the program for `seed` (of `family`); `compile`: the autovec
    side is `autovec(f, fallback="compile")`, called COMPILE_CALLS times (and once on the
    program's variant inputs, where it has them)."""
    with vectorize_always(), (eager_compiles() if compile else contextlib.nullcontext()):
        return _run(seed, timeout, out_dir, verbose, family, compile)


def _accepts_variant(make_inputs) -> bool:
    import inspect
    return "variant" in inspect.signature(make_inputs).parameters


def _run(seed, timeout, out_dir, verbose, family="default", compile=False) -> Result:
    start = time.perf_counter()
    prog = generate(seed, family=family)
    res = Result(seed, prog.kind, str(prog.path(out_dir)))
    handler = _Warnings()
    log = logging.getLogger("autovec")
    log.addHandler(handler)
    stage = "loading the program"
    try:
        with deadline(timeout), warnings_quiet():
            mod = prog.load(out_dir)
            f = mod.f
            inputs = on_device(mod.make_inputs(), device())
            # each call starts from fresh module state (helpers may keep a log or a counter);
            # re-running the module resets the globals that f, and its rewrite, read
            stage = "the original"
            want = call(f, inputs)
            other = None
            if _accepts_variant(mod.make_inputs):     # (compile's, and the lost forms' that vary their values)
                stage = "the original"
                prog.reset(mod)
                other = on_device(mod.make_inputs(1), device())
                want_other = call(f, other)
            stage = "autovec"
            budget = int(os.environ.get(BUDGET_ENV, 0) or 0)
            g = autovec(f, fallback="compile") if compile else \
                autovec(f, memory_budget=budget) if budget else autovec(f)
            labels = ["first call", "second call"] + [f"call {k + 1}" for k in range(2, COMPILE_CALLS if compile else 2)]
            if _config._env_flag(STEADY_ENV):
                labels += [f"steady call {k}" for k in range(len(labels) + 1, len(labels) + 1 + STEADY_CALLS)]
                _audit_lanes()
                LANE_PROBLEMS.clear()
            runs = []
            for label in labels:
                prog.reset(mod)
                runs.append((label, want, call(g, inputs), inputs))
            if other is not None:
                prog.reset(mod)
                runs.append((f"call {len(labels) + 1}, on other inputs (variant 1)", want_other, call(g, other), other))
            stage = "explain"
            prog.reset(mod)
            with contextlib.redirect_stdout(io.StringIO()), torch.device(device() or "cpu"):
                ex = explain(g, *copy.deepcopy(inputs))
            res.path = ex.path
        stage = "comparing"
        if LANE_PROBLEMS:
            res.status, res.detail = "mismatch", f"express lane: {LANE_PROBLEMS[0]}"
            LANE_PROBLEMS.clear()
        refs = {}
        for label, w, got, args in runs:
            verdict = compare(w, got, label, res.precision)
            if verdict and verdict[0] == "mismatch" and "values differ" in verdict[1]:
                # float32 rounding or a real difference? ask the original in float64
                if id(args) not in refs:
                    stage = "the original in float64"
                    with deadline(timeout), warnings_quiet():
                        refs[id(args)] = referee_call(prog, mod, f, args)
                    stage = "comparing"
                if refs[id(args)] is not None:
                    verdict = compare(w, got, label, res.precision, refs[id(args)])
            if verdict:
                res.status, res.detail = verdict
                break
        if verbose:
            print(report(prog, res.file, want, [r[:3] for r in runs], ex))
    except Hang:
        res.status = "hang" if stage in ("autovec", "explain") else "fuzzer"
        res.detail = f"no answer within {timeout:g} s (in {stage})"
    except Exception as e:
        res.status = "crash" if stage in ("autovec", "explain") else "fuzzer"
        res.detail = f"{stage} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if verbose:
            traceback.print_exc()
    finally:
        log.removeHandler(handler)
        sys.modules.pop(prog.module_name, None)
    res.notes = handler.records
    res.seconds = time.perf_counter() - start
    return res


def referee_call(prog, mod, f, inputs) -> Outcome | None:
    """The original on the inputs in float64 (and float64 as torch's default dtype), or None
    where that raises."""
    prog.reset(mod)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = call(f, in_float64(inputs))
    finally:
        torch.set_default_dtype(old)
    return None if out.error else out


@contextlib.contextmanager
def warnings_quiet():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def report(prog, file, want, runs, ex) -> str:
    parts = [f"--- seed {prog.seed} [{prog.kind}] {file}", prog.source.split("\ndef make_inputs")[0].rstrip(),
             "", str(ex), ""]
    outcomes = [("original", want)]
    for label, w, got in runs:
        if w is not want and w is not outcomes[-1][1]:
            outcomes.append(("original, on other inputs", w))
        outcomes.append((f"autovec, {label}", got))
    for label, o in outcomes:
        what = f"raised {o.error[0]}: {o.error[1]}" if o.error else f"returned {o.value!r}"
        parts.append(f"{label}: {what}")
        if o.stdout:
            parts.append(f"  printed {o.stdout[:200]!r}")
        if o.grads is not None:
            parts.append(f"  gradients: {o.grads!r}")
        if o.error and label != "original":
            parts.append(o.trace)
    return "\n".join(parts)


# ----------------------------------------------------------------------------- CLI


def _worker_init():
    torch.set_num_threads(1)
    logging.getLogger("autovec").propagate = False


def _run_star(job):
    return run(*job)


def run_many(seeds, timeout, out_dir, jobs, time_limit, progress, family="default", compile=False):
    start = time.perf_counter()
    results = []
    if jobs <= 1:
        logging.getLogger("autovec").propagate = False   # reported per program instead
        it = (run(s, timeout, out_dir, False, family, compile) for s in seeds)
        pool = None
    else:
        import multiprocessing
        pool = multiprocessing.get_context("spawn").Pool(jobs, initializer=_worker_init)
        it = pool.imap(_run_star, [(s, timeout, out_dir, False, family, compile) for s in seeds], chunksize=4)
    try:
        for r in it:
            results.append(r)
            if progress and len(results) % 100 == 0:
                progress(results, time.perf_counter() - start)
            if time_limit and time.perf_counter() - start > time_limit:
                break
    finally:
        if pool is not None:
            pool.terminate()
    return results, time.perf_counter() - start


def summary(results) -> str:
    n = len(results)
    vec = sum(r.path == "vectorized" for r in results)
    count = {s: sum(r.status == s for r in results) for s in ("mismatch", "crash", "hang", "fuzzer")}
    comp = sum(r.path == "compile" for r in results)
    line = (f"fuzz: {n} programs, {vec} vectorized ({100.0 * vec / max(n, 1):.1f}%), "
            + (f"{comp} compiled ({100.0 * comp / max(n, 1):.1f}%), " if comp else "")
            + f"{count['mismatch']} mismatches, {count['crash']} crashes, {count['hang']} hangs")
    if count["fuzzer"]:
        line += f", {count['fuzzer']} fuzzer errors"
    return line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.runner", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="number of programs (seeds seed .. seed+n-1)")
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per program before it counts as a hang")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="stop starting programs after this many seconds in all (the summary counts those run)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--out", default=None, help=f"where program files go (default {DEFAULT_OUT})")
    ap.add_argument("--repro", type=int, default=None, metavar="SEED", help="rerun one seed verbosely")
    ap.add_argument("--by-kind", action="store_true", help="also print the share vectorized per loop form")
    ap.add_argument("--family", choices=sorted(FAMILIES), default=None,
                    help="the generator's family of forms (default: 'default', or 'compile' with --compile)")
    ap.add_argument("--device", default=None,
                    help="run the programs on this device (e.g. cuda): inputs are moved there and tensors the "
                         "programs make are made there")
    ap.add_argument("--steady", action="store_true",
                    help=f"call autovec {STEADY_CALLS} more times (the steady state: express lanes), auditing "
                         "every lane's answer against the general guard")
    ap.add_argument("--budget", type=int, default=None, metavar="BYTES",
                    help="autovec(f, memory_budget=BYTES): a small budget runs batches in chunks (and the kept "
                         "rows and sides under grad in pieces)")
    ap.add_argument("--compile", action="store_true",
                    help="autovec(f, fallback='compile') with the eager dynamo backend, each program called "
                         f"{COMPILE_CALLS} times (and once on variant inputs)")
    a = ap.parse_args(argv)
    if a.budget:
        os.environ[BUDGET_ENV] = str(a.budget)     # (spawned workers inherit it)
    if a.steady:
        os.environ[STEADY_ENV] = "1"     # (spawned workers inherit it)
    family = a.family or ("compile" if a.compile else "default")
    if a.device:
        torch.empty(0, device=a.device)   # fails here, not in every program, if there is no such device
        os.environ["AUTOVEC_FUZZ_DEVICE"] = a.device   # spawned workers read it too
    if a.repro is not None:
        r = run(a.repro, a.timeout, a.out, verbose=True, family=family, compile=a.compile)
        print(r.line() if r.failed else f"seed {r.seed} [{r.kind}]: ok (path {r.path})")
        for note in r.notes:
            print(f"  autovec warned: {note}")
        return 1 if r.failed else 0

    def progress(results, elapsed):
        bad = sum(r.failed for r in results)
        vec = sum(r.path == "vectorized" for r in results)
        print(f"  [{len(results)}/{a.n}] {elapsed:.1f}s, {vec} vectorized, {bad} failures", flush=True)

    results, elapsed = run_many(range(a.seed, a.seed + a.n), a.timeout, a.out, a.jobs, a.time_limit, progress,
                                family, a.compile)
    if a.by_kind:
        kinds = sorted({r.kind for r in results})
        for k in kinds:
            rs = [r for r in results if r.kind == k]
            comp = sum(r.path == "compile" for r in rs)
            print(f"  {k:26s} {len(rs):5d} programs, {sum(r.path == 'vectorized' for r in rs):5d} vectorized, "
                  + (f"{comp:5d} compiled, " if a.compile else "") + f"{sum(r.failed for r in rs)} failures")
    ref = [r for r in results if any(p.startswith("refereed") for p in r.precision) and not r.failed]
    if ref:
        print(f"  {len(ref)} programs gave float32 results that differ from the original's beyond float32 "
              f"tolerances, but are no further than the original's from a float64 run of it (rounding; not "
              f"counted as mismatches): seeds {', '.join(str(r.seed) for r in ref[:20])}{' ...' if len(ref) > 20 else ''}")
    imprecise = [r for r in results if any(not p.startswith("refereed") for p in r.precision) and not r.failed]
    if imprecise:
        print(f"  {len(imprecise)} programs gave float64 results equal only to float32 tolerance (not counted as "
              f"mismatches; check whether a float64 computation ran in float32): seeds "
              f"{', '.join(str(r.seed) for r in imprecise[:20])}{' ...' if len(imprecise) > 20 else ''}")
    noted = [r for r in results if r.notes]
    if noted:
        print(f"  {len(noted)} programs made autovec log a warning (it fell back to the original), e.g. "
              f"seed {noted[0].seed}: {noted[0].notes[0][:200]}")
    for r in results:
        if r.failed:
            print(r.line())
    print(f"wall time {elapsed:.1f}s")
    print(summary(results))
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
