"""The differential fuzzer (fuzz/): a bounded run finds no difference between the original
functions and their rewrites, the generator is deterministic, and the harness does catch
a rewrite that changes the answer."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fuzz import runner  # noqa: E402
from fuzz.generator import COMPILE_KINDS, KINDS, REC_KINDS, SCAN2_KINDS, generate  # noqa: E402

N_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_N", "300"))
TIME_LIMIT_S = 45.0
REC_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_REC_N", "100"))        # family "rec": about 4 s
REC_TIME_LIMIT_S = 20.0
COMPILE_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_COMPILE_N", "30"))  # compile mode: about 5 s (eager backend)
COMPILE_TIME_LIMIT_S = 30.0
SCAN2_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_SCAN2_N", "60"))      # family "scan2": about 3 s
SCAN2_TIME_LIMIT_S = 15.0
BRK_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_BRK_N", "60"))          # families "brk", "store2": about 3 s each
STORE2_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_STORE2_N", "60"))
NUMS_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_NUMS_N", "60"))        # families "nums", "fill": about 2 s each
FILL_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_FILL_N", "60"))
HALF_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_HALF_N", "60"))
INTS_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_INTS_N", "40"))
ROWS_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_ROWS_N", "60"))        # family "rows": about 3 s
WIN_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_WIN_N", "60"))          # family "win": about 2 s
METH_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_METH_N", "60"))        # family "meth": about 2 s
LOST_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_LOST_N", "60"))        # family "lost": about 2 s
NEW_TIME_LIMIT_S = 15.0

# Programs of the bounded runs below that fail because of autovec bugs the fuzzer found and
# that are not fixed yet: (family, seed) -> the bug. The bounded runs leave them out and
# test_known_autovec_bugs runs them (xfail); delete an entry once its bug is fixed.
# Fuzzer seeds that once found autovec bugs (all fixed): they run in the bounded runs and here
FIXED_AUTOVEC_BUGS = {
    ("compile", 18): "compile fallback: the step computed every appended/stored value before the driver "
                     "did the first append, so `outs.append(h); sizes.append(len(outs))` read the list "
                     "one append short",
    ("compile", 424): "fission: a list element whose value the loop never uses got a zero gradient instead of "
                      "None (the batch stacked every element)",
    ("rec", 497): "linear recurrence: a 0-d state that a per-feature factor `a` broadcasts to (d,) was scanned "
                  "with the stacked x[t] (n,) aligned with the feature dimension (wrong values when n == d)",
    ("store2", 190507): "several stores into a fresh output: the first store's batch (exp's output, saved for "
                        "its gradient) became the output, and a later store wrote into it in place",
}


def test_bounded_fuzz_run_finds_no_difference(tmp_path):
    start = time.perf_counter()
    results = []
    for seed in range(N_SEEDS):
        results.append(runner.run(seed, timeout=20.0, out_dir=tmp_path))
        if time.perf_counter() - start > TIME_LIMIT_S:
            break
    failures = [r.line() for r in results if r.failed]
    summary = runner.summary(results)
    assert len(results) >= min(N_SEEDS, 100), summary
    assert not failures, summary + "\n" + "\n".join(failures) + \
        "\n(rerun one with: python -m fuzz.runner --repro SEED)"


def _bounded(family, n, limit, tmp_path, compile=False):
    start = time.perf_counter()
    results = []
    for seed in range(n):
        results.append(runner.run(seed, timeout=20.0, out_dir=tmp_path, family=family, compile=compile))
        if time.perf_counter() - start > limit:
            break
    failures = [r.line() for r in results if r.failed]
    summary = runner.summary(results)
    flags = f"--family {family}" + (" --compile" if compile else "")
    assert not failures, summary + "\n" + "\n".join(failures) + \
        f"\n(rerun one with: python -m fuzz.runner {flags} --repro SEED)"
    return results, summary


def test_bounded_fuzz_run_of_linear_recurrences(tmp_path):
    """Family "rec": EMAs as lerps, factors outside a sum, discounted returns with dones,
    divisions, negated factors, gates; factors above 1 now and then (the loop must stay)."""
    results, summary = _bounded("rec", REC_SEEDS, REC_TIME_LIMIT_S, tmp_path)
    assert len(results) >= min(REC_SEEDS, 40), summary
    assert sum(r.path == "vectorized" for r in results) >= len(results) // 3, summary


def test_bounded_fuzz_run_of_the_compile_fallback(tmp_path):
    """Compile mode: autovec(f, fallback="compile") with the eager backend, each program called
    three times (and once on other inputs); some of the programs must take the compiled path."""
    results, summary = _bounded("compile", COMPILE_SEEDS, COMPILE_TIME_LIMIT_S, tmp_path, compile=True)
    assert len(results) >= min(COMPILE_SEEDS, 10), summary
    assert any(r.path == "compile" for r in results), summary


def test_bounded_fuzz_run_of_the_newer_scans(tmp_path):
    """Family "scan2": running extremes read in the loop (Python max/min, `if x[i] > best`,
    arg-best with payloads), running log-sum-exp, fission with loop invariants in the body."""
    results, summary = _bounded("scan2", SCAN2_SEEDS, SCAN2_TIME_LIMIT_S, tmp_path)
    assert len(results) >= min(SCAN2_SEEDS, 30), summary
    assert sum(r.path == "vectorized" for r in results) >= len(results) // 4, summary


@pytest.mark.parametrize("family, n", [("brk", BRK_SEEDS), ("store2", STORE2_SEEDS), ("nums", NUMS_SEEDS),
                                       ("fill", FILL_SEEDS), ("half", HALF_SEEDS),
                                       ("ints", INTS_SEEDS), ("rows", ROWS_SEEDS), ("win", WIN_SEEDS),
                                       ("meth", METH_SEEDS), ("lost", LOST_SEEDS)])
def test_bounded_fuzz_run_of_breaks_and_repeated_stores(family, n, tmp_path):
    """Family "brk": loops that stop at a `break` (work before it, assignments in its `if`, loop
    variables and running totals read after, while loops); "store2": several stores into one
    output per iteration (rows, columns, updates, conditions, reads between them); "nums":
    lists of Python numbers indexed, zipped and gathered by labels; "fill": slice assignments
    with per-iteration bounds and in-place updates across dtypes; "half" and "ints": the default
    family's vectorizable forms with float16 / bfloat16 data, and with int32 / int16 / uint8 data;
    "rows": rows unpacked (`for a, b in p`, `.tolist()`, comprehensions), `.item()` numbers
    with min()/max(), constants stored into rows under branches; "win": sliding windows of the
    loop's index and of bounds read from tensors (clipped, negative, ragged, out of order);
    "meth": in-place methods on a row of an argument or output (`out[i].clamp_(min=0)`,
    `zero_`, `fill_`, `copy_`) across dtypes, under conditions; "lost": counts read under their
    condition before their update, `while` stop conditions with several `and` terms, sums
    updated by a chain of terms, per-bin max / min / product scatters, bodies guarded by one
    condition under grad, in-place updates of a loop's element."""
    results, summary = _bounded(family, n, NEW_TIME_LIMIT_S, tmp_path)
    assert len(results) >= min(n, 30), summary
    assert sum(r.path == "vectorized" for r in results) >= len(results) // 4, summary


