"""Loops whose elements only index, walking numpy integers (a replay buffer's np.random
indices): the numbers index as the Python ints they hold, so the loop is batched as for a list
of ints (runtime._index_only, _numpy_indices); anywhere else a numpy number is used, the loop
runs as written."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from autovec import autovec, explain


def sample(buf, idxs):
    return torch.stack([buf[j] for j in idxs])


def sample_pairs(obs, rew, idxs):
    o, r = [], []
    for j in idxs:
        o.append(obs[j])
        r.append(rew[j])
    return torch.stack(o), torch.stack(r)


def sample_rows(table, idxs):
    return torch.stack([table[j, :] for j in idxs])


def scaled_by_index(buf, idxs):
    return torch.stack([buf[j] * j for j in idxs])     # numpy arithmetic: the loop


def last_index(buf, idxs):
    out = []
    for j in idxs:
        out.append(buf[j])
    return torch.stack(out), j                         # the element read after the loop: the loop


def _same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
        return
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    else:
        assert a == b


def _indices(kind, n, size, seed=0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(-n, n, size=size)
    if kind == "int64":
        return idx.astype(np.int64)
    if kind == "int32":
        return idx.astype(np.int32)
    if kind == "uint8":
        return (idx % min(n, 256)).astype(np.uint8)
    if kind == "list":
        return list(idx.astype(np.int64))
    if kind == "tuple":
        return tuple(idx.astype(np.int32))
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["int64", "int32", "uint8", "list", "tuple"])
@pytest.mark.parametrize("fn", [sample, sample_rows])
def test_numpy_indices_are_gathered_as_the_loop_indexes(fn, kind):
    buf = torch.randn(300, 8)
    f = autovec(fn)
    for call in range(4):
        idxs = _indices(kind, 300, 512, seed=call)
        _same(f(buf, idxs), fn(buf, idxs))
    assert explain(fn, buf, idxs).path == "vectorized"


def test_two_gathers_and_gradients():
    obs = torch.randn(1000, 4, requires_grad=True)
    rew = torch.randn(1000)
    idxs = np.random.default_rng(1).integers(0, 1000, size=256)
    f = autovec(sample_pairs)
    got, want = f(obs, rew, idxs), sample_pairs(obs, rew, idxs)
    _same(tuple(t.detach() for t in got), tuple(t.detach() for t in want))
    g1, = torch.autograd.grad(got[0].square().sum(), obs)
    g2, = torch.autograd.grad(want[0].square().sum(), obs)
    assert torch.equal(g1, g2)
    assert explain(sample_pairs, obs.detach(), rew, idxs).path == "vectorized"


@pytest.mark.parametrize("fn", [scaled_by_index, last_index])
def test_numpy_numbers_used_otherwise_keep_the_loop(fn):
    buf = torch.randn(300, 8)
    idxs = np.random.default_rng(2).integers(0, 300, size=512)
    f = autovec(fn)
    for _ in range(3):
        got, want = f(buf, idxs), fn(buf, idxs)
        if fn is last_index:
            assert type(got[1]) is type(want[1]) is np.int64 and got[1] == want[1]
            assert torch.equal(got[0], want[0])
        else:
            assert type(got) is type(want)
            assert torch.equal(torch.as_tensor(got), torch.as_tensor(want))
    assert explain(fn, buf, idxs).path == "python"


def test_an_index_out_of_range_raises_as_the_loop():
    buf = torch.randn(300, 8)
    idxs = np.array([3, 7, 300, 1])
    f = autovec(sample)
    for _ in range(2):
        with pytest.raises(IndexError) as want:
            sample(buf, idxs)
        with pytest.raises(IndexError) as got:
            f(buf, idxs)
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("idxs", [np.arange(12.0), np.arange(24).reshape(12, 2), np.array([True, False] * 6),
                                  [np.int64(1), 2, np.int64(3)] * 4])
def test_other_numpy_iterables_keep_the_loop_or_its_values(idxs):
    buf = torch.randn(30, 3)
    f = autovec(sample)
    try:
        want = sample(buf, idxs)
    except Exception as e:                         # (the loop's own error, raised alike)
        with pytest.raises(type(e)):
            f(buf, idxs)
        return
    got = f(buf, idxs)
    assert torch.equal(got, want)
