"""The steady state: once a loop's bucket is decided and a signature's mode has passed its
check, a call takes the hot runner (runtime._hot_*: the body on the covered tensors themselves,
no input list, no mode dispatch) and begin's two-lookup path. Every call here is compared with
the loop, and the calls the hot runner must leave to the general path (views, partial coverage,
unequal zip lengths, lists, a changed helper, errors) are checked to give the loop's answer."""
import pytest
import torch

from autovec import autovec, explain
from autovec import runtime as rt_mod
from corpus import leaky


@pytest.fixture
def vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _no_general_path(monkeypatch):
    """Make the general path of Token.run fail loudly: only the hot runner may run."""
    def refuse(self, *a, **k):
        raise AssertionError("the general path ran on a steady call")
    monkeypatch.setattr(rt_mod.Token, "_inputs", refuse)


def add_rows(u, v):
    out = []
    for k in range(len(u)):
        out.append(u[k] + v[k])
    return torch.stack(out)


def row_softmax(x, t):
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        out[k] = torch.softmax(x[k] / t, dim=0) * x[k].sum()
    return out


def dots(a, b):
    res = []
    for i in range(a.shape[0]):
        res.append(a[i] @ b[i])
    return torch.stack(res)


def pairwise(a, b):
    d = torch.zeros(a.shape[0], b.shape[0])
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            d[i, j] = torch.dot(a[i], b[j])
    return d


def pair_dist(a, b):
    d = torch.zeros(a.shape[0], b.shape[0])
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            d[i, j] = ((a[i] - b[j]) ** 2).sum().sqrt()
    return d


def row_norms(x):
    out = []
    for row in x:
        out.append(row / (row.norm() + 1.0))
    return torch.stack(out)


def mse(p, q):
    total = 0.0
    for a, b in zip(p, q):
        total = total + ((a - b) ** 2).mean()
    return total


def scaled_by_other(x, w):
    out = []
    for i, row in enumerate(x):
        out.append(row * w[i].sum())
    return torch.stack(out)


def col_norms(x):
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        c = x[:, j]
        out[:, j] = c / (c.norm() + 1.0)
    return out


def index_scale(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * i + 1)
    return torch.stack(out)


def index_softmax(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.softmax(x[i] * (i + 1), dim=0) * x[i].sum()
    return out


def enumerate_from_one(x):
    out = []
    for i, row in enumerate(x, 1):
        out.append(row / i)
    return torch.stack(out)


def channel_bias(fmap, bias):
    out = torch.empty_like(fmap)
    for ch in range(fmap.shape[1]):
        out[:, ch] = fmap[:, ch] * 2.0 + bias[ch]
    return out


def channel_scale(fmap, w):
    out = torch.empty_like(fmap)
    for ch in range(fmap.shape[1]):
        out[:, ch] = fmap[:, ch] * w[ch]
    return out


def scaled_rows(x, s):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * s[i] - s[i])
    return torch.stack(out)


FORMS = [
    ("broadcast", add_rows, lambda n: (torch.randn(n), torch.randn(n))),
    ("batched", row_softmax, lambda n: (torch.randn(n, 6), 0.7)),
    ("matmul", dots, lambda n: (torch.randn(n, 3, 4), torch.randn(n, 4, 2))),
    ("nest direct", pairwise, lambda n: (torch.randn(n, 5), torch.randn(n + 2, 5))),
    ("nest batched", pair_dist, lambda n: (torch.randn(n, 5), torch.randn(n + 1, 5))),
    ("elements", row_norms, lambda n: (torch.randn(n, 4),)),
    ("zip", mse, lambda n: (torch.randn(n, 3), torch.randn(n, 3))),
    ("enumerate", scaled_by_other, lambda n: (torch.randn(n, 4), torch.randn(n, 2))),
    ("columns", col_norms, lambda n: (torch.randn(n, n),)),      # square: a wrong batch dim would pass shapes
    ("index broadcast", index_scale, lambda n: (torch.randn(n, 3),)),
    ("index batched", index_softmax, lambda n: (torch.randn(n, 4),)),
    ("enumerate from 1", enumerate_from_one, lambda n: (torch.randn(n, 3),)),
    ("broadcast moved", channel_bias, lambda n: (torch.randn(2, n, 3, 3), torch.randn(n))),
    ("broadcast moved rows", channel_scale, lambda n: (torch.randn(n, n, n), torch.randn(n, n))),   # cubes: a wrong layout still broadcasts
    ("broadcast views", scaled_rows, lambda n: (torch.randn(n, 4, 2), torch.randn(n))),
]


