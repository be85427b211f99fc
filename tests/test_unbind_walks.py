"""Loops and comprehensions over a tensor's slices, `x.unbind(d)` / `torch.unbind(x, d)` and
`x.split(1, d)` / `torch.split(x, 1, d)` (zips and enumerates of them, negative dimensions),
planned as range loops that read `x[:, k]` / `x[:, k:k + 1]` (`x.movedim(d, 0)[k]` for d < 0;
analysis.unbind). Each case against the loop as written, on random inputs: values, dtypes,
Python types, arguments after the call, errors, gradients, and the path taken; and the loops
the move keeps as written, with their reasons."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _copy(v, grad=False):
    if isinstance(v, torch.Tensor):
        return v.detach().clone().requires_grad_(grad and (v.is_floating_point() or v.requires_grad))
    if isinstance(v, list):
        return [_copy(e, grad) for e in v]
    if isinstance(v, tuple):
        return tuple(_copy(e, grad) for e in v)
    if isinstance(v, np.ndarray):
        return v.copy()
    return v


def _same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and got.requires_grad == want.requires_grad
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5)
    elif isinstance(want, np.ndarray):
        assert np.array_equal(got, want)
    else:
        assert got == want


def _check(fn, *args, grad=False, calls=3):
    """Runs the loop as written and autovec's (`calls` times: first call and steady state) on
    copies of `args`; results, arguments after the call, errors and (with `grad`) the gradients
    of every floating-point argument must agree. Returns the path a call with `args` takes."""
    a = _copy(args, grad)
    try:
        want = fn(*a)
    except Exception as e:   # noqa: BLE001 (the loop's own error is what autovec must give)
        fast = autovec(fn)
        for _ in range(calls):
            with pytest.raises(type(e)) as got:
                fast(*_copy(args, grad))
            assert str(got.value) == str(e)
        return explain(fn, *_copy(args, grad)).path
    fast = autovec(fn)
    for _ in range(calls):
        b = _copy(args, grad)
        got = fast(*b)
        _same(got, want)
        _same(b, a)
        if grad:
            _grads_agree(got, want, b, a)
    return explain(fn, *_copy(args, grad)).path


def _grads_agree(got, want, b, a):
    outs = [o for o in (want if isinstance(want, (list, tuple)) else [want])
            if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs:
        return
    gouts = [o for o in (got if isinstance(got, (list, tuple)) else [got])
             if isinstance(o, torch.Tensor) and o.requires_grad]
    leaves_a = [t for t in a if isinstance(t, torch.Tensor) and t.requires_grad]
    leaves_b = [t for t in b if isinstance(t, torch.Tensor) and t.requires_grad]
    torch.manual_seed(11)
    weights = [torch.randn_like(o) for o in outs]
    want_g = torch.autograd.grad(outs, leaves_a, weights, allow_unused=True, retain_graph=True)
    got_g = torch.autograd.grad(gouts, leaves_b, weights, allow_unused=True)
    for g, w in zip(got_g, want_g):
        assert (g is None) == (w is None)
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- vectorized forms

def rnn_inputs(x, w):
    outs = []
    for xt in x.unbind(1):
        outs.append(torch.tanh(xt @ w))
    return torch.stack(outs, 1)


def rows_summed(x):
    return torch.stack([r.sum() for r in x.unbind(0)])


def pieces_doubled(x):
    outs = []
    for c in x.split(1, dim=0):
        outs.append(c * 2)
    return torch.cat(outs)


def zipped_distance(x, y):
    total = 0.0
    for a, b in zip(x.unbind(0), y.unbind(1)):
        total = total + (a - b).pow(2).sum()
    return total


def enumerated_last(x):
    outs = []
    for t, xt in enumerate(x.unbind(-1)):
        outs.append(xt * t)
    return torch.stack(outs, -1)


def torch_unbind_keyword(x, w):
    outs = []
    for xt in torch.unbind(x, dim=1):
        outs.append(F.softplus(xt) @ w)
    return torch.stack(outs)


def method_unbind_keyword(x):
    outs = []
    for xt in x.unbind(dim=2):
        outs.append(xt.abs().amax(-1))
    return torch.stack(outs, 0)


def default_dim(x):
    outs = []
    for r in x.unbind():
        outs.append(r.exp() - 1)
    return torch.stack(outs)


def torch_split_negative(x):
    outs = []
    for c in torch.split(x, 1, -2):
        outs.append(c.sum(-1, keepdim=True) + c)
    return torch.cat(outs, -2)


def split_keywords(x):
    outs = []
    for c in x.split(split_size=1, dim=1):
        outs.append(c.clamp(min=0) * 3)
    return torch.cat(outs, 1)


def enumerated_from(x):
    outs = []
    for t, c in enumerate(x.split(1, 1), 3):
        outs.append(c * t)
    return torch.cat(outs, 1)


def enumerated_zip(x, y):
    out = torch.zeros(x.size(1))
    for t, (a, b) in enumerate(zip(x.unbind(1), y.unbind(0)), start=-2):
        out[t + 2] = (a * b).sum() + t
    return out, t


def counted_rows(x):
    n = 0
    for r in x.unbind(0):
        if r.max() > 0.5:
            n += 1
    return n


def item_list(x):
    vals = []
    for r in x.unbind(0):
        vals.append(r.sum().item())
    return vals


def stored_rows(x):
    out = torch.empty(x.size(1), x.size(0), dtype=x.dtype)
    for k, xt in enumerate(x.unbind(1)):
        out[k] = xt * 2 + 1
    return out


def weighted(x, w):
    outs = []
    for t, xt in enumerate(x.unbind(1)):
        outs.append(xt * w[t])
    return torch.stack(outs, 1)


def recurrence(x, h, W, U):
    hs = []
    for xt in x.unbind(1):
        h = torch.tanh(xt @ W + h @ U)
        hs.append(h)
    return torch.stack(hs, 1)


def comprehension_module(x, lin):
    return torch.stack([lin(xt) for xt in x.unbind(1)], 1)


def generator_sum(x):
    return sum(c.sum() for c in x.split(1, -1))


def stop_early(x):
    outs = []
    for xt in x.unbind(1):
        if xt.sum() > 1.0:
            break
        outs.append(xt * 2)
    return outs


def under_no_grad(x, w):
    outs = []
    with torch.no_grad():
        for xt in x.unbind(1):
            outs.append(xt @ w)
    return torch.stack(outs, 1)


def negative_middle(x):
    outs = []
    for xt in x.unbind(-2):
        outs.append(xt.softmax(-1))
    return torch.stack(outs, -2)


def zip_negative_and_split(x, y):
    outs = []
    for a, b in zip(x.unbind(-1), y.split(1, 1)):
        outs.append(a * b.squeeze(1))
    return torch.stack(outs)


def w34():
    return torch.randn(3, 4)


FORMS = [
    (rnn_inputs, lambda: (torch.randn(6, 9, 3), w34())),
    (rows_summed, lambda: (torch.randn(7, 5),)),
    (pieces_doubled, lambda: (torch.randn(8, 3),)),
    (zipped_distance, lambda: (torch.randn(6, 4), torch.randn(4, 6, 4))),
    (enumerated_last, lambda: (torch.randn(3, 4, 5),)),
    (torch_unbind_keyword, lambda: (torch.randn(5, 6, 3), w34())),
    (method_unbind_keyword, lambda: (torch.randn(4, 3, 5),)),
    (default_dim, lambda: (torch.randn(9, 2),)),
    (torch_split_negative, lambda: (torch.randn(2, 5, 3),)),
    (split_keywords, lambda: (torch.randn(4, 6),)),
    (enumerated_from, lambda: (torch.randn(3, 5),)),
    (enumerated_zip, lambda: (torch.randn(4, 6), torch.randn(6, 4))),
    (counted_rows, lambda: (torch.rand(12, 3),)),
    (item_list, lambda: (torch.randn(6, 2),)),
    (stored_rows, lambda: (torch.randn(5, 7),)),
    (weighted, lambda: (torch.randn(4, 6, 2), torch.randn(6, 1, 1))),
    (recurrence, lambda: (torch.randn(3, 7, 4), torch.zeros(3, 2), torch.randn(4, 2), torch.randn(2, 2))),
    (comprehension_module, lambda: (torch.randn(4, 6, 3), torch.nn.Linear(3, 2))),
    (generator_sum, lambda: (torch.randn(4, 6),)),
    (stop_early, lambda: (torch.rand(3, 8) * 0.5,)),
    (under_no_grad, lambda: (torch.randn(5, 4, 3), w34())),
    (negative_middle, lambda: (torch.randn(2, 6, 3),)),
    (zip_negative_and_split, lambda: (torch.randn(5, 3), torch.randn(5, 4))),
]


@pytest.mark.parametrize("fn, make", FORMS, ids=[f.__name__ for f, _ in FORMS])
@pytest.mark.parametrize("grad", [False, True])
def test_forms_vectorize_and_agree_with_the_loop(fn, make, grad):
    torch.manual_seed(1)
    assert _check(fn, *make(), grad=grad) == "vectorized"
    assert explain(fn).loops[0].vectorized


@pytest.mark.parametrize("fn, make", FORMS, ids=[f.__name__ for f, _ in FORMS])
def test_forms_on_other_dtypes_and_sizes(fn, make):
    """float64, integers where the body allows them, and empty or one-long walks (split of an
    empty dimension gives one empty piece: the guard sees it, the loop runs)."""
    torch.manual_seed(2)
    args = make()
    _check(fn, *[a.double() if isinstance(a, torch.Tensor) else a for a in args])
    x = args[0]
    if fn in (rows_summed, pieces_doubled, default_dim, split_keywords, enumerated_from, counted_rows,
              stored_rows, generator_sum, negative_middle):
        _check(fn, torch.randint(-3, 4, tuple(x.shape), dtype=torch.int32), *args[1:])
    for n in (0, 1):
        for d in range(x.dim()):
            shape = list(x.shape)
            shape[d] = n
            _check(fn, torch.randn(shape), *args[1:])


def test_the_examples_explain_the_walk():
    x, w = torch.randn(6, 9, 3), w34()
    ex = explain(rnn_inputs, x, w)
    r = ex.loops[0]
    assert ex.path == "vectorized" and r.strategy == "vmap"
    assert "`x.unbind(1)` walked as `xt = x[:, k]` for k from 0 up" in r.reason
    assert "in_dims=(1,)" in ex.rewritten_source and "unbind" not in ex.rewritten_source.split("vmap")[0]
    r = explain(zipped_distance, torch.randn(6, 4), torch.randn(4, 6, 4)).loops[0]
    assert r.strategy == "reduction" and "`a = x[k]`, `b = y[:, k]`" in r.reason
    r = explain(enumerated_last, torch.randn(3, 4, 5)).loops[0]
    assert "`xt = x.movedim(-1, 0)[k]`" in r.reason
    r = explain(torch_split_negative, torch.randn(2, 5, 3)).loops[0]
    assert "`c = x.movedim(-2, 0)[k:k + 1].movedim(0, -2)`" in r.reason
    r = explain(pieces_doubled, torch.randn(8, 3)).loops[0]
    assert "`c = x[k:k + 1]`" in r.reason
    assert explain(rows_summed, torch.randn(7, 5)).loops[0].strategy == "vmap"


def test_zip_walks_the_shortest():
    torch.manual_seed(3)
    for nx, ny in ((6, 6), (4, 7), (7, 4), (0, 3), (3, 0)):
        _check(zipped_distance, torch.randn(nx, 4), torch.randn(4, ny, 4))
        _check(zip_negative_and_split, torch.randn(5, nx), torch.randn(5, ny))
    _check(enumerated_zip, torch.randn(4, 6), torch.randn(3, 4))      # (out has 6 rows: the first 3 written)


def test_the_elements_stay_views_of_the_argument():
    """The walk's elements are views of `x`: a body that reads them sees the argument's values,
    and the argument is never written."""
    x = torch.randn(5, 6)
    x0 = x.clone()
    out = autovec(stored_rows)(x)
    assert torch.equal(x, x0) and torch.equal(out, x.T * 2 + 1)


# ----------------------------------------------------------------------------- other inputs

class FakeSeq:
    """Not a tensor, with the methods the rewrite calls: `unbind` walks its rows backwards."""

    def __init__(self, t):
        self.t = t

    def unbind(self, dim=0):
        return tuple(self.t.unbind(dim))[::-1]

    def split(self, size, dim=0):
        return tuple(self.t.split(size, dim))[::-1]

    def size(self, dim):
        return self.t.size(dim)

    def movedim(self, a, b):
        return self.t.movedim(a, b)

    def __getitem__(self, i):
        return self.t[i]


BAD = [
    lambda x: x.tolist(),                              # a list: no `.unbind`
    lambda x: list(x.unbind(0)),                       # a list of tensors
    lambda x: tuple(x.unbind(0)),
    lambda x: torch.tensor(1.5),                       # 0-d: unbind raises
    lambda x: x.flatten(),                             # a rank too small for the dimension
    lambda x: FakeSeq(x),                              # an object with its own unbind
    lambda x: x.numpy(),                               # a numpy array (`.size` is a number)
    lambda x: None,
    lambda x: x.to(torch.float64),
    lambda x: torch.nn.Parameter(x.clone()),
]


@pytest.mark.parametrize("fn, make", FORMS, ids=[f.__name__ for f, _ in FORMS])
@pytest.mark.parametrize("bad", range(len(BAD)))
def test_other_values_run_the_loop_as_written(fn, make, bad):
    """What the walk does not take (a list, a 0-d tensor, a bad dimension, an object with its
    own `unbind`, a numpy array) gives the loop's own value or error."""
    args = make()
    value = BAD[bad](args[0])
    path = _check(fn, value, *args[1:])
    if not isinstance(value, torch.Tensor) and value is not None:
        assert path == "python"


