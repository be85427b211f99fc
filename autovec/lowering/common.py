"""What every independent-iteration strategy shares: extracting the body function and
emitting the guarded vectorized block, its commits, and the untouched original as fallback.

Shape of the emitted code for a `for` loop (names made fresh by the Namer):

    _av_t1 = None
    try:
        _av_t1 = _av.begin(1, range(n))            # trip count and cost model only
        if _av_t1 is not None:
            _av_t1 = _av.guard(_av_t1, mapped, free, calls, writes)
        if _av_t1 is not None:
            def _av_body1(x_i): ...; return (value,)
            _av_o1 = _av_t1.run(_av_body1)
            _av_p1 = <prepare each output: fit, reduce, convert>
    except Exception as _av_e:
        _av_t1 = _av.failed(1, _av_t1, _av_e)
    if _av_t1 is not None:
        <commit: out[...] = ..., acc = ..., lst.extend(...)>
    else:
        <the original loop, unchanged>
"""
from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass, field

from .. import fastast
from ..analysis import names as nm
from ..analysis.loops import (FILL, LOGICAL, OWN, SHIFT, ROW_CLONE, ROW_FIT, inner_conditional, match_subscript,
                              match_subscript_nest)
from ..codegen import expr, set_lines, template
from ..plan import LoopPlan, einsum_letters, indexed


@dataclass(frozen=True)
class Match:
    strategy: str
    plan: LoopPlan
    reason: str


@dataclass
class Lowered:
    """New code for one loop. For a `for` loop, `stmts` replace the loop statement; for a
    comprehension they go right before its statement and `result` replaces the consumer.
    `swaps` maps a consumer call's source to the expression that replaces it."""

    match: Match
    stmts: list
    display: list
    result: str | None = None
    swaps: dict = field(default_factory=dict)
    display_swaps: dict = field(default_factory=dict)
    layout: tuple = ()
    body: tuple | None = None     # (body def, runtime name): a body the batched mode may rewrite
    after: list = field(default_factory=list)   # run after the original loop (its timing)
    tagged: dict = field(default_factory=dict)  # tag -> (body def, runtime name): a `break` condition's
                                                # and running values' own bodies
    express: tuple | None = ()    # ((consumer kind, output position), ..) where the steady state
                                  # may run as one function (lanes.express); None: its token flavour;
                                  # (): no express


def _name(n: str, ctx=ast.Load) -> ast.Name:
    return ast.Name(id=n, ctx=ctx())


class _MapSlices(ast.NodeTransformer):
    """Replace `x[.., i + c, ..]` by the body parameter holding that slice."""

    def __init__(self, plan: LoopPlan):
        self.plan = plan
        self.index = plan.space.index
        start = int(plan.space.enum_start) if plan.space.kind == "elements" else 0
        self.by_key = {(m.base, m.dim, m.offset - start): m for m in plan.mapped}

    def visit_Subscript(self, node: ast.Subscript):
        node = self.generic_visit(node)
        if self.plan.space.kind == "nest" and isinstance(node.ctx, ast.Load):
            return self._nest(node)
        if self.index is None or not isinstance(node.ctx, ast.Load):
            return node
        m = match_subscript(node, self.index)
        if not isinstance(m, tuple):
            return node
        mp = self.by_key.get((ast.unparse(node.value), m[0], m[1]))
        if mp is None:
            return node
        entries = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        rest = entries[:m[0]] + entries[m[0] + 1:]
        if all(isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None
               for e in rest):
            return ast.copy_location(_name(mp.param), node)
        sl = rest[0] if len(rest) == 1 else ast.Tuple(elts=rest, ctx=ast.Load())
        return ast.copy_location(ast.Subscript(value=_name(mp.param), slice=sl, ctx=ast.Load()), node)


def _renamed(node, env: dict):
    """`node` with the names if-conversion renamed (`env`: ifconvert.convert's final names)."""
    if not env:
        return node
    from .ifconvert import _Renamer
    return ast.fix_missing_locations(_Renamer(env).visit(fastast.clone(node)))


def _varying(plan: LoopPlan) -> set[str]:
    v = {m.param for m in plan.mapped} | {t for t, _ in plan.space.elements}
    if plan.space.index:
        v.add(plan.space.index)
    if plan.space.kind == "nest":
        v |= set(plan.value_indices)   # `if i != j:` in a nest: the indices are batched values
    return v


def _nest_visit(self, node: ast.Subscript):
    m = match_subscript_nest(node, [ix for ix, _ in self.plan.space.levels])
    if not isinstance(m, list):
        return node
    mp = next((x for x in self.plan.mapped if x.base == ast.unparse(node.value) and x.levels == tuple(m)), None)
    if mp is None:
        return node
    entries = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    taken = {p for _, p, _ in m}
    rest = [e for p, e in enumerate(entries) if p not in taken]
    if all(isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None for e in rest):
        return ast.copy_location(_name(mp.param), node)
    sl = rest[0] if len(rest) == 1 else ast.Tuple(elts=rest, ctx=ast.Load())
    return ast.copy_location(ast.Subscript(value=_name(mp.param), slice=sl, ctx=ast.Load()), node)


_MapSlices._nest = _nest_visit


class _Items(ast.NodeTransformer):
    """`t.item()` inside a batched body: the tensor in float64 / int64 (Python's precision)."""

    def __init__(self, av):
        self.av = av

    def visit_Call(self, node):
        node = self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args and not node.keywords:
            return ast.copy_location(ast.Call(func=ast.Attribute(value=_name(self.av), attr="item", ctx=ast.Load()),
                                              args=[f.value], keywords=[]), node)
        return node


class _Fills(ast.NodeTransformer):
    """The analysis's `row._av_fill(dim, lo, hi, v)` (`out[i, lo:hi] = v`) as the runtime's
    `AV.fill_range(row, dim, lo, hi, v)`, and its `v._av_own()` (a tensor the iteration made
    and then writes into) as `AV.own(v)`. A store into such a tensor by what may be a boolean
    mask (`r[r < 0] = 0`: a comparison, a call, a name; the only stores left in a body are
    into those) is `AV.masked_put(r, mask, v)`'s `masked_fill_` where it is one."""

    def __init__(self, av):
        self.av = av

    def visit_Assign(self, node):
        node = self.generic_visit(node)
        t = node.targets[0] if len(node.targets) == 1 else None
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and _may_be_mask(t.slice) \
                and not t.value.id.startswith(ROW_CLONE):     # (an outer row's clone: analysis._inner_row_stores)
            # `_av_pv = v; _av_pk = mask; if not AV.masked_put(r, _av_pk, _av_pv): r[_av_pk] = _av_pv`:
            # the value and the index evaluated once, in Python's order; a store that is no
            # masked fill stays the user's own statement
            v, k = ast.Name(id="_av_pv", ctx=ast.Load()), ast.Name(id="_av_pk", ctx=ast.Load())
            call = ast.Call(func=ast.Attribute(value=_name(self.av), attr="masked_put", ctx=ast.Load()),
                            args=[ast.Name(id=t.value.id, ctx=ast.Load()), k, v], keywords=[])
            store = ast.Assign(targets=[ast.Subscript(value=ast.Name(id=t.value.id, ctx=ast.Load()), slice=k,
                                                      ctx=ast.Store())], value=v)
            out = [ast.Assign(targets=[ast.Name(id="_av_pv", ctx=ast.Store())], value=node.value),
                   ast.Assign(targets=[ast.Name(id="_av_pk", ctx=ast.Store())], value=t.slice),
                   ast.If(test=ast.UnaryOp(op=ast.Not(), operand=call), body=[store], orelse=[])]
            return [ast.fix_missing_locations(ast.copy_location(st, node)) for st in out]
        return node

    def visit_Call(self, node):
        node = self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == FILL and len(node.args) in (4, 5) and not node.keywords:
            return ast.copy_location(ast.Call(func=ast.Attribute(value=_name(self.av), attr="fill_range",
                                                                 ctx=ast.Load()),
                                              args=[f.value] + node.args, keywords=[]), node)
        if isinstance(f, ast.Attribute) and f.attr == ROW_FIT and len(node.args) == 2 and not node.keywords:
            return ast.copy_location(ast.Call(func=ast.Attribute(value=_name(self.av), attr="row_fit", ctx=ast.Load()),
                                              args=[f.value] + node.args, keywords=[]), node)
        if isinstance(f, ast.Attribute) and f.attr == OWN and not node.keywords:
            # (the receivers of the methods that made it, checked to be tensors: runtime.own)
            return ast.copy_location(ast.Call(func=ast.Attribute(value=_name(self.av), attr="own", ctx=ast.Load()),
                                              args=[f.value] + node.args, keywords=[]), node)
        return node


def _fills(av: str, stmts: list) -> list:
    """_Fills over a body's statements (a store may become several)."""
    out = []
    for s in stmts:
        s = _Fills(av).visit(s)
        out += s if isinstance(s, list) else [s]
    return out


def _may_be_mask(index: ast.AST) -> bool:
    """Whether a subscript's index may be a boolean mask: a comparison, `~` / `not`, `&` / `|`
    / `^`, a call, a name or an attribute (not a number, slice or tuple)."""
    return isinstance(index, (ast.Compare, ast.Call, ast.Name, ast.Attribute)) \
        or isinstance(index, ast.UnaryOp) and isinstance(index.op, (ast.Invert, ast.Not)) \
        or isinstance(index, ast.BinOp) and isinstance(index.op, (ast.BitAnd, ast.BitOr, ast.BitXor))


class _Unitems(ast.NodeTransformer):
    """`av.item(t)` as the loop's own `t.item()` (`av` possibly wrapped in a batched body's
    probe, `_avp(k, av)`)."""

    def __init__(self, av):
        self.av = av

    def visit_Call(self, node):
        node = self.generic_visit(node)
        f = node.func
        v = f.value if isinstance(f, ast.Attribute) else None
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "_avp" and len(v.args) == 2:
            v = v.args[1]
        if (isinstance(f, ast.Attribute) and f.attr == "item" and isinstance(v, ast.Name)
                and v.id == self.av and len(node.args) == 1 and not node.keywords):
            return ast.copy_location(ast.Call(func=ast.Attribute(value=node.args[0], attr="item", ctx=ast.Load()),
                                              args=[], keywords=[]), node)
        return node


def body_function(plan: LoopPlan, name: str, namer=None, av: str = "_av", convert: bool = False,
                  truth: str = ""):
    """The loop body as a function of its slices. Returns (def, params, layout, reference def):
    `layout[k]` = (value position, payload positions, mask position or None) in the returned tuple.
    With `convert`, data-dependent branches become `where` (ifconvert); the reference def keeps
    the original branches, for the one-time check of iteration 0. `truth`: a name whose value
    the loop uses for its truth alone (a `break` condition), computed as its truth where it
    holds `and` / `or` (ifconvert.truth_statements)."""
    mapper = _MapSlices(plan)
    stmts = [mapper.visit(ast.parse(s).body[0]) for s in plan.body]
    if truth:
        from .ifconvert import truth_only, truth_statements
        at = next((k for k, st in enumerate(stmts) if isinstance(st, ast.Assign) and len(st.targets) == 1
                   and isinstance(st.targets[0], ast.Name) and st.targets[0].id == truth), None)
        if at is not None and truth_only(stmts[at].value):
            varying = _varying(plan) | set().union(set(), *map(nm.stores, stmts[:at]))
            pre, value = truth_statements(stmts[at].value, varying, namer, av, stmts[at])
            new = ast.copy_location(ast.Assign(targets=stmts[at].targets, value=value), stmts[at])
            stmts = stmts[:at] + [ast.fix_missing_locations(st) for st in pre + [new]] + stmts[at + 1:]
    if any(FILL in s or OWN in s or ROW_FIT in s for s in plan.body):
        stmts = _fills(av, stmts)
    params = [m.param for m in plan.mapped] + [s[0] for s in plan.scans]
    if plan.space.kind == "nest":
        params += list(plan.value_indices)
    elif plan.index_as_value:
        params.append(plan.space.index)
    markers = [o.marker for o in plan.outputs]
    pay_markers = [[p[1] for p in o.payloads] for o in plan.outputs]
    all_markers = set(markers) | {p for ps in pay_markers for p in ps}
    ref = None
    masks, env, branches = {}, {}, []
    if plan.items and not convert:
        # the probe must see the loop's own Python numbers
        ref = template("def _av_REF(): pass", _av_REF=name + "_ref")[0]
        ref.args.args = [ast.arg(arg=p) for p in params]
        ref.body = fastast.clone(stmts)
    if plan.items:
        stmts = [_Items(av).visit(s) for s in stmts]
    if convert:
        from .ifconvert import convert as ifconvert
        ref_stmts = [_Unitems(av).visit(fastast.clone(s)) for s in stmts]
        lenient = {o.marker for o in plan.outputs if o.converts_each}
        known = set(params) | set(plan.free)
        stmts, masks, env, branches = ifconvert(stmts, _varying(plan), known, namer, av, all_markers, lenient)
        ref = template("def _av_REF(): pass", _av_REF=name + "_ref")[0]
        ref.args.args = [ast.arg(arg=p) for p in params]
        inits = [ast.parse(f"{m} = None").body[0] for m in sorted(all_markers)]
        ref.body = inits + ref_stmts
    values, layout = [], []
    for o, m, pays in zip(plan.outputs, markers, pay_markers):
        pos = len(values)
        values.append(env.get(m, m))
        ppos = []
        for p in pays:
            ppos.append(len(values))
            values.append(env.get(p, p))
        layout.append([pos, ppos, None])
    for k, (o, m) in enumerate(zip(plan.outputs, markers)):
        if masks.get(m):
            layout[k][2] = len(values)
            values.append(masks[m])
    for c in branches:
        # check-only entries: where each branch runs, so the one-time check runs the original
        # body on an iteration of every branch (an error or a type only that branch has)
        layout.append([None, [], len(values)])
        values.append(c)
    fdef = template("def _av_BODY(): pass", _av_BODY=name)[0]
    fdef.args.args = [ast.arg(arg=p) for p in params]
    fdef.body = stmts + [ast.Return(value=ast.Tuple(elts=[_name(v) for v in values], ctx=ast.Load()))]
    fdef.probes = len(branches)   # trailing check-only values, not shown
    if ref is not None and not convert:
        ref.body.append(ast.Return(value=ast.Tuple(elts=[_name(v) for v in values], ctx=ast.Load())))
    elif ref is not None:
        # same layout, original names; a mask is "did this output happen in iteration 0"
        elts = []
        for m, pays in zip(markers, pay_markers):
            elts += [_name(m)] + [_name(p) for p in pays]
        elts += [ast.parse(f"{m} is not None", mode="eval").body for m in markers if masks.get(m)]
        elts += [ast.Constant(None) for _ in branches]
        ref.body.append(ast.Return(value=ast.Tuple(elts=elts, ctx=ast.Load())))
    return fdef, params, [tuple(x) for x in layout], ref


