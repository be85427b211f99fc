"""The batched mode: bodies rewritten into whole-batch torch operations instead of vmap, checked
against the original loop (values, dtypes, gradients) and for the mode that ran."""
import ast

import pytest
import torch
import torch.nn.functional as F

from autovec import assert_equivalent, autovec, explain
from conftest import ran_modes as _ran
from corpus import clip_rows, count_hits, pairwise, softmax_rows as rows_softmax


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


W = torch.randn(5, 3)
TABLE = torch.randn(7, 4)


def cosine(p, q):
    sims = []
    for k in range(p.shape[0]):
        sims.append(torch.dot(p[k], q[k]) / (torch.norm(p[k]) * torch.norm(q[k])))
    return torch.stack(sims)


def standardize_rows(x):
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        v = x[k]
        out[k] = (v - v.mean()) / (v.std() + 1e-3)
    return out


def reductions(x):
    res = []
    for row in x:
        res.append(torch.stack([row.sum(), row.mean(), row.amax(), row.prod(), row.norm(1),
                                row.var(unbiased=False), row.logsumexp(0), row.max(), row.min(), row.std(0, False),
                                row.argmax().float(), torch.linalg.vector_norm(row, 3)]))
    return torch.stack(res)


def along_dims(x):
    res = []
    for m in x:
        a = m.sum(dim=-1, keepdim=True) + m.mean(0)
        v, i = m.max(dim=1)
        c = torch.cumsum(m, dim=1) * F.log_softmax(m, dim=-1)
        res.append(a.sum() + v.sum() + i.float().sum() + c.sum() + torch.logsumexp(m, dim=(0, 1)))
    return torch.stack(res)


def shapes(x):
    res = []
    for m in x:
        flat = m.flatten()
        t = m.t() @ m
        u = m.unsqueeze(0).squeeze(0).reshape(-1, 2).view(2, -1).transpose(0, 1)
        res.append(flat.sum() + t.sum() + u[0].sum() + m.permute(1, 0)[0].sum()
                   + m.shape[0] * m.ndim + len(m))
    return torch.stack(res)


def gather_label(logits, labels, gamma):
    total = torch.zeros(())
    for k in range(logits.shape[0]):
        logp = torch.log_softmax(logits[k], dim=0)[labels[k]]
        total = total + (1 - torch.exp(logp)) ** gamma * (-logp)
    return total


def table_lookup(ids, scale):
    out = torch.empty(ids.shape[0], TABLE.shape[1])
    for k in range(ids.shape[0]):
        out[k] = TABLE[ids[k]] * scale[k] + TABLE[ids[k], 0]
    return out


def products(x, v):
    res = []
    for k in range(x.shape[0]):
        a = W @ x[k]                 # (5, 3) @ (3,)
        b = x[k] @ W.t()             # (3,) @ (3, 5)
        c = torch.dot(x[k], v[k])
        d = torch.outer(x[k], v[k]).sum()
        m = torch.outer(v[k], x[k])          # a per-iteration matrix
        e = m @ x[k] + x[k] @ m + torch.dot(W[0, :3], x[k]) + W[0, :3] @ m + (m @ m).sum(0)
        f = torch.outer(W[1, :3], x[k]).sum(1) + torch.outer(x[k], W[2, :3]).sum(0)
        res.append(a + b + c + d + torch.mv(W, v[k]) + (e + f).sum())
    return torch.stack(res)


def index_arithmetic(x):
    out = torch.empty(x.shape[0], x.shape[1], dtype=torch.int32)
    f = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i].int() * (i + 1)      # int32 arithmetic, as in the loop
        f[i] = 0.5 * i + x[i].sum() * 0    # a Python float per iteration
    return out, f


def elementwise_mix(x, y):
    res = []
    for k in range(x.shape[0]):
        s = x[k].sum()                     # 0-d per iteration, against a row below
        z = torch.where(x[k] > 0, x[k] * s, y[k]) + torch.clamp(y[k], min=-0.5, max=0.5)
        res.append(F.normalize(z, dim=0) + F.linear(z, W[:, :z.shape[0]]).mean() + abs(z) + torch.maximum(z, y[k]))
    return torch.stack(res)


def stack_pieces(x):
    res = []
    for row in x:
        res.append(torch.stack([row * 2, row.exp()], dim=-1).sum(0) + torch.cat([row, row]).sum())
    return torch.stack(res)