@pytest.mark.parametrize("name,fn,make", FORMS, ids=[f[0] for f in FORMS])
def test_steady_calls_take_the_hot_runner_and_match_the_loop(vectorize, monkeypatch, name, fn, make):
    f = autovec(fn)
    args = make(6)
    torch.testing.assert_close(f(*args), fn(*args))          # the first call: build and check
    rt = f._autovec_state.runtime
    assert rt.hot, f"{name}: no hot runner after a checked call"
    if name.startswith("broadcast"):
        assert {h[2] for h in rt.hot.values()} == {"broadcast"}, name   # (not a fallback mode)
    _no_general_path(monkeypatch)
    for _ in range(3):
        args = make(6)                                          # same signature, new values
        torch.testing.assert_close(f(*args), fn(*args))


@pytest.mark.parametrize("name,fn,make", FORMS, ids=[f[0] for f in FORMS])
def test_hot_runner_leaves_other_trip_counts_and_layouts_to_the_general_path(vectorize, name, fn, make):
    f = autovec(fn)
    f(*make(6))
    for n in (6, 2, 9, 1):
        args = make(n)
        torch.testing.assert_close(f(*args), fn(*args))
        # transposed copies: same ranks and dtypes, other strides
        t_args = tuple(a.t().contiguous().t() if isinstance(a, torch.Tensor) and a.dim() == 2 else a for a in args)
        torch.testing.assert_close(f(*t_args), fn(*t_args))


def test_partial_coverage_and_views_run_the_loops_rows(vectorize):
    def shifted(x, y):
        out = torch.zeros(x.shape[0])
        for i in range(1, x.shape[0]):
            out[i] = x[i] * y[i - 1]
        return out

    f = autovec(shifted)
    x, y = torch.randn(8), torch.randn(8)
    torch.testing.assert_close(f(x, y), shifted(x, y))
    torch.testing.assert_close(f(x, y), shifted(x, y))
    big = torch.randn(20)
    torch.testing.assert_close(f(big[::2], big[1::2]), shifted(big[::2], big[1::2]))   # strided views


def test_zip_of_unequal_lengths_stops_at_the_shorter(vectorize):
    f = autovec(mse)
    p, q = torch.randn(6, 3), torch.randn(6, 3)
    torch.testing.assert_close(f(p, q), mse(p, q))
    torch.testing.assert_close(f(p, q), mse(p, q))
    q2 = torch.randn(4, 3)
    torch.testing.assert_close(f(p, q2), mse(p, q2))
    torch.testing.assert_close(f(q2, p), mse(q2, p))


def test_list_of_tensors_is_not_taken_by_the_hot_runner(vectorize):
    f = autovec(row_norms)
    x = torch.randn(5, 4)
    torch.testing.assert_close(f(x), row_norms(x))
    torch.testing.assert_close(f(x), row_norms(x))
    rows = list(torch.randn(5, 4))
    torch.testing.assert_close(f(rows), row_norms(rows))


SCALE = [2.0]


def _helper(v):
    return v * SCALE[0]


def helper_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = _helper(x[i]).sum() + x[i]
    return out


def test_rebound_helper_is_seen_by_steady_calls(vectorize):
    global _helper
    f = autovec(helper_rows)
    x = torch.randn(5, 3)
    torch.testing.assert_close(f(x), helper_rows(x))
    torch.testing.assert_close(f(x), helper_rows(x))
    saved = _helper
    try:
        _helper = lambda v: v - 1.0     # noqa: E731 (a rebound helper)
        torch.testing.assert_close(f(x), helper_rows(x))
        torch.testing.assert_close(f(x), helper_rows(x))
    finally:
        _helper = saved
    torch.testing.assert_close(f(x), helper_rows(x))


