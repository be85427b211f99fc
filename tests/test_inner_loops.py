"""Loops with an inner `for` over a range beside other statements (imperfect nests): n-step
returns, a stack of layers applied per sample, Horner's rule per row, a dot product written as a
running sum. The inner loop runs as written inside the batched body (each of its iterations one
batched step for every outer iteration), where every outer iteration runs it alike and it keeps
to names. Anything else keeps the loop: a range that changes with the outer loop, a branch on the
data inside it, a store or a call for its effect inside it, an in-place update of a name that may
be an input's memory, its index read after the loop. Checked against the loop: values, errors,
effects on arguments, gradients, path."""
import pytest
import torch

from autovec import autovec, explain
from conftest import check_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def n_step_returns(rewards, values, gamma, n_step):
    T = len(rewards) - n_step
    targets = torch.zeros(T)
    for t in range(T):
        ret = 0.0
        for k in range(n_step):
            ret += (gamma ** k) * rewards[t + k]
        ret += (gamma ** n_step) * values[t + n_step]
        targets[t] = ret
    return targets


def layers(x, W):
    out = []
    for i in range(x.shape[0]):
        h = x[i]
        for l in range(W.shape[0]):
            h = torch.tanh(h @ W[l])
        out.append(h)
    return torch.stack(out)


def horner(x, coef):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        acc = torch.zeros(x.shape[1])
        for c in range(coef.shape[0]):
            acc = acc * x[i] + coef[c]
        out[i] = acc
    return out


def dot_running(x, w):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        acc = torch.zeros(())
        for j in range(x.shape[1]):
            acc += x[i, j] * w[j]
        out[i] = acc
    return out


