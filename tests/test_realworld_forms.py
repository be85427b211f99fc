"""Loops written the way model and data code writes them: each is checked against the original
(values and gradients) and must take the vectorized path."""
import pytest
import torch
import torch.nn.functional as F

def enum_zip(x, y):
    out = []
    for i, (a, b) in enumerate(zip(x, y)):
        out.append((a * b).sum() + i)
    return torch.stack(out)

def ce_slices(logits, y):
    losses = [F.cross_entropy(logits[i:i + 1], y[i:i + 1]) for i in range(logits.shape[0])]
    return torch.stack(losses).mean()

def per_batch_mm(x, w):
    out = torch.empty(x.shape[0], x.shape[1], w.shape[2])
    for b in range(x.shape[0]):
        out[b] = x[b] @ w[b]
    return out

def inplace_rownorm(x):
    for i in range(x.shape[0]):
        x[i] = x[i] / x[i].norm()
    return x

def rnn_cols(x, W, U):
    h = torch.zeros(W.shape[0])
    for t in range(x.shape[1]):
        h = torch.tanh(W @ h + U @ x[:, t])
    return h

def mask_float(x):
    masks = []
    for i in range(x.shape[0]):
        masks.append((x[i] > 0).float())
    return torch.stack(masks)

def pair_offdiag(x):
    n = x.shape[0]
    d = torch.zeros(n, n)
    for i in range(n):
        for j in range(n):
            if i != j:
                d[i, j] = (x[i] - x[j]).pow(2).sum()
    return d

def smooth_l1_sum(pred, tgt):
    total = 0.0
    for p, t in zip(pred, tgt):
        diff = (p - t).abs()
        total += torch.where(diff < 1, 0.5 * diff ** 2, diff - 0.5).sum()
    return total

def topk_rows(x):
    res = []
    for row in x:
        v, _ = row.topk(2)
        res.append(v)
    return torch.stack(res)

def clamp_counter(x, lo):
    n = 0
    for v in x:
        if v.item() < lo:
            n += 1
    return n

def gather_rows(table, idx):
    out = torch.empty(len(idx), table.shape[1])
    for k, i in enumerate(idx):
        out[k] = table[i]
    return out

def normalize_cols(x):
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        col = x[:, j]
        out[:, j] = (col - col.mean()) / (col.std() + 1e-5)
    return out

def dist_to_centroids(x, c):
    out = []
    for i in range(x.shape[0]):
        out.append(((x[i][None, :] - c) ** 2).sum(-1).argmin())
    return torch.stack(out)

def weighted_sum_list(xs, ws):
    acc = torch.zeros_like(xs[0])
    for x_, w in zip(xs, ws):
        acc = acc + w * x_
    return acc

def kl_rows(p, q):
    kls = []
    for i in range(p.shape[0]):
        kls.append((p[i] * (p[i] / q[i]).log()).sum())
    return torch.tensor(kls)

def topk_hits(logits, labels):
    correct = 0
    for i in range(logits.shape[0]):
        if labels[i] in logits[i].topk(3).indices:
            correct += 1
    return correct

def index_not_in(x, banned):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * (i not in banned))
    return torch.stack(out)

def row_contains(x, probe):
    return torch.tensor([probe[i] in x[i] for i in range(x.shape[0])])

def one_hot_enum(labels, x):
    out = torch.zeros(labels.shape[0], 7)
    for i, l in enumerate(labels):
        out[i][l] = x[i]
    return out

def chained_update(x, cols):
    out = torch.ones(x.shape[0], 4)
    for i in range(x.shape[0]):
        c = cols[i]
        out[i][c] += x[i].sum()
    return out

def matvec_nest(A, x):
    out = torch.zeros(A.shape[0])
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            out[i] += A[i, j] * x[j]
    return out

def matmul_nest(A, B):
    C = torch.zeros(A.shape[0], B.shape[1])
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            for k in range(A.shape[1]):
                C[i, j] += A[i, k] * B[k, j]
    return C

