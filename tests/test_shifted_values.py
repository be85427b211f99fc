"""A name read before the statement that assigns it, once an iteration (`prev = c` after `if c !=
prev:`): the value the step before assigned, its value before the loop first (analysis.loops
_shifts, runtime._shifted). The values are the assignment's own, shifted by one step: no
arithmetic, so the results are the loop's bit for bit."""
import pytest
import torch

from autovec import assert_equivalent, autovec
from conftest import agrees_with_loop, same_exactly


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")




def _check(fn, *args, path="vectorized", strategy=None):
    return agrees_with_loop(fn, *args, path=path, strategy=strategy)


def ctc_collapse(best_path, blank):
    out = []
    prev = -1
    for t in range(best_path.shape[0]):
        c = best_path[t].item()
        if c != blank and c != prev:
            out.append(c)
        prev = c
    return out


def differences(x):
    out = torch.empty_like(x)
    last = torch.zeros_like(x[0])
    for t in range(x.shape[0]):
        out[t] = x[t] - last
        last = x[t]
    return out, last


def changes(x):
    n = 0
    prev = x[0].item()
    for t in range(1, x.shape[0]):
        v = x[t].item()
        if v != prev:
            n += 1
        prev = v
    return n


def row_steps(x):
    steps = []
    prev = x[0]
    for row in x:
        steps.append((row - prev).norm())
        prev = row
    return torch.stack(steps), prev


def _path(n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 4, (n,), generator=g)


def test_ctc_collapse_reads_the_previous_label():
    ex = _check(ctc_collapse, _path(), 0)
    assert "the value the step before assigned" in ex.loops[0].reason


def test_differences_and_their_gradients():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(300, 4, generator=g)
    _check(differences, x)
    assert_equivalent(differences, torch.randn(20, 4, generator=g).requires_grad_(), grad=True)


def test_counting_changes_from_a_start_taken_before_the_loop():
    _check(changes, _path(500, seed=2))


def test_walking_rows():
    g = torch.Generator().manual_seed(3)
    _check(row_steps, torch.randn(200, 3, generator=g))


def test_the_last_value_is_the_loops_own_object():
    # (`prev = x[t]`: after the loop the loop's name is the view of x's last row)
    def last_view(x):
        prev = x[0]
        out = torch.empty(x.shape[0])
        for t in range(x.shape[0]):
            out[t] = (x[t] - prev).sum()
            prev = x[t]
        prev.add_(1)
        return out
    g = torch.Generator().manual_seed(4)
    _check(last_view, torch.randn(50, 3, generator=g))


def test_a_name_not_bound_before_the_loop_keeps_the_loop():
    def unbound(x):
        out = []
        for t in range(x.shape[0]):
            if t > 0:
                out.append(x[t] - prev)      # noqa: F821 (bound by the step before)
            prev = x[t]
        return torch.stack(out)
    ex = _check(unbound, torch.randn(10, 2), path="python")
    assert "not bound before the loop" in str(ex)


@pytest.mark.parametrize("kind", ["recurrence", "continue", "conditional", "shape"])
def test_what_keeps_the_loop(kind):
    def recurrence(x):
        prev = torch.zeros(x.shape[1])
        out = []
        for t in range(x.shape[0]):
            d = x[t] - prev
            prev = d * 0.5
            out.append(d)
        return torch.stack(out)

    def skipping(x):
        prev = torch.zeros(x.shape[1])
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            if x[t, 0] > 0:
                continue
            out[t] = x[t] - prev
            prev = x[t]
        return out

    def conditional(x):
        prev = torch.zeros(x.shape[1])
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            out[t] = x[t] - prev
            if x[t, 0] > 0:
                prev = x[t]
        return out

    def other_shape(x):
        prev = torch.ones(1, x.shape[1])
        out = torch.zeros_like(x)
        dims = []
        for t in range(x.shape[0]):
            out[t] = x[t] - prev       # (a (1, 3) start where the rows are (3,): the first step's is (1, 3))
            dims.append((x[t] - prev).dim())
            prev = x[t]
        return out, dims
    fn = {"recurrence": recurrence, "continue": skipping, "conditional": conditional, "shape": other_shape}[kind]
    g = torch.Generator().manual_seed(5)
    ex = _check(fn, torch.randn(30, 3, generator=g), path="python")
    if kind == "shape":
        assert "another dtype, device or shape" in str(ex)
    elif kind == "recurrence":
        assert "loop-carried dependency" in ex.loops[0].reason, str(ex)


def test_a_loop_that_stops_early():
    def stops(x):
        prev = torch.zeros(x.shape[1])
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            out[t] = x[t] - prev
            if x[t, 0] > 1.5:
                break
            prev = x[t] * 2
        return out, prev
    g = torch.Generator().manual_seed(6)
    x = torch.randn(40, 3, generator=g)
    x[25, 0] = 2.0
    same_exactly(autovec(stops)(x.clone()), stops(x.clone()))


def test_read_by_another_running_values_terms_keeps_the_loop():
    # (its terms are computed for every step before any running value is: the shifted values
    # are not there yet)
    def total_of_differences(x):
        s = 0.0
        prev = 0.0
        out = []
        for t in range(x.shape[0]):
            c = x[t].sum().item()
            s = s + (c - prev)
            out.append(s)
            prev = c
        return out
    ex = _check(total_of_differences, torch.randn(10, 3), path="python")
    assert "loop-carried dependency" in ex.loops[0].reason, str(ex)


def test_two_shifted_names_in_one_loop():
    # (the second one is looked for after the first moved the statements after it)
    def two(x, y):
        p1 = torch.zeros(3)
        p2 = torch.zeros(3)
        o1 = torch.empty_like(x)
        o2 = torch.empty_like(y)
        for t in range(x.shape[0]):
            o1[t] = x[t] - p1
            p1 = x[t] * 2
            o2[t] = y[t] * p2 + p1
            p2 = y[t] + 1
        return o1, o2, p1, p2
    g = torch.Generator().manual_seed(10)
    ex = _check(two, torch.randn(20, 3, generator=g), torch.randn(20, 3, generator=g))
    assert "`p1`" in ex.loops[0].reason and "`p2`" in ex.loops[0].reason, str(ex)
