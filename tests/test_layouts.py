"""Memory layouts, tensor subclasses and sparse inputs: the loop's result down to its strides,
type and layout (found by the layout probe: stacked results that `.view(-1)` refused, a store
into rows that overlap, a plain result returned as the input's subclass)."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def rnd(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def double_rows(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * 2
    return x


def test_a_store_into_rows_that_overlap_each_other_keeps_the_loop():
    # row i + 1 shares four elements with row i: each row reads values the row before doubled
    base = rnd(8)
    want = double_rows(torch.as_strided(base.clone(), (4, 5), (1, 1)))
    x = torch.as_strided(base.clone(), (4, 5), (1, 1))
    got = autovec(double_rows)(x)
    assert torch.equal(got, want) and torch.equal(x, want)


def stacked(x):
    rows = []
    for i in range(x.shape[0]):
        rows.append(x[i] * 2)
    return torch.stack(rows)


def stacked_dim1(x):
    return torch.stack([x[i] + 1 for i in range(x.shape[0])], dim=1)


def catted(x):
    return torch.cat([x[i] * 2 for i in range(x.shape[0])])


def kept_views(x):
    return torch.stack([x[i] for i in range(x.shape[0])])


def added(x, y):
    rows = []
    for i in range(x.shape[0]):
        rows.append(x[i] + y[i])
    return torch.stack(rows)


@pytest.mark.parametrize("fn, make", [
    (stacked, lambda: (rnd(5, 64).t(),)),
    (stacked, lambda: (rnd(5, 64).conj().t(),)),
    (stacked, lambda: (rnd(6, 64, 3).transpose(0, 1),)),
    (stacked_dim1, lambda: (rnd(64, 5),)),
    (stacked_dim1, lambda: (rnd(5, 64).t(),)),
    (catted, lambda: (rnd(4, 64, 3).permute(1, 2, 0),)),
    (kept_views, lambda: (rnd(64, 3, 4, 4).to(memory_format=torch.channels_last),)),
    (kept_views, lambda: (rnd(64, 3, 4, 4, 2).to(memory_format=torch.channels_last_3d),)),
    (kept_views, lambda: (rnd(64, 3, 4, 4).permute(0, 2, 1, 3),)),
    (added, lambda: (rnd(64, 3, 4, 4).to(memory_format=torch.channels_last), rnd(64, 3, 4, 4))),
    (added, lambda: (rnd(64, 3, 4, 4).to(memory_format=torch.channels_last),
                     rnd(64, 3, 4, 4).to(memory_format=torch.channels_last))),
])
def test_a_stacked_result_has_the_loops_strides(fn, make):
    want, got = fn(*make()), autovec(fn)(*make())
    assert torch.equal(got, want)
    assert got.stride() == want.stride()
    if fn is kept_views:     # (the loop's own pieces: torch's layout rule applied to one of them)
        assert explain(autovec(fn), *make()).path == "vectorized"


class Sub(torch.Tensor):
    pass


def into_fresh(x):
    out = torch.empty(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
    return out


def from_items(x):
    return torch.tensor([v.item() for v in x])


@pytest.mark.parametrize("fn, x", [(into_fresh, rnd(64, 5)), (from_items, rnd(64))])
def test_a_plain_result_stays_plain_for_a_subclass_input(fn, x):
    want, got = fn(x.as_subclass(Sub)), autovec(fn)(x.as_subclass(Sub))
    assert type(want) is torch.Tensor and type(got) is torch.Tensor
    assert torch.equal(got, want)
    assert explain(autovec(fn), x.as_subclass(Sub)).path == "vectorized"


def row_sums(x):
    rows = []
    for i in range(x.shape[0]):
        rows.append(x[i].sum())
    return torch.stack(rows)


def item_list(x):
    return torch.tensor([v.item() for v in x])


def rows_times(x, W):
    return torch.stack([x[i] @ W for i in range(x.shape[0])])


@pytest.mark.parametrize("fn, make", [
    (row_sums, lambda: (rnd(64, 5).relu().to_sparse(),)),
    (item_list, lambda: (rnd(64).relu().to_sparse(),)),
    (rows_times, lambda: (rnd(64, 5), rnd(5, 3).relu().to_sparse())),
])
def test_sparse_inputs_give_the_loops_layout(fn, make):
    want, got = fn(*make()), autovec(fn)(*make())
    assert got.layout == want.layout == torch.strided
    assert got.stride() == want.stride()
    assert torch.allclose(got, want)


def kept_rows(x):
    rows = []
    for i in range(x.shape[0]):
        rows.append(x[i] * 2)
    return rows


def test_a_sparse_input_keeps_the_loop():
    # (batched operations on a sparse tensor give results of their own layout; the guard refuses
    # any non-strided input rather than follow each operation's rules)
    x = rnd(64, 5).relu().to_sparse()
    want, got = kept_rows(x), autovec(kept_rows)(x)
    assert [t.layout for t in got] == [t.layout for t in want]
    assert all(torch.equal(a.to_dense(), b.to_dense()) for a, b in zip(want, got))
    assert explain(autovec(kept_rows), x).path == "python"
    assert "sparse" in " ".join(explain(autovec(kept_rows), x).notes)
