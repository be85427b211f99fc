"""Run-time side of the foreach strategy (analysis/foreach.py): the lists a loop walks, the
checks that make every `torch._foreach_*` call of the rewrite do what the loop does, and the
chunks it runs in.

The checks, per call (any failing one runs the loop as written):
- the iterables are lists or tuples (or a module's `.parameters()` / `.buffers()`, taken as a
  list first: _lists) of equal length, at least `_MIN_TRIP` long;
- no torch.func transform, forward-mode AD, torch function or dispatch mode or autocast is on
  (they would see, or differentiate, `_foreach_` calls instead of the loop's);
- the Python numbers are `int` or `float` (a `dict` where the body reads `d[key]`);
- every tensor is a plain tensor or parameter, on the CPU, strided, of one dtype (float32 or
  float64); the
  tensors of an iteration share one shape; none requires grad where grad mode is on; a tensor
  written is contiguous and no inference tensor (and inference mode is off); a `.grad` read is
  a tensor's own (a leaf's, which reads it without a warning);
- no memory an iteration writes is memory another iteration reads or writes: the operations
  then run statement by statement over all the lists and still see what the loop's saw; a
  tensor written meets another of its own iteration only as the same view (else the loop's
  operation raises part-way).

Speed: on the CPU a `_foreach_` operation saves Python's dispatch per element (about 40% of the
loop's time over many small tensors), but it walks every list once per operation, so a list
of large tensors leaves the cache between operations, where the loop's iteration keeps its
tensors in it. The lists run in chunks of about `_CHUNK_BYTES` of tensors, and a loop whose
written tensors average over `_LARGE_BYTES` runs as written.
"""
from __future__ import annotations

import operator
import types

import torch
from torch import Tensor
from torch.nn import Parameter

from .runtime import FunctionRuntime, NotVectorizable, _any_autocast, _in_transform

_MIN_TRIP = 12
_CHUNK_BYTES = 1 << 20
_LARGE_BYTES = 1 << 13
# (float16 / bfloat16: an in-place `mul_` by a Python float rounds differently in a `_foreach_`
# call than in the tensor's own method on the CPU; every other operation, and every operation in
# float32 / float64, gave the same bits in the test of each against its method)
_FLOATING = frozenset({torch.float32, torch.float64})
_INT_LIMIT = 1 << 62
_DTYPE, _SHAPE, _LAYOUT = operator.attrgetter("dtype"), operator.attrgetter("shape"), operator.attrgetter("layout")
_IS_CPU, _REQUIRES_GRAD = operator.attrgetter("is_cpu"), operator.attrgetter("requires_grad")
_NBYTES = operator.attrgetter("nbytes")
_TENSORS = {Tensor, Parameter}
_STRIDED = {torch.strided}

FE = types.SimpleNamespace(**{n[len("_foreach_"):]: getattr(torch, n) for n in dir(torch) if n.startswith("_foreach_")})



def _lists(self, loop_id, iters):
    """The lists the loop walks, from (root, how, key) per iterable (analysis.foreach._access),
    or None where one is not reached without an effect: a module's generator taken as a list
    only where the module and its submodules walk their members with torch's own methods
    (nothing else holds that generator: how far the loop would run it is never seen), a key
    read only from a dict."""
    if iters is None:
        self._note(loop_id, "python", "a name the loop reads is unbound")
        return None
    out = []
    for root, how, key in iters:
        if how == 0:
            out.append(root)
        elif how == 1:
            if not _plain_module(root):
                return self._fe_refuse(loop_id, f"`.{key}()` of a module that walks its members with its own methods")
            out.append(list(getattr(root, key)()))
        elif type(root) is dict and key in root:
            out.append(root[key])
        else:
            return self._fe_refuse(loop_id, f"`[{key!r}]` of a {type(root).__name__}, not a dict holding that key")
    return tuple(out)


_WALKS = ("parameters", "buffers", "named_parameters", "named_buffers", "named_modules", "_named_members",
          "modules", "children", "named_children")


def _plain_module(m) -> bool:
    seen, todo = set(), [m]
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        c = type(x)
        if not isinstance(x, torch.nn.Module) or any(getattr(c, w, None) is not getattr(torch.nn.Module, w) for w in _WALKS):
            return False
        subs = x.__dict__.get("_modules")
        if type(subs) is not dict:
            return False
        todo.extend(v for v in subs.values() if v is not None)
    return True


_fwd = torch.autograd.forward_ad
_function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: True)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)


def _only_device_modes() -> bool:
    """Whether the torch function modes on are `with torch.device(..)` alone (which gives a
    default device to factory functions called without one: the rewrites' calls name theirs)."""
    try:
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._device import DeviceContext
        return all(type(m) is DeviceContext for m in _get_current_function_mode_stack())
    except (ImportError, AttributeError):
        return False


