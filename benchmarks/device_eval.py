"""autovec on the dev cases with inputs on a GPU: correctness (small and large, check=True, a
small memory_budget), the path taken, loop / hand-written / autovec times with the device
synchronised, and what the index check (autovec.indexcheck) costs each vectorized case.

    python benchmarks/device_eval.py [SECONDS]        # cases from $AUTOVEC_CASES or ../shared/cases
    DEV=cpu python benchmarks/device_eval.py 5         # a dry run on the CPU

Cases that make CPU tensors (`torch.empty(n)`) run under `torch.device(DEV)` ("[device ctx]"),
which dispatches every torch call through Python: their times are slower than a GPU user's.
Timing stops after SECONDS (default 150); correctness continues."""
import copy
import importlib.util
import math
import os
import sys
import time
import traceback
from pathlib import Path
import torch
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CASES = Path(os.environ.get("AUTOVEC_CASES", ROOT.parent / "shared" / "cases"))
from autovec import autovec, explain

DEV = os.environ.get("DEV", "cuda")
if DEV == "cpu":
    torch.cuda.synchronize = lambda: None
T0 = time.perf_counter()
BUDGET = float(sys.argv[1]) if len(sys.argv) > 1 else 150.0


def move(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to(DEV).requires_grad_(x.requires_grad)
    if isinstance(x, torch.nn.Module):
        return x.to(DEV)
    if type(x) in (list, tuple):
        return type(x)(move(v) for v in x)
    if isinstance(x, dict):
        return {k: move(v) for k, v in x.items()}
    return x


def same(a, b, tol):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"types {type(a).__name__} vs {type(b).__name__}"
        if a.device != b.device or a.dtype != b.dtype or a.shape != b.shape:
            return f"meta {a.device},{a.dtype},{tuple(a.shape)} vs {b.device},{b.dtype},{tuple(b.shape)}"
        try:
            torch.testing.assert_close(b, a, **tol, equal_nan=True)
        except AssertionError as e:
            return "values: " + str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:4])
        return None
    if isinstance(a, torch.nn.Module):
        return same(list(a.state_dict().values()), list(b.state_dict().values()), tol)
    if isinstance(a, (list, tuple)):
        if type(a) != type(b) or len(a) != len(b):
            return f"containers {type(a).__name__}{len(a)} vs {type(b).__name__}{len(b) if hasattr(b, '__len__') else ''}"
        for x, y in zip(a, b):
            d = same(x, y, tol)
            if d:
                return d
        return None
    if isinstance(a, float) and isinstance(b, float):
        return None if math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5) or (a != a and b != b) else f"{a} vs {b}"
    return None if a == b else f"{a!r} vs {b!r}"


CTX = [False]


def ctx():
    import contextlib
    return torch.device(DEV) if CTX[0] else contextlib.nullcontext()


def timed(fn, args, reps):
    best = float("inf")
    for _ in range(reps):
        a = copy.deepcopy(args)
        torch.cuda.synchronize()
        t = time.perf_counter()
        with ctx():
            fn(*a)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def run(fn, args):
    with ctx():
        return fn(*args)


