"""`for i, j in itertools.product(range(A), range(B)): body` walks the same pairs in the same
order as the nest `for i in range(A): for j in range(B): body`, and runs as that nest
(frontend._ProductNests) where that is the same program: `product` and `range` are the real
ones (a call that finds one rebound runs the function as written), every argument is a
`range(..)`, no `break`, no `else`, the body never rebinds the names, and nothing outside the
loop reads them. Every test compares with the loop itself."""
import itertools
from itertools import product

import pytest
import torch

from autovec import autovec, explain
from conftest import same_within


def pair_distances(x, y):
    out = torch.empty(x.shape[0], y.shape[0])
    for i, j in itertools.product(range(x.shape[0]), range(y.shape[0])):
        out[i, j] = (x[i] - y[j]).pow(2).sum()
    return out


def pixel_max(img):
    H, W = img.shape[1], img.shape[2]
    out = torch.zeros(H, W)
    for i, j in product(range(H), range(W)):
        out[i, j] = img[:, i, j].max()
    return out


def stepped_total(x, y):
    tot = 0.0
    for i, j in product(range(x.shape[0]), range(1, y.shape[0], 2)):
        tot = tot + x[i] @ y[j]
    return tot


def three_deep(x, n):
    out = torch.zeros(x.shape[0], n)
    for i, j, k in product(range(x.shape[0]), range(n), range(2)):
        out[i, j] += x[i, k] * j
    return out


def with_break(x, y):
    out = torch.zeros(x.shape[0], y.shape[0])
    for i, j in product(range(x.shape[0]), range(y.shape[0])):
        if (x[i] * y[j]).sum() > 3:
            break
        out[i, j] = 1
    return out


def names_read_after(x, y):
    out = torch.zeros(x.shape[0], y.shape[0])
    for i, j in product(range(x.shape[0]), range(y.shape[0])):
        out[i, j] = x[i].sum() * y[j].sum()
    return out, i


def rebinds_a_name(x, y):
    out = torch.zeros(x.shape[0], y.shape[0])
    for i, j in product(range(x.shape[0]), range(y.shape[0])):
        i = i + 0
        out[i, j] = x[i].sum() - y[j].sum()
    return out


def _args(fn, n, m):
    if fn is pixel_max:
        return (torch.randn(3, n, m),)
    if fn is three_deep:
        return (torch.randn(n, 3), m)
    return (torch.randn(n, 3), torch.randn(m, 3))


_same = same_within


@pytest.mark.parametrize("fn", [pair_distances, pixel_max, stepped_total, three_deep, with_break,
                                names_read_after, rebinds_a_name])
def test_values_are_the_loops(fn):
    fast = autovec(fn)
    torch.manual_seed(0)
    for n, m in [(1, 1), (4, 5), (40, 30), (40, 30)]:
        args = _args(fn, n, m)
        _same(fast(*args), fn(*args))


@pytest.mark.parametrize("fn", [pair_distances, pixel_max, stepped_total, three_deep])
def test_the_nest_is_batched(fn):
    fast = autovec(fn)
    args = _args(fn, 40, 30)
    for _ in range(3):
        fast(*args)
    ex = explain(fast, *args)
    assert ex.path == "vectorized"
    assert len(ex.loops) == (3 if fn is three_deep else 2)


@pytest.mark.parametrize("fn", [with_break, names_read_after, rebinds_a_name])
def test_forms_that_are_not_the_nest_stay_as_written(fn):
    ex = explain(fn, *_args(fn, 4, 5))
    assert len(ex.loops) == 1
    assert "product(" in ex.loops[0].source if hasattr(ex.loops[0], "source") else True


@pytest.mark.parametrize("n, m", [(0, 3), (3, 0), (0, 0)])
def test_empty_ranges(n, m):
    fast = autovec(pair_distances)
    args = _args(pair_distances, n, m)
    _same(fast(*args), pair_distances(*args))


def test_a_range_that_raises_raises_as_in_the_loop():
    def f(x, m):
        out = torch.zeros(x.shape[0])
        for i, j in product(range(x.shape[0]), range(m)):
            out[i] += j
        return out
    with pytest.raises(TypeError):
        f(torch.zeros(0), 2.5)
    with pytest.raises(TypeError):
        autovec(f)(torch.zeros(0), 2.5)      # (product makes every range before any pair)


def reversed_pairs(*ranges):
    return reversed(list(itertools.product(*ranges)))


def test_a_rebound_product_runs_the_function_as_written():
    global product
    fast = autovec(pixel_max)
    img = torch.randn(3, 6, 5)
    _same(fast(img), pixel_max(img))
    real = product
    order = []

    def logged(*ranges):
        for p in real(*ranges):
            order.append(p)
            yield p
    try:
        product = logged
        got = fast(img)
        assert len(order) == 30
        _same(got, pixel_max(img))
    finally:
        product = real


G_PAIR = "unset"


def product_global(x, m):
    global G_PAIR
    out = torch.zeros(4)
    for G_PAIR, j in product(range(4), range(m)):
        out[G_PAIR] += x[j]
    return out


def test_a_global_name_stays_as_written(monkeypatch):
    # product binds nothing where a range is empty; the nest would bind the outer name (probeC)
    global G_PAIR
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.arange(3.0)
    G_PAIR = "unset"
    autovec(product_global)(x, 0)
    assert G_PAIR == "unset"
    torch.testing.assert_close(autovec(product_global)(x, 3), product_global(x, 3))


def pair_products(x, y):
    out = torch.zeros(x.shape[0], y.shape[0])
    for i, j in itertools.product(range(x.shape[0]), range(y.shape[0])):
        out[i, j] = x[i] @ y[j]
    return out


def test_a_patched_itertools_product_is_the_one_called():
    fast = autovec(pair_products)
    x, y = torch.randn(3, 2), torch.randn(4, 2)
    _same(fast(x, y), pair_products(x, y))
    real = itertools.product
    itertools.product = lambda *a, **k: iter([(0, 0)])
    try:
        want = pair_products(x, y)
        assert int((want != 0).sum()) == 1
        _same(fast(x, y), want)
        fresh = autovec(pair_products)        # (patched before the first call too)
        _same(fresh(x, y), want)
    finally:
        itertools.product = real


def test_names_the_function_binds_itself_are_not_the_builtins(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")

    def local_range(m):
        def range(a, b, c):     # noqa: A001 (the user's own `range`)
            return [3, 2]
        m = m.clone()
        for i in range(m.shape[0] - 1, 0, -1):
            m[i - 1] = torch.maximum(m[i - 1], m[i])
        return m

    def local_product(x, y):
        from itertools import product as product    # noqa: F811 (bound in the function: its own)
        out = torch.zeros(x.shape[0], y.shape[0])
        for i, j in product(range(x.shape[0]), range(y.shape[0])):
            out[i, j] = x[i] @ y[j]
        return out
    x = torch.rand(6)
    torch.testing.assert_close(autovec(local_range)(x), local_range(x))
    a, b = torch.randn(3, 2), torch.randn(4, 2)
    torch.testing.assert_close(autovec(local_product)(a, b), local_product(a, b))
