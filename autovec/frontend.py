"""Capture a function's source as an AST whose line numbers are those of the user's file."""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import types
from dataclasses import dataclass, field

from . import fastast


class NoSource(Exception):
    """The function cannot be rewritten from source; the message says why."""


@dataclass(frozen=True)
class Captured:
    fn: types.FunctionType
    tree: ast.FunctionDef          # decorators removed, user-file line numbers
    filename: str
    qualname: str
    # the names the analysis and the rewrites found to be builtins or modules (`max` the builtin,
    # `torch` the module): the rewrite rests on them, and a call that finds one rebound runs the
    # function as written (api._assumptions)
    assumed: dict = field(default_factory=dict, compare=False)
    # the function as written, unparsed (the tree has conditional comprehensions as statements:
    # _BranchedComprehensions), for explain's display and diff
    written: str = field(default="", compare=False)
    # the names the capture itself made (_ProductNests), which the `_av_` rule lets through, and
    # those of `assumed` its own rewrites rest on (`product`: no longer in the tree)
    generated: frozenset = field(default=frozenset(), compare=False)
    rests_on: frozenset = field(default=frozenset(), compare=False)

    def lookup(self, name: str):
        """Value of a global, closure or builtin name, as the function would see it now.

        Returns (found, value)."""
        found, value = scope_lookup(self.fn, name)
        if found and (isinstance(value, types.ModuleType) or getattr(builtins, name, _MISSING) is value):
            self.assumed[name] = value
        return found, value


_MISSING = object()


def scope_lookup(fn: types.FunctionType, name: str):
    """(found, value) of a closure, global or builtin name of `fn`, as it would see it now."""
    code = fn.__code__
    if name in code.co_freevars and fn.__closure__ is not None:
        cell = fn.__closure__[code.co_freevars.index(name)]
        try:
            return True, cell.cell_contents
        except ValueError:
            return False, None
    g = fn.__globals__
    if name in g:
        return True, g[name]
    b = g.get("__builtins__", __builtins__)
    b = b if isinstance(b, dict) else vars(b)
    if name in b:
        return True, b[name]
    return False, None


def attr_chain(obj, parts):
    """(found, value) of `obj.a.b` for parts ["a", "b"]."""
    try:
        for part in parts:
            obj = getattr(obj, part)
    except AttributeError:
        return False, None
    return True, obj


def capture(fn) -> Captured:
    """Parse `fn`'s own source. Raises NoSource with a reason a person can act on."""
    if not isinstance(fn, types.FunctionType):
        raise NoSource(f"{fn!r} is not a Python function (builtins and C functions have no source)")
    code = fn.__code__
    if code.co_name == "<lambda>":
        raise NoSource("lambdas are not rewritten; use a `def` to let autovec rewrite the loop")
    where = f"{code.co_filename}:{code.co_firstlineno}: `{fn.__qualname__}`"
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR):
        raise NoSource(f"{where} is a generator function; generator functions are not rewritten (their loops "
                       "yield one value at a time)")
    if code.co_flags & inspect.CO_COROUTINE:
        raise NoSource(f"{where} is an async function; async functions are not rewritten")
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError) as e:
        raise NoSource(f"no source code is available for `{fn.__qualname__}` "
                       f"(defined in a REPL, by exec or in a compiled module): {e}") from None
    text = textwrap.dedent("".join(lines))
    try:
        module = ast.parse(text)
    except SyntaxError:
        # dedent can fail on oddly indented multi-line strings; parse inside a block instead
        try:
            module = ast.parse("if 1:\n" + "".join(lines))
            module.body = module.body[0].body
            ast.increment_lineno(module, -1)
        except SyntaxError as e:
            raise NoSource(f"could not parse the source of `{fn.__qualname__}`: {e}") from None
    ast.increment_lineno(module, first - 1)
    node = module.body[0] if module.body else None
    if not isinstance(node, ast.FunctionDef) or node.name != code.co_name:
        raise NoSource(f"the source found for `{fn.__qualname__}` is not its `def` "
                       "(is it created by a factory or assigned under another name?)")
    parts = fn.__qualname__.split(".")
    in_class = len(parts) >= 2 and parts[-2] != "<locals>"
    if in_class and _uses_private_names(node):
        # Python mangles `__name` inside a class body; recompiling outside it would not
        raise NoSource("methods using private (name-mangled) names are not rewritten")
    node.decorator_list = []
    if not _same_code(node, code, fn.__globals__):
        raise NoSource(f"the source file of `{fn.__qualname__}` ({code.co_filename}) no longer holds the code it "
                       "was imported from (edited since?): reload the module to let autovec rewrite it")
    written = ast.unparse(node)
    _BranchedComprehensions().visit(node)
    assumed: dict = {}
    nests = _ProductNests(fn, node, assumed)
    nests.visit(node)
    scope = _scope(node, nests.made)
    _ShiftedStores(fn, node, assumed, nests.made, scope).visit(node)
    _NoneTests(node).visit(node)
    _NumberExtremes(fn, node, assumed, nests.made, scope).visit(node)
    _IndexSplits(fn, node, assumed, nests.made, scope).visit(node)
    return Captured(fn=fn, tree=node, filename=code.co_filename, qualname=fn.__qualname__, written=written,
                    assumed=assumed, generated=frozenset(nests.made), rests_on=frozenset(assumed))


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
def _same_code(node, code, globals_=None) -> bool:
    """Whether the `def` found in the source file compiles to `code`: the same instructions,
    constants and names, its nested code's too. The file is read when the function is first
    called, and may have been edited since the module was imported (probeK): the edited text is
    another program. The `def` is compiled where its free names are a function's cells (and
    `__class__`, super's, a class's), as where it was defined; a method call on a name the module
    imports compiles as an attribute read and a call there (_ops)."""
    inner = fastast.clone(node)
    free = [n for n in code.co_freevars if n != "__class__"]
    body: list = [inner]
    if "__class__" in code.co_freevars:
        body = [ast.ClassDef(name="_av_class", bases=[], keywords=[], body=body, decorator_list=[], type_params=[])]
    if free or code.co_flags & inspect.CO_NESTED:
        cells = [ast.Assign(targets=[ast.Name(n, ast.Store()) for n in free], value=ast.Constant(None))] if free else []
        body = [ast.FunctionDef(name="_av_scope", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                                     kw_defaults=[], defaults=[]),
                                body=cells + body, decorator_list=[], returns=None, type_params=[])]
    # (the module's imports of the names the code calls methods of, so that it compiles those
    # calls as the module did, and the bytecode can be compared as it is: a global bound to a
    # module, as `import torch` binds it; where a guess is wrong, _ops compares the two forms alike)
    imported = sorted({n for c in _codes(code) for n in c.co_names
                       if isinstance((globals_ or {}).get(n), types.ModuleType)})
    if imported:
        body = [ast.Import(names=[ast.alias(name=n)]) for n in imported] + body
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    flags = 0
    for feature in ("annotations", "generator_stop", "barry_as_FLUFL"):
        flags |= code.co_flags & getattr(__import__("__future__"), feature).compiler_flag
    try:
        compiled = compile(module, code.co_filename, "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError, TypeError):
        return False
    found = _code_named(compiled, code.co_name)
    return found is not None and _same(found, code)


def _codes(c):
    """`c` and the code objects nested in it."""
    yield c
    for k in c.co_consts:
        if isinstance(k, types.CodeType):
            yield from _codes(k)


def _code_named(c, name):
    for k in c.co_consts:
        if isinstance(k, types.CodeType):
            if k.co_name == name:
                return k
            deeper = _code_named(k, name)
            if deeper is not None:
                return deeper
    return None


def _ops(c) -> list:
    """The code's instructions as (name, argument): jumps by the index they reach, a method
    load as an attribute load (`torch.f(x)` compiles either way, as the module imports `torch` or
    not), nested code by its place."""
    import dis
    # (EXTENDED_ARG carries the high bits of the next instruction's argument, which holds a
    # method flag beside the name's index, and PUSH_NULL is the other form of that flag: both left
    # out, the next instruction's name says it all)
    import bisect
    ins = [i for i in dis.get_instructions(c) if i.opname not in ("EXTENDED_ARG", "PUSH_NULL")]
    offsets = [i.offset for i in ins]
    index = lambda off: bisect.bisect_left(offsets, off)      # noqa: E731 (a left-out instruction: the next one)
    jumps = set(dis.hasjrel) | set(dis.hasjabs)
    out = []
    for i in ins:
        name = "LOAD_ATTR" if i.opname == "LOAD_METHOD" else i.opname
        arg = index(i.argval) if i.opcode in jumps else "<code>" if isinstance(i.argval, types.CodeType) else i.argval
        out.append((name, repr(arg)))
    # (and which instructions each `try` covers and where its handler starts: an edit that moves a
    # statement across a `try`'s edge may leave the instructions as they were)
    parse = getattr(dis, "_parse_exception_table", None)
    if parse is not None:
        try:
            out.extend(("EXCEPT", index(e.start), index(e.end), index(e.target), e.depth, e.lasti) for e in parse(c))
        except Exception:
            out.append(("EXCEPT", repr(getattr(c, "co_exceptiontable", b""))))
    return out


def _same(a, b) -> bool:
    """Code objects that run alike: bytecode, names, flags and constants (nested code the same way)."""
    if (a.co_varnames, a.co_freevars, a.co_cellvars, a.co_argcount, a.co_posonlyargcount, a.co_kwonlyargcount,
            a.co_flags) != (b.co_varnames, b.co_freevars, b.co_cellvars, b.co_argcount, b.co_posonlyargcount,
                            b.co_kwonlyargcount, b.co_flags):
        return False
    if (a.co_code, a.co_names, getattr(a, "co_exceptiontable", None)) != (
            b.co_code, b.co_names, getattr(b, "co_exceptiontable", None)) and _ops(a) != _ops(b):
        return False
    if len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, types.CodeType) or isinstance(y, types.CodeType):
            if not (isinstance(x, types.CodeType) and isinstance(y, types.CodeType) and _same(x, y)):
                return False
        elif type(x) is not type(y) or repr(x) != repr(y):
            return False
    return True


