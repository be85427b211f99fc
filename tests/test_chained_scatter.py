"""`t[a][b] op= v` with a per-iteration `a` (a confusion matrix's `cm[y[k]][p[k]] += 1`) is the
scatter `t[a, b] op= v` (analysis.loops._chained_scatter) where `t[a]` is a view: a tensor `t`
indexed by one integer per iteration. A list of lists, or a tensor of indices (whose `t[a]` is
a copy the loop's write never reaches) keeps the loop. Every test compares with the loop."""
import pytest
import torch

from autovec import autovec, explain


def confusion(y, p, C):
    cm = torch.zeros(C, C, dtype=torch.long)
    for k in range(len(y)):
        cm[y[k]][p[k]] += 1
    return cm


def confusion_zip(y, p, C):
    cm = torch.zeros(C, C)
    for t, q in zip(y, p):
        cm[t][q] += 1
    return cm


def confusion_lists(y, p, C):
    cm = [[0] * C for _ in range(C)]
    for k in range(len(y)):
        cm[y[k]][p[k]] += 1
    return cm


def through_a_copy(y, p, C):
    cm = torch.zeros(C, C, dtype=torch.long)
    for k in range(len(y)):
        cm[y[k:k + 1]][p[k]] += 1        # (a tensor of indices: `cm[..]` is a copy of one row, so
        #                                  `[p[k]]` past 0 raises)
    return cm


def last_write(y, p, v, C):
    out = torch.zeros(C, C)
    for k in range(len(y)):
        out[y[k]][p[k]] = v[k]
    return out


def _args(fn, n, C=5):
    y, p = torch.randint(0, C, (n,)), torch.randint(0, C, (n,))
    if fn is confusion_lists:
        return y.tolist(), p.tolist(), C
    if fn is last_write:
        return y, p, torch.randn(n), C
    return y, p, C


@pytest.mark.parametrize("fn", [confusion, confusion_zip, confusion_lists, last_write])
def test_values_are_the_loops(fn, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    torch.manual_seed(0)
    fast = autovec(fn)
    for n in (1, 7, 500, 500):
        args = _args(fn, n)
        want, got = fn(*args), fast(*args)
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want)
        else:
            assert got == want


@pytest.mark.parametrize("fn, path", [(confusion, "vectorized"), (confusion_zip, "vectorized"),
                                      (last_write, "vectorized"), (confusion_lists, "python")])
def test_paths(fn, path):
    fast = autovec(fn)
    args = _args(fn, 3000)
    for _ in range(3):
        fast(*args)
    assert explain(fast, *args).path == path


def test_indices_the_loop_refuses_raise_as_in_the_loop(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    y, p = torch.randint(0, 5, (50,)), torch.randint(0, 5, (50,))
    bad = y.clone()
    bad[20] = 9
    for fn, args in ((confusion, (bad, p, 5)), (confusion, (y.float(), p, 5)), (through_a_copy, (y, p + 1, 5))):
        with pytest.raises(IndexError):
            fn(*args)
        with pytest.raises(IndexError):
            autovec(fn)(*args)
