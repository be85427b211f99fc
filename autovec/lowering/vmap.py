"""The vmap strategy: any independent body becomes `torch.func.vmap` over an extracted
body function, with the loop index (when used as a number) passed as `torch.arange`."""
from __future__ import annotations

from ..plan import LoopPlan
from .common import Lowered, Match, build


def match(plan: LoopPlan, env) -> Match:
    what = {"for": "iterations", "while": "iterations", "comprehension": "elements"}[plan.form]
    if plan.space.kind == "nest":
        what = f"iterations of the {len(plan.space.levels)}-deep loop nest"
    reason = f"{what} are independent: each reads only its own slice of " + (
        ", ".join(f"`{m.base}`" for m in plan.mapped) or "the loop data")
    if plan.outputs:
        reason += " and writes only its own result"
    return Match("vmap", plan, reason)


def lower(m: Match, namer) -> Lowered:
    return build(m, namer)


def guards(m: Match) -> list[str]:
    return ["trip count >= 1 and within every indexed dimension", "inputs are tensors on one device",
            "outputs do not share memory with inputs", "called functions are free of side effects",
            "first call per signature: one iteration run unbatched agrees in type, dtype and shape"]
