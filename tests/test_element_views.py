"""In-place updates of a loop's element (`for row in x: row -= row.mean()`, `row.mul_(2).clamp_(
-1, 1)`), planned as the same updates of `x[k]` over `range(len(x))` (analysis.hoist
element_views); the loop as written is the fallback. Values, the argument after the call,
errors and the path against the loop."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def center(x):
    for row in x:
        row -= row.mean()
    return x


def scale_clip(x):
    for row in x:
        row.mul_(2).clamp_(-1, 1)
    return x


def normalize(x, eps):
    for r in x:
        r -= r.mean()
        r /= r.norm() + eps
    return None


def on_list(ps):
    for p in ps:
        p.mul_(0.5)
    return ps


def read_after(x):
    for row in x:
        row -= 1
    return row


def rebinds(x):
    for row in x:
        row -= 1
        row = row * 2          # (a new tensor: not the row any more)
    return x


def _run(fn, make):
    torch.manual_seed(0)
    a = make()
    torch.manual_seed(0)
    b = make()          # (the same values and layout: an expanded tensor stays expanded)
    try:
        want = fn(a, *EXTRA.get(fn, ()))
    except Exception as e:   # noqa: BLE001
        with pytest.raises(type(e)):
            autovec(fn)(b, *EXTRA.get(fn, ()))
        return None
    got = autovec(fn)(b, *EXTRA.get(fn, ()))
    if isinstance(a, list):
        assert all(torch.equal(p, q) for p, q in zip(a, b))
    else:
        torch.testing.assert_close(b, a, rtol=0, atol=0)      # (the argument, changed in place alike)
    assert type(got) is type(want)
    return b


EXTRA = {normalize: (1e-6,)}


@pytest.mark.parametrize("fn", [center, scale_clip, normalize])
@pytest.mark.parametrize("make", [lambda: torch.randn(6, 4), lambda: torch.randn(4, 6).t(),
                                  lambda: torch.randn(5, 3, dtype=torch.float64), lambda: torch.randn(1, 4)])
def test_rows_updated_through_the_element(fn, make):
    for _ in range(3):
        _run(fn, make)
    assert explain(fn, make(), *EXTRA.get(fn, ())).path == "vectorized"


@pytest.mark.parametrize("fn, make", [
    (on_list, lambda: [torch.randn(3), torch.randn(2, 2)]),           # (a list of rows of other shapes)
    (center, lambda: torch.randn(4).expand(3, 4)),                     # (rows that share memory: the loop raises)
    (center, lambda: torch.randn(())),                                 # (a 0-d tensor: the loop raises)
    (center, lambda: torch.randn(5, 3, requires_grad=True)),           # (a leaf that requires grad: the loop raises)
    (read_after, lambda: torch.randn(5, 3)),
    (rebinds, lambda: torch.randn(5, 3)),
])
def test_the_loop_as_written_decides_elsewhere(fn, make):
    _run(fn, make)


def test_a_generator_runs_as_written():
    rows = [torch.randn(3), torch.randn(3)]
    got = autovec(center)(iter(rows))
    assert torch.allclose(rows[0].mean(), torch.tensor(0.0), atol=1e-6)
    assert next(got, None) is None