@pytest.mark.parametrize("fn", [rnn_inputs, enumerated_last, torch_split_negative, pieces_doubled])
def test_a_bad_dimension_raises_the_loops_error(fn):
    rest = (w34(),) if fn is rnn_inputs else ()
    assert _check(fn, torch.tensor(2.0), *rest) == "python"
    if fn in (rnn_inputs, torch_split_negative):       # (dimension 1, -2: a vector has none)
        assert _check(fn, torch.randn(3), *rest) == "python"


def dim_too_big(x):
    outs = []
    for xt in x.unbind(3):
        outs.append(xt + 1)
    return outs


def dim_too_small(x):
    return [c.sum() for c in x.split(1, -4)]


def test_dimensions_out_of_range():
    for fn in (dim_too_big, dim_too_small):
        with pytest.raises(IndexError) as want:
            fn(torch.randn(2, 3, 4))
        with pytest.raises(IndexError) as got:
            autovec(fn)(torch.randn(2, 3, 4))
        assert str(got.value) == str(want.value)


# ----------------------------------------------------------------------------- kept as written

def in_place_element(x):
    for xt in x.unbind(1):
        xt.mul_(2)
    return x


def augmented_element(x):
    for xt in x.unbind(1):
        xt += 1
    return x


def stored_into(x):
    for xt in x.unbind(1):
        xt[0] = 5.0
    return x


