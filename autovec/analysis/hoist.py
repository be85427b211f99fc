"""Source-level moves that leave what a function computes unchanged and let more loops be planned.

`for i in range(n): with torch.no_grad(): BODY` is `with torch.no_grad(): for i in range(n): BODY`:
the only steps that move under no_grad are `range`'s own integers and their binding to `i`,
which autograd never sees. The loop (its rewrite, its guard, its commit and its fallback) then
runs inside the `with`, as every iteration's body did.

`for ..: BODY else: TAIL` (or `while`) where no `break` of BODY ends this loop is `for ..: BODY`
followed by TAIL: Python runs the `else` block whenever the loop ends other than by `break`, and
a `return` or an exception skips it in both spellings. TAIL keeps its own lines, so tracebacks
point at the user's code.
"""
from __future__ import annotations

import ast

import torch

from .. import fastast
from ..codegen import all_names, bindings
from ..frontend import Captured, attr_chain
from .names import load_ids, mutated, reshaped

_NO_GRAD = (torch.no_grad, torch.autograd.grad_mode.no_grad)


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def _local_names(fn: ast.FunctionDef) -> set[str]:
    a = fn.args
    out = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    out |= {x.arg for x in (a.vararg, a.kwarg) if x}
    for n in fastast.walk(fn):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not fn:
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {al.asname or al.name.split(".")[0] for al in n.names}
    return out


def _resolves(cap: Captured, node: ast.expr, local: set[str], want) -> bool:
    parts = _dotted(node)
    if parts is None or parts[0] in local:
        return False
    found, obj = cap.lookup(parts[0])
    if not found:
        return False
    found, obj = attr_chain(obj, parts[1:])
    return found and any(obj is w for w in want)


def _no_grad_with(cap: Captured, w: ast.With, local: set[str]) -> bool:
    """`with torch.no_grad():` (the real one, no `as`, nothing else in the statement)."""
    if len(w.items) != 1 or w.items[0].optional_vars is not None:
        return False
    ctx = w.items[0].context_expr
    return isinstance(ctx, ast.Call) and not ctx.args and not ctx.keywords and _resolves(cap, ctx.func, local, _NO_GRAD)


def _hoistable(cap: Captured, loop: ast.For, local: set[str]) -> bool:
    if loop.orelse or len(loop.body) != 1 or not isinstance(loop.body[0], ast.With):
        return False
    if not _no_grad_with(cap, loop.body[0], local):
        return False
    it = loop.iter
    return (isinstance(loop.target, ast.Name) and isinstance(it, ast.Call) and not it.keywords
            and _resolves(cap, it.func, local, (range,)))


def hoist_no_grad(cap: Captured) -> int:
    """Move `with torch.no_grad():` that is the whole body of a `for .. in range(..)` loop out
    around the loop, innermost loops first; returns how many moved."""
    fn = cap.tree
    local = _local_names(fn)
    moved = 0
    loops = [n for n in fastast.walk(fn) if isinstance(n, ast.For)]
    parent = {c: p for p in fastast.walk(fn) for c in ast.iter_child_nodes(p)}
    for loop in reversed(loops):     # ast.walk is breadth-first: the innermost loops come last
        if not _hoistable(cap, loop, local):
            continue
        w = loop.body[0]
        loop.body = w.body
        while len(loop.body) == 1 and isinstance(loop.body[0], ast.With) and _no_grad_with(cap, loop.body[0], local):
            loop.body = loop.body[0].body    # an inner loop's no_grad, hoisted first: already in force here
        outer = ast.With(items=w.items, body=[loop], type_comment=None)
        ast.copy_location(outer, loop)
        outer.end_lineno, outer.end_col_offset = loop.end_lineno, loop.end_col_offset
        p = parent[loop]
        for field, value in ast.iter_fields(p):
            if isinstance(value, list) and any(v is loop for v in value):
                value[[k for k, v in enumerate(value) if v is loop][0]] = outer
                break
        parent[outer], parent[loop] = p, outer
        moved += 1
    return moved


def _breaks_out(node: ast.AST) -> bool:
    """Whether `node` holds a `break` that ends the loop around it: nested loops' own bodies
    are theirs, but their `else` blocks belong to the enclosing loop; definitions are no part."""
    if isinstance(node, ast.Break):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return False
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return any(_breaks_out(s) for s in node.orelse)
    return any(_breaks_out(c) for c in ast.iter_child_nodes(node))


def _holder(root: ast.AST, node: ast.AST):
    """(the list of statements that holds `node`, its position) under `root`."""
    for p in fastast.walk(root):
        for _, value in ast.iter_fields(p):
            if isinstance(value, list):
                for k, v in enumerate(value):
                    if v is node:
                        return value, k
    raise ValueError("statement not found")


def drop_loop_else(cap: Captured) -> int:
    """`for/while .. else:` whose body has no `break` ending that loop: the `else` block moves
    to right after the loop (innermost loops first); returns how many moved."""
    fn = cap.tree
    moved = 0
    loops = [n for n in fastast.walk(fn) if isinstance(n, (ast.For, ast.While)) and n.orelse]
    for loop in reversed(loops):     # breadth-first: an `else` inside another loop's `else` moves first
        if any(_breaks_out(s) for s in loop.body):
            continue
        stmts, k = _holder(fn, loop)
        tail, loop.orelse = loop.orelse, []
        last = loop.body[-1]
        loop.end_lineno, loop.end_col_offset = last.end_lineno, last.end_col_offset
        stmts[k + 1:k + 1] = tail
        moved += 1
    return moved


def hoisted_walrus(cap: Captured) -> int:
    """`if (n := x[i].norm()) > 1:` inside a loop as `n = x[i].norm()` then `if n > 1:` (and the
    same for an `elif`'s test, an assignment's value, an expression statement and a `return`):
    where the binding is the first thing the statement evaluates (_first_walrus), Python
    evaluates its value and binds the name before anything else of the statement, in both
    spellings, so the statement that follows reads the name where it read the binding. Only in
    the function's own loops (not in a function, class or lambda defined in it), one binding per
    statement. Returns how many moved."""
    fn = cap.tree
    parents = {id(c): p for p in fastast.walk(fn) for c in ast.iter_child_nodes(p)}
    moved = 0
    for st in list(fastast.walk(fn)):
        if not isinstance(st, (ast.If, ast.Assign, ast.Expr, ast.Return)) or _scope_depth(fn, parents, st) is None:
            continue
        if not within(fn, parents, st, (ast.For, ast.While)):
            continue
        head = st.test if isinstance(st, ast.If) else st.value
        if head is None:
            continue
        walrus, holder = _first_walrus(head)
        if walrus is None or not isinstance(walrus.target, ast.Name):
            continue
        name = ast.copy_location(ast.Name(id=walrus.target.id, ctx=ast.Load()), walrus)
        if holder is None:
            if isinstance(st, ast.If):
                st.test = name
            else:
                st.value = name
        else:
            for field, value in ast.iter_fields(holder):
                if value is walrus:
                    setattr(holder, field, name)
                elif isinstance(value, list) and any(v is walrus for v in value):
                    value[[k for k, v in enumerate(value) if v is walrus][0]] = name
        bind = ast.Assign(targets=[ast.copy_location(ast.Name(id=walrus.target.id, ctx=ast.Store()), walrus.target)],
                          value=walrus.value)
        ast.copy_location(bind, walrus)
        bind.end_lineno, bind.end_col_offset = walrus.end_lineno, walrus.end_col_offset
        stmts, k = _holder(fn, st)
        # (`(n := f(i))` as a statement of its own: the binding alone)
        stmts[k:k + (isinstance(st, ast.Expr) and holder is None)] = [bind]
        moved += 1
    return moved


def _first_walrus(e):
    """(the `name := value` that `e` evaluates before anything else, the node holding it or None
    where it is `e`), or (None, None): down the left operand of an operator or a comparison,
    the first value of `and` / `or`, the operand of a unary operator, the object of an attribute
    or a subscript, and the object of a method call. Not into a call's arguments: Python looks
    the function up first, and the binding's value may rebind it (a global, a module's
    attribute, a builtin shadowed), which it would then do before that lookup."""
    holder, node = None, e
    while True:
        if isinstance(node, ast.NamedExpr):
            return node, holder
        if isinstance(node, ast.Compare):
            nxt = node.left
        elif isinstance(node, ast.BinOp):
            nxt = node.left
        elif isinstance(node, ast.BoolOp):
            nxt = node.values[0]
        elif isinstance(node, ast.UnaryOp):
            nxt = node.operand
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            nxt = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not isinstance(
                node.func.value, ast.Name):
            nxt = node.func        # (`(n := x[i]).sum()`: the object, then its method)
        else:
            return None, None
        holder, node = node, nxt


