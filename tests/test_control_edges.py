"""Edges found by the control-flow probe of stop 21: a name declared `global` (or `nonlocal`)
that a vectorized loop leaves a value in was not written back (its loop variable, last value or
`while` counter), and two append targets that are one list lost the loop's interleaving."""
import functools
import operator

import numpy as np
import pytest
import torch

from autovec import autovec, explain

GI = -1
G_LAST = None
G_K = -7
G_ROW = None


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def global_index(x):
    global GI
    out = torch.empty_like(x)
    for GI in range(x.shape[0]):
        out[GI] = x[GI] * 2
    return out


def global_last(x):
    global G_LAST
    for i in range(x.shape[0]):
        G_LAST = x[i] * 2
    return 0


def global_counter(x):
    global G_K
    out = torch.zeros_like(x)
    G_K = 0
    while G_K < x.shape[0]:
        out[G_K] = x[G_K] + 1
        G_K += 1
    return out


def global_row(x):
    global G_ROW
    out = []
    for G_ROW in x:
        out.append(G_ROW * 3)
    return torch.stack(out)


def _reset():
    global GI, G_LAST, G_K, G_ROW
    GI, G_LAST, G_K, G_ROW = -1, None, -7, None


def _state():
    return (GI, G_LAST, G_K, G_ROW)


def _same_state(a, b):
    for u, v in zip(a, b):
        if isinstance(u, torch.Tensor):
            torch.testing.assert_close(v, u)
        else:
            assert u == v


@pytest.mark.parametrize("fn", [global_index, global_last, global_counter, global_row])
def test_globals_keep_the_loops_last_values(fn):
    x = torch.randn(30, 3)
    _reset()
    want = fn(x)
    want_state = _state()
    fast = autovec(fn)
    for _ in range(4):
        _reset()
        got = fast(x)
        _same_state(want_state, _state())
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want)
    assert explain(fn, x).path == "vectorized"


def closure_counter(x):
    k = -7

    def read():
        return k
    out = torch.zeros_like(x)
    k = 0
    while k < x.shape[0]:
        out[k] = x[k] + 1
        k += 1
    return out, read()


def test_a_while_counter_read_by_a_closure():
    x = torch.randn(30, 3)
    fast = autovec(closure_counter)
    for _ in range(3):
        got, want = fast(x), closure_counter(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] == 30


def two_lists(x, a, b):
    for r in x:
        a.append(r.sum().item())
        b.append(r.max().item())
    return a, b


def list_and_store(x, o, a, b):
    for i in range(x.shape[0]):
        a.append(x[i].sum())
        o[i] = x[i] * 2
        b.append(x[i].max())
    return a


def test_two_append_targets_that_are_one_list():
    x = torch.randn(40, 3)
    fast = autovec(two_lists)
    for _ in range(4):            # separate lists first: the steady state (and its lane)
        assert fast(x, [], []) == two_lists(x, [], [])
    assert explain(two_lists, x, [], []).path == "vectorized"
    for _ in range(3):
        one, mine = [], []
        two_lists(x, one, one)
        fast(x, mine, mine)
        assert mine == one        # the loop interleaves the two appends


def test_one_list_beside_a_store():
    x = torch.randn(40, 3)
    fast = autovec(list_and_store)
    for _ in range(4):
        fast(x, torch.empty(40, 3), [], [])
    one, mine = [], []
    list_and_store(x, torch.empty(40, 3), one, one)
    fast(x, torch.empty(40, 3), mine, mine)
    assert len(mine) == len(one)
    for a, b in zip(mine, one):
        torch.testing.assert_close(a, b)


# (stop 22, the state probe) side effects the helper scan could not name: calls through a local
# alias, a call's result, a subscript, a conditional expression, operator's in-place functions,
# and a functools.partial whose wrapped function later calls an effectful global

EFFECTS = []


def _through_getattr(v):
    getattr(EFFECTS, "append")(1)
    return v * 2


def _through_ifexp(v):
    (EFFECTS.append if v.numel() else None)(1)
    return v * 2


def _through_operator(v):
    operator.iadd(EFFECTS, [1])
    return v * 2


def _through_literal(v):
    [EFFECTS][0].append(1)
    return v * 2


def _through_alias(v):
    add = EFFECTS.append
    add(1)
    return v * 2


def _through_subscript(v):
    {"log": EFFECTS}["log"].append(1)
    return v * 2


_LOGS = {"log": EFFECTS}


