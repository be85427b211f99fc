"""The cost model: when a vectorized path is worth its fixed cost.

Machine constants (interpreter cost of one small torch operation, one batched operation, a
vmap call) are measured once, in a few tens of milliseconds, and cached per torch version
and machine under $XDG_CACHE_HOME/autovec (or ~/.cache/autovec). Overrides:
AUTOVEC_MIN_TRIP=<n> (a plain trip-count threshold) and AUTOVEC_COSTS=<file.json> (constants).
"""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from ._config import env as _env

# Used when nothing can be measured; figures from a 2-thread CPU with torch 2.13.
DEFAULTS = {"py_iter": 1.0e-6, "py_op": 0.8e-6, "op": 5e-6, "vmap_call": 25e-6, "own_op": 2e-6}
# autovec's own work per vectorized call (guards, slicing, conversions), in units of one
# small torch op (measured: ~20 us for broadcast, ~60 us besides vmap itself, at 2 us an op)
_OWN = {"broadcast": 5, "matmul": 10}
_OWN_DEFAULT = 12
_constants: dict | None = None


def _cache_file() -> Path:
    import torch
    base = Path(_env("XDG_CACHE_HOME") or Path.home() / ".cache") / "autovec"
    tag = f"{torch.__version__}-{platform.machine()}-{platform.python_version()}".replace("/", "_")
    return base / f"costs-v3-{tag}.json"   # v3: vmap_call without torch.func's wrapper; op = 1.3 small ops


def _measure() -> dict:
    """Time a handful of tiny operations (about 30 ms in all); best of several runs."""
    import torch

    x = torch.randn(8)

    def best(fn, reps):
        out = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(reps):
                fn()
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
    return {"py_iter": max(py - 2 * op, 0.2e-6), "py_op": op * 0.45, "op": op * 1.3, "vmap_call": vm,
            "own_op": op}


def constants() -> dict:
    global _constants
    if _constants is not None:
        return _constants
    path = _env("AUTOVEC_COSTS")
    try:
        if path:
            _constants = {**DEFAULTS, **json.loads(Path(path).read_text())}
            return _constants
        cache = _cache_file()
        if cache.is_file():
            _constants = {**DEFAULTS, **json.loads(cache.read_text())}
            return _constants
        measured = _measure()
        _constants = {**DEFAULTS, **measured}
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(measured))
        except OSError:
            pass  # a read-only home: measure again next process
    except Exception:
        _constants = dict(DEFAULTS)
    return _constants


def min_trip(strategy: str) -> int | None:
    text = _env("AUTOVEC_MIN_TRIP")
    if text and text.strip().isdigit():
        return int(text)
    return None


def estimate(strategy: str, n: int, ops: int) -> dict[str, float]:
    """Rough seconds per path for a loop of `n` iterations whose body has `ops` operations."""
    c = constants()
    python = n * (c["py_iter"] + ops * c["py_op"])
    fixed = _OWN.get(strategy, _OWN_DEFAULT) * c.get("own_op", c["py_op"] / 0.45)
    if strategy not in _OWN:
        fixed += c["vmap_call"]
    return {"python": python, "vectorized": fixed + ops * c["op"]}


def worth(strategy: str, n: int, est: dict) -> bool:
    """Vectorize when the estimate says so (or when AUTOVEC_MIN_TRIP=<n> forces a threshold)."""
    forced = min_trip(strategy)
    if forced is not None:
        return n >= max(forced, 1)
    return n >= 1 and est["vectorized"] < est["python"]
