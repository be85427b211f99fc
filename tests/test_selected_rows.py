"""Kept iterations first under autograd (runtime Token._run_selected): a loop whose one `if`
guards its whole body (analysis._guarded), with running totals and appended values as outputs
(runtime._selectable), runs vectorized with tensors that require grad. The condition comes from a
batch without grad; the body then runs, with grad, on the kept iterations' rows alone. Values and
gradients must be the loop's, also where an iteration the loop skips would give NaN or inf
derivatives, raise, or index out of range. Other loops with branches keep the loop under grad."""
import copy

import pytest
import torch
import torch.nn.functional as F

from autovec import autovec, explain
from autovec import runtime as rt_mod


def sqrt_of_positives(x):
    total = torch.zeros(())
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            total = total + torch.sqrt(x[i]).sum()
    return total


def ignore_label_loss(logits, y):
    total = 0.0
    count = 0
    for t in range(logits.shape[0]):
        if y[t] != -100:
            total = total + F.cross_entropy(logits[t:t + 1], y[t:t + 1])
            count += 1
    return total / max(count, 1)


def picked_log_probs(logits, y):
    total = torch.zeros(())
    for t in range(logits.shape[0]):
        if y[t] >= 0:
            total = total - torch.log_softmax(logits[t], -1)[y[t]]
    return total


def logs_of_kept(x, m):
    out = []
    for i in range(x.shape[0]):
        if m[i]:
            out.append(torch.log(x[i]))
    return torch.stack(out)


def reversed_kept(x):
    out = []
    for i in range(x.shape[0] - 1, -1, -1):
        if x[i, 0] > 0:
            out.append(torch.log(x[i]) * i)
    return torch.stack(out)


def comprehension_kept(x):
    return torch.stack([torch.log(v) for v in x if v.sum() > 0])


def weighted_by_index(x):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:
            total = total + torch.log(x[i]) * i
    return total


def _nan_below_zero(n=9, d=3):
    x = torch.randn(n, d)
    x[::3] = -x[::3].abs() - 0.1        # rows the loop skips: sqrt and log give NaN there
    x[1::3] = x[1::3].abs() + 0.1
    x[2::3] = x[2::3].abs() * torch.where(torch.arange(len(x[2::3])) % 2 == 0, 1.0, -1.0)[:, None] + 0.1
    return x


def _labels(n=10, c=4):
    y = torch.randint(0, c, (n,))
    y[::3] = -100                        # ignored rows: an index out of range if computed
    return torch.randn(n, c), y


CASES = [
    (sqrt_of_positives, lambda: (_nan_below_zero(),), (0,)),
    (ignore_label_loss, _labels, (0,)),
    (picked_log_probs, _labels, (0,)),
    (logs_of_kept, lambda: (_nan_below_zero().abs() * torch.tensor([1, 0, 1]).repeat(3)[:, None] + 0.01,
                            torch.tensor([1, 0, 1] * 3, dtype=torch.bool)), (0,)),
    (reversed_kept, lambda: (_nan_below_zero(),), (0,)),
    (comprehension_kept, lambda: (_nan_below_zero(),), (0,)),
    (weighted_by_index, lambda: (_nan_below_zero(9, 1).flatten(),), (0,)),
]


def _run(fn, args, grad_at):
    args = tuple(a.clone().requires_grad_() if k in grad_at else a.clone() for k, a in enumerate(args))
    out = fn(*args)
    if not out.requires_grad:     # (no iteration kept: nothing reaches the inputs)
        return out, [None for _ in grad_at]
    out.sum().backward()
    return out, [args[k].grad for k in grad_at]


