"""A conditional expression inside a statement's value (analysis.loops.inner_conditional):
`d = x[i] - (x[i - 1] if i > 0 else 0)`, `res.append(x[i] * (a if c else b))`,
`tot += x[i] * (w[i] if i % 3 == 0 else 0.5)`. Each iteration computes one side, as an
`if c:` / `else:` around two copies of the statement would, so the loop runs each side on its
own rows (runtime Token._run_sides) where the batch of `where` cannot hold both sides (a tensor
on one, a Python number on the other). Values, dtypes and gradients must be the loop's; a
conditional expression under `and` / `or`, inside another one's side, or in a comprehension is
not one of these and must still give the loop's values."""
import pytest
import torch

from autovec import autovec, explain


def zero_padded_difference(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        d = x[i] - (x[i - 1] if i > 0 else 0)
        out[i] = d * 2
    return out


def next_or_one(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * (x[i + 1] if i + 1 < x.shape[0] else 1)
    return out


def signed_scale_appended(x):
    res = []
    for i in range(len(x)):
        res.append(x[i] * (2.5 if x[i].sum() > 0 else -1))
    return torch.stack(res)


def relu_of_difference(x):
    res = []
    for i in range(len(x)):
        res.append(torch.relu(x[i] - (x[i - 1] if i > 0 else 0)))
    return torch.stack(res)


def weighted_every_third(x, w):
    tot = torch.zeros(x.shape[1], dtype=x.dtype)
    for i in range(x.shape[0]):
        tot += x[i] * (w[i] if i % 3 == 0 else 0.5)
    return tot


def chained_sides(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] - (x[i - 1] if i > 1 else 0 if i == 0 else 5)
    return out


def under_or(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * ((i > 3) or (2 if x[i].sum() > 0 else 3))
    return out


CASES = [
    (zero_padded_difference, lambda n, dt: (torch.randn(n, 3, dtype=dt),)),
    (next_or_one, lambda n, dt: (torch.randn(n, 3, dtype=dt),)),
    (signed_scale_appended, lambda n, dt: (torch.randn(n, 3, dtype=dt),)),
    (relu_of_difference, lambda n, dt: (torch.randn(n, 4, dtype=dt),)),
    (weighted_every_third, lambda n, dt: (torch.randn(n, 3, dtype=dt), torch.randn(n, 3, dtype=dt))),
    (chained_sides, lambda n, dt: (torch.randn(n, 2, dtype=dt),)),
    (under_or, lambda n, dt: (torch.randn(n, 2, dtype=dt),)),
]
BATCHED = {"zero_padded_difference", "next_or_one", "signed_scale_appended", "relu_of_difference",
           "weighted_every_third"}


def _clone(args, grad=False):
    return tuple(a.detach().clone().requires_grad_(grad) for a in args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_values_are_the_loops(fn, make, dtype):
    fast = autovec(fn)
    torch.manual_seed(0)
    for n in (1, 2, 7, 400, 400):
        args = make(n, dtype)
        want = fn(*_clone(args))
        got = fast(*_clone(args))
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want)
    if fn.__name__ in BATCHED:
        assert explain(fast, *make(400, dtype)).path == "vectorized"


@pytest.mark.parametrize("fn, make", [c for c in CASES if c[0].__name__ in BATCHED],
                         ids=[c[0].__name__ for c in CASES if c[0].__name__ in BATCHED])
def test_gradients_are_the_loops(fn, make):
    fast = autovec(fn)
    torch.manual_seed(1)
    for _ in range(3):
        args = make(300, torch.float64)
        a, b = _clone(args, True), _clone(args, True)
        want, got = fn(*a), fast(*b)
        torch.testing.assert_close(got, want)
        want.sum().backward()
        got.sum().backward()
        for x, y in zip(a, b):
            torch.testing.assert_close(y.grad, x.grad)
    assert explain(fast, *_clone(make(300, torch.float64), True)).path == "vectorized"


def test_integer_rows_keep_the_loops_dtypes():
    # x[i] * 2.5 is a float row and x[i] * -1 an int64 row: the loop's stack promotes them
    fast = autovec(signed_scale_appended)
    for _ in range(3):
        x = torch.randint(-5, 5, (300, 3))
        want = signed_scale_appended(x.clone())
        got = fast(x.clone())
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


def test_a_side_that_raises_where_the_loop_takes_it():
    def pick(x, idx):
        out = torch.empty(idx.shape[0], x.shape[1])
        for i in range(idx.shape[0]):
            out[i] = x[i] + (x[idx[i]] if idx[i] >= 0 else 0)
        return out
    fast = autovec(pick)
    x = torch.randn(50, 3)
    idx = torch.randint(-1, 50, (50,))
    torch.testing.assert_close(fast(x, idx), pick(x, idx))
    idx[7] = 99
    with pytest.raises(IndexError):
        pick(x, idx)
    with pytest.raises(IndexError):
        fast(x, idx)


def padded_from(x, k: int):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        d = x[i] - (x[i - 1] if i > k else 0)     # (a parameter's bound: the range is not split at it)
        out[i] = d * 2
    return out


def test_explain_names_each_side_on_its_own_rows():
    fast = autovec(padded_from)
    x = torch.randn(500, 3)
    for _ in range(3):
        assert torch.equal(fast(x, 2), padded_from(x, 2))
    text = str(explain(fast, x, 2))
    assert "each side of the branch on its own rows" in text
