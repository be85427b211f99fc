"""A boolean-mask selection reduced at once (`x[i][x[i] > 0].sum()`, `x[y == c].mean(0)`): the
selection is ragged, its reduction is not (batching._Helpers.masked)."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop, ran_modes as _ran
from corpus import class_means as centroids


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def positive_sum(x):
    out = torch.empty(x.shape[0], dtype=x.dtype)
    for i in range(x.shape[0]):
        out[i] = x[i][x[i] > 0].sum()
    return out


def valid_mean(loss, valid):
    res = []
    for i in range(loss.shape[0]):
        res.append(loss[i][valid[i]].mean())
    return torch.stack(res)


def column_totals(x, keep):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i][keep[i]].sum(0) * 2)
    return torch.stack(res)


def peak(x, m):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i][m[i]].max() - x[i][m[i]].min())
    return torch.stack(res)


def _special(t):
    t = t.clone()
    t.view(-1)[::7] = float("nan")
    t.view(-1)[3::11] = float("inf")
    return t


CASES = [
    (positive_sum, lambda: (torch.randn(40, 9),)),
    (positive_sum, lambda: (torch.randint(-5, 5, (40, 9)),)),
    (centroids, lambda: (torch.randn(60, 4), torch.randint(0, 6, (60,)), 7)),     # class 6 is empty: NaN
    (valid_mean, lambda: (torch.randn(30, 8), torch.rand(30, 8) > 0.4)),
    (column_totals, lambda: (torch.randn(20, 5, 3), torch.rand(20, 5) > 0.5)),
    (peak, lambda: (torch.randn(25, 6), torch.ones(25, 6, dtype=torch.bool).tril(2)[:, :6])),
]


@pytest.mark.parametrize("fn, make", CASES, ids=[f"{c[0].__name__}{k}" for k, c in enumerate(CASES)])
def test_masked_reductions_are_batched_and_equal_to_the_loop(fn, make):
    args = make()
    f = autovec(fn)
    torch.testing.assert_close(f(*args), fn(*args), equal_nan=True)
    assert _ran(f) == {"batched"}
    assert_equivalent(fn, *args)


def test_nan_and_inf_outside_the_selection_never_reach_the_result():
    x = _special(torch.randn(30, 8))
    m = ~(torch.isnan(x) | torch.isinf(x))
    f = autovec(valid_mean)
    got = f(x, m)
    assert _ran(f) == {"batched"}
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, valid_mean(x, m))


def test_gradients_reach_only_the_selected_entries():
    x = _special(torch.randn(20, 6)).requires_grad_()
    m = torch.isfinite(x.detach()) & (torch.rand(20, 6) > 0.3)
    m[:, 0] = True
    assert_equivalent(valid_mean, x, m, grad=True)
    assert_equivalent(peak, torch.randn(20, 6, requires_grad=True), m, grad=True)


def test_an_empty_selection_of_max_raises_as_the_loop():
    x, m = torch.randn(5, 4), torch.ones(5, 4, dtype=torch.bool)
    f = autovec(peak)
    f(x, m)
    assert _ran(f) == {"batched"}
    m[3] = False
    with pytest.raises((RuntimeError, IndexError)) as want:
        peak(x, m)
    with pytest.raises(type(want.value)) as got:
        f(x, m)
    assert str(got.value) == str(want.value)


def test_a_mask_of_another_shape_raises_as_the_loop():
    x = torch.randn(6, 5)
    f = autovec(valid_mean)
    f(x, torch.rand(6, 5) > 0.5)
    bad = torch.rand(6, 4) > 0.5
    with pytest.raises(IndexError) as want:
        valid_mean(x, bad)
    with pytest.raises(IndexError) as got:
        f(x, bad)
    assert str(got.value) == str(want.value)


def test_integer_means_raise_as_the_loop():
    x, m = torch.randint(0, 5, (6, 5)), torch.rand(6, 5) > 0.2
    with pytest.raises(RuntimeError) as want:
        valid_mean(x, m)
    with pytest.raises(RuntimeError) as got:
        autovec(valid_mean)(x, m)
    assert str(got.value) == str(want.value)


def test_gradients_of_tied_extremes_are_shared_as_in_the_loop():
    x = torch.randint(0, 3, (20, 6)).float().requires_grad_()
    m = torch.rand(20, 6) > 0.2
    m[:, 0] = True
    assert_equivalent(peak, x, m, grad=True)
    f = autovec(peak)
    f(x, m).sum().backward()
    assert _ran(f) == {"batched"}


def test_a_nan_extreme_with_gradients_has_the_loops_gradient():
    """amax's gradient at a NaN extreme is NaN (0 / 0 equal entries); max() of the selection
    sends it to the NaN entries: the helper uses max()'s own backward (fuzz family win, seed
    8264)."""
    def lowest(x, y):
        outs = []
        for c in range(3):
            outs.append(x[y == c].min())
        return outs

    x = torch.randn(12, dtype=torch.float64)
    x[4] = float("nan")
    y = torch.arange(12) % 3
    assert_equivalent(lowest, x.requires_grad_(), y, grad=True)


def test_an_infinite_extreme_with_gradients_keeps_the_loop():
    """The unselected entries hold -inf / inf while max / min is taken: an infinite extreme ties
    with them and would share its gradient with them (fuzz family win, seed 21633)."""
    x = torch.tensor([[1.0, float("inf"), 3.0], [4.0, 5.0, 0.5]], requires_grad=True)
    m = x.detach() > 2
    assert_equivalent(peak, x, m, grad=True)
    f = autovec(peak)
    f(x.detach()[1:].requires_grad_(), m[1:])
    assert _ran(f) == {"batched"}
    f(x, m)
    assert not _ran(f)


def class_sums(x, y, lo, hi, step):
    out = []
    for c in range(lo, hi, step):
        out.append(x[c == y].sum(0))
    return torch.stack(out)


def class_totals(x, y, k):
    out = torch.zeros(k)
    for c in range(k):
        out[c] = x[y == c].sum()
    return out


@pytest.mark.parametrize("x, y, lo, hi, step", [
    (torch.randn(50, 3), torch.randint(-2, 9, (50,)), 0, 7, 1),       # labels outside the loop's classes
    (torch.randint(-9, 9, (50, 2), dtype=torch.int32), torch.randint(0, 5, (50,)), 1, 6, 1),   # int sums: int64
    (torch.randn(50, 3), torch.randint(0, 8, (50,)), 0, 8, 2),        # every other class: the masks
    (torch.randn(50, 3), torch.randint(0, 4, (50,)).float(), 0, 4, 1),   # float labels: the masks
    (_special(torch.randn(40, 3)), torch.arange(40) % 5, 0, 4, 1),    # NaN and inf in class 4, never read
])
def test_class_reductions_over_the_loops_classes(x, y, lo, hi, step):
    """`x[y == c].sum(0)` over the classes of the loop: each row added once into its class
    (batching._Helpers.segment), or the masks where the labels or the steps do not allow it."""
    f = autovec(class_sums)
    got, want = f(x, y, lo, hi, step), class_sums(x, y, lo, hi, step)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)
    assert _ran(f) == {"batched"}
    assert_equivalent(class_sums, x, y, lo, hi, step)


def bucket_means(x, idx, nb):
    out = torch.empty(nb)
    for b in range(nb):
        out[b] = x[idx == b].mean()
    return out


def test_means_of_a_vector_by_label():
    """(probeI: `x[idx == b].mean()` of a 1-D `x` raised IndexError inside the batched body,
    flattening each class's one-element total, and the loop ran)"""
    x, idx = torch.randn(300), torch.randint(0, 20, (300,))
    f = autovec(bucket_means)
    for _ in range(2):
        torch.testing.assert_close(f(x, idx, 20), bucket_means(x, idx, 20), equal_nan=True)
    assert _ran(f) == {"batched"}
    idx[idx == 3] = 4          # (an empty class: NaN, as the loop's mean of nothing)
    torch.testing.assert_close(f(x, idx, 20), bucket_means(x, idx, 20), equal_nan=True)


def test_class_totals_and_means_with_gradients():
    x, y = torch.randn(60, 4, requires_grad=True), torch.randint(0, 6, (60,))
    assert_equivalent(class_totals, x, y, 7, grad=True)
    assert_equivalent(centroids, x, y, 7, grad=True)
    f = autovec(centroids)
    f(x, y, 7).nan_to_num().sum().backward()
    assert _ran(f) == {"batched"}


# ----------------------------------------------------------------------------- ragged spans
# `b[lo:hi]` with bounds that change per iteration, reduced along the span (batching._Helpers.span)


def pooled(h, lengths):
    out = []
    for i in range(h.shape[0]):
        out.append(h[i, :lengths[i]].mean(0))
    return torch.stack(out)


def span_sums(x, starts, ends):
    out = torch.zeros(x.shape[0], x.shape[2], dtype=x.dtype)
    for i in range(x.shape[0]):
        s, e = int(starts[i]), int(ends[i])
        out[i] = x[i][s:e].sum(0)
    return out


def tail_extremes(x, k):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i][-k[i]:].max() - x[i][: k[i]].min())
    return torch.stack(res)