def even_terms(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            if j % 2 == 0:          # a branch on the inner index alone: every row takes it alike
                s = s + x[i, j]
        out[i] = s * 2
    return out


def _check(fn, *args, grad=()):
    # (arguments within tolerance: an inner loop vectorized alone sums in another order)
    return check_loop(fn, *args, grad=grad, exact_args=False)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("n_step", [0, 1, 3])
def test_n_step_returns_run_the_inner_sum_under_vmap(n_step):
    g = _gen(0)
    r, v = torch.randn(40, generator=g), torch.randn(40, generator=g)
    assert "vmap" in _check(n_step_returns, r, v, 0.9, n_step, grad=(0, 1) if n_step else (1,))
    assert explain(n_step_returns, r, v, 0.9, n_step).path == "vectorized"


def deltas(c, N):
    padded = torch.cat([c[:1].expand(N, -1), c, c[-1:].expand(N, -1)], 0)
    denom = 2 * sum(n * n for n in range(1, N + 1))
    delta = torch.empty_like(c)
    for t in range(c.shape[0]):
        acc = torch.zeros(c.shape[1])
        for n in range(1, N + 1):
            acc = acc + n * (padded[t + N + n] - padded[t + N - n])
        delta[t] = acc / denom
    return delta


def shifted_by_a_float(x, off):
    out = []
    for t in range(x.shape[0]):
        out.append(x[t] * (t + off))
    return torch.stack(out)


def test_an_index_of_int_arithmetic_with_free_names_is_no_float():
    """(probeI's delta features: `padded[t + N + n]` with `N` an argument read `t + N` as the
    index in float arithmetic, which only a batched body may compute, and the loop ran; an index
    whole of int arithmetic selects elements, in the loop and in a batch alike)"""
    c = torch.randn(40, 13, generator=_gen(9))
    assert "vmap" in _check(deltas, c, 2, grad=(0,))
    assert explain(deltas, c, 2).path == "vectorized"
    # (the index in arithmetic with a float outside a subscript still keeps vmap out)
    x = torch.randn(6, 3, dtype=torch.float16)
    f = autovec(shifted_by_a_float)
    got, want = f(x, 0.1), shifted_by_a_float(x, 0.1)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_a_stack_of_layers_per_sample():
    g = _gen(1)
    x, W = torch.randn(30, 6, generator=g), torch.randn(3, 6, 6, generator=g) * 0.4
    assert "vmap" in _check(layers, x, W, grad=(0, 1))


def test_horner_from_a_zeros_accumulator():
    g = _gen(2)
    x, c = torch.randn(20, 5, generator=g), torch.randn(4, generator=g)
    assert "vmap" in _check(horner, x, c, grad=(0, 1))


def test_a_running_sum_updated_in_place_from_a_tensor_of_its_own():
    g = _gen(3)
    x, w = torch.randn(25, 7, generator=g), torch.randn(7, generator=g)
    assert "vmap" in _check(dot_running, x, w, grad=(0, 1))


def test_a_branch_on_the_inner_index_alone():
    assert "vmap" in _check(even_terms, torch.randn(12, 5, generator=_gen(4)), grad=(0,))


def on_a_view(x, w):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        acc = x[i, 0]               # a view of x: the loop's += writes into x
        for j in range(1, x.shape[1]):
            acc += x[i, j] * w[j]
        out[i] = acc
    return out


def on_a_free_tensor(x, w):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        acc = w                     # the caller's tensor, updated in place
        for j in range(x.shape[1]):
            acc += x[i, j]
        out[i] = acc.sum()
    return out


def branch_on_data(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                s = s + x[i, j]
        out[i] = s
    return out


def triangular(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(i):
            s = s + x[j]
        out[i] = s
    return out


def store_inside(x):
    # (a store into the outer row is vectorized: tests/test_inner_row_stores.py; one into a
    # column another iteration's row crosses keeps the outer loop)
    out = torch.zeros(x.shape[1], x.shape[0])
    for i in range(x.shape[0]):
        m = x[i].mean()
        for j in range(x.shape[1]):
            out[j, i] = x[i, j] - m
    return out


def index_after(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            s = s + x[i, j]
        out[i] = s
    return out, j


def only_inside(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            last = x[i, j] * 2      # no value before the inner loop: 0 trips keep the previous one
        out[i] = last
    return out


def over_rows(x, ws):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        s = 0.0
        for w in ws:
            s = s + (x[i] * w).sum()
        out[i] = s
    return out


def beside_a_branch(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        s = x[i, 0] if x[i, 1] > 0 else -x[i, 0]
        for j in range(x.shape[1]):
            s = s + x[i, j]
        out[i] = s
    return out


def carried_into_inner(x):
    out = torch.zeros(x.shape[0])
    carry = 1.0
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            s = s + x[i, j] * carry     # the previous outer iteration's value
        carry = s
        out[i] = s
    return out


def printing(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            s = s + x[i, j]
            print(end="")
        out[i] = s
    return out


@pytest.mark.parametrize("fn, why", [
    (on_a_view, "may be an input's memory"),
    (on_a_free_tensor, "may be an input's memory"),
    (triangular, "changes with the outer loop"),
    (store_inside, "only assignments to names, `if`s and a `break`"),
    (only_inside, "before it is written"),
    (beside_a_branch, "branches on the data"),
    (printing, "only assignments to names"),
    (carried_into_inner, "loop-carried dependency"),
])
def test_other_inner_loops_keep_the_loop(fn, why):
    g = _gen(5)
    x = torch.randn(9, 4, generator=g)
    args = {on_a_view: (x, torch.randn(4, generator=g)), on_a_free_tensor: (x, torch.randn(4, generator=g)),
            triangular: (x[:, 0],), over_rows: (x, [torch.randn(4, generator=g) for _ in range(3)])}.get(fn, (x,))
    _check(fn, *args)
    outer = explain(fn, *args).loops[0]     # (the inner loop may still be vectorized on its own)
    assert outer.strategy == "python" and why in outer.reason


def test_an_inner_loop_over_a_list_of_tensors_runs_in_the_batch():
    """(kept the loop before stop 42: an inner loop over other than `range(..)`; a list walked
    alike by every outer iteration now runs as it is inside the batched body)"""
    g = _gen(5)
    x = torch.randn(9, 4, generator=g)
    ws = [torch.randn(4, generator=g) for _ in range(3)]
    _check(over_rows, x, ws)
    assert explain(over_rows, x, ws).path == "vectorized"


def test_a_python_float_carried_through_a_data_branch_keeps_the_loop():
    # (`s = 0.0`, then `s = s + x[i, j]` under a branch on the data: a Python float in some
    # rows and a tensor in others, which no batch holds: runtime.where's "loop" rule)
    x = torch.randn(9, 4, generator=_gen(6))
    fast = autovec(branch_on_data)
    torch.testing.assert_close(fast(x), branch_on_data(x))
    assert explain(branch_on_data, x).path == "python" and not fast._autovec_state.runtime.ran


def test_the_inner_index_read_after_the_loop_keeps_the_loop():
    x = torch.randn(6, 3, generator=_gen(6))
    want, got = index_after(x), autovec(index_after)(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] and type(got[1]) is int
    assert "the index of the inner loop" in explain(index_after, x).loops[0].reason


def written_then_updated(x, w):
    out = torch.empty(x.shape[0], 3)
    for i in range(x.shape[0]):
        acc = torch.zeros(3)
        acc[0] = x[i, 0]            # a write into the tensor the iteration made, then the inner updates
        for j in range(x.shape[1]):
            acc += x[i, j] * w[j]
        out[i] = acc
    return out


def test_a_fresh_tensor_written_and_then_updated_in_the_inner_loop():
    g = _gen(7)
    x, w = torch.randn(20, 4, generator=g), torch.randn(4, 3, generator=g)
    assert "vmap" in _check(written_then_updated, x, w, grad=(0, 1))


def stored_before_update(x):
    out = torch.zeros(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        acc = torch.zeros(x.shape[1])
        out[i] = acc                # the store copies the zeros; the update below comes later
        for k in range(3):
            acc += x[i]
    return out


def part_before_update(x):
    out = []
    for i in range(x.shape[0]):
        acc = torch.zeros(3)
        part = acc[i % 3]           # a view in the loop: it sees the update below
        for k in range(2):
            acc += x[i]
        out.append(part * 1)
    return torch.stack(out)


def part_inside(x):
    out = []
    for i in range(x.shape[0]):
        acc = torch.zeros(3)
        s = 0.0
        for k in range(2):
            p = acc[i % 3]
            acc += x[i]
            s = s + p * 1
        out.append(s)
    return torch.stack(out)


@pytest.mark.parametrize("fn", [stored_before_update, part_before_update, part_inside])
def test_a_value_kept_before_its_in_place_update_keeps_the_loop(fn):
    x = torch.randn(7, 3, generator=_gen(8))
    _check(fn, x)
    outer = explain(fn, x).loops[0]
    assert outer.strategy == "python" and "keeps `acc`" in outer.reason
