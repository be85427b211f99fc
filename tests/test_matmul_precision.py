"""The matmul strategy under reduced-precision matmul settings. A batched matrix product
(einsum, bmm, matmul) of float32 may round through TF32 or bfloat16 where
`torch.set_float32_matmul_precision("high" / "medium")` or `allow_tf32` allows it, while the
loop's own per-iteration products (`torch.dot`, `outer`, and `mv` / `mm` at one iteration's
sizes, as the BLAS library chooses) keep float32: the strategy keeps the loop there
(runtime._reduced_products). On CPU the settings may not change the values; the tests check
the path each call takes."""
import pytest
import torch

from autovec import autovec, explain
from autovec import runtime as R
from conftest import ran_modes
from test_realworld_forms import matmul_nest


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


@pytest.fixture
def precision():
    """torch.set_float32_matmul_precision, with the setting before the test restored after it."""
    before = torch.get_float32_matmul_precision()
    try:
        yield torch.set_float32_matmul_precision
    finally:
        torch.set_float32_matmul_precision(before)


def dots(x, w):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = torch.dot(x[i], w)
    return out


def mvs(A, x):
    out = torch.empty(A.shape[0], A.shape[1])
    for i in range(A.shape[0]):
        out[i] = torch.mv(A[i], x[i])
    return out


def rows_times(x, W):
    return torch.stack([r @ W for r in x])


def batched_mm(A, B):
    out = torch.empty(A.shape[0], A.shape[1], B.shape[2])
    for i in range(A.shape[0]):
        out[i] = A[i] @ B[i]
    return out


def outers(a, b):
    out = torch.empty(a.shape[0], a.shape[1], b.shape[1])
    for i in range(a.shape[0]):
        out[i] = torch.outer(a[i], b[i])
    return out


def stacked_mm(A, B):
    out = torch.empty(A.shape[0], A.shape[1], A.shape[2], B.shape[3])
    for i in range(A.shape[0]):
        out[i] = A[i] @ B[i]      # per-iteration rank 3: not a product runtime.mm forms (vmap runs it)
    return out


def nest_dots(A, B):
    out = torch.empty(A.shape[0], B.shape[1])
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            out[i, j] = torch.dot(A[i], B[:, j])
    return out


def scaled_dots(x, w, b):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = torch.dot(x[i], w) * 2.0 + b
    return out


def cast_dots(x, w):
    out = torch.empty(x.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i] = torch.dot(x[i], w.double())
    return out


def same_cast_dot(x, u, v):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = torch.dot(u.float(), v.float())
    return out


FORMS = {
    "dot": (dots, lambda: (torch.randn(9, 5), torch.randn(5))),
    "mv": (mvs, lambda: (torch.randn(9, 3, 5), torch.randn(9, 5))),
    "vector @ matrix": (rows_times, lambda: (torch.randn(9, 5), torch.randn(5, 4))),
    "matrix @ matrix": (batched_mm, lambda: (torch.randn(9, 3, 5), torch.randn(9, 5, 4))),
    "outer": (outers, lambda: (torch.randn(9, 3), torch.randn(9, 4))),
    "stacks of matrices (vmap)": (stacked_mm, lambda: (torch.randn(9, 2, 3, 5), torch.randn(9, 2, 5, 4))),
    "nest of dots": (nest_dots, lambda: (torch.randn(6, 5), torch.randn(5, 4))),
    "dot, scaled and shifted": (scaled_dots, lambda: (torch.randn(9, 5), torch.randn(5), torch.tensor(0.5))),
}


@pytest.mark.parametrize("setting", ["high", "medium"])
@pytest.mark.parametrize("form", FORMS)
def test_reduced_precision_keeps_the_loop(form, setting, precision):
    fn, make = FORMS[form]
    args = make()
    precision(setting)
    f = autovec(fn)
    assert torch.equal(f(*args), fn(*args))
    assert ran_modes(f) == set()
    assert "reduced-precision matmul settings" in str(explain(fn, *args))


