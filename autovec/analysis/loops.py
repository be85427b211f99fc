"""Turn one loop (a `for` statement or a list comprehension) into a LoopPlan or a Refusal.

Requires names.py. Works on syntax only; questions about the objects a name refers to
(is `torch.randn` random? is `helper` free of side effects?) go to the `env` passed in.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..plan import IterSpace, LoopPlan, Mapped, Output, Refusal
from . import names as nm


class Refuse(Exception):
    def __init__(self, reason: str, lineno: int):
        super().__init__(reason)
        self.refusal = Refusal(reason, lineno)


def src(node: ast.AST) -> str:
    return ast.unparse(node)


# Python statements that can never be part of a rewritten body, with the reason shown.
_BLOCKING = {
    ast.Break: "`break` at line {l} ends the loop early depending on the data",
    ast.Return: "`return` at line {l} leaves the function from inside the loop",
    ast.Raise: "`raise` at line {l} may stop the loop part-way",
    ast.Try: "`try` at line {l}: exceptions inside the loop keep the Python path",
    ast.With: "`with` at line {l} inside the loop",
    ast.Global: "`global` at line {l} inside the loop",
    ast.Nonlocal: "`nonlocal` at line {l} inside the loop",
    ast.Delete: "`del` at line {l} inside the loop",
    ast.Continue: "`continue` at line {l} (conditional iterations are not supported yet)",
    ast.FunctionDef: "a function defined inside the loop at line {l}",
    ast.ClassDef: "a class defined inside the loop at line {l}",
    ast.Import: "an import inside the loop at line {l}",
    ast.ImportFrom: "an import inside the loop at line {l}",
    ast.Assert: "`assert` at line {l} may stop the loop part-way",
}

_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
             "popitem", "sort", "reverse", "add", "discard", "write", "put", "send"}
_PURE_BUILTINS = {"len", "abs", "min", "max", "float", "int", "bool", "round", "sum", "range",
                  "isinstance", "tuple", "list", "zip", "enumerate", "divmod", "pow", "slice",
                  "any", "all", "sorted", "reversed", "getattr", "hasattr", "type", "dict", "map"}


@dataclass
class Context:
    """What one loop's analysis may look at: the function, its locals, the name resolver."""

    fn: ast.FunctionDef
    parent: dict
    local_names: set[str]          # parameters and every name bound in the function
    env: object                    # see analysis.Env
    cellvars: frozenset = frozenset()
    counter: list = field(default_factory=lambda: [0])


# ----------------------------------------------------------------------------- iteration

def _is_builtin(ctx: Context, name: str) -> bool:
    return name not in ctx.local_names and ctx.env.is_builtin(name)


def _pure_expr(node: ast.AST) -> bool:
    """Expressions that may be evaluated twice without effect (range bounds, iterables)."""
    for n in ast.walk(node):
        if isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Lambda,
                          ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp)):
            return False
        if isinstance(n, ast.Call):
            f = n.func
            ok = (isinstance(f, ast.Name) and f.id in ("len", "int", "min", "max", "abs")) or (
                isinstance(f, ast.Attribute) and f.attr in ("size", "dim", "numel", "__len__"))
            if not ok:
                return False
    return True


def iteration(node: ast.For, ctx: Context) -> IterSpace:
    it, tgt, line = node.iter, node.target, node.lineno
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords:
        fname = it.func.id
        if fname == "range" and _is_builtin(ctx, "range") and 1 <= len(it.args) <= 3:
            if not isinstance(tgt, ast.Name):
                raise Refuse(f"the target of `range` at line {line} is not a plain name", line)
            if not all(_pure_expr(a) for a in it.args):
                raise Refuse(f"the bounds of `range` at line {line} call functions", line)
            return IterSpace("range", tuple(src(a) for a in it.args), index=tgt.id)
        if fname == "enumerate" and _is_builtin(ctx, "enumerate") and len(it.args) in (1, 2):
            if not (isinstance(tgt, ast.Tuple) and len(tgt.elts) == 2 and isinstance(tgt.elts[0], ast.Name)):
                raise Refuse(f"`enumerate` at line {line} is not unpacked as `i, item`", line)
            start = "0"
            if len(it.args) == 2:
                if not (isinstance(it.args[1], ast.Constant) and type(it.args[1].value) is int):
                    raise Refuse(f"`enumerate` at line {line} has a start that is not an integer literal", line)
                start = str(it.args[1].value)
            inner = _elements(it.args[0], tgt.elts[1], ctx, line)
            return IterSpace("elements", index=tgt.elts[0].id, enum_start=start, elements=inner)
    return IterSpace("elements", elements=_elements(it, tgt, ctx, line))


