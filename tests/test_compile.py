"""The compile fallback: loops that cannot be vectorized may run their body as a
torch.compile'd step function, only where that is allowed and pays, and always exactly (its
first steps compared with the Python step's bit for bit)."""
import shutil

import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from autovec import compiled


def rnn(x, U):
    h = torch.zeros(x.shape[1], U.shape[1])
    c = h
    outs = []
    for t in range(x.shape[0]):
        h = torch.tanh(h @ U + x[t])
        c = c * 0.9 + h.sigmoid() * c.cos()
        outs.append(c)
    return torch.stack(outs), h


def rnn_into(x, U):
    h = torch.zeros(x.shape[1], U.shape[1])
    out = torch.empty(x.shape[0], x.shape[1], U.shape[1])
    for t in range(x.shape[0]):
        h = torch.tanh(h @ U + x[t]) * 0.5 + h * 0.5
        out[t] = h
    return out


def over_list(xs, U):
    h = torch.zeros(U.shape[0])
    for x_t in xs:
        h = torch.tanh(U @ h + x_t)
    return h


def with_print(x, U):
    h = torch.zeros(U.shape[1])
    for t in range(x.shape[0]):
        h = torch.tanh(h @ U + x[t])
        print(t)
    return h


def index_as_number(x, U):
    h = torch.zeros(U.shape[1])
    for t in range(x.shape[0]):
        h = torch.tanh(h @ U + x[t]) * t
    return h


def in_place(x, U):
    h = torch.zeros(U.shape[1])
    for t in range(x.shape[0]):
        h = torch.tanh(h @ U + x[t])
        h.mul_(0.5)
    return h


def append_first(x, U):
    h = torch.zeros(U.shape[1])
    outs = []
    for t in range(x.shape[0]):
        outs.append(h)
        h = torch.tanh(h @ U + x[t])
    return outs


def early_exit(x, U):
    h = torch.zeros(U.shape[1])
    for t in range(x.shape[0]):
        h = torch.tanh(h @ U + x[t])
        if h.sum() > 100:
            break
    return h


def _inputs(T=6, B=3, H=5):
    g = torch.Generator().manual_seed(0)
    return torch.randn(T, B, H, generator=g), torch.randn(H, H, generator=g) * 0.4


@pytest.fixture
def eager_backend(monkeypatch):
    """Dynamo with the eager backend: the whole mechanism in about a second a compile."""
    monkeypatch.setattr(compiled, "_BACKEND", "eager")
    monkeypatch.setattr(compiled, "_measured_compile", [])


def _notes(ex):
    return " ".join(ex.notes)


def test_fallback_compile_compiles_from_the_second_call(eager_backend):
    f = autovec(rnn, fallback="compile")
    x, U = _inputs()
    assert [lp.strategy for lp in explain(f).loops] == ["compile"]
    first = explain(f, x, U)                      # the first call
    assert first.path == "python" and "waits for repeated calls" in _notes(first)
    second = explain(f, x, U)
    assert second.path == "compile" and "the compile took" in _notes(second)
    for _ in range(3):
        got, want = f(x, U), rnn(x, U)
        torch.testing.assert_close(got, want)
    assert explain(f, x, U).path == "compile"
    st = f._autovec_state.runtime.steps[1]
    assert st.compiled and st.step_s is not None and st.compile_s > 0


def test_compiled_steps_keep_gradients(eager_backend):
    f = autovec(rnn, fallback="compile")
    x, U = _inputs()
    U.requires_grad_()
    for _ in range(3):
        assert_equivalent(f, x, U, grad=True)
    assert explain(f, x, U).path == "compile"


def test_stores_into_a_preallocated_output(eager_backend):
    f = autovec(rnn_into, fallback="compile")
    x, U = _inputs()
    for _ in range(3):
        torch.testing.assert_close(f(x, U), rnn_into(x, U))
    assert explain(f, x, U).path == "compile"


def test_elements_of_a_list(eager_backend):
    f = autovec(over_list, fallback="compile")
    xs = [torch.randn(4) for _ in range(5)]
    U = torch.randn(4, 4) * 0.3
    for _ in range(3):
        torch.testing.assert_close(f(xs, U), over_list(xs, U))
    assert explain(f, xs, U).path == "compile"


