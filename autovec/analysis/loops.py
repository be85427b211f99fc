"""Turn one loop (a `for` statement or a list comprehension) into a LoopPlan or a Refusal.

Requires names.py. Works on syntax only; questions about the objects a name refers to
(is `torch.randn` random? is `helper` free of side effects?) go to the `env` passed in.
"""
from __future__ import annotations

import ast
import math
import copy
import dataclasses
import functools
import operator
import types
from dataclasses import dataclass, field

from .. import fastast
from ..frontend import _int_bound
from .. import reach
from ..plan import IterSpace, LoopPlan, Mapped, Output, Refusal
from . import helpers as helper_forms
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
_TEXT_BUILTINS = frozenset({"str", "repr", "format", "ascii", "hash", "id", "chr", "ord", "hex", "oct", "bin"})
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
    for n in fastast.walk(node):
        if isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Lambda,
                          ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp)):
            return False
        if isinstance(n, ast.Call):
            f = n.func
            ok = (isinstance(f, ast.Name) and f.id in ("len", "int", "min", "max", "abs")) or (
                isinstance(f, ast.Attribute) and f.attr in ("size", "dim", "numel", "__len__", "__index__")) or (
                isinstance(f, ast.Attribute) and f.attr in ("__add__", "__sub__") and isinstance(f.value, ast.Name)
                and f.value.id == "int")      # (_counter_offset's bound)
            if not ok:
                return False
    return True


def iteration(node: ast.For, ctx: Context) -> IterSpace:
    it, tgt, line = node.iter, node.target, node.lineno
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "reversed"
            and _is_builtin(ctx, "reversed") and len(it.args) == 1 and not it.keywords
            and isinstance(it.args[0], ast.Call) and isinstance(it.args[0].func, ast.Name)
            and it.args[0].func.id == "range"):
        inner = iteration(ast.For(target=tgt, iter=it.args[0], body=[], orelse=[], lineno=line), ctx)
        return dataclasses.replace(inner, reverse=True)
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords:
        fname = it.func.id
        if fname == "range" and _is_builtin(ctx, "range") and 1 <= len(it.args) <= 3:
            if not isinstance(tgt, ast.Name):
                raise Refuse(f"the target of `range` at line {line} is not a plain name", line)
            if not all(_pure_expr(a) for a in it.args):
                raise Refuse(f"the bounds of `range` at line {line} call functions", line)
            if len(it.args) == 3 and _int_literal(it.args[2]) == -1 and all(_int_bound(a) for a in it.args[:2]):
                # `range(a, b, -1)` walks a, a - 1, .., b + 1: `reversed(range(b + 1, a + 1))`, the
                # same indices in the same order (a walk back: suffix scans, stores in reverse). Only
                # where the bounds are Python ints whatever the values (`b + 1` of a uint8 `b` wraps:
                # probeE); else the range with its step, as any other
                a, b = (src(x) for x in it.args[:2])
                return IterSpace("range", (f"({b}) + 1", f"({a}) + 1"), index=tgt.id, reverse=True)
            return IterSpace("range", tuple(src(a) for a in it.args), index=tgt.id)
    bound = _enumerate_args(it) if _is_builtin(ctx, "enumerate") else None
    if bound is not None:
        iterable, start_node = bound
        if not (isinstance(tgt, ast.Tuple) and len(tgt.elts) == 2 and isinstance(tgt.elts[0], ast.Name)):
            raise Refuse(f"`enumerate` at line {line} is not unpacked as `i, item`", line)
        start = 0 if start_node is None else _int_literal(start_node)
        if start is None:
            raise Refuse(f"`enumerate` at line {line} has a start that is not an integer literal", line)
        if abs(start) > ENUM_START_LIMIT:
            raise Refuse(f"`enumerate` at line {line} starts at {start}, beyond what int64 index "
                         "values hold with room for the iterations (Python's ints grow)", line)
        unpack = []
        inner = _elements(iterable, tgt.elts[1], ctx, line, unpack)
        return IterSpace("elements", index=tgt.elts[0].id, enum_start=str(start), elements=inner,
                         unpack=tuple(unpack))
    unpack = []
    return IterSpace("elements", elements=_elements(it, tgt, ctx, line, unpack), unpack=tuple(unpack))


# the largest |start| of an enumerate: index values are int64, and start + trip count must stay
# inside it (a tensor's length is far below 2**62)
ENUM_START_LIMIT = 2 ** 62


def _enumerate_args(it: ast.AST):
    """(iterable, start or None) of a call `enumerate(...)` bound as Python binds its
    parameters (`iterable`, `start`), positionally or by keyword; None for any other call, a
    starred argument, `**kwargs`, or arguments enumerate itself rejects (which raise as written)."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate"):
        return None
    if any(isinstance(a, ast.Starred) for a in it.args) or any(k.arg is None for k in it.keywords):
        return None
    names = ("iterable", "start")
    if len(it.args) > len(names):
        return None
    given = dict(zip(names, it.args))
    for k in it.keywords:
        if k.arg not in names or k.arg in given:
            return None
        given[k.arg] = k.value
    if "iterable" not in given:
        return None
    return given["iterable"], given.get("start")


def _int_literal(node: ast.AST) -> int | None:
    """The value of an int literal, signed (`3`, `-3`, `+3`); None for anything else (bools too)."""
    sign = 1
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sign * node.value
    return None


def _unpacked(it: ast.AST, tgt: ast.AST, ctx: Context, unpack: list):
    """`for a, b in x` / `for a, b in x.tolist()`: (the row's name, the source) when `x` can be
    read as rows (each row unpacked by the body's first statement), else None."""
    if not (isinstance(tgt, (ast.Tuple, ast.List)) and tgt.elts and all(isinstance(e, ast.Name) for e in tgt.elts)):
        return None
    names = [e.id for e in tgt.elts]
    if len(set(names)) != len(names):
        return None
    numbers = False
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "tolist"
            and not it.args and not it.keywords):
        it, numbers = it.func.value, True
    if not (isinstance(it, (ast.Name, ast.Attribute, ast.Subscript)) and _pure_expr(it)):
        return None
    ctx.counter[0] += 1
    row = f"_av_row{ctx.counter[0]}"
    unpack.append((row, tuple(names), numbers))
    return row, src(it)


def unpack_stmts(space: IterSpace, line: int) -> list:
    """The statements that unpack each row (IterSpace.unpack), at the loop's line."""
    out = []
    for row, names, numbers in space.unpack:
        if isinstance(names, str):      # `for v in x.tolist()`: one Python number per element
            text = f"{names} = {row}.item()"
        else:
            text = f"{', '.join(names)}, = {row}.unbind(0)"
        if numbers and not isinstance(names, str):
            text += "".join(f"\n{n} = {n}.item()" for n in names)
        for s in ast.parse(text).body:
            for n in fastast.walk(s):
                if hasattr(n, "lineno"):
                    n.lineno = n.end_lineno = line
                    n.col_offset = n.end_col_offset = 0
            out.append(s)
    return out


def _plain_names(t: ast.AST) -> bool:
    """`(h, w)`: a tuple or list of at least one plain name."""
    return isinstance(t, (ast.Tuple, ast.List)) and bool(t.elts) and all(isinstance(e, ast.Name) for e in t.elts)


def _tolist_of(it: ast.AST):
    """`x` of `x.tolist()` where `x` is a name, attribute or subscript read without calls, else None."""
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "tolist"
            and not it.args and not it.keywords
            and isinstance(it.func.value, (ast.Name, ast.Attribute, ast.Subscript)) and _pure_expr(it.func.value)):
        return it.func.value
    return None


def _elements(it: ast.AST, tgt: ast.AST, ctx: Context, line: int,
              unpack: list | None = None) -> tuple[tuple[str, str], ...]:
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip"
            and _is_builtin(ctx, "zip") and not it.keywords and it.args):
        if not (isinstance(tgt, ast.Tuple) and len(tgt.elts) == len(it.args)
                and all(isinstance(e, ast.Name) or unpack is not None and _plain_names(e) for e in tgt.elts)) \
                or len(nm.stores(tgt)) != sum(len(e.elts) if isinstance(e, (ast.Tuple, ast.List)) else 1
                                              for e in tgt.elts):
            raise Refuse(f"`zip` at line {line} is not unpacked into one plain name per sequence", line)
        out = []
        for e, a in zip(tgt.elts, it.args):
            if isinstance(e, (ast.Tuple, ast.List)):
                # `for b, (h, w) in zip(boxes, sizes)`: the rows of `sizes`, each unpacked by the
                # body's first statement (as `for h, w in sizes`: _unpacked)
                numbers = _tolist_of(a) is not None
                seq = _tolist_of(a) if numbers else a
                if not _pure_expr(seq):
                    raise Refuse(f"an argument of `zip` at line {line} calls a function", line)
                ctx.counter[0] += 1
                row = f"_av_row{ctx.counter[0]}"
                unpack.append((row, tuple(n.id for n in e.elts), numbers))
                out.append((row, src(seq)))
            elif unpack is not None and _tolist_of(a) is not None:
                # `zip(x, w.tolist())`: the elements of `w`, each made a Python number as below
                ctx.counter[0] += 1
                row = f"_av_row{ctx.counter[0]}"
                unpack.append((row, e.id, True))
                out.append((row, src(_tolist_of(a))))
            elif _pure_expr(a):
                out.append((e.id, src(a)))
            else:
                raise Refuse(f"an argument of `zip` at line {line} calls a function", line)
        return tuple(out)
    if not isinstance(tgt, ast.Name):
        hit = _unpacked(it, tgt, ctx, unpack) if unpack is not None else None
        if hit is not None:
            return (hit,)
        if isinstance(tgt, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in tgt.elts):
            raise Refuse(f"the loop at line {line} unpacks the rows of `{src(it)}`, which calls a function "
                         "autovec does not move out of the loop; name the value first (`rows = ...`), or "
                         "use an attribute (`x.T`)", line)
        raise Refuse(f"the loop at line {line} unpacks each element (`{src(tgt)}`); "
                     "only a plain name, zip(...) or enumerate(...) is supported, or names unpacking "
                     "the rows of a tensor (`for a, b in pairs`, `in pairs.tolist()`)", line)
    if unpack is not None and _tolist_of(it) is not None:
        # `for L in lengths.tolist()`: the elements of `lengths`, each made a Python number as
        # .tolist() makes it (unpack_stmts; a row of several numbers raises in .item(), where
        # .tolist() gives a list: the loop decides)
        ctx.counter[0] += 1
        row = f"_av_row{ctx.counter[0]}"
        unpack.append((row, tgt.id, True))
        return ((row, src(_tolist_of(it))),)
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
    stmts: list                                   # the body, outputs replaced by marker assignments
    outputs: list                                 # (Output, payload) in source order
    assigned: dict                                # name -> first line written in the body
    based: set = field(default_factory=set)       # ids of Name nodes that only name a sliced tensor
    branches: bool = False
    count: list = field(default_factory=lambda: [0])
    seen: dict = field(default_factory=dict)      # output key -> [(branch path, marker)]
    indices: list = field(default_factory=list)   # loop index names (one, or one per nest level)
    items: bool = False                           # the body calls `.item()`
    varying: set = field(default_factory=set)     # iteration variables
    written: set = field(default_factory=set)     # every name bound anywhere in the body
    fresh_stores: set = field(default_factory=set)    # ids of writes into tensors the iteration made (_fresh_stores)
    own_rows: set = field(default_factory=set)        # names of rows an inner loop stores into (_inner_row_stores)
    own_calls: set = field(default_factory=set)       # ids of their in-place method calls (`t.fill_(0)`)
    inner: list = field(default_factory=list)         # inner `for` loops run inside the batched body (_inner_loop)
    inner_branches: bool = False                      # one of them branches on the data or ends early (_predicated)
    top: list | None = None                           # the top-level statements _walk is given

    def marker(self) -> str:
        self.count[0] += 1
        return f"_av_out{self.count[0] - 1}"


def _no_shadowing(scopes: list, outer: list) -> None:
    """Refuse a loop where a comprehension or lambda inside it binds a name (`sum(x[i] for i in
    range(2))` in `for i in ..`) that the loop also uses outside that scope: the name inside is
    another variable, which the analysis, reading names without scopes, would take for the
    loop's (probe, stop 51). `scopes`: the loop's own nodes (body, element, conditions);
    `outer`: those that are the loop's own scope only (its target)."""
    inner, bound = set(), {}
    for root in scopes:
        for n in fastast.walk(root):
            if isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)):
                names = {a.arg for a in fastast.walk(n.args) if isinstance(a, ast.arg)} if isinstance(n, ast.Lambda) \
                    else {t.id for g in n.generators for t in fastast.walk(g.target) if isinstance(t, ast.Name)}
                for name in names:
                    bound.setdefault(name, n.lineno)
                inner |= {id(x) for x in fastast.walk(n)}
    if not bound:
        return
    used = {n.id for root in scopes + outer for n in fastast.walk(root)
            if isinstance(n, ast.Name) and id(n) not in inner}
    hit = sorted(set(bound) & used)
    if hit:
        raise Refuse(f"a comprehension or lambda at line {bound[hit[0]]} binds `{hit[0]}`, a name the loop also "
                     f"uses outside it (inside, it is another variable): the loop runs as written", bound[hit[0]])


def plan_for(node: ast.For, ctx: Context, loop_id: int, space: IterSpace | None = None,
             body_stmts: list | None = None, form: str = "for", anchor=None) -> LoopPlan:
    if node.orelse:
        raise Refuse(f"`for ... else` at line {node.lineno} is not supported", node.lineno)
    _no_shadowing(list(body_stmts if body_stmts is not None else node.body), [node.target])
    space = space or iteration(node, ctx)
    iter_vars = _iter_vars(space)
    stmts = raw = body_stmts if body_stmts is not None else node.body
    if space.unpack:
        stmts = unpack_stmts(space, node.lineno) + list(stmts)
    sites = None
    if form in ("for", "while"):
        stmts, sites = _exit_split(stmts)
    written = list(stmts)    # (the iteration as written, rows unpacked: the stopping one's statements)
    if sites is not None:
        # each condition becomes a body value at its place (every check of the plan applies to it:
        # carried values, calls, slices), the last one whether any site stops the iteration
        # (`_av_exit0 or _av_exit1 or c2`); the runtime finds the first iteration where that holds
        stmts = list(stmts)
        for j, (pos, stop) in enumerate(sites):
            name = EXIT if j == len(sites) - 1 else f"{EXIT}{j}"
            value = stop.test if name != EXIT or not j else ast.copy_location(ast.BoolOp(op=ast.Or(), values=[
                *(ast.copy_location(ast.Name(id=f"{EXIT}{e}", ctx=ast.Load()), stop.test) for e in range(j)),
                stop.test]), stop.test)
            cond = ast.copy_location(ast.Assign(targets=[ast.copy_location(ast.Name(id=name, ctx=ast.Store()), stop)],
                                                value=value), stop)
            ast.fix_missing_locations(cond)
            stmts[pos] = cond
    stmts = _tuple_stores(stmts)
    _no_identity_tests(stmts)
    indices = [k for k, v in iter_vars.items() if v == "index"]
    if indices:     # (in-place methods as the stores they are, so that _forwarded sees them: _classify again)
        stmts = _row_aliases(stmts, indices)
        stmts = _flat([_InPlaceUpdates(indices).visit(fastast.clone(s)) for s in stmts])
    stmts = _forwarded(stmts, iter_vars, ctx)
    stmts = _counted(stmts, anchor or node, ctx)
    saved = [fastast.clone(s) for s in stmts] if len(indices) == 1 and _writes_row_parts(stmts, indices[0]) else None
    # (the statements as they are, for a scatter into the iteration's own row read before it,
    # tried last: _finish's own_rows)
    again = [fastast.clone(s) for s in stmts] if len(indices) == 1 and _own_row_candidate(stmts, indices[0]) \
        else None
    try:
        body = _classify(stmts, ctx, iter_vars)
        plan = _finish(node, ctx, loop_id, form, space, iter_vars, body, anchor or node)
    except Refuse as refused:
        # (a tensor read and written only in the iteration's own row, in parts, which the planner
        # refuses as written: planned again with the row copied, _row_local)
        probe = [_ChainedStores(indices).visit(fastast.clone(s)) for s in saved] if saved is not None else None
        if probe is None or _row_local(probe, indices[0]) is probe:
            plan = None
        else:
            try:
                body = _classify(saved, ctx, iter_vars, row_local=True)
                plan = _finish(node, ctx, loop_id, form, space, iter_vars, body, anchor or node)
                plan = dataclasses.replace(plan, row_copies=True)
            except Refuse:
                plan = None
        if plan is None and again is not None:
            # (a scatter into the iteration's own row, read before it in the iteration, `sc =
            # logits[i, prev[i]]` .. `logits[i, prev[i]] = f(sc)`, where the row copy above does
            # not take it: _own_row_read)
            try:
                plan = _finish(node, ctx, loop_id, form, space, iter_vars, _classify(again, ctx, iter_vars),
                               anchor or node, own_rows_ok=True)
            except Refuse:
                plan = None
        if plan is None:
            # (an `if` / `else` whose sides the planner refuses together: planned again as
            # `if c:` and `if not c:`, from the statements as written, _split_else)
            split = _split_else(raw)
            if split is not None:
                try:
                    return plan_for(node, ctx, loop_id, space, split, form, anchor)
                except Refuse:
                    pass
            raise refused from None
    if sites is not None:
        names = {EXIT} | {f"{EXIT}{j}" for j in range(len(sites) - 1)}
        if names & set(plan.live_after) or any(o.target in names for o in plan.outputs) or plan.scans:
            stop = sites[-1][1]
            raise Refuse(f"the `break` at line {stop.body[-1].lineno} ends the loop early depending on the data",
                         stop.lineno)
        tail = tuple(written[:sites[0][0]]) + _stopping_iteration(written, sites)
        plan = dataclasses.replace(plan, exit_cond=EXIT, exit_tail=tail)
    return plan


EXIT = "_av_exit"

# calls a condition may make for _split_else to evaluate it twice: a tensor's or a number's
# conversions and reductions to its truth, which change nothing
_TRUTH_METHODS = frozenset(("item", "any", "all", "bool", "float", "int", "long", "double", "isnan", "isfinite",
                            "isinf", "abs", "sum", "numel", "dim", "size", "eq", "ne", "lt", "le", "gt", "ge"))


def _split_else(stmts):
    """The statements with each top-level `if c: A else: B` as `if c: A` then `if not c: B`
    (a copy), or None where there is none to split. The same program where evaluating `c`
    again after `A` gives the same truth: `c` binds nothing, calls only conversions and
    reductions of values (_TRUTH_METHODS), and `A` changes no name `c` reads and does not leave
    the iteration, and binds names alone (_binds_only: a store into a view of what `c` reads
    would change it). `not c` is the loop's own truth test negated, as `else`
    takes it. For the planner's second try at an `if` / `else` whose sides read each other's
    running values (`if y[t]: tp += 1` / `else: auc += tp`)."""
    out, changed = [], False
    for s in stmts:
        if isinstance(s, ast.If) and s.orelse and _twice_same(s.test) and _binds_only(s.body) and not (
                nm.stores(ast.Module(body=s.body, type_ignores=[])) & nm.load_ids(s.test)):
            first = ast.copy_location(ast.If(test=fastast.clone(s.test), body=[fastast.clone(b) for b in s.body],
                                             orelse=[]), s)
            neg = ast.copy_location(ast.UnaryOp(op=ast.Not(), operand=fastast.clone(s.test)), s.test)
            second = ast.copy_location(ast.If(test=neg, body=[fastast.clone(b) for b in s.orelse], orelse=[]),
                                       s.orelse[0])
            out += [ast.fix_missing_locations(first), ast.fix_missing_locations(second)]
            changed = True
        else:
            out.append(s)
    return out if changed else None


def _binds_only(stmts) -> bool:
    """Whether `stmts` change nothing but the names they bind (_split_else's first side): no
    store into an element or attribute, no in-place or container-mutating method (through an
    alias the store might reach what the condition reads), no exit, no `global`."""
    for st in stmts:
        for n in fastast.walk(st):
            if isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Raise, ast.Try, ast.With, ast.Yield,
                              ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal, ast.Delete, ast.NamedExpr)):
                return False
            if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)):
                return False
            if isinstance(n, ast.Call) and (isinstance(n.func, ast.Attribute) and (
                    n.func.attr in nm._MUTATORS or n.func.attr.endswith("_") and not n.func.attr.endswith("__"))
                    or nm.in_place_keyword(n) is not None):
                return False
    return True


def _twice_same(test) -> bool:
    """Whether evaluating `test` again gives what it gave (_split_else): it binds nothing and
    calls only _TRUTH_METHODS (on any value) or the builtins int / float / bool / abs / len."""
    for n in fastast.walk(test):
        if isinstance(n, (ast.NamedExpr, ast.Lambda, ast.Await, ast.Yield, ast.YieldFrom, ast.ListComp, ast.SetComp,
                          ast.DictComp, ast.GeneratorExp)):
            return False
        if isinstance(n, ast.Call):
            f = n.func
            if not (isinstance(f, ast.Attribute) and f.attr in _TRUTH_METHODS
                    or isinstance(f, ast.Name) and f.id in ("int", "float", "bool", "abs", "len")):
                return False
    return True


def _exit_split(stmts):
    """(the statements, their `break` sites: _exit_sites), with `if a: ..; break` / `elif b:
    ..; break` chains split into one site each (_unchained) where only that gives sites; the
    statements as given and None where the body has none."""
    sites = _exit_sites(stmts)
    if sites is None and any(isinstance(n, ast.Break) for s in stmts for n in fastast.walk(s)):
        flat = _unchained(stmts)
        flat_sites = _exit_sites(flat)
        if flat_sites is not None:
            return flat, flat_sites
    return stmts, sites


def _exit_sites(stmts):
    """[(position, the `if`), ..] when the body stops at the first iteration where a condition
    holds: top-level `if cond: ...; break`s without `else`, in order, no other `break` or
    `continue`, and nothing before the last that needs the loop (the stopping iteration runs as
    written from the first one on: _stopping_iteration). None otherwise."""
    sites = [(pos, s) for pos, s in enumerate(stmts)
             if isinstance(s, ast.If) and s.body and isinstance(s.body[-1], ast.Break) and not s.orelse]
    if not sites:
        return None
    breaks = [n for s in stmts for n in fastast.walk(s) if isinstance(n, (ast.Break, ast.Continue))]
    if breaks != [stop.body[-1] for _, stop in sites]:
        return None          # another break or continue: the loop as written
    for _, stop in sites:
        for n in fastast.walk(stop.test):
            if isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Lambda)):
                return None
    if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await))
           for s in stmts[:sites[-1][0]] for n in fastast.walk(s)):
        return None
    return sites


def _unchained(stmts) -> list:
    """`if a: ..; break` followed by `elif b: ..; break` (or `else: ..`) is the same as `if a: ..;
    break` then `if b: ..; break` (or the `else`'s statements): the first branch always leaves
    the iteration. The statements with every such chain split so, at every level of `else`."""
    out = []
    for s in stmts:
        while isinstance(s, ast.If) and s.body and isinstance(s.body[-1], ast.Break) and s.orelse:
            out.append(ast.copy_location(ast.If(test=s.test, body=s.body, orelse=[]), s))
            if len(s.orelse) == 1:
                s = s.orelse[0]
            else:
                out.extend(_unchained(s.orelse))
                s = None
                break
        if s is not None:
            out.append(s)
    return out


def _stopping_iteration(written, sites) -> tuple:
    """The stopping iteration's statements from the first site on, as written: each site but the
    last keeps its `if`, whose `else` holds the statements up to the next site; the last site's
    statements run without its condition (the batch found that the iteration stops there)."""
    (pos, stop), rest = sites[0], sites[1:]
    if not rest:
        return tuple(stop.body[:-1])
    orelse = list(written[pos + 1:rest[0][0]]) + list(_stopping_iteration(written, rest))
    node = ast.copy_location(ast.If(test=stop.test, body=list(stop.body[:-1]) or [ast.Pass()],
                                    orelse=orelse), stop)
    return (node,)


def _counter_offset(t, ctx):
    """`k + c < n` (`<=`, `c + k`) as `k < n - c`, and `k - c > n` (`>=`) as `k > n + c`, for
    an int constant `c` (`while i + 1 < len(x): ..; i += 2`, pairs of rows): the same test on
    the ints a counter loop takes (runtime.counter_range checks that they are ints). Else `t`."""
    if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.left, ast.BinOp)) \
            or not _is_builtin(ctx, "int"):
        return t
    e, up = t.left, isinstance(t.ops[0], (ast.Lt, ast.LtE))
    if up and isinstance(e.op, ast.Add):
        k, c = (e.left, e.right) if isinstance(e.left, ast.Name) else (e.right, e.left)
    elif not up and isinstance(e.op, ast.Sub):
        k, c = e.left, e.right
    else:
        return t
    if not (isinstance(k, ast.Name) and isinstance(c, ast.Constant) and type(c.value) is int):
        return t
    # (the bound must be a Python int: `int.__sub__(n, c)`, which raises on anything else, and the
    # loop runs, comparing as written: a uint8 tensor or numpy bound of 0 minus 1 wraps to 255,
    # and the loop's own `k + 1 < n` compares in the bound's dtype; probeJ)
    n = t.comparators[0]
    method = ast.copy_location(ast.Attribute(value=ast.copy_location(ast.Name(id="int", ctx=ast.Load()), n),
                                             attr="__sub__" if up else "__add__", ctx=ast.Load()), n)
    bound = ast.copy_location(ast.Call(func=method, args=[n, ast.copy_location(ast.Constant(c.value), c)],
                                       keywords=[]), n)
    return ast.fix_missing_locations(ast.copy_location(ast.Compare(left=k, ops=t.ops, comparators=[bound]), t))


def plan_while(node: ast.While, ctx: Context, loop_id: int) -> LoopPlan:
    """`k = a; while k < n: ...; k += c` is `for k in range(k, n, c)` followed by the last increment;
    `while k >= n: ...; k -= c` is `for k in range(k, n - 1, -c)`."""
    line = node.lineno
    t = node.test
    if node.orelse:
        raise Refuse(f"`while ... else` at line {line} is not supported", line)
    _no_shadowing(list(node.body), [node.test])
    if isinstance(t, ast.BoolOp) and isinstance(t.op, ast.And) and isinstance(t.values[0], ast.Compare):
        # `while k < n and c:` is `while k < n:` / `if not c: break` first: `c` is computed
        # only where `k < n` holds, as `and` does (a search: `while i < n and x[i] < t: i += 1`)
        rest = t.values[1:]
        cond = rest[0] if len(rest) == 1 else ast.BoolOp(op=ast.And(), values=list(rest))
        stop = ast.fix_missing_locations(ast.copy_location(
            ast.If(test=ast.UnaryOp(op=ast.Not(), operand=cond), body=[ast.Break()], orelse=[]), t))
        whole = [stop] + list(node.body)
        t = t.values[0]
    else:
        whole = list(node.body)
    t = _counter_offset(t, ctx)
    if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.left, ast.Name)
            and isinstance(t.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))):
        raise Refuse(f"`while {src(node.test)}` at line {line} is not a counter loop (`while k < n:` ... `k += 1`, "
                     "or `while k >= 0:` ... `k -= 1`)", line)
    k, bound = t.left.id, t.comparators[0]
    down = isinstance(t.ops[0], (ast.Gt, ast.GtE))     # (`while t >= 0: ...; t -= 1`: a walk backwards)
    op = ast.Sub if down else ast.Add
    last = whole[-1] if whole else None
    step = None
    if isinstance(last, ast.AugAssign) and isinstance(last.op, op) and isinstance(last.target, ast.Name) \
            and last.target.id == k and isinstance(last.value, ast.Constant) and type(last.value.value) is int:
        step = last.value.value
    elif (isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name)
          and last.targets[0].id == k and isinstance(last.value, ast.BinOp) and isinstance(last.value.op, op)
          and isinstance(last.value.left, ast.Name) and last.value.left.id == k
          and isinstance(last.value.right, ast.Constant) and type(last.value.right.value) is int):
        step = last.value.right.value
    if not step or step <= 0:
        raise Refuse(f"the `while` loop at line {line} does not end with `{k} {'-' if down else '+'}= <positive "
                     "constant>`", line)
    body = whole[:-1]
    _, sites = _exit_split(body)      # top-level `if cond: ...; break`s: as in a `for` loop
    exits = {id(stop.body[-1]) for _, stop in sites or ()}
    for n in fastast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in ({k} | nm.load_ids(bound)):
            raise Refuse(f"`{n.id}` changes inside the `while` loop at line {n.lineno}", n.lineno)
        if isinstance(n, (ast.Continue, ast.Break)) and id(n) not in exits:
            raise Refuse(f"`{'continue' if isinstance(n, ast.Continue) else 'break'}` in the `while` loop at "
                         f"line {n.lineno}", n.lineno)
    if not _pure_expr(bound):
        raise Refuse(f"the bound `{src(bound)}` of the `while` loop at line {line} calls a function", line)
    if isinstance(t.ops[0], (ast.Lt, ast.Gt)):
        stop = src(bound)
    else:
        stop = f"({src(bound)}) - 1" if down else f"({src(bound)}) + 1"
    space = IterSpace("range", (k, stop, str(-step if down else step)), index=k)
    fake = ast.For(target=ast.Name(id=k, ctx=ast.Store()), iter=bound, body=body, orelse=[],
                   lineno=line, col_offset=node.col_offset, end_lineno=node.end_lineno)
    plan = plan_for(fake, ctx, loop_id, space=space, body_stmts=body, form="while", anchor=node)
    # the counter is one step past the last iteration after the loop
    live = tuple(v for v in plan.live_after if v != k)
    if nm.read_after(ctx.fn, ctx.parent, node, k) is not None or k in ctx.cellvars:
        live = live + (k,)
    import dataclasses as _dc
    return _dc.replace(plan, live_after=live, source=src(node), end_lineno=node.end_lineno)


def plan_comprehension(comp: ast.ListComp, consumer: str, consumer_node: ast.AST,
                       ctx: Context, loop_id: int) -> LoopPlan:
    line = comp.lineno
    if len(comp.generators) != 1:
        raise Refuse(f"the comprehension at line {line} has several `for` clauses", line)
    gen = comp.generators[0]
    if gen.is_async:
        raise Refuse(f"the comprehension at line {line} is asynchronous", line)
    _no_identity_tests([comp.elt, *gen.ifs])
    _no_shadowing([comp.elt, *gen.ifs], [gen.target])
    space = iteration(ast.For(target=gen.target, iter=gen.iter, body=[], orelse=[], lineno=line), ctx)
    iter_vars = _iter_vars(space)
    # `for a, b in pairs`: the statements unpacking each row come first, as in a for loop
    body = _classify(unpack_stmts(space, line), ctx, iter_vars) if space.unpack else _Body([], [], {})
    elt = _operator_spellings([comp.elt], ctx)[0]
    ifs = _operator_spellings(list(gen.ifs), ctx)
    if space.index:   # `x[i:i + 1]` reads as `x[i].unsqueeze(0)`, as in a for loop
        elt = _UnitSlices(space.index).visit(fastast.clone(elt))
    value, pytype = _strip_item(elt)
    body.written = body.written | set(iter_vars)
    parts = _record(elt, body) if consumer == "list" else None
    if parts is not None:
        # `[(i, v.item()) for ...]`: one batch per changing part of the literal
        at = _located(ast.Expr(value=elt), line)
        stmts = _record_outputs(Output("append", "", src(elt), line, consumer=consumer,
                                       consumer_src=src(consumer_node)), parts, at, body, int(bool(gen.ifs)))
    else:
        marker = body.marker()
        stmts = [_located(ast.Assign(targets=[ast.Name(id=marker, ctx=ast.Store())], value=value), line)]
    for cond in reversed(ifs):
        stmts = [_located(ast.If(test=cond, body=stmts, orelse=[]), line)]
    # a filter, or `a if c else b` as the element (as in a for loop's appended value): the
    # where strategy converts a condition on per-element data (lowering/ifconvert.py)
    body.branches = body.branches or bool(gen.ifs) or any(isinstance(n, ast.IfExp) for n in fastast.walk(elt))
    body.stmts = body.stmts + stmts
    if parts is None:
        out = Output("append", "", src(value), line, consumer=consumer, consumer_src=src(consumer_node),
                     marker=marker, cond=bool(gen.ifs), pytype=pytype)
        body.outputs.append((out, value))
    return _finish(comp, ctx, loop_id, "comprehension", space, iter_vars, body)


def _no_identity_tests(nodes) -> None:
    """Refuse `a is b` / `a is not b` where neither side is a constant (`x is None` stays): the
    batch computes new objects, never the ones the loop compares (under vmap, `row is z` is
    False on every row where the loop finds some rows are z)."""
    for node in nodes:
        for n in fastast.walk(node):
            if not isinstance(n, ast.Compare):
                continue
            sides = [n.left, *n.comparators]
            for k, op in enumerate(n.ops):
                if isinstance(op, (ast.Is, ast.IsNot)) and not any(
                        isinstance(x, ast.Constant) for x in sides[k:k + 2]):
                    raise Refuse(f"`{src(n)}` at line {n.lineno} compares objects by identity: the batch's values "
                                 "are new objects, never the loop's", n.lineno)


def _iter_vars(space: IterSpace) -> dict[str, str]:
    out = {t: "element" for t, _ in space.elements}
    if space.index:
        out[space.index] = "index"
    return out


def _record(value: ast.AST, body: "_Body"):
    """`(i, v.item())`, `[a, b]`, `{"idx": i, "loss": l.item()}`, nested: a literal whose parts
    that change per iteration are appended each as their own batch and put back together per
    element. Returns (the literal's source with those parts as `_av_c0`.., the parts), or None.
    Constants and names the body never binds stay in the literal: the loop evaluates them to
    the same object in every iteration."""
    if not isinstance(value, (ast.Tuple, ast.List, ast.Dict)):
        return None
    parts: list = []

    def visit(node):
        if isinstance(node, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return None
            elts = [visit(e) for e in node.elts]
            return None if None in elts else type(node)(elts=elts, ctx=ast.Load())
        if isinstance(node, ast.Dict):
            if any(k is None or not isinstance(k, ast.Constant) for k in node.keys):
                return None     # (`**d`, or keys computed per iteration)
            vals = [visit(v) for v in node.values]
            return None if None in vals else ast.Dict(keys=[fastast.clone(k) for k in node.keys], values=vals)
        if isinstance(node, ast.Constant) or isinstance(node, ast.Name) and node.id not in body.written:
            return fastast.clone(node)
        parts.append(node)
        return ast.Name(id=f"_av_c{len(parts) - 1}", ctx=ast.Load())

    shape = visit(value)
    if shape is None or not parts:
        return None
    return src(shape), parts


def _record_outputs(o: Output, parts, s: ast.stmt, body: "_Body", depth: int) -> list:
    """One append per changing part of an appended literal (_record), each assigned to its marker."""
    shape, values = parts
    out = []
    for j, part in enumerate(values):
        value, pytype = _strip_item(part)
        marker = body.marker()
        body.outputs.append((dataclasses.replace(o, marker=marker, cond=depth > 0, pytype=pytype, value=src(value),
                                                 record=(shape, j, len(values))), value))
        out.append(_located(ast.copy_location(ast.Assign(targets=[ast.Name(id=marker, ctx=ast.Store())],
                                                         value=value), s), s.lineno))
        if any(isinstance(n, ast.IfExp) for n in fastast.walk(value)):
            body.branches = True
    return out


def block_of(node: ast.AST, ctx: Context):
    """The statement list holding `node` (a body, else or finally block), or None."""
    up = ctx.parent.get(node)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(up, field, None)
        if isinstance(block, list) and node in block:
            return block
    return None


def _int_constant(n) -> bool:
    return isinstance(n, ast.Constant) and type(n.value) is int


# calls whose result is new memory, never their tensor argument nor a view of it: a row read
# back after its store (_forwarded) may be their argument (`out[i] = out[i] / out[i].norm()`)
_NEW_MEMORY_CALLS = frozenset((
    "sum", "mean", "norm", "std", "var", "prod", "amax", "amin", "max", "min", "abs", "exp", "log",
    "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "gelu", "silu",
    "softplus", "clamp", "clip", "pow", "square", "neg", "sin", "cos", "floor", "ceil", "round", "trunc",
    "sign", "softmax", "log_softmax", "logsumexp", "clone", "dot", "matmul", "mv", "mm", "outer",
    "cumsum", "cumprod", "maximum", "minimum", "where", "normalize", "item", "tolist", "argmax",
    "argmin", "all", "any", "isnan", "isfinite", "nan_to_num", "reciprocal", "erf", "logical_not",
    # (new tensors, one or a named tuple of them: `v, _ = torch.topk(x[i], k)` before `x[i][m] = ..`)
    "topk", "sort", "argsort", "kthvalue", "median", "nanmedian", "mode", "quantile", "nanquantile",
    "cummax", "cummin", "logcumsumexp", "nansum", "nanmean", "count_nonzero", "std_mean", "var_mean",
    "flip", "fliplr", "flipud", "roll",
    # (copies at the positions an index gives: `torch.gather(x[b], 0, idx[b])` before `x[b].scatter_(..)`)
    "gather", "index_select", "take", "take_along_dim", "masked_select", "tril", "triu",
    # (tensors shaped like it, read for its shape and dtype alone: `torch.ones_like(x[b]) * s[b]`)
    "ones_like", "zeros_like", "full_like", "empty_like",
    # (more elementwise results of one tensor; not the out-of-place twins of the in-place updates,
    # `add`, `mul`: `ms[i].mul_(b).add_(g)` stays the in-place chain the foreach form takes)
    "clamp_min", "clamp_max", "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh",
    "atanh", "exp2", "frac", "logit", "leaky_relu", "elu", "selu", "hardtanh", "softsign", "logsigmoid",
))


def _flat(stmts: list) -> list:
    """Statements, where a transformer gave a list for one of them, in one list."""
    out = []
    for st in stmts:
        out.extend(st if isinstance(st, list) else [st])
    return out


class _TupleStores(ast.NodeTransformer):
    """`v[i], ix[i] = torch.topk(x[i], 2)`: a tuple of targets with a subscript among them reads
    as the unpacking into names of its own, then each target assigned its name in order
    (`_av_u0, _av_u1 = ..; v[i] = _av_u0; ix[i] = _av_u1`), which is what Python does: the value
    first, unpacked (a ValueError where its length differs), then the targets left to right. Not
    with a starred or nested target."""

    def visit_Assign(self, node):
        if len(node.targets) != 1 or not isinstance(node.targets[0], (ast.Tuple, ast.List)):
            return node
        elts = node.targets[0].elts
        if not any(isinstance(e, ast.Subscript) for e in elts) or not all(
                isinstance(e, (ast.Name, ast.Subscript)) for e in elts):
            return node
        names = [f"_av_u{node.lineno}_{node.col_offset}_{k}" for k in range(len(elts))]
        unpack = ast.Assign(targets=[ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Store()) for n in names], ctx=ast.Store())],
                            value=node.value)
        out = [unpack] + [ast.Assign(targets=[e], value=ast.Name(id=n, ctx=ast.Load())) for e, n in zip(elts, names)]
        return [ast.fix_missing_locations(ast.copy_location(st, node)) for st in out]


