"""`res[i] = v` into a Python list (`res = [None] * n`, filled by index): the batch's rows go
into the list's slots at the commit, as the loop's values would be (runtime._list_store):
tensors of their own, the input's views where the loop's values are views, or Python numbers.
It was refused ("the written value is a list, not a tensor"). Checked against the loop on
every call of one decorated object: the list's elements (type, dtype, values, memory they
share), the arguments after the call, errors and gradients."""

import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes, same_on_every_call


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def filled(x, w):
    res = [None] * x.shape[0]
    for i in range(x.shape[0]):
        res[i] = torch.tanh(x[i] @ w)
    return res


def stacked(x, w):
    res = [None] * x.shape[0]
    for i in range(x.shape[0]):
        res[i] = torch.tanh(x[i] @ w)
    return torch.stack(res)


def numbers(x):
    res = [0.0] * x.shape[0]
    for i in range(x.shape[0]):
        res[i] = x[i].sum().item()
    return res


def views(x):
    res = [None] * len(x)
    for i in range(len(x)):
        res[i] = x[i]
    return res


def shifted(x):
    res = [None] * (x.shape[0] + 2)
    for i in range(x.shape[0]):
        res[i + 2] = x[i].exp()
    return res


def backwards(x):
    res = [None] * x.shape[0]
    for i in range(x.shape[0] - 1, -1, -1):
        res[i] = x[i] * 2
    return res


