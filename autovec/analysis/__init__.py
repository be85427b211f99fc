"""Analysis: find every loop and comprehension of a function and plan or refuse each one.

Syntax only; the `env` object answers questions about what names refer to:
    env.is_builtin(name) -> bool        the name is the builtin of that name (not shadowed)
    env.classify(path) -> str | None    why calling `path` (e.g. "torch.randn") blocks a rewrite
    env.pure_method(attr) -> bool       `.attr()` on a tensor neither mutates nor leaves torch
    env.consumer(path) -> str | None    "stack" / "cat" / "tensor" when `path` is that torch function
"""
from __future__ import annotations

import ast
import dataclasses

import torch

from .. import fastast
from ..frontend import Captured
from ..plan import LoopInfo
from . import names as nm
from .fission import plan_fission
from .step import CONTROL_FLOW, NoStep, plan_step
from .loops import Context, Refuse, block_of, nest_levels, plan_comprehension, plan_for, plan_nest, plan_while, src

_DYNAMIC_SCOPE = {"locals", "vars", "eval", "exec", "globals"}


def analyze(cap: Captured, env) -> list[LoopInfo]:
    fn = cap.tree
    params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    params |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a}
    local_names = params | nm.stores(fn)
    ctx = Context(fn=fn, parent=nm.parents(fn), local_names=local_names, env=env,
                  cellvars=frozenset(cap.fn.__code__.co_cellvars) | _declared_outside(fn))

    blocked = blocked_by(cap, env, local_names)
    infos: list[LoopInfo] = []
    planned_nodes: set[int] = set()     # (ids of the nodes inside the loops planned so far)
    loop_id = 0
    nest_inner: dict[int, int] = {}
    for node in _loops_in_order(fn):
        if id(node) in nest_inner:
            infos.append(LoopInfo(node.lineno, _written_text(node), None, None, node.col_offset,
                                  _kind(node), part_of=nest_inner[id(node)]))
            continue
        if id(node) in planned_nodes and isinstance(node, (ast.ListComp, ast.DictComp, ast.SetComp)):
            continue  # part of a loop body that is rewritten as a whole
        loop_id += 1
        text = _written_text(node)    # (a triangle shows as written)
        try:
            if blocked:
                raise Refuse(blocked, node.lineno)
            if getattr(node, "_av_as_written", None):
                raise Refuse(node._av_as_written, node.lineno)     # (frontend._IndexSplits' fallback)
            if isinstance(node, (ast.DictComp, ast.SetComp)):
                kind = "dict" if isinstance(node, ast.DictComp) else "set"
                raise Refuse(f"the {kind} comprehension at line {node.lineno} is not rewritten (a {kind} is built "
                             "one element at a time, its keys decide which entries survive)", node.lineno)
            walrus = next((n for n in fastast.walk(node) if isinstance(n, ast.NamedExpr)), None)
            if walrus is not None:
                raise Refuse(f"`{src(walrus)}` at line {walrus.lineno} binds a name inside an expression; "
                             "the loop runs as written", walrus.lineno)
            levels = nest_levels(node, ctx) if isinstance(node, ast.For) else []
            plan = None
            if len(levels) > 1:
                try:
                    plan = _with_consumers(plan_nest(levels, ctx, loop_id), node, ctx)
                    for _, _, inner in levels[1:]:
                        nest_inner[id(inner)] = node.lineno
                except Refuse as r:
                    nest_refusal = r
                    plan = None
            if plan is not None:
                pass
            elif len(levels) > 1:
                # (the nest refused as a whole, the inner loop may still run inside the outer
                # loop's batched body, as an imperfect nest's does: analysis.loops._inner_loop)
                try:
                    plan = _with_consumers(plan_for(node, ctx, loop_id), node, ctx)
                except Refuse:
                    raise nest_refusal
            elif isinstance(node, ast.For):
                try:
                    plan = _with_consumers(plan_for(node, ctx, loop_id), node, ctx)
                except Refuse as r:
                    if not _simple_body(node):
                        raise
                    plan = plan_fission(node, ctx, loop_id, r.refusal)
            elif isinstance(node, ast.ListComp):
                consumer, cnode = _comprehension_consumer(node, ctx)
                plan = plan_comprehension(node, consumer, cnode, ctx, loop_id)
            elif isinstance(node, ast.GeneratorExp):
                consumer, cnode = _generator_consumer(node, ctx)
                plan = plan_comprehension(node, consumer, cnode, ctx, loop_id)
            else:
                plan = _with_consumers(plan_while(node, ctx, loop_id), node, ctx)
        except Refuse as r:
            step = None
            if isinstance(node, ast.For) and not blocked and not getattr(node, "_av_as_written", None):
                try:
                    step = plan_step(node, ctx, loop_id)
                except NoStep:
                    pass   # no compiled-step form: the loop runs as written
            infos.append(LoopInfo(node.lineno, text, None, r.refusal, node.col_offset, _kind(node), step=step))
            continue
        if getattr(node, "_av_carried", None):
            plan = dataclasses.replace(plan, carried=node._av_carried)    # (`out[t] = .. out[t - 1]`)
        planned_nodes.update(id(n) for n in fastast.walk(node))
        # (by the tree, not by lines: two comprehensions on one line are two loops)
        infos.append(LoopInfo(node.lineno, text, plan, None, node.col_offset, _kind(node)))
    return infos