def _space_expr(plan: LoopPlan, av: str = "_av") -> ast.expr:
    if plan.space.kind == "nest":
        walked = dict(plan.space.walked)
        return expr("(" + "".join(f"{av}.walked_range({walked[lv]}), " if lv in walked else f"range({', '.join(args)}), "
                                  for lv, (_, args) in enumerate(plan.space.levels)) + ")")
    if plan.space.kind == "range" and plan.form == "while":
        # (a counter is the caller's object, not the ints range() makes of it: runtime.counter_range)
        return expr(f"{av}.counter_range({', '.join(plan.space.range_args)})")
    if plan.space.kind == "range":
        return expr(f"range({', '.join(plan.space.range_args)})" + ("[::-1]" if plan.space.reverse else ""))
    return expr("(" + ", ".join(s for _, s in plan.space.elements) + ",)")


def direct_function(plan: LoopPlan, name: str, av: str, display: bool = False):
    """The matmul strategy's batched body: each product becomes an einsum over the batch."""
    from .matmul import KINDS
    levels_of = {}
    for mp in plan.mapped:
        levels_of[mp.param] = tuple(lv for lv, _, _ in mp.levels) if mp.levels else (0,)
    mapper = _MapSlices(plan)
    stmts = [mapper.visit(ast.parse(s).body[0]) for s in plan.body]
    if any(FILL in s or OWN in s or ROW_FIT in s for s in plan.body):
        stmts = _fills(av, stmts)
    letters = "abcdefgh"

    class Products(ast.NodeTransformer):
        def visit_BinOp(self, node):
            if isinstance(node.op, ast.MatMult):
                return self._mm("matmul", node.left, node.right, node)
            return self.generic_visit(node)

        def visit_Call(self, node):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if fname in KINDS and KINDS[fname] and len(node.args) == 2 and not node.keywords:
                return self._mm(fname, node.args[0], node.args[1], node)
            return self.generic_visit(node)

        def _mm(self, kind, a, b, node):
            la = levels_of.get(a.id, ()) if isinstance(a, ast.Name) else ()
            lb = levels_of.get(b.id, ()) if isinstance(b, ast.Name) else ()
            if display and KINDS[kind][1]:
                sa, rest = KINDS[kind][1].split(",")
                sb, so = rest.split("->")
                present = sorted(set(la) | set(lb))
                spec = (f"{''.join(letters[x] for x in la)}{sa},{''.join(letters[x] for x in lb)}{sb}"
                        f"->{''.join(letters[x] for x in present)}{so}")
                return ast.copy_location(expr(f"torch.einsum({spec!r}, _av_A, _av_B)", _av_A=a, _av_B=b), node)
            fn = f"{av}.mm" if not display else "autovec.runtime.mm"
            return ast.copy_location(expr(f"{fn}({kind!r}, _av_A, {la!r}, _av_B, {lb!r}, _av_sizes)", _av_A=a, _av_B=b), node)

    stmts = [Products().visit(s) for s in stmts]
    markers = []
    for o in plan.outputs:
        markers += [o.marker] + [p[1] for p in o.payloads]
    fdef = template("def _av_DIRECT(): pass", _av_DIRECT=name)[0]
    fdef.args.args = [ast.arg(arg=mp.param) for mp in plan.mapped] + ([] if display else [ast.arg(arg="_av_sizes")])
    fdef.body = stmts + [ast.Return(value=ast.Tuple(elts=[_name(x) for x in markers], ctx=ast.Load()))]
    return fdef


def _nest_sum_levels(plan: LoopPlan, o) -> tuple | None:
    """For a loop nest's `target[i, j] += v` whose subscript is distinct level indices (the
    others left out): those levels, in subscript order; else None (a scatter)."""
    if o.op not in ("+", "-"):
        return None
    names = [ix for ix, _ in plan.space.levels]
    keep = []
    for _, _, source, ptype in o.payloads:
        if ptype or source not in names or names.index(source) in keep:
            return None
        keep.append(names.index(source))
    return tuple(keep) if keep else None


def _nest_factors(plan: LoopPlan, o, mapped) -> tuple | None:
    """For a loop nest whose whole body is `target[i, j] += A[i, k] * B[k, j]` (one output, a
    product of two mapped slices, nothing else): their positions among `mapped`, else None."""
    if (len(plan.outputs) != 1 or plan.branches or plan.scans or plan.exit_cond or plan.free
            or plan.callables or plan.items):
        return None
    stmts = [ast.parse(t).body[0] for t in plan.body]
    first = stmts[0]
    if not (isinstance(first, ast.Assign) and isinstance(first.targets[0], ast.Name)
            and first.targets[0].id == o.marker):
        return None
    if [ast.unparse(st) for st in stmts[1:]] != [f"{p[1]} = {p[2]}" for p in o.payloads]:
        return None
    value = _MapSlices(plan).visit(first.value)
    factors = []

    def walk(node):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return walk(node.left) and walk(node.right)
        if isinstance(node, ast.Name):
            at = next((j for j, mp in enumerate(mapped) if mp.param == node.id), None)
            if at is not None:
                factors.append(at)
                return True
        return False

    if not walk(value) or len(factors) != 2:
        return None     # (three factors: einsum's order of products is not the loop's)
    return tuple(factors)


