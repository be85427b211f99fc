"""Loops that stop early: `if cond: ...; break`. The condition runs for every iteration first, the
batch covers the iterations before the first one where it holds, and that iteration runs as
written (the statements before the `if`, then the `if`'s own). Checked against the loop: results,
rows left unwritten, in-place effects, loop variables after the loop, errors and gradients."""
import traceback

import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import outcome, ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def find_first(vals, target):
    first = -1
    for step, v in enumerate(vals):
        if v < target:
            first = step
            break
    return first


def rows_until(x, limit):
    out = []
    count = 0
    for i in range(x.shape[0]):
        s = x[i].sum()
        count += 1                     # the stopping iteration still counts
        if s > limit:
            break
        out.append(x[i] * 2)
    return (torch.stack(out) if out else None), count, i, s


def fill_until(x, limit):
    out = torch.zeros_like(x)          # rows from the stopping one on stay zero
    for i in range(x.shape[0]):
        if x[i].abs().max() > limit:
            break
        out[i] = x[i] + 1
    return out


def write_until(x, out, limit):
    for i in range(x.shape[0]):
        if x[i].max() > limit:
            out[i] = -1.0              # the stopping iteration's own statements
            break
        out[i] = x[i].sum()
    return i


def walk_pairs(a, b, limit):
    res = []
    stopped = False
    for p, q in zip(a, b):
        if (p * q).sum() > limit:
            stopped = True
            break
        res.append(p - q)
    return res, stopped, p, q


@pytest.mark.parametrize("fn, make", [
    (find_first, lambda t: (torch.randn(40), -1.0 - t)),
    (rows_until, lambda t: (torch.randn(12, 3), 1.5 + t)),
    (fill_until, lambda t: (torch.randn(12, 3), 1.5 + t)),
    (walk_pairs, lambda t: (torch.randn(10, 3), torch.randn(10, 3), 1.0 + t)),
])
def test_stops_where_the_loop_stops(fn, make):
    for t in (0.0, 0.3, 0.8, 1.5, 5.0):       # early, late and no stop at all
        assert_equivalent(fn, *make(t), trials=3)


def test_the_iterations_before_the_stop_run_batched():
    x = torch.tensor([[0.1, 0.2], [0.3, -0.1], [0.2, 0.2], [5.0, 1.0], [0.0, 0.1]])
    fast = autovec(rows_until)
    got, want = fast(x, 2.0), rows_until(x, 2.0)
    torch.testing.assert_close(got[0], want[0])
    assert got[1:3] == want[1:3] == (4, 3)
    torch.testing.assert_close(got[3], want[3])
    assert _ran(fast) == {"batched"}
    fast(x, 2.0)
    # the condition's own body runs as a batched body too (no vmap), under its tag
    modes = fast._autovec_state.runtime.fast
    assert len(modes) == 2 and set(modes.values()) == {"batched"}, modes
    assert explain(rows_until, x, 2.0).path == "vectorized"


def test_an_argument_is_written_only_up_to_the_stop():
    x = torch.randn(8, 3)
    x[5, 1] = 9.0
    out1, out2 = torch.full((8,), 7.0), torch.full((8,), 7.0)
    fast = autovec(write_until)
    assert fast(x, out1, 3.0) == write_until(x, out2, 3.0) == 5
    torch.testing.assert_close(out1, out2)
    assert out1[6:].eq(7.0).all() and out1[5] == -1.0
    assert _ran(fast)


def test_a_stop_at_the_first_iteration_runs_the_loop():
    fast = autovec(find_first)
    v = torch.tensor([-5.0, 1.0, 2.0])
    assert fast(v, 0.0) == find_first(v, 0.0) == 0


def table_walk(idx, table):
    total = []
    for i in range(idx.shape[0]):
        if table[idx[i]] < 0:          # past the stop, idx holds an index out of range
            break
        total.append(table[idx[i]] * 2)
    return torch.stack(total), i


def test_a_condition_that_fails_past_the_stop_gives_the_loops_answer():
    table = torch.tensor([1.0, 2.0, -1.0, 3.0])
    idx = torch.tensor([0, 1, 3, 2, 99, 100])
    got, want = autovec(table_walk)(idx, table), table_walk(idx, table)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] == 3


def ambiguous(x):
    out = []
    for i in range(x.shape[0]):
        if x[i] > 0:                   # a row: `if` on several elements raises
            break
        out.append(x[i])
    return out


