"""A loop whose body tests its index against a bound the loop does not change (`v[t + 1] if t + 1
< T else 0.0`, `if t == T - 1:`, `if i > 0:`) runs as consecutive loops over the pieces of its
range where the test has one answer (frontend._IndexSplits): the same iterations in the same
order, each piece without the branch. So GAE written with a Python 0.0 at the edge, reward-to-go
reading the row stored a step before, and a prefix sum with its first row apart become scans.
Every test compares with the loop, on ranges from empty to long."""
import pytest
import torch

from autovec import autovec, explain
from autovec.frontend import capture
from conftest import same_within


def gae_edge(r, v, d, gamma=0.99, lam=0.95):
    T = r.shape[0]
    adv = torch.zeros_like(r)
    last = 0.0
    for t in reversed(range(T)):
        nv = v[t + 1] if t + 1 < T else 0.0
        delta = r[t] + gamma * nv * (1 - d[t]) - v[t]
        last = delta + gamma * lam * (1 - d[t]) * last
        adv[t] = last
    return adv


def gae_cleanrl(r, v, d, last_v, gamma=0.99, lam=0.95):
    T = len(r)
    adv = torch.zeros_like(r)
    lastgaelam = 0
    for t in reversed(range(T)):
        if t == T - 1:
            nextnonterminal = 1.0 - d[t]
            nextvalues = last_v
        else:
            nextnonterminal = 1.0 - d[t]
            nextvalues = v[t + 1]
        delta = r[t] + gamma * nextvalues * nextnonterminal - v[t]
        adv[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    return adv


def reward_to_go(rews, gamma=0.9):
    n = len(rews)
    rtgs = torch.zeros_like(rews)
    for i in range(n - 1, -1, -1):
        rtgs[i] = rews[i] + gamma * (rtgs[i + 1] if i + 1 < n else 0)
    return rtgs


def prefix_first_apart(x):
    out = torch.zeros_like(x)
    for i in range(len(x)):
        if i > 0:
            out[i] = out[i - 1] + x[i]
        else:
            out[i] = x[i]
    return out


def smoothed(x, a=0.3):
    n = x.shape[0]
    s = torch.zeros(x.shape[1:])
    out = torch.empty_like(x)
    for i in range(n):
        left = x[i - 1] if i >= 1 else x[i]
        right = x[i + 1] if n - 1 > i else x[i]
        s = a * s + (left + x[i] + right) / 3
        out[i] = s
    return out, i


def skips_first(x):
    total = torch.zeros(x.shape[1:])
    n = len(x)
    for k in range(2, n + 2):
        if k - 2 == 0:
            continue
        total = 0.5 * total + x[k - 2]
    return total


def halves(x):
    T = len(x)
    c = torch.zeros(x.shape[1:])
    out = torch.empty_like(x)
    for t in range(T):
        c = 0.5 * c + x[t] * (2.0 if t <= T // 2 else -1.0) + (1.0 if 3 < t else 0.0)
        out[t] = c
    return out


FNS = [gae_edge, gae_cleanrl, reward_to_go, prefix_first_apart, smoothed, skips_first, halves]


def _args(fn, n):
    if fn in (gae_edge, gae_cleanrl):
        extra = (torch.tensor(0.3),) if fn is gae_cleanrl else ()
        return (torch.randn(n), torch.randn(n), (torch.rand(n) < 0.1).float()) + extra
    if fn in (smoothed, skips_first, halves):
        return (torch.randn(n, 3),)
    return (torch.randn(n),)


def _outcome(fn, args):
    try:
        return fn(*args)
    except Exception as e:      # (the same exception type from both)
        return type(e)


def _same(want, got):
    if isinstance(want, type):
        assert got is want
    else:
        same_within(want, got)


@pytest.mark.parametrize("fn", FNS)
def test_values_are_the_loops(fn):
    torch.manual_seed(0)
    fast = autovec(fn)
    for n in (0, 1, 2, 3, 7, 300, 300, 2, 0):
        args = _args(fn, n)
        _same(_outcome(fn, args), _outcome(fast, args))


@pytest.mark.parametrize("fn", FNS)
def test_the_long_piece_batches(fn):
    fast = autovec(fn)
    args = _args(fn, 400)
    for _ in range(3):
        fast(*args)
    ex = explain(fast, *args)
    assert ex.path == "vectorized"
    assert "_av_ix1" in (ex.rewritten_source or "")
    # (the copy kept for a bound that is no int says so, and no vectorized run is put on it)
    for loop in ex.loops:
        if "not an int" in loop.source:
            assert not loop.vectorized and not loop.ran and "it runs as written, and only then" in loop.reason


def test_pieces_run_in_the_loops_order():
    # (a log of the indices: the split keeps the order, backwards too)
    def walk(n, seen):
        T = n
        for t in reversed(range(1, T + 2)):
            seen.append(t if t + 1 < T else -t)
    for n in (0, 1, 2, 5):
        a, b = [], []
        walk(n, a)
        autovec(walk)(n, b)
        assert a == b


def test_the_index_after_the_loop_and_an_empty_range():
    for n in (0, 1, 4):
        x = torch.randn(n, 3)
        want, got = _outcome(smoothed, (x,)), _outcome(autovec(smoothed), (x,))
        if n == 0:
            assert want is got is UnboundLocalError
        else:
            same_within(want, got)


def bound_rebound(x):
    n = len(x)
    out = torch.zeros_like(x)
    for i in range(len(x)):
        out[i] = x[i] * (2 if i < n else 3)
        n = n - 1          # (the bound changes in the loop: the test is not one split)
    return out


def index_rebound(x):
    T = len(x)
    out = torch.zeros_like(x)
    for t in range(T):
        t = T - 1 - t
        out[t] = x[t] * (2 if t + 1 < T else 3)
    return out


def with_break(x):
    T = len(x)
    out = torch.zeros_like(x)
    for t in range(T):
        if x[t] > 2:
            break
        out[t] = x[t] + (x[t - 1] if t > 0 else 0)
    return out


def list_built(x):
    T = len(x)
    out = []
    for t in range(T):
        out.append(x[t] - (x[t - 1] if t > 0 else 0))
    return torch.stack(out)


def bound_a_parameter(x, n):
    out = torch.zeros_like(x)
    for t in range(len(x)):
        out[t] = x[t] * (2 if t < n else 3)
    return out


def sized_list_grows(x, buf):
    for t in range(len(buf)):
        if t < len(buf) - 1:
            buf[t] = buf[t + 1]
        x = x + t
    return x, buf


@pytest.mark.parametrize("fn", [bound_rebound, index_rebound, with_break, list_built, bound_a_parameter])
def test_loops_that_are_not_split(fn):
    assert "_av_ix" not in __import__("ast").unparse(capture(fn).tree)
    for n in (0, 1, 5, 200):
        x = torch.randn(n)
        args = (x, 3) if fn is bound_a_parameter else (x,)
        _same(_outcome(fn, args), _outcome(autovec(fn), args))


def test_a_size_read_in_a_test_is_not_split():
    # (`len(buf)` read again in every test could see the list grow through an alias or a helper;
    # only names bound to ints before the loop are bounds: probeL)
    assert "_av_ix" not in __import__("ast").unparse(capture(sized_list_grows).tree)
    for n in (0, 1, 4):
        a, b = list(range(n)), list(range(n))
        want, got = sized_list_grows(1.0, a), autovec(sized_list_grows)(1.0, b)
        assert want == got and a == b


class _Sized:
    shape = (2.5,)


def bound_of_an_object(x, s):
    T = s.shape[0]
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        out[t] = x[t] * (2.0 if t < T else 3.0)
    return out


def bound_after_a_rebinding_import(x):
    T = 2
    from math import e as T       # noqa: F811 (T is not only ever an int)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        out[t] = x[t] * (2.0 if t < T else 3.0)
    return out


def test_a_bound_that_is_no_int_runs_the_loop_as_written():
    # (a size of an object that is not a tensor, `shape = (2.5,)`: the loop as written, over the
    # same range; a name an import also binds is no bound; probeL)
    x = torch.ones(5)
    for _ in range(3):
        assert torch.equal(autovec(bound_of_an_object)(x, _Sized()), bound_of_an_object(x, _Sized()))
        assert torch.equal(autovec(bound_of_an_object)(x, torch.zeros(3)), bound_of_an_object(x, torch.zeros(3)))
        assert torch.equal(autovec(bound_after_a_rebinding_import)(x), bound_after_a_rebinding_import(x))
    assert "type(T) is int" in __import__("ast").unparse(capture(bound_of_an_object).tree)
    assert "_av_ix" not in __import__("ast").unparse(capture(bound_after_a_rebinding_import).tree)


def short_circuit_bound(x, groups):
    n = len(x)
    k = len(groups)
    out = torch.zeros_like(x)
    for t in range(n):
        out[t] = x[t] * (2.0 if k > 0 and t < n // k else 1.0)
    return out


def test_a_bound_the_loop_may_never_read_is_not_read_before_it():
    # (`n // k` with k == 0, behind `k > 0 and`: a bound that can raise is no bound; probeL)
    x = torch.randn(5)
    for groups in ([], [1, 2]):
        assert torch.equal(autovec(short_circuit_bound)(x, groups), short_circuit_bound(x, groups))


def walk_down(p, q, x):
    out = torch.zeros(x.shape[0])
    n = len(x)
    for t in range(len(p) - 1, len(q) - 1, -1):
        out[t] = x[t] * (2.0 if t + 1 < n else 3.0)
    return out


class _Loud:
    def __init__(self, n, name, log):
        self.n, self.name, self.log = n, name, log

    def __len__(self):
        self.log.append(self.name)
        return self.n


def test_the_bounds_of_a_walk_down_are_read_in_order():
    # (range(a, b, -1) reads a, then b: so do the pieces; probeL)
    assert "_av_ix" in __import__("ast").unparse(capture(walk_down).tree)
    x = torch.arange(10.0)
    for _ in range(3):
        want_log, got_log = [], []
        want = walk_down(_Loud(8, "p", want_log), _Loud(2, "q", want_log), x)
        got = autovec(walk_down)(_Loud(8, "p", got_log), _Loud(2, "q", got_log), x)
        assert torch.equal(want, got) and want_log == got_log == ["p", "q"]


def test_an_error_in_a_piece_leaves_the_loops_partial_state():
    def shifted(out, v):
        T = out.shape[0]
        for t in range(T):
            out[t] = v[t + 1] if t + 1 < T - 1 else v[t + 5]
        return out
    for n in (3, 40):
        a, b = torch.zeros(n), torch.zeros(n)
        v = torch.randn(n + 2)
        with pytest.raises(IndexError):
            shifted(a, v)
        with pytest.raises(IndexError):
            autovec(shifted)(b, v)
        assert torch.equal(a, b)


class _Shaped:
    def __init__(self, n):
        self.shape = (n,)


class _IndexOnly:          # (range() takes it through __index__; it has no comparisons)
    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


def logged(x, log):
    for t in range(x.shape[0]):
        if t < 3:
            log[t] = 1.0
        else:
            log[t] = 2.0
    return log


def test_range_bounds_that_are_no_ints_run_the_loop_as_written():
    # (a size of an object: a float, which range() refuses before the first iteration, or an
    # index without comparisons, which it takes; probeM)
    fast = autovec(logged)
    for _ in range(3):
        want, got = [0.0] * 10, [0.0] * 10
        for fn, log in ((logged, want), (fast, got)):
            with pytest.raises(TypeError):
                fn(_Shaped(7.5), log)
        assert want == got == [0.0] * 10
        assert fast(_Shaped(_IndexOnly(5)), [0.0] * 6) == logged(_Shaped(_IndexOnly(5)), [0.0] * 6)
        assert fast(torch.zeros(5), [0.0] * 6) == logged(torch.zeros(5), [0.0] * 6)


def test_a_piece_that_is_always_empty_is_not_made():
    # (`t == T - 1` over range(T): the piece after T - 1 is [T, T), never a loop to analyse)
    pieces = [l for l in explain(gae_cleanrl, *_args(gae_cleanrl, 50)).loops if "not an int" not in l.source]
    assert len(pieces) == 2
