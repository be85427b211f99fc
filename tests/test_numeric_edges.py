"""Numeric edges found by an adversarial probe (stop 21): each loop here gave other values or
gradients than the loop before its fix. Every call is compared with the loop, signs of zeros
included; where the fix keeps the loop only for some values, the other values still vectorize."""
import pytest
import torch

from autovec import autovec, explain
from conftest import outcome as _outcome


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _same(fn, *args, calls=4):
    fast = autovec(fn)
    for _ in range(calls):
        want, got = _outcome(fn, *args), _outcome(fast, *args)
        if isinstance(want, tuple):
            assert got == want
            continue
        assert isinstance(got, torch.Tensor), got
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(torch.signbit(got), torch.signbit(want))
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    return fast


# ------------------------------------------------------- the loop index against half precision

def index_times(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * i
    return out


def enumerate_times(x):
    out = []
    for i, v in enumerate(x, 1):
        out.append(v * i)
    return torch.stack(out)


def while_times(x):
    out = torch.empty_like(x)
    i = 0
    while i < x.shape[0]:
        out[i] = x[i] * (i - 100)
        i += 1
    return out


def free_times(x, w):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] + w * i)
    return torch.stack(out)


@pytest.mark.parametrize("fn", [index_times, enumerate_times, while_times])
@pytest.mark.parametrize("dtype, n", [(torch.bfloat16, 400), (torch.float16, 3000)])
def test_the_index_is_not_rounded_to_half_precision(fn, dtype, n):
    """torch computes a half tensor against a Python int in float32: 257 * 1.5 is 386 in
    bfloat16, where a batch of indices cast to bfloat16 first (256) gives 384."""
    _same(fn, torch.full((n,), 1.5, dtype=dtype))


def test_the_index_against_a_free_half_tensor():
    _same(free_times, torch.randn(400, 2), torch.full((2,), 1.5, dtype=torch.bfloat16))


def test_the_index_within_half_precision_still_vectorizes():
    x = torch.full((200,), 1.5, dtype=torch.bfloat16)
    _same(index_times, x)
    assert explain(index_times, x).path == "vectorized"


# ---------------------------------------------------- Python numbers against integer tensors

def divided_by_index(x):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i] / (i + 1))
    return torch.stack(res)


def raised_to_index(x):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i] ** i)
    return torch.stack(res)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_true_division_by_the_index_of_integer_data(dtype):
    """`x_i / 256` of uint8 data divides by 256 (true division computes in float32); a batch
    of the numbers cast to uint8 first divided by 0."""
    fast = _same(divided_by_index, (torch.arange(400) % 97).to(dtype))
    assert explain(fast, (torch.arange(400) % 97).to(dtype)).path == "vectorized"


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
def test_a_power_of_integer_data_by_the_index(dtype):
    """`x_i ** 256` of uint8 data raises in the loop (256 does not fit); a batch cast to uint8 gave x ** 0."""
    _same(raised_to_index, (torch.arange(300) % 3).to(dtype))


# ------------------------------------------------------------------- signed zeros in extremes

def row_max(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].max())
    return torch.stack(out)


def running_row_max(x):
    m = torch.tensor(float("-inf"))
    for i in range(x.shape[0]):
        m = torch.max(m, x[i].max())
    return m


def row_min(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].min())
    return torch.stack(out)


@pytest.mark.parametrize("fn", [row_max, running_row_max, row_min])
def test_rows_holding_both_zeros(fn):
    """x[i].max() of a row of +0.0 and -0.0 gives -0.0 where torch's amax over rows gives +0.0."""
    _same(fn, torch.tensor([[0.0, -0.0] * 3] * 8))
    _same(fn, torch.tensor([[-0.0, 0.0, -1.0]] * 8))


def test_rows_without_both_zeros_still_vectorize():
    x = torch.randn(300, 6)
    x[:, 0] = 0.0
    _same(row_max, x)
    assert explain(row_max, x).path == "vectorized"


# ------------------------------------------------------- gradients of a running product

def running_products(x):
    p = 1.0
    out = []
    for i in range(x.shape[0]):
        p = p * x[i]
        out.append(p)
    return torch.stack(out)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_running_product_gradient_beside_a_non_finite_factor(bad):
    """The loop's gradient of a factor is the product of the others (finite beside a NaN or
    inf factor); cumprod's backward gave NaN there."""
    x0 = torch.tensor([[0.5, 2.0], [bad, 3.0], [1.5, -1.0], [2.0, 0.5]])
    fast = autovec(running_products)
    for _ in range(4):
        a, b = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        want, got = running_products(a), fast(b)
        torch.testing.assert_close(got, want, equal_nan=True)
        want.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(b.grad, a.grad, equal_nan=True)


