"""Run-time side of batched bodies (lowering/batched.py): probe one iteration, write and compile
the batched body for the signature, verify it on two rows, and bind it to each call's closure."""
from __future__ import annotations

import array
import ast
import copy
import inspect
import itertools
import math
import operator
import types

import torch

from . import fastast
from . import pins
from .analysis.helpers import returned_expression
from .frontend import attr_chain, scope_lookup
from .lowering.batched import Unsupported, agrees, batched_def, fact_of, number_nodes, probe_def


_INPLACE_FLOOR = 1 << 16      # elements: smaller temporaries are cheap to allocate
_IN_PLACE = {"add": torch.Tensor.add_, "sub": torch.Tensor.sub_, "mul": torch.Tensor.mul_,
             "div": torch.Tensor.div_, "pow": torch.Tensor.pow_}
_OUT_OF_PLACE = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
                 "pow": operator.pow}
_OP_NAMES = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}


def broadcast_shapes(*shapes) -> torch.Size:
    """torch.broadcast_shapes of sizes, without it: in torch 2.13 its first call imports
    torch.fx's symbolic shapes, and sympy with them (0.25 s, on the first call of a scan). The
    same rules: aligned from the right, a 1 takes the other size (0 included), other sizes must
    be equal, else RuntimeError."""
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for shape in shapes:
        for i, d in enumerate(shape, nd - len(shape)):
            if d == 1:
                continue
            if out[i] != 1 and out[i] != d:
                raise RuntimeError(f"Shape mismatch: objects cannot be broadcast to a single shape: {tuple(shapes)}")
            out[i] = d
    return torch.Size(out)


def _in_place(a, b, op):
    """`a op b` where `a` is a temporary nobody else holds (the result of the expression's own
    previous operation): into `a` itself when that gives the same tensor (a plain tensor, large,
    no gradient, the result's dtype and shape are a's), else as written. The same kernel
    either way; one batch-sized allocation fewer."""
    if type(a) is torch.Tensor and a.numel() >= _INPLACE_FLOOR and not a.requires_grad:
        tb = type(b)
        if tb is torch.Tensor:
            ok = (not b.requires_grad and b.device == a.device and torch.result_type(a, b) == a.dtype
                  and (b.shape == a.shape or broadcast_shapes(a.shape, b.shape) == a.shape))
        else:
            ok = (tb is int or tb is float) and torch.result_type(a, b) == a.dtype
        if ok and (op != "div" or a.is_floating_point() or a.is_complex()):
            return _IN_PLACE[op](a, b)
    return _OUT_OF_PLACE[op](a, b)


def temporaries_in_place(fdef: ast.FunctionDef, owned=()) -> ast.FunctionDef | None:
    """`fdef` with `(a - b) / c` as `_avb.inplace(a - b, c, 'div')` (see _in_place): for large
    batches, where each elementwise temporary is a batch-sized allocation. `owned`: parameters
    that hold a tensor the caller made for this call alone (a stacked chunk of a list): one
    read once, as a left operand, counts as a temporary too. None when no operation has a
    temporary on its left."""
    changed = [False]
    loads: dict = {}
    for n in fastast.walk(fdef):
        if isinstance(n, ast.Name):
            loads[n.id] = loads.get(n.id, 0) + (1 if isinstance(n.ctx, ast.Load) else 2)  # a store disqualifies
    nested = {m.id for n in fastast.walk(fdef)
              if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))
              for m in fastast.walk(n) if isinstance(m, ast.Name)}
    mine = {p for p in owned if loads.get(p) == 1 and p not in nested}

    class _T(ast.NodeTransformer):
        def visit_BinOp(self, node):
            self.generic_visit(node)
            op = _OP_NAMES.get(type(node.op))
            left = node.left
            temp = isinstance(left, ast.BinOp) and type(left.op) in _OP_NAMES or (
                isinstance(left, ast.Call) and isinstance(left.func, ast.Attribute)
                and isinstance(left.func.value, ast.Name) and left.func.value.id == "_avb"
                and left.func.attr == "inplace") or isinstance(left, ast.Name) and left.id in mine
            if op is None or not temp:
                return node
            changed[0] = True
            call = ast.Call(func=ast.Attribute(value=ast.Name(id="_avb", ctx=ast.Load()), attr="inplace",
                                               ctx=ast.Load()),
                            args=[left, node.right, ast.Constant(op)], keywords=[])
            return ast.copy_location(call, node)

        def visit_Lambda(self, node):
            return node

    new = _T().visit(fastast.clone(fdef))
    return ast.fix_missing_locations(new) if changed[0] else None


def _stored_rows(row, base, varies):
    """The rows after the loop's `out[k] = base_k` (a batch where `varies`, else one value for
    every row), as setitem broadcasts and converts them."""
    from .runtime import GuardFailed
    slot = row.shape[1:]
    if isinstance(base, torch.Tensor):
        shape = base.shape[1:] if varies else base.shape
        while len(shape) > len(slot) and shape[0] == 1:      # setitem drops leading 1s
            shape = shape[1:]
        if len(shape) > len(slot):
            raise GuardFailed(f"a value of shape {tuple(shape)} does not fit a row of {tuple(slot)}")
        b = base.reshape(*((row.shape[0],) if varies else ()), *([1] * (len(slot) - len(shape))), *shape)
        return b.to(dtype=row.dtype, device=row.device).expand(row.shape)
    if type(base) in (int, float, bool):
        try:
            return torch.full(row.shape, base, dtype=row.dtype, device=row.device)
        except RuntimeError as e:
            raise GuardFailed(f"the stored value: {e}", data=True) from None
    raise GuardFailed(f"a row stored from a {type(base).__name__}")


_WINDOW_COPY_LIMIT = 1 << 25   # elements: windows gathered out of order into one batch, at most


def _values_refused(msg):
    """A refusal of these values by a form vmap cannot compute either (windows, masked
    selections: their sizes depend on the data): the loop runs this call, a later call with
    other values tries the batched body again."""
    from .runtime import GuardFailed
    e = GuardFailed(msg, data=True)
    e.final = True
    return e


def _windows(x, w, dim):
    """Every window of width `w` along `dim`, as a view: (starts, *x.shape[:dim], w, *rest)."""
    rows = x.unfold(dim, w, 1).movedim(-1, dim + 1)     # (.., starts, w, ..)
    return rows.movedim(dim, 0) if dim else rows


def _number_tensor(v, device):
    """A Python number as a 0-d tensor of the dtype a batch of such numbers has (float64 for a
    float: a float32 one could round it to 0 or inf)."""
    return torch.as_tensor(v, dtype=torch.float64 if type(v) is float else None, device=device)