def _written_text(node: ast.AST) -> str:
    """The loop's text as written; a piece of a split range (frontend._IndexSplits) says which on
    its header line."""
    shown = _as_written(node)
    text = src(shown)
    piece = getattr(shown, "_av_piece", None)
    if piece:
        head, _, rest = text.partition("\n")
        text = f"{head}   # {piece}" + ("\n" + rest if rest else "")
    return text


def _as_written(node: ast.AST) -> ast.AST:
    """The loop as the user wrote it, before the source-level moves (hoist, reversal)."""
    return getattr(node, "_av_written", getattr(node, "_av_original", node))


def _simple_body(node: ast.For) -> bool:
    """Fission keeps the loop in Python, so only constructs it can rebuild are allowed."""
    for n in fastast.walk(ast.Module(body=node.body, type_ignores=[])):
        if isinstance(n, CONTROL_FLOW + (ast.Lambda,)):
            return False
    return not node.orelse


def _kind(node: ast.AST) -> str:
    return {ast.For: "for", ast.While: "while", ast.ListComp: "comprehension", ast.DictComp: "comprehension",
            ast.SetComp: "comprehension", ast.GeneratorExp: "generator"}[type(node)]


def _loops_in_order(fn: ast.FunctionDef) -> list[ast.AST]:
    found = [n for n in fastast.walk(fn)
             if isinstance(n, (ast.For, ast.While, ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp))
             and n is not fn]
    # loops inside nested defs/lambdas belong to those functions, and those in a class body to
    # the class's namespace (where a rewrite's names would become class attributes and its
    # reads of the class's names would miss them: found by a probe)
    inner = {id(m) for n in fastast.walk(fn)
             if isinstance(n, (ast.FunctionDef, ast.Lambda, ast.AsyncFunctionDef, ast.ClassDef))
             and n is not fn for m in fastast.walk(n) if m is not n}
    found = [n for n in found if id(n) not in inner]
    # nested comprehensions are part of the outer one
    comps = [n for n in found if isinstance(n, (ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp))]
    nested = {id(m) for c in comps for m in fastast.walk(c) if m is not c}
    found = [n for n in found if id(n) not in nested]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def blocked_by(cap: Captured, env, local_names=None) -> str | None:
    """Why no loop of the function is rewritten (it inspects its local variables, or uses the
    names generated code uses), or None."""
    fn = cap.tree
    if local_names is None:
        local_names = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        local_names |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a} | nm.stores(fn)
    blocked = _dynamic_scope(fn, env, local_names)
    made = cap.generated
    if not blocked and (any(n.startswith("_av_") and n not in made for n in local_names) or any(
            isinstance(n, ast.Name) and n.id.startswith("_av_") and n.id not in made for n in fastast.walk(fn))):
        # (generated code's names and its templates' placeholders, codegen.template, start so)
        blocked = "names starting with `_av_` are reserved for autovec's generated code"
    return blocked