@pytest.mark.parametrize("form", FORMS)
def test_highest_precision_vectorizes(form, precision):
    fn, make = FORMS[form]
    args = make()
    precision("highest")
    f = autovec(fn)
    torch.testing.assert_close(f(*args), fn(*args))
    assert ran_modes(f) == ({"vmap"} if fn is stacked_mm else {"direct"})


def test_the_setting_is_read_on_every_call(precision):
    """A function that reached its steady state (the hot runner) under "highest" keeps the loop
    for a call under "medium", and vectorizes again once the setting is back."""
    x, w = torch.randn(9, 5), torch.randn(5)
    precision("highest")
    f = autovec(dots)
    for _ in range(4):
        f(x, w)
    rt = f._autovec_state.runtime
    assert ran_modes(f) == {"direct"} and rt.hot
    precision("medium")
    rt.ran.clear()
    assert torch.equal(f(x, w), dots(x, w))
    assert ran_modes(f) == set()
    precision("highest")
    torch.testing.assert_close(f(x, w), dots(x, w))
    assert ran_modes(f) == {"direct"}


def test_the_other_modes_keep_the_loop_too(precision, monkeypatch):
    """The check is the strategy's guard, not only runtime.mm's: vmap and the batched body
    multiply as one matmul too. Here they run where the direct products do not: a product
    runtime.mm refused for the signature under "highest" (remembered, so it is skipped), and
    AUTOVEC_DIRECT=0 (vmap alone)."""
    A, B = torch.randn(9, 2, 3, 5), torch.randn(9, 2, 5, 4)
    precision("highest")
    f = autovec(stacked_mm)
    f(A, B)
    assert ran_modes(f) == {"vmap"}
    precision("medium")
    f._autovec_state.runtime.ran.clear()
    assert torch.equal(f(A, B), stacked_mm(A, B))
    assert ran_modes(f) == set()
    monkeypatch.setenv("AUTOVEC_DIRECT", "0")
    x, w = torch.randn(9, 5), torch.randn(5)
    g = autovec(dots)
    assert torch.equal(g(x, w), dots(x, w))
    assert ran_modes(g) == set()
    precision("highest")
    torch.testing.assert_close(g(x, w), dots(x, w))
    assert ran_modes(g) == {"vmap"}


