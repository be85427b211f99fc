"""Loops that walk a sequence backwards and lists built front-first (discounted returns, GAE):

    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)

Two source-level moves, made before the analysis, let the planner take them as the reversed
range loops it already plans (a linear recurrence, `scan`):

`front_builds`: a list made empty right before the loop (`returns = []`, `list()`) that the loop
only grows at the front (`returns.insert(0, v)`) ends as the reverse of the list that appends the
same values in the same order would: the loop appends, and `returns.reverse()` right after it
puts the list in the loop's order. A `collections.deque()` grown by `appendleft(v)` (or
`insert(0, v)`) is the same, through a fresh list the loop appends to, reversed and given to the
deque by `extend` after the loop: the deque stays a deque, its values in the loop's order. This
is the same program wherever nothing reads the list while the loop runs: every mention of it in
the loop is such a call, none in between, no nested function sees it (a closure cell), and no
exception raised in the loop can be caught in the function where the list is still visible (no
enclosing `try`, no `with` but `torch.no_grad()`). So it holds for the loop as written too (a
`break` stops the loop before the reversal as it stopped the inserts); it is put back as
written wherever neither it nor a loop around or inside it is vectorized.

`reversed_walks`: `for r in reversed(x)` (also `x.flip(0)`, `torch.flip(x, [0])`, `x[::-1]`,
`zip(reversed(a), reversed(b))`, `reversed(list(zip(a, b)))` and `enumerate` of them) is planned
as `for k in reversed(range(len(x))):` with each read of `r` reading `x[k]`, the same elements in
the same order, whose reads the planner takes (enumerate's index is `start + n - 1 - k`). The
element itself is bound nowhere: it is read nowhere after the loop, and a last value would keep
the loop in Python where a loop around it runs it again. The loop before this move stays the
fallback (`_av_original`): the guard, a type the rewrite does not batch, or an error on the way (a 0-d
tensor, a list where `.flip` is called, a tensor sliced with a negative step) run it, and where
the rewritten loop is not vectorized it goes back into the tree (api). The element of a tensor's
`reversed` (Tensor.__reversed__ is `flip(0)`) is a row of a copy where `x[k]` is a view of `x`:
the two are the same values, and the move is made only where nothing can tell them apart: the
element is used only through its value (an operand, a test, an argument of a call that makes new
memory), never assigned, stored into, updated in place, kept or read outside the loop, and the
loop never mentions `x`. `zip(reversed(a), reversed(b))` pairs the last elements of each, which
`a[k], b[k]` do only for sequences of one length: the trip count is the longer length, so
sequences of different lengths index past the shorter one, and the guard runs the loop.
`reversed(list(zip(a, b)))` walks the common length: `min(len(a), len(b))`.

Loops that an earlier move made (a triangle nest, an element view, a stored recurrence), and
loops around or inside them, are left alone: those go back, where not vectorized, as they were
before any later move.
"""
from __future__ import annotations

import ast
import collections
from dataclasses import dataclass, field

import torch

from .. import fastast
from ..frontend import Captured
from .hoist import _builtins_ok, _dotted, _holder, _local_names, _no_grad_with, _resolves
from .names import mutated

_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
                  ast.DictComp, ast.GeneratorExp)


def _parents(tree):
    return {c: p for p in fastast.walk(tree) for c in ast.iter_child_nodes(p)}


def _own(fn: ast.FunctionDef, kinds) -> list:
    """Nodes of `kinds` in the function's own scope (not in nested functions, lambdas, classes)."""
    out, todo = [], list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, kinds):
            out.append(n)
        todo.extend(ast.iter_child_nodes(n))
    return sorted(out, key=lambda n: (n.lineno, n.col_offset))


def _at_line(s: ast.stmt, line: int) -> ast.stmt:
    for n in fastast.walk(s):
        if hasattr(n, "lineno"):
            n.lineno = n.end_lineno = line
    return s


def _overlaps(loop: ast.AST, avoid) -> bool:
    """Whether `loop` is, holds or sits in one of the loops other source-level moves made (each
    of those goes back, where not vectorized, as it was before any later move)."""
    return any(loop.lineno <= a.end_lineno and a.lineno <= loop.end_lineno for a in avoid)


