"""Each side of an `if` / `else` on its own rows (runtime Token._run_sides), and plain assignments
before a guarded `if` (analysis._guarded): under autograd the condition runs first for every
iteration, without grad, then each side's body (lowering.common._side_bodies) runs with grad on
the rows where the loop computes it, and the rows go back in the loop's order. The branch may
also be a conditional expression a statement takes as its value (`out[i] = a if c else b`), and
have `elif`s (one side each, numbered by the first condition that holds) and no `else` (a side
that computes nothing: an `if` with statements after it, or an `elif` chain). The batch of
`where` computes both sides on every row, and the side a row skips sends 0 * its derivative into
the inputs' gradients: NaN where that derivative is infinite (sqrt at 0, log of a negative) or
where its forward value is NaN. Values, Python types and gradients must be the loop's; a side
that raises on the other side's rows (a label -1) must not matter, with or without grad."""
import pytest
import torch
import torch.nn.functional as F

from autovec import autovec, explain


def sqrt_or_linear(x):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:
            total = total + torch.sqrt(x[i])
        else:
            total = total + x[i]
    return total


def huber_rows(x, y):
    loss = 0.0
    for i in range(x.shape[0]):
        d = x[i] - y[i]
        if d.abs().sum() < 1:
            loss = loss + 0.5 * (d ** 2).sum()
        else:
            loss = loss + (d.abs().sum() - 0.5).sqrt()
    return loss


def log_or_square_rows(x):
    out = []
    for i in range(x.shape[0]):
        s = x[i].sum()
        if s > 0:
            out.append(torch.log(x[i]) * s)
        else:
            out.append(x[i] ** 2)
    return torch.stack(out)


def labels_or_penalty(logits, y):
    total = 0.0
    for i in range(len(y)):
        if y[i] >= 0:
            total = total + F.cross_entropy(logits[i:i + 1], y[i:i + 1])
        else:
            total = total + 0.01 * logits[i].pow(2).sum()
    return total


def minus_side(x):
    total = torch.zeros(())
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            total = total - torch.sqrt(x[i]).sum()
        else:
            total = total - torch.log(-x[i]).sum()
    return total


def prefix_then_kept(x, y):
    total = 0.0
    for i in range(x.shape[0]):
        d = x[i] - y[i]
        r = d.sum()
        if r > 0:
            total = total + torch.sqrt(d).sum() * r
    return total


def prefix_then_continue(x, y):
    total = 0.0
    for i in range(x.shape[0]):
        d = x[i] - y[i]
        if d.sum() <= 0:
            continue
        total = total + torch.log(d).sum()
    return total