def test_running_product_with_finite_factors_still_vectorizes():
    x = torch.rand(50, 3) + 0.5
    fast = autovec(running_products)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    running_products(a).sum().backward()
    fast(b).sum().backward()
    torch.testing.assert_close(b.grad, a.grad)
    assert explain(running_products, x.clone().requires_grad_()).path == "vectorized"


# (stop 22, the autograd probe) the product kept at the end only: prod's derivatives, backward
# and forward-mode, divide by the factor as cumprod's do

def final_product(x):
    p = 1.0
    for i in range(x.shape[0]):
        p = p * x[i]
    return p


def final_product_inplace(x):
    p = torch.ones(x.shape[1], dtype=x.dtype)
    for i in range(x.shape[0]):
        p *= torch.exp(x[i])
    return p


_NON_FINITE = {"nan": [[0.5, 2.0], [float("nan"), 3.0], [1.5, -1.0], [2.0, 0.5]],
               "inf": [[0.5, 2.0], [float("inf"), 3.0], [1.5, -1.0], [2.0, 0.5]],
               "overflow in the body": [[0.5, 0.0], [800.0, 1.0], [1.5, -1.0], [0.0, 0.5]],
               "finite": [[0.5, 2.0], [0.25, 3.0], [1.5, -1.0], [2.0, 0.5]]}


@pytest.mark.parametrize("fn", [final_product, final_product_inplace])
@pytest.mark.parametrize("kind", sorted(_NON_FINITE))
def test_final_product_gradients_beside_a_non_finite_factor(fn, kind):
    import torch.autograd.forward_ad as fwAD
    x0 = torch.tensor(_NON_FINITE[kind], dtype=torch.float64)
    fast = autovec(fn)
    for _ in range(4):
        a, b = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        want, got = fn(a), fast(b)
        torch.testing.assert_close(got, want, equal_nan=True)
        want.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(b.grad, a.grad, equal_nan=True)
        with fwAD.dual_level():
            tangent = torch.linspace(0.5, 1, x0.numel(), dtype=x0.dtype).view_as(x0)   # (one sign: no inf - inf)
            want = fwAD.unpack_dual(fn(fwAD.make_dual(x0.clone(), tangent))).tangent
            got = fwAD.unpack_dual(fast(fwAD.make_dual(x0.clone(), tangent))).tangent
        torch.testing.assert_close(got, want, equal_nan=True)
    finite = kind == "finite" or kind == "overflow in the body" and fn is final_product   # (no exp there)
    assert explain(fast, x0.clone().requires_grad_()).path == ("vectorized" if finite else "python")


# (stop 22, the tensor-kinds probe) in-place prefix scans: cumsum runs on dtypes whose `+` does
# not (the loop raised, the batch returned), and starts from +0.0 (a -0.0 start became +0.0,
# in the row the loop never writes too)

def prefix_store(acc):
    for i in range(1, acc.shape[0]):
        acc[i] = acc[i - 1] + acc[i]
    return acc


def prefix_update(acc):
    for k in range(1, acc.shape[0]):
        acc[k] += acc[k - 1]
    return acc


def _prefix_outcome(fn, x):
    try:
        out = fn(x)
    except Exception as e:      # noqa: BLE001 (the loop's own error is the expected outcome)
        return type(e), x
    return out, x


def _bits(t):
    return torch.view_as_real(t) if t.is_complex() else t


@pytest.mark.parametrize("fn", [prefix_store, prefix_update])
@pytest.mark.parametrize("kind", ["uint16", "uint32", "uint64", "uint8", "int8 wrapping", "-0.0 start",
                                  "-0.0 in one column", "complex -0.0", "zeros", "complex",
                                  "negative start"])