def total_of_prefix(x, n):
    return torch.stack([x[i, :n[i]].sum() for i in range(x.shape[0])])


def max_pooled(h, lengths):
    out = torch.zeros(h.shape[0], h.shape[2])
    for i in range(h.shape[0]):
        out[i] = h[i, :lengths[i]].max(0).values
    return out


def min_pooled(h, lengths):
    return torch.stack([h[i, :lengths[i]].min(dim=0)[0] for i in range(h.shape[0])])


def pooled_dim_keyword(h, lengths):
    out = torch.empty(h.shape[0], h.shape[2])
    for i in range(h.shape[0]):
        out[i] = h[i, :lengths[i]].mean(dim=0)        # (the keyword spelling: a probe found it lost)
    return out


def summed_axis_keyword(h, lengths):
    return torch.stack([h[i, :lengths[i]].sum(axis=0) for i in range(h.shape[0])])


def span_function_spelling(h, lengths):
    return torch.stack([torch.sum(h[i, :lengths[i]], dim=0) for i in range(h.shape[0])])


def masked_function_spelling(x, keep):
    return torch.stack([torch.mean(x[i][keep[i]]) - torch.max(x[i][keep[i]]) for i in range(x.shape[0])])


def masked_dim_keyword(x, keep):
    return torch.stack([x[i][keep[i]].sum(dim=0) for i in range(x.shape[0])])


