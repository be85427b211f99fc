import copy
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CASES = Path(os.environ.get("AUTOVEC_CASES", ROOT.parent / "shared" / "cases"))


def case_paths():
    if not CASES.is_dir():
        return []
    return sorted(p for p in CASES.glob("*.py") if not p.name.startswith(("_", "verify")))


def load_case(path: Path):
    name = f"avcase_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def clone(x):
    return copy.deepcopy(x)


def ran_modes(fast) -> set:
    """How the vectorized loops of an @autovec function ran ("batched", "vmap", "broadcast",
    "direct"): each loop's last vectorized run that was not followed by a fall-back to the loop
    (runtime.failed forgets the mode); empty when every loop kept Python."""
    rt = fast._autovec_state.runtime
    return set(rt.ran.values()) if rt is not None else set()


def check_loop(fn, *args, grad=(), exact_args=True):
    """autovec(fn) against fn on copies of `args`: the result's dtype, shape and values, the
    arguments after the call (bit for bit, or within tolerance where a part may be summed in
    another order), and with `grad` the gradients of the arguments at those positions. Returns
    the modes the runtime ran (ran_modes)."""
    import torch
    from autovec import autovec
    fast = autovec(fn)
    a1 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    a2 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    for k in grad:
        a1[k].requires_grad_()
        a2[k].requires_grad_()
    want, got = fn(*a1), fast(*a2)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for x1, x2 in zip(a1, a2):
        if isinstance(x1, torch.Tensor):
            if exact_args:
                assert torch.equal(x1.detach(), x2.detach())
            else:
                torch.testing.assert_close(x2.detach(), x1.detach(), rtol=1e-5, atol=1e-5)
    if grad:
        g1 = torch.autograd.grad(want.sum(), [a1[k] for k in grad])
        g2 = torch.autograd.grad(got.sum(), [a2[k] for k in grad])
        for u, v in zip(g1, g2):
            torch.testing.assert_close(v, u, rtol=1e-5, atol=1e-5)
    return ran_modes(fast)


def raises_as_loop(exc, fn, *args):
    """Call `fn` and `autovec(fn)` on the same arguments: both must raise `exc` with the same
    message. Returns autovec's pytest.ExceptionInfo (for checks of its traceback)."""
    import pytest
    from autovec import autovec
    with pytest.raises(exc) as want:
        fn(*args)
    with pytest.raises(exc) as got:
        autovec(fn)(*args)
    assert str(got.value) == str(want.value)
    return got


def outcome(fn, *args):
    """fn(*args), or (its exception's type, message): what a call gives, errors included."""
    try:
        return fn(*args)
    except Exception as e:      # noqa: BLE001 (the loop's own error is the expected outcome)
        return (type(e), str(e))


def same_on_every_call(fn, make, calls=3, same=None):
    """One `autovec(fn)` called `calls` times (its later calls run without the first call's
    one-time check) on arguments `make()` draws from seeds 0, 1, ..; each call against `fn` on
    the same draw: the result bit for bit with its dtype (NaN equal to NaN), or the same error
    type and message, and the tensor arguments after the call either way (the rows written
    before a raising one included). `same(want, got)`: the comparison of results and of all the
    arguments instead (lists of tensors, numbers)."""
    from autovec import autovec
    fast = autovec(fn)
    for seed in range(calls):
        torch.manual_seed(seed)
        a = make()
        torch.manual_seed(seed)
        b = make()
        try:
            want = fn(*a)
        except Exception as e:   # noqa: BLE001
            with pytest.raises(type(e)) as got:
                fast(*b)
            assert str(got.value) == str(e)
        else:
            got = fast(*b)
            if same is not None:
                same(want, got)
            else:
                for p, q in zip(want, got) if isinstance(want, tuple) else [(want, got)]:
                    assert p.dtype == q.dtype
                    torch.testing.assert_close(q, p, rtol=0, atol=0, equal_nan=True)
        if same is not None:
            same(a, b)
            continue
        for p, q in zip(a, b):
            if isinstance(p, torch.Tensor):
                torch.testing.assert_close(q, p, rtol=0, atol=0, equal_nan=True)
    return fast


def fixed_costs(monkeypatch, tmp_path, **values):
    """The cost model's machine constants fixed (AUTOVEC_COSTS) to `values` over the defaults
    below, and no AUTOVEC_MIN_TRIP: the estimates decide. Undone by monkeypatch."""
    import json
    from autovec import cost
    constants = {"py_iter": 1e-6, "py_op": 0.8e-6, "op": 2e-6, "own_op": 2e-6, "vmap_call": 10e-6,
                 "byte_hot": 0.05e-9, "byte_fresh": 0.5e-9, **values}
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(constants))
    monkeypatch.setenv("AUTOVEC_COSTS", str(path))
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    monkeypatch.setattr(cost, "_constants", None)


def same_exactly(a, b):
    """`a` and `b` alike bit for bit: types, dtypes, shapes, grad flags and values (NaN equal to
    NaN), through lists and tuples; numbers equal."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad, (a, b)
        torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=0, equal_nan=True)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same_exactly(x, y)
    else:
        assert a == b, (a, b)


def same_within(a, b, rtol=1e-4, atol=1e-3):
    """`b` as `a`, through tuples and lists: types, dtypes and shapes exactly, values within a
    tolerance (a sum the batch adds in another order); numbers likewise."""
    import pytest
    assert type(b) is type(a), (type(a), type(b))
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same_within(x, y, rtol, atol)
    elif isinstance(a, torch.Tensor):
        assert b.dtype == a.dtype and b.shape == a.shape
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol)
    else:
        assert b == pytest.approx(a, rel=rtol, abs=atol)


def agrees_with_loop(fn, *args, path=None, strategy=None):
    """`autovec(fn)` gives the loop's results and effects on its arguments (same_exactly, on
    copies of `args`); with `path` (and `strategy`, of the one loop), `explain` reports them too,
    and its explanation is returned."""
    from autovec import autovec, explain

    a1 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    a2 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    same_exactly(fn(*a1), autovec(fn)(*a2))
    same_exactly(a1, a2)
    if path is None:
        return None
    ex = explain(fn, *args)
    assert ex.path == path, str(ex)
    if strategy is not None:
        assert [lp.strategy for lp in ex.loops] == [strategy], str(ex)
    return ex
