"""Triangular nests as one loop over their (i, j) pairs (analysis/pairs.py): where `i` and `j`
only index, `for i in range(n): for j in range(i + 1, n): BODY` runs BODY over the pairs the nest
walks, gathered by index, and no pair it skips is computed. Every result is compared with the
nest as written, gradients included; the nest stays each call's fallback."""
import copy

import pytest
import torch

from autovec import autovec, explain
from autovec.analysis.pairs import index_pairs


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def gaussian_pairs(x):
    loss = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            loss = loss + torch.exp(-(x[i] - x[j]).pow(2).sum())
    return loss


def lower_distances(x):
    n = x.shape[0]
    out = torch.zeros(n, n)
    for i in range(n):
        for j in range(i):
            out[i, j] = (x[i] - x[j]).norm()
    return out


def sqrt_distance_sum(x):
    # sqrt's derivative at 0 is infinite: a pair the nest skips (i == j) must not be computed
    total = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            total = total + ((x[i] - x[j]) ** 2).sum().sqrt()
    return total


def close_pairs(x, radius):
    count = 0
    for i in range(len(x)):
        for j in range(i - 1, len(x)):
            if (x[i] - x[j]).abs().sum() < radius:
                count += 1
    return count


def symmetric_gram(x):
    n = x.shape[0]
    out = torch.zeros(n, n)
    for i in range(1, n):
        for j in range(0, i + 1):
            out[i, j] = out[j, i] = (x[i] * x[j]).sum()
    return out


def banded_energy(x, m):
    e = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 2, m):
            e = e + (x[i] - x[j]).abs().sum()
    return e


def nearest_other(x):
    best = torch.full((x.shape[0],), float("inf"))
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            d = (x[i] - x[j]).norm()
            if d < best[i]:
                best[i] = d
    return best


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, equal_nan=True)
    else:
        assert type(a) is type(b) and a == pytest.approx(b, rel=1e-5)


def _check(fn, make, grad=False, calls=3):
    fast = autovec(fn)
    for _ in range(calls):
        args = make()
        if grad:
            args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                         for a in args)
        mine = tuple(copy.deepcopy(a) if not isinstance(a, torch.Tensor) else a.detach().clone().requires_grad_(
            a.requires_grad) for a in args)
        want, got = fn(*args), fast(*mine)
        _same(want, got)
        if grad and isinstance(want, torch.Tensor) and want.requires_grad:
            want.sum().backward()
            got.sum().backward()
            for a, b in zip(args, mine):
                if isinstance(a, torch.Tensor) and a.requires_grad:
                    assert not torch.isnan(b.grad).any()
                    torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5)
    return fast, explain(fast, *make())


CASES = [
    (gaussian_pairs, lambda n: (torch.randn(n, 5),)),
    (lower_distances, lambda n: (torch.randn(n, 5),)),
    (sqrt_distance_sum, lambda n: (torch.randn(n, 5),)),
    (symmetric_gram, lambda n: (torch.randn(n, 4),)),
    (banded_energy, lambda n: (torch.randn(n, 4), n)),
    (nearest_other, lambda n: (torch.randn(n, 3),)),
]


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("fn,make", CASES, ids=[c[0].__name__ for c in CASES])
def test_pairs_match_the_nest(fn, make, grad):
    for n in (0, 1, 2, 9):
        _check(fn, lambda: make(n), grad)
    _, e = _check(fn, lambda: make(30), grad)
    assert e.path == "vectorized"
    outer, inner = e.loops[0], e.loops[1]
    assert "pairs" in outer.reason and outer.vectorized
    assert inner.reason == f"rewritten as part of the loop nest at line {outer.lineno}"
    assert inner.lineno == outer.lineno + 1 and inner.strategy == outer.strategy
    assert "i_pairs, j_pairs = autovec_pairs(" in e.rewritten_source


def test_counts_under_a_condition():
    fast, e = _check(close_pairs, lambda: (torch.randn(40, 3), 2.0))
    assert e.path == "vectorized"
    assert isinstance(fast(torch.randn(40, 3), 2.0), int)


def test_gradients_through_sqrt_run_vectorized():
    # the masked rectangle computes the diagonal too, whose sqrt has an infinite derivative:
    # with inputs that require grad it kept the loop; the pairs compute only i < j
    x = torch.randn(30, 4, requires_grad=True)
    _check(sqrt_distance_sum, lambda: (torch.randn(30, 4),), grad=True)
    assert explain(autovec(sqrt_distance_sum), x).path == "vectorized"


