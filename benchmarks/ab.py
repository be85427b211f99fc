"""A/B timing of autovec against an earlier commit, in one process, calls interleaved.

This project's machines are shared VMs: two runs of the same code in separate processes often
differ by 20% or more (memory-bound cases by up to 2x), which hides a change of a few
microseconds. Here the earlier commit's package is imported beside the working tree's (as
`autovec_base`, from `git archive REV autovec`), both wrap every case's loop, and for each case
and size the hand-written code, the current autovec and the earlier one are timed in turn,
seven rounds, best of each, the two autovec versions in turns (steady state: 30 warm-up calls first, so that timed cost decisions
have settled).

    .venv/bin/python benchmarks/ab.py --base a806155            # every case in ../shared/cases
    .venv/bin/python benchmarks/ab.py --base HEAD~3 -k leaky -k scatter

Large sizes are timed only where the hand-written code takes under 3 ms (the fixed cost is what
this compares). The last line is the geometric mean of autovec's time over the hand-written
code's, earlier commit and now. The earlier package's few absolute imports (`autovec.api` in
equivalence checking, the pytest plugin) resolve to the current package; none is on the timed
path.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import math
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _base_package(rev: str, where: Path) -> None:
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "autovec"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=tar, check=True)
    (where / "autovec").rename(where / "autovec_base")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the earlier commit (any git revision)")
    ap.add_argument("--cases", type=Path, default=ROOT.parent / "shared" / "cases")
    ap.add_argument("-k", action="append", default=[], help="only cases whose name has this (repeatable)")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)

    import torch
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="autovec-ab-"))
    _base_package(a.base, tmp)
    sys.path.insert(0, str(tmp))
    sys.path.insert(0, str(a.cases))
    import autovec
    import autovec_base

    names = sorted(p.stem for p in a.cases.glob("*.py") if not p.name.startswith(("_", "verify")))
    names = [n for n in names if not a.k or any(k in n for k in a.k)]
    now_r, base_r = [], []
    for name in names:
        case = importlib.import_module(name)
        f_now, f_base = autovec.autovec(case.loop), autovec_base.autovec(case.loop)
        for size in ("small", "large"):
            args = case.inputs(size)
            if size == "large":
                if case.KIND not in ("vectorizable", "partial"):
                    continue
                t = time.perf_counter()
                case.reference(*copy.deepcopy(args))
                if time.perf_counter() - t > 0.003:
                    continue
            probe = copy.deepcopy(args)
            case.loop(*probe)
            # a caller's list the code appends to: every call gets its own copy
            mutates = any(isinstance(x, list) and len(x) != len(y) for x, y in zip(args, probe))

            def run(fn):
                return fn(*(copy.deepcopy(args) if mutates else args))
            for _ in range(30):
                run(f_now)
                run(f_base)
            n = 200 if size == "small" else 100
            hand, now, base = [], [], []
            for r in range(a.rounds):
                hand.append(timeit.timeit(lambda: run(case.reference), number=n) / n)
                # (in turns: the one timed second finds the memory the first left; on a memory-bound
                # case that alone made identical code 15% slower when always timed first)
                for fn, into in ([(f_now, now), (f_base, base)] if r % 2 == 0 else [(f_base, base), (f_now, now)]):
                    into.append(timeit.timeit(lambda: run(fn), number=n) / n)
            h, t_now, t_base = min(hand), min(now), min(base)
            now_r.append(t_now / h)
            base_r.append(t_base / h)
            print(f"{name:30s} {size:5s} hand {h * 1e6:9.2f} us  base {t_base * 1e6:9.2f} (x{t_base / h:.2f})  "
                  f"now {t_now * 1e6:9.2f} (x{t_now / h:.2f})", flush=True)

    def g(r):
        return math.exp(sum(map(math.log, r)) / len(r)) if r else float("nan")
    print(f"geomean autovec/hand over {len(now_r)} rows: base ({a.base}) {g(base_r):.2f}  now {g(now_r):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
