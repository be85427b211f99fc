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
from fuzz.generator import KINDS, generate  # noqa: E402

N_SEEDS = int(os.environ.get("AUTOVEC_FUZZ_N", "300"))
TIME_LIMIT_S = 45.0


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