def gather_rows(table, idx):
    out = []
    for k in range(idx.shape[0]):
        out.append(table[idx[k]] * 2)
    return torch.stack(out)


def test_error_on_a_steady_call_is_the_loops_own(vectorize):
    f = autovec(gather_rows)
    table, idx = torch.randn(7, 3), torch.randint(0, 7, (5,))
    torch.testing.assert_close(f(table, idx), gather_rows(table, idx))
    torch.testing.assert_close(f(table, idx), gather_rows(table, idx))
    bad = torch.tensor([0, 1, 9, 2, 3])
    with pytest.raises(IndexError) as got:
        f(table, bad)
    with pytest.raises(IndexError) as want:
        gather_rows(table, bad)
    assert str(got.value) == str(want.value)
    torch.testing.assert_close(f(table, idx), gather_rows(table, idx))     # and it vectorizes again


def test_gradients_on_steady_calls(vectorize):
    f = autovec(row_softmax)
    for _ in range(3):
        x = torch.randn(5, 4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        f(x, 0.5).pow(2).sum().backward()
        row_softmax(x2, 0.5).pow(2).sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)


def test_decided_buckets_take_the_short_begin(monkeypatch):
    from autovec.cost import _PROBES
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    f = autovec(add_rows)
    u, v = torch.randn(50_000), torch.randn(50_000)        # lopsided: the model decides at once
    for _ in range(1 + _PROBES):          # (the first call checks once; the next are timed: _PROBES)
        torch.testing.assert_close(f(u, v), add_rows(u, v))
    rt = f._autovec_state.runtime
    (d,) = rt.decisions.values()
    assert d.final and d.vec
    pending = rt.begin(1, range(len(u)))
    assert pending is not None and pending[6] == 50_000 and pending[11] is None
    monkeypatch.setattr(rt, "_choose", lambda *a: pytest.fail("a decided bucket asked the cost model again"))
    for _ in range(2):
        u, v = torch.randn(40_000), torch.randn(40_000)    # the same bucket (2**15 .. 2**16 - 1)
        torch.testing.assert_close(f(u, v), add_rows(u, v))
    assert explain(f, u, v).path == "vectorized"


