"""The express (autovec/lanes.py `express`): a loop's whole steady state for one signature as one
function, called first by the generated code. Where it answers, the call must give what the
general path (begin, lane, run, consume) gives: the same values, dtypes, strides, gradients,
views and memory shared with the inputs; and what the loop gives. Where anything differs from
the call it was written for, it must leave the call to the general path."""
import copy
import math

import pytest
import torch

from autovec import autovec, explain
from autovec import lanes as lanes_mod
from autovec.runtime import FunctionRuntime
from corpus import CORPUS
from test_lanes import _agree, _variants


@pytest.fixture
def counted(monkeypatch):
    """Counts the calls each express answers ("answered") and leaves ("left") in this test. An
    express that raises (the generated code then takes the general path quietly) fails the test."""
    seen = {"built": 0, "answered": 0, "left": 0, "whole": 0}
    raised = []
    build = lanes_mod.express

    def express(*a, **k):
        fn = build(*a, **k)
        if fn is None:
            return None
        seen["built"] += 1

        def counting(*args):
            try:
                out = fn(*args)
            except Exception as e:
                raised.append(f"{type(e).__name__}: {e}\n{fn.source}")
                raise
            seen["answered" if out is not None else "left"] += 1
            if out is not None and out[0] is FunctionRuntime.expressed and len(out) > 1:
                seen["whole"] += 1      # (a fresh output answered as the batch itself)
            return out
        counting.source, counting.inner = fn.source, fn
        return counting
    monkeypatch.setattr(lanes_mod, "express", express)
    yield seen
    assert not raised, raised[0]


def _storages(args):
    out = set()
    for a in args:
        if isinstance(a, torch.Tensor):
            out.add(a.untyped_storage().data_ptr())
        elif isinstance(a, (list, tuple)):
            out |= _storages(a)
    return out


def _props(v, inputs):
    """What a result is, beyond its values: the general path and the express must agree."""
    if isinstance(v, torch.Tensor):
        return (type(v), v.dtype, tuple(v.shape), v.stride(), v.requires_grad, v._base is None, v.is_leaf,
                type(v.grad_fn).__name__, v.untyped_storage().data_ptr() in inputs)
    if isinstance(v, (list, tuple)):
        return (type(v), tuple(_props(x, inputs) for x in v))
    return (type(v), v if not isinstance(v, float) or not math.isnan(v) else "nan")


def _general(fn):
    """`fn` under autovec with no express (the general path answers every call)."""
    g = autovec(fn)
    g._autovec_state.prepare(raise_strict=False)
    rt = g._autovec_state.runtime
    if rt is not None:
        rt.xp_specs.clear()
    return g


