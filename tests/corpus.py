"""A corpus of loops, each with inputs, the strategy autovec must choose, and whether
gradients flow. Shared by the differential tests and the golden tests."""
import torch
import torch.nn.functional as F


def rows_add(u, v):
    out = []
    for k in range(len(u)):
        out.append(u[k] * 2 + v[k])
    return torch.stack(out)


def softmax_rows(x, t):
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        out[k] = torch.softmax(x[k] / t, dim=0)
    return out


def col_scale(x, s):
    out = torch.empty_like(x)
    for j in range(x.shape[1]):
        out[:, j] = x[:, j] * s[j]
    return out


def offset_diff(x):
    out = torch.zeros(x.shape[0] - 1, x.shape[1])
    for i in range(1, x.shape[0]):
        out[i - 1] = x[i] - x[i - 1]
    return out


def strided(x):
    out = []
    for i in range(1, x.shape[0], 3):
        out.append(x[i].sum())
    return torch.stack(out)


def index_value(x):
    out = torch.empty_like(x)
    for k, row in enumerate(x):
        out[k] = row * k + 1
    return out


def returned_list(x, w):
    return [torch.dot(r, w) for r in x]


def zipped(a, b):
    total = 0.0
    for p, q in zip(a, b):
        total = total + (p * q).sum()
    return total


def leaky(v, slope):
    out = torch.empty_like(v)
    for k in range(v.shape[0]):
        if v[k] > 0:
            out[k] = v[k]
        else:
            out[k] = slope * v[k]
    return out


def clip_rows(g, m):
    res = []
    for row in g:
        n = row.norm()
        if n > m:
            row = row * (m / n)
        res.append(row)
    return torch.stack(res)


def ifexp_rows(x):
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        out[k] = x[k] * 2 if x[k].sum() > 0 else -x[k]
    return out


def continue_skip(x):
    total = torch.zeros(x.shape[1])
    for k in range(x.shape[0]):
        if x[k, 0] < 0:
            continue
        total = total + x[k]
    return total


def count_hits(logits, labels):
    hits = 0
    for k in range(len(labels)):
        if logits[k].argmax() == labels[k]:
            hits += 1
    return hits


def filter_pos(vals):
    kept = []
    for v in vals:
        if v > 0:
            kept.append(v)
    return torch.tensor(kept)


def filter_list(x):
    kept = []
    for row in x:
        if row.sum() > 0:
            kept.append(row)
    return kept


def filter_comp(x):
    return torch.stack([r * 2 for r in x if r.mean() > 0])


def item_sum(x):
    s = 0.0
    for k in range(x.shape[0]):
        s += x[k].sum().item()
    return s


def running_max(x):
    best = float("-inf")
    for k in range(x.shape[0]):
        best = max(best, x[k].sum())
    return best


def argbest_first(x):
    best, idx = -1e9, -1
    for k in range(x.shape[0]):
        v = x[k].sum()
        if v > best:
            best, idx = v, k
    return best, idx


def argbest_last(x):
    best, idx = -1e9, -1
    for k in range(x.shape[0]):
        v = x[k].sum()
        if v >= best:
            best = v
            idx = k
    return best, idx


def flag_any(x, limit):
    found = False
    for k in range(x.shape[0]):
        if x[k].abs().max() > limit:
            found = True
    return found


def while_axpy(x, y, a):
    out = torch.empty_like(x)
    k = 0
    n = x.shape[0]
    while k < n:
        out[k] = a * x[k] + y[k]
        k += 1
    return out, k


