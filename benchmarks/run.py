"""Benchmark every development case: the naive loop, the hand-written version and autovec.

For each case module in ../shared/cases (KIND, loop, reference, inputs(size), TOL) this
times, at the "large" size and with torch.utils.benchmark:
  - the loop as written, the hand-vectorized `reference`,
  - autovec in steady state (after one warm-up call),
  - the first call of a fresh `autovec(case.loop)` wrapper (analysis + rewrite + run), and that
    call minus a steady-state call (the analysis alone),
    once, with time.perf_counter,
and at the "small" size the decorator's overhead (autovec against the faster of loop and
reference). `--compile` also times `torch.compile(case.loop)` in a subprocess with a cap
on the cold compile. Writes benchmarks/RESULTS.md and, if matplotlib is importable,
benchmarks/speedup.png.

Usage (from the repository root):
  .venv/bin/python benchmarks/run.py                # all cases, 1 thread
  .venv/bin/python benchmarks/run.py --quick        # smoke test, about a minute
  .venv/bin/python benchmarks/run.py --compile      # also torch.compile (slow)
  .venv/bin/python benchmarks/run.py zip_mse_pairs prealloc_fill_rows
"""
from __future__ import annotations

import argparse
import copy
import datetime
import importlib.util
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.utils.benchmark as benchmark

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_CASES = REPO.parent / "shared" / "cases"


class CaseTimeout(Exception):
    """The hard per-case time cap ran out."""


# --------------------------------------------------------------------------- loading

def case_files(folder: Path, names: list[str]) -> list[Path]:
    files = sorted(p for p in folder.glob("*.py") if p.name != "verify.py" and not p.name.startswith("_"))
    if names:
        wanted = set(names)
        files = [p for p in files if p.stem in wanted]
    return files


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"autovec_bench_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def same_value(a, b) -> bool:
    """Exact equality of argument structures, to find loops that mutate their arguments."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype \
            and torch.equal(a.detach(), b.detach())
    if isinstance(a, torch.nn.Module):
        sa, sb = a.state_dict(), b.state_dict()
        return sa.keys() == sb.keys() and all(same_value(sa[k], sb[k]) for k in sa)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:
        return False


def detach(x):
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, (list, tuple)):
        return type(x)(detach(v) for v in x)
    return x


# --------------------------------------------------------------------------- timing

@dataclass
class Budget:
    seconds: float
    start: float = field(default_factory=time.perf_counter)

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


def one_call_s(fn, args) -> tuple[float, object]:
    """One call on a private copy of the arguments, timed with perf_counter; returns (s, result)."""
    a = copy.deepcopy(args)
    t0 = time.perf_counter()
    out = fn(*a)
    return time.perf_counter() - t0, out


def timer_median_s(fn, args, *, threads: int, min_run_time: float, copy_args: bool) -> float:
    """Median seconds per call with torch.utils.benchmark. When the function mutates its
    arguments each call gets a fresh deep copy, and the copy's own time is subtracted."""
    if not copy_args:
        t = benchmark.Timer(stmt="fn(*args)", globals={"fn": fn, "args": args}, num_threads=threads)
        return t.blocked_autorange(min_run_time=min_run_time).median
    g = {"fn": fn, "args": args, "copy": copy}
    with_copy = benchmark.Timer(stmt="fn(*copy.deepcopy(args))", globals=g, num_threads=threads)
    only_copy = benchmark.Timer(stmt="copy.deepcopy(args)", globals=g, num_threads=threads)
    total = with_copy.blocked_autorange(min_run_time=min_run_time).median
    overhead = only_copy.blocked_autorange(min_run_time=min(min_run_time, 0.05)).median
    return max(total - overhead, 1e-9)


def fits(budget: Budget, one_s: float, min_run_time: float, warmup: bool = False) -> bool:
    # blocked_autorange makes at least two calls (block-size estimate, then a block) and
    # runs for at least min_run_time; a warm-up call before it adds one more
    need = max(2 * one_s, min_run_time + one_s) + (one_s if warmup else 0.0) + 0.05
    return budget.left() > need


# --------------------------------------------------------------------------- one case

