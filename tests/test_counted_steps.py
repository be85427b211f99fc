"""Counts under a condition read in the loop whose increment is loop-invariant but not an int
literal (`if c: k += K` with K an argument: a Python int or float, a 0-d or broadcastable tensor,
a bool), in every spelling of the update (`k += K`, `k -= K`, `k = k + K`, `k = K + k`), and
loop nests that scale their input in place element by element (`x[i, j] = x[i, j] * s`).
Checked against the loop: values, Python types, dtypes, shapes, the count after the loop
(0-trip loops included), gradients, and the path taken."""
import pytest
import torch

from autovec import autovec, explain
from conftest import outcome


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, (type, str)):
        assert got == want
        return
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
        torch.testing.assert_close(got, want, equal_nan=True)
    else:
        assert got == pytest.approx(want, rel=1e-6, abs=1e-9, nan_ok=True)


# --- counts by a loop-invariant increment ---

def count_by(x, K):
    k = 0
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            k += K
        out.append(x[i] * k)
    return torch.stack(out) if out else x, k


def count_down_by(x, K):
    k = 3
    ids = []
    for i in range(x.shape[0]):
        if x[i].max() > 0.5:
            k -= K
        ids.append(k * 2)
    return ids, k


def count_appended_in_place(x, K):
    k = 0
    ids = []
    for i in range(x.shape[0]):
        if x[i].max() > 0.5:
            k += K
        ids.append(k)
    return ids, k


def count_assign(x, K):
    k = 0
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            k = k + K
        out.append(x[i] + k)
    return out, k


def count_assign_left(x, K):
    k = 0
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            k = K + k
        out.append(x[i] - k)
    return out, k


def count_assign_sub(x, K):
    k = 0
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            k = k - K
        out.append(x[i] * k)
    return out, k


def count_by_float_literal(x):
    k = 0
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            k += 0.5
        out.append(k)
    return out, k


def count_by_unconditional(x, K):
    k = 0
    out = []
    for i in range(x.shape[0]):
        k += K
        out.append(x[i] * k)
    return out, k


COUNTS = [count_by, count_down_by, count_assign, count_assign_left, count_assign_sub]

INCREMENTS = [
    3, -2, 0, True, 2.5, -0.25,
    torch.tensor(2.0), torch.tensor(3), torch.tensor(True), torch.tensor(1.5, dtype=torch.float64),
    torch.tensor(0.5, dtype=torch.float16), torch.tensor([1.0, -2.0, 0.5, 3.0]),
]


def _rows(n, dtype=torch.float32, first=None):
    x = torch.randn(n, 4).to(dtype) if dtype.is_floating_point else torch.randint(-3, 4, (n, 4), dtype=dtype)
    if first is not None and n:
        x[0] = first
    return x


@pytest.mark.parametrize("fn", COUNTS)
@pytest.mark.parametrize("K", INCREMENTS, ids=repr)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float64])
def test_counts_by_an_invariant_increment_match_the_loop(fn, K, dtype):
    fast = autovec(fn)
    # n = 0 and 1; a first row that increments, one that does not; random rows
    for n, first in [(0, None), (1, 1), (1, -1), (6, 1), (6, -1), (9, None), (9, None)]:
        x = _rows(n, dtype, first)
        _same(outcome(fast, x, K), outcome(fn, x, K))


@pytest.mark.parametrize("K", [3, True, torch.tensor(2.0), torch.tensor(True), torch.tensor(4),
                               torch.tensor([1.0, -2.0, 0.5, 3.0]), 2.5])
def test_counts_by_an_invariant_increment_run_as_a_scan(K):
    # the first row increments: every kind of increment runs batched
    x = _rows(12, first=1)
    for fn in COUNTS:
        if fn in (count_down_by, count_assign_sub) and isinstance(K, torch.Tensor) and K.dtype == torch.bool:
            continue    # (`k - K` of a bool tensor raises in the loop)
        e = explain(fn, x, K)
        assert e.path == "vectorized", str(e)
        assert e.loops[0].strategy == "scan"
        _same(autovec(fn)(x, K), fn(x, K))


def test_an_int_increment_runs_batched_whatever_the_first_row():
    x = _rows(12, first=-1)
    for fn in COUNTS:
        assert explain(fn, x, 3).path == "vectorized", fn.__name__
        ids, k = autovec(fn)(x, 3)
        _same((ids, k), fn(x, 3))
        assert type(k) is int


