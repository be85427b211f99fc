"""`return` inside a loop (through `if` / `else` blocks of its body) is read as a `break` with the
value kept, and the return right after the loop (hoist.returns_as_breaks): a first match
(`for i ..: if x[i].sum() > t: return i`) vectorizes as loops ending by `break` do, and every
loop returns what, and when, the original does."""
import traceback

import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def first_above(x, t):
    for i in range(x.shape[0]):
        if x[i].sum() > t:
            return i
    return -1


def first_with_value(x, t):
    for i in range(x.shape[0]):
        s = x[i].sum()
        if s > t:
            return i, s * 2
        elif s < -t:
            return -i, s
    return None


def bare_return(x, t, log):
    for i in range(x.shape[0]):
        if x[i].max() > t:
            log.append(i)
            return
    log.append(-1)


def budget(x, limit):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i].abs().sum().item()
        if total > limit:
            return i, total
    return x.shape[0], total


def in_a_nest(x, t):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > t:
                return i, j
    return None


def with_else_and_finally(x, t, log):
    try:
        for i in range(x.shape[0]):
            if x[i].sum() > t:
                return i
        else:
            log.append("else")
        log.append("after")
    finally:
        log.append("finally")
    return -1


def counting_while(x, t):
    k = 0
    while k < x.shape[0]:
        if x[k].min() > t:
            return k
        k += 1
    return -1


def names_taken(x, t):
    returned, returning = 3, 4
    for i in range(x.shape[0]):
        if x[i].sum() > t:
            return i + returned + returning
    return returned


def nested_def(x, t):
    def first(v):
        for k in range(v.shape[0]):
            if v[k] > t:
                return k
        return -1
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    return first(x[:, 0]), torch.stack(out)


def raising_value(x, t):
    for i in range(x.shape[0]):
        if x[i].sum() > t:
            return 1 / (x[i].sum().item() * 0)
    return 0


def _same(fn, make, calls=6):
    fast = autovec(fn)
    for seed in range(calls):
        torch.manual_seed(seed)
        a = make(seed)
        torch.manual_seed(seed)
        b = make(seed)
        want, got = fn(*a), fast(*b)
        assert type(got) is type(want)
        if isinstance(want, tuple):
            for p, q in zip(want, got):
                assert (torch.equal(p, q) if isinstance(p, torch.Tensor) else p == q), (want, got)
        else:
            assert want == got
        for p, q in zip(a, b):
            if isinstance(p, list):
                assert p == q
    return fast


def _x(seed, shape=(8, 3)):
    return torch.randn(*shape)


@pytest.mark.parametrize("t", [0.5, 2.0, 100.0, -100.0])
def test_a_first_match_returns_and_vectorizes(t):
    fast = _same(first_above, lambda s: (_x(s), t))
    if t > 1:     # (a match at row 0 or 1 leaves nothing before it to batch)
        assert ran_modes(fast)
        ex = explain(fast, _x(0), t)
        assert ex.path == "vectorized" and "returning" in ex.rewritten_source


def test_two_returns_with_values():
    _same(first_with_value, lambda s: (_x(s), 1.5))


def test_a_bare_return_after_a_side_effect():
    _same(bare_return, lambda s: (_x(s), 1.0, []))


def test_a_running_total_returned_part_way():
    _same(budget, lambda s: (_x(s), 6.0))
    _same(budget, lambda s: (_x(s), 1e9))


def test_a_return_in_a_nest_returns_the_first_pair():
    _same(in_a_nest, lambda s: (_x(s, (4, 5)), 1.5))
    _same(in_a_nest, lambda s: (_x(s, (4, 5)), 100.0))


@pytest.mark.parametrize("t", [0.5, 100.0])
def test_else_and_finally_run_as_in_the_loop(t):
    _same(with_else_and_finally, lambda s: (_x(s), t, []))


def test_a_counting_while():
    _same(counting_while, lambda s: (_x(s), -0.5))


def test_names_the_function_uses_are_not_taken():
    _same(names_taken, lambda s: (_x(s), 0.5))
    assert "returned_" in explain(autovec(names_taken), _x(0), 0.5).rewritten_source


def test_a_loop_of_a_function_defined_inside_keeps_its_own_return():
    _same(nested_def, lambda s: (_x(s), 0.3))


def test_an_error_in_the_returned_value_points_at_the_return_line():
    x = torch.ones(4, 2)
    line = raising_value.__code__.co_firstlineno + 3
    fast = autovec(raising_value)
    for _ in range(3):
        with pytest.raises(ZeroDivisionError) as got:
            fast(x, 0.5)
        frames = [fr for fr in traceback.extract_tb(got.value.__traceback__) if fr.name == "raising_value"]
        assert frames and frames[-1].lineno == line



def test_a_new_name_is_found_when_every_spelling_is_taken():
    import ast
    from autovec.analysis.hoist import _fresh_name
    loop = ast.parse("for i in x:\n    pass").body[0]
    taken = {"returned", "returned_1", "returned_1_0"}
    assert _fresh_name("returned", loop, taken) == "returned_1_0_" and "returned_1_0_" in taken
    assert _fresh_name("returning", loop, taken) == "returning"