def build(m: Match, namer, convert: bool = False, direct: bool = False, express: bool = True) -> Lowered:
    plan = m.plan
    L = plan.loop_id
    T, O, E = namer.new(f"_av_t{L}"), namer.new(f"_av_o{L}"), namer.new("_av_e")
    BODY = namer.new(f"_av_body{L}")
    AV = namer.runtime
    convert = convert or plan.branches
    exit_code, exit_text, tagged = [], "", {}
    if plan.exit_cond:
        exit_code, exit_text, plan, tagged = _exit_code(plan, T, L, namer, AV, convert)
        m = Match(m.strategy, plan, m.reason)
    body_def, params, layout, ref_def = body_function(plan, BODY, namer, AV, convert)
    mapped = indexed(plan)      # (bounds-checked by the guard, reads at other offsets of a walked tensor too)
    store_keys = {(o.target, o.dim, o.offset) for o in plan.outputs if o.kind == "store"}
    nest = plan.space.kind == "nest"
    lead = len(plan.space.levels) if nest else 1
    # a nest's read of the very element it stores (`x[i, j] = x[i, j] * s`, analysis._own_element_reads)
    nest_keys = {(o.target, o.nest_rows) for o in plan.outputs if o.kind == "store" and nest}
    mapped_expr = expr("(" + "".join(
        (f"({mp.base}, {mp.levels!r}, 0, "
         f"{int((mp.base, tuple((lv, off) for lv, _, off in mp.levels)) in nest_keys)}), " if nest else
         f"({mp.base}, {mp.dim}, {mp.offset}, {int((mp.base, mp.dim, mp.offset) in store_keys or mp.ahead)}), ")
        for mp in mapped) + ")")
    free_expr = expr("(" + "".join(f"{f}, " for f in plan.free) + ")")
    # ("@param_methods(..)": runtime.param_methods's check of a helper's calls of methods of its
    # arguments, analysis.loops._bound_methods)
    calls_expr = expr("(" + "".join(f"{AV}.{c[1:].replace('{AV}', AV)}, " if c.startswith("@") else f"{c}, "
                                    for c in plan.callables) + ")")
    writes = []
    for o in plan.outputs:
        # a fresh output (allocated right before the loop, analysis/_fresh_allocation) is a new
        # tensor: it shares memory with nothing, so the guard skips its aliasing check
        kind = "fresh" if o.consumer == "fresh" else "store"
        if o.kind == "store" and nest:     # (the name last: runtime._one_output)
            writes.append(f"('{kind}', {o.target}, 0, {o.nest_rows!r}, {o.target!r})")
        elif o.kind == "store":
            writes.append(f"('{kind}', {o.target}, {o.dim}, {o.offset}, {o.target!r})")
        elif o.kind == "append" and o.target and not o.consumer and f"('list', {o.target})" not in writes:
            # (once per list name: the guard refuses two names that are one list, whose appends
            # the loop interleaves; one name's several appends are laid out in the loop's order)
            writes.append(f"('list', {o.target})")
        elif o.kind == "accum" and o.joined != -1:     # (once per running value: joined updates are one)
            writes.append(f"('accum', {o.target}, {int(o.inplace)})")
        elif o.kind == "best":
            writes.append(f"('best', {o.target})")
        elif o.kind == "scatter" and o.joined != -1:     # (once per tensor: joined scatters are one)
            # (a part of the loop's own row: the store's place and name, runtime._one_output)
            writes.append(f"('scatter', {o.target}, 0, 0, {o.target!r})" if o.row_part else f"('scatter', {o.target})")
        elif o.kind == "cat":
            writes.append(f"('cat', {o.target})")
    for name in plan.fission_stores:
        writes.append(f"('seq', {name})")    # (fission: stored into by the loop that stays)
    writes_expr = expr("(" + "".join(w + ", " for w in writes) + ")")

    prepare, commit, display_tail = [], [], []
    # where the body hands out more than one value (or running values), a stacked or stored
    # batch is checked against the others: the loop's stack and stores copy (Token.shares_output)
    oth = f", others={O}" if len(plan.outputs) > 1 or plan.scans else ""
    kept = {}          # value text -> the batch name of a list the loop keeps, appended once an iteration
    commit_last = []   # names bound to such a list's last element, after every other commit
    product_first = None    # a nest's sum of products: (its runtime.nest_product call, its result)
    releases = []   # (fresh output, its fill): not held while the batch is computed (Token.release)
    result, swaps, display_swaps = None, {}, {}
    plain = []     # (P, consumer, output position, new memory) of each `P = consume(..)` the express may take (lanes.express)
    whole = []     # (output name, "store", output position, new memory) of a fresh output the batch may become whole
    whole_commits = set()     # (their commit statements: skipped where the express answered the batch)
    for k, o in enumerate(plan.outputs):
        if o.joined == -1 or o.record and o.record[1] > 0:
            continue      # a later append into a list, or part of a literal: with the first one's below
        P = namer.new(f"_av_p{L}_{k}")
        pos, ppos, mpos = layout[k]
        ok = show = f"{O}[{pos}]"
        mask = f"{O}[{mpos}]" if mpos is not None else "None"
        if o.record:
            # the parts of an appended literal, each a batch, put back together per element
            shape, _, count = o.record
            members = [(layout[j][0], x) for j, x in enumerate(plan.outputs)
                       if x.kind == "append" and x.target == o.target and x.record and x.record[0] == shape]
            group = [(q, x.pytype) for q, x in members]
            shares = tuple(_may_share(x.value, plan) for _, x in members)
            params = ", ".join(f"_av_c{j}" for j in range(count))
            flat = f".flatten(0, {lead - 1})" if nest else ""
            if nest and mpos is not None:
                mask += flat
            build = (f"{AV}.records(lambda {params}: {shape}, (" + "".join(f"{O}[{q}]{flat}, " for q, _ in group)
                     + "), (" + "".join(f"{T}.py({q}, {t!r}), " for q, t in group) + f"), {mask}, {T}, {shares!r})")
            cols = ", ".join(f"{O}[{q}]" + (f"[{mask}]" if mpos is not None else "") + (".tolist()" if t else "")
                             for q, t in group)
            show = f"[{shape} for {params}{',' if count == 1 else ''} in zip({cols})]"
            prepare += template(f"_av_P = {build}", _av_P=P)
            if plan.form == "comprehension":
                result = namer.new(f"_av_r{L}")
                commit += template("_av_R = _av_P", _av_R=result, _av_P=P)
                display_tail.append(f"{result} = {show}")
            else:
                commit += template(f"{o.target}.extend(_av_P)", _av_P=P)
                display_tail.append(f"{o.target}.extend({show})")
            continue
        if o.joined > 1 and o.kind == "accum":
            # several updates of one running value an iteration: their values (and masks)
            # interleaved in the loop's order, one accumulation (runtime.accum_join)
            group = [(layout[j], x) for j, x in enumerate(plan.outputs) if x.kind == "accum" and x.target == o.target]
            J = namer.new(f"_av_j{L}_{k}")
            prepare += template(f"_av_J = {AV}.accum_join((" + "".join(f"{O}[{lp[0]}], " for lp, _ in group) + "), ("
                                + "".join(f"{O}[{lp[2]}], " if lp[2] is not None else "None, " for lp, _ in group)
                                + "), (" + "".join(f"{T}.py({lp[0]}, {x.pytype!r}), " for lp, x in group) + "))",
                                _av_J=J)
            ok, mask, joined_py = f"{J}[0]", f"{J}[1]", f"{J}[2]"
            show = "torch.stack([" + ", ".join(f"{O}[{lp[0]}]" for lp, _ in group) + "], 1).flatten(0, 1)"
            keep = _interleaved_masks(O, [lp[2] for lp, _ in group])
            if keep:
                show = f"{show}[{keep}]"
        elif o.joined > 1:
            group = [(layout[j][0], x.pytype) for j, x in enumerate(plan.outputs)
                     if x.kind == "append" and x.target == o.target]
            ok = (f"{AV}.interleave((" + "".join(f"{O}[{q}], " for q, _ in group) + "), ("
                  + "".join(f"{T}.py({q}, {t!r}), " for q, t in group) + f"), {o.consumer!r})")
            show = "torch.stack([" + ", ".join(f"{O}[{q}]" for q, _ in group) + "], 1).flatten(0, 1)"
        if nest and o.kind != "store":
            ok = f"{ok}.flatten(0, {lead - 1})"
            mask = f"{mask}.flatten(0, {lead - 1})" if mpos is not None else mask
        py = joined_py if o.joined > 1 and o.kind == "accum" else f"{T}.py({pos}, {o.pytype!r})"
        if o.kind == "store":
            rows = ", ".join(f"{T}.rows({off}, {lv})" for lv, off in o.nest_rows) if nest else f"{T}.rows({o.offset})"
            region = o.index_src.format(rows)
            # reading the region: the tensor itself when the loop covers its whole dimension
            compact = o.index_src.replace(" ", "")
            simple = not nest and compact == f"{o.target}[" + ":," * o.dim + "{}]"
            if simple:
                read = f"{T}.region({o.target}, {o.offset}, {o.dim})"
            elif nest and compact == f"{o.target}[{{}}]":
                read = f"{T}.nest_region({o.target}, {tuple(o.nest_rows)!r})"
            else:
                read = region
            RG = namer.new(f"_av_g{L}_{k}")   # the region read once, for fit_store and replaces
            ok_s, mask_s = (ok, mask) if nest else (f"{T}.ascending({ok})", f"{T}.ascending({mask})")
            # an update computes as a Python number does; unconditional into an existing output,
            # it runs in place at the commit, as the loop's own operation
            # (not through an index that may be a tensor, `x[i, idx] += v`: there the region read is
            # a copy, which an in-place update would change and drop; the store writes it back)
            basic = _basic_region(o.index_src)
            update = bool(o.op) and mask == "None" and o.consumer != "fresh" and basic
            extra = f", {(pos, o.pytype)!r}" + (", inplace=True" if update else "") \
                + (f", method={o.method!r}" if o.method else "") \
                + (", indexed=True" if not o.op and not basic else "") + _list_slots(o, plan, simple)
            # a value read back in the iteration (analysis._forwarded): the row's dtype and shape already
            exact = f"\n_av_AV.exact({ok_s}, _av_RG, {o.dim}, {lead}, {T}.py({pos}, {o.pytype!r}))" if o.exact else ""
            prepare += template(f"_av_RG = {read}{exact}\n_av_P = _av_AV.fit_store({ok_s}, _av_RG, {o.dim}, {mask_s}, "
                                f"{o.op!r}, {lead}, {T}{extra})", _av_P=P, _av_AV=AV, _av_RG=RG)
            if update and any(x.kind == "store" and x.target == o.target for x in plan.outputs[:k]):
                # (an update after another store into the same tensor, `pos[i, 0] += a; pos[i, 1] += b`:
                # its region read again at the commit, after the store before it; the one read at the
                # prepare is a view from before that store, which autograd refuses to change in place
                # where the store made the tensor require grad)
                commit += template(f"_av_AV.update({read}, _av_P[0], _av_P[1])", _av_P=P, _av_AV=AV)
            elif update:
                commit += template("_av_AV.update(_av_RG, _av_P[0], _av_P[1])", _av_P=P, _av_AV=AV, _av_RG=RG)
            elif o.consumer == "fresh":
                # a freshly allocated output that this call overwrites entirely becomes the batch
                # (under a condition that holds nowhere, fit_store's `unchanged`: nothing is written)
                none = f"if _av_P is _av_AV.unchanged:\n    {o.target} = _av_AV.unreleased({o.target}, {T})\nel" \
                    if mask != "None" else ""
                commit += template(f"{none}if _av_AV.replaces({o.target}, _av_RG, _av_P, {T}{oth}):\n    {o.target} = _av_AV.owned(_av_P)\n"
                                   f"else:\n    {o.target} = _av_AV.unreleased({o.target}, {T})\n    {region} = _av_P",
                                   _av_P=P, _av_AV=AV, _av_RG=RG)
                if o.fill and mask == "None" and all(t != o.target for t, _ in releases):
                    releases.append((o.target, o.fill))
                # (the rows are all of it where the loop covers them from 0: the region is the output)
                covers = simple and not o.offset or nest and compact == f"{o.target}[{{}}]" \
                    and tuple(o.nest_rows) == tuple((lv, 0) for lv in range(lead))
                # (not an in-place method's: the express drops leading 1s and casts, fit_store checks it;
                # nor a value read back: runtime.exact checks it)
                if covers and mask == "None" and ok == f"{O}[{pos}]" and not oth and not o.method and not o.exact:
                    # (the express may answer it; rows along another dimension: "store<dim>", the
                    # batch as the broadcast body computed it, runtime.fit_store's `unmoved`)
                    whole.append((o.target, f"store{o.dim or ''}", pos, _new_memory(o.value, plan)))
                    whole_commits.add(id(commit[-1]))
            elif mask != "None":
                # (fit_store's `unchanged` where the condition holds nowhere: the loop writes nothing)
                commit += template(f"if _av_P is not _av_AV.unchanged:\n    {region} = _av_P", _av_P=P, _av_AV=AV)
            else:
                commit += template(f"{region} = _av_P", _av_P=P)
            disp_region = o.index_src.format(", ".join(":" for _ in range(lead)) if nest
                                             else _rows_text(plan, o.offset))
            aug = {"": "=", "+": "+=", "-": "-=", "*": "*=", "/": "/="}[o.op]
            # a reversed loop's values come in its own order; the region is in ascending order
            val = _fit_text(f"{ok}.flip(0)" if plan.space.reverse and not nest else ok, o)
            if mpos is not None:
                display_tail.append(f"{disp_region} = torch.where({mask}, {val}, {disp_region})"
                                    if not o.op else f"{disp_region} {aug} torch.where({mask}, {val}, 0)")
            else:
                display_tail.append(f"{disp_region} {aug} {val}")
        elif o.kind == "append" and plan.form == "comprehension":
            result = namer.new(f"_av_r{L}")
            views = ", views=True" if o.consumer == "list" and _may_share(o.value, plan) else ""
            prepare += template(f"_av_P = _av_AV.consume({o.consumer!r}, {ok}, {mask}, {py}, {T}{views}{oth})", _av_P=P, _av_AV=AV)
            _plain_consume(plain, P, o, pos, ok == f"{O}[{pos}]" and mask == "None" and not oth, plan)
            if o.consumer == "list" and _free_name(o.value, plan):
                commit += template(f"_av_R = [{o.value}] * _av_P.__len__()", _av_R=result, _av_P=P)   # `[w for _ in ..]`: w itself
            else:
                commit += template("_av_R = _av_P", _av_R=result, _av_P=P)
            display_tail.append(f"{result} = {_consume_text(o.consumer, ok, mpos is not None and mask)}")
        elif o.kind == "append" and o.consumer == "batch":
            # fission: the batched values the sequential loop reads row by row
            # (views of the input where the loop's values are: `v = x[t].view(-1)` read after the loop)
            # (walking back, the batch is computed from a flipped copy: "flipped", where its rows
            # must then be the input's views, which they are not)
            views = (", views='flipped'" if plan.space.reverse else ", views=True") if _may_share(o.value, plan) else ""
            prepare += template(f"{o.target} = _av_AV.consume('batch', {ok}, {mask}, {py}, {T}{views})", _av_AV=AV)
            display_tail.append(f"{o.target} = {ok}")
        elif o.kind == "append" and o.consumer:
            # (`flip`: the list reversed right after the loop; the batch's rows taken in the other
            # order, mask and all. Not the express's inline consumers: the token flavour's prepare)
            flip = (", flip=True" if o.flip else "") + (", guarded=True" if o.consumer_guard else "")
            prepare += template(f"_av_P = _av_AV.consume({o.consumer!r}, {ok}, {mask}, {py}, {T}{oth}{flip})",
                                _av_P=P, _av_AV=AV)
            if not o.flip:
                _plain_consume(plain, P, o, pos, ok == f"{O}[{pos}]" and mask == "None" and not oth, plan)
            swaps[o.consumer_src] = expr("(_av_P if _av_T is not None else _av_ORIG)", _av_P=P, _av_T=T,
                                         _av_ORIG=ast.parse(o.consumer_src, mode="eval").body)
            if o.consumer_guard:
                # `C(out) if out else D`: the list the batch leaves is empty, so its truth is the
                # batch's rows (stack and tensor: one row per element appended)
                guard = ast.parse(o.consumer_guard, mode="eval").body
                swaps[o.consumer_guard] = expr("((_av_P if len(_av_P) else _av_D) if _av_T is not None else _av_ORIG)",
                                               _av_P=P, _av_T=T, _av_D=guard.orelse, _av_ORIG=guard)
            if o.flip:
                show, fmask = f"{show}.flip(0)", mpos is not None and f"{mask}.flip(0)"
            else:
                fmask = mpos is not None and mask
            display_swaps[o.consumer_src] = expr(_consume_text(o.consumer, show, fmask))
            if o.consumer_guard:
                shown = expr(_consume_text(o.consumer, show, fmask))
                display_swaps[o.consumer_guard] = expr("(_av_S if len(_av_S) else _av_D)", _av_S=shown,
                                                       _av_D=ast.parse(o.consumer_guard, mode="eval").body.orelse)
        elif o.kind == "append":
            group = [x for x in plan.outputs if x.kind == "append" and x.target == o.target] if o.joined > 1 else [o]
            # (every value appended to the list in the loop as written: branches merged into one
            # batch may hold a view of the input in one of them)
            values = [x.value for x in group] + _appended(plan, o.target)
            views = ", views=True" if any(_may_share(v, plan) for v in values) else ""
            prepare += template(f"_av_P = _av_AV.consume('list', {ok}, {mask}, {py}, {T}{views})", _av_P=P, _av_AV=AV)
            # (the list's every value is this one: not one side of a branch whose other side
            # appends another, merged into this output, whose batch then holds either)
            one = o.joined <= 1 and all(_same_text(v, o.value) for v in values)
            if one and _free_name(o.value, plan):
                # `out.append(w)` of a tensor from outside the loop: the loop's list holds w itself
                commit += template(f"{o.target}.extend([{o.value}] * _av_P.__len__())", _av_P=P)
            else:
                commit += template(f"{o.target}.extend(_av_P)", _av_P=P)
                if one:
                    kept.setdefault(o.value.strip(), (P, mpos))
                elif o.joined > 1 and len(_appended(plan, o.target)) == len(group) and mpos is None \
                        and not any(x.cond for x in group) and not plan.two_way:
                    # k appends an iteration, none under a condition (`outs.append(~f); outs.append(f)`):
                    # the j-th value's last one is the list's k - j-th element from the end
                    for j, x in enumerate(group):
                        if sum(_same_text(x.value, y.value) for y in group) == 1:
                            kept.setdefault(x.value.strip(), (P, None, len(group) - j))
            sel = f"{show}[{mask}]" if mpos is not None else show
            display_tail.append(f"{o.target}.extend({sel}.tolist())" if o.pytype else f"{o.target}.extend({sel}.unbind(0))")
        elif o.kind == "accum":
            flags = (", zeros=True" if o.fill == "0" else "") + (", signed=True" if o.signed else "")
            if o.payloads:    # `acc = acc + t1 - t2`: the terms checked and combined (analysis._terms_output)
                ok = (f"{AV}.sum_terms({o.target}, {ok}, {py}, (" + "".join(f"{O}[{pp}], " for pp in ppos) + "), ("
                      + "".join(f"{T}.py({pp}, {p[3]!r}), " for pp, p in zip(ppos, o.payloads)) + f"), "
                      f"{tuple(p[4] for p in o.payloads)!r})")
                # (a Python number in the loop only where every term is one: a product's Python
                # numbers beside tensor factors give tensors, runtime._prod_terms)
                py = f"({py} and " + " and ".join(f"{T}.py({pp}, {p[3]!r})" for pp, p in zip(ppos, o.payloads)) + ")"
            if o.joined > 1 and any(x.signed for x in plan.outputs if x.kind == "accum" and x.target == o.target):
                flags += "" if o.signed else ", signed=True"
            prepare += template(f"_av_P = _av_AV.accumulate({o.target}, {ok}, {o.op!r}, {o.inplace}, {mask}, {py}{flags})",
                                _av_P=P, _av_AV=AV)
            if not o.payloads and not nest and o.joined <= 1:
                # (the express takes the same accumulate: of the accumulator the call hands it in
                # `writes`, the batch's mask, the loop's Python numbers as Token.py tells them)
                entry = f"('accum', {o.target}, {int(o.inplace)})"
                plain.append((P, ("accum", o.op, bool(o.inplace), o.fill == "0", writes.index(entry), mpos,
                                  bool(o.pytype), o.signed), pos, False))
            commit += template(f"{o.target} = _av_AV.commit_accum({o.target}, _av_P, {o.op!r}, {o.inplace})", _av_P=P, _av_AV=AV)
            if o.payloads:
                ok = f"({show} " + " ".join(f"{p[4]} {O}[{pp}]" for pp, p in zip(ppos, o.payloads)) + ")"
            sel = show if o.joined > 1 else f"{ok}[{mask}]" if mpos is not None else ok
            # over the iterations only: dimension 0 (a mask or a nest's flatten leaves them there)
            total = f"{sel}.{'prod' if o.op == '*' else 'sum'}(0)" + (".item()" if o.pytype else "")
            if o.op in ("max", "min"):
                fn = "maximum" if o.op == "max" else "minimum"
                display_tail.append(f"{o.target} = torch.{fn}({o.target}, {sel}.a{o.op}(0))")
                continue
            if o.op == "lse":
                display_tail.append(f"{o.target} = torch.logaddexp({o.target}, {sel}.logsumexp(0))")
                continue
            if o.op in ("|", "&", "lor", "land", "or", "and"):
                red = "any" if o.op in ("|", "lor", "or") else "all"
                display_tail.append(f"{o.target} = {o.target} {o.op} bool({sel}.{red}(0))" if o.op in ("or", "and") else
                                    f"{o.target} {o.op}= {sel}.{red}(0)" if o.op in ("|", "&") and o.inplace else
                                    f"{o.target} = {o.target} {o.op} {sel}.{red}(0)" if o.op in ("|", "&") else
                                    f"{o.target} = torch.logical_{o.op[1:]}({o.target}, {sel}.{red}(0))")
                continue
            display_tail.append(f"{o.target} {o.op}= {total}" if o.inplace
                                else f"{o.target} = {o.target} {o.op} {total}")
        elif o.kind == "best":
            pays = "(" + "".join(f"({O}[{pp}], {T}.py({pp}, {p[3]!r})), "
                                 for pp, p in zip(ppos, o.payloads)) + ")"
            # values that are views of an input in the loop (`best = x[k]`) must be views of it here
            shared = (_may_share(o.value, plan) and not o.pytype,) + tuple(
                _may_share(p[2], plan) and not p[3] for p in o.payloads)
            views = f", {T}, {shared!r}"     # (the token also where none is: a value of its own is copied)
            unset = ", none_start=True" if o.none_start else ""
            sel = f", mask={mask}" if mpos is not None else ""     # (under a condition: where it holds)
            prepare += template(f"_av_P = _av_AV.best({o.target}, {ok}, {o.op!r}, {py}, {pays}{views}{unset}{sel})",
                                _av_P=P, _av_AV=AV)
            names = [o.target] + [p[0] for p in o.payloads]
            commit += template(f"if _av_P is not None:\n    {', '.join(names)}, = _av_P", _av_P=P)
            fn = "argmax" if o.op in (">", ">=") else "argmin"
            if mpos is not None:
                display_tail.append(f"_rows = {mask}.nonzero()[:, 0]  # the iterations where the condition holds")
                ok = f"{ok}[_rows]"
            display_tail.append(f"_j = {ok}.{fn}()  # {'first' if o.op in ('>', '<') else 'last'} best wins on ties")
            display_tail.append(f"if {ok}[_j] {o.op} {o.target}:\n    {', '.join(names)} = "
                                + ", ".join([f"{ok}[_j]"] + [f"{O}[{pp}]{'[_rows]' if mpos is not None else ''}[_j]"
                                                              for pp in ppos]))
        elif o.kind == "scatter" and o.joined > 1:
            # several scatters into one tensor an iteration: their writes interleaved in the
            # loop's order, one scatter (runtime.scatter_join)
            group = [(layout[j], x) for j, x in enumerate(plan.outputs) if x.kind == "scatter" and x.target == o.target]
            op = o.op if all(x.op == o.op for _, x in group) else "+"
            parts = "(" + "".join(
                f"({O}[{lp[0]}], (" + "".join(f"{O}[{pp}], " for pp in lp[1]) + "), "
                + (f"{O}[{lp[2]}]" if lp[2] is not None else "None") + f", {x.op!r}, {T}.py({lp[0]}, {x.pytype!r})), "
                for lp, x in group) + ")"
            prepare += template(f"_av_P = _av_AV.scatter_join({o.target}, {parts}, {op!r})", _av_P=P, _av_AV=AV)
            commit += template(f"_av_AV.scatter_commit({o.target}, _av_P, {op!r})", _av_P=P, _av_AV=AV)
            k = len(group[0][0][1])
            keep = _interleaved_masks(O, [lp[2] for lp, _ in group])
            sel = ""
            if keep:
                display_tail.append(f"_keep = {keep}")     # (each write where its condition holds)
                sel = "[_keep]"
            ix = ", ".join("torch.stack([" + ", ".join(f"{O}[{lp[1][d]}]" for lp, _ in group) + f"], 1).flatten(){sel}"
                           for d in range(k))
            val = "torch.stack([" + ", ".join((f"-{O}[{lp[0]}]" if x.op == "-" and op == "+" else f"{O}[{lp[0]}]")
                                              for lp, x in group) + f"], 1).flatten(0, 1){sel}"
            display_tail.append(f"{o.target}.index_put_(({ix},), {'-' if op == '-' else ''}{val}, accumulate=True)"
                                if op else f"{o.target}[{ix}] = {val}  # the last write to each index wins")
        elif o.kind == "scatter":
            idx = "(" + "".join(f"{O}[{pp}]" + (f".flatten(0, {lead - 1})" if nest else "") + ", "
                                for pp in ppos) + ")"
            keep = _nest_sum_levels(plan, o) if nest and mpos is None else None
            factors = _nest_factors(plan, o, mapped) if keep is not None else None
            if factors is not None:
                # a sum of products alone: one einsum over the tensors, before any body runs
                # (runtime.nest_product); where it does not apply, the body and nest_sum below
                first = template(f"_av_P = _av_AV.nest_product({o.target}, {T}, {factors!r}, {keep!r}, {o.op!r}, {o.fill == '0'})",
                                 _av_P=P, _av_AV=AV)
                product_first = (first, P)
                eq = (",".join(einsum_letters(mapped[j].levels) for j in factors) + "->"
                      + einsum_letters([(lv, d, 0) for d, lv in enumerate(keep)]))
                ops = ", ".join(mapped[j].base for j in factors)
                region = ", ".join(":" for _ in keep)
                display_tail.append(f"{o.target}[{region}] {'+=' if o.op == '+' else '-='} "
                                    f"torch.einsum({eq!r}, {ops})")
            if keep is not None:
                # `C[i, j] += A[i, k] * B[k, j]`: each written element is the sum over the levels
                # the subscript leaves out (runtime.nest_sum; the scatter where it cannot)
                raw = "(" + "".join(f"{O}[{pp}], " for pp in ppos) + ")"    # (flattened only for the scatter)
                prepare += template(f"_av_P = _av_AV.nest_sum({o.target}, {O}[{pos}], {raw}, {keep!r}, {o.op!r}, {T}, {o.fill == '0'})",
                                    _av_P=P, _av_AV=AV)
                commit += template(f"_av_AV.scatter_commit({o.target}, _av_P, {o.op!r})", _av_P=P, _av_AV=AV)
                left = tuple(lv for lv in range(lead) if lv not in keep)
                region = ", ".join(":" for _ in keep)
                aug = "+=" if o.op == "+" else "-="
                ordered = keep != tuple(sorted(keep))
                val = f"{O}[{pos}].sum({left if len(left) != 1 else left[0]})" if left else f"{O}[{pos}]"
                if ordered:
                    val += f".permute({tuple(sorted(keep).index(lv) for lv in keep)})"
                if factors is None:
                    display_tail.append(f"{o.target}[{region}] {aug} {val}")
                continue
            # (a per-bin max / min / product: how the loop wrote it, and whether its values are Python numbers)
            # (for a store through a tensor of indices too: index_put converts Python numbers alone)
            form = f", {o.consumer!r}, {py}" if o.op in ("max", "min", "*") else ""
            prepare += template(f"_av_P = _av_AV.scatter_prep({o.target}, {ok}, {idx}, {o.op!r}, {mask}"
                                f"{form or f', py={py}'}{', chained=True' if o.chained else ''})", _av_P=P, _av_AV=AV)
            commit += template(f"_av_AV.scatter_commit({o.target}, _av_P, {o.op!r})", _av_P=P, _av_AV=AV)
            sel = (lambda t: f"{t}[{mask}]") if mpos is not None else (lambda t: t)
            ix = ", ".join(sel(f"{O}[{pp}]") for pp in ppos)
            if form:
                # one scatter_reduce_ from the bins' own values (several indices: the indexed
                # dimensions flattened into one, a view of a contiguous target)
                val = sel(ok)
                k = len(ppos)
                flat = o.target if k == 1 else f"{o.target}.flatten(0, {k - 1})"
                lin = sel(f"{O}[{ppos[0]}]")
                for d in range(1, k):
                    lin = f"({lin}) * {o.target}.shape[{d}] + {sel(f'{O}[{ppos[d]}]')}"
                red = {"max": "amax", "min": "amin", "*": "prod"}[o.op]
                display_tail.append(f"{flat}.scatter_reduce_(0, ({lin}).view(-1, *[1] * ({val}.dim() - 1))"
                                    f".expand_as({val}), {val}, {red!r})  # include_self: from each bin's own value")
            elif o.op:
                val = sel(ok) if o.op == "+" else f"-{sel(ok)}"
                display_tail.append(f"{o.target}.index_put_(({ix},), {val}, accumulate=True)")
            else:
                display_tail.append(f"{o.target}[{ix}] = {sel(ok)}  # the last write to each index wins")
        elif o.kind == "cat":
            prepare += template(f"_av_P = _av_AV.cat_accum({o.target}, {ok}, {o.dim}, {mask}, {T})", _av_P=P, _av_AV=AV)
            commit += template(f"{o.target} = _av_AV.commit_accum({o.target}, _av_P, '+', False)", _av_P=P, _av_AV=AV)
            flat = f"{ok}.flatten(0, 1)" if o.dim == 0 else f"{ok}.movedim(0, {o.dim}).flatten({o.dim}, {o.dim + 1})"
            display_tail.append(f"{o.target} = torch.cat([{o.target}, {flat}], dim={o.dim})")
        elif o.kind in ("scan", "linrec"):
            j = [s[0] for s in plan.scans].index(o.target)
            prepare += template(f"_av_P = {T}.scan_final({j})", _av_P=P)
            commit += template(f"{o.target} = _av_AV.commit_scan({o.target}, _av_P, {o.inplace})", _av_P=P, _av_AV=AV)
            display_tail.append(
                f"{o.target} = {o.target}.copy_({o.target}_running[-1]) if isinstance({o.target}, torch.Tensor) "
                f"else {o.target}_running[-1]" if o.inplace and not o.pytype      # `s += v` updates a tensor in place
                else f"{o.target} = {o.target}_running[-1]")
            for pname, *_ in (o.payloads if o.kind == "scan" and o.op not in ("+", "-", "*") else ()):
                jp = [s[0] for s in plan.scans].index(pname)
                PP = namer.new(f"_av_p{L}_{k}")
                prepare += template(f"_av_PP = {T}.scan_final({jp})", _av_PP=PP)
                commit += template(f"{pname} = _av_PP", _av_PP=PP)
                display_tail.append(f"{pname} = {pname}_running[-1]")
        elif o.kind == "last":
            views = ", True" if _may_share(o.value, plan) and not o.pytype else ""
            prepare += template(f"_av_P = _av_AV.last({ok}, {mask}, {py}, {T}{views})", _av_P=P, _av_AV=AV)
            commit += template(f"if _av_P is not None:\n    {o.target}, = _av_P", _av_P=P)
            display_tail.append(f"{o.target} = {ok}[-1]" if mpos is None
                                else f"{o.target} = {ok}[{mask}][-1]")
    # a name whose last value is also the last element of a list the loop keeps (`out.append(y)`
    # and `y` read after the loop, a running value and its trace, the loop's own element): the
    # loop leaves one tensor in both places, so the name is bound to the list's element itself
    same = [o.target for o in plan.outputs if o.target in kept and (
        o.kind == "last" and layout[plan.outputs.index(o)][2] == kept[o.target][1]    # (under the same mask)
        or o.kind in ("scan", "linrec") and not o.inplace and not o.exclusive and kept[o.target][1] is None)]
    same += [name for name in plan.live_after if name in kept and name != plan.space.index
             and kept[name][1] is None]
    for name in same:
        back = kept[name][2] if len(kept[name]) > 2 else 1
        commit_last.append(template(f"if _av_P:\n    {name} = _av_P[-{back}]", _av_P=kept[name][0]))
    for j, name in enumerate(plan.live_after):
        if name == plan.space.index:
            after = f" + {plan.space.range_args[2]}" if plan.form == "while" else ""
            commit += template(f"{name} = {T}.last_index(){after}")
            display_tail.append(f"{name} = {_last_text(plan)}{after}")
        else:
            pos = [t for t, _ in plan.space.elements].index(name)
            commit += template(f"{name} = {T}.last_element({pos})")
            display_tail.append(f"{name} = {plan.space.elements[pos][1]}[-1]")

    scan_code, scan_display = [], []
    # (the tensors the loop writes into: an in-place running value must not start as their memory)
    written = "".join(f"{t}, " for t in dict.fromkeys(o.target for o in plan.outputs if o.kind in ("store", "scatter")))
    for name, marker, op, pos in plan.scans:
        # phase 1: the values added at each step, from the body up to the update
        PRE = namer.new(f"_av_pre{L}")
        pre = template("def _av_PRE(): pass", _av_PRE=PRE)[0]
        pre_params = [mp.param for mp in plan.mapped] + ([plan.space.index] if plan.index_as_value else [])
        pre.args.args = [ast.arg(arg=p) for p in pre_params]
        mapper = _MapSlices(plan)
        o = next(x for x in plan.outputs if x.marker == marker)
        # (an exclusive scan's reads, stores before its update, are no part of the values added)
        stmts = [ast.parse(s).body[0] for s in plan.body[:pos + 1]]
        # (only the statements the values added need: not another running value's stores, whose
        # reads of it are no part of them, analysis._scans)
        pre.body = [mapper.visit(st) for st in _needed(_without_reads(stmts, name) if o.exclusive else stmts,
                                                       _scan_returns(o, op, marker))]
        PRE_REF, pre_ref = "None", None
        converts = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("int", "float", "bool")
                       for st in pre.body for n in fastast.walk(st))
        # (a loop-invariant name in the values added, `k += K`: a Python number or a tensor, as
        # the caller passed it)
        invariant = any(isinstance(n, ast.Name) and n.id in plan.free for st in pre.body for n in fastast.walk(st))
        # (`s += i`: the loop's index is a Python int, and so is each value added to a Python start)
        # (a recurrence's parts may all be Python numbers with nothing to show it: `c = 0.9 * c +
        # 1.0`, or `c = c + 1` after a reset's `not done[t]`, a Python bool; the check tells)
        terms = o.payloads if op in ("+", "-", "*") else ()      # (`s = s + a[t] + b[t]`: analysis._terms_output)
        if plan.items or (converts or invariant or plan.index_as_value) and op in ("+", "-", "*") + LOGICAL \
                or op in ("lin", "last") or terms:
            # (`k += int(c[i])`: a Python number in the loop too, as `.item()` gives)
            if op.startswith(("best", "pay")) or op in ("lin", "+", "-", "*", "last") + LOGICAL:
                # the one-time check runs the loop's own `.item()`: it tells whether a running
                # best, total or recurrence holds Python numbers (the batch computes them in float64)
                pre_ref = fastast.clone(pre)
                pre_ref.name = PRE_REF = namer.new(f"{PRE}_ref")
            if plan.items:
                pre.body = [_Items(AV).visit(s) for s in pre.body]
        o = next(x for x in plan.outputs if x.marker == marker)
        rename = {}
        if plan.branches and any(isinstance(n, (ast.If, ast.IfExp)) for st in pre.body for n in fastast.walk(st)):
            # branches in the values added (`if t == T - 1: c = 1.0 - done` / `else: c = 1.0 -
            # dones[t + 1]` before `h = c * h + b`): if-converted as the body is, where the values
            # added are set on every side (a conditional update keeps its branches: the loop decides);
            # the reference keeps the branches, for the one-time check
            from .ifconvert import convert as ifconvert
            outs = {marker} | ({o.payloads[0][1]} if op == "lin" else
                               {o.payloads[int(op.split(":")[1])][1]} if op.startswith("pay") else
                               {p[1] for p in terms})
            converted, masks, env, _ = ifconvert(fastast.clone(pre.body), _varying(plan),
                                                 set(pre_params) | set(plan.free), namer, AV, outs, set())
            if not any(masks.get(m) for m in outs):
                if pre_ref is None:
                    pre_ref = fastast.clone(pre)
                    pre_ref.name = PRE_REF = namer.new(f"{PRE}_ref")
                pre.body, rename = converted, env
        pre_args = ", ".join(_run_args(plan)[:len(plan.mapped)])
        shown = fastast.clone(pre)
        shown.body.append(ast.Return(value=ast.Tuple(
            elts=[_name(marker)] + ([_name(o.payloads[0][1])] if op == "lin" else
                                    [_name(o.payloads[int(op.split(":")[1])][1])] if op.startswith("pay") else
                                    [_name(p[1]) for p in terms]),
            ctx=ast.Load())))
        scan_display.append(_display_body(shown, AV))
        if op == "last":
            # (a name the step before assigned, analysis._shifts: it starts as the name's value before
            # the loop, where that is bound)
            scan_code += template(f"{name} = {T}.shift_start(lambda: {name[len(SHIFT):]})")
            scan_display += ast.parse(f"{name} = {name[len(SHIFT):]}").body
        scan_display += ast.parse(
            f"{name}_running = torch.func.vmap({PRE})({pre_args})[0]" if op == "last" else
            f"_av_t = torch.func.vmap({PRE})({pre_args})\n{name}_running = {name} {op} torch.{'cumprod' if op == '*' else 'cumsum'}(_av_t[0]"
            + "".join(f" {p[4]} _av_t[{k + 1}]" for k, p in enumerate(terms)) + ", 0)"
            if terms else
            f"{name}_running = autovec.runtime.linear_prefix({name}, *torch.func.vmap({PRE})({pre_args}))"
            if op == "lin" else
            f"{name}_running = torch.{'maximum' if op == 'max' else 'minimum'}({name}, torch.cum{op}("
            f"torch.func.vmap({PRE})({pre_args})[0], 0).values)" if op in ("max", "min") else
            f"{name}_running = torch.logaddexp({name}, torch.logcumsumexp("
            f"torch.func.vmap({PRE})({pre_args})[0], 0))" if op == "lse" else
            f"{name}_running = torch.logical_{op[1:]}({name}, torch.cum{'max' if op == 'lor' else 'min'}("
            f"torch.func.vmap({PRE})({pre_args})[0] != 0, 0).values)" if op in ("lor", "land") else
            f"{name}_running = {name} {op} torch.cum{'max' if op == '|' else 'min'}("
            f"torch.func.vmap({PRE})({pre_args})[0], 0).values" if op in ("|", "&") else
            f"{name}_running = ({name} {op} torch.cum{'max' if op == 'or' else 'min'}("
            f"torch.func.vmap({PRE})({pre_args})[0], 0).values).tolist()" if op in ("or", "and") else
            f"{name}_running = torch.cum{'max' if '>' in op else 'min'}(torch.func.vmap({PRE})({pre_args})[0], 0)"
            f".values.clamp({'min' if '>' in op else 'max'}={name})" if op.startswith("best") else
            f"{name}_running = autovec.runtime.payload_prefix({o.target}, {name}, "
            f"*torch.func.vmap({PRE})({pre_args}))  # the payload at each step's best" if op.startswith("pay") else
            f"{name}_running = {name} {'*' if op == '*' else '+' if op == '+' else '-'} "
            f"torch.{'cumprod' if op == '*' else 'cumsum'}(torch.func.vmap({PRE})({pre_args})[0], 0)").body
        if o.exclusive:    # (the body reads the value before each step)
            scan_display += ast.parse(f"{name}_before = torch.cat([torch.as_tensor({name}).expand_as("
                                      f"{name}_running[0]).unsqueeze(0), {name}_running[:-1]])").body
        if op.startswith("pay"):
            # a payload of a running best: the compared values and this payload, per step
            best_name = o.target
            cmp, k = op[3:].split(":")
            PYP = f"({bool(o.payloads[int(k)][3])} or {T}.py_out({PRE!r}, 1))"
            ret = ast.Return(value=ast.Tuple(elts=[_name(marker), _name(o.payloads[int(k)][1])], ctx=ast.Load()))
            pre.body.append(_renamed(ret, rename))
            if pre_ref is not None:
                pre_ref.body.append(fastast.clone(ret))
                scan_code.append(pre_ref)
            scan_code += [pre] + template(
                f"{T}.add_scan(_av_AV.payload_prefix({best_name}, {name}, *{T}.run({PRE}, {PRE_REF}, tag={PRE!r}, "
                f"scan_free=True), {cmp!r}, {bool(o.pytype)} or {T}.py_out({PRE!r}, 0), {PYP}), {PYP})",
                _av_AV=AV)
            continue
        if op == "lin":
            ret = ast.Return(value=ast.Tuple(elts=[_name(marker), _name(o.payloads[0][1])], ctx=ast.Load()))
            pre.body.append(_renamed(ret, rename))
            if pre_ref is not None:
                pre_ref.body.append(fastast.clone(ret))
                scan_code.append(pre_ref)
            # Python numbers in the loop where its start, terms and factors all are (`avg = b * avg
            # + (1 - b) * x[i].item()` from `avg = 0.0`): the check's run of the loop's own `.item()` tells
            PYL = f"{AV}.py_running({name}, {T}.py_out({PRE!r}, 0), {T}.py_out({PRE!r}, 1))" if pre_ref is not None \
                else "False"
            terms = f"*{T}.run({PRE}, {PRE_REF}, tag={PRE!r}, scan_free=True)"
            if any(c[0] == name for c in plan.carried):
                # (a stored recurrence keeps its terms and factors: carried_like asks whether a factor
                # requires grad, where the loop's product keeps the output's row for backward)
                scan_code += [pre] + template(f"{T}.carried_terms = {T}.keep_terms({name!r}, {terms[1:]})")
                terms = f"*{T}.carried_terms"
            scan_code += ([] if terms.startswith(f"*{T}.carried") else [pre]) + template(
                f"{T}.add_scan(_av_AV.linear_prefix({name}, {terms}, "
                f"py_a={T}.py_out({PRE!r}, 1), varying={o.payloads[0][3]!r}, py_b={T}.py_out({PRE!r}, 0)"
                f"{', computed=True' if _computed_factor(o.payloads[0][2]) else ''}"
                f"{', computed_term=True' if _computed_factor(o.value) else ''}), {PYL}"
                f"{f', before={name}, reads={o.exclusive!r}, bare={o.bare}' if o.exclusive else ''}"
                f", outs=({written}), start={name})",
                _av_AV=AV)
            continue
        ret = ast.Return(value=ast.Tuple(elts=[_name(marker)] + [_name(p[1]) for p in terms], ctx=ast.Load()))
        pre.body.append(_renamed(ret, rename))
        if pre_ref is not None:
            pre_ref.body.append(fastast.clone(ret))
            scan_code.append(pre_ref)
        # a running best's values may be Python numbers without a visible `.item()` (`v = x[i].item()`
        # earlier): the first run's check tells
        PY = f"({bool(o.pytype)} or {T}.py_out({PRE!r}, 0))" if op.startswith("best") else \
            f"({bool(o.pytype)} or {AV}.py_running({name}, {T}.py_out({PRE!r}, 0)))" if pre_ref is not None else \
            str(bool(o.pytype))
        # (torch.logical_or of a tensor start: the steps' own kind decides, a Python bool raises there)
        STEPS = f"({bool(o.pytype)} or {T}.py_out({PRE!r}, 0))" if op in ("lor", "land") and pre_ref is not None \
            else PY
        values = f"{T}.run({PRE}, {PRE_REF}, tag={PRE!r}, scan_free=True)[0]"
        if terms:
            # each step's terms as one value, `a[t] + b[t]` (runtime.sum_terms checks their types), whose
            # running sum the loop's `(s + a[t]) + b[t]` is up to reassociation
            R = namer.new(f"_av_terms{L}")
            PYS = [f"({bool(p[3])} or {T}.py_out({PRE!r}, {k + 1}))" for k, p in enumerate(terms)]
            # (a Python number where the start and every term is one: a product's Python numbers
            # beside tensor factors give tensors, runtime._prod_terms)
            PY = f"{AV}.py_running({name}, ({bool(o.pytype)} or {T}.py_out({PRE!r}, 0)), {', '.join(PYS)})"
            scan_code += [pre] + template(f"{R} = {T}.run({PRE}, {PRE_REF}, tag={PRE!r}, scan_free=True)")
            pre = None
            values = (f"{AV}.sum_terms({name}, {R}[0], ({bool(o.pytype)} or {T}.py_out({PRE!r}, 0)), ("
                      + "".join(f"{R}[{k + 1}], " for k in range(len(terms))) + "), ("
                      + "".join(f"{p}, " for p in PYS) + f"), {tuple(p[4] for p in terms)!r})")
            STEPS = PY
        handed = ", True" if o.handed else ""      # (the count handed on: runtime._prefix)
        scan_code += ([pre] if pre is not None else []) + template(
            f"{T}.add_scan(_av_AV.prefix({name}, {values}, {op!r}, "
            f"{STEPS}, {bool(o.inplace)}{f', counted=({o.counted}{handed},)' if o.counted else ''}"
            f"{f', py_steps={T}.py_out({PRE!r}, 0)' if pre_ref is not None and not terms else ''}), {PY}"
            f"{f', before={name}, reads={o.exclusive!r}' if o.exclusive else ''}"
            f"{f', changed={name}' if o.inplace else ''}, outs=({written}), start={name}"
            f"{f', bare={o.bare}' if o.exclusive or o.inplace else ''})", _av_AV=AV)
    if plan.carried:
        # a running value that stands for the row the step before stored (`out[t] = .. out[t - 1]`):
        # it starts as the row the first iteration reads, taken only now (an empty range never reads
        # it), and its running values must be what the stores keep (the output's dtype and row shape)
        # (with the tensors the loop also writes into: one that shares the output's memory would change
        # the rows the loop reads back)
        scan_code = [st for carry, out, d, off, _ in plan.carried for st in template(
            f"{carry} = {T}.carried_start({out}, {d}, {off}, "
            f"({''.join(f'{t}, ' for t in dict.fromkeys(o.target for o in plan.outputs if o.kind in ('store', 'scatter')) if t != out)}))")
        ] + scan_code + [
            st for carry, out, d, _, _ in plan.carried
            for st in template(f"{T}.carried_like({out}, {d}, {[s[0] for s in plan.scans].index(carry)}, "
                               f"{next(s[2] for s in plan.scans if s[0] == carry)!r}, {carry!r})")]
        scan_display = [st for carry, _, _, _, shown in plan.carried
                        for st in ast.parse(f"{carry} = {shown}.clone()").body] + scan_display
    for fd in scan_code:
        # the running values' own bodies: the batched mode may rewrite them too (by tag)
        if isinstance(fd, ast.FunctionDef) and not fd.name.endswith("_ref"):
            tagged[fd.name] = (fastast.clone(fd), AV)
    defs = exit_code + scan_code + [body_def] + ([ref_def] if ref_def is not None else [])
    REF = ref_def.name if ref_def is not None else "None"
    select_code = _select_code(plan, T, L, namer, AV, convert, defs, tagged)
    if direct:
        DIRECT = namer.new(f"_av_direct{L}")
        defs.append(direct_function(plan, DIRECT, AV))
        REF += f", direct={DIRECT}"
    run_code = select_code + template(f"_av_O = _av_T.run(_av_BODY, {REF})\n_av_PREPARE", _av_O=O, _av_T=T, _av_BODY=BODY, _av_PREPARE=prepare or [ast.Pass()])
    if product_first is not None:
        first, P = product_first
        run_code = first + template("if _av_P is None:\n    _av_RUN", _av_P=P, _av_RUN=run_code)
    restore = [s for name, _ in releases for s in template(f"{name} = {AV}.unreleased({name}, {T})")] or [ast.Pass()]
    space = express_space = _space_expr(plan, AV)
    if plan.space.kind == "range" and plan.form != "while" and express and not (
            exit_code or scan_code or product_first is not None):     # (`simple` below: the express's template)
        # (the trip count once, for the express and the general path both: a zip's hoisted
        # `range(min(len(a), len(b)))` costs a microsecond or more, on every entry of an inner
        # loop. The express's call binds it, inside its `try` as before; the general path
        # evaluates it again only where that did not happen or raised: then inside its own
        # `try`, whose failure runs the loop, as before)
        S = namer.new(f"_av_s{L}")
        space_first = template(f"{S} = {AV}.unset")
        express_space = ast.NamedExpr(target=ast.Name(id=S, ctx=ast.Store()), value=space)
        space = ast.IfExp(test=ast.Compare(left=ast.Name(id=S, ctx=ast.Load()), ops=[ast.IsNot()],
                                           comparators=[expr(f"{AV}.unset")]),
                          body=ast.Name(id=S, ctx=ast.Load()), orelse=fastast.clone(space))
    else:
        space_first = []
    stmts = template(f"""
_av_T = None
try:
    _av_T = _av_AV.begin({L}, _av_SPACE)
    if _av_T is not None:
        _av_T = _av_AV.guard(_av_T, _av_MAPPED, _av_FREE, _av_CALLS, _av_WRITES)
    if _av_T is not None:
        _av_BODYDEF
        _av_RELEASE
        _av_RUN
except _av_AV.Error as _av_E:    # (not the name `Exception`: the user's module may rebind it)
    _av_RESTORE
    _av_T = _av_AV.failed({L}, _av_T, _av_E)
""", _av_T=T, _av_AV=AV, _av_SPACE=space, _av_MAPPED=mapped_expr, _av_FREE=free_expr, _av_CALLS=calls_expr,
        _av_WRITES=writes_expr, _av_BODYDEF=defs, _av_RUN=run_code, _av_E=E,
        _av_RELEASE=[s for name, fill in releases for s in template(f"{name} = {T}.release({name}, {fill!r})")]
        or [ast.Pass()],
        _av_RESTORE=restore)
    spec = ()
    simple = express and not (exit_code or scan_code or product_first is not None)
    if simple and not releases and not nest and plain and len(plain) == len(prepare) and not any(
            isinstance(n, ast.Name) and n.id == T for st in commit + [s for c in commit_last for s in c]
            for n in fastast.walk(st)):
        spec = tuple(plain)    # (every statement after the run a plain consume, and a commit without the token)
    stored = simple and not spec and not plan.space.elements and whole and len(whole) == len(plan.outputs) \
        and not plan.fission_stores and not commit_last and not any(
            isinstance(n, ast.Name) and n.id == T for st in commit if id(st) not in whole_commits for n in fastast.walk(st))
    if spec or simple:
        # the steady state in one call where the runtime has written it (lanes.express), else
        # None and the general path above. With `spec`: the consumed values; else (its token
        # flavour) the lane's token and the hot runner's batch, then the outputs prepared and
        # committed as on the general path. `stored`: the token flavour of a loop that fills a
        # fresh output, whose express may answer the batch as that output (`expressed` first)
        X = namer.new(f"_av_x{L}")
        if spec:
            answered = template(f"{T} = {AV}.expressed\n{''.join(f'{name}, ' for name, *_ in spec)}= {X}")
        else:
            answered = template(f"""
{T}, {O} = {X}
try:
    _av_PREPARE
except {AV}.Error as {E}:
    _av_RESTORE
    {T} = {AV}.failed({L}, {T}, {E})
""", _av_PREPARE=prepare or [ast.Pass()], _av_RESTORE=restore)
        if stored:
            answered = template(f"if {X}[0] is {AV}.expressed:\n    {T} = {AV}.expressed\n" +
                                (f"    {whole[0][0]} = {X}[1]" if len(whole) == 1 else
                                 f"    {''.join(f'{name}, ' for name, *_ in whole)}= {X}[1:]") + "\nelse:\n    _av_TOKEN",
                                _av_TOKEN=answered)
            commit = [template(f"if {T} is not {AV}.expressed:\n    _av_COMMIT", _av_COMMIT=[st])[0]
                      if id(st) in whole_commits else st for st in commit]
            spec = whole
        # (large fresh outputs let go while the express runs, as the general path releases them:
        # taken back where it does not answer)
        let_go = [s for name, fill in releases for s in template(f"{name} = {AV}.let_go({name}, {fill!r})")]
        taken = template(f"if {X} is None:\n    _av_BACK", _av_BACK=[
            s for name, _ in releases for s in template(f"{name} = {AV}.taken_back({name})")]) if releases else []
        stmts = stmts[:1] + space_first + template(f"""
{X} = {AV}.xp.get({L})
if {X} is not None:
    _av_BODYDEF
    _av_LETGO
    try:
        {X} = {X}(_av_SPACE, _av_MAPPED, _av_FREE, _av_CALLS, _av_WRITES, {BODY}{', ' + DIRECT if direct else ''})
    except {AV}.Error:
        {X} = None     # (the general path decides, with its bookkeeping)
    _av_TAKEN
if {X} is not None:
    _av_ANSWERED
else:
    _av_GENERAL
""", _av_BODYDEF=[body_def] + ([defs[-1]] if direct else []), _av_SPACE=express_space, _av_MAPPED=mapped_expr, _av_FREE=free_expr,
            _av_CALLS=calls_expr, _av_WRITES=writes_expr, _av_ANSWERED=answered, _av_GENERAL=stmts[1:],
            _av_LETGO=let_go or [ast.Pass()], _av_TAKEN=taken or [ast.Pass()])
        spec = tuple((kind, pos, new) for _, kind, pos, new in spec) if spec else None
    if plan.space.kind == "elements" and len(plan.space.elements) == 1 and \
            isinstance(expr(plan.space.elements[0][1]), ast.Name) and not nest:
        # a walk of one name that holds a list or tuple of Python numbers (or nothing) has nothing to batch
        # (runtime.begin answers None, quietly): told here without a call, as an inner loop pays
        # it on every outer iteration (probeA: 0.6 us each, where the loop's own work may be less)
        src_name = plan.space.elements[0][1]
        stmts = stmts[:1] + template(
            f"if type({src_name}) in {AV}.SEQUENCES and (not {src_name} or type({src_name}[0]) in {AV}.NUMBERS "
            f"and {L} not in {AV}.indexing_loops) and {AV}.events is None and not {AV}.strict:\n"
            f"    pass\nelse:\n    _av_REST", _av_REST=stmts[1:])
    set_lines(stmts, plan.lineno, plan.lineno)

    if direct:
        ddef = direct_function(plan, BODY, AV, display=True)
        display = [ddef] + ast.parse(f"{O} = {BODY}({', '.join(_direct_args(plan))})").body
    elif product_first is not None:
        display = []      # the einsum in display_tail is all of it
    else:
        display = scan_display + [_display_body(body_def, AV)]
        display += ast.parse(f"{O} = {_run_text(m, plan, BODY, params)}").body
    display += [s for line in display_tail for s in ast.parse(line).body]
    display, oindex = _tidy_display(display, O)
    display_swaps = {k: oindex.visit(fastast.clone(v)) for k, v in display_swaps.items()}
    extra = {n.id for v in display_swaps.values() for n in fastast.walk(v) if isinstance(n, ast.Name)}
    extra |= {result} if result else set()
    display = _drop_dead(display, extra)
    batchable = (fastast.clone(body_def), AV)
    # the cost model times both paths where its estimates are close (cost.Decision)
    commit = commit + [st for c in commit_last for st in c] + template(f"{T}.done()")
    after = template(f"if {AV}.py_clock:\n    {AV}.python_ran({L})")   # (a call only where the cost model times the loop)
    set_lines(commit[-1:] + after, plan.lineno, plan.lineno)
    if plan.exit_cond:
        commit.insert(len(commit) - 1, _exit_tail(plan, T))   # before done(): the call's time includes it
        display.insert(0, ast.Expr(value=ast.Constant(
            f"autovec: the iterations before the first one where `{exit_text}` holds run batched; "
            "that iteration runs as written (the statements before its `break`)")))
    return Lowered(m, stmts + [_branch(T, commit)], display, result, swaps, display_swaps, tuple(layout),
                   batchable, after, tagged, spec)