@pytest.mark.parametrize("K", [2.5, torch.tensor(2.0), torch.tensor(True)])
def test_a_first_row_that_does_not_increment_keeps_the_loop(K):
    # the loop's count is the int start until the first increment, then a float or a tensor
    x = _rows(12, first=-1)
    e = explain(count_by, x, K)
    assert e.path == "python", str(e)
    _same(autovec(count_by)(x, K), count_by(x, K))
    assert type(count_by(x[:1], K)[1]) is int


@pytest.mark.parametrize("K", [float("inf"), float("nan"), torch.tensor(float("inf")), 0.0, torch.tensor(0.0)])
def test_zero_and_non_finite_increments_keep_the_loop(K):
    # K * 0 is NaN for an infinite K; a zero K cannot tell whether the first row incremented
    x = _rows(12, first=1)
    e = explain(count_by, x, K)
    assert e.path == "python", str(e)
    _same(autovec(count_by)(x, K), count_by(x, K))


def test_a_float_literal_increment():
    x = _rows(10, first=1)
    assert explain(count_by_float_literal, x).path == "vectorized"
    for first in (1, -1, None):
        x = _rows(10, first=first)
        _same(autovec(count_by_float_literal)(x), count_by_float_literal(x))


@pytest.mark.parametrize("K", [3, 2.5, torch.tensor(2.0), torch.tensor(True)])
def test_unconditional_invariant_increments(K):
    for n in (0, 1, 7):
        x = _rows(n)
        _same(autovec(count_by_unconditional)(x, K), count_by_unconditional(x, K))
    assert explain(count_by_unconditional, _rows(7), K).loops[0].strategy == "scan"


def test_gradients_through_a_counted_tensor_increment():
    x0, K0 = _rows(10, first=1), torch.tensor(0.7, dtype=torch.float32)
    grads = []
    # (`k = k + K`: the loop's `k += K` changes in place a tensor its backward needs)
    for f in (count_assign, autovec(count_assign)):
        x, K = x0.clone().requires_grad_(), K0.clone().requires_grad_()
        out, k = f(x, K)
        (torch.stack(out).sin().sum() + k * 3).backward()
        grads.append((x.grad, K.grad))
    torch.testing.assert_close(grads[1], grads[0])
    assert explain(count_assign, x0, K0).path == "vectorized"


def count_rebinding_increment(x, K):
    k = 0
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            k += K
        K = K + 1
        out.append(x[i] * k)
    return out, k


def count_by_row_value(x):
    k = 0
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            k += x[i].sum()
        out.append(x[i] * k)
    return out, k


def count_in_the_test(x, K):
    k = 0
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > k:
            k += K
        out.append(x[i] * k)
    return out, k


def count_from_a_float_start(x, K):
    k = 0.0
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            k += K
        out.append(x[i] * k)
    return out, k


@pytest.mark.parametrize("fn, reason", [
    (count_rebinding_increment, "loop-carried"),
    # (each row's own tensor increment: the count turns from the int into a tensor at its first
    # increment, checked on the call)
    (count_by_row_value, "increments that are tensors"),
    (count_in_the_test, "in place"),
    # (an int K onto a float start: its steps are ints, the loop's values floats)
    (count_from_a_float_start, "a float count by an increment of another type"),
])
def test_counts_that_keep_the_loop(fn, reason):
    args = (_rows(9, first=1),) + ((3,) if fn is not count_by_row_value else ())
    e = explain(fn, *args)
    assert e.path == "python" and reason in str(e), str(e)
    for first in (1, -1):
        args = (_rows(9, first=first),) + args[1:]
        _same(autovec(fn)(*args), fn(*args))



# --- a count read under its own condition, after its update (position ids) ---

def position_ids(ids, pad):
    c = 0
    pos = torch.zeros_like(ids)
    for t in range(ids.shape[0]):
        if ids[t] != pad:
            c += 1
            pos[t] = c
    return pos, c


def scaled_positions(x, K):
    c = 0
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        if x[t] > 0:
            c = c + K
            out[t] = x[t] * c
            x[t] = -x[t]            # (a write the test reads: the test is computed before it)
    return out, c, x


