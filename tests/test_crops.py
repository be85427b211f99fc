"""Crops at per-iteration offsets: a per-iteration row of a loop-invariant tensor (or a
per-iteration tensor) sliced by per-iteration bounds of one width along one or more other
dimensions (`img[i, :, y[i]:y[i] + h, x[i]:x[i] + w]`, `seq[i, s[i]:s[i] + L]`) is one gather of
x.unfold's windows in a batched body (batching._Helpers.crop). Bounds that Python's slicing
would clip, rows out of range and windows of several widths keep the loop."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran, raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def random_crops(img, oy, ox, h: int, w: int):
    out = []
    for i in range(img.shape[0]):
        out.append(img[i, :, oy[i]:oy[i] + h, ox[i]:ox[i] + w])
    return torch.stack(out)


def crops_from_ints(img, oy, ox, h: int, w: int):
    out = []
    for i in range(img.shape[0]):
        y0 = int(oy[i])
        x0 = int(ox[i])
        out.append(img[i, :, y0:y0 + h, x0:x0 + w])
    return torch.stack(out)


def crops_into(img, oy, ox, h: int, w: int):
    out = torch.zeros(img.shape[0], img.shape[1], h, w, dtype=img.dtype)
    for i in range(img.shape[0]):
        out[i] = img[i, :, oy[i]:oy[i] + h, ox[i]:ox[i] + w] * 2
    return out


def spans(seq, starts, length: int):
    out = torch.empty(seq.shape[0], length, seq.shape[2])
    for b in range(seq.shape[0]):
        out[b] = seq[b, starts[b]:starts[b] + length, :]       # a window before a whole dimension
    return out


def picked_rows(x, rows, starts, k: int):
    res = []
    for j in range(rows.shape[0]):
        res.append(x[rows[j], :, starts[j]:starts[j] + k].sum(-1))
    return torch.stack(res)


def per_row_tensor(img, oy, h: int):
    out = []
    for i, im in enumerate(img):
        out.append(im[:, oy[i]:oy[i] + h].mean())
    return torch.stack(out)


def crop_energy(img, oy, ox, h: int, w: int):
    total = torch.zeros(())
    for i in range(img.shape[0]):
        total = total + (img[i, :, oy[i]:oy[i] + h, ox[i]:ox[i] + w] ** 2).sum()
    return total


def _imgs(n=6, c=3, hh=12, ww=10, dtype=torch.float32):
    g = torch.Generator().manual_seed(n * 7 + hh)
    img = torch.randn(n, c, hh, ww, generator=g, dtype=dtype)
    oy = torch.randint(0, hh - 4 + 1, (n,), generator=g)
    ox = torch.randint(0, ww - 3 + 1, (n,), generator=g)
    return img, oy, ox, 4, 3


CASES = [
    (random_crops, lambda: _imgs()),
    (crops_from_ints, lambda: _imgs(5)),
    (crops_into, lambda: _imgs(7)),
    (spans, lambda: (torch.randn(5, 9, 3), torch.tensor([0, 4, 2, 6, 1]), 3)),
    (picked_rows, lambda: (torch.randn(4, 2, 8), torch.tensor([3, -1, 0, 2, -4]), torch.tensor([0, 5, 2, 3, 1]), 3)),
    (per_row_tensor, lambda: (torch.randn(5, 2, 7), torch.tensor([0, 3, 1, 4, 2]), 3)),
    (crop_energy, lambda: _imgs(4)),
]


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_crops_are_batched_and_equal_to_the_loop(fn, make):
    args = make()
    f = autovec(fn)
    want = fn(*args)
    got = f(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)
    assert _ran(f) == {"batched"}
    assert explain(f, *args).path == "vectorized"
    assert_equivalent(fn, *args, trials=3)


def test_crop_gradients_reach_the_image():
    img, oy, ox, h, w = _imgs(5)
    for fn in (random_crops, crops_into, crop_energy):
        x = img.clone().requires_grad_()
        assert_equivalent(fn, x, oy, ox, h, w, grad=True)


def test_overlapping_crops_of_one_row_add_their_gradients():
    img = torch.randn(1, 2, 9, 9, requires_grad=True)
    rows = torch.zeros(6, dtype=torch.long)           # the same image, six crops that overlap
    starts = torch.tensor([0, 1, 2, 1, 0, 3])

    def crops(img, rows, starts):
        out = []
        for j in range(rows.shape[0]):
            out.append(img[rows[j], :, starts[j]:starts[j] + 4, starts[j]:starts[j] + 4])
        return torch.stack(out)

    assert_equivalent(crops, img, rows, starts, grad=True)
    f = autovec(crops)
    f(img, rows, starts)
    assert _ran(f) == {"batched"}


def test_integer_dtypes_and_half_images_keep_their_dtype():
    for dtype in (torch.int32, torch.float16, torch.float64):
        img, oy, ox, h, w = _imgs(4)
        img = (img * 10).to(dtype)
        f = autovec(random_crops)
        got = f(img, oy, ox, h, w)
        assert got.dtype == dtype
        assert torch.equal(got, random_crops(img, oy, ox, h, w))


@pytest.mark.parametrize("oy, why", [
    (torch.tensor([0, 2, 9, 1]), "past the end: Python's slice clips the crop"),
    (torch.tensor([0, -2, 3, 1]), "a negative start counts from the end"),
])
def test_crops_python_would_clip_keep_the_loop(oy, why):
    img = torch.randn(4, 2, 12, 10)
    ox = torch.tensor([0, 1, 2, 3])
    f = autovec(crop_energy)
    good = torch.tensor([0, 2, 8, 1])
    for _ in range(3):        # the signature checked, the batched body in its steady state
        torch.testing.assert_close(f(img, good, ox, 4, 3), crop_energy(img, good, ox, 4, 3))
    assert _ran(f) == {"batched"}
    torch.testing.assert_close(f(img, oy, ox, 4, 3), crop_energy(img, oy, ox, 4, 3))
    assert _ran(f) == set(), why
    # the same crops, stacked: the loop raises (crops of several shapes), and so does autovec
    raises_as_loop(RuntimeError, random_crops, img, oy, ox, 4, 3)


def test_crops_of_several_widths_keep_the_loop():
    def sizes(x, a, b):
        out = []
        for i in range(x.shape[0]):
            out.append(x[i, a[i]:b[i]] * 2)
        return out

    x = torch.randn(4, 10)
    a, b = torch.tensor([0, 1, 2, 3]), torch.tensor([3, 4, 6, 6])
    f = autovec(sizes)
    got, want = f(x, a, b), sizes(x, a, b)
    assert [g.shape for g in got] == [w.shape for w in want]
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert _ran(f) == set()
    b = a + 3                 # one width again: batched
    got, want = f(x, a, b), sizes(x, a, b)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert _ran(f) == {"batched"}


def test_bad_rows_and_bounds_raise_as_the_loop():
    img, oy, ox, h, w = _imgs(4)
    raises_as_loop(TypeError, random_crops, img, oy.float(), ox, h, w)
    rows = torch.tensor([0, 1, 7])
    starts = torch.tensor([0, 1, 2])
    raises_as_loop(IndexError, picked_rows, torch.randn(4, 2, 8), rows, starts, 3)


def test_kept_list_of_crops_matches_the_loop():
    def kept(img, oy, h: int):
        out = []
        for i in range(img.shape[0]):
            out.append(img[i, :, oy[i]:oy[i] + h])
        return out

    img, oy = torch.randn(5, 2, 9), torch.tensor([0, 3, 1, 5, 2])
    assert_equivalent(kept, img, oy, 4)
    got, want = autovec(kept)(img, oy, 4), kept(img, oy, 4)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_explain_names_the_crop():
    img, oy, ox, h, w = _imgs()
    text = str(explain(random_crops, img, oy, ox, h, w))
    assert "_avb.crop(" in text


def test_narrow_integer_offsets_that_wrap_are_read_as_the_loop_reads_them():
    """int8 offsets: `oy[i] + h` wraps (120 + 10 is -126), and the loop's slice `120:-126` is
    empty or clipped; the crop's width, taken from the wrapped bounds in int64, is no longer 10
    there, and the loop runs (found by the probe of crops: the width was computed in int8 and
    wrapped back to 10)."""
    def sums(img, oy, h: int):
        out = torch.zeros(img.shape[0])
        for i in range(img.shape[0]):
            out[i] = img[i, :, oy[i]:oy[i] + h].sum()
        return out

    img = torch.randn(4, 2, 140)
    f = autovec(sums)
    for _ in range(3):
        oy = torch.tensor([0, 5, 100, 7], dtype=torch.int8)
        torch.testing.assert_close(f(img, oy, 10), sums(img, oy, 10))
    assert _ran(f) == {"batched"}
    oy = torch.tensor([0, 120, 3, 7], dtype=torch.int8)
    torch.testing.assert_close(f(img, oy, 10), sums(img, oy, 10))
    assert _ran(f) == set()
