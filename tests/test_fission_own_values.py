"""Fission's values are tensors of their own where the loop keeps them: a new value kept past
its use (appended, bound to a name read after the loop) is a copy of its row of the batch, not a
view sharing the batch's storage and version counter; a view of what the loop reads stays that
view; a value that may be a view or a copy is computed in the loop as written; one consumed at
once is taken from the batch as it is."""
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
        h = torch.tanh(h * 0.5 + x[i] * 2)
        outs.append(e)
    return h, outs


def appended_at_once(x, h):
    outs = []
    for i in range(x.shape[0]):
        h = torch.tanh(h * 0.5 + x[i] * 2)
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
        h = torch.tanh(h * e + x[i] * 2)
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
            y = (outs[1] * outs[1]).sum()
            outs[0].mul_(2)      # the loop's outs are separate tensors: the others' backward is unaffected
            (y + h.sum()).backward()
            results.append((h.detach(), [o.detach() for o in outs], x.grad))
        (h0, o0, g0), (h1, o1, g1) = results
        torch.testing.assert_close(h1, h0, rtol=0, atol=0)
        torch.testing.assert_close(g1, g0, rtol=0, atol=0)
        for p, q in zip(o0, o1):
            torch.testing.assert_close(q, p, rtol=0, atol=0)
    ex = explain(fast, *_run(fn)[2])
    assert ex.loops[0].strategy == "fission" and ex.path == "vectorized"
    assert ".clone()" in ex.rewritten_source.split("for _av_j")[1]


@pytest.mark.parametrize("fn", [consumed_rows, consumed_inline])
def test_a_row_consumed_at_once_is_not_copied(fn):
    fast = autovec(fn)
    args = _run(fn)[2]
    ex = explain(fast, *args)
    assert ex.loops[0].strategy == "fission" and ex.path == "vectorized"
    assert "_av_h0[_av_j]" in ex.rewritten_source.split("for _av_j")[1]
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
    ex = explain(fast, *args)
    assert ex.loops[0].strategy == "fission" and ".clone()" in ex.rewritten_source.split("for _av_j")[1]


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
    assert ex.loops[0].strategy == "fission" and ".clone()" in ex.rewritten_source.split("for _av_j")[1]


def test_an_invariant_view_kept_every_iteration_is_made_every_iteration():
    U = torch.randn(3, 3)
    fast = autovec(kept_invariant_view)
    for _ in range(3):
        _, (h, outs), _ = _run(fast, lambda: U)
        assert len({id(o) for o in outs}) == len(outs)
        assert all(o._base is U for o in outs)
    ex = explain(fast, *_run(kept_invariant_view, lambda: U)[2])
    assert ex.path == "vectorized" and "outs.append(U.t())" in ex.rewritten_source.split("for _av_j")[1]


def kept_named_invariant_view(x, h, U):
    outs = []
    for i in range(x.shape[0]):
        e = torch.exp(x[i])
        s = U.t()
        h = torch.tanh(h * e)
        outs.append(s)
    return h, outs


def test_a_named_invariant_view_kept_every_iteration_is_made_every_iteration():
    U = torch.randn(3, 3)
    fast = autovec(kept_named_invariant_view)
    for _ in range(3):
        _, (h, outs), _ = _run(fast, lambda: U)
        assert len({id(o) for o in outs}) == len(outs) and all(o._base is U for o in outs)
    ex = explain(fast, *_run(kept_named_invariant_view, lambda: U)[2])
    assert ex.path == "vectorized" and "s = U.t()" in ex.rewritten_source.split("for _av_j")[1]


def one_invariant_two_places(x, h, b):
    outs, outs2 = [], []
    for i in range(x.shape[0]):
        c = b * 2.0
        h = torch.tanh(h * torch.exp(x[i]) * c)
        outs.append(c)
        outs2.append(c)
    return h, outs, outs2, c


def test_a_named_invariant_kept_is_one_object_per_iteration_wherever_it_is_kept():
    """(probeK B, C: each kept read was its own copy of one value for all iterations)"""
    fast = autovec(one_invariant_two_places)
    for _ in range(3):
        got = []
        for g in (one_invariant_two_places, fast):
            torch.manual_seed(0)
            x, b = torch.randn(5, 3, requires_grad=True), torch.randn(3, requires_grad=True)
            h, outs, outs2, c = g(x, torch.randn(3), b)
            assert all(p is q for p, q in zip(outs, outs2)) and outs[-1] is c
            assert len({id(o) for o in outs}) == len(outs)
            outs[0].mul_(2)          # (saved by the `* c` of the first step: its backward raises)
            with pytest.raises(RuntimeError) as e:
                h.sum().backward()
            got.append(str(e.value).split(",")[0])
        assert got[0] == got[1]
    ex = explain(fast, torch.randn(5, 3), torch.randn(3), torch.randn(3))
    assert ex.loops[0].strategy == "fission"