def _elements(it: ast.AST, tgt: ast.AST, ctx: Context, line: int) -> tuple[tuple[str, str], ...]:
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip"
            and _is_builtin(ctx, "zip") and not it.keywords and it.args):
        if not (isinstance(tgt, ast.Tuple) and len(tgt.elts) == len(it.args)
                and all(isinstance(e, ast.Name) for e in tgt.elts)):
            raise Refuse(f"`zip` at line {line} is not unpacked into one plain name per sequence", line)
        if not all(_pure_expr(a) for a in it.args):
            raise Refuse(f"an argument of `zip` at line {line} calls a function", line)
        return tuple((e.id, src(a)) for e, a in zip(tgt.elts, it.args))
    if not isinstance(tgt, ast.Name):
        raise Refuse(f"the loop at line {line} unpacks each element (`{src(tgt)}`); "
                     "only a plain name, zip(...) or enumerate(...) is supported", line)
    if not (isinstance(it, (ast.Name, ast.Attribute, ast.Subscript)) and _pure_expr(it)):
        raise Refuse(f"the loop at line {line} iterates over `{src(it)}`, which is not a range, "
                     "a tensor or list of tensors, zip(...) or enumerate(...)", line)
    return ((tgt.id, src(it)),)


# ----------------------------------------------------------------------------- subscripts

def _affine(entry: ast.AST, index: str) -> int | None:
    """Offset c when `entry` is `index`, `index + c`, `index - c` or `c + index`."""
    if isinstance(entry, ast.Name) and entry.id == index:
        return 0
    if isinstance(entry, ast.BinOp) and isinstance(entry.op, (ast.Add, ast.Sub)):
        l, r = entry.left, entry.right
        if isinstance(l, ast.Name) and l.id == index and isinstance(r, ast.Constant) and type(r.value) is int:
            return r.value if isinstance(entry.op, ast.Add) else -r.value
        if (isinstance(entry.op, ast.Add) and isinstance(r, ast.Name) and r.id == index
                and isinstance(l, ast.Constant) and type(l.value) is int):
            return l.value
    return None


def _full_slice(e: ast.AST) -> bool:
    return isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None


def match_subscript(node: ast.Subscript, index: str):
    """(dim, offset) when the loop index selects one dimension of `node.value` affinely,
    "other" when the index appears in another way, None when it does not appear."""
    entries = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    hits = [k for k, e in enumerate(entries) if index in nm.load_ids(e)]
    if not hits:
        return None
    if len(hits) > 1:
        return "other"
    d = hits[0]
    off = _affine(entries[d], index)
    if off is None or not all(_full_slice(e) for e in entries[:d]):
        return "other"
    return d, off


def _base_ok(node: ast.AST) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


# ----------------------------------------------------------------------------- the body

@dataclass
class _Body:
    stmts: list
    outputs: list
    assigned: dict          # name -> first line written in the body
    order: list = field(default_factory=list)   # every top-level statement, in source order
    based: set = field(default_factory=set)     # ids of Name nodes that only name a sliced tensor


def plan_for(node: ast.For, ctx: Context, loop_id: int) -> LoopPlan:
    if node.orelse:
        raise Refuse(f"`for ... else` at line {node.lineno} is not supported", node.lineno)
    space = iteration(node, ctx)
    iter_vars = _iter_vars(space)
    body = _classify(node.body, ctx)
    return _finish(node, ctx, loop_id, "for", space, iter_vars, body)


