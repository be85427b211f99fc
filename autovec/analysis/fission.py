"""Loop fission: in a loop that must stay sequential (a value carried from one iteration to
the next), find the computations that do not depend on the carried values and can run for
all iterations at once before the loop.

    for t in range(n):                          e_all = <e for every t, batched>
        e = relu(xs[t] @ w1 + b1)         ->    for j, t in enumerate(range(n)):
        h = tanh(e + h @ w_hh)                      e = e_all[j]
        outs.append(h)                              h = tanh(e + h @ w_hh); outs.append(h)

Works on syntax; the hoisted computations must call only side-effect-free functions
(checked like any loop body). Requires names.py and loops.py.
"""
from __future__ import annotations

import ast
import copy
import dataclasses

from ..plan import LoopPlan
from . import names as nm
from .loops import (Context, Refuse, _check_calls, _fresh_value, _makes_new_memory, _no_identity_tests, iteration,
                    plan_for, src)


def _heavy(node: ast.AST) -> bool:
    """Worth computing ahead of the loop: a call or an arithmetic operation."""
    return any(isinstance(n, (ast.Call, ast.BinOp, ast.UnaryOp)) for n in ast.walk(node))


def plan_fission(node: ast.For, ctx: Context, loop_id: int, refusal) -> LoopPlan:
    line = node.lineno
    carried_reason = refusal.reason
    _no_identity_tests(node.body)
    space = iteration(node, ctx)
    iter_vars = {t for t, _ in space.elements} | ({space.index} if space.index else set())
    assigned = nm.stores(ast.Module(body=node.body, type_ignores=[]))
    indep = set(iter_vars)
    hoisted: list[tuple[str, ast.AST]] = []     # (name holding the batched value, expression)
    hoist_stmts: list[ast.stmt] = []            # what the batched pre-pass computes, in order
    invariant_stmts: list[ast.stmt] = []        # computed once before the loop (no loop variable)
    invariant: set[str] = set()                 # names those bind
    writes: dict[str, int] = {}
    for n in ast.walk(ast.Module(body=node.body, type_ignores=[])):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            writes[n.id] = writes.get(n.id, 0) + 1
    new_body: list[ast.stmt] = []
    counter = [0]

    def independent(expr: ast.AST) -> bool:
        for n in ast.walk(expr):
            if isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await, ast.Lambda, ast.ListComp,
                              ast.GeneratorExp, ast.DictComp, ast.SetComp)):
                return False
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "item":
                return False
            if isinstance(n, ast.Call) and not _pure_call(n, ctx):
                return False
        return all(ld.id in indep or ld.id not in assigned for ld in nm.loads(expr))

    def fresh() -> str:
        counter[0] += 1
        return f"_av_h{counter[0] - 1}"

    def loop_invariant(expr: ast.AST) -> bool:
        """Independent of the loop variables too: one value for every iteration."""
        return independent(expr) and all(ld.id not in iter_vars and (ld.id not in assigned or ld.id in invariant)
                                          for ld in nm.loads(expr))

    def take(expr: ast.AST) -> ast.AST:
        """Replace maximal independent heavy sub-expressions by rows of their batched values."""
        if loop_invariant(expr) and _heavy(expr):
            name = fresh()
            invariant_stmts.append(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=copy.deepcopy(expr)))
            invariant.add(name)
            return ast.Name(id=name, ctx=ast.Load())
        if independent(expr) and _heavy(expr):
            name = fresh()
            hoisted.append((name, expr))
            hoist_stmts.append(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=copy.deepcopy(expr)))
            return ast.Subscript(value=ast.Name(id=name, ctx=ast.Load()), slice=ast.Name(id="_av_j", ctx=ast.Load()),
                                 ctx=ast.Load())
        if isinstance(expr, (ast.IfExp, ast.BoolOp, ast.Lambda, ast.comprehension)):
            return expr  # evaluated conditionally or in another scope: leave as is
        for field, value in ast.iter_fields(expr):
            if isinstance(value, ast.expr) and not (isinstance(expr, ast.Call) and value is expr.func):
                setattr(expr, field, take(value))
            elif isinstance(value, list):
                setattr(expr, field, [take(v) if isinstance(v, ast.expr) else v for v in value])
        return expr

    read_before: set[str] = set()               # names read by the statements already seen
    for s in node.body:
        s = copy.deepcopy(s)
        read_here = nm.load_ids(s)
        if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                and writes.get(s.targets[0].id) == 1 and s.targets[0].id not in read_before
                and loop_invariant(s.value) and _heavy(s.value)):
            # `Wt = W.t()` in the loop: computed once before it; the name keeps that value
            invariant_stmts.append(s)
            invariant.add(s.targets[0].id)
            indep.add(s.targets[0].id)
            read_before |= read_here
            continue
        if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                and independent(s.value)):
            name = s.targets[0].id
            if _heavy(s.value):
                hname = fresh()
                hoisted.append((hname, s.value))
                # the pre-pass keeps the name, so later hoisted expressions can read it
                hoist_stmts.append(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                                              value=copy.deepcopy(s.value)))
                hoist_stmts.append(ast.Assign(targets=[ast.Name(id=hname, ctx=ast.Store())],
                                              value=ast.Name(id=name, ctx=ast.Load())))
                s.value = ast.Subscript(value=ast.Name(id=hname, ctx=ast.Load()),
                                        slice=ast.Name(id="_av_j", ctx=ast.Load()), ctx=ast.Load())
            else:
                hoist_stmts.append(copy.deepcopy(s))
            indep.add(name)
            new_body.append(s)
            read_before |= read_here
            continue
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.Expr, ast.Return)) and getattr(s, "value", None) is not None:
            s.value = take(s.value)
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                indep.discard(n.id)
        new_body.append(s)
        read_before |= read_here

    if not hoisted:
        raise Refuse(carried_reason, refusal.lineno)
    new_body = _own_values(new_body, {h for h, e in hoisted if _fresh_value(e, ctx) or isinstance(e, ast.Compare)},
                           invariant_stmts, node, ctx, carried_reason)
    stores = _check_rest(node, ctx, hoist_stmts + invariant_stmts, carried_reason)
    # the pre-pass: the same loop header, the hoisted computations, each value collected
    pre_body = hoist_stmts + [ast.Expr(value=ast.Call(
        func=ast.Attribute(value=ast.Name(id=f"{h}_list", ctx=ast.Load()), attr="append", ctx=ast.Load()),
        args=[ast.Name(id=h, ctx=ast.Load())], keywords=[])) for h, _ in hoisted]
    pre = ast.For(target=copy.deepcopy(node.target), iter=copy.deepcopy(node.iter), body=pre_body, orelse=[])
    ast.copy_location(pre, node)
    for n in ast.walk(pre):
        if "lineno" in n._attributes and not hasattr(n, "lineno"):
            n.lineno, n.col_offset, n.end_lineno, n.end_col_offset = line, 0, line, 0
    for s in invariant_stmts:
        ast.copy_location(s, node)
        for n in ast.walk(s):
            if "lineno" in n._attributes and not hasattr(n, "lineno"):
                n.lineno, n.col_offset, n.end_lineno, n.end_col_offset = line, 0, line, 0
    try:
        _check_calls(hoist_stmts + invariant_stmts, ctx, _Fake(), {v: "" for v in iter_vars})
        plan = plan_for(pre, ctx, loop_id, form="fission-pre")
    except Refuse as r:
        raise Refuse(f"{carried_reason}; its independent part cannot run batched: {r.refusal.reason}", line) from None
    outputs = tuple(dataclasses.replace(o, consumer="batch", target=o.target[:-len("_list")])
                    for o in plan.outputs if o.kind == "append")
    loop = ast.For(target=ast.Tuple(elts=[ast.Name(id="_av_j", ctx=ast.Store()), copy.deepcopy(node.target)],
                                    ctx=ast.Store()),
                   iter=ast.Call(func=ast.Name(id="enumerate", ctx=ast.Load()), args=[copy.deepcopy(node.iter)],
                                 keywords=[]),
                   body=new_body, orelse=[])
    ast.copy_location(loop, node)
    for n in ast.walk(loop):
        if "lineno" in n._attributes and not hasattr(n, "lineno"):
            n.lineno, n.col_offset, n.end_lineno, n.end_col_offset = line, 0, line, 0
    what = ", ".join(f"`{src(e)}`" for _, e in hoisted[:3]) + (" ..." if len(hoisted) > 3 else "")
    note = f"{carried_reason}; {len(hoisted)} independent computation(s) ({what}) run for all iterations before the loop"
    if invariant_stmts:
        shown = ", ".join(f"`{src(s.value)}`" for s in invariant_stmts[:3]) + (" ..." if len(invariant_stmts) > 3 else "")
        note += f", and {len(invariant_stmts)} loop-invariant one(s) ({shown}) once"
    return dataclasses.replace(plan, outputs=outputs, form="fission", source=src(node), notes=(note,),
                               live_after=(), lineno=line, end_lineno=node.end_lineno, fission_loop=loop,
                               invariants=tuple(invariant_stmts), fission_stores=tuple(stores))