def _py_map(name, fn, *args):
    """fn(a_k, b_k, ..) for every row's Python numbers, computed by Python itself: the C library's
    functions (math.exp, math.sqrt, a float `**`) are what the loop calls, and torch's kernels
    differ from them in the last bit on some values (torch's float64 sqrt and pow included), so
    the batch keeps their exact results, at the cost of one Python call per row. `args` are
    batches (broadcast together) or one number for every row. Where Python raises (a domain or
    range error) or gives a complex number, the loop runs the call, and raises or computes it."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    shape = broadcast_shapes(*(a.shape for a in tensors))
    device = tensors[0].device
    cols = [a.detach().expand(shape).reshape(-1).tolist() if isinstance(a, torch.Tensor)
            else itertools.repeat(a, shape.numel()) for a in args]
    try:
        out = list(map(fn, *cols))
    except (ValueError, OverflowError, ZeroDivisionError) as err:
        raise _values_refused(f"{name}() where Python raises {type(err).__name__} (the loop decides)") from None
    if not out:
        return torch.zeros(shape, dtype=torch.float64, device=device)
    try:
        flat = array.array("d", out)      # (each result a float: these functions give no ints)
    except TypeError:
        # (a complex power, `(-8.0) ** (1 / 3)`)
        raise _values_refused(f"{name}() with a result of other than a float (the loop decides)") from None
    # (a copy: a tensor of its own memory, not one over the array's)
    return torch.frombuffer(flat, dtype=torch.float64).to(device=device, copy=True).reshape(shape)


def _unempty(x):
    """A tensor with no elements gathered by per-iteration integers: torch checks no index's range
    there (a batch of them indexes nothing), where the loop's one integer per iteration is
    checked (IndexError): the loop decides."""
    if x.numel() == 0:
        from .runtime import GuardFailed
        e = GuardFailed("a tensor with no elements indexed by per-iteration integers (torch checks no bounds "
                        "there: the loop decides)", data=True)
        e.final = True       # (nor does vmap's gather)
        raise e


def _selected(x, dim, idx):
    """x.index_select(dim, idx) where that is x[.., idx] (a strided CPU tensor, integers in one
    dimension, each within 0..x.shape[dim]), else None. On the CPU index_select runs several times
    faster than advanced indexing (200 rows of 16: 64 against 290 us for 20,000 integers); it
    raises on a negative integer or one past the end, where x[idx] wraps the negative one and
    raises IndexError on the other: those calls take x[idx], as does any other device (where an
    integer out of range would stop the device)."""
    if type(idx) is torch.Tensor and type(x) in _SELECT_TYPES and idx.dim() == 1 and x.dim() > dim and x.is_cpu \
            and idx.is_cpu and idx.dtype in _SELECT_INTEGERS and x.layout is torch.strided:
        try:
            return x.index_select(dim, idx)
        except (RuntimeError, IndexError):
            return None
    return None


_SELECT_INTEGERS = (torch.int64, torch.int32)
_SELECT_TYPES = (torch.Tensor, torch.nn.Parameter)


def _counts_up(i, first, step) -> bool:
    """Whether the batch of the loop's index `i` is every iteration's, first to last by `step`
    (the runtime's own arange, tagged; the kept rows of a branch are not: 0, 2, 3, 6)."""
    if getattr(i, "_av_arange", False) or i.shape[0] <= 2:
        return True
    return torch.equal(i, torch.arange(first, first + i.shape[0] * step, step, device=i.device, dtype=i.dtype))


def _row_ints(k, b, what, high=False):
    """The per-row int arguments `k` of `what` (one per row of the batch `b`: Python ints, or 0-d
    integer or bool tensors, as an int64 batch), or GuardFailed: other values, and values below
    -2**62 (or past 2**62 with `high`), where torch's own argument handling raises or decides
    (torch.roll's shift is no concrete SymInt there; probe Y)."""
    from .runtime import GuardFailed
    if not isinstance(k, torch.Tensor) or k.is_floating_point() or k.is_complex() or k.dtype == torch.uint64 \
            or k.shape != b.shape[:1]:
        raise GuardFailed(f"`{what}` by per-iteration values that are not ints (the loop decides)")
    k = k.to(torch.int64)
    if k.numel() and (int(k.min()) < -(1 << 62) or high and int(k.max()) > (1 << 62)):
        raise GuardFailed(f"`{what}` by a value past 2**62 (torch raises or decides there)", data=True)
    return k


class _Helpers:
    """`_avb` in batched bodies: the few operations with no one-call torch spelling."""

    inplace = staticmethod(_in_place)

    @staticmethod
    def dim(d, rank, lead=1):
        if not isinstance(d, int) or isinstance(d, bool) or not -rank <= d < rank:
            raise IndexError(f"dimension {d!r} out of range for a {rank}-d value")
        return d + lead if d >= 0 else d

    @staticmethod
    def prod_input(x):
        """The batch a `prod` reduces, as it is. torch's gradient of prod divides the result by
        each entry unless the tensor holds a zero anywhere; then it multiplies the others. A row
        with inf or NaN but no zero gets NaN from the first, a finite value from the second: a
        batch with a zero in another row and inf or NaN in this one leaves the call to the loop."""
        if torch.is_grad_enabled() and isinstance(x, torch.Tensor) and x.requires_grad \
                and (x.is_floating_point() or x.is_complex()) and bool((x == 0).any()) \
                and not bool(torch.isfinite(x).all()):
            from .runtime import GuardFailed
            e = GuardFailed("prod with gradients of a batch holding zeros and inf or NaN (the loop "
                            "decides)", data=True)
            e.final = True        # vmap's prod has the batch's gradient too
            raise e
        return x

    @staticmethod
    def segment(kind, b, y, i, first):
        """b[y == i_k].kind() (or .kind(0)) for every iteration, `i` the loop's own index (an
        arange) and `y` a loop-invariant vector of integer labels, one per row of `b`: each row
        is added once, into its label's total (index_add), instead of every mask over every row.
        Labels outside the loop's range are never selected. A loop whose index does not count
        up by one, or other labels, take the masks (`masked`)."""
        n = i.shape[0]
        step = int(i[1]) - int(i[0]) if n > 1 else 1
        if step != 1 or not _counts_up(i, int(i[0]), 1) or not isinstance(y, torch.Tensor) or not isinstance(b, torch.Tensor) or y.dim() != 1 \
                or b.dim() == 0 or y.shape[0] != b.shape[0] or y.dtype == torch.bool \
                or y.is_floating_point() or y.is_complex() or y.device != b.device:
            return _Helpers.masked(kind, b, False, y == i.view(-1, *(1,) * y.dim()), first)
        if kind != "sum" and not b.is_floating_point():
            return _Helpers.masked(kind, b, False, y == i.view(-1, 1), first)   # (it refuses, as the loop)
        lo = int(i[0])
        keep = (y >= lo) & (y < lo + n)
        if bool(keep.all()):
            rows, at = b, (y - lo).long()      # every row has a label of the loop (no copy of b)
        else:
            rows, at = b[keep], (y[keep] - lo).long()
        wide = b.dtype if b.is_floating_point() or b.is_complex() else torch.int64   # (sum's dtype)
        # (a half-precision sum or mean is accumulated in float32 and rounded once, as torch's own
        # reductions of a selection are: index_add_ in float16 rounded every addition; probeJ)
        half = wide in (torch.float16, torch.bfloat16)
        acc = torch.float32 if half else wide
        total = torch.zeros((n, *b.shape[1:]), dtype=acc, device=b.device).index_add_(0, at, rows.to(acc))
        if not first and total.dim() > 1:
            total = total.flatten(1).sum(1)     # (a 1-D `b`: each total is its one element's already)
        if kind == "sum":
            return total.to(wide) if half else total
        count = torch.bincount(at, minlength=n).to(total.dtype)
        if not first:
            count = count * max(b[0].numel(), 1)
        out = total / count.view(-1, *(1,) * (total.dim() - 1))
        return out.to(wide) if half else out

    @staticmethod
    def masked(kind, b, batched, m, first, pure=True):
        """b_k[m_k].kind() (or .kind(0) with `first`) for every iteration: `m` (n, *M) the
        per-iteration boolean masks over b's leading dimensions, `b` (n, *B) or, the same in
        every iteration, (*B). The unselected entries are replaced by the reduction's identity
        (-0.0 for sums, -inf / inf for max / min), so NaN and inf there never reach the result."""
        from .runtime import GuardFailed
        if not isinstance(b, torch.Tensor) or m.dtype != torch.bool:
            raise GuardFailed("a masked selection of a non-tensor (the loop decides)")
        if not pure and b.requires_grad and torch.is_grad_enabled():
            # (`pure`: b is the selected tensor itself, not arithmetic on all of it, where an
            # unselected element's infinite derivative would meet a zero gradient: NaN)
            raise GuardFailed("arithmetic on a masked selection, with gradients (the loop decides)")
        d = m.dim() - 1
        rows = b if batched else b.unsqueeze(0)
        if rows.dim() - 1 < d or rows.shape[1:1 + d] != m.shape[1:]:
            raise _values_refused("a mask whose shape is not the tensor's leading dimensions (the loop raises)")
        if kind in ("numel", "len"):
            # (the count of selected elements, or of selected entries of the masked dimensions
            # for len(): a Python int per iteration, int64 in the batch)
            per_row = rows[0].numel() // max(m[0].numel(), 1) if kind == "numel" and rows.shape[0] else 1
            return m.sum(tuple(range(1, d + 1)), dtype=torch.int64) * per_row
        floating = b.is_floating_point()
        if not batched and m.shape[0] * b.numel() > _WINDOW_COPY_LIMIT:
            raise _values_refused("a masked selection that would be repeated into one large batch")
        if kind == "mean" and not floating or kind in ("max", "min") and not floating:
            raise GuardFailed(f"{kind}() of a masked selection of {b.dtype} values (the loop decides)")
        mw = m.view(*m.shape, *(1,) * (rows.dim() - 1 - d))
        dims = tuple(range(1, d + 1)) if first else tuple(range(1, rows.dim()))
        if kind in ("sum", "mean"):
            fill = -0.0 if floating else (False if b.dtype == torch.bool else 0)
            half = kind == "mean" and b.dtype in (torch.float16, torch.bfloat16)
            # (a half-precision mean is the float32 sum divided, rounded once, as torch's own)
            total = torch.where(mw, rows, torch.tensor(fill, dtype=b.dtype, device=b.device)).sum(
                dims, dtype=torch.float32 if half else None)
            if kind == "sum":
                return total
            count = m.sum(tuple(range(1, d + 1)))
            if not first:
                count = count * (rows[0].numel() // max(m[0].numel(), 1))
            out = total / count.view(-1, *(1,) * (total.dim() - 1)).to(total.dtype)
            return out.to(b.dtype) if half else out
        if not bool(m.flatten(1).any(1).all()):
            raise _values_refused(f"{kind}() of an empty selection (the loop raises)")
        from .runtime import _zero_signs_tie
        fill = float("-inf") if kind == "max" else float("inf")
        picked = torch.where(mw, rows, torch.tensor(fill, dtype=b.dtype, device=b.device))
        if not (torch.is_grad_enabled() and picked.requires_grad):
            out = picked.amax(dims) if kind == "max" else picked.amin(dims)
        else:
            # max()'s own gradient (shared by the tied entries, or by the NaN ones); an infinite
            # extreme would tie with the unselected entries' fill and share with them: the loop decides
            out = _EvenExtreme.apply(picked, dims, kind == "max")
            if bool(out.isinf().any()):
                raise _values_refused(f"an infinite {kind}() of a selection, with gradients (the loop decides)")
        if floating and bool((out == 0).any()) and _zero_signs_tie(rows):
            # (+0.0 and -0.0 tie: which one a reduction keeps depends on where each element
            # falls in it, and the selection places them elsewhere than the whole row; only a
            # zero extreme can be either, so the batch is searched for both only then)
            raise _values_refused(f"{kind}() of a selection holding +0.0 and -0.0 (the loop decides)")
        return out

    @staticmethod
    def span(kind, b, rows, lo, hi, first):
        """b_k[lo_k:hi_k].kind() (or .kind(0)) for every iteration: `b` (n, T, ...) batched, or
        with `rows` (the loop's indices) the same tensor in every iteration, read at b[rows_k].
        Each span is a mask of the T positions, as Python's slice takes them: a negative bound
        counts from the end, and both clip at the ends."""
        from .runtime import GuardFailed
        if not isinstance(b, torch.Tensor):
            raise GuardFailed("a span of a non-tensor (the loop decides)")
        if rows is not None:
            b = b[rows]          # (an index out of range raises IndexError: the loop decides)
        if b.dim() < 2:
            raise GuardFailed("a span of a 0-d value (the loop raises)")
        t = b.shape[1]
        pos = torch.arange(t, device=b.device)

        def bound(v, default):
            if v is None:
                return torch.full((b.shape[0],), default, dtype=torch.int64, device=b.device)
            if isinstance(v, torch.Tensor):
                if v.dtype == torch.bool or v.is_floating_point() or v.is_complex():
                    raise GuardFailed("slice bounds that are not integers (the loop decides)")
                v = v.to(torch.int64)
            else:
                v = torch.full((b.shape[0],), operator.index(v), dtype=torch.int64, device=b.device)
            return torch.where(v < 0, v + t, v)    # (bounds past the ends select up to them)

        start, stop = bound(lo, 0), bound(hi, t)
        if (kind == "sum" or kind == "mean" and b.is_floating_point()) and b.numel() >= _SPAN_GROUPS_FLOOR:
            out = _span_groups(kind, b, start, stop, first)
            if out is not None:
                return out
        m = (pos >= start.unsqueeze(1)) & (pos < stop.unsqueeze(1))
        if kind in ("max0", "min0"):
            if b.requires_grad and torch.is_grad_enabled():
                # (`.max(0)` sends a column's gradient to one of its tied entries, which one
                # being torch's choice per call; the masked extreme would share it)
                raise GuardFailed(f"`.{kind[:3]}(0)` of a ragged span with gradients (the loop decides)")
            kind = kind[:3]
        return _Helpers.masked(kind, b, True, m, first)

    @staticmethod
    def span_mask(lo, hi, b):
        """The positions of each iteration's span `[lo_k:hi_k]` along the first dimension of its
        values, (n, T): `b` the batched values (n, T, ...), or the tensor every iteration reads
        a row of (N, T, ...). Python's slice rules: a negative bound counts from the end, both
        clip at the ends."""
        from .runtime import GuardFailed
        if not isinstance(b, torch.Tensor) or b.dim() < 2:
            raise GuardFailed("a span of a value without dimensions (the loop decides)")
        t = b.shape[1]
        n = next((v.shape[0] for v in (lo, hi) if isinstance(v, torch.Tensor) and v.dim()), None)
        if n is None:
            raise GuardFailed("span bounds that are not one per iteration (the loop decides)")
        start, stop = _slice_bound(lo, 0, t, n, b.device), _slice_bound(hi, t, t, n, b.device)
        pos = torch.arange(t, device=b.device)
        return (pos >= start.unsqueeze(1)) & (pos < stop.unsqueeze(1))

    @staticmethod
    def span_guard(b, m):
        """The whole batch `b` (n, T, ...) of a ragged span whose positions are `m` (n, T); with
        gradients `where(m, b, b.detach())`: the same values, and the positions outside the
        spans give their gradient to a detached copy."""
        from .runtime import GuardFailed
        if not isinstance(b, torch.Tensor) or b.dim() < 2 or b.shape[:2] != m.shape:
            raise GuardFailed("spans of values of several widths (the loop decides)")
        if b.requires_grad and torch.is_grad_enabled():
            mw = m.view(*m.shape, *(1,) * (b.dim() - 2))
            return torch.where(mw, b, b.detach())
        return b

    @staticmethod
    def span_class_loss(fn, m, x, t, reduction, ignore_index):
        """F.cross_entropy / F.nll_loss(x_k[span_k], t_k[span_k]) for every iteration: `x`
        (n, T, C) and `t` (n, T) the whole tensors, `m` (n, T) the spans' positions; the targets
        outside them read as ignore_index (class_loss reduces each iteration over the others)."""
        from .runtime import GuardFailed
        if reduction not in ("mean", "sum") or type(ignore_index) is not int:
            raise GuardFailed(f"reduction={reduction!r}, ignore_index={ignore_index!r} of ragged spans (the loop decides)")
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape != m.shape or x.dim() != 3:
            raise GuardFailed("spans of values of several widths (the loop decides)")
        t = torch.where(m, t, ignore_index)
        return _Helpers.class_loss(fn, x, t, 2, 1, reduction, ignore_index)

    @staticmethod
    def span_loss(reduction, m, e):
        """An elementwise loss's values `e` (n, T, ...) of every element of the whole tensors,
        reduced as each iteration's `reduction` over its span's positions `m` (n, T)."""
        from .runtime import GuardFailed
        if reduction not in ("mean", "sum") or not isinstance(e, torch.Tensor) or e.dim() < 2 or e.shape[:2] != m.shape:
            raise GuardFailed(f"reduction={reduction!r} of a loss of ragged spans (the loop decides)")
        return _Helpers.masked(reduction, e, True, m, False)

    @staticmethod
    def span_masked(kind, m, e, first, *leaves):
        """e's entries at the spans' positions `m`, reduced per iteration (_Helpers.masked). A
        per-iteration number that requires grad keeps the loop (its derivative at the positions
        outside the spans would reach it)."""
        from .runtime import GuardFailed
        if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in leaves):
            raise GuardFailed("arithmetic on ragged spans with a value that requires grad (the loop decides)")
        if not isinstance(e, torch.Tensor) or e.dim() < 2 or e.shape[:2] != m.shape:
            raise GuardFailed("arithmetic on ragged spans of another shape (the loop decides)")
        return _Helpers.masked(kind, e, True, m, first)

    @staticmethod
    def window_at(x, i, a, b, dim=0):
        """x[i_k + a:i_k + b] for every iteration, `i` the batch of the loop's own index (an
        arange, in iteration order) and `a`, `b` loop-invariant integers: a view of x.unfold's
        rows from the ends alone, for a loop counting up; otherwise as `window`."""
        from .runtime import GuardFailed
        a, b = operator.index(a), operator.index(b)    # (a float bound raises TypeError, as the loop)
        n = i.shape[0]
        first = int(i[0])
        step = int(i[1]) - first if n > 1 else 1
        if step < 1 or not isinstance(x, torch.Tensor) or x.dim() <= dim or not _counts_up(i, first, step):
            return _Helpers.window(x, i + a, i + b, dim)
        w = b - a
        start = first + a
        last = start + (n - 1) * step
        if w < 1 or start < 0 or last + w > x.shape[dim]:
            raise _values_refused("windows that are empty or past the tensor's ends (Python's slice rules: the "
                                  "loop decides)")
        return _windows(x, w, dim)[start:last + 1:step]

    @staticmethod
    def beside(rows, idx):
        """The batch's row numbers `rows` (n,) shaped to stand beside a batch of index tensors
        `idx` (n, ...) in one advanced index: (n, 1, ..)."""
        return rows.reshape((rows.shape[0],) + (1,) * (idx.dim() - 1))

    @staticmethod
    def unempty(x):
        """`x` itself, where it has elements (_unempty)."""
        _unempty(x)
        return x

    @staticmethod
    def gather_rows(x, dim, idx):
        """x.select(dim, idx_k) for every iteration, first, as a gather (pick_rows' other form)."""
        _unempty(x)
        rows = _selected(x, dim, idx)
        if rows is None:
            rows = x[(slice(None),) * dim + (idx,)]
        return rows.movedim(dim, 0) if dim else rows

    @staticmethod
    def pick_rows(x, dim, idx):
        """x.select(dim, idx_k) for every iteration, first: `x[2 * i]`, `x[:, j[i]]` of a
        loop-invariant tensor and one integer per iteration. Where the integers step evenly up
        inside the dimension (the loop's index times a step, plus an offset), a view of every
        step-th row, as the loop's own rows are views of x; otherwise a gather (Python's negative
        indices wrap as there; one out of range raises, and the loop decides)."""
        from .runtime import GuardFailed
        if not isinstance(x, torch.Tensor) or not isinstance(idx, torch.Tensor) or x.dim() <= dim:
            raise GuardFailed("rows of a non-tensor, or past its dimensions (the loop decides)")
        _unempty(x)
        if idx.dtype == torch.bool or idx.dtype == torch.uint8 or idx.is_floating_point() or idx.is_complex():
            raise GuardFailed("rows picked by other than integers (the loop decides)")
        n, size = idx.shape[0], x.shape[dim]
        if idx.dim() == 1 and n and idx.device == x.device:
            if n <= 64 and idx.is_cpu:
                # (a few integers as Python ints: one read, where three reads and a comparison
                # with an arange cost several microseconds)
                v = idx.tolist()
                first = v[0]
                step = v[1] - first if n > 1 else 1
                even = step >= 1 and 0 <= first and first + (n - 1) * step < size and all(
                    b - a == step for a, b in zip(v, v[1:]))
            else:
                first = int(idx[0])
                step = int(idx[1]) - first if n > 1 else 1
                last = first + (n - 1) * step
                # (the last one read first: integers that do not step evenly rarely end where they would)
                even = step >= 1 and 0 <= first and last < size and (n <= 2 or int(idx[-1]) == last and torch.equal(
                    idx, torch.arange(first, last + 1, step, device=idx.device, dtype=idx.dtype)))
            if even:
                rows = x.narrow(dim, first, (n - 1) * step + 1)
                if step > 1:
                    rows = rows[(slice(None),) * dim + (slice(None, None, step),)]
                return rows.movedim(dim, 0) if dim else rows
        return _Helpers.gather_rows(x, dim, idx)

    @staticmethod
    def window(x, lo, hi, dim=0):
        """x[lo_k:hi_k] for every iteration, a loop-invariant tensor `x` and per-iteration
        integer bounds with one width: the rows of x.unfold (a view), picked by lo_k (no copy
        where the starts count up by one). Bounds outside 0..len(x) (Python clips them, or a
        negative one counts from the end) or windows of several widths leave the call to the
        loop."""
        from .runtime import GuardFailed
        if not isinstance(x, torch.Tensor) or x.dim() <= dim:
            raise GuardFailed("a window of a non-tensor or past its dimensions (the loop decides)")
        lo = torch.as_tensor(lo, device=x.device)
        hi = torch.as_tensor(hi, device=x.device)
        n = max(lo.shape[0] if lo.dim() else 1, hi.shape[0] if hi.dim() else 1)
        lo, hi = lo.expand(n).long(), hi.expand(n).long()
        start = int(lo[0])
        w = int(hi[0]) - start
        size = x.shape[dim]
        # starts counting up by a step (`x[i:i + w]`, frames `x[i * hop:i * hop + w]`): one
        # comparison with an arange, and the bounds from the ends; in another order, the bounds
        # from every start
        step = int(lo[1]) - start if n > 1 else 1
        counting = n == 1 or step >= 1 and torch.equal(
            lo, torch.arange(start, start + n * step, step, device=lo.device, dtype=lo.dtype))
        if w < 1 or not torch.equal(hi, lo + w) or (start < 0 or start + (n - 1) * step + w > size if counting
                                                    else int(lo.min()) < 0 or int(hi.max()) > size):
            raise _values_refused("windows of several widths, empty, or past the tensor's ends "
                                  "(Python's slice rules: the loop decides)")
        rows = _windows(x, w, dim)
        if counting:
            return rows.narrow(0, start, (n - 1) * step + 1)[::step]     # (a view: every step-th window)
        if n * w * max(x.numel() // max(size, 1), 1) > _WINDOW_COPY_LIMIT:
            raise _values_refused("windows out of order that would be copied into one large batch")
        return rows[lo]

    @staticmethod
    def window_nd(x, dims, los, his, lead):
        """x[.., lo:hi, .., lo':hi', ..] in a loop nest of `lead` levels, each window's bounds
        per-iteration integers that change along one level only (`img[:, i:i + p, j:j + p]`,
        `x[i * k:(i + 1) * k, j * k:(j + 1) * k]`): a view of x.unfold along each windowed
        dimension `dims[m]`, its starts picked per level, the levels first (size 1 where no
        window changes), then x's dimensions with each windowed one as its window. Bounds past
        the ends, windows of several widths, two windows along one level: the loop decides."""
        from .runtime import GuardFailed
        if not isinstance(x, torch.Tensor) or x.dim() <= max(dims):
            raise GuardFailed("a window of a non-tensor or past its dimensions (the loop decides)")
        picks = []          # [level, dim, width, starts (a list of ints)]
        used = set()
        vague = []
        for d, lo, hi in zip(dims, los, his):
            if type(lo) is not torch.Tensor or type(hi) is not torch.Tensor or lo.dim() != lead \
                    or hi.dim() != lead or lo.is_floating_point() or hi.is_floating_point():
                raise GuardFailed("window bounds that are not one integer per iteration of the nest")
            if lo.shape != hi.shape:
                raise _values_refused("windows of several widths (one bound changes where the other does not)")
            varying = [lv for lv in range(lead) if lo.shape[lv] > 1]
            if len(varying) > 1:
                raise _values_refused("a window whose bounds change along two loop levels")
            starts, ends = lo.reshape(-1).tolist(), hi.reshape(-1).tolist()
            w = ends[0] - starts[0]
            if w < 1 or min(starts) < 0 or max(ends) > x.shape[d] or any(b - a != w for a, b in zip(starts, ends)):
                raise _values_refused("windows of several widths, empty, or past the tensor's ends "
                                      "(Python's slice rules: the loop decides)")
            lv = varying[0] if varying else None
            if lv is None:
                vague.append(len(picks))
            elif lv in used:
                raise _values_refused("two windows that change along the same loop level")
            else:
                used.add(lv)
            picks.append([lv, d, w, starts])
        free = [lv for lv in range(lead) if lv not in used]
        for m in vague:                 # one iteration along its level: any level of size 1
            if not free:
                raise _values_refused("a window whose level cannot be told")
            picks[m][0] = free.pop(0)
        v = x
        rank = x.dim()
        for lv, d, w, starts in picks:
            v = v.unfold(d, w, 1)       # d: the starts; a new last dimension: the window
            n, first = len(starts), starts[0]
            step = starts[1] - first if n > 1 else 1
            if step >= 1 and all(a == first + k * step for k, a in enumerate(starts)):
                v = v.narrow(d, first, step * (n - 1) + 1)
                if step > 1:
                    v = v[(slice(None),) * d + (slice(None, None, step),)]
            else:
                if n * w * max(x.numel() // max(x.shape[d], 1), 1) > _WINDOW_COPY_LIMIT:
                    raise _values_refused("windows out of order that would be copied into one large batch")
                v = v.index_select(d, torch.tensor(starts, device=x.device))
        by_level = {lv: d for lv, d, _, _ in picks}
        window_at = {d: rank + m for m, (_, d, _, _) in enumerate(picks)}
        order = [by_level[lv] for lv in sorted(by_level)] + [window_at.get(d, d) for d in range(rank)]
        v = v.permute(order)
        for lv in range(lead):
            if lv not in by_level:
                v = v.unsqueeze(lv)
        return v

    @staticmethod
    def crop(x, rows, dims, los, his):
        """x[rows_k, .., lo_k:hi_k, .., lo'_k:hi'_k, ..] for every iteration (`rows` None: the
        batch `x` itself, its row k): crops at per-iteration offsets along the dimensions
        `dims` of x, whole dimensions elsewhere (`img[i, :, y[i]:y[i] + h, x[i]:x[i] + w]`).
        One gather of x.unfold's windows, a copy (the loop's views are copied by whatever
        consumes them). Rows out of range (the loop raises), bounds past the ends (Python's
        slice rules clip them), windows of several widths or empty ones: the loop decides."""
        from .runtime import GuardFailed
        if type(x) is not torch.Tensor or x.dim() <= max(dims):
            raise GuardFailed("a crop of a non-tensor or past its dimensions (the loop decides)")
        size = x.shape[0]
        if rows is None:
            n = size
            rows = torch.arange(n, device=x.device)
        else:
            if type(rows) is not torch.Tensor or rows.dim() != 1 or rows.dtype is torch.bool \
                    or rows.is_floating_point() or rows.is_complex() or rows.dtype is torch.uint8:
                raise GuardFailed("crop rows that are not one integer per iteration (the loop decides)")
            n = rows.shape[0]
            lo_row, hi_row = torch.aminmax(rows)
            if n and (int(lo_row) < -size or int(hi_row) >= size):
                raise _values_refused("a crop's row index out of range (the loop raises)")
            rows = rows.to(device=x.device, dtype=torch.long)
        index = [rows] + [slice(None)] * (x.dim() - 1)
        v = x
        for d, lo, hi in zip(dims, los, his):
            if type(lo) is not torch.Tensor or type(hi) is not torch.Tensor or lo.dim() != 1 or hi.dim() != 1 \
                    or lo.shape[0] != n or hi.shape[0] != n or any(
                        t.dtype is torch.bool or t.dtype is torch.uint8 or t.is_floating_point() or t.is_complex()
                        for t in (lo, hi)):
                raise GuardFailed("crop bounds that are not one integer per iteration (the loop decides)")
            lo, hi = lo.long(), hi.long()   # (the bounds as the loop's slice reads them; a narrow dtype's
            w = int(hi[0]) - int(lo[0])     # width would wrap back: int8 120 + 10 is -126 there)
            if n and (w < 1 or not bool(((hi - lo) == w).all()) or int(lo.min()) < 0 or int(hi.max()) > x.shape[d]):
                raise _values_refused("crops of several widths, empty, or past the tensor's ends (Python's slice "
                                      "rules: the loop decides)")
            v = v.unfold(d, w, 1)           # d: the starts; a new last dimension: the window
            index[d] = lo.to(x.device)
        out = v[tuple(index)]               # (n, x's other dimensions in order, then the windows)
        kept = [d for d in range(1, x.dim()) if d not in dims]
        order = [0] + [1 + kept.index(d) if d in kept else 1 + len(kept) + list(dims).index(d)
                       for d in range(1, x.dim())]
        return out if order == sorted(order) else out.permute(order)

    @staticmethod
    def take(x, idx):
        """x_i[idx_i] for every row: one element (or sub-tensor) per row."""
        _unempty(x)
        if x.dim() == 2 and idx.dtype is torch.int64 and idx.dim() == 1 and x.is_cpu and idx.is_cpu:
            try:       # a gather is 2x faster than two-tensor indexing, at every size (on a GPU a bad
                       # index would be a device-side assert, not an error to recover from)
                return x.gather(1, idx.unsqueeze(1)).squeeze(1)
            except RuntimeError:
                pass   # a negative or out-of-range index: indexing wraps the one and raises for the other
        rows = torch.arange(x.shape[0], device=x.device)
        return x[rows, idx]

    @staticmethod
    def take_each(x, idx):
        """x_i[idx_i] for every row, `idx_i` an integer tensor of any shape: x_i's elements (or
        sub-tensors) at those positions, as indexing takes them (negative ones from the end, one
        out of range raises IndexError, as the loop's indexing does)."""
        _unempty(x)
        rows = torch.arange(x.shape[0], device=x.device).view(-1, *[1] * (idx.dim() - 1))
        return x[rows, idx]

    @staticmethod
    def rows(mod, x, rank, lead):
        """`mod(x_k)` for every iteration: one call on the batch (see module_form)."""
        form = module_form(mod, rank)      # the module may have changed since the rewrite
        if form is None:
            raise ValueError(f"{type(mod).__name__} has no layer-by-layer batched form now")
        if form == "prepend":
            return mod(x)
        lead_shape = x.shape[:lead + 1]
        return mod(x.flatten(0, lead)).unflatten(0, lead_shape)

    @staticmethod
    def kl_div(fn, x, t, rank, lead, reduction, log_target):
        """F.kl_div(x_k, t_k, reduction=..., log_target=...) for every iteration k."""
        if reduction not in ("mean", "sum", "none", "batchmean") or type(log_target) is not bool \
                or x.shape != t.shape or reduction == "batchmean" and rank == 0:
            # (another reduction, broadcast shapes, a 0-d batchmean: the loop decides, warns or raises)
            raise ValueError(f"F.kl_div with reduction={reduction!r} of shapes {tuple(x.shape)}, {tuple(t.shape)}")
        terms = fn(x, t, reduction="none", log_target=log_target)
        if reduction == "none" or rank == 0:
            return terms
        dims = tuple(range(lead, lead + rank))
        if reduction == "mean":
            return terms.mean(dims)
        total = terms.sum(dims)
        return total / x.shape[lead] if reduction == "batchmean" else total

    @staticmethod
    def class_loss(fn, x, t, rank, lead, reduction, ignore_index):
        """F.cross_entropy / F.nll_loss(x_k, t_k, reduction=...) for every iteration k."""
        if reduction not in ("mean", "sum", "none") or type(ignore_index) is not int:
            raise ValueError(f"reduction={reduction!r}, ignore_index={ignore_index!r}: the loop decides")
        if rank == 1:                      # (classes,) against a 0-d target: one row
            x, t = x.unsqueeze(lead), t.unsqueeze(lead)
        shape = t.shape
        rows = fn(x.flatten(0, lead), t.flatten(0, lead), reduction="none",
                  ignore_index=ignore_index).unflatten(0, shape)
        if reduction == "none":
            return rows.squeeze(lead) if rank == 1 else rows
        total = rows.sum(lead)
        if reduction == "sum":
            return total
        return total / (t != ignore_index).sum(lead)     # the loop's mean over the rows it counts

    @staticmethod
    def pick(is_max, first, *rest):
        """Builtin max(a, b, ..) / min(..) of 0-d tensors per row: as Python compares, a later
        value replaces the one held only where it is strictly greater (smaller). With gradients
        the loop runs: a value Python's max leaves out is no part of the loop's graph (no
        gradient at all, where `where` gives zeros, or NaN through an infinite derivative)."""
        if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in (first, *rest)):
            from .runtime import GuardFailed
            raise GuardFailed("Python's max / min of tensors that require grad (the loop decides)")
        held = first
        for v in rest:
            held = torch.where(v > held if is_max else v < held, v, held)
        return held

    @staticmethod
    def number_tensor(x):
        """torch.tensor(v) of every row's Python number (batched in Python's precision: float64,
        int64, bool): a new tensor of the default float dtype, int64 or bool, on the default
        device, as torch.tensor makes from one number."""
        from .runtime import GuardFailed, _default_device
        if x.is_complex():
            raise GuardFailed("torch.tensor of complex numbers in a batched body")
        want = torch.get_default_dtype() if x.is_floating_point() else x.dtype
        return x.detach().to(device=_default_device(), dtype=want, copy=True)

    @staticmethod
    def numbers_tensor(dtype, *cols):
        """torch.tensor([a_k, b_k, ..]) of every row's Python numbers (batches in Python's
        precision: float64, int64, bool) and number constants: an (n, k) tensor on the default
        device, of the dtype torch.tensor infers (the default float dtype where one is a float,
        bool where all are bools, else int64) or `dtype` (a floating one, of floats: each value
        rounded once, as torch.tensor rounds a Python float)."""
        from .runtime import GuardFailed, _default_device
        batches = [c for c in cols if isinstance(c, torch.Tensor)]
        if any(b.is_complex() for b in batches):
            raise GuardFailed("torch.tensor of complex numbers in a batched body")
        floating = any(b.is_floating_point() for b in batches) or any(type(c) is float for c in cols)
        if dtype is None:
            every_bool = all(b.dtype == torch.bool for b in batches) and all(
                type(c) is bool for c in cols if not isinstance(c, torch.Tensor))
            dtype = torch.get_default_dtype() if floating else torch.bool if every_bool else torch.int64
        if dtype.is_floating_point:
            for b in batches:
                if not (b.is_floating_point() or b.dtype == torch.bool) and b.numel() \
                        and not bool((b.abs() <= 2 ** 53).all()):
                    # (torch.tensor takes a Python int to a double first: a second rounding)
                    raise GuardFailed("torch.tensor of ints beyond 2**53 into floats (the loop decides)", data=True)
        # (one number per iteration: a batch over the loop's dimensions, some of size 1 in a nest)
        lead = broadcast_shapes(*(b.shape for b in batches))
        out = torch.empty((*lead, len(cols)), dtype=dtype, device=_default_device())
        for k, c in enumerate(cols):
            out[..., k] = c.detach() if isinstance(c, torch.Tensor) else c
        return out

    @staticmethod
    def number(kind, x):
        """int(x_k) / float(x_k) / bool(x_k) of every row's 0-d value (a tensor, or a Python
        number batched as one), in Python's precision: int64, float64, bool."""
        from .runtime import GuardFailed
        if x.is_complex() or x.dtype == torch.uint64:
            raise GuardFailed(f"{kind}() of {x.dtype} values in a batched body")
        x = x.detach()       # (a Python number carries no gradient: `w = float(r.max()) * 3`, then `r * w`)
        if kind == "float":
            return x.double()
        if kind == "bool":
            return x if x.dtype == torch.bool else x != 0
        if not x.is_floating_point():
            return x.long()
        t = x.double().trunc()        # int() of a float rounds toward zero
        if t.numel() and not bool((t.abs() < 2.0 ** 63).all()):
            # NaN, infinities and values past int64: the loop raises or gives a big int itself
            raise GuardFailed("int() of a NaN, an infinity or a value past int64", data=True)
        return t.long()

    @staticmethod
    def pymath(name, x):
        """math.<name>(v) / round(v) of every row's Python number (batched as int64 / float64),
        as Python computes it: in float64, an int result for floor / ceil / trunc / round. The
        values where Python raises (ValueError outside the domain, OverflowError for a result
        out of range or an infinity made an int) or gives an int beyond int64 leave the call to
        the loop, which raises or computes them. The functions of the C library (all but the
        rounding ones, fabs and the isnan tests, which torch computes exactly) are Python's own
        on each row (_py_map): torch's kernels differ from them in the last bit."""
        from .runtime import GuardFailed
        if x.is_complex() or x.dtype == torch.bool:
            raise GuardFailed(f"math.{name}() of {x.dtype} values in a batched body")
        if name in ("floor", "ceil", "trunc", "round") and not x.is_floating_point():
            return x                                    # an int stays itself
        f = x.double()
        if name in ("isnan", "isinf", "isfinite"):
            return getattr(torch, name)(f)
        if name in ("floor", "ceil", "trunc", "round"):
            t = getattr(torch, name)(f)                   # (torch.round: halves to even, as Python's)
            if t.numel() and not bool((t.abs() < 2.0 ** 63).all()):
                # NaN (ValueError), an infinity (OverflowError), or a big int: the loop's own
                e = GuardFailed(f"{name}() of a NaN, an infinity or a value past int64", data=True)
                e.final = True
                raise e
            return t.long()
        if name == "fabs":
            return f.abs()
        return _py_map(f"math.{name}", getattr(math, name), x)

    @staticmethod
    def rdiv(v, t):
        """`v / t` of a per-iteration Python number `v` (batched as int64 / float64) and a tensor
        `t` (not half precision): torch's Tensor.__rtruediv__, `t.reciprocal() * v`, the number
        cast to the reciprocal's dtype as torch casts a Python number it multiplies by."""
        r = t.reciprocal()
        if isinstance(v, torch.Tensor) and v.dtype != r.dtype:
            v = v.to(r.dtype)
        return r * v

    @staticmethod
    def pymath2(name, x, y):
        """math.<name>(a, b) of every row's Python numbers (batched as int64 / float64, or one
        number for all rows), as Python computes them: copysign in torch, which is exact, the
        rest by Python on each row (_py_map)."""
        from .runtime import GuardFailed
        args = []
        for v in (x, y):
            if isinstance(v, torch.Tensor):
                if v.is_complex() or v.dtype == torch.bool:
                    raise GuardFailed(f"math.{name}() of {v.dtype} values in a batched body")
                args.append(v.double())
            elif type(v) is int or type(v) is float:
                args.append(torch.tensor(float(v), dtype=torch.float64))
            else:
                raise GuardFailed(f"math.{name}() of a {type(v).__name__} in a batched body")
        a, b = args
        if a.device != b.device:
            a, b = (a.to(b.device), b) if a.dim() == 0 else (a, b.to(a.device))
        if name == "copysign":
            return torch.copysign(a, b)
        return _py_map(f"math.{name}", getattr(math, name), x, y)

    @staticmethod
    def listed(seq, idx):
        """seq[idx_k] for every row, where `seq` is a loop-invariant list (or tuple) of Python
        numbers of one type and idx_k a per-iteration integer: a gather, with Python's negative
        indices; an index out of range leaves the call to the loop (which raises IndexError)."""
        from .runtime import GuardFailed, _number_list
        if type(seq) is not list and type(seq) is not tuple:
            raise GuardFailed(f"indexing a {type(seq).__name__} by per-iteration values in a batched body")
        t = _number_list(seq).to(idx.device)
        n = len(seq)
        if idx.numel() and not bool(((idx >= -n) & (idx < n)).all()):
            raise GuardFailed("an index out of the list's range (the loop raises IndexError)", data=True)
        return t[idx]

    @staticmethod
    def fill_range(row, dim, lo, hi, v, varies=False, base=None, base_varies=False, inplace=False):
        """`row_k[.., lo_k:hi_k] = v` for every row k (runtime.fill_range), as a mask of the
        positions: each bound as Python's slice takes it (None, negative from the end, clamped
        to the size), integers only; `v` converted to the row's dtype as the assignment converts
        it (a Python number that does not fit raises, as there); `varies`: `v` is one 0-d tensor
        per iteration, a batch. With `base` (a batch where `base_varies`, else one value), the
        rows are first what the loop's `out[k] = base_k` leaves. `inplace` (lowering.batched's
        _sole_fill: the body is this fill of the store target's own rows, read nowhere else):
        the rows are filled where they are, once everything above has been checked; the fill is
        the same whenever it runs again (a check, the loop after a refusal), and the commit's
        copy of the rows onto themselves is none. Not where autograd records the row."""
        from .runtime import GuardFailed
        size = row.shape[1 + dim]
        n = row.shape[0]
        a, b = _slice_bound(lo, 0, size, n, row.device), _slice_bound(hi, size, size, n, row.device)
        p = torch.arange(size, device=row.device)
        mask = (p >= a[:, None]) & (p < b[:, None])
        mask = mask.reshape(n, *([1] * dim), size, *([1] * (row.dim() - 2 - dim)))
        if varies:
            fill = v.to(device=row.device, dtype=row.dtype).reshape(n, *([1] * (row.dim() - 1)))
        elif isinstance(v, torch.Tensor):
            if v.dim() != 0:
                raise GuardFailed("a slice assigned a tensor with dimensions (its shape must fit each slice)")
            fill = v.to(device=row.device, dtype=row.dtype)
        elif type(v) in (int, float, bool):
            try:
                fill = torch.full((), v, dtype=row.dtype, device=row.device)
            except RuntimeError as e:           # does not fit the dtype: the loop raises
                raise GuardFailed(f"the assigned value: {e}", data=True) from None
        else:
            raise GuardFailed(f"a slice assigned a {type(v).__name__}")
        if base is not None:
            row = _stored_rows(row, base, base_varies)
        elif inplace and not varies and not (row.requires_grad and torch.is_grad_enabled()) \
                and row.numel() >= _INPLACE_FLOOR:
            return row.masked_fill_(mask, fill)
        return torch.where(mask, fill, row)

    @staticmethod
    def fill_span(row, dim, lo, hi, v, *leaves):
        """`row_k[.., lo_k:hi_k] = v_k[.., lo_k:hi_k]` for every row k: the same span of another
        row of the same shape (so that Python's slice takes the same positions of both), as a
        `where` of the span's mask (_Helpers.fill_range's) between the rows, `v` in the row's
        dtype as the assignment converts it. Rows of other shapes: the loop decides. `leaves`:
        the values beside the spans of arithmetic on them (lowering.batched._span_store); one
        that requires grad leaves the call to the loop (its derivative at the positions outside
        the spans, `log` of padding, could be NaN)."""
        from .runtime import GuardFailed
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in leaves):
            raise GuardFailed("arithmetic on a ragged span with a value beside it that requires grad (the loop "
                              "decides)")
        if not isinstance(v, torch.Tensor) or v.dim() != row.dim() or v.shape[:1 + dim] != row.shape[:1 + dim] \
                or v.shape[2 + dim:] != row.shape[2 + dim:]:
            raise GuardFailed("a span assigned from a row of another shape (the loop decides)")
        if v.is_complex() and not row.is_complex():
            raise GuardFailed("complex values assigned into a real row (the loop raises)")
        size = row.shape[1 + dim]
        n = row.shape[0]
        if v.shape[1 + dim] != size:
            v = _Helpers._span_aligned(row, dim, lo, hi, v)     # (rows of other widths: `out[b, :L] = seqs[b, :L]`)
        mask = _Helpers.fill_range(torch.zeros((n, size), dtype=torch.bool, device=row.device), 0, lo, hi, True)
        mask = mask.reshape(n, *([1] * dim), size, *([1] * (row.dim() - 2 - dim)))
        return torch.where(mask, v.to(device=row.device, dtype=row.dtype), row)

    @staticmethod
    def span_arange(row, lo, hi, a, b):
        """`torch.arange(a_k, b_k)` laid out at each row's span `[lo_k:hi_k]` (n, T): position p
        takes a_k + (p - start_k), int64 as torch.arange of ints gives; a range of one value is
        broadcast, as setitem does. Where a span's length is neither the range's nor 1 the loop
        raises (a shape mismatch): it decides, as it does for a negative range's bounds."""
        from .runtime import GuardFailed
        n, t = row.shape[0], row.shape[1]
        start, stop = _slice_bound(lo, 0, t, n, row.device), _slice_bound(hi, t, t, n, row.device)
        ends = []
        for v in (a, b):
            if isinstance(v, torch.Tensor):
                if v.is_floating_point() or v.is_complex() or v.dtype == torch.bool:
                    raise GuardFailed("a range of other than ints (the loop decides)")
                v = v.long().reshape(-1).to(row.device).expand(n)
            elif type(v) is int:
                v = torch.full((n,), v, dtype=torch.long, device=row.device)
            else:
                raise GuardFailed("a range of other than ints (the loop decides)")
            ends.append(v)
        first, k = ends[0], ends[1] - ends[0]
        span = (stop - start).clamp(min=0)
        if not bool(((span == k) | (k == 1)).all()):   # (a negative k, arange(-1), raises: never a span's)
            raise _values_refused("a range of another length than its span (the loop raises)")
        p = torch.arange(t, device=row.device)
        steps = torch.where((k == 1).unsqueeze(1), torch.zeros_like(p), p - start.unsqueeze(1))
        return first.unsqueeze(1) + steps

    @staticmethod
    def roll(b, shifts, dim, per_row, lead):
        """torch.roll of each row of the batch `b` (`lead` batch dimensions first) by `shifts`
        along the batch dimension `dim` (None: the row's elements in order, as torch.roll without
        dims flattens, then the row's shape again). `per_row`: the shifts are one Python int per
        row, an int64 batch; position p of a row takes the element at (p - shift) mod its length,
        as torch.roll's, gathered (a data move: the loop's values, and the gradient each element
        routes back to its own place)."""
        from .runtime import GuardFailed
        if not isinstance(b, torch.Tensor):
            raise GuardFailed("`roll` of a value that is not a tensor (the loop decides)")
        if not per_row:
            if dim is not None:
                return torch.roll(b, shifts, dim)
            flat = b.flatten(lead)
            return torch.roll(flat, shifts, lead).view(b.shape)
        shifts = _row_ints(shifts, b, "roll")
        if b.dim() == 1:
            return b        # (0-d rows: torch.roll gives each back as it is)
        v = b.flatten(1) if dim is None else b
        d = 1 if dim is None else dim % v.dim()     # (a row's dimension: _dim gives none of the batch's)
        size = v.shape[d]
        if not size:
            return b        # (an empty row: torch.roll gives it back as it is)
        p = torch.arange(size, device=v.device)
        at = torch.remainder(p.unsqueeze(0) - shifts.to(v.device).unsqueeze(1), size)   # (Python's mod: 0 <= at < size)
        at = at.view(v.shape[0], *(1,) * (d - 1), size, *(1,) * (v.dim() - d - 1)).expand(v.shape)
        out = v.gather(d, at)
        return out.view(b.shape) if dim is None else out

    @staticmethod
    def rot90(b, k, dims, per_row):
        """torch.rot90 of each row of the batch `b` by `k` quarter turns in the batch dimensions
        `dims`. `per_row`: one count per row (ints, or 0-d integer tensors, as torch takes their
        index): each row takes its rotation by its count mod 4, the rows of one count rotated
        together (a data move: the loop's values, and the gradient each element routes back). Rows whose
        two dimensions differ in size and that turn by an odd count would change shape: the loop
        decides."""
        from .runtime import GuardFailed
        if not isinstance(b, torch.Tensor):
            raise GuardFailed("`rot90` of a value that is not a tensor (the loop decides)")
        if not per_row:
            return torch.rot90(b, k, dims)
        q = torch.remainder(_row_ints(k, b, "rot90", high=True), 4)
        odd = q % 2 == 1
        if b.shape[dims[0]] != b.shape[dims[1]] and bool(odd.any()):
            raise GuardFailed("`rot90` of rows that are not square by an odd count (their shape changes)",
                              data=True)
        # (the rows of each count together: every row rotated once, about half the loop's time
        # at 2,000 images of 3 x 32 x 32, where four whole rotations and `where`s took longer
        # than the loop)
        out = torch.empty_like(b)
        for turn in range(4):
            rows = (q == turn).nonzero()[:, 0]
            if rows.numel():
                part = b.index_select(0, rows)
                out[rows] = torch.rot90(part, turn, dims) if turn else part
        return out

    @staticmethod
    def span_flip(b, lo, hi):
        """`b_k[lo_k:hi_k].flip(0)` laid out at the span's own positions of each whole row (n, T,
        ..): position p of the span takes the element at start + stop - 1 - p (Python's slice
        bounds of each row); a position outside the span takes some element of the row, which
        the store's mask drops (fill_span)."""
        from .runtime import GuardFailed
        if not isinstance(b, torch.Tensor) or b.dim() < 2:
            raise GuardFailed("a reversed span of a value without dimensions (the loop decides)")
        n, t = b.shape[0], b.shape[1]
        if not t:
            return b
        start, stop = _slice_bound(lo, 0, t, n, b.device), _slice_bound(hi, t, t, n, b.device)
        p = torch.arange(t, device=b.device)
        at = (start.unsqueeze(1) + stop.unsqueeze(1) - 1 - p).clamp(0, t - 1)
        return b.gather(1, at.view(n, t, *(1,) * (b.dim() - 2)).expand(b.shape))

    @staticmethod
    def _span_aligned(row, dim, lo, hi, v):
        """fill_span's source rows `v`, of another width than the rows along the span's dimension,
        laid out as the rows are: position p of the row's span takes the source span's element at
        the same distance from its start (or its one element, which setitem broadcasts), each row's
        bounds normalized by Python's slice rules for its own width. Where a row's span and the
        source's differ in length (and the source's is not 1), the loop raises: it decides."""
        from .runtime import GuardFailed
        n, size, width = row.shape[0], row.shape[1 + dim], v.shape[1 + dim]

        def bounds(w):
            a, b = _slice_bound(lo, 0, w, n, row.device), _slice_bound(hi, w, w, n, row.device)
            return a, (b - a).clamp(min=0)
        a_row, len_row = bounds(size)
        a_v, len_v = bounds(width)
        if not bool(((len_row == len_v) | (len_v == 1)).all()):
            raise _values_refused("a span assigned from a span of another length (the loop raises)")
        if not width:
            return torch.zeros(row.shape, dtype=v.dtype, device=v.device)    # (no span takes anything)
        p = torch.arange(size, device=row.device)
        # (a source span of one element is broadcast: its one element at every position; its start
        # and the row's may be clipped differently, `[-10:-2]` of widths 3 and 8)
        at = a_v[:, None] + torch.where(len_v[:, None] == 1, 0, p - a_row[:, None])
        at = at.clamp(0, width - 1).reshape(n, *([1] * dim), size, *([1] * (row.dim() - 2 - dim)))
        return torch.gather(v.to(row.device), 1 + dim, at.expand(*row.shape[:1 + dim], size, *v.shape[2 + dim:]))

    @staticmethod
    def own_rows(t, batched, sizes, *receivers):
        """runtime.own for every row at once: a tensor the iteration made and then writes into,
        with memory of its own per row (a batch the body computed is new memory; one the same in
        every row is copied for each)."""
        from .runtime import GuardFailed, own
        own(t, *receivers)       # (its checks: the receivers tensors, no leaf that requires grad)
        if not isinstance(t, torch.Tensor):
            raise GuardFailed("a value the iteration writes into that is not a tensor")
        return t if batched else t.expand(*sizes, *t.shape).clone()

    @staticmethod
    def masked_fill_rows(r, m, m_batched, v, v_batched, same=False):
        """runtime masked_put for every row at once: `r_k[m_k] = v_k` where each `m_k` is a boolean
        mask over the leading dimensions of the row and `v_k` one number (or a 0-d tensor of the
        row's dtype), as a masked fill of the batch; anything else (an index, a value with
        elements, a value carrying a gradient) raises, and the loop decides. `same`: the loop's
        value is `a_k[m_k]`, a selection by the same mask, and `v` is `a`: each row takes a's
        elements where its mask holds (a row of the row's shape and dtype, as index_put requires;
        a masked selection of one and a store of it into the other select the same positions)."""
        from .runtime import GuardFailed, _tracked
        n, row = r.shape[0], r.shape[1:]
        if not (isinstance(m, torch.Tensor) and m.dtype is torch.bool):
            raise GuardFailed("a store by an index that is not a boolean mask, into a tensor the iteration made")
        mrow = m.shape[1:] if m_batched else m.shape
        if not 1 <= len(mrow) <= len(row) or mrow != row[:len(mrow)] or m.device != r.device:
            raise GuardFailed("a boolean mask of another shape than the row it selects in (the loop raises)")
        if same:
            vrow = v.shape[1:] if v_batched and isinstance(v, torch.Tensor) else getattr(v, "shape", None)
            if not (isinstance(v, torch.Tensor) and vrow == row and v.dtype is r.dtype and v.device == r.device):
                raise GuardFailed("a masked store of another tensor's selection by the same mask, of another shape "
                                  "or dtype than the row (the loop raises or selects otherwise)")
        elif v_batched:
            if not (isinstance(v, torch.Tensor) and v.dim() == 1 and v.dtype is r.dtype and v.device == r.device):
                raise GuardFailed("a masked store of a value that is not one number of the row's dtype")
        elif not (type(v) in (int, float, bool) or type(v) is torch.Tensor and v.dim() == 0 and v.dtype is r.dtype
                  and v.device == r.device):
            raise GuardFailed("a masked store of a value that is not one number of the row's dtype")
        if torch.is_grad_enabled() and (_tracked(r) or isinstance(v, torch.Tensor) and _tracked(v)):
            raise GuardFailed("a masked store under autograd (the loop's index_put_ and a masked fill differ in "
                              "what their backward saves)")
        mask = m if m_batched else m.unsqueeze(0)
        mask = mask.reshape(mask.shape + (1,) * (len(row) - len(mrow)))
        if same:
            return torch.where(mask, v if v_batched else v.unsqueeze(0), r)
        if v_batched:
            return torch.where(mask, v.reshape(n, *(1,) * len(row)), r)
        return r.masked_fill(mask, v)

    @staticmethod
    def where_store(c, a, b):
        """A stored value's branches (runtime.where with strict=False) for every row: a Python
        number and a tensor, both in a dtype that holds them exactly."""
        from .runtime import FunctionRuntime
        return FunctionRuntime.where(c, a, b, strict=False)

    @staticmethod
    def classes(k):
        """F.one_hot's num_classes for a batch: -1 (each iteration's own maximum) has no
        batched form, so the batched body raises and the loop decides."""
        if not isinstance(k, int) or k < 0:
            raise ValueError(f"one_hot with num_classes={k!r} in a batched body")
        return k

    @staticmethod
    def exact_int(v):
        """A Python int compared with a Python float: Python compares the two exactly, the batch
        in float64, which is the same comparison where every int is a float64 exactly (within
        2**53); an int past that leaves the call to the loop."""
        if isinstance(v, torch.Tensor):
            big = v.numel() and bool(((v > 2 ** 53) | (v < -2 ** 53)).any())
        else:
            big = abs(v) > 2 ** 53
        if big:
            from .runtime import GuardFailed
            e = GuardFailed("a Python int past 2**53 compared with a Python float (Python compares them exactly, "
                            "a batch in float64)", data=True)
            e.final = True      # (vmap would compare them in float64 too: the loop)
            raise e
        return v

    @staticmethod
    def against(v, other):
        """A batch of Python numbers compared with a loop-invariant value the one-time check did
        not see (`v < hi` after a false `lo <= v`), as Python compares them: ints against a float
        in float64, exactly (ints within 2**53; torch would compare an int64 tensor with a float
        in float32), floats against an int within 2**53."""
        if isinstance(other, float) and v.dtype != torch.bool and not (v.is_floating_point() or v.is_complex()):
            return _Helpers.exact_int(v).to(torch.float64)
        if type(other) is int and v.is_floating_point():
            _Helpers.exact_int(other)
        return v

    @staticmethod
    def pynum(a, b, op):
        """`a op b` of per-iteration Python numbers (batched as int64 / float64 tensors, or one
        side a constant) as Python computes it. Python raises ZeroDivisionError for a zero
        divisor (also `0.0 ** -1`), OverflowError for a float power out of range, gives a float
        for int / int (torch: the default dtype, float32) and for an int to a negative power, a
        complex number for a negative float to a fractional power, and never wraps an int: the
        values where the batch would differ leave the call to the loop, which raises or computes
        them. A float remainder takes the divisor's sign, zero included (torch's is +0.0)."""
        ta = a if isinstance(a, torch.Tensor) else _number_tensor(a, b.device)
        tb = b if isinstance(b, torch.Tensor) else _number_tensor(b, ta.device)
        ints = not ta.is_floating_point() and not ta.is_complex() and not tb.is_floating_point() \
            and not tb.is_complex()
        bad = None
        real = not ta.is_complex() and not tb.is_complex()
        fa, fb = (ta.to(torch.float64), tb.to(torch.float64)) if real and (
            op in ("pow", "mul", "lshift") or ints and op in ("add", "sub")) else (None, None)
        if op in ("div", "floordiv", "mod"):
            bad = tb == 0
            if ints and op == "floordiv":
                bad = bad | (ta == -(1 << 63)) & (tb == -1)     # (-2**63 // -1: past int64)
        elif op in ("lshift", "rshift"):
            bad = tb < 0                                   # (ValueError: negative shift count)
        elif op == "pow":
            if ints:
                bad = tb < 0
            elif real:
                finite = torch.isfinite(fa) & torch.isfinite(fb)
                bad = (fa == 0) & (fb < 0) | (fa < 0) & (fb != torch.floor(fb)) & finite
                # (-inf) ** 0.5 is inf in Python, 0.0 to a negative power; torch gives NaN
                bad = bad | torch.isneginf(fa) & (fb != torch.floor(fb))
        if ints and op in ("mul", "pow", "lshift", "add", "sub") or op == "pow" and not ints and real:
            # the size of the result, in float64: an int beyond int64 (Python's ints do not
            # wrap) or a float power out of range (OverflowError)
            big = (fa * torch.exp2(fb) if op == "lshift" else _OUT_OF_PLACE[op](fa, fb)).abs()
            over = big >= 2.0 ** 62 if ints else torch.isinf(big) & torch.isfinite(ta) & torch.isfinite(tb)
            bad = over if bad is None else bad | over
        if ints and op == "div":
            big = (ta.abs() > 2 ** 53) | (tb.abs() > 2 ** 53)     # (Python divides ints exactly)
            bad = bad | big
        if bad is not None and bool(bad.any()):
            from .runtime import GuardFailed
            e = GuardFailed(f"Python-number `{op}` where Python raises or computes otherwise than the "
                            "batch (a zero divisor, a power or int out of range)", data=True)
            e.final = True
            raise e
        if op == "div":
            # (tensor / tensor: a Python number over a tensor is torch's reciprocal times the
            # number, which rounds otherwise than Python's division: 10 / 3.0)
            return (ta.to(torch.float64) / tb.to(torch.float64)) if ints else ta / tb
        if op == "floordiv":
            return a // b
        if op == "mod":
            if ints:
                return a % b
            # (a float remainder by Python itself: torch's remainder and fmod, vectorized, divide
            # first and give NaN where a / b overflows: -1e308 % -0.1, probeH)
            return _py_map("%", operator.mod, a, b)
        if op == "lshift":
            return a << b
        if op == "rshift":
            return a >> b        # (torch's shift by 64 or more gives 0 or -1, as Python's)
        if op == "pow" and real and not ints:
            # (a float power: the C library's pow, as Python calls it; torch's differs in the last
            # bit, `v ** 2` included)
            return _py_map("pow", operator.pow, a, b)
        return _OUT_OF_PLACE[op](a, b)

    @staticmethod
    def truth(c):
        return c if c.dtype == torch.bool else c != 0

    @staticmethod
    def contains(eq, lead, negate):
        """`v in t` per iteration from the batch of `v == t`: any element equal, over each
        iteration's own dimensions (`not in`: none)."""
        hit = eq.flatten(lead).any(-1) if eq.dim() > lead else eq
        return torch.logical_not(hit) if negate else hit

    @staticmethod
    def land(a, b):
        return torch.logical_and(torch.as_tensor(a), torch.as_tensor(b))

    @staticmethod
    def lor(a, b):
        return torch.logical_or(torch.as_tensor(a), torch.as_tensor(b))

    @staticmethod
    def bcast(v, sizes):
        """A value the same in every iteration, as a batch (what vmap returns for it)."""
        t = v if isinstance(v, torch.Tensor) else _as_tensor(v)
        return t.expand(*sizes, *t.shape)

    @staticmethod
    def full(v, sizes):
        """A loop nest's value over every level (size 1 where it does not vary)."""
        return v.expand(*sizes, *v.shape[len(sizes):])

    @staticmethod
    def extreme(x, dims, is_max):
        """x.max() / x.min() of every row (over `dims`), with their gradient. A row whose extreme
        is zero and that holds both +0.0 and -0.0 has no one answer: which zero a reduction
        keeps depends on its order of comparisons, and torch's own kernels differ there
        (`x[i].max()` over a row can give -0.0 where `x.amax(1)` gives +0.0), so the loop runs."""
        if torch.is_grad_enabled() and x.requires_grad:
            out = _EvenExtreme.apply(x, dims, is_max)
        else:
            out = x.amax(dims) if is_max else x.amin(dims)
        if out.is_floating_point() and bool((out == 0).any()):
            z = x == 0
            if bool((z & torch.signbit(x)).any()) and bool((z & ~torch.signbit(x)).any()):
                raise _values_refused("+0.0 and -0.0 in a row's max() / min() (which zero it gives depends on "
                                      "the order of comparisons, and torch's kernels differ there)")
        return out


# layers that act on the trailing dimensions of their input alone, whatever leads them
_TRAILING_LAYERS = tuple(getattr(torch.nn, n) for n in (
    "Linear", "LayerNorm", "RMSNorm", "Identity", "ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid",
    "LeakyReLU", "ELU", "SELU", "CELU", "Softplus", "Softsign", "Mish", "Hardswish", "Hardsigmoid",
    "Hardtanh", "Tanhshrink", "LogSigmoid") if hasattr(torch.nn, n))
_ELEMENTWISE_LAYERS = _TRAILING_LAYERS[3:]          # any rank, even 1
_DROPOUT_LAYERS = tuple(getattr(torch.nn, n) for n in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
                                                       "AlphaDropout") if hasattr(torch.nn, n))
