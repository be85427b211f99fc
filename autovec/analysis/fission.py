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
import dataclasses

from .. import fastast
from ..plan import LoopPlan
from . import names as nm
from .loops import (Context, Refuse, _check_calls, _fresh_value, _makes_new_memory, _no_identity_tests, iteration,
                    plan_for, src)


def _heavy(node: ast.AST) -> bool:
    """Worth computing ahead of the loop: a call or an arithmetic operation, on some value (not
    Python's arithmetic of literals, `-1`: a number, which a hoisted copy per iteration cannot
    `.clone()`; probeV, pre-existing)."""
    nodes = list(fastast.walk(node))
    return any(isinstance(n, (ast.Call, ast.BinOp, ast.UnaryOp)) for n in nodes) \
        and any(isinstance(n, (ast.Name, ast.Call, ast.Attribute)) for n in nodes)


class _KeptNames(Exception):
    """Named invariants (`c = b * 2.0`) a fission plan's loop keeps past their use: planned again
    with those statements left in the loop, one value per iteration (_own_values)."""

    def __init__(self, names):
        super().__init__(names)
        self.names = names


def plan_fission(node: ast.For, ctx: Context, loop_id: int, refusal) -> LoopPlan:
    per_iteration: set = set()
    while True:
        try:
            return _plan_fission(node, ctx, loop_id, refusal, frozenset(per_iteration))
        except _KeptNames as k:
            if k.names <= per_iteration:
                raise Refuse(refusal.reason, refusal.lineno) from None
            per_iteration |= k.names


def _plan_fission(node: ast.For, ctx: Context, loop_id: int, refusal, per_iteration) -> LoopPlan:
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
    for n in fastast.walk(ast.Module(body=node.body, type_ignores=[])):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            writes[n.id] = writes.get(n.id, 0) + 1
    new_body: list[ast.stmt] = []
    counter = [0]

    def independent(expr: ast.AST) -> bool:
        for n in fastast.walk(expr):
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
            invariant_stmts.append(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=fastast.clone(expr)))
            invariant.add(name)
            return ast.Name(id=name, ctx=ast.Load())
        if independent(expr) and _heavy(expr):
            name = fresh()
            hoisted.append((name, expr))
            hoist_stmts.append(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=fastast.clone(expr)))
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
        s = fastast.clone(s)
        read_here = nm.load_ids(s)
        if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                and writes.get(s.targets[0].id) == 1 and s.targets[0].id not in read_before
                and s.targets[0].id not in per_iteration and loop_invariant(s.value) and _heavy(s.value)):
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
                                              value=fastast.clone(s.value)))
                hoist_stmts.append(ast.Assign(targets=[ast.Name(id=hname, ctx=ast.Store())],
                                              value=ast.Name(id=name, ctx=ast.Load())))
                s.value = ast.Subscript(value=ast.Name(id=hname, ctx=ast.Load()),
                                        slice=ast.Name(id="_av_j", ctx=ast.Load()), ctx=ast.Load())
            else:
                hoist_stmts.append(fastast.clone(s))
            indep.add(name)
            new_body.append(s)
            read_before |= read_here
            continue
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.Expr, ast.Return)) and getattr(s, "value", None) is not None:
            s.value = take(s.value)
        for n in fastast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                indep.discard(n.id)
        new_body.append(s)
        read_before |= read_here

    if not hoisted:
        raise Refuse(carried_reason, refusal.lineno)
    elements = {t for t, _ in space.elements} - assigned
    new_body, unread = _own_values(new_body, {h: (_row_kind(e, ctx, space.index, assigned, elements), e)
                                              for h, e in hoisted},
                                   invariant_stmts, node, ctx, carried_reason)
    if unread:
        # (a value kept past its use is computed in the loop as written: its batch is not made)
        hoisted = [(h, e) for h, e in hoisted if h not in unread]
        drop = lambda st: isinstance(st, ast.Assign) and st.targets[0].id in unread    # noqa: E731
        hoist_stmts = [st for st in hoist_stmts if not drop(st)]
        invariant_stmts = [st for st in invariant_stmts if not drop(st)]
        invariant -= unread
        if not hoisted:
            raise Refuse(carried_reason, refusal.lineno)
    stores = _check_rest(node, ctx, hoist_stmts + invariant_stmts, carried_reason)
    # the pre-pass: the same loop header, the hoisted computations, each value collected
    pre_body = hoist_stmts + [ast.Expr(value=ast.Call(
        func=ast.Attribute(value=ast.Name(id=f"{h}_list", ctx=ast.Load()), attr="append", ctx=ast.Load()),
        args=[ast.Name(id=h, ctx=ast.Load())], keywords=[])) for h, _ in hoisted]
    pre = ast.For(target=fastast.clone(node.target), iter=fastast.clone(node.iter), body=pre_body, orelse=[])
    ast.copy_location(pre, node)
    for n in fastast.walk(pre):
        if "lineno" in n._attributes and not hasattr(n, "lineno"):
            n.lineno, n.col_offset, n.end_lineno, n.end_col_offset = line, 0, line, 0
    for s in invariant_stmts:
        ast.copy_location(s, node)
        for n in fastast.walk(s):
            if "lineno" in n._attributes and not hasattr(n, "lineno"):
                n.lineno, n.col_offset, n.end_lineno, n.end_col_offset = line, 0, line, 0
    try:
        _check_calls(hoist_stmts + invariant_stmts, ctx, _Fake(), {v: "" for v in iter_vars})
        plan = plan_for(pre, ctx, loop_id, form="fission-pre")
    except Refuse as r:
        raise Refuse(f"{carried_reason}; its independent part cannot run batched: {r.refusal.reason}", line) from None
    outputs = tuple(dataclasses.replace(o, consumer="batch", target=o.target[:-len("_list")])
                    for o in plan.outputs if o.kind == "append")
    loop = ast.For(target=ast.Tuple(elts=[ast.Name(id="_av_j", ctx=ast.Store()), fastast.clone(node.target)],
                                    ctx=ast.Store()),
                   iter=ast.Call(func=ast.Name(id="enumerate", ctx=ast.Load()), args=[fastast.clone(node.iter)],
                                 keywords=[]),
                   body=new_body, orelse=[])
    ast.copy_location(loop, node)
    for n in fastast.walk(loop):
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


