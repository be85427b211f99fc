"""The scan strategy: prefix computations.

* An accumulator read later in the same iteration (`s = s + x[i]; out[i] = s`): the values
  added at each step are computed for all iterations at once, the running values come from
  `cumsum` / `cumprod`, and the rest of the body runs batched on them.
* An in-place recurrence on a tensor, `t[i] += t[i - 1]` over `range(a, b)`: `cumsum` (or
  `cumprod`) of `t[a - 1:b]` written back in place.
"""
from __future__ import annotations

from ..codegen import expr, set_lines, template
from ..plan import LoopPlan, Refusal
from ..analysis.loops import SHIFT
from .common import Lowered, Match, _branch, _space_expr, build

_FORMS = {"+": "cumsum", "-": "cumsum (subtracted)", "*": "cumprod", "max": "cummax", "min": "cummin", "lse": "logcumsumexp",
          "|": "cummax of bools", "&": "cummin of bools", "lor": "cummax of bools", "land": "cummin of bools",
          "or": "cummax of bools", "and": "cummin of bools",
          "best>": "cummax", "best>=": "cummax", "best<": "cummin", "best<=": "cummin",
          "lin": "a first-order linear recurrence, evaluated as a parallel scan"}


def match(plan: LoopPlan, env) -> Match | Refusal:
    prefix = [o for o in plan.outputs if o.kind == "prefix"]
    if prefix:
        o = prefix[0]
        k = o.payloads[0][1] if o.payloads and o.payloads[0][0] == "lag" else o.offset or 1
        what = ("the next element" if k == 1 else f"the element {k} after") if o.flip else \
            ("the previous element" if k == 1 else f"the element {k} before")
        if o.op == "fill":
            test = o.payloads[0][1].replace("_av_row", o.index_src.format(plan.space.index))
            return Match("scan", plan, f"`{o.index_src.format(plan.space.index)}` takes {what} where `{test}` holds"
                         f"{' (on each element)' if not o.payloads[0][2] else ''}: a forward fill along dimension "
                         f"{o.dim}, each position the last one before it where the test fails (a running maximum of "
                         "their positions, then one gather)" + (", walking back (a backward fill)" if o.flip else ""))
        step = f"{o.op}= {what}" if o.op in ("+", "*") else f"is the {o.op}imum of itself and {what}"
        return Match("scan", plan, f"`{o.index_src.format(plan.space.index)}` {step}: an in-place {_FORMS[o.op]} "
                     f"along dimension {o.dim}" + (f", one for each of the `{k}` interleaved chains (an int of at least 1 on each call)"
                                              if isinstance(k, str) else f", one for each of the {k} interleaved chains" if k > 1 else "")
                     + (", from the end (a suffix scan)" if o.flip else ""))
    if not plan.scans:
        return Refusal("no running value is read inside the loop", plan.lineno)
    lin = {o.target: o for o in plan.outputs if o.kind == "linrec"}
    pays = [name for name, _, op, _ in plan.scans if op.startswith("pay")]
    before = {o.target for o in plan.outputs if o.kind == "scan" and o.exclusive}
    parts = [(f"`{name}` = a * `{name}` + b is a first-order linear recurrence with factor "
              f"`{lin[name].payloads[0][2]}`" + (", which changes every step (evaluated as a parallel scan)"
                                                 if lin[name].payloads[0][3] in ("varying", "+=v", "+=vh") or lin[name].payloads[0][3].startswith(("reset", "select")) else
                                                 " (evaluated as a parallel scan)"))
             if op == "lin" and name in lin else f"`{name}` is {_FORMS[op]}" if op == "lin" else
             f"`{name[len(SHIFT):]}` is read before the statement that assigns it: the value the step before "
             "assigned (the values shifted by one step, its value before the loop first)" if op == "last" else
             f"`{name}` is a running {'product' if op == '*' else 'extreme' if op in ('max', 'min') or op.startswith('best') else 'log-sum-exp' if op == 'lse' else 'logical or' if op in ('|', 'lor', 'or') else 'logical and' if op in ('&', 'land', 'and') else 'sum'} "
             f"read in the loop{' before each update, from its start' if name in before else ''} ({_FORMS[op]})"
             for name, _, op, _ in plan.scans if not op.startswith("pay")]
    if pays:
        parts.append(f"{', '.join(f'`{p}`' for p in pays)} follow{'s' if len(pays) == 1 else ''} the running best "
                     "(the step where it was last set, as the loop's comparisons decide)")
    carried = "".join(
        f"`{out}[{':, ' * d}{plan.space.index}{f' - {-off}' if off < 0 else f' + {off}' if off else ''}]` reads the row the step before "
        f"stored: the running value `{carry}` carries it, from `{shown}` before the loop (on each call the stored "
        f"values must be of `{out}`'s dtype and row shape, else the loop runs); "
        for carry, out, d, off, shown in plan.carried)
    return Match("scan", plan, carried + "; ".join(parts) + "; the rest of the body runs on all iterations at once")