def _without_reads(stmts: list, name: str) -> list:
    """`stmts` without the statements that read `name`, inside `if`s too (an `if` left empty is
    dropped): an exclusive scan's reads before its update are its outputs' values alone (the
    analysis's `marker = ..` of a store, analysis._value_reads), which the values added do not
    need; the other statements, in an `if` with such a store too (`if c: y = 2.0; out[i] = s`),
    may compute what the update reads."""
    out = []
    for st in stmts:
        if name not in {n.id for n in fastast.walk(st) if isinstance(n, ast.Name)}:
            out.append(st)
        elif isinstance(st, ast.If) and name not in {n.id for n in fastast.walk(st.test) if isinstance(n, ast.Name)}:
            body, orelse = _without_reads(st.body, name), _without_reads(st.orelse, name)
            if body or orelse:
                out.append(ast.copy_location(ast.If(test=st.test, body=body or [ast.Pass()], orelse=orelse), st))
    return out


def _needed(stmts: list, wanted: set) -> list:
    """The statements that compute `wanted` (analysis.names.needed): the body that computes the
    values a running value adds runs them for that alone; the loop's own body still computes
    every statement."""
    return nm.needed(stmts, wanted)


def _scan_returns(o, op: str, marker: str) -> set:
    """The markers the values-added body of a running value returns (its value, and the factor
    of a recurrence or the payload of a running best)."""
    if op == "lin":
        return {marker, o.payloads[0][1]}
    if op.startswith("pay"):
        return {marker, o.payloads[int(op.split(":")[1])][1]}
    if op in ("+", "-", "*") and o.payloads:
        return {marker} | {p[1] for p in o.payloads}      # (a chain of terms)
    return {marker}


