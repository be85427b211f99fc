"""Loops that update lists of tensors in place (an optimizer's step, an EMA of weights) run as
`torch._foreach_*` calls (analysis/foreach.py, foreach_rt.py): the same bits as the loop, and
the loop as written wherever the run-time check finds something the calls could do otherwise."""
import copy
import traceback

import pytest
import torch

from autovec import autovec, explain
from autovec import foreach_rt
from conftest import outcome

SHAPES = [(4, 3), (5,), (2, 2, 2), (7,), (3, 3), (1,), (6, 2), (0,)]


def tensors(n=16, param=False, positive=False, dtype=torch.float32):
    out = []
    for k in range(n):
        t = torch.randn(*SHAPES[k % len(SHAPES)], dtype=dtype)
        t = t.abs() + 0.1 if positive else t
        out.append(torch.nn.Parameter(t) if param else t)
    return out


def with_grads(n=16):
    ps = tensors(n, param=True)
    for p in ps:
        p.grad = torch.randn_like(p)
    return ps


def adam(params, grads, ms, vs, step, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    for i in range(len(params)):
        ms[i].mul_(b1).add_(grads[i], alpha=1 - b1)
        vs[i].mul_(b2).addcmul_(grads[i], grads[i], value=1 - b2)
        mhat = ms[i] / (1 - b1 ** step)
        vhat = vs[i] / (1 - b2 ** step)
        params[i].sub_(lr * mhat / (vhat.sqrt() + eps))
    return params


def rmsprop(params, sq, alpha=0.9, eps=1e-6, lr=0.01):
    with torch.no_grad():
        for p, v in zip(params, sq):
            v.mul_(alpha).addcmul_(p.grad, p.grad, value=1 - alpha)
            p.addcdiv_(p.grad, torch.sqrt(v) + eps, value=-lr)


def ema_copy(ema, params, d=0.9):
    with torch.no_grad():
        for e, p in zip(ema, params):
            e.copy_(d * e + (1 - d) * p)
    return ema


def group_step(group):
    for p in group["params"]:
        p.data.mul_(1 - group["lr"] * group["wd"]).add_(p.grad.data * p.grad.data, alpha=-group["lr"])


def indexed_aug(xs, ys, c=0.5):
    for i in range(len(xs)):
        xs[i] += c * ys[i]
        xs[i] *= 2
        xs[i] -= ys[i] / 3


def unary_chain(xs):
    for x in xs:
        x.abs_().sqrt_().add_(1.0).log_()


def clamped(xs, ys, lo=-0.5, hi=0.5):
    for x, y in zip(xs, ys):
        x.lerp_(y, 0.3).clamp_min_(lo).clamp_max_(hi).pow_(2)


def detached(xs, ys):
    for x, y in zip(xs, ys):
        x.detach().mul_(2).add_(-y.detach() ** 2).div_(3)


def ema_module(ema, model, d=0.9):
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters()):
            e.mul_(d).add_(p * p - p, alpha=1 - d)
    return ema


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4 + k % 3, 3 + k % 2) for k in range(8))
        self.register_buffer("scale", torch.ones(3))


class Printing(Net):
    def named_parameters(self, *args, **kwargs):
        print("walked")
        return super().named_parameters(*args, **kwargs)


def clone(a):
    if isinstance(a, torch.Tensor):
        c = a.detach().clone()
        if isinstance(a, torch.nn.Parameter):
            c = torch.nn.Parameter(c, requires_grad=a.requires_grad)
        if a.grad is not None:
            c.grad = a.grad.clone()
        return c
    if isinstance(a, (list, tuple)):
        return type(a)(clone(x) for x in a)
    if isinstance(a, dict):
        return {k: clone(v) for k, v in a.items()}
    if isinstance(a, torch.nn.Module):
        return copy.deepcopy(a)
    return a


