"""If-conversion: turn data-dependent `if`/`else` and `a if c else b` in a loop body into
straight-line code with `where`, so the body can run on a whole batch.

Each name assigned under a condition gets a fresh name per branch; after the `if`, the
name becomes `_av.where(c, then_value, else_value)`. Output markers assigned under a
condition record the condition (a mask) instead of merging.

    if v > 0:              _av_c1 = _av.truth(v > 0)
        y = v         ->   y_1 = v
    else:                  y_2 = slope * v
        y = slope * v      y = _av.where(_av_c1, y_1, y_2, True)
"""
from __future__ import annotations

import ast

from .. import fastast
from ..analysis import names as nm
from ..analysis.loops import row_clone_store


class _Renamer(ast.NodeTransformer):
    def __init__(self, env: dict):
        self.env = env

    def visit_Name(self, node: ast.Name):
        if isinstance(node.ctx, ast.Load) and node.id in self.env:
            return ast.copy_location(ast.Name(id=self.env[node.id], ctx=ast.Load()), node)
        return node


def convert(stmts: list[ast.stmt], varying: set[str], known: set[str], namer, av: str,
            markers: set[str], lenient: set[str]):
    """Returns (straight-line statements, {marker: mask name or None}, {name: final SSA name}).

    `known`: names defined before the body runs (parameters, loop-invariant names).
    `lenient`: markers whose two branch values may differ in type (a stored value: the
    store converts either one)."""
    ctx = _Ctx(namer, av, markers, lenient, known)
    env: dict[str, str] = {}
    masks: dict[str, str | None] = {}
    out = _convert(stmts, None, env, masks, set(varying), ctx)
    for m in markers:
        masks.setdefault(m, None)
    return out, masks, env, ctx.branches


class _Ctx:
    def __init__(self, namer, av, markers, lenient, known):
        self.namer, self.av, self.markers, self.lenient, self.known = namer, av, markers, lenient, known
        self.branches: list[str] = []   # the mask of every branch (then and else), for the one-time check
        self.loops = 0                  # inner loops around the statements converted now (_convert_for)


def _test_varies(test: ast.AST, varying: set[str], env: dict) -> bool:
    ids = nm.load_ids(test)
    return bool(ids & varying) or any(env.get(i, i) != i for i in ids)