# layers that need their input's first dimension to be a batch of N-d samples: N per class
_SAMPLE_LAYERS = {getattr(torch.nn, f"{kind}{n}d"): n for n in (1, 2, 3) for kind in (
    "Conv", "MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool", "BatchNorm")}


def _normalized_dims(mod):
    """How many trailing dimensions a LayerNorm / RMSNorm normalizes over (0 for other layers)."""
    shape = getattr(mod, "normalized_shape", None)
    return len(shape) if shape is not None else 0


def _own_forward(mod) -> bool:
    """Whether the module runs its torch.nn class's own forward: not one replaced on the instance
    or, by a patch, on the class (which may treat the rows otherwise)."""
    return "forward" not in mod.__dict__ and pins.torch_forward(type(mod))


def _trailing_only(mod, rank: int) -> bool:
    """Whether `mod` on a rank-`rank` input reads and writes only dimensions a leading batch
    dimension would not shift: the same call on the batch is every iteration's call."""
    if not _own_forward(mod):
        return False
    tp = type(mod)      # exact types: a subclass may have its own forward
    if tp in _TRAILING_LAYERS:
        return _normalized_dims(mod) <= rank    # more: the loop raises, the batch might not
    if tp in _DROPOUT_LAYERS:
        return not mod.training
    if tp in (torch.nn.Softmax, torch.nn.LogSoftmax):
        return mod.dim is not None and -rank <= mod.dim < 0
    if tp is torch.nn.Sequential:
        return all(_trailing_only(m, rank) for m in mod)    # these layers keep the rank
    return False