def same(a, b) -> bool:
    if isinstance(a, torch.nn.Module):
        return same(list(a.parameters()), list(b.parameters()))
    if isinstance(a, torch.Tensor):
        return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
                and (a.grad is None) == (b.grad is None) and (a.grad is None or torch.equal(a.grad, b.grad)))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def compare(f, make, calls=3):
    """Run the loop and @autovec on copies of fresh arguments, several calls of one decorated
    object: returns, arguments after the call, exceptions and their messages must agree."""
    fast = autovec(f)
    for _ in range(calls):
        args = make()
        a1, a2 = clone(args), clone(args)
        assert same(outcome(f, *a1), outcome(fast, *a2)), f.__name__     # (values, or the same error)
        assert same(a1, a2), f.__name__
    return fast


FORMS = [
    (adam, lambda: (tensors(), tensors(), tensors(), tensors(positive=True), 3)),
    (adam, lambda: (tensors(40), tensors(40), tensors(40), tensors(40, positive=True), 7)),
    (rmsprop, lambda: (with_grads(), tensors(positive=True))),
    (ema_copy, lambda: (tensors(), tensors(param=True))),
    (group_step, lambda: ({"params": with_grads(), "lr": 0.1, "wd": 0.01},)),
    (indexed_aug, lambda: (tensors(), tensors())),
    (unary_chain, lambda: (tensors(),)),
    (clamped, lambda: (tensors(), tensors())),
    (detached, lambda: (tensors(), tensors())),
    (adam, lambda: (tensors(dtype=torch.float64), tensors(dtype=torch.float64), tensors(dtype=torch.float64),
                    tensors(positive=True, dtype=torch.float64), 2)),
]


@pytest.mark.parametrize("f,make", FORMS, ids=[f"{f.__name__}{k}" for k, (f, _) in enumerate(FORMS)])
def test_same_bits_as_the_loop(f, make):
    compare(f, make)
    ex = explain(f, *make())
    assert [r.strategy for r in ex.loops][:1] == ["foreach"]
    assert ex.path == "vectorized", ex.notes


def test_module_parameters_walked_as_lists():
    torch.manual_seed(0)
    model = Net()
    compare(ema_module, lambda: (Net(), model))
    assert explain(ema_module, Net(), model).path == "vectorized"


def test_module_generators_the_loop_alone_walks():
    """A module whose walk is its own (it prints here), and a generator named before the loop
    (zip(g, g) pairs its elements; what is left of it after a shorter zip is seen), keep the loop."""
    torch.manual_seed(0)
    model = Printing()
    compare(ema_module, lambda: (Printing(), model))
    assert explain(ema_module, Printing(), model).path == "python"

    def pairs(model, d=0.5):
        g = model.parameters()
        for a, b in zip(g, g):
            a.mul_(d).add_(b * b - b, alpha=1 - d)
        return g

    fast = autovec(pairs)
    m1 = torch.nn.Sequential(*[torch.nn.Linear(3, 3, bias=False) for _ in range(30)])
    m2 = copy.deepcopy(m1)
    with torch.no_grad():
        left1, left2 = list(pairs(m1)), list(fast(m2))
    assert same(m1, m2) and len(left1) == len(left2)


def test_rewritten_source_shows_the_foreach_calls():
    text = explain(adam).rewritten_source
    assert "torch._foreach_mul_(ms, b1)" in text
    assert "torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)" in text
    assert "for i in range" not in text


def test_chunks_of_a_long_list_give_the_same_bits(monkeypatch):
    monkeypatch.setattr(foreach_rt, "_CHUNK_BYTES", 64)
    compare(adam, lambda: (tensors(30), tensors(30), tensors(30), tensors(30, positive=True), 3))
    got = foreach_rt._guard(_Rt(),
                            (1, 2, (("base", 0), ("base", 1)), (0,), (), False, ("add_",), None, (0, 1)),
                            (tensors(30), tensors(30)), ())
    assert got is not None and len(got) > 1 and sum(len(c[0]) for c in got) == 30


