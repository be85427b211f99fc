"""`max(0, x2 - x1)` with a 0-d tensor: Python's max gives the int 0 in some iterations and the
tensor in others. The batch holds both in the tensor's dtype; that is only the loop's answer
where the value goes on into arithmetic with per-iteration tensors of that dtype (the IoU
spelling), so every other use keeps the loop (lowering/batched.py, _mixed_pick)."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def iou(a, b):
    out = torch.zeros(a.shape[0], dtype=a.dtype)
    for i in range(a.shape[0]):
        x1 = max(a[i, 0], b[i, 0])
        y1 = max(a[i, 1], b[i, 1])
        x2 = min(a[i, 2], b[i, 2])
        y2 = min(a[i, 3], b[i, 3])
        inter = max(0, x2 - x1) * max(0, y2 - y1)
        area_a = (a[i, 2] - a[i, 0]) * (a[i, 3] - a[i, 1])
        area_b = (b[i, 2] - b[i, 0]) * (b[i, 3] - b[i, 1])
        out[i] = inter / (area_a + area_b - inter)
    return out


def iou_list(a, b):
    ious = []
    for i in range(a.shape[0]):
        w = min(a[i, 2], b[i, 2]) - max(a[i, 0], b[i, 0])
        h = min(a[i, 3], b[i, 3]) - max(a[i, 1], b[i, 1])
        inter = max(w, 0.0) * max(h, 0.0)
        union = (a[i, 2] - a[i, 0]) * (a[i, 3] - a[i, 1]) + (b[i, 2] - b[i, 0]) * (b[i, 3] - b[i, 1]) - inter
        ious.append(inter / union)
    return torch.stack(ious)


def hinge_rows(x, y):
    out = torch.empty(x.shape[0], dtype=x.dtype)
    for i in range(x.shape[0]):
        m = -min(1, y[i] * x[i].sum())
        out[i] = x[i].mean() + m
    return out


def boxes(n, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    lo = torch.rand(n, 2, generator=g)
    return torch.cat([lo, lo + torch.rand(n, 2, generator=g) * 0.6], 1).to(dtype)


@pytest.mark.parametrize("fn", [iou, iou_list])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_iou_spellings_are_vectorized_and_exact(fn, dtype):
    a, b = boxes(40, dtype, 1), boxes(40, dtype, 2)
    b[:5] = a[:5] + 2          # no overlap: both picks are the int 0 in the loop
    f = autovec(fn)
    got = f(a, b)
    assert _ran(f) == {"batched"}
    want = fn(a, b)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_with_gradients_the_loop_runs():
    """A tensor Python's max leaves out is no part of the loop's graph; the batch's `where`
    would give it a zero gradient (or NaN through an infinite derivative)."""
    a, b = boxes(30), boxes(30, seed=3)
    b[:4] = a[:4] + 2
    assert_equivalent(iou, a.requires_grad_(), b.requires_grad_(), grad=True)
    f = autovec(iou)
    f(a, b)
    assert not _ran(f)


def test_nan_picks_as_python_max_does():
    """max(0, nan) is 0 (nan > 0 is False); max(nan, 0) is nan."""
    a, b = boxes(6), boxes(6, seed=4)
    a[1, 2] = float("nan")
    a[3, 0] = float("nan")
    want = iou(a, b)
    got = autovec(iou)(a, b)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())
    assert_equivalent(iou_list, a, b)


def test_negated_min_and_the_other_order():
    x, y = torch.randn(25, 3), torch.randn(25).sign()
    f = autovec(hinge_rows)
    assert torch.equal(f(x, y), hinge_rows(x, y))
    assert _ran(f) == {"batched"}


def kept_output(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = max(0, x[i].sum())
    return out


def kept_list(x):
    vals = []
    for i in range(x.shape[0]):
        vals.append(max(0, x[i].sum()) * x[i].mean())
        vals.append(max(0, x[i].sum()))
    return vals


def kept_compare(x):
    n = 0
    for i in range(x.shape[0]):
        if max(0, x[i].sum()) > 0.5:
            n += 1
    return n


def kept_divide(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i, 0] + max(0, x[i, 1]) / max(0, x[i, 2])      # 0 / 0 raises in the loop
    return out


def kept_method(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = max(0, x[i].sum()).abs() + x[i, 0]            # an int has no .abs()
    return out


def kept_other_constant(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = max(0.1, x[i].sum()) * x[i, 0]
    return out


def kept_int_boxes(a, b):
    return iou(a, b)


def test_a_store_of_max_with_a_number_is_a_where():
    # (`out[i] = max(0, s)` is `out[i] = s if s > 0 else 0` (frontend._NumberExtremes): a store
    # of either side, which batches)
    x = torch.randn(12, 3).abs() + 0.1
    x[-4:] = -x[-4:]
    f = autovec(kept_output)
    assert torch.equal(f(x), kept_output(x))
    assert _ran(f) == {"batched"}
    assert_equivalent(kept_output, x)


@pytest.mark.parametrize("fn", [kept_list, kept_compare, kept_divide, kept_method, kept_other_constant])
def test_other_uses_keep_the_loop(fn):
    x = torch.randn(12, 3).abs() + 0.1
    x[-4:] = -x[-4:]        # (the first rows, which the batched body is probed on, pick the tensor)
    try:
        want = fn(x)
    except Exception as e:
        with pytest.raises(type(e)):
            autovec(fn)(x)
        return
    f = autovec(fn)
    got = f(x)
    assert not _ran(f)
    assert explain(f, x).path == "python"
    assert type(got) is type(want)
    assert_equivalent(fn, x)


def test_integer_boxes_keep_the_loop():
    a, b = (boxes(10) * 10).long(), (boxes(10, seed=5) * 10).long()
    f = autovec(iou)
    assert torch.equal(f(a, b), iou(a, b))
    assert not _ran(f)
