"""Small syntactic analyses: names read and written, and whether a name is read after a loop."""
from __future__ import annotations

import ast

from .. import fastast

_SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)


def loads(node: ast.AST) -> list[ast.Name]:
    """Name loads in `node`, in source order, skipping names bound inside nested
    comprehensions and lambdas (their own scope).

    >>> [n.id for n in loads(ast.parse("a + [b * x for x in c]").body[0])]
    ['a', 'b', 'c']
    """
    out: list[ast.Name] = []

    def visit(n: ast.AST, bound: frozenset) -> None:
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load) and n.id not in bound:
                out.append(n)
            return
        if isinstance(n, ast.Lambda):
            args = n.args
            names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
            names |= {a.arg for a in (args.vararg, args.kwarg) if a}
            for d in args.defaults + [d for d in args.kw_defaults if d]:
                visit(d, bound)
            visit(n.body, bound | names)
            return
        if isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner = bound
            for i, gen in enumerate(n.generators):
                # the first iterable is evaluated in the enclosing scope
                visit(gen.iter, bound if i == 0 else inner)
                inner = inner | {t.id for t in fastast.walk(gen.target) if isinstance(t, ast.Name)}
                for cond in gen.ifs:
                    visit(cond, inner)
            for part in ((n.key, n.value) if isinstance(n, ast.DictComp) else (n.elt,)):
                visit(part, inner)
            return
        for child in ast.iter_child_nodes(n):
            visit(child, bound)

    visit(node, frozenset())
    return sorted(out, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))


def load_ids(node: ast.AST) -> set[str]:
    return {n.id for n in loads(node)}


def target_names(target: ast.AST) -> list[str]:
    """Names bound by an assignment target (`a`, `a, (b, c)`); subscripts/attributes bind none."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in target_names(e)]
    if isinstance(target, ast.Starred):
        return target_names(target.value)
    return []


def stores(node: ast.AST) -> set[str]:
    """Every name bound anywhere in `node` (assignments, for targets, with-as, imports, defs)."""
    out: set[str] = set()
    for n in fastast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
    return out


_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "setdefault",
             "popitem", "add", "discard"}


_RESHAPERS = {"resize_", "resize_as_", "set_", "squeeze_", "unsqueeze_", "t_", "transpose_", "swapaxes_",
              "swapdims_", "as_strided_"}


def reshaped(node: ast.AST) -> set[str]:
    """Names whose shape `node` may change: assigned, or a container's mutating method or a
    tensor's shape-changing in-place method called on them (a store into elements keeps it)."""
    out = set(stores(node))
    for n in fastast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                n.func.attr in _MUTATORS or n.func.attr in _RESHAPERS):
            out |= _root(n.func.value)
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Del) and isinstance(n.value, ast.Name):
            out.add(n.value.id)
    return out


def shape_reads(expr: ast.AST) -> tuple[set[str], set[str]]:
    """(names `expr` reads only through their shape: `x.shape[1]`, `x.size(0)`, `x.dim()`;
    names it reads otherwise)."""
    via_shape = set()
    for n in fastast.walk(expr):
        if isinstance(n, ast.Attribute) and n.attr in ("shape", "ndim") and isinstance(n.value, ast.Name):
            via_shape.add(id(n.value))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("size", "dim") \
                and isinstance(n.func.value, ast.Name):
            via_shape.add(id(n.func.value))
    shaped, other = set(), set()
    for n in fastast.walk(expr):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            (shaped if id(n) in via_shape else other).add(n.id)
    return shaped, other


def mutated(node: ast.AST) -> set[str]:
    """Names whose value `node` may change: assigned, stored into (`x[i] = ..`, `x.a = ..`), or
    the receiver of a container's mutating method or a tensor's in-place one (`L.append`,
    `x.add_`). A range bound reading one of them is not the same on every evaluation."""
    out = set(stores(node))
    for n in fastast.walk(node):
        if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out |= _root(n.value)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                n.func.attr in _MUTATORS or n.func.attr.endswith("_") and not n.func.attr.endswith("__")):
            out |= _root(n.func.value)
    return out


def _root(node: ast.AST) -> set[str]:
    """{name} of `name`, `name.a[i].b`, ..; empty for anything else."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return {node.id} if isinstance(node, ast.Name) else set()


# torch.nn.functional's functions with an `inplace` flag, and its place among their arguments
_INPLACE_AT = {"relu": 1, "relu6": 1, "selu": 1, "silu": 1, "mish": 1, "hardswish": 1, "hardsigmoid": 1,
               "elu": 2, "celu": 2, "leaky_relu": 2, "hardtanh": 3, "threshold": 3, "rrelu": 4,
               "dropout": 3, "alpha_dropout": 3, "feature_alpha_dropout": 3, "dropout1d": 3, "dropout2d": 3,
               "dropout3d": 3}


# functions so named whose `out` tensor may come by position (F.normalize(v, 2.0, 0, 1e-12, w))
_OUT_AT = {"normalize": 4}


def in_place_keyword(call: ast.Call) -> str | None:
    """"out" or "inplace" where the call writes into a tensor it is given (`torch.mul(v, 3, out=v)`,
    `F.relu(v, inplace=True)`, `F.relu(v, True)`: an inplace flag other than the constant False,
    by keyword or in its place among the arguments of a function so named), else None."""
    for k in call.keywords:
        if k.arg == "out" or k.arg == "inplace" and not (isinstance(k.value, ast.Constant) and k.value.value is False):
            return k.arg
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    at = _INPLACE_AT.get(name)
    if at is not None and (len(call.args) > at and not (isinstance(call.args[at], ast.Constant)
                                                        and call.args[at].value is False)
                           or any(isinstance(a, ast.Starred) for a in call.args)):
        return "inplace"
    at = _OUT_AT.get(name)
    if at is not None and (len(call.args) > at and not (isinstance(call.args[at], ast.Constant)
                                                        and call.args[at].value is None)
                           or any(isinstance(a, ast.Starred) for a in call.args)):
        return "out"
    return None


def first_arg_root(call: ast.Call) -> ast.AST | None:
    """The name a call's first argument is read from (`x` of `x[i].t`), or None."""
    first = call.args[0] if call.args else None
    while isinstance(first, (ast.Attribute, ast.Subscript)):
        first = first.value
    return first