class _Rt:
    """A runtime stand-in for the guard's refusals."""
    def __init__(self):
        self.why = []

    def _fe_refuse(self, loop_id, why, cost=False):
        self.why.append(why)


def _guard(lists, scalars=(), written=(0,), slots=None, nograd=False, length=None):
    slots = slots or tuple(("base", k) for k in range(len(lists)))
    rt = _Rt()
    spec = (1, len(lists), slots, written, (), nograd, ("add_",), length, tuple(range(len(slots))))
    return foreach_rt._guard(rt, spec, lists, scalars), rt.why


def test_guard_refuses_what_the_calls_could_do_otherwise():
    a, b = tensors(), tensors()
    assert _guard((a, b))[0] is not None
    # the same tensor written in two iterations
    got, why = _guard(([a[0], a[0]] + a[2:], [b[0], b[0]] + b[2:]))
    assert got is None and "share memory" in why[0]
    # overlapping views of one buffer, one written
    buf = torch.randn(60)
    got, why = _guard(([buf[0:5], buf[3:8]] + [torch.randn(5) for _ in range(6)], [torch.randn(5) for _ in range(8)]))
    assert got is None and "share memory" in why[0]
    # disjoint views of one buffer are fine; so is one tensor every iteration only reads
    assert _guard((list(torch.randn(40).chunk(8)), [torch.randn(5) for _ in range(8)]))[0] is not None
    shared = torch.randn(3)
    assert _guard(([torch.randn(3) for _ in range(8)], [shared] * 8))[0] is not None
    assert _guard(([shared] * 8, [torch.randn(3) for _ in range(8)]))[0] is None
    # dtypes, shapes, grad, layout, inference tensors, numbers
    assert "float32 or float64" in _guard(([t.half() for t in a], [t.half() for t in b]))[1][0]
    assert "one dtype" in _guard((a, [t.double() for t in b]))[1][0]
    assert "differ in shape" in _guard((a, b[::-1]))[1][0]
    got, why = _guard((tensors(param=True), b))
    assert got is None and "requires grad" in why[0]
    assert _guard((tensors(param=True), b), nograd=True)[0] is not None
    assert "contiguous" in _guard(([torch.randn(4, 5).t() for _ in range(8)], [torch.randn(5, 4) for _ in range(8)]))[1][0]
    with torch.inference_mode():
        inf = [torch.randn(3) for _ in range(8)]
    assert "inference" in _guard((inf, [torch.randn(3) for _ in range(8)]))[1][0]
    assert "int or float" in _guard((a, b), scalars=(torch.tensor(1.0),))[1][0]
    assert "int or float" in _guard((a, b), scalars=(True,))[1][0]
    assert "large" in _guard(([torch.randn(64, 128) for _ in range(8)], [torch.randn(64, 128) for _ in range(8)]))[1][0]


def test_disjoint_ranges():
    buf = torch.randn(100)
    a, b, c = buf[0:10], buf[10:20], buf[5:20]

    def d(items):    # (tensor, iteration, written)
        ts = [t for t, _, _ in items]
        spans = sorted((t.data_ptr(), t.data_ptr() + t.nbytes, i, w, k) for k, (t, i, w) in enumerate(items))
        return foreach_rt._disjoint(spans, ts)

    assert d([(a, 0, True), (b, 1, True)])
    assert not d([(a, 0, True), (c, 1, False)])
    assert d([(a, 0, False), (c, 1, False)])                 # (reads only)
    assert d([(a, 0, True), (a, 0, False), (b, 1, True)])    # (one view in two roles of its iteration)
    assert not d([(a, 0, True), (buf[0:5], 0, False)])       # (a part of it in its own iteration)
    m = torch.randn(4, 4)
    assert not d([(m, 0, True), (m.t(), 0, False)])          # (its transpose)


def sgd(params, grads, bufs, lr=0.1, momentum=0.9, wd=1e-2):
    for i in range(len(params)):
        d_p = grads[i].add(params[i], alpha=wd)
        buf = bufs[i]
        buf.mul_(momentum).add_(d_p)
        step = d_p.add(buf, alpha=momentum)
        params[i].add_(step, alpha=-lr)