class _BranchedComprehensions(ast.NodeTransformer):
    """`return A if c else B` and `v = A if c else B` (a plain name, or names, as the target)
    where A or B holds a comprehension (`torch.stack([f(r) for r in x]) if len(x) else x`, an
    empty batch's guard) as the `if c:` / `else:` statements they are: a conditional expression
    evaluates `c` once and then only the side it picks, as the statements do, and a comprehension
    that is a statement's own value is one the rewrite can move. Other statements stay."""

    def visit_FunctionDef(self, node):
        return node if getattr(self, "_inside", False) else self._body_of(node)

    def _body_of(self, node):
        self._inside = True
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_ClassDef = visit_FunctionDef     # (their own scopes: left as written)

    def _split(self, stmt, value, make):
        if not (isinstance(value, ast.IfExp) and any(isinstance(n, _COMPREHENSIONS)
                                                     for side in (value.body, value.orelse) for n in fastast.walk(side))):
            return stmt
        # (each side's statement where its expression is: two comprehensions on one line are
        # two statements at their own columns)
        return ast.copy_location(ast.If(test=value.test, body=[self._split_one(make(value.body), value.body)],
                                        orelse=[self._split_one(make(value.orelse), value.orelse)]), stmt)

    def _split_one(self, new, where):
        new = ast.fix_missing_locations(ast.copy_location(new, where))
        return self.visit(new)     # (`A if c else (B if d else C)`: the inner one too)

    def visit_Return(self, node):
        if node.value is None:
            return node
        return self._split(node, node.value, lambda v: ast.Return(value=v))

    def visit_Assign(self, node):
        if not all(isinstance(t, ast.Name) or isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts)
                   for t in node.targets):
            return node      # (`x[i] = ..`, `o.a = ..`: their targets evaluate before the value's side)
        return self._split(node, node.value, lambda v: ast.Assign(targets=[fastast.clone(t) for t in node.targets],
                                                                  value=v))


# (itertools.product as autovec found it on import: one patched later is not the real one)
_PRODUCT = __import__("itertools").product


class _ProductNests(ast.NodeTransformer):
    """`for i, j in itertools.product(range(A), range(B)): body` as the nest it walks:

        _av_pr1_0 = range(A)          (each range made where product's arguments are, in order)
        _av_pr1_1 = range(B)
        for i in range(_av_pr1_0.start, _av_pr1_0.stop, _av_pr1_0.step):
            for j in range(_av_pr1_1.start, _av_pr1_1.stop, _av_pr1_1.step):
                body

    the same pairs in the same order, which the analysis batches as any nest. Only where that is
    the same program: `product` (or `itertools`) and `range` are the real ones (recorded in
    `assumed`: a call that finds one rebound runs the function as written), every argument a
    `range(..)` call, the target as many plain names, no `break` and no `else` (a `break` would
    leave the inner loop alone), the body never rebinds them (the inner loop would see it), and no
    statement outside the loop reads or binds them (where a later range is empty, product binds
    nothing and the nest binds the outer names)."""

    def __init__(self, fn, tree, assumed):
        self.fn, self.tree, self.assumed = fn, tree, assumed
        self.count = 0
        self.made: list = []
        self.local, self.declared, self.off = _scope(tree, self.made)

    def _is(self, name, obj) -> bool:
        if name in self.local:
            return False
        found, value = scope_lookup(self.fn, name)
        if not found and name == "range":
            found, value = True, builtins.range
        return found and value is obj

    def _product(self, f) -> str | None:
        import itertools
        if isinstance(f, ast.Name) and self._is(f.id, _PRODUCT):
            return f.id
        if isinstance(f, ast.Attribute) and f.attr == "product" and isinstance(f.value, ast.Name) \
                and self._is(f.value.id, itertools) and getattr(itertools, "product", None) is _PRODUCT:
            return f.value.id
        return None

    def visit_FunctionDef(self, node):
        return self.generic_visit(node) if node is self.tree else node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_For(self, node):
        self.generic_visit(node)
        it, target = node.iter, node.target
        if not (isinstance(it, ast.Call) and not it.keywords and len(it.args) >= 2
                and isinstance(target, ast.Tuple) and len(target.elts) == len(it.args)
                and all(isinstance(t, ast.Name) for t in target.elts) and not node.orelse):
            return node
        names = [t.id for t in target.elts]
        head = self._product(it.func)
        if self.off or head is None or len(set(names)) != len(names) or not self._is("range", builtins.range) or not all(
                isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == "range" and not a.keywords
                and 1 <= len(a.args) <= 3 and not any(isinstance(x, ast.Starred) for x in a.args) for a in it.args):
            return node
        inside = {id(n) for n in fastast.walk(node)}
        if any(isinstance(n, ast.Name) and n.id in names and id(n) not in inside for n in fastast.walk(self.tree)) \
                or self.declared & set(names):
            return node       # (read elsewhere, or a global / nonlocal the caller sees: probeC)
        if any(isinstance(n, ast.Name) and n.id in names and not isinstance(n.ctx, ast.Load)
               for st in node.body for n in fastast.walk(st)):
            return node
        if _breaks(node.body):
            return node
        self.count += 1
        made, loops = [], []
        for k, (a, name) in enumerate(zip(it.args, names)):
            r = f"_av_pr{self.count}_{k}"
            self.made.append(r)
            made.append(ast.copy_location(ast.Assign(targets=[ast.Name(r, ast.Store())], value=a), node))
            bounds = [ast.Attribute(value=ast.Name(r, ast.Load()), attr=part, ctx=ast.Load())
                      for part in ("start", "stop", "step")]
            loops.append((name, ast.Call(func=ast.Name("range", ast.Load()), args=bounds, keywords=[])))
        body = node.body
        for depth in range(len(loops) - 1, -1, -1):
            name, rng = loops[depth]
            loop = ast.copy_location(ast.For(target=ast.Name(name, ast.Store()), iter=rng, body=body, orelse=[]), node)
            loop.col_offset += depth      # (each loop of the nest its own place: rewrite._find)
            body = [loop]
        self.assumed["range"] = builtins.range
        import itertools
        self.assumed[head] = _PRODUCT if head != "itertools" else itertools
        if head == "itertools":
            self.assumed["itertools.product"] = _PRODUCT     # (the module's attribute too: probeC)
        out = made + body
        for st in out:
            ast.fix_missing_locations(st)
        return out