# iterables the analysis reads as written (ranges, zips, reversed and unbound walks, lists of numbers)
_WALKED_CALLS = frozenset(("range", "zip", "enumerate", "reversed"))
_WALKED_METHODS = frozenset(("tolist", "unbind", "split", "chunk", "tensor_split"))   # (unbind.unbind_walks)


def _names(fn: ast.FunctionDef) -> set[str]:
    """Every name `fn` reads, binds, declares or takes as a parameter, in any form (where a new
    name must not fall: an `except .. as`, a `match` capture or a `def` in the loop would
    rebind it)."""
    return all_names(fn)


def _fresh_name(base: str, node: ast.AST, taken: set) -> str:
    """`base`, or with `node`'s line (and column, then a count) where taken; added to `taken`."""
    for name in (base, f"{base}_{node.lineno}", f"{base}_{node.lineno}_{node.col_offset}"):
        if name not in taken:
            break
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def within(fn: ast.FunctionDef, parents: dict, node: ast.AST, kinds) -> bool:
    """Whether a node of one of `kinds` encloses `node` inside `fn` (`parents`: id -> parent)."""
    p = parents.get(id(node))
    while p is not None and p is not fn:
        if isinstance(p, kinds):
            return True
        p = parents.get(id(p))
    return False


def _scope_depth(fn: ast.FunctionDef, parents: dict, node: ast.AST) -> int | None:
    """How deep `node` lies in `fn`, or None inside a function, class or lambda defined in it
    (whose loops and returns are its own)."""
    d, p = 0, parents.get(id(node))
    while p is not None:
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) and p is not fn:
            return None
        d, p = d + 1, parents.get(id(p))
    return d


def named_iterables(cap: Captured) -> int:
    """`for i in torch.arange(n):` (a loop over what a call returns, other than a range, zip,
    enumerate, reversed, `.tolist()` or `.unbind()`) as `i_values = torch.arange(n)` right
    before the loop, then `for i in i_values:`: Python evaluates the iterable once, right
    before the loop's first step, in both spellings (a call that draws random numbers draws
    them once, at the same point), and the planner walks a name's tensor or list. Only a
    loop's own `iter` of the function itself (not of a function or class defined inside);
    the name is the function's own (`<target>_values`, or with the loop's line where taken).
    Only a function of torch's own namespace (`torch.arange`, `torch.randperm`,
    `torch.nonzero`): another call may return a file or a generator, which a name would keep
    open or alive past the loop. Returns how many loops changed."""
    fn = cap.tree
    local = _local_names(fn)
    parents = {id(c): p for p in fastast.walk(fn) for c in ast.iter_child_nodes(p)}
    taken = _names(fn)
    changed = 0
    for loop in [n for n in fastast.walk(fn) if isinstance(n, ast.For)]:
        if _scope_depth(fn, parents, loop) is None:
            continue
        call = loop.iter
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "zip" \
                and not call.keywords and isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == len(call.args) \
                and all(isinstance(e, ast.Name) for e in loop.target.elts) and _builtins_ok(cap, local, ("zip",)):
            # (`for t, m in zip(x.t(), mean)`: each argument as the loop's own iterable would be;
            # zip's arguments are evaluated in order, once, before its first step: an argument is
            # named only where every one before it is a name or named too, so that none runs
            # before one written ahead of it, `zip(bump(x), x.clone())`; probeJ)
            names = []
            for k, (e, a) in enumerate(zip(loop.target.elts, call.args)):
                if _nameable(cap, local, a, e.id, loop, nested=_in_loop(fn, parents, loop)):
                    name = _fresh_name(f"{e.id}_values", loop, taken)
                    call.args[k] = _named_before(fn, loop, name, a)
                    names.append(name)
                    changed += 1
                elif not isinstance(a, ast.Name):
                    break
            _deleted_after(fn, loop, names)
            continue
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("enumerate", "reversed") \
                and call.args and not call.keywords and _builtins_ok(cap, local, (call.func.id,)):
            # (`for j, col in enumerate(x.t())`, `for row in reversed(x.view(-1, 4))`)
            t = loop.target
            element = t.id if isinstance(t, ast.Name) and call.func.id == "reversed" else \
                t.elts[1].id if call.func.id == "enumerate" and isinstance(t, ast.Tuple) and len(t.elts) == 2 \
                and isinstance(t.elts[1], ast.Name) else None
            if _nameable(cap, local, call.args[0], element, loop, nested=_in_loop(fn, parents, loop)):
                name = _fresh_name(f"{element or 'loop'}_values", loop, taken)
                call.args[0] = _named_before(fn, loop, name, call.args[0])
                _deleted_after(fn, loop, [name])
                changed += 1
            continue
        target = loop.target.id if isinstance(loop.target, ast.Name) else None
        if not _nameable(cap, local, call, target, loop, nested=_in_loop(fn, parents, loop)):
            continue
        name = _fresh_name(f"{target}_values" if target else "loop_values", loop, taken)
        loop.iter = _named_before(fn, loop, name, call)
        if not (isinstance(call, ast.Call) and not _receiver_chain(call)):
            _deleted_after(fn, loop, [name])   # (a torch function's tensor stays named, as before)
        changed += 1
    return changed


def _in_loop(fn, parents, node) -> bool:
    """Whether `node` lies inside a loop of `fn`."""
    p = parents.get(id(node))
    while p is not None and p is not fn:
        if isinstance(p, (ast.For, ast.While, ast.AsyncFor)):
            return True
        p = parents.get(id(p))
    return False


def _deleted_after(fn, loop, names):
    """`del a, b` right after `loop`: the named iterables let go where the loop would let go of
    them (a generator's `finally` runs there, a copy is freed there; probeJ)."""
    if not names:
        return
    holder, at = _holder(fn, loop)
    d = ast.copy_location(ast.Delete(targets=[ast.copy_location(ast.Name(id=n, ctx=ast.Del()), loop) for n in names]),
                          loop)
    d.lineno = d.end_lineno = getattr(loop, "end_lineno", loop.lineno)
    ast.fix_missing_locations(d)
    holder.insert(at + 1, d)


_VIEW_ATTRS = frozenset(("T", "mT", "H", "mH"))


def _nameable(cap: Captured, local: set, e: ast.expr, element: str | None, loop: ast.For, nested=False) -> bool:
    """Whether the iterable `e` may be bound to a name right before the loop (named_iterables):
    a call of a function of torch's own namespace, a chain of tensor methods on a name
    (`x.t()`, `x.view(-1, 4)`: _receiver_chain, not `flip`, which the planner walks as it is),
    or, where the body updates its `element` in place (`for col in x.T: col -= col.mean()`:
    element_views takes a named tensor only), a view of a name (`x.T`, `x[1:]`)."""
    if any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await, ast.Lambda)) for n in fastast.walk(e)):
        return False
    if isinstance(e, ast.Call):
        f = e.func
        if _receiver_chain(e) and isinstance(f, ast.Attribute) and f.attr != "flip":
            return not nested      # (inside another loop its `del` would keep that loop as written)
        parts = _dotted(f)
        return not (parts is None or parts[-1] in _WALKED_CALLS or parts[-1] in _WALKED_METHODS
                    or not callable(getattr(torch, parts[-1], None))
                    or not _resolves(cap, f, local, (getattr(torch, parts[-1]),)))
    if element is None or not any(_updates(st, element) for st in loop.body):
        return False
    if isinstance(e, ast.Attribute):
        return e.attr in _VIEW_ATTRS and _dotted(e.value) is not None
    return isinstance(e, ast.Subscript) and _dotted(e.value) is not None and not any(
        isinstance(n, ast.Call) for n in fastast.walk(e.slice))


