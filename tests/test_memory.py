"""Memory-aware chunking: a batched run whose intermediates would exceed `memory_budget`
runs in chunks of iterations, with the same results and gradients as the loop."""
import re

import pytest
import torch

from autovec import assert_equivalent, autovec, explain


def attention(q, k, v):
    out = torch.empty(q.shape[0], q.shape[1], v.shape[2])
    for b in range(q.shape[0]):
        s = torch.softmax(q[b] @ k[b].T / 8.0, dim=-1)
        out[b] = s @ v[b]
    return out


def scaled_by_index(x):
    rows = []
    for i in range(1, x.shape[0], 2):
        rows.append(torch.tanh(x[i] * i).outer(x[i]).sum(0))
    return torch.stack(rows)


def total_energy(x):
    total = 0.0
    for row in x:
        total = total + (row[:, None] * row[None, :]).exp().sum()
    return total


def normalize_list(images):
    out = []
    for img in images:
        out.append((img - img.mean()) / (img.std() + 1e-5))
    return torch.stack(out)


def _chunks(ex):
    notes = [n for n in ex.notes if "chunks of" in n]
    if not notes:
        return None
    m = re.search(r"ran in (\d+) chunks of (\d+) iterations", notes[0])
    return int(m.group(1)), int(m.group(2))


@pytest.fixture
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def test_attention_runs_in_chunks_under_a_small_budget(always_vectorize):
    q, k, v = (torch.randn(16, 64, 32) for _ in range(3))
    f = autovec(attention, memory_budget=100_000)
    ex = explain(f, q, k, v)
    assert ex.path == "vectorized"
    chunks, rows = _chunks(ex)
    # one iteration allocates at least its (64, 64) float32 scores: 16 KiB
    assert chunks > 1 and rows * 64 * 64 * 4 <= 100_000
    torch.testing.assert_close(f(q, k, v), attention(q, k, v))
    assert_equivalent(f, q.requires_grad_(), k, v)


def test_no_chunks_when_the_batch_fits(always_vectorize):
    q, k, v = (torch.randn(4, 8, 8) for _ in range(3))
    ex = explain(autovec(attention), q, k, v)
    assert ex.path == "vectorized" and _chunks(ex) is None


def test_a_budget_below_one_iteration_runs_one_iteration_per_chunk(always_vectorize):
    q, k, v = (torch.randn(5, 16, 8) for _ in range(3))
    f = autovec(attention, memory_budget=16)
    assert _chunks(explain(f, q, k, v)) == (5, 1)
    torch.testing.assert_close(f(q, k, v), attention(q, k, v))


def test_chunks_keep_the_loop_index_and_its_step(always_vectorize):
    x = torch.randn(23, 12, dtype=torch.float64)
    f = autovec(scaled_by_index, memory_budget=3000)
    chunks, rows = _chunks(explain(f, x))
    assert chunks > 1
    torch.testing.assert_close(f(x), scaled_by_index(x))
    assert_equivalent(f, x.requires_grad_())


def test_chunked_reduction_into_a_python_float(always_vectorize):
    x = torch.randn(30, 20, dtype=torch.float64) * 0.1
    f = autovec(total_energy, memory_budget=10_000)
    ex = explain(f, x)
    assert ex.path == "vectorized" and _chunks(ex)[0] > 1
    got, want = f(x), total_energy(x)
    assert type(got) is type(want)
    torch.testing.assert_close(got, want)


def test_chunked_list_of_tensors(always_vectorize):
    images = [torch.randn(3, 16, 16) for _ in range(20)]
    f = autovec(normalize_list, memory_budget=20_000)
    ex = explain(f, images)
    assert ex.path == "vectorized" and _chunks(ex)[0] > 1
    torch.testing.assert_close(f(images), normalize_list(images))


@pytest.mark.parametrize("bad", [0, -5, 1.5, "1GB"])
def test_memory_budget_must_be_a_positive_number_of_bytes(bad):
    with pytest.raises(ValueError, match="memory_budget"):
        autovec(attention, memory_budget=bad)


def kept_positive(x):
    kept = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            kept.append(x[i] * 2)
    return torch.stack(kept), kept


def test_a_masked_filter_runs_in_chunks_under_a_small_budget(always_vectorize):
    # (the mask strategy was listed as "masked" among the chunkable ones, so its budget was
    # never applied; found by the chunking probe)
    x = torch.randn(997, 64, generator=torch.Generator().manual_seed(3))
    f = autovec(kept_positive, memory_budget=4096)
    (want, want_list), (got, got_list) = kept_positive(x), f(x)
    assert torch.equal(got, want) and len(got_list) == len(want_list)
    assert all(torch.equal(a, b) for a, b in zip(got_list, want_list))
    chunks = _chunks(explain(f, x))
    assert chunks is not None and chunks[0] > 1


