"""A loop over a Python list of ints that gathers rows of loop-invariant tensors by them
(`torch.stack([buf[j] for j in idxs])`, replay-buffer sampling): the list is batched as one
index tensor and the rows gathered at once (runtime._gathers). Values, types, errors, views and
gradients against the loop; a list the loop does not index with keeps the loop."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def sample(buf, idxs):
    return torch.stack([buf[j] for j in idxs])


def sample_two(buf, rew, idxs):
    states, rs = [], []
    for j in idxs:
        states.append(buf[j])
        rs.append(rew[j] * 2)
    return torch.stack(states), torch.stack(rs)


def total(buf, idxs):
    s = 0.0
    for j in idxs:
        s = s + buf[j, :].sum()
    return s


def kept_views(buf, idxs):
    out = []
    for j in idxs:
        out.append(buf[j])          # (views of buf in the loop: a gather would copy them)
    return out


def plain_sum(values):
    acc = 0
    for v in values:
        acc += v                     # (no tensor at all: the loop, quietly)
    return acc


def _same(got, want):
    if isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want)      # (a total reassociates its sum)
    else:
        assert type(got) is type(want) and got == want


@pytest.mark.parametrize("idxs", [[0, 2, 5], [-1, -6, 3], [1, 1, 1], [4], list(range(6)) * 3])
@pytest.mark.parametrize("fn", [sample, sample_two, total])
def test_rows_gathered_by_a_list_of_ints(fn, idxs):
    buf, rew = torch.randn(6, 3), torch.randn(6)
    args = (buf, rew, idxs) if fn is sample_two else (buf, idxs)
    f = autovec(fn)
    for _ in range(3):
        _same(f(*args), fn(*args))
    assert explain(fn, *args).path == "vectorized"


@pytest.mark.parametrize("idxs, error", [([0, 7], IndexError), ([1.0, 2.0], IndexError), ([2 ** 40], IndexError)])
def test_indices_the_loop_refuses_raise_as_the_loop(idxs, error):
    buf = torch.randn(6, 3)
    with pytest.raises(error):
        sample(buf, idxs)
    with pytest.raises(error):
        autovec(sample)(buf, idxs)


def test_bools_are_no_indices_here():
    """`buf[True]` adds a dimension in the loop; a bool tensor would select as a mask."""
    buf = torch.randn(6, 3)
    _same(autovec(sample)(buf, [True, False, True][:1]), sample(buf, [True]))
    assert explain(sample, buf, [True, False, True]).path == "python"


def test_views_the_loop_keeps_stay_views():
    buf = torch.randn(6, 3)
    got = autovec(kept_views)(buf, [0, 3, 3])
    assert all(g._base is buf for g in got)


def test_gradients_of_the_gathered_rows():
    buf = torch.randn(6, 3, requires_grad=True)
    idxs = [0, 2, 2, 5]
    g1, = torch.autograd.grad(autovec(sample)(buf, idxs).square().sum(), buf)
    g2, = torch.autograd.grad(sample(buf, idxs).square().sum(), buf)
    torch.testing.assert_close(g1, g2)


def test_a_list_of_numbers_alone_keeps_the_loop():
    assert explain(plain_sum, [1, 2, 3]).path == "python"
    assert autovec(plain_sum)([1, 2, 3]) == 6