def _dynamic_scope(fn: ast.FunctionDef, env, local_names) -> str | None:
    for n in fastast.walk(fn):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if (isinstance(f, ast.Name) and (f.id in _DYNAMIC_SCOPE or f.id == "dir" and not n.args)
                and f.id not in local_names and env.is_builtin(f.id)):
            return f"`{f.id}()` at line {n.lineno} inspects local variables, so no loop is rewritten"
        if isinstance(f, ast.Attribute) and f.attr in _FRAMES:
            # (`sys._getframe().f_locals`, `inspect.currentframe()`: the frame's locals are the
            # rewritten function's, its generated names among them; probeY)
            return f"`{ast.unparse(f)}()` at line {n.lineno} reads the running frame, so no loop is rewritten"
    return None


_FRAMES = frozenset({"_getframe", "currentframe"})


# ----------------------------------------------------------------------------- consumers

def _consumer_call(call: ast.AST, env, arg: ast.AST) -> str | None:
    """"stack"/"cat"/"tensor" when `call` is torch.stack(arg) (dim 0), torch.cat(arg), torch.tensor(arg);
    "stack@d" / "cat@d" along a literal dimension d >= 1, by keyword or by position (`torch.stack(arg, 1)`)."""
    if not (isinstance(call, ast.Call) and 1 <= len(call.args) <= 2 and call.args[0] is arg):
        return None
    if not isinstance(call.func, (ast.Attribute, ast.Name)):
        return None
    kind = env.consumer(src(call.func))
    if kind is None:
        return None
    dims = [kw.value.value if isinstance(kw.value, ast.Constant) and type(kw.value.value) is int else None
            for kw in call.keywords if kw.arg == "dim"]
    if len(dims) != len(call.keywords) or kind not in ("stack", "cat") and dims:
        return None
    if len(call.args) == 2:
        # (the dimension by position: stack's and cat's second parameter; given twice, the call raises)
        at = call.args[1]
        if dims or kind not in ("stack", "cat"):
            return None
        dims = [at.value if isinstance(at, ast.Constant) and type(at.value) is int else None]
    if dims and (dims[0] is None or dims[0] < 0):
        return None
    return kind if not dims or dims[0] == 0 else f"{kind}@{dims[0]}"   # e.g. "stack@1"


def _hoistable(node: ast.AST, ctx: Context, guarded=None) -> bool:
    """`node` sits in a simple statement and is evaluated first there, exactly once. `guarded`:
    a conditional expression whose body holds it and whose test is the consumed list itself
    (`torch.stack(out) if out else ..`: the rewrite swaps the whole expression, _list_consumer)."""
    up, child = ctx.parent.get(node), node
    while up is not None and not isinstance(up, ast.stmt):
        if isinstance(up, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return False
        if isinstance(up, ast.IfExp) and child is not up.test and not (up is guarded and child is up.body):
            return False
        if isinstance(up, ast.BoolOp) and child is not up.values[0]:
            return False
        up, child = ctx.parent.get(up), up
    if not isinstance(up, (ast.Assign, ast.Return, ast.Expr, ast.AnnAssign, ast.AugAssign)):
        return False
    if isinstance(up, ast.AugAssign):
        return False  # the target is read before the value
    inside = {id(n) for n in fastast.walk(node)}
    before = []
    for n in _eval_order(up.value):
        if n is node:
            break
        if id(n) not in inside:
            before.append(n)
    # (another consumer before it, `torch.stack(X), torch.stack(Y)`: their order changes nothing
    # but which error comes first where both raise)
    return not any(isinstance(n, (ast.Await, ast.NamedExpr)) or isinstance(n, ast.Call) and not _consumer_like(n, ctx)
                   for n in before)


def _consumer_like(n: ast.Call, ctx: Context) -> bool:
    """A call of torch.stack / torch.cat / torch.tensor (env.consumer) without `out=`: it reads its
    arguments and writes nothing, and changes no state another consumer reads (a default dtype,
    the grad mode)."""
    if not isinstance(n.func, (ast.Attribute, ast.Name)) or any(k.arg in ("out", None) for k in n.keywords):
        return False        # (`out=` writes into a tensor)
    return ctx.env.consumer(src(n.func)) is not None


def _eval_order(node: ast.AST):
    """Sub-expressions of `node` in (an approximation of) evaluation order, children first."""
    for child in ast.iter_child_nodes(node):
        yield from _eval_order(child)
    yield node


def _comprehension_consumer(comp: ast.ListComp, ctx: Context) -> tuple[str, ast.AST]:
    call = ctx.parent.get(comp)
    kind = _consumer_call(call, ctx.env, comp)
    target = call if kind else comp
    if not _hoistable(target, ctx):
        raise Refuse(f"the comprehension at line {comp.lineno} is evaluated where autovec cannot move it "
                     "(inside a condition, a lambda, or after another call in the same statement)", comp.lineno)
    return kind or "list", target


_REDUCERS = ("sum", "max", "min", "any", "all")


def _generator_consumer(gen: ast.GeneratorExp, ctx: Context) -> tuple[str, ast.AST]:
    """`sum(...)`, `max(...)`, `min(...)`, `any(...)`, `all(...)` over a generator expression."""
    call = ctx.parent.get(gen)
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in _REDUCERS
            and len(call.args) == 1 and call.args[0] is gen and not call.keywords
            and call.func.id not in ctx.local_names and ctx.env.is_builtin(call.func.id)):
        consumer = call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else "a call"
        raise Refuse(f"the generator expression at line {gen.lineno} is consumed by `{consumer}(...)` "
                     "with arguments autovec does not rewrite (sum/max/min/any/all of one generator)", gen.lineno)
    if not _hoistable(call, ctx):
        raise Refuse(f"the generator expression at line {gen.lineno} is evaluated where autovec cannot move it",
                     gen.lineno)
    return call.func.id, call


