"""A store by a computed index into a tensor the iteration made (`r[y[i]] = v[i]`), which runs
under vmap: with repeated indices the loop keeps the last write to each, one row at a time,
where vmap's one index_put_ over the batch is split between threads on the CPU and may keep
another. The batch runs with torch's deterministic algorithms (sorted indices, the last write
kept), and the setting is as the caller had it afterwards (runtime._stores_by_index)."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture
def two_threads():
    was = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(was)


def one_hot_rows(y, v, width: int = 50):
    out = []
    for i in range(y.shape[0]):
        r = torch.zeros(width)
        r[y[i]] = v[i]
        out.append(r)
    return torch.stack(out)


def test_repeated_indices_keep_the_loops_last_write(two_threads):
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 50, (255, 2000), generator=g)     # (the threads' split falls inside a row)
    v = torch.randn(255, 2000, generator=g)
    want = one_hot_rows(y, v)
    f = autovec(one_hot_rows)
    for _ in range(10):
        assert torch.equal(f(y, v), want)
    assert explain(f, y, v).path == "vectorized"


@pytest.mark.parametrize("mode", [False, True])
def test_the_callers_deterministic_setting_is_kept(mode):
    was, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        torch.use_deterministic_algorithms(mode, warn_only=True)
        y, v = torch.randint(0, 50, (20, 30)), torch.randn(20, 30)
        f = autovec(one_hot_rows)
        assert torch.equal(f(y, v), one_hot_rows(y, v))
        assert torch.are_deterministic_algorithms_enabled() is mode
        assert torch.is_deterministic_algorithms_warn_only_enabled() is True
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn)


def index_put_rows(y, v, width: int = 50):
    out = []
    for i in range(y.shape[0]):
        r = torch.zeros(width)
        r.index_put_((y[i],), v[i])
        out.append(r)
    return torch.stack(out)


def test_index_put_method_keeps_the_loops_last_write(two_threads):
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, 50, (255, 2000), generator=g)
    v = torch.randn(255, 2000, generator=g)
    want = index_put_rows(y, v)
    f = autovec(index_put_rows)
    for _ in range(5):
        assert torch.equal(f(y, v), want)