def stored_sides(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            out[i] = torch.sqrt(x[i])
        else:
            out[i] = torch.log(-x[i]) * i
    return out


def total_of_conditional(x):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + (torch.sqrt(x[i]) if x[i] > 0 else x[i])
    return total


def stored_conditional(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        d = x[i] * 2
        out[i] = torch.sqrt(d) if d.sum() > 0 else torch.log(-d)
    return out


def appended_conditional(x):
    outs = []
    for i in range(x.shape[0]):
        outs.append(torch.sqrt(x[i]) if x[i].sum() > 0 else x[i] * 2)
    return torch.stack(outs)


def updated_by_conditional(x):
    total = 0.0
    for i in range(x.shape[0]):
        total += torch.sqrt(x[i]).sum() if x[i].sum() > 0 else torch.log(-x[i]).sum()
    return total


def named_conditional_then_outputs(x):
    total = 0.0
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        v = torch.sqrt(x[i]).sum() if x[i].sum() > 0 else x[i].sum()
        total = total + v * 2
        out[i] = v
    return total, out


def stored_conditional_chain(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.sqrt(x[i] - 1) if x[i] > 1 else x[i] if x[i] > -1 else torch.log(-x[i] - 1)
    return out


def appended_elif_chain(x):
    outs = []
    for i in range(x.shape[0]):
        s = x[i].sum()
        if s > 2:
            outs.append(torch.sqrt(x[i]))
        elif s > 0:
            outs.append(x[i] * i)
        elif s > -2:
            outs.append(x[i] ** 2)
        else:
            outs.append(torch.log(-x[i]))
    return torch.stack(outs)


def _chain_rows(n=16):
    """Rows whose sums fall in each arm of appended_elif_chain, of one sign each."""
    x = torch.rand(n, 3) * 0.5 + 0.01
    return x * torch.tensor([6.0, 1.0, -1.0, -6.0]).repeat(n // 4)[:, None]


def elif_without_else(x):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i] > 1:
            total = total + torch.sqrt(x[i] - 1)
        elif x[i] < -1:
            total = total + torch.log(-x[i] - 1)
    return total


def if_then_every_row(x):
    total = 0.0
    seen = torch.zeros(())
    for i in range(x.shape[0]):
        if x[i] > 0:
            total = total + torch.sqrt(x[i])
        seen = seen + x[i] * 2
    return total + seen


def replaced_then_appended(x):
    out = []
    for i in range(x.shape[0]):
        v = x[i] * 2
        if x[i].sum() > 0:
            v = torch.sqrt(x[i])        # (a name, not an output: the side the rows that skip it compute is `pass`)
        out.append(v)
    return torch.stack(out)


def _mixed(n=12, d=3):
    x = torch.randn(n, d)
    x[::3] = -x[::3].abs() - 0.1        # sqrt / log of these give NaN
    x[1::3] = x[1::3].abs() + 0.1
    x[5] = 0.0                           # sqrt's derivative at 0 is infinite
    return x


def _signed(n=12, d=3):
    """Rows of one sign each (the sides' logs and square roots are finite on their own rows)."""
    x = torch.rand(n, d) + 0.1
    x[::2] = -x[::2]
    return x


def _labels(n=12, c=4):
    y = torch.randint(0, c, (n,))
    y[::3] = -1                          # cross_entropy raises on these rows
    return torch.randn(n, c), y


def two_conditionals(x):
    total = 0.0
    count = 0
    for i in range(x.shape[0]):
        total = total + (torch.sqrt(x[i]) if x[i] > 0 else x[i])
        count += 1 if x[i] > 0 else 0
    return total, count


def three_conditionals(x):
    kept = []
    out = torch.zeros(x.shape[0])
    total = torch.zeros(())
    for i in range(x.shape[0]):
        s = x[i].sum()
        kept.append(torch.log(x[i]) if s > 0 else torch.log(-x[i]) * 2)
        out[i] = torch.sqrt(s) if s > 0 else s ** 2
        total = total - (x[i].prod() if s > 0 else torch.sqrt(-x[i]).sum())
    return torch.stack(kept), out, total


CASES = [
    (sqrt_or_linear, lambda: (_mixed(12, 1).flatten(),), (0,)),
    (huber_rows, lambda: (_mixed(), torch.randn(12, 3) * 0.3), (0,)),
    (log_or_square_rows, lambda: (_mixed().abs() * torch.tensor([1.0, -1.0, 1.0]).repeat(4)[:, None],), (0,)),
    (labels_or_penalty, _labels, (0,)),
    (minus_side, lambda: (_signed(),), (0,)),
    (prefix_then_kept, lambda: (_signed(), torch.zeros(12, 3)), (0,)),
    (stored_sides, lambda: (_signed(),), (0,)),
    (total_of_conditional, lambda: (_mixed(12, 1).flatten(),), (0,)),
    (stored_conditional, lambda: (_signed(),), (0,)),
    (appended_conditional, lambda: (_signed(),), (0,)),
    (updated_by_conditional, lambda: (_signed(),), (0,)),
    (named_conditional_then_outputs, lambda: (_signed(),), (0,)),
    (stored_conditional_chain, lambda: (torch.tensor([3.0, 1.0, 0.5, 0.0, -0.5, -1.5, -3.0, 2.0, -2.5] * 2),), (0,)),
    (appended_elif_chain, lambda: (_chain_rows(),), (0,)),
    (elif_without_else, lambda: (torch.tensor([3.0, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0, 2.0, -2.5] * 2),), (0,)),
    (if_then_every_row, lambda: (_mixed(12, 1).flatten(),), (0,)),
    (replaced_then_appended, lambda: (_signed(),), (0,)),
    (prefix_then_continue, lambda: (_signed(), torch.zeros(12, 3)), (0,)),
    (two_conditionals, lambda: (_mixed(12, 1).flatten(),), (0,)),
    (three_conditionals, lambda: (_signed(),), (0,)),
]


def _run(fn, args, grad_at):
    args = tuple(a.clone().requires_grad_() if k in grad_at else a.clone() for k, a in enumerate(args))
    out = fn(*args)
    (sum(o.sum() for o in out if isinstance(o, torch.Tensor)) if isinstance(out, tuple) else out.sum()).backward()
    return out, [args[k].grad for k in grad_at]


def _finite(fn, make, grad_at):
    """The premise: the loop's values and gradients are finite (a batch of both sides' would not
    be: each case's skipped side gives NaN or an infinite derivative on some rows)."""
    want, grads = _run(fn, make(), grad_at)
    values = want if isinstance(want, tuple) else (want,)
    return all(torch.isfinite(v).all() for v in values if isinstance(v, torch.Tensor)) \
        and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("fn, make, grad_at", CASES, ids=[c[0].__name__ for c in CASES])
def test_sides_give_the_loops_values_and_gradients(fn, make, grad_at, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    assert _finite(fn, make, grad_at)
    fast = autovec(fn)
    for _ in range(8):      # (the steady state too)
        args = make()
        want, want_grads = _run(fn, args, grad_at)
        got, got_grads = _run(fast, args, grad_at)
        assert type(got) is type(want)
        torch.testing.assert_close(got, want)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w)
    grads = tuple(a.clone().requires_grad_() if k in grad_at else a for k, a in enumerate(make()))
    assert explain(fast, *grads).path == "vectorized"


@pytest.mark.parametrize("fn, make, grad_at", CASES, ids=[c[0].__name__ for c in CASES])
def test_without_grad_the_values_are_the_loops(fn, make, grad_at, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(fn)
    for _ in range(5):
        args = make()
        want = fn(*(a.clone() for a in args))
        got = fast(*(a.clone() for a in args))
        torch.testing.assert_close(got, want, equal_nan=True)
    assert explain(fast, *make()).path == "vectorized"


def test_a_side_that_raises_on_the_other_rows_runs_on_its_own_rows_without_grad(monkeypatch):
    """Without grad the batch of `where` computes cross_entropy of the -1 labels and raises once;
    later calls of that signature run the condition first and each side on its own rows."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(labels_or_penalty)
    paths = []
    for _ in range(4):
        logits, y = _labels()
        torch.testing.assert_close(fast(logits, y), labels_or_penalty(logits, y))
        paths.append(explain(fast, logits, y).path)
    assert paths[-1] == "vectorized"
    notes = " ".join(explain(fast, *_labels()).notes)
    assert "each side of the branch on its own rows" in notes


def test_explain_says_each_side_ran_on_its_own_rows(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(sqrt_or_linear)
    x = _mixed(12, 1).flatten().requires_grad_()
    fast(x)
    notes = " ".join(explain(fast, x).notes)
    assert "tensors require grad" in notes and "where it holds" in notes


@pytest.mark.parametrize("side", ["holds", "fails"])
def test_every_row_on_one_side(side, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(sqrt_or_linear)
    for _ in range(4):
        x = torch.rand(7) + 0.1 if side == "holds" else -torch.rand(7)
        want, wg = _run(sqrt_or_linear, (x,), (0,))
        got, gg = _run(fast, (x,), (0,))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gg[0], wg[0])
    assert explain(fast, x.clone().requires_grad_()).path == "vectorized"


def counts_and_total(x):
    total = 0.0
    count = 0
    for i in range(x.shape[0]):
        if x[i] > 0:
            total = total + torch.sqrt(x[i])
            count = count + 1
        else:
            total = total + x[i]
            count = count + 0
    return total, count


def test_python_numbers_stay_python_numbers(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(counts_and_total)
    for _ in range(4):
        x = _mixed(12, 1).flatten()
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        (wt, wc), (gt, gc) = counts_and_total(a), fast(b)
        assert type(gc) is type(wc) and gc == wc
        torch.testing.assert_close(gt, wt)
        wt.backward()
        gt.backward()
        torch.testing.assert_close(b.grad, a.grad)


def one_side_only(x):
    total = 0.0
    count = 0
    for i in range(x.shape[0]):
        if x[i] > 0:
            total = total + torch.sqrt(x[i])
        else:
            count = count + 1
    return total, count


def nested_in_side(x):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:
            total = total + (torch.sqrt(x[i]) if x[i] > 1 else x[i])
        else:
            total = total + x[i]
    return total


def two_conditions(x):
    total = 0.0
    count = 0
    for i in range(x.shape[0]):
        total = total + (torch.sqrt(x[i]) if x[i] > 0 else x[i])
        count += 1 if x[i] > 0.5 else 0       # (another condition: two branches)
    return total, count


def condition_read_after_a_change(x):
    total = 0.0
    count = 0
    for i in range(x.shape[0]):
        s = x[i]
        total = total + (torch.sqrt(s) if s > 0 else s)
        s = s - 1                              # (the second condition reads another `s`)
        count += 1 if s > 0 else 0
    return total, count


def best_of_sides(x):
    best = torch.zeros(())
    for i in range(x.shape[0]):
        if x[i] > 0:
            best = torch.sqrt(x[i])
        else:
            best = x[i]
    return best


@pytest.mark.parametrize("fn", [nested_in_side, best_of_sides, two_conditions, condition_read_after_a_change])
def test_other_two_way_loops_keep_the_loop_under_grad(fn, monkeypatch):
    """A branch inside a side, a last value, conditional expressions on two conditions (or on one
    text whose names change between them): no sides of their own (their batch of `where` is
    refused under grad, as before)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(fn)
    for _ in range(3):
        x = _mixed(12, 1).flatten()
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = fn(a), fast(b)
        w = want[0] if isinstance(want, tuple) else want
        g = got[0] if isinstance(got, tuple) else got
        torch.testing.assert_close(g, w)
        assert type(got) is type(want)
        w.backward()
        g.backward()
        torch.testing.assert_close(b.grad, a.grad)
    assert explain(fast, _mixed(12, 1).flatten().requires_grad_()).path == "python"


def side_changes_argument(x, out):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:
            total = total + torch.sqrt(x[i])
        else:
            total = total + x[i]
        out[i] = x[i] * 2
    return total


def test_a_store_after_the_if_runs_on_each_side(monkeypatch):
    """A plain statement after the `if` runs on every row: in each side's body, on its rows."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(side_changes_argument)
    for _ in range(3):
        x = _mixed(12, 1).flatten()
        o1, o2 = torch.zeros(12), torch.zeros(12)
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = side_changes_argument(a, o1), fast(b, o2)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(o2, o1)
        want.backward()
        got.backward()
        torch.testing.assert_close(b.grad, a.grad)
    assert explain(fast, x.clone().requires_grad_(), torch.zeros(12)).path == "vectorized"


def square_roots_both_sides(x):
    total = torch.zeros((), dtype=x.dtype)
    for i in range(x.shape[0]):
        s = x[i].sum()
        if s >= 0:
            total = total - torch.sqrt(s)
        else:
            total = total - torch.sqrt(-s)
    return total


def test_each_row_computes_its_side_once(monkeypatch):
    """sqrt at -0.0 and 0.0 has an infinite derivative on the side the row takes: the loop's
    gradient there is -inf. A side's body that computed its value twice (once per branch of its
    `if c: A` / `else: A`) and picked one by `where` would send 0 * inf, NaN, from the other copy
    (found by the fuzzer, lost/two_way)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(square_roots_both_sides)
    x = torch.tensor([-1.5, -0.0, 0.3, 1.0, 0.0, -2.0], dtype=torch.float64)
    for _ in range(3):
        want, wg = _run(square_roots_both_sides, (x,), (0,))
        got, gg = _run(fast, (x,), (0,))
        torch.testing.assert_close(got, want)
        assert torch.isinf(wg[0]).sum() == 2
        torch.testing.assert_close(gg[0], wg[0])
    assert explain(fast, x.clone().requires_grad_()).path == "vectorized"


def stored_into_argument(x, out):
    for i in range(x.shape[0]):
        d = x[i] * 3
        if d.sum() > 0:
            out[i] = torch.sqrt(d)
        else:
            out[i] = torch.log(-d)
    return out.sum()


def test_stores_into_an_argument(monkeypatch):
    """Stores of every row into the caller's tensor: its rows after the call, the value and the
    gradients through it are the loop's."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(stored_into_argument)
    for _ in range(4):
        x = _signed()
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        o1, o2 = torch.zeros(12, 3), torch.zeros(12, 3)
        want, got = stored_into_argument(a, o1), fast(b, o2)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(o2, o1)
        want.backward()
        got.backward()
        torch.testing.assert_close(b.grad, a.grad)
        assert torch.isfinite(a.grad).all()
    x = _signed().requires_grad_()
    assert explain(fast, x, torch.zeros(12, 3)).path == "vectorized"


def test_each_side_is_checked_once(monkeypatch):
    """A side's one-time check counts the values its layout (the main body's) returns, not its
    check-only masks: once it agrees the side is checked for good. Before, a side stayed unchecked,
    so every call ran the reference again and was never timed (found by a probe: 345 us a call
    against the loop's 49 us at 4 rows, and the cost model never learned)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(sqrt_or_linear)
    for _ in range(3):
        fast(_mixed(12, 1).flatten().requires_grad_())
    rt = fast._autovec_state.runtime
    sides = {k[3] for k in rt.checked if k[3].startswith("_av_side")}
    assert len(sides) == 2


def positive_and_negative(x, y):
    pos = 0.0
    neg = 0.0
    for i in range(x.shape[0]):
        if y[i] > 0:
            pos = pos - torch.log(x[i]).sum()
        else:
            neg = neg - torch.log(1 - x[i]).sum()
    return pos, neg


def _probabilities(n=16):
    """Labels and probabilities where each side's log is finite on its own rows and infinite on
    the other side's (log(0), log(1 - 1))."""
    y = torch.tensor([1.0, -1.0] * (n // 2))
    x = torch.rand(n, 3) * 0.4 + 0.3
    x[y > 0, 0] = 1.0
    x[y <= 0, 0] = 0.0
    return x, y


@pytest.mark.parametrize("fn, make", [
    (positive_and_negative, _probabilities),
    (one_side_only, lambda: (_mixed(12, 1).flatten(),)),
], ids=["positive_and_negative", "one_side_only"])
def test_outputs_one_side_leaves_alone(fn, make, monkeypatch):
    """Each side adds to outputs of its own (`pos` / `neg`, a total / a count): a side's body
    computes the other sides' values too, detached, and its rows mask them out as the batch of
    `where` does; no gradient flows back through them (their logs are infinite there)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(fn)
    for _ in range(4):
        args = make()
        a, b = args[0].clone().requires_grad_(), args[0].clone().requires_grad_()
        want, got = fn(a, *args[1:]), fast(b, *args[1:])
        assert [type(v) for v in got] == [type(v) for v in want]
        for g, w in zip(got, want):
            if isinstance(w, torch.Tensor):
                torch.testing.assert_close(g, w)
            else:
                assert g == w
        sum(v for v in want if isinstance(v, torch.Tensor)).backward()
        sum(v for v in got if isinstance(v, torch.Tensor)).backward()
        assert torch.isfinite(a.grad).all()
        torch.testing.assert_close(b.grad, a.grad)
    args = make()
    assert explain(fast, args[0].clone().requires_grad_(), *args[1:]).path == "vectorized"


def kept_rows_stored(x, m):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if m[i]:
            out[i] = torch.sqrt(x[i])
    return out


def test_a_store_of_the_kept_rows_is_a_side(monkeypatch):
    """One `if` around a store (no `else`): the kept rows' side stores, the others' side stores
    nothing (its values detached, its mask false), with grad; sqrt of the skipped rows' negative
    values and at 0 would give NaN gradients in the batch of `where`."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(kept_rows_stored)
    for _ in range(4):
        x = _signed()
        m = x.sum(1) > 0
        x[0] = 0.0
        m[0] = True
        want, wg = _run(kept_rows_stored, (x, m), (0,))
        got, gg = _run(fast, (x, m), (0,))
        torch.testing.assert_close(got, want)
        assert torch.isinf(wg[0]).any() and not torch.isnan(wg[0]).any()
        torch.testing.assert_close(gg[0], wg[0])
    assert explain(fast, x.clone().requires_grad_(), m).path == "vectorized"


def test_one_call_whose_kept_rows_raise_does_not_keep_the_loop(monkeypatch):
    """Without grad, a call whose label is out of range on the side that reads it raises as the
    loop does; the next calls of that signature, with good labels, still run their sides (found
    by a probe: one such call kept the loop for every later call)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    f = autovec(labels_or_penalty)
    torch.manual_seed(0)
    paths = []
    for c in range(6):
        logits, y = torch.randn(12, 4), torch.randint(-1, 4, (12,))
        y[0] = -1
        if c == 2:
            y[1] = 9
            with pytest.raises(IndexError):
                labels_or_penalty(logits, y)
            with pytest.raises(IndexError):
                f(logits, y)
            continue
        torch.testing.assert_close(f(logits, y), labels_or_penalty(logits, y))
        paths.append(explain(f, logits, y).path)
    assert paths[-1] == "vectorized"