def _own_values(body: list, rows: set, invariant_stmts: list, node: ast.For, ctx: Context, carried_reason: str):
    """Where the loop's values are tensors of their own, one per iteration (`torch.exp(x[i])`),
    fission's are rows of one batch (`_av_h0[_av_j]`, sharing its memory; `rows` names those
    batches) or one object for every iteration (the invariants). Where such a value may be kept
    past its use (appended, stored, bound to a name read another way or after the loop) it is
    copied (`.clone()`), so that an in-place change of one of them after the loop reaches no
    other (nor breaks a backward through the others), and one kept alone keeps no batch alive. A
    value consumed at once by an operator or a torch call that makes new memory is used as it
    is. Rows of views (`x[t].view(-1)`) are views of the input in both, and stay so. An invariant
    that may be a view (`Ut = U.t()`) and is kept that way keeps the loop: a copy would no longer
    be that view, and one view for every iteration is not the loop's one per iteration."""
    mod = ast.Module(body=body, type_ignores=[])
    parents = {id(c): p for p in ast.walk(mod) for c in ast.iter_child_nodes(p)}
    nested = any(isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ListComp,
                                ast.SetComp, ast.DictComp, ast.GeneratorExp)) for n in ast.walk(mod))
    declared = {g for n in ast.walk(ctx.fn) if isinstance(n, (ast.Global, ast.Nonlocal)) for g in n.names}
    invariants = {}
    for st in invariant_stmts:
        invariants[st.targets[0].id] = st.value

    def consumed(r) -> bool:
        return not nested and _makes_new_memory(parents.get(id(r)), r, parents, ctx)

    def kept(r) -> bool:
        if consumed(r):
            return False
        p = parents.get(id(r))
        if nested or not (isinstance(p, ast.Assign) and p.value is r and len(p.targets) == 1
                          and isinstance(p.targets[0], ast.Name)):
            return True
        t = p.targets[0].id     # (`e = _av_h0[_av_j]`: e's every read consumes it, none after the loop)
        return t in ctx.cellvars or t in declared or nm.read_after(ctx.fn, ctx.parent, node, t) is not None \
            or not all(consumed(ld) for ld in nm.loads(mod) if ld.id == t)

    def own(r):
        return ast.Call(func=ast.Attribute(value=r, attr="clone", ctx=ast.Load()), args=[], keywords=[])

    class Copy(ast.NodeTransformer):
        def visit_Subscript(self, n):
            if isinstance(n.value, ast.Name) and n.value.id in rows and isinstance(n.slice, ast.Name) \
                    and n.slice.id == "_av_j" and kept(n):
                return own(n)
            return self.generic_visit(n)

        def visit_Name(self, n):
            if isinstance(n.ctx, ast.Load) and n.id in invariants and not consumed(n):
                v = invariants[n.id]
                if not (_fresh_value(v, ctx) or isinstance(v, ast.Compare)):
                    at = getattr(n, "lineno", node.lineno)
                    raise Refuse(f"{carried_reason}; the loop cannot be split: `{src(v)}`, computed once for "
                                 f"every iteration, may be a view that the loop keeps (line {at})", at)
                return own(n)
            return n
    return [Copy().visit(s) for s in body]


