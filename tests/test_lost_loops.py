"""Loop forms that used to stay on Python: a count read under its own condition before its
update (compaction indices, an exclusive count), `while` stop conditions with several `and`
terms, and running sums updated by a chain of `+` / `-` terms. Checked against the loop
(`fn.__wrapped__`'s original) on random inputs: values, dtypes, Python types, in-place effects
on the arguments, gradients, errors; and the path taken (the forms that must keep the loop
included)."""
import copy

import pytest
import torch

from autovec import autovec, explain
from conftest import raises_as_loop
from test_counted_steps import _same


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _check(fn, args, path="vectorized", strategy=None):
    """The rewrite agrees with the loop on `args` (results and the arguments after the call),
    and `explain` reports `path` (and `strategy` for the first loop)."""
    a, b = copy.deepcopy(args), copy.deepcopy(args)
    want = fn(*a)
    got = autovec(fn)(*b)
    _same(got, want)
    _same(list(b), list(a))
    ex = explain(fn, *copy.deepcopy(args))
    assert ex.path == path, str(ex)
    if strategy is not None:
        assert ex.loops[0].strategy == strategy, str(ex)
    return ex


# --- 1. a count read under its own condition before its update (an exclusive count) ---

def compaction(m):
    n = m.shape[0]
    idx = torch.full((n,), -1, dtype=torch.long)
    k = 0
    for i in range(n):
        if m[i]:
            idx[i] = k
            k += 1
    return idx, k


def compaction_into(m, idx):
    k = 3
    for i in range(m.shape[0]):
        if m[i] > 0.5:
            idx[i] = k * 2          # (computed with: the value before the update, times 2)
            k = k - 2
    return k


def compaction_scaled(m, x):
    k = 0
    out = torch.zeros(x.shape[0], dtype=x.dtype)
    for i in range(m.shape[0]):
        if m[i]:
            y = x[i] * 2
            out[i] = y + k
            k += 3
            x[i] = -x[i]            # (after the update, which it does not read)
    return out, k


def compaction_over_elements(m):
    idx = torch.zeros(m.shape[0], dtype=torch.int32)
    k = 0
    for i, v in enumerate(m):
        if v:
            idx[i] = k
            k = k + 1
    return idx, k


def compaction_while(m):
    n = m.shape[0]
    idx = torch.full((n,), -1.0, dtype=torch.float16)
    k = 2040                    # (float16 holds every other int past 2048: setitem rounds)
    i = 0
    while i < n:
        if m[i]:
            idx[i] = k
            k += 1
        i += 1
    return idx, k, i


@pytest.mark.parametrize("fn, make", [
    (compaction, lambda n, p: (torch.rand(n) < p,)),
    (compaction, lambda n, p: ((torch.rand(n) < p).long() * 3,)),
    (compaction, lambda n, p: ((torch.rand(n) < p).double() * float("nan"),)),    # (NaN is true)
    (compaction_into, lambda n, p: (torch.rand(n) * p * 2, torch.zeros(n, dtype=torch.float64))),
    (compaction_into, lambda n, p: (torch.rand(n) * p * 2, torch.zeros(n, dtype=torch.int8))),
    (compaction_scaled, lambda n, p: (torch.rand(n) < p, torch.randn(n))),
    (compaction_scaled, lambda n, p: (torch.rand(n) < p, torch.randn(n, dtype=torch.float64))),
    (compaction_over_elements, lambda n, p: (torch.rand(n) < p,)),
    (compaction_while, lambda n, p: (torch.rand(n) < p,)),
])
@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("n", [1, 2, 17])
def test_a_count_read_before_its_update_under_its_condition_matches_the_loop(fn, make, n, p):
    g = autovec(fn)
    for _ in range(2):
        args = make(n, p)
        a, b = copy.deepcopy(args), copy.deepcopy(args)
        _same(g(*b), fn(*a))
        _same(list(b), list(a))
    ex = explain(fn, *make(n, 0.5))
    assert ex.loops[0].strategy == "scan" and "before each update" in ex.loops[0].reason, str(ex)
    assert ex.path == "vectorized", str(ex)


