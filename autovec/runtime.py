"""Run-time support for rewritten functions: guards, the batched call with its one-time
check against an unbatched iteration, output conversion, and the memory of failures."""
from __future__ import annotations

import ast
import functools
import itertools
import math
import operator
import threading
import types
import sys
import collections
import weakref
from time import perf_counter as _clock

import torch
import torch.utils._python_dispatch
import torch.autograd.forward_ad as _forward_ad

from . import fastast
from . import _config, cost, indexcheck, lanes, pins, reach
from .batching import _INPLACE_FLOOR, broadcast_shapes
from .lowering.batched import half_beside_int, zero_dim_dtype
from .analysis.loops import inner_int_growth
from .analysis.shared import function_unsafe, self_calls, shared_work
from .analysis.names import stores as names_stored
from .frontend import NoSource, scope_lookup
from .plan import einsum_letters, indexed
from .purity import _by_id as _PURE_BY_ID, active_value, own_override, pure_tensor_method, why_impure

# the builtins this module calls, as they were at import: a user's later `builtins.len = ..`
# reaches the loops it runs (api._assumptions runs them as written), not autovec's own counts
from builtins import (abs, all, any, enumerate, isinstance, len, max, min, range, sum,  # noqa: A004, E402
                      type, zip)

_NUMBER = (bool, int, float, complex)
# the environment's dictionary, for the hot path's one lookup of AUTOVEC_INDEX_CHECK
# (and of AUTOVEC_MIN_TRIP: begin's steady state asks whether it is unset, `_MIN_TRIP_KEY not in _ENV`)
if _config._RAW_DICT is not None:
    _ENV, _INDEX_CHECK_KEY = _config._RAW_DICT, _config.key("AUTOVEC_INDEX_CHECK")
    _MIN_TRIP_KEY = _config.key("AUTOVEC_MIN_TRIP")
else:
    import os as _os
    _ENV, _INDEX_CHECK_KEY, _MIN_TRIP_KEY = _os.environ, "AUTOVEC_INDEX_CHECK", "AUTOVEC_MIN_TRIP"
_NUMBER_OR_TENSOR = _NUMBER + (torch.Tensor,)



class GuardFailed(Exception):
    """A run-time assumption of the rewrite does not hold for this call. `data`: it depends on
    the values (not only on types and shapes), so later calls may still vectorize."""

    def __init__(self, msg, data=False, cost=False):
        super().__init__(msg)
        self.data = data
        self.cost = cost


def _sides_differ(msg):
    """A refusal of a `where` whose sides differ in kind (`nv = values[t + 1] if .. else 0.0`):
    `sides`, each side's body on its own rows may still run (FunctionRuntime.failed: reselect)."""
    e = GuardFailed(msg)
    e.sides = True
    return e


class NotVectorizable(Exception):
    """Raised with `strict=True` when a loop would run its original Python code because it
    cannot be vectorized (not where the cost model picks the loop as the faster path)."""


_REACH_DEPTH, _REACH_WIDTH = 4, 256    # how far the aliasing check follows what the loop reads


def _reachable_tensors(values, depth=_REACH_DEPTH, seen=None, lists=None):
    """Tensors the loop may read through the values it reads, for the aliasing check (`xs[0][k]`
    may be the very tensor the loop writes): inside lists, tuples, dicts, modules and plain
    objects; for a function (a helper the body calls, or one passed in), its closure's cells, its
    defaults and the globals its code names (a helper reading `out` through any of them reads
    the rows the loop writes), likewise for a bound method's object and a class's attributes.
    Past _REACH_DEPTH levels or _REACH_WIDTH entries of one container the check cannot tell, and
    the loop runs (GuardFailed): reading these runs no code. `lists`: where given, every Python
    list met on the way is appended to it (a list the loop stores into by index: _list_aliasing)."""
    if seen is None:
        seen = set()
    out = []
    for v in values:
        tp = type(v)
        if tp in _PLAIN_ATOMS or v is None:
            continue
        if isinstance(v, torch.Tensor):
            out.append(v)
            continue
        if tp is types.ModuleType and not _library_module(v):
            # a module of the program (`cfg["m"].LOG`, `pkg.sub.LOG`): its attributes (probeE)
            if id(v) in seen:
                continue
            seen.add(id(v))
            out.extend(_reachable_tensors(_module_values([v]), depth - 1, seen, lists))
            continue
        if tp is types.ModuleType or tp is types.BuiltinFunctionType and not isinstance(
                getattr(v, "__self__", None), (torch.Tensor, list, tuple, dict)):
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        if lists is not None and isinstance(v, list):
            lists.append(v)
        parts = _parts(v)
        if parts is None:
            continue
        if depth <= 0 or len(parts) > _REACH_WIDTH:
            raise GuardFailed("the loop reads an object too deep or too large for the aliasing check (it may hold "
                              "the tensor the loop writes): the loop runs")
        out.extend(_reachable_tensors(parts, depth - 1, seen, lists))
    return out


def _appended_aliasing(appended, sources, free, calls):
    """Lists the loop grows (`res.append(v)`, `counts[int(l)] += 1` into a list of ints): none
    may be one the loop also reads another way (under another name, `alias = res` then
    `len(alias)`; inside a dict or object it reads; through a helper's globals; passed twice),
    where each iteration sees the list as the earlier ones left it and the batch, computed
    first, would see it as it was before the loop (probeB). The analysis refuses reads under
    the list's own name. Reads by the loop index (`xs[t]`, mapped) stay below the length the
    guard checked before the loop: elements the appends do not change."""
    if not sources and not calls and not any(not isinstance(v, torch.Tensor) for v in free or ()):
        return
    found = _lists_read(free, calls) + [u for u in sources or () if isinstance(u, list)]
    for t in appended:
        if any(u is t for u in found):
            raise GuardFailed("a list the loop grows is also read another way in the loop (under another name, or "
                              "through a value or a helper it reads): each iteration sees the earlier ones' "
                              "elements, so the loop runs", data=True)


def _lists_read(free, calls) -> list:
    """The Python lists a loop may read through its non-tensor free values and its callees
    (inside containers, objects, closures, globals, the program's modules): _reachable_tensors'
    walk, which refuses what it cannot see through."""
    others = [v for v in free if not isinstance(v, torch.Tensor)] if free else []
    found = []
    _reachable_tensors(others + list(calls or ()) + _module_values(others), lists=found)
    return found


def _module_values(values) -> list:
    """The containers a program's own modules among `values` hold as attributes (`gmod.LOG`,
    read in the loop through the module: probeC), for the lists' aliasing checks. The aliasing
    walk skips modules (torch's own would be far too wide); a module of the standard library or
    of an installed package holds none of the program's lists."""
    out = []
    for m in values:
        if type(m) is not types.ModuleType or _library_module(m):
            continue
        out += [v for k, v in vars(m).items() if not k.startswith("__") and (
            isinstance(v, (list, tuple, dict, collections.deque))
            or type(v) is types.ModuleType and not _library_module(v)       # (a submodule: `pkg.sub.LOG`)
            or type(v).__module__ != "builtins" and not isinstance(v, (type, types.ModuleType, types.FunctionType,
                                                                     types.BuiltinFunctionType)))]
    return out


_LIBRARY_MODULES: dict = {}


def _library_module(m) -> bool:
    hit = _LIBRARY_MODULES.get(m.__name__)
    if hit is None:
        root = m.__name__.split(".")[0]
        path = getattr(m, "__file__", None) or ""
        hit = _LIBRARY_MODULES[m.__name__] = root in sys.stdlib_module_names or root in ("torch", "numpy", "autovec") \
            or "site-packages" in path or "dist-packages" in path or not path
    return hit


def _list_aliasing(stored, mapped, sources, free, calls):
    """`res[i] = v` into Python lists (`stored`: (list, offset) each): none may be a list the loop
    also reads another way (under another name, `b = res` then `b[i]`; inside a value or through a
    helper it reads), where a later iteration reads what an earlier one put there and the batch,
    computed first, would not. A read of its own slot under its own name (the analysis flags
    that entry of `mapped`) and a walk of the list by the loop itself, which reads each slot
    before the iteration that writes it (offset 0), are the loop's own order."""
    for k, (t, _) in enumerate(stored):
        if any(u is t for u, _ in stored[k + 1:]):
            # (`res[i] = a; res[i + 1] = b`, or one list under two names: the slots the loop writes
            # twice hold the later iteration's value, which two slice assignments would not keep)
            raise GuardFailed("one list is stored into by two statements of the loop (its slots may be written "
                              "twice, in the loop's order): the loop runs")
    found = _lists_read(free, calls)
    for m in mapped:
        if isinstance(m[0], list) and not m[3]:
            found.append(m[0])
    for t, off in stored:
        if any(u is t for u in found) or off and any(u is t for u in sources or ()):
            raise GuardFailed("a list the loop stores into by index is also read another way in the loop (under "
                              "another name, or through a value or a helper it reads): the loop runs")


_PLAIN_ATOMS = frozenset({str, bytes, int, float, bool, complex, type(None), range, slice})
_NO_VALUE = object()     # (an argument not given: fit_store's `same`)


def _parts(v):
    """What `v` holds for the aliasing check (_reachable_tensors), or None where it holds no
    tensor we can reach without running code."""
    if isinstance(v, (list, tuple, collections.deque, _DICT_VIEWS)):
        return list(v)
    if isinstance(v, (dict, types.MappingProxyType)):
        return list(v.values())
    if type(v).__name__ == "ndarray" and getattr(getattr(v, "dtype", None), "kind", None) == "O":
        return list(v.flat)     # (a numpy array of objects holds references: `arr[0] is out`; probeC)
    if isinstance(v, torch.nn.Module):
        # (its parameters and buffers, and the plain attributes of it and its submodules: a
        # tensor or list kept as `self.cache` is read by its methods too)
        parts = list(v.parameters()) + list(v.buffers())
        for mod in v.modules():
            parts += [x for k, x in vars(mod).items() if k not in _MODULE_INTERNALS]
        return parts
    if isinstance(v, types.FunctionType):
        parts = [c.cell_contents for c in (v.__closure__ or ()) if _filled(c)]
        parts += list(v.__defaults__ or ()) + list((v.__kwdefaults__ or {}).values())
        g = v.__globals__
        if not _torch_module(g.get("__name__")):
            # (a function of torch's own, `F.binary_cross_entropy_with_logits`: the globals it names
            # are torch's module state, which holds none of the program's tensors, as torch's own
            # classes are not looked into below; they reach past the check's depth through
            # `handle_torch_function`. Its closure and defaults are, a decorated helper among them)
            parts += [g[name] for name in _code_names(v.__code__) if name in g]
        return parts
    if isinstance(v, types.MethodType):
        return [v.__self__, v.__func__]
    if isinstance(v, functools.partial):
        return [v.func] + list(v.args) + list(v.keywords.values())
    if type(v) is types.BuiltinFunctionType or type(v).__name__ in ("method-wrapper", "builtin_function_or_method"):
        return [v.__self__] if hasattr(v, "__self__") else None
    if isinstance(v, type):
        if v.__module__ == "builtins" or _torch_module(v.__module__):
            return None
        return [x for k, x in vars(v).items() if not (k.startswith("__") and k.endswith("__"))]
    if isinstance(v, (staticmethod, classmethod)):
        return [v.__func__]
    d = getattr(v, "__dict__", None)
    slots = _slot_values(v)
    cls = type(v)
    # (its class's own attributes too, read through it: `o.c` of a class attribute; probeE)
    shared = [cls] if cls.__module__ != "builtins" and not _torch_module(cls.__module__) else []
    if isinstance(d, dict):
        return list(d.values()) + slots + shared       # (a callable object's too: `o.lst` of one; probeE)
    return slots + shared or None


_DICT_VIEWS = (type({}.values()), type({}.keys()), type({}.items()))


def _slot_values(v) -> list:
    """The values an object holds in `__slots__` (probeC: `o.lst is res` through a slotted holder),
    read through the slots' own descriptors (no code of the object's runs)."""
    out = []
    for cls in type(v).__mro__[:-1]:
        names = cls.__dict__.get("__slots__", ())
        for name in (names,) if isinstance(names, str) else names:
            desc = cls.__dict__.get(name)
            if isinstance(desc, types.MemberDescriptorType):
                try:
                    out.append(desc.__get__(v, cls))
                except AttributeError:
                    pass        # (a slot never set)
    return out


def _torch_module(name) -> bool:
    """Whether a module name is torch or one of its submodules."""
    return type(name) is str and (name == "torch" or name.startswith("torch."))


# what every nn.Module keeps in its __dict__ (its parameters, buffers, submodules and hooks), which
# _parts reaches otherwise or not at all
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module())) | {"_parameters", "_buffers", "_modules"}


def _code_names(code, depth=3):
    """The global names a code object (and the code objects inside it: lambdas, nested
    functions, comprehensions) loads."""
    names = set(code.co_names)
    if depth > 0:
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                names |= _code_names(c, depth - 1)
    return names


def _grad_reachable(v, depth=5) -> bool:
    """Whether a tensor that requires grad sits in `v`: the tensor itself, or inside lists,
    tuples, dicts, modules (parameters, buffers, attributes), functools.partial's arguments and
    plain objects, a few levels deep (for the gradient checks; reading these runs no code)."""
    if isinstance(v, torch.Tensor):
        return v.requires_grad
    if depth <= 0 or type(v) in _ATOMS or isinstance(v, (type, types.ModuleType)):
        return False
    if isinstance(v, (list, tuple)):
        return any(_grad_reachable(e, depth - 1) for e in v[:64])
    if isinstance(v, dict):
        return any(_grad_reachable(e, depth - 1) for e in list(v.values())[:64])
    if isinstance(v, functools.partial):
        return _grad_reachable(list(v.args) + list(v.keywords.values()), depth)
    if isinstance(v, torch.nn.Module):
        if any(p.requires_grad for p in v.parameters()) or any(b.requires_grad for b in v.buffers()):
            return True
        return any(_grad_reachable(list(vars(sub).values()), depth - 1) for sub in v.modules())
    d = getattr(v, "__dict__", None)
    if isinstance(d, dict) and _grad_reachable(list(d.values())[:64], depth - 1):
        return True
    # (an object with `__slots__`: its slots' values, read through their descriptors, which run
    # no user code)
    slots = [s for c in type(v).__mro__ for s in getattr(c, "__slots__", ()) if isinstance(s, str)
             and s not in ("__dict__", "__weakref__")]
    return any(_grad_reachable(getattr(v, s, None), depth - 1) for s in slots[:64])


_ATOMS = {types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, str, bytes, int,
          float, bool, complex, type(None)}


_PRODUCT_CALLS = frozenset({"matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "ger", "einsum", "linear",
                             "bilinear", "addmm", "addmv", "addbmm", "baddbmm", "tensordot", "chain_matmul",
                             "multi_dot", "kron"})


def _body_nodes(plan):
    """Every AST node of the body's statements and of its outputs' values (the plan's texts)."""
    for text in list(plan.body) + [o.value for o in plan.outputs if o.value]:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        yield from fastast.walk(tree)


def _has_products(plan) -> bool:
    """Whether the body multiplies matrices (`@`, matmul, einsum, linear, ...): its batched form
    may be one matrix product where the loop has one per iteration (runtime.products)."""
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult) or isinstance(n, ast.Call) and (
        isinstance(n.func, ast.Attribute) and n.func.attr in _PRODUCT_CALLS
        or isinstance(n.func, ast.Name) and n.func.id in _PRODUCT_CALLS) for n in _body_nodes(plan))


def _may_multiply(plan, resolve) -> bool:
    """Whether a callable the body calls may multiply matrices: anything but one of torch's own
    functions of another kind (`torch.softmax`, `F.relu`: no matrix product inside)."""
    for path in plan.callables:
        found, obj = resolve(path) if resolve is not None else (False, None)
        if not found or isinstance(obj, torch.nn.Module):
            return True
        module = getattr(obj, "__module__", None) or getattr(getattr(obj, "__objclass__", None), "__module__", "")
        if not (module or "").startswith("torch") or getattr(obj, "__name__", "") in _PRODUCT_CALLS:
            return True
    return False


def _gathers(plan, targets) -> bool:
    """Whether the body subscripts a loop-invariant name by an expression of the loop's elements
    (`buf[j]`, `table[j, :]`, `rew[j] * 2` for `j in idxs`)."""
    free = set(plan.free)
    return any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in free and any(
        isinstance(x, ast.Name) and x.id in targets for x in fastast.walk(n.slice)) for n in _body_nodes(plan))


def _selectable(plan) -> bool:
    """A loop whose one condition guards its whole body (analysis._guarded) and whose outputs
    all take every kept iteration's value alike: running totals (`total = total + v`, `count +=
    1`) and appended values (`kept.append(v)`, then a stack). Under autograd its kept iterations
    may be computed alone (Token._run_selected): each kept value gets the gradient it gets in the
    loop and no other iteration is computed with grad. (Not the best or last value: the other
    kept iterations' values would be computed for nothing, and send 0 * their derivatives back.)
    A body of one `if` / `else` (analysis._two_way) runs each side on its own rows and puts the
    rows back in the loop's order (Token._run_sides): every row's value is there, so stores of
    every row (`out[i] = a` / `else: out[i] = b`) are taken too."""
    return (plan.guarded or plan.two_way) and not plan.scans and not plan.exit_scans and bool(plan.outputs) and all(
        (o.cond or plan.two_way) and (o.kind == "accum" and o.op in ("+", "-") or o.kind == "append"
                                      or plan.two_way and o.kind == "store" and not o.op) for o in plan.outputs)


def _selects_rows(plan) -> bool:
    """Outputs that keep only some iterations' values (the best one, the last one, a filter)."""
    return any(o.kind in ("best", "last") or o.cond or o.consumer in ("max", "min")
               or o.op in ("max", "min") for o in plan.outputs)


_GRAD_REFUSALS, _RETRY_GRAD = 3, 32    # refusals of calls with grad before they skip the guard; calls skipped
_SEL_ERRORS = 3       # failed kept-rows-first runs of a signature (reselected, without grad) before it keeps the loop


def _grad_call(pending, mapped, free, calls, writes) -> bool:
    """Whether this call runs under autograd with a tensor the loop reads or writes that requires
    grad (its refusals are kept apart: FunctionRuntime.guard)."""
    return torch.is_grad_enabled() and _any_grad(itertools.chain(
        (e[0] for e in mapped), (w[1] for w in writes), free, pending[4] or (), calls))


def _token_grad(tok) -> bool:
    """_grad_call for a vectorized call under way (its token's inputs)."""
    return torch.is_grad_enabled() and _any_grad(itertools.chain(
        (e[0] for e in tok.raw), tok.free_tensors or (), tok.sources or ()))


def _any_grad(values) -> bool:
    """Whether a tensor among `values` (or in one of its lists, or held by a module: _requires_grad)
    requires grad."""
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.requires_grad:
                return True
        elif isinstance(v, (list, tuple)):
            if any(isinstance(t, torch.Tensor) and t.requires_grad for t in v):
                return True
        elif isinstance(v, torch.nn.Module) and _requires_grad(v):
            return True
    return False


def _overlapping(t: torch.Tensor) -> bool:
    """Whether elements of `t` may share memory (an expanded tensor, or overlapping rows made by
    as_strided): going from the smallest stride up, each dimension's step must land past
    everything the smaller ones reach. (A layout that interleaves without overlapping also
    counts: the loop decides there.)"""
    reach = 0
    for st, sz in sorted(zip(t.stride(), t.shape)):
        if sz > 1:
            if st <= reach:
                return True
            reach += (sz - 1) * st
    return False


_STRIDED = torch.strided
_in_transform = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", lambda: None)


def _is_batched(t) -> bool:
    """Whether `t` is vmap's batched tensor (whose truth value vmap refuses), under any of
    torch.func's wrappers; True where torch's primitives are missing (`_ft`)."""
    if _ft is None:
        return True
    while not _ft.is_batchedtensor(t):
        if not _ft.is_functorch_wrapped_tensor(t):
            return False
        t = _ft.get_unwrapped(t)
    return True


_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _saved_hooks_on() -> bool:
    """Whether saved-tensor hooks are on (torch.utils.checkpoint without reentrant, save_on_cpu,
    torch.autograd.graph.saved_tensors_hooks): they see every tensor autograd saves, and a
    checkpoint's recomputation must save the same tensors as its forward did."""
    return _top_hooks(False) is not None


try:
    _top_hooks = torch._C._autograd._top_saved_tensors_default_hooks
    _top_hooks(False)
except (AttributeError, TypeError, RuntimeError):     # (another torch: an older signature, or none)
    def _top_hooks(_ignore_tracing):
        return True                                     # (unknown: treated as on while grad is)


def _autocast_state() -> tuple:
    """("autocast", (device type, its autocast dtype) for each device type with autocast on)."""
    on = []
    for kind in ("cpu", "cuda", "xpu", "mps", "hpu"):
        try:
            if torch.is_autocast_enabled(kind):
                on.append((kind, torch.get_autocast_dtype(kind)))
        except (TypeError, RuntimeError, AttributeError):   # (a device type this build lacks)
            pass
    return ("autocast", tuple(on))


def _autocast_mismatch(t: torch.Tensor) -> bool:
    """Whether autocast is on for `t`'s device type with another half-precision dtype than
    `t`'s (float16 pieces under a bfloat16 autocast): its `promote` operations (torch.stack,
    torch.cat) raise there ("Unexpected floating ScalarType in at::autocast::prioritize")."""
    kind = t.device.type
    try:
        return torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) is not t.dtype
    except (TypeError, RuntimeError, AttributeError):
        return True


def _plain(t: torch.Tensor) -> torch.Tensor:
    """`t` as a plain torch.Tensor, as torch.tensor(...) gives one whatever its input's subclass
    (no view: `as_subclass` makes one, and the loop's torch.tensor is a tensor of its own)."""
    return t if type(t) is torch.Tensor else t.as_subclass(torch.Tensor).detach()
_LAYOUT = ("a sparse (or other non-strided) tensor: batched operations on it give results of another "
           "layout than the loop's (the loop decides)")


def _owned(t: torch.Tensor) -> torch.Tensor:
    """`t`, a batch nobody else holds, as a tensor of its own rather than a view of one (the
    loop's torch.stack, torch.cat and fresh outputs are none: `detach_()` or an in-place shape
    change of a view raises). With gradients: a copy (the loop's result is memory of its own: an
    in-place change of it must not reach a value autograd saved); without: `detach()`, the same
    memory as a tensor that is no view (0.35 us, where a copy of 40 floats took 1.3)."""
    if t._base is None:
        return t
    if t.requires_grad or type(t) is not torch.Tensor:
        return t.clone()
    return t.detach()


def _stacked(o: torch.Tensor, pieces: torch.Tensor | None = None, stack: bool = False) -> torch.Tensor:
    """A batch as torch.stack / torch.cat of the loop's pieces gives it: a new tensor, laid out
    contiguously below 4 dimensions. At 4 and 5, torch follows the pieces' own layout (channels
    last or not): for `torch.stack` of pieces that are the rows of `pieces` (views of an input:
    the loop's own pieces), torch's rule is applied to one of them (_piece_format); pieces the
    batch computed on whole tensors need not have the loop's layout, so there the loop decides
    unless the rows are contiguous, as the loop's then are."""
    if o.dim() < 4:
        return _owned(o) if o.is_contiguous() else o.contiguous()
    rows = pieces if pieces is not None else o
    if stack and rows.dim() == o.dim():
        fmt = torch.contiguous_format if rows[0].is_contiguous() else (
            _piece_format(rows[0]) if pieces is not None else None)
        if fmt is not None:
            return _owned(o) if o.is_contiguous(memory_format=fmt) else o.contiguous(memory_format=fmt)
    if o.is_contiguous() and rows[0].is_contiguous():
        return _owned(o)
    raise GuardFailed("a stacked result of 4 or more dimensions whose memory layout follows each piece's "
                      "(channels last or not): the loop decides")


_PIECE_FORMATS: dict = {}


def _piece_format(piece: torch.Tensor):
    """The memory format torch.stack gives pieces laid out as `piece` (torch's own rule, run on
    the meta device: no data), or None where it is none of the named formats."""
    key = (piece.shape, piece.stride(), piece.dtype)
    if key not in _PIECE_FORMATS:
        m = torch.empty_strided(piece.shape, piece.stride(), dtype=piece.dtype, device="meta")
        out = torch.stack([m, m])
        fmt = None
        for f in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
            if (f is torch.contiguous_format or out.dim() == (4 if f is torch.channels_last else 5)) \
                    and out.is_contiguous(memory_format=f):
                fmt = f
                break
        _PIECE_FORMATS[key] = fmt
    return _PIECE_FORMATS[key]


_PLAIN_SIGS = {t: t for t in (bool, int, float, complex, str, type(None))}


_SIG_ELEMENTS = 16      # lists and tuples up to this long are signed by every element (_sig)


def _sig(v):
    tp = type(v)
    plain = _PLAIN_SIGS.get(tp)
    if plain is not None:
        return plain                        # the common non-tensor values: their type alone
    if tp is types.ModuleType:
        return (tp, id(v))
    hit = _IDENT_SIGS.get(id(v))
    if hit is not None and hit[0]() is v:
        return hit[1]          # (the same object as before: its entry, made once)
    if isinstance(v, torch.Tensor):
        entry = ("T", v.dtype, v.dim(), "cpu" if v.is_cpu else v.device.type, v.requires_grad)
        return entry if type(v) is torch.Tensor else entry + (type(v),)
    if isinstance(v, (list, tuple)):
        if 1 < len(v) <= _SIG_ELEMENTS:
            # (every element of a short list: one read by an index that is not the loop's, `ls[j]`,
            # may be any of them, of another kind than the first; probeF)
            return (type(v).__name__, tuple(map(_sig, v)))
        return (type(v).__name__, _sig(v[0]) if v else None)
    if isinstance(v, _NUMBER) or v is None or isinstance(v, str):
        return type(v)
    if not tp.__weakrefoffset__:
        return (tp, id(v))     # (no weak references to it: its id, as before)
    try:
        ident = _Ident(v)
    except TypeError:
        return (tp, id(v))
    entry = (tp, ident)
    if len(_IDENT_SIGS) > 4096:
        _IDENT_SIGS.clear()
    _IDENT_SIGS[id(v)] = (ident.ref, entry)
    return entry


_MAX_SIGNATURES = 64    # per loop: past these, a new signature runs the loop (see _guard)
_IDENT_SIGS: dict = {}      # id -> (weak reference, signature entry) of objects in signatures by identity


class _Ident:
    """An object in a signature by its identity, for as long as it lives: an id alone would be
    reused by a new object of the same type after the first is freed (a model made anew for
    each call), which would then inherit the first one's per-signature checks."""

    __slots__ = ("ref", "h")

    def __init__(self, v):
        self.ref = weakref.ref(v)
        self.h = id(v)

    def __hash__(self):
        return self.h

    def __eq__(self, other):
        if type(other) is not _Ident:
            return NotImplemented
        v = self.ref()
        return v is not None and v is other.ref()


_LIST_DTYPES = {float: torch.float64, int: torch.int64, bool: torch.bool}


def _index_only(plan) -> bool:
    """Whether each element a loop walks is used only as a whole index of a name (`buf[j]`,
    `table[j, :]`), and none is read after the loop: a numpy integer there indexes as the Python
    int it holds (begin, _numpy_indices)."""
    targets = {t for t, _ in plan.space.elements}
    if not targets or set(plan.live_after) & targets:
        return False
    for text in list(plan.body) + [o.value for o in plan.outputs if o.value]:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return False
        allowed = set()
        for n in fastast.walk(tree):
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id not in targets:
                entries = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
                allowed.update(id(e) for e in entries if isinstance(e, ast.Name))
        if any(isinstance(n, ast.Name) and n.id in targets and id(n) not in allowed for n in fastast.walk(tree)):
            return False
    return True


def _numpy_indices(space):
    """The iterables of a loop whose elements only index (_index_only), with a 1-d numpy array
    of integers, or a list of numpy integers, as the list of the Python ints they hold (the loop
    itself walks what it was given)."""
    out = None
    for k, s in enumerate(space):
        t = type(s)
        if t.__module__ != "numpy" and not (t in (list, tuple) and s and type(s[0]).__module__ == "numpy"):
            continue
        import numpy as np
        if isinstance(s, np.ndarray):
            if s.ndim != 1 or s.dtype.kind not in "iu":
                continue
            v = s.tolist()
        elif all(isinstance(e, np.integer) for e in s):
            v = [int(e) for e in s]
        else:
            continue
        if out is None:
            out = list(space)
        out[k] = v
    return space if out is None else tuple(out)


def _number_list(v) -> torch.Tensor:
    """A list (or tuple) of Python numbers the loop indexes, as one tensor in Python's precision
    (float64, int64, bool). Every element must be of one type, as the batch gives every
    iteration the same kind of number; the body sees each element as a Python number again
    where it runs one iteration, and the batched body treats the batch as one (Token.numbers)."""
    kinds = set(map(type, v))
    if len(kinds) != 1 or next(iter(kinds)) not in _LIST_DTYPES:
        names = ", ".join(sorted(k.__name__ for k in kinds)) or "nothing"
        raise GuardFailed(f"an indexed value is a {type(v).__name__} of {names}, not a tensor or a list "
                          "of Python numbers of one type")
    try:
        return torch.tensor(v, dtype=_LIST_DTYPES[kinds.pop()])
    except (OverflowError, RuntimeError) as e:   # an int beyond int64
        raise GuardFailed(f"a list of numbers that does not fit a tensor ({e})", data=True) from None


def _list_elements(v, grad, device=False) -> bool:
    """Checks the elements of a list of tensors the loop walks or indexes, which the batch
    stacks: every element of one type (the loop's results keep each element's own), dtype and
    shape (stacking would promote, fail, or give rows the loop's do not have), and with `device`
    of one device; under grad none that requires grad (the stack would give every element a
    gradient, zeros where the loop leaves `.grad` None); no inference tensor outside inference
    mode. Returns whether every element is on the CPU."""
    first = v[0]
    kind, shape, dtype, where = type(first), first.shape, first.dtype, first.device
    cpu = True
    for e in v:
        if type(e) is not kind:
            raise GuardFailed("the list holds tensors of several types (a subclass beside plain tensors)")
        if kind is not torch.Tensor:
            _plain_subclass(e)
        if e.layout is not _STRIDED:
            raise GuardFailed(_LAYOUT)
        if e.dtype is not dtype or e.shape != shape or device and e.device != where:
            # (a chunked run could even broadcast a chunk of other shapes)
            raise GuardFailed("the list holds tensors of different shapes, dtypes or devices", data=True)
        if cpu and not e.is_cpu:
            cpu = False
        if grad and e.requires_grad:
            raise GuardFailed("the loop reads a list of tensors that require grad: stacking them would give every "
                              "element a gradient (zeros where the loop leaves `.grad` None)")
        if e.is_inference() and not torch.is_inference_mode_enabled():
            raise GuardFailed(_INFERENCE_ELEMENTS)
    return cpu


def _tensor_list(v, grad) -> torch.Tensor:
    """A list (or tuple) of tensors the loop indexes (`xs[t]`), checked (_list_elements) and stacked."""
    _list_elements(v, grad, device=True)
    return torch.stack(v)


# (a stack of them is a normal tensor: what torch refuses of an inference tensor, it would not)
_INFERENCE_ELEMENTS = ("a list of inference tensors outside inference mode (what torch refuses of them, "
                       "saving one for backward, a stack of them would not: the loop runs)")


def _storage(t: torch.Tensor):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # tensors without storage (functional wrappers) never alias for us
        return None


_PAD_ROWS = 64     # iterations past an indexed tensor's ends whose conditions the guard evaluates (_unread)
_OUTSIDE = ("the loop's indices run outside an indexed tensor (the loop decides what happens: wrap-around "
            "or IndexError)")


def _no_aliasing(written, mapped, rest, free_tensors, free, calls):
    """Outputs share no memory with each other or with any tensor the loop reads (also inside
    lists, dicts, modules and objects it reads), except a tensor read at the very index it
    writes: that read's own entry (the analysis flags it), not another read that happens to be
    the same tensor (`out = x`, then `x[t]` read after `out[t]` is written: the loop reads the
    new row there). `rest`: the tensors the loop walks (its sources)."""
    others = [v for v in free if not isinstance(v, torch.Tensor)] if free else []
    if calls:
        others += calls
    readable = []
    for m in mapped:
        readable.append((m[0], m[3]))
    for t in rest:
        readable.append((t, False))
    for t in free_tensors:
        readable.append((t, False))
    if others:
        readable += [(t, False) for t in _reachable_tensors(others) if t is not None]
    # (two fast paths, measured: the general loop below costs 1 to 2 us more on these calls)
    if not readable:
        first = written[0]
        for w in written:
            if w is not first:
                break
        else:
            return      # one output (`acc[k] += acc[k - 1]` writes acc twice) and nothing read beside it
    if len(written) == 1:
        w = written[0]
        pw = _span(w)
        if pw is not None:
            for r, flag in readable:
                if _meets(_span(r), pw) and not (flag and r is w):
                    raise GuardFailed("an output shares memory with a tensor the loop reads")
        return
    wspan = [_span(w) for w in written]
    for j, (w, pw) in enumerate(zip(written, wspan)):
        if pw is None:
            continue
        for r, flag in readable:
            if _meets(_span(r), pw) and not (flag and r is w):
                raise GuardFailed("an output shares memory with a tensor the loop reads")
        for w2, p2 in zip(written[j + 1:], wspan[j + 1:]):
            if w2 is not w and _meets(p2, pw):     # (one tensor written twice is one output)
                raise GuardFailed("two outputs share memory")


def _meets(a, b) -> bool:
    """Whether two memory spans (_span) overlap."""
    return a is not None and a[0] < b[1] and b[0] < a[1]


def _span(t: torch.Tensor):
    """The memory of `t`'s storage, [start, end), or None: two tensors may share memory without
    sharing a storage (`torch.from_numpy` of overlapping views of one array, `torch.frombuffer`
    at two offsets of one buffer), so outputs and inputs are compared by the memory they span."""
    try:
        s = t.untyped_storage()
        p, k = s.data_ptr(), s.nbytes()
    except Exception:  # tensors without storage (functional wrappers) never alias for us
        return None
    return (p, p + k) if k else None


_NUMBER_BUILTINS = frozenset({"int", "float", "abs", "round", "min", "max", "complex", "bool", "pow", "divmod"})
_NUMBER_ATTR = ("an element of a list of Python numbers has an attribute read or a method called on it "
                "(`x[i].item()`): the loop raises or reads the number's own, where a batch of them is a tensor")


def _attribute_params(plan) -> frozenset:
    """The body's per-iteration parameters (indexed values, walked elements) of which the body
    reads an attribute or calls a method, on the element or on a value assigned from it
    (`x[i].item()`, `v = x[i] * 2; v.real`), or converts such a value with `.item()` the analysis
    took off (an output's or payload's pytype "item"). The plan's body reads an indexed value as
    written (`x[i]`: a subscript of its base), a walked element by its name."""
    bases = {}
    for mp in plan.mapped:
        bases.setdefault(mp.base, set()).add(mp.param)
    elements = {t for t, _ in plan.space.elements}
    if not bases and not elements:
        return frozenset()
    trees = [ast.parse(t) for t in plan.body]
    derived = {p: {p} for p in elements}
    for params in bases.values():
        for p in params:
            derived[p] = set()
    base_of = {p: b for b, ps in bases.items() for p in ps}

    def reads(node, p):
        """Whether `node`'s value is the element itself or a number made from it (arithmetic,
        comparisons, Python's numeric builtins), not a value it only indexes (`x[:, idx[i]]`)."""
        if isinstance(node, ast.Name):
            return node.id in derived[p]
        if isinstance(node, ast.Subscript):
            return ast.unparse(node.value) == base_of.get(p) or reads(node.value, p)
        if isinstance(node, ast.BinOp):
            return reads(node.left, p) or reads(node.right, p)
        if isinstance(node, ast.UnaryOp):
            return reads(node.operand, p)
        if isinstance(node, ast.BoolOp):
            return any(reads(v, p) for v in node.values)
        if isinstance(node, ast.Compare):
            return any(reads(v, p) for v in [node.left, *node.comparators])
        if isinstance(node, ast.IfExp):
            return reads(node.body, p) or reads(node.orelse, p)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _NUMBER_BUILTINS:
            return any(reads(a, p) for a in node.args)
        return False

    changed = True
    while changed:
        changed = False
        for tree in trees:
            for n in fastast.walk(tree):
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    names = {x.id for tg in targets for x in fastast.walk(tg) if isinstance(x, ast.Name)}
                    for p, ds in derived.items():
                        if not names <= ds and reads(n.value, p):
                            ds |= names
                            changed = True
    items = {o.marker for o in plan.outputs if o.pytype == "item"} | {
        pay[1] for o in plan.outputs for pay in o.payloads if len(pay) > 3 and pay[3] == "item"}
    attrs = [n.value for tree in trees for n in fastast.walk(tree) if isinstance(n, ast.Attribute)]
    return frozenset(p for p, ds in derived.items() if ds & items or any(reads(a, p) for a in attrs))


class FunctionRuntime:
    """Shared by every rewritten loop of one function (the `_av` name in generated code)."""

    Error = Exception      # what the generated code catches (`_av.Error`: the user may rebind `Exception`)

    def __init__(self, qualname: str, matches: dict, resolve=None):
        self.qualname = qualname
        self.matches = matches            # loop id -> lowering.Match
        self.failures: dict = {}          # (loop id, signature) -> reason
        self.reselect: set = set()        # (loop id, signature) whose batch over every row failed: kept rows first
        self.sel_failed: set = set()      # (loop id, signature) whose kept-rows-first run failed too
        self.sel_errors: dict = {}        # (loop id, signature) -> how many of its kept-rows-first runs failed
        self.vmap_types_ok: set = set()   # (loop id, signature) whose types vmap keeps as the loop (Token._vmap)
        self.succeeded: set = set()       # (loop id, signature) seen working
        self.sig_ids: dict = {}           # (loop id, signature tuple) -> the small int that stands for it
        self.sig_counts: dict = {}        # loop id -> how many signatures it has met (_MAX_SIGNATURES)
        self.number_ops: dict = {}        # loop id -> cost.number_ops: operations on Python numbers (_refined)
        self.element_ops: dict = {}       # loop id -> cost.element_ops: on indexed lists' elements (_refined)
        self.refused_why: dict = {}       # loop id -> why its last vectorized attempt was refused (for explain)
        self.element_views: frozenset = frozenset()   # loops rewritten from `for row in x` updating rows in place
        self.bcast: dict = {}             # (loop id, signature, tag) -> how the slices broadcast
        self.nest_dims: dict = {}         # loop id -> vmap in_dims per level of each indexed tensor
        self.batchable: dict = {}         # (loop id, tag) -> (body def, runtime name) with a possible batched form
        self.side_code: dict = {}         # loop id -> [(tag, BatchedBody)] of its branch's sides, or None (_side_runs)
        self.batched: dict = {}           # (loop id, signature, tag) -> batching.BatchedBody, or why there is none
        self.batched_seen: dict = {}      # loop id -> the batched body (or reason) explain's call met
        self.perms: dict = {}             # (loop id, signature) -> loop dimensions first, per matmul input
        self.checked: set = set()         # (loop id, signature, mode) probe passed
        self.partial: dict = {}           # (loop id, signature, mode, tag) -> (outputs compared, masks whose
                                          # first row was compared): a check not finished yet (Token._check)
        self.events: list | None = None   # set by explain to record decisions
        self.events_thread = None         # the thread explain runs in
        self.bad_modes: set = set()       # (loop id, signature, mode) whose check failed
        self.mm_seen: dict = {}           # (kind, levels of a, levels of b) -> einsum last used
        self.ops: dict = {}               # loop id -> operations in one iteration (cost model)
        self.strict = False
        self.ran: dict = {}               # loop id -> mode of its last committed vectorized run ("broadcast"/"vmap")
        self.pytypes: dict = {}           # (loop id, signature) -> {position: holds Python numbers}
        self.wraps: dict = {}             # loop id -> per indexed tensor: read as an index (Python's from the end)
        self.ahead: set = set()           # loop ids reading elements only later iterations write (Mapped.ahead)
        self.reach: dict = {}             # loop id -> (per indexed tensor: its reach test, index, free names' positions)
        self.layouts: dict = {}           # loop id -> output layout (value, payloads, mask positions)
        self.fast: dict = {}              # (loop id, signature, tag) -> mode that passed its check
        self.decisions: dict = {}         # (loop id, trip-count bucket) -> cost.Decision, for `kind`
        self.kind = "cpu"                 # the device kind of the tensors of the latest call
        self.by_kind = {"cpu": self.decisions}   # each device kind's decisions (its own constants)
        self.units: dict = {}             # loop id -> the outputs' share of autovec's own work (cost model)
        self.py_clock: dict = {}          # loop id -> (start, trip count, decision) of a timed Python run
        # (loop id, bucket) -> [refusals, the last refusal, calls still refused at once, next wait]
        # of the calls with tensors that require grad (guard: kept apart from the bucket's decision)
        self.grad_refused: dict = {}
        self.iter_bytes: dict = {}        # (loop id, signature) -> bytes one iteration allocates
        self.iter_out: dict = {}          # the same key -> the bytes of those its results hold
        self.float_lits: dict = {}        # loop id -> whether its body has a float literal (Token._python_floats)
        self.exit_early: dict = {}        # loop id -> its last call stopped within Token.find_exit's first iterations
        self.chunked: dict = {}           # loop id -> (chunks, rows, bytes needed, budget) of the last run
        # loop id -> (kept iterations (for a branch's sides: each side's count), all, grad) of its last
        # run that selected them
        self.kept: dict = {}
        self.memory_budget = None         # bytes, from @autovec(memory_budget=...); None: half of free memory
        self.steps: dict = {}             # loop id -> compiled.Stepping (loops with a compiled-step form)
        self.foreach: dict = {}           # loop id -> (line, strategy, whether another strategy plans the loop too) of a
                                          # foreach or ragged loop (foreach_rt, ragged_rt)
        self.in_place: dict = {}          # (loop id, owned parameters) -> the broadcast body reusing temporaries, or None
        self.nest_layouts: dict = {}      # (loop id, signature) -> per input of a nest's batched body: (permutation, levels to add)
        self.src_picks: dict = {}         # loop id -> per body parameter, the element it is (or None)
        self.indexing: dict = {}          # loop id -> whether a loop over elements also indexes values (_indexes)
        self.hot: dict = {}               # (loop id, signature, tag) -> (largest trip count, steady-state runner, mode)
        self.lanes: dict = {}             # loop id -> guards written out per signature (lanes.build), newest first
        self.lane_tried: set = set()      # (loop id, signature) whose lane was written or found not to fit
        self.committed: set = set()       # (loop id, signature) that ran vectorized to the end (Token.done)
        self.xp: dict = {}                # loop id -> its express (lanes.express; several signatures: chained)
        self.xp_fns: dict = {}            # loop id -> the express functions behind it, newest first
        self.xp_tried: set = set()        # (loop id, signature) whose express was written or found not to fit
        self.xp_specs: dict = {}          # loop id -> its consumers ((kind, output position, new memory), ..): lowering.common
        self.prods: dict = {}             # loop id -> whether its body calls prod (runtime.Token._products)
        self.range_loops = frozenset(k for k, v in matches.items() if v.plan.space.kind == "range")
        self.element_loops = frozenset(k for k, v in matches.items() if v.plan.space.kind == "elements")
        self.indexing_loops = frozenset(k for k in self.element_loops if self._indexes(k))
        # loops over elements whose numbers only index (`torch.stack([buf[j] for j in idxs])`):
        # numpy integers stand in for Python ints there (begin: a replay buffer's np.random
        # indices), where in arithmetic they would not (`np.int64(2) * t` is numpy's product)
        self.np_index = frozenset(k for k in self.indexing_loops if _index_only(matches[k].plan))
        self.enum_start = {k: int(v.plan.space.enum_start) for k, v in matches.items()
                           if v.plan.space.kind == "elements"}
        self.nest_loops = frozenset(k for k, v in matches.items() if v.plan.space.kind == "nest")
        # `for a, b in x.tolist()`: the rows of `x` stand for its .tolist() only when `x` is a
        # tensor (a list has no .tolist(): the loop raises AttributeError)
        self.tensor_only = {}
        for k, v in matches.items():
            names = [t for t, _ in v.plan.space.elements]
            hit = frozenset(names.index(row) for row, _, numbers in v.plan.space.unpack if numbers and row in names)
            if hit:
                self.tensor_only[k] = hit
        # loops whose index, as a number, meets Python floats (`0.1 * i`, `i / n`): only a
        # batched body computes that as the loop does (in float64, as Python numbers)
        self.index_py = frozenset(k for k, v in matches.items() if v.plan.index_float)
        # loops where Python numbers (`.item()` values, the index) may meet `/`, `//`, `%` or
        # `**`: only the batched body checks what Python raises or computes otherwise there
        # (_Helpers.pynum: a zero divisor, int / int, powers out of range); vmap and
        # broadcasting would compute int64 / float64 tensors' results instead
        self.py_arith = frozenset(k for k, v in matches.items() if _py_arith(v.plan))
        # values read through outside objects (`self.scale`, `cfg["eps"]`): their types join the
        # signature (_peek_sig)
        self.peeks = {k: hit for k, v in matches.items() for hit in [_peek_paths(v.plan)] if hit}
        # outside values (positions in plan.free) and values read through them (peeks) that the
        # body uses as they are, not only through their attributes (_direct_uses): those whose
        # Python code such a use would run are refused (_inert_value)
        self.direct = {k: _direct_uses(v.plan) for k, v in matches.items()}
        # loop-invariant values an inner loop of the body walks (`for c in coeffs`): walked once
        # by the batch, again in each iteration by the loop, so each must be one a walk leaves as
        # it was (_walked_free)
        self.walked = {k: hit for k, v in matches.items() for hit in [_walked_free(v.plan)] if hit}
        # positions of the indexed values whose element, or a value made from it, has an attribute
        # read or a method called (`x[i].item()`): a list of Python numbers there raises in the
        # loop, where its batch, a tensor, would answer (_attribute_params). (A walked list of
        # numbers beside tensors, `zip(nums, x)`, with `a.item()` keeps the loop already.)
        self.number_attrs = {}
        for k, v in matches.items():
            touched = _attribute_params(v.plan)
            if touched:
                self.number_attrs[k] = frozenset(j for j, mp in enumerate(indexed(v.plan)) if mp.param in touched)
        # values the body puts through loop-invariant operations, which a batched form computes
        # once (analysis.shared): their gradients are checked in the guard (_shared_gradients)
        self.shared = {k: (hit, tuple(v.plan.free) + tuple(mp.base for mp in v.plan.mapped))
                       for k, v in matches.items() for hit in [shared_work(v.plan)] if hit}
        # loops whose guard has checks beyond types, bounds, aliasing and purity (branches or
        # selected rows under grad, a nest's infinities, matmul precision, shared work): the
        # others skip them with one set lookup
        self.selects = {k: bool(v.plan.branches or _selects_rows(v.plan)) for k, v in matches.items()}
        # of those, the loops whose kept iterations may be computed alone under grad (_selectable)
        self.selectable = frozenset(k for k, v in matches.items() if _selectable(v.plan))
        # loops whose body takes a median of all of a value's elements: its gradient is shared by
        # the tied elements, where vmap's and a batched median along a dimension give one of them all
        self.even_ties = frozenset(k for k, v in matches.items() if _whole_medians(v.plan))
        # loops calling an operation whose vmap batching rule skips the loop's checks (one_hot, embedding)
        self.no_vmap = frozenset(k for k, v in matches.items() if _calls_any(v.plan, _UNCHECKED_UNDER_VMAP)
                                 or _calls_unchecked(v.plan, resolve))
        # loops of other strategies whose body multiplies matrices or calls code that may (a
        # batched body's `X @ W.mT`, a module on the batch): one matrix product where the loop has
        # one per row, which reduced-precision settings round (bfloat16 on a CPU) where the loop's
        # matrix-vector products do not; the setting is read on every call, as the matmul
        # strategy's (_reduced_products)
        self.products = frozenset(k for k, v in matches.items() if v.strategy != "matmul" and (
            _has_products(v.plan) or _may_multiply(v.plan, resolve)))
        self.checked_more = frozenset(k for k, v in matches.items() if self.selects[k] or k in self.nest_loops
                                      or v.strategy == "matmul" or k in self.shared or v.plan.callables
                                      or k in self.even_ties or k in self.products)

    def stepper(self, loop_id, fn, calls, it):
        """The compile fallback's step callable for this run of a loop, or None (the original loop)."""
        from .compiled import stepper
        return stepper(self, loop_id, fn, calls, it)

    # ------------------------------------------------------------------ guards

    def _note(self, loop_id, path, reason, estimate=None):
        events = self.events    # (explain's list, for explain's own thread: other threads' calls
        if events is not None and self.events_thread == threading.get_ident():   # are not its)
            events.append((loop_id, path, reason, estimate))

    def begin(self, loop_id, space):
        """First, cheap decision from the iteration space alone (trip count, cost model):
        a pending state for `guard`, or None for the Python loop."""
        if self.np_index and loop_id in self.np_index and type(space) is tuple:
            space = _numpy_indices(space)     # (numpy integers that only index: as Python ints)
        if type(space) is range and self.events is None and not self.strict and loop_id in self.range_loops \
                and _MIN_TRIP_KEY not in _ENV:
            # the steady state of a `for i in range(..)` loop whose bucket is decided: two lookups
            n = len(space)
            d = self.decisions.get((loop_id, n.bit_length()))
            if d is not None and d.final and (d.vec or not d.retry or d.wait()):
                if not d.vec:
                    return None
                m = self.matches[loop_id]
                start = space.start
                return (loop_id, m, m.plan, space, (), None, n, start, space.step, start, None, None, 0.0)
        elif type(space) is tuple and loop_id in self.element_loops and self.events is None and not self.strict:
            # the same for `for row in x` / zip(a, b) / enumerate(x) over tensors (a list of
            # Python numbers alone, refused first: an inner loop over one runs this on every
            # outer iteration, probeA)
            n = -1
            lists = False
            tensors = False     # (a list of Python numbers alone has nothing to batch)
            for t in space:
                if type(t) is not torch.Tensor or not t.dim():
                    if type(t) is list or type(t) is tuple:
                        if not t:
                            return None     # empty: the loop, quietly (as _space)
                        e0 = type(t[0])
                        if e0 in _LIST_DTYPES:
                            if len(space) == 1 and loop_id not in self.indexing_loops:
                                return None     # numbers alone: the loop, quietly
                        elif isinstance(t[0], torch.Tensor):
                            tensors = True
                        else:
                            return None     # not tensors or numbers: the loop, quietly
                        lists = True        # a list: its length, for the decision below
                        k = len(t)
                    else:
                        break
                else:
                    k = t.shape[0]
                    tensors = True
                if n < 0 or k < n:
                    n = k
            else:
                if not tensors and loop_id not in self.indexing_loops:
                    return None             # Python numbers alone: no torch work to batch
                d = self.decisions.get((loop_id, n.bit_length())) if n >= 0 and _MIN_TRIP_KEY not in _ENV \
                    else None
                if d is not None and d.final and (d.vec or not d.retry or d.wait()):
                    if not d.vec:
                        return None         # decided for the loop: no check of the list's tensors
                    if not lists:
                        m = self.matches[loop_id]
                        return (loop_id, m, m.plan, space, list(space), None, n, 0, 1, self.enum_start[loop_id],
                                None, None, 0.0)
        elif loop_id in self.nest_loops and self.events is None and not self.strict and _MIN_TRIP_KEY not in _ENV:
            # the same for a loop nest: one range per level, all counting up
            n, levels = 1, []
            for r in space:
                if type(r) is not range or r.step <= 0:
                    break
                k = len(r)
                levels.append((r.start, r.step, k))
                n *= k
            else:
                d = self.decisions.get((loop_id, n.bit_length()))
                if d is not None and d.final and (d.vec or not d.retry or d.wait()):
                    if not d.vec:
                        return None
                    m = self.matches[loop_id]
                    start = levels[0][0]
                    return (loop_id, m, m.plan, space, (), levels, n, start, levels[0][1], start, None, None, 0.0)
        m = self.matches[loop_id]
        kind = m.plan.space.kind
        if self.events is None and not self.strict and kind != "elements":
            # the steady state: one decision per loop and power-of-two bucket of trip counts
            if kind == "range":
                n, levels = len(space), None
                start, step = space.start, space.step
            else:
                n, levels = 1, []
                for r in space:
                    if r.step <= 0:
                        break      # refused, with its reason, below
                    k = len(r)
                    levels.append((r.start, r.step, k))
                    n *= k
                else:
                    start, step = levels[0][0], levels[0][1]
            if levels is None or len(levels) == len(space):
                forced = cost.min_trip(None)
                if forced is None:
                    ok, decision = self._choose(loop_id, m, n)
                else:
                    ok, decision = n >= max(forced, 1), None
                if not ok:
                    return None
                return (loop_id, m, m.plan, space, (), levels, n, start, step, start, None, decision,
                        _clock() if decision is not None else 0.0)
        try:
            return self._space(loop_id, m, m.plan, space)
        except GuardFailed as e:
            return self._refuse(loop_id, m.plan, e)

    def _indexes(self, loop_id) -> bool:
        """Whether a loop over elements also indexes values by its index (`x[i]` beside
        `enumerate(w)`), or a loop-invariant value by an element (`buf[j]` for `j in idxs`, a
        gather): then a list of Python numbers it walks has tensors to batch with."""
        hit = self.indexing.get(loop_id)
        if hit is None:
            plan = self.matches[loop_id].plan
            targets = {t for t, _ in plan.space.elements}
            hit = self.indexing[loop_id] = any(mp.param not in targets for mp in plan.mapped) \
                or _gathers(plan, targets)
        return hit

    def _choose(self, loop_id, m, n, lists=0):
        """(vectorize this call?, the decision still timing this bucket or None)."""
        decision = self._decision(loop_id, m, n, lists)
        ok = decision.choose()
        if decision.final:
            return ok, None
        if not ok:
            self.py_clock[loop_id] = (_clock(), n, decision)   # timed by python_ran
        return ok, decision

    def _decision(self, loop_id, m, n, lists=0):
        key = (loop_id, n.bit_length())
        d = self.decisions.get(key)
        if d is None:
            d = self.decisions[key] = cost.Decision(self._estimate(loop_id, m, n, lists), n)
        return d

    def _estimate(self, loop_id, m, n, lists=0):
        vmap = m.plan.space.kind == "nest" and m.strategy != "matmul" or self.ran.get(loop_id) == "vmap"
        est = cost.estimate(m.strategy, n, self.ops.get(loop_id, 1), self.units.get(loop_id, 0.0), vmap, lists,
                            self.kind)
        if m.plan.scans and not m.plan.mapped and not lists:
            # running values that read no tensor's rows (`c = 0.5 * c + 1.0`, Python numbers): the
            # loop may cost the interpreter's tens of nanoseconds a step, not a torch operation's
            # microseconds, so both paths are timed (probeR: its scan at 1,500 steps, 6.8x slower)
            est = {**est, "timed": True}
        return est

    def set_kind(self, kind):
        """Calls on tensors of another device kind: that kind's decisions (and constants) from now on."""
        if kind != self.kind:
            self.kind = kind
            self.decisions = self.by_kind.setdefault(kind, {})

    def python_ran(self, loop_id):
        """After the loop as written ran where the cost model chose it: its time, for the decision."""
        started = self.py_clock.pop(loop_id, None) if self.py_clock else None
        if started is not None:
            t0, n, decision = started
            decision.python_ran(_clock() - t0, n)

    def guard(self, pending, mapped, free, calls, writes):
        """A Token when the loop may run vectorized for these values, else None."""
        loop_id, m = pending[0], pending[1]
        if loop_id in self.element_views and torch.is_grad_enabled() and (
                _any_grad(e[0] for e in mapped) or _any_grad(free) or _any_grad(w[1] for w in writes)):
            # `for row in x: row.mul_(2)`: the loop's rows are views unbind made, and an in-place
            # method on one raises under autograd (its tensor or an operand requiring grad); the
            # rewrite's `x[k].mul_(2)` would not: the loop runs, and raises. Likewise a row copied
            # at its first mention (LoopPlan.row_copies): the loop's writes into the row may change
            # what its backward saved (`c = out[i, y[i]].sin(); out[i, y[i]] = c`), the copy's do
            # not (probeW)
            return self._refuse(loop_id, m.plan, GuardFailed(
                "in-place updates of a tensor's rows under autograd (the loop's backward may need what they "
                "overwrite, or iterating a tensor gives views that in-place methods raise on): the loop runs"))
        if (loop_id in self.number_ops or loop_id in self.element_ops) and (
                pending[10] is not None or pending[11] is not None and not pending[11].refined):
            pending = self._refined(pending, free, mapped)
            if pending is None:
                return None
        mine = self.lanes.get(loop_id)
        if mine is not None:
            for lane in mine:      # (the steady state: this loop's guard written out per signature)
                tok = lane(pending, mapped, free, calls, writes)
                if tok is not None:
                    if loop_id in self.xp_specs and (loop_id, tok.sig) not in self.xp_tried:
                        self._add_express(mapped, free, calls, writes, tok)
                    return tok
        bucket = (loop_id, pending[6].bit_length())
        held = self.grad_refused.get(bucket) if self.grad_refused else None
        if held is not None and held[0] >= _GRAD_REFUSALS and _grad_call(pending, mapped, free, calls, writes):
            held[2] -= 1
            if held[2] > 0:
                return self._refuse(loop_id, m.plan, held[1])   # (the same refusal, without the guard's work)
            held[0] = _GRAD_REFUSALS - 1                       # (due: the guard decides again)
        try:
            tok = self._guard(pending, mapped, free, calls, writes)
            if (loop_id, tok.sig) in self.committed and (loop_id, tok.sig) not in self.lane_tried:
                self._add_lane(pending, mapped, free, calls, writes, tok)
            return tok
        except GuardFailed as e:
            # (a decision the estimate settled is no timing one: it counts refusals too, so that a
            # signature or data refused on every call stops paying for the attempt; the bucket
            # tries the vectorized path again later, Decision.wait)
            if _grad_call(pending, mapped, free, calls, writes):
                # a call with tensors that require grad is refused for reasons the same loop's calls
                # without them do not meet (a branch under autograd): its refusals are kept apart,
                # so that alternating calls (a training step, then an evaluation without no_grad)
                # leave the others vectorized; those calls skip the guard, trying it again later
                self._grad_refusal(bucket, e)
                return self._refuse(loop_id, m.plan, e)
            d = pending[11] if pending[11] is not None else self.decisions.get(bucket)
            if d is not None:
                d.vectorized_failed()
                self.refused_why[loop_id] = str(e)
            return self._refuse(loop_id, m.plan, e)

    def _refined(self, pending, free, mapped=()):
        """`pending` with the cost model's loop re-estimated from this call's values (operations on
        Python numbers cost a few tens of nanoseconds, not a torch operation's microsecond:
        cost.refine_python), once per bucket before any of its calls is timed; None where the loop
        is now the choice. explain's call (an estimate, no decision) raises with the estimate."""
        loop_id, m, n, est, d = pending[0], pending[1], pending[6], pending[10], pending[11]
        lists = sum(1 for s in pending[4] if type(s) in (list, tuple))
        base = est if est is not None else self._estimate(loop_id, m, n, lists)
        values = dict(zip(m.plan.free, free))
        for k, e in enumerate(mapped):
            values[("elements", k)] = e[0]      # (an indexed list: its elements, cost.number_ops)
        entries = self.number_ops.get(loop_id, ()) + self.element_ops.get(loop_id, ())
        new = cost.refine_python(base, n, self.ops.get(loop_id, 1), entries, values, self.kind)
        if d is not None:
            if new is base:
                d.refined = True
            else:
                d.refine(new, n)
            if d.choose():
                return pending
            self.py_clock[loop_id] = (_clock(), n, d)    # (timed by python_ran, as begin's choice)
            return None
        known = self.decisions.get((loop_id, n.bit_length()))
        if new is base:
            return pending
        if known is not None and known.final or cost.min_trip(m.strategy) is not None:
            return pending[:10] + (new,) + pending[11:]     # (explain shows the estimate refined)
        if not cost.worth(m.strategy, n, new):
            self._note(loop_id, "estimate", "", new)
            raise GuardFailed(f"{n} iteration(s): the cost model expects the Python loop to be faster (its "
                              "operations on Python numbers are cheap: about "
                              f"{new['python'] * 1e6:.0f} us against {new['vectorized'] * 1e6:.0f} us)", cost=True)
        return pending[:10] + (new,) + pending[11:]

    def _has_select(self, loop_id) -> bool:
        """Whether the loop's condition has a body of its own (lowering.common._select_code)."""
        return any(k == loop_id and t.startswith("_av_sel") for k, t in self.batchable)

    def _grad_refusal(self, bucket, e):
        """One more refusal of a call with tensors that require grad (guard, failed)."""
        held = self.grad_refused.setdefault(bucket, [0, e, 0, _RETRY_GRAD])
        held[0] += 1
        held[1] = e if isinstance(e, GuardFailed) else GuardFailed(str(e))
        if held[0] >= _GRAD_REFUSALS:
            held[2] = held[3]
            held[3] = min(held[3] * 2, cost._RETRY_MAX)

    def _add_lane(self, pending, mapped, free, calls, writes, tok):
        """Once a loop is in its steady state for a signature: its guard written out for it (lanes)."""
        loop_id = pending[0]
        self.lane_tried.add((loop_id, tok.sig))
        if self.events is not None or not lanes.eligible(pending[5] is not None, mapped, writes, tok):
            return
        sig = self._sig_of(loop_id, tok.sig)
        try:
            lane = lanes.build(self, loop_id, tok.sig, sig, mapped, tok.sources, free, calls, writes,
                               nest=pending[5] is not None)
        except Exception:      # (a lane is only a faster guard: without one, the general guard answers)
            return
        if lane is not None:
            kept = self.lanes.get(loop_id, [])
            self.lanes[loop_id] = ([lane] + kept)[:lanes._MAX_PER_LOOP]

    def _sig_of(self, loop_id, sid):
        """The signature tuple a loop's signature id stands for (sig_ids, reversed)."""
        return next(k[1] for k, v in self.sig_ids.items() if v == sid and k[0] == loop_id)

    def _add_express(self, mapped, free, calls, writes, tok):
        """Once a loop's lane answers and its hot runner is set: the whole steady state of the
        loop and signature written out as one function (lanes.express), which the generated code
        calls first."""
        loop_id, sid = tok.loop_id, tok.sig
        key = (loop_id, sid, "")
        if key not in self.hot:
            if key in self.fast:
                self.xp_tried.add((loop_id, sid))    # (settled on a mode with no hot runner)
            return
        self.xp_tried.add((loop_id, sid))
        sig = self._sig_of(loop_id, sid)
        try:
            fn = lanes.express(self, loop_id, sid, sig, mapped, tok.sources, free, calls, writes,
                               self.xp_specs[loop_id])
        except Exception:      # (an express is only a faster path: without one, the general path answers)
            return
        if fn is not None:
            fn.sid = sid
            self._set_express(loop_id, ([fn] + self.xp_fns.get(loop_id, []))[:lanes._MAX_PER_LOOP])

    def _set_express(self, loop_id, fns):
        self.xp_fns[loop_id] = fns
        if not fns:
            self.xp.pop(loop_id, None)
        elif len(fns) == 1:
            self.xp[loop_id] = fns[0]
        else:
            def chained(*a):
                for f in fns:
                    out = f(*a)
                    if out is not None:
                        return out
                return None
            self.xp[loop_id] = chained

    def express_stale(self, loop_id, sid):
        """An express whose hot runner was replaced: dropped (it may be written again)."""
        fns = [f for f in self.xp_fns.get(loop_id, []) if f.sid != sid]
        self._set_express(loop_id, fns)
        self.xp_tried.discard((loop_id, sid))
        return None

    def _refuse(self, loop_id, plan, e):
        self._note(loop_id, "python", str(e))
        if self.strict and not e.cost:
            raise NotVectorizable(f"{self.qualname}, line {plan.lineno}: {e}") from None
        return None

    def _space(self, loop_id, m, plan, space):
        sources = []
        levels = None
        lists = 0           # lists of tensors the loop walks
        if plan.space.kind == "nest":
            levels = [(r.start, r.step, len(r)) for r in space]
            if any(st <= 0 for _, st, _ in levels):
                raise GuardFailed("a range with a negative step keeps the Python loop")
            n = 1
            for _, _, k in levels:
                n *= k
            start, step, first = levels[0][0], levels[0][1], levels[0][0]
        elif isinstance(space, range):
            start, step, n = space.start, space.step, len(space)
            first = start
        else:
            start, step, first = 0, 1, int(plan.space.enum_start)
            lengths = []
            for j in self.tensor_only.get(loop_id, ()):
                if not isinstance(space[j], torch.Tensor):
                    if self.events is None and not self.strict:
                        return None
                    raise GuardFailed(f"`.tolist()` of a {type(space[j]).__name__}, not a tensor (the loop raises)")
            for s in space:
                if isinstance(s, torch.Tensor):
                    if s.dim() == 0:
                        raise GuardFailed("iterating over a 0-d tensor (the loop itself raises)")
                    lengths.append(s.shape[0])
                elif isinstance(s, (list, tuple)) and s and all(isinstance(e, torch.Tensor) for e in s):
                    lengths.append(len(s))
                    lists += 1        # checked and stacked element by element (the cost model)
                elif isinstance(s, (list, tuple)) and s and type(s[0]) in _LIST_DTYPES:
                    lengths.append(len(s))    # Python numbers beside tensors: checked, as one tensor, by _guard
                elif getattr(type(s), "_av_declined", False):
                    raise GuardFailed(s.reason)   # (analysis.pairs: pairs not made)
                elif self.events is None and not self.strict:
                    return None   # Python numbers, strings, generators: the loop, quietly
                else:
                    raise GuardFailed(f"the loop iterates over a {type(s).__name__}, not a tensor "
                                      "or a list of tensors")
                sources.append(s)
            n = min(lengths)
            if not any(isinstance(s, torch.Tensor) or isinstance(s[0], torch.Tensor) for s in sources) \
                    and not self._indexes(loop_id):
                if self.events is None and not self.strict:
                    return None
                raise GuardFailed("the loop iterates over Python numbers alone (no tensor to batch)")
        if self.events is None and not self.strict and cost.min_trip(m.strategy) is None:
            # the steady state: one decision per loop and power-of-two bucket of trip counts
            ok, decision = self._choose(loop_id, m, n, lists)
            if not ok:
                return None
            return (loop_id, m, plan, space, sources, levels, n, start, step, first, None, decision,
                    _clock() if decision is not None else 0.0)
        est = self._estimate(loop_id, m, n, lists)
        known = self.decisions.get((loop_id, n.bit_length()))
        if known is not None and (known.refined or known.weighed):
            est = {**est, "python": known.est_iter * n}     # (as the bucket's decision re-estimated it)
        measured = known.measured(n) if known is not None else None
        if measured:
            est = {**est, "measured python": measured["python"], "measured vectorized": measured["vectorized"]}
        if cost.min_trip(m.strategy) is None and known is not None and known.final:
            ok, why = known.vec, "timings of earlier calls show the Python loop is faster"
            if not ok and known.refused():
                self._note(loop_id, "estimate", "", est)
                last = self.refused_why.get(loop_id)
                raise GuardFailed(f"{n} iteration(s): the vectorized path was refused on {known.vec_failed} "
                                  "earlier calls at this size and never ran, so the loop runs; the vectorized "
                                  f"path is tried again in {known.retry} calls ("
                                  + (f"the last refusal: {last}" if last else "a first call at this size tells why "
                                     "it was refused") + ")", cost=True)
            if not ok and not measured:
                why = "the cost model expects the Python loop to be faster"
        else:
            forced = cost.min_trip(m.strategy)
            ok, why = cost.worth(m.strategy, n, est), "the cost model expects the Python loop to be faster" \
                if forced is None else f"AUTOVEC_MIN_TRIP={forced} keeps loops of fewer iterations on Python"
        if not ok:
            self._note(loop_id, "estimate", "", est)
            shown = measured or est
            raise GuardFailed(f"{n} iteration(s): {why} "
                              f"(about {shown['python'] * 1e6:.0f} us against {shown['vectorized'] * 1e6:.0f} us)",
                              cost=True)
        return (loop_id, m, plan, space, sources, levels, n, start, step, first, est, None, 0.0)

    def _guard(self, pending, mapped, free, calls, writes):
        """Every check of the rewrite's assumptions for these values, in one pass (this runs on
        every vectorized call): indexed and written tensors within the loop's indices, types,
        one device, no aliasing between outputs and inputs, pure callees, and gradients only
        where the batched form gives the loop's. The signature (types, dtypes, ranks, devices,
        requires_grad) is interned as a small int that keys every per-signature cache."""
        loop_id, m, plan, space, sources, levels, n, start, step, first, estimate, decision, t0 = pending
        Tensor = torch.Tensor
        mapped_raw = mapped    # (as the loop reads them: lists of tensors not stacked yet)
        if _in_transform() is not None:
            # inside torch.func.vmap / grad of the caller: the loop runs as written, so the
            # transform sees what it sees without autovec (vmap refuses `.item()`, data-dependent
            # `if`s and growing in-place writes in the loop, where a batched form would pass)
            raise GuardFailed("called inside a torch.func transform (vmap, grad): the loop runs as written",
                              data=True)
        if _forward_ad._current_level >= 0 and _any_dual(mapped, sources, free):
            # forward-mode AD: a dual tensor's tangent through ties (a running maximum, a median)
            # or a product follows the batched form's own rules, where the loop's follow each step
            raise GuardFailed("forward-mode AD (dual tensors): the loop runs as written", data=True)
        if _saved_hooks_on() and torch.is_grad_enabled():
            raise GuardFailed("saved-tensor hooks are on (torch.utils.checkpoint without use_reentrant, save_on_cpu): "
                              "the loop runs as written, so that the hooks see the tensors it saves and a "
                              "checkpoint's recomputation saves the same ones", data=True)
        if levels is None:
            last = start + (n - 1) * step
            lo = min(start, last)                  # bounds are checked on the lowest and highest index
            hi = lo + (n - 1) * (step if step > 0 else -step)
        sig = []
        tensors = []
        cpu = True
        numbers = None     # positions of lists of Python numbers indexed by the loop, as tensors
        wraps = self.wraps.get(loop_id, ())
        pads = None        # indexed tensors read past an end by no iteration -> negative rows wrap
        listed = None      # id(list) -> (list, its stack) of lists of tensors indexed by the loop (`xs[t]`)
        for j, (t, d, off, _) in enumerate(mapped):
            if type(t) is not Tensor and not isinstance(t, Tensor):
                if (type(t) is not list and type(t) is not tuple) or levels is not None:
                    raise GuardFailed(f"an indexed value is a {type(t).__name__}, not a tensor")
                if t and isinstance(t[0], Tensor):
                    if listed is None:
                        listed, mapped = {}, list(mapped)
                    got = listed.get(id(t))
                    if got is None:
                        got = listed[id(t)] = (t, _tensor_list(t, torch.is_grad_enabled()))
                    if d != 0 or lo + off < 0 or hi + off >= len(t):
                        raise GuardFailed(_OUTSIDE)
                    t = got[1]
                    mapped[j] = (t,) + tuple(mapped[j][1:])
                    sig.append(("L", t.dtype, t.dim(), t.device.type))
                    if not t.is_cpu:
                        cpu = False
                    tensors.append(t)
                    continue
                pos = next(k for k, e in enumerate(mapped) if e[0] is t)
                if pos in self.number_attrs.get(loop_id, ()):
                    raise GuardFailed(_NUMBER_ATTR)
                t = _number_list(t)
                if numbers is None:
                    numbers, mapped = [], list(mapped)
                numbers.append(pos)
                mapped[pos] = (t,) + tuple(mapped[pos][1:])
                if d != 0 or lo + off < 0 or hi + off >= t.shape[0]:
                    raise GuardFailed(_OUTSIDE)
                sig.append(("N", t.dtype))
                continue
            k = t.dim()
            if levels is None:
                if k <= d:
                    raise GuardFailed(_OUTSIDE)
                size = t.shape[d]
                # (rows before the first, counting up by 1, are Python's negative indices:
                # `x[i - 1]` at i = 0 reads x's last row, as _read_rows reads it; not a unit
                # slice's, `x[:, i - 1:i]`, which is empty there)
                wrap = step == 1 and lo + off >= -size and j < len(wraps) and wraps[j]
                if hi + off >= size or lo + off < 0 and not wrap:
                    # (rows past an end that no iteration reads: `values[t + 1] if t + 1 < T else
                    # last`, each of those iterations' conditions evaluated here)
                    if not self._unread(loop_id, j, size, lo, hi, step, off, start, first, free, wrap):
                        raise GuardFailed(_OUTSIDE)
                    if pads is None:
                        pads = {}
                    pads[j] = wrap
            else:
                for lv, p, o in d:
                    st, sp, kk = levels[lv]
                    if k <= p or st + o < 0 or st + o + (kk - 1) * sp >= t.shape[p]:
                        raise GuardFailed(_OUTSIDE)
            if t.is_cpu:
                sig.append(("T", t.dtype, k, "cpu", t.requires_grad))
            else:
                cpu = False
                sig.append(("T", t.dtype, k, t.device.type, t.requires_grad))
            if t.layout is not _STRIDED:
                raise GuardFailed(_LAYOUT)
            if type(t) is not Tensor:
                _plain_subclass(t)
                sig[-1] += (type(t),)      # (a subclass's type propagates: a signature of its own)
            tensors.append(t)
        n_mapped = len(tensors)   # (the sources' tensors follow)
        grad = torch.is_grad_enabled()
        number_sources = None
        for s in sources:
            if isinstance(s, Tensor):
                tensors.append(s)
                cpu = cpu and s.is_cpu
                if s.layout is not _STRIDED:
                    raise GuardFailed(_LAYOUT)
                if type(s) is not Tensor:
                    _plain_subclass(s)
            elif type(s[0]) in _LIST_DTYPES:
                # Python numbers beside tensors (`zip(temps, x)`): one tensor, as for an indexed list
                j = next(k for k, e in enumerate(sources) if e is s)
                if number_sources is None:
                    number_sources, sources = [], list(sources)
                if levels is None:
                    sig.append(("N", type(s[0])))
                sources[j] = _number_list(s)
                number_sources.append(j)
                continue
            else:
                tensors.extend(s)
                if not _list_elements(s, grad):
                    cpu = False
            if levels is None:
                sig.append(_sig(s))
        free_tensors = []
        direct, direct_peeks = self.direct.get(loop_id, _NO_DIRECT)
        for k, v in enumerate(free):
            if isinstance(v, Tensor):
                if v.layout is not _STRIDED:
                    raise GuardFailed(_LAYOUT)
                free_tensors.append(v)
                if type(v) is not Tensor:
                    _plain_subclass(v)
                    sig.append(_sig(v))
                elif v.is_cpu:
                    sig.append(("T", v.dtype, v.dim(), "cpu", v.requires_grad))
                else:
                    cpu = False
                    sig.append(_sig(v))
            else:
                if k in direct and type(v) not in _PLAIN_SIGS:
                    _inert_value(v)
                    _inert_elements(v)
                entry = _sig(v)
                if type(entry) is tuple and entry[0] in ("list", "tuple") and type(entry[1]) is tuple \
                        and len(set(entry[1])) > 1 and k in _keyed_free(m.plan):
                    _mixed_elements()
                sig.append(entry)
        peeks = self.peeks.get(loop_id)
        if peeks is not None:
            for pos, path in peeks:
                if type(free[pos]) is Tensor:
                    sig.append(("peek", None))      # (through a tensor, `w.T`: its own entry; _peek_sig)
                    continue
                value = _peek(free[pos], path)
                kind = type(value)
                if kind is not Tensor and kind not in _PLAIN_SIGS and ((pos, path) in direct_peeks
                                                                         or isinstance(value, Tensor)):
                    # (`self.it`, `cfg.o` used as they are, `o.ws[j]`'s elements; a tensor subclass
                    # read through an object: as the value itself)
                    _inert_value(value)
                    _inert_elements(value)
                sig.append(("peek", _sig(value)))
        walked = self.walked.get(loop_id) if self.walked else None
        if walked:
            for pos in walked:
                v = free[pos]
                if type(v) not in _REWALKABLE:
                    raise GuardFailed(f"an inner loop walks a {type(v).__name__}, which each outer iteration walks "
                                      "again (a list, tuple, range or tensor is walked alike every time; a "
                                      "generator or an iterator would be used up by the first): the loop runs")
        written = []
        stored = None    # id(tensor) -> (tensor, dim, offset, name) of its first write (_one_output)
        fresh = []       # outputs allocated right before the loop: checked like the others, but alias nothing
        lists = None     # the lists the loop appends to: each a list of its own
        stored_lists = None    # (list, offset) of each `res[i] = v` into a Python list
        grown = None           # the Python lists of ints the loop counts into (`counts[int(l)] += 1`)
        started = None    # tensors a rebinding accumulator starts from (read at its first step)
        for w in writes:
            kind, t = w[0], w[1]
            if type(t) is Tensor and t.is_cpu:
                sig.append(("T", t.dtype, t.dim(), "cpu", t.requires_grad))    # _sig(t), inline
            else:
                if isinstance(t, Tensor) and _keeps_type(t):
                    # a subclass written into: its setitem and in-place operations (its own, or a
                    # dispatch between two subclasses that fails otherwise) run once per row in the loop
                    raise GuardFailed(f"the loop writes into a torch.Tensor subclass ({type(t).__name__}): "
                                      "each of its writes runs as written")
                if isinstance(t, Tensor):
                    _plain_subclass(t)    # (its own `__setitem__` or `add_`, say, runs once per row in the loop)
                sig.append(_sig(t))
            if kind == "store" or kind == "fresh":
                if not isinstance(t, Tensor):
                    if type(t) is list and kind == "store" and levels is None and not w[2]:
                        # `res[i] = v` into a Python list (`res = [None] * n`): its slots, rebound
                        # at the commit to the batch's rows as a list of them would hold them
                        # (fit_store, _list_store); no tensor is written into
                        if lo + w[3] < 0 or hi + w[3] >= len(t):
                            raise GuardFailed("the loop writes outside its list (the loop raises IndexError)")
                        stored_lists = (stored_lists or []) + [(t, w[3])]
                        continue
                    raise GuardFailed(f"the written value is a {type(t).__name__}, not a tensor")
                d, off = w[2], w[3]
                k = t.dim()
                if levels is None:
                    if k <= d or lo + off < 0 or hi + off >= t.shape[d]:
                        raise GuardFailed("the loop writes outside its output tensor")
                else:
                    for lv, o in off:
                        st, sp, kk = levels[lv]
                        if k <= lv or st + o < 0 or st + o + (kk - 1) * sp >= t.shape[lv]:
                            raise GuardFailed("the loop writes outside its output tensor")
                if len(w) == 5:         # (not an in-place prefix's two ends of one region, "span")
                    if stored is None:
                        stored = {}
                    seen = stored.setdefault(id(t), (t, d, off, w[4]))
                    if seen[0] is t and seen[1:] != (d, off, w[4]):
                        _one_output(seen, d, off, w[4], n, step, levels)
                if grad and t.requires_grad and t.is_leaf:
                    raise GuardFailed("the output is a leaf tensor that requires grad (the loop raises)")
                if not t.is_contiguous() and _overlapping(t):
                    raise GuardFailed("the output has rows that share memory (an expanded tensor)")
                (written if kind == "store" else fresh).append(t)
                if not t.is_cpu:
                    cpu = False
            elif kind == "list":
                if type(t) is not list:
                    raise GuardFailed(f"`.append` is called on a {type(t).__name__}, not a list")
                if lists is None:
                    lists = [t]
                else:
                    if any(t is u for u in lists):
                        raise GuardFailed("two lists the loop appends to are one list (its appends interleave, "
                                          "the batches would not)")
                    lists.append(t)
            elif kind == "scatter":
                if type(t) is list and len(w) == 2 and levels is None:
                    # `counts[int(l)] += 1` into a Python list of ints (_list_scatter): no tensor is
                    # written; its elements are checked there
                    grown = [t] if grown is None else grown + [t]
                    continue
                if not isinstance(t, Tensor):
                    raise GuardFailed(f"the written value is a {type(t).__name__}, not a tensor")
                if len(w) == 5:
                    # a part of the loop's own row, which a store of that name writes too
                    # (analysis._row_part): the one place and name both may write
                    if stored is None:
                        stored = {}
                    seen = stored.setdefault(id(t), (t, 0, 0, w[4]))
                    if seen[0] is t and seen[1:] != (0, 0, w[4]):
                        raise GuardFailed(_TWO_NAMES)
                else:
                    stored = _written_once(stored, t)
                if grad and t.requires_grad and t.is_leaf:
                    raise GuardFailed("the output is a leaf tensor that requires grad (the loop raises)")
                if not t.is_contiguous() and _overlapping(t):
                    raise GuardFailed("the output has elements that share memory (an expanded tensor)")
                written.append(t)
                if not t.is_cpu:
                    cpu = False
            elif kind == "seq":
                # fission: the loop that stays writes into it after the batched part read its inputs
                # (into a tensor it holds: `d["res"][i + 1] = ..`, `ll[0][i] = ..`, each a tensor it may
                # write into, which must not be one the batched part read)
                if isinstance(t, Tensor):
                    written.append(t)
                elif t is not None and type(t) not in _PLAIN_ATOMS:
                    written.extend(_reachable_tensors([t]))
            elif kind == "cat":
                if not isinstance(t, Tensor):
                    raise GuardFailed(f"torch.cat onto a {type(t).__name__}")
            elif kind == "best":
                # (None: `if best is None or v > best:` from None, runtime best's none_start; a
                # plain `v > best` against None raises there, and the loop runs and raises)
                if not isinstance(t, _NUMBER_OR_TENSOR) and t is not None:
                    raise GuardFailed(f"the tracked best value is a {type(t).__name__}")
            elif kind == "accum":
                if not isinstance(t, _NUMBER_OR_TENSOR):
                    raise GuardFailed(f"the accumulator is a {type(t).__name__}")
                if isinstance(t, Tensor) and w[2]:
                    stored = _written_once(stored, t)
                    written.append(t)
                    if not t.is_cpu:
                        cpu = False
                elif isinstance(t, Tensor):
                    # (`b = b + v` reads its start at the first step: another accumulator updated
                    # in place that shares its memory changes what that step reads)
                    started = [t] if started is None else started + [t]
        if stored_lists:
            _list_aliasing(stored_lists, mapped_raw, sources, free, calls)
        if lists or grown:
            _appended_aliasing((lists or []) + (grown or []), sources, free, calls)
        if (written or fresh) and not torch.is_inference_mode_enabled() and any(
                t.is_inference() for t in itertools.chain(written, fresh)):
            # torch writes, then raises: the loop leaves one row written, a batch all of them
            raise GuardFailed("an inference tensor written outside inference mode (torch raises after the "
                              "first write: the loop runs, so that the same rows are written)", data=True)
        everything = None
        checked = _INDEX_CHECK_KEY in _ENV and indexcheck.forced() or indexcheck._FORCE
        if not cpu:
            everything = tensors + free_tensors + written + fresh
            devices = {t.device for t in everything if t.dim() > 0 or not t.is_cpu}
            if len(devices) > 1:
                raise GuardFailed(f"tensors on several devices ({', '.join(sorted(map(str, devices)))})")
            if devices:
                device = next(iter(devices))
                checked = checked or indexcheck.needed(device)
                if device.type != self.kind:
                    self.set_kind(device.type)   # (for the next calls' decisions; the api sets it per call)
                for pos in numbers or ():
                    mapped[pos] = (mapped[pos][0].to(device),) + tuple(mapped[pos][1:])
                for j in number_sources or ():
                    sources[j] = sources[j].to(device)
        if calls:
            helped = _helper_reads(calls)
            if helped:
                if _MIXED in helped:
                    _mixed_elements()
                sig.append(("helpers",) + helped)     # (right before the grad mode: lanes.checks)
        # the one-time check runs in the caller's grad mode (an operation that raises only where
        # an input requires grad raises there): grad on and off are signatures of their own
        sig.append(grad)
        if grad and loop_id in self.ahead and any(
                t is not None and t.requires_grad for t in itertools.chain(
                    tensors, free_tensors, written, fresh, _reachable_tensors(calls) if calls else ())):
            # reads of elements later iterations write (Mapped.ahead), under autograd: where an
            # operation saved such an element for backward, the loop's later write into it makes
            # its backward raise, which a batch that reads before it writes would not
            raise GuardFailed("reads of elements later iterations write, with tensors that require grad (the loop's "
                              "backward may raise where a later write changes what an operation saved)")
        default = torch.get_default_dtype()
        if default is not torch.float32:
            # Python floats become the default dtype in some operations (`torch.ones(3) * i`,
            # `x[i] * ws[i]` of ints and a list of floats): another default is a signature of its own
            sig.append(("default", default))
        if _any_autocast():
            # autocast changes which ops run in reduced precision: the batched form's products
            # (mm, bmm, einsum) may be on its list where the loop's (dot, mv) are not, so an
            # autocast state is a signature of its own, with its own one-time check
            if grad and (any(t is not None and t.requires_grad for t in itertools.chain(
                    tensors, free_tensors, _reachable_tensors(calls) if calls else ()))
                    or any(not isinstance(v, Tensor) and _grad_reachable(v) for v in free)):
                # a float32 tensor that requires grad (passed, or read through an object: `self.W`,
                # probeN) is cast to half precision by autocast, once (its cached cast); the loop
                # adds its rows' gradients into that cast's gradient in half precision one row at a
                # time, the batch in one product: gradients apart by percents (probeM). Outputs
                # agree; the loop runs, for its gradients
                raise GuardFailed("autocast with inputs that require grad (the loop sums their gradients in half "
                                  "precision row by row)")
            sig.append(_autocast_state())
        key = (loop_id, tuple(sig))
        sid = self.sig_ids.get(key)
        if sid is None:
            made = self.sig_counts[loop_id] = self.sig_counts.get(loop_id, 0) + 1
            if made > _MAX_SIGNATURES:
                # objects signed by identity (a module, a helper object) made anew for each call:
                # each new one would build its batched body again (milliseconds for a model) and
                # keep its per-signature caches for good
                raise GuardFailed(f"the loop met {_MAX_SIGNATURES} signatures (a model or another object passed in "
                                  "is made anew for each call, and is part of the signature by its identity): "
                                  "the loop runs from now on")
            sid = self.sig_ids[key] = len(self.sig_ids)
        # a body whose batch over every row failed (`cross_entropy` of a label -1 the condition
        # skips): its condition first, then the body on the kept rows alone, as under grad
        reselect = bool(self.reselect) and (loop_id, sid) in self.reselect and (loop_id, sid) not in self.sel_failed
        if self.failures and (loop_id, sid) in self.failures and not reselect:
            raise GuardFailed(f"an earlier call with the same signature failed: {self.failures[(loop_id, sid)]}")
        if listed:
            # (a list the loop also appends to: its reads stay below the length checked here, so
            # they read the elements stacked, and the appends extend the list after them)
            mapped = tuple(mapped)
        if written:
            rest = tensors[n_mapped:]
            if started:
                rest = rest + started
            if listed:
                # (the stacks are copies: an output that is one of the lists' elements, or shares
                # memory with one, would be read as the loop wrote it)
                rest = rest + [e for v in listed.values() for e in v[0]]
            _no_aliasing(written, mapped, rest, free_tensors, free, calls)
        for c in calls:
            hit = _PURE_BY_ID.get(id(c))
            if hit is not None and hit[0] is c and hit[1] is None:
                continue            # why_impure's own first answer (pure), without the call
            bad = why_impure(c)
            if bad:
                raise GuardFailed(bad)
        selected = loop_id in self.checked_more and self._more_checks(
            loop_id, m, levels, grad, tensors, free_tensors, written, fresh, free, calls, mapped, select_ok=True)
        if numbers:
            mapped = tuple(mapped)
        tok = Token(self, loop_id, m, n, start, step, first, mapped, sources, free_tensors, sid, levels, estimate)
        if selected or reselect:
            tok.selecting = True
            tok.reselected = not selected
        if loop_id in self.peeks:
            tok.free = free
        if checked:
            tok.run = tok.checked_run    # an accelerator: indices are read on the host first (indexcheck)
        if numbers:
            tok.raw_numbers = tok.numbers = frozenset(numbers)   # (input positions: _inputs maps them)
        if number_sources:
            tok.number_sources = frozenset(number_sources)
        if pads is not None:
            tok.pads = pads
        if listed:
            tok.stacks = frozenset(_storage(v[1]) for v in listed.values())
        if decision is not None:
            tok.decision, tok.t0 = decision, t0
        return tok

    def _unread(self, loop_id, j, size, lo, hi, step, off, start, first, free, wrap):
        """Whether no iteration whose row of indexed tensor `j` is past an end of its `size`
        rows reads it (before the first where the rows do not `wrap`): each one's conditions
        (Mapped.reach) evaluated with its index, at most _PAD_ROWS of them. Their batch rows
        are then a stand-in (_padded_rows), seen only by the sides of branches they do not take."""
        entry = self.reach.get(loop_id)
        if entry is None or size == 0:
            return False
        tests, index, names = entry
        test = tests[j] if j < len(tests) else None
        if test is None or index is None:
            return False
        s = -step if step < 0 else step
        n = (hi - lo) // s + 1
        past = max(0, -((lo + off - size) // s))    # the first k whose row lo + k * s + off is past the end
        ks = list(range(past, n))
        if not wrap and lo + off < 0:
            ks += range(min(n, -((lo + off) // s)))  # those before the first row
        if len(ks) > _PAD_ROWS:
            return False
        for k in ks:
            i = lo + k * s - start + first          # (the loop index: the range's, or enumerate's)
            if reach.holds(test, lambda name: i if name == index else free[names[name]]) is not False:
                return False
        return True

    def _more_checks(self, loop_id, m, levels, grad, tensors, free_tensors, written, fresh, free, calls, mapped,
                     select_ok=False):
        """The guard's checks beyond types, bounds, aliasing and purity, for the loops that need
        them (checked_more): branches or selected rows under grad, a nest's infinities, matmul
        precision, shared work, callees' gradients. With `select_ok` (the general guard's call),
        True where the call may run with its kept iterations selected first (Token._run_selected)
        instead of the refusal that selected rows under grad get."""
        selected = False
        if grad and self.selects[loop_id]:
            everything = tensors + free_tensors + written + fresh
            if (any(t.requires_grad for t in everything)
                    or any(isinstance(c, torch.nn.Module) and any(p.requires_grad for p in c.parameters())
                           for c in calls)
                    # (a tensor reached through an outside object: `self.w`, a module's parameter)
                    or any(not isinstance(v, torch.Tensor) and _grad_reachable(v) for v in free)
                    or any(_reaches_grad(c, anything=True) if _user_code(c) else _callable_reaches(c, 0, True)
                           for c in calls)):
                # where() computes both sides; a side masked out can still send NaN or inf into
                # the gradient (d/dx sqrt(x) at 0, x / 0), which the loop never computes. A loop
                # whose one condition guards its whole body computes its kept rows alone instead
                if not (select_ok and loop_id in self.selectable):
                    raise GuardFailed("data-dependent branches or selected iterations with tensors that require "
                                      "grad keep the Python loop (unselected iterations of the batched form could "
                                      "give NaN gradients where the loop computes none)")
                selected = True
        if levels is not None and grad:
            _nest_grad_infinities(tensors + free_tensors)
        if grad and loop_id in self.even_ties and (
                any(t.requires_grad for t in tensors + free_tensors)
                or any(not isinstance(v, torch.Tensor) and _grad_reachable(v) for v in free)):
            raise GuardFailed("`median()` of all of a value's elements under autograd: its gradient is "
                              "shared by tied elements, which a batched median along a dimension does not do")
        if m.strategy == "matmul":
            _reduced_products(tensors)
        elif loop_id in self.products:
            # (a product may run in float32 whatever the loop's own tensors are: a cast, `x[i].float()`,
            # a module's parameters, a helper's globals: any reduced float32 setting keeps the loop;
            # off the CPU, half-precision reductions too, as _reduced_products reads them)
            kinds = {"cpu" if t.is_cpu else t.device.type for t in (*tensors, *free_tensors)} or {"cpu"}
            for kind in kinds:
                if _reduced_fp32(kind):
                    raise _precision_refusal(torch.float32)
            if kinds != {"cpu"}:
                _reduced_products(list(tensors) + list(free_tensors))
        if grad and loop_id in self.shared:
            _shared_gradients(*self.shared[loop_id], tuple(free) + tuple(e[0] for e in mapped))
        if grad and calls:
            _callee_gradients(calls)
        return selected

    def failed(self, loop_id, tok, exc):
        if isinstance(exc, NotVectorizable):
            raise exc
        if getattr(exc, "heavy", False):
            # (the estimate with the bytes of an iteration chose the loop: Token._weigh, which
            # settled the decision; not a refusal to count)
            self.ran.pop(loop_id, None)
            self._note(loop_id, "python", str(exc))
            return None
        reason = f"the vectorized path raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        data = isinstance(exc, IndexError) or getattr(exc, "data", False)
        self.ran.pop(loop_id, None)    # a mode that ran before the call fell back did not produce it
        if not isinstance(tok, Token):
            tok = None
        elif _token_grad(tok):
            # (a call with tensors that require grad, refused while its batch ran: kept apart from
            # the bucket's decision, as the guard's refusals of such calls are: FunctionRuntime.guard)
            self._grad_refusal((loop_id, (tok.full_n or tok.n).bit_length()), exc)
        else:                  # (refusals of values count too: the bucket tries again later)
            d = tok.decision if tok.decision is not None else self.decisions.get((loop_id, tok.n.bit_length()))
            if d is not None:
                d.vectorized_failed()
                self.refused_why[loop_id] = f"{type(exc).__name__}: {exc}" if not isinstance(exc, GuardFailed) \
                    else str(exc)
        if tok is not None and loop_id in self.selectable and tok.selected and tok.reselected \
                and isinstance(exc, GuardFailed) and not exc.data:
            self.sel_failed.add((loop_id, tok.sig))     # (kept rows first fail for these types too)
        elif tok is not None and loop_id in self.selectable and not tok.selected and getattr(exc, "sides", False) \
                and self.matches[loop_id].plan.two_way and self._has_select(loop_id):
            # (sides that differ in kind, `v = values[t + 1] if t + 1 < T else 0.0`: a batch of
            # `where` has no one kind for them, each side's body on its own rows may: the next
            # call runs the condition first, then the sides, as under grad)
            self.reselect.add((loop_id, tok.sig))
        if tok is not None and not isinstance(exc, GuardFailed) and loop_id in self.selectable:
            # (an error of the batch itself: with the loop's condition run first, the body may
            # never meet the rows that raised; not again where that fails too, three times: one
            # call's kept rows may raise on their own values, an index out of range where the
            # loop raises too, which says nothing of the next call's)
            if tok.selected:
                key = (loop_id, tok.sig)
                self.sel_errors[key] = self.sel_errors.get(key, 0) + 1
                if self.sel_errors[key] >= _SEL_ERRORS:
                    self.sel_failed.add(key)
            elif self._has_select(loop_id):
                self.reselect.add((loop_id, tok.sig))
        if tok is not None and (loop_id, tok.sig) not in self.succeeded and not data:
            # a type-level failure (vmap refusing the body) is remembered for this signature;
            # a failure that depends on the values (an index out of range) is not
            self.failures[(loop_id, tok.sig)] = reason
        self._note(loop_id, "python", reason)
        if self.strict and isinstance(exc, GuardFailed) and not getattr(exc, "final", False):
            plan = self.matches[loop_id].plan
            raise NotVectorizable(f"{self.qualname}, line {plan.lineno}: {reason}") from exc
        # (strict or not, an error of the batched code, or values where Python raises, go to the
        # loop: it raises the user's own exception, at the user's line, with its partial writes)
        return None

    # ------------------------------------------------------------------ outputs

    # -------------------------------------------------------------- helpers in bodies

    @staticmethod
    def truth(c):
        """`if c:` on one element: a 0-d tensor (or a Python bool) as a mask."""
        if isinstance(c, torch.Tensor):
            if c.dim() != 0:
                raise GuardFailed("a condition on a tensor with several elements (the loop raises)")
            return c if c.dtype == torch.bool else c != 0
        return bool(c)

    @staticmethod
    def counter_range(start, stop, step=1):
        """The iterations of `while i < stop: ...; i += step` from `i = start`: a range, where the
        counter starts as an int (a 0-d tensor, a numpy integer or a bool counts as its own
        type in the loop: a tensor the loop updates in place, a mask when it indexes)."""
        if type(start) is not int:
            raise GuardFailed(f"the while counter starts as a {type(start).__name__}, not an int (the loop keeps "
                              "its type)")
        if type(stop) is not int and not (isinstance(stop, torch.Tensor) and stop.dtype == torch.int64):
            # (a bound of a narrow integer dtype, a tensor or numpy's: the loop compares the counter in
            # that dtype, where an int past its range wraps; probeJ)
            raise GuardFailed(f"the while bound is a {type(stop).__name__} of its own dtype, not an int (the loop "
                              "compares in it)")
        return range(start, stop, step)

    @staticmethod
    def walked_range(seq):
        """The iterations of a nest's level `for p in pos:` counted by index (analysis.nest_levels):
        `range(len(pos))`, where `pos[k]` is the k-th element the loop walks and walking it again
        gives the same elements: those an inner walk admits (_REWALKABLE), a tensor of one
        dimension or more (a generator or iterator is used up by one walk, a dict walks its
        keys, a 0-d tensor raises: the loop decides)."""
        if type(seq) not in _REWALKABLE or type(seq) is torch.Tensor and seq.dim() == 0:
            raise GuardFailed(f"a nest walks the elements of a {type(seq).__name__} (the loop runs as written)")
        return range(len(seq))

    @staticmethod
    def guarded_index(c, i):
        """An index the body reads under condition `c` (ifconvert._GuardIndexes): 0 where `c`
        is off, where the loop never reads it (an ignore label of -100, a padding id)."""
        if isinstance(i, torch.Tensor):
            if i.dtype == torch.bool or i.is_floating_point() or i.is_complex() or not isinstance(c, torch.Tensor):
                return i       # (a mask, or a value the index raises on as it is)
            return torch.where(c.view(c.shape + (1,) * (i.dim() - c.dim())) if i.dim() > c.dim() else c, i, 0)
        return i               # (a Python number: as it is)

    @staticmethod
    def fill_range(row, dim, lo, hi, v, *base):
        """One iteration's `out[i, .., lo:hi] = v` (`dim`: the slice's place in the row), done
        on a copy of the row, which the loop's store then writes back; with `base`, the loop's
        `out[i] = base` first (analysis._merge_fills)."""
        r = row.clone()
        if base:
            r[...] = base[0]
        r[(slice(None),) * dim + (slice(lo, hi),)] = v
        return r

    @staticmethod
    def updated(x, v, op):
        """`x op= v`'s value without writing into `x` (an inner loop's update under a condition,
        merged afterwards: lowering.ifconvert): a tensor keeps its dtype and shape, as the
        in-place update does (a value it cannot take raises, and the loop decides); a number
        becomes what Python's operator gives."""
        r = _AUG_OPS[op](x, v)
        if isinstance(x, torch.Tensor):
            if not isinstance(r, torch.Tensor) or r.shape != x.shape or r.dtype != x.dtype and (
                    not torch.can_cast(r.dtype, x.dtype) or r.is_complex() and not x.is_complex()):
                raise GuardFailed("an in-place update whose value the tensor does not hold (the loop decides)")
            if r.dtype != x.dtype:
                r = r.to(x.dtype)
        return r

    @staticmethod
    def row_fit(row, v, kind):
        """A value an inner loop stores into an outer row's clone (analysis._row_value), where
        setitem takes it as the loop's: a number constant that the row's dtype holds as setitem
        converts it ("const": setitem raises for 300 into int8, for a float NaN into ints);
        an int the loop computes, only into an int64 row ("int": under vmap it is an int64
        tensor, whose store into a narrower row would wrap where the loop's raises)."""
        dtype = row.dtype
        if kind == "int":
            if dtype is not torch.int64:
                raise GuardFailed(f"an int the loop computes stored into a {dtype} row (the loop's setitem checks "
                                  "its range; a batch would wrap)")
            return v
        key = (dtype, type(v), v)
        ok = _ROW_FITS.get(key)
        if ok is None:
            try:
                torch.empty((), dtype=dtype).fill_(v)
                ok = True
            except (RuntimeError, OverflowError, TypeError, ValueError):
                ok = False
            if len(_ROW_FITS) < 4096:
                _ROW_FITS[key] = ok
        if not ok:
            raise GuardFailed(f"the number {v!r} does not fit a {dtype} row (the loop's setitem raises)", data=True)
        return v

    @staticmethod
    def masked_put(t, idx, v):
        """`t[idx] = v` on a tensor the iteration made (analysis.loops._fresh_stores), where a
        boolean mask `idx` over `t`'s leading dimensions and a number (or a 0-d tensor of
        `t`'s dtype and device) `v` make it `t.masked_fill_(mask, v)`: the same write (the same
        conversion of `v`, the same error where it does not fit the dtype), which vmap batches
        (an index by a mask it cannot). True where it wrote; False for any other index or
        value (the caller's store then runs as written: lowering.common._Fills)."""
        if type(idx) is torch.Tensor and idx.dtype is torch.bool and isinstance(t, torch.Tensor) \
                and 1 <= idx.dim() <= t.dim() and idx.shape == t.shape[:idx.dim()] \
                and (type(v) in (int, float, bool) or type(v) is torch.Tensor and v.dim() == 0
                     and v.dtype is t.dtype and v.device == t.device
                     and not (torch.is_grad_enabled() and (_tracked(v) or _tracked(t)))):
            # (a value that carries a gradient: the loop's index_put_ and masked_fill_ differ in
            # what their backward saves, so one may raise where the other does not)
            if idx.dim() < t.dim():
                idx = idx.reshape(idx.shape + (1,) * (t.dim() - idx.dim()))
            t.masked_fill_(idx, v)
            return True
        return False

    @staticmethod
    def item(t):
        """`t.item()` for a whole batch: the values in Python's precision, still a tensor."""
        if not isinstance(t, torch.Tensor):
            return t.item()
        t = t.detach()            # a Python number carries no gradient
        if t.is_floating_point():
            return t.double()
        if t.is_complex():
            return t.to(torch.complex128)
        if t.dtype == torch.uint64 and t.numel() and bool((t > (1 << 63) - 1).any()):
            # a Python int past int64 (the batch's Python ints are int64): the loop's own
            raise GuardFailed("`.item()` of uint64 values past int64 in a batched body", data=True)
        return t if t.dtype == torch.bool else t.long()

    @staticmethod
    def detached(v):
        """A value a side's rows compute but mask out (lowering.common._detached): no gradient
        flows back through it."""
        return v.detach() if isinstance(v, torch.Tensor) else v

    @staticmethod
    def lnot(c):
        return torch.logical_not(c) if isinstance(c, torch.Tensor) else not c

    @staticmethod
    def lor(a, b):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return torch.logical_or(torch.as_tensor(a), torch.as_tensor(b))
        return a or b

    @staticmethod
    def land(a, b):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return torch.logical_and(torch.as_tensor(a), torch.as_tensor(b))
        return a and b

    @staticmethod
    def where(c, a, b, strict=True):
        """The value a name has after `if c: name = a else: name = b`, for all elements at once.
        Strict: both sides must have the same type, dtype and shape, as the loop would
        otherwise give different kinds of values in different iterations."""
        ta, tb = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
        if strict == "loop":
            # a name an inner loop carries (lowering.ifconvert._convert_for): after its first
            # merge a Python int or bool is its batch, an int64 or bool tensor of one element per
            # row, which the next iteration's number meets; a Python float is not merged (its
            # batch would be float32 or float64, which compute differently from Python's floats)
            if not isinstance(c, torch.Tensor):
                return a if c else b
            if ta and tb:
                if a.dtype != b.dtype or a.shape != b.shape:
                    raise _sides_differ("the branches give tensors of different dtypes or shapes")
            elif ta or tb:
                t, v = (a, b) if ta else (b, a)
                if not (t.dim() == 0 and (type(v) is int and t.dtype == torch.int64
                                          or type(v) is bool and t.dtype == torch.bool)):
                    raise _sides_differ("an inner loop's branches give a Python number and a tensor")
            elif type(a) is not type(b) or type(a) not in (int, bool):
                raise _sides_differ("an inner loop's branches give Python numbers other than ints or bools")
            return torch.where(c, a, b)
        if strict:
            if ta != tb or (not ta and type(a) is not type(b)):
                raise _sides_differ("the branches give values of different types")
            if ta and (a.dtype != b.dtype or a.shape != b.shape):
                raise _sides_differ("the branches give tensors of different dtypes or shapes")
        if not isinstance(c, torch.Tensor):
            return a if c else b
        if strict and not ta and c.dim() == 0 and not c.is_meta:
            # Python numbers of one type, one iteration: the loop's own number (`c += 1.0 if p > q
            # else 0.5`), not a float32 or int64 tensor of it; the batch holds such numbers in
            # Python's precision (lowering.batched). Under vmap they would be a tensor, another
            # precision and another kind in later arithmetic (`x64 * 0.1`, `x ** 3`): the loop
            if _in_transform() is not None and _is_batched(c):
                raise GuardFailed("a branch between Python numbers under vmap (they would be tensors of "
                                  "another precision)")
            return a if c else b
        if not strict:
            dtype = _lossless(a, b)
            ta, tb = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
            if ta and a.dtype != dtype:
                a = a.to(dtype)
            if tb and b.dtype != dtype:
                b = b.to(dtype)
            if not ta and not tb:
                a = torch.tensor(a, dtype=dtype, device=c.device)
            # (a Python number beside a tensor of `dtype` enters as itself: that dtype holds it)
        return torch.where(c, a, b)

    # -------------------------------------------------------------- outputs

    @staticmethod
    def fit_store(o, region, dim, mask=None, op="", lead=1, tok=None, py=None, inplace=False, method="",
                  views=False, same=_NO_VALUE, slot="expr", indexed=False):
        """New contents of `region` (the written rows, loop dimension at `dim`; `lead` loop
        dimensions for a nest) after the loop's `out[.., i, ..] = v` (or `op=`) for the
        per-iteration values `o` (n, *V); `py`: (output position, static flag) for tok.py,
        whether the values are Python numbers in the loop (asked only where it matters).
        `inplace` (an unconditional `op=`): (the values laid out as the region and in the dtype
        the loop's update computes in, op), for `update` to apply in place at the commit; where
        they share memory with the region, (the new contents, "=").
        `method`: the store is the loop's in-place method on the row (Output.method), checked
        first (_method_fits). A Python list for `region` (`res[i] = v`): the elements its slots
        get (_list_store; `views`: the loop's values may be views of its inputs). `indexed`: the
        store goes through an index that may be a tensor (`x[i, m] = 0`), whose setitem
        (index_put) takes values of the output's own dtype only."""
        if type(region) is list:
            return _list_store(o, mask, op, inplace, method, dim, lead, tok, py, views, same, slot)
        if tok is not None and tok.approx and isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex()) \
                and not (region.is_floating_point() or region.is_complex()):
            # a float running value's scan rounds as the loop's steps do not; stored into an integer
            # tensor, a value the loop keeps at exactly 1.0 and the scan at 0.9999999999999986 is 1
            # against 0 (probeR)
            raise GuardFailed("the values of a float scan stored into an integer tensor (its rounding would be a "
                              "whole unit there)")
        if method:
            _method_fits(o, region, dim, lead, method)
        if not op and not dim and mask is None and not inplace and type(o) is torch.Tensor \
                and not o.requires_grad and o.dtype == region.dtype and o.shape == region.shape:
            return o    # the rows as they are: what every step below leaves them for this case
        if indexed and o.dtype != region.dtype and type(region) is torch.Tensor and not o.is_complex() \
                and not region.is_complex():
            # one value an iteration through an index tensor: the loop's setitem converts a Python
            # number to the output's dtype (as here, once the range is checked below); a tensor of
            # another dtype it converts or refuses by the index's kind (a mask, a list of
            # indices) and by the value's rank: the loop decides
            if py is None or not (tok.py(*py) if tok is not None else bool(py[1])) or not _fits(o, region.dtype):
                raise GuardFailed(f"{o.dtype} values stored through an index tensor into {region.dtype} elements "
                                  "(setitem converts or raises by the index's kind): the loop decides")
            o = o.to(region.dtype)
        if py is not None and (op or o.requires_grad):
            py = tok.py(*py) if tok is not None else bool(py[1])
        else:
            py = False
        if py and o.requires_grad:
            o = o.detach()        # Python numbers in the loop (`.item()`): no gradient reaches the output
        if o.requires_grad and not (region.is_floating_point() or region.is_complex()):
            # autograd has no integer or bool outputs: the loop's first such store makes a
            # tensor torch then refuses to write into again (it raises): the loop decides
            raise GuardFailed(f"a value that requires grad stored into a {region.dtype} output")
        if dim and tok is not None and tok.unmoved is not None and tok.unmoved_at == dim and mask is None \
                and not op and not py:
            entry = tok.unmoved.get(id(o))
            if entry is not None and entry[0] is o and entry[1].shape == region.shape and not o.is_complex():
                return entry[1]   # o.movedim(0, dim), as the broadcast body computed it
        shape = o.shape
        n = shape[:lead]
        slot = region.shape[:dim] + region.shape[dim + lead:] if dim else region.shape[lead:]
        v = shape[lead:]
        compute = None
        if op:
            if len(v) > len(slot):
                raise GuardFailed(f"`{op}=` of a value of shape {tuple(v)} into `{tuple(slot)}` (the loop's "
                                  "in-place update raises)")
            o, compute = _update_operand(o, region.dtype, len(slot), len(v), op, py)
        if not op and not v and slot and o.requires_grad and o.dtype != region.dtype and not o.is_complex() \
                and not region.is_complex() and (method in ("fill_", "zero_") or not method and o.is_cpu):
            # cast before the broadcast: the loop's setitem of one number (a 0-d tensor on the CPU:
            # torch fills the row with it) and its fill_ sum the row's gradient in the output's
            # dtype, then cast the sum to the value's; cast after it, the batch's backward would sum
            # in the value's dtype (a float16 output of float64 values: other roundings). copy_,
            # and setitem of any other value, cast the gradient first, as the batch does. (The
            # range check below sees the value as it was.)
            if not _fits(o, region.dtype):
                raise GuardFailed(f"values outside {region.dtype}'s range stored into it", data=True)
            o = o.to(region.dtype)
        if v != slot:
            while len(v) > len(slot) and v[0] == 1:  # setitem drops leading 1s
                v = v[1:]
            if len(v) > len(slot):
                raise GuardFailed(f"a value of shape {tuple(o.shape[lead:])} does not fit `{tuple(slot)}`")
            if v == slot:
                o = o.reshape(*n, *slot)   # only leading 1s dropped: one view (unpacked: faster than a Size)
            else:
                o = o.reshape(*n, *([1] * (len(slot) - len(v))), *v).expand(*n, *slot)
        if o.is_complex() and not region.is_complex():
            raise GuardFailed("complex values written into a real tensor")
        if not op and o.dtype != region.dtype and not _fits(o, region.dtype):
            # a Python number the loop stores there raises (setitem checks the conversion); a
            # tensor wraps or saturates: either way the loop decides
            raise GuardFailed(f"values outside {region.dtype}'s range stored into it", data=True)
        o = o.movedim(0, dim) if dim else o
        if inplace and _storage(o) != _storage(region):
            return o, op
        if op:
            o = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div}[op](
                region if region.dtype == compute else region.to(compute), o)
            if o.dtype != region.dtype:
                o = o.to(region.dtype)    # the in-place result, stored in the output's dtype
        if mask is not None:
            if not _any(mask):
                # (no iteration stores: the loop leaves the tensor as it is, its version counter and
                # autograd history too; a write of its own rows would bump the counter, which a
                # backward that saved the tensor refuses, or raise on a view of a leaf; probe X)
                return FunctionRuntime.unchanged
            m = mask.reshape((1,) * dim + n + (1,) * (o.dim() - dim - lead))
            o = torch.where(m, o.to(region.dtype) if not op else o, region)
        return (o, "=") if inplace else o

    @staticmethod
    def update(region, o, op):
        """The commit of an unconditional `out[i] op= v` prepared by fit_store(inplace=True):
        the loop's own in-place operation, once on the region (a view of the output), with
        the values in the dtype one iteration computes in; or, where fit_store gave the new
        contents instead (shared memory), their copy."""
        if op == "=":
            region.copy_(o)
        elif op == "+":
            region.add_(o)
        elif op == "-":
            region.sub_(o)
        elif op == "*":
            region.mul_(o)
        else:
            region.div_(o)

    @staticmethod
    def interleave(batches, pys, consumer):
        """The batches of several appends into one list per iteration, in the list's order (a0,
        b0, a1, b1, ..). They must be values of one kind: Python numbers or tensors, of one dtype
        and shape (the list's elements keep their own dtypes; torch.stack of other shapes raises),
        and for a list kept as a list, all with gradients or none."""
        if len(set(pys)) != 1 or len({b.dtype for b in batches}) != 1:
            raise GuardFailed("appends of values of several kinds or dtypes into one list (the loop decides)")
        if len({b.shape for b in batches}) != 1:
            raise GuardFailed("appends of values of several shapes into one list (the loop decides)", data=True)
        if consumer not in ("stack", "cat", "tensor") and len({b.requires_grad for b in batches}) != 1:
            raise GuardFailed("appends with and without gradients into one list")
        if (not consumer or consumer == "list") and not pys[0]:
            ptrs = [_storage(b) for b in batches]
            if len(set(ptrs)) != len(ptrs):
                # `out.append(y); out.append(y)`: the loop's list holds one tensor twice (a write
                # into one is a write into the other); stacked, they would be two copies
                raise GuardFailed("one tensor appended twice in an iteration to a list kept as a list")
        return torch.stack(batches, 1).flatten(0, 1)

    @staticmethod
    def accum_join(batches, masks, pys):
        """The values of several updates of one running value in an iteration (`c += a`, then `if
        m: c += b`), interleaved in the loop's order (a0, b0, a1, b1, ..), with their masks (None:
        every iteration's): (values, mask or None, whether they are Python numbers). They must be
        of one kind, dtype and shape, so that the running value steps through them as the loop's
        does (its type changes at the first step, whichever update makes it)."""
        if len(set(pys)) != 1:
            raise GuardFailed("updates of one running value by Python numbers and tensors (the loop decides)")
        if len({b.dtype for b in batches}) != 1:
            # Python numbers from tensors of several dtypes are Python floats (or ints) all the
            # same: each batch exactly in float64 (int64), Python's precision
            wide = torch.float64 if all(b.dtype.is_floating_point for b in batches) else torch.int64 \
                if all(not b.dtype.is_floating_point and not b.dtype.is_complex and b.dtype != torch.bool
                       for b in batches) else None
            if not pys[0] or wide is None:
                raise GuardFailed("updates of one running value by values of several kinds or dtypes (the loop decides)")
            batches = [b.to(wide) for b in batches]
        if len({b.shape for b in batches}) != 1:
            raise GuardFailed("updates of one running value by values of several shapes (the loop decides)",
                              data=True)
        values = torch.stack(batches, 1).flatten(0, 1)
        if all(m is None for m in masks):
            return values, None, pys[0]
        n = batches[0].shape[0]
        if any(m is not None and (m.dtype != torch.bool or m.shape != (n,)) for m in masks):
            raise GuardFailed("a condition of an update that is not one bool per iteration")
        ones = torch.ones(n, dtype=torch.bool, device=values.device)
        return values, torch.stack([ones if m is None else m for m in masks], 1).flatten(), pys[0]

    @classmethod
    def records(cls, build, batches, pys, mask, tok, shares):
        """The elements of a list built by appending a literal (`out.append((i, v.item()))`):
        each changing part is a batch, made Python numbers or tensors as a list of it would be
        (consume; `shares`: per part, whether it may be a view of an input), and `build` makes
        one iteration's literal from one element of each."""
        return list(map(build, *[cls.consume("list", b, mask, py, tok, views=v)
                                 for b, py, v in zip(batches, pys, shares)]))

    @staticmethod
    def _kept_once(o, mask, py, tok, views):
        """A kept list's elements once per batch (and mask) a call: the same batch kept in two
        lists, or twice in one appended literal (`(y, y)`), gives the same tensors, as the
        loop's lists hold the same tensors."""
        key = (id(o), id(mask), py, views)
        if tok.lists is None:
            tok.lists = {}
        hit = tok.lists.get(key)
        if hit is not None and hit[0] is o and hit[1] is mask:
            return list(hit[2])
        out = FunctionRuntime._kept(o, mask, py, tok, views)
        tok.lists[key] = (o, mask, out)
        return list(out)

    @staticmethod
    def _kept(o, mask, py, tok, views):
        """The elements of a list the loop keeps, from its batch (and mask). `views`: the loop's
        elements may be views of what it reads (`x[i]`, `row`); kept as a list they see later
        writes into those tensors, so the batch must be a view of them too (its rows then are
        the same views), else the loop runs."""
        if views and not py:
            if tok is None or not tok.shares_input(o):
                raise GuardFailed("a list of views of the loop's inputs (`x[i]`), built from a new batch: "
                                  "later writes into the inputs would not reach its elements (the loop decides)")
            if mask is not None:     # the selected rows as views too
                return [o.select(0, k) for k in _mask_rows(mask, o)]
        elif not py and tok is not None and (tok.shares_input(o) or _of_stacks(tok, o)):
            # the analysis took the elements for new tensors, but the batch is an input's memory:
            # a call that gives back its argument (`torch.as_tensor(x[i])`, a helper's `return a`),
            # whose elements in the loop are the input's rows, not copies of them
            raise GuardFailed("a kept value the batch gives as an input's own memory, where the rewrite expected "
                              "new tensors (the loop decides whether they are views)")
        if mask is not None:
            o = _select(o, mask)
        if py and o.dim() != 1:
            # one Python number per iteration is one element per row: `.item()` of a row with
            # several elements raises in the loop
            if o.dim() == 0 or o[0].numel() != 1:
                raise GuardFailed("`.item()` of a tensor with several elements (the loop raises)", data=True)
            o = o.reshape(o.shape[0])
        return FunctionRuntime._listed(o, py, views)

    @staticmethod
    def consume(kind, o, mask=None, py=False, tok=None, views=False, others=None, flip=False, guarded=False):
        """What the loop's list, built by appends, turns into: the stacked tensor, the list
        itself (_kept, once per batch a call: _kept_once), ... `others`: the body's outputs,
        where the batch may also be handed out another way (see Token.shares_output). `flip`:
        the list is reversed (`lst.reverse()`) before a stack, cat or tensor consumes it: the
        batch's rows (and the mask's) in the other order, a new tensor of the same values."""
        if kind == "list":
            if tok is None:
                return FunctionRuntime._kept(o, mask, py, tok, views)
            return FunctionRuntime._kept_once(o, mask, py, tok, views)
        pieces = None
        if flip:
            if not (kind in ("stack", "cat", "tensor") or "@" in kind):
                raise GuardFailed(f"a reversed list consumed by {kind!r}")
            if kind != "tensor" and o.dim() >= 4 and not o.is_contiguous():
                # (a stack or cat of 4 or more dimensions follows the pieces' layout, _stacked: of
                # a contiguous batch, contiguous, as its flip is; of another, the flipped rows are
                # no longer the ones the rule reads)
                raise GuardFailed("a reversed list of rows laid out otherwise than contiguously, stacked into 4 or "
                                  "more dimensions (the loop decides)")
            if kind == "tensor" or o.requires_grad and not torch.is_grad_enabled():
                o = o.detach()     # (torch.tensor's result has no gradient; nor the loop's stack under no_grad)
            # (new memory: no input's or other output's, and not a value autograd saved, so
            # neither the clone below nor the one for an input's rows)
            o = o.flip(0)
            mask = mask.flip(0) if mask is not None else None
        if kind in ("stack", "cat") or "@" in kind:
            if flip:
                pass
            elif o.requires_grad and not torch.is_grad_enabled():
                # the pieces have gradients (a helper under torch.enable_grad()) but the loop's
                # stack runs with grad off: its result has none
                o = o.detach()
            elif o.requires_grad and mask is None:
                # the loop's stack is a copy; the batch may be a value autograd saved (exp's
                # result, a product's operand): an in-place change of the result, then backward,
                # would raise where the loop's does not
                o = o.clone()
            if (o.dtype is torch.float16 or o.dtype is torch.bfloat16) and _any_autocast() and _autocast_mismatch(o):
                raise GuardFailed(f"torch.{kind.split('@')[0]} of {str(o.dtype)[6:]} pieces under autocast to "
                                  "another half-precision dtype (the loop raises)")
        if mask is not None:
            o = _select(o, mask)
        elif kind in ("stack", "cat") and tok is not None and (
                tok.shares_input(o) or others is not None and tok.shares_output(o, others)):
            pieces = o if tok.shares_input(o) else None   # its rows are the loop's pieces (views)
            o = o.clone()  # torch.stack returns a new tensor; the batch may be an input itself
        if kind == "batch":
            # fission: the values the loop that stays reads row by row (`_av_h0[_av_j]`)
            if py:
                # (they could be a list of them, but the batched body of math on Python numbers
                # costs more than the loop that computes them at these sizes; the cost model's
                # estimate does not see that yet)
                raise GuardFailed("fission: the values computed ahead of the loop are Python numbers "
                                  "(`math.sin(..)`, `.item()`); the loop computes them as written")
            if o.requires_grad and (o.is_floating_point() or o.is_complex()) and not bool(torch.isfinite(o).all()):
                # (a row the loop that stays never connects to its result, a running value reset
                # after it, gets a gradient of 0 in the batch's backward: 0 times the derivative
                # at inf or NaN is NaN, where the loop's row sends nothing; found by the fuzzer)
                raise GuardFailed("fission: values computed ahead of the loop that hold inf or NaN, under autograd",
                                  data=True)
            if tok is not None and _of_stacks(tok, o):
                raise GuardFailed(_STACKED_ELEMENT)
            if views == "flipped" and tok is not None and not tok.shares_input(o):
                # (`c = x[t].view(3)` over `reversed(range(..))`: the batch was computed from a flipped
                # copy, so its rows are no views of x, where the loop's are: an in-place change of `c`
                # after the loop would not reach x; probeV, pre-existing)
                raise GuardFailed("fission: values that are views of the loop's inputs in the loop (`x[t].view(..)`), "
                                  "computed ahead from a copy of them (the loop decides)")
            if tok is not None and not views and tok.shares_input(o):
                o = o.clone()      # (the loop's values are new tensors: the batch's rows must be too)
            return o
        if kind == "stack":
            if o.shape[0] == 0:
                if guarded and not py:
                    return o    # (`torch.stack(out) if out else ..`: no rows, the other side: analysis._list_consumer)
                raise GuardFailed("torch.stack of an empty list (the loop raises)", data=True)
            if py:
                raise GuardFailed("torch.stack of Python numbers (the loop raises)")
            return _stacked(o, pieces, stack=True)
        if kind == "cat":
            if o.dim() < 2 or o.shape[0] == 0 or py:
                raise GuardFailed("torch.cat of 0-d tensors or of an empty list (the loop raises)", data=True)
            return _stacked(o.flatten(0, 1))
        if kind in ("sum", "max", "min", "any", "all"):
            r = _reduce_builtin(kind, o, py)
            if isinstance(r, torch.Tensor) and r._base is not None and not (tok is not None and tok.shares_input(o)):
                r = _owned(r)     # (max() gives a row of the batch: the loop's is a tensor of its own)
            return r
        if "@" in kind:   # torch.stack(lst, dim=d) / torch.cat(lst, dim=d)
            base, d = kind.split("@")
            d = int(d)
            if py or o.shape[0] == 0 or d > o.dim() - (1 if base == "stack" else 2):
                raise GuardFailed(f"torch.{base} along a dimension the pieces do not have (the loop raises)",
                                  data=True)
            if tok is not None and (tok.shares_input(o) or others is not None and tok.shares_output(o, others)):
                o = o.clone()
            return _stacked(o.movedim(0, d) if base == "stack" else o.movedim(0, d).flatten(d, d + 1))
        if py and o.dim() != 1:
            # one Python number per iteration is one element per row: `.item()` of a row with
            # several elements raises in the loop
            if o.dim() == 0 or o[0].numel() != 1:
                raise GuardFailed("`.item()` of a tensor with several elements (the loop raises)", data=True)
            o = o.reshape(o.shape[0])
        if kind == "tensor":
            if o.shape[0] == 0:
                return torch.tensor([])
            if py:
                # torch.tensor of Python numbers: floats at the default dtype (each double rounded
                # as .to rounds it), ints as int64, bools as bool, on the default device; the
                # batch holds them at Python's precision, so one conversion, not a list of n
                if o.is_complex():
                    return torch.tensor(o.tolist())
                want = torch.get_default_dtype() if o.is_floating_point() else \
                    torch.bool if o.dtype == torch.bool else torch.int64     # (every value exact as a double)
                return _plain(o.detach().to(device=_default_device(), dtype=want, copy=True))
            if o.dim() != 1:
                raise GuardFailed("torch.tensor of a list of non-scalar tensors")
            if not o.is_cpu:
                # torch.tensor of a list of one-element tensors on a GPU: their dtype, on the
                # default device (the CPU, unless a `torch.device` context says otherwise)
                return _plain(o.detach().to(device=_default_device(), copy=True))
            if o.is_contiguous() and tok is not None and not tok.shares_input(o) and not (
                    others is not None and tok.shares_output(o, others)):
                return _plain(o.detach())   # a fresh batch nobody else holds: torch.tensor's copy is not needed
            return _plain(o.detach().clone())
        raise GuardFailed(f"no batched form of the consumer {kind!r}")

    @staticmethod
    def _listed(o, py, views):
        """The elements of a kept list from its (selected) batch: Python numbers, or tensors."""
        if py:
            return o.tolist()
        if not views:
            # the loop's elements are tensors of their own (`x[i] * 2`, also a value the same in
            # every iteration but made anew by each): own memory and version counter, no view of
            # a batch, so `detach_()` or an in-place change of one element acts on it alone, and
            # backward through another element still works, as in the loop
            if o.dim() >= 3 and not o[0].is_contiguous():
                # (rows laid out otherwise, `x[t].T * 2`: the loop's own results follow their
                # inputs' layout, as each row's clone does where it is dense; unbind_copy's rows
                # are contiguous)
                return [r.clone() for r in o.unbind(0)]
            return list(_unbind_copy(o))
        if o.requires_grad:
            # separate views, each of which can be modified in place like the loop's tensors
            return [o.select(0, i) for i in range(o.shape[0])]
        return list(o.unbind(0))

    @staticmethod
    def _pysum(o):
        if o.is_floating_point():
            return o.double().sum().item()
        if o.is_complex():
            return o.to(torch.complex128).sum().item()
        if o.dtype == torch.int64 and o.numel():
            lo, hi = torch.aminmax(o)
            if max(-int(lo), int(hi)) * o.numel() >= 1 << 63:
                return sum(o.tolist())    # Python's ints do not wrap: the exact sum
        return int(o.sum())

    @classmethod
    def _product(cls, acc, o, inplace, py):
        if o.dtype == torch.bool or isinstance(acc, torch.Tensor) and acc.dtype == torch.bool:
            raise GuardFailed("a boolean product (the loop decides its type)")
        if py:
            import math
            if o.is_floating_point():
                _products_in_range(o.double(), acc)
                p = float(o.double().prod())
            else:
                vals = o.tolist()
                p = math.prod(vals)
                if isinstance(acc, torch.Tensor):
                    # a tensor times Python ints, step by step in its dtype: the product within
                    # int64, where wrap-around and the multiply take it (floats: exact multiples)
                    if not -2 ** 63 <= p < 2 ** 63:
                        raise GuardFailed("a running product of Python ints past int64 into a tensor (the loop "
                                          "multiplies step by step in its dtype)", data=True)
                if type(acc) is float and (p == 0 or p.bit_length() > 1000):
                    # a float start: the loop multiplies floats step by step, so a zero keeps the
                    # sign of every factor (-0.0 for an odd count of negatives), and a product
                    # past float's range is inf there (inf times a later zero: NaN), where the
                    # exact integer product is 0 or too large to convert: its own steps
                    for v in vals:
                        acc *= v
                    return acc
            return p if (isinstance(acc, torch.Tensor) and inplace) else acc * p
        if inplace and isinstance(acc, torch.Tensor):
            if acc.dtype in _HALF:
                raise GuardFailed(_HALF_SUM)
            if acc.requires_grad and acc.is_leaf and torch.is_grad_enabled():
                raise GuardFailed("in-place update of a leaf that requires grad")
            step = torch.result_type(acc, o[0])
            if not torch.can_cast(step, acc.dtype):
                raise GuardFailed("in-place product would need a dtype cast the loop refuses")
            if o.dtype != step:
                o = o.to(step)        # (int factors of a float product: multiplied as floats, as in the loop)
            _finite_factors(o, acc)
            _products_in_range(o, acc)
            delta = o.prod(0)
            if broadcast_shapes(acc.shape, delta.shape) != acc.shape:
                raise GuardFailed("the multiplied value does not broadcast to the accumulator")
            return delta
        first = acc * o[0]
        if o.shape[0] == 1:
            return first
        want = torch.result_type(first, o[1])
        if want in _HALF:
            raise GuardFailed(_HALF_SUM)
        rest = o[1:] if o.dtype == want else o[1:].to(want)     # (int factors after a float start: floats)
        _finite_factors(rest, first)
        _products_in_range(o, acc, dtype=want)
        out = first * rest.prod(0)
        return out.to(want) if out.dtype != want else out

    @staticmethod
    def sum_terms(acc, first, py, rest, pys, signs):
        """The per-iteration values of `acc = acc + t1 - t2 ...` as one accumulated value, `t1 - t2`
        (analysis._terms_output: `first` the batch of t1, `rest` those of the others, `signs`
        theirs relative to t1, `py`/`pys` whether each is a Python number in the loop). The loop
        adds the terms one at a time, `(acc + t1) - t2`, promoting at every step; their sum is
        the same up to reassociation (the policy of every sum here) only where every step keeps
        one type: tensor terms all of one dtype, not bool (whose `+` is a logical or), with a
        start of that dtype or a Python number of its kind (an int for integer terms: a float
        start would make every step a float sum), or Python numbers all floats (from an int or
        float start) or all ints (within int64 where combined: the loop's ints do not wrap).
        Else the loop runs. Signs "*": the factors of `acc = acc * t1 * t2` (_prod_terms)."""
        if signs and signs[0] == "*":
            return _prod_terms(acc, (first,) + tuple(rest), (py,) + tuple(pys))
        terms, kinds = (first,) + tuple(rest), (py,) + tuple(pys)
        if any(kinds) != all(kinds):
            # (Python numbers beside tensors: cast to the tensors' dtype, as torch casts them at each step)
            terms = _numbers_apart(terms, kinds)
            dt = _tensor_steps(terms, kinds, "sum")
            terms, py = tuple(t.to(dt) if k else t for t, k in zip(terms, kinds)), False
        if py:
            # (the loop's Python numbers: floats exactly as float64, ints and bools as int64)
            if any(t.is_complex() for t in terms) or len({t.is_floating_point() for t in terms}) != 1:
                raise GuardFailed("a sum of Python ints and floats (the loop adds the ints exactly first)")
            floating = first.is_floating_point()
            if type(acc) not in ((int, float) if floating else (int,)):
                raise GuardFailed(f"a sum of Python {'floats' if floating else 'ints'} onto a {type(acc).__name__}")
            terms = tuple(t.double() if floating else t.long() for t in terms)
            if not floating:
                bound = max((int(t.abs().max()) for t in terms if t.numel()), default=0)
                if bound * len(terms) >= 1 << 63:
                    raise GuardFailed("Python ints whose sum passes int64's range (the loop's ints do not wrap)",
                                      data=True)
        dtypes = {t.dtype for t in terms}
        if len(dtypes) != 1:
            raise GuardFailed("a sum of terms of several dtypes (the loop promotes at every step)")
        dt = terms[0].dtype
        if dt == torch.bool or dt in _HALF:
            raise GuardFailed("a sum of boolean or half-precision terms (the loop decides each step's type)")
        floating = dt.is_floating_point or dt.is_complex
        if py:
            pass
        elif type(acc) is torch.Tensor:
            if acc.dtype != dt:
                raise GuardFailed("a sum of terms of another dtype than the accumulator's")
        elif not (type(acc) is int or type(acc) is float and floating):
            raise GuardFailed(f"a sum of {dt} terms onto a {type(acc).__name__}")
        out = None
        for t, sign in zip(_aligned(terms), ("+",) + tuple(signs)):
            # (a term of fewer dimensions than another broadcasts against each row, as in the loop)
            out = t if out is None else out + t if sign == "+" else out - t
        return out

    @classmethod
    def accumulate(cls, acc, o, op, inplace, mask=None, py=False, zeros=False, signed=False):
        """The value `acc` ends with after `acc = acc op v` (or `acc op= v`) over the rows of `o`,
        with the loop's types: the first step decides the dtype, as in the loop. `zeros`: the
        start is a `torch.zeros` made right before the loop, which holds no -0.0 (no read of it:
        on a GPU that read is a synchronisation). `signed`: some sides of a branch subtract, their
        terms negated here (analysis._walk); from a Python bool the loop raises where a tensor's
        subtraction comes first (`True - t`), so the loop runs."""
        if signed and type(acc) not in (int, float, complex) and type(acc) is not torch.Tensor:
            # (a Python bool: the loop raises where a tensor's subtraction comes first, `True - t`;
            # a number of another type, a float subclass, may subtract in its own way)
            raise GuardFailed(f"a running value from a {type(acc).__name__} that one side of a branch subtracts from "
                              "(the loop subtracts it as its own type)")
        if isinstance(acc, torch.Tensor) and acc.dtype in _HALF and op in ("+", "-", "*"):
            raise GuardFailed(_HALF_SUM)     # (also for Python-number steps: 2048 + 1 is 2048 in float16)
        if op == "-" and isinstance(o, torch.Tensor) and o.dtype == torch.bool and (isinstance(acc, torch.Tensor)
                                                                                     or not py):
            # (`c -= m.item()` on a tensor, or `c -= m` of a bool tensor: torch refuses `-` with a
            # bool, and the loop raises at its first such step; Python's `1.0 - True` is fine;
            # fuzz lost/stop44 seed 667443)
            raise GuardFailed("`-=` of bools on a tensor (the loop raises where a step runs)", data=True)
        if py and isinstance(acc, torch.Tensor) and acc.dtype == torch.bool:
            # a bool tensor plus Python bools stays bool in the loop (True + True is True), or its
            # in-place update refuses an int: the loop decides
            raise GuardFailed("a bool tensor accumulating Python numbers (the loop keeps its own types)")
        if mask is not None and py and (op == "+" or op == "-") and o.dim() == 1 and o.shape[0] \
                and o.stride(0) == 0 and o.dtype in _EXACT_COUNTS and mask.dtype == torch.bool \
                and mask.shape == o.shape:
            # `if c: hits += 1`: one integer added on the kept iterations is that integer times
            # their count, exactly (Python ints), without selecting the rows
            k = int(mask.sum())
            if not k:
                return _UNCHANGED
            base = o._base      # (bcast's expanded constant: its one element, without indexing)
            one = base is not None and base.dim() == 0 and base.storage_offset() == o.storage_offset()
            s = int(base.item() if one else o[0].item()) * k
            if isinstance(acc, torch.Tensor) and inplace:
                return s
            return acc + s if op == "+" else acc - s
        if mask is not None:
            if op == "+" and o.numel() >= 4096 and o.stride(0) != 0 and mask.dtype == torch.bool \
                    and mask.dim() == 1 and o.shape[0] == mask.shape[0] and o.dtype != torch.bool:
                # a sum over the kept rows: the others replaced by the sum's identity (-0.0: it
                # leaves every value as it is, -0.0 included), which costs a third of selecting
                if not _any(mask):
                    return _UNCHANGED
                o = torch.where(mask.view(-1, *[1] * (o.dim() - 1)), o, _identity(o.dtype, o.device))
            else:
                o = _select(o, mask)
                if o.shape[0] == 0:
                    return _UNCHANGED
        if py and o.dim() != 1:
            # one Python number per iteration is one element per row (`row.item()` of rows of
            # shape (1,)); `.item()` of a row with several elements raises in the loop
            if o.dim() == 0 or o[0].numel() != 1:
                raise GuardFailed("`.item()` of a tensor with several elements (the loop raises)", data=True)
            o = o.reshape(o.shape[0])
        if op == "*":
            return cls._product(acc, o, inplace, py)
        if op in _LOGICAL:
            return _logical_total(acc, o, op, py, inplace)
        if op == "lse":
            if py or not isinstance(acc, torch.Tensor) or not (o.is_floating_point() or o.is_complex()):
                raise GuardFailed("torch.logaddexp of a non-tensor or of integers (the loop decides)")
            _finite_or_minus_inf(acc, o)
            want = torch.result_type(acc, o[0])       # (a float32 start over float16 rows: float32 steps)
            return torch.logaddexp(acc, torch.logsumexp(o if o.dtype == want else o.to(want), 0))
        if op in ("max", "min"):
            if py or not isinstance(acc, torch.Tensor):
                raise GuardFailed("torch.maximum of a non-tensor (the loop decides)")
            ext = o.amax(0) if op == "max" else o.amin(0)
            out = torch.maximum(torch.as_tensor(acc, device=o.device), ext) if op == "max" else \
                torch.minimum(torch.as_tensor(acc, device=o.device), ext)
            if out.is_floating_point() and bool((out == 0).any()) and _zero_signs_tie(acc, o):
                # (only a zero extreme can be either zero; the search for both signs only then)
                raise GuardFailed("+0.0 and -0.0 in a running extreme (the loop's argument order decides)",
                                  data=True)
            return out
        if py:
            _sums_in_range(o, acc, _narrowest(acc, o))
            s = cls._pysum(o)
            if o.dtype == torch.bool:
                s = int(s)
            elif s == 0 and type(acc) is float and _minus_zero_start(acc) \
                    and o.is_floating_point() and _minus_zero_rest(o, op):
                s = -0.0     # (see _minus_zero_rest)
            if isinstance(acc, torch.Tensor) and inplace:
                return s
            return acc + s if op == "+" else acc - s
        if o.dtype == torch.bool and op != "+" or isinstance(acc, torch.Tensor) and acc.dtype == torch.bool:
            raise GuardFailed("a boolean accumulator (the loop's logical or / errors are kept)")
        if inplace and isinstance(acc, torch.Tensor):
            if acc.dtype in _HALF:
                raise GuardFailed(_HALF_SUM)
            step = torch.result_type(acc, o[0])
            _sums_in_range(o, acc, _narrowest(acc, o, step))
            delta = o.sum(0, dtype=step if step != torch.bool else None)
            if acc.requires_grad and acc.is_leaf and torch.is_grad_enabled():
                raise GuardFailed("in-place update of a leaf that requires grad")
            if broadcast_shapes(acc.shape, delta.shape) != acc.shape:
                raise GuardFailed("the accumulated value does not broadcast to the accumulator")
            if not torch.can_cast(torch.result_type(acc, o[0]), acc.dtype):
                raise GuardFailed("in-place accumulation would need a dtype cast the loop refuses")
            if delta.is_floating_point() and not zeros and _minus_zero_start(acc):
                delta = _signed_zero_sum(delta, o, op)     # (as below: -0.0 kept where the loop keeps it)
            return delta
        if o.dtype in _WIDE_FLOATS and (type(acc) is torch.Tensor and acc.dtype is o.dtype
                                        or type(acc) is float or type(acc) is int):
            # a start of the values' own float dtype, or a Python number (which takes theirs): every
            # step keeps that dtype, so the sum of all the values is added at once (two operations
            # instead of the first step apart, five)
            _sums_in_range(o, acc, _narrowest(acc, o))
            total = o.sum(0)
            if not zeros and _minus_zero_start(acc):
                total = _signed_zero_sum(total, o, op)
            elif op == "+" and type(acc) is not torch.Tensor and acc == 0 and total.dim() == 0 and total.is_cpu:
                # `0.0 + total` is the total itself but for -0.0 (+0.0 + -0.0 is +0.0): a Python
                # number added to a tensor costs a microsecond and more, one read of a CPU tensor
                # a tenth of it (a tensor start adds in a third of that: it stays)
                v = total.item()
                if v != 0 or math.copysign(1.0, v) > 0:
                    return total
            return acc + total if op == "+" else acc - total
        first = acc + o[0] if op == "+" else acc - o[0]
        if o.shape[0] == 1:
            return first
        want = torch.result_type(first, o[1])
        if want in _HALF:
            raise GuardFailed(_HALF_SUM)
        _sums_in_range(o[1:], first, _narrowest(acc, o, want))
        rest = o[1:].sum(0, dtype=want if want != torch.bool else None)  # summed at the loop's precision
        # (`first` holds -0.0 only where `acc` does: a free test for a Python number)
        if rest.is_floating_point() and not zeros and _minus_zero_start(acc):
            rest = _signed_zero_sum(rest, o[1:], op)
        out = first + rest if op == "+" else first - rest
        return out.to(want) if out.dtype != want else out

    @staticmethod
    def commit_accum(acc, prepared, op, inplace):
        if prepared is _UNCHANGED:
            return acc
        if inplace and isinstance(acc, torch.Tensor):
            return {"+": acc.add_, "-": acc.sub_, "*": acc.mul_, "|": acc.bitwise_or_, "&": acc.bitwise_and_}[op](prepared)
        return prepared

    @staticmethod
    def best(best, o, op, py, payloads, tok=None, views=(), none_start=False, mask=None):
        """The loop's `if v op best: best = v (, payload = p)`: the first (strict op) or last
        (`>=`, `<=`) extreme value among the iterations, if it beats the initial best (with
        `none_start`, `if best is None or v > best:` from None: the extreme itself). `views`:
        per value (the best, then each payload), whether it is a view of an input in the loop
        (`best = x[k]`): its batch must be one too (a reversed range's is a copy: the loop runs).
        `mask`: the update is under a condition, which holds where the mask's truth does: the
        extreme among those iterations alone (the loop compares no other value)."""
        if any(views):     # (values that are Python numbers in the loop, the index among them, are no views)
            _views_of_inputs(tok, (o,) + tuple(p for p, _ in payloads),
                             [v and not q for v, q in zip(views, (py,) + tuple(q for _, q in payloads))])
        if tok is not None and tok.stacks and (_of_stacks(tok, o) or any(_of_stacks(tok, p) for p, _ in payloads)):
            raise GuardFailed(_STACKED_ELEMENT)
        if o.dim() != 1:
            raise GuardFailed("comparing tensors with several elements (the loop raises)")
        vals = o.detach()
        if vals.is_complex():
            raise GuardFailed("comparing complex values (the loop raises)")
        if (isinstance(best, float) and best != best) or (
                isinstance(best, torch.Tensor) and best.is_floating_point() and bool(torch.isnan(best).any())):
            raise GuardFailed("NaN among the compared values (the loop's order of comparisons decides)", data=True)
        rows = None
        if mask is not None:
            if mask.dtype != torch.bool:
                mask = mask != 0      # (the loop's truth test: NaN holds)
            if mask.shape != vals.shape[:1]:
                raise GuardFailed("a condition with another shape than the iterations")
            rows = mask.nonzero()[:, 0]
            vals = vals[rows]
        if vals.shape[0] == 0:
            return None
        # the first extreme (argmax / argmin give the first of equals), or the last one (of the
        # reversed values); a NaN is their extreme, which the check below finds
        pick = torch.argmax if op in (">", ">=") else torch.argmin
        if vals.dtype == torch.bool:
            vals = vals.to(torch.uint8)
        j = int(pick(vals)) if op in (">", "<") else vals.shape[0] - 1 - int(pick(vals.flip(0)))
        if vals.is_floating_point() and bool(vals[j] != vals[j]):
            # Python's max/min with NaN depends on the order of the comparisons: keep the loop
            raise GuardFailed("NaN among the compared values (the loop's order of comparisons decides)", data=True)
        if rows is not None:
            j = int(rows[j])      # (the iteration's own row: a view where the loop's value is one)
        cand = o[j]
        if py:
            # the loop compares Python numbers: an int8 value against a start of 300, a float32
            # one against a double, without torch's cast of the start to the values' dtype
            cand = cand.item()
        if not (none_start and best is None):
            beats = {">": cand > best, ">=": cand >= best, "<": cand < best, "<=": cand <= best}[op]
            if not bool(beats):
                return None
        out = [cand]
        for p, ppy in payloads:
            out.append(p[j].item() if ppy else p[j])
        if tok is not None:
            # (a value that is no input's memory was a tensor of its own in the loop: the row is
            # copied, as `last` does, rather than a view that keeps the whole batch alive)
            for k, b in enumerate((o,) + tuple(p for p, _ in payloads)):
                v = out[k]
                if type(v) is torch.Tensor and v._base is not None and not tok.shares_input(b):
                    out[k] = tok.own_copy(v)
        return tuple(out)

    @staticmethod
    def last(o, mask=None, py=False, tok=None, views=False):
        """The value a name bound in the loop has after it: its last (selected) iteration's.
        `views`: the value may be a view of an input in the loop (`y = x[i]`), so its batch must
        be. Where the batch is no input's memory, the loop's value was a tensor of its own: the
        row is copied (a view would be the whole batch's memory, kept alive by it)."""
        if views and not py:
            _views_of_inputs(tok, (o,), (True,))
        elif not py and tok is not None and _of_stacks(tok, o):
            raise GuardFailed(_STACKED_ELEMENT)
        if mask is not None:
            if mask.dtype != torch.bool:
                mask = mask != 0
            if not _any(mask):
                return None
            # the last True: the first of the reversed mask (argmax gives the first maximum)
            v = o[mask.shape[0] - 1 - int(mask.flip(0).to(torch.uint8).argmax())]
        else:
            v = o[-1]
        if py:
            return (v.item(),)
        if tok is not None and type(v) is torch.Tensor and v._base is not None and not tok.shares_input(o):
            v = tok.own_copy(v)
        return (v,)


def _of_stacks(tok, o) -> bool:
    """Whether the batch `o` is the memory of a stack of an indexed list of tensors (a copy): the
    loop's value there is the list's element itself (`xs[t]`, a helper's `return a`)."""
    return bool(tok.stacks) and isinstance(o, torch.Tensor) and _storage(o) in tok.stacks


_STACKED_ELEMENT = ("a value the loop keeps that is an element of an indexed list of tensors (or its memory): "
                    "the batch holds a copy of the list (the loop runs)")


def _views_of_inputs(tok, batches, flags):
    """The batches of values that are views of the loop's inputs in the loop (`x[k]`) must share
    their memory too: a reversed range gathers its rows into a copy, which later writes into the
    input would not reach."""
    for b, want in zip(batches, flags):
        if want and isinstance(b, torch.Tensor) and not tok.shares_input(b):
            raise GuardFailed("a value the loop leaves as a view of its input (`x[k]`) would be a copy "
                              "here (the loop runs)")


_UNCHANGED = object()
_EXACT_COUNTS = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool})
_HALF_NUMBER = "a per-iteration Python number against a"   # (lowering.batched._align's refusal)


def _any(mask: torch.Tensor) -> bool:
    """bool(mask.any()) for a boolean mask; its bytes' maximum costs a tenth of torch's any()."""
    if mask.numel() == 0:
        return False
    return bool(mask.view(torch.uint8).amax())


def _fits(o: torch.Tensor, dtype) -> bool:
    """Whether every value of `o` converts to `dtype` as a Python number stored by setitem does
    without its overflow error: within an integer dtype's range (finite, for floats), within a
    narrower float's largest finite value. Checked only for narrowing conversions."""
    if dtype == torch.bool or o.numel() == 0 or dtype == torch.float16:
        return True          # (float16: setitem gives inf for a large number, as the conversion does)
    if 0 in o.stride():
        # an expanded value (a constant stored everywhere): its distinct elements only
        o = o[tuple(slice(0, 1) if st == 0 else slice(None) for st in o.stride())]
    if dtype.is_floating_point:
        if not o.is_floating_point() or torch.finfo(o.dtype).max <= torch.finfo(dtype).max:
            return True
        big = torch.finfo(dtype).max
        lo, hi = torch.aminmax(o.detach())
        if -big <= lo.item() and hi.item() <= big:
            return True      # (the common case in one operation; NaN and inf fail it: counted below)
        a = o.detach().abs()
        return not bool(((a > big) & torch.isfinite(a)).any())
    if dtype.is_complex:
        if dtype != torch.complex64 or o.dtype in (torch.complex64, torch.float32, torch.float16, torch.bfloat16) \
                or not (o.is_floating_point() or o.is_complex()):
            return True
        # (complex64: a finite part past float32's largest value raises, as for float32)
        parts = torch.view_as_real(o.detach()) if o.is_complex() else o.detach()
        a = parts.abs()
        return not bool(((a > torch.finfo(torch.float32).max) & torch.isfinite(a)).any())
    info = torch.iinfo(dtype)
    if o.is_floating_point():
        lo, hi = (v.item() for v in torch.aminmax(o.detach().double().flatten()))
        # setitem checks the float itself against the bounds (-0.5 into uint8 raises); NaN fails
        # both comparisons; int64's largest value is no double: 2**63 is the first one past it
        top = hi < 2.0 ** 63 if dtype == torch.int64 else hi <= info.max
        return lo >= info.min and top
    if o.dtype == torch.bool:
        return True
    oi = torch.iinfo(o.dtype)
    if oi.min >= info.min and oi.max <= info.max:
        return True
    lo, hi = torch.aminmax(o.flatten())
    return int(lo) >= info.min and int(hi) <= info.max


def _identity(dtype, device):
    """The additive identity of a dtype as a 0-d tensor: -0.0 for floats (x + -0.0 is x for
    every x, where +0.0 turns -0.0 into +0.0), 0 for integers."""
    z = _IDENTITIES.get((dtype, device))
    if z is None:
        z = _IDENTITIES[(dtype, device)] = torch.zeros((), dtype=dtype, device=device).neg()
    return z


_IDENTITIES: dict = {}


def _select(o: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`o[mask]` for a boolean mask over the rows of `o`: the same values, in the same order,
    with the same gradients, by torch's fastest route for the shape. Boolean indexing goes
    through a general nonzero-and-gather that costs 3-7x masked_select (one dimension) or
    index_select (rows) at tens of thousands of rows; a batch of one repeated row (`kept += 1`,
    expanded) needs only the count."""
    if mask.dim() != 1 or o.dim() == 0 or o.shape[0] != mask.shape[0] or mask.dtype != torch.bool:
        return o[mask]
    if o.stride(0) == 0:
        # every row the same (an expanded value): the first `count` rows, as a tensor of its own
        return o[:int(mask.sum())].clone(memory_format=torch.contiguous_format)
    if o.numel() < 4096:
        return o[mask]
    if o.dim() == 1:
        return o.masked_select(mask)
    return o.index_select(0, mask.nonzero().squeeze(1))


_CHUNK_BYTES = 32 << 20   # lists of tensors larger than this run in chunks of about 4 MB


_PY_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}
_EXACT_IN_FLOAT64 = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32)


def _lossless(a, b):
    """A dtype that holds every value of `a` and of `b` exactly (tensors or Python numbers): the
    values a stored branch gives (`if v > c: out[i] = c else: out[i] = x[i]`), which the store
    then converts to the output's dtype as the loop converts each one. torch.where's own
    promotion would round them first (a Python float to a float32 tensor's dtype, an int64
    tensor to float32)."""
    dtypes = []
    for v in (a, b):
        if isinstance(v, torch.Tensor):
            dtypes.append(v.dtype)
        else:
            dt = _PY_DTYPES.get(type(v))
            if dt is None:
                raise GuardFailed(f"a stored branch gives a {type(v).__name__}")
            if dt is torch.int64 and abs(v) >= 2 ** 53 and any(
                    isinstance(w, float) or isinstance(w, torch.Tensor) and w.is_floating_point() for w in (a, b)):
                raise GuardFailed("a stored branch gives an int past float64's exact range")
            dtypes.append(dt)
    x, y = dtypes
    if x == y:
        return x
    for num, t in ((a, b), (b, a)):
        # a Python number the tensor's own dtype holds exactly (1.5, 0.0, -1 in float32): that dtype
        if not isinstance(num, torch.Tensor) and isinstance(t, torch.Tensor) and _holds(t.dtype, num):
            return t.dtype
    out = torch.promote_types(x, y)
    if out.is_floating_point or out.is_complex:
        for v, d in ((a, x), (b, y)):
            if not (d.is_floating_point or d.is_complex):
                # an integer side: exact in float64 if narrow, or a Python int checked above
                if d not in _EXACT_IN_FLOAT64 and isinstance(v, torch.Tensor):
                    raise GuardFailed(f"stored branches of {x} and {y} (no dtype holds both exactly)")
                out = torch.complex128 if out.is_complex else torch.float64
    return out


_HOLDS: dict = {}


def _holds(dtype, num) -> bool:
    """Whether a tensor of `dtype` holds the Python number `num` exactly (as a number of its
    own kind: a float in a floating dtype, an int in any but bool, a bool in bool)."""
    key = (dtype, type(num), num)
    hit = _HOLDS.get(key)
    if hit is None:
        hit = _holds_uncached(dtype, num)
        if len(_HOLDS) < 4096:
            _HOLDS[key] = hit
    return hit


def _holds_uncached(dtype, num) -> bool:
    if type(num) is bool:
        return dtype is torch.bool
    if dtype is torch.bool or dtype.is_complex:
        return False
    if type(num) is float and not dtype.is_floating_point:
        return False
    if type(num) not in (int, float):
        return False
    try:
        back = torch.tensor(num, dtype=dtype).item()
    except (RuntimeError, OverflowError):
        return False
    return back == num or (num != num and back != back)


_REDUCED = (torch.float16, torch.bfloat16)
_PY_DUMMY = {torch.bool: True, torch.int64: 1, torch.float64: 1.0, torch.complex128: 1j}


def _update_operand(o, out_dtype, slot_rank, value_rank, op, py):
    """The batch of values of the loop's `out[i] op= v` in the dtype one iteration computes
    its in-place update in, and that dtype: torch's promotion of the row (of `slot_rank`
    dimensions) with one value (of `value_rank`; a Python number where `py`), true division
    in a floating dtype. Raises where the loop raises: a result its output's dtype cannot
    hold (`ints[i] *= 0.5`); and for a float16 / bfloat16 update by a 0-d CPU value or a
    Python number, which torch's kernels read at float32 for some operations (`*`, `/`) and
    at half precision for others (`+`, `-`): the loop decides."""
    scalar = py or value_rank == 0 and o.device.type == "cpu"
    key = (out_dtype, slot_rank, value_rank if not py else -1, o.dtype, op, scalar, torch.get_default_dtype())
    common = _UPDATE_DTYPES.get(key)
    if common is None:
        common = _update_dtype(out_dtype, slot_rank, value_rank, o.dtype, op, py, scalar)
        if len(_UPDATE_DTYPES) < 4096:
            _UPDATE_DTYPES[key] = common
    if isinstance(common, str):
        raise GuardFailed(common)
    return (o if o.dtype == common else o.to(common)), common


_UPDATE_DTYPES: dict = {}     # (out dtype, ranks, value dtype, op, ...) -> the update's dtype, or why it raises


def _update_dtype(out_dtype, slot_rank, value_rank, value_dtype, op, py, scalar):
    row = torch.empty((1,) * slot_rank, dtype=out_dtype)
    if py:
        common = torch.result_type(row, _PY_DUMMY.get(value_dtype, 1.0))
    else:
        common = torch.result_type(row, torch.empty((1,) * value_rank, dtype=value_dtype))
    if op == "/" and not (common.is_floating_point or common.is_complex):
        common = torch.get_default_dtype()
    if op == "-" and (value_dtype == torch.bool or out_dtype == torch.bool):
        return "`-=` with a bool tensor (the loop raises)"
    if not torch.can_cast(common, out_dtype):
        return f"`{op}=` computes in {common}, which the loop cannot store into its {out_dtype} output (it raises)"
    if common in _REDUCED and scalar:
        return (f"`{op}=` of a scalar into a {common} output (torch's kernels differ in the precision they "
                "read it at)")
    return common


class _Rows:
    """A list of tensors, stacked a chunk of rows at a time."""

    def __init__(self, items, n):
        self.items, self.n = items, n

    def take(self, a, b, out=None):
        if out is not None:
            return torch.stack(list(self.items[a:b]), out=out)
        return torch.stack(list(self.items[a:b]))


def _finite_or_minus_inf(*ts):
    """logaddexp / logsumexp agree with a step-by-step log-sum-exp on finite values and -inf;
    NaN and +inf take the loop."""
    grad = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in ts)
    for t in ts:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and bool((torch.isnan(t) | (t == float("inf"))).any()):
            raise GuardFailed("NaN or +inf in a running log-sum-exp keeps the loop", data=True)
        if grad and isinstance(t, torch.Tensor) and t.is_floating_point() and bool((t == float("-inf")).any()):
            # logaddexp's gradient at -inf (0 or NaN, step by step) differs from logcumsumexp's
            raise GuardFailed("-inf in a running log-sum-exp that requires grad keeps the loop", data=True)


def _zero_signs_tie(*values) -> bool:
    """Whether +0.0 and -0.0 both occur among the compared values: they tie, and which one an
    extreme keeps depends on the order of the comparisons (torch.maximum and minimum keep
    their first argument, Python's max the value it holds, cummax / amax their own order),
    so the sign of a zero extreme, and 1 / m after it, could differ from the loop's."""
    pos = neg = False
    for t in values:
        if isinstance(t, float):
            if t == 0.0:
                if math.copysign(1.0, t) < 0:
                    neg = True
                else:
                    pos = True
        elif isinstance(t, torch.Tensor) and t.is_floating_point():
            zeros = t[t == 0]      # (the zeros alone: two passes over t, where signs of all took seven)
            if zeros.numel():
                sign = torch.signbit(zeros)
                neg = neg or bool(sign.any())
                pos = pos or not bool(sign.all())
    return pos and neg


def _best_prefix(s0, v, op, py):
    """The running values of `m = max(m, v)` / `if v > m: m = v` (op ">", ">=", "<", "<="): the
    extreme of the initial value and the values so far. The loop's value at each step is one of
    those objects; with no NaN (the comparisons' order would decide) the values are those of
    cummax / cummin; where the initial value could survive a step, it must have the values'
    type and dtype (else the loop's result would change type there)."""
    if v.dim() != 1:
        raise GuardFailed("comparing tensors with several elements (the loop raises)")
    if v.dtype == torch.bool or v.is_complex():
        raise GuardFailed("a running extreme of booleans or complex values keeps the loop")
    if (v.is_floating_point() and bool(torch.isnan(v).any())) or (isinstance(s0, float) and s0 != s0) or (
            isinstance(s0, torch.Tensor) and s0.is_floating_point() and bool(torch.isnan(s0).any())):
        raise GuardFailed("NaN among the compared values (the loop's order of comparisons decides)", data=True)
    if _zero_signs_tie(s0, v):
        raise GuardFailed("+0.0 and -0.0 among the compared values (the loop's order of comparisons decides)",
                          data=True)
    if torch.is_grad_enabled() and (v.requires_grad or isinstance(s0, torch.Tensor) and s0.requires_grad):
        raise GuardFailed("a running extreme that requires grad keeps the loop (on ties the loop's own "
                          "comparisons decide which element receives the gradient)")
    up = op.startswith(">")
    if py:
        if isinstance(s0, torch.Tensor) or isinstance(s0, bool):
            raise GuardFailed("a running extreme of Python numbers that starts as a tensor or a bool")
        same_type = isinstance(s0, float) if v.is_floating_point() else isinstance(s0, int)
        # Python's numbers, compared and kept at Python's precision: a float start of 0.1 in
        # float32 would be 0.10000000149, an int start of -1 in uint8 would be 255
        if v.dtype is getattr(torch, "uint64", None) or isinstance(s0, int) and not -2 ** 63 <= s0 < 2 ** 63:
            raise GuardFailed("a running extreme of Python ints beyond int64", data=True)
        v = v.double() if v.is_floating_point() else v.long()
    else:
        if not isinstance(s0, torch.Tensor) or s0.dim() != 0:
            raise GuardFailed("a running extreme of tensors that starts as a Python number or a wider tensor",
                              data=not isinstance(s0, torch.Tensor))
        same_type = s0.dtype == v.dtype and s0.device == v.device and s0.requires_grad == v.requires_grad
    run = torch.cummax(v, 0).values if up else torch.cummin(v, 0).values
    first = v[0]
    beats = {">": first > s0, ">=": first >= s0, "<": first < s0, "<=": first <= s0}[op]
    if not same_type and not bool(beats):
        raise GuardFailed("the initial value survives a step and has another type than the values", data=True)
    if bool(beats):
        return run
    return run.clamp(min=s0) if up else run.clamp(max=s0)


def _payload_prefix(best0, p0, v, p, op, py_v, py_p):
    """What a payload of a running best holds after each step of `if v > best: best, j = v, p`:
    p at the step that last set the best, or p0 while the initial best still stands."""
    run = _best_prefix(best0, v, op, py_v)      # also refuses NaN, gradients and type changes
    prev = torch.cat([torch.as_tensor(best0, dtype=run.dtype, device=run.device).reshape(1), run[:-1]])
    new = {">": v > prev, ">=": v >= prev, "<": v < prev, "<=": v <= prev}[op]
    steps = torch.arange(v.shape[0], device=v.device)
    winner = torch.cummax(torch.where(new, steps, torch.full_like(steps, -1)), 0).values
    kept = winner < 0
    if bool(kept.any()):
        if py_p:
            if isinstance(p0, bool) or not isinstance(p0, (int, float)) or (
                    isinstance(p0, int) != (not p.is_floating_point())):
                raise GuardFailed("the payload's initial value survives a step and has another type", data=True)
        elif not isinstance(p0, torch.Tensor) or p0.dtype != p.dtype or p0.shape != p.shape[1:] or p0.requires_grad:
            raise GuardFailed("the payload's initial value survives a step and has another type", data=True)
        start = torch.as_tensor(p0, dtype=p.dtype, device=p.device).expand(p.shape[1:])
        out = p[winner.clamp(min=0)]
        mask = kept.reshape(-1, *([1] * (p.dim() - 1)))
        return torch.where(mask, start, out)
    return p[winner]


FunctionRuntime.payload_prefix = staticmethod(_payload_prefix)
payload_prefix = _payload_prefix    # the module-level name the displayed rewrite uses


def _finite_factors(factors, other):
    """A product of many factors at once, where gradients flow (backward, or forward-mode dual
    tensors): the loop's gradient of a factor is the product of the others, finite beside a NaN or
    inf factor; prod's and cumprod's derivatives divide by the factor itself, giving NaN. Such a
    call keeps the loop."""
    if not (factors.is_floating_point() or factors.is_complex()):
        return
    flows = torch.is_grad_enabled() and (factors.requires_grad or isinstance(other, torch.Tensor)
                                         and other.requires_grad)
    if not flows and _forward_ad._current_level >= 0:
        flows = any(isinstance(t, torch.Tensor) and _forward_ad.unpack_dual(t).tangent is not None
                    for t in (factors, other))
    if flows and not bool(torch.isfinite(factors).all()):
        raise GuardFailed("a running product with gradients and a NaN or infinite factor (the batched "
                          "product's gradient would be NaN where the loop's is finite)", data=True)


def _prod_terms(acc, terms, kinds):
    """The factors of `acc = acc * t1 * t2 ...` (analysis._sum_chain; `terms` their batches, `kinds`
    whether each is a Python number in the loop) as one factor a step, `t1 * t2`, whose running
    product the loop's `(acc * t1) * t2` is up to reassociation, as every product here. Only where
    every step keeps one type: tensor factors of one dtype (not bool, float16 or bfloat16: those
    round at every step), with Python numbers beside them that torch casts to that dtype at each
    step (ints or floats beside floating factors, ints within range beside integer ones: cast
    here alike), from a start of that dtype or a Python number of its kind; or Python numbers
    alone, all floats or all ints. The factors themselves must keep every partial product in
    range in any order (a combined factor past the range is inf where the loop's steps stay
    finite: _products_in_range over each factor apart); integer factors wrap alike in any order
    (tensors) or must not pass int64 combined (Python ints do not wrap). Else the loop runs."""
    terms = _numbers_apart(terms, kinds)
    if all(kinds):
        if any(t.is_complex() for t in terms) or len({t.is_floating_point() for t in terms}) != 1:
            raise GuardFailed("a product of Python ints and floats (the loop multiplies the ints exactly first)")
        floating = terms[0].is_floating_point()
        if type(acc) not in ((int, float) if floating else (int,)):
            raise GuardFailed(f"a product of Python {'floats' if floating else 'ints'} onto a {type(acc).__name__}")
        terms = tuple(t.double() if floating else t.long() for t in terms)
        if floating:
            _products_in_range(_steps_apart(terms), acc)
        else:
            bound = sum(math.log2(max(int(t.abs().max()), 1)) for t in terms if t.numel())
            if bound >= 62:
                raise GuardFailed("Python ints whose product passes int64's range (the loop's ints do not wrap)",
                                  data=True)
    else:
        dt = _tensor_steps(terms, kinds, "product")
        floating = dt.is_floating_point or dt.is_complex
        if type(acc) is torch.Tensor:
            if acc.dtype != dt:
                raise GuardFailed("a product of factors of another dtype than the accumulator's")
        elif not (type(acc) is int or type(acc) is float and floating):
            raise GuardFailed(f"a product of {dt} factors onto a {type(acc).__name__}")
        if floating:
            for t in terms:
                _finite_factors(t, acc)
            # (the Python numbers as they are: one past dt's range is inf once cast, where the
            # loop may first multiply it by the Python start)
            _products_in_range(_steps_apart(terms), acc, dtype=dt)
        terms = tuple(t.to(dt) if k else t for t, k in zip(terms, kinds))
    out = None
    for t in _aligned(terms):
        out = t if out is None else out * t
    return out


def _numbers_apart(terms, kinds):
    """A chain's batches (_prod_terms, sum_terms) with each Python number's (`kinds`) one element
    a row, without gradient (the batch of `x[t].item()` is a view of x)."""
    if any(k and t.dim() != 1 for t, k in zip(terms, kinds)):
        # (one Python number per iteration is one element per row: `.item()` of rows of shape (1,))
        if any(k and (t.dim() == 0 or t[0].numel() != 1) for t, k in zip(terms, kinds)):
            raise GuardFailed("`.item()` of a tensor with several elements (the loop raises)", data=True)
        terms = tuple(t.reshape(t.shape[0]) if k else t for t, k in zip(terms, kinds))
    return tuple(t.detach() if k else t for t, k in zip(terms, kinds))


def _tensor_steps(terms, kinds, what):
    """The one dtype of a chain's tensor terms (not all Python numbers), where every step keeps
    it: tensors of that dtype alone, not bool or float16 / bfloat16 (which round, or decide their
    type, at every step), and beside them Python numbers torch casts to it at each step (ints and
    floats beside floating tensors, ints within its range beside integer ones; not beside complex
    tensors). Else the loop runs."""
    dtypes = {t.dtype for t, k in zip(terms, kinds) if not k}
    if len(dtypes) != 1:
        raise GuardFailed(f"a {what} of terms of several dtypes (the loop promotes at every step)")
    dt = next(iter(dtypes))
    if dt == torch.bool or dt in _HALF:
        raise GuardFailed(f"a {what} of boolean or half-precision terms (the loop decides each step's type)")
    if any(kinds):
        if any(k and t.dtype == torch.bool for t, k in zip(terms, kinds)):
            # (`t - True` raises in torch, `t + True` does not: the loop decides)
            raise GuardFailed(f"a {what} of Python bools beside tensors (the loop decides)")
        if dt.is_complex or any(k and (t.is_complex() or t.is_floating_point() and not dt.is_floating_point)
                                for t, k in zip(terms, kinds)):
            raise GuardFailed(f"a {what} of Python numbers that change the tensors' dtype (the loop promotes)")
        if not dt.is_floating_point:
            info = torch.iinfo(dt)
            if any(k and t.numel() and (int(t.min()) < info.min or int(t.max()) > info.max)
                   for t, k in zip(terms, kinds)):
                raise GuardFailed(f"Python ints outside {dt}'s range beside {dt} terms (the loop decides)", data=True)
        elif any(k and t.numel() and bool((torch.isfinite(t) & (t.double().abs() > torch.finfo(dt).max)).any())
                 for t, k in zip(terms, kinds)):
            # (cast, the number is inf: where the loop first adds it to a Python start, `-1e300 +
            # 1e300`, it is not)
            raise GuardFailed(f"Python numbers past {dt}'s range beside {dt} terms (the loop decides)", data=True)
    return dt


def _aligned(terms):
    """Per-iteration batches with the iterations first, each row given the leading 1s it needs to
    broadcast against the others' rows as the loop's values do."""
    rank = max(t.dim() for t in terms)
    return [t.reshape(t.shape[:1] + (1,) * (rank - t.dim()) + t.shape[1:]) if t.dim() < rank else t for t in terms]


def _steps_apart(terms):
    """The factors of a chain (_prod_terms), each as steps of its own: (terms x iterations, *row),
    every row broadcast to the rows' shape, so that a product over dimension 0 multiplies every
    factor the loop multiplies into each element."""
    terms = _aligned(terms)
    shape = torch.broadcast_shapes(*(t.shape for t in terms))
    return torch.cat([t.expand(shape) for t in terms], 0)


def _products_in_range(factors, start=None, dim=0, dtype=None):
    """A running product computed in another order than the loop's (prod, cumprod, or the
    first step apart): the same value up to rounding only while no partial product leaves the
    dtype's normal range. The loop's `p * x[i]` over [1e30, 1e30, 0] is inf, then NaN; a product
    of the last two first gives 0. Here every partial product in any order is in range: the
    magnitudes of the finite nonzero factors (and of the start), multiplied only above 1 or only
    below 1, stay within it (zeros, infinities and NaN give the same in any order: the sign of a
    product is that of its factors; `dtype`: the one the loop multiplies in, where the factors
    have another, int factors after a float start). Elsewhere the loop runs this call."""
    dtype = dtype or factors.dtype
    if not (dtype.is_floating_point or dtype.is_complex) or factors.numel() == 0:
        return
    a = _magnitude(factors)
    lg = torch.log2(a)
    lg = torch.where(torch.isfinite(lg), lg, 0.0)        # (log2 of 0 is -inf: zeros count as 1)
    up, down = lg.clamp(min=0).sum(dim), lg.clamp(max=0).sum(dim)
    if start is not None:
        m = _magnitude(start.detach()) if isinstance(start, torch.Tensor) else abs(complex(start))
        m = torch.as_tensor(m, dtype=torch.float64, device=a.device)
        ls = torch.log2(m)
        ls = torch.where(torch.isfinite(ls), ls, 0.0)
        up, down = up + ls.clamp(min=0), down + ls.clamp(max=0)
    fi = torch.finfo(dtype)
    if bool(up.max() > math.log2(fi.max) - 2) or bool(down.min() < math.log2(fi.tiny) + 2):
        raise GuardFailed("a running product whose partial products may overflow or underflow (the loop's "
                          "order of steps decides where it reaches inf or 0)", data=True)


_ROW_FITS: dict = {}      # (dtype, type, number) -> whether setitem takes it (FunctionRuntime.row_fit)


_TWO_NAMES = ("one tensor written by the loop under two names, or by two kinds of writes (the loop's order of "
              "writes and reads decides what each row holds)")


def _one_output(seen, d, off, name, n, step, levels):
    """A tensor the loop stores into again (`seen`: (tensor, dim, offset, name) of its first
    store): under another name (`b = a`, then `a[t] = ..; b[t] = b[t] + 1`: each name is an
    output of its own, its reads and writes batched apart), or by another kind of write, it keeps
    the loop; at other rows of one name, only where they never meet (_rows_apart)."""
    if seen[3] != name:
        raise GuardFailed(_TWO_NAMES)
    _rows_apart(seen[1], seen[2], d, off, n, step, levels)


def _written_once(stored, t):
    """`stored` (_one_output's table) with `t`, a tensor another kind of write updates (a
    scatter, an in-place running total), which no other write may reach."""
    if stored is None:
        stored = {}
    if id(t) in stored and stored[id(t)][0] is t:
        raise GuardFailed(_TWO_NAMES)
    stored[id(t)] = (t, None, None, None)
    return stored


def _rows_apart(d1, off1, d2, off2, n, step, levels):
    """Two stores into one tensor at other offsets (`pe[i] = a; pe[i + 1] = b` over `range(0, n,
    2)`, or two names for one tensor): the batch commits one store's rows, then the other's,
    where the loop interleaves them iteration by iteration. The same only where no row is
    written by both: along one dimension, offsets closer than the loop's step (in a nest, at
    one level). Elsewhere the loop runs."""
    if levels is None:
        if d1 == d2 and (n <= 1 or abs(off1 - off2) < abs(step)):
            return
    else:
        lv1, lv2 = dict(off1), dict(off2)
        apart = [lv for lv in lv1 if lv1[lv] != lv2.get(lv)]
        if lv1.keys() == lv2.keys() and len(apart) == 1 and (
                levels[apart[0]][2] <= 1 or abs(lv1[apart[0]] - lv2[apart[0]]) < abs(levels[apart[0]][1])):
            return
    raise GuardFailed("two stores into one tensor at rows that may meet (the loop's order of writes decides "
                      "which value a row keeps)")


def _largest(d) -> float | None:
    """A floating (or complex) dtype's largest value, cached; None for other dtypes."""
    r = _RANGES.get(d)
    if r is None:
        if not (d.is_floating_point or d.is_complex):
            return None
        r = _RANGES[d] = torch.finfo(d.to_real() if d.is_complex else d).max
    return r


def _narrowest(*values):
    """The floating dtype with the smallest range among `values` (tensors, or dtypes), where the
    loop's steps round to it (a float32 accumulator fed float64 steps, Python floats added to a
    float32 tensor: every step is a float32 value); float64 where none is a floating tensor."""
    best, top = torch.float64, _RANGES[torch.float64]
    for v in values:
        d = v if isinstance(v, torch.dtype) else v.dtype if isinstance(v, torch.Tensor) else None
        if d is None or d is best:
            continue
        r = _largest(d)
        if r is not None and r < top:
            best, top = (d.to_real() if d.is_complex else d), r
    return best


_RANGES = {torch.float64: torch.finfo(torch.float64).max}     # dtype -> its largest value (_narrowest)


def _dense_order(t):
    """`t` with its dimensions in memory order where that makes it contiguous (a batch computed
    from a strided window comes out so): torch's whole-tensor extremes of a permuted layout are
    30 times slower (0.6 s against 19 ms over 368 MB)."""
    if t.is_contiguous() or t.dim() < 2:
        return t
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    p = t.permute(order)
    return p if p.is_contiguous() else t


def _sums_in_range(steps, start=None, dtype=None):
    """A running sum (or a linear recurrence with factors of at most 1 in size) computed in
    another order than the loop's (sum, cumsum after the first step, a parallel scan): the same
    value up to rounding only while no partial sum in either order passes the dtype's largest
    value. The loop's `s + x[i]` over [3e38, 3e38, -3e38] in float32 is inf, then inf; the
    first step added to the sum of the others gives 3e38. Here the start's and the finite steps'
    magnitudes add up to at most half of it (infinities and NaN give the same in any order,
    from the step that holds them). One pass over the steps where they are finite and small
    (their extremes), a sum of their magnitudes elsewhere; beyond it the loop runs this call."""
    dtype = dtype or steps.dtype
    if not (dtype.is_floating_point or dtype.is_complex) or steps.numel() == 0:
        return
    big = _largest(dtype) / 2
    cpu = steps.is_cpu
    s0 = 0.0        # (the start's magnitude; off the CPU a 0-d tensor: one read below)
    if isinstance(start, torch.Tensor):
        if start.numel() == 1 and cpu and start.is_cpu:
            s0 = abs(start.item())       # (on the CPU, reads cost less than operations: 0.3 us)
        elif start.numel() and cpu and start.is_cpu and not start.is_complex():
            lo, hi = torch.aminmax(start.detach())
            s0 = max(-float(lo), float(hi))
        elif start.numel():
            s0 = _magnitude(start.detach()).max()
            s0 = torch.where(torch.isfinite(s0), s0, 0.0)
            s0 = s0.item() if cpu else s0
        if isinstance(s0, float) and not math.isfinite(s0):
            s0 = 0.0
    elif start is not None and math.isfinite(abs(start)):
        s0 = abs(start)
    n = steps.shape[0]
    if not steps.is_complex():
        if cpu and steps.numel() <= 64:
            # (a few values as Python numbers: 0.5 us; NaN or inf among them take the sum below)
            k = steps.dim()
            vals = steps.tolist() if k == 1 else [v for row in steps.tolist() for v in row] if k == 2 \
                else steps.reshape(-1).tolist()
            bound = s0 + n * max(map(abs, vals))
        elif cpu:                        # (1.7 us at a few elements, where the one-read form costs 17)
            lo, hi = torch.aminmax(_dense_order(steps.detach()))
            bound = s0 + n * max(-lo.item(), hi.item())
        else:
            lo, hi = torch.aminmax(steps.detach())
            bound = float(s0 + n * torch.maximum(-lo, hi).double())   # (one read: on a GPU, one wait)
        if math.isfinite(bound) and bound < big:
            return
    a = _magnitude(steps.detach())
    total = torch.where(torch.isfinite(a), a, 0.0).sum(0).max()
    if not float(s0 + total) < big:
        raise GuardFailed(f"running sums whose partial sums may pass {dtype}'s largest value (the loop's order "
                          "of steps decides where it reaches inf)", data=True)


def _tensors_only(body):
    """`body` for vmap: its Python-number outputs as tensors; `kinds` (filled by the run, which
    vmap makes once per call) tells which outputs were Python numbers (Token._same_kinds)."""
    kinds = []

    def run(*a):
        outs = body(*a)
        kinds[:] = [not isinstance(v, torch.Tensor) for v in outs]
        return tuple(v if isinstance(v, torch.Tensor) else _as_tensor(v) for v in outs)
    return run, kinds


def _plain_subclass(t) -> None:
    """A torch.Tensor subclass the batch may stand in for: one whose operations give plain
    tensors, as nn.Parameter's do (torch's disabled __torch_function__), or one with torch's own
    __torch_function__, whose type every operation passes on, in the batch as in the loop
    (vmap drops it: Token._vmap refuses such inputs). A subclass with a __torch_function__ of
    its own may do anything per call: the loop runs. So does one that defines again in Python
    any attribute of torch.Tensor: a method through which the loop reaches its rows and which the
    rewrite reads otherwise (`for r in x` is `__iter__`, a walk of `x.unbind(1)` reads `x[:, k]`),
    an operator or a method the batch calls once where the loop calls it per row."""
    why = active_value(t)     # (purity: a subclass with its own __torch_function__ or a Tensor attribute of its own)
    if why:
        raise GuardFailed(f"the loop reads {why} ({type(t).__name__}): the loop runs, which calls it once per row")




def _keeps_type(t) -> bool:
    """A subclass whose type the loop's operations pass on (not nn.Parameter's kind)."""
    return type(t) is not torch.Tensor and isinstance(t, torch.Tensor) \
        and getattr(type(t), "__torch_function__", None) is not torch._C._disabled_torch_function_impl


def _any_dual(mapped, sources, free) -> bool:
    """Whether a tensor the loop reads is a forward-mode AD dual tensor (one that has a tangent)."""
    for t in itertools.chain((m[0] for m in mapped), sources, free):
        for v in (t if isinstance(t, (list, tuple)) else (t,)):
            if isinstance(v, torch.Tensor) and _forward_ad.unpack_dual(v).tangent is not None:
                return True
    return False


def _is_int(dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex) and dtype is not torch.bool


def _wide_int(dtype) -> bool:
    """An integer dtype with values a half-precision float does not hold exactly (beyond 8 bits)."""
    return _is_int(dtype) and dtype.itemsize > 1


def _half_against_wider(inputs, free_tensors, nest=False):
    """Under vmap a per-iteration 0-d value of another float dtype meeting float16 / bfloat16 rows
    is rounded to half precision first; torch's loop reads a 0-d value at float32 precision (a
    1-ulp difference in products, a flipped comparison): such calls keep the loop (vmap). So do
    a per-iteration 0-d integer of another integer dtype than the rows it meets (vmap casts it to
    their dtype first, where the loop's true division or atan2 reads its own value).
    (`nest`: in a loop nest any indexed tensor may be one element per iteration.)"""
    floats = {t.dtype for t, _ in inputs if t.is_floating_point()} | {t.dtype for t in free_tensors
                                                                     if t.is_floating_point()}
    zero = [t.dtype for t, _ in inputs if (nest or t.dim() == 1) and _is_int(t.dtype)]
    rows = {t.dtype for t, _ in inputs if t.dim() > 1 and _is_int(t.dtype)}
    if any(z != r for z in zero for r in rows):
        raise GuardFailed("a per-iteration integer beside integer rows of another dtype (vmap would cast it to "
                          "theirs first; the loop's true division reads its own value)")
    if floats & set(_HALF) and any(_wide_int(z) for z in zero):
        # (an int beyond 8 bits, `x[i] * t[i]` with int32 t: read at float32 precision in the loop,
        # rounded to half first as a batch; 2049 is 2048 in float16)
        raise GuardFailed("float16 / bfloat16 values beside integers wider than 8 bits (vmap would round an integer "
                          "to half precision first; the loop reads a 0-d one at float32 precision)")
    if len(floats) > 1 and floats & set(_HALF):
        # (a 0-d value can also be computed in the body, `y[i].sum()`: any other float dtype beside
        # a half one counts)
        raise GuardFailed("float16 / bfloat16 values beside another float dtype (vmap would round a 0-d value "
                          "of the other dtype to half precision; the loop reads it at float32 precision)")


def _python_ints_fit(s0, v, op):
    """Running sums or products of Python ints (`s += x[i].item()`) as an int64 scan: the
    loop's ints never wrap. Every running value must stay within int64, bounded by the sum of
    the magnitudes (or, for products, of their logarithms); elsewhere the loop runs."""
    m = v.double().abs()
    start = abs(float(s0))
    if op == "*":
        big = float(torch.log2(m.clamp(min=1)).sum()) + math.log2(max(start, 1.0)) >= 62
    else:
        big = float(m.sum()) + start >= 2.0 ** 62
    if big:
        raise GuardFailed("running Python ints that may pass int64's range (the loop's ints do not wrap)", data=True)


def _prefix(s0, v, op, py, inplace=False, counted=(), py_steps=False):
    """The running values s_i = s0 op v_0 op ... op v_i, with the loop's types (`s += v` on a
    tensor keeps its dtype and shape: every step is cast back, as the in-place op does).
    `counted`: (K,) where the steps are `K * int(bool(c))` for `if c: s += K` from an int start
    (analysis._counted), the loop's running value the start until the first increment."""
    if counted:
        if len(counted) > 1 and isinstance(counted[0], torch.Tensor):
            # (the loop hands the count on, analysis._scans: `k += K` of a tensor K updates one
            # tensor in place, which every reference would see)
            raise GuardFailed("a count by a tensor increment that the loop hands on (each reference would see the "
                              "later updates in place)")
        _counted_types(s0, v, py, counted[0], op)
    if op in _LOGICAL:
        return _logical_prefix(s0, v, op, py, inplace)
    if op == "last":
        return _shifted(s0, v, py or py_steps)
    if inplace and isinstance(s0, torch.Tensor):
        if not torch.can_cast(torch.result_type(s0, v[0]), s0.dtype) or v.dtype == torch.bool:
            raise GuardFailed("the in-place update needs a cast the loop refuses")
        if broadcast_shapes(s0.shape, v.shape[1:]) != s0.shape:
            raise GuardFailed("the in-place update does not broadcast to the accumulator")
        if v.dtype != s0.dtype:
            raise GuardFailed("an in-place running value of another dtype rounds at every step (kept as a loop)")
    if op.startswith("best"):
        return _best_prefix(s0, v, op[4:], py)
    if op not in ("+", "-", "*", "max", "min", "lse"):
        raise GuardFailed(f"no prefix form for `{op}`")
    if py_steps and type(s0) is torch.Tensor and op in ("+", "-", "*") and (v.is_floating_point() or v.is_complex()
                                                                            or not s0.is_floating_point()):
        # (`s = (x[t].item() + 1) + s` onto a float32 tensor: the loop's step promotes a Python float as
        # a number, float32; the batch's steps are a float64 tensor. Ints onto a float tensor promote
        # alike; onto an int32 one they do not; fuzz lost/stop48 seed 853023, pre-existing)
        raise GuardFailed("a tensor running value with steps of Python numbers (the loop promotes each one as a "
                          "number, not as a tensor of its dtype)")
    if op in ("max", "min", "lse") and isinstance(s0, torch.Tensor) and v.dim() >= 1:
        # the loop's values have the shape and dtype of torch.maximum(start, row): a start of
        # other dimensions, or of a wider dtype than the rows (both 0-d: float32 over float16),
        # decides them, where the scan over the rows alone would not
        if broadcast_shapes(s0.shape, v.shape[1:]) != v.shape[1:]:
            raise GuardFailed("a running extreme whose start has dimensions the rows lack (the loop's "
                              "values take the start's shape)")
        want = torch.result_type(s0, v[0])
        if want != v.dtype:
            v = v.to(want)
    if op == "lse":
        if py or not isinstance(s0, torch.Tensor) or not v.is_floating_point():
            raise GuardFailed("torch.logaddexp of a non-tensor or of integers (the loop decides)")
        _finite_or_minus_inf(s0, v)
        return torch.logaddexp(s0, torch.logcumsumexp(v, 0))
    if op in ("max", "min"):
        if py or not isinstance(s0, torch.Tensor) or v.dtype == torch.bool or (
                v.is_floating_point() and bool(torch.isnan(v).any())):
            raise GuardFailed("NaN, booleans or Python numbers in a running extreme keep the loop", data=True)
        if _zero_signs_tie(s0, v):
            raise GuardFailed("+0.0 and -0.0 in a running extreme (the loop's argument order decides)", data=True)
        run = torch.cummax(v, 0).values if op == "max" else torch.cummin(v, 0).values
        return torch.maximum(s0, run) if op == "max" else torch.minimum(s0, run)
    if py:
        v = v.double() if v.is_floating_point() else v.long()
        if isinstance(s0, torch.Tensor):
            raise GuardFailed("a tensor accumulator with Python-number steps")
        if not v.is_floating_point() and not isinstance(s0, float):
            _python_ints_fit(s0, v, op)
    sign = -1 if op == "-" else 1
    if inplace and op == "*" and isinstance(s0, torch.Tensor):
        s0 = s0.clone()   # the product saves its operand for backward; the commit then writes into s0
    first = s0 + v[0] if op == "+" else s0 - v[0] if op == "-" else s0 * v[0]
    if not isinstance(first, torch.Tensor):
        first = torch.as_tensor(first, dtype=v.dtype)
    if v.shape[0] == 1:
        return first.unsqueeze(0)
    want = torch.result_type(first, v[1]) if not py else first.dtype
    if v.dtype == torch.bool:
        raise GuardFailed("a running value of booleans (the loop decides its type)")
    if want in _HALF:
        raise GuardFailed(_HALF_SUM)
    steps = v[1:].to(want) if want != torch.bool else v[1:]   # accumulated at the loop's precision
    if op == "*":
        _finite_factors(steps, first)
        _products_in_range(v, s0, dtype=want)
        rest = first * torch.cumprod(steps, 0)
    else:
        if (first.is_floating_point() or first.is_complex()) and _holds_minus_zero(first) \
                and bool((steps == 0).any()):
            # -0.0 + -0.0 (or -0.0 - 0.0) stays -0.0 in the loop; cumsum's own sums start from +0.0
            raise GuardFailed("a running sum at -0.0 with zero steps (cumsum starts from +0.0)", data=True)
        _sums_in_range(steps, first, want)
        run = torch.cumsum(steps, 0)
        rest = first + run if sign == 1 else first - run     # (a Python number times a tensor costs an operation)
    out = torch.cat([first.unsqueeze(0).expand(1, *rest.shape[1:]), rest], 0)
    out = out.to(want) if out.dtype != want else out
    return _approx(out) if out.is_floating_point() or out.is_complex() else out


FunctionRuntime.prefix = staticmethod(_prefix)


def _shifted(s0, v, py):
    """The values a name assigned once an iteration takes (analysis.loops._shifts): the step's
    own values, read shifted by one step (Token.add_scan's `before`, which also checks a Python
    start against them, and `start`, a tensor start in memory the loop writes). A tensor start
    must have the values' dtype, device and row shape exactly, as the loop's first step reads it
    as it is (`torch.cat([prev, c])`, `prev.shape`), values that are tensors too, and their grad
    flag: the loop's first read is the start itself, the later ones the values."""
    if v.shape[0] == 0:
        raise GuardFailed("an empty loop keeps the loop")
    if type(s0) is torch.Tensor:
        if py or s0.dtype != v.dtype or s0.device != v.device or tuple(s0.shape) != tuple(v.shape[1:]):
            raise GuardFailed("a value the step before assigned that starts as a tensor of another dtype, device or "
                              "shape than its values, or whose values are Python numbers (the loop's first step "
                              "reads the start as it is)")
        if torch.is_grad_enabled() and s0.requires_grad != v.requires_grad:
            # (the loop's first read requires grad and the later ones not, or the reverse: one batch
            # of them would give every read the same; probeV)
            raise GuardFailed("a value the step before assigned whose start requires grad where its values do not, "
                              "or the reverse")
    elif type(s0) not in (int, float, bool):
        raise GuardFailed(f"a value the step before assigned that starts as a {type(s0).__name__}")
    return v


# running logical or / and (analysis.loops.LOGICAL): `|`, `&`, torch.logical_or, torch.logical_and
_LOGICAL = ("|", "&", "lor", "land", "or", "and")


def _logical_steps(s0, v, op, py, inplace):
    """The steps of a running logical or / and as bools, where the loop's values are what the
    batch's `any` / `all` (cummax / cummin) give. `|` and `&` are logical on bools alone (on
    integers they are bitwise, and a bool with an int gives an int): the start is a bool or a
    bool tensor and every step a bool. torch.logical_or / logical_and take tensors of any dtype
    (nonzero, NaN included, is True) and raise on a Python value, which keeps the loop."""
    if op in ("or", "and"):
        # (`seen or flag` returns one of its operands: a bool only where both are Python bools)
        if type(s0) is not bool or not py or v.dtype != torch.bool:
            raise GuardFailed("`or` / `and` of values that are not all Python bools (the loop's `or` returns one of "
                              "its operands, as it is)")
        return v
    if op in ("lor", "land"):
        if type(s0) is not torch.Tensor or py:
            raise GuardFailed("torch.logical_or / logical_and of a value that is not a tensor (the loop raises)")
        return v if v.dtype == torch.bool else v != 0
    if v.dtype != torch.bool or not (type(s0) is bool or type(s0) is torch.Tensor and s0.dtype == torch.bool):
        raise GuardFailed("`|` / `&` of values that are not all bools (on integers they are bitwise: the loop "
                          "keeps its own types)")
    if inplace and type(s0) is torch.Tensor:
        if broadcast_shapes(s0.shape, v.shape[1:]) != s0.shape:
            raise GuardFailed("the in-place update does not broadcast to the accumulator (the loop raises)")
        if s0.requires_grad:
            raise GuardFailed("an in-place logical update of a tensor that requires grad (the loop raises)")
    return v


def _logical_total(acc, o, op, py, inplace):
    """The value `acc` ends with after `acc = acc | v` (`&`, torch.logical_or / logical_and) over
    the rows of `o`: `any` / `all` of the steps, combined with the start as the loop's first step
    combines them (its dtype and shape); in place on a tensor, the steps' `any` / `all` that
    commit_accum ors (ands) into it."""
    if o.shape[0] == 0:
        return _UNCHANGED
    v = _logical_steps(acc, o, op, py, inplace)
    total = v.any(0) if op in ("|", "lor", "or") else v.all(0)
    if inplace and type(acc) is torch.Tensor:
        return total
    if type(acc) is bool and py:
        t = bool(total)
        return (acc or t) if op in ("|", "or") else (acc and t)     # (Python bools: a Python bool)
    if op == "lor":
        return torch.logical_or(acc, total)
    if op == "land":
        return torch.logical_and(acc, total)
    return (acc | total) if op == "|" else (acc & total)


def _logical_prefix(s0, v, op, py, inplace):
    """The running values of a logical or / and: cummax / cummin of the steps as bools (exact),
    combined with the start, whose shape the rows must already have (as torch.maximum's start:
    _prefix)."""
    if v.shape[0] == 0:
        raise GuardFailed("an empty recurrence keeps the loop")
    v = _logical_steps(s0, v, op, py, inplace)
    if type(s0) is torch.Tensor and broadcast_shapes(s0.shape, v.shape[1:]) != v.shape[1:]:
        raise GuardFailed("a running logical value whose start has dimensions the rows lack (the loop's values "
                          "take the start's shape)")
    run = torch.cummax(v, 0).values if op in ("|", "lor", "or") else torch.cummin(v, 0).values
    if op == "lor":
        return torch.logical_or(s0, run)
    if op == "land":
        return torch.logical_and(s0, run)
    return (run | s0) if op in ("|", "or") else (run & s0)


def _counted_types(s0, v, py, inc, op):
    """`if c: s += K` from an int start `s0` (`inc`: K): the loop's `s` stays `s0`, a Python int,
    until the first increment, then has the type of `s0 + K` (a float, a tensor of K's dtype and
    shape). The batch holds one type for every step, which is the loop's where K is a Python int
    or bool (`s` is an int throughout) or where the first iteration increments. A step of 0 is
    K * 0, so the first step is K itself where it is nonzero and finite (an infinite or NaN K
    also makes K * 0 NaN where the loop adds nothing). Other kinds of K (numpy numbers, tensor
    subclasses, complex) and `s -= K` of a bool tensor (an error in the loop, where the steps
    are K * 1 in int64) keep the loop. A float start (`s = 0.0`) is a float throughout where K
    is a Python float. `inc` None: K is each iteration's own (`if c: s += x[t].item()`), taken
    where the steps are Python numbers of the start's type (an int start with floats: where the
    first iteration increments), and finite."""
    if inc is None:
        # (an increment of each iteration's own, analysis._counted: the steps' kind tells its type)
        if not py or v.is_complex():
            # (tensors: an int start becomes one at the first increment, and the products lose
            # what the loop's own arithmetic would do with each value, a bool's `-=` raising)
            raise GuardFailed("a count by increments that are tensors or complex numbers under a condition (the "
                              "loop decides their types)")
        if py and not v.is_floating_point() and type(s0) is int:
            return        # (ints onto an int: an int throughout, and no NaN)
        if py and v.is_floating_point() and type(s0) is float:
            if not bool(torch.isfinite(v).all()):
                raise GuardFailed("a count by increments that are not finite (K * 0 is NaN where the loop adds "
                                  "nothing)", data=True)
            return        # (floats onto a float: a float throughout)
        if py and type(s0) is float:
            raise GuardFailed("a float count by int increments (the batch's steps are ints)")
        inc = v
    elif type(inc) in (int, bool) and type(s0) is int:
        return
    elif type(s0) is float and not (type(inc) is float and py):
        raise GuardFailed("a float count by an increment of another type (its first increment decides the type)")
    elif type(s0) is float:
        if not bool(torch.isfinite(v).all()):
            raise GuardFailed("a count by an increment that is not finite (K * 0 is NaN where the loop adds "
                              "nothing)", data=True)
        return
    if not (type(inc) is float or type(inc) is torch.Tensor and not inc.is_complex()):
        raise GuardFailed(f"a count by an increment of type {type(inc).__name__} (the loop decides its type)")
    if op == "-" and isinstance(inc, torch.Tensor) and inc.dtype == torch.bool:
        raise GuardFailed("a count decreased by a bool tensor (an error in the loop)")
    if v.shape[0] == 0 or not bool(torch.isfinite(v).all()) or not bool((v[0] != 0).any()):
        raise GuardFailed("a count by a non-int increment whose first iteration may not increment it (the loop's "
                          "count keeps its int start until then) or whose increment is not finite", data=True)


def _py_running(start, *numbers) -> bool:
    """Whether a running value is a Python number in the loop: its start is one (not a tensor)
    and so is every step's value (`numbers`: the one-time check's answer per value)."""
    return not isinstance(start, torch.Tensor) and all(numbers)


FunctionRuntime.py_running = staticmethod(_py_running)
FunctionRuntime.SEQUENCES = frozenset({list, tuple})     # (the generated code's walk of Python numbers: begin)
FunctionRuntime.NUMBERS = frozenset(_LIST_DTYPES)


_ONES = (1,) * 64


def _covered(tok):
    """The body's batched inputs as the tensors themselves, in the body's order, when the loop
    covers each one's loop dimension from row 0 in steps of 1 (no view needed): the indexed
    tensors, and the tensors a loop over elements walks (`for row in x`, zip, enumerate); else
    None (views, lists, unequal lengths: the general path)."""
    c = tok.covered
    if c is not None and c[0] == tok.n:
        return list(c[1])       # (its lane answered, at this trip count: lanes.build)
    n, start = tok.n, tok.start
    if tok.step != 1:
        return None
    sources = tok.sources
    if not sources:
        args = []
        for t, d, off, _ in tok.raw:
            if start + off != 0 or t.shape[d] != n:
                return None
            args.append(t)
        return args
    for s in sources:
        if type(s) is not torch.Tensor or s.shape[0] != n:
            return None
    picks = tok.rt.src_picks.get(tok.loop_id)
    if picks is None:
        return None
    it = iter(tok.raw)
    args = []
    for j in picks:
        if j is not None:
            args.append(sources[j])
            continue
        t, d, off, _ = next(it)
        if start + off != 0 or t.shape[d] != n:
            return None
        args.append(t)
    return args


def _read_rows(t, d, rows):
    """t's rows `rows` (a slice) along dimension d, the batch of the loop's reads `t[i + off]`:
    t itself where they are all of it. A negative start is Python's indexing from the end (the
    guard lets it through only for a loop counting up by 1, from no further back than t's
    length): `x[i - 1]` at i = 0 is x's last row, so those rows come first, in order."""
    if rows.start < 0:
        size = t.shape[d]
        if rows.stop <= 0:
            return t.narrow(d, size + rows.start, rows.stop - rows.start)
        return torch.cat([t.narrow(d, size + rows.start, -rows.start), t.narrow(d, 0, rows.stop)], d)
    if rows.start != 0 or rows.stop != t.shape[d] or rows.step != 1:
        return t[(slice(None),) * d + (rows,)]
    return t


def _padded_rows(t, d, rows, wrap):
    """_read_rows where some rows are past t's ends and no iteration reads them (the guard's
    _unread): those are stand-ins, copies of the nearest row (real values of t's own: they keep
    to what its values allow), for the sides of branches the iterations do not take; negative
    rows Python's from the end where they `wrap`."""
    size = t.shape[d]
    idx = torch.arange(rows.start, rows.stop, rows.step, device=t.device)
    if wrap:
        idx = torch.where(idx < 0, idx + size, idx)
    return t.index_select(d, idx.clamp_(0, size - 1))


def _device_of(first, free_tensors):
    """The device of a batch: its first batched input's (`first`, or None), else its first
    loop-invariant tensor's, else None (torch's default)."""
    if first is not None:
        return first.device
    return free_tensors[0].device if free_tensors else None


def align(tensors, dims):
    """What the broadcast form's display calls: each tensor with its loop dimension (`dims`)
    first and size-1 dimensions after it, so that one iteration's dimensions line up on the
    right across the tensors (the batched body then broadcasts as one iteration does)."""
    moved = [t.movedim(d, 0) if d else t for t, d in zip(tensors, dims)]
    r = max(t.dim() for t in moved) - 1
    return [t.reshape(t.shape[0], *(1,) * (r - t.dim() + 1), *t.shape[1:]) for t in moved]


def _index_arange(tok, args):
    """The loop index as a number, one per iteration (Token._index), on the inputs' device."""
    tok._index_exact()
    i = torch.arange(tok.first, tok.first + tok.n, device=_device_of(args[0] if args else None, tok.free_tensors))
    i._av_arange = True      # (every iteration's index, in order: batching.window_at may read it from its ends)
    return i


def _hot_broadcast(rank, index, tok, body, direct):
    """Token._broadcast's steady state where every slice is already in place (loop dimension 0
    of every input, as wide as the widest): the body on the tensors themselves (and the index
    as an arange where the body uses it as a number)."""
    args = _covered(tok)
    if args is None:
        return None     # views, lists, other lengths: the general path
    if index:
        args.append(_index_arange(tok, args).view(tok.n, *_ONES[:rank - 1]))
    if _large(args):
        body = tok._in_place_body(body)     # elementwise temporaries reused in place (Token._broadcast)
    outs = body(*args)
    n = tok.n
    for o in outs:
        if type(o) is not torch.Tensor or o.dim() != rank or o.shape[0] != n:
            return None
    return outs


def _hot_broadcast_moved(r, ones, pos, dims, tok, body, direct):
    """_hot_broadcast where the inputs need views first (Token._broadcast's recipe `r`, `ones`,
    `pos`; `dims`: each input's loop dimension)."""
    args = _covered(tok)
    if args is None:
        return None
    n = tok.n
    args = _into_layout(zip(args, dims), ones, r, pos, n)
    if _large(args):
        body = tok._in_place_body(body)
    return _out_of_layout(tok, body(*args), r, pos, n)


def _into_layout(inputs, ones, r, pos, n):
    """Token._broadcast's layout of its inputs ((tensor, loop dimension) pairs): the loop
    dimension of every slice at `pos` of an iteration's rank `r` + 1, `ones` size-1 dimensions
    added after it where a slice has fewer (a 1-d input: one value per iteration)."""
    args = []
    for (t, d), k in zip(inputs, ones):
        if not k and d == pos:
            args.append(t)                    # already in place: no view at all
        elif t.dim() == 1:
            args.append(t.view(*_ONES[:pos], n, *_ONES[:r - pos]))   # one value per iteration
        else:
            if d:
                t = t.movedim(d, 0)
            if k:
                t = t.reshape(n, *_ONES[:k], *t.shape[1:])
            args.append(t.movedim(0, pos) if pos else t)
    return args


def _out_of_layout(tok, outs, r, pos, n):
    """The broadcast body's outputs with the loop dimension first again, or None where one does
    not keep it. A store at the same dimension takes an output as computed (fit_store, through
    tok.unmoved), not moved twice."""
    for o in outs:
        if not isinstance(o, torch.Tensor) or o.dim() != r + 1 or o.shape[pos] != n:
            return None
    if not pos:
        return outs
    moved = tuple(o.movedim(pos, 0) for o in outs)
    tok.unmoved = {id(m): (m, o) for m, o in zip(moved, outs)}   # (holding m: its id stays its own)
    tok.unmoved_at = pos
    return moved


def _hot_nest(layout, code, tok, body, direct):
    """The steady state of a loop nest over whole dimensions (each level's range covers its
    dimension from 0 in steps of 1): batched products (`code` None; `layout`: the permutation
    per input, Token._direct) or a batched body (`layout`: Token._nest_layout's recipe)."""
    levels = tok.levels
    args = []
    covered = tok.covered is not None and tok.covered[0] == -1     # (its lane answered: lanes.build)
    for (t, spec, _, _), how in zip(tok.raw, layout):
        if not covered:
            for lv, p, off in spec:
                st, sp, k = levels[lv]
                if sp != 1 or st + off != 0 or t.shape[p] != k:
                    return None
        if code is None:
            if how is not None:
                t = t.permute(*how)
        else:
            perm, missing = how
            if perm is not None:
                t = t.permute(*perm)
            for lv in missing:
                t = t.unsqueeze(lv)
        args.append(t)
    sizes = [k for _, _, k in levels]
    try:
        if code is None:
            outs = direct(*args, sizes)
        else:
            if code.big is not None and _large(args):
                code = code.big
            outs = code.bind(body)(*args, sizes)
    except Exception:
        return None    # the general path runs it again and decides, with its bookkeeping
    lead = len(sizes)
    sizes = torch.Size(sizes)
    for o in outs:
        if not isinstance(o, torch.Tensor) or o.shape[:lead] != sizes:
            return None
    if code is None:
        tok.fresh = True      # (batched matrix products: new memory, no input's)
    return outs


def _hot_batched(code, dims, probes, index, tok, body, direct):
    """Token._batched's steady state for a loop whose batched body is written, or Token._direct's
    (batched matrix products) where `code` is None; `probes`: the trailing check-only masks (the
    one-time check has read them: the lean variant returns None there and skips computing them)."""
    args = _covered(tok)
    if args is None:
        return None
    if dims is not None:
        args = [t.movedim(d, 0) if d else t for t, d in zip(args, dims)]
    if index:
        args.append(_index_arange(tok, args))
    real = None                             # how many leading outputs are values (None: all)
    if code is None:
        fn = direct
    else:
        if probes and code.lean is not None and code.probes == probes:
            code, real = code.lean, -probes
        if code.big is not None and _large(args):
            code = code.big                 # elementwise temporaries reused in place (Token._batched)
    n = tok.n
    try:
        if code is not None:
            fn = code.bind(body)
        outs = fn(*args, [n])
    except Exception:
        return None    # a changed helper, or an error: the general path decides, with its bookkeeping
    for o in outs[:real]:
        if not isinstance(o, torch.Tensor) or o.dim() < 1 or o.shape[0] != n:
            return None
    return outs


def in_place_body(rt, loop_id, body, owned=()):
    """Token._in_place_body of a loop's main body (also for lanes.express)."""
    key = (loop_id, owned)
    code = rt.in_place.get(key, False)
    if code is False:
        code = None
        entry = rt.batchable.get((loop_id, ""))
        if entry is not None:
            from .batching import BatchedBody, _compile, temporaries_in_place
            fdef = temporaries_in_place(entry[0], owned)
            if fdef is not None:
                code = BatchedBody(_compile(fdef, body), body.__code__)
        rt.in_place[key] = code
    return body if code is None else code.bind(body)


class _Expressed:
    """The token of a call the express answered (lanes.express): its commit has nothing to time."""

    __slots__ = ()

    def done(self):
        pass


FunctionRuntime.expressed = _Expressed()
# a loop's iteration space not evaluated yet (lowering.common: the express evaluates it, and the
# general path again only where the express did not)
FunctionRuntime.unset = object()
# a conditional store's new rows where no iteration stores (fit_store): the commit writes nothing
FunctionRuntime.unchanged = object()


def _large(args):
    """Whether a batch is large enough to reuse its elementwise temporaries in place."""
    for a in args:
        if type(a) is torch.Tensor and a.numel() >= _INPLACE_FLOOR:
            return True
    return False


# a batch's rows as separate tensors, one call (each row's own storage and version counter)
_unbind_copy = getattr(torch, "unbind_copy", None) or (lambda o: [r.clone() for r in o.unbind(0)])
_HALF_EXACT = {torch.float16: 2048, torch.bfloat16: 256}   # the largest integer each holds with all below it
_INT64_ONLY = frozenset({torch.int64, torch.bool})


_SHIFT_CALLS = frozenset({"roll", "rot90"})    # (their int arguments move elements: no arithmetic with them)
_INDEX_USES: dict = {}     # id(plan) -> (plan, (arithmetic, other))


def _index_uses(plan) -> tuple:
    """How a loop's body lets its index (or a name computed from it alone, `j = i + 1`) meet
    other values: (arithmetic, other). Arithmetic: `+ - * // % ** << >> & | ^` (or add, sub, ..)
    with another value; other: any use but indexing (`x[i]`), int arithmetic of index values and
    constants alone (`i + 1`), true division (`x[i] / (i + 1)`: in floats, as the loop), and the
    shift of torch.roll / rot90 (a comparison, `x[i] > i`, another call's argument). Against an
    integer tensor narrower than int64 torch casts the loop's Python int to the tensor's dtype
    and computes there: a comparison or a call sees the int wrapped once it passes the dtype's
    range, and arithmetic wraps its results within the range too (`int8_row - 21`), where the
    batch's int64 arange promotes the tensor (probeB, probeC). _index_fits decides."""
    hit = _INDEX_USES.get(id(plan))
    if hit is not None and hit[0] is plan:
        return hit[1]
    names = {plan.space.index} if plan.space.index else set()
    names |= set(plan.value_indices or ())
    trees = [ast.parse(text) for text in plan.body]
    changed = True
    while changed:      # (names bound from the index's values alone: `j = i + 1`)
        changed = False
        for tree in trees:
            for n in fastast.walk(tree):
                if isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets) \
                        and _index_only_expr(n.value, names):
                    new = {t.id for t in n.targets} - names
                    if new:
                        names |= new
                        changed = True
    raw = ({plan.space.index} if plan.space.index else set()) | set(plan.value_indices or ())
    arith = other = False
    for tree in trees:
        parents = {id(c): p for p in fastast.walk(tree) for c in ast.iter_child_nodes(p)}
        for n in fastast.walk(tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names:
                use = _index_use(n, parents, names, raw)
                arith, other = arith or use == "arith", other or use == "other"
    # (a narrow integer the body makes itself, `x[i].char().ge(i)`: the tensors' dtypes the
    # guard sees are the arguments'; probeE)
    made = other and bool(_NARROW_MADE.search("\n".join(plan.body)))
    _INDEX_USES[id(plan)] = (plan, (arith, other, made))
    return arith, other, made


_NARROW_MADE = __import__("re").compile(r"\.(char|byte|short|int)\(|int8|uint8|int16|int32|uint16|uint32")


def _index_only_expr(e, names) -> bool:
    """An int expression of the index's values and constants alone (`i + 1`, `-j`, `i // 2`)."""
    if isinstance(e, ast.Name):
        return e.id in names
    if isinstance(e, ast.Constant):
        return type(e.value) is int
    if isinstance(e, ast.BinOp) and not isinstance(e.op, (ast.Div, ast.MatMult)):
        return _index_only_expr(e.left, names) and _index_only_expr(e.right, names)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        return _index_only_expr(e.operand, names)
    return False


_COMPARE_NAMES = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "greater_equal", "less_equal",
                            "not_equal"})


def _index_use(n, parents, names, raw) -> str:
    """"ok", "arith" or "other" (_index_uses) for one read of an index value. "other" only for
    a raw loop index (`raw`: not a name computed from it, whose values may pass the dtype's
    range where the index does not) as an operand of a comparison, `x[i] > i`, `x[i].eq(i)`,
    `torch.ge(x[i], i)`: its range is checked. Any use not followed here (a tuple, a call, a
    name bound another way) counts as arithmetic (probeE)."""
    node, derived = n, n.id not in raw
    while True:
        p = parents.get(id(node))
        if p is None:
            return "arith"
        if isinstance(p, ast.Subscript) and node is not p.value:
            return "ok"         # (an index: `x[i]`, `x[i + 1, j]`, a slice's bound)
        if isinstance(p, (ast.Slice, ast.Tuple)) and isinstance(parents.get(id(p)), (ast.Subscript, ast.Slice, ast.Tuple)):
            node = p
            continue
        if isinstance(p, (ast.BinOp, ast.UnaryOp)) and _index_only_expr(p, names):
            node, derived = p, True     # (int arithmetic of index values alone: its result's use decides)
            continue
        if isinstance(p, ast.Assign) and node is p.value and all(isinstance(t, ast.Name) for t in p.targets) \
                and _index_only_expr(node, names):
            return "ok"         # (a name of index values: its own uses are checked)
        if isinstance(p, (ast.BinOp, ast.AugAssign)):
            return "ok" if isinstance(p.op, ast.Div) else "arith"
        if isinstance(p, ast.Compare):
            return "arith" if derived else "other"
        if isinstance(p, ast.keyword):
            call = parents.get(id(p))
            if isinstance(call, ast.Call) and _call_name(call) in _SHIFT_CALLS and p.arg in ("shifts", "k"):
                return "ok"
            return "arith"
        if isinstance(p, ast.Call) and node in p.args:
            name = _call_name(p)
            if name in _SHIFT_CALLS and (node is not p.args[0] or isinstance(p.func, ast.Attribute) and not (
                    isinstance(p.func.value, ast.Name) and p.func.value.id == "torch")):
                return "ok"     # (torch.roll(x[i], i), x[i].roll(i): the shift, not the rolled tensor)
            return "other" if name in _COMPARE_NAMES and not derived else "arith"
        return "arith"


def _call_name(call):
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)


def _fits_int(dt, a, b) -> bool:
    info = torch.iinfo(dt)
    return info.min <= min(a, b) and max(a, b) <= info.max


_INDEXED_STORES: dict = {}     # id(plan) -> (plan, whether its body stores by a computed index)


def _stores_by_index(plan) -> bool:
    """Whether a loop's body stores into a tensor by an index it computes (`r[y[i]] = v`,
    `r[idx] = v`, `r[i, y[i]] += 1`): anything but constants, slices of constants and `...`.
    Such an index may be a tensor with repeated entries, where the loop's store, one row at a
    time, keeps the last write to each; vmap's store of the whole batch is one index_put_ that
    the CPU splits between threads, which may keep another (probe of stop 50: 12 of 20 calls
    differed at 255 rows of 2,000 indices). Under vmap those run with torch's deterministic
    algorithms (_deterministic)."""
    hit = _INDEXED_STORES.get(id(plan))
    if hit is None or hit[0] is not plan:
        found = False
        for text in plan.body:
            for n in fastast.walk(ast.parse(text)):
                if isinstance(n, ast.Call) and _call_name(n) in _INDEX_WRITERS:
                    found = True    # (`r.index_put_((y[i],), v)`, `torch.index_put(..)`, scatter_, put_: probeE)
                    break
                targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) \
                    else []
                for t in targets:
                    for sub in fastast.walk(t):
                        if isinstance(sub, ast.Subscript) and any(
                                not isinstance(e, (ast.Constant, ast.Slice, ast.UnaryOp, ast.Tuple, ast.Load,
                                                   ast.USub, ast.operator, ast.unaryop))
                                for e in fastast.walk(sub.slice)):
                            found = True
            if found:
                break
        hit = _INDEXED_STORES[id(plan)] = (plan, found)
    return hit[1]


_INDEX_WRITERS = frozenset({"index_put_", "index_put", "put_", "put", "index_copy_", "index_copy", "scatter_",
                            "scatter", "masked_scatter_", "masked_scatter", "index_add_", "index_add",
                            "scatter_add_", "scatter_add", "scatter_reduce_", "scatter_reduce", "index_reduce_",
                            "index_reduce"})


class _deterministic:
    """torch's deterministic algorithms on while the batch runs, as they were after it:
    index_put_ then sorts its indices and keeps the last write to each, the loop's order
    (_stores_by_index). An operation with no deterministic form only warns, and that warning,
    which the loop would not give, is dropped."""
    __slots__ = ("was", "warn", "caught")

    def __enter__(self):
        self.was = torch.are_deterministic_algorithms_enabled()
        self.warn = torch.is_deterministic_algorithms_warn_only_enabled()
        self.caught = None
        if not self.was:
            import warnings
            self.caught = warnings.catch_warnings()
            self.caught.__enter__()
            warnings.filterwarnings("ignore", message=".*does not have a deterministic implementation.*")
            torch.use_deterministic_algorithms(True, warn_only=True)

    def __exit__(self, *exc):
        if not self.was:
            torch.use_deterministic_algorithms(False, warn_only=self.warn)
            self.caught.__exit__(*exc)
        return False


def _index_fits(tensors, a, b, uses=(True, True, False)):
    """A loop index used as a number, from `a` to `b`, as the batch's int64 arange: the loop's
    Python int meets each tensor as a number of the tensor's own kind, so the batch gives the
    loop's values only where every index fits the tensors' dtypes:
    - float16 / bfloat16: torch computes a half tensor against a Python int in float32 (the int
      is never rounded to half), where the arange, cast to half with the values, is exact only up
      to 2048 (float16) and 256 (bfloat16);
    - integers narrower than int64 (int8, uint8, int16, int32, ..): torch casts the Python int to
      the tensor's dtype and computes there, wrapping (`int8_row > 200` compares with -56,
      `int8_row - 21` wraps; probeB, probeC), where the arange promotes the tensor to int64. By
      the body's `uses` of the index (_index_uses): arithmetic with other values beside such a
      tensor keeps the loop in range or not; a comparison or another call, past the dtype's range.
    Otherwise the loop runs (this call). A body that converts values to such a dtype itself
    (`.char()`, `.to(torch.int8)`) and uses the index beside it keeps the loop (`uses[2]`)."""
    if uses[2]:
        raise GuardFailed("the loop index meets other values in a body that makes narrow integers itself "
                          "(`.char()`, `torch.int8`, ..: torch would compute with the loop's Python int in them)")
    top = max(abs(a), abs(b))
    for t in tensors:
        dt = getattr(t, "dtype", None)
        if dt is None or dt in _INT64_ONLY or dt.is_complex:
            continue
        k = _HALF_EXACT.get(dt)
        if k is not None:
            if top > k:
                raise GuardFailed(f"the loop index, used as a number, passes {k} against {dt} values (torch "
                                  "computes a Python int against them in float32; a batch of indices would be "
                                  "rounded to their precision first)", data=True)
        elif not dt.is_floating_point and (uses[0] or uses[1] and not _fits_int(dt, a, b)):
            raise GuardFailed(f"the loop index meets other values beside {dt} values ({'in arithmetic' if uses[0] else 'past the dtype range'}: "
                              "torch casts a Python int to the tensor's dtype and computes in it, wrapping; a batch "
                              "of indices would promote the values to int64)", data=not uses[0])
_RELEASE_FLOOR = 1 << 18     # bytes: smaller fresh outputs are kept (a stand-in costs microseconds)


def _unreleased(t, tok):
    """The loop's own fresh output again in place of its stand-in (Token.release)."""
    if not isinstance(tok, Token) or tok.released is None:
        return t
    entry = tok.released.pop(id(t), None)
    if entry is None or entry[0] is not t:
        return t
    _, device, fill = entry
    return _remade(t, device, fill)


def _remade(t, device, fill):
    """A fresh output made again from its stand-in's metadata, with its fill."""
    with torch.no_grad():
        real = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
        if fill == "0":
            real.zero_()
        elif fill == "1":
            real.fill_(1)
    return real.requires_grad_() if t.requires_grad else real


FunctionRuntime.unreleased = staticmethod(_unreleased)

_CPU = torch.device("cpu")


def _slot(region, dim, lead):
    """The shape of one iteration's element of the written `region` (its loop dimensions, `lead`
    of them from `dim`, left out)."""
    return region.shape[:dim] + region.shape[dim + lead:] if dim else region.shape[lead:]


def _exact(o, region, dim, lead=1, py=False):
    """A store whose value the iteration reads back (analysis._forwarded, Output.exact): the reads
    took the stored value as it is, which is what the row holds only where that value already
    has the output's dtype and the row's shape (setitem casts and broadcasts; an update in place
    raises rather than change the dtype); else the loop decides."""
    if py or not isinstance(o, torch.Tensor) or not isinstance(region, torch.Tensor) or o.dtype != region.dtype:
        raise GuardFailed("a row read back after its store, from a value of another dtype than the output's or "
                          "a Python number (the store converts it: the loop decides)")
    if o.requires_grad or region.requires_grad:
        # the loop reads the row, a view of the output: an operation that keeps it for backward
        # (`out[i] / out[i].norm()`, `out[i] * w`) finds it changed by the next store into the
        # output, this iteration's or a later one's, and the loop's backward raises
        # (and where only the output requires grad, the loop's read carries the output's history:
        # what it computes requires grad too, the value read by name would not)
        raise GuardFailed("a row read back after its store under gradients (the loop's backward may find the "
                          "row changed by a later store, and raise)")
    if o.shape[lead:] != _slot(region, dim, lead):
        raise GuardFailed("a row read back after its store, from a value of another shape than the row's (the "
                          "store broadcasts it: the loop decides)")


FunctionRuntime.exact = staticmethod(_exact)


def _method_fits(o, region, dim, lead, method):
    """Where the loop's in-place method on each row (`x[i].clamp_(min=0)`, read as the store
    `x[i] = x[i].clamp(min=0)`: analysis._InPlaceUpdates) would not do what the store does with
    the per-iteration values `o` (n, *V), GuardFailed (the loop decides). An elementwise method
    writes its result into the row only where it has the row's dtype (torch's in-place casting
    rules raise on `int_row.clamp_(min=0.5)`, which the store would cast; other casts are left
    to the loop) and the row's shape (a larger result raises, where setitem drops leading 1s);
    under gradients its backward may need the rows it overwrites (`x[i].exp_()`: the loop's
    next row changes the tensor saved, and its backward raises). `copy_` broadcasts and casts
    as setitem does, but drops no leading 1s; `fill_` takes one number."""
    slot = _slot(region, dim, lead)
    v = o.shape[lead:]
    if method in ("fill_", "zero_"):
        if v:
            raise GuardFailed(f"`.fill_()` of a value of shape {tuple(v)} (the loop raises: it takes one number)")
        if region.dtype == torch.float16 and not o.is_complex() and o.numel():
            # fill_ checks the number's conversion (a finite one past 65504 raises), where the
            # store's setitem into float16 gives inf (_fits)
            a = o.detach().abs().double()
            if bool(((a > torch.finfo(torch.float16).max) & torch.isfinite(a)).any()):
                raise GuardFailed("`.fill_()` of a number past float16's range (the loop raises)", data=True)
    elif method == "copy_":
        if len(v) > len(slot):
            raise GuardFailed(f"`.copy_()` of a value of shape {tuple(v)} into `{tuple(slot)}` (the loop raises)")
    else:
        if o.requires_grad or region.requires_grad:
            # (a value without gradients in an output that requires grad: the method on the row
            # keeps the output's history, and its backward may need the rows it overwrites)
            raise GuardFailed(f"`.{method}()` on rows under gradients (the loop's backward may need the rows "
                              "it overwrites)")
        if o.dtype != region.dtype:
            raise GuardFailed(f"`.{method}()` gives {o.dtype} on {region.dtype} rows (the loop casts or raises)")
        if v != slot:
            raise GuardFailed(f"`.{method}()` gives a value of shape {tuple(v)} on rows of `{tuple(slot)}` "
                              "(the loop raises)")


def _list_store(o, mask, op, inplace, method, dim, lead, tok, py, views, same=_NO_VALUE, slot="expr"):
    """The elements `res[i] = v` puts into the slots of a Python list, in ascending order of the
    rows: each iteration's value as a list the loop kept would hold it (consume's "list": tensors
    of their own, the input's views where the loop's are views, or Python numbers), which the
    commit assigns to the rows' slice of the list (the guard checked the slots exist). `same`: the
    value is a name the loop does not bind (`res[i] = w`): that one object in every slot. `slot`
    (lowering.common._list_slots): "expr" gives each store objects of its own (`a[i] = x[i]; b[i] =
    x[i]`: two views in the loop), "name" one object per value; "fwd" (a row the iteration wrote,
    whose own memory the loop's slot holds) and "live" (a name read after the loop: the loop's
    last slot is that object) keep the loop."""
    if mask is not None or op or inplace or method or dim or lead != 1:
        raise GuardFailed("a conditional, augmented or partial store into a Python list (the loop runs)")
    if same is not _NO_VALUE:
        return [same] * o.shape[0]
    if slot == "fwd" or slot == "live":
        raise GuardFailed("a list slot that takes a row the iteration wrote, or a name read after the loop "
                          "(the loop's slot is that very tensor): the loop runs")
    if slot == "branch":
        raise GuardFailed("a store into a Python list's slots in a loop that branches on the data (each slot keeps "
                          "its value's own type, which the branches' merged batch does not): the loop runs")
    p = tok.py(*py) if py is not None and tok is not None else bool(py and py[1])
    if slot == "expr":
        return FunctionRuntime._kept(o, None, p, tok, views)
    return FunctionRuntime.consume("list", o, None, p, tok, views)


def _dropped(o, shape, lead):
    """The batch `o` (the loop's `lead` dimensions, then each iteration's value) reshaped to the
    output's `shape` where each value has the shape of the output's element but for leading 1s,
    which setitem drops (fit_store's reshape); None where it is not that."""
    v = o.shape
    if len(v) == len(shape) + 1 and v[lead] == 1:
        # (one leading 1, the common case: `out[i] = x[i] @ w + b` with b of shape (1,); compared
        # size by size: a Size's slices and sums cost as much as the squeeze)
        for j, k in enumerate(shape):
            if v[j if j < lead else j + 1] != k:
                return None
        return o.squeeze(lead)
    v, slot = v[lead:], shape[lead:]
    if o.shape[:lead] != shape[:lead] or len(v) <= len(slot):
        return None
    while len(v) > len(slot) and v[0] == 1:
        v = v[1:]
    return o.reshape(*shape) if v == slot else None     # (unpacked: faster than a Size; lead >= 1)


def _let_go(t, fill):
    """Token.release before there is a token: a stand-in for the large fresh output `t` (a plain
    CPU tensor that is no view) while the express runs, so that the allocation the batch will
    replace is not held meanwhile (the batch's own temporaries would land on fresh pages).
    The express takes the stand-in as the output (its token's `released`); where it does not
    answer, taken_back makes the loop's tensor again, from the metadata and fill. A stand-in is
    a meta tensor with the fill as its attribute `_av_fill` (which no other tensor has)."""
    if type(t) is not torch.Tensor or t.layout is not torch.strided or t.numel() * t.element_size() < _RELEASE_FLOOR \
            or not t.is_cpu or t._is_view() or not t.is_contiguous():
        return t
    standin = torch.empty_like(t, device="meta", requires_grad=t.requires_grad)   # (contiguous: its strides)
    standin._av_fill = fill
    return standin


def _taken_back(t):
    """The fresh output the express did not answer for, again (_let_go)."""
    fill = getattr(t, "_av_fill", None) if type(t) is torch.Tensor and t.is_meta else None
    if fill is None:
        return t
    return _remade(t, _CPU, fill)


FunctionRuntime.let_go = staticmethod(_let_go)
FunctionRuntime.taken_back = staticmethod(_taken_back)


def _replaces(out, region, value, tok, others=None):
    """Whether `value` may stand for the fresh tensor `out` instead of being copied into it: it
    covers every element, has out's dtype, device and shape, owns its memory, and is no input
    (nor another value the call hands out: `others`, see Token.shares_output)."""
    shape = out.shape
    if tok.released is not None and id(out) in tok.released:
        device = tok.released[id(out)][1]       # a stand-in: the output's own device
        same_device = value.device == device
    else:
        same_device = value.is_cpu and out.is_cpu or value.device == out.device
    return (type(value) is type(out) and value.dtype == out.dtype and value.requires_grad == out.requires_grad
            and (region is out or region.shape == shape) and value.shape == shape
            and value.is_contiguous() and out.is_contiguous() and same_device
            and (value.numel() > 0 or not _overlapping(value))
            and (tok.fresh or not tok.shares_input(value))
            and not (others is not None and tok.shares_output(value, others)))


FunctionRuntime.replaces = staticmethod(_replaces)
FunctionRuntime.owned = staticmethod(_owned)



def _linear_prefix(h0, b, a, py_a=False, varying=False, py_b=False, computed=False, computed_term=False):
    """h_t = a * h_{t-1} + b_t for all t, with h_{-1} = h0 and a loop-invariant factor `a` (or
    one per step: `varying`): a parallel scan of the steps (_scan_pairs), log2(n) passes of
    whole-tensor operations. With |a| <= 1 the products of factors stay at most 1, so the error
    stays that of a tree-ordered sum of the terms; larger factors keep the Python loop. (It
    replaced blocks of 64 steps times a 64 x 64 matrix of powers: 5-8x faster from 200 to
    100,000 steps, with errors of the same size against float64.)"""
    reset, _, zero = varying.partition(":") if isinstance(varying, str) else ("", "", "")
    zero = float(zero) if "." in zero else int(zero) if zero else 0     # (the reset's own number)
    if reset.startswith("+="):
        # `h += f(h)` (analysis.loops._walk): "v", a factor that changes every step; "h", the loop
        # hands the running value on between updates, which only Python numbers throughout allow
        # (a tensor would be updated in place under every reference)
        if "h" in reset and (not py_b or not py_a and isinstance(a, torch.Tensor)):    # (a tensor start: below)
            raise GuardFailed("`+=` on a running value that the loop hands on, with tensor values (each reference "
                              "would see the later updates in place)")
        varying = "v" in reset
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (h0, b, a)):
            # (the loop's in-place update may change a value its backward saved, which raises there)
            raise GuardFailed("`+=` on a running value with tensors that require grad (the loop updates it in place)")
    if (reset == "reset+=" or reset.startswith("+=")) and isinstance(h0, torch.Tensor):
        # (`h += v` updates the start in place until the first reset, or throughout; the batch would not)
        raise GuardFailed("`+=` on a running value that starts as a tensor (the loop updates it in place)")
    if reset == "select":
        _select_keeps(h0, b, a, zero, py_a, py_b)
    if reset in ("reset", "reset+=", "select") and isinstance(b, torch.Tensor) and not (b.is_floating_point() or b.is_complex()) \
            and isinstance(a, torch.Tensor) and a.dtype == torch.bool:
        return _segment_sums(h0, b, a, py_a, py_b, reset, zero)
    if not isinstance(b, torch.Tensor) or not (b.is_floating_point() or b.is_complex()):
        raise GuardFailed("a linear recurrence on non-floating values keeps the loop")
    if isinstance(h0, bool) or isinstance(h0, torch.Tensor) and h0.dtype == torch.bool:
        raise GuardFailed("a linear recurrence from a bool start (`x[i] - s` raises on bools in the loop)")
    if b.dtype in _HALF or isinstance(h0, torch.Tensor) and h0.dtype in _HALF:
        raise GuardFailed(_HALF_SUM)
    if not bool(torch.isfinite(b).all()) or (isinstance(h0, torch.Tensor) and not bool(torch.isfinite(h0).all())) \
            or (isinstance(h0, float) and (h0 != h0 or h0 in (float("inf"), float("-inf")))):
        raise GuardFailed("non-finite values in a linear recurrence keep the loop", data=True)
    if b.is_floating_point() and _holds_minus_zero(b) and not _stays_unsigned(h0, a):
        # the loop's state is -0.0 after a step only where the term and a * state are (-0.0 +
        # -0.0); the scan's sums may give +0.0
        raise GuardFailed("-0.0 among a linear recurrence's terms (the batched sums may give +0.0)", data=True)
    if reset in ("reset", "reset+="):
        _reset_keeps(h0, b, a, zero, py_a, py_b)
    if varying:
        return _linear_scan(h0, b, a, py_a, py_b, computed, computed_term)
    a0 = a[0] if isinstance(a, torch.Tensor) and a.dim() >= 1 else a
    if py_a and isinstance(a0, torch.Tensor):
        a0 = a0.item()   # a Python number in the loop: it promotes like one (and keeps its double)
    n = b.shape[0]
    b0 = b[0].item() if py_b else b[0]     # (Python numbers in the loop: they promote as numbers)
    first = a0 * h0 + b0
    if not isinstance(first, torch.Tensor):
        b0 = b[0]                            # (all Python numbers: in the batch's float64, as Python's)
        first = a0 * h0 + b0
    want = torch.result_type(first, b0)
    _same_promotion(h0, b0, want)
    _narrow_factor(a0, want, computed)
    _narrow_factor(b, want, computed_term, "term")
    # a Python factor near 1 (`h = h + a * (x[t] - h)` is the factor 1 - a): in float32 it loses
    # most of `a`'s digits, which the loop keeps by computing `a * (x - h)`: the scan runs in float64
    work = torch.float64 if (want == torch.float32 and not isinstance(a0, torch.Tensor)
                             and abs(1 - abs(a0)) < 1e-2) else want
    if isinstance(a0, torch.Tensor):
        work = _near_one(a0, want, computed)
    a0 = torch.as_tensor(a0, dtype=torch.float64 if not isinstance(a0, torch.Tensor) else None,
                         device=b.device).to(work)
    if bool((a0.abs() > 1).any()):
        raise GuardFailed("a recurrence factor above 1 in size (the batched form would lose accuracy)")
    _sums_in_range(b, h0, want)     # (|a| <= 1: every state is at most |h0| plus the terms' magnitudes)
    shape = broadcast_shapes(first.shape, b.shape[1:], a0.shape)
    _scan_worth(n, shape, work, b.device)
    h = torch.as_tensor(h0, dtype=work, device=b.device) if not isinstance(h0, torch.Tensor) else h0.to(work)
    out = _scan_pairs(a0.expand(n, *shape), _per_step(b, shape).to(work), h.expand(shape), n)
    return _approx(out if work == want else out.to(want))


def _approx(t):
    """`t`, marked as a float scan's values: equal to the loop's up to rounding (Token.approx)."""
    t._av_approx = True
    return t


def _stays_unsigned(h0, a) -> bool:
    """Whether a * h never gives -0.0 in the loop: a start without -0.0 and factors above 0 keep
    every state free of it (by induction: a * h is -0.0 only for a -0.0 or negative side)."""
    if isinstance(h0, float):
        start = not (h0 == 0 and math.copysign(1.0, h0) < 0)
    elif isinstance(h0, torch.Tensor):
        start = not (h0.is_floating_point() and _holds_minus_zero(h0))
    else:
        start = True
    if isinstance(a, torch.Tensor):
        return start and bool((a > 0).all())
    return start and isinstance(a, (int, float)) and a > 0


def _same_promotion(h0, b0, want):
    """The affine form `a * h + b` may group the loop's factors differently (`g * h * m` as
    `(g * m) * h`), so a factor of a wider dtype could promote where the loop's order did not:
    only a result in the state's and first term's (`b0`) own dtype is trusted."""
    if want != torch.result_type(h0, b0):
        raise GuardFailed("the recurrence factor has a wider dtype than its state and terms (the loop's "
                          "order of operations decides the result's dtype)")


def _narrow_factor(a, want, computed, what="factor"):
    """A factor (or term) the loop never computes as such (`gamma * (1 - d)` from `gamma * G * (1 -
    d)`, the term `a * x[t]` from `h + a * (x[t] - h)`: lowering.common._computed_factor) rounded
    in a narrower dtype than the state's: the loop combines each part with the float64 state in
    float64, the batch formed them in their own float32 (probeI's discounted returns with
    float64 rewards and float32 done flags, 6.9e-6 off; probeJ's EMA of float32 rows into a
    float64 state, 1e-7). The loop runs."""
    if computed and isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex()) \
            and a.dtype != want and torch.promote_types(a.dtype, want) == want:
        raise GuardFailed(f"a recurrence {what} computed in {a.dtype} for a {want} running value (the loop "
                          f"combines its parts with the running value in {want})")


def _per_step(t, shape):
    """Per-step values (n, ...) broadcast against the state's `shape` as each step's value is
    in the loop (a 0-d x[t] against a per-feature state): own dimensions right-aligned after
    the step dimension."""
    return t.reshape(t.shape[0], *([1] * (len(shape) - (t.dim() - 1))), *t.shape[1:]).expand(t.shape[0], *shape)


def _segment_sums(h0, b, a, py_a, py_b, varying, zero):
    """An integer running sum reset to 0 under a condition (`if done[t]: c = 0` then `c += v[t]`,
    analysis.loops._merge_resets; `a` is the step's keep flag, `not done[t]`): each state is the
    sum of the terms since the last reset, or the start plus all terms before the first one,
    computed as differences of one cumsum. Exact: integer sums are exact modulo 2**64 in any
    order, which is how the loop's int64 tensors wrap too; the loop's Python ints do not wrap,
    so they must stay within int64's range."""
    if isinstance(h0, bool) or not isinstance(h0, (int, torch.Tensor)):
        raise GuardFailed("an integer running value reset to 0 from a start that is not an int (the loop's "
                          "type rules decide)")
    if isinstance(h0, torch.Tensor) and (h0.is_floating_point() or h0.is_complex() or h0.dtype == torch.bool):
        raise GuardFailed("an integer running value reset to 0 from a start that is not an integer tensor")
    if b.dtype == torch.bool:
        if not isinstance(h0, int):
            raise GuardFailed("a running count of booleans from a tensor start (the loop's dtype rules decide)")
        b = b.to(torch.int64)        # (0 + a bool tensor, as the loop's first step and each reset give)
    n = b.shape[0]
    if n == 0:
        raise GuardFailed("an empty recurrence keeps the loop")
    if isinstance(h0, torch.Tensor) and torch.result_type(h0, b[0]) != b.dtype:
        raise GuardFailed("an integer running value reset to 0 whose start has another dtype than its terms")
    if varying != "select":
        _reset_keeps(h0, b, a, zero, py_a, py_b)
    if py_b and isinstance(h0, int):
        _python_ints_fit(h0, b, "+")     # (the loop's Python ints never wrap)
    want = b.dtype      # (a Python int and an integer tensor give the tensor's dtype; a start's, the same)
    shape = broadcast_shapes(b.shape[1:], a.shape[1:], h0.shape if isinstance(h0, torch.Tensor) else ())
    B = _per_step(b.to(torch.int64), shape)
    reset = torch.logical_not(_per_step(a, shape))
    S = torch.cumsum(B, 0)
    # at a reset j the sum before it, S_{j-1} = S_j - b_j; before any reset, minus the start
    start = torch.as_tensor(h0, dtype=torch.int64, device=b.device).expand(shape)
    steps = torch.arange(n, device=b.device).reshape(n, *([1] * len(shape))).expand(n, *shape)
    last = torch.where(reset, steps, -1).cummax(0).values
    offset = torch.where(last >= 0, (S - B).gather(0, last.clamp(min=0)), -start)
    out = S - offset
    return out if out.dtype == want else out.to(want)


def _select_keeps(h0, b, a, zero, py_a, py_b):
    """`h = 0 if c else <update>` (analysis.loops._select_resets): after a reset the loop's value
    is the number itself, elsewhere the update's value. Only where every value is a Python number
    of that number's type (an int count restarted at 0, a float one at 0.0) do the batch's values
    have the loop's types at every step; a tensor update keeps the loop (its values alternate
    between a Python number and tensors)."""
    if isinstance(h0, torch.Tensor) or isinstance(h0, bool) or not py_b or not py_a:
        raise GuardFailed(f"a running value set to {zero!r} under a condition, whose other values are not Python "
                          "numbers (the loop's values alternate between the number and tensors)")
    if isinstance(h0, float) and h0 == 0 and math.copysign(1.0, h0) < 0:
        # (the terms are made +0.0 where they are -0.0, analysis.loops._select_resets: the same
        # sums only from a start that is not -0.0)
        raise GuardFailed("a running value restarted under a condition from a start of -0.0", data=True)
    if b.shape[0]:
        b0 = b[0].item()
        a0 = a[0].item() if isinstance(a, torch.Tensor) and a[0].numel() == 1 else 1
        if type(zero) is not type(a0 * h0 + b0) or type(h0) is not type(zero):
            raise GuardFailed(f"a running value set to {zero!r} under a condition whose other values have another "
                              "type (the loop's type changes there)")


def _reset_keeps(h0, b, a, zero=0, py_a=False, py_b=False):
    """A reset (`if c: h = 0` before the update, analysis.loops._merge_resets) is computed as a
    factor of 0, which keeps what the loop's fresh 0 drops: the start's dtype and shape (a
    float64 start promotes every later step; the loop's steps after a reset take the terms'),
    its type (an int start with float resets `c = 0.0`, or a float start with `c = 0`, changes
    the loop's type at the first reset: the step after a reset is `a * zero + b`, the one
    before `a * h0 + b`), and the autograd graph (zeros where the loop's values do not require
    grad at all). Where any could show, the loop runs."""
    if isinstance(h0, torch.Tensor) and (torch.result_type(h0, b) != b.dtype
                                         or broadcast_shapes(h0.shape, b.shape[1:]) != b.shape[1:]):
        raise GuardFailed("a running value reset to 0 whose start has another dtype or shape than its terms")
    if b.shape[0]:
        a0 = a[0].item() if py_a and isinstance(a, torch.Tensor) and a[0].numel() == 1 else a[0] \
            if isinstance(a, torch.Tensor) else a
        b0 = b[0].item() if py_b and b[0].numel() == 1 else b[0]
        after, before = a0 * zero + b0, a0 * h0 + b0
        if type(after) is not type(before) or isinstance(after, torch.Tensor) and after.dtype != before.dtype:
            raise GuardFailed(f"a running value reset to {zero!r} takes another type after a reset than before it "
                              "(the loop's type changes there)")
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (h0, b, a)):
        raise GuardFailed("a running value reset to 0 with tensors that require grad (the reset cuts the graph "
                          "the batch keeps)")


def _near_one(a, want, computed):
    """The dtype a scan with the tensor factor(s) `a` runs in: float64 where a float32 factor is
    within 1e-2 of +-1 (the scan's own roundings, compounded over the ~1 / (1 - |a|) steps a
    value lives, reached 4-10 times the loop's error in float32; in float64 the scan is the
    exact recurrence of the loop's factors and terms). A factor the loop never computes as such
    (_computed_factor: `1 - a` from `h + a * (x - h)`) is already off by its own rounding, which
    float64 cannot undo: within 2e-3 of +-1 (but not exactly 1, a flag) it keeps the loop (found
    by a probe: 24-32 times the loop's error at a = 1e-4)."""
    if want not in (torch.float32, torch.complex64) or not a.numel():
        return want
    gap = 1 - a.detach().abs().to(torch.float64)
    near = gap.abs() < 1e-2
    if not bool(near.any()):
        return want
    if computed and bool(((gap > 0) & (gap < 2e-3)).any()):
        raise GuardFailed("a float32 recurrence factor computed from other values (`1 - a`, a product) within "
                          "2e-3 of 1: its rounding, compounded over the steps, would exceed the loop's error",
                          data=True)
    return torch.float64 if want == torch.float32 else torch.complex128


def _linear_scan(h0, b, a, py_a, py_b=False, computed=False, computed_term=False):
    """h_t = a_t * h_{t-1} + b_t with a factor per step: a parallel (Hillis-Steele) scan over
    the pairs (a_t, b_t), combined as (a, b) . (a', b') = (a a', a' b + b'). log2(n) passes of
    whole-tensor operations; with every |a_t| <= 1 the products stay bounded and each h_t is a
    tree-ordered sum of the loop's own terms. (b and h0 are checked by linear_prefix.)"""
    if not isinstance(a, torch.Tensor):
        raise GuardFailed("a per-step recurrence factor that is not a tensor")
    if a.dtype == torch.bool:
        a = a.to(b.dtype)       # (a reset's keep flag, 1 or 0: analysis.loops._merge_resets)
    n = b.shape[0]
    if n == 0:
        raise GuardFailed("an empty recurrence keeps the loop")
    if not bool(torch.isfinite(a).all()):
        raise GuardFailed("non-finite values in a linear recurrence keep the loop", data=True)
    a_first = a[0].item() if py_a else a[0]
    b0 = b[0].item() if py_b else b[0]
    first = a_first * h0 + b0
    if not isinstance(first, torch.Tensor):
        b0 = b[0]
        first = a_first * h0 + b0
    want = torch.result_type(first, b0)
    _same_promotion(h0, b0, want)
    _narrow_factor(a, want, computed)
    _narrow_factor(b, want, computed_term, "term")
    if bool((a.abs() > 1).any()):
        raise GuardFailed("a recurrence factor above 1 in size (the batched form would lose accuracy)", data=True)
    _sums_in_range(b, h0, want)
    shape = broadcast_shapes(first.shape, b.shape[1:], a.shape[1:])
    work = _near_one(a, want, computed) if not py_a else want
    _scan_worth(n, shape, work, b.device)
    h = h0 if isinstance(h0, torch.Tensor) else torch.as_tensor(h0, dtype=want, device=b.device)
    out = _scan_pairs(_per_step(a.to(work), shape), _per_step(b.to(work), shape), h.to(work), n)
    return _approx(out if work == want else out.to(want))


def _scan_worth(n, shape, dtype, device):
    """Refuses a parallel scan (the loop runs) that costs more than twice the loop: _scan_pairs
    writes about 4 * log2(n) + 2 tensors of n states, where the loop writes two states a step
    (its product and its sum, into memory it reuses) and pays an iteration of the interpreter.
    With a large state the scan loses: Horner's rule on 2M points, 60 coefficients, took 23 s
    as a scan, 0.1 s in the loop; a running value of a few thousand elements is where they meet.
    (On the CPU, whose costs cost.constants measures; elsewhere not modelled; not where
    AUTOVEC_MIN_TRIP forces the batch.)"""
    if device.type != "cpu" or n < 2 or cost.min_trip(None) is not None:
        return      # (AUTOVEC_MIN_TRIP: a plain threshold replaces the cost model)
    c = cost.constants("cpu")
    state = math.prod(shape) * dtype.itemsize
    written = n * state * (4 * math.ceil(math.log2(n)) + 2)
    scan_s = written * (c["byte_fresh"] if n * state >= cost._FRESH_BYTES else c["byte_hot"])
    loop_s = n * (c["py_iter"] + 2 * c["py_op"] + 2 * state * c["byte_hot"])
    if scan_s > 2 * loop_s:
        raise GuardFailed(f"a parallel scan of {n} steps of a {state / 2 ** 20:.1f} MB state would write about "
                          f"{written / 2 ** 30:.1f} GB (about {scan_s * 1e3:.1f} ms against the loop's "
                          f"{loop_s * 1e3:.1f} ms)")


def _scan_pairs(A, B, h, n):
    """h_t = A_t * h_{t-1} + B_t for all t from h: the Hillis-Steele scan of the pairs (A_t, B_t),
    combined as (a, b) . (a', b') = (a a', a' b + b'), in log2(n) passes of whole-tensor
    operations (each h_t a tree-ordered sum of the loop's own terms, scaled by products of at
    most 1 in size where every |A_t| <= 1). A constant factor comes in expanded (stride 0)."""
    d = 1
    while d < n:
        B = torch.cat((B[:d], B[d:] + A[d:] * B[:-d]), 0)
        A = torch.cat((A[:d], A[d:] * A[:-d]), 0)
        d *= 2
    return A * h + B


FunctionRuntime.linear_prefix = staticmethod(_linear_prefix)
linear_prefix = _linear_prefix      # the module-level name the displayed rewrite uses


def _before_steps(s0, running, computed=True, py=False):
    """The values a running value has before each step (an exclusive scan: `out[i] = s` then `s =
    s + x[i]`): its start, then the running values but the last. The start must be one value of
    the running values' dtype: a plain tensor of that dtype and a shape the rows broadcast to, or
    a Python number it holds exactly, within int64's range (setitem of a larger int raises). Where
    the value is `computed` with or appended (not only stored as it is: `out[i] = s`), a Python
    start only where the steps are Python numbers too (`py`: the loop computes its first value
    from the number itself, `s / 0` raises), of their kind (an int for integer dtypes, a float
    for floating ones: an appended start stays the loop's own int or float)."""
    row = running.shape[1:]
    dt = running.dtype
    if type(s0) is torch.Tensor:
        if s0.dtype != dt or s0.device != running.device:
            raise GuardFailed("a running value read before its update that starts as a tensor of another dtype")
        if computed and tuple(s0.shape) != tuple(row):
            # (`acc += (~done).float().sum()` before `done = done | m[t]` from a 0-d start: the loop's
            # first read sums one element, the start expanded to a row sums them all)
            raise GuardFailed("a running value computed with before its update that starts as a tensor of another "
                              "shape than its values (the loop's first step computes with the start as it is)")
        try:
            first = s0.expand(row)
        except RuntimeError:
            raise GuardFailed("a running value read before its update that starts with another shape") from None
    elif type(s0) in (int, float, bool):
        if computed and not py:
            # (the loop computes the first step's value from the Python number, the rest from
            # tensors: `s / 0`, `s * 1e300`, `s ** 2` of a large int differ between the two)
            raise GuardFailed("a running value computed with before its update that starts as a Python number "
                              "where its steps are tensors")
        kind = bool if dt == torch.bool else float if dt.is_floating_point else complex if dt.is_complex else int
        if computed and type(s0) is not kind:
            raise GuardFailed(f"a running value computed with before its update that starts as a {type(s0).__name__} "
                              f"where its steps are {dt} (the loop computes its first value as that number)")
        if type(s0) is int and not -2 ** 63 <= s0 < 2 ** 63:
            raise GuardFailed("a running value read before its update that starts past int64's range")
        first = torch.tensor(s0, dtype=dt, device=running.device)
        if first.item() != s0:
            raise GuardFailed("a running value read before its update whose start its dtype does not hold")
        first = first.expand(row)
    else:
        raise GuardFailed(f"a running value read before its update that starts as a {type(s0).__name__}")
    if running.shape[0] == 1:
        return first.unsqueeze(0)       # (the start alone: no gradient of the steps reaches it)
    return torch.cat([first.unsqueeze(0), running[:-1]])


def _commit_scan(s0, final, inplace):
    """`s += v` on a tensor updates that tensor object; `s = s + v` rebinds the name (to a tensor
    of its own, as the loop's last step makes: Token.scan_final)."""
    if inplace and isinstance(s0, torch.Tensor):
        return s0.copy_(final)
    return final


FunctionRuntime.commit_scan = staticmethod(_commit_scan)


def _exit_prefix(init, v, op, py):
    """A running total before each iteration (`spent` in `if spent + c > budget: break`, then
    `spent = spent + c`), for the `break` condition: init plus the sum of the earlier values.
    Integers only: summed in another order, floats could round to a different side of the
    threshold and stop the loop elsewhere; integer sums wrap the same in any order."""
    if py or not isinstance(v, torch.Tensor) or v.dim() < 1:
        raise GuardFailed("a running total of Python numbers decides where the loop stops")
    if v.is_floating_point() or v.is_complex() or isinstance(init, (float, complex)) or (
            isinstance(init, torch.Tensor) and (init.is_floating_point() or init.is_complex())):
        raise GuardFailed("a running total of floating-point values decides where the loop stops (a batched "
                          "sum rounds differently, so the loop could stop one step earlier or later)")
    if not isinstance(init, (int, torch.Tensor)):
        raise GuardFailed(f"a running total that starts as a {type(init).__name__}")
    # the loop's own arithmetic: `init + v[0]` of two scalars decides the dtype (and where it wraps)
    dtype = torch.result_type(init, v[0])
    if isinstance(init, torch.Tensor) and (init.dim() or init.dtype != dtype):
        # (found by a probe) a total of another dtype than its sum's: `spent += c` in place keeps
        # spent's own and wraps there, `spent = spent + c` takes the sum's; a total of shape (1,)
        # keeps its dtype in `spent + c` where a 0-d one, as each iteration's total is here, takes
        # c's: the loop decides
        raise GuardFailed(f"a running total of {init.dtype}{' and shape ' + str(tuple(init.shape)) if init.dim() else ''}"
                          f" beside values of {v.dtype} decides where the loop stops")
    v = v.to(dtype)
    before = torch.cumsum(v, 0, dtype=dtype).sub_(v)          # in place: one batch-sized buffer
    if op == "-":
        before.neg_()
    if not (type(init) is int and init == 0):
        before.add_(init)
    return before


FunctionRuntime.exit_prefix = staticmethod(_exit_prefix)


class _Flipped:
    """The token of a walk back as the flipped region's forward scan sees it: its rows start at
    the lag and run to the region's end (_prefix_rows takes the whole region)."""
    __slots__ = ("start", "n", "rt", "loop_id", "estimate")

    def __init__(self, tok, lag):
        self.n, self.start, self.rt, self.loop_id = tok.n, lag, tok.rt, tok.loop_id
        self.estimate = getattr(tok, "estimate", None)


def _fill_region(region, dim, lag, test, per_row):
    """A forward fill (analysis.loops._fill_prefix): each row of `region` after its first `lag`
    takes the row `lag` before it where `test` of its own value holds, that row as the loop left
    it: the last row of its chain (rows `lag` apart) at or before it whose test fails, or the
    chain's first. `per_row`: the loop takes the test's truth value per row (`if`): one element
    per row, else the loop raises. Copies alone: exact."""
    rows = region.narrow(dim, lag, region.shape[dim] - lag)
    if rows.shape[dim]:
        # the test on one row as the loop sees it: its operands must fit a row (a loop-invariant
        # tensor of the rows' own count would compare element by element here, and raise there)
        one = test(rows.select(dim, 0))
        if not isinstance(one, torch.Tensor) or one.shape != rows.select(dim, 0).shape:
            raise GuardFailed("a fill's test whose value for one row has another shape than the row (the loop "
                              "decides)")
    hit = test(rows)
    if not isinstance(hit, torch.Tensor) or hit.dtype != torch.bool:
        raise GuardFailed("a fill's test that does not give booleans (the loop decides)")
    if per_row:
        if region.dim() != 1 or hit.shape != rows.shape:
            raise GuardFailed("a fill's test with several elements per row (the loop's `if` raises)")
    elif hit.shape != rows.shape:
        raise GuardFailed("a fill's test of another shape than the rows (the loop's where broadcasts it)")
    n = region.shape[dim]
    shape = [1] * region.dim()
    shape[dim] = n
    pos = torch.arange(n, device=region.device).view(shape).expand(region.shape)
    head = list(hit.shape)
    head[dim] = lag
    keep = torch.cat([torch.ones(head, dtype=torch.bool, device=hit.device), ~hit], dim)
    last = _by_chains(torch.where(keep, pos, -1), dim, lag, lambda r, d: r.cummax(d).values)
    return region.gather(dim, last)


def _by_chains(t, dim, lag, scan):
    """`scan(x, d)` along `dim` of each chain of rows `lag` apart (rows r, r + lag, r + 2 lag ..):
    the chains side by side as the columns of (rows / lag, lag), one scan along the first; padded
    at the end, where a chain's later rows never reach its earlier ones."""
    if lag == 1:
        return scan(t, dim)
    rows = t.shape[dim]
    m = -(-rows // lag)
    r = t.movedim(dim, 0)
    if m * lag != rows:
        r = torch.cat([r, r.new_zeros(m * lag - rows, *r.shape[1:])])
    r = scan(r.reshape(m, lag, *r.shape[1:]), 0)
    return r.reshape(m * lag, *r.shape[2:])[:rows].movedim(0, dim)


def _prefix_region(t, dim, tok, op, lag=1, base=None, test=None, per_row=False, named="", rows1=False):
    """The values t[start - lag : stop] has after the loop `t[i] op= t[i - lag]` (a running sum,
    product, maximum or minimum along `dim` of each chain of rows `lag` apart, _by_chains; op
    "fill", a fill by `test`: _fill_region), computed out of place. A negative lag walks back
    (`reversed(range(..))` reading t[i + k]). `named`: the lag is a name's value ("ahead" or
    "back"), checked here.
    `base`: the tensor the loop writes into where `t` is a view of it (`x[:, c]` for `x[i, c] +=
    x[i - 1, c]`: lowering.scan); it must be one (basic indexing), or the commit would write into
    a copy."""
    if named and not (type(lag) is int and (lag <= -1 if named == "back" else lag >= 1)):
        # (a lag held in a name, `x[i - period]`: an int of at least 1 this call, in the loop's direction)
        raise GuardFailed("a lag that is not a positive int (the loop decides)")
    if not isinstance(t, torch.Tensor):
        raise GuardFailed("the loop updates a non-tensor")
    if base is not None and not (isinstance(base, torch.Tensor) and t._is_view() and _storage(t) == _storage(base)):
        raise GuardFailed("the updated part of the tensor is not a view of it (the loop decides)")
    if t.requires_grad and torch.is_grad_enabled():
        raise GuardFailed("an in-place recurrence on a tensor that requires grad keeps the loop")
    if rows1 and (t.dim() == 0 or t.numel() != t.shape[dim] or t.is_complex()):
        # (Python's max / min of two rows: `>` of several elements, or of complex values, raises)
        raise GuardFailed("Python's max or min of rows that are not one number each (the loop raises)")
    if lag < 0:
        # a walk back: the same scan on the region flipped along `dim`, flipped back
        region = _prefix_rows(t, dim, tok, lag)
        flipped = region.flip(dim)
        out = _prefix_region(flipped, dim, _Flipped(tok, -lag), op, -lag, None, test, per_row, rows1=rows1)
        return out.flip(dim)
    if op == "fill":
        out = _fill_region(_prefix_rows(t, dim, tok, lag), dim, lag, test, per_row)
        if tok.rt.events is not None:
            tok.rt._note(tok.loop_id, "vectorized", "scan", getattr(tok, "estimate", None))
        return out
    if t.dtype in _HALF and op in ("+", "*"):
        raise GuardFailed(_HALF_SUM)
    if op in ("max", "min"):
        if t.is_complex():
            raise GuardFailed("a running extreme of complex values (torch.maximum raises on them in the loop)")
    elif t.dtype not in _ARITH_DTYPES and not _op_works(t.dtype, t.device, op):
        raise GuardFailed(f"`{op}` is not implemented for {t.dtype} on {t.device.type} (cumsum and cumprod "
                          f"are): the loop raises")
    region = _prefix_rows(t, dim, tok, lag)
    if t.is_complex() and op in ("+", "*") and not bool(torch.isfinite(region).all()):
        # complex inf / NaN: the loop's scalar steps give inf+nanj where cumsum / cumprod keep the
        # other part (and cumprod's first step, 1 * (inf+0j), changes rows the loop never writes)
        raise GuardFailed("complex values with inf or NaN in an in-place running sum or product", data=True)
    if op == "+" and (t.is_floating_point() or t.is_complex()) and _holds_minus_zero(region.narrow(dim, 0, lag)):
        # the loop's running sum stays -0.0 while every value is; cumsum starts from +0.0
        raise GuardFailed("-0.0 where an in-place running sum starts (cumsum would give +0.0)", data=True)
    if op in ("max", "min") and t.is_floating_point() and (bool(torch.isnan(region).any()) or _zero_signs_tie(region)):
        # (NaN, and which of +0.0 and -0.0 wins a tie, are decided by the loop's order of arguments)
        raise GuardFailed("NaN or zeros of both signs in an in-place running extreme keep the loop", data=True)
    if op == "*":
        _products_in_range(region, None, dim)
    scan = {"+": torch.cumsum, "*": torch.cumprod, "max": lambda r, d: torch.cummax(r, d).values,
            "min": lambda r, d: torch.cummin(r, d).values}[op]
    out = _by_chains(region, dim, lag, scan)
    if tok.rt.events is not None:
        tok.rt._note(tok.loop_id, "vectorized", "scan", getattr(tok, "estimate", None))
    return out if out.dtype is t.dtype else out.to(t.dtype)


_OP_WORKS: dict = {}
_ARITH_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
                           torch.complex128, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                           torch.bool})     # (+ and * run on these everywhere)


def _op_works(dtype, device, op) -> bool:
    """Whether `a op b` runs on two tensors of `dtype` on `device`'s type (the unsigned 16-, 32-
    and 64-bit dtypes have cumsum on the CPU but no `+`), tried once per dtype, device type and op."""
    key = (dtype, device.type, op)
    hit = _OP_WORKS.get(key)
    if hit is None:
        a = torch.ones(1, dtype=dtype, device=device)
        try:
            (a + a) if op == "+" else (a * a)
            hit = True
        except (RuntimeError, NotImplementedError, TypeError):
            hit = False
        _OP_WORKS[key] = hit
    return hit


def _holds_minus_zero(r: torch.Tensor) -> bool:
    """Whether any element of `r` is -0.0 (a part of one, for complex values)."""
    if r.is_complex():
        r = torch.view_as_real(r)
    if r.is_cpu and r.numel() <= 16:        # (a few Python reads cost less than three kernels)
        vals = r.tolist() if r.dim() == 1 else r.reshape(-1).tolist()
        return any(v == 0 and math.copysign(1.0, v) < 0 for v in vals)
    zero = r == 0
    return bool(zero.any()) and bool(torch.signbit(r).logical_and_(zero).any())


def _prefix_commit(t, dim, tok, values, lag=1):
    _prefix_rows(t, dim, tok, lag).copy_(values)


def _prefix_rows(t, dim, tok, lag=1):
    """t[start - lag : stop] along `dim`: `t` itself where that is all of it. A negative lag is
    a walk back (`reversed(range(a, b))`, reading t[i + k]): t[a : b + k]."""
    if lag < 0:
        first = tok.start - (tok.n - 1) if tok.n else tok.start
        return t.narrow(dim, first, tok.n - lag)
    if tok.start == lag and tok.n + lag == t.shape[dim]:
        return t
    return t.narrow(dim, tok.start - lag, tok.n + lag)


FunctionRuntime.prefix_region = staticmethod(_prefix_region)
FunctionRuntime.prefix_commit = staticmethod(_prefix_commit)


def _default_device():
    get = getattr(torch, "get_default_device", None)
    return get() if get is not None else torch.device("cpu")


def _mask_rows(mask, o):
    if mask.dim() != 1 or mask.shape[0] != o.shape[0] or mask.dtype != torch.bool:
        raise GuardFailed("a selection whose mask is not one truth value per iteration")
    return mask.nonzero().flatten().tolist()


def _reduce_builtin(kind, o, py):
    """Python's sum / max / min / any / all over the elements (rows of `o`), with its types."""
    n = o.shape[0]
    if kind == "sum":
        out = FunctionRuntime.accumulate(0, o, "+", False, None, py)
        return 0 if out is _UNCHANGED or n == 0 else out
    if kind in ("any", "all"):
        if o.dim() != 1:
            raise GuardFailed("truth value of a tensor with several elements (the loop raises)")
        truth = o if o.dtype == torch.bool else o != 0
        return bool(truth.any()) if kind == "any" else bool(truth.all())
    if n == 0:
        raise GuardFailed(f"{kind}() of an empty sequence (the loop raises)", data=True)
    first = o[0].item() if py else o[0]
    if n == 1:
        return first
    got = FunctionRuntime.best(first, o[1:], ">" if kind == "max" else "<", py, ())
    return first if got is None else got[0]

_MM_SPECS = {"dot": {(1, 1): "i,i->"}, "inner": {(1, 1): "i,i->"}, "mv": {(2, 1): "mi,i->m"},
             "mm": {(2, 2): "mi,in->mn"}, "outer": {(1, 1): "m,n->mn"}, "ger": {(1, 1): "m,n->mn"},
             "matmul": {(1, 1): "i,i->", (2, 1): "mi,i->m", (1, 2): "i,in->n", (2, 2): "mi,in->mn"}}


def mm(kind, a, la, b, lb, sizes, seen=None):
    """One iteration's `kind(a, b)` for every iteration at once: `a` carries the loop levels `la`
    in front of its per-iteration dimensions (none when loop-invariant), `b` likewise."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise GuardFailed("a matrix product of non-tensors")
    ra, rb = a.dim() - len(la), b.dim() - len(lb)
    if a.dtype != b.dtype:
        raise GuardFailed("a matrix product of different dtypes (the loop raises)")
    dtype = a.dtype
    if dtype in _REDUCIBLE:
        # (the guard checked the inputs; this is a product of values cast inside the loop)
        if dtype is torch.float32 and a.is_cpu:
            if _reduced_fp32("cpu"):
                raise _precision_refusal(dtype)
        elif _reduced_product(dtype, "cpu" if a.is_cpu else a.device.type):
            raise _precision_refusal(dtype)
    key = (kind, la, lb, ra, rb, len(sizes))
    spec = _MM_FULL.get(key)
    if spec is None:
        spec = _MM_FULL[key] = _mm_spec(kind, la, lb, ra, rb, len(sizes))
    full, missing, plan = spec
    if plan is not None:
        # a batched matrix product in the operands' own layout: one matmul (einsum's own
        # permutations and reshapes cost more than the product at these sizes)
        t_b, sq_a, sq_b = plan
        if sq_b and not sq_a and b.dim() == 1 and a.dim() >= 2 or sq_a and not sq_b and a.dim() == 1 \
                and b.dim() >= 2 and not t_b:
            # a loop-invariant vector against the batch (`x[i] @ w`, `torch.mv(W, x[i])`): matmul
            # takes it as it is, one call instead of an unsqueeze, the product and a squeeze
            out = torch.matmul(a, b)
        else:
            x = a.unsqueeze(-2) if sq_a else a
            y = b.unsqueeze(-1) if sq_b else (b.transpose(-1, -2) if t_b else b)
            if x.dim() == 3 and y.dim() == 3 and x.shape[0] == y.shape[0] and type(x) is type(y) is torch.Tensor:
                out = torch.bmm(x, y)    # what matmul runs for these shapes, without its batch folding
            else:
                out = torch.matmul(x, y)
            if sq_a and sq_b:
                out = out.squeeze(-1).squeeze(-1)
            elif sq_a:
                out = out.squeeze(-2)
            elif sq_b:
                out = out.squeeze(-1)
    elif type(a) is torch.Tensor and type(b) is torch.Tensor:
        out = torch._VF.einsum(full, (a, b))   # what torch.einsum runs for two operands
    else:
        out = torch.einsum(full, a, b)
    if seen is not None:
        seen[(kind, tuple(la), tuple(lb))] = full
    for lv in missing:
        out = out.unsqueeze(lv)
    if missing:
        out = out.expand(*sizes, *out.shape[len(sizes):])
    return out


_MM_FULL: dict = {}


def _mm_spec(kind, la, lb, ra, rb, levels):
    """The einsum equation for `kind` with loop levels in front, and the levels neither operand has."""
    spec = _MM_SPECS[kind].get((ra, rb))
    if spec is None:
        raise GuardFailed(f"`{kind}` of per-iteration ranks {ra} and {rb} (vmap decides)")
    letters = "abcdefgh"
    sa, rest = spec.split(",")
    sb, so = rest.split("->")
    present = sorted(set(la) | set(lb))
    A = f"{''.join(letters[x] for x in la)}{sa}"
    B = f"{''.join(letters[x] for x in lb)}{sb}"
    out = f"{''.join(letters[x] for x in present)}{so}"
    return f"{A},{B}->{out}", tuple(lv for lv in range(levels) if lv not in present), _matmul_plan(A, B, out)


def _matmul_plan(A: str, B: str, out: str):
    """(transpose b, unsqueeze a as a row, unsqueeze b as a column) when `A,B->out` is
    `torch.matmul` of the operands as they are (batch letters first, in the same order, one
    contracted letter), else None."""
    shared = [c for c in A if c in B]
    contracted = [c for c in shared if c not in out]
    if len(contracted) != 1 or len(set(A)) != len(A) or len(set(B)) != len(B):
        return None
    c = contracted[0]
    batch = [x for x in out if x in A and x in B]
    left = [x for x in out if x in A and x not in B]
    right = [x for x in out if x in B and x not in A]
    if out != "".join(batch + left + right) or len(left) > 1 or len(right) > 1:
        return None
    if A != "".join(batch + left + [c]):
        return None
    if B == "".join(batch + [c] + right):
        t_b = False
    elif B == "".join(batch + right + [c]) and right:
        t_b = True
    else:
        return None
    return t_b, not left, not right


def _mm_method(self, kind, a, la, b, lb, sizes):
    # the einsum is recorded for explain's display only (the call explain makes has events)
    return mm(kind, a, la, b, lb, sizes, self.mm_seen if self.events is not None else None)


FunctionRuntime.mm = _mm_method


def _list_scatter(target, vals, idxs, op, mask, py):
    """`counts[k] += v` into a Python list of ints (class counts, histograms), with `v` a Python
    int in the loop (a constant, `.item()` of an integer, `int(..)`): the sums per bin, added to
    the list's ints at the commit. Exact: integer sums in any order, checked to stay within
    int64 (the loop's ints do not wrap). A list of anything else (floats, whose sums depend on
    the order; tensors, which `+=` would put in the list), a tensor value, an index out of the
    list's range (the loop raises IndexError after the earlier updates) or a store (`=`) keep
    the loop."""
    if op not in ("+", "-") or not py or len(idxs) != 1:
        raise GuardFailed("only `+=` / `-=` of Python ints into a list of ints is batched (the loop decides)")
    if not all(type(e) is int for e in target):
        raise GuardFailed("a list whose elements are not all ints (the loop's order of additions or its types decide)")
    i = idxs[0]
    if not isinstance(i, torch.Tensor) or i.dim() != 1 or i.dtype not in _INDEX_INTS or vals.dim() != 1 \
            or vals.is_floating_point() or vals.is_complex():
        raise GuardFailed("a list updated by another kind of value or index (the loop decides)")
    if mask is not None:
        vals, i = _select(vals, mask), _select(i, mask)
    size = len(target)
    if i.numel():
        lo, hi = torch.aminmax(i)
        if int(lo) < -size or int(hi) >= size:
            raise GuardFailed("an index past the list's end (the loop raises IndexError)", data=True)
    _python_ints_fit(max((abs(e) for e in target), default=0), vals, "+")
    i = torch.where(i < 0, i + size, i).to(torch.long)
    sums = torch.zeros(size, dtype=torch.int64, device=vals.device).index_add_(0, i, vals.to(torch.int64))
    return "list", (sums if op == "+" else -sums)


def _scatter_prep(target, vals, idxs, op, mask, form="", py=False, chained=False):
    """Indices and values for one `index_put_` that does what the loop's
    `target[i0, i1] op= v` does, repeated indices included (a per-bin max, min or product:
    _scatter_reduce_prep). `chained`: the loop writes `target[i0][i1]`, the same element only
    where `target[i0]` is a view: a tensor indexed by one integer (not bool) per iteration."""
    if chained and not (isinstance(target, torch.Tensor) and isinstance(idxs[0], torch.Tensor) and idxs[0].dim() == 1
                        and not idxs[0].is_floating_point() and not idxs[0].is_complex()
                        and idxs[0].dtype not in (torch.bool, torch.uint8)):
        raise GuardFailed("`t[a][b]` where `t[a]` may be a copy (a list, or a tensor of indices): the loop decides")
    if type(target) is list:
        return _list_scatter(target, vals, idxs, op, mask, py)
    if not op and mask is None and len(idxs) == 2 and isinstance(idxs[1], torch.Tensor) \
            and idxs[1].dtype == torch.bool and idxs[1].dim() > 1:
        rows = _masked_rows(target, vals, idxs, py)
        if rows is not None:
            return "masked", rows
    if op in _REDUCES:
        return _scatter_reduce_prep(target, vals, idxs, op, mask, form, py)
    if op and target.dtype in _HALF:
        # the loop rounds to float16 / bfloat16 after every addition (2048 + 1 is 2048); an
        # index_put_ adds the increments to each element without those roundings
        raise GuardFailed(_HALF_SUM)
    if op == "-" and (vals.dtype == torch.bool or target.dtype == torch.bool):
        raise GuardFailed("`-=` with a bool tensor (the loop raises)")
    kept = _scatter_rows(target, vals, idxs, mask, op, py)
    if kept is None:
        return None
    vals, idxs, n = kept
    if op and vals.dim() >= 1 and vals.shape[0] and vals.dtype != target.dtype \
            and (target.is_floating_point() or target.is_complex()):
        # values of another dtype: the loop adds each in the wider dtype and rounds the sum to
        # the target's, where index_add rounds the values first (of the target's own dtype it
        # adds them in the loop's order, overflow included: no check). Each bin's partial sums
        # are at most all the values' magnitudes, in the narrowest float dtype of the two
        _sums_in_range(vals, target, _narrowest(target, vals))
    whole = _scatter_whole(target, vals, idxs, op, n)
    if whole is not None:
        return whole
    norm = _scatter_indices(target, idxs)
    slot = target.shape[len(idxs):]
    v = vals.shape[1:]
    while len(v) > len(slot) and v[0] == 1 and not op:
        v = v[1:]      # (a store drops leading 1s; an in-place `+=` raises instead, as the loop does)
    if len(v) > len(slot):
        raise GuardFailed("a value does not fit the written element (the loop raises)", data=True)
    if vals.shape[1:] != slot:
        vals = vals.reshape(n, *([1] * (len(slot) - len(v))), *v).expand(n, *slot)
    if vals.dtype != target.dtype:
        if op and not torch.can_cast(torch.result_type(target, vals), target.dtype):
            raise GuardFailed("the in-place update would need a dtype cast the loop refuses")
        if not op and not _fits(vals, target.dtype):
            # a Python number the loop stores there raises (setitem checks the conversion), after
            # the writes before it; a tensor wraps or saturates: either way the loop decides (as fit_store)
            raise GuardFailed(f"values outside {target.dtype}'s range stored into it", data=True)
        vals = vals.to(target.dtype)
    if op == "-":
        vals = -vals
    if not op:
        if len(norm) == 2 and target.dim() == 2 and vals.dim() == 1 and n > 1 and norm[0].is_cpu:
            # (the indices on the CPU: the target may be a fresh output's stand-in, runtime._let_go)
            rows = norm[0]
            if bool((rows[1:] - rows[:-1] == 1).all()):
                # `out[i, labels[i]] = v` over consecutive rows (a one-hot): each row written
                # once, so no write is lost; one scatter_ along the columns of those rows
                return "rows", (int(rows[0]), norm[1], vals)
        # plain assignment: the last iteration writing an index wins
        lin = torch.zeros_like(norm[0])
        for d, i in enumerate(norm):
            lin = lin * target.shape[d] + i
        step = lin[1:] - lin[:-1]
        if n < 2 or bool((step > 0).all()) or bool((step < 0).all()):
            return tuple(norm), vals      # every index written once (`out[i, labels[i]]`): nothing to drop
        order = torch.arange(n, device=lin.device)
        span = int(lin.max()) + 1
        if span <= 4 * n:
            last = torch.full((span,), -1, dtype=torch.long, device=lin.device)
            last.scatter_reduce_(0, lin, order, reduce="amax")
            keep = last[lin] == order
        else:
            # a sparse range of indices: sort instead of a table as large as the range
            # (a stable sort keeps iteration order among equal indices: the last one wins)
            ranked, perm = torch.sort(lin, stable=True)
            ends = torch.ones(n, dtype=torch.bool, device=lin.device)
            ends[:-1] = ranked[1:] != ranked[:-1]
            keep = torch.zeros(n, dtype=torch.bool, device=lin.device)
            keep[perm[ends]] = True
        vals, norm = vals[keep], [i[keep] for i in norm]
    return tuple(norm), vals


_INDEX_INTS = (torch.int64, torch.int32, torch.int16, torch.int8)


def _scatter_join(target, parts, op):
    """Several scatters into `target` in each iteration (`deg[s] += 1; deg[t] += 1`,
    `A[s, d] = 1; A[d, s] = 1`) as one: every iteration's writes in the loop's order (a0, b0,
    a1, b1, ..), then _scatter_prep of them all, so that repeated indices add up, or the last
    write wins, as in the loop. `parts`: (values, indices, mask or None, op, Python numbers?)
    per scatter. The batches must be alike: values of one kind (Python numbers or tensors),
    dtype and shape, and one index per iteration of one dtype at each position (stacked, other
    dtypes would convert, or uint8 indices, which select as byte masks, become positions). With
    `op` "+", a `-=` adds its values negated (x - v is x + (-v), exactly)."""
    vals = [p[0] for p in parts]
    if len({p[4] for p in parts}) != 1 or not all(isinstance(v, torch.Tensor) for v in vals) \
            or len({(v.dtype, v.shape) for v in vals}) != 1:
        raise GuardFailed("scatters of values of several kinds, dtypes or shapes into one tensor (the loop decides)")
    idxs = []
    for j in range(len(parts[0][1])):
        col = [p[1][j] for p in parts]
        if not all(isinstance(i, torch.Tensor) and i.dim() == 1 for i in col):
            raise GuardFailed("scatters into one tensor through indices of several kinds, or several per write "
                              "(the loop decides)")
        if len({i.dtype for i in col}) != 1 and not all(i.dtype in _INDEX_INTS for i in col):
            # (integer positions of several dtypes, stacked in the widest, are the same positions;
            # a uint8 index selects as a byte mask, a bool one as a mask: the loop decides)
            raise GuardFailed("scatters into one tensor through indices of several dtypes (the loop decides)")
        idxs.append(torch.stack(col, 1).flatten())
    if op == "+" and any(p[3] == "-" for p in parts):
        v0 = vals[0]
        if target.dtype == torch.bool or v0.dtype == torch.bool:
            raise GuardFailed("`-=` with a bool tensor (the loop raises)")
        if v0.dtype != target.dtype and not (v0.is_floating_point() or v0.is_complex()):
            # (the loop converts each value to the target's dtype, then subtracts: negated first,
            # in their own dtype, uint8 values wrap and a signed minimum stays itself; any other
            # integer's negation is exact, and converts as its value's negation does)
            lo = torch.iinfo(v0.dtype).min
            if v0.dtype == torch.uint8 or any(bool((v == lo).any()) for v, p in zip(vals, parts) if p[3] == "-"):
                raise GuardFailed(f"`-=` beside `+=` of {v0.dtype} values whose negation {v0.dtype} does not hold "
                                  "(the loop decides)", data=True)
        vals = [-v if p[3] == "-" else v for v, p in zip(vals, parts)]
    masks = [p[2] for p in parts]
    mask = None
    if any(m is not None for m in masks):
        n = vals[0].shape[0]
        mask = torch.stack([m if m is not None else torch.ones(n, dtype=torch.bool, device=vals[0].device)
                            for m in masks], 1).flatten()
    return _scatter_prep(target, torch.stack(vals, 1).flatten(0, 1), idxs, op, mask, py=parts[0][4])


def _scatter_rows(target, vals, idxs, mask, op="", py=False):
    """A scatter's values and indices on the iterations that write (`mask`), with their count;
    None where none does. uint8 indices and more indices than the target's dimensions: the loop."""
    for i in idxs:
        if isinstance(i, torch.Tensor) and i.dtype == torch.uint8:
            # a uint8 tensor indexes as a byte mask in torch (`h[x[i]]` selects all or nothing),
            # not as a position: the loop decides
            raise GuardFailed("uint8 indices select as byte masks in torch's indexing (the loop decides)")
    if mask is not None:
        vals, idxs = _select(vals, mask), [_select(i, mask) for i in idxs]
    n = vals.shape[0]
    if n == 0:
        return None
    if len(idxs) > target.dim():
        raise GuardFailed("too many indices for the written tensor (the loop raises)")
    if any(isinstance(i, torch.Tensor) and i.dim() > 1 for i in idxs):
        vals, idxs, n = _flat_iterations(target, vals, idxs, n, op, py)
    return vals, idxs, n


def _flat_iterations(target, vals, idxs, n, op="", py=False):
    """`out[u, idx] = v` with a vector of indices per iteration (`idx` from topk): each iteration
    writes the positions of its broadcast indices, as that many iterations of one position each,
    in the loop's order (iterations first, then each one's positions). Within one iteration the
    loop's setitem writes repeated positions once (`x[u, idx] += v` adds one of the values, not
    both): indices that repeat within an iteration keep the loop. The loop's setitem through a
    tensor of indices is an index_put: its indices int64 or int32 (int16 raises IndexError), its
    values of the target's own dtype where they are tensors (other dtypes raise; Python numbers
    are converted), and an update's `target[idx] op v` of the target's dtype too."""
    bools = [d for d, i in enumerate(idxs) if isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.dim() > 1]
    if bools and bools == [len(idxs) - 1] and all(
            isinstance(i, torch.Tensor) and i.dim() == 1 and i.dtype in (torch.int64, torch.int32) for i in idxs[:-1]):
        return _mask_iterations(target, vals, idxs, n, op, py)
    if any(not isinstance(i, torch.Tensor) or i.dim() > 1 and i.dtype not in (torch.int64, torch.int32)
           or i.dtype == torch.bool or i.is_floating_point() or i.is_complex() for i in idxs):
        raise GuardFailed("indices of a per-iteration vector that are not int64 or int32 (the loop decides)")
    if not op and not py and vals.dtype != target.dtype:
        raise GuardFailed("values of another dtype written through a tensor of indices (index_put: the loop raises)")
    if op:
        # (`x[i, cols] += v` adds in place into the gathered copy, `x[i, cols] = x[i, cols] + v`
        # makes a new one, which index_put refuses where its dtype is not the target's: a wider
        # v; the same in both where the result keeps the target's dtype)
        _update_keeps_dtype(target, vals, py, "a tensor of indices")
    shape = broadcast_shapes(*(tuple(i.shape[1:]) for i in idxs))
    k = math.prod(shape)
    flat = [i.reshape(n, *([1] * (len(shape) - i.dim() + 1)), *i.shape[1:]).expand(n, *shape).reshape(n * k)
            for i in idxs]
    if k > 1:
        lin = torch.zeros_like(flat[0]).view(n, k)
        for d, i in enumerate(flat):
            size = target.shape[d]
            lin = lin * size + torch.where(i < 0, i + size, i).view(n, k)
        ranked = lin.sort(1).values
        if bool((ranked[:, 1:] == ranked[:, :-1]).any()):
            raise GuardFailed("indices repeated within one iteration's write (its setitem writes them once: "
                              "the loop decides)", data=True)
    want = shape + tuple(target.shape[len(idxs):])
    v = tuple(vals.shape[1:])
    while len(v) > len(want) and v[0] == 1:
        v = v[1:]
    if len(v) > len(want) or any(a != b and a != 1 for a, b in zip(v, want[len(want) - len(v):])):
        raise GuardFailed("a value that does not fit the positions it is written to (the loop raises)", data=True)
    vals = vals.reshape(n, *([1] * (len(want) - len(v))), *v).expand(n, *want).reshape(n * k, *want[len(shape):])
    return vals, flat, n * k


def _update_keeps_dtype(target, vals, py, through):
    """An update `target[..] op= v` through an index tensor or a mask: index_put takes the result
    only in the target's own dtype (the loop raises otherwise)."""
    sample = (1.5 if vals.is_floating_point() else True if vals.dtype == torch.bool else 1) if py else \
        torch.empty(0, dtype=vals.dtype)
    if torch.result_type(torch.empty(0, dtype=target.dtype), sample) != target.dtype:
        raise GuardFailed(f"an update through {through} whose result has another dtype (index_put: the loop raises)")


def _mask_value(target, vals, rest, op, py):
    """The shape of one iteration's value written through a boolean mask (leading 1s dropped),
    where the loop's write takes it: one value per iteration of the target's dtype (a 0-d float
    is converted, as a number), a number or a row of the dimensions after the mask's (`rest`); an
    update whose result keeps the target's dtype. Else GuardFailed: the loop raises, or writes a
    value per selected position, whose length changes with each iteration's mask."""
    if not op and not py and vals.dtype != target.dtype and not (
            vals.dim() == 1 and vals.is_floating_point() and target.is_floating_point()):
        raise GuardFailed("values of another dtype written through a boolean mask (index_put: the loop "
                          "raises, or converts a number)")
    if op:
        _update_keeps_dtype(target, vals, py, "a boolean mask")
        if target.is_complex() and not (bool(torch.isfinite(vals).all()) and bool(torch.isfinite(target).all())):
            # (complex inf / NaN: the loop's `+=` gives nan+nanj where index_put's sum keeps a part)
            raise GuardFailed("complex values with inf or NaN updated through a boolean mask", data=True)
    v = tuple(vals.shape[1:])
    while v and v[0] == 1 and len(v) > len(rest):
        v = v[1:]
    if len(v) > len(rest) or any(a != b and a != 1 for a, b in zip(v, rest[len(rest) - len(v):])):
        raise GuardFailed("a value per selected position of a boolean mask (its length changes with each "
                          "iteration's mask: the loop runs)", data=True)
    return v


def _masked_rows(target, vals, idxs, py):
    """`img[i][masks[i]] = v` over consecutive rows i (the loop's own index, counting up by one):
    the rows' new values as one `where` of the masks, (start, values), which the commit copies
    into those rows; None where the rows are not consecutive (_mask_iterations then)."""
    rows, m = idxs
    n = m.shape[0]
    if not isinstance(rows, torch.Tensor) or rows.dim() != 1 or rows.dtype not in _INDEX_INTS or n < 1 \
            or rows.shape[0] != n or not rows.is_cpu:
        return None
    start = int(rows[0])
    if start < 0 or start + n > target.shape[0] or not torch.equal(rows, torch.arange(start, start + n, dtype=rows.dtype)):
        return None
    sel = tuple(m.shape[1:])
    if tuple(target.shape[1:1 + len(sel)]) != sel:
        raise GuardFailed("a boolean mask of another shape than the dimensions it selects (the loop raises)")
    rest = tuple(target.shape[1 + len(sel):])
    v = _mask_value(target, vals, rest, "", py)
    if vals.dtype != target.dtype and not _fits(vals, target.dtype):
        raise GuardFailed(f"values outside {target.dtype}'s range stored into it", data=True)
    region = target.narrow(0, start, n)
    v = vals.reshape(n, *([1] * (len(sel) + len(rest) - len(v))), *v).to(target.dtype)
    keep = m.reshape(*m.shape, *([1] * len(rest)))
    return start, torch.where(keep, v, region)


def _mask_iterations(target, vals, idxs, n, op="", py=False):
    """`img[i][masks[i]] = v` (or `img[i, masks[i]] op= v`): a boolean mask per iteration as the
    last index, selecting among the dimensions after the others. Each iteration writes the
    positions its mask holds, in row-major order as the loop's setitem does, so the write is that
    many iterations of one position each (the positions within one iteration are distinct). The
    value must be one per iteration (a number, or a row of the dimensions after the mask's): a
    value per selected position has another length in each iteration, which no batch holds. A
    mask of another shape than the dimensions it selects among raises in the loop: the loop runs."""
    m = idxs[-1]
    d = len(idxs) - 1
    sel = tuple(m.shape[1:])
    if m.shape[0] != n or tuple(target.shape[d:d + len(sel)]) != sel:
        raise GuardFailed("a boolean mask of another shape than the dimensions it selects (the loop raises)")
    rest = tuple(target.shape[d + len(sel):])
    v = _mask_value(target, vals, rest, op, py)
    if not op and not py and vals.dtype != target.dtype:
        vals = vals.to(target.dtype)     # (a 0-d value is converted, as a number: the loop's masked fill)
    hits = m.reshape(n, -1).nonzero()        # (iteration, flat position), iterations first
    it = hits[:, 0]
    flat = [i[it].to(torch.long) for i in idxs[:-1]]
    pos = hits[:, 1]
    for size in reversed(sel):
        flat.insert(d, pos % size)
        pos = pos // size
    k = it.shape[0]
    vals = vals.reshape(n, *([1] * (len(rest) - len(v))), *v).expand(n, *rest)[it]
    return vals, flat, k


def _scatter_indices(target, idxs):
    """The per-iteration indices as int64 positions within `target`'s dimensions (negative ones
    counted from the end, as the loop's indexing does); out of range, the loop decides."""
    norm = []
    for d, i in enumerate(idxs):
        if i.dim() != 1 or i.dtype in (torch.bool,) or i.is_floating_point() or i.is_complex():
            raise GuardFailed("scatter indices must be one integer per iteration")
        size = target.shape[d]
        lo, hi = torch.aminmax(i)
        if int(lo) < -size or int(hi) >= size:
            raise GuardFailed("an index is out of range (the loop raises)", data=True)
        if int(lo) < 0:
            i = torch.where(i < 0, i + size, i)
        norm.append(i if i.dtype == torch.long else i.to(torch.long))
    return norm


# a per-bin `out[k] = torch.maximum(out[k], v)` / `max(out[k], v)` / `out[k] *= v`: scatter_reduce's name
_REDUCES = {"max": "amax", "min": "amin", "*": "prod"}


@functools.lru_cache(maxsize=None)
def _step_dtype(a, a0, b, b0):
    """The dtype torch computes `f(a, b)` in for tensors of dtypes a and b (a0 / b0: 0-d ones,
    which promote only across categories)."""
    return torch.result_type(torch.empty(() if a0 else (0,), dtype=a), torch.empty(() if b0 else (0,), dtype=b))


def _scatter_reduce_prep(target, vals, idxs, op, mask, form, py):
    """A per-bin maximum, minimum or product over repeated indices as one scatter_reduce_ from
    the bins' own values (include_self), where it gives what the loop's steps give, one at a
    time (analysis._reduce_store: `form` "torch" for torch.maximum / minimum / max / min,
    "builtin" for Python's max / min, "inplace" for `*=`, "" for `out[k] = out[k] * v`):

    - each step computes in the dtype of the element and the value as they are (0-d ones
      promote only across kinds) and stores into the element: only where that is the target's
      own dtype is every step exact (a float max stored into an int target truncates every
      step, an int64 best compared in float32 rounds); complex values have no order (the
      loop raises) and a complex product's inf / NaN cases follow each step: the loop;
    - NaN: torch.maximum / minimum propagate it as amax / amin do on a CPU (checked by the
      tests); Python's `max(a, b)` returns `a` unless `b > a`, which NaN never is (a NaN best
      stays, a NaN value is skipped, or taken when it comes first): NaN in the data keeps the
      loop (and on other devices, where the reductions' NaN is not checked, for every form);
    - ties keep an operand, so +0.0 and -0.0 in one call (torch.maximum(0.0, -0.0) is 0.0,
      with the operands swapped -0.0) keep the loop;
    - a float product reassociates the loop's, as every sum and product here does: the same
      value up to rounding only while no partial product of a bin leaves the normal range
      (checked per bin, as runtime._products_in_range); float16 / bfloat16 round at every
      step: the loop. Integer products wrap modulo 2**bits in any order: exact;
    - gradients (and forward-mode tangents) keep the loop: amax's backward splits a tie's
      gradient evenly, the loop's gives it by each step's choice;
    - a value must fit the element as the loop's step does: the result of `f(out[k], v)` stored
      (leading 1s dropped) or, for `*=`, updated in place (no dimension added); Python's max /
      min compares one element with one element."""
    if py or not isinstance(vals, torch.Tensor):
        raise GuardFailed("a per-bin max / min / product of Python numbers (the loop decides with its own types)")
    if target.is_complex() or vals.is_complex():
        raise GuardFailed("a per-bin max / min / product of complex values (no order: the loop raises; "
                          "a complex product's inf and NaN follow each step)")
    if torch.is_grad_enabled() and (target.requires_grad or vals.requires_grad):
        raise GuardFailed("a per-bin max / min / product with gradients (the loop's follow each step's choice "
                          "among ties, scatter_reduce's split them)")
    if _forward_ad._current_level >= 0 and any(_forward_ad.unpack_dual(t).tangent is not None
                                               for t in (target, vals)):
        raise GuardFailed("forward-mode AD (dual tensors): the loop runs as written", data=True)
    if op == "*" and target.dtype in _HALF:
        raise GuardFailed(_HALF_SUM)
    kept = _scatter_rows(target, vals, idxs, mask, op, py)
    if kept is None:
        return None
    vals, idxs, n = kept
    slot = tuple(target.shape[len(idxs):])
    v = tuple(vals.shape[1:])
    if form == "builtin" and (math.prod(slot) != 1 or math.prod(v) != 1):
        raise GuardFailed("Python's max / min of tensors of several elements (the loop raises)")
    step = _step_dtype(target.dtype, not slot, vals.dtype, not v)
    if step != target.dtype:
        raise GuardFailed(f"each step computes in {step} and stores into {target.dtype} (the loop converts "
                          "every step's result)")
    while len(v) > len(slot) and v[0] == 1 and form != "inplace":
        v = v[1:]      # (the store drops leading 1s; an in-place `*=` raises instead, as the loop does)
    if len(v) > len(slot) or any(a != b and a != 1 for a, b in zip(v, slot[len(slot) - len(v):])):
        raise GuardFailed("a value that does not fit the element it updates (the loop raises)")
    norm = _scatter_indices(target, idxs)
    lin = norm[0]
    for d in range(1, len(norm)):
        lin = lin * target.shape[d] + norm[d]
    if tuple(vals.shape[1:]) != slot:
        vals = vals.reshape(n, *([1] * (len(slot) - len(v))), *v).expand(n, *slot)
    if vals.dtype != target.dtype:
        vals = vals.to(target.dtype)
    if target.is_floating_point():
        if op == "*":
            _bin_products_in_range(target, vals, lin, len(idxs))
        else:
            if (form == "builtin" or not target.is_cpu) and (bool(torch.isnan(vals).any())
                                                            or bool(torch.isnan(target).any())):
                raise GuardFailed("NaN in a per-bin max / min (Python's max / min skip or keep it by the operands' "
                                  "order)", data=True)
            zv, zt = vals == 0, target == 0
            sv, st = torch.signbit(vals), torch.signbit(target)
            if bool((zv & sv).any() | (zt & st).any()) and bool((zv & ~sv).any() | (zt & ~st).any()):
                raise GuardFailed("+0.0 and -0.0 in a per-bin max / min (a tie keeps one operand by the order "
                                  "of the loop's steps)", data=True)
    return "reduce", (lin, vals)


def _magnitude(t):
    """|t| in float64: of a complex tensor its modulus, taken in complex128 (`.double()` would
    drop the imaginary part, and complex64's own modulus of 3e38 + 3e38j is inf), of a real one
    taken after the cast (abs of int64's minimum wraps)."""
    return t.to(torch.complex128).abs() if t.is_complex() else t.double().abs()


def _bin_products_in_range(target, vals, lin, k):
    """_products_in_range for each element of a scatter's bins: the magnitudes of the start
    and of the factors a bin gets, multiplied only above 1 or only below 1, stay within the
    normal range, so no order of the steps overflows or underflows."""
    lg = torch.log2(_magnitude(vals))
    lg = torch.where(torch.isfinite(lg), lg, 0.0)          # (zeros, inf and NaN: the same in any order)
    ls = torch.log2(_magnitude(target.detach()).flatten(0, k - 1))
    ls = torch.where(torch.isfinite(ls), ls, 0.0)
    up = ls.clamp(min=0).index_add_(0, lin, lg.clamp(min=0))
    down = ls.clamp(max=0).index_add_(0, lin, lg.clamp(max=0))
    fi = torch.finfo(target.dtype)
    if bool(up.max() > math.log2(fi.max) - 2) or bool(down.min() < math.log2(fi.tiny) + 2):
        raise GuardFailed("a per-bin product whose partial products may overflow or underflow (the loop's "
                          "order of steps decides where it reaches inf or 0)", data=True)


def _cat_accum(acc, vals, dim, mask, tok=None):
    if mask is not None:
        vals = _select(vals, mask)
    if vals.shape[0] == 0:
        return _UNCHANGED
    if not isinstance(acc, torch.Tensor) or vals.dim() < 2 or dim >= vals.dim() - 1:
        raise GuardFailed("torch.cat of 0-d pieces or along a missing dimension (the loop raises)")
    flat = vals.movedim(0, dim).flatten(dim, dim + 1) if dim else vals.flatten(0, 1)
    if (acc.dim() == 1 and acc.shape[0] == 0 and not acc.requires_grad and tok is not None
            and acc.device == flat.device and torch.promote_types(acc.dtype, flat.dtype) == flat.dtype
            and flat.is_contiguous() and not tok.shares_input(flat)):
        # `torch.cat([torch.tensor([]), pieces])` skips the empty start: the new batch itself is
        # the result (the copy would give the same values)
        return _owned(flat)
    return torch.cat([acc, flat], dim=dim)


FunctionRuntime.scatter_prep = staticmethod(_scatter_prep)
FunctionRuntime.scatter_join = staticmethod(_scatter_join)
FunctionRuntime.cat_accum = staticmethod(_cat_accum)


_WHOLE_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32)


def _scatter_whole(target, vals, idxs, op, n):
    """`target[i] += v` over every iteration as one out-of-place `index_add` whose result is
    copied into `target` at the commit (where the target is no larger than the values: the
    copy is cheap), instead of checking the indices' range first (a reduction and two reads
    back to the host: a fifth of the whole call on the dev cases). An index out of range, or
    a negative one (the loop wraps it, index_add refuses it), raises before anything is
    written: then None, and the checked path decides. Only for one index on dimension 0 with
    `+=` / `-=`, values already of the target's shape and dtype."""
    if op not in ("+", "-") or len(idxs) != 1 or target.dim() < 1 or type(target) is not torch.Tensor \
            or not target.is_cpu or target.numel() == 0:
        return None     # (on a GPU an index out of range is a device-side assert, not an exception)
    i = idxs[0]
    if i.dim() != 1 or i.dtype not in (torch.int64, torch.int32) or vals.dtype != target.dtype \
            or target.dtype not in _WHOLE_DTYPES or vals.shape[1:] != target.shape[1:] \
            or target.numel() > vals.numel():
        return None
    try:
        whole = torch.index_add(target, 0, i, vals, alpha=-1 if op == "-" else 1)
    except (IndexError, RuntimeError):   # (which one depends on the shapes: "index out of range", "out of bounds")
        return None
    return ("whole", whole)


_SUM_DTYPES = (torch.float32, torch.float64)


def _nest_sum(target, vals, idxs, keep, op, tok, zeros=False):
    """A loop nest's `target[i, j] += v` (the subscript is distinct level indices, in the
    order `keep` gives): the sum of the values over the levels the subscript leaves out, added
    into the rows the kept levels cover at the commit (`out[i] += x[i, j] ** 2` as a sum over
    j, not a scatter of every value). The sum reassociates the loop's additions, as every
    reduction here does. Where this cannot give the loop's result (see _nest_region) the
    scatter decides instead."""
    sizes = tuple(k for _, _, k in tok.levels)
    lead = len(sizes)
    if type(vals) is torch.Tensor and vals.dim() >= lead and vals.shape[:lead] == sizes:
        left = tuple(lv for lv in range(lead) if lv not in keep)
        s = vals.sum(left) if left else vals
        order = sorted(keep)
        if list(keep) != order:
            s = s.permute(*[order.index(lv) for lv in keep], *range(len(keep), s.dim()))
        prepared = _nest_region(target, s, keep, tok, zeros)
        if prepared is not None:
            return prepared
    return _scatter_prep(target, vals.flatten(0, lead - 1), [i.flatten(0, lead - 1) for i in idxs], op, None)


def _nest_product(target, tok, factors, keep, op, zeros=False):
    """`C[i, j] += A[i, k] * B[k, j]` (a product of two slices of one element each, summed over
    the levels the subscript leaves out, each read by both) as one einsum over the tensors
    themselves, without the product of every iteration: each product is formed once, as in the
    loop, and only their sum is reassociated. None where it does not apply (the body and
    nest_sum decide)."""
    if tok.levels is None or type(target) is not torch.Tensor or target.dtype not in _SUM_DTYPES:
        return None
    if target.dtype == torch.float32 and _reduced_matmul(target.device):
        return None      # TF32 / bfloat16 products: the loop multiplies in full float32
    inputs = tok._inputs()
    operands, specs = [], []
    for j in factors:
        t = inputs[j][0]
        spec = tok.raw[j][1]
        letters = einsum_letters(spec)
        if type(t) is not torch.Tensor or t.dtype != target.dtype or t.device != target.device \
                or t.dim() != len(spec) or not letters:
            return None
        operands.append(t)
        specs.append(letters)
    out = einsum_letters([(lv, d, 0) for d, lv in enumerate(keep)])
    for lv in range(len(tok.levels)):
        x = einsum_letters([(lv, 0, 0)])
        if lv not in keep and not (x in specs[0] and x in specs[1]):
            # a level summed over that one factor lacks: the einsum would sum that factor first
            # (a distributed product: inf * (a - a) where the loop has inf * a - inf * a, NaN),
            # or drop a level neither factor reads (the loop adds its values once per step)
            return None
    s = _matrix_product(operands, specs, out)
    if s is None:
        s = _vf_einsum(",".join(specs) + "->" + out, operands)
    prepared = _nest_region(target, s, keep, tok, zeros)
    if prepared is not None:
        tok.rt.ran[tok.loop_id] = "einsum"
        tok.rt._note(tok.loop_id, "vectorized", "einsum", getattr(tok, "estimate", None))
    return prepared


def _matrix_product(operands, specs, out):
    """The einsum of two operands written as `@` where it is one (matrix times matrix or vector,
    one index summed over, each other index in one operand and the result): a third of the
    einsum's fixed cost. None where it is not."""
    a, b = operands
    la, lb = specs
    common = set(la) & set(lb)
    if len(common) != 1 or len(set(la)) != len(la) or len(set(lb)) != len(lb) or len(la) > 2 or len(lb) > 2:
        return None     # (`@` of a 3-d operand contracts its last index, whichever that is: fuzz store2 660292)
    c = common.pop()
    free = [x for x in la + lb if x != c]
    if c in out or sorted(free) != sorted(out) or len(out) != len(free):
        return None
    if len(la) == 2:
        a = a if la[1] == c else a.t()       # (rows, c)
    if len(lb) == 2:
        b = b if lb[0] == c else b.t()       # (c, columns)
    r = a @ b                                # indices: a's free one, then b's
    return r if out == "".join(free) else r.t()


# (torch.einsum's own wrapper adds argument checks and, from three operands, a path search)
_vf_einsum = getattr(getattr(torch, "_VF", None), "einsum", None) or (lambda eq, ops: torch.einsum(eq, *ops))


_FULL_FP32 = ("none", "ieee")     # a backend's fp32_precision that keeps float32 ("none": the default)
# torch.backends.<backend>.matmul.fp32_precision reads this through a module __getattr__ (~1 us);
# the guard reads it on every call of a matmul loop
_fp32_precision = getattr(torch._C, "_get_fp32_precision_getter", None)


def _reduced_matmul(device) -> bool:
    """Whether float32 matrix products on `device` may round below float32: TF32 on CUDA,
    TF32 or bfloat16 through oneDNN on CPU (`set_float32_matmul_precision("high" / "medium")`,
    `allow_tf32`). Newer torch keeps the setting per backend (`torch.backends.cuda.matmul.
    fp32_precision`, `torch.backends.mkldnn.matmul.fp32_precision`, which the older calls set
    too), and its older getters raise once the newer API was used: they are read only where the
    newer one is missing. Where the setting cannot be read, the answer is yes."""
    return _reduced_fp32(device.type)


def _reduced_fp32(kind: str) -> bool:
    """_reduced_matmul for a device type ("cpu", "cuda", ...)."""
    try:
        if _fp32_precision is not None:
            if kind == "cuda":
                return _fp32_precision("cuda", "matmul") not in _FULL_FP32
            if kind == "cpu":
                return _fp32_precision("mkldnn", "matmul") not in _FULL_FP32
            # another backend: any reduced setting
            return any(_fp32_precision(b, op) not in _FULL_FP32
                       for b, op in (("cuda", "matmul"), ("mkldnn", "matmul"), ("generic", "all")))
        if kind == "cuda" and torch.backends.cuda.matmul.allow_tf32:
            return True
        return torch.get_float32_matmul_precision() != "highest"
    except Exception:
        return True


_REDUCIBLE = (torch.float32, torch.complex64, torch.float16, torch.bfloat16)


def _reduced_product(dtype, kind: str) -> bool:
    """Whether a batched matrix product (matmul, bmm, einsum) of `dtype` on a device of type
    `kind` may compute at lower precision than the loop's own per-iteration products. The
    loop's `torch.dot` (BLAS dot, cublasSdot) and `outer` (a multiplication) never round through
    TF32 or bfloat16, and whether its `mv` or `mm` at one iteration's sizes would is the BLAS
    library's choice per shape: so float32 and complex64 under a reduced float32 matmul
    precision, and, on CUDA, float16 / bfloat16 where cuBLAS may reduce in reduced precision or
    accumulate in float16 (the loop's dot accumulates in float32)."""
    if dtype is torch.float32 or dtype is torch.complex64:
        return _reduced_fp32(kind)
    if kind == "cuda" and (dtype is torch.float16 or dtype is torch.bfloat16):
        m = torch.backends.cuda.matmul
        try:
            if dtype is torch.float16:
                return bool(m.allow_fp16_reduced_precision_reduction) or bool(getattr(m, "allow_fp16_accumulation", False))
            return bool(m.allow_bf16_reduced_precision_reduction)
        except Exception:
            return True
    return False


def _reduced_products(tensors):
    """The matmul strategy's guard: a GuardFailed (the loop runs) where the tensors the loop
    indexes have a dtype and device whose batched matrix products are less precise than the
    loop's (_reduced_product). Every per-iteration operand of a product is one of their slices
    (matmul.analyse), and every mode of the strategy (direct products, the batched body, vmap)
    multiplies them as one matmul: so the check is here, once per call, and not in one mode. A
    later call under other settings tries again."""
    seen = None
    for t in tensors:
        dtype = t.dtype
        if dtype in _REDUCIBLE:
            at = (dtype, "cpu" if t.is_cpu else t.device.type)
            if at != seen:          # (the settings are read once per dtype and device type in a row)
                seen = at
                if _reduced_product(*at):
                    raise _precision_refusal(dtype)


def _precision_refusal(dtype):
    """The refusal of _reduced_products and runtime.mm: the loop runs this call."""
    e = GuardFailed(f"matrix products of {str(dtype).replace('torch.', '')} under reduced-precision matmul "
                    "settings (TF32 / bfloat16 / reduced-precision reductions) may round where the loop's "
                    "per-iteration products do not", data=True)
    e.final = True     # no mode multiplies otherwise; `data`: the settings may change before the next call
    return e


def _nest_region(target, s, keep, tok, zeros=False):
    """("sum", (the rows of `target` the kept levels cover, `s` shaped to add into them)), or
    None where adding the sums gives other values than the loop's additions: another dtype
    than float32 / float64, a level starting below 0 or ending outside the tensor (the loop
    wraps or raises), a -0.0 in the rows (the sum starts at +0.0, so -0.0 plus only -0.0
    values would end +0.0 where the loop keeps -0.0), memory shared between elements, or
    values that do not broadcast to one element."""
    nd = len(keep)
    if (target.dtype not in _SUM_DTYPES or s.dtype != target.dtype or target.dim() < nd
            or s.device != target.device
            or not (target.is_contiguous() or torch._debug_has_internal_overlap(target) == 0)):
        return None
    rows = []
    for d, lv in enumerate(keep):
        st, sp, k = tok.levels[lv]
        if st < 0 or st + (k - 1) * sp >= target.shape[d]:
            return None
        rows.append(slice(st, st + (k - 1) * sp + 1, sp))
    region = target[tuple(rows)]
    slot = region.shape[nd:]
    v = s.shape[nd:]
    if len(v) > len(slot):
        # `out[i] += t` with t of more dimensions than the element (even leading 1s): the
        # loop's in-place add raises
        raise GuardFailed("a value with more dimensions than the element it is added to (the loop raises)",
                          data=True)
    if not zeros:     # (a torch.zeros made right before the loop holds no -0.0)
        neg = torch.signbit(region)
        if bool(neg.any()) and bool((neg & (region == 0)).any()):
            return None
    s = s.reshape(*s.shape[:nd], *([1] * (len(slot) - len(v))), *v)
    for a, b in zip(s.shape, region.shape):     # (the same rank now)
        if a != b and a != 1:
            return None
    return ("sum", (region, s))


FunctionRuntime.nest_sum = staticmethod(_nest_sum)
FunctionRuntime.nest_product = staticmethod(_nest_product)


def _scatter_commit(target, prepared, op):
    if prepared is None:
        return
    idx, vals = prepared
    if idx == "masked":
        start, rows = vals     # _masked_rows: the consecutive rows a boolean mask per row wrote into
        target.narrow(0, start, rows.shape[0]).copy_(rows)
        return
    if idx == "list":
        for k, v in enumerate(vals.tolist()):    # (_list_scatter: each bin's sum, in Python ints)
            if v:
                target[k] += v
        return
    if idx == "reduce":
        # _scatter_reduce_prep: one scatter_reduce_ over the indexed dimensions flattened into one
        lin, vals = vals
        k = target.dim() - (vals.dim() - 1)
        flat = target if k == 1 else (target.view(-1, *target.shape[k:]) if target.is_contiguous()
                                      else target.reshape(-1, *target.shape[k:]).clone())
        index = lin.view(-1, *([1] * (vals.dim() - 1))).expand_as(vals)
        flat.scatter_reduce_(0, index, vals, _REDUCES[op], include_self=True)
        if flat is not target and not target.is_contiguous():
            target.copy_(flat.view(target.shape))
        return
    if idx == "whole":
        target.copy_(vals)     # _scatter_whole: the updated tensor, made out of place
        return
    if idx == "rows":
        start, cols, v = vals  # _scatter_prep: one column per consecutive row
        target.narrow(0, start, cols.shape[0]).scatter_(1, cols.unsqueeze(1), v.unsqueeze(1))
        return
    if idx == "sum":
        region, s = vals       # _nest_sum: the sums, added into the rows the nest covers
        if op == "-":
            region.sub_(s)
        else:
            region.add_(s)
        return
    if op and len(idx) == 1 and target.dim() >= 1:
        target.index_add_(0, idx[0], vals)   # the same accumulation, a faster kernel on one dimension
    else:
        target.index_put_(idx, vals, accumulate=bool(op))


FunctionRuntime.scatter_commit = staticmethod(_scatter_commit)


try:  # vmap's own primitives: torch.func.vmap spends ~20 us per call on pytrees and checks
    from torch._C import _functorch as _ft
    from torch._functorch import predispatch as _pre
    _pre.lazy_load_decompositions
    _ft._add_batch_dim, _ft._remove_batch_dim, _ft._vmap_increment_nesting, _ft._vmap_decrement_nesting
except (ImportError, AttributeError):  # pragma: no cover - other torch versions: the public API
    _ft = None


def _tracked(t) -> bool:
    """Whether autograd records `t`, a tensor under vmap or not (a batched tensor's own
    `requires_grad` is False: the wrapped one's is the answer). Without torch's vmap
    primitives: as it says, or True where it cannot tell."""
    if _ft is None:
        return t.requires_grad or type(t) is not torch.Tensor
    while _ft.is_batchedtensor(t):
        t = _ft.get_unwrapped(t)
    return t.requires_grad


def vmap_call(fn, args, dims, n):
    """`torch.func.vmap(fn, in_dims=dims)(*args)` for flat tensor arguments and a tuple of
    tensor outputs (batched along dim 0), without the public wrapper's pytree handling."""
    if _ft is None:
        return torch.func.vmap(fn, in_dims=tuple(dims), out_dims=0)(*args)
    _pre.lazy_load_decompositions()
    # under a torch-function mode (export's pre-dispatch tracing) use the wrappers that see it
    m = _pre if torch._C._is_torch_function_mode_enabled() else _ft
    level = m._vmap_increment_nesting(n, "error")
    if _quiet_fallback is not None:
        # the loop calls each operation as it is: no "performance drop ... batching rule" warning
        # for the operations vmap runs one row at a time (the setting has no getter; its default is on)
        _quiet_fallback(False)
    levels = _own_levels()
    levels.append((level, n, m))
    try:
        add = m._add_batch_dim
        outs = fn(*[a if d is None else add(a, d, level) for a, d in zip(args, dims)])
        return tuple(m._remove_batch_dim(o, level, n, 0) for o in outs)
    finally:
        levels.pop()
        m._vmap_decrement_nesting()
        if _quiet_fallback is not None:
            _quiet_fallback(True)


_quiet_fallback = getattr(getattr(torch._C, "_functorch", None), "_set_vmap_fallback_warning_enabled", None)
_OWN = threading.local()


def _own_levels() -> list:
    """(level, batch size, primitives) of each vmap_call this thread is inside, outermost first."""
    levels = getattr(_OWN, "levels", None)
    if levels is None:
        levels = _OWN.levels = []
    return levels


def own(t, *receivers):
    """A tensor the iteration made and then writes into (`t = torch.zeros(C)`, `t[y[i]] = 1`:
    analysis.loops._fresh_stores), with a row of its own per iteration. Under vmap a tensor made
    from no batched value is one tensor for every row, and a store of a row's value into it
    cannot be batched; it becomes n copies, batched at each vmap_call level it lacks (the loop
    makes a new one per iteration: the same values, in memory no one else holds). Outside
    vmap_call (the one-time check, a direct mode, an iteration run alone) `t` itself.
    `receivers`: the objects whose methods made `t` (analysis.loops._receivers), which must be
    tensors (another object's `normalize` or `clone` may return memory the caller holds)."""
    for r in receivers:
        if not isinstance(r, torch.Tensor):
            raise GuardFailed(f"a value the iteration writes into comes from a method of a {_type_name(r)}, not a "
                              "tensor (it may return memory the caller holds)")
    if not isinstance(t, torch.Tensor):
        if type(t) in (int, float, complex, bool):
            return t
        # (`[x[i]] * 2`, `lst + []`: a new container whose elements may be the caller's tensors)
        raise GuardFailed(f"a write into a {_type_name(t)} the iteration made (its elements may be tensors "
                          "of the caller's, which the loop writes into once per iteration)")
    if t.requires_grad and t.is_leaf:
        # (`torch.zeros(4, requires_grad=True)`: a leaf, on which the loop's in-place write raises,
        # or, under no_grad, a tensor the loop keeps with requires_grad)
        raise GuardFailed("a tensor the iteration made that requires grad as a leaf, written into")
    levels = getattr(_OWN, "levels", None)
    if not levels or _ft is None:
        return t
    have = _ft.maybe_get_level(t)
    for level, n, m in levels:
        if level > have:
            t = m._add_batch_dim(_rows_like(t, n), 0, level)
    return t


FunctionRuntime.own = staticmethod(own)


def _rows_like(t: torch.Tensor, n: int) -> torch.Tensor:
    """n copies of `t`, each laid out as `t` is (a transposed zeros stays transposed, as the
    loop's tensor is). Refuses a tensor whose elements share memory (`zeros(3).expand(4, 3)`:
    a write to one row is a write to all of them in the loop) or leave gaps between them."""
    if t.is_contiguous():
        return t.unsqueeze(0).expand(n, *t.shape).clone(memory_format=torch.contiguous_format)
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.shape[d]))
    dense = t.permute(order)
    if not dense.is_contiguous():
        raise GuardFailed("a tensor the iteration made whose elements share memory or leave gaps (an "
                          "expanded or strided view), written into")
    rows = dense.unsqueeze(0).expand(n, *dense.shape).clone(memory_format=torch.contiguous_format)
    back = [0] * t.dim()
    for k, d in enumerate(order):
        back[d] = k + 1
    return rows.permute(0, *back)


def _vmap_reason(e: Exception) -> str:
    """vmap's refusal of a body, in words (torch's own text is about its internals)."""
    msg = str(e)
    if ".item()" in msg:
        return ("a Python number read from a per-iteration tensor inside the body (`.item()`, `int(t)`, a slice "
                "bound or a shape taken from a tensor) has no form under vmap")
    if "data-dependent control flow" in msg or "Boolean value of Tensor" in msg:
        return "a branch on a per-iteration tensor's value (`if t:`) has no form under vmap"
    return msg.splitlines()[0] if msg else type(e).__name__


def _type_name(v) -> str:
    """`tuple`, `torch.return_types.sort`: a value's type as a person reads it."""
    t = type(v)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _as_tensor(v):
    """A Python number returned by a body, in Python's own precision (a float is a double)."""
    tp = type(v)
    # (torch.full makes a 0-d tensor in half the time of torch.tensor / as_tensor: 1 us)
    if tp is float:
        return torch.full((), v, dtype=torch.float64)
    if tp is bool or tp is int and -(1 << 63) <= v < (1 << 63):
        return torch.full((), v)      # (int64, bool: as_tensor's dtypes)
    if isinstance(v, float):
        return torch.tensor(v, dtype=torch.float64)
    if isinstance(v, complex):
        return torch.tensor(v, dtype=torch.complex128)
    if isinstance(v, (tuple, list)):
        # (`torch.sort(x[i])`'s values and indices hoisted by fission: one value per iteration is needed)
        raise GuardFailed(f"a value computed for every iteration is a {_type_name(v)} of several values, "
                          "not one tensor (the loop runs)")
    return torch.as_tensor(v)


def _vmapped(f, dims, n):
    """`f` vmapped over one loop level (nests apply one per level)."""
    return lambda *a: vmap_call(f, a, dims, n)


_CHUNKABLE = ("broadcast", "vmap", "reduction", "mask", "where")
# `x op= v` by the operator's class name (FunctionRuntime.updated)
_AUG_OPS = {"Add": operator.add, "Sub": operator.sub, "Mult": operator.mul, "Div": operator.truediv,
            "FloorDiv": operator.floordiv, "Mod": operator.mod, "Pow": operator.pow, "MatMult": operator.matmul,
            "BitAnd": operator.and_, "BitOr": operator.or_, "BitXor": operator.xor, "LShift": operator.lshift,
            "RShift": operator.rshift}
_MEMORY_FLOOR = 64 << 20   # below this, no budget is looked up (the default one is far larger)
# on the CPU, a batch whose iterations would create more than _FRESH_SPLIT bytes they do not keep
# (temporaries, not results: the loop lets them go each iteration, and its next one reuses the
# same memory, in cache) runs in chunks of about _FRESH_CHUNK bytes. Measured on this machine
# (2 MiB of L2 per core; probeS's batch-hard triplet loss, 3000 anchors, 2.4 GB of temporaries,
# batched body): all at once 1125 ms, chunks of 128 MB 1127 ms, 32 MB 992 ms, 16 MB 883 ms, 8 MB
# 363-384 ms, 4 MB 445 ms, 1 MB 520 ms; the loop 350-395 ms
_FRESH_SPLIT, _FRESH_CHUNK = 64 << 20, 8 << 20
# outputs that keep one iteration's value at a time in the loop (a running value, an extreme, the
# last one): a batch of all the iterations' values holds what the loop never did (Token._weigh)
_ONE_AT_A_TIME = frozenset({"accum", "best", "last"})


def default_budget(device) -> int:
    """Half the memory free on `device` now (CUDA: the driver's count; CPU: available RAM)."""
    try:
        if device is not None and device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0] * 0.5)
        import os
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * 0.5)
    except (AttributeError, ValueError, OSError, RuntimeError):
        return 0


class _ByteCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the bytes of the storages the operations under it create."""

    @classmethod
    def _should_skip_dynamo(cls):
        return False   # else torch wraps __torch_dispatch__ with a dynamo guard: a 2 s import of dynamo

    def __init__(self, inputs):
        super().__init__()
        self.total = 0
        self.seen = {_storage(t) for t in inputs if isinstance(t, torch.Tensor)}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # a view shares its input's storage: tensors the body reads without taking them as
        # arguments (a closure's, a global's) are not new memory either
        for t in torch.utils._pytree.tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor):
                self.seen.add(_storage(t))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                p = _storage(t)
                if p not in self.seen:
                    self.seen.add(p)
                    self.total += t.untyped_storage().nbytes()
        return out


def _switch_on(name):
    from ._config import env
    return env(name).strip().lower() not in ("0", "false", "no", "off")


def _nest_in_dims(spec, levels):
    """vmap in_dims per loop level of a tensor indexed at `spec` ((level, position, offset), ...):
    where that level's index sits once the outer levels' dimensions are gone, or None."""
    dims = []
    for lv in range(levels):
        hit = [p for l2, p, _ in spec if l2 == lv]
        if not hit:
            dims.append(None)
            continue
        p = hit[0]
        dims.append(p - sum(1 for l2, p2, _ in spec if l2 < lv and p2 < p))
    return tuple(dims)


_PY_ARITH_OPS = (ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


def _py_arith(plan) -> bool:
    """Whether a loop's Python numbers may meet `/`, `//`, `%`, `**` or pow (FunctionRuntime.py_arith):
    a body with `.item()` (or Python numbers unpacked from rows) and one of them, or the index
    multiplied, shifted or raised in arithmetic of ints alone."""
    numbers = plan.items or any(u[2] for u in plan.space.unpack)
    indices = set(plan.value_indices) | ({plan.space.index} if plan.index_as_value and plan.space.index else set())
    if not numbers and not indices:
        return False
    if indices and inner_int_growth([ast.parse(text) for text in plan.body], indices):
        return True
    for text in plan.body:
        for n in fastast.walk(ast.parse(text)):
            if numbers and isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(
                    n.func, "id", None)) in ("pow", "float_power"):
                return True     # (`torch.pow(x[i], e[i].item())`: a tensor's pow special-cases a number)
            if not isinstance(n, (ast.BinOp, ast.AugAssign)):
                continue
            if numbers and isinstance(n.op, _PY_ARITH_OPS):
                return True
            # the index in int arithmetic of its own (`i * 10 ** 18`, `2 ** i`): Python's ints
            # do not wrap
            if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Pow, ast.LShift)) and all(
                    isinstance(m, (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop,
                                   ast.Load)) for m in fastast.walk(n)) and any(
                    isinstance(m, ast.Name) and m.id in indices for m in fastast.walk(n)) and all(
                    m.id in indices for m in fastast.walk(n) if isinstance(m, ast.Name)):
                return True
    return False


_WIDE_FLOATS = frozenset({torch.float32, torch.float64})
_HALF = frozenset({torch.float16, torch.bfloat16})
_HALF_SUM = ("a running sum or product in float16 / bfloat16: the loop rounds to half precision at every step "
             "(2048 + 1 stays 2048, a partial sum can overflow), which a batched sum does not reproduce")


def _signed_zero_sum(total, o, op):
    """A sum over the rows of `o` that a -0.0 start adds (op "+") or subtracts ("-"): -0.0 where
    it is zero and the loop would keep -0.0 (see _minus_zero_rest), torch's +0.0 elsewhere."""
    sign = torch.signbit(o)
    sign = sign.all(0) if op == "+" else sign.any(0)
    return torch.where((total == 0) & sign, torch.tensor(-0.0, dtype=total.dtype, device=total.device), total)


def _minus_zero_start(acc) -> bool:
    """Whether a running sum starts at -0.0: a Python float -0.0 (a free test), or a float
    tensor holding -0.0 somewhere (_minus_zero)."""
    if type(acc) is float:
        return acc == 0 and math.copysign(1.0, acc) < 0
    return isinstance(acc, torch.Tensor) and acc.is_floating_point() and _minus_zero(acc)


def _minus_zero(acc: torch.Tensor) -> bool:
    """Whether a tensor start holds -0.0 (one Python read for a 0-d CPU tensor, whose .item()
    costs a tenth of signbit().any())."""
    if acc.dim() == 0 and acc.is_cpu:
        v = acc.item()
        return v == 0 and math.copysign(1.0, v) < 0
    return bool(torch.signbit(acc).any())


def _minus_zero_rest(o, op) -> bool:
    """Whether the sum of `o`'s values that the loop adds to (op "+") or subtracts from (op
    "-") a -0.0 start must count as -0.0 where it is zero: the loop keeps -0.0 only while it
    adds -0.0 values (or subtracts +0.0 ones), but torch's sum starts at +0.0. So -0.0 where
    every value added is -0.0, or where a value subtracted is."""
    sign = torch.signbit(o)
    return bool(sign.all()) if op == "+" else bool(sign.any())


def _nest_grad_infinities(tensors):
    """A loop nest's batched body broadcasts a value one level does not change across that
    level, and autograd sums its gradient there before multiplying: `a * (c0 + c1)` where the
    loop adds `a * c0 + a * c1`. That is the loop's sum, reassociated, until a factor is
    infinite: then the loop's inf - inf is NaN where the batch gives inf. With gradients and an
    infinite value in a tensor that requires grad (or beside one), the loop runs."""
    if not any(t.requires_grad for t in tensors):
        return
    for t in tensors:
        if t.is_floating_point() and bool(torch.isinf(t).any()):
            raise GuardFailed("a loop nest with gradients and an infinite input value (the batch's "
                              "gradient sums would give inf where the loop's give NaN)", data=True)


_UNKNOWN = object()


def _outside_value(source, names, values):
    """The value of `source` ("w", "self.scale") read from outside the loop, looked up
    without running any code (no property, no __getattr__ beyond a module's parameters and
    buffers); _UNKNOWN where that is not possible. A tensor's own attributes (`w.T`) stand
    for the tensor."""
    if source in names:            # (an indexed tensor's source, `self.w`, as the plan spells it)
        k = names.index(source)
        return values[k] if k < len(values) else _UNKNOWN
    head, *rest = source.split(".")
    try:
        v = values[names.index(head)]
    except (ValueError, IndexError):
        return _UNKNOWN
    return _peek(v, rest)


def _peek(v, path):
    """`v.a.b` / `v["k"]` / `v[0]` along `path` (attribute names, and ("key", k) for a constant
    subscript of a dict, list or tuple) without running any code; _UNKNOWN where that is not
    possible. A tensor on the way stands for the rest of the path."""
    for step in path:
        if isinstance(v, torch.Tensor):
            return v
        if type(step) is tuple:
            key = step[1]
            if type(v) is dict:
                v = v.get(key, _UNKNOWN)
            elif (type(v) is list or type(v) is tuple) and type(key) is int and -len(v) <= key < len(v):
                v = v[key]
            else:
                return _UNKNOWN
        elif isinstance(v, torch.nn.Module):
            if hasattr(v, "parametrizations"):
                return _UNKNOWN        # (torch.nn.utils.parametrize: its weights are computed on access)
            d = v.__dict__
            for table in ("_parameters", "_buffers", "_modules"):
                if step in d.get(table, ()):
                    v = d[table][step]
                    break
            else:
                v = _stored_attr(v, step)
        elif isinstance(v, types.ModuleType):
            v = v.__dict__.get(step, _UNKNOWN)
        else:
            v = _stored_attr(v, step)
        if v is _UNKNOWN:
            return v
    return v


def _inert_value(v) -> None:
    """Refuses an outside value the body may run Python code of a different number of times
    batched than in the loop (probeM): an iterator or generator (each use advances it: the
    batch's trial rows and check would use it up), or an object whose class defines, in Python,
    an operator, a conversion or an element read the body's operations call (`x[i] * o` calls
    `o.__rmul__` once per row in the loop, once on the whole batch: a counter, a changing
    factor, or a non-elementwise rule would give other values)."""
    why = active_value(v)
    if why:
        raise GuardFailed(f"the loop reads a {type(v).__name__} object, {why}: the loop runs")


def _inert_elements(v) -> None:
    """_inert_value of the elements of a list, tuple or dict the body uses (walked, or read by a
    key: `for s in ss`, `ss[k] * x[i]`, `d[key]`), one of each type; one level deep."""
    if type(v) is dict:
        v = list(v.values())
    elif type(v) is not list and type(v) is not tuple:
        return
    for kind in set(map(type, v)):
        if kind not in _PLAIN_SIGS:
            _inert_value(next(e for e in v if type(e) is kind))


def _peek_sig(v, path):
    """The signature entry of a value the loop reads through an outside object (`self.scale`,
    `cfg["eps"]`): its type (a tensor's dtype, rank, requires_grad), so that a value changing
    type between calls is a new signature, checked again. Through a tensor (`w.T`): nothing
    more than the tensor's own entry."""
    if type(v) is torch.Tensor:
        return None
    return _sig(_peek(v, path))


_REWALKABLE = frozenset({list, tuple, range, torch.Tensor})


def _walked_free(plan) -> frozenset:
    """Positions in plan.free of the values an inner loop of the body walks (analysis.loops
    walked_names: `for c in coeffs`, `zip(Ws, bs)`)."""
    from .analysis.loops import walked_names
    free = list(plan.free)
    found = set()
    for text in plan.body:
        for node in fastast.walk(ast.parse(text)):
            if isinstance(node, ast.For):
                for name in walked_names(node.iter) or ():
                    if name in free:
                        found.add(free.index(name))
    return frozenset(found)


_NO_DIRECT = (frozenset(), frozenset())


def _direct_uses(plan) -> tuple:
    """(positions in plan.free, peek keys as _peek_paths gives them) of the outside values the
    body uses as they are: an operand, an argument, an element read, a walk, a value bound to a
    name. Not a value only read through (`self.mean`, `cfg.eps`: its attribute) or called (a
    callee, checked as one): a Dataset's `self`, whose class defines `__len__`, is read through
    alone (probeN)."""
    free = list(plan.free)
    names, paths = set(), set()
    for text in plan.body:
        tree = ast.parse(text)
        parents = {id(c): p for p in fastast.walk(tree) for c in ast.iter_child_nodes(p)}
        for node in fastast.walk(tree):
            if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) or not isinstance(node.ctx, ast.Load):
                continue
            p = parents.get(id(node))
            if isinstance(p, ast.Attribute) and p.value is node or isinstance(p, ast.Call) and p.func is node:
                continue
            if isinstance(node, ast.Name):
                if node.id in free:
                    names.add(free.index(node.id))
                continue
            key = _chain_key(node, free)
            if key is not None:
                paths.add(key)
            if isinstance(node, ast.Subscript):
                # (`o[k]`: the object's element read runs its `__getitem__`)
                base, steps = node.value, []
                while isinstance(base, ast.Attribute):
                    steps.append(base.attr)
                    base = base.value
                if isinstance(base, ast.Name) and base.id in free:
                    if steps:
                        paths.add((free.index(base.id), tuple(reversed(steps))))
                    else:
                        names.add(free.index(base.id))
    return frozenset(names), frozenset(paths)


def _peek_paths(plan) -> tuple:
    """(position in plan.free, path) of the values the body reads through an outside object:
    attribute chains and constant subscripts rooted at a loop-invariant name (at most 8)."""
    free = list(plan.free)
    found = {}
    for text in plan.body:
        tree = ast.parse(text)
        called = {id(n.func) for n in fastast.walk(tree) if isinstance(n, ast.Call)}
        for node in fastast.walk(tree):
            if not isinstance(node, (ast.Attribute, ast.Subscript)) or id(node) in called:
                continue   # (what the loop calls is checked as a callee, on every call)
            key = _chain_key(node, free)
            if key is not None:
                found.setdefault(key, None)
    return tuple(found)[:8]


def _chain_key(node, free) -> tuple | None:
    """(position in `free`, path) of an attribute chain with constant subscripts rooted at an
    outside name (`self.cfg["eps"]`: (k, ("cfg", ("key", "eps")))), or None."""
    path, cur = [], node
    while isinstance(cur, (ast.Attribute, ast.Subscript)):
        if isinstance(cur, ast.Attribute):
            path.append(cur.attr)
        elif isinstance(cur.slice, ast.Constant) and type(cur.slice.value) in (str, int):
            path.append(("key", cur.slice.value))
        else:
            return None
        cur = cur.value
    if isinstance(cur, ast.Name) and cur.id in free:
        return free.index(cur.id), tuple(reversed(path))
    return None


def _stored_attr(v, attr):
    """`v.attr` where reading it runs no code: the instance's own value, a namedtuple's field,
    or a class attribute that is a plain value (no property or other descriptor)."""
    d = getattr(v, "__dict__", None)
    if isinstance(d, dict) and attr in d:
        return d[attr]
    fields = getattr(type(v), "_fields", None)
    if isinstance(v, tuple) and isinstance(fields, tuple) and attr in fields:
        return v[fields.index(attr)]
    for klass in type(v).__mro__:
        if attr in klass.__dict__:
            c = klass.__dict__[attr]
            return _UNKNOWN if hasattr(type(c), "__get__") else c
    return _UNKNOWN


def _shared_gradients(shared, names, values):
    """With gradients on: a batched form computes the body's loop-invariant operations once
    (analysis.shared), so autograd adds the batch's incoming gradients before it multiplies by
    their derivative, where the loop multiplies each iteration's first. Those agree where the
    derivative is finite. So a tensor that requires grad may go through such operations only
    where they all have finite derivatives on finite values, and every value they read is
    finite; anything else keeps the loop."""
    check = False
    for source, safe in shared:
        v = _outside_value(source, names, values)
        if v is _UNKNOWN:
            raise GuardFailed(f"`{source}` is read from outside the loop through code autovec does not run to look "
                              "(a property, a computed attribute): with gradients on, the batch would compute it "
                              "once where the loop computes it every iteration")
        if safe is None:
            continue                 # a stored value, read as it is
        if not isinstance(v, torch.Tensor) and _grad_reachable(v):
            # a list, dict or object holding such a tensor (`ws[0].sqrt()`, `pd["w"]`): the loop runs
            raise GuardFailed(f"`{source}` holds a tensor that requires grad and goes through loop-invariant "
                              "operations (the batch would compute them once)")
        if isinstance(v, torch.Tensor) and v.requires_grad:
            if not safe:
                raise GuardFailed(
                    f"`{source}` requires grad and goes through a loop-invariant operation whose derivative can "
                    "be infinite (sqrt, log, pow, exp, a division, a helper, ..): the batch computes it once and "
                    "autograd would add the iterations' gradients before multiplying by it, which gives ±inf "
                    "where the loop gives NaN")
            if v.dtype == torch.float16:
                # (the batch's sum of the iterations' gradients, in float16, passes 65504 at a few
                # large terms, where the loop's products by the derivative (0 for a saturated
                # sigmoid) stay finite: inf * 0, NaN, where the loop gives 0; probeY)
                raise GuardFailed(f"`{source}` is float16, requires grad and goes through loop-invariant "
                                  "operations: the batch would add the iterations' gradients in float16 before "
                                  "multiplying by their derivative, which overflows where the loop's products do not")
            check = True
    if check:
        for source, safe in shared:
            if safe is None:
                continue
            v = _outside_value(source, names, values)
            if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()) \
                    and not bool(torch.isfinite(v).all()):
                raise GuardFailed(f"`{source}` holds inf or NaN and goes through loop-invariant operations with "
                                  "a tensor that requires grad (their gradients would differ from the loop's)",
                                  data=True)


def _callee_gradients(calls):
    """With gradients on, the callables a loop calls: a helper or a custom module's forward that
    puts a tensor requiring grad (a global, a closure's, a parameter) through operations with a
    possibly infinite derivative (analysis.shared.function_unsafe) would run them once on the
    batch where the loop runs them every iteration (see _shared_gradients): the loop runs. (A
    plain helper's verdict is _reaches_grad's, kept by its pin; the others', _callable_reaches.)"""
    for c in calls:
        if _reaches_grad(c) if _user_code(c) else _callable_reaches(c, 0, False):
            fn = c
            while isinstance(fn, functools.partial):
                fn = fn.func
            fn = getattr(fn, "__func__", fn)
            raise GuardFailed(_CALLEE_GRAD.format(getattr(fn, "__qualname__", type(fn).__name__)))


_CALLEE_GRAD = ("`{}` puts a tensor that requires grad through operations whose derivative can be infinite (or "
                "through code autovec does not look into): the batch would run them once where the loop runs them "
                "every iteration, and autograd would add the iterations' gradients before multiplying")


def _user_code(fn) -> bool:
    return isinstance(fn, types.FunctionType) and not (fn.__module__ or "").startswith("torch")


def _requires_grad(m: torch.nn.Module) -> bool:
    """Whether a module holds a tensor that requires grad: a parameter, a buffer, or a tensor
    kept as a plain attribute (`self.w = w`)."""
    return _grad_reachable(m)


def _module_unsafe(m: torch.nn.Module) -> bool:
    """A module with parameters that require grad whose own code may put them through such
    operations: a parametrized submodule (its weights computed on access), or a custom one
    whose forward does (torch.nn's own modules use their parameters linearly or boundedly)."""
    known = pins.stamped(m)
    unsafe = known.get("unsafe") if known is not None else None
    if unsafe is None:
        unsafe = _code_unsafe(m)
        if known is not None:
            known["unsafe"] = unsafe      # (what its code does; whether it holds grad is read each call)
    return unsafe and _requires_grad(m)


def _code_unsafe(m: torch.nn.Module) -> bool:
    """_module_unsafe's part that reads the module's code, not its tensors."""
    for sub in m.modules():
        if hasattr(sub, "parametrizations"):
            return True
        cls = type(sub)
        if not (cls.__module__ or "").startswith("torch.nn."):
            fwd = getattr(cls, "forward", None)
            if not isinstance(fwd, types.FunctionType) or _method_unsafe(sub, fwd, 0):
                return True
    return False


def _method_unsafe(sub, fn, depth) -> bool:
    """function_unsafe for a custom module's method and the methods of its class it calls as
    `self.name(..)` (submodules are checked on their own by _module_unsafe; a callable kept as
    an attribute, such as a lambda, is not looked into: unsafe)."""
    if depth > 4 or function_unsafe(fn):
        return True
    cls = type(sub)
    for name in self_calls(fn):
        if name in sub.__dict__.get("_modules", {}):
            continue
        f = getattr(cls, name, None)
        if f is None:
            return True
        if isinstance(f, types.FunctionType) and not (f.__module__ or "").startswith("torch") \
                and f is not fn and _method_unsafe(sub, f, depth + 1):
            return True
    return False


def _reaches_grad(fn, anything=False) -> bool:
    """Whether a helper whose code puts outside values through such operations (`anything`:
    whatever its code does) reads a tensor that requires grad (or a module with one) from its
    closure or its globals; nested helpers too, a few levels deep. A helper whose pin holds
    and reads no value that could hold a tensor has its verdict kept (pins)."""
    p = pins.held(fn)
    if p is not None and p.inert:
        got = p.grad.get(anything)
        if got is not None:
            return got
    got = _reach_walk(fn, 0, anything)
    p = p or pins.pin(fn, pure=False)
    if p is not None and p.inert:
        p.grad[anything] = got
    return got


def _reach_walk(fn, depth, anything) -> bool:
    """_reaches_grad's walk: the helper's defaults, closure contents, the globals its code names
    (its nested functions' and lambdas' code too), and the callables it calls through attribute
    chains (`mod.fn(v)`, `Cls.f(v)`), each callable looked into as the loop's own callees are
    (_callable_reaches: a partial's arguments, a bound method's object, a module's parameters,
    a helper's own walk), a few levels deep."""
    if depth > 3:
        return True
    if _grad_reachable([fn.__defaults__ or (), fn.__kwdefaults__ or {}]):
        return True          # (a default argument is an outside value to the helper's body)
    unsafe = anything or function_unsafe(fn)
    seen = [cell.cell_contents for cell in (fn.__closure__ or ()) if _filled(cell)]
    g = fn.__globals__
    seen += [g[name] for name in code_names(fn.__code__) if name in g]
    targets = _call_targets(fn)
    if targets is None:
        return True          # (no source to find what it calls: as though it read one)
    for v in seen + targets:
        if unsafe and not isinstance(v, (types.FunctionType, types.ModuleType)) and _grad_reachable(v):
            return True
        if isinstance(v, torch.nn.Module) and _module_unsafe(v):
            return True
        if v is not fn and callable(v) and not isinstance(v, type) and _callable_reaches(v, depth + 1, anything):
            return True
    return False


def _callable_reaches(c, depth, anything) -> bool:
    """Whether a callable a helper calls puts a tensor that requires grad through operations
    whose derivative can be infinite (`anything`: through anything): as _callee_gradients asks
    it of the loop's own callees, and a helper's own walk (_reach_walk) one level deeper."""
    fn, owner = c, None
    while isinstance(fn, functools.partial):
        if _grad_reachable(list(fn.args) + list(fn.keywords.values())):
            return True
        fn = fn.func
    if isinstance(fn, types.MethodType):
        fn, owner = fn.__func__, fn.__self__
    if isinstance(fn, torch.nn.Module):
        owner, fn = fn, None
    if isinstance(owner, type):
        # (a classmethod: the class's attributes are outside values to its code, `cls.W`)
        if _user_code(fn) and _grad_reachable(list(vars(owner).values())[:64]):
            return True
        owner = None
    if owner is not None and not isinstance(owner, torch.nn.Module):
        # (a method of a plain object: its attributes are outside values to its code, and to the
        # methods it calls on `self`)
        if _user_code(fn) and (anything or _method_unsafe(owner, fn, 0) or fn.__defaults__ or fn.__kwdefaults__) \
                and _grad_reachable(owner):
            return True
        owner = None
    if isinstance(owner, torch.nn.Module):
        if _module_unsafe(owner) or fn is not None and _requires_grad(owner) and _user_code(fn) \
                and (anything or function_unsafe(fn)):
            return True
        # (its own code, or its forward's, reads outside values too: a global tensor; and so do
        # the methods of its class it calls on `self`)
        # (torch.nn's own modules are no user code)
        fn = fn if fn is not None else getattr(type(owner), "forward", None)
        if _user_code(fn) and any(m is not fn and _user_code(m) and _walked(m, depth + 1, anything)
                                  for m in (getattr(type(owner), name, None) for name in self_calls(fn))):
            return True
    return _user_code(fn) and _walked(fn, depth, anything)


def _walked(fn, depth, anything) -> bool:
    """_reach_walk of a user function, `depth` calls below the loop's own callees; at the loop's
    own, the verdict its pin keeps (_reaches_grad)."""
    return _reaches_grad(fn, anything) if depth == 0 else _reach_walk(fn, depth, anything)


_CODE_NAMES: dict = {}


def code_names(code) -> tuple:
    """The names a code object and the code objects in it (nested functions, lambdas,
    comprehensions) load or store as globals or attributes: co_names, all of them."""
    hit = _CODE_NAMES.get(code)
    if hit is None:
        names = list(code.co_names)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                names += code_names(c)
        hit = _CODE_NAMES[code] = tuple(dict.fromkeys(names))
    return hit


def _helper_reads(calls, depth=0, seen=None) -> tuple:
    """The signature entries of the values the loop's helpers read from their globals and closures
    as values (`v * W`, `CFG.scale`, `T[0]`: purity's "value" and "reach" targets, and those of the
    helpers they call, two levels deep): a batched body calls a helper with whole batches, which
    meet such a value as the one-time check saw it, so a value that becomes a vector, a matrix or
    another dtype (`W = 2.0`, then a tensor) is a new signature, checked again (probeE)."""
    out = []
    for fn in calls:
        if type(fn) is not types.FunctionType:
            continue
        reads = _READS.get(fn.__code__)
        if reads is None:
            reads = _reads_of(fn)
        if not reads:
            continue
        seen = set() if seen is None else seen
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for name, steps, callee, keyed in reads:
            found, v = scope_lookup(fn, name)
            if not found:
                continue
            if callee:
                if depth < 2 and type(v) is types.FunctionType:
                    out.extend(_helper_reads((v,), depth + 1, seen))
                continue
            if steps:
                v = _peek(v, steps)
                if v is _UNKNOWN:
                    continue
            if keyed and type(v) in (dict, list, tuple):
                # (a container read by a key that is not a constant, `G[k]`, `LS[j]`: any of its
                # elements, so they must all be of one kind; probeF)
                kinds = set(map(_sig, v.values() if type(v) is dict else v))
                out.append(_MIXED if len(kinds) > 1 else ("elements",) + tuple(kinds))
                continue
            tp = type(v)
            plain = _PLAIN_SIGS.get(tp)
            if plain is not None:
                out.append(plain)
            elif tp is not types.FunctionType and tp is not types.ModuleType and tp is not type:
                out.append(_sig(v))
    return tuple(out)


_READS: dict = {}
_MIXED = ("mixed elements",)


def _mixed_elements():
    raise GuardFailed("a list, tuple or dict read by a key that changes between calls holds values of several "
                      "kinds (a number and a tensor, tensors of other ranks): the one the call reads decides "
                      "the batched form, so the loop runs", data=True)


_KEYED: dict = {}


def _keyed_free(plan) -> frozenset:
    """Positions in plan.free of the values the body reads by a key that is not a constant and not
    the loop's index (`ls[j]`, `d[k]` with `j`, `k` loop-invariant names): any element may be the
    one read (probeF). Once per plan."""
    hit = _KEYED.get(plan.loop_id, (None, None))
    if hit[0] is plan:
        return hit[1]
    free = list(plan.free)
    found = set()
    for text in plan.body:
        for node in fastast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in free):
                continue
            key = node.slice.operand if isinstance(node.slice, ast.UnaryOp) else node.slice    # (`ls[-1]`)
            if not isinstance(key, ast.Constant):
                found.add(free.index(node.value.id))
    out = frozenset(found)
    _KEYED[plan.loop_id] = (plan, out)
    return out


def _reads_of(fn):
    """(name, steps, callee, keyed) of what `fn` reads as values from outside (purity's "value"
    and "reach" targets; `keyed`: through a subscript by a value, `G[k]`) and of the helpers it
    calls by name, once per code object; () where its source is unknown, or it is torch's own."""
    from .purity import _CHAIN_STEPS, _static_scan
    reads = []
    if not (fn.__module__ or "").startswith("torch"):
        try:
            _, targets = _static_scan(fn)
        except NoSource:
            targets = ()
        for kind, path in targets:
            if kind == "value":
                reads.append((path, (), False, False))
            elif kind == "reach":
                name, steps = _CHAIN_STEPS[path]
                reads.append((name, tuple(st for st in steps if st != ("any",)), False, steps[-1] == ("any",)))
            elif kind == "name":
                reads.append((path, (), True, False))
    reads = tuple(reads)
    if len(_READS) < 4096:
        _READS[fn.__code__] = reads
    return reads


def _call_targets(fn):
    """The objects a helper calls through names and attribute chains (purity's scan of its
    source: `mod.fn`, `Cls.f`, `obj.method`), and the values of the attribute chains on outside
    names it reads (`mod.W`, `Cls.W`), resolved now; None where its source is unknown."""
    from .purity import _static_scan, loaded_chains
    try:
        _, targets = _static_scan(fn)
    except NoSource:
        return None
    out = []
    for kind, path in list(targets) + [("chain", p) for p in loaded_chains(fn)]:
        if kind in ("self", "self-attr", "input", "reach", "self-reach"):
            continue      # (chains on the first parameter: no global of that name is read; reads
            #             through subscripts: purity's own check)
        head, *rest = path.split(".")
        found, obj = scope_lookup(fn, head)
        for part in rest if found else ():
            obj = _codeless_attr(obj, part)
            if obj is _HOOKED:
                return None      # (what only the user's code gives: unknown, as a helper without source)
            if obj is _UNKNOWN:
                found = False
                break
        if found:
            out.append(obj)
    return out


_HOOKED = object()


def _codeless_attr(obj, part):
    """`obj.part` where reading it runs no code of the user's: _HOOKED where the object's class
    reads attributes in Python (`__getattr__`, `__getattribute__`: purity._read_hook) or the
    attribute is a property or another descriptor of a class outside torch and the standard
    library (its getter would run once more than in the loop; probeE); _UNKNOWN where there is
    no such attribute. Functions read from a class give their bound methods, as `getattr` does."""
    from .purity import _known_module, _read_hook
    if _read_hook(obj, True):
        return _HOOKED
    if not isinstance(obj, types.ModuleType):
        for klass in type(obj).__mro__:
            if part in klass.__dict__:
                found = klass.__dict__[part]
                if _known_module(getattr(klass, "__module__", "") or ""):
                    break
                getter = getattr(found, "fget", None) or getattr(found, "func", None)
                if isinstance(found, property) or type(found).__name__ == "cached_property":
                    if getter is None or not _known_module(getattr(getter, "__module__", "") or ""):
                        return _HOOKED       # (the user's getter)
                elif hasattr(type(found), "__get__") and not isinstance(
                        found, (types.FunctionType, staticmethod, classmethod, types.BuiltinFunctionType)) \
                        and not _known_module(getattr(type(found), "__module__", "") or ""):
                    return _HOOKED
                break
    return getattr(obj, part, _UNKNOWN)


# operations whose vmap batching rule skips the loop's checks: one_hot gives a row of zeros for
# a class out of range; embedding (and embedding_bag) with a table per iteration flattens the
# tables, so an index past one row's table reads the next row's (the loop raises)
_UNCHECKED_UNDER_VMAP = frozenset({"one_hot", "embedding", "embedding_bag"})


def _calls_unchecked(plan, resolve) -> bool:
    """Whether a loop calls one of _UNCHECKED_UNDER_VMAP's functions under another name
    (`from torch.nn.functional import one_hot as oh`, `emb = F.embedding`)."""
    if resolve is None:
        return False
    import torch.nn.functional as F
    unchecked = [getattr(F, n, None) for n in _UNCHECKED_UNDER_VMAP] + [getattr(torch, n, None)
                                                                         for n in _UNCHECKED_UNDER_VMAP]
    for path in plan.callables:
        found, obj = resolve(path)
        if found and any(obj is u for u in unchecked if u is not None):
            return True
    return False


def _calls_any(plan, names) -> bool:
    """Whether a loop body calls a function or method of one of these names."""
    for text in plan.body:
        for n in fastast.walk(ast.parse(text)):
            if isinstance(n, ast.Call) and (isinstance(n.func, ast.Attribute) and n.func.attr in names
                                            or isinstance(n.func, ast.Name) and n.func.id in names):
                return True
    return False


def _whole_medians(plan) -> bool:
    """Whether a loop body takes `x.median()` / `x.nanmedian()` / `torch.median(x)` of all the
    elements (no dimension)."""
    for text in plan.body:
        for n in fastast.walk(ast.parse(text)):
            # (`torch.median(x)` under any name torch is imported as, `th.median(x)`: one argument of a
            # name's median counts, a tensor's `x.median(0)` too, which is only conservative)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and n.func.attr in ("median", "nanmedian") and not n.keywords \
                    and len(n.args) <= (1 if isinstance(n.func.value, ast.Name) else 0):
                return True
    return False


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def space_sig(space):
    return () if isinstance(space, range) else tuple(space)


# a loop with a `break`: where it has more than twice this many iterations (or 32 times it), its
# condition is computed first for this many (or a 32nd of them): Token.find_exit
_EXIT_PROBE = 256


class Token:
    """One vectorized execution of one loop."""

    def __init__(self, rt, loop_id, match, n, start, step, first, mapped, sources, free_tensors, sig,
                 levels=None, estimate=None):
        """`mapped`: the guard's ((tensor, dim or level spec, offset, same-index flag), ...)."""
        self.rt, self.loop_id, self.match = rt, loop_id, match
        self.n, self.start, self.step, self.first = n, start, step, first
        self.raw, self.sources = mapped, sources
        self.free_tensors, self.sig = free_tensors, sig
        self.levels, self.estimate = levels, estimate

    # per-run state, set by run() and the scan helpers
    decision = None       # cost.Decision still measuring this bucket, with the call's start time
    t0 = 0.0
    cold = False          # this call ran a one-time check or build: not a steady-state timing
    missed = False        # its signature's cached mode failed on this call (the general path ran)
    chunked = False       # it ran in chunks (memory)
    tag = ""
    released = None       # id(stand-in) -> (stand-in, device, fill) of fresh outputs not held (release)
    unmoved = None        # broadcast outputs computed with the loop dimension elsewhere: id(moved) -> (moved, as computed)
    unmoved_at = 0
    scan_free = True
    extra = ()
    lazy_lists = False
    lists = None          # id(batch), .. -> (batch, its elements): the elements of a batch kept in lists (consume)
    numbers = ()          # positions of inputs that are lists of Python numbers (runtime._number_list)
    number_sources = ()   # positions of the loop's sources that are (`zip(temps, x)`); _inputs maps them
    raw_numbers = ()      # positions of the indexed values that are (`temps[i]`), among the guard's

    free = ()             # the loop's free values, where it reads some through outside objects (peeked)
    covered = None        # (trip count, the indexed tensors) where they are what _covered gives (lanes)
    laned = False         # made by a lane (lanes.build): (loop, signature) is past `committed`
    fresh = False         # the outputs are new memory (_hot_nest's batched products): no input's
    selecting = False     # the guard found selected rows under grad that may be kept first (_run_selected)
    selected = False      # this call ran so
    picked = None         # (kept iteration positions, their rows per input) while the kept rows run
    full_n = 0            # the trip count before the kept rows were picked
    _rows = None          # (offset, level) -> rows, made on first use
    pads = None           # indexed tensor position -> wraps: rows past an end that no iteration reads (_padded_rows)
    stacks = ()           # storages of the stacks of indexed lists of tensors (`xs[t]`): copies, no input's memory

    def rows(self, offset, level=None):
        """The rows a loop touches at `offset`, in ascending order (a reversed loop's too)."""
        key = (offset, level)
        if self._rows is None:
            self._rows = {}
        r = self._rows.get(key)
        if r is None:
            r = self._rows[key] = self._rows_uncached(offset, level)
        return r

    def _rows_uncached(self, offset, level):
        if level is not None:
            st, sp, k = self.levels[level]
            a = st + offset
            return slice(a, a + (k - 1) * sp + 1, sp)
        if self.step < 0:
            lo = self.start + (self.n - 1) * self.step + offset
            return slice(lo, lo + (self.n - 1) * -self.step + 1, -self.step)
        a = self.start + offset
        return slice(a, a + (self.n - 1) * self.step + 1, self.step)

    def region(self, t, offset, dim):
        """`t[:, .., rows]` (the loop index at `dim`): `t` itself when the rows are all of it (or
        is a Python list: fit_store's _list_store)."""
        if type(t) is list:
            return t
        if self.step == 1 and self.start + offset == 0 and self.n == t.shape[dim]:
            return t
        r = self.rows(offset)
        if r.start == 0 and r.step == 1 and r.stop == t.shape[dim]:
            return t
        return t[(slice(None),) * dim + (r,)]

    def nest_region(self, t, offsets):
        """`t[rows of level 0, rows of level 1, ..]` (a nest's store, one dimension per level):
        `t` itself when the rows are all of it."""
        levels, shape = self.levels, t.shape
        if len(shape) >= len(offsets):
            for lv, off in offsets:
                st, sp, k = levels[lv]
                if sp != 1 or st + off != 0 or shape[lv] != k:
                    break
            else:
                return t
        return t[tuple(self.rows(off, lv) for lv, off in offsets)]

    def release(self, t, fill):
        """A stand-in for the fresh output `t` while the batch is computed: the allocation the
        batch will replace is not held meanwhile (a large unused buffer makes the batch's own
        temporaries land on fresh pages: page faults). `unreleased` makes it again, from its
        metadata and fill, where the loop's own tensor is needed after all."""
        if t.layout is not torch.strided or t.numel() * t.element_size() < _RELEASE_FLOOR or t._is_view():
            return t
        standin = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta",
                                      requires_grad=t.requires_grad)
        if self.released is None:
            self.released = {}
        self.released[id(standin)] = (standin, t.device, fill)
        return standin

    def ascending(self, o):
        """Per-iteration values reordered to ascending row order (a reversed loop runs backwards)."""
        if o is None or self.step > 0 or self.levels is not None:
            return o
        return o.flip(0)

    def shares_input(self, o):
        """Whether `o` shares memory with a tensor the loop reads, by storage: a view of one,
        the tensor itself, or `detach()` of one, which is no view but the same memory. (A list
        of tensors the loop walks, or indexes, is batched by a new stack: its elements are never
        shared.)"""
        ptr = _storage(o)
        if ptr is None:
            return False
        for m in self.raw:
            t = m[0]
            if isinstance(t, torch.Tensor) and _storage(t) == ptr:
                return ptr not in self.stacks
        for t in self.free_tensors:
            if _storage(t) == ptr:
                return True
        for s in self.sources:
            if isinstance(s, torch.Tensor) and _storage(s) == ptr:
                return True
        for t in self.peeked():
            if _storage(t) == ptr:
                return True
        return False

    def peeked(self):
        """The tensors the body reads through outside objects (`o.w`, `self.scale`, `cfg["t"]`):
        a batch of a loop-invariant one may be its memory (one row: `o.w` expanded)."""
        peeks = self.rt.peeks.get(self.loop_id) if self.free else None
        if not peeks:
            return []
        out = []
        for pos, path in peeks:
            v = _peek(self.free[pos], path)
            if isinstance(v, torch.Tensor):
                out.append(v)
        return out

    def shares_output(self, o, outs):
        """Whether the batch `o` shares memory with another value this call hands out: a second
        output of the body (`y = x[i] * 2; out.append(y)` with `y` also read after the loop: its
        last row) or a running value's trace (`h` appended and read after the loop). The loop's
        torch.stack, torch.cat and stores copy, so what they give must not be that memory."""
        ptr = _storage(o)
        if ptr is None:
            return False
        seen = 0
        for t in outs:
            if isinstance(t, torch.Tensor) and _storage(t) == ptr:
                seen += 1
                if seen > 1:
                    return True
        for prefix, _ in self.extra:
            if isinstance(prefix, torch.Tensor) and _storage(prefix) == ptr:
                return True
        return False

    def done(self):
        """The vectorized call has committed its results: its time, for the decision."""
        if self.laned and self.decision is None:
            return          # (a lane's token: its signature has its lane already)
        if self.decision is not None:
            if not self.cold:
                self.decision.vectorized_ran(_clock() - self.t0, self.full_n or self.n)
            elif self.missed or self.chunked:
                # (a call whose cached mode failed, or that ran in chunks, is a probe all the same
                # (chunks after the bucket's first call): calls that are never warm would never
                # settle it; a signature's first call, which runs its one-time check, is not)
                self.decision.vectorized_cold(_clock() - self.t0, self.full_n or self.n, self.missed)
        key = (self.loop_id, self.sig)
        if key not in self.rt.lane_tried and not self.selected:
            # (not a call that selected its kept rows first: a lane, or an express, written from
            # its guard would not, and neither checks what makes a call select: _more_checks)
            self.rt.committed.add(key)     # (a vectorized call, run() or not: its guard may get a lane)

    def last_index(self):
        return self.first + ((self.full_n or self.n) - 1) * self.step    # (full_n: every iteration's, _run_selected)

    broke = False         # exit_at found an iteration where the loop's `break` condition holds
    exit_k = 0

    def exit_at(self, flags):
        """`if cond: ...; break` with `flags` the condition of every iteration: the batch covers
        the iterations before the first one where it holds (the trip count is cut there), and
        that iteration runs as written afterwards (exit_index / exit_element bind its loop
        variables). A loop that stops at its first iteration runs as written altogether."""
        n = self.n
        f = flags if isinstance(flags, torch.Tensor) else torch.as_tensor(flags)
        if f.dim() == 0:
            f = f.expand(n)                # the same condition for every iteration
        if f.dim() != 1 or f.shape[0] != n:
            raise GuardFailed("a `break` condition with several elements (the loop raises)", data=True)
        hit = f if f.dtype == torch.bool else f != 0      # Python's truth of one element (NaN is true)
        k = int(hit.view(torch.uint8).argmax())          # the first true one, or 0 when none is
        if k == 0 and not bool(hit[0]):
            k = n
        self.extra = ()                    # the running totals the condition read (exit_prefix)
        if k == 0:
            raise GuardFailed("the loop stops at its first iteration", data=True)
        if k < n:
            self.broke, self.exit_k, self.n = True, k, k
            self._rows = None

    def find_exit(self, body, ref, tag):
        """exit_at of the `break` condition of every iteration (`body`). Where there are many
        and the loop's last call stopped early (rt.exit_early), it is computed first for the
        first iterations alone: a search that stops early then costs what its first iterations
        cost, as the loop's does. Without a stop among them, the condition of every iteration
        (those again: one batch, not two; a loop that stops late or never does not try). A
        condition that reads running totals (exit_prefix), a nest or a run of selected rows
        computes it all at once."""
        n = self.n
        probe = max(_EXIT_PROBE, n >> 5)
        early = self.rt.exit_early
        if n >= 8 * _EXIT_PROBE and early.get(self.loop_id) and not self.extra and self.levels is None \
                and self.picked is None and not self.selecting:
            self.n, self._rows = probe, None
            try:
                flags = self.run(body, ref, tag=tag)[0]
            finally:
                self.n, self._rows = n, None
            if isinstance(flags, torch.Tensor) and flags.dim() == 1 and flags.shape[0] == probe:
                hit = flags if flags.dtype == torch.bool else flags != 0
                if bool(hit.any()):
                    self.n, self._rows = probe, None
                    self.exit_at(flags)         # (a stop among them: the trip count is cut there)
                    return
            elif not isinstance(flags, torch.Tensor) or flags.dim() == 0:
                return self.exit_at(flags)      # (the same condition for every iteration)
        self.exit_at(self.run(body, ref, tag=tag)[0])
        early[self.loop_id] = self.broke and self.exit_k < probe

    def exit_index(self):
        return self.first + self.exit_k * self.step

    def exit_element(self, pos):
        v = self.sources[pos][self.exit_k]
        return v.item() if pos in self.number_sources else v    # a Python number, as the loop binds it

    def last_element(self, pos):
        v = self.sources[pos][(self.full_n or self.n) - 1]
        return v.item() if pos in self.number_sources else v

    def _inputs(self):
        """(tensor, in_dim) per body parameter, in the plan's order (for a nest: in_dims per level)."""
        if self.picked is not None:
            return list(self.picked[1])       # the kept iterations' rows (_run_selected)
        plan = self.match.plan
        if self.levels is not None:
            levels = self.levels
            nest_dims = self.rt.nest_dims.get(self.loop_id)
            if nest_dims is None:
                nest_dims = self.rt.nest_dims[self.loop_id] = [_nest_in_dims(spec, len(levels))
                                                               for _, spec, _, _ in self.raw]
            out = []
            for (t, spec, _, _), dims in zip(self.raw, nest_dims):
                for lv, p, off in spec:
                    st, sp, k = levels[lv]
                    if sp != 1 or st + off != 0 or t.shape[p] != k:
                        r = self.rows(off, lv)
                        if r.start != 0 or r.stop != t.shape[p] or r.step != 1:
                            t = t[(slice(None),) * p + (r,)]
                out.append((t, dims))
            return out
        if not self.sources:
            # a range loop: each input is its tensor, or the rows the loop reads from it
            n, step, start = self.n, self.step, self.start
            out = []
            for j, (t, d, off, _) in enumerate(self.raw):
                if step != 1 or start + off != 0 or t.shape[d] != n:
                    t = self._read(j, t, d, off)
                    if step < 0:
                        t = t.flip(d)   # iteration order
                out.append((t, d))
            return out
        batches = []
        for s in self.sources:
            if isinstance(s, (list, tuple)) and self.lazy_lists:
                batches.append(_Rows(s, self.n))   # stacked a chunk at a time by _run_chunked
                continue
            t = torch.stack(list(s)) if isinstance(s, (list, tuple)) else s
            batches.append(t[: self.n] if t.shape[0] != self.n else t)
        picks = self.rt.src_picks.get(self.loop_id)
        if picks is None:
            # per body parameter: the position of the element it is (or None: an indexed tensor)
            targets = [t for t, _ in plan.space.elements]
            picks = self.rt.src_picks[self.loop_id] = [targets.index(mp.param) if mp.param in targets else None
                                                       for mp in plan.mapped]
        if self.number_sources or self.raw_numbers:
            # input positions: a source's where the body takes it, an indexed value's in order
            raw_at = [k for k, j in enumerate(picks) if j is None]
            self.numbers = frozenset([k for k, j in enumerate(picks) if j in self.number_sources]
                                     + [raw_at[r] for r in self.raw_numbers])
        it = enumerate(self.raw)
        out = []
        for j in picks:
            if j is not None:
                out.append((batches[j], 0))
                continue
            r, (t, d, off, _) = next(it)
            t = self._read(r, t, d, off)
            if self.step < 0:
                t = t.flip(d)   # iteration order
            out.append((t, d))
        return out

    def _read(self, j, t, d, off):
        """The rows indexed tensor `j` gives the batch at `off`: _read_rows, or _padded_rows
        where the guard found rows past an end that no iteration reads (pads)."""
        rows = self.rows(off)
        pads = self.pads
        return _padded_rows(t, d, rows, pads[j]) if pads is not None and j in pads else _read_rows(t, d, rows)

    def _index(self, device):
        if self.picked is not None:    # (the kept iterations': _run_selected)
            keep = self.picked[0]
            return self.first + (keep if keep.device == device else keep.to(device)) * self.step
        self._index_exact()
        i = torch.arange(self.first, self.first + self.n * self.step, self.step, device=device)
        i._av_arange = True      # (not the kept rows' above: batching.window_at)
        return i

    def _index_exact(self):
        """The loop index as a number, within what the loop's tensors take exactly (_index_fits)."""
        _index_fits(itertools.chain((m[0] for m in self.raw), self.sources, self.free_tensors),
                    self.first, self.first + (self.n - 1) * self.step, _index_uses(self.match.plan))

    def py_out(self, tag, pos):
        """Whether output `pos` of the tagged pre-body run is a Python number in the loop."""
        return self.rt.pytypes.get((self.loop_id, self.sig, tag), {}).get(pos, False)

    def py(self, pos, static=""):
        """Whether output position `pos` holds Python numbers in the loop."""
        return bool(static) or self.rt.pytypes.get((self.loop_id, self.sig), {}).get(pos, False)

    def level_sizes(self):
        return [self.n] if self.levels is None else [k for _, _, k in self.levels]

    scan_lasts = None     # exclusive scans: their last running values, by position in `extra`
    approx = False        # a float running value computed in another order than the loop's (fit_store)

    @staticmethod
    def shift_start(read):
        """The start of a value the step before assigned (analysis.loops._shifts): the name's value
        before the loop, which `read` returns; where the name is not bound yet, the loop runs (its
        first read raises there, or a branch skips it)."""
        try:
            return read()
        except NameError:
            raise GuardFailed("a value the step before assigned that is not bound before the loop") from None

    def add_scan(self, prefix, py, before=_UNCHANGED, reads="", changed=None, outs=(), bare=False, start=None):
        """Running values of an accumulator, passed to the body as one more per-iteration input
        (`before`: the start, where the body reads the value before each step instead, `reads`
        "appended" where a list appends it; `changed`: the start, which the loop updates in
        place; `outs`: the tensors the loop writes into; `bare`: every read stores the value as
        it is: analysis._value_reads)."""
        if reads == "appended" and not py:
            raise GuardFailed("a running value appended before its update that is no Python number (the loop's "
                              "list holds its start itself, then the tensors of the steps)")
        if type(changed) is torch.Tensor:
            ptr = _storage(changed)
            if self.shares_input(changed) or any(isinstance(t, torch.Tensor) and _storage(t) == ptr for t in outs):
                # `s = x[1]` then `s += x[i]`: the loop writes into x's row, which later steps read
                # (`s = out[0]`: into the row of the output it also stores)
                raise GuardFailed("a running value updated in place that starts as an input's or output's memory")
            if torch.is_grad_enabled() and (changed.requires_grad or not bare and isinstance(prefix, torch.Tensor)
                                            and prefix.requires_grad):
                # (a step's value saved for backward, `s * s`, then changed in place: the loop's
                # backward raises)
                raise GuardFailed("a running value updated in place under gradients, read by an operation that "
                                  "keeps it for backward (the loop's backward raises)")
        if type(start) is torch.Tensor and outs:
            # (`s = y[0]` then `y[t] += 1` before `s = s + x[t]`: the loop's first step reads the
            # start after the write into its memory, the batch read it before; probeV, pre-existing)
            ptr = _storage(start)
            if any(isinstance(t, torch.Tensor) and _storage(t) == ptr for t in outs):
                raise GuardFailed("a running value that starts as the memory of a tensor the loop writes into",
                                  data=True)
        if isinstance(prefix, torch.Tensor) and getattr(prefix, "_av_approx", False):
            self.approx = True
        if self.numbers or self.number_sources:
            # `s = s + r[t]` over a list of Python numbers: the loop's running values are Python
            # numbers (ints that never wrap), where the scan's are one tensor's elements
            raise GuardFailed("a running value over a list of Python numbers (the loop keeps Python's numbers)")
        if before is not _UNCHANGED:
            self.scan_lasts = {**(self.scan_lasts or {}), len(self.extra): prefix[-1]}
            prefix = _before_steps(before, prefix, not bare, py)
        self.extra = list(self.extra) + [(prefix, py)]

    def carried_start(self, out, dim, offset, others=()):
        """The start of a running value that stands for the row the step before stored
        (`out[t] = .. out[t - 1]`, analysis.hoist stored_recurrences): the row of `out` the first
        iteration reads, `first + offset` along `dim`, as it is before the loop (a copy: the loop
        may store into that row later, `out[-1]` from `range(len(out))`). Where that read would
        raise, the loop runs and raises it in its own order. `others`: the other tensors the loop
        writes into; one that shares the output's memory (the same tensor under two names, a
        view) would change the rows the loop reads back, which the running value does not see."""
        if type(out) is not torch.Tensor:
            raise GuardFailed("a stored recurrence into something other than a tensor (the loop keeps what it stores)")
        ptr = _storage(out)
        if any(isinstance(t, torch.Tensor) and (t is out or _storage(t) == ptr) for t in others):
            raise GuardFailed("a stored recurrence whose output shares memory with another tensor the loop writes "
                              "into (the loop reads back what that one stores)", data=True)
        i = self.first + offset
        if out.dim() <= dim or not -out.shape[dim] <= i < out.shape[dim]:
            raise GuardFailed("the first step of a stored recurrence reads outside the output (the loop raises)",
                              data=True)
        return out.select(dim, i).clone()

    carried_terms = None   # the (terms, factors) of the stored recurrence last computed (by name: keep_terms)

    def keep_terms(self, name, terms):
        """A stored recurrence's (terms, factors), kept by its running value's name for
        carried_like (a loop may carry several)."""
        if self.terms_by is None:
            self.terms_by = {}
        self.terms_by[name] = terms
        return terms

    terms_by = None

    def carried_like(self, out, dim, j, op, name=None):
        """The running values of a stored recurrence are what the loop's stores keep: a tensor of
        the output's dtype, device and row shape (the loop carries the stored row, converted and
        broadcast by the store; a value of another dtype, a 0-d or a Python number would carry
        otherwise than the running value does). Under gradients, the loop's read of the row is a
        view of the output: an operation that keeps it for backward (a product with a factor that
        requires grad, a running product, max or min) meets the later stores' version bump and
        the loop's backward raises, where the running value's would not: only sums and
        recurrences whose factors need no gradient go on."""
        prefix, py = self.extra[j]
        row = tuple(out.shape[:dim]) + tuple(out.shape[dim + 1:])
        if py or type(prefix) is not torch.Tensor or prefix.dtype != out.dtype or prefix.device != out.device \
                or tuple(prefix.shape[1:]) != row:
            raise GuardFailed("a stored recurrence whose values are not the output's dtype and row shape (the loop "
                              "carries the stored row, converted by the store)")
        if torch.is_grad_enabled() and prefix.requires_grad:
            terms = (self.terms_by or {}).get(name)
            factor = terms[1] if op == "lin" and terms is not None else None
            if op not in ("+", "-", "lin") or isinstance(factor, torch.Tensor) and factor.requires_grad:
                raise GuardFailed("a stored recurrence under gradients whose step keeps the output's row for "
                                  "backward (the loop's backward raises once a later step stores into the output)")

    def scan_final(self, j):
        """A running value's last step: a tensor of its own, as the loop's last step makes (not a
        view of the running values, which would keep them all alive)."""
        prefix, py = self.extra[j]
        v = self.scan_lasts[j] if self.scan_lasts and j in self.scan_lasts else prefix[-1]
        if py:
            return v.item()
        return self.own_copy(v) if type(v) is torch.Tensor and v._base is not None else v

    copies = None         # own_copy's copies in this call

    def own_copy(self, v):
        """A copy of the row `v` of a batch, one per row in a call: two names the loop binds to
        one tensor (`b = a`, `t = s`, both read after it) stay one tensor."""
        key = (v.data_ptr(), v.dtype, tuple(v.shape), v.stride())
        if self.copies is None:
            self.copies = {}
        hit = self.copies.get(key)
        if hit is None:
            hit = self.copies[key] = v.clone()
        return hit

    def checked_run(self, body, ref=None, direct=None, tag="", scan_free=False):
        """`run` on an accelerator (the guard sets it as this token's `run`): under the index
        check where the body may index."""
        if indexcheck.may_index(body, ref, direct):
            with indexcheck.IndexCheck():
                return Token.run(self, body, ref, direct, tag, scan_free)
        return Token.run(self, body, ref, direct, tag, scan_free)

    def run(self, body, ref=None, direct=None, tag="", scan_free=False):
        rt = self.rt
        if self.selecting and not tag:
            return self._run_selected(body, ref, direct)
        self.tag, self.scan_free = tag, scan_free
        if not self.extra and rt.memory_budget is None and rt.events is None and self.picked is None:
            hot = rt.hot.get((self.loop_id, self.sig, tag))
            if hot is not None and self.n <= hot[0]:
                outs = hot[1](self, body, direct)
                if outs is not None:
                    rt.ran[self.loop_id] = hot[2]
                    return outs
        if self.decision is not None and not self.decision.weighed or rt.events is not None:
            self._weigh(ref or body)
        per = rt.iter_bytes.get(self._bytes_key())
        if self.picked is not None:
            # the kept rows, or one side's (_run_selected): their own rows, in pieces where all
            # at once would need more memory than the budget
            if not self.piecewise and (per is None or per * self.n > _MEMORY_FLOOR or rt.memory_budget is not None):
                chunk = self._memory_rows(ref or body)
                if chunk and chunk < self.n:
                    self.cold = self.chunked = True
                    return self._run_pieces(body, ref, direct, tag, chunk)
        elif per is None or per * self.n > _MEMORY_FLOOR or rt.memory_budget is not None or (
                self.sources and not all(type(s) is torch.Tensor for s in self.sources)):
            # (the common case, a small batch of known size and no list, skips both lookups)
            chunk = self._chunk_rows() or self._memory_rows(ref or body)
            if chunk:
                self.cold = self.chunked = True
                return self._run_chunked(body, ref, chunk)
        inputs = self._inputs()
        if not scan_free and self.extra:
            inputs += [(t, 0) for t, _ in self.extra]
        key = (self.loop_id, self.sig, tag)
        mode = rt.fast.get(key)
        if mode is not None:   # steady state: this mode passed its check for this signature
            try:
                outs = self._mode(mode, body, direct, inputs)
            except GuardFailed:
                self.missed = True    # the general path below decides, with its bookkeeping
            else:
                rt.ran[self.loop_id] = mode
                if rt.events is not None:
                    rt._note(self.loop_id, "vectorized", mode, getattr(self, "estimate", None))
                return outs
        self.cold = True
        modes = self._modes(tag)
        errors = []
        sides = False       # a mode refused a `where` of sides that differ in kind (_sides_differ)
        data = True         # every mode refused these values alone (a later call may batch others)
        for mode in modes:
            if (self.loop_id, self.sig, mode, tag) in rt.bad_modes and mode != modes[-1]:
                continue  # failed its check for this signature before
            try:
                outs = self._mode(mode, body, direct, inputs)
                if self._check(ref or body, inputs, outs, mode) and not errors:
                    self.cold = False   # (nothing new to compare: a steady-state call, timed as one)
            except GuardFailed as e:
                errors.append(f"{mode}: {e}")
                sides = sides or getattr(e, "sides", False)
                if getattr(e, "final", False):
                    # no other mode computes it as the loop; a refusal of these values alone (data)
                    # stays one, so a later call with other values tries again
                    merged = GuardFailed("; ".join(errors), data=e.data)
                    merged.final = True     # (as the mode's own: strict mode lets the loop raise; probeK)
                    raise merged from None
                if not e.data:
                    data = False
                    rt.bad_modes.add((self.loop_id, self.sig, mode, tag))
                    hot = rt.hot.get(key)
                    if hot is not None and hot[2] == mode:
                        del rt.hot[key]     # the steady state must not run a mode that failed for this signature
                continue
            except RuntimeError as e:
                if mode != "vmap" or "vmap" not in str(e):
                    raise
                # vmap refusing the body (`.item()` inside it, data-dependent control flow): the
                # reason in words, after the batched body's own
                errors.append(f"vmap: {_vmap_reason(e)}")
                raise GuardFailed("; ".join(errors)) from None
            rt.succeeded.add((self.loop_id, self.sig))
            if (self.loop_id, self.sig, mode, tag) in rt.checked:
                rt.fast[key] = mode
                self._make_hot(key, mode)
            rt.ran[self.loop_id] = mode
            rt._note(self.loop_id, "vectorized", mode, getattr(self, "estimate", None))
            return outs
        e = GuardFailed("; ".join(errors), data=data and bool(errors))
        e.sides = sides
        raise e

    def _modes(self, tag, direct=True):
        """The modes a batch of this loop may run in, in the order they are tried (a direct form
        first, vmap last); `direct`: whether the matmul strategy's direct form is at hand."""
        rt = self.rt
        modes = {"broadcast": ["broadcast"], "matmul": ["direct"] if direct else []}.get(self.match.strategy, [])
        if (self.loop_id, tag) in rt.batchable and _switch_on("AUTOVEC_BATCHED"):
            modes.append("batched")   # a direct batched form: no vmap per-operation dispatch
        modes.append("vmap")
        if not _switch_on("AUTOVEC_DIRECT"):
            modes = ["vmap"]          # the generic form only (benchmarks measure what the direct forms gain)
        if self.loop_id in rt.no_vmap:
            # F.one_hot under vmap gives a row of zeros for a class out of range, where the loop
            # (and the batched body) raise: vmap does not run such bodies
            modes = [m for m in modes if m != "vmap"]
            if not modes:
                raise GuardFailed("`one_hot` and functional `embedding` have no checked form under vmap (a class "
                                  "or index out of range would give zeros, or another iteration's table row, "
                                  "instead of the loop's error)")
        if "vmap" in modes and self._half_inputs() and self._python_floats():
            # a Python float against a float16 / bfloat16 value of one element: the loop computes
            # in float32 and rounds once, vmap rounds the number to half first (a batched body
            # computes as the loop does)
            modes = [m for m in modes if m != "vmap"]
            if not modes:
                raise GuardFailed("Python floats beside float16 / bfloat16 tensors, which vmap would round to half "
                                  "before computing (the loop computes in float32)")
        if self.numbers or self.loop_id in rt.index_py or self.loop_id in rt.py_arith:
            # a list of Python numbers, or the index in float arithmetic: only the batched body
            # treats their batch as Python numbers (vmap and broadcasting would see 0-d float64
            # tensors, or an int64 index making float32 values, which compute differently)
            modes = [m for m in modes if m == "batched"]
            if not modes:
                raise GuardFailed("the loop reads Python numbers (a list of them, its index in float "
                                  "arithmetic, or `.item()` values divided or raised to a power), which only a "
                                  "batched body (not vmap) computes with as the loop does")
        return modes

    sel_mask = None       # the guard's condition for every iteration, run first (select_run)
    sel_sides = None      # how many sides a body that branches once has (select_run, _run_sides)
    side_run = False      # a side's body is running (_run_sides): its values are laid out as the main body's
    reselected = False    # selecting because the batch over every row failed before, not for grad

    def select_run(self, body, ref, tag, sides=None):
        """The condition that guards the whole body, for every iteration, without grad: the
        rows _run_selected keeps (lowering.common._select_code). Where it cannot be one flag per
        iteration, _run_selected computes the body on every row first, as without it. `sides`:
        for a body that branches once (plan.two_way), how many sides it has (_run_sides)."""
        self.sel_sides = sides
        with torch.no_grad():
            outs = self.run(body, ref, tag=tag)
        mask = outs[0] if outs else None
        if sides is not None and sides > 2:
            # an `elif` chain: each row's side by number, that of the first condition that holds
            # (the last `else`'s where none does); not a number where a condition is not a flag
            conds = list(outs[:sides - 1]) if outs and len(outs) >= sides - 1 else []
            if not conds or not all(isinstance(c, torch.Tensor) and c.dim() == 1 and c.shape[0] == self.n
                                    and c.dtype == torch.bool for c in conds):
                return
            mask = torch.full((self.n,), len(conds), dtype=torch.int64, device=conds[0].device)
            for k in range(len(conds) - 1, -1, -1):
                mask = torch.where(conds[k], k, mask)
        if isinstance(mask, torch.Tensor) and mask.dim() == 1 and mask.shape[0] == self.n:
            self.sel_mask = mask

    def _run_selected(self, body, ref, direct):
        """Under autograd, a loop whose one condition guards its whole body (runtime._selectable):
        the batch without grad first, for the condition of every iteration; then, with grad, the
        body again on the kept iterations alone, their rows gathered in the loop's order (and the
        index, as a number, theirs). Each kept value is the loop's, with the loop's gradient; no
        other iteration is computed with grad, as none is in the loop (a batch over every row
        would send 0 * their derivatives, NaN where one is infinite, into the inputs' gradients).
        All kept or none: one run answers. (Token.run itself: on an accelerator, checked_run is
        around this call already.)"""
        self.selecting = False
        self.selected = True
        if self.extra or self.levels is not None:
            raise GuardFailed("a loop nest or running values read in the body (the loop runs under grad)")
        sides, self.sel_sides = self.sel_sides, None
        if self.match.plan.two_way:
            return self._run_sides(sides, body, ref)
        mask, self.sel_mask = self.sel_mask, None
        if mask is None:
            with torch.no_grad():
                outs = Token.run(self, body, ref, direct)
            self._not_branched()
            pos = next((lay[2] for lay in self.match_layout() if lay[2] is not None), None)
            mask = outs[pos] if pos is not None else None
        else:
            outs = None   # (the condition alone ran: the body runs on the kept rows below)
        n = self.n
        if not isinstance(mask, torch.Tensor) or mask.dim() != 1 or mask.shape[0] != n:
            raise GuardFailed("the loop's condition is not one flag per iteration (the loop runs under grad)")
        keep = (mask if mask.dtype == torch.bool else mask != 0).nonzero().flatten()
        k = keep.numel()
        if self.rt.events is not None:
            self.rt.kept[self.loop_id] = (k, n, not self.reselected)      # (explain's note)
        if k == 0:
            if outs is None:
                # (no iteration kept, and no batch of every row computed: the loop, which computes nothing)
                raise GuardFailed("no iteration kept (the loop runs)", data=True)
            return outs           # (no iteration kept: the consumers take no row of these values)
        if k == n:
            outs = Token.run(self, body, ref, direct)       # (every iteration kept: the batch as it is)
            self._not_branched()
            return outs
        if self.match.plan.index_as_value:
            self._index_exact()   # (over every iteration's index, as the batch without grad had them)
        picked = [(t.index_select(d, keep if keep.device == t.device else keep.to(t.device)), d)
                  for t, d in self._inputs()]
        self.picked, self.full_n, self.n = (keep, picked), n, k
        outs = Token.run(self, body, ref, direct)
        self._not_branched()
        return outs

    def _side_runs(self, count, body, ref):
        """[(body, reference, tag)] of each side of a body that branches once: made from the
        loop's body's def once per loop (lowering.common.side_bodies), compiled as closures over
        the loop's body's free variables, bound to this call's (as a batched body is); each side's
        one-time check runs the loop's own body on its rows (`ref`), which there takes that side."""
        rt = self.rt
        made = rt.side_code.get(self.loop_id, False)
        if made is False:
            made = None
            entry = rt.batchable.get((self.loop_id, ""))
            if entry is not None:
                from .batching import BatchedBody, _compile
                from .lowering.common import side_bodies
                try:
                    defs = side_bodies(self.match.plan, self.match_layout(), entry[0], entry[1])
                    if defs is not None and len(defs) == count:
                        made = []
                        for d in defs:
                            rt.batchable[(self.loop_id, d.name)] = (d, entry[1])
                            made.append((d.name, BatchedBody(_compile(d, body), body.__code__)))
                except Exception:
                    made = None   # (a side autovec cannot write or compile: the loop runs under grad)
            rt.side_code[self.loop_id] = made
        if made is None:
            raise GuardFailed("the loop's branch has no body per side (the loop runs under grad)")
        return [(code.bind(body), ref, tag) for tag, code in made]

    def _run_sides(self, count, body, ref):
        """_run_selected for a body that branches once (plan.two_way): the condition of every
        iteration first, without grad (select_run: a flag, or for an `elif` chain the number of
        the row's side); then, with grad, each side's body (lowering.common._side_bodies) on its
        own rows alone, gathered in the loop's order; then each returned value's rows put back in
        the loop's order. Each row is the one the batch of `where` gives, and each gets the
        gradient it gets in the loop: no row computes, with grad, a side the loop skips in it
        (the batch of `where` would send 0 * that side's derivative, NaN where it is infinite,
        into the inputs' gradients)."""
        mask, self.sel_mask = self.sel_mask, None
        n = self.n
        if count is None or not isinstance(mask, torch.Tensor) or mask.dim() != 1 or mask.shape[0] != n:
            raise GuardFailed("the loop's condition is not one flag per iteration (the loop runs under grad)")
        sides = self._side_runs(count, body, ref)
        if len(sides) == 2:
            mask = mask if mask.dtype == torch.bool else mask != 0
            rows = [mask.nonzero().flatten(), torch.logical_not(mask).nonzero().flatten()]
        else:
            if mask.dtype != torch.int64:
                raise GuardFailed("the loop's branch is not one side number per iteration (the loop runs under grad)")
            rows = [(mask == j).nonzero().flatten() for j in range(len(sides))]
        if sum(r.numel() for r in rows) != n:
            raise GuardFailed("an iteration is on no side of the loop's branch (the loop runs under grad)")
        if self.rt.events is not None:
            self.rt.kept[self.loop_id] = (tuple(r.numel() for r in rows), n, not self.reselected)   # (explain's note)
        if self.match.plan.index_as_value:
            self._index_exact()   # (over every iteration's index, as the batch without grad had them)
        inputs = self._inputs()
        parts = []
        for keep, (body, ref, tag) in zip(rows, sides):
            k = keep.numel()
            if k == 0:
                continue
            if k == n:
                self.side_run = True
                try:
                    outs = Token.run(self, body, ref, tag=tag)      # (every row on this side: the batch as it is)
                finally:
                    self.side_run = False
                self._not_branched()
                self._side_types((tag,))
                return outs
            picked = [(t.index_select(d, keep if keep.device == t.device else keep.to(t.device)), d)
                      for t, d in inputs]
            self.picked, self.full_n, self.n, self.side_run = (keep, picked), n, k, True
            try:
                outs = Token.run(self, body, ref, tag=tag)
            finally:
                self.picked, self.full_n, self.n, self.side_run = None, 0, n, False
            self._not_branched()
            parts.append((keep, k, outs))
        self._side_types([tag for _, _, tag in sides])
        first = parts[0][2]
        if any(len(outs) != len(first) for _, _, outs in parts):
            raise GuardFailed("the sides of the loop's branch return different values (the loop runs under grad)")
        where = torch.cat([keep for keep, _, _ in parts])
        order = torch.empty_like(where)
        order[where] = torch.arange(n, device=where.device)      # (each row's place in the batches)
        merged = []
        kept = {lay[0] for o, lay in zip(self.match.plan.outputs, self.match_layout())
                if o.kind == "append" and not o.consumer}     # (lists kept as lists: each element its own)
        for pos, a in enumerate(first):
            values = [outs[pos] for _, _, outs in parts]
            if all(v is None for v in values):
                merged.append(None)
                continue
            if pos in kept and len({bool(getattr(v, "requires_grad", False)) for v in values}) > 1:
                # (the loop's elements from a side without grad do not require it; rows of one
                # batch all would)
                raise GuardFailed("a kept list whose elements require grad on one side of the branch and not on "
                                  "the other (the loop keeps each element's own)")
            if not all(isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == k
                       and v.shape[1:] == a.shape[1:] and v.dtype == a.dtype and v.device == a.device
                       for v, (_, k, _) in zip(values, parts)):
                raise GuardFailed("the sides of the loop's branch give values of other kinds or shapes "
                                  "(the loop runs under grad)")
            both = torch.cat(values)
            merged.append(both.index_select(0, order if order.device == both.device else order.to(both.device)))
        return tuple(merged) if isinstance(first, tuple) else merged

    def _side_types(self, tags):
        """Which values the sides returned as Python numbers (their one-time checks: Token._check),
        as the loop's body's, which the consumers read (Token.py); sides that differ there (an
        int on one, a tensor on the other) keep the loop."""
        rt, seen = self.rt, {}
        for tag in tags:
            for k, is_py in rt.pytypes.get((self.loop_id, self.sig, tag), {}).items():
                if seen.setdefault(k, is_py) != is_py:
                    raise GuardFailed("the two sides of the loop's `if` give a Python number and a tensor "
                                      "(the loop runs under grad)")
        main = rt.pytypes.setdefault((self.loop_id, self.sig), {})
        for k, is_py in seen.items():
            if main.setdefault(k, is_py) != is_py:
                raise GuardFailed("the sides of the loop's `if` give other kinds of values than its body "
                                  "(the loop runs under grad)")

    def _not_branched(self):
        code = self.rt.batched.get((self.loop_id, self.sig, ""))
        if getattr(code, "branched", False):
            # a helper's `if` inlined as `where` of both sides: the kept rows would still compute
            # the side the loop skips in them
            raise GuardFailed("a helper the body calls branches on data (its `if`s batched as `where`): the loop "
                              "runs under grad")

    def _make_hot(self, key, mode):
        """The steady state of one signature, tag and mode, once that mode has passed its check:
        a runner (runtime._hot_*) that calls the batched body, broadcast body or batched products
        on the tensors themselves while the loop covers them from row 0 in steps of 1 (range
        loops, loop nests, loops over tensors' elements; not lists of tensors, scan inputs or
        vmap). Where it cannot, the runner answers None and the general path of `run` decides.
        Kept with the largest trip count below the memory floor (larger batches may need
        chunks)."""
        rt = self.rt
        rt.hot.pop(key, None)             # a runner for another mode (or an older body) is stale now
        plan = self.match.plan
        index = plan.index_as_value       # the loop index used as a number: an arange joins the inputs
        if self.extra or plan.value_indices or index and (self.levels is not None or mode == "direct"):
            return
        if self.sources and (self.levels is not None or not all(type(t) is torch.Tensor for t in self.sources)
                             or self.rt.src_picks.get(self.loop_id) is None):
            return
        per = rt.iter_bytes.get((self.loop_id, self.sig))
        if per is None:
            return
        limit = _MEMORY_FLOOR // per if per else 1 << 62
        if self.levels is not None:
            if mode == "direct":
                perms = rt.perms.get((self.loop_id, self.sig))
                if perms is None:
                    return
                runner = functools.partial(_hot_nest, perms, None)
            elif mode == "batched":
                code = rt.batched.get(key)
                layout = rt.nest_layouts.get((self.loop_id, self.sig))
                if code is None or isinstance(code, str) or layout is None:
                    return
                runner = functools.partial(_hot_nest, layout, code)
            else:
                return
            rt.hot[key] = (limit, runner, mode)
            rt.xp_tried.discard((self.loop_id, self.sig))   # (an express may be written now: _add_express)
            return
        if self.sources:
            it = iter(self.raw)
            raw_dims = tuple(0 if j is not None else next(it)[1] for j in rt.src_picks[self.loop_id])
        else:
            raw_dims = tuple(d for _, d, _, _ in self.raw)
        if mode == "direct":
            runner = functools.partial(_hot_batched, None, raw_dims if any(raw_dims) else None, 0, False)
        elif mode == "broadcast":
            recipe = rt.bcast.get((self.loop_id, self.sig, self.tag))
            if not isinstance(recipe, tuple):
                return
            r, ones, pos = recipe
            if pos or any(ones) or any(raw_dims):
                if index:
                    return          # (the index as a number: the general path places its arange)
                runner = functools.partial(_hot_broadcast_moved, r, ones, pos, raw_dims)
            else:
                runner = functools.partial(_hot_broadcast, r + 1, index)
        elif mode == "batched":
            code = rt.batched.get(key)
            if code is None or isinstance(code, str):
                return
            # check-only masks (the main body's layout; a tagged body keeps all its outputs)
            probes = sum(1 for lay in self.match_layout() if lay[0] is None) if not self.tag else 0
            runner = functools.partial(_hot_batched, code, raw_dims if any(raw_dims) else None, probes, index)
        else:
            return
        rt.hot[key] = (limit, runner, mode)
        rt.xp_tried.discard((self.loop_id, self.sig))   # (an express may be written now: _add_express)

    def _mode(self, mode, body, direct, inputs):
        if mode == "batched":
            return self._batched(body, inputs)
        if mode == "direct":
            return self._direct(direct, inputs)
        if mode == "broadcast":
            return self._broadcast(body, inputs, None)
        return self._vmap(body, inputs, _device_of(inputs[0][0] if inputs else None, self.free_tensors))

    def _products(self) -> bool:
        """Whether the loop's body calls prod (a method or torch.prod)."""
        hit = self.rt.prods.get(self.loop_id)
        if hit is None:
            hit = self.rt.prods[self.loop_id] = any("prod(" in text for text in self.match.plan.body) or any(
                "prod(" in o.value for o in self.match.plan.outputs)
        return hit

    piecewise = False     # running one piece of the kept rows (_run_pieces)

    def _run_pieces(self, body, ref, direct, tag, rows):
        """The kept rows' batch, or a side's (_run_selected), in pieces of `rows` rows, each run
        as the whole would be (its mode, its one-time check on the first piece), joined along
        the rows: what one run over all of them gives, within the memory budget."""
        keep, picked = self.picked
        k = self.n
        parts = []
        self.piecewise = True
        try:
            for c0 in range(0, k, rows):
                c1 = min(k, c0 + rows)
                self.picked = (keep[c0:c1], [(t.narrow(d, c0, c1 - c0), d) for t, d in picked])
                self.n = c1 - c0
                parts.append(Token.run(self, body, ref, direct, tag))
        finally:
            self.picked, self.n, self.piecewise = (keep, picked), k, False
        joined = []
        for values in zip(*parts):
            if all(v is None for v in values):
                joined.append(None)
            elif all(isinstance(v, torch.Tensor) and v.dim() >= 1 for v in values):
                joined.append(torch.cat(values, 0))
            else:
                raise GuardFailed("a kept-rows output that is not one value per row (the loop runs)")
        return tuple(joined)

    def _bytes_key(self):
        """The key of the bytes one iteration allocates (iter_bytes): per signature, and per side
        of a branch (its body allocates its own)."""
        return (self.loop_id, self.sig, self.tag) if self.tag else (self.loop_id, self.sig)

    def _weigh(self, ref):
        """Before a bucket's first vectorized call: the bytes one iteration creates added to the
        cost model's estimate (cost.memory), where the loop keeps one iteration's values at a
        time (its outputs are a running value, not rows): a batch of 400 taps of a convolution,
        368 MB, took 25 times the loop's 15 ms, which held one tap's 1 MB. Raises (the loop
        runs) where the batch now costs more than twice the loop."""
        d, rt = self.decision, self.rt
        if d is not None and d.weighed or self.estimate is None and d is None or cost.min_trip(None) is not None:
            return
        if d is not None:
            d.weighed = True      # (once per bucket, whatever it finds)
        if any(o.kind not in _ONE_AT_A_TIME for o in self.match.plan.outputs):
            return
        key = self._bytes_key()
        per = rt.iter_bytes.get(key)
        if per is None:
            per = rt.iter_bytes[key] = self._iteration_bytes(ref) if self._measurable() else 0
        n = self.full_n or self.n
        loop_s, batch_s = cost.memory(n, per, rt.kind)
        if not batch_s:
            return
        est = self.estimate if d is None else rt._estimate(self.loop_id, self.match, n)
        if d is None:        # (explain's call: its estimate shows the bytes)
            est = self.estimate = {**est, "python": est["python"] + loop_s, "vectorized": est["vectorized"] + batch_s}
            heavy = est["vectorized"] > 2 * est["python"]
            if heavy:
                rt._note(self.loop_id, "estimate", "", est)
        else:
            heavy = d.weigh(est, n, loop_s, batch_s)
            est = {"python": est["python"] + loop_s, "vectorized": est["vectorized"] + batch_s}
        if heavy:
            e = GuardFailed(f"{n} iteration(s): a batch of them would write {n * per / 2 ** 20:.0f} MB into fresh "
                            f"memory, where the loop reuses one iteration's {per / 2 ** 20:.1f} MB (about "
                            f"{est['python'] * 1e6:.0f} us against {est['vectorized'] * 1e6:.0f} us)", cost=True)
            e.heavy = True
            raise e

    def _measurable(self):
        """Whether one iteration's bytes can be measured by running the body once (_iteration_bytes)."""
        if self.picked is not None:
            return not (self.raw_numbers or self.number_sources)
        return not (self.levels is not None or self.match.plan.scans or getattr(self, "extra", None)
                    or self.raw_numbers or self.number_sources)

    def _chunkable(self):
        if not self._measurable():
            return False
        if self.picked is not None:
            # (the kept rows' pieces each run as the whole would, _run_pieces: their mode, their
            # index, their batched body)
            return True
        return not (self.loop_id in self.rt.index_py or self.match.strategy not in _CHUNKABLE
                    or self.match.plan.items and self._half_inputs())   # (a chunked run has no batched body to refuse it)

    def _python_floats(self) -> bool:
        """Whether the body may meet a Python float: a float literal in it, or a loop-invariant
        value that is one."""
        rt = self.rt
        hit = rt.float_lits.get(self.loop_id)
        if hit is None:
            hit = rt.float_lits[self.loop_id] = any(
                isinstance(n, ast.Constant) and type(n.value) in (float, complex)
                for text in self.match.plan.body for n in fastast.walk(ast.parse(text)))
        return hit or any(type(v) in (float, complex) for v in (getattr(self, "free", None) or ()))

    def _half_inputs(self) -> bool:
        """Whether a float16 / bfloat16 tensor is among the loop's inputs: there, `.item()`
        values (Python numbers) compute in float32 in the loop, and only the batched body's
        refusal keeps vmap from rounding them to half."""
        half = (torch.float16, torch.bfloat16)
        ts = [e[0] for e in self.raw] + list(self.free_tensors)
        for src in self.sources:
            ts.append(src[0] if isinstance(src, (list, tuple)) and src else src)
        return any(isinstance(t, torch.Tensor) and t.dtype in half for t in ts)

    def _chunk_rows(self):
        """Rows per chunk when the loop runs over a large list of tensors (stacking it whole and
        materialising every step would be slower than the loop), else 0."""
        if not self.sources:
            return 0
        lists = [s for s in self.sources if isinstance(s, (list, tuple))]
        if not lists or self.match.plan.index_as_value or self.step != 1 or not self._chunkable():
            return 0
        row = sum(s[0].numel() * s[0].element_size() for s in lists)
        if row * self.n < _CHUNK_BYTES:
            return 0
        return max(1, _CHUNK_BYTES // 8 // max(row, 1))

    def _memory_rows(self, ref):
        """Rows per chunk when running every iteration at once would need more memory than the
        budget (the bytes one iteration allocates, measured once per signature, times the trip
        count), else 0."""
        rt = self.rt
        key = self._bytes_key()
        per = rt.iter_bytes.get(key)
        if per is None:
            # (measured where it can be: the cost model weighs it too, Token._weigh)
            per = rt.iter_bytes[key] = self._iteration_bytes(ref) if self._measurable() else 0
        need = per * self.n
        if need <= _MEMORY_FLOOR and rt.memory_budget is None or not self._chunkable():
            return 0
        device = self.raw[0][0].device if self.raw else None
        budget = rt.memory_budget or default_budget(device)
        transient = (per - rt.iter_out.get(key, per)) * self.n     # (what the loop lets go each iteration)
        fresh = rt.memory_budget is None and transient > _FRESH_SPLIT and (device is None or device.type == "cpu") \
            and not budget < _FRESH_CHUNK
        if fresh:
            budget = _FRESH_CHUNK
        if not budget or need <= budget:
            return 0
        rows = max(1, budget // max(per, 1))
        rt.chunked[self.loop_id] = (-(-self.n // rows), rows, need, budget, fresh)
        return rows

    def _iteration_bytes(self, ref):
        """Bytes of the new tensors one iteration creates (each storage counted once)."""
        self.lazy_lists = True
        try:
            lazy = self._inputs()
        finally:
            self.lazy_lists = False
        if not lazy or self.n == 0:
            return 0
        args = [t.take(0, 1)[0] if isinstance(t, _Rows) else t.select(d, 0) for t, d in lazy]
        if self.match.plan.index_as_value:
            args.append(self.first)
        counter = _ByteCounter(args)
        try:
            with torch.no_grad(), counter:
                res = ref(*args)
        except Exception:
            return 0   # the batched run reports real failures
        # (what the iteration keeps, its results, apart: rt.iter_out)
        outs = {_storage(t): t.untyped_storage().nbytes() for t in torch.utils._pytree.tree_leaves(res)
                if isinstance(t, torch.Tensor) and t.device.type != "meta"}
        self.rt.iter_out[self._bytes_key()] = min(sum(outs.values()), counter.total)
        return counter.total

    def _run_chunked(self, body, ref, rows):
        """Run the batch in chunks of `rows` iterations, writing each chunk's results into full outputs."""
        self.lazy_lists = True
        self.tag, self.scan_free = "", True
        try:
            lazy = self._inputs()
        finally:
            self.lazy_lists = False
        n, first, full, parts = self.n, self.first, None, None
        # (the modes the whole batch would try, in its order: the batched body's masked
        # reductions, which vmap has no form for, chunked too)
        modes = self._modes("", direct=False)
        good = [m for m in modes if (self.loop_id, self.sig, m, "") not in self.rt.bad_modes]
        tries = good or modes[-1:]
        # one list whose stacked chunk is the shape and dtype of the one output: from the second
        # chunk on, the chunk is stacked straight into the output's rows and the body computes
        # in place there (no temporaries, no copy), where its operations allow
        lists = [j for j, (t, _) in enumerate(lazy) if isinstance(t, _Rows)]
        owned_at, own_body = None, None
        try:
            for c0 in range(0, n, rows):
                c1 = min(n, c0 + rows)
                self.n, self.first, self._rows = c1 - c0, first + c0 * self.step, {}
                dest = full[0].narrow(0, c0, c1 - c0) if owned_at is not None else None
                inputs = [(t.take(c0, c1, out=dest if j == owned_at else None) if isinstance(t, _Rows)
                           else t.narrow(d, c0, c1 - c0), d) for j, (t, d) in enumerate(lazy)]
                if dest is not None:
                    o = self._broadcast(own_body, inputs, None, in_place=False)[0]
                    if not (o.data_ptr() == dest.data_ptr() and o.shape == dest.shape
                            and o.stride() == dest.stride() and o.dtype == dest.dtype):
                        # the body did not end in place: as full[c0:c1] = o (a view of the chunk's
                        # own rows, a transpose, is copied out first)
                        dest.copy_(o.clone() if _storage(o) == _storage(dest) else o)
                    continue
                if c0:
                    outs = self._chunk_mode(mode, body, inputs)
                else:
                    errors = []
                    for mode in tries:
                        try:
                            outs = self._chunk_mode(mode, body, inputs)
                            self._check(ref or body, inputs, outs, mode)
                        except GuardFailed as e:
                            errors.append(f"{mode}: {e}")
                            if getattr(e, "final", False) or mode == tries[-1]:
                                merged = GuardFailed("; ".join(errors), data=e.data)
                                merged.final = getattr(e, "final", False)   # (strict mode: as the mode's own)
                                raise merged from None
                            if not e.data:
                                self.rt.bad_modes.add((self.loop_id, self.sig, mode, ""))
                            continue
                        break
                if c0 == 0:
                    grad = any(o.requires_grad for o in outs)
                    parts = [[] for _ in outs] if grad else None
                    full = None if grad else [torch.empty((n, *o.shape[1:]), dtype=o.dtype, device=o.device)
                                              for o in outs]
                    if full is not None and mode == "broadcast" and len(lists) == 1 and len(outs) == 1:
                        item = lazy[lists[0]][0].items[0]
                        o = outs[0]
                        if (type(item) is torch.Tensor and o.shape[1:] == item.shape and o.dtype == item.dtype
                                and o.device == item.device and not item.requires_grad):
                            param = self.match.plan.mapped[lists[0]].param
                            own = self._in_place_body(body, (param,))
                            if own is not body:
                                owned_at, own_body = lists[0], own
                for k, o in enumerate(outs):
                    if parts is not None:
                        parts[k].append(o)
                    else:
                        full[k][c0:c1] = o
        finally:
            self.n, self.first, self._rows = n, first, {}
        outs = tuple(torch.cat(p, 0) for p in parts) if parts is not None else tuple(full)
        self.rt.succeeded.add((self.loop_id, self.sig))
        self.rt.ran[self.loop_id] = mode
        self.rt._note(self.loop_id, "vectorized", mode, getattr(self, "estimate", None))
        return outs

    def _chunk_mode(self, mode, body, inputs):
        """One chunk's batch in `mode` (_run_chunked): vmap refusing the body is a GuardFailed."""
        try:
            return self._mode(mode, body, None, inputs)
        except RuntimeError as e:
            if mode != "vmap" or "vmap" not in str(e):
                raise
            raise GuardFailed(f"vmap: {_vmap_reason(e)}") from None

    def _batched(self, body, inputs):  # noqa: C901 (the general path; _hot_batched is the steady state)
        """The body rewritten into whole-batch operations for this signature (lowering/batched.py)."""
        rt, n = self.rt, self.n
        key = (self.loop_id, self.sig, self.tag)
        code = rt.batched.get(key)
        if self.levels is None:
            sizes = [n]
            args = [t.movedim(d, 0) if d else t for t, d in inputs]
            if self.match.plan.index_as_value:
                args.append(self._index(_device_of(args[0] if args else None, self.free_tensors)))
        else:
            sizes = self.level_sizes()
            args = self._nest_layout(inputs)
        if code is None:
            from .batching import build
            fdef, av = rt.batchable[(self.loop_id, self.tag)]
            plan = self.match.plan
            index = plan.space.index if (self.levels is None and plan.index_as_value and plan.space.kind == "range"
                                         and fdef.args.args and fdef.args.args[-1].arg == plan.space.index) else None
            masks = {p: lay[2] for lay in self.match_layout() if lay[2] is not None
                     for p in ((lay[0],) if lay[0] is not None else ()) + tuple(lay[1])} if not self.tag else None
            code = rt.batched[key] = build(fdef, av, body, lambda j: self._row_args(inputs, j), args, sizes, index,
                                           plan.branches, masks)
        if rt.events is not None and not self.tag:
            rt.batched_seen[self.loop_id] = code     # for explain: the batched body, or why there is none
        if isinstance(code, str):
            e = GuardFailed(f"no batched form: {code}")
            e.sides = getattr(code, "sides", False)
            # a Python number (an `.item()` value) against a half-precision tensor: torch computes
            # that in float32; vmap would hold the number as a 0-d tensor and round it to half
            e.final = code.startswith(_HALF_NUMBER)
            raise e
        if code.big is not None and _large(args):
            code = code.big        # elementwise temporaries reused in place
        try:
            fn = code.bind(body)
        except Exception:          # an inlined helper was redefined: write the batched body again
            del rt.batched[key]
            raise GuardFailed("a helper changed since the batched body was written", data=True) from None
        try:
            outs = fn(*args, sizes)
        except GuardFailed:
            raise
        except IndexError as e:
            raise GuardFailed(f"the batched body raised IndexError: {e}", data=True) from None
        except Exception as e:
            raise GuardFailed(f"the batched body raised {type(e).__name__}: {e}") from None
        lead = len(sizes)
        for o in outs:
            if not isinstance(o, torch.Tensor) or o.dim() < lead or (
                    o.shape[0] != n if lead == 1 else list(o.shape[:lead]) != sizes):
                raise GuardFailed("a batched output does not keep the batch dimensions")
        return outs

    def _nest_layout(self, inputs):
        """A loop nest's inputs for the batched body: one dimension per level in front, in level
        order (size 1 for a level a tensor is not indexed by), then the per-iteration dimensions;
        the indices used as numbers as aranges along their level."""
        levels = len(self.levels)
        key = (self.loop_id, self.sig)
        recipe = self.rt.nest_layouts.get(key)
        if recipe is None:
            # from ranks alone, so once per signature: (permutation or None, levels to add) per input
            recipe = []
            for (t, _), (_, spec, _, _) in zip(inputs, self.raw):
                pos = {lv: p for lv, p, _ in spec}
                order = [pos[lv] for lv in range(levels) if lv in pos]
                rest = [k for k in range(t.dim()) if k not in order]
                recipe.append((None if order + rest == list(range(t.dim())) else (*order, *rest),
                               tuple(lv for lv in range(levels) if lv not in pos)))
            self.rt.nest_layouts[key] = recipe
        args = []
        for (t, _), (perm, missing) in zip(inputs, recipe):
            if perm is not None:
                t = t.permute(*perm)
            for lv in missing:
                t = t.unsqueeze(lv)
            args.append(t)
        value_indices = self.match.plan.value_indices
        if not value_indices:
            return args
        names = [ix for ix, _ in self.match.plan.space.levels]
        device = args[0].device if args else None
        for ix in value_indices:
            lv = names.index(ix)
            st, sp, k = self.levels[lv]
            shape = [1] * levels
            shape[lv] = k
            _index_fits(itertools.chain((m[0] for m in self.raw), self.free_tensors), st, st + (k - 1) * sp,
                        _index_uses(self.match.plan))
            args.append(torch.arange(st, st + k * sp, sp, device=device).reshape(shape))
        return args

    def _broadcast(self, body, inputs, device, in_place=True):
        n = self.n
        key = (self.loop_id, self.sig, self.tag)
        recipe = self.rt.bcast.get(key)
        if recipe is None:
            recipe = self.rt.bcast[key] = self._broadcast_recipe(inputs)
        if isinstance(recipe, str):
            raise GuardFailed(recipe)
        r, ones, pos = recipe
        args = _into_layout(inputs, ones, r, pos, n)
        if self.match.plan.index_as_value:
            if device is None:     # the index lives with the data (a GPU loop's index on the GPU)
                device = _device_of(inputs[0][0] if inputs else None, self.free_tensors)
            args.append(self._index(device).view(*_ONES[:pos], n, *_ONES[:r - pos]))
        if in_place and _large(args):
            body = self._in_place_body(body)
        outs = _out_of_layout(self, body(*args), r, pos, n)
        if outs is None:
            raise GuardFailed("an output does not keep the batch dimension")
        return outs

    def _in_place_body(self, body, owned=()):
        """The body with elementwise temporaries reused in place (batching.temporaries_in_place;
        `owned`: parameters holding a tensor made for this call alone), or the body itself when
        nothing changes."""
        if self.tag:
            return body        # a pre-body or `break` condition: the in-place variant is the main body's
        return in_place_body(self.rt, self.loop_id, body, owned)

    def _broadcast_recipe(self, inputs):
        """How the slices line up for broadcasting, from their ranks alone (so once per signature):
        (rank of one iteration, size-1 dimensions each input needs after its loop dimension, the
        dimension that keeps the loop), or the reason it cannot."""
        dims = [t.dim() for t, _ in inputs]
        r = max(dims) - 1
        if any(t.dim() > r for t in self.free_tensors):
            return "a loop-invariant tensor has more dimensions than the slices"
        zero = {t.dtype for t, _ in inputs if t.dim() == 1}
        rows = {t.dtype for t, _ in inputs if t.dim() > 1} | {t.dtype for t in self.free_tensors if t.dim()}
        mixed = half_beside_int(zero)
        if mixed:
            return mixed
        for z in zero:
            for d in rows:
                if z != d and d in _HALF and _wide_int(z):
                    # (the loop reads a 0-d int at float32 precision against half rows: 2049 stays
                    # 2049; broadcast as a column it is rounded to half first)
                    return f"a per-iteration 0-d {z} value against {d} rows (broadcasting would round it to {d})"
                if z != d and zero_dim_dtype(d, z) != torch.promote_types(d, z):
                    # (`x[i] > thr[i]`, a float32 row against float64 numbers: the loop's 0-d value
                    # does not widen the row; broadcast as a column it would)
                    return f"a per-iteration 0-d {z} value against {d} rows (broadcasting would promote it)"
            for d in {t.dtype for t in self.free_tensors if not t.dim()}:
                if z != d and zero_dim_dtype(z, d) != torch.promote_types(z, d):
                    # (`x[i] > t` of a float32 row against a 0-d float64 `t`: two 0-d tensors promote
                    # each other in the loop; the column would not be widened by `t`)
                    return f"a per-iteration 0-d {z} value against a 0-d {d} tensor (broadcasting would not promote it)"
        # compute where the widest slice keeps its loop dimension (x[:, i]: dimension 1), so
        # the elementwise kernels and the final copy run in that tensor's own memory order
        pos = inputs[dims.index(r + 1)][1]
        if pos and any(t.dim() > r - pos for t in self.free_tensors):
            pos = 0
        return r, tuple(r + 1 - k for k in dims), pos

    def _direct(self, fn, inputs):
        """Batched inputs with the loop dimensions first (in loop order) for the einsum forms."""
        if self.levels is None:
            args = [t.movedim(d, 0) if d else t for t, d in inputs]
        else:
            perms = self.rt.perms.get((self.loop_id, self.sig))
            if perms is None:
                perms = self.rt.perms[(self.loop_id, self.sig)] = []
                for mp, (t, _) in zip(self.match.plan.mapped, inputs):
                    pos = [p for _, p, _ in sorted(mp.levels)]
                    rest = [k for k in range(t.dim()) if k not in pos]
                    perms.append(None if pos + rest == list(range(t.dim())) else (*pos, *rest))
            args = [t if pm is None else t.permute(*pm) for (t, _), pm in zip(inputs, perms)]
        sizes = self.level_sizes()
        outs = fn(*args, sizes)
        lead = len(sizes)
        for o in outs:
            if not isinstance(o, torch.Tensor) or list(o.shape[:lead]) != sizes:
                raise GuardFailed("a product does not keep the loop dimensions")
        return outs

    def _vmap_nest(self, body, inputs, device):
        plan = self.match.plan
        args = [t for t, _ in inputs]
        dims = [d for _, d in inputs]
        names = [ix for ix, _ in plan.space.levels]
        for ix in plan.value_indices:
            lv = names.index(ix)
            st, sp, k = self.levels[lv]
            _index_fits(itertools.chain((m[0] for m in self.raw), self.free_tensors), st, st + (k - 1) * sp,
                        _index_uses(self.match.plan))
            args.append(torch.arange(st, st + k * sp, sp, device=device))
            dims.append(tuple(0 if l2 == lv else None for l2 in range(len(names))))

        f, kinds = _tensors_only(body)
        for lv in reversed(range(len(names))):
            f = _vmapped(f, tuple(d[lv] for d in dims), self.levels[lv][2])
        if _stores_by_index(plan):
            with _deterministic():
                outs = f(*args)
        else:
            outs = f(*args)
        self._same_kinds(kinds)
        shape = tuple(k for _, _, k in self.levels)
        return tuple(o if tuple(o.shape[:len(shape)]) == shape else o.expand(*shape, *o.shape) for o in outs)

    def _vmap(self, body, inputs, device):
        key = (self.loop_id, self.sig)
        if key not in self.rt.vmap_types_ok:
            # (types, dtypes and ranks are the signature's: checked once for it)
            if any(_keeps_type(t) for t, _ in inputs) or any(_keeps_type(t) for t in self.free_tensors):
                raise GuardFailed("a torch.Tensor subclass under vmap (its results would be plain tensors)")
            _half_against_wider(inputs, self.free_tensors, self.levels is not None)
            self.rt.vmap_types_ok.add(key)
        if torch.is_grad_enabled() and self._products() and (
                any(isinstance(t, torch.Tensor) and t.requires_grad for t, _ in inputs)
                or any(t.requires_grad for t in self.free_tensors)):
            # vmap's gradient of prod takes its zero-safe form for the whole batch where one row
            # holds a zero: a row with inf but no zero gets a finite gradient, NaN in the loop
            # (the batched body checks the data: batching._Helpers.prod_input)
            raise GuardFailed("prod under vmap with inputs that require grad (the gradient of a row "
                              "with inf could differ from the loop's)")
        if self.levels is not None:
            return self._vmap_nest(body, inputs, device)
        args = [t for t, _ in inputs]
        dims = [d for _, d in inputs]
        if self.match.plan.index_as_value:
            args.append(self._index(device))
            dims.append(0)

        tensors_only, kinds = _tensors_only(body)
        if _stores_by_index(self.match.plan):
            with _deterministic():
                outs = vmap_call(tensors_only, args, dims, self.n)
        else:
            outs = vmap_call(tensors_only, args, dims, self.n)
        self._same_kinds(kinds)
        n = self.n
        return tuple(o if o.dim() and o.shape[0] == n else o.expand(n, *o.shape) for o in outs)

    def _same_kinds(self, kinds):
        """Under vmap the body ran once, on the whole batch: which outputs it gave as Python
        numbers must be what the one-time check saw for this signature. They can differ at one
        signature: `sum(x[j])` over an empty row is the int 0, a tensor otherwise. Then the loop
        runs this call, and the next one checks again."""
        pys = self.rt.pytypes.get((self.loop_id, self.sig)) if not self.tag else None
        if not pys:
            return
        for k, is_py in enumerate(kinds):
            if pys.get(k, is_py) != is_py:
                rt = self.rt
                rt.pytypes.pop((self.loop_id, self.sig), None)
                for key in [c for c in rt.checked if c[0] == self.loop_id and c[1] == self.sig]:
                    rt.checked.discard(key)
                for key in [c for c in rt.partial if c[0] == self.loop_id and c[1] == self.sig]:
                    del rt.partial[key]
                for key in [c for c in list(rt.fast) + list(rt.hot) if c[0] == self.loop_id and c[1] == self.sig]:
                    rt.fast.pop(key, None)
                    rt.hot.pop(key, None)
                raise GuardFailed(f"output {k} is a Python number on some calls and a tensor on others (a sum "
                                  "over an empty range is the int 0)", data=True)

    def _row_args(self, inputs, j):
        if self.levels is not None:
            pos = []
            for _, _, k in reversed(self.levels):
                pos.append(j % k)
                j //= k
            pos = pos[::-1]
            args = []
            for t, dims in inputs:
                for lv in range(len(self.levels)):
                    if dims[lv] is not None:
                        t = t.select(dims[lv], pos[lv])
                args.append(t)
            names = [ix for ix, _ in self.match.plan.space.levels]
            for ix in self.match.plan.value_indices:
                lv = names.index(ix)
                args.append(self.levels[lv][0] + pos[lv] * self.levels[lv][1])
            return args
        args = [t.select(d, j) for t, d in inputs]
        for k in self.numbers:
            args[k] = args[k].item()    # the element itself, a Python number, as the loop reads it
        if not getattr(self, "scan_free", True):
            n_plain = len(inputs) - len(getattr(self, "extra", []))
            for k, (_, py) in enumerate(getattr(self, "extra", [])):
                if py:
                    args[n_plain + k] = args[n_plain + k].item()
        if self.match.plan.index_as_value:
            if self.picked is not None:
                j = int(self.picked[0][j])     # (the kept iterations' own: _run_selected)
            args.append(self.first + j * self.step)
        return args

    def _check(self, ref, inputs, outs, mode):
        """Once per signature and mode: the original body, run on single iterations (the
        first, and the first where each conditional output happens), agrees with the batch.
        True where an earlier call's check stands and this call has nothing new to compare."""
        key = (self.loop_id, self.sig, mode, getattr(self, "tag", ""))
        if key in self.rt.checked:
            return
        tagged = bool(getattr(self, "tag", ""))
        # the main body's; a tagged pre-body has its own outputs, a side's are the main body's
        # (lowering.common._side_bodies), check-only masks included
        layout = () if tagged and not self.side_run else self.match_layout()
        masks = [lay[2] for lay in layout if lay[2] is not None]
        part = self.rt.partial.get(key)
        hits = set()        # masks whose first row this call compares
        if part is None:
            # the first iteration and the last: a rule that holds only for special values (a rank-1
            # matrix's spectral norm is its Frobenius norm) is less likely to hold in both
            total = self.n if self.levels is None else math.prod(k for _, _, k in self.levels)
            rows = [0, total - 1] if total > 1 else [0]
        else:
            # an earlier call of this signature compared the first and last rows, and the first row
            # of each mask that had one, but some output never had a value (a condition that never
            # held, a side that stores nothing): only a mask that holds a row for the first time
            # has anything new to compare. (Running the check again on every call made every call
            # slower than the loop, for good: `if not isfinite(x[i]): c += 1` on finite data; probeL)
            rows = []
        if ref is not None and masks:
            for pos in masks:
                if part is not None and pos in part[1]:
                    continue
                hit = outs[pos].flatten().nonzero().flatten()
                if hit.numel():
                    rows.append(int(hit[0]))
                    hits.add(pos)
        if not rows:
            return True
        seen: dict = {}
        flat = outs if self.levels is None else [o.flatten(0, len(self.levels) - 1) for o in outs]
        stored = self._stored_values(layout)
        for j in sorted(set(rows)):
            # (in the caller's grad mode: an operation that raises only where an input requires
            # grad, nll_loss's `weight`, raises here too, and the loop runs; the program's random
            # numbers stay its own)
            with torch.random.fork_rng(devices=[]):
                want_all = ref(*self._row_args(inputs, j))
            for k, (want, got) in enumerate(zip(want_all, flat)):
                if want is None:
                    continue
                row = got[j]
                if k in stored and isinstance(want, torch.Tensor) and row.dtype != want.dtype \
                        and _lossless(want, row) == row.dtype:
                    # a stored value from branches of several dtypes, held in one that holds them
                    # all (runtime.where): the store converts it as the loop converts this one
                    row = row.to(want.dtype)
                is_py = not isinstance(want, torch.Tensor)
                if k not in stored and seen.get(k, is_py) != is_py:
                    # (rows of two branches: a tensor on one side, its `.item()` on the other; a
                    # store converts either, setitem fills a row with a number)
                    raise GuardFailed(f"output {k} is a Python number in some iterations and a tensor in others")
                seen[k] = is_py
                if k in stored and isinstance(want, (bool, int, float)) and row.dim() != 0:
                    # a number stored into a row (`out[i] = 0` in one branch): setitem fills the
                    # row with it, as the batch's row must already hold it (in a dtype holding it)
                    want = torch.full(row.shape, want, dtype=row.dtype, device=row.device)
                self._compare(k, want, row)
        needed = len(outs) - sum(1 for lay in layout if lay[0] is None)  # branch probes return no value
        if tagged:
            self.rt.pytypes.setdefault((self.loop_id, self.sig, self.tag), {}).update(seen)
        else:
            pys = self.rt.pytypes.setdefault((self.loop_id, self.sig), {})
            for k, is_py in seen.items():
                if pys.get(k, is_py) != is_py:
                    raise GuardFailed(f"output {k} is a Python number in some iterations and a tensor in others")
                pys[k] = is_py
        done = set(seen) | (part[0] if part is not None else set())
        if len(done) >= needed:
            self.rt.checked.add(key)
            self.rt.partial.pop(key, None)
        else:
            self.rt.partial[key] = (done, hits | (part[1] if part is not None else set()))

    def _stored_values(self, layout):
        """Output positions that are values a store writes from branches (`if ..: out[i] = c
        else: out[i] = x[i]`, runtime.where with strict=False), not lists or totals."""
        plan = self.match.plan
        if not layout or not plan.branches:
            return set()
        return {lay[0] for lay, o in zip(layout, plan.outputs) if o.converts_each}

    def match_layout(self):
        return self.rt.layouts.get(self.loop_id, ())

    @staticmethod
    def _compare(k, want, row):
        if isinstance(want, (bool, int, float)) and not isinstance(want, torch.Tensor):
            if type(want) is not bool and type(want) is not int and type(want) is not float:
                raise GuardFailed(f"output {k}: one iteration gives a {type(want).__name__} (a subclass of a Python "
                                  f"number, such as numpy's float64: the batch would give the plain number)")
            if row.dim() != 0:
                raise GuardFailed(f"output {k}: one iteration gives a number, the batch a tensor row")
            got = row.item()
            if type(want) is float and row.is_floating_point() and row.dtype != torch.float64 \
                    and got != want and want == want:
                # a Python float (a double) held rounded in float32 (`if c: b = 0.1 else: b = 0.7`,
                # a where of two numbers): a float64 store or sum of it would see the rounding
                # (a store's own branches meet in a dtype that holds them exactly: runtime.where)
                raise GuardFailed(f"output {k}: one iteration gives the Python float {want!r}, the batch holds "
                                  f"{row.dtype}'s {got!r}")
            if isinstance(want, bool) or isinstance(want, int) and not isinstance(got, float):
                ok = got == want
            else:
                g, w = float(got), float(want)
                # (inf against the same inf, NaN against NaN: equal, where their difference is NaN)
                ok = g == w or abs(g - w) <= 1e-5 + 1e-4 * abs(w) or (g != g and w != w)
            if not ok:
                raise GuardFailed(f"output {k}: one iteration gives {want!r}, the batch {got!r}")
            return
        if not isinstance(want, torch.Tensor):
            raise GuardFailed(f"output {k} of one iteration is a {type(want).__name__}, not a tensor")
        if want.dtype != row.dtype:
            raise GuardFailed(f"output {k}: one iteration gives {want.dtype}, the batch {row.dtype}")
        if want.shape != row.shape:
            raise GuardFailed(f"output {k}: one iteration gives shape {tuple(want.shape)}, "
                              f"the batch {tuple(row.shape)}")
        row = row.detach()
        if want.is_floating_point() or want.is_complex():
            ok = torch.allclose(row, want, rtol=1e-3, atol=1e-5, equal_nan=True)
        else:
            ok = torch.equal(row, want)
        if not ok:
            raise GuardFailed(f"output {k}: the batched values differ from one iteration's")


class _Unchecked:
    """A callable the guard's purity check refuses (purity.why_impure: a callable it cannot
    tell anything about), standing for a method a helper calls on its argument that cannot be
    looked up without running code (a property on the way)."""
    __slots__ = ("__qualname__",)

    def __init__(self, label):
        self.__qualname__ = label

    def __call__(self, *args, **kwargs):      # (never called: only checked)
        raise TypeError(self.__qualname__)


_PARAM_CHAINS: dict = {}     # code object -> (positional parameter names, {parameter: [attribute chains]}) or None


def _param_chains(fn):
    """What a function does with each of its parameters, for runtime.param_methods: (positional
    names, {parameter: chains}, handed). A chain is a method called along attributes (`rng.normal()`:
    ("normal",); `o.sub.step()`: ("sub", "step")), an attribute read ("<get>", ..: a getter runs),
    or ("<escape>",), any other use (subscripted, aliased, rebound, an operand, handed to a method);
    `handed`: the parameters passed by name to a function called by its global name (checked in
    that one's own uses). None where its source is unknown (its own purity check refuses it)."""
    from .frontend import NoSource
    from .purity import _capture_cached
    try:
        tree = _capture_cached(fn).tree
    except NoSource:
        return None
    a = tree.args
    params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    rebound = names_stored(ast.Module(body=tree.body, type_ignores=[]))
    chains: dict = {}
    handed: list = []        # (callee's global name, ((position or keyword, parameter), ..)): `b(o, v)`
    seen = set()             # ids of the Name nodes of parameters those account for
    parents = {id(c): p for p in fastast.walk(tree) for c in ast.iter_child_nodes(p)}
    for n in fastast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) \
                and not isinstance(parents.get(id(n)), ast.Attribute):
            f, path = n, []
            while isinstance(f, ast.Attribute):
                path.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name) and f.id in params and f.id not in rebound:
                up = parents.get(id(n))
                called = isinstance(up, ast.Call) and up.func is n
                # a method called along the chain (`o.sub.step()`), or an attribute read (`o.scale`:
                # a property's getter runs), "<get>"
                chains.setdefault(f.id, []).append(tuple(reversed(path)) if called else ("<get>",) + tuple(reversed(path)))
                seen.add(id(f))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id not in params \
                and n.func.id not in rebound:
            given = tuple((k, e) for k, e in enumerate(n.args) if isinstance(e, ast.Name) and e.id in params
                          and e.id not in rebound) + tuple(
                (kw.arg, kw.value) for kw in n.keywords if kw.arg and isinstance(kw.value, ast.Name)
                and kw.value.id in params and kw.value.id not in rebound)
            if given and not any(isinstance(e, ast.Starred) for e in n.args) and not any(
                    kw.arg is None for kw in n.keywords):
                handed.append((n.func.id, tuple((k, e.id) for k, e in given)))
                seen.update(id(e) for _, e in given)
    # any other use of a parameter (subscripted, aliased, rebound, an operand, put in a container,
    # handed to a method or a module's function): "<escape>", checked on its object as a whole
    for n in fastast.walk(tree):
        if isinstance(n, ast.Name) and n.id in params and id(n) not in seen:
            chains.setdefault(n.id, []).append(("<escape>",))
    return ([x.arg for x in a.posonlyargs + a.args], {k: tuple(dict.fromkeys(v)) for k, v in chains.items()},
            tuple(handed))


def _inert(v, depth=0) -> bool:
    """Whether a value runs no Python code of its own and holds nothing that does: a plain tensor, a
    Python number, string or None, a dtype or device, a module, or a list, tuple or dict of those
    (two levels deep)."""
    if v is None or type(v) in _PLAIN_ARGS or type(v) in (torch.Size, types.ModuleType):
        return True
    if type(v) is torch.Tensor or type(v) is torch.nn.Parameter:
        return True
    if depth < 2 and type(v) in (list, tuple):
        return all(_inert(e, depth + 1) for e in v)
    if depth < 2 and type(v) is dict:
        return all(_inert(e, depth + 1) for e in v.values())
    return False


def _escaping(obj, param):
    """None where a helper may use the argument `obj` any way it likes (inert, or a module with no
    effect of its own); else a stand-in the purity check refuses."""
    if _inert(obj):
        return None
    if isinstance(obj, torch.nn.Module):
        from .purity import module_impurity
        bad = module_impurity(obj)
        return None if not bad else _Unchecked(bad)
    return _Unchecked(f"`{param}`, a {type(obj).__name__} the helper uses otherwise than through its methods "
                      "(subscripted, aliased, rebound, an operand or handed on)")


# methods of compiled types that change their object (numpy's arrays; a list's and a dict's are
# purity.MUTATORS), which purity.why_impure's check of a value's method does not name
_COMPILED_MUTATORS = frozenset(("fill", "sort", "resize", "put", "itemset", "setflags", "setfield", "partition",
                                "byteswap", "fill_diagonal", "shuffle"))


def _method_of(owner, attr):
    """`owner.attr` where reading it runs no Python code, bound as a call would bind it; None
    where the object has no such attribute; an _Unchecked where a getter would run."""
    if isinstance(owner, (torch.Tensor, types.ModuleType)) or type(owner) in (dict, list, tuple, str, set):
        return getattr(owner, attr, None)
    if attr in _COMPILED_MUTATORS and not isinstance(getattr(type(owner), attr, None), types.FunctionType):
        return _Unchecked(f"{type(owner).__qualname__}.{attr} (changes its object)")
    if isinstance(owner, type):
        # a class passed as an argument: its class and static methods, as `C.m` binds them
        for klass in owner.__mro__:
            if attr in klass.__dict__:
                c = klass.__dict__[attr]
                if isinstance(c, classmethod):
                    return types.MethodType(c.__func__, owner)
                if isinstance(c, staticmethod):
                    return c.__func__
                if isinstance(c, (types.FunctionType, types.BuiltinFunctionType)) or not hasattr(type(c), "__get__"):
                    return c
                return _Unchecked(f"{owner.__qualname__}.{attr} (read through a descriptor)")
        return None
    if isinstance(owner, torch.nn.Module):
        v = _peek(owner, (attr,))
        if v is not _UNKNOWN:
            return v
    d = getattr(owner, "__dict__", None)
    if isinstance(d, dict) and attr in d:
        return d[attr]
    for klass in type(owner).__mro__:
        if attr in klass.__dict__:
            c = klass.__dict__[attr]
            if isinstance(c, types.FunctionType):
                return types.MethodType(c, owner)
            if isinstance(c, staticmethod):
                return c.__func__
            if isinstance(c, classmethod):
                return types.MethodType(c.__func__, type(owner))
            get = getattr(type(c), "__get__", None)
            if isinstance(c, property) and isinstance(c.fget, types.FunctionType) or isinstance(get, types.FunctionType):
                return _Unchecked(f"{type(owner).__qualname__}.{attr} (read through a getter)")
            # (a plain value, a compiled type's method: no Python code runs to read it)
            return getattr(owner, attr, None)
    if hasattr(type(owner), "__getattr__") and not isinstance(owner, torch.nn.Module):
        return _Unchecked(f"{type(owner).__qualname__}.{attr} (read through __getattr__)")
    return None


_PLAIN_ARGS = frozenset({int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device})


class _Elements:
    """The elements of a loop-invariant container, one of which a helper gets per iteration
    (`h(objs[i % 2], x[i])`): runtime.param_methods checks one of each type."""
    __slots__ = ("container",)

    def __init__(self, container):
        self.container = container


class _Contained:
    """Values an argument expression is made of (`(o, 2.0)`, `o or None`): the argument may be any
    of them or hold them, so each must be inert (runtime.param_methods)."""
    __slots__ = ("values",)

    def __init__(self, values):
        self.values = values


def _contained(values):
    return None if all(_inert(v) for v in values) else _Contained(values)


def _elements_of(c):
    if isinstance(c, torch.Tensor) or type(c) in _PLAIN_ARGS:
        return None           # (its elements are tensors or characters: nothing of their own runs)
    return _Elements(c)


def _representatives(c):
    """One element of each type in a container (its values for a dict); None where it is no
    list, tuple or dict (the container itself is then checked as a whole)."""
    if type(c) is dict:
        c = c.values()
    elif type(c) not in (list, tuple):
        return None
    reps = {}
    for e in c:
        reps.setdefault(type(e), e)
    return list(reps.values())


def _param_methods(fn, args=(), kwargs=None, depth=0):
    """For the guard's purity check (analysis.loops._bound_methods): the first method that the
    helper `fn` calls on an argument the loop passes it (`args` / `kwargs`, None for a per-iteration
    one) and purity.why_impure refuses, else None. `def jitter(rng, v): return v + rng.normal()`
    called as `jitter(gen, x[i])`: `gen.normal`, which draws. An argument the helper hands on to
    another function by its global name (`def a(o, v): return b(o, v)`) is checked in that one's
    calls too, four levels deep (deeper: refused)."""
    if depth > 4:
        return _Unchecked("a helper's argument handed on through more than four helpers")
    while isinstance(fn, functools.partial):
        # (the objects a partial binds are its first arguments and keywords)
        args, kwargs = tuple(fn.args) + tuple(args), {**fn.keywords, **(kwargs or {})}
        fn = fn.func
    shift = 0
    if isinstance(fn, types.MethodType):
        fn, shift = fn.__func__, 1
    if type(fn) is not types.FunctionType:
        return None
    info = _PARAM_CHAINS.get(fn.__code__, _UNKNOWN)
    if info is _UNKNOWN:
        info = _param_chains(fn)
        if info is not None:
            names, chains, handed = info
            # per position: 0 no method called on it, 1 only pure tensor methods, 2 others
            kinds = tuple(0 if p not in chains else 1 if all(
                c[0] in ("<escape>", "<get>") or len(c) == 1 and pure_tensor_method(c[0]) for c in chains[p]) else 2
                for p in names)
            info = (names, chains, handed, kinds)
        _PARAM_CHAINS[fn.__code__] = info
    if not info or not info[1] and not info[2]:
        return None
    names, chains, handed, kinds = info
    if not handed and not kwargs and not fn.__defaults__ and not fn.__kwdefaults__:
        # (the steady state: tensors and numbers passed to parameters of tensor methods alone)
        for k, v in enumerate(args):
            j = k + shift
            if j >= len(kinds):
                break
            kind = kinds[j]
            if type(v) is _Elements or type(v) is _Contained:
                break
            if kind == 0 or v is None or type(v) in _PLAIN_ARGS or kind == 1 and (
                    type(v) is torch.Tensor or type(v) is torch.nn.Parameter):
                continue
            break
        else:
            return None
    pairs = [(names[k + shift], v) for k, v in enumerate(args) if k + shift < len(names)]
    if kwargs:
        pairs += list(kwargs.items())
    # the parameters the call leaves to their defaults: those objects too (`def h(v, c=C)`)
    given_names = {p for p, _ in pairs}
    if fn.__defaults__:
        pos = names[len(names) - len(fn.__defaults__):]
        pairs += [(p, v) for p, v in zip(pos, fn.__defaults__) if p not in given_names and p in chains]
    if fn.__kwdefaults__:
        pairs += [(p, v) for p, v in fn.__kwdefaults__.items() if p not in given_names and p in chains]
    for p, v in list(pairs):
        if type(v) is _Contained:
            for e in v.values:
                bad = _escaping(e, p)
                if bad is not None:
                    return bad
    pairs = [(p, v) for p, v in pairs if type(v) is not _Contained]
    if handed:
        from .frontend import scope_lookup
        known = {p: v for p, v in pairs if v is not None}
        for callee, given in handed:
            if not any(p in known for _, p in given):
                continue
            found, g = scope_lookup(fn, callee)
            if not found:
                continue
            pos = [None] * (1 + max((k for k, _ in given if type(k) is int), default=-1))
            kws = {}
            for k, p in given:
                if type(k) is int:
                    pos[k] = known.get(p)
                else:
                    kws[k] = known.get(p)
            hit = _param_methods(g, tuple(pos), kws, depth + 1)
            if hit is not None:
                return hit
    expanded = []
    for param, obj in pairs:
        if type(obj) is _Elements:
            reps = _representatives(obj.container)
            if reps is None:
                bad = _escaping(obj.container, param)
                if bad is not None:
                    return bad
                continue
            expanded += [(param, e) for e in reps]
        else:
            expanded.append((param, obj))
    for param, obj in expanded:
        if obj is None or type(obj) in _PLAIN_ARGS:
            continue
        if (type(obj) is torch.Tensor or type(obj) is torch.nn.Parameter) and param in names \
                and kinds[names.index(param)] < 2:
            continue    # (a tensor's compiled methods: pure unless in place, which the helper's own scan refuses)
        for chain in chains.get(param, ()):
            if chain[0] == "<escape>":
                bad = _escaping(obj, param)
                if bad is not None:
                    return bad
                continue
            if chain[0] == "<get>":
                if isinstance(obj, (torch.Tensor, types.ModuleType)):
                    continue
                from .purity import _getter_impurity
                bad = _getter_impurity(obj, list(chain[1:]), getattr(fn, "__qualname__", "helper"))
                if bad:
                    return _Unchecked(bad)
                continue
            v = obj
            for attr in chain:
                v = _method_of(v, attr)
                if v is None or isinstance(v, _Unchecked):
                    break
            if v is not None and why_impure(v):
                return v
    return None


FunctionRuntime.param_methods = staticmethod(_param_methods)
FunctionRuntime.elements_of = staticmethod(_elements_of)
FunctionRuntime.contained = staticmethod(_contained)
