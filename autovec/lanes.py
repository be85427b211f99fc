"""Express lanes: the guard of one loop and one signature, written out as Python code.

`FunctionRuntime._guard` checks a loop's values in one general pass: it walks the indexed
tensors, the loop's sources, its free values and its outputs, builds the call's signature as a
tuple of their types, dtypes, ranks, devices and grad flags, and interns it. Once a loop has
run vectorized for a signature (Token.done), `build` writes that pass out for this loop and
signature alone: the tuple's structure is fixed at the call site (how many values, which
dimension and offset each is indexed at, which kind each output is), so the lane is a straight
run of attribute checks
against the signature's constants, with the bounds, aliasing and purity checks the general pass
makes for such a loop. Where any check differs from the signature the lane was written for, it
answers None and the general pass decides (and may write another lane).

The lane gives the very Token the general pass gives (the same signature id), or None. It
covers CPU tensors of type torch.Tensor, range loops, loop nests and loops over tensors (not
lists of numbers or of tensors to batch); the checks the general pass adds for some loops
(branches under grad, shared work, matrix-product precision: FunctionRuntime._more_checks)
and the purity of callees are the same calls. It never answers a call the general pass would
refuse (tests/test_lanes.py audits every answer against the general pass); it may answer None
where the general pass accepts (a subclass, a GPU tensor), which then decides.

Measured on the dev case elementwise_add_append at 5 rows: the general pass took 3.2 us a call,
its lane 1.7 us.

`express` goes one step further: the whole steady state of a loop and signature (the lane's
checks, the hot runner and the consumers) as one function, which the generated code calls first.
"""
from __future__ import annotations

import types
from typing import NamedTuple

import torch

from . import pins

# the builtins generated lanes and expresses call, as they were at import (runtime imports the same
# ones): a user's later `builtins.len = ..` does not change autovec's own counts
import builtins as _builtins_module
_BUILTINS = dict(vars(_builtins_module))


class _Inline(NamedTuple):
    """A hot runner's work written into an express (_token_run's `inline`)."""
    lines: list          # lines that set `outs`, or return None
    fresh: bool = False  # the batch is new memory (batched products: the runner's token's `fresh`)
    after: str = ""      # a line that makes `outs` what the runner returns, once the token is made
    unmoved: int = 0     # the dimension the batch is computed at, not moved yet (0: none)

_MAX_PER_LOOP = 4        # lanes kept per loop (signatures in use at once: dtypes, grad on and off)
_WRITES = ("list", "store", "fresh", "scatter", "seq", "accum", "best", "cat")


def eligible(nest, mapped, writes, tok) -> bool:
    """Whether the general pass's answer (`tok`) for these values can be written out as a lane:
    plain CPU tensors only, no lists of numbers (a nest walks no sources)."""
    if tok.numbers or tok.number_sources or nest and tok.sources:
        return False
    tensors = [m[0] for m in mapped] + list(tok.sources) + list(tok.free_tensors) + \
        [w[1] for w in writes if isinstance(w[1], torch.Tensor)]
    return all(type(t) is torch.Tensor and t.is_cpu for t in tensors) and all(w[0] in _WRITES for w in writes) \
        and all(type(w[1]) is torch.Tensor for w in writes if w[0] == "store")     # (not a list's slots)


def build(rt, loop_id, sid, sig, mapped, sources, free, calls, writes, nest=False):
    """The lane for this loop and signature (`sig`, the general pass's tuple; `sid`, its id)."""
    from . import runtime as R

    made = checks(rt, loop_id, sid, sig, mapped, sources, free, calls, writes, nest)
    if made is None:
        return None
    body, consts, names = made
    lines = ["def lane(pending, mapped, free, calls, writes):",
             "    loop_id, m, plan, space, sources, levels, n, start, step, first, estimate, decision, t0 = pending"]
    lines += body
    emit = lines.append
    consts["Token"] = R.Token
    emit(f"    tok = Token(rt, loop_id, m, n, start, step, first, mapped, sources, [{', '.join(names['free_tensors'])}], "
         f"{sid!r}, levels, estimate)")
    if not nest and not sources and mapped:
        # the hot runners' question (runtime._covered), answered from the shapes read above:
        # every indexed tensor's loop dimension covered from row 0 in steps of 1
        cond = " and ".join(f"start == {-m[2]} and z_a{i} == n" for i, m in enumerate(mapped))
        emit(f"    if step == 1 and {cond}:")
        emit(f"        tok.covered = (n, ({''.join(f'a{i}, ' for i in range(len(mapped)))}))")
    if nest and names["spans"]:
        # _hot_nest's question, answered from the shapes read above (-1: no trip count, a nest)
        emit(f"    if {' and '.join(dict.fromkeys(names['spans']))}:")
        emit("        tok.covered = (-1, None)")
    emit("    tok.laned = True")
    if rt.peeks.get(loop_id):
        emit("    tok.free = free")
    emit("    if decision is not None:")
    emit("        tok.decision, tok.t0 = decision, t0")
    emit("    return tok")
    return _compiled(rt, loop_id, "lane", lines, consts)


def _compiled(rt, loop_id, name, lines, consts):
    ns = dict(consts)
    ns["__builtins__"] = _BUILTINS
    exec(compile("\n".join(lines), f"<autovec {name} {rt.qualname}:{loop_id}>", "exec"), ns)
    fn = ns[name]
    fn.source = "\n".join(lines)
    return fn