def test_decided_python_bucket_runs_the_loop(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    f = autovec(row_softmax)
    x = torch.randn(1, 3)
    for _ in range(30):                  # a one-row loop: the timed decision settles
        torch.testing.assert_close(f(x, 0.3), row_softmax(x, 0.3))
    rt = f._autovec_state.runtime
    (d,) = rt.decisions.values()
    assert d.final
    assert (rt.begin(1, range(1)) is None) == (not d.vec)


def test_nest_begin_with_a_reversed_level_keeps_the_general_path(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)

    def backwards(a, b):
        d = torch.zeros(a.shape[0], b.shape[0])
        for i in range(a.shape[0] - 1, -1, -1):
            for j in range(b.shape[0]):
                d[i, j] = torch.dot(a[i], b[j])
        return d

    f = autovec(backwards)
    a, b = torch.randn(60, 8), torch.randn(70, 8)
    for _ in range(3):
        torch.testing.assert_close(f(a, b), backwards(a, b))


# ----------------------------------------------------------------------------- branches

def positive_only(v):
    out = torch.zeros(v.shape[0], 3)
    for k in range(v.shape[0]):
        if v[k].sum() > 0:
            out[k] = v[k] * 2
    return out


def mixed_types(v):
    out = torch.ones(v.shape[0], dtype=torch.float64)
    for k in range(v.shape[0]):
        if v[k] > 0.5:
            out[k] = v[k]
        elif v[k] < -0.5:
            out[k] = 0
    return out


def used_before(v):
    out = torch.zeros_like(v)
    out[0] = 5.0
    for k in range(1, v.shape[0]):
        if v[k] > 0:
            out[k] = v[k]
    return out


def test_lean_batched_body_leaves_out_check_only_masks(vectorize, monkeypatch):
    f = autovec(leaky)
    v = torch.randn(40)
    torch.testing.assert_close(f(v, 0.1), leaky(v, 0.1))
    rt = f._autovec_state.runtime
    (code,) = [c for c in rt.batched.values() if not isinstance(c, str)]
    assert code.probes == 2 and code.lean is not None        # `if` and `else` masks
    assert "logical_not" not in repr(code.lean.code.co_names)
    _no_general_path(monkeypatch)
    for _ in range(3):
        v = torch.randn(40)
        torch.testing.assert_close(f(v, 0.1), leaky(v, 0.1))


def leaky_affine(v, slope):
    out = torch.empty_like(v)
    for k in range(v.shape[0]):
        if v[k] > 0:
            out[k] = v[k] * 2 + 1
        else:
            out[k] = slope * v[k] - 1
    return out


def test_large_batches_take_the_lean_body_with_temporaries_in_place(vectorize, monkeypatch):
    """A large batch's body reuses its temporaries in place; with check-only masks it is the lean
    body's variant that does (before: the variant of the full body, which computed the masks on
    every steady call)."""
    f = autovec(leaky_affine)
    v = torch.randn(rt_mod._INPLACE_FLOOR + 10)
    torch.testing.assert_close(f(v, 0.1), leaky_affine(v, 0.1))
    rt = f._autovec_state.runtime
    (code,) = [c for c in rt.batched.values() if not isinstance(c, str)]
    assert code.lean is not None and code.lean.big is not None
    assert "logical_not" not in repr(code.lean.big.code.co_names)
    ran = []
    bind = type(code.lean.big).bind
    monkeypatch.setattr(type(code.lean.big), "bind", lambda self, body: ran.append(self) or bind(self, body))
    _no_general_path(monkeypatch)
    for _ in range(3):
        v = torch.randn(rt_mod._INPLACE_FLOOR + 10)
        torch.testing.assert_close(f(v, 0.1), leaky_affine(v, 0.1))
    assert ran and all(c is code.lean.big for c in ran)


@pytest.mark.parametrize("fn", [leaky, positive_only, mixed_types, used_before, leaky_affine])
def test_conditional_stores_into_fresh_outputs(vectorize, fn):
    f = autovec(fn)
    for n in (7, 7, 30, 1):
        v = torch.randn(n, 3) if fn is positive_only else torch.randn(n)
        args = (v, 0.2) if fn in (leaky, leaky_affine) else (v,)
        got, want = f(*args), fn(*args)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


def test_conditional_store_into_a_fresh_output_becomes_the_batch(vectorize):
    def kinds(src):
        from autovec.api import _state_of
        return [o.consumer for m in _state_of(src).runtime.matches.values() for o in m.plan.outputs]
    f, g = autovec(leaky), autovec(used_before)
    f(torch.randn(5), 0.1)
    g(torch.randn(5))
    assert kinds(f) == ["fresh"]        # allocated right before the loop: the batch replaces it
    assert kinds(g) == [""]             # written between the allocation and the loop: copied into


def total(values):
    acc = 0.0
    for v in values:
        acc += v
    return acc


def test_lists_of_python_numbers_keep_the_loop_quietly(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    f = autovec(total)
    for values in ([0.5, 1.5, 2.0], [], (1, 2, 3), [torch.tensor(1.0), 2.0]):
        got, want = f(values), total(values)
        assert type(got) is type(want) and got == want
    rt = f._autovec_state.runtime
    assert rt.begin(1, ([1.0, 2.0],)) is None and rt.begin(1, ([],)) is None
    x = torch.randn(3000, dtype=torch.float64)
    torch.testing.assert_close(f(x), total(x))          # a tensor still vectorizes
    assert explain(f, x).path == "vectorized"


def standardize(x, eps):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = (x[i] - x[i].mean()) / (x[i].std() + eps)
    return out


def axpy(x, y, a):
    out = []
    for i in range(x.shape[0]):
        out.append((a * x[i] + y[i]) * 0.5 - y[i])
    return torch.stack(out)


@pytest.mark.parametrize("fn,make", [(standardize, lambda: (torch.randn(100, 700), 1e-3)),
                                     (axpy, lambda: (torch.randn(100, 700), torch.randn(100, 700), 0.3))])
def test_hot_runner_at_in_place_sizes(vectorize, monkeypatch, fn, make):
    from autovec.batching import _INPLACE_FLOOR
    args = make()
    assert args[0].numel() >= _INPLACE_FLOOR            # temporaries reused in place from here on
    f = autovec(fn)
    torch.testing.assert_close(f(*args), fn(*args))
    _no_general_path(monkeypatch)
    for _ in range(2):
        args = make()
        keep = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        torch.testing.assert_close(f(*args), fn(*keep))
        for a, k in zip(args, keep):                    # the inputs are never written
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, k)


def test_a_mode_that_fails_later_loses_its_hot_runner(vectorize, monkeypatch):
    f = autovec(row_softmax)
    x = torch.randn(6, 4)
    torch.testing.assert_close(f(x, 0.5), row_softmax(x, 0.5))
    rt = f._autovec_state.runtime
    (key,) = rt.hot
    assert rt.hot[key][2] == "batched"
    (code,) = [c for c in rt.batched.values() if not isinstance(c, str)]

    def broken(body):
        def fn(*a):
            raise RuntimeError("the batched body fails for this signature from now on")
        return fn
    monkeypatch.setattr(code, "bind", broken)
    for _ in range(2):
        x = torch.randn(6, 4)
        torch.testing.assert_close(f(x, 0.5), row_softmax(x, 0.5))
    assert key not in rt.hot and rt.fast[key] == "vmap"      # vmap answers now, through the general path


# ----------------------------------------------------------------------------- scatter-add

def histogram(bins, weights, hist):
    for k in range(bins.shape[0]):
        hist[bins[k]] += weights[k]
    return hist


def histogram_minus(bins, weights, hist):
    for k in range(bins.shape[0]):
        hist[bins[k]] -= weights[k] * 2
    return hist


@pytest.mark.parametrize("fn", [histogram, histogram_minus])
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
def test_scatter_add_as_one_index_add(vectorize, monkeypatch, fn, idx_dtype):
    whole = []
    real = rt_mod._scatter_whole
    monkeypatch.setattr(rt_mod, "_scatter_whole", lambda *a: whole.append(real(*a)) or whole[-1])
    f = autovec(fn)
    for n, k, low in ((40, 5, 0), (40, 5, 0), (40, 5, -5), (3, 8, 0)):    # -5: negative bins wrap
        bins = torch.randint(low, k, (n,), dtype=idx_dtype)
        w = torch.randn(n, 3)
        h1, h2 = torch.randn(k, 3), None
        h2 = h1.clone()
        got, want = f(bins, w, h1), fn(bins, w, h2)
        assert got is h1                                   # the caller's tensor, written in place
        torch.testing.assert_close(h1, h2)
    # one index_add for the in-range calls; negative bins (and a target larger than the values)
    # took the checked path
    assert [w is not None for w in whole] == [True, True, False, False]


def test_scatter_add_out_of_range_leaves_what_the_loop_leaves(vectorize):
    f = autovec(histogram)
    w = torch.randn(6)
    f(torch.tensor([0, 1, 2, 0, 1, 2]), w, torch.zeros(3))         # the steady state
    bins = torch.tensor([0, 1, 7, 0, 1, 2])
    h1, h2 = torch.zeros(3), torch.zeros(3)
    with pytest.raises(IndexError):
        f(bins, w, h1)
    with pytest.raises(IndexError):
        histogram(bins, w, h2)
    assert torch.equal(h1, h2)                 # the loop's first two updates, and nothing else


def test_scatter_add_gradients(vectorize):
    f = autovec(histogram)
    bins = torch.randint(0, 4, (30,))
    w1 = torch.randn(30, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_()
    (f(bins, w1, torch.zeros(4)) ** 2).sum().backward()
    (histogram(bins, w2, torch.zeros(4)) ** 2).sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad)


def test_scatter_add_with_negative_bins_on_the_first_call_still_vectorizes(vectorize):
    f = autovec(histogram)
    for low in (-5, 0, -5):
        bins = torch.randint(low, 5, (40,))
        w = torch.randn(40, 3)
        h1 = torch.randn(5, 3)
        h2 = h1.clone()
        f(bins, w, h1)
        histogram(bins, w, h2)
        torch.testing.assert_close(h1, h2)
        assert explain(f, bins, w, torch.randn(5, 3)).path == "vectorized"


def nested_branches(a, b):
    d = torch.zeros(a.shape[0], b.shape[0])
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            if a[i].sum() > b[j].sum():
                d[i, j] = (a[i] - b[j]).abs().sum()
    return d


def nested_both_branches(a, b):
    d = torch.empty(a.shape[0], b.shape[0])
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            if a[i].sum() > b[j].sum():
                d[i, j] = (a[i] - b[j]).abs().sum()
            else:
                d[i, j] = -1.0
    return d


@pytest.mark.parametrize("fn", [nested_branches, nested_both_branches])
def test_conditional_stores_into_fresh_outputs_of_loop_nests(vectorize, fn):
    f = autovec(fn)
    for n, m in ((4, 5), (4, 5), (7, 3), (1, 1)):
        a, b = torch.randn(n, 3), torch.randn(m, 3)
        torch.testing.assert_close(f(a, b), fn(a, b))


def scale_by_index(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * i + w
    return out


def bias_by_index(w, n: int):
    out = []
    for i in range(n):
        out.append(w * i)
    return torch.stack(out)


@pytest.mark.parametrize("fn, make", [
    (scale_by_index, lambda: (torch.randn(6, 3, device="cpu"), torch.randn(3, device="cpu"))),
    (bias_by_index, lambda: (torch.randn(3, device="cpu"), 5)),
])
def test_the_index_is_made_on_the_datas_device_not_the_default_one(vectorize, fn, make):
    """The loop index as a number is an arange on the device of the data, where the default
    device is another one (a GPU program's index on its GPU): the 'meta' default stands in for
    a GPU here, and an index made there would fail every vectorized call."""
    f = autovec(fn)
    for _ in range(3):
        args = make()
        with torch.device("meta"):
            got = f(*args)
        torch.testing.assert_close(got, fn(*args))
        assert got.device.type == "cpu"
    assert explain(fn, *make()).path == "vectorized"
    rt = f._autovec_state.runtime
    assert rt.ran and not rt.failures, rt.failures


def normalize_images(images, mean):
    out = []
    for im in images:
        out.append(im - mean)
    return torch.stack(out)


def test_a_list_of_tensors_in_a_bucket_decided_for_the_loop_skips_the_list_checks(monkeypatch):
    """A decided Python bucket answers from the list's length alone, without the general path's
    walk over the list's tensors (it cost a third of a 3-image call); a vectorized bucket still
    takes the general path (lists are not covered by the hot runners)."""
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    f = autovec(normalize_images)
    images, mean = [torch.rand(3, 4, 4) for _ in range(2)], torch.rand(3, 1, 1)
    for _ in range(40):
        torch.testing.assert_close(f(images, mean), normalize_images(images, mean))
    rt = f._autovec_state.runtime
    (d,) = rt.decisions.values()
    assert d.final
    calls = []
    real = rt_mod.FunctionRuntime._space
    monkeypatch.setattr(rt_mod.FunctionRuntime, "_space", lambda self, *a: calls.append(1) or real(self, *a))
    torch.testing.assert_close(f(images, mean), normalize_images(images, mean))
    assert bool(calls) == d.vec


def _branchy_rows(x):
    # (a branch inside a side: refused under autograd; a body that branches once runs each side
    # on its own rows)
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        if x[i].mean() > 0:
            out[i] = x[i] if x[i].sum() > 1 else x[i] * 0.5
        else:
            out[i] = x[i] * 0.01
    return out


def test_calls_with_grad_refused_leave_the_calls_without_grad_vectorized(monkeypatch):
    # (found by a probe: a training step's input requires grad, an evaluation's does not, both
    # with grad mode on; the branch is refused under autograd, and those refusals settled the
    # shared bucket on the loop for the evaluation calls too: 15 ms a call instead of 0.3 ms)
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    monkeypatch.setattr("autovec.cost._PROBES", 0)      # (as below: no timed probes)
    f = autovec(_branchy_rows)
    for _ in range(12):
        xg = torch.randn(1500, 6, requires_grad=True)
        f(xg).sum().backward()
        got = xg.grad
        xg.grad = None
        _branchy_rows(xg).sum().backward()
        assert torch.equal(got, xg.grad)
        x = torch.randn(1500, 6)
        assert torch.equal(f(x), _branchy_rows(x))
    rt = f._autovec_state.runtime
    held = rt.grad_refused[(1, (1500).bit_length())]
    assert held[0] >= rt_mod._GRAD_REFUSALS and held[2] > 0       # the calls with grad skip the guard now
    d = rt.decisions[(1, (1500).bit_length())]
    assert d.vec and d.vec_failed == 0
    rt.ran.clear()
    x = torch.randn(1500, 6)
    assert torch.equal(f(x), _branchy_rows(x))
    assert rt.ran                                                  # vectorized
    rt.ran.clear()
    xg = torch.randn(1500, 6, requires_grad=True)
    assert torch.equal(f(xg), _branchy_rows(xg))
    assert not rt.ran                                              # refused at once: the loop


def _running_product_rows(x):
    out = torch.ones_like(x)
    for t in range(1, len(x)):
        out[t] = out[t - 1] * x[t]
    return out


def test_refusals_of_calls_with_grad_while_the_batch_runs_are_kept_apart_too(monkeypatch):
    # (found by a probe: a stored running product under grad is refused while its batch runs,
    # Token.carried_like, and those refusals settled the bucket on the loop for the calls
    # without grad too)
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    # (the verdict for the batch stands untimed: on a busy machine a stalled probe could settle
    # the bucket on the loop, which is not what this test is about)
    monkeypatch.setattr("autovec.cost._PROBES", 0)
    f = autovec(_running_product_rows)
    for c in range(12):
        x = (1 + 0.001 * torch.randn(1000, 3)).requires_grad_(c % 2 == 1)
        torch.testing.assert_close(f(x), _running_product_rows(x))
    rt = f._autovec_state.runtime
    bucket = (1, (999).bit_length())
    assert rt.grad_refused[bucket][0] >= rt_mod._GRAD_REFUSALS
    assert rt.decisions[bucket].vec_failed == 0
    rt.ran.clear()
    x = 1 + 0.001 * torch.randn(1000, 3)
    torch.testing.assert_close(f(x), _running_product_rows(x))
    assert rt.ran                                                  # vectorized


_W = torch.randn(256, 256) / 16


def _heavy(v):
    for _ in range(4):
        v = torch.tanh(_W @ v)
    return v


def _rare_heavy_rows(x, m):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if m[i]:
            out[i] = _heavy(x[i])
    return out


def test_calls_whose_cached_mode_fails_are_timed_and_settle_on_the_loop(monkeypatch):
    # (found by a probe: a helper with a loop of its own made the cached mode fail on every call,
    # the general path then ran it, and such calls were never timed: a body under a rare
    # condition stayed batched for good, 17 times slower than the loop)
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        f = autovec(_rare_heavy_rows)
        x = torch.randn(1000, 256)
        m = torch.zeros(1000, dtype=torch.bool)
        m[[5, 500]] = True
        for _ in range(30):
            torch.testing.assert_close(f(x, m), _rare_heavy_rows(x, m))
    finally:
        torch.set_num_threads(threads)
    (d,) = f._autovec_state.runtime.decisions.values()
    assert d.final and not d.vec


def per_sample_model(model, x):
    out = []
    for k in range(x.shape[0]):
        out.append(model(x[k]))
    return torch.stack(out)


def test_a_model_made_anew_for_each_call_stops_making_signatures(vectorize):
    # a module is part of the signature by its identity: one made anew for each call is a new
    # signature each time, with its batched body written again; past rt_mod._MAX_SIGNATURES the
    # loop runs as written, and the per-signature caches stop growing
    fast = autovec(per_sample_model)
    x = torch.randn(5, 4)
    for k in range(rt_mod._MAX_SIGNATURES + 6):
        model = torch.nn.Linear(4, 3)
        torch.testing.assert_close(fast(model, x), per_sample_model(model, x), rtol=0, atol=0)
    rt = fast._autovec_state.runtime
    assert len(rt.sig_ids) == rt_mod._MAX_SIGNATURES
    ex = explain(fast, torch.nn.Linear(4, 3), x)
    assert ex.path == "python" and any("made anew for each call" in note for note in ex.notes)


def _count_nonfinite(x):
    c = 0
    for i in range(x.shape[0]):
        if not torch.isfinite(x[i]):
            c += 1
    return c


def test_a_check_waiting_for_a_condition_compares_only_new_rows(monkeypatch):
    # `c += 1` under a condition that never holds on the data: the one-time check cannot compare
    # that output until a row holds it. It ran again on every call (the body twice, the RNG forked),
    # and no call was ever timed, so every call stayed slower than the loop (probeL). Now a later
    # call compares only a condition's first row it has not seen, and is timed as a steady call
    from autovec.runtime import Token
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    f = autovec(_count_nonfinite)
    assert f(torch.randn(16)) == 0
    rt = f._autovec_state.runtime
    assert rt.partial and not rt.checked          # the condition's output is still to compare
    compared = []
    real = Token._compare
    monkeypatch.setattr(Token, "_compare", staticmethod(lambda k, want, row: (compared.append(k), real(k, want, row))))
    for _ in range(5):
        assert f(torch.randn(16)) == 0
    assert compared == []                         # nothing new: no row compared again
    x = torch.randn(16)
    x[5] = float("nan")
    x[9] = float("inf")
    assert f(x) == _count_nonfinite(x) == 2       # the condition's first row, compared now
    assert compared and rt.checked and not rt.partial


def test_calls_waiting_for_a_condition_are_timed(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    f = autovec(_count_nonfinite)
    for _ in range(40):
        assert f(torch.randn(16)) == 0
    (d,) = f._autovec_state.runtime.decisions.values()
    assert d.final or d.vec_runs + d.py_runs > 0     # (before: never timed, never settled)


def _affine(v, W, b):
    return (v @ W.t() + b).relu()


def _affine_rows(x, W, b):
    out = torch.empty(x.shape[0], W.shape[0])
    for i in range(x.shape[0]):
        out[i] = _affine(x[i], W, b)
    return out


def test_a_helper_calling_tensor_methods_of_its_arguments_keeps_the_lane(monkeypatch):
    """The check of a helper's calls of methods of its arguments (runtime.param_methods) answers
    None for tensors; the lane reads that as a callee and does not send every call to the general
    _more_checks (which cost 6.6 us a call)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    f = autovec(_affine_rows)
    x, W, b = torch.randn(8, 4), torch.randn(3, 4), torch.randn(3)
    for _ in range(40):
        torch.testing.assert_close(f(x, W, b), _affine_rows(x, W, b))
    calls = []
    real = rt_mod.FunctionRuntime._more_checks
    monkeypatch.setattr(rt_mod.FunctionRuntime, "_more_checks", lambda self, *a: calls.append(1) or real(self, *a))
    for _ in range(5):
        torch.testing.assert_close(f(x, W, b), _affine_rows(x, W, b))
    assert not calls