def _mentions(node, name: str) -> list[ast.Name]:
    return [n for n in fastast.walk(node) if isinstance(n, ast.Name) and n.id == name]


def _stmt(text: str, where: ast.AST) -> ast.stmt:
    s = ast.parse(text).body[0]
    for n in fastast.walk(s):
        ast.copy_location(n, where)
        if hasattr(n, "end_lineno"):
            n.end_lineno, n.end_col_offset = where.lineno, where.col_offset
    return s


# ----------------------------------------------------------------------------- front-first lists

@dataclass
class FrontBuild:
    """One list (or deque) built front-first by `loop`: `original` is the loop as written,
    `added` the statements put around it (to take out again where it is put back)."""
    loop: ast.AST
    original: ast.AST
    name: str
    added: list = field(default_factory=list)


def _fresh_kind(cap: Captured, st: ast.stmt, local: set):
    """("list" | "deque", name) of `name = []` / `name = list()` / `name = deque()`, else None."""
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
        return None
    v, name = st.value, st.targets[0].id
    if isinstance(v, ast.List) and not v.elts:
        return "list", name
    if isinstance(v, ast.Call) and not v.args and not v.keywords:
        if isinstance(v.func, ast.Name) and v.func.id == "list" and _builtins_ok(cap, local, ("list",)):
            return "list", name
        if _resolves(cap, v.func, local, (collections.deque,)):
            return "deque", name
    return None


def _front_call(n: ast.AST, name: str, kind: str):
    """The value `v` of a statement `name.insert(0, v)` (or `name.appendleft(v)` on a deque)."""
    if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute)
            and isinstance(n.value.func.value, ast.Name) and n.value.func.value.id == name and not n.value.keywords):
        return None
    call = n.value
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    if call.func.attr == "insert" and len(call.args) == 2 and isinstance(call.args[0], ast.Constant) \
            and type(call.args[0].value) is int and call.args[0].value == 0:
        return call.args[1]
    if call.func.attr == "appendleft" and kind == "deque" and len(call.args) == 1:
        return call.args[0]
    return None


def _escapes(fn: ast.FunctionDef, parent: dict, loop: ast.AST, cap: Captured, local: set) -> bool:
    """Whether an exception raised in `loop` may be caught inside the function (an enclosing
    `try`, or a `with` other than torch.no_grad(), whose manager may swallow it)."""
    node = loop
    while node is not fn:
        up = parent[node]
        if isinstance(up, (ast.Try, getattr(ast, "TryStar", ast.Try))) and any(node is s for s in up.body):
            return True
        if isinstance(up, ast.AsyncWith) or isinstance(up, ast.With) and not _no_grad_with(cap, up, local):
            return True
        node = up
    return False


def front_builds(cap: Captured, avoid=()) -> list[FrontBuild]:
    """Lists and deques built front-first, as described in the module's docstring; returns
    what was rewritten (api puts back what no vectorized loop needs). Loops overlapping those
    in `avoid` are left as they are."""
    fn = cap.tree
    local = _local_names(fn)
    parent = _parents(fn)
    # names a nested scope reads or binds: closure cells, whose list a call could see mid-loop
    nested = {n.id for s in fastast.walk(fn) if isinstance(s, _NESTED_SCOPES[:4]) and s is not fn
              for n in fastast.walk(s) if isinstance(n, ast.Name)}
    declared = {x for s in fastast.walk(fn) if isinstance(s, (ast.Global, ast.Nonlocal)) for x in s.names}
    out = []
    for st in _own(fn, ast.Assign):
        hit = _fresh_kind(cap, st, local)
        if hit is None or st not in parent:
            continue
        kind, name = hit
        if name in nested or name in declared:
            continue
        try:
            block, at = _holder(fn, st)
        except ValueError:
            continue
        loop = next((s for s in block[at + 1:] if _mentions(s, name)), None)
        while isinstance(loop, ast.With) and _no_grad_with(cap, loop, local):
            loop = next((s for s in loop.body if _mentions(s, name)), None)    # (the loop under no_grad)
        if not isinstance(loop, (ast.For, ast.While)) or _overlaps(loop, avoid):
            continue
        calls = [n for n in fastast.walk(loop) if _front_call(n, name, kind) is not None]
        inside = {id(m) for c in calls for m in fastast.walk(c.value.func)}
        if not calls or any(id(m) not in inside for m in _mentions(loop, name)):
            continue     # (read, mutated otherwise, or bound in the loop; `insert` elsewhere than 0)
        if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in fastast.walk(loop)):
            continue
        if _escapes(fn, parent, loop, cap, local):
            continue
        original = fastast.clone(loop)
        if kind == "list":
            target, added = name, [_at_line(_stmt(f"{name}.reverse()", loop), loop.end_lineno)]
        else:
            target = f"{name}_front{loop.lineno}_{loop.col_offset}"   # (not `_av_`: reserved)
            if target in local:
                continue
            local.add(target)
            added = [_at_line(_stmt(f"{target} = []", loop), loop.lineno),
                     _at_line(_stmt(f"{target}.reverse()", loop), loop.end_lineno),
                     _at_line(_stmt(f"{name}.extend({target})", loop), loop.end_lineno)]
        for c in calls:
            value = _front_call(c, name, kind)
            c.value.func.value.id = target
            c.value.func.attr = "append"
            c.value.args = [value]
        block, k = _holder(fn, loop)
        if kind == "list":
            block[k + 1:k + 1] = added
        else:
            block[k:k + 1] = [added[0], loop] + added[1:]
        if not hasattr(loop, "_av_written"):
            loop._av_written = original
        out.append(FrontBuild(loop, original, name, added))
        parent = _parents(fn)
    return out


