"""`torch.rot90` of each iteration's image by its own count of quarter turns (rotation
prediction, `torch.rot90(x[i], int(k[i]), dims=(1, 2))`): each row takes the batch's rotation
by its count mod 4 (lowering.batched._rot90, batching.rot90); a count that is the same in every
iteration rotates the batch. A data move, so values and gradients are the loop's bit for bit;
rows that are not square and turn by an odd count would change shape, which the loop decides."""
import pytest
import torch

from autovec import autovec, explain
from conftest import agrees_with_loop, outcome


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def rotate_images(x, k):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.rot90(x[i], int(k[i]), dims=(1, 2))
    return out


def rotate_default_dims(x, k):
    return torch.stack([x[i].rot90(int(k[i])) for i in range(x.shape[0])])


def rotate_by_tensor(x, k):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.rot90(x[i], k[i], [0, 1]) * 2)
    return torch.stack(out)


def rotate_fixed(x, k):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.rot90(x[i], 2, (-2, -1))
    return out


@pytest.mark.parametrize("fn, shape", [(rotate_images, (6, 3, 4, 4)), (rotate_default_dims, (6, 5, 5)),
                                       (rotate_by_tensor, (6, 4, 4)), (rotate_fixed, (5, 2, 3, 7))])
def test_each_image_turned_by_its_own_count(fn, shape):
    g = torch.Generator().manual_seed(shape[0] + shape[-1])
    x = torch.randn(*shape, generator=g)
    k = torch.randint(-9, 10, (shape[0],), generator=g)     # (negative counts, and past 4)
    agrees_with_loop(fn, x, k, path="vectorized")


@pytest.mark.parametrize("fn", [rotate_images, rotate_by_tensor])
def test_gradients_reach_each_pixel_once(fn):
    g = torch.Generator().manual_seed(3)
    shape = (5, 3, 4, 4) if fn is rotate_images else (5, 4, 4)
    x0 = torch.randn(*shape, generator=g)
    k = torch.randint(0, 4, (5,), generator=g)
    w = torch.randn(*shape, generator=g)
    grads = []
    for f in (fn, autovec(fn)):
        x = x0.clone().requires_grad_()
        (f(x, k) * w).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def test_rows_that_are_not_square():
    x = torch.randn(4, 3, 5)
    even = torch.tensor([0, 2, -2, 4])
    agrees_with_loop(rotate_default_dims, x, even, path="vectorized")   # (half turns keep the shape)
    odd = torch.tensor([0, 1, 2, 3])
    got, want = outcome(autovec(rotate_default_dims), x, odd), outcome(rotate_default_dims, x, odd)
    assert isinstance(want, tuple) and got[0] is want[0]      # (torch.stack of two shapes raises)
    y = torch.randn(4, 2, 3, 5)
    got, want = outcome(autovec(rotate_images), y, odd), outcome(rotate_images, y, odd)
    assert isinstance(want, tuple) and got[0] is want[0]      # (a turned row does not fit `out[i]`)


def test_counts_torch_refuses_keep_the_loop():
    x = torch.randn(4, 4, 4)
    f = torch.rand(4)
    got, want = outcome(autovec(rotate_by_tensor), x, f), outcome(rotate_by_tensor, x, f)
    assert isinstance(want, tuple) and got[0] is want[0]
    assert explain(rotate_by_tensor, x, f).path == "python"