def test_a_condition_on_several_elements_raises_like_the_loop():
    x = torch.randn(4, 3)
    with pytest.raises(RuntimeError) as want:
        ambiguous(x)
    with pytest.raises(RuntimeError) as got:
        autovec(ambiguous)(x)
    assert str(got.value) == str(want.value)


def tail_error(x, d):
    for i in range(x.shape[0]):
        if x[i] > 0:
            r = 1 / d                  # runs only for the stopping iteration
            break
    return i


def test_an_error_in_the_stopping_iteration_points_at_the_users_line():
    x = torch.tensor([-1.0, -2.0, 3.0, 4.0])
    fast = autovec(tail_error)
    with pytest.raises(ZeroDivisionError) as got:
        fast(x, 0)
    frames = traceback.extract_tb(got.value.__traceback__)
    assert frames[-1].filename == __file__ and frames[-1].line.startswith("r = 1 / d")
    assert _ran(fast), "the iterations before the stop did not run batched"


def test_gradients_through_the_rows_before_the_stop():
    x = torch.randn(10, 3, requires_grad=True)
    assert_equivalent(rows_until, x, 1.0, grad=True)


def budget(costs, limit):
    spent = 0
    taken = 0
    for c in costs:
        if spent + c > limit:          # reads a running total: carried from step to step
            break
        spent = spent + c
        taken += 1
    return taken, int(spent)


def test_a_condition_on_an_integer_running_total_stops_where_the_loop_stops():
    """The condition reads `spent` before its update: the running total before each iteration
    (an exclusive prefix sum, exact for integers)."""
    fast = autovec(budget)
    for dtype in (torch.int64, torch.int32, torch.uint8):
        costs = torch.randint(1, 50, (40,), dtype=dtype)
        for limit in (0, 10, 300, 700, 10_000):
            assert fast(costs, limit) == budget(costs, limit), (dtype, limit)
    assert _ran(fast)
    assert explain(budget, costs, 300).path == "vectorized"


def test_an_integer_running_total_wraps_as_the_loop_wraps():
    costs = torch.full((12,), 2 ** 30, dtype=torch.int32)       # int32 sums wrap after two steps
    for limit in (2 ** 31 - 1, 2 ** 29, -1):
        got, want = autovec(budget)(costs, limit), budget(costs, limit)
        assert got == want, (limit, got, want)


def remaining_budget(costs, total):
    left = total
    n = 0
    for c in costs:
        if left < c:
            break
        left -= c
        n += 1
    return n, int(left)


def float_budget(costs, limit):
    spent = 0.0
    for c in costs:
        if spent + c > limit:
            break
        spent = spent + c
    return float(spent)


def item_budget(costs, limit):
    spent = 0
    for i in range(costs.shape[0]):
        c = costs[i].item()
        if spent + c > limit:
            break
        spent += c
    return spent


def test_other_running_totals_in_a_break_condition():
    costs = torch.randint(1, 9, (30,))
    fast = autovec(remaining_budget)
    for total in (0, 5, 40, 500):
        assert fast(costs, total) == remaining_budget(costs, total)
    assert _ran(fast)
    # floats could round to the other side of the limit when summed in another order, and
    # Python integers do not wrap: both keep the loop
    x = torch.rand(30, dtype=torch.float64)
    for fn, args in ((float_budget, (x, 3.0)), (item_budget, (costs, 40))):
        f = autovec(fn)
        assert f(*args) == fn(*args)
        ex = explain(fn, *args)
        assert ex.path == "python", ex
        assert "running total" in str(ex)


def while_break(x):
    i = 0
    out = []
    while i < x.shape[0]:
        if x[i] < 0:
            break
        out.append(x[i] * 2)
        i += 1
    return out, i


def test_while_loops_stop_where_the_loop_stops():
    """A counted `while` with the same `if cond: break`: the counter is left at the stopping
    iteration (its `+= 1` does not run), or one past the end without a stop."""
    fast = autovec(while_break)
    modes = []
    for x in (torch.tensor([1.0, 2.0, -1.0, 3.0]), torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, 2.0])):
        got, want = fast(x), while_break(x)
        assert got[1] == want[1] and len(got[0]) == len(want[0])
        for a, b in zip(got[0], want[0]):
            torch.testing.assert_close(a, b)
        modes.append(_ran(fast))
    assert modes[0] and modes[1] and not modes[2]     # (a stop at the first iteration runs the loop)


