"""autovec demo: loops people really write, what autovec makes of them, and how fast.

Run from the repository root:  .venv/bin/python examples/demo.py   (or `make demo`)
Options: --threads N (torch threads, default 1: steady timings even when other work
shares the CPU; the Python loops are single-threaded either way).

For each loop it prints the original source, autovec's explanation (strategy, reason,
rewritten source), checks the rewrite returns the same result as the loop, and times the
loop against the autovec version. Exits non-zero if any equivalence check fails.
"""
import argparse
import inspect
import sys
import time

import torch
import torch.utils.benchmark as benchmark

import autovec
from autovec import EquivalenceError


# --------------------------------------------------------------------------- the loops
# Written the way people write them, with no hints for autovec.

def add_elementwise(u, v):
    """Element by element: append to a list, then torch.stack."""
    out = []
    for k in range(len(u)):
        out.append(u[k] + v[k])
    return torch.stack(out)


def softmax_rows(x, t):
    """Per-row softmax with a temperature, written into a preallocated output."""
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        out[k] = torch.softmax(x[k] / t, dim=0)
    return out


def cosine_rows(p, q):
    """Row-wise cosine similarity with torch.dot and norms, collected into torch.tensor(list)."""
    sims = []
    for k in range(p.shape[0]):
        num = torch.dot(p[k], q[k])
        den = torch.norm(p[k]) * torch.norm(q[k])
        sims.append(num / den)
    return torch.tensor(sims)


def mask_padding(h, lengths, temps):
    """Padded sequences: a per-sequence temperature from a Python list, then zero the time
    steps past each sequence's length with a slice that changes per row."""
    out = torch.empty_like(h)
    for b in range(h.shape[0]):
        out[b] = h[b] / temps[b]
        out[b, lengths[b]:] = 0
    return out


def class_centroids(feats, labels, num_classes):
    """Per-class mean feature vectors (prototypes): a boolean mask per class, reduced at once;
    then a moving average of each centroid's distance to the next, over a window."""
    cents = torch.empty(num_classes, feats.shape[1])
    for c in range(num_classes):
        cents[c] = feats[labels == c].mean(0)
    smooth = []
    for i in range(num_classes - 7):
        smooth.append((cents[i:i + 4] - cents[i + 4:i + 8].mean(0)).norm(dim=1).mean())
    return cents, torch.stack(smooth)