class _Rewrite(ast.NodeTransformer):
    """A capture-time rewrite of the function's own body (not of the functions, lambdas and classes
    defined in it), which knows the names the function binds and declares, and whether a name is
    a builtin for the function; the names it makes go into `made` (`_av_`: analysis.blocked_by)."""

    def __init__(self, fn, tree, assumed, made=None, scope=None):
        self.fn, self.tree, self.assumed, self.made = fn, tree, assumed, made if made is not None else []
        # (`scope`: what `_scope` found, shared by the rewrites, which bind no name but their own `_av_`)
        self.local, self.declared, self.off = scope if scope is not None else _scope(tree, self.made)

    def visit_FunctionDef(self, node):
        return self.generic_visit(node) if node is self.tree else node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def _builtin(self, name, obj) -> bool:
        """Whether `name` is the builtin `obj` for the function (not its own, not a global)."""
        found, value = scope_lookup(self.fn, name)
        return name not in self.local and (not found or value is obj)


def _scope(tree, made) -> tuple:
    """(the names the function binds, those it declares `global` / `nonlocal`, whether it names
    `_av_` itself: a function that does is not rewritten at all, analysis.blocked_by)."""
    off = any(isinstance(n, ast.Name) and n.id.startswith("_av_") and n.id not in made for n in fastast.walk(tree))
    return _bound_names(tree), _declared(tree), off


class _ShiftedStores(_Rewrite):
    """A loop of one store into `t[i + s]` (s a nonzero int), whose index `i` appears only in
    subscripts as `i`, `i + d` or `i - d`, walks its own target `j = i + s`:

        for i in range(n - 1, 0, -1):                  for i in range(n - 1 - 1, 0 - 1, -1):
            m[i - 1] = torch.maximum(m[i - 1], m[i])   ->   m[i] = torch.maximum(m[i], m[i + 1])

    every subscript the same element as before, in the same order (the precision envelope of
    VOC's average precision), so the analysis sees the store at the index itself. Only where
    nothing outside the loop reads the name (its last value is off by s) and `range` is the real
    one (recorded in `assumed`)."""

    def visit_For(self, node):
        self.generic_visit(node)
        rng = node.iter
        back = isinstance(rng, ast.Call) and isinstance(rng.func, ast.Name) and rng.func.id == "reversed" \
            and len(rng.args) == 1 and not rng.keywords
        if back:
            rng = rng.args[0]
        if not (isinstance(node.target, ast.Name) and not node.orelse and len(node.body) == 1
                and isinstance(rng, ast.Call) and isinstance(rng.func, ast.Name) and rng.func.id == "range"
                and not rng.keywords and 1 <= len(rng.args) <= 3
                and not any(isinstance(a, ast.Starred) for a in rng.args)):
            return node
        i, st = node.target.id, node.body[0]
        target = st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 else \
            st.target if isinstance(st, ast.AugAssign) else None
        if not isinstance(target, ast.Subscript):
            return node
        shift = _index_offset(target.slice, i)
        if not shift or any(isinstance(n, (ast.Lambda, ast.NamedExpr) + _COMPREHENSIONS) for n in fastast.walk(st)):
            return node      # (a comprehension's or lambda's own `i` is another name)
        # every use of `i` an index `i`, `i + d` or `i - d` in a subscript
        uses = [n for n in fastast.walk(st) if isinstance(n, ast.Name) and n.id == i]
        parents = {id(c): p for p in fastast.walk(st) for c in ast.iter_child_nodes(p)}
        for n in uses:
            if not isinstance(n.ctx, ast.Load):
                return node
            p = parents.get(id(n))
            at = p if isinstance(p, ast.BinOp) and p.left is n and _offset_of(p, i) is not None else n
            holder = parents.get(id(at))
            if isinstance(holder, ast.Tuple):
                holder = parents.get(id(holder))
            if not (isinstance(holder, ast.Subscript) and (holder.slice is at or isinstance(holder.slice, ast.Tuple)
                                                            and any(e is at for e in holder.slice.elts))):
                return node
        inside = {id(n) for n in fastast.walk(node)}
        if any(isinstance(n, ast.Name) and n.id == i and id(n) not in inside for n in fastast.walk(self.tree)) \
                or i in self.declared:
            return node       # (read elsewhere, or a global / nonlocal the caller sees: probeC)
        if not all(_int_bound(a) for a in rng.args):
            # (`lo - 1` of a uint8 `lo` wraps to 255, and an object with `__index__` alone has no
            # `-`: only bounds that are Python ints, literals, lengths and sizes; probeC)
            return node
        if i in {n.id for n in fastast.walk(self.tree.args) if isinstance(n, ast.Name)} | {
                a.arg for a in fastast.walk(self.tree.args) if isinstance(a, ast.arg)}:
            return node
        if not self._builtin("range", builtins.range) or back and not self._builtin("reversed", builtins.reversed):
            return node
        args = list(rng.args) if len(rng.args) > 1 else [ast.Constant(0), rng.args[0]]
        for k in (0, 1):
            args[k] = _plus(args[k], shift)
        new_rng = ast.Call(func=ast.Name("range", ast.Load()), args=args, keywords=[])

        class Sub(ast.NodeTransformer):
            def visit_BinOp(self, b):
                d = _offset_of(b, i)
                if d is not None:
                    return ast.copy_location(_plus(ast.Name(i, ast.Load()), d - shift), b)
                return self.generic_visit(b)

            def visit_Name(self, n):
                if n.id == i and isinstance(n.ctx, ast.Load):
                    return ast.copy_location(_plus(ast.Name(i, ast.Load()), -shift), n)
                return n
        node.body = [Sub().visit(st)]
        node.iter = ast.Call(func=ast.Name("reversed", ast.Load()), args=[new_rng], keywords=[]) if back else new_rng
        ast.copy_location(node.iter, rng)
        ast.fix_missing_locations(node)
        self.assumed["range"] = builtins.range
        if back:
            self.assumed["reversed"] = builtins.reversed
        return node


def _bound_names(tree, own_args=True) -> set:
    """Every name a function binds itself (assignments, arguments, imports, `def` / `class`, `except
    .. as`, `match` captures), its nested scopes' too: a name the rewrite rests on must be none of
    them. `own_args`: with the function's own parameters."""
    out = {a.arg for a in fastast.walk(tree.args) if isinstance(a, ast.arg)} if own_args else set()
    for n in fastast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not tree:
            out.add(n.name)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.arg) and (own_args or not _in_args(n, tree)):
            out.add(n.arg)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            out.add(n.name)          # (`case w:`, `case [*w]:`: a binding by a plain string; probeG)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            out.add(n.rest)
    return out


