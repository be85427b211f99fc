"""A loop header's builtins rebound after the first call: the rewrite takes `zip`, `enumerate`
and `reversed` to be the builtins without calling them as written, and the header it writes for
a loop over elements updated in place (`range(min(len(x), len(m)))` for `zip(x, m)`) rests on
`len`, `min` and `range`. The analysis checks them on the first call; each later call checks them
again (IterSpace.builtins, lowering _space_expr), and the loop runs as written where one is
rebound, in the user's module or in the builtins module (probeB: a module-level `zip` defined
after the first call was ignored)."""
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