def inplace_same_index(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * 2 + 1
    return x


def helper_rows(x):
    return torch.stack([_gate(r) for r in x])


def _gate(v):
    return v * torch.sigmoid(1.5 * v)


def focal(logits, labels, gamma):
    total = torch.zeros(())
    for k in range(logits.shape[0]):
        logp = torch.log_softmax(logits[k], dim=0)[labels[k]]
        total = total + (1 - torch.exp(logp)) ** gamma * (-logp)
    return total / logits.shape[0]


def hist_add(bins, w, nb):
    hist = torch.zeros(nb)
    for k in range(bins.shape[0]):
        hist[bins[k]] += w[k]
    return hist


def last_write(idx, v, n):
    out = torch.zeros(n, 2)
    for k in range(idx.shape[0]):
        out[idx[k]] = v[k]
    return out


def confusion(t, p, c):
    cm = torch.zeros(c, c, dtype=torch.long)
    for k in range(len(t)):
        cm[t[k], p[k]] += 1
    return cm


def masked_hist(bins, w, nb):
    hist = torch.zeros(nb)
    for k in range(bins.shape[0]):
        if w[k] > 0.5:
            hist[bins[k]] -= w[k]
    return hist


def cat_grow(chunks, s):
    acc = torch.tensor([])
    for k in range(chunks.shape[0]):
        acc = torch.cat([acc, chunks[k] * s[k]])
    return acc


def pairwise(a, b):
    d = torch.empty(a.shape[0], b.shape[0])
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            d[i, j] = torch.sqrt(((a[i] - b[j]) ** 2).sum())
    return d


def scores3(q, k):
    nb, nq, _ = q.shape
    s = torch.zeros(nb, nq, k.shape[1])
    for b in range(nb):
        for i in range(nq):
            for j in range(k.shape[1]):
                s[b, i, j] = torch.dot(q[b, i], k[b, j])
    return s


def nest_index_value(x):
    out = torch.empty(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * i - j
    return out


def nest_sum(a, b):
    total = 0.0
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            total = total + (a[i] * b[j]).sum()
    return total


def gen_sum(x):
    return sum(x[i].sum() for i in range(x.shape[0]))


def gen_sum_items(x):
    return sum(v.item() for v in x if v > 0)


def gen_max(x):
    return max(r.sum() for r in x)


def gen_any(x):
    return any(r.sum() > 3 for r in x)


def running_product(x):
    p = 1.0
    for k in range(x.shape[0]):
        p *= x[k]
    return p


def item_threshold(x, thr):
    n = 0
    s = 0.0
    for k in range(x.shape[0]):
        v = x[k].item()
        if v > thr:
            n += 1
            s += v * 2
    return n, s


def item_list(x):
    out = []
    for k in range(x.shape[0]):
        out.append(x[k].sum().item() * 0.5)
    return out


def running_sum(x):
    s = 0.0
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s = s + x[i]
        out[i] = s
    return out, s


def running_inplace(x, total):
    out = []
    for t in range(x.shape[0]):
        total += x[t] * 2
        out.append(total * 0.5)
    return torch.stack(out), total


def running_items(x):
    s = 0
    res = []
    for k in range(x.shape[0]):
        s += x[k].item()
        res.append(s)
    return res


def prefix_inplace(x):
    acc = x.clone()
    for k in range(1, acc.shape[0]):
        acc[k] += acc[k - 1]
    return acc


def prefix_columns(x):
    for j in range(2, x.shape[1]):
        x[:, j] = x[:, j] * x[:, j - 1]
    return x


def discounted_returns(r, gamma):
    G = 0.0
    returns = torch.empty_like(r)
    for t in reversed(range(r.shape[0])):
        G = r[t] + gamma * G
        returns[t] = G
    return returns


def reversed_diffs(x):
    out = []
    for i in reversed(range(1, x.shape[0])):
        out.append(x[i] - x[i - 1])
    return torch.stack(out)


def negative_step_store(x):
    y = torch.zeros_like(x)
    for i in range(x.shape[0] - 1, 0, -2):
        y[i] = x[i] * i
    return y


def rnn_encoder(xs, h, w1, b1, w_hh):
    outs = []
    for t in range(xs.shape[0]):
        e = torch.relu(xs[t] @ w1 + b1)
        h = torch.tanh(e + h @ w_hh)
        outs.append(h)
    return torch.stack(outs), h


def lstm_like(xs, h, c, w_ih, w_hh):
    hs = []
    for t in range(xs.shape[0]):
        z = xs[t] @ w_ih.T + h @ w_hh.T
        i, f, g, o = z.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        hs.append(h)
    return torch.stack(hs), h, c


def unit_slices(logits, y):
    loss = 0.0
    for b in range(logits.shape[0]):
        loss = loss + F.cross_entropy(logits[b:b + 1], y[b:b + 1])
    return loss / logits.shape[0]


def cat_columns(x):
    out = []
    for j in range(x.shape[1]):
        out.append(x[:, j:j + 1] * 2)
    return torch.cat(out, dim=1)


def stack_dim1(x):
    return torch.stack([r * 2 for r in x], dim=1)


def running_maximum(x):
    m = torch.full((x.shape[1],), float("-inf"))
    for i in range(x.shape[0]):
        m = torch.maximum(m, x[i])
    return m


def drawdown(p):
    peak = p[0]
    dd = torch.empty_like(p)
    for i in range(p.shape[0]):
        peak = torch.max(peak, p[i])
        dd[i] = (peak - p[i]) / peak
    return dd


def moving_mean(x, k):
    out = torch.empty(x.shape[0] - k + 1, x.shape[1])
    for i in range(x.shape[0] - k + 1):
        out[i] = x[i:i + k].mean(0)
    return out


def positive_means(x):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i][x[i] > 0].sum())
    return torch.stack(res)


def class_means(x, y, k):
    out = torch.empty(k, x.shape[1])
    for c in range(k):
        out[c] = x[y == c].mean(0)
    return out