class _TolistUnpacks(ast.NodeTransformer):
    """`y, x = offs[i].tolist()`: the row's elements as Python numbers, read as `y, x =
    offs[i].unbind(0)` then `y = y.item()`, `x = x.item()` (what `.tolist()` gives for a 1-D
    tensor, exactly). Where the row is no 1-D tensor, the batch raises (`.unbind` of a 0-d
    tensor or a list, `.item()` of a row of a matrix, an unpacking of another length) and the
    loop runs, with its own error or its lists."""

    def visit_Assign(self, node):
        row = _tolist_of(node.value)     # (a name, attribute or subscript read without calls)
        if not (row is not None and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)
                and node.targets[0].elts and all(isinstance(e, ast.Name) for e in node.targets[0].elts)
                and len({e.id for e in node.targets[0].elts}) == len(node.targets[0].elts)):
            return node
        names = [e.id for e in node.targets[0].elts]
        unbind = ast.Assign(targets=[fastast.clone(node.targets[0])], value=ast.Call(
            func=ast.Attribute(value=row, attr="unbind", ctx=ast.Load()), args=[ast.Constant(0)], keywords=[]))
        items = [ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())], value=ast.Call(
            func=ast.Attribute(value=ast.Name(id=n, ctx=ast.Load()), attr="item", ctx=ast.Load()), args=[], keywords=[]))
            for n in names]
        return [ast.fix_missing_locations(ast.copy_location(st, node)) for st in [unbind] + items]


def _tuple_stores(stmts: list) -> list:
    """_TupleStores, then _TolistUnpacks, over the statements (and the blocks inside them)."""
    split = _flat([_TupleStores().visit(fastast.clone(st)) for st in stmts])
    return _flat([_TolistUnpacks().visit(st) for st in split])


def _forwarded(stmts: list, iter_vars, ctx: Context) -> list:
    """A row stored and then read back, or stored again, in the same iteration (`out[i] = v`
    then `y[i] = out[i] + 1`, `out[i] += b`, `out[i] = torch.relu(out[i])`): each stored value
    gets a name of its own, the later reads read that name, an update `out[i] op= e` becomes
    `name = <the current value> op e`, and every value still goes to the row, in the loop's
    order. A store whose value is read back (or an update's) is marked `_av_exact`: the read
    gives the stored value only where it already has the row's dtype and shape (setitem casts and
    broadcasts, an in-place update raises instead of changing the dtype), which the runtime
    checks on every call (Output.exact; elsewhere the loop runs). For the batched path only: the
    loop as written stays the fallback.

    Only where it is plain: one tensor name `T` subscripted by one and the same index in the whole
    body, of loop variables and names the body never binds; its stores and reads in top-level
    statements; no other use of `T`; and each read after a store an operand of an operator, a
    call that makes new memory (_NEW_MEMORY_CALLS) or the value of a store into a subscript (a
    copy): never bound to a name as it is, appended or taken as a view, which would be the row's
    memory in the loop. Anything else leaves the statements as they are."""
    written = set()
    for st in stmts:
        written |= nm.stores(st)
    out = list(stmts)
    for name in sorted(_forward_candidates(stmts, iter_vars, written)):
        out = _forward_one(out, name, ctx) or out
    return out


def _forward_candidates(stmts, iter_vars, written):
    """Names subscripted by one index everywhere, stored into and then read or stored again."""
    subs: dict = {}
    for st in stmts:
        for n in fastast.walk(st):
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name):
                subs.setdefault(n.value.id, set()).add(ast.dump(n.slice))
    found = []
    for name, slices in subs.items():
        if len(slices) != 1 or name in iter_vars:
            continue
        sl = next(n for st in stmts for n in fastast.walk(st) if isinstance(n, ast.Subscript)
                  and isinstance(n.value, ast.Name) and n.value.id == name).slice
        if any(isinstance(n, (ast.Call, ast.NamedExpr, ast.Lambda)) for n in fastast.walk(sl)):
            continue
        if any(i not in iter_vars and i in written for i in nm.load_ids(sl)) or name in written:
            continue
        if not any(i in iter_vars for i in nm.load_ids(sl)):
            continue        # (the same row in every iteration: a carried value, as written)
        found.append(name)
    return found


def _forward_one(stmts, name, ctx: Context):
    """_forwarded for one name; None where its uses are not plain."""
    def is_row(n):
        return isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == name

    def row_nodes(st):
        return [n for n in fastast.walk(st) if is_row(n)]

    def uses(st):
        return [n for n in fastast.walk(st) if isinstance(n, ast.Name) and n.id == name]

    def stores_row(st):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and is_row(st.targets[0]):
            return True
        return isinstance(st, ast.AugAssign) and is_row(st.target) and type(st.op) in _STORE_OPS

    touched = [k for k, st in enumerate(stmts) if uses(st)]
    for k in touched:
        st = stmts[k]
        if len(uses(st)) != len(row_nodes(st)):
            return None         # `T` itself, not its row (`T.shape`, `f(T)`)
        if not isinstance(st, (ast.Assign, ast.AugAssign, ast.Expr)):
            return None         # (an `if`, a nested block: the loop as written)
        for n in fastast.walk(st):
            if isinstance(n, (ast.Assign, ast.AugAssign)) and n is not st:
                return None
        if isinstance(st, (ast.Assign, ast.AugAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            if any(is_row(t) for t in targets) and not stores_row(st):
                return None     # (`T[i] = y[i] = v`, `T[i] //= v`)
    stores = [k for k in touched if stores_row(stmts[k])]
    if not stores:
        return None
    first_st = stmts[stores[0]]
    # (`x[i] -= x[i].mean()`: an update whose value reads the row is that row's value `op` the
    # value, as a store: the in-place update reads the row before it writes it)
    reads_itself = isinstance(first_st, ast.AugAssign) and any(is_row(n) for n in fastast.walk(first_st.value))
    if not reads_itself and not any(k > stores[0] for k in touched):
        return None             # no row read back or stored again: nothing to forward
    parents = {}
    for st in stmts:
        for n in fastast.walk(st):
            for c in ast.iter_child_nodes(n):
                parents[id(c)] = n
    if reads_itself and not all(_makes_new_memory(parents.get(id(r)), r, parents, ctx)
                                for r in fastast.walk(first_st.value) if is_row(r)):
        # (`x[i] -= x[i][0]`: the update reads a view of the row it writes in place, which the
        # loop's operation refuses or meets part-way; as `x[i] - x[i][0]` it would not)
        return None

    def plain_read(r, st):
        p = parents.get(id(r))
        if _makes_new_memory(p, r, parents, ctx):
            return True
        # the whole value of a store into a subscript, or of an update of one: a copy
        if p is st and isinstance(st, (ast.Assign, ast.AugAssign)) and st.value is r:
            return isinstance(st.targets[0] if isinstance(st, ast.Assign) else st.target, ast.Subscript)
        return False

    first = stores[0]
    for k in touched:
        if k <= first:
            continue
        st = stmts[k]
        reads = [r for r in row_nodes(st) if isinstance(r.ctx, ast.Load)]
        if isinstance(st, ast.AugAssign) and is_row(st.target):
            reads = [r for r in reads if r is not st.target]
        if not all(plain_read(r, st) for r in reads):
            return None
    out = list(stmts[:first])
    current = None              # the name holding the row's value after the last store
    made = []                   # (store statement, its value's name) in order
    count = 0
    read_after = set()          # names read back by a later statement

    class Reads(ast.NodeTransformer):
        def visit_Subscript(self, n):
            if is_row(n) and isinstance(n.ctx, ast.Load) and current is not None:
                read_after.add(current)
                return ast.copy_location(ast.Name(id=current, ctx=ast.Load()), n)
            return self.generic_visit(n)

    for k in range(first, len(stmts)):
        st = stmts[k]
        if k not in touched:
            out.append(st)
            continue
        st = fastast.clone(st)
        if stores_row(st):
            if isinstance(st, ast.AugAssign):
                left = ast.Name(id=current, ctx=ast.Load()) if current is not None else \
                    fastast.clone(st.target)
                if current is not None:
                    read_after.add(current)
                else:
                    left.ctx = ast.Load()
                value = ast.BinOp(left=left, op=st.op, right=Reads().visit(st.value))
                update = True
            else:
                value = Reads().visit(st.value)
                update = False
            target = st.target if isinstance(st, ast.AugAssign) else st.targets[0]
            current = f"_av_fwd_{name}{count}"
            count += 1
            bind = ast.copy_location(ast.Assign(targets=[ast.Name(id=current, ctx=ast.Store())], value=value), st)
            store = ast.copy_location(ast.Assign(targets=[fastast.clone(target)], value=ast.Name(
                id=current, ctx=ast.Load())), st)
            store.targets[0].ctx = ast.Store()
            if getattr(st, "_av_method", ""):
                store._av_method = st._av_method     # (an in-place method's store: its checks too)
            made.append((store, current, update))
            out += [ast.fix_missing_locations(bind), ast.fix_missing_locations(store)]
        else:
            out.append(ast.fix_missing_locations(Reads().visit(st)))
    for store, value, update in made:
        if update or value in read_after:
            store._av_exact = True
    return out


def _truth_flag(test: ast.expr) -> ast.expr:
    """`int(bool(test))`, with `and` / `or` / `not` taken apart into their operands' flags
    (`a and b`: `int(bool(a)) * int(bool(b))`; `a or b`: `1 - (1 - int(bool(a))) * (1 -
    int(bool(b)))`; `not a`: `1 - int(bool(a))`), which the batched body computes where a
    `BoolOp` value has no form. The truth is the same; an operand Python would skip is computed
    too, and where it raises the loop runs (its value cannot change the flag: a factor of 0, or
    of 1 taken from 1)."""
    def one(v):
        return ast.BinOp(left=ast.Constant(1), op=ast.Sub(), right=v)
    if isinstance(test, ast.BoolOp):
        flags = [_truth_flag(v) for v in test.values]
        if isinstance(test.op, ast.And):
            out = flags[0]
            for f in flags[1:]:
                out = ast.BinOp(left=out, op=ast.Mult(), right=f)
            return out
        out = one(flags[0])
        for f in flags[1:]:
            out = ast.BinOp(left=out, op=ast.Mult(), right=one(f))
        return one(out)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return one(_truth_flag(test.operand))
    return ast.Call(func=ast.Name(id="int", ctx=ast.Load()), keywords=[],
                    args=[ast.Call(func=ast.Name(id="bool", ctx=ast.Load()), args=[test], keywords=[])])


def _counted(stmts: list, loop: ast.AST, ctx: Context) -> list:
    """`if c: k += K` (or `k -= K`, `k = k + K`, `k = K + k`, `k = k - K`) where the loop reads
    `k`, `k` starts as an int literal before it (`k = 0`, or `0.0`) and `K` does not change in
    the loop (a literal, or a name the loop never binds) or is each iteration's own (`x[t]`, an
    expression of what the `if` does not bind): `k += K * int(bool(c))`, so a count read in the
    loop (`ids[i] = k`) is a running sum of K or 0 at every step (a scan).

    An int literal K keeps `k` a Python int at every step, as the `if` does. Any other K (a
    float, a tensor, a name) gives `k` the type of `k + K` from its first increment on and
    leaves it the starting int before: the Output is marked `counted`, and the scan runs only
    where that type cannot change during the loop (runtime.prefix: Python-int steps, or a first
    iteration that increments and finite steps)."""
    bound = nm.stores(loop.target) if isinstance(getattr(loop, "target", None), ast.AST) else set()
    writes = set().union(bound, *map(nm.stores, stmts))

    def update_at(st):
        """The position of the update in the `if`'s body: the first statement that updates a name
        by `+`/`-` (an augmented or a plain assignment, as `step` reads it)."""
        for j, u in enumerate(st.body):
            if isinstance(u, ast.AugAssign) and isinstance(u.target, ast.Name) \
                    and isinstance(u.op, (ast.Add, ast.Sub)):
                return j
            if isinstance(u, ast.Assign) and len(u.targets) == 1 and isinstance(u.targets[0], ast.Name) \
                    and isinstance(u.value, ast.BinOp) and isinstance(u.value.op, (ast.Add, ast.Sub)) \
                    and u.targets[0].id in nm.load_ids(u.value):
                return j
        return None

    def step(st):
        """(k, the increment, op) of `if c: <update of k by a loop-invariant increment>` (with, in
        the same `if`, statements before it that may read the old `k`, `idx[i] = k`, and after it
        statements that may read the new one, `pos[t] = k`), else None."""
        if not (isinstance(st, ast.If) and not st.orelse and st.body):
            return None
        j = update_at(st)
        if j is None:
            return None
        u = st.body[j]
        if isinstance(u, ast.AugAssign) and isinstance(u.target, ast.Name) and isinstance(u.op, (ast.Add, ast.Sub)):
            k, inc, op = u.target.id, u.value, u.op
        elif isinstance(u, ast.Assign) and len(u.targets) == 1 and isinstance(u.targets[0], ast.Name) \
                and isinstance(u.value, ast.BinOp) and isinstance(u.value.op, (ast.Add, ast.Sub)):
            k, left, right, op = u.targets[0].id, u.value.left, u.value.right, u.value.op
            if isinstance(left, ast.Name) and left.id == k:
                inc = right
            elif isinstance(op, ast.Add) and isinstance(right, ast.Name) and right.id == k:
                inc = left      # (`K + k`: the same sum for numbers and tensors)
            else:
                return None
        else:
            return None
        others = st.body[:j] + st.body[j + 1:]
        if others and (k in nm.load_ids(st.test) or any(
                isinstance(n, (ast.Break, ast.Continue, ast.Return)) for r in others for n in fastast.walk(r))
                or not all(isinstance(r, (ast.Assign, ast.AugAssign, ast.Expr)) for r in others)):
            return None     # (the rest, simple statements, runs under the test again: `c` must not change in between)
        if j and nm.mutated(ast.Module(body=st.body[:j], type_ignores=[])) & nm.load_ids(st.test):
            # (the update's `bool(c)` is computed after the statements before it: they must not
            # change what the test reads, `if m[i]: m[i] = 0; k += 1`)
            return None
        if _int_constant(inc) or isinstance(inc, ast.Constant) and type(inc.value) is float \
                or isinstance(inc, ast.Name) and inc.id not in writes and inc.id != k:
            return k, inc, op
        if k not in nm.load_ids(inc) and not (nm.load_ids(inc) & nm.stores(ast.Module(body=st.body, type_ignores=[]))) \
                and not nm.mutated(inc) and not any(isinstance(n, (ast.NamedExpr, ast.Lambda, ast.ListComp,
                                                                   ast.SetComp, ast.DictComp, ast.GeneratorExp))
                                                    for n in fastast.walk(inc)):
            # (an increment of each iteration's own, `if m[t]: s += x[t]`: `x[t] * int(bool(c))`,
            # which the runtime takes only where the steps are finite and keep the count's type,
            # runtime._counted_types; what it reads the `if` does not bind)
            return k, inc, op
        return None

    def counter(st):
        found = step(st)
        return found[0] if found is not None else None
    names = {counter(st) for st in stmts} - {None}
    if not names or not (ctx.env.is_builtin("int") and ctx.env.is_builtin("bool")) \
            or {"int", "bool"} & set(ctx.local_names):
        return stmts
    block = block_of(loop, ctx)
    keep = set()
    for k in names:
        stores = sum(1 for st in stmts for n in fastast.walk(st)
                     if isinstance(n, ast.Name) and n.id == k and not isinstance(n.ctx, ast.Load))
        reads = any(isinstance(n, ast.Name) and n.id == k and isinstance(n.ctx, ast.Load)
                    for st in stmts for n in fastast.walk(st) if counter(st) != k) or any(
            isinstance(n, ast.Name) and n.id == k and isinstance(n.ctx, ast.Load)
            for st in stmts if counter(st) == k
            for part in [st.test] + st.body[:update_at(st)] + st.body[update_at(st) + 1:] for n in fastast.walk(part))
        init = None
        for st in reversed(block[:block.index(loop)] if block is not None else []):
            if k in nm.stores(st):
                init = st
                break
        start = _start_value(init, k)
        if stores == 1 and reads and start is not None and (_int_constant(start) or isinstance(
                start, ast.Constant) and type(start.value) is float and start.value == 0):
            keep.add(k)
    out = []
    for st in stmts:
        if counter(st) in keep:
            k, inc, op = step(st)
            # `K * int(bool(c))`: K or 0, as the `if` adds it (`bool` as `if` tests)
            # (a copy of the test: the `if`s around keep the node itself)
            value = ast.BinOp(left=fastast.clone(inc), op=ast.Mult(), right=_truth_flag(fastast.clone(st.test)))
            if isinstance(inc, ast.Constant):
                value.av_count = True      # (a Python number either way: _strip_item)
            invariant = isinstance(inc, ast.Constant) or isinstance(inc, ast.Name) and inc.id not in writes
            if not _int_constant(inc):
                # (the type may change at the first increment: Output.counted, the increment's
                # source where it is the same on every iteration, else "None")
                value.av_counted = src(inc) if invariant else "None"
            target = ast.Name(id=k, ctx=ast.Store())
            j = update_at(st)
            # (each iteration's own increments count only as Python numbers, runtime._counted_types,
            # for which `k += v` is `k = k + v`: no tensor updated in place to alias)
            if isinstance(st.body[j], ast.AugAssign) and invariant:
                new = ast.AugAssign(target=target, op=op, value=value)
            else:
                new = ast.Assign(targets=[target], value=ast.BinOp(left=ast.Name(id=k, ctx=ast.Load()), op=op,
                                                                   right=value))
            before, rest = st.body[:j], st.body[j + 1:]
            if before:
                # `if c: idx[i] = k; k += K` as `if c: idx[i] = k` then `k += K * int(bool(c))`: the
                # statements before the update read the count before it (an exclusive scan), the
                # test again after them (they do not change what it reads: step)
                pre = ast.copy_location(ast.If(test=st.test, body=before, orelse=[]), st)
                pre.end_lineno, pre.end_col_offset = before[-1].end_lineno, before[-1].end_col_offset
                out.append(ast.fix_missing_locations(pre))
            if before or rest:
                # `if c: k += K; pos[t] = k` as `k += K * int(bool(c))` then `if c: pos[t] = k`:
                # the test again (pure, and it does not read `k`), the rest after the update
                out.append(ast.fix_missing_locations(ast.copy_location(new, st.body[j])))
                if not rest:
                    continue
                new = ast.If(test=fastast.clone(st.test), body=rest, orelse=[])
            st = ast.fix_missing_locations(ast.copy_location(new, st))
        out.append(st)
    return out


def _start_value(init, k):
    """The value the statement `init` binds to the name `k`: `k = v`, or its place in `a, k = u, v`
    (a tuple of names bound to a tuple of as many values); else None."""
    if not (isinstance(init, ast.Assign) and len(init.targets) == 1):
        return None
    t, v = init.targets[0], init.value
    if isinstance(t, ast.Name):
        return v if t.id == k else None
    if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts) \
            and all(isinstance(e, ast.Name) for e in t.elts) and not any(isinstance(e, ast.Starred) for e in v.elts):
        names = [e.id for e in t.elts]
        if names.count(k) == 1:
            return v.elts[names.index(k)]
    return None


def _strip_item(value: ast.AST) -> tuple[ast.AST, str]:
    """`t.item()` (a Python number in the loop) is computed as the tensor `t` and converted back."""
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "item"
            and not value.args and not value.keywords):
        return value.func.value, "item"
    if isinstance(value, ast.Constant) and isinstance(value.value, (int, float, bool)):
        return value, "const"
    if isinstance(value, (ast.BinOp, ast.UnaryOp)) and all(
            isinstance(n, (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)) or isinstance(n, ast.Constant)
            and type(n.value) in (int, float, bool) for n in fastast.walk(value)):
        return value, "const"      # (`3 + 3`, `-0.5`: Python's arithmetic of numbers, a number; probeV)
    if getattr(value, "av_count", False):
        return value, "const"       # (`K * int(bool(c))` made by _counted: a Python number either way)
    return value, ""


# torch functions and tensor methods whose result is floating (or complex) whatever their input's dtype
_FLOAT_RESULTS = frozenset({"sqrt", "rsqrt", "log", "log1p", "log2", "log10", "exp", "expm1", "exp2", "sigmoid", "tanh",
                            "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "erf", "erfc", "softmax",
                            "log_softmax", "mean", "float", "double", "logsumexp", "softplus", "gelu", "silu", "elu",
                            "logit"})
# torch functions and tensor methods whose result has their (first) input's dtype, called without
# a dtype (no keyword and no dtype argument: `x.sum(dtype=torch.uint8)`, `x.view(torch.int16)`)
_SAME_DTYPE = frozenset({"sum", "abs", "neg", "clamp", "clip", "relu", "square", "amax", "amin", "prod", "cumsum",
                         "flatten", "reshape", "squeeze", "unsqueeze", "t", "contiguous", "clone", "detach"})
_TORCH_NAMESPACES = ("torch", "F")


def _small_number(e: ast.AST) -> bool:
    """A constant term whose negation the batch's int64 holds as Python does (within 2**62)."""
    v = getattr(e, "value", None)
    return not isinstance(v, int) or isinstance(v, bool) or abs(v) < 2 ** 62


def _floaty(e: ast.AST) -> bool:
    """Whether an expression's value is floating (or complex) whatever the dtypes of the tensors
    it reads: a float constant, a true division, one of torch's functions (`torch.x`, `F.x`) or a
    tensor method (on a value computed in the expression, not a name that could be any object)
    whose result is floating, or an operation with such an operand (int and float promote to
    float). Conservative: a call with a dtype or out keyword, a name the user may have rebound,
    a method of a name or of a value a user's function returns (any object's: `h.mean(v)`,
    `stats().mean(v)`), or a method with arguments other than constants is not."""
    if isinstance(e, ast.Constant):
        return isinstance(e.value, (float, complex))
    if isinstance(e, ast.UnaryOp):
        return _floaty(e.operand)
    if isinstance(e, ast.Subscript):
        return _floaty(e.value)      # (indexing keeps the dtype)
    if isinstance(e, ast.BinOp):
        return isinstance(e.op, ast.Div) or (isinstance(e.op, (ast.Add, ast.Sub, ast.Mult, ast.Pow))
                                             and (_floaty(e.left) or _floaty(e.right)))
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) \
            and not any(k.arg in (None, "dtype", "out") for k in e.keywords):
        f = e.func
        torch_fn = isinstance(f.value, ast.Name) and f.value.id in _TORCH_NAMESPACES
        if not torch_fn:
            recv = f.value
            if isinstance(recv, ast.Name) or isinstance(recv, ast.Call) and isinstance(recv.func, ast.Name):
                return False     # (a method of a name, or of what a user's function returns: any object's)
            if not all(isinstance(a, ast.Constant) for a in e.args):
                return False     # (a dtype or a value as an argument: `x.view(torch.int16)`)
        if f.attr in _FLOAT_RESULTS:
            return True
        if f.attr in _SAME_DTYPE:
            inner = e.args[0] if torch_fn and e.args else (None if torch_fn else f.value)
            return inner is not None and _floaty(inner)
    return False


def _twin(seen: list, path) -> str | None:
    """The marker of an output of the same kind and target on another side of a branch (one
    value per iteration, whichever side runs), where no output on this side has it already:
    two updates on one side (`cnt += 1` twice) are two values, never one marker written twice."""
    for p, m in seen:
        if _exclusive(p, path) and not any(m2 == m and not _exclusive(p2, path) for p2, m2 in seen):
            return m
    return None


def _normalize_continue(stmts: list[ast.stmt], budget: list) -> list[ast.stmt]:
    """`if c: ...; continue` followed by `rest` becomes `if c: ... else: rest`. `budget`: how
    many more nodes copies may add (each nested `continue` copies what follows its branch into
    both sides: many of them one after another would double the body each time)."""
    out = []
    for pos, s in enumerate(stmts):
        if isinstance(s, ast.If):
            body, orelse = s.body, s.orelse
            rest = stmts[pos + 1:]
            if body and isinstance(body[-1], ast.Continue) and not _has_continue(orelse):
                new = ast.copy_location(ast.If(test=s.test, body=body[:-1] or [ast.Pass()], orelse=orelse + rest), s)
                out.append(_normalize_if(new, budget))
                return out
            if orelse and isinstance(orelse[-1], ast.Continue) and not _has_continue(body):
                new = ast.copy_location(ast.If(test=s.test, body=body + rest, orelse=orelse[:-1]), s)
                out.append(_normalize_if(new, budget))
                return out
            if rest and (_has_continue(body) or _has_continue(orelse)):
                budget[0] -= sum(1 for r in rest for _ in fastast.walk(r))
                if budget[0] < 0:
                    raise Refuse(f"`continue` nested in many branches one after another (line {s.lineno}): the "
                                 "loop runs as written", s.lineno)
                # a `continue` deeper in a side skips `rest` too: `rest` goes into both sides,
                # after each (the same iterations run it), where that `continue` is normalized
                # with all of what it skips (it was normalized with its own block's rest alone,
                # and `rest` then ran on the iterations it skips)
                new = ast.copy_location(ast.If(test=s.test, body=body + fastast.clone(rest), orelse=orelse + rest), s)
                out.append(_normalize_if(new, budget))
                return out
            out.append(ast.copy_location(_normalize_if(s, budget), s))
            continue
        out.append(s)
    return out


def _normalize_if(s: ast.If, budget: list) -> ast.If:
    return ast.If(test=s.test, body=_normalize_continue(s.body, budget), orelse=_normalize_continue(s.orelse, budget),
                  lineno=s.lineno, col_offset=s.col_offset)


def _has_continue(stmts) -> bool:
    return any(isinstance(n, ast.Continue) for s in stmts for n in fastast.walk(s))


OWN = "_av_own"      # `v._av_own()`: a tensor the iteration made, one per row under vmap (runtime.own)
ROW_FIT = "_av_rowfit"   # `row._av_rowfit(v, kind)`: v, where setitem into row takes it as the loop's (runtime.row_fit)
ROW_CLONE = "_av_irow"   # the names of outer rows' clones an inner loop stores into (_inner_row_stores)


def row_clone_store(s: ast.AST) -> bool:
    """Whether `s` is a store into an outer row's clone (`_av_irow0[j] = v`, _inner_row_stores)."""
    return isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript) \
        and isinstance(s.targets[0].value, ast.Name) and s.targets[0].value.id.startswith(ROW_CLONE)

# calls of _NEW_MEMORY_CALLS whose result is one tensor (not a number, a list or a tuple)
_NEW_TENSOR_CALLS = _NEW_MEMORY_CALLS - {"item", "tolist", "max", "min", "topk", "sort", "kthvalue", "median",
                                         "nanmedian", "mode", "cummax", "cummin", "std_mean", "var_mean"}
# torch functions whose result is a tensor of its own (a factory, or new memory from their arguments)
_FRESH_FUNCTIONS = frozenset(("zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
                              "empty_like", "eye", "arange", "linspace", "tensor", "one_hot")) | _NEW_TENSOR_CALLS
# methods whose result is new memory where the receiver is a tensor (checked at run time where it
# is a name or an attribute of one: _receivers)
_FRESH_METHODS = frozenset(("clone", "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor")) | _NEW_TENSOR_CALLS


def _fresh_value(v: ast.AST, ctx: Context) -> bool:
    """Whether `v` is a value no one else holds: an operator's result (`x[i] * 2`), what a torch
    factory or a call of _FRESH_FUNCTIONS / _FRESH_METHODS gives (`torch.zeros(C)`,
    `x[i].clone()`, `F.one_hot(..)`), or a tensor method of such a value
    (`torch.zeros(C).view(2, -1)`: its memory or new). Not where `out=` or `inplace=` writes
    into another tensor."""
    if isinstance(v, ast.BinOp) or isinstance(v, ast.UnaryOp) and not isinstance(v.op, ast.UAdd):
        return True     # (`+t` is t itself)
    if isinstance(v, ast.Compare) and len(v.ops) == 1 and isinstance(v.ops[0], _ORDERS):
        return True     # (`rm = cp > p`: a comparison's result, as an operator's; not `is` / `in`, Python bools)
    if not isinstance(v, ast.Call) or not isinstance(v.func, ast.Attribute) or nm.in_place_keyword(v) \
            or any(kw.arg is None for kw in v.keywords) or any(isinstance(a, ast.Starred) for a in v.args):
        return False
    f = v.func
    recv = f.value
    if isinstance(recv, (ast.Name, ast.Attribute)) and _base_ok(recv) and _root(recv) not in ctx.local_names:
        found, obj = ctx.env.resolve(src(recv))
        if found and isinstance(obj, types.ModuleType):
            return obj.__name__ in ("torch", "torch.nn.functional") and f.attr in _FRESH_FUNCTIONS \
                and callable(getattr(obj, f.attr, None))
    if f.attr in _FRESH_METHODS:
        return True
    return f.attr in _FRESH_VIEWS and _fresh_value(recv, ctx)


_ORDERS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)


# methods whose result is the receiver's memory (a view, or the receiver itself) or a copy of it:
# of a value of its own, a value of its own (not `new(w)`, w's memory; not `expand`, whose rows
# share memory, which a batch of copies would not); and the analysis's own OWN marker
_FRESH_VIEWS = frozenset(("view", "reshape", "view_as", "reshape_as", "flatten", "unflatten", "unsqueeze",
                          "squeeze", "permute", "transpose", "t", "movedim", "contiguous", "float", "double",
                          "half", "bfloat16", "long", "int", "short", "bool", "detach", "narrow", "select", OWN))


def _receivers(v: ast.AST, ctx: Context) -> list:
    """The objects whose methods make `v` fresh (_fresh_value) that are names or attributes of
    names (`pre` of `pre.normalize(w)`, `self.template` of `self.template.clone()`): a tensor's
    such methods make new memory, another object's may return anything (its own `normalize`
    may return `w` itself), which runtime.own checks at run time."""
    out = []
    while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute):
        recv = v.func.value
        chain = recv
        while isinstance(chain, ast.Attribute):
            chain = chain.value
        if isinstance(chain, ast.Name) and v.func.attr != OWN:
            found, obj = ctx.env.resolve(src(recv)) if chain.id not in ctx.local_names else (False, None)
            if not (found and isinstance(obj, types.ModuleType)):     # (`torch.zeros(C)`: a function)
                out.append(recv)
        v = recv
    return out


def _owned(st: ast.Assign, ctx: Context) -> ast.Assign:
    """`N = v` as `N = v._av_own(..)` (runtime.own: a row of its own per iteration under vmap;
    its arguments the receivers it checks, _receivers)."""
    own = ast.Call(func=ast.Attribute(value=st.value, attr=OWN, ctx=ast.Load()),
                   args=[fastast.clone(r) for r in _receivers(st.value, ctx)], keywords=[])
    return ast.fix_missing_locations(ast.copy_location(
        ast.Assign(targets=st.targets, value=ast.copy_location(own, st.value)), st))


# in-place methods a tensor the iteration made may call on itself (_fresh_stores); none draws
# random numbers or changes the tensor's shape
_FRESH_INPLACE = frozenset((
    "fill_", "zero_", "fill_diagonal_", "masked_fill_", "index_fill_", "scatter_", "scatter_add_", "index_put_",
    "index_add_", "index_copy_", "copy_", "clamp_", "clamp_min_", "clamp_max_", "clip_", "add_", "sub_", "mul_",
    "div_", "neg_", "abs_", "exp_", "log_", "sqrt_", "pow_", "relu_", "sigmoid_", "tanh_", "addcmul_",
    "addcdiv_", "lerp_", "nan_to_num_", "floor_", "ceil_", "round_", "sign_", "fmod_", "remainder_", "triu_",
    "tril_", "masked_scatter_", "logical_not_", "reciprocal_", "square_",
))


def _fresh_rebinds(loop: ast.For, ctx: Context) -> set:
    """Names an inner loop binds only to values of their own (`acc = acc * x[i] + c`, `acc +=
    v`): a value the iteration made before the loop is still one after it."""
    plain, other = set(), set(nm.target_names(loop.target))
    for n in fastast.walk(ast.Module(body=loop.body, type_ignores=[])):
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            plain.add(n.target.id)
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and (_fresh_value(n.value, ctx) or _number_constant(n.value)):
            plain.add(n.targets[0].id)
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With, ast.NamedExpr)):
            other |= nm.stores(n)
    return plain - other


def _number_constant(v: ast.AST) -> bool:
    """A number literal (not a bool): `t = 0.0` then `t += v` binds a new value."""
    return isinstance(v, ast.Constant) and type(v.value) in (int, float, complex)


def _fresh_write(st: ast.stmt, fresh: dict) -> str | None:
    """The name `N` a top-level statement writes into, where `N` is in `fresh`: `N[..] = v`,
    `N[..] op= v` (one subscript of the name itself: through `N[k][j]` the loop writes into a
    view of `N[k]`, where a batched `N[k]` with a per-iteration `k` is a copy), `N op= v`,
    `N.<_FRESH_INPLACE>(..)`; else None."""
    if isinstance(st, ast.Assign) and len(st.targets) == 1:
        t = st.targets[0]
    elif isinstance(st, ast.AugAssign):
        t = st.target
    elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) \
            and st.value.func.attr in _FRESH_INPLACE and isinstance(st.value.func.value, ast.Name):
        return st.value.func.value.id if st.value.func.value.id in fresh else None
    else:
        return None
    if isinstance(t, ast.Name) and isinstance(st, ast.AugAssign):
        return t.id if t.id in fresh else None
    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
        return t.value.id if t.value.id in fresh else None
    return None


def _fresh_stores(stmts: list, ctx: Context):
    """Writes into a value the iteration made (`t = torch.zeros(C)`, then `t[y[i]] = 1`, `t[k]
    += v`, `t += v`, `t.fill_diagonal_(0)`): top-level statements that write into a name `N`
    (_fresh_write) which a top-level `N = <_fresh_value>` bound before them, and nothing rebound
    since. Each iteration writes its own tensor, so under vmap each row writes its own; the
    binding becomes `N = <value>._av_own()`, which gives the tensor a row per iteration where it
    has none (`torch.zeros(C)` under vmap is one tensor for every row; runtime.own).

    Refused where a statement between the binding and the last write reads `N` other than into
    new memory at once (_view_read: `a = N[k]`, `lst.append(N)`): with a per-iteration 0-d
    tensor `k` the loop's `N[k]` is a view of `N`, which the later write changes, while the
    batch's is a gather, a copy (an alias of `N` could be read so later). Returns (the
    statements, the ids of the writes)."""
    fresh: dict = {}        # name -> position of the statement that made it
    writes: dict = {}       # position of the binding -> positions of its writes
    for k, st in enumerate(stmts):
        name = _fresh_write(st, fresh)
        if name is not None:
            writes.setdefault(fresh[name], []).append(k)
        kept = _fresh_rebinds(st, ctx) if isinstance(st, ast.For) else set()
        for bound in nm.stores(st):
            if not (name == bound and isinstance(st, ast.AugAssign)) and bound not in kept:
                fresh.pop(bound, None)
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and (_fresh_value(st.value, ctx) or _number_constant(st.value)):
            fresh[st.targets[0].id] = k
    stores = set()
    out = list(stmts)
    for k0, ks in writes.items():
        name = stmts[k0].targets[0].id
        late = next((p for p in range(k0 + 1, ks[-1]) if p not in ks and _view_read(stmts[p], name, ctx)), None)
        if late is not None:
            line = stmts[late].lineno
            raise Refuse(f"line {line} keeps `{name}` or a part of it, which the iteration made and writes "
                         f"into later (line {stmts[ks[-1]].lineno}): the loop's part is a view the write "
                         "changes, a batched read of it would be a copy", line)
        stores |= {id(stmts[p]) for p in ks}
        st = stmts[k0]
        if not _number_constant(st.value):      # (`acc = 0.0`, then `acc += v`: a new value at the first update)
            out[k0] = _owned(st, ctx)
    return out, stores


