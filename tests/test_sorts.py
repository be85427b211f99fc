"""sort / argsort / topk / kthvalue / median of each iteration's value in a batched body: the
same call along that dimension of the batch."""
import pytest
import torch

from autovec import assert_equivalent, autovec
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def top3(scores):
    vals, idx = [], []
    for i in range(scores.shape[0]):
        v, j = scores[i].topk(3)
        vals.append(v)
        idx.append(j)
    return torch.stack(vals), torch.stack(idx)


def sorted_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i].sort(0, True).values * 2
    return out


def ranks(x):
    out = []
    for row in x:
        out.append(torch.argsort(row, dim=-1))
    return torch.stack(out)


def medians(x):
    out = torch.empty(x.shape[0], x.shape[2])
    for i in range(x.shape[0]):
        out[i] = x[i].median(dim=0).values + x[i].median()
    return out


def second_smallest(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.kthvalue(x[i], 2, 1).values)
    return torch.stack(out)


CASES = [
    (top3, lambda: (torch.randn(20, 7),)),
    (sorted_rows, lambda: (torch.randn(15, 6, requires_grad=True),)),
    (ranks, lambda: (torch.randn(12, 9),)),      # (distinct values: the order of ties is not promised)
    (medians, lambda: (torch.randn(10, 4, 3),)),
    (second_smallest, lambda: (torch.randn(8, 3, 5, requires_grad=True),)),
]


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_sorts_are_batched_and_equal_to_the_loop(fn, make):
    args = make()
    f = autovec(fn)
    torch.testing.assert_close(f(*args), fn(*args))
    assert _ran(f) == {"batched"}
    assert_equivalent(fn, *args, grad=any(a.requires_grad for a in args))


def test_nan_medians_and_sorts_as_the_loop():
    x = torch.randn(10, 4, 3)
    x[2, 1, 0] = float("nan")
    x[5, :, 2] = float("nan")
    torch.testing.assert_close(autovec(medians)(x), medians(x), equal_nan=True)
    y = torch.randn(15, 6)
    y[3, 2] = float("nan")
    torch.testing.assert_close(autovec(sorted_rows)(y), sorted_rows(y), equal_nan=True)


def test_ties_give_the_loops_indices_on_this_machine():
    """The order of tied values is not promised by torch; on CPU a row sorted alone and the same
    row sorted in a batch come out the same (vmap sorts the batch too)."""
    x = torch.randint(0, 3, (20, 40)).float()
    for fn in (top3, ranks):
        f = autovec(fn)
        got, want = f(x), fn(x)
        assert _ran(f) == {"batched"}
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert torch.equal(g, w)
