"""Appended literals (`log.append((i, loss[i].item()))`, dicts, lists, nested): each part that
changes per iteration is a batch of its own, and the literal is put back together per element
(runtime.records). The elements must be what the loop builds, exactly: the same types (an int
stays an int, a bool a bool, a tensor a tensor) and the same values."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop, ran_modes as _ran


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def exact(a, b) -> bool:
    """The same structure, types and values (floats bit for bit, tensors equal)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(exact(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(exact(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.shape, a.requires_grad) == (b.dtype, b.shape, b.requires_grad) and torch.equal(a, b)
    return a == b


def eval_log(losses, logits, labels):
    records = []
    for i in range(losses.shape[0]):
        pred = logits[i].argmax().item()
        records.append({"idx": i, "loss": losses[i].item(), "correct": pred == labels[i].item()})
    return records


def pairs(x, y):
    out = []
    for i in range(x.shape[0]):
        out.append((i, x[i].sum().item(), y[i].item(), x[i].max() > 0))
    return out


def filtered(x, y, tag):
    out = []
    for i in range(x.shape[0]):
        if x[i, 0] > 0:
            out.append({"i": i, "tag": tag, "v": x[i, 1].item(), "row": x[i], "ok": bool(y[i] == 2)})
    return out


def comprehension(x):
    return [(r.argmax().item(), r.norm().item()) for r in x]


def comprehension_if(x, w):
    return [[a.item(), b.item() * 2.0] for a, b in zip(x[:, 0], w) if b > 0]


def nested(x):
    out = []
    for i in range(x.shape[0]):
        out.append({"a": (i, x[i, 0].item()), "b": [x[i, 1].item(), "const"]})
    return out


def tensors(x):
    out = []
    for i in range(x.shape[0]):
        v = x[i] * 2
        out.append((v, v.sum()))
    return out


def enumerate_zip(x, w):
    recs = []
    for i, (row, wi) in enumerate(zip(x, w)):
        recs.append({"idx": i, "s": (row * wi).sum().item(), "w": wi.item()})
    return recs


def caller_list(x, log):
    for i in range(x.shape[0]):
        log.append((x[i].mean().item(), i))
    return len(log)


def grid(x):
    out = []
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out.append((i, j, x[i, j].item()))
    return out


def duplicate_keys(x):
    out = []
    for i in range(x.shape[0]):
        out.append({"k": i, "v": x[i].item(), "k": x[i].item() * 2})     # noqa: F601 (the later wins)
    return out


def make_eval():
    g = torch.Generator().manual_seed(1)
    return (torch.rand(30, generator=g), torch.randn(30, 5, generator=g), torch.randint(0, 5, (30,), generator=g))


CASES = [
    (eval_log, make_eval),
    (pairs, lambda: (torch.randn(25, 4), torch.randint(0, 4, (25,), dtype=torch.int32))),
    (filtered, lambda: (torch.randn(40, 3), torch.randint(0, 4, (40,)), "train")),
    (comprehension, lambda: (torch.randn(20, 6, dtype=torch.float64),)),
    (comprehension_if, lambda: (torch.randn(30, 2), torch.randn(30, dtype=torch.float64))),
    (nested, lambda: (torch.randn(15, 2, dtype=torch.float16),)),
    (tensors, lambda: (torch.randn(12, 3),)),
    (enumerate_zip, lambda: (torch.randn(18, 4), torch.randn(18))),
    (caller_list, lambda: (torch.randn(16, 3), [("earlier", -1)])),
    (grid, lambda: (torch.randn(9, 11),)),
    (duplicate_keys, lambda: (torch.randn(14),)),
]


def _seeded(make):
    def again():
        torch.manual_seed(0)
        return make()
    return again


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_appended_literals_are_vectorized_and_exact(fn, make):
    make = _seeded(make)
    f = autovec(fn)
    args, ref = make(), make()
    got = f(*args)
    got = f(*make())        # (the steady state too)
    want = fn(*ref)
    assert _ran(f)
    assert explain(f, *make()).path == "vectorized"
    assert exact(got, want)
    a2 = make()
    f(*a2)
    assert exact(list(a2), list(ref))       # a caller's list gets the same elements
    assert_equivalent(fn, *make())


def test_tensor_parts_keep_gradients():
    x = torch.randn(10, 3, requires_grad=True)
    got, want = autovec(tensors)(x), tensors(x)
    assert [v.requires_grad for p in got for v in p] == [v.requires_grad for p in want for v in p]
    assert_equivalent(tensors, torch.randn(10, 3, requires_grad=True), grad=True)


def test_the_index_stays_an_int_and_comparisons_stay_bools():
    out = autovec(eval_log)(*make_eval())
    assert all(type(r["idx"]) is int and type(r["loss"]) is float and type(r["correct"]) is bool for r in out)


def test_explain_shows_the_literal_rebuilt_per_element():
    text = str(explain(autovec(eval_log), *make_eval()))
    assert "{'idx': _av_c0, 'loss': _av_c1, 'correct': _av_c2} for _av_c0, _av_c1, _av_c2 in zip(" in text


def test_nan_and_inf_parts_are_the_loops():
    x = torch.tensor([float("nan"), float("inf"), -0.0, 1.0])
    got = autovec(duplicate_keys)(x)
    want = duplicate_keys(x)
    assert [type(r["v"]) for r in got] == [float] * 4
    assert str(got) == str(want)      # (nan != nan: compared as text, -0.0 included)


def two_literals(x):
    out = []
    for i in range(x.shape[0]):
        out.append((i, x[i].item()))
        out.append((x[i].item(), i))
    return out


def read_in_loop(x):
    out = []
    for i in range(x.shape[0]):
        out.append((len(out), x[i].item()))
    return out


def starred(x, extra):
    out = []
    for i in range(x.shape[0]):
        out.append((x[i].item(), *extra))
    return out


def computed_keys(x, names):
    out = []
    for i in range(x.shape[0]):
        out.append({names[i]: x[i].item()})
    return out


def rows_item(x):
    out = []
    for i in range(x.shape[0]):
        out.append((i, x[i].item()))     # x[i] has several elements: .item() raises
    return out


@pytest.mark.parametrize("fn, args", [
    (two_literals, (torch.randn(8),)),
    (read_in_loop, (torch.randn(8),)),
    (starred, (torch.randn(8), (1, 2))),
    (computed_keys, (torch.randn(4), ["a", "b", "c", "d"])),
], ids=["two_literals", "read_in_loop", "starred", "computed_keys"])
def test_forms_that_keep_the_loop(fn, args):
    f = autovec(fn)
    assert exact(f(*args), fn(*args))
    assert not _ran(f)
    assert explain(f, *args).path == "python"


def test_an_item_that_raises_raises_as_the_loop():
    got = raises_as_loop(RuntimeError, rows_item, torch.randn(6, 2))
    assert "out.append((i, x[i].item()))" in str(got.getrepr())      # (the user's line)
