"""Several scatters into one tensor in each iteration (`deg[s] += 1; deg[t] += 1`, `A[s, d] = 1;
A[d, s] = 1`): the iterations' writes interleaved in the loop's order (a0, b0, a1, b1, ..) are
one scatter (analysis._joinable_scatters, runtime.scatter_join): repeated indices add up, or the
last write wins, as in the loop."""
import pytest
import torch

from autovec import autovec, explain
from conftest import check_loop, ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def degree(edges, n: int):
    d = torch.zeros(n)
    for s, t in edges.tolist():
        d[s] += 1
        d[t] += 1
    return d


def in_minus_out(edges, w, n: int):
    d = torch.zeros(n, dtype=w.dtype)
    for k in range(edges.shape[0]):
        d[edges[k, 0]] -= w[k]
        d[edges[k, 1]] += w[k]
    return d


def symmetric(edges, w, n: int):
    A = torch.zeros(n, n)
    for k in range(edges.shape[0]):
        A[edges[k, 0], edges[k, 1]] = w[k]
        A[edges[k, 1], edges[k, 0]] = -w[k]      # a later write to one element wins
    return A


def three_writes(edges, w, n: int):
    d = torch.zeros(n)
    for k in range(edges.shape[0]):
        d[edges[k, 0]] += w[k]
        d[edges[k, 1]] += 2 * w[k]
        d[edges[k, 0]] -= 0.5 * w[k]
    return d


def messages(edges, h, agg):
    for s, t in edges.tolist():
        agg[t] += h[s]
        agg[s] += h[t]
    return agg


def conditional(edges, w, n: int):
    A = torch.zeros(n, n)
    for k in range(edges.shape[0]):
        if w[k] > 0:
            A[edges[k, 0], edges[k, 1]] = w[k]
        A[edges[k, 1], edges[k, 0]] = w[k] * 2
    return A


def counts(edges, n: int):
    d = torch.zeros(n, dtype=torch.long)
    for k in range(len(edges)):
        d[edges[k, 0]] += 3
        d[edges[k, 1]] -= 1
    return d


def index_dtypes(edges, e32, n: int):
    d = torch.zeros(n)
    for k in range(len(edges)):
        d[edges[k, 0]] = 1.0
        d[e32[k, 1]] = 2.0
    return d


def _edges(m, n, seed, low=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, n, (m, 2), generator=g)


@pytest.mark.parametrize("seed", range(3))
def test_joined_scatters_match_the_loop(seed):
    g = torch.Generator().manual_seed(100 + seed)
    e = _edges(60, 7, seed, low=-7 if seed == 2 else 0)     # (repeats, and negative indices)
    w = torch.randn(60, generator=g)
    h = torch.randn(7, 3, generator=g)
    assert check_loop(degree, e, 7)
    assert check_loop(in_minus_out, e, w.double(), 7)
    assert check_loop(symmetric, e, w, 7)
    assert check_loop(three_writes, e, w, 7)
    assert check_loop(messages, e, h, torch.zeros(7, 3))
    assert check_loop(conditional, e, w, 7)
    assert check_loop(counts, e, 7)
    assert check_loop(index_dtypes, e, e.int(), 7)
    assert check_loop(in_minus_out, e, w.requires_grad_(), 7, grad=(1,))


def test_the_last_write_wins_between_the_two_writes():
    # iteration 0 writes (0, 1) then (1, 0); iteration 1 writes (1, 0) then (0, 1): each
    # element keeps the value of the last write, whichever scatter made it
    e = torch.tensor([[0, 1], [0, 1], [1, 0]])
    w = torch.tensor([1.0, 2.0, 3.0])
    f = autovec(symmetric)
    assert torch.equal(f(e, w, 2), symmetric(e, w, 2))
    assert _ran(f)
    assert "2 writes an iteration, interleaved" in explain(f, e, w, 2).loops[0].reason


def reads_back(edges, n: int):
    d = torch.zeros(n)
    for s, t in edges.tolist():
        d[s] += 1
        d[t] += d[s]
    return d


def row_and_element(edges, n: int):
    A = torch.zeros(n, n)
    for s, t in edges.tolist():
        A[s] = 1.0
        A[s, t] = 2.0
    return A


def ints_and_floats(edges, n: int):
    d = torch.zeros(n)
    for s, t in edges.tolist():
        d[s] += 1
        d[t] += 0.5
    return d


def bool_minus(edges, n: int):
    d = torch.zeros(n, dtype=torch.bool)
    for s, t in edges.tolist():
        d[s] += True
        d[t] -= True
    return d


def byte_indices(edges, n: int):
    d = torch.zeros(n)
    e8 = edges.to(torch.uint8)
    for k in range(len(edges)):
        d[e8[k, 0]] += 1.0
        d[edges[k, 1]] += 1.0
    return d


def half_sums(edges, n: int):
    d = torch.zeros(n, dtype=torch.float16)
    for s, t in edges.tolist():
        d[s] += 1
        d[t] += 1
    return d


@pytest.mark.parametrize("fn", [reads_back, row_and_element])
def test_refused_forms_say_why(fn):
    f = autovec(fn)
    e = _edges(20, 5, 0)
    assert torch.equal(f(e, 5), fn(e, 5))
    assert explain(f, e, 5).path == "python"
    assert not _ran(f)


@pytest.mark.parametrize("fn", [ints_and_floats, byte_indices, half_sums])
def test_writes_the_join_cannot_take_keep_the_loop(fn):
    e = _edges(20, 5, 1)
    f = autovec(fn)
    assert torch.equal(f(e, 5), fn(e, 5))
    assert not _ran(f)


def test_bool_minus_raises_as_the_loop():
    e = _edges(4, 3, 2)
    with pytest.raises(RuntimeError) as want:
        bool_minus(e, 3)
    with pytest.raises(RuntimeError) as got:
        autovec(bool_minus)(e, 3)
    assert str(got.value) == str(want.value)


def plus_minus(edges, v, d):
    for k in range(edges.shape[0]):
        d[edges[k, 0]] += v[k]
        d[edges[k, 1]] -= v[k]
    return d


@pytest.mark.parametrize("v, dtype", [
    (torch.tensor([5, 7], dtype=torch.uint8), torch.int64),       # (uint8 negation wraps)
    (torch.tensor([5, 7], dtype=torch.uint8), torch.float32),
    (torch.tensor([-128, 3], dtype=torch.int8), torch.float32),   # (a signed minimum negates to itself)
    (torch.tensor([-2**31, 3], dtype=torch.int32), torch.int64),
], ids=["uint8-int64", "uint8-float32", "int8min-float32", "int32min-int64"])
def test_minus_values_of_another_integer_dtype_match_the_loop(v, dtype):
    # (found by a probe: the join negated the values in their own dtype before the conversion)
    e = torch.tensor([[0, 1], [1, 2]])
    f = autovec(plus_minus)
    got, want = f(e, v, torch.zeros(3, dtype=dtype)), plus_minus(e, v, torch.zeros(3, dtype=dtype))
    assert torch.equal(got, want)


def test_minus_values_of_another_integer_dtype_run_batched_where_exact():
    e = torch.tensor([[0, 1], [1, 2]])
    v = torch.tensor([-5, 7], dtype=torch.int8)
    f = autovec(plus_minus)
    assert torch.equal(f(e, v, torch.zeros(3)), plus_minus(e, v, torch.zeros(3)))
    assert _ran(f)
