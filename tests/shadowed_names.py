"""Loops in a module that rebinds builtins and imports torch under other names (for
tests/test_user_names.py): the rewrite must use none of these names itself."""
import builtins
from types import SimpleNamespace

import torch as th
from torch.nn.functional import one_hot as oh

Exception = KeyError          # noqa: A001 (the point: generated code must not catch by this name)


def len(obj):                 # noqa: A001
    return 2


def max(a, b):                # noqa: A001
    return builtins.min(a, b)


ops = SimpleNamespace(maximum=th.minimum)


def best_of(x):
    best = 1e9
    for i in range(x.shape[0]):
        best = max(best, x[i].sum().item())
    return best


def repeated(x, w):
    return [w for r in x]


def one_hot_rows(lab):
    out = th.zeros(lab.shape[0], 4, dtype=th.long)
    for i in range(lab.shape[0]):
        out[i] = oh(lab[i], 4)
    return out


def medians(x):
    out = []
    for i in range(x.shape[0]):
        out.append(th.median(x[i]))
    return th.stack(out)


def running_extreme(x):
    m = th.zeros(x.shape[1])
    for i in range(x.shape[0]):
        m = ops.maximum(m, x[i])
    return m