def test_writes_through_another_name_are_the_lists_writes():
    """`buf = bufs[i]; buf.mul_(..)` (torch.optim.SGD's own spelling) writes into `bufs`: one buffer
    shared by every iteration keeps the loop (probeM 1)."""
    compare(sgd, lambda: (tensors(), tensors(), tensors()))
    assert explain(sgd, tensors(), tensors(), tensors()).path == "vectorized"
    shared = lambda: (tensors(), tensors(), [torch.zeros(5)] * 16)   # noqa: E731
    compare(sgd, lambda: ([torch.randn(5) for _ in range(16)], [torch.randn(5) for _ in range(16)], [torch.zeros(5)] * 16))
    assert "share memory" in explain(sgd, *shared()).notes[-1] or explain(sgd, *shared()).path == "python"


def test_a_partial_overlap_in_one_iteration_raises_as_the_loop_does():
    """A tensor written that another tensor of its own iteration meets in part makes the loop's
    operation raise at that iteration; the calls would raise after updating every row (probeM 2)."""
    def make():
        xs, ys = tensors(), tensors()
        buf = torch.randn(20)
        xs[3], ys[3] = buf[0:10], buf[5:15]
        xs[5] = torch.randn(4, 4)
        ys[5] = xs[5].t()
        return xs, ys

    def upd(xs, ys):
        for x, y in zip(xs, ys):
            x.mul_(2).add_(y).div_(3)

    compare(upd, make)
    assert explain(upd, *make()).path == "python"


@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_transforms_and_forward_ad_keep_the_loop():
    import torch.autograd.forward_ad as fwad

    def upd(xs, ys, a=0.5):
        with torch.no_grad():
            for x, y in zip(xs, ys):
                x.mul_(a).add_(y, alpha=1 - a)
                x.addcmul_(y, y, value=0.1)
                y.sqrt_()

    def copying(xs, ys, zs):
        for x, y, z in zip(xs, ys, zs):
            y.mul_(1.5)
            x.copy_(y)
            z.add_(y)
            x.mul_(1.25)

    fast, fast_copy = autovec(upd), autovec(copying)

    def under_vmap(fn):
        return torch.func.vmap(lambda X, Y: (fn(list(X.unbind(0)), list(Y.unbind(0))), X)[1])(
            torch.randn(4, 16, 3), torch.rand(4, 16, 3))

    for _ in range(3):
        torch.manual_seed(0)
        want = under_vmap(upd)
        torch.manual_seed(0)
        assert torch.equal(under_vmap(fast), want)
        out = []
        for fn in (copying, fast_copy):
            g = torch.Generator().manual_seed(0)
            with fwad.dual_level():
                lists = [[fwad.make_dual(torch.rand(5, generator=g), torch.randn(5, generator=g)) for _ in range(16)]
                         for _ in range(3)]
                fn(*lists)
                out.append([fwad.unpack_dual(t) for lst in lists for t in lst])
        assert all(torch.equal(a.primal, b.primal) and torch.equal(a.tangent, b.tangent) for a, b in zip(*out))


