"""Values picked by a branch on per-iteration data where the loop does not write the `if`
itself: a conditional expression as a comprehension's element (`torch.stack([r if r.sum() > 0
else -r for r in x])`, which planned as vmap and fell back on every call, where the same
`out.append(...)` in a for loop ran as `where`), and a helper whose `if`s pick what it returns
(`def f(r): if r.sum() > 0: return r * 2` / `return -r`), inlined into the batched body with
`where`. Checked against the loop: values, dtypes, errors, gradients and the path taken."""
import ast
import sys

import pytest
import torch

from autovec import autovec, explain
from autovec.analysis.helpers import returned_expression
from conftest import outcome, ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _same(got, want):
    if isinstance(want, tuple) and len(want) == 2 and isinstance(want[0], type):
        assert got == want           # the loop's exception, type and message
        return
    assert type(got) is type(want)
    if isinstance(want, list):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, equal_nan=True)
    else:
        assert got == pytest.approx(want)


def _strategies(fn, *args):
    return [r.strategy for r in explain(fn, *args).loops]


# ----------------------------------------------------------------- comprehension elements

def stack_pick(x):
    return torch.stack([r if r.sum() > 0 else -r for r in x])


def cat_pick(x):
    return torch.cat([r if r.sum() > 0 else r * 3 for r in x])


def nested_picks(x):
    return torch.stack([r if r.sum() > 1 else (-r if r.sum() < -1 else r * 0) for r in x])


def indexed_pick(x):
    return torch.stack([x[i] if x[i].sum() > 0 else -x[i] for i in range(len(x))])


def index_as_value(x):
    return torch.stack([x[i] * i if x[i].sum() > 0 else -x[i] for i in range(x.shape[0])])


def zipped_pick(x, y):
    return torch.stack([a if a.sum() > b.sum() else b for a, b in zip(x, y)])


def enumerated_pick(x):
    return torch.stack([r * i if r.sum() > 0 else r for i, r in enumerate(x)])


def and_pick(x):
    return torch.stack([r if r.sum() > 0 and r[0] > 0 else -r for r in x])


def items_pick(v):
    return torch.tensor([e.item() * 2 if e > 0 else -e.item() for e in v])


def mask_pick(x):
    return torch.stack([r > 0 if r.sum() > 0 else r < 0 for r in x])


def guarded_division(x):
    return torch.stack([r / r.sum() if r.sum() != 0 else r for r in x])


def sum_of_picks(x):
    return sum(r if r.sum() > 0 else -r for r in x)


def max_of_picks(v):
    return max(e if e > 0 else -e for e in v)


def count_of_picks(v):
    return sum(1 if e > 0 else 0 for e in v)


@pytest.mark.parametrize("fn, make, strategy", [
    (stack_pick, lambda n: (torch.randn(n, 4),), "where"),
    (stack_pick, lambda n: (torch.randint(-3, 4, (n, 4)),), "where"),
    (cat_pick, lambda n: (torch.randn(n, 3),), "where"),
    (nested_picks, lambda n: (torch.randn(n, 4) * 2,), "where"),
    (indexed_pick, lambda n: (torch.randn(n, 4),), "where"),
    (index_as_value, lambda n: (torch.randn(n, 4),), "where"),
    (zipped_pick, lambda n: (torch.randn(n, 4), torch.randn(n, 4)), "where"),
    (enumerated_pick, lambda n: (torch.randn(n, 4),), "where"),
    (and_pick, lambda n: (torch.randn(n, 4),), "where"),
    (items_pick, lambda n: (torch.randn(n),), "where"),
    (mask_pick, lambda n: (torch.randn(n, 4),), "where"),
    (guarded_division, lambda n: (torch.randn(n, 4),), "where"),
    (sum_of_picks, lambda n: (torch.randn(n, 4),), "reduction"),
    (max_of_picks, lambda n: (torch.randn(n),), "reduction"),
    (count_of_picks, lambda n: (torch.randn(n),), "reduction"),
])
def test_a_conditional_element_is_a_where(fn, make, strategy):
    for n in (40, 1, 7):
        args = make(n)
        fast = autovec(fn)
        for _ in range(3):
            _same(fast(*args), fn(*args))
        assert _strategies(fn, *args) == [strategy]
        assert explain(fn, *args).path == "vectorized", str(explain(fn, *args))
        assert ran_modes(fast) in ({"batched"}, {"vmap"})   # (`.item()` numbers, counts: vmap)


def test_no_elements_keep_the_loops_result_or_error():
    for fn, x in ((stack_pick, torch.randn(0, 4)), (sum_of_picks, torch.randn(0, 4)),
                  (max_of_picks, torch.randn(0)), (count_of_picks, torch.randn(0))):
        _same(outcome(autovec(fn), x), outcome(fn, x))


