"""In-place tensor methods on a row of an argument or output, as statements, beyond the
arithmetic ones (test_inplace_methods): `x[i].clamp_(min=0)` and the other elementwise methods
read as `x[i] = x[i].clamp(min=0)`, `x[i].copy_(v)` / `fill_(v)` / `zero_()` as stores of `v`
(analysis: _InPlaceUpdates). What the method would do otherwise is checked per call (runtime
_method_fits): an elementwise method's result must keep the row's dtype and shape and need no
gradient (the loop raises or casts otherwise: the loop runs), copy_ drops no leading 1s, fill_
takes one number. Each case runs against the loop on the same arguments: values, dtypes, the
arguments changed in place, errors and gradients, and which path ran."""
import traceback

import pytest
import torch

from autovec import autovec, explain
from conftest import outcome, ran_modes


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def clamp_zero(x):
    for i in range(x.shape[0]):
        x[i].clamp_(min=0)
    return x


def clamp_both(x):
    for i in range(x.shape[0]):
        x[i].clamp_(-0.5, 0.5)
    return x


def clamp_min(x):
    for i in range(x.shape[0]):
        x[i].clamp_min_(0.1)
    return x


def clamp_rows(x, w):
    for i in range(x.shape[0]):
        x[i].clamp_max_(w[i])
    return x


def clamp_by(x, w):
    for i in range(x.shape[0]):
        x[i].clamp_(min=w[i])
    return x


def zero_negative(x, m):
    for i in range(x.shape[0]):
        if m[i] < 0:
            x[i].zero_()
    return x


def fill_rows(x, v):
    for i in range(x.shape[0]):
        x[i].fill_(v[i])
    return x


def fill_some(x, m):
    for i in range(x.shape[0]):
        if m[i] > 0:
            x[i].fill_(3)
    return x


def negate(x):
    for i in range(x.shape[0]):
        x[i].neg_()
    return x


def absolute(x):
    for i in range(x.shape[0]):
        x[i].abs_()
    return x


def relu(x):
    for i in range(x.shape[0]):
        x[i].relu_()
    return x


def root(x):
    for i in range(x.shape[0]):
        x[i].sqrt_()
    return x


def exp(x):
    for i in range(x.shape[0]):
        x[i].exp_()
    return x


def copy_fresh(x, y):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i].copy_(x[i] * 2 + y[i])
    return out


def copy_into(x, y):
    for i in range(x.shape[0]):
        x[i].copy_(y[i] * 2)
    return x


def masked(x, m):
    for i in range(x.shape[0]):
        x[i].masked_fill_(m[i], 0)
    return x


def columns(x):
    for j in range(x.shape[1]):
        x[:, j].clamp_(min=0)
    return x


def nest(x):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j].clamp_(max=0.25)
    return x


def backwards(x):
    for i in reversed(range(x.shape[0])):
        x[i].clamp_(max=0)
    return x


def every_other(x):
    for i in range(0, x.shape[0], 2):
        x[i].zero_()
    return x


def shifted(x):
    for i in range(x.shape[0] - 1):
        x[i + 1].neg_()
    return x


def tail_copy(x, w):
    for i in range(x.shape[0]):
        x[i, 1:].copy_(w[i])
    return x


def two_outputs(x, y):
    for i in range(x.shape[0]):
        x[i].clamp_(min=0)
        y[i].clamp_(max=0)
    return x, y


class Buffer:
    def __init__(self, data):
        self.data = data


def attribute_rows(buf):
    for i in range(buf.data.shape[0]):
        buf.data[i].relu_()
    return buf.data


R = torch.randn


def ints(*shape):
    return torch.randint(-5, 5, shape)


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return (type(b) is type(a) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b) if not a.is_floating_point() else
                type(b) is type(a) and a.dtype == b.dtype and a.shape == b.shape and torch.allclose(a, b, equal_nan=True))
    if isinstance(a, tuple) and a and isinstance(a[0], type) and issubclass(a[0], BaseException):
        return a == b      # (an outcome's error: the same type and message)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    return a == b


def as_loop(fn, make, seeds=(0, 1, 2)):
    """fn and autovec(fn) on equal arguments (several draws): the same outcome and the same
    arguments after it. The modes the last decorated call ran in."""
    fast = autovec(fn)
    for seed in seeds:
        torch.manual_seed(seed)
        want_args = make()
        torch.manual_seed(seed)
        got_args = make()
        want, got = outcome(fn, *want_args), outcome(fast, *got_args)
        assert _same(want, got), (want, got)
        assert all(_same(a, b) for a, b in zip(want_args, got_args))
    return ran_modes(fast)


