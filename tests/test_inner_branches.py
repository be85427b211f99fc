"""Inner loops that branch on the data or end early (`for k in range(K): if v < edges[k]: b = k;
break`): the break becomes a flag the rest of the loop runs under (analysis.loops._predicated),
the branches `where`s (lowering.ifconvert._convert_for), each outer iteration's lanes stopping
where the loop stops. Checked against the loop: values, dtypes, the Python numbers carried (ints
and bools; a float keeps the loop), and what keeps the loop."""
import pytest
import torch

from autovec import autovec, explain
from conftest import check_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def bucketize(values, edges):
    buckets = torch.empty(len(values), dtype=torch.long)
    for i in range(len(values)):
        v = values[i]
        b = len(edges)
        for k in range(len(edges)):
            if v < edges[k]:
                b = k
                break
        buckets[i] = b
    return buckets


def first_hit(topk, labels, k):
    hits = torch.zeros(labels.shape[0])
    for i in range(labels.shape[0]):
        hit = torch.zeros(())
        for j in range(k):
            if topk[i, j] == labels[i]:
                hit = torch.ones(())
                break
        hits[i] = hit
    return hits


def running_max(x):
    out = torch.empty(x.shape[0])
    arg = torch.empty(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        best, at = x[i, 0], 0
        for j in range(1, x.shape[1]):
            if x[i, j] > best:
                best, at = x[i, j], j
        out[i] = best
        arg[i] = at
    return out, arg


def n_step_returns(rewards, dones, gamma, n):
    targets = torch.zeros(len(rewards))
    for t in range(len(rewards) - n):
        ret = torch.zeros(())
        for k in range(n):
            ret += gamma ** k * rewards[t + k]
            if dones[t + k]:
                break
        targets[t] = ret
    return targets


def nested_break(x, th):
    out = torch.zeros(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        c = 0
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                c = c + 1
                if x[i, j] > th:
                    break
                c = c + 10
            else:
                c = c - 3         # (`c * 2` keeps the loop: a product may outgrow int64, test_inner_row_stores)
        out[i] = c
    return out


def else_break(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        acc = torch.zeros(())
        for j in range(x.shape[1]):
            v = x[i, j]
            if v > 0:
                acc = acc + v
            else:
                break
        out[i] = acc * 2
    return out


def flag_and_count(x):
    out = torch.zeros(x.shape[0], dtype=torch.long)
    seen = torch.zeros(x.shape[0], dtype=torch.bool)
    for i in range(x.shape[0]):
        found = False
        n = 0
        for j in range(x.shape[1]):
            if x[i, j] > 1.0:
                found = True
            n += 1
            if found and x[i, j] < 0:
                break
        out[i] = n
        seen[i] = found
    return out, seen


def narrow_update(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        acc = torch.zeros(())                    # float32, updated by float64 values: stays float32
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                acc += x[i, j] * 1.5
        out[i] = acc
    return out


def _data(seed):
    g = torch.Generator().manual_seed(seed)
    return g, torch.randn(60, 7, generator=g)


@pytest.mark.parametrize("fn, make", [
    (bucketize, lambda g, x: (torch.rand(80, generator=g) * 10, torch.linspace(0, 10, 9))),
    (first_hit, lambda g, x: (torch.randint(0, 9, (50, 4), generator=g), torch.randint(0, 9, (50,), generator=g), 4)),
    (running_max, lambda g, x: (x,)),
    (n_step_returns, lambda g, x: (torch.randn(70, generator=g), torch.rand(70, generator=g) < 0.25, 0.9, 5)),
    (nested_break, lambda g, x: (x, 1.0)),
    (else_break, lambda g, x: (x,)),
    (flag_and_count, lambda g, x: (x,)),
    (narrow_update, lambda g, x: (x.double(),)),
])
def test_inner_loops_on_the_data_run_under_vmap(fn, make):
    g, x = _data(3)
    args = make(g, x)
    fast = autovec(fn)
    for _ in range(3):
        want, got = fn(*args), fast(*args)
        for w, o in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            assert w.dtype == o.dtype and torch.equal(w, o)
    assert fast._autovec_state.runtime.ran == {1: "vmap"}
    assert explain(fn, *args).path == "vectorized"


def test_gradients_through_an_inner_loop_that_ends_early():
    g, x = _data(4)
    # (with gradients, branches on the data keep the loop: the rows' unselected sides could give NaN)
    assert check_loop(else_break, x, grad=(0,)) == set()
    assert check_loop(n_step_returns, torch.randn(40, generator=g), torch.rand(40, generator=g) < 0.3, 0.9, 3)


def float_best(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        best = -1.0
        for j in range(x.shape[1]):
            if x[i, j] > best:
                best = float(x[i, j])          # a Python float in some rows, from one merge on
        out[i] = best
    return out


def float_scale(x):
    out = torch.zeros(x.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        s = 0.1
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                s = s * 3.3                      # Python floats: doubles, which a float32 batch rounds
        out[i] = s
    return out


def int_meets_floats(values, edges):
    out = torch.empty(len(values), dtype=torch.float64)
    for i in range(len(values)):
        b = 0
        for k in range(len(edges)):
            if values[i] < edges[k]:
                b = k
                break
        out[i] = b / 3                           # a Python float in the loop, float32 in a batch
    return out


def temp_after(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            last = x[i, j]
            if last > 1:
                break
        out[i] = last                            # bound in the inner loop: some lanes never saw it
    return out


def test_what_no_batch_holds_keeps_the_loop():
    g, x = _data(5)
    for fn, args, why in ((float_best, (x,), None), (float_scale, (x,), None),
                          (int_meets_floats, (torch.rand(30, generator=g) * 10, torch.linspace(0, 10, 6)),
                           "meets float arithmetic"),
                          (temp_after, (x,), "read after it")):
        fast = autovec(fn)
        want, got = fn(*args), fast(*args)
        assert want.dtype == got.dtype and torch.equal(want, got)
        outer = explain(fn, *args).loops[0]
        if why is None:
            assert explain(fn, *args).path == "python" and not fast._autovec_state.runtime.ran
        else:
            assert outer.strategy == "python" and why in outer.reason


def index_after_break(x):
    out = torch.zeros(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        j = -1
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                break
        out[i] = j                               # where each row's loop stopped
    return out


def counter_in_floats(x):
    out = torch.zeros(x.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        n = 0
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                n += 1
        out[i] = n * 0.1                         # a Python float: double precision in the loop
    return out


def flag_in_floats(x):
    out = []
    for i in range(x.shape[0]):
        f = False
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                f = True
                break
        out.append(f * 0.1)
    return out


def half_scaled(x):
    out = torch.zeros(x.shape[0], dtype=torch.float16)
    for i in range(x.shape[0]):
        acc = torch.zeros((), dtype=torch.float16)
        for k in range(x.shape[1]):
            if x[i, k] > 0:
                acc += x[i, k] * 1.1             # float32 arithmetic, one rounding: vmap would round 1.1 first
        out[i] = acc
    return out


def index_break(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        s = torch.zeros(())
        for k in range(x.shape[1]):
            if x[i, k] > 1:
                break
            if k == 2:                           # a break on the inner index alone beside one on the data
                break
            s = s + x[i, k]
        out[i] = s
    return out


def test_probe_findings_give_the_loops_answers():
    g, x = _data(8)
    for fn, args in ((index_after_break, (x,)), (counter_in_floats, (x,)), (flag_in_floats, (x,)),
                     (half_scaled, (x.half(),)), (index_break, (x,))):
        fast = autovec(fn)
        for _ in range(3):
            want, got = fn(*args), fast(*args)
            if isinstance(want, list):
                assert want == got and all(type(a) is type(b) for a, b in zip(want, got))
            else:
                assert want.dtype == got.dtype and torch.equal(want, got)
        assert fast._autovec_state.error is None
    why = explain(index_after_break, x).loops[0].reason
    assert "the index of the inner loop" in why and "may end early" in why
    assert "meets float arithmetic" in explain(counter_in_floats, x).loops[0].reason
    assert autovec(index_break)(x) is not None and explain(index_break, x).path == "vectorized"


# `continue` in an inner loop: `if c: continue` then the rest, read as `if c: .. else: rest`

def skip_negatives(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        acc = torch.zeros(())
        for j in range(x.shape[1]):
            if x[i, j] < 0:
                continue
            acc = acc + x[i, j]
        out[i] = acc
    return out


def skip_then_store(x):
    out = torch.full_like(x, -1.0)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] < -0.5:
                continue
            out[i, j] = x[i, j] * 2
        out[i, 0] = 7.0
    return out


def skip_count_break(x):
    out = torch.zeros(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        c = 0
        for j in range(x.shape[1]):
            if x[i, j] < 0:
                continue
            c += 1
            if c > 3:
                break
        out[i] = c
    return out


@pytest.mark.parametrize("fn", [skip_negatives, skip_then_store, skip_count_break])
def test_continue_in_an_inner_loop(fn):
    from conftest import check_loop
    x = torch.randn(30, 8, generator=torch.Generator().manual_seed(11))
    assert check_loop(fn, x)
    assert explain(fn, x).loops[0].strategy != "python"