def test_scan2_family_is_deterministic_and_covers_its_forms(tmp_path):
    assert {generate(s, family="scan2").kind for s in range(300)} == set(SCAN2_KINDS)
    for seed in range(40):
        a, b = generate(seed, family="scan2"), generate(seed, family="scan2")
        assert (a.kind, a.source) == (b.kind, b.source) and a.kind.startswith("scan2/")
        assert a.path(tmp_path) != generate(seed).path(tmp_path)
        assert isinstance(a.load(tmp_path).make_inputs(), tuple)


@pytest.mark.parametrize("family, seed", sorted(FIXED_AUTOVEC_BUGS))
def test_fixed_autovec_bugs_stay_fixed(family, seed, tmp_path):
    r = runner.run(seed, out_dir=tmp_path, family=family, compile=family == "compile")
    assert not r.failed, f"{FIXED_AUTOVEC_BUGS[family, seed]}: {r.line()}"


def test_compile_mode_compares_the_third_call(tmp_path, monkeypatch):
    """A rewrite that goes wrong only from the third call on (once the step is compiled) is caught."""
    def third_call_wrong(fn, fallback=None):
        assert fallback == "compile"
        calls = []

        def g(*args):
            calls.append(1)
            r = fn(*args)
            if len(calls) >= 3 and isinstance(r, torch.Tensor) and r.is_floating_point() and r.numel():
                return r + 1.0
            return r
        return g
    monkeypatch.setattr(runner, "autovec", third_call_wrong)
    results = [runner.run(seed, out_dir=tmp_path, family="compile", compile=True) for seed in range(30)]
    assert any(r.status == "mismatch" and "call 3" in r.detail for r in results)
    assert not any(r.status == "mismatch" and ("first call" in r.detail or "second call" in r.detail)
                   for r in results)