def kept_energy(x):
    total = torch.zeros(())
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            total = total + torch.sqrt((x[i][:, None] * x[i][None, :]).abs() + 1e-3).sum()
    return total


def two_sided_energy(x):
    total = torch.zeros(())
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            total = total + torch.sqrt((x[i][:, None] * x[i][None, :]).abs() + 1e-3).sum()
        else:
            total = total + torch.log1p((x[i][:, None] - x[i][None, :]).abs()).sum()
    return total


def kept_products(x):
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            out.append(torch.sqrt((x[i][:, None] * x[i][None, :]).abs() + 1e-3).sum(0) * i)
    return torch.stack(out)


def two_sided_products(x):
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            out.append(torch.sqrt((x[i][:, None] * x[i][None, :]).abs() + 1e-3).sum(0))
        else:
            out.append(torch.log1p((x[i][:, None] - x[i][None, :]).abs()).sum(0) * i)
    return torch.stack(out)


@pytest.mark.parametrize("fn, kind", [(kept_energy, "kept"), (two_sided_energy, "sides"), (kept_products, "kept"),
                                      (two_sided_products, "sides")])
def test_kept_rows_and_sides_under_grad_run_in_chunks_under_a_small_budget(fn, kind, always_vectorize, monkeypatch):
    """Under autograd a guarded body runs on its kept rows alone, and a branching one each side
    on its own rows (Token._run_selected): those batches honour the budget too, in chunks of
    their rows, with the loop's values and gradients."""
    from autovec.runtime import Token
    runs = []
    selected = Token._run_selected

    def counting(self, *a, **k):
        out = selected(self, *a, **k)
        runs.append(self.match.plan.two_way)
        return out
    monkeypatch.setattr(Token, "_run_selected", counting)
    pieces = []
    run = Token.run

    def run_counting(self, *a, **k):
        if self.piecewise:
            pieces.append(self.n)
        return run(self, *a, **k)
    monkeypatch.setattr(Token, "run", run_counting)
    x = torch.randn(40, 48)
    f = autovec(fn, memory_budget=60_000)
    for _ in range(2):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = f(a), fn(b)
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    assert runs and all(r == (kind == "sides") for r in runs)
    chunks, rows, need, budget, fresh = f._autovec_state.runtime.chunked[1]
    # one row's (48, 48) float32 products: 9 KiB each, a few of them
    assert chunks > 1 and budget == 60_000 and need > budget and not fresh
    assert len(pieces) > 2 and max(pieces) <= 60_000 // (48 * 48 * 4)


def hardest_negative(emb, labels):
    out = torch.zeros(emb.shape[0])
    for i in range(emb.shape[0]):
        d = (emb - emb[i]).pow(2).sum(dim=1)       # (n, d) per anchor: (n, n, d) for all at once
        out[i] = d[labels != labels[i]].min()
    return out


def test_a_batch_creating_far_more_than_the_fresh_split_runs_in_pieces_on_the_cpu(always_vectorize, monkeypatch):
    # (runtime._FRESH_SPLIT / _FRESH_CHUNK and the floor below which no budget is looked up
    # scaled down: the rule at 512 / 128 MiB, on a small loop)
    import autovec.runtime as R
    monkeypatch.setattr(R, "_MEMORY_FLOOR", 1 << 18)
    monkeypatch.setattr(R, "_FRESH_SPLIT", 1 << 20)
    monkeypatch.setattr(R, "_FRESH_CHUNK", 1 << 18)
    g = torch.Generator().manual_seed(3)
    emb, labels = torch.randn(200, 16, generator=g), torch.arange(200) % 7
    f = autovec(hardest_negative)
    torch.testing.assert_close(f(emb, labels), hardest_negative(emb, labels))
    chunks, rows, need, budget, fresh = f._autovec_state.runtime.chunked[1]
    assert fresh and need > 1 << 20 and budget == 1 << 18 and chunks > 1
    assert rows * 200 * 16 * 4 <= 1 << 18          # each row's (200, 16) difference at least
    note = next(n for n in explain(f, emb, labels).notes if "chunks of" in n)
    assert "reuse their memory" in note
    # a budget the user sets is the one rule
    f = autovec(hardest_negative, memory_budget=1 << 30)
    torch.testing.assert_close(f(emb, labels), hardest_negative(emb, labels))
    assert 1 not in f._autovec_state.runtime.chunked
    # small batches: all at once
    f = autovec(hardest_negative)
    torch.testing.assert_close(f(emb[:20], labels[:20]), hardest_negative(emb[:20], labels[:20]))
    assert 1 not in f._autovec_state.runtime.chunked
