"""Running totals in the express (lanes.express's "accum" kind): a loop whose only output is an
accumulator (`total = total + v`, `acc += v`, `s = s * v`, under a condition or not, of tensors
or of Python numbers: `hits += 1`, `total += v.item()`) is answered in one function with the
same `accumulate` the general path calls. Its answers must be the general path's and the loop's:
values, dtypes, the sign of a zero, gradients; and a call it was not written for goes to the
general path. Also runtime.accumulate's shortcut for a Python +0 start (0 or 0.0): the total
itself, but for a total of -0.0."""
import math

import pytest
import torch

from autovec import autovec
from test_express import _general, _same_as_general, _steady, counted  # noqa: F401 (a fixture)


def mse_from_float(preds, targets):
    total = 0.0
    for p, t in zip(preds, targets):
        total = total + ((p - t) ** 2).mean()
    return total / len(preds)


def sums_from_zeros(x):
    total = torch.zeros(())
    for k in range(x.shape[0]):
        total = total + x[k].sum()
    return total


def sums_from_int(x):
    total = 0
    for r in x:
        total += r.sum()
    return total


def rows_in_place(x):
    acc = torch.zeros(x.shape[1])
    for r in x:
        acc += r * 2
    return acc


def products(x):
    s = 1.0
    for r in x:
        s = s * r.prod()
    return s


def differences(x):
    s = 0.0
    for r in x:
        s = s - r.sum()
    return s


def from_minus_zero(x):
    s = -0.0
    for r in x:
        s = s + r.sum()
    return s


