"""A row stored and then read back or stored again in the same iteration (`out[i] = v` then
`y[i] = out[i] + 1`, `out[i] += b`, `out[i] = torch.relu(out[i])`, `x[i] -= x[i].mean()` then
`x[i] /= x[i].std()`): analysis._forwarded gives each stored value a name the later reads
read, and the runtime checks on every call that the stored value already has the output's
dtype and the row's shape (runtime.exact), which is what the read gives in the loop."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran, raises_as_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def then_update(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
        out[i] += 1
    return out


def then_activate(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
        out[i] = torch.relu(out[i])
    return out


def read_into_another(x):
    out = torch.empty_like(x)
    y = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
        y[i] = out[i] + 1
    return out, y


def project_then_normalize(x, w):
    out = torch.zeros(x.shape[0], w.shape[1])
    for i in range(x.shape[0]):
        out[i] = x[i] @ w
        out[i] = out[i] / out[i].norm()
    return out


def standardize_in_place(x):
    for i in range(x.shape[0]):
        x[i] -= x[i].mean()
        x[i] /= x[i].std()
    return x


def twice_in_place(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * 2
        x[i] = x[i] + 1
    return x


def scalar_rows(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i].sum()
        out[i] *= out[i]
    return out


def columns(x):
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = x[:, j] - x[:, j].mean()
        out[:, j] = out[:, j] / (out[:, j].std() + 1e-5)
    return out


def over_rows(x):
    out = torch.empty_like(x)
    for k, r in enumerate(x):
        out[k] = r.exp()
        out[k] = out[k] / out[k].sum()
    return out


def bias_then_add(x, b):
    out = torch.zeros(x.shape)
    for i in range(x.shape[0]):
        out[i] = b
        out[i] += x[i]
    return out


def int_rows(x):
    out = torch.zeros(x.shape, dtype=torch.int64)
    y = torch.zeros(x.shape)
    for i in range(x.shape[0]):
        out[i] = x[i] * 3
        y[i] = out[i] * 0.5
    return out, y


def half_rows(x):
    out = torch.zeros(x.shape, dtype=torch.float16)
    y = torch.zeros(x.shape)
    for i in range(x.shape[0]):
        out[i] = x[i] * 3.3
        y[i] = out[i] * 1.1
    return out, y


CASES = [
    (then_update, lambda: (torch.randn(12, 5),), "broadcast"),
    (then_activate, lambda: (torch.randn(12, 5),), "broadcast"),
    (read_into_another, lambda: (torch.randn(12, 5),), "broadcast"),
    (project_then_normalize, lambda: (torch.randn(12, 5), torch.randn(5, 3)), "batched"),
    (standardize_in_place, lambda: (torch.randn(12, 5),), "batched"),
    (twice_in_place, lambda: (torch.randn(12, 5),), "broadcast"),
    (scalar_rows, lambda: (torch.randn(12, 5),), "batched"),
    (columns, lambda: (torch.randn(7, 6),), "batched"),
    (over_rows, lambda: (torch.randn(9, 4),), "batched"),
    (bias_then_add, lambda: (torch.randn(8, 5), torch.randn(5)), "batched"),
    (int_rows, lambda: (torch.randint(-5, 5, (8, 3)),), "broadcast"),
    (then_update, lambda: (torch.randn(12, 5, dtype=torch.float64),), "broadcast"),
]


@pytest.mark.parametrize("fn, make, mode", CASES, ids=[f"{c[0].__name__}-{k}" for k, c in enumerate(CASES)])
def test_rows_read_back_are_batched_and_equal_to_the_loop(fn, make, mode):
    args = make()
    f = autovec(fn)
    for _ in range(3):
        a, b = [t.clone() for t in args], [t.clone() for t in args]
        want, got = fn(*a), f(*b)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            assert g.dtype == w.dtype and g.shape == w.shape
            torch.testing.assert_close(g, w)
        for p, q in zip(a, b):
            torch.testing.assert_close(q, p)         # the arguments changed as the loop changes them
    assert _ran(f) == {mode}
    assert explain(f, *make()).path == "vectorized"
    assert_equivalent(fn, *make(), trials=3)


def test_values_read_back_under_gradients_keep_the_loop():
    """The loop reads the row, a view of the output: an operation that keeps it for backward
    finds it changed by the next store into the output (`out[i] / out[i].norm()` then the
    store), and the loop's backward raises; the batch's would not (found by the probe of this
    feature). Under gradients, a value read back keeps the loop: its backward raises as the
    loop's does, and where the loop's does not, the gradients are the loop's."""
    def normalized(x, w):
        out = torch.zeros(x.shape[0], w.shape[1])
        for i in range(x.shape[0]):
            out[i] = x[i] @ w
            out[i] = out[i] / out[i].norm()
        return out

    def shifted(x, w):
        out = torch.zeros(x.shape[0], w.shape[1])
        for i in range(x.shape[0]):
            out[i] = x[i] @ w
            out[i] = torch.tanh(out[i]) * 2
            out[i] += x[i].sum()
        return out

    x, w = torch.randn(10, 4, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    for fn in (normalized, shifted):
        f = autovec(fn)
        for _ in range(3):
            try:
                want = torch.autograd.grad(fn(x, w).sum(), (x, w))
            except RuntimeError as e:
                with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                    torch.autograd.grad(f(x, w).sum(), (x, w))
                assert "modified by an inplace operation" in str(e)
            else:
                got = torch.autograd.grad(f(x, w).sum(), (x, w))
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b)
            assert _ran(f) == set()
        with torch.no_grad():       # without gradients: batched
            torch.testing.assert_close(f(x, w), fn(x, w))
            assert _ran(f) == {"batched"}


