"""A loop over what a torch function returns (`for i in torch.arange(n)`) walks a name bound
right before it (hoist.named_iterables): the call runs once, at the same point, and the loop
is planned as a walk over that tensor."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def over_arange(x):
    out = []
    for i in torch.arange(x.shape[0]):
        out.append(x[i] * 2)
    return torch.stack(out), i


def over_randperm(x):
    out = []
    for i in torch.randperm(x.shape[0]):
        out.append(x[i].sum())
    return torch.stack(out)


def over_a_generator(x):
    out = []
    for r in iter(x.unbind(0)):
        out.append(r * 2)
    return out


def names_taken(x):
    i_values = 3
    out = []
    for i in torch.arange(x.shape[0]):
        out.append(x[i] + i_values)
    return torch.stack(out)


def nested_def(x):
    def inner(n):
        return [int(k) for k in torch.arange(n)]
    out = []
    for i in torch.arange(x.shape[0]):
        out.append(x[i] * 2)
    return torch.stack(out), inner(3)


def _same(fn, make, calls=3, tol=0.0):
    fast = autovec(fn)
    for seed in range(calls):
        torch.manual_seed(seed)
        want = fn(*make())
        torch.manual_seed(seed)
        got = fast(*make())
        for p, q in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            if isinstance(p, torch.Tensor):
                assert p.dtype == q.dtype
                torch.testing.assert_close(q, p, rtol=tol, atol=tol)
            else:
                assert p == q
    return fast


def test_a_loop_over_arange_vectorizes():
    fast = _same(over_arange, lambda: (torch.randn(6, 3),))
    assert ran_modes(fast)
    assert "i_values = torch.arange(x.shape[0])" in explain(fast, torch.randn(6, 3)).rewritten_source


def test_a_random_permutation_is_drawn_once_at_the_same_point():
    fast = autovec(over_randperm)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(7, 2)
        want, after_want = over_randperm(x), torch.rand(2)
        torch.manual_seed(seed)
        x = torch.randn(7, 2)
        got, after_got = fast(x), torch.rand(2)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(after_got, after_want, rtol=0, atol=0)   # (the same draws, no more)
    assert ran_modes(fast)


def test_other_calls_are_walked_as_written(caplog):
    fast = autovec(over_a_generator)
    x = torch.randn(4, 3)
    for p, q in zip(over_a_generator(x), fast(x)):
        torch.testing.assert_close(q, p)
    ex = explain(fast, x)
    assert "r_values" not in ex.rewritten_source and "for r in iter(x.unbind(0))" in ex.rewritten_source
    assert "could not rewrite" not in caplog.text


def test_a_name_the_function_uses_is_not_taken():
    _same(names_taken, lambda: (torch.randn(5, 3),))
    assert "i_values_" in explain(autovec(names_taken), torch.randn(5, 3)).rewritten_source


def test_a_function_defined_inside_keeps_its_loops():
    _same(nested_def, lambda: (torch.randn(5, 3),))


# tensor methods on a name, and views of a name whose elements the body updates in place
# (probeF: `for col in x.T: col -= col.mean()` kept the loop; `for col in x.t()` was "not a
# range, a tensor or list of tensors")

def center_columns(x):
    for col in x.T:
        col -= col.mean()
        col /= col.std() + 1e-6
    return x


def center_columns_method(x):
    for col in x.t():
        col.sub_(col.mean()).div_(col.std() + 1e-6)
    return x


def scaled_columns(x):
    out = []
    for j, col in enumerate(x.t()):
        out.append(col * (j + 1))
    return torch.stack(out)


def grouped_max(x):
    out = []
    for row in x.view(-1, 4):
        out.append(row.max())
    return torch.stack(out)


def paired_columns(x, w):
    for col, s in zip(x.T, w):
        col.mul_(s)
    return x


def shifted_rows(x):
    for row in x[1:]:
        row += 1
    return x


def reversed_groups(x):
    out = []
    for g in reversed(x.reshape(-1, 2)):
        out.append(g.sum())
    return torch.stack(out)


# (a column's mean and std in the loop reduce a strided row, the batch whole columns: the
# sums' order differs, as README's known limits say of reductions; the rest is exact)
@pytest.mark.parametrize("fn, make, tol", [
    (center_columns, lambda: (torch.randn(50, 6),), 1e-6),
    (center_columns, lambda: (torch.randn(6, 50).t(),), 1e-6),            # (columns contiguous)
    (center_columns_method, lambda: (torch.randn(50, 6),), 1e-6),
    (scaled_columns, lambda: (torch.randn(9, 5),), 0.0),
    (grouped_max, lambda: (torch.randn(6, 8),), 0.0),
    (paired_columns, lambda: (torch.randn(7, 5), torch.randn(5)), 0.0),
    (paired_columns, lambda: (torch.randn(7, 5), torch.randn(3)), 0.0),   # (zip stops at the shorter)
    (shifted_rows, lambda: (torch.randn(6, 3),), 0.0),
    (reversed_groups, lambda: (torch.randn(4, 6),), 1e-6),
])
def test_method_chains_and_updated_views_are_named(fn, make, tol):
    fast = _same(fn, make, tol=tol)
    assert explain(fn, *make()).path == "vectorized"
    assert ran_modes(fast)


def test_a_named_view_keeps_writing_the_callers_tensor():
    x = torch.randn(20, 4)
    want = center_columns(x.clone())
    got_in = x.clone()
    got = autovec(center_columns)(got_in)
    assert got is got_in
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_a_view_walked_without_updates_is_left_as_written():
    def column_sums(x):
        out = []
        for col in x.T:
            out.append(col.sum())
        return torch.stack(out)
    _same(column_sums, lambda: (torch.randn(6, 4),), tol=1e-6)
    src = explain(column_sums, torch.randn(6, 4)).rewritten_source
    assert "col_values" not in src and "(x.T)" in src


def test_a_method_of_a_non_tensor_runs_as_written():
    class Grid:
        def __init__(self):
            self.calls = 0

        def t(self):
            self.calls += 1
            return [torch.ones(2), torch.zeros(2)]

    def walk(g):
        out = []
        for c in g.t():
            out.append(c * 2)
        return out
    g1, g2 = Grid(), Grid()
    want, got = walk(g1), autovec(walk)(g2)
    assert all(torch.equal(a, b) for a, b in zip(want, got)) and g1.calls == g2.calls == 1


def bumped(x):
    x.add_(1)
    return range(x.shape[0])


def zip_in_order(x, w):
    out = torch.zeros(x.shape[0])
    for i, c in zip(bumped(x), x.clone()):
        out[i] = c.sum() * 3
    y = torch.empty_like(w)          # (a loop that vectorizes: the rewritten function runs)
    for k in range(w.shape[0]):
        y[k] = w[k] * 2
    return out, y


def test_zip_arguments_keep_their_order():
    """(probeJ: `x.clone()` was named before the loop, ahead of `bumped(x)`, which changes x)"""
    x, w = torch.zeros(3, 2), torch.randn(4, 3)
    a, b = x.clone(), x.clone()
    fast = autovec(zip_in_order)
    for _ in range(2):
        (p, q), (r, s) = zip_in_order(a, w), fast(b, w)
        assert torch.equal(p, r) and torch.equal(q, s) and torch.equal(a, b)
    assert ran_modes(fast)


class _Rows:
    def __init__(self, log):
        self.log = log

    def float(self):
        def rows():
            try:
                yield torch.ones(2)
                yield torch.zeros(2)
            finally:
                self.log.append("closed")
        return rows()


def walk_then_note(r, log, w):
    for row in r.float():
        log.append(float(row.sum()))
        break
    log.append("after loop")
    y = torch.empty_like(w)          # (a loop that vectorizes: the rewritten function runs)
    for i in range(w.shape[0]):
        y[i] = w[i] * 2
    return y


def test_a_named_iterable_is_let_go_after_the_loop():
    """(probeJ: the name kept a generator alive past the loop, so the `finally` of one left
    part-way ran after the code that follows the loop)"""
    w = torch.randn(4, 3)
    want, got = [], []
    walk_then_note(_Rows(want), want, w)
    fast = autovec(walk_then_note)
    fast(_Rows(got), got, w)
    assert want == got == [2.0, "closed", "after loop"]
    assert ran_modes(fast)
