"""Edges found by an adversarial probe (stop 19): each loop here returned a different value,
Python type or aliasing than the loop before its fix."""
import math

import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


# ----------------------------------------------------------------- Python numbers compared

def max_of_items(x, b):
    for i in range(x.shape[0]):
        b = max(b, x[i].item())
    return b


def min_of_items(x, b):
    for i in range(x.shape[0]):
        b = min(b, x[i].item())
    return b


@pytest.mark.parametrize("fn, dtype, start", [
    (max_of_items, torch.uint8, -1), (max_of_items, torch.int8, 300), (max_of_items, torch.int8, 200),
    (min_of_items, torch.int8, 1000), (min_of_items, torch.uint8, -1000), (max_of_items, torch.int64, -1),
])
def test_a_running_extreme_of_python_ints_compares_python_ints(fn, dtype, start):
    # torch compared the start cast to the values' dtype (-1 as uint8 is 255)
    info = torch.iinfo(dtype)
    x = torch.randint(max(info.min, -100), min(info.max, 100) + 1, (40,), dtype=dtype)
    f = autovec(fn)
    for _ in range(3):
        got, want = f(x, start), fn(x, start)
        assert got == want and type(got) is type(want)


def test_a_running_extreme_of_python_floats_compares_doubles():
    # float32(0.1) is above the double 0.1: the loop's max takes it, a float32 comparison does not
    x = torch.full((5,), 0.1)
    f = autovec(max_of_items)
    got, want = f(x, 0.1), max_of_items(x, 0.1)
    assert got == want == x[0].item()


def product_of_items(x):
    p = 1.0
    for i in range(x.shape[0]):
        p *= x[i].item()
    return p


@pytest.mark.parametrize("values", [[2, -1, 3, 0], [0, -1], [-5, 0, -1, -1], [2, 0, 4]])
def test_a_float_product_of_ints_keeps_the_sign_of_its_zero(values):
    x = torch.tensor(values)
    got, want = autovec(product_of_items)(x), product_of_items(x)
    assert got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


def test_a_float_product_of_ints_past_floats_range_is_inf_then_nan():
    x = torch.tensor([2 ** 62] * 20 + [0])        # the loop: inf after 17 steps, then inf * 0
    got, want = autovec(product_of_items)(x), product_of_items(x)
    assert math.isnan(want) and math.isnan(got)
    y = torch.tensor([2 ** 62] * 20)
    assert autovec(product_of_items)(y) == product_of_items(y) == math.inf


# ----------------------------------------------------------------- running values of Python lists

def prefix_of_list(r):
    s = 0
    out = []
    for t in range(len(r)):
        s = s + r[t]
        out.append(s)
    return out


def returns_of_lists(r, done, g):
    G = 0
    out = []
    for t in reversed(range(len(r))):
        if done[t]:
            G = 0
        G = r[t] + g * G
        out.append(G)
    return out, G


@pytest.mark.parametrize("r", [[1, -2, 3, 4], [2 ** 62] * 6, [0.5, 1.5, -2.0]])
def test_running_values_over_python_lists_stay_python_numbers(r):
    got, want = autovec(prefix_of_list)(r), prefix_of_list(r)
    assert got == want and [type(v) for v in got] == [type(v) for v in want]    # (2**62 * 6 wrapped in int64)
    done = [k % 3 == 0 for k in range(len(r))]
    (gl, gG), (wl, wG) = autovec(returns_of_lists)(r, done, 0.9), returns_of_lists(r, done, 0.9)
    assert gl == wl and gG == wG and type(gG) is type(wG) and all(type(v) is float for v in gl)


# ----------------------------------------------------------------- aliasing of what the call returns

def stacked_and_last(x):
    out = []
    for i in range(x.shape[0]):
        y = x[i] * 2
        out.append(y)
    return torch.stack(out), y


