"""Reads of a tensor the loop writes, at elements only later iterations write (anti-dependences):
`for t in range(T - 1, 0, -1): y[t] -= a * y[t - 1]` (pre-emphasis), `x[i] = x[i + 1] - x[i]`
counting up. Every iteration reads what the first one saw, which is what the batch reads before
it stores (analysis.loops._ahead_read). Checked against the loop, in the steady state too; reads
an earlier iteration wrote (counting the other way, Python's index from the end) keep the loop."""
import pytest
import torch

from autovec import autovec, explain
from conftest import check_loop, raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def preemphasis(signal, coeff):
    y = signal.clone()
    for t in range(len(y) - 1, 0, -1):
        y[t] -= coeff * y[t - 1]
    return y


def forward_difference(x):
    for i in range(x.shape[0] - 1):
        x[i] = x[i + 1] - x[i]
    return x


def backward_difference(x):
    for i in reversed(range(1, x.shape[0])):
        x[i] = x[i] - x[i - 1]
    return x


def rows_blend(y, w):
    for t in range(y.shape[0] - 1, 1, -2):
        y[t] = y[t] * w + torch.tanh(y[t - 1]) - y[t - 2]       # rows, step -2: reads later or never written
    return y


def add_next(x):
    for i in range(x.shape[0] - 1):
        x[i] += x[i + 1]                # the update's value is the read itself (stop 46; probeL)
    return x


def scale_by_previous(x):
    for i in range(x.shape[0] - 1, 0, -1):
        x[i] *= x[i - 1]
    return x


@pytest.mark.parametrize("fn, make", [
    (add_next, lambda g: (torch.randn(50, 3, generator=g),)),
    (add_next, lambda g: (torch.randn(3, 40, generator=g).t(),)),
    (add_next, lambda g: (torch.randint(-100, 100, (60,), generator=g, dtype=torch.int8),)),
    (scale_by_previous, lambda g: (torch.randn(30, 2, generator=g),)),
    (preemphasis, lambda g: (torch.randn(300, generator=g), 0.97)),
    (forward_difference, lambda g: (torch.randn(50, 3, generator=g),)),
    (backward_difference, lambda g: (torch.randn(40, generator=g),)),
    (rows_blend, lambda g: (torch.randn(31, 4, generator=g), 0.5)),
])
def test_reads_only_later_iterations_write_vectorize(fn, make):
    g = torch.Generator().manual_seed(5)
    args = make(g)
    assert explain(fn, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args]).path == "vectorized"
    fast = autovec(fn)
    for _ in range(4):              # (the steady state: lanes and the express)
        a1 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        a2 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        want, got = fn(*a1), fast(*a2)
        torch.testing.assert_close(got, want)
        for u, v in zip(a1, a2):
            if isinstance(u, torch.Tensor):
                assert torch.equal(u, v)
    assert fast._autovec_state.runtime.ran


def test_gradients_through_a_read_ahead_are_the_loops():
    # (under autograd such loops run as written: a later write into an element an operation
    # saved makes the loop's backward raise, which a batch that reads first would not)
    g = torch.Generator().manual_seed(6)
    assert check_loop(preemphasis, torch.randn(64, generator=g), 0.9, grad=(0,)) == set()
    x = torch.randn(64, generator=g)
    assert check_loop(preemphasis, x, 0.9) == {"broadcast"} or check_loop(preemphasis, x, 0.9)


def saved_by_sin(s):
    y = s.clone()
    for t in range(y.shape[0] - 1, 0, -1):
        y[t] = y[t] - torch.sin(y[t - 1])       # sin saves y[t - 1], which the next iteration writes
    return y


def scaled_by(s, a):
    y = s.clone()
    for t in range(y.shape[0] - 1, 0, -1):
        y[t] -= a * y[t - 1]                     # a requires grad: the product saves y[t - 1]
    return y


def test_a_backward_the_loop_raises_raises_too():
    g = torch.Generator().manual_seed(7)
    for fn, make in ((saved_by_sin, lambda: (torch.randn(20, generator=g).requires_grad_(),)),
                     (scaled_by, lambda: (torch.randn(20, generator=g), torch.tensor(0.9, requires_grad=True)))):
        args = make()
        fast = autovec(fn)
        for f in (fn, fast):
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                f(*args).sum().backward()
        with torch.no_grad():
            torch.testing.assert_close(fast(*args), fn(*args))
        assert explain(fn, *[a.detach() for a in args]).path == "vectorized"


def preemphasis_to_zero(signal, coeff):
    y = signal.clone()
    for t in range(len(y) - 1, -1, -1):
        y[t] -= coeff * y[t - 1]          # t = 0 reads y[-1], which the first iteration wrote
    return y


def test_python_index_from_the_end_keeps_the_loop():
    x = torch.randn(30)
    fast = autovec(preemphasis_to_zero)
    for _ in range(3):
        torch.testing.assert_close(fast(x, 0.97), preemphasis_to_zero(x, 0.97))
    assert not fast._autovec_state.runtime.ran       # every call ran the loop


def wrong_direction(x):
    for i in range(x.shape[0] - 1, 0, -1):
        x[i - 1] = x[i] * 2 + x[i - 1]    # reads x[i], which the previous iteration wrote
    return x


def kept_view(x):
    out = []
    for i in range(x.shape[0] - 1):
        v = x[i + 1]                       # a view of a row a later iteration writes
        x[i] = x[i] * 3
        out.append(v)
    return out


def copy_ahead(x):
    for i in range(x.shape[0] - 2):
        x[i] = x[i + 2]                    # the read stored as it is: the batch would copy x into itself
    return x


def step_unknown(x, s):
    for i in range(x.shape[0] - 1, 0, s):
        x[i] = x[i] + x[i - 1]
    return x


def test_reads_an_earlier_iteration_wrote_or_views_kept_keep_the_loop():
    x = torch.randn(12, 2)
    for fn, args in ((wrong_direction, (x,)), (kept_view, (x,)), (copy_ahead, (x,)), (step_unknown, (x, -1))):
        assert explain(fn, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args]).path == "python"
        a1 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        a2 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        want, got = fn(*a1), autovec(fn)(*a2)
        if isinstance(want, list):
            assert all(torch.equal(u, v) for u, v in zip(want, got))
        else:
            torch.testing.assert_close(got, want)


def blend_into(out, x):
    for t in range(x.shape[0] - 1, 0, -1):
        out[t] = x[t] - 0.5 * x[t - 1]
    return out


def test_an_output_that_is_the_read_tensor_under_another_name_keeps_the_loop():
    x = torch.randn(20)
    fast = autovec(blend_into)
    a, b = x.clone(), x.clone()
    torch.testing.assert_close(fast(a, a), blend_into(b, b))           # the same tensor twice
    c, d = x.clone(), x.clone()
    torch.testing.assert_close(fast(c[1:], c[:-1]), blend_into(d[1:], d[:-1]))   # overlapping views
    torch.testing.assert_close(c, d)
    assert not fast._autovec_state.runtime.ran


def test_an_index_past_the_end_raises_as_the_loop():
    def ahead_past(x):
        for i in range(x.shape[0]):
            x[i] = x[i + 1] * 2
        return x
    raises_as_loop(IndexError, ahead_past, torch.randn(6))