def every_other(x):
    res = ["keep"] * (2 * x.shape[0])
    for i in range(0, 2 * x.shape[0], 2):
        res[i] = x[i // 2] + 1
    return res


def too_short(x):
    res = [None] * (x.shape[0] - 1)
    for i in range(x.shape[0]):
        res[i] = x[i].exp()
    return res


def into_argument(x, res):
    for i in range(x.shape[0]):
        res[i] = x[i] * 2
    return res


def same_value_twice(x):
    a = [None] * x.shape[0]
    b = [None] * x.shape[0]
    for i in range(x.shape[0]):
        v = x[i] + 1
        a[i] = v
        b[i] = v
    return a, b


def list_of_tensors(xs):
    for i in range(len(xs)):
        xs[i] = xs[i] * 2
    return xs


def _same(want, got, x=None):
    """Element by element: type, dtype, values bit for bit, requires_grad, and own memory
    (or the same memory where the loop's element is a view of `x`)."""
    if isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for p, q in zip(want, got):
            _same(p, q, x)
        return
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.requires_grad == want.requires_grad
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        if x is not None:
            assert (got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == \
                (want.untyped_storage().data_ptr() == x.untyped_storage().data_ptr())
    else:
        assert got == want


CASES = [
    (filled, lambda: (torch.randn(9, 5), torch.randn(5, 3))),
    (stacked, lambda: (torch.randn(9, 5), torch.randn(5, 3))),
    (numbers, lambda: (torch.randn(9, 5).double(),)),
    (numbers, lambda: (torch.randint(0, 9, (9, 5)),)),
    (shifted, lambda: (torch.randn(7, 4),)),
    (backwards, lambda: (torch.randn(7, 4),)),
    (every_other, lambda: (torch.randn(6, 3),)),
    (too_short, lambda: (torch.randn(6, 3),)),                         # (the loop raises IndexError)
    (into_argument, lambda: (torch.randn(6, 3), [None] * 6)),
    (into_argument, lambda: (torch.randn(6, 3), [None] * 4)),           # (too short: IndexError)
    (into_argument, lambda: (torch.randn(6, 3), (None,) * 6)),          # (a tuple: TypeError)
    (list_of_tensors, lambda: ([torch.randn(3) for _ in range(6)],)),
    (views, lambda: (torch.randn(6, 3),)),
]


@pytest.mark.parametrize("fn, make", CASES)
def test_list_slots_hold_what_the_loop_puts_there(fn, make):
    same_on_every_call(fn, make, calls=4, same=_same)


@pytest.mark.parametrize("fn, make", [CASES[0], CASES[1], CASES[2], CASES[4], CASES[5], CASES[8], CASES[11], CASES[12]])
def test_they_run_vectorized(fn, make):
    fast = autovec(fn)
    fast(*make())
    assert ran_modes(fast)
    assert explain(fn, *make()).path == "vectorized"


def test_views_of_the_input_stay_views():
    x = torch.randn(6, 3)
    fast = autovec(views)
    for _ in range(3):
        got = fast(x)
        _same(views(x), got, x)
    x[2].fill_(7.0)      # (a later write into the input reaches the list's element, as in the loop)
    assert bool((got[2] == 7.0).all())


def test_one_value_in_two_lists_is_one_tensor():
    fast = autovec(same_value_twice)
    for _ in range(3):
        a, b = fast(torch.randn(5, 2))
        assert all(p is q for p, q in zip(a, b))


def test_elements_are_tensors_of_their_own():
    fast = autovec(filled)
    x, w = torch.randn(6, 4), torch.randn(4, 2)
    for _ in range(3):
        got = fast(x, w)
    assert all(t._base is None for t in got)
    got[0].add_(1)        # (an in-place change of one element leaves the others alone)
    _same(filled(x, w)[1:], got[1:])


def test_gradients_flow_through_the_elements():
    x = torch.randn(7, 4, requires_grad=True)
    w = torch.randn(4, 3, requires_grad=True)
    fast = autovec(filled)
    for _ in range(3):
        got = fast(x, w)
    want = filled(x, w)
    weights = torch.randn(7, 3)
    g_want = torch.autograd.grad(sum((t * c).sum() for t, c in zip(want, weights)), (x, w))
    g_got = torch.autograd.grad(sum((t * c).sum() for t, c in zip(got, weights)), (x, w))
    for p, q in zip(g_want, g_got):
        torch.testing.assert_close(q, p)


def test_a_conditional_store_into_a_list_keeps_the_loop():
    def positive(x):
        res = [None] * x.shape[0]
        for i in range(x.shape[0]):
            if x[i].sum() > 0:
                res[i] = x[i] * 2
        return res
    fast = autovec(positive)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(8, 3)
        want, got = positive(x), fast(x)
        assert [t is None for t in want] == [t is None for t in got]
        _same([t for t in want if t is not None], [t for t in got if t is not None])


def written_then_read_elsewhere(x, a, b):
    out = []
    for i in range(x.shape[0]):
        a[i] = x[i] * 2
        out.append(b[i] + 1)
    return torch.stack(out)


def written_then_read_inside(x, a, box):
    out = []
    for i in range(x.shape[0]):
        a[i] = x[i] * 2
        out.append(box[0][0] + x[i])
    return torch.stack(out)


_SHARED = [torch.zeros(2) for _ in range(6)]


def _first_shared():
    return _SHARED[0] * 1


def written_then_read_by_a_helper(x):
    out = []
    for i in range(x.shape[0]):
        _SHARED[i] = x[i] * 2
        out.append(_first_shared() + x[i])
    return torch.stack(out)


def shifted_over_a_copy(res):
    for i, r in enumerate(res[:-1]):      # (a copy of the list: no slot read is one written)
        res[i + 1] = r * 2
    return res


def shifted_over_its_own_walk(res, ys):
    for i, (r, y) in enumerate(zip(res, ys)):
        res[i + 1] = r * y
    return res


def _one_list_twice():
    lst = [torch.randn(2) for _ in range(6)]
    return torch.randn(6, 2), lst, lst


def _one_list_boxed():
    lst = [torch.randn(2) for _ in range(6)]
    return torch.randn(6, 2), lst, [lst]


@pytest.mark.parametrize("fn, make", [
    (written_then_read_elsewhere, _one_list_twice),        # (`b` is `a`: a later iteration reads the new slot)
    (written_then_read_inside, _one_list_boxed),           # (inside a value the loop reads)
    (shifted_over_a_copy, lambda: ([torch.randn(2) for _ in range(6)],)),
    (shifted_over_its_own_walk, lambda: ([torch.randn(2) for _ in range(6)], torch.randn(4, 2))),  # (reads the slot the step before wrote)
])
def test_a_list_also_read_another_way_keeps_the_loop(fn, make):
    same_on_every_call(fn, make, calls=3, same=_same)


def test_a_list_a_helper_reads_keeps_the_loop():
    fast = autovec(written_then_read_by_a_helper)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(6, 2)
        _SHARED[:] = [torch.zeros(2) for _ in range(6)]
        want = written_then_read_by_a_helper(x)
        _SHARED[:] = [torch.zeros(2) for _ in range(6)]
        _same(want, fast(x))


def into_a_dict(x):
    res = {}
    for i in range(x.shape[0]):
        res[i] = x[i] * 2
    return res


def test_a_dict_keeps_the_loop_and_explain_says_why_on_later_calls(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP")
    fast = autovec(into_a_dict)
    x = torch.randn(300, 2)
    for _ in range(4):
        got = fast(x)
        assert list(got) == list(range(300)) and all(torch.equal(got[k], x[k] * 2) for k in got)
    notes = " ".join(explain(fast, x).notes)
    # (the bucket settled on the loop by refusals: the reason is the last refusal's, not "a first
    # call at this size tells why")
    assert "the last refusal: the written value is a dict, not a tensor" in notes


def two_slots_an_iteration(a, b):
    res = [None] * (a.shape[0] + 1)
    for i in range(a.shape[0]):
        res[i] = a[i] * 1
        res[i + 1] = b[i] * 1       # (the next iteration writes this slot again)
    return res


def one_list_two_names(x, a, b):
    for i in range(x.shape[0]):
        a[i] = x[i] * 2
        b[i + 1] = x[i] * 3
    return a


def a_number_then_a_constant(a):
    res = [None] * (a.shape[0] + 1)
    for i in range(a.shape[0]):
        res[i] = a[i].sum().item()
        res[i + 1] = -1.0
    return res


def one_object_everywhere(x, w):
    res = [None] * x.shape[0]
    for i in range(x.shape[0]):
        res[i] = w
    return res


def _shared_list():
    lst = [None] * 7
    return torch.randn(6, 2), lst, lst


@pytest.mark.parametrize("fn, make", [
    (two_slots_an_iteration, lambda: (torch.randn(5, 2), torch.randn(5, 2))),
    (one_list_two_names, _shared_list),
    (a_number_then_a_constant, lambda: (torch.randn(5, 2).double(),)),
])
def test_slots_written_twice_keep_the_loops_order(fn, make):
    same_on_every_call(fn, make, calls=4, same=_same)


def test_a_name_stored_in_every_slot_is_that_object():
    fast = autovec(one_object_everywhere)
    w = torch.randn(2)
    for _ in range(3):
        got = fast(torch.randn(5, 2), w)
        assert all(t is w for t in got)


# probeH's cases: a slot that takes a row the iteration changed (the loop's slot is that row, a
# view), a name read after the loop (the loop's last slot is that object), one row stored into
# two lists (two view objects in the loop)

def scaled_row_kept(x):
    res = [None] * x.shape[0]
    for i in range(x.shape[0]):
        r = x[i]
        r *= 3
        res[i] = r
    return res


def stored_row_kept(x):
    out = torch.zeros_like(x)
    res = [None] * x.shape[0]
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
        res[i] = out[i]
    return res, out


def last_name_after(x):
    a = [None] * x.shape[0]
    for i in range(x.shape[0]):
        v = x[i] * 2
        a[i] = v
    v += 1
    return a


def one_row_two_lists(x):
    a = [None] * x.shape[0]
    b = [None] * x.shape[0]
    for i in range(x.shape[0]):
        a[i] = x[i]
        b[i] = x[i]
    return a, b


def test_slots_that_are_rows_the_iteration_wrote_see_later_writes():
    for fn in (scaled_row_kept, stored_row_kept):
        fast = autovec(fn)
        for seed in range(3):
            torch.manual_seed(seed)
            a = torch.randn(5, 3)
            b = a.clone()
            want, got = fn(a), fast(b)
            _same(want, got)
            src_a = a if fn is scaled_row_kept else want[1]
            src_b = b if fn is scaled_row_kept else got[1]
            src_a.add_(100)
            src_b.add_(100)
            _same(want, got)       # (the loop's slots are views: they moved with their rows)


def test_a_name_read_after_the_loop_is_the_last_slot():
    fast = autovec(last_name_after)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(5, 3)
        _same(last_name_after(x), fast(x))


def test_one_row_in_two_lists_is_two_objects():
    fast = autovec(one_row_two_lists)
    for _ in range(3):
        a, b = fast(torch.randn(5, 3))
        assert all(p is not q for p, q in zip(a, b))


def branch_numbers(x):
    res = [None] * x.shape[0]
    for i in range(x.shape[0]):
        if x[i] > 1:
            res[i] = 2.5
        else:
            res[i] = 1
    return res


def test_stores_from_branches_into_a_list_keep_each_values_type():
    # (the branches' values merged into one float64 batch gave 1.0 where the loop's slot holds
    # the int 1; probeN): the loop runs
    f = autovec(branch_numbers)
    for x in (torch.rand(50) * 0.5, torch.rand(50) * 3):
        for _ in range(3):
            want, got = branch_numbers(x), f(x)
            assert got == want and [type(v) for v in got] == [type(v) for v in want]


# Counts into a Python list of ints (runtime._list_scatter)

def class_counts(labels, C):
    counts = [0] * C
    for l in labels:
        counts[int(l)] += 1
    return counts


def weighted_counts(labels, w, counts):
    for i in range(labels.shape[0]):
        if w[i] > 0:
            counts[labels[i]] -= w[i].item()     # (negative labels count from the end, as a list does)
    return counts


def _outcome(fn, *args):
    import copy
    args = copy.deepcopy(args)
    try:
        return fn(*args), args
    except Exception as e:       # noqa: BLE001 (the loop's own error, compared)
        return (type(e), str(e)), args


def _same_outcome(a, b):
    (ra, aa), (rb, ab) = a, b
    if type(ra) is not type(rb) or ra != rb:
        return False
    if isinstance(ra, list) and [type(v) for v in ra] != [type(v) for v in rb]:
        return False
    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(aa, ab))


@pytest.mark.parametrize("n", [0, 1, 5, 200])
def test_counts_into_a_list_of_ints(n):
    g = torch.Generator().manual_seed(n)
    fast = autovec(class_counts)
    for _ in range(3):
        labels = torch.randint(0, 6, (n,), generator=g)
        assert _same_outcome(_outcome(fast, labels, 6), _outcome(class_counts, labels, 6))
    if n > 1:
        assert explain(class_counts, labels, 6).path == "vectorized"


def test_weighted_counts_under_a_condition_with_negative_indices():
    g = torch.Generator().manual_seed(3)
    labels, w = torch.randint(-4, 4, (50,), generator=g), torch.randint(-2, 5, (50,), generator=g)
    args = (labels, w, [0, 10, 20, 30])
    assert _same_outcome(_outcome(autovec(weighted_counts), *args), _outcome(weighted_counts, *args))
    assert explain(weighted_counts, *args).path == "vectorized"


@pytest.mark.parametrize("counts, labels", [
    ([0, 1, 2.5, 3], torch.tensor([0, 2, 2, 1])),               # a float element: the order of additions decides
    ([0, 1, True, 3], torch.tensor([0, 2, 2, 1])),              # a bool element
    ([0, 1, 2, 3], torch.tensor([0, 2, 4, 1])),                 # an index past the end: IndexError after updates
    ([0, 1, 2, 2 ** 62], torch.tensor([3, 3, 3, 3])),          # past int64: the loop's ints do not wrap
])
def test_other_lists_and_indices_keep_the_loop(counts, labels):
    args = (labels, torch.ones(4, dtype=torch.long), counts)
    assert _same_outcome(_outcome(autovec(weighted_counts), *args), _outcome(weighted_counts, *args))
    assert explain(weighted_counts, *args).path == "python"


def test_tensor_values_into_a_list_keep_the_loop():
    def tensor_counts(labels, w):
        counts = [0, 0, 0]
        for i in range(labels.shape[0]):
            counts[labels[i]] += w[i]        # (each bin becomes a 0-d tensor in the loop)
        return counts
    labels, w = torch.tensor([0, 2, 2, 1]), torch.tensor([1.0, 2.0, 3.0, 4.0])
    want, got = tensor_counts(labels, w), autovec(tensor_counts)(labels, w)
    assert [type(v) for v in got] == [type(v) for v in want] and all(
        torch.equal(torch.as_tensor(a), torch.as_tensor(b)) for a, b in zip(got, want))
