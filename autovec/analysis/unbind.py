"""Loops over a tensor's slices along one dimension, read by their index:

    outs = []
    for xt in x.unbind(1):                  # also torch.unbind(x, 1), x.unbind(dim=1)
        outs.append(torch.tanh(xt @ w))

is planned as

    for xt_index2_4 in range(x.size(1)):
        outs.append(torch.tanh(x[:, xt_index2_4] @ w))

whose reads the planner takes as the loop's own slices of `x` (`vmap(.., in_dims=1)(x)`). The
element of `x.unbind(d)` is `x.select(d, k)`, a view of `x` as `x[:, k]` is; the element of
`x.split(1, d)` (`torch.split(x, 1, d)`) is `x.narrow(d, k, 1)`, read as `x[:, k:k + 1]`. A
negative dimension is read through `x.movedim(d, 0)` (`[k]`, or `[k:k + 1].movedim(0, d)` for a
piece: narrow's own strides), which needs no rank, its sizes from `torch.Tensor.size(x, d)`;
the planner takes that view as the sliced tensor only where this move made it (the node is
marked `_av_view`). `zip` of such walks walks
the shortest (`min` of the sizes), and `enumerate` of them counts with the range itself
(`for t in range(start, start + n)`, each element read at `t - start`).

The move is made on the same terms as analysis.reversal's reversed walks (`_refuse_walk`: the
loop never mentions `x`, has no `else`, opens no nested scope, rebinds no element nor
enumerate's index, and no element is read after the loop), with its own rule for each use of an
element: views of `x` read either way, but a view that unbind or split made is one of several
outputs, which autograd does not let a caller change in place ("Output 0 of UnbindBackward0 is a
view and is being modified inplace") where `x[:, k]` may be. So an element is only read: an
operand, a test, a view or a pure method taken of it (whose own uses the planner checks), or an
argument of a call that is not a container's method, has no `out=` / `inplace=`, and whose
callee's purity the planner proves (statically or on each call) before it is vectorized. Never
assigned, stored into, updated in place, given an attribute, compared by `is`, kept (appended,
returned) or read outside the loop; an element never read keeps the loop too (nothing would
check that `x` is a tensor).

The loop before the move is the fallback (`_av_original`), which the guard, an error on the
way and a plan that is not vectorized run (analysis.reversal.settle). The trip count raises for
what the walk does not take (a list has no `.size`, a bad dimension raises in `size` as in
`unbind`), and the plan must read every walked tensor as its own slices (`Walk.bases`, checked in
settle), so the guard, which takes only tensors there, sees each one: a list, a 0-d tensor, an
object with an `unbind` method of its own, run the loop as written, with its own behaviour and
errors. Split into pieces of another size, `chunk` and split by a list of sizes keep the loop.
"""
from __future__ import annotations

import ast

import torch

from .. import fastast
from ..frontend import Captured
from ..purity import MUTATORS, _OPERATOR_EFFECTS, pure_tensor_method
from .hoist import _dotted, _local_names, _resolves
from .names import in_place_keyword
from .reversal import Walk, _builtins_ok, _enumerated, _move, _overlaps, _own, _refuse_walk, _unread

# attributes of a tensor that say the same of a view that unbind made and one that `x[:, k]` made
_SAME_ATTRS = frozenset(("shape", "dtype", "device", "ndim", "T", "mT", "H", "mH", "real", "imag", "is_cuda",
                         "layout", "requires_grad"))
# calls that keep their argument or tell objects apart by identity or by their text (which names
# the view's grad_fn)
_TELLING_CALLS = frozenset(("id", "hash", "repr", "str", "format", "ascii", "print", "setattr", "delattr", "vars"))


def _plain(e: ast.AST) -> bool:
    parts = _dotted(e)
    return parts is not None and parts[0] != "torch"


