"""Run-time side of the foreach strategy (analysis/foreach.py): the lists a loop walks, the
checks that make every `torch._foreach_*` call of the rewrite do what the loop does, and the
chunks it runs in.

The checks, per call (any failing one runs the loop as written):
- the iterables are lists or tuples (or a module's `.parameters()` / `.buffers()`, taken as a
  list first) of equal length, at least `_MIN_TRIP` long;
- the Python numbers are `int` or `float` (a `dict` where the body reads `d[key]`);
- every tensor is a plain tensor or parameter, on the CPU, strided, of one dtype (float32 or
  float64); the
  tensors of an iteration share one shape; none requires grad where grad mode is on; a tensor
  written is contiguous and no inference tensor (and inference mode is off); a `.grad` read is
  a tensor's own (a leaf's, which reads it without a warning);
- no memory an iteration writes is memory another iteration reads or writes: the operations
  then run statement by statement over all the lists and still see what the loop's saw.

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

from .runtime import FunctionRuntime

_MIN_TRIP = 6
_CHUNK_BYTES = 1 << 20
_LARGE_BYTES = 1 << 14
# (float16 / bfloat16: an in-place `mul_` by a Python float rounds differently in a `_foreach_`
# call than in the tensor's own method on the CPU; every other operation, and every operation in
# float32 / float64, gave the same bits in the test of each against its method)
_FLOATING = frozenset({torch.float32, torch.float64})
_INT_LIMIT = 1 << 62
_DTYPE, _SHAPE, _LAYOUT = operator.attrgetter("dtype"), operator.attrgetter("shape"), operator.attrgetter("layout")
_IS_CPU, _REQUIRES_GRAD = operator.attrgetter("is_cpu"), operator.attrgetter("requires_grad")
_NBYTES = operator.attrgetter("nbytes")
_STRIDED = {torch.strided}

FE = types.SimpleNamespace(**{n[len("_foreach_"):]: getattr(torch, n) for n in dir(torch) if n.startswith("_foreach_")})

# generators whose elements are a module's own tensors (taking them as a list first changes
# nothing the loop sees: the body only updates tensors in place)
_GENERATORS = tuple(f.__code__ for f in (torch.nn.Module.parameters, torch.nn.Module.buffers))


def _lists(self, loop_id, iters):
    """The iterables, with a module's parameter or buffer generator taken as a list (the loop
    as written then walks that list)."""
    out = None
    for k, it in enumerate(iters):
        if type(it) is types.GeneratorType and it.gi_code in _GENERATORS:
            if out is None:
                out = list(iters)
            out[k] = list(it)
    return iters if out is None else tuple(out)


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
    for name in spec[6]:
        if not hasattr(FE, name):
            self._note(spec[0], "python", f"this torch has no torch._foreach_{name}")
            return False
    n = _length(spec, lists)
    if n < 0:
        self._note(spec[0], "python", "the iterables are not lists or tuples of one length")
        return False
    if n < _MIN_TRIP:
        self._note(spec[0], "python", f"{n} iteration(s): the Python loop is faster below {_MIN_TRIP}")
        return False
    return True


def _numbers(self, leaves, maps):
    for k, v in enumerate(leaves):
        t = type(v)
        if k in maps:
            if t is not dict:
                return False
        elif t is not float and (t is not int or not -_INT_LIMIT < v < _INT_LIMIT):
            return False
    return True


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
    loop_id, _, slots, written, stored, nograd, _, length, operands = spec
    for s in scalars:
        t = type(s)
        if t is not float and (t is not int or not -_INT_LIMIT < s < _INT_LIMIT):
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
            for t in col:
                c = type(t)
                if c is not Tensor and c is not Parameter:
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
        return self._fe_refuse(loop_id, "the tensors written are large: the loop keeps each in the cache")
    shape0 = list(map(_SHAPE, cols[operands[0]]))
    starts, ends, rows, writes = [], [], [], []
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
        if w and (not all(map(Tensor.is_contiguous, col)) or any(map(Tensor.is_inference, col))):
            return self._fe_refuse(loop_id, "a tensor written is not contiguous, or is an inference tensor")
        sizes = list(map(_NBYTES, col)) if w or all(map(Tensor.is_contiguous, col)) else [_extent(t) for t in col]
        size = sum(sizes)
        total += size
        starts += map(Tensor.data_ptr, col)
        ends += map(operator.add, starts[-n:], sizes)
        rows += range(n)
        writes += [w] * n
    spans = sorted(zip(starts, ends, rows, writes))
    if spans:
        s, e, _, _ = zip(*spans)
        if not all(map(operator.le, e[:-1], s[1:])) and not _disjoint(spans):
            return self._fe_refuse(loop_id, "iterations share memory that one of them writes")
    per = max(1, total // n)
    k = max(1, _CHUNK_BYTES // per)
    if k >= n:
        return (tuple(cols),)
    return tuple(tuple(col[s:s + k] for col in cols) for s in range(0, n, k))


def _disjoint(spans) -> bool:
    """No byte range written in one iteration overlaps a range of another iteration (`spans`:
    (start, end, iteration, written), sorted; grouped where they overlap). An empty tensor's range
    is empty."""
    end, iters, wrote = -1, None, False
    for start, stop, i, w in spans:
        if start < end:
            if i != iters:
                iters = -1 if iters is not None else i
            wrote = wrote or w
            if iters == -1 and wrote:
                return False
            end = max(end, stop)
        else:
            end, iters, wrote = stop, i, w
    return True


def _fe_refuse(self, loop_id, why):
    self._note(loop_id, "python", why)
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
