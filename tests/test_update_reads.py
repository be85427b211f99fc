"""A row updated in place (`grads[i] *= s`, `x[i] += v`) and read earlier in the same iteration,
at the same index (`n = grads[i].norm()`: per-sample gradient clipping): the read sees the row as
it was before the update, in the loop and in the batch. A read after the update sees the updated
row; a view of the row kept across the update keeps the loop. Checked against the loop: values, effects on arguments, path."""
import pytest
import torch

from autovec import autovec, explain
from conftest import raises_as_loop, ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def clip_per_sample(grads, max_norm):
    norms = torch.empty(grads.shape[0])
    for i in range(grads.shape[0]):
        n = grads[i].norm()
        norms[i] = n
        if n > max_norm:
            grads[i] *= max_norm / (n + 1e-6)
    return norms


def center_rows(x):
    for i in range(x.shape[0]):
        m = x[i].mean()
        x[i] -= m
    return x


def scale_by_own_max(x):
    for i in range(x.shape[0]):
        x[i] /= x[i].abs().max() + 1.0
    return x


def read_after_update(x, y):
    for i in range(x.shape[0]):
        x[i] *= 2
        y[i] = x[i] + 1             # the updated row
    return x, y


def view_across_update(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i]                    # a view: the loop's r sees the update below
        x[i] += 1
        out.append(r * 1)
    return torch.stack(out)


def _check(fn, *args):
    fast = autovec(fn)
    a1 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    a2 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    want, got = fn(*a1), fast(*a2)
    for u, v in zip(*(w if isinstance(w, tuple) else (w,) for w in (want, got))):
        torch.testing.assert_close(v, u, rtol=1e-5, atol=1e-6)
    for x1, x2 in zip(a1, a2):
        if isinstance(x1, torch.Tensor):
            torch.testing.assert_close(x2, x1, rtol=1e-5, atol=1e-6)
    return ran_modes(fast)


@pytest.mark.parametrize("shape", [(40, 8), (3, 2)])
def test_per_sample_clipping_vectorizes(shape):
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * 2
    assert _check(clip_per_sample, g, 3.0)
    assert explain(clip_per_sample, g.clone(), 3.0).path == "vectorized"


@pytest.mark.parametrize("fn", [center_rows, scale_by_own_max])
def test_an_update_from_a_read_of_its_own_row(fn):
    x = torch.randn(20, 5, generator=torch.Generator().manual_seed(1))
    assert _check(fn, x)


def test_a_read_after_the_update_sees_the_updated_row():
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(6, 3, generator=g), torch.zeros(6, 3)
    _check(read_after_update, x, y)     # (analysis._forwarded: the read is the updated value)


def test_a_view_kept_across_the_update_keeps_the_loop():
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(3))
    _check(view_across_update, x)
    assert explain(view_across_update, x.clone()).path == "python"


# ----------------------------------------------------------------------------- found by a probe

def view_read_in_the_same_if(g):
    out = torch.zeros(g.shape[0], g.shape[1])
    for i in range(g.shape[0]):
        r = g[i]
        if r.sum() > 0:
            g[i] *= 2
            out[i] = r + 0          # r is the row itself: doubled
    return out


def view_read_in_the_same_if_plain(g):
    out = torch.zeros(g.shape[0], g.shape[1])
    for i in range(g.shape[0]):
        r = g[i]
        if r.sum() > 0:
            g[i] = g[i] * 2
            out[i] = r + 0
    return out


def renamed_view(g):
    out = torch.zeros(g.shape[0], g.shape[1])
    for i in range(g.shape[0]):
        r = g[i]
        s = r[0:]                   # a view of the view
        g[i] *= 2
        out[i] = s + 0
    return out


def renamed_view_plain(g):
    out = torch.zeros(g.shape[0], g.shape[1])
    for i in range(g.shape[0]):
        r = g[i]
        s = r
        g[i] = g[i] * 2
        out[i] = s + 0
    return out


def by_own_element(g):
    for i in range(g.shape[0]):
        g[i] /= g[i, 0]             # the loop's in-place division by a view of its own row raises
    return g


def by_own_element_named(g):
    for i in range(g.shape[0]):
        s = g[i, 0]
        g[i] /= s
    return g


def by_own_transpose(g):
    for i in range(g.shape[0]):
        if g[i].sum() > 0:
            g[i] += g[i].T
    return g


@pytest.mark.parametrize("fn", [view_read_in_the_same_if, view_read_in_the_same_if_plain, renamed_view,
                                renamed_view_plain])
def test_a_view_of_the_row_read_after_its_update_keeps_the_loop(fn):
    g = torch.tensor([[1.0, 2.0], [-3.0, 1.0], [4.0, 0.0]])
    _check(fn, g)
    assert explain(fn, g.clone()).path == "python"


@pytest.mark.parametrize("fn, shape", [(by_own_element, (4, 3)), (by_own_element_named, (4, 3)),
                                       (by_own_transpose, (4, 3, 3))])
def test_an_update_by_a_view_of_its_own_row_raises_as_the_loop(fn, shape):
    g = torch.rand(*shape, generator=torch.Generator().manual_seed(4)) + 0.5
    raises_as_loop(RuntimeError, fn, g)
