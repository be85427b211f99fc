"""A list consumed behind its own truth test, `torch.stack(out) if out else empty` (probeA: the
last token of each sequence, a replay sample, random crops): the consumer is computed from the
batch, and the whole conditional expression is swapped for the batch where it has rows, else
the other side, since the list the batch leaves is empty (analysis._list_consumer's `guarded`,
lowering.common). Only stack and tensor consumers (one row per element appended) and the list
itself as the test."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def last_token(h, lengths):
    out = []
    for i in range(h.shape[0]):
        out.append(h[i, lengths[i] - 1])
    return torch.stack(out) if out else h.new_zeros(0, h.shape[2])


def kept_rows(h, lengths):
    out = []
    for i in range(h.shape[0]):
        if lengths[i] > 2:
            out.append(h[i, lengths[i] - 1] * 2)
    return torch.stack(out) if out else None


def numbers(h, lengths):
    vals = []
    for i in range(h.shape[0]):
        vals.append(lengths[i].item() * 2)
    return torch.tensor(vals) if vals else torch.zeros(0, dtype=torch.long)


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("fn", [last_token, kept_rows, numbers], ids=lambda f: f.__name__)
@pytest.mark.parametrize("n", [0, 1, 7, 50])
def test_guarded_consumers_match_the_loop(fn, n):
    g = torch.Generator().manual_seed(n)
    h = torch.randn(n, 6, 3, generator=g)
    lengths = torch.randint(1, 7, (n,), generator=g)
    f = autovec(fn)
    for _ in range(2):
        _same(f(h, lengths), fn(h, lengths))
    if n:
        assert explain(f, h, lengths).path == "vectorized"


def test_no_kept_row_takes_the_other_side():
    h = torch.randn(9, 6, 3)
    lengths = torch.ones(9, dtype=torch.long)       # (no row kept: the loop's list is empty)
    f = autovec(kept_rows)
    assert f(h, lengths) is None
    assert explain(f, h, lengths).path == "vectorized"


def test_explain_shows_the_swapped_expression():
    h, lengths = torch.randn(5, 6, 3), torch.randint(1, 7, (5,))
    text = str(explain(last_token, h, lengths))
    assert "if len(" in text and "else h.new_zeros(0, h.shape[2])" in text


def other_test(h, lengths, flag):
    out = []
    for i in range(h.shape[0]):
        out.append(h[i, lengths[i] - 1])
    return torch.stack(out) if flag else None      # (not the list's truth: the loop)


def test_another_test_keeps_the_list():
    h, lengths = torch.randn(5, 6, 3), torch.randint(1, 7, (5,))
    f = autovec(other_test)
    _same(f(h, lengths, True), other_test(h, lengths, True))
    assert f(h, lengths, False) is None


def stacked_until_a_break(x):
    res = []
    count = 0
    for i, row in enumerate(x):
        res.append(row * i)
        if row:
            count += 10
            break
    return torch.stack(res), count


def guarded_until_a_break(x):
    res = []
    for i, row in enumerate(x):
        res.append(row * i)
        if row:
            break
    return torch.stack(res) if res else None


@pytest.mark.parametrize("fn", [stacked_until_a_break, guarded_until_a_break], ids=lambda f: f.__name__)
def test_a_list_the_stopping_iteration_appends_to_is_kept(fn):
    # (the iterations before the break run batched, the stopping one as written, appending once
    # more: the consumer takes the list, not the batch; fuzz brk seed 1002554, pre-existing for
    # the plain consumer)
    x = torch.zeros(20, dtype=torch.bool)
    x[3] = True
    f = autovec(fn)
    for _ in range(2):
        got, want = f(x), fn(x)
        _same(got[0] if isinstance(got, tuple) else got, want[0] if isinstance(want, tuple) else want)
        assert got[1:] == want[1:] if isinstance(got, tuple) else True


def cat_until_a_break(x):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i] * 2)
        if x[i].sum() > 1:
            break
    return torch.cat(res)


def numbers_until_a_break(x):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i].sum().item())
        if x[i].sum() > 1:
            break
    return torch.tensor(res)


def reversed_until_a_break(x):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i] * 2)
        if x[i].sum() > 1:
            break
    res.reverse()
    return torch.stack(res)


def two_lists_until_a_break(x):
    a, b = [], []
    for i in range(x.shape[0]):
        a.append(x[i])
        if x[i].sum() > 1:
            b.append(x[i] * 3)
            break
        b.append(x[i] * 2)
    return torch.stack(a), torch.stack(b)


@pytest.mark.parametrize("fn", [cat_until_a_break, numbers_until_a_break, reversed_until_a_break,
                                two_lists_until_a_break], ids=lambda f: f.__name__)
def test_consumers_of_lists_the_stopping_iteration_appends_to(fn):
    # (each was one element short before: the consumer took the batch before the break)
    f = autovec(fn)
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        x = torch.rand(int(torch.randint(1, 12, (1,), generator=g)), 2, generator=g) * 0.7
        want, got = fn(x), f(x)
        for w, a in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            assert w.shape == a.shape and torch.allclose(w, a)
