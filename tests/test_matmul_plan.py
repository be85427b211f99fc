"""The matmul strategy's products: the einsum over the loop levels, or one torch.matmul when the
operands are laid out for it; both must give the same values for every kind and level layout."""
import pytest
import torch

from autovec import runtime as R

RANKS = {"dot": [(1, 1)], "mv": [(2, 1)], "mm": [(2, 2)], "outer": [(1, 1)],
         "matmul": [(1, 1), (2, 1), (1, 2), (2, 2)]}
CASES = [(kind, ra, rb, la, lb) for kind, rs in RANKS.items() for ra, rb in rs
         for la in [(), (0,), (0, 1), (1,)] for lb in [(), (0,), (0, 1), (1,), (0, 2)] if la or lb]


@pytest.mark.parametrize("kind, ra, rb, la, lb", CASES)
def test_products_agree_with_einsum(kind, ra, rb, la, lb):
    g = torch.Generator().manual_seed(0)
    levels = max(la + lb) + 1
    sizes = [3, 4, 2][:levels]
    inner, rows, cols = 5, 6, 7
    core_a = {1: [inner] if kind != "outer" else [rows], 2: [rows, inner]}[ra]
    core_b = {1: [inner] if kind != "outer" else [cols], 2: [inner, cols]}[rb]
    a = torch.randn(*[sizes[lv] for lv in la], *core_a, dtype=torch.float64, generator=g)
    b = torch.randn(*[sizes[lv] for lv in lb], *core_b, dtype=torch.float64, generator=g)
    got = R.mm(kind, a, la, b, lb, sizes)
    full, missing, _ = R._MM_FULL[(kind, la, lb, ra, rb, levels)]
    want = torch.einsum(full, a, b)
    for lv in missing:
        want = want.unsqueeze(lv)
    if missing:
        want = want.expand(*sizes, *want.shape[len(sizes):])
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)


def test_attention_layouts_use_one_matmul():
    assert R._matmul_plan("abi", "aci", "abc") == (True, False, False)    # q . k: k transposed
    assert R._matmul_plan("abi", "ain", "abn") == (False, False, False)   # weights @ v
    assert R._matmul_plan("m", "n", "mn") is None                         # an outer product: einsum