def position_in_the_test(x):
    c = 0
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        if x[t] > c:                # (the test reads the count: a true recurrence)
            c += 1
            out[t] = c
    return out


def position_then_break(x):
    c = 0
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        if x[t] > 0:
            c += 1
            out[t] = c
            if c > 3:
                break
    return out, c


def test_a_count_read_under_its_own_condition_is_a_scan():
    """`if c: k += K; pos[t] = k` reads as `k += K * int(bool(c))` then `if c: pos[t] = k`: the
    test again after the update, which changes only `k` (the position ids of the tokens that
    are not padding)."""
    for n in (0, 1, 9, 40):
        ids = torch.randint(0, 3, (n,))
        _same(autovec(position_ids)(ids, 0), position_ids(ids, 0))
    assert explain(position_ids, torch.randint(0, 3, (9,)), 0).loops[0].strategy == "scan"
    for K in (2, 1.5, torch.tensor(3)):
        for first in (1, -1):
            x = _rows(9, first=first).sum(1)
            a, b = x.clone(), x.clone()
            _same(autovec(scaled_positions)(a, K), scaled_positions(b, K))
    x = _rows(9, first=1).sum(1)
    assert explain(scaled_positions, x, 2).path == "vectorized"


def position_past_two(ids, pad):
    pos = torch.zeros_like(ids)
    c = 0
    for t in range(ids.shape[0]):
        if ids[t] != pad:
            c += 1
            if c > 2:             # (a nested `if` after the update: the loop as written)
                pos[t] = c
    return pos, c


def test_a_count_with_a_nested_if_after_the_update_is_no_internal_error():
    """Found by the re-run of the day's probes: the nested `if` made the rewrite itself fail
    (an invalid source range) and the whole function ran as written, with a warning."""
    ids = torch.tensor([1, 0, 2, 3, 0, 4, 5])
    _same(autovec(position_past_two)(ids, 0), position_past_two(ids, 0))
    ex = explain(position_past_two, ids, 0)
    assert "internal error" not in str(ex)


@pytest.mark.parametrize("fn", [position_in_the_test, position_then_break])
def test_a_count_read_under_a_test_that_reads_it_or_a_break_keeps_its_form(fn):
    x = torch.rand(12) * 4 - 1
    _same(autovec(fn)(x.clone()), fn(x.clone()))
    assert "scan" not in {r.strategy for r in explain(fn, x.clone()).loops}

def final_count_by_row_value(x):
    k = 0
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            k += x[i]
    return k


def test_a_count_of_row_values_after_the_loop_keeps_its_int_start():
    # (already a reduction: `k` stays the int 0 where no row is counted)
    for x in (torch.randn(8, 4), -torch.rand(8, 4), torch.randn(0, 4)):
        _same(autovec(final_count_by_row_value)(x), final_count_by_row_value(x))
    assert explain(final_count_by_row_value, torch.randn(8, 4)).path == "vectorized"


# --- loop nests updating their input element by element ---

def nest_scale(x, s):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = x[i, j] * s
    return x


def nest_scale_rows(x, w):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = torch.tanh(x[i, j]) * w[j]
    return x


def nest_scale_positive(x, s):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                x[i, j] = x[i, j] * s
    return x


def nest_read_first(x, s):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[i, j] + 1
            x[i, j] = v * s
    return x


def nest_shifted(x, s):
    for i in range(x.shape[0] - 1):
        for j in range(x.shape[1]):
            x[i + 1, j] = x[i + 1, j] * s
    return x


def nest_identity(x):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = x[i, j]
    return x


def nest_transposed(x):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = x[i, j].t()
    return x


def nest_two_inputs(x, y):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = x[i, j] * y[i, j]
    return x


