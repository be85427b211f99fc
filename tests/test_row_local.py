"""A tensor read and written only in the iteration's own row, in parts (`out[i, 2:] -= out[i,
:2]; out[i, :2] += out[i, 2:] / 2`): the row copied at its first mention, its parts read and
written in the copy, and the row stored back after its last mention (analysis.loops
_row_local). The same operations on the same values, so the results are the loop's bit for
bit."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def xyxy_to_cxcywh(boxes):
    out = boxes.clone()
    for i in range(boxes.shape[0]):
        out[i, 2:] -= out[i, :2]
        out[i, :2] += out[i, 2:] / 2
    return out


def arcface_margin(cos, y, m, s):
    out = cos.clone()
    for i in range(cos.shape[0]):
        c = out[i, y[i]].clamp(-1 + 1e-7, 1 - 1e-7)
        out[i, y[i]] = torch.cos(torch.acos(c) + m)
    return out * s


def in_place_on_the_argument(b):
    for i in range(b.shape[0]):
        b[i, 2:] = b[i, 2:] - b[i, :2]
        b[i, 0] = b[i, 0] * 2
    return b


def _rand(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _run(fn, *args):
    a1 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    a2 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    want, got = fn(*a1), autovec(fn)(*a2)
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert all(torch.equal(x, y) for x, y in zip(a1, a2) if isinstance(x, torch.Tensor))
    return explain(fn, *args)


def test_box_conversion_in_parts_of_each_row():
    ex = _run(xyxy_to_cxcywh, _rand(500, 4))
    assert ex.path == "vectorized", str(ex)
    assert_equivalent(xyxy_to_cxcywh, _rand(20, 4, seed=1).requires_grad_(), grad=True)


def test_a_margin_at_each_rows_label():
    y = torch.randint(0, 10, (300,), generator=torch.Generator().manual_seed(2))
    ex = _run(arcface_margin, _rand(300, 10, seed=3) * 2 - 1, y, 0.5, 30.0)
    assert ex.path == "vectorized", str(ex)


def test_the_callers_tensor_is_updated_in_place():
    ex = _run(in_place_on_the_argument, _rand(100, 4, seed=4))
    assert ex.path == "vectorized", str(ex)


def test_under_a_branch_and_an_exit_between():
    def branch(x):
        out = x.clone()
        for i in range(x.shape[0]):
            out[i, :2] = out[i, 2:] * 2
            if out[i, 0] > 0.5:
                out[i, 3] = 0.0
        return out

    def leaves(x):
        out = x.clone()
        for i in range(x.shape[0]):
            out[i, :2] = out[i, 2:] * 2
            if x[i, 1] > 0.5:
                continue
            out[i, 3] = 0.0
        return out
    x = _rand(40, 4, seed=6)
    for fn in (branch, leaves):
        assert torch.equal(autovec(fn)(x.clone()), fn(x.clone()))


@pytest.mark.parametrize("kind", ["overlap", "other_row", "view_kept"])
def test_what_keeps_the_loop(kind):
    def overlap(x, y):
        out = x.clone()
        for i in range(x.shape[0]):
            out[i, :2] -= out[i, y[i]]    # (torch refuses a view into the part it writes: where y[i] < 2)
            out[i, 3] = 0.0
        return out

    def other_row(x):
        out = x.clone()
        for i in range(1, x.shape[0]):
            out[i, :2] = out[i - 1, 2:]
            out[i, 2:] *= 2
        return out

    def view_kept(x):
        out = x.clone()
        kept = []
        for i in range(x.shape[0]):
            v = out[i, :2]
            out[i, 2:] = v * 2
            kept.append(v)
        return out, kept

    fn = {"overlap": overlap, "other_row": other_row, "view_kept": view_kept}[kind]
    x = _rand(30, 4, seed=5)
    if kind == "overlap":
        y = torch.full((30,), 3)
        y[20] = 0
        with pytest.raises(RuntimeError, match="single memory location"):
            autovec(fn)(x, y)
        assert explain(fn, x, y).path == "python"
        return
    a, b = x.clone(), x.clone()
    want, got = fn(a), autovec(fn)(b)
    for w, g in zip(want if isinstance(want, tuple) else [want], got if isinstance(got, tuple) else [got]):
        if isinstance(w, list):
            assert all(torch.equal(p, q) for p, q in zip(w, g))
        else:
            assert torch.equal(w, g)
    assert explain(fn, x).path == "python"


def test_a_part_of_the_row_kept_as_it_is_keeps_the_loop():
    # (the loop's list holds views of the tensor's rows: later writes into it show there)
    def kept(x):
        out = x.clone()
        rows = []
        for i in range(x.shape[0]):
            out[i, :2] = out[i, 2:] * 2
            rows.append(out[i])
        out += 1
        return rows
    x = _rand(20, 4, seed=7)
    want, got = kept(x.clone()), autovec(kept)(x.clone())
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    ex = explain(kept, x)
    assert ex.path == "python" and "loop-carried dependency: `out`" in ex.loops[0].reason, str(ex)


def test_under_autograd_the_loop_runs():
    # (probeW: the loop's backward raises, `sin` saved the row's element that the next line
    # overwrites; the copy's would not)
    def sin_at_label(x, y):
        out = x.clone()
        for i in range(out.shape[0]):
            c = out[i, y[i]].sin()
            out[i, y[i]] = c
        return out
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(8))
    y = torch.randint(0, 5, (6,), generator=torch.Generator().manual_seed(9))
    assert explain(sin_at_label, x, y).path == "vectorized"
    ex = explain(sin_at_label, x.clone().requires_grad_(), y)
    assert ex.path == "python", str(ex)
    for fn in (sin_at_label, autovec(sin_at_label)):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            fn(x.clone().requires_grad_(), y).sum().backward()


def whole_row_then_parts(x, c0, wv):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i] = x[i] % 3                  # (an int row stored into a float64 row: cast by setitem)
        out[i] += x[i] // 2
        out[i, 2] = (x[i] > 0).sum()
        out[i, 0] = torch.dot(x[i] + c0, wv)
    return out


def whole_row_of_one_number(x):
    out = torch.empty(x.shape[0], 4)
    for i in range(x.shape[0]):
        out[i] = x[i].sum()               # (one number broadcast over the row)
        out[i, 1:] *= 2
    return out


def test_a_whole_rows_store_is_a_store_into_the_copy():
    # (fuzz store2 seed 956036: `out[i] = v` became a new value for the copy, of v's dtype and
    # shape, and the later part's float store into that int copy was truncated)
    g = torch.Generator().manual_seed(956036)
    x = torch.randint(-4, 5, (16, 4), generator=g)
    args = (x, torch.tensor(1.5, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64))
    got, want = autovec(whole_row_then_parts)(*args), whole_row_then_parts(*args)
    assert got.dtype == want.dtype
    assert torch.equal(got[:, 1:], want[:, 1:])       # (the truncation made whole units of difference)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)     # (the batched dot's own order)
    assert explain(whole_row_then_parts, *args).path == "vectorized"
    y = torch.randn(5, 3)
    got, want = autovec(whole_row_of_one_number)(y), whole_row_of_one_number(y)
    assert got.shape == want.shape and torch.equal(got, want)


# --- a part of the row read and written in one statement (probeA: a repetition penalty) ---

def repetition_penalty(logits, prev_ids, penalty: float = 1.3):
    logits = logits.clone()
    for i in range(logits.shape[0]):
        logits[i, prev_ids[i]] = logits[i, prev_ids[i]] / penalty
    return logits


def test_one_statement_reading_and_writing_part_of_the_row():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(64, 100, generator=g)
    prev = torch.randint(0, 100, (64, 20), generator=g)      # (repeated ids within a row)
    f = autovec(repetition_penalty)
    for _ in range(3):
        assert torch.equal(f(logits, prev), repetition_penalty(logits, prev))
    assert explain(f, logits, prev).path == "vectorized"