def _same_as_general(fn, fast, general, args):
    a1, a2 = copy.deepcopy(args), copy.deepcopy(args)
    try:
        want = general(*a1)
    except Exception as e:   # noqa: BLE001 (the loop's own error: the express must raise it too)
        with pytest.raises(type(e)):
            fast(*a2)
        return
    got = fast(*a2)
    assert _props(got, _storages(a2)) == _props(want, _storages(a1))
    _agree(fn, fast, args)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_express_agrees_with_the_general_path_and_the_loop(name, counted, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fn, inputs, _, _ = CORPUS[name]
    fast, general = autovec(fn), _general(fn)
    for args in _variants(inputs()):
        for _ in range(5):     # (the lane comes on the third call, the express after it)
            _same_as_general(fn, fast, general, args)


def test_express_answers_steady_calls(counted, monkeypatch):
    """The express is written and answers calls across the corpus (not a path that never runs)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    answering = set()
    for name, (fn, inputs, _, _) in sorted(CORPUS.items()):
        fast = autovec(fn)
        before = counted["answered"]
        for _ in range(6):
            fast(*copy.deepcopy(inputs()))
        if counted["answered"] > before:
            answering.add(name)
    assert {"rows_add", "gen_sum", "gen_max", "gen_any", "helper_rows", "positive_means"} <= answering, \
        answering


def add_rows(u, v):
    out = []
    for k in range(len(u)):
        out.append(u[k] + v[k])
    return torch.stack(out)


def rows_of(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i])          # the rows themselves: views of x
    return torch.stack(out)


def doubled(t):
    return torch.tensor([v * 2 for v in t])


def row_sums(x):
    return sum(r.sum() for r in x)


def zipped_products(a, b):
    return torch.stack([p * q for p, q in zip(a, b)])


def _steady(f, *args, calls=6):
    for _ in range(calls):
        f(*args)


def test_cost_model_steady_state_uses_the_express(counted, monkeypatch):
    """Without AUTOVEC_MIN_TRIP: once the trip count's bucket is decided for the vectorized path."""
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    u, v = torch.randn(4096), torch.randn(4096)
    f = autovec(add_rows)
    _steady(f, u, v, calls=40)
    before = counted["answered"]
    torch.testing.assert_close(f(u, v), u + v)
    assert counted["answered"] == before + 1
    assert f._autovec_state.runtime.ran[1] == "broadcast"


@pytest.mark.parametrize("fn, make", [
    (add_rows, lambda: (torch.randn(6), torch.randn(6))),
    (rows_of, lambda: (torch.randn(5, 3),)),
    (doubled, lambda: (torch.randn(7),)),
    (row_sums, lambda: (torch.randn(4, 3),)),
    (zipped_products, lambda: (torch.randn(5, 2), torch.randn(5, 2))),
])
def test_express_answers_and_leaves(fn, make, counted, monkeypatch):
    """Each loop's express answers its own signature; another dtype, length, layout, gradient,
    or grad mode leaves the call to the general path or answers it as the general path does."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast, general = autovec(fn), _general(fn)
    args = make()
    _steady(fast, *copy.deepcopy(args))
    before = counted["answered"]
    _same_as_general(fn, fast, general, args)
    assert counted["answered"] > before
    variants = [
        tuple(a.double() for a in args),
        tuple(a[:3] for a in args),
        tuple(a.t().contiguous().t() if a.dim() == 2 else a for a in args),
        tuple(a.clone().requires_grad_() for a in args),
        tuple(a.to(torch.float16) for a in args),
    ]
    for other in variants:
        for _ in range(4):
            _same_as_general(fn, fast, general, other)
    with torch.no_grad():
        grads = tuple(a.clone().requires_grad_() for a in args)
        for _ in range(4):
            _same_as_general(fn, fast, general, grads)
    with torch.inference_mode():
        for _ in range(3):
            _same_as_general(fn, fast, general, args)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(3):
            _same_as_general(fn, fast, general, args)


def test_a_stack_of_the_inputs_rows_is_a_copy(counted, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(5, 3)
    f = autovec(rows_of)
    _steady(f, x)
    before = counted["answered"]
    out = f(x)
    assert counted["answered"] == before + 1
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    out.add_(1)
    torch.testing.assert_close(out - 1, x)


def test_the_express_result_is_no_view_and_keeps_gradients(counted, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    u = torch.randn(6, requires_grad=True)
    v = torch.randn(6)
    f = autovec(add_rows)
    _steady(f, u, v)
    before = counted["answered"]
    out = f(u, v)
    assert counted["answered"] == before + 1
    assert out.requires_grad and out._base is None
    (out * torch.arange(6.0)).sum().backward()
    torch.testing.assert_close(u.grad, torch.arange(6.0))
    with torch.no_grad():
        out = f(u, v)
    assert not out.requires_grad
    out.detach_()       # (raises on a view)


def test_a_replaced_hot_runner_drops_the_express(counted, monkeypatch):
    """The express is written for one hot runner: when the runtime replaces it, the express
    leaves the call, drops itself and may be written again."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    u, v = torch.randn(6), torch.randn(6)
    f = autovec(add_rows)
    _steady(f, u, v)
    rt = f._autovec_state.runtime
    old = rt.xp.get(1)
    assert old is not None
    key = next(k for k in rt.hot if k[0] == 1)
    limit, runner, mode = rt.hot[key]
    rt.hot[key] = (limit, runner, mode)     # an equal entry, but another one
    left, built, answered = counted["left"], counted["built"], counted["answered"]
    torch.testing.assert_close(f(u, v), u + v)
    assert counted["left"] == left + 1
    assert counted["built"] == built + 1      # (written again for the new runner, on this call)
    assert rt.xp.get(1) is not old and len(rt.xp_fns[1]) == 1
    torch.testing.assert_close(f(u, v), u + v)
    assert counted["answered"] == answered + 1


def test_a_body_error_goes_to_the_loop(counted, monkeypatch):
    """An error in the body on the express leaves the call to the general path, which runs the
    loop: the user's own exception, from the user's line."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")

    def picked(x, idx):
        out = []
        for i in range(len(x)):
            out.append(x[i] * idx[i])
        return torch.stack(out)
    f = autovec(picked)
    x = torch.randn(4, 3)
    _steady(f, x, torch.randn(4, 3))
    with pytest.raises(RuntimeError, match="size of tensor"):
        f(x, torch.randn(4, 2))
    torch.testing.assert_close(f(x, torch.ones(4, 3)), x)


def test_explain_and_check_see_the_general_path(counted, monkeypatch):
    import autovec as av
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    u, v = torch.randn(6), torch.randn(6)
    f = autovec(add_rows)
    _steady(f, u, v)
    answered = counted["answered"]
    text = str(av.explain(f, u, v))
    assert "broadcast" in text
    assert counted["answered"] == answered    # (explain records the general path's decisions)
    g = autovec(add_rows, check=True)
    _steady(g, u, v)
    torch.testing.assert_close(g(u, v), u + v)


def test_rows_of_other_lengths_leave_the_express(counted, monkeypatch):
    """A tensor with fewer rows than the loop's trip count (one row would broadcast) is the
    loop's IndexError, not a batch."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    u, v = torch.randn(6), torch.randn(6)
    f = autovec(add_rows)
    _steady(f, u, v)
    with pytest.raises(IndexError):
        f(u, torch.randn(1))
    torch.testing.assert_close(f(u, torch.randn(9)[:6] * 0), u)
    g = autovec(zipped_products)
    a, b = torch.randn(5, 2), torch.randn(5, 2)
    _steady(g, a, b)
    torch.testing.assert_close(g(a, b[:1]), a[:1] * b[:1])     # (zip stops at the shorter)


def flat_rows(x):
    out = []
    for i in range(x.shape[0]):
        out.append((x[i] * 2).flatten())
    return torch.stack(out)


def test_a_stacked_view_of_the_batch_is_a_tensor_of_its_own(counted, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(4, 2, 3)
    f = autovec(flat_rows)
    _steady(f, x)
    before = counted["answered"]
    out = f(x)
    assert counted["answered"] == before + 1
    assert out._base is None
    out.detach_()       # (raises on a view)
    torch.testing.assert_close(out, flat_rows(x))


def test_a_bucket_decided_for_the_loop_leaves_the_express(counted, monkeypatch):
    """The express answers only where the trip count's bucket is settled on the vectorized path:
    a bucket the timings settled on the loop runs the loop."""
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    u, v = torch.randn(4096), torch.randn(4096)
    f = autovec(add_rows)
    _steady(f, u, v, calls=40)
    rt = f._autovec_state.runtime
    d = rt.decisions[(1, (4096).bit_length())]
    assert d.final and d.vec and rt.xp.get(1) is not None
    d.vec = False
    answered = counted["answered"]
    calls = []
    begin = rt.begin
    monkeypatch.setattr(rt, "begin", lambda loop_id, space: calls.append(begin(loop_id, space)) or calls[-1])
    torch.testing.assert_close(f(u, v), u + v)
    assert counted["answered"] == answered and calls == [None]     # (the general path, which runs the loop)


def test_a_bucket_still_timed_times_its_vectorized_calls_through_the_express(counted, monkeypatch):
    """While the cost model times a bucket (estimates too close to call), its vectorized calls
    after the express is written take it and record their time: the time compared with the
    loop's is the steady state's, not the general path's (which counts lane and token steps the
    decided bucket's calls skip). A call the decision gives the loop does not take the express."""
    from autovec import cost

    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)
    monkeypatch.setattr(cost, "estimate", lambda *a, **k: {"python": 1e-5, "vectorized": 1e-5})
    times = []
    ran = cost.Decision.vectorized_ran

    def recording(self, seconds, n):
        times.append(counted["answered"])
        return ran(self, seconds, n)
    monkeypatch.setattr(cost.Decision, "vectorized_ran", recording)
    u, v = torch.randn(6), torch.randn(6)
    f = autovec(add_rows)
    answered_python = []
    for _ in range(cost._PY_RUNS + cost._VEC_RUNS + 4):
        rt = f._autovec_state.runtime
        d = rt.decisions.get((1, (6).bit_length())) if rt is not None else None
        before = counted["answered"]
        chose = d is None or d.final or d.choose()
        torch.testing.assert_close(f(u, v), u + v)
        if d is not None and not d.final and not chose:
            answered_python.append(counted["answered"] - before)
    d = rt.decisions[(1, (6).bit_length())]
    assert d.final and d.vec_runs == cost._VEC_RUNS
    # the last timed vectorized calls were the express's: each recorded after it answered
    assert len(times) == cost._VEC_RUNS and times[-1] > times[0] and counted["answered"] >= cost._VEC_RUNS // 2
    assert answered_python and not any(answered_python)


def max_of_elements(x):
    return max(x[i] for i in range(len(x)))


def max_of_sums(x):
    return max(x[i].sum() for i in range(x.shape[0]))


def test_max_keeps_the_loops_views_and_owns_new_values(counted, monkeypatch):
    """max() over the input's own elements is one of them in the loop (a view of x: writing into
    it writes into x); over new per-row values it is a tensor of its own."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    f, g = autovec(max_of_elements), autovec(max_of_sums)
    x = torch.tensor([1.0, 5.0, 2.0])
    y = torch.tensor([[1.0, 2.0], [5.0, 6.0]])
    _steady(f, x)
    _steady(g, y)
    before = counted["answered"]
    r = f(x)
    assert r._base is max_of_elements(x)._base is x
    r.add_(1)
    assert x.tolist() == [1.0, 6.0, 2.0]
    s = g(y)
    assert s.item() == 11.0 and s._base is None
    s.detach_()
    assert counted["answered"] == before + 2


def fill_doubled(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
    return out


def fill_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i]             # the batch is x itself: the output must be a copy
    return out


def fill_wider(x):
    out = torch.empty(x.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i] = x[i].sum()       # float32 values into a float64 output
    return out


def fill_broadcast(x):
    out = torch.zeros(x.shape[0], 3)
    for i in range(x.shape[0]):
        out[i] = x[i, 0] + 1      # one value broadcast into each row
    return out


def fill_shifted(x):
    out = torch.zeros(x.shape[0] + 1, x.shape[1])
    for i in range(x.shape[0]):
        out[i + 1] = x[i] + 1     # rows 1.. only
    return out


def fill_two(x):
    a = torch.empty(x.shape[0])
    b = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        a[i] = x[i].sum()
        b[i] = x[i].max()
    return a, b


def fill_leading_one(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i].sum() + x[0, :1]    # (a value of shape (1,): setitem drops the leading 1)
    return out


def nest_fill(x):
    out = torch.empty(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * 2
    return out


def nest_gram(x):
    out = torch.zeros(x.shape[0], x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            out[i, j] = torch.dot(x[i], x[j])
    return out


def nest_part(x):
    out = torch.zeros(x.shape[0] + 1, x.shape[1])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * 2      # (the last row stays 0)
    return out


def nest_wider(x):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * 2      # (float32 values into a float64 output)
    return out


def fill_doubled_wider(x):
    out = torch.empty(x.shape, dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2          # (float32 rows into a float64 output)
    return out


def fill_dot_wider(x, w):
    out = torch.empty(x.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i] = torch.dot(x[i], w) + 1.0    # (float32 into a float64 output)
    return out


def fill_dot(x, w):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = torch.dot(x[i], w) + 1.0
    return out


def nest_gram_wider(x):
    out = torch.zeros(x.shape[0], x.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            out[i, j] = torch.dot(x[i], x[j])    # (float32 products into a float64 output)
    return out


def fill_columns(x):
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = x[:, j] * 2 + 1        # (columns: the broadcast body computes them in place)
    return out


def fill_columns_bias(x):
    b = torch.arange(x.shape[1], dtype=x.dtype)
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = x[:, j] + b[j]
    return out


def fill_columns_input(x):
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = x[:, j]                # (the input's own memory: copied)
    return out


def fill_columns_wider(x):
    out = torch.empty(x.shape, dtype=torch.float64)
    for j in range(x.shape[1]):
        out[:, j] = x[:, j] * 2            # (float32 columns into a float64 output: converted)
    return out


@pytest.mark.parametrize("fn, whole", [(fill_doubled, True), (fill_rows, False), (fill_wider, False),
                                       (fill_columns, True), (fill_columns_bias, True), (fill_columns_input, False),
                                       (fill_columns_wider, False),
                                       (fill_broadcast, False), (fill_shifted, False), (fill_two, False), (fill_leading_one, True),
                                       (nest_fill, True), (nest_gram, True), (nest_part, False),
                                       (nest_wider, False), (nest_gram_wider, False)])
def test_a_fresh_output_becomes_the_batch_as_on_the_general_path(fn, whole, counted, monkeypatch):
    """A loop that fills a fresh output (`out = torch.empty(..); out[i] = ..`): where the general
    path would make the batch the output itself (fit_store, then `replaces`), the express answers
    it so (`whole`); where it would copy or convert (the batch is the input's memory, another
    dtype, a broadcast value, rows that are not all of it), the express hands its token on."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast, general = autovec(fn), _general(fn)
    x = torch.randn(6, 4)
    _steady(fast, x.clone())
    before, whole_before = counted["answered"], counted["whole"]
    _same_as_general(fn, fast, general, (x,))
    assert counted["answered"] > before
    assert (counted["whole"] > whole_before) == whole
    got = fast(x)
    for r in (got if isinstance(got, tuple) else (got,)):
        assert r.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        r.add_(1)                 # (the result is memory of its own: x stays as it was)
    torch.testing.assert_close(x, x.clone())
    for other in (x[:1].clone(), x.double(), x.clone().requires_grad_(), x.t().contiguous().t(), x[::2]):
        for _ in range(4):
            _same_as_general(fn, fast, general, (other,))
    with torch.no_grad():
        for _ in range(3):
            _same_as_general(fn, fast, general, (x.clone().requires_grad_(),))


@pytest.mark.parametrize("fn, whole", [(fill_doubled, True), (fill_doubled_wider, False), (fill_dot, True),
                                       (fill_dot_wider, False), (nest_gram, True), (nest_gram_wider, False),
                                       (fill_columns, True), (fill_columns_bias, True), (fill_columns_wider, False)])
def test_the_runner_written_into_the_express_makes_its_token_only_where_needed(fn, whole, counted, monkeypatch):
    """A fresh output the batch may become whole: the hot runner's work is written into the
    express (lanes._inline_runner, _express_nest), and the token is made only where the batch is
    not answered whole (another dtype here): then it carries what the runner's would (batched
    products are new memory), and the general path's commit converts, as without the express."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast, general = autovec(fn), _general(fn)
    args = (torch.randn(6, 4),) if fn.__code__.co_argcount == 1 else (torch.randn(6, 4), torch.randn(4))
    _steady(fast, *args)
    src = fast._autovec_state.runtime.xp[1].source
    assert "for _ in (1,):" in src and "RUNNER(" not in src, src
    before, whole_before = counted["answered"], counted["whole"]
    _same_as_general(fn, fast, general, args)
    assert counted["answered"] > before
    assert (counted["whole"] > whole_before) == whole


def test_complex_columns_are_no_whole_answer(counted, monkeypatch):
    """fit_store moves a complex batch back into its rows rather than take it as computed at
    the column dimension: the express hands its token on there too."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast, general = autovec(fill_columns), _general(fill_columns)
    x = torch.randn(6, 4, dtype=torch.complex64)
    _steady(fast, x.clone())
    before, whole_before = counted["answered"], counted["whole"]
    _same_as_general(fill_columns, fast, general, (x,))
    assert counted["answered"] > before and counted["whole"] == whole_before


class _GivesTheTensor:
    """A free value whose `t + self` is `t` itself (an operator that makes no new memory)."""

    def __radd__(self, t):
        return t


_SAME = _GivesTheTensor()


def added_odd(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] + _SAME)
    return torch.stack(out)