def read_after(x):
    outs = []
    for xt in x.unbind(1):
        outs.append(xt * 2)
    return torch.stack(outs), xt


def kept_element(x):
    outs = []
    for xt in x.unbind(1):
        outs.append(xt)
    return outs


def kept_in_comprehension(x):
    return [r for r in x.unbind(0)]


def identity(x, y):
    n = 0
    for xt in x.unbind(0):
        if xt is y:
            n += 1
    return n


def attribute_set(x):
    for xt in x.unbind(0):
        xt.tag = 1
    return x


def mentions_sequence(x):
    outs = []
    for xt in x.unbind(1):
        outs.append(xt * x.sum())
    return torch.stack(outs)


def never_read(x):
    n = 0
    for xt in x.unbind(1):
        n += 1
    return n


def chunked(x):
    outs = []
    for c in x.chunk(3, 1):
        outs.append(c * 2)
    return torch.cat(outs, 1)


def split_by_two(x):
    outs = []
    for c in x.split(2, 1):
        outs.append(c * 2)
    return torch.cat(outs, 1)


def split_by_sizes(x):
    outs = []
    for c in x.split([1, 2], 1):
        outs.append(c * 2)
    return torch.cat(outs, 1)


def dim_variable(x, d: int):
    outs = []
    for xt in x.unbind(d):
        outs.append(xt * 2)
    return torch.stack(outs, d)


