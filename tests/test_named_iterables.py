"""A loop over what a torch function returns (`for i in torch.arange(n)`) walks a name bound
right before it (hoist.named_iterables): the call runs once, at the same point, and the loop
is planned as a walk over that tensor."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def over_arange(x):
    out = []
    for i in torch.arange(x.shape[0]):
        out.append(x[i] * 2)
    return torch.stack(out), i


def over_randperm(x):
    out = []
    for i in torch.randperm(x.shape[0]):
        out.append(x[i].sum())
    return torch.stack(out)


def over_a_generator(x):
    out = []
    for r in iter(x.unbind(0)):
        out.append(r * 2)
    return out


def names_taken(x):
    i_values = 3
    out = []
    for i in torch.arange(x.shape[0]):
        out.append(x[i] + i_values)
    return torch.stack(out)


def nested_def(x):
    def inner(n):
        return [int(k) for k in torch.arange(n)]
    out = []
    for i in torch.arange(x.shape[0]):
        out.append(x[i] * 2)
    return torch.stack(out), inner(3)


def _same(fn, make, calls=3):
    fast = autovec(fn)
    for seed in range(calls):
        torch.manual_seed(seed)
        want = fn(*make())
        torch.manual_seed(seed)
        got = fast(*make())
        for p, q in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            if isinstance(p, torch.Tensor):
                assert p.dtype == q.dtype
                torch.testing.assert_close(q, p, rtol=0, atol=0)
            else:
                assert p == q
    return fast


def test_a_loop_over_arange_vectorizes():
    fast = _same(over_arange, lambda: (torch.randn(6, 3),))
    assert ran_modes(fast)
    assert "i_values = torch.arange(x.shape[0])" in explain(fast, torch.randn(6, 3)).rewritten_source


def test_a_random_permutation_is_drawn_once_at_the_same_point():
    fast = autovec(over_randperm)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(7, 2)
        want, after_want = over_randperm(x), torch.rand(2)
        torch.manual_seed(seed)
        x = torch.randn(7, 2)
        got, after_got = fast(x), torch.rand(2)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(after_got, after_want, rtol=0, atol=0)   # (the same draws, no more)
    assert ran_modes(fast)


def test_other_calls_are_walked_as_written(caplog):
    fast = autovec(over_a_generator)
    x = torch.randn(4, 3)
    for p, q in zip(over_a_generator(x), fast(x)):
        torch.testing.assert_close(q, p)
    ex = explain(fast, x)
    assert "r_values" not in ex.rewritten_source and "for r in iter(x.unbind(0))" in ex.rewritten_source
    assert "could not rewrite" not in caplog.text


def test_a_name_the_function_uses_is_not_taken():
    _same(names_taken, lambda: (torch.randn(5, 3),))
    assert "i_values_" in explain(autovec(names_taken), torch.randn(5, 3)).rewritten_source


def test_a_function_defined_inside_keeps_its_loops():
    _same(nested_def, lambda: (torch.randn(5, 3),))