def test_in_place_prefix_scans_on_unusual_values(fn, kind):
    x = {"uint16": torch.ones(300, dtype=torch.int32).to(torch.uint16),
         "uint32": torch.ones(300, dtype=torch.int32).to(torch.uint32),
         "uint64": torch.ones(300, dtype=torch.int32).to(torch.uint64),
         "uint8": torch.ones(300, dtype=torch.uint8),
         "int8 wrapping": torch.full((300, 2), 100, dtype=torch.int8),
         "-0.0 start": torch.full((300, 2), -0.0),
         "-0.0 in one column": torch.tensor([[0.0, -0.0]] * 3 + [[1.0, 2.0]] * 297),
         "complex -0.0": torch.full((300,), complex(-0.0, 1.0), dtype=torch.complex64),
         "zeros": torch.zeros(300, 2),
         "complex": torch.full((300,), complex(0.5, 1.0), dtype=torch.complex64),
         "negative start": torch.tensor([[-1.0, 2.0]] + [[0.5, -0.25]] * 299)}[kind]
    fast = autovec(fn)
    for _ in range(3):
        want, got = _prefix_outcome(fn, x.clone()), _prefix_outcome(fast, x.clone())
        if isinstance(want[0], type):
            assert got[0] is want[0]
            assert torch.equal(got[1], want[1])          # (the argument as the loop leaves it)
            continue
        assert torch.equal(got[0], want[0]) and torch.equal(_bits(got[0]).signbit(), _bits(want[0]).signbit())
    kept = kind.startswith("uint") and kind != "uint8" or "-0.0" in kind
    assert explain(fast, x.clone()).path == ("python" if kept else "vectorized")


# (stop 22, the scatter probe) stores through an index tensor skipped two checks of the plain
# stores: `-=` of bools (the loop raises at once) and Python numbers outside the output's range
# (setitem raises after the writes before it; the batch wrapped them)

def scatter_sub(out, idx, v):
    for i in range(idx.shape[0]):
        out[idx[i]] -= v[i]
    return out


def scatter_set_item(out, idx, v):
    for i in range(idx.shape[0]):
        out[idx[i]] = v[i].item()
    return out


def scatter_set_constant(out, idx):
    for i in range(idx.shape[0]):
        out[idx[i]] = 300
    return out


@pytest.mark.parametrize("fn, out, rest", [
    (scatter_sub, lambda: torch.zeros(5), (torch.ones(4, dtype=torch.bool),)),
    (scatter_set_item, lambda: torch.zeros(5, dtype=torch.uint8), (torch.tensor([3., 300., 5., -2.]),)),
    (scatter_set_item, lambda: torch.zeros(5, dtype=torch.int64), (torch.tensor([3., float("nan"), 5., 1.]),)),
    (scatter_set_constant, lambda: torch.zeros(5, dtype=torch.int8), ()),
    (scatter_set_item, lambda: torch.zeros(5, dtype=torch.uint8), (torch.tensor([3., 200., 5., 2.]),)),
], ids=["bool -=", "uint8 overflow", "nan into int64", "constant overflow", "in range"])
def test_scatter_stores_check_as_the_loop(fn, out, rest):
    idx = torch.tensor([1, 1, 3, 0])
    fast = autovec(fn)
    for _ in range(3):
        a, b = out(), out()
        want, got = _outcome(fn, a, idx, *rest), _outcome(fast, b, idx, *rest)
        if isinstance(want, tuple):
            assert got == want
        else:
            assert torch.equal(got, want)
        assert torch.equal(a, b)            # (the writes before the error, as the loop leaves them)


# (stop 22, the dtype probe) a per-iteration 0-d value does not widen a row in the loop (torch's
# rule for 0-d tensors); batched or broadcast as a column it did, and comparisons hid the dtype

def above(x, thr, out):
    for i in range(x.shape[0]):
        out[i] = x[i] > thr[i]
    return out


def equal_rows(x, y, out):
    for i in range(x.shape[0]):
        out[i] = x[i] == y[i]
    return out


def scaled_rows(x, s):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * s[i]
    return out


@pytest.mark.parametrize("fn, args", [
    (above, lambda: (torch.tensor([[1.0, 2.0], [3.0, -4.0], [5.0, 6.0]]),
                     torch.tensor([0.5, 3.0 - 1e-12, 5.0 - 1e-12], dtype=torch.float64),
                     torch.zeros(3, 2, dtype=torch.bool))),
    (equal_rows, lambda: (torch.tensor([[1, 2], [-56, 3], [-1, 7]], dtype=torch.int8),
                          torch.tensor([1, 200, 255], dtype=torch.uint8), torch.zeros(3, 2))),
    (scaled_rows, lambda: (torch.randn(7, 3), torch.randn(7, dtype=torch.float64))),
    (scaled_rows, lambda: ((torch.randn(7, 3) * 3).to(torch.int16), torch.tensor([1, 2, 3, 4, 5, 6, 7],
                                                                                dtype=torch.int8))),
])
def test_a_zero_dim_value_does_not_widen_a_row(fn, args):
    fast = autovec(fn)
    for _ in range(3):
        a = args()
        want, got = fn(*[t.clone() for t in a]), fast(*[t.clone() for t in a])
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert explain(fast, *args()).path == "vectorized"