def lower(m: Match, namer) -> Lowered:
    plan = m.plan
    if not any(o.kind == "prefix" for o in plan.outputs):
        return build(m, namer)
    o = plan.outputs[0]
    L = plan.loop_id
    T, P, E, AV = namer.new(f"_av_t{L}"), namer.new(f"_av_p{L}"), namer.new("_av_e"), namer.runtime
    # (the rows before and at the loop's: one region, bounds-checked at both ends, "span")
    sym = o.payloads and o.payloads[0][0] == "lag"
    k = f"({o.payloads[0][1]})" if sym else o.offset or 1      # (a lag by name: its value, checked on each call)
    # (a fill's test, a function of the rows: `lambda _av_row: torch.isnan(_av_row)`, and whether
    # the loop takes its truth value per row, `if`, or uses it per element, `torch.where`)
    test = f", test=(lambda _av_row: {o.payloads[0][1]}), per_row={o.payloads[0][2]}" if o.op == "fill" else ""
    # the tensor the recurrence runs along: the target itself, or where the subscript has other
    # entries after the index (`x[i, c] += x[i - 1, c]`, `x[i, :2]`, `x[:, t, 0]`), the view those
    # entries take with the index a full slice (`x[:, c]`), along the same dimension (the entries
    # before it are full slices: analysis.loops.match_subscript). The runtime checks it is a view.
    view = o.target if _rest_whole(o.index_src) else o.index_src.format(":")
    # (the bounds along that dimension are the target's: the entries before it are full slices)
    # (the rows the loop reads at `i + k` walking back, `i - k` else; the runtime's lag is negative
    # for a walk back)
    minus_k = f"-{k}" if sym else -k
    writes = expr(f"(('store', {o.target}, {o.dim}, {k if o.flip else minus_k}, {o.target!r}, 'span'), "
                  f"('store', {o.target}, {o.dim}, 0, {o.target!r}, 'span'))")
    stmts = template(f"""
_av_T = None
try:
    _av_T = _av_AV.begin({L}, _av_SPACE)
    if _av_T is not None:
        _av_T = _av_AV.guard(_av_T, (), (), (), _av_WRITES)
    if _av_T is not None:
        _av_P = _av_AV.prefix_region({view}, {o.dim}, _av_T, {o.op!r}, {minus_k if o.flip else k}, {'None' if view == o.target else o.target}{test}{', named=' + repr('back' if o.flip else 'ahead') if sym else ''}{', rows1=True' if ('rows1', True) in o.payloads else ''})
except _av_AV.Error as _av_E:
    _av_T = _av_AV.failed({L}, _av_T, _av_E)
""", _av_T=T, _av_AV=AV, _av_SPACE=_space_expr(plan, AV), _av_WRITES=writes, _av_P=P, _av_E=E)
    set_lines(stmts, plan.lineno)
    commit = template(f"_av_AV.prefix_commit({view}, {o.dim}, _av_T, _av_P, {minus_k if o.flip else k})\n_av_T.done()", _av_AV=AV, _av_T=T, _av_P=P)
    # (the loop variable read after the loop, or a global: its last value, as the loop leaves it)
    # (a `while` loop's counter is one step past its last iteration, as lowering.common binds it)
    past = f" + {plan.space.range_args[2]}" if plan.form == "while" else ""
    commit += [st for name in plan.live_after if name == plan.space.index
               for st in template(f"{name} = _av_T.last_index(){past}", _av_T=T)]
    after = template(f"if _av_AV.py_clock:\n    _av_AV.python_ran({L})", _av_AV=AV)
    set_lines(commit + after, plan.lineno)
    if o.flip:
        region = o.index_src.format(f"{_start(plan)}:{_stop(plan)} + {k}")
        fn = {"+": "cumsum", "*": "cumprod", "max": "cummax", "min": "cummin", "fill": "backward fill"}[o.op]
        display = template(f"# from the end: {fn} of each chain of rows {k} apart, on the region flipped along "
                           f"dimension {o.dim}, flipped back\n{region} = suffix_{o.op if o.op != '+' else 'sum'}({region})")
        return Lowered(m, stmts + [_branch(T, commit)], display, after=after)
    if o.op == "fill":
        region = o.index_src.format(f"{_start(plan)} - {k}:{_stop(plan)}")
        test = o.payloads[0][1].replace("_av_row", "rows")
        display = template(f"# forward fill: each row where `{test}` holds takes the last row {k if k > 1 else ''} before it "
                           f"where it does not\n{region} = {region}.gather({o.dim}, last_kept_index)")
        return Lowered(m, stmts + [_branch(T, commit)], display, after=after)
    fn = {"+": "cumsum", "*": "cumprod", "max": "cummax", "min": "cummin"}[o.op]
    values = ".values" if o.op in ("max", "min") else ""
    if k == 1:
        region = o.index_src.format(f"{_start(plan)} - 1:{_stop(plan)}")
        display = template(f"{region} = torch.{fn}({region}, dim={o.dim}){values}")
    elif sym or k > 4:
        display = template(f"# for each r in range({k}): the chain {o.index_src.format(f'{_start(plan)} - {k} + r:{_stop(plan)}:{k}')}\n"
                           f"# becomes its own torch.{fn} along dimension {o.dim} (one {fn} of all the chains side by side)\npass")
    else:
        display = template("\n".join(
            f"{o.index_src.format(f'{_start(plan)} - {k - r}:{_stop(plan)}:{k}')} = torch.{fn}("
            f"{o.index_src.format(f'{_start(plan)} - {k - r}:{_stop(plan)}:{k}')}, dim={o.dim}){values}"
            for r in range(k)))
    return Lowered(m, stmts + [_branch(T, commit)], display, after=after)


def _rest_whole(index_src: str) -> bool:
    """Whether every entry of the subscript but the loop index's is a full slice `:`."""
    import ast
    sub = ast.parse(index_src.format("_av_index"), mode="eval").body
    entries = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
    return all(isinstance(e, ast.Name) and e.id == "_av_index" or isinstance(e, ast.Slice) and e.lower is None
               and e.upper is None and e.step is None for e in entries)


def _start(plan):
    args = plan.space.range_args
    return args[0] if len(args) == 2 else "0"


def _stop(plan):
    return plan.space.range_args[-1] if len(plan.space.range_args) == 2 else plan.space.range_args[0]


def guards(m: Match) -> list[str]:
    return ["the values added at each step do not depend on the running value"]