def _rows_rank(mod, k: int):
    """The output rank when `mod` maps the rows of its rank-`k` input's first dimension
    independently (each row's output is the module's output for that row alone), else None."""
    if not _own_forward(mod):
        return None
    tp = type(mod)
    if tp is torch.nn.Sequential:
        for m in mod:
            k = _rows_rank(m, k)
            if k is None:
                return None
        return k
    if tp in _ELEMENTWISE_LAYERS or tp in _DROPOUT_LAYERS and not mod.training:
        return k if k >= 1 else None
    if tp in _TRAILING_LAYERS:
        # on a 1-d input, dimension 0 is the features; a norm must not reach the rows
        return k if k >= 2 and _normalized_dims(mod) < k else None
    if tp in (torch.nn.Softmax, torch.nn.LogSoftmax):
        return k if mod.dim is not None and k >= 2 and (mod.dim < 0 or 1 <= mod.dim < k) else None
    if tp is torch.nn.Flatten:
        s, e = mod.start_dim % k if k else 0, mod.end_dim % k if k else 0
        return k - (e - s) if k >= 2 and 1 <= s <= e else None
    n = _SAMPLE_LAYERS.get(tp)
    if n is not None and k == n + 2:
        if tp.__name__.startswith("BatchNorm") and (mod.training or not mod.track_running_stats
                                                     or mod.running_mean is None):
            return None     # statistics of the batch it is given: not row by row
        if getattr(mod, "return_indices", False):
            return None
        return k
    return None


