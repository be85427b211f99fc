"""Calls under torch's contexts and transforms, and from several threads (found by the
contexts probe: autocast after a plain call, concurrent explain, vmap and torch.compile of a
decorated function)."""
import io
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def dots(p, q):
    sims = []
    for k in range(p.shape[0]):
        sims.append(torch.dot(p[k], q[k]))
    return torch.tensor(sims)


def mv_rows(W, x):
    return torch.stack([torch.mv(W, x[k]) for k in range(x.shape[0])])


@pytest.mark.parametrize("fn, make", [(dots, lambda: (torch.randn(300, 16), torch.randn(300, 16))),
                                      (mv_rows, lambda: (torch.randn(8, 16), torch.randn(300, 16)))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_after_a_plain_call_gives_the_loops_dtype_and_values(fn, make, dtype):
    args = make()
    g = autovec(fn)
    g(*args)                                         # the signature checked outside autocast
    assert explain(g, *args).path == "vectorized"
    with torch.autocast("cpu", dtype=dtype):
        want, got = fn(*args), g(*args)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)


def tanh_rows(x):
    res = []
    for i in range(x.shape[0]):
        print("row", i)
        res.append(torch.tanh(x[i]) * 2)
    return torch.stack(res)


def test_explain_from_several_threads_at_once():
    g = autovec(tanh_rows)
    x = torch.randn(50, 4)
    out = sys.stdout
    with ThreadPoolExecutor(4) as ex:
        paths = list(ex.map(lambda _: explain(g, x).path, range(60)))
    assert set(paths) == {"vectorized"}
    assert sys.stdout is out       # (overlapping redirects had left it redirected)


def test_explain_drops_only_its_own_threads_output(capsys):
    g = autovec(tanh_rows)
    x = torch.randn(50, 4)
    stop = threading.Event()
    sent = []

    def printer():
        k = 0
        while not stop.is_set() or k < 5:
            print(f"line {k}")
            sent.append(k)
            k += 1
            time.sleep(0.0005)

    t = threading.Thread(target=printer)
    t.start()
    for _ in range(10):
        explain(g, x)
    stop.set()
    t.join()
    got = capsys.readouterr().out
    assert "row" not in got                       # the explained call's own prints are dropped
    assert all(f"line {k}\n" in got for k in sent)    # another thread's are not


def prealloc(x, W):
    out = torch.empty(x.shape[0], W.shape[1])
    for i in range(x.shape[0]):
        out[i] = x[i] @ W
    return out


def branch(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            out[i] = x[i]
        else:
            out[i] = -x[i] * 0.5
    return out


@pytest.mark.parametrize("fn, args", [(prealloc, (torch.randn(3, 20, 8), torch.randn(8, 4))),
                                      (branch, (torch.randn(3, 20, 8),))])
def test_under_the_callers_vmap_the_loop_runs_as_written(fn, args):
    dims = (0,) + (None,) * (len(args) - 1)
    with pytest.raises(RuntimeError) as want:
        torch.func.vmap(fn, in_dims=dims)(*args)
    g = autovec(fn)
    for _ in range(3):
        g(args[0][0], *args[1:])                 # plain calls first: the signature is known
    with pytest.raises(RuntimeError) as got:
        torch.func.vmap(g, in_dims=dims)(*args)
    assert str(got.value) == str(want.value)


def test_torch_compile_fullgraph_traces_the_original():
    def rows(x):
        res = []
        for i in range(x.shape[0]):
            res.append(x[i] * 2 + 1)
        return torch.stack(res)

    g = autovec(rows)
    x = torch.randn(6, 3)
    g(x)
    torch._dynamo.reset()
    compiled = torch.compile(g, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), rows(x))
    torch.testing.assert_close(g(x), rows(x))          # and the plain calls still vectorize
    assert explain(g, x).path == "vectorized"


class Rows:
    def scaled(self, x):
        res = []
        for i in range(x.shape[0]):
            res.append(x[i] * 3)
        return torch.stack(res)


def test_torch_compile_fullgraph_of_a_decorated_bound_method():
    obj = Rows()
    g = autovec(obj.scaled)
    x = torch.randn(5, 2)
    g(x)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(g, backend="eager", fullgraph=True)(x), obj.scaled(x))


# (stop 22, the autograd probe) saved-tensor hooks see what autograd saves: a checkpoint without
# reentrant autograd recomputes the function in backward and stops once the forward's saved
# tensors are made again, by raising from its hook; the vectorized path's catch-all took that
# for an error and ran the loop on, which checkpoint refused

def tanh_scaled_rows(x, w):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.tanh(x[i]) * w
    return out