def plan_comprehension(comp: ast.ListComp, consumer: str, consumer_node: ast.AST,
                       ctx: Context, loop_id: int) -> LoopPlan:
    line = comp.lineno
    if len(comp.generators) != 1:
        raise Refuse(f"the comprehension at line {line} has several `for` clauses", line)
    gen = comp.generators[0]
    if gen.ifs:
        raise Refuse(f"the comprehension at line {line} filters with `if` (not supported yet)", line)
    if gen.is_async:
        raise Refuse(f"the comprehension at line {line} is asynchronous", line)
    space = iteration(ast.For(target=gen.target, iter=gen.iter, body=[], orelse=[], lineno=line), ctx)
    out = Output("append", "", src(comp.elt), line, consumer=consumer,
                 consumer_src=src(consumer_node))
    body = _Body([], [(out, comp.elt)], {})
    return _finish(comp, ctx, loop_id, "comprehension", space, _iter_vars(space), body)


def _iter_vars(space: IterSpace) -> dict[str, str]:
    out = {t: "element" for t, _ in space.elements}
    if space.index:
        out[space.index] = "index"
    return out


def _classify(stmts: list[ast.stmt], ctx: Context) -> _Body:
    """Split the body into plain statements and outputs; refuse statements that block."""
    body = _Body([], [], {}, list(stmts))
    for s in stmts:
        out = _output(s)
        if out is not None:
            body.outputs.append(out)
            continue
        _check_stmt(s)
        body.stmts.append(s)
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                body.assigned.setdefault(n.id, n.lineno)
    return body


def _check_stmt(s: ast.stmt) -> None:
    for n in ast.walk(s):
        for kind, why in _BLOCKING.items():
            if isinstance(n, kind):
                raise Refuse(why.format(l=n.lineno), n.lineno)
        if isinstance(n, (ast.For, ast.While, ast.AsyncFor)):
            raise Refuse(f"nested loop at line {n.lineno} (nested loops are not rewritten yet)", n.lineno)
        if isinstance(n, ast.NamedExpr):
            raise Refuse(f"assignment expression `:=` at line {n.lineno}", n.lineno)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                        raise Refuse(f"attribute write `{src(sub)}` at line {n.lineno} is a side effect", n.lineno)
                    if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Store):
                        raise Refuse(f"write to `{src(sub)}` at line {n.lineno} is not a recognised output "
                                     "(`out[i] = ...` at the top level of the loop body)", n.lineno)
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                pass  # a plain-name augmented assignment is checked as a read-before-write
        if isinstance(n, ast.Expr) and n is s and not isinstance(n.value, ast.Constant):
            raise Refuse(f"the value of `{src(n.value)}` at line {n.lineno} is discarded, so it is "
                         "called for its side effect", n.lineno)


def _output(s: ast.stmt) -> tuple[Output, ast.AST] | None:
    """Recognise `out[..] = v`, `out[..] op= v`, `lst.append(v)`, `acc = acc + v`, `acc += v`."""
    line = s.lineno
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript):
        t = s.targets[0]
        return Output("store", src(t.value), src(s.value), line, index_src=src(t)), (t, s.value)
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Subscript):
        t = s.target
        return (Output("store", src(t.value), src(s.value), line, op=_op(s.op), index_src=src(t)),
                (t, s.value))
    if (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute)
            and s.value.func.attr == "append" and isinstance(s.value.func.value, ast.Name)
            and len(s.value.args) == 1 and not s.value.keywords):
        return Output("append", s.value.func.value.id, src(s.value.args[0]), line), s.value.args[0]
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and isinstance(s.op, (ast.Add, ast.Sub)):
        acc = s.target.id
        if acc not in nm.load_ids(s.value):
            return Output("accum", acc, src(s.value), line, op=_op(s.op), inplace=True), s.value
    if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            and isinstance(s.value, ast.BinOp) and isinstance(s.value.op, (ast.Add, ast.Sub))):
        acc, v = s.targets[0].id, s.value
        if isinstance(v.left, ast.Name) and v.left.id == acc and acc not in nm.load_ids(v.right):
            return Output("accum", acc, src(v.right), line, op=_op(v.op)), v.right
        if (isinstance(v.op, ast.Add) and isinstance(v.right, ast.Name) and v.right.id == acc
                and acc not in nm.load_ids(v.left)):
            # `acc = v + acc` adds in the other order; for numbers and tensors the sum is the same
            return Output("accum", acc, src(v.left), line, op="+"), v.left
    return None


