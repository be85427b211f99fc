"""Loops from this project's probes of real-world code (ML training, data and metric code),
beyond tests/test_realworld_forms.py: each is checked against the original with
`assert_equivalent` (`dropout_like`, a constant row in one branch, is in test_branch_stores.py);
those listed as vectorized must take the vectorized path, the others keep
the loop today (README, "Known limits"), and their answers must still be the loop's."""
import pytest
import torch
import torch.nn.functional as F

from autovec import assert_equivalent, autovec, explain

SCALE = 3.0


def box_areas(boxes):
    areas = []
    for i in range(len(boxes)):
        areas.append((boxes[i, 2] - boxes[i, 0]) * (boxes[i, 3] - boxes[i, 1]))
    return torch.stack(areas)


def causal_mask(n):
    mask = torch.zeros(n, n)
    for i in range(n):
        mask[i, :i + 1] = 1
    return mask


def row_norm_inplace(x):
    for i in range(x.shape[0]):
        x[i] = (x[i] - x[i].mean()) / (x[i].std() + 1e-5)
    return x


def topk_rows(x):
    out = []
    for i in range(x.shape[0]):
        vals, idx = x[i].topk(3)
        out.append(vals.sum())
    return torch.stack(out)


def split_pos_neg(x, y):
    pos, neg = [], []
    for i in range(x.shape[0]):
        if y[i] == 1:
            pos.append(x[i])
        else:
            neg.append(x[i])
    return torch.stack(pos), torch.stack(neg)


def kmeans_dist(X, C):
    dist = torch.empty(X.shape[0], C.shape[0])
    for k in range(C.shape[0]):
        dist[:, k] = ((X - C[k]) ** 2).sum(1)
    return dist


def mse_sum(pred, target):
    loss = 0.0
    for i in range(pred.shape[0]):
        loss += F.mse_loss(pred[i], target[i])
    return loss / pred.shape[0]


def argmax_list(x):
    return [x[i].argmax().item() for i in range(x.shape[0])]


def max_len(lengths):
    m = 0
    for i in range(lengths.shape[0]):
        if lengths[i] > m:
            m = lengths[i]
    return m


def softmax_rows(x):
    y = torch.empty_like(x)
    for i in range(x.shape[0]):
        y[i] = F.softmax(x[i], dim=-1)
    return y


def clamp_rows(x):
    for i in range(x.shape[0]):
        x[i] = x[i].clamp(min=0)
    return x


def dot_rows(a, b):
    out = torch.zeros(a.shape[0])
    for i in range(a.shape[0]):
        out[i] = torch.dot(a[i], b[i])
    return out


def diag_fill(n, v):
    m = torch.zeros(n, n)
    for i in range(n):
        m[i, i] = v[i]
    return m


def accuracy(logits, y):
    correct = 0
    for i in range(len(y)):
        if logits[i].argmax() == y[i]:
            correct += 1
    return correct / len(y)


def gather_cols(x, idx):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i][idx[i]]
    return out


def where_relu_list(x):
    return torch.stack([torch.where(r > 0, r, 0.1 * r) for r in x])


def pair_rows(pairs, emb):
    out = []
    for a, b in pairs:
        out.append((emb[a] * emb[b]).sum())
    return torch.stack(out)


def per_class_mean(x, y, k):
    means = torch.zeros(k, x.shape[1])
    for c in range(k):
        means[c] = x[y == c].mean(0)
    return means


def window_mean(x, w):
    out = []
    for i in range(x.shape[0] - w + 1):
        out.append(x[i:i + w].mean(0))
    return torch.stack(out)


def mean_list(xs):
    return sum(xs) / len(xs)


def edge_msgs(x, edge_index):
    out = torch.zeros_like(x)
    for s, t in edge_index.T:
        out[t] += x[s]
    return out


def grad_norm_list(grads):
    total = 0.0
    for g in grads:
        total += g.pow(2).sum()
    return total.sqrt()


def running_max_pool(x):
    m = x[0].clone()
    out = [m]
    for t in range(1, x.shape[0]):
        m = torch.maximum(m, x[t])
        out.append(m)
    return torch.stack(out)


def rowwise_sort_topk(x, k):
    res = torch.empty(x.shape[0], k)
    for i in range(x.shape[0]):
        s, _ = torch.sort(x[i], descending=True)
        res[i] = s[:k]
    return res


def triplet(anchor, pos, neg, margin):
    losses = []
    for a, p, n in zip(anchor, pos, neg):
        d = (a - p).norm() - (a - n).norm() + margin
        losses.append(torch.clamp(d, min=0))
    return torch.stack(losses).mean()


def normalize_list(xs):
    return [x / x.norm() for x in xs]


