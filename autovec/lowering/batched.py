"""Batched bodies without vmap: a loop body rewritten into whole-batch torch operations.

vmap runs every operation of a body through a batching rule (a few microseconds each, on top
of a fixed cost per call). Most bodies an expert would vectorize by hand are elementwise
arithmetic, reductions over the slice's own dimensions, `softmax(dim=...)`, gathers and
products with loop-invariant matrices; those have a direct batched form, with the batch
dimension in front:

    def body(x_k):                         def batched(x_k, _avb_n):
        s = torch.softmax(x_k, dim=0)          s = torch.softmax(x_k, dim=1)
        return (s @ w, x_k.sum())              return (s @ w, x_k.sum(dim=(1,)))

Ranks decide the rewrite (a reduction of a 1-d slice with no `dim` reduces dimension 1 of the
batch; a 0-d slice meeting a matrix gets size-1 dimensions), so it is done once per signature
from what one iteration shows: `probe_def` numbers every expression of the body and records the
type, rank, dtype and shape of its value on iteration 0; `batched_def` then writes the batched
body from those facts, or raises `Unsupported` naming the construct (vmap runs it instead).
The runtime checks the batched body once per signature against the same facts on two rows
(every intermediate value must have the per-iteration value's dtype and shape after the batch
dimension), then against whole iterations, like every other mode.

Requires: the body as it is handed to vmap (straight-line, `if` converted to `where`).
"""
from __future__ import annotations

import ast
import builtins
import functools
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .. import fastast
from .broadcast import ELEMENTWISE
from .common import _Unitems
from ..analysis.names import in_place_keyword


# torch.nn.functional's losses that are elementwise before their reduction (_Batcher._span_loss)
_SPAN_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy_with_logits",
                "binary_cross_entropy")


class Unsupported(Exception):
    """The body uses something without a direct batched form here."""


@dataclass(frozen=True)
class Fact:
    """What one value was on the probed iteration."""

    kind: str                 # "tensor", "int", "float", "bool", "complex", "size", "tuple", "none", "other"
    rank: int = 0
    dtype: object = None
    shape: tuple = ()
    items: tuple = ()         # "tuple": the facts of its elements

    @property
    def number(self) -> bool:
        return self.kind in ("int", "float", "bool", "complex")


def fact_of(v) -> Fact:
    if isinstance(v, torch.Tensor):
        return Fact("tensor", v.dim(), v.dtype, tuple(v.shape))
    if isinstance(v, bool):
        return Fact("bool")
    if isinstance(v, int):
        return Fact("int")
    if isinstance(v, float):
        return Fact("float")
    if isinstance(v, complex):
        return Fact("complex")
    if isinstance(v, torch.Size):
        return Fact("size", len(v), shape=tuple(v))
    if isinstance(v, tuple):
        return Fact("tuple", len(v), items=tuple(fact_of(e) for e in v))
    if v is None:
        return Fact("none")
    return Fact("other")


_NUMBER_DTYPES = {"int": torch.int64, "float": torch.float64, "bool": torch.bool, "complex": torch.complex128}


def agrees(one: Fact, batch: Fact, batched: bool, rows: tuple) -> bool:
    """Whether the batched body's value at a node is the per-iteration value with the batch
    dimensions in front (`rows`: the probed size of each loop level; a value that does not
    vary over a level of a loop nest keeps size 1 there), or, for a loop-invariant node, the
    same value."""
    if not batched:
        return one == batch
    if one.kind == "tuple":
        return batch.kind == "tuple" and len(one.items) == len(batch.items) and all(
            agrees(a, b, True, rows) for a, b in zip(one.items, batch.items))
    lead = len(rows)
    if batch.kind != "tensor" or len(batch.shape) < lead:
        return False
    front = batch.shape[:lead]
    if lead == 1 and front != rows or any(s not in (1, r) for s, r in zip(front, rows)):
        return False
    if one.number:
        # a per-iteration Python number is a tensor of the batch (vmap's view of it too)
        return batch.dtype == _NUMBER_DTYPES[one.kind] and len(batch.shape) == lead
    return one.kind == "tensor" and batch.dtype == one.dtype and batch.shape[lead:] == one.shape


# ----------------------------------------------------------------------------- numbering

_SKIP = (ast.Constant, ast.Slice, ast.Starred, ast.Tuple, ast.List, ast.Lambda)


def number_nodes(fdef: ast.FunctionDef) -> dict:
    """id(node) -> k for every expression of the body whose value the rewrite looks at."""
    ids = {}
    callees = {id(n.func) for n in fastast.walk(fdef) if isinstance(n, ast.Call)}
    for n in fastast.walk(fdef):
        if isinstance(n, ast.expr) and not isinstance(n, _SKIP) and id(n) not in callees \
                and not (isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)) \
                and not (isinstance(n, (ast.Attribute, ast.Subscript)) and not isinstance(n.ctx, ast.Load)):
            ids[id(n)] = len(ids)
    return ids


class _Wrap(ast.NodeTransformer):
    def __init__(self, ids):
        self.ids = ids

    def generic_visit(self, node):
        k = self.ids.get(id(node))
        node = super().generic_visit(node)
        if k is None:
            return node
        return ast.copy_location(ast.Call(func=ast.Name(id="_avp", ctx=ast.Load()),
                                          args=[ast.Constant(k), node], keywords=[]), node)


def probe_def(fdef: ast.FunctionDef, name: str, av: str | None = None) -> tuple[ast.FunctionDef, dict]:
    """A copy of the body that reports `_avp(k, value)` for every numbered expression. With
    `av`, the rewrite's `av.item(t)` is the loop's own `t.item()` again: the probe sees the
    Python numbers the loop computes with, and the batched body then treats their batch as
    Python numbers (weak scalars), where `av.item`'s 0-d float64 tensors would promote."""
    tree = fastast.clone(fdef)
    ids = number_nodes(tree)
    order = {id(n): ids[id(n)] for n in fastast.walk(tree) if id(n) in ids}
    tree = _Wrap(order).visit(tree)
    if av is not None:
        tree = _Unitems(av).visit(tree)     # (after numbering: the ids stay those of `fdef`)
    tree.name = name
    ast.fix_missing_locations(tree)
    return tree, order


# ----------------------------------------------------------------------------- the rewrite

@dataclass
class _V:
    """A rewritten expression: its new node, whether it carries the batch, and the fact of its
    per-iteration value."""

    node: ast.expr
    batched: bool
    fact: Fact


def _name(n):
    return ast.Name(id=n, ctx=ast.Load())


def _call(func: ast.expr, args, keywords=()):
    return ast.Call(func=func, args=list(args), keywords=list(keywords))


def _attr(value: ast.expr, attr: str):
    return ast.Attribute(value=value, attr=attr, ctx=ast.Load())


# math functions of one Python number that the batched body computes in float64 (batching.pymath)
_MATH = {getattr(math, name): name for name in (
    "exp", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "floor", "ceil", "trunc", "fabs", "erf", "erfc",
    "isnan", "isinf", "isfinite", "degrees", "radians") if hasattr(math, name)}


# math functions of two Python numbers, as Python computes them (batching.pymath2)
_MATH2 = {math.copysign: "copysign", math.hypot: "hypot", math.atan2: "atan2", math.pow: "pow", math.fmod: "fmod"}


def _helper(name, *args, keywords=()):
    return _call(_attr(_name("_avb"), name), args, keywords)


def _torch(path: str):
    node = _name("_avb_torch")
    for part in path.split("."):
        node = _attr(node, part)
    return node


def _const(v):
    return ast.Constant(v)


def _lift(v: _V, k: int, lead: int = 1) -> ast.expr:
    """The batched value with `k` size-1 dimensions after the `lead` batch dimensions: `x[:, None, None]`."""
    if k <= 0:
        return v.node
    if k == 1:
        # (one call: a third faster than the subscript on small batches)
        return _call(_attr(v.node, "unsqueeze"), [_const(lead)])
    return ast.Subscript(value=v.node, slice=ast.Tuple(
        elts=[ast.Slice() for _ in range(lead)] + [_const(None)] * k, ctx=ast.Load()), ctx=ast.Load())


def _rank(v: _V) -> int:
    if v.fact.kind == "tensor":
        return v.fact.rank
    return 0


def _is_tensorish(v: _V) -> bool:
    return v.fact.kind == "tensor" or (v.batched and v.fact.number)


def _align(vals: list[_V], binary: bool = False, lead: int = 1, op: ast.operator | None = None) -> list[ast.expr]:
    """Operands of an elementwise operation: a batched value of lower rank than another
    operand gets size-1 dimensions after its batch dimension, so broadcasting lines the
    per-iteration dimensions up as in one iteration. With `binary` (a two-operand operator),
    a per-iteration Python number, batched as a tensor, is cast to the dtype one iteration
    computes in, as torch treats a Python number as a weak scalar (`x_i.int() * (i + 1)` is
    int32 arithmetic, `0.5 * i` is a Python float). `op`: the operator, where it matters: a true
    division against an integer tensor computes in the default float dtype, so its numbers are
    not cast to the tensor's dtype (`x_i / (i + 1)` with uint8 `x`: 256 is 256, not 0); a power
    of an integer tensor raises where a number does not fit its dtype, so no batch casts it."""
    for v in vals:
        if v.batched and not _is_tensorish(v):
            raise Unsupported(f"an elementwise operation on a per-iteration {v.fact.kind}")
    top = max((_rank(v) for v in vals if _is_tensorish(v)), default=0)
    out = [_lift(v, top - _rank(v), lead) if v.batched else v.node for v in vals]
    if binary and len(vals) == 2 and top > 0:
        out = _wrapped_zero_dim(vals, out, op)
    elif binary and len(vals) == 2:
        _half_and_int(vals, "an operation")
        out = _zero_dim_pair(vals, out)
    if binary and any(v.batched and v.fact.number for v in vals):
        dtype = _compute_dtype(vals)
        if isinstance(op, (ast.BitOr, ast.BitAnd, ast.BitXor)) and all(v.fact.kind == "bool" for v in vals):
            dtype = torch.bool      # (`c | True` of Python bools is a bool; arithmetic's `True + True` an int)
        if dtype in (torch.float16, torch.bfloat16) and any(
                v.batched and v.fact.kind in ("int", "float", "complex") for v in vals):
            # torch computes a half-precision tensor against a Python number in float32 (the
            # number is never rounded to half): a batch of numbers cast to half would round it
            raise Unsupported(f"a per-iteration Python number against a {dtype} tensor")
        # an integer tensor against numbers (two numbers are Python's arithmetic: `pynum`)
        int_tensor = dtype is not None and not (dtype.is_floating_point or dtype.is_complex) and \
            any(v.fact.kind == "tensor" for v in vals)
        if isinstance(op, ast.Pow) and int_tensor:
            raise Unsupported(f"`**` of a {dtype} tensor and a per-iteration Python number (torch raises where the "
                              "number does not fit the dtype; a batch cast to it would wrap)")
        if dtype is not None and not (isinstance(op, ast.Div) and int_tensor):
            out = [_cast(node, dtype) if v.batched and v.fact.number else node for v, node in zip(vals, out)]
    return out


@functools.lru_cache(maxsize=None)
def zero_dim_dtype(row, zero):
    """The dtype torch computes a tensor of dtype `row` (with dimensions) and a 0-d tensor of
    dtype `zero` in: the 0-d one widens it only across categories (int to float, float to
    complex), where a column of `zero` values would promote it."""
    return torch.result_type(torch.empty(1, dtype=row), torch.empty((), dtype=zero))


def _zero_dim_mix(vals: list[_V], what: str, result=None) -> None:
    """A torch function's per-iteration 0-d tensor argument of another dtype than a tensor
    argument with dimensions: the loop's 0-d value does not widen the other (and a half row
    reads it at float32 precision); batched as a column it would, and the cast an operator
    gets (_wrapped_zero_dim) depends on the function. No batched form (vmap keeps 0-d values
    logical; the guard refuses it where half precision meets a wider value)."""
    ranked = {v.fact.dtype for v in vals if v.fact.kind == "tensor" and v.fact.rank > 0 and v.fact.dtype is not None}
    dtypes = [v.fact.dtype for v in vals if v.fact.kind == "tensor" and v.fact.dtype is not None]
    if not ranked:
        _half_and_int(vals, f"`{what}`")
    if result is not None and result.kind == "tensor" and result.dtype is not None and result.dtype.is_floating_point \
            and dtypes and not any(d.is_floating_point or d.is_complex for d in dtypes):
        return      # (integers made floats, torch.true_divide or atan2: each value is read as it is)
    for v in vals:
        z = v.fact.dtype
        if not (v.batched and v.fact.kind == "tensor" and v.fact.rank == 0) or z is None or z is torch.bool:
            continue        # (a bool widens nothing: a 0-d mask or factor is exact in every dtype)
        for d in ranked - {z}:
            widened = zero_dim_dtype(d, z) != torch.promote_types(d, z)
            rounded = d in (torch.float16, torch.bfloat16) and z.itemsize > 1
            if widened or rounded:
                raise Unsupported(f"`{what}` of a per-iteration 0-d {z} value and a {d} tensor (batched as a column it "
                                  f"would be {'widened' if widened else 'rounded to ' + str(d)})")


def half_beside_int(dtypes) -> str:
    """Among the dtypes of per-iteration 0-d values that meet (`a[i] * b[i]`, `c[i] // w[i]`), a
    float16 / bfloat16 one beside an integer one wider than 8 bits: the loop's two 0-d CPU tensors
    compute at float32 with the integer's own value (2801 // 5.5 is 508 in bfloat16), the batch's
    rows would round the integers to half precision first (2801 is 2800) and may compute in half
    (510); probe X. The reason, or "" (also runtime Token._broadcast_recipe's)."""
    for h in dtypes:
        if h in (torch.float16, torch.bfloat16):
            for z in dtypes:
                if not (z.is_floating_point or z.is_complex) and z is not torch.bool and z.itemsize > 1:
                    return f"per-iteration 0-d {h} and {z} values (the batch would round the integers to {h} first)"
    return ""


def _half_and_int(vals: list[_V], what: str) -> None:
    """half_beside_int of the per-iteration 0-d tensors among an operation's operands: no batched form."""
    why = half_beside_int([v.fact.dtype for v in vals if v.batched and v.fact.kind == "tensor" and v.fact.rank == 0
                           and v.fact.dtype is not None])
    if why:
        raise Unsupported(f"{what} of {why}")


def _bound(name, names, args, keywords, extra, kextra) -> dict:
    """A call's arguments by parameter `names` (positional first, then keywords): {name: (node,
    its _V)}; Unsupported for more positions, other keywords or one given twice."""
    if len(args) > len(names):
        raise Unsupported(f"`{name}` with more arguments than {', '.join(names)}")
    given = dict(zip(names, zip(args, extra)))
    for k, v in zip(keywords, kextra):
        if k.arg not in names or k.arg in given:
            raise Unsupported(f"`{name}` with `{k.arg}=`")
        given[k.arg] = (k.value, v)
    return given


def _index_like(v: _V) -> bool:
    """A Python int, or a 0-d integer or bool tensor (torch takes its index as an int argument:
    roll's shift, rot90's count); not uint64, whose values may be past int64."""
    f = v.fact
    return f is not None and (f.kind == "int" or f.kind == "tensor" and f.rank == 0 and f.dtype is not None and not (
        f.dtype.is_floating_point or f.dtype.is_complex) and f.dtype is not torch.uint64)


def _exact_ints(a: _V, b: _V) -> tuple[_V, _V]:
    """Operands of a comparison; a Python int against a Python float checked to be within 2**53
    (batching exact_int): Python compares the two exactly, the batch in float64."""
    if a.fact.number and b.fact.number and {a.fact.kind, b.fact.kind} == {"int", "float"}:
        return tuple(_V(_helper("exact_int", v.node), v.batched, v.fact) if v.fact.kind == "int" else v
                     for v in (a, b))
    for num, other, k in ((a, b, 0), (b, a, 1)):
        if num.batched and num.fact.kind in ("int", "float") and not other.batched and other.fact.kind == "other":
            # (a value of a kind the check did not see: its kind decides, on every call)
            out = [a, b]
            out[k] = _V(_helper("against", num.node, other.node), True, num.fact)
            return tuple(out)
    return a, b


def _zero_dim_pair(vals: list[_V], out: list[ast.expr]) -> list[ast.expr]:
    """A per-iteration 0-d tensor against a 0-d tensor the loop does not change, of another
    dtype: in the loop two 0-d tensors promote each other (`x[i] > t` with a float32 row and a
    float64 `t` compares in float64, `x[i] + t` of int8 and int64 adds in int64); batched, the
    per-iteration one has a dimension and the 0-d one would not widen it. It is cast to the
    dtype one iteration computes in."""
    a, b = vals
    for var, fixed, k in ((a, b, 0), (b, a, 1)):
        fv, ff = var.fact, fixed.fact
        if not (var.batched and not fixed.batched and fv is not None and ff is not None and fv.kind == "tensor"
                and ff.kind == "tensor" and fv.rank == 0 and ff.rank == 0 and fv.dtype is not None
                and ff.dtype is not None and fv.dtype != ff.dtype):
            continue
        want = torch.promote_types(fv.dtype, ff.dtype)
        if want != zero_dim_dtype(fv.dtype, ff.dtype):
            out = list(out)
            out[k] = _cast(out[k], want)
        return out
    return out


