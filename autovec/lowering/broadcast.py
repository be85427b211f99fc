"""The broadcast strategy: a body that is elementwise over its slices runs once on whole
tensors (the mapped dimension moved to the front, ranks aligned as broadcasting would)."""
from __future__ import annotations

import ast

from .. import fastast
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
    if plan.scans:
        return Refusal("running values go through the scan strategy", plan.lineno)
    if plan.space.kind == "nest":
        return Refusal("loop nests run as nested vmap", plan.lineno)
    if not plan.mapped:
        return Refusal("no tensor is sliced by the loop", plan.lineno)
    if plan.branches or any(o.kind not in ("store", "append") or o.cond or o.pytype for o in plan.outputs):
        return Refusal("branches, conditional outputs and accumulators go through other strategies", plan.lineno)
    varying = {m.param for m in plan.mapped} | {t for t, _ in plan.space.elements}
    if plan.space.index:
        varying.add(plan.space.index)
    trees = [ast.parse(s).body[0] for s in plan.body] + [ast.parse(o.value, mode="eval").body
                                                          for o in plan.outputs]
    for tree in trees:
        for n in fastast.walk(tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                varying.add(n.id)
    for tree in trees:
        bad = _first_problem(tree, plan, env, varying)
        if bad:
            return Refusal(f"not elementwise: {bad}", plan.lineno)
    return Match("broadcast", plan, "the body is elementwise on "
                 + ", ".join(f"`{_slice_text(m, plan)}`" for m in plan.mapped)
                 + ", so it runs once on whole tensors")


def _first_problem(node: ast.AST, plan: LoopPlan, env, varying: set) -> str | None:
    """The first sub-expression that is not elementwise; mapped slices count as leaves."""
    if isinstance(node, ast.Subscript) and _is_mapped_subscript(node, plan):
        return None
    bad = _not_elementwise(node, plan, env, varying)
    if bad:
        return bad
    for child in ast.iter_child_nodes(node):
        if isinstance(node, ast.Call) and child is node.func:
            continue  # checked as a whole by _not_elementwise
        bad = _first_problem(child, plan, env, varying)
        if bad:
            return bad
    return None


def _slice_text(m, plan) -> str:
    if plan.space.kind == "elements" and any(src == m.base for _, src in plan.space.elements):
        return m.param
    idx = plan.space.index or "i"
    parts = [":"] * m.dim + [idx + (f" + {m.offset}" if m.offset > 0 else f" - {-m.offset}" if m.offset else "")]
    return f"{m.base}[{', '.join(parts)}]"


def _root(n: ast.AST):
    while isinstance(n, (ast.Attribute, ast.Subscript, ast.Call)):
        n = n.func if isinstance(n, ast.Call) else n.value
    return n.id if isinstance(n, ast.Name) else None


def _not_elementwise(n: ast.AST, plan: LoopPlan, env, varying: set) -> str | None:
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
        return f"matrix product `{ast.unparse(n)}`"
    if isinstance(n, (ast.BoolOp, ast.IfExp, ast.ListComp, ast.GeneratorExp, ast.Lambda, ast.List, ast.Tuple,
                      ast.Dict, ast.Set, ast.If, ast.Starred, ast.JoinedStr)):
        return f"`{ast.unparse(n)}` is not an elementwise tensor expression"
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
        return f"`{ast.unparse(n)}` asks for the truth of one element"
    if isinstance(n, ast.Compare) and len(n.ops) > 1:
        return f"chained comparison `{ast.unparse(n)}`"
    if isinstance(n, ast.Compare) and any(isinstance(o, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for o in n.ops):
        return f"`{ast.unparse(n)}` is not elementwise"
    if isinstance(n, ast.Subscript):
        return f"indexing `{ast.unparse(n)}`"
    if isinstance(n, ast.Attribute) and (_root(n) in varying or isinstance(n.value, ast.Subscript)
                                         and _is_mapped_subscript(n.value, plan)):
        # (`x[i].T` reverses one row's dimensions, the batch's all of them: not elementwise)
        return f"attribute `{ast.unparse(n)}` of a per-iteration value (e.g. its shape)"
    if isinstance(n, ast.Call):
        f = n.func
        if isinstance(f, ast.Attribute):
            ok = f.attr in ELEMENTWISE and (_root(f) in varying or _torch_function(f, env))
            ok = ok or _elementwise_helper(f, env)
        elif isinstance(f, ast.Name):
            ok = (f.id == "abs" and env.is_builtin("abs")) or _torch_function(f, env) or _elementwise_helper(f, env)
        else:
            ok = False
        if not ok:
            return f"`{ast.unparse(f)}(...)`"
        for kw in n.keywords:
            if kw.arg in _DIM_KEYWORDS or kw.arg is None:
                return f"`{ast.unparse(n)}` takes a dimension"
    return None


def _torch_function(f: ast.AST, env) -> bool:
    """`f` names an elementwise function of torch (torch.exp, F.relu, from torch import sigmoid)."""
    found, obj = env.resolve(ast.unparse(f))
    if not found:
        return False
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__name__", "")
    return name in ELEMENTWISE and module.startswith("torch")


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
    args = cap.tree.args
    params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    fake = LoopPlan(0, 0, 0, "", "for", plan_space_none(), (), (), (), False, (), ())
    for stmt in cap.tree.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if not isinstance(stmt, (ast.Assign, ast.Return)) or stmt.value is None:
            return False
        if isinstance(stmt, ast.Assign) and not all(isinstance(t, ast.Name) for t in stmt.targets):
            return False
        if isinstance(stmt, ast.Assign):
            params |= {t.id for t in stmt.targets}
        if _first_problem(stmt.value, fake, inner_env, params):
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
