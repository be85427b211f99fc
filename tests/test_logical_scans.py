"""Running logical or / and: `done |= eos[t]`, `f = f | m[t]`, `f = torch.logical_or(f, x[t])`,
`seen = seen or flag` (analysis.loops LOGICAL, runtime._logical_total / _logical_prefix). Read
in the loop they are one cummax / cummin of the steps as bools; read after it, one any / all.
Both are exact, so the tests compare bit for bit, types and in-place effects included. What
is not a logical or keeps the loop: `|` of integers (bitwise), `or` of tensors (it returns an
operand), torch.logical_or of a Python bool (it raises)."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import agrees_with_loop, same_exactly


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")




def _check(fn, *args, path="vectorized", strategy=None):
    return agrees_with_loop(fn, *args, path=path, strategy=strategy)


def eos_mask(tokens, eos):
    finished = torch.zeros(tokens.shape[1], dtype=torch.bool)
    mask = torch.empty_like(tokens, dtype=torch.bool)
    for t in range(tokens.shape[0]):
        mask[t] = ~finished
        finished |= tokens[t] == eos
    return mask, finished


def running_or(m):
    f = torch.zeros(m.shape[1], dtype=torch.bool)
    outs = []
    for t in range(m.shape[0]):
        f = f | m[t]
        outs.append(f)
    return torch.stack(outs)


def running_and(m):
    f = torch.ones(m.shape[1], dtype=torch.bool)
    out = torch.empty_like(m)
    for t in range(m.shape[0]):
        f = m[t] & f
        out[t] = f
    return out


def logical_or_of_floats(x):
    f = torch.zeros(x.shape[1], dtype=torch.bool)
    out = torch.empty(x.shape, dtype=torch.bool)
    for t in range(x.shape[0]):
        f = torch.logical_or(f, x[t])
        out[t] = f
    return out


def all_positive_so_far(x):
    ok = torch.ones(x.shape[1], dtype=torch.bool)
    for t in range(x.shape[0]):
        ok = torch.logical_and(ok, x[t] > 0)
    return ok


def any_hit(x, f):
    for t in range(x.shape[0]):
        f |= x[t] > 1.5
    return f


def seen_flags(x):
    seen = False
    flags = []
    for t in range(x.shape[0]):
        seen = seen or bool(x[t].sum() > 3)
        flags.append(seen)
    return flags, seen


def all_flags(x):
    ok = True
    for t in range(x.shape[0]):
        ok = ok and bool(x[t].max() < 2.5)
    return ok


def _tokens(n=200, b=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 20, (n, b), generator=g)


def _rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g)


def test_eos_mask_reads_the_value_before_each_update():
    tokens = _tokens()
    ex = _check(eos_mask, tokens, 3, strategy="scan")
    assert "logical or" in ex.loops[0].reason and "before each update" in ex.loops[0].reason


@pytest.mark.parametrize("fn", [running_or, running_and], ids=["or", "and"])
def test_running_or_and_of_bool_rows(fn):
    ex = _check(fn, _rand(300, 5, seed=1) > (0.97 if fn is running_or else 0.01), strategy="scan")
    assert "cumm" in ex.loops[0].reason


def test_logical_or_of_floats_counts_nonzero_and_nan_as_true():
    x = (_rand(100, 4, seed=2) > 0.95).float()
    x[40, 1] = float("nan")
    x[60, 2] = -0.0
    _check(logical_or_of_floats, x, strategy="scan")


def test_final_value_only_is_one_all():
    x = _rand(100, 4, seed=3) * 3 - 0.2
    ex = _check(all_positive_so_far, x, strategy="reduction")
    assert "logical and (all)" in ex.loops[0].reason


def test_in_place_or_into_the_callers_tensor():
    x = _rand(100, 4, seed=4) * 1.6
    f = torch.zeros(4, dtype=torch.bool)
    _check(any_hit, x, f, strategy="reduction")
    out = autovec(any_hit)(x, f)
    assert out is f and torch.equal(f, (x > 1.5).any(0))


def test_python_bools_stay_python_bools():
    x = _rand(60, 4, seed=5) * 1.6
    flags, seen = autovec(seen_flags)(x)
    assert all(type(v) is bool for v in flags) and type(seen) is bool
    _check(seen_flags, x, strategy="scan")
    _check(all_flags, x * 1.5, strategy="reduction")
    assert type(autovec(all_flags)(x)) is bool


def test_integers_are_bitwise_and_keep_the_loop():
    m = (_rand(50, 4, seed=6) * 4).long()

    def bits(m):
        f = torch.zeros(4, dtype=torch.long)
        outs = []
        for t in range(m.shape[0]):
            f = f | m[t]
            outs.append(f)
        return torch.stack(outs)
    _check(bits, m, path="python")


def test_or_of_tensors_returns_an_operand_and_keeps_the_loop():
    def operand(x):
        seen = False
        for t in range(x.shape[0]):
            seen = seen or (x[t] > 0.5).any()
        return seen
    _check(operand, _rand(50, 4, seed=7), path="python")


def test_logical_or_of_a_python_bool_raises_as_the_loop_does():
    def raises(x):
        f = torch.zeros((), dtype=torch.bool)
        for t in range(x.shape[0]):
            f = torch.logical_or(f, bool(x[t, 0] > 0.5))
        return f
    with pytest.raises(TypeError, match="logical_or"):
        raises(_rand(10, 2))
    with pytest.raises(TypeError, match="logical_or"):
        autovec(raises)(_rand(10, 2))

    def raises_read(x):
        f = torch.zeros((), dtype=torch.bool)
        out = torch.zeros(x.shape[0], dtype=torch.bool)
        for t in range(x.shape[0]):
            out[t] = f
            f = torch.logical_or(f, bool(x[t, 0] > 0.5))
        return f, out
    with pytest.raises(TypeError, match="logical_or"):
        autovec(raises_read)(_rand(10, 2))


def test_an_in_place_or_handed_on_keeps_the_loop():
    def handed(m):
        f = torch.zeros(m.shape[1], dtype=torch.bool)
        outs = []
        for t in range(m.shape[0]):
            f |= m[t]
            outs.append(f)
        return outs
    m = _rand(30, 3, seed=8) > 0.9
    _check(handed, m, path="python")
    outs = autovec(handed)(m)
    assert all(o is outs[0] for o in outs)


def test_a_start_with_dimensions_the_rows_lack_keeps_the_loop():
    def wide(m):
        f = torch.zeros(2, m.shape[1], dtype=torch.bool)
        out = []
        for t in range(m.shape[0]):
            f = f | m[t]
            out.append(f.sum())
        return torch.stack(out)
    ex = _check(wide, _rand(30, 3, seed=9) > 0.9, path="python")
    assert "dimensions the rows lack" in str(ex)


def test_under_a_condition():
    def cond(x):
        f = torch.zeros(x.shape[1], dtype=torch.bool)
        for t in range(x.shape[0]):
            if x[t, 0] > 0.5:
                f |= x[t] > 0.9
        return f
    _check(cond, _rand(200, 4, seed=10), strategy="reduction")


@pytest.mark.parametrize("n", [0, 1, 2, 37])
def test_short_loops_and_equivalence(n):
    tokens = _tokens(n, 4, seed=11)
    assert_equivalent(eos_mask, tokens, 3)
    same_exactly(eos_mask(tokens, 3), autovec(eos_mask)(tokens, 3))
    same_exactly(seen_flags(_rand(n, 3, seed=12) * 1.5), autovec(seen_flags)(_rand(n, 3, seed=12) * 1.5))


def logprob_until_eos(step_logprobs, tokens, eos):
    T, B, _ = step_logprobs.shape
    total = torch.zeros(B)
    done = torch.zeros(B, dtype=torch.bool)
    for t in range(T):
        lp = step_logprobs[t, torch.arange(B), tokens[t]]
        total += lp * (~done).float()
        done = done | (tokens[t] == eos)
    return total


def lengths_until_eos(tokens, eos):
    n = torch.zeros(tokens.shape[1], dtype=torch.long)
    done = torch.zeros(tokens.shape[1], dtype=torch.bool)
    for t in range(tokens.shape[0]):
        n += (~done).long()
        done |= tokens[t] == eos
    return n, done


def return_while_alive(r, dones):
    G = 0.0
    alive = True
    for t in range(r.shape[0]):
        G = G + r[t].item() * float(alive)
        alive = alive and not bool(dones[t])
    return G


def test_another_sum_reads_the_value_before_each_update():
    tokens = _tokens(60, 8, seed=13)
    g = torch.Generator().manual_seed(14)
    lp = torch.randn(60, 8, 20, generator=g).log_softmax(-1)
    ex = explain(logprob_until_eos, lp, tokens, 3)
    assert ex.path == "vectorized" and "before each update" in ex.loops[0].reason, str(ex)
    torch.testing.assert_close(autovec(logprob_until_eos)(lp, tokens, 3), logprob_until_eos(lp, tokens, 3))
    _check(lengths_until_eos, tokens, 3)
    r, d = torch.randn(40, generator=g), torch.rand(40, generator=g) > 0.9
    assert explain(return_while_alive, r, d).path == "vectorized"
    assert autovec(return_while_alive)(r, d) == pytest.approx(return_while_alive(r, d), rel=1e-9, abs=1e-12)


def test_a_zero_d_start_read_by_a_sum_keeps_the_loop():
    # (the loop's first step sums the 0-d start alone; expanded to a row it would sum four)
    def zero_d(x):
        acc = torch.zeros(())
        f = torch.zeros((), dtype=torch.bool)
        for t in range(x.shape[0]):
            acc = acc + (~f).float().sum() * x[t, 0]
            f = torch.logical_or(f, x[t] > 0.5)
        return acc
    x = _rand(30, 4, seed=15)
    torch.testing.assert_close(autovec(zero_d)(x), zero_d(x))
    assert explain(zero_d, x).path == "python"
