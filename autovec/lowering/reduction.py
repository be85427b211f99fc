"""The reduction strategy: accumulators (`s += v`, counts under a condition, `max(best, v)`,
arg-best tracking, the last value assigned) become sums, masked sums and arg-extrema over
the batch, with the loop's result types (a Python int stays an int)."""
from __future__ import annotations

from ..plan import LoopPlan, Refusal
from .common import Lowered, Match, build

_BUILTINS = {"sum": "one sum", "max": "an arg-max (first maximum wins, as in Python)",
             "min": "an arg-min (first minimum wins, as in Python)", "any": "`any` of a mask",
             "all": "`all` of a mask"}
_SCATTER_REDUCES = {"max": "a per-bin maximum (amax)", "min": "a per-bin minimum (amin)", "*": "a per-bin product (prod)"}
_WORDS = {"accum": "an accumulation", "best": "a running best", "last": "the last value assigned",
          "scatter": "a scatter into bins", "cat": "a concatenation"}


def match(plan: LoopPlan, env) -> Match | Refusal:
    kinds = {o.kind for o in plan.outputs}
    if plan.form == "comprehension" and plan.outputs and plan.outputs[0].consumer in _BUILTINS:
        c = plan.outputs[0].consumer
        return Match("reduction", plan, f"`{c}(...)` over independent elements becomes {_BUILTINS[c]}"
                     + (" of the selected elements" if plan.outputs[0].cond else ""))
    if not kinds or not kinds <= {"accum", "best", "last", "scatter", "cat"} or (
            kinds == {"last"} and not any(o.cond for o in plan.outputs)):
        return Refusal("the loop has outputs other than accumulators", plan.lineno)
    parts = [f"`{o.target}` is " + ({"max": "a running maximum (amax)", "min": "a running minimum (amin)",
                                     "*": "a product", "+": "a sum", "-": "a sum",
                                     "lse": "a running log-sum-exp (logsumexp)", "|": "a running logical or (any)",
                                     "&": "a running logical and (all)", "lor": "a running logical or (any)",
                                     "land": "a running logical and (all)", "or": "a running logical or (any)",
                                     "and": "a running logical and (all)"}.get(o.op, _WORDS[o.kind])
                                    if o.kind == "accum" else _WORDS[o.kind])
             + (f" of {len(o.payloads) + 1} {'factors' if o.op == '*' else 'terms'} per iteration"
                if o.kind == "accum" and o.payloads else "")
             + (f" of {o.joined} writes an iteration, interleaved in the loop's order" if o.kind == "scatter"
                and o.joined > 1 else "")
             + (f" of {o.joined} updates an iteration, interleaved in the loop's order" if o.kind == "accum"
                and o.joined > 1 else "")
             + (" under a condition" if o.cond else "")
             + (f" ({_SCATTER_REDUCES[o.op]}: scatter_reduce from each bin's own value, repeated indices "
                "combined as in the loop)" if o.kind == "scatter" and o.op in _SCATTER_REDUCES else "")
             + (" (repeated indices accumulate, as in the loop)" if o.kind == "scatter" and o.op in ("+", "-") else "")
             + (" (the last write to an index wins, as in the loop)" if o.kind == "scatter" and not o.op else "")
             for o in plan.outputs if (o.kind != "last" or o.cond) and o.joined != -1]
    return Match("reduction", plan, "; ".join(parts) + ", computed over all iterations at once")


def lower(m: Match, namer) -> Lowered:
    return build(m, namer, convert=m.plan.branches)


def guards(m: Match) -> list[str]:
    return ["the accumulator is a number or a tensor", "compared values have one element each"]