def checks(rt, loop_id, sid, sig, mapped, sources, free, calls, writes, nest=False, covered=False, express=False):
    """The lane's checks for this loop and signature, as lines of a function body that has the
    pending state's names bound (`loop_id`, `m`, `levels`, `n`, `start`, `step`, `sources`, and
    `mapped`, `free`, `calls`, `writes`), each answering None where a value differs: (lines,
    the constants they read, {"free_tensors", "spans": names}), or None where no lane fits.
    `covered`: the caller has checked that the loop starts where every indexed tensor's rows
    start, in steps of 1 (lanes.express); each one's rows must then be n, which keeps every
    index read in bounds (the rows written are checked as the lane does). In a nest, `covered`
    asks it of every level instead: each indexed tensor's dimension read at a level is that
    level's whole range, from 0 in steps of 1 (what _hot_nest asks, or the general path
    decides), which keeps every index read in bounds."""
    from . import runtime as R

    stores = any(w[0] in ("store", "fresh") for w in writes)

    peeks = rt.peeks.get(loop_id, ())
    helped = sig[-2] if len(sig) > 1 and type(sig[-2]) is tuple and sig[-2][:1] == ("helpers",) else None
    if helped is not None:
        sig = sig[:-2] + sig[-1:]  # (the values helpers read, before the grad mode: runtime._helper_reads)
    if len(sig) != len(mapped) + len(sources) + len(free) + len(peeks) + len(writes) + 1:
        return None     # (an autocast state's entry: the general pass alone)
    grad = sig[-1]      # (the grad mode: the signature's last entry)
    consts = {"Tensor": torch.Tensor, "STRIDED": torch.strided, "rt": rt, "FWD": R._forward_ad,
              "_in_transform": R._in_transform, "_any_autocast": R._any_autocast, "_top_hooks": R._top_hooks,
              "grad_on": torch.is_grad_enabled, "inference_on": torch.is_inference_mode_enabled,
              "get_default_dtype": torch.get_default_dtype, "F32": torch.float32,
              "_overlapping": R._overlapping, "_peek_sig": R._peek_sig, "_no_aliasing": R._no_aliasing, "_appended_aliasing": R._appended_aliasing, "_sig": R._sig, "_helper_reads": R._helper_reads,
              "PURE": R._PURE_BY_ID, "why_impure": R.why_impure, "ENV": R._ENV, "KEY": R._INDEX_CHECK_KEY, "indexcheck": R.indexcheck,
              "GuardFailed": R.GuardFailed, "CPU": R._CPU, "_dropped": R._dropped, "_rows_apart": R._rows_apart}
    lines = [f"    if (levels is {'' if nest else 'not '}None) or _in_transform() is not None or _any_autocast() or _top_hooks(False) is not None \\\n"
             "            or get_default_dtype() is not F32:",
             "        return None",
             "    if FWD._current_level >= 0:",
             "        return None     # (forward-mode AD on: the general pass looks for dual tensors)",
             "    if KEY in ENV and indexcheck.forced() or indexcheck._FORCE:",
             "        return None     # (the index check forced on the CPU: the general pass sets it up)",
             f"    if rt.failures and ({loop_id!r}, {sid!r}) in rt.failures:",
             "        return None",
             f"    if grad_on() is not {grad!r}:",
             "        return None",
             ]
    emit = lines.append
    if not nest and (not covered or stores):
        emit("    last = start + (n - 1) * step")
        emit("    lo = start if start < last else last")
        emit("    hi = lo + (n - 1) * (step if step > 0 else -step)")

    unpacked, low_checked = set(), set()
    spans = []      # (a nest) each indexed tensor's dimension covered from 0 in steps of 1, per level

    def bounds(v, d, off, store=False):
        """The general pass's bounds check of `v` indexed at dimension `d`, offset `off`
        (in a nest: per level, `d` the (level, dimension, offset) spec, or a store's rows)."""
        if covered and not store and nest:
            for lv, p, o in d:
                if lv not in unpacked:
                    unpacked.add(lv)
                    emit(f"    st{lv}, sp{lv}, kk{lv} = levels[{lv}]")
                    emit(f"    e{lv} = st{lv} + (kk{lv} - 1) * sp{lv}")
                emit(f"    if st{lv}{f' + {o}' if o else ''} != 0 or sp{lv} != 1 or {v}.shape[{p}] != kk{lv}:")
                emit("        return None")
            return
        if covered and not store:
            emit(f"    z_{v} = {v}.shape[{d}]")
            emit(f"    if z_{v} != n:")
            emit("        return None")
            return
        if not nest:
            emit(f"    z_{v} = {v}.shape[{d}]")
            emit(f"    if lo + {off} < 0 or hi + {off} >= z_{v}:")
            emit("        return None")
            return
        for spec in (off if store else d):
            lv, p, o = (spec[0], spec[0], spec[1]) if store else spec
            if lv not in unpacked:     # (each level's first and last index, once)
                unpacked.add(lv)
                emit(f"    st{lv}, sp{lv}, kk{lv} = levels[{lv}]")
                emit(f"    e{lv} = st{lv} + (kk{lv} - 1) * sp{lv}")
            plus = f" + {o}" if o else ""
            low = f"st{lv}{plus} < 0 or " if (lv, o) not in low_checked else ""
            low_checked.add((lv, o))
            if not store:
                spans.extend([f"st{lv}{plus} == 0", f"sp{lv} == 1", f"{v}.shape[{p}] == kk{lv}"])
            emit(f"    if {low}e{lv}{plus} >= {v}.shape[{p}]:")
            emit("        return None")
    pos = iter(range(len(sig)))

    def const(v):
        name = f"C{len(consts)}"
        consts[name] = v
        return name

    grads = []     # the signature's requires_grad flags of every tensor checked here
    dtypes = {}    # each tensor's dtype, by its name here

    def tensor_checks(v, entry, standin=False):
        """`standin`: a CPU tensor or the meta stand-in of one (runtime._let_go)."""
        _, dtype, k, _, rg = entry
        grads.append(rg)
        dtypes[v] = dtype
        cpu = f"not ({v}.is_cpu or {v}.is_meta and hasattr({v}, '_av_fill'))" if standin else f"not {v}.is_cpu"
        emit(f"    if type({v}) is not Tensor or {v}.dtype is not {const(dtype)} or {v}.dim() != {k} "
             f"or {cpu} or {v}.requires_grad is not {rg} or {v}.layout is not STRIDED:")
        emit("        return None")

    tensors = []
    for i, (t, d, off, _) in enumerate(mapped):
        v = f"a{i}"
        emit(f"    {v} = mapped[{i}][0]")
        tensor_checks(v, sig[next(pos)])
        bounds(v, d, off)
        tensors.append(v)
    for i, _ in enumerate(sources):
        v = f"s{i}"
        emit(f"    {v} = sources[{i}]")
        tensor_checks(v, sig[next(pos)])
        tensors.append(v)
    free_tensors = []
    atoms = True       # every free value a tensor or, by its type, one that holds none (_ATOMS)
    quiet = True       # atoms, or functions (by identity)
    for i, x in enumerate(free):
        v, entry = f"f{i}", sig[next(pos)]
        emit(f"    {v} = free[{i}]")
        if isinstance(x, torch.Tensor):
            tensor_checks(v, entry)
            free_tensors.append(v)
            continue
        if type(x) is types.ModuleType:        # (`torch`, `F`, `math`: in the signature by identity)
            emit(f"    if {v} is not {const(x)}:")
            emit("        return None")
            continue
        atoms = atoms and entry is type(x) and type(x) in R._ATOMS
        # (a function pinned by identity holds no tensor either: the gradient checks' question
        # of it is the callee's, more_checks)
        quiet = quiet and type(x) in R._ATOMS and (entry is type(x) or type(x) is types.FunctionType)
        if entry is type(x):
            emit(f"    if type({v}) is not {const(entry)}:")
            emit("        return None")
        else:
            emit(f"    if _sig({v}) != {const(entry)}:")
            emit("        return None")
    for p, path in peeks:      # (values read through outside objects: runtime._peek_sig)
        entry = sig[next(pos)]
        if type(free[p]) is torch.Tensor and entry == ("peek", None):
            continue               # (through a tensor, checked above as one)
        emit(f"    if ('peek', _peek_sig(f{p}, {const(path)})) != {const(entry)}:")
        emit("        return None")
    written, fresh, lists = [], [], []
    stores_at = []      # (variable, (dim, offset, target name) of a store, or None: a scatter, an in-place total)
    for i, w in enumerate(writes):
        kind, v, entry = w[0], f"w{i}", sig[next(pos)]
        emit(f"    {v} = writes[{i}][1]")
        if kind in ("store", "fresh", "scatter"):
            # (in an express, a large fresh output is a stand-in on the meta device: runtime._let_go)
            tensor_checks(v, entry, standin=express and kind == "fresh")
            if kind != "scatter":
                bounds(v, w[2], w[3], store=True)
            if entry[4] and grad:       # (a leaf that requires grad: the loop raises where grad is on)
                emit(f"    if {v}.is_leaf:")
                emit("        return None")
            emit(f"    if not {v}.is_contiguous() and _overlapping({v}):")
            emit("        return None")
            if kind == "scatter" or len(w) == 5:
                # (one tensor written again, at other rows, under another name or by another kind
                # of write: the general guard's runtime._one_output and _written_once)
                here = (w[2], w[3], w[4]) if len(w) == 5 else None    # (a scatter in its own row: _row_part)
                for u, there in stores_at:
                    if here is None or there is None or there[2] != here[2]:
                        emit(f"    if {v} is {u}:")
                        emit("        return None")
                    elif there != here:
                        emit(f"    if {v} is {u}:")
                        emit("        try:")
                        emit(f"            _rows_apart({there[0]!r}, {there[1]!r}, {here[0]!r}, {here[1]!r}, n, step, "
                             f"{'levels' if nest else 'None'})")
                        emit("        except GuardFailed:")
                        emit("            return None")
                stores_at.append((v, here))
            (fresh if kind == "fresh" else written).append(v)
        elif kind == "list":
            emit(f"    if type({v}) is not list or _sig({v}) != {const(entry)}:")
            emit("        return None")
            for u in lists:        # (two appended lists that are one: the general guard refuses)
                emit(f"    if {v} is {u}:")
                emit("        return None")
            lists.append(v)
        elif isinstance(w[1], torch.Tensor):      # accum, best, cat, seq of a tensor
            tensor_checks(v, entry)
            if kind == "accum" and w[2]:
                for u, _ in stores_at:        # (runtime._written_once)
                    emit(f"    if {v} is {u}:")
                    emit("        return None")
                stores_at.append((v, None))
            if kind == "accum" and w[2] or kind == "seq":
                written.append(v)
        else:
            emit(f"    if type({v}) is not {const(type(w[1]))} or _sig({v}) != {const(entry)}:")
            emit("        return None")
    if lists and (calls or any(not isinstance(f, torch.Tensor) for f in free)):
        # (a list the loop grows, read another way through a value or helper: the general guard's
        # runtime._appended_aliasing; a lane's sources are tensors)
        emit("    try:")
        emit(f"        _appended_aliasing([{', '.join(lists)}], (), free, calls)")
        emit("    except GuardFailed:")
        emit("        return None")
    if written or fresh:
        emit(f"    if not inference_on() and ({' or '.join(f'{v}.is_inference()' for v in written + fresh)}):")
        emit("        return None")
    if written:
        rest = "[" + ", ".join(tensors[len(mapped):]) + "]"
        emit("    try:")
        emit(f"        _no_aliasing([{', '.join(written)}], mapped, {rest}, [{', '.join(free_tensors)}], free, calls)")
        emit("    except GuardFailed:")
        emit("        return None     # (the general pass refuses it, with its bookkeeping)")
    if loop_id in rt.checked_more:
        more_checks(rt, loop_id, emit, const, tensors, free_tensors, written, fresh, calls,
                    [dtypes[v] for v in tensors], quiet and not any(grads), len(free) + len(mapped))
    if helped is not None:
        emit(f"    if ('helpers',) + _helper_reads(calls) != {const(helped)}:")
        emit("        return None")
    for i in range(len(calls)):
        emit(f"    hit = PURE.get(id(calls[{i}]))")
        emit(f"    if (hit is None or hit[0] is not calls[{i}] or hit[1] is not None) and why_impure(calls[{i}]):")
        emit("        return None")
    return lines, consts, {"free_tensors": free_tensors, "spans": spans, "atoms": atoms}