def test_a_compaction_index_is_a_scan_and_the_count_stays_an_int():
    m = torch.tensor([True, False, True, True, False])
    idx, k = autovec(compaction)(m)
    assert idx.tolist() == [0, -1, 1, 2, -1] and k == 3 and type(k) is int
    ex = _check(compaction, (torch.rand(40) < 0.5,), strategy="scan")
    assert "before each update" in ex.loops[0].reason
    # no iteration counts: `k` keeps its int start
    _same(autovec(compaction)(torch.zeros(6, dtype=torch.bool)), compaction(torch.zeros(6, dtype=torch.bool)))


def test_a_compaction_with_gradients_matches_the_loop():
    m = torch.rand(12) < 0.5
    x = torch.randn(12, dtype=torch.float64, requires_grad=True)
    x1 = x.detach().clone().requires_grad_()
    want = compaction_scaled(m, x.clone())
    got = autovec(compaction_scaled)(m, x1.clone())
    _same(got, want)
    (want[0] * torch.arange(12)).sum().backward()
    (got[0] * torch.arange(12)).sum().backward()
    torch.testing.assert_close(x1.grad, x.grad)


def test_a_count_past_int64_or_rows_with_several_elements_raise_as_the_loop():
    def past(m):
        idx = torch.zeros(m.shape[0], dtype=torch.long)
        k = 9223372036854775806
        for i in range(m.shape[0]):
            if m[i]:
                idx[i] = k
                k += 1
        return idx, k
    raises_as_loop(ValueError, past, torch.ones(5, dtype=torch.bool))
    assert explain(past, torch.ones(5, dtype=torch.bool)).path == "python"
    raises_as_loop(RuntimeError, compaction, torch.rand(6, 2) < 0.5)
    # (the stores' index past the output's end: the loop's own IndexError)
    def short(m):
        idx = torch.zeros(3, dtype=torch.long)
        k = 0
        for i in range(m.shape[0]):
            if m[i]:
                idx[i] = k
                k += 1
        return idx, k
    raises_as_loop(IndexError, short, torch.ones(6, dtype=torch.bool))
    _same(autovec(short)(torch.tensor([1, 1, 1, 0, 0, 0]).bool()), short(torch.tensor([1, 1, 1, 0, 0, 0]).bool()))


# the forms that keep the loop

def count_read_twice(m):
    n = m.shape[0]
    idx = torch.full((n,), -1)
    pos = torch.zeros(n, dtype=torch.long)
    k = 0
    for i in range(n):
        if m[i]:
            idx[i] = k              # (before the update)
            k += 1
            pos[i] = k              # (and after it: neither an exclusive nor an inclusive scan)
    return idx, pos, k


def count_changes_its_test(m):
    idx = torch.full((m.shape[0],), -1)
    k = 0
    for i in range(m.shape[0]):
        if m[i]:
            m[i] = False            # (the test, computed again for the update, would see this)
            idx[i] = k
            k += 1
    return idx, k, m


def count_in_its_test(m):
    idx = torch.full((m.shape[0],), -1)
    k = 0
    for i in range(m.shape[0]):
        if m[i] and k < 3:
            idx[i] = k
            k += 1
    return idx, k


def count_by_a_float(m):
    idx = torch.zeros(m.shape[0])
    k = 0
    for i in range(m.shape[0]):
        if m[i]:
            idx[i] = k              # (an int at the first count, a float after it)
            k += 0.5
    return idx, k


def count_appended(m):
    ids = []
    k = 0
    for i in range(m.shape[0]):
        if m[i]:
            ids.append(k)
            k += 1
    return ids, k


def count_read_after_at_the_top(m, x):
    idx = torch.zeros(m.shape[0], dtype=torch.long)
    k = 0
    for i in range(m.shape[0]):
        if m[i]:
            idx[i] = k
            k += 1
        x[i] = k                    # (the new value, in every iteration)
    return idx, k, x


def count_split_name(m, x):
    out = torch.zeros(m.shape[0])
    k = 0
    for i in range(m.shape[0]):
        if m[i]:
            y = x[i] * 2
            out[i] = y + k
            k += 1
            x[i] = -y               # (`y`, bound before the update, read after it: the two parts
    return out, k, x                # the update splits the `if` into do not share names)