def inplace_keyword(x):
    outs = []
    for xt in x.unbind(1):
        outs.append(F.relu(xt, inplace=True))
    return torch.stack(outs, 1)


def _mutates(t):
    t.add_(1)
    return t * 2


def mutating_helper(x):
    outs = []
    for xt in x.unbind(1):
        outs.append(_mutates(xt))
    return torch.stack(outs, 1)


def printed(x):
    out = []
    for xt in x.unbind(0):
        out.append(repr(xt))
    return out


def grad_fn_read(x):
    names = []
    for xt in x.unbind(0):
        names.append(type(xt.grad_fn).__name__)
    return names


def zip_with_plain(x, y):
    outs = []
    for a, b in zip(x.unbind(1), y):
        outs.append(a * b)
    return outs


def with_else(x):
    outs = []
    for xt in x.unbind(1):
        if xt.sum() > 100:
            break
        outs.append(xt * 2)
    else:
        outs.append(None)
    return outs


KEPT = {
    in_place_element: "calls `.mul_()`",
    augmented_element: "`xt` is assigned in the loop",
    stored_into: "is stored into",
    read_after: "is used outside the loop",
    kept_element: "is passed to `outs.append`",
    kept_in_comprehension: "is used as it is",
    identity: "compared by identity",
    attribute_set: "attribute `.tag` set",
    mentions_sequence: "mentions `x.sum`",
    never_read: "never read",
    chunked: "makes pieces whose sizes depend on the tensor",
    split_by_two: "does not split into pieces of size 1",
    split_by_sizes: "does not split into pieces of size 1",
    dim_variable: "not an integer literal",
    inplace_keyword: "may write into it",
    mutating_helper: "",          # (the planner's own purity check keeps it)
    printed: "tells it apart",
    grad_fn_read: "reads `.grad_fn`",
    zip_with_plain: "which is not one",
}