def _with_consumers(plan, node: ast.For, ctx: Context):
    """Mark appended lists that are built fresh before the loop and consumed once after it."""
    outs = []
    # (a loop that ends by `break` runs its stopping iteration as written after the batch, whose
    # statements may append to the list again: the list is kept, not its batch consumed; fuzz
    # brk seed 1002554, pre-existing)
    in_tail = {n.id for st in plan.exit_tail for n in fastast.walk(st) if isinstance(n, ast.Name)}
    for out in plan.outputs:
        if out.kind == "append" and not out.record and out.target not in in_tail:   # (a list of literals stays a list)
            appends = sum(1 for o in plan.outputs if o.kind == "append" and o.target == out.target)
            found = _list_consumer(out.target, node, ctx, appends)
            if found:
                kind, call, flip, guarded = found
                out = dataclasses.replace(out, consumer=kind, consumer_src=src(call), flip=flip,
                                          consumer_guard=src(guarded) if guarded is not None else "")
        # (a store under a condition too: the batch is where(mask, values, the allocation's own
        # values), a new tensor as a whole, or the values alone where every branch stores)
        # (not with several stores into it: the first store's batch would become the output and
        # a later store would write into that batch in place, which autograd may have saved)
        stores = sum(1 for o in plan.outputs if o.kind == "store" and o.target == out.target)
        fresh = out.kind == "store" and not out.op and stores == 1 and _fresh_allocation(out, node, ctx)
        if fresh:
            out = dataclasses.replace(out, consumer="fresh", fill=fresh if isinstance(fresh, str) else "")
        if out.kind == "accum" and out.op in ("+", "-") and _allocation(out.target, node, ctx) == "0":
            out = dataclasses.replace(out, fill="0")   # (it starts +0.0: runtime accumulate's zeros)
        if out.kind == "scatter" and out.op in ("+", "-") and _allocation(out.target, node, ctx) == "0":
            out = dataclasses.replace(out, fill="0")   # (its elements start +0.0: runtime._nest_region)
        outs.append(out)
    return dataclasses.replace(plan, outputs=tuple(outs))


_ALLOCATORS = ("empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like")


def _fresh_allocation(out, loop: ast.For, ctx: Context) -> bool:
    """`out = torch.empty_like(x)` (or zeros/ones/full) earlier in the same block, `out` not
    used between, and written as `out[i]` / `out[:, i]`: when a call overwrites every element,
    the batch can become `out` itself instead of being copied into it."""
    if out.index_src.replace(" ", "") not in (f"{out.target}[{{}}]", f"{out.target}[:,{{}}]",
                                              f"{out.target}[:,:,{{}}]"):
        return False
    return _allocation(out.target, loop, ctx)


