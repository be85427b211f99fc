"""A loop header's builtins rebound after the first call: the rewrite takes `zip`, `enumerate`
and `reversed` to be the builtins without calling them as written, and the header it writes for
a loop over elements updated in place (`range(min(len(x), len(m)))` for `zip(x, m)`) rests on
`len`, `min` and `range`. The analysis checks them on the first call, and records every name it
finds to be a builtin or a module (frontend.Captured.assumed); each later call checks them again
(api._assumptions), and the function runs as written where one is rebound, in the user's module
or in the builtins module (probeB: a module-level `zip` defined after the first call was
ignored)."""
import builtins

import pytest
import torch

from autovec import autovec

_ORIGINAL = {name: getattr(builtins, name) for name in ("zip", "enumerate", "reversed", "len", "min")}


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def normalize(x, mean):
    for t, m in zip(x, mean):
        t.sub_(m)
    return x


def center(x):
    for row in x:
        row -= 1
    return x


def scaled(x, w):
    out = []
    for i, row in enumerate(x):
        out.append(row * w[i])
    return torch.stack(out)


def paired(x, y):
    out = []
    for a, b in zip(x, y):
        out.append(a + b)
    return torch.stack(out)


def backwards(x):
    out = []
    for i in reversed(range(x.shape[0])):
        out.append(x[i] * 2)
    return torch.stack(out)


def reversed_zip(a, b):
    return _ORIGINAL["zip"](a, list(b)[::-1])


def enumerate_from_one(xs):
    return _ORIGINAL["enumerate"](xs, 1)


def forwards(xs):
    return iter(xs)


def half_len(x):
    return _ORIGINAL["len"](x) // 2


def first_only(*xs):
    return 1


CASES = [
    (normalize, "zip", reversed_zip, lambda: (torch.arange(12.0).reshape(3, 4), torch.tensor([100.0, 200.0, 300.0]))),
    (paired, "zip", reversed_zip, lambda: (torch.randn(4, 3), torch.randn(4, 3))),
    (scaled, "enumerate", enumerate_from_one, lambda: (torch.randn(4, 3), torch.randn(5))),
    (backwards, "reversed", forwards, lambda: (torch.randn(5, 3),)),
    (normalize, "min", first_only, lambda: (torch.randn(3, 4), torch.randn(3))),
    (center, "len", half_len, lambda: (torch.randn(6, 3),)),
]


def _outcome(fn, args):
    try:
        return fn(*args), None
    except Exception as e:   # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("where", ["module", "builtins"])
@pytest.mark.parametrize("fn, name, replacement, make", CASES)
def test_a_builtin_rebound_after_the_first_call_runs_the_loop_as_written(fn, name, replacement, make, where,
                                                                        monkeypatch):
    fast = autovec(fn)
    torch.manual_seed(0)
    args = make()
    torch.manual_seed(0)
    twin = make()
    torch.testing.assert_close(fast(*twin), fn(*args))         # (the first call: the builtins)
    torch.manual_seed(1)
    args = make()
    torch.manual_seed(1)
    twin = make()
    if where == "module":
        monkeypatch.setitem(fn.__globals__, name, replacement)
    else:
        monkeypatch.setattr(builtins, name, replacement)
    want, want_err = _outcome(fn, args)
    got, got_err = _outcome(fast, twin)
    monkeypatch.undo()       # (the comparisons below use the builtins themselves)
    assert got_err == want_err
    if want_err is None:
        torch.testing.assert_close(got, want)
        for a, b in zip(args, twin):
            torch.testing.assert_close(b, a)


def running_max(x):
    best = -1e9
    for i in range(x.shape[0]):
        best = max(best, x[i].item())
    return best


def scatter_max(out, idx, x):
    for i in range(x.shape[0]):
        out[idx[i]] = max(out[idx[i]], x[i])
    return out


def dot_sum(x, y):
    return sum((a * b).sum() for a, b in zip(x, y))


def stacked(x):
    return torch.stack([x[i] * 2 for i in range(x.shape[0])])


def doubled_rows(x):
    out = torch.zeros_like(x)
    for i in range(len(x)):
        out[i] = x[i] * 2
    return out


class _ReversingTorch:
    """A stand-in for the torch module whose stack reverses its list (a module rebound)."""
    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def stack(xs, dim=0):
        return torch.stack(list(xs)[::-1], dim)


def _smallest(a, b):
    return _ORIGINAL["min"](a, b)


def _short_len(o):
    return _ORIGINAL["len"](o) - 1


NAMED = [
    (running_max, "max", _smallest, lambda: (torch.tensor([0.5, 2.0, -1.0, 1.0]),)),
    (scatter_max, "max", _smallest, lambda: (torch.full((3,), -1.0), torch.tensor([0, 1, 1, 2]),
                                            torch.tensor([0.5, 2.0, 0.0, 1.0]))),
    (dot_sum, "sum", lambda it, start=0: 42, lambda: (torch.randn(4, 3), torch.randn(4, 3))),
    (stacked, "torch", _ReversingTorch(), lambda: (torch.arange(6.0).reshape(3, 2),)),
    (doubled_rows, "len", _short_len, lambda: (torch.randn(4, 3),)),
]


@pytest.mark.parametrize("where", ["module", "builtins"])
@pytest.mark.parametrize("fn, name, replacement, make", NAMED)
def test_a_name_the_analysis_resolved_rebound_after_the_first_call(fn, name, replacement, make, where,
                                                                  monkeypatch):
    """(probeD: `max`, `min` and `sum` the analysis found to be the builtins, and `torch` the
    module, were not looked up again: api._assumptions checks them on every call, and the call
    runs the function as written where one is rebound; autovec's own counts use the builtins as
    they were at import)"""
    if where == "builtins" and name == "torch":
        pytest.skip("torch is no builtin")
    fast = autovec(fn)
    args = make()
    fast(*[a.clone() for a in args]), fast(*[a.clone() for a in args])      # (past the first call's check)
    if where == "module":
        monkeypatch.setitem(fn.__globals__, name, replacement)
    else:
        monkeypatch.setattr(builtins, name, replacement)
    want, want_err = _outcome(fn, [a.clone() for a in args])
    got, got_err = _outcome(fast, [a.clone() for a in args])
    monkeypatch.undo()
    assert got_err == want_err
    if want_err is None:
        if isinstance(want, torch.Tensor):
            assert torch.equal(got, want)
        else:
            assert type(got) is type(want) and got == want
    # and with the names restored, the rewrite again
    torch.testing.assert_close(fast(*[a.clone() for a in args]), fn(*[a.clone() for a in args]))


def test_a_name_the_function_never_reads_does_not_send_it_to_the_loop(monkeypatch):
    # (the analysis looks up `max`, `reversed`, `len` for its own rewrites of every function; only
    # the names the function reads, as written or as rewritten, are checked on each call)
    from conftest import ran_modes
    fast = autovec(stacked)
    x = torch.arange(6.0).reshape(3, 2)
    fast(x)
    monkeypatch.setitem(stacked.__globals__, "max", _smallest)
    monkeypatch.setitem(stacked.__globals__, "reversed", forwards)
    fast._autovec_state.runtime.ran.clear()
    torch.testing.assert_close(fast(x), stacked(x))
    assert ran_modes(fast)