@pytest.mark.parametrize("grad", [False, True])
def test_a_walk_with_else_and_break_is_moved_once_the_else_is_a_flag(grad):
    """The `else` goes after the loop as `if not broke:` first (hoist.else_as_flag), then the
    walk is moved as any other."""
    assert _check(with_else, torch.randn(3, 4), grad=grad) == "vectorized"
    _check(with_else, torch.full((3, 4), 30.0), grad=grad)    # (a break at the first column: agrees)


def _args_for(fn, grad):
    x = torch.randn(3, 4, requires_grad=grad)
    if fn is identity:
        return x, x[0]
    if fn is dim_variable:
        return x, 1
    if fn is zip_with_plain:
        return x, torch.randn(4, 3)
    return (x,)


@pytest.mark.parametrize("fn", list(KEPT), ids=[f.__name__ for f in KEPT])
@pytest.mark.parametrize("grad", [False, True])
def test_what_the_walk_keeps_as_written(fn, grad):
    """Each of these keeps the loop as written (autograd's error for an in-place change of an
    element under grad included), with the reason in the report."""
    args = _args_for(fn, grad)
    if grad:
        args = tuple(a * 1 if isinstance(a, torch.Tensor) and a.requires_grad else a for a in args)
        want, got = _outcome(fn, *args), _outcome(autovec(fn), *args)
        assert type(want) is type(got)
        if isinstance(want, tuple) and want and want[0] == "raised":
            assert got == want
    else:
        assert _check(fn, *args) == "python"
    r = explain(fn).loops[0]
    assert r.strategy == "python" and KEPT[fn] in r.reason, r.reason


def _outcome(fn, *args):
    args = tuple(a.detach().clone().requires_grad_(True) * 1 if isinstance(a, torch.Tensor) and a.requires_grad
                 else a for a in args)
    try:
        return fn(*args)
    except Exception as e:      # noqa: BLE001
        return ("raised", type(e), str(e))


def test_an_element_changed_in_place_under_grad_raises_as_the_loop():
    """`xt.mul_(2)` on an unbind output under autograd raises; `x[:, k].mul_(2)` would not."""
    x = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="Unbind") as want:
        in_place_element(x * 1)
    with pytest.raises(RuntimeError, match="Unbind") as got:
        autovec(in_place_element)(x * 1)
    assert str(got.value) == str(want.value)


def test_without_grad_the_element_changed_in_place_changes_the_argument():
    x = torch.randn(3, 4)
    _check(in_place_element, x)
    _check(stored_into, x)
    _check(augmented_element, x)


def test_refusals_name_the_walk():
    r = explain(kept_element).loops[0]
    assert "walks `x.unbind(1)`, whose elements are read as slices" in r.reason
    r = explain(split_by_two).loops[0]
    assert "`x.split(2, 1)`" in r.reason


# ----------------------------------------------------------------------------- nests and the pre-pass