def _op(op: ast.operator) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}.get(type(op), "?")


def _finish(node, ctx: Context, loop_id: int, form: str, space: IterSpace,
            iter_vars: dict[str, str], body: _Body) -> LoopPlan:
    line = node.lineno
    index = space.index
    outputs: list[Output] = []
    value_nodes: list[ast.AST] = []
    targets: dict[str, Output] = {}
    store_subs: list[tuple[ast.Subscript, Output]] = []

    for out, payload in body.outputs:
        if out.target in iter_vars or out.target in body.assigned:
            raise Refuse(f"`{out.target}` is both written in the loop and {'an iteration variable' if out.target in iter_vars else 'reassigned in it'} (line {out.lineno})", out.lineno)
        if out.target and out.target in targets:
            raise Refuse(f"`{out.target}` is written more than once in the loop (lines "
                         f"{targets[out.target].lineno} and {out.lineno})", out.lineno)
        if out.kind == "store":
            sub, value = payload
            if index is None:
                raise Refuse(f"`{out.index_src}` at line {out.lineno} is written in a loop without an index variable", out.lineno)
            if not _base_ok(sub.value):
                raise Refuse(f"`{out.index_src}` at line {out.lineno}: the written tensor is not a plain name", out.lineno)
            m = match_subscript(sub, index)
            if m is None:
                raise Refuse(f"every iteration writes the same element `{out.index_src}` (line {out.lineno}): "
                             "the last write wins, so iterations depend on each other", out.lineno)
            if m == "other":
                raise Refuse(f"`{out.index_src}` at line {out.lineno} is written at an index autovec cannot "
                             "map to one dimension (use `out[i]`, `out[i + c]` or `out[:, i]`)", out.lineno)
            d, off = m
            entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            for e in entries[:d] + entries[d + 1:]:
                bad = nm.load_ids(e) & (set(body.assigned) | set(iter_vars))
                if bad:
                    raise Refuse(f"the index of `{out.index_src}` at line {out.lineno} uses `{sorted(bad)[0]}`, "
                                 "which changes inside the loop", out.lineno)
            if space.kind == "elements" and index:
                off += int(space.enum_start)
            parts = [src(e) for e in entries]
            parts[d] = "{}"
            holder = src(sub.value) + "[" + ", ".join(parts) + "]"
            out = Output("store", src(sub.value), out.value, out.lineno, op=out.op, dim=d, offset=off,
                         index_src=holder)
            store_subs.append((sub, out))
            value_nodes.append(value)
        else:
            value_nodes.append(payload)
        targets[out.target] = out
        outputs.append(out)

    all_nodes = list(body.stmts) + value_nodes
    _check_calls(all_nodes, ctx, body, iter_vars)

    # every read of an output target other than the store itself is a dependence
    for n in all_nodes:
        for ld in nm.loads(n):
            o = targets.get(ld.id)
            if o is None:
                continue
            if o.kind == "store" and _same_index_read(ld, n, o, index) and _before(n, o, body):
                continue
            what = {"store": "written", "append": "appended to", "accum": "accumulated"}[o.kind]
            raise Refuse(f"loop-carried dependency: `{ld.id}` is read at line {ld.lineno} and "
                         f"{what} at line {o.lineno}", ld.lineno)

    _check_carried(body.order, body.assigned, set(iter_vars))
    varying = set(body.assigned) | set(iter_vars)
    for s in body.stmts:
        for n in ast.walk(s):
            if isinstance(n, (ast.If, ast.IfExp, ast.While)) and nm.load_ids(n.test) & varying:
                raise Refuse(f"the condition `{src(n.test)}` at line {n.lineno} depends on the iteration "
                             "(data-dependent branches are not rewritten yet)", n.lineno)

    mapped, index_as_value = _mapped(all_nodes, space, index, body, ctx, iter_vars)
    for m in mapped:
        if _root_name(m.base) in body.assigned:
            raise Refuse(f"`{m.base}` is indexed at line {line} but reassigned in the loop", line)

    reads = set()
    for n in all_nodes:
        reads |= {ld.id for ld in nm.loads(n) if id(ld) not in body.based}
    free = sorted(reads - set(body.assigned) - set(iter_vars) - set(targets))
    callables = tuple(sorted({c for c in _callables(all_nodes, body, iter_vars)}))

    live = []
    if form == "for":
        for name in sorted(set(body.assigned) | set(iter_vars)):
            at = nm.read_after(ctx.fn, ctx.parent, node, name)
            if name in ctx.cellvars:
                at = line
            if at is None:
                continue
            if name in iter_vars and name not in body.assigned:
                live.append(name)
            else:
                raise Refuse(f"`{name}` is assigned in the loop and read after it at line {at}", at)

    return LoopPlan(
        loop_id=loop_id, lineno=line, end_lineno=getattr(node, "end_lineno", line),
        source=src(node), form=form, space=space, body=tuple(src(s) for s in body.stmts),
        outputs=tuple(outputs), mapped=tuple(mapped), index_as_value=index_as_value,
        free=tuple(free), callables=callables, live_after=tuple(live))