def _pieces_of(it: ast.AST, cap: Captured, local: set):
    """(sequence, dimension, "unbind" | "split") of `x.unbind(d)` / `torch.unbind(x, d)` /
    `x.split(1, d)` / `torch.split(x, 1, d)` (d by position or `dim=`, 0 where left out, an int
    literal); (None, why) for other pieces of a tensor; None for anything else."""
    from .loops import _int_literal
    if not isinstance(it, ast.Call) or any(isinstance(a, ast.Starred) for a in it.args) \
            or any(k.arg is None for k in it.keywords):
        return None
    f, args = it.func, list(it.args)
    # (torch's function by any name first, `th.unbind(x, 1)` too; else a method of the sequence)
    kind = next((name for name in ("unbind", "split", "chunk", "tensor_split")
                 if _resolves(cap, f, local, (getattr(torch, name),))), None)
    method = kind is None
    if kind is not None and args and _plain(args[0]):
        seq = args.pop(0)
    elif method and isinstance(f, ast.Attribute) and _plain(f.value) \
            and f.attr in ("unbind", "split", "chunk", "tensor_split"):
        seq, kind = f.value, f.attr
    else:
        return None
    if kind in ("chunk", "tensor_split"):
        return None, (f"`{ast.unparse(it)}` makes pieces whose sizes depend on the tensor; only `unbind` and "
                      "`split(1, ..)` are read by their index")
    names = ("dim",) if kind == "unbind" else (
        "split_size" if method else "split_size_or_sections", "dim")
    if len(args) > len(names):
        return None
    given = dict(zip(names, args))
    for k in it.keywords:
        if k.arg not in names or k.arg in given:
            return None       # (the call raises as written)
        given[k.arg] = k.value
    size = given.get(names[0])
    if kind == "split" and _int_literal(size) != 1:
        if _int_literal(size) is None and not isinstance(size, (ast.List, ast.Tuple)):
            return None       # (`line.split(",")`, `s.split()`, a size by name: no tensor's split for certain)
        return None, (f"`{ast.unparse(it)}` does not split into pieces of size 1 (a literal `1`): only those are "
                      "read by their index")
    dim = _int_literal(given["dim"]) if "dim" in given else 0
    if dim is None:
        return None, f"the dimension of `{ast.unparse(it)}` is not an integer literal"
    return seq, dim, kind


def _at(index: str, offset: int) -> str:
    return index if not offset else f"{index} + {offset}" if offset > 0 else f"{index} - {-offset}"


def _element(seq: str, dim: int, kind: str, index: str, offset: int = 0) -> tuple[str, tuple]:
    """(the read of the element at `index + offset`, (the tensor the plan slices, its dimension))."""
    k, k1 = _at(index, offset), _at(index, offset + 1)
    if dim >= 0:
        lead = ":, " * dim
        return (f"{seq}[{lead}{k}]" if kind == "unbind" else f"{seq}[{lead}{k}:{k1}]"), (seq, dim)
    view = f"{seq}.movedim({dim}, 0)"
    return (f"{view}[{k}]" if kind == "unbind" else f"{view}[{k}:{k1}].movedim(0, {dim})"), (view, 0)


def _count(seq: str, dim: int, kind: str, torch_name: str | None) -> str | None:
    """The trip count, as the loop's range reads it; it raises for what the walk does not take. A
    negative dimension's sizes come from `torch.Tensor.size(x, d)`, which takes only a tensor:
    its reads slice `x.movedim(d, 0)`, which the guard sees as a tensor whatever `x` was. None
    where that needs a name for torch the function does not have."""
    if dim >= 0:
        n = f"{seq}.size({dim})"
    elif torch_name is None:
        return None
    else:
        n = f"{torch_name}.Tensor.size({seq}, {dim})"
    # (split of an empty dimension gives one empty piece: one step, whose read `x[0:1]` is past
    # the end, which the guard refuses, so the loop runs as written)
    return n if kind == "unbind" else f"max({n}, 1)"


def _torch_name(cap: Captured, local: set) -> str | None:
    """A name by which the function sees the torch module (`torch`, or one it reads), else None."""
    names = ["torch"] + sorted({n.id for n in fastast.walk(cap.tree) if isinstance(n, ast.Name)})
    for name in names:
        if name not in local:
            found, obj = cap.lookup(name)
            if found and obj is torch:
                return name
    return None


_NO_TORCH = ("a negative dimension is read through `x.movedim(d, 0)`, after `torch.Tensor.size(x, d)` checks that `x` "
             "is a tensor, and the function has no name for torch")