VECTORIZED = [
    (clamp_zero, lambda: (R(6, 3),)),
    (clamp_zero, lambda: (ints(6, 3),)),
    (clamp_zero, lambda: (R(6, 3, dtype=torch.float16),)),
    (clamp_both, lambda: (R(6, 3),)),
    (clamp_min, lambda: (R(6, 3, dtype=torch.float64),)),
    (clamp_rows, lambda: (R(6, 3), R(6, 3))),
    (clamp_rows, lambda: (R(6, 3), R(6, 1))),            # (a value that broadcasts into the row)
    (clamp_by, lambda: (R(6, 3), R(6, 3))),
    (zero_negative, lambda: (R(6, 3), R(6))),
    (zero_negative, lambda: (torch.rand(6, 3) > 0.5, R(6))),
    (fill_rows, lambda: (R(6, 3), R(6))),
    (fill_rows, lambda: (ints(6, 3), R(6) * 3)),          # (fill_ casts as setitem does)
    (fill_some, lambda: (R(6, 3), R(6))),
    (fill_some, lambda: (torch.zeros(6, 3, dtype=torch.uint8), R(6))),
    (negate, lambda: (R(6, 3),)),
    (absolute, lambda: (ints(6, 3),)),
    (relu, lambda: (R(6, 3),)),
    (root, lambda: (R(6, 3),)),                            # (NaN where negative, as the loop)
    (exp, lambda: (R(6, 3, dtype=torch.float64),)),
    (copy_fresh, lambda: (R(6, 3), R(6, 3))),
    (copy_fresh, lambda: (ints(6, 3), R(6, 3))),          # (float values copied into int rows)
    (copy_into, lambda: (R(6, 3), R(6, 3))),
    (copy_into, lambda: (ints(6, 3), R(6, 3))),
    (copy_into, lambda: (R(6, 3), R(6, 1))),
    (masked, lambda: (R(6, 3), torch.rand(6, 3) > 0.5)),
    (masked, lambda: (ints(6, 3), torch.rand(6, 3) > 0.5)),
    (columns, lambda: (R(4, 5),)),
    (nest, lambda: (R(4, 3),)),
    (backwards, lambda: (R(6, 3),)),
    (every_other, lambda: (R(7, 3),)),
    (shifted, lambda: (R(6, 3),)),
    (tail_copy, lambda: (R(6, 4), R(6, 3))),
    (two_outputs, lambda: (R(6, 3), R(6, 3))),
    (clamp_by, lambda: (lambda x: (x, x.flip(0)))(R(6, 3))),   # (flip copies: no shared memory)
]


@pytest.mark.parametrize("fn, make", VECTORIZED)
def test_in_place_methods_on_rows_vectorize(fn, make):
    assert as_loop(fn, make), "the loop ran"
    assert explain(fn, *make()).loops[0].vectorized


def test_an_attribute_rooted_row():
    x = R(5, 3)
    want = attribute_rows(Buffer(x.clone()))
    fast = autovec(attribute_rows)
    got_buf = Buffer(x.clone())
    got = fast(got_buf)
    assert torch.equal(got, want) and got is got_buf.data
    assert ran_modes(fast)


def test_the_rewrite_reads_as_a_store():
    text = explain(clamp_zero, R(4, 3)).rewritten_source
    assert ".clamp(min=0)" in text and ".clamp_(" not in text


