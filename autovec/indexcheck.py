"""Index bounds checked on the host before a batched operation runs on an accelerator.

On the CPU an index out of range raises an IndexError (or RuntimeError) from the operation
itself; the vectorized path catches it and the loop runs, raising the loop's own error. On
CUDA the same operation is a device-side assert: the error comes later, asynchronously, and
leaves the process's CUDA context unusable. The loop as written often checks on the host
instead: `x[idx[i]]` with a 0-dim integer tensor reads the index as a Python int and raises an
IndexError. So on an accelerator the batched body runs under `IndexCheck`, a dispatch mode that
reads the range of every index an indexing operation is given (one synchronisation for all the
indices of one operation) and raises an IndexError before the operation when one is out of
range; the vectorized path then falls back to the loop, which does what it does.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _config

aten = torch.ops.aten


def _dim_size(t: torch.Tensor, dim) -> int:
    if t.dim() == 0:
        return 1
    return t.shape[dim]


def _indices(func, args, kwargs):
    """[(index tensor, lowest allowed, highest allowed + 1, dimension, size)] for an indexing op."""
    packet = func.overloadpacket
    a = list(args) + [v for v in (kwargs or {}).values()]
    if packet in _TENSOR_LISTS:
        self, indices = a[0], a[1]
        out, dim = [], 0
        for i in indices:
            if i is None:
                dim += 1
            elif i.dtype in (torch.bool, torch.uint8):
                dim += max(i.dim(), 1)      # a mask: its shape is checked on the host by torch
            else:
                size = _dim_size(self, dim) if dim < max(self.dim(), 1) else 0
                out.append((i, -size, size, dim, size))
                dim += 1
        return out
    if packet in _DIM_INDEX:
        self, dim, index = a[0], a[1], a[2]
        size = _dim_size(self, dim)
        return [(index, 0, size, dim, size)]
    if packet is aten.embedding:
        weight, index = a[0], a[1]
        return [(index, 0, weight.shape[0], 0, weight.shape[0])]
    if packet in (aten.take, aten.put, aten.put_):
        self, index = a[0], a[1]
        return [(index, -self.numel(), self.numel(), 0, self.numel())]
    if packet is aten.one_hot:
        classes = a[1] if len(a) > 1 else -1
        if classes is None or classes < 0:
            return [(a[0], 0, None, 0, None)]
        return [(a[0], 0, classes, 0, classes)]
    if packet in _BAGS:
        weight, index = a[0], a[1]
        return [(index, 0, weight.shape[0], 0, weight.shape[0])]
    if packet is aten.multi_margin_loss:
        self, target = a[0], a[1]
        classes = self.shape[-1] if self.dim() else 1
        return [(target, 0, classes, 1, classes)]
    if packet is aten.multilabel_margin_loss_forward:
        self, target = a[0], a[1]
        classes = self.shape[-1] if self.dim() else 1
        return [(target, -1, classes, 1, classes)]       # (-1 ends a row's labels)
    if packet in _UNPOOLS:
        self, index, size = a[0], a[1], a[2]
        room = 1
        for k in size:
            room *= int(k)
        return [(index, 0, room, -1, room)]
    if packet in (aten.nll_loss_forward, aten.nll_loss2d_forward):
        self, target = a[0], a[1]
        ignore = a[4] if len(a) > 4 else -100
        classes = self.shape[0] if self.dim() == 1 else self.shape[1]
        target = torch.where(target == ignore, 0, target)   # the ignored class is allowed
        return [(target, 0, classes, 1, classes)]
    return []


_TENSOR_LISTS = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_}
_DIM_INDEX = {aten.index_select, aten.index_add, aten.index_add_, aten.index_copy, aten.index_copy_,
              aten.index_fill, aten.index_fill_, aten.index_reduce, aten.index_reduce_, aten.gather,
              aten.scatter, aten.scatter_, aten.scatter_add, aten.scatter_add_, aten.scatter_reduce,
              aten.scatter_reduce_}
_BAGS = {aten._embedding_bag, aten._embedding_bag_forward_only}
_UNPOOLS = {aten.max_unpool2d, aten.max_unpool3d}
_CHECKED = _TENSOR_LISTS | _DIM_INDEX | _BAGS | _UNPOOLS | {
    aten.embedding, aten.take, aten.put, aten.put_, aten.one_hot, aten.nll_loss_forward, aten.nll_loss2d_forward,
    aten.multi_margin_loss, aten.multilabel_margin_loss_forward}


def check(func, args, kwargs):
    """Raise IndexError when an index `func` is given is out of range (one host read for all)."""
    spans = [s for s in _indices(func, args, kwargs)
             if isinstance(s[0], torch.Tensor) and s[0].numel() and not s[0].is_floating_point()]
    if not spans:
        return
    pairs = [torch.stack(torch.aminmax(s[0])).to(torch.long) for s in spans]
    if all(p.device == pairs[0].device for p in pairs):
        ranges = torch.stack(pairs).tolist()          # one read for all
    else:
        ranges = [p.tolist() for p in pairs]          # (CPU indices into a GPU tensor: one read each)
    for (t, lo, hi, dim, size), (low, high) in zip(spans, ranges):
        bad = low if low < lo else high if hi is not None and high >= hi else None
        if bad is not None:
            raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size} "
                             f"(read on the host before a batched `{func.overloadpacket.__name__}`: on an "
                             f"accelerator an index out of range is a device-side assert)")


class IndexCheck(TorchDispatchMode):
    """Check the indices of indexing operations before they run (see the module's docstring)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in _CHECKED:
            check(func, args, kwargs)
        return func(*args, **(kwargs or {}))


def needed(device: torch.device) -> bool:
    """Whether batched code on `device` needs its indices checked on the host."""
    return device.type not in ("cpu", "meta")


def forced() -> bool:
    """AUTOVEC_INDEX_CHECK=always: check on the CPU too (to test on a machine without a GPU what
    a GPU run does; the CPU raises by itself, so the check only costs time there)."""
    return _FORCE or _config.env("AUTOVEC_INDEX_CHECK").strip().lower() == "always"


_FORCE = False   # the same, for tests


# names whose call may index with tensor values (functions, methods, modules)
_INDEXING_NAMES = frozenset({
    "index_select", "gather", "take", "take_along_dim", "scatter", "scatter_", "scatter_add", "scatter_add_",
    "scatter_reduce", "scatter_reduce_", "index_add", "index_add_", "index_copy", "index_copy_", "index_fill",
    "index_fill_", "index_put", "index_put_", "index_reduce", "index_reduce_", "put", "put_", "embedding",
    "embedding_bag", "nll_loss", "cross_entropy", "one_hot", "Embedding", "EmbeddingBag", "__getitem__",
    "multi_margin_loss", "multilabel_margin_loss", "MultiMarginLoss", "MultiLabelMarginLoss", "max_unpool1d",
    "max_unpool2d", "max_unpool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "getattr",
    "__setitem__", "getitem", "setitem", "itemgetter", "vmap", "apply", "__call__"})
_SUBSCRIPTS = frozenset({"BINARY_SUBSCR", "STORE_SUBSCR", "DELETE_SUBSCR"})
_CODE: dict = {}     # code object -> (has a subscript, names it reads, nested code objects)


def _facts(code):
    got = _CODE.get(code)
    if got is None:
        import dis
        sub = any(ins.opname in _SUBSCRIPTS for ins in dis.get_instructions(code))
        nested = tuple(c for c in code.co_consts if hasattr(c, "co_code"))
        got = _CODE[code] = (sub, code.co_names, nested)
    return got


def _value_may_index(v, seen) -> bool:
    import types
    if v is None or isinstance(v, (torch.Tensor, bool, int, float, complex, str, bytes, types.ModuleType,
                                   torch.dtype, torch.device, range, slice)):
        return False
    if isinstance(v, (tuple, list)) and len(v) <= 16:
        return any(_value_may_index(e, seen) for e in v)
    if isinstance(v, types.FunctionType):
        return _function_may_index(v, seen)
    if isinstance(v, types.BuiltinFunctionType) and v.__name__ not in _INDEXING_NAMES:
        return False     # (a builtin or a torch function: its name says)
    return True          # a module, an object with methods, a callable of another kind: it may


def _function_may_index(fn, seen) -> bool:
    code = getattr(fn, "__code__", None)
    if code is None:
        return True
    if code in seen:
        return False
    seen.add(code)
    todo = [code]
    while todo:
        c = todo.pop()
        sub, names, nested = _facts(c)
        if sub or not _INDEXING_NAMES.isdisjoint(names):
            return True
        todo.extend(n for n in nested if n not in seen)
        seen.update(nested)
        g = fn.__globals__
        for name in names:
            v = g.get(name)
            if v is not None and _value_may_index(v, seen):
                return True
    for cell in fn.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:      # (an empty cell)
            continue
        if _value_may_index(v, seen):
            return True
    return False


def may_index(*fns) -> bool:
    """Whether a batched body (and its other forms) may run an indexing operation: a subscript,
    a call by an indexing name, or a call into a module, an object or a helper that may. Bodies
    of elementwise arithmetic and reductions run without the check (it dispatches every
    operation through Python)."""
    seen: set = set()
    return any(fn is not None and _function_may_index(fn, seen) for fn in fns)