def bag_of_embeddings(emb, tokens):
    out = torch.zeros(tokens.shape[0], emb.shape[1])
    for i in range(tokens.shape[0]):
        for j in range(tokens.shape[1]):
            out[i] += emb[tokens[i, j]]
    return out

def column_totals_transposed(x):
    out = torch.zeros(x.shape[1], x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[j, i] = x[i, j] * 2
    return out

def zip_tolist_weights(x, w):
    out = []
    for row, v in zip(x, w.tolist()):
        out.append(row * v)
    return torch.stack(out)

def zip_tolist_hits(t, p):
    hits = 0
    for a, b in zip(t.tolist(), p.tolist()):
        if a == b:
            hits += 1
    return hits

def nll_ignore_continue(logp, targets, ignore):
    total = 0.0
    count = 0
    for i in range(logp.shape[0]):
        if targets[i] == ignore:
            continue
        total += -logp[i, targets[i]]
        count += 1
    return total / max(count, 1)

def nll_ignore_if(logp, targets):
    total = torch.zeros(())
    for i in range(logp.shape[0]):
        if targets[i] != -100:
            total = total + -logp[i][targets[i]]
    return total

def embed_non_padding(table, ids):
    out = torch.zeros(ids.shape[0], table.shape[1])
    for i in range(ids.shape[0]):
        if ids[i] >= 0:
            out[i] = table[ids[i]]
    return out

def _ignored(n, classes):
    t = torch.randint(0, classes, (n,))
    t[::4] = -100
    return t

CASES = [
    (nll_ignore_continue, lambda: (torch.randn(50, 7).log_softmax(1), _ignored(50, 7), -100)),
    (nll_ignore_if, lambda: (torch.randn(50, 7).log_softmax(1), _ignored(50, 7))),
    (embed_non_padding, lambda: (torch.randn(7, 3), _ignored(40, 7))),
    (zip_tolist_weights, lambda: (torch.randn(50, 3), torch.randn(40))),
    (zip_tolist_hits, lambda: (torch.randint(0, 3, (60,)), torch.randint(0, 3, (60,)))),
    (matvec_nest, lambda: (torch.randn(12, 9), torch.randn(9))),
    (matmul_nest, lambda: (torch.randn(6, 5), torch.randn(5, 7))),
    (bag_of_embeddings, lambda: (torch.randn(20, 4), torch.randint(0, 20, (15, 6)))),
    (column_totals_transposed, lambda: (torch.randn(8, 5),)),
    (topk_hits, lambda: (torch.randn(40, 8), torch.randint(0, 8, (40,)))),
    (index_not_in, lambda: (torch.randn(30, 3), torch.tensor([2, 5, 7, 29]))),
    (row_contains, lambda: (torch.randint(0, 5, (30, 4)).float(), torch.randint(0, 5, (30,)).float())),
    (one_hot_enum, lambda: (torch.randint(0, 7, (40,)), torch.randn(40))),
    (chained_update, lambda: (torch.randn(30, 3), torch.randint(0, 4, (30,)))),
    (enum_zip, lambda: (torch.randn(50, 4), torch.randn(50, 4))),
    (ce_slices, lambda: (torch.randn(40, 5), torch.randint(0, 5, (40,)))),
    (per_batch_mm, lambda: (torch.randn(30, 3, 4), torch.randn(30, 4, 5))),
    (inplace_rownorm, lambda: (torch.randn(40, 6),)),
    (rnn_cols, lambda: (torch.randn(5, 60), torch.randn(8, 8) * 0.3, torch.randn(8, 5))),
    (mask_float, lambda: (torch.randn(40, 3),)),
    (pair_offdiag, lambda: (torch.randn(12, 3),)),
    (smooth_l1_sum, lambda: (torch.randn(40, 3), torch.randn(40, 3))),
    (topk_rows, lambda: (torch.randn(40, 6),)),
    (clamp_counter, lambda: (torch.randn(60), -0.3)),
    (gather_rows, lambda: (torch.randn(10, 4), torch.randint(0, 10, (30,)))),
    (normalize_cols, lambda: (torch.randn(20, 40),)),
    (dist_to_centroids, lambda: (torch.randn(40, 3), torch.randn(5, 3))),
    (weighted_sum_list, lambda: ([torch.randn(4) for _ in range(30)], torch.rand(30))),
    (kl_rows, lambda: (torch.rand(30, 4) + 0.1, torch.rand(30, 4) + 0.1)),
]


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


@pytest.mark.parametrize("fn, make", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_real_world_loop(fn, make):
    from autovec import assert_equivalent, autovec, explain
    torch.manual_seed(0)
    args = make()
    ex = explain(autovec(fn), *args)
    assert ex.path == "vectorized", str(ex)
    assert_equivalent(fn, *args)
    if fn is not inplace_rownorm and fn is not kl_rows:   # in place on a leaf / torch.tensor of grads
        grad_args = tuple(a.clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                          for a in args)
        assert_equivalent(fn, *grad_args, grad=True)


def in_a_list(x, allowed):
    hits = 0
    for i in range(x.shape[0]):
        if x[i].argmax().item() in allowed:
            hits += 1
    return hits

def in_sliced_rows(x):
    out = torch.zeros(x.shape[0], x.shape[1])
    for i in range(1, x.shape[0]):
        out[i][: i % 3] = x[i][: i % 3]
    return out


def nest_product(x):
    out = torch.ones(x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i] *= x[i, j]
    return out

def nest_reads_output(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i] += x[i, j] * out[i]
    return out


def test_nest_product_is_a_per_bin_product():
    """`out[i] *= x[i, j]` in a nest: a scatter of the nest's iterations into the rows, one
    scatter_reduce_ "prod" from each row's own value (runtime._scatter_reduce_prep; it kept
    the loop before per-bin products existed)."""
    from autovec import assert_equivalent, autovec, explain
    assert explain(autovec(nest_product), torch.randn(6, 4)).path == "vectorized"
    assert_equivalent(nest_product, torch.randn(6, 4))


@pytest.mark.parametrize("fn, args", [
    (nest_reads_output, (torch.randn(6, 4),)),
    (in_a_list, (torch.randn(20, 5), [0, 2])),
    (zip_tolist_weights, (torch.randn(6, 3), torch.randn(6, 2))),      # .tolist() rows are lists
    (nll_ignore_if, (torch.randn(6, 7), torch.tensor([0, 1, -100, 9, 2, 3]))),   # 9 is read: IndexError
], ids=["nest_reads_output", "in_a_list", "zip_tolist_of_rows",
        "index_out_of_range_where_read"])
def test_forms_that_keep_the_loop_and_its_answer(fn, args):
    from autovec import assert_equivalent, autovec, explain
    assert explain(autovec(fn), *args).path == "python"
    assert_equivalent(fn, *args)


def test_a_ragged_chained_store_of_the_same_span():
    """`out[i][: i % 3] = x[i][: i % 3]`: the same span of x's row (batching.fill_span, since stop
    32; it kept the loop before)."""
    from autovec import assert_equivalent, autovec, explain
    x = torch.randn(9, 4)
    assert explain(autovec(in_sliced_rows), x).path == "vectorized"
    assert_equivalent(in_sliced_rows, x)


def test_in_of_a_tensor_element_with_several_elements_broadcasts_as_the_loop():
    """`row in t` compares with broadcasting and reduces over everything, as Tensor.__contains__."""
    from autovec import assert_equivalent
    x, t = torch.randint(0, 3, (25, 2, 3)), torch.randint(0, 3, (25, 3))
    assert_equivalent(row_contains, x.float(), t[:, 0].float())

    def rows_in(x, t):
        return [t[i] in x[i] for i in range(x.shape[0])]
    assert_equivalent(rows_in, x, t)


@pytest.mark.parametrize("fn, make", CASES[:3], ids=[fn.__name__ for fn, _ in CASES[:3]])
def test_guarded_reads_run_as_a_batched_body(fn, make):
    # (the index read under a condition is torch.where(c, i, 0) in the batched body, not vmap)
    from autovec import autovec
    from conftest import ran_modes
    fast = autovec(fn)
    for _ in range(3):
        fast(*make())
    assert ran_modes(fast) == {"batched"}
