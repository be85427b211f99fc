"""Loops that pad a list of sequences of different lengths into a tensor, one sequence per row
(a collate function's padding, its attention mask beside it), as one masked store per target:
the "ragged" strategy.

    for i, s in enumerate(seqs):                 lens = [len(s) for s in seqs]
        ids[i, :len(s)] = s              ->      m = arange(max(lens)) < tensor(lens)[:, None]
        mask[i, :len(s)] = 1                     ids[:n, :max(lens)][m] = cat(seqs).to(ids.dtype)
                                                 mask[:n, :max(lens)][m] = 1

What it takes: `for i, s in enumerate(L)` (from 0) or `for i in range(len(L))` reading `L[i]`;
a body of stores `T[i, :len(s)] = v` / `T[i][:len(s)] = v` (the length also `s.shape[0]`,
`s.size(0)`, or a name bound to one of them first), each `v` the sequence itself or a number
constant, into tensors the loop neither binds nor reads otherwise.

Why it is exact: the mask's true positions, in row-major order, are the positions the loop
writes, row by row, and the concatenated sequences hold the values in that order; the values
are converted to the target's dtype by the same cast setitem's copy makes, a number constant as
setitem converts it. The run-time check (runtime_ragged) sends anything that could make a store
raise, convert otherwise, or read what another store wrote to the loop as written.
"""
from __future__ import annotations

import ast
import builtins
import math
from dataclasses import dataclass, field

from .. import fastast
from ..frontend import Captured
from .hoist import _resolves

REASON = ("each iteration stores one sequence of the list (or a number) into the first len(s) places of its own row: "
          "all of them become one store under a mask of the lengths per target (checked per call: one dtype, "
          "the target's shape, no shared memory)")


@dataclass
class RaggedPlan:
    loop: ast.For
    seqs: ast.expr                      # the list's expression (enumerate's argument, or the name)
    form: str = "enumerate"             # or "index": `for i in range(len(L))` reading `L[i]`
    stores: list = field(default_factory=list)   # (first line, last line, target name, value (None: the sequence), side)
    loop_id: int = 0
    strategy: str = "ragged"
    reason: str = REASON
    header: str = ""

    def lower(self, namer, runtime):
        return lower(self, namer, runtime)


def _length_of(node, elem, aliases) -> bool:
    """Whether `node` is the sequence's length: len(s), s.shape[0], s.size(0), or an alias."""
    if isinstance(node, ast.Name) and node.id in aliases:
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
            and len(node.args) == 1 and not node.keywords:
        return elem(node.args[0])
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
            and isinstance(node.slice, ast.Constant) and node.slice.value == 0 and type(node.slice.value) is int:
        return elem(node.value.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" \
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0 \
            and type(node.args[0].value) is int and not node.keywords:
        return elem(node.func.value)
    return False


def match(cap: Captured, loop: ast.For, local: set, elsewhere: set) -> RaggedPlan | None:
    if not isinstance(loop, ast.For) or loop.orelse or not loop.body:
        return None
    it, tgt = loop.iter, loop.target
    if isinstance(it, ast.Call) and _resolves(cap, it.func, local, (builtins.enumerate,)):
        if len(it.args) != 1 or it.keywords or not isinstance(tgt, ast.Tuple) or len(tgt.elts) != 2 \
                or not all(isinstance(e, ast.Name) for e in tgt.elts) or tgt.elts[0].id == tgt.elts[1].id:
            return None
        index, name = tgt.elts[0].id, tgt.elts[1].id
        seqs = it.args[0]
        list_name = None
        if not isinstance(seqs, ast.Name):
            return None     # (a name: the loop as written reads it again where a check refuses)
    elif isinstance(it, ast.Call) and _resolves(cap, it.func, local, (builtins.range,)):
        a = it.args
        if it.keywords or len(a) != 1 or not isinstance(tgt, ast.Name) or not isinstance(a[0], ast.Call) \
                or not _resolves(cap, a[0].func, local, (builtins.len,)) or len(a[0].args) != 1 \
                or not isinstance(a[0].args[0], ast.Name):
            return None
        index, name = tgt.id, None
        seqs = a[0].args[0]
        list_name = seqs.id
    else:
        return None
    if "len" in local or not _resolves(cap, ast.Name(id="len", ctx=ast.Load()), local, (builtins.len,)):
        return None

    def elem(node) -> bool:
        if name is not None:
            return isinstance(node, ast.Name) and node.id == name
        return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == list_name \
            and isinstance(node.slice, ast.Name) and node.slice.id == index

    plan = RaggedPlan(loop, seqs, "enumerate" if list_name is None else "index")
    aliases, bound = set(), {index} | ({name} if name else set())
    targets = []
    for st in loop.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and not plan.stores and _length_of(st.value, elem, aliases):
            a = st.targets[0].id
            if a in bound or a in aliases:
                return None
            aliases.add(a)
            bound.add(a)
            continue
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Subscript)):
            return None
        t = st.targets[0]
        # T[i, :len(s)] or T[i][:len(s)]
        if isinstance(t.slice, ast.Tuple) and len(t.slice.elts) == 2:
            base, first, span = t.value, t.slice.elts[0], t.slice.elts[1]
        elif isinstance(t.value, ast.Subscript) and not isinstance(t.value.slice, (ast.Tuple, ast.Slice)):
            base, first, span = t.value.value, t.value.slice, t.slice
        else:
            return None
        if not (isinstance(base, ast.Name) and isinstance(first, ast.Name) and first.id == index
                and isinstance(span, ast.Slice) and span.step is None):
            return None
        if span.lower is None and span.upper is not None and _length_of(span.upper, elem, aliases):
            side = "right"      # (`T[i, :len(s)]`: padding after the sequence)
        elif span.upper is None and isinstance(span.lower, ast.UnaryOp) and isinstance(span.lower.op, ast.USub) \
                and _length_of(span.lower.operand, elem, aliases):
            side = "left"       # (`T[i, -len(s):]`: padding before it, a decoder's batch)
        elif span.upper is None and isinstance(span.lower, ast.BinOp) and isinstance(span.lower.op, ast.Sub) \
                and isinstance(span.lower.left, ast.Name) and span.lower.left.id not in bound | aliases \
                and _length_of(span.lower.right, elem, aliases):
            # (`T[i, L - len(s):]`, L the rows' width: padding before it, where an empty sequence
            # writes nothing; the runtime checks L is the target's width)
            side = ("width", span.lower.left.id)
        else:
            return None
        v = st.value
        if elem(v):
            value = None
        elif isinstance(v, ast.Constant) and type(v.value) in (int, float, bool):
            value = v.value
        elif isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.USub) and isinstance(v.operand, ast.Constant) \
                and type(v.operand.value) in (int, float):
            value = -v.operand.value
        else:
            return None
        if type(value) is float and not math.isfinite(value):
            return None     # (`1e400`: no literal in the generated code spells it)
        targets.append(base.id)
        plan.stores.append((st, base.id, value, side))
    if not plan.stores:
        return None
    if any(t in bound or t == list_name or isinstance(seqs, ast.Name) and t == seqs.id for t in targets):
        return None
    # the targets, the list and `len` read nowhere else in the body (only as the stores read them)
    reads = {n.id for st in loop.body for n in fastast.walk(st) if isinstance(n, ast.Name)}
    widths = {side[1] for _, _, _, side in plan.stores if type(side) is tuple}
    if widths & (set(targets) | {list_name, "len", index} | ({name} if name else set())):
        return None
    if bound & elsewhere or (reads - bound - set(targets) - widths - {list_name, "len"}):
        return None
    # (the passes after this one may change the loop's nodes: what lower reads is kept as it is now)
    plan.header = ast.unparse(loop).splitlines()[0]
    plan.seqs = fastast.clone(plan.seqs)
    plan.stores = [(st.lineno, st.end_lineno, t, v, side) for st, t, v, side in plan.stores]
    return plan