def plus_rows(x):
    return torch.stack([+r for r in x])      # unary + gives the row itself


def named_product(x):
    out = []
    for i in range(x.shape[0]):
        y = x[i] * 2
        out.append(y)
    return torch.stack(out)


def filled_odd(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] + _SAME
    return out


@pytest.mark.parametrize("fn", [added_odd, plus_rows, named_product, filled_odd])
def test_a_result_is_never_the_inputs_memory(fn, counted, monkeypatch):
    """The express skips comparing a result's memory with the inputs' only where the loop's
    value is an operator's result on tensors and numbers (lowering.common._new_memory): an
    operator of an outside object may give the tensor itself, and so does unary `+`. (An outside
    object whose class defines an operator in Python now keeps the loop altogether:
    runtime._inert_value; the result is the loop's own, new memory all the same.)"""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast, general = autovec(fn), _general(fn)
    x = torch.randn(5, 3)
    _steady(fast, x)
    before = counted["answered"]
    _same_as_general(fn, fast, general, (x,))
    if fn in (added_odd, filled_odd):
        assert counted["answered"] == before and explain(fast, x).path == "python"
    else:
        assert counted["answered"] > before
    got = fast(x)
    assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    want = x.clone()
    got.add_(1)
    assert torch.equal(x, want)


