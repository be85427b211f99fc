"""Python lists of numbers in loops: a list indexed by the loop (`temps[i]`) and a loop-invariant
list indexed by a per-iteration integer (`weights[int(y[i])]`). The batched body treats the list as
a batch of Python numbers (float64, int64, bool), so every operation promotes as the loop's weak
Python scalars do; vmap and broadcasting would see 0-d tensors, so they never run such a loop.
Checked against the loop: values, dtypes, errors, gradients, and the path taken."""
import math

import numpy as np
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(b, a, equal_nan=True, rtol=1e-5, atol=1e-6)
    else:
        assert type(a) is type(b)
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12) if isinstance(a, float) else a == b


def tempered_softmax(logits, temps):
    out = torch.empty_like(logits)
    for i in range(logits.shape[0]):
        out[i] = torch.softmax(logits[i] / temps[i], dim=0)
    return out


def scale_by_counts(x, counts):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * counts[i]
    return out


def number_arithmetic(x, scale):
    out = []
    for i in range(len(scale)):
        s = scale[i] * 2 + 1           # Python arithmetic on the element
        out.append(x[i] * s)
    return torch.stack(out)


def gated(x, flags):
    out = x.clone()
    for i in range(x.shape[0]):
        if flags[i]:
            out[i] = x[i] * 2
    return out


def shifted(x, temps):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] / temps[i - 1]   # temps[-1] on the first iteration: Python wraps around
    return out


def class_weighted(loss, y, class_weights):
    num = 0.0
    den = 0.0
    for i in range(loss.shape[0]):
        w = class_weights[int(y[i])]
        num = num + w * loss[i]
        den = den + w
    return num / den, den


def table_by_float(v, table):
    out = []
    for i in range(v.shape[0]):
        out.append(table[int(v[i])] * v[i])
    return torch.stack(out)


def float_total(c):
    acc = 0.0
    for i in range(c.shape[0]):
        acc = acc + float(c[i]) * 0.5
    return acc


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_temperature_list_runs_batched_and_matches(dtype):
    logits = torch.randn(40, 7).to(dtype)
    temps = [0.5 + (i % 5) * 0.3 for i in range(40)]
    fast = autovec(tempered_softmax)
    for _ in range(3):               # the first call checks, the later ones run the steady state
        _same(tempered_softmax(logits, temps), fast(logits, temps))
    assert _ran(fast) == {"batched"}
    assert explain(tempered_softmax, logits, temps).path == "vectorized"


def test_temperature_tuple_and_gradients():
    logits = torch.randn(12, 5, requires_grad=True)
    temps = tuple(0.25 + 0.1 * i for i in range(12))
    assert_equivalent(tempered_softmax, logits, temps, grad=True)
    fast = autovec(tempered_softmax)
    fast(logits, temps)
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.uint8])
def test_int_list_keeps_the_loops_dtype(dtype):
    x = torch.randint(0, 9, (30, 4)).to(dtype)
    counts = [i % 4 for i in range(30)]
    fast = autovec(scale_by_counts)
    _same(scale_by_counts(x, counts), fast(x, counts))
    assert _ran(fast) == {"batched"}


def test_python_arithmetic_on_the_element():
    x = torch.randn(20, 3)
    scale = [0.1 * i for i in range(20)]
    fast = autovec(number_arithmetic)
    _same(number_arithmetic(x, scale), fast(x, scale))
    assert _ran(fast) == {"batched"}


def test_bool_list_as_condition():
    x = torch.randn(25, 3)
    flags = [i % 3 == 0 for i in range(25)]
    fast = autovec(gated)
    _same(gated(x, flags), fast(x, flags))
    assert_equivalent(gated, x, flags)


@pytest.mark.parametrize("temps", [
    [1.0, 2, 3.0, 4.0, 5.0, 6.0],                                  # an int among floats: types differ
    [np.float64(1.0)] * 6,                                         # numpy numbers, not Python floats
    [1.0, 2.0, "3", 4.0, 5.0, 6.0],                                # not numbers
    [[1.0]] * 6,                                                   # nested lists
])
def test_lists_of_other_kinds_keep_the_loop(temps):
    x = torch.randn(6, 3)
    fast = autovec(tempered_softmax)
    assert_equivalent(fast, x, temps)       # the same values, or the same exception
    assert "batched" not in _ran(fast)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_keeps_the_loop(dtype):
    # torch computes a half tensor against a Python number in float32: a batch of the numbers
    # rounded to half would give other values, so the loop runs
    logits = torch.randn(40, 7).to(dtype)
    temps = [0.3 + (i % 5) * 0.37 for i in range(40)]
    fast = autovec(tempered_softmax)
    for _ in range(2):
        torch.testing.assert_close(fast(logits, temps), tempered_softmax(logits, temps), rtol=0, atol=0)
    assert _ran(fast) == set()