def _convert(stmts, cond, env, masks, varying, ctx):
    namer, av, markers = ctx.namer, ctx.av, ctx.markers
    out = []
    for s in stmts:
        s = _as_statement(s, varying, env, masks, ctx)
        if isinstance(s, ast.For):
            out += _convert_for(s, env, masks, varying, ctx)
            continue
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and cond is not None:
            # `x op= v` under a condition: its value without writing into x (no one else holds
            # x: analysis._inner_loop), as the update would give it (runtime.updated), then merged
            s = ast.copy_location(ast.Assign(
                targets=[ast.Name(id=s.target.id, ctx=ast.Store())],
                value=_call(av, "updated", [_n(s.target.id), s.value, ast.Constant(type(s.op).__name__)])), s)
        # (an `if` on unchanged values under a condition on the data is one too: its names'
        # values under that condition are merged as any branch's, where a plain `if` would
        # leave them unbound on the way it does not take)
        if isinstance(s, ast.If) and (_test_varies(s.test, varying, env) or cond is not None):
            test = _Renamer(env).visit(_ifexp(s.test, varying, env, namer, av, out, ctx.branches))
            c = namer.new("_av_c")
            out.append(_assign(c, _truth(av, test), s))
            c_then, c_else = c, namer.new("_av_nc")
            out.append(_assign(c_else, _call(av, "lnot", [_n(c)]), s))
            if cond is not None:
                t, e = namer.new("_av_c"), namer.new("_av_c")
                out.append(_assign(t, _call(av, "land", [_n(cond), _n(c)]), s))
                out.append(_assign(e, _call(av, "land", [_n(cond), _n(c_else)]), s))
                c_then, c_else = t, e
            ctx.branches += [c_then, c_else]
            before, masks_before = dict(env), dict(masks)
            out += _convert(s.body, c_then, env, masks, varying, ctx)
            after_then, masks_then = _reset(env, before, masks, masks_before)
            out += _convert(s.orelse, c_else, env, masks, varying, ctx)
            after_else, masks_else = _reset(env, before, masks, masks_before)
            for name in sorted(set(after_then) | set(after_else)):
                a, b = after_then.get(name), after_else.get(name)
                if a == b:
                    env[name] = a
                    continue
                if name in markers:
                    if a and b and name not in masks_before:
                        # written on both sides: the merged value, present wherever either side ran
                        merged = namer.new(f"{name}_m")
                        out.append(_assign(merged, _call(av, "where", [_n(c), _n(a), _n(b),
                                                                        ast.Constant(name not in ctx.lenient)]), s))
                        env[name] = merged
                        mt, me = masks_then.get(name), masks_else.get(name)
                        if mt == c_then and me == c_else:
                            masks[name] = cond
                        else:
                            either = namer.new("_av_c")
                            out.append(_assign(either, _call(av, "lor", [_n(mt) if mt else ast.Constant(True),
                                                                         _n(me) if me else ast.Constant(True)]), s))
                            masks[name] = either
                    else:
                        env[name] = a or b
                        masks[name] = masks_then.get(name) if a else masks_else.get(name)
                    continue
                defined = name in before or name in ctx.known
                if not (a and b) and not defined:
                    env[name] = a or b   # only meaningful under its own branch
                    continue
                a, b = a or before.get(name, name), b or before.get(name, name)
                merged = namer.new(f"{name}_m")
                # (in an inner loop, a name's value carried to the next iteration: runtime.where's
                # "loop" rule for a Python number beside its batch)
                out.append(_assign(merged, _call(av, "where", [_n(c), _n(a), _n(b),
                                                               ast.Constant("loop" if ctx.loops else True)]), s))
                env[name] = merged
                varying.add(merged)
            continue
        if isinstance(s, ast.If):
            # a branch on loop-invariant values runs as ordinary Python inside the body
            s = ast.copy_location(ast.If(test=_Renamer(env).visit(s.test), body=s.body, orelse=s.orelse), s)
            s.body = _convert(s.body, cond, env, masks, varying, ctx) or [ast.Pass()]
            s.orelse = _convert(s.orelse, cond, env, masks, varying, ctx)
            out.append(s)
            continue
        s = _Renamer(env).visit(s)
        s = _replace_ifexps(s, varying, env, namer, av, out, ctx.branches)
        if cond is not None:
            s = _GuardIndexes(cond, varying, av).visit(s)
            if row_clone_store(s):
                # a store into an outer row's clone under a condition (analysis._inner_row_stores):
                # where it is off, the element's own value again (setitem converts either side)
                t = s.targets[0]
                now = ast.Subscript(value=ast.Name(id=t.value.id, ctx=ast.Load()), slice=fastast.clone(t.slice),
                                    ctx=ast.Load())
                s = ast.copy_location(ast.Assign(targets=[t], value=_call(
                    av, "where", [_n(cond), s.value, now, ast.Constant(False)])), s)
                ast.fix_missing_locations(s)
        if isinstance(s, ast.Assign):
            names = [n for t in s.targets for n in nm.target_names(t)]
            varies = bool(nm.load_ids(s.value) & varying) or cond is not None
            for t in s.targets:
                for n in fastast.walk(t):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        if n.id in markers:
                            masks[n.id] = cond
                        new = namer.new(f"{n.id}_v") if cond is not None else n.id
                        env[n.id] = new
                        n.id = new
                        if varies:
                            varying.add(new)
            if varies:
                varying.update(names)
        out.append(s)
    return out


