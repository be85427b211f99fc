"""Running values that are Python numbers in the loop (found by the real-world loops probe of
stop 21): a linear recurrence or running total over `.item()` / `.tolist()` numbers, started
from a Python number, gave 0-d float64 tensors where the loop gives Python floats (the values
were the same; `json.dumps`, `isinstance(v, float)` and `v + 1` told them apart)."""
import pytest
import torch

from autovec import autovec, explain
from conftest import outcome


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def ema_items(x, beta):
    avg = 0.0
    out = []
    for i in range(x.shape[0]):
        avg = beta * avg + (1 - beta) * x[i].item()
        out.append(avg)
    return out, avg


def ema_curve(losses, beta):
    avg = 0.0
    out = []
    for i, l in enumerate(losses.tolist()):
        avg = beta * avg + (1 - beta) * l
        out.append(avg / (1 - beta ** (i + 1)))
    return out


def running_total_tolist(x):
    s = 0.0
    out = []
    for v in x.tolist():
        s = s + v
        out.append(s)
    return out, s


def running_product_tolist(x):
    p = 1.0
    out = []
    for v in x.tolist():
        p = p * v
        out.append(p)
    return out, p


def momentum(gs, mu):
    v = 0.0
    for g in gs:
        v = mu * v + g.item()
    return v


def ema_from_tensor(x, beta):
    avg = torch.tensor(0.0, dtype=torch.float64)
    for i in range(x.shape[0]):
        avg = beta * avg + (1 - beta) * x[i].item()
    return avg


def _same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    else:
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("fn, args", [
    (ema_items, (torch.rand(300, dtype=torch.float64), 0.98)),
    (ema_curve, (torch.rand(300), 0.9)),
    (running_total_tolist, (torch.rand(300, dtype=torch.float64),)),
    (running_product_tolist, (torch.rand(300, dtype=torch.float64) + 0.5,)),
    (momentum, (torch.rand(300, dtype=torch.float64), 0.9)),
    (ema_from_tensor, (torch.rand(300, dtype=torch.float64), 0.98)),
])
def test_running_values_keep_the_loops_type(fn, args):
    fast = autovec(fn)
    for _ in range(4):
        _same(fast(*args), fn(*args))
    assert explain(fn, *args).path == "vectorized", str(explain(fn, *args))


# (stop 22, the state probe) terms that are Python numbers beside a 0-d float32 tensor factor:
# the loop's `h * a + v` stays float32 (a Python number does not widen it), the batch computed
# the first step against a float64 term

def decay_items(x, a):
    h = 0.0
    for i in range(x.shape[0]):
        h = h * a + x[i].sum().item()
    return h


def decay_items_tensor_start(x, a):
    h = torch.zeros(())
    for i in range(x.shape[0]):
        h = a * h + x[i].sum().item()
    return h


@pytest.mark.parametrize("fn", [decay_items, decay_items_tensor_start])
def test_python_terms_beside_a_float32_factor(fn):
    x, a = torch.randn(300, 4), torch.tensor(0.5)
    fast = autovec(fn)
    for _ in range(4):
        got, want = fast(x, a), fn(x, a)
        assert type(got) is type(want) and got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want)
    assert explain(fn, x, a).path == "vectorized"


# (stop 22, the state probe) numpy's float64 is a subclass of float: the loop's `.item() * s`
# keeps numpy's type, which the batch's Python numbers lost

def scaled_items_total(x, s):
    acc = 0.0
    for i in range(x.shape[0]):
        acc += x[i].sum().item() * s
    return acc


def scaled_items_list(x, s):
    return [x[i].sum().item() * s for i in range(x.shape[0])]


@pytest.mark.parametrize("fn", [scaled_items_total, scaled_items_list])
def test_numpy_scalars_keep_numpys_type(fn):
    np = pytest.importorskip("numpy")
    x = torch.randn(200, 4)
    fast = autovec(fn)
    for s in (np.float64(0.5), 0.5, np.float64(0.5), np.float32(0.5)):
        for _ in range(3):
            got, want = fast(x, s), fn(x, s)
            one, other = (got[0], want[0]) if isinstance(want, list) else (got, want)
            assert type(one) is type(other)
            assert got == pytest.approx(want, rel=1e-6)
        assert explain(fast, x, s).path == ("vectorized" if type(s) is float else "python")