def test_out_of_range_and_bad_bounds_raise_as_the_nest():
    fast = autovec(banded_energy)
    for _ in range(3):
        with pytest.raises(IndexError) as want:
            banded_energy(torch.randn(8, 3), 12)
        with pytest.raises(IndexError) as got:
            fast(torch.randn(8, 3), 12)
        assert str(got.value) == str(want.value)
    with pytest.raises(TypeError) as want:
        banded_energy(torch.randn(8, 3), 5.0)
    with pytest.raises(TypeError) as got:
        fast(torch.randn(8, 3), 5.0)
    assert str(got.value) == str(want.value)
    # an empty outer range never evaluates the inner bound, which would raise here
    assert fast(torch.randn(0, 3), "not a bound") == 0.0


def first_axis(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[1]):
            s = s + x[i, j]
    return s


def test_inner_bound_not_evaluated_for_an_empty_nest():
    fast = autovec(first_axis)
    for _ in range(3):
        assert fast(torch.randn(0)) == first_axis(torch.randn(0)) == 0.0
        _same(first_axis(x := torch.randn(6, 9)), fast(x))


def index_in_arithmetic(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            s = s + x[i].sum() * (j - i)
    return s


def index_read_after(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            s = s + x[i, j]
    return s, j


def inner_break(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            if x[i, j] > 1:
                break
            s = s + x[i, j]
    return s


def prints_each_pair(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            print(i, j)
            s = s + x[i, j]
    return s


@pytest.mark.parametrize("fn", [index_in_arithmetic, index_read_after, inner_break])
def test_other_uses_of_the_indices_keep_the_nest(fn):
    x = torch.randn(12, 12)
    fast = autovec(fn)
    for _ in range(3):
        _same(fn(x), fast(x)) if fn is not index_read_after else [
            _same(a, b) for a, b in zip(fn(x), fast(x))]
    e = explain(fast, x)
    assert "i_pairs" not in e.rewritten_source
    assert all("pairs" not in r.reason for r in e.loops)


def test_a_flat_loop_not_planned_is_analysed_as_written(capsys):
    # print keeps the flat loop on Python: the function is analysed again with the nest as written
    x = torch.randn(5, 5)
    fast = autovec(prints_each_pair)
    assert fast(x) == pytest.approx(prints_each_pair(x))
    out = capsys.readouterr().out.splitlines()
    assert out[:10] == out[10:] and out[0] == "0 1" and len(out) == 20
    e = explain(fast, x)
    assert "i_pairs" not in e.rewritten_source
    assert [r.strategy for r in e.loops] == ["python", "python"]


def dict_of_rows(d, n):
    s = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            s = s + d[i] * d[j]
    return s


def test_dict_subscripts_run_the_nest():
    # a 0-d tensor is no dict key for an int: the flat loop fails, the nest runs
    d = {k: torch.randn(3) for k in range(10)}
    fast = autovec(dict_of_rows)
    for _ in range(3):
        _same(dict_of_rows(d, 10), fast(d, 10))
    assert explain(fast, d, 10).path == "python"


def in_another_loop(x):
    total = []
    for b in range(x.shape[0]):
        s = 0.0
        for i in range(x.shape[1]):
            for j in range(i + 1, x.shape[1]):
                s = s + x[b, i] * x[b, j]
        total.append(s)
    return total


def test_nests_inside_another_loop_are_not_paired():
    x = torch.randn(3, 10)
    fast = autovec(in_another_loop)
    for _ in range(3):
        for a, b in zip(in_another_loop(x), fast(x)):
            _same(a, b)
    assert "pairs" not in explain(fast, x).rewritten_source


@pytest.mark.parametrize("upper", [False, True])
def test_index_pairs_walk_the_nest(upper):
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        a, b = (int(v) for v in torch.randint(-3, 9, (2,), generator=g))
        c, bound = (int(v) for v in torch.randint(-3, 9, (2,), generator=g))
        want = [(i, j) for i in range(a, b) for j in (range(bound, i + c) if upper else range(i + c, bound))]
        I, J = index_pairs(range(a, b), c, bound if range(a, b) else 0, upper)
        assert I.dtype == J.dtype == torch.int64
        assert list(zip(I.tolist(), J.tolist())) == want


def gather_rows(x, ids):
    out = torch.empty(len(ids), x.shape[1])
    for k in range(len(ids)):
        out[k] = x[ids[k]] * 2
    return out


@pytest.mark.parametrize("ids", [[0, 3, 1, 3], [-1, 2, -3, 0], [-1, 2, -4, 0], [0, 5, 1, 2]])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_gathers_by_index_select_keep_pythons_index_rules(ids, dtype):
    # index_select raises on a negative or out-of-range integer, where x[ids] wraps the one and
    # raises IndexError on the other: those calls index as the loop does
    x = torch.randn(4, 3)
    ids = torch.tensor(ids * 8, dtype=dtype)
    fast = autovec(gather_rows)
    for _ in range(3):
        try:
            want = gather_rows(x, ids)
        except IndexError as e:
            with pytest.raises(IndexError, match=str(e).split(" for ")[0]):
                fast(x, ids)
            continue
        _same(want, fast(x, ids))


def global_index(x):
    global i
    n = x.shape[0]
    out = torch.zeros(n, n)
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = (x[i] * x[j]).sum()
    return out


def test_a_global_index_keeps_its_value_after_the_nest():
    # (the flat loop would leave the last pair's `i`, a 0-d tensor, where the nest leaves n - 1)
    fast = autovec(global_index)
    for _ in range(3):
        x = torch.randn(20, 3)
        _same(global_index(x), fast(x))
        assert type(i) is int and i == 19   # noqa: F821 (the global the function binds)
    assert "i_pairs" not in explain(fast, x).rewritten_source


def nonlocal_index():
    j = None

    def fill(x):
        nonlocal j
        s = 0.0
        for i in range(x.shape[0]):
            for j in range(i + 1, x.shape[0]):
                s = s + x[i, j]
        return s
    return fill, lambda: j


def test_a_nonlocal_index_keeps_its_value_after_the_nest():
    fill, last = nonlocal_index()
    fast = autovec(fill)
    for _ in range(3):
        x = torch.randn(12, 12)
        _same(fill(x), fast(x))
        assert type(last()) is int and last() == 11


@pytest.mark.parametrize("bound", [2 ** 63 - 1, 2 ** 64, -2 ** 63 - 5, 10 ** 6])
def test_bounds_past_the_pairs_limits_run_the_nest(bound):
    # no pairs are made (int64 overflow, or more than the limit): the nest decides, as written
    x = torch.randn(50, 3)
    fast = autovec(banded_energy)
    for _ in range(3):
        try:
            want = banded_energy(x, bound)
        except IndexError as e:
            with pytest.raises(IndexError, match=str(e)):
                fast(x, bound)
            continue
        _same(want, fast(x, bound))


def test_the_pairs_limit_is_explained(monkeypatch):
    import autovec.analysis.pairs as pairs
    monkeypatch.setattr(pairs, "_MOST", 100)
    x = torch.randn(30, 3)
    fast = autovec(gaussian_pairs)
    for _ in range(3):
        _same(gaussian_pairs(x), fast(x))
    e = explain(fast, x)
    assert e.path == "python"
    assert any("the triangle holds 435 pairs, past the 100 autovec makes" in line for line in str(e).splitlines())


def test_cached_pairs_changed_in_place_are_made_again():
    I, J = index_pairs(range(6), 1, 6, False)
    I.add_(1)
    I2, J2 = index_pairs(range(6), 1, 6, False)
    assert list(zip(I2.tolist(), J2.tolist())) == [(a, b) for a in range(6) for b in range(a + 1, 6)]


@pytest.mark.parametrize("dim", [0, 1])
def test_rows_by_index_select_follow_advanced_indexing(dim):
    from autovec.batching import _Helpers
    x = torch.randn(4, 5)
    for ids in ([0, 3, 1, 3], [-1, 2, -3, 0], [0, 1, 2, 9], [-9, 0]):
        idx = torch.tensor(ids)
        index = (slice(None),) * dim + (idx,)
        try:
            want = x[index]
        except IndexError as e:
            with pytest.raises(IndexError, match=str(e)):
                _Helpers.gather_rows(x, dim, idx)
            continue
        got = _Helpers.gather_rows(x, dim, idx)
        assert torch.equal(got, want.movedim(dim, 0))