def filtered_picks(x):
    return torch.stack([r if r.sum() > 0 else -r for r in x if r[0] > 0])


def filtered_sum(v):
    return sum(e if e > 0 else -e for e in v if e < 1)


def filtered_max(v):
    return max(e if e > 0 else -e for e in v if e > 2)


@pytest.mark.parametrize("fn, x, strategy", [
    (filtered_picks, torch.randn(50, 4), "mask"),
    (filtered_picks, -torch.rand(50, 4), "mask"),          # nothing passes: the loop's error
    (filtered_sum, torch.randn(50), "reduction"),
    (filtered_max, torch.randn(50), "reduction"),           # an empty max: ValueError
    (filtered_max, torch.randn(50) * 10, "reduction"),
])
def test_a_filter_clause_keeps_its_length(fn, x, strategy):
    """The filter drops elements: the result has the kept ones only, in order."""
    fast = autovec(fn)
    for _ in range(2):
        _same(outcome(fast, x), outcome(fn, x))
    assert _strategies(fn, x) == [strategy]


def number_or_row(x):
    return torch.stack([r if r.sum() > 0 else 0 for r in x])


def float_or_int(x):
    return torch.stack([r if r.sum() > 0 else r * 0.5 for r in x])


def row_or_number(v):
    return torch.tensor([e if e > 0 else 0.0 for e in v])


def far_side(x, idx):
    return torch.stack([x[j] if j < 3 else x[j + 100] for j in idx])


@pytest.mark.parametrize("fn, args, why", [
    (number_or_row, (torch.randn(20, 4),), "different types"),
    (float_or_int, (torch.randint(-3, 4, (20, 4)),), "different dtypes"),
    (row_or_number, (torch.randn(20),), "different types"),
    (far_side, (torch.randn(8, 4), torch.tensor([0, 1, 2, 1])), "IndexError"),
])
def test_sides_the_batch_cannot_pick_keep_the_loop(fn, args, why):
    """Both sides are computed for every element: values of different kinds, or a side that
    raises where the loop never computes it, leave the call to the loop."""
    fast = autovec(fn)
    for _ in range(2):
        _same(outcome(fast, *args), outcome(fn, *args))
    e = explain(fn, *args)
    assert e.path == "python" and why in str(e), str(e)


@pytest.mark.parametrize("fn", [stack_pick, nested_picks, guarded_division, sum_of_picks])
def test_gradients_keep_the_loop(fn):
    x = torch.randn(30, 4)
    x[3] = 0                         # (guarded_division: the side the loop skips has 0 / 0)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    want, got = fn(a), autovec(fn)(b)
    want.sum().backward()
    got.sum().backward()
    _same(got, want)
    torch.testing.assert_close(b.grad, a.grad, equal_nan=True)
    assert explain(fn, b).path == "python"


# ----------------------------------------------------------------- helpers that branch

THRESH = 0.0
LOG = []


def doubled_or_negated(r):
    if r.sum() > 0:
        return r * 2
    return -r


def three_ways(r):
    """A docstring, then assignments before the first `if`."""
    s = r.sum()
    if s > THRESH:
        return r * 2
    elif s < -1:
        return -r
    return r * 0


def either(r):
    if r.sum() > 0 and r[0] > 0:
        return r * 2
    else:
        return r.exp()


def written_pick(r):
    return r if r.sum() > 0 else -r


def with_default(r, k=0.5):
    if r[0] > k:
        return r
    return r * 0


def calls_a_branching_helper(r):
    if r[0] > 0:
        return doubled_or_negated(r)
    return r * 3


def root_or_negated(v):
    if v > 0:
        return v.sqrt()
    return -v


def by_index(v, i):
    if i % 2 == 0:
        return v * i
    return v


def loop_helper(x):
    out = []
    for r in x:
        out.append(doubled_or_negated(r))
    return torch.stack(out)


def comp_helper(x):
    return torch.stack([doubled_or_negated(r) for r in x])


def comp_three_ways(x):
    return torch.stack([three_ways(r) for r in x])


def comp_either(x):
    return torch.stack([either(r) for r in x])


def comp_written(x):
    return torch.stack([written_pick(r) for r in x])


def comp_default(x):
    return torch.stack([with_default(r) for r in x])


def comp_keyword(x, k):
    return torch.stack([with_default(r, k=k) for r in x])


def comp_nested_helpers(x):
    return torch.stack([calls_a_branching_helper(r) for r in x])


