"""The cost model: when a vectorized path is worth its fixed cost. Constants are rough
figures measured on a 2-thread CPU (torch 2.13); override with AUTOVEC_MIN_TRIP=<n>."""
from __future__ import annotations

import os

# Smallest trip count at which each strategy beats the Python loop. A broadcast call costs
# about one torch op per body op; a vmap call adds ~20 us of fixed cost, about two to four
# iterations of a typical Python body.
MIN_TRIP = {"broadcast": 2, "vmap": 4}
PY_ITER_S = 4e-6        # interpreter + one small torch op, per op per iteration
OP_S = 5e-6             # one batched torch op on small data
VMAP_FIXED_S = 20e-6


def min_trip(strategy: str) -> int:
    env = os.environ.get("AUTOVEC_MIN_TRIP")
    if env and env.strip().isdigit():
        return int(env)
    return MIN_TRIP.get(strategy, 4)


def estimate(strategy: str, n: int, ops: int) -> dict[str, float]:
    """Rough seconds per path for a loop of `n` iterations whose body has `ops` operations."""
    python = n * (ops + 1) * PY_ITER_S
    vec = ops * OP_S + (VMAP_FIXED_S if strategy == "vmap" else 0.0)
    return {"python": python, "vectorized": vec}