@dataclass
class Row:
    name: str
    kind: str = "?"
    path: str | None = None
    loop_ms: float | None = None
    hand_ms: float | None = None
    auto_ms: float | None = None
    first_ms: float | None = None
    small_loop_us: float | None = None
    small_hand_us: float | None = None
    small_auto_us: float | None = None
    forced_small_us: float | None = None       # small size, vectorized whatever the cost model says
    forced_small_vmap_us: float | None = None  # the same with vmap only
    vmap_ms: float | None = None        # autovec with only the generic vmap form (AUTOVEC_DIRECT=0)
    nobatched_ms: float | None = None   # autovec without batched bodies (AUTOVEC_BATCHED=0)
    compile_ms: float | None = None
    compile_cold_s: float | None = None
    compile_note: str = ""
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def auto_over_hand(self):
        return self.auto_ms / self.hand_ms if self.auto_ms and self.hand_ms else None

    @property
    def speedup_hand(self):
        return self.loop_ms / self.hand_ms if self.loop_ms and self.hand_ms else None

    @property
    def speedup_auto(self):
        return self.loop_ms / self.auto_ms if self.loop_ms and self.auto_ms else None

    @property
    def analysis_ms(self):
        """What the first call costs over a steady-state call: analysis, rewrite and one-time checks."""
        return max(self.first_ms - self.auto_ms, 0.0) if self.first_ms is not None and self.auto_ms is not None \
            else None

    @property
    def small_overhead(self):
        if self.small_auto_us is None or self.small_loop_us is None or self.small_hand_us is None:
            return None
        best = min(self.small_loop_us, self.small_hand_us)
        return self.small_auto_us - best, self.small_auto_us / best


def bench_case(path: Path, opts, autovec_mod) -> Row:
    row = Row(path.stem)
    budget = Budget(opts.budget)
    mrt = opts.min_run_time
    th = opts.threads
    try:
        mod = load(path)
        row.kind = getattr(mod, "KIND", "?")
        large = mod.inputs("large")
        small = mod.inputs("small")

        # warm-up of the loop; also tells whether it mutates its arguments
        pristine = copy.deepcopy(large)
        probe = copy.deepcopy(large)
        t0 = time.perf_counter()
        expected = mod.loop(*probe)
        t_loop1 = time.perf_counter() - t0
        mutates = not same_value(probe, pristine)
        if mutates:
            row.notes.append("mutates its arguments: timed with a fresh copy per call, copy time subtracted")

        # first call of a fresh wrapper, before anything else analyses this function
        fast = autovec_mod.autovec(mod.loop)
        t_first, got = one_call_s(fast, large)
        row.first_ms = t_first * 1e3
        try:
            torch.testing.assert_close(detach(got), detach(expected), **getattr(mod, "TOL", {}))
        except Exception as e:
            row.notes.append(f"MISMATCH: autovec result differs from the loop: {str(e).splitlines()[0]}")

        row.path = autovec_mod.explain(mod.loop, *large).path

        row.loop_ms = timer_median_s(mod.loop, large, threads=th, min_run_time=mrt, copy_args=mutates) * 1e3

        # the first call (analysis included) bounds a steady-state call from above
        if fits(budget, t_first, mrt, warmup=True):
            one_call_s(fast, large)  # steady-state warm-up
            row.auto_ms = timer_median_s(fast, large, threads=th, min_run_time=mrt, copy_args=mutates) * 1e3
        else:
            row.notes.append("autovec steady state skipped (case budget)")

        # what the direct forms gain: the same wrapper logic with only vmap, and without batched bodies
        if row.path == "vectorized" and row.auto_ms is not None:
            for attr, switch in (("vmap_ms", "AUTOVEC_DIRECT"), ("nobatched_ms", "AUTOVEC_BATCHED")):
                if not fits(budget, row.auto_ms / 1e3 * 3, mrt, warmup=True):
                    break
                old = os.environ.get(switch)
                os.environ[switch] = "0"
                try:
                    variant = autovec_mod.autovec(mod.loop)
                    one_call_s(variant, large)
                    one_call_s(variant, large)
                    setattr(row, attr, timer_median_s(variant, large, threads=th, min_run_time=mrt,
                                                      copy_args=mutates) * 1e3)
                finally:
                    if old is None:
                        del os.environ[switch]
                    else:
                        os.environ[switch] = old

        # the vectorized path's own cost at the small size (AUTOVEC_MIN_TRIP=1), with and without
        # the direct forms
        if row.path == "vectorized" and budget.left() > 1.0:
            for attr, env in (("forced_small_us", {"AUTOVEC_MIN_TRIP": "1"}),
                              ("forced_small_vmap_us", {"AUTOVEC_MIN_TRIP": "1", "AUTOVEC_DIRECT": "0"})):
                old = {k: os.environ.get(k) for k in env}
                os.environ.update(env)
                try:
                    variant = autovec_mod.autovec(mod.loop)
                    for _ in range(3):
                        one_call_s(variant, small)
                    setattr(row, attr, timer_median_s(variant, small, threads=th, min_run_time=min(mrt, 0.1),
                                                      copy_args=mutates) * 1e6)
                finally:
                    for k, v in old.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v

        t_ref1 = one_call_s(mod.reference, large)[0] if budget.left() > 0.1 else math.inf
        if fits(budget, t_ref1, mrt):
            row.hand_ms = timer_median_s(mod.reference, large, threads=th, min_run_time=mrt,
                                         copy_args=mutates) * 1e3
        else:
            row.notes.append("hand-written timing skipped (case budget)")

        # decorator overhead at the small size
        small_mrt = min(mrt, 0.1)
        for attr, fn in (("small_loop_us", mod.loop), ("small_hand_us", mod.reference),
                         ("small_auto_us", fast)):
            t1 = one_call_s(fn, small)[0] if budget.left() > 2 * small_mrt else math.inf
            if not fits(budget, t1, small_mrt):
                row.notes.append("small-size timing skipped (case budget)")
                break
            setattr(row, attr, timer_median_s(fn, small, threads=th, min_run_time=small_mrt,
                                              copy_args=mutates) * 1e6)
    except CaseTimeout:
        row.error = f"timed out (hard cap {hard_cap(opts):.0f} s)"
    except Exception as e:
        row.error = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        if opts.verbose:
            traceback.print_exc()
    return row


