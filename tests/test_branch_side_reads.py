"""A row stored on several sides of a branch and read in each side's own store (a particle's
velocity flipped off either wall: `if p < 0: v[i] = -v[i] elif p > box: v[i] = -v[i]`): a read
on one side never sees the other side's store, so it reads the row from before the loop, as the
batch does. A read after a store on its own side, or after the branch, still sees the written
row: those keep the loop or are forwarded. Checked against the loop, arguments updated in place."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def reflect(pos, vel, box):
    for i in range(pos.shape[0]):
        p = pos[i] + vel[i]
        if p < 0:
            p = -p
            vel[i] = -vel[i]
        elif p > box:
            p = 2 * box - p
            vel[i] = -vel[i]
        pos[i] = p
    return pos, vel


def two_sides(x, c):
    for i in range(x.shape[0]):
        if c[i] > 0:
            x[i] = x[i] * 2
        else:
            x[i] = 1 - x[i]
    return x


def nested_sides(x, c):
    for i in range(x.shape[0]):
        if c[i] > 0:
            if x[i] > 1:
                x[i] = x[i] - 1
            else:
                x[i] = x[i] + 3
        elif c[i] < -1:
            x[i] = x[i] * x[i]
    return x


def read_after_own_store(x, y, c):
    for i in range(x.shape[0]):
        if c[i] > 0:
            x[i] = x[i] * 2
            y[i] = x[i] + 1          # (reads the row just written)
        else:
            x[i] = -x[i]
    return x, y


def read_after_branch(x, y, c):
    for i in range(x.shape[0]):
        if c[i] > 0:
            x[i] = x[i] * 2
        elif c[i] < -1:
            x[i] = -x[i]
        y[i] = x[i] + 1              # (the row as the branch left it)
    return x, y


def _check(fn, *args, path=None):
    a = [t.clone() if isinstance(t, torch.Tensor) else t for t in args]
    b = [t.clone() if isinstance(t, torch.Tensor) else t for t in args]
    f = autovec(fn)
    for _ in range(3):
        a2 = [t.clone() if isinstance(t, torch.Tensor) else t for t in a]
        b2 = [t.clone() if isinstance(t, torch.Tensor) else t for t in b]
        got, want = f(*a2), fn(*b2)
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for u, w in zip(got, want):
            torch.testing.assert_close(u, w, rtol=0, atol=0)
        for u, w in zip(a2, b2):
            if isinstance(u, torch.Tensor):
                torch.testing.assert_close(u, w, rtol=0, atol=0)
    if path:
        assert explain(f, *[t.clone() if isinstance(t, torch.Tensor) else t for t in a]).path == path


def test_a_velocity_flipped_off_either_wall():
    pos, vel = torch.rand(40) * 1.2 - 0.1, torch.randn(40) * 0.3
    _check(reflect, pos, vel, 1.0, path="vectorized")


def test_two_sides_and_nested_sides():
    x, c = torch.randn(30) * 2, torch.randn(30) * 2
    _check(two_sides, x, c, path="vectorized")
    _check(nested_sides, x, c, path="vectorized")


@pytest.mark.parametrize("fn", [read_after_own_store, read_after_branch])
def test_reads_that_see_a_store_give_the_loop_s_values(fn):
    x, y, c = torch.randn(30), torch.zeros(30), torch.randn(30) * 2
    _check(fn, x, y, c)


def view_on_a_side(x, y, c):
    for i in range(x.shape[0]):
        if c[i] > 0:
            t = x[i]                 # (a view of the row: it shows the store below)
            x[i] = t * 2
            y[i] = t
    return x, y


def view_on_each_side(x, y, c):
    for i in range(x.shape[0]):
        if c[i] > 0:
            t = x[i]
            x[i] = t * 2
        else:
            t = -x[i]
            x[i] = t
        y[i] = t
    return x, y


def copy_on_a_side(x, y, c):
    for i in range(x.shape[0]):
        if c[i] > 0:
            t = x[i] * 1.0           # (new memory: the row as it was)
            x[i] = t * 2
            y[i] = t
    return x, y


@pytest.mark.parametrize("fn", [view_on_a_side, view_on_each_side, copy_on_a_side])
def test_a_view_bound_on_a_side_and_read_after_its_store(fn):
    x, y, c = torch.randn(30), torch.zeros(30), torch.randn(30)
    _check(fn, x, y, c, path="vectorized" if fn is copy_on_a_side else None)


def view_read_before_its_store(x, y, c):
    for i in range(x.shape[0]):
        if c[i] > 0:
            t = x[i]                 # (a view, read only before the store)
            y[i] = t + 1
            x[i] = t * 2
        else:
            x[i] = -x[i]
    return x, y


def test_a_view_read_only_before_its_store():
    x, y, c = torch.randn(30), torch.zeros(30), torch.randn(30)
    _check(view_read_before_its_store, x, y, c, path="vectorized")