rows = []
VEC = []
for path in sorted(CASES.glob("*.py")):
    if path.stem in ("verify",):
        continue
    spec = importlib.util.spec_from_file_location("case_" + path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    tol = getattr(mod, "TOL", dict(rtol=1e-4, atol=1e-5))
    line = f"{path.stem:34s} {mod.KIND:12s}"
    try:
        CTX[0] = False
        try:
            outs = [mod.loop(*move(mod.inputs("small"))), mod.reference(*move(mod.inputs("small")))]
            flat = []
            def walk(o):
                if isinstance(o, torch.Tensor):
                    flat.append(o)
                elif isinstance(o, (list, tuple)):
                    for v in o:
                        walk(v)
            walk(outs)
            if any(not t.is_cuda for t in flat):
                raise RuntimeError("CPU results")
        except Exception:
            CTX[0] = True    # the case makes CPU tensors: run it under torch.device (slower dispatch)
            line += " [device ctx]"
        g = autovec(mod.loop)
        for size in ("small", "large"):
            args = move(mod.inputs(size))
            a1, a2 = copy.deepcopy(args), copy.deepcopy(args)
            torch.cuda.synchronize(); t = time.perf_counter()
            want = run(mod.loop, a1)
            torch.cuda.synchronize(); tl = time.perf_counter() - t
            t = time.perf_counter()
            got = run(g, a2)
            torch.cuda.synchronize(); tf = time.perf_counter() - t
            d = same(want, got, tol) or same(list(a1), list(a2), tol)
            got2 = run(g, copy.deepcopy(args))
            d = d or same(want, got2, tol)
            line += f" | {size}: {'OK' if not d else 'WRONG ' + d}"
            with ctx():
                ex = explain(g, *copy.deepcopy(args))
            line += f" path={ex.path}"
            if ex.path != "vectorized" and mod.KIND != "tiny":
                line += " {" + " | ".join(n[:160] for n in ex.notes) + "}"
            if size == "small":
                try:
                    run(autovec(mod.loop, check=True), copy.deepcopy(args))
                    line += " check=True ok"
                except Exception as e:
                    line += f" CHECK=TRUE RAISED {type(e).__name__}: {str(e)[:200]}"
            if size == "large" and ex.path == "vectorized":
                try:
                    a3 = copy.deepcopy(args)
                    d3 = same(want, run(autovec(mod.loop, memory_budget=1 << 20), a3), tol)
                    line += " budget ok" if not d3 else f" BUDGET WRONG {d3}"
                except Exception as e:
                    line += f" BUDGET RAISED {type(e).__name__}: {str(e)[:200]}"
            if ex.path == "vectorized":
                VEC.append((path.stem, size, mod, g, args, CTX[0]))
            if time.perf_counter() - T0 < BUDGET:
                reps = 1 if size == "large" and tl > 0.5 else 3
                loop_t = min(tl, timed(mod.loop, args, reps)) if reps > 1 else tl
                hand_t = timed(mod.reference, args, 5)
                av_t = timed(g, args, 5)
                line += (f" loop {loop_t*1e3:.3f} hand {hand_t*1e3:.3f} av {av_t*1e3:.3f} ms"
                         f" (first {tf*1e3:.1f} ms) av/hand {av_t/hand_t:.2f} av/min {av_t/min(loop_t, hand_t):.2f}")
            else:
                line += " (untimed)"
    except Exception as e:
        line += f" | ERROR {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        traceback.print_exc(limit=3)
    print(line, flush=True)
print(f"cases {time.perf_counter() - T0:.1f}s")
from autovec import cost, indexcheck
print("constants cpu", {k: f"{v*1e6:.2f}us" for k, v in cost.constants("cpu").items()})
print("constants cuda", {k: f"{v*1e6:.2f}us" for k, v in cost.constants("cuda").items()})
# the index check's cost: the same vectorized calls with and without it (best of 20)
real = indexcheck.needed
for name, size, mod, g, args, c in VEC:
    if time.perf_counter() - T0 > BUDGET + 40:
        break
    CTX[0] = c
    try:
        torch.cuda.synchronize()
        ts = {}
        for on in (True, False, True, False):
            indexcheck.needed = real if on else (lambda d: False)
            t = timed(g, args, 10)
            ts[on] = min(ts.get(on, t), t)
        print(f"  check {name:32s} {size:5s} with {ts[True]*1e3:.3f} ms without {ts[False]*1e3:.3f} ms")
    except Exception as e:
        print(f"  check {name} {size}: {type(e).__name__}: {e}")
    finally:
        indexcheck.needed = real
print(f"total {time.perf_counter() - T0:.1f}s")