def _nest_check(fn, *args, path="vectorized"):
    got_args, want_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args], list(args)
    _same(outcome(autovec(fn), *got_args), outcome(fn, *want_args))
    for a, b in zip(got_args, want_args):
        if isinstance(b, torch.Tensor):
            _same(a, b)        # (the in-place effect on the arguments)
    e = explain(fn, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    assert e.path == path, str(e)
    return e


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("s", [2, 0.5, torch.tensor(3.0), torch.tensor(-2)], ids=repr)
def test_a_nest_scaling_its_input_element_by_element(dtype, s):
    x = (torch.randn(5, 4) * 10).to(dtype)
    e = _nest_check(nest_scale, x, s)
    assert e.loops[0].strategy in ("vmap", "broadcast")
    _nest_check(nest_scale_positive, x, s)
    _nest_check(nest_read_first, x, s)
    _nest_check(nest_shifted, x, s)


def test_nests_over_rows_of_higher_tensors():
    _nest_check(nest_scale_rows, torch.randn(3, 4, 5), torch.randn(4, 5))
    _nest_check(nest_identity, torch.randn(3, 4, 5))
    _nest_check(nest_scale, torch.randn(3, 4, 5), torch.randn(5))
    for n in (0, 1):
        _nest_check(nest_scale, torch.randn(n, 4), 2.0, path="python" if n == 0 else "vectorized")


def test_a_nest_transposing_its_own_elements_gives_the_loops_outcome():
    x = torch.randn(2, 3, 4, 4)
    got, want = x.clone(), x.clone()
    _same(outcome(autovec(nest_transposed), got), outcome(nest_transposed, want))
    _same(got, want)


@pytest.mark.parametrize("s_grad", [False, True])
def test_gradients_through_a_nest_scaling_its_input(s_grad):
    # (with a gradient for s, the loop's product saves the element it then overwrites: backward
    # raises in the loop, and so it must with autovec)
    x0, s0 = torch.randn(4, 3), torch.tensor(1.5)
    got = []
    for f in (nest_scale, autovec(nest_scale)):
        x, s = x0.clone().requires_grad_(), s0.clone().requires_grad_(s_grad)

        def backward():
            f(x * 1, s).pow(2).sum().backward()
            return x.grad, s.grad
        got.append(outcome(backward))
    if isinstance(got[0], tuple) and isinstance(got[0][0], type):
        assert got[1][0] is got[0][0]
    else:
        torch.testing.assert_close(got[1], got[0])
    assert explain(nest_scale, x0 * 1, s0).path == "vectorized"


def test_a_nest_reading_an_alias_of_its_input_keeps_the_loop():
    x = torch.randn(5, 5)
    for y in (x, x.t(), x[:, :]):
        got_x = x.clone()
        got_y = got_x if y is x else (got_x.t() if y.stride() != x.stride() else got_x[:, :])
        want_x = x.clone()
        want_y = want_x if y is x else (want_x.t() if y.stride() != x.stride() else want_x[:, :])
        _same(autovec(nest_two_inputs)(got_x, got_y), nest_two_inputs(want_x, want_y))
        _same(got_x, want_x)
        assert explain(nest_two_inputs, got_x, got_y).path == "python"
    _nest_check(nest_two_inputs, torch.randn(5, 5), torch.randn(5, 5))


def nest_then_read(x, s):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = x[i, j] * s
            out[i, j] = x[i, j] + 1
    return out


def nest_neighbour(x, s):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = x[i, j] * x[i, 0]
    return x


def nest_transposed_read(x, s):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = x[j, i] * s
    return x


def nest_augmented_read(x, s):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] += x[i, j] * s
    return x


@pytest.mark.parametrize("fn", [nest_then_read, nest_neighbour, nest_transposed_read, nest_augmented_read])
def test_nests_reading_other_elements_or_after_the_store_keep_the_loop(fn):
    x = torch.randn(4, 4)
    e = _nest_check(fn, x, 2.0, path="python")
    assert "loop-carried dependency" in e.loops[0].reason, str(e)



# --- counts by each iteration's own Python number (`if c: s += x[t].item()`) ---

def masked_running_total(x, keep):
    s = 0.0
    out = []
    for t in range(x.shape[0]):
        if keep[t]:
            s += x[t].item()
        out.append(s)
    return out, s


def int_count_by_row_values(x):
    s = 0
    out = []
    for t in range(x.shape[0]):
        if x[t] > 0:
            s -= int(x[t] * 10)
        out.append(s)
    return out, s


def count_of_flags(x, keep):
    s = 0
    out = []
    for t in range(x.shape[0]):
        if keep[t]:
            s += bool(x[t] > 0)
        out.append(s)
    return out


def total_of_a_value_computed_before(x, keep):
    s = 0.0
    hist = []
    for t in range(x.shape[0]):
        v = x[t].item() * 2.0
        if keep[t]:
            s = s + v
        hist.append(s)
    return hist


