"""Run-time side of the ragged strategy (analysis/ragged.py): the checks that make one masked
store per target do what the loop's stores `T[i, :len(s)] = v` do, and the stores.

The checks, per call (any failing one runs the loop as written):
- the list is a list or tuple of at least `_MIN_TRIP` plain tensors of one dtype (a floating,
  bool or integer one the CPU stores by mask: not uint16 / 32 / 64, float8, complex or
  quantized), one device, one number of dimensions (at least 1) and one shape past the first
  dimension, of `_LARGE_BYTES` on average at most;
- each target is a plain contiguous tensor on that device, not an inference tensor, of such a
  dtype (the sequences' own where they are floating: a bulk cast of a NaN may give other bits
  than the loop's row casts), of one more dimension, with that shape past its first two, at least as many rows as the list and
  at least as many columns as the longest sequence, and no target shares memory with another
  target or with a sequence (the loop's later sequences would read what earlier stores wrote);
- under grad mode, nothing requires grad; no forward-mode AD, functorch transform or torch
  function / dispatch mode is on (they would see other operations than the loop's);
- a number constant converts into each target's dtype as setitem converts it without raising
  (_converts): a store raising after another target took every row would leave that target
  otherwise than the loop does.
"""
from __future__ import annotations

import operator

import torch
from torch import Tensor

from .foreach_rt import _calls_seen, _extent
from .runtime import FunctionRuntime, NotVectorizable

_MIN_TRIP = 24
_LARGE_BYTES = 4096     # (a sequence's average: past it the loop's copies are faster)
_DTYPE, _SHAPE, _DEVICE = operator.attrgetter("dtype"), operator.attrgetter("shape"), operator.attrgetter("device")
_REQUIRES_GRAD, _NBYTES = operator.attrgetter("requires_grad"), operator.attrgetter("nbytes")


def _guard(self, loop_id, names, values, which, left=()):
    """What the stores need (_store), or None. `names`: (the sequences, the targets), or None
    where one is unbound. `left`: per store, whether it pads before the sequence (`T[i, -len(s):]`;
    "width" for `T[i, L - len(s):]`, whose L, `names`' third part, must be the target's width)."""
    if names is None:
        self._note(loop_id, "python", "a name the loop reads is unbound")
        return None
    seqs, targets, widths = names
    for k, w in enumerate(widths):
        if left[k] == "width" and not (type(w) is int and type(targets[which[k]]) is Tensor
                                       and targets[which[k]].dim() >= 2 and w == targets[which[k]].shape[1]):
            return _refuse(self, loop_id, "the width the left padding counts from is not the target's")
    try:
        return _checked(self, loop_id, seqs, targets, values, which, left)
    except NotVectorizable:
        raise
    except Exception as e:    # noqa: BLE001 (a tensor kind the checks cannot read: the loop decides)
        return _refuse(self, loop_id, f"the check raised {type(e).__name__}: {e}")


def _refuse(self, loop_id, why, cost=False):
    return self._fe_refuse(loop_id, why, cost)