def _wrapped_zero_dim(vals: list[_V], out: list[ast.expr], op=None) -> list[ast.expr]:
    """A per-iteration 0-d tensor against a tensor with dimensions: in the loop the 0-d one does
    not widen the other (torch's rule for 0-d tensors: `x[i] > thr[i]` with a float32 row and a
    float64 threshold compares in float32, an int8 row against uint8 values compares as int8);
    batched, it has a dimension and would. It is cast to the dtype one iteration computes in.
    Against a half-precision row, torch reads a wider 0-d value at float32 precision, which no
    cast reproduces: no batched form."""
    a, b = vals
    fa, fb = a.fact, b.fact
    if fa is None or fb is None or fa.kind != "tensor" or fb.kind != "tensor" or fa.dtype is None or fb.dtype is None:
        return out
    for zero, other, k in ((a, b, 0), (b, a, 1)):
        if zero.batched and zero.fact.rank == 0 and other.fact.rank > 0 and zero.fact.dtype != other.fact.dtype:
            want = zero_dim_dtype(other.fact.dtype, zero.fact.dtype)
            if want == zero.fact.dtype:
                return out
            if isinstance(op, ast.Div) and not (want.is_floating_point or want.is_complex):
                # a true division of integers computes in the default float dtype from both values
                # as they are (uint8 rows / an int32 300 divide by 300, not by 300 wrapped to 44)
                return out
            if want in (torch.float16, torch.bfloat16):
                raise Unsupported(f"a per-iteration 0-d {zero.fact.dtype} value against a {want} tensor (torch reads "
                                  "it at float32 precision in the loop)")
            out = list(out)
            out[k] = _cast(out[k], want)
            return out
    return out


_PY_KINDS = ("bool", "int", "float", "complex")
_PY_ARITH = {ast.Div: "div", ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.Mult: "mul",
             ast.LShift: "lshift", ast.RShift: "rshift", ast.Add: "add", ast.Sub: "sub"}
_INT_ONLY = ("mul", "lshift", "rshift", "add", "sub")    # (of floats: the batch's float64 is Python's float)
_DUMMY = {"bool": True, "int": 1, "float": 1.0, "complex": 1j}


def _compute_dtype(vals: list[_V]):
    """The dtype one iteration computes a two-operand operation in."""
    facts = [v.fact for v in vals]
    if all(f.number for f in facts):
        kind = max((f.kind for f in facts), key=_PY_KINDS.index)
        return _NUMBER_DTYPES["int" if kind == "bool" else kind]
    if len(facts) != 2 or not all(f.number or f.kind == "tensor" for f in facts):
        return None
    dummies = [_DUMMY[f.kind] if f.number else torch.empty((1,) * f.rank, dtype=f.dtype) for f in facts]
    if not isinstance(dummies[0], torch.Tensor) and not isinstance(dummies[1], torch.Tensor):
        return None
    return torch.result_type(*dummies)


def _whole_or_first(node: ast.Call, what: str) -> bool:
    """A reduction of a ragged value (`.sum()`, `.sum(0)`, `.mean(dim=0)`, `.sum(axis=0)`,
    `.max()`) over all of it (False) or its first dimension (True), else Unsupported."""
    f = node.func
    dims = list(node.args) + [k.value for k in node.keywords if k.arg in ("dim", "axis")]
    if len(dims) > 1 or len(node.args) + len(node.keywords) != len(dims) or f.attr in ("max", "min") and dims:
        raise Unsupported(f"`{ast.unparse(node)}`: {what} reduced other than over all of it or its first dimension")
    if dims and not (isinstance(dims[0], ast.Constant) and type(dims[0].value) is int and dims[0].value == 0):
        raise Unsupported(f"`{ast.unparse(node)}`: {what} reduced along a dimension other than 0")
    return bool(dims)


def _unit_constant(node) -> bool:
    """A literal 0, 1 or -1 (int or float, not bool): exact in every floating dtype, and
    Python's sums and products of a few of them stay exact there too."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value in (0, 1)


def _cast(node: ast.expr, dtype) -> ast.expr:
    return _call(_attr(node, "to"), [_torch(str(dtype).replace("torch.", ""))])


def _literal_int(d: ast.expr):
    """The int a literal spells (`-1` is a unary minus in the tree), else None."""
    if isinstance(d, ast.UnaryOp) and isinstance(d.op, ast.USub):
        k = _literal_int(d.operand)
        return -k if k is not None else None
    if isinstance(d, ast.Constant) and type(d.value) is int:
        return d.value
    return None


def _dim(d: ast.expr, dfact, rank: int, lead: int = 1) -> ast.expr:
    """A per-iteration dimension as the batched one (the `lead` batch dimensions come first)."""
    if _literal_int(d) is not None:
        k = _literal_int(d)
        if not -rank <= k < rank:
            raise Unsupported(f"dimension {k} of a {rank}-d value")
        return _const(k + lead if k >= 0 else k)
    if isinstance(d, (ast.Tuple, ast.List)):
        return ast.Tuple(elts=[_dim(e, None, rank, lead) for e in d.elts], ctx=ast.Load())
    if dfact is not None and dfact.kind == "int":
        return _helper("dim", d, _const(rank), _const(lead))
    raise Unsupported(f"a dimension given as `{ast.unparse(d)}`")


def _insert_dim(d: ast.expr, rank: int, lead: int = 1) -> ast.expr:
    """unsqueeze / stack: a new dimension among rank + 1."""
    if _literal_int(d) is not None:
        k = _literal_int(d)
        if not -(rank + 1) <= k <= rank:
            raise Unsupported(f"new dimension {k} of a {rank}-d value")
        return _const(k + lead if k >= 0 else k)
    raise Unsupported(f"a dimension given as `{ast.unparse(d)}`")


def _all_dims(rank: int, lead: int = 1) -> ast.expr:
    return ast.Tuple(elts=[_const(k) for k in range(lead, lead + rank)], ctx=ast.Load())


# reductions: name -> (accepts a tuple of dimensions, keyword names besides dim/keepdim)
_REDUCTIONS = {
    "sum": True, "mean": True, "nansum": True, "nanmean": True, "amax": True, "amin": True,
    "all": True, "any": True, "std": True, "var": True, "count_nonzero": True, "logsumexp": True,
    "prod": False, "argmax": False, "argmin": False, "max": False, "min": False,
}
_DIM_OPS = {"softmax", "log_softmax", "cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"}
_SORTS = {"sort", "argsort", "topk", "kthvalue", "median"}
_VIEW_METHODS = {"contiguous", "clone", "detach", "float", "double", "half", "bfloat16", "int", "long",
                 "bool", "short", "char", "byte", "abs", "neg", "conj", "relu", "sigmoid", "tanh", "exp",
                 "log", "sqrt", "rsqrt", "reciprocal", "square", "sign", "floor", "ceil", "round", "trunc",
                 "frac", "sin", "cos", "log1p", "expm1", "erf"}
_PRODUCTS = {"dot", "inner", "mv", "mm", "matmul", "outer", "ger"}
# calls that work on the trailing dimensions of their first argument alone (normalized_shape's
# dimensions, or a new last one): the same call on the batch, leading dimension and all
_TRAILING = {"layer_norm", "rms_norm", "embedding", "one_hot"}
# a new tensor shaped as its first argument (`torch.full_like(rel, 7)`): the same call on the batch
# is every iteration's, batch dimension and all (the other arguments the same in every iteration)
_LIKE = {"zeros_like", "ones_like", "full_like", "empty_like"}


def _canonical_table() -> dict:
    """Callable -> (namespace, name) for the torch functions the rewrite knows."""
    table = {}
    names = set(ELEMENTWISE) | set(_REDUCTIONS) | _DIM_OPS | _SORTS | _PRODUCTS | {
        "norm", "where", "stack", "cat", "concat", "unsqueeze", "squeeze", "flatten", "reshape", "transpose",
        "swapaxes", "swapdims", "permute", "movedim", "linear", "normalize", "flip", "t", "cross_entropy",
        "nll_loss", "gather", "kl_div", "searchsorted", "bucketize", "roll", "rot90"} | _TRAILING | _LIKE
    for ns_name, ns in (("torch", torch), ("F", F), ("linalg", torch.linalg), ("special", torch.special)):
        for n in names:
            obj = getattr(ns, n, None)
            if obj is None or not callable(obj):
                continue
            try:
                table.setdefault(obj, (ns_name, n))
            except TypeError:
                pass
    vn = getattr(torch.linalg, "vector_norm", None)
    if vn is not None:
        table[vn] = ("linalg", "vector_norm")
    return table


_TABLE: dict | None = None


def _lookup(obj):
    global _TABLE
    if _TABLE is None:
        _TABLE = _canonical_table()
    try:
        return _TABLE.get(obj)
    except TypeError:
        return None


@dataclass
class _Ctx:
    facts: dict
    ids: dict
    batched: set
    av: str
    resolve: object           # callee text -> (found, object)
    probe: bool = False
    lead: int = 1             # batch dimensions in front: one per loop level
    local: set = field(default_factory=set)
    seen: dict = field(default_factory=dict)    # node number -> whether its value carries the batch
    exempt: set = field(default_factory=set)    # node numbers whose dtype may differ from one iteration's
    lossless: dict = field(default_factory=dict)   # name -> the fact of the exempt value it holds
    index: str | None = None  # the parameter that is the loop's own index (an arange), never rebound
    # values that are a Python number in some iterations and a 0-d tensor in others
    # (`max(0, x2 - x1)`): ids of the original nodes, the names bound to one, and the nodes
    # whose use of one was accepted (arithmetic only: _Batcher._mixed_arith)
    mixed: set = field(default_factory=set)
    mixed_names: set = field(default_factory=set)
    mixed_ok: set = field(default_factory=set)
    fill_in_place: int | None = None    # id of the body's one `fill_range` that may fill its row in place


def _sole_fill(fdef: ast.FunctionDef, av: str) -> int | None:
    """id of the call in a body that is only `out = av.fill_range(row, ..); return (out,)`
    (`logits[i, lengths[i]:] = -1e9`) where `row` is read nowhere else: its batch is the store
    target's own rows, which nothing else in the body reads, so the fill may write them in place
    (batching.fill_range), and the store's commit copies them onto themselves (no copy)."""
    body = fdef.body
    if len(body) != 2 or not isinstance(body[0], ast.Assign) or not isinstance(body[1], ast.Return):
        return None
    call, ret = body[0].value, body[1].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "fill_range"
            and isinstance(call.func.value, ast.Name) and call.func.value.id == av and len(call.args) == 5
            and not call.keywords and isinstance(call.args[0], ast.Name)):
        return None
    row = call.args[0].id
    if sum(isinstance(n, ast.Name) and n.id == row for n in fastast.walk(fdef)) != 1 \
            or row not in {a.arg for a in fdef.args.args}:
        return None
    target = body[0].targets[0] if len(body[0].targets) == 1 else None
    if not (isinstance(target, ast.Name) and isinstance(ret, ast.Tuple) and len(ret.elts) == 1
            and isinstance(ret.elts[0], ast.Name) and ret.elts[0].id == target.id):
        return None
    return id(call)


