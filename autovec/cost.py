"""The cost model: when a vectorized path is worth its fixed cost. Constants are rough
figures measured on a 2-thread CPU (torch 2.13); override with AUTOVEC_MIN_TRIP=<n>."""
from __future__ import annotations

from ._config import env as _env

PY_ITER_S = 1.0e-6      # interpreter cost of one iteration
PY_OP_S = 0.8e-6        # one small torch op (or Python operation) in one iteration
OP_S = 5e-6             # one batched torch op on small data


# fixed cost of one vectorized call (guards, slicing, the batched call, output conversion)
FIXED_S = {"broadcast": 20e-6, "matmul": 40e-6}
DEFAULT_FIXED_S = 90e-6   # vmap-based strategies (measured: vmap itself costs ~25 us a call)


def min_trip(strategy: str) -> int | None:
    env = _env("AUTOVEC_MIN_TRIP")
    if env and env.strip().isdigit():
        return int(env)
    return None


def estimate(strategy: str, n: int, ops: int) -> dict[str, float]:
    """Rough seconds per path for a loop of `n` iterations whose body has `ops` operations."""
    python = n * (PY_ITER_S + ops * PY_OP_S)
    vec = FIXED_S.get(strategy, DEFAULT_FIXED_S) + ops * OP_S
    return {"python": python, "vectorized": vec}


def worth(strategy: str, n: int, est: dict) -> bool:
    """Vectorize when the estimate says so (or when AUTOVEC_MIN_TRIP=<n> forces a threshold)."""
    forced = min_trip(strategy)
    if forced is not None:
        return n >= max(forced, 1)
    return n >= 1 and est["vectorized"] < est["python"]