def more_checks(rt, loop_id, emit, const, tensors, free_tensors, written, fresh, calls, dtypes, no_grads, n_values):
    """The lane's part of FunctionRuntime._more_checks. Its checks beyond matmul precision all
    look for a tensor that requires grad (in the values, reached through the free values or
    the callees) and pass where none does: so where the signature has none, the free values are
    atoms (their types hold no tensor) or Python modules, every shared value the body puts through
    loop-invariant work is one of these by its plain name, and every callee is a builtin or one
    of torch's own functions, the checks are those of grad off: the precision of matrix
    products alone, read from the settings. Elsewhere, the general call."""
    from . import runtime as R

    m = rt.matches[loop_id]
    shared = rt.shared.get(loop_id)
    light = no_grads and (shared is None or all(
        safe is None or source in shared[1] and shared[1].index(source) < n_values for source, safe in shared[0]))
    kinds = []
    for c in calls:
        if c is None:
            # (runtime.param_methods's answer that a helper's argument objects call nothing impure)
            kinds.append(f"calls[{len(kinds)}] is None")
        elif type(c) is types.BuiltinFunctionType:
            kinds.append(f"type(calls[{len(kinds)}]) is {const(types.BuiltinFunctionType)}")
        elif type(c) is types.FunctionType and not R._user_code(c):
            kinds.append(f"calls[{len(kinds)}] is {const(c)}")
        elif type(c) is types.FunctionType:
            # a helper: pinned, reading no tensor, its gradient verdict known to be no (pins;
            # with data-dependent branches, the verdict of reading any tensor at all)
            kinds.append(f"{const(pins.quiet)}(calls[{len(kinds)}], {bool(rt.selects[loop_id])})")
        else:
            light = False
            break
    full = [f"    try:",
            f"        rt._more_checks(loop_id, m, levels, grad_on(), [{', '.join(tensors)}], [{', '.join(free_tensors)}], "
            f"[{', '.join(written)}], [{', '.join(fresh)}], free, calls, mapped)",
            "    except GuardFailed:",
            "        return None"]
    if not light:
        for line in full:
            emit(line)
        return
    if kinds:       # (another callee than the signature's: the general call)
        emit(f"    if not ({' and '.join(kinds)}):")
        for line in full:
            emit("    " + line)
    # (a loop of another strategy whose body multiplies matrices: whatever its tensors' dtypes, a
    # product may run in float32 there, through a cast, a module's parameters or a helper's globals)
    if m.strategy == "matmul" and any(d is torch.float32 or d is torch.complex64 for d in dtypes) \
            or loop_id in rt.products:
        emit(f"    if {const(R._reduced_fp32)}('cpu'):")
        emit("        return None     # (reduced-precision matrix products: the general pass refuses)")