def _view_read(st: ast.stmt, name: str, ctx: Context) -> bool:
    """Whether `st` reads `name` other than into new memory at once (_makes_new_memory: `t.sum()`,
    `t[k] * 2`, through subscripts, attributes and methods of it): bound to a name, kept or
    passed on, the loop's object or a view of it, which a later write changes (_fresh_stores)."""
    parents = {id(c): p for p in fastast.walk(st) for c in ast.iter_child_nodes(p)}
    for n in fastast.walk(st):
        if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id == name):
            continue
        node = n
        while True:
            p = parents.get(id(node))
            if _makes_new_memory(p, node, parents, ctx) or \
                    isinstance(p, ast.Subscript) and p.value is node and isinstance(p.ctx, ast.Store):
                break       # (new memory at once; or a write into it, `t[k] = v`: no part kept)
            if isinstance(p, ast.Subscript) and p.value is node and isinstance(p.ctx, ast.Load):
                node = p
                continue
            if isinstance(p, ast.Attribute) and p.value is node:
                call = parents.get(id(p))
                node = call if isinstance(call, ast.Call) and call.func is p else p
                continue
            return True
    return False


def _lens_as_shapes(stmts: list, ctx: Context) -> list:
    """`len(T)` as `T.shape[0]` where the loop stores into elements of the tensor `T` and never
    binds the name: a read of what those stores never change (_metadata_read: `if 0 <= b <
    len(counts): counts[b] += 1`), which `len` would pass to the body as the written tensor
    itself. The same int where `T` is a tensor of one or more dims; on a 0-d tensor, where
    `len` raises TypeError, `shape[0]` raises IndexError in the batch, whose failure runs the
    loop; a value other than a tensor fails the store's guard first."""
    if not _is_builtin(ctx, "len"):
        return stmts
    stored, bound = set(), set()
    for st in stmts:
        for n in fastast.walk(st):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
                n, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    stored.add(t.value.id)
                else:
                    bound |= set(nm.target_names(t))
            if isinstance(n, (ast.NamedExpr, ast.Global, ast.Nonlocal, ast.Delete)):
                return stmts
    names = stored - bound
    if not names:
        return stmts

    class _Lens(ast.NodeTransformer):
        def visit_Call(self, c):
            self.generic_visit(c)
            if isinstance(c.func, ast.Name) and c.func.id == "len" and len(c.args) == 1 and not c.keywords \
                    and isinstance(c.args[0], ast.Name) and c.args[0].id in names:
                shape = ast.copy_location(ast.Attribute(value=c.args[0], attr="shape", ctx=ast.Load()), c)
                return ast.copy_location(ast.Subscript(value=shape, slice=ast.copy_location(ast.Constant(0), c),
                                                       ctx=ast.Load()), c)
            return c

    if not any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "len" and c.args
               and isinstance(c.args[0], ast.Name) and c.args[0].id in names for st in stmts for c in fastast.walk(st)):
        return stmts
    return [_Lens().visit(fastast.clone(s)) for s in stmts]


_OPERATOR_BINOPS = {operator.add: ast.Add, operator.sub: ast.Sub, operator.mul: ast.Mult, operator.truediv: ast.Div,
                    operator.floordiv: ast.FloorDiv, operator.mod: ast.Mod, operator.pow: ast.Pow,
                    operator.matmul: ast.MatMult, operator.lshift: ast.LShift, operator.rshift: ast.RShift,
                    operator.and_: ast.BitAnd, operator.or_: ast.BitOr, operator.xor: ast.BitXor}
_OPERATOR_UNARY = {operator.neg: ast.USub, operator.pos: ast.UAdd, operator.invert: ast.Invert}
_OPERATOR_COMPARE = {operator.lt: ast.Lt, operator.le: ast.LtE, operator.eq: ast.Eq, operator.ne: ast.NotEq,
                     operator.ge: ast.GtE, operator.gt: ast.Gt}


def _operator_spellings(nodes: list, ctx: Context) -> list:
    """`operator.truediv(a, b)` (and the other arithmetic, unary and comparison functions of the
    `operator` module, under any of their names: `operator.__pow__` is `operator.pow`) as the
    operator it is defined to be, `a / b`: the batch then computes it as the loop's operator,
    Python's checks on Python numbers included (a zero divisor raises, a float power is the C
    library's). A dunder method called by name (`a.__truediv__(b)`) is not its operator (an int
    by a float gives NotImplemented, no reflected call) and keeps the loop (probeH: both ran
    under vmap as tensor methods: no ZeroDivisionError, torch's pow)."""
    class _Ops(ast.NodeTransformer):
        def visit_Call(self, c):
            self.generic_visit(c)
            f = c.func
            new = self._operator(c)
            if new is not None:
                return new
            if isinstance(f, ast.Attribute) and f.attr.startswith("__") and f.attr.endswith("__") and len(f.attr) > 4:
                raise Refuse(f"`{src(c)}` at line {c.lineno} calls a dunder method by name (not its operator: "
                             "no reflected call, NotImplemented returned)", c.lineno)
            return c

        def _operator(self, c):
            f = c.func
            if c.keywords or any(isinstance(a, ast.Starred) for a in c.args) or not isinstance(f, (ast.Name, ast.Attribute)):
                return None
            text = src(f)
            if text.split(".")[0] in ctx.local_names:
                return None
            try:
                found, obj = ctx.env.resolve(text)
            except Exception:       # (an attribute that cannot be read without running the user's code)
                return None
            if not found or getattr(obj, "__module__", None) not in ("_operator", "operator"):
                return None
            if not isinstance(f, ast.Attribute) or not isinstance(f.value, ast.Name) or not isinstance(
                    ctx.env.resolve(f.value.id)[1], types.ModuleType):
                # (`mul(a, b)` of `from operator import mul`, `OP = operator.mul`: a name the
                # rewrite could not watch, rebound later; `operator.mul` is the module's, which the
                # call checks again: frontend's assumptions). It keeps the loop where it is
                # arithmetic, whose vmap form is the tensors' (probeJ)
                if obj in _OPERATOR_BINOPS or obj in _OPERATOR_UNARY or obj in _OPERATOR_COMPARE:
                    raise Refuse(f"`{src(c)}` at line {c.lineno} calls an operator function through a name "
                                 "(write `a * b`, or `operator.mul(a, b)`)", c.lineno)
                return None
            try:
                binop, unop, cmp = _OPERATOR_BINOPS.get(obj), _OPERATOR_UNARY.get(obj), _OPERATOR_COMPARE.get(obj)
            except TypeError:
                return None
            if binop is not None and len(c.args) == 2:
                new = ast.BinOp(left=c.args[0], op=binop(), right=c.args[1])
            elif unop is not None and len(c.args) == 1:
                new = ast.UnaryOp(op=unop(), operand=c.args[0])
            elif cmp is not None and len(c.args) == 2:
                new = ast.Compare(left=c.args[0], ops=[cmp()], comparators=[c.args[1]])
            else:
                return None
            return ast.fix_missing_locations(ast.copy_location(new, c))

    if not any(isinstance(c, ast.Call) and isinstance(c.func, (ast.Name, ast.Attribute))
               for n in nodes for c in fastast.walk(n)):
        return nodes
    return [_Ops().visit(fastast.clone(n)) for n in nodes]


def _classify(stmts: list[ast.stmt], ctx: Context, iter_vars: dict, row_local: bool = False) -> _Body:
    """Replace outputs by marker assignments (keeping their place, inside ifs too) and
    refuse statements that block a rewrite."""
    body = _Body([], [], {})
    stmts = _operator_spellings(_lens_as_shapes(stmts, ctx), ctx)
    body.indices = [k for k, v in iter_vars.items() if v == "index"]
    body.varying = set(iter_vars)
    stmts = _tuple_stores(_split_chains(stmts, [0]))
    if body.indices:
        stmts = _flat([_InPlaceUpdates(body.indices).visit(fastast.clone(s)) for s in stmts])
        if len(body.indices) == 1:
            stmts = _row_mask_stores(stmts, body.indices[0])
        stmts = [_ChainedStores(body.indices).visit(s) for s in stmts]
        if len(body.indices) == 1:
            if row_local:
                stmts = _row_local(stmts, body.indices[0])
            stmts, body.own_rows = _inner_row_stores(stmts, body.indices[0])
        stmts = _merge_resets(_select_resets(stmts))
    if len(body.indices) == 1:
        stmts = [_UnitSlices(body.indices[0]).visit(fastast.clone(s)) for s in stmts]
        fills = _RangeFills(body.indices[0], set().union(*map(nm.stores, stmts)) | set(iter_vars))
        stmts = _merge_fills([fills.visit(s) for s in stmts])
    stmts = _normalize_continue(stmts, [max(16 * sum(1 for s in stmts for _ in fastast.walk(s)), 4000)])
    stmts, body.fresh_stores = _fresh_stores(stmts, ctx)
    body.own_calls = {id(st.value) for st in stmts if id(st) in body.fresh_stores and isinstance(st, ast.Expr)}
    body.written = set().union(set(iter_vars), *map(nm.stores, stmts))
    body.top = stmts
    body.stmts = _walk(stmts, body, ctx, depth=0)
    return body


def _scatter_entries(sub: ast.Subscript, body: "_Body"):
    """The index entries of a write like `hist[idx[k]] += w` (values that change per iteration,
    then only full slices), or None when the write is an ordinary `out[i]` store."""
    idx = body.indices
    entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
    varying = body.varying | set(body.assigned)
    m = match_subscript(sub, idx[0]) if len(idx) == 1 else None
    if isinstance(m, tuple) and not any(nm.load_ids(e) & varying for k, e in enumerate(entries) if k != m[0]):
        return None     # `out[i]`, `out[:, i + 1]`: a store of rows (`out[i, l]` with `l` per iteration scatters)
    if len(idx) > 1:
        m = match_subscript_nest(sub, idx)
        if isinstance(m, list) and [(lv, p) for lv, p, _ in m] == [(k, k) for k in range(len(idx))]:
            return None     # `out[i, j]` in a nest over (i, j): a store of its rows
        # (`out[i] += A[i, j] * x[j]` in a nest over (i, j): repeated indices, a scatter)
    k = 0
    while k < len(entries) and not isinstance(entries[k], ast.Slice):
        k += 1
    head, tail = entries[:k], entries[k:]
    if not head or not all(_full_slice(e) for e in tail):
        return None
    if not any(nm.load_ids(e) & varying for e in head):
        return None
    return head


def _linear_recurrence(s: ast.stmt):
    """`h = <expression affine in h>` with a factor other than 1: `a * h + b`, `h * a * m + b`,
    `b + g * h * (1 - d)`, `h + a * (x - h)`, `a * (h + x)`, `(h * a + b) / c`. Returns
    (h, a, b) as expressions free of h, or None."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
        return None
    h = s.targets[0].id
    form = _affine_in(s.value, h)
    if form is None:
        return None
    a, b = form
    if a is _ZERO or a is _ONE or b is _ZERO:   # no recurrence, an accumulator or a product (handled as such)
        return None
    return h, _materialize(a, s.value), _materialize(b, s.value)


_ONE, _ZERO, _MINUS_ONE = object(), object(), object()


def _affine_in(e: ast.expr, h: str):
    """(A, B) with e == A * h + B, A and B free of h (_ONE / _ZERO for the constants), or None."""
    if h not in nm.load_ids(e):
        return _ZERO, e
    if isinstance(e, ast.Name):
        return _ONE, _ZERO
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        inner = _affine_in(e.operand, h)
        return None if inner is None else (_neg(inner[0]), _neg(inner[1]))
    if not isinstance(e, ast.BinOp):
        return None
    in_left, in_right = h in nm.load_ids(e.left), h in nm.load_ids(e.right)
    if isinstance(e.op, (ast.Add, ast.Sub)):
        left, right = _affine_in(e.left, h), _affine_in(e.right, h)
        if left is None or right is None:
            return None
        combine = _add if isinstance(e.op, ast.Add) else _sub
        return combine(left[0], right[0]), combine(left[1], right[1])
    if isinstance(e.op, ast.Mult) and in_left != in_right:
        inner = _affine_in(e.left if in_left else e.right, h)
        other = e.right if in_left else e.left
        if inner is None:
            return None
        return (_mul(inner[0], other, in_left), _mul(inner[1], other, in_left))
    if isinstance(e.op, ast.Div) and in_left and not in_right:
        inner = _affine_in(e.left, h)
        if inner is None:
            return None
        return tuple(_ZERO if t is _ZERO else ast.BinOp(left=_materialize(t, e), op=ast.Div(), right=e.right)
                     for t in inner)
    return None


def _materialize(t, where):
    if t is _ONE:
        return ast.copy_location(ast.Constant(1), where)
    if t is _MINUS_ONE:
        return ast.copy_location(ast.Constant(-1), where)
    if t is _ZERO:
        return ast.copy_location(ast.Constant(0), where)
    return t


def _neg(t):
    if t is _ZERO:
        return _ZERO
    if t is _ONE:
        return _MINUS_ONE
    if t is _MINUS_ONE:
        return _ONE
    if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.USub):
        return t.operand
    return ast.UnaryOp(op=ast.USub(), operand=t)


def _add(x, y):
    if x is _ZERO:
        return y
    if y is _ZERO:
        return x
    if isinstance(y, ast.UnaryOp) and isinstance(y.op, ast.USub):
        return _sub(x, y.operand)
    return ast.BinOp(left=_materialize(x, ast.Constant(0)), op=ast.Add(), right=_materialize(y, ast.Constant(0)))


def _sub(x, y):
    if y is _ZERO:
        return x
    if x is _ZERO:
        return _neg(y)
    return ast.BinOp(left=_materialize(x, ast.Constant(0)), op=ast.Sub(), right=_materialize(y, ast.Constant(0)))


def _mul(t, other, t_on_left):
    """t * other, in the order the original expression multiplies them."""
    if t is _ZERO:
        return _ZERO
    if t is _ONE:
        return other
    if t is _MINUS_ONE:
        return _neg(other)
    return ast.BinOp(left=t, op=ast.Mult(), right=other) if t_on_left else ast.BinOp(left=other, op=ast.Mult(), right=t)


FILL = "_av_fill"    # `row._av_fill(dim, lo, hi, v)`: the row with `row[.., lo:hi] = v` done (runtime.fill_range)


class _RangeFills(ast.NodeTransformer):
    """`out[i, lo:hi] = v` with bounds that change from one iteration to the next (`out[i,
    lengths[i]:] = 0`) reads as `out[i] = out[i]._av_fill(0, lo, hi, v)`: a store of the whole
    row, computed from the row as it was (one iteration runs the loop's own slice assignment on
    a copy; a batched body makes a mask of the positions, runtime.fill_range). Only where the
    slice is the one entry after the index and the others are full slices; the index entry
    as the loop's stores take it (`i`, `i + c`)."""

    def __init__(self, index: str, varying: set):
        self.index, self.varying = index, varying

    def visit_Assign(self, node: ast.Assign):
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Subscript):
            return node
        t = node.targets[0]
        entries = t.slice.elts if isinstance(t.slice, ast.Tuple) else [t.slice]
        if len(entries) < 2 or not _base_ok(t.value) or self.index not in nm.load_ids(entries[0]) \
                or _affine(entries[0], self.index) is None:
            return node
        cut = [k for k, e in enumerate(entries[1:], 1) if not _full_slice(e)]
        if len(cut) != 1 or not isinstance(entries[cut[0]], ast.Slice):
            return node
        sl = entries[cut[0]]
        if sl.step is not None and not (isinstance(sl.step, ast.Constant) and sl.step.value == 1):
            return node
        bounds = [b for b in (sl.lower, sl.upper) if b is not None]
        if not any(nm.load_ids(b) & (self.varying | {self.index}) for b in bounds):
            return node   # fixed bounds: an ordinary store of `out[i, lo:hi]`
        none = ast.Constant(None)
        row = lambda ctx: ast.Subscript(value=fastast.clone(t.value), slice=fastast.clone(entries[0]), ctx=ctx)
        call = ast.Call(func=ast.Attribute(value=row(ast.Load()), attr=FILL, ctx=ast.Load()),
                        args=[ast.Constant(cut[0] - 1), sl.lower or none, sl.upper or none, node.value], keywords=[])
        new = ast.Assign(targets=[row(ast.Store())], value=call)
        return ast.copy_location(_located(new, node.lineno), node)


def _merge_fills(stmts: list) -> list:
    """`out[i] = v` followed by a fill of that row (`out[i, lo:hi] = c`, as _RangeFills wrote it),
    with nothing between them touching `out`: one store, `out[i] = out[i]._av_fill(.., c, v)`,
    the row as the first store leaves it, then filled (the fill must not read the row the
    first store wrote, which the loop's stores cannot take)."""
    out = list(stmts)
    k = 0
    while k < len(out):
        s = out[k]
        call = s.value if isinstance(s, ast.Assign) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == FILL
                and len(call.args) == 4):
            k += 1
            continue
        target = src(s.targets[0])
        root = _root_name(target)
        j = k - 1
        while j >= 0 and root not in nm.load_ids(out[j]) and root not in nm.stores(out[j]):
            j -= 1
        first = out[j] if j >= 0 else None
        if (isinstance(first, ast.Assign) and len(first.targets) == 1 and src(first.targets[0]) == target
                and not any(root in nm.load_ids(a) for a in call.args[1:])):
            call.args.append(first.value)
            del out[j]
            k -= 1
        k += 1
    return out


def _split_chains(stmts, count) -> list:
    """`advantages[t] = last = delta + c * last` (one value, several targets) as `last = ..`
    then `advantages[t] = last`: Python evaluates the value once and assigns it to each target
    from the left, and a name target none of the others reads (a subscript, an attribute of one)
    may take it first, the same object; without such a name, a new one (`_av_chain0`) takes it.
    Inside `if`s too; the loop's own statements otherwise as they are."""
    out = []
    for s in stmts:
        if isinstance(s, ast.If):
            s = ast.copy_location(ast.If(test=s.test, body=_split_chains(s.body, count),
                                         orelse=_split_chains(s.orelse, count)), s)
        elif isinstance(s, ast.Assign) and len(s.targets) > 1:
            names = [t.id for t in s.targets if isinstance(t, ast.Name)]
            first = next((nm_ for nm_ in reversed(names) if not any(
                nm_ in nm.load_ids(t) for t in s.targets if not isinstance(t, ast.Name))), None)
            if first is None:
                first = f"_av_chain{count[0]}"
                count[0] += 1
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(id=first, ctx=ast.Store())], value=s.value), s))
            for t in s.targets:
                if not (isinstance(t, ast.Name) and t.id == first):
                    out.append(ast.copy_location(ast.Assign(targets=[t], value=ast.Name(id=first, ctx=ast.Load())), s))
            continue
        out.append(s)
    return [ast.fix_missing_locations(s) for s in out]


_NUMBER_CALLS = frozenset(("item", "tolist", "float", "int", "bool", "complex", "len", "round", "abs", "min", "max",
                           "sum", "pow", "divmod", "hash", "ord"))


def _row_value(v: ast.expr, row: str, bound: dict, indices: set):
    """A value an inner loop stores into an outer row's clone (_inner_row_stores), as the batch
    must store it, or None where it cannot say so. Under vmap a per-iteration Python number is
    a tensor, whose store converts silently where the loop's setitem checks the number (300 into
    int8 raises): so a value must be a tensor in the loop (of reads, methods and torch calls,
    names bound to such values, loop-invariant names); a number constant, checked against the
    row's dtype as setitem checks it (runtime.row_fit "const"); an int made of the indices and
    ints the loop counts, only into an int64 row ("int"); or a conditional expression of those."""
    def fit(node, kind):
        return ast.copy_location(ast.Call(func=ast.Attribute(value=ast.Name(id=row, ctx=ast.Load()), attr=ROW_FIT,
                                                             ctx=ast.Load()),
                                          args=[node, ast.Constant(kind)], keywords=[]), node)

    def const(node):
        while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) in (int, float, bool, complex)

    ints = set(indices)
    grew = True
    while grew:
        grew = False
        for name, values in bound.items():
            if name not in ints and values and all(x is not None and _int_value(x, ints | {name}) for x in values):
                ints.add(name)
                grew = True

    def tensorish(node, seen=frozenset()) -> bool:
        for n in fastast.walk(node):
            if isinstance(n, (ast.IfExp, ast.BoolOp, ast.Lambda, ast.NamedExpr)):
                return False
            if isinstance(n, ast.Call):
                f = n.func
                fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if fname in _NUMBER_CALLS or isinstance(f, ast.Attribute) and getattr(f.value, "id", None) == "math":
                    return False
        for name in _bare_names(node):
            if name in indices:
                return False
            if name in bound and name not in seen:
                if not all(x is not None and tensorish(x, seen | {name}) for x in bound[name]):
                    return False
        return True

    def value(node):
        if isinstance(node, ast.IfExp):
            a, b = value(node.body), value(node.orelse)
            if a is None or b is None:
                return None
            new = ast.copy_location(ast.IfExp(test=node.test, body=a, orelse=b), node)
            new.end_lineno, new.end_col_offset = node.end_lineno, node.end_col_offset
            return new
        if const(node):
            return fit(node, "const")
        if _int_value(node, ints) and not isinstance(node, ast.Call):
            return fit(node, "int")
        return node if tensorish(node) else None
    return value(v)


LOCAL_ROW = "_av_lrow"


def _writes_row_parts(stmts: list, index: str) -> bool:
    """Whether a statement writes part of the iteration's row, `T[i, e..] = ..` or `T[i][e..] op= ..`:
    the loops _row_local may apply to (the others need no second plan, nor a copy of their body)."""
    for st in stmts:
        for n in fastast.walk(st):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []:
                if not isinstance(t, ast.Subscript):
                    continue
                lead = t.slice.elts[0] if isinstance(t.slice, ast.Tuple) and len(t.slice.elts) > 1 else \
                    t.value.slice if isinstance(t.value, ast.Subscript) else None
                if isinstance(lead, ast.Name) and lead.id == index:
                    return True
    return False


def _row_local(stmts: list, index: str) -> list:
    """A tensor the body reads and writes only in the iteration's own row, in parts
    (`out[i, 2:] -= out[i, :2]; out[i, :2] += out[i, 2:] / 2`, `c = out[i, y[i]]; out[i, y[i]] =
    f(c)`): the row copied at its first mention (`r = out[i].clone()`), every `out[i, e..]` read
    and written as `r[e..]`, and the row stored back after its last mention (`out[i] = r`). The
    same values: `out[i, e..]` is `out[i][e..]`, and no other row, nor the tensor under another
    name, is read in the iteration (the guard's aliasing checks refuse an input that shares its
    memory). Only where every mention of the tensor is such a subscript of it with the loop index
    first, the body never binds the name, no statement from its first mention to its last can
    leave the iteration (`continue`, `break`, `return`, `raise`), and one of them writes part of
    the row (a whole row's store and reads of it are the planner's own)."""
    mentions: dict = {}
    for k, st in enumerate(stmts):
        for n in fastast.walk(st):
            if isinstance(n, ast.Name) and n.id != index:
                mentions.setdefault(n.id, []).append((k, n))
    parents = {id(c): p for st in stmts for p in fastast.walk(st) for c in ast.iter_child_nodes(p)}
    bound = set().union(*map(nm.stores, stmts)) if stmts else set()
    rows = 0
    for name, found in sorted(mentions.items()):
        if name in bound or name.startswith("_av_"):
            continue
        at = sorted({k for k, _ in found})
        if len(found) < 2:      # (read and written: in two statements, or in one, `T[i, j] = T[i, j] / p`)
            continue
        subs = []
        for k, n in found:
            p = parents.get(id(n))
            sl = p.slice if isinstance(p, ast.Subscript) and p.value is n else None
            lead = sl.elts[0] if isinstance(sl, ast.Tuple) and sl.elts else sl
            if not (isinstance(lead, ast.Name) and lead.id == index) \
                    or any(isinstance(e, (ast.Starred, ast.NamedExpr)) for e in fastast.walk(sl)) \
                    or name in nm.load_ids(sl):
                break
            subs.append(p)
        else:
            if any(isinstance(st, (ast.Assign, ast.AugAssign)) and _view_of(st.value, {id(x) for x in subs})
                   and not _apart(st, subs) for st in stmts):
                # (`out[i, :2] -= out[i, 1]`, `c = out[i, 1:3]`: a view of the row as the value, which
                # torch refuses to write into the row it overlaps, depending on the data; the loop decides)
                continue
            if any(getattr(stmts[k], "_av_method", None) for k in at):
                continue      # (an in-place method read as a store: its dtype and shape checks are the row's own)
            if any(isinstance(x.ctx, ast.Load) and _kept_view(x, parents) for x in subs):
                continue      # (`lst.append(out[i])`: the loop keeps a view of the tensor's row, the copy would not)
            if any(isinstance(n, (ast.Continue, ast.Break, ast.Return, ast.Raise, ast.Yield, ast.YieldFrom, ast.Try))
                   for st in stmts[at[0]:at[-1] + 1] for n in fastast.walk(st)):
                continue      # (an iteration that leaves between the copy and the store back would drop its writes)
            partial = any(isinstance(st, (ast.Assign, ast.AugAssign)) and any(
                t in subs and isinstance(t.slice, ast.Tuple) and len(t.slice.elts) > 1
                for t in (st.targets if isinstance(st, ast.Assign) else [st.target])) for st in stmts)
            if not partial:
                continue
            row = f"{LOCAL_ROW}{rows}"
            rows += 1
            first, last = at[0], at[-1]
            swap = _RowToLocal({id(x) for x in subs}, row)
            mid = [swap.visit(stmts[k]) for k in range(first, last + 1)]
            copy = ast.parse(f"{row} = {name}[{index}].clone()").body[0]
            back = ast.parse(f"{name}[{index}] = {row}").body[0]
            for x, st in ((copy, stmts[first]), (back, stmts[last])):
                ast.copy_location(x, st)
                x.end_lineno, x.end_col_offset = st.end_lineno, st.end_col_offset
                ast.fix_missing_locations(x)
            stmts = stmts[:first] + [copy] + mid + [back] + stmts[last + 1:]
            return _row_local(stmts, index)       # (positions moved: the next tensor on the new list)
    return stmts


def _view_of(node, ids) -> bool:
    """Whether `node` may be a view of one of the subscripts `ids`: the subscript itself, or what
    a subscript, an attribute or a method not known to make new memory (_NEW_MEMORY_CALLS) gives
    of it (`.view(..)`, `.T`, `[..]`, `.to(..)`)."""
    while True:
        if id(node) in ids:
            return True
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr not in _NEW_MEMORY_CALLS:
            node = node.func.value
        else:
            return False


def _kept_view(sub, parents) -> bool:
    """Whether the row's part `sub` may be kept as it is, a view of the tensor (appended, passed
    to a call that may keep it or return a view of it, indexed again), rather than only used
    through a value computed from it (an operand, a method that makes new memory, a torch
    function's argument, its shape). A kept view of the loop's row would be one of the copy."""
    q = parents.get(id(sub))
    if isinstance(q, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp)):
        return False
    if isinstance(q, (ast.Assign, ast.AugAssign)):
        return False          # (its value: _view_of and _apart decide)
    if isinstance(q, ast.Attribute) and q.value is sub:
        call = parents.get(id(q))
        if isinstance(call, ast.Call) and call.func is q:
            return q.attr not in _NEW_MEMORY_CALLS
        return q.attr not in ("shape", "dtype", "device", "ndim", "is_floating_point")
    if isinstance(q, ast.Call) and sub in q.args and isinstance(q.func, ast.Attribute) \
            and isinstance(q.func.value, ast.Name) and q.func.value.id in ("torch", "F", "math", "np"):
        return q.func.attr not in _NEW_MEMORY_CALLS
    return True


def _apart(st, subs) -> bool:
    """`T[i, a] op= T[i, b]` (or `=`) whose parts are constant elements or slices of one
    dimension that never meet (`out[i, 2:] -= out[i, :2]`): torch writes a view into a part it
    does not overlap without complaint, as the loop does."""
    target = st.target if isinstance(st, ast.AugAssign) else st.targets[0] if len(st.targets) == 1 else None

    def span(sub):
        if sub not in subs or not isinstance(sub.slice, ast.Tuple) or len(sub.slice.elts) != 2:
            return None
        e = sub.slice.elts[1]
        if isinstance(e, ast.Constant) and type(e.value) is int and e.value >= 0:
            return e.value, e.value + 1
        if isinstance(e, ast.Slice) and e.step is None:
            lo = 0 if e.lower is None else e.lower.value if isinstance(e.lower, ast.Constant) \
                and type(e.lower.value) is int and e.lower.value >= 0 else None
            hi = math.inf if e.upper is None else e.upper.value if isinstance(e.upper, ast.Constant) \
                and type(e.upper.value) is int and e.upper.value >= 0 else None
            return None if lo is None or hi is None else (lo, hi)
        return None
    a, b = span(target), span(st.value)
    return a is not None and b is not None and (a[1] <= b[0] or b[1] <= a[0])


class _RowToLocal(ast.NodeTransformer):
    """`T[i, e..]` (the subscripts `ids` names) as `r[e..]`, `T[i]` as `r` (stored into: `r[...]`)."""

    def __init__(self, ids, row):
        self.ids, self.row = ids, row

    def visit_Subscript(self, node):
        if id(node) not in self.ids:
            return self.generic_visit(node)
        name = ast.Name(id=self.row, ctx=node.ctx if not isinstance(node.ctx, ast.Del) else ast.Load())
        rest = node.slice.elts[1:] if isinstance(node.slice, ast.Tuple) else []
        if not rest and isinstance(node.ctx, ast.Store):
            # (`T[i] = v` is a store into the row, cast to its dtype and broadcast to its shape:
            # `r[...] = v`, not a new value for the name; fuzz store2 seed 956036)
            return ast.copy_location(ast.Subscript(value=ast.Name(id=self.row, ctx=ast.Load()),
                                                   slice=ast.Constant(value=Ellipsis), ctx=ast.Store()), node)
        if not rest:
            return ast.copy_location(name, node)
        sl = rest[0] if len(rest) == 1 else ast.Tuple(elts=list(rest), ctx=ast.Load())
        return ast.copy_location(ast.Subscript(value=ast.Name(id=self.row, ctx=ast.Load()), slice=sl, ctx=node.ctx),
                                 node)


def _inner_row_stores(stmts: list, index: str):
    """Stores into the outer loop's own row from an inner loop (`for j in range(T - 1):`
    / `labels[i, j] = ids[i, j + 1] if m[i, j + 1] else -100`): the row cloned before the inner
    loop (`r = labels[i].clone()`), the inner loop's stores into the clone (`r[j] = ..`, a tensor
    the iteration made, under vmap one row per iteration), and the row stored after it
    (`labels[i] = r`). The same values: `T[i, e..]` of a tensor is `T[i][e..]`. Only where the
    tensor is a name the body never binds nor reads (but in these stores), every store of it in
    the inner loop is a plain `T[i, ..] = v` statement (at its top level or under `if`s), and no
    statement before the inner loop writes it (later ones may: stores of the row after this
    one's). Returns (statements, the clones' names)."""
    out, rows = [], set()
    bound: dict = {}      # name -> the values the outer body and the inner loop bind it to
    for other in stmts:
        for n in fastast.walk(other):
            if isinstance(n, ast.Assign):
                for tg in n.targets:
                    for e in fastast.walk(tg):
                        if isinstance(e, ast.Name) and isinstance(e.ctx, ast.Store):
                            bound.setdefault(e.id, []).append(n.value if tg is e else None)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                bound.setdefault(n.target.id, []).append(
                    ast.BinOp(left=ast.Name(id=n.target.id, ctx=ast.Load()), op=n.op, right=n.value))
            elif isinstance(n, (ast.For, ast.comprehension)):
                for e in fastast.walk(n.target):
                    if isinstance(e, ast.Name):
                        bound.setdefault(e.id, []).append(None)
    for pos, st in enumerate(stmts):
        if not (isinstance(st, ast.For) and not st.orelse):
            out.append(st)
            continue
        stores: dict = {}
        backs = []

        def under_ifs(block):
            for x in block:
                yield x
                if isinstance(x, ast.If):
                    yield from under_ifs(x.body)
                    yield from under_ifs(x.orelse)
        for inner in under_ifs(st.body):
            t = inner.targets[0] if isinstance(inner, ast.Assign) and len(inner.targets) == 1 else None
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and isinstance(t.slice, ast.Tuple) \
                    and len(t.slice.elts) >= 2 and isinstance(t.slice.elts[0], ast.Name) \
                    and t.slice.elts[0].id == index and t.value.id != index \
                    and not any(isinstance(e, (ast.Starred, ast.NamedExpr)) for e in fastast.walk(t.slice)):
                stores.setdefault(t.value.id, []).append(inner)
        for name, mine in sorted(stores.items()):
            targets = {id(m.targets[0].value) for m in mine}
            # the tensor's every other appearance: none in the body but later top-level stores
            # of rows (`labels[i, T - 1] = -100` after the inner loop)
            bad = False
            for k, other in enumerate(stmts):
                for n in fastast.walk(other):
                    if isinstance(n, ast.Name) and n.id == name and id(n) not in targets:
                        later_store = k > pos and isinstance(other, ast.Assign) and len(other.targets) == 1 \
                            and isinstance(other.targets[0], ast.Subscript) and other.targets[0].value is n \
                            and name not in nm.load_ids(other.value) \
                            and name not in nm.load_ids(other.targets[0].slice)
                        if not later_store:
                            bad = True
            if bad or any(name in nm.stores(other) for other in stmts) or \
                    any(name in nm.load_ids(m.value) for m in mine):
                continue
            row = f"{ROW_CLONE}{len(rows)}"
            values = [_row_value(m.value, row, bound, {index} | set(nm.target_names(st.target))) for m in mine]
            if any(v is None for v in values):
                continue
            rows.add(row)
            for m, v in zip(mine, values):
                m.value = v
                t = m.targets[0]
                rest = t.slice.elts[1:]
                m.targets = [ast.copy_location(ast.Subscript(
                    value=ast.Name(id=row, ctx=ast.Load()),
                    slice=rest[0] if len(rest) == 1 else ast.Tuple(elts=rest, ctx=ast.Load()), ctx=ast.Store()), t)]
            clone = ast.Assign(targets=[ast.Name(id=row, ctx=ast.Store())],
                               value=ast.Call(func=ast.Attribute(
                                   value=ast.Subscript(value=ast.Name(id=name, ctx=ast.Load()),
                                                       slice=ast.Name(id=index, ctx=ast.Load()), ctx=ast.Load()),
                                   attr="clone", ctx=ast.Load()), args=[], keywords=[]))
            back = ast.Assign(targets=[ast.Subscript(value=ast.Name(id=name, ctx=ast.Load()),
                                                     slice=ast.Name(id=index, ctx=ast.Load()), ctx=ast.Store())],
                              value=ast.Name(id=row, ctx=ast.Load()))
            for made, at in ((clone, st), (back, st)):
                ast.copy_location(made, at)
                made.end_lineno, made.end_col_offset = at.lineno, at.col_offset
                ast.fix_missing_locations(made)
            out.append(clone)
            backs.append(back)
        out.append(st)
        out.extend(backs)
    return out, rows


_MASK_FUNCTIONS = frozenset(("isnan", "isinf", "isfinite", "isposinf", "isneginf", "isreal", "logical_and",
                             "logical_or", "logical_xor", "logical_not", "eq", "ne", "lt", "le", "gt", "ge",
                             "greater", "less", "greater_equal", "less_equal", "not_equal", "isin", "isclose"))


def _mask_like(node: ast.AST, masks: set) -> bool:
    """Whether `node` is written as a boolean mask: a comparison, `~` / `&` / `|` / `^` of masks,
    a torch function or tensor method that gives one (`torch.isnan(v)`, `v.eq(0)`, `.bool()`),
    or a name `masks` holds (bound to one earlier in the body)."""
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.Name):
        return node.id in masks
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        return _mask_like(node.operand, masks)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return _mask_like(node.left, masks) and _mask_like(node.right, masks)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in _MASK_FUNCTIONS or node.func.attr == "bool" and not node.args
    return False


