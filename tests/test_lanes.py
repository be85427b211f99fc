"""Express lanes (autovec/lanes.py): a loop's guard written out per signature once the loop is
in its steady state. A lane must never accept what the general pass refuses, and must give
the general pass's signature; every call here is also compared with the loop as written."""
import copy

import pytest
import torch

from autovec import autovec
from autovec import lanes as lanes_mod
from corpus import CORPUS


@pytest.fixture
def audited(monkeypatch):
    """Every lane built here is checked on every call it answers: the general pass must give a
    token with the same signature (and must not refuse). An exception in the guard falls back to
    the loop quietly, so differences are collected and asserted at the end of the test. Yields
    the count of answered calls."""
    answered, problems = [0], []
    build = lanes_mod.audited(lanes_mod.build, problems, answered)
    monkeypatch.setattr(lanes_mod, "build", build)
    yield answered
    assert not problems, problems[0]


def _same(want, got):
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, equal_nan=True)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(b, a)
    elif isinstance(want, float):
        assert got == pytest.approx(want, nan_ok=True)
    else:
        assert got == want


def _outcome(fn, args):
    args = copy.deepcopy(args)
    try:
        return ("ok", fn(*args), args)
    except Exception as e:   # noqa: BLE001 (the loop's own error is the expected outcome)
        return ("raised", type(e), str(e))


def _agree(loop, fast, args):
    want, got = _outcome(loop, args), _outcome(fast, args)
    assert want[0] == got[0], (want, got)
    if want[0] == "ok":
        _same(want[1], got[1])
        for a, b in zip(want[2], got[2]):        # in-place effects on the arguments
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(b, a, equal_nan=True)
    else:
        assert want[1] is got[1]