def _plain_consume(plain: list, P: str, o, pos: int, whole: bool, plan: LoopPlan) -> None:
    """Notes `P = consume(kind, O[pos], None, T.py(pos, ..), T)` of an output the express builds
    inline (lanes._EXPRESS_KINDS: a stack, a tensor, a cat or a builtin reduction; `whole`: of the
    whole batch, unmasked, with no other output to compare memory with; values that are tensors
    in the loop), with whether its value is new memory (_new_memory)."""
    from ..lanes import _EXPRESS_KINDS

    if whole and o.consumer in _EXPRESS_KINDS and not o.pytype:
        plain.append((P, o.consumer, pos, _new_memory(o.value, plan)))


def _new_memory(value: str, plan: LoopPlan, depth: int = 0) -> bool:
    """Whether the loop's value is the result of an operator (`x[i] + y[i]`, `-r`, `v * 2`, `a <
    b`; not unary `+`, which gives the tensor itself), directly or through a name the body binds
    once: the operator's tensor is new memory, in each iteration and in the batch, never an input
    or a view of one (where the operands are tensors and numbers: lanes.express asks that the
    signature's free values hold nothing else). The express then skips comparing its memory with
    the inputs' (Token.shares_input)."""
    try:
        node = ast.parse(value, mode="eval").body
    except SyntaxError:
        return False
    if isinstance(node, ast.Name):
        if depth >= 8 or any(name == node.id for name, *_ in plan.scans):
            return False
        bound = [st for text in plan.body for st in ast.parse(text).body
                 if any(isinstance(n, ast.Name) and n.id == node.id and isinstance(n.ctx, ast.Store)
                        for n in fastast.walk(st))]
        if len(bound) == 1 and isinstance(bound[0], ast.Assign) and len(bound[0].targets) == 1 \
                and isinstance(bound[0].targets[0], ast.Name):
            return _new_memory(ast.unparse(bound[0].value), plan, depth + 1)
        return False
    return isinstance(node, (ast.BinOp, ast.Compare)) or \
        isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Invert))


