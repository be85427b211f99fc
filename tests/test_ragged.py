"""Loops that pad a list of sequences into rows (`out[i, :len(s)] = s`, a collate function's
padding and its attention mask) run as one masked store per target (analysis/ragged.py,
ragged_rt.py): the loop's values, or the loop as written where the check refuses."""
import traceback

import pytest
import torch

from autovec import autovec, explain
from autovec import ragged_rt
from conftest import outcome


def seqs(n=32, longest=12, dtype=torch.long, tail=(), low=0):
    lens = torch.randint(low, longest + 1, (n,)).tolist()
    return [torch.randint(-50, 50, (k, *tail)).to(dtype) for k in lens]


def pad(seqs, value=0):
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = s
    return out


def pad_and_mask(seqs, T):
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for i in range(len(seqs)):
        n = seqs[i].shape[0]
        ids[i, :n] = seqs[i]
        mask[i][:n] = 1
    return ids, mask


def into(seqs, out, fill=-1.5):
    for i, s in enumerate(seqs):
        out[i, :s.size(0)] = s
        out[i, :s.size(0)] *= 1    # (not a store this strategy takes)
    return out


def features(seqs, out):
    for i, s in enumerate(seqs):
        out[i, :len(s)] = s
    return out


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def compare(f, make, calls=3):
    fast = autovec(f)
    for _ in range(calls):
        args = make()
        a1 = [[t.clone() for t in a] if isinstance(a, list) else a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        a2 = [[t.clone() for t in a] if isinstance(a, list) else a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        assert same(outcome(f, *a1), outcome(fast, *a2)) and same(a1, a2), f.__name__
    return fast


@pytest.mark.parametrize("f,make", [
    (pad, lambda: (seqs(),)),
    (pad, lambda: (seqs(40, 30, low=1), 7)),
    (pad_and_mask, lambda: (seqs(), 12)),
    (pad_and_mask, lambda: (seqs(30, 0), 4)),                                  # (every sequence empty)
    (features, lambda: (seqs(30, 6, torch.float32, (3,)), torch.zeros(30, 6, 3))),
    (features, lambda: (seqs(30, 6, torch.long, (2, 2)), torch.full((35, 9, 2, 2), 7.0, dtype=torch.float64))),
    (features, lambda: (seqs(30, 6, torch.long), torch.zeros(30, 6, dtype=torch.float64))),
    (features, lambda: (seqs(30, 6, torch.long), torch.zeros(30, 6, dtype=torch.bool))),
])
def test_the_loops_values(f, make):
    compare(f, make)
    ex = explain(f, *make())
    assert "ragged" in [r.strategy for r in ex.loops]
    assert ex.path == "vectorized", ex.notes


def test_the_rewritten_source():
    text = explain(pad_and_mask).rewritten_source
    assert "ids[:len(seqs), :max(_lens)][_mask] = torch.cat(seqs).to(ids.dtype)" in text
    assert "mask[:len(seqs), :max(_lens)][_mask] = 1" in text


@pytest.mark.parametrize("make,why", [
    (lambda: (seqs(30, 6) + [torch.zeros(3)], torch.zeros(31, 6, dtype=torch.long)), "dtype"),
    (lambda: (seqs(30, 6, tail=(2,)) + [torch.zeros(3, 3, dtype=torch.long)], torch.zeros(31, 6, 2, dtype=torch.long)), "past"),
    (lambda: (seqs(30, 9, low=8), torch.zeros(30, 6, dtype=torch.long)), "columns"),    # (the loop raises)
    (lambda: (seqs(30, 6), torch.zeros(15, 6, dtype=torch.long)), "rows"),              # (IndexError)
    (lambda: (seqs(5, 6), torch.zeros(5, 6, dtype=torch.long)), "faster"),
    (lambda: (seqs(30, 6, torch.complex64), torch.zeros(30, 6, dtype=torch.complex64)), "complex"),
    (lambda: ([t.float().requires_grad_() for t in seqs(30, 6)], torch.zeros(30, 6)), "grad"),
    (lambda: (seqs(30, 6), torch.zeros(6, 30, dtype=torch.long).t()), "contiguous"),
    (lambda: (seqs(30, 6, torch.float64), torch.zeros(30, 6, dtype=torch.int32)), "floating"),
    (lambda: (seqs(30, 6, torch.float64), torch.zeros(30, 6, dtype=torch.bfloat16)), "floating"),
    (lambda: (seqs(30, 6), torch.zeros(30, 6, dtype=torch.uint32)), "dtype"),
    (lambda: (seqs(30, 300, torch.float32, (8,)), torch.zeros(30, 300, 8)), "long"),
])
def test_refused_calls_run_the_loop(make, why):
    compare(features, make)
    ex = explain(features, *make())
    assert ex.path == "python" and any(why in n for n in ex.notes), ex.notes


def test_sequences_that_are_the_targets_rows_run_the_loop():
    """A sequence that is a view of the target reads what an earlier iteration stored."""
    def make():
        out = torch.arange(30 * 8).reshape(30, 8)
        return [out[(i + 1) % 30, :3 + i % 4] for i in range(30)], out

    compare(features, make)
    assert any("shares memory" in n for n in explain(features, *make()).notes)


def test_targets_sharing_memory_run_the_loop():
    def two(seqs, a, b):
        for i, s in enumerate(seqs):
            a[i, :len(s)] = s
            b[i, :len(s)] = 0
        return a, b

    def make():
        buf = torch.ones(60, 6, dtype=torch.long)
        return seqs(30, 6), buf[:30], buf[15:45]

    compare(two, make)
    assert any("two targets" in n for n in explain(two, *make()).notes)
    compare(two, lambda: (seqs(30, 6), torch.ones(30, 6, dtype=torch.long), torch.ones(30, 6, dtype=torch.long)))


def test_numbers_out_of_a_targets_range_run_the_loop():
    def flags(seqs, ids, m):
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
            m[i, :len(s)] = 300

    compare(flags, lambda: (seqs(30, 6), torch.zeros(30, 6, dtype=torch.long), torch.zeros(30, 6, dtype=torch.uint8)))
    compare(flags, lambda: (seqs(30, 6), torch.zeros(30, 6, dtype=torch.long), torch.zeros(30, 6, dtype=torch.int16)))
    assert ragged_rt._converts(300, torch.int16) and not ragged_rt._converts(300, torch.uint8)
    assert not ragged_rt._converts(1.5, torch.int32) and ragged_rt._converts(1.5, torch.bool)
    assert not ragged_rt._converts(1e300, torch.float32) and not ragged_rt._converts(10 ** 23, torch.float64)

    def big(seqs, ids, m, v):
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
            m[i, :len(s)] = 1e300        # (float32 raises after ids took its rows in the loop's first)

    compare(big, lambda: (seqs(30, 6), torch.zeros(30, 6, dtype=torch.long), torch.zeros(30, 6), 0))
    compare(big, lambda: (seqs(30, 6), torch.zeros(30, 6, dtype=torch.long), torch.zeros(30, 6, dtype=torch.float64), 0))


def test_an_infinite_constant_keeps_the_loop():
    def inf(seqs, m):
        for i, s in enumerate(seqs):
            m[i, :len(s)] = 1e400

    compare(inf, lambda: (seqs(30, 6), torch.zeros(30, 6)))
    assert explain(inf).loops[0].strategy != "ragged"


def test_functions_that_read_their_locals_are_left_alone():
    def peek(seqs, out):
        for i, s in enumerate(seqs):
            out[i, :len(s)] = s
        return sorted(locals())

    compare(peek, lambda: (seqs(30, 6), torch.zeros(30, 6, dtype=torch.long)))
    assert explain(peek).loops[0].strategy == "python"


def test_functions_that_read_their_frame_or_dir_are_left_alone():
    """(probeY) `dir()` and the running frame's `f_locals` list the rewritten function's locals,
    its generated names among them: such functions keep every loop as written."""
    import inspect
    import sys

    def by_dir(x):
        out = []
        for i in range(len(x)):
            out.append(x[i] * 2)
        return sorted(dir()), torch.stack(out)

    def by_frame(x):
        out = []
        for i in range(len(x)):
            out.append(x[i] * 2)
        return sorted(sys._getframe().f_locals), torch.stack(out)

    def by_inspect(x):
        out = []
        for i in range(len(x)):
            out.append(x[i] * 2)
        return sorted(inspect.currentframe().f_locals), torch.stack(out)

    x = torch.randn(5)
    for fn in (by_dir, by_frame, by_inspect):
        want, got = fn(x), autovec(fn)(x)
        assert want[0] == got[0] and torch.equal(want[1], got[1])
        assert explain(fn, x).path == "python"


def test_traceback_points_at_the_users_line():
    fast = autovec(features)
    with pytest.raises(RuntimeError) as info:
        fast(seqs(30, 9, low=8), torch.zeros(30, 6, dtype=torch.long))
    frame = traceback.extract_tb(info.tb)[-1]
    assert frame.filename == __file__ and "out[i, :len(s)] = s" in frame.line


def test_forms_it_leaves_alone():
    def reads_target(seqs, out):
        for i, s in enumerate(seqs):
            out[i, :len(s)] = s + out[i, 0]

    def index_after(seqs, out):
        for i, s in enumerate(seqs):
            out[i, :len(s)] = s
        return i

    def other_bound(seqs, out, k):
        for i, s in enumerate(seqs):
            out[i, :k] = s

    for f in (reads_target, index_after, other_bound):
        assert all(r.strategy != "ragged" for r in explain(f).loops), f.__name__
    compare(index_after, lambda: (seqs(30, 6), torch.zeros(30, 6, dtype=torch.long)))


def left_scaled(seqs, ids, mask):
    for i, s in enumerate(seqs):
        ids[i, -len(s):] = s * 2          # (a value other than the sequence: not taken)
        mask[i, -len(s):] = True
    return ids, mask


def left_and_right(seqs, ids, mask):
    for i in range(len(seqs)):
        n = seqs[i].size(0)
        ids[i][-n:] = seqs[i]
        mask[i, :n] = 1
    return ids, mask


def test_left_padding():
    make = lambda: (seqs(30, 6, low=1), torch.zeros(30, 8, dtype=torch.long), torch.zeros(30, 8, dtype=torch.bool))   # noqa: E731
    compare(left_and_right, make)
    ex = explain(left_and_right, *make())
    assert ex.loops[0].strategy == "ragged" and ex.path == "vectorized", ex.notes
    assert "torch.arange(ids.shape[1]) >= ids.shape[1]" in ex.rewritten_source
    # an empty sequence: `ids[i][-0:]` is the whole row, where the loop raises
    empty = lambda: (seqs(30, 6, low=1)[:-1] + [torch.zeros(0, dtype=torch.long)],     # noqa: E731
                     torch.zeros(30, 8, dtype=torch.long), torch.zeros(30, 8, dtype=torch.bool))
    compare(left_and_right, empty)
    assert any("left" in n for n in explain(left_and_right, *empty()).notes)
    # longer than the row: the loop raises at that row
    compare(left_and_right, lambda: (seqs(30, 9, low=9), torch.zeros(30, 8, dtype=torch.long),
                                     torch.zeros(30, 9, dtype=torch.bool)))
    assert explain(left_scaled).loops[0].strategy != "ragged"


def left_by_width(seqs, W):
    ids = torch.zeros(len(seqs), 8, dtype=torch.long)
    mask = torch.zeros(len(seqs), 8, dtype=torch.bool)
    for i in range(len(seqs)):
        n = seqs[i].shape[0]
        ids[i][W - n:] = seqs[i]
        mask[i, W - len(seqs[i]):] = True
    return ids, mask


@pytest.mark.parametrize("low", [0, 1])
def test_left_padding_counted_from_the_width(low):
    # `ids[i][W - n:]` with W the rows' width: padding before the sequence, and an empty sequence
    # writes nothing (W - 0 is past the row)
    make = lambda: (seqs(30, 6, low=low), 8)     # noqa: E731
    compare(left_by_width, make)
    ex = explain(left_by_width, *make())
    assert ex.loops[0].strategy == "ragged" and ex.path == "vectorized", ex.notes
    for other in (7, 9, 0):
        # another width: positions other than the last ones (or clipped), which the loop decides
        compare(left_by_width, lambda: (seqs(30, 6, low=1), other))      # noqa: B023
        assert explain(left_by_width, *(seqs(30, 6, low=1), other)).path == "python"


def test_rows_of_a_tensor_keep_the_other_strategies(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    make = lambda: (torch.randint(0, 9, (40, 6)), torch.zeros(40, 8, dtype=torch.long))   # noqa: E731
    compare(features, make)
    ex = explain(features, *make())
    assert ex.path == "vectorized" and any("does not take this call" in n for n in ex.notes), ex.notes


def test_strict_raises_where_the_form_refuses_a_call():
    from autovec import NotVectorizable

    strict = autovec(pad, strict=True)
    strict(seqs())
    with pytest.raises(NotVectorizable):     # (the ragged form's refusal, or the other strategy's after it)
        strict(seqs(30, 6) + [torch.zeros(2)])