def _convert_for(s: ast.For, env, masks, varying, ctx):
    """An inner loop (analysis._inner_loop; _predicated for one that ends early): each
    iteration's body converted as the body is, its names bound back to themselves at the end
    of the iteration (the next iteration, and what follows the loop, read them by name). Names
    the loop reads that the body renamed before it are bound first."""
    names = {n.id for n in fastast.walk(s) if isinstance(n, ast.Name)}
    out = []
    for name in sorted(names):
        if env.get(name, name) != name:
            out.append(_assign(name, _n(env[name]), s))
            env[name] = name
    assigned = {n.id for n in fastast.walk(ast.Module(body=s.body, type_ignores=[]))
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    # (what a varying `if` or value binds varies in every later iteration too)
    inner_varying = set(varying)
    grew = True
    while grew:
        grew = False
        for n in fastast.walk(ast.Module(body=s.body, type_ignores=[])):
            if isinstance(n, ast.If) and nm.load_ids(n.test) & inner_varying or \
                    isinstance(n, (ast.Assign, ast.AugAssign)) and nm.load_ids(n.value) & inner_varying:
                new = {m.id for m in fastast.walk(n) if isinstance(m, ast.Name) and isinstance(m.ctx, ast.Store)}
                if not new <= inner_varying:
                    inner_varying |= new
                    grew = True
    inner_env = dict(env)
    ctx.loops += 1
    try:
        body = _convert(s.body, None, inner_env, masks, inner_varying, ctx)
    finally:
        ctx.loops -= 1
    for name in sorted(assigned):
        if inner_env.get(name, name) != name:
            body.append(_assign(name, _n(inner_env[name]), s))
    new = ast.copy_location(ast.For(target=s.target, iter=_Renamer(env).visit(s.iter), body=body or [ast.Pass()],
                                    orelse=[], type_comment=None), s)
    out.append(new)
    for name in assigned:
        env[name] = name
    varying |= inner_varying & assigned
    return out


class _GuardIndexes(ast.NodeTransformer):
    """Under a condition, an index that varies (`logp[i, t[i]]` after `if t[i] == ignore:
    continue`): the loop never reads it where the condition is off, the batch reads it on every
    row, so there it becomes 0 (runtime.guarded_index); an index out of range where the loop
    reads it still raises."""

    def __init__(self, cond, varying, av):
        self.cond, self.varying, self.av = cond, varying, av

    def visit_Subscript(self, node):
        node = self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        new = [_call(self.av, "guarded_index", [_n(self.cond), p])
               if not isinstance(p, (ast.Slice, ast.Constant)) and nm.load_ids(p) & self.varying else p
               for p in parts]
        if all(a is b for a, b in zip(new, parts)):
            return node
        node.slice = ast.Tuple(elts=new, ctx=ast.Load()) if isinstance(node.slice, ast.Tuple) else new[0]
        return node


def _as_statement(s, varying, env, masks, ctx):
    """`m = a if c else b`, the whole stored value of an output `m` not written before in the
    body, on a condition that varies: the same as `if c: m = a` / `else: m = b`, and converted
    as that statement is (a Python number on one side is held in a dtype that holds both, and
    the store converts each value as the loop does). Other conditional expressions stay
    strict `where`s (both sides must give the same kind of value). (An output written earlier
    in the same branch is left alone too; the analysis gives such a second store its own
    marker, so this is only a safeguard.)"""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            and isinstance(s.value, ast.IfExp)):
        return s
    name, v = s.targets[0].id, s.value
    if name not in ctx.lenient or name in masks or name in env or not _test_varies(v.test, varying, env):
        return s

    def side(value):
        return ast.copy_location(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value), s)
    return ast.copy_location(ast.If(test=v.test, body=[side(v.body)], orelse=[side(v.orelse)]), s)


def _reset(env, env_before, masks, masks_before):
    """Snapshot what a branch left in `env` and `masks`, then restore both for the next branch."""
    snap = dict(env), dict(masks)
    env.clear()
    env.update(env_before)
    masks.clear()
    masks.update(masks_before)
    return snap