def _declared_outside(fn: ast.FunctionDef) -> frozenset:
    """Names the function declares `global` or `nonlocal`: like a closure's cells, their values
    are seen outside the function's frame, so a loop's last value in one is live after it
    (the loop's analysis treats them as `cellvars`)."""
    names, todo = set(), list(fn.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            names.update(n.names)
        elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))
    return frozenset(names)


def _allocation(target: str, loop: ast.For, ctx: Context):
    """Whether `target` is made by a torch allocator (empty, zeros, ones, full, their _like
    forms) earlier in the loop's block and not used between: "empty", "0" or "1" where the
    allocation can be made again from the tensor's metadata, True for the others, else False."""
    if "." in target or target in ctx.cellvars:
        return False
    block = block_of(loop, ctx)
    if block is None:
        return False
    for s in reversed(block[:block.index(loop)]):
        uses = [n for n in fastast.walk(s) if isinstance(n, ast.Name) and n.id == target]
        if not uses:
            continue
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                and s.targets[0].id == target and isinstance(s.value, ast.Call) and len(uses) == 1):
            return False
        if any(k.arg in ("out", None) for k in s.value.keywords) or any(isinstance(a, ast.Starred) for a in s.value.args):
            return False   # `torch.zeros(n, out=buf)` returns buf: the loop writes into the caller's tensor
        f = s.value.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        found, obj = ctx.env.resolve(src(f)) if name in _ALLOCATORS else (False, None)
        if not (found and (getattr(obj, "__module__", "") or "").startswith("torch")):
            return False
        # the fill an allocation can be made again with from the tensor's metadata (Token.release)
        if all(k.arg in _REMADE_KEYWORDS for k in s.value.keywords):
            fill = {"empty": "empty", "zeros": "0", "ones": "1"}.get(name.removesuffix("_like"))
            if fill and obj is getattr(torch, name, None):
                return fill
        return True
    return False


_REMADE_KEYWORDS = ("dtype", "device", "requires_grad", "memory_format")


def _list_consumer(name: str, loop: ast.For, ctx: Context, appends: int = 1):
    if name in ctx.cellvars:
        return None
    block = block_of(loop, ctx)
    if block is None:
        return None
    pos = block.index(loop)
    init = None
    for s in reversed(block[:pos]):
        if name in {n.id for n in fastast.walk(s) if isinstance(n, ast.Name)}:
            init = s
            break
    if not _empty_list_init(init, name, ctx):
        return None
    refs = [n for n in fastast.walk(ctx.fn) if isinstance(n, ast.Name) and n.id == name]
    # `name.reverse()` as the statement right after the loop: the consumer takes the list in the
    # other order, the batch flipped along its rows (`flip`); the list the batched path leaves is
    # empty, which the statement leaves empty (the loop as written, the fallback, reverses its own)
    flip = pos + 1 < len(block) and _reverses(block[pos + 1], name)
    first = pos + 2 if flip else pos + 1
    after = [n for s in block[first:] for n in fastast.walk(s) if isinstance(n, ast.Name) and n.id == name]
    guarded = None
    if len(after) == 2 and not flip:
        # `torch.stack(out) if out else empty`: the list's truth as the test of a conditional
        # expression whose body is the consumer (the rewrite swaps the whole expression: the
        # batch where it has rows, else the other side; lowering.common)
        for test, use in ((after[0], after[1]), (after[1], after[0])):
            q = ctx.parent.get(test)
            if isinstance(q, ast.IfExp) and q.test is test and ctx.parent.get(use) is q.body:
                guarded, after = q, [use]
                break
    if len(after) != 1 or len(refs) != 2 + appends + flip + (guarded is not None):
        return None     # (`name = []`, the appends, the reverse, the consumer, its guard)
    use = after[0]
    call = ctx.parent.get(use)
    kind = _consumer_call(call, ctx.env, use)
    if kind is None or not _hoistable(call, ctx, guarded) or guarded is not None and kind not in ("stack", "tensor"):
        return None
    at = next(k for k in range(first, len(block)) if any(n is use for n in fastast.walk(block[k])))
    up = ctx.parent.get(use)
    while up is not None and not isinstance(up, ast.stmt):
        up = ctx.parent.get(up)
    if up is not block[at]:
        # the consumer inside a later `with` or `if` block: the statements before it there are
        # unchecked, and `with torch.no_grad():` changes what it makes
        return None
    if not all(_quiet(s, ctx) for s in block[first:at]):
        # the consumer is computed from the batch at the loop: a statement between that could
        # write into what was appended (`rows.append(x[i])`, then `x.mul_(2)`, then
        # `torch.stack(rows)` stacks the doubled rows) keeps the list and your own consumer
        return None
    return kind, call, flip, guarded