def running_item_sums(x):
    s = 0
    out = []
    for i in range(x.shape[0]):
        s += x[i].item()
        out.append(s)
    return out


def running_item_products(x):
    p = 1
    out = []
    for i in range(x.shape[0]):
        p = p * x[i].item()
        out.append(p)
    return out


def stored_item_sums(x):
    out = torch.empty_like(x)
    s = 0
    for i in range(x.shape[0]):
        s = s + x[i].item()
        out[i] = s
    return out


def sum_of_running_sums(x):
    c = 0
    tot = 0
    for i in range(x.shape[0]):
        c = c + x[i].item()
        tot = tot + c
    return tot


@pytest.mark.parametrize("fn, x", [
    (running_item_sums, torch.full((10,), 2 ** 60)),
    (running_item_sums, torch.full((10,), -(2 ** 60))),
    (running_item_products, torch.full((4,), 2 ** 31 - 1, dtype=torch.int32)),
    (running_item_products, torch.full((50,), 3)),
    (stored_item_sums, torch.full((10,), 2 ** 60)),
    (sum_of_running_sums, torch.full((10,), 2 ** 60)),
    (running_item_sums, torch.arange(-20, 20)),        # (in range: the scan)
    (running_item_products, torch.tensor([3, -2, 0, 5])),
])
def test_running_python_ints_past_int64_are_the_loops(fn, x):
    """Found by the long-loops probe: running sums and products of `.item()` ints read in the
    loop ran as int64 scans and wrapped, where Python's ints grow (and a store of one past int64
    raises). Where a running value may pass int64's range, the loop runs."""
    g = autovec(fn)
    for _ in range(2):
        want, got = outcome(fn, x), outcome(g, x)
        if isinstance(want, torch.Tensor):
            assert torch.equal(got, want)
        else:
            assert got == want and type(got) is type(want)
            if isinstance(want, list):
                assert [type(v) for v in got] == [type(v) for v in want]


def running_item_max(v, m):
    out = []
    for i in range(v.shape[0]):
        m = max(m, v[i].item())
        out.append(m)
    return out, m


def running_item_min_stored(v, m):
    out = torch.empty(v.shape[0], dtype=torch.float64)
    for i in range(v.shape[0]):
        m = min(v[i].item(), m)
        out[i] = m
    return out


@pytest.mark.parametrize("fn, v, m", [
    (running_item_max, torch.tensor([0.05, 0.07]), 0.1),                       # 0.1 is no float32
    (running_item_max, torch.tensor([0.05, 0.07], dtype=torch.float16), 0.1),
    (running_item_max, torch.tensor([0.1, 0.07]), 0.1),                        # float32's 0.1 > 0.1
    (running_item_max, torch.tensor([1, 2, 0], dtype=torch.uint8), -1),        # -1 is no uint8
    (running_item_max, torch.tensor([1, 2, 0], dtype=torch.int32), 2 ** 62),
    (running_item_max, torch.tensor([1, 2, 0]), 2 ** 64),                      # beyond int64: the loop
    (running_item_min_stored, torch.tensor([1, 2, 0], dtype=torch.uint8), -1),
    (running_item_min_stored, torch.tensor([0.3, 0.2, 0.5]), 0.25),
])
def test_running_extremes_of_python_numbers_keep_the_starts_value(fn, v, m):
    """Found by the several-outputs probe: under vmap the running max of `.item()` numbers was
    computed in the values' dtype, so a Python start (0.1, -1 with uint8 values, 2**62 with
    int32 ones) was rounded or wrapped. The numbers are compared and kept at Python's precision."""
    g = autovec(fn)
    for _ in range(2):
        want, got = outcome(fn, v, m), outcome(g, v, m)
        if isinstance(want, torch.Tensor):
            assert torch.equal(got, want)
        else:
            assert got == want
            assert [type(x) for x in got[0]] == [type(x) for x in want[0]] and type(got[1]) is type(want[1])