def _row_mask_stores(stmts: list, index: str) -> list:
    """`out[i][mask] = v` (a top-level statement; `out[i]` the loop index alone, `mask` written as
    a boolean mask, _mask_like) as `r = out[i].clone()`, `r[mask] = v`, `out[i] = r`: the
    same values in the row (a mask store into a tensor the iteration made is a masked fill
    where that is the same write, runtime.masked_put), and a store of the row the batch makes
    at once (`labels[i][labels[i] == pad] = -100`; merged into `out[i, mask]`, a scatter by a
    bool index, it could not be). The body reads the row before its store, as the store's own
    row; the loop as written stays the fallback (a list of rows fails the guard)."""
    out, masks, k = [], set(), 0
    written: set = set()      # names an earlier statement writes into or binds
    for st in stmts:
        t = st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 else None
        inner = t.value if isinstance(t, ast.Subscript) else None
        lead = (inner.slice.elts[0] if isinstance(inner.slice, ast.Tuple) and inner.slice.elts else inner.slice) \
            if isinstance(inner, ast.Subscript) else None
        before = out[-1] if out else None
        merged = isinstance(before, ast.Assign) and len(before.targets) == 1 \
            and isinstance(before.targets[0], ast.Subscript) and isinstance(inner, ast.Subscript) \
            and ast.dump(before.targets[0].value) == ast.dump(inner.value) \
            and ast.dump(before.targets[0].slice, include_attributes=False) == ast.dump(inner.slice, include_attributes=False)
        name = inner.value.id if isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name) else None
        # the mask and the value must read the row as the clone holds it: no earlier write into
        # the tensor in the iteration (a store, an in-place method read as one, an earlier mask
        # store), except the row's store right before, when neither reads the tensor at all
        fresh_row = name is not None and (name not in written - ({name} if merged else set())) and not (
            merged and name in nm.load_ids(t.slice) | nm.load_ids(st.value))
        if merged and not fresh_row:
            merged = False
        if isinstance(lead, ast.Name) and lead.id == index and name is not None \
                and name != index and _mask_like(t.slice, masks) and fresh_row and (merged or name not in written) \
                and not any(isinstance(e, ast.Starred) for e in fastast.walk(inner.slice)):
            row = f"_av_mrow{k}"
            k += 1
            made = [ast.Assign(targets=[ast.Name(id=row, ctx=ast.Store())],
                               value=ast.Call(func=ast.Attribute(value=fastast.clone(inner), attr="clone",
                                                                 ctx=ast.Load()), args=[], keywords=[])),
                    ast.Assign(targets=[ast.Subscript(value=ast.Name(id=row, ctx=ast.Load()), slice=t.slice,
                                                      ctx=ast.Store())], value=st.value),
                    ast.Assign(targets=[ast.Subscript(value=fastast.clone(inner.value), slice=fastast.clone(inner.slice),
                                                      ctx=ast.Store())], value=ast.Name(id=row, ctx=ast.Load()))]
            if merged:
                # (`out[i] = e` right before: `r[...] = e` into the clone, read before that store,
                # converts `e` as the store would; the row's one store is the last)
                out.pop()
                made.insert(1, ast.Assign(targets=[ast.Subscript(value=ast.Name(id=row, ctx=ast.Load()),
                                                                 slice=ast.Constant(value=Ellipsis), ctx=ast.Store())],
                                          value=before.value))
            for m in made:
                ast.copy_location(m, st)
                m.end_lineno, m.end_col_offset = st.end_lineno, st.end_col_offset
                ast.fix_missing_locations(m)
            out.extend(made)
            written.add(name)
            continue
        written |= nm.mutated(st)
        if any(isinstance(c, ast.Call) and nm.in_place_keyword(c) for c in fastast.walk(st)):
            written |= nm.load_ids(st)     # (`out=` / `inplace=` may write into anything it reads)
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            (masks.add if _mask_like(st.value, masks) else masks.discard)(st.targets[0].id)
        else:
            masks -= nm.stores(st)
        out.append(st)
    return out


class _ChainedStores(ast.NodeTransformer):
    """`out[i][j] = v` (and `+=`) writes as `out[i, j] = v`: with `i` a loop index (a Python
    int), `out[i]` drops dimension 0 and `[j]` then indexes what was dimension 1, whatever `j`
    is (an int, a slice, a tensor, a tuple of them). On a value that is not a tensor (a list
    of rows) the merged write fails and the original loop runs."""

    def __init__(self, indices):
        self.indices = set(indices)

    def _merge(self, t):
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Subscript) \
                and isinstance(t.value.value, ast.Name) and isinstance(t.value.slice, ast.Name) \
                and t.value.slice.id in self.indices:
            rest = t.slice.elts if isinstance(t.slice, ast.Tuple) else [t.slice]
            if not any(isinstance(e, ast.Starred) for e in rest):
                merged = ast.Tuple(elts=[fastast.clone(t.value.slice)] + [fastast.clone(e) for e in rest],
                                   ctx=ast.Load())
                return ast.copy_location(ast.Subscript(value=fastast.clone(t.value.value), slice=merged,
                                                       ctx=ast.Store()), t)
        return t

    def visit_Assign(self, node):
        if len(node.targets) == 1:
            node.targets = [self._merge(node.targets[0])]
        return node

    def visit_AugAssign(self, node):
        node.target = self._merge(node.target)
        return node


# in-place tensor methods whose effect on a tensor `t` of the result's dtype and shape is
# `t.copy_(t.<name without _>(args))`: one elementwise operation written into `t` (the
# out-of-place twin computes the same values with the same arguments)
_ELEMENTWISE_METHODS = frozenset("""
    abs_ absolute_ neg_ negative_ relu_ sqrt_ rsqrt_ exp_ exp2_ expm1_ log_ log1p_ log2_ log10_
    sin_ cos_ tan_ tanh_ sinh_ cosh_ asin_ acos_ atan_ asinh_ acosh_ atanh_ arcsin_ arccos_ arctan_
    sigmoid_ logit_ floor_ ceil_ round_ trunc_ fix_ frac_ sign_ sgn_ reciprocal_ square_ erf_ erfc_
    erfinv_ deg2rad_ rad2deg_ nan_to_num_ clamp_ clamp_min_ clamp_max_ clip_ pow_ float_power_ fmod_
    remainder_ lerp_ masked_fill_ addcmul_ addcdiv_ add_ sub_ mul_ div_ subtract_ multiply_ divide_
    true_divide_ floor_divide_ atan2_ hypot_ copysign_ xlogy_ bitwise_and_ bitwise_or_ bitwise_xor_
    bitwise_not_""".split())
# in-place methods that write a row at positions their arguments give, whose out-of-place twin
# gives the same values, dtype and shape (and raises where the method does: a source of another
# dtype, an index out of range): `out[b].scatter_(0, idx, v)` read as `out[b] = out[b].scatter(0,
# idx, v)`, with the store's method checks (probeC's repetition penalty)
_ROW_METHODS = _ELEMENTWISE_METHODS | frozenset({"scatter_", "scatter_add_", "index_fill_", "index_add_",
                                                 "index_copy_", "masked_scatter_"})


class _InPlaceUpdates(ast.NodeTransformer):
    """In-place methods on a row, as statements, read as stores into the row. With `i` a loop
    index (a Python int) and the rest of the subscript ints and slices, `x[i]` of a tensor is a
    view, which the method updates in place:

    - `x[i].add_(v)` (sub_, mul_, div_; one argument): `x[i] += v`, the same one in-place
      operation (the augmented form then writes the view onto itself);
    - `x[i].clamp_(min=0)` (the other _ROW_METHODS, and add_ .. with keywords):
      `x[i] = x[i].clamp(min=0)`, Output.method "clamp_": the in-place method raises where
      the result does not keep the row's dtype and shape, where the store would cast or drop
      leading 1s, and under gradients its backward may need the rows it overwrites (runtime
      fit_store checks all three: the loop decides);
    - `x[i].copy_(v)`: `x[i] = v` (method "copy_": copy_ broadcasts and casts as setitem
      does, but drops no leading 1s); `x[i].fill_(v)`: `x[i] = v` (method "fill_": `v` must
      be one number); `x[i].zero_()`: `x[i] = 0` (method "zero_").

    Not with tensors in the subscript: there `x[idx]` is a copy, which the method would update
    and drop. On a value that is not a tensor (a list of rows) the rewrite's guard refuses, and
    the original loop runs. The method's value (the row itself) is dropped: only statements."""

    _OPS = {"add_": ast.Add, "sub_": ast.Sub, "mul_": ast.Mult, "div_": ast.Div}

    def __init__(self, indices):
        self.indices = set(indices)

    def _basic(self, e) -> bool:
        if isinstance(e, ast.Constant):
            return type(e.value) is int or e.value is None
        if isinstance(e, ast.Name):
            return e.id in self.indices
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return self._basic(e.operand)
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
            return self._basic(e.left) and self._basic(e.right)
        if isinstance(e, ast.Slice):
            return all(p is None or self._basic(p) for p in (e.lower, e.upper, e.step))
        return False

    def _row(self, call):
        """The subscript `x[i, ..]` the method is called on, where it is a view of a named value
        at the loop index; else None."""
        return self.row_of(call.func.value)

    def row_of(self, sub):
        """`sub` where it is `x[i, ..]`, a view of a named value at the loop index; else None."""
        if not isinstance(sub, ast.Subscript):
            return None
        root = sub.value
        while isinstance(root, ast.Attribute):
            root = root.value
        entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
        if not isinstance(root, ast.Name) or not all(self._basic(e) for e in entries) or not any(
                isinstance(n, ast.Name) and n.id in self.indices for e in entries for n in fastast.walk(e)):
            return None
        return sub

    def _chain(self, call):
        """`x[i].sub_(m).div_(s)`: the calls of a chain of in-place methods on a row, innermost
        first (each returns the row itself, so each is the same method on `x[i]`, run in turn:
        `x[i].sub_(m)` then `x[i].div_(s)`, `s` read after the first, as in the chain); else None."""
        calls = []
        while isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr.endswith("_") \
                and (call.func.attr in _ROW_METHODS or call.func.attr in ("copy_", "fill_", "zero_")):
            calls.append(call)
            call = call.func.value
        if len(calls) < 2 or self._row(calls[-1]) is None:
            return None
        row = calls[-1].func.value
        return [ast.copy_location(ast.Call(func=ast.copy_location(ast.Attribute(
            value=fastast.clone(row), attr=c.func.attr, ctx=ast.Load()), c.func), args=c.args, keywords=c.keywords), c)
            for c in reversed(calls)]

    def visit_Expr(self, node):
        chain = self._chain(node.value)
        if chain is not None:
            return [self.visit_Expr(ast.fix_missing_locations(ast.copy_location(ast.Expr(value=c), node)))
                    for c in chain]
        call = node.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and not any(isinstance(a, ast.Starred) for a in call.args)
                and all(k.arg is not None for k in call.keywords)):
            return node
        name, args, keywords = call.func.attr, call.args, call.keywords
        plain = name in self._OPS and len(args) == 1 and not keywords
        if not (plain or name in _ROW_METHODS or name in ("copy_", "fill_") and len(args) == 1
                and not keywords or name == "zero_" and not args and not keywords):
            return node
        sub = self._row(call)
        if sub is None:
            return node
        target = ast.copy_location(ast.Subscript(value=sub.value, slice=sub.slice, ctx=ast.Store()), sub)
        if plain:
            return ast.copy_location(ast.AugAssign(target=target, op=self._OPS[name](), value=args[0]), node)
        if name in ("copy_", "fill_"):
            value = args[0]
        elif name == "zero_":
            value = ast.copy_location(ast.Constant(value=0), call)
        else:
            row = ast.copy_location(ast.Subscript(value=fastast.clone(sub.value), slice=fastast.clone(sub.slice),
                                                  ctx=ast.Load()), sub)
            twin = ast.copy_location(ast.Attribute(value=row, attr=name[:-1], ctx=ast.Load()), call.func)
            value = ast.copy_location(ast.Call(func=twin, args=args, keywords=keywords), call)
        store = ast.copy_location(ast.Assign(targets=[target], value=value), node)
        store._av_method = name       # (the store's Output.method: runtime fit_store checks what the method would)
        return ast.fix_missing_locations(store)


def _row_aliases(stmts: list, indices) -> list:
    """`r = x[i]` (a view of a named value's row at the loop index) and then `r[r < 0] = 0`,
    `r += b` or `r.clamp_(0)`: each use of `r` after it read as `x[i]` itself, so that its
    updates are the row's (`x[i][x[i] < 0] = 0`, `x[i] += b`), which the rest of the analysis
    takes as stores into the row. The same memory either way, where nothing rebinds `r`, `x` or
    a name of the index, and nothing replaces a slot of `x` (`x[j] = ..`: in a list of tensors
    that slot then holds another object, where `r` keeps the old one). The binding itself stays
    (`r` after the loop is the last row). Only where `r` is updated in place; the loop as written
    stays the fallback."""
    rows = _InPlaceUpdates(indices)
    bound = set()
    for st in stmts:
        bound |= nm.stores(st)
    out = list(stmts)
    for k, st in enumerate(stmts):
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                and isinstance(st.value, ast.Subscript) and isinstance(st.value.value, ast.Name)
                and rows.row_of(st.value) is not None):
            continue
        r, row, base = st.targets[0].id, st.value, st.value.value.id
        later = out[k + 1:]
        if base in bound or nm.load_ids(row.slice) & bound - {r} or r in nm.load_ids(row.slice) \
                or any(r in nm.load_ids(e) or r in nm.stores(e) for e in out[:k]):
            continue
        names = [n for e in later for n in fastast.walk(e) if isinstance(n, ast.Name) and n.id == r]
        aug = {id(e.target) for s2 in later for e in fastast.walk(s2) if isinstance(e, ast.AugAssign)}
        if any(not isinstance(n.ctx, ast.Load) and id(n) not in aug for n in names) or any(
                isinstance(e, (ast.Lambda, ast.FunctionDef, ast.ListComp, ast.SetComp, ast.DictComp,
                               ast.GeneratorExp, ast.For, ast.While)) and r in nm.load_ids(e) | nm.stores(e)
                for s2 in later for e in fastast.walk(s2)):
            continue       # (nor inside an inner loop: `acc = x[i, 0]` summed into by one stays a running value)
        if any(isinstance(n, ast.Subscript) and not isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
               and n.value.id == base for e in out for n in fastast.walk(e)):
            continue
        updated = any(id(n) in aug for n in names) or any(
            isinstance(n, ast.Subscript) and not isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
            and n.value.id == r for e in later for n in fastast.walk(e)) or any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_")
            and isinstance(n.func.value, ast.Name) and n.func.value.id == r for e in later for n in fastast.walk(e))
        if not names or not updated:
            continue
        swap = _ReplaceName(r, row)
        swap.stores = True
        out[k + 1:] = [ast.fix_missing_locations(swap.visit(fastast.clone(e))) for e in later]
    return out


def _merge_resets(stmts: list) -> list:
    """`if c: h = 0` before `h = <affine in h>` or `h += v` (a running value reset under a
    condition: returns at episode ends, sums per segment, counts since a reset) reads as the one
    update with `h` replaced by `h * (not c)`: where the condition holds the old value drops out
    (a factor of 0, exact for the finite values the batched recurrence admits), elsewhere it
    stays (a factor of 1). `not c` is the loop's own truth test (NaN counts as true; several
    elements raise), and a Python bool, so the factor takes the running value's dtype as `gamma *
    h` does. The reset value must be the constant 0 or 0.0; the payload "reset:0" ("reset+=:0"
    for `+=`) carries it to runtime._reset_keeps, which checks what a reset changes (the types
    after it, and for `+=` a start the loop would update in place)."""
    out = []
    k = 0
    while k < len(stmts):
        s = stmts[k]
        h = s.body[0].targets[0].id if (
            isinstance(s, ast.If) and not s.orelse and len(s.body) == 1 and isinstance(s.body[0], ast.Assign)
            and len(s.body[0].targets) == 1 and isinstance(s.body[0].targets[0], ast.Name)
            and _is_zero(s.body[0].value)) else None
        # the update: the next statement, or a later one where the statements between read the
        # value as the reset left it (`if starts[t]: p = 0` / `pos[t] = p` / `p += 1`: position
        # ids); each such read becomes `(0 if c else p)`, the value before the step where the
        # condition does not hold, which the scan gives (an exclusive scan: analysis._scans lets
        # stores alone read it)
        j = k + 1
        while h is not None and j < len(stmts) and _reset_update(stmts[j], h) is None:
            j += 1
        if h is not None and j < len(stmts) and not any(
                h in nm.stores(st) or nm.stores(st) & nm.load_ids(s.test) or any(
                    isinstance(n, (ast.For, ast.While, ast.FunctionDef, ast.Lambda, ast.ListComp, ast.SetComp,
                                   ast.DictComp, ast.GeneratorExp, ast.NamedExpr)) for n in fastast.walk(st))
                for st in stmts[k + 1:j]):
            nxt, update, aug = stmts[j], _reset_update(stmts[j], h), isinstance(stmts[j], ast.AugAssign)
            if h not in nm.load_ids(s.test) and h in nm.load_ids(update) and _affine_in(update, h) is not None:
                read = ast.IfExp(test=fastast.clone(s.test), body=ast.Constant(value=s.body[0].value.value),
                                 orelse=ast.Name(id=h, ctx=ast.Load()))
                between = [ast.fix_missing_locations(_ReplaceName(h, read).visit(fastast.clone(st)))
                           for st in stmts[k + 1:j]]
                out.extend(between)
                keep = ast.UnaryOp(op=ast.Not(), operand=fastast.clone(s.test))
                value = _ReplaceName(h, ast.BinOp(left=ast.Name(id=h, ctx=ast.Load()), op=ast.Mult(),
                                                  right=keep)).visit(fastast.clone(update))
                merged = ast.copy_location(ast.Assign(targets=[ast.Name(id=h, ctx=ast.Store())], value=value), nxt)
                merged._av_reset = ("reset+=:" if aug else "reset:") + repr(s.body[0].value.value)
                out.append(ast.fix_missing_locations(_located(merged, nxt.lineno)))
                k = j + 1
                continue
        out.append(s)
        k += 1
    return out


def _is_zero(node) -> bool:
    """The constant 0 or 0.0 (a reset's or a restart's number)."""
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 0


def _select_resets(stmts: list) -> list:
    """`h = 0 if c else <affine in h>` (or the other way round, or as an `if` / `else` of the two
    assignments: streaks, run lengths, counters that restart) reads as the one update
    `h = h * keep * a + (0 if c else b)`, keep `not c` (`not not c` the other way round): where
    the condition resets, the old value drops out (a factor of 0) and the term is the loop's own
    0; elsewhere it is the update. The recurrence's payload is "select:0": the running values must
    be Python numbers of the reset number's type (runtime._select_keeps), as the loop's are
    after a reset."""
    out = []
    for s in stmts:
        orig = s
        rest = None     # (the branches' later statements, under the condition again: _branch_updates)
        updates = _branch_updates(s)
        if updates is not None:
            h, first, other = updates
            s = ast.copy_location(ast.Assign(targets=[ast.Name(id=h, ctx=ast.Store())], value=ast.copy_location(
                ast.IfExp(test=s.test, body=first, orelse=other), first)), s)
            if len(orig.body) > 1 or len(orig.orelse) > 1:
                rest = ast.copy_location(ast.If(test=fastast.clone(orig.test), body=orig.body[1:] or [ast.Pass()],
                                                orelse=orig.orelse[1:]), orig)
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
                and isinstance(s.value, ast.IfExp):
            h, v = s.targets[0].id, s.value
            zero_first = _is_zero(v.body)
            other = v.orelse if zero_first else v.body if _is_zero(v.orelse) else None
            form = _affine_in(other, h) if other is not None and h not in nm.load_ids(v.test) \
                and h in nm.load_ids(other) else None
            if form is not None and form[0] is not _ZERO:
                a, b = form
                zero = (v.body if zero_first else v.orelse).value
                keep = ast.UnaryOp(op=ast.Not(), operand=fastast.clone(v.test))
                if not zero_first:
                    keep = ast.UnaryOp(op=ast.Not(), operand=keep)
                term = ast.BinOp(left=ast.Name(id=h, ctx=ast.Load()), op=ast.Mult(), right=keep)
                if a is not _ONE:
                    term = ast.BinOp(left=term, op=ast.Mult(), right=_materialize(a, other))
                # (the term times the keep flag: 0 where it resets; a term of -0.0 keeps the loop,
                # runtime._linear_prefix, so the loop's +0 is the batch's too. Without a factor,
                # `run += v` / `run = 0`, the term plus 0: a negative value times the flag 0 is
                # -0.0, which `+ 0` makes +0.0 (no other value changes). The same sums: from a start
                # that is not -0.0 (runtime._select_keeps) the loop's value is never -0.0, and
                # adding -0.0 or +0.0 to it gives the same)
                b_src = ast.Constant(value=0) if b is _ZERO else _materialize(b, other)
                b_sel = ast.BinOp(left=b_src, op=ast.Mult(), right=fastast.clone(keep))
                if a is _ONE:
                    b_sel = ast.BinOp(left=b_sel, op=ast.Add(), right=ast.Constant(value=0))
                merged = ast.copy_location(ast.Assign(targets=[ast.Name(id=h, ctx=ast.Store())],
                                                      value=ast.BinOp(left=term, op=ast.Add(), right=b_sel)), s)
                merged._av_reset = "select:" + repr(zero)
                out.append(ast.fix_missing_locations(_located(merged, s.lineno)))
                if rest is not None:
                    out.append(ast.fix_missing_locations(rest))
                continue
        out.append(orig)
    return out


def _branch_updates(s):
    """`if c: h = a [..] else: h = b [..]` (or `h += v` / `h -= v`, `h - v` where `h` is the
    Python number _select_keeps requires, as it is after a reset): (h, a, b), the values each
    side gives `h` first, or None. With more statements on a side, the update reads as `h = a if
    c else b` and the rest as `if c: ..` / `else: ..` after it, which evaluates `c` twice: it must
    not read `h`, and neither it nor the values may bind or change anything (no `:=`, no in-place
    call), so that the second evaluation is the first's."""
    if not (isinstance(s, ast.If) and s.body and s.orelse):
        return None
    firsts = (s.body[0], s.orelse[0])
    names = {n.id for b in firsts for n in ([b.targets[0]] if isinstance(b, ast.Assign) and len(b.targets) == 1
                                             else [b.target] if isinstance(b, ast.AugAssign) else [])
             if isinstance(n, ast.Name)}
    if len(names) != 1:
        return None
    h = names.pop()
    sides = [_reset_update(b, h) for b in firsts]
    if sides[0] is None or sides[1] is None:
        return None       # (a side that does not update `h` first, or updates it otherwise)
    plain = len(s.body) == 1 and len(s.orelse) == 1 and all(isinstance(b, ast.Assign) for b in firsts)
    if not plain and (h in nm.load_ids(s.test) or any(
            any(isinstance(n, ast.NamedExpr) for n in fastast.walk(e)) or nm.mutated(e)
            for e in (s.test, *sides))):
        return None
    return h, sides[0], sides[1]


def _reset_update(s, h: str):
    """The value `s` gives `h` after a reset: `h = <expression>`, or `h + v` / `h - v` for
    `h += v` / `h -= v` (the same values where `h` is a Python number or a tensor the loop made
    after a reset: linear_prefix refuses a tensor start, which `+=` would update in place), or None."""
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) and s.targets[0].id == h:
        return s.value
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id == h \
            and isinstance(s.op, (ast.Add, ast.Sub)) and h not in nm.load_ids(s.value):
        return ast.copy_location(ast.BinOp(left=ast.Name(id=h, ctx=ast.Load()), op=type(s.op)(),
                                           right=fastast.clone(s.value)), s.value)
    return None


class _ReplaceName(ast.NodeTransformer):
    stores = False      # also `name += v` (_row_aliases: an update of what `name` stands for)

    def __init__(self, name, new):
        self.name, self.new = name, new

    def visit_Name(self, node):
        if node.id == self.name and isinstance(node.ctx, ast.Load):
            return self._placed(fastast.clone(self.new), node)
        if node.id == self.name and self.stores and isinstance(node.ctx, ast.Store):
            new = fastast.clone(self.new)
            new.ctx = ast.Store()
            return self._placed(new, node)
        return node

    def _placed(self, new, node):
        if not self.stores:
            return ast.copy_location(new, node)
        # (_row_aliases: every node of `x[i]` where `r` was, so that the analysis's order of reads
        # and stores, by line and column, is the statement's own)
        for n in fastast.walk(new):
            ast.copy_location(n, node)
        return new


class _UnitSlices(ast.NodeTransformer):
    """`x[i:i + 1]` (and `x[:, i:i + 1]`) reads as `x[i].unsqueeze(0)`: the same view while i is in
    range (the guards check that; out of range the original loop runs)."""

    def __init__(self, index: str):
        self.index = index

    def visit_Subscript(self, node: ast.Subscript):
        node = self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        entries = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for d, e in enumerate(entries):
            if not (isinstance(e, ast.Slice) and e.lower is not None and e.upper is not None
                    and (e.step is None or isinstance(e.step, ast.Constant) and e.step.value == 1)):
                continue
            lo, hi = _affine(e.lower, self.index), _affine(e.upper, self.index)
            if lo is None or hi is None or hi != lo + 1 or not all(_full_slice(x) for x in entries[:d]):
                continue
            if any(isinstance(x, ast.Constant) and x.value in (None, Ellipsis) for x in entries):
                continue
            picked = list(entries)
            picked[d] = e.lower
            sl = picked[0] if len(picked) == 1 else ast.Tuple(elts=picked, ctx=ast.Load())
            inner = ast.Subscript(value=node.value, slice=sl, ctx=ast.Load())
            inner._av_unit = True      # (a slice: before the first row it is empty, never Python's wrap)
            # later integer entries remove dimensions after d, so d stays d
            call = ast.Call(func=ast.Attribute(value=inner, attr="unsqueeze", ctx=ast.Load()),
                            args=[ast.Constant(d)], keywords=[])
            return ast.copy_location(_located(call, node.lineno), node)
        return node


def _exclusive(p1: tuple, p2: tuple) -> bool:
    """Two places in the body that never both run in one iteration (opposite branches)."""
    d1 = dict(p1)
    return any(k in d1 and d1[k] != b for k, b in p2)


def _walk(stmts, body: _Body, ctx: Context, depth: int, path: tuple = ()) -> list[ast.stmt]:
    out = []
    for s in stmts:
        if isinstance(s, ast.Pass):
            continue
        if id(s) in body.fresh_stores:
            # (a write into a tensor this iteration made: a statement of the body like any other)
            _check_stmt(s, body, own_store=True)
            out.append(s)
            continue
        if depth == 0 and isinstance(s, ast.For) and body.top is not None:
            out, s = _inner_loop(s, body, ctx, out)
            _check_stmt(s, body)
            out.append(s)
            for n in fastast.walk(s):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    body.assigned.setdefault(n.id, n.lineno)
            continue
        if isinstance(s, ast.If):
            # (under a condition, depth > 0: the best of the iterations where it holds, its
            # markers assigned in the branch, which if-conversion gives a mask)
            best = _tracker(s, body, depth)
            if best is not None:
                out.extend(best)
                continue
            inner = _and_tracker(s)
            if inner is not None:
                best = _tracker(inner.body[0], body, depth + 1)
                if best is not None:
                    body.branches = True
                    out.append(ast.copy_location(ast.If(test=inner.test, body=best, orelse=[]), s))
                    continue
        best = _max_call(s, body, ctx, depth)
        if best is not None:
            out.extend(best)
            continue
        if isinstance(s, ast.If):
            body.branches = True
            new = ast.If(test=s.test, body=_walk(s.body, body, ctx, depth + 1, path + ((id(s), 0),)) or [ast.Pass()],
                         orelse=_walk(s.orelse, body, ctx, depth + 1, path + ((id(s), 1),)))
            out.append(ast.copy_location(new, s))
            continue
        chain = _sum_chain(s)
        if chain is not None and chain[0] not in body.varying and chain[0] not in body.assigned \
                and not any(key[1] == chain[0] for key in body.seen):
            out.extend(_terms_output(s, chain, body, depth))
            continue
        found = _output(s)
        if found is not None and found[0].kind in ("accum", "cat") and (
                found[0].target in body.varying or found[0].target in body.assigned):
            found = None  # `row = row * s` on a value of this iteration: an ordinary assignment
        red = _reduce_store(s, ctx) if found is not None and found[0].kind == "store" and not found[0].method else None
        if red is not None:
            entries = _scatter_entries(red[0], body)
            if entries is not None:
                sub, value, op, form = red
                o = dataclasses.replace(found[0], op=op, consumer=form, inplace=form == "inplace")
                out.extend(_scatter_output(s, (o, (sub, value)), entries, body, depth))
                continue
        if found is not None and found[0].kind == "store" and found[0].op in ("", "+", "-") and not found[0].method:
            flat = _chained_scatter(found[1][0], body)
            entries = _scatter_entries(flat, body) if flat is not None else None
            if entries is not None and len(entries) == 2:
                o = dataclasses.replace(found[0], chained=True)
                out.extend(_scatter_output(s, (o, (flat, found[1][1])), entries, body, depth))
                continue
            entries = _scatter_entries(found[1][0], body)
            if entries is not None:
                out.extend(_scatter_output(s, found, entries, body, depth))
                continue
        rec = s
        if depth == 0 and found is None and isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) \
                and isinstance(s.op, (ast.Add, ast.Sub)) and s.target.id in nm.load_ids(s.value):
            # `mean += (x[i] - mean) / (i + 1)` (a running mean, an EMA in update form): `mean = mean +
            # (..)`, which it is where `mean` is a Python number; a tensor start the loop would update
            # in place keeps the loop (runtime._linear_prefix's "+="), as does handing the running
            # tensor on between updates (_scans)
            h = s.target.id
            rec = ast.copy_location(ast.Assign(targets=[ast.Name(id=h, ctx=ast.Store())], value=ast.copy_location(
                ast.BinOp(left=ast.Name(id=h, ctx=ast.Load()), op=type(s.op)(), right=fastast.clone(s.value)), s.value)), s)
            rec._av_reset = "+="
        lin = _linear_recurrence(rec) if depth == 0 and found is None else None
        if lin is not None and lin[0] not in body.varying and lin[0] not in body.assigned:
            name, a, b = lin
            mb, ma = body.marker(), body.marker()
            a, b = (ast.fix_missing_locations(_located(ast.copy_location(v, s.value), s.lineno)) for v in (a, b))
            o = Output("linrec", name, src(b), s.lineno, op="lin", marker=mb,
                       payloads=(("decay", ma, src(a), getattr(rec, "_av_reset", "")),))
            body.outputs.append((o, b))
            out.append(_located(ast.copy_location(ast.Assign(targets=[ast.Name(id=mb, ctx=ast.Store())],
                                                             value=b), s), s.lineno))
            out.append(_located(ast.copy_location(ast.Assign(targets=[ast.Name(id=ma, ctx=ast.Store())],
                                                             value=a), s), s.lineno))
            continue
        parts = _record(found[1], body) if found is not None and found[0].kind == "append" else None
        if parts is not None:
            out.extend(_record_outputs(found[0], parts, s, body, depth))
            continue
        if found is not None:
            o, payload = found
            value = payload[1] if o.kind == "store" else payload
            value, pytype = _strip_item(value)
            # a plain store of a constant in one branch and of a tensor in another is one store
            # (a constant carries no gradient; the store converts each value as setitem does)
            plain = o.kind == "store" and not o.op and pytype in ("", "const")
            key = (o.kind, o.target, o.index_src, o.op, o.inplace, o.method, "" if plain else pytype)
            twin = _twin(body.seen.get(key, []), path)
            if twin is None and o.kind == "accum" and o.op in ("+", "-") and (
                    pytype == "const" and _small_number(value) or pytype != "const" and _floaty(value)):
                # `total = total + a` on one side, `total = total - b` on another: one running
                # value, the second side's term negated: `t - b` is `t + -b` exactly where -b is
                # b's exact negation, a Python number's or a floating value's (an integer
                # tensor's may wrap in its own dtype before the sum promotes it: uint8, int8's
                # -128; a bool raises in both)
                other = "-" if o.op == "+" else "+"
                alt = key[:3] + (other,) + key[4:]
                twin = _twin(body.seen.get(alt, []), path)
                if twin is not None:
                    key = alt
                    value = ast.copy_location(ast.UnaryOp(op=ast.USub(), operand=value), value)
                    # (a Python bool start: the loop raises where a subtraction of a tensor comes
                    # first, `True - t`, and the negated term adds: runtime accumulate refuses it)
                    body.outputs = [(dataclasses.replace(b, signed=True) if b.marker == twin else b, pay)
                                    for b, pay in body.outputs]
            marker = twin or body.marker()
            body.seen.setdefault(key, []).append((path, marker))
            if twin is not None and plain and not pytype:
                body.outputs = [(dataclasses.replace(b, pytype="") if b.marker == twin else b, pay)
                                for b, pay in body.outputs]
            if twin is None:
                o = dataclasses.replace(o, marker=marker, cond=depth > 0, pytype=pytype, value=src(value),
                                        counted=getattr(value, "av_counted", ""))
                body.outputs.append((o, (payload[0], value) if o.kind == "store" else value))
            out.append(_located(ast.copy_location(ast.Assign(targets=[ast.Name(id=marker, ctx=ast.Store())],
                                                             value=value), s), s.lineno))
            if any(isinstance(n, ast.IfExp) for n in fastast.walk(value)):
                body.branches = True
            continue
        _check_stmt(s, body)
        for n in fastast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                body.assigned.setdefault(n.id, n.lineno)
            if isinstance(n, ast.IfExp):
                body.branches = True
        out.append(s)
    return out


def walked_names(it: ast.expr, ctx: Context | None = None) -> list | None:
    """The names an inner loop walks where its iterable is a name (`for c in coeffs`), or
    `reversed` / `enumerate` / `zip` of names (`enumerate(Ws, 1)`, `zip(Ws, bs)`), else None.
    Run inside a batched body the inner loop walks each once for every outer iteration, where
    the loop walks it again in each: runtime._walked_free checks that each is a list, tuple,
    range or tensor (walked alike every time; a generator or iterator would be used up by the
    first outer iteration). `ctx`: the builtins are the real ones."""
    if isinstance(it, ast.Name):
        return [it.id]
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("reversed", "enumerate", "zip")
            and not it.keywords and it.args and (ctx is None or _is_builtin(ctx, it.func.id))):
        return None
    args = list(it.args)
    if it.func.id == "enumerate" and len(args) == 2 and isinstance(args[1], ast.Constant) and type(args[1].value) is int:
        args = args[:1]
    if it.func.id != "zip" and len(args) != 1 or not all(isinstance(a, ast.Name) for a in args):
        return None
    return [a.id for a in args]


def _inner_loop(s: ast.For, body: _Body, ctx: Context, out: list) -> list:
    """An inner `for` loop at the top of the body, run as it is inside the batched body (under
    vmap each of its iterations is one batched step for every outer iteration): `acc = 0.0` /
    `for k in range(K): acc = acc + g ** k * r[t + k]`, `h = x[i]` / `for w in range(L): h =
    torch.tanh(h @ W[w])`. Only where every outer iteration runs it alike and it keeps to names:
    over `range(..)` of values the loop does not change; a body of assignments to names
    (`acc += v` on a value the iteration made, _fresh_value, or a number: never on a view of an
    input), `if`s on the inner index and unchanged values, nothing else (no store, call for its
    effect, exit or further loop). Reads in it of what the iteration wrote are checked by
    _check_carried; a branch of the outer body beside it is refused in _finish. A binding
    `acc = torch.zeros(d)` of a name the inner loop updates in place becomes `acc =
    torch.zeros(d)._av_own()` (_fresh_stores). Returns the statements before it."""
    line = s.lineno
    why = f"the inner loop at line {line}"
    if s.orelse:
        raise Refuse(f"{why} has an `else`", line)
    targets = nm.target_names(s.target)
    if not targets or not isinstance(s.target, (ast.Name, ast.Tuple)) or \
            isinstance(s.target, ast.Tuple) and not all(isinstance(e, ast.Name) for e in s.target.elts):
        raise Refuse(f"{why} binds something other than names", line)
    it = s.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and _is_builtin(ctx, "range") and not it.keywords and 1 <= len(it.args) <= 3
            and not any(isinstance(a, ast.Starred) for a in it.args)) and walked_names(it, ctx) is None:
        raise Refuse(f"{why} walks something other than `range(..)` or loop-invariant names (`for c in coeffs`, "
                     "`zip(Ws, bs)`, `reversed(..)`, `enumerate(..)` of them)", line)
    changed = body.written | set(body.varying)
    moving = nm.load_ids(it) & changed
    if moving:
        raise Refuse(f"{why} runs a number of times that changes with the outer loop (`{sorted(moving)[0]}`)", line)
    if _has_continue(s.body):
        # `if c: continue` then `rest` as `if c: .. else: rest`: the same steps (in place: the
        # body's own copy of the statement, which body.top holds too)
        s.body = _normalize_continue(s.body, [max(16 * sum(1 for st in s.body for _ in fastast.walk(st)), 4000)])
    augs = set()
    data = []       # `if`s on values that change with the outer loop (where-converted in the batch)
    breaks = []
    rows_in = []    # stores into an outer row's clone (_inner_row_stores)

    def visit(stmts, nested=False):
        for k, st in enumerate(stmts):
            if isinstance(st, ast.Pass) or isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
                continue
            if isinstance(st, ast.Assign) and all(
                    isinstance(t, ast.Name) or isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts)
                    for t in st.targets):
                continue
            if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
                augs.add(st.target.id)
                continue
            if isinstance(st, ast.Assign) and len(st.targets) == 1 \
                    and isinstance(st.targets[0], ast.Subscript) and isinstance(st.targets[0].value, ast.Name) \
                    and st.targets[0].value.id in body.own_rows:
                rows_in.append(st)      # (a store into the outer row's clone: _inner_row_stores)
                continue
            if isinstance(st, ast.Break) and nested and k == len(stmts) - 1:
                breaks.append(st)
                continue
            if isinstance(st, ast.If):
                if nm.load_ids(st.test) & (changed - set(targets)):
                    data.append(st)
                visit(st.body, True)
                visit(st.orelse, True)
                continue
            raise Refuse(f"line {st.lineno} in {why}: only assignments to names, `if`s and a `break` ending one "
                         "run inside a batched body", st.lineno)
    visit(s.body)
    if any(isinstance(n, ast.IfExp) and nm.load_ids(n.test) & (changed - set(targets))
           for st in rows_in for n in fastast.walk(st.value)):
        body.inner_branches = True      # (`r[j] = a if c else b` on the data: where-converted)
    if augs & set(targets):
        raise Refuse(f"{why} updates its own index in place", line)
    out = list(out)
    if data or breaks:
        s = _predicated(s, out, body, breaks, why)
        body.inner_branches = True
    for name in sorted(augs):
        # every binding of the name in the body: a value of its own or a number (`acc = 0.0`,
        # `acc = torch.zeros(d)`), so the in-place update never writes into an input
        binds = [n for st in body.top for n in fastast.walk(st) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.For))
                 and name in {t.id for tg in (n.targets if isinstance(n, ast.Assign) else [n.target])
                              for t in fastast.walk(tg) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}]
        for n in binds:
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                    and (_fresh_value(n.value, ctx) or _number_constant(n.value))):
                raise Refuse(f"`{name}` is updated in place in {why} and bound at line {n.lineno} to a value "
                             "that may be an input's memory", n.lineno)
        if not any(n in out for n in binds):
            raise Refuse(f"`{name}` is updated in place in {why} before the iteration binds it", line)
        for k in range(len(out) - 1, -1, -1):
            st = out[k]
            if isinstance(st, ast.Assign) and st in binds:
                # the value kept or viewed before the inner loop updates it in place (`out[i] =
                # acc`, `part = acc[i % 3]`): the loop's store copied it, its view sees the update
                late = next((w for w in out[k + 1:] if id(w) not in body.fresh_stores and _view_read(w, name, ctx)),
                            None)
                if late is not None:
                    raise Refuse(f"line {late.lineno} keeps `{name}` or a part of it before {why} updates it "
                                 "in place", late.lineno)
                if isinstance(st.value, ast.Call):
                    out[k] = _owned(st, ctx)
                break
        # (a store into an outer row's clone copies the value at once: rows_in)
        inside = next((w for w in fastast.walk(ast.Module(body=s.body, type_ignores=[])) if isinstance(w, ast.stmt)
                       and not isinstance(w, ast.If) and not any(w is r for r in rows_in)
                       and _view_read(w, name, ctx)), None)
        if inside is not None:
            raise Refuse(f"line {inside.lineno} in {why} keeps `{name}` or a part of it, which the inner loop "
                         "updates in place", inside.lineno)
    body.inner.append(s)
    return out, s