def lower(plan: RaggedPlan, namer, runtime):
    from ..codegen import set_lines
    k = plan.loop_id
    got = namer.new(f"_av_rg{k}")
    loop = plan.loop
    targets = []
    for _, _, t, _, _ in plan.stores:
        if t not in targets:
            targets.append(t)
    values = tuple(v for _, _, _, v, _ in plan.stores)
    which = tuple(targets.index(t) for _, _, t, _, _ in plan.stores)
    sides = tuple("width" if type(side) is tuple else side == "left" for _, _, _, _, side in plan.stores)
    widths = "".join(f"{side[1]}, " if type(side) is tuple else "None, " for _, _, _, _, side in plan.stores)
    # (a target's name may be unbound where the loop never reads it, over no sequence: the loop as
    # the other strategies make it then runs)
    head = ast.parse("\n".join([
        "try:",
        f"    {got} = ({plan.seqs.id}, ({''.join(t + ', ' for t in targets)}), ({widths}))",
        f"except {runtime}.Error:",
        f"    {got} = None",
        f"{got} = {runtime}.rg_guard({k}, {got}, {values!r}, {which!r}, {sides!r})"])).body
    set_lines(head, loop.lineno)
    fast = []
    for j, (first, last, t, v, _) in enumerate(plan.stores):
        node = ast.parse(f"{runtime}.rg_store({t}, {got}, {j})").body[0]
        set_lines([node], first, last)
        fast.append(node)
    test = ast.parse(f"{got} is not None", mode="eval").body
    set_lines([test], loop.lineno)
    ast.fix_missing_locations(ast.Module(body=head + fast, type_ignores=[]))
    return head, test, fast, _display(plan)


def _display(plan: RaggedPlan):
    from ..codegen import set_lines
    s = ast.unparse(plan.seqs)
    lines = [f"_lens = [len(_s) for _s in {s}]",
             f"_mask = torch.arange(max(_lens)) < torch.tensor(_lens)[:, None]"]
    for _, _, t, v, side in plan.stores:
        value = f"torch.cat({s}).to({t}.dtype)" if v is None else repr(v)
        if side == "left" or type(side) is tuple:
            lines.append(f"{t}[:len({s})][torch.arange({t}.shape[1]) >= {t}.shape[1] - torch.tensor(_lens)[:, None]] = {value}")
        else:
            lines.append(f"{t}[:len({s}), :max(_lens)][_mask] = {value}")
    nodes = ast.parse("\n".join(lines)).body
    set_lines(nodes, plan.loop.lineno, plan.loop.end_lineno)
    return nodes