@pytest.mark.parametrize("fn, args, why", [
    (int_rows, (torch.randn(8, 3),), "float values stored into int rows: the read gives them truncated"),
    (half_rows, (torch.randn(8, 3),), "float32 values stored into float16 rows: the read gives them rounded"),
    (bias_then_add, (torch.randn(8, 5), torch.randn(1)), "a value the store broadcasts to the row"),
])
def test_values_the_store_converts_keep_the_loop(fn, args, why):
    f = autovec(fn)
    want, got = fn(*[t.clone() for t in args]), f(*[t.clone() for t in args])
    for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        assert g.dtype == w.dtype
        assert torch.equal(g, w), why
    assert _ran(f) == set(), why


def test_a_steady_signature_still_checks_the_values_dtype_and_shape():
    """The check runs on every call: a value of another shape with the same argument types
    (the same signature) sends that call to the loop."""
    f = autovec(bias_then_add)
    x = torch.randn(8, 5)
    for _ in range(3):
        b = torch.randn(5)
        torch.testing.assert_close(f(x, b), bias_then_add(x, b))
    assert _ran(f) == {"batched"}
    b = torch.randn(1)         # one element: the store broadcasts it to the row
    torch.testing.assert_close(f(x, b), bias_then_add(x, b))
    assert _ran(f) == set()


def test_an_update_the_loop_refuses_raises_as_the_loop():
    def halve(x):
        out = torch.zeros(x.shape, dtype=torch.int64)
        for i in range(x.shape[0]):
            out[i] = x[i]
            out[i] /= 2             # an int row divided in place: the loop raises
        return out

    raises_as_loop(RuntimeError, halve, torch.randint(-5, 5, (6, 3)))


def test_a_row_bound_to_a_name_keeps_the_loop():
    """`r = out[i]` is the row's memory in the loop (a view the next store changes)."""
    def keep(x):
        out = torch.empty_like(x)
        kept = []
        for i in range(x.shape[0]):
            out[i] = x[i] * 2
            r = out[i]
            out[i] = r + 1
            kept.append(r)
        return out, kept

    x = torch.randn(6, 3)
    f = autovec(keep)
    (o1, k1), (o2, k2) = keep(x), f(x)
    assert torch.equal(o1, o2) and all(torch.equal(a, b) for a, b in zip(k1, k2))
    assert all(torch.equal(r, o2[i]) for i, r in enumerate(k2))     # each kept row is the final row
    assert _ran(f) == set()