def test_an_error_in_a_later_step_is_the_loops_error(eager_backend):
    f = autovec(over_list, fallback="compile")
    U = torch.randn(4, 4)
    good = [torch.randn(4) for _ in range(5)]
    f(good, U), f(good, U)
    bad = good[:2] + [torch.randn(3)] + good[3:]
    with pytest.raises(RuntimeError) as want:
        over_list(bad, U)
    with pytest.raises(RuntimeError) as got:
        f(bad, U)
    assert str(got.value) == str(want.value)


def test_auto_never_compiles_a_small_body_on_cpu(eager_backend):
    f = autovec(rnn)
    x, U = _inputs()
    assert [lp.strategy for lp in explain(f).loops] == ["python"]
    for _ in range(5):
        torch.testing.assert_close(f(x, U), rnn(x, U))
    ex = explain(f, x, U)
    assert ex.path == "python" and "too few" in _notes(ex)
    assert not f._autovec_state.runtime.steps[1].compiled


def test_auto_compiles_when_the_cost_model_says_it_pays_and_drops_a_slower_step(eager_backend, monkeypatch):
    # a free compiled call and an instant compile: the model says compile; the eager backend
    # is slower than Python per step, so the measured step times make "auto" drop it
    monkeypatch.setattr(compiled, "_CALL_OVERHEAD", {"cpu": 0.0})
    monkeypatch.setattr(compiled, "_COMPILE_S", {"cpu": 1e-9})
    f = autovec(rnn)
    x, U = _inputs(T=40)
    f(x, U)
    ex = explain(f, x, U)
    assert "the compile took" in _notes(ex) or "not faster" in _notes(ex)
    torch.testing.assert_close(f(x, U), rnn(x, U))
    st = f._autovec_state.runtime.steps[1]
    assert st.compile_s is not None
    assert st.step_s is not None
    if st.step_s[1] > 0.9 * st.step_s[0]:
        assert st.failed and "not faster" in st.failed and not st.compiled
        ex = explain(f, x, U)
        assert ex.path == "python" and "not faster" in _notes(ex)


def test_fallback_python_never_compiles():
    f = autovec(rnn, fallback="python")
    x, U = _inputs()
    for _ in range(3):
        f(x, U)
    ex = explain(f, x, U)
    assert ex.loops[0].strategy == "python" and ex.path == "python"
    assert "_av_step" not in ex.rewritten_source


def test_a_compile_error_runs_the_loop(monkeypatch):
    def broken(gm, example_inputs):
        raise RuntimeError("this backend cannot compile anything")
    monkeypatch.setattr(compiled, "_BACKEND", broken)
    f = autovec(rnn, fallback="compile")
    x, U = _inputs()
    for _ in range(3):
        torch.testing.assert_close(f(x, U), rnn(x, U))
    ex = explain(f, x, U)
    assert ex.path == "python" and "torch.compile failed" in _notes(ex)


def test_a_compiled_step_that_disagrees_is_dropped(monkeypatch):
    def wrong(gm, example_inputs):
        def run(*args):
            return [o + 1 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in gm(*args)]
        return run
    monkeypatch.setattr(compiled, "_BACKEND", wrong)
    f = autovec(rnn, fallback="compile")
    x, U = _inputs()
    for _ in range(3):
        torch.testing.assert_close(f(x, U), rnn(x, U))
    ex = explain(f, x, U)
    assert ex.path == "python" and "differ" in _notes(ex)


def test_a_compiled_step_one_ulp_off_is_dropped(monkeypatch):
    """(probeG: the steps were compared within tolerances, so an inductor step 2.4e-7 off on a
    float32 body was kept; they are compared bit for bit)"""
    def ulp(gm, example_inputs):
        def run(*args):
            return [torch.nextafter(o, torch.full_like(o, float("inf")))
                    if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in gm(*args)]
        return run
    monkeypatch.setattr(compiled, "_BACKEND", ulp)
    f = autovec(rnn, fallback="compile")
    x, U = _inputs()
    for _ in range(3):
        got, want = f(x, U), rnn(x, U)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    ex = explain(f, x, U)
    assert ex.path == "python" and "differ" in _notes(ex)


