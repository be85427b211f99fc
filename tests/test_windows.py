"""Sliding windows: a loop-invariant tensor sliced by per-iteration bounds of one width
(`x[i:i + w]`) is one batch of x.unfold's rows in a batched body (batching._Helpers.window)."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def moving_mean(x, k):
    out = torch.empty(x.shape[0] - k + 1)
    for i in range(x.shape[0] - k + 1):
        out[i] = x[i:i + k].mean()
    return out


def trailing_sum(x):
    out = []
    for t in range(2, x.shape[0]):
        out.append(x[t - 2:t + 1].sum(0))
    return torch.stack(out)


def channel_window(x):
    out = torch.empty(x.shape[0] - 3, x.shape[1])
    for t in range(x.shape[0] - 3):
        out[t] = x[t:t + 4, :, 0].max(0).values
    return out


def strided_starts(x, w):
    res = []
    for i in range(0, x.shape[0] - w + 1, 2):
        res.append((x[i:i + w] * w).norm())
    return torch.stack(res)


def picked_starts(x, starts):
    out = torch.zeros(starts.shape[0])
    for k in range(starts.shape[0]):
        s = starts[k]
        out[k] = x[s:s + 3].sum()
    return out


def dot_windows(x, f):
    out = torch.empty(x.shape[0] - f.shape[0] + 1)
    for i in range(out.shape[0]):
        out[i] = torch.dot(x[i:i + f.shape[0]], f)
    return out


CASES = [
    (moving_mean, lambda: (torch.randn(200), 5)),
    (trailing_sum, lambda: (torch.randn(50, 3),)),
    (channel_window, lambda: (torch.randn(40, 6, 2),)),
    (strided_starts, lambda: (torch.randn(61, 2), 4)),
    (picked_starts, lambda: (torch.randn(30), torch.randint(0, 28, (17,)))),
    (dot_windows, lambda: (torch.randn(100), torch.randn(7))),
]


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_windows_are_batched_and_equal_to_the_loop(fn, make):
    args = make()
    f = autovec(fn)
    torch.testing.assert_close(f(*args), fn(*args))
    assert _ran(f) == {"batched"}
    assert explain(f, *args).path == "vectorized"
    assert_equivalent(fn, *args, trials=3)


def test_gradients_of_overlapping_windows_add_up():
    x = torch.randn(60, 3, requires_grad=True)
    assert_equivalent(trailing_sum, x, grad=True)
    f = autovec(trailing_sum)
    f(x).square().sum().backward()
    assert _ran(f) == {"batched"}


def clipped(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i:i + 3].sum())     # the last two windows are shorter: Python clips the slice
    return out


def from_the_end(x, starts):
    out = []
    for k in range(starts.shape[0]):
        out.append(x[starts[k]:starts[k] + 2].sum())   # a negative start counts from the end
    return torch.stack(out)


def growing(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[0:i + 1].sum())     # a prefix: windows of several widths
    return torch.stack(out)


@pytest.mark.parametrize("fn, args", [
    (clipped, (torch.randn(20),)),
    (from_the_end, (torch.randn(10), torch.tensor([0, -3, 2]))),
    (growing, (torch.randn(12),)),
])
def test_clipped_negative_or_ragged_windows_keep_the_loop(fn, args):
    f = autovec(fn)
    got, want = f(*args), fn(*args)
    assert not _ran(f)
    assert_equivalent(fn, *args)
    torch.testing.assert_close(torch.stack(got) if isinstance(got, list) else got,
                               torch.stack(want) if isinstance(want, list) else want)


def test_float_bounds_raise_as_the_loop():
    def by_floats(x, s):
        out = []
        for i in range(s.shape[0]):
            out.append(x[s[i]:s[i] + 2].sum())
        return out

    x, s = torch.randn(10), torch.tensor([0.0, 1.0])
    with pytest.raises(TypeError) as want:
        by_floats(x, s)
    with pytest.raises(TypeError) as got:
        autovec(by_floats)(x, s)
    assert str(got.value) == str(want.value)


def by_bounds(x, lo, hi):
    out = []
    for k in range(lo.shape[0]):
        out.append(x[lo[k]:hi[k]].sum(0))
    return torch.stack(out)


@pytest.mark.parametrize("lo, hi", [
    ([0, -3, 2, 5], [2, -1, 4, 7]),     # a negative start counts from the end in Python
    ([0, 4, 2, 5], [2, 7, 4, 7]),       # one window wider than the others
    ([0, 3, 2, 9], [2, 5, 4, 11]),      # one past the end: Python clips it
])
def test_windows_the_batch_cannot_take_keep_the_loop_after_a_vectorized_call(lo, hi):
    """The batched body is built and trusted on a first call with windows it can take; later
    calls with the same signature run it at once, so the helper itself must refuse the rest."""
    x = torch.randn(10, 2)
    f = autovec(by_bounds)
    good = torch.tensor([0, 3, 2, 5]), torch.tensor([2, 5, 4, 7])
    torch.testing.assert_close(f(x, *good), by_bounds(x, *good))
    assert _ran(f) == {"batched"}
    lo, hi = torch.tensor(lo), torch.tensor(hi)
    torch.testing.assert_close(f(x, lo, hi), by_bounds(x, lo, hi))
    assert not _ran(f)


def first_windows(x, k, n, s):
    out = []
    for i in range(s, n):
        out.append(x[i - 2:i + k].sum(0))
    return torch.stack(out)


@pytest.mark.parametrize("n, s", [(14, 2), (12, 0), (3, 1)])
def test_windows_of_the_loop_index_past_the_ends_keep_the_loop(n, s):
    """`x[i - 2:i + k]` of the loop's own index (the helper reads the windows from the ends of
    the range, window_at): trusted on a first call, then given a range that starts a window
    before row 0 (Python counts it from the end: an empty slice) or ends one past the last row
    (Python clips it)."""
    x = torch.randn(14, 3)
    f = autovec(first_windows)
    torch.testing.assert_close(f(x, 2, 12, 2), first_windows(x, 2, 12, 2))
    assert _ran(f) == {"batched"}
    torch.testing.assert_close(f(x, 2, n, s), first_windows(x, 2, n, s))
    assert bool(_ran(f)) == (n <= 12 and s >= 2)


def backwards(x):
    out = []
    for i in reversed(range(x.shape[0] - 2)):
        out.append(x[i:i + 3].prod())
    return torch.stack(out)


def doubled(x):
    out = []
    for i in range(x.shape[0] // 2 - 1):
        j = i * 2                         # not the loop's own index: every start is read
        out.append(x[j:j + 2].sum())
    return torch.stack(out)


def fractional(x):
    out = []
    for i in range(x.shape[0] - 3):
        out.append(x[i:i + 2.5].sum())
    return out


@pytest.mark.parametrize("fn", [backwards, doubled])
def test_reversed_and_computed_starts_read_every_start(fn):
    x = torch.randn(21)
    f = autovec(fn)
    torch.testing.assert_close(f(x), fn(x))
    assert _ran(f) == {"batched"}
    assert_equivalent(fn, x, trials=2)


def test_a_fractional_width_raises_as_the_loop():
    x = torch.randn(9)
    with pytest.raises(TypeError) as want:
        fractional(x)
    with pytest.raises(TypeError) as got:
        autovec(fractional)(x)
    assert str(got.value) == str(want.value)


def column_windows(x, k):
    out = torch.empty(x.shape[1] - k + 1, x.shape[0])
    for j in range(x.shape[1] - k + 1):
        out[j] = x[:, j:j + k].sum(1)
    return out


def time_windows(x, w):
    feats = []
    for t in range(x.shape[2] - w + 1):
        feats.append(x[:, :, t:t + w, 0].mean(-1))
    return torch.stack(feats, dim=-1)


@pytest.mark.parametrize("fn, args", [(column_windows, (torch.randn(5, 30), 4)),
                                      (time_windows, (torch.randn(2, 3, 25, 2), 6))])
def test_windows_along_a_later_dimension(fn, args):
    f = autovec(fn)
    torch.testing.assert_close(f(*args), fn(*args))
    assert _ran(f) == {"batched"}
    assert_equivalent(fn, *args)


def col_by_bounds(x, lo):
    out = []
    for k in range(lo.shape[0]):
        out.append(x[:, lo[k]:lo[k] + 3] * 2)
    return torch.stack(out)


def test_windows_along_a_later_dimension_in_any_order():
    x, lo = torch.randn(4, 12), torch.tensor([5, 0, 9, 2, 2])
    f = autovec(col_by_bounds)
    torch.testing.assert_close(f(x, lo), col_by_bounds(x, lo))
    assert _ran(f) == {"batched"}
    bad = torch.tensor([5, 0, 10, 2, 2])     # 10:13 is clipped to two columns by Python
    with pytest.raises(RuntimeError):
        col_by_bounds(x, bad)                 # (torch.stack of windows of several widths)
    with pytest.raises(RuntimeError):
        f(x, bad)


def test_a_call_with_windows_past_the_end_does_not_stop_later_calls_from_vectorizing():
    """Windows the batch cannot take refuse those values alone: the loop runs that call (vmap,
    which cannot slice by data either, is not tried), and the next call is batched again."""
    x = torch.randn(14, 3)
    f = autovec(first_windows)
    torch.testing.assert_close(f(x, 2, 14, 2), first_windows(x, 2, 14, 2))    # one window clipped
    assert not _ran(f)
    torch.testing.assert_close(f(x, 2, 12, 2), first_windows(x, 2, 12, 2))
    assert _ran(f) == {"batched"}


def pool_last_dim(x, k):
    out = []
    for i in range(0, x.shape[-1] - k + 1, k):
        out.append(x[..., i:i + k].max(dim=-1).values)
    return torch.stack(out, dim=-1)


def ellipsis_then_index(x, k):
    out = []
    for t in range(x.shape[-2] - k + 1):
        out.append(x[..., t:t + k, 0].sum(-1))
    return torch.stack(out)


@pytest.mark.parametrize("fn, make", [
    (pool_last_dim, lambda: (torch.randn(4, 32), 4)),
    (pool_last_dim, lambda: (torch.randn(2, 3, 30), 5)),        # the Ellipsis covers two dimensions
    (pool_last_dim, lambda: (torch.randn(31), 3)),               # and none (31 = 10 windows + 1 left over)
    (ellipsis_then_index, lambda: (torch.randn(3, 9, 2), 3)),
])
def test_windows_after_an_ellipsis(fn, make):
    args = make()
    assert_equivalent(fn, *args)
    fast = autovec(fn)
    for _ in range(2):
        args = make()
        assert torch.equal(fast(*args), fn(*args))
    assert _ran(fast) == {"batched"}


def test_an_ellipsis_window_past_the_end_runs_the_loop():
    def overrun(x, k):
        out = []
        for i in range(0, x.shape[-1], k):          # the last window is cut short by Python's slice
            out.append(x[..., i:i + k].sum(-1))
        return out
    x = torch.randn(2, 10)
    got, want = autovec(overrun)(x, 4), overrun(x, 4)
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


def frames(signal, frame_len, hop, window):
    n_frames = 1 + (signal.shape[0] - frame_len) // hop
    out = torch.empty(n_frames, frame_len)
    for i in range(n_frames):
        out[i] = signal[i * hop: i * hop + frame_len] * window
    return out


def frame_views(signal, frame_len, hop):
    out = []
    for i in range(1 + (signal.shape[0] - 1 - frame_len) // hop):
        out.append(signal[i * hop + 1: i * hop + 1 + frame_len])
    return out


@pytest.mark.parametrize("hop", [1, 3, 8, 20])
def test_frames_at_a_hop_are_views_of_the_signal(hop):
    x, w = torch.randn(101), torch.hann_window(16)
    f = autovec(frames)
    torch.testing.assert_close(f(x, 16, hop, w), frames(x, 16, hop, w), rtol=0, atol=0)
    # kept as views: the batch is the signal's own memory (every hop-th window of x.unfold)
    g = autovec(frame_views)
    got, want = g(x, 16, hop), frame_views(x, 16, hop)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert torch.equal(a, b) and a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert explain(g, x, 16, hop).path == "vectorized"