def count_with_a_nested_if(m, x):
    idx = torch.zeros(m.shape[0], dtype=torch.long)
    k = 0
    for i in range(m.shape[0]):
        if m[i]:
            if x[i] > 0:
                idx[i] = k
            k += 1
    return idx, k


@pytest.mark.parametrize("fn, make", [
    (count_read_twice, lambda: (torch.rand(12) < 0.5,)),
    (count_changes_its_test, lambda: (torch.rand(12) < 0.5,)),
    (count_in_its_test, lambda: (torch.rand(12) < 0.5,)),
    (count_by_a_float, lambda: (torch.rand(12) < 0.5,)),
    (count_appended, lambda: (torch.rand(12) < 0.5,)),
    (count_read_after_at_the_top, lambda: (torch.rand(12) < 0.5, torch.zeros(12))),
    (count_with_a_nested_if, lambda: (torch.rand(12) < 0.5, torch.randn(12))),
    (count_split_name, lambda: (torch.rand(12) < 0.5, torch.randn(12))),
])
def test_counts_read_before_their_update_that_keep_the_loop(fn, make):
    ex = _check(fn, make(), path="python")
    assert ex.loops[0].strategy == "python" and "loop-carried" in ex.loops[0].reason, str(ex)


# --- 2. `while` stop conditions with several `and` terms ---

def search_band(x, t):
    n = x.shape[0]
    i = 0
    while i < n and x[i] < t and x[i] > -t:
        i += 1
    return i


def search_three(x, y, t):
    n = x.shape[0]
    i = 0
    while i < n and (x[i] < t or y[i] < t) and not x[i] == y[i] and y[i] != 0.5:
        i += 1
    return i


def search_from(x, i, t):
    n = x.shape[0]
    while i < n and x[i] > 0 and x[i] < t:
        i += 2
    return i


def lookup_while_valid(idx, table, m):
    n = idx.shape[0]
    i = 0
    while i < n and idx[i] < m and table[idx[i]] > 0:     # (Python never indexes past `m`)
        i += 1
    return i


def lookup_while_positive(x, idx, table):
    n = idx.shape[0]
    i = 0
    while i < n and x[i] > 0 and table[idx[i]] > 0:
        i += 1
    return i


def products_while_positive(a, b):
    n = a.shape[0]
    out = torch.zeros(n)
    i = 0
    while i < n and a[i] > 0 and b[i] > 0:
        out[i] = a[i] * b[i]
        i += 1
    return out, i


def numbers_in_band(vals, t):
    n = len(vals)
    i = 0
    while i < n and vals[i] < t and vals[i] > -t:
        i += 1
    return i


def flagged_search(x, flag, t):
    n = x.shape[0]
    i = 0
    while i < n and flag and x[i] < t:
        i += 1
    return i


def stop_on_either(x, t):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if x[i] > t or x[i] < -t:
            break
        out[i] = x[i] * 2
    return out, i


def _stopping_at(n, k, dtype=torch.float32):
    """n values inside (-1, 1), the k-th (if any) outside."""
    x = (torch.rand(n) * 1.8 - 0.9).to(dtype)
    if k < n:
        x[k] = 3.0 if k % 2 else -3.0
    return x


@pytest.mark.parametrize("k", [1, 5, 16, 40])
def test_a_while_with_several_and_terms_matches_the_loop(k):
    x = _stopping_at(16, k)
    _check(search_band, (x, 1.0), strategy="vmap")
    _check(search_band, (x.double(), 1.0))
    _check(search_band, (x.to(torch.float16), 1.0))
    y = _stopping_at(16, k)
    y[7] = 0.5
    _check(search_three, (x, y, 1.0))
    _check(search_three, (x, x.clone(), 1.0), path="python")    # (x[0] == y[0]: it stops at once)
    _check(search_from, ((x + 1) / 2, 0, 0.99))
    _check(search_from, ((x + 1) / 2, 40, 0.99), path="python")   # (no iteration)
    a = x.abs() + 0.1
    if k < 16:
        a[k] = -1.0
    _check(products_while_positive, (a, torch.rand(16) + 0.1))
    _check(numbers_in_band, (x.tolist(), 1.0))
    _check(flagged_search, (x, True, 1.0))
    _check(flagged_search, (x, False, 1.0), path="python")   # (it stops at once)
    if k > 1:
        _check(stop_on_either, (x, 1.0))


