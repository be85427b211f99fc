"""Triangular loop nests as one walk over their index pairs.

    for i in range(n):                      i_range = range(n)
        for j in range(i + 1, n):     ->    i_pairs, j_pairs = autovec_pairs(i_range, 1, n if i_range else 0, False)
            BODY                            for i, j in zip(i_pairs, j_pairs):
                                                BODY

`autovec_pairs` (index_pairs below) returns the (i, j) the nest walks, in the nest's order, as two
int64 tensors. The flat loop runs BODY on the same pairs in the same order, with `i` and `j` 0-d
int64 tensors instead of ints; the pass is made only where `i` and `j` are read nowhere but as a
subscript's index (`x[i]`, `d[i, j]`, `out[i, j] = ..`), where a 0-d integer tensor selects what
the int selects (a tensor's row as a view, a list's element through `__index__`). The loop planner
then takes the flat loop as it takes any loop over index tensors (a gather of the rows each pair
reads), which computes the triangle's pairs only: half the work of the masked rectangle
(hoist.rectangular_nests), and no value computed for a pair the nest skips, so nothing of such a
pair reaches a gradient (the rectangle is refused where inputs require grad).

The original nest stays each call's fallback. Where the flat loop is not planned, the function is
analysed again without this pass for that nest (api), so the other forms are as before.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

import torch

from .. import fastast
from ..frontend import Captured
from .hoist import (_breaks_out, _builtins_ok, _fresh_name, _holder, _index_offset, _local_names, _names,
                    _reads, range_nest, within)
from .names import mutated, reshaped


@dataclass
class PairNest:
    flat: ast.For            # the flat loop now in the tree (the outer loop's position)
    original: ast.For        # the nest as written (the flat loop's fallback)
    inner_lineno: int
    inner_source: str
    i: str
    j: str
    helper: str              # the name the rewritten function binds to index_pairs


def _int_offset(c) -> int | None:
    """The int of a constant offset (`1`, `-1`, `0`), else None."""
    if isinstance(c, ast.Constant) and type(c.value) is int:
        return c.value
    if isinstance(c, ast.UnaryOp) and isinstance(c.op, ast.USub) and isinstance(c.operand, ast.Constant) \
            and type(c.operand.value) is int:
        return -c.operand.value
    return None


def _index_only(stmts: list, names: set) -> bool:
    """Whether every use of `names` in `stmts` is a read as a subscript's index (`x[i]`, or an
    entry of `x[i, :, j]`)."""
    for st in stmts:
        parent = {id(c): p for p in fastast.walk(st) for c in ast.iter_child_nodes(p)}
        for n in fastast.walk(st):
            if not (isinstance(n, ast.Name) and n.id in names):
                continue
            if not isinstance(n.ctx, ast.Load):
                return False
            p = parent.get(id(n))
            if isinstance(p, ast.Subscript) and p.slice is n:
                continue
            if isinstance(p, ast.Tuple) and n in p.elts:
                q = parent.get(id(p))
                if isinstance(q, ast.Subscript) and q.slice is p:
                    continue
            return False
    return True


def pair_lists(cap: Captured, skip=frozenset()) -> list[PairNest]:
    """Make each triangular nest of the function's own body (not inside another loop) a flat
    loop over its index pairs (see the module's docstring), except those at the (line, column)
    positions in `skip`. Only where that is exact:

    - `for i in range(a, b): for j in range(i + c, d):` (or `range(d, i + c)`, `range(i + c)`),
      one bound of the inner range `i` plus a constant int, the other free of `i` and `j`, pure
      and unchanged by the nest (it is evaluated once, where the nest evaluates it first);
    - the outer loop's body is the inner loop alone, neither has an `else`, no `break` ends the
      inner loop (it would end the flat loop), no name is bound inside an expression;
    - `i` and `j` are read in the body only as a subscript's index, never bound there, appear
      nowhere else in the function and are not declared `global` or `nonlocal` (their values
      after the loop would differ).

    Returns the nests changed."""
    fn = cap.tree
    local = _local_names(fn)
    if not _builtins_ok(cap, local, ("zip",)):
        return []
    parents = {id(c): p for p in fastast.walk(fn) for c in ast.iter_child_nodes(p)}
    taken = _names(fn)
    helper = None
    out = []
    declared = {name for n in fastast.walk(fn) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
    for outer in [n for n in fastast.walk(fn) if isinstance(n, ast.For)]:
        if (outer.lineno, outer.col_offset) in skip or within(fn, parents, outer, _ENCLOSING):
            continue
        nest = range_nest(outer, cap, local)
        if nest is None:
            continue
        inner, i, j, _, (lo, hi) = nest
        uses = [_reads(lo, i), _reads(hi, i)]
        if uses[0] == uses[1]:
            continue      # (a band, or a rectangle: not this form)
        upper = uses[1]
        c = _int_offset(_index_offset(hi if upper else lo, i))
        if c is None:
            continue
        fixed = (lo if lo is not None else ast.Constant(0)) if upper else hi
        from .loops import _pure_expr, bound_moves, src    # (loops imports this module's package)
        changed, shapes = mutated(outer) - {i}, reshaped(outer) - {i}
        if _reads(fixed, i) or _reads(fixed, j) or not _pure_expr(fixed) or bound_moves(fixed, changed, shapes):
            continue
        if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr, ast.Lambda)) for n in fastast.walk(outer)):
            continue
        if any(_breaks_out(s) for s in inner.body):
            continue
        inside = {id(n) for n in fastast.walk(outer)}
        if declared & {i, j}:
            continue      # (their values after the loop are seen outside the function)
        if any(isinstance(n, ast.Name) and n.id in (i, j) and id(n) not in inside for n in fastast.walk(fn)) \
                or any(a.arg in (i, j) for a in fastast.walk(fn) if isinstance(a, ast.arg)):
            continue
        if not _index_only(inner.body, {i, j}):
            continue
        if helper is None:
            helper = _fresh_name("autovec_pairs", outer, taken)
        r = _fresh_name(f"{i}_range", outer, taken)
        pi, pj = _fresh_name(f"{i}_pairs", outer, taken), _fresh_name(f"{j}_pairs", outer, taken)
        original = fastast.clone(outer)
        load = lambda name: ast.Name(id=name, ctx=ast.Load())   # noqa: E731
        bind_range = ast.Assign(targets=[ast.Name(id=r, ctx=ast.Store())], value=fastast.clone(outer.iter))
        # the fixed bound evaluated only where the nest evaluates it (a first outer step)
        bound = ast.IfExp(test=load(r), body=fastast.clone(fixed), orelse=ast.Constant(0))
        bind_pairs = ast.Assign(
            targets=[ast.Tuple(elts=[ast.Name(id=pi, ctx=ast.Store()), ast.Name(id=pj, ctx=ast.Store())], ctx=ast.Store())],
            value=ast.Call(func=load(helper), args=[load(r), ast.Constant(c), bound, ast.Constant(upper)], keywords=[]))
        flat = ast.For(target=ast.Tuple(elts=[ast.Name(id=i, ctx=ast.Store()), ast.Name(id=j, ctx=ast.Store())],
                                        ctx=ast.Store()),
                       iter=ast.Call(func=load("zip"), args=[load(pi), load(pj)], keywords=[]),
                       body=inner.body, orelse=[], type_comment=None)
        for st in (bind_range, bind_pairs, flat):
            for n in fastast.walk(st):
                if isinstance(n, (ast.expr, ast.stmt)) and not hasattr(n, "lineno"):
                    ast.copy_location(n, outer)
        ast.copy_location(flat.target, inner.target)
        for n in flat.target.elts:
            ast.copy_location(n, inner.target if n.id == j else outer.target)
        flat.end_lineno, flat.end_col_offset = outer.end_lineno, outer.end_col_offset
        flat._av_original = original
        holder, at = _holder(fn, outer)
        holder[at:at + 1] = [bind_range, bind_pairs, flat]
        parents[id(flat)] = parents.get(id(outer))
        out.append(PairNest(flat, original, inner.lineno, src(original.body[0]), i, j, helper))
    return out


# (a nest inside one of these is left as it is: another loop, a comprehension, or a scope of its own)
_ENCLOSING = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
              ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class PairsDeclined:
    """What index_pairs gives in place of pairs it does not make: the flat loop's guard refuses
    it with `reason` (runtime), and the nest runs as written."""
    _av_declined = True
    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


# the pairs of a few nests, by (outer range, offset, bound, upper): (I, J, their versions); at
# most _CACHED pairs an entry
_cache: dict = {}
_CACHED, _ENTRIES = 1 << 20, 16
# more pairs than this (16 bytes each, before the body's own memory) and the nest runs as written
_MOST = 1 << 24
# integers this far from 0 and the nest runs as written (int64 arithmetic on them stays exact)
_FAR = 1 << 60


def _count(a: int, s: int, c: int, b: int, upper: bool) -> int:
    """How many (i, j) `for i in range(a, s): for j in range(i + c, b)` walks (`range(b, i + c)`
    where `upper`), in Python ints: a row i holds max(0, K - i) pairs (max(0, i - K)), K = b - c."""
    k = b - c
    if upper:
        lo = max(a, k + 1)
        return (s - lo) * (lo + s - 1) // 2 - (s - lo) * k if s > lo else 0
    hi = min(s, k)
    return (hi - a) * k - (a + hi - 1) * (hi - a) // 2 if hi > a else 0


def index_pairs(outer: range, c: int, bound, upper: bool):
    """(I, J): the (i, j) of `for i in outer: for j in range(i + c, bound)` (`range(bound, i + c)`
    where `upper`), in the nest's order, as int64 tensors (PairsDeclined past _MOST pairs or
    integers past _FAR). The first inner range is built as the nest builds it, so a bound that
    is not an integer raises the nest's own error, where the nest evaluates it."""
    if not outer:
        return _EMPTY, _EMPTY
    first = outer[0]
    range(bound, first + c) if upper else range(first + c, bound)
    b = operator.index(bound)
    a, s = outer.start, outer.stop
    key = (a, s, c, b, upper)
    got = _cache.get(key)     # (a call's hot path: the pairs of the last few nests)
    if got is not None and got[0]._version == got[2] and got[1]._version == got[3]:
        return got[0], got[1]
    total = _count(a, s, c, b, upper)
    if not total:
        return _EMPTY, _EMPTY
    if total > _MOST or max(abs(a), abs(s), abs(b), abs(c)) > _FAR:
        return (PairsDeclined(f"the triangle holds {total} pairs, past the {_MOST} autovec makes (or integers "
                              "past int64's exact range)"),) * 2
    i = torch.arange(a, s, dtype=torch.int64)
    lo, hi = (b, i + c) if upper else (i + c, b)
    counts = (hi - lo).clamp_min(0)
    I = i.repeat_interleave(counts, output_size=total)
    # each pair's place in its row: its position less the row's first position
    starts = (counts.cumsum(0) - counts).repeat_interleave(counts, output_size=total)
    J = torch.arange(total, dtype=torch.int64) - starts + (lo if upper else lo.repeat_interleave(counts, output_size=total))
    if total <= _CACHED:
        if len(_cache) >= _ENTRIES:
            _cache.pop(next(iter(_cache)))
        _cache[key] = (I, J, I._version, J._version)
    return I, J


_EMPTY = torch.empty(0, dtype=torch.int64)
