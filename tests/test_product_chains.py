"""A running product updated by a chain of factors: `c = c * lam * r[t]`, `c = gamma * c * (1 -
done[t])`, `s = s * (1 - h[t]) * m[t]` (analysis.loops._sum_chain with `*`, runtime._prod_terms).
Each step's factors are multiplied into one factor a step, whose running product (prod, or
cumprod where the loop reads it) the loop's `(c * lam) * r[t]` is up to reassociation, as every
product here. The call keeps the loop where a step could change type (factors of several dtypes,
bool or half-precision factors, Python floats beside integer tensors, Python ints and floats
mixed), where `.item()` of a row with several elements raises in the loop, and where some partial
product of the factors themselves could leave the dtype's range (checked on each factor apart: a
combined factor past the range would be inf where the loop's steps stay finite)."""
import math

import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def discounted_trace(r, lam):
    c = 1.0
    out = []
    for t in range(len(r)):
        c = c * lam * r[t]
        out.append(c)
    return torch.stack(out)


def survival(h, m):
    s = 1.0
    for t in range(len(h)):
        s = s * (1 - h[t]) * m[t]
    return s


def lam_first(r, lam):
    c = 1.0
    for t in range(len(r)):
        c = lam * c * r[t].item()
    return c


def int_steps(r):
    c = 1
    res = []
    for t in range(len(r)):
        c = c * 2 * r[t]
        res.append(c)
    return res


def rows_product(r, m):
    c = torch.ones(r.shape[1:], dtype=r.dtype)
    for t in range(len(r)):
        c = c * r[t] * m[t]
    return c


def masked_product(r, m, lam):
    c = 1.0
    for t in range(len(r)):
        if m[t] > 0.5:
            c = c * lam * r[t]
    return c


def _close(a, b, rel=1e-5):
    assert type(a) is type(b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y, rel)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.is_floating_point():
            torch.testing.assert_close(a, b, rtol=rel, atol=0)
        else:
            assert torch.equal(a, b)
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=rel)
    else:
        assert a == b


@pytest.mark.parametrize("fn, args", [
    (discounted_trace, lambda: (torch.rand(50) + 0.5, 0.9)),
    (discounted_trace, lambda: (torch.rand(50, 3, dtype=torch.float64) + 0.5, torch.tensor(0.9, dtype=torch.float64))),
    (survival, lambda: (torch.rand(40) * 0.5, torch.rand(40) + 0.5)),
    (lam_first, lambda: (torch.rand(40) + 0.5, 0.9)),
    (int_steps, lambda: (torch.randint(-3, 4, (30,)),)),
    (int_steps, lambda: (torch.randint(-3, 4, (30,), dtype=torch.int32),)),
    (rows_product, lambda: (torch.rand(30, 4) + 0.5, torch.rand(30, 1) + 0.5)),
    (masked_product, lambda: (torch.rand(40) + 0.5, torch.rand(40), 0.9)),
])
def test_vectorized_and_same_values(fn, args):
    a = args()
    f = autovec(fn)
    for _ in range(2):
        _close(f(*a), fn(*a))
    assert explain(f, *a).path == "vectorized"


def test_explain_shows_the_factors():
    r = torch.rand(20) + 0.5
    e = explain(lam_first, r, 0.9)
    text = str(e)
    assert "a product of 2 factors per iteration" in text
    assert "(_av_o1[0] * _av_o1[1]).prod(0)" in text
    text = str(explain(discounted_trace, r, 0.9))
    assert "torch.cumprod(_av_t[0] * _av_t[1], 0)" in text


def test_python_and_tensor_factors_keep_their_types():
    # `c * 2 * r[t]` from the int 1: tensors from the first step on (the loop's `1 * 2` is an int,
    # times a tensor a tensor), never the Python numbers the first factor alone would give
    r = torch.randint(-3, 4, (10,))
    got = autovec(int_steps)(r)
    assert all(type(v) is torch.Tensor for v in got)
    _close(got, int_steps(r))
    # all Python numbers: a Python float
    got = autovec(lam_first)(torch.rand(10) + 0.5, 0.9)
    assert type(got) is float


def test_gradients_match():
    h = (torch.rand(30, dtype=torch.float64) * 0.5).requires_grad_()
    m = torch.rand(30, dtype=torch.float64) + 0.5
    f = autovec(survival)
    y = f(h, m)
    assert explain(f, h, m).path == "vectorized"
    (g,) = torch.autograd.grad(y, h)
    h2 = h.detach().clone().requires_grad_()
    (g2,) = torch.autograd.grad(survival(h2, m), h2)
    torch.testing.assert_close(g, g2)