def collate(seqs, max_len):
    """A collate function's padding: token sequences of several lengths into one id tensor and
    its attention mask (one masked store per target)."""
    ids = torch.zeros(len(seqs), max_len, dtype=torch.long)
    mask = torch.zeros(len(seqs), max_len, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        mask[i, :len(s)] = True
    return ids, mask


def adam_step(params, grads, ms, vs, step, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """One Adam step over a list of small parameters of several shapes, updated in place
    (`torch._foreach_*` calls over the lists, as torch.optim's foreach implementation)."""
    for i in range(len(params)):
        ms[i].mul_(b1).add_(grads[i], alpha=1 - b1)
        vs[i].mul_(b2).addcmul_(grads[i], grads[i], value=1 - b2)
        mhat = ms[i] / (1 - b1 ** step)
        vhat = vs[i] / (1 - b2 ** step)
        params[i].sub_(lr * mhat / (vhat.sqrt() + eps))
    return params


def make_inputs():
    g = torch.Generator().manual_seed(0)
    return [
        ("elementwise add, list.append + torch.stack", add_elementwise,
         (torch.randn(20_000, generator=g), torch.randn(20_000, generator=g))),
        ("per-row softmax into a preallocated tensor", softmax_rows,
         (torch.randn(5_000, 64, generator=g), 0.7)),
        ("per-row cosine similarity into torch.tensor(list)", cosine_rows,
         (torch.randn(4_000, 128, generator=g), torch.randn(4_000, 128, generator=g))),
        ("padding mask out[b, L[b]:] = 0, a list of temps", mask_padding,
         (torch.randn(4_000, 16, 8, generator=g), torch.randint(0, 17, (4_000,), generator=g),
          [0.5 + (b % 5) * 0.25 for b in range(4_000)])),
        ("class centroids x[y == c].mean(0), a sliding window", class_centroids,
         (torch.randn(50_000, 32, generator=g), torch.randint(0, 500, (50_000,), generator=g), 500)),
        ("collate: sequences padded into ids and a mask", collate,
         ([torch.randint(1, 30_000, (int(n),), generator=g) for n in torch.randint(1, 65, (256,), generator=g)], 64)),
        ("Adam step over a list of 200 small parameters", adam_step,
         ([torch.randn(16 + k % 5, 8, generator=g) for k in range(200)], [torch.randn(16 + k % 5, 8, generator=g) for k in range(200)],
          [torch.zeros(16 + k % 5, 8) for k in range(200)], [torch.zeros(16 + k % 5, 8) for k in range(200)], 1)),
    ]


# --------------------------------------------------------------------------- helpers

def median_ms(fn, args, label):
    timer = benchmark.Timer(stmt="fn(*args)", globals={"fn": fn, "args": args}, label=label,
                            num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=0.3).median * 1e3


def header(text, char="="):
    print()
    print(char * 78)
    print(text)
    print(char * 78)


def shapes(args):
    def one(a):
        if isinstance(a, torch.Tensor):
            return f"tensor{tuple(a.shape)}"
        if isinstance(a, list) and len(a) > 8 and all(isinstance(t, torch.Tensor) for t in a):
            return f"a list of {len(a)} tensors"
        return repr(a)
    return ", ".join(one(a) for a in args)


def run_one(title, fn, args):
    header(title)
    print(f"inputs: {shapes(args)}\n")
    print("--- original source " + "-" * 58)
    print(inspect.getsource(fn).rstrip())

    print("\n--- autovec.explain(fn, *args) " + "-" * 47)
    ex = autovec.explain(fn, *args)
    print(ex)
    if ex.path != "vectorized":
        print(f"\n(note: with these arguments autovec runs the {ex.path!r} path, not a vectorized rewrite)")

    print("\n--- autovec.assert_equivalent(fn, *args) " + "-" * 37)
    ok = True
    try:
        autovec.assert_equivalent(fn, *args)
        print("equivalent: the rewrite returns the same result as the loop")
    except EquivalenceError as e:
        ok = False
        print(f"NOT EQUIVALENT: {e}")

    print("\n--- timing (torch.utils.benchmark, median) " + "-" * 35)
    fast = autovec.autovec(fn)
    fast(*args)  # first call: analysis and rewrite, cached afterwards
    t_loop = median_ms(fn, args, "loop")
    t_fast = median_ms(fast, args, "autovec")
    speedup = t_loop / t_fast
    print(f"python loop : {t_loop:9.3f} ms")
    print(f"autovec     : {t_fast:9.3f} ms   ({ex.path})")
    print(f"speed-up    : {speedup:9.1f}x")
    return dict(title=title, path=ex.path, ok=ok, loop=t_loop, fast=t_fast, speedup=speedup)


def main():
    ap = argparse.ArgumentParser(description="autovec demo")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    torch.set_num_threads(ap.parse_args().threads)
    t0 = time.perf_counter()
    header(f"autovec {autovec.__version__} demo  |  torch {torch.__version__}, "
           f"{torch.get_num_threads()} CPU threads")
    results = [run_one(f"[{k}] {title}", fn, args) for k, (title, fn, args) in enumerate(make_inputs(), 1)]

    header("summary")
    for r in results:
        status = "equivalent" if r["ok"] else "NOT EQUIVALENT"
        print(f"{r['title']:54s} {r['path']:>10s}  loop {r['loop']:8.2f} ms  autovec {r['fast']:7.3f} ms"
              f"  {r['speedup']:7.1f}x  {status}")
    print(f"\n(total demo time {time.perf_counter() - t0:.1f} s)")
    failed = [r["title"] for r in results if not r["ok"]]
    if failed:
        print(f"\nFAILED equivalence: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