def _predicated(s: ast.For, before: list, body: _Body, breaks: list, why: str) -> ast.For:
    """An inner loop that branches on the data or ends early (`if v < edge: b = k; break`) in a
    form whose every iteration runs alike, for the batch's where-conversion (lowering.ifconvert):
    a `break` sets a flag the rest of the loop runs under (`_av_live = True` before the loop;
    `if _av_live:` around the body; `if c: b = k; _av_live = False`, and what follows under
    `if _av_live:` again). Later iterations then change nothing, as the loop's never ran. A name
    the inner loop binds that the outer body did not bind before it holds, after a `break` or
    a branch, a value some lanes never computed: refused where read after the inner loop.
    Returns the new loop; the flag's binding is appended to `before`."""
    bound_before = {n for st in before for n in nm.stores(st)}
    inner_names = {n.id for n in fastast.walk(ast.Module(body=s.body, type_ignores=[]))
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    rest = body.top[body.top.index(s) + 1:] if body.top is not None and s in body.top else []
    later = set().union(set(), *(nm.load_ids(st) for st in rest))
    for name in sorted((inner_names - bound_before) & later):
        raise Refuse(f"`{name}` is bound in {why}, which branches on the data or ends early, and read after it "
                     "(bind it before the inner loop)", s.lineno)
    # a Python int or bool the inner loop binds (`b = k`, `n += 1`, `found = True`) is an int64 or
    # bool tensor in the batch after its merge: refused where it meets float arithmetic, in which
    # a Python int makes a Python float (as the loop index's rule, _index_meets_floats). The
    # names whose every binding before the loop and in it is of ints and bools alone:
    targets = set(nm.target_names(s.target))
    if breaks and targets & later:
        raise Refuse(f"`{sorted(targets & later)[0]}`, the index of {why}, which may end early, is read after it",
                     s.lineno)
    binds: dict = {}
    for n in fastast.walk(ast.Module(body=list(before) + list(s.body), type_ignores=[])):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    binds.setdefault(t.id, []).append(n.value)
                else:
                    for e in fastast.walk(t):
                        if isinstance(e, ast.Name):
                            binds.setdefault(e.id, []).append(None)     # (unpacked: not known)
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            binds.setdefault(n.target.id, []).append(
                ast.BinOp(left=ast.Name(id=n.target.id, ctx=ast.Load()), op=n.op, right=n.value))
    ints = (inner_names - targets) & set(binds)
    shrank = True
    while shrank:
        shrank = False
        for name in sorted(ints):
            if not all(v is not None and _int_value(v, targets | ints) for v in binds[name]):
                ints.discard(name)
                shrank = True
    if ints and body.top is not None:
        bound = {n.id for st in body.top for n in fastast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        free = {n.id for st in body.top for n in fastast.walk(st) if isinstance(n, ast.Name)} - bound
        if _index_meets_floats(body.top, sorted(ints), free):
            raise Refuse(f"`{sorted(ints)[0]}`, a Python int {why} binds under a branch or after a `break`, meets "
                         "float arithmetic (the batch holds it as an int64 tensor)", s.lineno)
    # ... and an int64 tensor wraps where Python's int grows on (`c = c * 1000`, `c += 2 ** 61`):
    # each binding must keep it within int64 over any run, a small constant, an index, `len()`,
    # a comparison, or one step of a small constant or an index added to or taken from itself
    indices = targets | set(body.indices)

    def intish(v, names):      # (ints and bools alone: constants, indices, len(), such names, any operator)
        for m in fastast.walk(v):
            if isinstance(m, ast.Constant) and type(m.value) not in (int, bool) or isinstance(
                    m, (ast.Subscript, ast.Attribute, ast.Starred, ast.Lambda, ast.IfExp)) or isinstance(
                    m, ast.Call) and not (isinstance(m.func, ast.Name) and m.func.id == "len") or isinstance(
                    m, ast.Name) and m.id not in names and m.id not in indices and m.id != "len":
                return False
        return True
    carried = (inner_names - targets) & set(binds)
    shrank = True
    while shrank:
        shrank = False
        for name in sorted(carried):
            if not all(v is not None and intish(v, carried) for v in binds[name]):
                carried.discard(name)
                shrank = True
    for name in sorted(carried | ints):
        bad = next((v for v in binds[name] if v is not None and not _bounded_int(v, name, indices)), None)
        if bad is not None:
            raise Refuse(f"`{name}`, a Python int {why} binds under a branch or after a `break`, may outgrow int64 "
                         f"(`{src(bad)}`: the batch holds it as an int64 tensor, which wraps)", s.lineno)
    new = copy.copy(s)
    if not breaks:
        return new
    live = f"_av_live{s.lineno}"
    flag = lambda v, at: ast.fix_missing_locations(ast.copy_location(      # noqa: E731
        ast.Assign(targets=[ast.Name(id=live, ctx=ast.Store())], value=ast.Constant(v)), at))
    test = lambda at: ast.copy_location(ast.Name(id=live, ctx=ast.Load()), at)   # noqa: E731

    def unbreak(stmts):
        """(statements without `break`, whether they may set the flag off)"""
        out = []
        for k, st in enumerate(stmts):
            if isinstance(st, ast.Break):
                out.append(flag(False, st))
                return out, True
            if isinstance(st, ast.If):
                a, sa = unbreak(st.body)
                b, sb = unbreak(st.orelse)
                st = ast.copy_location(ast.If(test=st.test, body=a or [ast.Pass()], orelse=b), st)
                if sa or sb:
                    out.append(st)
                    tail, _ = unbreak(stmts[k + 1:])
                    if tail:
                        out.append(ast.fix_missing_locations(ast.copy_location(
                            ast.If(test=test(tail[0]), body=tail, orelse=[]), tail[0])))
                    return out, True
            out.append(st)
        return out, False
    inner, _ = unbreak(s.body)
    new.body = [ast.fix_missing_locations(ast.copy_location(ast.If(test=test(s), body=inner, orelse=[]), s))]
    before.append(flag(True, s))
    return new


def _small_int(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and type(e.value) in (int, bool) and abs(e.value) < 2 ** 31


def _bounded_int(v: ast.AST, name: str, indices: set) -> bool:
    """Whether binding `name` to `v` keeps an int the inner loop carries within int64 however
    often it runs (fewer than 2**31 steps): a small constant, an index, `len(..)`, a bool
    (comparisons, `not`, `and` / `or` of those), `x % c` for a small positive constant, or
    `name + d` / `name - d` / `d + name` with `d` a small constant or an index."""
    def plain(e):
        return _small_int(e) or isinstance(e, ast.Name) and e.id in indices or \
            isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len"
    if plain(v) or isinstance(v, ast.Compare) or isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not):
        return True
    if isinstance(v, ast.BoolOp):
        return all(_bounded_int(x, name, indices) for x in v.values)
    if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.USub):
        return plain(v.operand)
    if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Mod):
        return _small_int(v.right) and v.right.value > 0
    if isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Add, ast.Sub)):
        me = lambda e: isinstance(e, ast.Name) and e.id == name    # noqa: E731
        return me(v.left) and plain(v.right) or isinstance(v.op, ast.Add) and plain(v.left) and me(v.right) \
            or plain(v.left) and plain(v.right)
    return False


def _int_value(v: ast.AST, ints: set) -> bool:
    """Whether `v` is a Python int or bool of `ints` names, int and bool literals, int arithmetic
    (+ - * // % and bitwise), comparisons and `not` / `and` / `or` of those, and `len(..)`."""
    if isinstance(v, ast.Call):
        return isinstance(v.func, ast.Name) and v.func.id == "len" and len(v.args) == 1 and not v.keywords
    for n in fastast.walk(v):
        if isinstance(n, ast.Name):
            if n.id not in ints:
                return False
        elif isinstance(n, ast.Constant):
            if type(n.value) not in (int, bool):
                return False
        elif not isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Add, ast.Sub, ast.Mult,
                                ast.FloorDiv, ast.Mod, ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift,
                                ast.USub, ast.UAdd, ast.Invert, ast.Not, ast.And, ast.Or, ast.cmpop, ast.Load)):
            return False
    return True


def _view_root(e: ast.AST, ctx: Context) -> str | None:
    """The name whose memory `e` may be (itself, a subscript, an attribute or a method of it not
    known to make new memory: `t`, `t[:2]`, `t.T`, `t.view(-1)`), else None."""
    while True:
        if isinstance(e, ast.Name):
            return e.id
        if isinstance(e, ast.Subscript) or isinstance(e, ast.Attribute):
            e = e.value
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr not in _NEW_MEMORY_CALLS \
                and not _module_function(e.func, ctx):
            e = e.func.value
        else:
            return None


def _kept_apart(outputs, body: _Body, ctx: Context) -> None:
    """Refuse two kept values (appended, or the last value of a name read after the loop) that
    may share memory with each other as the loop's do: `a.append(t); b.append(t[:2])`, where b's
    rows are views of a's, or `acc.append(t); last = t`, where `acc[-1] is last`. A batch keeps
    each output's rows in memory of its own. (Values computed in the iteration: rows of the
    inputs keep the inputs' memory, runtime's result identity.)"""
    alias: dict = {}
    for st in body.stmts:
        for n in fastast.walk(st):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                r = _view_root(n.value, ctx)
                if r is not None and r != n.targets[0].id:
                    alias.setdefault(n.targets[0].id, set()).add(r)

    def roots(name, seen=()):
        if name in seen:
            return set()
        found = {name}
        for r in alias.get(name, ()):
            found |= roots(r, seen + (name,))
        return found
    binds: dict = {}
    for st in body.stmts:
        for n in fastast.walk(st):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                binds[n.id] = binds.get(n.id, 0) + 1
    seen: dict = {}
    for o in outputs:
        if o.kind not in ("append", "last") or not o.value or o.pytype:
            continue    # (a Python number, `.item()`'s, shares no memory)
        try:
            r = _view_root(ast.parse(o.value, mode="eval").body, ctx)
        except SyntaxError:
            continue
        if r is None:
            continue
        for name in roots(r):
            if name not in body.assigned or name in body.varying or binds.get(name) != 1:
                continue    # (bound once: a name bound twice may hold two values of its own)
            if name in seen and seen[name] is not o:
                raise Refuse(f"`{name}` is kept twice in the loop (lines {seen[name].lineno} and {o.lineno}): the "
                             "loop's two share memory, a batch would keep each in memory of its own", o.lineno)
            seen[name] = o


def _sum_chain(s: ast.stmt):
    """`acc = acc + t1 - t2 ...` (two or more terms, `+` / `-`, left to right from `acc` itself,
    no term reading `acc`): (acc, [(sign, term), ...]), else None. The loop adds the terms one at
    a time, `(acc + t1) - t2`: the accumulation of `t1 - t2` up to reassociation, where every
    step keeps one dtype (runtime.sum_terms checks that on every call)."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
        return None
    acc, node, terms = s.targets[0].id, _acc_first(s.value, s.targets[0].id), []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        # `acc = acc * t1 * t2` (`gamma * acc * m[t]`): a product of factors, the loop's
        # `(acc * t1) * t2` (runtime.sum_terms's products)
        node = _acc_first(s.value, acc, ast.Mult)
        while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            terms.append(("*", node.right))
            node = node.left
    else:
        while isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            terms.append(("+" if isinstance(node.op, ast.Add) else "-", node.right))
            node = node.left
    if not (isinstance(node, ast.Name) and node.id == acc) or len(terms) < 2 \
            or any(acc in nm.load_ids(t) for _, t in terms):
        return None
    return acc, terms[::-1]


def _acc_first(node, acc: str, op=ast.Add):
    """`node`, a sum that reads `acc` once with a plus sign (`x[t] + acc + y[t]`, `a + (acc - b)`),
    regrouped by swapping the operands of its additions so that `acc` comes first: `(acc + x[t]) +
    y[t]`, `(acc - b) + a`, the same values bit for bit (`a + b` is `b + a` for numbers and
    tensors alike, dtypes included); else `node` as it is. (Only the analysis reads the regrouped
    sum: the loop that runs is the user's.) `op` ast.Mult: a product, its multiplications
    swapped alike (`g * acc * m` as `(acc * g) * m`)."""
    def has(n):
        return acc in nm.load_ids(n)

    def lift(n):
        if isinstance(n, ast.Name) and n.id == acc:
            return n
        if isinstance(n, ast.BinOp) and isinstance(n.op, op) and has(n.left) != has(n.right):
            inner, other = (n.left, n.right) if has(n.left) else (n.right, n.left)
            lifted = lift(inner)
            return None if lifted is None else ast.BinOp(left=lifted, op=op(), right=other)
        if op is ast.Add and isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and has(n.left) \
                and not has(n.right):
            lifted = lift(n.left)
            return None if lifted is None else ast.BinOp(left=lifted, op=ast.Sub(), right=n.right)
        return None
    lifted = lift(node) if isinstance(node, ast.BinOp) else None
    return lifted if lifted is not None else node


def _terms_output(s: ast.Assign, chain, body: _Body, depth: int) -> list:
    """The accumulation of a chain of terms (_sum_chain): the first term is the output's value,
    each other one a payload ("", marker, source, pytype, its sign relative to the first): the
    runtime checks their types and combines them (runtime.sum_terms)."""
    acc, terms = chain
    sign0 = terms[0][0]
    out, pays, shown = [], [], []
    for k, (sign, term) in enumerate(terms):
        value, pytype = _strip_item(term)
        m = body.marker()
        if k == 0:
            marker, first = m, (value, pytype)
        else:
            rel = "*" if sign0 == "*" else "+" if sign == sign0 else "-"
            pays.append(("", m, src(value), pytype, rel))
            shown.append(rel)
        shown.append(f"({src(value)})")
        out.append(_located(ast.copy_location(ast.Assign(targets=[ast.Name(id=m, ctx=ast.Store())], value=value), s),
                            s.lineno))
        if any(isinstance(n, ast.IfExp) for n in fastast.walk(value)):
            body.branches = True
    o = Output("accum", acc, " ".join(shown), s.lineno, op=sign0, marker=marker, cond=depth > 0, pytype=first[1],
               payloads=tuple(pays))
    body.outputs.append((o, first[0]))
    body.seen.setdefault(("terms", acc), []).append(((), marker))
    return out


_FLIP = {ast.Gt: ast.Lt, ast.GtE: ast.LtE, ast.Lt: ast.Gt, ast.LtE: ast.GtE}
_OPS = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<="}


def _and_tracker(s: ast.If):
    """`if c and v > best: ..` (no else) as the `if c: if v > best: ..` it is (`and` tests its
    operands' truth in order, as nested `if`s do), where the last operand alone reads a name the
    body assigns; None otherwise."""
    t = s.test
    if s.orelse or not (isinstance(t, ast.BoolOp) and isinstance(t.op, ast.And) and len(t.values) >= 2):
        return None
    assigned = {n.id for a in s.body for n in fastast.walk(a) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    first = t.values[:-1]
    if any(assigned & nm.load_ids(v) or any(isinstance(n, ast.NamedExpr) for n in fastast.walk(v)) for v in first):
        return None
    test = first[0] if len(first) == 1 else ast.copy_location(ast.BoolOp(op=ast.And(), values=list(first)), t)
    nested = ast.copy_location(ast.If(test=t.values[-1], body=s.body, orelse=[]), s)
    return ast.copy_location(ast.If(test=test, body=[nested], orelse=[]), s)


def _tracker(s: ast.If, body: _Body, depth: int = 0):
    """`if v > best: best = v [; idx = k ...]` (no else): keep the best value and its payloads.
    Also `if best is None or v > best:` (the None test first: the loop's first iteration takes its
    value where it starts from None, and no comparison with None is made). At `depth` > 0 it is
    under a condition: the best of the iterations where that holds."""
    t = s.test
    unset = None
    if isinstance(t, ast.BoolOp) and isinstance(t.op, ast.Or) and len(t.values) == 2 \
            and isinstance(t.values[0], ast.Compare) and len(t.values[0].ops) == 1 \
            and isinstance(t.values[0].ops[0], ast.Is) and isinstance(t.values[0].left, ast.Name) \
            and isinstance(t.values[0].comparators[0], ast.Constant) and t.values[0].comparators[0].value is None:
        unset, t = t.values[0].left.id, t.values[1]
    if s.orelse or not (isinstance(t, ast.Compare) and len(t.ops) == 1 and type(t.ops[0]) in _OPS):
        return None
    left, right, op = t.left, t.comparators[0], type(t.ops[0])
    assigned = {n.id for a in s.body if isinstance(a, ast.Assign) for tg in a.targets
                for n in fastast.walk(tg) if isinstance(n, ast.Name)}
    if isinstance(right, ast.Name) and right.id in assigned:
        value, best = left, right.id            # `if v > best:`
    elif isinstance(left, ast.Name) and left.id in assigned:
        value, best, op = right, left.id, _FLIP[op]   # `if best < v:` is `if v > best:`
    else:
        return None
    assigns = []
    for a in s.body:
        if not (isinstance(a, ast.Assign) and len(a.targets) == 1):
            return None
        tg = a.targets[0]
        if isinstance(tg, ast.Tuple) and isinstance(a.value, ast.Tuple) and len(tg.elts) == len(a.value.elts):
            pairs = list(zip(tg.elts, a.value.elts))
        else:
            pairs = [(tg, a.value)]
        for n, v in pairs:
            if not isinstance(n, ast.Name):
                return None
            assigns.append((n.id, v))
    names = [n for n, _ in assigns]
    if names.count(best) != 1 or len(set(names)) != len(names):
        return None
    if src(dict(assigns)[best]) != src(value) or best in nm.load_ids(value):
        return None
    if any(best in nm.load_ids(v) or set(names) & nm.load_ids(v) for _, v in assigns):
        return None
    if unset is not None and unset != best:
        return None
    return _best_output(s, body, best, value, _OPS[op], [(n, v) for n, v in assigns if n != best],
                        none_start=unset is not None, cond=depth > 0)


def _max_call(s: ast.stmt, body: _Body, ctx: Context, depth: int = 0):
    """`best = max(best, v)` / `best = min(v, best)` with the builtin max/min (under a
    condition where `depth` > 0)."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name)
            and s.value.func.id in ("max", "min") and len(s.value.args) == 2 and not s.value.keywords
            and _is_builtin(ctx, s.value.func.id)):
        return None
    best = s.targets[0].id
    a, b = s.value.args
    if isinstance(a, ast.Name) and a.id == best and best not in nm.load_ids(b):
        value = b   # max(best, v) keeps best unless v > best
    elif isinstance(b, ast.Name) and b.id == best and best not in nm.load_ids(a):
        value = a   # max(v, best) takes v unless best > v, so v replaces on ties: `>=`
        return _best_output(s, body, best, value, ">=" if s.value.func.id == "max" else "<=", [], call=True,
                            cond=depth > 0)
    else:
        return None
    return _best_output(s, body, best, value, ">" if s.value.func.id == "max" else "<", [], call=True,
                        cond=depth > 0)


def _best_output(s, body: _Body, best: str, value, op: str, payloads, call: bool = False, none_start: bool = False,
                 cond: bool = False):
    value, pytype = _strip_item(value)
    marker = body.marker()
    stmts = [_located(ast.copy_location(ast.Assign(targets=[ast.Name(id=marker, ctx=ast.Store())], value=value), s),
                      s.lineno)]
    pays = []
    for name, v in payloads:
        pm = body.marker()
        v2, ptype = _strip_item(v)
        pays.append((name, pm, src(v2), ptype))
        stmts.append(_located(ast.copy_location(ast.Assign(targets=[ast.Name(id=pm, ctx=ast.Store())], value=v2), s),
                              s.lineno))
    o = Output("best", best, src(value), s.lineno, op=op, marker=marker, pytype=pytype, payloads=tuple(pays),
               consumer="builtin" if call else "", none_start=none_start, cond=cond)
    body.outputs.append((o, value))
    return stmts


_TORCH_EXTREMES = {"torch.maximum": "max", "torch.minimum": "min", "torch.max": "max", "torch.min": "min"}


def _reduce_store(s: ast.stmt, ctx: Context):
    """An update of one element by its own value that a scatter_reduce can do over repeated
    indices: `out[k] = torch.maximum(out[k], v)` (torch.minimum, the two-tensor torch.max /
    torch.min, either order), `out[k] = max(out[k], v)` (Python's builtin max / min, either
    order), `out[k] *= v` and `out[k] = out[k] * v` (or `v * out[k]`); and the sums spelled
    out, `out[k] = out[k] + v` (or `v + out[k]`) and `out[k] = out[k] - v`, the scatters of
    `+=` / `-=`. Returns (subscript, v, op "max" / "min" / "*" / "+" / "-", form "torch" /
    "builtin" / "inplace" / ""), or None. The read
    must be written exactly as the store's subscript and `v` must not read the stored tensor:
    only then is each step `out[k] = f(out[k], v)` with `out[k]` the element's value so far
    (whether the subscript is per-iteration, a scatter, is _scatter_entries' question). The
    forms differ in what the runtime checks (runtime._scatter_prep): the torch functions
    propagate NaN as amax does, the builtins compare with `>` / `<` and pick an operand, `*=`
    is an in-place product (no leading 1s dropped, a dtype cast refused)."""
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Subscript) and isinstance(s.op, ast.Mult):
        t = s.target
        if _root(t.value) in nm.load_ids(s.value):
            return None
        return t, s.value, "*", "inplace"
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript)):
        return None
    t, v = s.targets[0], s.value
    me = src(t)
    base = _root(t.value)

    def other(a, b):
        """b where a is the element itself and b does not read the stored tensor."""
        if isinstance(a, ast.Subscript) and src(a) == me and base not in nm.load_ids(b) \
                and not isinstance(b, ast.Starred):
            return b
        return None

    if isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Mult, ast.Add)):
        w = other(v.left, v.right) or other(v.right, v.left)
        return (t, w, "*" if isinstance(v.op, ast.Mult) else "+", "") if w is not None else None
    if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Sub):
        # (`out[k] = out[k] + v` is `out[k] += v` where the step's dtype casts to the output's, as
        # _scatter_prep checks; a sum of another dtype, or a value wider than the element, keeps
        # the loop, which converts or raises)
        w = other(v.left, v.right)
        return (t, w, "-", "") if w is not None else None
    if not (isinstance(v, ast.Call) and len(v.args) == 2 and not v.keywords):
        return None
    a, b = v.args
    w = other(a, b) or other(b, a)
    if w is None:
        return None
    if isinstance(v.func, ast.Name) and v.func.id in ("max", "min") and _is_builtin(ctx, v.func.id):
        return t, w, v.func.id, "builtin"
    name = src(v.func)
    if name in _TORCH_EXTREMES and name.split(".")[0] not in ctx.local_names:
        found, fn = ctx.env.resolve(name)
        if found and getattr(fn, "__module__", None) in ("torch", "torch.functional", "torch._C._VariableFunctions") \
                and getattr(fn, "__name__", None) == name.split(".")[1]:
            return t, w, _TORCH_EXTREMES[name], "torch"
    return None


def _chained_scatter(sub: ast.Subscript, body: "_Body"):
    """`t[a][b]` (a confusion matrix's `cm[y[k]][p[k]] += 1`) as `t[a, b]`, where `a` changes per
    iteration and neither index is a slice or a tuple: the same element where `t[a]` is a view,
    which the runtime checks (a tensor `t`, a 0-d integer `a` each iteration; a list of lists, or
    a tensor of indices, whose `t[a]` is a copy the loop's write never reaches, keeps the loop:
    Output.chained). None for any other subscript."""
    inner = sub.value
    if not (isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name)
            and not isinstance(inner.slice, (ast.Slice, ast.Tuple)) and not isinstance(sub.slice, (ast.Slice, ast.Tuple))
            and nm.load_ids(inner.slice) & (body.varying | set(body.assigned))):
        return None
    flat = ast.Subscript(value=fastast.clone(inner.value), slice=ast.Tuple(
        elts=[fastast.clone(inner.slice), fastast.clone(sub.slice)], ctx=ast.Load()), ctx=sub.ctx)
    return ast.fix_missing_locations(ast.copy_location(flat, sub))


def _scatter_output(s, found, entries, body: "_Body", depth: int) -> list:
    o, (sub, value) = found
    value, pytype = _strip_item(value)
    marker = body.marker()
    stmts = [_located(ast.copy_location(ast.Assign(targets=[ast.Name(id=marker, ctx=ast.Store())], value=value), s),
                      s.lineno)]
    pays = []
    for j, e in enumerate(entries):
        pm = body.marker()
        e2, ptype = _strip_item(e)
        pays.append((f"index{j}", pm, src(e2), ptype))
        stmts.append(_located(ast.copy_location(ast.Assign(targets=[ast.Name(id=pm, ctx=ast.Store())], value=e2), s),
                              s.lineno))
    if not _base_ok(sub.value):
        raise Refuse(f"`{src(sub)}` at line {s.lineno}: the written tensor is not a plain name", s.lineno)
    if any(isinstance(n, ast.IfExp) for st in stmts for n in fastast.walk(st)):
        body.branches = True     # (`out[k, j] = a if c else b`: converted to `where`s, as a store's)
    body.outputs.append((Output("scatter", src(sub.value), src(value), s.lineno, op=o.op, marker=marker,
                                cond=depth > 0, pytype=pytype, payloads=tuple(pays), dim=len(entries),
                                index_src=src(sub), consumer=o.consumer, inplace=o.inplace,
                                chained=o.chained), value))
    return stmts


def _check_stmt(s: ast.stmt, body: "_Body" = None, own_store: bool = False) -> None:
    """Refuse what blocks a rewrite in `s`; `own_store`: `s` writes into a tensor the iteration
    made (_fresh_stores), and that write is not refused."""
    mine = None if not own_store else s.targets[0] if isinstance(s, ast.Assign) else \
        s.target if isinstance(s, ast.AugAssign) else s.value
    inner = body is not None and s in body.inner      # (an inner loop _inner_loop accepted)
    for n in fastast.walk(s):
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target is not mine and not inner:
            raise Refuse(f"`{src(n)}` at line {n.lineno} updates `{n.target.id}` where the rewrite cannot follow "
                         "it: not as a running total of the loop nor as a name the iteration binds first (were it a "
                         "tensor, the update would be in place, on memory that may be an input's)", n.lineno)
        if body is not None and isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in body.indices:
            raise Refuse(f"the loop index `{n.id}` is reassigned at line {n.lineno}", n.lineno)
        for kind, why in _BLOCKING.items():
            if isinstance(n, kind):
                raise Refuse(why.format(l=n.lineno), n.lineno)
        if isinstance(n, (ast.For, ast.While, ast.AsyncFor)) and not (inner and n is s):
            raise Refuse(f"nested loop at line {n.lineno} (nested loops are not rewritten yet)", n.lineno)
        if isinstance(n, ast.NamedExpr):
            raise Refuse(f"assignment expression `:=` at line {n.lineno}", n.lineno)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                for sub in fastast.walk(t):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                        raise Refuse(f"attribute write `{src(sub)}` at line {n.lineno} is a side effect", n.lineno)
                    if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Store) and sub is not mine \
                            and not (inner and sub is t and isinstance(sub.value, ast.Name)
                                     and sub.value.id in body.own_rows):     # (_inner_row_stores)
                        raise Refuse(f"write to `{src(sub)}` at line {n.lineno} is not a recognised output "
                                     "(`out[i] = ...` with the loop index)", n.lineno)
        if isinstance(n, ast.Expr) and n is s and not isinstance(n.value, ast.Constant) and n.value is not mine:
            raise Refuse(f"the value of `{src(n.value)}` at line {n.lineno} is discarded, so it is "
                         "called for its side effect", n.lineno)


def _output(s: ast.stmt):
    """Recognise `out[..] = v`, `out[..] op= v`, `lst.append(v)`, `acc = acc + v`, `acc += v`."""
    line = s.lineno
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript):
        t = s.targets[0]
        return (Output("store", src(t.value), src(s.value), line, index_src=src(t),
                       method=getattr(s, "_av_method", ""), exact=getattr(s, "_av_exact", False)), (t, s.value))
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Subscript):
        t = s.target
        if type(s.op) not in _STORE_OPS:
            # the lowering and the runtime's updates know `+ - * /` alone; `//=` and `%=` would
            # also need the loop's ZeroDivisionError part-way, after the earlier rows were updated
            raise Refuse(f"`{src(s)}` at line {line}: an in-place `{_OTHER_OPS.get(type(s.op), '?')}=` store "
                         "is not rewritten (only `=`, `+=`, `-=`, `*=` and `/=` are)", line)
        return (Output("store", src(t.value), src(s.value), line, op=_op(s.op), index_src=src(t)),
                (t, s.value))
    if (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute)
            and s.value.func.attr == "append" and isinstance(s.value.func.value, ast.Name)
            and len(s.value.args) == 1 and not s.value.keywords):
        return Output("append", s.value.func.value.id, src(s.value.args[0]), line), s.value.args[0]
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and isinstance(s.op, (ast.Add, ast.Sub, ast.Mult)):
        acc = s.target.id
        if acc not in nm.load_ids(s.value):
            return Output("accum", acc, src(s.value), line, op=_op(s.op), inplace=True), s.value
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and type(s.op) in _LOGICAL_OPS:
        # `done |= eos[t]`: a running logical or / and of bool tensors (runtime checks the dtypes:
        # on integers `|` is bitwise)
        acc = s.target.id
        if acc not in nm.load_ids(s.value):
            return Output("accum", acc, src(s.value), line, op=_LOGICAL_OPS[type(s.op)], inplace=True), s.value
    if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            and isinstance(s.value, ast.BoolOp) and len(s.value.values) == 2):
        # `seen = seen or flag`: of Python bools alone (runtime._logical_steps), a logical or
        acc, (a, b) = s.targets[0].id, s.value.values
        for me, other in ((a, b), (b, a)):
            if isinstance(me, ast.Name) and me.id == acc and acc not in nm.load_ids(other):
                return Output("accum", acc, src(other), line,
                              op="or" if isinstance(s.value.op, ast.Or) else "and"), other
    if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            and isinstance(s.value, ast.BinOp) and type(s.value.op) in _LOGICAL_OPS):
        # `done = done | eos[t]` (either order: `|` and `&` of bools commute)
        acc, v = s.targets[0].id, s.value
        for me, other in ((v.left, v.right), (v.right, v.left)):
            if isinstance(me, ast.Name) and me.id == acc and acc not in nm.load_ids(other):
                return Output("accum", acc, src(other), line, op=_LOGICAL_OPS[type(v.op)]), other
    if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            and isinstance(s.value, ast.Call) and len(s.value.args) == 2 and not s.value.keywords
            and src(s.value.func).split(".")[-1] in ("maximum", "minimum", "max", "min", "fmax", "fmin", "logaddexp",
                                                     "logical_or", "logical_and")
            and isinstance(s.value.func, ast.Attribute)):
        # `m = torch.maximum(m, v)`: an elementwise running extreme (torch, not Python's max);
        # `f = torch.logical_or(f, m[t])`: a running logical or
        acc = s.targets[0].id
        a, b = s.value.args
        name = s.value.func.attr
        op = "max" if name in ("maximum", "max", "fmax") else "lse" if name == "logaddexp" else \
            "lor" if name == "logical_or" else "land" if name == "logical_and" else "min"
        for me, other in ((a, b), (b, a)):
            if isinstance(me, ast.Name) and me.id == acc and acc not in nm.load_ids(other):
                return Output("accum", acc, src(other), line, op=op, consumer_src=src(s.value.func)), other
    if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            and isinstance(s.value, ast.Call) and len(s.value.args) == 1
            and isinstance(s.value.args[0], (ast.List, ast.Tuple)) and len(s.value.args[0].elts) == 2
            and isinstance(s.value.args[0].elts[0], ast.Name) and s.value.args[0].elts[0].id == s.targets[0].id
            and src(s.value.func).split(".")[-1] in ("cat", "concat")
            and all(kw.arg == "dim" and isinstance(kw.value, ast.Constant) and type(kw.value.value) is int
                    and kw.value.value >= 0 for kw in s.value.keywords)):
        acc, piece = s.targets[0].id, s.value.args[0].elts[1]
        if acc not in nm.load_ids(piece):
            dim = s.value.keywords[0].value.value if s.value.keywords else 0
            return Output("cat", acc, src(piece), line, dim=dim, consumer_src=src(s.value.func)), piece
    if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            and isinstance(s.value, ast.BinOp) and isinstance(s.value.op, (ast.Add, ast.Sub, ast.Mult))):
        acc, v = s.targets[0].id, s.value
        if isinstance(v.left, ast.Name) and v.left.id == acc and acc not in nm.load_ids(v.right):
            return Output("accum", acc, src(v.right), line, op=_op(v.op)), v.right
        if (isinstance(v.op, (ast.Add, ast.Mult)) and isinstance(v.right, ast.Name) and v.right.id == acc
                and acc not in nm.load_ids(v.left)):
            # `acc = v + acc` (or `v * acc`) in the other order: the same value for numbers and tensors
            return Output("accum", acc, src(v.left), line, op=_op(v.op)), v.left
    return None


_STORE_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
# running logical or / and: `|` and `&` (of bools alone: runtime._logical_steps), torch.logical_or
# and torch.logical_and (of any values: nonzero is True)
_LOGICAL_OPS = {ast.BitOr: "|", ast.BitAnd: "&"}
LOGICAL = ("|", "&", "lor", "land", "or", "and")
# the other augmented operators, named in the refusal of a store that uses one
_OTHER_OPS = {ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&",
              ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}


def _op(op: ast.operator) -> str:
    return _STORE_OPS.get(type(op), "?")


# (not the device: a large fresh output is a stand-in on the meta device while the express runs,
# runtime._let_go, with the same shape, dtype and layout)
_META_ATTRS = ("shape", "dtype", "ndim", "layout")


def _metadata_read(ld: ast.Name, stmt: ast.AST) -> bool:
    """Whether the read `ld` of a tensor the loop writes into reads only what those writes
    never change, as an attribute: its shape or dtype (`y.shape[1]`, `y.dtype`; not
    `requires_grad`, which a stored value that requires grad turns on). The body reads such an
    attribute of a loop-invariant name as a value of its own (runtime peeks), not the tensor;
    `y.size(1)` or `len(y)` would pass the written tensor to the body, which the guard refuses."""
    parents = {id(c): p for p in fastast.walk(stmt) for c in ast.iter_child_nodes(p)}
    p = parents.get(id(ld))
    return isinstance(p, ast.Attribute) and p.value is ld and p.attr in _META_ATTRS


