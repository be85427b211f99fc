"""F.kl_div per iteration in a batched body (lowering.batched `_kl_div`, batching._Helpers.kl_div):
the elementwise terms of the batch, then each iteration's own reduction. Values (sums
reassociate, as every reduction does), dtypes, warnings aside, errors and gradients against the
loop; shapes that broadcast and a 0-d batchmean are left to vmap or the loop."""
import warnings

import pytest
import torch
import torch.nn.functional as F

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def distill(s, t, reduction, log_target):
    total = 0.0
    for i in range(s.shape[0]):
        total = total + F.kl_div(F.log_softmax(s[i], -1), t[i], reduction=reduction, log_target=log_target)
    return total


def per_row(s, t):
    return torch.stack([F.kl_div(s[i], t[i], reduction="none") for i in range(s.shape[0])])


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # (reduction="mean" warns in the loop, once a call)
        return fn(*args)


@pytest.mark.parametrize("reduction", ["sum", "mean", "batchmean", "none"])
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("shape", [(7, 4, 5), (7, 5), (7, 1, 3, 2)])
def test_each_reduction_is_the_loops(reduction, log_target, shape):
    s, t = torch.randn(*shape, dtype=torch.float64), torch.randn(*shape, dtype=torch.float64)
    t = t.log_softmax(-1) if log_target else t.softmax(-1)
    if reduction == "none":
        want = _quiet(per_row, s, t.softmax(-1))
        got = _quiet(autovec(per_row), s, t.softmax(-1))
    else:
        want = _quiet(distill, s, t, reduction, log_target)
        got = _quiet(autovec(distill), s, t, reduction, log_target)
    assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)
    ex = explain(per_row, s, t.softmax(-1)) if reduction == "none" else explain(distill, s, t, reduction, log_target)
    assert ex.path == "vectorized" and any("_avb.kl_div" in n for n in ex.notes), ex.notes     # (this form, not vmap)


def test_gradients_are_the_loops():
    s, t = torch.randn(6, 3, 5, requires_grad=True), torch.randn(6, 3, 5).softmax(-1)
    g1, = torch.autograd.grad(distill(s, t, "batchmean", False), s)
    g2, = torch.autograd.grad(autovec(distill)(s, t, "batchmean", False), s)
    torch.testing.assert_close(g2, g1)


def test_shapes_that_broadcast_and_a_0d_batchmean_are_no_batched_form():
    """Shapes that broadcast (the loop warns) and a batchmean of one number per iteration (no
    first dimension): not this form (vmap's or the loop's), with the loop's values."""
    def fn(s, t, reduction):
        return torch.stack([F.kl_div(s[i], t[i], reduction=reduction) for i in range(s.shape[0])])
    for s, t, reduction in [(torch.randn(6, 5), torch.rand(6, 1), "sum"), (torch.randn(6), torch.rand(6), "batchmean")]:
        want, got = _quiet(fn, s, t, reduction), _quiet(autovec(fn), s, t, reduction)
        torch.testing.assert_close(got, want)
        assert not any("_avb.kl_div" in n for n in explain(fn, s, t, reduction).notes)
