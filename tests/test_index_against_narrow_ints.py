"""The loop index used as a number against integer tensors narrower than int64 (probeB, probeC):
torch casts the loop's Python int to the tensor's dtype and computes there, wrapping (`int8_row >
200` compares with -56, `int8_row - 21` wraps), where the batch's int64 arange promotes the row
instead, and a comparison or reduction after it hides the dtype the one-time check compares. A
body where the index meets other values in arithmetic beside such a tensor keeps the loop in
range or not, in a comparison past the dtype's range (runtime._index_uses, _index_fits);
indexing by it, int arithmetic of the index alone, true division and torch.roll's shift are
batched."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def greater(x):
    out = torch.empty(x.shape, dtype=torch.bool)
    for i in range(x.shape[0]):
        out[i] = x[i] > i
    return out


def where_equal(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.where(x[i] == i, x[i], -1)
    return out


def method_ge(x):
    out = torch.empty(x.shape, dtype=torch.bool)
    for i in range(x.shape[0]):
        out[i] = x[i].ge(i)
    return out


def torch_eq_times(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * torch.eq(x[i], i)
    return out


def comprehension(x):
    return torch.stack([x[i] != i for i in range(x.shape[0])])


def enumerated(x):
    out = []
    for i, r in enumerate(x):
        out.append(r <= i)
    return torch.stack(out)


def counted(x):
    out = torch.empty(x.shape, dtype=torch.bool)
    i = 0
    while i < x.shape[0]:
        out[i] = x[i] < i
        i += 1
    return out


FNS = [greater, where_equal, method_ge, torch_eq_times, comprehension, enumerated, counted]


@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8])
def test_an_index_past_the_range_gives_the_loops_values(fn, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 100, (300, 2), generator=g).to(dtype)
    x[258] = 2          # (258 wraps to 2 in int8 and uint8)
    x[200] = 200 - 256 if dtype == torch.int8 else 200
    f = autovec(fn)
    want = fn(x)
    for _ in range(3):
        got = f(x)
        assert got.dtype == want.dtype and torch.equal(got, want)
    ex = explain(f, x)
    assert ex.path == "python" and "the loop index meets other values beside torch." in str(ex), str(ex)


def difference_compared(x):
    out = torch.empty(x.shape, dtype=torch.bool)
    for i in range(x.shape[0]):
        j = i + 1
        out[i] = (x[i] - j) > 0           # (int8 arithmetic wraps in the loop, within the index's range)
    return out


def test_index_arithmetic_within_the_range_keeps_the_loop():
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-128, 127, (100, 2), generator=g).to(torch.int8)
    f = autovec(difference_compared)
    want = difference_compared(x)
    for _ in range(3):
        assert torch.equal(f(x), want)
    assert explain(f, x).path == "python"
    wide = x.long()           # (int64 rows: the same arithmetic as the batch's)
    assert torch.equal(f(wide), difference_compared(wide))
    assert explain(f, wide).path == "vectorized"


def rolled(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.roll(x[i], i + 1)
    return out


def test_an_index_that_only_indexes_or_shifts_is_batched():
    x = torch.randint(0, 255, (300, 8), dtype=torch.uint8)
    f = autovec(rolled)
    assert torch.equal(f(x), rolled(x))
    assert explain(f, x).path == "vectorized"


@pytest.mark.parametrize("fn", [greater, where_equal, comprehension], ids=lambda f: f.__name__)
def test_a_comparison_within_the_range_is_batched(fn):
    x = torch.randint(0, 100, (100, 2), dtype=torch.int8)
    f = autovec(fn)
    assert torch.equal(f(x), fn(x))
    assert explain(f, x).path == "vectorized"


def nest_greater(x):
    out = torch.empty(x.shape, dtype=torch.bool)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] > i + j
    return out


def test_a_nests_index_past_the_range_gives_the_loops_values():
    x = torch.randint(0, 100, (300, 3), dtype=torch.int8)
    x[258] = 2
    f = autovec(nest_greater)
    want = nest_greater(x)
    for _ in range(3):
        assert torch.equal(f(x), want)
    small = x[:50]
    assert torch.equal(f(small), nest_greater(small))
    assert explain(f, small.long()).path == "vectorized"


# --- values computed from the index, method comparisons, narrow integers made in the body (probeE) ---

def offset_method(x):
    out = torch.empty(x.shape, dtype=torch.bool)
    for i in range(x.shape[0]):
        out[i] = x[i].gt(i + 100)          # (i + 100 passes int8's range where i does not)
    return out


def offset_reversed(x):
    out = torch.empty(x.shape, dtype=torch.bool)
    for i in range(x.shape[0]):
        out[i] = (i + 100) == x[i]
    return out


def made_in_the_body(x):
    out = torch.empty(x.shape, dtype=torch.bool)
    for i in range(x.shape[0]):
        out[i] = x[i].char().ge(i)
    return out


@pytest.mark.parametrize("fn, dtype", [(offset_method, torch.int8), (offset_reversed, torch.int8),
                                       (made_in_the_body, torch.int64)], ids=lambda v: getattr(v, "__name__", str(v)))
def test_values_beyond_the_index_keep_the_loop(fn, dtype):
    x = (torch.arange(200).view(100, 2) % 250 - 120).to(dtype)
    if fn is made_in_the_body:
        x = torch.arange(600).view(300, 2) % 250 - 120
    f = autovec(fn)
    want = fn(x)
    for _ in range(3):
        assert torch.equal(f(x), want)
    assert explain(f, x).path == "python"