def _replace_ifexps(s, varying, env, namer, av, out, branches=None):
    """`a if c else b` on data becomes `where(c, a, b)`; outside nested scopes the condition is
    named first (before the statement), and its two masks are recorded in `branches`."""
    class T(ast.NodeTransformer):
        depth = 0

        def scoped(self, node):
            self.depth += 1
            node = self.generic_visit(node)
            self.depth -= 1
            return node
        visit_Lambda = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = scoped

        def visit_IfExp(self, node):
            whole = node is lenient_value
            node = self.generic_visit(node)
            if not _test_varies(node.test, varying, env):
                return node
            cond = _truth(av, node.test)
            if branches is not None and self.depth == 0:
                c, nc = namer.new("_av_c"), namer.new("_av_nc")
                out.append(_assign(c, cond, s))
                out.append(_assign(nc, _call(av, "lnot", [_n(c)]), s))
                branches.extend((c, nc))
                cond = _n(c)
            return ast.copy_location(_call(av, "where", [cond, node.body, node.orelse, ast.Constant(not whole)]), node)
    # the whole value stored into an outer row's clone by an inner loop (analysis._inner_row_stores):
    # setitem converts either side, as the store of a marker does (a lenient where)
    lenient_value = s.value if row_clone_store(s) and isinstance(s.value, ast.IfExp) else None
    return T().visit(s)


def _ifexp(test, varying, env, namer, av, out, branches=None):
    return _replace_ifexps(ast.Expr(value=test), varying, env, namer, av, out, branches).value


def _truth(av: str, test: ast.expr) -> ast.Call:
    """`if test:` as a mask: Python's truth of one element. `a and b` / `a or b` is true where
    both / either operand is (the value Python's `and` returns has the truth of that): each
    operand's truth, combined (`land`, `lor`), so that a batch of them is one mask. (The loop
    skips `b` where `a` decides: the batch computes it everywhere, from pure operations; where
    that raises, an index out of range or a tensor with several elements, the loop runs.)"""
    if isinstance(test, ast.BoolOp) and len(test.values) >= 2:
        fn = "land" if isinstance(test.op, ast.And) else "lor"
        out = _truth(av, test.values[0])
        for v in test.values[1:]:
            out = ast.copy_location(_call(av, fn, [out, _truth(av, v)]), test)
        return out
    return ast.copy_location(_call(av, "truth", [test]), test)


def truth_only(value: ast.expr) -> bool:
    """Whether `value`, a condition used for its truth alone, has an `and` / `or` where its truth
    is taken (at the top, or under `not`): `not (a and b)`, `a or b`."""
    while isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
        value = value.operand
    return isinstance(value, ast.BoolOp)


def truth_statements(value: ast.expr, varying: set, namer, av: str, where: ast.AST):
    """(statements, expression) computing the truth of `value` as `if value:` takes it, where
    `and` / `or` short-circuit: each operand's truth combined (`land`, `lor`) into one mask per
    iteration, and an operand Python skips (one after a false `and` operand, after a true `or`
    operand) reads its varying indices under that condition (_GuardIndexes: 0 where the loop
    never evaluates it, so `i < m and table[idx[i]] > 0` indexes nothing out of range where
    `i < m` is false; the batch still computes the other operations everywhere, pure ones; an
    operand that raises where the loop evaluates it sends the call to the loop). `varying`:
    the names that change per iteration; the masks named here are added to it."""
    out = []

    def name(expr_node):
        n = namer.new("_av_b")
        out.append(_assign(n, expr_node, where))
        if nm.load_ids(expr_node) & varying:
            varying.add(n)
        return _n(n)

    def truth(v):
        if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not):
            return _call(av, "lnot", [truth(v.operand)])
        if isinstance(v, ast.BoolOp) and len(v.values) >= 2:
            fn = "land" if isinstance(v.op, ast.And) else "lor"
            acc = name(truth(v.values[0]))
            for operand in v.values[1:]:
                # where Python evaluates `operand`: the operands before it left `and` true, `or` false
                on = acc if fn == "land" else name(_call(av, "lnot", [acc]))
                if on.id in varying:
                    operand = _GuardIndexes(on.id, varying, av).visit(operand)
                acc = name(_call(av, fn, [acc, truth(operand)]))
            return acc
        return _call(av, "truth", [v])
    return out, truth(value)


def _n(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def _call(av: str, fn: str, args: list) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=_n(av), attr=fn, ctx=ast.Load()), args=args, keywords=[])


def _assign(name: str, value: ast.AST, where: ast.AST) -> ast.Assign:
    return ast.copy_location(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value), where)