def in_a_nest(x):
    out = torch.zeros(3, x.size(1))
    for i in range(3):
        for k, xt in enumerate(x.unbind(1)):
            out[i, k] = xt.sum() * i
    return out


def negative_in_a_nest(x):
    out = torch.zeros(3, x.size(-1))
    for i in range(3):
        for k, xt in enumerate(x.unbind(-1)):
            out[i, k] = xt.sum() * i
    return out


def test_a_walk_inside_a_loop_nest():
    """The inner walk makes a perfect nest the planner takes, whose fallback holds the walk as
    written; a negative dimension is not read as the nest's own slices: the nest runs as written."""
    torch.manual_seed(4)
    x = torch.randn(4, 5)
    assert _check(in_a_nest, x) == "vectorized"
    assert _check(in_a_nest, x, grad=True) == "vectorized"
    _check(in_a_nest, x.tolist())
    _check(in_a_nest, torch.randn(5))
    assert _check(negative_in_a_nest, x) == "python"
    assert "does not read each element as the loop's own slice" in explain(negative_in_a_nest).loops[0].reason
    _check(negative_in_a_nest, torch.randn(4, 0))


def _prepass(fn):
    from autovec.analysis.unbind import unbind_walks
    from autovec.frontend import capture
    walks, refused = unbind_walks(capture(fn))
    return len(walks), len(refused)


@pytest.mark.parametrize("fn, want", [
    (rnn_inputs, (1, 0)), (rows_summed, (1, 0)), (zipped_distance, (1, 0)), (enumerated_zip, (1, 0)),
    (generator_sum, (1, 0)), (in_a_nest, (1, 0)), (kept_element, (0, 1)), (chunked, (0, 1)),
    (split_by_sizes, (0, 1)), (dim_variable, (0, 1)), (with_else, (0, 1)), (read_after, (0, 1)),
    (mutating_helper, (1, 0)),
])
def test_what_the_prepass_moves(fn, want):
    """(walks moved, walks refused) before the planner sees the function."""
    assert _prepass(fn) == want


def shadowed(x, torch=None):   # noqa: ARG001  (a local `torch`: torch.unbind is not the real one)
    outs = []
    for xt in torch.unbind(x, 1):
        outs.append(xt)
    return outs


def test_a_local_torch_is_not_torch():
    class Fake:
        @staticmethod
        def unbind(x, d):
            return [x.sum()]
    assert _prepass(shadowed) == (0, 0)
    _check(shadowed, torch.randn(2, 3), Fake())


def test_rewritten_source_is_the_original_where_nothing_is_vectorized():
    for fn in (kept_element, in_place_element, negative_in_a_nest):
        ex = explain(fn)
        assert ex.diff == "" and "unbind" in ex.rewritten_source


# ----------------------------------------------------------------------------- consumers along a dimension

def stack_by_position(x, w):
    outs = []
    for xt in x.unbind(1):
        outs.append(torch.tanh(xt @ w))
    return torch.stack(outs, 1)


def cat_by_position(x):
    outs = []
    for c in x.split(1, 2):
        outs.append(c * 2)
    return torch.cat(outs, 2)


def stack_negative_position(x):
    outs = []
    for xt in x.unbind(1):
        outs.append(xt + 1)
    return torch.stack(outs, -1)


def stack_bool_position(x):
    outs = []
    for xt in x.unbind(1):
        outs.append(xt + 1)
    return torch.stack(outs, True)


def stack_past_the_end(x):
    outs = []
    for xt in x.unbind(1):
        outs.append(xt + 1)
    return torch.stack(outs, 4)


@pytest.mark.parametrize("grad", [False, True])
def test_stack_and_cat_along_a_dimension_given_by_position(grad):
    """`torch.stack(outs, 1)` is taken as the list's consumer as `dim=1` is: the batch moved to
    that dimension, no list of rows (a negative or bool dimension keeps the list; one past the
    pieces' own makes the guard run the loop, whose call raises)."""
    torch.manual_seed(5)
    x = torch.randn(6, 9, 3)
    assert _check(stack_by_position, x, w34(), grad=grad) == "vectorized"
    assert "movedim(0, 1)" in explain(stack_by_position, x, w34()).rewritten_source
    assert _check(cat_by_position, x, grad=grad) == "vectorized"
    assert "flatten(2, 3)" in explain(cat_by_position, x).rewritten_source
    for fn in (stack_negative_position, stack_bool_position):
        _check(fn, x, grad=grad)
        assert "movedim(0," not in explain(fn, x).rewritten_source
    assert _check(stack_past_the_end, x, grad=grad) == "python"      # (the loop's IndexError)
    out = autovec(stack_by_position)(x, w34())
    assert out.is_contiguous() and out.stride() == stack_by_position(x, w34()).stride()