def test_ints_past_int64_keep_the_loop():
    x = torch.randn(4, 2, dtype=torch.float64)
    counts = [2 ** 70, 1, 2, 3]
    fast = autovec(scale_by_counts)
    with pytest.raises(OverflowError):
        scale_by_counts(x, counts)
    with pytest.raises(OverflowError):
        fast(x, counts)
    counts = [2 ** 62, 1, 2, 3]          # within int64: the batch
    _same(scale_by_counts(x, counts), fast(x, counts))


def test_short_list_raises_as_the_loop():
    x = torch.randn(8, 3)
    with pytest.raises(IndexError):
        tempered_softmax(x, [1.0] * 5)
    fast = autovec(tempered_softmax)
    with pytest.raises(IndexError):
        fast(x, [1.0] * 5)


def test_wrap_around_index_keeps_the_loops_answer():
    x = torch.randn(6, 2)
    temps = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    _same(shifted(x, temps), autovec(shifted)(x, temps))


def test_list_changed_between_calls():
    x = torch.randn(10, 4)
    fast = autovec(tempered_softmax)
    temps = [1.0] * 10
    for k in range(4):
        temps[k] = 0.5 + k              # the list is read again on every call
        _same(tempered_softmax(x, temps), fast(x, temps))
    ints = [1 + i for i in range(10)]   # another element type: another signature
    _same(tempered_softmax(x, ints), fast(x, ints))
    assert _ran(fast) == {"batched"}


def zipped(x, temps):
    out = []
    for t, row in zip(temps, x):
        out.append(torch.softmax(row / t, 0))
    return torch.stack(out), t, row              # the loop variables after the loop


def enumerated(x, w):
    total = 0.0
    for i, wi in enumerate(w):
        total = total + wi * x[i].sum()
    return total, wi, i


def stop_at(x, w):
    for t, row in zip(w, x):
        if row.sum() * t > 3:
            break
    return t, row


def python_sum(values):
    acc = 0.0
    for v in values:
        acc += v * 2
    return acc


@pytest.mark.parametrize("fn", [zipped, enumerated, stop_at])
def test_loops_over_a_number_list_beside_tensors(fn):
    x = torch.randn(30, 4)
    w = [0.5 + i * 0.1 for i in range(30)]
    fast = autovec(fn)
    for _ in range(3):
        want, got = fn(x, w), fast(x, w)
        for a, b in zip(want, got):
            _same(a, b)                            # a loop variable holds a Python number, as in the loop
    assert _ran(fast) == {"batched"}
    short = w[:17]                                 # zip stops at the shorter
    for a, b in zip(fn(x, short), fast(x, short)):
        _same(a, b)


def test_numbers_alone_keep_the_loop():
    fast = autovec(python_sum)
    values = [0.1 * i for i in range(50)]
    for _ in range(3):
        assert fast(values) == python_sum(values)   # exactly: the loop's own additions
    assert _ran(fast) == set()


@pytest.mark.parametrize("weights", [[1.0, 2.5, 0.5, 4.0], (1, 3, 5, 7), [0.5] * 4])
def test_class_weights_gather(weights):
    loss = torch.rand(50)
    y = torch.randint(-4, 4, (50,))    # negative labels index from the end, as in Python
    fast = autovec(class_weighted)
    for _ in range(2):
        want, got = class_weighted(loss, y, weights), fast(loss, y, weights)
        _same(want[0], got[0])
        _same(want[1], got[1])
    assert _ran(fast) == {"batched"}


def test_class_weights_out_of_range_raises_as_the_loop():
    loss = torch.rand(20)
    y = torch.randint(0, 4, (20,))
    y[7] = 4
    fast = autovec(class_weighted)
    with pytest.raises(IndexError):
        class_weighted(loss, y, [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(IndexError):
        fast(loss, y, [1.0, 2.0, 3.0, 4.0])


def test_class_weights_mixed_list_keeps_the_loop():
    loss = torch.rand(20)
    y = torch.randint(0, 4, (20,))
    fast = autovec(class_weighted)
    want, got = class_weighted(loss, y, [1.0, 2, 3.0, 4.0]), fast(loss, y, [1.0, 2, 3.0, 4.0])
    _same(want[0], got[0])
    _same(want[1], got[1])
    assert "batched" not in _ran(fast)


def test_int_of_float_rounds_toward_zero():
    v = torch.tensor([2.7, -1.5, 0.2, -0.9, 3.99, -3.2])
    table = [10.0, 20.0, 30.0, 40.0]
    fast = autovec(table_by_float)
    _same(table_by_float(v, table), fast(v, table))
    assert _ran(fast) == {"batched"}


@pytest.mark.parametrize("bad", [math.nan, math.inf, 1e30])
def test_int_of_nan_or_huge_behaves_as_the_loop(bad):
    v = torch.tensor([1.0, 2.0, bad, 0.5])
    table = [10.0, 20.0, 30.0, 40.0]
    assert_equivalent(table_by_float, v, table)     # the same values, or the same exception


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.bool])
def test_float_of_elements_is_a_python_sum(dtype):
    c = (torch.rand(64) * 10).to(dtype)
    fast = autovec(float_total)
    want, got = float_total(c), fast(c)
    assert type(got) is float
    assert got == pytest.approx(want, rel=1e-12)


