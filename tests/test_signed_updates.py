"""One running value added to on one side of a branch and subtracted from on another
(`if c: total = total + a` / `else: total = total - b`, `s += 1` / `s -= 1`): one running value
whose second side's term is negated (analysis.loops._walk), since `t - b` is `t + -b` exactly.
Every result is compared with the loop: values, dtypes, Python types, signs of zeros,
gradients, errors."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def signed(x):
    total = torch.zeros(())
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            total = total + x[i].abs().sqrt().sum()
        else:
            total = total - torch.log1p(x[i].abs()).sum()
    return total


def minus_first(x):
    total = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        if x[i, 0] > 0:
            total = total - x[i] * 2.0
        else:
            total = torch.tanh(x[i]) + total
    return total


def score(x):
    s = 0
    for i in range(x.shape[0]):
        if x[i] > 0:
            s += 1
        else:
            s -= 1
    return s


def three_way(x):
    s = 0.25
    for i in range(x.shape[0]):
        if x[i] > 0.5:
            s = s + x[i].item()
        elif x[i] < -0.5:
            s = s - torch.tanh(x[i]).item()
        elif x[i] < 0:
            s = s + x[i].item()
        else:
            s = s - torch.exp(x[i]).item()
    return s


def wrapping(x):
    total = torch.zeros((), dtype=torch.uint8)
    for i in range(x.shape[0]):
        if x[i] > 100:
            total = total + x[i]
        else:
            total = total - x[i]
    return total


def flags(x, m):
    total = torch.zeros(x.shape[1], dtype=torch.bool)
    for i in range(x.shape[0]):
        if m[i]:
            total = total + x[i]
        else:
            total = total - x[i]
    return total


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


def narrow_terms(a, b, start):
    total = start
    for i in range(a.shape[0]):
        if a[i] > 0:
            total = total + a[i]
        else:
            total = total - b[i]
    return total


@pytest.mark.parametrize("b, start", [
    (torch.tensor([1, 1], dtype=torch.uint8), 1.5),
    (torch.tensor([1, 1], dtype=torch.uint8), torch.zeros(2, dtype=torch.int32)),
    (torch.tensor([-128, 1], dtype=torch.int8), torch.zeros(2, dtype=torch.int64)),
    (torch.tensor([-128, 1], dtype=torch.int8), 0.5),
])
def test_integer_terms_keep_the_loop(b, start):
    """An integer tensor's negation may wrap in its own dtype before the sum promotes it (-1 as
    uint8 is 255, -(-128) as int8 is -128), where the loop subtracts in the wider dtype (found
    by a probe): only a Python number's or a floating value's term is negated."""
    f = autovec(narrow_terms)
    a = torch.tensor([-1.0, -1.0])
    for _ in range(3):
        got, want = f(a, b, start), narrow_terms(a, b, start)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert explain(f, a, b, start).path == "python"
    assert explain(autovec(wrapping), torch.randint(0, 256, (8,), dtype=torch.uint8)).path == "python"


@pytest.mark.parametrize("fn, make", [
    (signed, lambda: (torch.randn(40, 6),)),
    (minus_first, lambda: (torch.randn(30, 5),)),
    (score, lambda: (torch.randn(50),)),
    (three_way, lambda: (torch.randn(60, dtype=torch.float64),)),
])
def test_a_value_added_on_one_side_and_subtracted_on_another_vectorizes(fn, make):
    f = autovec(fn)
    for _ in range(3):
        args = make()
        _same(f(*args), fn(*args))
    assert explain(f, *args).path == "vectorized"
    assert [lp.strategy for lp in explain(f, *args).loops] != ["python"]


def test_its_gradients_are_the_loops_with_infinite_derivatives_on_the_skipped_side():
    f = autovec(signed)
    x = torch.randn(40, 6)
    x[3] = 0.0                 # (sqrt at 0 on the side this row does not take: its sum is 0)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = f(a), signed(b)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(a.grad, b.grad, equal_nan=True)
    assert not torch.isnan(a.grad).any()


def test_a_minus_zero_total_keeps_its_sign():
    def zeros(x):
        total = torch.tensor(-0.0)
        for i in range(x.shape[0]):
            if x[i] > 0:
                total = total + x[i]
            else:
                total = total - x[i]
        return total
    f = autovec(zeros)
    for x in (torch.zeros(5), torch.tensor([0.0, -0.0, 0.0]), torch.tensor([1.0, -0.0])):
        got, want = f(x.clone()), zeros(x.clone())
        assert torch.equal(got, want) and torch.signbit(got) == torch.signbit(want)


def test_bools_raise_as_in_the_loop():
    f = autovec(flags)
    x, m = torch.rand(6, 3) > 0.5, torch.tensor([True, False, True, True, False, True])
    with pytest.raises(RuntimeError) as want:
        flags(x, m)
    with pytest.raises(RuntimeError) as got:
        f(x, m)
    assert type(got.value) is type(want.value)


def from_start(a, b, start):
    total = start
    for i in range(a.shape[0]):
        if a[i].sum() > 0:
            total = total + a[i]
        else:
            total = total - b[i]
    return total


class Money(float):
    log = []

    def __sub__(self, other):
        Money.log.append("sub")
        return float(self) - other * 2

    def __add__(self, other):
        Money.log.append("add")
        return float(self) + other


@pytest.mark.parametrize("start", [True, False, 0, 1.5, Money(3.0)])
@pytest.mark.parametrize("first", [1.0, -1.0])
def test_a_python_bool_start_raises_where_the_loop_does(start, first):
    """From a Python bool, the loop raises where a subtraction of a tensor comes first (`True -
    t`); the negated term would add (found by a probe): such a start keeps the loop, as does a
    number of another type, which may subtract in its own way (a float subclass's __sub__)."""
    f = autovec(from_start)
    for _ in range(3):
        a, b = torch.randn(6, 1), torch.randn(6, 1)
        a[0] = first
        Money.log.clear()
        try:
            want = from_start(a, b, start)
        except RuntimeError as e:
            with pytest.raises(RuntimeError) as got:
                f(a, b, start)
            assert str(got.value) == str(e)
        else:
            log = list(Money.log)
            Money.log.clear()
            _same(f(a, b, start), want)
            assert Money.log == log


def norm(v):          # (a helper of the user's with a torch name: integer results)
    return v.amax()


class _Stats:
    def mean(self, v):
        return v.amax()


STATS = _Stats()


def sum_to_uint8(x, m):
    total = torch.zeros((), dtype=torch.int64)
    for i in range(x.shape[0]):
        if m[i]:
            total = total + (x[i] * 1.0).sum(dtype=torch.uint8)
        else:
            total = total - (x[i] * 1.0).sum(dtype=torch.uint8)
    return total


def viewed_bits(x, m):
    total = torch.zeros((), dtype=torch.int64)
    for i in range(x.shape[0]):
        if m[i]:
            total = total + x[i, 0].half().view(torch.int16)
        else:
            total = total - x[i, 0].half().view(torch.int16)
    return total


def user_norm(x, m):
    total = torch.zeros((), dtype=torch.int64)
    for i in range(x.shape[0]):
        if m[i]:
            total = total + norm(x[i])
        else:
            total = total - STATS.mean(x[i])
    return total


def huge_constant(x, m):
    s = torch.tensor(0)
    for i in range(x.shape[0]):
        if m[i]:
            s += 1
        else:
            s -= 9223372036854775807
    return s


def _stats():
    return STATS


def returned_object_method(x, m):
    total = torch.zeros((), dtype=torch.int64)
    for i in range(x.shape[0]):
        if m[i]:
            total = total + x[i].sum()
        else:
            total = total - _stats().mean(x[i])
    return total


@pytest.mark.parametrize("fn", [sum_to_uint8, viewed_bits, user_norm, huge_constant, returned_object_method])
def test_terms_whose_negation_is_not_exact_keep_the_loop(fn):
    """A dtype keyword or argument (`.sum(dtype=torch.uint8)`, `.view(torch.int16)`), a user's
    function or object method with a torch name (`norm(v)`, `h.mean(v)`), a method of what a
    user's function returns (`stats().mean(v)`, any object's), or an int constant near int64's
    limit: the term may be an integer the negation wraps (found by probes and the review)."""
    f = autovec(fn)
    x = torch.tensor([[1, 2, 1], [3, 1, 1], [1, 5, 1], [2, 2, 2]], dtype=torch.uint8)
    if fn is viewed_bits:
        x = torch.tensor([[-0.0, 1.0], [2.0, 1.0], [-0.0, 0.5], [1.0, 1.0]])
    m = torch.tensor([False, True, False, False])
    for _ in range(3):
        got, want = f(x, m), fn(x, m)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert explain(f, x, m).path == "python"


def log_softmax_terms(logits, y):
    total = torch.zeros(())
    for i in range(logits.shape[0]):
        if y[i] < 0:
            total = total + logits[i].pow(2).mean()
        else:
            total = total - torch.log_softmax(logits[i], dim=-1)[y[i]]     # (the negated side)
    return total


def test_a_dim_keyword_keeps_a_floating_term():
    """`torch.log_softmax(v, dim=-1)[k]` is floating whatever `dim` says: negated, vectorized,
    with the loop's values and gradients."""
    f = autovec(log_softmax_terms)
    for _ in range(3):
        logits, y = torch.randn(12, 4), torch.randint(-1, 4, (12,))
        a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        got, want = f(a, y), log_softmax_terms(b, y)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(a.grad, b.grad)
    assert explain(f, torch.randn(12, 4), torch.randint(-1, 4, (12,))).path == "vectorized"