def _select_code(plan: LoopPlan, T: str, L: int, namer, AV: str, convert: bool, defs: list, tagged: dict) -> list:
    """A loop whose one condition guards its whole body (plan.guarded): the condition alone as a
    body of its own, run first on the calls that keep their rows first (Token.selecting: under
    grad), so that the body runs on the kept rows alone and never on the others, where it may
    raise (`F.cross_entropy` of a label -1 the condition skips) or cost for nothing
    (Token.select_run, _run_selected). Adds the body to `defs` and `tagged`; returns the
    statements that run it, or [] where the body is not one `if` without `else` (or `if c:
    continue` and then the body), after plain assignments to names (which it runs too).

    A body that branches once (plan.two_way) also gets one body per side, each run on its own rows
    (Token._run_sides; made there, from the loop's body, when a call first needs them: the
    statement passes how many sides there are); its condition body then gives each condition of
    an `elif` chain."""
    if not (plan.guarded or plan.two_way) or plan.exit_cond or plan.scans or plan.space.kind == "nest":
        return []
    stmts = [ast.parse(b).body[0] for b in plan.body]
    if plan.two_way:
        # the one branch among plain statements (`v = a if c else b`: its sides as `if c: v = a`
        # / `else: v = b`); the statements before it run with the condition, all run on each side
        found = _branch_of(stmts)
        if found is None:
            return []
        at, top = found
    else:
        *prefix, top = stmts
        at = len(stmts) - 1
        if not isinstance(top, ast.If) or not all(
                isinstance(p, ast.Assign) and len(p.targets) == 1 and isinstance(p.targets[0], ast.Name) for p in prefix):
            return []
    test = ast.unparse(top.test)
    sides = None
    if plan.two_way:
        # (the sides' bodies are made from the loop's body when a call first needs them:
        # runtime Token._run_sides, side_bodies; most loops with a branch never run under grad)
        sides = len(_arms(top)[0]) + 1
    elif top.orelse:
        # (`if c: continue` and then the body: planned as `if c: pass` / `else:` the body)
        if not (len(top.body) == 1 and isinstance(top.body[0], ast.Pass)):
            return []
        test = f"not ({test})"
    from ..plan import Output
    SEL = namer.new(f"_av_sel{L}")
    flag = namer.new(f"_av_kept{L}")
    flags, truth = [(flag, test)], flag
    if sides is not None and sides > 2:
        # (an `elif` chain: each condition's value for every row; select_run numbers the sides)
        flags = [(flag if k == 0 else namer.new(f"_av_kept{L}"), ast.unparse(t)) for k, (t, _) in enumerate(_arms(top)[0])]
        truth = ""
    # (the plain assignments before the `if` that the condition may read: run with it)
    probe = dataclasses.replace(plan, body=tuple(plan.body[:at]) + tuple(f"{f} = {t}" for f, t in flags),
                                outputs=tuple(Output("last", "", "", plan.lineno, marker=f) for f, _ in flags))
    sel_def, _, _, sel_ref = body_function(probe, SEL, namer, AV, convert, truth=truth)
    tagged[SEL] = (fastast.clone(sel_def), AV)
    defs += [sel_def] + ([sel_ref] if sel_ref is not None else [])
    SREF = sel_ref.name if sel_ref is not None else "None"
    if sides is None:
        return template(f"if {T}.selecting:\n    {T}.select_run({SEL}, {SREF}, {SEL!r})")
    return template(f"if {T}.selecting:\n    {T}.select_run({SEL}, {SREF}, {SEL!r}, {sides})")


def side_bodies(plan: LoopPlan, layout, body_def: ast.FunctionDef, AV: str):
    """The sides' bodies of a plan.two_way loop (_side_bodies), for the runtime (Token._run_sides),
    from the plan and the loop's body's def; None where there are none."""
    stmts = [ast.parse(b).body[0] for b in plan.body]
    found = _branch_of(stmts)
    if found is None:
        return None
    # (several conditional expressions on the one condition: each a branch of the same sides)
    tops = [found[1]] + [t for t in (_as_if(st) for st in stmts[found[0] + 1:]) if t is not None]
    return _side_bodies(plan, tops, AV, layout, plan.loop_id, body_def)


def _branch_of(stmts: list):
    """(position, `if`) of a plan.two_way body's one branch (`v = a if c else b` as `if c: v = a`
    / `else: v = b`), or None."""
    for j, st in enumerate(stmts):
        top = st if isinstance(st, ast.If) else _as_if(st)
        if top is not None:
            return j, top
    return None


