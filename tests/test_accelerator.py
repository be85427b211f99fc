"""What autovec does differently for tensors on an accelerator, tested on the CPU.

- Indices are read on the host before a batched indexing operation (autovec.indexcheck): on
  CUDA an index out of range in a batched gather is a device-side assert that ends the
  process's use of the GPU, where the loop, indexing with one 0-dim tensor at a time, raises an
  IndexError. AUTOVEC_INDEX_CHECK=always runs the same check on the CPU.
- The cost model keeps constants and decisions per device kind (a GPU's loop of small
  operations costs a launch each).
"""
import json

import pytest
import torch
import torch.nn.functional as F

from autovec import autovec, cost, explain, indexcheck


@pytest.fixture
def checked(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    monkeypatch.setenv("AUTOVEC_INDEX_CHECK", "always")


def gather_rows(x, idx, out):
    for i in range(x.size(0)):
        out[i] = x[idx[i]] * 2
    return out


def triangle_sum(A):
    s = 0.0
    for i in range(1, A.shape[0]):
        for j in range(i + 2):
            s = s + A[i, j] * j
    return s, j


EMB = torch.nn.Embedding(10, 3)


def embed_each(ids):
    return torch.stack([EMB(ids[i]) for i in range(ids.shape[0])])


def pick_each(logits, labels):
    total = torch.zeros(())
    for k in range(logits.shape[0]):
        total = total + torch.log_softmax(logits[k], 0)[labels[k]]
    return total


def _notes(fn, *args):
    return " | ".join(explain(fn, *args).notes)


X34, X45 = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), torch.randn(4, 5)


@pytest.mark.parametrize("fn, good, bad", [
    (gather_rows, lambda: (X34.clone(), torch.tensor([0, 2, 1]), torch.zeros(3, 4)),
     lambda: (X34.clone(), torch.tensor([0, 6, 1]), torch.zeros(3, 4))),
    (embed_each, lambda: (torch.tensor([1, 9, 3]),), lambda: (torch.tensor([1, 10, 3]),)),
    (pick_each, lambda: (X45.clone(), torch.tensor([0, 4, 2, 1])), lambda: (X45.clone(), torch.tensor([0, 5, 2, 1]))),
])
def test_an_index_out_of_range_is_read_on_the_host_and_the_loop_raises(checked, fn, good, bad):
    f = autovec(fn)
    want = fn(*good())
    assert torch.allclose(f(*good()), want)
    assert explain(f, *good()).path == "vectorized"
    with pytest.raises(IndexError) as loop_error:
        fn(*bad())
    with pytest.raises(IndexError) as got:
        f(*bad())
    assert str(got.value) == str(loop_error.value)    # the loop's own error, not the batched one's
    assert "read on the host before a batched" in _notes(f, *bad())
    assert torch.allclose(f(*good()), want)           # later calls with good indices vectorize again
    assert explain(f, *good()).path == "vectorized"


def test_a_loop_nest_index_past_the_end_is_caught_before_the_batched_gather(checked):
    f = autovec(triangle_sum)
    with pytest.raises(IndexError) as want:
        triangle_sum(torch.randn(5, 5))
    with pytest.raises(IndexError) as got:
        f(torch.randn(5, 5))
    assert str(got.value) == str(want.value)
    assert "read on the host before a batched" in _notes(f, torch.randn(5, 5))


