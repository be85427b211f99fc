"""Differential tests: every loop form against the original on random inputs (several
trials, gradients where they flow), edge cases of each form, and the strategy chosen."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from corpus import CORPUS

NAMES = sorted(CORPUS)


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    """These tests are about the rewrites: take the vectorized path whatever the size."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


@pytest.mark.parametrize("name", NAMES)
def test_form_is_equivalent_on_random_inputs(name):
    fn, inputs, _, grad = CORPUS[name]
    assert_equivalent(fn, *inputs(), trials=3)
    if grad:
        assert_equivalent(fn, *inputs(), grad=True)


@pytest.mark.parametrize("name", NAMES)
def test_form_takes_its_strategy(name):
    fn, inputs, strategy, _ = CORPUS[name]
    ex = explain(fn, *inputs())
    assert {r.strategy for r in ex.loops} == {strategy}, str(ex)
    assert ex.path == "vectorized", str(ex)


def _same(fn, *args):
    import copy
    want = fn(*copy.deepcopy(args))
    got = autovec(fn)(*copy.deepcopy(args))
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want)
    elif isinstance(want, tuple):
        for a, b in zip(got, want):
            assert type(a) is type(b)
            if isinstance(b, torch.Tensor):
                torch.testing.assert_close(a, b)
            else:
                assert a == pytest.approx(b)
    else:
        assert got == pytest.approx(want)
    return got


def test_count_stays_a_python_int():
    fn = CORPUS["count_hits"][0]
    logits = torch.randn(50, 4)
    got = _same(fn, logits, logits.argmax(1))          # all hits
    assert type(got) is int and got == 50
    got = _same(fn, logits, (logits.argmax(1) + 1) % 4)  # no hits
    assert type(got) is int and got == 0


def test_filter_empty_all_and_dtype():
    fn = CORPUS["filter_pos"][0]
    _same(fn, -torch.rand(30))                   # nothing kept: torch.tensor([]) is float32
    _same(fn, torch.rand(30) + 0.1)              # everything kept
    _same(fn, torch.randint(-5, 5, (40,)))       # integers keep their dtype when not empty
    assert autovec(fn)(-torch.ones(30, dtype=torch.int64)).dtype == torch.float32


def test_filter_stack_of_nothing_raises_like_the_loop():
    fn = CORPUS["filter_comp"][0]
    with pytest.raises(RuntimeError) as want:
        fn(-torch.ones(10, 3))
    with pytest.raises(RuntimeError) as got:
        autovec(fn)(-torch.ones(10, 3))
    assert str(got.value) == str(want.value)


def test_argbest_ties_follow_the_comparison():
    x = torch.zeros(20, 2)
    x[3] = 1.0
    x[11] = 1.0
    best, idx = _same(CORPUS["argbest_first"][0], x)
    assert idx == 3 and type(idx) is int
    best, idx = _same(CORPUS["argbest_last"][0], x)
    assert idx == 11
    # nothing beats the initial best: the initial values stay, with their Python types
    best, idx = _same(CORPUS["argbest_first"][0], torch.full((10, 2), -1e10))
    assert (best, idx) == (-1e9, -1) and type(best) is float


def test_running_max_keeps_python_float_when_nothing_beats_it():
    fn = CORPUS["running_max"][0]
    assert type(_same(fn, torch.randn(10, 3))) is torch.Tensor
    x = torch.full((10, 3), float("nan"))
    assert _same(fn, x) == float("-inf")


def test_flag_all_false_and_true():
    fn = CORPUS["flag_any"][0]
    assert _same(fn, torch.zeros(20, 3), 1.0) is False
    assert _same(fn, torch.ones(20, 3) * 5, 1.0) is True


def test_where_with_all_true_and_all_false_conditions():
    fn = CORPUS["leaky"][0]
    _same(fn, torch.rand(40) + 0.1, 0.1)
    _same(fn, -torch.rand(40) - 0.1, 0.1)


