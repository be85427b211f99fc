"""Running values in forms a probe found wrong (before this file): a tensor multiplied in place
by Python ints whose product passes int64, a running number read by a closure or a global
helper the loop calls, and two running values that start as one tensor, one updated in place
and the other rebound. Each against the loop, with the form that keeps it."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def int_product(acc, x):
    for i in range(len(x)):
        acc *= x[i].item()
        acc *= 2
    return acc


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.int32])
def test_a_tensor_times_python_ints_past_int64(dtype):
    fast = autovec(int_product)
    x = torch.full((30,), 3)
    for _ in range(3):
        a, b = torch.ones((), dtype=dtype), torch.ones((), dtype=dtype)
        got, want = fast(a, x), int_product(b, x)
        assert got.dtype == want.dtype and torch.equal(got, want) and torch.equal(a, b)
    small = torch.full((5,), 3)
    a, b = torch.ones((), dtype=dtype), torch.ones((), dtype=dtype)
    assert torch.equal(fast(a, small), int_product(b, small))


def closure_read(x):
    c = 0.0

    def half():
        return c * 0.5              # each step's running value

    for i in range(len(x)):
        c += x[i].item()
        c += half()
    return c


G = 0.0


def _half_of_g():
    return G * 0.5


def global_read(x):
    global G
    G = 0.0
    for i in range(len(x)):
        G += x[i].item() + _half_of_g()
    return G


@pytest.mark.parametrize("fn", [closure_read, global_read])
def test_a_running_number_a_called_function_reads(fn):
    fast = autovec(fn)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    for _ in range(3):
        assert fast(x) == fn(x) == (24.5625 if fn is closure_read else 16.375)
    assert "may read" in explain(fast, x).loops[0].reason


def nonlocal_count(x):
    c = 0

    def seen():
        return c

    for i in range(x.shape[0]):
        c += int(x[i] > 0)          # no call the closure could see the steps through
    return c, seen()


def test_a_closure_variable_with_no_call_in_the_loop_still_vectorizes():
    fast = autovec(nonlocal_count)
    x = torch.randn(500, generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        assert fast(x) == nonlocal_count(x)
    assert set(fast._autovec_state.runtime.ran.values())


def two_starts(a, b, x, y):
    for i in range(len(x)):
        a += x[i]                   # in place: the caller's tensor, which `b` also starts from
        b = b + y[i]
    return a, b


def test_two_running_values_from_one_tensor():
    fast = autovec(two_starts)
    x = torch.tensor([[1.0], [2.0], [3.0]])
    y = torch.tensor([[10.0], [20.0], [30.0]])
    for _ in range(3):
        t, u = torch.zeros(1), torch.zeros(1)
        got, want = fast(t, t, x, y), two_starts(u, u, x, y)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and torch.equal(t, u)
    t, s = torch.zeros(1), torch.zeros(1)
    got, want = fast(t, s, x, y), two_starts(torch.zeros(1), torch.zeros(1), x, y)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])



def test_a_global_read_back_through_its_module():
    import importlib
    import pathlib
    import sys
    import tempfile
    src = '''
import torch
tot = torch.zeros(())
def f(x):
    global tot
    tot = torch.zeros(())
    import _autovec_probe_mod as me
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        tot = tot + x[i]
        out[i] = me.tot          # the running global, through the module
    return out
'''
    d = tempfile.mkdtemp()
    path = pathlib.Path(d) / "_autovec_probe_mod.py"
    path.write_text(src)
    sys.path.insert(0, d)
    try:
        mod = importlib.import_module("_autovec_probe_mod")
        fast = autovec(mod.f)
        x = torch.tensor([1.0, 2.0, 3.0, 4.0])
        for _ in range(3):
            assert torch.equal(fast(x), torch.tensor([1.0, 3.0, 6.0, 10.0]))
        assert "may read `tot`" in explain(fast, x).loops[0].reason
    finally:
        sys.path.remove(d)
        sys.modules.pop("_autovec_probe_mod", None)