def gather_2d(x, r, c):
    return torch.stack([x[r[i], c[i]] for i in range(r.shape[0])])


def kl_rows(p, q):
    kl = 0.0
    for i in range(p.shape[0]):
        kl += (p[i] * (p[i] / q[i]).log()).sum()
    return kl


def ema_params(ps, qs, d):
    for p, q in zip(ps, qs):
        q.mul_(d).add_(p, alpha=1 - d)
    return qs


def label_counts(y, k):
    counts = [0] * k
    for v in y.tolist():
        counts[v] += 1
    return counts


def nan_to_zero_rows(x):
    for i in range(x.shape[0]):
        if torch.isnan(x[i]).any():
            x[i] = 0
    return x


def iou_rows(a, b):
    out = torch.empty(a.shape[0])
    for i in range(a.shape[0]):
        x1 = max(a[i, 0], b[i, 0]); y1 = max(a[i, 1], b[i, 1])
        x2 = min(a[i, 2], b[i, 2]); y2 = min(a[i, 3], b[i, 3])
        inter = max(0, x2 - x1) * max(0, y2 - y1)
        ua = (a[i, 2] - a[i, 0]) * (a[i, 3] - a[i, 1]) + (b[i, 2] - b[i, 0]) * (b[i, 3] - b[i, 1]) - inter
        out[i] = inter / ua
    return out


def cumsum_reset(x, reset):
    out = torch.empty_like(x)
    acc = 0.0
    for i in range(x.shape[0]):
        if reset[i]:
            acc = 0.0
        acc = acc + x[i]
        out[i] = acc
    return out


def interleave(a, b):
    out = []
    for i in range(a.shape[0]):
        out.append(a[i]); out.append(b[i])
    return torch.stack(out)


def pad_seqs(seqs, L):
    out = torch.zeros(len(seqs), L)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = s
    return out


def ellipsis_last(x):
    out = torch.empty(x.shape[-1])
    for i in range(x.shape[-1]):
        out[i] = x[..., i].sum()
    return out


def reverse_index(x):
    out = torch.empty_like(x)
    n = x.shape[0]
    for i in range(n):
        out[i] = x[n - 1 - i]
    return out


def neg_index(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[-i - 1] * 2)
    return torch.stack(out)


def kwargs_call(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = torch.sum(x[i], dim=0, keepdim=False)
    return out


def cat_star(xs, b):
    out = []
    for i in range(b.shape[0]):
        out.append(torch.cat([xs[i], b[i]], dim=0))
    return torch.stack(out)


def ternary(x):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i].max() if x[i].sum() > 0 else x[i].min()
    return out


def col_norm(x):
    for j in range(x.shape[1]):
        x[:, j] = x[:, j] / x[:, j].norm()
    return x


def chained_cmp(x):
    c = 0
    for i in range(x.shape[0]):
        if 0 < x[i] < 1:
            c += 1
    return c


def int_div(x):
    out = torch.empty(x.shape[0], dtype=torch.long)
    for i in range(x.shape[0]):
        out[i] = x[i] // 3
    return out


def pow_scalar(x):
    return torch.stack([x[i] ** 2 + 2 ** x[i] for i in range(x.shape[0])])


def bool_ops(x, y):
    out = []
    for i in range(x.shape[0]):
        out.append((x[i] > 0) & (y[i] > 0) | ~(x[i] > y[i]))
    return torch.stack(out)


def abs_builtin(x):
    return sum(abs(x[i]) for i in range(x.shape[0]))


def nested_fn(x):
    def sq(v):
        return v * v
    return torch.stack([sq(x[i]) for i in range(x.shape[0])])


def range_step_neg(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0] - 1, -1, -2):
        out[i] = x[i] + 1
    return out


