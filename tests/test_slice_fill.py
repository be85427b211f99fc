"""Slice assignments whose bounds change per iteration: `out[i, lengths[i]:] = 0`,
`mask[i, :lengths[i]] = True`. The analysis reads them as a store of the whole row computed from
the row as it was; one iteration runs the loop's own slice assignment on a copy, and a batched
body makes a mask of the positions (Python's slice rules: None, negative bounds from the end,
clamping). Checked against the loop: values, dtypes, errors, gradients, arguments written in place."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran, same_on_every_call


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def zero_padding(h, lengths):
    out = h.clone()
    for i in range(h.shape[0]):
        out[i, lengths[i]:] = 0
    return out


def pad_mask(lengths, T):
    mask = torch.zeros(len(lengths), T, dtype=torch.bool)
    for i in range(len(lengths)):
        mask[i, :lengths[i]] = True
    return mask


def window(x, starts, ends):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i, starts[i]:ends[i]] = 1.5
    return out


def mask_scores(scores, lengths):
    out = scores.clone()
    for b in range(scores.shape[0]):
        k = lengths[b] - 1                   # a bound computed in the body
        out[b, :, k:] = float("-inf")        # the slice on the row's second dimension
    return out


def in_place(out, lengths, pad):
    for i in range(out.shape[0]):
        out[i, lengths[i]:] = pad
    return out


def shifted(out, lengths):
    for i in range(out.shape[0] - 1):
        out[i + 1, lengths[i]:] = -1
    return out


def only_some(out, lengths, flags):
    for i in range(out.shape[0]):
        if flags[i] > 0:
            out[i, lengths[i]:] = 0
    return out


@pytest.mark.parametrize("shape", [(30, 7), (30, 7, 3)])
def test_zero_padding_runs_batched(shape):
    h = torch.randn(*shape)
    lengths = torch.randint(0, shape[1] + 1, (shape[0],))
    fast = autovec(zero_padding)
    for _ in range(3):
        assert torch.equal(fast(h, lengths), zero_padding(h, lengths))
    assert _ran(fast) == {"batched"}
    assert explain(zero_padding, h, lengths).path == "vectorized"


def test_negative_and_large_bounds_follow_python_slices():
    lengths = torch.tensor([-9, -3, -1, 0, 1, 5, 6, 7, 100])
    fast = autovec(pad_mask)
    for _ in range(2):
        got = fast(lengths, 6)
        assert got.dtype == torch.bool and torch.equal(got, pad_mask(lengths, 6))
    assert _ran(fast) == {"batched"}


def test_both_bounds_change():
    x = torch.randn(40, 9)
    starts = torch.randint(-10, 10, (40,))
    ends = torch.randint(-10, 10, (40,))
    fast = autovec(window)
    assert torch.equal(fast(x, starts, ends), window(x, starts, ends))
    assert _ran(fast) == {"batched"}


def test_slice_on_a_later_dimension_with_a_computed_bound():
    s = torch.randn(12, 3, 8)
    lengths = torch.randint(0, 9, (12,))
    fast = autovec(mask_scores)
    assert torch.equal(fast(s, lengths), mask_scores(s, lengths))
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("pad", [0, -1.5, True, torch.tensor(2.25), torch.tensor(7, dtype=torch.int32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_values_convert_as_the_assignment_does(pad, dtype):
    out = (torch.randn(10, 6) * 5).to(dtype)
    lengths = torch.randint(0, 7, (10,))
    assert_equivalent(in_place, out, lengths, pad)
    fast = autovec(in_place)
    a, b = out.clone(), out.clone()
    assert torch.equal(fast(a, lengths, pad), in_place(b, lengths, pad))
    assert torch.equal(a, b)                 # the argument, written in place


def test_value_that_does_not_fit_raises_as_the_loop():
    out = torch.zeros(5, 4, dtype=torch.int64)
    lengths = torch.tensor([1, 2, 0, 3, 4])
    with pytest.raises(RuntimeError):
        in_place(out.clone(), lengths, float("-inf"))
    with pytest.raises(RuntimeError):
        autovec(in_place)(out.clone(), lengths, float("-inf"))


def test_float_bounds_raise_as_the_loop():
    h = torch.randn(4, 5)
    lengths = torch.tensor([1.0, 2.0, 3.0, 0.0])
    with pytest.raises(TypeError):
        zero_padding(h, lengths)
    with pytest.raises(TypeError):
        autovec(zero_padding)(h, lengths)


def test_python_list_of_lengths():
    h = torch.randn(8, 5)
    lengths = [3, 0, 5, 2, -1, 7, 1, 4]
    fast = autovec(zero_padding)
    assert torch.equal(fast(h, lengths), zero_padding(h, lengths))
    assert _ran(fast) == {"batched"}


def test_gradients_match():
    h = torch.randn(10, 6, requires_grad=True)
    lengths = torch.randint(0, 7, (10,))
    assert_equivalent(zero_padding, h, lengths, grad=True)


def test_offset_index():
    out = torch.randn(9, 4)
    lengths = torch.randint(0, 5, (9,))
    a, b = out.clone(), out.clone()
    assert torch.equal(autovec(shifted)(a, lengths), shifted(b, lengths))


def test_conditional_fill_keeps_the_loops_answer():
    out = torch.randn(9, 4)
    lengths = torch.randint(0, 5, (9,))
    flags = torch.randn(9)
    a, b = out.clone(), out.clone()
    assert torch.equal(autovec(only_some)(a, lengths, flags), only_some(b, lengths, flags))
    assert torch.equal(a, b)


def fill_with_row_stat(x, lengths):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.int64)
    for i in range(x.shape[0]):
        out[i, lengths[i]:] = x[i].sum()      # one value per iteration, cast to the output's dtype
    return out


def test_a_value_per_iteration():
    x = torch.randn(20, 6) * 4
    lengths = torch.randint(-7, 8, (20,))
    fast = autovec(fill_with_row_stat)
    for _ in range(2):
        assert torch.equal(fast(x, lengths), fill_with_row_stat(x, lengths))
    assert _ran(fast) == {"batched"}
    h = torch.randn(20, 6, requires_grad=True)
    assert_equivalent(zero_padding, h, lengths.clamp(min=0), grad=True)


def scale_then_pad(h, lengths, temps):
    out = torch.empty_like(h)
    for b in range(h.shape[0]):
        out[b] = h[b] / temps[b]
        out[b, lengths[b]:] = 0
    return out


def sums_then_mask(h, lengths):
    out = torch.zeros(h.shape[0], h.shape[1], dtype=torch.float64)
    for b in range(h.shape[0]):
        out[b] = h[b].sum(-1)                # float32 sums, stored into float64 rows
        out[b, :lengths[b]] = float("-inf")
    return out


def constant_then_fill(h, lengths):
    out = torch.zeros_like(h)
    for b in range(h.shape[0]):
        out[b] = 1.5
        y = h[b] * 2                          # between the two: does not touch `out`
        out[b, lengths[b]:] = y.sum()
    return out


def reads_between(h, lengths):
    out = torch.zeros_like(h)
    for b in range(h.shape[0]):
        out[b] = h[b]
        s = out[b].sum()                      # reads the row the first store wrote
        out[b, lengths[b]:] = s
    return out


@pytest.mark.parametrize("fn, extra", [(scale_then_pad, True), (sums_then_mask, False), (constant_then_fill, False)])
def test_a_store_then_a_fill_of_the_same_row(fn, extra):
    # one store: the row as the first store leaves it (converted and broadcast as setitem
    # does), then filled
    h = torch.randn(30, 6, 4)
    lengths = torch.randint(-8, 9, (30,))
    args = (h, lengths, [0.5 + i * 0.1 for i in range(30)]) if extra else (h, lengths)
    fast = autovec(fn)
    for _ in range(2):
        want, got = fn(*args), fast(*args)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert _ran(fast) == {"batched"}


def test_a_read_between_the_store_and_the_fill_keeps_the_loop():
    h = torch.randn(10, 5)
    lengths = torch.randint(0, 6, (10,))
    fast = autovec(reads_between)
    assert torch.equal(fast(h, lengths), reads_between(h, lengths))
    assert _ran(fast) == set()


# ----------------------------------------------------------------------------- the same span of another row

def repad(x, lengths, pad: float):
    out = torch.full_like(x, pad)
    for i, L in enumerate(lengths):
        out[i, :L] = x[i, :L]           # (a ragged value: the same span of x's row)
    return out


def copy_window(x, starts, ends):
    out = torch.zeros(x.shape, dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i, starts[i]:ends[i]] = x[i, starts[i]:ends[i]]
    return out


def narrower_source(x, y, lengths):
    out = torch.zeros_like(x)
    for i in range(len(lengths)):
        out[i, :lengths[i]] = y[i, :lengths[i]]     # (y's rows are shorter: other positions past its end)
    return out


@pytest.mark.parametrize("fn, make", [
    (repad, lambda: (torch.randn(5, 7, 3), [3, 0, 7, 5, -2], -1.0)),
    (repad, lambda: (torch.randint(-9, 9, (4, 6)), [6, 1, 9, 0], 0)),
])
def test_the_same_span_of_another_row(fn, make):
    """(stop 32, the probes' `seq_mask_padding`: `fill_range` of a ragged crop had no batched form;
    it is a `where` of the span's mask between the two rows, batching.fill_span)"""
    for _ in range(3):
        args = make()
        got, want = autovec(fn)(*args), fn(*args)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert "fill_span" in " ".join(explain(fn, *make()).notes)


def test_a_span_with_bounds_of_tensors_keeps_its_answer():
    # (`x[i, s_i:e_i]` with tensor bounds is read as a subscript of x by the index, not of its row:
    # no batched form of it yet, and the loop's answer)
    args = (torch.randn(4, 6), torch.tensor([0, 2, -3, 5]), torch.tensor([3, 2, 6, 9]))
    for _ in range(3):
        assert torch.equal(autovec(copy_window)(*args), copy_window(*args))


def test_the_same_span_with_gradients():
    x = torch.randn(5, 7, 3, dtype=torch.float64, requires_grad=True)
    assert_equivalent(repad, x, [3, 0, 7, 5, 2], -1.0, grad=True)


def test_a_source_row_of_another_shape_keeps_the_loop():
    x, y = torch.randn(3, 5), torch.randn(3, 4)
    with pytest.raises(RuntimeError) as want:
        narrower_source(x, y, [2, 4, 5])
    with pytest.raises(RuntimeError) as got:
        autovec(narrower_source)(x, y, [2, 4, 5])
    assert str(got.value) == str(want.value)
    assert torch.equal(autovec(narrower_source)(x, y, [2, 4, 1]), narrower_source(x, y, [2, 4, 1]))


# ------------------------------------------------- a fill that is the whole body: in place

def mask_tail(logits, lengths):
    for i in range(logits.size(0)):
        logits[i, lengths[i]:, :] = -1e9
    return logits


def mask_tail_back(logits, lengths):
    for i in range(logits.size(0) - 1, -1, -1):
        logits[i, lengths[i]:, :] = -1e9
    return logits


def mask_tail_even(logits, lengths):
    for i in range(0, logits.size(0), 2):
        logits[i, :lengths[i]] = 7.0
    return logits


def sum_then_mask_tail(logits, lengths, sums):
    for i in range(logits.size(0)):
        sums[i] = logits[i].sum()
        logits[i, lengths[i]:, :] = 0.0
    return logits, sums


@pytest.mark.parametrize("fn", [mask_tail, mask_tail_back, mask_tail_even])
def test_a_fill_of_the_target_s_own_rows_is_made_in_place(fn):
    # (large enough for the in-place form; the argument is updated in place as the loop does)
    x, lengths = torch.randn(40, 30, 64), torch.randint(0, 31, (40,))
    a, b = x.clone(), x.clone()
    f = autovec(fn)
    for _ in range(3):
        assert f(a, lengths) is a
        fn(b, lengths)
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        lengths = torch.randint(0, 31, (40,))
    ex = explain(f, x.clone(), lengths)
    assert ex.path == "vectorized" and any("inplace=True" in n for n in ex.notes)


def test_a_fill_after_another_read_of_the_row_is_not_in_place():
    x, lengths = torch.randn(40, 30, 64), torch.randint(0, 31, (40,))
    a, b = x.clone(), x.clone()
    sa, sb = torch.zeros(40), torch.zeros(40)
    autovec(sum_then_mask_tail)(a, lengths, sa)
    sum_then_mask_tail(b, lengths, sb)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(sa, sb, rtol=0, atol=0)


def test_a_fill_of_rows_that_require_grad_is_not_in_place():
    w = torch.randn(40, 30, 64, requires_grad=True)
    lengths = torch.randint(0, 31, (40,))
    g = torch.randn(40, 30, 64)
    (autovec(mask_tail)(w * 2, lengths) * g).sum().backward()
    got, w.grad = w.grad.clone(), None
    (mask_tail(w * 2, lengths) * g).sum().backward()
    torch.testing.assert_close(got, w.grad, rtol=0, atol=0)


def test_a_value_that_does_not_fit_raises_before_anything_is_filled():
    x = torch.randint(-5, 5, (40, 30, 64), dtype=torch.int8)
    lengths = torch.randint(0, 31, (40,))
    with pytest.raises(RuntimeError) as want:
        mask_tail(x.clone(), lengths)
    a = x.clone()
    with pytest.raises(RuntimeError) as got:
        autovec(mask_tail)(a, lengths)
    assert str(got.value) == str(want.value)
    b = x.clone()
    try:
        mask_tail(b, lengths)
    except RuntimeError:
        pass
    torch.testing.assert_close(a, b, rtol=0, atol=0)     # (the same rows written before the error)


def pad_truncate(seqs, lengths, max_len):
    out = torch.zeros(seqs.shape[0], max_len, *seqs.shape[2:], dtype=seqs.dtype)
    for b in range(seqs.shape[0]):
        n = min(int(lengths[b]), max_len)
        out[b, :n] = seqs[b, :n]
    return out


def pad_from(seqs, lengths, max_len, fill):
    out = torch.full((seqs.shape[0], max_len), fill)
    for b in range(seqs.shape[0]):
        n = int(lengths[b])
        out[b, n // 2:n] = seqs[b, n // 2:n]
    return out


@pytest.mark.parametrize("fn, make", [
    (pad_truncate, lambda: (torch.randint(0, 99, (6, 9)), torch.randint(0, 12, (6,)), 5)),      # (wider rows: truncated)
    (pad_truncate, lambda: (torch.randint(0, 99, (6, 4)), torch.randint(0, 4, (6,)), 7)),       # (narrower rows: padded)
    (pad_truncate, lambda: (torch.randn(5, 6, 3), torch.randint(0, 6, (5,)), 8)),               # (rows of vectors)
    (pad_truncate, lambda: (torch.randint(0, 99, (3, 0)), torch.zeros(3, dtype=torch.long), 4)),  # (empty rows)
    (pad_truncate, lambda: (torch.randint(0, 99, (4, 3)), torch.tensor([1, 9, 2, 0]), 7)),      # (a span past the rows' end: the loop raises)
    (pad_from, lambda: (torch.randn(6, 10), torch.randint(0, 10, (6,)), 7, -1.0)),
    (pad_from, lambda: (torch.randn(6, 5), torch.tensor([5, 1, -2, 8, 3, 0]), 7, 0.5)),
])
def test_a_span_of_rows_of_another_width(fn, make):
    """(probeC's collate code: `out[b, :n] = seqs[b, :n]` with rows of another width than the
    output's was refused, 'a span assigned from a row of another shape'; each row's bounds are
    now normalized for its own width and the source's span laid out as the row's, and spans of
    different lengths leave the loop to raise)"""
    same_on_every_call(fn, make, calls=4)


def test_padding_rows_of_another_width_is_vectorized():
    args = (torch.randint(0, 99, (6, 9)), torch.randint(0, 9, (6,)), 5)
    ex = explain(pad_truncate, *args)
    assert ex.path == "vectorized" and "fill_span" in " ".join(ex.notes)


def test_spans_of_other_lengths_on_a_later_call():
    # a first call (checked once against the loop) that fits, then calls the batch answers alone:
    # a source span of one element is broadcast as setitem does; spans of other lengths raise
    fast = autovec(pad_from)
    ok = (torch.randn(4, 3), torch.tensor([2, 1, 0, 3]), 7, 0.5)
    torch.testing.assert_close(fast(*ok), pad_from(*ok), rtol=0, atol=0)
    one = (torch.randn(4, 3), torch.tensor([5, 5, 1, 2]), 7, 0.5)       # (seqs[b, 2:5] holds one element)
    torch.testing.assert_close(fast(*one), pad_from(*one), rtol=0, atol=0)
    bad = (torch.randn(4, 3), torch.tensor([2, 6, 1, 0]), 7, 0.5)       # (out[b, 3:6] three, seqs[b, 3:6] none)
    with pytest.raises(RuntimeError) as want:
        pad_from(*bad)
    with pytest.raises(RuntimeError) as got:
        fast(*bad)
    assert str(got.value) == str(want.value)


def window_from_end(x, y, ends):
    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        n = int(ends[b])
        out[b, n * 5:n] = y[b, n * 5:n]
    return out


def test_a_one_element_source_span_is_broadcast_over_the_rows_span():
    # y's rows of 3: with n = -2, y[b, -10:-2] is y[b, 0:1], one element, which setitem broadcasts
    # over out[b, -10:-2], six of x's 8 (its start clipped too: the gather must take that one
    # element for every position, not the elements after it)
    make = lambda: (torch.randn(4, 8), torch.randn(4, 3), torch.tensor([-2, -2, 0, -2]))   # noqa: E731
    same_on_every_call(window_from_end, make)
    ex = explain(window_from_end, *make())
    assert ex.path == "vectorized" and "fill_span" in " ".join(ex.notes)


# ----------------------------------------------------------------- arithmetic on the same span

def scaled_span(x, lengths):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        L = int(lengths[i])
        out[i, :L] = x[i, :L] * 2 + 1
    return out


def log_span(x, lengths, temps):
    out = torch.full_like(x, -1.0)
    for i in range(x.shape[0]):
        L = int(lengths[i])
        out[i, :L] = torch.log(x[i, :L]) / temps[i]
    return out


def weighted_span(h, w, lengths):
    out = torch.zeros_like(h)
    for i in range(h.shape[0]):
        out[i, :lengths[i]] = (h[i, :lengths[i]] * w).relu()     # (w along the rows' other dimension)
    return out


def into_ints(x, lengths):
    out = torch.zeros(x.shape, dtype=torch.int64)
    for i in range(x.shape[0]):
        out[i, :lengths[i]] = x[i, :lengths[i]] * 3.7            # (the assignment truncates)
    return out


def tail_span(x, starts):
    out = x.clone()
    for i in range(x.shape[0]):
        out[i, starts[i]:] = -x[i, starts[i]:]
    return out


@pytest.mark.parametrize("fn, make", [
    (scaled_span, lambda: (torch.randn(6, 9), torch.tensor([0, 3, 9, 12, -2, 1]))),
    (log_span, lambda: (torch.cat([torch.rand(5, 4) + 0.1, torch.zeros(5, 3)], 1), torch.tensor([4, 2, 0, 4, 3]),
                        torch.rand(5) + 0.5)),    # (log of the padding's zeros: -inf, never stored)
    (weighted_span, lambda: (torch.randn(4, 6, 3), torch.randn(3), [6, 0, 2, 5])),
    (into_ints, lambda: (torch.randn(5, 4) * 5, [4, 1, 0, 3, 2])),
    (tail_span, lambda: (torch.randn(5, 6), [0, 2, 6, -1, 9])),
])
def test_arithmetic_on_the_same_span(fn, make):
    """(`out[i, :L] = x[i, :L] * 2 + 1` had no batched form: a crop of varying width; elementwise
    arithmetic on the store's own span runs on the whole rows, and the span's mask picks what the
    store writes)"""
    fast = autovec(fn)
    for _ in range(3):
        args = make()
        got, want = fast(*args), fn(*args)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert "fill_span" in " ".join(explain(fn, *make()).notes)


def test_arithmetic_on_a_span_with_gradients():
    """(the padding's `log(0)` has an infinite derivative; its positions read a detached copy,
    so the gradient outside the spans is the loop's zero, not NaN)"""
    x = torch.cat([torch.rand(5, 4) + 0.1, torch.zeros(5, 3)], 1).double().requires_grad_()
    assert_equivalent(log_span, x, torch.tensor([4, 2, 0, 4, 3]), torch.rand(5, dtype=torch.float64) + 0.5,
                      grad=True)
    fast = autovec(log_span)
    lengths, temps = torch.tensor([4, 2, 0, 4, 3]), torch.rand(5, dtype=torch.float64) + 0.5
    fast(x, lengths, temps).sum().backward()
    assert _ran(fast) == {"batched"}
    g = x.grad.clone()
    x.grad = None
    log_span(x, lengths, temps).sum().backward()
    assert torch.equal(g, x.grad) and not g.isnan().any()


def reverse_padded(x, lengths):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        L = int(lengths[i])
        out[i, :L] = x[i, :L].flip(0)
    return out


def reverse_window(x, starts, ends):
    out = x.clone()
    for i in range(x.shape[0]):
        out[i, starts[i]:ends[i]] = torch.flip(x[i, starts[i]:ends[i]], [0])
    return out


@pytest.mark.parametrize("fn, make", [
    (reverse_padded, lambda: (torch.randn(6, 7, 3), torch.tensor([0, 3, 7, 9, -2, 1]))),
    (reverse_padded, lambda: (torch.randint(-9, 9, (5, 6)), torch.tensor([6, 1, 0, 4, 2]))),
    (reverse_window, lambda: (torch.randn(5, 8), [0, 2, -3, 5, 6], [3, 7, 8, 4, 20])),
])
def test_a_reversed_span(fn, make):
    """(probeC's reverse_padded: `x[i, :L].flip(0)` was a crop of varying width; position p of the
    span takes the element at start + stop - 1 - p, batching.span_flip)"""
    fast = autovec(fn)
    for _ in range(3):
        args = make()
        got, want = fast(*args), fn(*args)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert "span_flip" in " ".join(explain(fn, *make()).notes)


def test_a_reversed_span_with_gradients():
    x = torch.randn(5, 6, 2, dtype=torch.float64, requires_grad=True)
    assert_equivalent(reverse_padded, x, torch.tensor([6, 0, 3, 1, 4]), grad=True)


def left_pad_positions(lengths, T):
    pos = torch.zeros(len(lengths), T, dtype=torch.long)
    for i in range(len(lengths)):
        L = int(lengths[i])
        pos[i, T - L:] = torch.arange(L)
    return pos


def ranges_from(x, starts, ends):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i, :ends[i] - starts[i]] = torch.arange(starts[i], ends[i])
    return out


@pytest.mark.parametrize("fn, make", [
    (left_pad_positions, lambda: (torch.tensor([3, 8, 0, 1, 5]), 8)),
    (left_pad_positions, lambda: (torch.tensor([3, 9, 1]), 8)),            # (past the row: the loop raises)
    (left_pad_positions, lambda: (torch.tensor([3, -1, 1]), 8)),           # (arange(-1) raises)
    (ranges_from, lambda: (torch.zeros(4, 6), torch.tensor([2, 0, 5, 1]), torch.tensor([5, 6, 5, 2]))),
    (ranges_from, lambda: (torch.zeros(4, 6, dtype=torch.int32), [2, 0, 5, 1], [5, 6, 5, 2])),
])
def test_a_range_into_a_span(fn, make):
    """(probeC's position_ids_left_pad: `torch.arange(L)` had no batched form; position p of the
    span takes a + (p - start), batching.span_arange)"""
    same_on_every_call(fn, make)
    args = make()
    try:
        fn(*args)
    except Exception:       # noqa: BLE001 (the loop raises: its answer, checked above)
        return
    assert "span_arange" in " ".join(explain(fn, *args).notes)


# ------------------------------------------------- parts of the tensors a Python list holds

def list_spans(xs, outs, lens):
    for i in range(len(xs)):
        outs[i][:lens[i]] = xs[i][:lens[i]] * 2
    return outs


def list_fill(xs, outs, lens):
    for i in range(len(xs)):
        outs[i][lens[i]:] = 0.5
    return outs


def list_masked(xs, outs, lens):
    for i in range(len(xs)):
        outs[i][xs[i] > 0] = 0.0
    return outs


@pytest.mark.parametrize("fn", [list_spans, list_fill, list_masked])
def test_parts_of_a_lists_tensors_are_written_into_them(fn):
    """(probeK: a store into part of a list's tensor was read as a store of the whole row, and
    the commit put new tensors into the list's slots: the caller's tensors, views of a buffer
    here, were never written. The loop runs such stores)"""
    n, T = 16, 5
    x = torch.randn(n, T)
    lens = torch.randint(0, T + 1, (n,))
    want_buf, got_buf = torch.ones(n, T), torch.ones(n, T)
    fast = autovec(fn)
    for _ in range(2):
        want = fn(list(x.unbind(0)), list(want_buf.unbind(0)), lens)
        got = fast(list(x.unbind(0)), list(got_buf.unbind(0)), lens)
        assert torch.equal(want_buf, got_buf)
        assert all(torch.equal(a, b) for a, b in zip(want, got))
        assert got[0].data_ptr() == got_buf[0].data_ptr()


def test_strict_lets_the_loop_raise_a_span_of_another_length():
    """(probeK: `strict=True` raised NotVectorizable where the loop raises its own RuntimeError:
    the modes' merged refusal dropped the guard's word that the loop decides)"""
    n, T = 16, 6
    x = torch.randn(n, T)
    lens = torch.randint(1, T + 1, (n,))
    d = torch.zeros(n, dtype=torch.long)
    fast = autovec(ranges_from_length, strict=True)
    assert torch.equal(fast(x, lens, d), ranges_from_length(x, lens, d))
    d[5] = 1
    with pytest.raises(RuntimeError) as want:
        ranges_from_length(x, lens, d)
    with pytest.raises(RuntimeError) as got:
        fast(x, lens, d)
    assert str(got.value) == str(want.value)


def ranges_from_length(x, lens, d):
    out = torch.zeros(x.shape, dtype=torch.long)
    for i in range(x.shape[0]):
        out[i, :lens[i]] = torch.arange(lens[i] + d[i])
    return out
