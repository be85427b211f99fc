"""`for .. else` / `while .. else` whose body ends the loop by `break` (hoist.else_as_flag): the
`else` block runs after the loop under `if not broke:`, with `broke = True` set at each
`break` of that loop. A search loop (`for i ..: if x[i] > t: break` / `else: i = -1`) then
vectorizes as loops ending by `break` do, and every loop gives what, and does what, the
original does (the order of its side effects included)."""
import pytest
import torch

from autovec import autovec, explain
from conftest import ran_modes


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def first_above(v, t):
    for i in range(len(v)):
        if v[i] > t:
            break
    else:
        return -1
    return i


def first_row_above(x, t):
    found = None
    for i in range(x.shape[0]):
        s = x[i].sum()
        if s > t:
            found = s * 2
            break
    else:
        found = x.sum()
    return found


def else_then_after(x, t, log):
    for i in range(x.shape[0]):
        if x[i].max() > t:
            log.append(("break", i))
            break
    else:
        log.append("else")
    log.append("after")
    return len(log)


def returns_and_else(x, t, log):
    for i in range(x.shape[0]):
        if x[i].sum() > t:
            return i
        if x[i].sum() < -t:
            break
    else:
        log.append("else")
        return -1
    log.append(("broke", i))
    return -2


def counting_while(x, t):
    k = 0
    while k < x.shape[0]:
        if x[k].min() > t:
            break
        k += 1
    else:
        k = -1
    return k


def inner_else_breaks_outer(x, t):
    hits = []
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > t:
                break
        else:
            hits.append(-i)
            continue
        hits.append(i)
    return hits


def else_breaks_the_outer_loop(x, t):
    rows = 0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > t:
                break
        else:
            break
        rows += 1
    return rows


def names_taken(v, t):
    broke = 7
    for i in range(len(v)):
        if v[i] > t:
            break
    else:
        return broke
    return i + broke


def break_in_a_with(v, t, log):
    import contextlib
    for i in range(len(v)):
        with contextlib.nullcontext():
            if v[i] > t:
                break
    else:
        log.append("else")
    return i


def _same(fn, make, calls=6):
    fast = autovec(fn)
    for seed in range(calls):
        torch.manual_seed(seed)
        a = make(seed)
        torch.manual_seed(seed)
        b = make(seed)
        want, got = fn(*a), fast(*b)
        assert type(got) is type(want)
        if isinstance(want, torch.Tensor):
            assert torch.equal(want, got)
        else:
            assert want == got
        for p, q in zip(a, b):
            if isinstance(p, list):
                assert p == q
    return fast


def _v(seed, n=12):
    return torch.randn(n)


def _x(seed, shape=(8, 3)):
    return torch.randn(*shape)


@pytest.mark.parametrize("t", [1.0, 2.5, 100.0])
def test_a_search_loop_with_else_vectorizes(t):
    fast = _same(first_above, lambda s: (_v(s), t))
    ex = explain(fast, _v(0), t)
    assert ex.path == "vectorized" and "broke" in ex.rewritten_source
    assert [l.strategy for l in ex.loops] != ["python"]


@pytest.mark.parametrize("t", [0.5, 100.0])
def test_the_else_block_assigns_what_the_loop_did_not(t):
    _same(first_row_above, lambda s: (_x(s), t))


@pytest.mark.parametrize("t", [0.5, 100.0])
def test_side_effects_keep_their_order(t):
    _same(else_then_after, lambda s: (_x(s), t, []))


@pytest.mark.parametrize("t", [0.5, 1.5, 100.0])
def test_returns_breaks_and_else_together(t):
    _same(returns_and_else, lambda s: (_x(s), t, []))


@pytest.mark.parametrize("t", [-0.5, 100.0])
def test_a_counting_while_with_else(t):
    _same(counting_while, lambda s: (_x(s), t))


@pytest.mark.parametrize("t", [0.5, 100.0])
def test_an_inner_loop_else_with_continue_of_the_outer(t):
    _same(inner_else_breaks_outer, lambda s: (_x(s, (6, 4)), t))


