"""`x[i].T` of a 2-D row is not elementwise: the broadcast strategy, which runs the body on
the whole batch, would reverse all three of the batch's dimensions (and torch warns that `.T`
of other than 2 dimensions is deprecated). The batched body transposes each row's own two
(probeG: the loop emitted no warning, autovec did, before it fell back)."""
import warnings

import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def transposed_rows(x):
    r = []
    for i in range(x.shape[0]):
        r.append(x[i].T)
    return r


def transposed_sum(x, y):
    out = torch.empty(x.shape[0], x.shape[2], x.shape[1])
    for i in range(x.shape[0]):
        out[i] = x[i].T + y[i].mT * 2
    return out


@pytest.mark.parametrize("fn, make", [
    (transposed_rows, lambda: (torch.randn(30, 4, 5),)),
    (transposed_sum, lambda: (torch.randn(30, 4, 5), torch.randn(30, 4, 5))),
])
def test_a_transposed_row_is_the_loops_with_no_warning(fn, make):
    fast = autovec(fn)
    for _ in range(3):
        args = make()
        want = fn(*args)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = fast(*args)
        for a, b in zip(want, got):
            assert torch.equal(a, b)
    assert explain(fn, *make()).loops[0].strategy != "broadcast"
    assert ran_modes(fast) == {"batched"}