def _pure_call(call: ast.Call, ctx: Context) -> bool:
    f = call.func
    if isinstance(f, ast.Attribute) and not _chain(f):
        return ctx.env.pure_method(f.attr)
    if not isinstance(f, (ast.Name, ast.Attribute)):
        return False
    head = src(f).split(".")[0]
    if head in ctx.local_names:
        if isinstance(f, ast.Attribute):
            return ctx.env.pure_method(f.attr) and not f.attr.endswith("_")
        return True   # a callable argument: checked at run time like any loop body's
    return ctx.env.classify(src(f)) is None


def _chain(node) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _check_rest(node: ast.For, ctx: Context, hoist_stmts, carried_reason: str) -> None:
    """The part that stays in the loop must not change anything the batched part reads: no
    in-place updates (`+=`, `.add_()`), no attribute writes, no calls with side effects other
    than `print` and appends, and writes only into tensors the batched part does not read."""
    read = {ld.id for s in hoist_stmts for ld in nm.loads(s)}
    # the loop's elements are views of what it walks (`for r in x`: the batched part reads x)
    read |= nm.load_ids(node.iter)
    line = node.lineno

    def refuse(why, at):
        raise Refuse(f"{carried_reason}; the loop cannot be split: {why} (line {at})", at)
    stores = []     # the names the loop stores into: checked per call against what the batched part reads
    bound_here = nm.stores(ast.Module(body=node.body, type_ignores=[]))
    # (made in the loop, alias nothing: names each binding of which is a new value; `r = x[i]` is a
    # view of what the batched part may read, and a write into it a write into x)
    other = set()
    for n in (n for s in node.body for n in ast.walk(s)):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and (_fresh_value(n.value, ctx) or isinstance(n.value, ast.Compare)):
            continue
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
            other |= nm.stores(n)
    local = bound_here - other
    targets = nm.stores(node.target)      # (the loop's own variables: a new value each iteration)
    for s in node.body:
        for n in ast.walk(s):
            at = getattr(n, "lineno", line)
            if isinstance(n, ast.AugAssign):
                refuse(f"`{src(n)}` updates a value in place", at)
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                refuse(f"`{src(n)}` is an attribute write", at)
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
                root = n.value
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                if not isinstance(root, ast.Name) or root.id in read:
                    refuse(f"`{src(n)}` writes into a value the batched part reads", at)
                if root.id in targets:
                    # (`for t, v in zip(ts, vs): t[0] = v.sum()`: each iteration's element is another
                    # tensor, which the check per call of what is stored into cannot name)
                    refuse(f"`{src(n)}` writes into the elements the loop walks", at)
                if root.id in bound_here and root.id not in local:
                    refuse(f"`{src(n)}` writes into `{root.id}`, which the loop binds to a value that may be a view "
                           "of what the batched part reads", at)
                if root.id not in stores and root.id not in local:
                    stores.append(root.id)
            if isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Name) and f.id == "print" and ctx.env.is_builtin("print"):
                    continue
                if isinstance(f, ast.Attribute) and f.attr == "append" and isinstance(f.value, ast.Name) \
                        and f.value.id not in read:
                    continue
                if isinstance(f, ast.Attribute) and (f.attr.endswith("_") and not f.attr.endswith("__")):
                    refuse(f"`.{f.attr}()` updates a tensor in place", at)
                kw = nm.in_place_keyword(n)
                if kw:
                    # (`F.dropout(v, p, True, True)`, `out=`: a write into what the batched part read)
                    refuse(f"`{src(f)}(.., {kw}=..)` writes into a tensor in place", at)
                if isinstance(f, ast.Attribute) and f.attr in ("append", "extend", "insert", "pop", "update",
                                                               "add", "remove", "clear", "setdefault"):
                    refuse(f"`{src(f)}()` changes a container the batched part reads", at)
                path = src(f)
                head = path.split(".")[0].split("[")[0]
                if head in ctx.local_names or not _chain(f):
                    # a value of this function (an argument, a temporary): only side-effect-free
                    # tensor methods; `opt.step()` or `model(x)` could change what was batched
                    if isinstance(f, ast.Attribute) and ctx.env.pure_method(f.attr):
                        continue
                    refuse(f"`{path}(...)` may change values the batched part reads", at)
                verdict = ctx.env.classify(path) if isinstance(f, (ast.Name, ast.Attribute)) else None
                if verdict and "random" not in verdict:
                    refuse(verdict, at)
    return stores


class _Fake:
    assigned: dict = {}
    own_calls: frozenset = frozenset()