def module_form(mod, rank: int):
    """How a batch of per-iteration inputs of rank `rank` goes through `mod` in one call:
    "prepend" (the module works on trailing dimensions: the batch as it is), "merge" (the
    batch dimensions merged into the input's first, which the module treats row by row), or
    None. Hooks and training-mode layers with effects are the purity check's to refuse. Kept
    per rank while the module's stamp holds (pins.stamped)."""
    known = pins.stamped(mod)
    if known is not None:
        hit = known.get(("form", rank), pins._MISS)
        if hit is not pins._MISS:
            return hit
    form = None
    if rank >= 1 and _trailing_only(mod, rank):
        form = "prepend"
    elif rank >= 1 and _rows_rank(mod, rank) is not None:
        form = "merge"
    if known is not None:
        known[("form", rank)] = form
    return form


_SPAN_GROUPS = 64              # distinct spans reduced one group at a time, at most
_SPAN_GROUPS_FLOOR = 1 << 16   # elements: smaller batches take the mask (fewer operations)


def _span_groups(kind, b, start, stop, first):
    """b_k[start_k:stop_k].sum() / .mean() (over the span alone with `first`) for every
    iteration, one reduction per distinct span: the iterations with the same span gathered,
    the span sliced and reduced over exactly its rows, as one iteration's is, and the results
    put back in the iterations' order. The masked form (a where over every position, then a
    sum) costs a pass over all of `b` in torch's slow `where`: masked mean pooling of 20,000
    sequences of 16 x 32 took 36 ms there, against 5 ms by hand. None where there are more
    than _SPAN_GROUPS distinct spans (the masked form)."""
    t = b.shape[1]
    s = start.clamp(0, t)
    e = torch.maximum(stop.clamp(0, t), s)      # (Python's slice rules: clipped, empty where stop <= start)
    uniq, inv = torch.unique(s * (t + 1) + e, return_inverse=True)
    if uniq.numel() > _SPAN_GROUPS:
        return None
    pieces, order = [], []
    for g, key in enumerate(uniq.tolist()):
        lo, hi = divmod(key, t + 1)
        idx = (inv == g).nonzero().squeeze(1)
        sel = b.narrow(1, lo, hi - lo).index_select(0, idx)
        dims = (1,) if first else tuple(range(1, sel.dim()))
        pieces.append(sel.sum(dims) if kind == "sum" else sel.mean(dims))
        order.append(idx)
    perm = torch.cat(order)
    back = torch.empty_like(perm)
    back[perm] = torch.arange(perm.numel(), device=perm.device)
    return torch.cat(pieces).index_select(0, back)


