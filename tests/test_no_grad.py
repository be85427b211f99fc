"""`with torch.no_grad():` as the whole body of a `for .. in range(..)` loop: the `with` moves
around the loop (analysis/hoist.py), so the loop is planned as any other and runs, rewritten or
not, under no_grad as each iteration did."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def fill(x, w):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        with torch.no_grad():
            out[i] = (x[i] * w).sum()
    return out


def stacked(x):
    out = []
    for i in range(x.shape[0]):
        with torch.no_grad():
            out.append(x[i].exp() * 2)
    return torch.stack(out)


def total(x):
    s = torch.zeros(())
    for i in range(x.shape[0]):
        with torch.no_grad():
            s += x[i].square().sum()
    return s


def nest(a, b):
    d = torch.empty(a.shape[0], b.shape[0])
    for i in range(a.shape[0]):
        with torch.no_grad():
            for j in range(b.shape[0]):
                with torch.no_grad():
                    d[i, j] = (a[i] - b[j]).norm()
    return d


@pytest.mark.parametrize("fn, args", [
    (fill, (torch.randn(50, 8, requires_grad=True), torch.randn(8, requires_grad=True))),
    (stacked, (torch.randn(40, 3, requires_grad=True),)),
    (total, (torch.randn(30, 5, requires_grad=True),)),
    (nest, (torch.randn(6, 4, requires_grad=True), torch.randn(7, 4))),
])
def test_no_grad_body_is_vectorized_without_gradients(fn, args):
    f = autovec(fn)
    got, want = f(*args), fn(*args)
    assert explain(f, *args).path == "vectorized"
    torch.testing.assert_close(got, want)
    assert not got.requires_grad and not want.requires_grad
    assert torch.is_grad_enabled()       # the mode is restored after the loop
    assert_equivalent(fn, *args)


def test_written_leaf_that_requires_grad_is_allowed_as_in_the_loop():
    """Under no_grad the loop may write into a leaf that requires grad; so must the rewrite."""
    def into_leaf(x, out):
        for i in range(x.shape[0]):
            with torch.no_grad():
                out[i] = x[i] * 3
        return out

    x = torch.randn(20)
    a, b = torch.zeros(20, requires_grad=True), torch.zeros(20, requires_grad=True)
    f = autovec(into_leaf)
    got = f(x, a)
    want = into_leaf(x, b)
    assert got is a and want is b
    torch.testing.assert_close(a.detach(), b.detach())
    assert a.requires_grad and a.is_leaf and a.grad_fn is None


def test_an_error_inside_keeps_the_loops_error_and_restores_the_mode():
    def bad(x, idx):
        out = torch.empty(idx.shape[0])
        for i in range(idx.shape[0]):
            with torch.no_grad():
                out[i] = x[idx[i]]
        return out

    x, idx = torch.randn(5), torch.tensor([0, 9, 1])
    with pytest.raises(IndexError) as want:
        bad(x, idx)
    with pytest.raises(IndexError) as got:
        autovec(bad)(x, idx)
    assert str(got.value) == str(want.value)
    assert torch.is_grad_enabled()


def else_clause(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        with torch.no_grad():
            out[i] = x[i] * 2
    else:
        out = out * x          # runs with grad: moved after the loop, outside the hoisted `with`
    res = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        res[i] = out[i] + 1
    return res


def with_as(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        with torch.no_grad() as g:
            out[i] = x[i] * 2
    return out, g is None


def other_manager(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        with torch.enable_grad():
            out[i] = x[i] * 2
    return out


def shadowed(x):
    torch = __import__("math")      # noqa: F841 (`torch` here is not the torch module)
    out = []
    for i in range(len(x)):
        with torch.no_grad():
            out.append(x[i])
    return out


def elements(x):
    out = []
    for row in x:                   # `row` is made outside no_grad: it keeps its gradient
        with torch.no_grad():
            out.append(row)
    return out


def test_else_clause_moves_after_the_loop_and_keeps_grad():
    """A `for ... else` without break is the loop then the `else` block (hoist.drop_loop_else);
    the `with` then moves around the loop alone, and the `else` block still runs with grad."""
    x = torch.randn(12, requires_grad=True)
    f = autovec(else_clause)
    got, want = f(x), else_clause(x)
    assert all(r.vectorized for r in explain(f, x).loops)
    assert _ran(f) and got.requires_grad and want.requires_grad
    assert_equivalent(else_clause, x, grad=True)


@pytest.mark.parametrize("fn", [with_as, other_manager, elements])
def test_other_forms_keep_the_loop_and_its_answers(fn):
    x = torch.randn(12, requires_grad=True)
    f = autovec(fn)
    got, want = f(x), fn(x)
    assert explain(f, x).loops[0].strategy == "python"
    assert not _ran(f)
    if fn is elements:
        assert [g.requires_grad for g in got] == [w.requires_grad for w in want] == [True] * 12
    assert_equivalent(fn, x)


def test_a_shadowed_torch_is_not_taken_for_no_grad():
    with pytest.raises(AttributeError):
        shadowed([1.0, 2.0])
    with pytest.raises(AttributeError):
        autovec(shadowed)([1.0, 2.0])
