"""Python lists (and tuples) of tensors indexed by the loop (`xs[t]`, as collected from an RNN cell
loop or per-layer hidden states): stacked once and batched like a tensor's rows, where every
element has one type, dtype, shape and device and the loop's reads stay inside the list. Anything
else keeps the loop: elements of several shapes, Python's wrap-around at negative indices, an
output that shares memory with an element, a list the loop appends to, elements that require grad
under autograd. Checked against the loop: values, errors, effects on arguments, gradients, path."""
import pytest
import torch

from autovec import autovec, explain
from conftest import raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def project(hs, w, b):
    outs = []
    for t in range(len(hs)):
        outs.append(torch.tanh(hs[t] @ w + b))
    return torch.stack(outs, dim=1)


def deltas(xs):
    out = torch.empty(len(xs) - 1, *xs[0].shape)
    for t in range(len(xs) - 1):
        out[t] = xs[t + 1] - xs[t]
    return out


def weighted_losses(losses, w):
    total = 0.0
    for t in range(len(losses)):
        total = total + losses[t] * w[t]
    return total


def wrapped(xs):
    out = []
    for t in range(len(xs)):
        out.append(xs[t - 1] * 2.0)      # t = 0 reads the last element
    return out


def past_the_end(xs):
    out = []
    for t in range(len(xs) + 1):
        out.append(xs[t] + 1.0)
    return out


def two_lists(xs, ys, out):
    for t in range(len(xs)):
        out[t] = (xs[t] * ys[t]).sum(-1)
    return out


def from_views(out):
    xs = list(out.unbind(0))            # the elements are out's own rows
    for t in range(1, out.shape[0]):
        out[t] = xs[t - 1] + 1.0        # the loop reads the row it wrote one iteration before
    return out


def growing(xs):
    for t in range(len(xs)):
        if t < 3:
            xs.append(xs[t] * 2.0)
    return xs


def growing_always(xs):
    n = len(xs)
    for t in range(n):
        xs.append(xs[t] * 2.0)
    return xs


def _path(fn, *args):
    return explain(autovec(fn), *args).path


def _cl(v):
    return [x.clone() for x in v] if isinstance(v, list) else tuple(x.clone() for x in v)


@pytest.mark.parametrize("kind", [list, tuple])
def test_a_list_of_hidden_states_is_stacked_and_batched(kind):
    hs = kind(torch.randn(4, 6) for _ in range(9))
    w, b = torch.randn(6, 5), torch.randn(5)
    assert _path(project, hs, w, b) == "vectorized"
    torch.testing.assert_close(autovec(project)(hs, w, b), project(hs, w, b))


def test_reads_at_offsets():
    xs = [torch.randn(3, 2) for _ in range(7)]
    assert _path(deltas, xs) == "vectorized"
    torch.testing.assert_close(autovec(deltas)(xs), deltas(xs))


def test_zero_dim_elements_into_a_python_float():
    losses = [torch.randn(()) for _ in range(12)]
    w = torch.rand(12)
    assert _path(weighted_losses, losses, w) == "vectorized"
    torch.testing.assert_close(autovec(weighted_losses)(losses, w), weighted_losses(losses, w))


def test_two_lists_into_an_argument():
    xs, ys = [torch.randn(5, 3) for _ in range(6)], [torch.randn(5, 3) for _ in range(6)]
    out, ref = torch.zeros(6, 5), torch.zeros(6, 5)
    assert autovec(two_lists)(xs, ys, out) is out
    two_lists(xs, ys, ref)
    torch.testing.assert_close(out, ref)
    assert _path(two_lists, xs, ys, torch.zeros(6, 5)) == "vectorized"


@pytest.mark.parametrize("bad", ["shape", "dtype", "type"])
def test_elements_that_differ_keep_the_loop(bad):
    xs = [torch.randn(4, 6) for _ in range(5)]
    if bad == "shape":
        xs[3] = torch.randn(5, 6)      # the loop's rows differ; a stack would fail
    elif bad == "dtype":
        xs[3] = xs[3].double()         # a stack would promote every row
    else:
        xs[3] = xs[3].numpy()          # (not a tensor: the loop decides)
    w, b = torch.randn(6, 5), torch.randn(5)
    if bad == "shape":
        raises_as_loop(RuntimeError, project, xs, w, b)   # the loop's stack raises, and autovec's
        return
    if bad == "type":
        raises_as_loop(TypeError, project, xs, w, b)
        return
    # a float64 element among float32 ones: the loop computes its rows in float64, each stored
    # as float32; a stack would promote every row
    assert _path(deltas, xs) == "python"
    torch.testing.assert_close(autovec(deltas)(xs), deltas(xs), rtol=0, atol=0)


def test_python_wraps_a_negative_index_the_loop_runs():
    xs = [torch.randn(3) for _ in range(4)]
    assert _path(wrapped, xs) == "python"
    for a, b in zip(autovec(wrapped)(xs), wrapped(xs)):
        torch.testing.assert_close(a, b)


