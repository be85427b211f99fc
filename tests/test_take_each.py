"""A per-iteration tensor indexed by a per-iteration integer index tensor (`rel[q,
scores[q].topk(k).indices]`, `x[i][idx[i]]`): each row's own elements, by advanced indexing with
the row numbers beside the indices (batching take_each). Negative indices count from the end,
one out of range raises the loop's IndexError, gradients flow as the loop's; against the loop."""
import pytest
import torch

from autovec import autovec
from conftest import outcome, ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def precision_at_k(scores, rel, k=5):
    p_at_k = []
    for q in range(len(scores)):
        topk = scores[q].topk(k).indices
        hits = rel[q, topk].sum().item()
        p_at_k.append(hits / k)
    return sum(p_at_k) / len(p_at_k)


def picked(x, idx):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i][idx[i]] * 2)
    return out


def picked_rows(x, idx):
    out = torch.empty(idx.shape[0], idx.shape[1], x.shape[2])
    for i in range(x.shape[0]):
        out[i] = x[i][idx[i]]
    return out


def _g(seed):
    return torch.Generator().manual_seed(seed)


def test_precision_at_k_is_the_loops():
    fast = autovec(precision_at_k)
    for seed in range(3):
        g = _g(seed)
        s, r = torch.randn(500, 40, generator=g), torch.randint(0, 2, (500, 40), generator=g)
        assert fast(s, r) == precision_at_k(s, r)
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_negative_indices_and_index_dtypes(dtype):
    fast = autovec(picked)
    for seed in range(3):
        g = _g(seed)
        x, idx = torch.randn(50, 10, 3, generator=g), torch.randint(-10, 10, (50, 4), generator=g).to(dtype)
        got, want = fast(x, idx), picked(x, idx)
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
    assert _ran(fast) == {"batched"}


def test_an_index_out_of_range_raises_as_the_loop():
    fast = autovec(picked)
    g = _g(4)
    x, idx = torch.randn(50, 10, 3, generator=g), torch.randint(0, 10, (50, 4), generator=g)
    fast(x, idx)
    idx[30, 2] = 10
    for _ in range(2):
        assert outcome(fast, x, idx) == outcome(picked, x, idx)
        assert outcome(picked, x, idx)[0] is IndexError


def test_gradients_of_repeated_indices():
    fast = autovec(picked_rows)
    g = _g(5)
    x, idx = torch.randn(40, 6, 3, generator=g), torch.randint(0, 3, (40, 5), generator=g)   # (repeats)
    for _ in range(2):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = fast(a, idx), picked_rows(b, idx)
        assert torch.equal(got, want)
        (got * got).sum().backward()
        (want * want).sum().backward()
        assert torch.equal(a.grad, b.grad)
    assert _ran(fast)
