"""Tensors of other kinds than plain strided ones (found by the containers probe): a sparse
element in a list the loop walks gave a sparse result; a torch.Tensor subclass with its own
__torch_function__ keeps its type through the loop's operations (`t * 2`, `zeros_like(t)`),
where the batch gave one type to every element, or plain tensors. Such calls keep the loop;
nn.Parameter, whose operations give plain tensors, still vectorizes."""
import pytest
import torch

from autovec import autovec, explain
from test_lanes import scaled as rows_scaled


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


class Tagged(torch.Tensor):
    pass


def sums(ts):
    return torch.tensor([t.sum().item() for t in ts])


def affine(ts):
    res = []
    for t in ts:
        res.append(t * 2 + 1)
    return res


def centred(ts):
    res = []
    for t in ts:
        res.append(torch.zeros_like(t) + t.mean())
    return res


def _same(fn, *args):
    g = autovec(fn)
    for _ in range(3):
        want, got = fn(*args), g(*args)
        for a, b in zip(want if isinstance(want, list) else [want], got if isinstance(got, list) else [got]):
            assert type(a) is type(b) and a.layout == b.layout
            torch.testing.assert_close(b.as_subclass(torch.Tensor) if type(b) is not torch.Tensor else b,
                                       a.as_subclass(torch.Tensor) if type(a) is not torch.Tensor else a)
    return g


def test_sparse_elements_keep_the_loop():
    ts = [torch.ones(3).to_sparse() for _ in range(3)]
    _same(sums, ts)


@pytest.mark.parametrize("fn", [affine, centred])
def test_subclass_elements_keep_their_type(fn):
    plain = [torch.randn(3) for _ in range(3)]
    _same(fn, [plain[0].as_subclass(Tagged)] + plain[1:])
    _same(fn, [p.as_subclass(Tagged) for p in plain])
    assert explain(autovec(fn), plain).path == "vectorized"


def test_subclass_rows_and_parameters():
    x, w = torch.randn(5, 3), torch.randn(3)
    _same(rows_scaled, x.as_subclass(Tagged), w)
    _same(rows_scaled, x, w.as_subclass(Tagged))
    g = _same(rows_scaled, torch.nn.Parameter(x), torch.nn.Parameter(w))
    assert explain(g, torch.nn.Parameter(x), torch.nn.Parameter(w)).path == "vectorized"


@pytest.mark.parametrize("fn", [affine, centred])
def test_a_subclass_call_after_plain_calls(fn):
    """The steady state of plain lists (a settled mode, lanes) must not take a subclass list."""
    g = autovec(fn)
    plain = [torch.randn(3) for _ in range(3)]
    for _ in range(4):
        g(plain)
    tagged = [p.as_subclass(Tagged) for p in plain]
    assert [type(v) for v in g(tagged)] == [type(v) for v in fn(tagged)] == [Tagged] * 3


class UnitStore(torch.Tensor):
    """A subclass whose writes rescale what is stored (its own __torch_function__)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.Tensor.__setitem__:
            with torch._C.DisableTorchFunctionSubclass():
                t = args[0]
                t.div_(t.abs().max().clamp(min=1e-12))
        return out


class Other(torch.Tensor):
    pass


def tanh_into(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i].tanh()
    return out


def doubled_into(x, out):
    for i in range(x.shape[0]):
        out[i] += x[i] * 2
    return out


def test_a_subclass_written_into_keeps_the_loop():
    """Found by the probe of today's paths: the loop calls the output's setitem once per row,
    the batch once; a subclass written into keeps the loop. Two plain subclasses that do not
    combine raise the loop's TypeError, not the batch's dispatch error."""
    from conftest import outcome
    x = torch.randn(5, 3)
    g = autovec(tanh_into)
    for _ in range(3):
        a, b = torch.zeros(5, 3).as_subclass(UnitStore), torch.zeros(5, 3).as_subclass(UnitStore)
        torch.testing.assert_close(g(x, b).as_subclass(torch.Tensor), tanh_into(x, a).as_subclass(torch.Tensor))
    h = autovec(doubled_into)
    for _ in range(3):
        xs = x.as_subclass(Tagged)
        want, got = outcome(doubled_into, xs, torch.zeros(5, 3).as_subclass(Other)), \
            outcome(h, xs, torch.zeros(5, 3).as_subclass(Other))
        assert isinstance(want, tuple) and got == want