def test_without_an_accelerator_the_check_is_off(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    monkeypatch.delenv("AUTOVEC_INDEX_CHECK", raising=False)

    class Refuse(indexcheck.IndexCheck):
        def __enter__(self):
            raise AssertionError("the index check ran for CPU tensors")

    monkeypatch.setattr(indexcheck, "IndexCheck", Refuse)
    f = autovec(gather_rows)
    x, idx = torch.randn(3, 4), torch.tensor([0, 2, 1])
    assert torch.equal(f(x, idx, torch.zeros(3, 4)), x[idx] * 2)
    assert explain(f, x, idx, torch.zeros(3, 4)).path == "vectorized"
    assert not indexcheck.needed(torch.device("cpu")) and indexcheck.needed(torch.device("cuda"))


def _raises_index(fn):
    with pytest.raises(IndexError, match="read on the host"):
        with indexcheck.IndexCheck():
            fn()


def test_the_check_covers_each_indexing_operation():
    x = torch.randn(4, 3)
    good, bad, neg = torch.tensor([0, 3]), torch.tensor([0, 4]), torch.tensor([-1, 0])
    with indexcheck.IndexCheck():
        assert torch.equal(x[neg], x[torch.tensor([3, 0])])           # subscripts allow negatives
        assert torch.equal(x[:, torch.tensor([2])], x[:, 2:3])
        assert torch.equal(x[torch.tensor([True, False, True, False])], x[::2])   # masks: not indices
        assert torch.equal(F.nll_loss(x.T, torch.tensor([0, -100, 3]), ignore_index=-100),
                           F.nll_loss(x.T, torch.tensor([0, -100, 3]), ignore_index=-100))
    for op in (lambda: x[bad], lambda: x[:, torch.tensor([3])], lambda: x[torch.tensor([-5])],
               lambda: x.clone().index_put_((bad,), torch.zeros(2, 3)),
               lambda: x.index_select(0, bad), lambda: x.index_select(0, neg),   # no negatives here
               lambda: x.gather(0, torch.tensor([[4, 0, 0]])),
               lambda: torch.zeros(4).scatter_add_(0, bad, torch.ones(2)),
               lambda: torch.zeros(4, 3).index_add_(0, bad, torch.ones(2, 3)),
               lambda: F.embedding(bad, x), lambda: x.take(torch.tensor([12])),
               lambda: F.nll_loss(x.T, torch.tensor([0, 1, 4]))):
        _raises_index(op)
    with indexcheck.IndexCheck():     # the same indices in range pass
        x.index_select(0, good), F.embedding(good, x), x.take(torch.tensor([-12, 11]))
        torch.zeros(4).scatter_add_(0, good, torch.ones(2))


def test_the_check_sees_indices_inside_vmap():
    x = torch.randn(5, 3)
    with indexcheck.IndexCheck():
        assert torch.equal(torch.func.vmap(lambda j: x[j])(torch.tensor([4, 0])), x[[4, 0]])
    _raises_index(lambda: torch.func.vmap(lambda j: x[j])(torch.tensor([5, 0])))


# ----------------------------------------------------------------------------- cost model per device


def test_constants_are_measured_and_cached_per_device_kind(monkeypatch, tmp_path):
    monkeypatch.setattr(cost, "_constants", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("AUTOVEC_COSTS", raising=False)
    c_cpu = cost.constants("cpu")
    c_meta = cost.constants("meta")      # a device kind other than the CPU, measurable without a GPU
    files = sorted(p.name for p in (tmp_path / "autovec").glob("costs-*.json"))
    assert len(files) == 2 and any("-meta" in f for f in files)
    assert cost.constants("meta") is c_meta and cost.constants() is c_cpu
    assert c_meta["own_op"] == c_cpu["own_op"]      # autovec's own work runs on the host
    assert "batch_op" in json.loads((tmp_path / "autovec" / next(f for f in files if "-meta" in f)).read_text())
    monkeypatch.setattr(cost, "_constants", None)


def test_estimates_use_the_constants_of_the_tensors_device(monkeypatch):
    slow = dict(cost.DEFAULTS, py_iter=50e-6, py_op=20e-6, op=20e-6, batch_op=20e-6)   # launch-bound
    monkeypatch.setattr(cost, "_constants", {"cpu": dict(cost.DEFAULTS), "gpu": slow})
    cpu = cost.estimate("vmap", 2, 3, kind="cpu")
    gpu = cost.estimate("vmap", 2, 3, kind="gpu")
    assert cpu["vectorized"] > cpu["python"] and gpu["vectorized"] < gpu["python"]


def test_calls_on_another_device_kind_keep_their_own_decisions(monkeypatch):
    monkeypatch.delenv("AUTOVEC_MIN_TRIP", raising=False)

    def scale(tag, x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * 2
        return out

    f = autovec(scale)
    x = torch.randn(6)
    assert torch.equal(f(torch.empty(0), x), x * 2)
    rt = f._autovec_state.runtime
    assert rt.kind == "cpu" and rt.decisions and rt.by_kind["cpu"] is rt.decisions
    # the first tensor argument on another device kind ("meta" stands in for a GPU here)
    assert torch.equal(f(torch.empty(0, device="meta"), x), x * 2)
    assert rt.kind == "meta" and rt.decisions is rt.by_kind["meta"] and rt.decisions
    assert rt.by_kind["meta"] is not rt.by_kind["cpu"]
    f(torch.empty(0), x)
    assert rt.kind == "cpu" and rt.decisions is rt.by_kind["cpu"]


CUDA_SCRIPT = """
import sys, torch
sys.path.insert(0, {tests!r})
from autovec import autovec, explain
from test_accelerator import gather_rows, triangle_sum
f, g = autovec(gather_rows), autovec(triangle_sum)
x, out = torch.randn(3, 4, device="cuda"), torch.zeros(3, 4, device="cuda")
good, bad = torch.tensor([0, 2, 1], device="cuda"), torch.tensor([0, 6, 1], device="cuda")
assert torch.equal(f(x, good, out.clone()), x[good] * 2)
assert explain(f, x, good, out.clone()).path == "vectorized"
for fn, args in ((f, (x, bad, out.clone())), (g, (torch.randn(5, 5, device="cuda"),))):
    try:
        fn(*args)
    except IndexError as e:
        print("IndexError:", e)
torch.cuda.synchronize()
assert torch.equal(f(x, good, out.clone()), x[good] * 2)   # the GPU still works
# torch.tensor of a list of CUDA scalars is a CPU tensor of their dtype (the default device)
def listed(x):
    return torch.tensor([v * 2 for v in x])
h = autovec(listed)
for dt in (torch.float32, torch.int32):
    v = torch.arange(50, device="cuda").to(dt)
    want, got = listed(v), h(v)
    assert (got.device, got.dtype) == (want.device, want.dtype) and torch.equal(got, want), (got.device, got.dtype)
    assert explain(h, v).path == "vectorized"
print("ok")
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_an_index_out_of_range_raises_the_loops_index_error():
    # in a child process: a device-side assert would leave this one without a usable GPU
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ, AUTOVEC_MIN_TRIP="1")
    env.pop("AUTOVEC_INDEX_CHECK", None)
    done = subprocess.run([sys.executable, "-c", CUDA_SCRIPT.format(tests=tests)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("IndexError: index") == 2 and done.stdout.rstrip().endswith("ok"), done.stdout


def _helper_plain(v):
    return torch.exp(v) * 2


def _helper_indexing(v, idx):
    return v[idx]


def test_only_bodies_that_may_index_run_under_the_check():
    w = torch.randn(3)
    emb = torch.nn.Embedding(4, 2)
    plain = [lambda a, b: a * b + torch.exp(a).sum(), lambda a: _helper_plain(a) + w,
             lambda a: torch.where(a > 0, a, -a).cumsum(0)]
    indexing = [lambda a, i: a[i], lambda a, i: a.gather(0, i), lambda i: emb(i),
                lambda a, i: _helper_indexing(a, i), lambda a, i: torch.nn.functional.cross_entropy(a, i),
                lambda a: [a][0]]
    assert not any(indexcheck.may_index(f) for f in plain)
    assert all(indexcheck.may_index(f) for f in indexing)
    assert indexcheck.may_index(plain[0], None, indexing[0])


def elementwise(x, y):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.tanh(x[i]) * y[i] + 1
    return out


def test_an_elementwise_loop_vectorizes_without_the_check(checked, monkeypatch):
    class Refuse(indexcheck.IndexCheck):
        def __enter__(self):
            raise AssertionError("the index check ran for a body without indexing")

    monkeypatch.setattr(indexcheck, "IndexCheck", Refuse)
    f = autovec(elementwise)
    x, y = torch.randn(6, 2), torch.randn(6, 2)
    assert torch.allclose(f(x, y), elementwise(x, y))
    assert explain(f, x, y).path == "vectorized"


def test_the_unchecked_scatter_shortcut_is_for_cpu_tensors_only():
    # `_scatter_whole` lets index_add raise on an index out of range: on a GPU that is a
    # device-side assert, so other devices ("meta" stands in) take the checked path
    from autovec.runtime import _scatter_whole
    idx, vals = torch.tensor([0, 2, 2]), torch.ones(3, 2)
    assert _scatter_whole(torch.zeros(3, 2), vals, [idx], "+", 3)[0] == "whole"
    assert _scatter_whole(torch.zeros(3, 2, device="meta"), vals.to("meta"), [idx.to("meta")], "+", 3) is None


# ----------------------------------------------------------------------------- host reads, identities


class _Reads(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts reads of tensor values to the host (a synchronisation on a GPU)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += func.overloadpacket in (torch.ops.aten._local_scalar_dense, torch.ops.aten.is_nonzero)
        return func(*args, **(kwargs or {}))


def focal(logits, labels):
    total = torch.zeros(())
    for k in range(logits.shape[0]):
        logp = torch.log_softmax(logits[k], dim=0)[labels[k]]
        total = total + (1 - torch.exp(logp)) ** 2 * (-logp)
    return total / logits.shape[0]


def test_a_sum_that_starts_from_torch_zeros_reads_one_bound_back(monkeypatch):
    # its start holds no -0.0, so nothing is read to tell (on a GPU, each read waits for the
    # device). What remains is the bound on the partial sums, which tells that no order of the
    # steps passes float32's largest value (runtime._sums_in_range, since stop 32): off the CPU
    # one read; on the CPU the start read as a number (and a few steps as a list, which this mode
    # does not see), cheaper there than operations
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    f = autovec(focal)
    x, y = torch.randn(64, 5), torch.randint(0, 5, (64,))
    for _ in range(3):
        torch.testing.assert_close(f(x, y), focal(x, y))
    with _Reads() as reads:
        f(x, y)
    assert reads.n == 1
    assert explain(f, x, y).path == "vectorized"


def test_an_object_in_a_signature_is_known_by_identity_while_it_lives():
    import gc

    from autovec.runtime import _sig
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    ka = _sig(a)
    assert ka == _sig(a) and hash(ka) == hash(_sig(a)) and ka != _sig(b)
    del a
    gc.collect()
    # a new object may get the freed one's id; the dead entry matches nothing
    c = torch.nn.Linear(2, 2)
    assert ka != _sig(c) and ka[1].ref() is None


def test_the_check_reads_every_index_of_one_operation():
    # (all in one read where they are on one device; CPU indices into a GPU tensor are read one
    # by one, which only a GPU can show)
    x = torch.randn(4, 3)
    with indexcheck.IndexCheck():
        assert torch.equal(x[torch.tensor([0, 3]), torch.tensor([2, 1])], x[[0, 3], [2, 1]])
    _raises_index(lambda: x[torch.tensor([0, 3]), torch.tensor([2, 3])])


def embed_own_table(Ws, tok):
    out = []
    for i in range(tok.shape[0]):
        out.append(F.embedding(tok[i], Ws[i]))
    return torch.stack(out)


@pytest.mark.parametrize("bad", [6, -1])
def test_an_embedding_with_a_table_per_iteration_raises_as_the_loop(monkeypatch, bad):
    # vmap's rule for a batched table flattens the tables: an index past row 3's table read row
    # 4's, and the call returned values where the loop raises (found by the index-check probe)
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    Ws = torch.arange(48.).reshape(8, 6, 1)
    tok = torch.zeros(8, 2, dtype=torch.long)
    f = autovec(embed_own_table)
    torch.testing.assert_close(f(Ws, tok), embed_own_table(Ws, tok))
    tok[3, 1] = bad
    with pytest.raises(IndexError) as want:
        embed_own_table(Ws, tok)
    with pytest.raises(IndexError) as got:
        f(Ws, tok)
    assert str(got.value) == str(want.value)


def test_the_check_covers_bags_margins_and_unpooling():
    W, L = torch.randn(10, 4), torch.randn(3, 5)
    _raises_index(lambda: F.embedding_bag(torch.tensor([[1, 10]]), W, mode="sum"))
    _raises_index(lambda: F.multi_margin_loss(L, torch.tensor([0, 5, 1])))
    _raises_index(lambda: F.multilabel_margin_loss(L, torch.tensor([[0, 5, -1, 0, 0]] * 3)))
    _raises_index(lambda: F.max_unpool1d(torch.randn(1, 1, 3), torch.tensor([[[0, 2, 6]]]), 2))
    with indexcheck.IndexCheck():      # in range (and -1 ending a row's labels) passes
        F.embedding_bag(torch.tensor([[1, 9]]), W, mode="sum")
        F.multi_margin_loss(L, torch.tensor([0, 4, 1]))
        F.multilabel_margin_loss(L, torch.tensor([[0, 4, -1, 0, 0]] * 3))
        F.max_unpool1d(torch.randn(1, 1, 3), torch.tensor([[[0, 2, 5]]]), 2)
    assert indexcheck.may_index(lambda a, y: F.multi_margin_loss(a, y))
