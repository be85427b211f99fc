"""Put lowered loops back into the function: the executable tree (guards and fallbacks)
and the display tree (what a person would write), both from the same lowering."""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from . import fastast
from .codegen import Namer, all_names, set_lines
from .lowering import Lowered


@dataclass
class Rewritten:
    tree: ast.FunctionDef          # executable
    display: ast.FunctionDef       # readable, guards and fallbacks left out


def _find(tree: ast.AST, info) -> ast.AST:
    kind = {"for": ast.For, "while": ast.While, "comprehension": ast.ListComp,
            "generator": ast.GeneratorExp}[info.kind]
    for n in fastast.walk(tree):
        if isinstance(n, kind) and n.lineno == info.lineno and n.col_offset == info.col:
            return n
    raise LookupError(f"loop at line {info.lineno} not found")


def _parents(tree):
    return {c: p for p in fastast.walk(tree) for c in ast.iter_child_nodes(p)}


def _replace(parent: ast.AST, old: ast.AST, new) -> None:
    for field, value in ast.iter_fields(parent):
        if isinstance(value, list):
            for k, v in enumerate(value):
                if v is old:
                    value[k:k + 1] = new if isinstance(new, list) else [new]
                    return
        elif value is old:
            setattr(parent, field, new)
            return
    raise LookupError("node not found in parent")


def _stmt_of(node, parent):
    while not isinstance(node, ast.stmt):
        node = parent[node]
    return node


def _swap_calls(tree: ast.AST, swaps: dict) -> None:
    if not swaps:
        return
    parent = _parents(tree)
    for n in list(fastast.walk(tree)):
        # (calls, and a consumer's guard `C(out) if out else D`, which comes first in the walk)
        if isinstance(n, (ast.Call, ast.IfExp)) and ast.unparse(n) in swaps and n in parent:
            new = fastast.clone(swaps[ast.unparse(n)])
            set_lines([new], n.lineno, n.end_lineno)   # errors in the consumer point at the user's line
            _replace(parent[n], n, new)


def apply(tree: ast.FunctionDef, pieces: list[tuple[object, Lowered]], steps=()) -> Rewritten:
    """`steps`: (info, lower) for loops kept in Python with a compiled-step form, where
    lower(loop node) -> (statements replacing it, display statements)."""
    exe, disp = fastast.clone(tree), fastast.clone(tree)
    step_targets = [(info, lower, _find(exe, info), _find(disp, info)) for info, lower in steps]
    targets = [(info, low, _find(exe, info), _find(disp, info)) for info, low in pieces]
    for info, lower, node, dnode in step_targets:
        stmts, display = lower(node)
        _replace(_parents(exe)[node], node, stmts)
        _replace(_parents(disp)[dnode], dnode, display)
    for info, low, node, dnode in targets:
        p, dp = _parents(exe), _parents(disp)
        if dnode not in dp:
            # inside a loop rewritten before it (a generator in a rewritten loop's body): that
            # loop's body already holds it, and its fallback runs it as written
            continue
        if info.kind in ("for", "while"):
            branch = low.stmts[-1]
            # (a triangular nest planned as a masked rectangle falls back to the loops as written)
            branch.orelse = [getattr(node, "_av_original", node)] + low.after
            _replace(p[node], node, low.stmts)
            _replace(dp[dnode], dnode, fastast.clone(low.display))
            _swap_calls(exe, low.swaps)
            _swap_calls(disp, low.display_swaps)
        else:
            plan = low.match.plan
            consumer = p[node] if plan.outputs[0].consumer != "list" else node
            dconsumer = dp[dnode] if consumer is not node else dnode
            stmt, dstmt = _stmt_of(consumer, p), _stmt_of(dconsumer, dp)
            branch = low.stmts[-1]
            # (a comprehension read by index, analysis.unbind, falls back to the one written: its
            # consumer with the comprehension as it was)
            written = getattr(node, "_av_original", None)
            value = consumer if written is None else copy.deepcopy(consumer, {id(node): written})
            fallback = ast.Assign(targets=[ast.Name(id=low.result, ctx=ast.Store())], value=value)
            ast.copy_location(fallback, stmt)
            set_lines([fallback.targets[0]], stmt.lineno)
            fallback.end_lineno = max(stmt.end_lineno or stmt.lineno, stmt.lineno)
            branch.orelse = [fallback] + low.after
            _replace(p[consumer], consumer, ast.copy_location(ast.Name(id=low.result, ctx=ast.Load()), consumer))
            _replace(p[stmt], stmt, low.stmts + [stmt])
            _replace(dp[dconsumer], dconsumer, ast.Name(id=low.result, ctx=ast.Load()))
            _replace(dp[dstmt], dstmt, fastast.clone(low.display) + [dstmt])
    ast.fix_missing_locations(exe)
    ast.fix_missing_locations(disp)
    return Rewritten(exe, disp)


def namer_for(tree: ast.FunctionDef) -> Namer:
    namer = Namer(all_names(tree))
    namer.runtime = namer.new("_av")
    return namer
