"""`torch.tensor([cx, cy, w, 1.0])` of per-iteration Python numbers (anchor boxes, coordinates
from `.item()`, the loop index): one row of numbers per iteration, of the dtype torch.tensor
infers from the elements' kinds (the default float dtype, int64, bool) or a floating `dtype=`.
Checked against the loop: values, dtypes, devices, path."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def anchors(feat_h, feat_w, stride, base):
    out = []
    for y in range(feat_h):
        for x in range(feat_w):
            for a in range(base.shape[0]):
                cx = (x + 0.5) * stride
                cy = (y + 0.5) * stride
                out.append(base[a] + torch.tensor([cx, cy, cx, cy]))
    return torch.stack(out)


def corners(boxes):
    out = []
    for i in range(boxes.shape[0]):
        cx, cy = boxes[i, 0].item(), boxes[i, 1].item()
        w, h = boxes[i, 2].item(), boxes[i, 3].item()
        out.append(torch.tensor([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]))
    return torch.stack(out)


def index_pairs(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.tensor([i, i + 1, 7]) * 2)
    return out


def flags(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.tensor((x[i].item() > 0, True, x[i].item() < -1)))
    return torch.stack(out)


def mixed(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.tensor([i, 0.5, True]))
    return torch.stack(out)


def doubles(x):
    out = []
    for i in range(x.shape[0]):
        v = x[i].item()
        out.append(torch.tensor([v, v * v], dtype=torch.float64))
    return torch.stack(out)


def ints_as_floats(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.tensor([int(x[i].item()), 0.5], dtype=torch.float32))
    return torch.stack(out)


def big_ints(x):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.tensor([x[i].item(), 0.5]))
    return torch.stack(out)


def _same(a, b):
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
        return
    assert a.dtype == b.dtype and a.device == b.device and a.requires_grad == b.requires_grad
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("fn, args, path", [
    (anchors, (3, 4, 16, torch.randn(3, 4) * 10), "vectorized"),
    (corners, (torch.rand(9, 4) * 50,), "vectorized"),
    (index_pairs, (torch.randn(6),), "vectorized"),
    (flags, (torch.randn(8) * 2,), "vectorized"),
    (mixed, (torch.randn(5),), "vectorized"),
    (doubles, (torch.randn(7),), "vectorized"),
    (ints_as_floats, (torch.randn(7) * 100,), "python"),     # (ints into floats by dtype=: the loop)
    # 2**60 + 2**36 + 1: torch.tensor rounds the Python int to a double (2**60 + 2**36), then to
    # float32 (a tie, to even: 2**60); int64 to float32 directly gives 2**60 + 2**37
    (big_ints, (torch.tensor([2 ** 60 + 2 ** 36 + 1, 5]),), "python"),
    (big_ints, (torch.tensor([2 ** 40, 5]),), "vectorized"),
])
def test_rows_of_numbers(fn, args, path):
    f = autovec(fn)
    for _ in range(3):
        _same(f(*args), fn(*args))
    if path is not None:
        assert explain(f, *args).path == path


def test_the_default_dtype_is_the_one_at_the_call():
    x = torch.rand(5, 4)
    f = autovec(corners)
    _same(f(x), corners(x))
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _same(f(x), corners(x))
        assert explain(f, x).path == "vectorized"
    finally:
        torch.set_default_dtype(old)


def test_values_read_with_gradients_are_plain_numbers():
    x = torch.rand(6, 4, requires_grad=True)
    got, want = autovec(corners)(x), corners(x)
    _same(got, want)
    assert not got.requires_grad