def _user_call(stmts, ctx: Context, body: _Body, iter_vars):
    """The first call in `stmts` that may run the user's own code (a function or a method of an
    object from outside the loop), which could read the function's closure variables and
    globals; not a pure builtin, a torch function or a method of a value the iteration made."""
    for st in stmts:
        for c in fastast.walk(st):
            if not isinstance(c, ast.Call):
                continue
            f = c.func
            if isinstance(f, ast.Name) and f.id in _PURE_BUILTINS and ctx.env.is_builtin(f.id):
                continue
            if isinstance(f, ast.Attribute):
                root = _root(f)
                if root is not None and (root in body.assigned or root in iter_vars) or _module_function(f, ctx):
                    continue
            return c
    return None


def _joinable_accums(first, later) -> bool:
    """Whether two updates of one running value in an iteration (`c += a`, `if m: c += b`) are
    one accumulation over both values, interleaved in the loop's order: both plain sums, both
    differences or both products, both augmented (`c += v`: in place on a tensor) or both
    rebinding (`c = c + v`), of one value each (no chain of terms, no count a scan reads)."""
    if first.kind != "accum" or later.kind != "accum" or first.op != later.op or first.op not in ("+", "-", "*"):
        return False
    if first.payloads or later.payloads or first.counted or later.counted or first.record or later.record:
        return False
    return first.inplace == later.inplace and first.fill == later.fill


def _joinable_scatters(first, later) -> bool:
    """Whether two scatters into one tensor in an iteration are one scatter of both writes,
    interleaved in the loop's order: both through the same number of per-iteration indices
    (as elements, not rows of the loop's own), both plain stores (the last write to an index
    wins) or both sums (`+=` / `-=`: a `-=` adds the values negated). The body must not read
    the tensor (every read of a written tensor is refused below)."""
    if first.kind != "scatter" or later.kind != "scatter" or first.row_part or later.row_part:
        return False
    if first.dim != later.dim or not later.payloads or not first.payloads:
        return False
    return first.op == later.op == "" or first.op in ("+", "-") and later.op in ("+", "-")


def _row_part(row, part, index: str) -> bool:
    """Whether `row` is a plain, unconditional store of the loop's own row (`out[i] = ..` or
    `out[i, ..]`: the loop index alone, first, as _store found it) and `part` a plain,
    unconditional scatter whose first index is that loop index (`out[i, y[i]] = v`): both
    write only in row i."""
    if row.kind != "store" or part.kind != "scatter" or row.op or part.op or row.cond or part.cond:
        return False
    return row.dim == 0 and row.offset == 0 and bool(part.payloads) and part.payloads[0][2] == index


def _finish(node, ctx: Context, loop_id: int, form: str, space: IterSpace,
            iter_vars: dict[str, str], body: _Body, anchor=None, own_rows_ok=False) -> LoopPlan:
    line = node.lineno
    index = space.index
    outputs: list[Output] = []
    targets: dict[str, Output] = {}
    several = set()     # targets stored into more than once (`out[i, 0] = a; out[i, 1] = b`)
    interleaved = set()     # targets stored into at other offsets (`pe[i] = a; pe[i + 1] = b`)
    joined: dict = {}   # list -> how many unconditional appends each iteration makes to it
    scattered: dict = {}    # tensor -> how many scatters into it each iteration makes (_joinable_scatters)
    accumulated: dict = {}  # running value -> how many updates of it each iteration makes (_joinable_accums)

    if body.inner and body.branches:
        # (the branch becomes `where`s over renamed values, which the inner loop's own
        # assignments would not follow)
        raise Refuse(f"the inner loop at line {body.inner[0].lineno} sits in a body that branches on the data",
                     body.inner[0].lineno)
    written_subs: dict = {}     # target -> the subscripts of its stores so far (None: a write of another kind)
    for out, payload in body.outputs:
        if out.target in iter_vars or out.target in body.assigned:
            what = 'an iteration variable' if out.target in iter_vars else 'reassigned in it'
            raise Refuse(f"`{out.target}` is both updated in the loop and {what} (line {out.lineno})", out.lineno)
        earlier = written_subs.get(out.target, ())
        sub = payload[0] if out.kind == "store" and isinstance(payload, tuple) and payload \
            and isinstance(payload[0], ast.Subscript) else None
        written_subs[out.target] = None if earlier is None or sub is None else earlier + (sub,)
        if out.target and out.target in targets:
            first = targets[out.target]
            stored = _store(out, payload[0], space, body, iter_vars) if out.kind == "store" else out
            if out.kind == "store" and first.kind == "store" and (out.op or out.cond) and earlier \
                    and sub is not None and (stored.dim, stored.offset) == (first.dim, first.offset) \
                    and all(_disjoint_subscripts(sub, e) for e in earlier):
                # `pos[i, 0] += v[i, 0] * dt; pos[i, 1] += v[i, 1] * dt`, `b[i, 0::2] *= w[i]; b[i, 1::2]
                # *= h[i]`: an update of elements of the row no store before it in the iteration
                # writes (_disjoint_subscripts), so the row as it was before the first store, which
                # the batch reads, is the row the loop's update reads. Under a condition too
                # (`if kp[i, 2] > 0: kp[i, 0] *= sx; kp[i, 1] *= sy`, probeA): a masked store's
                # commit keeps the elements where the condition fails as they were, which no other
                # store of the iteration writes
                several.add(out.target)
                outputs.append(stored)
                continue
            if out.kind == "store" and first.kind == "store" and not out.op and not out.cond:
                if (stored.dim, stored.offset) == (first.dim, first.offset):
                    # each iteration writes its own row (the loop index at one place), so the
                    # stores commit one after the other in the loop's order, row by row the same.
                    # A later store must overwrite unconditionally: an update (`+=`) or a masked
                    # store is computed from the rows as they were before the first store; and
                    # the body must not read the target (a read between two stores sees the first)
                    several.add(out.target)
                    outputs.append(stored)
                    continue
                if stored.dim == first.dim and stored.index_src == first.index_src and first.kind == "store" \
                        and not first.op and not first.cond:
                    # rows at other offsets (`pe[i] = a; pe[i + 1] = b` over `range(0, n, 2)`):
                    # each store commits its own rows, which the guard checks never meet (offsets
                    # closer than the step: runtime._rows_apart); the body must not read the target
                    interleaved.add(out.target)
                    outputs.append(stored)
                    continue
            if _row_part(first, stored, index) or _row_part(stored, first, index):
                # `dist[i] = c; dist[i, y[i]] = v` (a row, then an element of it at a per-iteration
                # column; or the other order): each write of every iteration lands in the row
                # the loop index names, so the batch's writes, committed in the loop's order
                # (the row's store, then the scatter), leave every row as its iteration left it.
                # The body must not read the target (as for stores into one row, `several`)
                several.add(out.target)
                if stored.kind == "scatter":
                    stored = dataclasses.replace(stored, row_part=True)
                else:
                    k = next(j for j, o in enumerate(outputs) if o is first)
                    outputs[k] = targets[out.target] = dataclasses.replace(first, row_part=True)
                outputs.append(stored)
                continue
            if out.record and out.record[1] > 0 and first.record and first.record[0] == out.record[0]:
                outputs.append(out)     # a later part of one appended literal (_record)
                continue
            if out.kind == "append" and first.kind == "append" and not out.cond and not first.cond \
                    and form in ("for", "while") and not out.record and not first.record:
                # `out.append(a); out.append(b)`: the list holds a0, b0, a1, b1, ..: the batches
                # interleaved (runtime.interleave), committed as one list
                joined[out.target] = joined.get(out.target, 1) + 1
                outputs.append(dataclasses.replace(out, joined=-1))
                continue
            if _joinable_accums(first, out) and form in ("for", "while") and space.kind != "nest":
                # `c += a` then `if m: c += b`: the steps of one running value, interleaved in the
                # loop's order (a0, b0, a1, b1, ..: runtime.accum_join, where they must be of one
                # kind, dtype and shape), are one accumulation, which steps as the loop's
                accumulated[out.target] = accumulated.get(out.target, 1) + 1
                outputs.append(dataclasses.replace(out, joined=-1))
                continue
            if _joinable_scatters(first, out):
                # `deg[s] += 1; deg[t] += 1`, `A[s, d] = 1; A[d, s] = 1`: the iterations' writes,
                # interleaved in the loop's order (a0, b0, a1, b1, ..: runtime.scatter_join),
                # are one scatter: repeated indices add up, or the last write wins, as in the loop
                scattered[out.target] = scattered.get(out.target, 1) + 1
                outputs.append(dataclasses.replace(out, joined=-1))
                continue
            raise Refuse(f"`{out.target}` is written more than once in the loop (lines "
                         f"{targets[out.target].lineno} and {out.lineno})", out.lineno)
        for name, *_ in (out.payloads if out.kind == "best" else ()):
            if name in body.assigned or name in iter_vars or name in targets:
                raise Refuse(f"`{name}` is assigned more than once in the loop (line {out.lineno})", out.lineno)
        if out.kind == "store":
            out = _store(out, payload[0], space, body, iter_vars)
        if out.kind == "accum" and out.op in ("max", "min", "lse", "lor", "land"):
            found, obj = ctx.env.resolve(out.consumer_src)
            names = ("logaddexp",) if out.op == "lse" else ("maximum", "max") if out.op == "max" else \
                ("logical_or",) if out.op == "lor" else ("logical_and",) if out.op == "land" else ("minimum", "min")
            if not found or not (getattr(obj, "__module__", "") or "").startswith("torch") or \
                    getattr(obj, "__name__", "") not in names:
                raise Refuse(f"`{out.consumer_src}` at line {out.lineno} is not torch.{' / torch.'.join(names[:2])}",
                             out.lineno)
        if out.kind == "cat" and ctx.env.consumer(out.consumer_src) != "cat":
            raise Refuse(f"`{out.consumer_src}` at line {out.lineno} is not torch.cat", out.lineno)
        targets[out.target] = out
        if out.kind == "best":
            for name, *_ in out.payloads:
                targets[name] = out
        outputs.append(out)

    if joined or scattered or accumulated:
        outputs = [dataclasses.replace(o, joined=joined[o.target]) if o.target in joined and o.kind == "append"
                   and not o.joined else
                   dataclasses.replace(o, joined=scattered[o.target]) if o.target in scattered and o.kind == "scatter"
                   and not o.joined else
                   dataclasses.replace(o, joined=accumulated[o.target]) if o.target in accumulated and o.kind == "accum"
                   and not o.joined else o for o in outputs]
    exposed = sorted({o.target for o in outputs if o.target} & ctx.cellvars)
    if exposed:
        read = next((n for st in body.stmts for n in fastast.walk(st) if isinstance(n, ast.Attribute)
                     and n.attr in exposed or isinstance(n, ast.Constant) and n.value in exposed), None)
        if read is not None:
            # (`mod.tot` of the module whose global the loop updates, `getattr(m, "tot")`)
            raise Refuse(f"`{src(read)}` at line {read.lineno} may read `{read.attr if isinstance(read, ast.Attribute) else read.value}`, "
                         "a global or closure variable the loop updates", read.lineno)
        call = _user_call(body.stmts, ctx, body, iter_vars)
        if call is not None:
            # (a closure or a global other code reads: the call may read each step's value)
            raise Refuse(f"`{exposed[0]}`, which the loop updates, is a closure variable or a global that the call "
                         f"`{src(call.func)}(...)` at line {call.lineno} may read", call.lineno)
    for name in accumulated:
        read = next((ld for st in body.stmts for ld in nm.loads(st) if ld.id == name), None)
        if read is not None:
            # (a running value read between its updates is a scan of each step's value)
            raise Refuse(f"`{name}` is updated more than once in the loop and read in it (line {read.lineno})",
                         read.lineno)
    all_nodes = list(body.stmts)
    _check_calls(all_nodes, ctx, body, iter_vars)
    prefix = _inplace_prefix(outputs, body, space, ctx)
    if prefix is not None:
        # (the index read after the loop, or a global: its last value, lowering.scan; probeC)
        live = (index,) if form == "for" and index and (
            nm.read_after(ctx.fn, ctx.parent, anchor or node, index) is not None or index in ctx.cellvars) else ()
        return LoopPlan(loop_id=loop_id, lineno=line, end_lineno=getattr(node, "end_lineno", line),
                        source=src(node), form=form, space=space, body=(), outputs=(prefix,), mapped=(),
                        index_as_value=False, free=(), callables=(), live_after=live)
    outputs, scans = _scans(outputs, body, targets)
    outputs, scans = _shifts(node, ctx, outputs, scans, body, targets, iter_vars)
    exit_scans, exempt = _exit_scans(outputs, body)

    # every read of an output target other than the store itself is a dependence
    own_rows = False
    markers = {x.marker for x in outputs if x.marker}
    # (a running value's terms and factors are consumed by its update's arithmetic at their own
    # step, `s = s + x[t]` then `x[t] = s`: a view of the row there is no value kept past the store)
    kept_values = markers - {x.marker for x in outputs if x.kind in ("scan", "accum", "linrec")} - {
        x.payloads[0][1] for x in outputs if x.kind == "linrec"}
    ahead = set()       # reads of a stored tensor at elements only later iterations write (_ahead_read)
    store_subs = {}     # target -> [(marker, subscript)] of its plain stores
    for out, payload in body.outputs:
        if out.kind == "store" and isinstance(payload, tuple) and isinstance(payload[0], ast.Subscript):
            store_subs.setdefault(out.target, []).append((out.marker, payload[0]))
    for n in all_nodes:
        for ld in nm.loads(n):
            if id(ld) in exempt:
                continue     # a running total read by the `break` condition (exit_scans)
            o = targets.get(ld.id)
            if o is None:
                continue
            if o.kind in ("store", "scatter") and _metadata_read(ld, n):
                continue     # (`eps / y.shape[1]`: what a write into its elements never changes)
            if ld.id in interleaved:
                raise Refuse(f"`{ld.id}` is read at line {ld.lineno} and stored into at several offsets in the loop",
                             ld.lineno)
            if ld.id in several:
                if o.kind == "store" and _same_index_read(ld, n, o, index) and _read_before_store(ld, all_nodes, o) \
                        and not _view_after_store(ld, n, all_nodes, o, ctx, markers):
                    continue     # its own row before the first store (analysis._forwarded reads the rest)
                if o.kind == "store" and _same_index_read(ld, n, o, index) and \
                        _disjoint_read(ld, n, all_nodes, store_subs.get(ld.id, ()), ctx):
                    continue     # (`b[i, 0].clamp_(0, W); b[i, 1].clamp_(0, H)`: elements no store before wrote)
                raise Refuse(f"`{ld.id}` is read at line {ld.lineno} and stored into more than once in the loop",
                             ld.lineno)
            if o.kind == "store" and _same_index_read(ld, n, o, index) and \
                    _read_before_store(ld, all_nodes, o) and not _view_after_store(
                        ld, n, all_nodes, o, ctx, kept_values, store_subs.get(ld.id, ())):
                continue
            if own_rows_ok and o.kind == "scatter" and _distinct_rows(space) and _own_row_read(ld, n, o, index) \
                    and _read_before_store(ld, all_nodes, o) \
                    and not _view_after_store(ld, n, all_nodes, o, ctx, kept_values, (), consumed=o.marker):
                # (`sc = t[i, idx[i]]` .. `t[i, idx[i]] = f(sc)`: each iteration's own row, read
                # first. Under autograd the loop's write may change what its backward saved of the
                # read, `c = out[i, y[i]].clamp(..)`, where the batch's does not: the loop runs
                # there, as for row copies; probeN)
                own_rows = True
                continue
            key = _ahead_read(ld, n, o, index, space, ctx)
            if key is not None:
                ahead.add(key)
                continue
            what = {"store": "written", "append": "appended to", "accum": "accumulated", "linrec": "updated",
                    "best": "updated", "scatter": "written", "cat": "concatenated", "last": "assigned"}[o.kind]
            raise Refuse(f"loop-carried dependency: `{ld.id}` is read at line {ld.lineno} and "
                         f"{what} at line {o.lineno}", ld.lineno)

    _check_carried(body.stmts, body.assigned, set(iter_vars) | {o.marker for o in outputs})

    mapped, index_as_value = _mapped(all_nodes, space, index, body, ctx, iter_vars)
    for m in mapped:
        if _root_name(m.base) in body.assigned:
            raise Refuse(f"`{m.base}` is indexed at line {line} but reassigned in the loop", line)
    if ahead:
        # (read before any store, as the batch reads them; never Python's index from the end,
        # whose element an earlier iteration may have written: the guard refuses a negative one)
        mapped = [dataclasses.replace(m, ahead=True, wraps=False) if (m.base, m.dim, m.offset) in ahead else m
                  for m in mapped]

    live = []
    stmts = list(body.stmts)
    if form in ("for", "while"):
        for name in sorted(set(body.assigned) | set(iter_vars)):
            at = nm.read_after(ctx.fn, ctx.parent, anchor or node, name)
            if name in ctx.cellvars:
                at = line
            if at is None:
                continue
            if name in iter_vars and name not in body.assigned:
                live.append(name)
                continue
            if any(name in nm.target_names(f.target) for f in body.inner):
                raise Refuse(f"`{name}`, the index of the inner loop at line {body.inner[0].lineno}, is read after "
                             f"the loop at line {at}", at)
            out = _last_value(name, stmts, body, at)
            outputs.append(out)
            targets[name] = out
    _kept_apart(outputs, body, ctx)

    reads = set()
    for n in stmts:
        reads |= {ld.id for ld in nm.loads(n) if id(ld) not in body.based}
    free = sorted(reads - set(body.assigned) - set(iter_vars) - set(targets) - {o.marker for o in outputs}
                  - {s[0] for s in scans})
    callables = tuple(sorted({c for c in _callables(all_nodes, body, iter_vars)})) + tuple(
        _bound_methods(all_nodes, ctx, body, iter_vars))
    helpers = _branch_helpers(stmts, ctx, set(free))
    guarded = _guarded(node, helpers)

    return LoopPlan(
        loop_id=loop_id, lineno=line, end_lineno=getattr(node, "end_lineno", line),
        source=src(node), form=form, space=space, body=tuple(src(s) for s in stmts),
        outputs=tuple(outputs), mapped=tuple(mapped), index_as_value=index_as_value,
        free=tuple(free), callables=callables, live_after=tuple(live),
        branches=body.branches or body.inner_branches or bool(helpers),
        branch_helpers=helpers,
        items=body.items, scans=tuple(scans), exit_scans=tuple(exit_scans),
        index_float=index_as_value and _index_meets_floats(stmts, [index], free),
        guarded=guarded, two_way=_two_way(node, helpers, outputs, guarded) and not body.inner, row_copies=own_rows)


# what may not sit inside a guarded body (_guarded): branches, loops, exits, and the builtins that
# pick one of their arguments by comparing them
_NOT_GUARDED = (ast.If, ast.IfExp, ast.BoolOp, ast.While, ast.For, ast.AsyncFor, ast.Try, ast.With, ast.Break,
                ast.Continue, ast.Return, ast.Raise, ast.comprehension, ast.Lambda, ast.NamedExpr)


def _guarded(node, helpers) -> bool:
    """Whether the loop's body is one `if` without `else` around plain statements (`for t in ..:
    if y[t] >= 0: total = total + loss(t)`; or `if y[t] < 0: continue` and then plain statements),
    after plain assignments to names the condition or the body reads (`d = x[t] - y[t]`), or a
    comprehension with one condition around a plain element: the iterations whose condition holds
    are the only ones whose values reach an output, and nothing else in the body selects by data.
    Under autograd the runtime may then compute the condition (with those assignments) for every
    iteration first, without grad, and the body on the kept ones alone (Token._run_selected), so
    that no iteration the loop skips sends a gradient (0 * inf is NaN) into the inputs. (The
    assignments before the `if` of an iteration it skips reach no output: the loop computes them
    with grad, but no gradient flows through them; a name among them read after the loop is an
    output of its own, which runtime._selectable does not take.)"""
    if helpers:
        return False
    if isinstance(node, ast.For):
        k = 0
        while k < len(node.body) and _plain_assignment(node.body[k]):
            k += 1
        prefix, rest = node.body[:k], node.body[k:]
        if node.orelse or not rest or not isinstance(rest[0], ast.If) or rest[0].orelse:
            return False
        first = rest[0]
        if len(rest) == 1:
            inner = first.body
        elif len(first.body) == 1 and isinstance(first.body[0], ast.Continue):
            inner = rest[1:]     # (`if c: continue` and then the body: the body under `not c`)
        else:
            return False
        inner = prefix + inner
    elif isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        if len(node.generators) != 1 or len(node.generators[0].ifs) != 1:
            return False
        inner = [node.elt]
    else:
        return False
    for n in (x for st in inner for x in fastast.walk(st)):
        if isinstance(n, _NOT_GUARDED) or isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                and n.func.id in ("max", "min", "sorted", "any", "all", "sum", "filter", "map"):
            return False
    return True


def _two_way(node, helpers, outputs=(), guarded=False) -> bool:
    """Whether the loop's body branches once, on one `if` (with any `elif`s and an `else`, or
    without an `else`: a side that computes nothing; not the guarded form) of plain statements
    or one conditional expression (chain) a statement takes as its value (`v = a if c else
    b`, `total += a if c else b`, `out[i] = a if c else b`, `kept.append(a if c else b)`), among
    plain statements (`d = x[t] - y[t]`; `if c: total = total + f(d)` / `else: total = total +
    g(d)`): each iteration computes one side. Under autograd the runtime may compute the condition
    for every iteration first, without grad, then each side's body on its own rows alone (Token.
    _run_selected with the sides lowering.common._select_code writes), where the batch of `where`
    computes both sides on every row and sends 0 * the derivative of the side a row skips (NaN
    where it is infinite) into the inputs' gradients."""
    if helpers or not isinstance(node, ast.For) or node.orelse:
        return False
    branch = [st for st in node.body if isinstance(st, ast.If) or _conditional_value(st) is not None]
    if len(branch) > 1 and not _same_condition(node.body, branch):
        return False
    if not branch:
        return False
    top = branch[0]
    others = [st for st in node.body if st not in branch]
    if not all(isinstance(st, (ast.Assign, ast.AugAssign, ast.Expr)) for st in others):
        return False
    if isinstance(top, ast.If):
        if guarded and all(o.kind in ("accum", "append") for o in outputs):
            return False     # (one `if` around the body, or `if c: continue`: its kept rows alone;
            #                   a store of the kept rows is a side, and the other rows store nothing)
        parts = []
        while len(top.orelse) == 1 and isinstance(top.orelse[0], ast.If):
            parts += top.body + [top.test]       # (an `elif`: one side more)
            top = top.orelse[0]
        if any(isinstance(s, (ast.Pass, ast.Continue)) for s in top.body + top.orelse):
            return False
        parts += top.body + top.orelse + [top.test]     # (no `else`: a side that computes nothing)
    else:
        parts = []
        for st in branch:
            e = _conditional_value(st)
            parts += _around(st, e)              # (what the statement computes around it)
            while isinstance(e.orelse, ast.IfExp):
                parts += [e.test, e.body]        # (`a if c else b if d else e`: one side more)
                e = e.orelse
            parts += [e.test, e.body, e.orelse]
    for n in (x for st in others + parts for x in fastast.walk(st)):
        if isinstance(n, _NOT_GUARDED) or isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                and n.func.id in ("max", "min", "sorted", "any", "all", "sum", "filter", "map"):
            return False
    return True


def _same_condition(body, branch) -> bool:
    """Several conditional expressions (`total = total + (a if c else b)`, `count += 1 if c else
    0`) on one condition: the same text, no `elif` chain, and no statement from the first on
    assigning a name it reads. Each iteration takes one side of all of them: one branch."""
    values = [_conditional_value(st) for st in branch]
    if any(e is None or isinstance(e.orelse, ast.IfExp) for e in values):
        return False
    test = ast.dump(values[0].test)
    if any(ast.dump(e.test) != test for e in values[1:]):
        return False
    read = nm.load_ids(values[0].test)
    first, last = body.index(branch[0]), body.index(branch[-1])
    return not any(isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)) and n.id in read
                   for st in body[first:last] for n in fastast.walk(st))


def _conditional_value(st):
    """The conditional expression a statement takes as its whole value (`v = a if c else b`,
    `total += a if c else b`, `total = total + (a if c else b)`, `out[i] = a if c else b`,
    `kept.append(a if c else b)`): each iteration computes one side, as `if c:` / `else:` would;
    else None."""
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], (ast.Name, ast.Subscript)):
        v = st.value
        if isinstance(v, ast.IfExp):
            return v
        if isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Add, ast.Sub)) and isinstance(v.right, ast.IfExp) \
                and isinstance(v.left, ast.Name) and isinstance(st.targets[0], ast.Name) \
                and v.left.id == st.targets[0].id:
            return v.right
        return inner_conditional(v)
    if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
        return st.value if isinstance(st.value, ast.IfExp) else inner_conditional(st.value)
    if isinstance(st, ast.AugAssign) and isinstance(st.value, ast.IfExp):
        return st.value
    if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) \
            and st.value.func.attr == "append" and len(st.value.args) == 1 and not st.value.keywords:
        v = st.value.args[0]
        return v if isinstance(v, ast.IfExp) else inner_conditional(v)
    return None


_CONDITIONAL_PATH = (ast.BinOp, ast.UnaryOp, ast.Call, ast.Attribute, ast.Subscript, ast.Compare, ast.Tuple,
                     ast.List, ast.Starred, ast.keyword, ast.Slice)


def inner_conditional(value):
    """The one conditional expression inside a value (`d = x[t] - (x[t - 1] if t > 0 else 0)`,
    `nv = gamma * (v[t + 1] if t + 1 < T else 0.0)`) that Python evaluates wherever it evaluates
    the value: reached through arithmetic, calls, attributes, subscripts, comparisons and displays
    alone (not a side of `and` / `or` or of another conditional expression, nor a lambda's or
    comprehension's own scope). Each iteration computes one of its sides, as an `if c:` / `else:`
    around two copies of the statement would; the condition may run first (a batch computes what
    is around it on each side's rows, and a batch that raises gives way to the loop). None where
    there is none or more than one."""
    found = []

    def walk(node):
        if isinstance(node, ast.IfExp):
            found.append(node)
            return
        if not isinstance(node, _CONDITIONAL_PATH):
            return
        for c in ast.iter_child_nodes(node):
            walk(c)
    walk(value)
    if len(found) != 1 or found[0] is value:
        return None
    if any(isinstance(n, (ast.IfExp, ast.BoolOp, ast.NamedExpr, ast.Lambda, ast.ListComp, ast.SetComp,
                          ast.DictComp, ast.GeneratorExp, ast.Await, ast.Yield, ast.YieldFrom))
           and n is not found[0] for n in fastast.walk(value) if not _holds(found[0], n)):
        return None
    return found[0]


def _holds(node, inner) -> bool:
    return any(n is inner for n in fastast.walk(node))


def _around(node, inner) -> list:
    """The nodes on the way from `node` down to `inner`, and their other children (what a
    statement computes around its conditional expression)."""
    out = []
    for c in ast.iter_child_nodes(node):
        if c is inner:
            continue
        if _holds(c, inner):
            out += _around(c, inner)
        else:
            out.append(c)
    return out


def _plain_assignment(st) -> bool:
    """`name = value` (one plain name): a value the condition or the guarded body may read."""
    return isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)


def _index_meets_floats(stmts, names, free) -> bool:
    """Whether the loop index (`names`: the indices used as numbers), as a number, enters
    arithmetic that makes a Python float in the loop (`0.1 * i`, `i / n`, `i ** 0.5`, `scale * i`
    with a loop-invariant name that may be a float). Broadcasting and vmap hold the index as an
    int64 tensor, so there that is a float32 tensor (the default dtype), rounded where the
    loop's float is not and promoting half-precision rows; only a batched body holds it as a
    Python number (runtime: Token.run). Names assigned from the index count as it; an index
    that only selects elements (`x[i]`) does not."""
    derived = set(names)
    if not derived:
        return False
    free = set(free)

    def mentions(node):
        return bool(_bare_names(node) & derived)

    # names the body binds to Python numbers it computes (`t = 1.0 * 1`, `t = t / 2`): arithmetic
    # of constants and such names alone, which may be floats
    numbers: set = set()
    grew = True
    while grew:
        grew = False
        for s in stmts:
            for n in fastast.walk(s):
                value = n.value if isinstance(n, (ast.Assign, ast.AugAssign)) else None
                targets = n.targets if isinstance(n, ast.Assign) else [n.target] if value is not None else []
                if value is not None and all(
                        isinstance(m, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Load))
                        or isinstance(m, ast.Name) and (m.id in numbers or m.id in derived) for m in fastast.walk(value)):
                    for t in targets:
                        if isinstance(t, ast.Name) and t.id not in numbers:
                            numbers.add(t.id)
                            grew = True

    def floaty(node):
        return any(isinstance(n, ast.Constant) and type(n.value) in (float, complex)
                   or isinstance(n, ast.Name) and (n.id in free or n.id in numbers and n.id not in derived)
                   for n in fastast.walk(node))
    for s in stmts:
        for n in fastast.walk(s):
            if isinstance(n, ast.Assign) and mentions(n.value):
                derived |= {t.id for tg in n.targets for t in fastast.walk(tg) if isinstance(t, ast.Name)
                            and not t.id.startswith(ROW_CLONE)}   # (a row's clone: _inner_row_stores)
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and mentions(n.value):
                # (`t *= i`: the name becomes arithmetic of the index, in whatever type it held)
                if floaty(n.target) or not isinstance(n.op, (ast.Add, ast.Sub, ast.Mult)):
                    return True
                derived.add(n.target.id)
    # (an index whole of int arithmetic, `x[t + k]`, `x[t * 2 - 1]`: a float there raises in
    # the loop and in a batch alike, where the subscript is a tensor's or a list's)
    def int_arith(e):
        return all(isinstance(m, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Add, ast.Sub, ast.Mult,
                                  ast.FloorDiv, ast.Mod, ast.USub, ast.UAdd))
                   or isinstance(m, ast.Constant) and type(m.value) is int for m in fastast.walk(e))
    # (every part of such an index: `t + N` inside `x[t + N + n]` is no float either)
    whole = {id(m) for s in stmts for n in fastast.walk(s) if isinstance(n, ast.Subscript)
             for e in (n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]) if int_arith(e)
             for m in fastast.walk(e)}
    _INT_CALLS = ("int", "len", "range", "abs", "min", "max", "bool")
    for s in stmts:
        parents = {id(c): p for p in fastast.walk(s) for c in ast.iter_child_nodes(p)}
        for n in fastast.walk(s):
            if isinstance(n, ast.Name) and n.id in derived and isinstance(n.ctx, ast.Load):
                # the index (or a name made from it) as a Python number where no operator rule
                # below sees it: a call's argument (`pow(t, 0.5)`, `math.sqrt(t)`), a method of it
                # (`t.__truediv__(3)`), an element of a literal (`c, u = 0.1, t`, `[0.1, t][0]`)
                p = parents.get(id(n))
                while isinstance(p, (ast.BinOp, ast.UnaryOp)) and id(p) not in whole:
                    if not all(isinstance(m, (ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop,
                                              ast.Load)) or isinstance(m, ast.Name) and (m.id in derived or m.id in numbers)
                               for m in fastast.walk(p)):
                        break       # (arithmetic with a tensor, `x[i] * i`: the operator rules below)
                    p = parents.get(id(p))
                if isinstance(p, ast.Call) and not (isinstance(p.func, ast.Name) and p.func.id in _INT_CALLS) \
                        and not (isinstance(p.func, ast.Attribute) and p.func.attr == ROW_FIT) \
                        and n is not p.func and any(a is n or any(m is n for m in fastast.walk(a))
                                                   for a in list(p.args) + [k.value for k in p.keywords]):
                    return True
                if isinstance(p, ast.Attribute) or isinstance(p, (ast.Tuple, ast.List, ast.Set, ast.Dict)) \
                        and not isinstance(parents.get(id(p)), ast.Subscript):
                    return True
    for s in stmts:
        for n in fastast.walk(s):
            if isinstance(n, (ast.BinOp, ast.AugAssign)) and id(n) not in whole:
                left, right = (n.left, n.right) if isinstance(n, ast.BinOp) else (n.target, n.value)
                a, b = mentions(left), mentions(right)
                if a or b:
                    if isinstance(n.op, (ast.Div, ast.Pow)) or (a and not b and floaty(right)) \
                            or (b and not a and floaty(left)):
                        return True
    return False


def _bare_names(node) -> set:
    """Names read in `node` outside subscripts' slices (`x[t]` reads x, not t: an index that only
    selects elements is no number in arithmetic)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Subscript):
        return _bare_names(node.value)
    return set().union(*map(_bare_names, ast.iter_child_nodes(node)))


_INT_GROWTH = (ast.Mult, ast.Pow, ast.LShift, ast.RShift)


def inner_int_growth(stmts, indices) -> bool:
    """Whether an inner loop of the body (_inner_loop) multiplies, raises or shifts a value made
    from the loop's index (`s = s * (t % 7 + 2)`, `1 << (k - t)`): repeated, Python's exact ints
    outgrow an int64 batch, or a shift turns negative where the loop raises (runtime._py_arith:
    only a batched body holds the index as a Python number)."""
    derived = set(indices)
    for st in stmts:
        for n in fastast.walk(st):
            if isinstance(n, ast.Assign) and _bare_names(n.value) & derived:
                derived |= {t.id for tg in n.targets for t in fastast.walk(tg) if isinstance(t, ast.Name)}
    return any(isinstance(n, (ast.BinOp, ast.AugAssign)) and isinstance(n.op, _INT_GROWTH)
               and _bare_names(n) & derived
               for st in stmts for loop in fastast.walk(st) if isinstance(loop, ast.For) for n in fastast.walk(loop))


def _exit_scans(outputs, body: _Body):
    """Sums the `break` condition reads before their update (`if spent + c > budget: break`
    then `spent = spent + c`): the condition sees each iteration's running total before it,
    an exclusive prefix sum (Token-side: runtime.exit_prefix, integers only). Returns
    ((name, marker, op, update position), ...) and the ids of the condition's reads of them."""
    at = next((k for k, s in enumerate(body.stmts) if isinstance(s, ast.Assign) and len(s.targets) == 1
               and isinstance(s.targets[0], ast.Name) and s.targets[0].id == EXIT), None)
    if at is None:
        return [], set()
    cond = body.stmts[at]
    found, exempt = [], set()
    for o in outputs:
        if o.kind != "accum" or o.cond or o.op not in ("+", "-") or o.payloads or o.joined:
            continue
        reads = [ld for ld in nm.loads(cond) if ld.id == o.target]
        pos = next((k for k, s in enumerate(body.stmts) if isinstance(s, ast.Assign)
                    and isinstance(s.targets[0], ast.Name) and s.targets[0].id == o.marker), None)
        if not reads or pos is None or pos < at:
            continue
        if any(ld.id == o.target for k, s in enumerate(body.stmts) if k != at for ld in nm.loads(s)):
            continue     # read elsewhere too: a carried value (refused below)
        found.append((o.target, o.marker, o.op, pos))
        exempt |= {id(ld) for ld in reads}
    return found, exempt


