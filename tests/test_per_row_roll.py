"""`torch.roll` of each iteration's row by its own shift (an augmentation's random offsets,
`torch.roll(wav[i], int(s[i]))`): batched as a gather of each row's elements from its own
positions (lowering.batched._roll, batching.roll); a shift that is the same in every iteration
rolls the batch. A data move, so the values and gradients are the loop's bit for bit."""
import pytest
import torch

from autovec import autovec, explain
from conftest import agrees_with_loop, outcome


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def roll_flat(x, s):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.roll(x[i], int(s[i]))           # (no dims: the row's elements in order)
    return out


def roll_last(x, s):
    return torch.stack([torch.roll(x[i], int(s[i]), dims=-1) for i in range(x.shape[0])])


def roll_method(x, s):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].roll(s[i].item(), 0))
    return torch.stack(out)


def roll_fixed(x, s):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.roll(x[i], 2, dims=1) * 2
    return out


def roll_then_add(x, s):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.roll(x[i], shifts=int(s[i]), dims=1) + x[i]
    return out


FORMS = [roll_flat, roll_last, roll_method, roll_fixed, roll_then_add]


@pytest.mark.parametrize("fn", FORMS)
@pytest.mark.parametrize("shape", [(7, 3, 4), (5, 6, 2), (1, 2, 3)])
def test_rows_rolled_by_their_own_shifts(fn, shape):
    g = torch.Generator().manual_seed(shape[0])
    x = torch.randn(*shape, generator=g)
    s = torch.randint(-9, 10, (shape[0],), generator=g)      # (negative, and past the row's length)
    agrees_with_loop(fn, x, s, path="vectorized")


@pytest.mark.parametrize("fn", [roll_flat, roll_method])
def test_rows_of_one_dimension_and_empty_rows(fn):
    s = torch.tensor([3, -1, 0, 11])
    agrees_with_loop(fn, torch.randn(4, 5), s, path="vectorized")
    for x in (torch.randn(4, 0), torch.randn(0, 5)):
        got, want = outcome(autovec(fn), x, s), outcome(fn, x, s)
        if isinstance(want, tuple):
            assert got == want
        else:
            assert torch.equal(got, want) and got.shape == want.shape


@pytest.mark.parametrize("fn", FORMS)
def test_gradients_flow_back_to_each_element(fn):
    g = torch.Generator().manual_seed(2)
    x0 = torch.randn(6, 3, 4, generator=g)
    s = torch.randint(-5, 6, (6,), generator=g)
    w = torch.randn(6, 3, 4, generator=g)
    grads = []
    for f in (fn, autovec(fn)):
        x = x0.clone().requires_grad_()
        (f(x, s) * w).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def test_what_roll_refuses_keeps_the_loop_and_its_error():
    def float_shift(x, s):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = torch.roll(x[i], s[i].item())     # (a float shift: torch raises)
        return out

    def two_dims(x, s):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = torch.roll(x[i], (int(s[i]), 1), dims=(0, 1))
        return out

    def bad_dim(x, s):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = torch.roll(x[i], int(s[i]), dims=5)
        return out
    x = torch.randn(5, 3, 4)
    for fn, s in ((float_shift, torch.rand(5)), (two_dims, torch.randint(0, 3, (5,))),
                  (bad_dim, torch.randint(0, 3, (5,)))):
        got, want = outcome(autovec(fn), x, s), outcome(fn, x, s)
        if isinstance(want, tuple):
            assert isinstance(got, tuple) and got[0] is want[0]
        else:
            assert torch.equal(got, want)
        assert explain(fn, x, s).path == "python"


def test_a_shift_torch_refuses_raises_as_the_loop_does():
    # (probe Y: below -2**62 torch.roll raises; the batched gather computed it after a warm call)
    x = torch.arange(12.).view(3, 4)
    fast = autovec(roll_flat)
    for _ in range(3):
        fast(x, torch.tensor([1, 2, 3]))
    for s in (torch.tensor([-2 ** 63] * 3), torch.tensor([1, -2 ** 62 - 5, 2])):
        want = outcome(roll_flat, x, s)
        assert isinstance(want, tuple) and want[0] is RuntimeError
        for _ in range(2):
            got = outcome(fast, x, s)
            assert isinstance(got, tuple) and got[0] is RuntimeError
    s = torch.tensor([-2 ** 62, 2 ** 63 - 1, 2 ** 62 + 1])     # (the extremes torch takes)
    assert torch.equal(fast(x, s), roll_flat(x, s))


def roll_by_tensor(x, s):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.roll(x[i], s[i], dims=(0,))     # (a 0-d integer tensor, a 1-tuple of dims)
    return out


def roll_by_tuple(x, s):
    return torch.stack([x[i].roll((int(s[i]),)) for i in range(x.shape[0])])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_shifts_as_integer_tensors_and_one_element_tuples(dtype):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 5, 2, generator=g)
    s = torch.randint(-7, 8, (6,), generator=g).to(dtype)
    agrees_with_loop(roll_by_tensor, x, s, path="vectorized")
    agrees_with_loop(roll_by_tuple, x, s, path="vectorized")
    f = torch.rand(6, generator=g)       # (a float tensor: torch raises)
    got, want = outcome(autovec(roll_by_tensor), x, f), outcome(roll_by_tensor, x, f)
    assert isinstance(want, tuple) and got[0] is want[0]


def test_rolls_of_single_elements():
    # (a 1-d input: each row is 0-d, which torch.roll gives back as it is)
    x = torch.randn(6)
    s = torch.tensor([1, -2, 0, 5, 3, -1])
    agrees_with_loop(roll_flat, x, s, path="vectorized")