def _as_if(st: ast.stmt):
    """`v = a if c else b` (the planner's form of a total, appended value or store whose value is
    a conditional expression) as `if c: v = a` / `else: v = b`, the same program: the condition,
    then the one side; else None."""
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
        return None
    e = st.value if isinstance(st.value, ast.IfExp) else inner_conditional(st.value)
    if e is None:
        return None
    if e is st.value:
        side = lambda v: [ast.Assign(targets=[ast.Name(st.targets[0].id, ast.Store())], value=v, lineno=st.lineno)]
    else:
        # (a conditional expression inside the value, `d = x - (a if c else b)`: each side the
        # whole value with the side in its place)
        def side(v):
            whole = fastast.clone(st.value)
            _put(whole, inner_conditional(whole), v)
            return [ast.Assign(targets=[ast.Name(st.targets[0].id, ast.Store())], value=whole, lineno=st.lineno)]
    rest = _as_if(side(e.orelse)[0]) if isinstance(e.orelse, ast.IfExp) else None
    # (`a if c else b if d else e`: an elif)
    return ast.If(test=e.test, body=side(e.body), orelse=[rest] if rest is not None else side(e.orelse))


def _put(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    """Put `new` where `old` is in `tree`."""
    for parent in fastast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list) and any(v is old for v in value):
                value[[id(v) for v in value].index(id(old))] = new
                return
    raise LookupError("node not found")


def _arms(top: ast.If):
    """([(condition, statements)] of an `if` / `elif` chain, the last `else`'s statements)."""
    arms = []
    while len(top.orelse) == 1 and isinstance(top.orelse[0], ast.If):
        arms.append((top.test, top.body))
        top = top.orelse[0]
    arms.append((top.test, top.body))
    return arms, top.orelse       # (no `else`: [], the rows where no condition holds compute nothing)


def _side_bodies(plan: LoopPlan, tops: list, AV: str, layout, L: int, body_def: ast.FunctionDef):
    """[def] of the sides of a plan.two_way body (_select_code), whose branch `tops[0]` is an `if`
    (with any `elif`s and `else`s; `tops[1:]`, other conditional expressions on its condition,
    as `if`s, analysis.loops._same_condition), or None. Each is the loop's body (`body_def`, if-converted)
    as the side's rows compute it: each `where` of the branch's conditions takes the value the
    side's rows take (_one_side), the values of outputs the side does not assign are detached
    (`if c: pos = pos + a` / `else: neg = neg + b`: its rows mask them out, as the batch of
    `where` does, and no gradient flows back through them), and what nothing reads then goes
    (the other sides' values). Its values are laid out as the loop's body's (`layout`)."""
    arms = _arms(tops[0])[0]
    marks = {o.marker for o in plan.outputs} | {p[1] for o in plan.outputs for p in o.payloads}
    stored = [set() for _ in range(len(arms) + 1)]
    for top in tops:
        more, rest = _arms(top)
        if len(more) != len(arms):
            return None
        for j, side in enumerate([body for _, body in more] + [rest]):
            stored[j] |= {n.id for st in side for n in fastast.walk(st)
                          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} & marks
    ret = body_def.body[-1] if body_def is not None and body_def.body else None
    if layout is None or not (isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple)):
        return None
    branched = set().union(*stored)
    out = []
    for j in range(len(stored)):
        side_def = fastast.clone(body_def)
        side_def.name = f"_av_side{j}_{L}"
        elts = side_def.body[-1].value.elts
        for o, lay in zip(plan.outputs, layout):
            if o.marker in stored[j] or o.marker not in branched:
                continue      # (assigned on this side, or outside the branch: its value is the side's)
            for pos in (lay[0], *lay[1]):
                if pos is not None and pos < len(elts):
                    elts[pos] = ast.Call(func=ast.Attribute(value=ast.Name(AV, ast.Load()), attr="detached",
                                                            ctx=ast.Load()), args=[elts[pos]], keywords=[])
        side_def = _one_side(side_def, AV, j, len(arms))
        if side_def is None:
            return None
        out.append(side_def)
    return out