def pooled_if_nonempty(h, lengths):
    # (the span's row read under the branch's condition: lowering.batched._own_row; probeI)
    out = torch.zeros(h.shape[0], h.shape[2])
    for i in range(h.shape[0]):
        if lengths[i] > 0:
            out[i] = h[i, :lengths[i]].mean(0)
    return out


def summed_if_long(h, lengths):
    out = torch.full((h.shape[0], h.shape[2]), -1.0)
    for i in range(h.shape[0]):
        if lengths[i] > 2:
            out[i] = (h[i, :lengths[i]] * 2).sum(0)
    return out


SPANS = [
    (pooled_if_nonempty, lambda: (torch.randn(30, 12, 4), torch.randint(0, 13, (30,)))),
    (pooled_if_nonempty, lambda: (torch.randn(30, 12, 4), torch.randint(-8, 16, (30,)))),   # past the end
    (summed_if_long, lambda: (torch.randn(30, 12, 4), torch.randint(-3, 14, (30,)))),
    (pooled, lambda: (torch.randn(30, 12, 4), torch.randint(1, 13, (30,)))),
    (pooled_dim_keyword, lambda: (torch.randn(30, 12, 4), torch.randint(-3, 13, (30,)))),
    (summed_axis_keyword, lambda: (torch.randn(20, 6, 3), torch.randint(1, 7, (20,)))),
    (masked_dim_keyword, lambda: (torch.randn(20, 6, 3), torch.rand(20, 6) > 0.5)),
    (span_function_spelling, lambda: (torch.randn(20, 6, 3), torch.randint(-2, 7, (20,)))),
    (masked_function_spelling, lambda: (torch.randn(20, 6), (torch.rand(20, 6) > 0.5) | (torch.arange(6) == 0))),
    (pooled, lambda: (torch.randn(20, 6, 3), torch.randint(-8, 9, (20,)))),          # negative, past the end
    (span_sums, lambda: (torch.randn(25, 10, 3), torch.randint(-12, 12, (25,)), torch.randint(-12, 14, (25,)))),
    (span_sums, lambda: (torch.randint(-5, 5, (25, 10, 3)), torch.randint(0, 5, (25,)), torch.randint(3, 11, (25,)))),
    (tail_extremes, lambda: (torch.randn(20, 9), torch.randint(1, 9, (20,)))),
    (total_of_prefix, lambda: (torch.randn(18, 7, dtype=torch.float64), torch.randint(0, 8, (18,)))),
    (max_pooled, lambda: (torch.randn(30, 12, 4), torch.randint(1, 13, (30,)))),      # `.max(0).values`
    (min_pooled, lambda: (torch.randn(20, 6, 3), torch.randint(-5, 9, (20,)).clamp(min=-5) | 1)),
]