class _NoneTests(ast.NodeTransformer):
    """A loop whose body tests an optional parameter (`if mask is not None and not mask[i]:`,
    `w[i] if w is not None else 1.0`), which the function never rebinds, runs as two loops, one
    for each answer (loop unswitching):

        if mask is None:
            for ..: <body, `mask is not None` False>
        else:
            for ..: <body, `mask is not None` True>

    the same program: the test's answer is the same in every iteration (the name is bound once,
    as a parameter, and `is` runs no code), and each copy drops the side its answer never takes
    (`False and ..`, `if False:`), so the loop for `mask=None` no longer reads `mask[i]`. At most
    two parameters a loop; the second copy's loops get their own columns (rewrite._find)."""

    def __init__(self, tree):
        self.tree = tree
        params = {a.arg for a in tree.args.posonlyargs + tree.args.args + tree.args.kwonlyargs}
        # (every other binding in the function, its nested scopes' included: `_bound_names` less
        # the function's own parameters, which bind once)
        self.names = params - _bound_names(tree, own_args=False) - _declared(tree)
        self.shift = 0

    def visit_FunctionDef(self, node):
        return self.generic_visit(node) if node is self.tree else node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_For(self, node, depth=0):
        tested = sorted({n.left.id for n in _own_scope(node) if _none_test(n) and n.left.id in self.names})
        if not tested or depth >= 2:
            return node if tested else self.generic_visit(node)
        p = tested[0]
        copies = []
        for answer in (True, False):          # (`p is None`)
            loop = _Decided(p, answer).visit(fastast.clone(node))
            if not answer:
                # (far from any column a loop of the function has, the copies' own: the capture's
                # other rewrites give a nest's inner loops the next columns)
                self.shift += 1000
                for n in fastast.walk(loop):
                    if isinstance(n, (ast.For, ast.While, ast.ListComp, ast.GeneratorExp)):
                        n.col_offset += self.shift
                        if getattr(n, "end_col_offset", None) is not None:
                            n.end_col_offset += self.shift     # (a valid range: compile checks it; probeG)
            loop = self.visit_For(loop, depth + 1) if depth + 1 < 2 else loop
            copies.append(loop if isinstance(loop, list) else [loop])
        test = ast.Compare(left=ast.Name(p, ast.Load()), ops=[ast.Is()], comparators=[ast.Constant(None)])
        out = ast.If(test=test, body=copies[0], orelse=copies[1])
        ast.copy_location(out, node)
        ast.fix_missing_locations(out)
        return out


def _own_scope(node):
    """The nodes under `node`, not those of the functions and lambdas defined in it."""
    yield node
    for c in ast.iter_child_nodes(node):
        if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from _own_scope(c)


def _none_test(n) -> bool:
    return isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Is, ast.IsNot)) \
        and isinstance(n.left, ast.Name) and isinstance(n.comparators[0], ast.Constant) \
        and n.comparators[0].value is None


class _Decided(ast.NodeTransformer):
    """A loop's copy with `p is None` answered (`answer`), and what that answer decides dropped:
    leading constants of `and` / `or`, `not` of one, conditional expressions and `if`s on one."""

    def __init__(self, p, answer):
        self.p, self.answer = p, answer

    def visit_FunctionDef(self, node):
        return node      # (a nested function's own scope: left as written)

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_Compare(self, node):
        if _none_test(node) and node.left.id == self.p:
            value = self.answer if isinstance(node.ops[0], ast.Is) else not self.answer
            return _answer(value, node)
        return self.generic_visit(node)

    def visit_UnaryOp(self, node):
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Not) and _const(node.operand):
            return _answer(not node.operand.value, node)
        return node

    def visit_BoolOp(self, node):
        node = self.generic_visit(node)
        values = list(node.values)
        stop = isinstance(node.op, ast.And)       # (`False and ..` is False; `True or ..` is True)
        while len(values) > 1 and _const(values[0]):
            if bool(values[0].value) is not stop:
                return values[0]
            values.pop(0)                         # (`True and x` is x)
        if len(values) == 1:
            return values[0]
        node.values = values
        return node

    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        if _const(node.test):
            return node.body if node.test.value else node.orelse
        return node

    def visit_If(self, node):
        node = self.generic_visit(node)
        if _const(node.test):
            kept = node.body if node.test.value else node.orelse
            return kept or [ast.copy_location(ast.Pass(), node)]
        return node

    def visit_While(self, node):
        return self.generic_visit(node)


_LIST_CALLS = frozenset({"append", "insert", "appendleft", "extend", "extendleft", "add", "update", "pop", "popleft",
                         "remove", "clear", "discard", "setdefault", "resize_", "resize_as_", "set_", "squeeze_",
                         "unsqueeze_", "t_", "transpose_", "swapdims_", "swapaxes_", "as_strided_"})
_FLIP = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}


