"""Aliasing edges found by an adversarial probe (stop 21): the elements of a returned list were
views of one batch (shared memory and version counter: `detach_()` of one raised, an in-place
change of one broke backward through another), and arguments overlapping in memory without
sharing a storage (numpy, frombuffer) were taken for separate tensors."""
import numpy as np
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def doubled_list(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    return out


def rows_list(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i])
    return out


def test_list_elements_are_tensors_of_their_own():
    x = torch.randn(8, 4)
    fast = autovec(doubled_list)
    for _ in range(3):
        got = fast(x)
        assert explain(doubled_list, x).path == "vectorized"
        assert all(t._base is None for t in got)
        assert len({t.untyped_storage().data_ptr() for t in got}) == len(got)
        got[0].detach_()                  # a view of a batch raises here
        got[1].mul_(0)
        torch.testing.assert_close(got[2], x[2] * 2)
        torch.testing.assert_close(got[1], torch.zeros(4))


def test_backward_through_one_element_after_another_changed_in_place():
    x0 = torch.arange(32.0).reshape(8, 4) / 10
    fast = autovec(doubled_list)
    for _ in range(3):
        a, b = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        want, got = doubled_list(a), fast(b)
        zw, zg = (want[1] ** 2).sum(), (got[1] ** 2).sum()
        want[0].mul_(3)
        got[0].mul_(3)                    # one version counter for the batch made backward raise
        (zw + want[0].sum()).backward()
        (zg + got[0].sum()).backward()
        torch.testing.assert_close(b.grad, a.grad)


def test_list_of_rows_still_sees_writes_into_the_input():
    x = torch.randn(8, 4)
    got = autovec(rows_list)(x)
    x[3] = 7.0
    torch.testing.assert_close(got[3], torch.full((4,), 7.0))


def chained(x, y):
    for i in range(x.shape[0]):
        x[i] = y[i] * 2 + 1
    return x


def _overlapping(kind, n):
    arr = np.arange((n + 1) * 4, dtype=np.float32) / 100
    if kind == "numpy":
        return torch.from_numpy(arr[4:].reshape(n, 4)), torch.from_numpy(arr[:-4].reshape(n, 4))
    buf = bytearray(arr.tobytes())
    return (torch.frombuffer(buf, dtype=torch.float32, offset=16).view(n, 4),
            torch.frombuffer(buf, dtype=torch.float32, count=n * 4).view(n, 4))


@pytest.mark.parametrize("kind", ["numpy", "frombuffer"])
def test_arguments_overlapping_in_memory_without_sharing_a_storage(kind):
    """y[i + 1] is x[i]: each row the loop writes is read by the next iteration."""
    fast = autovec(chained)
    for _ in range(4):
        want = chained(*_overlapping(kind, 8))
        got = fast(*_overlapping(kind, 8))
        torch.testing.assert_close(got, want)


def test_separate_numpy_arrays_still_vectorize():
    x = torch.from_numpy(np.zeros((8, 4), dtype=np.float32))
    y = torch.from_numpy(np.ones((8, 4), dtype=np.float32))
    torch.testing.assert_close(autovec(chained)(x.clone(), y), chained(x.clone(), y))
    assert explain(chained, x.clone(), y).path == "vectorized"


# (stop 22, the tensor-kinds probe) an inference tensor written outside inference mode: torch
# writes, then raises, so the loop leaves one row written where a batch wrote all of them

def fill_rows(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] + 1
    return out


def add_rows(x, out):
    for i in range(x.shape[0]):
        out[i] += x[i]
    return out


def prefix_rows(acc):
    for i in range(1, acc.shape[0]):
        acc[i] = acc[i - 1] + acc[i]
    return acc


