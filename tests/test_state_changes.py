"""State that changes between calls, found by the state probe of stop 22: a value the loop reads
through an outside object (`self.scale`, `cfg["s"]`, `ws[0]`) that changes type after the steady
state kept the first type's answer (a float where the loop now gives a tensor with its gradient,
floats where it gives ints). Such values' types are part of the argument signature."""
import pytest
import torch

from autovec import autovec, explain


class Loss:
    def __init__(self, scale):
        self.scale = scale

    def total(self, x):
        t = 0.0
        for i in range(x.shape[0]):
            t += x[i].sum().item() * self.scale
        return t

    def rows(self, x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * self.scale
        return out


CFG = {"s": 2.0}


def scaled_list(x):
    return [x[i].sum().item() * CFG["s"] for i in range(x.shape[0])]


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, list):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.requires_grad == want.requires_grad
        torch.testing.assert_close(got, want)
    else:
        assert got == pytest.approx(want)


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


@pytest.mark.parametrize("method", ["total", "rows"])
def test_an_attribute_that_changes_type(method):
    loss = Loss(2.0)
    fast = autovec(getattr(Loss, method))
    slow = getattr(Loss, method)
    x = torch.randn(30, 4)
    for scale in (2.0, 3, torch.tensor(0.5, requires_grad=True), torch.tensor(0.5, dtype=torch.float64), 2.0):
        loss.scale = scale
        for _ in range(4):
            got, want = fast(loss, x), slow(loss, x)
            _same(got, want)
        if isinstance(scale, torch.Tensor) and scale.requires_grad:
            got.sum().backward() if isinstance(got, torch.Tensor) and got.dim() else got.backward()
            g, scale.grad = scale.grad.clone(), None
            (want.sum() if want.dim() else want).backward()
            torch.testing.assert_close(g, scale.grad)
            scale.grad = None


def test_a_dict_value_that_changes_type(monkeypatch):
    fast = autovec(scaled_list)
    x = torch.randn(30, 4)
    for s in (2.0, 3, 2.0, torch.tensor(1.5)):
        monkeypatch.setitem(CFG, "s", s)
        for _ in range(4):
            _same(fast(x), scaled_list(x))


def test_reading_through_an_object_keeps_its_lane():
    loss = Loss(torch.tensor(0.5))
    fast = autovec(Loss.rows)
    x = torch.randn(30, 4)
    for _ in range(6):
        fast(loss, x)
    rt = fast._autovec_state.runtime
    assert rt.lanes and rt.peeks
    assert explain(fast, loss, x).path == "vectorized"


def weighted(x, *, w=torch.ones(4)):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * w)
    return torch.stack(out)


def offset(x, b=1.0):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] + b
    return out


def doubled(x, b=1.0):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2 + b
    return out


def test_defaults_and_code_changed_on_the_original(monkeypatch):
    x = torch.randn(20, 4)
    fast_w, fast_b = autovec(weighted), autovec(offset)
    for _ in range(4):
        fast_w(x), fast_b(x)
    kw, defaults, code = weighted.__kwdefaults__["w"], offset.__defaults__, offset.__code__
    try:
        weighted.__kwdefaults__["w"] = torch.full((4,), 5.0)      # changed in place
        assert torch.equal(fast_w(x), weighted(x))
        offset.__defaults__ = (3.0,)                               # reassigned
        for _ in range(3):
            assert torch.equal(fast_b(x), offset(x))
        offset.__code__ = doubled.__code__                         # another body
        for _ in range(3):
            assert torch.equal(fast_b(x), doubled(x, 3.0))
        assert explain(fast_b, x).path == "vectorized"
    finally:
        weighted.__kwdefaults__["w"] = kw
        offset.__defaults__, offset.__code__ = defaults, code