KEPT = [
    # an int row: the result of these is float, which the in-place method refuses to cast
    (clamp_both, lambda: (ints(6, 3),)),
    (clamp_min, lambda: (ints(6, 3),)),
    (root, lambda: (ints(6, 3).abs(),)),
    (negate, lambda: (torch.rand(6, 3) > 0.5,)),            # (bool: both raise)
    # a result of another shape: the method raises, where the store would drop leading 1s
    (clamp_rows, lambda: (R(6, 3), R(6, 1, 3))),
    (clamp_rows, lambda: (R(6, 3), R(6, 2, 3))),
    # a result in a wider dtype: the method casts it back (same kind), the store would too; the
    # loop decides
    (clamp_rows, lambda: (R(6, 3), R(6, 3, dtype=torch.float64))),
    # fill_ takes one number; copy_ drops no leading 1s
    (fill_rows, lambda: (R(6, 3), R(6, 3))),
    (fill_rows, lambda: (R(6, 3), R(6, 1))),
    (copy_into, lambda: (R(6, 3), R(6, 1, 3))),
    (copy_fresh, lambda: (R(6, 3), R(6, 1, 3))),
    # the rows share memory with what the loop reads: later iterations read earlier writes
    (clamp_by, lambda: (lambda x: (x, x))(R(6, 3))),
    (clamp_by, lambda: (lambda x: (x[:6], x[1:]))(R(7, 3))),
    (clamp_by, lambda: (lambda x: (x[1:], x[:6]))(R(7, 3))),
    (clamp_by, lambda: (lambda x: (x, x.transpose(1, 2)))(R(6, 3, 3))),
    (copy_into, lambda: (lambda x: (x[1:], x[:6]))(R(7, 3))),
    # a list of rows, and one row's memory for every row (an expanded tensor)
    (clamp_zero, lambda: ([R(3) for _ in range(4)],)),
    (copy_into, lambda: ([R(3) for _ in range(4)], R(4, 3))),
    (clamp_zero, lambda: (R(3).expand(6, 3),)),
]


@pytest.mark.parametrize("fn, make", KEPT)
def test_what_the_method_would_do_otherwise_keeps_the_loop(fn, make):
    assert not as_loop(fn, make), "vectorized"


def test_an_int_row_raises_from_the_users_line():
    fast = autovec(clamp_both)
    with pytest.raises(RuntimeError) as want:
        clamp_both(ints(5, 3))
    with pytest.raises(RuntimeError) as got:
        fast(ints(5, 3))
    assert str(got.value) == str(want.value)
    last = traceback.extract_tb(got.value.__traceback__)[-1]
    assert last.filename == __file__ and "clamp_(-0.5, 0.5)" in last.line
    assert not ran_modes(fast)


def _grads(fn, make):
    """(outcome of fn(*args) then a backward through its result, the gradients) for the loop
    and for autovec(fn), and the modes autovec's call ran in."""
    results = []
    fast = autovec(fn)
    for f in (fn, fast):
        torch.manual_seed(5)
        args, leaves = make()
        try:
            y = f(*args)
            results.append((y.detach(), torch.autograd.grad(y.pow(2).sum(), leaves)))
        except RuntimeError as e:
            results.append(str(e))
    return results, ran_modes(fast)


def _requiring(*shapes, leaf=False, plain=()):
    def make():
        leaves = [torch.randn(*s, requires_grad=True) for s in shapes]
        return [w if leaf else w * 1 for w in leaves] + [torch.randn(*s) for s in plain], leaves
    return make


@pytest.mark.parametrize("fn, make, vectorized", [
    # the method's backward needs the rows it overwrites: the loop's next row changes the tensor
    # saved, and its backward raises; the batch's would not
    (exp, _requiring((5, 3)), False),
    (relu, _requiring((5, 3)), False),
    (clamp_zero, _requiring((5, 3)), False),
    (clamp_by, lambda: ((lambda w: ([R(5, 3), w], [w]))(torch.randn(5, 3, requires_grad=True))), False),
    # a leaf that requires grad changed in place: the loop raises at once
    (clamp_zero, _requiring((5, 3), leaf=True), False),
    (negate, _requiring((5, 3), leaf=True), False),
    (fill_rows, _requiring((5, 3), leaf=True, plain=((5,),)), False),
    # copy_ and fill_ save nothing: their gradients are a store's
    (copy_into, lambda: ((lambda w: ([R(5, 3), w], [w]))(torch.randn(5, 3, requires_grad=True))), True),
    (copy_into, _requiring((5, 3), (5, 3)), True),
    (copy_fresh, _requiring((5, 3), (5, 3)), True),
    (fill_rows, _requiring((5, 3), (5,)), True),
])
def test_gradients(fn, make, vectorized):
    (want, got), modes = _grads(fn, make)
    if isinstance(want, str):
        assert got == want
    else:
        assert torch.allclose(want[0], got[0])
        assert all(torch.allclose(a, b) for a, b in zip(want[1], got[1]))
    assert bool(modes) == vectorized


def value_used(x):
    out = []
    for i in range(x.shape[0]):
        r = x[i].clamp_(min=0)
        out.append(r * 2)
    return torch.stack(out)


def through_a_name(x):
    for i in range(x.shape[0]):
        r = x[i]
        r.clamp_(min=0)
    return x


