"""Chained assignments (`adv[t] = last = delta + c * last`: analysis.loops._split_chains) and
running values whose factor or terms are set on both sides of a branch (the values a scan adds,
if-converted: lowering.common), as RL code computes advantages (CleanRL's GAE). Checked against
the loop: values (a scan's sums within rounding, as for every recurrence), gradients, and the
order in which a chain assigns its targets."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def gae(rewards, values, dones, next_value, next_done, gamma: float, lam: float):
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    returns = advantages + values
    return advantages, returns


def discounted(rewards, dones, gamma: float):
    out = torch.empty_like(rewards)
    running = torch.zeros(rewards.shape[1:])
    for t in range(rewards.shape[0] - 1, -1, -1):
        keep = 0.0 if dones[t] else 1.0
        running = out[t] = rewards[t] + gamma * keep * running    # (the name last, the store first)
    return out, running


def _gae_args(T, N, dtype=torch.float32):
    g = torch.Generator().manual_seed(T * 100 + N)
    return (torch.randn(T, N, generator=g, dtype=dtype), torch.randn(T, N, generator=g, dtype=dtype),
            (torch.rand(T, N, generator=g) < 0.1).to(dtype), torch.randn(N, generator=g, dtype=dtype),
            torch.zeros(N, dtype=dtype), 0.99, 0.95)


@pytest.mark.parametrize("T, N, dtype", [(64, 4, torch.float32), (33, 1, torch.float64), (5, 3, torch.float32)])
def test_gae_as_cleanrl_writes_it(T, N, dtype):
    args = _gae_args(T, N, dtype)
    fast = autovec(gae)
    for _ in range(3):
        got, want = fast(*args), gae(*args)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape
            torch.testing.assert_close(a, b)
    e = explain(gae, *args)
    # (one scan for each piece of the range where `t == T - 1` has one answer: frontend._IndexSplits)
    # (and the loop as written, where the bound `T` of `t == T - 1` is not an int)
    pieces = [l for l in e.loops if "not an int" not in l.source]
    assert e.path == "vectorized" and {l.strategy for l in pieces} == {"scan"} and len(pieces) < len(e.loops), e.notes


def test_gae_gradients():
    args = _gae_args(12, 2, torch.float64)
    assert_equivalent(gae, args[0].requires_grad_(), args[1].requires_grad_(), *args[2:], grad=True)


def test_a_chain_whose_name_is_its_last_target():
    r, d = torch.randn(20, 3), torch.rand(20) < 0.2
    fast = autovec(discounted)
    for _ in range(3):
        for a, b in zip(fast(r, d, 0.9), discounted(r, d, 0.9)):
            torch.testing.assert_close(a, b)
    e = explain(discounted, r, d, 0.9)
    assert [l.strategy for l in e.loops] == ["scan"], e.loops


def both_rows(x):
    a = torch.zeros_like(x)
    b = torch.zeros_like(x)
    for i in range(x.shape[0]):
        a[i] = b[i] = x[i] * 2          # (no name target: one of its own takes the value)
    return a, b


def names_and_row(x):
    out = torch.zeros_like(x)
    total = 0.0
    for i in range(x.shape[0]):
        u = v = x[i] + 1
        out[i] = u * v
        total = total + v.sum()
    return out, total


def target_reads_a_name(x, idx):
    out = torch.zeros(8)
    k = 0
    for i in range(x.shape[0]):
        out[k] = k = idx[i]               # (out[k] with the old k: Python assigns from the left)
    return out, k


@pytest.mark.parametrize("fn, args", [(both_rows, (torch.randn(6, 2),)), (names_and_row, (torch.randn(5, 3),)),
                                      (target_reads_a_name, (torch.randn(5), torch.tensor([3, 1, 4, 1, 5])))])
def test_chained_assignments_keep_the_loops_values(fn, args):
    want = fn(*args)
    for _ in range(3):
        got = autovec(fn)(*args)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)      # (a total: a sum within rounding)
            assert type(a) is type(b)
    if fn is not target_reads_a_name:
        assert explain(fn, *args).path == "vectorized"


def index_bool_ops(x):
    out = []
    for t in range(x.shape[0]):
        first = t == 0
        last = t == x.shape[0] - 1
        out.append(x[t] * ((first | last) + 1))   # (Python's `bool | bool` is a bool)
    return torch.stack(out)


def test_bitwise_operators_of_python_bools_are_bools():
    x = torch.randn(6, 2)
    fast = autovec(index_bool_ops)
    for _ in range(3):
        assert torch.equal(fast(x), index_bool_ops(x))
    e = explain(index_bool_ops, x)
    assert e.path == "vectorized" and "whole-batch" in " ".join(e.notes), e.notes