def restore_front(cap: Captured, fb: FrontBuild) -> None:
    """The loop as written again, and the statements added around it taken out."""
    for f in ("target", "iter", "test", "body", "orelse"):
        if hasattr(fb.original, f):
            setattr(fb.loop, f, getattr(fb.original, f))
    for s in fb.added:
        block, k = _holder(cap.tree, s)
        del block[k]


# ----------------------------------------------------------------------------- reversed walks

# calls whose result is new memory, never their argument nor a view of it (a row of a copy and a
# view of the row give the same values): torch / math functions and tensor methods of these names
_NEW_MEMORY = frozenset((
    "sum", "mean", "norm", "std", "var", "prod", "amax", "amin", "abs", "exp", "log", "log2", "log10",
    "log1p", "expm1", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "gelu", "silu", "softplus", "clamp", "clip",
    "pow", "square", "neg", "sin", "cos", "floor", "ceil", "round", "trunc", "sign", "softmax", "log_softmax",
    "logsumexp", "clone", "dot", "matmul", "mv", "mm", "outer", "cumsum", "cumprod", "maximum", "minimum",
    "where", "item", "tolist", "argmax", "argmin", "all", "any", "isnan", "isfinite", "nan_to_num",
    "reciprocal", "erf", "logical_not", "mul", "add", "sub", "div", "isclose", "eq", "ne", "lt", "le", "gt", "ge",
))
_NUMBER_BUILTINS = ("float", "int", "bool", "abs", "round")


def _module_call(cap: Captured, func: ast.AST, local: set) -> bool:
    """`torch.f`, `torch.nn.functional.f`, `math.f` (the modules themselves) with f in _NEW_MEMORY."""
    import math
    parts = _dotted(func)
    if parts is None or len(parts) < 2 or parts[-1] not in _NEW_MEMORY or parts[0] in local:
        return False
    found, obj = cap.lookup(parts[0])
    for p in parts[1:-1]:
        if not found:
            return False
        obj = getattr(obj, p, None)
        found = obj is not None
    return found and any(obj is m for m in (torch, torch.nn.functional, math))


