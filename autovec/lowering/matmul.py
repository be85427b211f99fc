"""The matmul strategy: per-iteration `torch.dot`, `mv`, `mm`, `outer`, `matmul` and `@`
between loop slices and loop-invariant tensors become one `torch.einsum` over the whole
batch (a matrix product, `bmm` or `einsum` an expert would write), followed by the same
elementwise operations with loop-invariant values.

    for r in range(n):                      scores[:n] = torch.einsum('ai,i->a', feats, w) + b
        scores[r] = torch.dot(feats[r], w) + b
"""
from __future__ import annotations

import ast

from .. import fastast
from ..plan import LoopPlan, Refusal
from .common import Lowered, Match, build

# per-sample ranks each product takes, and its einsum on one sample
KINDS = {
    "dot": ((1, 1), "i,i->"), "inner": ((1, 1), "i,i->"), "vdot": None,
    "mv": ((2, 1), "mi,i->m"), "mm": ((2, 2), "mi,in->mn"), "outer": ((1, 1), "m,n->mn"),
    "ger": ((1, 1), "m,n->mn"), "matmul": (None, None),
}
_ELEMENTWISE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)


def _kind(call: ast.AST, env) -> str | None:
    if isinstance(call, ast.BinOp) and isinstance(call.op, ast.MatMult):
        return "matmul"
    if not (isinstance(call, ast.Call) and len(call.args) == 2 and not call.keywords):
        return None
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name not in KINDS or KINDS[name] is None:
        return None
    found, obj = env.resolve(ast.unparse(f))
    if not found or not (getattr(obj, "__module__", "") or "").startswith("torch"):
        return None
    return name


def _operands(node):
    if isinstance(node, ast.BinOp):
        return node.left, node.right
    return node.args[0], node.args[1]


def analyse(plan: LoopPlan, env):
    """[(marker, product node, kind)] when every output is `product (op invariant)*`, else a reason."""
    if plan.branches or any(o.cond for o in plan.outputs):
        return "the body branches"
    params = {m.param for m in plan.mapped}
    varying = params | set(plan.value_indices) | ({plan.space.index} if plan.space.index else set())
    from .common import _MapSlices
    mapper = _MapSlices(plan)
    stmts = [mapper.visit(ast.parse(s).body[0]) for s in plan.body]
    markers = {o.marker for o in plan.outputs} | {p[1] for o in plan.outputs for p in o.payloads}
    found = []
    for st in stmts:
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id in markers):
            return "the body computes intermediate values"
        products = []
        ok = _walk(st.value, env, params, varying, products)
        if ok is not True:
            return ok
        if len(products) != 1:
            return "no single matrix product per output"
        found.append(products[0])
    if not found:
        return "no matrix product"
    return found


def _walk(node, env, params, varying, products):
    kind = _kind(node, env)
    if kind:
        for operand in _operands(node):
            names = {n.id for n in fastast.walk(operand) if isinstance(n, ast.Name)}
            if names & varying and not (isinstance(operand, ast.Name) and operand.id in params):
                return f"`{ast.unparse(operand)}` is computed per iteration"
        products.append((node, kind))
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, _ELEMENTWISE_OPS):
        for side in (node.left, node.right):
            r = _walk(side, env, params, varying, products)
            if r is not True:
                return r
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _walk(node.operand, env, params, varying, products)
    names = {n.id for n in fastast.walk(node) if isinstance(n, ast.Name)}
    if names & varying:
        return f"`{ast.unparse(node)}` is not a matrix product of loop slices"
    return True  # loop-invariant


def match(plan: LoopPlan, env) -> Match | Refusal:
    if plan.scans:
        return Refusal("running values go through the scan strategy", plan.lineno)
    found = analyse(plan, env)
    if isinstance(found, str):
        return Refusal(f"not a matrix-product body: {found}", plan.lineno)
    kinds = sorted({k for _, k in found})
    return Match("matmul", plan, "each iteration computes a matrix product (" + ", ".join(kinds)
                 + ") of its slices; all iterations become one einsum / batched matmul")


def lower(m: Match, namer) -> Lowered:
    return build(m, namer, direct=True)


def guards(m: Match) -> list[str]:
    return ["per-sample operands have the ranks the product takes (1-D or 2-D); else vmap runs"]