class _EvenExtreme(torch.autograd.Function):
    """Per row, the gradient of a full max()/min(): shared evenly by the elements equal to the
    result, or by the NaN elements when the result is NaN (torch's evenly_distribute_backward)."""

    @staticmethod
    def forward(ctx, x, dims, is_max):
        v = x.amax(dims) if is_max else x.amin(dims)
        ctx.save_for_backward(x, v)
        ctx.dims = dims
        return v

    @staticmethod
    def backward(ctx, g):
        x, v = ctx.saved_tensors
        shape = (*v.shape, *(1,) * len(ctx.dims))     # the reduced dimensions are the trailing ones
        value, grad = v.reshape(shape), g.reshape(shape)
        mask = torch.where(value.isnan(), x.isnan(), x == value)
        share = grad / mask.sum(ctx.dims, keepdim=True)
        return torch.where(mask, share, torch.zeros((), dtype=share.dtype, device=share.device)), None, None


def _slice_bound(b, default, size, n, device):
    """A slice bound of each of `n` rows (None, a Python int, or a tensor of them) normalized as
    Python's slice of a dimension of `size` normalizes it: from the end where negative, clamped
    to [0, size]."""
    from .runtime import GuardFailed
    if b is None:
        return torch.full((n,), default, dtype=torch.long, device=device)
    if isinstance(b, torch.Tensor):
        if b.is_floating_point() or b.is_complex() or b.dim() > 1:
            raise GuardFailed("a slice bound that is not an integer (the loop raises)")
        b = b.long().reshape(-1).to(device).expand(n)
    elif type(b) is int or type(b) is bool:
        b = torch.full((n,), int(b), dtype=torch.long, device=device)
    else:
        raise GuardFailed(f"a slice bound of type {type(b).__name__}")
    return torch.where(b < 0, (b + size).clamp(min=0), b.clamp(max=size))


def _as_tensor(v):
    """runtime._as_tensor, imported on first use (runtime imports this module), then bound here."""
    global _as_tensor
    from .runtime import _as_tensor
    return _as_tensor(v)


_HELPER_CELLS = {"_avb": types.CellType(_Helpers), "_avb_torch": types.CellType(torch)}


class BatchedBody:
    """A compiled batched body for one signature, bound to each call's closure cells."""

    def __init__(self, code: types.CodeType, body_code: types.CodeType, cells=None):
        self.code = code
        names = body_code.co_freevars
        extra = {**_HELPER_CELLS, **(cells or {})}
        self.picks = tuple(names.index(v) if v in names else extra[v] for v in code.co_freevars)
        # the body's own closure as it is (no tuple to build), or no per-call cells at all (one
        # function for every call)
        self.same = bool(names) and self.picks == tuple(range(len(names)))
        self.fixed = not any(type(p) is int for p in self.picks)
        self._fn = None

    checks = ()    # what inlined helpers must still be (see _Inliner)
    source = ""
    big = None     # the same body with elementwise temporaries reused in place (large batches)
    lean = None    # the same body returning None for its trailing check-only masks (without_probes)
    probes = 0     # how many trailing values are check-only masks
    branched = False   # an inlined helper's branches are `where` of both sides (_Inliner)

    def bind(self, body):
        if self.checks and not _still_same(self.checks, body):
            raise _Stale("a helper the batched body inlined has changed")
        if self.fixed:
            fn = self._fn
            if fn is None or fn.__globals__ is not body.__globals__:
                fn = self._fn = types.FunctionType(self.code, body.__globals__, self.code.co_name, None,
                                                   self.picks or None)
            return fn
        if self.same:
            closure = body.__closure__
        else:
            cells = body.__closure__ or ()
            closure = tuple(cells[p] if type(p) is int else p for p in self.picks)
        return types.FunctionType(self.code, body.__globals__, self.code.co_name, None, closure or None)


def _compile(fdef: ast.FunctionDef, body, extra=()) -> types.CodeType:
    """Code of `fdef` as a closure over the body's free variables (and the helpers)."""
    free = list(body.__code__.co_freevars) + [v for v in (*_HELPER_CELLS, *extra) if v not in body.__code__.co_freevars]
    line = body.__code__.co_firstlineno
    fdef = fastast.clone(fdef)       # (the caller's tree keeps its positions: nodes are known by them)
    for node in fastast.walk(fdef):
        if "lineno" in node._attributes:
            # (a body parsed on its own counts lines from 1: its lines are the loop's, so that a
            # warning torch raises in it names the user's file at the loop, not at its line 1)
            node.lineno = node.end_lineno = line
            node.col_offset = node.end_col_offset = 0      # (a valid range on one line)
    factory = ast.FunctionDef(
        name="_av_factory", args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=v) for v in free], vararg=None,
                                               kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))], decorator_list=[], returns=None,
        type_params=[], lineno=fdef.lineno, col_offset=0, end_lineno=fdef.lineno, end_col_offset=0)
    if not hasattr(ast.FunctionDef, "type_params"):
        del factory.type_params
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    code = compile(module, body.__code__.co_filename, "exec", dont_inherit=True)
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fdef.name)