@pytest.mark.parametrize("fn, make", SPANS, ids=[f"{fn.__name__}{k}" for k, (fn, _) in enumerate(SPANS)])
def test_ragged_spans_are_reduced_at_once(fn, make):
    torch.manual_seed(0)
    args = make()
    f = autovec(fn)
    f(*args)
    assert _ran(f) == {"batched"}
    assert_equivalent(fn, *args)
    floats = tuple(a.clone().requires_grad_() if a.is_floating_point() else a for a in args)
    if floats[0].requires_grad:
        assert_equivalent(fn, *floats, grad=True)
    if fn in (max_pooled, min_pooled):
        # (`.max(0)` gives a column's gradient to one of its ties, torch's choice: the loop runs)
        f(*floats)
        assert _ran(f) == set()


def kept_dims(h, lengths):
    return torch.stack([h[i, :lengths[i]].mean(dim=0, keepdim=True) for i in range(h.shape[0])])


def second_dim(h, lengths):
    return torch.stack([h[i, :lengths[i]].sum(dim=1).sum() for i in range(h.shape[0])])


def max_dim_keyword(h, lengths):
    return torch.stack([h[i, :lengths[i]].max(dim=0).values for i in range(h.shape[0])])


@pytest.mark.parametrize("fn", [kept_dims, second_dim, max_dim_keyword])
def test_other_reductions_of_a_span_keep_their_values(fn):
    """`keepdim=`, another dimension, `max(dim=0)` under grad: not the span's batched form (the
    loop, or another form), with the loop's values."""
    h, lengths = torch.randn(12, 6, 3), torch.randint(1, 7, (12,))
    assert_equivalent(fn, h, lengths)
    assert_equivalent(fn, h.clone().requires_grad_(), lengths, grad=True)


def test_an_empty_span_of_max_along_its_first_dimension_raises_as_the_loop():
    raises_as_loop(IndexError, max_pooled, torch.randn(4, 5, 2), torch.tensor([3, 0, 5, 1]))


def test_an_empty_span_is_the_loops():
    """mean of an empty span is NaN, sum 0; max of one raises, as the loop."""
    h, n = torch.randn(6, 5, 2), torch.tensor([3, 0, 5, 0, 1, 2])
    assert_equivalent(pooled, h, n)
    assert_equivalent(span_sums, h, n - 1, n + 2)
    raises_as_loop(RuntimeError, tail_extremes, torch.randn(6, 5), torch.tensor([1, 2, 0, 1, 1, 1]))


