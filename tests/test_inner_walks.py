"""An inner loop over loop-invariant values (`for c in coeffs`, `for W, b in zip(Ws, bs)`) runs as
it is inside the outer loop's batched body (analysis.loops walked_names), as an inner loop over
`range(..)` does: Horner's rule per sample, a per-sample MLP over a list of layers. The batch
walks the values once where the loop walks them again in every outer iteration, so each must be
a list, tuple, range or tensor (runtime._walked_free): a generator keeps the loop, which uses it
up in the first outer iteration as written."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def horner(x, coeffs):
    ys = []
    for xi in x:
        y = torch.zeros((), dtype=x.dtype)
        for c in coeffs:
            y = y * xi + c
        ys.append(y)
    return torch.stack(ys)


def horner_indexed(x, coeffs):
    out = torch.empty_like(x)
    for i in range(len(x)):
        y = 0.0
        for c in coeffs:
            y = y * x[i] + c
        out[i] = y
    return out


def mlp_per_sample(x, Ws, bs):
    out = []
    for i in range(x.shape[0]):
        h = x[i]
        for W, b in zip(Ws, bs):
            h = torch.tanh(h @ W + b)
        out.append(h)
    return torch.stack(out)


def weighted_powers(x, ws):
    out = []
    for i in range(x.shape[0]):
        acc = torch.zeros(())
        for k, w in enumerate(ws, 1):
            acc = acc + w * x[i] ** k
        out.append(acc)
    return torch.stack(out)


def popping(x, coeffs):
    out = []
    for i in range(x.shape[0]):
        y = x[i] * 0
        for c in coeffs:
            y = y + c * x[i]
        out.append(y)
    return torch.stack(out), len(coeffs)


def _same(fn, make, calls=3):
    fast = autovec(fn)
    for _ in range(calls):
        torch.manual_seed(0)
        a = make()
        torch.manual_seed(0)
        b = make()
        want, got = fn(*a), fast(*b)
        if isinstance(want, tuple):
            for p, q in zip(want, got):
                assert torch.equal(p, q) if isinstance(p, torch.Tensor) else p == q
        else:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    torch.manual_seed(0)
    return explain(fast, *make())


@pytest.mark.parametrize("seq", [list, tuple, torch.tensor])
def test_horner_over_a_list_tuple_or_tensor_of_coefficients(seq):
    ex = _same(horner, lambda: (torch.randn(20, dtype=torch.float64), seq([1.0, -0.5, 0.25, 0.1])))
    assert ex.path == "vectorized"


def test_horner_into_a_preallocated_output():
    ex = _same(horner_indexed, lambda: (torch.randn(20, dtype=torch.float64), [0.5, 2.0, -1.0]))
    assert ex.path == "vectorized"


@pytest.mark.parametrize("grad", [False, True])
def test_a_per_sample_mlp_over_lists_of_layers(grad):
    def make():
        Ws = [torch.randn(4, 5, requires_grad=grad), torch.randn(5, 3, requires_grad=grad)]
        bs = [torch.randn(5, requires_grad=grad), torch.randn(3, requires_grad=grad)]
        return torch.randn(12, 4), Ws, bs
    ex = _same(mlp_per_sample, make)
    # (with grad the layers, read through zip, count as loop-invariant work on tensors that
    # require grad, which runtime._shared_gradients keeps on the loop; the values and gradients
    # agree either way)
    assert ex.path == ("python" if grad else "vectorized")
    if grad:
        torch.manual_seed(0)
        a = make()
        torch.manual_seed(0)
        b = make()
        mlp_per_sample(*a).sum().backward()
        autovec(mlp_per_sample)(*b).sum().backward()
        for p, q in zip(a[1] + a[2], b[1] + b[2]):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)


def test_enumerate_from_one():
    ex = _same(weighted_powers, lambda: (torch.randn(15), [0.5, -1.0, 2.0]))
    assert ex.path == "vectorized"


def test_a_generator_is_used_up_by_the_first_outer_iteration_as_written():
    x = torch.randn(6, dtype=torch.float64)
    want = horner(x, (c for c in [1.0, 2.0, 3.0]))
    fast = autovec(horner)
    fast(x, [1.0, 2.0])       # (the first call, on a list, vectorizes)
    got = fast(x, (c for c in [1.0, 2.0, 3.0]))
    assert torch.equal(got, want)
    assert torch.equal(want[1:], torch.zeros(5, dtype=torch.float64))   # (the loop's own answer)
    assert explain(horner, x, iter([1.0, 2.0])).path == "python"


def test_an_iterator_over_a_tensor_is_refused_too():
    x = torch.randn(6)
    it = iter(torch.tensor([1.0, 2.0]))
    want = horner(x, iter(torch.tensor([1.0, 2.0])))
    assert torch.equal(autovec(horner)(x, it), want)


def test_the_values_walked_are_the_same_after_the_call():
    coeffs = [1.0, 2.0, 3.0]
    _same(popping, lambda: (torch.randn(5), coeffs))
    assert coeffs == [1.0, 2.0, 3.0]
