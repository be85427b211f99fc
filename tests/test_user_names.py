"""The user's own names never meet the rewrite's: every corpus loop, its local names renamed to
the short upper-case names the rewrite's templates once used as placeholders (`P[i] += G[i]`
raised inside the rewrite and kept the loop), vectorizes as the original does and computes the
same. Template placeholders start with `_av_`, which the analysis refuses in user code."""
import ast
import importlib
import inspect
import sys
import textwrap

import pytest
import torch

from autovec import autovec, explain
from conftest import outcome
from corpus import CORPUS

NAMES = ["P", "T", "R", "AV", "RG", "PP", "O", "E", "A", "B", "BODY", "REF", "PRE", "ORIG", "RUN", "SPACE",
         "WRITES", "MAPPED", "FREE", "CALLS", "PREPARE", "COMMIT", "ORIGINAL", "RELEASE", "RESTORE", "DIRECT"]


def _renamed(fn):
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    fdef = tree.body[0]
    used = {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name)} | {a.arg for a in ast.walk(fdef)
                                                                        if isinstance(a, ast.arg)}
    local = [a.arg for a in ast.walk(fdef) if isinstance(a, ast.arg)]
    local += [n.id for n in ast.walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    free = iter(x for x in NAMES if x not in used)
    subs = {}
    for name in dict.fromkeys(local):
        subs[name] = next(free, name)
    for n in ast.walk(fdef):
        if isinstance(n, ast.Name) and n.id in subs:
            n.id = subs[n.id]
        elif isinstance(n, ast.arg) and n.arg in subs:
            n.arg = subs[n.arg]
    return ast.unparse(tree), subs


@pytest.fixture(scope="module")
def renamed_module(tmp_path_factory):
    where = tmp_path_factory.mktemp("names")
    src = ["import torch", "import torch.nn.functional as F", "import corpus", "globals().update({k: v for k, v in vars(corpus).items() if not k.startswith('__')})", ""]
    for name, (fn, *_rest) in CORPUS.items():
        text, _ = _renamed(fn)
        src += [text, ""]
    (where / "renamed_corpus.py").write_text("\n".join(src))
    sys.path.insert(0, str(where))
    try:
        yield importlib.import_module("renamed_corpus")
    finally:
        sys.path.remove(str(where))
        sys.modules.pop("renamed_corpus", None)


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.allclose(
            a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_renamed_loops_vectorize_as_the_originals(name, renamed_module, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fn, make, *_ = CORPUS[name]
    other = getattr(renamed_module, fn.__name__)
    paths = []
    for f in (fn, other):
        fast = autovec(f)
        for _ in range(3):
            args = make()
            got = fast(*args)
            assert _same(got, f(*make())), (name, f is other)
        paths.append(([lp.strategy for lp in explain(fast).loops], explain(fast, *make()).path))
    assert paths[1] == paths[0], _renamed(fn)[1]


@pytest.mark.parametrize("op", ["+=", "-=", "*="])
def test_update_of_an_argument_named_like_a_placeholder(op, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(_STEPS[op])
    p, g = torch.randn(64, 3), torch.randn(64, 3)
    want = _STEPS[op](p.clone(), g)
    for _ in range(3):
        got = fast(q := p.clone(), g)
        assert torch.equal(got, want) and got is q
    assert explain(fast, p.clone(), g).path == "vectorized"


def _add(P, G):
    for i in range(P.shape[0]):
        P[i] += G[i]
    return P


def _sub(P, G):
    for i in range(P.shape[0]):
        P[i] -= G[i]
    return P


def _mul(P, G):
    for i in range(P.shape[0]):
        P[i] *= G[i]
    return P


_STEPS = {"+=": _add, "-=": _sub, "*=": _mul}


_av_scale = 3.0


def _reads_reserved_global(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * _av_scale
    return out


def test_a_reserved_name_read_from_outside_keeps_the_loop(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fast = autovec(_reads_reserved_global)
    x = torch.randn(20, 2)
    assert torch.equal(fast(x), _reads_reserved_global(x))
    report = explain(fast, x)
    assert report.path == "python" and "reserved" in report.loops[0].reason


# (stop 22, the names probe) a module that rebinds `len`, `max`, `Exception`, imports torch as
# `th` and one_hot as `oh`, and calls torch.minimum through an attribute named `maximum`

@pytest.mark.parametrize("name, args", [
    ("best_of", lambda: (torch.randn(6, 5),)),
    ("repeated", lambda: (torch.randn(6, 5), torch.randn(3))),
    ("one_hot_rows", lambda: (torch.tensor([0, 1, 5, 2]),)),
    ("running_extreme", lambda: (torch.randn(6, 5),)),
])
def test_a_module_that_rebinds_names_the_rewrite_could_use(name, args, monkeypatch):
    import shadowed_names
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    fn = getattr(shadowed_names, name)
    fast = autovec(fn)
    if name == "one_hot_rows":
        fast(torch.tensor([0, 1, 3, 2]))            # the steady state first, then a class out of range
    for _ in range(3):
        a = args()
        want, got = outcome(fn, *a), outcome(fast, *a)
        if isinstance(want, torch.Tensor):
            assert torch.equal(got, want)
        elif isinstance(want, list):
            assert len(got) == len(want) and all(g is w for g, w in zip(got, want))
        else:
            assert got == want


def test_a_median_of_torch_under_another_name_keeps_tied_gradients(monkeypatch):
    import shadowed_names
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x = torch.tensor([[1., 2., 2., 2., 3.], [0., 5., 5., 1., 9.]])
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    shadowed_names.medians(a).sum().backward()
    autovec(shadowed_names.medians)(b).sum().backward()
    assert torch.equal(a.grad, b.grad)