def test_float_bounds_raise_as_the_loop():
    raises_as_loop(TypeError, pooled, torch.randn(5, 4, 2), torch.full((5,), 2.0))


# ----------------------------------------------------------------------------- arithmetic on selections
# `(pred[m] == c).float().mean()`: elementwise on the selections, reduced at once (_masked_expression)


def class_accuracy(pred, y, k):
    accs = []
    for c in range(k):
        m = y == c
        accs.append((pred[m] == c).float().mean())
    return torch.stack(accs)


def class_agreement(pred, y, k):
    return torch.stack([(pred[y == c] == y[y == c]).sum() for c in range(k)])


def spread(x, m, mu):
    out = torch.zeros(x.shape[0], dtype=x.dtype)
    for i in range(x.shape[0]):
        out[i] = ((x[i][m[i]] - mu[i]) ** 2).sum() / 2 + (x[i][m[i]].abs() * 3).max()
    return out


def log_of_selected(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i][x[i] > 0].log().mean())        # log of the rest is NaN: never reaches the mean
    return torch.stack(out)


SELECTIONS = [
    (class_accuracy, lambda: (torch.randint(0, 6, (200,)), torch.randint(0, 6, (200,)), 7)),   # class 6 is empty
    (class_agreement, lambda: (torch.randint(0, 4, (90,)), torch.randint(0, 4, (90,)), 4)),
    (spread, lambda: (torch.randn(20, 8), torch.rand(20, 8) > 0.3, torch.randn(20))),
    (log_of_selected, lambda: (torch.randn(15, 9),)),
]


@pytest.mark.parametrize("fn, make", SELECTIONS, ids=[fn.__name__ for fn, _ in SELECTIONS])
def test_arithmetic_on_selections_is_reduced_at_once(fn, make):
    torch.manual_seed(0)
    args = make()
    f = autovec(fn)
    got = f(*args)
    assert _ran(f) == {"batched"}
    want = fn(*args)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)
    assert_equivalent(fn, *args)


def test_arithmetic_on_selections_with_gradients_keeps_the_loop():
    """sqrt of an unselected zero has an infinite derivative: zero times it is NaN, which the
    loop never computes. With gradients, the loop runs."""
    def roots(x):
        out = []
        for i in range(x.shape[0]):
            out.append(x[i][x[i] > 0].sqrt().sum())
        return torch.stack(out)
    x = torch.randn(8, 5)
    x[:, 0] = 0.0
    x.requires_grad_()
    assert_equivalent(roots, x, grad=True)
    f = autovec(roots)
    f(x)
    assert not _ran(f)
    f(x.detach())
    assert _ran(f) == {"batched"}


# (stop 31) sums and means of ragged spans on large batches: one reduction per distinct span
# (batching._span_groups), over exactly the span's rows as one iteration reduces them: the
# loop's values bit for bit, not only within tolerance

GROUPED = [(fn, make) for fn, make in SPANS if fn not in (max_pooled, min_pooled, tail_extremes,
                                                             masked_dim_keyword, masked_function_spelling)]


@pytest.mark.parametrize("fn, make", GROUPED, ids=[f"{fn.__name__}{k}" for k, (fn, _) in enumerate(GROUPED)])
@pytest.mark.parametrize("groups", [64, 2])
def test_spans_reduced_one_group_at_a_time_are_the_loops_bit_for_bit(fn, make, groups, monkeypatch):
    from autovec import batching
    monkeypatch.setattr(batching, "_SPAN_GROUPS_FLOOR", 0)
    monkeypatch.setattr(batching, "_SPAN_GROUPS", groups)       # (2: most of these take the mask)
    torch.manual_seed(0)
    args = make()
    f = autovec(fn)
    for _ in range(2):
        got, want = f(*args), fn(*args)
        assert got.dtype == want.dtype
        if groups == 64:
            assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0))
        else:       # (the mask: within rounding; its sum runs over every position)
            torch.testing.assert_close(got, want, equal_nan=True)
    assert _ran(f) == {"batched"}
    floats = tuple(a.clone().requires_grad_() if a.is_floating_point() else a for a in args)
    if floats[0].requires_grad:
        assert_equivalent(fn, *floats, grad=True)