def with_nograd(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        with torch.no_grad():
            out[i] = x[i] * 2
    return out


def walrus(x):
    out = []
    for i in range(x.shape[0]):
        if (s := x[i].sum()) > 0:
            out.append(s)
    return out


def dict_accum(x, y):
    d = {}
    for i in range(x.shape[0]):
        d[int(y[i])] = d.get(int(y[i]), 0) + x[i]
    return d


N = 300

VECTORIZED = [
    (nan_to_zero_rows, lambda: (torch.where(torch.rand(N, 3) < 0.1, float('nan'), torch.randn(N, 3)),)),
    (box_areas, lambda: (torch.rand(N, 4),)),
    (causal_mask, lambda: (min(N, 500),)),
    (row_norm_inplace, lambda: (torch.randn(N, 16),)),
    (topk_rows, lambda: (torch.randn(N, 16),)),
    (split_pos_neg, lambda: (torch.randn(N, 8), torch.randint(0, 2, (N,)))),
    (kmeans_dist, lambda: (torch.randn(N, 8), torch.randn(64, 8))),
    (mse_sum, lambda: (torch.randn(N, 8), torch.randn(N, 8))),
    (argmax_list, lambda: (torch.randn(N, 10),)),
    (max_len, lambda: (torch.randint(0, 100, (N,)),)),
    (softmax_rows, lambda: (torch.randn(N, 10),)),
    (clamp_rows, lambda: (torch.randn(N, 8),)),
    (dot_rows, lambda: (torch.randn(N, 8), torch.randn(N, 8))),
    (diag_fill, lambda: (min(N, 500), torch.randn(min(N, 500)))),
    (accuracy, lambda: (torch.randn(N, 10), torch.randint(0, 10, (N,)))),
    (gather_cols, lambda: (torch.randn(N, 10), torch.randint(0, 10, (N,)))),
    (where_relu_list, lambda: (torch.randn(N, 4),)),
    (pair_rows, lambda: (torch.randint(0, 100, (N, 2)), torch.randn(100, 8))),
    (edge_msgs, lambda: (torch.randn(20, 4), torch.randint(0, 20, (2, N)))),
    (grad_norm_list, lambda: ([torch.randn(5, 5) for _ in range(N)],)),
    (running_max_pool, lambda: (torch.randn(N, 4),)),
    (rowwise_sort_topk, lambda: (torch.randn(N, 10), 3)),
    (triplet, lambda: (torch.randn(N, 8), torch.randn(N, 8), torch.randn(N, 8), 0.5)),
    (normalize_list, lambda: (list(torch.randn(N, 4)),)),
    (gather_2d, lambda: (torch.randn(10, 10), torch.randint(0, 10, (N,)), torch.randint(0, 10, (N,)))),
    (kl_rows, lambda: (torch.rand(N, 5).softmax(1), torch.rand(N, 5).softmax(1))),
    (ellipsis_last, lambda: (torch.randn(4, 3, N),)),
    (reverse_index, lambda: (torch.randn(N, 3),)),
    (neg_index, lambda: (torch.randn(N, 3),)),
    (kwargs_call, lambda: (torch.randn(N, 3),)),
    (cat_star, lambda: (torch.randn(N, 3), torch.randn(N, 2))),
    (ternary, lambda: (torch.randn(N, 3),)),
    (col_norm, lambda: (torch.randn(5, N),)),
    (chained_cmp, lambda: (torch.rand(N) * 2 - 0.5,)),
    (int_div, lambda: (torch.randint(-10, 10, (N,)),)),
    (pow_scalar, lambda: (torch.randn(N),)),
    (bool_ops, lambda: (torch.randn(N), torch.randn(N))),
    (abs_builtin, lambda: (torch.randn(N),)),
    (nested_fn, lambda: (torch.randn(N, 2),)),
    (range_step_neg, lambda: (torch.randn(N),)),
    (per_class_mean, lambda: (torch.randn(N, 8), torch.randint(0, 10, (N,)), 10)),
    (window_mean, lambda: (torch.randn(N, 4), 5)),
    (with_nograd, lambda: (torch.randn(N, 3, requires_grad=True),)),
    (interleave, lambda: (torch.randn(N, 3), torch.randn(N, 3))),
]

KEPT = [
    (mean_list, lambda: (list(torch.randn(N, 4)),)),
    (ema_params, lambda: ([torch.randn(4, 3) for _ in range(5)], [torch.randn(4, 3) for _ in range(5)], 0.9)),
    (label_counts, lambda: (torch.randint(0, 5, (N,)), 5)),
    (iou_rows, lambda: (torch.rand(N, 4).sort(1).values, torch.rand(N, 4).sort(1).values)),
    (cumsum_reset, lambda: (torch.randn(N), torch.rand(N) < 0.1)),
    (pad_seqs, lambda: ([torch.randn(int(k)) for k in torch.randint(1, 8, (N,))], 8)),
    (walrus, lambda: (torch.randn(N, 3),)),
    (dict_accum, lambda: (torch.randn(N), torch.randint(0, 4, (N,)))),
]



@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


@pytest.mark.parametrize("fn, make", VECTORIZED, ids=[fn.__name__ for fn, _ in VECTORIZED])
def test_vectorized_and_equivalent(fn, make):
    torch.manual_seed(0)
    args = make()
    ex = explain(autovec(fn), *args)
    assert ex.path == "vectorized", str(ex)
    torch.manual_seed(0)
    assert_equivalent(fn, *make())


@pytest.mark.parametrize("fn, make", KEPT, ids=[fn.__name__ for fn, _ in KEPT])
def test_kept_forms_give_the_loops_answer(fn, make):
    torch.manual_seed(0)
    assert_equivalent(fn, *make())