class _IndexSplits(_Rewrite):
    """A loop over a range whose body tests its index against a bound the loop does not change
    (`nv = v[t + 1] if t + 1 < T else 0.0`, `if t == T - 1:`, `x[i - 1] if i > 0 else 0`) runs as
    consecutive loops over the pieces of the range where the test has one answer (index-set
    splitting), each with the test answered and what it decides dropped:

        _av_ix1_a, _av_ix1_b = 0, T                     for t in reversed(range(T)):
        _av_ix1 = .. T - 1 clamped to [a, b] ..    <-       nv = v[t + 1] if t + 1 < T else 0.0
        for t in reversed(range(_av_ix1, _av_ix1_b)):        ...
            nv = 0.0; ...
        for t in reversed(range(_av_ix1_a, _av_ix1)):
            nv = v[t + 1]; ...

    the same iterations in the same order (the test is monotone in the index, or true at one
    index for `==`), so a running value, a store read back a step later or a ragged end each
    piece's body no longer branches on. Only where it is the same program:
    - a loop that is no other loop's body, over `range(..)` (step 1, or -1 with int bounds) or
      `reversed(range(..))`, `range` and `reversed` the real ones (recorded in `assumed`); no
      `else`, no `break` (it would let the next piece run), no `global` / `nonlocal` in it; the
      index never rebound in it (nor by a walrus in a comprehension);
    - a test's bound made of int literals and local names every binding of which is an int
      expression (`_int_names`; one at the function's top level before the loop, none an import,
      `except .. as`, `match` capture or `del`) with `+`, `-`, `*` (`//`, `%` by a nonzero literal):
      nothing that can raise, run code or change while the loop runs (`len(buf)` of a list grown
      through an alias: probeL), read once, before the first iteration, where the range is not
      empty; range bounds `_int_bound` ones, read once in the range's own order;
    - a name or range bound that is a size (`T = s.shape[0]`: an int for tensors, not for any
      object) checked to be an int on each call, else the loop runs as written over the same
      range (marked `_av_as_written`: the analysis refuses it at once; probeL, probeM);
    - no list built by the loop (`append`, `insert`, ..: each piece would see the others' items,
      where the list rewrites need one loop building the whole list);
    - at most two tests (at most four pieces for `<` kinds, six with one `==`); a piece between
      two bounds of one text (`t == T - 1` over `range(T)`'s [T, T)) is not made.
    Tests in nested functions, lambdas and comprehensions are left as written (still right)."""

    def __init__(self, fn, tree, assumed, made, scope=None):
        super().__init__(fn, tree, assumed, made, scope)
        self.count = 0
        self.shift = 10000      # (the pieces' loops get their own columns, far from _NoneTests' copies)
        self.top = None
        self._ints = None

    @property
    def ints(self) -> dict:
        """_int_names of the function, found where a loop first tests its index."""
        if self._ints is None:
            self.real_len = self._builtin("len", builtins.len)
            self._ints, self.certain = _int_names(self.tree, self.declared, self.real_len)
        return self._ints

    def visit_FunctionDef(self, node):
        if node is not self.tree:
            return node
        for k, st in enumerate(node.body):
            self.top = k
            node.body[k] = self.visit(st)
        node.body = [s for st in node.body for s in (st if isinstance(st, list) else [st])]
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_While(self, node):
        return node       # (loops inside another loop stay as written)

    def visit_For(self, node):
        if self.off or not isinstance(node.target, ast.Name) or not any(
                isinstance(n, ast.Compare) and any(isinstance(m, ast.Name) and m.id == node.target.id
                                                   for m in fastast.walk(n)) for n in _scope_nodes(node.body)):
            return node       # (no test of the index: nothing to split, and nothing more to look at)
        self.ints                      # (and the int names, the first time)
        space = self._space(node)
        if space is None:
            return node
        a, b, back = space
        first = ("b", "a") if back == "down" else ("a", "b")     # (the bounds in the order the range reads them)
        back = bool(back)
        tests = self._tests(node, node.target.id)
        if not tests:
            return node
        self.assumed["range"] = builtins.range
        if back:
            self.assumed["reversed"] = builtins.reversed
        self.count += 1
        base = f"_av_ix{self.count}"
        out = []
        names = [f"{base}_a", f"{base}_b"]
        for which in first:
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(f"{base}_{which}", ast.Store())],
                                                    value=a if which == "a" else b), node))
        self.made.extend(names)
        pieces = [(names[0], names[1], {})]
        for j, (key, kind, point) in enumerate(tests[:2]):
            more = []
            for lo, hi, answers in pieces:
                cuts = [fastast.clone(point)] if kind == "lt" else [fastast.clone(point), _plus(fastast.clone(point), 1)]
                at = []
                for c, cut in enumerate(cuts):
                    name = f"{base}_{j}{c}_{len(more)}"
                    self.made.append(name)
                    out.extend(_clamped(name, cut, lo, hi, node))
                    at.append(name)
                bounds = [lo] + at + [hi]
                # (a piece between two bounds of one text is always empty, `t == T - 1` over
                # `range(T)`'s last one, [T, T): not made. First test only, whose cuts are held to
                # the range's own bounds)
                texts = [ast.dump(a), *(ast.dump(c) for c in cuts), ast.dump(b)] if j == 0 else None
                for p in range(len(bounds) - 1):
                    if texts is not None and texts[p] == texts[p + 1]:
                        continue
                    ans = dict(answers)
                    ans[key] = (p == 0) if kind == "lt" else (p == 1)
                    more.append((bounds[p], bounds[p + 1], ans))
            pieces = more
        if back:
            pieces = pieces[::-1]
        loops = []
        for p, (lo, hi, answers) in enumerate(pieces):
            loop = fastast.clone(node)
            rng = ast.Call(func=ast.Name("range", ast.Load()), args=[ast.Name(lo, ast.Load()), ast.Name(hi, ast.Load())],
                           keywords=[])
            loop.iter = ast.Call(func=ast.Name("reversed", ast.Load()), args=[rng], keywords=[]) if back else rng
            ast.copy_location(loop.iter, node.iter)
            loop.body = _Answered(answers).visit(ast.Module(body=loop.body, type_ignores=[])).body or [
                ast.copy_location(ast.Pass(), node)]
            # (explain shows the piece under the header as written: its body tells which piece)
            loop._av_written = ast.copy_location(ast.For(target=fastast.clone(node.target), iter=fastast.clone(node.iter),
                                                         body=loop.body, orelse=[]), node)
            loop._av_written._av_piece = "the iterations where " + ", ".join(
                f"`{_shown(tests, key, node.target.id)}` is {answer}" for key, answer in answers.items())
            if p:
                self.shift += 1000
                for n in fastast.walk(loop):
                    if isinstance(n, (ast.For, ast.While, ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
                        n.col_offset += self.shift
                        if getattr(n, "end_col_offset", None) is not None:
                            n.end_col_offset += self.shift
            loops.append(loop)
        # (a name bound to a size, `T = s.shape[0]`, is an int for tensors and arrays; where it is
        # not one, the pieces cannot hold the test: the loop runs as written, over the same range;
        # probeL's object with `shape = (2.5,)`)
        unsure = sorted({m.id for _, _, point in tests[:2] for m in fastast.walk(point)
                         if isinstance(m, ast.Name) and m.id not in self.certain})
        # (and the range's own bounds, where they are sizes: an object's `shape` may hold a float,
        # which range() refuses before the first iteration, or an index without comparisons; probeM)
        unsure += [name for name, bound in zip(names, (a, b)) if not _sure_int(bound, self.certain, self.real_len)]
        if unsure:
            self.assumed["type"], self.assumed["int"] = builtins.type, builtins.int
            written = fastast.clone(node)
            rng = ast.Call(func=ast.Name("range", ast.Load()), args=[ast.Name(names[0], ast.Load()),
                                                                     ast.Name(names[1], ast.Load())], keywords=[])
            written.iter = ast.copy_location(
                ast.Call(func=ast.Name("reversed", ast.Load()), args=[rng], keywords=[]) if back else rng, node.iter)
            self.shift += 1000
            for n in fastast.walk(written):
                if isinstance(n, (ast.For, ast.While) + _COMPREHENSIONS):
                    n._av_as_written = ("the copy of the loop for a call where a bound of its tests or range is not an int (a size of an "
                                        "object other than a tensor): it runs as written, and only then")
                    n.col_offset += self.shift
                    if getattr(n, "end_col_offset", None) is not None:
                        n.end_col_offset += self.shift
            written._av_written = ast.copy_location(ast.For(target=fastast.clone(node.target), iter=fastast.clone(node.iter),
                                                            body=node.body, orelse=[]), node)
            written._av_written._av_piece = "where a test's bound is not an int"
            check = ast.BoolOp(op=ast.And(), values=[
                ast.Compare(left=ast.Call(func=ast.Name("type", ast.Load()), args=[ast.Name(u, ast.Load())], keywords=[]),
                            ops=[ast.Is()], comparators=[ast.Name("int", ast.Load())]) for u in unsure]) \
                if len(unsure) > 1 else ast.Compare(
                    left=ast.Call(func=ast.Name("type", ast.Load()), args=[ast.Name(unsure[0], ast.Load())], keywords=[]),
                    ops=[ast.Is()], comparators=[ast.Name("int", ast.Load())])
            split = out[len(first):] + loops
            out = out[:len(first)] + [ast.copy_location(ast.If(test=check, body=split, orelse=[written]), node)]
        else:
            out += loops
        for st in out:
            ast.fix_missing_locations(st)
        return out

    def _space(self, node):
        """(a, b, backwards) of the loop's range as `range(a, b)` walked forward or back, or None."""
        if not isinstance(node.target, ast.Name) or node.orelse or _breaks(node.body):
            return None
        rng, back = node.iter, False
        if isinstance(rng, ast.Call) and isinstance(rng.func, ast.Name) and rng.func.id == "reversed" \
                and len(rng.args) == 1 and not rng.keywords:
            rng, back = rng.args[0], True
        if not (isinstance(rng, ast.Call) and isinstance(rng.func, ast.Name) and rng.func.id == "range"
                and not rng.keywords and 1 <= len(rng.args) <= 3
                and not any(isinstance(x, ast.Starred) for x in rng.args)):
            return None
        if not self._builtin("range", builtins.range) or back and not self._builtin("reversed", builtins.reversed) \
                or not (self._builtin("type", builtins.type) and self._builtin("int", builtins.int)):
            return None
        args = list(rng.args)
        if not all(self._int(x) for x in args):
            return None
        if len(args) == 3:
            step = args[2]
            minus = isinstance(step, ast.UnaryOp) and isinstance(step.op, ast.USub) and isinstance(
                step.operand, ast.Constant) and step.operand.value == 1 and type(step.operand.value) is int
            one = isinstance(step, ast.Constant) and type(step.value) is int and step.value == 1
            if back and not one or not (one or minus):
                return None
            if minus:          # (range(a, b, -1) walks b + 1 .. a + 1 back; a is evaluated first)
                return _plus(fastast.clone(args[1]), 1), _plus(fastast.clone(args[0]), 1), "down"
            args = args[:2]
        if len(args) == 1:
            args = [ast.Constant(0), args[0]]
        return fastast.clone(args[0]), fastast.clone(args[1]), back

    def _int(self, node) -> bool:
        """A Python int whatever the values (`_int_expr`), its names bound before the loop and its
        sizes those of the function's own local names."""
        ints = {k for k, top in self.ints.items() if self.top is not None and top < self.top}
        return _int_expr(node, ints) and all(
            (v := _sized_name(m)) is not None and v in self.local and v not in self.declared
            for m in _size_reads(node))

    def _bound(self, node) -> bool:
        """A test's bound read once before the loop: int literals and the local int names bound
        before it (`_int_names`), with `+`, `-`, `*`, `//` / `%` by a nonzero literal (nothing that can raise, run code or change
        while the loop runs: a size read again, `len(x)`, could see an object the loop grows
        through an alias, and `n // k` could divide by zero where the loop never reads it; probeL)."""
        if isinstance(node, ast.Name):
            return node.id in self.ints and self.top is not None and self.ints[node.id] < self.top
        if isinstance(node, ast.Constant):
            return type(node.value) is int
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return self._bound(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            return self._bound(node.left) and self._bound(node.right)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            r = node.right       # (`T // 2`: by a nonzero literal, which cannot raise)
            return self._bound(node.left) and isinstance(r, ast.Constant) and type(r.value) is int and r.value != 0
        return False

    def _tests(self, node, i):
        """[(key, "lt" | "eq", point)] of the body's tests of the index: each marks its nodes with
        `av_split` = key and is answered `i < point` ("lt") or `i == point` ("eq")."""
        inside = list(_scope_nodes(node.body))
        if any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in fastast.walk(node)):
            return []
        if any(isinstance(n, ast.Name) and n.id == i and not isinstance(n.ctx, ast.Load) for n in fastast.walk(node)
               if n is not node.target) or i in self.declared:
            return []
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _LIST_CALLS
               for n in fastast.walk(node)):
            return []
        stored = _bound_names(_as_function(node.body), own_args=False)
        found, keys = [], {}
        for n in inside:
            if not (isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in _FLIP):
                continue
            left, op, right = n.left, type(n.ops[0]), n.comparators[0]
            d = _index_form(left, i)
            if d is None:
                left, right, op = right, left, _FLIP[op]
                d = _index_form(left, i)
            if d is None or any(isinstance(m, ast.Name) and m.id in stored | {i} for m in fastast.walk(right)):
                continue
            if not self._bound(right):
                continue
            # i + d OP right: i OP right - d
            point = _plus(fastast.clone(right), -d)
            if op in (ast.Lt, ast.GtE):
                kind, neg = "lt", op is ast.GtE
            elif op in (ast.LtE, ast.Gt):
                kind, neg, point = "lt", op is ast.Gt, _plus(point, 1)
            else:
                kind, neg = "eq", op is ast.NotEq
            key = (kind, ast.dump(point))
            if key not in keys:
                if len(keys) == 2:
                    continue
                keys[key] = len(found)
                found.append((key, kind, point))
            n.av_split = (key, neg)
        return found


def _shown(tests, key, i) -> str:
    """The test of `key` as `i < point` / `i == point`."""
    kind, point = next((k, p) for kk, k, p in tests if kk == key)
    return f"{i} {'<' if kind == 'lt' else '=='} {ast.unparse(point)}"


def _clamped(name, point, lo, hi, where):
    """`name = point` held to [lo, hi], read only where lo < hi (an empty range reads no bound)."""
    lo_, hi_ = ast.Name(lo, ast.Load()), ast.Name(hi, ast.Load())
    first = ast.Assign(targets=[ast.Name(name, ast.Store())],
                       value=ast.IfExp(test=ast.Compare(left=lo_, ops=[ast.GtE()], comparators=[hi_]),
                                       body=ast.Name(lo, ast.Load()), orelse=point))
    n = ast.Name(name, ast.Load())
    second = ast.Assign(targets=[ast.Name(name, ast.Store())], value=ast.IfExp(
        test=ast.Compare(left=n, ops=[ast.Lt()], comparators=[ast.Name(lo, ast.Load())]),
        body=ast.Name(lo, ast.Load()),
        orelse=ast.IfExp(test=ast.Compare(left=ast.Name(name, ast.Load()), ops=[ast.Gt()],
                                          comparators=[ast.Name(hi, ast.Load())]),
                         body=ast.Name(hi, ast.Load()), orelse=ast.Name(name, ast.Load()))))
    return [ast.copy_location(first, where), ast.copy_location(second, where)]


class _Answered(_Decided):
    """A piece's copy with its tests of the index answered (`answers`: key -> whether the index is
    below the point, or at it), and what the answers decide dropped (`_Decided`)."""

    def __init__(self, answers):
        super().__init__(None, None)
        self.answers = answers

    def visit_Compare(self, node):
        mark = getattr(node, "av_split", None)
        if mark is not None and mark[0] in self.answers:
            return _answer(self.answers[mark[0]] is not mark[1], node)
        return self.generic_visit(node)


def _scope_nodes(stmts):
    """The nodes of `stmts` in the loop's own scope: not those of nested functions, lambdas,
    classes or comprehensions (whose names may be other variables)."""
    for st in stmts:
        yield from _scoped(st)


def _scoped(node):
    yield node
    for c in ast.iter_child_nodes(node):
        if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef) + _COMPREHENSIONS):
            yield from _scoped(c)