def _scans(outputs, body: _Body, targets: dict):
    """Accumulators read later in the same iteration (`s = s + x[i]; out[i] = s`) are prefix
    scans: the body sees the running value. Returns (outputs, scans), scans being
    (name, marker, op, position of the update in the body)."""
    scans = []
    kept = []
    for o in outputs:
        if o.kind == "linrec":
            pos = next(k for k, s in enumerate(body.stmts) if isinstance(s, ast.Assign)
                       and isinstance(s.targets[0], ast.Name) and s.targets[0].id == o.payloads[0][1])
            decay = body.stmts[pos].value
            if nm.load_ids(decay) & (body.varying | set(body.assigned)):
                # a factor that changes every step (`gamma * (1 - done[t])`): computed per step
                # (`+=v`: an update in place that changes every step, runtime._linear_prefix)
                o = dataclasses.replace(o, payloads=((*o.payloads[0][:3], "+=v" if o.payloads[0][3] == "+="
                                                      else o.payloads[0][3] or "varying"),))
            if any(ld.id == o.target for s in body.stmts[:pos] for ld in nm.loads(s)):
                # read before its update, only by stores (`out[t] = h` then `h = a * h + x[t]`): the
                # values before each step, an exclusive scan (Token.add_scan's `before`)
                reads = _value_reads(o.target, body.stmts[:pos], outputs, body.stmts)
                if reads is None or reads[0] or any(ld.id == o.target for s in body.stmts[pos + 1:]
                                                    for ld in nm.loads(s)):
                    raise Refuse(f"loop-carried dependency: `{o.target}` is read before its update at line "
                                 f"{o.lineno}", o.lineno)
                o = dataclasses.replace(o, exclusive="stored", bare=reads[1])
            if o.payloads[0][3].startswith("+=") and _aliases_running_value(o.target, body.stmts[pos + 1:], outputs):
                # (`mean += (x[i].item() - mean) / (i + 1)` then `hist.append(mean)`: a Python number
                # throughout is nothing to alias; a tensor would be one updated in place, handed on.
                # The call decides: "h", runtime._linear_prefix)
                o = dataclasses.replace(o, payloads=((*o.payloads[0][:3], o.payloads[0][3] + "h"),))
            elif o.payloads[0][3].startswith("reset+=") and not _strip_item(ast.parse(o.value, mode="eval").body)[1] \
                    and _aliases_running_value(o.target, body.stmts[pos + 1:], outputs):
                # (a Python number added, `c += x[t].item()`, keeps one: nothing to alias)
                raise Refuse(f"`{o.target} += ...` at line {o.lineno} updates one tensor in place between resets, "
                             "and the loop hands that tensor on (each reference would see the later updates)",
                             o.lineno)
            scans.append((o.target, o.marker, "lin", pos))
            kept.append(o)
            targets.pop(o.target, None)
            continue
        best_scan = o.kind == "best" and not o.cond and o.op in (">", ">=", "<", "<=")
        # (a chain of terms, `s = s + a[t] + b[t]` (_terms_output): one term per step, their sum)
        terms = o.kind == "accum" and o.op in ("+", "-", "*") and bool(o.payloads) and not o.joined \
            and all(p[0] == "" for p in o.payloads)
        if not best_scan and (o.kind != "accum" or o.cond or o.op not in ("+", "-", "*", "max", "min", "lse") + LOGICAL
                              or o.payloads and not terms):
            kept.append(o)
            continue
        last = o.payloads[-1][1] if (best_scan or terms) and o.payloads else o.marker
        pos = next((k for k, s in enumerate(body.stmts) if isinstance(s, ast.Assign)
                    and isinstance(s.targets[0], ast.Name) and s.targets[0].id == last), None)
        names = {o.target} | ({p[0] for p in o.payloads} if best_scan else set())
        before = [ld for s in body.stmts[:pos] for ld in nm.loads(s) if ld.id in names] if pos is not None else []
        after = [ld for s in body.stmts[pos + 1:] for ld in nm.loads(s) if ld.id in names] if pos is not None else []
        reads = _value_reads(o.target, body.stmts[:pos] if before else body.stmts[pos + 1:], outputs, body.stmts) \
            if pos is not None else None
        exclusive = bool(before) and not after and not best_scan and o.op in ("+", "-", "*") + LOGICAL \
            and not o.counted and reads is not None
        if pos is None or before and not exclusive or not before and not after:
            kept.append(o)
            continue
        counted_by = bool(o.counted) and o.counted != "None" and o.pytype != "const"   # (K a name: any type)
        if (o.inplace and not o.pytype or counted_by) and _aliases_running_value(o.target, body.stmts[pos + 1:],
                                                                                 outputs):
            if not counted_by:
                kept.append(o)  # `total += v; hist.append(total)` keeps n references to one tensor
                continue
            # (`if c: k += K` then `ids.append(k)`: a Python number K keeps `k` one, nothing to
            # alias; a tensor K would make it one tensor updated in place, or, `k = k + K`, one
            # object appended again at every step that does not count: the call decides)
            o = dataclasses.replace(o, handed=True)
        # a running best (`m = max(m, v)`, `if v > m: m = v`) read later: op "best>" etc.
        scans.append((o.target, o.marker, "best" + o.op if best_scan else o.op, pos))
        kept.append(dataclasses.replace(o, kind="scan", exclusive=exclusive and (
            "appended" if reads[0] else "stored"), bare=reads is not None and reads[1]))
        del targets[o.target]
        for k, p in enumerate(o.payloads if best_scan else ()):
            # `if v > m: m, j = v, i`: the payload as the loop had it at each step (op "pay")
            scans.append((p[0], o.marker, f"pay{o.op}:{k}", pos))
            targets.pop(p[0], None)
    by_marker = {o.marker: o for o in kept}
    for name, marker, op, pos in scans:
        # each running value's terms are computed for all steps before any scan runs: a term
        # that reads another running value after that one's update (`v = mu * v + g[t]` then
        # `w = w - lr * v`) would see its value before the loop, not the step's. Only the
        # statements its terms need count (a store of the other one, `o1[i] = s`, does not:
        # lowering.common computes the terms from those alone)
        earlier = {n for n, _, _, p in scans if p < pos}
        o = by_marker.get(marker)
        wanted = {marker}
        if op == "lin" and o is not None:
            wanted.add(o.payloads[0][1])
        elif op.startswith("pay") and o is not None:
            wanted.add(o.payloads[int(op.split(":")[1])][1])
        terms = nm.needed(list(body.stmts[:pos + 1]), wanted)
        hit = sorted(earlier & {ld.id for st in terms for ld in nm.loads(st)})
        if hit:
            line = getattr(body.stmts[pos], "lineno", None)
            raise Refuse(f"loop-carried dependency: the running value `{name}` is updated from `{hit[0]}`, "
                         f"another running value of the loop (line {line})", line)
    return kept, scans


SHIFT = "_av_was_"      # the name a shifted value's reads before its assignment read (_shifts)


def _shifts(node, ctx: Context, outputs, scans, body: _Body, targets: dict, iter_vars):
    """A name assigned once an iteration, at the top level, from values of that iteration
    (`prev = c` after `if c != prev: out.append(c)`, `last = x[t]` after `d = x[t] - last`), and
    read before that assignment: those reads see the value the step before assigned (its start
    before the first step), the values shifted by one step. The assignment becomes `marker =
    value; name = marker`, the reads before it read `_av_was_<name>`, a running value of op
    "last" whose values are the marker's (runtime._prefix): its values before each step are the
    start, then the marker's values but the last (Token.add_scan's `before`), and the name's own
    value after the loop is the last iteration's, as any name's. Only where every iteration
    runs the assignment (no `continue`, `break` or `return` in the loop) and its value does not
    depend on those reads (that would be a recurrence)."""
    if not isinstance(node, (ast.For, ast.While)) or getattr(node, "orelse", None) or any(
            isinstance(n, (ast.Continue, ast.Break, ast.Return, ast.Yield, ast.YieldFrom, ast.Try, ast.With))
            for st in node.body for n in fastast.walk(st)):
        return outputs, scans
    stmts = body.stmts
    taken = {sc[0] for sc in scans} | set(targets) | set(iter_vars) | {o.target for o in outputs if o.kind != "last"}
    for k, st in enumerate(stmts):
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
            continue
        name = st.targets[0].id
        if name in taken or name.startswith("_av_") or name not in body.assigned:
            continue
        if sum(1 for x in stmts for n in fastast.walk(x) if isinstance(n, ast.Name) and n.id == name
               and not isinstance(n.ctx, ast.Load)) != 1:
            continue       # (bound once an iteration, by this statement alone)
        if not any(ld.id == name for x in stmts[:k] for ld in nm.loads(x)):
            continue       # (not read before it: no value crosses the iterations)
        if name in nm.load_ids(st.value) or any(
                name in {ld.id for ld in nm.loads(x)} | nm.mutated(x)
                for x in nm.needed(list(stmts[:k]) + [st], {name})[:-1]):
            continue       # (its value computed from the value before: a recurrence)
        if any(name in nm.mutated(x) for x in stmts if x is not st):
            continue       # (changed in place: `prev.add_(1)`)
        if _view_roots(st.value, stmts, ctx) & (_written_in_place(stmts) | {
                _root_name(o.target) for o in outputs if o.kind in ("store", "scatter")}):
            # (`prev = x[t]` then `x[t] = 0`, `c = x[t]; prev = c; c.mul_(2)`: the loop's next step
            # reads the view after the write, the batch's values were taken before it; probeV)
            continue
        earlier = {sc[0] for sc in scans if sc[3] < k}
        if earlier & {ld.id for x in nm.needed(list(stmts[:k]) + [st], {name}) for ld in nm.loads(x)}:
            continue       # (computed from another running value: its terms run before any scan)
        markers = {o.marker: o for o in outputs}
        if any(name in {ld.id for x in nm.needed(list(stmts[:q + 1]), {m} | {
                p[1] for p in getattr(markers.get(m), "payloads", ()) if len(p) > 1 and isinstance(p[1], str)})
                        for ld in nm.loads(x)}
               for _, m, _, q in scans if q < k):
            continue       # (read by another running value's terms, which run before any scan's values)
        marker, was = body.marker(), SHIFT + name
        value_stmt = ast.copy_location(ast.Assign(targets=[ast.Name(id=marker, ctx=ast.Store())], value=st.value), st)
        bind = ast.copy_location(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                                            value=ast.Name(id=marker, ctx=ast.Load())), st)
        for x in (value_stmt, bind):
            x.end_lineno, x.end_col_offset = st.end_lineno, st.end_col_offset
            ast.fix_missing_locations(x)
        renamed = [_ReplaceLoads(name, was).visit(fastast.clone(x)) for x in stmts[:k]]
        read_by = [o for x in renamed for n in fastast.walk(x) if isinstance(n, ast.Assign) and len(n.targets) == 1
                   and isinstance(n.targets[0], ast.Name) and n.targets[0].id in markers
                   and was in nm.load_ids(n.value) for o in [markers[n.targets[0].id]]]
        reads = [ld for x in renamed for ld in nm.loads(x) if ld.id == was]
        bare = len(reads) == sum(1 for x in renamed for n in fastast.walk(x) if isinstance(n, ast.Assign)
                                 and isinstance(n.value, ast.Name) and n.value.id == was and len(n.targets) == 1
                                 and isinstance(n.targets[0], ast.Name) and n.targets[0].id in markers
                                 and markers[n.targets[0].id].kind == "store" and not markers[n.targets[0].id].op)
        # (an append of the name itself: the loop's list holds the start's own object first)
        appended = any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Name) and n.value.id == was
                       and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and n.targets[0].id in markers
                       and markers[n.targets[0].id].kind == "append" for x in renamed for n in fastast.walk(x))
        stmts[:k + 1] = renamed + [value_stmt, bind]
        outputs = [dataclasses.replace(o, value=ast.unparse(_ReplaceLoads(name, was).visit(
            ast.parse(o.value, mode="eval"))) if any(o is r for r in read_by) else o.value) for o in outputs]
        outputs.append(Output("scan", was, ast.unparse(st.value), st.lineno, op="last", marker=marker,
                              exclusive="appended" if appended else "stored", bare=bare))
        # (the statements after it move down by one: `name = marker` is one more; the next name
        # is looked for on the new list)
        scans = [(a, b, c, q + 1 if q > k else q) for a, b, c, q in scans] + [(was, marker, "last", k)]
        return _shifts(node, ctx, outputs, scans, body, targets, iter_vars)
    return outputs, scans


def _view_roots(value, stmts, ctx: Context, depth: int = 0) -> set:
    """The names whose memory `value` may be (_view_root), and through a name the body binds once,
    those its value may be; none where it is new memory."""
    root = _view_root(value, ctx)
    if root is None:
        return set()
    found = {root}
    binds = [n for x in stmts for n in fastast.walk(x) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == root for t in n.targets)]
    if len(binds) == 1 and depth < 8:
        found |= _view_roots(binds[0].value, stmts, ctx, depth + 1)
    elif binds:
        found.add("*")          # (bound several times: any of them)
    return found


def _written_in_place(stmts) -> set:
    """The names whose memory the statements write (names.mutated but plain rebinding: stores into
    elements or attributes, in-place methods, augmented assignments), all the names a statement
    reads where it has a call with `out=` / `inplace=` (names.in_place_keyword)."""
    out = set()
    for x in stmts:
        nodes = list(fastast.walk(x))
        out |= nm.mutated(x) - nm.stores(x)
        out |= {n.target.id for n in nodes if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
        if any(isinstance(c, ast.Call) and nm.in_place_keyword(c) for c in nodes):
            out |= nm.load_ids(x)
    return out


class _ReplaceLoads(ast.NodeTransformer):
    """Reads of `old` as reads of `new` (not in nested scopes' own bindings: none are renamed)."""

    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit_Name(self, node):
        if node.id == self.old and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Name(id=self.new, ctx=ast.Load()), node)
        return node


def _value_reads(name: str, stmts, outputs, body_stmts=None):
    """How `stmts` read the running value `name` where every read is in the value a store writes
    or a list appends, at the top level (`out[i] = s`, `out[i] = s * 2`, `starts.append(off)`: the
    analysis's `marker = ..` of such an output): (whether a list appends one, whether every read
    stores the name itself, `out[i] = s`), else None. Read only so before its update, the value
    is an exclusive scan (nothing the update computes can depend on those reads; appended values
    must be Python numbers: Token.add_scan). Stored as it is, no operation keeps it for backward,
    which an in-place update under gradients would break in the loop (Token.add_scan)."""
    stores = {o.marker for o in outputs if o.kind == "store" and not o.op}
    appends = {o.marker for o in outputs if o.kind == "append" and not o.cond and not o.record and not o.joined}
    # (the values another running value adds, `total += lp * (~done).float()` before `done = done |
    # eos[t]`, where that one is only read after the loop: a sum of the body's values, which see the
    # values before each step as the stores do; one read in the loop would be a scan, whose terms
    # are computed before any scan's values)
    sums = {o.marker for o in outputs if o.kind == "accum" and not o.payloads and o.target != name
            and o.target not in {ld.id for x in (body_stmts or ()) for ld in nm.loads(x)}}
    stores |= sums
    appended, bare = False, True
    todo = list(stmts)
    while todo:
        st = todo.pop(0)
        if name not in {ld.id for ld in nm.loads(st)}:
            continue
        if isinstance(st, ast.If) and name not in nm.load_ids(st.test):
            # (a store under a condition, `if m[i]: idx[i] = k` before `k += int(bool(m[i]))`: its
            # branches' statements read it as the top level's do, in the iterations they run in)
            todo[:0] = list(st.body) + list(st.orelse)
            continue
        target = st.targets[0].id if isinstance(st, ast.Assign) and len(st.targets) == 1 \
            and isinstance(st.targets[0], ast.Name) else None
        if target not in stores and target not in appends:
            return None
        appended = appended or target in appends
        v = st.value
        if isinstance(v, ast.IfExp) and isinstance(v.body, ast.Constant) and name not in nm.load_ids(v.test):
            v = v.orelse      # (`(0 if c else h)`, a read after a reset, _merge_resets: a number, or h as it is)
        bare = bare and target in stores and target not in sums and isinstance(v, ast.Name) and v.id == name
    return appended, bare


def _inplace_prefix(outputs, body: _Body, space: IterSpace, ctx=None):
    """`t[i] += t[i - k]` (or `t[i] = t[i] * t[i - k]`, `t[i] = torch.maximum(t[i], t[i - k])`)
    over `range(a, b)`, k a positive constant: an in-place prefix sum (product, running maximum
    or minimum) of t[a - k : b] along the indexed dimension, one per residue of k (a lag of 1:
    one cumsum); a forward fill (_fill_prefix); walking back (`reversed(range(a, b))`, reading
    t[i + k]) the same on t[a : b + k] flipped (`flip`). Returns the output as kind "prefix" with
    `offset` = k, or None."""
    if len(outputs) != 1 or len(body.stmts) != 1 or space.kind != "range" or len(space.range_args) == 3:
        return None
    o = outputs[0]
    if o.kind != "store" or o.offset != 0:
        return None
    idx = space.index
    back = space.reverse     # `for i in reversed(range(a, b)): t[i] += t[i + k]`: a suffix scan
    first = body.stmts[0]
    if o.cond:
        # `if c(x[i]): x[i] = x[i - k]`: a fill from the row before (forward fill), below
        if not (isinstance(first, ast.If) and not first.orelse and len(first.body) == 1
                and isinstance(first.body[0], ast.Assign) and not o.op):
            return None
        return _fill_prefix(o, first.test, first.body[0].value, idx, ctx, row_test=True, back=back)
    value = first.value
    if (not o.op and isinstance(value, ast.Call) and len(value.args) == 3 and not value.keywords
            and isinstance(value.func, ast.Attribute) and value.func.attr == "where"):
        # `x[i] = torch.where(c(x[i]), x[i - k], x[i])`: the same fill, element by element
        fill = _fill_prefix(o, value.args[0], value.args[1], idx, ctx, row_test=False, kept=value.args[2], back=back)
        if fill is not None:
            return fill

    def lag(n):
        """k where `n` is the element t[i - k] of the stored tensor (t[i + k] walking back; 0 for
        t[i] itself), else None. A lag held in a loop-invariant name (`t[i - period]`): that
        name's source, a string (its value is checked on each call: runtime._prefix_region)."""
        if not (isinstance(n, ast.Subscript) and src(n.value) == o.target):
            return None
        m = match_subscript(n, idx)
        if m == "other" and o.index_src.format("{}") == _holder(n, o.dim):
            entries = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            e = entries[o.dim] if o.dim < len(entries) else None
            if (isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add if back else ast.Sub)
                    and isinstance(e.left, ast.Name) and e.left.id == idx and isinstance(e.right, ast.Name)
                    and e.right.id not in (idx, o.target) and e.right.id not in body.assigned):
                return e.right.id
            return None
        if not (isinstance(m, tuple) and m[0] == o.dim and type(m[1]) is int and (m[1] >= 0 if back else m[1] <= 0)
                and o.index_src.format("{}") == _holder(n, o.dim)):
            return None
        return abs(m[1])

    def pair(a, b):
        """k where (a, b) is (t[i], t[i - k]) in either order."""
        la, lb = lag(a), lag(b)
        if la == 0 and lb:
            return lb
        if lb == 0 and la:
            return la
        return None
    k, op, one = None, None, ()
    if o.op in ("+", "*"):
        k, op = lag(value) or None, o.op
    elif o.op == "" and isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Mult)):
        k, op = pair(value.left, value.right), "+" if isinstance(value.op, ast.Add) else "*"
    elif (o.op == "" and ctx is not None and isinstance(value, ast.Call) and len(value.args) == 2
          and not value.keywords and isinstance(value.func, ast.Attribute)
          and value.func.attr in ("maximum", "minimum", "max", "min")):
        # `torch.maximum(t[i], t[i - k])`: torch's own function (a name the call checks again:
        # frontend's assumptions), elementwise on the two rows
        try:
            found, fn = ctx.env.resolve(src(value.func))
        except Exception:
            return None
        import torch
        if found and (fn is torch.maximum or fn is torch.max or fn is torch.minimum or fn is torch.min):
            k = pair(*value.args)
            op = "max" if fn is torch.maximum or fn is torch.max else "min"
    elif (o.op == "" and ctx is not None and isinstance(value, ast.Call) and len(value.args) == 2
          and not value.keywords and isinstance(value.func, ast.Name) and value.func.id in ("max", "min")
          and _is_builtin(ctx, value.func.id)):
        # Python's `max(t[i], t[i + 1])` of one-element rows (the precision envelope of average
        # precision): the larger by `>`, which the running extreme gives where no NaN and no zeros
        # of both signs meet (the runtime checks those, as for torch.maximum's), and where each row
        # is one element (`rows1`: of several, the loop's truth test raises)
        k = pair(*value.args)
        op = value.func.id
        one = (("rows1", True),)
    if not k or op is None:
        return None
    if isinstance(k, str):
        # (a lag by name: `payloads` holds it, `offset` 0)
        return dataclasses.replace(o, kind="prefix", op=op, offset=0, flip=back, payloads=(("lag", k),) + one)
    return dataclasses.replace(o, kind="prefix", op=op, offset=k, flip=back, payloads=one)


# elementwise tests a fill's condition may be made of (`torch.isnan(x[i])`, `x[i] == 0`, `~m`)
_FILL_TESTS = frozenset(("isnan", "isinf", "isfinite", "isneginf", "isposinf", "isreal", "logical_not", "logical_and",
                         "logical_or", "signbit", "eq", "ne", "lt", "le", "gt", "ge"))


def _fill_prefix(o, test, taken, idx, ctx, row_test, kept=None, back=False):
    """`if c(x[i]): x[i] = x[i - k]` (row_test: the loop's truth test of c, one per row) or `x[i] =
    torch.where(c(x[i]), x[i - k], x[i])`: each row (element) takes the value of the row k before
    where the test holds on its own value, which that row already took: a forward fill, the last
    row of its chain before it where the test failed. Returns kind "prefix" with op "fill",
    `offset` k and the test as a function of the row (`payloads`: ("test", source with the row
    as `_av_row`, row_test)), or None. The test may read the row and loop-invariant values only,
    through elementwise operations (_FILL_TESTS, comparisons, `~`, `&`, `|`, `not`), so that it
    computes on all rows at once what it computes on each."""
    import torch

    def ref(n, off):
        return (isinstance(n, ast.Subscript) and src(n.value) == o.target
                and match_subscript(n, idx) == (o.dim, off) and o.index_src.format("{}") == _holder(n, o.dim))
    m = match_subscript(taken, idx) if isinstance(taken, ast.Subscript) and src(taken.value) == o.target else None
    if not (isinstance(m, tuple) and m[0] == o.dim and type(m[1]) is int and (m[1] > 0 if back else m[1] < 0)
            and ref(taken, m[1])):
        return None     # (walking back, `x[i + k]`: a backward fill)
    if kept is not None and not ref(kept, 0):
        return None
    row = ast.Name(id="_av_row", ctx=ast.Load())
    uses = [0]

    class _Row(ast.NodeTransformer):
        def visit_Subscript(self, node):
            if ref(node, 0):
                uses[0] += 1
                return ast.copy_location(fastast.clone(row), node)
            return self.generic_visit(node)
    t = _Row().visit(fastast.clone(test))
    if not uses[0] or idx in nm.load_ids(t) or o.target in nm.load_ids(t):
        return None
    funcs = {id(n.func) for n in fastast.walk(t) if isinstance(n, ast.Call)}
    for n in fastast.walk(t):
        if isinstance(n, ast.Attribute) and id(n) not in funcs:
            return None     # (only the calls' own `torch.isnan` / `row.isnan`: no other attribute is read)
        if isinstance(n, ast.Call):
            if not isinstance(n.func, ast.Attribute) or n.func.attr not in _FILL_TESTS or n.keywords:
                return None
            try:
                found, fn = ctx.env.resolve(src(n.func)) if isinstance(n.func.value, ast.Name) \
                    and n.func.value.id != "_av_row" else (True, getattr(torch.Tensor, n.func.attr))
            except Exception:
                return None
            if not found or getattr(torch, n.func.attr, None) is not fn and getattr(torch.Tensor, n.func.attr, None) is not fn:
                return None
        elif isinstance(n, (ast.Subscript, ast.Lambda, ast.IfExp, ast.NamedExpr, ast.Starred)):
            return None
        elif isinstance(n, ast.BinOp) and not isinstance(n.op, (ast.BitAnd, ast.BitOr)):
            return None
        elif isinstance(n, ast.UnaryOp) and not isinstance(n.op, (ast.Not, ast.Invert)):
            return None
        elif isinstance(n, ast.BoolOp):
            return None     # (`a and b` of tensors: their truth values, which the batch does not have)
        elif isinstance(n, ast.Compare) and (len(n.ops) != 1 or isinstance(n.ops[0], (ast.Is, ast.IsNot, ast.In, ast.NotIn))):
            return None
    if not row_test and any(isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not) for n in fastast.walk(t)):
        return None     # (`not` of a row in torch.where: its truth value, an error for several elements)
    return dataclasses.replace(o, kind="prefix", op="fill", offset=abs(m[1]), cond=False, flip=back,
                               payloads=(("test", src(t), row_test),))


def _holder(sub: ast.Subscript, d: int) -> str:
    entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
    parts = [src(e) for e in entries]
    parts[d] = "{}"
    return src(sub.value) + "[" + ", ".join(parts) + "]"


def _aliases_running_value(name: str, stmts, outputs) -> bool:
    """After `name += v` (in place on a tensor) the running value is one object, changed
    every iteration: only arithmetic on it (which makes new tensors) may follow; handing it
    on, or a view of it (`name[...]`, `name.view(...)`), would see later updates."""
    copied = {o.marker for o in outputs if o.kind in ("store", "accum", "scatter")}
    todo = list(stmts)
    while todo:
        s = todo.pop(0)
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Name) and s.value.id == name \
                and isinstance(s.targets[0], ast.Name) and s.targets[0].id in copied:
            continue   # `out[i] = name` copies the values
        if isinstance(s, ast.If):
            # (under a condition, `if not y[t]: auc += tp`: its statements as the top level's)
            todo[:0] = list(s.body) + list(s.orelse)
            s = s.test
        parents = {c: p for p in fastast.walk(s) for c in ast.iter_child_nodes(p)}
        for n in fastast.walk(s):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
                up = parents.get(n)
                if not isinstance(up, (ast.BinOp, ast.UnaryOp, ast.Compare)):
                    return True
    return False


def _store(out: Output, sub: ast.Subscript, space: IterSpace, body: _Body, iter_vars) -> Output:
    index = space.index
    if index is None:
        raise Refuse(f"`{out.index_src}` at line {out.lineno} is written in a loop without an index variable", out.lineno)
    if not _base_ok(sub.value):
        raise Refuse(f"`{out.index_src}` at line {out.lineno}: the written tensor is not a plain name", out.lineno)
    m = match_subscript(sub, index)
    # (every name the body binds: a running value too, `out[t, done] = v` after `done |= ..`, whose
    # value changes from step to step though no plain assignment binds it; probeT)
    changing = set(body.assigned) | set(body.written)
    if m is None:
        moving = sorted(nm.load_ids(sub.slice) & changing)
        if moving:
            # (`s = i * hop; out[s:s + win] += v`: a place the loop computes, not the index itself)
            raise Refuse(f"`{out.index_src}` at line {out.lineno} is written at a place computed in the loop "
                         f"(`{moving[0]}`), which autovec cannot map to rows of its own (use the loop index: "
                         f"`out[i]`, `out[i + c]` or `out[:, i]`)", out.lineno)
        raise Refuse(f"every iteration writes the same element `{out.index_src}` (line {out.lineno}): "
                     + ("each update reads the value the iteration before left, so iterations depend on each other"
                        if out.op else "the last write wins, so iterations depend on each other"), out.lineno)
    if m == "other":
        raise Refuse(f"`{out.index_src}` at line {out.lineno} is written at an index autovec cannot "
                     "map to one dimension (use `out[i]`, `out[i + c]` or `out[:, i]`)", out.lineno)
    d, off = m
    entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
    for e in entries[:d] + entries[d + 1:]:
        bad = nm.load_ids(e) & (changing | set(iter_vars))
        if bad:
            raise Refuse(f"the index of `{out.index_src}` at line {out.lineno} uses `{sorted(bad)[0]}`, "
                         "which changes inside the loop", out.lineno)
    if space.kind == "elements" and index:
        off += int(space.enum_start)
    parts = [src(e) for e in entries]
    parts[d] = "{}"
    holder = src(sub.value) + "[" + ", ".join(parts) + "]"
    return dataclasses.replace(out, target=src(sub.value), dim=d, offset=off, index_src=holder)


def _located(node: ast.AST, line: int) -> ast.AST:
    for n in fastast.walk(node):
        if "lineno" in n._attributes and not hasattr(n, "lineno"):
            n.lineno, n.col_offset, n.end_lineno, n.end_col_offset = line, 0, line, 0
    return node


def _last_value(name: str, stmts: list, body: _Body, at: int) -> Output:
    """A name assigned in the loop and read after it: the value of the last iteration (that assigned it)."""
    writes = [(n, depth) for n, depth in _assignments(stmts, name)]
    reads_inside = any(name in nm.load_ids(s) for s in stmts)
    marker = body.marker()
    if any(d == 0 for _, d in writes):
        stmts.append(_located(ast.Assign(targets=[ast.Name(id=marker, ctx=ast.Store())],
                                         value=ast.Name(id=name, ctx=ast.Load())), writes[-1][0].lineno))
        return Output("last", name, name, writes[-1][0].lineno, marker=marker)
    if len(writes) == 1 and not reads_inside:
        (stmt, _), = writes
        _insert_after(stmts, stmt, _located(ast.Assign(targets=[ast.Name(id=marker, ctx=ast.Store())],
                                                        value=ast.Name(id=name, ctx=ast.Load())), stmt.lineno))
        return Output("last", name, name, stmt.lineno, marker=marker, cond=True)
    raise Refuse(f"`{name}` is assigned in the loop and read after it at line {at}", at)


def _assignments(stmts, name, depth=0):
    for s in stmts:
        if isinstance(s, ast.If):
            yield from _assignments(s.body, name, depth + 1)
            yield from _assignments(s.orelse, name, depth + 1)
        elif name in {n.id for n in fastast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}:
            yield s, depth


def _insert_after(stmts, target, new) -> bool:
    for k, s in enumerate(stmts):
        if s is target:
            stmts.insert(k + 1, new)
            return True
        if isinstance(s, ast.If) and (_insert_after(s.body, target, new) or _insert_after(s.orelse, target, new)):
            return True
    return False


def _root_name(base: str) -> str:
    return base.split(".")[0].split("[")[0]


def _ahead_read(ld: ast.Name, stmt: ast.AST, out: Output, index: str | None, space: IterSpace,
                ctx: Context) -> tuple | None:
    """A read `y[i + c]` of a tensor the loop stores into once, as `y[i + c0]` (the same dim),
    whose element only a later iteration writes, or none: c - c0 of the sign of the range's
    step, which a literal gives (`for t in range(T - 1, 0, -1): y[t] -= a * y[t - 1]`, pre-
    emphasis; `x[i] = x[i + 1] - x[i]` counting up). Every iteration reads what the loop's
    first saw, so the batch, which reads before it stores, computes the loop's values. Only
    where the read becomes new memory at once (a view of it kept would show the later write in
    the loop). Returns the read's (base, dim, offset) key, or None."""
    if index is None or out.kind != "store" or space.kind != "range" or out.op not in ("", "+", "-", "*", "/"):
        return None
    try:
        step = ast.literal_eval(space.range_args[2]) if len(space.range_args) == 3 else 1
    except (ValueError, SyntaxError):
        return None
    if type(step) is not int or not step:
        return None
    if space.reverse:
        step = -step
    parents = {id(c): p for p in fastast.walk(stmt) for c in ast.iter_child_nodes(p)}
    sub = parents.get(id(ld))
    if not (isinstance(sub, ast.Subscript) and sub.value is ld and isinstance(sub.ctx, ast.Load)):
        return None
    m = match_subscript(sub, index)
    if not (isinstance(m, tuple) and m[0] == out.dim):
        return None
    delta = m[1] - out.offset
    if not delta or (delta > 0) != (step > 0):
        return None
    parent = parents.get(id(sub))
    if not (_makes_new_memory(parent, sub, parents, ctx) or out.op and stmt is parent and isinstance(stmt, ast.Assign)
            and stmt.value is sub and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == out.marker):
        # (stored as it is, `x[i] = x[i + 2]`, the batch would copy x's memory into itself; the
        # value of an update, `x[i] += x[i + 1]` (the value the analysis names for the store), is
        # read once by the in-place operation, and fit_store computes an update whose value
        # shares the output's memory out of place)
        return None
    return (src(ld), m[0], m[1])


def _own_row_candidate(stmts, index) -> bool:
    """Whether some tensor is stored into at `t[index, ..]` and read at `t[index, ..]` elsewhere in
    the body: where _own_row_read may apply (plan_for tries it last, only there)."""
    def row_of(sub):
        first = sub.slice.elts[0] if isinstance(sub.slice, ast.Tuple) and sub.slice.elts else None
        return isinstance(first, ast.Name) and first.id == index and isinstance(sub.value, ast.Name)
    stored, read = set(), set()
    for st in stmts:
        for n in fastast.walk(st):
            if isinstance(n, ast.Subscript) and row_of(n):
                (stored if isinstance(n.ctx, ast.Store) else read).add(n.value.id)
    return bool(stored & read)


def _distinct_rows(space) -> bool:
    """Whether the loop's index names a row no other iteration names: a range from a literal
    start of 0 or more by a positive literal step, forward or reversed, or enumerate's counter
    from such a start (a negative start wraps: `range(-1, n)` visits row n - 1 twice; probeO)."""
    def literal(text, least):
        try:
            v = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return False
        return type(v) is int and v >= least
    if space.kind == "range":
        args = space.range_args
        return (len(args) == 1 or literal(args[0], 0)) and (len(args) < 3 or literal(args[2], 1))
    if space.kind == "elements" and space.index is not None:
        return literal(space.enum_start, 0)
    return False


def _own_row_read(ld: ast.Name, stmt: ast.AST, out: Output, index: str | None) -> bool:
    """A scatter `t[i, idx] = v` whose first index is the loop's own index (each iteration writes
    only its own row of `t`) and a read `t[i, ..]` of that row: the iteration's own elements,
    which no other iteration writes (probeI's repetition penalty, `sc = logits[i, prev[i]]` ..
    `logits[i, prev[i]] = sc`)."""
    if index is None or out.chained or out.op not in ("", "+", "-", "*", "/"):
        return False

    def own_row(sub) -> bool:
        first = sub.slice.elts[0] if isinstance(sub.slice, ast.Tuple) and sub.slice.elts else None
        return isinstance(first, ast.Name) and first.id == index and not any(
            isinstance(e, ast.Starred) for e in sub.slice.elts)
    try:
        target = ast.parse(out.index_src, mode="eval").body
    except SyntaxError:
        return False
    if not (isinstance(target, ast.Subscript) and own_row(target)):
        return False
    for n in fastast.walk(stmt):
        if isinstance(n, ast.Subscript) and n.value is ld:
            return own_row(n)
    return False


def _same_index_read(ld: ast.Name, stmt: ast.AST, out: Output, index: str | None) -> bool:
    """A store target read as `out[.. i + c ..]` with the store's own dim and offset."""
    if index is None:
        return False
    for n in fastast.walk(stmt):
        if isinstance(n, ast.Subscript) and n.value is ld:
            m = match_subscript(n, index)
            return isinstance(m, tuple) and m == (out.dim, out.offset) and out.op in ("", "+", "-", "*", "/")
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
        if isinstance(s, ast.For):
            # an inner loop (_inner_loop): its body reads what the iteration wrote before the
            # loop or earlier in the inner iteration; after it nothing it writes is sure (it may
            # run no times)
            _reads_ok(s.iter, assigned, must)
            _check_carried(s.body, assigned, must | set(nm.target_names(s.target)))
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
    where = reach.conditioned(nodes)
    occurs: dict = {}     # key -> the conditions of each of its reads
    for n in nodes:
        for sub in fastast.walk(n):
            if not isinstance(sub, ast.Subscript) or not isinstance(sub.ctx, ast.Load):
                continue
            m = match_subscript(sub, index)
            # (`x.movedim(-1, 0)[k]`, made by analysis.unbind for a walk of `x.unbind(-1)` and read
            # nowhere else in the loop: the guard evaluates the view once, as it does a name)
            view = getattr(sub.value, "_av_view", False)
            if not isinstance(m, tuple) or not (_base_ok(sub.value) or view) or start is None:
                continue
            base = src(sub.value)
            if _root_name(base) in body.assigned or _root_name(base) in iter_vars:
                continue  # indexing a per-iteration value: an ordinary operation
            d, off = m
            key = (base, d, off + start)
            if key not in mapped:
                stem = src(sub.value.func.value).replace(".", "_") + "_movedim" if view else base.replace(".", "_")
                name = f"{stem}_{index}" + (
                    "" if (d, off) == (0, 0) else f"_{d}_{off + start}".replace("-", "m"))
                taken = ctx.local_names | {m.param for m in mapped.values()}
                while name in taken:
                    name += "_"
                mapped[key] = Mapped(base, d, off + start, name)
            if getattr(sub, "_av_unit", False) and mapped[key].wraps:
                mapped[key] = dataclasses.replace(mapped[key], wraps=False)
            occurs.setdefault(key, []).append(where.get(id(sub), ()))
            entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            for e in fastast.walk(entries[d]):
                covered.add(id(e))
            for e in fastast.walk(sub.value):
                based.add(id(e))
    for n in nodes:
        for ld in nm.loads(n):
            if ld.id == index and id(ld) not in covered:
                index_as_value = True
    if index not in set().union(*map(nm.stores, nodes)):
        varying = set(body.written) | set(iter_vars)
        for key, found in occurs.items():
            text = _reach_text(found, index, varying)
            if text is not None:
                mapped[key] = dataclasses.replace(mapped[key], reach=text)
    return list(mapped.values()), index_as_value


def _reach_text(found, index: str, varying) -> str | None:
    """Mapped.reach of a read from the conditions of each of its occurrences (reach.conditioned):
    the disjunction over them of the conjunction of the tests the guard can evaluate, or None
    where one occurrence sits under none (any iteration may read it)."""
    terms = []
    for conds in found:
        kept = [f"({src(t)})" if truth else f"not ({src(t)})" for t, truth in reach.conjuncts(conds)
                if reach.index_test(t, index, varying)]
        if not kept:
            return None
        terms.append(" and ".join(kept))
    return " or ".join(f"({t})" for t in terms) if terms else None


def _callables(nodes, body: _Body, iter_vars) -> list[str]:
    out = []
    for n in nodes:
        for c in fastast.walk(n):
            if isinstance(c, ast.Call):
                root = _root(c.func)
                if root and root not in body.assigned and root not in iter_vars and isinstance(c.func, (ast.Name, ast.Attribute)) and _base_ok(c.func):
                    out.append(src(c.func))
    return out