def hard_cap(opts) -> float:
    return 2 * opts.budget + 10


# --------------------------------------------------------------------------- torch.compile

def compile_worker(case_path: str, threads: int, min_run_time: float) -> int:
    """Runs in a subprocess: cold compile of case.loop, then its steady state; JSON lines out."""
    torch.set_num_threads(threads)
    mod = load(Path(case_path))
    large = mod.inputs("large")
    compiled = torch.compile(mod.loop)
    t0 = time.perf_counter()
    compiled(*copy.deepcopy(large))
    print(json.dumps({"cold_s": time.perf_counter() - t0}), flush=True)
    pristine = copy.deepcopy(large)
    probe = copy.deepcopy(large)
    mod.loop(*probe)
    mutates = not same_value(probe, pristine)
    steady = timer_median_s(compiled, large, threads=threads, min_run_time=min_run_time, copy_args=mutates)
    print(json.dumps({"steady_ms": steady * 1e3}), flush=True)
    return 0


def bench_compile(path: Path, opts, row: Row) -> None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--compile-worker", str(path),
           "--threads", str(opts.threads), "--min-run-time", str(opts.min_run_time)]
    out, timed_out = "", False
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.compile_cap)
        out = proc.stdout
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            row.compile_note = f"error: {last[:120]}"
    except subprocess.TimeoutExpired as e:
        timed_out = True
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    for line in out.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        row.compile_cold_s = d.get("cold_s", row.compile_cold_s)
        row.compile_ms = d.get("steady_ms", row.compile_ms)
    if timed_out:
        row.compile_note = (f"cap hit ({opts.compile_cap:.0f} s)" if row.compile_cold_s is None
                            else f"steady-state timing hit the cap ({opts.compile_cap:.0f} s)")


# --------------------------------------------------------------------------- reporting

