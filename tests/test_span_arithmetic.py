"""Elementwise arithmetic on ragged spans, reduced at once (`(a[i, :l[i]] - b[i, :l[i]]).abs().mean()`):
the spans are a mask of their positions, the arithmetic runs on the whole tensors, and the
result is reduced as a masked selection (batching._Helpers.span_masked). With gradients the
positions outside the spans send theirs to a detached copy (span_guard), so padding whose
derivative is infinite (`log(0)`) never reaches the inputs."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def l1_per_row(a, b, lens):
    out = []
    for i in range(a.shape[0]):
        out.append((a[i, :lens[i]] - b[i, :lens[i]]).abs().mean())
    return torch.stack(out)


def sq_sum_int(a, b, lens):
    loss = 0.0
    for i in range(a.shape[0]):
        n = int(lens[i])
        loss += ((a[i, :n] - b[i, :n]) ** 2).sum() / max(n, 1)
    return loss / a.shape[0]


def log_sum(a, lens):
    out = torch.empty(a.shape[0], dtype=a.dtype)
    for i in range(a.shape[0]):
        out[i] = torch.log(a[i, :lens[i]]).sum()
    return out


def span_of_rows(h, w, starts, ends):
    res = []
    for i in range(h.shape[0]):
        res.append((h[i][starts[i]:ends[i]] * w).sum(0))
    return torch.stack(res)


def tolist_bounds(a, lens):
    res = []
    for i, n in enumerate(lens.tolist()):
        res.append((a[i, :n] * 2 + 1).max())
    return torch.stack(res)


def centred(a, mu, lens):
    res = []
    for i in range(a.shape[0]):
        res.append(((a[i, :lens[i]] - mu[i]) ** 2).mean())
    return torch.stack(res)


def tail_span(a, k):
    res = []
    for i in range(a.shape[0]):
        res.append(a[i, -k[i]:].exp().sum())
    return torch.stack(res)


def _compare(fn, make, grad=(), calls=3):
    fast = autovec(fn)
    for seed in range(calls):
        outs = []
        for g in (fn, fast):
            torch.manual_seed(seed)
            args = list(make())
            for k in grad:
                args[k].requires_grad_()
            out = g(*args)
            grads = torch.autograd.grad(out.sum(), [args[k] for k in grad]) if grad else ()
            outs.append((out, grads))
        (want, gw), (got, gg) = outs
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        for u, v in zip(gw, gg):
            torch.testing.assert_close(v, u, rtol=1e-5, atol=1e-6, equal_nan=True)
    return fast


def _lens(n, t, low=0):
    return torch.randint(low, t + 3, (n,))      # (past the end: clipped, as Python's slice)


def test_difference_of_two_spans_with_gradients():
    fast = _compare(l1_per_row, lambda: (torch.randn(6, 9), torch.randn(6, 9), _lens(6, 9, 1)), grad=(0, 1))
    assert ran_modes(fast) == {"batched"}
    assert explain(fast, torch.randn(6, 9), torch.randn(6, 9), _lens(6, 9, 1)).path == "vectorized"


def test_bounds_from_int_and_a_running_total():
    fast = _compare(sq_sum_int, lambda: (torch.randn(7, 5), torch.randn(7, 5), _lens(7, 5)), grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_empty_spans_mean_is_nan_as_in_the_loop():
    lens = torch.tensor([0, 3, 0, 5])
    fast = _compare(l1_per_row, lambda: (torch.randn(4, 5), torch.randn(4, 5), lens), grad=(0,))
    assert ran_modes(fast) == {"batched"}
    assert torch.isnan(fast(torch.randn(4, 5), torch.randn(4, 5), lens)[0])


def test_padding_with_infinite_derivatives_gives_no_nan_gradient():
    def make():
        a = torch.rand(5, 8) + 0.5
        lens = _lens(5, 8)
        a[torch.arange(8) >= lens.clamp(max=8)[:, None]] = 0.0     # log(0) = -inf in the padding
        return a, lens
    fast = _compare(log_sum, make, grad=(0,))
    assert ran_modes(fast) == {"batched"}
    a, lens = make()
    a.requires_grad_()
    fast(a, lens).sum().backward()
    assert torch.isfinite(a.grad).all()


def test_two_bounds_and_a_weight_along_the_first_dimension():
    def make():
        s = torch.randint(-4, 6, (5,))
        return torch.randn(5, 6, 3), torch.randn(3), s, s + torch.randint(0, 5, (5,))
    fast = _compare(span_of_rows, make, grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_python_int_bounds_and_max():
    fast = _compare(tolist_bounds, lambda: (torch.randn(6, 7), torch.randint(1, 9, (6,))), grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_negative_bounds_count_from_the_end():
    fast = _compare(tail_span, lambda: (torch.randn(5, 6), torch.randint(-2, 8, (5,))), grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_a_per_iteration_number_with_gradients_keeps_the_loop():
    make = lambda: (torch.randn(5, 6), torch.randn(5), _lens(5, 6, 1))   # noqa: E731
    fast = _compare(centred, make, grad=(0, 1))
    assert ran_modes(fast) == set()
    fast = _compare(centred, make)        # without gradients: batched
    assert ran_modes(fast) == {"batched"}


def test_spans_of_tensors_of_two_widths_keep_the_loop():
    def make():
        return torch.randn(4, 6), torch.randn(4, 8), torch.randint(1, 6, (4,))
    fast = _compare(l1_per_row, make)
    assert ran_modes(fast) == set()


def test_the_loops_error_on_a_max_of_an_empty_span():
    a, lens = torch.randn(4, 5), torch.tensor([2, 0, 3, 1])
    with pytest.raises(RuntimeError) as want:
        tolist_bounds(a, lens)
    fast = autovec(tolist_bounds)
    for _ in range(2):
        with pytest.raises(RuntimeError) as got:
            fast(a, lens)
        assert str(got.value) == str(want.value)


def test_float64_values_and_int32_lengths():
    make = lambda: (torch.randn(5, 6).double(), torch.randn(5, 6).double(), _lens(5, 6).to(torch.int32))  # noqa: E731
    fast = _compare(l1_per_row, make, grad=(0,))
    assert ran_modes(fast) == {"batched"}
    assert fast(*make()).dtype == torch.float64


def weighted(h, w, lens):
    res = []
    for i in range(h.shape[0]):
        res.append((h[i, :lens[i]] * w).sum(0))
    return torch.stack(res)


def named_span(h, lens):
    res = []
    for i in range(h.shape[0]):
        n = lens[i]
        seq = h[i, :n]
        res.append(seq.mean(0))
    return torch.stack(res)


def named_span_length(h, lens):
    res = []
    for i in range(h.shape[0]):
        seq = h[i, :lens[i]]
        res.append(seq.sum(0) / max(seq.shape[0], 1))
    return torch.stack(res)


def span_as_wide_as_the_other(a, b, lens):
    res = []
    for i in range(a.shape[0]):
        res.append((a[i, :lens[i]] * b[:lens[i]]).sum())
    return torch.stack(res)


def test_a_weight_that_requires_grad_keeps_the_loop():
    make = lambda: (torch.randn(5, 6, 3), torch.randn(3), _lens(5, 6))    # noqa: E731
    fast = _compare(weighted, make, grad=(0, 1))
    assert ran_modes(fast) == set()
    fast = _compare(weighted, make, grad=(0,))     # (the weight without gradients: batched)
    assert ran_modes(fast) == {"batched"}


def test_a_span_bound_to_a_name_and_reduced():
    fast = _compare(named_span, lambda: (torch.randn(5, 7, 2), _lens(5, 7)), grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_a_named_span_read_as_a_shape_keeps_the_loop():
    fast = _compare(named_span_length, lambda: (torch.randn(5, 7, 2), _lens(5, 7)), grad=(0,))
    assert ran_modes(fast) == set()


def test_a_tensor_as_wide_as_the_span_keeps_the_loop():
    # (b[:l] has the span's width: the loop's product pairs positions, a broadcast would not)
    make = lambda: (torch.randn(4, 6), torch.randn(6), torch.randint(1, 6, (4,)))    # noqa: E731
    fast = _compare(span_as_wide_as_the_other, make)
    assert ran_modes(fast) == set()


def offset_spans(a, b, s):
    res = []
    for i in range(a.shape[0]):
        res.append((a[i, s[i]:] - b[i, s[i]:]).sum())
    return torch.stack(res)


def times_invariant(a, v, lens):
    res = []
    for i in range(a.shape[0]):
        res.append((a[i, :lens[i]] * v).sum())
    return torch.stack(res)


def times_ragged_weight(h, w, lens):
    res = []
    for i in range(h.shape[0]):
        res.append((h[i, :lens[i]] * w[:lens[i]]).sum())
    return torch.stack(res)


def _same_outcome(fn, args):
    fast = autovec(fn)
    for _ in range(3):
        try:
            want = fn(*args)
        except (RuntimeError, IndexError) as e:
            with pytest.raises(type(e)) as got:
                fast(*args)
            assert str(got.value) == str(e)
        else:
            torch.testing.assert_close(fast(*args), want)
    return fast


def test_a_width_one_tensor_beside_a_wider_span_raises_as_the_loop():
    # (b[i, 1:] is empty where a[i, 1:] has 5 elements: the loop raises at row 2, after two rows
    # that broadcast; a broadcast of the whole tensors would not raise)
    fast = _same_outcome(offset_spans, (torch.randn(4, 6), torch.randn(4, 1), torch.tensor([0, 0, 1, 0])))
    assert ran_modes(fast) == set()


def test_an_invariant_tensor_as_wide_as_the_span_raises_as_the_loop():
    fast = _same_outcome(times_invariant, (torch.randn(4, 6), torch.randn(6), torch.tensor([6, 6, 4, 6])))
    assert ran_modes(fast) == set()
    fast = _same_outcome(times_invariant, (torch.randn(4, 6), torch.randn(()), torch.tensor([2, 3, 1, 4])))
    assert ran_modes(fast) == {"batched"}


def test_a_ragged_weight_beside_a_span_keeps_the_loop():
    fast = _same_outcome(times_ragged_weight, (torch.randn(4, 5, 3), torch.randn(5), torch.tensor([3, 3, 2, 3])))
    assert ran_modes(fast) == set()


import torch.nn.functional as F  # noqa: E402


def ce_per_sequence(logits, tgt, lens):
    loss = 0.0
    for i in range(logits.shape[0]):
        n = int(lens[i])
        loss = loss + F.cross_entropy(logits[i, :n], tgt[i, :n])
    return loss / logits.shape[0]


def nll_sum(logp, tgt, lens):
    out = []
    for i in range(logp.shape[0]):
        out.append(F.nll_loss(logp[i, :lens[i]], tgt[i, :lens[i]], reduction="sum"))
    return torch.stack(out)


def ce_none(logits, tgt, lens):
    out = []
    for i in range(logits.shape[0]):
        out.append(F.cross_entropy(logits[i, :lens[i]], tgt[i, :lens[i]], reduction="none").mean())
    return torch.stack(out)


def _sequences(n=5, t=7, c=4, pad=-1, nan=False):
    logits = torch.randn(n, t, c)
    lens = torch.randint(1, t + 1, (n,))
    tgt = torch.randint(0, c, (n, t))
    pos = torch.arange(t)[None] >= lens[:, None]
    tgt[pos] = pad                        # (padding targets out of range: never read)
    if nan:
        logits[pos] = float("nan")        # (NaN scores in the padding: no NaN gradient)
    return logits, tgt, lens


@pytest.mark.parametrize("nan", [False, True])
def test_cross_entropy_of_spans_with_gradients(nan):
    fast = _compare(ce_per_sequence, lambda: _sequences(nan=nan), grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_nll_loss_of_spans_summed_with_ignored_targets_inside():
    def make():
        logp, tgt, lens = _sequences(pad=99)
        tgt[:, 0] = -100                  # (ignore_index inside each span: no loss there, as in the loop)
        return torch.log_softmax(logp, -1), tgt, lens
    fast = _compare(nll_sum, make, grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_cross_entropy_of_empty_spans_is_nan_as_in_the_loop():
    def make():
        logits, tgt, lens = _sequences()
        lens[1] = 0
        return logits, tgt, lens
    fast = _compare(ce_per_sequence, make, grad=(0,))
    assert ran_modes(fast) == {"batched"}
    assert torch.isnan(fast(*make()))


def test_a_target_out_of_range_inside_a_span_raises_as_the_loop():
    logits, tgt, lens = _sequences(pad=0)
    tgt[2, 0] = 9
    _same_outcome(ce_per_sequence, (logits, tgt, lens))


def test_unreduced_losses_of_spans_keep_the_loop():
    fast = _compare(ce_none, lambda: _sequences(pad=0), grad=(0,))
    assert ran_modes(fast) == set()


def half_means(a, lens):
    res = []
    for i in range(a.shape[0]):
        res.append((a[i, :lens[i]] * 2).mean())
    return torch.stack(res)


def plain_half_means(a, lens):
    res = []
    for i in range(a.shape[0]):
        res.append(a[i, :lens[i]].mean())
    return torch.stack(res)


@pytest.mark.parametrize("fn", [half_means, plain_half_means])
def test_a_half_precision_mean_is_rounded_once_as_the_loops(fn):
    """torch's float16 mean divides the float32 sum and rounds once; a float16 sum divided
    rounds twice (110.0 against the loop's 109.9375)."""
    def make():
        return (torch.randn(4, 300) * 100).half(), torch.tensor([250, 300, 7, 123])
    fast = autovec(fn)
    for seed in range(4):
        torch.manual_seed(seed)
        a, lens = make()
        want = fn(a, lens)
        got = fast(a, lens)
        assert got.dtype == torch.float16
        assert torch.equal(got, want), (got, want)
    assert ran_modes(fast) == {"batched"}


def clamped(a, lens):
    res = []
    for i in range(a.shape[0]):
        res.append(a[i, :lens[i]].clamp(min=0).mean())
    return torch.stack(res)


def function_spelling(a, b, lens):
    res = []
    for i in range(a.shape[0]):
        res.append(torch.mean((a[i, :lens[i]] - b[i, :lens[i]]) ** 2))
    return torch.stack(res)


def relu_in_place(a, lens):
    res = []
    for i in range(a.shape[0]):
        res.append(F.relu(a[i, :lens[i]], True).sum())
    return torch.stack(res), a


def test_an_elementwise_method_with_keyword_options():
    fast = _compare(clamped, lambda: (torch.randn(5, 6), _lens(5, 6, 1)), grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_the_function_spelling_of_a_reduction_of_arithmetic():
    fast = _compare(function_spelling, lambda: (torch.randn(5, 6), torch.randn(5, 6), _lens(5, 6, 1)), grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_an_in_place_function_is_never_run_on_the_whole_tensor():
    fast = autovec(relu_in_place)
    for seed in range(3):
        torch.manual_seed(seed)
        a, lens = torch.randn(5, 6), _lens(5, 6, 1)
        (w, wa), (g, ga) = relu_in_place(a.clone(), lens), fast(a.clone(), lens)
        torch.testing.assert_close(g, w)
        torch.testing.assert_close(ga, wa, rtol=0, atol=0)


def mse_per_sequence(a, b, lens):
    loss = 0.0
    for i in range(a.shape[0]):
        n = int(lens[i])
        loss = loss + F.mse_loss(a[i, :n], b[i, :n])
    return loss


def losses_summed(a, b, lens):
    out = []
    for i in range(a.shape[0]):
        out.append(F.smooth_l1_loss(a[i, :lens[i]], b[i, :lens[i]], reduction="sum", beta=0.5)
                   + F.l1_loss(a[i, :lens[i]], b[i, :lens[i]]))
    return torch.stack(out)


def bce_spans(logits, target, lens):
    out = []
    for i in range(logits.shape[0]):
        out.append(F.binary_cross_entropy_with_logits(logits[i, :lens[i]], target[i, :lens[i]]))
    return torch.stack(out)


def mse_broadcast(a, b, lens):
    out = []
    for i in range(a.shape[0]):
        out.append(F.mse_loss(a[i, :lens[i]], b[i, :lens[i], :1]))
    return torch.stack(out)


def test_an_elementwise_loss_of_spans_with_gradients_and_nan_padding():
    def make():
        a, b, lens = torch.randn(5, 7, 2), torch.randn(5, 7, 2), _lens(5, 7, 1)
        pad = torch.arange(7)[None] >= lens.clamp(max=7)[:, None]
        a[pad] = float("nan")       # (NaN outside the spans: no NaN value, no NaN gradient)
        return a, b, lens
    fast = _compare(mse_per_sequence, make, grad=(0, 1))
    assert ran_modes(fast) == {"batched"}


def test_losses_with_options_and_sums():
    fast = _compare(losses_summed, lambda: (torch.randn(5, 6), torch.randn(5, 6), _lens(5, 6, 1)), grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_binary_cross_entropy_of_spans():
    fast = _compare(bce_spans, lambda: (torch.randn(5, 6), torch.rand(5, 6), _lens(5, 6, 1)), grad=(0,))
    assert ran_modes(fast) == {"batched"}


def test_a_loss_of_spans_of_other_shapes_keeps_the_loop():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # (mse_loss warns of the broadcast, in the loop)
        fast = _compare(mse_broadcast, lambda: (torch.randn(4, 6, 3), torch.randn(4, 6, 3), _lens(4, 6, 1)))
    assert ran_modes(fast) == set()


def mse_unreduced(a, b, lens):
    out = []
    for i in range(a.shape[0]):
        out.append(F.mse_loss(a[i, :lens[i]], b[i, :lens[i]], reduction="none").sum())
    return torch.stack(out)


def test_an_unreduced_loss_of_spans_keeps_the_loop():
    fast = _compare(mse_unreduced, lambda: (torch.randn(5, 6), torch.randn(5, 6), _lens(5, 6, 1)))
    assert ran_modes(fast) == set()


def gated(a, b, lens):
    out = []
    for i in range(a.shape[0]):
        out.append((torch.sigmoid(a[i, :lens[i]]) * b[i, :lens[i]]).sum())
    return torch.stack(out)


def test_a_function_of_a_span_beside_another_with_gradients():
    # (`torch.sigmoid(a[s:e])` holds a span: no value beside them whose gradient could leak)
    fast = _compare(gated, lambda: (torch.randn(5, 6), torch.randn(5, 6), _lens(5, 6, 1)), grad=(0, 1))
    assert ran_modes(fast) == {"batched"}


def test_a_weight_that_requires_grad_beside_nan_padding_keeps_the_loop():
    # (the weight's gradient sums over every position of the whole tensor: NaN padding times a
    # zero gradient would reach it)
    def make():
        h, lens = torch.randn(5, 6, 3), _lens(5, 6, 1)
        h[torch.arange(6)[None] >= lens.clamp(max=6)[:, None]] = float("nan")
        return h, torch.randn(3), lens
    fast = _compare(weighted, make, grad=(0, 1))
    assert ran_modes(fast) == set()


from torch.nn.functional import cross_entropy, mse_loss  # noqa: E402


def bare_names(pred, y, logits, t, lens):
    loss = 0.0
    for i in range(pred.shape[0]):
        n = int(lens[i])
        loss = loss + mse_loss(pred[i, :n], y[i, :n]) + cross_entropy(logits[i, :n], t[i, :n])
    return loss


def test_losses_imported_by_their_own_names():
    def make():
        logits, t, lens = _sequences(n=5, t=7, c=3, pad=0)
        return torch.randn(5, 7), torch.randn(5, 7), logits, t, lens
    fast = _compare(bare_names, make, grad=(0, 2))
    assert ran_modes(fast) == {"batched"}
