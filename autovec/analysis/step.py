"""The compile fallback's analysis: can a loop that is not vectorized run its body as a pure
*step function*, `state = step(slices, state)`, that torch.compile may take?

A step is allowed only for straight-line bodies of name assignments, with appends and
subscript stores into containers the body does not otherwise read placed at the end (the
driver loop does those after each step). The loop index may only select slices of values
the body does not write (`x[t]`, `x[:, t + 1]`): the driver takes the slices, so the step
sees tensors and never an int that changes every iteration (which would recompile).
"""
from __future__ import annotations

import ast

from .. import fastast
from ..plan import StepPlan
from . import names as nm

_EFFECT_FREE_STMTS = (ast.Assign, ast.Pass)
# constructs a loop kept in Python cannot be rebuilt around (shared with fission)
CONTROL_FLOW = (ast.Break, ast.Continue, ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.Try, ast.With,
                ast.Global, ast.Nonlocal, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For,
                ast.While, ast.NamedExpr)
# a step is straight-line code besides
_FORBIDDEN = CONTROL_FLOW + (ast.If, ast.AugAssign, ast.Delete, ast.Raise, ast.Assert, ast.Import, ast.ImportFrom)


_MIN_OPS = 3   # "bodies of several operations": fewer never repay a compiled call


class NoStep(Exception):
    """The loop's body cannot be a compiled step function; the message says why."""


def plan_step(node: ast.For, ctx, loop_id: int) -> StepPlan:
    """The step-function form of `node`, or NoStep."""
    if not isinstance(node, ast.For) or node.orelse:
        raise NoStep("only `for` loops without `else` have a step function")
    for n in fastast.walk(ast.Module(body=node.body, type_ignores=[])):
        if isinstance(n, _FORBIDDEN):
            raise NoStep(f"`{type(n).__name__.lower()}` at line {getattr(n, 'lineno', node.lineno)} is not a "
                         "straight-line step")
    index_names, element_names = _targets(node, ctx)
    body, driver = _split_driver(node.body)

    assigned: list[str] = []
    for stmt in body:
        if not isinstance(stmt, _EFFECT_FREE_STMTS):
            raise NoStep(f"line {stmt.lineno} does more than assign names (a call for its effect, or an "
                         "append/store that is not at the end of the body)")
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if not _names_only(t):
                    raise NoStep(f"line {stmt.lineno} writes into `{ast.unparse(t)}` (only names can be "
                                 "assigned inside a step)")
                for name in nm.target_names(t):
                    if name not in assigned:
                        assigned.append(name)
    written = set(assigned)
    if written & (set(index_names) | set(element_names)):
        raise NoStep("the loop variable is reassigned in the body")

    # slices selected by the loop index become parameters computed by the driver
    slicer = _Slices(set(index_names), written)
    new_body = [slicer.visit(fastast.clone(s)) for s in body]
    driver_values = []
    for kind, container, index, value in driver:
        if nm.load_ids(value) & set(index_names):
            value = slicer.visit(fastast.clone(value))
        driver_values.append((kind, container, index, value))
    if slicer.bad:
        raise NoStep(slicer.bad)
    for stmt in new_body + [v for *_, v in driver_values]:
        used = nm.load_ids(stmt) & set(index_names)
        if used:
            raise NoStep(f"the loop index `{sorted(used)[0]}` is used as a number, not only to select slices "
                         "(a compiled step would recompile for every value)")
    containers = {c for _, c, _, _ in driver}
    for kind, container, index, value in driver:
        if index is not None and nm.load_ids(index) & written:
            raise NoStep(f"the index of the store into `{container}` uses a value the body computes")
        used = (nm.load_ids(value) | (nm.load_ids(index) if index is not None else set())) & containers
        if used:
            # the step computes every appended value before the driver appends any of them
            raise NoStep(f"the value stored or appended at line {value.lineno} reads `{sorted(used)[0]}`, which "
                         "the loop fills")
    for stmt in new_body:
        read = nm.load_ids(stmt)
        if read & containers:
            raise NoStep(f"`{sorted(read & containers)[0]}` is both read and filled by the loop")

    # parameters: element targets, slices, names carried from the previous step, loop invariants
    carried, seen_assigned = [], set()
    for stmt in new_body:
        if isinstance(stmt, ast.Assign):
            for name in nm.load_ids(stmt.value):
                if name in written and name not in seen_assigned and name not in carried:
                    carried.append(name)
            for t in stmt.targets:
                seen_assigned.update(nm.target_names(t))
    loads = set()
    for stmt in new_body:
        loads |= nm.load_ids(stmt)
    for _, _, _, value in driver_values:
        loads |= nm.load_ids(value)
    local_like = set(ctx.local_names) | set(ctx.cellvars) | set(getattr(ctx, "freevars", ()))
    invariants = sorted(n for n in loads if n not in written and n not in slicer.params
                        and n not in element_names and n not in index_names and n in local_like)
    params = list(element_names) + list(slicer.params) + carried + invariants
    args = list(element_names) + [slicer.params[p] for p in slicer.params] + carried + invariants

    # calls: global callables are checked for effects before each loop; methods by name
    calls, ops = [], 0
    for stmt in new_body + [v for *_, v in driver_values]:
        for n in fastast.walk(stmt):
            ops += isinstance(n, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Subscript))
            if not isinstance(n, ast.Call):
                continue
            root = n.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id not in written and root.id not in params:
                path = ast.unparse(n.func)
                bad = ctx.env.classify(path) if _dotted(n.func) else None
                if bad:
                    raise NoStep(bad)
                if path not in calls:
                    calls.append(path)
            elif isinstance(n.func, ast.Attribute):
                if not ctx.env.pure_method(n.func.attr):
                    raise NoStep(f"`.{n.func.attr}()` at line {n.lineno} may modify its tensor or leave torch")
            else:
                raise NoStep(f"the call at line {n.lineno} cannot be checked for side effects")

    driver_stmts, returns = [], list(assigned)
    for k, (kind, container, index, value) in enumerate(driver_values):
        tmp = f"_av_v{loop_id}_{k}"
        new_body.append(ast.Assign(targets=[ast.Name(id=tmp, ctx=ast.Store())], value=value,
                                   lineno=value.lineno, col_offset=value.col_offset))
        returns.append(tmp)
        # (the whole subscript unparsed: an index tuple alone with a slice, `(1:, j)`, is no
        # Python; probeI's lag features `feats[l:, j] = ..`)
        driver_stmts.append(f"{container}.append({tmp})" if kind == "append" else
                            ast.unparse(ast.Subscript(value=ast.Name(container, ast.Load()), slice=index,
                                                      ctx=ast.Store())) + f" = {tmp}")
    if not returns:
        raise NoStep("the body produces nothing")
    if ops < _MIN_OPS:
        raise NoStep(f"the body has {ops} operation(s): too little for a compiled step to pay")
    return StepPlan(loop_id=loop_id, lineno=node.lineno, end_lineno=node.end_lineno or node.lineno,
                    params=tuple(params), args=tuple(args),
                    body=tuple(new_body), returns=tuple(returns), driver=tuple(driver_stmts),
                    calls=tuple(calls), ops=max(ops, 1), invariants=len(invariants))


