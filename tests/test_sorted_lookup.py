"""Bins looked up per element: `torch.searchsorted(edges, v)` and `torch.bucketize(v, edges)`
with the same 1-D boundaries in every iteration are elementwise in the values, so the batched
body calls them on the batch (lowering/batched._sorted_lookup). And `len(counts)` of a tensor
the loop stores into reads what those stores never change: it is `counts.shape[0]`
(analysis._lens_as_shapes), so the bounds check before a bin's update no longer keeps the loop
(probeC's histogram_tensor)."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes, same_on_every_call


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def histogram(x, edges):
    counts = torch.zeros(len(edges) - 1, dtype=torch.long)
    for v in x:
        b = torch.searchsorted(edges, v, right=True) - 1
        if 0 <= b < len(counts):
            counts[b] += 1
    return counts


def bucket_ids(x, edges):
    out = torch.zeros(len(x), dtype=torch.long)
    for i in range(len(x)):
        out[i] = torch.bucketize(x[i], edges, right=True)
    return out


def weighted_bins(x, edges):
    c = torch.zeros(len(edges) + 1)
    for r in x:
        c[torch.searchsorted(edges, r)] += r.abs()
    return c


def bin_total(x, edges):
    s = 0
    for v in x:
        s += torch.searchsorted(edges, v, side="right").item()
    return s


def row_bins(x, edges):
    res = []
    for row in x:
        res.append(torch.searchsorted(edges, row, out_int32=True))
    return torch.stack(res)


def per_row_edges(x, edges):
    res = []
    for i in range(x.shape[0]):
        res.append(torch.searchsorted(edges[i], x[i]))
    return torch.stack(res)


NAN_INF = torch.tensor([float("nan"), -1.0, 1.0, 0.0, float("inf"), -float("inf"), 0.5])


@pytest.mark.parametrize("fn, make", [
    (histogram, lambda: (torch.randn(300), torch.linspace(-2, 2, 9))),
    (histogram, lambda: (NAN_INF, torch.linspace(-1, 1, 5))),
    (histogram, lambda: (torch.randn(0), torch.linspace(-1, 1, 5))),
    (histogram, lambda: (torch.randn(20, dtype=torch.float64), torch.linspace(-1, 1, 5))),
    (bucket_ids, lambda: (torch.randn(50), torch.linspace(-1, 1, 7))),
    (bucket_ids, lambda: (NAN_INF, torch.linspace(-1, 1, 5))),
    (bucket_ids, lambda: (torch.randint(-3, 3, (20,)), torch.linspace(-1, 1, 5))),
    (weighted_bins, lambda: (torch.randn(40), torch.linspace(-1, 1, 6))),
    (bin_total, lambda: (torch.randn(40), torch.linspace(-1, 1, 6))),
    (row_bins, lambda: (torch.randn(10, 3), torch.linspace(-1, 1, 6))),
    (row_bins, lambda: (torch.randn(10, 3), torch.tensor([[-1.0, 0.0, 1.0]] * 3))),   # (2-D boundaries: the loop raises)
    (row_bins, lambda: (torch.randn(10, 3), torch.randn(10, 3).sort(1).values)),   # (as many rows as the batch: the loop raises)
    (per_row_edges, lambda: (torch.randn(6, 3), torch.randn(6, 4).sort(1).values)),
])
def test_lookups_give_the_loops_bins(fn, make):
    def same(want, got):
        assert type(want) is type(got)
        if isinstance(want, (tuple, list)):
            assert len(want) == len(got)
            for p, q in zip(want, got):
                same(p, q)
        elif isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        else:
            assert want == got
    same_on_every_call(fn, make, same=same)


@pytest.mark.parametrize("fn, make", [
    (histogram, lambda: (torch.randn(300), torch.linspace(-2, 2, 9))),
    (bucket_ids, lambda: (torch.randn(50), torch.linspace(-1, 1, 7))),
    (bin_total, lambda: (torch.randn(40), torch.linspace(-1, 1, 6))),
    (row_bins, lambda: (torch.randn(10, 3), torch.linspace(-1, 1, 6))),
])
def test_lookups_with_fixed_boundaries_are_batched(fn, make):
    fast = autovec(fn)
    args = make()
    assert torch.equal(torch.as_tensor(fast(*args)), torch.as_tensor(fn(*args)))
    assert explain(fn, *args).path == "vectorized"
    assert ran_modes(fast) & {"batched", "direct", "broadcast"}


def test_len_of_a_rebound_tensor_stays_a_dependence():
    """(`len(counts)` is its shape only while `counts` is the same tensor: a loop that rebinds it
    reads another length each time, and keeps the loop)"""
    def grows(x):
        counts = torch.zeros(1)
        for v in x:
            if len(counts) < 4:
                counts = torch.cat([counts, v.view(1)])
            counts[0] += v
        return counts
    x = torch.randn(10)
    assert torch.equal(autovec(grows)(x), grows(x))
    assert explain(grows, x).path == "python"
