"""Stores into the outer loop's own row from an inner loop (imperfect nests: `for j in
range(T - 1): labels[i, j] = ...` then `labels[i, T - 1] = -100`): the row cloned before the
inner loop, the inner loop's stores into the clone, the row stored after it
(analysis.loops._inner_row_stores). Checked against the loop: values, dtypes, arguments after
the call, errors, aliasing, gradients, a large fresh output."""
import pytest
import torch

from autovec import autovec, explain
from conftest import check_loop, raises_as_loop, ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def shift_labels(input_ids, attention_mask):
    B, T = input_ids.shape
    labels = torch.empty_like(input_ids)
    for i in range(B):
        for j in range(T - 1):
            if attention_mask[i, j + 1] == 1:
                labels[i, j] = input_ids[i, j + 1]
            else:
                labels[i, j] = -100
        labels[i, T - 1] = -100
    return labels


def differences(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1] - 1):
            out[i, j] = x[i, j + 1] - x[i, j]
        out[i, -1] = 0.0
    return out


def columns_of_rows(x, w):
    out = torch.zeros(x.shape[0], w.shape[0], x.shape[2])
    for i in range(x.shape[0]):
        scale = x[i].abs().max()
        for k in range(w.shape[0]):
            out[i, k, :] = x[i, k] * w[k] / scale
    return out


def float_into_ints(x):
    out = torch.zeros(x.shape, dtype=torch.int32)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * 3 if x[i, j] > 0 else 0.5
    return out


def test_inner_row_stores_match_the_loop():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 30000, (12, 16), generator=g)
    mask = (torch.rand(12, 16, generator=g) > 0.3).long()
    assert check_loop(shift_labels, ids, mask)
    x = torch.randn(20, 7, generator=g)
    assert check_loop(differences, x, torch.zeros(20, 7))
    assert check_loop(differences, x.double(), torch.zeros(20, 7))       # float64 into float32
    assert check_loop(columns_of_rows, torch.randn(6, 3, 5, generator=g), torch.randn(3, 5, generator=g),
                      grad=(0, 1))
    assert check_loop(float_into_ints, x)
    for fn, args in ((shift_labels, (ids, mask)), (differences, (x, torch.zeros(20, 7))),
                     (float_into_ints, (x,))):
        assert explain(fn, *args).loops[0].strategy != "python", fn.__name__


def test_steady_state_and_a_large_fresh_output():
    fast = autovec(shift_labels)
    g = torch.Generator().manual_seed(1)
    for B, T in ((8, 10), (8, 10), (8, 10), (300, 2048), (300, 2048)):     # 4.9 MB of int64 rows
        ids = torch.randint(0, 30000, (B, T), generator=g)
        mask = (torch.rand(B, T, generator=g) > 0.3).long()
        assert torch.equal(fast(ids, mask), shift_labels(ids, mask))
    assert ran_modes(fast)


def test_an_output_that_is_the_input_keeps_the_loop():
    x = torch.randn(9, 6)
    a, b = x.clone(), x.clone()
    assert torch.equal(autovec(differences)(a, a), differences(b, b))
    assert torch.equal(a, b)


def out_of_range(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j + 1] = x[i, j]
    return out


def test_a_store_past_the_row_raises_as_the_loop():
    x = torch.randn(4, 5)
    o1, o2 = torch.zeros(4, 5), torch.zeros(4, 5)
    with pytest.raises(IndexError):
        out_of_range(x, o1)
    with pytest.raises(IndexError):
        autovec(out_of_range)(x, o2)
    assert torch.equal(o1, o2)        # the first row's writes before the error, as the loop left them


def reads_the_row(x, out):
    for i in range(x.shape[0]):
        for j in range(1, x.shape[1]):
            out[i, j] = out[i, j - 1] + x[i, j]     # a running sum along the row
    return out