def _value_use(n: ast.AST, parent: dict, cap: Captured, local: set) -> bool:
    """Whether the value of `n` is only read: an operand, a test, or an argument (or the
    receiver) of a call that makes new memory."""
    p = parent.get(n)
    if isinstance(p, ast.BinOp) or isinstance(p, ast.Compare):
        return True
    if isinstance(p, ast.UnaryOp):
        return not isinstance(p.op, ast.UAdd)      # (`+t` is torch.positive: the tensor itself)
    if isinstance(p, (ast.If, ast.While, ast.IfExp, ast.Assert)) and p.test is n:
        return True
    if isinstance(p, ast.BoolOp) or isinstance(p, ast.Subscript) and p.value is n and isinstance(p.ctx, ast.Load):
        return _value_use(p, parent, cap, local)   # (`a and b` is an operand; `r[0]` a view of it)
    if isinstance(p, ast.keyword):
        p, n = parent.get(p), p
        if not (isinstance(p, ast.Call) and n in p.keywords):
            return False
    if isinstance(p, ast.Call) and p.func is not n:
        f = p.func
        if isinstance(f, ast.Name):
            return f.id in _NUMBER_BUILTINS and _builtins_ok(cap, local, (f.id,))
        return _module_call(cap, f, local)
    if isinstance(p, ast.Attribute) and p.value is n and p.attr in _NEW_MEMORY:
        call = parent.get(p)
        return isinstance(call, ast.Call) and call.func is p
    return False


def _reversed_of(it: ast.AST, cap: Captured, local: set):
    """(sequence expression, kind) for a reversed walk of one sequence: kind "any" for
    `reversed(x)`, "tensor" for `x.flip(0)` / `torch.flip(x, [0])`, "sequence" for `x[::-1]`."""
    def plain(e):
        parts = _dotted(e)
        return parts is not None and parts[0] not in ("torch",)
    if isinstance(it, ast.Call) and not it.keywords and len(it.args) == 1 and isinstance(it.func, ast.Name) \
            and it.func.id == "reversed" and plain(it.args[0]) and _builtins_ok(cap, local, ("reversed",)):
        return it.args[0], "any"
    if isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Slice) and plain(it.value):
        s = it.slice
        if s.lower is None and s.upper is None and isinstance(s.step, ast.UnaryOp) and isinstance(s.step.op, ast.USub) \
                and isinstance(s.step.operand, ast.Constant) and type(s.step.operand.value) is int \
                and s.step.operand.value == 1:
            return it.value, "sequence"
    if isinstance(it, ast.Call) and not it.keywords:
        dims = None
        if isinstance(it.func, ast.Attribute) and it.func.attr == "flip" and plain(it.func.value) \
                and len(it.args) == 1:
            seq, dims = it.func.value, it.args[0]
            if isinstance(dims, ast.Constant):
                dims = ast.Tuple(elts=[dims], ctx=ast.Load())
        elif len(it.args) == 2 and plain(it.args[0]) and _resolves(cap, it.func, local, (torch.flip,)):
            seq, dims = it.args[0], it.args[1]
        if isinstance(dims, (ast.List, ast.Tuple)) and len(dims.elts) == 1 and isinstance(dims.elts[0], ast.Constant) \
                and type(dims.elts[0].value) is int and dims.elts[0].value == 0:
            return seq, "tensor"
    return None


def _length(seq: ast.AST, kind: str) -> str:
    """The trip count as the loop's range reads it; it raises for a value the walk refuses (a
    list's `.size`, a tensor sliced by `[::-1]`): the rewrite's attempt fails, the loop runs."""
    s = ast.unparse(seq)
    return {"any": f"len({s})", "tensor": f"{s}.size(0)", "sequence": f"len({s}[::-1])"}[kind]