LN_W, LN_B = torch.randn(4) * 0.5 + 1, torch.randn(4) * 0.1
EMB = torch.randn(9, 3)


def norm_layers(x, w2, b2):
    res = []
    for m in x:                                        # m: (3, 4)
        a = torch.layer_norm(m, (4,), LN_W, LN_B, 1e-5)
        b = F.layer_norm(m @ w2 + b2, (m.shape[1],))   # normalized_shape from a shape
        c = F.layer_norm(m, m.shape)                   # over both of the slice's dimensions
        res.append(torch.relu(a + b) * 2 + c)
    return torch.stack(res)


def lookups(ids, classes: int):
    res = []
    for k in range(ids.shape[0]):
        e = F.embedding(ids[k], EMB)                   # (2, 3)
        h = F.one_hot(ids[k], classes).float()         # (2, classes)
        g = F.one_hot(ids[k], 9).float()
        res.append(torch.cat([e.sum(0), h.sum(0) + g.sum(0)[:classes]]))
    return torch.stack(res)


CASES = {
    "norm_layers": (norm_layers, lambda: (torch.randn(6, 3, 4), torch.randn(4, 4), torch.randn(4))),
    "lookups": (lookups, lambda: (torch.randint(0, 9, (6, 2)), 9)),
    "rows_softmax": (rows_softmax, lambda: (torch.randn(6, 5), 0.7)),
    "cosine": (cosine, lambda: (torch.randn(6, 4), torch.randn(6, 4))),
    "standardize_rows": (standardize_rows, lambda: (torch.randn(6, 5),)),
    "reductions": (reductions, lambda: (torch.rand(6, 5) + 0.5,)),
    "along_dims": (along_dims, lambda: (torch.randn(6, 3, 4),)),
    "shapes": (shapes, lambda: (torch.randn(6, 4, 3),)),
    "gather_label": (gather_label, lambda: (torch.randn(6, 7), torch.randint(0, 7, (6,)), 2.0)),
    "table_lookup": (table_lookup, lambda: (torch.randint(0, 7, (6,)), torch.rand(6))),
    "products": (products, lambda: (torch.randn(6, 3), torch.randn(6, 3))),
    "clip_rows": (clip_rows, lambda: (torch.randn(6, 4) * 3, 2.0)),
    "count_hits": (count_hits, lambda: (torch.randn(6, 4), torch.randint(0, 4, (6,)))),
    "index_arithmetic": (index_arithmetic, lambda: (torch.randint(-50, 50, (6, 3)).float(),)),
    "elementwise_mix": (elementwise_mix, lambda: (torch.randn(6, 3), torch.randn(6, 3))),
    "stack_pieces": (stack_pieces, lambda: (torch.randn(6, 4),)),
}
GRAD = {"norm_layers", "rows_softmax", "cosine", "standardize_rows", "reductions", "along_dims", "shapes", "gather_label",
        "products", "elementwise_mix", "stack_pieces"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_batched_body_matches_the_loop(name):
    fn, make = CASES[name]
    assert_equivalent(fn, *make(), trials=3)
    if name in GRAD:
        args = [a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in make()]
        assert_equivalent(fn, *args, grad=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_batched_mode_runs_without_vmap(name):
    fn, make = CASES[name]
    fast = autovec(fn)
    fast(*make())
    assert _ran(fast) == {"batched"}, fast._autovec_state.runtime.batched


def test_switch_off_runs_vmap(monkeypatch):
    monkeypatch.setenv("AUTOVEC_BATCHED", "0")
    fast = autovec(rows_softmax)
    x = torch.randn(6, 5)
    torch.testing.assert_close(fast(x, 0.5), rows_softmax(x, 0.5))
    assert _ran(fast) == {"vmap"}


def test_explain_shows_the_batched_body():
    x = torch.randn(6, 5)
    ex = explain(rows_softmax, x, 0.7)
    text = str(ex)
    assert ex.path == "vectorized"
    assert "whole-batch torch operations" in text and "softmax(x_k / t, 1)" in text.replace("dim=1", "1")


def box_areas(p):
    out = []
    for i in range(p.shape[0]):
        out.append((p[i, 2:] - p[i, :2]).prod())
    return torch.stack(out)


def test_the_shown_batched_body_keeps_the_grouping_of_a_product():
    # (probeU: the shown body read `p_i[:, 2:] - p_i[:, :2].prod(1)`, another computation)
    text = str(explain(box_areas, torch.rand(10, 4)))
    assert "(p_i[:, 2:] - p_i[:, :2]).prod(1)" in text, text
    shown = next(line.strip() for line in text.splitlines() if ".prod(1)" in line)
    p_i = torch.rand(10, 4)
    assert torch.equal(eval(shown.removeprefix("return (").removesuffix(",)")), box_areas(p_i))


# --------------------------------------------------------------------- what has no batched form


def zero_d_with_dim(x):
    res = []
    for k in range(x.shape[0]):
        res.append(x[k].sum(0) + x[k].softmax(-1))   # x[k] is 0-d: dim 0 / -1 are the value itself
    return torch.stack(res)


def squeeze_all(x):
    res = []
    for k in range(x.shape[0]):
        res.append(x[k].squeeze().sum())
    return torch.stack(res)


def double_scalar(x, s):
    res = []
    for k in range(x.shape[0]):
        res.append(x[k] * s[k])     # s[k]: a 0-d float64 tensor, x[k] a float32 row: float32
    return torch.stack(res)


def full_max_with_ties(x):
    res = []
    for row in x:
        res.append(row.max() * 2 + row.min())
    return torch.stack(res)


@pytest.mark.parametrize("fn, make, mode", [
    (zero_d_with_dim, lambda: (torch.randn(6),), "vmap"),
    (squeeze_all, lambda: (torch.randn(6, 1, 3),), "vmap"),
    # (the 0-d value is cast to the row's dtype, as the loop computes: stop 22, the dtype probe)
    (double_scalar, lambda: (torch.randn(6, 3), torch.randn(6, dtype=torch.float64)), "batched"),
])
def test_no_batched_form_falls_back_to_vmap(fn, make, mode):
    assert_equivalent(fn, *make(), trials=2)
    fast = autovec(fn)
    fast(*make())
    assert _ran(fast) == {mode}


def test_full_max_gradient_is_shared_by_ties_and_nan():
    # max() gives each tied element an equal share, and with NaN only the NaN elements: as the loop
    x = torch.tensor([[1.0, 3.0, 3.0], [2.0, float("nan"), 1.0], [0.5, 0.5, 0.5], [4.0, 1.0, 2.0]],
                     requires_grad=True)
    assert_equivalent(full_max_with_ties, x, grad=True)
    fast = autovec(full_max_with_ties)
    fast(x)
    assert _ran(fast) == {"batched"}


# --------------------------------------------------------------------- loop nests


def pairwise_mixed(a, b, w):
    s = torch.zeros(a.shape[0], b.shape[0])
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            if i != j:
                s[i, j] = torch.dot(a[i], b[j]) * w[i] + F.softmax(a[i] * b[j], dim=0).amax() + (a[i] @ W.t()).sum()
    return s


def grid_values(x):
    out = torch.zeros(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j].sum() * (i + 1) - j + x[i, j].norm(dim=-1).max()
    return out


NESTS = {
    "pairwise": (pairwise, lambda: (torch.randn(5, 3), torch.randn(4, 3))),
    "pairwise_mixed": (pairwise_mixed, lambda: (torch.randn(4, 3), torch.randn(4, 3), torch.rand(4))),
    "grid_values": (grid_values, lambda: (torch.randn(3, 4, 2, 5),)),
}


@pytest.mark.parametrize("name", sorted(NESTS))
def test_batched_loop_nest_matches_the_loop(name):
    fn, make = NESTS[name]
    assert_equivalent(fn, *make(), trials=3)
    fast = autovec(fn)
    fast(*make())
    assert _ran(fast) == {"batched"}, fast._autovec_state.runtime.batched
    args = [a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in make()]
    if name != "pairwise_mixed":      # (a branch on the indices keeps gradients on the loop)
        assert_equivalent(fn, *args, grad=True)


# --------------------------------------------------------------------- helpers inlined

SCALE = 2.0


def _center(v):
    return v - v.mean()


def _standardize(v, eps=1e-5):
    """A helper calling a helper, with a default."""
    c = _center(v)
    return c / torch.sqrt((c ** 2).mean() + eps) * SCALE


def with_helpers(x):
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        out[k] = _standardize(x[k])
    return out


class Scorer:
    def __init__(self, w):
        self.w = w

    def score(self, v):
        return (v * self.w).sum()

    def run(self, x):
        res = []
        for k in range(x.shape[0]):
            res.append(self.score(x[k]))
        return torch.stack(res)


def test_helpers_are_inlined_into_the_batched_body():
    x = torch.randn(6, 5, requires_grad=True)
    assert_equivalent(with_helpers, x, trials=2, grad=True)
    fast = autovec(with_helpers)
    fast(x)
    assert _ran(fast) == {"batched"}
    s = Scorer(torch.randn(5))
    fast = autovec(Scorer.run)
    torch.testing.assert_close(fast(s, x), s.run(x))
    assert _ran(fast) == {"batched"}


def test_a_changed_helper_or_global_is_seen(monkeypatch):
    global _center
    x = torch.randn(6, 5)
    fast = autovec(with_helpers)
    torch.testing.assert_close(fast(x), with_helpers(x))
    monkeypatch.setattr(__import__(__name__), "SCALE", 3.0)          # a global the helper reads
    torch.testing.assert_close(fast(x), with_helpers(x))
    old = _center
    try:
        _center = lambda v: v * 0 + 1.0                                    # noqa: E731  (the helper's helper)
        torch.testing.assert_close(fast(x), with_helpers(x))
    finally:
        _center = old
    torch.testing.assert_close(fast(x), with_helpers(x))


act = torch.relu


def activate_rows(x):
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        out[k] = act(x[k] * 2)
    return out


def test_a_rebound_function_name_is_seen(monkeypatch):
    # the batched body assumed `act` is elementwise; rebinding it to softmax must not reuse that
    x = torch.randn(6, 5)
    fast = autovec(activate_rows)
    torch.testing.assert_close(fast(x), activate_rows(x))
    assert _ran(fast) <= {"batched", "broadcast"}
    monkeypatch.setattr(__import__(__name__), "act", _column_softmax)
    torch.testing.assert_close(fast(x), activate_rows(x))
    monkeypatch.setattr(__import__(__name__), "act", torch.cumsum_like if hasattr(torch, "cumsum_like") else torch.sigmoid)
    torch.testing.assert_close(fast(x), activate_rows(x))


def _column_softmax(v):
    return torch.softmax(v, dim=0)


# --------------------------------------------------------------------- random bodies


def _random_body(rng):
    """Source of a loop whose body composes the batched rules at random (ranks, dims, keepdim,
    negative dims, broadcasting against fixed tensors), and inputs for it. Expressions are kept
    only if one iteration evaluates them."""
    shape = [rng.randint(2, 4) for _ in range(rng.randint(1, 2))]
    sample = {"x[k]": torch.randn(*shape), "y[k]": torch.randn(*shape), "w": torch.randn(shape[-1]),
              "c": 0.5}

    def valid(e):
        try:
            return eval(e, {"torch": torch, "F": F}, sample)
        except Exception:
            return None

    def gen(depth):
        leaves = ["x[k]", "y[k]", "w", "x[k].sum()", "y[k].amax()"]
        if depth == 0:
            return rng.choice(leaves)
        a, b = gen(depth - 1), gen(depth - 1)
        va = valid(a)
        r = va.dim() if isinstance(va, torch.Tensor) else 0
        d = rng.randint(-r, r - 1) if r else 0
        kd = rng.choice(["True", "False"])
        forms = [f"({a} + {b})", f"({a} * {b})", f"torch.tanh({a})", f"({a} - c * {b})",
                 f"{a}.sum()", f"{a}.mean()", f"{a}.norm()", f"{a}.max()", f"{a}.std()",
                 f"torch.where({a} > 0, {a}, {b})", f"{a}.abs().sqrt()", f"{a}.exp().clamp(max=3.0)"]
        if r:
            forms += [f"{a}.sum(dim={d}, keepdim={kd})", f"torch.softmax({a}, dim={d})",
                      f"{a}.amax({d})", f"{a}.max(dim={d}).values", f"{a}.unsqueeze({d})",
                      f"torch.logsumexp({a}, dim={d})", f"{a}.cumsum({d})", f"{a}.flatten()",
                      f"{a}.argmax({d}).float()", f"F.normalize({a}, dim={d})", f"{a}.var({d}, False)",
                      f"{a}.transpose(0, -1)", f"({a} @ w)"]
        if r == 2:
            forms += [f"{a}.t()", f"({a} @ {a}.t())", f"{a}.reshape(-1)", f"{a}.permute(1, 0)"]
        for _ in range(8):
            e = rng.choice(forms)
            if valid(e) is not None:
                return e
        return a

    expr = gen(rng.randint(1, 3))
    src = (f"def body(x, y, w, c):\n    out = []\n    for k in range(x.shape[0]):\n"
           f"        out.append({expr})\n    return torch.stack(out)\n")
    n = rng.randint(2, 5)
    return src, (torch.randn(n, *shape), torch.randn(n, *shape), torch.randn(shape[-1]), 0.5)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("seed", range(60))
def test_random_batched_bodies(seed, tmp_path):
    import importlib.util
    import random
    src, args = _random_body(random.Random(seed))
    path = tmp_path / f"body_{seed}.py"
    path.write_text("import torch\nimport torch.nn.functional as F\n\n" + src)
    spec = importlib.util.spec_from_file_location(f"body_{seed}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    grad_args = [a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    assert_equivalent(mod.body, *args, trials=2)
    assert_equivalent(mod.body, *grad_args, grad=True)
    fast = autovec(mod.body)
    fast(*args)
    _RAN[seed] = _ran(fast)


_RAN: dict = {}


def test_random_bodies_mostly_run_batched():
    # (after the parametrized runs above) most random bodies run without vmap
    if len(_RAN) < 60:
        pytest.skip("needs the random-body runs")
    direct = [s for s, r in _RAN.items() if r and r <= {"batched", "broadcast"}]
    assert len(direct) >= 45, {s: r for s, r in _RAN.items() if s not in direct}


def _inlined(src):
    import ast
    from autovec.batching import _single_uses_inlined
    return ast.unparse(_single_uses_inlined(ast.parse(src).body[0]))


def test_a_temporary_read_once_by_the_next_statement_is_inlined():
    # the same operations in the same order; the temporary is freed as soon as it is read
    assert _inlined("def f(a, b, c):\n    t = a - b\n    u = t * c\n    return (u,)") == \
        "def f(a, b, c):\n    return ((a - b) * c,)"


@pytest.mark.parametrize("src", [
    "def f(a, b, c):\n    t = a - b\n    u = c * 2 + t\n    return (u,)",       # c * 2 would run first
    "def f(a, b, c):\n    t = a - b\n    u = t * t\n    return (u,)",           # read twice
    "def f(a, b, c):\n    t = a - b\n    v = c + 1\n    u = t * v\n    return (u,)",   # not the next statement
    "def f(a, b, c):\n    t = a - b\n    u = [t * k for k in c]\n    return (u,)",   # evaluated repeatedly
    "def f(a, b, c):\n    t = a - b\n    t = t * c\n    return (t,)",           # assigned twice
])
def test_a_temporary_whose_inlining_would_change_the_order_stays(src):
    assert "\n    t = a - b\n" in _inlined(src)


# ------------------------------------------------- elementwise temporaries reused in place

class _Allocations(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the out-of-place and in-place elementwise kernels that run."""

    def __init__(self):
        super().__init__()
        self.out_of_place = self.in_place = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("add", "sub", "mul", "div", "pow"):
            self.out_of_place += 1
        elif name in ("add_", "sub_", "mul_", "div_", "pow_"):
            self.in_place += 1
        return func(*args, **(kwargs or {}))


def _affine_rows(x, shift, scale, bias):
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        out[k] = (x[k] - shift) / scale * 2.0 + bias
    return out


def _standardized_rows(x, gamma):
    out = []
    for k in range(x.shape[0]):
        v = x[k]
        out.append((v - v.mean()) / (v.std() + 1e-5) * gamma)
    return torch.stack(out)


@pytest.mark.parametrize("fn, n", [(_affine_rows, 4), (_standardized_rows, 2)])
def test_large_batches_reuse_elementwise_temporaries_in_place(fn, n):
    # the same kernels, into the expression's own temporaries: bitwise the same values
    x = torch.randn(512, 256)
    args = (x, torch.randn(256), torch.rand(256) + 0.5, torch.randn(256))[:n]
    fast = autovec(fn)
    fast(*args)
    counter = _Allocations()
    with counter:
        got = fast(*args)
    assert counter.in_place >= 2
    torch.testing.assert_close(got, fn(*args), rtol=0, atol=0)


def test_small_batches_and_gradients_keep_every_temporary():
    x = torch.randn(512, 256)
    shift, scale, bias = torch.randn(256), torch.rand(256) + 0.5, torch.randn(256)
    fast = autovec(_affine_rows)
    small = (x[:4, :8], shift[:8], scale[:8], bias[:8])
    fast(*small)
    counter = _Allocations()
    with counter:
        fast(*small)
    assert counter.in_place == 0
    # with gradients: no temporary is overwritten (autograd may need it), and gradients agree
    assert_equivalent(_affine_rows, x, shift.requires_grad_(), scale.requires_grad_(), bias, grad=True)


@pytest.mark.parametrize("a, b, op, in_place", [
    (torch.zeros(70000), torch.ones(70000), "add", True),
    (torch.zeros(70000), 2.0, "mul", True),
    (torch.zeros(70000, dtype=torch.int64), 2.5, "mul", False),        # promotes to float
    (torch.ones(70000, dtype=torch.int64), 2, "div", False),           # true division gives floats
    (torch.zeros(70000, 1), torch.ones(1, 3), "add", False),           # broadcasting grows the result
    (torch.zeros(70000), torch.ones(70000, dtype=torch.float64), "sub", False),
    (torch.zeros(70000), torch.ones(70000, requires_grad=True), "add", False),
    (torch.zeros(100), torch.ones(100), "add", False),                 # small: not worth it
    (torch.zeros(70000, dtype=torch.float16), torch.ones((), dtype=torch.float64), "pow", True),
])
def test_an_operation_runs_in_place_only_when_it_gives_the_same_tensor(a, b, op, in_place):
    import operator
    from autovec.batching import _in_place
    want = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
            "pow": operator.pow}[op](a, b)
    got = _in_place(a.clone(), b, op)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    probe = a.clone()
    assert (_in_place(probe, b, op) is probe) == in_place


def test_explain_says_how_the_call_ran_each_loop():
    x = torch.randn(20, 6)
    ex = explain(rows_softmax, x, 0.5)
    (r,) = ex.loops
    assert r.strategy == "vmap" and "batched body" in r.ran
    assert "this call ran it as whole-batch torch operations" in str(ex)
    assert explain(rows_softmax).loops[0].ran == ""      # without arguments: nothing ran


def one_hot_inferred(ids):
    res = []
    for k in range(ids.shape[0]):
        res.append(F.one_hot(ids[k], -1).sum(0))       # each iteration's own number of classes
    return res


def test_one_hot_with_inferred_classes_keeps_each_iterations_width():
    """num_classes=-1 infers the width from each iteration's own maximum: the batched body
    refuses it at run time rather than using the batch's maximum for every row."""
    ids = torch.tensor([[0, 1], [2, 0], [4, 1]])
    fast = autovec(one_hot_inferred)
    got, want = fast(ids), one_hot_inferred(ids)
    assert [t.shape for t in got] == [t.shape for t in want] == [(2,), (3,), (5,)]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert "batched" not in _ran(fast)


def embedding_max_norm(ids, table):
    res = []
    for k in range(ids.shape[0]):
        res.append(F.embedding(ids[k], table, max_norm=1.0))
    return torch.stack(res)


def test_embedding_with_max_norm_is_not_batched():
    """max_norm renormalizes the table's rows in place as the loop reaches them: no batched form."""
    ids, table = torch.randint(0, 5, (4,)), torch.randn(5, 3) * 3
    t1, t2 = table.clone(), table.clone()
    fast = autovec(embedding_max_norm)
    torch.testing.assert_close(fast(ids, t1), embedding_max_norm(ids, t2))
    torch.testing.assert_close(t1, t2)
    assert "batched" not in _ran(fast)


def box_iou(pred, gt):
    iou = torch.zeros(pred.shape[0], gt.shape[0])
    for i in range(pred.shape[0]):
        for j in range(gt.shape[0]):
            xx1, yy1 = max(pred[i, 0], gt[j, 0]), max(pred[i, 1], gt[j, 1])
            xx2, yy2 = min(pred[i, 2], gt[j, 2]), min(pred[i, 3], gt[j, 3])
            inter = (xx2 - xx1).clamp(min=0) * (yy2 - yy1).clamp(min=0)
            area_p = (pred[i, 2] - pred[i, 0]) * (pred[i, 3] - pred[i, 1])
            area_g = (gt[j, 2] - gt[j, 0]) * (gt[j, 3] - gt[j, 1])
            iou[i, j] = inter / (area_p + area_g - inter)
    return iou


def _boxes(n):
    lo = torch.rand(n, 2)
    return torch.cat([lo, lo + torch.rand(n, 2) + 0.1], 1)


def python_extremes(x, y, z):
    out = []
    for k in range(x.shape[0]):
        out.append(max(x[k], y[k]) + min(x[k], y[k], z[k]) * 2 + max(z[k], x[k], y[k]))
    return torch.stack(out)


def test_builtin_max_min_of_0d_tensors_run_batched():
    assert_equivalent(box_iou, _boxes(5), _boxes(4), trials=3)
    fast = autovec(box_iou)
    fast(_boxes(5), _boxes(4))
    assert _ran(fast) == {"batched"}
    fast = autovec(python_extremes)
    x, y, z = torch.randn(8), torch.randn(8), torch.randn(8)
    torch.testing.assert_close(fast(x, y, z), python_extremes(x, y, z))
    assert _ran(fast) == {"batched"}


def test_builtin_max_min_keep_pythons_nan_and_tie_rules():
    """max(a, b) is b only where b > a: a NaN first argument stays, a NaN second one is
    dropped, and on ties the first argument (and its gradient) wins, unlike torch.maximum."""
    nan = float("nan")
    x = torch.tensor([nan, 1.0, 2.0, 3.0, nan, 0.5], requires_grad=True)
    y = torch.tensor([1.0, nan, 2.0, 1.0, nan, 0.5], requires_grad=True)
    z = torch.tensor([0.0, 0.0, 2.0, 5.0, 1.0, 0.5], requires_grad=True)
    fast = autovec(python_extremes)
    got = fast(x, y, z)
    x2, y2, z2 = (t.detach().clone().requires_grad_() for t in (x, y, z))
    want = python_extremes(x2, y2, z2)
    torch.testing.assert_close(got, want, equal_nan=True)
    torch.nan_to_num(got).sum().backward()
    torch.nan_to_num(want).sum().backward()
    for a, b in ((x, x2), (y, y2), (z, z2)):
        torch.testing.assert_close(a.grad, b.grad)
    # with gradients the loop runs: a value Python's max leaves out gets no gradient at all
    # there (test_regressions), where a batched `where` gives it zeros, or NaN through sqrt
    assert not _ran(fast)
    got = fast(x.detach(), y.detach(), z.detach())
    torch.testing.assert_close(got, want.detach(), equal_nan=True)
    assert _ran(fast) == {"batched"}


def mixed_max(x, c):
    out = []
    for k in range(x.shape[0]):
        out.append(x[k] * max(c, x[k].abs().sum()))      # a Python float against a tensor
    return torch.stack(out)


def test_builtin_max_of_a_python_number_and_a_tensor_is_not_batched():
    x = torch.randn(6, 3)
    fast = autovec(mixed_max)
    torch.testing.assert_close(fast(x, 1.0), mixed_max(x, 1.0))
    assert "batched" not in (_ran(fast) if fast._autovec_state.runtime else set())


def _named_fields(x):
    out = torch.empty(x.shape[0], x.shape[2])
    idx = torch.empty(x.shape[0], x.shape[2], dtype=torch.long)
    for i in range(x.shape[0]):
        out[i] = x[i].max(0).values * 2
        idx[i] = x[i].min(0).indices
    return out, idx


def test_values_and_indices_of_named_tuples_stay_batched(monkeypatch):
    """`row.max(0).values`, `.min(0).indices`: the batched call returns the
    same named tuple, batched."""
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.randn(30, 5, 4)
    f = autovec(_named_fields)
    got, want = f(x), _named_fields(x)
    torch.testing.assert_close(got, want)
    assert _ran(f) == {"batched"}


def picked(x, idx):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i][idx[i]] * 2)
    return torch.stack(out)


@pytest.mark.parametrize("kind", ["int64", "negative", "int32", "out of range"])
def test_one_element_per_row_by_index(kind, monkeypatch):
    # x_i[idx_i] is a gather along the rows where every index is in range; a negative index
    # (which indexing wraps) and an int32 index take two-tensor indexing; one out of range raises
    # as the loop does, through the loop
    import autovec.batching as B
    gathers = []
    real = torch.Tensor.gather
    monkeypatch.setattr(B.torch.Tensor, "gather", lambda *a, **k: gathers.append(1) or real(*a, **k))
    x = torch.randn(40, 6, dtype=torch.float64, requires_grad=True)
    idx = {"int64": torch.randint(0, 6, (40,)), "negative": torch.randint(-6, 6, (40,)),
           "int32": torch.randint(0, 6, (40,), dtype=torch.int32), "out of range": torch.randint(0, 7, (40,))}[kind]
    idx[0] = 6 if kind == "out of range" else idx[0]
    fast = autovec(picked)
    for _ in range(3):
        if kind == "out of range":
            with pytest.raises(IndexError, match="out of bounds"):
                fast(x, idx)
            continue
        got, want = fast(x, idx), picked(x, idx)
        assert torch.equal(got, want)
        assert torch.equal(torch.autograd.grad(got.sum(), x)[0], torch.autograd.grad(want.sum(), x)[0])
        assert _ran(fast) == {"batched"}
    assert bool(gathers) == (kind in ("int64", "negative"))


# (stop 22, the shape-rules probe) two rules that held only for special values: linalg.norm
# with an order of a matrix is a matrix norm, and vecdot conjugates where dot / @ / inner do not

def spectral_norms(x):
    res = []
    for i in range(x.shape[0]):
        res.append(torch.linalg.norm(x[i], 2))
    return torch.stack(res)


def complex_dots(a, b):
    res = []
    for i in range(a.shape[0]):
        res.append((a[i] @ b[i]) * 2 + torch.inner(a[i], b[i]) + torch.dot(a[i], b[i]).exp())
    return torch.stack(res)


def test_a_matrix_order_of_linalg_norm():
    fast = autovec(spectral_norms)
    u, v = torch.randn(5, 4, 1), torch.randn(5, 1, 4)
    torch.testing.assert_close(fast(u @ v), spectral_norms(u @ v))    # rank one: spectral is Frobenius
    for _ in range(3):
        x = torch.randn(5, 4, 4)
        torch.testing.assert_close(fast(x), spectral_norms(x))


def test_complex_dots_do_not_conjugate():
    fast = autovec(complex_dots)
    a, b = torch.randn(5, 3, dtype=torch.complex64), torch.randn(5, 3, dtype=torch.complex64)
    torch.testing.assert_close(fast(a.real.to(a.dtype), b.real.to(b.dtype)),
                               complex_dots(a.real.to(a.dtype), b.real.to(b.dtype)))
    for _ in range(3):
        torch.testing.assert_close(fast(a, b), complex_dots(a, b))
    assert _ran(fast) == {"batched"}



def topk_by_keyword(x):
    res = []
    for i in range(x.shape[0]):
        v, j = x[i].topk(k=2, dim=0)
        res.append(v.sum() + x[i].kthvalue(k=2, dim=-1).values.sum() + j.sum())
    return torch.stack(res)


def test_topk_and_kthvalue_with_k_by_keyword():
    fast = autovec(topk_by_keyword)
    for _ in range(3):
        x = torch.randn(6, 5, 3)
        assert torch.equal(fast(x), topk_by_keyword(x))
    assert _ran(fast) == {"batched"}


def relative_buckets(pos, q):
    out = torch.empty(q, pos.shape[0], dtype=torch.long)
    for i in range(q):
        rel = pos - i                                   # the index as a number: the batched body only
        out[i] = torch.min(rel.abs(), torch.full_like(rel, 7)) + torch.ones_like(rel) * 2
    return out


def like_factories(x):
    out = []
    for i in range(x.shape[0]):
        v = x[i] * i
        z = torch.zeros_like(v, dtype=torch.float64) + torch.full_like(v, 0.5, dtype=torch.float64)
        e = torch.ones_like(v, dtype=torch.int32) * 3
        out.append(torch.maximum(v.double(), z) + e)
    return torch.stack(out)


def test_like_factories_of_a_per_iteration_tensor_in_the_batched_body():
    from conftest import check_loop
    assert check_loop(relative_buckets, torch.arange(40), 30) == {"batched"}
    g = torch.Generator().manual_seed(4)
    assert check_loop(like_factories, torch.randn(9, 4, generator=g), grad=(0,)) == {"batched"}