def _walk_of(loop: ast.For, cap: Captured, local: set, torch_name: str | None, tgt=None, it=None):
    """([(element name, sequence, dimension, kind)], trip count[, (enumerate's index, start)]) of
    a walk of slices, or (None, why) (why None where the loop is no such walk)."""
    from .loops import _enumerate_args
    tgt = loop.target if tgt is None else tgt
    it = loop.iter if it is None else it
    one = _pieces_of(it, cap, local)
    if one is not None:
        if one[0] is None:
            return one
        if not isinstance(tgt, ast.Name):
            return None, "the element is unpacked (only a plain name is read by its index)"
        seq, dim, kind = one
        count = _count(ast.unparse(seq), dim, kind, torch_name)
        return ([(tgt.id, seq, dim, kind)], count) if count else (None, _NO_TORCH)
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip" and it.args \
            and not it.keywords and _builtins_ok(cap, local, ("zip", "min")):
        parts = [_pieces_of(a, cap, local) for a in it.args]
        if not any(parts):
            return None, None
        bad = next((p for p in parts if p is not None and p[0] is None), None)
        if bad is not None:
            return bad
        if not all(parts):
            other = next(a for a, p in zip(it.args, parts) if p is None)
            return None, f"`zip` pairs a walk of slices with `{ast.unparse(other)}`, which is not one"
        if not (isinstance(tgt, ast.Tuple) and len(tgt.elts) == len(parts)
                and all(isinstance(e, ast.Name) for e in tgt.elts)):
            return None, "the pairs are not unpacked into one plain name per sequence"
        counts = [_count(ast.unparse(s), d, kind, torch_name) for s, d, kind in parts]
        if not all(counts):
            return None, _NO_TORCH
        return [(e.id, *p) for e, p in zip(tgt.elts, parts)], (
            f"min({', '.join(counts)})" if len(counts) > 1 else counts[0])
    bound = _enumerate_args(it)
    if bound is not None and _builtins_ok(cap, local, ("enumerate",)):
        if not (isinstance(tgt, ast.Tuple) and len(tgt.elts) == 2 and isinstance(tgt.elts[0], ast.Name)):
            return None, None
        return _enumerated(_walk_of(loop, cap, local, torch_name, tgt.elts[1], bound[0]), tgt, bound)
    return None, None


def _view_use(n: ast.Name, parent: dict, cap: Captured, local: set) -> str | None:
    """Why this read of an element may not be read as the slice `x[:, k]` (None where it may);
    see the module's docstring."""
    p = parent.get(n)
    here = f"`{n.id}` at line {n.lineno}"
    if isinstance(p, ast.BinOp) or isinstance(p, ast.AugAssign) and p.value is n \
            or isinstance(p, ast.UnaryOp) and not isinstance(p.op, ast.UAdd):
        return None     # (`+t` is torch.positive: the tensor itself)
    if isinstance(p, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot)) for op in p.ops):
            return f"{here} is compared by identity (`is`), which tells a view that unbind made from `x[:, k]`"
        return None
    if isinstance(p, (ast.If, ast.While, ast.Assert, ast.IfExp)) and p.test is n:
        return None
    if isinstance(p, ast.BoolOp) or isinstance(p, ast.IfExp) or isinstance(p, (ast.List, ast.Tuple)) \
            and isinstance(p.ctx, ast.Load):
        # (`a or b`, `a if c else b`, `[a, b]`: the element itself may be the value, whose use decides)
        why = _view_use(p, parent, cap, local)
        return why and f"{here}, as part of `{ast.unparse(p)}`: {why}"
    if isinstance(p, ast.Subscript) and p.value is n:
        if isinstance(p.ctx, ast.Load):
            return None
        return f"{here} is stored into (`{ast.unparse(p)} = ..`): a view that unbind made may not be changed in place"
    if isinstance(p, ast.Attribute) and p.value is n:
        if not isinstance(p.ctx, ast.Load):
            return f"{here} has its attribute `.{p.attr}` set"
        call = parent.get(p)
        if isinstance(call, ast.Call) and call.func is p:
            if p.attr.startswith("__") or in_place_keyword(call) or not (
                    p.attr in ("item", "tolist") or pure_tensor_method(p.attr)):
                return (f"{here} calls `.{p.attr}()`, which may change it in place (a view that unbind made may not "
                        "be) or is not a known tensor operation")
            return None
        if p.attr in _SAME_ATTRS:
            return None
        return f"{here} reads `.{p.attr}`, which may tell a view that unbind made from `x[:, k]`"
    if isinstance(p, ast.keyword):
        p = parent.get(p)
    if isinstance(p, ast.Call) and p.func is not n:
        f = p.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name is None:
            return f"{here} is passed to a call whose function autovec cannot name"
        if in_place_keyword(p) or name.endswith("_") and not name.endswith("__") or name in _OPERATOR_EFFECTS:
            return f"{here} is passed to `{ast.unparse(f)}`, which may write into it"
        if isinstance(f, ast.Attribute) and name in MUTATORS or name in _TELLING_CALLS:
            return (f"{here} is passed to `{ast.unparse(f)}`, which keeps it or tells it apart from a view that "
                    "`x[:, k]` made")
        return None    # (the planner proves the callee pure, statically or on each call, before it is vectorized)
    return (f"{here} is used as it is (kept, assigned, returned or iterated): the loop keeps its own views that "
            "unbind made")