def test_a_later_term_reads_no_index_where_the_loop_does_not_evaluate_it():
    """`i < n and idx[i] < m and table[idx[i]] > 0`: the batch computes the last term for every
    iteration, but its index only where the terms before it hold (0 elsewhere), so an index
    past `m` where Python never reads it, before the stop or after it, raises nothing."""
    table = torch.tensor([1.0, 2.0, 3.0, 4.0])
    for idx in ([1, 2, 0, 9, 3, 7, 1], [1, 2, 0, 3, 9, 2, 1], [0, 1, 2, 3, 0, 1, 5]):
        idx = torch.tensor(idx)
        _check(lookup_while_valid, (idx, table, 4), strategy="vmap")
    _check(lookup_while_valid, (torch.tensor([1, 2, 0, 3, 1]), torch.tensor([1.0, 2.0, -3.0, 4.0]), 4))
    x = torch.tensor([1.0, 1.0, -1.0, 1.0, 1.0, 1.0])
    _check(lookup_while_positive, (x, torch.tensor([1, 2, 9, 0, 1, 1]), torch.tensor([1.0, 2.0, 3.0])))


def test_a_term_that_raises_where_the_loop_evaluates_it_raises_as_the_loop():
    idx = torch.tensor([1, 2, 9, 0, 1, 1])
    raises_as_loop(IndexError, lookup_while_positive, torch.ones(6), idx, torch.tensor([1.0, 2.0, 3.0]))

    def several(x, r):
        n = x.shape[0]
        i = 0
        while i < n and x[i] > 0 and r[i]:      # (a row of two: Python's truth raises)
            i += 1
        return i
    raises_as_loop(RuntimeError, several, torch.ones(5), torch.ones(5, 2))
    # where the loop never takes that truth, it returns
    x = torch.tensor([-1.0, 1.0])
    assert autovec(several)(x, torch.ones(2, 2)) == several(x, torch.ones(2, 2)) == 0


def test_a_while_with_a_term_that_changes_state_keeps_the_loop():
    seen = []

    def note(v):
        seen.append(v)
        return True

    def noted(x, t):
        n = x.shape[0]
        i = 0
        while i < n and x[i] < t and note(i):
            i += 1
        return i
    x = _stopping_at(10, 5)
    ex = explain(noted, x, 1.0)
    assert ex.path == "python" and ex.loops[0].strategy == "python", str(ex)
    seen.clear()
    assert autovec(noted)(x, 1.0) == 5 and seen == list(range(5))


# --- 3. running sums updated by a chain of `+` / `-` terms ---

def two_terms(a, b, total):
    for i in range(a.shape[0]):
        total = total + a[i] + b[i]
    return total


def plus_minus(a, b, w, total):
    for i in range(a.shape[0]):
        total = total + a[i] * w - b[i]
    return total


def minus_three(a, b, c):
    total = torch.zeros(a.shape[1:], dtype=a.dtype)
    for i in range(a.shape[0]):
        total = total - a[i] - b[i] + c[i]
    return total


def item_terms(a, b, total):
    for i in range(a.shape[0]):
        total = total + a[i].item() - b[i].item()
    return total


def counted_terms(a, b):
    total = torch.zeros(a.shape[1:], dtype=a.dtype)
    for i in range(a.shape[0]):
        if a[i].sum() > 0:
            total = total + a[i] + b[i]
    return total


def terms_of_two_ranks(a, c):
    total = 0.0
    for i in range(a.shape[0]):
        total = total + a[i] + c[i]      # (a row, then one number per iteration)
    return total


T = torch