def stored_and_last(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        y = x[i] + 1
        out[i] = y
    return out, y


def trace_and_state(a, xs):
    h = torch.zeros(xs.shape[1])
    out = []
    for t in range(xs.shape[0]):
        h = a * h + xs[t]
        out.append(h)
    return torch.stack(out), h


@pytest.mark.parametrize("fn, args", [
    (stacked_and_last, lambda: (torch.randn(6, 3),)),
    (stored_and_last, lambda: (torch.randn(6, 3),)),
    (trace_and_state, lambda: (0.5, torch.randn(7, 3))),
])
def test_a_stacked_or_stored_result_shares_no_memory_with_a_value_read_after_the_loop(fn, args):
    a = args()
    f = autovec(fn)
    for _ in range(2):
        (s1, y1), (s2, y2) = fn(*a), f(*a)
        y1.add_(100.0)
        y2.add_(100.0)            # the caller changes the last value: the stack copied it in the loop
        torch.testing.assert_close(s2, s1)
    assert explain(f, *a).path == "vectorized"


def best_of_reversed(x):
    best, idx = float("-inf"), -1
    for k in range(x.shape[0] - 1, -1, -1):
        if x[k] > best:
            best, idx = x[k], k
    return best, idx


def last_row_reversed(x):
    for k in range(x.shape[0] - 1, -1, -1):
        row = x[k]
    return row


@pytest.mark.parametrize("fn", [best_of_reversed, last_row_reversed])
def test_a_value_left_as_a_view_of_the_input_stays_one(fn):
    # a reversed range's batch is a gathered copy: the loop's `x[k]` is a view that sees writes
    x1 = torch.tensor([0.5, 3.0, 1.0, 2.0])
    x2 = x1.clone()
    r1, r2 = fn(x1), autovec(fn)(x2)
    x1.zero_()
    x2.zero_()
    v1, v2 = (r1[0], r2[0]) if isinstance(r1, tuple) else (r1, r2)
    assert v1.item() == v2.item() == 0.0


def best_of_forward(x):
    best, idx = float("-inf"), -1
    for k in range(x.shape[0]):
        v = x[k].sum()
        if v > best:
            best, idx = v, k
    return best, idx


def test_forward_views_and_computed_bests_still_vectorize():
    x = torch.randn(30, 4)
    f = autovec(best_of_forward)
    assert f(x) == best_of_forward(x)
    assert explain(f, x).path == "vectorized"
    g = autovec(best_of_reversed)
    y = torch.randn(30)
    assert g(y) == best_of_reversed(y)


# ----------------------------------------------------------------- kept lists (the third probe)

def _writes_carry(lst, i, j):
    """Whether a write into element i of a list shows in element j."""
    before = lst[j].clone()
    lst[i].add_(1000.0)
    return not torch.equal(lst[j], before)


def fresh_invariant(w):
    out = []
    for _ in range(4):
        out.append(w * 2)
    return out


def fresh_zeros(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.zeros(3))
    return out


def fresh_invariant_comp(w):
    return [w + 1 for _ in range(5)]


def fresh_in_dict(x, w):
    out = []
    for i in range(x.shape[0]):
        out.append({"x": x[i], "w": w * 1})
    return [d["w"] for d in out]


@pytest.mark.parametrize("fn, args", [
    (fresh_invariant, lambda: (torch.randn(3),)),
    (fresh_zeros, lambda: (torch.randn(4, 2),)),
    (fresh_invariant_comp, lambda: (torch.randn(3),)),
    (fresh_in_dict, lambda: (torch.randn(4, 2), torch.randn(3))),
])
def test_a_value_made_anew_each_iteration_gives_separate_tensors(fn, args):
    # the batch of a loop-invariant value is one row expanded: its elements shared one memory,
    # where the loop made a new tensor every iteration
    a = args()
    got, want = autovec(fn)(*a), fn(*a)
    assert len(got) == len(want)
    assert _writes_carry(got, 0, 1) is _writes_carry(want, 0, 1) is False


def either_branch(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] if x[i].sum() > 0 else x[i] * 0)
    return out