@pytest.mark.parametrize("fn", [fill_rows, add_rows, prefix_rows])
def test_inference_tensor_written_outside_inference_mode(fn, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.rand(40, 3) + 1
    args = (lambda out: (out,)) if fn is prefix_rows else (lambda out: (x, out))
    fast = autovec(fn)
    for _ in range(3):
        fast(*args(torch.ones(40, 3)))          # the steady state (a lane) for plain tensors
    for _ in range(3):
        kept = []
        for f in (fn, fast):
            with torch.inference_mode():
                out = torch.ones(40, 3)
            with pytest.raises(RuntimeError, match="[Ii]nference"):
                f(*args(out))
            kept.append(out)
        assert torch.equal(kept[1], kept[0])
    with torch.inference_mode():
        out = torch.ones(40, 3)
        got, want = fast(*args(out.clone())), fn(*args(out.clone()))
        assert torch.allclose(got, want)
        assert explain(autovec(fn), *args(out.clone())).path == "vectorized"    # (inside the mode: allowed)


# (stop 22, the chunking probe) fission: a value computed ahead of the loop that stays, a view of
# the input in the loop (`v = x[t].view(-1)`), came back as a copy (a write through it after the
# loop did not reach `x`)

def fission_view(x, W, h):
    for t in range(x.shape[0]):
        v = x[t].view(-1)
        h = torch.tanh(W @ h + v)
    v.zero_()
    return h, x


def fission_new(x, W, h):
    for t in range(x.shape[0]):
        v = x[t] * 1
        h = torch.tanh(W @ h + v)
    v.zero_()
    return h, x


@pytest.mark.parametrize("fn", [fission_view, fission_new])
def test_fission_keeps_views_of_the_input(fn):
    fast = autovec(fn)
    for _ in range(3):
        x, W = torch.randn(8, 4), torch.randn(4, 4)
        (hw, xw), (hg, xg) = fn(x.clone(), W, torch.zeros(4)), fast(x.clone(), W, torch.zeros(4))
        torch.testing.assert_close(hg, hw)
        assert torch.equal(xg, xw)
    assert explain(fast, torch.randn(8, 4), torch.randn(4, 4), torch.zeros(4)).path == "vectorized"


class _Cached(torch.nn.Module):
    """A module keeping a tensor as a plain attribute (no buffer), which a method reads."""

    def __init__(self, n):
        super().__init__()
        self.cache = torch.zeros(n, 3)
        self.lin = torch.nn.Linear(3, 3)

    def first(self, i):
        return self.cache[0] + 0 * i


def write_then_ask_the_module(m, x, out):
    res = []
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
        res.append(m.first(i) + x[i])
    return torch.stack(res)


def test_a_module_attribute_written_under_another_name_keeps_the_loop():
    # (the aliasing check reached a module's parameters and buffers only: the batch read the
    # attribute's first row before any write, the loop after the first)
    fast = autovec(write_then_ask_the_module)
    for _ in range(3):
        x = torch.randn(5, 3)
        m1, m2 = _Cached(5), _Cached(5)
        want = write_then_ask_the_module(m1, x, m1.cache)
        torch.testing.assert_close(fast(m2, x, m2.cache), want, rtol=0, atol=0)
        torch.testing.assert_close(m2.cache, m1.cache, rtol=0, atol=0)


def into_a_held_tensor(x, d):
    for i in range(x.shape[0] - 1):
        d["res"][i + 1] = x[i] * 2        # (fission: the loop that stays writes what the batch read)
    return x


def into_a_held_list(xs, ll):
    for i in range(len(xs) - 1):
        ll[0][i + 1] = xs[i] * 2
    return xs


def test_a_tensor_held_in_a_container_and_read_by_the_batch_keeps_the_loop():
    # (`d["res"]` is `x`: each iteration reads the row the one before wrote; the fission's batch
    # read every row first; probeG, wrong before today)
    fast = autovec(into_a_held_tensor)
    f2 = autovec(into_a_held_list)
    for seed in range(3):
        torch.manual_seed(seed)
        a = torch.randn(5, 2)
        b = a.clone()
        torch.testing.assert_close(fast(b, {"res": b}), into_a_held_tensor(a, {"res": a}), rtol=0, atol=0)
        xs = [torch.randn(2) for _ in range(5)]
        ys = [t.clone() for t in xs]
        for p, q in zip(into_a_held_list(xs, [xs]), f2(ys, [ys])):
            torch.testing.assert_close(q, p, rtol=0, atol=0)


def write_through_a_row_name(x, b):
    out = []
    for i in range(x.shape[0]):
        r = x[i]
        r[r > b] = b.max()           # (a write into x, through the name)
        out.append(x[i] * 1)         # (reads what it wrote)
    return torch.stack(out), x


def test_fission_keeps_a_write_through_a_name_for_a_view():
    # (fission took `r`, bound in the loop, for a new tensor: the batch computed every `x[i] * 1`
    # before the loop that writes x through r; the fuzzer, lost/stop38 seed 3831; wrong before today)
    fast = autovec(write_through_a_row_name)
    for seed in range(3):
        torch.manual_seed(seed)
        a, w = torch.randn(4, 5), torch.randn(5)
        b = a.clone()
        want, got = write_through_a_row_name(a, w), fast(b, w)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    reason = explain(write_through_a_row_name, torch.randn(4, 5), torch.randn(5)).loops[0].reason
    assert "may be a view of what the batched part reads" in reason


# ----------------------------------------------------------------------------- torch's own functions

import torch.nn.functional as F     # noqa: E402


def weighted_bce_in_place(logits, y, w):
    loss = torch.zeros(())
    for i in range(logits.shape[0]):
        loss += w[i] * F.binary_cross_entropy_with_logits(logits[i], y[i])
    return loss / w.sum()


@pytest.mark.parametrize("grad", [False, True])
def test_a_torch_function_called_beside_an_in_place_total_vectorizes(grad):
    """The aliasing check looks into what a called function reads; a function of torch's own
    reads torch's module state (past the check's depth, through handle_torch_function), which
    holds none of the program's tensors: it no longer keeps the loop."""
    torch.manual_seed(0)
    logits, y, w = torch.randn(40), (torch.rand(40) < 0.5).float(), torch.rand(40)
    a, b = logits.clone().requires_grad_(grad), logits.clone().requires_grad_(grad)
    want = weighted_bce_in_place(a, y, w)
    fast = autovec(weighted_bce_in_place)
    got = fast(b, y, w)
    torch.testing.assert_close(got, want)
    if grad:
        want.backward()
        got.backward()
        torch.testing.assert_close(b.grad, a.grad)
    assert explain(fast, logits.clone().requires_grad_(grad), y, w).path == "vectorized"


_SHARED = torch.zeros(6)


@torch.no_grad()
def _peek(v):
    return v * 2 + _SHARED[0]      # the row the loop below writes first: read by a helper torch wraps


def writes_what_a_wrapped_helper_reads(x):
    out = _SHARED
    for i in range(x.shape[0]):
        out[i] = _peek(x[i])
    return out


def test_a_helper_wrapped_by_torch_is_still_looked_into():
    """torch.no_grad() as a decorator wraps the helper in a function of torch's own: its globals
    are torch's, its closure holds the helper, whose globals hold the tensor the loop writes."""
    x = torch.randn(6)
    _SHARED.zero_()
    want = writes_what_a_wrapped_helper_reads(x).clone()
    _SHARED.zero_()
    got = autovec(writes_what_a_wrapped_helper_reads)(x)
    assert torch.equal(got, want)
    _SHARED.zero_()
    assert explain(writes_what_a_wrapped_helper_reads, x).path == "python"