def test_a_read_past_the_end_raises_as_the_loop():
    raises_as_loop(IndexError, past_the_end, [torch.randn(3) for _ in range(4)])


def test_an_output_whose_rows_are_the_elements_keeps_the_loop():
    out = torch.randn(6, 3)
    want = from_views(out.clone())
    assert _path(from_views, out.clone()) == "python"
    torch.testing.assert_close(autovec(from_views)(out), want)


@pytest.mark.parametrize("fn", [growing, growing_always])
def test_a_list_the_loop_appends_to(fn):
    xs = [torch.randn(2) for _ in range(5)]
    got, want = autovec(fn)(_cl(xs)), fn(_cl(xs))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_elements_that_require_grad_keep_the_loop_under_autograd_and_not_under_no_grad():
    hs = [torch.randn(4, 6, requires_grad=True) for _ in range(5)]
    w, b = torch.randn(6, 5, requires_grad=True), torch.randn(5)
    assert _path(project, hs, w, b) == "python"
    f = autovec(project)
    f(hs, w, b).sum().backward()
    got = [h.grad.clone() for h in hs] + [w.grad.clone()]
    for h in hs:
        h.grad = None
    w.grad = None
    project(hs, w, b).sum().backward()
    for a, h in zip(got, hs + [w]):
        torch.testing.assert_close(a, h.grad)
    with torch.no_grad():
        assert _path(project, hs, w, b) == "vectorized"
        torch.testing.assert_close(f(hs, w, b), project(hs, w, b))


def test_gradients_flow_to_what_the_elements_were_computed_from():
    # non-leaf elements under grad are refused too (as walked lists): the loop's gradients
    h0 = torch.randn(4, 6, requires_grad=True)
    w, b = torch.randn(6, 5), torch.randn(5)
    autovec(project)([h0 * (t + 1) for t in range(5)], w, b).sum().backward()
    got = h0.grad.clone()
    h0.grad = None
    project([h0 * (t + 1) for t in range(5)], w, b).sum().backward()
    torch.testing.assert_close(got, h0.grad)


def test_in_place_updates_of_elements_keep_their_effects():
    def bump(xs, s):
        for t in range(len(xs)):
            xs[t].mul_(s[t])
        return xs
    xs = [torch.randn(3) for _ in range(4)]
    s = torch.rand(4)
    got, want = autovec(bump)(_cl(xs), s), bump(_cl(xs), s)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_the_list_is_read_again_on_each_call():
    f = autovec(project)
    w, b = torch.randn(6, 5), torch.randn(5)
    for n in (3, 9, 9, 2):
        hs = [torch.randn(4, 6) for _ in range(n)]
        torch.testing.assert_close(f(hs, w, b), project(hs, w, b))


def kept(xs):
    out = []
    for t in range(len(xs)):
        out.append(xs[t])
    return out


def kept_contiguous(xs):
    out = []
    for t in range(len(xs)):
        out.append(xs[t].contiguous())
    return out


def _ident(a):
    return a


def kept_helper(xs):
    out = []
    for t in range(len(xs)):
        out.append(_ident(xs[t]))
    return out


def last_element(xs):
    for t in range(len(xs)):
        y = _ident(xs[t])
    return y


def best_element(xs, s):
    best, arg = -1.0, None
    for t in range(len(xs)):
        if s[t] > best:
            best, arg = s[t], _ident(xs[t])
    return arg


@pytest.mark.parametrize("fn", [kept, kept_contiguous, kept_helper, last_element])
def test_an_element_kept_as_it_is_is_the_element_itself(fn):
    # the loop keeps the caller's tensors (a write through one reaches the list's element); the
    # batch holds a copy of the list, so these keep the loop
    xs, ys = [torch.randn(3) for _ in range(5)], None
    ys = [x.clone() for x in xs]
    got, want = autovec(fn)(xs), fn(ys)
    g0 = got[0] if isinstance(got, list) else got
    w0 = want[0] if isinstance(want, list) else want
    assert (g0 is xs[0] or g0 is xs[-1]) == (w0 is ys[0] or w0 is ys[-1])
    g0.add_(1.0)
    w0.add_(1.0)
    for a, b in zip(xs, ys):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_an_element_kept_as_a_payload_of_the_best_value():
    xs, s = [torch.randn(3) for _ in range(6)], torch.rand(6)
    got, want = autovec(best_element)(xs, s), best_element(xs, s)
    assert got is want


def test_inference_tensors_outside_inference_mode_raise_as_the_loop():
    with torch.inference_mode():
        hs = [torch.randn(4, 6) for _ in range(5)]
    w, b = torch.randn(6, 5, requires_grad=True), torch.randn(5)
    raises_as_loop(RuntimeError, project, hs, w, b)


def walked(hs, w):
    outs = []
    for h in hs:
        outs.append(h @ w)
    return torch.stack(outs)


def test_walked_inference_tensors_outside_inference_mode_raise_as_the_loop():
    with torch.inference_mode():
        hs = [torch.randn(4, 6) for _ in range(5)]
    raises_as_loop(RuntimeError, walked, hs, torch.randn(6, 5, requires_grad=True))