def _root_name(base: str) -> str:
    return base.split(".")[0].split("[")[0]


def _before(node: ast.AST, out: Output, body: _Body) -> bool:
    """`node` (a statement or an output's value) runs no later than the store `out`."""
    for pos, s in enumerate(body.order):
        if s is node or any(c is node for c in ast.walk(s)):
            store_pos = next(k for k, t in enumerate(body.order) if t.lineno == out.lineno)
            return pos <= store_pos
    return False


def _same_index_read(ld: ast.Name, stmt: ast.AST, out: Output, index: str | None) -> bool:
    """A store target read as `out[.. i + c ..]` with the store's own dim and offset."""
    if index is None:
        return False
    for n in ast.walk(stmt):
        if isinstance(n, ast.Subscript) and n.value is ld:
            m = match_subscript(n, index)
            return isinstance(m, tuple) and m == (out.dim, out.offset) and out.op == ""
    return False


def _check_carried(stmts: list[ast.stmt], assigned: dict, defined: set[str]) -> set[str]:
    """Refuse a read of a body-assigned name that may see the previous iteration's value.
    Returns the names surely written by `stmts` (must-write set)."""
    must = set(defined)
    for s in stmts:
        if isinstance(s, ast.If):
            _reads_ok(s.test, assigned, must)
            a = _check_carried(s.body, assigned, must)
            b = _check_carried(s.orelse, assigned, must)
            must |= a & b
            continue
        value = s.value if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)) else s
        if value is not None:
            _reads_ok(value, assigned, must)
        if isinstance(s, ast.AugAssign):
            _reads_ok(s.target, assigned, must, aug=True)
        for t in (s.targets if isinstance(s, ast.Assign) else []):
            if not isinstance(t, ast.Name):
                _reads_ok(t, assigned, must)
        targets = s.targets if isinstance(s, ast.Assign) else [getattr(s, "target", None)]
        for t in targets:
            if t is not None:
                must |= set(nm.target_names(t))
    return must


def _reads_ok(node: ast.AST, assigned: dict, must: set[str], aug: bool = False) -> None:
    names = [node] if aug and isinstance(node, ast.Name) else nm.loads(node)
    for n in names:
        if n.id in assigned and n.id not in must:
            raise Refuse(f"loop-carried dependency: `{n.id}` is read at line {n.lineno} before it is "
                         f"written at line {assigned[n.id]}", n.lineno)