def audited(build_fn, problems: list, answered: list | None = None):
    """`build_fn` (a `build`) whose lanes are checked on every call they answer: the general
    guard must accept with the same signature. Each difference is appended to `problems` as
    text (an exception in the guard would only send the call to the loop, so nothing is raised);
    `answered[0]` counts the checked answers. For tests and the fuzzer (tests/test_lanes.py,
    `python -m fuzz.runner --steady`), not for production calls: it runs the guard twice."""
    from .runtime import GuardFailed

    def build_checked(rt, loop_id, sid, *rest, **kw):
        lane = build_fn(rt, loop_id, sid, *rest, **kw)
        if lane is None:
            return None

        def checked(pending, mapped, free, calls, writes):
            tok = lane(pending, mapped, free, calls, writes)
            if tok is not None:
                try:
                    general = rt._guard(pending, mapped, free, calls, writes)
                except GuardFailed as e:
                    problems.append(f"the lane accepted what the general guard refuses ({e})\n{lane.source}")
                else:
                    if general.sig != tok.sig or general.free_tensors != tok.free_tensors:
                        problems.append(f"signature {tok.sig}, the general guard's {general.sig}\n{lane.source}")
                if answered is not None:
                    answered[0] += 1
            return tok
        checked.source = lane.source
        return checked
    build_checked.audited = True
    return build_checked


_EXPRESS_KINDS = ("stack", "tensor", "cat", "sum", "max", "min", "any", "all")


def _decided(emit, sid):
    """begin's steady state, in an express: the trip count's bucket decided for the vectorized
    path (or a threshold forced by AUTOVEC_MIN_TRIP), or still timed by the cost model and timing
    this call vectorized (`D`, the decision, and `T0`, the call's start: the express records
    the call's time, or its token does, Token.done), and the hot runner it was written for."""
    emit("    if MIN_TRIP in RAW:")
    emit("        forced = min_trip(None)")
    emit("        if forced is None or n < forced or n < 1 or n > LIMIT:")
    emit("            return None")
    emit("        D = None")
    emit("    else:")
    emit("        d = rt.decisions.get((L, n.bit_length()))")
    emit("        if d is None or n > LIMIT or n < 1:")
    emit("            return None")
    emit("        if d.final:")
    emit("            if not d.vec:")
    emit("                return None")
    emit("            D = None")
    emit("        elif d.choose():")
    # (a bucket the cost model is still timing, on a call it times vectorized: the express is
    # the path its steady state takes, so this call's time is the one to compare with the
    # loop's; the general path's would count the lane and token steps the express skips)
    emit("            D, T0 = d, CLOCK()")
    emit("        else:")
    emit("            return None")
    emit("    if rt.hot.get(HOTKEY) is not HOT:")
    emit(f"        return rt.express_stale(L, {sid!r})     # (another runner now: written again)")