def _same_counts(got, want):
    _same(got, want)
    flat = lambda v: [u for w in v for u in flat(w)] if isinstance(v, (list, tuple)) else [v]
    for a, b in zip(flat(got), flat(want)):
        assert type(a) is type(b)       # (Python ints stay ints, floats floats)


@pytest.mark.parametrize("fn", [masked_running_total, int_count_by_row_values, count_of_flags,
                                total_of_a_value_computed_before])
@pytest.mark.parametrize("n", [1, 2, 9, 40])
def test_counts_by_each_iterations_own_number(fn, n):
    fast = autovec(fn)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, generator=g)
        args = (x,) if fn is int_count_by_row_values else (x, torch.rand(n, generator=g) < 0.6)
        _same_counts(fast(*args), fn(*args))
    if n > 2:
        assert explain(fn, *args).path == "vectorized", str(explain(fn, *args))


def test_non_finite_own_increments_keep_the_loop():
    x = torch.tensor([1.0, float("inf"), 2.0, float("nan"), 3.0])
    keep = torch.tensor([True, False, True, False, True])     # (K * 0 would be NaN where the loop adds nothing)
    got, want = autovec(masked_running_total)(x, keep), masked_running_total(x, keep)
    assert got == want
    e = explain(masked_running_total, x, keep)
    assert e.path == "python" and "not finite" in str(e), str(e)


def test_own_increments_bound_in_the_branch_or_tensors_keep_the_loop():
    def bound_in_the_branch(x, keep):
        s = 0.0
        out = []
        for t in range(x.shape[0]):
            if keep[t]:
                v = x[t].item()
                s = v + s           # (`v` exists only where the branch ran)
            out.append(s)
        return out

    def tensor_increments(x, keep):
        s = 0
        out = []
        for t in range(x.shape[0]):
            if keep[t]:
                s += x[t]           # (0 until the first increment, a tensor after)
            out.append(s)
        return out
    x = torch.randn(8, generator=torch.Generator().manual_seed(1))
    keep = torch.rand(8, generator=torch.Generator().manual_seed(2)) < 0.5
    keep[0] = False
    for fn in (bound_in_the_branch, tensor_increments):
        _same_counts(autovec(fn)(x, keep), fn(x, keep))
        assert explain(fn, x, keep).path == "python"



def test_a_count_handed_on_runs_where_its_increment_is_a_number():
    # (stop 49: `if c: k += K` then `ids.append(k)` kept the loop for every K; a Python number K
    # keeps `k` a number, nothing to alias. A tensor K makes `k` one tensor updated in place, or
    # one object appended again at each step that does not count: the call keeps the loop)
    x = _rows(9, first=1)
    for K in (3, 2.5, True):
        _same(autovec(count_appended_in_place)(x, K), count_appended_in_place(x, K))
        assert explain(count_appended_in_place, x, K).path == "vectorized"
    for K in (torch.tensor(3), torch.tensor([1.0, 2.0])):
        got, want = autovec(count_appended_in_place)(x, K), count_appended_in_place(x, K)
        _same(got, want)
        assert [g is got[0][-1] for g in got[0]] == [w is want[0][-1] for w in want[0]]
        e = explain(count_appended_in_place, x, K)
        assert e.path == "python" and "hands on" in str(e), str(e)


def precision_curve(y):
    tp, fp = 0, 0
    prec = []
    for t in range(len(y)):
        if y[t] == 1:
            tp += 1
        else:
            fp += 1
        prec.append(tp / (tp + fp))
    return prec, tp, fp


def starts_beside_another(y):
    a, tp, b = 5, 0, 7
    out = []
    for t in range(len(y)):
        if y[t] > 0:
            tp += 1
        out.append(tp)
    return out, a, b


@pytest.mark.parametrize("fn", [precision_curve, starts_beside_another])
def test_counts_started_in_a_tuple_assignment(fn):
    # `tp, fp = 0, 0`: each count's start is its place in the tuple (a precision-recall curve)
    fast = autovec(fn)
    for n in (1, 7, 3000, 3000):
        y = (torch.rand(n) > 0.5).long()
        assert fast(y) == fn(y)
    assert explain(fast, y).path == "vectorized"
