"""More spellings of loops that vectorize: `enumerate` with its start by keyword or signed,
`for ... else` without `break`. Every form is compared with the loop on random inputs, and the
call is checked to have taken the vectorized path."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop, ran_modes


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def vectorizes(fn, *args, **kwargs):
    """assert_equivalent, then a fresh decorated call that must have run a vectorized path."""
    assert_equivalent(fn, *args, trials=2, **kwargs)
    fast = autovec(fn)
    fast(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    assert ran_modes(fast), explain(fn, *args)


def strategies(fn, *args):
    return [r.strategy for r in explain(fn, *args).loops]


# ----------------------------------------------------------------------------- enumerate start

def enum_kw_store(x):
    out = torch.zeros(x.shape[0])
    for k, row in enumerate(x, start=1):
        out[k - 1] = row.sum() * k
    return out


def enum_kw_append(x):
    res = []
    for k, row in enumerate(x, start=3):
        res.append(row * k + 1)
    return torch.stack(res) if res else x


def enum_negative(x):
    out = torch.zeros_like(x)
    for k, row in enumerate(x, -3):
        out[k + 3] = row * k
    return out


def enum_negative_kw(x):
    res = []
    for k, row in enumerate(x, start=-2):
        res.append(row.abs().sum() - k)
    return res


def enum_large(x):
    res = []
    for k, row in enumerate(x, start=1000003):
        res.append(row.double() * k)
    return torch.stack(res) if res else x.double()


def enum_huge(x):
    res = []
    for k, row in enumerate(x, start=4611686018427387000):      # near 2**62
        res.append(row.sum() + (k - 4611686018427387000))
    return res


def enum_huge_int(x):
    res = []
    for k, row in enumerate(x, start=4611686018427387000):
        res.append(row + k)
    return torch.stack(res) if res else x


def enum_iterable_kw(x):
    res = []
    for k, row in enumerate(iterable=x, start=2):
        res.append(row * k)
    return torch.stack(res) if res else x


def enum_zip_kw(a, b):
    res = []
    for k, (u, v) in enumerate(zip(a, b), start=2):
        res.append(u * v + k)
    return torch.stack(res) if res else a


def enum_zip_negative(a, b):
    out = torch.zeros(a.shape[0])
    for k, (u, v) in enumerate(zip(a, b), start=-1):
        out[k + 1] = (u * v).sum() * k
    return out


def enum_comprehension_kw(x):
    return [r * k for k, r in enumerate(x, start=5)]


def enum_sum_kw(x):
    total = torch.zeros(x.shape[1])
    for k, row in enumerate(x, start=1):
        total += row / k
    return total


SHAPES = [(0, 3), (1, 3), (6, 3)]


@pytest.mark.parametrize("n", [s[0] for s in SHAPES])
@pytest.mark.parametrize("fn", [enum_kw_store, enum_kw_append, enum_negative, enum_negative_kw, enum_large,
                                enum_huge, enum_huge_int, enum_iterable_kw, enum_comprehension_kw,
                                enum_sum_kw])
def test_enumerate_start_vectorizes(fn, n):
    x = torch.randn(n, 3)
    if fn is enum_huge_int:
        x = torch.randint(-5, 5, (n, 3))
    if n == 0:
        assert_equivalent(fn, x)     # nothing to run: no mode to check
    else:
        vectorizes(fn, x)


@pytest.mark.parametrize("n", [0, 1, 6])
@pytest.mark.parametrize("fn", [enum_zip_kw, enum_zip_negative])
def test_enumerate_zip_start_vectorizes(fn, n):
    a, b = torch.randn(n, 3), torch.randn(n + 2, 3)
    if n == 0:
        assert_equivalent(fn, a, b)
    else:
        vectorizes(fn, a, b)


def test_enumerate_start_gradients():
    x = torch.randn(5, 3, requires_grad=True)
    assert_equivalent(enum_kw_store, x, grad=True)
    assert_equivalent(enum_zip_kw, x, torch.randn(5, 3, requires_grad=True), grad=True)


def enum_store_past_end(x):
    out = torch.zeros(x.shape[0])
    for k, row in enumerate(x, start=2):
        out[k] = row.sum()
    return out


def test_enumerate_start_store_out_of_range_raises_as_loop():
    raises_as_loop(IndexError, enum_store_past_end, torch.randn(4, 3))


def test_enumerate_start_explain():
    for fn, args in [(enum_kw_store, (torch.randn(4, 3),)), (enum_negative, (torch.randn(4, 3),)),
                     (enum_zip_kw, (torch.randn(4, 3), torch.randn(4, 3))),
                     (enum_comprehension_kw, (torch.randn(4, 3),))]:
        e = explain(fn, *args)
        assert all(r.vectorized for r in e.loops), str(e)
        assert "enumerate" not in " ".join(r.reason for r in e.loops)


def enum_start_name(x, s: int):
    res = []
    for k, row in enumerate(x, start=s):
        res.append(row * k)
    return torch.stack(res)


def enum_start_float(x):
    res = []
    for k, row in enumerate(x, start=1.5):
        res.append(row * k)
    return torch.stack(res)


def enum_start_too_big(x):
    res = []
    for k, row in enumerate(x, start=9223372036854775807):
        res.append(row.sum() + (k - 9223372036854775807))
    return res


def test_enumerate_start_not_literal_keeps_loop():
    x = torch.randn(4, 3)
    e = explain(enum_start_name, x, 2)
    assert [r.strategy for r in e.loops] == ["python"]
    assert "not an integer literal" in e.loops[0].reason
    assert_equivalent(enum_start_name, x, 2)
    raises_as_loop(TypeError, enum_start_float, x)
    e = explain(enum_start_too_big, x)
    assert [r.strategy for r in e.loops] == ["python"] and "int64" in e.loops[0].reason
    assert_equivalent(enum_start_too_big, x)


def enum_bad_keyword(x):
    res = []
    for k, row in enumerate(x, begin=1):
        res.append(row * k)
    return res


def test_enumerate_bad_keyword_raises_as_loop():
    raises_as_loop(TypeError, enum_bad_keyword, torch.randn(3, 2))
    assert strategies(enum_bad_keyword, torch.randn(3, 2)) == ["python"]


def enum_at_two_62(x):
    res = []
    for k, row in enumerate(x, start=4611686018427387904):     # 2**62: k + k reaches int64's end
        res.append(row + (k + k))
    return res


def test_enumerate_start_at_the_limit():
    vectorizes(enum_at_two_62, torch.randint(-5, 5, (4, 3)))