def through_a_tensor_index(x, idx):
    for i in range(idx.shape[0]):
        x[idx[i]].clamp_(min=0)      # a copy: x is unchanged
    return x


def reads_the_next_row(x):
    for i in range(x.shape[0] - 1):
        x[i].clamp_(min=x[i + 1])
    return x


def either(x, m):
    for i in range(x.shape[0]):
        if m[i] > 0:
            x[i].clamp_(min=0)
        else:
            x[i].fill_(-1)
    return x


def test_a_method_through_a_name_for_the_row_vectorizes():
    # (`r = x[i]; r.clamp_(min=0)`: r is the row itself, analysis.loops._row_aliases)
    assert as_loop(through_a_name, lambda: (R(6, 3),)), "the loop ran"


@pytest.mark.parametrize("fn, make", [
    (value_used, lambda: (R(6, 3),)),
    (through_a_tensor_index, lambda: (R(6, 3), torch.randint(0, 6, (4, 2)))),
    (reads_the_next_row, lambda: (R(6, 3),)),
    (either, lambda: (R(6, 3), R(6))),
])
def test_forms_left_to_the_loop(fn, make):
    assert not as_loop(fn, make)
    assert not explain(fn, *make()).loops[0].vectorized


def store_or_clamp(x, m):
    for i in range(x.shape[0]):
        if m[i] > 0:
            x[i] = 1
        else:
            x[i].clamp_(min=0.5)     # an int row: raises where it runs; the store beside it casts
    return x


def repeated(x):
    for i in range(x.shape[0]):
        for j in range(3):
            x[i].neg_()              # three times on one row: not one write that wins
    return x


def test_a_method_and_a_store_into_one_row_are_two_writes():
    assert not as_loop(store_or_clamp, lambda: (ints(6, 3), R(6)))
    assert not as_loop(store_or_clamp, lambda: (ints(6, 3), -R(6).abs()))


def test_a_method_repeated_by_an_inner_loop():
    as_loop(repeated, lambda: (R(4, 3),))


def clamp_by_each(x, w):
    for i in range(x.shape[0]):
        for j in range(w.shape[1]):
            x[i].clamp_(min=w[i, j])     # one row clamped by each value in turn
    return x


def test_a_method_on_the_outer_row_in_a_nest():
    as_loop(clamp_by_each, lambda: (R(4, 3), R(4, 5)))


def clamp_overlapping(x, w):
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            x[i + j].clamp_(min=w[i, j])     # rows repeat across (i, j): each clamp sees the last
    return x


def through_index_columns(x, cols):
    for i in range(x.shape[0]):
        x[i, cols].clamp_(min=0)      # a tensor in the subscript: a copy, x is unchanged
    return x


def test_rows_that_repeat_in_a_nest():
    as_loop(clamp_overlapping, lambda: (R(6, 3), R(3, 4, 3)))


def test_a_tensor_in_the_rest_of_the_subscript_keeps_the_loop():
    assert not as_loop(through_index_columns, lambda: (R(5, 4), torch.tensor([0, 2])))


def fill_diagonal(x, v):
    for i in range(x.shape[0]):
        x[i, i].fill_(v[i])
    return x


def test_a_fill_at_an_index_the_loop_cannot_map_keeps_the_loop():
    # (`x[i, i]` is no row of one dimension: not a store of rows, nor a scatter, which would not
    # check what fill_ takes)
    assert not as_loop(fill_diagonal, lambda: (R(4, 4, 3), R(4, 3)))      # the loop raises
    assert not as_loop(fill_diagonal, lambda: (R(4, 4, 3), R(4)))


def store_number(x, w):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=w.dtype)
    for i in range(x.shape[0]):
        out[i] = torch.exp(x[i] * 7).max()          # one number: torch fills the row with it
    return (out * w).sum()


def fill_number(x, w):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=w.dtype)
    for i in range(x.shape[0]):
        out[i].fill_(torch.exp(x[i] * 7).max())
    return (out * w).sum()


def copy_number(x, w):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=w.dtype)
    for i in range(x.shape[0]):
        out[i].copy_(torch.exp(x[i] * 7).max())     # copy_ casts the gradient first, then sums
    return (out * w).sum()


def store_one(x, w):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=w.dtype)
    for i in range(x.shape[0]):
        out[i] = torch.exp(x[i] * 7)[:1]             # (1,): broadcast by copy_, as copy_number
    return (out * w).sum()