def _walk_of(loop: ast.For, cap: Captured, local: set):
    """([(element name, sequence)], trip count source[, (enumerate's index, start)]) of a
    reversed walk, or (None, why)."""
    it, tgt = loop.iter, loop.target
    one = _reversed_of(it, cap, local)
    if one is not None:
        if not isinstance(tgt, ast.Name):
            return None, "the element is unpacked (only a plain name is read as `x[k]`)"
        return [(tgt.id, one[0])], _length(*one)
    call = it
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "reversed" \
            and len(call.args) == 1 and not call.keywords and isinstance(call.args[0], ast.Call):
        inner = call.args[0]       # reversed(list(zip(a, b)))
        if isinstance(inner.func, ast.Name) and inner.func.id == "list" and len(inner.args) == 1 \
                and not inner.keywords and isinstance(inner.args[0], ast.Call):
            z = inner.args[0]
            if isinstance(z.func, ast.Name) and z.func.id == "zip" and z.args and not z.keywords \
                    and all(_dotted(a) is not None for a in z.args) \
                    and _builtins_ok(cap, local, ("reversed", "list", "zip", "min")):
                if not (isinstance(tgt, ast.Tuple) and len(tgt.elts) == len(z.args)
                        and all(isinstance(e, ast.Name) for e in tgt.elts)):
                    return None, "the pairs are not unpacked into one plain name per sequence"
                lens = ", ".join(f"len({ast.unparse(a)})" for a in z.args)
                return [(e.id, a) for e, a in zip(tgt.elts, z.args)], (
                    f"min({lens})" if len(z.args) > 1 else f"len({ast.unparse(z.args[0])})")
        return None, None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "zip" and call.args \
            and not call.keywords and _builtins_ok(cap, local, ("zip", "max")):
        parts = [_reversed_of(a, cap, local) for a in call.args]
        if not any(parts):
            return None, None
        if not all(parts):
            return None, "`zip` pairs a reversed sequence with one walked forwards"
        if not (isinstance(tgt, ast.Tuple) and len(tgt.elts) == len(parts)
                and all(isinstance(e, ast.Name) for e in tgt.elts)):
            return None, "the pairs are not unpacked into one plain name per sequence"
        lens = [_length(*p) for p in parts]
        return [(e.id, p[0]) for e, p in zip(tgt.elts, parts)], (
            f"max({', '.join(lens)})" if len(lens) > 1 else lens[0])
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "enumerate" \
            and _builtins_ok(cap, local, ("enumerate",)):
        # enumerate(reversed(x)): the index counts up from the start while k counts down
        from .loops import _enumerate_args
        bound = _enumerate_args(call)
        if bound is None or not (isinstance(tgt, ast.Tuple) and len(tgt.elts) == 2
                                 and isinstance(tgt.elts[0], ast.Name)):
            return None, None
        inner = ast.For(target=tgt.elts[1], iter=bound[0], body=[], orelse=[])
        return _enumerated(_walk_of(inner, cap, local), tgt, bound)
    return None, None


def _enumerated(walk, tgt, bound):
    """The walk of enumerate's sequence (`walk`: _walk_of's answer for it) with enumerate's
    index and start added, or (None, why)."""
    from .loops import _int_literal
    pairs, count, *nested = walk
    if pairs is None or nested:
        return None, count
    start = 0 if bound[1] is None else _int_literal(bound[1])
    if start is None or abs(start) > 2 ** 62:
        return None, "`enumerate` starts at a value that is not an integer literal"
    return pairs, count, (tgt.elts[0].id, start)


@dataclass
class Walk:
    """A loop whose elements are read by their index (a reversed walk here, a walk of
    `x.unbind(d)` or `x.split(1, d)` in analysis.unbind): `loop` is rewritten in place, `original`
    is the loop before the move (the fallback), `reads` says how each element is read, for the
    report. `bases`: (source, dimension) of each sequence whose reads the plan must take as the
    loop's own slices (a `Mapped`), so that the guard sees it and takes only a tensor; none for a
    reversed walk (whose elements are read as `x[k]`, the sequence's own indexing)."""
    loop: ast.For
    original: ast.For
    reads: str
    bases: tuple = ()


def _body(loop) -> list:
    """What a loop runs at each step: a `for` loop's body; a comprehension's (of one generator)
    element and conditions, as expression statements around its own nodes."""
    if isinstance(loop, ast.For):
        return loop.body
    return [ast.Expr(e) for e in [loop.elt] + loop.generators[0].ifs]