def scaled_until(x, t):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if x[i] > t:
            break
        out[i] = x[i] * 2 + 1
    return out


def test_a_large_batch_runs_the_conditions_own_body():
    """On large batches the broadcast form reuses its temporaries in place, from the loop body's
    rewrite; the condition's body must run as itself (it ran the loop body's code and failed its
    check, so the condition fell back to vmap)."""
    x = torch.rand(70_000) * 0.5          # over the 64K elements where temporaries are reused
    x[66_000] = 3.0
    fast = autovec(scaled_until)
    torch.testing.assert_close(fast(x, 1.0), scaled_until(x, 1.0))
    rt = fast._autovec_state.runtime
    assert not [m for m in rt.bad_modes if m[3]], rt.bad_modes     # no mode failed for a tagged body
    assert _ran(fast) == {"broadcast"}


# --- `while k < n and c:` searches -------------------------------------------------------

def search(x, thr):
    i = 0
    while i < x.shape[0] and x[i] < thr:
        i += 1
    return i


def sum_until(x, thr):
    i = 0
    s = 0.0
    while i < x.shape[0] and x[i] < thr:
        s = s + x[i] * 2
        i += 1
    return i, s


def sum_between(x, thr):
    i = 0
    s = 0.0
    while i < x.shape[0] and x[i] < thr and x[i] > -thr:    # (`and` in a stop condition: the loop)
        s = s + x[i] * 2
        i += 1
    return i, s


def search_else(x, thr):
    i = 0
    while i < x.shape[0] and x[i] < thr:
        i += 1
    else:
        i = -1       # (runs where the test fails, not after a `break`)
    return i


def search_reversed_test(x, thr):
    i = 0
    while x[i] < thr and i < x.shape[0] - 1:     # (the element first: an index error decides)
        i += 1
    return i


@pytest.mark.parametrize("fn", [search, sum_until, sum_between, search_else])
def test_a_while_search_with_and_stops_where_the_loop_stops(fn):
    """`while k < n and c:` reads as `while k < n:` / `if not c: break` first (`c` computed only
    where `k < n` holds, as `and` does): a search that stops at the first row failing `c`, with
    the counter and running values after it as the loop leaves them."""
    g = torch.Generator().manual_seed(5)
    for x in (torch.rand(40, generator=g), torch.zeros(0), torch.full((7,), 0.1), torch.tensor([2.0, 0.1, 0.2]),
              torch.tensor([0.1, 0.2, 5.0, 0.3]), torch.rand(30, generator=g).requires_grad_()):
        want, got = fn(x, 0.9), autovec(fn)(x, 0.9)
        if isinstance(want, tuple):
            assert got[0] == want[0] and type(got[1]) is type(want[1])
            torch.testing.assert_close(torch.as_tensor(got[1]), torch.as_tensor(want[1]))
        else:
            assert type(got) is type(want) and got == want
    if fn in (search, sum_until):
        assert explain(fn, torch.rand(40), 0.9).path == "vectorized"


def test_a_while_search_testing_the_element_first_keeps_the_loop():
    """`while x[i] < t and i < n - 1:` reads the element before the bound: the loop as written
    (its IndexError past the end included)."""
    for x in (torch.rand(9), torch.full((5,), 0.1)):
        want, got = outcome(search_reversed_test, x, 0.9), outcome(autovec(search_reversed_test), x, 0.9)
        assert got == want
    assert explain(search_reversed_test, torch.rand(9), 0.9).path == "python"


def pairs_until(edges, d):
    for s, t in edges.tolist():
        if s > 3:
            break
        d[s] += t
    return d, s, t


def values_until(x):
    tot = 0.0
    for v in x.tolist():
        tot += v
        if v > 1.5:
            break
    return tot, v


def test_a_stop_in_a_loop_over_unpacked_rows_binds_the_rows_numbers():
    # (the stopping iteration's statements were taken from the body without its unpacking: the
    # rewrite had `break` outside the loop, an internal error, and ran the original)
    e = torch.tensor([[0, 5], [2, 1], [4, 7], [1, 1], [0, 2]])
    f = autovec(pairs_until)
    got, want = f(e, torch.zeros(6, dtype=torch.long)), pairs_until(e, torch.zeros(6, dtype=torch.long))
    assert torch.equal(got[0], want[0]) and got[1:] == want[1:] and type(got[1]) is int
    assert _ran(f)
    x = torch.tensor([0.5, -1.0, 2.0, 3.0])
    g = autovec(values_until)
    assert g(x) == values_until(x) and type(g(x)[1]) is float
    assert _ran(g)


