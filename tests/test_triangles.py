"""Triangular loop nests: `for i in range(n): for j in range(i + 1, n):` (or `range(i)`) are the
rectangle `for j in range(1, n)` with the body under `if i + 1 <= j:` (analysis.hoist.
rectangular_nests): the same iterations in the same order. The nest planner takes the rectangle
with the condition as a mask; the loops as written stay the fallback. Nests whose indices only
index run as one loop over their pairs instead (analysis/pairs.py, tests/test_pairs.py)."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def causal_mask(T):
    m = torch.zeros(T, T)
    for i in range(T):
        for j in range(i + 1, T):
            m[i, j] = float("-inf")
    return m


def upper_distances(x):
    n = x.shape[0]
    D = torch.zeros(n, n)
    for i in range(n):
        for j in range(i + 1, n):
            D[i, j] = (x[i] - x[j]).norm()
    return D


def strictly_lower_sum(A):
    s = 0.0
    for i in range(A.shape[0]):
        for j in range(i):
            s = s + A[i, j]
    return s


def diagonal_and_above(A):
    out = torch.zeros_like(A)
    for i in range(1, A.shape[0]):
        for j in range(i - 1, A.shape[1]):
            out[i, j] = A[i, j] * 2 + 1
    return out


def pair_energy(x, k):
    e = torch.zeros(())
    for i in range(x.shape[0]):
        for j in range(i + k, x.shape[0]):
            e = e + (x[i] * x[j]).sum()
    return e


CASES = [
    (causal_mask, lambda: (7,)),
    (upper_distances, lambda: (torch.randn(9, 3),)),
    (strictly_lower_sum, lambda: (torch.randn(6, 6),)),
    (diagonal_and_above, lambda: (torch.randn(6, 5),)),
    (pair_energy, lambda: (torch.randn(8, 2), 2)),
]


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_triangles_are_vectorized_and_equal_to_the_loop(fn, make):
    args = make()
    f = autovec(fn)
    torch.testing.assert_close(f(*args), fn(*args))
    assert explain(f, *args).path == "vectorized"
    assert _ran(f)
    assert_equivalent(fn, *args, trials=2)


def test_explain_shows_the_triangle_as_written():
    ex = explain(upper_distances)
    assert [r.source.splitlines()[0] for r in ex.loops] == ["for i in range(n):", "for j in range(i + 1, n):"]
    assert all(r.vectorized for r in ex.loops)


def test_gradients_through_a_triangle():
    x = torch.randn(6, 3, requires_grad=True)
    assert_equivalent(pair_energy, x, 1, grad=True)


def test_empty_and_one_row_triangles():
    for n in (0, 1, 2):
        torch.testing.assert_close(autovec(causal_mask)(n), causal_mask(n))
        x = torch.randn(n, 3)
        torch.testing.assert_close(autovec(upper_distances)(x), upper_distances(x))


def index_after(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i, x.shape[0]):
            s = s + x[i] * x[j]
    return s, j


def bound_changed_in_body(x):
    n = x.shape[0]
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i, n):
            s = s + x[j]
            n = n - 0
    return s


def stepped_outer(x):
    s = 0.0
    for i in range(0, x.shape[0], 2):
        for j in range(i + 1, x.shape[0]):
            s = s + x[i] * x[j]
    return s


@pytest.mark.parametrize("fn", [index_after, bound_changed_in_body, stepped_outer])
def test_triangles_the_rectangle_cannot_stand_for_stay_as_written(fn):
    # the inner index read after the nest (its last value would be the rectangle's), a bound
    # the body assigns, an outer step other than 1: no rectangle; whatever runs equals the loop
    x = torch.randn(6)
    got, want = autovec(fn)(x), fn(x)
    torch.testing.assert_close(got, want)
    src = explain(fn).rewritten_source
    assert "<= j" not in src and "j <" not in src       # (no rectangle's mask)


def test_a_triangle_that_is_not_vectorized_runs_as_written(capsys):
    # (a print in the body keeps the loop: the rectangle's extra iterations must not run, and
    # the loops as written go back into the function)
    def noisy(x):
        for i in range(x.shape[0]):
            for j in range(i + 1, x.shape[0]):
                print(i, j)
        return x

    autovec(noisy)(torch.zeros(4))
    assert capsys.readouterr().out.split("\n")[:-1] == [f"{i} {j}" for i in range(4) for j in range(i + 1, 4)]
    ex = explain(noisy)
    assert not any(r.vectorized for r in ex.loops)
    assert "range(i + 1" in ex.rewritten_source and "<= j" not in ex.rewritten_source


def test_an_inner_loop_vectorized_alone_keeps_the_triangle_per_outer_iteration():
    kept = []

    def pairs(x):
        for i in range(x.shape[0]):
            for j in range(i + 1, x.shape[0]):
                kept.append((i, j))
        return x

    autovec(pairs)(torch.zeros(5))
    assert kept == [(i, j) for i in range(5) for j in range(i + 1, 5)]


def growing_rectangle():
    L = [0.0, 1.0]
    for i in range(3):
        for j in range(len(L)):       # evaluated again by every outer iteration, while L grows
            L.append(float(i * j))
    return L


def growing_triangle(x):
    L = [x[0]]
    for i in range(3):
        for j in range(i, len(L)):
            L.append(x[j % x.shape[0]] * 2)
    return L


def test_an_inner_bound_the_body_changes_is_read_again_per_outer_iteration():
    # (found by the ninth probe: the nest read len(L) once)
    assert autovec(growing_rectangle)() == growing_rectangle()
    x = torch.randn(5)
    got, want = autovec(growing_triangle)(x), growing_triangle(x)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def else_view(x):
    out = []
    for i in range(x.shape[0]):
        y = x[i] * 2
        if x[i].sum() > 0:
            out.append(y)
        else:
            out.append(x[i])          # a view of the input
    return out


def test_a_view_appended_in_one_branch_stays_a_view():
    x1 = torch.tensor([[-1.0, -1.0], [2.0, 2.0], [-3.0, -3.0]])
    x2 = x1.clone()
    o1, o2 = else_view(x1), autovec(else_view)(x2)
    o1[0].fill_(7.0)
    o2[0].fill_(7.0)
    torch.testing.assert_close(x2, x1)
