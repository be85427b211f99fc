"""A loop that tests an optional parameter (`if mask is not None and not mask[i]`, `w[i] if w is
not None else 1.0`) runs as two loops, one for each answer (frontend._NoneTests): the answer is
the same in every iteration, and the copy for `None` no longer reads `mask[i]`, so both calls
batch. The parameter must never be rebound in the function. Every test compares with the loop."""
import itertools

import pytest
import torch

from autovec import autovec, explain
from conftest import same_within


def masked_total(x, mask=None):
    total = 0.0
    for i in range(x.shape[0]):
        if mask is not None and not mask[i]:
            continue
        total = total + x[i].sum()
    return total


def weighted_biased(x, w=None, b=None):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        s = x[i].sum()
        if w is not None:
            s = s * w[i]
        if b is None:
            s = s + 1
        else:
            s = s + b[i]
        out[i] = s
    return out


def scaled(x, w=None):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i] * (w[i] if w is not None else 1.0))
    return torch.stack(res)


def pairwise(x, w=None):
    out = torch.zeros(x.shape[0], x.shape[0])
    for i, j in itertools.product(range(x.shape[0]), range(x.shape[0])):
        out[i, j] = (x[i] - x[j]).abs().sum() * (w[i] if w is not None else 1)
    return out


def kept_rows(x, w=None):
    out = []
    for i in range(x.shape[0]):
        if w is None or w[i] > 0:
            out.append(x[i])
    return out


def until(x, w=None):
    total = 0
    for i in range(x.shape[0]):
        if w is not None and i > 100:
            break
        total = total + x[i].sum()
    return total, i


def rebound(x, w=None):
    total = 0
    for i in range(x.shape[0]):
        total = total + (x[i].sum() if w is None else x[i].sum() * w)
        w = 2.0       # (the answer changes after the first iteration: not one for the whole loop)
    return total


_same = same_within


FNS = [masked_total, weighted_biased, scaled, pairwise, kept_rows, until, rebound]


def _optional(fn, n):
    if fn is masked_total:
        return torch.rand(n) > 0.3
    return torch.randn(n)


@pytest.mark.parametrize("fn", FNS)
def test_values_are_the_loops(fn):
    torch.manual_seed(0)
    fast = autovec(fn)
    for n in (1, 5, 200, 200):
        x = torch.randn(n, 3)
        calls = [(), (None,), (_optional(fn, n),)]
        if fn is weighted_biased:
            calls += [(None, torch.randn(n)), (torch.randn(n), torch.randn(n))]
        for extra in calls:
            _same(fast(x.clone(), *extra), fn(x.clone(), *extra))


@pytest.mark.parametrize("fn", [masked_total, weighted_biased, scaled, pairwise, kept_rows])
def test_both_answers_batch(fn):
    fast = autovec(fn)
    x = torch.randn(400, 3)
    for extra in ((None,), (_optional(fn, 400),)):
        for _ in range(3):
            fast(x, *extra)
        assert explain(fast, x, *extra).path == "vectorized"


def test_a_parameter_the_loop_rebinds_keeps_its_tests():
    for n in (1, 4, 50):
        x = torch.randn(n, 3)
        _same(autovec(rebound)(x), rebound(x))
    assert "if w is None:" not in (explain(rebound, torch.randn(5, 3)).rewritten_source or "")


# probeG: a match capture that rebinds the parameter; a `False` the user wrote (its bindings and
# declarations stay); a one-line comprehension in the second copy (its columns)

def rebound_by_match(x, w=None):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i] * (1.0 if w is None else w)
        match i:
            case 0:
                match 3.0:
                    case w:
                        pass
            case _:
                pass
    return out


def dead_branch_binding(x, w=None):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        if False:
            last = i
        out[i] = x[i] * (1.0 if w is None else w[i])
    return out, last       # noqa: F821 (unbound: the loop raises UnboundLocalError)


def with_comprehension(x, w=None):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = sum([x[i, k] for k in range(2)]) * (1.0 if w is None else w[i])
    return out


def test_a_match_capture_rebinds_the_parameter(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.arange(1.0, 50.0)
    _same(autovec(rebound_by_match)(x), rebound_by_match(x))


def test_a_false_the_user_wrote_keeps_its_bindings(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.arange(1.0, 50.0)
    for fn in (dead_branch_binding, autovec(dead_branch_binding)):
        with pytest.raises(UnboundLocalError):
            fn(x, torch.ones(49))


def test_a_comprehension_in_the_second_copy_still_compiles():
    fast = autovec(with_comprehension)
    x = torch.randn(300, 3)
    for extra in ((None,), (torch.randn(300),)):
        for _ in range(3):
            _same(fast(x, *extra), with_comprehension(x, *extra))
        assert explain(fast, x, *extra).path == "vectorized"
