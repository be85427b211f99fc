"""Reads of a tensor the loop writes into that see only what those writes never change (its
shape and dtype as attributes: `eps / y.shape[1]`, `out.dtype`) are no loop-carried dependency
(analysis.loops._metadata_read). `len(y)` and `y.size(1)` pass the tensor itself to the body:
the loop, with its values. Reads of its device (a fresh output's stand-in is on the meta
device while the express runs) or `requires_grad` (a stored value that requires grad turns it
on) still are. Checked against the loop, gradients included."""
import pytest
import torch

from autovec import explain
from conftest import check_loop


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def smooth_rows(y, eps):
    for i in range(y.shape[0]):
        y[i] = y[i] * (1 - eps) + eps / y.shape[1]
    return y


def by_length(y):
    for i in range(y.shape[0]):
        y[i] = y[i] / len(y) + y.dim()
    return y


def fresh_by_shape(x):
    out = torch.empty(x.shape[0], 300)
    for i in range(x.shape[0]):
        out[i] = torch.ones(out.shape[1]) * x[i, 0] + out.shape[-1] + out.ndim
    return out


def cast_to_output(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i].to(out.dtype) * 2
    return out


def read_size_of_other_output(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * out.size(1)
    return out


@pytest.mark.parametrize("fn, make", [
    (smooth_rows, lambda: (torch.rand(30, 7), 0.1)),
    (fresh_by_shape, lambda: (torch.randn(40, 3),)),
    (cast_to_output, lambda: (torch.randn(30, 7), torch.zeros(30, 7, dtype=torch.float64))),
])
def test_shape_and_dtype_reads_of_a_written_tensor_vectorize(fn, make):
    assert check_loop(fn, *make())
    assert explain(fn, *make()).path == "vectorized"


def test_gradients_through_a_shape_read():
    x = torch.randn(40, 3)
    assert check_loop(fresh_by_shape, x, grad=(0,))


def test_len_and_size_of_a_written_tensor_give_the_loops_values():
    x = torch.randn(30, 7)
    check_loop(read_size_of_other_output, x, torch.zeros(30, 7))
    check_loop(by_length, x)
    assert explain(by_length, x).loops[0].strategy == "python"


def on_device(x):
    out = torch.empty(x.shape[0], 300)
    for i in range(x.shape[0]):
        out[i] = torch.ones(300, device=out.device) * x[i, 0]
    return out


def grad_flag(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * (2.0 if out.requires_grad else 3.0)
    return out


def grown(x):
    acc = x[:1]
    sizes = torch.zeros(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        sizes[i] = acc.shape[0]
        acc = torch.cat([acc, x[i:i + 1]])
    return sizes, acc


def test_reads_a_write_can_change_keep_the_loop():
    x = torch.randn(12, 3)
    for fn, args in ((on_device, (x,)), (grad_flag, (x, torch.zeros(12, 3)))):
        assert explain(fn, *args).loops[0].strategy == "python", fn.__name__
        assert "loop-carried" in explain(fn, *args).loops[0].reason
    w = torch.randn(12, 3, requires_grad=True)
    out1, out2 = torch.zeros(12, 3), torch.zeros(12, 3)
    from autovec import autovec
    assert torch.equal(grad_flag(w, out1), autovec(grad_flag)(w, out2))
    a, b = grown(x), __import__("autovec").autovec(grown)(x)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
