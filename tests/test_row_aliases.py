"""Rows of an argument updated in place through a name (`r = x[i]; r[r < 0] = 0`, `h = x[i];
h += b`) are the row's own updates (analysis.loops._row_aliases), and a row read through a call
that makes new memory before its masked store (`v, _ = torch.topk(logits[i], k)`, then
`logits[i][logits[i] < v[-1]] = -inf`) is no view kept past the store (_NEW_MEMORY_CALLS). Both
were refused: "`r` is both updated in the loop and reassigned", "loop-carried dependency" (probeF).
Checked against the loop on every call of one decorated object: values, dtypes, the arguments
after the call, errors and gradients."""
import pytest
import torch

from autovec import autovec, explain
from conftest import same_on_every_call


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def relu_rows(x):
    for i in range(x.shape[0]):
        r = x[i]
        r[r < 0] = 0
    return x


def add_bias(x, b):
    for i in range(x.shape[0]):
        h = x[i]
        h += b
    return x


def clamp_part(x):
    for i in range(x.shape[0]):
        r = x[i, :2]
        r.clamp_(min=0)
    return x


def last_row_after(x, b):
    for i in range(x.shape[0]):
        r = x[i]
        r += b
    return x, r


def read_before_update(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i]
        y = r * 2
        r += 1
        out.append(y + r)
    return torch.stack(out), x


def topk_filter(logits, k):
    for i in range(logits.shape[0]):
        v, _ = torch.topk(logits[i], k)
        logits[i][logits[i] < v[-1]] = -float("inf")
    return logits


def sorted_threshold(x):
    for i in range(x.shape[0]):
        s = torch.sort(x[i]).values
        x[i][x[i] > s[-2]] = 0
    return x


def corners_to_sizes(boxes):
    for i in range(boxes.shape[0]):
        boxes[i, 2:] -= boxes[i, :2]        # (a part of the row the update does not write)
    return boxes


def scaled_half(boxes):
    for i in range(boxes.shape[0]):
        boxes[i, 2:] += boxes[i, :2] * 0.5
    return boxes


def ratio_in_place(boxes):
    for i in range(boxes.shape[0]):
        boxes[i, 0] /= boxes[i, 1]
    return boxes


def overlapping_update(boxes):
    for i in range(boxes.shape[0]):
        boxes[i, 1:] += boxes[i, :3]        # (overlaps the part it writes: the loop decides)
    return boxes


def slot_replaced(xs):
    # (a list's slot gets another tensor; `r` keeps the old one)
    for i in range(len(xs)):
        r = xs[i]
        xs[i] = r * 2
        r += 1
    return xs


def rebound(x):
    for i in range(x.shape[0]):
        r = x[i]
        r += 1
        r = x[i] * 2
    return x, r


def carried(x):
    r = x[0]
    for i in range(x.shape[0]):
        t = r * 1
        r = x[i]
        r += t
    return x


CASES = [
    (relu_rows, lambda: (torch.randn(7, 5),)),
    (relu_rows, lambda: (torch.randint(-5, 5, (7, 5)),)),
    (add_bias, lambda: (torch.randn(7, 5), torch.randn(5))),
    (add_bias, lambda: (torch.randn(7, 5), torch.randn(5).double())),   # (the loop raises: result type)
    (add_bias, lambda: (torch.randn(7, 5), torch.randn(7, 5))),        # (the loop raises: shape)
    (clamp_part, lambda: (torch.randn(7, 5),)),
    (last_row_after, lambda: (torch.randn(7, 5), torch.randn(5))),
    (read_before_update, lambda: (torch.randn(7, 5),)),
    (topk_filter, lambda: (torch.randn(7, 12), 3)),
    (topk_filter, lambda: (torch.randint(0, 4, (7, 12)).float(), 3)),  # (ties at the k-th value)
    (sorted_threshold, lambda: (torch.randn(6, 9),)),
    (rebound, lambda: (torch.randn(7, 5),)),
    (carried, lambda: (torch.randn(7, 5),)),
    (corners_to_sizes, lambda: (torch.rand(9, 4),)),
    (scaled_half, lambda: (torch.rand(9, 4),)),
    (ratio_in_place, lambda: (torch.rand(9, 4),)),
    (overlapping_update, lambda: (torch.rand(9, 4),)),
]


@pytest.mark.parametrize("fn, make", CASES)
def test_updates_through_a_row_name_are_the_rows(fn, make):
    same_on_every_call(fn, make, calls=4)


@pytest.mark.parametrize("fn, make", [CASES[0], CASES[2], CASES[5], CASES[6], CASES[7], CASES[8], CASES[10],
                                     CASES[13], CASES[14], CASES[15]])
def test_they_run_vectorized(fn, make):
    assert explain(fn, *make()).path == "vectorized"


def test_a_list_slot_replaced_keeps_the_loop():
    fast = autovec(slot_replaced)
    for seed in range(3):
        torch.manual_seed(seed)
        a = [torch.randn(3) for _ in range(5)]
        b = [t.clone() for t in a]
        want, got = slot_replaced(a), fast(b)
        assert all(torch.equal(p, q) for p, q in zip(want, got))
    assert explain(slot_replaced, [torch.randn(3) for _ in range(5)]).path == "python"


