"""A fixed matrix times a per-iteration vector in a batched body (`W @ x[i]`): one matrix
product of the batch with the matrix's transpose (lowering.batched `_product`), not a batched
product of n copies of W. Values, dtypes and gradients against the loop."""
import pytest
import torch

from autovec import autovec, explain

W = torch.randn(5, 4)


def tanh_total(x):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + torch.tanh(W @ x[i]).sum()
    return total


def guarded(x, w):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i, 0] > 0:
            total = total + (w @ x[i]).relu().sum()
    return total


def mv_total(x, w):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + torch.mv(w, x[i]).sum() * 2
    return total


def nest_total(x, w):
    total = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            total = total + (w @ x[i, j]).sum()
    return total


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.int64])
def test_a_fixed_matrix_times_each_row(dtype, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    for fn, make in [(guarded, lambda: (torch.randn(9, 4), torch.randn(3, 4))),
                     (mv_total, lambda: (torch.randn(7, 4), torch.randn(3, 4))),
                     (nest_total, lambda: (torch.randn(3, 4, 5), torch.randn(2, 5)))]:
        fast = autovec(fn)
        for _ in range(4):
            x, w = (t.to(dtype) if dtype != torch.int64 else (t * 4).to(dtype) for t in make())
            if fn is guarded and (dtype.is_complex or dtype == torch.int64):
                continue     # (no order for complex; relu of ints is fine but skip the mix)
            want, got = fn(x, w), fast(x, w)
            assert type(got) is type(want)
            if isinstance(want, torch.Tensor):
                assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
        if not dtype.is_complex:      # (a complex running total may keep the loop for its own reasons)
            assert explain(fast, x, w).path == "vectorized"


def test_gradients_of_the_matrix_and_the_rows(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(guarded)
    for _ in range(4):
        x, w = torch.randn(9, 4), torch.randn(3, 4)
        grads = []
        for f in (guarded, fast):
            a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
            f(a, b).backward()
            grads.append((a.grad, b.grad))
        torch.testing.assert_close(grads[1][0], grads[0][0])
        torch.testing.assert_close(grads[1][1], grads[0][1])


def test_the_batched_body_is_one_matrix_product(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(6, 4)
    torch.testing.assert_close(autovec(tanh_total)(x), tanh_total(x))
    notes = "\n".join(explain(tanh_total, x).notes)
    assert "x_i @ W.mT" in notes, notes


def relu_rows(x, w):
    out = torch.empty(x.shape[0], w.shape[0])
    for i in range(x.shape[0]):
        out[i] = torch.relu(w @ x[i]) + 1
    return out


def softmax_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.softmax(x[i] * 2, 0)
    return out


@pytest.mark.parametrize("fn", [relu_rows, tanh_total])
def test_reduced_matmul_precision_set_after_the_first_calls(fn, monkeypatch):
    """A batched body's matrix product (one GEMM where the loop has a matrix-vector product per
    row) rounds through bfloat16 on a CPU under `set_float32_matmul_precision("medium")`; the
    loop's products do not. The setting is read on every call (a probe found it read only at
    the one-time check, so a later change went through): the loop runs then."""
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    x, w = torch.randn(500, 64), torch.randn(3, 64)
    args = (x, w) if fn is relu_rows else (torch.randn(500, 4),)
    f = autovec(fn)
    for _ in range(30):
        f(*args)
    before = torch.get_float32_matmul_precision()
    try:
        for setting in ("medium", "high"):
            torch.set_float32_matmul_precision(setting)
            for _ in range(3):
                torch.testing.assert_close(f(*args), fn(*args), rtol=0, atol=0)
    finally:
        torch.set_float32_matmul_precision(before)
    # (back at full precision the batch runs: `tanh_total` sums 500 float32 terms in another
    # order, within a float32 sum's rounding, not the default 1.3e-6 of a single value's)
    torch.testing.assert_close(f(*args), fn(*args), rtol=1e-5, atol=1e-4)


def test_a_body_without_products_is_not_held_to_the_matmul_setting():
    from autovec.runtime import FunctionRuntime
    f = autovec(softmax_rows)
    f(torch.randn(4, 3))
    rt = f._autovec_state.runtime
    assert isinstance(rt, FunctionRuntime) and not rt.products
    g = autovec(relu_rows)
    g(torch.randn(4, 5), torch.randn(2, 5))
    assert g._autovec_state.runtime.products


W32 = torch.randn(3, 64)
LIN = torch.nn.Linear(64, 3)


def cast_rows(x):
    return torch.stack([W32 @ x[i].float() for i in range(x.shape[0])])


def module_rows(x):
    return torch.stack([LIN(x[i].float()) for i in range(x.shape[0])])


@pytest.mark.parametrize("fn", [cast_rows, module_rows])
def test_a_float32_product_behind_a_cast_or_a_module_is_checked_too(fn, monkeypatch):
    """The loop's own tensors are float64, the product runs in float32 (a cast, a module's
    parameters): a reduced float32 setting keeps the loop whatever the tensors' dtypes (a probe
    found the lane and the general check both looking at the loop's tensors alone)."""
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    x = torch.randn(500, 64, dtype=torch.float64)
    f = autovec(fn)
    with torch.no_grad():
        for _ in range(8):
            f(x)
        before = torch.get_float32_matmul_precision()
        try:
            torch.set_float32_matmul_precision("medium")
            for _ in range(3):
                torch.testing.assert_close(f(x), fn(x), rtol=0, atol=0)
        finally:
            torch.set_float32_matmul_precision(before)
