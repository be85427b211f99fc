"""The compile strategy: a loop that cannot be vectorized keeps its Python loop, but its body
becomes a step function that the runtime may hand to torch.compile (see autovec.compiled).

    def _av_step1(x_t, h):              # the body, state in and out
        h = torch.tanh(x_t @ W + h @ U)
        return (h,)
    _av_it1 = range(T)                   # the iterable, evaluated once as in the original
    _av_s1 = _av.stepper(1, _av_step1, (torch.tanh,), _av_it1)
    if _av_s1 is not None:               # compiled (the cost model says it pays)
        for t in _av_it1:
            (h,) = _av_s1(x[t], h)
            outs.append(...)             # appends and stores stay in the driver
    else:
        for t in _av_it1:                # the original loop
            ...
"""
from __future__ import annotations

import ast

from .. import fastast
from ..codegen import set_lines
from ..plan import StepPlan


def reason(sp: StepPlan, refusal: str, fallback: str) -> str:
    if fallback == "compile":
        return (f"{refusal.rstrip('.')}; its body ({sp.ops} operations) runs as a torch.compile'd step "
                "function from the second call on")
    return (f"{refusal.rstrip('.')}; its body ({sp.ops} operations) may run as a torch.compile'd step "
            "function where the cost model expects the compile time to pay back over repeated calls")


def lower(sp: StepPlan, node: ast.For, namer, runtime: str) -> tuple[list, list]:
    """(statements replacing the loop, display statements)."""
    L = sp.loop_id
    STEP, IT, S = namer.new(f"_av_step{L}"), namer.new(f"_av_it{L}"), namer.new(f"_av_s{L}")
    fdef = ast.parse(f"def {STEP}({', '.join(sp.params)}): pass").body[0]
    fdef.body = [fastast.clone(s) for s in sp.body]
    ret = ast.parse(f"return ({', '.join(sp.returns)},)").body[0]
    fdef.body.append(ret)
    calls = "(" + "".join(f"{c}, " for c in sp.calls) + ")"
    head = ast.parse(f"{IT} = 0\n{S} = {runtime}.stepper({L}, {STEP}, {calls}, {IT})").body
    head[0].value = fastast.clone(node.iter)
    call = ast.parse(f"({', '.join(sp.returns)},) = {S}({', '.join(sp.args)})").body
    driver = [s for text in sp.driver for s in ast.parse(text).body]
    compiled_loop = ast.For(target=fastast.clone(node.target), iter=ast.Name(id=IT, ctx=ast.Load()),
                            body=call + driver, orelse=[])
    original = fastast.clone(node)
    original.iter = ast.Name(id=IT, ctx=ast.Load())
    branch = ast.If(test=ast.parse(f"{S} is not None", mode="eval").body, body=[compiled_loop], orelse=[original])
    set_lines([ret] + head + [compiled_loop.target, compiled_loop.iter] + call + driver + [branch.test],
              node.lineno, node.lineno)
    for stmt in [fdef, branch]:
        ast.copy_location(stmt, node)
    compiled_loop.lineno = branch.lineno = fdef.lineno = node.lineno
    ast.fix_missing_locations(fdef)
    ast.fix_missing_locations(branch)
    stmts = [fdef] + head + [branch]

    shown = fastast.clone(fdef)
    display = [shown] + ast.parse(
        f"{STEP} = torch.compile({STEP})  # only once the cost model expects the compile to pay\n"
        f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}:\n"
        f"    ({', '.join(sp.returns)},) = {STEP}({', '.join(sp.args)})\n"
        + "".join(f"    {d}\n" for d in sp.driver)).body
    return stmts, display