def large_fill(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2 + 1
    return out


def large_zeros_part(x):
    out = torch.zeros(x.shape[0] + 1, x.shape[1])
    for i in range(x.shape[0]):
        out[i] = x[i] * 2           # (the last row keeps its zeros)
    return out


def large_wider(x):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2           # (float32 values into a float64 output: copied in)
    return out


@pytest.mark.parametrize("fn, whole", [(large_fill, True), (large_zeros_part, False), (large_wider, False)])
def test_a_large_fresh_output_is_let_go_while_the_express_runs(fn, whole, counted, monkeypatch):
    """A fresh output of 256 KiB or more is a stand-in while the express runs (runtime._let_go,
    as the general path releases it): the express answers the batch as the output, or hands its
    token on with the stand-in, which the commit makes again with its fill (the zeros of rows
    the loop does not write); where it does not answer, the output is made again before the
    general path runs (another length, dtype, or grad flag)."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    from autovec import runtime as rt_mod
    fast, general = autovec(fn), _general(fn)
    rows = rt_mod._RELEASE_FLOOR // (4 * 64) + 8
    x = torch.randn(rows, 64)
    _steady(fast, x)
    before, whole_before = counted["answered"], counted["whole"]
    _same_as_general(fn, fast, general, (x,))
    assert counted["answered"] > before
    assert (counted["whole"] > whole_before) == whole
    for other in (x[:rows - 3].clone(), x.double(), x.clone().requires_grad_(), x[:3].clone(), x[::2]):
        for _ in range(3):
            _same_as_general(fn, fast, general, (other,))
    got = fast(x)
    assert got.device.type == "cpu" and got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def filled_on(x, dev):
    out = torch.empty(x.shape[0], x.shape[1], device=dev)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
    return out


def test_a_fresh_output_on_the_meta_device_is_no_stand_in(counted, monkeypatch):
    """The express takes a meta tensor as a fresh output only where it is a stand-in it was given
    (runtime._let_go marks them): the loop's own meta output leaves the call to the general path."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    from autovec import runtime as rt_mod
    x = torch.randn(rt_mod._RELEASE_FLOOR // (4 * 64) + 8, 64)
    f = autovec(filled_on)
    _steady(f, x, "cpu")
    for dev in ("meta", "cpu", "meta"):
        want, got = filled_on(x, dev), f(x, dev)
        assert got.device == want.device and got.shape == want.shape
        if dev == "cpu":
            torch.testing.assert_close(got, want)


def clip_rows(grads, max_norm):
    clipped = []
    for row in grads:
        n = row.norm()
        if n > max_norm:
            row = row * (max_norm / n)
        clipped.append(row)
    return torch.stack(clipped)


def test_a_branching_loop_answers_through_its_lean_body(counted, monkeypatch):
    """A loop that branches on data (its batched body also returns check-only masks for the
    one-time check) is answered by the express with the lean body, as the hot runner runs it,
    for small and large batches; the results are the loop's."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast, general = autovec(clip_rows), _general(clip_rows)
    for rows in (6, 3000):
        g = torch.randn(rows, 8) * 2
        _steady(fast, g, 2.5)
        before = counted["answered"]
        _same_as_general(clip_rows, fast, general, (g, 2.5))
        assert counted["answered"] > before
        for other in (g[:3].clone(), g.double(), g.clone().requires_grad_(), torch.zeros(rows, 8)):
            for _ in range(3):
                _same_as_general(clip_rows, fast, general, (other, 2.5))
    rt = fast._autovec_state.runtime
    leans = {id(c.lean) for c in rt.batched.values() if not isinstance(c, str) and c.lean is not None}
    assert leans and all(id(x.inner.__globals__["CODE"]) in leans for fns in rt.xp_fns.values() for x in fns)


def standardize_columns(x):
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = (x[:, j] - x[:, j].mean()) / x[:, j].std()     # a batched body, stored by column
    return out


def test_a_batched_body_stored_by_column_is_answered_without_raising(counted, monkeypatch):
    # the express's batch-first runner wrote the columns' check through the token before it
    # made one: the express raised on every call and the general path computed the batch again
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(300, 12, generator=torch.Generator().manual_seed(0)) * 3 + 1
    fast = autovec(standardize_columns)
    for _ in range(8):
        assert torch.equal(fast(x), standardize_columns(x))
    assert counted["built"] and counted["answered"]