def _calls_seen() -> str:
    """Why something would see other calls than the loop's, or "": a torch.func transform,
    forward-mode AD, a torch function (other than `with torch.device(..)`) or dispatch mode,
    autocast."""
    if _in_transform() is not None:
        return "a torch.func transform is on"
    if _fwd._current_level >= 0:
        return "forward-mode AD is on"
    if _function_mode() and not _only_device_modes() or _dispatch_modes():
        return "a torch function or dispatch mode is on"
    if _any_autocast():
        return "autocast is on"
    return ""


def _length(spec, lists):
    """The trip count, or -1 where the lists are not lists of one length (zip) / long enough
    (indexed)."""
    length = spec[7]
    for L in lists:
        t = type(L)
        if t is not list and t is not tuple:
            return -1
    if length is None:
        n = len(lists[0])
        for L in lists:
            if len(L) != n:
                return -1     # (zip stops at the shortest, which a differing length makes the loop's business)
        return n
    n = len(lists[length])
    for L in lists:
        if len(L) < n:
            return -1         # (the loop raises IndexError part-way)
    return n


def _ready(self, spec, lists):
    """The cheap checks first: the operations exist in this torch, the lists' lengths, the trip count."""
    if lists is None:
        return False     # (a list's name is unbound: the loop raises where it reads it)
    for name in spec[6]:
        if not hasattr(FE, name):
            return self._fe_refuse(spec[0], f"this torch has no torch._foreach_{name}") is not None
    n = _length(spec, lists)
    if n < 0:
        return self._fe_refuse(spec[0], "the iterables are not lists or tuples of one length") is not None
    if n < _MIN_TRIP:
        return self._fe_refuse(spec[0], f"{n} iteration(s): the Python loop is faster below {_MIN_TRIP}", cost=True) \
            is not None
    return True


def _numbers(self, loop_id, leaves, maps):
    """Whether the names the operations' numbers read are Python ints or floats (dicts where
    the body reads `d[key]`): their arithmetic, done once for every iteration, then has no effect."""
    if leaves is None:
        self._note(loop_id, "python", "a name the loop's numbers read is unbound")
        return False
    for k, v in enumerate(leaves):
        t = type(v)
        if k in maps:
            if t is not dict:
                return self._fe_refuse(loop_id, f"a name read as `d[key]` is a {t.__name__}, not a dict") is not None
        elif not _is_number(v):
            return self._fe_refuse(loop_id, f"a number the operations take is a {t.__name__}, not a Python int "
                                   "or float") is not None
    return True


def _is_number(v) -> bool:
    """A Python float, or an int the operations take as one (within ±2**62)."""
    t = type(v)
    return t is float or t is int and -_INT_LIMIT < v < _INT_LIMIT


def _extent(t):
    """Bytes from t's first element to one past its last."""
    if not t.numel():
        return 0
    if t.is_contiguous():
        return t.numel() * t.element_size()
    last = 0
    for size, stride in zip(t.shape, t.stride()):
        last += (size - 1) * stride
    return (last + 1) * t.element_size()


def _guard(self, spec, lists, scalars):
    """The lists of every slot in chunks (tuples of one list per slot), or None where the loop
    must run as written (the module docstring's checks)."""
    try:
        return _checked(self, spec, lists, scalars)
    except NotVectorizable:
        raise
    except Exception as e:    # noqa: BLE001 (a tensor kind the checks cannot read: the loop decides)
        return self._fe_refuse(spec[0], f"the check raised {type(e).__name__}: {e}")