@pytest.mark.parametrize("fn, make, grad_at", CASES, ids=[c[0].__name__ for c in CASES])
def test_kept_rows_give_the_loops_values_and_gradients(fn, make, grad_at, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(fn)
    for _ in range(12):     # (the steady state too: no lane or express for such a call)
        args = make()
        want, want_grads = _run(fn, args, grad_at)
        got, got_grads = _run(fast, args, grad_at)
        torch.testing.assert_close(got, want, equal_nan=True)
        for g, w in zip(got_grads, want_grads):
            assert torch.isfinite(w).all()
            torch.testing.assert_close(g, w)
    grads = tuple(a.clone().requires_grad_() if k in grad_at else a for k, a in enumerate(make()))
    assert explain(fast, *grads).path == "vectorized"
    assert fast._autovec_state.runtime.ran.get(1) is not None


@pytest.mark.parametrize("kept", ["all", "none"])
def test_every_iteration_kept_or_none(kept, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(sqrt_of_positives)
    for _ in range(5):
        x = torch.rand(6, 3) + 0.1 if kept == "all" else -torch.rand(6, 3) - 0.1
        want, wg = _run(sqrt_of_positives, (x,), (0,))
        got, gg = _run(fast, (x,), (0,))
        torch.testing.assert_close(got, want)
        assert got.requires_grad == want.requires_grad
        if wg[0] is not None:
            torch.testing.assert_close(gg[0], wg[0])
        else:
            assert gg[0] is None


def test_a_module_with_parameters_gets_the_loops_gradients(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)

    def fn(x, y):
        total = 0.0
        for i in range(x.shape[0]):
            if y[i] >= 0:
                total = total + torch.log(model(x[i]).exp().sum() + x[i, 0])
        return total

    fast = autovec(fn)
    for _ in range(6):
        x = torch.randn(8, 3)
        x[::2, 0] = -50.0                   # log of a negative sum where the loop never looks
        y = torch.arange(8) % 2 * 2 - 1     # the even rows skipped
        model.zero_grad()
        want = fn(x, y)
        want.backward()
        wg = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        got = fast(x, y)
        got.backward()
        torch.testing.assert_close(got, want)
        for p, w in zip(model.parameters(), wg):
            assert torch.isfinite(w).all()
            torch.testing.assert_close(p.grad, w)


def nested_condition(x):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i] > -1:
            v = torch.sqrt(x[i]) if x[i] > 0 else x[i] * 0
            total = total + v
    return total


def best_kept(x):
    best = torch.tensor(0.0)
    for i in range(x.shape[0]):
        if x[i] > best:
            best = torch.sqrt(x[i])
    return best


@pytest.mark.parametrize("fn", [nested_condition, best_kept])     # (an if / else: test_two_way_sides)
def test_other_branching_loops_keep_the_loop_under_grad(fn, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(fn)
    x = torch.randn(8)
    for _ in range(3):
        want, wg = _run(fn, (x,), (0,))
        got, gg = _run(fast, (x,), (0,))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gg[0], wg[0], equal_nan=True)
    assert explain(fast, x.clone().requires_grad_()).path == "python"


def test_grad_and_no_grad_calls_alternate(monkeypatch):
    """The same loop's calls with and without grad: the ones without keep their express, the
    ones with select their rows, each the loop's values."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(picked_log_probs)
    for k in range(16):
        logits, y = _labels()
        if k % 2:
            want, wg = _run(picked_log_probs, (logits, y), (0,))
            got, gg = _run(fast, (logits, y), (0,))
            torch.testing.assert_close(gg[0], wg[0])
        else:
            want, got = picked_log_probs(logits, y), fast(logits, y)
        torch.testing.assert_close(got, want)


def test_the_kept_rows_keep_the_loops_error(monkeypatch):
    """A kept row that raises in the loop (a label out of range) raises there too."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(picked_log_probs)
    logits, y = _labels()
    y[1] = 7
    with pytest.raises(IndexError):
        picked_log_probs(logits.clone().requires_grad_(), y)
    with pytest.raises(IndexError):
        fast(logits.clone().requires_grad_(), y)


def test_second_derivatives_are_the_loops(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(weighted_by_index)
    for _ in range(4):
        x = _nan_below_zero(9, 1).flatten()
        res = []
        for f in (weighted_by_index, fast):
            a = x.clone().requires_grad_()
            g, = torch.autograd.grad(f(a), a, create_graph=True)
            gg, = torch.autograd.grad(g.sum(), a)
            res.append((g.detach(), gg))
        torch.testing.assert_close(res[1][0], res[0][0])
        torch.testing.assert_close(res[1][1], res[0][1])


def last_kept(x):
    v = torch.zeros(())
    for i in range(x.shape[0]):
        if x[i] >= 0:
            v = x[i] ** 0.5 + 1
    return v


def test_the_last_kept_value_keeps_the_loop_under_grad(monkeypatch):
    """Only the last kept value reaches the result: a batch of every kept row would send 0 times
    the others' derivatives back (sqrt at 0: inf, and 0 * inf is NaN), where the loop's graph
    for them is dropped."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(last_kept)
    x = torch.tensor([0.0, 4.0, -1.0, 0.0, 9.0, -2.0])
    for _ in range(3):
        want, wg = _run(last_kept, (x,), (0,))
        got, gg = _run(fast, (x,), (0,))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gg[0], wg[0])


def nested_ifs(x):
    total = 0.0
    count = 0
    for i in range(x.shape[0]):
        if x[i] > -1:
            if x[i] > 0:
                total = total + torch.sqrt(x[i])
            count += 1
    return total, count


def test_a_nested_if_keeps_the_loop_under_grad(monkeypatch):
    """Outputs under two conditions (`total` under both, `count` under the outer one): the rows
    one keeps are not the other's."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(nested_ifs)
    x = torch.tensor([0.5, -0.5, 2.0, -3.0, 0.25, -0.75])
    for _ in range(3):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        (wt, wc), (gt, gc) = nested_ifs(a), fast(b)
        assert gc == wc
        torch.testing.assert_close(gt, wt)
        wt.backward()
        gt.backward()
        torch.testing.assert_close(b.grad, a.grad)


def skip_with_continue(logits, y):
    total = 0.0
    kept = []
    for t in range(logits.shape[0]):
        if y[t] < 0:
            continue
        lp = torch.log_softmax(logits[t], -1)[y[t]]
        total = total - lp
        kept.append(lp.exp())
    return total, torch.stack(kept)


def test_a_continue_before_the_body_selects_too(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(skip_with_continue)
    for _ in range(6):
        logits, y = _labels()
        a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        (wt, wk), (gt, gk) = skip_with_continue(a, y), fast(b, y)
        torch.testing.assert_close(gt, wt)
        torch.testing.assert_close(gk, wk)
        (wt + wk.sum()).backward()
        (gt + gk.sum()).backward()
        torch.testing.assert_close(b.grad, a.grad)
    logits, y = _labels()
    assert explain(fast, logits.requires_grad_(), y).path == "vectorized"


def test_explain_tells_the_kept_rows(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    logits, y = _labels(12)
    ex = explain(picked_log_probs, logits.requires_grad_(), y)
    assert ex.path == "vectorized"
    kept = int((y >= 0).sum())
    assert any(f"on the {kept} kept ones" in n and "all 12 iterations" in n for n in ex.notes), ex.notes
    with torch.no_grad():
        assert not any("kept ones" in n for n in explain(picked_log_probs, logits, y).notes)


def index_after(x):
    total = 0.0
    i = -1
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            total = total + torch.sqrt(x[i]).sum()
    return total, i


def row_after(x):
    total = 0.0
    for v in x:
        if v.sum() > 0:
            total = total + torch.sqrt(v).sum()
    return total, v


def counter_after(x):
    total = 0.0
    i = 0
    while i < x.shape[0]:
        if x[i].sum() > 0:
            total = total + torch.sqrt(x[i]).sum()
        i += 1
    return total, i


@pytest.mark.parametrize("fn", [index_after, row_after, counter_after])
def test_the_loop_variables_after_the_loop_are_the_last_iterations(fn, monkeypatch):
    """The kept rows are a shorter batch; the loop's index and element after it are still those
    of its last iteration, kept or not (a probe found the last kept one's)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(fn)
    for _ in range(5):
        x = _nan_below_zero(7, 2)
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        (wt, wv), (gt, gv) = fn(a), fast(b)
        torch.testing.assert_close(gt, wt)
        if isinstance(wv, torch.Tensor):
            torch.testing.assert_close(gv, wv)
            (wt + wv.sum()).backward()
            (gt + gv.sum()).backward()
        else:
            assert gv == wv
            wt.backward()
            gt.backward()
        torch.testing.assert_close(b.grad, a.grad)
    assert explain(fast, x.clone().requires_grad_()).path == "vectorized"


def _half_or_nothing(v):
    return v * 0.5 if v.sum() > 1 else v * 0


def _local_helper_total(x):
    def h(v):
        return torch.sqrt(v) if v.sum() > 1 else v * 0
    total = 0.0
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            total = total + h(x[i]).sum()
    return total


def test_a_helper_that_branches_keeps_the_loop_under_grad(monkeypatch):
    """A helper's `if` batched as `where` computes both sides in the kept rows: sqrt of a kept
    row whose sum is at most 1 would send NaN into its gradient (a probe found it)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(_local_helper_total)
    x = torch.tensor([[-1.0, 0.5, 0.2], [0.9, 0.9, 0.9], [0.2, -0.1, 0.1]])
    for _ in range(4):
        want, wg = _run(_local_helper_total, (x,), (0,))
        got, gg = _run(fast, (x,), (0,))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gg[0], wg[0])
    assert explain(fast, x.clone().requires_grad_()).path == "python"
    with torch.no_grad():
        assert explain(fast, x).path == "vectorized"


def _masked_ce_minus_one(logits, y):
    total = 0.0
    count = 0
    for i in range(logits.shape[0]):
        if y[i] >= 0:          # -1 marks a row to skip: cross_entropy raises on it
            total = total + F.cross_entropy(logits[i:i + 1], y[i:i + 1])
            count += 1
    return total / max(count, 1)


@pytest.mark.parametrize("skipped", ["some", "none", "all"])
def test_the_condition_runs_first_and_the_body_never_meets_a_skipped_row(skipped):
    # (the kept rows used to be found by the body on every row without grad first, which raised
    # on a label the condition skips: the loop ran; now the condition alone runs first,
    # lowering.common._select_code, Token.select_run)
    torch.manual_seed(3)
    logits = torch.randn(600, 5, requires_grad=True)
    y = torch.randint(0, 5, (600,))
    if skipped == "some":
        y[torch.rand(600) < 0.3] = -1
    elif skipped == "all":
        y[:] = -1
    f = autovec(_masked_ce_minus_one)
    for _ in range(3):
        got, want = f(logits, y), _masked_ce_minus_one(logits, y)
        assert type(got) is type(want)
        if isinstance(want, float):
            assert got == want
            continue
        torch.testing.assert_close(got, want)
        g1, = torch.autograd.grad(got, logits)
        g2, = torch.autograd.grad(want, logits)
        torch.testing.assert_close(g1, g2)
    ran = f._autovec_state.runtime.ran
    assert bool(ran) == (skipped != "all")


def test_without_grad_a_batch_that_raises_on_a_skipped_row_keeps_its_rows_first_afterwards():
    # the batch over every row raises (a label -1 the condition skips): the call runs the loop,
    # and later calls of that signature run the condition first and the body on the kept rows
    torch.manual_seed(4)
    logits = torch.randn(800, 5)
    f = autovec(_masked_ce_minus_one)
    ran = []
    for _ in range(4):
        y = torch.randint(-1, 5, (800,))
        torch.testing.assert_close(f(logits, y), _masked_ce_minus_one(logits, y))
        rt = f._autovec_state.runtime
        ran.append(bool(rt.ran))
        rt.ran.clear()
    assert ran == [False, True, True, True]
    ex = explain(f, logits, y)
    assert ex.path == "vectorized"
    assert any("failed on an earlier call: the condition ran" in n for n in ex.notes)


def _masked_log_bad_shape(x, y):
    total = 0.0
    for i in range(x.shape[0]):
        if y[i] >= 0:
            total = total + torch.log(x[i] @ torch.ones(3))   # (x rows of 4: raises on every row)
    return total


def test_a_batch_that_fails_on_kept_rows_too_is_not_tried_again(monkeypatch):
    # (the batch over every row fails once; the kept rows first then fail three times: no more;
    # every call tries, whatever the cost model would make of the failures)
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x, y = torch.rand(500, 4), torch.randint(-1, 3, (500,))
    f = autovec(_masked_log_bad_shape)
    for _ in range(1 + rt_mod._SEL_ERRORS):
        with pytest.raises(RuntimeError) as want:
            _masked_log_bad_shape(x, y)
        with pytest.raises(RuntimeError) as got:
            f(x, y)
        assert str(got.value) == str(want.value)
    rt = f._autovec_state.runtime
    assert rt.sel_failed


def _continue_nll_minus_one(logits, y):
    total = torch.zeros(())
    for i in range(logits.shape[0]):
        if y[i] < 0:
            continue
        total = total + F.nll_loss(F.log_softmax(logits[i:i + 1], -1), y[i:i + 1])
    return total


@pytest.mark.parametrize("grad", [True, False])
def test_a_continue_guard_runs_its_condition_first_too(grad):
    # (`if c: continue` and then the body is planned as `if c: pass` / `else:` the body: its
    # condition is `not c`)
    torch.manual_seed(5)
    logits = torch.randn(700, 5, requires_grad=grad)
    f = autovec(_continue_nll_minus_one)
    ran = []
    for _ in range(3):
        y = torch.randint(-1, 5, (700,))
        got, want = f(logits, y), _continue_nll_minus_one(logits, y)
        torch.testing.assert_close(got, want)
        if grad:
            g1, = torch.autograd.grad(got, logits)
            g2, = torch.autograd.grad(want, logits)
            torch.testing.assert_close(g1, g2)
        rt = f._autovec_state.runtime
        ran.append(bool(rt.ran))
        rt.ran.clear()
    assert ran == ([True] * 3 if grad else [False, True, True])

