"""Lowering: pick one strategy per planned loop and produce its new statements.

Each strategy module has the same small interface:
    match(plan, env) -> Match | Refusal
    lower(match, namer) -> Lowered
    guards(match) -> list[str]          (run-time checks, in words, for explain)
Adding a strategy is adding a module and a line in STRATEGIES (tried in order).
Later strategies (where/mask, reduction, matmul, scan, fission) plug in here.
"""
from __future__ import annotations

from ..plan import LoopPlan
from . import broadcast, fission, masked, matmul, reduction, scan, vmap, where
from .common import Lowered, Match

STRATEGIES = [fission, scan, broadcast, matmul, reduction, masked, where, vmap]


def choose(plan: LoopPlan, env):
    """(match, strategy module) for the first strategy that matches, else (None, refusals)."""
    refused = []
    for strategy in STRATEGIES:
        if plan.exit_cond and strategy in (fission, scan, matmul):
            # a loop with `break`: the strategies that build a body (the condition runs first)
            refused.append(f"{strategy.__name__.rsplit('.', 1)[-1]}: not with `break`")
            continue
        m = strategy.match(plan, env)
        if isinstance(m, Match):
            return m, strategy
        refused.append(m)
    return None, refused


__all__ = ["choose", "Lowered", "Match", "STRATEGIES"]