def kept_in_slots(x, h):
    outs = [None] * x.shape[0]
    for i in range(x.shape[0]):
        e = x[i] * 2
        h = torch.tanh(h * 0.5 + torch.exp(x[i]))
        outs[i] = e
    return h, outs


def kept_through_a_view(x, h):
    outs = []
    for i in range(x.shape[0]):
        e = x[i] * 2
        h = torch.tanh(h * 0.5 + torch.exp(x[i]))
        outs.append(e.view(-1))
    return h, outs


def kept_detached(x, h):
    outs = []
    for i in range(x.shape[0]):
        e = x[i] * 2
        h = torch.tanh(h * 0.5 + torch.exp(x[i]))
        outs.append(e.detach())
    return h, outs


@pytest.mark.parametrize("fn", [kept_in_slots, kept_through_a_view, kept_detached])
def test_a_new_value_kept_by_a_slot_a_view_or_detach_has_memory_of_its_own(fn):
    """(probeK D1-D3: rows of one batch, one storage)"""
    fast = autovec(fn)
    for _ in range(3):
        results = []
        for g in (fn, fast):
            x, (h, outs), _ = _run(g)
            assert len({o.untyped_storage().data_ptr() for o in outs}) == len(outs)
            assert all(o.untyped_storage().nbytes() == o.numel() * o.element_size() for o in outs)
            y = outs[1].sin()
            with torch.no_grad():
                outs[0].mul_(2)
            if outs[1].requires_grad:
                y.sum().backward()
                results.append(x.grad)
        if results:
            torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)
    assert explain(fast, *_run(fn)[2]).loops[0].strategy == "fission"


def kept_view_of_new(x, h):
    outs = []
    for i in range(x.shape[0]):
        h = torch.tanh(h * 0.5 + x[i] * 2)
        outs.append(torch.exp(x[i])[:2])
    return h, outs


def kept_conversion(x, h):
    outs = []
    for i in range(x.shape[0]):
        h = torch.tanh(h * 0.5 + x[i].sum())
        outs.append(x[i].contiguous())
    return h, outs


def kept_expanded(x, h):
    outs = []
    for i in range(x.shape[0]):
        h = torch.tanh(h * 0.5 + x[i])
        outs.append(torch.exp(x[i]).expand(2, 3))
    return h, outs


def test_a_kept_view_of_a_new_value_is_a_tensor_of_its_own():
    fast = autovec(kept_view_of_new)
    for _ in range(3):
        results = []
        for g in (kept_view_of_new, fast):
            x, (h, outs), _ = _run(g)
            assert len({o.untyped_storage().data_ptr() for o in outs}) == len(outs)
            y = (outs[1] * outs[1]).sum()
            outs[0].mul_(2)
            y.backward()
            results.append(x.grad)
        torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)
    ex = explain(fast, *_run(kept_view_of_new)[2])
    assert ex.path == "vectorized" and ".clone()" in ex.rewritten_source.split("for _av_j")[1]


def test_a_kept_value_that_may_be_a_view_or_a_copy_is_computed_in_the_loop():
    """`x[i].contiguous()` of a contiguous row is the row itself, a view of x: a write through
    it reaches x. The batch's `x.contiguous()` of a strided x would be one copy."""
    fast = autovec(kept_conversion)
    for _ in range(3):
        got = []
        for g in (kept_conversion, fast):
            torch.manual_seed(0)
            x = torch.randn(5, 4)[:, :3]
            _, outs = g(x, torch.zeros(()))
            outs[0].zero_()
            got.append(x.clone())
        torch.testing.assert_close(got[1], got[0], rtol=0, atol=0)
    ex = explain(fast, torch.randn(5, 4)[:, :3], torch.zeros(()))
    assert ex.path == "vectorized" and "outs.append(x[i].contiguous())" in ex.rewritten_source.split("for _av_j")[1]


def test_a_kept_expanded_value_is_computed_in_the_loop():
    """An in-place change of an expanded tensor raises in the loop; a copy would take it."""
    fast = autovec(kept_expanded)
    for _ in range(3):
        errors = []
        for g in (kept_expanded, fast):
            _, (h, outs), _ = _run(g)
            with pytest.raises(RuntimeError) as e:
                outs[0].detach().add_(1)
            errors.append(str(e.value))
        assert errors[0] == errors[1]
    assert "expand(2, 3)" in explain(fast, *_run(kept_expanded)[2]).rewritten_source.split("for _av_j")[-1]