def _named_before(fn: ast.FunctionDef, loop: ast.For, name: str, value: ast.expr) -> ast.Name:
    """`name = value` right before `loop` (at the value's lines, for tracebacks); returns the
    read of `name` to put where the value stood."""
    holder, at = _holder(fn, loop)
    bind = ast.copy_location(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value), value)
    ast.fix_missing_locations(bind)
    bind.end_lineno, bind.end_col_offset = value.end_lineno, value.end_col_offset
    holder[at:at] = [bind]
    return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), value)


# tensor methods a walked receiver may be made of (`edge_index.t().tolist()`): on a tensor each
# runs torch's own code and returns a tensor, evaluated once wherever it is written
_CHAIN_METHODS = frozenset(("t", "transpose", "permute", "contiguous", "cpu", "long", "int", "float", "double",
                            "detach", "reshape", "view", "flatten", "squeeze", "unsqueeze", "clone", "to", "flip"))


def _receiver_chain(e: ast.expr) -> bool:
    """`x.t()`, `x.long().t()`, `self.edges.transpose(0, 1)`: calls of _CHAIN_METHODS, each with
    constant or name arguments, on a name or a name's attributes."""
    calls = 0
    while isinstance(e, ast.Call):
        f = e.func
        if not (isinstance(f, ast.Attribute) and f.attr in _CHAIN_METHODS) or any(k.arg is None for k in e.keywords):
            return False
        for a in list(e.args) + [k.value for k in e.keywords]:
            if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub):
                a = a.operand
            if not isinstance(a, (ast.Constant, ast.Name)):
                return False
        e = f.value
        calls += 1
    return calls > 0 and _dotted(e) is not None


def named_receivers(cap: Captured) -> int:
    """`for s, d in edge_index.t().tolist():` (a walked method, `.tolist()` / `.unbind()` /
    `.split()` .., of a chain of tensor methods: _receiver_chain) as `edge_index_t =
    edge_index.t()` right before the loop, then `for s, d in edge_index_t.tolist():`. Python
    evaluates the receiver once, first of the loop's header, before its first step, in both
    spellings. Not under `enumerate(..)` / `zip(..)`: there Python looks up the function and
    reads the sequences before it first (probeY: an unbound name read first raised its own
    error, and a receiver's method that rebinds a global the header reads changed what it
    read). The planner walks a name's rows. Only loops of the function itself; the name is the
    function's own (`<name>_<method>`, or with the loop's line where taken). Returns how many
    moved."""
    fn = cap.tree
    taken = _names(fn)
    moved = 0
    for loop in _own_loops_innermost_first(fn):
        call = loop.iter if isinstance(loop, ast.For) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in _WALKED_METHODS and _receiver_chain(call.func.value)):
            continue
        receiver = call.func.value
        base = _dotted(_chain_base(receiver))
        name = _fresh_name(f"{base[-1]}_{receiver.func.attr}", loop, taken)
        call.func.value = _named_before(fn, loop, name, receiver)
        moved += 1
    return moved


def _chain_base(e: ast.expr) -> ast.expr:
    while isinstance(e, ast.Call):
        e = e.func.value
    return e


def _own_loops_innermost_first(fn: ast.FunctionDef) -> list:
    """The `for` / `while` loops of the function itself (not of a function, class or lambda
    defined in it), the most deeply nested first, then in the order ast.walk meets them."""
    parents = {id(c): p for p in fastast.walk(fn) for c in ast.iter_child_nodes(p)}
    loops = [(_scope_depth(fn, parents, n), k, n) for k, n in enumerate(fastast.walk(fn))
             if isinstance(n, (ast.For, ast.While))]
    return [loop for _, _, loop in sorted((t for t in loops if t[0] is not None), key=lambda t: (-t[0], t[1]))]


def _exits(stmts: list, kind) -> tuple[list, list]:
    """([(the statement list holding it, its position)] of each `kind` statement (`ast.Return`,
    `ast.Break`) reached from `stmts` through `if` / `else` blocks, [the statements that hold
    a `break` of the loop elsewhere: in a `with`, a `try`, a nested loop's `else`] (for
    `ast.Break` only))."""
    found, elsewhere = [], []

    def collect(block):
        for k, st in enumerate(block):
            if isinstance(st, kind):
                found.append((block, k))
            elif isinstance(st, ast.If):
                collect(st.body)
                collect(st.orelse)
            elif kind is ast.Break and _breaks_out(st):
                elsewhere.append(st)
    collect(stmts)
    return found, elsewhere


def returns_as_breaks(cap: Captured) -> int:
    """`return v` inside a loop, reached from the loop's body through `if` / `else` blocks only,
    as `returned = v; returning = True; break`, with `returning = False` before the loop and
    `if returning: return returned` right after it (innermost loops first): Python evaluates
    `v`, leaves the loop (skipping its `else`, as `break` does), and returns that value before
    any statement after the loop runs, in both spellings; a `finally` or a `with` around the
    loop runs after the return in both. The planner takes a loop that ends early by `break`
    (`for i ..: if x[i].sum() > t: return i`, a first match). The names are the function's own
    (`returned`, `returning`, or with the loop's line where those are taken); the new
    statements keep the lines of the `return` and the loop, for tracebacks. Returns how many
    loops changed."""
    fn = cap.tree
    taken = _names(fn)
    changed = 0
    for loop in _own_loops_innermost_first(fn):
        found, _ = _exits(loop.body, ast.Return)
        if not found:
            continue
        value, flag = _fresh_name("returned", loop, taken), _fresh_name("returning", loop, taken)
        for stmts, k in reversed(found):
            ret = stmts[k]
            new = [ast.Assign(targets=[ast.Name(id=value, ctx=ast.Store())],
                              value=ret.value if ret.value is not None else ast.Constant(None)),
                   ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())], value=ast.Constant(True)),
                   ast.Break()]
            for st in new:
                ast.copy_location(st, ret)
                ast.fix_missing_locations(st)
            stmts[k:k + 1] = new
        first = found[0][0][found[0][1]]
        holder, at = _holder(fn, loop)
        init = ast.copy_location(ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())], value=ast.Constant(False)),
                                 loop)
        after = ast.copy_location(ast.If(test=ast.Name(id=flag, ctx=ast.Load()), body=[ast.copy_location(
            ast.Return(value=ast.Name(id=value, ctx=ast.Load())), first)], orelse=[]), first)
        for st in (init, after):
            ast.fix_missing_locations(st)
            st.end_lineno, st.end_col_offset = st.lineno, st.col_offset
        holder[at:at + 1] = [init, loop, after]
        changed += 1
    return changed


def else_as_flag(cap: Captured) -> int:
    """`for/while .. else:` whose body ends the loop by `break`, reached from the body through
    `if` / `else` blocks only: `broke = True` right before each such `break`, `broke = False`
    before the loop, and the `else` block right after it as `if not broke:` (innermost loops
    first). Python runs a loop's `else` exactly when the loop ends other than by `break`,
    which is when no `break` set the flag; an exception or a `return` leaves both spellings
    before the block. The planner takes loops ending by `break` (a search that falls back to a
    default in its `else`). Run after returns_as_breaks, whose breaks end the loop as a return
    does (skipping its `else`), so that they set the flag too. A `break` anywhere else (in a
    `with` or a `try`, in a nested loop's `else` left as written) keeps the loop as written.
    Returns how many loops changed."""
    fn = cap.tree
    taken = _names(fn)
    changed = 0
    for loop in _own_loops_innermost_first(fn):
        if not loop.orelse:
            continue
        found, elsewhere = _exits(loop.body, ast.Break)
        if not found or elsewhere:
            continue
        flag = _fresh_name("broke", loop, taken)
        for stmts, k in reversed(found):
            brk = stmts[k]
            st = ast.copy_location(ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())], value=ast.Constant(True)),
                                   brk)
            ast.fix_missing_locations(st)
            stmts[k:k] = [st]
        holder, at = _holder(fn, loop)
        init = ast.copy_location(ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())], value=ast.Constant(False)),
                                 loop)
        first = loop.orelse[0]
        tail = ast.copy_location(ast.If(test=ast.UnaryOp(op=ast.Not(), operand=ast.Name(id=flag, ctx=ast.Load())),
                                        body=loop.orelse, orelse=[]), first)
        for st in (init, tail):
            ast.fix_missing_locations(st)
        init.end_lineno, init.end_col_offset = init.lineno, init.col_offset
        tail.end_lineno, tail.end_col_offset = loop.orelse[-1].end_lineno, loop.orelse[-1].end_col_offset
        loop.orelse = []
        last = loop.body[-1]
        loop.end_lineno, loop.end_col_offset = last.end_lineno, last.end_col_offset
        holder[at:at + 1] = [init, loop, tail]
        changed += 1
    return changed


