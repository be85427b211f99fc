"""Loop nests whose store leaves out levels (`C[i, j] += A[i, k] * B[k, j]`): the values are
summed over the left-out levels (runtime.nest_sum), and a body that is only a product of
slices is one einsum / matrix product over the tensors themselves (runtime.nest_product).
Every form is compared with the loop; the data the sum cannot reproduce keeps the scatter."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop, ran_modes as _ran
from test_realworld_forms import matmul_nest as matmul, matvec_nest as matvec


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def matmul_like(A, B):
    C = torch.zeros(A.shape[0], B.shape[1], dtype=A.dtype)
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            for k in range(A.shape[1]):
                C[i, j] += A[i, k] * B[k, j]
    return C

def matmul_into_transposed(A, B):
    C = torch.zeros(B.shape[1], A.shape[0])
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            for k in range(A.shape[1]):
                C[j, i] += A[i, k] * B[k, j]
    return C

def matmul_k_outermost(A, B):
    C = torch.zeros(A.shape[0], B.shape[1])
    for k in range(A.shape[1]):
        for i in range(A.shape[0]):
            for j in range(B.shape[1]):
                C[i, j] += A[i, k] * B[k, j]
    return C

def gram_transposed(A, B):
    C = torch.zeros(A.shape[1], B.shape[1])
    for i in range(A.shape[1]):
        for j in range(B.shape[1]):
            for k in range(A.shape[0]):
                C[i, j] += A[k, i] * B[k, j]
    return C

def vecmat_subtracted(x, A):
    out = torch.zeros(A.shape[1])
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            out[j] -= x[i] * A[i, j]
    return out

def row_dots(A, B):
    out = torch.zeros(A.shape[0])
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            out[i] += A[i, j] * B[i, j]
    return out

def weighted_matmul(A, B, w):
    C = torch.zeros(A.shape[0], B.shape[1])
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            for k in range(A.shape[1]):
                C[i, j] += A[i, k] * w[k] * B[k, j]
    return C

def column_scaled(A, b):
    out = torch.zeros(A.shape[1])
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            out[j] += A[i, j] * b[j]
    return out

def repeated_level(A, x):
    out = torch.zeros(A.shape[0])
    for i in range(A.shape[0]):
        for r in range(3):
            for j in range(A.shape[1]):
                out[i] += A[i, j] * x[j]
    return out

def into_given(C, A, B):
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            for k in range(A.shape[1]):
                C[i, j] += A[i, k] * B[k, j]
    return C

def partial_ranges(A, B):
    C = torch.zeros(A.shape[0], B.shape[1])
    for i in range(1, A.shape[0]):
        for j in range(0, B.shape[1], 2):
            for k in range(1, A.shape[1]):
                C[i, j] += A[i, k] * B[k, j]
    return C

def row_squares(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i] += x[i, j] ** 2
    return out

def rows_into_rows(x):
    out = torch.zeros(x.shape[0], x.shape[2])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i] += x[i, j] * 0.5
    return out

def scalar_into_rows(x):
    out = torch.zeros(x.shape[0], 3)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i] += x[i, j]
    return out


EINSUM = [
    (matmul, lambda: (torch.randn(5, 4), torch.randn(4, 6))),
    (matmul_into_transposed, lambda: (torch.randn(5, 4), torch.randn(4, 6))),
    (matmul_k_outermost, lambda: (torch.randn(5, 4), torch.randn(4, 6))),
    (gram_transposed, lambda: (torch.randn(4, 5), torch.randn(4, 6))),
    (matvec, lambda: (torch.randn(7, 4), torch.randn(4))),
    (vecmat_subtracted, lambda: (torch.randn(7), torch.randn(7, 4))),
    (row_dots, lambda: (torch.randn(7, 4), torch.randn(7, 4))),
    (into_given, lambda: (torch.randn(5, 6), torch.randn(5, 4), torch.randn(4, 6))),
    (partial_ranges, lambda: (torch.randn(5, 4), torch.randn(4, 6))),
    (matmul_like, lambda: (torch.randn(5, 4, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64))),
    (matmul, lambda: (torch.randn(4, 5).t(), torch.randn(6, 4).t())),     # not contiguous
]


@pytest.mark.parametrize("fn, make", EINSUM, ids=[f"{fn.__name__}-{k}" for k, (fn, _) in enumerate(EINSUM)])
def test_a_sum_of_products_is_one_einsum_with_the_loops_values_and_gradients(fn, make):
    f = autovec(fn)
    args = make()
    for _ in range(2):        # the second call: the steady state
        want = fn(*[a.clone() for a in args])
        got = f(*[a.clone() for a in args])
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want)
    assert _ran(f) == {"einsum"}
    assert "einsum" in explain(f, *[a.clone() for a in args]).rewritten_source
    if fn is not into_given:     # (in place into a tensor of the caller's)
        assert_equivalent(fn, *[a.clone().requires_grad_() for a in args], grad=True)


SUMS = [
    (row_squares, lambda: (torch.randn(6, 5),), True),
    (rows_into_rows, lambda: (torch.randn(6, 5, 3),), True),
    (scalar_into_rows, lambda: (torch.randn(6, 5),), True),
    # three factors: einsum would choose its own order of products
    (weighted_matmul, lambda: (torch.randn(5, 4), torch.randn(4, 6), torch.randn(4)), True),
    # a level one factor does not read: einsum would sum that factor first
    (column_scaled, lambda: (torch.randn(4, 6), torch.randn(6)), True),
    # a level neither factor reads: the loop adds each value once per step of it
    (repeated_level, lambda: (torch.randn(5, 4), torch.randn(4)), True),
    # a float64 product into a float32 tensor rounds at every addition in the loop: the scatter
    (matmul, lambda: (torch.randn(5, 4), torch.randn(4, 6, dtype=torch.float64)), False),
]


@pytest.mark.parametrize("fn, make, summed", SUMS, ids=[f"{fn.__name__}-{k}" for k, (fn, _, _) in enumerate(SUMS)])
def test_other_values_are_summed_over_the_left_out_levels(fn, make, summed):
    import autovec.runtime as R
    args = make()
    f = autovec(fn)
    seen = []
    real = R.FunctionRuntime.scatter_commit

    def spy(target, prepared, op):
        seen.append(prepared[0] if prepared else None)
        return real(target, prepared, op)

    R.FunctionRuntime.scatter_commit = staticmethod(spy)
    try:
        got = f(*[a.clone() for a in args])
    finally:
        R.FunctionRuntime.scatter_commit = staticmethod(real)
    want = fn(*[a.clone() for a in args])
    torch.testing.assert_close(got, want)
    assert len(seen) == 1 and (seen[0] == "sum") == summed
    assert_equivalent(fn, *args)


def test_minus_zero_in_the_target_keeps_the_loops_sign():
    """-0.0 + -0.0 is -0.0 in the loop, but a sum starts from +0.0: such rows keep the scatter."""
    C = torch.full((5, 6), -0.0)
    A, B = torch.zeros(5, 4), -torch.rand(4, 6)     # every product is -0.0
    want = into_given(C.clone(), A, B)
    got = autovec(into_given)(C.clone(), A, B)
    assert torch.equal(torch.signbit(got), torch.signbit(want)) and bool(torch.signbit(want).all())
    C[0, 0] = 1.0     # some -0.0 and other values
    want = into_given(C.clone(), A, B)
    got = autovec(into_given)(C.clone(), A, B)
    assert torch.equal(torch.signbit(got), torch.signbit(want))


def test_a_zeros_target_written_between_is_checked_for_minus_zero():
    def written_between(A, B):
        C = torch.zeros(A.shape[0], B.shape[1])
        C[0, 0] = -0.0
        for i in range(A.shape[0]):
            for j in range(B.shape[1]):
                for k in range(A.shape[1]):
                    C[i, j] += A[i, k] * B[k, j]
        return C
    A, B = torch.zeros(5, 4), -torch.rand(4, 6)
    want, got = written_between(A, B), autovec(written_between)(A, B)
    assert torch.equal(torch.signbit(got), torch.signbit(want)) and bool(torch.signbit(want)[0, 0])


def test_the_zeros_start_is_known_only_for_an_allocation_right_before_the_loop():
    from autovec.analysis import analyze
    from autovec.frontend import capture
    from autovec.purity import Env

    def used_between(A, B):
        C = torch.zeros(A.shape[0], B.shape[1])
        C.sub_(1.0)
        for i in range(A.shape[0]):
            for j in range(B.shape[1]):
                for k in range(A.shape[1]):
                    C[i, j] += A[i, k] * B[k, j]
        return C

    def fills(fn):
        cap = capture(fn)
        return [o.fill for info in analyze(cap, Env(cap)) if info.plan for o in info.plan.outputs]
    assert fills(matmul) == ["0"]
    assert fills(used_between) == [""]
    assert fills(into_given) == [""]
    assert_equivalent(used_between, torch.randn(3, 4), torch.randn(4, 2))


def test_the_target_read_in_the_nest_keeps_the_loop():
    def squares_in_place(C, B):
        for i in range(C.shape[0]):
            for j in range(C.shape[1]):
                for k in range(C.shape[1]):
                    C[i, j] += C[i, k] * B[k, j]
        return C
    C, B = torch.randn(4, 4), torch.randn(4, 4) * 0.1
    f = autovec(squares_in_place)
    torch.testing.assert_close(f(C.clone(), B), squares_in_place(C.clone(), B))
    assert _ran(f) == set()


def test_the_same_tensor_as_both_factors():
    A = torch.randn(5, 5)
    f = autovec(matmul)
    torch.testing.assert_close(f(A, A), matmul(A, A))
    assert _ran(f) == {"einsum"}


def test_a_negative_start_wraps_as_the_loop_does():
    def wraps(A, x):
        out = torch.zeros(A.shape[0])
        for i in range(-2, A.shape[0] - 2):
            for j in range(A.shape[1]):
                out[i] += A[i, j] * x[j]
        return out
    assert_equivalent(wraps, torch.randn(6, 3), torch.randn(3))


def test_a_target_too_small_raises_as_the_loop():
    def too_small(A, x):
        out = torch.zeros(A.shape[0] - 1)
        for i in range(A.shape[0]):
            for j in range(A.shape[1]):
                out[i] += A[i, j] * x[j]
        return out
    raises_as_loop(IndexError, too_small, torch.randn(6, 3), torch.randn(3))


def test_integer_targets_scatter_exactly():
    def counts(A, x):
        out = torch.zeros(A.shape[0], dtype=torch.int32)
        for i in range(A.shape[0]):
            for j in range(A.shape[1]):
                out[i] += A[i, j] * x[j]
        return out
    A, x = torch.randint(-5, 5, (6, 4), dtype=torch.int32), torch.randint(-5, 5, (4,), dtype=torch.int32)
    f = autovec(counts)
    assert torch.equal(f(A, x), counts(A, x))
    assert _ran(f) and "einsum" not in _ran(f)


def test_reduced_precision_matmul_settings_keep_the_elementwise_products():
    """With float32 matmul precision below "highest" a matrix product may round its inputs
    (TF32, bfloat16); the loop multiplies in float32, so the einsum is not used."""
    A, B = torch.randn(5, 4), torch.randn(4, 6)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        f = autovec(matmul)
        torch.testing.assert_close(f(A, B), matmul(A, B))
        assert "einsum" not in _ran(f) and _ran(f)
    finally:
        torch.set_float32_matmul_precision(before)


def test_infinities_give_the_loops_nan_values_and_gradients():
    """`out[j] += A[i, j] * b[j]` with b[j] = inf and A's column of both signs: the loop adds
    inf and -inf (NaN); summing A's column first would give inf. Gradients of a nest's
    broadcast values are summed before they are multiplied, so an infinite input with
    gradients keeps the loop."""
    A = torch.tensor([[1.0, 2.0], [-3.0, 1.0]])
    b = torch.tensor([float("inf"), 1.0])
    want = column_scaled(A, b)
    got = autovec(column_scaled)(A, b)
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and bool(torch.isnan(want[0]))
    torch.testing.assert_close(got[1], want[1])

    A = torch.tensor([float("inf"), 1.0, -2.0, 0.5], requires_grad=True)
    B = torch.randn(4, requires_grad=True)
    C = torch.tensor([2.0, -1.0]).view(2, 1, 1).expand(2, 4, 4).contiguous()
    assert_equivalent(three_factors, A, B, C, grad=True)


def three_factors(A, B, C):
    out = torch.zeros(4)
    for k in range(2):
        for i in range(4):
            for j in range(4):
                out[j] += A[i] * B[j] * C[k, j, i]
    return out


def test_the_steady_state_checks_infinities_with_gradients_too():
    """The same check once the nest's guard is written out for its signature (runtime.lanes):
    calls on finite values with gradients first, then one with an infinite value."""
    f = autovec(three_factors)
    B = torch.randn(4, requires_grad=True)
    C = torch.tensor([2.0, -1.0]).view(2, 1, 1).expand(2, 4, 4).contiguous()
    for _ in range(4):
        f(torch.randn(4, requires_grad=True), B, C)
    assert f._autovec_state.runtime.lanes
    A = torch.tensor([float("inf"), 1.0, -2.0, 0.5], requires_grad=True)
    A2 = A.detach().clone().requires_grad_()
    f._autovec_state.runtime.ran.clear()
    got, want = f(A, B, C), three_factors(A2, B, C)
    assert _ran(f) == set()       # (the loop ran)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    g1, = torch.autograd.grad(got.nansum(), A)
    g2, = torch.autograd.grad(want.nansum(), A2)
    assert torch.equal(torch.isnan(g1), torch.isnan(g2))
    torch.testing.assert_close(g1.nan_to_num(), g2.nan_to_num())


def three_index_product(A, B):
    out = torch.zeros(4, 4, dtype=torch.float64)
    for i in range(0, 4, 2):
        for k in range(1, 3):
            for j in range(3):
                out[i, j] += A[j, k, i] * B[k]
    return out


def test_a_three_index_factor_is_not_a_matrix_product():
    """(fuzz store2 seed 660292: `A[j, k, i] * B[k]` summed over k was computed as `A' @ B'`, whose
    `@` contracts the 3-d operand's last index, i, not k: wrong values)"""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(4, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    B = torch.randn(3, generator=g, dtype=torch.float64)
    fast = autovec(three_index_product)
    for _ in range(3):
        torch.testing.assert_close(fast(A, B), three_index_product(A, B), rtol=1e-12, atol=1e-12)
    assert explain(three_index_product, A, B).path == "vectorized"
