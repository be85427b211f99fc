"""The where strategy: data-dependent `if`/`else`, conditional expressions and `continue`
become `torch.where` on per-element conditions (see ifconvert.py); then the body is batched."""
from __future__ import annotations

from ..plan import LoopPlan, Refusal
from .common import Lowered, Match, build


def match(plan: LoopPlan, env) -> Match | Refusal:
    if not plan.branches:
        return Refusal("the body does not branch on per-iteration data", plan.lineno)
    inside = ", ".join(f"`{h}`" for h in plan.branch_helpers)
    return Match("where", plan, "the branches " + (f"(with those of {inside}, inlined) " if inside else "")
                 + "depend on each element, so both sides are computed and `torch.where` picks per element; "
                 "iterations are otherwise independent")


def lower(m: Match, namer) -> Lowered:
    return build(m, namer, convert=True)


def guards(m: Match) -> list[str]:
    return ["both sides of each branch give the same type, dtype and shape",
            "a side that raises for some element sends the call to the Python loop",
            "with gradients required, the Python loop runs (a masked-out side could give NaN gradients)"]