def _targets(node: ast.For, ctx) -> tuple[list[str], list[str]]:
    """(names bound to ints that change every iteration, names bound to elements)."""
    it, target = node.iter, node.target
    if not _names_only(target):
        raise NoStep("the loop target is not a name or a tuple of names")
    fname = it.func.id if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) else None
    builtin = fname is not None and fname not in ctx.local_names and ctx.env.is_builtin(fname)
    if builtin and fname == "reversed" and len(it.args) == 1 and isinstance(it.args[0], ast.Call) \
            and isinstance(it.args[0].func, ast.Name) and it.args[0].func.id == "range" \
            and "range" not in ctx.local_names and ctx.env.is_builtin("range"):
        fname = "range"
    if builtin and fname == "range":
        if not isinstance(target, ast.Name):
            raise NoStep("a range loop with a tuple target")
        return [target.id], []
    if builtin and fname == "enumerate" and isinstance(target, ast.Tuple) and len(target.elts) == 2 \
            and isinstance(target.elts[0], ast.Name):
        return [target.elts[0].id], nm.target_names(target.elts[1])
    return [], nm.target_names(target)


def _names_only(t: ast.AST) -> bool:
    if isinstance(t, ast.Name):
        return True
    return isinstance(t, (ast.Tuple, ast.List)) and all(_names_only(e) for e in t.elts)


def _dotted(f: ast.AST) -> bool:
    while isinstance(f, ast.Attribute):
        f = f.value
    return isinstance(f, ast.Name)


def _split_driver(body: list[ast.stmt]):
    """The statements of the body, and the appends / subscript stores at its end (in order)."""
    k = len(body)
    while k > 0 and _driver_stmt(body[k - 1]) is not None:
        k -= 1
    return body[:k], [_driver_stmt(s) for s in body[k:]]


def _driver_stmt(s: ast.stmt):
    if (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute)
            and s.value.func.attr == "append" and isinstance(s.value.func.value, ast.Name)
            and len(s.value.args) == 1 and not s.value.keywords and not isinstance(s.value.args[0], ast.Starred)):
        return ("append", s.value.func.value.id, None, s.value.args[0])
    if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript)
            and isinstance(s.targets[0].value, ast.Name)):
        return ("store", s.targets[0].value.id, s.targets[0].slice, s.value)
    return None


class _Slices(ast.NodeTransformer):
    """Replace `x[... t ...]` (x not written by the body) by a parameter the driver computes."""

    def __init__(self, index: set, written: set):
        self.index, self.written = index, written
        self.params: dict[str, str] = {}    # parameter -> the slice expression
        self.bad = ""

    def visit_Subscript(self, node: ast.Subscript):
        if not (nm.load_ids(node.slice) & self.index) or not isinstance(node.ctx, ast.Load):
            return self.generic_visit(node)
        if nm.load_ids(node.value) & (self.written | self.index):
            self.bad = self.bad or (f"`{ast.unparse(node)}` at line {node.lineno} selects by the loop index from "
                                    "a value the body computes")
            return node
        text = ast.unparse(node)
        for p, t in self.params.items():
            if t == text:
                return ast.copy_location(ast.Name(id=p, ctx=ast.Load()), node)
        p = f"_av_x{len(self.params)}"
        self.params[p] = text
        return ast.copy_location(ast.Name(id=p, ctx=ast.Load()), node)
