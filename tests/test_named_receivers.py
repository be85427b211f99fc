"""A loop over a walked method of a chain of tensor methods (`for s, d in edge_index.t().tolist()`,
graph code's edge lists) names the chain first (hoist.named_receivers): `edge_index_t =
edge_index.t()` right before the loop, which the planner then walks as any name's rows. Not
under `enumerate` / `zip`, whose header evaluates other things first. Every loop gives what, and
does what, the original does."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def edge_features(x, edge_index):
    feats = []
    for s, d in edge_index.t().tolist():
        feats.append(torch.cat([x[s], x[d], x[s] - x[d]]))
    return torch.stack(feats)


def enumerated(x, edge_index):
    feats = []
    for e, (s, d) in enumerate(edge_index.t().tolist()):
        feats.append(x[s] * e - x[d])
    return torch.stack(feats)


def zipped_after_an_unbound_name(x, e, flag):
    if flag:
        w = x
    out = []
    for a, (s, d) in zip(w, e.t().tolist()):     # (zip reads `w` first: UnboundLocalError)
        out.append(a * (s - d))
    return torch.stack(out)


def degree(edge_index, n):
    deg = torch.zeros(n)
    for s, d in edge_index.t().tolist():
        deg[s] += 1
    return deg


def zipped(w, pairs):
    out = []
    for a, (i, j) in zip(w, pairs.long().t().tolist()):
        out.append(a * (i - j))
    return torch.stack(out)


def rows_of_a_transpose(x):
    out = []
    for col in x.transpose(0, 1).unbind():
        out.append(col.sum())
    return torch.stack(out)


def name_taken(x, edge_index):
    edge_index_t = 3
    out = []
    for s, d in edge_index.t().tolist():
        out.append(x[s] * x[d] + edge_index_t)
    return torch.stack(out)


class Recorder:
    """Not a tensor: its methods log, and the loop over its `.t().tolist()` must log as written."""

    def __init__(self, log):
        self.log = log

    def t(self):
        self.log.append("t")
        return self

    def tolist(self):
        self.log.append("tolist")
        return [[0, 1], [1, 0]]


def over_an_object(x, obj, log):
    doubled = []
    for k in range(x.shape[0]):      # (vectorized: the function runs rewritten)
        doubled.append(x[k] * 2)
    for s, d in obj.t().tolist():
        log.append((s, d))
    return torch.stack(doubled)


def _edges(seed, n=6, m=10):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (2, m), generator=g)


def _same(fn, *args):
    fast = autovec(fn)
    for _ in range(3):
        want, got = fn(*args), fast(*args)
        assert torch.equal(want, got)
    return explain(fast, *args)


def test_edge_features_vectorize_over_the_named_transpose():
    for seed in range(3):
        ex = _same(edge_features, torch.randn(6, 3), _edges(seed))
    assert ex.path == "vectorized" and "edge_index_t = edge_index.t()" in ex.rewritten_source


def test_a_count_per_node():
    _same(degree, _edges(1), 6)


@pytest.mark.parametrize("fn", [enumerated, zipped])
def test_under_enumerate_or_zip_the_chain_stays_in_the_header(fn):
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(10), torch.randint(0, 5, (2, 10), generator=g).float()) if fn is zipped else \
        (torch.randn(6, 3), _edges(0))
    ex = _same(fn, *args)
    assert "_t = " not in ex.rewritten_source


def test_the_headers_own_errors_come_first():
    """(probeY) `zip` reads `w` before the chain's `.t()` runs: the loop's UnboundLocalError, not
    the RuntimeError of `.t()` on a 3-D tensor."""
    args = (torch.randn(4), torch.zeros(2, 2, 2, dtype=torch.long), False)
    with pytest.raises(UnboundLocalError) as want:
        zipped_after_an_unbound_name(*args)
    fast = autovec(zipped_after_an_unbound_name)
    for _ in range(3):
        with pytest.raises(UnboundLocalError) as got:
            fast(*args)
        assert str(got.value) == str(want.value)


def test_unbind_of_a_transpose():
    ex = _same(rows_of_a_transpose, torch.randn(4, 5))
    assert ex.path == "vectorized"


def test_the_new_name_avoids_the_functions_own():
    ex = _same(name_taken, torch.randn(6), _edges(2))
    assert "edge_index_t_" in ex.rewritten_source


def test_a_receiver_that_is_not_a_tensor_runs_its_methods_in_order():
    x = torch.randn(2)
    want_log, got_log = [], []
    want = over_an_object(x, Recorder(want_log), want_log)
    got = autovec(over_an_object)(x, Recorder(got_log), got_log)
    assert torch.equal(want, got) and want_log == got_log == ["t", "tolist", (0, 1), (1, 0)]
    assert "obj_t = obj.t()" in explain(over_an_object, x, Recorder([]), []).rewritten_source