def _resolver(body, extra=None):
    """Dotted names as the body sees them (its closure, globals, builtins), or in `extra` cells."""
    def resolve(text: str):
        head, *rest = text.split(".")
        if extra and head in extra:
            return _resolve_in_cells(extra, text)
        found, obj = scope_lookup(body, head)
        return attr_chain(obj, rest) if found else (False, None)
    return resolve


# ----------------------------------------------------------------------------- helpers inlined

class _Stale(Exception):
    """A helper the batched body inlined is no longer what the loop calls."""


class _Inliner:
    """Inline calls of side-effect-free user helpers (straight-line: assignments, then one
    `return`) into the body, so the batched rewrite sees their operations. A helper's own free
    names (its module's `torch`, a constant) become closure cells holding what they named when
    the batched body was written; every call checks that the loop still calls the same helper
    code and that those names still name the same objects (else the body is written again).

    With `branches` (a loop whose plan branches on per-iteration data, so its guards keep
    the loop where gradients are required), also helpers whose `if`s only pick what they
    return (analysis.helpers.returned_expression), and their conditional expressions become
    `where` on both values, as ifconvert does for the loop's own (`av`: the runtime's name):

        def f(r):                         _avh1_r = row
            if r.sum() > 0:        ->     _avh1_return = _av.where(_av.truth(_avh1_r.sum() > 0),
                return r * 2                                       _avh1_r * 2, -_avh1_r, True)
            return -r
    """

    def __init__(self, resolve, local, av=None, branches=False):
        self.resolve, self.local = resolve, set(local)
        self.av, self.branches = av, branches and av is not None
        self.cells: dict = {}       # injected name -> cell
        self.checks: list = []      # (callee text, function, code) and (function, name, object)
        self.count = 0
        self.branched = False       # a helper's branches became `where` (no body for kept rows alone)

    def run(self, fdef: ast.FunctionDef) -> ast.FunctionDef:
        fdef = fastast.clone(fdef)
        fdef.body = self.block(fdef.body, depth=0)
        ast.fix_missing_locations(fdef)
        return fdef

    def block(self, stmts, depth, lookup=None):
        out = []
        for s in stmts:
            pre = []
            s = self.stmt(s, pre, depth, lookup)
            out += pre + [s]
            if isinstance(s, ast.Assign):
                for t in s.targets:
                    self.local |= {n.id for n in fastast.walk(t) if isinstance(n, ast.Name)}
        return out

    def stmt(self, s, pre, depth, lookup):
        inliner = self

        class Calls(ast.NodeTransformer):
            def visit_Lambda(self, node):
                return node          # a nested scope: left alone (the rewrite refuses it)
            visit_ListComp = visit_GeneratorExp = visit_SetComp = visit_DictComp = visit_Lambda

            def visit_Call(self, node):
                node = self.generic_visit(node)
                got = inliner.call(node, pre, depth, lookup)
                return got if got is not None else node
        return Calls().visit(s)

    def call(self, node, pre, depth, lookup):
        if depth > 3 or any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return None
        f = node.func
        try:
            text = ast.unparse(f)
        except Exception:
            return None
        root = text.split(".")[0]
        if not all(p.isidentifier() for p in text.split(".")):
            return None
        if root in self.cells:        # a helper's free name (checked on every call)
            found, obj = _resolve_in_cells(self.cells, text)
        elif lookup is None and root not in self.local:
            found, obj = self.resolve(text)
        else:
            return None
        if not found:
            return None
        receiver = None
        if isinstance(obj, types.MethodType) and isinstance(obj.__func__, types.FunctionType) and isinstance(f, ast.Attribute):
            receiver, fn = f.value, obj.__func__
        elif isinstance(obj, types.FunctionType):
            fn = obj
        else:
            return None
        if (fn.__module__ or "").startswith(("torch", "autovec")) or fn.__code__.co_flags & (
                inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_GENERATOR | inspect.CO_COROUTINE
                | inspect.CO_ASYNC_GENERATOR):
            return None
        from .purity import NoSource, _capture_cached
        try:
            cap = _capture_cached(fn)
        except NoSource:
            return None
        tree = cap.tree
        a = tree.args
        if a.posonlyargs or a.kwonlyargs or a.vararg or a.kwarg:
            return None
        form = returned_expression(tree)
        if form is None or form[2] and not self.branches:
            return None
        stmts = form[0] + [ast.copy_location(ast.Return(value=form[1]), form[1])]
        params = [p.arg for p in a.args]
        given = ([receiver] if receiver is not None else []) + list(node.args)
        if len(given) > len(params):
            return None
        bound = dict(zip(params, given))
        for k in node.keywords:
            if k.arg not in params or k.arg in bound:
                return None
            bound[k.arg] = k.value
        defaults = dict(zip(params[len(params) - len(fn.__defaults__ or ()):], fn.__defaults__ or ()))
        self.count += 1
        tag = f"_avh{self.count}_"
        rename = {}
        for p in params:
            if p in bound:
                value = bound[p]
            elif p in defaults and isinstance(defaults[p], (int, float, bool, complex, str, type(None))):
                value = ast.Constant(defaults[p])
            else:
                return None
            rename[p] = tag + p
            pre.append(ast.Assign(targets=[ast.Name(id=tag + p, ctx=ast.Store())], value=value))
        assigned = {t.id for s in stmts[:-1] for t in s.targets}
        for n in assigned:
            rename.setdefault(n, tag + n)
        # the helper's free names: cells with what they name now, checked on every call
        for n in {x.id for s in stmts for x in fastast.walk(s) if isinstance(x, ast.Name)} - set(rename):
            found, value = cap.lookup(n)
            if not found:
                return None
            rename[n] = tag + n
            self.cells[tag + n] = types.CellType(value)
            self.checks.append((fn, n, value))
        self.checks.append((text if lookup is None else None, fn, fn.__code__))
        renamer = _Rename(rename)
        inner = [renamer.visit(fastast.clone(s)) for s in stmts]
        if self.branches and any(isinstance(n, ast.IfExp) for s in inner for n in fastast.walk(s)):
            self.branched = True
            inner = [_Wheres(self.av).visit(s) for s in inner]
            if self.av not in self.cells:
                # (a body with no `where` of its own does not close over the runtime: its
                # class's helpers, for the one-row probe; the batched body calls torch's)
                from .runtime import FunctionRuntime
                self.cells[self.av] = types.CellType(FunctionRuntime)
        inner = self.block(inner[:-1] + [inner[-1]], depth + 1, lookup=cap)
        ret = inner.pop()
        pre += inner
        result = tag + "return"
        pre.append(ast.Assign(targets=[ast.Name(id=result, ctx=ast.Store())], value=ret.value))
        return ast.copy_location(ast.Name(id=result, ctx=ast.Load()), node)


class _Wheres(ast.NodeTransformer):
    """`a if c else b` as `av.where(av.truth(c), a, b, True)` (lowering.ifconvert): both values
    are computed, and they must be of one type, dtype and shape; nested scopes are left alone."""

    def __init__(self, av):
        self.av = av

    def visit_Lambda(self, node):
        return node
    visit_ListComp = visit_GeneratorExp = visit_SetComp = visit_DictComp = visit_Lambda

    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        from .lowering.ifconvert import _call, _truth
        return ast.copy_location(_call(self.av, "where", [_truth(self.av, node.test), node.body, node.orelse,
                                                           ast.Constant(True)]), node)


def _resolve_in_cells(cells, text):
    head, *rest = text.split(".")
    return attr_chain(cells[head].cell_contents, rest)


class _Rename(ast.NodeTransformer):
    def __init__(self, names):
        self.names = names

    def visit_Name(self, node):
        new = self.names.get(node.id)
        return ast.copy_location(ast.Name(id=new, ctx=node.ctx), node) if new else node


def _still_same(checks, body) -> bool:
    """The inlined helpers are still what the loop calls, with the same free names."""
    if not checks:
        return True
    resolve = None
    for a, b, c in checks:
        if isinstance(a, types.FunctionType):          # (helper, free name, object)
            found, value = scope_lookup(a, b)
            if not found or value is not c:
                return False
        else:                                          # (callee text, helper, code)
            if a is not None:
                resolve = resolve or _resolver(body)
                found, obj = resolve(a)
                obj = getattr(obj, "__func__", obj)
                if not found or obj is not b:
                    return False
            if b.__code__ is not c:
                return False
    return True


class _Why(str):
    """Why there is no batched body; `sides`: one iteration refused a `where` of sides that differ
    in kind (runtime._sides_differ), which each side's body on its own rows may still run."""
    sides = False


def build(fdef: ast.FunctionDef, av: str, body, row_args_at, batch_args, sizes: list,
          index: str | None = None, branches: bool = False, masks=None) -> BatchedBody | str:
    """_build; where it finds no batched form and the body names a selection (`v = x[i][m[i]]`,
    then `v.sum() / v.numel()`), _build again with each such name's uses reading the selection
    itself (_selections_inlined), which the masked reductions batch."""
    out = _build(fdef, av, body, row_args_at, batch_args, sizes, index, branches, masks)
    if isinstance(out, str):
        inlined = _selections_inlined(fdef)
        if inlined is not None:
            again = _build(inlined, av, body, row_args_at, batch_args, sizes, index, branches, masks)
            if not isinstance(again, str):
                return again
    return out


def _selections_inlined(fdef: ast.FunctionDef) -> ast.FunctionDef | None:
    """`v = a[b]` (one subscript by a single index, which may be a boolean mask, or a span:
    _span_slice) with each read of `v` replaced by `a[b]` itself, or None where nothing changes. Only where that reads the
    same values: a body of plain assignments to names (no store into a subscript or an
    attribute, no in-place update or method, no `out=`: nothing changes a tensor after it is
    read), `v` and every name `a[b]` reads bound once, `v` read at least once and never called
    or written through. The selection's copy is made at each read instead of once."""
    stmts = []
    for st in fdef.body:
        if isinstance(st, ast.Pass):
            continue
        t = st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 else None
        if isinstance(t, ast.Tuple) and isinstance(st.value, ast.Tuple) and len(t.elts) == len(st.value.elts) \
                and all(isinstance(e, ast.Name) for e in t.elts) \
                and not {e.id for e in t.elts} & {n.id for n in fastast.walk(st.value) if isinstance(n, ast.Name)}:
            # `pos, neg = a[m], a[~m]`: one assignment each (no value reads a name the others bind)
            stmts += [ast.copy_location(ast.Assign(targets=[e], value=v), st) for e, v in zip(t.elts, st.value.elts)]
            continue
        stmts.append(st)
    if not stmts or not all(isinstance(st, (ast.Assign, ast.Return)) for st in stmts):
        return None
    if not all(isinstance(t, ast.Name) for st in stmts if isinstance(st, ast.Assign) for t in st.targets):
        return None
    from .analysis.names import in_place_keyword
    for n in fastast.walk(fdef):
        if isinstance(n, ast.Call) and (isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_")
                                        and not n.func.attr.endswith("__") or in_place_keyword(n)):
            return None     # (`F.dropout(v, inplace=True)`, `out=`: a write into what it reads)
        if isinstance(n, (ast.NamedExpr, ast.Lambda, ast.AugAssign)):
            return None
    bound: dict = {a.arg: 1 for a in fdef.args.args}
    for st in stmts:
        if isinstance(st, ast.Assign):
            for t in st.targets:
                bound[t.id] = bound.get(t.id, 0) + 1
    picks = {}
    for st in stmts:
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1):
            continue
        name, v = st.targets[0].id, st.value
        if not (isinstance(v, ast.Subscript) and (not isinstance(v.slice, (ast.Tuple, ast.Slice, ast.Constant))
                                                  or _span_slice(v.slice))):
            continue
        reads = {n.id for n in fastast.walk(v) if isinstance(n, ast.Name)}
        if bound.get(name) != 1 or any(bound.get(r, 0) > 1 for r in reads) or name in reads:
            continue
        picks[name] = st
    if not picks:
        return None
    uses = {name: 0 for name in picks}
    for n in fastast.walk(fdef):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in uses:
            uses[n.id] += 1
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in uses:
            return None
    picks = {name: st for name, st in picks.items() if uses[name]}
    if not picks:
        return None
    new = fastast.clone(fdef)
    new.body = fastast.clone(stmts)
    body = []
    values = {}
    for st in new.body:
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and st.targets[0].id in picks \
                and len(st.targets) == 1:
            values[st.targets[0].id] = _Selections(values).visit(st.value)
            continue
        body.append(_Selections(values).visit(st))
    new.body = body
    return ast.fix_missing_locations(new)


def _span_slice(sl) -> bool:
    """`lo:hi` or `i, lo:hi`: a span (`seq = h[i, :n]`), which the batched body reduces where it
    is read as itself (`seq.mean(0)` as `h[i, :n].mean(0)`)."""
    if isinstance(sl, ast.Tuple) and len(sl.elts) == 2 and isinstance(sl.elts[0], ast.Name):
        sl = sl.elts[1]
    return isinstance(sl, ast.Slice) and sl.step is None


