"""Windows in loop nests: `img[:, i:i + p, j:j + p]`, `x[i:i + k, j:j + k]` with bounds that
change along one level each are one batch of x.unfold's windows, levels first
(batching._Helpers.window_nd): convolutions, pooling and patch extraction written by hand."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def conv2d(x, w):
    k = w.shape[0]
    out = torch.zeros(x.shape[0] - k + 1, x.shape[1] - k + 1)
    for i in range(x.shape[0] - k + 1):
        for j in range(x.shape[1] - k + 1):
            out[i, j] = (x[i:i + k, j:j + k] * w).sum()
    return out


def patchify(img, p):
    patches = []
    for i in range(0, img.shape[1], p):
        for j in range(0, img.shape[2], p):
            patches.append(img[:, i:i + p, j:j + p])
    return torch.stack(patches)


def max_pool(x, k):
    out = torch.empty(x.shape[0] // k, x.shape[1] // k)
    for i in range(x.shape[0] // k):
        for j in range(x.shape[1] // k):
            out[i, j] = x[i * k:(i + 1) * k, j * k:(j + 1) * k].max()
    return out


def channel_pool(x):
    # windows along the last two dimensions, a channel picked by an integer
    out = torch.empty(x.shape[1] - 1, x.shape[2] - 1)
    for i in range(x.shape[1] - 1):
        for j in range(x.shape[2] - 1):
            out[i, j] = x[1, i:i + 2, j:j + 2].mean()
    return out


def rows_only(x, k):
    # a window along one level of the nest; the other level indexes another tensor
    out = torch.empty(x.shape[0] - k + 1, 3)
    for i in range(x.shape[0] - k + 1):
        for j in range(3):
            out[i, j] = x[i:i + k].sum() * (j + 1)
    return out


def swapped(x):
    # the inner level's window along the first dimension
    out = torch.empty(x.shape[1] - 1, x.shape[0] - 2)
    for i in range(x.shape[1] - 1):
        for j in range(x.shape[0] - 2):
            out[i, j] = x[j:j + 3, i:i + 2].sum()
    return out


CASES = [
    (conv2d, lambda: (torch.randn(14, 11), torch.randn(3, 3))),
    (patchify, lambda: (torch.randn(3, 16, 12), 4)),
    (max_pool, lambda: (torch.randn(12, 9), 3)),
    (channel_pool, lambda: (torch.randn(3, 7, 6),)),
    (rows_only, lambda: (torch.randn(20, 2), 4)),
    (swapped, lambda: (torch.randn(9, 6),)),
    (conv2d, lambda: (torch.randn(3, 11), torch.randn(3, 3))),       # one iteration of the outer level
    (patchify, lambda: (torch.randn(2, 8, 4), 4)),                   # and of the inner one
]


@pytest.mark.parametrize("fn, make", CASES, ids=[f"{c[0].__name__}-{k}" for k, c in enumerate(CASES)])
def test_nest_windows_are_batched_and_equal_to_the_loop(fn, make):
    args = make()
    f = autovec(fn)
    torch.testing.assert_close(f(*args), fn(*args))
    assert _ran(f) == {"batched"}
    assert explain(f, *args).path == "vectorized"
    assert_equivalent(fn, *args, trials=3)


def test_nest_windows_of_a_transposed_or_half_input():
    f = autovec(conv2d)
    x, w = torch.randn(11, 14).t(), torch.randn(3, 3)
    torch.testing.assert_close(f(x, w), conv2d(x, w))
    xh, wh = torch.randn(9, 8, dtype=torch.float64), torch.randn(2, 2, dtype=torch.float64)
    torch.testing.assert_close(f(xh, wh), conv2d(xh, wh))
    assert _ran(f) == {"batched"}


def test_gradients_of_overlapping_nest_windows_add_up():
    x = torch.randn(10, 9, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    assert_equivalent(conv2d, x, w, grad=True)
    f = autovec(conv2d)
    f(x, w).square().sum().backward()
    assert _ran(f) == {"batched"}
    img = torch.randn(2, 8, 8, requires_grad=True)
    assert_equivalent(patchify, img, 4, grad=True)


def ragged(x, p):
    # the last windows are cut short by the tensor's end: Python clips the slice
    out = []
    for i in range(0, x.shape[0], p):
        for j in range(0, x.shape[1], p):
            out.append(x[i:i + p, j:j + p].sum())
    return out


def diagonal(x):
    out = torch.empty(x.shape[0] - 2, 2)
    for i in range(x.shape[0] - 2):
        for j in range(2):
            out[i, j] = x[i:i + 3, i:i + 3].sum() + j    # two windows along one level
    return out


def test_clipped_or_diagonal_nest_windows_keep_the_loop():
    x = torch.randn(10, 7)
    f = autovec(ragged)
    torch.testing.assert_close(torch.stack(f(x, 3)), torch.stack(ragged(x, 3)))
    assert not _ran(f)
    g = autovec(diagonal)
    torch.testing.assert_close(g(x), diagonal(x))
    assert not _ran(g)
    # the same function vectorizes where the windows fit
    y = torch.randn(9, 6)
    torch.testing.assert_close(torch.stack(f(y, 3)), torch.stack(ragged(y, 3)))
    assert _ran(f) == {"batched"}


def window_list(x):
    # the windows themselves, kept as a list: views of x, which see later writes into it
    out = []
    for i in range(x.shape[0] - 1):
        for j in range(x.shape[1] - 1):
            out.append(x[i:i + 2, j:j + 2])
    return out


def test_a_list_of_nest_windows_stays_views_of_the_input():
    x = torch.randn(5, 4)
    got, want = autovec(window_list)(x.clone()), window_list(x.clone())
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    y = torch.randn(5, 4)
    rows = autovec(window_list)(y)
    y.add_(1.0)
    for a, b in zip(rows, window_list(y)):
        torch.testing.assert_close(a, b)
