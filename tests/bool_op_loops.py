"""Loops whose `if` tests are `and` / `or` of per-iteration values (tests/test_bool_ops.py)."""
import torch
def tp_count(pred, y):
    tp = 0
    for i in range(pred.shape[0]):
        if pred[i] and y[i]:
            tp += 1
    return tp
def either(x, y):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        if x[i] > 0 or y[i] < -1:
            out[i] = x[i] * 2
        else:
            out[i] = y[i]
    return out
def band(x, lo, hi):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > lo and x[i] < hi and not x[i] == 0:
            s += x[i].item()
    return s
def window(x, k):
    n = x.shape[0]
    out = torch.zeros(n, n)
    for i in range(n):
        for j in range(n):
            if i <= j and j < i + k:
                out[i, j] = x[j]
    return out
def guarded(x, idx):
    s = torch.zeros(())
    for i in range(idx.shape[0]):
        if idx[i] >= 0 and x[idx[i]] > 0:
            s = s + x[idx[i]]
    return s
def floats_and(x, y):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * 2 if x[i] and y[i] else y[i])
    return torch.stack(out)
def multi(x, y):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        if x[i] and y[i]:
            out[i] = 1.0
    return out