def test_verified_steps_then_run_compiled_alone(eager_backend, monkeypatch):
    """(probeG: once the compared steps were done, every later call compared every step again,
    running each step twice: a list [0, ..] of steps left was read as true)"""
    seen = []
    verify = compiled.Runner._verify

    def counted(self, *args):
        seen.append(1)
        return verify(self, *args)
    monkeypatch.setattr(compiled.Runner, "_verify", counted)
    f = autovec(rnn, fallback="compile")
    x, U = _inputs(T=20)
    f(x, U)
    f(x, U)          # compiles, and compares the first steps
    assert 0 < len(seen) <= compiled._VERIFY_STEPS
    seen.clear()
    for _ in range(3):
        torch.testing.assert_close(f(x, U), rnn(x, U), rtol=0, atol=0)
    assert explain(f, x, U).path == "compile" and not seen


@pytest.mark.parametrize("fn, why", [
    (with_print, None), (index_as_number, "as a number"), (in_place, None), (append_first, None),
    (early_exit, None),
])
def test_bodies_that_cannot_be_a_pure_step_keep_python(fn, why, eager_backend, capsys):
    f = autovec(fn, fallback="compile")
    x, U = _inputs()
    ex = explain(f)
    assert ex.loops[0].strategy == "python"
    assert "_av_step" not in ex.rewritten_source
    for _ in range(2):
        got, want = f(x, U), fn(x, U)
        torch.testing.assert_close(got, want)


def test_the_iterable_is_evaluated_once(eager_backend):
    calls = []

    def steps(n):
        calls.append(n)
        return range(n)

    def loop(x, U):
        h = torch.zeros(U.shape[1])
        for t in steps(x.shape[0]):
            h = torch.tanh(h @ U + x[t])
        return h

    f = autovec(loop, fallback="compile")
    x, U = _inputs()
    for _ in range(3):
        torch.testing.assert_close(f(x, U), loop(x, U))
    assert calls == [x.shape[0]] * 6


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="inductor needs a C compiler")
def test_inductor_compiles_an_rnn_step_exactly():
    """The real default backend, once (a cold compile takes seconds on a CPU): its step is kept
    only where it gives the Python step's bits (inductor's tanh / sigmoid / cos kernels round
    otherwise than eager's on some CPUs, and then the loop keeps Python)."""
    f = autovec(rnn, fallback="compile")
    x, U = _inputs()
    f(x, U)
    ex = explain(f, x, U)
    if "torch.compile failed" in _notes(ex):
        pytest.skip(_notes(ex))
    assert ex.path == "compile" or "results differ" in _notes(ex), _notes(ex)
    for _ in range(2):
        got, want = f(x, U), rnn(x, U)
        assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_a_step_verified_without_autocast_is_not_reused_under_it(eager_backend):
    """(probeH: the compiled step was checked on plain calls and then reused under
    `torch.autocast`, where dynamo compiled another graph nothing compared with the loop)"""
    f = autovec(rnn, fallback="compile")
    x, U = _inputs()
    f(x, U)
    f(x, U)
    assert explain(f, x, U).path == "compile"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = f(x, U), rnn(x, U)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        ex = explain(f, x, U)
    assert ex.path == "python" and "autocast" in _notes(ex)


def test_a_step_is_verified_again_under_no_grad(eager_backend):
    f = autovec(rnn, fallback="compile")
    x, U = _inputs()
    f(x, U)
    f(x, U)
    st = f._autovec_state.runtime.steps[1]
    before = len(st.verify)
    with torch.no_grad():
        got, want = f(x, U), rnn(x, U)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert len(st.verify) == before + 1        # (its own signature, compared step by step)


def lag_features(x):
    T = len(x)
    feats = torch.zeros(T, 3)
    for j in range(3):
        feats[1:, j] = x[1:] if T > 1 else x[:0]
    return feats


def test_a_step_storing_into_a_sliced_column_is_python(eager_backend):
    # (the step's driver stores `feats[1:, j] = ..`: written out whole, not as an index tuple
    # `(1:, j)`, which is no Python and made the whole rewrite fail; probeI)
    f = autovec(lag_features, fallback="compile")
    for n in (1, 2, 6):
        x = torch.randn(n)
        for _ in range(3):
            torch.testing.assert_close(f(x), lag_features(x))
    text = str(explain(f, torch.randn(6)))
    assert "internal error" not in text and "compile" in [lp.strategy for lp in explain(f).loops]