def test_a_default_device_context_is_no_mode_that_sees_the_calls():
    """`with torch.device(..)` is a torch function mode that only gives factories a device: the
    calls run under it; another mode keeps the loop (it would see `_foreach_` calls)."""
    from torch.overrides import TorchFunctionMode

    class Logged(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    make = lambda: (tensors(), tensors(), tensors(), tensors(positive=True), 3)   # noqa: E731
    with torch.device("cpu"):
        compare(adam, make)
        assert explain(adam, *make()).path == "vectorized"
    fast = autovec(adam)
    for _ in range(3):
        args = make()
        a1, a2 = clone(args), clone(args)
        with Logged() as m1:
            adam(*a1)
        with Logged() as m2:
            fast(*a2)
        assert same(a1, a2) and m1.seen == m2.seen


def test_functions_that_read_their_locals_are_left_alone():
    def peek(xs, ys):
        for x, y in zip(xs, ys):
            x.mul_(2).add_(y).div_(3)
        return eval("x is xs[-1]")

    compare(peek, lambda: (tensors(), tensors()))
    assert explain(peek).loops[0].strategy == "python"


def test_an_unbound_list_raises_where_the_loop_does():
    def f(xs, flag):
        if flag:
            ys = xs
        for i in range(len(xs)):
            xs[i].mul_(2)
            xs[i].add_(ys[i])
            xs[i].div_(3)

    compare(f, lambda: (tensors(), False))
    compare(f, lambda: (tensors(), True))


@pytest.mark.parametrize("make,why", [
    (lambda: (tensors(), tensors(), tensors()[::-1], tensors(positive=True), 3), "differ in shape"),
    (lambda: (tensors(), tensors(), tensors(), [t.double() for t in tensors(positive=True)], 3), "one dtype"),
    (lambda: (tensors(), tensors(), tensors(), tensors(positive=True)[:5], 3), "one length"),
    (lambda: (tensors(3), tensors(3), tensors(3), tensors(3, positive=True), 3), "iteration(s)"),
    (lambda: (tensors(param=True), tensors(), tensors(), tensors(positive=True), 3), "requires grad"),
])
def test_the_loop_runs_and_raises_as_written(make, why):
    """Where the check refuses, the loop runs as written: the same values, or the same exception
    at the same iteration, with the same updates before it."""
    compare(adam, make)
    ex = explain(adam, *make())
    assert ex.path == "python" and any(why in n for n in ex.notes), ex.notes


def test_a_none_grad_runs_the_loop():
    def make():
        ps = with_grads()
        ps[3].grad = None
        return ps, tensors(positive=True)

    compare(rmsprop, make)
    assert any("None" in n for n in explain(rmsprop, *make()).notes)


def test_tuples_stored_into_raise_as_written():
    compare(indexed_aug, lambda: (tuple(tensors()), tensors()))
    compare(indexed_aug, lambda: (tensors(), tuple(tensors())))     # (only read: fine)
    assert explain(indexed_aug, tensors(), tuple(tensors())).path == "vectorized"


def test_a_number_that_raises_raises_at_the_loops_point():
    def scaled(xs, ys, k):
        for x, y in zip(xs, ys):
            x.mul_(2).add_(y, alpha=1 / k).div_(3)

    compare(scaled, lambda: (tensors(), tensors(), 0))      # ZeroDivisionError after the first mul_
    compare(scaled, lambda: (tensors(), tensors(), 4))
    assert explain(scaled, tensors(), tensors(), 4).path == "vectorized"


def test_traceback_points_at_the_users_line():
    fast = autovec(adam)
    args = (tensors(), tensors(), tensors(), tensors(positive=True)[::-1], 3)
    with pytest.raises(RuntimeError) as info:
        fast(*args)
    frames = traceback.extract_tb(info.tb)
    assert frames[-1].filename == __file__ and "vs[i].mul_(b2)" in frames[-1].line


def test_names_read_after_the_loop_keep_the_other_strategies():
    def last_seen(xs, ys):
        for x, y in zip(xs, ys):
            x.mul_(2).add_(y).div_(3)
        return x

    def local_after(xs, ys):
        for x, y in zip(xs, ys):
            z = y * 2
            x.mul_(z).add_(z).div_(3)
        return z

    for f in (last_seen, local_after):
        assert explain(f).loops[0].strategy != "foreach"
        compare(f, lambda: (tensors(), tensors()))


def test_forms_it_leaves_alone():
    def reads_only(xs, out):
        for x in xs:
            out.append(x * 2 + 1)
        return out

    def printed(xs):
        for x in xs:
            x.mul_(2).add_(1).div_(3)
            print(x.sum())

    def attribute_scalar(xs, opt):
        for x in xs:
            x.mul_(opt.lr).add_(1).div_(3)

    def int_index(xs, ys):
        for i in range(len(xs)):
            xs[i].mul_(i).add_(ys[i]).div_(3)

    def reassigned(xs):
        for x in xs:
            x = x * 2
            x.mul_(2).add_(1).div_(3)

    def two_ops_two_lists(es, ps, d=0.99):
        for e, p in zip(es, ps):
            e.mul_(d).add_(p, alpha=1 - d)     # (2 operations on 2 lists: the loop is as fast)

    def number_minus(xs, ys):
        for x, y in zip(xs, ys):
            x.mul_(2).add_(1 - y).div_(3).sub_(2 / (y * y + 1))   # (`1 - y`, `2 / v`: no `_foreach_` form)

    for f in (reads_only, printed, attribute_scalar, int_index, reassigned, two_ops_two_lists, number_minus):
        assert all(r.strategy != "foreach" for r in explain(f).loops), f.__name__
    compare(number_minus, lambda: (tensors(), tensors()))


def test_half_precision_keeps_the_loop():
    make = lambda: (tensors(dtype=torch.float16), tensors(dtype=torch.float16))   # noqa: E731
    compare(clamped, make)
    assert explain(clamped, *make()).path == "python"


def beside_another_loop(xs, ys, x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2)
    for a, b in zip(xs, ys):
        a.mul_(2).add_(b).div_(3)
    return torch.stack(out)


def rows_of_a_tensor(x, y):
    for i in range(len(x)):
        x[i].mul_(2).add_(y[i]).div_(3)
    return x


def test_the_other_loops_and_a_refused_call_keep_their_strategies(monkeypatch):
    """A foreach loop leaves the function's other loops to their strategies, and a call its
    check refuses (a tensor's rows, not a list) runs the loop as they make it."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    ex = explain(beside_another_loop, tensors(), tensors(), torch.randn(40, 3))
    assert [r.strategy for r in ex.loops] == ["broadcast", "foreach"], ex.loops
    compare(beside_another_loop, lambda: (tensors(), tensors(), torch.randn(40, 3)))
    ex = explain(rows_of_a_tensor, torch.randn(40, 3), torch.randn(40, 3))
    assert ex.loops[0].strategy == "foreach" and ex.path == "vectorized"
    assert any("does not take this call" in n for n in ex.notes)
    compare(rows_of_a_tensor, lambda: (torch.randn(40, 3), torch.randn(40, 3)))


def test_strict_raises_where_the_form_refuses_a_call_nothing_else_vectorizes():
    from autovec import NotVectorizable

    strict = autovec(adam, strict=True)
    args = (tensors(), tensors(), tensors(), tensors(positive=True), 3)
    strict(*clone(args))                                   # (taken: nothing raised)
    with pytest.raises(NotVectorizable, match="foreach form does not take this call.*one dtype"):
        strict(tensors(), tensors(), tensors(), [t.double() for t in tensors(positive=True)], 3)
    with pytest.raises(NotVectorizable, match="a number the operations take is a Tensor"):
        strict(*clone(args[:4]), 3, torch.tensor(1e-3))
    ex = explain(adam, *clone(args[:4]), 3, torch.tensor(1e-3))
    assert ex.path == "python" and any("a number the operations take is a Tensor" in n for n in ex.notes)
    small = (tensors(4), tensors(4), tensors(4), tensors(4, positive=True), 3)
    a1, a2 = clone(small), clone(small)
    adam(*a1)
    strict(*a2)                                            # (the cost model's refusal: the loop runs)
    assert same(a1, a2)


def test_negative_views_and_nested_tensors_keep_the_loop():
    """`_foreach_` refuses written negative views (the loop's methods take them), and a nested
    tensor has no shape for the check to read: both run the loop as written (probeM 7)."""
    def make(seed):
        torch.manual_seed(seed)
        xs, ys = tensors(), tensors()
        xs[4] = torch._neg_view(xs[4])      # (a copy of the arguments would drop the negative bit)
        return xs, ys

    def upd(xs, ys):
        for x, y in zip(xs, ys):
            x.mul_(2).add_(y).div_(3)

    fast = autovec(upd)
    for seed in range(3):
        a, b = make(seed), make(seed)
        assert same(outcome(upd, *a), outcome(fast, *b)) and same(a, b)
        assert b[0][4].is_neg()
    nested = lambda: ([torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]) for _ in range(16)],  # noqa: E731
                      [torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]) for _ in range(16)])
    def nested_upd(xs, ys):
        for x, y in zip(xs, ys):
            x.mul_(2).add_(y).mul_(0.5)

    fast_nested = autovec(nested_upd)
    for _ in range(3):
        a = nested()
        b = [[t.clone() for t in lst] for lst in a]
        nested_upd(*a)
        fast_nested(*b)
        assert all(torch.equal(p.to_padded_tensor(0.0), q.to_padded_tensor(0.0)) for p, q in zip(a[0], b[0]))


def _spellings_module(tmp_path):
    """A module of loops, one per operation foreach writes (each unary method and torch function,
    in place and not; the binary methods, keywords and operators), so each rule meets the loop."""
    from autovec.analysis.foreach import _UNARY
    src = ["import torch", ""]
    for u in _UNARY:
        src += [f"def inplace_{u}(xs, ys):", "    for x, y in zip(xs, ys):", f"        x.{u}_().mul_(0.5).add_(y)", ""]
        src += [f"def value_{u}(xs, ys):", "    for x, y in zip(xs, ys):",
                f"        x.copy_(y.{u}() * 0.5 + torch.{u}(x))", ""]
    src += ["def binary(xs, ys, zs):", "    for x, y, z in zip(xs, ys, zs):",
            "        x.copy_(y.add(z, alpha=0.3).sub(y, alpha=2) - 0.5 + (-y) * 3 + y ** 2 / 3 + y.mul(z).div(1.5) + 2.0 * z + (1.5 + y))", "",
            "def lerps(xs, ys, zs):", "    for x, y, z in zip(xs, ys, zs):",
            "        x.lerp_(y, weight=z).add_(y).mul_(0.5).sub_(z, alpha=0.1)",
            "        y.lerp_(z, x).zero_().add_(2.5)", ""]
    path = tmp_path / "foreach_spellings.py"
    path.write_text("\n".join(src))
    import importlib.util
    spec = importlib.util.spec_from_file_location("foreach_spellings", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_operation_gives_the_loops_bits(tmp_path):
    """Values in (0.05, 0.95) (every unary function's domain) and special ones (0, -0.0, 1, NaN)."""
    from autovec.analysis.foreach import _UNARY
    mod = _spellings_module(tmp_path)

    def lists(k):
        out = []
        for t in tensors():
            v = torch.rand(t.shape) * 0.9 + 0.05
            if v.numel() > 3:
                v.view(-1)[:4] = torch.tensor([0.0, -0.0, 1.0, float("nan")])
            out.append(v)
        return [out] + [[torch.rand(t.shape) * 0.9 + 0.05 for t in out] for _ in range(k - 1)]

    names = [f"inplace_{u}" for u in _UNARY] + [f"value_{u}" for u in _UNARY] + ["binary", "lerps"]
    for name in names:
        f = getattr(mod, name)
        k = 3 if name in ("binary", "lerps") else 2
        fast = autovec(f)
        for seed in range(3):
            torch.manual_seed(seed)
            a = lists(k)
            b = [[t.clone() for t in lst] for lst in a]
            f(*a)
            fast(*b)
            for p, q in zip(sum(a, []), sum(b, [])):
                torch.testing.assert_close(q, p, rtol=0, atol=0, equal_nan=True, msg=name)
        torch.manual_seed(0)
        ex = explain(f, *lists(k))
        assert ex.loops[0].strategy == "foreach" and ex.path == "vectorized", (name, ex.notes)