def test_masked_mean_pooling_at_scale_is_the_loops_bit_for_bit():
    torch.manual_seed(1)
    h, n = torch.randn(3000, 16, 8), torch.randint(0, 17, (3000,))
    got, want = autovec(pooled)(h, n), pooled(h, n)
    assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0))
    hd = h.double()
    assert torch.equal(autovec(pooled)(hd, n).nan_to_num(7.0), pooled(hd, n).nan_to_num(7.0))


def token_nll(log_probs, targets, ignore_index: int):
    total = torch.zeros(())
    count = 0
    for t in range(targets.shape[0]):
        if targets[t] == ignore_index:
            continue
        total = total - log_probs[t, targets[t]]
        count += 1
    return total / count


def test_a_skipped_row_is_not_compared_by_the_batched_bodys_check():
    """(stop 32's probe, `token_nll_ignore_index`: the batched body's check compared the term on a
    row the `continue` skips, where the batch and one iteration read the stand-in index
    differently, and fell back to vmap: 1.5 ms where the batched body takes 0.5)"""
    from autovec import explain
    g = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(torch.randn(200, 7, generator=g), dim=1)
    t = torch.randint(0, 7, (200,), generator=g)
    t[1::3] = -100
    for _ in range(3):
        torch.testing.assert_close(autovec(token_nll)(lp, t, -100), token_nll(lp, t, -100))
    notes = " ".join(explain(token_nll, lp, t, -100).notes)
    assert "whole-batch" in notes and "vmap" not in notes.split("whole-batch")[0], notes


def masked_extremes(x, m):
    hi, lo = [], []
    for i in range(x.shape[0]):
        hi.append(x[i][m[i]].max())
        lo.append(x[i][~m[i]].min())
    return torch.stack(hi), torch.stack(lo)


def test_an_extreme_of_zeros_of_both_signs_keeps_the_loop_and_others_do_not():
    # which zero a max keeps depends on its order of comparisons: where a selection's extreme is
    # zero and the rows hold +0.0 and -0.0 the loop decides; extremes away from zero do not care
    m = torch.tensor([[True, True, False, False], [True, False, True, False]])
    zero_extremes = torch.tensor([[-1.0, -0.0, 0.0, 2.0], [-0.0, 5.0, 0.0, 3.0]])
    other_extremes = torch.tensor([[1.0, -0.0, 0.0, -2.0], [4.0, -0.0, 0.0, 3.0]])
    other_extremes[1, 1] = -7.0      # (maxima 1 and 4, minima -2 and -7: no zero extreme)
    for x, path in ((zero_extremes, "python"), (other_extremes, "vectorized")):
        f = autovec(masked_extremes)
        for _ in range(3):
            got, want = f(x, m), masked_extremes(x, m)
            for a, b in zip(got, want):
                assert torch.equal(a, b) and torch.equal(torch.signbit(a), torch.signbit(b))
        assert explain(f, x, m).path == path


def named_mean(x, m):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        v = x[i][m[i]]                      # a name for the selection, then its reductions
        out[i] = v.sum() / max(v.numel(), 1)
    return out


def token_loss(loss, labels):
    total = 0.0
    count = 0
    for i in range(loss.shape[0]):
        valid = loss[i][labels[i] != -100]
        total = total + valid.sum()
        count += valid.numel()
    return total / count


def guarded_mean(x, m):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        sel = x[i][m[i]]
        if sel.numel() > 0:
            out[i] = sel.mean()
    return out


def hardest_pair(x, m):
    res = []
    for i in range(x.shape[0]):
        pos, neg = x[i][m[i]], x[i][~m[i]]
        res.append(pos.max() - neg.min())
    return torch.stack(res)