def _settled(fn, *args):
    fast = autovec(fn)
    for _ in range(4):
        fast(*args)
    assert explain(fast, *args).path == "vectorized"
    return fast


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_of_a_settled_function(reentrant):
    from torch.utils.checkpoint import checkpoint
    x0, w = torch.randn(64, 3), torch.randn(3)
    fast = _settled(tanh_scaled_rows, x0, w)
    for _ in range(3):
        grads = []
        for fn in (tanh_scaled_rows, fast):
            x = x0.clone().requires_grad_()
            out = checkpoint(fn, x, w, use_reentrant=reentrant)
            (out * torch.arange(3.0)).sum().backward()
            grads.append((out.detach(), x.grad))
        torch.testing.assert_close(grads[1], grads[0])


def test_saved_tensor_hooks_see_what_the_loop_saves():
    x0, w = torch.randn(16, 3), torch.randn(3)
    fast = _settled(tanh_scaled_rows, x0.clone().requires_grad_(), w)   # (its steady state: a lane for grads)
    packed = []
    for fn in (tanh_scaled_rows, fast):
        x = x0.clone().requires_grad_()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(fn) or t, lambda t: t):
            fn(x, w).sum().backward()
            assert explain(fast, x, w).path == "python"
    assert packed.count(fast) == packed.count(tanh_scaled_rows) > 16
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        assert explain(fast, x0, w).path == "vectorized"     # (nothing is saved without grad)


def doubled_tanh(x):
    return torch.stack([torch.tanh(x[i]) * 2 for i in range(x.shape[0])])


def appended_tanh(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.tanh(x[i]))
    return torch.cat(out)


@pytest.mark.parametrize("fn", [doubled_tanh, appended_tanh])
@pytest.mark.parametrize("dtype, autocast", [(torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16)])
def test_stacking_half_pieces_under_autocast_to_the_other_half_raises_as_the_loop(fn, dtype, autocast):
    """Autocast's `promote` operations (torch.stack, torch.cat) refuse float16 pieces under a
    bfloat16 autocast (and the reverse); the rewrite, which stacks nothing, raised nothing.
    Under autocast to the pieces' own dtype both run."""
    from conftest import outcome
    x = torch.randn(4, 5, dtype=dtype)
    g = autovec(fn)
    for _ in range(3):
        g(x)                                   # the steady state first, outside autocast
    with torch.autocast("cpu", dtype=autocast):
        want, got = outcome(fn, x), outcome(g, x)
    assert isinstance(want, tuple) and want[0] is RuntimeError and got == want
    with torch.autocast("cpu", dtype=dtype):
        want, got = fn(x), g(x)
    assert got.dtype == want.dtype and torch.equal(got, want)


def weighted_ce(logits, targets, w):
    out = torch.empty(logits.shape[0])
    for b in range(logits.shape[0]):
        out[b] = torch.nn.functional.cross_entropy(logits[b], targets[b], weight=w)
    return out


def test_an_error_only_under_grad_raises_as_the_loop():
    """nll_loss is not differentiable in its `weight`: with a weight that requires grad the loop
    raises, where vmap's form computed (found by the real-world probe). The one-time check runs
    one iteration in the caller's grad mode, so it raises there too and the loop runs; without
    grad on, both compute."""
    from conftest import outcome
    logits, targets = torch.randn(4, 3, 5), torch.randint(0, 5, (4, 3))
    w = (torch.rand(5) + 0.1).requires_grad_()
    g = autovec(weighted_ce)
    for _ in range(2):
        want, got = outcome(weighted_ce, logits, targets, w), outcome(g, logits, targets, w)
        assert isinstance(want, tuple) and want[0] is RuntimeError and got == want
    with torch.no_grad():
        torch.testing.assert_close(g(logits, targets, w), weighted_ce(logits, targets, w))
    assert explain(g, logits, targets, w.detach()).path == "vectorized"


@pytest.mark.parametrize("warm", [1, 8])
def test_a_signature_checked_without_grad_is_checked_again_with_grad(warm):
    """The one-time check runs in the caller's grad mode, so grad mode is part of the signature:
    a signature first checked (and run on its steady path, `warm` calls) under no_grad, then
    called with grad on, is checked again there, and an operation that raises only under grad
    raises as the loop does (before: the steady path computed)."""
    from conftest import outcome
    logits, targets = torch.randn(4, 3, 5), torch.randint(0, 5, (4, 3))
    w = (torch.rand(5) + 0.1).requires_grad_()
    g = autovec(weighted_ce)
    with torch.no_grad():
        for _ in range(warm):
            torch.testing.assert_close(g(logits, targets, w), weighted_ce(logits, targets, w))
    want, got = outcome(weighted_ce, logits, targets, w), outcome(g, logits, targets, w)
    assert isinstance(want, tuple) and want[0] is RuntimeError and got == want
    with torch.no_grad():       # and back: its own signature's steady path again
        torch.testing.assert_close(g(logits, targets, w), weighted_ce(logits, targets, w))
