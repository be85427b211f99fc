"""Equivalence checking: compare the original function with its rewrite."""
from __future__ import annotations

import cmath
import copy
import dataclasses
import inspect
import math
import warnings
from typing import Any

import torch

__all__ = [
    "EquivalenceError",
    "default_tolerances",
    "compare",
    "clone_args",
    "randomize_like",
    "assert_equivalent",
]


class EquivalenceError(AssertionError):
    """The rewritten function behaved differently from the original."""


# ---------------------------------------------------------------------------
# Tolerances

_TOLERANCES = {
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-3),  # 8-bit mantissa: looser than float16
    torch.float32: (1e-4, 1e-5),  # well above eps, so long sums may be reassociated
    torch.float64: (1e-7, 1e-9),
}
_COMPLEX_PART = {torch.complex32: torch.float16, torch.complex64: torch.float32,
                 torch.complex128: torch.float64}


def default_tolerances(dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing values of `dtype`; (0, 0) means exact."""
    dtype = _COMPLEX_PART.get(dtype, dtype)
    if dtype in _TOLERANCES:
        return _TOLERANCES[dtype]
    if dtype.is_floating_point:  # float8 and other narrow floats
        return _TOLERANCES[torch.float16]
    return (0.0, 0.0)


# Python floats usually come from `.item()` on float32 tensors, so float64 tolerances
# would reject legitimate reassociation.
_PY_FLOAT_TOLERANCES = default_tolerances(torch.float32)


# ---------------------------------------------------------------------------
# Comparing results


def compare(expected, got, *, rtol=None, atol=None, path="result") -> str | None:
    """None when `got` matches `expected`, else one line naming the path and the difference."""
    return _compare(expected, got, rtol, atol, path, set())


def _compare(expected, got, rtol, atol, path, seen) -> str | None:
    if expected is got:
        return None
    if type(expected) is not type(got):
        return f"{path}: type differs: expected {_type_name(expected)}, got {_type_name(got)}"
    # Cycle guard for attribute recursion (objects that point back at each other).
    key = (id(expected), id(got))
    if key in seen:
        return None
    seen.add(key)
    sub = lambda e, g, p: _compare(e, g, rtol, atol, p, seen)  # noqa: E731

    if isinstance(expected, torch.Tensor):
        return _compare_tensors(expected, got, rtol, atol, path)
    if isinstance(expected, float):
        return _compare_scalars(expected, got, rtol, atol, path, math.isclose, math.isnan)
    if isinstance(expected, complex):
        return _compare_scalars(expected, got, rtol, atol, path, cmath.isclose, cmath.isnan)
    if isinstance(expected, (bool, int, str, bytes)):
        return None if expected == got else f"{path}: expected {expected!r}, got {got!r}"
    if isinstance(expected, (list, tuple)):
        if len(expected) != len(got):
            return f"{path}: length differs: expected {len(expected)}, got {len(got)}"
        fields = getattr(expected, "_fields", None)  # namedtuple: name the field
        parts = [(f"{path}.{fields[i]}" if fields else f"{path}[{i}]", e, g)
                 for i, (e, g) in enumerate(zip(expected, got))]
        return _first(sub(e, g, p) for p, e, g in parts)
    if isinstance(expected, dict):
        return _compare_dicts(expected, got, path, sub)
    if dataclasses.is_dataclass(expected):
        # The generated __eq__ would call bool() on tensor fields: compare field by field.
        names = [f.name for f in dataclasses.fields(expected)]
        return _first(sub(getattr(expected, n), getattr(got, n), f"{path}.{n}") for n in names)
    if _is_numpy(expected):
        return _compare_numpy(expected, got, rtol, atol, path)
    if type(expected).__eq__ is object.__eq__:
        # Two runs build two objects, so identity equality would always fail: compare state
        # (an instance dict, slots), or nothing where an object has none (object(), an iterator)
        if hasattr(expected, "__dict__"):
            return sub(vars(expected), vars(got), path + ".__dict__")
        slots = [n for k in type(expected).__mro__ for n in getattr(k, "__slots__", ())
                 if isinstance(n, str) and n not in ("__dict__", "__weakref__")]
        if slots:
            return _first(sub(getattr(expected, n, None), getattr(got, n, None), f"{path}.{n}") for n in slots)
        if type(expected) is object or hasattr(expected, "__next__"):
            return None      # (a bare object, an iterator: no state two runs could be compared by)
    return _compare_by_eq(expected, got, path)


def _first(problems) -> str | None:
    """The first problem of a lazy sequence: stop comparing at the first difference."""
    return next((p for p in problems if p), None)


def _type_name(x) -> str:
    return type(x).__qualname__


def _num(x: float) -> str:
    return f"{x:.2g}"


def _compare_scalars(expected, got, rtol, atol, path, isclose, isnan) -> str | None:
    rtol = _PY_FLOAT_TOLERANCES[0] if rtol is None else rtol
    atol = _PY_FLOAT_TOLERANCES[1] if atol is None else atol
    if (isnan(expected) and isnan(got)) or isclose(expected, got, rel_tol=rtol, abs_tol=atol):
        return None
    return (f"{path}: expected {expected!r}, got {got!r} "
            f"(abs diff {_num(abs(expected - got))}, rtol {_num(rtol)}, atol {_num(atol)})")


def _compare_dicts(expected, got, path, sub) -> str | None:
    if expected.keys() != got.keys():
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        return f"{path}: keys differ: missing {missing}, unexpected {extra}"
    if list(expected) != list(got):  # iteration order is observable
        return f"{path}: key order differs: expected {list(expected)}, got {list(got)}"
    return _first(sub(expected[k], got[k], f"{path}[{k!r}]") for k in expected)


def _compare_by_eq(expected, got, path) -> str | None:
    try:
        equal = bool(expected == got)
    except Exception as exc:  # __eq__ returning something without a truth value
        return f"{path}: cannot compare {_type_name(expected)} objects ({exc})"
    return None if equal else f"{path}: expected {expected!r}, got {got!r}"


def _is_numpy(x) -> bool:
    try:
        import numpy
    except ImportError:  # numpy is optional for torch
        return False
    return isinstance(x, (numpy.ndarray, numpy.generic))


def _compare_numpy(expected, got, rtol, atol, path) -> str | None:
    if expected.dtype != got.dtype:
        return f"{path}: dtype differs: expected {expected.dtype}, got {got.dtype}"
    try:
        e, g = torch.as_tensor(expected), torch.as_tensor(got)
    except (TypeError, RuntimeError):  # object and string arrays have no tensor dtype
        return _compare_by_eq(expected.tolist(), got.tolist(), path)
    return _compare_tensors(e, g, rtol, atol, path)


def _compare_tensors(expected: torch.Tensor, got: torch.Tensor, rtol, atol, path) -> str | None:
    for attr in ("dtype", "device", "layout", "shape", "requires_grad"):
        e, g = getattr(expected, attr), getattr(got, attr)
        if e != g:
            if attr == "shape":
                e, g = tuple(e), tuple(g)
            return f"{path}: {attr} differs: expected {e}, got {g}"
    if expected.numel() == 0 or expected.device.type == "meta":
        return None  # no values to compare
    e, g = expected.detach(), got.detach()
    if e.layout != torch.strided:
        e, g = e.to_dense(), g.to_dense()
    if e.device.type == "mps":  # no float64 there
        e, g = e.cpu(), g.cpu()
    default_rtol, default_atol = default_tolerances(expected.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    return _compare_values(e, g, rtol, atol, path)


def _compare_values(e: torch.Tensor, g: torch.Tensor, rtol, atol, path) -> str | None:
    exact = not (e.is_floating_point() or e.is_complex())
    ok = e == g  # in the original dtype: float64 would round large int64 values
    wide = torch.complex128 if e.is_complex() else torch.float64
    # Differences in a wider dtype, so that they neither round nor overflow.
    e0, g0, e, g = e, g, e.to(wide), g.to(wide)
    diff = (e - g).abs()
    if not exact:
        ok |= torch.isnan(e) & torch.isnan(g)
        # Infinities must match exactly (inf <= rtol * inf would accept -inf); a NaN
        # difference compares False, so it stays a mismatch.
        ok |= (diff <= atol + rtol * e.abs()) & e.isfinite()
    bad = ~ok
    count = int(bad.sum())
    if count == 0:
        return None
    # Report the worst mismatch; a NaN against a number counts as the worst of all.
    score = torch.where(bad, diff.nan_to_num(nan=math.inf), -1.0).reshape(-1)
    flat = int(score.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), e.shape))
    if exact:  # integers from the original dtype: float64 rounds above 2**53
        ev, gv = e0.reshape(-1)[flat].item(), g0.reshape(-1)[flat].item()
        detail = f"expected {ev}, got {gv} (abs diff {abs(int(ev) - int(gv))}"
    else:
        ev, gv = e.reshape(-1)[flat].item(), g.reshape(-1)[flat].item()
        detail = (f"expected {ev:.6g}, got {gv:.6g} (abs diff {_num(float(score[flat]))}, "
                  f"rtol {_num(rtol)}, atol {_num(atol)}")
    where = f" at index {index}" if index else ""
    return f"{path}: values differ{where}: {detail}; {count} of {e.numel()} elements differ)"


# ---------------------------------------------------------------------------
# Copying and randomizing arguments


def clone_args(args, kwargs):
    """Independent deep copies of (args, kwargs); aliasing between arguments is kept."""
    memo: dict = {}
    return tuple(_clone(a, memo) for a in args), {k: _clone(v, memo) for k, v in kwargs.items()}


def _clone(obj, memo):
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, torch.Tensor):
        result = _clone_tensor(obj, memo)
    elif type(obj) in (list, tuple, dict) or _is_namedtuple(obj):
        result = _map_container(obj, lambda x: _clone(x, memo))
    else:
        try:  # nn.Module and everything else; the shared memo keeps aliases aliased
            result = copy.deepcopy(obj, memo)
        except Exception:  # generators, locks, non-leaf tensors inside objects...
            result = obj
    memo[id(obj)] = result
    return result


def _clone_tensor(t: torch.Tensor, memo) -> torch.Tensor:
    """A leaf copy with the same requires_grad flag (of an activation, an activation: _like_original).

    Tensors that share storage (`x` and its view `x[0]`) get copies that share one cloned
    storage, so an in-place write through one argument shows in the other, as it would
    in the original call.
    """
    plain = (t.layout == torch.strided and type(t) in (torch.Tensor, torch.nn.Parameter)
             and not t.is_conj() and not t.is_neg() and t.device.type != "meta")
    storage = t.untyped_storage() if plain else None
    if storage is not None and storage.data_ptr() != 0:
        key = ("storage", t.device, storage.data_ptr())
        if key not in memo:
            memo[key] = storage.clone()
        # (an inference tensor only for one: under inference_mode, a copy of an activation's alias
        # is a plain tensor over the same memory, as the alias is)
        with torch.inference_mode(t.is_inference()):
            new = torch.empty(0, dtype=t.dtype, device=t.device)
            new.set_(memo[key], t.storage_offset(), t.size(), t.stride())
    else:
        new = t.detach().clone()
    new = _like_original(new, t)
    if (t.is_leaf or t.retains_grad) and t.grad is not None:
        if not t.is_leaf:
            new.retain_grad()
        new.grad = _clone_tensor(t.grad, memo)     # (`p.grad[i]` read by the function)
    return new


def _tracked(t: torch.Tensor) -> bool:
    """Whether `t` requires grad without being a leaf, nor a view of one (an in-place write into
    either raises), in a dtype that can: an activation, whose copy is made one too (_like_original)."""
    if not t.requires_grad or t.is_leaf or not (t.is_floating_point() or t.is_complex()):
        return False
    base = t._base
    return base is None or not base.is_leaf


def _like_original(new: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Give a fresh leaf tensor the original's Parameter type and requires_grad flag; of an
    activation (_tracked), an activation (_Activation)."""
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(new, requires_grad=t.requires_grad)
    if _tracked(t):
        with torch.inference_mode(False), torch.enable_grad():     # (as when the original was made)
            if new.is_inference():
                new = new.clone()
            anchor = torch.zeros(new.shape, dtype=new.dtype, device=new.device, requires_grad=True)
            new = _Activation.apply(new, anchor)
        new._av_anchor = anchor      # (its gradient: _grads)
        return new
    return new.requires_grad_(True) if t.requires_grad else new


class _Activation(torch.autograd.Function):
    """A plain tensor marked, in place, as computed from `anchor`: the same tensor and memory
    (arguments sharing memory still share it), now a non-leaf that requires grad, which a
    function may write into in place as into the original activation; backward hands the
    gradient reaching it to `anchor`."""

    @staticmethod
    def forward(ctx, t, anchor):
        ctx.mark_dirty(t)
        return t

    @staticmethod
    def backward(ctx, grad):
        return None, grad


def randomize_like(args, kwargs, generator):
    """Fresh random tensors with the same shapes, dtypes, devices and requires_grad flags.

    Integer tensors draw from [min, max] of the original values so index tensors stay
    valid; Python scalars and other objects are returned unchanged.
    """
    memo: dict = {}
    rand = lambda x: _randomize(x, generator, memo)  # noqa: E731
    return tuple(rand(a) for a in args), {k: rand(v) for k, v in kwargs.items()}


def _randomize(obj, generator, memo):
    if id(obj) in memo:  # the same tensor passed twice stays one tensor
        return memo[id(obj)]
    if isinstance(obj, torch.Tensor):
        result = _random_tensor(obj, generator)
    elif type(obj) in (list, tuple, dict) or _is_namedtuple(obj):
        result = _map_container(obj, lambda x: _randomize(x, generator, memo))
    else:
        result = obj
    memo[id(obj)] = result
    return result


def _random_tensor(t: torch.Tensor, generator) -> torch.Tensor:
    # Draw on the CPU generator, then move: a CPU generator cannot fill CUDA memory.
    if t.dtype == torch.bool:
        values = torch.randint(0, 2, t.shape, generator=generator).bool()
    elif t.is_floating_point() or t.is_complex():
        wide = torch.complex128 if t.is_complex() else torch.float64
        values = torch.randn(t.shape, dtype=wide, generator=generator)
    elif t.numel() == 0:
        values = torch.empty(t.shape, dtype=torch.int64)
    else:
        low, high = int(t.min()), int(t.max())
        try:
            values = torch.randint(low, high + 1, t.shape, generator=generator)
        except RuntimeError:  # the range does not fit int64: keep the original values
            values = t.detach().cpu()
    new = torch.empty_like(t, requires_grad=False)  # keeps the original's strides
    new.copy_(values.to(t.dtype))
    return _like_original(new, t)


def _is_namedtuple(obj) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def _map_container(obj, fn):
    if isinstance(obj, dict):
        return {k: fn(v) for k, v in obj.items()}
    items = [fn(x) for x in obj]
    return type(obj)(*items) if _is_namedtuple(obj) else type(obj)(items)


# ---------------------------------------------------------------------------
# assert_equivalent


def assert_equivalent(fn, *args, rtol=None, atol=None, grad=False, trials=1, **kwargs) -> None:
    """Raise EquivalenceError unless `fn`'s rewrite behaves like its original on these arguments.

    Compares results, raised exceptions, in-place effects on arguments and, with
    `grad=True`, gradients with respect to floating-point tensor arguments. Trials after
    the first use fresh random values of the same shapes, dtypes and devices.
    """
    import types
    from autovec.api import _BoundAutovec, autovec as _autovec, is_autovec_wrapper  # api imports this module

    if type(trials) is not int or trials < 1:
        raise ValueError(f"assert_equivalent: trials is how many times to compare, an int of at least 1, "
                         f"not {trials!r}")
    if isinstance(fn, (types.MethodType, _BoundAutovec)):
        # a bound method: its object is an argument too, copied for each run like the others
        args = (fn.__self__,) + args
        fn = fn.__func__
    fast = fn if is_autovec_wrapper(fn) else _autovec(fn)
    original = fast.__wrapped__
    name = getattr(original, "__qualname__", repr(original))
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as e:
            # (a misspelt option, `tials=3`, is handed to the function: both runs would raise the
            # same TypeError and the check would pass having compared nothing; probeK)
            raise TypeError(f"assert_equivalent: these arguments do not fit `{name}{signature}`: {e} (the options "
                            "of assert_equivalent are rtol, atol, grad and trials; other keywords are the "
                            "function's)") from None
    for trial in range(trials):
        trial_args, trial_kwargs = args, kwargs
        if trial > 0:
            gen = torch.Generator().manual_seed(trial)
            trial_args, trial_kwargs = randomize_like(args, kwargs, gen)
        problem, cause = _check_once(original, fast, trial_args, trial_kwargs, rtol, atol, grad)
        if problem:
            raise EquivalenceError(f"{name} (trial {trial}): {problem}") from cause
        if cause is not None:
            warnings.warn(f"assert_equivalent: {name} (trial {trial}) raised {type(cause).__name__}: {cause}, as its "
                          "rewrite did: only the exceptions were compared", RuntimeWarning, stacklevel=2)


def _check_once(original, fast, args, kwargs, rtol, atol, grad):
    """(message, exception or None) for the first difference, or (None, None)."""
    exp_args, exp_kwargs = clone_args(args, kwargs)
    got_args, got_kwargs = clone_args(args, kwargs)
    if grad:
        _require_grad((exp_args, exp_kwargs))
        _require_grad((got_args, got_kwargs))
    rng = _RngState()  # both runs start from one RNG state, so random draws can match
    expected, exp_err = _call(original, exp_args, exp_kwargs)
    rng.restore()
    got, got_err = _call(fast, got_args, got_kwargs)
    if exp_err or got_err:
        return _compare_errors(exp_err, got_err), got_err

    cmp = lambda e, g, p: compare(e, g, rtol=rtol, atol=atol, path=p)  # noqa: E731
    exp_named = _named_arguments(original, exp_args, exp_kwargs)
    got_named = _named_arguments(original, got_args, got_kwargs)
    problem = cmp(expected, got, "result") or _first(
        cmp(exp_named[k], got_named[k], f"argument {k}") for k in exp_named)
    if problem or not grad:
        return problem, None

    exp_err, got_err = _backward(expected), _backward(got)
    if exp_err or got_err:
        problem = _compare_errors(exp_err, got_err)
        return (f"backward: {problem}" if problem else None), got_err
    return _first(cmp(_grads(exp_named[k]), _grads(got_named[k]), f"grad of argument {k}")
                  for k in exp_named), None


def _call(fn, args, kwargs):
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # compared with the other run's exception
        return None, exc


def _compare_errors(exp_err, got_err) -> str | None:
    describe = lambda e: f"{type(e).__qualname__}: {e}"  # noqa: E731
    if got_err is None:
        return f"the original raised {describe(exp_err)}, the rewrite returned normally"
    if exp_err is None:
        return f"the rewrite raised {describe(got_err)}, the original returned normally"
    if type(exp_err) is not type(got_err) or str(exp_err) != str(got_err):
        return f"the original raised {describe(exp_err)}, the rewrite raised {describe(got_err)}"
    return None


class _RngState:
    """Snapshot of the random number generators: torch's CPU one (and CUDA's, once in use),
    Python's `random` and numpy's global one."""

    def __init__(self) -> None:
        import random
        import numpy as np
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self.py = random.getstate()
        self.np = np.random.get_state()

    def restore(self) -> None:
        import random
        import numpy as np
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.py)
        np.random.set_state(self.np)


