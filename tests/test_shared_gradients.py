"""Loop-invariant work under gradients (analysis.shared, runtime._shared_gradients): a batched
form computes `torch.sqrt(w)` once where the loop computes it every iteration, so autograd adds
the iterations' gradients before multiplying by the derivative. With an infinite derivative
(sqrt at 0) the loop's sum of ±inf is NaN where the batch's product is ±inf: such loops keep
Python when the invariant tensor requires grad, and run batched otherwise."""
import pytest
import torch
import torch.nn.functional as F

from autovec import assert_equivalent, autovec, explain
from autovec.analysis.shared import shared_work
from conftest import ran_modes


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def scale_by_sqrt(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * torch.sqrt(w)
    return out


def scale_by_local_sqrt(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s = w ** 0.5
        out[i] = x[i] * s
    return out


def sum_over_rows(x, w):
    total = torch.zeros(())
    for row in x:
        total = total + (row * (1.0 / w)).sum()
    return total


def gated(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * torch.sigmoid(w * 2.0) + F.softplus(w)
    return out


def times_invariant_product(x, w, c):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * (w * c)
    return out


def direct_use(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.sqrt(x[i] * w)
    return out


def reversed_rows(x, w):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[len(x) - 1 - i] = x[i] * w.shape[0] + (w.sum() > 0) * x.size(1)
    return out


def _grads(fn, x, w, *rest):
    x = x.clone().requires_grad_()
    w = w.clone().requires_grad_()
    y = fn(x, w, *rest)
    y.sum().backward() if y.dim() == 0 else (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
    return y.detach(), x.grad, w.grad


def _same(a, b):
    if any((p is None) != (q is None) for p, q in zip(a, b)):
        return False
    a, b = [p for p in a if p is not None], [q for q in b if q is not None]
    return all(torch.equal(torch.nan_to_num(p, 1e9, 2e9, -2e9), torch.nan_to_num(q, 1e9, 2e9, -2e9))
               or torch.allclose(p, q, rtol=1e-5, atol=1e-6, equal_nan=True) for p, q in zip(a, b))


def _keeps_the_loop_and_its_nan(fn, rows=40):
    """fn(x, w) with sqrt-like work on w at 0: the loop's gradient there is NaN (inf * g summed
    over signs); autovec must give the same, by running the loop. Returns the wrapper."""
    x = torch.randn(rows, 3)
    w = torch.tensor([0.0, 1.0, 4.0])
    want = _grads(fn, x, w)
    fast = autovec(fn)
    got = _grads(fast, x, w)
    assert torch.isnan(want[2][0])
    assert _same(want, got), (want[2], got[2])
    assert ran_modes(fast) == set()
    return fast


@pytest.mark.parametrize("fn", [scale_by_sqrt, scale_by_local_sqrt])
def test_infinite_derivative_keeps_the_loop_and_its_nan(fn):
    _keeps_the_loop_and_its_nan(fn)
    x, w = torch.randn(40, 3), torch.tensor([0.0, 1.0, 4.0])
    ex = explain(fn, x, w.clone().requires_grad_())
    assert ex.path == "python" and "derivative can be infinite" in str(ex)


def test_division_by_an_invariant_tensor_in_a_sum_keeps_the_loop():
    x = torch.randn(30, 4)
    w = torch.tensor([0.0, 1.0, -2.0, 3.0])
    want = _grads(sum_over_rows, x, w)
    fast = autovec(sum_over_rows)
    got = _grads(fast, x, w)
    assert _same(want, got)
    assert ran_modes(fast) == set()


@pytest.mark.parametrize("fn", [scale_by_sqrt, scale_by_local_sqrt, sum_over_rows])
def test_without_grad_the_same_loops_run_batched(fn):
    x = torch.randn(40, 3)
    w = torch.rand(3) + 0.5
    fast = autovec(fn)
    assert torch.allclose(fast(x, w), fn(x, w))
    assert ran_modes(fast)
    with torch.no_grad():
        fast2 = autovec(fn)
        assert torch.allclose(fast2(x, w.requires_grad_()), fn(x, w))
    assert ran_modes(fast2)


def test_bounded_derivatives_run_batched_with_grad():
    x = torch.randn(40, 3)
    w = torch.randn(3)
    assert_equivalent(gated, x, w, grad=True)
    fast = autovec(gated)
    _grads(fast, x, w)
    assert ran_modes(fast)


def test_an_infinite_value_in_a_bounded_chain_keeps_the_loop():
    x = torch.randn(40, 3)
    x[::2] *= -1
    w = torch.tensor([1.0, 2.0, 3.0])
    c = torch.tensor([float("inf"), 1.0, 2.0])
    want = _grads(times_invariant_product, x, w, c)
    fast = autovec(times_invariant_product)
    got = _grads(fast, x, w, c)
    assert _same(want, got)
    assert ran_modes(fast) == set()
    # finite values: batched, with the loop's gradients
    c = torch.tensor([3.0, 1.0, 2.0])
    assert _same(_grads(times_invariant_product, x, w, c), _grads(fast, x, w, c))
    assert ran_modes(fast)


def test_per_iteration_operations_are_not_shared():
    x = torch.rand(20, 3)
    w = torch.tensor([0.0, 1.0, 2.0])
    fast = autovec(direct_use)
    assert _same(_grads(direct_use, x, w), _grads(fast, x, w))
    assert ran_modes(fast)


def _plan(fn):
    st = autovec(fn)._autovec_state
    st.prepare()
    (m,) = st.runtime.matches.values()
    return m.plan


@pytest.mark.parametrize("fn, expected", [
    (scale_by_sqrt, (("w", False),)),
    (scale_by_local_sqrt, (("w", False),)),
    (sum_over_rows, (("w", False),)),
    (gated, (("w", True),)),
    (times_invariant_product, (("c", True), ("w", True))),
    (direct_use, ()),
    (reversed_rows, ()),          # sizes and comparisons carry no gradient
])
def test_the_analysis_finds_the_shared_operations(fn, expected):
    assert shared_work(_plan(fn)) == expected


class Temperature(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.log_t = torch.nn.Parameter(torch.tensor([0.0, -100.0, 1.0]))

    @autovec
    def forward(self, x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * torch.exp(self.log_t)
        return out


def test_a_module_parameter_through_exp_keeps_the_loop_under_grad():
    m = Temperature()
    x = torch.randn(30, 3)
    y = m(x)
    assert torch.allclose(y, Temperature.forward.__wrapped__(m, x))
    assert ran_modes(Temperature.forward) == set()
    with torch.no_grad():
        m(x)
    assert ran_modes(Temperature.forward)


def test_sizes_and_comparisons_do_not_keep_the_loop():
    x = torch.randn(20, 3)
    w = torch.tensor([0.0, 1.0, 2.0])
    fast = autovec(reversed_rows)
    assert _same(_grads(reversed_rows, x, w), _grads(fast, x, w))
    assert ran_modes(fast)


# ---------------------------------------------------------------- found by the adversarial probe

def _sqrt_helper(v, w):
    return v * torch.sqrt(w)


W_GLOBAL = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)


def _global_helper(v):
    return v * torch.sqrt(W_GLOBAL)


def helper_argument(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = _sqrt_helper(x[i], w)
    return out


def comprehension_iterable(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * torch.stack([s for s in torch.sqrt(w)])
    return out


def nest_level(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * torch.sqrt(w[j])
    return out


class _Root:
    def __init__(self, w):
        self.w = w

    @property
    def s(self):
        return torch.sqrt(self.w)


def property_read(x, w):
    p = _Root(w)
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * p.s
    return out


class _SqrtModule(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, v):
        return v * self.w.sqrt()


def module_forward(x, w):
    m = _SqrtModule(w)
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = m(x[i])
    return out


def closure_helper(x, w):
    def g(v):
        return v * torch.sqrt(w)
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = g(x[i])
    return out


def half_cast(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * w.half()
    return out


@pytest.mark.parametrize("fn", [helper_argument, comprehension_iterable, nest_level, property_read,
                                module_forward, closure_helper])
def test_hidden_invariant_work_keeps_the_loop_under_grad(fn):
    fast = _keeps_the_loop_and_its_nan(fn, rows=12)
    x, w = torch.randn(12, 3), torch.tensor([0.0, 1.0, 4.0])
    with torch.no_grad():
        torch.testing.assert_close(fast(x, w), fn(x, w))
    assert ran_modes(fast)                          # without grad: batched


def test_a_global_read_by_a_helper():
    def global_helper(x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = _global_helper(x[i])
        return out
    x = torch.randn(12, 3)
    for fn in (global_helper, autovec(global_helper)):
        W_GLOBAL.grad = None
        (fn(x) * torch.linspace(-1, 1, 36).view(12, 3)).sum().backward()
        if fn is global_helper:
            want = W_GLOBAL.grad.clone()
    assert torch.isnan(want[0]) and _same([want], [W_GLOBAL.grad])


def test_a_half_cast_of_an_invariant_sums_gradients_as_the_loop():
    x = torch.full((8, 2), 30000.0, dtype=torch.float16)
    w = torch.ones(2, requires_grad=True)
    (half_cast(x, w).float().sum()).backward()
    want, w.grad = w.grad.clone(), None
    (autovec(half_cast)(x, w).float().sum()).backward()
    assert torch.equal(w.grad, want) and torch.isfinite(want).all()


class _Linear2(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 3)

    def forward(self, v):
        return self.fc2(torch.relu(self.fc1(v)))


def test_a_custom_module_with_linear_parameters_still_runs_batched_under_grad():
    m = _Linear2()

    def apply(x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = m(x[i])
        return out
    x = torch.randn(10, 3)
    assert_equivalent(apply, x)
    fast = autovec(apply)
    fast(x).sum().backward()
    assert ran_modes(fast)


def test_stored_attributes_resolve_without_running_code():
    import collections
    Cfg = collections.namedtuple("Cfg", "scale")

    def scaled(x, cfg):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * cfg.scale
        return out
    x = torch.randn(10, 3, requires_grad=True)
    fast = autovec(scaled)
    fast(x, Cfg(torch.tensor([1.0, 2.0, 3.0], requires_grad=True))).sum().backward()
    assert ran_modes(fast)


class _ViaMethod(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)

    def scaled(self, v):
        return v * torch.sqrt(self.w)

    def forward(self, v):
        return self.scaled(v)


def test_a_custom_module_method_called_by_forward():
    def apply(x, w):
        m = _ViaMethod(w)
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = m(x[i])
        return out, m.w
    x = torch.randn(12, 3)
    w = torch.tensor([0.0, 1.0, 4.0])
    grads = []
    for fn in (apply, autovec(apply)):
        out, p = fn(x, w)
        (out * torch.linspace(-1, 1, 36).view(12, 3)).sum().backward()
        grads.append(p.grad)
    assert torch.isnan(grads[0][0]) and _same(grads[:1], grads[1:])


class _WithInit(_Linear2):
    def reset_parameters(self):
        torch.nn.init.kaiming_uniform_(self.fc1.weight, a=5 ** 0.5)


def test_methods_forward_does_not_call_do_not_count():
    m = _WithInit()

    def apply(x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = m(x[i])
        return out
    fast = autovec(apply)
    fast(torch.randn(10, 3)).sum().backward()
    assert ran_modes(fast)


# ---------------------------------------------------------------- found by the second probe

def _h_default_factory(wd):
    def h(v, w=wd):
        return v * torch.sqrt(w)
    return h


class _Box:
    def __init__(self, w):
        self.w = w

    def apply(self, v):
        return v * torch.sqrt(self.w)


class _BoxModule(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.box = _Box(w)

    def forward(self, v):
        return v * self.box.w.sqrt()


class _LambdaModule(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w
        self.fn = lambda v: v * torch.sqrt(self.w)

    def forward(self, v):
        return self.fn(v)


def _through(make_callable):
    def fn(x, w):
        g = make_callable(w)
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = g(x[i])
        return out
    return fn


def in_a_list(x, w):
    ws = [w]
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * ws[0].sqrt()
    return out


def in_a_dict(x, w):
    d = {"w": w}
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * torch.sqrt(d["w"])
    return out


def functional(x, w):
    m = _SqrtModule(torch.ones(3))
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.func.functional_call(m, {"w": w}, (x[i],))
    return out


@pytest.mark.parametrize("fn", [
    in_a_list, in_a_dict, functional,
    _through(lambda w: __import__("functools").partial(_sqrt_helper, w=w)),
    _through(lambda w: _Box(w).apply),
    _through(_h_default_factory),
    _through(_BoxModule),
    _through(_LambdaModule),
], ids=["list", "dict", "functional_call", "partial", "object method", "default argument", "module holding an object",
        "module calling a lambda"])
def test_tensors_reached_through_containers_and_callables_keep_the_loop(fn):
    x, w = torch.randn(12, 3), torch.tensor([0.0, 1.0, 4.0])
    want = _grads(fn, x, w)
    fast = autovec(fn)
    got = _grads(fast, x, w)
    assert torch.isnan(want[2][0]) and _same(want, got), (want[2], got[2])


# ----------------------------------------------------------------------------- inner loops (stop 42)
# An inner loop runs once for the whole batch: what its steps compute from loop-invariant values
# alone (`W[k].sqrt()`) is shared work too. Before stop 42 the walk of the body did not look into
# inner loops, and these gave ±inf gradients where the loop gives NaN.

def inner_range_sqrt(x, w):
    out = []
    for i in range(x.shape[0]):
        h = x[i]
        for k in range(w.shape[0]):
            h = h * w[k].sqrt()
        out.append(h)
    return torch.stack(out)


def inner_row_named_first(x, w):
    out = []
    for i in range(x.shape[0]):
        h = x[i]
        for k in range(w.shape[0]):
            r = w[k]
            h = h * torch.sqrt(r)
        out.append(h)
    return torch.stack(out)


def inner_total_then_used(x, w):
    out = []
    for i in range(x.shape[0]):
        s = torch.zeros(3)
        for k in range(w.shape[0]):
            s = s + w[k].sqrt()
        out.append(x[i] * s)
    return torch.stack(out)


def inner_walk_sqrt(x, w):
    out = []
    for i in range(x.shape[0]):
        h = x[i]
        for r in w:
            h = h * r.sqrt()
        out.append(h)
    return torch.stack(out)


def read_before_bound(x, w):
    out = []
    for i in range(x.shape[0]):
        h, t = x[i], x[i]
        for k in range(w.shape[0]):
            h = h * t             # (from the second step on, `t` is `w[k - 1].sqrt()`)
            t = w[k].sqrt()
        out.append(h)
    return torch.stack(out)


def inner_tanh_layers(x, w):
    out = []
    for i in range(x.shape[0]):
        h = x[i]
        for k in range(w.shape[0]):
            h = torch.tanh(h * w[k])
        out.append(h)
    return torch.stack(out)


_W = torch.tensor([[0.0, 1.0, 4.0], [1.0, 0.0, 2.0], [3.0, 1.0, 0.5]])


@pytest.mark.parametrize("fn", [inner_range_sqrt, inner_row_named_first, inner_total_then_used, inner_walk_sqrt,
                                read_before_bound])
def test_infinite_derivatives_in_an_inner_loop_keep_the_loop_and_its_nan(fn):
    x = torch.randn(30, 3)
    want = _grads(fn, x, _W)
    fast = autovec(fn)
    got = _grads(fast, x, _W)
    assert torch.isnan(want[2]).any()
    assert _same(want, got), (want[2], got[2])
    assert explain(fn, x, _W.clone().requires_grad_()).path == "python"
    assert explain(fn, x, _W).path == "vectorized"       # (no gradient: the batch)


def test_finite_derivatives_in_an_inner_loop_still_run_batched_with_gradients():
    x = torch.randn(30, 3)
    want = _grads(inner_tanh_layers, x, _W)
    got = _grads(autovec(inner_tanh_layers), x, _W)
    assert _same(want, got)
    assert explain(inner_tanh_layers, x, _W.clone().requires_grad_()).path == "vectorized"


def inner_maybe_skipped(x, w, m):
    out = []
    for i in range(x.shape[0]):
        s = w.sqrt()
        for k in range(m):
            s = x[i] * k          # (after no step, `s` is still `w.sqrt()`)
        out.append(x[i] * s)
    return torch.stack(out)


def test_a_value_an_inner_loop_may_leave_as_it_was_counts_as_invariant():
    x = torch.randn(30, 3)
    w = torch.tensor([0.0, 1.0, 4.0])
    want = _grads(inner_maybe_skipped, x, w, 0)
    got = _grads(autovec(inner_maybe_skipped), x, w, 0)
    assert torch.isnan(want[2][0])
    assert _same(want, got), (want[2], got[2])
    assert explain(inner_maybe_skipped, x, w.clone().requires_grad_(), 0).path == "python"


def sigmoid_scaled(x, w):
    out = []
    for i in range(len(x)):
        out.append(x[i] * torch.sigmoid(w))
    return torch.stack(out)


def test_a_float16_invariant_that_requires_grad_keeps_the_loop():
    """(probeY) The batch adds the iterations' gradients in float16 before multiplying by
    sigmoid's derivative (0 at -200): 40000 + 40000 overflows, inf * 0 is NaN, where the loop's
    products are 0."""
    def grads(fn):
        x = torch.tensor([40000.0, 40000.0, 1.0], dtype=torch.float16)
        w = torch.tensor(-200.0, dtype=torch.float16, requires_grad=True)
        fn(x, w).sum().backward()
        return w.grad
    fast = autovec(sigmoid_scaled)
    for _ in range(3):
        assert torch.equal(grads(fast), grads(sigmoid_scaled))
    w = torch.tensor(-200.0, dtype=torch.float16, requires_grad=True)
    ex = explain(sigmoid_scaled, torch.ones(3, dtype=torch.float16), w)
    assert ex.path == "python" and "float16" in str(ex)
    assert explain(sigmoid_scaled, torch.ones(3), torch.tensor(-2.0, requires_grad=True)).path == "vectorized"
