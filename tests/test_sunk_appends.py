"""Branches that end every way through in one append to the same list (analysis.hoist.sunk_appends):
`if c: out.append(a) elif d: out.append(b) else: out.append(e)` is planned as a conditional value
and one append after the branch. Checked against the loop (values, Python types, gradients, the
list's order), for the path each call took, and for the branches that must stay as written: a
way through without an append, the list read or rebound in the branch, a list that is not local."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def clip_rewards(rewards, dead_zone, scale):
    shaped = []
    for r in rewards:
        v = r.item()
        if v > 1.0:
            shaped.append(1.0)
        elif v < -1.0:
            shaped.append(-1.0)
        elif abs(v) < dead_zone:
            shaped.append(0.0)
        else:
            shaped.append(v * scale)
    return torch.tensor(shaped)


def rows_by_sign(x):
    out = []
    for i in range(x.shape[0]):
        row = x[i]
        if row.sum() > 0:
            s = row.abs() * 2 + 0.1
            out.append(s.sqrt())
        else:
            if row.mean() < -0.5:
                out.append(-row)
            else:
                out.append(row.exp())
    return torch.stack(out)


def two_lists(x):
    big, small = [], []
    for v in x:
        if v.sum() > 0:
            big.append(v.max())
        else:
            big.append(v.min())
        small.append(v.mean())
    return torch.stack(big), torch.stack(small)


def test_each_way_through_ends_in_an_append():
    x = torch.randn(64) * 1.5
    fast = autovec(clip_rewards)
    torch.testing.assert_close(fast(x, 0.1, 0.5), clip_rewards(x, 0.1, 0.5))
    assert explain(clip_rewards, x, 0.1, 0.5).path == "vectorized"
    assert ran_modes(fast)
    assert_equivalent(clip_rewards, x, 0.1, 0.5)


def test_nested_branches_and_gradients():
    x = torch.randn(9, 4)
    x[2] = x[2].abs() + 0.1     # (a row of each way)
    x[5] = -x[5].abs() - 0.6
    fast = autovec(rows_by_sign)
    torch.testing.assert_close(fast(x), rows_by_sign(x))
    assert explain(rows_by_sign, x).path == "vectorized"
    assert_equivalent(rows_by_sign, x.clone().requires_grad_(), grad=True)


def test_a_branch_beside_other_appends():
    x = torch.randn(7, 3)
    got, want = autovec(two_lists)(x), two_lists(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert explain(two_lists, x).path == "vectorized"


def some_without_append(x):
    out = []
    for v in x:
        if v.sum() > 0:
            out.append(v * 2)
        elif v.sum() < -1:
            pass                 # (no append this way: the list is shorter)
        else:
            out.append(v)
    return out


def reads_the_list(x):
    out = [torch.zeros(3)]
    for v in x:
        if v.sum() > out[-1].sum():
            out.append(v)
        else:
            out.append(out[-1] + v)
    return torch.stack(out)


def rebinds_the_list(x):
    out = []
    for v in x:
        if v.sum() > 0:
            out.append(v)
        else:
            out = out + []
            out.append(-v)
    return torch.stack(out)


def skips_some(x):
    out = []
    for v in x:
        if v.sum() > 0:
            if v.max() > 1.5:
                continue         # (no append, and nothing after the branch either)
            out.append(v * 2)
        else:
            out.append(-v)
    return out


GLOBAL_LIST: list = []


def appends_to_a_global(x):
    for v in x:
        if v.sum() > 0:
            GLOBAL_LIST.append(v)
        else:
            GLOBAL_LIST.append(-v)
    return len(GLOBAL_LIST)


@pytest.mark.parametrize("fn", [some_without_append, reads_the_list, rebinds_the_list, skips_some])
def test_branches_that_stay_as_written(fn):
    x = torch.randn(12, 3)
    x[0] = 2.0
    got, want = autovec(fn)(x), fn(x)
    assert type(got) is type(want)
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
    else:
        torch.testing.assert_close(got, want)
    src = autovec(fn)._autovec_state
    src.prepare()
    assert "_item" not in src.rewritten_source


def test_a_list_that_is_not_local_stays_as_written():
    x = torch.randn(5, 3)
    GLOBAL_LIST.clear()
    want = appends_to_a_global(x)
    expected = [v.clone() for v in GLOBAL_LIST]
    GLOBAL_LIST.clear()
    assert autovec(appends_to_a_global)(x) == want
    for g, w in zip(GLOBAL_LIST, expected):
        torch.testing.assert_close(g, w)
    assert explain(appends_to_a_global, x).path == "python"


def test_a_loop_kept_in_python_is_shown_and_run_as_written():
    calls = []

    def noisy(x):
        out = []
        for v in x:
            if v.sum() > 0:
                out.append(v * 2)
            else:
                calls.append(len(calls))        # (reads what it appends to: the loop runs as written)
                out.append(v)
        return torch.stack(out)
    x = torch.randn(6, 2)
    x[0] = -1.0
    ex = explain(noisy, x)
    assert ex.path == "python" and "_item" not in ex.rewritten_source
    calls.clear()
    want, effects = noisy(x), list(calls)
    calls.clear()
    torch.testing.assert_close(autovec(noisy)(x), want)
    assert calls == effects and effects


def raises_in_a_branch(x):
    out = []
    for v in x:
        if v.sum() > 0:
            out.append(v * 2)
        else:
            out.append(v @ torch.ones(5))      # (shapes that do not match: the loop raises here)
    return out


def test_an_error_in_a_branch_is_the_loops_and_points_at_its_line():
    x = torch.ones(4, 3)
    x[2] = -1.0
    with pytest.raises(RuntimeError) as want:
        raises_in_a_branch(x)
    with pytest.raises(RuntimeError) as got:
        autovec(raises_in_a_branch)(x)
    assert str(got.value) == str(want.value)
    line = raises_in_a_branch.__code__.co_firstlineno + 6
    assert got.traceback[-1].lineno + 1 == line or any(
        e.lineno + 1 == line and e.path == want.traceback[-1].path for e in got.traceback)


def kept_with_and_without_grad(x, k):
    res = []
    for i in range(x.shape[0]):
        r = x[i]
        v = r.sum().item()
        if v > k:
            res.append(r * 2)
        elif v >= 1:
            res.append(r * (v * 3))
        else:
            res.append(torch.zeros_like(r))      # (no grad: the loop's element does not require it)
    return res


def test_a_kept_list_keeps_each_elements_requires_grad():
    """(stop 32's fuzzing, lost/sunk_appends seed 9810120, already so before: under grad each side
    ran on its own rows and the rows were put back into one batch, so every element of the kept
    list required grad; the loop's `zeros_like` elements do not)"""
    x = torch.randn(35, 3, requires_grad=True)
    want = kept_with_and_without_grad(x, 0)
    for _ in range(3):
        got = autovec(kept_with_and_without_grad)(x, 0)
        assert [t.requires_grad for t in got] == [t.requires_grad for t in want]
        assert all(torch.equal(a, b) for a, b in zip(got, want))
