"""In-place running extremes written with Python's `max` / `min` and loops that walk down with
`range(a, b, -1)`: the precision envelope of average precision,

    for i in range(len(prec) - 2, -1, -1):
        prec[i] = max(prec[i], prec[i + 1])

a suffix cummax (analysis.loops: Python's max or min of `t[i]` and `t[i +- k]`; `range(a, b, -1)`
as `reversed(range(b + 1, a + 1))`, the same indices in the same order). Python's max picks the
first argument unless the second is larger by `>`, so NaN and zeros of both signs decide by the
order of arguments: those keep the loop, as rows of several elements do (the loop's truth test
raises). Every test compares with the loop itself."""
import math

import pytest
import torch

from autovec import autovec, explain


def envelope(prec):
    prec = prec.clone()
    for i in range(len(prec) - 2, -1, -1):
        prec[i] = max(prec[i], prec[i + 1])
    return prec


def envelope_swapped(prec):
    prec = prec.clone()
    for i in range(len(prec) - 2, -1, -1):
        prec[i] = max(prec[i + 1], prec[i])
    return prec


def running_max(x):
    out = x.clone()
    for i in range(1, len(out)):
        out[i] = max(out[i], out[i - 1])
    return out


def running_min_back(x):
    out = x.clone()
    for i in reversed(range(len(out) - 1)):
        out[i] = min(out[i], out[i + 1])
    return out


def suffix_sum_down(x):
    out = x.clone()
    for i in range(len(out) - 2, -1, -1):
        out[i] += out[i + 1]
    return out


def suffix_minimum_down(x):
    out = x.clone()
    for i in range(out.shape[0] - 2, -1, -1):
        out[i] = torch.minimum(out[i], out[i + 1])
    return out


FNS = [envelope, envelope_swapped, running_max, running_min_back, suffix_sum_down, suffix_minimum_down]


def _check(fn, x):
    want_err = got_err = None
    try:
        want = fn(x.clone())
    except Exception as e:      # noqa: BLE001 (the loop's own error is the answer)
        want_err = type(e)
    try:
        got = autovec(fn)(x.clone())
    except Exception as e:      # noqa: BLE001
        got_err = type(e)
    assert got_err == want_err
    if want_err is None:
        assert got.dtype == want.dtype and got.shape == want.shape
        if got.is_floating_point():
            assert torch.equal(torch.signbit(got), torch.signbit(want))
            # (extremes are exact; the running sum reassociates, as every float sum here)
            exact = fn is not suffix_sum_down
            torch.testing.assert_close(got, want, equal_nan=True, rtol=0 if exact else 1e-4, atol=0 if exact else 1e-3)
        else:
            assert torch.equal(got, want)


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_values_are_the_loops(fn, dtype):
    torch.manual_seed(0)
    for n in (1, 2, 3, 17, 500):
        x = torch.randn(n) * 10
        _check(fn, x.to(dtype))


@pytest.mark.parametrize("fn", FNS)
def test_batched(fn, monkeypatch):
    x = torch.rand(2000)
    fast = autovec(fn)
    for _ in range(3):
        fast(x.clone())
    assert explain(fast, x.clone()).path == "vectorized"


