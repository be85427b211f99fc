"""A running value reset under a condition right before its update (`if done[t]: G = 0` then
`G = r[t] + gamma * G`): the analysis reads the pair as one linear recurrence whose factor is 0
where the condition holds (analysis.loops._merge_resets), evaluated as the parallel scan of
recurrences with a factor per step. Returns at episode ends, sums per segment."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop, ran_modes


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def returns(r, done, gamma):
    G = 0.0
    out = torch.zeros_like(r)
    for t in reversed(range(r.shape[0])):
        if done[t]:
            G = 0.0
        G = r[t] + gamma * G
        out[t] = G
    return out


def segment_sums(x, starts):
    s = 0
    out = []
    for i in range(x.shape[0]):
        if starts[i]:
            s = 0
        s = s + x[i]
        out.append(s)
    return torch.stack(out)


def final_only(x, starts):
    s = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        if starts[i] > 0.5:
            s = 0
        s = 0.9 * s + x[i]
    return s


def reset_to_one(x, starts):
    p = 1.0
    out = []
    for i in range(x.shape[0]):
        if starts[i]:
            p = 1.0
        p = 0.5 * p + x[i]
        out.append(p)
    return torch.stack(out)


@pytest.mark.parametrize("fn, make", [
    (returns, lambda: (torch.randn(50), torch.rand(50) < 0.1, 0.99)),
    (returns, lambda: (torch.randn(50, dtype=torch.float64), (torch.rand(50) < 0.2).float(), 0.9)),
    (returns, lambda: (torch.randn(50, 3), torch.rand(50) < 0.1, 0.99)),          # rows, one flag each
    (segment_sums, lambda: (torch.randn(40), torch.rand(40) < 0.2)),
    (segment_sums, lambda: (torch.randn(40, 2), torch.randint(0, 3, (40,)))),     # ints: nonzero resets
    (final_only, lambda: (torch.randn(30, 4), torch.rand(30))),
])
def test_resets_run_as_one_recurrence(fn, make):
    assert_equivalent(fn, *make())
    fast = autovec(fn)
    args = make()
    torch.testing.assert_close(fast(*args), fn(*args))
    assert ran_modes(fast)


def test_a_nan_flag_resets_as_in_the_loop():
    r = torch.randn(20)
    done = torch.zeros(20)
    done[[3, 11]] = float("nan")                 # truthy in the loop's `if`
    torch.testing.assert_close(autovec(returns)(r, done, 0.9), returns(r, done, 0.9))


def test_gradients_keep_the_loop():
    # a reset cuts the graph (the loop's values after it do not depend on what came before);
    # the batch's factor of 0 keeps it: with tensors that require grad the loop runs
    r = torch.randn(30, requires_grad=True)
    done = torch.rand(30) < 0.2
    want = torch.autograd.grad(returns(r, done, 0.95).sum(), r)[0]
    fast = autovec(returns)
    got = torch.autograd.grad(fast(r, done, 0.95).sum(), r)[0]
    torch.testing.assert_close(got, want)
    assert not ran_modes(fast)

    def from_start(x, done, h0):
        h = h0
        for t in range(x.shape[0]):
            if done[t]:
                h = 0.0
            h = 0.5 * h + x[t]
        return h
    x, done = torch.randn(6, 2), torch.tensor([True, False, False, False, False, False])
    h0 = torch.randn(2, requires_grad=True)
    want, got = from_start(x, done, h0), autovec(from_start)(x, done, h0)
    assert want.requires_grad == got.requires_grad and torch.equal(want, got)


@pytest.mark.parametrize("h0", [torch.zeros(2, dtype=torch.float64), torch.zeros(3, 2)])
def test_a_start_of_another_dtype_or_shape_keeps_the_loop(h0):
    def from_start(x, done, h0):
        h = h0
        for t in range(x.shape[0]):
            if done[t]:
                h = 0
            h = 0.5 * h + x[t]
        return h
    x, done = torch.randn(6, 2), torch.tensor([False, False, True, False, False, False])
    want, got = from_start(x, done, h0), autovec(from_start)(x, done, h0)
    assert want.dtype == got.dtype and want.shape == got.shape and torch.equal(want, got)


def test_a_flag_with_several_elements_raises_as_the_loop():
    raises_as_loop(RuntimeError, returns, torch.randn(10), torch.ones(10, 2, dtype=torch.bool), 0.9)


def test_flags_from_a_list_run_the_loop():
    r = torch.randn(12)
    done = [bool(v) for v in (torch.rand(12) < 0.3)]
    torch.testing.assert_close(autovec(returns)(r, done, 0.9), returns(r, done, 0.9))


def test_a_reset_to_another_value_keeps_the_loop():
    x, st = torch.randn(20), torch.rand(20) < 0.3
    torch.testing.assert_close(autovec(reset_to_one)(x, st), reset_to_one(x, st))
    assert explain(reset_to_one, x, st).path == "python"


def test_half_precision_keeps_the_loop():
    r, done = torch.randn(20).half(), torch.rand(20) < 0.2
    assert torch.equal(autovec(returns)(r, done, 0.9), returns(r, done, 0.9))


# `h += v` after the reset, and integer running values (runtime._segment_sums)

def episode_returns_aug(r, done):
    out = torch.empty(r.shape[0])
    c = 0.0
    for t in range(r.shape[0]):
        if done[t]:
            c = 0.0
        c += r[t]
        out[t] = c
    return out, c


def steps_since_reset(done):
    out = torch.empty(done.shape[0], dtype=torch.long)
    c = 0
    for t in range(done.shape[0]):
        if done[t]:
            c = 0
        c = c + 1
        out[t] = c
    return out, c


def lengths_of_items(done, x):
    lens = []
    c = 0
    for t in range(done.shape[0]):
        if done[t]:
            c = 0
        c += x[t].item()
        lens.append(c)
    return lens, c


def int_segments(done, x, c):
    out = torch.empty_like(x)
    for t in range(done.shape[0]):
        if done[t]:
            c = 0
        c -= x[t]
        out[t] = c
    return out, c


def _same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


def _flags(n, seed=0):
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)) < 0.2


@pytest.mark.parametrize("n", [1, 2, 9, 64])
def test_an_augmented_update_after_a_reset(n):
    r = torch.randn(n, generator=torch.Generator().manual_seed(n))
    fast = autovec(episode_returns_aug)
    for seed in range(3):
        done = _flags(n, seed)
        (want, wc), (got, gc) = episode_returns_aug(r, done), fast(r, done)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gc, wc)
    assert ran_modes(fast)
    assert "first-order linear recurrence" in explain(episode_returns_aug, r, done).loops[0].reason


@pytest.mark.parametrize("fn, make", [
    (steps_since_reset, lambda n, s: (_flags(n, s),)),
    (lengths_of_items, lambda n, s: (_flags(n, s), torch.randint(-5, 9, (n,)))),
    (lengths_of_items, lambda n, s: (_flags(n, s), torch.randint(-5, 9, (n,), dtype=torch.int8))),
    (int_segments, lambda n, s: (_flags(n, s), torch.randint(-5, 9, (n,)), 0)),
    (int_segments, lambda n, s: (_flags(n, s), torch.randint(-5, 9, (n, 3), dtype=torch.int32), 7)),
])
@pytest.mark.parametrize("n", [1, 2, 5, 40])
def test_integer_running_values_with_resets_are_exact(fn, make, n):
    # the loop's Python ints stay Python ints (the final value too); int tensors keep their dtype
    fast = autovec(fn)
    for seed in range(3):
        args = make(n, seed)
        assert _same(fast(*args), fn(*args))
    assert ran_modes(fast)


def test_python_ints_beyond_int64_keep_the_loop():
    done, x = _flags(6), torch.full((6,), 2 ** 62)
    assert _same(autovec(lengths_of_items)(done, x), lengths_of_items(done, x))


def test_int_tensors_wrap_as_in_the_loop():
    done, x = _flags(8), torch.full((8,), 2 ** 62)
    assert _same(autovec(int_segments)(done, x, 2 ** 62), int_segments(done, x, 2 ** 62))


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_a_tensor_start_updated_in_place_keeps_the_loop(dtype):
    # `c -= x[t]` on the caller's tensor changes it until the first reset
    done, x = torch.zeros(6, dtype=torch.bool), torch.randint(-5, 9, (6,)).to(dtype)
    c1, c2 = torch.tensor(3, dtype=dtype), torch.tensor(3, dtype=dtype)
    want, got = int_segments(done, x, c1), autovec(int_segments)(done, x, c2)
    assert _same(got, want) and torch.equal(c1, c2) and got[1] is c2


def test_a_running_tensor_handed_on_between_resets_keeps_the_loop():
    def history(r, done):
        hist = []
        c = 0.0
        for t in range(r.shape[0]):
            if done[t]:
                c = 0.0
            c += r[t]
            hist.append(c)     # one tensor, updated in place until the next reset
        return hist
    r, done = torch.randn(12), _flags(12, 1)
    assert _same(autovec(history)(r, done), history(r, done))
    assert explain(history, r, done).path == "python"


def test_a_recurrence_of_python_numbers_returns_a_python_number():
    # every part a Python number (a constant term, a Python bool factor): the loop's value is a float
    def decayed(x):
        out = torch.empty(x.shape[0])
        c = 0.0
        for t in range(x.shape[0]):
            c = 0.9 * c + 1.0
            out[t] = x[t] * c
        return out, c

    def counted(done):
        out = torch.empty(done.shape[0])
        c = 0.0
        for t in range(done.shape[0]):
            if done[t]:
                c = 0.0
            c = c + 1.0
            out[t] = c
        return out, c
    for fn, args in ((decayed, (torch.randn(30),)), (counted, (_flags(30),))):
        want, got = fn(*args), autovec(fn)(*args)
        assert type(got[1]) is float and got[1] == pytest.approx(want[1], rel=1e-12)
        torch.testing.assert_close(got[0], want[0])


@pytest.mark.parametrize("start, zero, term", [
    (3, "0.0", "1"),                  # ints until the first reset, floats after it
    (0.0, "0", "1"),                  # floats until the first reset, ints after it
    (0, "0.0", "x[t]"),               # int64 tensors until the first reset, float32 after it
    (0, "0", "x[t]"),                 # the same type throughout: batched
    (0.0, "0.0", "x[t].item()"),
])
def test_a_reset_of_another_type_than_the_running_value_keeps_the_loops_types(start, zero, term):
    # (found by the fuzzer, lost/stop47)
    src = (f"def counted(x, done, c):\n    out = []\n    for t in range(x.shape[0]):\n"
           f"        if done[t]:\n            c = {zero}\n        c += {term}\n        out.append(c * 1)\n    return c, out\n")
    import linecache
    filename = f"<test_resets {start!r} {zero} {term}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = {"torch": torch}
    exec(compile(src, filename, "exec"), ns)
    fn = ns["counted"]
    x = torch.randint(-5, 9, (12,))
    for seed in range(3):
        done = _flags(12, seed)
        done[0] = False
        assert _same(autovec(fn)(x, done, start), fn(x, done, start))
    assert explain(fn, x, done, start).path == ("vectorized" if zero == "0" and term == "x[t]" else "python")


# Reads between the reset and the update (analysis.loops._merge_resets: `(0 if c else h)`), and
# a recurrence read before its update (an exclusive scan)

def position_ids(starts):
    pos = torch.empty(starts.shape[0], dtype=torch.long)
    p = 0
    for t in range(starts.shape[0]):
        if starts[t]:
            p = 0
        pos[t] = p
        p += 1
    return pos, p


def discounted_before(r, done, gamma):
    before = torch.empty_like(r)
    G = 0.0
    for t in range(r.shape[0]):
        if done[t]:
            G = 0.0
        before[t] = G
        G = gamma * G + r[t]
    return before, G


def ema_before(x, a):
    out = torch.empty_like(x)
    h = torch.zeros(x.shape[1])
    for t in range(x.shape[0]):
        out[t] = h
        h = a * h + x[t]
    return out, h


@pytest.mark.parametrize("n", [1, 2, 7, 50])
def test_position_ids_from_segment_starts(n):
    fast = autovec(position_ids)
    for seed in range(3):
        starts = _flags(n, seed)
        assert _same(fast(starts), position_ids(starts))
    assert explain(position_ids, starts).path == "vectorized"


def test_reads_between_the_reset_and_the_update():
    r = torch.randn(40)
    fast = autovec(discounted_before)
    for seed in range(3):
        done = _flags(40, seed)
        (wb, wG), (gb, gG) = discounted_before(r, done, 0.9), fast(r, done, 0.9)
        torch.testing.assert_close(gb, wb)
        torch.testing.assert_close(gG, wG)
    assert explain(discounted_before, r, done, 0.9).path == "vectorized"


def test_a_recurrence_stored_before_its_update():
    x = torch.randn(30, 3)
    got, want = autovec(ema_before)(x, 0.8), ema_before(x, 0.8)
    torch.testing.assert_close(got, want)
    assert explain(ema_before, x, 0.8).path == "vectorized"


def test_other_reads_between_the_reset_and_the_update_keep_the_loop():
    def appended(starts):
        seen = []
        p = 0
        for t in range(starts.shape[0]):
            if starts[t]:
                p = 0
            seen.append(p)          # (0, the reset's int, then the scan's values: the loop's list)
            p += 1
        return seen

    def tested(starts, x):
        out = torch.zeros(starts.shape[0])
        p = 0.0
        for t in range(starts.shape[0]):
            if starts[t]:
                p = 0.0
            if p > 2:
                out[t] = 1.0
            p += x[t]
        return out

    def changes_the_flag(starts):
        pos = torch.empty(starts.shape[0], dtype=torch.long)
        p = 0
        for t in range(starts.shape[0]):
            flag = starts[t]
            if flag:
                p = 0
            pos[t] = p
            flag = not flag
            p += 1
        return pos
    starts, x = _flags(20, 2), torch.randn(20)
    for fn, args in ((appended, (starts,)), (tested, (starts, x)), (changes_the_flag, (starts,))):
        assert _same(autovec(fn)(*args), fn(*args))
        assert explain(fn, *args).path == "python"


# `h = 0 if c else <update>` and its `if` / `else` spelling (analysis.loops._select_resets)

def up_streak(x):
    out = torch.zeros(x.shape[0], dtype=torch.long)
    s = 0
    for t in range(1, x.shape[0]):
        s = s + 1 if x[t] > x[t - 1] else 0
        out[t] = s
    return out, s


def run_lengths(done):
    lens = []
    c = 0
    for t in range(done.shape[0]):
        if done[t]:
            c = 0
        else:
            c = c + 1
        lens.append(c)
    return lens, c


def restarted_total(x, done):
    total = 0
    for t in range(x.shape[0]):
        total = 0 if done[t] else total + int(x[t])
    return total


@pytest.mark.parametrize("fn, make", [
    (up_streak, lambda n, s: (torch.randn(n, generator=torch.Generator().manual_seed(s)),)),
    (run_lengths, lambda n, s: (_flags(n, s),)),
    (restarted_total, lambda n, s: (torch.randint(-5, 9, (n,)), _flags(n, s))),
])
@pytest.mark.parametrize("n", [1, 2, 9, 60])
def test_counts_that_restart_at_zero(fn, make, n):
    fast = autovec(fn)
    for seed in range(3):
        args = make(n, seed)
        assert _same(fast(*args), fn(*args))
    if n > 2:
        assert explain(fn, *args).path == "vectorized"


def test_a_restart_whose_values_are_tensors_or_of_another_type_keeps_the_loop():
    def tensor_total(x, done):
        h = 0.0
        for t in range(x.shape[0]):
            h = 0.0 if done[t] else h + x[t]      # (0.0, then tensors: the loop's types alternate)
        return h

    def float_restart(done):
        h = 0
        for t in range(done.shape[0]):
            h = 0.0 if done[t] else h + 1         # (ints until the first restart, floats after it)
        return h
    x, done = torch.rand(30) + 0.5, _flags(30, 4)      # (no term of -0.0: that check is another)
    done[-1] = True          # (the loop's last value is the number itself)
    for fn, args in ((tensor_total, (x, done)), (float_restart, (done,))):
        assert _same(autovec(fn)(*args), fn(*args))
        assert explain(fn, *args).path == "python"


def test_a_float_scan_stored_into_an_integer_tensor_keeps_the_loop():
    # (probeR) the loop keeps c at exactly 1.0; a scan in another order gives 0.9999999999999986,
    # which the int64 store truncates to 0
    def settles(n):
        out = torch.zeros(n, dtype=torch.int64)
        c = 1.0
        for t in range(n):
            c = c * 0.99 + 0.01
            out[t] = c
        return out, c
    fast = autovec(settles)
    for n in (300, 3000):
        assert _same(fast(n), settles(n))


# the `if` / `else` spelling with `+=` / `-=`, and with more statements on a side
# (analysis.loops._branch_updates): the update as `h = a if c else b`, the rest under `c` again

def streak_aug(x):
    run = 0
    out = []
    for t in range(x.shape[0]):
        if x[t] > 0:
            run += 1
        else:
            run = 0
        out.append(run)
    return out, run


def longest_streak(x):
    run = 0
    best = 0
    for t in range(x.shape[0]):
        if x[t] > 0:
            run += 1
            best = max(best, run)
        else:
            run = 0
    return best, run


def streak_and_side_effects(x):
    run = 0
    n = 0
    for t in range(x.shape[0]):
        if x[t].item() > 0:
            run -= 2
            n += 1
        else:
            run = 0
            n -= 1
    return run, n


def float_run_stored(x):
    # (positive terms: a negative one times the keep flag 0 would be -0.0, which keeps the loop)
    run = 0.0
    out = torch.empty(x.shape[0], dtype=torch.float64)
    for t in range(x.shape[0]):
        if x[t] > 0:
            run += x[t].item() + 2.0
        else:
            run = 0.0
        out[t] = run
    return out, run


def streak_writes_its_input(x):
    run = 0
    for t in range(x.shape[0]):
        if x[t] > 0:
            run += 1
            x[t] = -1.0
        else:
            run = 0
    return run


@pytest.mark.parametrize("fn", [streak_aug, longest_streak, streak_and_side_effects, float_run_stored,
                                streak_writes_its_input])
@pytest.mark.parametrize("n", [1, 2, 9, 60])
def test_restarts_spelled_with_augmented_updates_and_more_statements(fn, n):
    fast = autovec(fn)
    for seed in range(3):
        x = torch.randn(n, generator=torch.Generator().manual_seed(seed)).clamp(min=-1.0) + 0.1
        x1, x2 = x.clone(), x.clone()
        assert _same(fast(x1), fn(x2))
        assert torch.equal(x1, x2)        # (the in-place writes of the rest of a side)
    if n > 2:
        assert explain(fn, x).path == "vectorized"


def test_a_restart_whose_condition_reads_the_value_or_changes_keeps_the_loop():
    def reads_itself(x):
        run = 0
        for t in range(x.shape[0]):
            if run < 3:
                run += 1
            else:
                run = 0
        return run

    def tensor_start(x):
        run = torch.zeros((), dtype=torch.long)
        out = []
        for t in range(x.shape[0]):
            if x[t] > 0:
                run += 1        # (in place on the start: the loop's list holds one tensor, twice)
            else:
                run = 0
            out.append(run)
        return out

    def changes_the_condition(x):
        run = 0
        for t in range(x.shape[0]):
            if x[t] > 0:
                run += int(x[t].add_(-1.0) > 0)
            else:
                run = 0
        return run
    for fn in (reads_itself, tensor_start, changes_the_condition):
        x = torch.randn(12, generator=torch.Generator().manual_seed(2))
        x1, x2 = x.clone(), x.clone()
        got, want = autovec(fn)(x1), fn(x2)
        assert type(got) is type(want) and str(got) == str(want)
        assert torch.equal(x1, x2)
        assert explain(fn, x).path == "python", fn.__name__


def signed_run(x, keep, start: float = 0.0):
    run = start
    out = []
    for t in range(x.shape[0]):
        if keep[t]:
            run += x[t].item()
        else:
            run = 0.0
        out.append(run)
    return out, run


def _same_signs(got, want):
    import math
    assert len(got[0]) == len(want[0])
    for a, b in zip(got[0] + [got[1]], want[0] + [want[1]]):
        assert type(a) is type(b) and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
        if a == 0:
            assert math.copysign(1.0, a) == math.copysign(1.0, b)     # (the zero's sign too)


def test_a_float_restart_with_negative_and_signed_zero_terms():
    # (a negative term times the keep flag 0 was -0.0, which kept the loop on most calls: probe Y;
    # the term plus 0 is +0.0 there)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, generator=g)
    x[3], x[4], x[10] = -0.0, 0.0, -0.0
    keep = torch.rand(40, generator=g) < 0.7
    keep[3] = keep[4] = True
    _same_signs(autovec(signed_run)(x, keep), signed_run(x, keep))
    assert explain(signed_run, x, keep).path == "vectorized"
    only_negative_zero = torch.full((6,), -0.0)
    ones = torch.ones(6, dtype=torch.bool)
    _same_signs(autovec(signed_run)(only_negative_zero, ones), signed_run(only_negative_zero, ones))


def test_a_float_restart_from_minus_zero_keeps_the_loop():
    x = torch.full((6,), -0.0)
    ones = torch.ones(6, dtype=torch.bool)
    _same_signs(autovec(signed_run)(x, ones, -0.0), signed_run(x, ones, -0.0))     # (-0.0 + -0.0 stays -0.0)
    e = explain(signed_run, x, ones, -0.0)
    assert e.path == "python" and "-0.0" in str(e)
