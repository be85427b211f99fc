"""The fission strategy: a sequential loop keeps running in Python, but the computations that
do not depend on its carried values run for all iterations at once beforehand (see
analysis/fission.py); the loop reads them row by row."""
from __future__ import annotations

import ast

from .. import fastast
from ..plan import LoopPlan, Refusal
from .common import Lowered, Match, build


def match(plan: LoopPlan, env) -> Match | Refusal:
    if plan.form != "fission":
        return Refusal("not a loop split by fission", plan.lineno)
    return Match("fission", plan, plan.notes[0])


def lower(m: Match, namer) -> Lowered:
    # (values computed once before the pre-pass, in the guarded block: no express, which has none)
    low = build(m, namer, express=not m.plan.invariants)
    loop = fastast.clone(m.plan.fission_loop)
    branch = low.stmts[-1]
    *commit, done = branch.body     # the commit ends with `T.done()` (build)
    # the call's time for the cost model (Token.done) includes the loop that stays: the Python
    # path it is weighed against runs that loop too
    branch.body = [s for s in commit if not _is_pass(s)] + [loop, done]
    if m.plan.invariants:
        # computed once, inside the guarded block before the batched pre-pass (which may read
        # them): an exception there runs the original loop, which raises it at its own place
        try_stmt = next(s for s in low.stmts if isinstance(s, ast.Try))
        guard_if = try_stmt.body[1]
        guard_if.body[0:0] = [fastast.clone(s) for s in m.plan.invariants]
        low.display = [fastast.clone(s) for s in m.plan.invariants] + low.display
    low.display = low.display + [fastast.clone(m.plan.fission_loop)]
    return low


def _is_pass(s) -> bool:
    import ast
    return isinstance(s, ast.Pass)


def guards(m: Match) -> list[str]:
    return ["the independent part is checked like any batched body; if it cannot run, the whole "
            "original loop runs"]
