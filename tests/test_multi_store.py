"""Several stores into one output per iteration (`out[i, 0] = a; out[i, 1] = b`): committed one
after the other in the loop's order. Checked against the loop, including stores that overlap
within a row, an input stored as is (it must stay unchanged), and the forms that keep the loop."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def cxcywh_to_xyxy(boxes):
    out = torch.empty_like(boxes)
    for i in range(boxes.shape[0]):
        cx, cy, w, h = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
        out[i, 0] = cx - w / 2
        out[i, 1] = cy - h / 2
        out[i, 2] = cx + w / 2
        out[i, 3] = cy + h / 2
    return out


def overwrite(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i]              # the input itself, then a column of it overwritten
        out[i, 0] = 0.0
    return out


def twice(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 3
        out[i] = x[i] + 1          # the last store wins
    return out


def columns(x, out):
    for j in range(x.shape[1]):
        out[:, j] = x[:, j].cumsum(0) - 1
        out[:, j] = x[:, j] * 2          # the column stored again: the second store wins
    return out


def update_after_store(x, out):
    for j in range(x.shape[1]):
        out[:, j] = x[:, j].cumsum(0)
        out[:, j] *= x[:, j].abs() + 1   # reads the column the first store wrote
    return out


def masked_after_store(x):
    out = torch.zeros(x.shape[0], 2)
    for i in range(x.shape[0]):
        out[i] = x[i, :2] * 2
        if x[i].sum() > 0:
            out[i, 0] = -1.0             # where it does not happen, the first store stays
    return out


def masked(x):
    out = torch.zeros(x.shape[0], 2)
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            out[i, 0] = x[i].sum()
        out[i, 1] = x[i].max()
    return out


CASES = {
    "cxcywh_to_xyxy": (cxcywh_to_xyxy, lambda: (torch.rand(9, 4),)),
    "overwrite": (overwrite, lambda: (torch.randn(7, 3),)),
    "twice": (twice, lambda: (torch.randn(7, 3),)),
    "columns": (columns, lambda: (torch.randn(5, 4), torch.randn(5, 4))),
    "masked": (masked, lambda: (torch.randn(8, 3),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_the_loop_and_vectorizes(name):
    fn, make = CASES[name]
    assert_equivalent(fn, *make(), trials=3)      # results and every argument after the call
    fast = autovec(fn)
    fast(*make())
    assert _ran(fast), explain(fn, *make())


def test_an_input_stored_as_is_stays_unchanged():
    x = torch.randn(6, 3)
    keep = x.clone()
    got = autovec(overwrite)(x)
    torch.testing.assert_close(x, keep)
    torch.testing.assert_close(got, overwrite(keep))


def test_gradients():
    x = torch.rand(6, 4, requires_grad=True)
    assert_equivalent(cxcywh_to_xyxy, x, grad=True)


def shifted(x):
    out = torch.zeros(x.shape[0] + 1, 2)
    for i in range(x.shape[0]):
        out[i] = x[i]              # row i, then row i + 1: a later iteration overwrites
        out[i + 1, 0] = -1.0
    return out


def reads_between(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i, 0] = x[i, 0] * 2
        out[i, 1] = out[i, 0] + 1  # sees the first store
    return out


@pytest.mark.parametrize("fn, make", [
    (shifted, lambda: (torch.randn(5, 2),)),
    (reads_between, lambda: (torch.randn(5, 2),)),
    (masked_after_store, lambda: (torch.randn(6, 3),)),
])
def test_stores_at_other_rows_read_back_or_updated_keep_the_loop(fn, make):
    assert_equivalent(fn, *make(), trials=3)
    ex = explain(fn, *make())
    if fn is reads_between:
        # (read back in its own row only: the row copied at its first mention, analysis._row_local)
        assert ex.path == "vectorized", str(ex)
        return
    # the loop as written, or fission (the stores stay in a Python loop, values computed first)
    assert ex.loops[0].strategy in ("python", "fission")
    assert "more than once" in ex.loops[0].reason


def exp_then_column(x):
    out = torch.ones(x.shape[0], x.shape[1], dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i, 1] = (x[i] * x[i]).max()
        out[i] = torch.exp(x[i] - x[i].mean())
        out[i, 0] = x[i].amax()
    return out


def test_a_fresh_output_stored_into_twice_is_not_the_first_batch_itself():
    """The first store's batch (exp's output, saved for its gradient) must not become the output
    that the second store then writes into in place: the loop copies into `out`."""
    x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    assert_equivalent(exp_then_column, x, grad=True)
    fast = autovec(exp_then_column)
    fast(x).sum().backward()
    assert _ran(fast)


def test_an_update_after_a_store_of_the_same_column_is_forwarded():
    """`out[:, j] = v` then `out[:, j] *= w`: the update reads the value just stored
    (analysis._forwarded, tests/test_forwarded_rows.py), which the batch computes first."""
    assert_equivalent(update_after_store, torch.randn(5, 4), torch.randn(5, 4), trials=3)
    assert explain(update_after_store, torch.randn(5, 4), torch.randn(5, 4)).path == "vectorized"


def beam_reorder(seqs, parents, tokens):
    B, K, T = seqs.shape
    out = torch.empty(B, K, T + 1, dtype=seqs.dtype)
    for b in range(B):
        for k in range(K):
            out[b, k, :T] = seqs[b, parents[b, k]]
            out[b, k, T] = tokens[b, k]
    return out


def nest_overlapping_parts(x):
    B, K, T = x.shape
    out = torch.zeros(B, K, T)
    for b in range(B):
        for k in range(K):
            out[b, k, :] = x[b, k] * 2
            out[b, k, 0] = -1.0                   # after the whole row: this one wins
            out[b, k, 1:3] = x[b, k, :2] + 100
    return out


def nest_stats(x):
    out = torch.zeros(x.shape[0], x.shape[1], 3)
    for b in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[b, k, 0] = x[b, k].sum()
            out[b, k, 1] = x[b, k].max()
            out[b, k, 2] = x[b, k].min()
    return out


def nest_read_back(x):
    out = torch.zeros(x.shape[0], x.shape[1], 2)
    for b in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[b, k, 0] = x[b, k, 0]
            out[b, k, 1] = out[b, k, 0] * 2       # the part the store before wrote
    return out


def test_parts_of_one_element_stored_in_a_loop_nest():
    from conftest import check_loop
    g = torch.Generator().manual_seed(12)
    seqs, parents = torch.randint(0, 9, (6, 3, 5), generator=g), torch.randint(0, 3, (6, 3), generator=g)
    assert check_loop(beam_reorder, seqs, parents, torch.randint(0, 9, (6, 3), generator=g))
    x = torch.randn(5, 4, 6, generator=g)
    assert check_loop(nest_overlapping_parts, x, grad=(0,))
    assert check_loop(nest_stats, x, grad=(0,))
    assert explain(nest_stats, x).path == "vectorized"
    assert check_loop(nest_read_back, x, grad=(0,)) == set()
    assert explain(nest_read_back, x).loops[0].strategy == "python"


# a row stored, then an element of it at a per-iteration column (or the other order)

def smooth_fill(target, C, eps):
    dist = torch.empty(target.shape[0], C)
    for i in range(target.shape[0]):
        dist[i].fill_(eps / (C - 1))
        dist[i, target[i]] = 1 - eps
    return dist


def smooth_store(target, out, eps):
    for i, t in enumerate(target):
        out[i] = eps
        out[i, t] = 1 - eps
    return out


def element_then_row(x, cols):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i, cols[i]] = 5.0             # the row's store after it overwrites it
        out[i] = x[i] * 2
    return out


def row_then_two_elements(x, a, b):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i].exp()
        out[i, a[i]] = x[i].sum()
        out[i, b[i]] = -x[i, 0]           # where a[i] == b[i], this one wins
    return out


def test_a_row_then_an_element_of_it():
    from conftest import check_loop
    g = torch.Generator().manual_seed(3)
    t = torch.randint(0, 7, (40,), generator=g)
    assert check_loop(smooth_fill, t, 7, 0.1)
    assert check_loop(smooth_store, t, torch.randn(40, 7, dtype=torch.float64), 0.2)
    assert check_loop(smooth_store, t - 7, torch.randn(40, 7), 0.2)       # negative columns: from the end
    x = torch.randn(30, 5, generator=g)
    cols = torch.randint(0, 5, (30,), generator=g)
    assert check_loop(element_then_row, x, cols, grad=(0,))
    assert check_loop(row_then_two_elements, x, cols, torch.randint(0, 5, (30,), generator=g), grad=(0,))
    assert check_loop(row_then_two_elements, x, cols, cols.clone(), grad=(0,))
    assert explain(smooth_fill, t, 7, 0.1).path == "vectorized"


def test_a_row_then_an_element_out_of_range_raises_as_the_loop():
    from conftest import raises_as_loop
    t = torch.tensor([0, 3, 9, 1])
    raises_as_loop(IndexError, smooth_fill, t, 7, 0.1)
    out1, out2 = torch.zeros(4, 7), torch.zeros(4, 7)
    with pytest.raises(IndexError):
        smooth_store(t, out1, 0.1)
    with pytest.raises(IndexError):
        autovec(smooth_store)(t, out2, 0.1)
    assert torch.equal(out1, out2)      # the rows before the bad one written, as the loop left them


def row_then_read(x, cols):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i]
        out[i, cols[i]] = out[i].sum()    # reads the row the store wrote
    return out


def row_then_conditional_element(x, cols):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i]
        if x[i, 0] > 0:
            out[i, cols[i]] = 0.0
    return out


def row_then_element_of_another_row(x, cols):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i]
        out[cols[i], 0] = 9.0             # a row another iteration stores
    return out


def test_row_parts_that_keep_the_loop():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(12, 5, generator=g)
    cols = torch.randint(0, 5, (12,), generator=g)
    for fn in (row_then_conditional_element, row_then_element_of_another_row):
        assert_equivalent(fn, x, cols, trials=2)
        assert explain(fn, x, cols).loops[0].strategy in ("python", "fission"), fn.__name__


def test_a_row_stored_whole_then_read_runs_in_a_copy_of_the_row():
    # (stop 49: the whole row's store is a store into the row's copy, `r[...] = x[i]`, then
    # `r[cols[i]] = r.sum()`; analysis.loops._row_local)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(12, 5, generator=g)
    cols = torch.randint(0, 5, (12,), generator=g)
    assert_equivalent(row_then_read, x, cols, trials=2)
    got, want = autovec(row_then_read)(x, cols), row_then_read(x, cols)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)     # (the batch's own order of each row's sum)
    assert explain(row_then_read, x, cols).path == "vectorized"


def test_a_row_part_under_two_names_keeps_the_loop():
    def two_names(target, out, other):
        for i in range(target.shape[0]):
            out[i] = 0.5
            other[i, target[i]] = 1.0
        return out

    t = torch.randint(0, 4, (6,))
    out1 = torch.zeros(6, 4)
    out2 = out1.clone()
    want = two_names(t, out1, out1)
    got = autovec(two_names)(t, out2, out2)
    assert torch.equal(want, got) and torch.equal(out1, out2)


def test_a_row_part_in_the_steady_state_then_aliased_arguments():
    def scale_and_mark(x, t, out):
        for i in range(x.shape[0]):
            out[i] = x[i] * 2
            out[i, t[i]] = x[i, 0] + 1    # x is out on the last call: x[i, 0] is already doubled
        return out

    fast = autovec(scale_and_mark)
    g = torch.Generator().manual_seed(5)
    for k in range(24):
        x = torch.randn(9, 4, generator=g)
        t = torch.randint(0, 4, (9,), generator=g)
        assert torch.equal(fast(x, t, torch.zeros(9, 4)), scale_and_mark(x, t, torch.zeros(9, 4)))
    assert _ran(fast)
    x1 = torch.randn(9, 4, generator=g)
    x2 = x1.clone()
    assert torch.equal(fast(x2, t, x2), scale_and_mark(x1, t, x1))
    assert torch.equal(x1, x2)


def move(pos, vel, dt):
    for i in range(pos.shape[0]):
        pos[i, 0] += vel[i, 0] * dt
        pos[i, 1] += vel[i, 1] * dt
    return pos


def rescale(boxes, sizes):
    for i in range(boxes.shape[0]):
        boxes[i, 0::2] *= sizes[i, 1]
        boxes[i, 1::2] *= sizes[i, 0]
    return boxes


def move_then_read_moved(pos, vel, dt):
    for i in range(pos.shape[0]):
        pos[i, 0] += vel[i, 0] * dt
        pos[i, 1] += pos[i, 0] * dt      # reads what the first update wrote
    return pos


def move_own(pos, dt):
    for i in range(pos.shape[0]):
        pos[i, 0] += pos[i, 2] * dt
        pos[i, 1] -= pos[i, 1] * dt      # reads its own element before its update
    return pos


@pytest.mark.parametrize("fn, make", [
    (move, lambda: (torch.randn(50, 3), torch.randn(50, 3), 0.1)),
    (rescale, lambda: (torch.rand(40, 4), torch.rand(40, 2) * 100)),
    (move_own, lambda: (torch.randn(50, 3), 0.25)),
    (move, lambda: (torch.randint(-5, 5, (30, 2)), torch.randint(-5, 5, (30, 2)), 2)),
])
def test_updates_of_disjoint_parts_of_a_row_vectorize(fn, make):
    # each update reads only elements no store before it in the iteration writes: the row as it
    # was, which the batch reads
    from conftest import same_on_every_call
    same_on_every_call(fn, make)
    assert explain(fn, *make()).path == "vectorized"


def test_an_update_reading_an_updated_element_reads_the_rows_copy():
    from conftest import same_on_every_call
    # (the row copied at its first mention, analysis._row_local: the update reads the copy)
    same_on_every_call(move_then_read_moved, lambda: (torch.randn(20, 2), torch.randn(20, 2), 0.1))
    assert explain(move_then_read_moved, torch.randn(20, 2), torch.randn(20, 2), 0.1).path == "vectorized"


def test_updates_of_disjoint_parts_out_of_range_raise_as_the_loop():
    p1, p2 = torch.randn(6, 1), torch.randn(6, 1)       # no column 1: the second update raises
    p2.copy_(p1)
    v = torch.randn(6, 2)
    with pytest.raises(IndexError) as want:
        move(p1, v, 0.1)
    with pytest.raises(IndexError) as got:
        autovec(move)(p2, v, 0.1)
    assert str(got.value) == str(want.value) and torch.equal(p1, p2)   # the first row's column 0 moved


def test_updates_of_disjoint_parts_with_gradients():
    # (the second update's region is read again at its commit: a view taken before the first
    # update, which made `pos` require grad, is one autograd refuses to change in place)
    fast = autovec(move)
    for _ in range(4):       # (the first call's check, then the steady state)
        pos0, vel0 = torch.randn(30, 2), torch.randn(30, 2)
        grads = []
        for fn in (move, fast):
            vel = vel0.clone().requires_grad_()
            out = fn(pos0.clone(), vel, 0.5)
            (out * torch.arange(60.0).view(30, 2)).sum().backward()
            grads.append((out.detach(), vel.grad))
        assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


def fresh_overlap(x):
    out = torch.ones(x.shape[0], 4)
    for i in range(x.shape[0]):
        out[i, 0::2] *= x[i, 0]
        out[i, 0] += x[i, 1]         # an element the update before it wrote
    return out


def test_updates_of_overlapping_parts_of_a_row_run_on_its_copy():
    from conftest import same_on_every_call
    same_on_every_call(fresh_overlap, lambda: (torch.randn(20, 2),))
    assert explain(fresh_overlap, torch.randn(20, 2)).path == "vectorized"    # (_row_local)


# --- disjoint parts of a row under a condition (probeA: keypoints scaled where visible) ---

def scale_visible_keypoints(kp, sx, sy):
    for i in range(kp.shape[0]):
        if kp[i, 2] > 0:
            kp[i, 0] *= sx
            kp[i, 1] *= sy
    return kp


def fill_visible(kp, s):
    out = torch.zeros_like(kp)
    for i in range(kp.shape[0]):
        if kp[i, 2] > 0:
            out[i, 0] = kp[i, 0] * s
            out[i, 1] = kp[i, 1] * s
    return out


def condition_on_a_stored_element(kp, s):
    for i in range(kp.shape[0]):
        if kp[i, 0] > 0:
            kp[i, 0] *= s
            kp[i, 1] = kp[i, 0]        # (reads the element the first store wrote)
    return kp


def later_condition_on_a_stored_element(kp, s):
    for i in range(kp.shape[0]):
        if kp[i, 1] > 0:
            kp[i, 0] *= s
        if kp[i, 0] > 0:               # (reads it after the first `if` may have written it)
            kp[i, 1] *= s
    return kp


@pytest.mark.parametrize("fn, args", [
    (scale_visible_keypoints, lambda: (torch.randn(300, 3), 0.5, 2.0)),
    (scale_visible_keypoints, lambda: (torch.randint(-5, 5, (300, 3)), 2, 3)),
    (fill_visible, lambda: (torch.randn(300, 3), -1.5)),
])
def test_disjoint_parts_of_a_row_under_a_condition_vectorize(fn, args):
    a = args()
    want_args, got_args = [v.clone() if isinstance(v, torch.Tensor) else v for v in a], \
        [v.clone() if isinstance(v, torch.Tensor) else v for v in a]
    want = fn(*want_args)
    got = autovec(fn)(*got_args)
    assert torch.equal(got, want) and torch.equal(got_args[0], want_args[0])
    assert explain(fn, *a).path == "vectorized"


def test_disjoint_parts_under_a_condition_with_gradients():
    x = torch.randn(50, 3, dtype=torch.float64, requires_grad=True)
    got = autovec(fill_visible)(x, 2.0)
    want = fill_visible(x, 2.0)
    assert torch.equal(got, want)
    (g1,) = torch.autograd.grad(got.sum(), x)
    (g2,) = torch.autograd.grad(want.sum(), x)
    assert torch.equal(g1, g2)


@pytest.mark.parametrize("fn", [condition_on_a_stored_element, later_condition_on_a_stored_element])
def test_conditional_parts_reading_what_another_wrote_keep_the_loop(fn):
    x = torch.randn(40, 3)
    a, b = x.clone(), x.clone()
    assert torch.equal(autovec(fn)(a, 2.0), fn(b, 2.0)) and torch.equal(a, b)
    assert explain(fn, x.clone(), 2.0).path == "python"
