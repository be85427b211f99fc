"""Loops that unpack each row: `for a, b in pairs`, `for i, j in pairs.tolist()`,
`for k, (a, b) in enumerate(pairs)`, and the same in comprehensions and generator expressions.
The analysis reads them as a loop over the rows with `a, b = row.unbind(0)` (then `.item()` for
`.tolist()`) first in the body; the loop as written stays the fallback. Checked against the
loop: values, gradients, names after the loop, errors, and the path taken."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def pair_scores(pairs, emb):
    out = []
    for a, b in pairs:
        out.append((emb[a] * emb[b]).sum())
    return torch.stack(out)


def pair_scores_tolist(pairs, emb):
    out = []
    for a, b in pairs.tolist():
        out.append((emb[a] * emb[b]).sum())
    return torch.stack(out)


def weighted_with_last(pairs, emb):
    total = 0.0
    for k, (a, b) in enumerate(pairs):
        total = total + (emb[a] - emb[b]).norm() * k
    return total, a, b


def last_names_tolist(pairs, emb):
    total = torch.zeros(emb.shape[1])
    for i, j in pairs.tolist():
        total += emb[i] - emb[j]
    return total, i, j


def gen_sum(emb, pairs):
    return sum((emb[i] - emb[j]).norm() for i, j in pairs.tolist())


def comp_outer_names(emb, pairs):
    i = 5
    s = torch.stack([(emb[i] * emb[j]).sum() for i, j in pairs])
    return s, i


def three_columns(rows):
    out = []
    for a, b, c in rows:
        out.append(a * b + c)
    return torch.stack(out)


def _pairs(n=40, k=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-k, k, (n, 2), generator=g), torch.randn(k, 5, generator=g)


@pytest.mark.parametrize("fn", [pair_scores, pair_scores_tolist])
def test_rows_unpacked_run_batched_with_gradients(fn):
    pairs, emb = _pairs()
    emb.requires_grad_()
    fast = autovec(fn)
    want, got = fn(pairs, emb), fast(pairs, emb)
    torch.testing.assert_close(got, want)
    gw = torch.autograd.grad((want ** 2).sum(), emb)[0]
    gg = torch.autograd.grad((got ** 2).sum(), emb)[0]
    torch.testing.assert_close(gg, gw)
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("fn", [weighted_with_last, last_names_tolist])
def test_names_after_the_loop_hold_the_last_row(fn):
    pairs, emb = _pairs(seed=1)
    fast = autovec(fn)
    want, got = fn(pairs, emb), fast(pairs, emb)
    torch.testing.assert_close(got[0], want[0])
    for w, g in zip(want[1:], got[1:]):
        assert type(g) is type(w)
        assert (g == w) if not isinstance(w, torch.Tensor) else torch.equal(g, w)
    assert _ran(fast) == {"batched"}


def test_generator_and_comprehension_forms():
    pairs, emb = _pairs(seed=2)
    for fn in (gen_sum, comp_outer_names):
        fast = autovec(fn)
        torch.testing.assert_close(fast(emb, pairs), fn(emb, pairs))
        assert _ran(fast) == {"batched"}
    # the comprehension's names are its own: the function's `i` is still 5
    assert autovec(comp_outer_names)(emb, pairs)[1] == 5


def test_a_list_of_row_tensors():
    pairs, emb = _pairs(seed=3)
    rows = list(pairs)
    fast = autovec(pair_scores)
    torch.testing.assert_close(fast(rows, emb), pair_scores(rows, emb))


@pytest.mark.parametrize("fn, args", [
    (pair_scores, (torch.randint(0, 3, (6, 3)), torch.randn(3, 2))),      # three values, two names
    (three_columns, (torch.randn(6, 2),)),                                 # two values, three names
    (pair_scores, (torch.randint(0, 3, (6,)), torch.randn(3, 2))),         # 0-d rows
    (pair_scores_tolist, (list(torch.randint(0, 3, (6, 2))), torch.randn(3, 2))),   # a list has no .tolist()
    (pair_scores_tolist, ([], torch.randn(3, 2))),
])
def test_errors_are_the_loops(fn, args):
    with pytest.raises(Exception) as want:
        fn(*args)
    with pytest.raises(Exception) as got:
        autovec(fn)(*args)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)


def test_three_columns_and_the_explanation():
    rows = torch.randn(30, 3)
    fast = autovec(three_columns)
    torch.testing.assert_close(fast(rows), three_columns(rows))
    assert _ran(fast) == {"batched"}
    ex = explain(three_columns, rows)
    assert ex.path == "vectorized" and "unbind" in ex.rewritten_source


# `for v in x.tolist()`: the elements of x as Python numbers, one per iteration

def masked_means(h, lengths):
    res = []
    for i, L in enumerate(lengths.tolist()):
        res.append(h[i, :L].mean(0))
    return torch.stack(res)


def scaled_rows(x, w):
    out = []
    for i, c in enumerate(w.tolist()):
        out.append(x[i] * c)
    return torch.stack(out)


def doubled_total(w):
    s = 0
    for c in w.tolist():
        s += c * 2
    return s


@pytest.mark.parametrize("fn, make", [
    (masked_means, lambda: (torch.randn(6, 8, 3), torch.randint(1, 9, (6,)))),
    (scaled_rows, lambda: (torch.randn(5, 3), torch.randn(5))),
    (scaled_rows, lambda: (torch.randn(5, 3), torch.randint(-2, 4, (5,)))),
    (doubled_total, lambda: (torch.randint(-3, 4, (7,)),)),
    (doubled_total, lambda: (torch.randn(7, dtype=torch.float64),)),
    (doubled_total, lambda: (torch.tensor([True, False, True]),)),
], ids=["span-mean", "float-scale", "int-scale", "int-total", "float-total", "bool-total"])
def test_a_loop_over_tolist_numbers_vectorizes_with_python_numbers(fn, make):
    args = make()
    f = autovec(fn)
    got, want = f(*args), fn(*args)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    else:
        assert got == want and type(got) is type(want)
    assert explain(f, *args).path == "vectorized"


@pytest.mark.parametrize("bad, exc", [([1, 2, 3], AttributeError), (torch.randn(2, 3), TypeError),
                                      (torch.tensor(5.0), TypeError)])
def test_tolist_of_a_list_a_matrix_or_a_scalar_raises_as_the_loop(bad, exc):
    with pytest.raises(exc) as want:
        doubled_total(bad)
    with pytest.raises(exc) as got:
        autovec(doubled_total)(bad)
    assert str(got.value) == str(want.value)


def last_scale(x, w):
    out = []
    for i, c in enumerate(w.tolist()):
        out.append(x[i] * c)
    return torch.stack(out), c, i


def test_the_loop_variables_after_a_tolist_loop_are_python_numbers():
    x, w = torch.randn(4, 3), torch.randn(4)
    f = autovec(last_scale)
    (s1, c1, i1), (s2, c2, i2) = last_scale(x, w), f(x, w)
    torch.testing.assert_close(s2, s1)
    assert c1 == c2 and type(c2) is float and i1 == i2 == 3
    assert explain(f, x, w).path == "vectorized"


def scale_boxes(boxes, sizes):
    out = []
    for b, (h, w) in zip(boxes, sizes):
        out.append(b / torch.stack([w, h, w, h]))
    return torch.stack(out)


def scale_boxes_tolist(boxes, sizes):
    out = []
    for b, (h, w) in zip(boxes, sizes.tolist()):
        out.append(b * (h + w))
    return torch.stack(out), h, w


def enumerate_zip_nested(x, pairs):
    total = torch.zeros(x.shape[1])
    for k, (row, (a, b)) in enumerate(zip(x, pairs)):
        total = total + row * (a - b) * k
    return total, a, b


@pytest.mark.parametrize("fn, make", [
    (scale_boxes, lambda g: (torch.rand(9, 4, generator=g), torch.rand(9, 2, generator=g) + 1)),
    (scale_boxes, lambda g: (torch.rand(9, 4, generator=g), torch.rand(7, 2, generator=g) + 1)),  # (zip stops at 7)
    (scale_boxes_tolist, lambda g: (torch.rand(9, 4, generator=g), torch.randint(1, 9, (9, 2), generator=g))),
    (enumerate_zip_nested, lambda g: (torch.randn(8, 3, generator=g), torch.randn(8, 2, generator=g))),
])
def test_zip_with_a_part_unpacked(fn, make):
    # (refused before: "`zip` is not unpacked into one plain name per sequence")
    fast = autovec(fn)
    for seed in range(3):
        args = make(torch.Generator().manual_seed(seed))
        want, got = fn(*args), fast(*args)
        for p, q in zip(want, got) if isinstance(want, tuple) else [(want, got)]:
            assert type(p) is type(q)
            if isinstance(p, torch.Tensor):
                assert p.dtype == q.dtype
                torch.testing.assert_close(q, p)       # (a running total: summed in another order)
            else:
                assert p == q
    assert explain(fn, *make(torch.Generator().manual_seed(0))).path == "vectorized"


@pytest.mark.parametrize("sizes, exc", [(torch.rand(6, 3), ValueError), (torch.rand(6), TypeError)])
def test_zip_part_of_another_width_raises_as_the_loop(sizes, exc):
    boxes = torch.rand(6, 4)
    fast = autovec(scale_boxes)
    fast(torch.rand(6, 4), torch.rand(6, 2))
    with pytest.raises(exc) as want:
        scale_boxes(boxes, sizes)
    with pytest.raises(exc) as got:
        fast(boxes, sizes)
    assert str(got.value) == str(want.value)