def _head(rt, loop_id, sid, hot, consts):
    """The first lines of an express, and the constants every express reads."""
    from . import _config, cost
    from . import runtime as R

    consts.update({"HOT": hot, "HOTKEY": (loop_id, sid, ""), "M": rt.matches[loop_id], "L": loop_id,
                   "LIMIT": hot[0], "MODE": hot[2], "RUNNER": hot[1], "Token": R.Token,
                   "EXPRESSED": rt.expressed, "RAW": _config._RAW_DICT, "MIN_TRIP": _config.key("AUTOVEC_MIN_TRIP"), "min_trip": cost.min_trip,
                   "CLOCK": R._clock})
    return ["def express(space, mapped, free, calls, writes, body, direct=None):",
            "    if rt.events is not None or rt.strict or rt.memory_budget is not None:",
            "        return None"]


def _express_nest(rt, loop_id, sid, sig, mapped, free, calls, writes, hot, whole=None):
    """`express`'s token flavour for a loop nest (one `range` per level, counting up): the
    lane's token for the nest's levels, run by its hot runner (runtime._hot_nest)."""
    made = checks(rt, loop_id, sid, sig, mapped, (), free, calls, writes, nest=True, covered=True, express=True)
    if made is None:
        return None
    body_lines, consts, names = made
    k = len(rt.matches[loop_id].plan.space.levels)
    lines = _head(rt, loop_id, sid, hot, consts) + [
             f"    if type(space) is not tuple or len(space) != {k}:",
             "        return None",
             "    n, levels = 1, []",
             "    for r in space:",
             "        if type(r) is not range or r.step <= 0:",
             "            return None",
             "        k = len(r)",
             "        levels.append((r.start, r.step, k))",
             "        n *= k"]
    emit = lines.append
    _decided(emit, sid)
    emit("    start, step = levels[0][0], levels[0][1]")
    if loop_id in rt.checked_more:     # (what the general call of _more_checks reads)
        emit("    loop_id, m = L, M")
    lines += body_lines
    covered = "tok.covered = (-1, None)"      # (every input's levels checked whole above)
    inline = None
    layout, code = hot[1].args
    if code is None and whole:
        # _hot_nest's batched products, written out: the inputs in the products' layout, every
        # output with the levels' sizes in front (new memory: its token's `fresh`)
        args = [f"a{i}.permute(*{how!r})" if how is not None else f"a{i}" for i, how in enumerate(layout)]
        sizes = [f"levels[{lv}][2]" for lv in range(k)]
        inline = _Inline(["    sizes = (" + ", ".join(sizes) + ",)",
                          "    try:",
                          f"        outs = direct({''.join(a + ', ' for a in args)}list(sizes))",
                          "    except Exception:",
                          "        return None",
                          "    for o in outs:",
                          f"        if not isinstance(o, Tensor) or o.shape[:{k}] != sizes:",
                          "            return None"], fresh=True)
    _token_run(emit, rt, loop_id, sid, writes, names, "start", "()", "levels", covered, whole, k, inline)
    return _compiled(rt, loop_id, "express", lines, consts)


def _token_run(emit, rt, loop_id, sid, writes, names, first, sources, levels, covered, whole=None, nest=0,
               inline=None):
    """The token flavour's end: the lane's token (its covered inputs: `covered`, a statement),
    run by the hot runner; (token, batch), or None.

    `whole` (("store", output position, whether the value is new memory), ..): the loop's
    outputs are all stored into fresh
    outputs (`out = torch.empty(n); for i in range(n): out[i] = ..`, the writes' "fresh" ones in
    order). Where each batch would become its fresh output whole on the general path (fit_store's
    first return, then `replaces`: the rows are all of it, same type, dtype, shape and device, no
    gradient, both contiguous, not empty, no input's memory), the answer is (`expressed`, the
    outputs), as `owned` gives them.

    `inline` (an _Inline: lines that set `outs` as the hot runner would, or return None): with
    `whole`, the runner's work written out here, and the token made only where the batch is not
    answered whole (no token on the common call), with what the runner sets on its own."""
    fresh = [i for i, w in enumerate(writes) if w[0] == "fresh"]
    whole = whole if whole and len(fresh) == len(whole) else None
    make = [f"    tok = Token(rt, L, M, n, start, step, {first}, mapped, {sources}, "
            f"[{', '.join(names['free_tensors'])}], {sid!r}, {levels}, None)"]
    if covered:
        make.append(f"    {covered}")
    for i, w in enumerate(writes):
        if w[0] == "fresh":     # (a stand-in: the token's, as Token.release keeps it)
            make.append(f"    if not w{i}.is_cpu:")
            make.append(f"        tok.released = {{**(tok.released or {{}}), id(w{i}): (w{i}, CPU, w{i}._av_fill)}}")
    make += ["    tok.laned = True", "    tok.scan_free = False", "    if D is not None:",
             "        tok.decision, tok.t0 = D, T0"]
    if rt.peeks.get(loop_id):
        make.append("    tok.free = free")
    if inline is None or whole is None:
        inline = None
        for line in make:
            emit(line)
        emit("    outs = RUNNER(tok, body, direct)")
        emit("    if outs is None:")
        emit("        return None")
    else:
        for line in inline.lines:
            emit(line)
        make += (["    tok.fresh = True"] if inline.fresh else []) + ([inline.after] if inline.after else [])
    emit("    rt.ran[L] = MODE")
    if whole is None:
        emit("    return tok, outs")
        return
    # (inline: the checks in a block of their own, left with `break` where the batch is not
    # answered whole, to make the token after it)
    pad, leave = ("    ", "break") if inline else ("", "return tok, outs")
    if inline:
        emit("    for _ in (1,):")
    results = []
    new = names["atoms"] and not rt.peeks.get(loop_id)   # (as for the express's consumers)
    for (kind, pos, fresh_value), i in zip(whole, fresh):
        o, w = f"o{pos}", f"w{i}"
        dim = int(kind[5:] or 0)
        emit(f"{pad}    {o} = outs[{pos}]")
        if dim and inline is not None and inline.unmoved == dim:
            # (the inline broadcast body's batch, computed at that dimension: not moved yet; a
            # complex one is moved back, as fit_store does)
            emit(f"{pad}    if {o}.is_complex():")
            emit(f"{pad}        {leave}")
        elif dim and inline is not None:
            # (an inline runner that computes the batch first, loop dimension first: no token yet,
            # whose `unmoved` would tell; fit_store moves it into the rows)
            emit(f"{pad}    {leave}")
            continue
        elif dim:
            # rows along another dimension: the batch as the broadcast body computed it, where
            # it did so at that dimension (fit_store's `unmoved`; a complex one is moved back)
            emit(f"{pad}    um = tok.unmoved.get(id({o})) if tok.unmoved is not None and tok.unmoved_at == {dim} else None")
            emit(f"{pad}    if um is None or um[0] is not {o} or {o}.is_complex():")
            emit(f"{pad}        {leave}")
            emit(f"{pad}    {o} = um[1]")
        # (the rows are all of the output: from 0 in steps of 1, its length; a nest: every level's)
        rows = " or ".join(f"levels[{lv}][0] or levels[{lv}][1] != 1" for lv in range(nest)) if nest \
            else f"start or n != {w}.shape[{dim}]"
        emit(f"{pad}    if type({o}) is not Tensor or {o}.requires_grad or {w}.requires_grad or {o}.dtype is not {w}.dtype "
             f"or {rows} or not {o}.is_cpu:")
        emit(f"{pad}        {leave}")
        emit(f"{pad}    if {o}.shape != {w}.shape:")     # (rows of leading 1s: setitem drops them, fit_store too)
        if dim:
            emit(f"{pad}        {leave}")
        else:
            emit(f"{pad}        {o} = _dropped({o}, {w}.shape, {max(nest, 1)})")
            emit(f"{pad}        if {o} is None:")
            emit(f"{pad}            {leave}")
        fresh_batch = inline is not None and inline.fresh
        shared = "" if fresh_value and new or fresh_batch else f" or not tok.fresh and tok.shares_input({o})"
        emit(f"{pad}    if not {o}.is_contiguous() or not {w}.is_contiguous() or not {o}.numel(){shared}:")
        emit(f"{pad}        {leave}")
        results.append(f"{o} if {o}._base is None else {o}.detach()")
    emit(f"{pad}    if D is not None:")
    emit(f"{pad}        D.vectorized_ran(CLOCK() - T0, n)")
    emit(f"{pad}    return (EXPRESSED, {', '.join(results)})")
    if inline:
        for line in make:
            emit(line)
        emit("    return tok, outs")


