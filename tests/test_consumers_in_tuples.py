"""Lists consumed together: `X, Y = [], []` before the loop, and `return torch.stack(X),
torch.stack(Y)` after it (found lost by the real-world probe: the tuple of empty lists was no
list made before the loop, and a consumer after another torch call in its statement was not
hoisted)."""
import pytest
import torch
import torch.nn.functional as F

from autovec import assert_equivalent, autovec
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def windows_and_targets(x, w: int):
    X, Y = [], []
    for t in range(x.shape[0] - w):
        X.append(x[t:t + w])
        Y.append(x[t + w, 0])
    return torch.stack(X), torch.stack(Y)


def two_comprehensions(x):
    return torch.stack([r * 2 for r in x]), torch.stack([r.sum() for r in x])


def kept_second_list(x):
    a, b = [], []
    for r in x:
        a.append(r * 2)
        b.append(r)            # kept as a list of views: its own rule (the loop, or views)
    return torch.stack(a), b


@pytest.mark.parametrize("fn, make", [
    (windows_and_targets, lambda: (torch.randn(30, 3), 5)),
    (two_comprehensions, lambda: (torch.randn(7, 4),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_lists_consumed_in_one_statement_are_batched(fn, make):
    f = autovec(fn)
    for _ in range(3):
        args = make()
        want, got = fn(*args), f(*args)
        for w, g in zip(want, got):
            assert torch.equal(g, w)
    assert _ran(f)
    assert_equivalent(fn, *make(), trials=2)


def test_a_kept_list_beside_a_consumed_one_is_as_the_loop():
    x = torch.randn(5, 3)
    got, want = autovec(kept_second_list)(x), kept_second_list(x)
    assert torch.equal(got[0], want[0])
    assert [g.data_ptr() for g in got[1]] == [w.data_ptr() for w in want[1]]    # views of x's rows, as the loop's


def test_an_out_argument_before_the_consumer_keeps_the_list():
    """`out=` writes into `buf` before the consumer runs: the rows appended, views of `buf`, are
    stacked with the new values in the loop (hoisted to the loop, the stack would have the old)."""
    def fn(x, buf):
        rows = []
        for i in range(x.shape[0]):
            rows.append(buf[i] + 0)
            rows.append(buf[i])
        return torch.stack([r * 2 for r in x], out=buf), torch.stack(rows)

    x = torch.randn(5, 3)
    a = torch.randn(5, 3)
    b = a.clone()
    want, got = fn(x, a), autovec(fn)(x, b)
    assert torch.equal(got[1], want[1]) and torch.equal(a, b)


# a consumer computed at the loop must see the rows as the loop's consumer does (found by the
# third probe; all but the first two were there before this stop, for one list too)

def inplace_keyword(x):
    X = []
    for i in range(x.shape[0]):
        X.append(x[i])
    z = F.relu(x, inplace=True)
    return torch.stack(X)


def inplace_positional(x):
    X = []
    for i in range(x.shape[0]):
        X.append(x[i])
    z = F.leaky_relu(x, 0.1, True)
    return torch.stack(X)


def out_keyword(x):
    X = []
    for i in range(x.shape[0]):
        X.append(x[i])
    z = torch.mul(x, 2, out=x)
    return torch.stack(X)


def method_passed_along(x):
    X = []
    for i in range(x.shape[0]):
        X.append(x[i])
    z = list(map(torch.Tensor.zero_, x))
    return torch.stack(X)


def inside_with(x):
    X = []
    for i in range(x.shape[0]):
        X.append(x[i])
    with torch.no_grad():
        x.mul_(2)
        y = torch.stack(X)
    return y


def inside_if(x):
    X = []
    for i in range(x.shape[0]):
        X.append(x[i])
    if x.shape[0] > 1:
        x.mul_(2)
        y = torch.stack(X)
    return y


def under_no_grad(x):
    X = []
    for i in range(x.shape[0]):
        X.append(x[i] * 2)
    with torch.no_grad():
        y = torch.stack(X)
    return y


@pytest.mark.parametrize("fn", [inplace_keyword, inplace_positional, out_keyword, method_passed_along, inside_with,
                                inside_if, under_no_grad], ids=lambda f: f.__name__)
def test_a_consumer_after_a_write_into_the_rows_is_the_loops(fn):
    grad = fn is under_no_grad
    f = autovec(fn)
    for _ in range(3):
        x0 = torch.randn(5, 3)
        a, b = x0.clone().requires_grad_(grad), x0.clone().requires_grad_(grad)
        if grad:
            want, got = fn(a), f(b)
        else:
            with torch.no_grad():
                want, got = fn(a), f(b)
        assert torch.equal(got, want) and got.requires_grad == want.requires_grad
        assert torch.equal(a, b)