def fmt_ms(v) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def fmt_x(v) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}x" if v >= 100 else f"{v:.1f}x" if v >= 1 else f"{v:.2f}x"


def fmt_overhead(row: Row) -> str:
    o = row.small_overhead
    if o is None:
        return "-"
    diff_us, ratio = o
    return f"{diff_us:+.1f} us ({ratio:.2f}x)"


def compile_summary(row: Row) -> str:
    parts = []
    if row.compile_ms is not None:
        parts.append(f"{fmt_ms(row.compile_ms)} ms")
    if row.compile_cold_s is not None:
        parts.append(f"cold {row.compile_cold_s:.1f} s")
    if row.compile_note:
        parts.append(row.compile_note)
    return ", ".join(parts) or "-"


def geomean(values) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def summary_lines(rows: list[Row]) -> list[str]:
    lines = []
    groups = [
        ("vectorizable cases", [r for r in rows if r.kind == "vectorizable" and not r.error]),
        ("vectorizable cases autovec vectorized", [r for r in rows if r.kind == "vectorizable"
                                                   and not r.error and r.path == "vectorized"]),
    ]
    for label, group in groups:
        group = [r for r in group if r.speedup_hand and r.speedup_auto]
        gh = geomean(r.speedup_hand for r in group)
        ga = geomean(r.speedup_auto for r in group)
        gr = geomean(r.auto_over_hand for r in group)
        lines.append(f"geometric mean over {len(group)} {label}: speed-up over the loop: hand-written "
                     f"{fmt_x(gh)}, autovec {fmt_x(ga)}; autovec/hand time ratio {fmt_x(gr)}")
    both = [r for r in rows if r.auto_ms and r.vmap_ms]
    if both:
        lines.append(f"direct forms against vmap alone, over {len(both)} vectorized cases: geometric mean "
                     f"{fmt_x(geomean(r.vmap_ms / r.auto_ms for r in both))} faster (vmap-only time / autovec time)")
    both = [r for r in rows if r.forced_small_us and r.forced_small_vmap_us]
    if both:
        lines.append(f"at the small size on the vectorized path, over {len(both)} cases: geometric mean "
                     f"{fmt_x(geomean(r.forced_small_vmap_us / r.forced_small_us for r in both))} faster than "
                     "vmap alone")
    both = [r for r in rows if r.auto_ms and r.nobatched_ms]
    if both:
        lines.append(f"batched bodies, over {len(both)} vectorized cases: geometric mean "
                     f"{fmt_x(geomean(r.nobatched_ms / r.auto_ms for r in both))} (time without / with)")
    vec = [r for r in rows if r.kind == "vectorizable"]
    n_vec = sum(1 for r in vec if r.path == "vectorized")
    lines.append(f"autovec took the vectorized path on {n_vec} of {len(vec)} vectorizable cases "
                 f"({sum(1 for r in rows if r.path == 'vectorized')} of {len(rows)} cases in all)")
    firsts = sorted(r.first_ms for r in rows if r.first_ms is not None)
    extra = [r for r in rows if r.analysis_ms is not None]
    if firsts and extra:
        slow = sorted((r for r in extra if r.analysis_ms > 30), key=lambda r: -r.analysis_ms)
        lines.append(f"first call: median {statistics.median(firsts):.1f} ms over {len(firsts)} cases "
                     f"({sum(1 for f in firsts if f > 30)} over 30 ms, the run itself included); its analysis and "
                     f"rewrite (first call minus a steady-state call): median "
                     f"{statistics.median(r.analysis_ms for r in extra):.1f} ms, {len(slow)} of {len(extra)} over 30 ms"
                     + (f" ({', '.join(f'{r.name} {r.analysis_ms:.0f}' for r in slow)})" if slow else ""))
    errors = [r.name for r in rows if r.error]
    mism = [r.name for r in rows if any(n.startswith("MISMATCH") for n in r.notes)]
    lines.append(f"errors: {len(errors)}" + (f" ({', '.join(errors)})" if errors else "")
                 + f"; results differing from the loop: {len(mism)}" + (f" ({', '.join(mism)})" if mism else ""))
    return lines