@pytest.mark.parametrize("fn", [envelope, envelope_swapped, running_max, running_min_back])
@pytest.mark.parametrize("special", ["nan", "zeros", "inf"])
def test_nan_and_signed_zeros_are_the_loops(fn, special, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.rand(40)
    if special == "nan":
        x[[3, 17, 30]] = math.nan
    elif special == "zeros":
        x[:] = 0.0
        x[[1, 5, 6, 20]] = -0.0
    else:
        x[[2, 9]] = math.inf
        x[11] = -math.inf
    _check(fn, x)


@pytest.mark.parametrize("fn", [envelope, running_max])
def test_rows_of_several_elements_raise_as_in_the_loop(fn, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    _check(fn, torch.rand(30, 3))
    _check(fn, torch.rand(30, 1))       # (one element each: the loop's `>` is one truth value)


def test_booleans_and_a_list(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    _check(envelope, torch.rand(50) > 0.7)

    def on_list(p):
        for i in range(len(p) - 2, -1, -1):
            p[i] = max(p[i], p[i + 1])
        return p
    vals = [0.3, 0.1, 0.9, 0.2, 0.5]
    assert autovec(on_list)(list(vals)) == on_list(list(vals))


def test_a_rebound_max_is_the_one_called():
    import builtins
    fast = autovec(running_max)
    x = torch.rand(300)
    torch.testing.assert_close(fast(x.clone()), running_max(x.clone()))
    g = running_max.__globals__
    g["max"] = builtins.min
    try:
        torch.testing.assert_close(fast(x.clone()), running_max(x.clone()))
    finally:
        del g["max"]


def test_a_range_down_with_empty_and_odd_bounds():
    def copy_down(x, a, b):
        out = torch.zeros_like(x)
        for i in range(a, b, -1):
            out[i] = x[i] * i
        return out
    fast = autovec(copy_down)
    x = torch.randn(50, 2)
    for a, b in [(49, -1), (10, 20), (49, 48), (30, 4), (-1, -30)]:
        torch.testing.assert_close(fast(x, a, b), copy_down(x, a, b))


# a store into t[i + s] that walks its own target (frontend._ShiftedStores)

def voc_envelope(mpre):
    mpre = mpre.clone()
    for i in range(mpre.shape[0] - 1, 0, -1):
        mpre[i - 1] = torch.maximum(mpre[i - 1], mpre[i])
    return mpre


def voc_envelope_python_max(mpre):
    mpre = mpre.clone()
    for i in reversed(range(1, len(mpre))):
        mpre[i - 1] = max(mpre[i - 1], mpre[i])
    return mpre


def shifted_difference(x):
    out = torch.zeros(x.shape[0] - 1, dtype=x.dtype)
    for i in range(1, x.shape[0]):
        out[i - 1] = x[i] - x[i - 1]
    return out


def shifted_prefix(x):
    out = x.clone()
    for i in range(len(out) - 1):
        out[i + 1] = out[i + 1] + out[i]
    return out


def shifted_in_a_tuple(x):
    out = x.clone()
    for i in range(2, len(out)):
        out[i - 2, 0] = out[i - 1, 0] * 2 + x[i, 1]
    return out


def index_read_after(x):
    out = x.clone()
    for i in range(1, len(out)):
        out[i - 1] = torch.maximum(out[i - 1], out[i])
    return out, i


def index_as_a_value(x):
    out = torch.zeros_like(x)
    for i in range(1, x.shape[0]):
        out[i - 1] = x[i] * i
    return out


SHIFTED = [voc_envelope, voc_envelope_python_max, shifted_difference, shifted_prefix, shifted_in_a_tuple,
           index_read_after, index_as_a_value]


@pytest.mark.parametrize("fn", SHIFTED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_shifted_stores_are_the_loops(fn, dtype):
    torch.manual_seed(0)
    fast = autovec(fn)
    for n in (1, 2, 3, 9, 400):
        x = (torch.randn(n, 2) * 5 if fn is shifted_in_a_tuple else torch.randn(n) * 5).to(dtype)
        if fn is index_read_after and n == 1:
            for f in (fn, fast):        # (no iteration: `i` unbound, in the loop too)
                with pytest.raises(UnboundLocalError):
                    f(x.clone())
            continue
        want, got = fn(x.clone()), fast(x.clone())
        if isinstance(want, tuple):
            assert type(got) is tuple and got[1] == want[1]
            want, got = want[0], got[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("fn", [voc_envelope, voc_envelope_python_max, shifted_prefix])
def test_shifted_scans_are_batched(fn):
    fast = autovec(fn)
    x = torch.rand(3000)
    for _ in range(3):
        fast(x.clone())
    ex = explain(fast, x.clone())
    assert ex.path == "vectorized" and "cum" in ex.loops[0].reason


def test_an_index_read_after_the_loop_keeps_its_last_value():
    fast = autovec(index_read_after)
    x = torch.rand(50)
    assert fast(x.clone())[1] == index_read_after(x.clone())[1] == 49


# probeC: the loop variable after an in-place scan; bounds the shift would change; globals

def cumsum_then_index(p):
    for i in range(1, p.shape[0]):
        p[i] = p[i] + p[i - 1]
    return p, i


def envelope_then_index(p):
    i = -1
    for i in range(p.shape[0] - 2, -1, -1):
        p[i] = max(p[i], p[i + 1])
    return p, i


@pytest.mark.parametrize("fn", [cumsum_then_index, envelope_then_index])
def test_the_index_after_an_in_place_scan(fn):
    fast = autovec(fn)
    for _ in range(3):
        x = torch.rand(2000)
        want, got = fn(x.clone()), fast(x.clone())
        assert got[1] == want[1]
        torch.testing.assert_close(got[0], want[0])
    assert explain(fast, torch.rand(2000)).path == "vectorized"


G_INDEX = "unset"


def scan_global_index(m):
    global G_INDEX
    for G_INDEX in range(1, m.shape[0]):
        m[G_INDEX] = m[G_INDEX] + m[G_INDEX - 1]
    return m


def shifted_global_index(m):
    global G_INDEX
    for G_INDEX in range(m.shape[0] - 1, 0, -1):
        m[G_INDEX - 1] = torch.maximum(m[G_INDEX - 1], m[G_INDEX])
    return m


@pytest.mark.parametrize("fn", [scan_global_index, shifted_global_index])
@pytest.mark.parametrize("nan", [False, True])
def test_a_global_index_keeps_its_last_value(fn, nan, monkeypatch):
    global G_INDEX
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.rand(40)
    if nan:
        x[7] = float("nan")      # (the scan refuses: the loop runs)
    G_INDEX = "unset"
    want = fn(x.clone())
    want_index = G_INDEX
    G_INDEX = "unset"
    got = autovec(fn)(x.clone())
    assert G_INDEX == want_index
    torch.testing.assert_close(got, want, equal_nan=True)


class _Index:
    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


def shifted_from(m, lo):
    m = m.clone()
    for i in range(lo, m.size(0)):
        m[i - 1] = m[i - 1] + m[i]
    return m


@pytest.mark.parametrize("lo", [__import__("numpy").uint8(0), torch.tensor(0, dtype=torch.uint8), _Index(1), 1])
def test_bounds_the_shift_would_change_keep_the_loop(lo, monkeypatch):
    # (`lo - 1` of a uint8 wraps to 255; an object with `__index__` alone has no `-`)
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.rand(6)
    torch.testing.assert_close(autovec(shifted_from)(x, lo), shifted_from(x, lo))


# loop nests walking down: the levels of a nest run forward, so a reversed level keeps its own loop
# (`reversed(range(..))` in a nest appended in forward order before; fuzz win seed 19)

def windows_down(x):
    outs = []
    for i in range(x.shape[0] - 2, -1, -1):
        for j in range(0, x.shape[1] - 1, 2):
            outs.append(x[i:i + 2, j:j + 2].float().mean())
    return outs


def windows_reversed(x):
    outs = []
    for i in reversed(range(x.shape[0] - 1)):
        for j in range(0, x.shape[1] - 1, 2):
            outs.append(x[i:i + 2, j:j + 2].float().mean())
    return outs


def inner_reversed(x):
    outs = []
    for i in range(x.shape[0]):
        for j in reversed(range(x.shape[1])):
            outs.append(x[i, j] * 2)
    return torch.stack(outs)


@pytest.mark.parametrize("fn", [windows_down, windows_reversed, inner_reversed])
def test_nests_walking_down_keep_the_loops_order(fn, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(fn)
    for shape in [(5, 6), (2, 3), (9, 4)]:
        x = torch.randn(*shape)
        want, got = fn(x), fast(x)
        if isinstance(want, list):
            assert len(got) == len(want)
            for a, b in zip(want, got):
                torch.testing.assert_close(b, a)
        else:
            torch.testing.assert_close(got, want)
