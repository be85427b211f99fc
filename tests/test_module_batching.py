"""Modules and class losses in batched bodies: `model(x[k].unsqueeze(0))` and
`F.cross_entropy(logits, y[k].unsqueeze(0))` as one call on the batch, where every layer treats
its input's rows independently; everything else keeps vmap or the loop. Checked against the loop
(values, gradients) and for the mode that ran."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _conv_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, 5), nn.LogSoftmax(dim=-1)).eval()


def _mlp():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Dropout(0.3), nn.Linear(8, 3)).eval()


def per_sample(model, images, targets):
    logits_all, loss = [], 0.0
    for k in range(images.shape[0]):
        logits = model(images[k].unsqueeze(0))
        loss = loss + F.cross_entropy(logits, targets[k].unsqueeze(0))
        logits_all.append(logits.squeeze(0))
    return torch.stack(logits_all), loss


def rows_through(model, x):
    out = []
    for row in x:
        out.append(model(row))
    return torch.stack(out)


def losses(scores, labels, reduction: str):
    res = []
    for k in range(scores.shape[0]):
        res.append(F.cross_entropy(scores[k], labels[k], reduction=reduction, ignore_index=2))
    return torch.stack(res)


def nll_rows(logp, labels):
    res = []
    for k in range(logp.shape[0]):
        res.append(F.nll_loss(logp[k], labels[k]))      # (classes,) against a 0-d target
    return torch.stack(res)


CASES = {
    "conv_net": (per_sample, lambda: (_conv_net(), torch.randn(5, 3, 8, 8), torch.randint(0, 5, (5,)))),
    "mlp_rows": (rows_through, lambda: (_mlp(), torch.randn(6, 6))),
    "mlp_rows_of_rows": (rows_through, lambda: (_mlp(), torch.randn(4, 3, 6))),
    "losses_mean": (losses, lambda: (torch.randn(5, 4, 3), torch.randint(0, 3, (5, 4)), "mean")),
    "losses_sum": (losses, lambda: (torch.randn(5, 4, 3), torch.randint(0, 3, (5, 4)), "sum")),
    "losses_none": (losses, lambda: (torch.randn(5, 4, 3), torch.randint(0, 3, (5, 4)), "none")),
    "nll_rows": (nll_rows, lambda: (torch.randn(6, 4).log_softmax(-1), torch.randint(0, 4, (6,)))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_the_loop_and_runs_batched(name):
    fn, make = CASES[name]
    assert_equivalent(fn, *make(), trials=3)
    fast = autovec(fn)
    fast(*make())
    assert _ran(fast) == {"batched"}, fast._autovec_state.runtime.batched


@pytest.mark.parametrize("name", ["conv_net", "mlp_rows", "losses_mean"])
def test_gradients(name):
    fn, make = CASES[name]
    args = [a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in make()]
    assert_equivalent(fn, *args, grad=True)


def test_all_targets_ignored_gives_the_loops_nan():
    scores, labels = torch.randn(3, 2, 3), torch.tensor([[2, 2], [0, 1], [2, 1]])
    got, want = autovec(losses)(scores, labels, "mean"), losses(scores, labels, "mean")
    torch.testing.assert_close(got, want, equal_nan=True)
    assert got[0].isnan()


def unbatched_conv(conv, images):
    out = []
    for k in range(images.shape[0]):
        out.append(conv(images[k]))       # (3, h, w): dimension 0 is the channels, not rows
    return torch.stack(out)


def test_a_conv_on_unbatched_samples_is_not_merged():
    conv = nn.Conv2d(3, 2, 3)
    images = torch.randn(4, 3, 6, 6)
    fast = autovec(unbatched_conv)
    torch.testing.assert_close(fast(conv, images), unbatched_conv(conv, images))
    assert "batched" not in _ran(fast)


class Mixer(nn.Module):
    def forward(self, x):
        return x - x.mean(0)          # mixes the rows it is given: no row-by-row form


def test_unknown_modules_and_batch_statistics_keep_their_meaning():
    x = torch.randn(5, 3, 4)
    for model in (Mixer(), nn.Sequential(nn.Linear(4, 4), Mixer()), nn.BatchNorm1d(4).eval(),
                  nn.Sequential(nn.Linear(4, 4), nn.Softmax(dim=0))):
        fast = autovec(rows_through)
        torch.testing.assert_close(fast(model, x), rows_through(model, x))
        if not isinstance(model, nn.BatchNorm1d):
            assert "batched" not in (_ran(fast) if fast._autovec_state.runtime else set()), model
    bn = nn.BatchNorm1d(4)             # training mode: it updates its statistics per call
    bn2 = nn.BatchNorm1d(4)
    bn2.load_state_dict(bn.state_dict())
    torch.testing.assert_close(autovec(rows_through)(bn, x), rows_through(bn2, x))
    torch.testing.assert_close(bn.running_mean, bn2.running_mean)


def test_a_module_changed_after_the_rewrite_is_checked_again():
    model = _mlp()
    x = torch.randn(6, 6)
    fast = autovec(rows_through)
    torch.testing.assert_close(fast(model, x), rows_through(model, x))
    assert _ran(fast) == {"batched"}
    model[1] = Mixer()                  # same object, a layer that mixes rows now
    torch.testing.assert_close(fast(model, x), rows_through(model, x))


def test_layer_norm_over_more_dimensions_than_a_slice_has_raises_like_the_loop():
    model = nn.LayerNorm((5, 6))
    x = torch.randn(5, 6)               # each row is (6,): the loop raises
    with pytest.raises(RuntimeError) as want:
        rows_through(model, x)
    with pytest.raises(RuntimeError) as got:
        autovec(rows_through)(model, x)
    assert str(got.value) == str(want.value)


# (stop 22, the modules probe) a module whose own forward draws random numbers through torch's
# Python functions (F.dropout in training mode), and a forward replaced on an instance after
# the batched form was settled

class _ManualDrop(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.nn.functional.dropout(self.lin(x), 0.5, self.training)


def _per_sample(model, x):
    out = []
    for i in range(x.shape[0]):
        out.append(model(x[i]))
    return torch.stack(out)


def test_random_numbers_drawn_inside_a_modules_forward(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    m, x = _ManualDrop(), torch.randn(6, 4)
    fast = autovec(_per_sample)
    for _ in range(3):
        torch.manual_seed(1)
        want, rng = _per_sample(m, x), torch.get_rng_state()
        torch.manual_seed(1)
        assert torch.equal(fast(m, x), want) and torch.equal(torch.get_rng_state(), rng)
    assert "F.dropout" in explain(fast, m, x).loops[0].reason or explain(fast, m, x).path == "python"
    m.eval()     # (a new function: the bucket refused three times waits 32 calls before trying again)
    assert explain(autovec(_per_sample), m, x).path == "vectorized"


def test_a_forward_replaced_on_an_instance(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    torch.manual_seed(0)
    m, x = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.randn(6, 4)
    fast = autovec(_per_sample)
    for _ in range(3):
        torch.testing.assert_close(fast(m, x), _per_sample(m, x))
    lin = m[0]
    lin.forward = lambda v: torch.nn.functional.linear(v, lin.weight, lin.bias).softmax(0)
    for _ in range(3):
        torch.testing.assert_close(fast(m, x), _per_sample(m, x))
    assert explain(fast, m, x).path == "python"


# (stop 31) hooks that run on every module call but live outside the module's own forward
# hooks: torch.nn's global hooks (register_module_forward_hook, ..) and a module's full backward
# pre-hooks. The batch called each once where the loop calls it once per iteration.

_HOOK_LOG: list = []


def _count_hook(*_):
    _HOOK_LOG.append(1)


@pytest.mark.parametrize("register", ["register_module_forward_pre_hook", "register_module_forward_hook",
                                      "register_module_full_backward_pre_hook",
                                      "register_module_full_backward_hook"])
def test_global_module_hooks_run_once_per_iteration(register):
    torch.manual_seed(0)
    lin, x = nn.Linear(4, 3), torch.randn(6, 4, requires_grad=True)
    fast = autovec(_per_sample)
    fast(lin, x).sum().backward()
    assert _ran(fast) == {"batched"}
    handle = getattr(torch.nn.modules.module, register)(_count_hook)
    try:
        _HOOK_LOG.clear()
        _per_sample(lin, x).sum().backward()
        assert len(_HOOK_LOG) == 6
        for _ in range(2):
            _HOOK_LOG.clear()
            fast(lin, x).sum().backward()
            assert len(_HOOK_LOG) == 6, register
        ex = explain(fast, lin, x)
        assert ex.path == "python" and any("global" in n and "hooks registered" in n for n in ex.notes), ex.notes
    finally:
        handle.remove()
    _HOOK_LOG.clear()
    fast(lin, x)
    assert _ran(fast) == {"batched"} and not _HOOK_LOG      # (removed: batched again)


def test_a_full_backward_pre_hook_runs_once_per_iteration():
    torch.manual_seed(0)
    lin, x = nn.Linear(4, 3), torch.randn(6, 4, requires_grad=True)
    fast = autovec(_per_sample)
    fast(lin, x).sum().backward()
    assert _ran(fast) == {"batched"}
    lin.register_full_backward_pre_hook(_count_hook)
    _HOOK_LOG.clear()
    fast(lin, x).sum().backward()
    assert len(_HOOK_LOG) == 6
    assert any("has hooks" in n for n in explain(fast, lin, x).notes)


def _centered_forward(self, x):
    return F.linear(x - x.mean(0), self.weight, self.bias)     # (the rows it is given, mixed)


def test_a_torch_nn_forward_patched_on_the_class(monkeypatch):
    """(stop 31, a probe) A torch.nn class whose forward a patch replaced is no longer torch's
    layer: its forward is checked as a custom module's is, and is no layer-by-layer form."""
    torch.manual_seed(0)
    lin, x = nn.Linear(4, 3), torch.randn(6, 4)
    fast = autovec(_per_sample)
    fast(lin, x)
    assert _ran(fast) == {"batched"}
    monkeypatch.setattr(nn.Linear, "forward", _centered_forward)
    for _ in range(2):
        torch.testing.assert_close(fast(lin, x), _per_sample(lin, x))
    assert "batched" not in _ran(fast)
    monkeypatch.setattr(nn.Linear, "forward", lambda self, v: _HOOK_LOG.append(1) or F.linear(v, self.weight))
    _HOOK_LOG.clear()
    fast(lin, x)
    assert len(_HOOK_LOG) == 6


def test_a_wrapped_module_call_runs_once_per_iteration(monkeypatch):
    torch.manual_seed(0)
    lin, x = nn.Linear(4, 3), torch.randn(6, 4)
    fast = autovec(_per_sample)
    fast(lin, x)
    assert _ran(fast) == {"batched"}
    real = nn.Module.__call__

    def counted(self, *args, **kwargs):
        _HOOK_LOG.append(1)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(nn.Module, "__call__", counted)
    for _ in range(2):
        _HOOK_LOG.clear()
        torch.testing.assert_close(fast(lin, x), _per_sample(lin, x))
        assert len(_HOOK_LOG) == 12      # (six calls each, the loop's and autovec's)
    monkeypatch.undo()
    fast(lin, x)
    assert _ran(fast) == {"batched"}
