"""An `if` / `else` whose sides read each other's running values (`if y[t]: tp += 1` / `else:
auc += tp`, the AUC counter): where the planner refuses it as written, it plans it again as
`if c:` then `if not c:` (analysis.loops._split_else). That is the same program only where the
second evaluation of `c` gives the first's truth, so the first side must bind names alone (no
store into an element, no in-place method: through an alias it could change what `c` reads), `c`
must not read what the side binds, and `c` may call nothing but conversions and reductions."""
import pytest
import torch

from autovec import autovec, explain
from conftest import agrees_with_loop


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def auc_counter(y):
    tp = 0
    auc = 0
    for t in range(y.shape[0]):
        if y[t]:
            tp += 1
        else:
            auc += tp
    return auc, tp


def counts_each_other(y):
    a = 0
    b = 0
    for t in range(y.shape[0]):
        if y[t]:
            a += b
        else:
            b += 1
    return a, b


def _flags(n, seed, p=0.5):
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)) < p


@pytest.mark.parametrize("fn", [auc_counter, counts_each_other])
@pytest.mark.parametrize("n", [1, 2, 7, 50])
def test_sides_that_read_each_others_running_values(fn, n):
    for seed in range(3):
        agrees_with_loop(fn, _flags(n, seed))
    if n > 2:
        assert explain(fn, _flags(n, 0)).path == "vectorized"


def test_the_auc_counter_gives_the_rank_statistic():
    y = _flags(200, 7, 0.3)
    auc, tp = autovec(auc_counter)(y)
    # each negative counts the positives before it
    want = sum(int(y[:t].sum()) for t in range(200) if not y[t])
    assert (auc, tp) == (want, int(y.sum()))


def side_writes_what_the_condition_reads(y, x):
    row = x
    tp = 0
    auc = 0
    for t in range(y.shape[0]):
        if x[t] > 0:
            tp += 1
            row[t] = -1.0        # (x[t] through another name: `else` must not see it)
        else:
            auc += tp
    return auc, tp


def side_writes_the_row_the_condition_reads(y, x):
    tp = 0
    auc = 0
    for t in range(y.shape[0]):
        if x[t] > 0:
            tp += 1
            x[t] = -1.0          # (a second `x[t] > 0` would see -1.0: the split is refused)
        else:
            auc += tp
    return auc, tp


def side_updates_an_alias_in_place(y, x):
    acc = x[:1]
    n = 0
    for t in range(y.shape[0]):
        if x[0] > 0:
            acc += 1.0           # (x[0] itself, in place)
        else:
            n += int(acc.item())
    return n, acc


def condition_reads_the_side(y, x):
    c = 0
    s = 0
    for t in range(y.shape[0]):
        if c < 3:
            c += 1
        else:
            s += c
    return c, s


def side_leaves_the_loop(y, x):
    tp = 0
    auc = 0
    for t in range(y.shape[0]):
        if y[t]:
            tp += 1
            if tp > 3:
                break
        else:
            auc += tp
    return auc, tp


@pytest.mark.parametrize("fn", [side_writes_what_the_condition_reads, side_writes_the_row_the_condition_reads,
                                side_updates_an_alias_in_place,
                                condition_reads_the_side, side_leaves_the_loop])
def test_what_a_second_test_could_see_differently_keeps_the_loop(fn):
    for seed in range(3):
        y = _flags(12, seed)
        x = torch.randn(12, generator=torch.Generator().manual_seed(seed))
        agrees_with_loop(fn, y, x)
    assert explain(fn, y, x).path == "python"


def test_a_condition_that_calls_a_function_is_not_evaluated_twice():
    calls = []

    def flag(v):
        calls.append(1)
        return v > 0

    def counted(x):
        tp = 0
        auc = 0
        for t in range(x.shape[0]):
            if flag(x[t]):
                tp += 1
            else:
                auc += tp
        return auc, tp
    x = torch.randn(9, generator=torch.Generator().manual_seed(4))
    got = autovec(counted)(x)
    n_fast = len(calls)
    calls.clear()
    assert got == counted(x)
    assert n_fast == len(calls) == 9