@pytest.mark.parametrize("args, why", [
    # factors of two dtypes: the loop promotes at a step
    (lambda: (torch.rand(20) + 0.5, torch.tensor(0.9, dtype=torch.float64)), "several dtypes"),
    # half precision rounds at every step
    (lambda: ((torch.rand(20) + 0.5).half(), 0.9), "half-precision"),
    # a Python float beside integer tensors makes every step a float
    (lambda: (torch.randint(1, 3, (20,)), 0.5), "change the tensors' dtype"),
    # lam * r[t] alone is past float32's range, though the loop's (c * lam) * r[t] is not
    (lambda: (torch.full((20,), 1e30), 1e30), "overflow or underflow"),
])
def test_refused_calls_keep_the_loop(args, why):
    a = args()
    f = autovec(discounted_trace)
    want = discounted_trace(*a)
    got = f(*a)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)
    e = explain(f, *a)
    assert e.path == "python" and why in str(e)


def test_a_factor_past_the_range_is_not_combined_first():
    # the loop: 1e-30 * 1e30 is 1.0, then times each r[t]: finite; the factor 1e30 * r[t] alone
    # would be inf in float32 (the start takes part in the range check)
    def f(r, lam, c0):
        c = c0
        for t in range(len(r)):
            c = c * lam * r[t]
        return c
    r = torch.full((3,), 1e10)
    g = autovec(f)
    torch.testing.assert_close(g(r, 1e30, 1e-30), f(r, 1e30, 1e-30))
    assert explain(g, r, 1e30, 1e-30).path == "python"


def test_item_of_a_row_with_several_elements_raises_as_in_the_loop():
    r = torch.rand(5, 3)
    f = autovec(lam_first)
    with pytest.raises(RuntimeError):
        lam_first(r, torch.tensor(0.9))
    with pytest.raises(RuntimeError):
        f(r, torch.tensor(0.9))
    assert "`.item()` of a tensor with several elements" in str(explain(f, r, torch.tensor(0.9)))


# --- sums of terms with Python numbers beside tensors (runtime.sum_terms, _tensor_steps) ---

def sum_with_a_number(a, k, s0):
    total = s0
    for i in range(a.shape[0]):
        total = total + a[i] + k
    return total


def test_sum_with_a_python_number_beside_tensors():
    a = torch.randn(30)
    f = autovec(sum_with_a_number)
    _close(f(a, 0.25, 0.0), sum_with_a_number(a, 0.25, 0.0))
    assert explain(f, a, 0.25, 0.0).path == "vectorized"
    # an int beside int32 tensors: cast to int32, as torch does at each step
    ia = torch.randint(-5, 5, (30,), dtype=torch.int32)
    got, want = f(ia, 3, 0), sum_with_a_number(ia, 3, 0)
    assert got.dtype == want.dtype == torch.int32 and torch.equal(got, want)


def number_first(a, k, s0):
    total = s0
    for i in range(a.shape[0]):
        total = total + k + a[i]
    return total


def test_sum_with_a_python_number_past_the_dtype_keeps_the_loop():
    # the loop's one step adds 1e300 to the Python start -1e300 (0.0), then a float32 tensor:
    # finite; cast first, 1e300 is inf in float32
    a = torch.randn(1)
    f = autovec(number_first)
    want = number_first(a, 1e300, -1e300)
    got = f(a, 1e300, -1e300)
    assert torch.isfinite(want)
    torch.testing.assert_close(got, want)
    assert "past torch.float32's range" in str(explain(f, a, 1e300, -1e300))
    f = autovec(sum_with_a_number)
    # an int past int32's range beside int32 tensors
    ia = torch.randint(-5, 5, (5,), dtype=torch.int32)
    assert "outside torch.int32's range" in str(explain(f, ia, 2 ** 40, 0))


@pytest.mark.parametrize("start", [3e38j, 3e38 + 3e38j, -3e38j])
def test_a_complex_start_counts_its_whole_modulus(start, recwarn):
    # the range check takes |start|: a start whose size is in its imaginary part overflows in the
    # loop's order (x 10 first: inf, then NaN), where the combined factors 10 * 0.01 would not
    def f(p, x):
        for i in range(x.shape[0]):
            p = p * x[i]
        return p
    x = torch.tensor([1.0, 10.0, 0.01, 1.0], dtype=torch.complex64)
    s = torch.tensor(start, dtype=torch.complex64)
    g = autovec(f)
    torch.testing.assert_close(g(s, x), f(s, x), equal_nan=True)
    assert explain(g, s, x).path == "python"
    assert not [w for w in recwarn if "imaginary" in str(w.message)]


def test_a_complex_scatter_product_counts_its_whole_modulus(recwarn):
    def f(out, idx, v):
        for i in range(idx.shape[0]):
            out[idx[i]] *= v[i]
        return out
    out = torch.full((3,), 3e38j, dtype=torch.complex64)
    idx = torch.tensor([0, 0, 1, 1, 2])
    v = torch.tensor([10.0, 0.01, 1.0, 2.0, 1.0], dtype=torch.complex64)
    g = autovec(f)
    torch.testing.assert_close(g(out.clone(), idx, v), f(out.clone(), idx, v), equal_nan=True)
    assert not [w for w in recwarn if "imaginary" in str(w.message)]