@pytest.mark.parametrize("fn, make", [
    (two_terms, lambda n: (T.randn(n), T.randn(n), T.zeros(()))),
    (two_terms, lambda n: (T.randn(n), T.randn(n), 0.0)),
    (two_terms, lambda n: (T.randn(n), T.randn(n), 2)),
    (two_terms, lambda n: (T.randn(n, 3, dtype=T.float64), T.randn(n, 3, dtype=T.float64), T.ones(3, dtype=T.float64))),
    (two_terms, lambda n: (T.randint(-9, 9, (n,)), T.randint(-9, 9, (n,)), 0)),
    (two_terms, lambda n: (T.randint(-9, 9, (n,), dtype=T.int32), T.randint(-9, 9, (n,), dtype=T.int32),
                           T.zeros((), dtype=T.int32))),
    (two_terms, lambda n: (T.full((n,), 2 ** 62), T.full((n,), 2 ** 62), 0)),   # (int64 wraps alike: mod 2**64)
    (plus_minus, lambda n: (T.randn(n), T.randn(n), 0.5, 1.0)),
    (plus_minus, lambda n: (T.randn(n, 2), T.randn(n, 2), T.randn(2), T.zeros(2))),
    (minus_three, lambda n: (T.randn(n, 2), T.randn(n, 2), T.randn(n, 2))),
    (item_terms, lambda n: (T.randn(n), T.randn(n, dtype=T.float64), 0.0)),
    (item_terms, lambda n: (T.randn(n), T.randn(n), 1)),
    (item_terms, lambda n: (T.randint(-9, 9, (n,)), T.randint(-9, 9, (n,), dtype=T.int32), 0)),
    (item_terms, lambda n: (T.rand(n) > 0.5, T.rand(n) > 0.5, 0)),       # (Python bools add as ints)
    (counted_terms, lambda n: (T.randn(n, 3), T.randn(n, 3))),
    (terms_of_two_ranks, lambda n: (T.randn(n, 3), T.randn(n))),
])
@pytest.mark.parametrize("n", [1, 3, 20])
def test_a_sum_of_several_terms_matches_the_loop(fn, make, n):
    ex = _check(fn, make(n), strategy="reduction")
    assert "terms per iteration" in ex.loops[0].reason, str(ex)
    _same(autovec(fn)(*make(0)), fn(*make(0)))


def test_a_sum_of_several_terms_with_gradients_matches_the_loop():
    a = T.randn(9, 3, dtype=T.float64, requires_grad=True)
    b = T.randn(9, 3, dtype=T.float64, requires_grad=True)
    w = T.randn(3, dtype=T.float64, requires_grad=True)
    want = plus_minus(a, b, w, T.zeros(3, dtype=T.float64))
    got = autovec(plus_minus)(a, b, w, T.zeros(3, dtype=T.float64))
    _same(got, want)
    ga = torch.autograd.grad((want * T.arange(3)).sum(), (a, b, w))
    gb = torch.autograd.grad((got * T.arange(3)).sum(), (a, b, w))
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("make", [
    lambda: (T.randn(6), T.randn(6, dtype=T.float64), T.zeros(())),        # terms of two dtypes
    lambda: (T.randn(6, 3), T.randn(6, 3, dtype=T.float64), T.zeros(())),  # (a row: its 0-d start does not widen)
    lambda: (T.randn(6), T.randn(6), T.zeros((), dtype=T.float64)),        # a start of another dtype
    lambda: (T.randn(6), T.randn(6), T.zeros((), dtype=T.int64)),
    lambda: (T.randint(-9, 9, (6,)), T.randint(-9, 9, (6,)), 0.5),         # int terms onto a float: float steps
    lambda: (T.rand(6) > 0.5, T.rand(6) > 0.5, 0),                         # bool tensors: `+` is `or`
    lambda: (T.randn(6).half(), T.randn(6).half(), 0.0),                    # float16 rounds every step
    lambda: (T.randn(6), T.randn(6), True),                                 # a bool start
])
def test_sums_of_terms_whose_steps_change_type_keep_the_loop(make):
    ex = _check(two_terms, make(), path="python")
    assert ex.loops[0].strategy == "reduction", str(ex)