def test_float64_products_still_vectorize(precision):
    """Only products that can round are refused: float64 ones (a float32 tensor cast to float64
    inside the loop included) stay batched under "medium"."""
    precision("medium")
    x, w = torch.randn(9, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    out = torch.empty(9, dtype=torch.float64)

    def dots64(x, w, out):
        for i in range(x.shape[0]):
            out[i] = torch.dot(x[i], w)
        return out
    g = autovec(dots64)
    torch.testing.assert_close(g(x, w, out.clone()), dots64(x, w, out.clone()))
    assert ran_modes(g) == {"direct"}
    f = autovec(cast_dots)
    w32 = torch.randn(5)
    torch.testing.assert_close(f(x, w32), cast_dots(x, w32))
    assert ran_modes(f) == {"direct"}


def test_a_float32_product_of_values_cast_in_the_loop(precision):
    """No indexed tensor is float32, but the product is (`u.float()`): runtime.mm refuses it."""
    x, u, v = (torch.randn(9, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64),
               torch.randn(5, dtype=torch.float64))
    precision("medium")
    f = autovec(same_cast_dot)
    assert torch.equal(f(x, u, v), same_cast_dot(x, u, v))
    assert ran_modes(f) == set()
    precision("highest")
    torch.testing.assert_close(f(x, u, v), same_cast_dot(x, u, v))
    assert ran_modes(f) == {"direct"}


@pytest.mark.skipif(getattr(torch.backends.mkldnn, "matmul", None) is None
                    or not hasattr(torch.backends.mkldnn.matmul, "fp32_precision"),
                    reason="torch without the per-backend fp32_precision settings")
def test_the_per_backend_precision_api(precision):
    """`torch.backends.mkldnn.matmul.fp32_precision = "bf16"` (newer torch) is a reduced CPU
    setting too. torch.get_float32_matmul_precision() raises once it is used, so the check
    reads the per-backend settings: the matmul strategy keeps the loop, and a loop nest's sum
    of products runs batched without the einsum, with no error in its reason."""
    x, w = torch.randn(9, 5), torch.randn(5)
    A, B = torch.randn(5, 4), torch.randn(4, 6)
    before = torch.backends.mkldnn.matmul.fp32_precision
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    try:
        assert R._reduced_matmul(torch.device("cpu"))
        f = autovec(dots)
        assert torch.equal(f(x, w), dots(x, w))
        assert ran_modes(f) == set()
        g = autovec(matmul_nest)
        torch.testing.assert_close(g(A, B), matmul_nest(A, B))
        assert ran_modes(g) and "einsum" not in ran_modes(g)
        assert "RuntimeError" not in str(explain(matmul_nest, A, B))
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = before


def test_cuda_settings_decide_for_cuda_products():
    """Read from the flags alone (no GPU needed): TF32 for float32 and complex64, reduced-precision
    reductions (on by default) for float16 / bfloat16; float64 never."""
    m = torch.backends.cuda.matmul
    flags = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
    before = {k: getattr(m, k) for k in flags}
    try:
        m.allow_tf32 = False
        m.allow_fp16_reduced_precision_reduction = False
        m.allow_bf16_reduced_precision_reduction = False
        for dt in (torch.float32, torch.complex64, torch.float16, torch.bfloat16, torch.float64):
            assert not R._reduced_product(dt, "cuda")
        m.allow_tf32 = True
        assert R._reduced_product(torch.float32, "cuda") and R._reduced_product(torch.complex64, "cuda")
        assert not R._reduced_product(torch.float32, "cpu")   # a CUDA-only setting
        m.allow_fp16_reduced_precision_reduction = True
        assert R._reduced_product(torch.float16, "cuda") and not R._reduced_product(torch.bfloat16, "cuda")
        m.allow_bf16_reduced_precision_reduction = True
        assert R._reduced_product(torch.bfloat16, "cuda")
        assert not R._reduced_product(torch.float64, "cuda")
        assert not R._reduced_product(torch.float16, "cpu")
    finally:
        for k, v in before.items():
            setattr(m, k, v)


def dot_nest(A, B):
    out = torch.zeros(A.shape[0], B.shape[0])
    for i in range(A.shape[0]):
        for j in range(B.shape[0]):
            out[i, j] = torch.dot(A[i], B[j])
    return out


def test_the_lane_reads_the_setting_too(precision, monkeypatch):
    """The steady state's guard (a lane, runtime.lanes) checks the setting itself, not only
    runtime.mm: in vmap (AUTOVEC_DIRECT=0) nothing else would. A loop nest and a loop, each
    called until its lane exists, then under "medium"."""
    monkeypatch.setenv("AUTOVEC_DIRECT", "0")
    precision("highest")
    x, w = torch.randn(9, 5), torch.randn(5)
    A, B = torch.randn(4, 5), torch.randn(6, 5)
    f, g = autovec(dots), autovec(dot_nest)
    for _ in range(4):
        f(x, w)
        g(A, B)
    for fn in (f, g):
        assert fn._autovec_state.runtime.lanes and ran_modes(fn) == {"vmap"}
        fn._autovec_state.runtime.ran.clear()
    precision("medium")
    assert torch.equal(f(x, w), dots(x, w)) and torch.equal(g(A, B), dot_nest(A, B))
    assert ran_modes(f) == ran_modes(g) == set()
    precision("highest")
    torch.testing.assert_close(f(x, w), dots(x, w))
    assert ran_modes(f) == {"vmap"}
