"""Where a loop's read of a row past a tensor's ends cannot happen: conditions of the loop
index and loop-invariant integers (`values[t + 1] if t + 1 < T else last`).

The analysis (analysis.loops._mapped) records, for each indexed read, the conditions every
occurrence of it sits under (`conditioned`), keeping those that `index_test` accepts: integer
arithmetic and comparisons of the loop index and names the body never binds, `len(x)`,
`x.shape[k]`, `x.size(k)`, `x.dim()`, `x.ndim`. The guard evaluates them (`holds`) on the few
iterations whose rows fall past an end; where none of them may read the row, the batch reads
a stand-in row there (runtime._padded_rows), which only the sides of branches those iterations
never take see. The evaluation is Python's own, on Python ints alone: anything else (a float,
a tensor, a name bound to something new) answers None, and the guard refuses as before."""
from __future__ import annotations

import ast
import builtins

from . import fastast

_CMP = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
        ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
_BIN = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_SIZES = ("size", "dim", "numel")


def conditioned(stmts):
    """{id(node): conditions} for every node under the statements `stmts` (one iteration of a
    loop's body), the conditions ((test, truth), ..) holding wherever the node runs: the tests
    of the `if`s, conditional expressions and `and` / `or` operands it sits under, and those of
    an earlier `if` of the body whose side ends the iteration (`if t + 1 >= T: continue`).
    Conditions a node may run without (a comprehension's, a `while`'s, a lambda's caller's) are
    left out, which only widens where it may run."""
    out: dict = {}
    _stmts(stmts, (), True, out)
    return out


def _ends(stmts) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Continue, ast.Break, ast.Return, ast.Raise))


def _stmts(stmts, conds, top, out):
    """`top`: statements of the loop's own iteration (a `continue` there is the loop's)."""
    for s in stmts:
        _node(s, conds, top, out)
        if top and isinstance(s, ast.If):
            if _ends(s.body):
                conds = conds + ((s.test, False),)
            elif _ends(s.orelse):
                conds = conds + ((s.test, True),)


def _node(node, conds, top, out):
    out[id(node)] = conds
    if isinstance(node, ast.If):
        _node(node.test, conds, top, out)
        _stmts(node.body, conds + ((node.test, True),), top, out)
        _stmts(node.orelse, conds + ((node.test, False),), top, out)
    elif isinstance(node, ast.IfExp):
        _node(node.test, conds, top, out)
        _node(node.body, conds + ((node.test, True),), top, out)
        _node(node.orelse, conds + ((node.test, False),), top, out)
    elif isinstance(node, ast.BoolOp):
        truth = isinstance(node.op, ast.And)
        for v in node.values:
            _node(v, conds, top, out)
            conds = conds + ((v, truth),)
    elif isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        for sub in fastast.walk(node):      # (run whenever it is called: no condition known)
            out[id(sub)] = ()
    else:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                _stmts([child], conds, False, out)      # (a loop's, a `with`'s, a `try`'s)
            else:
                _node(child, conds, False, out)


def conjuncts(conds):
    """`conds` with each test split where its parts must all hold (`a and b` true, `a or b`
    false, `not a`): `if t + 1 < T and m[t + 1] > 0:` holds `t + 1 < T` whatever `m` holds."""
    out = []
    for test, truth in conds:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            out += conjuncts([(test.operand, not truth)])
        elif isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) == truth:
            out += conjuncts([(v, truth) for v in test.values])
        else:
            out.append((test, truth))
    return out


def index_test(test, index: str, varying) -> bool:
    """Whether `test` is one the guard can evaluate for any iteration: integer arithmetic and
    comparisons of the loop index and names not in `varying` (bound in the body)."""
    def ok(n):
        if isinstance(n, ast.Name):
            return n.id == index or n.id not in varying
        if isinstance(n, ast.Constant):
            return type(n.value) in (int, bool)
        if isinstance(n, ast.Compare):
            return all(type(op) in _CMP for op in n.ops) and ok(n.left) and all(map(ok, n.comparators))
        if isinstance(n, ast.BoolOp):
            return all(map(ok, n.values))
        if isinstance(n, ast.UnaryOp):
            return isinstance(n.op, (ast.Not, ast.USub, ast.UAdd)) and ok(n.operand)
        if isinstance(n, ast.BinOp):
            return type(n.op) in _BIN and ok(n.left) and ok(n.right)
        if isinstance(n, ast.Attribute):
            return n.attr == "ndim" and _named(n.value, index, varying)
        if isinstance(n, ast.Subscript):
            return (isinstance(n.value, ast.Attribute) and n.value.attr == "shape"
                    and _named(n.value.value, index, varying) and _int_literal(n.slice))
        if isinstance(n, ast.Call):
            if n.keywords:
                return False
            f = n.func
            if isinstance(f, ast.Name) and f.id == "len" and f.id not in varying:
                return len(n.args) == 1 and _named(n.args[0], index, varying)
            if isinstance(f, ast.Attribute) and f.attr in _SIZES and _named(f.value, index, varying):
                return not n.args if f.attr != "size" else len(n.args) == 1 and _int_literal(n.args[0])
        return False
    return ok(test)


def _named(n, index, varying) -> bool:
    return isinstance(n, ast.Name) and n.id != index and n.id not in varying


def _literal(n) -> int | None:
    """The int a literal spells (`-1` is a unary minus in the tree), else None."""
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
        k = _literal(n.operand)
        return -k if k is not None else None
    return n.value if isinstance(n, ast.Constant) and type(n.value) is int else None


def _int_literal(n) -> bool:
    return _literal(n) is not None


class _Unknown(Exception):
    pass


def holds(expr, env) -> bool | None:
    """`expr` (an index_test expression) evaluated with `env` (name -> value): True or False,
    or None where a value is not what the test's arithmetic takes (a float, a tensor where an
    int is read: Python's and the batch's answers could differ) or anything raises."""
    import torch

    def num(v):
        if type(v) is int or type(v) is bool:
            return v
        raise _Unknown

    def obj(n):
        v = env(n.id)
        if not isinstance(v, torch.Tensor):
            raise _Unknown
        return v

    def ev(n):
        if isinstance(n, ast.Name):
            return num(env(n.id))
        if isinstance(n, ast.Constant):
            return num(n.value)
        if isinstance(n, ast.Compare):
            left = ev(n.left)
            for op, right in zip(n.ops, n.comparators):
                right = ev(right)
                if not _CMP[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(n, ast.BoolOp):
            last = None
            for v in n.values:
                last = ev(v)
                if isinstance(n.op, ast.And) != bool(last):
                    return last
            return last
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            return not v if isinstance(n.op, ast.Not) else -v if isinstance(n.op, ast.USub) else +v
        if isinstance(n, ast.BinOp):
            return num(_BIN[type(n.op)](ev(n.left), ev(n.right)))
        if isinstance(n, ast.Attribute):
            return obj(n.value).dim()
        if isinstance(n, ast.Subscript):
            return obj(n.value.value).shape[_literal(n.slice)]
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name):
                if env(f.id) is not builtins.len:
                    raise _Unknown
                v = env(n.args[0].id)
                if not isinstance(v, (torch.Tensor, list, tuple)):
                    raise _Unknown
                return len(v)
            t = obj(f.value)
            if f.attr == "size":
                return t.size(_literal(n.args[0]))
            return t.dim() if f.attr == "dim" else t.numel()
        raise _Unknown

    try:
        return bool(ev(expr))
    except Exception:
        return None