@pytest.mark.parametrize("make", [
    lambda: (T.randint(-9, 9, (6,)), T.randn(6), 0.0),                     # a Python int and a float
    lambda: (T.randint(-9, 9, (6,)), T.randn(6), 0),
    lambda: (T.randn(6), T.randn(6), T.zeros(())),                          # Python numbers onto a tensor
    lambda: (T.randint(-9, 9, (6,)), T.randint(-9, 9, (6,)), 0.0),         # Python ints onto a float
    lambda: (T.full((6,), 2 ** 62), T.full((6,), 2 ** 62), 0),             # past int64 where combined
])
def test_sums_of_python_number_terms_of_other_kinds_keep_the_loop(make):
    _check(item_terms, make(), path="python")


def terms_read_in_the_loop(a, b):
    total = 0.0
    out = torch.zeros(a.shape[0])
    for i in range(a.shape[0]):
        total = total + a[i] + b[i]
        out[i] = total
    return out, total


def terms_with_a_constant(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        total = total + a[i] - b[i] - 1.5
    return total


def terms_reading_the_total(a):
    total = torch.ones(())
    for i in range(a.shape[0]):
        total = total + a[i] + total * 0.5
    return total


def test_sums_of_terms_that_keep_the_loop():
    a, b = T.randn(7), T.randn(7)
    # (read in the loop: a running sum of the terms, one cumsum; test_scans' terms tests)
    _check(terms_read_in_the_loop, (a, b), strategy="scan")
    # (a Python number among float32 tensor terms: cast to float32 as torch casts it at each step)
    _check(terms_with_a_constant, (a, b), path="vectorized")
    # (beside integer tensors a Python float makes every step a float sum: the loop runs)
    ia, ib = T.randint(0, 5, (7,)), T.randint(0, 5, (7,))
    ex = _check(terms_with_a_constant, (ia, ib), path="python")
    assert "change the tensors' dtype" in str(ex)
    _check(terms_reading_the_total, (a,), path="python")    # (a linear recurrence with a factor of 1.5)
    # (a nest: the outer loop runs as written, the inner one is such a sum)
    nest = _check(nest_terms, (T.randn(3, 4), T.randn(3, 4)))
    assert "several terms" in nest.loops[0].reason and nest.loops[1].strategy == "reduction", str(nest)


def nest_terms(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            total = total + a[i, j] + b[i, j]
    return total


def first_term_a_number(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        total = total + a[i].item() + b[i]     # (a Python float, then a float32 tensor: a tensor)
    return total


def budget_of_terms(a, b, cap):
    total = 0
    for i in range(a.shape[0]):
        if total > cap:
            break
        total = total + a[i] + b[i]
    return total, i


def first_term_a_bool_subtracted(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        total = total + a[i] - b[i].item()     # (`t - True` raises in torch)
    return total


def test_sums_of_terms_mixing_numbers_and_tensors_or_read_by_a_break():
    # a Python float then a float32 tensor: a float32 tensor sum from the first step
    _check(first_term_a_number, (T.randn(6), T.randn(6)), path="vectorized")
    # Python bools beside tensors keep the loop (which raises where one is subtracted)
    a, m = T.randn(6), T.randn(6) > 0
    with pytest.raises(RuntimeError):
        first_term_a_bool_subtracted(a, m)
    with pytest.raises(RuntimeError):
        autovec(first_term_a_bool_subtracted)(a, m)
    assert "Python bools beside tensors" in str(explain(first_term_a_bool_subtracted, a, m))
    a, b = T.randint(0, 5, (12,)), T.randint(0, 5, (12,))
    _check(budget_of_terms, (a, b, 10), path="python")
    _same(autovec(budget_of_terms)(a, b, 10), budget_of_terms(a, b, 10))


def read_in_a_test(x):
    s = 0
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if 1 / s < 1:             # (the Python start: 1 / 0 raises in the loop)
            out[i] = s
        s = s + x[i]
    return out, s


def sign_in_a_test(x):
    s = 0.0
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if s > 0:
            out[i] = s
        s = s + x[i]
    return out, s


def test_a_running_value_read_by_the_test_of_an_if_keeps_the_loop():
    """A store under an `if` reads the value as a store does only where the test does not read
    it: a test computes with it (the loop's first test computes with the Python start)."""
    raises_as_loop(ZeroDivisionError, read_in_a_test, torch.randn(5))
    ex = _check(sign_in_a_test, (torch.randn(6),), path="python")
    assert "loop-carried" in ex.loops[0].reason, str(ex)


# --- 4. several running values: a store of one is no part of another's update ---

def two_running_sums(a, b):
    s = 0.0
    t = torch.zeros(())
    o1 = torch.zeros_like(a)
    o2 = torch.zeros_like(a)
    for i in range(a.shape[0]):
        s = s + a[i]
        o1[i] = torch.exp(s)        # (reads `s`, before `t`'s update: no part of it; `s`
                                    # as it starts, the Python 0.0, is nothing torch.exp takes)
        t = t + b[i]
        o2[i] = t - s
    return o1, o2, s, t


def running_value_through_a_name(g):
    v = 0.0
    w = 0.0
    out = torch.zeros_like(g)
    for i in range(g.shape[0]):
        v = 0.9 * v + g[i]
        y = v * 2
        w = w - 0.1 * y             # (a true dependency: `w` adds what `v` is at this step)
        out[i] = w
    return out


def sum_of_a_running_sum(a):
    s = torch.zeros(())
    t = torch.zeros(())
    out = torch.empty_like(a)
    for i in range(a.shape[0]):
        s = s + a[i]
        t = t + s
        out[i] = t
    return out


def test_a_store_of_one_running_value_is_no_dependency_of_another():
    for n in (1, 2, 11):
        ex = _check(two_running_sums, (torch.randn(n), torch.randn(n)), strategy="scan")
    assert "`t` is a running sum" in ex.loops[0].reason, str(ex)


@pytest.mark.parametrize("fn", [running_value_through_a_name, sum_of_a_running_sum])
def test_a_running_value_updated_from_another_keeps_the_loop(fn):
    ex = _check(fn, (torch.randn(9),), path="python")
    assert "updated from" in ex.loops[0].reason, str(ex)


def test_a_compaction_over_a_list_of_python_values_keeps_the_loop():
    """Conditions that are Python values (the truth of ints, floats, bools): the loop runs."""
    def over_list(m):
        idx = torch.full((len(m),), -1, dtype=torch.long)
        k = 0
        for i in range(len(m)):
            if m[i]:
                idx[i] = k
                k += 1
        return idx, k
    for m in ([True, False, 1, 0.0, 2.5, -1, 0], [True, False, True]):
        _check(over_list, (m,), path="python")


# counts under a test with `and` / `or` / `not` (analysis._truth_flag: the increment's flag from
# each operand's truth; found lost by the real-world probe: `if x[i] > 0.2 and keep[i]:`)

def count_under_and(x, keep):
    slot = torch.full((x.shape[0],), -1)
    k = 0
    for i in range(x.shape[0]):
        if x[i] > 0.2 and keep[i] and x[i] < 0.9:
            slot[i] = k
            k += 1
    return slot, k


def count_under_or_not(x, keep, m):
    pos = torch.zeros(x.shape[0], dtype=torch.long)
    k = 3
    for i in range(x.shape[0]):
        if (x[i] > 0.2 and not keep[i]) or m[i] < 0:
            k += 2
            pos[i] = k
    return pos, k


def count_guarded_by_and(x):
    slot = torch.full((x.shape[0],), -1)
    k = 0
    n = x.shape[0]
    for i in range(n):
        # (x[n] is read nowhere in the loop: as written the batch would raise there; the range is
        # split where `i + 1 < n` changes, and the piece before batches: frontend._IndexSplits)
        if i + 1 < n and x[i + 1] > 0.5:
            slot[i] = k
            k += 1
    return slot, k


@pytest.mark.parametrize("fn, nargs, batched", [(count_under_and, 2, True), (count_under_or_not, 3, True),
                                                (count_guarded_by_and, 1, True)])
def test_counts_under_boolean_tests(monkeypatch, fn, nargs, batched):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    f = autovec(fn)
    g = torch.Generator().manual_seed(3)
    for n in (5, 17, 40, 40):
        args = (torch.rand(n, generator=g), torch.rand(n, generator=g) > 0.5, torch.randn(n, generator=g))[:nargs]
        want, got = fn(*args), f(*args)
        assert torch.equal(got[0], want[0]) and got[0].dtype == want[0].dtype
        assert got[1] == want[1] and type(got[1]) is int
    ran = set(f._autovec_state.runtime.ran.values())
    assert ran == ({"batched"} if batched else set())


# ---------------------------------------------------------------------------
# A running value read in the index of a store (probeT): `out[t, done] = v` reads `done` as the
# step has it, which changes from step to step though no plain assignment binds it


def store_at_running_mask(x):
    done = torch.zeros(x.shape[1], dtype=torch.bool)
    out = torch.zeros(x.shape)
    for t in range(x.shape[0]):
        out[t, done] = 1.0
        done |= x[t] > 0.7
    return out


def store_at_running_mask_after(x):
    done = torch.zeros(x.shape[1], dtype=torch.bool)
    out = torch.zeros(x.shape)
    for t in range(x.shape[0]):
        done = done | (x[t] > 0.7)
        out[t][done] = 1.0
    return out


def store_at_running_count(x):
    k = 0
    out = torch.zeros(x.shape[0], x.shape[0] + 1)
    for t in range(x.shape[0]):
        k += int(x[t, 0] > 0.5)
        out[t, k] = 1.0
    return out


def store_at_running_max(x):
    mx = torch.zeros(x.shape[1], dtype=torch.long)
    out = torch.zeros(x.shape[0], 10)
    for t in range(x.shape[0]):
        mx = torch.maximum(mx, (x[t] * 10).long().clamp(max=9))
        out[t, mx] = 1.0
    return out


def mask_tokens_after_eos(tokens, eos):
    finished = torch.zeros(tokens.shape[1], dtype=torch.bool)
    for t in range(tokens.shape[0]):
        finished |= tokens[t] == eos
        tokens[t][finished] = eos
    return tokens


@pytest.mark.parametrize("fn", [store_at_running_mask, store_at_running_mask_after, store_at_running_count,
                                store_at_running_max])
def test_a_running_value_in_a_stores_index_is_read_at_each_step(fn):
    for x in (T.tensor([[0.9, 0.1], [0.1, 0.1], [0.1, 0.8]]), torch.rand(30, 2, generator=torch.Generator().manual_seed(7))):
        a, b = x.clone(), x.clone()
        _same(autovec(fn)(b), fn(a))


def test_tokens_masked_after_their_end():
    tokens = torch.randint(0, 5, (20, 3), generator=torch.Generator().manual_seed(8))
    _check(mask_tokens_after_eos, (tokens, 3), path="python")


# ---------------------------------------------------------------------------
# A running value appended beside another value each iteration (probeT): the loop's list holds
# the running value's last tensor itself, so a later in-place update of the name shows in it


def appended_after_another(m):
    f = torch.zeros(m.shape[1], dtype=torch.bool)
    outs = []
    for t in range(m.shape[0]):
        f = f | m[t]
        outs.append(~f)
        outs.append(f)
    f |= True
    return outs


def appended_before_another(m):
    s = torch.zeros(m.shape[1])
    outs = []
    for t in range(m.shape[0]):
        s = s + m[t].float()
        outs.append(s)
        outs.append(s * 2)
    s += 1
    return outs, s


@pytest.mark.parametrize("fn", [appended_after_another, appended_before_another])
def test_a_running_value_appended_beside_another_stays_the_lists_element(fn):
    m = torch.tensor([[False, True, False], [False, False, True], [True, False, False]])
    ex = _check(fn, (m,))
    assert ex.loops[0].strategy == "scan", str(ex)


def rows_with_nan(x):
    bad = []
    for i in range(x.shape[0]):
        if torch.isnan(x[i]).any() or torch.isinf(x[i]).any():
            bad.append(i)
    return bad


def test_indices_appended_under_a_condition_that_never_holds():
    # (probeU: with no row selected, the check had no row to tell that `i` is a Python int, and
    # the appended index was taken for a possible view of `x[i]`: the loop ran)
    x = torch.randn(200, 4, generator=torch.Generator().manual_seed(17))
    assert autovec(rows_with_nan)(x) == rows_with_nan(x) == []
    assert explain(rows_with_nan, x).path == "vectorized"
    x[[5, 70], 1] = float("nan")
    assert autovec(rows_with_nan)(x) == rows_with_nan(x) == [5, 70]
