"""`if a and b:` / `if a or b:` on one element per iteration: the test's truth is each
operand's truth combined (ifconvert._truth), so the branch is one mask. It kept the loop
("no batched form: BoolOp"); found by the real-world probe (`if pred[i] and y[i]: tp += 1`)
and the nest probe (a nest whose inner range depends on the outer index on both ends becomes
`if i <= j and j < i + k`). The loop skips the second operand where the first decides; the
batch computes it everywhere, and where that raises the loop runs."""
import pytest
import torch

import bool_op_loops as L
from autovec import autovec, explain
from conftest import outcome


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def _check(fn, *args, vectorized=True):
    g = autovec(fn)
    for _ in range(3):
        want, got = outcome(fn, *args), outcome(g, *args)
        if isinstance(want, torch.Tensor):
            assert isinstance(got, torch.Tensor) and got.dtype == want.dtype
            torch.testing.assert_close(got, want)
        else:
            assert type(got) is type(want) and got == want
    assert (explain(g, *args).path == "vectorized") == vectorized


g = torch.Generator().manual_seed(0)
P, Y = torch.rand(50, generator=g) > 0.5, torch.rand(50, generator=g) > 0.5


@pytest.mark.parametrize("pred, y", [(P, Y), (P.float(), Y.float()), (P.long() * 2, Y.long())])
def test_a_count_under_and(pred, y):
    _check(L.tp_count, pred, y)


def test_or_with_comparisons_and_a_not():
    x, y = torch.randn(50, generator=g), torch.randn(50, generator=g)
    _check(L.either, x, y)
    _check(L.band, x, -0.5, 0.5)


def test_a_nest_whose_inner_range_depends_on_the_outer_index_at_both_ends():
    _check(L.window, torch.randn(9, generator=g), 3)


def test_the_second_operand_out_of_range_where_the_loop_never_reads_it():
    x = torch.randn(10, generator=g)
    _check(L.guarded, x, torch.tensor([-1, 3, 9, 2, -1]))
    _check(L.guarded, x, torch.tensor([-1, 3, 20, 2, -1]), vectorized=False)    # (x[20]: IndexError in the batch)


def test_operands_that_are_not_bools_and_with_several_elements():
    _check(L.floats_and, torch.tensor([0., 1., 2., 0.]), torch.tensor([3., 0., 5., 0.]))
    # bool() of a row with several elements raises in the loop where it is evaluated; where the
    # first operand decides first, the loop never evaluates it (and the batch keeps the loop)
    _check(L.multi, torch.randn(5, 2, generator=g), torch.randn(5, generator=g), vectorized=False)
    _check(L.multi, torch.tensor([0., 0., 0.]), torch.randn(3, 2, generator=g), vectorized=False)
    _check(L.multi, torch.tensor([0., 1., 0.]), torch.randn(3, 2, generator=g), vectorized=False)
