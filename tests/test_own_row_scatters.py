"""A scatter into the loop's own row read before it in the iteration (`sc = logits[i, prev[i]]`
.. `logits[i, prev[i]] = f(sc)`: a repetition penalty): each iteration reads and writes only its
own row, so the batch reads every row first (analysis.loops._own_row_read), and `x[i, idx[i]]`
with a tensor of indices per iteration is one advanced index of the batch (batching.beside).
Every test compares with the loop."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


def penalty(logits, prev, pen: float = 1.3):
    for i in range(logits.shape[0]):
        sc = logits[i, prev[i]]
        sc = torch.where(sc < 0, sc * pen, sc / pen)
        logits[i, prev[i]] = sc
    return logits


def gathered(x, idx):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i, idx[i]].sum() * 2)
    return torch.stack(out)


def view_kept(x, k):
    seen = []
    for i in range(x.shape[0]):
        v = x[i, k[i]]           # (a 0-d index: a view, which shows the store after it)
        x[i, k[i]] = v * 2
        seen.append(v)
    return x, seen


def other_row(x, k):
    for i in range(1, x.shape[0]):
        v = x[i - 1, k[i]]       # (the row the iteration before wrote)
        x[i, k[i]] = v * 2
    return x


def one_row(x, idx, r: int):
    for i in range(idx.shape[0]):
        v = x[r, idx[i]]          # (every iteration's row r: what an earlier one wrote)
        x[r, idx[i]] = v * 2
    return x


def _unique_tokens(n, vocab=10, k=3):
    return torch.stack([torch.randperm(vocab)[:k] for _ in range(n)]) if n else torch.zeros(0, k, dtype=torch.long)


@pytest.mark.parametrize("n", [0, 1, 3, 300])
def test_penalty_is_the_loops(n):
    torch.manual_seed(0)
    fast = autovec(penalty)
    for _ in range(3):
        logits, prev = torch.randn(n, 10), _unique_tokens(n)
        assert torch.equal(fast(logits.clone(), prev), penalty(logits.clone(), prev))


def test_penalty_batches():
    fast = autovec(penalty)
    logits, prev = torch.randn(300, 10), _unique_tokens(300)
    for _ in range(3):
        fast(logits.clone(), prev)
    assert explain(fast, logits.clone(), prev).path == "vectorized"
    fast(logits.clone(), prev)
    assert ran_modes(fast) == {"batched"}


def test_repeated_tokens_are_the_loops():
    # (a token twice in one row: setitem writes it once; the loop decides)
    fast = autovec(penalty)
    for _ in range(4):
        logits, prev = torch.randn(200, 10), torch.randint(0, 10, (200, 3))
        assert torch.equal(fast(logits.clone(), prev), penalty(logits.clone(), prev))


def test_a_token_out_of_range_raises_with_the_loops_partial_state():
    prev = _unique_tokens(50)
    prev[30, 1] = 10
    a, b = torch.randn(50, 10), None
    b = a.clone()
    with pytest.raises(IndexError):
        penalty(a, prev)
    with pytest.raises(IndexError):
        autovec(penalty)(b, prev)
    assert torch.equal(a, b)


def test_a_gather_of_indices_per_row():
    fast = autovec(gathered)
    for n in (1, 2, 100):
        x, idx = torch.randn(n, 8), torch.randint(0, 8, (n, 2, 3))
        torch.testing.assert_close(fast(x, idx), gathered(x, idx))
    x, idx = torch.randn(100, 8), torch.randint(0, 8, (100, 2, 3))
    fast(x, idx)
    assert ran_modes(fast) == {"batched"}


def test_a_row_every_iteration_writes_keeps_the_loop():
    idx = torch.tensor([[0, 1], [1, 2], [2, 0]] * 20)
    for _ in range(3):
        x = torch.randn(4, 6)
        assert torch.equal(autovec(one_row)(x.clone(), idx, 2), one_row(x.clone(), idx, 2))
    assert explain(one_row, torch.randn(4, 6), idx, 2).path == "python"


@pytest.mark.parametrize("fn", [view_kept, other_row])
def test_reads_the_store_would_change_keep_the_loop(fn):
    for n in (1, 5, 60):
        x, k = torch.randn(n, 6), torch.randint(0, 6, (n,))
        want, got = fn(x.clone(), k), autovec(fn)(x.clone(), k)
        assert str(want) == str(got)
    assert explain(fn, torch.randn(60, 6), torch.randint(0, 6, (60,))).path == "python"


def wrapped_penalty(logits, prev, start: int):
    for i in range(start, logits.shape[0]):
        sc = logits[i, prev[i]]
        logits[i, prev[i]] = torch.where(sc < 0, sc * 2, sc / 2)
    return logits


def arcface(x, y, m: float = 0.5):
    for i in range(-x.shape[0], x.shape[0]):
        c = x[i, y[i]].clamp(-1, 1)
        x[i, y[i]] = torch.cos(torch.acos(c) + m)
    return x


@pytest.mark.parametrize("start", [-1, -3, 0, 1])
def test_a_range_that_wraps_visits_rows_twice_and_keeps_the_loop(start, monkeypatch):
    # (a negative start is Python's indexing from the end: `range(-1, n)` reads row n - 1 after
    # writing it; only a literal start of 0 or more is a row per iteration; probeO)
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    prev = _unique_tokens(3, vocab=4, k=2)
    fast = autovec(wrapped_penalty)
    for _ in range(3):
        x = torch.full((3, 4), 8.0)
        assert torch.equal(fast(x.clone(), prev, start), wrapped_penalty(x.clone(), prev, start))
    y = torch.tensor([0, 2, 1])
    for _ in range(3):
        x = torch.rand(3, 3) * 0.9
        assert torch.equal(autovec(arcface)(x.clone(), y), arcface(x.clone(), y))


def margin(cos, y, m: float = 0.5):
    out = cos.clone()
    for i in range(len(y)):
        c = out[i, y[i]].clamp(-1 + 1e-7, 1 - 1e-7)      # (clamp saves its input: a view of out)
        out[i, y[i]] = torch.cos(torch.acos(c) + m)
    return out


def test_under_autograd_the_loops_backward_decides():
    # (the loop's write changes what its backward saved of the read, and its backward raises;
    # the batch read every row before writing: the loop runs under autograd; probeN)
    y = torch.randint(0, 10, (64,))
    fast = autovec(margin)
    for _ in range(4):
        for fn in (margin, fast):
            cos = (torch.rand(64, 10) * 1.8 - 0.9).requires_grad_()
            with pytest.raises(RuntimeError, match="inplace"):
                fn(cos, y).sum().backward()
    cos = torch.rand(64, 10) * 1.8 - 0.9
    for _ in range(3):
        torch.testing.assert_close(fast(cos, y), margin(cos, y))
    assert explain(fast, cos, y).path == "vectorized"