def _one_side(fdef: ast.FunctionDef, AV: str, side: int, tests: int):
    """A side's body (every arm of the chain the side's statements, if-converted) with each
    `where` of a condition replaced by the copy the side's rows take, or None where a `where` is
    of another condition. `side`: the side's number (0 for the first condition's; `tests`, the
    number of conditions, for the last `else`'s). Its rows are those where each earlier condition
    fails and its own holds: a `where` of an earlier condition takes its `else` copy, of its own
    condition its `if` copy (a later condition's `where` is inside the copy it drops). Each copy
    is a computation of its own: left as `where`, the copy a row does not take would get a
    gradient of 0 there, and send 0 * its derivative (NaN where that is infinite: sqrt at -0.0)
    into the inputs', where the loop computes the side once. The copies left unread compute
    nothing any gradient flows through."""
    def call(node, name):
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name \
            and isinstance(node.func.value, ast.Name) and node.func.value.id == AV
    conds, nots, texts = {}, {}, []      # (a condition's name -> its number: one per text)
    for st in fastast.walk(fdef):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            if call(st.value, "truth"):
                text = ast.dump(st.value)
                if text not in texts:
                    texts.append(text)
                conds[st.targets[0].id] = texts.index(text)
            elif call(st.value, "lnot") and len(st.value.args) == 1 and isinstance(st.value.args[0], ast.Name) \
                    and st.value.args[0].id in conds:
                nots[st.targets[0].id] = st.value.args[0].id
    if len(texts) != tests:
        return None
    bad = []

    def holds(name):      # (whether the side's rows take the condition's `if` copy)
        return conds[name] >= side

    class Pick(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if not call(node, "where"):
                return node
            args = node.args
            if node.keywords or len(args) not in (3, 4) or not isinstance(args[0], ast.Name):
                bad.append(node)
                return node
            # (a `where` that converts its sides to one dtype, for stores, has the same expression
            # on both here: one dtype, nothing to convert; a Python number stays one, and the
            # rows' merge refuses it: the loop runs)
            name = args[0].id
            if name in conds:
                return args[1] if holds(name) else args[2]
            if name in nots:
                return args[2] if holds(nots[name]) else args[1]
            bad.append(node)
            return node
    fdef = Pick().visit(fdef)       # (a def of its own: body_function made it for this side)
    for st in fastast.walk(fdef):
        # the conditions as the side's rows hold them (`c | True`, `c & False`; a later one is
        # not read on this side's rows), which the select body found without grad: recomputed on
        # fewer rows, a value near its threshold might round the other way, and the masks the
        # outputs carry would then not be the side's
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and st.targets[0].id in conds and conds[st.targets[0].id] <= side:
            held = conds[st.targets[0].id] == side
            st.value = ast.BinOp(left=st.value, op=ast.BitOr() if held else ast.BitAnd(), right=ast.Constant(value=held))
    if bad:
        return None
    # (the copies a side's rows do not take and the values nothing reads go: the body is pure,
    # the planner's condition for batching it, so they only cost time, in the batch and in
    # building it, which grows with each arm of an `elif` chain)
    _drop_dead([fdef], every=True)
    return ast.fix_missing_locations(fdef)


def _exit_code(plan: LoopPlan, T: str, L: int, namer, AV: str, convert: bool):
    """A loop that stops at the first iteration where a condition holds (`if c: ...; break`):
    the condition for every iteration first (a body of its own, the statements up to it), the
    trip count cut to the iterations before that one (Token.exit_at), then the loop's body
    without the condition. Returns (statements, the condition's text, the plan of that body,
    {tag: body} for the batched mode)."""
    from ..plan import Output
    k = next(i for i, s in enumerate(plan.body) if s.startswith(f"{plan.exit_cond} = "))
    text = plan.body[k][len(plan.exit_cond) + 3:]
    for s in reversed(plan.body[:k]):     # (several `break`s: `_av_exit0 or c1`, each shown as written)
        m = re.match(rf"({re.escape(plan.exit_cond)}\d+) = (.*)$", s, re.S)
        if m:
            text = re.sub(rf"\b{m.group(1)}\b", lambda _: f"({m.group(2)})", text)
    code, tagged = [], {}     # tagged: the bodies the batched mode may rewrite too
    for name, marker, op, pos in plan.exit_scans:
        # the values a running total adds, for every iteration, then its value before each one
        PRE = namer.new(f"_av_pre_exit{L}")
        value = Output("last", "", "", plan.lineno, marker=marker)
        pre = dataclasses.replace(plan, body=plan.body[:k] + plan.body[k + 1:pos + 1], outputs=(value,))
        pre_def, _, _, pre_ref = body_function(pre, PRE, namer, AV, convert)
        tagged[PRE] = (fastast.clone(pre_def), AV)
        code += [pre_def] + ([pre_ref] if pre_ref is not None else [])
        code += template(f"{T}.add_scan({AV}.exit_prefix({name}, {T}.run({PRE}, "
                         f"{pre_ref.name if pre_ref is not None else 'None'}, tag={PRE!r}, scan_free=True)[0], "
                         f"{op!r}, {T}.py_out({PRE!r}, 0)), False)")
    flag = Output("last", "", "", plan.lineno, marker=plan.exit_cond)
    probe = dataclasses.replace(plan, body=plan.body[:k + 1], outputs=(flag,), scans=plan.exit_scans)
    EXIT = namer.new(f"_av_exit{L}")
    exit_def, _, _, exit_ref = body_function(probe, EXIT, namer, AV, convert, truth=plan.exit_cond)
    tagged[EXIT] = (fastast.clone(exit_def), AV)
    code += [exit_def] + ([exit_ref] if exit_ref is not None else [])
    REF = exit_ref.name if exit_ref is not None else "None"
    code += template(f"{T}.find_exit({EXIT}, {REF}, {EXIT!r})")
    return code, text, dataclasses.replace(plan, body=plan.body[:k] + plan.body[k + 1:]), tagged


def _interleaved_masks(O: str, masks: list) -> str:
    """The display's text of several outputs' masks (output positions, None: unmasked)
    interleaved in the loop's order, as their values are; "" where none is masked."""
    if all(mp is None for mp in masks):
        return ""
    some = f"{O}[{next(mp for mp in masks if mp is not None)}]"
    return "torch.stack([" + ", ".join(f"{O}[{mp}]" if mp is not None else f"torch.ones_like({some})"
                                       for mp in masks) + "], 1).flatten()"


def _exit_tail(plan: LoopPlan, T: str) -> ast.If:
    """After the batched iterations: the stopping iteration as written, its loop variables bound."""
    binds = []
    if plan.space.kind == "range":
        binds += template(f"{plan.space.index} = {T}.exit_index()")
    else:
        for pos, (target, _) in enumerate(plan.space.elements):
            binds += template(f"{target} = {T}.exit_element({pos})")
        if plan.space.index:
            binds += template(f"{plan.space.index} = {T}.exit_index()")
    set_lines(binds, plan.lineno, plan.lineno)
    node = template(f"if {T}.broke:\n    pass")[0]
    set_lines([node], plan.lineno, plan.lineno)
    # the user's statements keep their own lines (tracebacks point at them)
    node.body = binds + [fastast.clone(s) for s in plan.exit_tail] or [ast.Pass()]
    return node


def _tidy_display(stmts: list, O: str) -> list:
    """Inline a body function called once on whole tensors (`out = body(u, v)`), replace
    `O[k]` by what the body returned, and drop helper variables nobody reads."""
    if (len(stmts) >= 2 and isinstance(stmts[0], ast.FunctionDef) and isinstance(stmts[1], ast.Assign)
            and isinstance(stmts[1].value, ast.Call) and isinstance(stmts[1].value.func, ast.Name)
            and stmts[1].value.func.id == stmts[0].name and not stmts[1].value.keywords
            and all(not isinstance(a, ast.Starred) for a in stmts[1].value.args)):
        fdef, call = stmts[0], stmts[1].value
        subs = {a.arg: v for a, v in zip(fdef.args.args, call.args)}
        body = [_SubstNames(subs).visit(fastast.clone(s)) for s in fdef.body[:-1]]
        oindex = _OIndex(O, fdef.body[-1].value.elts)
        stmts = body + [oindex.visit(s) for s in stmts[2:]]
        return stmts, oindex
    return stmts, _OIndex(O, None)


class _SubstNames(ast.NodeTransformer):
    def __init__(self, subs):
        self.subs = subs

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.subs:
            return fastast.clone(self.subs[node.id])
        return node


class _OIndex(ast.NodeTransformer):
    def __init__(self, O, returned):
        self.O, self.returned = O, returned

    def visit_Subscript(self, node):
        node = self.generic_visit(node)
        if (self.returned is not None and isinstance(node.value, ast.Name) and node.value.id == self.O
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
            return fastast.clone(self.returned[node.slice.value])
        return node


def _drop_dead(stmts: list, extra=frozenset(), every=False) -> list:
    """Remove `_av_*` assignments whose value is never read (in display code only), or with
    `every`, the assignments of any name never read (a side's body, _one_side)."""
    while True:
        loads = {n.id for s in stmts for n in fastast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        loads |= set(extra)
        changed = False

        def keep(s):
            nonlocal changed
            if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                    and (every or s.targets[0].id.startswith("_av_")) and s.targets[0].id not in loads):
                changed = True
                return False
            return True
        new = []
        for s in stmts:
            if isinstance(s, ast.FunctionDef):
                s.body = [b for b in s.body if keep(b)] or [ast.Pass()]
                new.append(s)
            elif keep(s):
                new.append(s)
        stmts = new
        if not changed:
            return stmts


def _display_body(fdef, av: str):
    """The body as a person would read it: runtime helpers shown as the torch calls they make."""
    probes = getattr(fdef, "probes", 0)
    if probes:
        fdef = fastast.clone(fdef)
        fdef.body[-1].value.elts = fdef.body[-1].value.elts[:-probes]
    text = ast.unparse(fdef)
    text = text.replace(f"{av}.truth(", "(").replace(f"{av}.lnot(", "torch.logical_not(")
    text = text.replace(f"{av}.land(", "torch.logical_and(")
    text = text.replace(", True)", ")").replace(", False)", ")").replace(", 'loop')", ")")
    text = text.replace(f"{av}.where(", "torch.where(")
    return ast.parse(text).body[0]


def _direct_args(plan: LoopPlan) -> list[str]:
    out = []
    for mp in plan.mapped:
        if mp.levels:
            pos = [p for _, p, _ in sorted(mp.levels)]
            out.append(mp.base if pos == list(range(len(pos))) else f"{mp.base}.permute(...)")
        elif plan.space.kind == "elements":
            out.append(mp.base)
        else:
            t = _slice_arg(plan, mp)
            out.append(t if mp.dim == 0 else f"{t}.movedim({mp.dim}, 0)")
    return out


def _branch(T: str, commit: list) -> ast.If:
    node = template(f"if {T} is not None:\n    _av_COMMIT\nelse:\n    _av_ORIGINAL",
                    _av_COMMIT=commit or [ast.Pass()], _av_ORIGINAL=[ast.Pass()])[0]
    return node  # the caller puts the original loop (or consumer) into `orelse`


# ----------------------------------------------------------------------------- display text

# tensor methods whose result can be the tensor itself or share its memory (a view, `detach`,
# `.float()` of a float tensor, `.contiguous()` of a contiguous one)
_MAY_SHARE = {"view", "view_as", "reshape", "reshape_as", "t", "transpose", "permute", "unsqueeze", "squeeze",
              "narrow", "select", "detach", "expand", "expand_as", "flatten", "unflatten", "diagonal", "movedim",
              "moveaxis", "swapaxes", "swapdims", "unfold", "as_strided", "contiguous", "to", "type", "type_as",
              "float", "double", "half", "bfloat16", "int", "long", "short", "char", "byte", "bool", "cpu",
              "cuda", "unbind", "split", "chunk", "view_as_real", "view_as_complex",
              # (calls that give back their argument itself, or a view of it)
              "as_tensor", "asarray", "atleast_1d", "atleast_2d", "atleast_3d", "conj", "resolve_conj",
              "resolve_neg", "positive", "adjoint", "broadcast_to", "tensor_split", "hsplit", "vsplit", "dsplit",
              "requires_grad_", "align_as", "rename"}


def _same_text(a: str, b: str) -> bool:
    """Whether two expressions' source texts are the same expression (ast.unparse of each)."""
    try:
        return ast.unparse(ast.parse(a.strip(), mode="eval")) == ast.unparse(ast.parse(b.strip(), mode="eval"))
    except SyntaxError:
        return False


def _appended(plan: LoopPlan, target: str) -> list[str]:
    """The values `target.append(..)` receives in the loop as written (its source)."""
    try:
        tree = ast.parse(plan.source)
    except (SyntaxError, TypeError):
        return []
    return [ast.unparse(n.args[0]) for n in fastast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append"
            and isinstance(n.func.value, ast.Name) and n.func.value.id == target and len(n.args) == 1]


# the analysis's copies of a row the iteration writes parts of (_row_mask_stores, _inner_row_stores)
_ROW_COPIES = ("_av_mrow", ROW_CLONE)


def _list_slots(o, plan: LoopPlan, simple: bool) -> str:
    """fit_store's arguments for a store that may go into a Python list's slots (runtime
    _list_store; a tensor's store ignores them), where they differ from its defaults: `views`,
    the loop's values may be views of what it reads; `same`, the value is a name the loop does
    not bind (that one object in every slot); `slot`, how a slot holds the value: "expr" (the
    default), made by the store's own expression, each store its own object; "name", a name
    the body binds (two stores of it put one object in two slots); "fwd", a row the iteration
    wrote, read back as the value it stored (analysis._forwarded: the loop's slot is the row
    itself, a view); "live", the loop keeps a name's last value for after it (its last slot may
    be that object)."""
    if not simple or o.op:
        return ""
    out = ", views=True" if _may_share(o.value, plan) else ""
    if plan.branches:
        # (`res[i] = 2.5 if c else 1`: the branches' values merged into one batch of their common
        # dtype, where the loop's slots keep each value's own type, int or float; probeN)
        return out + ", slot='branch'"
    if _free_name(o.value, plan):
        return out + f", same={o.value}"
    node = ast.parse(o.value, mode="eval").body
    if any(x.kind == "last" for x in plan.outputs):
        slot = "live"       # (`v = x[i] * 2; a[i] = v`, v read after the loop: the last slot is v)
    elif any(isinstance(n, ast.Attribute) and n.attr == FILL or isinstance(n, ast.Name) and n.id.startswith(_ROW_COPIES)
             for n in fastast.walk(node)):
        # (`outs[i][:L] = v`, read as `outs[i] = outs[i]._av_fill(..)`, and `outs[i][m] = 0`, as
        # a store of the row's masked copy: the loop writes into the list's own tensors, which
        # new rows in its slots would leave as they were; probeK)
        slot = "fwd"
    elif not isinstance(node, ast.Name):
        slot = "expr"
    elif node.id.startswith("_av_fwd"):
        slot = "fwd"
    else:
        slot = "live" if node.id in plan.live_after else "name"
    return out + (f", slot={slot!r}" if slot != "expr" else "")


def _basic_region(index_src: str) -> bool:
    """Whether a store's subscript (`x[{}, 2:]`, the rows at `{}`) takes only ints, slices and the
    rows: a view of the tensor, not a copy (an index that is a name may be a tensor)."""
    try:
        node = ast.parse(index_src.replace("{}", "_av_rows"), mode="eval").body    # (a nest's: one per level)
    except SyntaxError:
        return False
    if not isinstance(node, ast.Subscript):
        return False
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]

    def basic(e):
        if isinstance(e, ast.Name):
            return e.id == "_av_rows"
        if isinstance(e, ast.Constant):
            return type(e.value) is int or e.value is None or e.value is Ellipsis
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return isinstance(e.operand, ast.Constant) and type(e.operand.value) is int
        return isinstance(e, ast.Slice)      # (its bounds are numbers, never an index tensor)
    return all(basic(e) for e in parts)


def _free_name(value: str, plan: LoopPlan) -> bool:
    """Whether an appended value is a plain name the loop does not bind (`out.append(w)`)."""
    try:
        node = ast.parse(value, mode="eval").body
    except SyntaxError:
        return False
    if not isinstance(node, ast.Name):
        return False
    own = {t for t, _ in plan.space.elements} | {plan.space.index} | {ix for ix, _ in plan.space.levels}
    own |= {n for row, names, _ in plan.space.unpack for n in ([names] if isinstance(names, str) else names)}
    own |= {o.target for o in plan.outputs} | {sc[0] for sc in plan.scans}   # (updated by the loop, not in its body)
    own |= {p[0] for o in plan.outputs for p in o.payloads if isinstance(p, tuple) and p and isinstance(p[0], str)}
    bound = {n.id for text in plan.body for st in ast.parse(text).body for n in fastast.walk(st)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return node.id not in own and node.id not in bound


def _may_share(value: str, plan: LoopPlan, depth: int = 0) -> bool:
    """Whether an appended value may be the memory of a value the loop reads (`x[i]`, `row`,
    `x[i].view(-1)`, `r.detach()`, a name bound to one in the body): the loop's list then holds
    views that see later writes into those values, which rows of a new batch do not."""
    try:
        node = ast.parse(value, mode="eval").body
    except SyntaxError:
        return True
    while True:
        if isinstance(node, ast.Name):
            if any(name == node.id and op in ("+", "-", "*", "max", "min", "lse", "lin") + LOGICAL
                   for name, _, op, _ in plan.scans):
                return False     # a running total: a new tensor at every step
            if plan.space.kind == "range" and node.id == plan.space.index:
                return False     # (`bad.append(i)`: the range's Python int; probeU)
            bound = [st for text in plan.body for st in ast.parse(text).body
                     if any(isinstance(n, ast.Name) and n.id == node.id and isinstance(n.ctx, ast.Store)
                            for n in fastast.walk(st))]
            if depth < 8 and len(bound) == 1 and isinstance(bound[0], ast.Assign) and len(bound[0].targets) == 1 \
                    and isinstance(bound[0].targets[0], (ast.Name, ast.Tuple)):
                return _may_share(ast.unparse(bound[0].value), plan, depth + 1)
            return True
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT", "H", "mH", "real", "imag", "data"):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MAY_SHARE \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and node.args:
            node = node.args[0]      # `torch.flatten(x[i])`, `torch.as_tensor(x[i])`: its argument's memory
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in _MAY_SHARE or node.func.attr.endswith("_") and not node.func.attr.startswith("_")):
            node = node.func.value   # (an in-place method gives back its tensor)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            node = node.operand      # `+x[i]` is x[i] itself
        elif isinstance(node, ast.IfExp):     # `x[i] if c else x[i] * 0`: either branch's value
            return any(_may_share(ast.unparse(b), plan, depth + 1) for b in (node.body, node.orelse))
        elif isinstance(node, ast.BoolOp):    # `a or b` is one of its operands
            return any(_may_share(ast.unparse(b), plan, depth + 1) for b in node.values)
        else:
            return False


def _rows_text(plan: LoopPlan, offset: int) -> str:
    if plan.space.kind == "range":
        args = list(plan.space.range_args)
        start, stop = (["0"] + args)[-2:] if len(args) == 1 else args[:2]
        step = args[2] if len(args) == 3 else None
        sh = (lambda e: e if offset == 0 else f"{e} + {offset}" if offset > 0 else f"{e} - {-offset}")
        if step is not None and not step.isdigit():
            # a negative or computed step: tensors take no negative slice step, a list of rows works
            return f"list(range({sh(start)}, {sh(stop)}, {step}))"
        text = f"{'' if start == '0' and offset == 0 else sh(start)}:{sh(stop)}"
        return text + (f":{step}" if step else "")
    n = f"len({plan.space.elements[0][1]})"
    return f"{offset}:{n} + {offset}" if offset else f":{n}"


def _slice_arg(plan: LoopPlan, mp) -> str:
    """`x[a:b]` for the rows a loop reads, or plain `x` when the range is all of x's dimension."""
    rows = _rows_text(plan, mp.offset)
    whole = {":", f":len({mp.base})", f":{mp.base}.shape[{mp.dim}]", f":{mp.base}.size({mp.dim})"}
    if mp.dim == 0:
        whole |= {f":{mp.base}.shape[0]", f":{mp.base}.size(0)"}
    text = mp.base if rows in whole else f"{mp.base}[{', '.join([':'] * mp.dim + [rows])}]"
    # `reversed(range(..))`: the rows in the order the loop visits them
    return f"{text}.flip({mp.dim})" if plan.space.reverse else text


def _last_text(plan: LoopPlan) -> str:
    if plan.space.kind == "range":
        return f"range({', '.join(plan.space.range_args)})[{0 if plan.space.reverse else -1}]"
    return f"len({plan.space.elements[0][1]}) - 1 + {plan.space.enum_start}"


def _fit_text(ok: str, o) -> str:
    return ok if o.dim == 0 else f"{ok}.movedim(0, {o.dim})"


def _consume_text(kind: str, ok: str, mask=None) -> str:
    if mask:
        ok = f"{ok}[{mask}]"
    if kind in ("sum", "max", "min", "any", "all"):
        return f"{ok}.{kind}()" if kind in ("sum", "any", "all") else f"{ok}[{ok}.arg{kind}()]"
    if "@" in kind:
        base, d = kind.split("@")
        return f"{ok}.movedim(0, {d})" if base == "stack" else f"{ok}.movedim(0, {d}).flatten({d}, {int(d) + 1})"
    return {"stack": ok, "cat": f"{ok}.flatten(0, 1)", "tensor": f"{ok}.detach().clone()",
            "list": f"list({ok}.unbind(0))"}[kind]


def _run_args(plan: LoopPlan) -> list[str]:
    """The batched arguments of the body function, as source text (for explain)."""
    elements = dict((s, t) for t, s in plan.space.elements)
    srcs = [s for _, s in plan.space.elements]
    n = "min(" + ", ".join(f"len({s})" for s in srcs) + ")" if len(srcs) > 1 else None
    args = []
    for mp in plan.mapped:
        if mp.base in elements:
            args.append(mp.base if n is None else f"{mp.base}[:{n}]")
        else:
            args.append(_slice_arg(plan, mp))
    before = {o.target for o in plan.outputs if o.kind == "scan" and o.exclusive}
    return args + [f"{name}_{'before' if name in before else 'running'}" for name, *_ in plan.scans]


def _run_text(m: Match, plan: LoopPlan, body: str, params: list[str]) -> str:
    if plan.space.kind == "nest":
        names = [ix for ix, _ in plan.space.levels]
        text = body
        for lv in reversed(range(len(names))):
            dims = []
            for mp in plan.mapped:
                hit = [p for l2, p, _ in mp.levels if l2 == lv]
                dims.append(None if not hit else hit[0] - sum(1 for l2, p2, _ in mp.levels if l2 < lv and p2 < hit[0]))
            dims += [0 if ix == names[lv] else None for ix in plan.value_indices]
            text = f"torch.func.vmap({text}, in_dims={tuple(dims)})"
        args = [mp.base for mp in plan.mapped] + [f"torch.arange({', '.join(a)})" for ix, a in plan.space.levels
                                                   if ix in plan.value_indices]
        return f"{text}({', '.join(args)})"
    args = _run_args(plan)
    dims = [mp.dim for mp in plan.mapped] + [0 for _ in plan.scans]
    if plan.index_as_value:
        if plan.space.kind == "range":
            args.append(f"torch.arange({', '.join(plan.space.range_args)})" + (".flip(0)" if plan.space.reverse else ""))
        else:
            s = plan.space.enum_start
            args.append(f"torch.arange({s}, {s} + len({plan.space.elements[0][1]}))")
        dims.append(0)
    if m.strategy == "broadcast":
        if all(d == 0 for d in dims) and not plan.index_as_value:
            return f"{body}({', '.join(args)})"
        return f"{body}(*autovec.runtime.align([{', '.join(args)}], dims={dims}))"
    in_dims = "" if all(d == 0 for d in dims) else f", in_dims={tuple(dims)}"
    return f"torch.func.vmap({body}{in_dims})({', '.join(args)})"


def _computed_factor(text: str) -> bool:
    """Whether a linear recurrence's factor (`h = a * h + b`) is arithmetic the loop never does
    as such: `1 - a` from `h + a * (x - h)`, `a * m` from `h * a * m`, `a / c` (the affine form's
    own grouping). Rounded once in float32, such a factor near 1 is off by a relative 6e-8 that
    the steps compound (runtime._linear_prefix), where a plain name, element or constant is the
    very value the loop multiplies by."""
    try:
        e = ast.parse(text, mode="eval").body
    except SyntaxError:
        return True
    while isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        e = e.operand
    return not isinstance(e, (ast.Name, ast.Attribute, ast.Subscript, ast.Constant))
