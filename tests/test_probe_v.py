"""Wrong results found by probeV on shifted names and running sums (stop 48), most of them
pre-existing; each keeps the loop now, or gives the loop's values and types."""
import pytest
import torch

from autovec import explain
from conftest import agrees_with_loop


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")






def _x():
    return torch.arange(9.).reshape(3, 3)


def test_a_shifted_view_changed_in_place_later_in_the_step():
    def f(x):
        prev = torch.zeros(3)
        out = []
        for t in range(x.shape[0]):
            out.append(prev + 1)
            prev = x[t]
            x[t] = 0.0
        return out
    agrees_with_loop(f, torch.ones(3, 3))

    def through_a_name(x):
        prev = torch.zeros(3)
        out = []
        for t in range(x.shape[0]):
            out.append(prev + 1)
            c = x[t]
            prev = c
            c.mul_(2)
        return out
    agrees_with_loop(through_a_name, torch.ones(3, 3))


def test_a_start_in_memory_the_loop_writes_before_its_first_read():
    def shifted(x):
        o = torch.zeros_like(x)
        res = torch.zeros_like(x)
        prev = o[0]
        for t in range(x.shape[0]):
            o[t] = x[t] * 2
            res[t] = prev + 1
            prev = x[t]
        return res

    def summed(x, y):
        s = y[0]
        res = torch.zeros_like(x)
        for t in range(x.shape[0]):
            y[t] += 1
            s = s + x[t]
            res[t] = s
        return res
    agrees_with_loop(shifted, _x())
    agrees_with_loop(summed, torch.arange(6.).reshape(3, 2), torch.ones(3, 2))


def test_a_tensor_start_before_python_number_steps():
    def f(p):
        prev = p[0]
        out = []
        for t in range(p.shape[0]):
            c = p[t].item()
            out.append(c - prev)
            prev = c
        return out
    agrees_with_loop(f, torch.tensor([5, 1, 2]))


def test_a_start_that_requires_grad_where_the_values_do_not():
    def f(x):
        prev = torch.zeros(3, requires_grad=True)
        out = []
        for t in range(x.shape[0]):
            out.append(x[t] - prev)
            prev = x[t] * 2
        return out
    agrees_with_loop(f, _x())


def test_constant_steps_stay_python_numbers():
    def floats(x):
        s = 0.0
        sums = []
        for t in range(x.shape[0]):
            s = 3 + 3 + s
            sums.append(s)
        return sums, s

    def ints(x):
        s = 0
        out = torch.zeros(x.shape[0])
        for t in range(x.shape[0]):
            s += 3 + 3
            out[t] = s
        return s, out
    agrees_with_loop(floats, _x())
    agrees_with_loop(ints, _x())


def test_a_constant_argument_is_not_computed_ahead():
    # (fission hoisted `-1` and copied it per iteration with `.clone()`: AttributeError)
    def f(x):
        prev = torch.zeros(3)
        out = []
        for t in range(x.shape[0]):
            c = x[t] + 1
            out.append(prev.view(-1))
            if t % 2:
                prev = c
            else:
                prev = c
        return out, prev
    agrees_with_loop(f, _x())


def test_views_computed_ahead_of_a_reversed_walk():
    # (from a flipped copy, the batch's rows were no views of x: `prev.zero_()` missed x's row)
    def f(x):
        out2 = []
        for t in reversed(range(x.shape[0])):
            c = x[t].view(3)
            prev = c
            out2.append(prev)
        prev.zero_()
        return out2
    agrees_with_loop(f, _x())
    assert explain(f, _x()).path == "python"


def test_new_values_computed_ahead_of_a_forward_walk_stay_batched():
    # (the check above is for walks back: a name bound twice, which the analysis cannot prove new
    # memory, computed ahead of a forward walk, is the input's view where the loop's is)
    def encode(xs, h, w):
        outs = []
        for t in range(xs.shape[0]):
            e = torch.relu(xs[t] @ w)
            e = e * 2
            h = torch.tanh(e + h)
            outs.append(h)
        return torch.stack(outs), h
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(30, 4, generator=g), torch.zeros(4), torch.randn(4, 4, generator=g))
    agrees_with_loop(encode, *args)
    assert explain(encode, *args).path == "vectorized"