def doubled_until(x, t, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
        if x[i].sum() > t:
            break
    return out, i


def backwards_until(x, t):
    total = torch.zeros(x.shape[1])
    for i in reversed(range(1, x.shape[0], 2)):
        if x[i].sum() > t:
            break
        total = total + x[i]
    return total, i


def rows_until_big(x, t):
    for row in x:
        if row.sum() > t:
            break
    return row


@pytest.mark.parametrize("fn", [doubled_until, backwards_until, rows_until_big])
def test_a_search_that_stopped_early_first_looks_at_its_first_iterations(fn):
    # (Token.find_exit: after a call that stopped within its first iterations, the next
    # computes the condition for those first; a stop past them, or none, then takes all)
    f = autovec(fn)
    n = 4000
    for at in (31, 101, 301, 3001, None, 5, 3999, 1):
        x = torch.randn(n, 4) * 0.1
        if at is not None:
            x[at] += 10
        args = (x, 5.0, torch.zeros(n, 4)) if fn is doubled_until else (x, 5.0)
        want = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        got = f(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        # (a running total: the batch's sum may round apart from the loop's)
        assert all(torch.allclose(a, b, atol=1e-5) if isinstance(a, torch.Tensor) else a == b
                   for a, b in zip(got, want)), at
    assert _ran(f)


def test_the_first_iterations_carry_gradients_as_the_loop():
    x = torch.randn(4000, 3) * 0.1
    x[50] += 10
    w = torch.randn(3, requires_grad=True)

    def weighted_until(x, w, t):
        out = []
        for i in range(x.shape[0]):
            if (x[i] * w).sum().abs() > t:
                break
            out.append(x[i] * w)
        return torch.stack(out)
    f = autovec(weighted_until)
    for _ in range(3):     # (the first call takes every iteration's condition, the later ones the first ones')
        got, want = f(x, w, 2.0), weighted_until(x, w, 2.0)
        assert torch.allclose(got, want)
        assert torch.allclose(torch.autograd.grad(got.sum(), w)[0], torch.autograd.grad(want.sum(), w)[0])
    assert _ran(f)


def test_only_a_search_that_stopped_early_looks_at_its_first_iterations_first():
    f = autovec(rows_until_big)
    rt = lambda: f._autovec_state.runtime
    x = torch.randn(4000, 4) * 0.1
    f(x, 5.0)                                   # no stop
    assert list(rt().exit_early.values()) == [False]
    x[40] += 10
    assert torch.equal(f(x, 5.0), rows_until_big(x, 5.0))    # a stop among the first iterations
    assert list(rt().exit_early.values()) == [True]


def spend_in_place(costs, spent, limit):
    for c in costs:
        if spent + c > limit:
            break
        spent += c            # (in place: spent's own dtype, where it wraps)
    return spent


def spend_rebound(costs, spent, limit):
    n = 0
    for c in costs:
        if spent + c > limit:
            break
        spent = spent + c
        n += 1
    return spent, n


@pytest.mark.parametrize("fn, spent, limit", [
    (spend_in_place, lambda: torch.tensor(0, dtype=torch.int8), 1000),       # int8 wraps, int64 would stop
    (spend_in_place, lambda: torch.tensor(0, dtype=torch.uint8), 1000),
    (spend_rebound, lambda: torch.zeros(1, dtype=torch.int8), 100),          # (1,) + 0-d keeps int8
])
def test_a_running_total_in_a_narrower_dtype_stops_where_the_loop_does(fn, spent, limit):
    # (found by a probe: the totals were summed in the dtype of `init + c`, int64, and stopped
    # where the loop's int8 total, wrapping, never does)
    costs = torch.full((40,), 50, dtype=torch.int64)
    a, b = spent(), spent()
    got, want = autovec(fn)(costs, a, limit), fn(costs, b, limit)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert all(torch.equal(torch.as_tensor(x), torch.as_tensor(y)) for x, y in zip(got, want))
    assert torch.equal(a, b)