def same_twice(x):
    out = []
    for i in range(x.shape[0]):
        y = x[i] * 2
        out.append(y)
        out.append(y)
    return out


def fresh_then_view(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
        out.append(x[i])
    return out


def test_views_of_the_input_in_a_kept_list_stay_views():
    # a branch that is a view (`x[i] if c else ..`), a second append that is a view: the loop's
    # elements see later writes into x
    for fn in (either_branch, fresh_then_view):
        x = torch.randn(5, 3)
        x1, x2 = x.clone(), x.clone()
        want, got = fn(x1), autovec(fn)(x2)
        x1.add_(100.0)
        x2.add_(100.0)
        for a, b in zip(want, got):
            torch.testing.assert_close(b, a)


def test_one_tensor_appended_twice_stays_one_tensor():
    x = torch.randn(4, 3)
    want, got = same_twice(x), autovec(same_twice)(x)
    assert _writes_carry(want, 0, 1) and _writes_carry(got, 0, 1)


# ----------------------------------------------------------------- object identity (the third probe)

def kept_and_last(x):
    out = []
    for i in range(x.shape[0]):
        y = x[i] * 2
        out.append(y)
    return out, y


def trace_kept_and_state(a, xs):
    h = torch.zeros(xs.shape[1])
    hs = []
    for t in range(xs.shape[0]):
        h = a * h + xs[t]
        hs.append(h)
    return hs, h


def rows_kept_and_row(x):
    out = []
    for row in x:
        out.append(row)
    return out, row


@pytest.mark.parametrize("fn, make", [
    (kept_and_last, lambda: (torch.randn(5, 3),)),
    (trace_kept_and_state, lambda: (0.5, torch.randn(6, 3))),
    (rows_kept_and_row, lambda: (torch.randn(4, 3),)),
])
def test_a_value_kept_in_a_list_and_read_after_the_loop_is_one_tensor(fn, make):
    a = make()
    f = autovec(fn)
    (l1, v1), (l2, v2) = fn(*a), f(*a)
    assert l1[-1] is v1 and l2[-1] is v2
    for p, q in zip(l1, l2):
        torch.testing.assert_close(q, p)
    assert explain(f, *a).path == "vectorized"


def two_lists(x):
    a, b = [], []
    for i in range(x.shape[0]):
        y = x[i] + 1
        a.append(y)
        b.append(y)
    return a, b


def pairs_of_one(x):
    out = []
    for i in range(x.shape[0]):
        y = x[i] * 3
        out.append((y, y))
    return out


def outside_tensor(x, w):
    out = []
    for i in range(x.shape[0]):
        out.append(w)
    return out


def outside_tensor_comp(x, w):
    return [w for _ in range(x.shape[0])]


def test_one_tensor_in_two_places_stays_one_object():
    x, w = torch.randn(4, 3), torch.randn(3)
    a, b = autovec(two_lists)(x)
    assert all(p is q for p, q in zip(a, b))
    assert all(p is q for p, q in autovec(pairs_of_one)(x))
    assert all(e is w for e in autovec(outside_tensor)(x, w))
    assert all(e is w for e in autovec(outside_tensor_comp)(x, w))
    for fn, args in ((two_lists, (x,)), (pairs_of_one, (x,)), (outside_tensor, (x, w)), (outside_tensor_comp, (x, w))):
        assert explain(fn, *args).path == "vectorized"


# ----------------------------------------------------------------- gradients (the fifth probe)

class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            if x[i] > 0:
                out[i] = torch.log(x[i]) * self.w
            else:
                out[i] = self.w * 2
        return out


_W = torch.tensor(1.5, requires_grad=True)


def _log_scaled(v):
    return torch.log(v) * _W


def branch_through_helper(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        if x[i] > 0:
            out[i] = _log_scaled(x[i])
        else:
            out[i] = x[i] * 2          # (only the helper reads _W)
    return out


def test_a_branch_with_an_attribute_or_helper_tensor_that_requires_grad_keeps_the_loop():
    # the unselected branch's log(-1) sent NaN into self.w's gradient through where()
    x = torch.tensor([1.0, -1.0, 2.0, 0.5])
    m = _Scaled()
    m(x).sum().backward()
    want, m.w.grad = m.w.grad.clone(), None
    autovec(_Scaled.forward)(m, x).sum().backward()
    torch.testing.assert_close(m.w.grad, want)
    assert torch.isfinite(m.w.grad)
    _W.grad = None
    branch_through_helper(x).sum().backward()
    want, _W.grad = _W.grad.clone(), None
    autovec(branch_through_helper)(x).sum().backward()
    torch.testing.assert_close(_W.grad, want)


def row_medians(x):
    out = []
    for r in x:
        out.append(r.median())
    return torch.stack(out)


def row_nanmedians(x):
    out = []
    for r in x:
        out.append(r.nanmedian())
    return torch.stack(out)


@pytest.mark.parametrize("fn", [row_medians, row_nanmedians])
def test_the_gradient_of_a_whole_median_is_shared_by_its_ties(fn):
    x = torch.tensor([[1.0, 1.0, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0], [3.0, 1.0, 2.0, 2.0]])
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    fn(a).sum().backward()
    autovec(fn)(b).sum().backward()
    torch.testing.assert_close(b.grad, a.grad)
    torch.testing.assert_close(autovec(fn)(x), fn(x))
    assert explain(fn, x).path == "vectorized"        # (without gradients it still vectorizes)


def recurrence(x, a):
    h = torch.zeros(x.shape[1])
    for t in range(x.shape[0]):
        h = a * h + x[t]
    return h


def test_second_derivatives_of_a_recurrence_with_a_zero_factor_are_finite():
    x = torch.randn(5, 2)
    res = []
    for f in (recurrence, autovec(recurrence)):
        a = torch.tensor([0.0, 0.5], requires_grad=True)
        ga, = torch.autograd.grad(f(x, a).sum(), a, create_graph=True)
        gg, = torch.autograd.grad((ga * ga).sum(), a)
        res.append(gg)
    torch.testing.assert_close(res[1], res[0])
    assert torch.isfinite(res[1]).all()


# ----------------------------------------------------------------- the sixth probe (bad inputs, check, strict)

def grows_while_walked(x):
    rows = [x[i] for i in range(x.shape[0])]
    out = []
    for r in rows:
        out.append(r * 2)
        if len(out) == 2:
            rows.append(r)
    return torch.stack(out)


def writes_what_it_walks(x):
    out = []
    for r in x:
        out.append(r.clone())
        x[-1] = 7.0
    return torch.stack(out)


@pytest.mark.parametrize("fn", [grows_while_walked, writes_what_it_walks])
def test_fission_does_not_batch_what_the_loop_changes_while_walking_it(fn):
    # fission computed `r * 2` / `r.clone()` for the rows before the loop ran: a list that grows
    # gave an IndexError, a write into the walked tensor was missed by the last row
    x = torch.randn(40, 3)
    torch.testing.assert_close(autovec(fn)(x.clone()), fn(x.clone()))


def one_hots(ids):
    out = torch.empty(ids.shape[0], 10, dtype=torch.long)
    for i in range(ids.shape[0]):
        out[i] = torch.nn.functional.one_hot(ids[i], 10)
    return out


def test_one_hot_of_a_class_out_of_range_raises_as_the_loop():
    # vmap's one_hot gives a row of zeros there
    f = autovec(one_hots)
    ids = torch.randint(0, 10, (50,))
    torch.testing.assert_close(f(ids), one_hots(ids))
    bad = ids.clone()
    bad[7] = 10
    with pytest.raises(RuntimeError, match="num_classes"):
        f(bad)


def noisy_rows(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    return torch.stack(out), torch.randn(3)


def test_check_mode_gives_both_runs_the_same_random_numbers():
    f = autovec(noisy_rows, check=True)
    torch.manual_seed(0)
    x = torch.randn(5, 3)
    got = f(x)                              # (raised EquivalenceError: the two runs drew different numbers)
    torch.manual_seed(0)
    torch.randn(5, 3)
    want = noisy_rows(x)
    torch.testing.assert_close(got[1], want[1])     # the stream continues as after one run


def test_check_mode_of_a_function_it_does_not_rewrite_runs_it_once():
    def gen(x):
        for r in x:
            yield r * 2
    calls = []

    def counted(x):
        calls.append(1)
        return x * 2
    g = autovec(gen, check=True)
    assert [t.tolist() for t in g(torch.ones(2, 2))] == [[2.0, 2.0], [2.0, 2.0]]
    autovec(counted, check=True)(torch.ones(2))
    assert len(calls) == 1


def test_dict_and_set_comprehensions_and_walrus_are_refused_with_their_line():
    from autovec import NotVectorizable

    def dict_comp(x):
        return {i: x[i].sum() for i in range(x.shape[0])}

    def walrus(x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] + (y := x[i] * 2) * y     # (not the first thing evaluated: hoist.hoisted_walrus)
        return out

    x = torch.randn(4, 3)
    for fn, what in ((dict_comp, "dict comprehension"), (walrus, "binds a name inside an expression")):
        (r,) = explain(fn).loops
        assert r.strategy == "python" and what in r.reason
        with pytest.raises(NotVectorizable, match=what):
            autovec(fn, strict=True)(x)
        got, want = autovec(fn)(x), fn(x)
        assert (torch.equal(got, want) if isinstance(got, torch.Tensor)
                else all(torch.equal(got[k], want[k]) for k in want))


def test_a_generator_function_is_refused_with_its_file_and_line():
    from autovec import NotVectorizable

    def rows(x):
        for r in x:
            yield r

    with pytest.raises(NotVectorizable, match=r"test_probe_edges.py:\d+: `.*rows` is a generator function"):
        list(autovec(rows, strict=True)(torch.ones(2, 2)))


def takes(ids, t):
    out = torch.empty(ids.shape[0])
    for i in range(ids.shape[0]):
        out[i] = torch.take(t, ids[i] * 4)
    return out


def test_vmap_fallback_warnings_do_not_reach_the_user():
    # torch.take has no batching rule: vmap runs it row by row and warned about the performance
    import warnings
    ids, t = torch.randint(0, 10, (60,)), torch.randn(10, 4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = autovec(takes)(ids, t)
    torch.testing.assert_close(got, takes(ids, t))
    assert not [w for w in seen if "performance drop" in str(w.message)]
    assert explain(takes, ids, t).path == "vectorized"


def shifted_rnn(x, W, out):
    h = torch.zeros(W.shape[1])
    for t in range(x.shape[0] - 1):
        e = x[t] @ W                 # (batched before the loop by fission)
        h = torch.tanh(e + h)
        out[t + 1] = h               # written ahead of what a later iteration reads, if out is x
    return out


def test_fission_keeps_the_loop_when_its_stores_alias_what_the_batched_part_reads():
    x, W = torch.randn(6, 3), torch.randn(3, 3)
    f = autovec(shifted_rnn)
    a, b = x.clone(), x.clone()
    torch.testing.assert_close(f(b, W, b), shifted_rnn(a, W, a))
    out1, out2 = torch.zeros(6, 3), torch.zeros(6, 3)
    torch.testing.assert_close(f(x, W, out2), shifted_rnn(x, W, out1))
    assert explain(f, x, W, torch.zeros(6, 3)).path == "vectorized"
    assert explain(f, x, W, x.clone()).path == "vectorized"    # (a copy aliases nothing)


# ----------------------------------------------------------------- uint8 indices (the seventh probe)

def histogram(x, k):
    h = torch.zeros(k)
    for i in range(x.shape[0]):
        h[x[i]] += 1
    return h


def one_hot_rows(labels, k):
    out = torch.zeros(labels.shape[0], k)
    for i in range(labels.shape[0]):
        out[i, labels[i]] = 1.0
    return out


@pytest.mark.parametrize("fn", [histogram, one_hot_rows])
def test_uint8_indices_select_as_byte_masks_like_the_loop(fn):
    # in torch's indexing a uint8 tensor is a byte mask (all or nothing), not a position; the
    # scatter took it as a position
    x = torch.randint(0, 5, (20,), dtype=torch.uint8)
    torch.testing.assert_close(autovec(fn)(x, 5), fn(x, 5))
    y = x.to(torch.int64)                     # the same data as positions vectorizes
    torch.testing.assert_close(autovec(fn)(y, 5), fn(y, 5))
    assert explain(fn, y, 5).path == "vectorized"


# ----------------------------------------------------------------- the tenth probe

def message_pass(x, edges, w):
    out = torch.zeros_like(x)
    for e in range(edges.shape[0]):
        out[edges[e, 1]] += x[edges[e, 0]] * w[e]
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_scatter_add_rounds_as_the_loop(dtype):
    # the loop rounds after every addition (ones into one node: 2048 + 1 is 2048 in float16)
    x = torch.ones(4, 2, dtype=dtype)
    edges = torch.zeros(3000, 2, dtype=torch.long)
    w = torch.ones(3000, dtype=dtype)
    torch.testing.assert_close(autovec(message_pass)(x, edges, w), message_pass(x, edges, w), rtol=0, atol=0)
    y = x.float()
    torch.testing.assert_close(autovec(message_pass)(y, edges, w.float()), message_pass(y, edges, w.float()))


def clip_grad_rows(p, c):
    out = torch.empty_like(p)
    for i in range(p.shape[0]):
        g = p.grad[i]
        out[i] = g * torch.clamp(c / (g.norm() + 1e-6), max=1.0)
    return out


def test_explain_copies_a_gradient_the_function_reads():
    p = torch.randn(16, 4, requires_grad=True)
    p.grad = torch.randn(16, 4)
    ex = explain(clip_grad_rows, p, 1.0)
    assert "NoneType" not in str(ex) and ex.path == "vectorized"
    torch.testing.assert_close(autovec(clip_grad_rows)(p, 1.0), clip_grad_rows(p, 1.0))


def sinusoid_pe(T, d):
    pe = torch.zeros(T, d)
    for pos in range(T):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / (10000 ** (i / d)))
            pe[pos, i + 1] = math.cos(pos / (10000 ** (i / d)))
    return pe


def sinusoid_shifted(T, d):
    pe = torch.zeros(T + 1, d)
    for pos in range(T):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / (10000 ** (i / d)))
            pe[pos + 1, i + 1] = math.cos(pos / (10000 ** (i / d)))   # (rows apart at two levels)
    return pe


def test_fission_of_python_numbers_keeps_the_loop_with_a_reason_about_them():
    # (the reason said "torch.stack of Python numbers (the loop raises)": neither is so; since
    # stop 32 sinusoid_pe's two stores are rows of their own, tests/test_interleaved_stores.py)
    # (since stop 39 a value stored into a subscript, here a Python number, is computed in the
    # loop as written: a list's slot would hold the object itself; nothing is left to hoist)
    # (since stop 43 the inner loop's two stores are one scatter of both writes in the loop's
    # order, tests/test_joined_scatters.py: it runs batched, the nest stays as written)
    f = autovec(sinusoid_shifted)
    torch.testing.assert_close(f(6, 4), sinusoid_shifted(6, 4), rtol=0, atol=0)
    ex = explain(f, 6, 4)
    assert not any("torch.stack of Python numbers" in r.reason for r in ex.loops)
    assert ex.loops[0].strategy == "python" and "2 writes an iteration, interleaved" in ex.loops[1].reason
    g = autovec(sinusoid_pe)
    torch.testing.assert_close(g(6, 4), sinusoid_pe(6, 4), rtol=0, atol=0)


# ----------------------------------------------------------------- the fourteenth probe

def matvec_acc(A, x, out):
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            out[i] += A[i, j] * x[j]
    return out


def test_a_nest_sum_into_an_expanded_output_runs_the_loop():
    # (the commit raised "more than one element of the written-to tensor refers to a single
    # memory location" outside the guarded block)
    A, x = torch.randn(5, 4), torch.randn(4)
    got = autovec(matvec_acc)(A, x, torch.zeros(1).expand(5))
    want = matvec_acc(A, x, torch.zeros(1).expand(5))
    torch.testing.assert_close(got, want)


def test_a_nest_sum_of_a_value_wider_than_the_element_raises_as_the_loop():
    from conftest import raises_as_loop
    A, x = torch.randn(5, 4), torch.randn(4, 1)     # x[j] is (1,), out[i] is 0-d: `+=` raises
    raises_as_loop(RuntimeError, matvec_acc, A, x, torch.zeros(5))


def embed_rows(emb, x):
    out = []
    for row in x:
        out.append(emb(row))
    return torch.stack(out)


def test_modules_whose_calls_differ_per_call_keep_the_loop():
    # scale_grad_by_freq scales by each call's index counts; MultiheadAttention's own dropout
    # draws random numbers in training mode
    emb = torch.nn.Embedding(10, 3, scale_grad_by_freq=True)
    x = torch.randint(0, 10, (6, 4))
    e1, e2 = emb, torch.nn.Embedding(10, 3, scale_grad_by_freq=True)
    e2.load_state_dict(e1.state_dict())
    embed_rows(e1, x).sum().backward()
    autovec(embed_rows)(e2, x).sum().backward()
    torch.testing.assert_close(e2.weight.grad, e1.weight.grad)
    from autovec.purity import module_impurity
    mha = torch.nn.MultiheadAttention(4, 2, dropout=0.5)
    assert "dropout" in (module_impurity(mha) or "")
    assert module_impurity(mha.eval()) is None


# ------------------------------------------- a row read after its own store, on the same line

def read_after_on_the_line(x):
    out = torch.empty(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        x[i] = x[i] * 2; out[i] = x[i] + 1    # noqa: E702 (the read sees the written row)
    return out


def read_before_on_the_line(x):
    out = torch.empty(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        y = x[i] + 1; x[i] = x[i] * 2          # noqa: E702 (the read sees the row before)
        out[i] = y
    return out


def read_in_a_value_over_lines(x):
    for i in range(x.shape[0]):
        x[i] = (x[i]
                * 2)
    return x


# (the read after the store now reads the stored value by name: analysis._forwarded)
@pytest.mark.parametrize("fn, path", [(read_after_on_the_line, "vectorized"), (read_before_on_the_line, "vectorized"),
                                      (read_in_a_value_over_lines, "vectorized")])
def test_a_read_of_the_stored_row_is_ordered_by_statement_not_by_line(fn, path):
    """A loop may read the row it stores into where the read comes first in the iteration. The
    rule compared line numbers: a read after the store on the same line (two statements joined
    by `;`) counted as before it, and the batch gave `out` from the rows before they were
    doubled (found by the stop 25 lost-loops work)."""
    x = torch.randn(5, 3)
    want_x, got_x = x.clone(), x.clone()
    want, got = fn(want_x), autovec(fn)(got_x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_x, want_x)
    assert explain(autovec(fn), x.clone()).path == path