# methods whose result is always a view of the receiver (never a copy), no element twice
_PURE_VIEWS = frozenset(("view", "view_as", "unsqueeze", "squeeze", "permute", "transpose", "t", "select", "narrow",
                         "movedim", "moveaxis", "unflatten", "swapaxes", "swapdims", "diagonal"))


def _row_kind(e: ast.AST, ctx: Context, index, assigned, elements=frozenset(), rowed=False) -> str | None:
    """What one iteration's value of the hoisted `e` is: "fresh", new memory of its own (or a
    view of such: `torch.exp(x[i])[:2]`); "view", a view of a value the loop reads and does not
    bind (`x[i]`, `x[i].view(-1)`, `x[i, :2].t()`: the batch's rows are views of the same
    memory); None where it may be either (`.contiguous()`, `.float()` and `.reshape()` copy
    only at times), has one element twice (`expand`), is read by a name that may hold a tensor
    (a gathered copy), is the same view in every iteration (`U.t()`: the batch of it is no view
    of U), or is not known. `rowed`: a subscript by the loop's index was seen on the way in."""
    if _fresh_value(e, ctx) or isinstance(e, ast.Compare):
        return "fresh"
    if isinstance(e, ast.Subscript):
        parts = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
        for p in parts:
            bounds = [b for b in (p.lower, p.upper, p.step) if b is not None] if isinstance(p, ast.Slice) else [p]
            if not all(isinstance(b, ast.Constant) and (b.value is None or b.value is Ellipsis or type(b.value) is int)
                       or isinstance(b, ast.Name) and b.id == index for b in bounds):
                return None
        rowed = rowed or any(isinstance(p, ast.Name) and p.id == index for p in parts)
        return _row_kind(e.value, ctx, index, assigned, elements, rowed)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _PURE_VIEWS \
            and not any(kw.arg is None for kw in e.keywords):
        return _row_kind(e.func.value, ctx, index, assigned, elements, rowed)
    if isinstance(e, ast.Attribute) and e.attr in ("T", "mT"):
        return _row_kind(e.value, ctx, index, assigned, elements, rowed)
    if isinstance(e, ast.Name) and (rowed and e.id not in assigned and e.id != index or e.id in elements):
        return "view"
    return None


