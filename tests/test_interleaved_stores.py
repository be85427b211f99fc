"""Stores into one tensor at other offsets (`pe[pos, i] = sin(..); pe[pos, i + 1] = cos(..)` over
`range(0, d, 2)`: the Transformer's positional encoding as tutorials write it): each store
commits its own rows, where the guard finds that no row is written by both (runtime._rows_apart:
offsets closer than the step). Two names for one tensor written at other offsets get the same
check (they were committed one after the other: wrong rows). Checked against the loop."""
import math

import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def positional_encoding(max_len: int, d_model: int):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d_model)))
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * (i + 1)) / d_model)))
    return pe


def encoding_columns(x, d_model: int):
    pe = torch.zeros(x.shape[0], d_model, dtype=x.dtype)
    position = torch.arange(x.shape[0], dtype=x.dtype)
    for i in range(0, d_model, 2):
        div = math.exp(-math.log(10000.0) * i / d_model)
        pe[:, i] = torch.sin(position * div)
        pe[:, i + 1] = torch.cos(position * div)
    return x + pe


def three_apart(x):
    out = torch.empty(x.shape[0] * 3)
    for i in range(0, out.shape[0], 3):
        out[i] = x[i // 3]
        out[i + 1] = x[i // 3] * 2
        out[i + 2] = -x[i // 3]
    return out


@pytest.mark.parametrize("fn, args", [(positional_encoding, (40, 16)), (positional_encoding, (7, 6)),
                                      (encoding_columns, (torch.randn(30, 12), 12)),
                                      (encoding_columns, (torch.randn(5, 8, dtype=torch.float64), 8))])
def test_positional_encodings(fn, args):
    fast = autovec(fn)
    for _ in range(4):
        got, want = fast(*args), fn(*args)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert explain(fn, *args).path == "vectorized"


def test_three_stores_a_step_apart():
    x = torch.randn(6)
    fast = autovec(three_apart)
    for _ in range(4):
        assert torch.equal(fast(x), three_apart(x))
    e = explain(three_apart, x)
    assert e.path == "vectorized", e.notes


def overlapping(x):
    out = torch.zeros(x.shape[0] + 1)
    for i in range(x.shape[0]):
        out[i] = x[i]
        out[i + 1] = -x[i]        # (the next iteration writes this row again: the loop's order decides)
    return out


def two_names(x, out, alias):
    for i in range(x.shape[0]):
        out[i] = x[i]
        alias[i + 1] = 0.0
    return out


def test_stores_whose_rows_meet_keep_the_loop():
    x = torch.randn(6)
    for _ in range(3):
        assert torch.equal(autovec(overlapping)(x), overlapping(x))
    e = explain(overlapping, x)
    assert e.path == "python" and "rows that may meet" in " ".join(e.notes), e.notes


def test_two_names_for_one_tensor_keep_the_loop():
    """(found by hand: before, the batch committed `out[i]`'s rows, then `alias[i + 1]`'s, and
    every row but the first ended 0.0)"""
    x = torch.randn(5)
    fast = autovec(two_names)
    for _ in range(4):     # (distinct tensors: vectorized, and its lane written for the signature)
        a, b = torch.zeros(6), torch.zeros(6)
        c, d = torch.zeros(6), torch.zeros(6)
        assert torch.equal(fast(x, a, b), two_names(x, c, d)) and torch.equal(b, d)
    for _ in range(3):     # (one tensor under both names: the lane and the guard refuse it)
        a, c = torch.zeros(6), torch.zeros(6)
        assert torch.equal(fast(x, a, a), two_names(x, c, c))
    e = explain(two_names, x, a, a)
    assert e.path == "python" and "under two names" in " ".join(e.notes), e.notes


def renamed_update(x, a):
    b = a                               # (the same tensor under a second name)
    for t in range(len(x)):
        a[t] = x[t] * 2
        b[t] = b[t] + 1                 # (reads the row `a[t]` just wrote)
    return a


def store_and_total(x, out, total):
    for i in range(x.shape[0]):
        out[i] = x[i]
        total += x[i]                   # (an in-place running total: every row of `out` when it is `total`)
    return out


def store_and_scatter(x, idx, out, hist):
    for i in range(x.shape[0]):
        out[i] = x[i]
        hist[idx[i]] += 1.0
    return out, hist


_X = torch.randn(8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("fn, make", [
    (renamed_update, lambda t: (_X, t)),
    (store_and_total, lambda t: (_X, t, t)),
    (store_and_scatter, lambda t: (_X, torch.tensor([0, 1, 2, 3, 0, 1, 2, 3]), t, t)),
])
def test_one_tensor_under_two_names_or_two_kinds_of_writes(fn, make):
    """(stop 32's probe, and by hand: each name's writes were batched as outputs of their own and
    committed one after the other, or a flagged read of its own row exempted from the aliasing
    check, where the loop interleaves them on one tensor: `renamed_update` gave 1.0 everywhere)"""
    fast = autovec(fn)
    for _ in range(3):
        got, want = fast(*make(torch.zeros(8))), fn(*make(torch.zeros(8)))
        for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert torch.equal(a, b)
    e = explain(fn, *make(torch.zeros(8)))
    assert e.path == "python" and "under two names" in " ".join(e.notes), e.notes


def read_back(x):
    out = torch.zeros(x.shape[0] + 1)
    for i in range(0, x.shape[0], 2):
        out[i] = x[i]
        out[i + 1] = out[i] * 2       # (reads a row the loop wrote)
    return out


def test_a_read_of_the_target_keeps_the_loop():
    x = torch.randn(6)
    for _ in range(3):
        assert torch.equal(autovec(read_back)(x), read_back(x))
    e = explain(read_back, x)
    assert e.path == "python" and "several offsets" in " ".join(l.reason for l in e.loops), e.loops


# ----------------------------------------------------------------------------- reads through objects and helpers

def _prev_through(read):
    def f(x, out, src):
        for i in range(1, x.shape[0]):
            out[i] = x[i] + read(src, i - 1)
        return out
    return f


def nested_three(x, out, src):
    for i in range(1, x.shape[0]):
        out[i] = x[i] + src[0][0][0][i - 1]      # (the output, three containers deep)
    return out


def wide_list(x, out, xs):
    for i in range(1, x.shape[0]):
        out[i] = x[i] + xs[70][i - 1]            # (past the 64 entries the check read before)
    return out


def through_helper(x, out, g):
    for i in range(1, x.shape[0]):
        out[i] = x[i] + g(i - 1)                 # (a helper that reads the output)
    return out


def _closure_over(o):
    def g(j):
        return o[j]
    return g


_BUF = torch.zeros(40)


def _read_global(j):
    return _BUF[j]


def through_global_helper(x, out):
    for i in range(1, x.shape[0]):
        out[i] = x[i] + _read_global(i - 1)
    return out


@pytest.mark.parametrize("fn, make", [
    (nested_three, lambda o: (o, [[[o]]])),
    (wide_list, lambda o: (o, [torch.zeros(40)] * 70 + [o])),
    (through_helper, lambda o: (o, _closure_over(o))),
    (through_helper, lambda o: (o, o.__getitem__)),
])
def test_the_output_read_through_objects_and_helpers_keeps_the_loop(fn, make):
    """(stop 32's second probe: the aliasing check followed containers two levels deep and 64
    entries wide, and no function's closure, defaults or globals, nor a bound method's object: the
    batch read the output's old rows where the loop reads the rows it just wrote)"""
    x = torch.arange(1.0, 41.0)
    for _ in range(3):
        o1, o2 = torch.zeros(40), torch.zeros(40)
        assert torch.equal(autovec(fn)(x, *make(o1)), fn(x, *make(o2)))
    if fn is not through_helper:       # (explain runs on copies of the tensors: a closure keeps the original)
        o = torch.zeros(40)
        assert explain(fn, x, *make(o)).path == "python"


def test_a_helper_reading_a_global_that_is_the_output():
    x = torch.arange(1.0, 41.0)
    for _ in range(3):
        _BUF.zero_()
        want = through_global_helper(x, _BUF).clone()
        _BUF.zero_()
        got = autovec(through_global_helper)(x, _BUF)
        assert torch.equal(got, want)
    o = torch.zeros(40)          # (another output: the helper's global is no alias of it)
    assert torch.equal(autovec(through_global_helper)(x, o), through_global_helper(x, torch.zeros(40)))
