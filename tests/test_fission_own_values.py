"""Fission's values are tensors of their own where the loop's are: a value the loop keeps past
its use (appended, bound to a name read after the loop) is a copy of its row of the batch, not a
view sharing the batch's memory; one consumed at once is used as it is."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def kept_rows(x, h):
    outs = []
    for i in range(x.shape[0]):
        e = torch.exp(x[i])
        h = torch.tanh(h * 0.5 + x[i])
        outs.append(e)
    return h, outs


def appended_at_once(x, h):
    outs = []
    for i in range(x.shape[0]):
        h = torch.tanh(h * 0.5 + x[i])
        outs.append(torch.sigmoid(x[i]) * 2)
    return h, outs


def consumed_rows(x, h):
    for i in range(x.shape[0]):
        e = torch.exp(x[i])
        h = torch.tanh(h * e + x[i])
    return h


def consumed_inline(x, h):
    for i in range(x.shape[0]):
        h = torch.tanh(h * torch.exp(x[i]) + x[i])
    return h


def read_after(x, h):
    for i in range(x.shape[0]):
        e = torch.exp(x[i])
        h = torch.tanh(h * e + x[i])
    return h, e


def kept_invariant(x, h, b):
    outs = []
    for i in range(x.shape[0]):
        e = torch.exp(x[i])
        h = torch.tanh(h * e)
        outs.append(b * 2.0)
    return h, outs


def kept_invariant_view(x, h, U):
    outs = []
    for i in range(x.shape[0]):
        e = torch.exp(x[i])
        h = torch.tanh(h * e)
        outs.append(U.t())
    return h, outs


def _run(fn, extra=None):
    torch.manual_seed(0)
    x = torch.randn(6, 3, requires_grad=True)
    h = torch.randn(3)
    args = (x, h) + ((extra(),) if extra else ())
    return x, fn(*args), args


@pytest.mark.parametrize("fn", [kept_rows, appended_at_once])
def test_kept_values_do_not_share_memory_or_a_version_counter(fn):
    fast = autovec(fn)
    for _ in range(3):           # (past the first call's one-time check)
        results = []
        for g in (fn, fast):
            x, (h, outs), _ = _run(g)
            assert len({o.untyped_storage().data_ptr() for o in outs}) == len(outs)
            outs[0].mul_(2)      # the loop's outs are separate tensors: the others' backward is unaffected
            (outs[1].sum() + h.sum()).backward()
            results.append((h.detach(), [o.detach() for o in outs], x.grad))
        (h0, o0, g0), (h1, o1, g1) = results
        torch.testing.assert_close(h1, h0, rtol=0, atol=0)
        torch.testing.assert_close(g1, g0, rtol=0, atol=0)
        for p, q in zip(o0, o1):
            torch.testing.assert_close(q, p, rtol=0, atol=0)
    assert explain(fast, *_run(fn)[2]).loops[0].strategy == "fission"


@pytest.mark.parametrize("fn", [consumed_rows, consumed_inline])
def test_a_row_consumed_at_once_is_not_copied(fn):
    fast = autovec(fn)
    args = _run(fn)[2]
    ex = explain(fast, *args)
    assert ex.loops[0].strategy == "fission" and ex.path == "vectorized"
    assert "_av_h0[_av_j]" in ex.rewritten_source and ".clone()" not in ex.rewritten_source
    for _ in range(3):
        torch.testing.assert_close(fast(*args), fn(*args), rtol=0, atol=0)


def test_a_name_read_after_the_loop_holds_a_tensor_of_its_own():
    fast = autovec(read_after)
    for _ in range(3):
        _, (h, e), args = _run(fast)
        assert e.untyped_storage().nbytes() == e.numel() * e.element_size()
        want = read_after(*args)
        torch.testing.assert_close(h, want[0], rtol=0, atol=0)
        torch.testing.assert_close(e, want[1], rtol=0, atol=0)
    assert ".clone()" in explain(fast, *args).rewritten_source


def test_an_invariant_kept_every_iteration_is_one_object_per_iteration():
    fast = autovec(kept_invariant)
    for _ in range(3):
        b = torch.randn(3, requires_grad=True)
        _, (h, outs), _ = _run(fast, lambda: b)
        assert len({id(o) for o in outs}) == len(outs)
        before = outs[1].clone()
        outs[0].add_(1)
        torch.testing.assert_close(outs[1], before, rtol=0, atol=0)
        sum(o.sum() for o in outs[1:]).backward()
        torch.testing.assert_close(b.grad, torch.full((3,), 2.0 * (len(outs) - 1)))
    ex = explain(fast, *_run(kept_invariant, lambda: torch.randn(3))[2])
    assert ex.loops[0].strategy == "fission" and "loop-invariant" in ex.loops[0].reason


def test_an_invariant_view_kept_every_iteration_keeps_the_loop():
    U = torch.randn(3, 3)
    fast = autovec(kept_invariant_view)
    for _ in range(3):
        _, (h, outs), _ = _run(fast, lambda: U)
        assert len({id(o) for o in outs}) == len(outs)
        assert all(o._base is U for o in outs)
    ex = explain(fast, *_run(kept_invariant_view, lambda: U)[2])
    assert ex.path == "python" and "may be a view that the loop keeps" in ex.loops[0].reason
