"""The broadcast strategy: a body that is elementwise over its slices runs once on whole
tensors (the mapped dimension moved to the front, ranks aligned as broadcasting would)."""
from __future__ import annotations

import ast

from ..plan import LoopPlan, Refusal
from .common import Lowered, Match, build

# elementwise functions and tensor methods: the result at a position depends only on the
# inputs at that (broadcast) position, so a leading batch dimension passes straight through
ELEMENTWISE = {
    "abs", "absolute", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "clamp",
    "clamp_max", "clamp_min", "clip", "cos", "cosh", "div", "divide", "elu", "erf", "erfc", "erfinv", "exp",
    "exp2", "expm1", "float_power", "floor", "floor_divide", "fmod", "gelu", "hardshrink", "hardsigmoid",
    "hardswish", "hardtanh", "heaviside", "isfinite", "isinf", "isnan", "leaky_relu", "lerp", "log", "log10",
    "log1p", "log2", "logical_and", "logical_not", "logical_or", "logical_xor", "logit", "maximum", "minimum",
    "mish", "mul", "multiply", "nan_to_num", "neg", "negative", "pow", "reciprocal", "relu", "relu6",
    "remainder", "round", "rsqrt", "selu", "celu", "sigmoid", "sign", "sgn", "silu", "sin", "sinh",
    "softplus", "softsign", "sqrt", "square", "sub", "subtract", "tan", "tanh", "tanhshrink", "true_divide",
    "trunc", "where", "xlogy", "logsigmoid", "threshold", "eq", "ne", "lt", "le", "gt", "ge", "fmax", "fmin",
    "copysign", "hypot", "sinc", "deg2rad", "rad2deg", "frac", "signbit", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_not", "float", "double", "half", "int", "long", "bool",
}
_DIM_KEYWORDS = {"dim", "axis", "dims", "keepdim", "out"}


def match(plan: LoopPlan, env) -> Match | Refusal:
    nodes = [ast.parse(s) for s in plan.body] + [ast.parse(o.value, mode="eval") for o in plan.outputs]
    mapped_src = {_norm(f"{m.base}") for m in plan.mapped}
    for tree in nodes:
        for n in ast.walk(tree):
            bad = _not_elementwise(n, plan, env)
            if bad:
                return Refusal(f"not elementwise: {bad}", plan.lineno)
    if not plan.mapped:
        return Refusal("no tensor is sliced by the loop", plan.lineno)
    if any(o.kind == "accum" for o in plan.outputs):
        return Refusal("accumulators go through the vmap form", plan.lineno)
    del mapped_src
    return Match("broadcast", plan, "the body is elementwise on "
                 + ", ".join(f"`{_slice_text(m, plan)}`" for m in plan.mapped)
                 + ", so it runs once on whole tensors")


def _norm(s: str) -> str:
    return s.replace(" ", "")


def _slice_text(m, plan) -> str:
    if plan.space.kind == "elements" and any(src == m.base for _, src in plan.space.elements):
        return m.param
    idx = plan.space.index or "i"
    parts = [":"] * m.dim + [idx + (f" + {m.offset}" if m.offset > 0 else f" - {-m.offset}" if m.offset else "")]
    return f"{m.base}[{', '.join(parts)}]"


def _not_elementwise(n: ast.AST, plan: LoopPlan, env) -> str | None:
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
        return f"matrix product `{ast.unparse(n)}`"
    if isinstance(n, (ast.BoolOp, ast.IfExp, ast.ListComp, ast.GeneratorExp, ast.Lambda, ast.List, ast.Tuple,
                      ast.Dict, ast.Set, ast.If, ast.Starred)):
        return f"`{ast.unparse(n)}` is not an elementwise tensor expression"
    if isinstance(n, ast.Compare) and len(n.ops) > 1:
        return f"chained comparison `{ast.unparse(n)}`"
    if isinstance(n, ast.Subscript):
        if _is_mapped_subscript(n, plan):
            return None
        return f"indexing `{ast.unparse(n)}`"
    if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
        return None
    if isinstance(n, ast.Call):
        f = n.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name is None or name not in ELEMENTWISE and not _elementwise_helper(f, env):
            return f"`{ast.unparse(f)}(...)`"
        for kw in n.keywords:
            if kw.arg in _DIM_KEYWORDS or kw.arg is None:
                return f"`{ast.unparse(n)}` takes a dimension"
    return None


def _is_mapped_subscript(n: ast.Subscript, plan: LoopPlan) -> bool:
    from ..analysis.loops import match_subscript
    if plan.space.index is None:
        return False
    m = match_subscript(n, plan.space.index)
    if not isinstance(m, tuple):
        return False
    entries = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
    # only the loop index and full slices: anything else selects inside the slice
    return all(k == m[0] or (isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None)
               for k, e in enumerate(entries))


def _elementwise_helper(f: ast.AST, env) -> bool:
    """A user helper whose body only returns elementwise expressions of its arguments."""
    import types

    found, obj = env.resolve(ast.unparse(f)) if hasattr(env, "resolve") else (False, None)
    if not found or not isinstance(obj, types.FunctionType):
        return False
    from ..frontend import NoSource, capture
    try:
        cap = capture(obj)
    except NoSource:
        return False
    from ..purity import Env
    inner_env = Env(cap)
    fake = LoopPlan(0, 0, 0, "", "for", plan_space_none(), (), (), (), False, (), ())
    for stmt in cap.tree.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if not isinstance(stmt, (ast.Assign, ast.Return)) or stmt.value is None:
            return False
        if isinstance(stmt, ast.Assign) and not all(isinstance(t, ast.Name) for t in stmt.targets):
            return False
        for n in ast.walk(stmt.value):
            if _not_elementwise(n, fake, inner_env):
                return False
    return True


def plan_space_none():
    from ..plan import IterSpace
    return IterSpace("elements")


def lower(m: Match, namer) -> Lowered:
    return build(m, namer)


def guards(m: Match) -> list[str]:
    return ["every slice has the batch dimension first after alignment; loop-invariant tensors have "
            "no more dimensions than the slices (else the vmap form runs)"]