def _named_arguments(fn, args, kwargs) -> dict[str, Any]:
    """Arguments keyed by their label in messages: `'x'` by parameter name, else `0`."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):  # callables without a usable signature
        named = {str(i): a for i, a in enumerate(args)}
        named.update({repr(k): v for k, v in kwargs.items()})
        return named
    return {repr(k): v for k, v in bound.arguments.items()}


def _require_grad(obj) -> None:
    """Make every floating-point tensor in the (cloned, leaf) arguments require grad."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.is_leaf:
            obj.requires_grad_(True)
    elif isinstance(obj, (list, tuple, dict)):
        for x in obj.values() if isinstance(obj, dict) else obj:
            _require_grad(x)


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple, dict)):
        for x in obj.values() if isinstance(obj, dict) else obj:
            yield from _tensors(x)


def _backward(output) -> Exception | None:
    """Backpropagate a fixed random weighting of all differentiable outputs."""
    outs = [t for t in _tensors(output) if t.is_floating_point() and t.requires_grad]
    if not outs:
        return None
    gen = torch.Generator().manual_seed(0)  # fresh per run: both runs get the same weights
    weights = [torch.randn(o.shape, generator=gen).to(o.dtype).to(o.device) for o in outs]
    try:
        sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    except Exception as exc:  # compared with the other run's exception
        return exc
    return None


def _grads(obj):
    """The argument's structure with each floating-point tensor replaced by its `.grad`."""
    if isinstance(obj, torch.Tensor):
        anchor = getattr(obj, "_av_anchor", None)
        if anchor is not None:       # (an activation's copy: the gradient that reached it)
            return anchor.grad
        return obj.grad if obj.is_floating_point() else None
    if isinstance(obj, torch.nn.Module):  # a module argument: its parameters' gradients
        return {n: p.grad for n, p in obj.named_parameters()}
    if isinstance(obj, (list, tuple)):
        return [_grads(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _grads(v) for k, v in obj.items()}
    return None