def unbind_walks(cap: Captured, avoid=()) -> tuple[list, dict]:
    """Walks of `x.unbind(d)` and `x.split(1, d)` as described in the module's docstring. Returns
    ([Walk], {(line, col): why a walk was not moved, as the report says it}). Loops overlapping
    those in `avoid` are left as they are."""
    fn = cap.tree
    local = _local_names(fn)
    out, refused = [], {}
    if not _builtins_ok(cap, local, ("range", "max")):
        return out, refused
    torch_name = _torch_name(cap, local)

    def refuse(loop, why):
        it = loop.iter if isinstance(loop, ast.For) else loop.generators[0].iter
        refused[(loop.lineno, loop.col_offset)] = (
            f"the loop at line {loop.lineno} walks `{ast.unparse(it)}`, whose elements are read as slices "
            f"`x[:, k]` of the tensor only where that is exact; here {why}")

    for loop in _own(fn, (ast.For, ast.ListComp, ast.GeneratorExp)):
        if _overlaps(loop, avoid):
            continue
        if isinstance(loop, ast.For):
            pairs, count, *counter = _walk_of(loop, cap, local, torch_name)
        elif len(loop.generators) == 1 and not loop.generators[0].is_async:
            gen = loop.generators[0]
            pairs, count, *counter = _walk_of(loop, cap, local, torch_name, gen.target, gen.iter)
        else:
            continue
        if pairs is None:
            if count is not None:
                refuse(loop, count)
            continue
        counter = counter[0] if counter else None
        why = _refuse_walk(fn, loop, [(e, seq) for e, seq, _, _ in pairs], cap, local, counter, _view_use)
        unread = _unread(loop, [e for e, *_ in pairs])
        if not why and unread:
            why = (f"`{unread[0]}` is never read in the loop, so nothing would check that its sequence is a tensor "
                   "(or, in `zip`, where the walk stops)")
        if why:
            refuse(loop, why)
            continue
        if counter is not None:
            # (enumerate's index is the range's own: the same Python int at each step and after the loop)
            index, start = counter
            header = f"range({count})" if not start else f"range({start}, {start} + {count})"
        else:
            index, start = f"{pairs[0][0]}_index{loop.lineno}_{loop.col_offset}", 0   # (not `_av_`: reserved)
            header = f"range({count})"
            if index in local:
                refuse(loop, f"the name `{index}` is taken")
                continue
            local.add(index)
        reads = {e: _element(ast.unparse(seq), d, kind, index, -start)[0] for e, seq, d, kind in pairs}
        bases = tuple(_element(ast.unparse(seq), d, kind, index)[1] for e, seq, d, kind in pairs)
        original = _move(loop, reads, index, header)
        views = {b for b, (_, _, d, _) in zip((b for b, _ in bases), pairs) if d < 0}
        for n in fastast.walk(loop):
            if isinstance(n, ast.Call) and ast.unparse(n) in views:
                n._av_view = True     # (made here, read nowhere else in the loop: loops._mapped slices it)
        shown = ", ".join(f"`{e} = {_element(ast.unparse(seq), d, kind, 'k')[0]}`" for e, seq, d, kind in pairs)
        out.append(Walk(loop, original, f"{shown} for k from 0 up", bases))
    return out, refused