def test_compile_mode_uses_the_eager_backend_only_while_it_runs(tmp_path):
    from autovec import compiled
    before = compiled._BACKEND
    seen = []

    def spy(fn, fallback=None):
        seen.append(compiled._BACKEND)
        return fn
    import unittest.mock
    with unittest.mock.patch.object(runner, "autovec", spy):
        runner.run(0, out_dir=tmp_path, family="compile", compile=True)
    assert seen == ["eager"] and compiled._BACKEND == before


def test_float32_rounding_is_refereed_by_a_float64_run():
    """A float32 scan that rounds differently from the loop passes when it is no further from
    the float64 loop than the loop is; a wrong value does not."""
    ref = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
    loop = torch.tensor([1.0, 0.0, 1.0])
    assert runner.refereed(loop, torch.tensor([1.0, 3e-6, 1.0]), ref)
    assert not runner.refereed(loop, torch.tensor([1.0, 0.01, 1.0]), ref)
    assert not runner.refereed(loop, torch.tensor([1.0, float("nan"), 1.0]), ref)
    notes = []
    assert runner.diff(loop, torch.tensor([1.0, 1.5e-5, 1.0]), notes=notes) is not None
    assert runner.diff(loop, torch.tensor([1.0, 1.5e-5, 1.0]), notes=notes, ref=ref) is None
    assert notes and notes[0].startswith("refereed")


def test_generator_is_deterministic():
    for seed in range(200):
        a, b = generate(seed), generate(seed)
        assert (a.kind, a.source) == (b.kind, b.source)
    assert len({generate(s).source for s in range(50)}) == 50


def test_generator_is_deterministic_across_processes():
    code = ("import hashlib; from fuzz.generator import generate; "
            "print(hashlib.sha256(''.join(generate(s).source for s in range(100)).encode()).hexdigest())")
    digests = set()
    for hashseed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hashseed, PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                             check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_generator_covers_every_form():
    seen = {generate(s).kind for s in range(3000)}
    assert seen == set(KINDS)
    assert {generate(s, family="rec").kind for s in range(300)} == set(REC_KINDS)
    assert {generate(s, family="compile").kind for s in range(600)} == set(COMPILE_KINDS)


# sha256 of the default family's programs for seeds 0..199 (kind and source): forms for new
# features go into a family of their own (or a stream of their own), so that a seed keeps
# its program. Update the digest only for a deliberate change to the default forms.
DEFAULT_FAMILY_DIGEST = "640d28a235925f8fbb17352b24315a000c993e49fbf469748408c9ce14efe55c"


def test_default_family_keeps_its_programs():
    import hashlib
    h = hashlib.sha256()
    for s in range(200):
        p = generate(s)
        h.update((p.kind + p.source).encode())
    assert h.hexdigest() == DEFAULT_FAMILY_DIGEST