def _index_form(node, i) -> int | None:
    """d where `node` is `i`, `i + d` or `i - d`, else None."""
    if isinstance(node, ast.Name) and node.id == i:
        return 0
    return _offset_of(node, i)


def _size_reads(node) -> list:
    """The size reads of an int expression (`len(x)`, `x.shape[k]`, `x.size(k)`, ..)."""
    return [m for m in fastast.walk(node) if isinstance(m, ast.Call)
            or isinstance(m, ast.Subscript) and isinstance(m.value, ast.Attribute) and m.value.attr == "shape"]


def _sized_name(m) -> str | None:
    """The local name whose size `m` reads (`x` of `len(x)`, `x.shape[0]`), or None."""
    if isinstance(m, ast.Subscript):
        v = m.value.value
    elif isinstance(m.func, ast.Name):
        v = m.args[0] if m.args else None
    else:
        v = m.func.value
    return v.id if isinstance(v, ast.Name) else None


def _int_expr(node, ints) -> bool:
    """`_int_bound` with the names in `ints` (local names only ever bound to such ints)."""
    if isinstance(node, ast.Name):
        return node.id in ints
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _int_expr(node.operand, ints)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        return _int_expr(node.left, ints) and _int_expr(node.right, ints)
    funcs = {id(m.func) for m in fastast.walk(node) if isinstance(m, ast.Call)}
    return _int_bound(node) and not any(isinstance(n, ast.Name) and id(n) not in funcs and not _under_size(n, node)
                                        for n in fastast.walk(node))