def stored_helper(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = doubled_or_negated(x[i])
    return out


def summed_helper(x):
    return sum(doubled_or_negated(r) for r in x)


def indexed_helper(x):
    return torch.stack([by_index(x[i], i) for i in range(x.shape[0])])


def nest_helper(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = root_or_negated(x[i, j])
    return out


def helper_beside_an_if(x):
    out = []
    for r in x:
        if r[0] > 0:
            out.append(doubled_or_negated(r))
        else:
            out.append(r * 5)
    return torch.stack(out)


@pytest.mark.parametrize("fn, make, strategy", [
    (loop_helper, lambda n: (torch.randn(n, 4),), "where"),
    (comp_helper, lambda n: (torch.randn(n, 4),), "where"),
    (comp_helper, lambda n: (torch.randint(-3, 4, (n, 4)),), "where"),
    (comp_three_ways, lambda n: (torch.randn(n, 4),), "where"),
    (comp_either, lambda n: (torch.randn(n, 4),), "where"),
    (comp_written, lambda n: (torch.randn(n, 4),), "where"),
    (comp_default, lambda n: (torch.randn(n, 4),), "where"),
    (comp_keyword, lambda n: (torch.randn(n, 4), -0.3), "where"),
    (comp_nested_helpers, lambda n: (torch.randn(n, 4),), "where"),
    (stored_helper, lambda n: (torch.randn(n, 4),), "where"),
    (summed_helper, lambda n: (torch.randn(n, 4),), "reduction"),
    (indexed_helper, lambda n: (torch.randn(n, 4),), "where"),
    (nest_helper, lambda n: (torch.randn(n, 5),), "where"),
    (helper_beside_an_if, lambda n: (torch.randn(n, 4),), "mask"),
])
def test_a_helper_that_picks_its_result_is_inlined_as_a_where(fn, make, strategy):
    for n in (40, 1, 7):
        args = make(n)
        fast = autovec(fn)
        for _ in range(3):
            _same(fast(*args), fn(*args))
        assert _strategies(fn, *args)[0] == strategy
        assert explain(fn, *args).path == "vectorized", str(explain(fn, *args))
        assert ran_modes(fast) == {"batched"}


def test_explain_names_the_helper():
    e = explain(comp_helper, torch.randn(10, 4))
    assert "`doubled_or_negated`" in e.loops[0].reason
    assert "torch.where" in str(e)


def on_a_flag(r, flag):
    if flag:
        return r * 2
    return -r


def assigns_in_a_branch(r):
    if r.sum() > 0:
        y = r * 2
        return y
    return -r


def assigns_after_an_if(r):
    if r.sum() > 0:
        return r
    y = -r
    return y


def falls_off(r):
    if r.sum() > 0:
        return r


def logs(r):
    if r.sum() > 0:
        LOG.append(1)
        return r
    return -r


def float_or_same(r):
    if r.sum() > 0:
        return r * 0.5
    return r


def far_row(r):
    if r.sum() > 100:
        return r[100]
    return r


def comp_flag(x, flag):
    return torch.stack([on_a_flag(r, flag) for r in x])


def comp_assigns_in_a_branch(x):
    return torch.stack([assigns_in_a_branch(r) for r in x])


def comp_assigns_after(x):
    return torch.stack([assigns_after_an_if(r) for r in x])


def comp_falls_off(x):
    return torch.stack([falls_off(r) for r in x])


def comp_logs(x):
    return torch.stack([logs(r) for r in x])


def comp_float_or_same(x):
    return torch.stack([float_or_same(r) for r in x])


def comp_far_row(x):
    return torch.stack([far_row(r) for r in x])


def test_a_condition_on_a_fixed_argument_is_no_branch_on_data():
    """`if flag:` on a loop-invariant argument: vmap runs it as before (the `if` picks one
    side for every element)."""
    x = torch.randn(20, 4)
    for flag in (True, False):
        _same(autovec(comp_flag)(x, flag), comp_flag(x, flag))
        assert _strategies(comp_flag, x, flag) == ["vmap"]
        assert explain(comp_flag, x, flag).path == "vectorized"


@pytest.mark.parametrize("fn, x, strategy, why", [
    (comp_assigns_in_a_branch, torch.randn(20, 4), "vmap", "a call of `assigns_in_a_branch`"),
    (comp_assigns_after, torch.randn(20, 4), "vmap", "a call of `assigns_after_an_if`"),
    (comp_falls_off, torch.randn(20, 4).abs(), "vmap", "a call of `falls_off`"),
    (comp_falls_off, torch.randn(20, 4), "vmap", "NoneType"),
    (comp_logs, torch.randn(20, 4), "python", "LOG.append"),
    (comp_float_or_same, torch.randint(-3, 4, (20, 4)), "where", "different dtypes"),
    (comp_far_row, torch.randn(20, 4), "where", "IndexError"),
    (comp_far_row, torch.randn(20, 4) * 100, "where", "IndexError"),
])
def test_helpers_the_batch_cannot_inline_keep_the_loop(fn, x, strategy, why):
    """Assignments inside or after the `if`s, a path without a `return`, side effects: not the
    form (or not pure); values of different kinds or a side that raises: the loop decides."""
    LOG.clear()
    fast = autovec(fn)
    for _ in range(2):
        _same(outcome(fast, x), outcome(fn, x))
    e = explain(fn, x)
    assert _strategies(fn, x) == [strategy]
    assert e.path == "python" and why in str(e), str(e)
    if fn is comp_logs:
        assert len(LOG) == 2 * 2 * int((x.sum(1) > 0).sum())     # the loop's own appends, two runs each


@pytest.mark.parametrize("fn", [comp_helper, comp_three_ways, summed_helper, nest_helper])
def test_helper_gradients_keep_the_loop(fn):
    """where() computes both returned values: the one the loop never computes can send NaN
    into the gradient (root_or_negated: the root of a negative element)."""
    x = torch.randn(12, 5)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    want, got = fn(a), autovec(fn)(b)
    want.sum().backward()
    got.sum().backward()
    _same(got, want)
    torch.testing.assert_close(b.grad, a.grad)
    assert not b.grad.isnan().any()
    assert explain(fn, b).path == "python"
    with torch.no_grad():
        assert explain(fn, b).path == "vectorized"


def test_a_rebound_helper_is_followed(monkeypatch):
    mod = sys.modules[__name__]
    x = torch.randn(30, 4)
    fast = autovec(comp_helper)
    for _ in range(4):                            # (into the steady state)
        _same(fast(x), comp_helper(x))
    assert ran_modes(fast) == {"batched"}

    def tenfold(r):
        if r.sum() > 0:
            return r * 10
        return r

    for other in (tenfold, lambda r: r + 1, root_or_negated):
        monkeypatch.setattr(mod, "doubled_or_negated", other)
        for _ in range(3):
            _same(outcome(fast, x), outcome(comp_helper, x))
    monkeypatch.undo()
    _same(fast(x), comp_helper(x))
    assert ran_modes(fast) == {"batched"}


def test_a_helpers_changed_code_and_globals_are_followed(monkeypatch):
    mod = sys.modules[__name__]
    x = torch.randn(30, 4)
    fast = autovec(comp_three_ways)
    for _ in range(3):
        _same(fast(x), comp_three_ways(x))
    monkeypatch.setattr(mod, "THRESH", 1.5)
    for _ in range(3):
        _same(fast(x), comp_three_ways(x))
    assert ran_modes(fast) == {"batched"}

    def replaced(r):
        s = r.sum()
        if s > 0.2:
            return r * 7
        return r
    monkeypatch.setattr(three_ways, "__code__", replaced.__code__)
    for _ in range(3):
        _same(fast(x), comp_three_ways(x))


# ----------------------------------------------------------------- the helper's form

def _form(text):
    got = returned_expression(ast.parse(text).body[0])
    return None if got is None else ([ast.unparse(a) for a in got[0]], ast.unparse(got[1]), got[2])


@pytest.mark.parametrize("text, want", [
    ("def f(r):\n return r * 2", ([], "r * 2", False)),
    ("def f(r):\n '''doc'''\n s = r.sum()\n return s", (["s = r.sum()"], "s", False)),
    ("def f(r):\n s = r.sum()\n if s > 0:\n  return r\n elif s < -1:\n  return -r\n return r * 0",
     (["s = r.sum()"], "r if s > 0 else -r if s < -1 else r * 0", True)),
    ("def f(r):\n if r > 0:\n  return 1\n else:\n  return 2", ([], "1 if r > 0 else 2", True)),
    ("def f(r):\n if r > 0:\n  if r > 1:\n   return 1\n  return 3\n return 2",
     ([], "(1 if r > 1 else 3) if r > 0 else 2", True)),
    ("def f(r):\n if r > 0:\n  return 1\n else:\n  return 2\n return 3", None),    # unreachable return
    ("def f(r):\n if r > 0:\n  return 1", None),                                    # falls off the end
    ("def f(r):\n if r > 0:\n  y = 1\n  return y\n return 2", None),                # assigns in a branch
    ("def f(r):\n if r > 0:\n  return 1\n y = 2\n return y", None),                 # assigns after an if
    ("def f(r):\n if r > 0:\n  return\n return 2", None),                           # returns no value
    ("def f(r):\n if (s := r) > 0:\n  return s\n return 2", None),                  # binds in the chain
    ("def f(r):\n for k in r:\n  return k\n return 2", None),
])
def test_the_returned_expression_form(text, want):
    assert _form(text) == want
