"""A comprehension or lambda inside a loop that binds a name the loop also uses (`sum(x[i] for i
in range(2))` inside `for i in ..`): inside it the name is another variable, so the loop runs as
written (analysis.loops._no_shadowing). The comprehension itself, its own loop, may still be
batched. Every test compares with the loop itself, with batching forced from one iteration."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _forced(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def generator_rebinds_index(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = sum(x[i] for i in range(2))
    return out


def list_rebinds_index(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.stack([x[i] * 2 for i in range(3)]).sum())
    return torch.stack(out)


def rebinds_a_body_name(x):
    out = []
    for i in range(x.shape[0]):
        v = x[i] * 2
        out.append(v + sum(v for v in range(3)))
    return torch.stack(out)


def lambda_rebinds_index(x):
    out = []
    for i in range(x.shape[0]):
        f = lambda i: x[i] * 3      # noqa: E731
        out.append(f(0) + x[i])
    return torch.stack(out)


def comprehension_rebinds_its_own_target(x):
    return torch.stack([sum(x[i] for i in range(2)) + x[i] for i in range(x.shape[0])])


def own_names_only(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.stack([x[i] * k for k in range(3)]).sum())
    return torch.stack(out)


@pytest.mark.parametrize("fn", [generator_rebinds_index, list_rebinds_index, rebinds_a_body_name,
                                lambda_rebinds_index, comprehension_rebinds_its_own_target])
def test_a_rebound_name_keeps_the_loop(fn):
    x = torch.arange(40.0)
    fast = autovec(fn)
    for _ in range(2):
        torch.testing.assert_close(fast(x.clone()), fn(x.clone()))
    outer = explain(fast, x.clone()).loops[0]
    assert outer.strategy == "python" and "binds" in outer.reason


def test_names_of_the_comprehension_alone_still_batch():
    x = torch.arange(40.0)
    fast = autovec(own_names_only)
    torch.testing.assert_close(fast(x.clone()), own_names_only(x.clone()))
    assert explain(fast, x.clone()).path == "vectorized"
