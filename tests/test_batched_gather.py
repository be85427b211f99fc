"""`gather` with a per-iteration index in a batched body (lowering.batched `_gather`): the same
gather one dimension further on the batch. Values, dtypes, errors and gradients against the loop."""
import math

import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def perplexity(logits, tgt, mask):
    nll, ntok = 0.0, 0
    for i in range(logits.shape[0]):
        lp = torch.log_softmax(logits[i], -1)
        tok_lp = lp.gather(1, tgt[i].unsqueeze(1)).squeeze(1)
        nll += -(tok_lp * mask[i]).sum().item()
        ntok += int(mask[i].sum())
    return math.exp(nll / max(ntok, 1))


def picked(x, idx):
    return torch.stack([torch.gather(x[i], 0, idx[i]) for i in range(x.shape[0])])


def picked_keywords(x, idx):
    out = torch.empty(x.shape[0], idx.shape[2], x.shape[2], dtype=x.dtype)
    for i in range(x.shape[0]):
        out[i] = x[i].gather(dim=-2, index=idx[i]).t()
    return out


def fixed_index(x, idx):
    return torch.stack([x[i].gather(0, idx) for i in range(x.shape[0])])     # (the same index: vmap)


CASES = [
    (perplexity, lambda: (torch.randn(8, 5, 11), torch.randint(0, 11, (8, 5)), (torch.rand(8, 5) > 0.3).float())),
    (picked, lambda: (torch.randn(6, 7), torch.randint(0, 7, (6, 4)))),
    (picked, lambda: (torch.randint(-9, 9, (6, 7)), torch.randint(0, 7, (6, 9)))),
    (picked_keywords, lambda: (torch.randn(6, 7, 3, dtype=torch.float64), torch.randint(0, 7, (6, 3, 3)))),
    (fixed_index, lambda: (torch.randn(6, 7), torch.randint(0, 7, (5,)))),
]


@pytest.mark.parametrize("fn, make", CASES, ids=[f"{c[0].__name__}{k}" for k, c in enumerate(CASES)])
def test_a_gather_per_iteration_is_one_gather(fn, make):
    f = autovec(fn)
    for _ in range(3):
        args = make()
        want, got = fn(*args), f(*args)
        assert type(got) is type(want)
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got, want)
        else:
            assert got == pytest.approx(want, rel=1e-12)
    assert explain(fn, *make()).path == "vectorized"


def test_an_index_out_of_range_raises_as_the_loop():
    x, idx = torch.randn(6, 7), torch.randint(0, 7, (6, 4))
    idx[2, 1] = 9
    with pytest.raises(RuntimeError):
        picked(x, idx)
    with pytest.raises(RuntimeError):
        autovec(picked)(x, idx)


def test_gradients_reach_the_gathered_entries():
    x, idx = torch.randn(6, 7, requires_grad=True), torch.randint(0, 7, (6, 9))
    g1, = torch.autograd.grad(picked(x, idx).square().sum(), x)
    g2, = torch.autograd.grad(autovec(picked)(x, idx).square().sum(), x)
    torch.testing.assert_close(g2, g1)
