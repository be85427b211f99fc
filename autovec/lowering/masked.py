"""The mask strategy: `if cond: lst.append(v)` keeps the elements where the condition holds,
in order, with boolean-mask indexing; the result keeps its type (list or tensor)."""
from __future__ import annotations

from ..plan import LoopPlan, Refusal
from .common import Lowered, Match, build


def match(plan: LoopPlan, env) -> Match | Refusal:
    filtered = [o for o in plan.outputs if o.kind == "append" and o.cond]
    if not filtered:
        return Refusal("no append happens under a condition", plan.lineno)
    what = ", ".join(dict.fromkeys(f"`{o.target or 'the comprehension'}`" for o in filtered))
    return Match("mask", plan, f"elements appended to {what} under a per-element condition are selected "
                 "with a boolean mask, in order")


def lower(m: Match, namer) -> Lowered:
    return build(m, namer, convert=True)


def guards(m: Match) -> list[str]:
    return ["an empty selection gives what the loop gives (torch.tensor([]), or the loop's error)"]