def _through_global_subscript(v):
    _LOGS["log"].append(1)
    return v * 2


def _local_helpers_are_fine(v):
    def double(u):
        return u * 2
    square = lambda u: u * u      # noqa: E731
    return double(square(v))


def _mapped_with(h):
    def rows(x):
        out = []
        for i in range(x.shape[0]):
            out.append(h(x[i]))
        return torch.stack(out)
    return rows


@pytest.mark.parametrize("helper", [_through_getattr, _through_ifexp, _through_operator, _through_literal,
                                    _through_alias, _through_subscript, _through_global_subscript,
                                    _local_helpers_are_fine])
def test_helper_side_effects_the_scan_cannot_name(helper, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fn = _mapped_with(helper)
    fast = autovec(fn)
    x = torch.randn(6, 3)
    for _ in range(3):
        EFFECTS.clear()
        want = fn(x)
        n = len(EFFECTS)
        EFFECTS.clear()
        assert torch.equal(fast(x), want)
        assert len(EFFECTS) == n
    assert explain(fast, x).path == ("vectorized" if helper is _local_helpers_are_fine else "python")


def _act(v):
    return torch.tanh(v)


def _layer(v, a):
    return _act(v) * a


_PARTIAL = functools.partial(_layer, a=2.0)


def _partial_rows(x):
    out = []
    for i in range(x.shape[0]):
        out.append(_PARTIAL(x[i]))
    return torch.stack(out)


def test_a_partial_is_checked_again_on_every_call(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(_partial_rows)
    x = torch.randn(6, 3)
    for _ in range(4):
        fast(x)
    assert explain(fast, x).path == "vectorized"

    def noisy(v):
        EFFECTS.append(1)
        return torch.tanh(v)
    monkeypatch.setitem(globals(), "_act", noisy)
    EFFECTS.clear()
    assert torch.equal(fast(x), _partial_rows(x))
    assert len(EFFECTS) == 12


# (stop 22, the multi-loop probe) a name the loop binds, deleted after it: `del h` needs the
# loop's last value (the rewrite left the name unbound: UnboundLocalError)

def _del_temp(x):
    res = []
    for i in range(x.shape[0]):
        h = x[i] * 2
        res.append(h)
    out = torch.stack(res)
    del res, h
    return out


def _del_index(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] + 1
    try:
        del i
        state = "bound"
    except NameError:
        state = "unbound"
    return out, state


def _del_row(x):
    res = []
    for row in x:
        res.append(row * 2)
    del row
    return torch.stack(res)


@pytest.mark.parametrize("fn", [_del_temp, _del_index, _del_row])
@pytest.mark.parametrize("n", [30, 0])
def test_a_name_the_loop_binds_deleted_after_it(fn, n):
    fast = autovec(fn)
    x = torch.randn(n, 3)
    for _ in range(3):
        try:
            want = fn(x)
        except Exception as e:          # noqa: BLE001 (a zero-trip loop leaves the name unbound)
            with pytest.raises(type(e)):
                fast(x)
            continue
        got = fast(x)
        if isinstance(want, tuple):
            assert torch.equal(got[0], want[0]) and got[1] == want[1]
        else:
            assert torch.equal(got, want)
    if n:
        assert explain(fast, x).path == "vectorized"


# (stop 22, the lists-and-while probe) a while counter that starts as a 0-d tensor, a numpy
# integer or a bool keeps its own type in the loop (a tensor updated in place, a mask when it
# indexes): the rewrite took it for an int

def _while_from(x, start):
    out = torch.zeros_like(x)
    i = start
    while i < x.shape[0]:
        out[i] = x[i] * 2
        i += 1
    return out, i


@pytest.mark.parametrize("start", [lambda: 1, lambda: torch.tensor(1), lambda: np.int64(1), lambda: False,
                                   lambda: True], ids=["int", "tensor", "numpy", "False", "True"])
def test_a_while_counter_keeps_its_type(start):
    fast = autovec(_while_from)
    for _ in range(3):
        x = torch.arange(12.).reshape(4, 3)
        a, b = start(), start()
        (want, wi), (got, gi) = _while_from(x, a), fast(x, b)
        assert torch.equal(got, want) and type(gi) is type(wi) and gi == wi
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)               # (the caller's tensor, updated in place by `i += 1`)
    assert explain(fast, torch.zeros(4, 3), start()).path == ("vectorized" if type(start()) is int else "python")