def machine_lines(opts) -> list[str]:
    import autovec

    return [
        f"- date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- platform: {platform.platform()} ({platform.machine()}, {platform.processor() or 'unknown processor'})",
        f"- CPUs: {os.cpu_count()}; torch threads used: {opts.threads}",
        f"- python {platform.python_version()}, torch {torch.__version__}, autovec {autovec.__version__}",
        f"- settings: min_run_time {opts.min_run_time} s, per-case budget {opts.budget:.0f} s"
        + (" (--quick)" if opts.quick else "")
        + (f", torch.compile cap {opts.compile_cap:.0f} s" if opts.compile else ", torch.compile not run"),
    ]


def write_markdown(rows: list[Row], opts, out: Path, plot_note: str) -> None:
    head = ["case", "kind", "path", "loop ms", "hand ms", "autovec ms", "first call ms",
            "analysis ms", "autovec/hand", "hand speed-up", "autovec speed-up", "small-size overhead",
            "vmap-only ms", "no batched bodies ms", "small vectorized us", "small vmap-only us"]
    if opts.compile:
        head += ["compile ms", "compile cold s"]
    head.append("notes")
    lines = [
        "# autovec benchmark results",
        "",
        "Generated by `benchmarks/run.py`"
        + (" --quick (short timings: a smoke test, not for quoting)" if opts.quick else "") + ".",
        "",
        "## Machine",
        "",
        *machine_lines(opts),
        "",
        "## Results",
        "",
        "All times at the case's \"large\" size, median of torch.utils.benchmark runs. "
        "*path*: what `autovec.explain(case.loop, *inputs).path` says a call runs. "
        "*first call*: one call of a fresh `autovec(case.loop)` wrapper, including analysis and "
        "rewriting (in a process where torch is already warm); *analysis*: that first call minus the "
        "steady-state autovec time (analysis, rewrite and one-time checks). *speed-up*: loop time / that time. "
        "*small-size overhead*: autovec at the \"small\" size minus the faster of loop and "
        "hand-written (and the ratio). *vmap-only*: autovec with its direct forms switched off "
        "(`AUTOVEC_DIRECT=0`: every loop through `torch.func.vmap`); *no batched bodies*: "
        "`AUTOVEC_BATCHED=0` (bodies without a broadcast or matmul form run under vmap). "
        "*small vectorized* / *small vmap-only*: a call at the small size on the vectorized path "
        "whatever the cost model says (`AUTOVEC_MIN_TRIP=1`), with the direct forms and with vmap "
        "only: the fixed cost of a vectorized call.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ]
    for r in rows:
        notes = list(r.notes)
        if r.error:
            notes.insert(0, f"ERROR: {r.error}")
        cells = [r.name, r.kind, r.path or "-", fmt_ms(r.loop_ms), fmt_ms(r.hand_ms), fmt_ms(r.auto_ms),
                 fmt_ms(r.first_ms), fmt_ms(r.analysis_ms), fmt_x(r.auto_over_hand), fmt_x(r.speedup_hand), fmt_x(r.speedup_auto),
                 fmt_overhead(r), fmt_ms(r.vmap_ms), fmt_ms(r.nobatched_ms),
                 fmt_ms(r.forced_small_us), fmt_ms(r.forced_small_vmap_us)]
        if opts.compile:
            cells += [fmt_ms(r.compile_ms) if not r.compile_note.startswith("cap") else r.compile_note,
                      f"{r.compile_cold_s:.1f}" if r.compile_cold_s is not None else "-"]
            if r.compile_note and not r.compile_note.startswith("cap"):
                notes.append(f"compile: {r.compile_note}")
        cells.append("; ".join(notes).replace("|", "\\|"))
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells[:-1]) + " | " + cells[-1] + " |")
    lines += ["", "## Summary", ""] + [f"- {s}" for s in summary_lines(rows)]
    if plot_note:
        lines += ["", plot_note]
    out.write_text("\n".join(lines) + "\n")