def test_where_with_nan_in_the_untaken_side():
    # rows with norm 0 take the no-clip side; the clip side divides by zero there
    fn = CORPUS["clip_rows"][0]
    g = torch.randn(30, 4) * 3
    g[5] = 0
    _same(fn, g, 2.0)


def test_branches_with_gradients_run_each_side_on_its_rows():
    # (an `if` without `else`, then a statement for every row: each side on its own rows under
    # grad, tests/test_two_way_sides.py; before, such branches kept the Python loop under grad)
    fn, inputs, _, _ = CORPUS["clip_rows"]
    g, m = inputs()
    g.requires_grad_(True)
    assert explain(fn, g, m).path == "vectorized"
    assert_equivalent(fn, g.detach(), m, grad=True)


def test_inplace_update_of_an_argument():
    fn = CORPUS["inplace_same_index"][0]
    x = torch.randn(20, 3)
    want = fn(x.clone())
    y = x.clone()
    got = autovec(fn)(y)
    assert got is y
    torch.testing.assert_close(y, want)


def test_aliased_output_and_input_run_the_loop():
    def shift(out, x):
        for i in range(x.shape[0] - 1):
            out[i + 1] = x[i] * 2
        return out

    x = torch.arange(10.0)
    want = shift(x.clone(), x.clone())
    a = x.clone()
    got = autovec(shift)(a, a)          # out and x are the same tensor: a true dependence
    b = x.clone()
    ref = shift(b, b)
    torch.testing.assert_close(got, ref)
    assert explain(shift, x.clone(), x.clone()).path == "vectorized"
    assert not torch.equal(want, ref)   # the aliasing changes the answer, and autovec kept it


def test_while_counter_value_after_the_loop():
    fn = CORPUS["while_axpy"][0]
    out, k = autovec(fn)(torch.randn(12, 2), torch.randn(12, 2), 2.0)
    assert k == 12 and type(k) is int


def test_scatter_repeated_indices_accumulate_and_last_write_wins():
    bins = torch.tensor([1, 1, 1, 0, 2, 1])
    w = torch.arange(6.0)
    torch.testing.assert_close(autovec(CORPUS["hist_add"][0])(bins, w, 3), CORPUS["hist_add"][0](bins, w, 3))
    idx = torch.tensor([2, 0, 2, -1, 2])     # -1 wraps around, as in the loop
    v = torch.arange(10.0).reshape(5, 2)
    torch.testing.assert_close(autovec(CORPUS["last_write"][0])(idx, v, 4), CORPUS["last_write"][0](idx, v, 4))


def test_scatter_out_of_range_raises_like_the_loop():
    fn = CORPUS["hist_add"][0]
    bins = torch.tensor([0, 1, 7, 2, 0, 1])
    with pytest.raises(IndexError) as want:
        fn(bins, torch.ones(6), 3)
    with pytest.raises(IndexError) as got:
        autovec(fn)(bins, torch.ones(6), 3)
    assert str(got.value) == str(want.value)


def test_nest_inner_loops_are_reported():
    fn, inputs, _, _ = CORPUS["scores3"]
    ex = explain(fn, *inputs())
    assert len(ex.loops) == 3
    assert "part of the loop nest" in ex.loops[1].reason