def ones_times_index(x):
    res = []
    for i in range(x.shape[0]):
        res.append(torch.ones(3) * i)
    return torch.stack(res)


def times_list(x, ws):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i] * ws[i])
    return torch.stack(res)


@pytest.mark.parametrize("fn, args", [(ones_times_index, lambda: (torch.arange(7),)),
                                      (times_list, lambda: (torch.ones(7, 3, dtype=torch.int64),
                                                            [0.5 * k for k in range(7)]))])
@pytest.mark.parametrize("first", [torch.float64, torch.float32])
def test_the_default_dtype_is_part_of_the_signature(fn, args, first):
    fast = autovec(fn)
    other = torch.float32 if first is torch.float64 else torch.float64
    old = torch.get_default_dtype()
    try:
        for default in (first, other, first, other):
            torch.set_default_dtype(default)
            for _ in range(3):
                got, want = fast(*args()), fn(*args())
                assert got.dtype == want.dtype == default and torch.equal(got, want)
    finally:
        torch.set_default_dtype(old)


def half_rows_scaled(x, s):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * s[i]
    return out


@pytest.mark.parametrize("xd, sd", [(torch.float16, torch.float32), (torch.bfloat16, torch.float64),
                                    (torch.bfloat16, torch.float16)])
def test_half_rows_against_a_wider_zero_dim_value(xd, sd):
    # (stop 22, the dtype probe) torch's loop reads the 0-d value at float32 precision; vmap rounded
    # it to half precision first: one unit in the last place in products, flipped comparisons
    torch.manual_seed(0)
    fast = autovec(half_rows_scaled)
    for _ in range(3):
        x, s = (torch.randn(7, 3) * 3).to(xd), (torch.randn(7) * 3).to(sd)
        assert torch.equal(fast(x, s), half_rows_scaled(x, s))


def running_product_in_place(x):
    p = torch.ones(())
    for i in range(x.shape[0]):
        p *= x[i]
    return p


def prefix_product_in_place(x):
    for i in range(1, x.shape[0]):
        x[i] *= x[i - 1]
    return x


@pytest.mark.parametrize("fn", [final_product, running_product_in_place, running_products,
                                prefix_product_in_place])
@pytest.mark.parametrize("x", [
    torch.tensor([1e30, 1e30, 0.0, 2.0]),        # inf, then inf * 0: NaN in the loop
    torch.tensor([1e20, 1e20, 1e-20, 1e-20]),    # inf stays inf
    torch.tensor([1e-30, 1e-30, 1e30, 1e30]),    # 0 stays 0
    torch.tensor([1e30, 1e-30, 1e30, 1e-30]),    # in range in the loop's order, not in another's
    torch.tensor([3, 2 ** 40, 2 ** 40, 1]),      # int factors of a float product: floats, no int64 wrap
    torch.tensor([-2, 0, -3, 1]),                # the sign of a zero product of ints, as floats
    torch.tensor([0.5, -3.0, 2.0, 0.25])])
def test_running_products_leave_range_as_the_loop(fn, x):
    """A running product computed in another order (prod, cumprod, the first step apart) gives
    the loop's value only while no partial product leaves the dtype's range (found by the loop
    nest probe, over integer factors): elsewhere the loop runs (runtime._products_in_range)."""
    if fn is prefix_product_in_place and not x.is_floating_point():
        x = x.float()
    g = autovec(fn)
    for _ in range(2):
        want, got = _outcome(fn, x.clone()), _outcome(g, x.clone())
        assert type(got) is type(want)
        if isinstance(want, tuple):
            assert got == want
            continue
        assert got.dtype == want.dtype
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        ok = ~torch.isnan(want)
        torch.testing.assert_close(got[ok], want[ok], rtol=1e-6, atol=0)
        assert torch.equal(torch.signbit(got[ok]), torch.signbit(want[ok]))


def running_item_product(x, s):
    p = s
    for i in range(x.shape[0]):
        p = p * x[i].item()
    return p