def _mapped(nodes, space: IterSpace, index: str | None, body: _Body, ctx: Context,
            iter_vars: dict[str, str]) -> tuple[list[Mapped], bool]:
    mapped: dict[tuple[str, int, int], Mapped] = {}
    for target, source in space.elements:
        mapped[(source, 0, 0)] = Mapped(source, 0, 0, target)
    index_as_value = False
    if index is None:
        return list(mapped.values()), False
    start = int(space.enum_start) if space.kind == "elements" else 0
    if space.kind == "elements" and space.enum_start not in ("0",) and not space.enum_start.lstrip("-").isdigit():
        start = None
    covered: set[int] = set()
    based = body.based
    for n in nodes:
        for sub in ast.walk(n):
            if not isinstance(sub, ast.Subscript) or not isinstance(sub.ctx, ast.Load):
                continue
            m = match_subscript(sub, index)
            if not isinstance(m, tuple) or not _base_ok(sub.value) or start is None:
                continue
            base = src(sub.value)
            if _root_name(base) in body.assigned or _root_name(base) in iter_vars:
                continue  # indexing a per-iteration value: an ordinary operation
            d, off = m
            key = (base, d, off + start)
            if key not in mapped:
                name = f"{base.replace('.', '_')}_{index}" + (
                    "" if (d, off) == (0, 0) else f"_{d}_{off + start}".replace("-", "m"))
                taken = ctx.local_names | {m.param for m in mapped.values()}
                while name in taken:
                    name += "_"
                mapped[key] = Mapped(base, d, off + start, name)
            entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            for e in ast.walk(entries[d]):
                covered.add(id(e))
            for e in ast.walk(sub.value):
                based.add(id(e))
    for n in nodes:
        for ld in nm.loads(n):
            if ld.id == index and id(ld) not in covered:
                index_as_value = True
    return list(mapped.values()), index_as_value


def _callables(nodes, body: _Body, iter_vars) -> list[str]:
    out = []
    for n in nodes:
        for c in ast.walk(n):
            if isinstance(c, ast.Call):
                root = _root(c.func)
                if root and root not in body.assigned and root not in iter_vars and isinstance(c.func, (ast.Name, ast.Attribute)) and _base_ok(c.func):
                    out.append(src(c.func))
    return out


def _check_calls(nodes, ctx: Context, body: _Body, iter_vars) -> None:
    """Refuse calls that may have side effects or draw random numbers."""
    for n in nodes:
        for c in ast.walk(n):
            if not isinstance(c, ast.Call):
                continue
            f, line = c.func, c.lineno
            root = _root(f)
            per_iter = root is not None and (root in body.assigned or root in iter_vars)
            if isinstance(f, ast.Attribute) and (per_iter or root is None or not _base_ok(f)):
                # a method of a value computed in the loop
                if f.attr in ("item", "tolist", "numpy", "cpu", "backward"):
                    raise Refuse(f"`.{f.attr}()` at line {line} turns a per-iteration value into Python data", line)
                if not ctx.env.pure_method(f.attr):
                    raise Refuse(f"`.{f.attr}()` at line {line} modifies its object in place "
                                 "or is not a known tensor operation", line)
                continue
            if isinstance(f, ast.Name) and (f.id in body.assigned or f.id in iter_vars):
                raise Refuse(f"`{f.id}` called at line {line} is a value computed in the loop", line)
            if not isinstance(f, (ast.Name, ast.Attribute)) or not _base_ok(f):
                raise Refuse(f"the call `{src(f)}(...)` at line {line} picks its function in a way autovec "
                             "cannot follow", line)
            if isinstance(f, ast.Attribute) and f.attr in _MUTATORS | {"item", "tolist", "numpy"} or (
                    isinstance(f, ast.Attribute) and f.attr.endswith("_") and not f.attr.endswith("__")):
                raise Refuse(f"`{src(f)}()` at line {line} modifies an object defined outside the loop", line)
            if root in ctx.local_names:
                continue  # a local value (argument, module): checked on each call at run time
            if isinstance(f, ast.Name) and f.id in _PURE_BUILTINS and ctx.env.is_builtin(f.id):
                continue
            verdict = ctx.env.classify(src(f))
            if verdict:
                raise Refuse(f"{verdict} (`{src(f)}` at line {line})", line)