def _variants(args):
    """The corpus inputs, then values that differ from them in what a lane checks."""
    yield args
    for conv in (lambda t: t.double(), lambda t: t[: max(t.shape[0] // 2, 1)], lambda t: t.t().contiguous().t()
                 if t.dim() == 2 else t, lambda t: t.clone().requires_grad_(t.is_floating_point())):
        yield tuple(conv(a) if isinstance(a, torch.Tensor) else a for a in args)
    yield args


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_lanes_agree_with_the_general_pass(name, audited, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fn, inputs, _, _ = CORPUS[name]
    fast = autovec(fn)
    for args in _variants(inputs()):
        for _ in range(4):     # (the steady state and its lane come after a few calls)
            _agree(fn, fast, args)


def test_lanes_answer_steady_calls(audited, monkeypatch):
    """Lanes are built and answer calls for most of the corpus (not a mechanism that never runs)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    with_lane = 0
    for name, (fn, inputs, _, _) in sorted(CORPUS.items()):
        fast = autovec(fn)
        args = inputs()
        for _ in range(5):
            fast(*copy.deepcopy(args))
        with_lane += bool(fast._autovec_state.runtime.lanes)
    assert audited[0] > 0
    assert with_lane >= len(CORPUS) * 3 // 4, with_lane


def shifted(x, y):
    out = []
    for i in range(len(x)):
        out.append(x[i] + y[i + 1])
    return torch.stack(out)


def smooth(x, out):
    for i in range(1, len(x)):
        out[i] = x[i] + x[i - 1] * 0.5
    return out


def scaled(x, s):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * s)
    return torch.stack(out)


def appended(x, out):
    for i in range(len(x)):
        out.append(x[i] * 2)
    return out


def walked(x, y):
    total = 0.0
    for a, b in zip(x, y):
        total += float((a * b).sum())
    return total


def _steady(fn, *args, calls=6):
    fast = autovec(fn)
    for _ in range(calls):
        _agree(fn, fast, args)
    assert fast._autovec_state.runtime.lanes, "no lane was built: this test checks nothing"
    return fast


def test_lane_leaves_an_index_out_of_range_to_the_loop(audited):
    fast = _steady(shifted, torch.randn(300), torch.randn(301))
    _agree(shifted, fast, (torch.randn(300), torch.randn(300)))     # the loop raises IndexError
    _agree(shifted, fast, (torch.randn(300), torch.randn(301)))


def test_lane_leaves_aliased_outputs_to_the_loop(audited):
    x = torch.randn(400, 3)
    fast = _steady(smooth, x, torch.zeros(400, 3))
    same = torch.randn(400, 3)
    a, b = same.clone(), same.clone()
    want = smooth(a, a)           # the output is the input: each row reads the one just written
    got = fast(b, b)
    torch.testing.assert_close(got, want)


def test_lane_refuses_a_leaf_output_that_requires_grad(audited):
    fast = _steady(smooth, torch.randn(400, 3), torch.zeros(400, 3))
    _agree(smooth, fast, (torch.randn(400, 3), torch.zeros(400, 3, requires_grad=True)))   # the loop raises


@pytest.mark.parametrize("s", [0.5, 3, torch.tensor(2.0), torch.tensor(2, dtype=torch.int64), True])
def test_lane_checks_free_values(audited, s):
    fast = _steady(scaled, torch.randn(300, 4), 0.5)
    _agree(scaled, fast, (torch.randn(300, 4), s))
    _agree(scaled, fast, (torch.randint(0, 5, (300, 4)), s))


def test_lane_checks_the_list_it_appends_to(audited):
    fast = _steady(appended, torch.randn(300, 2), [])
    _agree(appended, fast, (torch.randn(300, 2), [torch.zeros(2, dtype=torch.float64)]))
    _agree(appended, fast, (torch.randn(300, 2), ()))      # a tuple has no append: the loop raises


def test_lane_checks_the_tensors_a_loop_walks(audited, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = _steady(walked, torch.randn(300, 3), torch.randn(300, 3))
    _agree(walked, fast, (torch.randn(300, 3).double(), torch.randn(300, 3)))
    _agree(walked, fast, (torch.randn(300, 3), [torch.randn(3) for _ in range(300)]))
    _agree(walked, fast, (torch.randn(300, 3), torch.randn(200, 3)))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int32, torch.complex64])
def test_lane_checks_dtypes(audited, dtype):
    fast = _steady(shifted, torch.randn(300), torch.randn(301))
    x = (torch.randn(300) * 5).to(dtype)
    _agree(shifted, fast, (x, torch.randn(301)))
    _agree(shifted, fast, (torch.randn(300), (torch.randn(301) * 5).to(dtype)))


def times_first(x, table):
    out = []
    for i in range(len(x)):
        out.append(x[i] * table[0])
    return torch.stack(out)


def test_lane_checks_free_containers(audited):
    fast = _steady(times_first, torch.randn(300, 2), [2.0])
    _agree(times_first, fast, (torch.randn(300, 2), [3]))
    _agree(times_first, fast, (torch.randn(300, 2), (2.0,)))
    _agree(times_first, fast, (torch.randn(300, 2), [torch.tensor(2.0, dtype=torch.float64)]))


def doubled_into(x, out):
    for i in range(len(x)):
        out[i] = x[i] * 2
    return out


def test_lane_refuses_a_leaf_output_once_grad_is_on(audited):
    out = torch.zeros(300, 2, requires_grad=True)
    with torch.no_grad():
        fast = _steady(doubled_into, torch.randn(300, 2), out)
    _agree(doubled_into, fast, (torch.randn(300, 2), out))      # the loop raises: a leaf in place


def distances(a, b, n, m):
    d = torch.zeros(n, m)
    for i in range(n):
        for j in range(m):
            d[i, j] = ((a[i] - b[j]) ** 2).sum()
    return d


def test_lane_checks_a_nest_bounds(audited):
    a, b = torch.randn(20, 3), torch.randn(30, 3)
    fast = _steady(distances, a, b, 20, 30)
    _agree(distances, fast, (a, b, 20, 31))        # b has 30 rows: the loop raises IndexError
    _agree(distances, fast, (a, b, 21, 30))
    _agree(distances, fast, (a, b[:25], 20, 25))


def signed(x, lin):
    out = []
    for i in range(x.shape[0]):
        y = lin(x[i])
        if y.sum() > 0:
            out.append(y)
        else:
            out.append(-y)
    return torch.stack(out)


def test_lane_keeps_the_checks_of_branches_under_grad(audited):
    lin = torch.nn.Linear(3, 3)
    lin.requires_grad_(False)
    x = torch.randn(300, 3)
    fast = autovec(signed)
    for _ in range(6):       # (not _steady: a deep copy of the module is another signature each call)
        torch.testing.assert_close(fast(x, lin), signed(x, lin))
    assert fast._autovec_state.runtime.lanes
    lin.requires_grad_(True)       # the same module, its parameters now requiring grad: the loop runs
    got, want = fast(x, lin), signed(x, lin)    # (the audit: the lane must not answer this call)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    assert lin.weight.grad is not None


def test_lane_keeps_the_checks_of_branches_once_grad_is_on(audited):
    """The same signature (x requires grad) first under no_grad, where branches batch, then
    with grad on, where the general pass keeps the loop (NaN gradients of unselected sides)."""
    x = torch.randn(300, 3, requires_grad=True)
    lin = torch.nn.Linear(3, 3)
    fast = autovec(signed)
    with torch.no_grad():
        for _ in range(6):
            torch.testing.assert_close(fast(x, lin), signed(x, lin))
    assert fast._autovec_state.runtime.lanes
    got, want = fast(x, lin), signed(x, lin)
    torch.testing.assert_close(got, want)
    (gx,) = torch.autograd.grad(got.sum(), x)
    (wx,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(gx, wx)


_ACT = torch.tanh
_SEEN = []


def _act(v):
    return _ACT(v)


def _noisy(v):
    _SEEN.append(1)
    return torch.tanh(v)


def activated(x):
    out = []
    for i in range(len(x)):
        out.append(_act(x[i]) * 2)
    return torch.stack(out)


def test_lane_checks_callees_again(audited, monkeypatch):
    """A helper's purity is looked up again on every call: a helper that turns impure (it now
    records each call) makes the loop run as written, each iteration calling it."""
    x = torch.randn(300, 4)
    fast = _steady(activated, x)
    monkeypatch.setattr(__import__(__name__), "_ACT", _noisy)
    _SEEN.clear()
    torch.testing.assert_close(fast(x), activated(x))
    assert len(_SEEN) == 2 * 300


def rows_sum(x, lo, hi):
    s = torch.zeros(x.shape[1], dtype=x.dtype)
    for i in range(lo, hi):
        s = s + x[i] * 2
    return s


@pytest.mark.parametrize("lo, hi", [(0, 290), (3, 300), (5, 295)])
def test_lane_covers_only_the_rows_the_loop_reads(audited, lo, hi):
    """A lane tells the steady-state runner when the loop reads every row of an indexed tensor
    from row 0 (so the tensor itself is the batch): not when it starts later or stops earlier."""
    x = torch.randn(300, 4, dtype=torch.float64)
    fast = _steady(rows_sum, x, 0, 300)
    _agree(rows_sum, fast, (x, lo, hi))


def test_lane_refuses_an_output_whose_rows_overlap(audited):
    """The same signature with an output whose rows share memory (as_strided): the loop's
    stores overwrite each other in order, which a batched store does not."""
    fast = _steady(doubled_into, torch.randn(300, 2), torch.zeros(300, 2))
    base = torch.zeros(302)
    out = base.as_strided((300, 2), (1, 1))        # row i overlaps row i + 1
    _agree(doubled_into, fast, (torch.randn(300, 2), out))


def test_lane_building_raises_nothing_on_the_corpus(monkeypatch):
    """A lane that fails to build is only a slower call (runtime._add_lane swallows the error),
    so a mistake in lanes.build would go unseen: it must build for the corpus without one."""
    from autovec import lanes
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    errors, build = [], lanes.build

    def recording(*a, **k):
        try:
            return build(*a, **k)
        except Exception as e:      # noqa: BLE001 (recorded, then raised as _add_lane expects)
            errors.append(f"{type(e).__name__}: {e}")
            raise
    monkeypatch.setattr(lanes, "build", recording)
    for name, (fn, inputs, _, _) in sorted(CORPUS.items()):
        fast = autovec(fn)
        args = inputs()
        for _ in range(5):
            fast(*copy.deepcopy(args))
    assert not errors, errors[:3]
