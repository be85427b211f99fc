"""What a rewritten loop returns is a tensor of its own where the loop's is: torch.stack,
torch.cat and an output the loop allocates and fills are no views (`detach_()` and in-place
shape changes raise on a view), also where the batch was reshaped or flattened to give them
(runtime._owned). Found by the loop-nest probe: a nest's filled `torch.empty_like` output."""
import pytest
import torch

from autovec import autovec


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def cat_appends(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    return torch.cat(out)


def cat_grown(x):
    acc = torch.tensor([])
    for i in range(x.shape[0]):
        acc = torch.cat([acc, x[i] * 2])
    return acc


def nest_fill(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j].abs()
    return out


def nest_branches(x):
    out = torch.zeros(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                out[i, j] = x[i, j]
            else:
                out[i, j] = -x[i, j]
    return out


def stacked(x):
    return torch.stack([x[i] * 2 for i in range(x.shape[0])], dim=1)


@pytest.mark.parametrize("fn", [cat_appends, cat_grown, nest_fill, nest_branches, stacked])
@pytest.mark.parametrize("shape", [(6, 5), (300, 80)])      # (a copy below 64 KiB, the same memory above)
@pytest.mark.parametrize("grad", [False, True])
def test_the_result_is_no_view(fn, shape, grad):
    g = autovec(fn)
    for _ in range(4):
        x = torch.randn(*shape, requires_grad=grad)
        want, got = fn(x), g(x)
        torch.testing.assert_close(got, want)
        assert got._is_view() == want._is_view() is False
        assert got.is_leaf == want.is_leaf and got.requires_grad == want.requires_grad
    # (it ran vectorized; branches with gradients keep the loop)
    assert bool(g._autovec_state.runtime.ran) != (grad and fn is nest_branches)
    if not grad:
        got.detach_()                          # raises on a view
        got.unsqueeze_(0)
        assert got.shape[0] == 1


def copy_rows(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i]
    return out


def copy_cells(x):
    out = torch.zeros(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j]
    return out


@pytest.mark.parametrize("fn", [copy_rows, copy_cells])
def test_a_filled_output_is_never_the_input_itself(fn):
    """The batch of `out[i] = x[i]` is x: the output the loop allocated may stand for it only
    when it is new memory (runtime._replaces), else it is copied into the output."""
    g = autovec(fn)
    for _ in range(4):
        x = torch.randn(4, 3)
        out = g(x)
        assert torch.equal(out, x) and out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert g._autovec_state.runtime.ran


def filled_channels_last(x):
    out = torch.empty_like(x, memory_format=torch.channels_last)
    for i in range(x.shape[0]):
        out[i] = x[i] * 1.5
    return out


def test_a_filled_output_keeps_its_memory_format():
    """Found by the probe of today's paths: the batch (contiguous) stood for an output
    allocated channels-last, so its strides were lost (`out.view(n, -1)` then works where the
    loop's raises). An output that is not contiguous is written into."""
    g = autovec(filled_channels_last)
    for shape in [(3, 4, 5, 6), (40, 16, 16, 16), (40, 16, 16, 16)]:
        x = torch.randn(*shape)
        want, got = filled_channels_last(x), g(x)
        assert torch.equal(got, want) and got.stride() == want.stride()
    assert g._autovec_state.runtime.ran


class _Holder:
    pass


def stack_of_held(x, o):
    out = []
    for i in range(x.shape[0]):
        out.append(o.w)
    return torch.stack(out)


def fill_with_held(x, o):
    out = torch.empty(x.shape[0], 3)
    for i in range(x.shape[0]):
        out[i] = o.w
    return out


@pytest.mark.parametrize("fn", [stack_of_held, fill_with_held])
def test_a_batch_of_a_tensor_read_through_an_object_is_a_copy(fn):
    """Found by the probe of the express: a loop-invariant tensor read through an object
    (`o.w`), stacked or stored over one row, came back as o.w's own memory (the batch of one
    row is a view of it, which the check of the inputs' storage did not see): writing into the
    result wrote into o.w."""
    g = autovec(fn)
    for n in (1, 1, 1, 2, 1, 1, 1, 1):
        o = _Holder()
        o.w = torch.zeros(3)
        r = g(torch.ones(n, 3), o)
        r.add_(5)
        assert torch.equal(o.w, torch.zeros(3)) and torch.equal(r, torch.full((n, 3), 5.0))
    assert g._autovec_state.runtime.ran


def max_of_sums(x):
    return max(x[i].sum() for i in range(x.shape[0]))


def test_max_of_a_generator_is_a_tensor_of_its_own():
    """Found by the same probe: Python's max() over per-row values gave a row of the batch (a
    view: `detach_()` raised); the loop's is the row's own new tensor."""
    g = autovec(max_of_sums)
    for _ in range(8):
        x = torch.tensor([[1.0, 2.0], [5.0, 6.0], [0.0, 1.0]])
        r = g(x)
        assert r.item() == 11.0 and r._base is None
        r.detach_()
    assert g._autovec_state.runtime.ran


class _Sub(torch.Tensor):
    pass


def tensor_of_sums(x):
    return torch.tensor([x[i].sum() for i in range(x.shape[0])])


def test_torch_tensor_of_a_subclass_batch_is_a_plain_tensor_of_its_own():
    """Found by the probe of the express: torch.tensor([...]) over a tensor subclass gave a plain
    tensor that was a view (`as_subclass` makes one: `detach_()` raised)."""
    g = autovec(tensor_of_sums)
    for _ in range(8):
        x = torch.randn(5, 3).as_subclass(_Sub)
        r = g(x)
        assert type(r) is torch.Tensor and r._base is None
        torch.testing.assert_close(r, tensor_of_sums(x))
        r.detach_()
    assert g._autovec_state.runtime.ran


def last_product(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        v = x[i] * 2
        out[i] = v
    return out, v


def last_row(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        v = x[i]                  # (a view of x in the loop: so it stays)
        out[i] = v * 2
    return out, v


def count_by(x, K):
    k = 0
    ids = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        if x[i] > 0:
            k += K
        ids[i] = k
    return ids, k


def running_sum(x):
    s = 0
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        s = s + x[i]
        out[i] = s
    return out, s


@pytest.mark.parametrize("fn, args", [
    (last_product, lambda: (torch.randn(6, 3),)),
    (last_row, lambda: (torch.randn(6, 3),)),
    (count_by, lambda: (torch.tensor([1.0, -1.0, 2.0, 3.0, -2.0]), torch.tensor(2.0))),
    (running_sum, lambda: (torch.randn(7),)),
])
def test_a_value_read_after_the_loop_is_as_much_a_view_as_the_loops(fn, args):
    """A name's value after the loop (its last iteration's, or a running value's last step) is a
    tensor of its own where the loop's is, not a row of the batch or of the running values
    (which would also keep all of them alive); a view of the input where the loop's is (found
    by the stop 25 probe of the day's paths)."""
    a = args()
    g = autovec(fn)
    for _ in range(6):
        want, got = fn(*a), g(*a)
        for w, o in zip(want, got):
            torch.testing.assert_close(o, w)
            assert (o._base is None) == (w._base is None)
            assert o.untyped_storage().nbytes() == w.untyped_storage().nbytes()
    assert g._autovec_state.runtime.ran


def two_names(x, y):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        a = x[i] + y[i]
        b = a
        out[i] = b
    return out, a, b


def running_and_alias(x):
    s = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        s = s + x[i]
        t = s
    return s, t


@pytest.mark.parametrize("fn, args", [(two_names, lambda: (torch.randn(7, 3), torch.randn(7, 3))),
                                      (running_and_alias, lambda: (torch.randn(7, 3),))])
def test_two_names_for_one_value_after_the_loop_stay_one_tensor(fn, args):
    """Two names the loop binds to one tensor and reads after it (`b = a`, `t = s`) are one
    tensor after the rewrite too: the copy of the batch's last row is made once a call (found by
    the stop 25 probe after the copies of last values came in: two copies, so a write into one
    no longer showed in the other)."""
    g = autovec(fn)
    for _ in range(6):
        a = args()
        want, got = fn(*a), g(*a)
        assert got[-2] is got[-1] and want[-2] is want[-1]
        for w, o in zip(want, got):
            torch.testing.assert_close(o, w)
    assert g._autovec_state.runtime.ran


# ------------------------------------------ calls that give back their argument (probe 4 of stop 33)

def _ident(a):
    return a


def kept_as_tensor(x):
    out = []
    for t in range(x.shape[0]):
        out.append(torch.as_tensor(x[t]))
    return out


def kept_positive(x):
    out = []
    for t in range(x.shape[0]):
        out.append(+x[t])
    return out


def kept_resolved(x):
    out = []
    for t in range(x.shape[0]):
        out.append(x[t].resolve_conj())
    return out


def kept_helper(x):
    out = []
    for t in range(x.shape[0]):
        out.append(_ident(x[t]))
    return out


def last_helper(x):
    for t in range(x.shape[0]):
        y = _ident(x[t])
    return y


@pytest.mark.parametrize("fn", [kept_as_tensor, kept_positive, kept_resolved, kept_helper, last_helper])
def test_a_kept_value_that_is_the_row_itself_stays_the_row(fn):
    # the loop's kept values are x's rows (views): a later write through one reaches x
    x, y = torch.arange(12.0).reshape(4, 3), torch.arange(12.0).reshape(4, 3)
    got, want = autovec(fn)(x), fn(y)
    g0 = got[0] if isinstance(got, list) else got
    w0 = want[0] if isinstance(want, list) else want
    assert (g0.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == \
        (w0.untyped_storage().data_ptr() == y.untyped_storage().data_ptr())
    g0.mul_(-1)
    w0.mul_(-1)
    torch.testing.assert_close(x, y, rtol=0, atol=0)
    # calls known to give back their argument batch as views; a helper's result is seen to be
    # the input's memory only when it runs: the loop
    from autovec import explain
    want_path = "python" if fn is kept_helper else "vectorized"   # (a last value keeps its view)
    assert explain(autovec(fn), torch.randn(4, 3)).path == want_path


def kept_transposed(x):
    out = []
    for t in range(x.shape[0]):
        out.append(x[t].T * 2)
    return out


def kept_differences(x):
    out = []
    for t in range(x.shape[0] - 1):
        out.append(x[t + 1] - x[t])
    return out


@pytest.mark.parametrize("fn, x", [
    (kept_transposed, torch.randn(5, 3, 4)),
    (kept_differences, torch.arange(60.0).reshape(5, 3, 4).permute(0, 2, 1)),
    (kept_differences, torch.randn(5, 3, 4)),
])
def test_kept_results_are_laid_out_as_the_loop_s(fn, x):
    # (the loop's results follow their inputs' layout: a transposed row gives a transposed result)
    got, want = autovec(fn)(x), fn(x)
    for a, b in zip(got, want):
        assert torch.equal(a, b) and a.stride() == b.stride() and a._base is None


def constant_rows(n):
    out = torch.empty(n, dtype=torch.long)
    for i in range(n):
        out[i] = 1
    return out


@pytest.mark.parametrize("n", [1, 3])
def test_two_calls_never_share_an_outputs_memory(n):
    # a constant's batch is one element expanded; at one row it is contiguous and the fresh output
    # may take it without a copy: it must be new memory on every call (b4c6f31 kept the constant
    # between calls, and the second call's result changed with the first)
    fast = autovec(constant_rows)
    a, b = fast(n), fast(n)
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    a += 5
    assert b.tolist() == constant_rows(n).tolist()
