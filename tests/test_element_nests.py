"""Loop nests whose levels walk the elements of a name (`for p in pos: for q in neg:`, also
`for k, p in enumerate(pos)`): each such level counts by an index of its own over
`range(len(pos))` and the body reads `pos[index]` where it read `p` (analysis.nest_levels,
runtime.walked_range), so the whole nest runs as one batch, as its `range` spelling does."""
import sys

import pytest
import torch

from autovec import autovec, explain
from conftest import check_loop, ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def pair_gaps(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            c += (p - q).abs()
    return c


def wins(pos, neg):
    c = torch.zeros(())
    for p in pos:
        for q in neg:
            if p > q:
                c += 1
    return c


def squared_distances(X, Y):
    t = 0.0
    for x in X:
        for y in Y:
            t = t + (x - y).norm() ** 2
    return t


def weighted_by_position(pos, neg):
    c = 0
    for i, p in enumerate(pos):
        for j, q in enumerate(neg):
            c += int(p > q) * (i + j)
    return c


def mixed_levels(pos, W):
    out = torch.zeros(len(pos), W.shape[0])
    for i, p in enumerate(pos):
        for j in range(W.shape[0]):
            out[i, j] = (p * W[j]).sum()
    return out


def three_deep(a, b, c):
    s = 0.0
    for x in a:
        for y in b:
            for z in c:
                s += x * y - z
    return s


i = 10.0      # (a global the body reads under a name the nest could have counted with)


def reads_a_global_i(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            c += p * q + i
    return c


def test_element_nests_run_as_one_batch():
    g = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(7, generator=g), torch.randn(5, generator=g)
    assert check_loop(pair_gaps, pos, neg)
    assert check_loop(wins, pos, neg)
    assert check_loop(squared_distances, torch.randn(6, 3, generator=g), torch.randn(4, 3, generator=g))
    f = autovec(weighted_by_position)
    got = f(pos, neg)
    assert type(got) is int and got == weighted_by_position(pos, neg) and _ran(f)
    assert check_loop(mixed_levels, pos, torch.randn(3, generator=g))
    assert check_loop(three_deep, pos, neg, torch.randn(3, generator=g))
    assert check_loop(reads_a_global_i, pos, neg)
    assert check_loop(pair_gaps, pos.double().requires_grad_(), neg.double().requires_grad_(), grad=(0, 1))
    got = autovec(pair_gaps)(torch.randn(0), neg)
    assert type(got) is float and got == 0.0
    f = autovec(pair_gaps)
    loops = explain(f, pos, neg).loops
    assert loops[0].strategy == "reduction" and "part of the loop nest" in loops[1].reason


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b)
    return a == b


def _r(n, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("make", [
    lambda: ((float(v) for v in range(4)), _r(3)),          # a generator: one walk uses it up
    lambda: (torch.nn.Parameter(_r(4, 1)), _r(3)),          # a subclass
    lambda: (list(_r(4, 1).unbind(0)), _r(3)),              # a list of tensors
    lambda: ({1.0: 2, 3.0: 4}, _r(3)),                       # a dict walks its keys
], ids=["generator", "parameter", "list", "dict"])
def test_other_sequences_keep_the_loop(make):
    f = autovec(pair_gaps)
    got, want = f(*make()), pair_gaps(*make())
    assert _same(got, want)
    assert not _ran(f)


def test_a_0d_tensor_raises_as_the_loop():
    with pytest.raises(TypeError) as want:
        pair_gaps(torch.tensor(1.0), torch.randn(3))
    with pytest.raises(TypeError) as got:
        autovec(pair_gaps)(torch.tensor(1.0), torch.randn(3))
    assert str(got.value) == str(want.value)


def element_read_after(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            c += p * q
    return c, p


def element_in_closure(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            c += (lambda: p * q)()
    return c


def sequence_rebound(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            c += p - q
        pos = neg
    return c


def walks_the_outer_element(X):
    c = 0.0
    for row in X:
        for v in row:
            c += v * 2
    return c


def enumerate_from_one(pos, neg):
    c = 0.0
    for k, p in enumerate(pos, 1):
        for q in neg:
            c += p * q * k
    return c


def sequence_mutated(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            c += p * q
            neg[0] = neg[0] + 0
    return c


@pytest.mark.parametrize("fn", [element_read_after, element_in_closure, sequence_rebound, walks_the_outer_element,
                                enumerate_from_one, sequence_mutated])
def test_forms_the_nest_does_not_take(fn):
    args = (torch.randn(4, 3),) if fn is walks_the_outer_element else (torch.randn(4), torch.randn(3))
    f = autovec(fn)
    got, want = f(*[a.clone() for a in args]), fn(*[a.clone() for a in args])
    assert all(_same(x, y) for x, y in zip(got if isinstance(got, tuple) else (got,),
                                            want if isinstance(want, tuple) else (want,)))
    assert explain(f, *args).loops[0].strategy == "python"      # (the outer loop as written)


def element_rebound(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            p = p * 2          # (carried from one inner iteration to the next)
            c += p * q
    return c


def element_in_later_closure(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            c += p * q

    def last():
        return p
    return c, last()


def index_names_taken(pos, neg):
    c = 0.0
    for p in pos:
        for q in neg:
            c += p * q
    for i in range(2):
        for j in range(2):
            c += i * j
    return c


@pytest.mark.parametrize("fn", [element_rebound, element_in_later_closure])
def test_element_bound_elsewhere_keeps_the_loop(fn):
    args = (_r(4), _r(3, 1))
    f = autovec(fn)
    got, want = f(*args), fn(*args)
    assert all(torch.allclose(torch.as_tensor(x), torch.as_tensor(y)) for x, y in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)))
    assert explain(f, *args).loops[0].strategy == "python"


def test_the_nest_counts_with_names_the_function_does_not_use():
    args = (_r(4), _r(3, 1))
    f = autovec(index_names_taken)
    assert torch.allclose(f(*args), index_names_taken(*args))
    assert _ran(f)


def element_read_in_finally(pos, neg):
    c = 0.0
    try:
        for p in pos:
            for q in neg:
                c += p * q
    finally:
        c = c + p
    return c


def element_read_in_try_else(pos, neg):
    c = 0.0
    try:
        for p in pos:
            for q in neg:
                c += p * q
    except ValueError:
        pass
    else:
        c = c + q
    return c


def index_read_in_finally(x):
    c = 0.0
    try:
        for k in range(x.shape[0]):
            c += x[k]
    finally:
        c = c + k
    return c


def _except_star():
    if sys.version_info < (3, 11):
        pytest.skip("`except*` is Python 3.11's")
    from trystar_loops import element_read_in_except_star
    return element_read_in_except_star


@pytest.mark.parametrize("fn", [element_read_in_finally, element_read_in_try_else, _except_star])
def test_a_read_in_a_finally_else_or_handler_after_the_nest_keeps_it(fn):
    # (found by a probe: names.read_after looked at the statements after the loop in its own
    # block and at `except` handlers, not at `else` / `finally` blocks or `except*`; the nest no
    # longer bound `p`, and the read raised UnboundLocalError. Index loops had the same flaw)
    if fn is _except_star:
        fn = _except_star()
    args = (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0]))
    f = autovec(fn)
    assert torch.equal(f(*args), fn(*args))
    assert explain(f, *args).loops[0].strategy == "python"


def test_an_index_read_in_finally_after_a_loop_is_bound():
    x = torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(autovec(index_read_in_finally)(x), index_read_in_finally(x))