def _checked(self, spec, lists, scalars):
    loop_id, _, slots, written, stored, nograd, _, length, operands = spec
    why = _calls_seen()
    if why:
        return self._fe_refuse(loop_id, why)
    if not all(map(_is_number, scalars)):
        return self._fe_refuse(loop_id, "a value the operations take is not a Python int or float")
    for k in stored:
        if type(lists[slots[k][1]]) is not list:
            return self._fe_refuse(loop_id, "`L[i] += v` into a tuple (the loop raises)")
    if torch.is_inference_mode_enabled():
        return self._fe_refuse(loop_id, "inference mode is on")
    n = _length(spec, lists)
    grad_on = not nograd and torch.is_grad_enabled()
    cols = []
    for kind, b in slots:
        if kind == "base":
            col = lists[b] if len(lists[b]) == n else lists[b][:n]
            if not set(map(type, col)) <= _TENSORS:
                return self._fe_refuse(loop_id, "a list element is not a tensor or parameter")
        elif kind == "grad":
            col = []
            for t in cols[b]:
                if not t.is_leaf:
                    return self._fe_refuse(loop_id, "`.grad` of a tensor that is not a leaf")
                g = t.grad
                if type(g) is not Tensor:
                    return self._fe_refuse(loop_id, "a `.grad` is None or not a plain tensor")
                col.append(g)
        elif kind == "data":
            col = [t.data for t in cols[b]]
        else:
            col = [t.detach() for t in cols[b]]
        cols.append(col)
    first = cols[operands[0]][0]
    dtype = first.dtype
    if dtype not in _FLOATING:
        return self._fe_refuse(loop_id, "the tensors are not float32 or float64")
    if sum(sum(map(_NBYTES, cols[j])) for j in written) > _LARGE_BYTES * n * len(written):
        return self._fe_refuse(loop_id, "the tensors written are large: the loop keeps each in the cache", cost=True)
    shape0 = list(map(_SHAPE, cols[operands[0]]))
    starts, ends, rows, writes, tensors = [], [], [], [], []
    total = 0
    for j in operands:
        col = cols[j]
        if set(map(_DTYPE, col)) != {dtype} or not all(map(_IS_CPU, col)) or set(map(_LAYOUT, col)) != _STRIDED:
            return self._fe_refuse(loop_id, "the tensors are not all strided CPU tensors of one dtype")
        if grad_on and any(map(_REQUIRES_GRAD, col)):
            return self._fe_refuse(loop_id, "a tensor requires grad and grad mode is on")
        if list(map(_SHAPE, col)) != shape0:
            return self._fe_refuse(loop_id, "the tensors of an iteration differ in shape")
        w = j in written
        # (a nested tensor's shape raises above: _guard's `except` refuses it)
        if w and (not all(map(Tensor.is_contiguous, col)) or any(map(Tensor.is_inference, col))
                  or any(map(Tensor.is_neg, col))):
            return self._fe_refuse(loop_id, "a tensor written is not contiguous, or is an inference tensor")
        sizes = list(map(_NBYTES, col)) if w or all(map(Tensor.is_contiguous, col)) else [_extent(t) for t in col]
        total += sum(sizes)
        starts += map(Tensor.data_ptr, col)
        ends += map(operator.add, starts[-n:], sizes)
        rows += range(n)
        writes += [w] * n
        tensors += col
    spans = sorted(zip(starts, ends, rows, writes, range(len(tensors))))
    if spans:
        s, e = list(zip(*spans))[:2]
        if not all(map(operator.le, e[:-1], s[1:])) and not _disjoint(spans, tensors):
            return self._fe_refuse(loop_id, "iterations share memory that one of them writes, or an iteration's "
                                   "tensor written overlaps another of its tensors in part")
    per = max(1, total // n)
    k = max(1, _CHUNK_BYTES // per)
    if k >= n:
        return (tuple(cols),)
    return tuple(tuple(col[s:s + k] for col in cols) for s in range(0, n, k))


def _disjoint(spans, tensors) -> bool:
    """No byte range written in one iteration overlaps a range of another iteration, and no
    tensor written overlaps another tensor of its own iteration other than as the same view of
    the same memory (`p.add_(p)`; a part, or a transpose, makes the loop's operation raise)
    (`spans`: (start, end, iteration, written, index into `tensors`), sorted; grouped where they
    overlap). An empty tensor's range is empty."""
    group = []
    end = -1
    for span in spans + [(float("inf"), float("inf"), -1, False, -1)]:
        if span[0] < end:
            group.append(span)
            end = max(end, span[1])
            continue
        if len(group) > 1 and any(g[3] for g in group):
            if len({g[2] for g in group}) > 1:
                return False
            views = {_geometry(tensors[g[4]]) for g in group}
            if len(views) > 1:
                return False
        group, end = [span], span[1]
    return True


def _geometry(t):
    return t.data_ptr(), tuple(t.shape), t.stride()


def _fe_refuse(self, loop_id, why, cost=False):
    """The loop runs as the other strategies make it. With strict=True, a refusal that is not the
    cost model's, of a loop no other strategy vectorizes, raises NotVectorizable."""
    self._note(loop_id, "python", why)
    line, strategy, other = self.foreach.get(loop_id, (None, None, True))
    if self.strict and not cost and not other:
        raise NotVectorizable(f"{self.qualname}, line {line}: the {strategy} form does not take this call: {why}")
    return None


def _done(self, loop_id):
    self._note(loop_id, "vectorized", "foreach")


FunctionRuntime.fe = FE
FunctionRuntime.fe_lists = _lists
FunctionRuntime.fe_ready = _ready
FunctionRuntime.fe_numbers = _numbers
FunctionRuntime.fe_guard = _guard
FunctionRuntime._fe_refuse = _fe_refuse
FunctionRuntime.fe_done = _done