def sum_of_terms(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        total = total + a[i].sum() - b[i].mean()
    return total


def nest_total(x, y):
    total = torch.zeros(())
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            total = total + (x[i] * y[j]).sum()
    return total


def masked_total(x, y):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            total = total + y[i].sum()
    return total


def hit_count(logits, labels):
    hits = 0
    for k in range(len(labels)):
        if logits[k].argmax() == labels[k]:
            hits += 1
    return hits


def item_total(x):
    total = 0.0
    for r in x:
        total += r.sum().item()
    return total


def _pairs(n=5, d=3):
    return (torch.randn(n, d), torch.randn(n, d))


CASES = [
    (mse_from_float, _pairs),
    (sums_from_zeros, lambda: (torch.randn(5, 3),)),
    (sums_from_int, lambda: (torch.randn(6, 2),)),
    (rows_in_place, lambda: (torch.randn(5, 3),)),
    (products, lambda: (torch.rand(4, 2) + 0.5,)),
    (differences, lambda: (torch.randn(5, 3),)),
    (from_minus_zero, lambda: (torch.randn(5, 3),)),
    (masked_total, _pairs),
    (hit_count, lambda: (torch.randn(6, 3), torch.randint(0, 3, (6,)))),
    (item_total, lambda: (torch.randn(5, 3),)),
]
# (not the express's: each must still give the loop's values in the steady state)
OTHERS = [(sum_of_terms, _pairs), (nest_total, lambda: (torch.randn(4, 3), torch.randn(5, 3)))]


@pytest.mark.parametrize("fn, make", OTHERS, ids=[c[0].__name__ for c in OTHERS])
def test_other_running_totals_keep_their_values(fn, make, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(fn)
    for _ in range(8):
        args = make()
        torch.testing.assert_close(fast(*[a.clone() for a in args]), fn(*args), check_dtype=True)


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_an_accumulator_is_answered_as_the_general_path_answers(fn, make, counted, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast, general = autovec(fn), _general(fn)
    args = make()
    _steady(fast, *[a.clone() for a in args])
    before = counted["answered"]
    _same_as_general(fn, fast, general, args)
    assert counted["answered"] > before, "the express did not answer a steady call"
    variants = [
        tuple(a.double() for a in args),
        tuple(a[:3] for a in args),
        tuple(_grad(a) for a in args),
        tuple(a.to(torch.float16) for a in args),
        tuple(a.to(torch.int64) for a in args),
        tuple(_filled(a, -0.0) for a in args),
        tuple(_filled(a, float("nan")) for a in args),
    ]
    for other in variants:
        for _ in range(4):
            _same_as_general(fn, fast, general, other)
    with torch.no_grad():
        for _ in range(3):
            _same_as_general(fn, fast, general, tuple(_grad(a) for a in args))


def _filled(a, v):
    return torch.full_like(a, v) if a.is_floating_point() else a


def _grad(a):
    return a.clone().requires_grad_() if a.is_floating_point() else a


def _sign(v):
    return math.copysign(1.0, float(v))


@pytest.mark.parametrize("fn", [sums_from_zeros, sums_from_int, differences, from_minus_zero,
                                mse_from_float])
def test_the_sign_of_a_zero_total_is_the_loops(fn, monkeypatch):
    """+0.0 + -0.0 is +0.0: a +0 start over rows of -0.0 ends at +0.0 (the shortcut must not hand
    out the total's -0.0); a -0.0 start keeps it."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(fn)
    n = 2 if fn is mse_from_float else 1
    for _ in range(6):
        args = tuple(torch.full((5, 3), -0.0) for _ in range(n))
        want, got = fn(*[a.clone() for a in args]), fast(*[a.clone() for a in args])
        assert float(got) == float(want) == 0
        assert _sign(got) == _sign(want)


def test_a_zeros_start_that_requires_grad_gets_its_gradient(monkeypatch):
    """`total = torch.zeros((), requires_grad=True)` is part of the graph: the total alone would
    drop its gradient."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")

    def fn_zeros(x):
        total = torch.zeros((), requires_grad=True)
        for k in range(x.shape[0]):
            total = total + x[k].sum()
        return total

    def leaves(t):
        seen, todo, out = set(), [t.grad_fn], []
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            if hasattr(node, "variable"):
                out.append(tuple(node.variable.shape))
            todo.extend(f for f, _ in node.next_functions)
        return sorted(out)

    fast = autovec(fn_zeros)
    for _ in range(6):
        x = torch.randn(4, 3, requires_grad=True)
        got, want = fast(x), fn_zeros(x)
        torch.testing.assert_close(got, want)
        assert leaves(got) == leaves(want) == [(), (4, 3)]


def test_the_shortcut_gives_the_loops_value_and_type():
    """accumulate itself: a Python or zeros start, totals of each sign (torch's CPU sum gives
    +0.0 for rows of -0.0, so a total of -0.0 comes only from other devices' sums: the shortcut
    checks it all the same)."""
    from autovec.runtime import FunctionRuntime as FR
    for start in (0, 0.0, torch.zeros(()), 2.5, -3):
        for rows in (torch.tensor([1.5, -2.0]), torch.tensor([-0.0, -0.0]), torch.tensor([0.0, -0.0]),
                     torch.tensor([float("inf"), 1.0]), torch.tensor([float("nan"), 1.0])):
            zeros = isinstance(start, torch.Tensor)   # (the analysis's flag: a torch.zeros start)
            got = FR.accumulate(start, rows, "+", False, None, False, zeros=zeros)
            want = start
            for r in rows:
                want = want + r
            assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got, want) or (got.isnan() and want.isnan())
            assert _sign(got) == _sign(want) or got.isnan()


def test_a_bool_tensor_total_of_python_bools_keeps_the_loop(monkeypatch):
    """`total = torch.tensor(False)` plus `.item()` bools: the loop's tensor stays bool (True +
    True is True; an in-place `+=` keeps it so too); a sum of the numbers would be an int."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")

    def plus(x, s):
        total = s
        for i in range(x.shape[0]):
            total = total + x[i].item()
        return total

    def inplace(x, s):
        total = s
        for i in range(x.shape[0]):
            total += x[i].item()
        return total

    x = torch.tensor([True, False, True, True])
    for fn in (plus, inplace):
        fast = autovec(fn)
        for _ in range(4):
            want, got = fn(x, torch.tensor(False)), fast(x, torch.tensor(False))
            assert got.dtype == want.dtype == torch.bool and bool(got) == bool(want)