@pytest.mark.parametrize("t", [-100.0, 0.5, 100.0])
def test_an_inner_else_that_breaks_the_outer_loop(t):
    _same(else_breaks_the_outer_loop, lambda s: (_x(s, (6, 4)), t))


def test_the_flag_name_avoids_the_function_names():
    _same(names_taken, lambda s: (_v(s), 1.0))
    assert "broke_" in explain(autovec(names_taken), _v(0), 1.0).rewritten_source


def test_a_break_outside_if_blocks_keeps_the_else_as_written():
    _same(break_in_a_with, lambda s: (_v(s), 1.0, []))
    assert "broke" not in explain(autovec(break_in_a_with), _v(0), 1.0).rewritten_source


broke = "the module's"


def declares_global(v, t):
    global broke      # noqa: PLW0602  (declared, never bound: the function leaves the module's name alone)
    for i in range(len(v)):
        if v[i] > t:
            break
    else:
        return -1
    return i


def test_a_global_declaration_is_never_the_flag():
    _same(declares_global, lambda s: (_v(s), 1.0))
    assert broke == "the module's"
    assert "broke_" in explain(autovec(declares_global), _v(0), 1.0).rewritten_source


def breaks_in_if_and_in_with(v, t, log):
    import contextlib
    doubled = []
    for k in range(len(v)):       # (vectorized: the function runs rewritten, this loop's else as it is)
        doubled.append(v[k] * 2)
    log.append(torch.stack(doubled).sum().item())
    for i in range(len(v)):
        if v[i] < -t:
            break
        with contextlib.nullcontext():
            if v[i] > t:
                break
    else:
        log.append("else")
    return i


@pytest.mark.parametrize("t", [0.5, 1.5, 100.0])
def test_one_break_the_flag_cannot_follow_keeps_the_else_as_written(t):
    fast = _same(breaks_in_if_and_in_with, lambda s: (_v(s), t, []))
    ex = explain(fast, _v(0), t, [])
    assert ex.path == "vectorized" and "broke" not in ex.rewritten_source


# The new names (the flag `broke`, `returned` / `returning` of a return in a loop) fall on no name
# the function binds in any form: a `match` capture, `except .. as`, a `def`, a `class` or an import
# in the loop would rebind or delete the flag (probeW)

BINDINGS = {
    "match": "match i:\n            case 0:\n                pass\n            case {name}:\n                pass",
    "except": "try:\n            raise KeyError(i)\n        except KeyError as {name}:\n            pass",
    "def": "def {name}():\n            pass",
    "class": "class {name}:\n            pass",
    "import": "import os as {name}",
}

SEARCH = '''
def search(x, t):
    doubled = []
    for k in range(x.shape[0]):      # (vectorized: the function runs rewritten)
        doubled.append(x[k] * 2)
    for i in range(x.shape[0]):
        {binding}
        if x[i].sum() > t:
            {exit}
    else:
        return "else", torch.stack(doubled)
    return i, torch.stack(doubled)
'''


def _defined(binding, name, exit_):
    ns = {"torch": torch}
    src = SEARCH.format(binding=BINDINGS[binding].format(name=name), exit=exit_)
    import linecache
    filename = f"<test_loop_else {binding} {name} {exit_}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    return ns["search"]


@pytest.mark.parametrize("binding", list(BINDINGS))
@pytest.mark.parametrize("name, exit_", [("broke", "break"), ("returning", "return i, None"),
                                         ("returned", "return i, None")])
@pytest.mark.parametrize("t", [1.0, 100.0])
def test_new_names_fall_on_no_binding_of_the_function(binding, name, exit_, t):
    fn = _defined(binding, name, exit_)
    fast = autovec(fn)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(5, 2)
        want, got = fn(x, t), fast(x, t)
        assert want[0] == got[0]
        assert (want[1] is None) == (got[1] is None)
        if want[1] is not None:
            assert torch.equal(want[1], got[1])