class _Batcher:
    """Rewrites the statements of one body; see the module docstring."""

    def __init__(self, ctx: _Ctx):
        self.c = ctx
        self.memo = {}    # id(node) -> its rewrite (a node is rewritten once, wherever it is asked for)
        self.unmask = set()   # ids of `b[m]` nodes read as the whole `b` (_masked_expression)
        self.unspan = {}      # ids of ragged spans `b[lo:hi]` -> the whole `b` they are read as (_masked_expression)
        self.same_mask = set()   # ids of masked stores `r[m] = a[m]` whose value is read as the whole `a`

    # -------------------------------------------------------------- statements

    def body(self, stmts: list) -> list:
        out = []
        stmts = self._same_masks(stmts)
        for s in stmts:
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
                continue
            if isinstance(s, ast.Pass):
                continue
            if isinstance(s, ast.Assign):
                out.append(self.assign(s))
            elif isinstance(s, ast.If) and self._masked_put_if(s):
                out.append(self.masked_put(s))
            elif isinstance(s, ast.Return):
                out.append(self.ret(s))
            else:
                raise Unsupported(f"`{type(s).__name__}` statement in the body")
        return out

    def assign(self, s: ast.Assign) -> ast.Assign:
        if len(s.targets) != 1:
            raise Unsupported("chained assignment")
        t = s.targets[0]
        v = self.expr(s.value)
        if isinstance(t, ast.Name):
            self._bind(t.id, v.batched)
            if id(s.value) in self.c.mixed:
                self.c.mixed_names.add(t.id)
                self.c.mixed_ok.add(id(s.value))
            else:
                self.c.mixed_names.discard(t.id)
            k = self.c.ids.get(id(s.value))
            if k is not None and k in self.c.exempt:
                self.c.lossless[t.id] = v.fact   # its reads hold the stored branches' lossless value
            else:
                self.c.lossless.pop(t.id, None)
        elif isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts):
            for e in t.elts:
                self._bind(e.id, v.batched)
                self.c.lossless.pop(e.id, None)
                self.c.mixed_names.discard(e.id)
        else:
            raise Unsupported(f"assignment to `{ast.unparse(t)}`")
        return ast.copy_location(ast.Assign(targets=[fastast.clone(t)], value=v.node), s)

    def _masked_put_if(self, s: ast.If) -> bool:
        """`if not av.masked_put(r, k, v): r[k] = v` (lowering.common._Fills: a store by what
        may be a boolean mask into a tensor the iteration made)."""
        t = s.test
        if s.orelse or len(s.body) != 1 or not (isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not)):
            return False
        c = t.operand
        return isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "masked_put" \
            and isinstance(c.func.value, ast.Name) and c.func.value.id == self.c.av and len(c.args) == 3 \
            and not c.keywords and all(isinstance(a, ast.Name) for a in c.args)

    def _same_masks(self, stmts: list) -> list:
        """`_av_pv = a[m]; _av_pk = m; if not av.masked_put(r, _av_pk, _av_pv): ..` (`r[m] = a[m]`,
        the same mask on both sides) as `_av_pv = a`, the store then taking a's element where
        the mask holds (masked_put's `same`): a masked selection has no batched form, the
        selection by the store's own mask needs none."""
        out = list(stmts)
        for j in range(len(out) - 2):
            pv, pk, put = out[j], out[j + 1], out[j + 2]
            if not (isinstance(put, ast.If) and self._masked_put_if(put)):
                continue
            _, k, v = put.test.operand.args
            if isinstance(pv, ast.Assign) and len(pv.targets) == 1 and isinstance(pv.targets[0], ast.Name) \
                    and pv.targets[0].id == v.id and isinstance(pv.value, ast.Subscript) \
                    and isinstance(pv.value.slice, ast.Name) and isinstance(pk, ast.Assign) and len(pk.targets) == 1 \
                    and isinstance(pk.targets[0], ast.Name) and pk.targets[0].id == k.id \
                    and isinstance(pk.value, ast.Name) and pk.value.id == pv.value.slice.id:
                out[j] = ast.copy_location(ast.Assign(targets=pv.targets, value=pv.value.value), pv)
                self.same_mask.add(id(put))
        return out

    def masked_put(self, s: ast.If) -> ast.Assign:
        """The masked store as `r = masked_fill_rows(r, k, v)` on every row at once: a masked
        fill of each row (batching._Helpers.masked_fill_rows checks what runtime masked_put
        checks, and raises where the store would be another write)."""
        r, k, v = s.test.operand.args
        rv, kv, vv = self.expr(r), self.expr(k), self.expr(v)
        for a in (r, k, v):
            # (the store's operands are checked through what it writes: the probe saw them as the
            # loop's masked_put call did, which the batch does not make)
            self.c.seen.pop(self.c.ids.get(id(a)), None)
        if rv.fact.kind != "tensor" or self.c.lead != 1:
            raise Unsupported("a masked store into a value that is not a per-iteration tensor")
        row = rv.node if rv.batched else _helper("own_rows", rv.node, _const(False), _name("_avb_n"))
        self._bind(r.id, True)
        same = _const(id(s) in self.same_mask)
        value = _helper("masked_fill_rows", row, kv.node, _const(kv.batched), vv.node, _const(vv.batched), same)
        return ast.copy_location(ast.Assign(targets=[ast.Name(id=r.id, ctx=ast.Store())], value=value), s)

    def _bind(self, name, batched):
        self.c.local.add(name)
        if batched:
            self.c.batched.add(name)
        else:
            self.c.batched.discard(name)

    def ret(self, s: ast.Return) -> ast.Return:
        if not isinstance(s.value, ast.Tuple):
            raise Unsupported("the body returns something other than a tuple")
        elts = []
        for e in s.value.elts:
            v = self.expr(e)
            if not v.batched:
                elts.append(_helper("bcast", v.node, _name("_avb_n")))
            elif self.c.lead > 1:
                elts.append(_helper("full", v.node, _name("_avb_n")))   # levels it does not vary over
            else:
                elts.append(v.node)
        return ast.copy_location(ast.Return(value=ast.Tuple(elts=elts, ctx=ast.Load())), s)

    # -------------------------------------------------------------- expressions

    def fact(self, node) -> Fact:
        k = self.c.ids.get(id(node))
        f = self.c.facts.get(k) if k is not None else None
        if f is None:
            raise Unsupported(f"`{ast.unparse(node)}` was not seen on the probed iteration")
        return f

    def varies(self, node) -> bool:
        return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in self.c.batched
                   for n in fastast.walk(node))

    def expr(self, node) -> _V:
        hit = self.memo.get(id(node))
        if hit is None:
            hit = self.memo[id(node)] = self._expr(node)
        return hit

    def _expr(self, node) -> _V:
        if id(node) in self.unmask:
            return self.expr(node.value)
        if id(node) in self.unspan:
            return self.unspan[id(node)]
        if not self.varies(node):
            f = self.c.facts.get(self.c.ids.get(id(node))) if id(node) in self.c.ids else None
            if f is None and isinstance(node, ast.Constant):
                f = fact_of(node.value)
            # (a loop-invariant `av.item(t)`: the loop's own `t.item()`, a Python number, once)
            new = _Unitems(self.c.av).visit(fastast.clone(node))
            return _V(self._wrap(new, node, False), False, f or Fact("other"))
        meth = getattr(self, "e_" + type(node).__name__, None)
        if meth is None:
            raise Unsupported(f"`{ast.unparse(node)}` ({type(node).__name__}) on per-iteration values")
        new = meth(node)
        if isinstance(node, ast.Name) and node.id in self.c.mixed_names:
            self.c.mixed.add(id(node))
        if isinstance(node, ast.Name) and node.id in self.c.lossless:
            k = self.c.ids.get(id(node))
            if k is not None:
                self.c.exempt.add(k)
            return _V(self._wrap(ast.copy_location(new, node), node, True), True, self.c.lossless[node.id])
        if isinstance(new, _V):
            # an explicit verdict: a per-iteration value's shape, rank or length (the same in every
            # iteration), an invariant call, a list of per-iteration values
            fact = new.fact or self.fact(node)
            return _V(self._wrap(ast.copy_location(new.node, node), node, new.batched), new.batched, fact)
        return _V(self._wrap(ast.copy_location(new, node), node, True), True, self.fact(node))

    def fixed(self, node) -> ast.expr:
        """The rewritten `node`, which must be the same in every iteration."""
        v = self.expr(node)
        if v.batched:
            raise Unsupported(f"`{ast.unparse(node)}` changes from one iteration to the next here")
        return v.node

    def _wrap(self, new, old, batched):
        k = self.c.ids.get(id(old))
        if k is not None:
            self.c.seen[k] = batched
        if not self.c.probe or k is None:
            return new
        return _call(_name("_avp"), [_const(k), new])

    def e_List(self, node):
        """A list of values, only as torch.stack / torch.cat take it."""
        elts = [self.expr(e) for e in node.elts]
        new = type(node)(elts=[e.node for e in elts], ctx=ast.Load())
        return _V(new, any(e.batched for e in elts), Fact("list", len(elts)))

    e_Tuple = e_List

    def e_Name(self, node):
        return fastast.clone(node)

    def e_BinOp(self, node):
        a, b = self.expr(node.left), self.expr(node.right)
        if not a.batched and not b.batched:
            return _V(ast.BinOp(left=a.node, op=node.op, right=b.node), False, None)
        if id(node.left) in self.c.mixed or id(node.right) in self.c.mixed:
            return self._mixed_arith(node, a, b)
        if isinstance(node.op, ast.MatMult):
            return self._product("matmul", a, b)
        if isinstance(node.op, (ast.Pow, ast.Div)) and (a.batched and a.fact.number and b.fact.kind == "tensor"
                                                       or isinstance(node.op, ast.Pow) and b.batched
                                                       and b.fact.number and a.fact.kind == "tensor"):
            if isinstance(node.op, ast.Pow):
                # torch's pow of a tensor and a Python number special-cases the number (0.5 is
                # sqrt, -0.5 rsqrt, 2 a square, 3 a cube: other roundings, sqrt(-0.0) is -0.0);
                # a batch of the numbers is a tensor, whose pow has no special cases
                raise Unsupported("`**` of a tensor and a per-iteration Python number (torch special-cases the "
                                  "number's value)")
            # `v / t`: torch's Tensor.__rtruediv__ is `t.reciprocal() * v` (two roundings), the number
            # cast to the reciprocal's dtype (an integer tensor's is the default float dtype: a cast
            # to the tensor's own dtype would wrap, 256 as uint8 is 0); against a half-precision
            # tensor torch multiplies in float32, which no cast of the batch reproduces
            if b.fact.dtype is None or b.fact.dtype in (torch.float16, torch.bfloat16) or b.fact.dtype.is_complex \
                    or a.fact.kind not in ("int", "float"):
                raise Unsupported(f"a per-iteration Python number over a {b.fact.dtype} tensor")
            lb, la = _align([b, a], lead=self.c.lead)
            return _helper("rdiv", la, lb)
        la, lb = _align([a, b], binary=True, lead=self.c.lead, op=node.op)
        op = _PY_ARITH.get(type(node.op))
        if op and a.fact.number and b.fact.number and (op not in _INT_ONLY
                                                         or a.fact.kind == b.fact.kind == "int"):
            # Python numbers on both sides: where Python raises or computes otherwise than the
            # int64 / float64 batch (a zero divisor, int / int, powers, int overflow), the helper
            # leaves the call to the loop or computes as Python does
            return _helper("pynum", la, lb, _const(op))
        return ast.BinOp(left=la, op=node.op, right=lb)

    def e_UnaryOp(self, node):
        if isinstance(node.op, ast.Not):
            # `not x` of one element per iteration (a 0-d tensor or a Python number): not bool(x)
            v = self.expr(node.operand)
            if not (v.fact.kind == "tensor" and v.fact.rank == 0 or v.fact.number):
                raise Unsupported("`not` of a per-iteration value with several elements")
            return _call(_torch("logical_not"), [_helper("truth", v.node)])
        v = self.expr(node.operand)
        if isinstance(node.op, ast.USub) and v.batched and v.fact.number and v.fact.kind == "int" \
                and id(node.operand) not in self.c.mixed:
            return _helper("pynum", _const(0), v.node, _const("sub"))   # (-(-2**63) is past int64)
        new = ast.UnaryOp(op=node.op, operand=v.node)
        if id(node.operand) in self.c.mixed:
            if not isinstance(node.op, ast.USub):
                raise Unsupported(f"`{ast.unparse(node)}` of a value that is a number in some iterations")
            self._mixed_result(node, node.operand)
            return _V(new, True, v.fact)
        return new if v.batched else _V(new, False, None)

    def e_Compare(self, node):
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            return self._contains(node)
        if not all(isinstance(op, (ast.Lt, ast.Gt, ast.LtE, ast.GtE, ast.Eq, ast.NotEq)) for op in node.ops):
            raise Unsupported(f"comparison `{ast.unparse(node)}`")
        if len(node.ops) > 1:
            # `lo <= v < hi` of one element each per iteration: Python's `lo <= v and v < hi`
            # (a 0-d bool tensor or a bool either way); the middle operand is computed twice
            vals = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
            whole = self.fact(node)
            # (a loop-invariant operand of unknown kind: the whole value must be one truth value,
            # and the batch's agreement with it is checked like every other node's)
            if not all(v.fact.kind == "tensor" and v.fact.rank == 0 or v.fact.number
                       or not v.batched and v.fact.kind == "other" for v in vals) \
                    or not (whole.kind == "bool" or whole.kind == "tensor" and whole.rank == 0):
                raise Unsupported(f"chained comparison `{ast.unparse(node)}` of values with several elements")
            out = None
            for k, op in enumerate(node.ops):
                a, b = _exact_ints(vals[k], vals[k + 1])
                if a.batched or b.batched:
                    la, lb = _align([a, b], binary=True, lead=self.c.lead)
                else:
                    la, lb = a.node, b.node
                part = ast.Compare(left=fastast.clone(la), ops=[op], comparators=[fastast.clone(lb)])
                out = part if out is None else _helper("land", out, part)
            return out
        a, b = self.expr(node.left), self.expr(node.comparators[0])
        if not a.batched and not b.batched:
            return _V(ast.Compare(left=a.node, ops=node.ops, comparators=[b.node]), False, None)
        a, b = _exact_ints(a, b)
        la, lb = _align([a, b], binary=True, lead=self.c.lead)
        return ast.Compare(left=la, ops=node.ops, comparators=[lb])

    # -------------------------------------------------------------- numbers or tensors

    def _mixed_pick(self, is_max, node, vals):
        """`max(0, x2 - x1)`, `min(t, 1)`: a constant 0 or ±1 against a per-iteration 0-d floating
        tensor is the constant (a Python int or float) in some iterations and the tensor in
        others. The batch holds both in the tensor's dtype (exact for these constants); where
        the two kinds could behave differently, the value may only be used in arithmetic
        (_mixed_arith) that ends in a tensor of that dtype, which the loop computes the same
        in every iteration."""
        if len(vals) != 2 or node.keywords:
            return None
        consts = [k for k, (a, v) in enumerate(zip(node.args, vals)) if not v.batched and _unit_constant(a)]
        if len(consts) != 1:
            return None
        t = vals[1 - consts[0]]
        if not (t.batched and t.fact.kind == "tensor" and t.fact.rank == 0 and t.fact.dtype is not None
                and t.fact.dtype.is_floating_point) or id(node.args[1 - consts[0]]) in self.c.mixed:
            return None
        self.c.mixed.add(id(node))
        self._exempt(node)
        return _V(_helper("pick", _const(is_max), *(v.node for v in vals)), True,
                  Fact("tensor", 0, t.fact.dtype))

    def _exempt(self, node):
        k = self.c.ids.get(id(node))
        if k is not None:
            self.c.exempt.add(k)     # (its kind differs between iterations: checked at its uses)

    def _mixed_result(self, node, *parts):
        for p in parts:
            if id(p) in self.c.mixed:
                self.c.mixed_ok.add(id(p))
        self.c.mixed.add(id(node))
        self._exempt(node)

    def _mixed_arith(self, node, a, b):
        """Arithmetic on values that are numbers in some iterations (_mixed_pick): two such values
        (+, -, *: Python's int arithmetic or the tensor's, the same numbers) stay such a value;
        one against a per-iteration tensor of the same floating dtype (+, -, *, /) is that
        tensor's dtype in every iteration (a Python number is a weak scalar), so the result
        is an ordinary value."""
        lm, rm = id(node.left) in self.c.mixed, id(node.right) in self.c.mixed
        op = node.op
        if lm and rm:
            if not isinstance(op, (ast.Add, ast.Sub, ast.Mult)) or a.fact.dtype != b.fact.dtype:
                raise Unsupported(f"`{ast.unparse(node)}` of two values that are numbers in some iterations")
            self._mixed_result(node, node.left, node.right)
            return _V(ast.BinOp(left=a.node, op=op, right=b.node), True, a.fact)
        m, other = (a, b) if lm else (b, a)
        f = other.fact
        if not (other.batched and isinstance(op, (ast.Add, ast.Sub, ast.Mult, ast.Div)) and f.kind == "tensor"
                and f.dtype == m.fact.dtype):
            raise Unsupported(f"`{ast.unparse(node)}`: a value that is a Python number in some iterations "
                              "meets other than a per-iteration tensor of its dtype")
        self.c.mixed_ok.add(id(node.left if lm else node.right))
        la, lb = _align([a, b], lead=self.c.lead)
        return _V(ast.BinOp(left=la, op=op, right=lb), True, Fact("tensor", f.rank, f.dtype, f.shape))

    def check_mixed(self):
        """Every use of a value that is a number in some iterations must be one _mixed_arith or an
        assignment took; any other (a call, a method, a comparison, an output) could tell a
        Python number from a tensor."""
        bad = self.c.mixed - self.c.mixed_ok
        if bad:
            raise Unsupported("a value that is a Python number in some iterations and a tensor in others "
                              "(`max(0, t)`) used other than in arithmetic with tensors")

    def _contains(self, node):
        """`v in t` of a tensor `t`: Tensor.__contains__ is `(v == t).any().item()`, a Python
        bool; batched, the same comparison (broadcast as one iteration's) reduced over each
        iteration's own dimensions."""
        a, b = self.expr(node.left), self.expr(node.comparators[0])
        if b.fact.kind != "tensor" or not (a.fact.kind == "tensor" or a.fact.number):
            raise Unsupported(f"`{ast.unparse(node)}`: `in` of other than a tensor or number in a tensor")
        if not a.batched and not b.batched:
            return _V(ast.Compare(left=a.node, ops=node.ops, comparators=[b.node]), False, None)
        la, lb = _align([a, b], binary=True, lead=self.c.lead)
        eq = ast.Compare(left=la, ops=[ast.Eq()], comparators=[lb])
        return _helper("contains", eq, _const(self.c.lead), _const(isinstance(node.ops[0], ast.NotIn)))

    def _span_extreme(self, call) -> _V | None:
        """`b[lo:hi].max(0)` (or `dim=0`; min) with per-iteration bounds, whose `.values` (or
        `[0]`) is taken: the span's extreme along its first dimension (_span_reduction)."""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ("max", "min")
                and isinstance(call.func.value, ast.Subscript)):
            return None
        args = list(call.args) + [k.value for k in call.keywords if k.arg == "dim"]
        if len(args) != 1 or len(call.keywords) > 1 or call.keywords and call.keywords[0].arg != "dim" or not (
                isinstance(args[0], ast.Constant) and type(args[0].value) is int and args[0].value == 0):
            return None
        return self._span_reduction(call, along_first=True)

    def e_Attribute(self, node):
        if node.attr == "values":
            span = self._span_extreme(node.value)
            if span is not None:
                return span
        v = self.expr(node.value)
        if v.fact.kind == "tuple" and node.attr in ("values", "indices") and v.batched \
                and self.fact(node).kind == "tensor":
            # `row.max(0).values`: the batched call returns the same named tuple, batched
            return _attr(v.node, node.attr)
        if v.fact.kind != "tensor":
            raise Unsupported(f"attribute `{node.attr}` of a per-iteration {v.fact.kind}")
        r = v.fact.rank
        if node.attr == "shape":
            return _V(self._item_shape(v), False, None)
        if node.attr == "ndim":
            return _V(_const(r), False, None)
        if node.attr in ("dtype", "device", "is_cuda", "is_floating_point"):
            return _V(_attr(v.node, node.attr), False, None)
        if node.attr == "T" and r == 2:
            return _call(_attr(v.node, "transpose"), [_const(self.c.lead), _const(self.c.lead + 1)])
        if node.attr == "mT" and r >= 2:
            return _call(_attr(v.node, "transpose"), [_const(-2), _const(-1)])
        if node.attr in ("real", "imag"):
            return _attr(v.node, node.attr)
        raise Unsupported(f"attribute `.{node.attr}` of a per-iteration tensor")

    def _index_part(self, p) -> _V:
        if isinstance(p, ast.Slice):
            new = ast.Slice(lower=p.lower and self.fixed(p.lower), upper=p.upper and self.fixed(p.upper),
                            step=p.step and self.fixed(p.step))
            return _V(new, False, Fact("slice"))
        if isinstance(p, ast.Constant):
            return _V(fastast.clone(p), False, fact_of(p.value) if p.value is not Ellipsis else Fact("ellipsis"))
        return self.expr(p)

    def e_Subscript(self, node):
        if isinstance(node.slice, ast.Constant) and type(node.slice.value) is int and node.slice.value == 0:
            span = self._span_extreme(node.value)        # `h[i, :L[i]].max(0)[0]`
            if span is not None:
                return span
        base = self.expr(node.value)
        idx = node.slice
        win = self._window(node, base)
        if win is not None:
            return win
        parts = [self._index_part(p) for p in (idx.elts if isinstance(idx, ast.Tuple) else [idx])]
        if not base.batched and not any(p.batched for p in parts):
            new = parts[0].node if len(parts) == 1 and not isinstance(idx, ast.Tuple) else \
                ast.Tuple(elts=[p.node for p in parts], ctx=ast.Load())
            return _V(ast.Subscript(value=base.node, slice=new, ctx=ast.Load()), False, None)
        if base.batched:
            if base.fact.kind != "tensor":
                raise Unsupported("indexing a per-iteration non-tensor")
            if not any(p.batched for p in parts):
                tensors = 0
                for p in parts:
                    if p.fact.kind in ("slice", "ellipsis", "none", "int"):
                        continue
                    if p.fact.kind == "tensor" and p.fact.dtype != torch.uint8 and (p.fact.dtype == torch.bool or not (
                            p.fact.dtype.is_floating_point or p.fact.dtype.is_complex)):
                        tensors += 1
                        continue
                    raise Unsupported(f"index `{ast.unparse(idx)}`")
                if tensors > 1:
                    raise Unsupported("several tensor indices")
                return ast.Subscript(value=base.node, slice=ast.Tuple(
                    elts=[ast.Slice() for _ in range(self.c.lead)] + [p.node for p in parts], ctx=ast.Load()),
                    ctx=ast.Load())
            if len(parts) == 1 and self._integer_scalar(parts[0]) and self.c.lead == 1:
                return _helper("take", base.node, parts[0].node)
            if len(parts) == 1 and self._integer(parts[0]) and parts[0].fact.kind == "tensor" and parts[0].batched \
                    and self.c.lead == 1 and base.fact.rank >= 1 and not isinstance(idx, ast.Tuple):
                # `row[idx]` of a per-iteration integer index tensor (`rel[q, scores[q].topk(k).indices]`):
                # each row's own elements, by advanced indexing with the row numbers beside it
                return _helper("take_each", base.node, parts[0].node)
            raise Unsupported(f"index `{ast.unparse(idx)}` of a per-iteration tensor by per-iteration values")
        # a loop-invariant tensor indexed by per-iteration integers: a gather
        if base.fact.kind in ("other", "tuple") and len(parts) == 1 and not isinstance(idx, ast.Tuple) \
                and self._integer_scalar(parts[0]):
            # a list (or tuple) of Python numbers: the helper checks it is one, on every call
            return _helper("listed", base.node, parts[0].node)
        if base.fact.kind != "tensor":
            raise Unsupported(f"indexing a {base.fact.kind} by per-iteration values")
        at = 0
        while at < len(parts) and not parts[at].batched and parts[at].fact.kind == "slice":
            at += 1
        items = idx.elts if isinstance(idx, ast.Tuple) else [idx]
        if 0 < at < len(parts) and self.c.lead == 1 and self._integer_scalar(parts[at]) and all(
                not p.batched and p.fact.kind in ("slice", "int") for p in parts[at + 1:]):
            # `x[:, 2 * i]`, `x[1:, j[i], 0]`: fixed slices, then one per-iteration integer: the
            # rows it picks along that dimension (where the loop's index is), moved first, then
            # the rest of the index on the dimensions after it
            lead = ast.Subscript(value=base.node, slice=ast.Tuple(
                elts=[p.node for p in parts[:at]], ctx=ast.Load()), ctx=ast.Load())
            moved = _helper("pick_rows" if self._of_index(items[at]) else "gather_rows", lead, _const(at),
                            parts[at].node)
            if at + 1 == len(parts):
                return moved
            return ast.Subscript(value=moved, slice=ast.Tuple(
                elts=[ast.Slice() for _ in range(at + 1)] + [p.node for p in parts[at + 1:]], ctx=ast.Load()),
                ctx=ast.Load())
        first, rest = parts[0], parts[1:]
        lead = 1
        while lead < len(parts) and parts[lead].batched:
            lead += 1
        if lead == 2 and len(parts) == 2 and self.c.lead == 1 and self._integer_scalar(parts[0]) \
                and parts[1].fact.kind == "tensor" and self._integer(parts[1]) and (parts[1].fact.rank or 0) >= 1:
            # `x[i, idx[i]]` with a tensor of integers per iteration (a row's tokens, `logits[i,
            # prev[i]]`): the row number beside each of them, one advanced index of the batch
            return ast.Subscript(value=_helper("unempty", base.node), slice=ast.Tuple(elts=[
                _helper("beside", parts[0].node, parts[1].node), parts[1].node], ctx=ast.Load()), ctx=ast.Load())
        if lead > 1:
            # `x[i, t[i]]`: several per-iteration integers, leading and side by side, index one
            # element (or row) each. As one advanced index of the batch they broadcast to its
            # rows, and adjacent advanced indices keep their place: the batch dimension first
            if not all(self._integer_scalar(p) for p in parts[:lead]):
                raise Unsupported(f"index `{ast.unparse(idx)}`")
            first, rest = ast.Tuple(elts=[p.node for p in parts[:lead]], ctx=ast.Load()), parts[lead:]
            if any(p.batched or p.fact.kind not in ("slice", "int") for p in rest):
                raise Unsupported(f"index `{ast.unparse(idx)}` after per-iteration indices")
            return ast.Subscript(value=_helper("unempty", base.node), slice=ast.Tuple(
                elts=list(first.elts) + [p.node for p in rest], ctx=ast.Load()), ctx=ast.Load())
        if not first.batched or not self._integer(first) or any(p.batched for p in rest):
            raise Unsupported(f"index `{ast.unparse(idx)}`")
        if any(p.fact.kind not in ("slice", "int") for p in rest):
            raise Unsupported(f"index `{ast.unparse(idx)}` after a per-iteration index")
        if self.c.lead == 1 and self._integer_scalar(first) and self._of_index(items[0]):
            # `x[2 * i]`, `x[i * hop + 1, 1:]`: the rows it picks (a view where they step evenly;
            # integers read from data, `x[ids[k]]`, are gathered as they are)
            picked = _helper("pick_rows", base.node, _const(0), first.node)
            if not rest:
                return picked
            return ast.Subscript(value=picked, slice=ast.Tuple(
                elts=[ast.Slice()] + [p.node for p in rest], ctx=ast.Load()), ctx=ast.Load())
        # (a tensor with no elements checks no index there: batching._unempty)
        if self._integer_scalar(first) and not rest:
            # (index_select where it is the same, batching._selected; with more of the index after
            # it, the batch may have several dimensions: advanced indexing, as written)
            return _helper("gather_rows", base.node, _const(0), first.node)
        gathered = _helper("unempty", base.node) if self._integer_scalar(first) else base.node
        if not rest:
            return ast.Subscript(value=gathered, slice=first.node, ctx=ast.Load())
        return ast.Subscript(value=gathered, slice=ast.Tuple(
            elts=[first.node] + [p.node for p in rest], ctx=ast.Load()), ctx=ast.Load())

    def _window(self, node, base):
        """`x[i:i + w]`, `x[t - 2:t + 1, :, 0]`: a loop-invariant tensor sliced along its first
        dimension by per-iteration integer bounds (a sliding window; one width, checked by the
        helper on every call), then by fixed slices or integers: the windows as one batch,
        (n, width, ...), then the rest of the index after the batch and window dimensions."""
        idx = node.slice
        items = idx.elts if isinstance(idx, ast.Tuple) else [idx]
        if items and isinstance(items[0], ast.Constant) and items[0].value is Ellipsis:
            # `x[..., i:i + k]`: the Ellipsis stands for whole dimensions, as many as the
            # invariant tensor's rank leaves (the rank is part of the signature)
            rank = base.fact.rank if base.fact.kind == "tensor" and not base.batched else None
            later = items[1:]
            if rank is None or len(later) > rank or any(
                    isinstance(p, ast.Constant) and p.value in (None, Ellipsis) for p in later):
                return None
            items = [ast.Slice() for _ in range(rank - len(later))] + later
        if self.c.lead > 1:
            return self._window_nd(node, base, items)
        crop = self._crop(node, base, items)
        if crop is not None:
            return crop
        dim = 0
        while dim < len(items) - 1 and isinstance(items[dim], ast.Slice) \
                and items[dim].lower is items[dim].upper is items[dim].step is None:
            dim += 1      # `x[:, i:i + k]`: whole dimensions before the window's
        first = items[dim]
        if base.batched or base.fact.kind != "tensor" or self.c.lead != 1 or not isinstance(first, ast.Slice) \
                or first.step is not None or first.lower is None or first.upper is None \
                or not (self.varies(first.lower) or self.varies(first.upper)):
            return None
        lo, hi = self._window_bounds(node, first)
        rest = [self._index_part(p) for p in items[dim + 1:]]
        if any(p.batched or p.fact.kind not in ("slice", "int") for p in rest):
            raise Unsupported(f"index `{ast.unparse(idx)}` after a window")
        at = self._index_offset(first.lower), self._index_offset(first.upper)
        if at[0] is not None and at[1] is not None:
            # `x[i + a:i + b]` of the loop's own index: the windows from the ends of its range
            new = _helper("window_at", base.node, _name(self.c.index), *at, _const(dim))
        else:
            new = _helper("window", base.node, lo.node, hi.node, _const(dim))
        if not rest:
            return new
        return ast.Subscript(value=new, slice=ast.Tuple(
            elts=[ast.Slice() for _ in range(dim + 2)] + [p.node for p in rest], ctx=ast.Load()), ctx=ast.Load())

    def _crop(self, node, base, items):
        """`img[i, :, y[i]:y[i] + h, x[i]:x[i] + w]` (a loop-invariant tensor, a per-iteration
        row, then windows with per-iteration bounds along any other dimension) or
        `im[:, y[i]:y[i] + h]` (a per-iteration tensor): crops at per-iteration offsets, one
        width per dimension, whole dimensions elsewhere (batching.crop); None where no part
        after the row is such a window."""
        if base.fact.kind != "tensor" or any(isinstance(p, ast.Constant) and p.value in (None, Ellipsis)
                                             for p in items):
            return None
        if base.batched:
            rows, rest = _const(None), items
        else:
            if len(items) < 2 or isinstance(items[0], ast.Slice):
                return None
            first = self._index_part(items[0])
            if not first.batched or not self._integer_scalar(first):
                return None
            rows, rest = first.node, items[1:]
        windows = [k for k, p in enumerate(rest) if isinstance(p, ast.Slice)
                   and any(b is not None and self.varies(b) for b in (p.lower, p.upper, p.step))]
        if not windows:
            return None
        dims, los, his = [], [], []
        for k, p in enumerate(rest):
            if k in windows:
                if p.step is not None or p.lower is None or p.upper is None:
                    what = "a step" if p.step is not None else "an open start (`:n`)" if p.lower is None \
                        else "an open end (`n:`)"
                    raise Unsupported(f"crop `{ast.unparse(node)}` with {what}: its width varies per iteration")
                lo, hi = self._window_bounds(node, p)
                dims.append(_const(k + 1))
                los.append(lo.node)
                his.append(hi.node)
            elif not (isinstance(p, ast.Slice) and p.lower is p.upper is p.step is None):
                raise Unsupported(f"index `{ast.unparse(node.slice)}` beside a crop (whole dimensions only)")
        tup = lambda elts: ast.Tuple(elts=elts, ctx=ast.Load())    # noqa: E731
        return _helper("crop", base.node, rows, tup(dims), tup(los), tup(his))

    def _window_bounds(self, node, part):
        """The batched bounds of a window `part` of `node`: both per-iteration integers."""
        lo, hi = self.expr(part.lower), self.expr(part.upper)
        if not (lo.batched and hi.batched):
            raise Unsupported(f"`{ast.unparse(node)}`: one bound fixed, the other per iteration (windows "
                              "of several widths)")
        if not all(self._integer_scalar(v) for v in (lo, hi)):
            raise Unsupported(f"window `{ast.unparse(node)}` with bounds that are not integers")
        return lo, hi

    def _window_nd(self, node, base, items):
        """`x[:, i:i + p, j:j + p]` in a loop nest: windows along several dimensions, each with
        per-iteration integer bounds (batching.window_nd), the other parts fixed slices or
        integers; None where no part is a window."""
        windows = [k for k, p in enumerate(items) if isinstance(p, ast.Slice)
                   and any(b is not None and self.varies(b) for b in (p.lower, p.upper, p.step))]
        if not windows or base.batched or base.fact.kind != "tensor":
            return None
        dims, los, his = [], [], []
        for k in windows:
            p = items[k]
            if p.step is not None or p.lower is None or p.upper is None:
                raise Unsupported(f"window `{ast.unparse(node)}` with a step or an open end")
            lo, hi = self._window_bounds(node, p)
            dims.append(_const(k))
            los.append(lo.node)
            his.append(hi.node)
        rest = []
        for k, p in enumerate(items):
            if k in windows:
                rest.append(ast.Slice())
                continue
            v = self._index_part(p)
            if v.batched or v.fact.kind not in ("slice", "int"):
                raise Unsupported(f"index `{ast.unparse(node.slice)}` beside a window")
            rest.append(v.node)
        tup = lambda elts: ast.Tuple(elts=elts, ctx=ast.Load())    # noqa: E731
        new = _helper("window_nd", base.node, tup(dims), tup(los), tup(his), _const(self.c.lead))
        if all(isinstance(p, ast.Slice) and p.lower is p.upper is p.step is None for p in rest):
            return new
        return ast.Subscript(value=new, slice=tup([ast.Slice() for _ in range(self.c.lead)] + rest), ctx=ast.Load())

    def _function_reduction(self, node):
        """`torch.sum(b[lo:hi], dim=0)` (torch.mean / max / min of a ragged span or a masked
        selection) as the method spelling `b[lo:hi].sum(dim=0)` is: a masked reduction, where
        that is one; else None (and the call is taken as written)."""
        f = node.func
        if not node.args or not isinstance(node.args[0], (ast.Subscript, ast.BinOp, ast.UnaryOp, ast.Call, ast.Compare)) \
                or not self.varies(node.args[0]) or not isinstance(f, (ast.Attribute, ast.Name)) \
                or ast.unparse(f).split(".")[0] in self.c.local:
            return None     # (`torch.mean((a[i, :n] - b[i, :n]) ** 2)`: arithmetic on selections too)
        found, obj = self.c.resolve(ast.unparse(f))
        name = next((n for n in ("sum", "mean", "max", "min") if found and obj is getattr(torch, n)), None)
        if name is None:
            return None
        method = ast.Call(func=ast.Attribute(value=node.args[0], attr=name, ctx=ast.Load()), args=list(node.args[1:]),
                          keywords=list(node.keywords))
        try:
            return self._masked_reduction(method)
        except Unsupported:
            return None

    def _masked_reduction(self, node):
        """`b[m].sum()`, `.sum(0)`, `.mean()`, `.mean(0)`, `.max()`, `.min()` with a per-iteration
        boolean mask `m` over b's leading dimensions (`x[i][x[i] > 0].sum()`, `x[y == c].mean(0)`):
        the selection is ragged, its reduction is not. The helper reduces b with the unselected
        entries replaced by the reduction's identity, and counts the selected ones."""
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr in ("sum", "mean", "max", "min", "numel")
                and self.varies(f.value)):
            return None
        if f.attr == "numel" and (node.args or node.keywords):
            return None
        if not isinstance(f.value, ast.Subscript):
            return self._masked_expression(node) if f.attr != "numel" else None   # (arithmetic on selections first)
        span = self._span_reduction(node)
        if span is not None:
            return span
        if isinstance(f.value.slice, (ast.Tuple, ast.Slice)):
            return None
        sub = f.value
        mfact = self.c.facts.get(self.c.ids.get(id(sub.slice)))
        if mfact is None or mfact.kind != "tensor" or mfact.dtype != torch.bool or mfact.rank == 0:
            return None
        first = _whole_or_first(node, "a masked selection") if f.attr != "numel" else False
        b, m = self.expr(sub.value), self.expr(sub.slice)
        if b.fact.kind != "tensor" or not m.batched:
            raise Unsupported(f"`{ast.unparse(sub)}`: a mask the same in every iteration, or of a non-tensor")
        c = sub.slice
        if f.attr in ("sum", "mean") and not b.batched and self.c.index is not None and isinstance(c, ast.Compare) \
                and len(c.ops) == 1 and isinstance(c.ops[0], ast.Eq):
            sides = [c.left, c.comparators[0]]
            at = [k for k, e in enumerate(sides) if isinstance(e, ast.Name) and e.id == self.c.index]
            if len(at) == 1 and not self.varies(sides[1 - at[0]]):
                # `x[y == c].mean(0)` over the classes `c` of the loop: a segment reduction
                labels = self.fixed(sides[1 - at[0]])
                return _helper("segment", _const(f.attr), b.node, labels, _name(self.c.index),
                               _const(first))
        return _helper("masked", _const(f.attr), b.node, _const(b.batched), m.node, _const(first))

    def _selection_len(self, node):
        """len(b[m]): how many entries a per-iteration mask selects; else None."""
        if not (isinstance(node.func, ast.Name) and len(node.args) == 1 and not node.keywords
                and self._selection_of(node.args[0])):
            return None
        found, obj = self.c.resolve(node.func.id)
        if not found or obj is not builtins.len:
            return None
        sub = node.args[0]
        b, m = self.expr(sub.value), self.expr(sub.slice)
        return _helper("masked", _const("len"), b.node, _const(b.batched), m.node, _const(False))

    def _selection_of(self, node) -> bool:
        """`b[m]` with a per-iteration boolean mask over b's leading dimensions (any number of them)."""
        if not (isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Tuple, ast.Slice))):
            return False
        f = self.c.facts.get(self.c.ids.get(id(node.slice)))
        b = self.c.facts.get(self.c.ids.get(id(node.value)))
        return f is not None and f.kind == "tensor" and f.dtype == torch.bool and f.rank >= 1 \
            and b is not None and b.kind == "tensor" and b.rank >= f.rank and self.varies(node.slice)

    def _selection(self, node) -> bool:
        """`b[m]` with a per-iteration boolean mask over b's first dimension."""
        if not (isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Tuple, ast.Slice))):
            return False
        f = self.c.facts.get(self.c.ids.get(id(node.slice)))
        b = self.c.facts.get(self.c.ids.get(id(node.value)))
        return f is not None and f.kind == "tensor" and f.dtype == torch.bool and f.rank == 1 \
            and b is not None and b.kind == "tensor" and b.rank >= 1 and self.varies(node.slice)

    def _scalar_leaf(self, node) -> bool:
        f = self.c.facts.get(self.c.ids.get(id(node)))
        if f is None and isinstance(node, ast.Constant):
            f = fact_of(node.value)
        return f is not None and (f.number or f.kind == "tensor" and f.rank == 0) and not any(
            self._selection(n) for n in fastast.walk(node))

    def _over_selection(self, node, subs, wide=None) -> bool:
        """Whether `node` is elementwise arithmetic on selections `b[m]` or ragged spans (collected
        in `subs`) and one-element values: each of its elements is one selected element's. Other
        tensors the selection does not hold (`w` of `h[s:e] * w`) are collected in `wide`."""
        if self._selection(node) or self._span_of(node):
            subs.append(node)
            return True
        if isinstance(node, ast.BinOp):
            return all(self._over_selection(x, subs, wide) or self._leaf(x, wide) for x in (node.left, node.right)) \
                and len(subs) > 0
        if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            return self._over_selection(node.operand, subs, wide)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and not isinstance(node.ops[0], (ast.In, ast.NotIn, ast.Is, ast.IsNot)):
            return all(self._over_selection(x, subs, wide) or self._leaf(x, wide) for x in (node.left, node.comparators[0])) \
                and len(subs) > 0
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ELEMENTWISE \
                and node.func.attr != "where" and not any(k.arg is None for k in node.keywords) \
                and in_place_keyword(node) is None:
            # (`.clamp(min=0)`: options that are one-element values)
            if self._over_selection(node.func.value, subs, wide):
                return all(self._leaf(a, wide) for a in node.args + [k.value for k in node.keywords])
            # `torch.log(b[m])`, `F.relu(x[s:e] - c)`: torch's own elementwise function of it
            if not node.args or ast.unparse(node.func).split(".")[0] in self.c.local:
                return False
            found, obj = self.c.resolve(ast.unparse(node.func))
            if not found or obj is not getattr(torch, node.func.attr, None) and obj is not getattr(F, node.func.attr, None):
                return False
            return self._over_selection(node.args[0], subs, wide) and all(
                self._leaf(a, wide) for a in node.args[1:] + [k.value for k in node.keywords])
        return False

    def _leaf(self, node, wide) -> bool:
        """A one-element value, or (collected in `wide`) a tensor of one shape in every iteration."""
        if self._scalar_leaf(node):
            return True
        f = self.c.facts.get(self.c.ids.get(id(node)))
        if wide is None or f is None or f.kind != "tensor" or self.varies(node) and not isinstance(node, ast.Name):
            return False     # (a loop-invariant tensor, or a name of a per-iteration one: one shape in every iteration)
        wide.append(node)
        return True

    def _masked_expression(self, node):
        """`(pred[m] == c).float().mean()`, `((x[m] - mu) ** 2).sum()`: elementwise arithmetic on
        selections by one per-iteration mask, with one-element values, reduced at once. It is
        computed on the whole tensors and reduced as a masked selection (the unselected
        elements' results, NaN and inf included, never reach the sum). With gradients the
        loop runs (an unselected element's derivative can be infinite, and zero times it NaN)."""
        f = node.func
        subs: list = []
        wide: list = []
        if not self._over_selection(f.value, subs, wide) or len({ast.dump(s.slice) for s in subs}) != 1 \
                or len({self.fact(s.value).rank for s in subs}) != 1:
            return None
        if self._span_of(subs[0]):
            # (a tensor beside the spans broadcasts along their values' other dimensions only:
            # `h[s:e] * w` with w (D,); one as wide as the span would meet it along the span)
            rank = self.fact(subs[0]).rank
            if any(self.fact(w).rank >= rank for w in wide):
                return None
            return self._span_expression(node, subs)
        if wide:
            return None
        first = _whole_or_first(node, "a masked selection")
        m = self.expr(subs[0].slice)
        if not m.batched:
            return None
        self.unmask.update(id(s) for s in subs)
        e = self._on_wholes(f.value)
        return _helper("masked", _const(f.attr), e.node, _const(e.batched), m.node, _const(first),
                       keywords=[ast.keyword(arg="pure", value=_const(False))])

    def _on_wholes(self, value) -> _V:
        """`value` rewritten where its selections or spans are read as the whole tensors they are
        of (self.unmask, self.unspan): each of its nodes exempt from the check against one
        iteration's facts (a whole tensor where one iteration has the selection). Unsupported
        where it is no tensor."""
        for n in fastast.walk(value):
            k = self.c.ids.get(id(n))
            if k is not None:
                self.c.exempt.add(k)
        e = self.expr(value)
        if e.fact.kind != "tensor":
            raise Unsupported(f"`{ast.unparse(value)}` is not a tensor")
        return e

    def _span_of(self, node) -> bool:
        """`b[lo:hi]` (b per-iteration, with dimensions) or `b[i, lo:hi]` (b the same in every
        iteration, `i` the loop's own index) with a bound that changes per iteration and no
        step: a ragged span along the value's first dimension."""
        if not isinstance(node, ast.Subscript) or self.c.lead != 1:
            return False
        sl, base = node.slice, node.value
        if isinstance(sl, ast.Tuple) and len(sl.elts) == 2 and isinstance(sl.elts[1], ast.Slice) \
                and self._own_row(sl.elts[0]) and not self.varies(base):
            sl, rank = sl.elts[1], 2
        elif isinstance(sl, ast.Slice) and self.varies(base):
            rank = 1
        else:
            return False
        f = self.c.facts.get(self.c.ids.get(id(base)))
        return sl.step is None and any(b is not None and self.varies(b) for b in (sl.lower, sl.upper)) \
            and f is not None and f.kind == "tensor" and f.rank >= rank

    def _own_row(self, e) -> bool:
        """The loop's own index `i`, or `i` read under the branch's condition (`guarded_index(c, i)`,
        lowering.ifconvert: a row the loop reads only where it takes the branch, row 0 elsewhere,
        whose values the branch's `where` leaves out; probeI's `if lengths[i] > 0: out[i] =
        h[i, :lengths[i]].mean(0)`)."""
        if isinstance(e, ast.Name):
            return e.id == self.c.index
        return isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "guarded_index" \
            and isinstance(e.func.value, ast.Name) and e.func.value.id == self.c.av and len(e.args) == 2 \
            and isinstance(e.args[1], ast.Name) and e.args[1].id == self.c.index

    def _span_expression(self, node, subs):
        """`(a[i, :l] - b[i, :l]).abs().mean()`, `(x[s:e] ** 2).sum(0)`: elementwise arithmetic on
        ragged spans with the same bounds, and one-element values, reduced at once. The spans
        are a mask of the positions along their first dimension (Python's slice rules), and
        the arithmetic runs on the whole tensors, reduced as a masked selection. With
        gradients each whole tensor is read as `where(mask, b, b.detach())`: the positions
        outside the spans, whose derivatives may be infinite or NaN (`log` of padding), pass
        their zero gradient to a detached copy, never to b; a per-iteration number that
        requires grad beside them keeps the loop (its derivative at those positions would
        reach it)."""
        f = node.func
        first = _whole_or_first(node, "a ragged span")
        guarded = self._on_guarded_spans(subs, f.value)
        if guarded is None:
            return None
        mask, e = guarded
        return _helper("span_masked", _const(f.attr), mask, e.node, _const(first), *self._beside_spans(f.value, subs))

    def _on_guarded_spans(self, subs, value):
        """`value` lowered with each span of `subs` read as the whole tensor it is of, through
        span_guard (_span_wholes): (the assignment of the spans' mask, the lowered value), or
        None where a span is not of a per-iteration tensor."""
        made = self._span_wholes(subs)
        if made is None:
            return None
        mask, mname, wholes = made
        for s, b in zip(subs, wholes):
            self.unspan[id(s)] = _V(_helper("span_guard", b.node, _name(mname)), True, b.fact)
        return mask, self._on_wholes(value)

    def _beside_spans(self, value, subs) -> list:
        """The values beside the spans in `value` (lowered already): none that holds or is read by a
        span (`torch.sigmoid(a[s:e])`); the helpers refuse them where they require grad (their
        derivative at the positions outside the spans would reach them, and may be NaN)."""
        leaves = []
        inside = {id(c) for s in subs for c in fastast.walk(s) if isinstance(c, ast.expr)}
        for n in fastast.walk(value):
            if not isinstance(n, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) or n is value \
                    or id(n) in inside or any(id(c) in inside for c in fastast.walk(n)):
                continue
            if not self.varies(n) and isinstance(n, (ast.Name, ast.Attribute)) and (
                    not isinstance(n, ast.Name) or isinstance(n.ctx, ast.Load)):
                leaves.append(fastast.clone(n))      # (a weight the same in every iteration: `w`, `self.w`)
            elif id(n) in self.memo and (self._scalar_leaf(n) or self.c.facts.get(
                    self.c.ids.get(id(n)), Fact("other")).kind == "tensor"):
                leaves.append(self.memo[id(n)].node)
        return leaves

    def _span_wholes(self, subs):
        """For spans with the same bounds (_span_of): the assignment of their positions' mask
        (n, T) to a name of its own, to be evaluated before any read of it (span_mask), the
        name, and the whole batched tensor each span is of (`b`, or `b[rows]` where each
        iteration reads a row of one tensor); None where one is not a per-iteration tensor."""
        sub = subs[0]
        sl = sub.slice
        rows = None
        if isinstance(sl, ast.Tuple):
            rows, sl = self.expr(sl.elts[0]), sl.elts[1]
        lo, hi = (self.expr(e) if e is not None else None for e in (sl.lower, sl.upper))
        for v in (lo, hi):
            if v is not None and not self._integer_scalar(v):
                raise Unsupported(f"`{ast.unparse(sl)}`: slice bounds other than integers")
        wholes = []
        for s in subs:
            b = self.expr(s.value)
            if b.fact.kind != "tensor":
                return None
            if rows is not None:
                b = _V(ast.Subscript(value=b.node, slice=rows.node, ctx=ast.Load()), True,
                       Fact("tensor", b.fact.rank - 1, b.fact.dtype, b.fact.shape[1:]))
            elif not b.batched:
                return None
            wholes.append(b)
        self.c.counter = getattr(self.c, "counter", 0) + 1
        mname = f"_avm{self.c.counter}"
        width = self.expr(sub.value).node if rows is not None else wholes[0].node
        mask = ast.NamedExpr(target=ast.Name(id=mname, ctx=ast.Store()), value=_helper(
            "span_mask", lo.node if lo is not None else _const(None), hi.node if hi is not None else _const(None),
            width))
        return mask, mname, wholes

    def _span_loss(self, f, node, name):
        """`F.mse_loss(a[i, :n], b[i, :n])` (l1, smooth L1, Huber, binary cross-entropy with
        logits or probabilities) of ragged spans with the same bounds and shapes: the loss of
        every element of the whole tensors (`reduction='none'`, an elementwise function), then
        each iteration's mean or sum over its span (_Helpers.span_loss). With gradients both
        tensors are read through span_guard: the elements outside the spans give their
        gradient to a detached copy."""
        a, b = node.args[0], node.args[1]
        options = {"mse_loss": (), "l1_loss": (), "smooth_l1_loss": ("beta",), "huber_loss": ("delta",),
                   "binary_cross_entropy_with_logits": (), "binary_cross_entropy": ()}[name]
        if len(node.args) != 2 or not self._span_of(b) or ast.dump(a.slice) != ast.dump(b.slice) \
                or any(k.arg not in ("reduction",) + options or self.varies(k.value) for k in node.keywords):
            raise Unsupported(f"`{name}` of spans with other bounds, positional options, weights or options that "
                              "change per iteration")
        fa, fb = self.fact(a), self.fact(b)
        if fa.kind != "tensor" or fb.kind != "tensor" or fa.shape[1:] != fb.shape[1:] or fa.rank != fb.rank \
                or fa.dtype != fb.dtype:
            raise Unsupported(f"`{name}` of spans of other shapes or dtypes (the loop broadcasts or raises)")
        made = self._span_wholes([a, b])
        if made is None:
            raise Unsupported(f"`{name}` of spans of values that are not per-iteration tensors")
        mask, mname, (wa, wb) = made
        reduction = next((k.value for k in node.keywords if k.arg == "reduction"), _const("mean"))
        opts = [ast.keyword(arg=k.arg, value=self.fixed(k.value)) for k in node.keywords if k.arg != "reduction"]
        each = _call(fastast.clone(f), [_helper("span_guard", wa.node, _name(mname)),
                                        _helper("span_guard", wb.node, _name(mname))],
                     opts + [ast.keyword(arg="reduction", value=_const("none"))])
        return _helper("span_loss", self.fixed(reduction) if not isinstance(reduction, ast.Constant) else reduction,
                       mask, each)

    def _span_class_loss(self, f, name, node, fixed):
        """F.cross_entropy / F.nll_loss of ragged spans with the same bounds
        (`F.cross_entropy(logits[i, :n], y[i, :n])`): the losses of every position of the whole
        tensors, with the targets outside the spans read as ignore_index (no loss, no
        gradient, and never out of range), then each iteration's reduction over its span. With
        gradients the scores are read as where(mask, x, x.detach()) (span_guard): NaN scores
        in the padding give no NaN gradient."""
        xs, ts = node.args[0], node.args[1]
        if ast.dump(xs.slice) != ast.dump(ts.slice):
            raise Unsupported(f"`{name}` of spans with other bounds")
        fx, ft = self.fact(xs), self.fact(ts)
        if fx.kind != "tensor" or ft.kind != "tensor" or fx.rank != 2 or ft.rank != 1 or ft.dtype != torch.int64:
            raise Unsupported(f"`{name}` of spans other than (positions, classes) scores against int64 class indices")
        made = self._span_wholes([xs, ts])
        if made is None:
            raise Unsupported(f"`{name}` of spans of values that are not per-iteration tensors")
        mask, mname, (x, t) = made
        return _helper("span_class_loss", fastast.clone(f), mask, _helper("span_guard", x.node, _name(mname)), t.node,
                       fixed["reduction"], fixed["ignore_index"])

    def _span_reduction(self, node, along_first=False):
        """`b[lo:hi].sum(0)` (`.mean(0)`, `.sum()`, `.mean()`, `.max()`, `.min()`) with bounds that
        change per iteration, along b's first dimension: ragged spans (`h[i, :lengths[i]].mean(0)`,
        `x[i][s:e].sum()`). A span is a mask of that dimension (Python's slice rules: negative
        bounds count from the end, bounds clip at the ends), reduced as masked selections are.
        `b[i, lo:hi]` of the loop's own index `i` is `b[i][lo:hi]`."""
        f = node.func
        sub = f.value
        rows = None
        sl = sub.slice
        if self.c.lead != 1:
            return None
        if isinstance(sl, ast.Tuple) and len(sl.elts) == 2 and isinstance(sl.elts[1], ast.Slice) \
                and self._own_row(sl.elts[0]):
            rows, sl = self.expr(sl.elts[0]), sl.elts[1]
            if self.varies(sub.value):
                return None
        if not isinstance(sl, ast.Slice) or sl.step is not None:
            return None
        bounds = [b for b in (sl.lower, sl.upper) if b is not None]
        if not bounds or not any(self.varies(b) for b in bounds):
            return None
        first = along_first or _whole_or_first(node, "a ragged span")
        b = self.expr(sub.value)
        if b.fact.kind != "tensor" or rows is None and not b.batched:
            return None
        lo, hi = (self.expr(e) if e is not None else None for e in (sl.lower, sl.upper))
        for v in (lo, hi):
            if v is not None and not self._integer_scalar(v):
                raise Unsupported(f"`{ast.unparse(sl)}`: slice bounds other than integers")
        # (`.max(0)`: the values along the span's first dimension; its gradient goes to one index per
        # column, not shared by ties as max()'s: the helper refuses it with gradients, "max0")
        return _helper("span", _const(f.attr + "0" if along_first else f.attr), b.node,
                       rows.node if rows is not None else _const(None),
                       lo.node if lo is not None else _const(None), hi.node if hi is not None else _const(None),
                       _const(first))

    def _index_offset(self, e):
        """`a` in a slice bound `i + a`, `a + i`, `i - a` or `i` of the loop's own index `i`
        (`a` the same in every iteration), else None."""
        idx = self.c.index
        if idx is None:
            return None
        is_index = lambda n: isinstance(n, ast.Name) and n.id == idx    # noqa: E731
        if is_index(e):
            return _const(0)
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
            if is_index(e.left) and not self.varies(e.right):
                off = self.fixed(e.right)
                return off if isinstance(e.op, ast.Add) else ast.UnaryOp(op=ast.USub(), operand=off)
            if isinstance(e.op, ast.Add) and is_index(e.right) and not self.varies(e.left):
                return self.fixed(e.left)
        return None

    @staticmethod
    def _integer(v: _V) -> bool:
        f = v.fact
        if f.kind == "int":
            return True
        # uint8 indices are masks in torch's indexing
        return f.kind == "tensor" and f.dtype not in (torch.bool, torch.uint8) and not (
            f.dtype.is_floating_point or f.dtype.is_complex)

    def _numbers_tensor(self, node, text):
        """`torch.tensor([cx, cy, w, 1.0])` (or a tuple; `dtype=` a floating dtype) of per-iteration
        Python numbers and number constants: one row of them per iteration (batching.numbers_tensor),
        the dtype torch.tensor infers from the kinds of the elements."""
        elts = node.args[0].elts
        if not elts or any(isinstance(e, ast.Starred) for e in elts) or len(node.keywords) > 1 \
                or node.keywords and node.keywords[0].arg != "dtype":
            raise Unsupported(f"`{text}` of a per-iteration list (other than numbers, with dtype= at most)")
        vals = [self.expr(e) for e in elts]
        floats = False
        for e, v in zip(elts, vals):
            if v.batched:
                ok = v.fact.kind in ("int", "float", "bool")
                floats = floats or v.fact.kind == "float"
            else:
                ok = isinstance(e, ast.Constant) and type(e.value) in (int, float, bool)
                floats = floats or ok and type(e.value) is float
            if not ok:
                raise Unsupported(f"`{text}` of a per-iteration list of other than Python numbers")
        dtype = _const(None)
        if node.keywords:
            found, d = self.c.resolve(ast.unparse(node.keywords[0].value))
            if not (found and isinstance(d, torch.dtype) and d.is_floating_point and floats) \
                    or any(v.batched and v.fact.kind != "float" for v in vals):
                # (ints converted by torch.tensor's dtype go through a double first: the loop decides)
                raise Unsupported(f"`{text}` with a dtype of other than floats into a floating dtype")
            dtype = fastast.clone(node.keywords[0].value)
        return _helper("numbers_tensor", dtype, *(v.node for v in vals))

    def _of_index(self, e) -> bool:
        """Whether an index expression is arithmetic of the loop's own index and fixed names
        (`2 * i + 1`): integers that may step evenly, worth a view (batching.pick_rows); not a
        read from data (`ids[k]`), nor a call."""
        if self.c.index is None:
            return False
        names = [n for n in fastast.walk(e) if isinstance(n, ast.Name)]
        return any(n.id == self.c.index for n in names) and all(
            isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.operator, ast.unaryop, ast.Load))
            for n in fastast.walk(e)) and all(n.id == self.c.index or not self.varies(n) for n in names)

    def _integer_scalar(self, v: _V) -> bool:
        return self._integer(v) and (v.fact.kind == "int" or v.fact.rank == 0)

    # -------------------------------------------------------------- calls

    def e_Call(self, node):
        f = node.func
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise Unsupported("`*args` / `**kwargs` in a call")
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == self.c.av:
            return self._runtime_helper(f.attr, node)
        masked = self._masked_reduction(node) if isinstance(f, ast.Attribute) else self._selection_len(node)
        if masked is None:
            masked = self._function_reduction(node)
        loss = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if masked is None and len(node.args) >= 2 and self._span_of(node.args[0]) \
                and loss in ("cross_entropy", "nll_loss") + _SPAN_LOSSES and ast.unparse(f).split(".")[0] not in self.c.local:
            found, obj = self.c.resolve(ast.unparse(f))
            if found and obj is getattr(F, loss):
                # (spans: their whole tensors, never the spans alone; `F.mse_loss` or `mse_loss`
                # imported from torch.nn.functional)
                return self._class_loss(f, node) if loss in ("cross_entropy", "nll_loss") else self._span_loss(f, node, loss)
        if masked is not None:
            return masked
        recv = self.expr(f.value) if isinstance(f, ast.Attribute) and self.varies(f.value) else None
        args = [self.expr(a) for a in node.args]
        kwargs = [self.expr(k.value) for k in node.keywords]
        if not any(v.batched for v in args + kwargs) and not (recv is not None and recv.batched):
            # the same value in every iteration (`torch.zeros(x_k.shape)`): the call as written
            func = _attr(recv.node, f.attr) if recv is not None else fastast.clone(f)
            if recv is not None and f.attr in ("size", "dim", "numel") and recv.fact.kind == "tensor":
                return self._shape_method(f.attr, recv, node)
            return _V(_call(func, [v.node for v in args],
                            [ast.keyword(arg=k.arg, value=v.node) for k, v in zip(node.keywords, kwargs)]),
                      False, None)
        if isinstance(f, ast.Attribute) and self.varies(f.value):
            recv = self.expr(f.value)
            if recv.fact.kind != "tensor" or not recv.batched:
                raise Unsupported(f"method `.{f.attr}()` of a per-iteration {recv.fact.kind}")
            return self._op(f.attr, recv, node.args, node.keywords, node, method=True)
        text = ast.unparse(f)
        root = text.split(".")[0]
        if root in self.c.local:
            raise Unsupported(f"a call of `{text}`, assigned in the body")
        found, obj = self.c.resolve(text)
        if not found:
            raise Unsupported(f"`{text}` could not be resolved")
        if obj is builtins.abs:
            if len(node.args) != 1 or node.keywords:
                raise Unsupported("abs() with other than one argument")
            v = self.expr(node.args[0])
            if v.batched and v.fact.number and v.fact.kind == "int":
                # (abs(-2**63) is past int64: `pynum` leaves it to the loop)
                return _call(_attr(_helper("pynum", _const(0), v.node, _const("sub")), "abs"), [])
            return self._op("abs", v, [], [], node, method=False, func=f)
        if obj is builtins.max or obj is builtins.min:
            # Python's max(a, b): b where b > a, else a (the first of equals; NaN as it falls)
            vals = [self.expr(a) for a in node.args]
            mixed = self._mixed_pick(obj is builtins.max, node, vals)
            if mixed is not None:
                return mixed
            if len(vals) >= 2 and not node.keywords and len({v.fact.kind for v in vals}) == 1 \
                    and vals[0].fact.kind in ("int", "float"):
                # Python numbers of one kind (`min(1.0, c / norm.item())`): the batch holds them
                # in Python's precision (float64, int64), so its comparisons are Python's, and
                # every iteration's result is a number of that kind
                return _helper("pick", _const(obj is builtins.max), *(v.node for v in vals))
            if len(vals) < 2 or node.keywords or any(v.fact.kind != "tensor" or v.fact.rank != 0 for v in vals) \
                    or len({v.fact.dtype for v in vals}) != 1:
                # (a Python number against a tensor gives a number in some iterations and a tensor
                # in others, whose dtypes combine differently with what follows: vmap decides)
                raise Unsupported(f"{text}() of other than 0-d tensors of one dtype "
                                  f"({', '.join(v.fact.kind for v in vals)})")
            return _helper("pick", _const(obj is builtins.max), *_align(vals, lead=self.c.lead))
        if obj is builtins.int or obj is builtins.float or obj is builtins.bool:
            v = self.expr(node.args[0]) if len(node.args) == 1 and not node.keywords else None
            if v is None or not (v.fact.kind == "tensor" and v.fact.rank == 0 or v.fact.kind in ("int", "float", "bool")):
                raise Unsupported(f"{text}() of other than one 0-d value")
            return _helper("number", _const(obj.__name__), v.node)
        if obj in _MATH2 and len(node.args) == 2 and not node.keywords:
            # math.copysign(a, b), math.hypot(x, y) of per-iteration Python numbers
            vals = [self.expr(a) for a in node.args]
            if any(v.fact.kind not in ("int", "float") for v in vals):
                raise Unsupported(f"{text}() of other than Python numbers")
            return _helper("pymath2", _const(_MATH2[obj]), *(v.node for v in vals))
        if (obj in _MATH or obj is builtins.round) and len(node.args) == 1 and not node.keywords:
            # math.exp(v), math.floor(v), round(v) of per-iteration Python numbers
            v = self.expr(node.args[0])
            if v.fact.kind not in ("int", "float"):
                raise Unsupported(f"{text}() of a {v.fact.kind}, not a Python number")
            return _helper("pymath", _const(_MATH.get(obj, "round")), v.node)
        if obj is builtins.len:
            v = self.expr(node.args[0])
            if v.fact.kind != "tensor" or v.fact.rank < 1:
                raise Unsupported("len() of a 0-d value")
            return _V(ast.Subscript(value=_attr(v.node, "shape"), slice=_const(self.c.lead), ctx=ast.Load()),
                      False, None)
        if obj is torch.tensor and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
            return self._numbers_tensor(node, text)
        if obj is torch.tensor and len(node.args) == 1 and not node.keywords:
            v = self.expr(node.args[0])
            if v.batched and v.fact.kind in ("int", "float", "bool"):
                # torch.tensor(x[i].item()): a new tensor of one Python number per row (torch.tensor of
                # the batch itself would copy-construct from a tensor, with torch's warning)
                return _helper("number_tensor", v.node)
            raise Unsupported(f"`{text}` of a per-iteration {v.fact.kind}")
        if isinstance(obj, torch.nn.Module):
            return self._module(text, f, node, obj)
        known = _lookup(obj)
        if known is None:
            raise Unsupported(f"a call of `{text}`")
        ns, name = known
        if not node.args:
            raise Unsupported(f"`{text}()` without positional arguments")
        if name in ("stack", "cat", "concat"):
            return self._join(name, node)
        if name == "where":
            if len(node.args) != 3 or node.keywords:
                raise Unsupported("torch.where with other than three arguments")
            vals = [self.expr(a) for a in node.args]
            _zero_dim_mix(vals, text)
            return _call(fastast.clone(f), _align(vals, lead=self.c.lead))
        if name == "linear":
            vals = [self.expr(a) for a in node.args]
            if any(v.batched for v in vals[1:]) or any(self.varies(k.value) for k in node.keywords):
                raise Unsupported("F.linear with per-iteration weights")
            return _call(fastast.clone(f), [vals[0].node] + [v.node for v in vals[1:]],
                         [fastast.clone(k) for k in node.keywords])
        if name in ("cross_entropy", "nll_loss") and ns == "F":
            return self._class_loss(f, node)
        if name == "kl_div" and ns == "F":
            return self._kl_div(f, node)
        if name in ("searchsorted", "bucketize") and ns == "torch":
            return self._sorted_lookup(name, f, node)
        first = self.expr(node.args[0])
        if name in _PRODUCTS and len(node.args) == 2 and not node.keywords:
            return self._product(name, first, self.expr(node.args[1]))
        if ns == "linalg" and name == "vector_norm":
            name = "vector_norm"
        return self._op(name, first, node.args[1:], node.keywords, node, method=False, func=f, ns=ns)

    def _sorted_lookup(self, name, f, node):
        """`torch.searchsorted(edges, v)` / `torch.bucketize(v, edges)` with `edges` one 1-D tensor
        in every iteration: each element of `v` is looked up on its own (its result has v's shape),
        so the call on the batch of values is every iteration's, row by row (histogram bins)."""
        at = 0 if name == "searchsorted" else 1
        if len(node.args) != 2 or any(k.arg == "out" or self.varies(k.value) for k in node.keywords):
            raise Unsupported(f"torch.{name} with other than two arguments, `out=` or per-iteration options")
        edges, values = self.expr(node.args[at]), self.expr(node.args[1 - at])
        if edges.batched or edges.fact.kind != "tensor" or edges.fact.rank != 1:
            raise Unsupported(f"torch.{name} with per-iteration or other than 1-D boundaries")
        if values.fact.kind != "tensor":
            raise Unsupported(f"torch.{name} of a per-iteration {values.fact.kind}")
        args = [edges.node, values.node] if at == 0 else [values.node, edges.node]
        return _call(fastast.clone(f), args, [fastast.clone(k) for k in node.keywords])

    def _item_shape(self, v: _V) -> ast.expr:
        """The per-iteration shape of a batched tensor: its shape after the batch dimensions."""
        return ast.Subscript(value=_attr(v.node, "shape"), slice=ast.Slice(lower=_const(self.c.lead)), ctx=ast.Load())

    def _batch_shape(self, v: _V) -> ast.expr:
        return ast.Subscript(value=_attr(v.node, "shape"), slice=ast.Slice(upper=_const(self.c.lead)), ctx=ast.Load())

    def _shape_method(self, attr, recv, node):
        """`x_k.size(d)`, `x_k.dim()`, `x_k.numel()` of a per-iteration tensor (the same every iteration)."""
        r = recv.fact.rank
        if attr == "dim" and not node.args:
            return _V(_const(r), False, None)
        if attr == "numel" and not node.args:
            return _V(_call(_attr(self._item_shape(recv), "numel"), []), False, None)
        if attr == "size" and not node.args and not node.keywords:
            return _V(self._item_shape(recv), False, None)
        if attr == "size" and len(node.args) == 1 and not node.keywords:
            return _V(_call(_attr(recv.node, "size"), [_dim(node.args[0], None, r, self.c.lead)]), False, None)
        raise Unsupported(f"`.{attr}()` with these arguments")

    def _runtime_helper(self, attr, node):
        if attr == "own" and node.args and not node.keywords:
            # a tensor the iteration made and then writes into: its own rows (batching.own_rows)
            t, *receivers = [self.expr(a) for a in node.args]
            if t.fact.kind != "tensor" or any(r.batched for r in receivers):
                raise Unsupported("a value the iteration writes into that is not a tensor it made")
            return _V(_helper("own_rows", t.node, _const(t.batched), _name("_avb_n"), *[r.node for r in receivers]),
                      True, t.fact)
        if attr == "fill_range" and len(node.args) == 5:
            span = self._same_span(node)
            if span is not None:
                return span
        args = [self.expr(a) for a in node.args]
        if attr == "truth":
            c = args[0]
            if _rank(c) != 0:
                raise Unsupported("a condition on a per-iteration tensor with several elements")
            return _helper("truth", c.node)
        if attr == "lnot":
            return _call(_torch("logical_not"), [args[0].node])
        if attr in ("land", "lor"):
            if any(_rank(a) != 0 for a in args):
                raise Unsupported("a logical operation on tensors with several elements")
            return _helper(attr, args[0].node, args[1].node)
        if attr == "where":
            c, a, b = args[0], args[1], args[2]
            if not c.batched:
                raise Unsupported("a branch on a fixed condition with per-iteration values")
            if _rank(c) != 0:
                raise Unsupported("a condition with several elements")
            lenient = len(node.args) == 4 and isinstance(node.args[3], ast.Constant) and node.args[3].value is False
            if lenient and not (_is_tensorish(a) and _is_tensorish(b)):
                # a stored value whose branches give a Python number and a tensor (`if v > c:
                # out[i] = c else: out[i] = x[i]`): both in a dtype that holds them exactly
                # (runtime._lossless); the store converts the result as the loop converts each
                for v in (a, b):
                    if not (_is_tensorish(v) or v.fact.number):
                        raise Unsupported(f"a stored branch gives a {v.fact.kind}")
                top = max(_rank(a) if a.fact.kind == "tensor" else 0, _rank(b) if b.fact.kind == "tensor" else 0)
                na, nb = (_lift(v, top - _rank(v), self.c.lead) if v.batched else v.node for v in (a, b))
                k = self.c.ids.get(id(node))
                if k is not None:
                    self.c.exempt.add(k)     # its dtype is the lossless one, not one iteration's
                return _V(_helper("where_store", _lift(c, top, self.c.lead), na, nb), True,
                          Fact("tensor", top, None, ()))
            if a.fact.kind == b.fact.kind and a.fact.kind in ("int", "float"):
                # Python numbers of one kind on both sides (`lr = (i + 1) / k if i < k else 1.0`): a
                # batch of numbers, in Python's precision as every such batch (float64, int64),
                # whose later arithmetic casts it as one iteration's number is (_align)
                dtype = _torch("float64" if a.fact.kind == "float" else "int64")
                na, nb = (v.node if v.batched else _call(_torch("tensor"), [v.node], [ast.keyword("dtype", dtype)])
                          for v in (a, b))
                return _V(_call(_torch("where"), [c.node, na, nb]), True, Fact(a.fact.kind))
            top = max(_rank(a) if _is_tensorish(a) else 0, _rank(b) if _is_tensorish(b) else 0)
            if a.fact.kind != "tensor" and not a.batched or b.fact.kind != "tensor" and not b.batched:
                raise Unsupported("a branch between a per-iteration tensor and a Python value")
            na, nb = _align([a, b], lead=self.c.lead) if top else (a.node, b.node)
            return _call(_torch("where"), [_lift(c, top, self.c.lead), na, nb])
        if attr == "detached":
            v = args[0]
            return _call(_attr(v.node, "detach"), []) if v.fact.kind == "tensor" else v.node
        if attr == "guarded_index":
            c, i = args
            if not i.batched:
                return i.node
            integer = i.fact.kind == "int" or i.fact.kind == "tensor" and i.fact.dtype is not None and not (
                i.fact.dtype == torch.bool or i.fact.dtype.is_floating_point or i.fact.dtype.is_complex)
            if not c.batched or _rank(c) != 0 or not integer:
                raise Unsupported("an index read under a condition that is not one integer per iteration")
            return _V(_call(_torch("where"), [_lift(c, _rank(i), self.c.lead), i.node, _const(0)]), True, i.fact)
        if attr == "item":
            return _call(_attr(_name(self.c.av), "item"), [args[0].node])
        if attr == "fill_range":
            row, dim, lo, hi, v = args[:5]
            base = args[5] if len(args) == 6 else None
            if not row.batched or row.fact.kind != "tensor" or self.c.lead != 1 or v.batched and not (
                    v.fact.kind == "tensor" and v.fact.rank == 0):
                raise Unsupported("a slice assignment of other than one value into a per-iteration row")
            for b in (lo, hi):
                if b.batched and not (b.fact.kind in ("int", "bool") or b.fact.kind == "tensor" and b.fact.rank == 0):
                    raise Unsupported("a slice bound that is not one integer per iteration")
            extra = []
            if base is not None:
                if base.batched and base.fact.kind != "tensor":
                    raise Unsupported("a row stored before a slice fill from per-iteration Python values")
                extra = [base.node, _const(base.batched)]
            keywords = [ast.keyword(arg="inplace", value=_const(True))] \
                if id(node) == self.c.fill_in_place and base is None and not v.batched else []
            return _helper("fill_range", row.node, dim.node, lo.node, hi.node, v.node, _const(v.batched), *extra,
                           keywords=keywords)
        raise Unsupported(f"runtime helper `{attr}`")

    def _same_span(self, node):
        """`out[i, lo:hi] = x[i, lo:hi]` (analysis: `fill_range(out_i, 0, lo, hi, x_i[lo:hi])`):
        the same span of another per-iteration row, whose values are ragged, as a `where` of the
        span's mask between the whole rows (batching.fill_span checks that the rows have the
        same shape, so that Python's slice takes the same positions of both); else None."""
        row_n, dim_n, lo_n, hi_n, v_n = node.args
        if not isinstance(v_n, ast.Subscript) and isinstance(dim_n, ast.Constant) and dim_n.value == 0 \
                and type(dim_n.value) is int:
            return self._span_arange(node) or self._span_store(node)
        if not (isinstance(v_n, ast.Subscript) and isinstance(dim_n, ast.Constant) and type(dim_n.value) is int):
            return None
        items = v_n.slice.elts if isinstance(v_n.slice, ast.Tuple) else [v_n.slice]
        d = dim_n.value
        if len(items) != d + 1 or any(not (isinstance(p, ast.Slice) and p.lower is p.upper is p.step is None)
                                      for p in items[:d]):
            return None
        sl = items[d]
        same = lambda a, b: (a is None and (b is None or isinstance(b, ast.Constant) and b.value is None)) or (  # noqa: E731
            a is not None and b is not None and ast.dump(a) == ast.dump(b))
        if not isinstance(sl, ast.Slice) or sl.step is not None or not same(sl.lower, lo_n) and not (
                sl.lower is None and isinstance(lo_n, ast.Constant) and lo_n.value == 0) or not same(sl.upper, hi_n):
            return None
        row, v = self.expr(row_n), self.expr(v_n.value)
        lo, hi = self.expr(lo_n), self.expr(hi_n)
        if not row.batched or not v.batched or row.fact.kind != "tensor" or v.fact.kind != "tensor" or self.c.lead != 1:
            return None
        for b in (lo, hi):
            if b.batched and not (b.fact.kind in ("int", "bool") or b.fact.kind == "tensor" and b.fact.rank == 0):
                return None
        return _helper("fill_span", row.node, dim_n, lo.node, hi.node, v.node)

    def _span_store(self, node):
        """`out[i, :L] = x[i, :L] * 2 + 1` (analysis: `fill_range(out_i, 0, lo, hi, expr)`):
        elementwise arithmetic on ragged spans with the store's own bounds, and one-element
        values (_over_selection). Each element of the span's result is its own elements', so the
        arithmetic runs on the whole rows and the span's mask picks what the store writes
        (fill_span). With gradients the rows are read through span_guard: the positions outside
        the spans, whose derivatives may be infinite (`log` of padding), give their gradient to a
        detached copy. None where it is not such a value."""
        row_n, dim_n, lo_n, hi_n, v_n = node.args
        flipped = self._flipped_span(v_n)
        if flipped is not None:
            v_n = flipped
        subs, wide = [], []
        if not self._over_selection(v_n, subs, wide) or not subs or not all(self._span_of(x) for x in subs) \
                or len({ast.dump(x.slice) for x in subs}) != 1 or len({self.fact(x.value).rank for x in subs}) != 1:
            return None
        sl = subs[0].slice
        if isinstance(sl, ast.Tuple):
            sl = sl.elts[1]     # (`b[i, lo:hi]` of a tensor every iteration reads a row of: span_wholes)
        rank = self.fact(subs[0]).rank
        if any(self.fact(w).rank >= rank for w in wide):
            return None     # (a tensor as wide as the span would meet it along the span)
        same = lambda a, b: (a is None and (b is None or isinstance(b, ast.Constant) and b.value is None)) or (  # noqa: E731
            a is not None and b is not None and ast.dump(a) == ast.dump(b))
        if not (same(sl.lower, lo_n) or sl.lower is None and isinstance(lo_n, ast.Constant) and lo_n.value == 0) \
                or not same(sl.upper, hi_n):
            return None
        row, lo, hi = self.expr(row_n), self.expr(lo_n), self.expr(hi_n)
        if not row.batched or row.fact.kind != "tensor" or self.c.lead != 1:
            return None
        for b in (lo, hi):
            if b.batched and not (b.fact.kind in ("int", "bool") or b.fact.kind == "tensor" and b.fact.rank == 0):
                return None
        guarded = self._on_guarded_spans(subs, v_n)
        if guarded is None:
            return None
        mask, e = guarded
        if flipped is not None:
            # (`x[i, :L].flip(0)`: position p of the span takes the element at start + stop - 1 - p)
            e = _V(_helper("span_flip", e.node, lo.node, hi.node), True, e.fact)
        # (the mask's name bound before the value reads it: `(mask, value)[1]`)
        v = ast.Subscript(value=ast.Tuple(elts=[mask, e.node], ctx=ast.Load()), slice=_const(1), ctx=ast.Load())
        return _helper("fill_span", row.node, dim_n, lo.node, hi.node, v, *self._beside_spans(v_n, subs))

    def _span_arange(self, node):
        """`pos[i, T - L:] = torch.arange(L)` (or `torch.arange(a, b)`) into a ragged span of a 1-D
        row, ints per iteration: position p of the span takes a + (p - start) (batching.
        span_arange, which leaves the call to the loop where the span's length is not the
        range's, as setitem raises there); else None."""
        row_n, dim_n, lo_n, hi_n, v_n = node.args
        if not (isinstance(v_n, ast.Call) and not v_n.keywords and 1 <= len(v_n.args) <= 2
                and isinstance(v_n.func, ast.Attribute) and v_n.func.attr == "arange"
                and ast.unparse(v_n.func.value) == "torch" and "torch" not in self.c.local):
            return None
        found, obj = self.c.resolve("torch.arange")
        if not found or obj is not torch.arange:
            return None
        row, lo, hi = self.expr(row_n), self.expr(lo_n), self.expr(hi_n)
        ends = [self.expr(a) for a in v_n.args]
        if not row.batched or row.fact.kind != "tensor" or row.fact.rank != 1 or self.c.lead != 1 \
                or not any(v.batched for v in ends):
            return None
        for v in [lo, hi] + ends:
            if v.batched and not (v.fact.kind == "int" or v.fact.kind == "tensor" and v.fact.rank == 0
                                  and v.fact.dtype is not None and not v.fact.dtype.is_floating_point
                                  and not v.fact.dtype.is_complex and v.fact.dtype != torch.bool):
                return None     # (float ends: a float range, whose values are not ints)
        if any(not v.batched and not (isinstance(n, ast.Constant) and type(n.value) is int)
               and v.fact.kind != "int" for v, n in zip(ends, v_n.args)):
            return None
        a, b = (ends[0], ends[1]) if len(ends) == 2 else (_V(_const(0), False, Fact("int")), ends[0])
        values = _helper("span_arange", row.node, lo.node, hi.node, a.node, b.node)
        return _helper("fill_span", row.node, dim_n, lo.node, hi.node, values)

    def _flipped_span(self, v):
        """The span `b[lo:hi]` of `b[lo:hi].flip(0)` (or `torch.flip(b[lo:hi], (0,))`, `[0]`):
        the reversed span, its elements in the order of the span's own positions; else None."""
        if not (isinstance(v, ast.Call) and not v.keywords):
            return None
        f = v.func
        if isinstance(f, ast.Attribute) and f.attr == "flip" and len(v.args) == 1 and self._span_of(f.value):
            span, dims = f.value, v.args[0]
        elif isinstance(f, ast.Attribute) and f.attr == "flip" and len(v.args) == 2 and self._span_of(v.args[0]) \
                and ast.unparse(f.value) == "torch" and "torch" not in self.c.local:
            found, obj = self.c.resolve("torch.flip")
            if not found or obj is not torch.flip:
                return None
            span, dims = v.args[0], v.args[1]
        else:
            return None
        if isinstance(dims, (ast.Tuple, ast.List)) and len(dims.elts) == 1:
            dims = dims.elts[0]
        if not (isinstance(dims, ast.Constant) and dims.value == 0 and type(dims.value) is int):
            return None
        return span

    def _product(self, kind, a, b):
        """Products of per-iteration vectors and matrices (ranks 1 and 2), as the matmul an
        expert writes for the batch: `x_k @ W` is `X @ W`, `W @ x_k` is `X @ W.mT`,
        a dot of two per-iteration vectors is `vecdot`."""
        kind = {"inner": "dot", "ger": "outer"}.get(kind, kind)
        for v in (a, b):
            if v.fact.kind != "tensor":
                raise Unsupported(f"`{kind}` of a non-tensor")
        ra, rb = a.fact.rank, b.fact.rank
        want = {"dot": {(1, 1)}, "outer": {(1, 1)}, "mv": {(2, 1)}, "mm": {(2, 2)},
                "matmul": {(1, 1), (1, 2), (2, 1), (2, 2)}}[kind]
        if (ra, rb) not in want:
            raise Unsupported(f"`{kind}` of per-iteration ranks {ra} and {rb}")
        A, B = a.node, b.node

        def mat(x, y):
            return ast.BinOp(left=x, op=ast.MatMult(), right=y)

        def sub(x, *idx):
            return ast.Subscript(value=x, slice=ast.Tuple(elts=list(idx), ctx=ast.Load()), ctx=ast.Load())
        every, none = ast.Slice(), _const(None)
        ell = _const(Ellipsis)
        if kind == "outer":
            left = sub(A, ell, every, none) if a.batched else sub(A, every, none)
            right = sub(B, ell, none, every) if b.batched else B
            return ast.BinOp(left=left, op=ast.Mult(), right=right)
        if a.batched and b.batched:
            if (ra, rb) == (1, 1):
                # (vecdot conjugates its first operand; dot, inner and @ do not: conj() undoes it,
                # a free view, and nothing for real values)
                return _call(_torch("linalg.vecdot"), [_call(_attr(A, "conj"), []), B])
            if (ra, rb) == (2, 1):
                return sub(mat(A, sub(B, ell, none)), ell, _const(0))
            if (ra, rb) == (1, 2):
                return sub(mat(sub(A, ell, none, every), B), ell, _const(0), every)
            return mat(A, B)
        if a.batched:
            return mat(A, B)                       # (n, ..) @ W broadcasts W over the batch
        if (ra, rb) == (1, 1):
            return mat(B, A)                       # w . x_k: the same dot
        if (ra, rb) == (2, 1):
            # W @ x_k as X @ W.mT: one matrix product (W broadcast over the batch as `W @ X[..., None]`
            # is a batched product of n copies of W, many times slower)
            return mat(B, _attr(A, "mT"))
        return mat(A, B)                           # v @ X_k, W @ X_k: matmul broadcasts the batch

    def _gather(self, x: _V, args, keywords, extra, kextra):
        """`x.gather(dim, index)` (`torch.gather(x, dim, index)`) with an index of x's rank in each
        iteration (`lp.gather(1, tgt[i].unsqueeze(1))`): the same gather one dimension further on
        the batch, whose batch dimensions index alike in the values and the index. (An index the
        same in every iteration: vmap, which expands it.)"""
        named = dict(zip([k.arg for k in keywords], zip([k.value for k in keywords], kextra)))
        if set(named) - {"dim", "index"} or len(args) + len(named) != 2:
            raise Unsupported("`gather` with arguments besides dim and index")
        given = list(zip(args, extra))
        dim = given[0] if given else named.pop("dim", None)
        index = given[1] if len(given) > 1 else named.pop("index", None)
        if dim is None or index is None or dim[1].batched:
            raise Unsupported("`gather` without a fixed dimension and an index")
        r = x.fact.rank
        idx = index[1]
        if not idx.batched or idx.fact.kind != "tensor" or idx.fact.rank != r or r == 0:
            raise Unsupported("`gather` by an index that is not a per-iteration tensor of the value's rank")
        d = _dim(dim[0], self.c.facts.get(self.c.ids.get(id(dim[0]))), r, self.c.lead)
        return _call(_attr(x.node, "gather"), [d, idx.node])

    def _roll(self, x: _V, args, keywords, extra, kextra, r):
        """`torch.roll(x_k, shifts, dims)` / `x_k.roll(shifts, dims)` with one shift and at most one
        dimension (none: the row's elements in order, rolled, in the row's shape): the same roll of
        the batch where the shift is the same in every iteration; each row's own shift, `int(s[k])`
        (an augmentation's random offsets), gathers each row's elements from its own positions
        (batching.roll). A data move: the loop's values, and the gradients it routes back."""
        given = _bound("roll", ("shifts", "dims"), args, keywords, extra, kextra)
        if "shifts" not in given:
            raise Unsupported("`roll` with other arguments than one shift and one dimension")
        (s_node, s), dims = given["shifts"], given.get("dims")
        # (one shift, one dimension: also as 1-tuples, `roll(x, (k,), dims=(0,))`)
        if isinstance(s_node, (ast.Tuple, ast.List)) and len(s_node.elts) == 1:
            s_node = s_node.elts[0]
            s = self.expr(s_node)
        if dims is not None and isinstance(dims[0], (ast.Tuple, ast.List)) and len(dims[0].elts) == 1:
            dims = (dims[0].elts[0], self.expr(dims[0].elts[0]))
        if isinstance(s_node, (ast.Tuple, ast.List)) or dims is not None and isinstance(dims[0], (ast.Tuple, ast.List)):
            raise Unsupported("`roll` by several shifts or along several dimensions")
        if dims is not None and dims[1].batched:
            raise Unsupported("`roll` along a dimension that changes per iteration")
        d = None
        if dims is not None:
            if r == 0:
                raise Unsupported("`roll` of a 0-d value along a dimension")
            d = _dim(dims[0], self.c.facts.get(self.c.ids.get(id(dims[0]))), r, self.c.lead)
        if s.batched and not (_index_like(s) and self.c.lead == 1):
            raise Unsupported("`roll` by a per-iteration shift that is not an int or a 0-d integer tensor")
        return _helper("roll", x.node, s.node, d if d is not None else _const(None), _const(s.batched),
                       _const(self.c.lead))

    def _rot90(self, x: _V, args, keywords, extra, kextra, r):
        """`torch.rot90(x_k, k, dims)` / `x_k.rot90(k, dims)` with two literal dimensions (by
        default the first two): one rotation of the batch where `k` is the same in every iteration;
        each row's own `k` (`int(k[i])`, a 0-d integer tensor) takes its own rotation
        (batching.rot90). A data move: the loop's values and gradients."""
        given = _bound("rot90", ("k", "dims"), args, keywords, extra, kextra)
        k = given.get("k", (None, _V(_const(1), False, None)))[1]
        dims = given.get("dims")
        pair = dims[0].elts if dims is not None and isinstance(dims[0], (ast.Tuple, ast.List)) else None
        if dims is not None and (pair is None or len(pair) != 2 or dims[1].batched):
            raise Unsupported("`rot90` along other than two literal dimensions")
        if r < 2:
            raise Unsupported("`rot90` of a value with fewer than two dimensions")
        pair = pair if pair is not None else [_const(0), _const(1)]
        d = [_dim(e, None, r, self.c.lead) for e in pair]
        if k.batched and not (_index_like(k) and self.c.lead == 1):
            raise Unsupported("`rot90` by a per-iteration count that is not an int or a 0-d integer tensor")
        return _helper("rot90", x.node, k.node, ast.Tuple(elts=d, ctx=ast.Load()), _const(k.batched))

    def _join(self, name, node):
        seq = node.args[0]
        if not isinstance(seq, (ast.List, ast.Tuple)) or not seq.elts:
            raise Unsupported(f"torch.{name} of something other than a list of values")
        vals = [self.expr(e) for e in seq.elts]
        if not all(v.batched and v.fact.kind == "tensor" for v in vals) or len({v.fact.rank for v in vals}) != 1:
            raise Unsupported(f"torch.{name} of fixed values or of values of different ranks")
        r = vals[0].fact.rank
        dim = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "dim"), _const(0))
        if len(node.args) > 2 or any(k.arg != "dim" for k in node.keywords):
            raise Unsupported(f"torch.{name} with other arguments")
        d = _insert_dim(dim, r, self.c.lead) if name == "stack" else _dim(dim, None, r, self.c.lead)
        return _call(_torch(name if name != "concat" else "cat"),
                     [ast.List(elts=[v.node for v in vals], ctx=ast.Load())], [ast.keyword(arg="dim", value=d)])

    def _op(self, name, x: _V, args, keywords, node, method, func=None, ns="torch"):
        """`x.name(*args, **keywords)` (or `torch.name(x, ...)`) with `x` per-iteration."""
        r = x.fact.rank if x.fact.kind == "tensor" else 0
        if name == "prod" and x.batched and x.fact.kind == "tensor":
            x = _V(_helper("prod_input", x.node), True, x.fact)
        extra = [self.expr(a) for a in args]
        kextra = [self.expr(k.value) for k in keywords]
        if name in ("pow", "float_power") and any(v.batched and v.fact.number for v in [x] + extra + kextra):
            # (a tensor's pow of a Python number special-cases its value, and raises for an
            # integer tensor and a negative int: a batch of numbers is a tensor, which does neither)
            raise Unsupported(f"`{name}` of a per-iteration Python number (torch special-cases the number's value)")
        elementwise = name in ELEMENTWISE or (method and name in _VIEW_METHODS) or (
            name in ("max", "min") and extra and extra[0].fact.kind == "tensor")
        if elementwise:
            for k in keywords:
                if k.arg in ("dim", "axis", "dims", "keepdim", "out"):
                    raise Unsupported(f"`{k.arg}=` in `{name}`")
            _zero_dim_mix([x] + extra + kextra, name, self.fact(node))
            aligned = _align([x] + extra + kextra, lead=self.c.lead)
            kw = [ast.keyword(arg=k.arg, value=v) for k, v in zip(keywords, aligned[1 + len(extra):])]
            if method:
                return _call(_attr(aligned[0], name), aligned[1:1 + len(extra)], kw)
            return _call(fastast.clone(func), aligned[:1 + len(extra)], kw)
        if not x.batched or x.fact.kind != "tensor":
            raise Unsupported(f"`{name}` of a fixed first argument with per-iteration arguments")
        if name == "gather":
            return self._gather(x, args, keywords, extra, kextra)
        if name == "roll":
            return self._roll(x, args, keywords, extra, kextra, r)
        if name == "rot90":
            return self._rot90(x, args, keywords, extra, kextra, r)
        if any(v.batched for v in extra + kextra):
            raise Unsupported(f"`{name}` with per-iteration arguments besides the tensor")
        kw = {k.arg: k.value for k in keywords}
        recv = x.node
        if method:
            def call(nm, a, k):
                return _call(_attr(recv, nm), a, k)
        else:
            def call(nm, a, k):
                return _call(fastast.clone(func) if nm == name else _torch(nm), [recv] + list(a), k)

        def keyword_list(d):
            return [ast.keyword(arg=a, value=fastast.clone(v)) for a, v in d.items()]

        def arg_fact(a):
            return self.c.facts.get(self.c.ids.get(id(a)))

        if name == "to":
            if len(args) == 1 and not kw and isinstance(args[0], ast.Attribute) or kw.keys() <= {"dtype"} and not args:
                return call("to", [fastast.clone(a) for a in args], keyword_list(kw))
            raise Unsupported("`.to()` with a device or several arguments")
        if name in _LIKE and not method:
            # (`requires_grad=` and `out=` keep the loop in the analysis: analysis.loops._check_calls)
            return call(name, [fastast.clone(a) for a in args], keyword_list(kw))
        if name in _REDUCTIONS:
            return self._reduce(name, x, args, kw, call, keyword_list, r)
        if name == "norm" or name == "vector_norm":
            return self._norm(name, x, args, kw, r, ns)
        if name in _DIM_OPS:
            if "out" in kw:
                raise Unsupported(f"`out=` in `{name}`")
            dim = args[0] if args else kw.pop("dim", None)
            if dim is None:
                raise Unsupported(f"`{name}` without a dimension")
            if name in ("softmax", "log_softmax") and ns == "F" and len(args) > 1:
                raise Unsupported(f"F.{name} with positional arguments after dim")
            rest = [fastast.clone(a) for a in args[1:]]
            if r == 0:
                raise Unsupported(f"`{name}` of a 0-d value")
            return call(name, [_dim(dim, arg_fact(dim), r, self.c.lead)] + rest, keyword_list(kw))
        if name in _SORTS:
            # sort / argsort / topk / kthvalue / median along one dimension of each iteration's
            # value: the same call along that dimension of the batch (a named tuple where one
            # iteration's is, its .values / .indices per row)
            if "out" in kw or r == 0:
                raise Unsupported(f"`{name}` of a 0-d value or with `out=`")
            lead_args = 1 if name in ("topk", "kthvalue") else 0      # (k comes before dim)
            pos = list(args)
            if len(pos) > lead_args:
                dim = pos.pop(lead_args)
            elif "dim" in kw:
                dim = kw.pop("dim")
            elif name == "median":
                # median() of all the elements: one value (not a named tuple) per row
                flat = _call(_attr(x.node, "reshape"), [ast.Starred(value=self._batch_shape(x), ctx=ast.Load()),
                                                        _const(-1)])
                if pos or kw:
                    raise Unsupported("median() with arguments besides dim")
                return _attr(_call(_attr(flat, "median"), [_const(self.c.lead)]), "values")
            else:
                dim = _const(-1)
            d = _dim(dim, arg_fact(dim), r, self.c.lead)
            pos = [fastast.clone(a) for a in pos]
            if len(pos) < lead_args:       # (`topk(k=2, dim=0)`: k by keyword, so dim by keyword too)
                kw["dim"] = d
                return call(name, pos, keyword_list(kw))
            return call(name, pos[:lead_args] + [d] + pos[lead_args:], keyword_list(kw))
        if name in _TRAILING and not method and (ns == "F" or name != "embedding"):   # torch.embedding: (weight, ids)
            return self._trailing(name, args, kw, call, arg_fact, r, [v.node for v in extra],
                                  [ast.keyword(arg=k.arg, value=v.node) for k, v in zip(keywords, kextra)])
        if name == "normalize" and not method:
            if len(args) > 1:
                raise Unsupported("F.normalize with positional dim")
            dim = kw.pop("dim", _const(1))
            if r == 0:
                raise Unsupported("F.normalize of a 0-d value")
            kw["dim"] = _dim(dim, arg_fact(dim), r, self.c.lead)
            return call(name, [fastast.clone(a) for a in args], keyword_list(kw))
        if name == "unbind":
            # `a, b = row.unbind(0)` (and `for a, b in pairs`): a tuple of per-iteration slices
            dim = args[0] if args else kw.get("dim", _const(0))
            if len(args) + len(kw) > 1 or r == 0:
                raise Unsupported("unbind of a 0-d value, or with other arguments")
            return call("unbind", [_dim(dim, arg_fact(dim), r, self.c.lead)], [])
        if name == "unsqueeze":
            dim = args[0] if args else kw.get("dim")
            if dim is None or len(args) + len(kw) != 1:
                raise Unsupported("unsqueeze without one dimension")
            return call("unsqueeze", [_insert_dim(dim, r, self.c.lead)], [])
        if name == "squeeze":
            dim = args[0] if args else kw.get("dim")
            if dim is None or len(args) + len(kw) != 1 or r == 0:
                raise Unsupported("squeeze() without a dimension (it would drop a batch of one)")
            return call("squeeze", [_dim(dim, arg_fact(dim), r, self.c.lead)], [])
        if name == "flatten":
            if r == 0 or kw.keys() - {"start_dim", "end_dim"}:
                raise Unsupported("flatten of a 0-d value")
            start = args[0] if args else kw.get("start_dim", _const(0))
            end = args[1] if len(args) > 1 else kw.get("end_dim", _const(-1))
            return call("flatten", [_dim(start, arg_fact(start), r, self.c.lead), _dim(end, arg_fact(end), r, self.c.lead)], [])
        if name in ("reshape", "view") and method:
            if kw:
                raise Unsupported(f"`{name}` with keywords")
            shape = list(args)
            batch = ast.Starred(value=self._batch_shape(x), ctx=ast.Load())
            if len(shape) == 1 and _literal_int(shape[0]) is None and (
                    arg_fact(shape[0]) is None or arg_fact(shape[0]).kind != "int"):
                # one shape argument (a tuple, a list, a torch.Size)
                return call(name, [batch, ast.Starred(value=fastast.clone(shape[0]), ctx=ast.Load())], [])
            return call(name, [batch] + [fastast.clone(a) for a in shape], [])
        if name == "t" and not args and not kw:
            if r < 2:
                return recv
            return call("transpose", [_const(self.c.lead), _const(self.c.lead + 1)], [])
        if name in ("transpose", "swapaxes", "swapdims", "movedim") and len(args) == 2 and not kw:
            if r == 0:
                raise Unsupported(f"`{name}` of a 0-d value")
            return call(name, [_dim(a, arg_fact(a), r, self.c.lead) for a in args], [])
        if name == "permute" and method and not kw:
            dims = args[0].elts if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)) else args
            if len(dims) != r or any(_literal_int(d) is None or not -r <= _literal_int(d) < r for d in dims):
                raise Unsupported("permute with computed or out-of-range dimensions")
            norm = [_literal_int(d) % r for d in dims]
            lead = self.c.lead
            return call("permute", [_const(k) for k in range(lead)] + [_const(k + lead) for k in norm], [])
        if name == "flip":
            dims = args[0] if args else kw.get("dims")
            if dims is None or not isinstance(dims, (ast.Tuple, ast.List)) or r == 0:
                raise Unsupported("flip without a list of dimensions")
            return call("flip", [_dim(dims, None, r, self.c.lead)], [])
        raise Unsupported(f"`{name}` on a per-iteration tensor")

    def _module(self, text, f, node, mod):
        """`model(x)` on a per-iteration tensor, for modules made of layers that treat the rows
        of their input's first dimension independently (batching.module_form): the module on
        the batch, its leading dimensions merged into that first dimension where it needs its
        own rank (conv, pooling); re-checked on every call (_avb.rows), as modules change."""
        from ..batching import module_form
        if len(node.args) != 1 or node.keywords:
            raise Unsupported(f"the module `{text}` called with other than one positional argument")
        x = self.expr(node.args[0])
        if not x.batched or x.fact.kind != "tensor":
            raise Unsupported(f"the module `{text}` called on a value that is the same in every iteration")
        r = x.fact.rank
        if module_form(mod, r) is None:
            raise Unsupported(f"the module `{text}` ({type(mod).__name__}): no layer-by-layer batched form")
        return _helper("rows", fastast.clone(f), x.node, _const(r), _const(self.c.lead))

    def _class_loss(self, f, node):
        """F.cross_entropy / F.nll_loss of one iteration's (rows, classes) scores, or (classes,),
        against class indices: per-row losses of the whole batch, then each iteration's own
        reduction (a mean over the rows its targets do not ignore)."""
        name = f.attr if isinstance(f, ast.Attribute) else ast.unparse(f)
        fixed = self._loss_options(name, node, {"reduction": _const("mean"), "ignore_index": _const(-100)},
                                   "with class weights, label smoothing or positional options")
        if self._span_of(node.args[0]) and self._span_of(node.args[1]):
            return self._span_class_loss(f, name, node, fixed)
        x, t = self.expr(node.args[0]), self.expr(node.args[1])
        if not x.batched or x.fact.kind != "tensor" or t.fact.kind != "tensor" or not t.batched:
            raise Unsupported(f"`{name}` of scores or targets that are the same in every iteration")
        r = x.fact.rank
        if r not in (1, 2) or t.fact.rank != r - 1 or t.fact.dtype not in (torch.int64, torch.int32, torch.uint8):
            raise Unsupported(f"`{name}` other than (rows, classes) scores against class indices")
        # (the reduction and ignore_index are checked by _avb.class_loss)
        return _helper("class_loss", fastast.clone(f), x.node, t.node, _const(r), _const(self.c.lead),
                       fixed["reduction"], fixed["ignore_index"])

    def _loss_options(self, name, node, defaults, refusal):
        """A loss call's two positional operands and its keyword options, each the same in every
        iteration: {option: its expression, or the default's}; anything else is Unsupported."""
        if len(node.args) != 2 or {k.arg for k in node.keywords} - set(defaults):
            raise Unsupported(f"`{name}` {refusal}")
        fixed = dict(defaults)
        for k in node.keywords:
            v = self.expr(k.value)
            if v.batched:
                raise Unsupported(f"`{name}` with a per-iteration {k.arg}")
            fixed[k.arg] = v.node
        return fixed

    def _kl_div(self, f, node):
        """F.kl_div(input_k, target_k, reduction=.., log_target=..) of tensors of one shape in every
        iteration: the elementwise terms of the whole batch (reduction "none"), then each
        iteration's own reduction over its dimensions (its "sum", "mean", or "batchmean": the
        sum over its first dimension's size). vmap has no batching rule of its own for it."""
        fixed = self._loss_options("F.kl_div", node, {"reduction": _const("mean"), "log_target": _const(False)},
                                   "with positional options or legacy size_average / reduce")
        x, t = self.expr(node.args[0]), self.expr(node.args[1])
        if not (x.batched and t.batched) or x.fact.kind != "tensor" or t.fact.kind != "tensor" \
                or x.fact.rank != t.fact.rank:
            raise Unsupported("`F.kl_div` of values that are not per-iteration tensors of one rank")
        return _helper("kl_div", fastast.clone(f), x.node, t.node, _const(x.fact.rank), _const(self.c.lead),
                       fixed["reduction"], fixed["log_target"])

    def _trailing(self, name, args, kw, call, arg_fact, r, new_args, new_keywords):
        """layer_norm / rms_norm over the last len(normalized_shape) dimensions, embedding and
        one_hot (a new last dimension): the batch keeps its leading dimension through them."""
        if name in ("layer_norm", "rms_norm"):
            shape = args[0] if args else kw.get("normalized_shape")
            if shape is None:
                raise Unsupported(f"`{name}` without normalized_shape")
            if isinstance(shape, (ast.Tuple, ast.List)):
                k = len(shape.elts)
            else:
                f = arg_fact(shape)
                k = f.rank if f is not None and f.kind in ("tuple", "size") else \
                    1 if f is not None and f.kind == "int" else None
            if k is None or k > r:
                # normalized over more dimensions than one iteration has: the loop raises
                raise Unsupported(f"`{name}` over dimensions the slice may not have")
        elif name == "embedding":
            if len(args) > 2 or \
                    kw.keys() - {"weight", "padding_idx"} or not (args or "weight" in kw):
                # max_norm renormalizes rows of the table in place; sparse / scale_grad_by_freq
                # change the gradient: the loop as written
                raise Unsupported("F.embedding with options beyond weight and padding_idx")
        else:  # one_hot: with num_classes given (without it, the batch's own maximum decides)
            classes = args[0] if args else kw.get("num_classes")
            f = arg_fact(classes) if classes is not None else None
            if classes is None or len(args) + len(kw) != 1 or not (
                    isinstance(classes, ast.Constant) and isinstance(classes.value, int) and classes.value > 0
                    or f is not None and f.kind == "int"):
                raise Unsupported("F.one_hot without a number of classes")
            if not isinstance(classes, ast.Constant):
                # -1 means "each iteration's own maximum": never from the batch (_avb.classes raises)
                return call(name, [_helper("classes", new_args[0] if new_args else new_keywords[0].value)], [])
        # the other arguments as the batched body computes them (`m.shape[1]` is the slice's)
        return call(name, new_args, new_keywords)

    def _reduce(self, name, x, args, kw, call, keyword_list, r):
        tuple_ok = _REDUCTIONS[name]
        if "out" in kw:
            raise Unsupported(f"`out=` in `{name}`")
        rest = list(args)
        dim = None
        if name in ("std", "var") and rest and (isinstance(rest[0], ast.Constant) and isinstance(rest[0].value, bool)):
            kw = {"unbiased": rest.pop(0), **kw}
        if rest:
            dim = rest.pop(0)
        if "dim" in kw:
            dim = kw.pop("dim")
        if "axis" in kw:
            dim = kw.pop("axis")
        if isinstance(dim, ast.Constant) and dim.value is None:
            dim = None
        if name in ("amax", "amin") and isinstance(dim, (ast.Tuple, ast.List)) and not dim.elts:
            dim = None     # amax(x, dim=()) reduces every dimension
        if dim is None:
            if rest or kw.get("keepdim") is not None:
                raise Unsupported(f"`{name}` over every dimension with more arguments")
            if name == "logsumexp":
                raise Unsupported("logsumexp without a dimension")
            if name in ("max", "min"):
                # max() spreads its gradient over the tied (or NaN) elements, amax over the
                # equal ones only: a helper with max()'s own backward, per row
                dims = _all_dims(r, self.c.lead) if r else ast.Tuple(elts=[_const(self.c.lead)], ctx=ast.Load())
                target = x.node if r else _call(_attr(x.node, "unsqueeze"), [_const(self.c.lead)])
                return _helper("extreme", target, dims, _const(name == "max"))
            fname = name
            if r == 0:
                # a 0-d value reduces to itself, with the reduction's dtype: as a column of one
                column = _call(_attr(x.node, "unsqueeze"), [_const(self.c.lead)])
                return _call(_attr(column, fname), [_const(self.c.lead)], keyword_list(kw))
            if tuple_ok:
                return _call(_attr(x.node, fname), [], [ast.keyword(arg="dim", value=_all_dims(r, self.c.lead))] + keyword_list(kw))
            if r == 1:
                return _call(_attr(x.node, fname), [_const(self.c.lead)], keyword_list(kw))
            flat = _call(_attr(x.node, "reshape"), [ast.Starred(value=self._batch_shape(x), ctx=ast.Load()), _const(-1)])
            return _call(_attr(flat, fname), [_const(self.c.lead)], keyword_list(kw))
        if r == 0:
            raise Unsupported(f"`{name}` along a dimension of a 0-d value")
        if isinstance(dim, (ast.Tuple, ast.List)) and not tuple_ok:
            raise Unsupported(f"`{name}` over several dimensions")
        d = _dim(dim, self.c.facts.get(self.c.ids.get(id(dim))), r, self.c.lead)
        if rest and name in ("std", "var"):
            kw = {"unbiased": rest.pop(0), **kw}     # std(dim, unbiased, keepdim)
        if rest:
            keep = rest.pop(0)
            kw = {"keepdim": keep, **kw}
        if rest:
            raise Unsupported(f"`{name}` with more positional arguments")
        return call(name, [d], keyword_list(kw))

    def _norm(self, name, x, args, kw, r, ns="torch"):
        rest = list(args)
        p = rest.pop(0) if rest else kw.pop("p", kw.pop("ord", None))
        dim = rest.pop(0) if rest else kw.pop("dim", None)
        keep = rest.pop(0) if rest else kw.pop("keepdim", None)
        if rest or kw.keys() - {"dtype"}:
            raise Unsupported("norm with more arguments")
        if isinstance(dim, ast.Constant) and dim.value is None:
            dim = None
        if ns == "linalg" and dim is None and r >= 2 and not (p is None or isinstance(p, ast.Constant)
                                                             and p.value in ("fro", None)):
            # torch.linalg.norm(A, ord) of a matrix is a matrix norm (spectral for 2, the largest
            # column sum for 1), not the flattened vector norm torch.norm gives
            raise Unsupported("linalg.norm with an order of a matrix (a matrix norm)")
        if isinstance(p, ast.Constant) and p.value in ("fro", None):
            p = None
        if p is not None and not (isinstance(p, ast.Constant) and isinstance(p.value, (int, float))
                                  and not isinstance(p.value, bool)):
            raise Unsupported("a norm other than a vector p-norm")
        extra = [ast.keyword(arg="dtype", value=fastast.clone(kw["dtype"]))] if "dtype" in kw else []
        if keep is not None:
            extra.append(ast.keyword(arg="keepdim", value=fastast.clone(keep)))
        ord_ = [ast.keyword(arg="ord", value=fastast.clone(p))] if p is not None else []
        if dim is None:
            if keep is not None:
                raise Unsupported("norm over every dimension with keepdim")
            target = x.node if r else _call(_attr(x.node, "unsqueeze"), [_const(self.c.lead)])
            dims = _all_dims(r, self.c.lead) if r else ast.Tuple(elts=[_const(self.c.lead)], ctx=ast.Load())
            return _call(_torch("linalg.vector_norm"), [target], ord_ + [ast.keyword(arg="dim", value=dims)] + extra)
        if r == 0:
            raise Unsupported("norm along a dimension of a 0-d value")
        if isinstance(dim, (ast.Tuple, ast.List)) and len(dim.elts) != 1 and name == "norm":
            raise Unsupported("norm over two dimensions (a matrix norm)")
        d = _dim(dim, self.c.facts.get(self.c.ids.get(id(dim))), r, self.c.lead)
        return _call(_torch("linalg.vector_norm"), [x.node], ord_ + [ast.keyword(arg="dim", value=d)] + extra)