def pair_rows(a, b):
    out = []
    for i in range(a.shape[0]):
        out.append(a[i] * 2)
        out.append(b[i] - a[i])
    return torch.stack(out)


def no_grad_scores(x, w):
    out = torch.empty(x.shape[0])
    for i in range(x.shape[0]):
        with torch.no_grad():
            out[i] = torch.dot(x[i], w).sigmoid()
    return out


def _g(seed):
    return torch.Generator().manual_seed(seed)


# name -> (function, inputs, expected strategy, gradients compared)
CORPUS = {
    "rows_add": (rows_add, lambda: (torch.randn(40, generator=_g(0)), torch.randn(40, generator=_g(1))), "broadcast", True),
    "softmax_rows": (softmax_rows, lambda: (torch.randn(30, 7, generator=_g(0)), 0.7), "vmap", True),
    "col_scale": (col_scale, lambda: (torch.randn(5, 12, generator=_g(0)), torch.randn(12, generator=_g(1))), "broadcast", True),
    "offset_diff": (offset_diff, lambda: (torch.randn(20, 3, generator=_g(0)),), "broadcast", True),
    "strided": (strided, lambda: (torch.randn(31, 4, generator=_g(0)),), "vmap", True),
    "index_value": (index_value, lambda: (torch.randn(25, 3, generator=_g(0)),), "broadcast", True),
    "returned_list": (returned_list, lambda: (torch.randn(20, 5, generator=_g(0)), torch.randn(5, generator=_g(1))), "matmul", True),
    "zipped": (zipped, lambda: (torch.randn(20, 4, generator=_g(0)), torch.randn(20, 4, generator=_g(1))), "reduction", True),
    "leaky": (leaky, lambda: (torch.randn(50, generator=_g(0)), 0.1), "where", False),
    "clip_rows": (clip_rows, lambda: (torch.randn(40, 6, generator=_g(0)) * 2, 4.0), "where", False),
    "ifexp_rows": (ifexp_rows, lambda: (torch.randn(30, 4, generator=_g(0)),), "where", False),
    "continue_skip": (continue_skip, lambda: (torch.randn(30, 4, generator=_g(0)),), "reduction", False),
    "count_hits": (count_hits, lambda: (torch.randn(60, 5, generator=_g(0)), torch.randint(0, 5, (60,), generator=_g(1))), "reduction", False),
    "filter_pos": (filter_pos, lambda: (torch.randn(50, generator=_g(0)),), "mask", False),
    "filter_list": (filter_list, lambda: (torch.randn(30, 3, generator=_g(0)),), "mask", False),
    "filter_comp": (filter_comp, lambda: (torch.randn(30, 3, generator=_g(0)),), "mask", False),
    "item_sum": (item_sum, lambda: (torch.randn(40, 3, generator=_g(0)),), "reduction", False),
    "running_max": (running_max, lambda: (torch.randn(40, 3, generator=_g(0)),), "reduction", True),
    "argbest_first": (argbest_first, lambda: (torch.randint(0, 3, (40, 2), generator=_g(0)).float(),), "reduction", False),
    "argbest_last": (argbest_last, lambda: (torch.randint(0, 3, (40, 2), generator=_g(0)).float(),), "reduction", False),
    "flag_any": (flag_any, lambda: (torch.randn(30, 3, generator=_g(0)), 2.5), "reduction", False),
    "while_axpy": (while_axpy, lambda: (torch.randn(30, 4, generator=_g(0)), torch.randn(30, 4, generator=_g(1)), 0.5), "broadcast", True),
    "inplace_same_index": (inplace_same_index, lambda: (torch.randn(20, 3, generator=_g(0)),), "broadcast", False),
    "helper_rows": (helper_rows, lambda: (torch.randn(20, 6, generator=_g(0)),), "broadcast", True),
    "hist_add": (hist_add, lambda: (torch.randint(0, 5, (60,), generator=_g(0)), torch.rand(60, generator=_g(1)), 5), "reduction", True),
    "last_write": (last_write, lambda: (torch.randint(0, 6, (40,), generator=_g(0)), torch.randn(40, 2, generator=_g(1)), 6), "reduction", True),
    "confusion": (confusion, lambda: (torch.randint(0, 4, (80,), generator=_g(0)), torch.randint(0, 4, (80,), generator=_g(1)), 4), "reduction", False),
    "masked_hist": (masked_hist, lambda: (torch.randint(0, 5, (60,), generator=_g(0)), torch.rand(60, generator=_g(1)), 5), "reduction", False),
    "cat_grow": (cat_grow, lambda: (torch.randn(20, 3, generator=_g(0)), torch.rand(20, generator=_g(1))), "reduction", True),
    "pairwise": (pairwise, lambda: (torch.randn(7, 3, generator=_g(0)), torch.randn(9, 3, generator=_g(1))), "vmap", True),
    "scores3": (scores3, lambda: (torch.randn(2, 4, 5, generator=_g(0)), torch.randn(2, 6, 5, generator=_g(1))), "matmul", True),
    "nest_index_value": (nest_index_value, lambda: (torch.randn(5, 6, generator=_g(0)),), "vmap", True),
    "nest_sum": (nest_sum, lambda: (torch.randn(5, 3, generator=_g(0)), torch.randn(6, 3, generator=_g(1))), "reduction", True),
    "gen_sum": (gen_sum, lambda: (torch.randn(30, 3, generator=_g(0)),), "reduction", True),
    "gen_sum_items": (gen_sum_items, lambda: (torch.randn(40, generator=_g(0)),), "reduction", False),
    "gen_max": (gen_max, lambda: (torch.randint(0, 3, (20, 2), generator=_g(0)).float(),), "reduction", False),
    "gen_any": (gen_any, lambda: (torch.randn(20, 2, generator=_g(0)),), "reduction", False),
    "running_product": (running_product, lambda: (torch.rand(20, generator=_g(0)) + 0.5,), "reduction", True),
    "item_threshold": (item_threshold, lambda: (torch.randn(50, generator=_g(0)), 0.1), "reduction", False),
    "item_list": (item_list, lambda: (torch.randn(30, 3, generator=_g(0)),), "vmap", False),
    "running_sum": (running_sum, lambda: (torch.randn(40, 3, generator=_g(0)),), "scan", True),
    "running_inplace": (running_inplace, lambda: (torch.randn(30, 4, generator=_g(0)), torch.zeros(4)), "scan", False),
    "running_items": (running_items, lambda: (torch.randint(0, 5, (20,), generator=_g(0)),), "scan", False),
    "prefix_inplace": (prefix_inplace, lambda: (torch.rand(50, 3, generator=_g(0)),), "scan", False),
    "prefix_columns": (prefix_columns, lambda: (torch.rand(4, 9, generator=_g(0)) + 0.5,), "scan", False),
    "discounted_returns": (discounted_returns, lambda: (torch.randn(50, generator=_g(0)), 0.99), "scan", True),
    "reversed_diffs": (reversed_diffs, lambda: (torch.randn(20, 3, generator=_g(0)),), "broadcast", True),
    "negative_step_store": (negative_step_store, lambda: (torch.randn(21, 2, generator=_g(0)),), "broadcast", True),
    "rnn_encoder": (rnn_encoder, lambda: (torch.randn(12, 2, 4, generator=_g(0)), torch.zeros(2, 5),
                                          torch.randn(4, 5, generator=_g(1)) * 0.3, torch.randn(5, generator=_g(2)),
                                          torch.randn(5, 5, generator=_g(3)) * 0.3), "fission", True),
    "lstm_like": (lstm_like, lambda: (torch.randn(10, 2, 3, generator=_g(0)), torch.zeros(2, 4), torch.zeros(2, 4),
                                      torch.randn(16, 3, generator=_g(1)) * 0.3,
                                      torch.randn(16, 4, generator=_g(2)) * 0.3), "fission", True),
    "unit_slices": (unit_slices, lambda: (torch.randn(20, 5, generator=_g(0)), torch.randint(0, 5, (20,), generator=_g(1))), "reduction", True),
    "cat_columns": (cat_columns, lambda: (torch.randn(4, 6, generator=_g(0)),), "vmap", True),
    "stack_dim1": (stack_dim1, lambda: (torch.randn(4, 6, 2, generator=_g(0)),), "broadcast", True),
    "running_maximum": (running_maximum, lambda: (torch.randn(30, 4, generator=_g(0)),), "reduction", False),
    "drawdown": (drawdown, lambda: (torch.rand(40, generator=_g(0)) + 1,), "scan", False),
    "moving_mean": (moving_mean, lambda: (torch.randn(30, 3, generator=_g(0)), 4), "vmap", True),
    "positive_means": (positive_means, lambda: (torch.randn(25, 6, generator=_g(0)),), "vmap", True),
    "class_means": (class_means, lambda: (torch.randn(40, 3, generator=_g(0)), torch.randint(0, 5, (40,), generator=_g(1)), 6), "vmap", True),
    "pair_rows": (pair_rows, lambda: (torch.randn(12, 3, generator=_g(0)), torch.randn(12, 3, generator=_g(1))), "broadcast", True),
    "no_grad_scores": (no_grad_scores, lambda: (torch.randn(20, 4, generator=_g(0)), torch.randn(4, generator=_g(1))), "vmap", False),
    "focal": (focal, lambda: (torch.randn(30, 5, generator=_g(0)), torch.randint(0, 5, (30,), generator=_g(1)), 2.0), "reduction", True),
}