def _reverses(st: ast.stmt, name: str) -> bool:
    """`name.reverse()` as a statement (a list's own method: `name = []` made it, and no other
    mention of the name is allowed before the consumer)."""
    return (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and not st.value.args
            and not st.value.keywords and isinstance(st.value.func, ast.Attribute)
            and st.value.func.attr == "reverse" and isinstance(st.value.func.value, ast.Name)
            and st.value.func.value.id == name)


def _empty_list_init(init, name: str, ctx: Context | None = None) -> bool:
    """`name = []` (or `name = list()`, the builtin), or `a, name = [], []` (a tuple of names and
    one of empty lists, as long)."""
    if not (isinstance(init, ast.Assign) and len(init.targets) == 1):
        return False
    t, v = init.targets[0], init.value
    if isinstance(t, ast.Name) and isinstance(v, ast.Call) and ctx is not None:
        return (t.id == name and isinstance(v.func, ast.Name) and v.func.id == "list" and not v.args
                and not v.keywords and "list" not in ctx.local_names and ctx.env.is_builtin("list"))
    if isinstance(t, ast.Name):
        return t.id == name and isinstance(v, ast.List) and not v.elts
    if isinstance(t, (ast.Tuple, ast.List)) and isinstance(v, (ast.Tuple, ast.List)) and len(t.elts) == len(v.elts) \
            and all(isinstance(e, ast.Name) for e in t.elts):
        return any(e.id == name and isinstance(x, ast.List) and not x.elts for e, x in zip(t.elts, v.elts))
    return False


def _quiet(s: ast.stmt, ctx: Context) -> bool:
    """A statement that writes into no object: assignments to names of values computed by
    torch functions, builtins and arithmetic (no method calls, no calls of your functions)."""
    if isinstance(s, ast.Pass) or isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
        return True
    if not isinstance(s, (ast.Assign, ast.AnnAssign)) or s.value is None:
        return False
    targets = s.targets if isinstance(s, ast.Assign) else [s.target]
    if not all(isinstance(n, ast.Name) for t in targets for n in ([t] if isinstance(t, ast.Name) else
                                                                  getattr(t, "elts", [t]))):
        return False
    for n in fastast.walk(s.value):
        if isinstance(n, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(n, ast.Attribute) and n.attr.endswith("_") and not n.attr.startswith("_"):
            return False     # an in-place method, called or passed along (`map(torch.Tensor.zero_, x)`)
        if isinstance(n, ast.Call) and any(k.arg in ("out", "inplace", None) for k in n.keywords):
            return False     # (`out=`, `inplace=True` write into a tensor)
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name):
                if not ctx.env.is_builtin(f.id) or f.id in ctx.local_names:
                    return False
                continue
            found, obj = ctx.env.resolve(src(f)) if isinstance(f, ast.Attribute) else (False, None)
            name = getattr(obj, "__name__", "") or ""
            if not found or not (getattr(obj, "__module__", "") or "").startswith("torch") or name.endswith("_") \
                    or _takes_inplace(obj):
                return False
    return True


def _takes_inplace(obj) -> bool:
    """A function with an `inplace` parameter (`F.relu(x, inplace=True)`, `F.leaky_relu(x, 0.1,
    True)`): it may write into its argument, however the call passes it."""
    import inspect
    try:
        return "inplace" in inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False
