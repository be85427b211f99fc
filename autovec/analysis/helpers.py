"""A user helper's body as assignments and the one expression it returns (`if`s that only pick
what it returns become conditional expressions): what a batched body may inline."""
from __future__ import annotations

import ast

from .. import fastast
from . import names as nm

_NOT_IN_CHAIN = (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)


def returned_expression(fdef: ast.FunctionDef):
    """(assignments, expression, branched) for a helper whose body is assignments to names, then
    a `return`, or, `branched`, then `if`s that each return, ending with a `return`; each
    `if c: return a` becomes `a if c else <what the rest returns>`:

        def f(r):                         s = r.sum()
            s = r.sum()            ->     r * 2 if s > 0 else (-r if s < -1 else r * 0)
            if s > 0:
                return r * 2
            elif s < -1:
                return -r
            return r * 0

    The assignments all come before the first `if`, so they run on every path as written and
    every value the chain reads is bound where the chain starts. None for any other body (an
    assignment between or inside the `if`s, a `return` without a value, a path that ends
    without returning, a loop, `:=` or `yield` in the chain).

    >>> a, e, b = returned_expression(ast.parse("def f(r):\\n if r > 0:\\n  return r\\n return -r").body[0])
    >>> (a, ast.unparse(e), b)
    ([], 'r if r > 0 else -r', True)
    """
    body = [s for s in fdef.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    k = 0
    while k < len(body) and isinstance(body[k], ast.Assign) and all(isinstance(t, ast.Name)
                                                                   for t in body[k].targets):
        k += 1
    assigns, chain = body[:k], body[k:]
    value = _chain(chain)
    if value is None:
        return None
    branched = not (len(chain) == 1 and isinstance(chain[0], ast.Return))
    if branched and any(isinstance(n, _NOT_IN_CHAIN) for s in chain for n in fastast.walk(s)):
        return None
    return assigns, value, branched


def _chain(stmts: list) -> ast.expr | None:
    """The value returned by `stmts`: `return v`, or `if c: <chain>` [`else: <chain>`] then the rest."""
    if not stmts:
        return None
    s = stmts[0]
    if isinstance(s, ast.Return):
        return s.value if s.value is not None and len(stmts) == 1 else None
    if not isinstance(s, ast.If):
        return None
    # (where the test is false, the `else` block runs, then what follows the `if`; a `return`
    # with statements after it is refused, so no path goes past a `return`)
    then, other = _chain(s.body), _chain(s.orelse + stmts[1:])
    if then is None or other is None:
        return None
    return ast.copy_location(ast.IfExp(test=s.test, body=then, orelse=other), s)


def conditions(expr: ast.expr) -> list[ast.expr]:
    """The tests of the conditional expressions of `expr` outside nested scopes (lambdas,
    comprehensions)."""
    out = []

    def visit(n):
        if isinstance(n, nm._SCOPES):
            return
        if isinstance(n, ast.IfExp):
            out.append(n.test)
        for child in ast.iter_child_nodes(n):
            visit(child)
    visit(expr)
    return out


def varying_conditions(fdef: ast.FunctionDef, call: ast.Call, varying: set) -> bool:
    """Whether calling `fdef` as `call` picks its returned value by a condition on an argument
    that reads a name in `varying` (directly, or through the helper's assignments); False where
    the body is not returned_expression's form or the arguments do not bind plainly."""
    form = returned_expression(fdef)
    if form is None:
        return False
    assigns, value, _ = form
    a = fdef.args
    if a.posonlyargs or a.kwonlyargs or a.vararg or a.kwarg or any(isinstance(x, ast.Starred) for x in call.args) \
            or any(k.arg is None for k in call.keywords):
        return False
    params = [p.arg for p in a.args]
    bound = dict(zip(params, call.args))
    bound.update({k.arg: k.value for k in call.keywords if k.arg in params})
    hot = {p for p, arg in bound.items() if nm.load_ids(arg) & varying}
    for s in assigns:                   # (a name once assigned from one stays one: conservative)
        if nm.load_ids(s.value) & hot:
            hot.update(t.id for t in s.targets)
    tests = conditions(value) + [t for s in assigns for t in conditions(s.value)]
    return any(nm.load_ids(t) & hot for t in tests)