def _inline_runner(rt, loop_id, fn, hargs, args, large, consts, whole, names):
    """The hot runner's work written out for the token flavour's whole answers (_token_run's
    `inline`): runtime._hot_broadcast or _hot_batched on the covered tensors `args`, as lines
    that set `outs` or return None; None where the runner is another, takes the loop index, or a
    whole answer would need the token to compare the batch's memory with the inputs'."""
    from . import runtime as R

    new = names["atoms"] and not rt.peeks.get(loop_id)
    if not all(fresh_value and new for _, _, fresh_value in whole):
        return None     # (Token.shares_input: the token first)
    # (the broadcast runners' elementwise temporaries reused in place on large batches)
    in_place = [f"    if {large}:", "        body = in_place_body(rt, L, body)"] \
        if rt.in_place.get((loop_id, ()), False) is not None else []     # (None: no in-place variant)
    if fn is R._hot_broadcast:
        rank, index = hargs
        if index:
            return None
        return _Inline(in_place + [f"    outs = body({', '.join(args)})",
                                   "    for o in outs:",
                                   f"        if type(o) is not Tensor or o.dim() != {rank} or o.shape[0] != n:",
                                   "            return None"])
    if fn is R._hot_broadcast_moved:
        r, ones, pos, dims = hargs
        if not pos or any(kind != f"store{pos}" for kind, _, _ in whole):
            return None     # (the batch answered at the dimension the body computes it at, unmoved)
        consts.update({"_into_layout": R._into_layout, "_out_of_layout": R._out_of_layout})
        pairs = "".join(f"({a}, {d}), " for a, d in zip(args, dims))
        return _Inline([f"    args = _into_layout(({pairs}), {ones!r}, {r}, {pos}, n)"] + in_place
                       + ["    outs = body(*args)",
                          "    for o in outs:",
                          f"        if not isinstance(o, Tensor) or o.dim() != {r + 1} or o.shape[{pos}] != n:",
                          "            return None"],
                       after=f"    outs = _out_of_layout(tok, outs, {r}, {pos}, n)", unmoved=pos)
    if fn is not R._hot_batched:
        return None
    code, dims, probes, index = hargs
    if index:
        return None
    if dims is not None:
        args = [f"{a}.movedim({d}, 0)" if d else a for a, d in zip(args, dims)]
    real = ""
    if code is None:
        call = f"direct({', '.join(args)}, [n])"
    else:
        if probes and code.lean is not None and code.probes == probes:
            code, real = code.lean, f"[:-{probes}]"     # (the check-only masks: None in the lean body)
        consts["ICODE"] = code
        call = f"(ICODE.big if ICODE.big is not None and ({large}) else ICODE).bind(body)({', '.join(args)}, [n])"
    return _Inline(["    try:",
                    f"        outs = {call}",
                    "    except Exception:",
                    "        return None",
                    f"    for o in outs{real}:",
                    "        if not isinstance(o, Tensor) or o.dim() < 1 or o.shape[0] != n:",
                    "            return None"])