def _under_size(n, root) -> bool:
    """Whether the name `n` is the object of one of `root`'s size reads (`x` of `len(x)`)."""
    return any(isinstance(n, ast.Name) and _sized_name(m) == n.id for m in _size_reads(root))


def _sure_int(e, known, real_len) -> bool:
    """Whether `e` is an int whatever the values: int literals, the names `known`, `len(..)` (the
    builtin: `real_len`), with `+`, `-`, `*`, `//`, `%`."""
    if isinstance(e, ast.Constant):
        return type(e.value) is int
    if isinstance(e, ast.Name):
        return e.id in known
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return _sure_int(e.operand, known, real_len)
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
        return _sure_int(e.left, known, real_len) and _sure_int(e.right, known, real_len)
    return real_len and isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len" \
        and len(e.args) == 1 and not e.keywords and not isinstance(e.args[0], ast.Starred)


def _int_names(tree, declared, real_len) -> tuple:
    """({name: the index of the first top-level statement binding it} of the function's local names
    every binding of which is `name = <int expression>` (`T = r.shape[0]`, `n = len(x) - 1`), one
    of them at the top level: a Python int whenever a statement after that one reads it; the names
    of those whose every binding is an int whatever the values, _sure_int: literals, `len(..)`
    (the builtin: `real_len`) and such names; `x.shape[0]` is one for a tensor, not for any object)."""
    # (every binding that is not a Name's store: imports, `except .. as`, `match` captures, `def` /
    # `class`, parameters; a name bound so as well as by `T = 2` is not one; probeL)
    odd = set(declared) | {a.arg for a in fastast.walk(tree) if isinstance(a, ast.arg)}
    for n in fastast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            odd |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not tree:
            odd.add(n.name)
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            odd.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            odd.add(n.rest)
    parents = {id(c): p for p in fastast.walk(tree) for c in ast.iter_child_nodes(p)}
    sites: dict = {}
    for n in fastast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            p = parents.get(id(n))
            ok = isinstance(n.ctx, ast.Store) and isinstance(p, ast.Assign) and p.targets == [n]
            sites.setdefault(n.id, []).append(p if ok else None)
    ints = {k for k, v in sites.items() if k not in odd and all(s is not None for s in v)}
    changed = True
    while changed:
        changed = False
        for k in list(ints):
            if not all(_int_expr(s.value, ints) for s in sites[k]):
                ints.discard(k)
                changed = True
    out = {}
    for k in ints:
        tops = [j for j, st in enumerate(tree.body) if any(s is st for s in sites[k])]
        if tops:
            out[k] = tops[0]
    sure = set(out)
    changed = True
    while changed:
        changed = False
        for k in list(sure):
            if not all(_sure_int(s.value, sure, real_len) for s in sites[k]):
                sure.discard(k)
                changed = True
    return out, sure


def _as_function(stmts) -> ast.FunctionDef:
    """`stmts` as the body of a function without parameters (for `_bound_names`)."""
    return ast.FunctionDef(name="", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                                       defaults=[]), body=stmts, decorator_list=[])


class _NumberExtremes(_Rewrite):
    """Python's `max` / `min` of a number and a value (`max(0, d)`, `min(x[i], 1.0)`, hinge
    losses), as the statements they are, where a loop's statement adds one to a running total or
    stores one:

        loss += max(0, d)        ->   _av_mx1 = d
                                      if _av_mx1 > 0:
                                          loss += _av_mx1
        out[i] = max(e, 0.5)     ->   _av_mx1 = e
                                      out[i] = 0.5 if 0.5 > _av_mx1 else _av_mx1

    `max(a, b)` is `b if b > a else a` and `min(a, b)` is `b if b < a else a`, each operand
    evaluated once, first (nothing the statement evaluates before it can change: the total is a
    local name, and a store's target is evaluated after its value). A total drops the number's
    side only where adding it changes nothing: the number is 0 or 0.0, the total a local name
    started as the literal 0 or 0.0 (0.0 for a float number: an int plus 0.0 is a float) right
    before the loop and only added to or subtracted from in it (so never -0.0 nor a bool tensor).
    `max` / `min` must be the builtins (recorded in `assumed`)."""

    def __init__(self, fn, tree, assumed, made, scope=None):
        super().__init__(fn, tree, assumed, made, scope)
        self.count = 0

    def _stmts(self, stmts, loop, starts):
        """`stmts` (a body inside `loop`) with the statements rewritten."""
        out = []
        for st in stmts:
            if isinstance(st, (ast.For, ast.While)):
                # (an inner loop: its own totals' starts, and the outer loop's totals it only sums
                # into, `loss = 0.0` / `for i ..: for j ..: loss += max(0, ..)`)
                out.append(self.visit_For(st, {k: v for k, v in starts.items() if self._only_summed(loop, k)}))
                continue
            new = self._one(st, loop, starts)
            if new is None:
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(st, field, None)
                    if isinstance(inner, list) and inner and not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                                 ast.ClassDef)):
                        setattr(st, field, self._stmts(inner, loop, starts))
                if isinstance(st, ast.Try):
                    for h in st.handlers:
                        h.body = self._stmts(h.body, loop, starts)
                out.append(st)
            else:
                out.extend(new)
        return out

    def visit_For(self, node, inherited=None):
        if self.off:
            return node
        starts = {**(inherited or {}), **self._starts(node)}
        node.body = self._stmts(node.body, node, starts)
        return node

    visit_While = visit_For

    def _starts(self, loop) -> dict:
        """{name: 0 or 0.0} of the names the statements right before `loop` (in its own block) set
        to a literal 0 / 0.0, the last binding of each before the loop."""
        parent = self._block_of(loop)
        found: dict = {}
        if parent is None:
            return found
        for st in parent[:next(k for k, s in enumerate(parent) if s is loop)]:
            for n in fastast.walk(st):
                if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                    found.pop(n.id, None)
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                    and isinstance(st.value, ast.Constant) and type(st.value.value) in (int, float) \
                    and st.value.value == 0:
                found[st.targets[0].id] = st.value.value
        return found

    def _block_of(self, loop):
        for n in fastast.walk(self.tree):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(n, field, None)
                if isinstance(block, list) and any(s is loop for s in block):
                    return block
        return None

    def _extreme(self, call):
        """(name, number node, value node, number first) of `max(K, e)` / `min(e, K)`, or None."""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("max", "min")
                and len(call.args) == 2 and not call.keywords
                and not any(isinstance(a, ast.Starred) for a in call.args)):
            return None
        nums = [_number(a) for a in call.args]
        if nums[0] is not None and nums[1] is None:
            return call.func.id, call.args[0], call.args[1], True
        if nums[1] is not None and nums[0] is None:
            return call.func.id, call.args[1], call.args[0], False
        return None

    def _one(self, st, loop, starts):
        """The statements `st` becomes, or None where it stays."""
        if isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Add) and isinstance(st.target, ast.Name):
            total, call = st.target.id, st.value
        elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and isinstance(st.value, ast.BinOp) and isinstance(st.value.op, ast.Add) \
                and isinstance(st.value.left, ast.Name) and st.value.left.id == st.targets[0].id:
            total, call = st.targets[0].id, st.value.right
        elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Subscript):
            total, call = None, st.value
        else:
            return None
        found = self._extreme(call)
        if found is None:
            return None
        fn, num, value, first = found
        if not self._builtin(fn, getattr(builtins, fn)):
            return None
        if total is not None:
            k = _number(num)
            start = starts.get(total)
            if k != 0 or start is None or type(k) is float and type(start) is not float \
                    or total in self.declared or not self._only_summed(loop, total):
                return None
        self.assumed[fn] = getattr(builtins, fn)
        if isinstance(value, ast.Name) and value.id not in self.declared:
            tmp, bind = value.id, None      # (a local name read twice reads one value)
        else:
            self.count += 1
            tmp = f"_av_mx{self.count}"
            self.made.append(tmp)
            bind = ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=value), st)
        v = ast.Name(tmp, ast.Load())
        op = ast.Gt() if fn == "max" else ast.Lt()
        # max(K, e): e if e > K else K;  max(e, K): K if K > e else e  (min with <)
        test = ast.Compare(left=v, ops=[op], comparators=[fastast.clone(num)]) if first else \
            ast.Compare(left=fastast.clone(num), ops=[op], comparators=[ast.Name(tmp, ast.Load())])
        if total is None:
            picked = ast.IfExp(test=test, body=ast.Name(tmp, ast.Load()), orelse=fastast.clone(num)) if first else \
                ast.IfExp(test=test, body=fastast.clone(num), orelse=ast.Name(tmp, ast.Load()))
            st.value = ast.copy_location(picked, call)
            out = [st]
        else:
            if isinstance(st, ast.AugAssign):
                st.value = ast.copy_location(ast.Name(tmp, ast.Load()), call)
            else:
                st.value.right = ast.copy_location(ast.Name(tmp, ast.Load()), call)
            cond = test if first else ast.UnaryOp(op=ast.Not(), operand=test)
            out = [ast.copy_location(ast.If(test=ast.copy_location(cond, call), body=[st], orelse=[]), st)]
        out = ([bind] if bind is not None else []) + out
        for o in out:
            ast.fix_missing_locations(o)
        return out

    def _only_summed(self, loop, total) -> bool:
        """Whether the loop binds `total` only by adding to it or subtracting from it (`+=`, `-=`,
        `total = total + ..`) and reads it nowhere else: no statement can see that the dropped
        `total + 0` would have made a new object, nor that `total += 0` would have changed a
        tensor in place (which autograd may have saved; probeM)."""
        parents = {id(c): p for p in fastast.walk(loop) for c in ast.iter_child_nodes(p)}
        for n in fastast.walk(loop):
            if isinstance(n, ast.Name) and n.id == total and isinstance(n.ctx, ast.Load):
                up = parents.get(id(n))
                top = parents.get(id(up))
                if not (isinstance(up, ast.BinOp) and up.left is n and isinstance(up.op, (ast.Add, ast.Sub))
                        and isinstance(top, ast.Assign) and top.value is up and len(top.targets) == 1
                        and isinstance(top.targets[0], ast.Name) and top.targets[0].id == total):
                    return False
        for n in fastast.walk(loop):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef) + _COMPREHENSIONS) \
                    and any(isinstance(m, ast.Name) and m.id == total for m in fastast.walk(n)):
                return False
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == total:
                if not isinstance(n.op, (ast.Add, ast.Sub)):
                    return False
            elif isinstance(n, ast.Assign) and any(isinstance(m, ast.Name) and m.id == total
                                                   for t in n.targets for m in fastast.walk(t)):
                if not (len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.BinOp)
                        and isinstance(n.value.op, (ast.Add, ast.Sub)) and isinstance(n.value.left, ast.Name)
                        and n.value.left.id == total):
                    return False
            elif isinstance(n, ast.Name) and n.id == total and not isinstance(n.ctx, ast.Load):
                up = parents.get(id(n))
                if not (isinstance(up, ast.AugAssign) and up.target is n
                        or isinstance(up, ast.Assign) and any(t is n for t in up.targets)):
                    return False       # (a `for` target, `with .. as`, a walrus, `del`)
        return True