def diag_scaled(x, temps):
    out = []
    for i in range(x.shape[0]):
        out.append(torch.diag(x[i]) * temps[i])    # torch.diag has no batched form here
    return torch.stack(out)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_no_batched_form_keeps_the_loop_not_vmap(dtype):
    # vmap would see each element as a 0-d float64 tensor: int64 rows times it give float64,
    # where the loop's Python float gives float32
    x = torch.randint(0, 5, (6, 3)).to(dtype)
    temps = [0.5 * i for i in range(6)]
    fast = autovec(diag_scaled)
    for _ in range(2):
        _same(diag_scaled(x, temps), fast(x, temps))
    assert _ran(fast) == set()
    assert explain(diag_scaled, x, temps).path == "python"


def rows_by_weight(x, w):
    out = []
    for i, row in enumerate(x):
        out.append(row * w[i] + w[i])      # an indexed list beside the walked tensor
    return torch.stack(out)


def test_indexed_list_in_a_loop_over_elements():
    x = torch.randn(12, 3)
    w = [0.25 * i for i in range(12)]
    fast = autovec(rows_by_weight)
    for _ in range(2):
        _same(rows_by_weight(x, w), fast(x, w))
    assert _ran(fast) == {"batched"}


def int_values(v):
    out = torch.zeros(v.shape[0], dtype=torch.int64)
    for i in range(v.shape[0]):
        out[i] = int(v[i]) * 3
    return out


@pytest.mark.parametrize("bad", [math.nan, math.inf, 1e30, -2.5])
def test_int_of_each_value_behaves_as_the_loop(bad):
    # int() rounds toward zero, raises on NaN and infinities, and makes big ints past int64
    v = torch.tensor([1.7, -2.2, bad, 0.5], dtype=torch.float64)
    assert_equivalent(int_values, v)


def item_sum(x):
    s = 0.0
    for i in range(len(x)):
        s += x[i].item()
    return s


def item_gen(x):
    return sum(x[i].item() for i in range(len(x)))


def item_append(x, w):
    out = []
    for i in range(len(w)):
        out.append(w[i] * x[i].item())
    return torch.stack(out)


def derived_attr(x, w):
    out = []
    for i in range(len(w)):
        v = x[i] * 2
        out.append(w[i] * v.real)
    return torch.stack(out)


def zipped_item(x, w):
    total = torch.zeros(())
    for a, b in zip(x, w):
        total = total + b * a.item()
    return total


@pytest.mark.parametrize("fn, args", [
    (item_sum, lambda: ([1, 2, 3] * 30,)),
    (item_sum, lambda: ((1.0, 2.0) * 40,)),
    (item_gen, lambda: ([True, False] * 20,)),
    (item_append, lambda: ([0.5] * 40, torch.randn(40, 3))),
    (zipped_item, lambda: ([0.5] * 40, torch.randn(40))),
])
def test_a_method_of_a_python_number_raises_as_the_loop(fn, args):
    # (probeC: the list of numbers was batched as a tensor, whose `.item()` answered where the
    # loop raises AttributeError)
    with pytest.raises(AttributeError) as want:
        fn(*args())
    with pytest.raises(AttributeError) as got:
        autovec(fn)(*args())
    assert str(got.value) == str(want.value)


def test_an_attribute_a_number_has_reads_the_numbers_own():
    # `.real` of a float is the float: the loop computes it, a tensor batch would too, but
    # attributes of numbers are left to the loop
    x, w = [0.5, 1.5, -2.0] * 10, torch.randn(30, 2)
    torch.testing.assert_close(autovec(derived_attr)(x, w), derived_attr(x, w))
    # a tensor in place of the list: vectorized as before
    t = torch.tensor(x)
    torch.testing.assert_close(autovec(item_append)(t, w), item_append(t, w))
    assert explain(item_append, t, w).path == "vectorized"