def _one_store(branch: list):
    """The single `target[..] = value` statement `branch` is, as (target, value); where it is a
    single `if`/`else` (an `elif` chain) whose branches are each one such store to one same
    target, that store with the chain as conditional expressions (`a if c else b`); else None."""
    if len(branch) != 1:
        return None
    s = branch[0]
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript):
        return s.targets[0], s.value
    if isinstance(s, ast.If):
        a, b = _one_store(s.body), _one_store(s.orelse)
        if a is not None and b is not None and _same_target(a[0], b[0]):
            value = ast.copy_location(ast.IfExp(test=s.test, body=a[1], orelse=b[1]), s)
            value.end_lineno, value.end_col_offset = s.end_lineno, s.end_col_offset
            return a[0], value
    return None


def _same_target(a: ast.expr, b: ast.expr) -> bool:
    return ast.dump(a, include_attributes=False) == ast.dump(b, include_attributes=False)


def merged_branch_stores(cap: Captured) -> int:
    """`if c: out[k] = a` / `else: out[k] = b` (each branch that one store, to one same
    subscript; an `elif` chain of such branches too), inside a loop, as `out[k] = a if c else b`:
    the same steps in the same order (`c`, then `a` or `b`, then the target's subscript), one
    store the planner takes. Returns how many `if`s were merged."""
    merged = 0
    loops = [n for n in fastast.walk(cap.tree) if isinstance(n, (ast.For, ast.While))]
    seen = set()
    for loop in loops:
        for node in fastast.walk(loop):
            if not isinstance(node, ast.If) or id(node) in seen or not node.orelse:
                continue
            found = _one_store([node])
            if found is None:
                continue
            for inner in fastast.walk(node):
                seen.add(id(inner))
            target, value = found
            store = ast.copy_location(ast.Assign(targets=[target], value=value), node)
            store.end_lineno, store.end_col_offset = node.end_lineno, node.end_col_offset
            stmts, k = _holder(cap.tree, node)
            stmts[k] = store
            merged += 1
    return merged


def _signed_literal(e) -> ast.Constant | None:
    """The number literal of `K` or `-K` (an int or a float, not a bool), else None; not the
    int of `-0` (0, where `-0.0` is not: `-0.0 + -0` is 0.0, `-0.0 + -0.0` is -0.0)."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        if isinstance(e.op, ast.USub) and isinstance(e.operand, ast.Constant) and type(e.operand.value) is int \
                and e.operand.value == 0:
            return None
        e = e.operand
    return e if isinstance(e, ast.Constant) and type(e.value) in (int, float) else None


def _own_scope(node: ast.AST):
    """The nodes under `node`, not descending into a function, class or lambda defined there
    (yielded, not walked)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if n is node or not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(n))


def _literal_update(st: ast.stmt, name: str) -> ast.Constant | None:
    """The literal K of `name += K`, `name -= K`, `name = name + K`, `name = name - K` or
    `name = K + name`, else None."""
    if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name) and st.target.id == name \
            and isinstance(st.op, (ast.Add, ast.Sub)):
        return _signed_literal(st.value)
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
            and st.targets[0].id == name and isinstance(st.value, ast.BinOp) \
            and isinstance(st.value.op, (ast.Add, ast.Sub)):
        left, right = st.value.left, st.value.right
        if isinstance(left, ast.Name) and left.id == name:
            return _signed_literal(right)
        if isinstance(st.value.op, ast.Add) and isinstance(right, ast.Name) and right.id == name:
            return _signed_literal(left)
    return None


def float_totals(cap: Captured) -> int:
    """A total that starts as a float literal right before a loop (`c = 0.0`, no statement
    between binding it) and that the loop only updates by number literals, ints beside floats
    (`if p > q: c += 1` / `elif p == q: c += 0.5`, an AUC with ties): `c` is a float at every
    step, and a float plus an int K is the float plus float(K), so each int literal is written
    as that float (`c += 1.0`), exactly, and the branches give values of one type. Not for a
    name declared `global` / `nonlocal` anywhere in the function (another scope could rebind
    it), bound otherwise in the loop or in a class or function defined there, nor for ints past
    2**53. Returns how many literals changed."""
    fn = cap.tree
    declared = {name for name, node in bindings(fn) if isinstance(node, (ast.Global, ast.Nonlocal))}
    changed = 0
    for loop in _own_loops_innermost_first(fn):
        holder, at = _holder(fn, loop)
        # every binding of a name in the loop, its own target and those in a class or function
        # defined in it included: each must be the target of one such update in the loop's own
        # scope (not a walrus, an `except .. as`, a `def`, a `global` / `nonlocal` declaration)
        bound: dict = {}
        for name, node in bindings(loop):
            bound.setdefault(name, []).append(node)
        updates = [st for st in _own_scope(loop) if isinstance(st, (ast.AugAssign, ast.Assign))]
        for name, nodes in sorted(bound.items()):
            if name in declared:
                continue
            lits = {}
            for st in updates:
                k = _literal_update(st, name)
                if k is not None:
                    lits[id(st.target if isinstance(st, ast.AugAssign) else st.targets[0])] = k
            ints = [k for k in lits.values() if type(k.value) is int]
            if any(id(n) not in lits for n in nodes) or not ints or len(ints) == len(lits) \
                    or any(abs(k.value) >= 2 ** 53 for k in ints):
                continue
            # (the last statement before the loop, in its block, that binds `name`)
            start = next((st for st in reversed(holder[:at]) if name in all_names(st, loads=False)), None)
            first = _signed_literal(start.value) if isinstance(start, ast.Assign) and len(start.targets) == 1 \
                and isinstance(start.targets[0], ast.Name) else None
            if first is None or type(first.value) is not float:
                continue
            for k in ints:
                k.value = float(k.value)
                changed += 1
    return changed


def rectangular_nests(cap: Captured) -> list:
    """`for i in range(a, b): for j in range(i + c, d): BODY` (or an upper bound `i + c`): the
    inner range depends on the outer index, a triangle. The same iterations, in the same order,
    are those of the rectangle `for j in range(a + c, d)` (or up to `b - 1 + c`) where BODY runs
    under `if i + c <= j:` (`if j < i + c:`): the other iterations do nothing. The loop nest
    planner takes rectangles, with the condition as a mask. Only where that is exact: bounds
    that are pure, read no name the nest assigns, a step of 1, `j` read nowhere else, no `else`.
    Returns [(the rewritten outer loop, the original one)]: the original stays the fallback (it
    does less work), and goes back into the tree where the nest is not vectorized (api)."""
    from .loops import _pure_expr, bound_moves    # (loops imports this module's package)

    local = _local_names(cap.tree)
    out = []
    for outer in [n for n in fastast.walk(cap.tree) if isinstance(n, ast.For)]:
        nest = range_nest(outer, cap, local)
        if nest is None:
            continue
        inner, i, j, (start, stop), (lo, hi) = nest
        lo_c, hi_c = _index_offset(lo, i), _index_offset(hi, i)
        uses_i = [_reads(e, i) for e in (lo, hi)]
        if not any(uses_i) or (uses_i[0] and lo_c is None) or (uses_i[1] and hi_c is None):
            continue
        bounds = [b for b in (start, stop, lo, hi) if b is not None]
        changed, shapes = mutated(outer) - {i}, reshaped(outer) - {i}   # (`L.append`, `x[i] = ..`)
        if not all(_pure_expr(b) for b in bounds) or any(bound_moves(b, changed, shapes) for b in bounds):
            continue
        if any(isinstance(n, ast.Name) and n.id == j for n in fastast.walk(cap.tree)
               if not any(n is m for m in fastast.walk(inner))):
            continue   # `j` read after the nest: its last value would be the rectangle's
        if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)) for n in fastast.walk(inner)):
            continue
        first = start if start is not None else ast.Constant(0)
        conds = []
        new_lo, new_hi = lo, hi
        if uses_i[0]:        # lo = i + c: the rectangle starts at the first i's, `i + c <= j` masks
            new_lo = _shifted(first, lo_c)
            conds.append(ast.Compare(left=fastast.clone(lo), ops=[ast.LtE()], comparators=[ast.Name(j, ast.Load())]))
        if uses_i[1]:        # hi = i + c: up to the last i's, `j < i + c` masks
            new_hi = _shifted(ast.BinOp(left=fastast.clone(stop), op=ast.Sub(), right=ast.Constant(1)), hi_c)
            conds.append(ast.Compare(left=ast.Name(j, ast.Load()), ops=[ast.Lt()], comparators=[fastast.clone(hi)]))
        test = conds[0] if len(conds) == 1 else ast.BoolOp(op=ast.And(), values=conds)
        original = fastast.clone(outer)
        inner._av_original = original.body[0]     # (explain shows the inner loop as written too)
        guarded = ast.If(test=test, body=inner.body, orelse=[])
        args = [new_lo if new_lo is not None else ast.Constant(0), new_hi]
        inner.iter = ast.Call(func=ast.Name("range", ast.Load()), args=args, keywords=[])
        inner.body = [guarded]
        for n in fastast.walk(guarded.test):
            ast.copy_location(n, inner)
        ast.copy_location(guarded, inner)
        guarded.end_lineno = inner.end_lineno
        for n in fastast.walk(inner.iter):
            ast.copy_location(n, inner)
        outer._av_original = original
        out.append((outer, original))
    return out


