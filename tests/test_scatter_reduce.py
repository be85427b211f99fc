"""Per-bin maximum, minimum and product over repeated indices (analysis._reduce_store,
runtime._scatter_reduce_prep): `best[c[i]] = torch.maximum(best[c[i]], v[i])`, torch.minimum,
the two-tensor torch.max / torch.min, Python's max / min, `out[idx[i]] *= v[i]` and
`out[idx[i]] = out[idx[i]] * v[i]`, as one scatter_reduce_ from each bin's own value. Checked
against the loop (`fn` itself) on the same arguments: results and the arguments after the call
bit for bit (max / min pick values: -0.0 and NaN included), float products up to rounding,
errors with their messages, gradients; and the path taken, the loop where a difference from
the loop is possible (NaN for Python's max / min, +0.0 beside -0.0, gradients, a step in
another dtype than the output's, float16 products, out-of-range and uint8 indices, aliasing)."""
import copy
import types

import pytest
import torch

from autovec import autovec, explain
from conftest import outcome


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _exact(got, want, close=False):
    """The same values bit for bit (signs of zeros, NaN where NaN), or up to rounding with `close`."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _exact(a, b, close)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
        if close and want.is_floating_point():
            torch.testing.assert_close(got, want, equal_nan=True)
        elif want.is_floating_point() or want.is_complex():
            g, w = torch.view_as_real(got) if got.is_complex() else got, \
                torch.view_as_real(want) if want.is_complex() else want
            assert torch.equal(g.isnan(), w.isnan()), (got, want)
            ok = ~w.isnan()
            assert torch.equal(g[ok], w[ok]) and torch.equal(g[ok].signbit(), w[ok].signbit()), (got, want)
        else:
            assert torch.equal(got, want), (got, want)
    else:
        assert got == want


def _check(fn, args, path="vectorized", close=False):
    """autovec(fn) agrees with fn on `args` (result or error, and the arguments after the
    call), and `explain` reports `path`."""
    a, b = copy.deepcopy(args), copy.deepcopy(args)
    want = outcome(fn, *a)
    got = outcome(autovec(fn), *b)
    _exact(got, want, close)
    _exact(list(b), list(a), close)
    ex = explain(fn, *copy.deepcopy(args))
    assert ex.path == path, str(ex)
    return ex


# --- the forms ---

def t_maximum(best, c, v):
    for i in range(c.shape[0]):
        best[c[i]] = torch.maximum(best[c[i]], v[i])
    return best


def t_maximum_swapped(best, c, v):
    for i in range(c.shape[0]):
        best[c[i]] = torch.maximum(v[i], best[c[i]])
    return best


def t_minimum(best, c, v):
    for i in range(len(c)):
        best[c[i]] = torch.minimum(best[c[i]], v[i])
    return best


def t_max(best, c, v):
    for i in range(c.shape[0]):
        best[c[i]] = torch.max(best[c[i]], v[i])
    return best


def t_min_swapped(best, c, v):
    for i in range(c.shape[0]):
        best[c[i]] = torch.min(v[i], best[c[i]])
    return best


def py_max(best, c, v):
    for i in range(c.shape[0]):
        best[c[i]] = max(best[c[i]], v[i])
    return best


def py_max_swapped(best, c, v):
    for i in range(c.shape[0]):
        best[c[i]] = max(v[i], best[c[i]])
    return best


def py_min(best, c, v):
    for i in range(c.shape[0]):
        best[c[i]] = min(best[c[i]], v[i])
    return best


def prod_inplace(out, c, v):
    for i in range(c.shape[0]):
        out[c[i]] *= v[i]
    return out


def prod_assign(out, c, v):
    for i in range(c.shape[0]):
        out[c[i]] = out[c[i]] * v[i]
    return out


def prod_assign_swapped(out, c, v):
    for i in range(c.shape[0]):
        out[c[i]] = v[i] * out[c[i]]
    return out


def graph_max(agg, dst, msg):
    for e in range(dst.shape[0]):
        agg[dst[e]] = torch.maximum(agg[dst[e]], msg[e])
    return agg


def graph_max_src(agg, src, dst, x, w):
    for e in range(dst.shape[0]):
        agg[dst[e]] = torch.maximum(agg[dst[e]], x[src[e]] * w[e])
    return agg


def pair_max(out, a, b, v):
    for i in range(a.shape[0]):
        out[a[i], b[i]] = torch.maximum(out[a[i], b[i]], v[i])
    return out


def pair_prod(out, a, b, v):
    for i in range(a.shape[0]):
        out[a[i], b[i]] *= v[i]
    return out


def masked_max(best, c, v, keep):
    for i in range(c.shape[0]):
        if keep[i]:
            best[c[i]] = torch.maximum(best[c[i]], v[i])
    return best


def masked_py_min(best, c, v):
    for i in range(c.shape[0]):
        if v[i] > 0:
            best[c[i]] = min(best[c[i]], v[i])
    return best


def masked_prod(out, c, v):
    for i in range(c.shape[0]):
        if v[i] != 0:
            out[c[i]] *= v[i]
    return out


def two_outputs(lo, hi, c, v):
    for i in range(c.shape[0]):
        lo[c[i]] = torch.minimum(lo[c[i]], v[i])
        hi[c[i]] = torch.maximum(hi[c[i]], v[i])
    return lo, hi


_EXTREMES = [t_maximum, t_maximum_swapped, t_minimum, t_max, t_min_swapped, py_max, py_max_swapped, py_min]
_PRODUCTS = [prod_inplace, prod_assign, prod_assign_swapped]


def _bins(n=40, k=6, lo=0):
    return torch.randint(lo, k, (n,))


@pytest.mark.parametrize("fn", _EXTREMES)
def test_extremes_float(fn):
    c, v = _bins(), torch.randn(40)
    ex = _check(fn, (torch.randn(6), c, v))
    assert ex.loops[0].strategy == "reduction"
    assert "a per-bin m" in ex.loops[0].reason and "scatter_reduce" in ex.loops[0].reason
    _check(fn, (torch.full((6,), float("-inf"), dtype=torch.float64), c, v.double()))
    # unique indices (a permutation), and bins nothing writes
    _check(fn, (torch.randn(40), torch.randperm(40), v))
    _check(fn, (torch.randn(50), torch.randperm(40), v))


@pytest.mark.parametrize("fn", _PRODUCTS)
def test_products(fn):
    c = _bins()
    v = torch.rand(40) + 0.5
    _check(fn, (torch.randn(6), c, v), close=True)
    _check(fn, (torch.randn(6, dtype=torch.float64), c, v.double()), close=True)
    # integers wrap modulo 2**64 in any order: exact
    _check(fn, (torch.randint(-5, 5, (6,)), c, torch.randint(-2 ** 40, 2 ** 40, (40,))))
    _check(fn, (torch.randint(-5, 5, (6,), dtype=torch.int32), c, torch.randint(-9, 9, (40,), dtype=torch.int32)))
    _check(fn, (torch.randint(-5, 5, (6,), dtype=torch.int8), c, torch.randint(-9, 9, (40,), dtype=torch.int8)))
    # zeros, infinities and NaN give the same in any order
    w = v.clone()
    w[3], w[7], w[11] = 0.0, float("inf"), float("nan")
    _check(fn, (torch.randn(6), c, w), close=True)


@pytest.mark.parametrize("fn", [t_maximum, t_min_swapped, py_max, py_min] + _PRODUCTS)
def test_ints_and_bools(fn):
    c = _bins()
    _check(fn, (torch.randint(-9, 9, (6,)), c, torch.randint(-9, 9, (40,))))
    _check(fn, (torch.randint(-9, 9, (6,), dtype=torch.int32), c, torch.randint(-9, 9, (40,), dtype=torch.int32)))
    # int32 values into int64 bins: each step computes in int64, exactly
    _check(fn, (torch.randint(-9, 9, (6,)), c, torch.randint(-9, 9, (40,), dtype=torch.int32)))
    # bool: max is `or`, min and product `and`
    _check(fn, (torch.rand(6) > 0.5, c, torch.rand(40) > 0.5))


@pytest.mark.parametrize("fn", [t_maximum, t_minimum, py_max, py_max_swapped])
def test_half_extremes_are_exact(fn):
    c = _bins()
    for dt in (torch.float16, torch.bfloat16):
        _check(fn, (torch.randn(6).to(dt), c, torch.randn(40).to(dt)))


def test_half_products_keep_the_loop():
    c = _bins()
    for fn in _PRODUCTS:
        for dt in (torch.float16, torch.bfloat16):
            _check(fn, (torch.randn(6).to(dt), c, (torch.rand(40) + 0.5).to(dt)), path="python")


def test_rows():
    dst, src = _bins(60, 7), _bins(60, 9)
    msg = torch.randn(60, 4)
    ex = _check(graph_max, (torch.full((7, 4), float("-inf")), dst, msg))
    assert "a per-bin maximum (amax)" in ex.loops[0].reason
    _check(graph_max, (torch.randn(7, 4), dst, msg))
    _check(graph_max_src, (torch.zeros(7, 4), src, dst, torch.randn(9, 4), torch.rand(60) + 0.1))
    for fn in _EXTREMES[:5]:
        _check(fn, (torch.randn(7, 3, 2), dst, torch.randn(60, 3, 2)))
    for fn in _PRODUCTS:
        _check(fn, (torch.randn(7, 3), dst, torch.rand(60, 3) + 0.5), close=True)
    # a value broadcast into the row: one number per edge, or leading 1s the store drops
    _check(graph_max, (torch.randn(7, 4), dst, torch.randn(60)))
    _check(graph_max, (torch.randn(7, 4), dst, torch.randn(60, 1)))
    _check(graph_max, (torch.randn(7, 4), dst, torch.randn(60, 1, 4)))
    _check(prod_assign, (torch.randn(7, 4), dst, torch.rand(60, 1, 4) + 0.5), close=True)
    # (float16 rows against float32 numbers: torch computes in float16, as the batch does)
    _check(graph_max, (torch.randn(7, 4).half(), dst, torch.randn(60)))


def test_rows_that_do_not_fit_keep_the_loop():
    dst = _bins(60, 7)
    # a wider value than the element: the loop raises (after the writes before it, none here)
    _check(t_maximum, (torch.randn(7), dst, torch.randn(60, 2)), path="python")
    _check(graph_max, (torch.randn(7, 4), dst, torch.randn(60, 2, 4)), path="python")
    ex = _check(graph_max, (torch.randn(7, 1), dst, torch.randn(60, 4)), path="python")
    assert "a value that does not fit the element it updates" in str(ex)
    # `*=` in place adds no dimension: leading 1s raise there (not in `out[k] = out[k] * v`)
    _check(prod_inplace, (torch.randn(7, 4), dst, torch.rand(60, 1, 4) + 0.5), path="python")
    # Python's max of several elements: the loop raises (bool of a tensor of several values)
    _check(py_max, (torch.randn(7, 4), dst, torch.randn(60, 4)), path="python")


def test_trailing_full_slices():
    def sliced(agg, dst, msg):
        for e in range(dst.shape[0]):
            agg[dst[e], :] = torch.minimum(agg[dst[e], :], msg[e])
        return agg

    _check(sliced, (torch.randn(7, 4), _bins(60, 7), torch.randn(60, 4)))


def test_several_indices():
    a, b = _bins(50, 4), _bins(50, 5)
    _check(pair_max, (torch.randn(4, 5), a, b, torch.randn(50)))
    _check(pair_max, (torch.randn(4, 5, 3), a, b, torch.randn(50, 3)))
    _check(pair_prod, (torch.randn(4, 5), a, b, torch.rand(50) + 0.5), close=True)
    # a target that is not contiguous: reduced in a copy, copied back
    _check(pair_max, (torch.randn(5, 4).t(), a, b, torch.randn(50)))
    _check(pair_prod, (torch.randn(5, 4).t(), a, b, torch.rand(50) + 0.5), close=True)
    # negative indices count from the end, as in the loop
    _check(pair_max, (torch.randn(4, 5), a - 4, b - 5, torch.randn(50)))


def test_masks():
    c, v = _bins(), torch.randn(40)
    _check(masked_max, (torch.randn(6), c, v, torch.rand(40) > 0.5))
    _check(masked_max, (torch.randn(6), c, v, torch.zeros(40, dtype=torch.bool)))
    _check(masked_py_min, (torch.randn(6), c, v))
    w = v.clone()
    w[::3] = 0
    _check(masked_prod, (torch.ones(6), c, w), close=True)
    # an index out of range only where the condition is off: the loop never reads it
    cc = c.clone()
    keep = torch.rand(40) > 0.5
    cc[~keep] = 99
    _check(masked_max, (torch.randn(6), cc, v, keep))
    _check(two_outputs, (torch.full((6,), 9.0), torch.full((6,), -9.0), c, v))


def test_nan():
    c, v = _bins(), torch.randn(40)
    w = v.clone()
    w[5] = float("nan")
    start = torch.randn(6)
    start[2] = float("nan")
    # torch.maximum / minimum propagate NaN as amax / amin do on a CPU
    for fn in (t_maximum, t_maximum_swapped, t_minimum, t_max, t_min_swapped):
        _check(fn, (torch.randn(6), c, w))
        _check(fn, (start, c, v))
    # Python's max / min skip NaN or keep it by the operands' order: the loop
    for fn in (py_max, py_max_swapped, py_min):
        _check(fn, (torch.randn(6), c, w), path="python")
        _check(fn, (start, c, v), path="python")
        _check(fn, (torch.randn(6), c, v))


def test_signed_zeros():
    c = _bins()
    v = torch.randn(40).clamp(min=0)                 # +0.0 and positive numbers
    neg = -torch.randn(40).clamp(min=0)              # -0.0 and negative numbers
    for fn in _EXTREMES:
        # +0.0 beside -0.0: a tie keeps one operand by the loop's order
        _check(fn, (torch.zeros(6), c, neg), path="python")
        _check(fn, (torch.zeros(6).neg(), c, v), path="python")
        mixed = v.clone()
        mixed[::4] = -0.0
        _check(fn, (torch.ones(6), c, mixed), path="python")
        # zeros of one sign only: ties between equal values
        _check(fn, (torch.zeros(6), c, v))
        _check(fn, (torch.zeros(6).neg(), c, neg))
    # a product's sign is that of its factors in any order
    _check(prod_inplace, (torch.zeros(6).neg(), c, torch.randn(40)), close=True)


def test_dtype_conversions_keep_the_loop():
    c, v = _bins(), torch.randn(40) * 5
    for fn in (t_maximum, py_max, prod_assign):
        # each step computes in float32 and stores into int64 (truncating every step)
        _check(fn, (torch.randint(-9, 9, (6,)), c, v), path="python")
        # float32 into float16: each step rounds
        _check(fn, (torch.randn(6).half(), c, v), path="python")
        # float64 into float32
        _check(fn, (torch.randn(6), c, v.double()), path="python")
        # int64 compared in float32 (a 2**24 + 1 rounds)
        _check(fn, (torch.full((6,), 2 ** 24 + 1), c, torch.full((40,), float(2 ** 24))), path="python")
        # bool values into int bins: computed in int64, exact
        _check(fn, (torch.randint(-2, 3, (6,)), c, torch.rand(40) > 0.5))
    # `*=` of floats into ints: the loop raises (its in-place cast)
    _check(prod_inplace, (torch.randint(-9, 9, (6,)), c, v), path="python")
    # float32 values into float64 bins: computed in float64 exactly as the batch
    _check(t_maximum, (torch.randn(6, dtype=torch.float64), c, v))


def test_complex_keeps_the_loop():
    c = _bins()
    z = torch.randn(40, dtype=torch.complex64)
    for fn in (t_maximum, t_minimum, py_max):
        _check(fn, (torch.zeros(6, dtype=torch.complex64), c, z), path="python")     # (the loop raises)
    for fn in _PRODUCTS:
        _check(fn, (torch.ones(6, dtype=torch.complex64), c, z), path="python", close=True)


def test_product_range():
    c = torch.zeros(3, dtype=torch.long)
    # [1e30, 1e30, 1e-30] in float32: the loop reaches inf first; a product of the last two first does not
    v = torch.tensor([1e30, 1e30, 1e-30])
    for fn in _PRODUCTS:
        _check(fn, (torch.ones(2), c, v), path="python")
        _check(fn, (torch.ones(2), c, torch.tensor([1e-30, 1e-30, 1e30])), path="python")
        # (the start counts: 1e30 * 1e30 overflows; one bin at a time: other bins' factors do not)
        _check(fn, (torch.tensor([1e30, 1.0]), torch.tensor([0, 1, 1]), torch.tensor([1e30, 1e30, 1e-30])),
               path="python")
        _check(fn, (torch.tensor([1.0, 1.0]), torch.tensor([0, 1, 0]), torch.tensor([1e20, 1e20, 1e-20])),
               close=True)
        # a subnormal factor: the loop's rounding to it is no order-free value
        _check(fn, (torch.ones(2), c, torch.tensor([1e-40, 2.0, 3.0])), path="python")


def test_out_of_range_indices():
    c = _bins()
    c[17] = 6
    v = torch.randn(40)
    for fn in [t_maximum, py_max, prod_inplace, prod_assign]:
        # the loop raises after writing the iterations before: the same error, the same writes
        _check(fn, (torch.randn(6), c, v), path="python")
        _check(fn, (torch.randn(6), c - 13, v), path="python")
    _check(pair_max, (torch.randn(4, 5), _bins(50, 4), _bins(50, 6), torch.randn(50)), path="python")


def test_uint8_and_int32_indices():
    c, v = _bins(), torch.randn(40)
    # a uint8 tensor indexes as a byte mask: the loop decides
    for fn in (t_maximum, py_min, prod_inplace):
        _check(fn, (torch.randn(6), c.to(torch.uint8), v), path="python", close=True)
        _check(fn, (torch.randn(6), c.to(torch.int32), v), close=True)


def test_gradients_keep_the_loop():
    c = _bins()
    v = torch.randn(40)
    v[3] = v[9]            # (a tie)
    c[3] = c[9]
    for fn in (t_maximum, t_minimum, py_max, prod_assign):
        for with_grad in ("values", "start"):
            vv = v.clone().requires_grad_(with_grad == "values")
            w = torch.randn(6, requires_grad=with_grad == "start")
            start_a, start_b = w.clone(), w.clone()         # (a non-leaf: the loop may write into it)
            va, vb = vv * 1.0, vv * 1.0
            want = fn(start_a, c, va)
            got = autovec(fn)(start_b, c, vb)
            _exact(got, want, close=True)
            leaf = vv if with_grad == "values" else w
            # (the loop's backward may raise: a view its step saved was written since)
            ga = outcome(lambda: torch.autograd.grad(want.sum(), leaf))
            gb = outcome(lambda: torch.autograd.grad(got.sum(), leaf))
            _exact(gb, ga, close=True)
            assert explain(fn, w.clone(), c, vv * 1.0).path == "python"
        # under no_grad the values' requires_grad does not matter
        with torch.no_grad():
            _check(fn, (torch.randn(6), c, v.clone().requires_grad_()))
    # a leaf that requires grad written in place: the loop raises
    _check(t_maximum, (torch.randn(6, requires_grad=True), c, v), path="python")


def test_aliasing_keeps_the_loop():
    c = _bins(40, 6)
    b = torch.randn(40)
    # the values are the output itself: the loop reads what it has written
    _check(t_maximum, (b, c, b), path="python")
    _check(prod_inplace, (b, c, b), path="python", close=True)
    # the indices are the output itself: the loop's writes change the later indices
    idx = torch.randint(0, 6, (6,))
    _check(t_maximum, (idx, idx, torch.randint(0, 6, (6,))), path="python")
    # a view of the output as the values
    big = torch.randn(46)
    _check(t_maximum, (big[:6], c, big[6:]), path="python")


def test_python_numbers_keep_the_loop():
    c, v = _bins(), torch.randn(40)

    def item_max(best, c, v):
        for i in range(c.shape[0]):
            best[c[i]] = max(best[c[i]], v[i].item())
        return best

    def const_max(best, c):
        for i in range(c.shape[0]):
            best[c[i]] = max(best[c[i]], 0.5)
        return best

    def torch_max_dim(best, c):
        for i in range(c.shape[0]):
            best[c[i]] = torch.max(best[c[i]], 1)     # (a dimension: the loop raises)
        return best

    def list_prod(out, c, ws):
        for i in range(len(ws)):
            out[c[i]] *= ws[i]
        return out

    _check(item_max, (torch.randn(6), c, v), path="python")
    _check(const_max, (torch.randn(6), c), path="python")
    _check(torch_max_dim, (torch.randn(6, 3), c), path="python")
    _check(list_prod, (torch.ones(6), c, [1.5] * 40), path="python", close=True)


def test_not_taken_for_other_spellings():
    c, v = _bins(), torch.randn(40)

    def read_elsewhere(best, c, v, seen):
        for i in range(c.shape[0]):
            best[c[i]] = torch.maximum(best[c[i]], v[i])
            seen[i] = best[c[i]]
        return best

    def other_element(best, c, v):
        for i in range(c.shape[0]):
            best[c[i]] = torch.maximum(best[c[i] + 1], v[i])
        return best

    def shadowed(best, c, v):
        max = torch.minimum            # noqa: A001 (a local max: not the builtin)
        for i in range(c.shape[0]):
            best[c[i]] = max(best[c[i]], v[i])
        return best

    def reads_other_bin(best, c, d):
        for i in range(c.shape[0]):
            best[c[i]] = torch.maximum(best[c[i]], best[d[i]])
        return best

    def multiplies_by_other_bin(out, c, d):
        for i in range(c.shape[0]):
            out[c[i]] *= out[d[i]]
        return out

    # a `torch` that is not torch: its maximum is whatever it is
    fake = types.SimpleNamespace(maximum=torch.minimum)
    not_torch = types.FunctionType(t_maximum.__code__, {"torch": fake, "range": range}, "not_torch")

    _check(read_elsewhere, (torch.randn(6), c, v, torch.zeros(40)), path="python")
    _check(reads_other_bin, (torch.randn(6), c, _bins()), path="python")
    _check(multiplies_by_other_bin, (torch.rand(6) + 0.5, c, _bins()), path="python", close=True)
    _check(not_torch, (torch.randn(6), c, v), path="python")
    _check(other_element, (torch.randn(7), c, v), path="python")
    _check(shadowed, (torch.randn(6), c, v), path="python")


def test_nest_rows():
    def rowmax(out, x):
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                out[i] = torch.maximum(out[i], x[i, j])
        return out

    def rowprod(out, x):
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                out[i] *= x[i, j]
        return out

    _check(rowmax, (torch.full((6,), float("-inf")), torch.randn(6, 5)))
    _check(rowprod, (torch.ones(6), torch.rand(6, 5) + 0.5), close=True)


def test_large_and_repeated_calls():
    c = torch.randint(0, 100, (20000,))
    v = torch.randn(20000, 8)
    fast = autovec(graph_max)
    for _ in range(3):
        a, b = torch.full((100, 8), float("-inf")), torch.full((100, 8), float("-inf"))
        _exact(fast(a, c, v), graph_max(b, c, v))


def test_forward_ad_and_too_many_indices_keep_the_loop():
    import torch.autograd.forward_ad as fwAD
    c, v = _bins(), torch.randn(40)
    v[3] = v[9]
    c[3] = c[9]
    for fn in (t_maximum, prod_assign):
        with fwAD.dual_level():
            for tangent_on in ("start", "values"):
                start = torch.randn(6)
                vals = v.clone()
                if tangent_on == "start":
                    start = fwAD.make_dual(start, torch.randn(6))
                else:
                    vals = fwAD.make_dual(vals, torch.randn(40))
                want = fwAD.unpack_dual(fn(start.clone(), c, vals)).tangent
                got = fwAD.unpack_dual(autovec(fn)(start.clone(), c, vals)).tangent
                _exact(got, want, close=True)

    def pair_into_vector(best, a, b, v):
        for i in range(a.shape[0]):
            best[a[i], b[i]] = torch.maximum(best[a[i], b[i]], v[i])
        return best

    ex = _check(pair_into_vector, (torch.randn(6), c, c, v), path="python")
    assert "too many indices for the written tensor" in str(ex)


# --- sums spelled out: `out[k] = out[k] + v` as `out[k] += v` ---

def spelled_sum(x, src, dst):
    out = torch.zeros_like(x)
    for e in range(src.shape[0]):
        out[dst[e]] = out[dst[e]] + x[src[e]]
    return out


def spelled_sum_swapped(out, idx, v):
    for i in range(idx.shape[0]):
        out[idx[i]] = v[i] * 2 + out[idx[i]]
    return out


def spelled_difference(out, idx, v):
    for i in range(idx.shape[0]):
        out[idx[i]] = out[idx[i]] - v[i]
    return out


def reversed_difference(out, idx, v):
    for i in range(idx.shape[0]):
        out[idx[i]] = v[i] - out[idx[i]]      # (not a sum of steps: the loop)
    return out


def spelled_count(out, idx):
    for i in range(idx.shape[0]):
        out[idx[i]] = out[idx[i]] + 1
    return out


def spelled_nest(a, x):
    out = torch.zeros(a.shape[0], dtype=torch.result_type(a, x))
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i] = out[i] + a[i, j] * x[j]
    return out


@pytest.mark.parametrize("fn, make, path", [
    (spelled_sum, lambda: (torch.randn(6, 3), torch.randint(0, 6, (20,)), torch.randint(0, 6, (20,))), "vectorized"),
    (spelled_sum, lambda: (torch.randint(-5, 5, (6, 3)), torch.randint(0, 6, (20,)), torch.randint(-6, 6, (20,))),
     "vectorized"),
    (spelled_sum_swapped, lambda: (torch.zeros(4), torch.randint(0, 4, (15,)), torch.randn(15)), "vectorized"),
    (spelled_difference, lambda: (torch.ones(4, 2, dtype=torch.float64), torch.randint(0, 4, (15,)),
                                  torch.randn(15, 2, dtype=torch.float64)), "vectorized"),
    # an int output of float values: the loop's sum is float, its store truncates every step
    (spelled_difference, lambda: (torch.zeros(4, dtype=torch.int64), torch.randint(0, 4, (15,)), torch.randn(15)),
     "python"),
    # a value wider than the element: setitem drops its leading 1, the scatter of `-=` would not
    (spelled_difference, lambda: (torch.zeros(4, 2), torch.randint(0, 4, (15,)), torch.randn(15, 1, 2)), "python"),
    (reversed_difference, lambda: (torch.zeros(4), torch.randint(0, 4, (15,)), torch.randn(15)), "python"),
    (spelled_count, lambda: (torch.zeros(5, dtype=torch.int32), torch.randint(0, 5, (30,))), "vectorized"),
    (spelled_count, lambda: (torch.zeros(5, dtype=torch.float16), torch.randint(0, 5, (30,))), "python"),
    (spelled_count, lambda: (torch.zeros(5), torch.tensor([1, 7, 2])), "python"),      # out of range: the loop raises
    (spelled_nest, lambda: (torch.randn(5, 4), torch.randn(4)), "vectorized"),
])
def test_a_sum_spelled_out_is_the_scatter_of_its_update(fn, make, path):
    args = make()
    _check(fn, args, path=path, close=True)


def test_a_sum_spelled_out_with_gradients():
    x = torch.randn(6, 3, requires_grad=True)
    src, dst = torch.randint(0, 6, (20,)), torch.randint(0, 6, (20,))
    got, want = autovec(spelled_sum)(x, src, dst), spelled_sum(x, src, dst)
    torch.testing.assert_close(got, want)
    g1, = torch.autograd.grad(got.square().sum(), x)
    g2, = torch.autograd.grad(want.square().sum(), x)
    torch.testing.assert_close(g1, g2)


# (stop 31) `out[i, labels[i]] = v` over consecutive rows (one-hot and label smoothing): each row
# written once, committed as one scatter_ along the columns of those rows (runtime._scatter_prep's
# "rows" form), the loop's values bit for bit

def _one_hot_const(labels, k):
    out = torch.full((labels.shape[0], k), 0.25)
    for i in range(labels.shape[0]):
        out[i, int(labels[i])] = 1.0
    return out


def _rows_from_two(labels, k, v):
    out = torch.zeros(labels.shape[0] + 2, k, dtype=torch.float64)
    for i in range(2, labels.shape[0] + 2):
        out[i, labels[i - 2]] = v[i - 2]
    return out


def _one_hot_enumerate(labels, k):
    out = torch.zeros(labels.shape[0], k, dtype=torch.int64)
    for i, lbl in enumerate(labels):
        out[i, lbl] = 1
    return out


@pytest.mark.parametrize("fn, extra", [(_one_hot_const, ()), (_rows_from_two, ("v",)), (_one_hot_enumerate, ())])
def test_one_hot_rows_are_one_scatter_and_the_loops(fn, extra, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    torch.manual_seed(0)
    labels = torch.randint(-5, 5, (40,))          # (negative labels count from the end, as in the loop)
    args = (labels, 5) if fn is not _one_hot_enumerate else (labels.abs(), 6)
    args += ((torch.randn(40, dtype=torch.float64),) if extra else ())
    got, want = autovec(fn)(*args), fn(*args)
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert explain(fn, *args).path == "vectorized"


def test_the_rows_form_is_taken_only_for_consecutive_rows():
    from autovec import runtime
    target = torch.zeros(6, 3)
    prep = runtime._scatter_prep(target, torch.ones(4), [torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2, 1, -1])],
                                 "", None)
    assert prep[0] == "rows" and prep[1][0] == 1
    runtime._scatter_commit(target, prep, "")
    want = torch.zeros(6, 3)
    want[[1, 2, 3, 4], [0, 2, 1, 2]] = 1.0
    assert torch.equal(target, want)
    again = runtime._scatter_prep(target, torch.ones(3), [torch.tensor([1, 1, 3]), torch.tensor([0, 2, 1])], "", None)
    assert again[0] != "rows"          # (row 1 twice: the last write wins, the general form)