def _own_values(body: list, rows: dict, invariant_stmts: list, node: ast.For, ctx: Context,
                carried_reason: str) -> tuple[list, set]:
    """The loop's values are tensors of their own, one per iteration (`torch.exp(x[i])`);
    fission's are rows of one batch (`_av_h0[_av_j]`: one storage, one version counter; `rows`
    maps each batch's name to (_row_kind of the hoisted expression, the expression)) or one
    object for every iteration (the invariants). Where such a value may be kept past its use
    (appended, stored, bound to a name read another way or after the loop):
    - a new value is copied (`.clone()`): an in-place change of one then reaches no other, nor
      breaks a backward through the others, and one kept alone keeps no batch alive (as the
      vectorized path's kept lists are copies: where the loop's backward raises after an
      in-place change of a value its own `exp` saved, the copy's does not);
    - a view of what the loop reads (`x[t].view(-1)`) stays a row: a view of the same memory;
    - anything else (`x[i].contiguous()`, `x[i].float()`, `.expand(..)`, a tuple, `U.t()`) is
      computed in the loop as written, and so is an invariant kept inline that may be a view;
    - an invariant bound to a name and kept (`c = b * 2.0; outs.append(c); outs2.append(c)`)
      raises _KeptNames: the plan is made again with that statement in the loop, one object
      per iteration, wherever it is kept and after the loop.
    A value consumed at once by an operator or a torch call that makes new memory is used as
    it is; a value assigned to a subscript is kept (a list's slot holds the object itself).
    Passes repeat over what a pass put back (its reads of rows are settled in turn). Returns
    the body and the names of the batches no longer read."""
    mod = ast.Module(body=body, type_ignores=[])
    parents = {id(c): p for p in fastast.walk(mod) for c in ast.iter_child_nodes(p)}
    nested = any(isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ListComp,
                                ast.SetComp, ast.DictComp, ast.GeneratorExp)) for n in fastast.walk(mod))
    declared = {g for n in fastast.walk(ctx.fn) if isinstance(n, (ast.Global, ast.Nonlocal)) for g in n.names}
    invariants = {}
    for st in invariant_stmts:
        invariants[st.targets[0].id] = st.value

    def consumed(r) -> bool:
        p = parents.get(id(r))
        if isinstance(p, ast.Assign) and p.value is r:
            return False     # (`out[i] = e`: a slot of a list holds e itself; only a tensor's copies it)
        return not nested and _makes_new_memory(p, r, parents, ctx)

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

    class Own(ast.NodeTransformer):
        def visit_Subscript(self, n):
            if isinstance(n.value, ast.Name) and n.value.id in rows and isinstance(n.slice, ast.Name) \
                    and n.slice.id == "_av_j" and kept(n):
                kind, e = rows[n.value.id]
                return own(n) if kind == "fresh" else n if kind == "view" else ast.copy_location(fastast.clone(e), n)
            return self.generic_visit(n)

        def visit_Name(self, n):
            if isinstance(n.ctx, ast.Load) and n.id in invariants and not consumed(n):
                if not n.id.startswith("_av_h"):
                    kept_names.add(n.id)     # (`c = b * 2.0`, kept: one object per iteration, as written)
                    return n
                v = invariants[n.id]
                if _fresh_value(v, ctx) or isinstance(v, ast.Compare):
                    return own(n)
                return ast.copy_location(fastast.clone(v), n)
            return n
    kept_names: set = set()
    out = body
    for _ in range(4):
        # (again over what a pass put back: `outs.append(e.view(-1))` computed in the loop reads
        # `e`, a row the pass before saw consumed by nothing)
        before = [ast.dump(s) for s in out]
        out = [Own().visit(s) for s in out]
        mod = ast.Module(body=out, type_ignores=[])
        parents = {id(c): p for p in fastast.walk(mod) for c in ast.iter_child_nodes(p)}
        if [ast.dump(s) for s in out] == before:
            break
    else:
        raise Refuse(f"{carried_reason}; the loop cannot be split: its kept values could not be settled", node.lineno)
    if kept_names:
        raise _KeptNames(frozenset(kept_names))
    read = {n.id for s in out for n in fastast.walk(s) if isinstance(n, ast.Name)}
    return out, {h for h in list(rows) + list(invariants) if h.startswith("_av_h") and h not in read}


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
    for n in (n for s in node.body for n in fastast.walk(s)):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and (_fresh_value(n.value, ctx) or isinstance(n.value, ast.Compare)):
            continue
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
            other |= nm.stores(n)
    local = bound_here - other
    targets = nm.stores(node.target)      # (the loop's own variables: a new value each iteration)
    for s in node.body:
        for n in fastast.walk(s):
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