def test_cost_model_keeps_tiny_loops_in_python(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP")
    fn, _, _, _ = CORPUS["softmax_rows"]
    small, large = torch.randn(3, 4), torch.randn(2000, 4)
    ex = explain(fn, small, 0.5)
    assert ex.path == "python" and ex.estimate["python"] < ex.estimate["vectorized"]
    assert any("cost model" in n for n in ex.notes)
    ex = explain(fn, large, 0.5)
    assert ex.path == "vectorized" and ex.estimate["vectorized"] < ex.estimate["python"]


def test_running_total_kept_as_one_object_is_not_a_scan():
    def hist(x):
        total = torch.zeros(x.shape[1])
        seen = []
        for t in range(x.shape[0]):
            total += x[t]
            seen.append(total)       # the same tensor object every time, as the loop has it
        return seen
    x = torch.randn(12, 3)
    assert_equivalent(hist, x)
    assert explain(hist, x).loops[0].strategy == "python"


def test_scan_updates_an_argument_accumulator_in_place():
    fn = CORPUS["running_inplace"][0]
    x, total = torch.randn(30, 4), torch.zeros(4)
    want_total = total.clone()
    fn(x, want_total)
    got_total = total.clone()
    autovec(fn)(x, got_total)
    torch.testing.assert_close(got_total, want_total)


def _ema(xs, decay):
    state = torch.zeros(xs.shape[1])
    trace = []
    for t in range(xs.shape[0]):
        state = decay * state + (1 - decay) * xs[t]
        trace.append(state)
    return torch.stack(trace)


@pytest.mark.parametrize("decay", [0.0, 1e-3, 0.5, 0.9, 0.999, 1.0])
def test_linear_recurrence_error_matches_the_loop_against_float64(decay):
    x = torch.randn(20_000, 8, generator=torch.Generator().manual_seed(1))
    exact = _ema(x.double(), decay)
    loop_err = (_ema(x, decay).double() - exact).abs().max().item()
    got = autovec(_ema)(x, decay)
    assert explain(_ema, x, decay).loops[0].strategy == "scan"
    err = (got.double() - exact).abs().max().item()
    assert err <= 4 * loop_err + 1e-6, (err, loop_err)


def test_linear_recurrence_with_growing_factor_keeps_the_loop():
    x = torch.randn(50, 3)
    assert explain(_ema, x, -1.5).path == "python"   # |a| > 1: the loop runs
    assert_equivalent(_ema, x, -1.5)
    assert_equivalent(_ema, x, 0.7, grad=True)


def test_fission_does_not_hoist_across_a_call_that_may_mutate():
    w = torch.randn(3, 3)

    def step():
        w.add_(1.0)      # like an optimizer step between time steps

    def train(xs, h):
        outs = []
        for t in range(xs.shape[0]):
            e = torch.relu(xs[t] @ w)
            h = torch.tanh(e + h)
            step()
            outs.append(h)
        return torch.stack(outs)

    assert explain(train).loops[0].strategy == "python"
    w0 = w.clone()
    xs, h = torch.randn(6, 3), torch.zeros(3)
    want = train(xs, h)
    w.copy_(w0)
    got = autovec(train)(xs, h)
    torch.testing.assert_close(got, want)


def test_list_of_tensors_in_chunks_with_gradients(monkeypatch):
    import autovec.runtime as rt
    monkeypatch.setattr(rt, "_CHUNK_BYTES", 256)   # force several chunks on a small list

    def normalize(images, mean, std):
        out = []
        for im in images:
            out.append((im - mean) / std)
        return torch.stack(out)

    images = [torch.randn(3, 4, 4) for _ in range(40)]
    mean, std = torch.rand(3, 1, 1), torch.rand(3, 1, 1) + 0.5
    assert explain(normalize, images, mean, std).path == "vectorized"
    assert_equivalent(normalize, images, mean, std, grad=True)
    assert_equivalent(normalize, [im.requires_grad_() for im in images], mean, std, grad=True)


class _CountCopies(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the copies into existing tensors (`out[...] = batch`)."""

    def __init__(self):
        super().__init__()
        self.copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.copies += func is torch.ops.aten.copy_.default
        return func(*args, **(kwargs or {}))


def _fill_for(x, y):
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        out[k] = x[k] * 2 + y[k]
    return out


def _fill_while(x, y):
    out = torch.empty_like(x)
    n = x.shape[0]
    k = 0
    while k < n:
        out[k] = x[k] * 2 + y[k]
        k += 1
    return out


def _fill_nest(x, y):
    out = torch.zeros(x.shape[0], y.shape[0])
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            out[i, j] = torch.dot(x[i], y[j])
    return out


def _fill_part(x, y):
    out = torch.zeros_like(x)
    for k in range(1, x.shape[0]):     # row 0 keeps its zeros: the output is copied into
        out[k] = x[k] * 2 + y[k]
    return out


@pytest.mark.parametrize("fn, copies", [(_fill_for, 0), (_fill_while, 0), (_fill_nest, 0), (_fill_part, 1)])
def test_a_fresh_output_written_everywhere_becomes_the_batch(fn, copies):
    # for, while and nested loops: no copy of the batch into `out` when the loop overwrites all of it
    x, y = torch.randn(6, 3), torch.randn(6, 3)
    fast = autovec(fn)
    want = fn(x, y)
    fast(x, y)
    counter = _CountCopies()
    with counter:
        got = fast(x, y)
    torch.testing.assert_close(got, want)
    assert counter.copies == copies
    assert explain(fast, x, y).path == "vectorized"


def _fill_into(x, buf):
    out = torch.zeros(x.shape, out=buf)      # the allocation returns the caller's tensor
    for k in range(x.shape[0]):
        out[k] = x[k] * 2
    return out


def test_an_allocation_with_out_is_written_into():
    x = torch.randn(6, 3)
    b1, b2 = torch.empty(6, 3), torch.empty(6, 3)
    r1, r2 = _fill_into(x, b1), autovec(_fill_into)(x, b2)
    torch.testing.assert_close(r2, r1)
    torch.testing.assert_close(b2, b1)         # the caller's buffer holds the result, as in the loop
    assert r2 is b2


# ------------------------------------------------------- fresh outputs not held meanwhile

class _StandIns(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the meta stand-ins made for large fresh outputs (Token.release)."""

    def __init__(self):
        super().__init__()
        self.made = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.made += func is torch.ops.aten.empty_strided.default and str(kwargs.get("device")) == "meta"
        return func(*args, **kwargs)


def _big_empty(x, y):
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        out[k] = x[k] * 2 + y[k]
    return out


def _big_zeros_part(x, y):
    out = torch.zeros(x.shape[0], x.shape[1])
    for k in range(1, x.shape[0]):         # row 0 keeps its zeros: the output is made again
        out[k] = x[k] * 2 + y[k]
    return out


def _big_ones_part(x, y):
    out = torch.ones_like(x)
    for k in range(0, x.shape[0] - 1):
        out[k] = x[k] - y[k]
    return out


def _big_other_dtype(x, y):
    out = torch.zeros(x.shape, dtype=torch.float64)   # the float32 batch is cast into it
    for k in range(x.shape[0]):
        out[k] = x[k] + y[k]
    return out


def _big_columns(x, y):
    out = torch.empty_like(x)
    for c in range(x.shape[1]):
        out[:, c] = x[:, c] * y[:, c]
    return out


def _big_nest(x, y):
    out = torch.zeros(x.shape[0], y.shape[0])
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            out[i, j] = x[i, j] + y[j, i]
    return out


def _big_while(x, y):
    out = torch.ones(x.shape)
    n = x.shape[0]
    k = 0
    while k < n:
        out[k] = x[k] + y[k]
        k += 1
    return out


@pytest.mark.parametrize("fn", [_big_empty, _big_zeros_part, _big_ones_part, _big_other_dtype, _big_columns,
                                _big_nest, _big_while])
def test_a_large_fresh_output_is_not_held_while_the_batch_is_computed(fn):
    # 512 x 512 float32 is 1 MiB: over the floor, so a stand-in takes its place; where the
    # batch cannot replace it (rows left unwritten, another dtype) the tensor is made again
    # with its fill and the batch is copied in, as the loop would have
    x, y = torch.randn(512, 512), torch.randn(512, 512)
    fast = autovec(fn)
    assert explain(fast, x, y).path == "vectorized"
    fast(x, y)
    counter = _StandIns()
    with counter:
        got = fast(x, y)
    want = fn(x, y)
    assert counter.made == 1
    assert got.dtype == want.dtype and got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_small_fresh_output_is_kept():
    x, y = torch.randn(6, 3), torch.randn(6, 3)
    fast = autovec(_big_zeros_part)
    fast(x, y)
    counter = _StandIns()
    with counter:
        got = fast(x, y)
    assert counter.made == 0
    torch.testing.assert_close(got, _big_zeros_part(x, y))


def test_a_failure_after_the_release_gives_the_loop_its_own_tensor(monkeypatch):
    import autovec.runtime as rt
    x, y = torch.randn(512, 512), torch.randn(512, 512)
    fast = autovec(_big_zeros_part)
    fast(x, y)
    real_run = rt.Token.run

    def failing(self, *a, **k):
        raise RuntimeError("injected after the release")
    monkeypatch.setattr(rt.Token, "run", failing)
    counter = _StandIns()
    with counter:
        got = fast(x, y)          # the Python loop, into a zero-filled tensor made again
    monkeypatch.setattr(rt.Token, "run", real_run)
    assert counter.made == 1
    torch.testing.assert_close(got, _big_zeros_part(x, y), rtol=0, atol=0)


def _big_leaf(x):
    out = torch.zeros(x.shape[0], x.shape[1], requires_grad=True)
    for k in range(x.shape[0]):
        out[k] = x[k] * 3
    return out


def test_a_released_leaf_that_requires_grad_comes_back_a_leaf():
    # (under no_grad the loop may write into a leaf that requires grad: the batch, which does
    # not require grad, cannot stand for it, so the leaf is made again and written into)
    x = torch.randn(512, 512)
    with torch.no_grad():
        want = _big_leaf(x)
        fast = autovec(_big_leaf)
        fast(x)
        counter = _StandIns()
        with counter:
            got = fast(x)
    assert counter.made == 1
    assert got.requires_grad and got.is_leaf and got.grad_fn is None
    torch.testing.assert_close(got, want)


# ------------------------------------------------------- torch.cat onto an empty start

def _cat_scaled(chunks, s):
    acc = torch.tensor([])
    for k in range(chunks.shape[0]):
        acc = torch.cat([acc, chunks[k] * s[k]])
    return acc


def _cat_rows(x):
    acc = torch.tensor([])
    for k in range(x.shape[0]):
        acc = torch.cat([acc, x[k]])
    return acc


def _cat_wider(x):
    acc = torch.tensor([], dtype=torch.float64)
    for k in range(x.shape[0]):
        acc = torch.cat([acc, x[k] * 2])
    return acc


@pytest.mark.parametrize("fn", [_cat_scaled, _cat_rows, _cat_wider])
def test_a_cat_onto_an_empty_start_gives_the_loops_tensor(fn):
    x, s = torch.randn(7, 5), torch.rand(7)
    args = (x, s) if fn is _cat_scaled else (x,)
    fast = autovec(fn)
    assert explain(fast, *args).path == "vectorized"
    want, got = fn(*args), fast(*args)
    assert got.dtype == want.dtype and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    before = x.clone()
    got.add_(1)                     # the result is a new tensor, never a view of an argument
    torch.testing.assert_close(x, before, rtol=0, atol=0)
    assert_equivalent(fn, *args)


# ------------------------------------- large lists: chunks stacked straight into the output

class _Kernels(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _norm_list(images, mean, std):
    out = []
    for im in images:
        out.append((im - mean) / std)
    return torch.stack(out)


def _twice_list(images, mean, std):
    out = []
    for im in images:
        out.append(im * std + im)          # read twice: the chunk is not overwritten
    return torch.stack(out)


def _turned_list(images, mean, std):
    out = []
    for im in images:
        out.append((im - mean).transpose(1, 2))   # not elementwise: vmap, chunks kept apart
    return torch.stack(out)


@pytest.mark.parametrize("fn, into, ends_in_place", [(_norm_list, True, True), (_twice_list, True, False),
                                                     (_turned_list, False, False)])
def test_a_large_list_is_stacked_into_the_output_and_computed_there(fn, into, ends_in_place):
    # 2200 images of 4 x 32 x 32 floats: 36 MB, over the size at which lists run in chunks
    g = torch.Generator().manual_seed(0)
    images = [torch.rand(4, 32, 32, generator=g) for _ in range(2200)]
    mean, std = torch.rand(4, 1, 1, generator=g), torch.rand(4, 1, 1, generator=g) + 0.5
    kept = [im.clone() for im in images]
    fast = autovec(fn)
    fast(images, mean, std)
    seen = _Kernels()
    with seen:
        got = fast(images, mean, std)
    want = fn(images, mean, std)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert ("stack.out" in seen.names) == into          # chunks after the first: into the output
    if into:
        assert ("sub_.Tensor" in seen.names) == (fn is not _twice_list)   # the chunk itself is overwritten
        # where the body does not end in the chunk's own rows, the result is copied in
        assert ("copy_.default" in seen.names[seen.names.index("stack.out"):]) == (not ends_in_place)
    for im, k in zip(images, kept):       # the list's own tensors are never written
        torch.testing.assert_close(im, k, rtol=0, atol=0)


@pytest.mark.parametrize("odd", [(1, 32, 32), (4, 32, 1)])
def test_a_large_list_with_other_shapes_gives_the_loops_result(odd):
    # the last 400 images have another shape (each broadcasts against `mean` in the loop):
    # the list keeps the loop, whatever its chunks would hold
    g = torch.Generator().manual_seed(0)
    images = [torch.rand(4, 32, 32, generator=g) for _ in range(2200)] + \
             [torch.rand(*odd, generator=g) for _ in range(400)]
    mean, std = torch.rand(4, 1, 1, generator=g), torch.rand(4, 1, 1, generator=g) + 0.5
    try:
        want = _norm_list(images, mean, std)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e)[:30]):
            autovec(_norm_list)(images, mean, std)
    else:
        torch.testing.assert_close(autovec(_norm_list)(images, mean, std), want, rtol=0, atol=0)


def test_a_list_of_mixed_dtypes_keeps_each_elements_precision():
    g = torch.Generator().manual_seed(0)
    images = [torch.rand(4, 8, 8, generator=g) for _ in range(6)] + \
             [torch.rand(4, 8, 8, generator=g, dtype=torch.float64) for _ in range(6)]
    mean, std = torch.rand(4, 1, 1, generator=g), torch.rand(4, 1, 1, generator=g) + 0.5
    want = _norm_list(images, mean, std)
    got = autovec(_norm_list)(images, mean, std)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def countdown_scale(x, start):
    out = torch.zeros_like(x)
    t = start
    while t >= 0:
        out[t] = x[t] * 2 + t
        t -= 1
    return out, t


def countdown_by_two(x):
    out = torch.zeros_like(x)
    t = x.shape[0] - 1
    while t > 2:
        out[t] = x[t].exp()
        t = t - 2
    return out, t


def discounted_backwards(r, gamma):
    out = torch.empty_like(r)
    g = torch.zeros(r.shape[1:])
    t = r.shape[0] - 1
    while t >= 0:
        g = r[t] + gamma * g
        out[t] = g
        t -= 1
    return out


@pytest.mark.parametrize("start", [11, 5, 0, -1])
def test_a_while_counting_down_runs_as_a_reversed_range(start):
    from conftest import check_loop
    x = torch.randn(12, 3)
    fast = autovec(countdown_scale)
    for s in (start, 11):
        (got, t1), (want, t2) = fast(x.clone(), s), countdown_scale(x.clone(), s)
        torch.testing.assert_close(got, want)
        assert t1 == t2 and type(t1) is int
    if start >= 0:
        assert explain(countdown_scale, x, start).path == "vectorized"
    (got, t1), (want, t2) = autovec(countdown_by_two)(x), countdown_by_two(x)
    torch.testing.assert_close(got, want)
    assert t1 == t2 == 1
    assert check_loop(discounted_backwards, torch.randn(30, 4), 0.9, grad=(0,))
    assert explain(discounted_backwards, torch.randn(30, 4), 0.9).loops[0].strategy == "scan"


def countdown_odd_step(x):
    out = torch.zeros_like(x)
    t = x.shape[0] - 1
    while t >= 0:
        out[t] = x[t] * 2
        t -= x.shape[1]           # not a constant step
    return out


def countdown_up(x):
    out = torch.zeros_like(x)
    t = x.shape[0] - 1
    while t >= 0:
        out[t] = x[t] * 2
        t += 1                    # away from the bound: the loop runs until its index fails
    return out


def test_a_while_counting_down_by_other_than_a_constant_keeps_the_loop():
    x = torch.randn(6, 2)
    for fn in (countdown_odd_step, countdown_up):
        r = explain(fn, x).loops[0]
        assert r.strategy == "python" and "does not end with `t -= <positive constant>`" in r.reason
    torch.testing.assert_close(autovec(countdown_odd_step)(x), countdown_odd_step(x))
    from conftest import raises_as_loop
    raises_as_loop(IndexError, countdown_up, x)


def pair_means(x):
    out = torch.zeros(x.shape[0] // 2, x.shape[1], dtype=x.dtype)
    i = 0
    while i + 1 < x.shape[0]:
        out[i // 2] = 0.5 * (x[i] + x[i + 1])
        i += 2
    return out, i


def back_differences(x):
    s = []
    j = x.shape[0] - 1
    while j - 2 >= 0:
        s.append(x[j] - x[j - 2])
        j -= 1
    return torch.stack(s), j


def offset_bound(x, n):
    out = torch.zeros_like(x)
    k = 0
    while 1 + k <= n:
        out[k] = x[k] * 2
        k += 1
    return out, k


@pytest.mark.parametrize("fn, make", [
    (pair_means, lambda: (torch.randn(9, 3),)),
    (pair_means, lambda: (torch.randn(1, 3),)),
    (back_differences, lambda: (torch.randn(8, 2),)),
    (back_differences, lambda: (torch.randn(0, 2),)),       # (stack of nothing: the loop raises)
    (offset_bound, lambda: (torch.randn(6, 2), 4)),
    (offset_bound, lambda: (torch.randn(6, 2), 9)),         # (past the end: the loop raises IndexError)
    (offset_bound, lambda: (torch.randn(6, 2), 3.5)),       # (a float bound: the loop compares it)
])
def test_a_counter_tested_with_an_offset(fn, make, monkeypatch):
    """(probeI: `while i + 1 < n: ..; i += 2` was "not a counter loop"; it is `while i < n - 1`)"""
    from conftest import same_on_every_call
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")

    def same(want, got):
        if isinstance(want, torch.Tensor):
            assert want.dtype == got.dtype and torch.equal(want, got)
        elif isinstance(want, (tuple, list)):
            for p, q in zip(want, got):
                same(p, q)
        else:
            assert type(want) is type(got) and want == got
    same_on_every_call(fn, make, same=same)
    if fn is not offset_bound or make()[1] == 4:
        args = make()
        if args[0].shape[0] > 2:
            assert explain(fn, *args).path == "vectorized"


def pairs_below(x, n):
    k = 0
    while k + 1 < n:
        x[k] = 1
        k += 1
    return x, k


def above_bound(x, n):
    k = 299
    while k - 1 >= n:
        x[k] = 1
        k -= 1
    return x, k


def below(x, n):
    k = -5
    while k < n:
        x[k + 5] = 1
        k += 1
    return x, k


@pytest.mark.parametrize("fn, n", [
    (below, torch.tensor(10, dtype=torch.uint8)),            # (the loop compares -5 as uint8: 251, and never runs)
    (below, 300),
    (pairs_below, torch.tensor(0, dtype=torch.uint8)),       # (n - 1 would wrap to 255)
    (pairs_below, __import__("numpy").uint8(0)),
    (pairs_below, 7),
    (above_bound, torch.tensor(127, dtype=torch.int8)),      # (the loop compares 298 as int8: 42)
    (above_bound, 250),
])
def test_a_counter_bound_of_a_narrow_dtype_runs_as_the_loop(fn, n, monkeypatch):
    """(probeJ: `while k + 1 < n` with a uint8 bound of 0 ran 255 iterations; the loop compares
    in the bound's dtype, so only a Python int bound (or an int64 tensor) is rewritten)"""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.zeros(400)
    fast = autovec(fn)
    for _ in range(2):
        (a, k1), (b, k2) = fn(x.clone(), n), fast(x.clone(), n)
        assert torch.equal(a, b) and k1 == k2
