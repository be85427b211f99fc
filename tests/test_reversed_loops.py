"""Loops that walk a sequence backwards (`reversed(x)`, `x.flip(0)`, `torch.flip(x, [0])`,
`x[::-1]`, zips of them) and lists or deques built front-first (`insert(0, v)`, `appendleft`),
planned as reversed range loops with appends reversed once after the loop (analysis.reversal).
Each case against the loop as written: values, dtypes, Python types, arguments after the
call, errors, gradients, and the path taken."""
import collections
from collections import deque

import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _copy(v):
    if isinstance(v, torch.Tensor):
        c = v.detach().clone()
        return c.requires_grad_(v.requires_grad)
    if isinstance(v, list):
        return [_copy(e) for e in v]
    if isinstance(v, tuple):
        return tuple(_copy(e) for e in v)
    if isinstance(v, deque):
        return deque(_copy(e) for e in v)
    if isinstance(v, dict):
        return {k: _copy(e) for k, e in v.items()}
    return v


def _same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    elif isinstance(want, (list, tuple, deque)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    else:
        assert got == want


def _check(fn, *args):
    """Runs the loop as written and autovec's on copies of `args`; the results, the arguments
    after the call and any error must agree. Returns the path a call with `args` takes."""
    a, b = _copy(args), _copy(args)
    try:
        want = fn(*a)
    except Exception as e:   # noqa: BLE001
        with pytest.raises(type(e)) as got:
            autovec(fn)(*b)
        assert str(got.value) == str(e)
        return explain(fn, *_copy(args)).path
    got = autovec(fn)(*b)
    _same(got, want)
    _same(b, a)
    return explain(fn, *_copy(args)).path


def _strategy(fn):
    return explain(fn).loops[0].strategy


# ----------------------------------------------------------------------------- vectorized forms

def disc_returns(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    return torch.stack(returns)


def disc_flip(rewards, gamma: float):
    R = 0
    returns = []
    for r in rewards.flip(0):
        R = r + gamma * R
        returns.insert(0, R)
    return torch.stack(returns)


def disc_torch_flip(rewards, gamma: float):
    R = 0
    returns = []
    for r in torch.flip(rewards, [0]):
        R = r + gamma * R
        returns.insert(0, R)
    return torch.stack(returns)


def disc_torch_flip_tuple(rewards, gamma: float):
    R = 0
    returns = []
    for r in torch.flip(rewards, (0,)):
        R = gamma * R + r
        returns.insert(0, R)
    return torch.stack(returns)


def disc_slice(rewards, gamma: float):
    R = 0
    returns = []
    for r in rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    return returns


def disc_deque(rewards, gamma: float):
    R = 0
    returns = deque()
    for r in reversed(rewards):
        R = r + gamma * R
        returns.appendleft(R)
    return torch.stack(list(returns))


def disc_deque_returned(rewards, gamma: float):
    R = 0.0
    returns = collections.deque()
    for r in reversed(rewards):
        R = r + gamma * R
        returns.appendleft(R)
    return returns


def disc_tensor(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    return torch.tensor(returns)


def disc_list_result(rewards, gamma: float):
    R = 0
    returns = list()
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    return returns, R


def gae(rewards, values, dones, gamma: float, lam: float):
    adv = 0
    out = []
    for r, v, d in zip(reversed(rewards), reversed(values), reversed(dones)):
        adv = r - v + gamma * lam * adv * (1 - d)
        out.insert(0, adv)
    return torch.stack(out)


def pairs_list_zip(rewards, dones, gamma: float):
    R = 0
    out = []
    for r, d in reversed(list(zip(rewards, dones))):
        R = r + gamma * R * (1 - d)
        out.insert(0, R)
    return torch.stack(out)


def walk_only(x, gamma: float):
    """A reversed walk with a forward-built list: the list ends in the walk's order."""
    R = 0
    out = []
    for r in reversed(x):
        R = r + gamma * R
        out.append(R)
    return torch.stack(out)


def front_only(x, gamma: float):
    """A reversed range with a front-built list (the other half alone)."""
    R = 0
    out = []
    for t in reversed(range(len(x))):
        R = x[t] + gamma * R
        out.insert(0, R)
    return torch.stack(out)


VECTORIZED = [disc_returns, disc_flip, disc_torch_flip, disc_torch_flip_tuple, disc_deque, disc_tensor,
              disc_list_result, walk_only, front_only]


@pytest.mark.parametrize("fn", VECTORIZED)
@pytest.mark.parametrize("make", [lambda: torch.randn(37), lambda: torch.randn(37, dtype=torch.float64),
                                  lambda: torch.randn(23, 16), lambda: torch.randn(5, 3, 2)])
def test_vectorized_forms_agree_with_the_loop(fn, make):
    if fn is disc_tensor and make().dim() > 1:
        pytest.skip("torch.tensor of a list of multi-element tensors raises in both")
    torch.manual_seed(0)
    assert _check(fn, make(), 0.9) == "vectorized"
    assert _strategy(fn) == "scan"


def test_the_docstring_example_explains_both_moves():
    ex = explain(disc_returns, torch.randn(100), 0.99)
    r = ex.loops[0]
    assert ex.path == "vectorized" and r.strategy == "scan"
    assert "reversed(rewards)" in r.reason and "front-first" in r.reason
    assert r.source.startswith("for r in reversed(rewards):") and "insert(0, R)" in r.source


def test_deque_stays_a_deque():
    x = torch.randn(40)
    assert _check(disc_deque_returned, x, 0.9) == "vectorized"
    got = autovec(disc_deque_returned)(x, 0.9)
    assert type(got) is deque and len(got) == 40


def test_list_of_tensors_and_slices_of_lists():
    """Lists of tensors agree with the loop (the planner does not index lists of tensors by a
    range: the loop runs, for now)."""
    xs = [torch.randn(()) for _ in range(30)]
    _check(disc_returns, xs, 0.9)
    rows = [torch.randn(4) for _ in range(30)]
    _check(disc_slice, rows, 0.9)
    _check(disc_deque_returned, rows, 0.9)


@pytest.mark.parametrize("fn", [disc_returns, disc_tensor, disc_deque, disc_slice, disc_list_result,
                                disc_deque_returned])
def test_python_floats_keep_the_loop_behaviour(fn):
    torch.manual_seed(1)
    _check(fn, torch.randn(50).tolist(), 0.9)
    _check(fn, [1, 2, 3, 4], 0.5)          # (ints: R becomes a float)
    _check(fn, tuple(torch.randn(20).tolist()), 0.9)


@pytest.mark.parametrize("fn", VECTORIZED + [disc_slice, disc_deque_returned])
def test_int_rewards_and_empty_inputs(fn):
    _check(fn, torch.randint(-3, 4, (25,)), 0.9)
    _check(fn, torch.randint(-3, 4, (25,)), 1)
    _check(fn, torch.zeros(0), 0.9)          # (torch.stack of [] raises; torch.tensor([]) does not)
    _check(fn, [], 0.9)


@pytest.mark.parametrize("fn", VECTORIZED + [disc_slice])
@pytest.mark.parametrize("bad", [lambda: torch.tensor(2.0), lambda: [torch.tensor(1.0), torch.tensor(2.0)],
                                 lambda: torch.randn(4, 3), lambda: {0: torch.randn(2), 1: torch.randn(2)},
                                 lambda: "abc", lambda: (torch.randn(3), torch.randn(2))])
def test_other_values_behave_as_the_loop(fn, bad):
    """0-d tensors, lists where `.flip` is called, tensors sliced by `[::-1]`, dicts (reversed
    walks their keys), strings, rows of several shapes: the loop's value or error."""
    _check(fn, bad(), 0.9)


@pytest.mark.parametrize("fn", [disc_returns, disc_flip, disc_torch_flip, disc_deque, walk_only, front_only])
def test_gradients(fn):
    torch.manual_seed(2)
    x = torch.randn(31, 3, dtype=torch.float64, requires_grad=True)
    y = x.detach().clone().requires_grad_(True)
    fn(x, 0.95).pow(2).sum().backward()
    autovec(fn)(y, 0.95).pow(2).sum().backward()
    torch.testing.assert_close(y.grad, x.grad)
    assert explain(fn, y, 0.95).path == "vectorized"


def test_gae_and_zips():
    torch.manual_seed(3)
    T = 64
    r, v, d = torch.randn(T), torch.randn(T), (torch.rand(T) < 0.1).float()
    assert _check(gae, r, v, d, 0.99, 0.95) == "vectorized"
    # sequences of different lengths: zip of reversed walks pairs the last elements of each
    assert _check(gae, r, v[:50], d, 0.99, 0.95) == "python"
    assert _check(gae, r[:40], v, d, 0.99, 0.95) == "python"
    _check(gae, r.tolist(), v.tolist(), d.tolist(), 0.99, 0.95)
    assert _check(pairs_list_zip, r, d, 0.9) == "vectorized"
    # reversed(list(zip(..))) walks the common length from its end
    _check(pairs_list_zip, r, d[:50], 0.9)
    _check(pairs_list_zip, r[:30], d, 0.9)
    _check(pairs_list_zip, r.tolist(), d.tolist(), 0.9)


# ----------------------------------------------------------------------------- kept as written

def reversed_global_shadow(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    return torch.stack(returns)


def _fake_reversed(x):
    return x       # (not the builtin: walks forwards)


reversed_global_shadow.__globals__  # noqa: B018  (the shadow is installed per test below)


def reversed_local_shadow(rewards, gamma: float, reversed=lambda x: x):   # noqa: A002
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    return torch.stack(returns)


class deque_like(list):   # noqa: N801
    def appendleft(self, v):
        self.append(v)     # (not a deque: appends at the end)


def fake_deque(rewards, gamma: float):
    R = 0
    returns = deque_like()
    for r in reversed(rewards):
        R = r + gamma * R
        returns.appendleft(R)
    return torch.stack(list(returns))


def insert_at_one(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(1, R)
    return torch.stack(returns)


def insert_at_end(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(-1, R)
    return torch.stack(returns)


def mixed(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
        returns.append(R * 2)
    return torch.stack(returns)


def reads_list(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R + len(returns)
        returns.insert(0, R)
    return torch.stack(returns)


def reads_front(rewards, gamma: float):
    returns = [torch.zeros(())]
    for r in reversed(rewards):
        returns.insert(0, r + gamma * returns[0])
    return torch.stack(returns)


def given_list(rewards, gamma: float, returns):
    R = 0
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    return torch.stack(returns)


GLOBAL_RETURNS = []


def global_list(rewards, gamma: float):
    global GLOBAL_RETURNS
    GLOBAL_RETURNS = []
    R = 0
    for r in reversed(rewards):
        R = r + gamma * R
        GLOBAL_RETURNS.insert(0, R)
    return torch.stack(GLOBAL_RETURNS)


def element_after(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    return torch.stack(returns), r


def element_kept(rewards, gamma: float):
    returns = []
    for r in reversed(rewards):
        returns.insert(0, r)
    return returns


def element_in_place(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        r.mul_(2)
        R = r + gamma * R
        returns.insert(0, R)
    return torch.stack(returns)


def element_max(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = max(r, R)           # (Python's max returns one of its arguments: the element itself)
        returns.insert(0, R)
    return returns


def early_break(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        if r.sum() > 1.5:
            break
        R = r + gamma * R
        returns.insert(0, R)
    return returns


def caught(rewards, gamma: float):
    R = 0
    returns = []
    try:
        for r in reversed(rewards):
            R = 1 / (r.item() - 0.5) + gamma * R if isinstance(r, torch.Tensor) else 1 / r + gamma * R
            returns.insert(0, R)
    except ZeroDivisionError:
        return returns
    return returns


def closure_reads(rewards, gamma: float):
    R = 0
    returns = []
    peek = lambda: len(returns)   # noqa: E731
    for r in reversed(rewards):
        R = r + gamma * R + peek()
        returns.insert(0, R)
    return torch.stack(returns)


def modifies_iterable(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        rewards[0] = rewards[0] + 1
        returns.insert(0, R)
    return torch.stack(returns)


def pops_iterable(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        rewards.pop()
        returns.insert(0, R)
    return R, returns


def enumerated(rewards, gamma: float):
    R = 0
    out = torch.zeros(len(rewards))
    for i, r in enumerate(reversed(rewards)):
        R = r + gamma * R
        out[i] = R * i
    return out


def enumerated_start(rewards, gamma: float):
    R = 0
    out = []
    for i, r in enumerate(reversed(rewards), start=-2):
        R = r + gamma * R + i
        out.insert(0, R)
    return torch.stack(out), i


def enumerated_zip(rewards, dones, gamma: float):
    R = 0
    out = []
    for i, (r, d) in enumerate(zip(reversed(rewards), reversed(dones)), 1):
        R = r + gamma * R * (1 - d) + 0.01 * i
        out.insert(0, R)
    return torch.stack(out)


def enumerated_twice(rewards, gamma: float):
    R = 0
    out = []
    for i, r in enumerate(reversed(rewards)):
        R = r + gamma * R
        i = i * 2
        out.insert(0, R + i)
    return torch.stack(out)


@pytest.mark.parametrize("make", [lambda: torch.randn(12), lambda: torch.randn(12, 3, dtype=torch.float64),
                                  lambda: torch.randn(12).tolist(), lambda: torch.zeros(0), lambda: torch.tensor(1.0)])
def test_enumerate_counts_up_while_the_walk_goes_down(make):
    """enumerate(reversed(x)): the index 0, 1, .. beside x[n - 1], x[n - 2], ..; after the loop
    it is the last index (unbound for an empty walk, a NameError in both)."""
    torch.manual_seed(5)
    x = make()
    p = _check(enumerated, x, 0.9)
    _check(enumerated_start, x, 0.9)
    _check(enumerated_twice, x, 0.9)
    if isinstance(x, torch.Tensor) and x.dim() and len(x):
        assert _check(enumerated_start, x, 0.9) == "vectorized"
        assert p == ("vectorized" if x.dim() == 1 else "python")   # (a row into one element raises)
    d = (torch.rand(12) < 0.2).float()
    if isinstance(x, torch.Tensor) and x.dim() == 1 and len(x):
        assert _check(enumerated_zip, x, d, 0.9) == "vectorized"
        _check(enumerated_zip, x, d[:7], 0.9)


def nested_inserts(xs, gamma: float):
    out = []
    for x in xs:
        R = 0
        returns = []
        for r in reversed(x):
            R = r + gamma * R
            returns.insert(0, R)
        out.append(torch.stack(returns))
    return out


@pytest.mark.parametrize("fn, extra", [
    (reversed_local_shadow, ()), (fake_deque, ()), (insert_at_one, ()), (insert_at_end, ()), (mixed, ()),
    (reads_list, ()), (reads_front, ()), (global_list, ()), (element_after, ()), (element_kept, ()),
    (element_in_place, ()), (element_max, ()), (early_break, ()), (caught, ()), (closure_reads, ()),
    (modifies_iterable, ()), (enumerated, ()), (nested_inserts, ()),
])
@pytest.mark.parametrize("make", [lambda: torch.randn(12), lambda: torch.randn(12, 3), lambda: torch.randn(12).tolist(),
                                  lambda: [torch.randn(()) for _ in range(12)]])
def test_pitfalls_behave_as_the_loop(fn, extra, make):
    torch.manual_seed(4)
    x = make()
    if fn is nested_inserts:
        x = [x, x[:5] if not isinstance(x, torch.Tensor) else x[:5].clone()]
    if fn in (element_max,) and isinstance(x, torch.Tensor) and x.dim() > 1:
        return    # (max of tensors with several elements raises in both: checked elsewhere)
    _check(fn, x, 0.9, *extra)


def test_pitfalls_keep_the_python_loop():
    x = torch.randn(12)
    for fn in (reversed_local_shadow, fake_deque, insert_at_one, insert_at_end, mixed, reads_list, reads_front,
               element_after, element_kept, element_in_place, element_max, closure_reads, modifies_iterable):
        assert _check(fn, x.clone(), 0.9) == "python", fn.__name__


def test_a_given_list_is_grown_at_its_front():
    x = torch.randn(10)
    start = [torch.tensor(100.0)]
    a, b = list(start), list(start)
    want = given_list(x, 0.9, a)
    got = autovec(given_list)(x, 0.9, b)
    _same(got, want)
    _same(b, a)
    assert explain(given_list, x, 0.9, list(start)).loops[0].strategy == "python"


def test_a_shadowed_global_reversed(monkeypatch):
    monkeypatch.setitem(reversed_global_shadow.__globals__, "reversed", _fake_reversed)
    assert _check(reversed_global_shadow, torch.randn(9), 0.9) == "python"


def test_a_break_and_a_caught_error_keep_the_partial_list_in_order():
    x = torch.tensor([0.1, 2.0, 0.2, 0.3])
    _check(early_break, x, 0.9)
    assert [round(v.item(), 4) for v in autovec(early_break)(x, 0.9)] == [0.47, 0.3]
    _check(caught, torch.tensor([0.1, 0.5, 0.2, 0.3]), 0.9)    # (0.5 raises ZeroDivisionError after two inserts)


def test_the_iterable_changed_in_the_loop():
    _check(pops_iterable, [1.0, 2.0, 3.0, 4.0], 0.9)
    _check(pops_iterable, [torch.tensor(1.0), torch.tensor(2.0)], 0.9)


def test_the_element_stays_a_copy_of_the_row():
    """The rows of a reversed tensor are a copy: changing the argument after the call does not
    change what the loop kept, nor does an in-place update in the loop change the argument."""
    x = torch.randn(6, 2)
    kept = autovec(element_kept)(x, 0.9)
    before = [k.clone() for k in kept]
    x.add_(1)
    for k, b in zip(kept, before):
        assert torch.equal(k, b)
    y = torch.randn(6)
    y0 = y.clone()
    autovec(element_in_place)(y, 0.9)
    assert torch.equal(y, y0)


def test_refusals_explain_why():
    r = explain(element_kept).loops[0]
    assert r.strategy == "python" and "backwards" in r.reason and "`r` is used as it is" in r.reason
    r = explain(enumerated_twice).loops[0]
    assert r.strategy == "python" and "enumerate's index `i` is assigned" in r.reason
    r = explain(modifies_iterable).loops[0]
    assert r.strategy == "python" and "mentions `rewards`" in r.reason


def test_rewritten_source_is_the_original_where_nothing_is_vectorized():
    for fn in (element_kept, insert_at_one, closure_reads):
        ex = explain(fn)
        assert ex.diff == "" and "insert" in ex.rewritten_source


class Policy:
    def __init__(self, rewards):
        self.rewards = rewards
        self.gamma = 0.99

    @autovec
    def returns(self):
        R = 0
        returns = []
        for r in self.rewards[::-1]:
            R = r + self.gamma * R
            returns.insert(0, R)
        return torch.tensor(returns)


def test_reinforce_method_on_a_list_of_floats():
    """PyTorch's REINFORCE example: `policy.rewards` is a list of Python floats."""
    rewards = torch.randn(200).tolist()
    got = Policy(rewards).returns()
    want = Policy.returns.__wrapped__(Policy(rewards))
    _same(got, want)
    assert got.dtype == torch.float32


def caught_midway(rewards, scale, gamma: float):
    """A forward range built front-first: `scale` shorter than `rewards` raises IndexError part-way
    (the rewrite's guard sends the call to the loop), and the handler returns the partial list."""
    R = 0
    returns = []
    try:
        for t in range(len(rewards)):
            R = rewards[t] * scale[t] + gamma * R
            returns.insert(0, R)
    except IndexError:
        return returns
    return returns


def test_an_error_caught_in_the_function_sees_the_list_as_the_loop_left_it():
    x = torch.randn(20)
    _check(caught_midway, x, torch.randn(20), 0.9)
    assert _check(caught_midway, x, torch.randn(7), 0.9) == "python"
    assert len(autovec(caught_midway)(x, torch.randn(7), 0.9)) == 7


# ----------------------------------------------------------------------------- the pre-pass itself

def _prepass(fn):
    from autovec.analysis.reversal import front_builds, reversed_walks
    from autovec.frontend import capture
    cap = capture(fn)
    fronts = front_builds(cap)
    walks, _ = reversed_walks(cap)
    return len(fronts), len(walks)


def _closure_before(rewards, gamma: float):
    def peek():
        return returns[0]
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    peek()
    return returns


def _in_with(rewards, gamma: float):
    R = 0
    returns = []
    with open("/dev/null"):
        for r in reversed(rewards):
            R = r + gamma * R
            returns.insert(0, R)
    return returns


def _under_no_grad(rewards, gamma: float):
    R = 0
    returns = []
    with torch.no_grad():
        for r in reversed(rewards):
            R = r + gamma * R
            returns.insert(0, R)
    return returns


def _nonlocal_list(rewards, gamma: float):
    returns = []

    def inner():
        nonlocal returns
        returns = []
        R = 0
        for r in reversed(rewards):
            R = r + gamma * R
            returns.insert(0, R)
    inner()
    return returns


def _walk_in_nested_def(rewards, gamma: float):
    def inner():
        R = 0
        for r in reversed(rewards):
            R = r + gamma * R
        return R
    return inner()


def _attribute_walk_mutated(p, gamma: float):
    R = 0
    returns = []
    for r in reversed(p.rewards):
        R = r + gamma * R
        p.rewards = []
        returns.insert(0, R)
    return returns


def _attribute_walk(p, gamma: float):
    R = 0
    returns = []
    for r in reversed(p.rewards):
        R = r + p.gamma * R
        returns.insert(0, R)
    return returns


@pytest.mark.parametrize("fn, want", [
    (disc_returns, (1, 1)), (disc_deque, (1, 1)), (gae, (1, 1)), (pairs_list_zip, (1, 1)), (walk_only, (0, 1)),
    (front_only, (1, 0)), (caught_midway, (0, 0)), (_closure_before, (0, 1)), (_in_with, (0, 1)),
    (_under_no_grad, (1, 1)), (_nonlocal_list, (0, 0)), (_walk_in_nested_def, (0, 0)),
    (_attribute_walk_mutated, (1, 0)), (_attribute_walk, (1, 1)), (insert_at_one, (0, 1)), (mixed, (0, 1)),
    (reads_list, (0, 1)), (reads_front, (0, 1)), (global_list, (0, 1)), (element_after, (1, 0)),
    (element_kept, (1, 0)), (element_in_place, (1, 0)), (element_max, (1, 0)), (closure_reads, (0, 1)),
    (modifies_iterable, (1, 0)), (enumerated, (0, 1)), (fake_deque, (0, 1)), (reversed_local_shadow, (1, 0)),
    (given_list, (0, 1)), (early_break, (1, 1)),
])
def test_what_the_prepass_moves(fn, want):
    """(front-first lists moved, reversed walks moved) before the planner sees the function."""
    assert _prepass(fn) == want


def caught_inside(rewards, scale, gamma: float):
    """As caught_midway, the list made inside the `try`."""
    try:
        R = 0
        returns = []
        for t in range(len(rewards)):
            R = rewards[t] * scale[t] + gamma * R
            returns.insert(0, R)
    except IndexError:
        return returns
    return returns


def positive_kept(rewards, gamma: float):
    returns = []
    for r in reversed(rewards):
        returns.insert(0, +r)      # (`+t` is the tensor itself)
    return returns


def test_errors_caught_and_views_kept():
    x = torch.randn(20)
    assert _prepass(caught_inside) == (0, 0)
    _check(caught_inside, x, torch.randn(20), 0.9)
    _check(caught_inside, x, torch.randn(7), 0.9)
    assert len(autovec(caught_inside)(x, torch.randn(7), 0.9)) == 7
    assert _prepass(positive_kept) == (1, 0)
    y = torch.randn(8, 2)
    kept = autovec(positive_kept)(y, 0.9)
    want = [k.clone() for k in kept]
    y.add_(1)
    _same(kept, want)


def test_iterators_ranges_and_numpy_run_as_written():
    """Values the walk cannot index as it reverses them: each call gets its own."""
    import numpy as np
    for make in (lambda: (v for v in torch.randn(5)), lambda: range(6), lambda: np.arange(5.0),
                 lambda: iter([torch.tensor(1.0)])):
        try:
            want = disc_returns(make(), 0.9)
        except Exception as e:   # noqa: BLE001
            with pytest.raises(type(e)) as got:
                autovec(disc_returns)(make(), 0.9)
            assert str(got.value) == str(e)
            continue
        _same(autovec(disc_returns)(make(), 0.9), want)


@pytest.mark.parametrize("fn", [disc_returns, gae])
def test_gradients_through_the_factor(fn):
    torch.manual_seed(6)
    T = 40
    r = torch.randn(T, dtype=torch.float64, requires_grad=True)
    g = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
    extra = (torch.randn(T, dtype=torch.float64), torch.zeros(T, dtype=torch.float64)) if fn is gae else ()
    rest = (g, torch.tensor(0.95, dtype=torch.float64)) if fn is gae else (g,)
    out = fn(r, *extra, *rest)
    want = torch.autograd.grad(out.sum(), (r, g))
    out = autovec(fn)(r, *extra, *rest)
    got = torch.autograd.grad(out.sum(), (r, g))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert explain(fn, r, *extra, *rest).path == "vectorized"


def walk_in_nest(x, n: int):
    out = torch.zeros(n)
    for i in range(n):
        for r in reversed(x):
            out[i] += r * i
    return out


def test_a_walk_inside_a_loop_nest():
    """The inner walk, read as a reversed range, makes a perfect nest the planner takes; the
    inner loop is not planned by itself, so it goes back as written inside the nest, whose
    fallback then runs the walk as written (a 0-d tensor: the loop's own TypeError)."""
    torch.manual_seed(7)
    x = torch.randn(7, dtype=torch.float64)
    assert _check(walk_in_nest, x, 4) == "vectorized"
    _check(walk_in_nest, torch.tensor(3.0), 4)
    _check(walk_in_nest, x.tolist(), 4)
    ex = explain(walk_in_nest)
    assert ex.loops[0].strategy != "python" and "walks `reversed(x)`" in ex.loops[0].reason


def inside_a_triangle(x, gamma: float):
    n = len(x)
    total = torch.zeros(n, n)
    for i in range(n):
        for j in range(i + 1, n):
            acc = []
            for r in reversed(x):
                acc.insert(0, r * gamma + i)
            total[i, j] = torch.stack(acc)[0] + j      # (the first element: the order matters)
    return total


def test_loops_inside_other_moves_are_left_to_them():
    """A triangle nest (hoist.rectangular_nests) goes back as it was when it was moved where it
    is not vectorized: the loops inside it are not moved again."""
    x = torch.randn(5)
    _check(inside_a_triangle, x, 0.9)
    _check(inside_a_triangle, torch.tensor(2.0), 0.9)


def episodes(batch, gamma: float):
    out = []
    for ep in batch:
        R = 0
        rets = []
        for r in reversed(ep):
            R = r + gamma * R
            rets.insert(0, R)
        out.append(torch.stack(rets))
    return out


def test_a_walk_inside_a_loop_over_episodes():
    """The inner walk is planned by itself on every pass of the outer loop: its element is read
    as `ep[k]` and bound nowhere, so no last value keeps it in Python."""
    torch.manual_seed(8)
    batch = torch.randn(4, 30)
    assert _check(episodes, batch, 0.9) == "vectorized"
    _check(episodes, [torch.randn(n) for n in (5, 0, 9)], 0.9)
    _check(episodes, [torch.randn(6).tolist(), torch.randn(3).tolist()], 0.9)


def zip_one_unread(x, d):
    R = torch.zeros(())
    out = []
    for r, m in zip(reversed(x), reversed(d)):      # `m` never read: `d`'s length is where zip stops
        R = r - 0.5 * R
        out.insert(0, R)
    return torch.stack(out) if out else None


@pytest.mark.parametrize("n_d", [0, 5, 16])
def test_a_zipped_sequence_never_read_still_bounds_the_walk(n_d):
    # (found by the fuzzer: zip(reversed(x), reversed(d)) with `d` empty walked all of `x`)
    x, d = torch.randn(16), torch.randn(n_d)
    f = autovec(zip_one_unread)
    for _ in range(3):
        got, want = f(x, d), zip_one_unread(x, d)
        if want is None:
            assert got is None
        else:
            assert torch.equal(got, want)
    assert explain(zip_one_unread, x, d).path == "python"