class _Selections(ast.NodeTransformer):
    """Each read of a name in `values` as a copy of its value (_selections_inlined)."""

    def __init__(self, values):
        self.values = values

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return ast.copy_location(fastast.clone(self.values[node.id]), node)
        return node


def _build(fdef: ast.FunctionDef, av: str, body, row_args_at, batch_args, sizes: list,
           index: str | None = None, branches: bool = False, masks=None) -> BatchedBody | str:
    """The batched body of `fdef` for this signature, or the reason there is none.
    `index`: the parameter that is the loop's own index (an arange), if the body takes it.
    `row_args_at(j)`: the body's arguments on iteration j (flat over a nest's levels);
    `batch_args`: the batched arguments (one dimension per loop level in front, size 1 where a
    value does not vary over that level); `sizes`: the trip count of each level. `branches`:
    the loop's plan branches on per-iteration data (_Inliner)."""
    facts: dict = {}

    def record(k, v):
        if k not in facts:
            facts[k] = fact_of(v)
        return v
    inliner = _Inliner(_resolver(body), [a.arg for a in fdef.args.args] + [av], av, branches)
    try:
        fdef = inliner.run(fdef)
    except Exception as e:   # an inliner bug must only cost the batched form
        return f"inlining a helper failed: {type(e).__name__}: {e}"
    helpers = inliner.cells
    probe, _ = probe_def(fdef, fdef.name + "_probe", av)
    try:
        fn = BatchedBody(_compile(probe, body, ("_avp", *helpers)), body.__code__,
                         {"_avp": types.CellType(record), **helpers})
        with torch.no_grad():
            fn.bind(body)(*row_args_at(0))
    except Exception as e:
        why = _Why(f"one iteration of the body raised {type(e).__name__}: {e}")
        why.sides = getattr(e, "sides", False)
        return why
    params = [a.arg for a in fdef.args.args]
    ids = number_nodes(fdef)
    resolve = _resolver(body, helpers)
    lead = len(sizes)
    try:
        fast = batched_def(fdef, facts, ids, params, av, resolve, fdef.name + "_batched", lead=lead, index=index)
        seen: dict = {}
        exempt: set = set()
        checked = batched_def(fdef, facts, ids, params, av, resolve, fdef.name + "_batched_probe", probe=True,
                              batched_nodes=seen, lead=lead, exempt_nodes=exempt, index=index)
    except Unsupported as e:
        return str(e)
    # two rows of every level: each intermediate value must be one iteration's, batch in front,
    # and every output must equal the loop body's on each of those iterations
    rows = tuple(min(k, 2) for k in sizes)
    got: dict = {}

    def record2(k, v):
        if k not in got:
            got[k] = fact_of(v)
        return v
    try:
        check = BatchedBody(_compile(checked, body, ("_avp", *helpers)), body.__code__,
                            {"_avp": types.CellType(record2), **helpers})
        few = []
        for a in batch_args:
            for lv, r in enumerate(rows):
                if a.shape[lv] != 1:
                    a = a.narrow(lv, 0, r)
            few.append(a)
        with torch.no_grad():
            outs = check.bind(body)(*few, list(rows))
    except Exception as e:
        from .runtime import GuardFailed
        if isinstance(e, GuardFailed) and e.data:
            raise      # these values (pynum: a zero divisor ..) leave this call alone to the loop
        return f"the batched body raised {type(e).__name__}: {e}"
    nodes = {k: node for node in fastast.walk(fdef) for k in [ids.get(id(node))] if k is not None}
    for k, batched in seen.items():
        if k in exempt:
            continue         # checked through the outputs below
        if k in facts and k in got and not agrees(facts[k], got[k], batched, rows):
            one, many = facts[k], got[k]
            return (f"`{ast.unparse(nodes[k])}` would be {many.dtype or many.kind} of shape {list(many.shape)} "
                    f"for {list(rows)} rows, where one iteration gives {one.dtype or one.kind} of shape "
                    f"{list(one.shape)}")
    # (against the probe: the loop's own `.item()` numbers, where `body` has 0-d float64 tensors)
    ret = next((n for n in fdef.body if isinstance(n, ast.Return)), None)
    spread = {k for k, e in enumerate(ret.value.elts if ret is not None and isinstance(ret.value, ast.Tuple) else ())
              if ids.get(id(e)) in exempt}     # stored branch values: a number fills its row
    bad = _outputs_differ(outs, rows, sizes, row_args_at, fn.bind(body), spread, masks)
    if bad:
        return bad
    probes = getattr(fdef, "probes", 0)
    fast = _single_uses_inlined(fast)

    def made(f):
        """The body `f` compiled, with its variant for large batches (`big`: elementwise
        temporaries reused in place, Token._batched). A rebound loop-invariant name (`act =
        torch.softmax` after `act = torch.relu`) is another signature: non-tensor values enter it
        by identity; a helper's own names do not, so they are checked on every call."""
        code = BatchedBody(_compile(f, body, tuple(helpers)), body.__code__, helpers)
        code.checks = inliner.checks
        code.branched = inliner.branched
        big = temporaries_in_place(f)
        if big is not None:
            code.big = BatchedBody(_compile(big, body, tuple(helpers)), body.__code__, helpers)
            code.big.checks = inliner.checks
        return code
    out = made(fast)
    lean = without_probes(fast, probes)
    if lean is not None:     # the steady state's variant: no check-only branch masks (runtime._hot_batched)
        out.lean = made(lean)
        out.probes = probes
    out.source = _readable(ast.unparse(fast))
    return out


_MASK_CALLS = frozenset({"logical_not", "logical_and", "logical_or", "truth", "land", "lor", "lnot"})


def _mask_only(node) -> bool:
    """An expression that only combines masks (names, constants, comparisons, logical_*): it
    cannot raise once its operands exist, so leaving it out changes nothing but its cost."""
    for n in fastast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if not (isinstance(f, ast.Attribute) and f.attr in _MASK_CALLS) or n.keywords:
                return False
        elif not isinstance(n, (ast.Name, ast.Constant, ast.Attribute, ast.Load, ast.UnaryOp, ast.Not,
                                ast.Invert, ast.expr_context, ast.Compare, ast.cmpop, ast.BoolOp,
                                ast.boolop)):
            return False
    return True


def without_probes(fdef: ast.FunctionDef, probes: int) -> ast.FunctionDef | None:
    """The batched body with its `probes` trailing check-only masks (lowering/common.body_function:
    where each branch runs, read only by the one-time check) returned as None, and the mask
    computations nothing else reads left out (`_av_nc = torch.logical_not(_av_c)`); None when
    there are none or the body is not straight-line assignments."""
    if not probes or not fdef.body or not isinstance(fdef.body[-1], ast.Return) \
            or not isinstance(fdef.body[-1].value, ast.Tuple) or len(fdef.body[-1].value.elts) < probes:
        return None
    stmts = fdef.body[:-1]
    if not all(isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
               for st in stmts):
        return None
    elts = fdef.body[-1].value.elts[:-probes] + [ast.Constant(None)] * probes
    ret = ast.Return(value=ast.Tuple(elts=elts, ctx=ast.Load()))
    used = {n.id for e in elts for n in fastast.walk(e) if isinstance(n, ast.Name)}
    kept = []
    for st in reversed(stmts):
        name = st.targets[0].id
        if name not in used and _mask_only(st.value):
            continue
        used.discard(name)
        used |= {n.id for n in fastast.walk(st.value) if isinstance(n, ast.Name)}
        kept.append(st)
    new = copy.copy(fdef)
    new.body = kept[::-1] + [ret]
    return ast.fix_missing_locations(new)


def _single_uses_inlined(fdef: ast.FunctionDef) -> ast.FunctionDef:
    """`t = a - b; u = t * c` as `u = (a - b) * c`, where `t` is assigned once and read once, by
    the next statement, before that statement computes anything else: the same operations in
    the same order, but each whole-batch temporary is freed as soon as the next operation has
    read it, as in hand-written expressions (a named temporary stays alive to the end of the
    body, and batch-sized tensors that stay alive cost memory and page faults)."""
    stmts = fdef.body
    if not stmts or not isinstance(stmts[-1], ast.Return) or not all(
            isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
            for st in stmts[:-1]):
        return fdef
    stores: dict = {}
    for st in stmts[:-1]:
        stores[st.targets[0].id] = stores.get(st.targets[0].id, 0) + 1
    loads: dict = {}
    for n in fastast.walk(fdef):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            loads[n.id] = loads.get(n.id, 0) + 1
    out = [stmts[0]]
    for st in stmts[1:]:
        prev = out[-1]
        if isinstance(prev, ast.Assign):
            name = prev.targets[0].id
            if stores[name] == 1 and loads.get(name) == 1 and _read_first(st.value, name):
                st = _Replace(name, prev.value).visit(st)
                out[-1] = st
                continue
        out.append(st)
    if len(out) == len(stmts):
        return fdef
    new = copy.copy(fdef)
    new.body = out
    return ast.fix_missing_locations(new)


_OPS = (ast.BinOp, ast.UnaryOp, ast.Call, ast.Subscript, ast.Compare, ast.BoolOp)


def _read_first(node, name) -> bool:
    """Whether evaluating `node` reads `name` before any operation completes (and reads it once,
    outside anything evaluated lazily or repeatedly)."""
    state = {"op": False, "hit": False}

    def walk(n):
        if isinstance(n, (ast.Lambda, ast.IfExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                          ast.BoolOp, ast.NamedExpr)):
            if any(isinstance(m, ast.Name) and m.id == name for m in fastast.walk(n)):
                return False
            state["op"] = True
            return True
        if isinstance(n, ast.Name):
            if n.id == name:
                state["hit"] = not state["op"]
                return state["hit"]
            return True
        for child in ast.iter_child_nodes(n):   # field order is evaluation order for these nodes
            if not walk(child):
                return False
            if state["hit"]:
                return True
        if isinstance(n, _OPS):
            state["op"] = True
        return True
    return walk(node) and state["hit"]


class _Replace(ast.NodeTransformer):
    def __init__(self, name, value):
        self.name, self.value = name, value

    def visit_Name(self, node):
        return self.value if isinstance(node.ctx, ast.Load) and node.id == self.name else node


def _readable(text: str) -> str:
    """The batched body as explain shows it: torch's own names for the helpers' one-liners."""
    import re
    text = text.replace("_avb_torch.", "torch.").replace(", _avb_n):", "):")
    text = re.sub(r"_avb\.(truth|classes)\(", "(", text)
    # (`_avb.prod_input(a - b).prod(1)` shows as `(a - b).prod(1)`: the call's parentheses group
    # its argument, which a bare `a - b.prod(1)` would not; probeU)
    text = re.sub(r"_avb\.prod_input\(([^()]*)\)",
                  lambda m: m.group(1) if re.fullmatch(r"[\w.]+(\[[^\[\]]*\])?", m.group(1)) else f"({m.group(1)})",
                  text)
    text = text.replace("_avb.masked(", "_masked_reduction(").replace("_avb.segment(", "_segment_reduction(").replace("_avb.window(", "_window_per_row(").replace("_avb.window_at(", "_window_at_index(").replace("_avb.window_nd(", "_windows_per_level(").replace("_avb.take(", "_take_per_row(").replace("_avb.bcast(", "_same_in_every_row(")
    text = text.replace("_avb.full(", "_expand_to_levels(").replace("_avb.extreme(", "_max_or_min_per_row(")
    text = text.replace("_avb.pick(True, ", "_python_max(").replace("_avb.pick(False, ", "_python_min(")
    text = text.replace("_avb.rows(", "_module_on_the_batch(").replace("_avb.class_loss(", "_loss_per_iteration(")
    return text.replace("_avb_n", "batch_sizes")


def _outputs_differ(outs, rows, sizes, row_args_at, body, spread=frozenset(), masks=None):
    """Each probed iteration's outputs, from the loop body itself, against the batched ones.
    `spread`: positions of stored values, where a Python number stands for a row filled with it.
    `masks`: output position -> the position of the mask that says where it happens (the layout's);
    on a probed iteration where it does not (`continue` before it, the other side of a branch) the
    value is no part of any result, and may be anything: `log_probs[t, targets[t]]` at an ignored
    target reads a stand-in index, which the batch and one iteration pick differently."""
    import itertools
    from .equivalence import compare
    for pos in itertools.product(*[range(r) for r in rows]):
        j = 0
        for p, k in zip(pos, sizes):
            j = j * k + p
        with torch.no_grad():
            want = body(*row_args_at(j))
        for k, (w, o) in enumerate(zip(want, outs)):
            if not isinstance(o, torch.Tensor):
                from .runtime import _type_name
                return f"output {k} is a {_type_name(o)} in the batch, not one tensor"
            m = masks.get(k) if masks else None
            if m is not None and m < len(outs) and m < len(want) and isinstance(outs[m], torch.Tensor):
                # (the mask itself is compared as an output of its own: where the batch's and one
                # iteration's agree that the value does not happen, it is not compared)
                mb, mw = outs[m][pos], want[m]
                if mb.dim() == 0 and not bool(mb) and (isinstance(mw, torch.Tensor) and mw.dim() == 0
                                                       or isinstance(mw, (bool, int))) and not bool(mw):
                    continue
            got = o[pos]
            if not isinstance(w, torch.Tensor):
                if got.dim() != 0 and not (k in spread and isinstance(w, (bool, int, float))):
                    return f"output {k} is a number in one iteration and a tensor row in the batch"
                w = torch.full(got.shape, w, dtype=got.dtype, device=got.device)
            diff = compare(w.detach(), got.detach(), path=f"output {k}")
            if diff:
                return f"the batched body differs from iteration {list(pos)}: {diff}"
    return None