def range_nest(outer: ast.For, cap: Captured, local: set[str]):
    """(inner loop, i, j, outer bounds, inner bounds) of `for i in range(..): for j in range(..):`,
    the inner loop the outer one's whole body, neither with an `else`, two names, steps of 1
    (bounds as _range_bounds gives them); else None."""
    inner = outer.body[0] if len(outer.body) == 1 else None
    if not (isinstance(inner, ast.For) and not outer.orelse and not inner.orelse
            and isinstance(outer.target, ast.Name) and isinstance(inner.target, ast.Name)):
        return None
    i, j = outer.target.id, inner.target.id
    ob, ib = _range_bounds(outer.iter, cap, local), _range_bounds(inner.iter, cap, local)
    if ob is None or ib is None or i == j:
        return None
    return inner, i, j, ob, ib


def _range_bounds(it, cap: Captured, local: set[str]):
    """(start or None, stop) of `range(stop)` / `range(start, stop)` / `range(start, stop, 1)`."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and "range" not in local and not it.keywords and 1 <= len(it.args) <= 3
            and not any(isinstance(a, ast.Starred) for a in it.args)):
        return None
    found, obj = cap.lookup("range")
    if not (found and obj is range):
        return None
    if len(it.args) == 3 and not (isinstance(it.args[2], ast.Constant) and it.args[2].value == 1):
        return None
    return (None, it.args[0]) if len(it.args) == 1 else (it.args[0], it.args[1])


def _reads(e, name: str) -> bool:
    return e is not None and name in load_ids(e)


def _index_offset(e, i: str):
    """c when `e` is `i`, `i + c`, `c + i` or `i - c` with `c` free of `i` (as an expression), else None."""
    if e is None:
        return None
    if isinstance(e, ast.Name) and e.id == i:
        return ast.Constant(0)
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
        if isinstance(e.left, ast.Name) and e.left.id == i and not _reads(e.right, i):
            return e.right if isinstance(e.op, ast.Add) else ast.UnaryOp(op=ast.USub(), operand=e.right)
        if isinstance(e.op, ast.Add) and isinstance(e.right, ast.Name) and e.right.id == i and not _reads(e.left, i):
            return e.left
    return None


def _shifted(base, c):
    if isinstance(c, ast.Constant) and c.value == 0:
        return fastast.clone(base)
    return ast.BinOp(left=fastast.clone(base), op=ast.Add(), right=fastast.clone(c))


def _builtins_ok(cap: Captured, local: set, names) -> bool:
    """Whether each of `names` is the builtin of that name for the function (no local of it)."""
    import builtins
    for name in names:
        found, obj = cap.lookup(name)
        if name in local or not found or obj is not getattr(builtins, name):
            return False
    return True


def element_views(cap: Captured) -> list:
    """`for row in x: row -= row.mean()` (or `row.mul_(2).clamp_(-1, 1)`): in-place updates of
    the loop's element, which is a view of x's row when x is a tensor. Planned as
    `for k in range(len(x)): x[k] -= x[k].mean()`, the same iterations on the same rows, whose
    stores the planner takes; `for t, m in zip(x, mean): t.sub_(m)` as `x[k].sub_(mean[k])` over
    `range(min(len(x), len(mean)))`. Under autograd the loop's rows are unbind's views, which
    in-place methods raise on: the runtime runs the loop there (FunctionRuntime.element_views).
    The loop as written stays the fallback (`_av_original`): for a list, a generator or anything
    else the rewrite's guard refuses, it runs as written, and where the rewritten loop is not
    vectorized it goes back into the tree (api). Only where that is exact: the iterable a plain
    name the loop never assigns, the element updated in place at the top level of the body and
    bound nowhere else, read nowhere outside the loop, `range` and `len` (and for `zip`, `zip`
    and `min`: zip stops at the shortest; its elements are what indexing gives for a tensor, a
    list or a tuple, and anything else the guard refuses) the builtins, which every call checks
    again (api._assumptions), no `else`, no nested scopes or generators in the body. Returns
    [(the rewritten loop, the original one)]."""
    local = _local_names(cap.tree)
    out = []
    for loop in [n for n in fastast.walk(cap.tree) if isinstance(n, ast.For)]:
        if loop.orelse:
            continue
        counter = None      # `i` of `for i, row in enumerate(x)`: the index itself
        if isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Name):
            pairs = [(loop.target.id, loop.iter.id)]
        elif isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == 2 \
                and all(isinstance(e, ast.Name) for e in loop.target.elts) and isinstance(loop.iter, ast.Call) \
                and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "enumerate" \
                and not loop.iter.keywords and len(loop.iter.args) == 1 and isinstance(loop.iter.args[0], ast.Name):
            # (enumerate from 0 gives the row's own index: `for i in range(len(x))` with x[i]; probeI)
            counter = loop.target.elts[0].id
            pairs = [(loop.target.elts[1].id, loop.iter.args[0].id)]
        elif isinstance(loop.target, ast.Tuple) and isinstance(loop.iter, ast.Call) \
                and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "zip" and not loop.iter.keywords \
                and len(loop.iter.args) == len(loop.target.elts) >= 2 \
                and all(isinstance(e, ast.Name) for e in loop.target.elts + loop.iter.args):
            pairs = [(e.id, a.id) for e, a in zip(loop.target.elts, loop.iter.args)]
        else:
            continue
        rows = [row for row, _ in pairs]
        sources = {x for _, x in pairs}
        if len(set(rows)) != len(rows) or sources & set(rows) or counter in set(rows) | sources:
            continue
        updated = {row for row in rows if any(_updates(st, row) for st in loop.body)}
        needed = ("range", "len") if len(pairs) == 1 else ("range", "len", "zip", "min")
        if not updated or not _builtins_ok(cap, local, needed + (("enumerate",) if counter else ())):
            continue
        inside = {id(n) for n in fastast.walk(loop)}
        if any(isinstance(n, ast.Name) and n.id in rows and id(n) not in inside for n in fastast.walk(cap.tree)):
            continue     # (an element read before or after the loop: the rewrite would not bind it)
        stores = [n for st in loop.body for n in fastast.walk(st) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)]
        allowed = {id(st.target) for st in loop.body if isinstance(st, ast.AugAssign)
                   and isinstance(st.target, ast.Name) and st.target.id in updated}
        if any(n.id in sources or n.id == counter or n.id in rows and id(n) not in allowed for n in stores):
            continue
        if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Global,
                              ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr, ast.comprehension))
               for st in loop.body for n in fastast.walk(st)):
            continue
        k = counter or f"{rows[0]}_index{loop.lineno}_{loop.col_offset}"    # (not `_av_`: reserved for user code's check)
        if k in local and not counter:
            continue
        original = fastast.clone(loop)
        for row, x in pairs:
            loop.body = [_RowToIndex(row, x, k).visit(st) for st in loop.body]
        loop.target = ast.copy_location(ast.Name(k, ast.Store()), loop.target)
        lengths = [ast.Call(func=ast.Name("len", ast.Load()), args=[ast.Name(x, ast.Load())], keywords=[])
                   for _, x in pairs]
        bound = lengths[0] if len(lengths) == 1 else ast.Call(func=ast.Name("min", ast.Load()), args=lengths,
                                                              keywords=[])
        loop.iter = ast.copy_location(ast.Call(func=ast.Name("range", ast.Load()), args=[bound], keywords=[]),
                                      loop.iter)
        for n in fastast.walk(loop.iter):
            ast.copy_location(n, original.iter)
        loop._av_original = original
        out.append((loop, original))
    return out


def _updates(st, row: str) -> bool:
    """`row op= e`, or a statement that is a chain of in-place methods on `row` (`row.sub_(m)`,
    `row.mul_(2).clamp_(-1, 1)`), or either on a part of it at fixed positions (`box[0::2].
    clamp_(0, w)`, `row[0] -= 1`: _fixed_part)."""
    if isinstance(st, ast.AugAssign):
        return _is_row(st.target, row)
    if not isinstance(st, ast.Expr):
        return False
    node = st.value
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_") \
            and not node.func.attr.startswith("_"):
        node = node.func.value
    return node is not st.value and _is_row(node, row)


def _is_row(node, row: str) -> bool:
    """`row` itself, or a part of it at fixed positions (`row[0]`, `row[1:3]`, `row[0::2]`)."""
    if isinstance(node, ast.Subscript) and _fixed_part(node.slice):
        node = node.value
    return isinstance(node, ast.Name) and node.id == row


def _fixed_part(sl) -> bool:
    """An index of constant ints and slices of them (`0`, `-1`, `1:3`, `0::2`, `0, 1:`): the same
    positions of every row, so `x[k][sl]` of a tensor is `x[k, sl]`."""
    def const(e):
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            e = e.operand
        return isinstance(e, ast.Constant) and type(e.value) is int
    parts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
    return bool(parts) and all(const(p) or isinstance(p, ast.Slice) and all(
        q is None or const(q) for q in (p.lower, p.upper, p.step)) for p in parts)


class _RowToIndex(ast.NodeTransformer):
    """Every read of the element `row` as `x[k]`, and its augmented assignments as `x[k] op= e`."""

    def __init__(self, row, x, k):
        self.row, self.x, self.k = row, x, k

    def _sub(self, node, ctx):
        return ast.copy_location(ast.Subscript(value=ast.copy_location(ast.Name(self.x, ast.Load()), node),
                                               slice=ast.copy_location(ast.Name(self.k, ast.Load()), node), ctx=ctx),
                                 node)

    def visit_Name(self, node):
        if node.id == self.row:
            return self._sub(node, node.ctx if isinstance(node.ctx, ast.Load) else ast.Store())
        return node

    def visit_Subscript(self, node):
        # `row[0::2]` as `x[k, 0::2]`: the same view of a tensor's row (a list's row raises there,
        # and the loop as written runs)
        if isinstance(node.value, ast.Name) and node.value.id == self.row and _fixed_part(node.slice):
            parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            index = ast.copy_location(ast.Tuple([ast.copy_location(ast.Name(self.k, ast.Load()), node), *parts],
                                                ast.Load()), node)
            return ast.copy_location(ast.Subscript(value=ast.copy_location(ast.Name(self.x, ast.Load()), node),
                                                   slice=index, ctx=node.ctx), node)
        return self.generic_visit(node)


def stored_recurrences(cap: Captured) -> list:
    """`out[t] = a * x[t] + (1 - a) * out[t - 1]` over `range(..)` (or `out[t] = .. out[t + 1]`
    over `reversed(range(..))` / a step of -1): each step reads the row the step before stored.
    Planned as the running-value form the scan strategy takes,

        out_prev = a * x[t] + (1 - a) * out_prev
        out[t] = out_prev

    with `out_prev` starting as the row the first iteration reads (`out[start - 1]`), which the
    lowering takes from `out` itself, only when the vectorized path runs (runtime Token.carried_start:
    never for an empty range, and a read out of range keeps the loop, which raises where it
    raised). The loop carries what was stored, the value converted to the output's dtype and
    broadcast to its row: the two forms agree where the stored value already is a tensor of that
    dtype and shape, which the lowering checks on the running values (Token.carried_like), else
    the loop runs. Only where that is exact: the store at the top level of the body, `t + k` (an
    int k) at one position of the index with full slices before it, the reads at `t + k - step`
    with the same slices and all inside the stored value; besides them the value may read the
    stored row itself as a term of a sum (`x[t] = x[t] + a * x[t - 1]`, the input's own value,
    read as a copy: _copied), and the store may be `x[t] += v` / `-=` (as `x[t] = x[t] + v`,
    the prefix sum excepted: _prefix_form); `out` appears nowhere else in the body and is never rebound; no `break`, `continue`, nested loop, scope or generator; `t` not
    assigned; a step of 1 or -1. The loop's attribute `_av_carried` tells the analysis (plan.carried),
    `_av_original` holds the loop as written: the fallback, and what api puts back where the
    rewritten loop is not planned as a scan of that running value.
    Returns [(the rewritten loop, the original one)]."""
    local = _local_names(cap.tree)
    taken = local | _names(cap.tree)
    out = []
    for loop in [n for n in fastast.walk(cap.tree) if isinstance(n, ast.For)]:
        found = _stored_recurrence(cap, loop, local)
        if not found:
            continue
        carries = []
        for _, (name, *_), _ in found:
            carry = next((c for c in (f"{name}_prev", f"{name}_prev{loop.lineno}") if c not in taken), None)
            if carry is None or carry.startswith("_av_"):
                break
            carries.append(carry)
        if len(carries) != len(found):
            continue
        taken.update(carries)
        original = fastast.clone(loop)
        carried = []
        for k_store, _, assign in found:
            if assign is not None:
                loop.body[k_store] = assign     # (`x[t] += v` as `x[t] = x[t] + v`)
        stores = [loop.body[k_store] for k_store, _, _ in found]
        for store, carry, (_, (name, d, k, step, first), _) in zip(stores, carries, found):
            # (each store's own running value; several in one loop are independent of each other:
            # each output is read nowhere else in the body)
            # (the stored row's own reads, `x[t] = x[t] + a * x[t - 1]`, as new memory: the value
            # the loop reads there is the input's, before any store, and a copy keeps it so
            # while the batch reads every row first)
            own = _RowReads(name, d, loop.target.id, k, _copied).visit(store.value)
            value = _RowReads(name, d, loop.target.id, k - step, lambda _, c=carry: ast.Name(c, ast.Load())).visit(own)
            bind = ast.copy_location(ast.Assign(targets=[ast.copy_location(ast.Name(carry, ast.Store()), store)],
                                                value=value), store)
            bind.end_lineno, bind.end_col_offset = store.end_lineno, store.end_col_offset
            store.value = ast.copy_location(ast.Name(carry, ast.Load()), store.value)
            at = next(j for j, st in enumerate(loop.body) if st is store)
            loop.body[at:at + 1] = [bind, store]
            carried.append((carry, name, d, k - step, _first_read(first, k - step, name, d)))
        ast.fix_missing_locations(loop)
        loop._av_original = original
        loop._av_carried = tuple(carried)
        out.append((loop, original))
    return out


_NOT_IN_BODY = (ast.Break, ast.Continue, ast.Return, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith,
                ast.Try, ast.Raise, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.Global,
                ast.Nonlocal, ast.Delete, ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr, ast.comprehension,
                ast.Import, ast.ImportFrom)


def _stored_recurrence(cap: Captured, loop: ast.For, local: set[str]):
    """[(position of the store in the body, (output name, dimension, store offset k, step, the
    first index's text or None))] of a loop `stored_recurrences` takes (one per output it
    stores that way: `m[t] = b1 * m[t - 1] + ..; v[t] = b2 * v[t - 1] + ..`), else []."""
    if loop.orelse or not isinstance(loop.target, ast.Name):
        return []
    space = _signed_range(cap, loop.iter, local)
    if space is None:
        return []
    step, first = space
    t = loop.target.id
    if any(isinstance(n, _NOT_IN_BODY) for st in loop.body for n in fastast.walk(st)):
        return []
    if t in {n.id for st in loop.body for n in fastast.walk(st) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}:
        return []
    found = []
    for k_store, st in enumerate(loop.body):
        aug = isinstance(st, ast.AugAssign) and isinstance(st.op, _AUG_OPS)
        target = st.target if aug else st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 else None
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
            continue
        name = target.value.id
        at = _row_index(target, t)
        if at is None or name == t:
            continue
        d, k = at
        value = st.value
        if _prefix_form(st, name, t, d, k, step):
            continue     # (an in-place cumsum or cumprod: the analysis's own prefix form)
        if aug:
            # `x[t] += a * x[t - 1]`: the row's own value, then the update, in the row's dtype (a
            # running value of another dtype or shape keeps the loop: Token.carried_like)
            value = ast.BinOp(left=fastast.clone(target), op=fastast.clone(st.op), right=fastast.clone(st.value))
            value.left.ctx = ast.Load()
        reads = [n for n in fastast.walk(value) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
                 and n.value.id == name and _row_index(n, t) == (d, k - step)]
        if not reads:
            continue
        # (the stored row itself, read before its store: not yet written, the input's own value)
        own = [n for n in fastast.walk(value) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
               and n.value.id == name and _row_index(n, t) == (d, k)]
        parent = {id(c): p for p in fastast.walk(value) for c in ast.iter_child_nodes(p)}
        if not all(isinstance(parent.get(id(n)), ast.BinOp) and isinstance(parent[id(n)].op, (ast.Add, ast.Sub))
                   for n in own):
            # (only as a term of a sum: an operation that saves the row for backward, `x[i] * b[i]`,
            # makes the loop's backward raise after the store bumps the row's version, where a
            # copy's would not)
            continue
        allowed = {id(target.value)} | {id(r.value) for r in reads + own}
        if aug:
            allowed |= {id(n) for n in fastast.walk(value) if isinstance(n, ast.Name) and n.id == name}
        if any(isinstance(n, ast.Name) and n.id == name and id(n) not in allowed
               for s in [value] + [b for b in loop.body if b is not st] for n in fastast.walk(s)):
            return []       # `out` read or written anywhere else in the body: the loop as written
        store = None
        if aug:
            store = ast.copy_location(ast.Assign(targets=[target], value=value), st)
            store.end_lineno, store.end_col_offset = st.end_lineno, st.end_col_offset
            ast.fix_missing_locations(store)
        found.append((k_store, (name, d, k, step, first), store))
    return found


_AUG_OPS = (ast.Add, ast.Sub)   # (the row a term of the sum: see `own`)


def _prefix_form(st, name: str, t: str, d: int, k: int, step: int) -> bool:
    """`x[t] += x[t - 1]`, `x[t] *= x[t - 1]`, `x[t] = x[t] + x[t - 1]` (or `*`, either order):
    the in-place prefix sum or product the loop planner takes as it is (loops._inplace_prefix)."""
    def row(n, off):
        return isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == name \
            and _row_index(n, t) == (d, off)
    if isinstance(st, ast.AugAssign):
        return isinstance(st.op, (ast.Add, ast.Mult)) and row(st.value, k - step)
    v = st.value
    return isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Add, ast.Mult)) and (
        row(v.left, k) and row(v.right, k - step) or row(v.left, k - step) and row(v.right, k))


def _signed_range(cap: Captured, it, local: set[str]):
    """(step, the first index as an expression or None) of `range(..)` with a step of 1 or -1,
    or of `reversed(range(a, b))` (step 1 inside): the builtins, bounds without effects."""
    from .loops import _pure_expr    # (loops imports this module's package)

    rev = False
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "reversed" and len(it.args) == 1 \
            and not it.keywords and "reversed" not in local:
        found, obj = cap.lookup("reversed")
        if not (found and obj is reversed):
            return None
        it, rev = it.args[0], True
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and "range" not in local and not it.keywords and 1 <= len(it.args) <= 3
            and not any(isinstance(a, ast.Starred) for a in it.args)):
        return None
    found, obj = cap.lookup("range")
    if not (found and obj is range) or not all(_pure_expr(a) for a in it.args):
        return None
    step = 1
    if len(it.args) == 3:
        s = it.args[2]
        if isinstance(s, ast.UnaryOp) and isinstance(s.op, ast.USub) and isinstance(s.operand, ast.Constant):
            step = -s.operand.value if type(s.operand.value) is int else None
        else:
            step = s.value if isinstance(s, ast.Constant) and type(s.value) is int else None
        if step not in (1, -1) or rev and step != 1:
            return None
    start = it.args[0] if len(it.args) >= 2 else ast.Constant(0)
    if rev:
        stop = it.args[-1] if len(it.args) == 1 else it.args[1]
        return -1, ast.BinOp(left=fastast.clone(stop), op=ast.Sub(), right=ast.Constant(1))
    return step, start


def _row_index(sub: ast.Subscript, t: str):
    """(d, k) where `sub`'s index is `t + k` (an int k) at position d, with full slices `:`
    before it and after it, else None."""
    entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
    full = [isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None for e in entries]
    at = [k for k, e in enumerate(entries) if not full[k]]
    if len(at) != 1:
        return None
    d = at[0]
    c = _index_offset(entries[d], t)
    if isinstance(c, ast.UnaryOp) and isinstance(c.op, ast.USub) and isinstance(c.operand, ast.Constant):
        k = -c.operand.value if type(c.operand.value) is int else None
    else:
        k = c.value if isinstance(c, ast.Constant) and type(c.value) is int else None
    return None if k is None else (d, k)


def _first_read(first, offset: int, name: str, d: int) -> str:
    """The first iteration's read as text, for the displayed rewrite (`out[0]`, `adv[T]`)."""
    if isinstance(first, ast.Constant) and type(first.value) is int:
        i = ast.Constant(first.value + offset)
    else:
        try:
            i = ast.Constant(ast.literal_eval(first) + offset)
        except ValueError:
            e = first
            if isinstance(first, ast.BinOp) and isinstance(first.op, (ast.Add, ast.Sub)) \
                    and isinstance(first.right, ast.Constant) and type(first.right.value) is int:
                # (`T - 1` read at `+ 1`: `T`)
                c = first.right.value if isinstance(first.op, ast.Add) else -first.right.value
                e, offset = first.left, offset + c
            i = e if offset == 0 else ast.BinOp(left=e, op=ast.Add() if offset > 0 else ast.Sub(),
                                                right=ast.Constant(abs(offset)))
    return f"{name}[{', '.join([':'] * d + [ast.unparse(i)])}]"


class _RowReads(ast.NodeTransformer):
    """Each read `out[.., t + c]` (the row at offset `c` along dimension `d`) as make(that read):
    the previous step's row as the running value's name, the stored row as its copy."""

    def __init__(self, name, d, t, c, make):
        self.name, self.d, self.t, self.c, self.make = name, d, t, c, make

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == self.name and _row_index(node, self.t) == (self.d, self.c):
            return ast.fix_missing_locations(ast.copy_location(self.make(node), node))
        return self.generic_visit(node)


def _copied(node):
    return ast.Call(func=ast.Attribute(value=node, attr="clone", ctx=ast.Load()), args=[], keywords=[])


def sunk_appends(cap: Captured, moved: list, refused: set) -> list:
    """`if c: out.append(a) elif d: out.append(b) else: out.append(e)`: every way through the
    branch ends in one append to the same list, so each iteration appends exactly once. Planned
    as `if c: item = a ..` and one `out.append(item)` after the branch, which the planner takes
    (a list built from one value per iteration, the value a conditional one). The same values in
    the same order: the appended expression is evaluated before `out.append` is looked up, which
    differs only where evaluating it rebinds `out`, and `out` must be a local name that nothing
    in the branch reads or binds besides the appends (no `global` or `nonlocal` of it anywhere).
    A path that ends otherwise (no append, a `continue`, a loop, a `try`) leaves the branch as it
    is. Only loops the analysis refused as written (`refused`: their (line, column)), with no loop
    or comprehension inside (a loop of theirs planned alone would go back with them): where the
    loop as written is planned (a mask per side, each computed on its own rows), that plan stays.
    The loop as written stays the fallback (`_av_original`), and goes back into the tree where
    the rewritten loop is not vectorized (api). Returns [(the rewritten loop, the original one)]."""
    bound = _local_names(cap.tree)
    local = bound | {n.id for n in fastast.walk(cap.tree) if isinstance(n, ast.Name)}   # (and every name read: a global too)
    declared = {name for n in fastast.walk(cap.tree) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
    inside_moved = {id(n) for loop in moved for n in fastast.walk(loop)}
    out = []
    for loop in [n for n in fastast.walk(cap.tree) if isinstance(n, ast.For)]:
        if (loop.lineno, loop.col_offset) not in refused or id(loop) in inside_moved or any(
                id(n) in inside_moved or n is not loop and isinstance(n, (ast.For, ast.While, ast.comprehension))
                for n in fastast.walk(loop)):
            continue     # (planned as written; a loop another move rewrote, or inside or around one; a nest)
        sinks = []
        for k, st in enumerate(loop.body):
            lst = _appends_on_every_path(st) if isinstance(st, ast.If) else None
            if lst is None or lst not in bound or lst in declared:
                continue
            finals = []
            _final_appends(st, finals)
            final_ids = {id(n) for _, stmt, _, _ in finals for n in fastast.walk(stmt.value.func)}
            if any(isinstance(n, ast.Name) and n.id == lst and id(n) not in final_ids for n in fastast.walk(st)):
                continue     # (the list read or bound in the branch besides its appends)
            item = f"{lst}_item{st.lineno}_{st.col_offset}"      # (not `_av_`: reserved for user code's check)
            if item in local:
                continue
            sinks.append((k, st, lst, item))
        if not sinks:
            continue
        original = fastast.clone(loop)
        for k, st, lst, item in reversed(sinks):
            finals = []
            _final_appends(st, finals)
            append = fastast.clone(finals[0][1])
            for call, stmt, holder, pos in finals:
                assign = ast.Assign(targets=[ast.Name(item, ast.Store())], value=call.args[0])
                ast.copy_location(assign, stmt)
                for n in fastast.walk(assign.targets[0]):
                    ast.copy_location(n, stmt)
                holder[pos] = assign
            append.value.args = [ast.copy_location(ast.Name(item, ast.Load()), append.value.args[0])]
            for n in fastast.walk(append):         # (at the branch's last line: a traceback from the append)
                n.lineno = n.end_lineno = st.end_lineno
            loop.body.insert(k + 1, append)
        loop._av_original = original
        out.append((loop, original))
    return out


def _appends_on_every_path(st) -> str | None:
    """The list every way through `st` ends by appending to (`name.append(v)`, one positional
    argument), else None."""
    if isinstance(st, ast.Expr):
        call = st.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append" \
                and isinstance(call.func.value, ast.Name) and len(call.args) == 1 and not call.keywords \
                and not isinstance(call.args[0], ast.Starred):
            return call.func.value.id
        return None
    if isinstance(st, ast.If) and st.body and st.orelse:
        a = _appends_on_every_path(st.body[-1])
        return a if a is not None and a == _appends_on_every_path(st.orelse[-1]) else None
    return None


def _final_appends(st, found: list):
    """The appends that end each way through `st` (_appends_on_every_path): (call, statement,
    the statement list that holds it, its position there) each."""
    for block in (st.body, st.orelse):
        last = block[-1]
        if isinstance(last, ast.If):
            _final_appends(last, found)
        else:
            found.append((last.value, last, block, len(block) - 1))


def strided_indices(cap: Captured, moved=()) -> list:
    """`for i in range(d // 2): pe[p, 2 * i] = ..; pe[p, 2 * i + 1] = ..` (interleaved columns,
    pairs of frames): every read of the loop's index is `c * i` for one integer literal c of at
    least 2. Planned as `for i_by2 in range(2 * (d // 2))` stepping by c, with each `c * i` read
    as `i_by2`: the same iterations, whose index the planner takes as an affine row (`x[j + 1]`
    over a stepped range) where `x[2 * i + 1]` is no row it knows. The products are Python ints,
    exact; range's arguments scaled by c raise only where range's own would (a float: the same
    TypeError), and anything the vectorized path's `begin` raises runs the fallback, the loop as
    written (`_av_original`), which also goes back into the tree where the moved loop is not
    vectorized (api). Only where the index is bound by nothing else, read nowhere outside the
    loop (its last value after the loop is not bound by the moved loop), `range` the builtin, no
    `else`, and no nested scope of the body reads it. Loops in `moved`, or around or inside one,
    are left alone. Returns [(the rewritten loop, the original one)]."""
    local = _local_names(cap.tree)
    found, obj = cap.lookup("range")
    if "range" in local or not (found and obj is range):
        return []
    near = set()
    for m in moved:
        near |= {id(n) for n in fastast.walk(m)}
    out = []
    for loop in [n for n in fastast.walk(cap.tree) if isinstance(n, ast.For)]:
        it = loop.iter
        if loop.orelse or not isinstance(loop.target, ast.Name) or id(loop) in near or any(
                id(m) in {id(n) for n in fastast.walk(loop)} for m in moved):     # (inside one, or around one)
            continue
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and 1 <= len(it.args) <= 3 and not it.keywords
                and not any(isinstance(a, ast.Starred) for a in it.args)):
            continue
        i = loop.target.id
        if any(isinstance(n, (ast.Global, ast.Nonlocal)) and i in n.names for n in fastast.walk(cap.tree)):
            continue     # (a module's or an enclosing function's name: the loop as written binds it)
        inside = {id(n) for st in loop.body for n in fastast.walk(st)}
        if any(isinstance(n, ast.Name) and n.id == i and id(n) not in inside for n in fastast.walk(cap.tree)
               if n is not loop.target):
            continue     # (read or bound outside the body: before, after, in the range's arguments)
        uses, scaled, c = [], {}, None
        for st in loop.body:
            for n in fastast.walk(st):
                if isinstance(n, ast.Name) and n.id == i:
                    uses.append(n)
                elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
                    for a, b in ((n.left, n.right), (n.right, n.left)):
                        if isinstance(a, ast.Name) and a.id == i and isinstance(b, ast.Constant) \
                                and type(b.value) is int and b.value >= 2:
                            if c is None or b.value == c:
                                c = b.value
                                scaled[id(a)] = n
                            break
        if not uses or len(scaled) != len(uses) or any(not isinstance(n.ctx, ast.Load) for n in uses):
            continue
        if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Global,
                              ast.Nonlocal, ast.comprehension))
               and any(isinstance(m, ast.Name) and m.id == i for m in fastast.walk(n))
               for st in loop.body for n in fastast.walk(st)):
            continue
        if not any(isinstance(n, ast.Subscript) and any(id(m) in {id(v) for v in scaled.values()}
                                                          for m in fastast.walk(n.slice))
                   for st in loop.body for n in fastast.walk(st)):
            continue     # (no index reads it: nothing for the planner to gain)
        j = f"{i}_by{c}"
        if j in local or j in {n.id for n in fastast.walk(cap.tree) if isinstance(n, ast.Name)}:
            continue
        original = fastast.clone(loop)
        products = {id(p) for p in scaled.values()}
        loop.body = [_Scaled(products, j).visit(st) for st in loop.body]
        loop.target = ast.copy_location(ast.Name(j, ast.Store()), loop.target)

        def times(e):
            # (range takes its arguments' __index__(): a uint8 tensor's 200 is the int 200, whose
            # double is 400 where the tensor's own product wraps to 144; a bound without one
            # raises in `begin`, and the loop as written raises range's own error)
            index = ast.Call(func=ast.Attribute(value=e, attr="__index__", ctx=ast.Load()), args=[], keywords=[])
            return ast.BinOp(left=ast.Constant(c), op=ast.Mult(), right=index)
        args = list(it.args)
        if len(args) == 1:
            args = [ast.Constant(0), times(args[0]), ast.Constant(c)]
        elif len(args) == 2:
            args = [times(args[0]), times(args[1]), ast.Constant(c)]
        else:
            args = [times(a) for a in args]
        loop.iter = ast.copy_location(ast.Call(func=ast.Name("range", ast.Load()), args=args, keywords=[]), it)
        for n in fastast.walk(loop.iter):
            ast.copy_location(n, it)
        loop._av_original = original
        out.append((loop, original))
    return out


class _Scaled(ast.NodeTransformer):
    """Each product `c * i` of the loop's index (by node identity) as the scaled index's name."""

    def __init__(self, products: set, name: str):
        self.products, self.name = products, name

    def visit_BinOp(self, node):
        if id(node) in self.products:
            return ast.copy_location(ast.Name(self.name, ast.Load()), node)
        return self.generic_visit(node)