def express(rt, loop_id, sid, sig, mapped, sources, free, calls, writes, spec):
    """The whole steady state of one loop and signature as one function: what `begin`, the lane,
    `Token.run`'s hot runner and `consume` do on such a call, without the token between them.

    Written for a loop whose code after the batched run is only `consume` of its outputs
    (`spec`: (consumer kind, output position, whether the loop's value is an operator's new
    tensor: lowering.common._new_memory) each, from the lowering: lowering.common) into a
    stack, a tensor, a cat or a builtin reduction, and whose hot runner
    (runtime._hot_broadcast, or runtime._hot_batched of a batched body) is set for the signature:
    the generated code calls it with the loop's iteration space, values and body, and it
    answers the consumed values, or None where anything differs from the call it was written
    for (the general path then runs the call as before, and decides). It answers only where the
    general path would give the same values by the same operations: the decision of the trip
    count's bucket is settled on the vectorized path, the lane's checks pass, the loop covers its
    inputs from row 0 in steps of 1, and the hot runner and consumers take their common branch.
    A body that raises, or an output of another shape, sends the call to the general path (the
    body is pure: it runs again there).

    For other loops (`spec` None: stores, running totals, kept lists, fission) it answers the
    lane's token and the hot runner's batch, which the generated code prepares and commits as
    on the general path. A `spec` of ("store", ..) entries (every output stored into a fresh
    output) is that flavour too, answering (`expressed`, the outputs) where each batch becomes
    its output whole (_token_run).

    Measured on the dev case elementwise_add_append at 5 rows: 9.8 us a call through begin,
    lane, run and consume, 6.9 us through the express."""
    from . import _config
    from . import runtime as R

    if rt.strict or rt.events is not None or spec == () or _config._RAW_DICT is None:
        return None
    whole = None
    if spec is not None and isinstance(spec[0][0], str) and spec[0][0].startswith("store"):
        # (fresh outputs answered whole: rows at dimension 0, "store", or at another, "store<d>")
        whole, spec = spec, None    # (the token flavour, which may answer a fresh output's batch whole)
    hot = rt.hot.get((loop_id, sid, ""))
    if hot is None or (loop_id, sid) in rt.failures:
        return None
    runner = hot[1]
    fn, hargs = getattr(runner, "func", None), getattr(runner, "args", ())
    if loop_id in rt.nest_loops:
        if spec is not None or fn is not R._hot_nest:
            return None
        return _express_nest(rt, loop_id, sid, sig, mapped, free, calls, writes, hot, whole)
    if fn is R._hot_broadcast:
        rank, index = hargs
        code = dims = None
        probes = 0
    elif fn is R._hot_batched:
        code, dims, probes, index = hargs
        if code is None and spec is not None:
            return None     # (batched matrix products, the generated code's `direct`: the token flavour)
    elif fn is R._hot_broadcast_moved and spec is None:
        code = dims = None
        index = probes = 0
    else:
        return None
    if spec is not None and (index or fn is not R._hot_broadcast and fn is not R._hot_batched):
        return None     # (the consumers inline take the runners' common forms)
    if spec is not None and probes:
        if code is None or code.lean is None or code.probes != probes:
            return None
        code = code.lean     # (without the check-only masks, as the hot runner runs it)
    pytypes = rt.pytypes.get((loop_id, sid), {})
    if spec is not None and (any(pytypes.get(pos) and kind[0] != "accum" for kind, pos, _ in spec)
                             or any(kind not in _EXPRESS_KINDS and kind[0] != "accum" for kind, _, _ in spec)):
        return None
    elements = loop_id in rt.element_loops
    picks = None
    if elements:
        picks = rt.src_picks.get(loop_id)
        if picks is None or not sources or any(m[2] for m in mapped):
            return None
    elif sources or loop_id not in rt.range_loops:
        return None
    offsets = {m[2] for m in mapped}
    if len(offsets) > 1 or elements and offsets - {0}:
        return None     # (rows from other offsets: never all of every tensor)
    made = checks(rt, loop_id, sid, sig, mapped, sources, free, calls, writes, covered=True, express=True)
    if made is None:
        return None
    body_lines, consts, names = made
    consts.update({"ACCUMULATE": R.FunctionRuntime.accumulate, "_storage": R._storage, "_stacked": R._stacked,
                   "_owned": R._owned, "_peek": R._peek, "_plain": R._plain, "_reduce_builtin": R._reduce_builtin, "in_place_body": R.in_place_body,
                   "FLOOR": R._INPLACE_FLOOR, "CODE": code, "FIRST": rt.enum_start.get(loop_id, 0)})
    lines = _head(rt, loop_id, sid, hot, consts)
    emit = lines.append
    if elements:
        emit(f"    if type(space) is not tuple or len(space) != {len(sources)}:")
        emit("        return None")
        for i in range(len(sources)):
            emit(f"    t = space[{i}]")
            emit("    if type(t) is not Tensor or not t.dim():")
            emit("        return None")
            emit("    k = t.shape[0]")
            emit("    n = k" if i == 0 else "    if k < n:\n        n = k")
        emit("    sources, start, step, first = space, 0, 1, FIRST")
    else:
        emit("    if type(space) is not range:")
        emit("        return None")
        emit("    n = len(space)")
        emit("    start = space.start")
        emit("    step = space.step")
        if spec is None:
            emit("    sources, first = (), start")
    _decided(emit, sid)
    if not elements:
        emit(f"    if step != 1 or start != {-min(offsets, default=0)}:")
        emit("        return None")
    if loop_id in rt.checked_more:     # (what the general call of _more_checks reads)
        emit("    loop_id, m, levels = L, M, None")
    lines += [line.replace("(levels is not None) or ", "") for line in body_lines]
    # the batch's inputs: the tensors themselves, each loop dimension covered from row 0 (_covered)
    if elements:
        emit(f"    if {' or '.join(f's{i}.shape[0] != n' for i in range(len(sources)))}:")
        emit("        return None")
        it = iter(range(len(mapped)))
        args = [f"s{j}" if j is not None else f"a{next(it)}" for j in picks]
        it = iter(mapped)
        arg_dims = [0 if j is not None else next(it)[1] for j in picks]
    else:
        args = [f"a{i}" for i in range(len(mapped))]
        arg_dims = [m[1] for m in mapped]
    if not args:
        return None
    large = " or ".join(f"{a}.numel() >= FLOOR" for a in args)
    if spec is None:
        # the token flavour: the token the lane gives, run by the hot runner; the generated code
        # prepares and commits the outputs with it as on the general path
        whole = None if elements else whole
        inline = _inline_runner(rt, loop_id, fn, hargs, args, large, consts, whole, names) if whole else None
        _token_run(emit, rt, loop_id, sid, writes, names, "first", "list(sources)" if elements else "()", "None",
                   f"tok.covered = (n, ({''.join(a + ', ' for a in args)}))", whole, inline=inline)
        return _compiled(rt, loop_id, "express", lines, consts)
    if code is None:     # (the broadcast body on the tensors themselves: every loop dimension first)
        if any(arg_dims):
            return None
        if rt.in_place.get((loop_id, ()), False) is not None:   # (None: the body has no in-place variant)
            emit(f"    if {large}:")
            emit("        body = in_place_body(rt, L, body)")
        emit("    try:")
        emit(f"        outs = body({', '.join(args)})")
        emit("    except Exception:")
        emit("        return None")
        emit("    for o in outs:")
        emit(f"        if type(o) is not Tensor or o.dim() != {rank} or o.shape[0] != n:")
        emit("            return None")
    else:
        if dims is not None:
            args = [f"{a}.movedim({d}, 0)" if d else a for a, d in zip(args, dims)]
        emit(f"    code = CODE.big if CODE.big is not None and ({large}) else CODE")
        emit("    try:")
        emit(f"        outs = code.bind(body)({', '.join(args)}, [n])")
        emit("    except Exception:")
        emit("        return None")
        emit(f"    for o in outs{f'[:-{probes}]' if probes else ''}:")
        emit("        if not isinstance(o, Tensor) or o.dim() < 1 or o.shape[0] != n:")
        emit("            return None")
    emit("    rt.ran[L] = MODE")
    # the consumers, as `consume` takes them (no mask, no views, no other output sharing memory);
    # `ins`: the storages of the inputs, what Token.shares_input compares (a builtin reduction's
    # result needs them only where it is a view)
    ins = ", ".join(f"{v}.untyped_storage().data_ptr()" for v in
                    [f"a{i}" for i in range(len(mapped))] + [f"s{i}" for i in range(len(sources))]
                    + names["free_tensors"])
    ins_lines = [f"ins = ({ins}{',' if ins else ''})"]
    for pos, path in rt.peeks.get(loop_id, ()):   # (tensors read through outside objects: Token.peeked)
        ins_lines += [f"t = _peek(free[{pos}], {path!r})", "if isinstance(t, Tensor):", "    ins += (_storage(t),)"]
    # (values that are new memory, _new_memory, where the free values hold nothing but tensors and
    # atoms: no comparison)
    new = names["atoms"] and not rt.peeks.get(loop_id)
    spec = [(kind, pos, fresh and new) for kind, pos, fresh in spec]
    copies = any(kind in ("stack", "cat", "tensor") and not fresh for kind, _, fresh in spec)
    if copies:
        lines.extend("    " + line for line in ins_lines)
    emit(f"    py = rt.pytypes.get({(loop_id, sid)!r})")
    emit("    try:")
    results = []
    for j, (kind, pos, fresh) in enumerate(spec):
        r = f"r{j}"
        results.append(r)
        if kind[0] == "accum":
            # (runtime.FunctionRuntime.accumulate, as the general path's prepare calls it: of the
            # accumulator's value the call hands in `writes`, with the mask, and Python numbers
            # where the loop has them, as Token.py answers)
            _, op, inplace, zeros, k, mpos, static, signed = kind
            mask = f"outs[{mpos}]" if mpos is not None else "None"
            py = "True" if static else f"py is not None and py.get({pos}, False)"
            emit(f"        {r} = ACCUMULATE(writes[{k}][1], outs[{pos}], {op!r}, {inplace}, {mask}, {py}"
                 f"{', zeros=True' if zeros else ''}{', signed=True' if signed else ''})")
            continue
        emit(f"        if py is not None and py.get({pos}):")
        emit("            return None")
        emit(f"        o = outs[{pos}]")
        if kind in ("stack", "cat"):
            emit("        if o.requires_grad:")
            emit(f"            o = o.{'clone' if sig[-1] else 'detach'}()")    # (the grad mode: checked above)
            emit("        pieces = None")
            if not fresh:
                emit("        if o.untyped_storage().data_ptr() in ins:")
                emit("            pieces = o")
                emit("            o = o.clone()")
            if kind == "stack":
                # (runtime._stacked below 4 dimensions: the batch as a tensor of its own; n >= 1)
                emit("        if o.dim() >= 4 or not o.is_contiguous():")
                emit(f"            {r} = _stacked(o, pieces, True)")
                emit("        else:")
                emit(f"            {r} = o if o._base is None else _owned(o)")
            else:
                emit("        if o.dim() < 2:")
                emit("            return None")
                emit(f"        {r} = _stacked(o.flatten(0, 1))")
        elif kind == "tensor":
            emit("        if o.dim() != 1 or not o.is_cpu:     # (n >= 1: no empty tensor)")
            emit("            return None")
            emit("        if o.is_contiguous()" + ("" if fresh else " and o.untyped_storage().data_ptr() not in ins") + ":")
            emit(f"            {r} = _plain(o.detach())")
            emit("        else:")
            emit(f"            {r} = _plain(o.detach().clone())")
        else:
            emit(f"        {r} = _reduce_builtin({kind!r}, o, False)")
            emit(f"        if isinstance({r}, Tensor) and {r}._base is not None:")
            if not copies:
                lines.extend("            " + line for line in ins_lines)
            emit("            if _storage(o) not in ins:")
            emit(f"                {r} = _owned({r})")
    emit("    except Exception:")
    emit("        return None")
    emit("    if D is not None:")
    emit("        D.vectorized_ran(CLOCK() - T0, n)")
    emit(f"    return ({', '.join(results)},)")
    return _compiled(rt, loop_id, "express", lines, consts)