def test_a_conditional_store_after_the_first_is_as_the_loop():
    def fn(x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * 2
            if x[i].sum() > 0:
                out[i] = out[i] + 1
        return out

    assert_equivalent(fn, torch.randn(20, 4), trials=3)


def test_shape_errors_point_at_the_users_line():
    def fn(x, b):
        out = torch.zeros(x.shape)
        for i in range(x.shape[0]):
            out[i] = b
            out[i] += x[i]
        return out

    info = raises_as_loop(RuntimeError, fn, torch.randn(4, 5), torch.randn(3))
    assert any(entry.name == "fn" for entry in info.traceback)


def test_explain_shows_the_forwarded_value():
    text = str(explain(read_into_another, torch.randn(6, 3)))
    assert "_av_fwd_out0" in text


# A view of a row read before the row's store, seen after it: in the loop it shows what the
# store wrote, while a batch reads every row before any store (analysis._view_after_store).
# These were wrong results before this rule (the batch gave the rows from before the store).

def view_then_read(x):
    y = torch.empty_like(x)
    for i in range(x.shape[0]):
        a = x[i]
        x[i] = x[i] * 2
        y[i] = a + 1
    return x, y


def view_stored_by_it(x):
    y = torch.empty_like(x)
    for i in range(x.shape[0]):
        a = x[i]
        x[i] = a * 2
        y[i] = a + 1
    return x, y


def appended_then_stored(x):
    ys = []
    for i in range(x.shape[0]):
        ys.append(x[i])
        x[i] = x[i] * 2
    return torch.stack(ys)


def detached_then_summed(x):
    tot = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        a = x[i].detach()
        x[i] = x[i] * 2
        tot = tot + a
    return x, tot


def element_view_in_a_nest(x):
    y = torch.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            a = x[i, j]
            x[i, j] = x[i, j] * 2
            y[i, j] = a + 1
    return x, y


@pytest.mark.parametrize("fn", [view_then_read, view_stored_by_it, appended_then_stored, detached_then_summed,
                                element_view_in_a_nest])
def test_a_view_of_a_row_seen_after_its_store_keeps_the_loop(fn):
    x = torch.randn(6, 3)
    f = autovec(fn)
    for _ in range(3):
        a, b = x.clone(), x.clone()
        want, got = fn(a), f(b)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            assert torch.equal(g, w)
        assert torch.equal(a, b)
    assert _ran(f) == set()


def test_a_view_used_only_by_the_store_is_still_batched():
    def fn(x):
        for i in range(x.shape[0]):
            a = x[i]
            x[i] = a * 2 + a.sum()
        return x

    x = torch.randn(6, 3)
    f = autovec(fn)
    torch.testing.assert_close(f(x.clone()), fn(x.clone()))
    assert _ran(f) == {"batched"}


# in-place methods on the row (analysis._InPlaceUpdates) read back or applied one after another

def method_standardize(x):
    for i in range(x.shape[0]):
        x[i].sub_(x[i].mean())
        x[i].div_(x[i].std())
    return x


def method_after_store(x, w):
    out = torch.empty(x.shape[0], w.shape[1])
    for i in range(x.shape[0]):
        out[i] = x[i] @ w
        out[i].clamp_(min=0)
        out[i].div_(out[i].sum() + 1)
    return out


def two_methods(x):
    for i in range(x.shape[0]):
        x[i].mul_(2)
        x[i].clamp_(-1, 1)
    return x


@pytest.mark.parametrize("fn, make", [
    (method_standardize, lambda: (torch.randn(7, 4),)),
    (method_after_store, lambda: (torch.randn(7, 4), torch.randn(4, 3))),
    (two_methods, lambda: (torch.randn(7, 4),)),
], ids=["standardize", "after_store", "two_methods"])
def test_in_place_methods_one_after_another_are_batched(fn, make):
    args = make()
    f = autovec(fn)
    for _ in range(3):
        a, b = [t.clone() for t in args], [t.clone() for t in args]
        torch.testing.assert_close(f(*b), fn(*a))
        for p, q in zip(a, b):
            torch.testing.assert_close(q, p)
    assert _ran(f) in ({"batched"}, {"broadcast"})
    assert_equivalent(fn, *make(), trials=2)


def test_a_method_the_loop_refuses_after_a_store_raises_as_the_loop():
    def fn(x):
        out = torch.zeros(x.shape, dtype=torch.int64)
        for i in range(x.shape[0]):
            out[i] = x[i]
            out[i].clamp_(min=0.5)      # an int row clamped by a float: the loop raises
        return out

    raises_as_loop(RuntimeError, fn, torch.randint(-3, 3, (6, 4)))


def center(x):
    for i in range(x.shape[0]):
        x[i] -= x[i].mean()
    return x


def unit_rows(x):
    for i in range(x.shape[0]):
        x[i] /= x[i].norm() + 1e-6
    return x


@pytest.mark.parametrize("fn, dtype", [(center, torch.float32), (center, torch.float64), (unit_rows, torch.float32)])
def test_an_update_whose_value_reads_its_row_is_batched(fn, dtype):
    """`x[i] -= x[i].mean()`: the update reads the row before it writes it, so it is the row's
    value minus the mean, stored (found lost by the real-world probe)."""
    f = autovec(fn)
    for _ in range(3):
        x = torch.randn(7, 4, dtype=dtype)
        a, b = x.clone(), x.clone()
        torch.testing.assert_close(f(b), fn(a))
        torch.testing.assert_close(b, a)
    assert _ran(f) == {"batched"}


def test_an_update_whose_value_reads_its_row_raises_as_the_loop():
    raises_as_loop(RuntimeError, center, torch.randint(-5, 5, (6, 3)))      # mean() of an int row


def test_an_output_that_requires_grad_keeps_the_loop_for_values_without():
    """An output with autograd history (`out = w * 1`) written from values that need no grad:
    the loop's read of the row carries the output's history (what it computes requires grad,
    and its backward may raise), the value read by name would not (found by the second probe:
    the check looked at the value alone)."""
    def read_back(w, x):
        out = w * 1
        y = torch.zeros_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * 2
            y[i] = out[i] + 1
        return y

    def method_after_store(w, x):
        out = w * 1
        for i in range(x.shape[0]):
            out[i] = x[i]
            out[i].exp_()
        return out

    w, x = torch.randn(5, 3, requires_grad=True), torch.randn(5, 3)
    for fn in (read_back, method_after_store):
        f = autovec(fn)
        for _ in range(3):
            want, got = fn(w, x), f(w, x)
            assert got.requires_grad == want.requires_grad
            torch.testing.assert_close(got, want)
            try:
                g_want = torch.autograd.grad(want.sum(), w)
            except RuntimeError:
                with pytest.raises(RuntimeError):
                    torch.autograd.grad(got.sum(), w)
            else:
                torch.testing.assert_close(torch.autograd.grad(got.sum(), w), g_want)
            assert _ran(f) == set()
        with torch.no_grad():
            torch.testing.assert_close(f(w, x), fn(w, x))
            assert _ran(f) != set()


class _NotTorch:
    @staticmethod
    def relu(t):
        return t            # the row itself


F = _NotTorch()             # (a name torch users give torch.nn.functional: here, yours)


def your_f_returns_the_row(x):
    out = torch.empty_like(x)
    snap = []
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
        v = F.relu(out[i])          # the row, a view the next store changes
        out[i] = out[i] + 1
        snap.append(v * 1)
    return out, torch.stack(snap)


def test_a_call_is_new_memory_only_where_it_resolves_to_torch():
    """The calls that make new memory are torch's own, resolved: `F.relu` of your `F` that
    returns its argument keeps the row's memory (the loop's `v` then shows the second store)."""
    x = torch.randn(5, 3)
    f = autovec(your_f_returns_the_row)
    for _ in range(3):
        want, got = your_f_returns_the_row(x.clone()), f(x.clone())
        assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert _ran(f) == set()