def test_gradients_through_rows_updated_by_name():
    def through(x, b):
        y = x * 1
        for i in range(y.shape[0]):
            h = y[i]
            h += b
            h[h < 0] = 0
        return y
    fast = autovec(through)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(6, 4, requires_grad=True)
        b = torch.randn(4, requires_grad=True)
        want = torch.autograd.grad(through(x, b).pow(2).sum(), (x, b))
        got = torch.autograd.grad(fast(x, b).pow(2).sum(), (x, b))
        for p, q in zip(want, got):
            torch.testing.assert_close(q, p)


# probeG's cases: a read after the row's masked store, and updates or copies of a row from a view
# of the same row (the loop's in-place operation meets its source part-way: torch raises on a
# contiguous row, and goes element by element on a strided one), and an update through an index
# that may be a tensor (the region read is a copy: updated in place, it was dropped)

def masked_then_read(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i]
        r[r < 0] = 0
        out.append(r.sum())
    return torch.stack(out)


def minus_own_first(x):
    for i in range(x.shape[0]):
        r = x[i]
        r -= r[0]
    return x


def minus_own_first_plain(x):
    for i in range(x.shape[0]):
        x[i] -= x[i][0]
    return x


def shift_within(x):
    for i in range(x.shape[0]):
        r = x[i]
        r[1:] = r[:-1]
    return x


def shift_within_plain(x):
    for i in range(x.shape[0]):
        x[i, 1:] = x[i, :-1]
    return x


def disjoint_copy(x):
    for i in range(x.shape[0]):
        x[i, :2] = x[i, 2:]
    return x


def update_at_index(x, idx, y):
    for i in range(x.shape[0]):
        x[i, idx] += y[i]
    return x


def update_by_mask(x, m, y):
    for i in range(x.shape[0]):
        x[i][m] *= y[i]
    return x


@pytest.mark.parametrize("fn, make", [
    (masked_then_read, lambda: (torch.randn(6, 5),)),
    (minus_own_first, lambda: (torch.randn(6, 5),)),              # (the loop raises)
    (minus_own_first, lambda: (torch.randn(5, 6).t(),)),          # (the loop subtracts the zeroed first)
    (minus_own_first_plain, lambda: (torch.randn(6, 5),)),
    (minus_own_first_plain, lambda: (torch.randn(5, 6).t(),)),
    (shift_within, lambda: (torch.randn(6, 5),)),
    (shift_within, lambda: (torch.randn(5, 6).t(),)),
    (shift_within_plain, lambda: (torch.randn(6, 5),)),
    (shift_within_plain, lambda: (torch.randn(5, 6).t(),)),
    (disjoint_copy, lambda: (torch.randn(6, 4),)),
    (update_at_index, lambda: (torch.randn(6, 5), torch.tensor([0, 3]), torch.randn(6, 2))),
    (update_at_index, lambda: (torch.randn(6, 5), torch.tensor([1, 1]), torch.randn(6, 2))),
    (update_by_mask, lambda: (torch.randn(6, 5), torch.tensor([True, False, True, False, False]), torch.randn(6, 1))),
])
def test_views_of_the_row_itself_and_updates_through_an_index(fn, make):
    same_on_every_call(fn, make, calls=4)


def number_through_a_mask(x, m):
    for i in range(x.shape[0]):
        x[i, m] = 0                     # (a Python number through an index tensor: setitem converts it)
    return x


def value_through_indices(x, idx, c):
    for i in range(x.shape[0]):
        x[i, idx] = c
    return x


def row_value_through_a_mask(x, m, v):
    for i in range(x.shape[0]):
        x[i, m] = v[i]
    return x


def fresh_through_indices(x, idx):
    out = torch.zeros(x.shape[0], 6)
    for i in range(x.shape[0]):
        out[i, idx] = 1
    return out


MASK = torch.tensor([1, 0, 1, 0, 0, 1], dtype=torch.bool)


@pytest.mark.parametrize("fn, make", [
    (number_through_a_mask, lambda: (torch.randn(5, 6), MASK)),
    (value_through_indices, lambda: (torch.randn(5, 6).half(), torch.tensor([1, 2]), 2.5)),
    (value_through_indices, lambda: (torch.randn(5, 6), torch.tensor([1, 2]), torch.tensor(3))),     # (raises)
    (value_through_indices, lambda: (torch.randn(5, 6), MASK, torch.tensor(3))),                     # (converted)
    (row_value_through_a_mask, lambda: (torch.randn(5, 6), MASK, torch.randint(0, 5, (5,)))),       # (converted)
    (row_value_through_a_mask, lambda: (torch.randn(5, 6), MASK, torch.randint(0, 5, (5, 3)))),     # (raises)
    (fresh_through_indices, lambda: (torch.randn(5, 6), torch.tensor([0, 4]))),
])
def test_one_value_an_iteration_through_an_index_tensor(fn, make):
    # (a batch of them of another dtype made index_put raise where the loop converts; probeH,
    # wrong before today)
    same_on_every_call(fn, make, calls=4)


def test_a_number_through_a_mask_runs_vectorized():
    assert explain(number_through_a_mask, torch.randn(5, 6), MASK).path == "vectorized"