# ----------------------------------------------------------------------------- subclasses

class ReversedUnbind(torch.Tensor):
    """A subclass whose own unbind and split walk backwards (torch's __torch_function__)."""

    def unbind(self, dim=0):
        return tuple(torch.Tensor.unbind(self, dim))[::-1]

    def split(self, size, dim=0):
        return tuple(torch.Tensor.split(self, size, dim))[::-1]


class PlainSub(torch.Tensor):
    pass


class ReversedRows(torch.Tensor):
    def __iter__(self):
        return iter(tuple(torch.Tensor.unbind(self, 0))[::-1])


def over_rows(x):
    outs = []
    for r in x:
        outs.append(r * 2)
    return torch.stack(outs)


def test_a_subclass_with_its_own_unbind_runs_the_loop():
    """The guard takes a subclass only where its methods by which the loop reaches the rows
    (unbind, split, __iter__, ...) are torch's: the rewrite reads `x[:, k]` instead."""
    x = torch.randn(3, 4)
    for fn in (rnn_inputs, enumerated_last, pieces_doubled, torch_split_negative, rows_summed):
        args = (torch.randn(3, 4, 3).as_subclass(ReversedUnbind), w34()) if fn is rnn_inputs else \
            (torch.randn(3, 4, 2).as_subclass(ReversedUnbind),)
        want, got = fn(*args), autovec(fn)(*args)
        assert type(got) is type(want) and torch.equal(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
        assert explain(fn, *args).path == "python"
    rows = x.as_subclass(ReversedRows)
    assert torch.equal(autovec(over_rows)(rows).as_subclass(torch.Tensor), over_rows(rows).as_subclass(torch.Tensor))
    assert explain(over_rows, rows).path == "python"
    plain = torch.randn(3, 4, 3).as_subclass(PlainSub)      # (no method of its own: vectorized)
    assert _check(rnn_inputs, plain, w34()) == "vectorized"


# ----------------------------------------------------------------------------- with other moves

def built_front_first(x):
    out = []
    for xt in x.unbind(1):
        out.insert(0, xt.sum() * 2)
    return torch.stack(out)


def walk_inside_a_walk(x):
    tot = 0.0
    for a in x.unbind(0):          # (mentions `x` in its body: kept as written)
        for b in x.unbind(1):
            tot = tot + (a * b).sum()
    return tot


def test_with_a_front_built_list_and_inside_another_loop():
    """A list built front-first in the walk (analysis.reversal.front_builds, then this move):
    the fallback is the walk with appends and the reversal after it, and where nothing is
    vectorized both go back as written. An inner walk vectorizes on every pass of an outer loop."""
    torch.manual_seed(6)
    assert _check(built_front_first, torch.randn(3, 5), grad=True) == "vectorized"
    for bad in ([1.0, 2.0], torch.tensor(1.0), torch.randn(3)):
        _check(built_front_first, bad)
    assert _check(walk_inside_a_walk, torch.randn(4, 4), grad=True) == "vectorized"
    _check(walk_inside_a_walk, [torch.randn(4)])
    reports = explain(walk_inside_a_walk).loops
    assert reports[0].strategy == "python" and "mentions `x" in reports[0].reason and reports[1].vectorized


def words(lines):
    n = 0
    for w in lines.split(","):
        n += len(w)
    return n


def test_a_string_split_is_no_walk():
    assert _prepass(words) == (0, 0)
    assert _check(words, "a,bb,ccc") == "python"
    assert "pieces of size 1" not in explain(words).loops[0].reason


th = torch     # (torch by another name, as `import torch as th` gives)


def aliased(x):
    return th.stack([r.sum() for r in th.unbind(x, 1)])


def test_torch_by_another_name():
    assert _prepass(aliased) == (1, 0)
    assert _check(aliased, torch.randn(3, 4), grad=True) == "vectorized"
    _check(aliased, [torch.randn(3)])