def needed(stmts: list, wanted: set) -> list:
    """`stmts` without the assignments (to names) whose values nothing after them reads, up to
    the `wanted` names at the end, and without the `if`s left with none: the statements that
    compute `wanted` (every other kind of statement is kept).

    >>> [ast.unparse(s) for s in needed(ast.parse("a = x\\nb = y\\nc = a * 2").body, {"c"})]
    ['a = x', 'c = a * 2']
    """
    live, out = set(wanted), []
    for st in reversed(stmts):
        if isinstance(st, ast.Assign) and all(isinstance(t, ast.Name) for t in st.targets):
            if not {t.id for t in st.targets} & live:
                continue
            live -= {t.id for t in st.targets}
            live |= {n.id for n in fastast.walk(st.value) if isinstance(n, ast.Name)}
        elif isinstance(st, ast.If):
            body, orelse = needed(st.body, live), needed(st.orelse, live)
            if not body and not orelse:
                continue
            st = ast.copy_location(ast.If(test=st.test, body=body or [ast.Pass()], orelse=orelse), st)
            live |= {n.id for n in fastast.walk(st) if isinstance(n, ast.Name)}
        else:
            live |= {n.id for n in fastast.walk(st) if isinstance(n, ast.Name)}
        out.append(st)
    return out[::-1]


def parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in fastast.walk(tree) for child in ast.iter_child_nodes(node)}


def _first_access(stmt: ast.stmt, name: str) -> tuple[str, int] | None:
    """("read", line) if `stmt` may read `name` before binding it, ("write", line) if it
    surely binds it first, None if it does not touch it. Conservative for compound statements."""
    if isinstance(stmt, ast.Assign):
        for n in loads(stmt.value):
            if n.id == name:
                return "read", n.lineno
        for t in stmt.targets:
            for n in loads(t):
                if n.id == name:
                    return "read", n.lineno
        if any(name in target_names(t) for t in stmt.targets):
            return "write", stmt.lineno
        return None
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(stmt.target, ast.Name):
        if name in load_ids(stmt.value):
            return "read", stmt.lineno
        return ("write", stmt.lineno) if stmt.target.id == name else None
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        for n in loads(stmt.iter):
            if n.id == name:
                return "read", n.lineno
        if name not in target_names(stmt.target):   # else the body reads the loop's own binding
            hit = _block_access(stmt.body, name)
            if hit and hit[0] == "read":
                return hit
        hit = _block_access(stmt.orelse, name)
        return hit if hit and hit[0] == "read" else None
    if isinstance(stmt, ast.While):
        for n in loads(stmt.test):
            if n.id == name:
                return "read", n.lineno
        hit = _block_access(stmt.body + stmt.orelse, name)
        return hit if hit and hit[0] == "read" else None
    if isinstance(stmt, ast.If):
        for n in loads(stmt.test):
            if n.id == name:
                return "read", n.lineno
        a, b = _block_access(stmt.body, name), _block_access(stmt.orelse, name)
        for hit in (a, b):
            if hit and hit[0] == "read":
                return hit
        return a if a and b else None
    for n in loads(stmt):
        if n.id == name:
            return "read", n.lineno
    if isinstance(stmt, ast.AugAssign) and name in target_names(stmt.target):
        return "read", stmt.lineno
    for n in fastast.walk(stmt):      # `del h` needs the name bound (the loop's last value, or its NameError)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Del) and n.id == name:
            return "read", n.lineno
    return None


def _block_access(stmts, name):
    for s in stmts:
        hit = _first_access(s, name)
        if hit:
            return hit
    return None


_TRIES = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


def read_after(fn: ast.FunctionDef, parent: dict, node: ast.AST, name: str) -> int | None:
    """Line of a possible read of `name` after `node` finishes, or None if the value
    `node` leaves in `name` is dead. Walks the following statements of every enclosing
    block; an enclosing loop may run `node` again, so any read inside it counts."""
    while node is not fn:
        up = parent[node]
        for field in ("body", "orelse", "finalbody"):
            block = getattr(up, field, None)
            if isinstance(block, list) and node in block:
                for stmt in block[block.index(node) + 1:]:
                    hit = _first_access(stmt, name)
                    if hit and hit[0] == "read":
                        return hit[1]
                    if hit and hit[0] == "write":
                        return None
                break
        if isinstance(up, (ast.For, ast.While, ast.AsyncFor)):
            for n in loads(up):
                if n.id == name:
                    return n.lineno
        if isinstance(up, _TRIES) and any(name in load_ids(part) for part in up.handlers + up.orelse + up.finalbody):
            # (the handlers, the `else` and the `finally` may run after `node`, which they follow
            # in no block: any read in them counts)
            return up.lineno
        node = up
    return None