def selected_counts(x, m):
    out = []
    for i in range(x.shape[0]):
        out.append((len(x[i][m[i]]), x[i][m[i]].numel()))
    return out


def test_a_named_selection_reduced_numel_and_len_batch_as_the_loop():
    from conftest import check_loop
    g = torch.Generator().manual_seed(11)
    x = torch.randn(40, 12, generator=g)
    m = torch.rand(40, 12, generator=g) > 0.4
    m[:, 0], m[:, 1] = True, False
    labels = torch.randint(-1, 5, (40, 12), generator=g)
    labels[labels < 0] = -100
    assert check_loop(named_mean, x, m, grad=(0,)) == {"batched"}
    assert check_loop(token_loss, x, labels, grad=(0,), exact_args=False) == {"batched"}
    assert check_loop(hardest_pair, x, m, grad=(0,)) == {"batched"}
    empty = m.clone()
    empty[3] = False                        # a row with nothing selected: its branch skipped
    assert check_loop(guarded_mean, x, empty) == {"batched"}
    assert check_loop(named_mean, x, empty) == {"batched"}
    fast = autovec(selected_counts)
    for mm in (m, empty, torch.rand(40, 12, generator=g).reshape(40, 3, 4) > 0.5):
        xx = x if mm.dim() == 2 else x.reshape(40, 3, 4, 1).expand(40, 3, 4, 2).contiguous()
        got, want = fast(xx, mm), selected_counts(xx, mm)
        assert got == want and all(type(a) is int and type(b) is int for a, b in got)
    assert _ran(fast) == {"batched"}


def selection_then_write(x, m):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        v = x[i][m[i]]
        y = x[i] * 2
        out[i] = v.sum() + y.sum()
    return out


def test_a_named_selection_with_a_mask_of_another_shape_raises_as_the_loop():
    x = torch.randn(6, 5)
    raises_as_loop(IndexError, named_mean, x, torch.ones(6, 4, dtype=torch.bool))
    from conftest import check_loop
    assert check_loop(selection_then_write, x, x > 0, grad=(0,)) == {"batched"}


@pytest.mark.parametrize("src, inlined", [
    ("def f(x_i, m_i):\n    v = x_i[m_i]\n    return (v.sum() / v.numel(),)", True),
    ("def f(x_i, m_i):\n    v = x_i[m_i]\n    x_i = x_i * 2\n    return (v.sum(),)", False),     # a read rebound
    ("def f(x_i, m_i):\n    v = x_i[m_i]\n    x_i.mul_(2)\n    return (v.sum(),)", False),     # written in place
    ("def f(x_i, m_i):\n    v = x_i[m_i]\n    v = v + 1\n    return (v.sum(),)", False),     # bound twice
    ("def f(x_i, m_i):\n    v = x_i[m_i]\n    return (x_i.sum(),)", False),                  # never read
    ("def f(x_i, m_i):\n    v = x_i[0]\n    return (v.sum(),)", False),                     # a number index
])
def test_which_named_selections_are_read_as_the_selection_itself(src, inlined):
    import ast
    from autovec.batching import _selections_inlined
    got = _selections_inlined(ast.parse(src).body[0])
    assert (got is not None) == inlined
    if inlined:
        assert ast.unparse(got.body[-1]) == "return (x_i[m_i].sum() / x_i[m_i].numel(),)"


def half_class_means(x, y, k):
    out = []
    for c in range(k):
        out.append(x[y == c].mean(0))
    return torch.stack(out)


def test_half_precision_class_means_round_once():
    """(probeJ: the per-label totals were added in float16, rounding at every row; torch's mean
    of a selection sums in float32 and rounds once)"""
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(400, 3, generator=g) * 8).half()
    y = torch.randint(0, 4, (400,), generator=g)
    f = autovec(half_class_means)
    for _ in range(2):
        got, want = f(x, y, 4), half_class_means(x, y, 4)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert _ran(f) == {"batched"}
