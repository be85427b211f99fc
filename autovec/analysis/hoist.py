"""Source-level moves that leave what a function computes unchanged and let more loops be planned.

`for i in range(n): with torch.no_grad(): BODY` is `with torch.no_grad(): for i in range(n): BODY`:
the only steps that move under no_grad are `range`'s own integers and their binding to `i`,
which autograd never sees. The loop (its rewrite, its guard, its commit and its fallback) then
runs inside the `with`, as every iteration's body did.

`for ..: BODY else: TAIL` (or `while`) where no `break` of BODY ends this loop is `for ..: BODY`
followed by TAIL: Python runs the `else` block whenever the loop ends other than by `break`, and
a `return` or an exception skips it in both spellings. TAIL keeps its own lines, so tracebacks
point at the user's code.
"""
from __future__ import annotations

import ast

import torch

from ..frontend import Captured, attr_chain

_NO_GRAD = (torch.no_grad, torch.autograd.grad_mode.no_grad)


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def _local_names(fn: ast.FunctionDef) -> set[str]:
    a = fn.args
    out = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    out |= {x.arg for x in (a.vararg, a.kwarg) if x}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not fn:
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {al.asname or al.name.split(".")[0] for al in n.names}
    return out


def _resolves(cap: Captured, node: ast.expr, local: set[str], want) -> bool:
    parts = _dotted(node)
    if parts is None or parts[0] in local:
        return False
    found, obj = cap.lookup(parts[0])
    if not found:
        return False
    found, obj = attr_chain(obj, parts[1:])
    return found and any(obj is w for w in want)


def _no_grad_with(cap: Captured, w: ast.With, local: set[str]) -> bool:
    """`with torch.no_grad():` (the real one, no `as`, nothing else in the statement)."""
    if len(w.items) != 1 or w.items[0].optional_vars is not None:
        return False
    ctx = w.items[0].context_expr
    return isinstance(ctx, ast.Call) and not ctx.args and not ctx.keywords and _resolves(cap, ctx.func, local, _NO_GRAD)


def _hoistable(cap: Captured, loop: ast.For, local: set[str]) -> bool:
    if loop.orelse or len(loop.body) != 1 or not isinstance(loop.body[0], ast.With):
        return False
    if not _no_grad_with(cap, loop.body[0], local):
        return False
    it = loop.iter
    return (isinstance(loop.target, ast.Name) and isinstance(it, ast.Call) and not it.keywords
            and _resolves(cap, it.func, local, (range,)))


def hoist_no_grad(cap: Captured) -> int:
    """Move `with torch.no_grad():` that is the whole body of a `for .. in range(..)` loop out
    around the loop, innermost loops first; returns how many moved."""
    fn = cap.tree
    local = _local_names(fn)
    moved = 0
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For)]
    parent = {c: p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
    for loop in reversed(loops):     # ast.walk is breadth-first: the innermost loops come last
        if not _hoistable(cap, loop, local):
            continue
        w = loop.body[0]
        loop.body = w.body
        while len(loop.body) == 1 and isinstance(loop.body[0], ast.With) and _no_grad_with(cap, loop.body[0], local):
            loop.body = loop.body[0].body    # an inner loop's no_grad, hoisted first: already in force here
        outer = ast.With(items=w.items, body=[loop], type_comment=None)
        ast.copy_location(outer, loop)
        outer.end_lineno, outer.end_col_offset = loop.end_lineno, loop.end_col_offset
        p = parent[loop]
        for field, value in ast.iter_fields(p):
            if isinstance(value, list) and any(v is loop for v in value):
                value[[k for k, v in enumerate(value) if v is loop][0]] = outer
                break
        parent[outer], parent[loop] = p, outer
        moved += 1
    return moved


def _breaks_out(node: ast.AST) -> bool:
    """Whether `node` holds a `break` that ends the loop around it: nested loops' own bodies
    are theirs, but their `else` blocks belong to the enclosing loop; definitions are no part."""
    if isinstance(node, ast.Break):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return False
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return any(_breaks_out(s) for s in node.orelse)
    return any(_breaks_out(c) for c in ast.iter_child_nodes(node))


def _holder(root: ast.AST, node: ast.AST):
    """(the list of statements that holds `node`, its position) under `root`."""
    for p in ast.walk(root):
        for _, value in ast.iter_fields(p):
            if isinstance(value, list):
                for k, v in enumerate(value):
                    if v is node:
                        return value, k
    raise ValueError("statement not found")


def drop_loop_else(cap: Captured) -> int:
    """`for/while .. else:` whose body has no `break` ending that loop: the `else` block moves
    to right after the loop (innermost loops first); returns how many moved."""
    fn = cap.tree
    moved = 0
    loops = [n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While)) and n.orelse]
    for loop in reversed(loops):     # breadth-first: an `else` inside another loop's `else` moves first
        if any(_breaks_out(s) for s in loop.body):
            continue
        stmts, k = _holder(fn, loop)
        tail, loop.orelse = loop.orelse, []
        last = loop.body[-1]
        loop.end_lineno, loop.end_col_offset = last.end_lineno, last.end_col_offset
        stmts[k + 1:k + 1] = tail
        moved += 1
    return moved
