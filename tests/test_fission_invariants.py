"""Fission hoists loop-invariant computations out of a sequential loop, computing them once."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain


def rnn(x, W, U, b):
    h = torch.zeros(x.shape[1], U.shape[0])
    outs = []
    for t in range(x.shape[0]):
        Ut = U.t()
        bias = b * 2.0
        h = torch.tanh(x[t] @ W + h @ Ut + bias)
        outs.append(h)
    return torch.stack(outs), Ut, bias


def inline_invariant(x, W, U):
    h = torch.zeros(x.shape[1], U.shape[0])
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] @ W + h @ U.t().contiguous())
    return h


def read_before_assigned(x, W, U):
    h = torch.zeros(x.shape[1], U.shape[0])
    Ut = U
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] @ W + h @ Ut)
        Ut = U.t()
    return h


def assigned_twice(x, W, U):
    h = torch.zeros(x.shape[1], U.shape[0])
    for t in range(x.shape[0]):
        Ut = U.t()
        h = torch.tanh(x[t] @ W + h @ Ut)
        Ut = Ut * 0.5
        h = h + (h @ Ut) * 0.1
    return h


def _args(requires_grad=False):
    g = torch.Generator().manual_seed(0)
    x, W = torch.randn(12, 3, 4, generator=g), torch.randn(4, 5, generator=g)
    U, b = torch.randn(5, 5, generator=g) * 0.4, torch.randn(5, generator=g)
    if requires_grad:
        U.requires_grad_()
        b.requires_grad_()
    return x, W, U, b


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def test_invariants_are_computed_once_before_the_loop():
    ex = explain(autovec(rnn), *_args())
    assert ex.path == "vectorized" and ex.loops[0].strategy == "fission"
    assert "2 loop-invariant one(s)" in ex.loops[0].reason
    src = ex.rewritten_source
    assert src.index("Ut = U.t()") < src.index("for _av_j")
    assert_equivalent(rnn, *_args())
    assert_equivalent(rnn, *_args(requires_grad=True), grad=True)


def test_an_invariant_inside_an_expression():
    x, W, U, _ = _args()
    ex = explain(autovec(inline_invariant), x, W, U)
    assert ex.path == "vectorized" and "loop-invariant" in ex.loops[0].reason
    assert_equivalent(inline_invariant, x, W, U.requires_grad_(), grad=True)


@pytest.mark.parametrize("fn", [read_before_assigned, assigned_twice])
def test_names_that_change_between_iterations_are_not_hoisted(fn):
    x, W, U, _ = _args()
    ex = explain(autovec(fn), x, W, U)
    assert "2 loop-invariant" not in ex.loops[0].reason
    assert_equivalent(fn, x, W, U)
    got, want = autovec(fn)(x, W, U), fn(x, W, U)
    torch.testing.assert_close(got, want)


def printing_rnn(x, W, U):
    h = torch.zeros(U.shape[0])
    for t in range(x.shape[0]):
        e = torch.tanh(x[t] @ W)
        h = torch.tanh(e + h @ U)
        print("step", t)
    return h


def test_the_cost_models_timing_of_a_fission_call_includes_the_loop_that_stays(monkeypatch, capsys):
    """The vectorized path is weighed against the whole Python loop, so its time must include
    the recurrence that still runs in Python (it ended before that loop: small fission calls
    settled on a path slower than the loop)."""
    from autovec import cost
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    real = cost.Decision.vectorized_ran

    def noted(self, *a):
        print("timed")
        return real(self, *a)
    monkeypatch.setattr(cost.Decision, "vectorized_ran", noted)
    fast = autovec(printing_rnn)
    x, W, U = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 5)
    for _ in range(12):
        print("call")
        fast(x, W, U)
    lines = capsys.readouterr().out.split("\n")
    assert "timed" in lines
    for k, line in enumerate(lines):
        if line == "timed":      # after the call's last step, not before its first
            assert lines[k - 1] == "step 2" and lines[k + 1] in ("call", ""), lines[max(0, k - 4):k + 2]


def store_into_elements(ts, vs):
    for t, v in zip(ts, vs):
        t[0] = v.sum()
    return ts


def test_a_store_into_the_elements_the_loop_walks_keeps_the_loop():
    """Found by the containers probe: fission of `for t, v in zip(ts, vs): t[0] = v.sum()` named
    the loop variable `t` in its per-call check before the loop binds it (UnboundLocalError
    inside the rewrite, then the loop): such a store is refused by the analysis, with a reason."""
    from autovec import explain
    ts, vs = [torch.randn(3) for _ in range(3)], [torch.randn(3) for _ in range(3)]
    want = store_into_elements([t.clone() for t in ts], vs)
    got = autovec(store_into_elements)([t.clone() for t in ts], vs)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    e = explain(store_into_elements)
    assert e.loops[0].strategy == "python" and "elements the loop walks" in e.loops[0].reason


def reset_recurrence(x, gamma, done):
    h = torch.zeros(())
    for x_t, done_t in zip(x, done):
        if done_t.sum() > 0:
            h = 0
        h = h * gamma + x_t.sin()
    return h


def test_hoisted_values_with_inf_or_nan_under_grad_keep_the_loop():
    """Fission computes `x_t.sin()` for every row ahead of the recurrence. A row the recurrence
    then drops (reset to 0 after it) gets a gradient of 0 in the batch's backward, and 0 times
    the derivative at inf (cos(inf), NaN) is NaN, where the loop's row sends nothing (found by
    the fuzzer, seed 5100137 of family rec): under grad, such values keep the loop."""
    from autovec import autovec
    x = torch.randn(15, 5, dtype=torch.float64)
    x[0, 2] = float("inf")
    done = torch.zeros(15, 5)
    done[3] = 1.0                      # (a reset after the inf row: the loop drops it)
    gamma = torch.rand(5, dtype=torch.float64)
    f = autovec(reset_recurrence)
    for _ in range(2):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        f(a, gamma, done).sum().backward()
        reset_recurrence(b, gamma, done).sum().backward()
        torch.testing.assert_close(a.grad, b.grad)
        assert not torch.isnan(a.grad).any()
    with torch.no_grad():
        torch.testing.assert_close(f(x, gamma, done), reset_recurrence(x, gamma, done), equal_nan=True)