def batched_def(fdef: ast.FunctionDef, facts: dict, ids: dict, batched_params, av: str, resolve,
                name: str, probe: bool = False, batched_nodes: dict | None = None, lead: int = 1,
                exempt_nodes: set | None = None, index: str | None = None) -> ast.FunctionDef:
    """The batched body (see the module docstring); raises Unsupported. `ids` numbers the nodes
    of `fdef` as `probe_def` did (`number_nodes` of the same tree); `batched_nodes` receives,
    per node number, whether the rewritten value carries the batch."""
    ctx = _Ctx(facts, ids, set(batched_params), av, resolve, probe, lead)
    if batched_nodes is not None:
        ctx.seen = batched_nodes
    if exempt_nodes is not None:
        ctx.exempt = exempt_nodes
    ctx.local |= {a.arg for a in fdef.args.args}
    ctx.fill_in_place = _sole_fill(fdef, av)
    if index is not None and not any(isinstance(n, ast.Name) and n.id == index and not isinstance(n.ctx, ast.Load)
                                     for n in fastast.walk(fdef)):
        ctx.index = index
    batcher = _Batcher(ctx)
    stmts = batcher.body(fdef.body)
    batcher.check_mixed()
    new = ast.FunctionDef(name=name, args=ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=a.arg) for a in fdef.args.args] + [ast.arg(arg="_avb_n")],
        vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=stmts, decorator_list=[], returns=None, type_params=[])
    if not hasattr(ast.FunctionDef, "type_params"):
        del new.type_params
    ast.copy_location(new, fdef)
    ast.fix_missing_locations(new)
    return new
