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
