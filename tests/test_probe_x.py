"""Findings of probe X (stop 49): realistic loops checked against the original for values,
in-place effects, gradients and exceptions."""
import pytest
import torch

from autovec import autovec, explain
from conftest import outcome


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def masked_probs(x, drop):
    y = torch.sigmoid(x)                 # (sigmoid saves its output for backward)
    for i in range(y.shape[0]):
        if drop[i]:
            y[i] = 0
    return y.sum()


def zero_flagged_rows(w, flagged):
    v = w[:, :2]                         # (a view of a leaf that requires grad)
    for i in range(v.shape[0]):
        if flagged[i]:
            v[i] = 0
    return v.sum()


def _backward(fn, x, flags):
    x = x.clone().requires_grad_()
    try:
        fn(x, flags).backward()
    except RuntimeError as e:
        return type(e), str(e).split(":")[0]
    return x.grad


@pytest.mark.parametrize("fn", [masked_probs, zero_flagged_rows])
def test_a_conditional_store_that_never_happens_writes_nothing(fn):
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    none = torch.zeros(8, dtype=torch.bool)
    fast = autovec(fn)
    for _ in range(3):      # (the first calls and the steady state)
        got, want = _backward(fast, x, none), _backward(fn, x, none)
        assert isinstance(want, torch.Tensor)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert explain(fn, x, none).path == "vectorized"


@pytest.mark.parametrize("fn", [masked_probs, zero_flagged_rows])
def test_a_conditional_store_that_happens_raises_as_the_loop_does(fn):
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(1))
    some = torch.zeros(8, dtype=torch.bool)
    some[3] = True
    got, want = _backward(autovec(fn), x, some), _backward(fn, x, some)
    assert got == want and want[0] is RuntimeError


def test_a_conditional_store_into_a_fresh_output_that_never_happens():
    def clipped(x, bad):
        out = torch.zeros(x.shape[0], x.shape[1], requires_grad=True)
        for i in range(x.shape[0]):
            if bad[i]:
                out[i] = x[i]            # (the loop raises here: a leaf that requires grad)
        return out
    x = torch.randn(5, 2)
    none = torch.zeros(5, dtype=torch.bool)
    some = none.clone()
    some[1] = True
    for flags in (none, some):
        got, want = outcome(autovec(clipped), x, flags), outcome(clipped, x, flags)
        if isinstance(want, torch.Tensor):
            assert isinstance(got, torch.Tensor) and torch.equal(got, want) and got.is_leaf == want.is_leaf
        else:
            assert got == want


def test_a_fresh_output_whose_conditional_stores_never_happen():
    def kept_rows(x, keep):
        out = torch.zeros(x.shape[0], x.shape[1])
        for i in range(x.shape[0]):
            if keep[i]:
                out[i] = x[i] * 2
        return out
    x = torch.randn(6, 3)
    fast = autovec(kept_rows)
    for flags in (torch.zeros(6, dtype=torch.bool), torch.tensor([0, 1, 0, 0, 1, 0], dtype=torch.bool)):
        for _ in range(2):
            got, want = fast(x, flags), kept_rows(x, flags)
            assert torch.equal(got, want) and got._version == 0 if not flags.any() else torch.equal(got, want)
    assert explain(kept_rows, x, torch.zeros(6, dtype=torch.bool)).path == "vectorized"


def half_times_int(a, b):
    out = torch.empty(a.shape[0], dtype=a.dtype)
    for i in range(a.shape[0]):
        out[i] = a[i] * b[i]
    return out


def int_floor_half(counts, width):
    return [(counts[i] // width[i]).item() for i in range(len(counts))]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_per_iteration_half_and_wide_int_values_keep_the_loop(dtype):
    # two 0-d CPU tensors compute at float32 with the integer's own value (2801 // 5.5 is 508 in
    # bfloat16); the batch's rows would round the integers to half precision first (2801 is 2800)
    g = torch.Generator().manual_seed(0)
    a = torch.rand(300, generator=g).to(dtype)
    b = torch.randint(0, 1000, (300,), generator=g)
    c = torch.randint(1, 3000, (300,), generator=g)
    w = (torch.rand(300, generator=g) * 10 + 0.5).to(dtype)
    assert torch.equal(autovec(half_times_int)(a, b), half_times_int(a, b))
    assert autovec(int_floor_half)(c, w) == int_floor_half(c, w)
    assert explain(half_times_int, a, b).path == "python"
    assert explain(int_floor_half, c, w).path == "python"
    # (8-bit integers are exact in half precision: batched)
    small = b.to(torch.uint8)
    assert torch.equal(autovec(half_times_int)(a, small), half_times_int(a, small))
    assert explain(half_times_int, a, small).path == "vectorized"


def doubled_or_empty(x):
    return torch.stack([r * 2 for r in x]) if len(x) else x


def normalized_rows(x, eps: float = 1e-6):
    out = torch.stack([r / (r.norm() + eps) for r in x]) if x.shape[0] > 0 else x.new_zeros(0, x.shape[1])
    return out


def nested_guards(x, mode: int):
    return torch.stack([r.sum() for r in x]) if mode == 0 else (torch.stack([r.amax() for r in x]) if mode == 1
                                                                 else x.new_zeros(x.shape[0]))


@pytest.mark.parametrize("fn, extra", [(doubled_or_empty, ()), (normalized_rows, ()), (nested_guards, (0,)),
                                       (nested_guards, (1,)), (nested_guards, (2,))])
def test_a_comprehension_on_one_side_of_a_conditional_expression(fn, extra):
    # (the empty batch's guard: `c` evaluated once, then the side it picks, as the statements do)
    for n in (0, 1, 5):
        x = torch.randn(n, 3, generator=torch.Generator().manual_seed(n))
        got, want = outcome(autovec(fn), x, *extra), outcome(fn, x, *extra)
        if isinstance(want, tuple):       # (torch.stack of no rows raises in both)
            assert got == want
        else:
            assert got.shape == want.shape and got.dtype == want.dtype and torch.equal(got, want)
    x = torch.randn(6, 3)
    ex = explain(fn, x, *extra)
    if fn is not nested_guards or extra != (2,):
        assert ex.path == "vectorized", str(ex)


def test_the_explanation_shows_the_function_as_written():
    ex = explain(doubled_or_empty, torch.randn(4, 2))
    original = [l for l in ex.diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    assert any("if len(x) else x" in l for l in original), ex.diff