def _bound_methods(nodes, ctx: Context, body: _Body, iter_vars) -> list[str]:
    """Calls whose callee may be a user's Python function given loop-invariant objects as
    arguments (`jitter(rng, x[i])`, `self.noisy(self.rng, x[i])`), as runtime checks of the
    methods the callee calls on those parameters (`rng.normal()`): "@param_methods(f, (args..),
    {kw: ..})", which the lowering writes as a call of runtime.param_methods in the guard's
    callables (a per-iteration argument is None there; a starred one, `*args`, `**kw`, passes
    on as it is; an element of an invariant container, `objs[i % 2]`, each of its elements; an
    expression holding invariant names, `(o, 2.0)`, `o or None`, those names' values, which
    must then be inert). The callee's own defaults are checked there too. What a helper's
    parameter is, only its call site knows: a batched body would call such a method once where
    the loop calls it once per iteration, and the one-time check, which calls it too, would
    leave the object changed for the loop that runs after it."""
    out = []
    invariant = lambda e: isinstance(e, (ast.Name, ast.Attribute)) and _base_ok(e) and _root(e) not in body.assigned \
        and _root(e) not in iter_vars
    bound = set(body.assigned) | set(iter_vars)

    def given(e):
        if invariant(e):
            return src(e)
        if isinstance(e, ast.Subscript) and invariant(e.value):
            # (an element of a loop-invariant container: each of its elements may be the argument)
            return f"{{AV}}.elements_of({src(e.value)})"
        called = {id(n.func) for n in fastast.walk(e) if isinstance(n, ast.Call)}
        names = [n.id for n in fastast.walk(e) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                 and n.id not in bound and id(n) not in called]
        if names:
            # (an expression holding invariant values, `(o, 2.0)`, `o or None`: what it gives may be
            # any of them, or hold them)
            return f"{{AV}}.contained(({', '.join(dict.fromkeys(names))},))"
        return None
    for n in nodes:
        for c in fastast.walk(n):
            if not (isinstance(c, ast.Call) and invariant(c.func)):
                continue
            try:
                found, fn = ctx.env.resolve(src(c.func))
            except Exception:       # (an attribute that cannot be read without running the user's code)
                found, fn = False, None
            starred = any(isinstance(a, ast.Starred) for a in c.args) or any(k.arg is None for k in c.keywords)
            values = [a.value if isinstance(a, ast.Starred) else a for a in c.args] + [k.value for k in c.keywords]
            inner_fn = getattr(fn, "__func__", fn)
            # (defaults holding objects, `def h(v, c=C)`: numbers and strings need no check; the pins
            # of a helper see its defaults rebound)
            defaults = found and isinstance(inner_fn, types.FunctionType) and not all(
                v is None or type(v) in (int, float, bool, complex, str, bytes)
                for v in (inner_fn.__defaults__ or ()) + tuple((inner_fn.__kwdefaults__ or {}).values()))
            if not starred and not defaults and not any(given(v) for v in values) and not (
                    isinstance(c.func, ast.Name) and (not found or isinstance(fn, functools.partial))):
                # (a callee by a name the analysis cannot resolve, `h = functools.partial(helper, obj)`
                # made before the loop, or a partial: the objects it binds are its arguments)
                continue
            if found and isinstance(fn, functools.partial):
                pass
            elif found:
                inner = fn.__func__ if isinstance(fn, types.MethodType) else fn
                if type(inner) is not types.FunctionType or (inner.__module__ or "").startswith(("torch", "autovec")):
                    continue        # (torch's functions, builtins, classes: no helper's parameters)
                from ..runtime import _param_chains
                info = _param_chains(inner)
                if info is not None and not info[1] and not info[2]:
                    continue        # (a helper that calls no method of any parameter: nothing to check)
            parts = []
            for a in c.args:
                if isinstance(a, ast.Starred):
                    # (`*args`: its values as the call spreads them; per iteration: each may hold anything)
                    parts.append(f"*{src(a.value)}" if invariant(a.value) else f"{given(a.value) or 'None'}")
                else:
                    parts.append(given(a) or "None")
            kws = [f"{k.arg!r}: {given(k.value)}" for k in c.keywords if k.arg is not None and given(k.value)]
            kws += [f"**{src(k.value)}" if invariant(k.value) else f"'**': {given(k.value) or 'None'}"
                    for k in c.keywords if k.arg is None]
            args = ", ".join(parts)
            out.append(f"@param_methods({src(c.func)}, ({args}{',' if len(parts) == 1 else ''}), {{{', '.join(kws)}}})")
    return list(dict.fromkeys(out))


def _branch_helpers(nodes, ctx: Context, invariant: set) -> tuple[str, ...]:
    """Helpers called in the body (outside nested scopes) whose returned value a condition on
    a per-iteration argument picks (`def f(r): if r.sum() > 0: return r * 2` / `return -r`,
    analysis.helpers): the body branches on per-iteration data as if the `if` were written in
    it, so the guards of branching loops apply (gradients keep the loop) and the batched body
    inlines the helper with `where` (batching._Inliner). `invariant`: the names the body reads
    that the loop does not change; every other name read varies."""
    varying = set().union(*(nm.load_ids(n) for n in nodes)) - invariant if nodes else set()
    found = []

    def visit(n):
        if isinstance(n, nm._SCOPES):
            return
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute)) and _base_ok(n.func) \
                and _root(n.func) in invariant:
            tree = ctx.env.helper_def(src(n.func))
            if tree is not None and helper_forms.varying_conditions(tree, n, varying):
                found.append(src(n.func))
        for child in ast.iter_child_nodes(n):
            visit(child)
    for n in nodes:
        visit(n)
    return tuple(dict.fromkeys(found))


def _check_calls(nodes, ctx: Context, body: _Body, iter_vars) -> None:
    """Refuse calls that may have side effects or draw random numbers."""
    for n in nodes:
        for c in fastast.walk(n):
            if not isinstance(c, ast.Call):
                continue
            f, line = c.func, c.lineno
            if id(c) in body.own_calls:
                continue    # (`t.fill_diagonal_(0)` on a tensor the iteration made: _fresh_stores)
            if isinstance(f, ast.Attribute) and f.attr == ROW_FIT and isinstance(f.value, ast.Name) \
                    and f.value.id in body.own_rows:
                continue    # (the analysis's own check of a value stored into a row's clone: _row_value)
            kw = nm.in_place_keyword(c)
            if kw:
                raise Refuse(f"`{src(f)}(.., {kw}=..)` at line {line} writes into a tensor in place", line)
            if any(k.arg == "requires_grad" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                   for k in c.keywords):
                raise Refuse(f"`{src(f)}(.., requires_grad=..)` at line {line} makes a leaf per iteration (a batch's "
                             "rows would be views of one)", line)
            root = _root(f)
            per_iter = root is not None and (root in body.assigned or root in iter_vars)
            if isinstance(f, ast.Attribute) and (per_iter or root is None or not _base_ok(f)):
                # a method of a value computed in the loop
                if f.attr == "item" and not c.args and not c.keywords:
                    body.items = True
                    continue  # computed as a float64 / int64 tensor, converted back where it leaves
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
            if (isinstance(f, ast.Attribute) and f.attr in _MUTATORS | {"item", "tolist", "numpy"} or (
                    isinstance(f, ast.Attribute) and f.attr.endswith("_") and not f.attr.endswith("__"))) \
                    and not _module_function(f, ctx):
                raise Refuse(f"`{src(f)}()` at line {line} modifies an object defined outside the loop", line)
            if root in ctx.local_names:
                continue  # a local value (argument, module): checked on each call at run time
            if isinstance(f, ast.Name) and f.id in _TEXT_BUILTINS and ctx.env.is_builtin(f.id) \
                    and any(ld.id in body.assigned or ld.id in iter_vars
                            for a in [*c.args, *(k.value for k in c.keywords)] for ld in nm.loads(a)):
                # (a per-iteration number is a tensor in the batch: `str(x[i].item())` would be
                # the text of a tensor, `hash` or `id` another object's)
                raise Refuse(f"`{f.id}()` at line {line} turns a per-iteration value into Python data", line)
            if isinstance(f, ast.Name) and f.id in _PURE_BUILTINS and ctx.env.is_builtin(f.id):
                if f.id == "round" and (len(c.args) > 1 or c.keywords):
                    # works on Python numbers alone (a tensor has no __round__ with digits), and
                    # rounds their exact decimal value, which no batched float operation repeats
                    raise Refuse(f"`round(.., ndigits)` at line {line} rounds a Python number's exact decimal "
                                 "value; no batched operation gives the same numbers, so the loop runs", line)
                continue
            verdict = ctx.env.classify(src(f))
            if verdict:
                raise Refuse(f"{verdict} (`{src(f)}` at line {line})", line)


def _module_function(f: ast.Attribute, ctx: Context) -> bool:
    """`torch.sort`: a function of torch (not a list's `.sort()`), whose purity the
    environment's classification decides, not its name. Other modules keep the name rule:
    `np.put` writes into its argument, and their functions are not all classified."""
    if f.attr.endswith("_") or not (isinstance(f.value, (ast.Name, ast.Attribute)) and _base_ok(f.value)):
        return False
    root = _root(f.value)
    if root is None or root in ctx.local_names:
        return False
    found, obj = ctx.env.resolve(src(f.value))
    return found and isinstance(obj, types.ModuleType) and (obj.__name__ == "torch" or obj.__name__.startswith("torch."))


# ----------------------------------------------------------------------------- loop nests

class _Levels(list):
    """nest_levels' answer: (index, range args, loop) per level, and `walked`: level ->
    (element name, sequence name) of the levels that walk a sequence's elements."""
    walked: dict

    def __init__(self):
        super().__init__()
        self.walked = {}


def nest_levels(node: ast.For, ctx: Context) -> list[tuple[str, tuple, ast.For]]:
    """The perfectly nested range loops starting at `node` (one entry when not a nest). A
    level may also walk the elements of a name (`for p in pos:`, _walked_level): it counts
    with an index of its own over `range(len(pos))`, and the body reads `pos[index]` where it
    read `p` (plan_nest; the runtime walks only lists, tuples and tensors: walked_range)."""
    levels, cur = _Levels(), node
    body = ast.Module(body=node.body, type_ignores=[])
    changed, reshaped = nm.mutated(body), nm.reshaped(body)   # (re-read bounds must not move)
    taken = None
    while isinstance(cur, ast.For) and not cur.orelse:
        try:
            space = iteration(cur, ctx)
        except Refuse:
            break
        if space.reverse and not _order_free(cur.body):
            # (a walk back, `reversed(range(..))` or `range(a, b, -1)`: a nest's levels run forward,
            # which only sums (`out[i] += r * i`) do not see; appends and stores would come in
            # another order)
            break
        walked = None
        if space.kind == "elements":
            walked = _walked_level(cur, space, node, ctx)
            if walked is None:
                break
            if taken is None:
                from ..codegen import all_names
                taken = all_names(ctx.fn)
            ix = space.index or next(c for c in ("i", "j", "k", "l", "m", "n", "ii", "jj", "kk") + tuple(
                f"_av_i{d}" for d in range(len(levels) + 1)) if c not in taken)
            taken.add(ix)
            args = (f"len({walked[1]})",)
        elif space.kind != "range":
            break
        else:
            ix, args = space.index, space.range_args
        outer = {ix for ix, _, _ in levels} | {v for v, _ in levels.walked.values()}
        if any(nm.load_ids(ast.parse(a, mode="eval")) & outer for a in args):
            break  # the inner range depends on an outer index: not a rectangle
        if (levels or walked) and any(bound_moves(a, changed, reshaped) for a in args):
            break  # an inner range, evaluated again by each outer iteration, reads what the body changes
        if walked:
            levels.walked[len(levels)] = walked
        levels.append((ix, args, cur))
        if len(cur.body) == 1 and isinstance(cur.body[0], ast.For):
            cur = cur.body[0]
            continue
        break
    return levels


def _walked_level(loop: ast.For, space: IterSpace, nest: ast.For, ctx: Context):
    """(element name, sequence name) where `loop` is `for p in pos:` that a nest may count by
    index instead: both plain names, neither bound anywhere in the nest (nor `p` declared
    global or nonlocal, nor read after the nest or by a closure: the nest no longer binds it),
    `pos` left as it is, so that `pos[k]` for each k in `range(len(pos))` is each element the
    loop walks, for the sequences the runtime admits (walked_range). Else None."""
    if space.unpack or space.reverse or len(space.elements) != 1 or space.index and space.enum_start != "0":
        return None
    target, it = loop.target, loop.iter
    if space.index:
        # `for k, p in enumerate(pos):` counts with its own index: k
        target, it = target.elts[1], it.args[0]
    if not (isinstance(target, ast.Name) and isinstance(it, ast.Name)):
        return None
    var, seq = target.id, it.id
    if var == seq or var in ctx.cellvars or seq in ctx.cellvars or space.index in (var, seq):
        return None
    for n in fastast.walk(ctx.fn):
        if isinstance(n, (ast.Global, ast.Nonlocal)) and var in n.names:
            return None
    from ..codegen import bindings
    own = (target, loop.target.elts[0]) if space.index else (target,)     # (the level's own binding)
    for st in nest.body:
        if any(name in (var, seq, space.index) and node not in own for name, node in bindings(st)):
            return None
    if nm.read_after(ctx.fn, ctx.parent, nest, var) is not None:
        return None
    return var, seq


class _ElementReads(ast.NodeTransformer):
    """A walked level's element read as its sequence at the level's index (`p` -> `pos[i]`)."""

    def __init__(self, subs: dict):
        self.subs = subs

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.subs:
            seq, ix = self.subs[node.id]
            return ast.copy_location(ast.Subscript(value=ast.copy_location(ast.Name(id=seq, ctx=ast.Load()), node),
                                                   slice=ast.copy_location(ast.Name(id=ix, ctx=ast.Load()), node),
                                                   ctx=ast.Load()), node)
        return node


def bound_moves(arg, changed: set, reshaped: set) -> bool:
    """Whether a range bound (source or expression) may differ between evaluations in a loop
    whose body changes `changed` (and the shapes of `reshaped`): `len(L)` with `L.append` in
    the body; not `x.shape[1]` with `x[i, j] = ..` (a store into elements keeps the shape)."""
    shaped, other = nm.shape_reads(ast.parse(arg, mode="eval") if isinstance(arg, str) else arg)
    return bool(other & changed or shaped & reshaped)


def match_subscript_nest(node: ast.Subscript, indices: list[str]):
    """[(level, position, offset)] when loop indices select dimensions affinely (every entry
    before the last index entry being a loop index or a full slice), "other" when an index
    appears otherwise, None when none appears."""
    entries = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    found, last = [], -1
    for p, e in enumerate(entries):
        hit = [lv for lv, ix in enumerate(indices) if ix in nm.load_ids(e)]
        if not hit:
            continue
        if len(hit) > 1:
            return "other"
        off = _affine(e, indices[hit[0]])
        if off is None:
            return "other"
        found.append((hit[0], p, off))
        last = p
    if not found:
        return None
    levels = [lv for lv, _, _ in found]
    if len(set(levels)) != len(levels):
        return "other"
    taken = {p for _, p, _ in found}
    if not all(_full_slice(e) for p, e in enumerate(entries[:last]) if p not in taken):
        return "other"
    return found


def _disjoint_read(ld: ast.Name, stmt: ast.AST, stmts: list, stores, ctx: Context) -> bool:
    """Whether the read `ld` (`b[i, 1]`, `b[i, 1::2]`) of a tensor stored into several times per
    iteration reads only elements that no store before it in the iteration writes: each store
    in an earlier statement has a subscript disjoint from the read's (_disjoint_subscripts), no
    store shares the read's statement but for the one whose value it is, and the read turns into
    new memory at once (no view kept for a later store to change). Then it sees the row as it
    was, as the batch reads it."""
    parents = {id(c): p for p in fastast.walk(stmt) for c in ast.iter_child_nodes(p)}
    sub = parents.get(id(ld))
    if not isinstance(sub, ast.Subscript) or sub.value is not ld or not _makes_new_memory(
            parents.get(id(sub)), sub, parents, ctx):
        return False
    k = next((j for j, st in enumerate(stmts) if st is stmt), None)
    if k is None:
        return False
    for marker, target in stores:
        at, own = _marker_assign(stmts, marker)
        if at is None:
            return False
        if at == k:
            if not (own is stmts[k] and any(r is ld for r in fastast.walk(own.value))):
                return False     # (a store in a block around the read, or beside it)
            continue
        if at < k and not _disjoint_subscripts(sub, target):
            return False
    return True


def _disjoint_subscripts(a: ast.Subscript, b: ast.Subscript) -> bool:
    """Whether two subscripts of one tensor, alike but for one place, select no common element:
    two different non-negative ints there (`b[i, 0]`, `b[i, 1]`), or two slices of one step
    from starts that differ modulo it, open at the end (`b[i, 0::2]`, `b[i, 1::2]`)."""
    ea = a.slice.elts if isinstance(a.slice, ast.Tuple) else [a.slice]
    eb = b.slice.elts if isinstance(b.slice, ast.Tuple) else [b.slice]
    if len(ea) != len(eb):
        return False

    def const(v, default=None):
        if v is None:
            return default
        return v.value if isinstance(v, ast.Constant) and type(v.value) is int and v.value >= 0 else None

    differ = False
    for x, y in zip(ea, eb):
        if ast.dump(x) == ast.dump(y):
            continue
        if differ:
            return False        # (alike but for one place)
        if const(x) is not None and const(y) is not None and not isinstance(x, ast.Slice):
            differ = True           # (two ints, not the same one: their dumps differ)
        elif isinstance(x, ast.Slice) and isinstance(y, ast.Slice) and x.upper is None and y.upper is None:
            sx, sy = const(x.step, 1), const(y.step, 1)
            lx, ly = const(x.lower, 0), const(y.lower, 0)
            differ = None not in (sx, sy, lx, ly) and sx == sy and sx > 0 and (lx - ly) % sx != 0
        if not differ:
            # (ranges of unit step that do not meet, `b[i, 2:]` and `b[i, :2]`, or an int outside a
            # range, `b[i, 0]` and `b[i, 1:]`: non-negative bounds, an open end unbounded)
            ra, rb = _unit_range(x, const), _unit_range(y, const)
            differ = ra is not None and rb is not None and (ra[1] is not None and ra[1] <= rb[0]
                                                            or rb[1] is not None and rb[1] <= ra[0])
        if not differ:
            return False
    return differ


def _same_place(a: ast.Subscript, b: ast.Subscript) -> bool:
    """Whether two subscripts of one tensor are written alike (`x[i, j]` and `x[i, j]`): the same
    elements in the same layout, which a copy onto itself leaves as they are."""
    return ast.dump(a.slice, include_attributes=False) == ast.dump(b.slice, include_attributes=False)


def _fills(e: ast.AST) -> bool:
    """Whether `e` is a slice fill of a row (`row._av_fill(..)`, FILL)."""
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == FILL


def _unit_range(e, const):
    """[start, stop) of the positions an index part takes: an int k, [k, k + 1); a slice of step 1
    with non-negative constant bounds (stop None: to the end); else None."""
    if not isinstance(e, ast.Slice):
        k = const(e)
        return None if k is None else (k, k + 1)
    if const(e.step, 1) != 1:
        return None
    lo = const(e.lower, 0)
    hi = const(e.upper) if e.upper is not None else None
    if lo is None or e.upper is not None and hi is None:
        return None
    return lo, hi


def _marker_assign(stmts: list, marker: str):
    """(the position of the top-level statement, the assignment) of an output's marker (`marker =
    value`, where _classify put the store), or (None, None)."""
    for k, st in enumerate(stmts):
        for a in _marker_assigns([st], marker):
            return k, a
    return None, None


def _marker_assigns(stmts: list, marker: str) -> list:
    """Every assignment of an output's marker in `stmts` (one per side of a branch that stores)."""
    return [a for st in stmts for a in fastast.walk(st) if isinstance(a, ast.Assign) and len(a.targets) == 1
            and isinstance(a.targets[0], ast.Name) and a.targets[0].id == marker]


def _makes_new_memory(p, r, parents, ctx: Context) -> bool:
    """Whether `p`, the parent of the tensor expression `r`, turns it into new memory at once:
    an operator, or a call of _NEW_MEMORY_CALLS without `out=` or `inplace=`: a method of `r`
    (`r.sum()`) or a function of torch's own modules (`torch.relu(r)`, `F.normalize(r)`, each
    resolved: a name of yours that returns its argument is none)."""
    if isinstance(p, (ast.BinOp, ast.Compare)):
        return True
    if isinstance(p, ast.UnaryOp):
        return not isinstance(p.op, ast.UAdd)        # (`+t` is the tensor itself)
    if isinstance(p, ast.Subscript) and p.value is r:
        # (`x[i][m].sum()`: a part of the row, a view or a copy, that its own parent consumes)
        return _makes_new_memory(parents.get(id(p)), p, parents, ctx)
    if isinstance(p, ast.Assign) and p.value is r and len(p.targets) == 1 and isinstance(p.targets[0], ast.Subscript):
        return True      # (`y[k] = x[i][m]`: copied into y's elements, no view of the row kept)
    if isinstance(p, ast.Call) and r in p.args:
        f = p.func
        if not (isinstance(f, ast.Attribute) and f.attr in _NEW_MEMORY_CALLS) or any(
                kw.arg in ("out", "inplace", None) for kw in p.keywords) or nm.in_place_keyword(p):
            return False
        found, obj = ctx.env.resolve(src(f))
        return found and (getattr(obj, "__module__", "") or "").startswith("torch")
    if isinstance(p, ast.Attribute) and p.value is r and p.attr in _NEW_MEMORY_CALLS:
        call = parents.get(id(p))
        return isinstance(call, ast.Call) and call.func is p and not any(
            kw.arg in ("out", "inplace") for kw in call.keywords) and not nm.in_place_keyword(call)
    return False


def _view_after_store(ld: ast.Name, stmt: ast.AST, stmts: list, o: Output, ctx: Context, markers=frozenset(),
                      store_subs=(), consumed=None) -> bool:
    """Whether the read `ld` of a row before its store (`x[i]`, then `x[i] = ..`) may be seen
    after the store as the row's own memory: in the loop such a view shows what the store
    wrote, while the batch read every row before any store (`a = x[i]; x[i] = x[i] * 2; y[i] =
    a + 1`: the loop's y is 2x + 1). Not where the read turns into new memory at once
    (_makes_new_memory), is part of the store's own statement, or is bound as it is to names no
    statement after the store's reads; anything else (appended or another output's value: the
    `markers` of the outputs, bound and read later, a view of it) may. `consumed`: a marker bound
    to the value a scatter copies into its target (`t[i, idx] = sc`), which no statement reads
    after the store."""
    parents = {id(c): p for p in fastast.walk(stmt) for c in ast.iter_child_nodes(p)}
    sub = parents.get(id(ld))
    if not isinstance(sub, ast.Subscript) or sub.value is not ld:
        return True
    if _makes_new_memory(parents.get(id(sub)), sub, parents, ctx):
        return False
    at, _ = _marker_assign(stmts, o.marker)
    k = next((j for j, st in enumerate(stmts) if st is stmt), None)
    if at is None or k is None:
        return True
    if k == at:
        # in the store's own statement: its value, or the test of its `if`, are read before it;
        # a statement beside the store on a side of that `if` (`t = x[i]` / `x[i] = t * 2` /
        # `y[i] = t`) binds a view that the statements after it may read after the store
        stores = _marker_assigns([stmt], o.marker)
        if o.op and any(any(r is ld for r in fastast.walk(a.value)) for a in stores):
            # (an update's own value: `g[i] /= g[i, 0]` divides the row in place by a view of its
            # own element, which the loop's in-place operation refuses; new memory, `g[i] +=
            # g[i].mean()`, is read whole before the update; a part of the row the update does
            # not write, `b[i, 2:] += b[i, :2]`, is the same before and after it)
            own = [t for marker, t in store_subs if marker == o.marker]
            return not (own and all(_disjoint_subscripts(sub, t) for t in own))
        if any(any(r is ld for r in fastast.walk(a.value)) for a in stores):
            # (the store's value read before it; where that value is the row's own memory, `x[i, 1:]
            # = x[i, :-1]`, the loop's copy meets its source part-way: torch raises, or copies
            # element by element, unless the parts are disjoint, `x[i, :2] = x[i, 2:]`)
            own = [t for marker, t in store_subs if marker == o.marker]
            # (an in-place method read as its out-of-place twin, `x[i] = x[i].clamp(0)`: new memory)
            # (nor a slice fill, `x[i] = x[i]._av_fill(..)`: the row with its span set, a copy)
            if not o.method and any(_view_root(a.value, ctx) == ld.id for a in stores
                                    if any(r is ld for r in fastast.walk(a.value)) and not _fills(a.value)) \
                    and own and not all(_disjoint_subscripts(sub, t) or _same_place(sub, t) for t in own):
                return True
            return False
        if any(any(r is ld for r in fastast.walk(n.test)) for n in fastast.walk(stmt) if isinstance(n, ast.If)):
            return False
        inner = next((n for n in fastast.walk(stmt) if isinstance(n, ast.stmt) and n is not stmt
                      and any(c is ld for c in fastast.walk(n)) and not any(
                          isinstance(c, ast.stmt) and c is not n and any(r is ld for r in fastast.walk(c))
                          for c in fastast.walk(n))), None)
        if isinstance(inner, ast.Assign) and inner.value is sub and all(isinstance(t, ast.Name) for t in inner.targets):
            names = {t.id for t in inner.targets}
            if names & set(markers):
                return True
            # (a read of the names that may follow a store of the row: after one in the source,
            # and not on another side of a branch from it)
            sides = _sides(stmts)
            return any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
                       and any((n.lineno, n.col_offset) > (w.lineno, w.col_offset)
                               and not any(n is r for r in fastast.walk(w.value))
                               and not _exclusive(sides.get(id(n), ()), sides.get(id(w), ())) for w in stores)
                       for st in stmts for n in fastast.walk(st))
        return True
    if isinstance(stmt, ast.Assign) and stmt.value is sub and all(isinstance(t, ast.Name) for t in stmt.targets):
        names = {t.id for t in stmt.targets}
        grew = True
        while grew:     # (and the names bound to a view of those: `s = r`, `s = r[1:]`)
            grew = False
            for st in stmts:
                for n in fastast.walk(st):
                    if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                            and n.targets[0].id not in names and n.targets[0].id != consumed \
                            and _view_root(n.value, ctx) in names:
                        names.add(n.targets[0].id)
                        grew = True
        if names & set(markers):
            return True
        if any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
               for st in stmts[at + 1:] for n in fastast.walk(st)):
            return True
        # in the store's own statement after the store (`if r.sum() > 0: g[i] *= 2; out[i] = r`),
        # or, for an update, in its value (a view of the row the update writes into)
        stores = _marker_assigns([stmts[at]], o.marker)
        return any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load) and any(
                   (n.lineno, n.col_offset) > (w.lineno, w.col_offset) and not any(n is r for r in fastast.walk(w.value))
                   or o.op and any(n is r for r in fastast.walk(w.value)) for w in stores)
                   for n in fastast.walk(stmts[at]))
    return True


def _read_before_store(ld: ast.Name, stmts: list, o: Output) -> bool:
    """Whether the read `ld` comes before the store `o` in the iteration: on an earlier line,
    before the store's statement on its line (`y = x[i] + 1; x[i] = y * 2`, `if x[i].sum() > 0:
    x[i] = ..`), or in the value the store computes (`x[i] = x[i] * 2`: the analysis's `marker =
    x[i] * 2`). A read after the store's statement on its line (`x[i] = x[i] * 2; out[i] = x[i]
    + 1`) sees the written row."""
    if ld.lineno < o.lineno:
        return True
    at, a = _marker_assign(stmts, o.marker)
    if a is None:
        return False
    # (the read's top-level statement before the store's: an earlier statement on the same line,
    # analysis._forwarded's `name = v` then `x[i] = name`)
    if next((k for k, st in enumerate(stmts) if any(n is ld for n in fastast.walk(st))), len(stmts)) < at:
        return True
    if (ld.lineno, ld.col_offset) < (a.lineno, a.col_offset) or any(r is ld for r in fastast.walk(a.value)):
        return True
    # stores on the sides of a branch (`if c: x[i] = -x[i] elif d: x[i] = 2 - x[i]`): a read before
    # or in its own side's store, where each other store is on a side the read's never meets
    stores = _marker_assigns(stmts, o.marker)
    sides = _sides(stmts)
    read = sides.get(id(ld), ())
    return len(stores) > 1 and all(
        (ld.lineno, ld.col_offset) < (w.lineno, w.col_offset) or any(r is ld for r in fastast.walk(w.value))
        or _exclusive(read, sides.get(id(w), ())) for w in stores)


def _sides(stmts: list) -> dict:
    """id(node) -> ((id(if), side), ..): the sides of the `if`s each node of `stmts` sits on
    (side 0 its body, 1 its orelse), outermost first."""
    out = {}

    def walk(node, path):
        out[id(node)] = path
        if isinstance(node, ast.If):
            walk(node.test, path)
            for k, branch in enumerate((node.body, node.orelse)):
                for st in branch:
                    walk(st, path + ((id(node), k),))
            return
        for child in ast.iter_child_nodes(node):
            walk(child, path)

    for st in stmts:
        walk(st, ())
    return out


def _exclusive(a: tuple, b: tuple) -> bool:
    """Whether two nodes sit on different sides of one `if` (_sides' paths): never both run."""
    sides = dict(a)
    return any(k in sides and sides[k] != side for k, side in b)


def _own_element_reads(body: _Body, targets: dict, stores: dict, ctx: Context) -> set:
    """The ids of the Name nodes of reads `x[i, j]` of a tensor the nest stores into as
    `x[i, j] = v` (a plain store, not `+=`), written exactly as the store's subscript and read
    before it in the iteration: in the stored value itself, in a statement before the store's,
    or in the test of the `if` the store sits in. Each iteration reads and writes only its own
    element there, and reads it before writing it, so every read sees the value from before the
    nest, as the batch does (the runtime still checks that no other tensor the nest reads
    shares the output's memory). `stores`: the store's marker -> its subscript node."""
    own = set()
    markers = {o.marker for o in targets.values() if o.marker}
    for o in targets.values():
        sub = stores.get(o.marker)
        if o.kind != "store" or o.op or sub is None:
            continue
        at, assign = _marker_assign(body.stmts, o.marker)
        if at is None:
            continue
        st = body.stmts[at]
        before = [(n, n) for n in body.stmts[:at]] + [(assign.value, st)] + (
            [(st.test, st)] if isinstance(st, ast.If) else [])
        want = src(sub)
        for n, top in before:
            for r in fastast.walk(n):
                if isinstance(r, ast.Subscript) and isinstance(r.value, ast.Name) and r.value.id == o.target \
                        and isinstance(r.ctx, ast.Load) and src(r) == want \
                        and not _view_after_store(r.value, top, body.stmts, o, ctx, markers):
                    own.add(id(r.value))
    return own


def _order_free(stmts) -> bool:
    """Whether statements (and the bodies of the `for` loops among them) are all `+=` / `-=`
    updates, whose totals do not depend on the order of the iterations (up to reassociation)."""
    for st in stmts:
        if isinstance(st, ast.For) and not st.orelse:
            if not _order_free(st.body):
                return False
        elif not (isinstance(st, ast.AugAssign) and isinstance(st.op, (ast.Add, ast.Sub))):
            return False
    return True


def plan_nest(levels, ctx: Context, loop_id: int) -> LoopPlan:
    node = levels[0][2]
    inner = levels[-1][2]
    indices = [ix for ix, _, _ in levels]
    line = node.lineno
    iter_vars = {ix: "index" for ix in indices}
    walked = getattr(levels, "walked", {})
    stmts = inner.body
    if walked:
        # (`for p in pos:` levels: the body reads `pos[i]` where it read `p`, nest_levels)
        subs = _ElementReads({var: (seq, levels[lv][0]) for lv, (var, seq) in walked.items()})
        stmts = [subs.visit(fastast.clone(st)) for st in inner.body]
    _no_identity_tests(stmts)
    body = _classify(stmts, ctx, iter_vars)
    space = IterSpace("nest", levels=tuple((ix, args) for ix, args, _ in levels),
                      walked=tuple((lv, seq) for lv, (_, seq) in sorted(walked.items())))
    outputs, targets, stores = [], {}, {}
    interleaved = set()     # targets stored into at other offsets of one level (`pe[p, i] = a; pe[p, i + 1] = b`)
    for out, payload in body.outputs:
        again = out.target and out.target in targets
        if out.target in iter_vars or out.target in body.assigned or again and not (
                out.kind == "store" and not out.op and not out.cond and targets[out.target].kind == "store"
                and not targets[out.target].op and not targets[out.target].cond):
            raise Refuse(f"`{out.target}` is written more than once or reassigned in the loop nest "
                         f"(line {out.lineno})", out.lineno)
        if out.kind == "store":
            sub = payload[0]
            stores[out.marker] = sub
            m = match_subscript_nest(sub, indices)
            if not isinstance(m, list) or sorted(lv for lv, _, _ in m) != list(range(len(indices))) \
                    or [p for _, p, _ in m] != list(range(len(indices))) \
                    or [lv for lv, _, _ in m] != list(range(len(indices))):
                raise Refuse(f"`{out.index_src}` at line {out.lineno} must be indexed by the loop indices in "
                             f"order ({', '.join(indices)}) in its leading dimensions", out.lineno)
            if not _base_ok(sub.value):
                raise Refuse(f"`{out.index_src}` at line {out.lineno}: the written tensor is not a plain name", out.lineno)
            entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            rest = entries[len(indices):]
            for e in rest:
                if nm.load_ids(e) & (set(body.assigned) | set(iter_vars)):
                    raise Refuse(f"the index of `{out.index_src}` changes inside the loop (line {out.lineno})", out.lineno)
            holder = src(sub.value) + "[" + ", ".join(["{}"] + [src(e) for e in rest]) + "]"
            out = dataclasses.replace(out, target=src(sub.value), dim=0, offset=0, index_src=holder,
                                      nest_rows=tuple((lv, off) for lv, _, off in m))
            if again:
                first = targets[out.target]
                apart = [a for a, b in zip(first.nest_rows, out.nest_rows) if a != b]
                if not apart and all(o.index_src != holder for o in outputs if o.target == out.target):
                    # (`out[b, k, :T] = a; out[b, k, T] = c`: parts of the element the iteration
                    # owns, each store committed after the one before it, as the loop writes them;
                    # a read of the target keeps the loop, below)
                    interleaved.add(out.target)
                    outputs.append(out)
                    continue
                if first.index_src != holder or len(apart) != 1:
                    # (rows apart at one level, each store its own: runtime._rows_apart checks the step)
                    raise Refuse(f"`{out.target}` is written more than once in the loop nest (line {out.lineno})",
                                 out.lineno)
                interleaved.add(out.target)
                outputs.append(out)
                continue
        elif out.kind == "best":
            raise Refuse(f"running best values in loop nests are not supported (line {out.lineno})", out.lineno)
        elif out.kind == "accum" and out.payloads:
            raise Refuse(f"`{out.target}` is updated by several terms at line {out.lineno}, which loop nests do not "
                         "rewrite", out.lineno)
        targets[out.target] = out
        outputs.append(out)
    _check_calls(body.stmts, ctx, body, iter_vars)
    own = _own_element_reads(body, targets, stores, ctx)
    for n in body.stmts:
        for ld in nm.loads(n):
            if ld.id in targets and (id(ld) not in own or ld.id in interleaved):
                raise Refuse(f"loop-carried dependency: `{ld.id}` is read at line {ld.lineno} and "
                             f"written at line {targets[ld.id].lineno}", ld.lineno)
    _check_carried(body.stmts, body.assigned, set(iter_vars) | {o.marker for o in outputs})
    mapped, covered = {}, set()
    for n in body.stmts:
        for sub in fastast.walk(n):
            if not isinstance(sub, ast.Subscript) or not isinstance(sub.ctx, ast.Load) or not _base_ok(sub.value):
                continue
            m = match_subscript_nest(sub, indices)
            base = src(sub.value)
            if not isinstance(m, list) or _root_name(base) in body.assigned:
                continue
            key = (base, tuple(m))
            if key not in mapped:
                name = f"{base.replace('.', '_')}_" + "".join(indices[lv] for lv, _, _ in m)
                taken = ctx.local_names | {x.param for x in mapped.values()}
                while name in taken:
                    name += "_"
                mapped[key] = Mapped(base, 0, 0, name, levels=tuple(m))
            entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            for _, p, _ in m:
                covered.update(id(e) for e in fastast.walk(entries[p]))
            body.based.update(id(e) for e in fastast.walk(sub.value))
    value_indices = tuple(ix for ix in indices if any(
        ld.id == ix and id(ld) not in covered for n in body.stmts for ld in nm.loads(n)))
    for ix in indices:
        if nm.read_after(ctx.fn, ctx.parent, node, ix) is not None or ix in ctx.cellvars:
            raise Refuse(f"the loop index `{ix}` is read after the loop nest", line)
    for name in body.assigned:
        at = nm.read_after(ctx.fn, ctx.parent, node, name)
        if at is not None or name in ctx.cellvars:
            raise Refuse(f"`{name}` is assigned in the loop nest and read after it at line {at}", at or line)
    reads = {ld.id for n in body.stmts for ld in nm.loads(n) if id(ld) not in body.based}
    free = sorted(reads - set(body.assigned) - set(iter_vars) - set(targets) - {o.marker for o in outputs})
    callables = tuple(sorted(set(_callables(body.stmts, body, iter_vars))))
    helpers = _branch_helpers(body.stmts, ctx, set(free))
    return LoopPlan(
        loop_id=loop_id, lineno=line, end_lineno=node.end_lineno, source=src(node), form="for", space=space,
        body=tuple(src(s) for s in body.stmts), outputs=tuple(outputs), mapped=tuple(mapped.values()),
        index_as_value=bool(value_indices), free=tuple(free), callables=callables,
        branches=body.branches or bool(helpers), branch_helpers=helpers,
        value_indices=value_indices, index_float=_index_meets_floats(body.stmts, value_indices, free))