def _unread(loop, elements) -> list:
    """The element names the loop's body never reads."""
    read = {n.id for st in _body(loop) for n in fastast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return [e for e in elements if e not in read]


def _move(loop, reads: dict, index: str, header: str, binds=()) -> ast.AST:
    """`loop` as `for index in header:` with each read of an element name replaced by the text in
    `reads` and `binds` put first in the body (a comprehension of one generator: its element and
    conditions read so, `binds` none); returns the loop before the move (also kept as
    `loop._av_original`, the fallback, and as `_av_written` where no earlier move set it)."""
    original = fastast.clone(loop)
    if not hasattr(loop, "_av_written"):
        loop._av_written = fastast.clone(loop)
    if isinstance(loop, ast.For):
        loop.body = list(binds) + [_Reads(reads).visit(st) for st in loop.body]
        head, was = loop, original
    else:
        head, was = loop.generators[0], original.generators[0]
        loop.elt = _Reads(reads).visit(loop.elt)
        head.ifs = [_Reads(reads).visit(c) for c in head.ifs]
    for n in fastast.walk(loop):
        if not hasattr(n, "lineno") and isinstance(n, (ast.expr, ast.stmt)):
            ast.copy_location(n, loop)
    head.target = ast.copy_location(ast.Name(index, ast.Store()), head.target)
    head.iter = ast.parse(header, mode="eval").body
    for n in fastast.walk(head.iter):
        ast.copy_location(n, was.iter)
        n.end_lineno, n.end_col_offset = was.iter.end_lineno, was.iter.end_col_offset
    loop._av_original = original
    return original


def reversed_walks(cap: Captured, avoid=()) -> tuple[list, dict]:
    """Reversed walks as described in the module's docstring. Returns ([Walk], {(line, col): why
    a reversed walk was not moved, as the report says it}). Loops overlapping those in `avoid`
    are left as they are."""
    fn = cap.tree
    local = _local_names(fn)
    out, refused = [], {}
    if not _builtins_ok(cap, local, ("range", "len", "reversed")):
        return out, refused

    def refuse(loop, why):
        refused[(loop.lineno, loop.col_offset)] = (
            f"the loop at line {loop.lineno} walks `{ast.unparse(loop.iter)}` backwards, which is read as `x[k]` "
            f"over a reversed range only where that is exact; here {why}")

    for loop in _own(fn, ast.For):
        if _overlaps(loop, avoid):
            continue
        pairs, count, *counter = _walk_of(loop, cap, local)
        if pairs is None:
            if count is not None:
                refuse(loop, count)
            continue
        counter = counter[0] if counter else None
        why = _refuse_walk(fn, loop, pairs, cap, local, counter)
        if not why and len(pairs) > 1 and count.startswith("max("):
            # (sequences of different lengths are caught where the longer walk reads the shorter
            # past its end: a sequence whose element is never read is never checked, and zip
            # would stop at its length; found by the fuzzer: zip(reversed(x), reversed(empty)))
            unread = _unread(loop, [e for e, _ in pairs])
            if unread:
                why = (f"`{unread[0]}` is never read in the loop, so its sequence's length, where `zip` stops, "
                       "would not be checked")
        if why:
            refuse(loop, why)
            continue
        k = f"{pairs[0][0]}_index{loop.lineno}_{loop.col_offset}"     # (not `_av_`: reserved for user code)
        if k in local:
            refuse(loop, f"the name `{k}` is taken")
            continue
        local.add(k)
        binds = []
        if counter is not None:     # (the index enumerate gives the element k: start + n - 1 - k)
            j, start = counter
            binds.append(_stmt(f"{j} = {start} + {count} - 1 - {k}" if start else f"{j} = {count} - 1 - {k}",
                               loop.target))
        # each read of an element reads `x[k]` itself (the same value each time: the loop never
        # changes `x`): the element is bound nowhere, so no last value is left for the planner to
        # keep (it is read nowhere after the loop), also where a loop around this one runs it again
        reads = {e: f"{ast.unparse(seq)}[{k}]" for e, seq in pairs}
        original = _move(loop, reads, k, f"reversed(range({count}))", binds)
        out.append(Walk(loop, original, ", ".join(f"`{e} = {ast.unparse(seq)}[k]`" for e, seq in pairs)
                        + " for k from the last index down to 0"))
    return out, refused


def _copy_row_use(n: ast.Name, parent: dict, cap: Captured, local: set) -> str | None:
    """Why a reversed walk's element may not be read as `x[k]` where it is used (None where it
    may): the element of a reversed tensor is a row of a copy, `x[k]` a view of `x`."""
    if _value_use(n, parent, cap, local):
        return None
    return (f"`{n.id}` is used as it is at line {n.lineno} (kept, stored or updated in place: the element of a "
            "reversed tensor is a row of a copy, `x[k]` a view of `x`)")


def _refuse_walk(fn, loop: ast.For, pairs, cap: Captured, local: set, counter=None,
                 element_use=_copy_row_use) -> str | None:
    """Why the walk is not read as `x[k]` (None where it is). enumerate's index is a Python int
    in both forms, the same value at every step and after the loop; only not rebound in it.
    `element_use(name node, parents, cap, local)` says why one read of an element is not
    allowed (None where it is): each kind of walk has its own rule."""
    if getattr(loop, "orelse", None):
        return "the loop has an `else` block"
    body = _body(loop)
    if counter is not None:
        if counter[0] in {e for e, _ in pairs} | {_dotted(seq)[0] for _, seq in pairs}:
            return "enumerate's index is named as the element or the sequence"
        if any(isinstance(n, ast.Name) and n.id == counter[0] and not isinstance(n.ctx, ast.Load)
               for s in body for n in fastast.walk(s)):
            return f"enumerate's index `{counter[0]}` is assigned in the loop"
    elements = [e for e, _ in pairs]
    if len(set(elements)) != len(elements):
        return "an element name repeats"
    paths = [_dotted(seq) for _, seq in pairs]
    roots = {p[0] for p in paths}
    if roots & set(elements):
        return "the element is named as the sequence"
    changed = mutated(ast.Module(body=body, type_ignores=[]))
    for s in body:
        for n in fastast.walk(s):
            if isinstance(n, _NESTED_SCOPES + (ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await,
                                               ast.NamedExpr)):
                return f"line {n.lineno} opens a nested scope or binds a name inside an expression"
            seen = _dotted(n) if isinstance(n, (ast.Name, ast.Attribute)) else None
            if seen and any(seen[:len(p)] == p for p in paths) or isinstance(n, ast.Name) and n.id in roots \
                    and (n.id in changed or [n.id] in paths):
                what = ".".join(seen)
                return (f"the loop mentions `{what}` (line {n.lineno}), which it walks: `{what}[k]` would see "
                        "what the loop changes, where the walk reads what it held when the loop began")
    parent = _parents(loop)
    for s in body:
        for n in fastast.walk(s):
            if isinstance(n, ast.Name) and n.id in elements:
                if not isinstance(n.ctx, ast.Load):
                    return f"`{n.id}` is assigned in the loop (line {n.lineno})"
                why = element_use(n, parent, cap, local)
                if why:
                    return why
    inside = {id(n) for n in fastast.walk(loop)}
    for n in fastast.walk(fn):
        if isinstance(n, ast.Name) and n.id in elements and id(n) not in inside:
            return f"`{n.id}` is used outside the loop (line {n.lineno}): the walk leaves it at the first element"
        if isinstance(n, (ast.Global, ast.Nonlocal)) and set(n.names) & set(elements):
            return f"`{sorted(set(n.names) & set(elements))[0]}` is declared `{type(n).__name__.lower()}`"
    return None


class _Reads(ast.NodeTransformer):
    """Each read of an element name replaced by the subscript that reads it (`r` -> `x[k]`)."""

    def __init__(self, reads: dict):
        self.reads = reads

    def visit_Name(self, node: ast.Name):
        text = self.reads.get(node.id)
        if text is None or not isinstance(node.ctx, ast.Load):
            return node
        new = ast.parse(text, mode="eval").body
        for n in fastast.walk(new):
            ast.copy_location(n, node)
        return new


def restore_walk(loop, original) -> None:
    """The loop before the move, in place (the loop's node stays the one the records hold)."""
    for f in original._fields:
        setattr(loop, f, getattr(original, f))
    if hasattr(loop, "_av_original"):
        del loop._av_original


# ----------------------------------------------------------------------------- after planning

def _key(node) -> tuple:
    return node.lineno, node.col_offset


def settle(cap: Captured, fronts: list, walks: list, refusals: dict, infos: list, pieces: list, steps: list,
           reports: list) -> tuple[list, list]:
    """Once the loops are planned: each reversed walk that is not vectorized itself goes back to
    the loop before the move, in place (its index form is the planner's, not the user's: a 0-d
    tensor or a list's `.flip` would raise another error in it). A loop nest around it, planned
    with the index form as its inner level, stays: its rewrite reads the same values (and fails
    over to its fallback where the index form would raise), and its fallback, the nest in the
    tree, holds the walk as written. A walk with `bases` (analysis.unbind) stays only where the
    plan reads each of them as the loop's own slice (else that plan is dropped and the loop runs
    as written): the guard then takes only tensors there, where the index form would also read
    another object that has the methods it calls. A compiled step of the walk or around it is
    dropped (its body would be the index form). Each front-first list goes back as written where no
    vectorized loop (or compiled step) is the loop, around it or inside it. The reports say
    what was read how. Returns the pieces and steps that stay; `reports` is updated in place."""
    import dataclasses

    at = {(info.lineno, info.col): k for k, info in enumerate(infos)}

    def report(info, **change):
        k = infos.index(info)
        reports[k] = dataclasses.replace(reports[k], **change)

    def encloses(lo, hi, key, loop):
        return (lo, hi) != (loop.lineno, loop.end_lineno) and lo <= loop.lineno and loop.end_lineno <= hi \
            or key == _key(loop)

    def read_through_index(plan, bases) -> bool:
        have = set()
        for m in plan.mapped:
            have |= {(m.base, p) for _, p, _ in m.levels} if m.levels else {(m.base, m.dim)}
        return all(b in have for b in bases)

    def drop(piece_info, why):
        nonlocal pieces
        pieces = [(i, low) for i, low in pieces if i is not piece_info]
        report(piece_info, strategy="python", reason=why)
        for i in infos:
            if i.part_of == piece_info.lineno:
                report(i, strategy="python", reason=f"part of the loop nest at line {piece_info.lineno}, which runs "
                                                    "as written")

    for w in walks:
        loop, original = w.loop, w.original
        walked = ast.unparse(original.iter if isinstance(original, ast.For) else original.generators[0].iter)
        key = _key(loop)
        own = next((info for info, _ in pieces if (info.lineno, info.col) == key), None)
        unmapped = (f"the loop at line {loop.lineno} walks `{walked}`, read as {w.reads}, but "
                    "the plan does not read each element as the loop's own slice of its tensor, which the guard "
                    "checks is a tensor; the loop runs as written")
        if own is not None and read_through_index(own.plan, w.bases):
            k = infos.index(own)
            report(own, reason=f"{reports[k].reason} (`{walked}` walked as {w.reads})")
            continue
        if own is not None:
            drop(own, unmapped)
        # (a loop nest planned with the walk's index form as its inner level: its rewrite reads the
        # same values, and its fallback, the nest in the tree, now holds the walk as written)
        restore_walk(loop, original)
        inner = next((info for info in infos if (info.lineno, info.col) == key), None)
        nest = next((i for i, _ in pieces if inner is not None and inner.part_of == i.lineno), None)
        if nest is not None and not read_through_index(nest.plan, w.bases):
            drop(nest, unmapped)
        elif nest is not None:
            k = infos.index(nest)
            report(nest, reason=f"{reports[k].reason} (its inner loop walks `{walked}`, read "
                                f"as {w.reads})")
        kept = []
        for info in steps:
            if encloses(info.lineno, info.step.end_lineno, (info.lineno, info.col), loop):
                report(info, strategy="python", reason=info.refusal.reason)
            else:
                kept.append(info)
        steps = kept
    for info in infos:
        key = (info.lineno, info.col)
        if key in refusals and reports[at[key]].strategy == "python" and not any(
                (i.lineno, i.col) == key for i, _ in pieces):
            report(info, reason=refusals[key])
    for fb in fronts:
        loop = fb.loop
        needed = [info for info, _ in pieces if encloses(info.plan.lineno, info.plan.end_lineno,
                                                         (info.lineno, info.col), loop)
                  or loop.lineno <= info.lineno <= loop.end_lineno]
        needed += [info for info in steps if encloses(info.lineno, info.step.end_lineno, (info.lineno, info.col), loop)
                   or loop.lineno <= info.lineno <= loop.end_lineno]
        if not needed:
            restore_front(cap, fb)
            continue
        own = next((info for info, _ in pieces if (info.lineno, info.col) == _key(loop)), None)
        if own is not None:
            k = infos.index(own)
            how = ("the loop appends and the list is reversed once after it" if fb.added[0].lineno == loop.end_lineno
                   else "the loop appends to a new list, reversed once after it and added to the deque")
            report(own, reason=f"{reports[k].reason}; `{fb.name}` is built front-first: {how} (the same values in "
                               "the same order: nothing reads it in the loop)")
    return pieces, steps