def write_plot(rows: list[Row], out: Path) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ""
    shown = [r for r in rows if r.speedup_hand or r.speedup_auto]
    if not shown:
        return ""
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(shown) + 2), 5.5))
    xs = range(len(shown))
    w = 0.4
    ax.bar([x - w / 2 for x in xs], [r.speedup_hand or 0 for r in shown], w, label="hand-written")
    ax.bar([x + w / 2 for x in xs], [r.speedup_auto or 0 for r in shown], w, label="autovec")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("speed-up over the Python loop (log scale)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{r.name} [{r.path or '?'}]" for r in shown], rotation=70, ha="right", fontsize=8)
    ax.set_title(f"autovec vs hand-written, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return f"![speed-up over the loop]({out.name})"


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="case names (file stems); default: all")
    ap.add_argument("--cases", type=Path, default=DEFAULT_CASES, help=f"case folder (default {DEFAULT_CASES})")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--quick", action="store_true", help="short timings and budgets: a smoke test")
    ap.add_argument("--budget", type=float, default=None, help="soft time budget per case in seconds "
                    "(default 60, 10 with --quick); timings that would not fit are skipped")
    ap.add_argument("--min-run-time", type=float, default=None,
                    help="blocked_autorange min_run_time in seconds (default 0.3, 0.05 with --quick)")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(case.loop)")
    ap.add_argument("--compile-cap", type=float, default=120.0,
                    help="seconds allowed per case for torch.compile (default 120)")
    ap.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="markdown output")
    ap.add_argument("--plot", type=Path, default=HERE / "speedup.png", help="plot output")
    ap.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of failing cases")
    ap.add_argument("--compile-worker", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.budget is None:
        opts.budget = 10.0 if opts.quick else 60.0
    if opts.min_run_time is None:
        opts.min_run_time = 0.05 if opts.quick else 0.3
    return opts


def main(argv=None) -> int:
    opts = parse_args(argv)
    if opts.compile_worker:
        return compile_worker(opts.compile_worker, opts.threads, opts.min_run_time)
    torch.set_num_threads(opts.threads)
    import autovec

    files = case_files(opts.cases, opts.names)
    if not files:
        print(f"no case files found in {opts.cases}", file=sys.stderr)
        return 2
    print(f"autovec {autovec.__version__}, torch {torch.__version__}, {opts.threads} thread(s), "
          f"{len(files)} cases from {opts.cases}" + (" (quick)" if opts.quick else ""), flush=True)
    print(f"{'case':30s} {'kind':12s} {'path':10s} {'loop ms':>9s} {'hand ms':>9s} {'autovec':>9s} "
          f"{'first':>9s} {'auto/hand':>9s} {'auto spd':>9s}  small overhead", flush=True)

    def on_alarm(signum, frame):
        raise CaseTimeout()

    use_alarm = hasattr(signal, "setitimer")
    if use_alarm:
        signal.signal(signal.SIGALRM, on_alarm)
    rows = []
    t_start = time.perf_counter()
    for path in files:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, hard_cap(opts))
        try:
            row = bench_case(path, opts, autovec)
        finally:
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
        if opts.compile and not row.error:
            bench_compile(path, opts, row)
        rows.append(row)
        if row.error:
            print(f"{row.name:30s} {row.kind:12s} ERROR {row.error}", flush=True)
            continue
        print(f"{row.name:30s} {row.kind:12s} {row.path or '-':10s} {fmt_ms(row.loop_ms):>9s} "
              f"{fmt_ms(row.hand_ms):>9s} {fmt_ms(row.auto_ms):>9s} {fmt_ms(row.first_ms):>9s} "
              f"{fmt_x(row.auto_over_hand):>9s} {fmt_x(row.speedup_auto):>9s}  {fmt_overhead(row)}"
              + (f"  compile: {compile_summary(row)}" if opts.compile else ""), flush=True)
        for note in row.notes:
            print(f"    note: {note}", flush=True)

    plot_note = write_plot(rows, opts.plot)
    if not plot_note:
        print("note: matplotlib is not importable: no plot written (pip install matplotlib)")
    write_markdown(rows, opts, opts.out, plot_note)
    print()
    for line in summary_lines(rows):
        print(line)
    print(f"wrote {opts.out}" + (f" and {opts.plot}" if plot_note else "")
          + f" in {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