def test_a_running_product_of_python_numbers_leaves_range_as_the_loop():
    """The same for `.item()` factors, multiplied as Python floats: a start of 1e200 times 1e200
    is inf in the loop before 1e-200 comes; the product of the factors first is 1."""
    g = autovec(running_item_product)
    x = torch.tensor([1e200, 1e-200, 3.0], dtype=torch.float64)
    for s in (1e200, 2.0):
        for _ in range(2):
            want, got = running_item_product(x, s), g(x, s)
            assert type(got) is float and (got == want or abs(got - want) <= 1e-12 * abs(want) < float("inf"))
    assert g._autovec_state.runtime.ran


def rows_over_values(x, t):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i] / t[i])
    return torch.stack(res)


def rows_times_values(x, t):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i] * t[i])
    return torch.stack(res)


def rows_times_values_call(x, t):
    return torch.stack([torch.mul(x[i], t[i]) for i in range(x.shape[0])])


@pytest.mark.parametrize("fn, x, first, t", [
    # a true division of integers uses the 0-d divisor's own value (not wrapped to the row's dtype)
    (rows_over_values, torch.arange(12, dtype=torch.uint8).view(3, 4), [1, 2, 3], [-3, 2, 300]),
    (rows_over_values, torch.arange(12, dtype=torch.int32).view(3, 4), [1, 2, 3], [2 ** 40, -7, 5]),
    # half rows read a 0-d int at float32 precision: 2049 is no float16, 70000 is past its range
    (rows_over_values, torch.ones(2, 3, dtype=torch.float16), [2, 4], [70000, 2049]),
    (rows_times_values, torch.full((2, 3), 3.0, dtype=torch.float16), [2, 4], [70000, 2049]),
    (rows_times_values, torch.full((2, 3), 3.0, dtype=torch.bfloat16), [2, 4], [70000, 257]),
    (rows_times_values_call, torch.full((2, 3), 3.0, dtype=torch.float16), [2, 4], [70000, 2049]),
])
def test_a_zero_dim_value_against_rows_of_another_dtype(fn, x, first, t):
    """Found by the torch-operations probe: the batched form cast a per-iteration 0-d integer to
    the row's dtype before a true division (uint8 rows / 300 divided by 44), and broadcast or
    vmap rounded it to half precision (3 * 2049 gave 6144, the loop 6148), also after a first
    call on harmless values had passed the one-time check."""
    dt = torch.int64 if x.dtype == torch.int32 else torch.int32
    g = autovec(fn)
    for values in (first, t, t):
        tt = torch.tensor(values, dtype=dt)
        want, got = _outcome(fn, x, tt), _outcome(g, x, tt)
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


def true_divided(x, y):
    return torch.stack([torch.true_divide(x[i], y[i]) for i in range(x.shape[0])])


def atan2_of(x, y):
    return torch.stack([torch.atan2(x[i], y[i]) for i in range(x.shape[0])])


def copysign_of(x, y):
    return torch.stack([torch.copysign(x[i], y[i]) for i in range(x.shape[0])])


@pytest.mark.parametrize("batched", ["1", "0"])        # (0: vmap, which must refuse them)
@pytest.mark.parametrize("fn", [true_divided, atan2_of, copysign_of, rows_over_values])
@pytest.mark.parametrize("zd, rd", [(torch.uint8, torch.int8), (torch.int32, torch.int16), (torch.int8, torch.uint8)])
def test_integers_of_two_dtypes_made_floats(fn, zd, rd, batched, monkeypatch):
    """Found when today's probe scripts were re-run: a per-iteration 0-d integer beside integer
    rows of another dtype, in an operation that gives floats (true division, atan2, copysign),
    reads each value as it is; the batch had been sent to vmap, which casts the 0-d value to
    the rows' dtype first (255 as int8 is -1)."""
    big = {torch.uint8: 255, torch.int8: -128, torch.int32: 2 ** 31 - 1}[zd]
    x = torch.tensor([1, big, big, 1, 1], dtype=zd)
    y = torch.full((5, 3), 3, dtype=rd)
    if fn is rows_over_values:
        x, y = y.t().contiguous().t(), x        # (rows / 0-d values)
    monkeypatch.setenv("AUTOVEC_BATCHED", batched)
    g = autovec(fn)
    for _ in range(3):
        want, got = _outcome(fn, x, y), _outcome(g, x, y)
        assert got.dtype == want.dtype and torch.equal(got, want)
    if batched == "1":
        assert explain(g, x, y).path == "vectorized"