def _checked(self, loop_id, seqs, targets, values, which, left):
    t = type(seqs)
    if t is not list and t is not tuple:
        return _refuse(self, loop_id, "the sequences are not a list or tuple")
    n = len(seqs)
    if n < _MIN_TRIP:
        return _refuse(self, loop_id, f"{n} sequence(s): the Python loop is faster below {_MIN_TRIP}", cost=True)
    why = _calls_seen()
    if why:
        return _refuse(self, loop_id, why)
    if set(map(type, seqs)) != {Tensor}:
        return _refuse(self, loop_id, "a sequence is not a plain tensor")
    s0 = seqs[0]
    dtype, device, d = s0.dtype, s0.device, s0.dim()
    if d < 1 or dtype not in _DTYPES or set(map(_DTYPE, seqs)) != {dtype} or set(map(_DEVICE, seqs)) != {device} \
            or set(map(Tensor.dim, seqs)) != {d}:    # (a nested tensor's shape raises below: _guard refuses it)
        return _refuse(self, loop_id, "the sequences differ in dtype, device or rank, or are 0-d, complex, "
                       "quantized or of an unsigned dtype past uint8")
    shapes = list(map(_SHAPE, seqs))
    tail = shapes[0][1:]
    if d > 1 and any(s[1:] != tail for s in shapes):
        return _refuse(self, loop_id, "the sequences differ past their first dimension")
    lens = [s[0] for s in shapes]
    longest = max(lens)
    if sum(map(_NBYTES, seqs)) > _LARGE_BYTES * n:
        return _refuse(self, loop_id, "the sequences are long: the loop's row copies move less memory than a "
                       "concatenation and a masked store", cost=True)
    grad_on = torch.is_grad_enabled()
    if grad_on and any(map(_REQUIRES_GRAD, seqs)):
        return _refuse(self, loop_id, "a sequence requires grad")
    spans = []
    for T in targets:
        if type(T) is not Tensor or T.device != device or T.dim() != d + 1 or T.shape[2:] != tail \
                or T.shape[0] < n or T.shape[1] < longest or not T.is_contiguous() or T.is_inference() \
                or grad_on and T.requires_grad or T.is_neg() or T.dtype not in _DTYPES \
                or dtype.is_floating_point and T.dtype is not dtype and None in values:
            return _refuse(self, loop_id, "a target is not a plain contiguous tensor of the sequences' shape, "
                           "rows and columns, or of their dtype where they are floating (or requires grad)")
        spans.append((T.data_ptr(), T.data_ptr() + T.nbytes))
    for k, v in enumerate(values):
        if v is not None and not _converts(v, targets[which[k]].dtype):
            return _refuse(self, loop_id, "a number the stores convert out of the target's range")
    if any(side is True for side in left) and min(lens) < 1:
        # (`T[i, -0:]` is the whole row: the loop stores an empty sequence into it, and raises)
        return _refuse(self, loop_id, "an empty sequence padded from the left")
    starts = list(map(Tensor.data_ptr, seqs))
    sizes = list(map(_NBYTES, seqs)) if all(map(Tensor.is_contiguous, seqs)) else list(map(_extent, seqs))
    ends = list(map(operator.add, starts, sizes))
    lo, hi = min(starts), max(ends)
    for a, (s, e) in enumerate(spans):
        for b in range(a):
            if s < spans[b][1] and spans[b][0] < e and targets[a] is not targets[b]:
                return _refuse(self, loop_id, "two targets share memory")
        if s < hi and lo < e and any(x < e and s < y for x, y in zip(starts, ends) if x != y):
            return _refuse(self, loop_id, "a sequence shares memory with a target")
    counts = torch.tensor(lens, device=device)[:, None]
    mask = torch.arange(longest, device=device) < counts if not all(left) else None
    cat = torch.cat(seqs) if None in values else None
    self._note(loop_id, "vectorized", "ragged")
    return n, longest, mask, cat, values, left, counts


def _converts(v, dtype) -> bool:
    """Whether setitem converts the number `v` into `dtype` without raising (an int within
    int64 for any target, within the dtype's range for an integer one; a float within a
    floating dtype's range, never into an integer one)."""
    if type(v) is int and not -(1 << 63) <= v < (1 << 63):
        return False
    if dtype is torch.bool:
        return True
    if dtype.is_floating_point:
        return abs(v) <= torch.finfo(dtype).max
    if type(v) is not int and type(v) is not bool:
        return False
    info = torch.iinfo(dtype)
    return info.min <= v <= info.max


# the dtypes whose masked stores the CPU has (uint16 / 32 / 64, float8 and quantized ones lack them)
_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.uint8,
                     torch.int8, torch.int16, torch.int32, torch.int64})


def _store(self, T, got, j):
    """The store `j` of every row at once: the positions the loop writes, row by row, are the
    mask's true ones in row-major order, which is the concatenation's order."""
    n, longest, mask, cat, values, left, counts = got
    v = values[j]
    if left and left[j]:
        width = T.shape[1]
        view, mask = T[:n], torch.arange(width, device=counts.device) >= width - counts
    else:
        view = T[:n, :longest]
    if v is None:
        view[mask] = cat if cat.dtype is T.dtype else cat.to(T.dtype)
    else:
        view[mask] = v


FunctionRuntime.rg_guard = _guard
FunctionRuntime.rg_store = _store