@pytest.mark.parametrize("fn", [store_number, fill_number, copy_number, store_one])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_broadcast_value_into_a_narrower_output_has_the_loops_gradient(fn, dtype):
    # (the loop sums a row's gradient in the output's dtype where it fills the row with one
    # number, in the value's where copy_ broadcasts it: float16 sums differ from float64 ones)
    torch.manual_seed(0)
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 4, dtype=dtype)
    fast = autovec(fn)
    want, = torch.autograd.grad(fn(x, w), x)
    got, = torch.autograd.grad(fast(x, w), x)
    assert torch.equal(want, got)
    assert ran_modes(fast)


def test_fill_of_a_number_past_float16s_range_raises_as_the_loop():
    """fill_ checks the number's conversion (a finite one past 65504 raises) where the store
    into float16 gives inf (found by the probe of in-place methods); inf itself fills."""
    def fill(x, c):
        for i in range(x.shape[0]):
            x[i].fill_(c)
        return x

    f = autovec(fill)
    for _ in range(3):
        x = torch.randn(5, 3).half()
        torch.testing.assert_close(f(x.clone(), 2.5), fill(x.clone(), 2.5))
    assert ran_modes(f) in ({"broadcast"}, {"batched"})
    for c in (1e10, 65520.0, -1e39, 2 ** 40):
        with pytest.raises(RuntimeError, match="overflow"):
            fill(torch.randn(5, 3).half(), c)
        with pytest.raises(RuntimeError, match="overflow"):
            f(torch.randn(5, 3).half(), c)
    got = f(torch.randn(5, 3).half(), float("inf"))
    assert torch.equal(got, fill(torch.randn(5, 3).half(), float("inf")))


# methods (or stores) on disjoint parts of one row, one after another (analysis._disjoint_read;
# found lost by the real-world probe: box clipping)

def clip_coordinates(b, W: float, H: float):
    for i in range(b.shape[0]):
        b[i, 0].clamp_(0, W)
        b[i, 1].clamp_(0, H)
        b[i, 2].clamp_(0, W)
        b[i, 3].clamp_(0, H)
    return b


def clip_even_odd(b, W: float, H: float):
    for i in range(b.shape[0]):
        b[i, 0::2].clamp_(0, W)
        b[i, 1::2].clamp_(0, H)
    return b


def overlapping_parts(b):
    for i in range(b.shape[0]):
        b[i, 0::2].mul_(2)
        b[i, 0::1].add_(1)          # reads what the first wrote
    return b


def same_step_overlap(b):
    for i in range(b.shape[0]):
        b[i, 0::2].clamp_(-10, 10)
        b[i, 2::2].clamp_(-1, 1)    # elements 2, 4, ..: the first wrote them too
    return b


def crossed_stores(b):
    for i in range(b.shape[0]):
        b[i, 0] = b[i, 1] * 2
        b[i, 1] = b[i, 0] + 1       # reads what the first wrote
    return b


# (parts that meet, read after a write: the row copied at its first mention, analysis._row_local,
# one row per iteration under vmap)
@pytest.mark.parametrize("fn, batched", [(clip_coordinates, True), (clip_even_odd, True),
                                         (overlapping_parts, "vmap"), (same_step_overlap, False),
                                         (crossed_stores, "vmap")],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_disjoint_parts_of_a_row_one_after_another(fn, batched):
    f = autovec(fn)
    extra = (10.0, 5.0) if fn in (clip_coordinates, clip_even_odd) else ()
    for _ in range(3):
        b = torch.randn(8, 6) * 20
        want, got = fn(b.clone(), *extra), f(b.clone(), *extra)
        assert torch.equal(got, want)
    assert ran_modes(f) == ({batched} if isinstance(batched, str) else {"batched"} if batched else set())


def test_an_update_whose_value_reads_the_row_for_its_shape(monkeypatch):
    # `torch.ones_like(c[b])` reads the row's shape and dtype into new memory before the update
    # (probeA: a point cloud jittered in place)
    def jitter(c, s):
        for b in range(c.shape[0]):
            c[b] += torch.clamp(0.01 * torch.ones_like(c[b]) * s[b], -0.05, 0.05)
        return c
    fast = autovec(jitter)
    c, s = torch.randn(300, 16, 3), torch.randn(300)
    for _ in range(3):
        torch.testing.assert_close(fast(c.clone(), s), jitter(c.clone(), s))
    assert explain(fast, c.clone(), s).path == "vectorized"
