"""Code generation: templates, fresh names, and rebuilding a function from a new AST
with the original globals, closure and defaults, under the user's file name."""
from __future__ import annotations

import ast
import copy
import types

from . import fastast


class Namer:
    """Deterministic fresh names that avoid every name the function already uses."""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def new(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name


def bindings(tree: ast.AST):
    """(name, node) for each place `tree` binds or declares a name, in any form: a Name stored
    or deleted, a parameter, a `def` / `class`, an import (`import a.b as c`: `c`; `import a.b`:
    `a`), `except .. as e`, a `match` capture, a `global` / `nonlocal` declaration."""
    for n in fastast.walk(tree):
        if isinstance(n, ast.Name):
            if not isinstance(n.ctx, ast.Load):
                yield n.id, n
        elif isinstance(n, ast.arg):
            yield n.arg, n
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield n.name, n
        elif isinstance(n, ast.alias):
            yield n.asname or n.name.split(".")[0], n
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            for name in n.names:
                yield name, n
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            yield n.name, n
        elif isinstance(n, ast.MatchMapping) and n.rest:
            yield n.rest, n


def all_names(tree: ast.AST, loads: bool = True) -> set[str]:
    """Every name `tree` reads, binds or declares (bindings), where a new name must not fall;
    without `loads`, the names it binds or declares alone."""
    out = {name for name, _ in bindings(tree)}
    if loads:
        out.update(n.id for n in fastast.walk(tree) if isinstance(n, ast.Name))
    return out


class _Subst(ast.NodeTransformer):
    def __init__(self, subs: dict):
        self.subs = subs

    def visit_Name(self, node: ast.Name):
        v = self.subs.get(node.id)
        if v is None:
            return node
        if isinstance(v, str):
            return ast.copy_location(ast.Name(id=v, ctx=node.ctx), node)
        if isinstance(v, ast.expr):
            return fastast.clone(v)
        return node

    def visit_Expr(self, node: ast.Expr):
        if isinstance(node.value, ast.Name) and isinstance(self.subs.get(node.value.id), list):
            return [fastast.clone(s) for s in self.subs[node.value.id]]
        return self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef):
        v = self.subs.get(node.name)
        if isinstance(v, str):
            node.name = v
        for a in node.args.args:
            w = self.subs.get(a.arg)
            if isinstance(w, str):
                a.arg = w
        return self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler):
        v = self.subs.get(node.name) if node.name else None
        if isinstance(v, str):
            node.name = v
        return self.generic_visit(node)

    def visit_arg(self, node: ast.arg):
        v = self.subs.get(node.arg)
        if isinstance(v, str):
            node.arg = v
        return node


def _placeholders(subs: dict) -> None:
    # `code` holds the user's own names too (a target `P`, a tensor `T`): placeholders start
    # with `_av_`, which the analysis refuses in user code, so that no user name is replaced
    bad = [k for k in subs if not k.startswith("_av_")]
    if bad:
        raise ValueError(f"template placeholders must start with `_av_`: {bad}")


def template(code: str, **subs) -> list[ast.stmt]:
    """Parse `code` and replace placeholder names (each starting with `_av_`): a str renames,
    an expression node replaces, a list of statements replaces a placeholder standing alone
    as a statement.

    >>> ast.unparse(template("_av_x = f(_av_a)", _av_x="y", _av_a=ast.Constant(1))[0])
    'y = f(1)'
    """
    _placeholders(subs)
    tree = ast.parse(code)
    out = []
    for stmt in tree.body:
        new = _Subst(subs).visit(stmt)
        out.extend(new if isinstance(new, list) else [new])
    return out


def expr(code: str, **subs) -> ast.expr:
    _placeholders(subs)
    node = ast.parse(code, mode="eval").body
    return _Subst(subs).visit(node)


def set_lines(nodes, lineno: int, end_lineno: int | None = None) -> None:
    """Give generated nodes the line of the user's code they replace."""
    for top in nodes:
        for n in fastast.walk(top):
            if "lineno" in n._attributes:
                n.lineno = lineno
                n.end_lineno = end_lineno or lineno
                n.col_offset = getattr(n, "col_offset", 0) or 0
                n.end_col_offset = getattr(n, "end_col_offset", 0) or 0


def build_function(fn: types.FunctionType, tree: ast.FunctionDef, extra: dict[str, object],
                   filename: str) -> types.FunctionType:
    """Compile `tree` as a replacement for `fn`: same globals, defaults, closure cells;
    names in `extra` (the runtime helpers) become additional closure cells."""
    code = fn.__code__
    freevars = list(code.co_freevars) + [k for k in extra if k not in code.co_freevars]
    # defined under another name, so that the function's own name inside its body stays a
    # global (recursion goes through the module's binding, as in the original)
    tree = copy.copy(tree)
    tree.name = "_av_rewritten"
    factory = ast.FunctionDef(
        name="_av_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=v) for v in freevars], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[tree, ast.Return(value=ast.Name(id=tree.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_params=[] if hasattr(ast.FunctionDef, "type_params") else None,
        lineno=1, col_offset=0)
    if factory.type_params is None:
        del factory.type_params
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    ns: dict = {}
    exec(compile(module, filename, "exec", dont_inherit=True), fn.__globals__, ns)
    inner = next(c for c in ns["_av_factory"].__code__.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == tree.name)
    inner = inner.replace(co_name=code.co_name, co_qualname=getattr(code, "co_qualname", code.co_name)) \
        if hasattr(inner, "co_qualname") else inner.replace(co_name=code.co_name)
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    closure = tuple(cells[v] if v in cells else types.CellType(extra[v]) for v in inner.co_freevars)
    new = types.FunctionType(inner, fn.__globals__, fn.__name__, fn.__defaults__, closure or None)
    new.__kwdefaults__ = fn.__kwdefaults__      # (the same dict: a default changed in it is seen)
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    new.__doc__ = fn.__doc__
    new.__module__ = fn.__module__
    new.__annotations__ = getattr(fn, "__annotations__", {})
    return new

