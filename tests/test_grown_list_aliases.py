"""A list the loop grows (`res.append(v)`, `counts[int(l)] += 1`) and also reads another way:
under a second name, inside a dict, through a helper's global, or passed twice (probeB). Each
iteration of the loop sees the list as the earlier ones left it; a batch computed first would
see it as it was before the loop, so these keep the loop (runtime._appended_aliasing), on the
first call and after the steady state's lanes are written."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def second_name(x):
    res = []
    alias = res
    for i in range(len(x)):
        res.append(x[i] * len(alias))
    return res


def inside_a_dict(x):
    res = []
    box = {"r": res}
    for i in range(len(x)):
        res.append(x[i] * len(box["r"]))
    return res


LOG = []


def _scale(v):
    return v * len(LOG)


def through_a_helper(x, log):
    for i in range(len(x)):
        log.append(_scale(x[i]))
    return log


def passed_twice(x, log, w):
    for i in range(len(x)):
        log.append(x[i] * w[-1])
    return log


def counts_read_twice(labels, c, view):
    tot = 0
    for lab in labels:
        c[int(lab)] += 1
        tot += view[0]
    return c, tot


def _values(v):
    return [t.item() if isinstance(t, torch.Tensor) else t for t in v]


@pytest.mark.parametrize("fn", [second_name, inside_a_dict], ids=lambda f: f.__name__)
def test_a_list_read_under_another_name_keeps_the_loop(fn):
    x = torch.ones(20)
    f = autovec(fn)
    for _ in range(3):
        assert _values(f(x)) == _values(fn(x)) == list(range(20))
    assert "a list the loop grows is also read another way" in str(explain(f, x))


def test_a_list_read_through_a_helpers_global_keeps_the_loop():
    x = torch.ones(20)
    f = autovec(through_a_helper)
    # warm calls on a list of its own (batched), then the helper's own list: the loop
    for _ in range(4):
        LOG.clear()
        got = _values(f(x, []))
        assert got == [0.0] * 20
    LOG.clear()
    want = _values(through_a_helper(x, LOG))
    LOG.clear()
    assert _values(f(x, LOG)) == want == list(range(20))


def test_a_list_passed_twice_keeps_the_loop():
    x = torch.full((10,), 2.0)
    f = autovec(passed_twice)
    for _ in range(4):
        assert _values(f(x, [1.0], [3.0])) == _values(passed_twice(x, [1.0], [3.0]))
    a, b = [1.0], [1.0]
    got, want = f(x, a, a), passed_twice(x, b, b)
    assert _values(got) == _values(want) == [1.0] + [2.0 ** k for k in range(1, 11)]


def test_a_count_list_read_twice_keeps_the_loop():
    labels = torch.zeros(50, dtype=torch.long)
    f = autovec(counts_read_twice)
    c1, c2 = [0, 0], [0, 0]
    assert f(labels, c1, c1) == counts_read_twice(labels, c2, c2) == ([50, 0], 1275)
    c1, c2, v = [0, 0], [0, 0], [7, 7]
    assert f(labels, c1, v) == counts_read_twice(labels, c2, list(v)) == ([50, 0], 350)
