"""Regression tests for differences the fuzzer found (each once a wrong answer or a crash)."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def elif_chain(x):
    out = torch.zeros(len(x))
    for i in range(len(x)):
        if x[i] > 1:
            out[i] = 1.0
        elif x[i] > 0:
            out[i] = 2.0
        else:
            out[i] = 3.0
    return out


def index_rebound(x):
    out = torch.zeros(2 * len(x))
    for i in range(len(x)):
        j = i
        i = 2 * i
        out[i] = x[j]
    return out


def rows_in_place(x):
    for row in x:
        row *= 2
    return x


def max_with_nan(x):
    best = 0.0
    for i in range(len(x)):
        best = max(x[i].item(), best)
    return best


def min_tensor_with_nan(x):
    best = float("inf")
    for i in range(len(x)):
        best = min(x[i], best)
    return best


def recurrence_with_inf(x):
    h = 0.0
    res = []
    for i in range(len(x)):
        h = h * 0.5 + x[i]
        res.append(h)
    return torch.stack(res)


def bool_accumulator(x):
    s = torch.zeros(2, dtype=torch.bool)
    for i in range(len(x)):
        s += x[i]
    return s


def bool_subtraction(x):
    s = torch.zeros(2)
    for i in range(len(x)):
        s -= x[i]
    return s


def float64_accumulator(x):
    acc = torch.zeros((), dtype=torch.float64)
    for i in range(len(x)):
        acc += x[i]
    return acc


def max_generator(x):
    return max(-x[i] * x[i] for i in range(len(x)))


CASES = [
    (elif_chain, (torch.tensor([2.0, 0.5, -1.0]),)),
    (index_rebound, (torch.tensor([1.0, 2.0, 3.0]),)),
    (rows_in_place, (torch.ones(3, 2),)),
    (max_with_nan, (torch.tensor([5.0, float("nan"), 1.0]),)),
    (min_tensor_with_nan, (torch.tensor([float("nan")]),)),
    (recurrence_with_inf, (torch.tensor([1.0, 2.0, float("inf"), 3.0]),)),
    (bool_accumulator, (torch.tensor([[True, False], [False, False]]),)),
    (bool_subtraction, (torch.tensor([[True, False], [True, True]]),)),
    (float64_accumulator, (torch.full((50,), 1000.1),)),
]


@pytest.mark.parametrize("fn, args", CASES, ids=[f.__name__ for f, _ in CASES])
def test_fuzzer_finding_stays_fixed(fn, args):
    assert_equivalent(fn, *args)
    assert_equivalent(fn, *args)   # the second call runs from the per-signature cache


def test_first_call_of_in_place_rows_changes_the_input_once():
    x = torch.ones(3, 2)
    autovec(rows_in_place)(x)
    assert torch.equal(x, torch.full((3, 2), 2.0))


def test_gradient_through_a_selected_iteration_has_no_nan():
    x = torch.tensor([0.5, float("inf"), 0.1], requires_grad=True)
    assert_equivalent(max_generator, x, grad=True)
    y = torch.tensor([0.5, float("inf"), 0.1], requires_grad=True)
    autovec(max_generator)(y).backward()
    assert not torch.isnan(y.grad).any()


def running_max_one_step(x):
    h = torch.zeros_like(x[0])
    res = []
    k = 0
    while k < x.shape[0]:
        h = torch.maximum(h, x[k, :])
        res.append(h)
        k += 1
    return torch.stack(res)


def test_running_extreme_of_a_single_step():
    assert_equivalent(running_max_one_step, torch.randn(1, 5, dtype=torch.float64))
    assert_equivalent(running_max_one_step, torch.randn(7, 5))


def _decay(w):
    w += 0.125
    return w * 1


def helper_updating_its_argument(x, w):
    out = torch.empty(x.shape[0], w.shape[1])
    for i in range(x.shape[0]):
        out[i] = x[i] @ _decay(w)
    return out


def view_of_running_total(x):
    total = torch.zeros(())
    hist = []
    for i in range(x.shape[0]):
        total += x[i]
        hist.append(total[...])
    return torch.stack(hist)


def inplace_running_sum_other_dtype(x):
    s = torch.zeros(x.shape[1])
    trace = []
    for t in range(x.shape[0]):
        s += x[t]
        trace.append(s * 0.5)
    return torch.stack(trace)


@pytest.mark.parametrize("fn, args", [
    (helper_updating_its_argument, lambda: (torch.ones(3, 2), torch.ones(2, 2))),
    (view_of_running_total, lambda: (torch.tensor([1.0, 2.0, 3.0]),)),
    (inplace_running_sum_other_dtype, lambda: (torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64),)),
], ids=["helper_aug_assign", "view_of_running_total", "inplace_sum_dtype"])
def test_second_fuzzer_round_findings(fn, args):
    assert_equivalent(fn, *args())


def reversed_decay_from_python_float(x):
    h = 0.0
    res = []
    for t in range(x.size(0) - 1, -1, -1):
        h = h * -0.92 + x[t]
        res.append(h)
    return torch.stack(res)


def decay_with_python_factor_state(x):
    h = torch.zeros_like(x[0])
    res = []
    for t in range(x.shape[0]):
        h = h * 0.5 + x[t]
        res.append(h * 2)
    return res


@pytest.mark.parametrize("fn, x", [
    (reversed_decay_from_python_float, torch.randn(2)),
    (reversed_decay_from_python_float, torch.randn(40, 3)),
    (decay_with_python_factor_state, torch.randn(1)),
    (decay_with_python_factor_state, torch.randn(9, 2)),
])
def test_python_float_factor_promotes_like_a_python_number(fn, x, monkeypatch):
    # fuzzer seeds 3558 and 2853: a factor that is a Python float in the loop came back from
    # the batched pre-body as a float64 0-d tensor and promoted a float32 recurrence to float64
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    assert explain(autovec(fn), x).path == "vectorized"
    assert_equivalent(fn, x)


def decay_into_features(x, a):
    h = 0.0
    for t in range(x.shape[0]):
        h = a * h + x[t]          # x[t] is 0-d, a is (d,): h becomes (d,)
    return h


def test_per_feature_factor_broadcasting_a_scalar_state(monkeypatch):
    # fuzzer `rec` seed 497: the stacked x[t] (n,) was aligned with the feature dimension
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    g = torch.Generator().manual_seed(0)
    for n, d in ((64, 64), (50, 3), (3, 50)):
        x, a = torch.randn(n, generator=g), torch.rand(d, generator=g) * 0.9
        assert explain(autovec(decay_into_features), x, a).path == "vectorized"
        assert_equivalent(decay_into_features, x, a)


W_GRAD = torch.randn(16, 16)


def last_update_unused(xs, h):
    outs = []
    for x_t in xs:
        outs.append(h)
        h = h * 0.5 + torch.tanh(x_t @ W_GRAD)   # the last update is never used
    return torch.stack(outs)


def test_unused_list_elements_keep_a_none_gradient(monkeypatch):
    # fuzzer `compile` seed 424: stacking the list gave the last element a zero gradient
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    for fn in (last_update_unused, autovec(last_update_unused)):
        xs = [torch.ones(2, 16, requires_grad=True) for _ in range(5)]
        fn(xs, torch.zeros(2, 16)).sum().backward()
        assert xs[-1].grad is None and xs[0].grad is not None
    xs = [torch.ones(2, 16) for _ in range(5)]
    assert explain(autovec(last_update_unused), xs, torch.zeros(2, 16)).path == "vectorized"


def appends_its_own_length(x):
    log = []
    for row in x:
        log.append(torch.tanh(row * 2.0) * 0.5)
        log.append(len(log))
    return log


def test_compiled_step_never_reads_a_list_it_fills(monkeypatch):
    # fuzzer `compile` seed 18: every appended value was computed before the first append
    from autovec import compiled
    monkeypatch.setattr(compiled, "_BACKEND", "eager")
    f = autovec(appends_its_own_length, fallback="compile")
    x = torch.randn(3, 2)
    assert "_av_step" not in explain(f).rewritten_source
    for _ in range(3):
        got, want = f(x), appends_its_own_length(x)
        assert [v for v in got if isinstance(v, int)] == [v for v in want if isinstance(v, int)]


def inplace_running_product_traced(x):
    p = torch.ones(())
    trace = []
    for k, row in enumerate(x):
        p *= (1.0 + 0.1 * torch.tanh(row.float()))
        trace.append(p * 0.5)
    return trace, p


def branch_only_raises_on_odd_rows(x):
    out = torch.zeros(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        if i % 2 == 0:
            v = x[i].float() * 2
        else:
            v = (~x[i]) - 0.5 * i      # bool tensor minus a Python float: the loop raises
        out[i] = v
    return out


def ifexp_branch_raises_late(x):
    out = torch.ones(x.shape[0], x.shape[1])
    for i in range(len(x)):
        out[i] = x[i].float() if i < 3 else torch.sigmoid(x[i] - 0.5 * i)
    return out


def test_in_place_running_product_keeps_its_gradient(monkeypatch):
    # fuzzer seed 40386: the product saved the accumulator, which the commit then overwrote
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    assert_equivalent(inplace_running_product_traced, torch.randn(8, requires_grad=True), grad=True)


@pytest.mark.parametrize("fn", [branch_only_raises_on_odd_rows, ifexp_branch_raises_late])
def test_a_branch_that_raises_later_is_checked_before_the_batch_is_trusted(fn, monkeypatch):
    # fuzzer seeds 40754 and 44626: the one-time check ran only iteration 0, whose branch works;
    # the batched form (the index as a tensor) computed the other branch without the loop's error
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.rand(9, 4) > 0.5
    with pytest.raises(RuntimeError) as want:
        fn(x)
    with pytest.raises(RuntimeError) as got:
        autovec(fn)(x)
    assert str(got.value) == str(want.value)


def returns_with_wide_gamma(x, gamma, done):
    h = x[0]
    for x_t, done_t in zip(x, done):
        h = x_t + gamma * h * (~done_t)
    return h


def test_a_wider_factor_does_not_change_the_recurrences_dtype(monkeypatch):
    # fuzzer `rec` seed 31073: `gamma * h * (~done)` grouped as `(gamma * ~done) * h` promoted a
    # float32 state to float64 through a float64 0-d gamma
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 1, generator=g)
    done = torch.rand(50, 1, generator=g) < 0.2
    assert_equivalent(returns_with_wide_gamma, x, torch.tensor(0.9, dtype=torch.float64), done)
    assert_equivalent(returns_with_wide_gamma, x, 0.9, done)
    assert explain(autovec(returns_with_wide_gamma), x, 0.9, done).path == "vectorized"


def smoothed_one_hot(labels, classes: int, eps: float):
    out = torch.full((labels.shape[0], classes), eps / classes)
    for i in range(labels.shape[0]):
        out[i, labels[i]] = 1 - eps + eps / classes
    return out


def last_write_sparse(idx, v, size: int):
    out = torch.zeros(size)
    for k in range(idx.shape[0]):
        out[idx[k]] = v[k]                 # repeated indices: the last write wins
    return out


def last_write_reversed(idx, v, size: int):
    out = torch.zeros(size)
    for k in reversed(range(idx.shape[0])):
        out[idx[k]] = v[k]
    return out


def test_last_write_scatter_over_a_sparse_range_of_indices():
    # a probe loop (one-hot smoothing, 50000 x 100) spent 20 ms building a table as large as the
    # range of linear indices (5M) to find the last write per index; each row is written once
    g = torch.Generator().manual_seed(3)
    labels = torch.randint(0, 500, (40,), generator=g)
    assert_equivalent(smoothed_one_hot, labels, 500, 0.1)
    for size in (60, 100_000):           # a table of the range, or a sort (range > 4 x writes)
        idx = torch.randint(0, size, (50,), generator=g)
        idx[7], idx[30] = idx[3], idx[3]   # repeated, so the order decides
        v = torch.randn(50, generator=g)
        assert_equivalent(last_write_sparse, idx, v, size)
        assert_equivalent(last_write_reversed, idx, v, size)
        assert explain(autovec(last_write_sparse), idx, v, size).path == "vectorized"


def norms_as_tensor(x):
    return torch.tensor([x[i].norm().item() for i in range(x.shape[0])])


def counts_as_tensor(x):
    return torch.tensor([int((x[i] > 0).sum().item()) for i in range(x.shape[0])])


def flags_as_tensor(x):
    return torch.tensor([bool(x[i].max() > 1) for i in range(x.shape[0])])


@pytest.mark.parametrize("fn", [norms_as_tensor, counts_as_tensor, flags_as_tensor])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_torch_tensor_of_python_numbers_is_one_conversion(fn, dtype):
    # a probe loop (40000 norms through .item()) spent 5 ms in torch.tensor(batch.tolist());
    # the conversion must give torch.tensor's own dtypes (the default float dtype, int64, bool)
    x = (torch.randn(30, 4) * 2).to(dtype)
    assert_equivalent(fn, x)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got, want = autovec(fn)(x), fn(x)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    finally:
        torch.set_default_dtype(old)


# ----------------------------------------------------------------------------- in-place updates

def scale_rows(x, w):
    for i in range(x.shape[0]):
        x[i] *= w[i]
    return x


def add_scaled(x, w):
    for i in range(x.shape[0]):
        x[i] += w[i] * 3
    return x


def minus_mask(x, m):
    for i in range(x.shape[0]):
        x[i] -= m[i]
    return x


def add_columns(x, v):
    for j in range(x.shape[1]):
        x[:, j] += v[j].sum()
    return x


@pytest.mark.parametrize("fn", [scale_rows, add_scaled])
@pytest.mark.parametrize("xd, wd", [(torch.float32, torch.float64), (torch.float32, torch.float32),
                                    (torch.float16, torch.float32), (torch.float64, torch.float16),
                                    (torch.int64, torch.float32), (torch.int32, torch.int64)])
def test_update_computes_in_the_loops_dtype_bit_for_bit(fn, xd, wd):
    # `x[i] *= w[i]` with a 0-d w[i]: one iteration computes in x's dtype (a 0-d operand does not
    # promote), so a batch (n, 1) of float64 factors must not compute in float64; an int output
    # with float factors raises, as in the loop
    x = (torch.randn(300, 8) * 10).to(xd)
    w = (torch.randn(300) * 3).to(wd)
    try:
        want = fn(x.clone(), w)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            autovec(fn)(x.clone(), w)
        return
    fast = autovec(fn)
    for _ in range(2):
        got = fast(x.clone(), w)
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_subtracting_a_mask_raises_as_the_loop():
    x = torch.randn(5, 3)
    m = torch.rand(5, 3) > 0.5
    with pytest.raises(RuntimeError):
        minus_mask(x.clone(), m)
    with pytest.raises(RuntimeError):
        autovec(minus_mask)(x.clone(), m)


def test_column_updates_in_place_on_the_argument():
    x = torch.randn(6, 9)
    v = torch.randn(9, 4)
    a, b = x.clone(), x.clone()
    fast = autovec(add_columns)
    assert fast(a, v) is a
    add_columns(b, v)
    assert torch.equal(a, b)
    assert_equivalent(add_columns, x, v)


def item_rows(x):
    out = torch.zeros(x.shape[0], dtype=torch.float64)
    for k in range(x.shape[0]):
        out[k] = (x[k] * 2).sum().item()
    return out


def item_update(x, out):
    for k, row in enumerate(x):
        out[k] /= (row * 1.5).sum().item()
    return out


def test_python_numbers_stored_carry_no_gradient():
    # `.item()` gives a number: the output the loop fills with it does not require grad
    x = torch.randn(10, 3, requires_grad=True)
    got = autovec(item_rows)(x)
    assert not got.requires_grad and torch.equal(got, item_rows(x))
    out = torch.randn(10, dtype=torch.float64)
    a, b = out.clone(), out.clone()
    got = autovec(item_update)(x, a)
    assert not got.requires_grad and torch.equal(got, item_update(x, b))


def store_into_bools(x, c0):
    out = torch.empty_like(x)
    for i in range(len(x)):
        out[i] = ((x[i].int() * i) * c0).mean()
    return out


@pytest.mark.parametrize("n", [1, 4])
def test_value_requiring_grad_into_a_bool_output_behaves_as_the_loop(n):
    # torch lets the first such store make a bool tensor that requires grad, then refuses the
    # next one: the loop decides both
    c0 = torch.randn(3, requires_grad=True)
    x = torch.rand(n, 3) > 0.5
    try:
        want = store_into_bools(x, c0)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            autovec(store_into_bools)(x, c0)
        return
    got = autovec(store_into_bools)(x, c0)
    assert (got.requires_grad, got.dtype) == (want.requires_grad, want.dtype) and torch.equal(got, want)


def clamp_store(g, c, dtype):
    out = torch.empty(g.shape[0], dtype=dtype)
    for i in range(g.shape[0]):
        v = g[i].item()
        if v > c:
            out[i] = c               # a Python number in some iterations
        elif v < -c:
            out[i] = -c
        else:
            out[i] = g[i]            # a tensor in the others
    return out


@pytest.mark.parametrize("c", [1.5, 0.1, 2, 1e300])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64])
def test_stored_branches_keep_each_value_exact(c, dtype):
    # torch.where(m, 0.1, float32 tensor) would round 0.1 to float32 before a float64 output
    # stores it: the branches meet in a dtype that holds both (float32 where it holds c)
    g = torch.randn(64) * 2
    try:
        want = clamp_store(g, c, dtype)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            autovec(clamp_store)(g, c, dtype)
        return
    fast = autovec(clamp_store)
    for _ in range(2):
        got = fast(g, c, dtype)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert _ran(fast) <= {"batched", "vmap"}


def test_stored_branches_run_batched():
    g = torch.randn(64) * 2
    fast = autovec(clamp_store)
    fast(g, 1.5, torch.float32)
    assert _ran(fast) == {"batched"}


# ----------------------------------------------------------------------------- the index as a Python number

def index_times_float(x):
    out = torch.zeros(x.shape, dtype=x.dtype)
    for i in range(len(x)):
        out[i] = x[i] * (0.1 * i)          # a Python float in the loop (double precision)
    return out


def index_minus_half(x):
    out = torch.zeros(x.shape, dtype=torch.float32)
    for i in range(len(x)):
        out[i] = x[i] - 0.5 * i
    return out


def index_derived(x, scale):
    res = []
    for i, row in enumerate(x):
        t = i / len(x)                     # true division of ints: a float
        res.append(row * (t + scale))
    return torch.stack(res)


def nest_index(x):
    out = torch.zeros(x.shape, dtype=x.dtype)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * (0.1 * i + j)
    return out


@pytest.mark.parametrize("fn", [index_times_float, index_minus_half, nest_index])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_index_in_float_arithmetic_is_exact(fn, dtype):
    # broadcasting held the index as an int64 tensor: 0.1 * i became a float32 tensor, rounded
    # where the loop's Python float is not, and promoting a half-precision row to float32
    x = torch.randn(40, 3).to(dtype)
    want = fn(x)
    fast = autovec(fn)
    for _ in range(2):
        got = fast(x)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert "broadcast" not in _ran(fast) and "vmap" not in _ran(fast)


def test_index_derived_name_and_free_float():
    x = torch.randn(30, 4, dtype=torch.float64)
    want = index_derived(x, 0.3)
    fast = autovec(index_derived)
    got = fast(x, 0.3)
    assert torch.equal(got, want)


def axpy_counter(x, y, a):
    out = torch.empty_like(x)
    i = 0
    while i < x.shape[0]:
        out[i] = a * x[i] + y[i]          # the index only selects rows: not a number here
        i += 1
    return out


def test_index_that_only_selects_rows_keeps_broadcasting():
    x, y = torch.randn(50, 3), torch.randn(50, 3)
    fast = autovec(axpy_counter)
    for _ in range(2):
        assert torch.equal(fast(x, y, 0.3), axpy_counter(x, y, 0.3))
    assert _ran(fast) == {"broadcast"}


def alias_read_after_store(x):
    out = x                                  # the same tensor under two names
    acc = 0.0
    for t in range(x.shape[0]):
        out[t] = out[t] * 2                  # a read at the very index it writes: allowed
        acc = acc + x[t].sum()               # a read after the store: the loop sees the new row
    return out, acc


def alias_fill_after_store(x, lengths):
    out = x
    for t in range(x.shape[0]):
        out[t] = x[t] * 2
        out[t, lengths[t]:] = x[t].sum()     # x[t] is the row the first store wrote
    return out


def test_a_read_of_the_output_under_another_name_keeps_the_loop():
    # the aliasing check let any read of the written tensor through once one read of it was at
    # the index it writes, so `x[t]` after `out[t] = ...` read the old row (wrong totals)
    x = torch.randn(10, 3)
    a, b = x.clone(), x.clone()
    want, got = alias_read_after_store(a), autovec(alias_read_after_store)(b)
    assert torch.equal(got[0], want[0]) and got[1] == want[1]
    lengths = torch.randint(0, 4, (10,))
    a, b = x.clone(), x.clone()
    assert torch.equal(autovec(alias_fill_after_store)(b, lengths), alias_fill_after_store(a, lengths))


def test_compiled_methods_of_numpy_random_keep_the_loop():
    """`r = np.random.shuffle(a)` (a Cython method bound to numpy's RandomState) was taken for
    pure: the batched body shuffled `a` once, where the loop shuffles it once per iteration."""
    import numpy as np

    def shuffles(a, x):
        out = torch.empty(x.shape[0])
        for i in range(x.shape[0]):
            r = np.random.shuffle(a)
            out[i] = x[i] * 2
        return out, r

    def draws(rs, x):
        out = torch.empty(x.shape[0])
        for i in range(x.shape[0]):
            out[i] = x[i] * rs.randint(1, 5)
        return out

    x = torch.randn(7)
    np.random.seed(0)
    a1 = np.arange(9)
    want = shuffles(a1, x)
    np.random.seed(0)
    a2 = np.arange(9)
    got = autovec(shuffles)(a2, x)
    torch.testing.assert_close(got[0], want[0])
    assert (a1 == a2).all()
    torch.testing.assert_close(autovec(draws)(np.random.RandomState(3), x), draws(np.random.RandomState(3), x))


def _stack_detached(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].detach())
    return torch.stack(out)


def _fill_detached(x):
    out = torch.empty(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        out[i] = x[i].detach()
    return out


def _tensor_detached(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].detach())
    return torch.tensor(out)


@pytest.mark.parametrize("fn, x", [(_stack_detached, torch.randn(3000, 4)), (_fill_detached, torch.randn(3000, 4)),
                                   (_tensor_detached, torch.randn(3000))])
def test_a_detached_input_is_copied_as_the_loop_copies_it(fn, x, monkeypatch):
    """`x[i].detach()` is no view, but the same memory as `x`: torch.stack, a fresh output and
    torch.tensor hold a copy in the loop. The batch held `x.detach()` itself, so writing into the
    result wrote into `x` (the check took a tensor that is no view and no input for a new one)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    f = autovec(fn)
    for _ in range(3):
        before = x.clone()
        got = f(x)
        assert _ran(f)
        torch.testing.assert_close(got, fn(x))
        assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        got.add_(1)
        assert torch.equal(x, before)


def _row_products(x):
    outs = []
    for i in range(x.shape[0]):
        outs.append(x[i].prod(0))
    return torch.stack(outs)


def test_prod_gradient_of_a_row_with_inf_beside_a_zero_in_another_row(monkeypatch):
    """torch's gradient of prod divides the result by each entry unless the tensor holds a zero
    anywhere. In the loop a row [a, inf, b] gets NaN; in a batch with a zero in another row it got
    a finite value (fuzz family win, seed 22123; also before the windows, for any `prod` of a
    batched body, and under vmap). Such a call keeps the loop; without the zero it is batched."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(6, 3)
    x[1, 1], x[3, 2] = float("inf"), float("nan")
    f = autovec(_row_products)
    f(x.clone().requires_grad_())
    assert _ran(f) == {"batched"}
    x[2, 0] = 0.0
    assert_equivalent(_row_products, x.requires_grad_(), grad=True)
    f(x)
    assert not _ran(f)


def _row_products_repeated(x):
    outs = []
    for i in range(x.shape[0]):
        outs.append(x[i].repeat(2).prod(0))        # (repeat: no batched body, vmap)
    return torch.stack(outs)


def test_prod_gradient_under_vmap_keeps_the_loop(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(6, 3)
    x[1, 1], x[2, 0] = float("inf"), 0.0
    assert_equivalent(_row_products_repeated, x.clone().requires_grad_(), grad=True)
    f = autovec(_row_products_repeated)
    f(x.clone().requires_grad_())
    assert not _ran(f)
    f(x)                                            # no gradient: vmap is fine
    assert _ran(f) == {"vmap"}


def _items_appended(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].item())
    return out


def _items_listed(x):
    return [r.item() for r in x]


def _items_tensor(x):
    return torch.tensor([x[i].item() for i in range(x.shape[0])])


@pytest.mark.parametrize("fn", [_items_appended, _items_listed, _items_tensor])
def test_item_of_rows_with_several_elements_raises_as_the_loop(fn, monkeypatch):
    """`.item()` stripped from an appended value (pytype "item") was never checked for one
    element per row: the list held the rows' lists (and torch.tensor a 2-d tensor) where the
    loop raises. Rows of one element, of any rank, are numbers as in the loop."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(6, 2)
    with pytest.raises(RuntimeError) as want:
        fn(x)
    f = autovec(fn)
    with pytest.raises(RuntimeError) as got:
        f(x)
    assert str(got.value) == str(want.value)
    for shape in ((6, 1), (6, 1, 1), (6,)):
        y = torch.randn(shape)
        assert_equivalent(fn, y)
        f(y)
        assert _ran(f)


def _momentum_path(g, lr: float = 0.1, mu: float = 0.9):
    v = torch.zeros(g.shape[1])
    w = torch.zeros(g.shape[1])
    ws = []
    for t in range(g.shape[0]):
        v = mu * v + g[t]
        w = w - lr * v
        ws.append(w)
    return torch.stack(ws)


def _sum_of_running_sums(x):
    s = 0.0
    t = 0.0
    out = []
    for i in range(x.shape[0]):
        s = s + x[i]
        t = t + s
        out.append(t)
    return torch.stack(out)


@pytest.mark.parametrize("fn", [_momentum_path, _sum_of_running_sums])
def test_a_running_value_updated_from_another_keeps_the_loop(fn, monkeypatch):
    """Two scans where the second's terms read the first's running value: the terms were
    computed before any scan ran, so they saw the first's value from before the loop (all
    zeros: w stayed 0). Found by a probe of momentum updates."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    g = torch.randn(50, 3) if fn is _momentum_path else torch.randn(50)
    assert_equivalent(fn, g)
    f = autovec(fn)
    assert torch.allclose(f(g), fn(g))


def _stack_after_a_write(x):
    rows = []
    for i in range(x.shape[0]):
        rows.append(x[i])
    x.mul_(2)
    return torch.stack(rows)


def _reversed_views(x):
    rows = []
    for i in reversed(range(x.shape[0])):
        rows.append(x[i])
    return rows


def _gathered_views(x, perm):
    rows = []
    for i in range(x.shape[0]):
        rows.append(x[perm[i]])
    return rows


def _selected_views(x):
    rows = []
    for i in range(x.shape[0]):
        if x[i, 0] > 0:
            rows.append(x[i])
    return rows


def _records_of_views(x):
    return [(i, x[i]) for i in reversed(range(x.shape[0]))]


@pytest.mark.parametrize("fn, make", [
    (_reversed_views, lambda: (torch.randn(6, 2),)),
    (_gathered_views, lambda: (torch.randn(6, 2), torch.randperm(6))),
    (_selected_views, lambda: (torch.randn(8, 2),)),
    (_records_of_views, lambda: (torch.randn(6, 2),)),
])
def test_a_list_of_views_sees_later_writes_as_the_loops(fn, make, monkeypatch):
    """`rows.append(x[i])` kept as a list holds views of x: a later write into x (by the
    caller, or in the function before `torch.stack(rows)`) reaches them. Rows of a new batch
    (a reversed or gathered copy) did not: such lists now keep the loop; a batch that is a
    view of x gives the same views, also when selected by a condition."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    torch.manual_seed(0)
    a1 = make()
    torch.manual_seed(0)
    a2 = make()
    f = autovec(fn)
    f(*make())
    want, got = fn(*a1), f(*a2)
    a1[0].add_(1)
    a2[0].add_(1)
    flat = lambda r: [e[1] if isinstance(e, tuple) else e for e in r]      # noqa: E731
    assert all(torch.equal(p, q) for p, q in zip(flat(want), flat(got)))
    if fn is _selected_views:
        assert _ran(f)       # (a view of x, selected as views)


def test_stack_after_a_write_into_the_appended_rows():
    x = torch.randn(6, 2)
    assert torch.equal(autovec(_stack_after_a_write)(x.clone()), _stack_after_a_write(x.clone()))


def _running_min_reciprocal(x):
    m = torch.zeros(x.shape[1])
    out = torch.zeros_like(x)
    for t in range(len(x)):
        m = torch.minimum(x[t], m)
        out[t] = 1 / m
    return out


def _final_max(x):
    m = torch.zeros(())
    for i in range(x.shape[0]):
        m = torch.maximum(x[i], m)
    return 1 / m


def _python_running_max(x):
    m = float("-inf")
    out = []
    for i in range(x.shape[0]):
        m = max(m, x[i].item())
        out.append(m)          # (repr tells -0.0 from 0.0)
    return out


@pytest.mark.parametrize("fn, x", [
    (_running_min_reciprocal, torch.tensor([[-0.0], [0.0], [-0.0], [-1.0]])),
    (_final_max, torch.tensor([-0.0, -1.0, -0.0])),
    (_python_running_max, torch.tensor([0.0, -0.0, -1.0, 0.0, -0.0])),
])
def test_running_extremes_of_zeros_of_both_signs_are_the_loops(fn, x, monkeypatch):
    """+0.0 and -0.0 tie: torch.minimum keeps its first argument, Python's max the value it
    holds, cummin / amax their own order. The scan computed minimum(m, cummin(x)) where the
    loop computes minimum(x[t], m), so 1 / m was inf where the loop's is -inf (fuzz family
    ints, seed 122438). Such data keeps the loop."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    want = fn(x.clone())
    got = autovec(fn)(x.clone())
    assert repr(got) == repr(want)
    y = torch.tensor([[1.0], [-2.0], [3.0], [0.5]]) if x.dim() == 2 else torch.tensor([1.0, -2.0, 3.0, 0.5])
    f = autovec(fn)
    f(y)
    assert _ran(f)


def _max_of_rows(a, b):
    out = torch.zeros(a.shape[0])
    for i in range(a.shape[0]):
        out[i] = max(a[i], b[i])
    return out


def _max_of_roots(a, b):
    out = torch.zeros(a.shape[0])
    for i in range(a.shape[0]):
        out[i] = max(a[i], b[i].sqrt())
    return out


@pytest.mark.parametrize("fn", [_max_of_rows, _max_of_roots])
def test_python_max_of_tensors_with_gradients_is_the_loops(fn, monkeypatch):
    """Python's max(a, b) of 0-d tensors, batched as a `where`: a value never picked gets no
    gradient in the loop (its .grad stays None) but zeros from the batch, and through sqrt at
    0 an infinite derivative times that zero is NaN (found by fuzz rows/mixed, seed 150888; in
    the code before this stop). With gradients the loop runs."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    a, b = torch.randn(5) + 10, torch.rand(5)
    b[0] = 0.0
    a1, b1 = a.clone().requires_grad_(), b.clone().requires_grad_()
    fn(a1, b1).sum().backward()
    a2, b2 = a.clone().requires_grad_(), b.clone().requires_grad_()
    autovec(fn)(a2, b2).sum().backward()
    assert b1.grad is None and b2.grad is None
    torch.testing.assert_close(a1.grad, a2.grad)


def _sum_of_generator_in_loop(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * sum(torch.sqrt(w[k]) for k in range(3))
    return out


def test_a_generator_inside_a_rewritten_loop_does_not_end_the_rewrite(caplog):
    # found by this stop's second probe: the generator's piece was applied after the loop
    # holding it had been replaced, and the whole function fell back with a KeyError
    from autovec import autovec
    x, w = torch.randn(5, 3), torch.rand(3)
    with caplog.at_level("WARNING"):
        got = autovec(_sum_of_generator_in_loop)(x, w)
    assert torch.allclose(got, _sum_of_generator_in_loop(x, w))
    assert "could not rewrite" not in caplog.text


def _top_p(logits, p):
    out = logits.clone()
    for i in range(logits.shape[0]):
        sorted_logits, idx = torch.sort(logits[i], descending=True)
        probs = torch.softmax(sorted_logits, -1).cumsum(-1)
        remove = probs > p
        remove[1:] = remove[:-1].clone()
        remove[0] = False
        out[i, idx[remove]] = float("-inf")
    return out


def test_a_hoisted_tuple_value_keeps_the_loop_with_a_reason_of_the_loop(monkeypatch):
    # found by this stop's first probe: fission hoists `torch.sort(logits[i])`, whose value is
    # (values, indices); the batched check indexed that pair as a batch (an internal TypeError)
    # and vmap's wrapper tried to make it one tensor (ValueError). The loop ran, with those
    # errors as the reason; then the reason said what the value is. Since stop 39 a value the
    # loop keeps (here unpacked) is computed in the loop as written, which leaves nothing to hoist.
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(30, 10)
    f = autovec(_top_p)
    assert torch.equal(f(x, 0.9), _top_p(x, 0.9))
    ex = explain(f, x, 0.9)
    assert ex.path == "python"
    text = " ".join(ex.notes) + ex.loops[0].reason
    # (since stop 46 `remove = probs > p` is a tensor the iteration made, written in place as
    # such; the boolean-mask index `idx[remove]` is what keeps the loop, under vmap)
    assert "dynamic shape" in text or "`remove` is both updated in the loop and reassigned in it" in text
    assert "TypeError" not in text and "ValueError" not in text


def _masked_fill_inf(x, m):
    out = x.clone()
    for i in range(x.shape[0]):
        if m[i]:
            out[i] = float("-inf")
    return out


def _causal_mask(T):
    m = torch.zeros(T, T)
    for i in range(T):
        for j in range(T):
            if j > i:
                m[i, j] = float("-inf")
    return m


def test_a_stored_infinite_constant_passes_the_one_time_check(monkeypatch):
    # the check of a batched body against one iteration compared Python numbers by their
    # difference, NaN for -inf against -inf: every loop storing an infinite constant under a
    # condition (a causal mask, a masked fill) kept Python
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x, m = torch.randn(8), torch.rand(8) > 0.5
    f = autovec(_masked_fill_inf)
    assert torch.equal(f(x, m), _masked_fill_inf(x, m))
    assert explain(f, x, m).path == "vectorized"
    g = autovec(_causal_mask)
    assert torch.equal(g(5), _causal_mask(5))
    assert explain(g, 5).path == "vectorized"


def _store_big_constant(x, m):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        if m[i]:
            out[i] = 1e39          # beyond float32: setitem raises
    return out


def test_a_constant_stored_everywhere_is_still_checked_against_the_output_dtype(monkeypatch):
    # (the check now reads an expanded constant once instead of every row)
    from conftest import raises_as_loop
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    m = torch.tensor([False, True, False])
    raises_as_loop(RuntimeError, _store_big_constant, torch.zeros(3), m)
    ok = torch.zeros(3, dtype=torch.bool)
    torch.testing.assert_close(autovec(_store_big_constant)(torch.zeros(3), ok), torch.zeros(3))


# (stop 31, a probe) `a is b` of per-iteration values: the batch's values are new objects, so under
# vmap `o is z` was False on every row where the loop finds the row that is z

def _which_are(x):
    z = x[1]
    rows = [x[0], z, x[2]]
    return [o is z for o in rows]


def _which_are_appended(x):
    z = x[1]
    rows = [x[0], z, x[2]]
    out = []
    for o in rows:
        out.append(o is not z)
    return out


def _none_tests(x):
    out = []
    for r in x:
        out.append(r * 2 if r is not None else r)
    return torch.stack(out)


def test_identity_comparisons_keep_the_loop(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(3, 4)
    for fn in (_which_are, _which_are_appended):
        assert autovec(fn)(x) == fn(x)
        assert "identity" in explain(fn, x).loops[0].reason
    torch.testing.assert_close(autovec(_none_tests)(x), _none_tests(x))
    assert explain(_none_tests, x).path == "vectorized"      # (`is None`: a constant, which stays)


def _tens_over(x):
    out = []
    for r in x:
        v = r.item()
        out.append(10 / v)
    return out


def test_a_python_number_over_a_python_float_is_pythons_division(monkeypatch):
    """(stop 31, a probe) `10 / v` of a float from .item() was batched as torch's reciprocal of v
    times 10, one unit in the last place off Python's division on a fifth of the values."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.rand(2000, dtype=torch.float64) * 7 + 0.1
    x[:4] = torch.tensor([3.0, 2.0, 7.0, 4.0])
    got, want = autovec(_tens_over)(x), _tens_over(x)
    assert got == want and type(got[0]) is float
    assert explain(_tens_over, x).path == "vectorized"


# (stop 31, the fuzzer's new lost/sunk_appends form; both already so at the start of the session)

def _skips_after_a_nested_continue(x):
    kept = []
    for r in x:
        v = r.item()
        if v > 0:
            if v > 2:
                continue         # (skips the append after the outer `if` too)
        kept.append(v)
    return kept


def _an_outside_value_on_one_side(x, k):
    res = []
    for r in x:
        v = r.item()
        if v < k:
            res.append(k)        # (the other side appends the row's value: not `[k] * n`)
        else:
            res.append(v)
    return res


def _nested_continue_and_two_lists(x, k):
    res, other = [], []
    for r in x:
        v = r.float().mean().item()
        if abs(v) < k:
            res.append(k)
        elif v % 2 == 0:
            if v >= 1:
                continue
            res.append(v - k)
        else:
            res.append(v)
        other.append(v)
    return res, other


@pytest.mark.parametrize("fn, args", [
    (_skips_after_a_nested_continue, (torch.tensor([1., 4, -3, 2, 6]),)),
    (_an_outside_value_on_one_side, (torch.tensor([1., 4, -3, 2, 6]), 2.0)),
    (_an_outside_value_on_one_side, (torch.tensor([1., 4, -3, 2, 6]), 2)),     # (int and float sides)
    (_nested_continue_and_two_lists, (torch.tensor([1, 4, -3, 2, 6], dtype=torch.int32), 2.0)),
])
def test_branches_of_appends_found_by_the_fuzzer(fn, args, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    want, got = fn(*args), autovec(fn)(*args)
    assert got == want and [type(v) for v in _flat(got)] == [type(v) for v in _flat(want)]
    if not isinstance(args[-1], int):
        assert explain(fn, *args).path == "vectorized"


def _flat(v):
    return [w for x in v for w in _flat(x)] if isinstance(v, (list, tuple)) else [v]


def _two_updates_on_one_side(x):
    cnt = 0
    res = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            cnt += 1
            res.append(x[i] * 2)
        else:
            cnt += 1
            cnt += 1              # (two updates on this side: two, not one marker written twice)
            res.append(x[i] * 2)
            res.append(x[i] - 1)
    return cnt, res


def test_two_updates_of_one_output_on_one_side_of_a_branch(monkeypatch):
    """(stop 31, the fuzzer's lost/branch_continue form; already so at the start of the session)
    the second update on a side took the marker of the first, as its twin on the other side."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.tensor([[1., 2], [-3, 1], [-5, 0], [2, 2]])
    (c1, r1), (c2, r2) = _two_updates_on_one_side(x), autovec(_two_updates_on_one_side)(x)
    assert c1 == c2 == 6 and len(r1) == len(r2) == 6
    for a, b in zip(r1, r2):
        torch.testing.assert_close(a, b)


def test_many_nested_continues_one_after_another_keep_the_loop_quickly(tmp_path, monkeypatch):
    """Each nested `continue` copies what follows its branch into both sides; fourteen of them
    one after another would make 2**14 copies: the analysis refuses within its budget."""
    import importlib.util
    src = ["import torch", "", "", "def f(x):", "    out = []", "    for r in x:", "        v = r.item()"]
    for k in range(14):
        src += [f"        if v > {k}:", f"            if v > {k + 0.5}:", "                continue", f"        v = v + {k}"]
    src += ["        out.append(v)", "    return out", ""]
    path = tmp_path / "many_continues.py"
    path.write_text("\n".join(src))
    spec = importlib.util.spec_from_file_location("many_continues", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(20) * 5
    e = explain(mod.f, x)       # (2**14 copies, before the budget: 12 s here; within it, 0.05 s)
    assert e.path == "python" and "many branches" in e.loops[0].reason
    assert autovec(mod.f)(x) == mod.f(x)


def _tensor_or_its_item(x):
    res = []
    for i in range(x.shape[0]):
        b = x[i, 1] > 0
        res.append(b if x[i, 0] > 0 else b.item())
    return res


def _tensor_or_its_item_appended(x):
    res = []
    for i in range(x.shape[0]):
        b = (x[i, 1] * 10).long()
        if x[i, 0] > 0:
            res.append(b)
        else:
            res.append(b.item())
    return res


@pytest.mark.parametrize("fn", [_tensor_or_its_item, _tensor_or_its_item_appended])
@pytest.mark.parametrize("odd_row", [0, 17])
def test_a_tensor_on_one_side_and_its_item_on_the_other(fn, odd_row, monkeypatch):
    """(stop 31, a probe; already so before this session) the one-time check read the Python
    type of each row it ran, keeping the last: the batch gave every element as a Python number
    where the loop's list holds tensors from one side."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    torch.manual_seed(3)
    x = torch.randn(40, 5)
    x[:, 0] = 1.0
    x[odd_row, 0] = -1.0
    f = autovec(fn)
    for _ in range(2):
        got, want = f(x), fn(x)
        assert [type(v) for v in got] == [type(v) for v in want]
        assert all(bool(g == w) for g, w in zip(got, want))