def _number(node):
    """The value of an int / float literal (or its negation), else None (not a bool)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def _answer(value, where):
    """The answer's constant, marked as one `_Decided` made: only those are folded (a `False` the
    user wrote stays, with the bindings and declarations under it; probeG)."""
    c = ast.copy_location(ast.Constant(value), where)
    c.av_decided = True
    return c


def _const(n) -> bool:
    return isinstance(n, ast.Constant) and type(n.value) is bool and getattr(n, "av_decided", False)


def _in_args(arg, tree) -> bool:
    """Whether `arg` is one of the function's own parameters (not a nested function's)."""
    return any(a is arg for a in fastast.walk(tree.args))


def _declared(tree) -> set:
    """The names a function declares `global` or `nonlocal` (its nested functions' too)."""
    return {name for n in fastast.walk(tree) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}


def _int_bound(node) -> bool:
    """Whether `node` is a Python int whatever the values: an int literal, `len(..)`, `x.shape[k]`,
    `x.size(k)`, `x.numel()`, or `+` / `-` / `*` / `//` of these."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _int_bound(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        return _int_bound(node.left) and _int_bound(node.right)
    if isinstance(node, ast.Call) and not node.keywords:
        f = node.func
        if isinstance(f, ast.Name) and f.id == "len" and len(node.args) == 1:
            return True
        if isinstance(f, ast.Attribute) and f.attr in ("size", "numel", "dim") and len(node.args) <= 1 and all(
                isinstance(a, ast.Constant) and type(a.value) is int for a in node.args):
            return f.attr != "size" or len(node.args) == 1
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        return isinstance(node.slice, ast.Constant) and type(node.slice.value) is int
    return False


def _offset_of(node, i) -> int | None:
    """d where `node` is `i + d` or `i - d` (d an int literal), else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)) and isinstance(node.left, ast.Name) \
            and node.left.id == i and isinstance(node.right, ast.Constant) and type(node.right.value) is int:
        return node.right.value if isinstance(node.op, ast.Add) else -node.right.value
    return None


def _index_offset(index, i) -> int:
    """s where the subscript's index holds `i + s` in one place (a tuple's entries: `t[i - 1, c]`),
    and `i` nowhere else; else 0."""
    entries = index.elts if isinstance(index, ast.Tuple) else [index]
    found = [_offset_of(e, i) for e in entries]
    hits = [d for d in found if d]
    rest = [e for e, d in zip(entries, found) if d is None]
    if len(hits) != 1 or any(isinstance(n, ast.Name) and n.id == i for e in rest for n in fastast.walk(e)):
        return 0
    return hits[0]


def _plus(node, d):
    """`node + d` as Python would write it (`n - 1`, `i`, `i + 2`)."""
    if d == 0:
        return node
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return ast.copy_location(ast.Constant(node.value + d), node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)) and isinstance(node.right, ast.Constant) \
            and type(node.right.value) is int:
        d += node.right.value if isinstance(node.op, ast.Add) else -node.right.value
        node = node.left
        if d == 0:
            return node
    return ast.BinOp(left=node, op=ast.Add() if d > 0 else ast.Sub(), right=ast.Constant(abs(d)))


def _breaks(stmts) -> bool:
    """Whether a `break` in `stmts` ends the loop they are the body of (not one of a nested loop)."""
    for st in stmts:
        for n in _own_nodes(st):
            if isinstance(n, ast.Break):
                return True
    return False


def _own_nodes(node):
    yield node
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        for st in node.orelse:
            yield from _own_nodes(st)
        return
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return
    for c in ast.iter_child_nodes(node):
        yield from _own_nodes(c)


def _uses_private_names(node: ast.AST) -> bool:
    def private(s: str) -> bool:
        return s.startswith("__") and not s.endswith("__")
    for n in fastast.walk(node):
        if isinstance(n, ast.Name) and private(n.id):
            return True
        if isinstance(n, ast.Attribute) and private(n.attr):
            return True
    return False
