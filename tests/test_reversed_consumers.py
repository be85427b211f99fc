"""A list the loop builds by appends (or front-first, analysis.reversal) and reverses right after
the loop, `lst.reverse()`, then hands to torch.stack / torch.cat / torch.tensor: the consumer
takes the batch flipped along its rows (runtime consume's `flip`), no list of views. Each case
against the loop as written: values (exactly, where the body is exact), dtypes, shapes, strides,
Python types, the arguments after the call, errors, gradients, and the path taken; the forms
that keep today's behaviour (the list used after the consumer, the reverse not right after the
loop) too."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _copy(v):
    if isinstance(v, torch.Tensor):
        return v.detach().clone().requires_grad_(v.requires_grad)
    if isinstance(v, (list, tuple)):
        return type(v)(_copy(e) for e in v)
    return v


def _same(got, want, exact=True):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and got.device == want.device
        assert got.requires_grad == want.requires_grad
        if want.numel() > 1:
            assert got.stride() == want.stride()
        if exact:
            assert torch.equal(got.detach(), want.detach()), (got, want)
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w, exact)
    else:
        assert got == want


def _check(fn, *args, exact=True, calls=4):
    """The loop as written and autovec's on copies of `args`, several calls (the steady state,
    lanes, the express): results, arguments after the call, errors. Returns the path."""
    f = autovec(fn)
    for _ in range(calls):
        a, b = _copy(args), _copy(args)
        try:
            want = fn(*a)
        except Exception as e:   # noqa: BLE001
            with pytest.raises(type(e)) as got:
                f(*b)
            assert str(got.value) == str(e)
            continue
        got = f(*b)
        _same(got, want, exact)
        _same(b, a)
        if isinstance(got, torch.Tensor) and any(isinstance(x, torch.Tensor) for x in b):
            # a new tensor of its own, as the loop's stack is
            assert all(got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
                       for x in b if isinstance(x, torch.Tensor) and x.numel())
    return explain(fn, *_copy(args)).path


def _flipped(fn, *args) -> bool:
    """Whether the rewrite hands the consumer the batch flipped (not a list of its rows)."""
    text = str(explain(fn, *_copy(args)))
    return ".flip(0)" in text.split("rewritten source:")[-1] and ".unbind(0)" not in text


# ----------------------------------------------------------------------------- taken: flipped batch

def app_stack(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2 + 1)
    out.reverse()
    return torch.stack(out)


def app_views(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i])
    out.reverse()
    return torch.stack(out)


def front_stack(x):
    out = []
    for i in range(len(x)):
        out.insert(0, x[i] - 3)
    return torch.stack(out)


def front_reversed_walk(x):
    out = []
    for v in reversed(x):
        out.insert(0, v * v)
    return torch.stack(out)


def app_cat(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i:i + 1] * 2)
    out.reverse()
    return torch.cat(out)


def app_cat_rows(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] + 1)
    out.reverse()
    return torch.cat(out)


def app_stack_dim1(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 3)
    out.reverse()
    return torch.stack(out, dim=1)


def app_tensor(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    out.reverse()
    return torch.tensor(out)


def app_tensor_items(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].item() * 2)
    out.reverse()
    return torch.tensor(out)


def app_masked(x):
    out = []
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            out.append(x[i] * 2)
    out.reverse()
    return torch.stack(out)


def app_two(x, y):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] + 1)
        out.append(y[i] * 2)
    out.reverse()
    return torch.stack(out)


def app_nest(x):
    out = []
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out.append(x[i, j] * 2)
    out.reverse()
    return torch.stack(out)


def app_quiet_between(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    out.reverse()
    k = x.shape[0] + 1
    return torch.stack(out) * k


def app_two_lists(x):
    a, b = [], []
    for i in range(x.shape[0]):
        a.append(x[i] + 1)
        b.append(x[i] * 2)
    a.reverse()
    return torch.stack(a), torch.stack(b)


_1D = lambda: (torch.randn(37),)                                    # noqa: E731
_2D = lambda: (torch.randn(37, 5),)                                 # noqa: E731
_3D = lambda: (torch.randn(11, 3, 4),)                              # noqa: E731
_INT = lambda: (torch.randint(-9, 9, (23, 4)),)                     # noqa: E731
_INT1 = lambda: (torch.randint(-9, 9, (23,)),)                     # noqa: E731
_F64 = lambda: (torch.randn(19, 2, dtype=torch.float64),)          # noqa: E731


@pytest.mark.parametrize("fn, make", [
    (app_stack, _1D), (app_stack, _2D), (app_stack, _3D), (app_stack, _INT), (app_stack, _F64),
    (app_views, _1D), (app_views, _2D),
    (front_stack, _1D), (front_stack, _2D), (front_reversed_walk, _2D),
    (app_cat, _1D), (app_cat, _2D), (app_cat_rows, _2D), (app_cat_rows, _3D),
    (app_stack_dim1, _2D), (app_stack_dim1, _3D),
    (app_tensor, _1D), (app_tensor, _INT1),
    (app_tensor_items, _1D), (app_masked, _2D),
    (app_two, lambda: (torch.randn(13, 3), torch.randn(13, 3))),
    (app_nest, lambda: (torch.randn(5, 7),)),
    (app_quiet_between, _2D),
])
def test_reversed_list_consumers_agree_with_the_loop(fn, make):
    args = make()
    assert _check(fn, *args) == "vectorized"


@pytest.mark.parametrize("fn, make", [
    (app_stack, _1D), (app_stack, _2D), (app_views, _2D), (front_stack, _2D), (app_cat, _2D),
    (app_stack_dim1, _2D), (app_tensor, _1D), (app_masked, _2D), (app_two, lambda: (torch.randn(9, 3),) * 2),
    (app_nest, _2D), (app_tensor_items, _1D), (front_reversed_walk, _2D),
])
def test_the_consumer_takes_the_batch_flipped(fn, make):
    assert _flipped(fn, *make())


def test_only_the_reversed_list_is_flipped():
    x = torch.randn(9, 2)
    assert _check(app_two_lists, x) == "vectorized"
    a, b = autovec(app_two_lists)(x)
    assert torch.equal(a, (x + 1).flip(0)) and torch.equal(b, x * 2)


def test_the_result_is_a_new_tensor():
    x = torch.randn(8, 3)
    f = autovec(app_views)
    for _ in range(3):
        y = f(x)
        y.add_(1)        # the loop's stack is a copy: the input stays as it was
    assert torch.equal(x, x.clone())
    assert torch.equal(f(x), x.flip(0))


def test_empty_loops_behave_as_the_loop():
    for fn in (app_stack, app_cat, app_tensor, app_tensor_items, front_stack, app_masked):
        _check(fn, torch.randn(0, 3) if fn in (app_cat, app_masked) else torch.randn(0))
    _check(app_masked, -torch.rand(6, 3))      # (nothing kept: torch.stack of an empty list raises)


def disc_front(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    return torch.stack(returns)


def disc_append(rewards, gamma: float):
    R = 0
    returns = []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.append(R)
    return torch.stack(returns)


@pytest.mark.parametrize("shape", [(300,), (300, 16)])
def test_discounted_returns_are_the_appended_batch_flipped(shape):
    x = torch.randn(*shape)
    assert _check(disc_front, x, 0.99, exact=False) == "vectorized"
    assert _flipped(disc_front, x, 0.99)
    # bit for bit the batch the same loop appends, in the other order
    assert torch.equal(autovec(disc_front)(x, 0.99), autovec(disc_append)(x, 0.99).flip(0))


@pytest.mark.parametrize("fn", [app_stack, app_cat_rows, app_stack_dim1, app_masked, front_stack, disc_front])
def test_gradients(fn):
    torch.manual_seed(0)
    x = torch.randn(12, 4, dtype=torch.float64, requires_grad=True)
    args = (x, 0.9) if fn is disc_front else (x,)
    w = None
    grads = []
    for f in (fn, autovec(fn)):
        a = _copy(args)
        y = f(*a)
        if w is None:
            w = torch.randn(y.shape, dtype=y.dtype)
        assert y.requires_grad
        (y * w).sum().backward()
        grads.append(a[0].grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-9, atol=1e-9)
    assert explain(fn, *_copy(args)).path == "vectorized"
    y = autovec(fn)(*_copy(args))
    y.mul_(2)    # (an in-place change of the result: the loop's stack is its own tensor, backward works)
    y.sum().backward()


def test_no_grad_gives_no_gradient():
    x = torch.randn(7, 3, requires_grad=True)
    with torch.no_grad():
        want, got = app_stack(x), autovec(app_stack)(x)
    _same(got, want)


def test_four_dimensional_rows_keep_the_loops_layout():
    x = torch.randn(4, 3, 5, 2, 2).to(memory_format=torch.channels_last_3d)
    _check(app_views, x)          # (rows laid out channels last: the loop decides)
    x = torch.randn(4, 3, 5, 2, 2).to(memory_format=torch.channels_last_3d)[:, 0]
    _check(app_stack, x)
    for fn in (app_stack, app_views, app_cat_rows):
        assert _check(fn, torch.randn(4, 3, 5, 2)) == "vectorized"
        assert _check(fn, torch.randn(4, 3, 5, 2, 3)) == "vectorized"
        assert _flipped(fn, torch.randn(4, 3, 5, 2))


# ----------------------------------------------------------------------------- today's behaviour

def used_after(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    out.reverse()
    y = torch.stack(out)
    return y, out


def reverse_later(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    k = x.shape[0]
    out.reverse()
    return torch.stack(out) * k


def reversed_twice(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    out.reverse()
    out.reverse()
    return torch.stack(out)


def reverse_with_args(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    out.sort(key=lambda t: float(t.sum()))
    return torch.stack(out)


def reversed_builtin(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    return torch.stack(list(reversed(out)))


def other_list_reversed(x):
    out, other = [], [1, 2]
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    other.reverse()
    return torch.stack(out), other


def reverse_no_consumer(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    out.reverse()
    return out


def reverse_then_sum(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i].item() * 0.1)
    out.reverse()
    return sum(out)


@pytest.mark.parametrize("fn", [used_after, reverse_later, reversed_twice, reverse_with_args, reversed_builtin,
                                other_list_reversed, reverse_no_consumer, reverse_then_sum])
def test_other_forms_behave_as_the_loop(fn):
    _check(fn, torch.randn(9, 3) if fn is not reverse_then_sum else torch.randn(9))
    _check(fn, torch.randn(0, 3))


@pytest.mark.parametrize("fn", [used_after, reverse_later, reversed_twice, reverse_no_consumer, other_list_reversed])
def test_other_forms_are_not_flipped_batches(fn):
    assert not _flipped(fn, torch.randn(9, 3))


# ----------------------------------------------------------------------------- `list()` as the empty list

def list_call(x):
    out = list()
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    out.reverse()
    return torch.stack(out)


def list_call_front(x):
    out = list()
    for v in reversed(x):
        out.insert(0, v + 1)
    return torch.stack(out)


def list_call_append(x):
    out = list()
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    return torch.stack(out)


class _Rows(list):
    def reverse(self):      # (not the list's: the loop's order stays)
        pass


def list_shadowed(x, list=_Rows):   # noqa: A002
    out = list()
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    out.reverse()
    return torch.stack(out)


def list_with_items(x):
    out = list([x[0]])
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    out.reverse()
    return torch.stack(out)


@pytest.mark.parametrize("fn", [list_call, list_call_front, list_call_append])
def test_builtin_list_call_is_an_empty_list(fn):
    x = torch.randn(11, 3)
    assert _check(fn, x) == "vectorized"
    assert ".unbind(0)" not in str(explain(fn, x))
    _check(fn, torch.randn(0, 3))


@pytest.mark.parametrize("fn", [list_shadowed, list_with_items])
def test_other_list_calls_keep_the_list(fn):
    x = torch.randn(11, 3)
    _check(fn, x)
    assert not _flipped(fn, x)