def test_families_are_deterministic_and_separate(tmp_path):
    for family in ("rec", "compile", "brk", "nums", "fill", "half", "ints", "rows", "win", "meth"):
        for seed in range(50):
            a, b = generate(seed, family=family), generate(seed, family=family)
            assert (a.kind, a.source) == (b.kind, b.source) and a.kind.startswith(family + "/")
            assert a.path(tmp_path) != generate(seed).path(tmp_path)
            mod = a.load(tmp_path)
            assert isinstance(mod.make_inputs(), tuple)
    code = ("import hashlib; from fuzz.generator import generate; print(hashlib.sha256(''.join("
            "generate(s, family=f).source for f in ('rec', 'compile') for s in range(60)).encode()).hexdigest())")
    digests = set()
    for hashseed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hashseed, PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                             check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_programs_load_and_run(tmp_path):
    """Every generated module imports from its file, has source for inspect, and builds inputs."""
    import inspect
    for seed in range(60):
        prog = generate(seed)
        mod = prog.load(tmp_path)
        assert "def f(" in inspect.getsource(mod.f)
        assert isinstance(mod.make_inputs(), tuple)


def test_harness_catches_a_wrong_rewrite(tmp_path, monkeypatch):
    def off_by_a_bit(fn):
        def wrong(*args):
            r = fn(*args)
            return r * 1.01 if isinstance(r, torch.Tensor) and r.is_floating_point() and r.numel() else r
        return wrong
    monkeypatch.setattr(runner, "autovec", off_by_a_bit)
    results = [runner.run(seed, out_dir=tmp_path) for seed in range(40)]
    assert any(r.status == "mismatch" for r in results)


def test_harness_catches_a_hang(tmp_path, monkeypatch):
    def forever(fn):
        def spin(*args):
            while True:
                pass
        return spin
    monkeypatch.setattr(runner, "autovec", forever)
    r = runner.run(0, timeout=0.5, out_dir=tmp_path)
    assert r.status == "hang", r.line()


@pytest.mark.parametrize("want, got, same", [
    (1, 1, True), (1, True, False), (1.0, 1.0 + 1e-9, True), (1.0, 1.01, False), (float("nan"), float("nan"), True),
    ([torch.ones(2)], [torch.ones(2)], True), ([torch.ones(2)], (torch.ones(2),), False),
    (torch.ones(2), torch.ones(2, dtype=torch.float64), False), (torch.ones(2), torch.ones(1, 2), False),
    (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]), True),
    (torch.tensor([1, 2]), torch.tensor([1, 3]), False),
])
def test_comparison(want, got, same):
    assert (runner.diff(want, got) is None) == same


def test_bounded_steady_fuzz_run_audits_express_lanes(tmp_path, monkeypatch):
    """`--steady`: three more calls per program, where express lanes answer; every lane answer
    is audited against the general guard (a lane accepting what the guard refuses is a mismatch)."""
    from autovec import lanes
    monkeypatch.setenv(runner.STEADY_ENV, "1")
    monkeypatch.setattr(lanes, "build", lanes.build)     # (the audit wraps it: undone after the test)
    results, summary = _bounded("default", 60, 30.0, tmp_path)
    assert len(results) >= 30, summary
    assert sum(r.path == "vectorized" for r in results) >= len(results) // 4, summary
    assert getattr(lanes.build, "audited", False)    # (the audit was installed)


def test_steady_fuzz_run_reports_a_wrong_lane(tmp_path, monkeypatch):
    """The audit can fail: a lane that gives another signature id is reported as a mismatch."""
    from autovec import lanes
    monkeypatch.setenv(runner.STEADY_ENV, "1")
    real = lanes.build

    def wrong(rt, loop_id, sid, *rest, **kw):
        return real(rt, loop_id, sid + 1, *rest, **kw)
    monkeypatch.setattr(lanes, "build", wrong)
    results = [runner.run(seed, timeout=20.0, out_dir=tmp_path) for seed in range(12)]
    assert any(r.failed and "express lane" in r.detail for r in results), runner.summary(results)