def conditional_store(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                out[i, j] = x[i, j]
    return out


def bound_before(x, out):
    for i in range(x.shape[0]):
        out[i, 0] = 1.0                              # written before the inner loop
        for j in range(1, x.shape[1]):
            out[i, j] = x[i, j] * 2
    return out


@pytest.mark.parametrize("fn", [reads_the_row, bound_before])
def test_forms_left_as_they_were(fn):
    x = torch.randn(6, 5)
    check_loop(fn, x, torch.zeros(6, 5))
    from autovec.analysis.loops import _inner_row_stores
    import ast
    import inspect
    import textwrap
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    outer = tree.body[0].body[0]
    _, rows = _inner_row_stores(outer.body, "i")
    assert rows == set(), fn.__name__


def position_ids(mask):
    B, T = mask.shape
    pos_ids = torch.ones_like(mask)
    for b in range(B):
        pos = 0
        for t in range(T):
            if mask[b, t] == 1:
                pos_ids[b, t] = pos
                pos += 1
    return pos_ids


def until_negative(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        for t in range(x.shape[1]):
            if x[i, t] < -1:
                break
            out[i, t] = x[i, t] * 2
    return out


def guarded_read(x, idx):
    out = torch.full_like(x, -1.0)
    for i in range(x.shape[0]):
        for t in range(x.shape[1]):
            if idx[i, t] >= 0:
                out[i, t] = x[i, idx[i, t]]     # read only where the index is valid
    return out


def float_counter(mask):
    out = torch.zeros(mask.shape)
    for b in range(mask.shape[0]):
        s = 0.0
        for t in range(mask.shape[1]):
            if mask[b, t]:
                s = s + 0.1
                out[b, t] = s
    return out


def test_conditional_stores_into_the_outer_row():
    g = torch.Generator().manual_seed(3)
    mask = (torch.rand(30, 17, generator=g) > 0.3).long()
    assert check_loop(position_ids, mask)
    x = torch.randn(25, 9, generator=g)
    assert check_loop(until_negative, x)
    assert check_loop(until_negative, x, grad=(0,)) is not None        # (branches under grad: the loop)
    idx = torch.randint(-3, 9, (25, 9), generator=g)
    assert check_loop(guarded_read, x, idx)
    check_loop(float_counter, mask.bool())        # a Python float carried through a branch: the loop's values
    assert check_loop(conditional_store, x, torch.zeros(25, 9))
    for fn, args in ((position_ids, (mask,)), (until_negative, (x,)), (guarded_read, (x, idx))):
        assert explain(fn, *args).loops[0].strategy != "python", fn.__name__


def test_a_conditional_store_out_of_range_raises_as_the_loop():
    x = torch.randn(6, 5)
    idx = torch.randint(0, 5, (6, 5))
    idx[4, 2] = 7
    raises_as_loop(IndexError, guarded_read, x, idx)


# found by an adversarial probe: a Python number the loop stores is checked by setitem (300 into
# int8 raises), a batch of them under vmap would be a tensor, converted without that check

def narrow_constant(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = 1 if x[i, j] > -3 else 300
    return out


def item_values(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j].item() * 3
    return out


def index_values(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = i + j
    return out


def _outcome(fn, *args):
    try:
        return fn(*args)
    except (RuntimeError, ValueError) as e:
        return type(e)


def test_numbers_stored_from_an_inner_loop_are_checked_as_setitem_checks_them():
    fast = autovec(narrow_constant)
    x = torch.randn(30, 6)
    for _ in range(3):                      # every element takes the side that fits
        assert torch.equal(fast(x, torch.zeros(30, 6, dtype=torch.int8)),
                           narrow_constant(x, torch.zeros(30, 6, dtype=torch.int8)))
    assert ran_modes(fast)
    x[17, 2] = -5                           # one that takes 300, which int8 refuses
    assert _outcome(narrow_constant, x, torch.zeros(30, 6, dtype=torch.int8)) is RuntimeError
    assert _outcome(fast, x, torch.zeros(30, 6, dtype=torch.int8)) is RuntimeError
    xn = torch.randn(10, 4, dtype=torch.float64)
    xn[5, 1] = float("nan")
    assert _outcome(item_values, xn, torch.zeros(10, 4, dtype=torch.int64)) is RuntimeError
    assert _outcome(autovec(item_values), xn, torch.zeros(10, 4, dtype=torch.int64)) is RuntimeError
    big = torch.zeros(200, 3)
    assert _outcome(index_values, big, torch.zeros(200, 3, dtype=torch.int8)) is RuntimeError
    assert _outcome(autovec(index_values), big, torch.zeros(200, 3, dtype=torch.int8)) is RuntimeError
    assert check_loop(index_values, big, torch.zeros(200, 3, dtype=torch.int64))    # int64: vectorized


def test_a_float_past_complex64s_range_raises_as_the_loop():
    def fill_big(x):
        out = torch.zeros(x.shape[0], dtype=torch.complex64)
        for i in range(x.shape[0]):
            out[i] = 1e40
        return out
    raises_as_loop(RuntimeError, fill_big, torch.randn(5))


# found by an adversarial probe: a Python int an inner loop carries through a branch is an int64
# tensor in the batch, which wraps where Python's int grows on

def big_steps(x, out):
    for i in range(x.shape[0]):
        c = 2 ** 62
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                out[i, j] = c
                c += 2 ** 61
    return out


def near_the_top(x, out):
    for i in range(x.shape[0]):
        c = 2 ** 63 - 3
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                c += 1
            out[i, j] = c % 10
    return out


def doubling_after(x, out):
    for i in range(x.shape[0]):
        c = 1
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                c = c * 1000
        out[i] = c % 7                    # (stored after the inner loop: wrong before today too)
    return out


@pytest.mark.parametrize("fn", [big_steps, near_the_top, doubling_after])
def test_an_int_that_may_outgrow_int64_keeps_the_loop(fn):
    x = torch.ones(3, 10)
    o1 = torch.zeros(3, 10, dtype=torch.int64) if fn is not doubling_after else torch.zeros(3, dtype=torch.int64)
    o2 = o1.clone()
    want, got = _outcome(fn, x, o1), _outcome(autovec(fn), x, o2)
    assert want is got if isinstance(want, type) else torch.equal(want, got)
    if isinstance(_outcome(fn, x, o1.clone()), torch.Tensor):
        assert torch.equal(fn(x, o1.clone()), autovec(fn)(x, o2.clone()))
    assert explain(fn, x, o1).loops[0].strategy == "python"
    assert "outgrow int64" in explain(fn, x, o1).loops[0].reason
