"""The cost model weighs the bytes an iteration creates: a loop that keeps one iteration's values
at a time (a running sum, a last value) never held what a batch of all its iterations holds, and
a batch that writes far more fresh memory than the loop reuses runs the loop from the first call."""

import pytest
import torch

from autovec import autovec, cost, explain
from conftest import fixed_costs
from autovec.cost import Decision


@pytest.fixture
def costs(monkeypatch, tmp_path):
    """Fixed machine constants: writing fresh memory 10 times slower than reused memory."""
    fixed_costs(monkeypatch, tmp_path)
    yield
    monkeypatch.setattr(cost, "_constants", None)


def taps(x, w):
    """A valid correlation as a sum over kernel taps: each tap makes a (rows, n) product."""
    n = x.shape[-1] - w.shape[0] + 1
    out = torch.zeros(x.shape[0], n)
    for k in range(w.shape[0]):
        out += w[k] * x[:, k:k + n]
    return out


def tap_rows(x, w):
    """The same products kept per tap: the loop writes every one of them too."""
    n = x.shape[-1] - w.shape[0] + 1
    out = torch.empty(w.shape[0], x.shape[0], n)
    for k in range(w.shape[0]):
        out[k] = w[k] * x[:, k:k + n]
    return out


def heavy():
    # 48 taps of a (64, 2048) product: 0.5 MB each, 24 MB together (under the fresh-memory
    # threshold); 80 taps: 40 MB
    return torch.randn(64, 2100), torch.randn(80)


def test_a_sum_whose_batch_writes_much_fresh_memory_keeps_the_loop_from_the_first_call(costs):
    x, w = heavy()
    f = autovec(taps)
    ex = explain(f, x, w)
    assert ex.path == "python"
    assert any("fresh memory" in n and "MB" in n for n in ex.notes)
    # the estimate shown includes the bytes: the batch's writes cost more than the loop's
    assert ex.estimate["vectorized"] > 2 * ex.estimate["python"]
    torch.testing.assert_close(f(x, w), taps(x, w))
    d = f._autovec_state.runtime.decisions[(1, 80 .bit_length())]
    assert d.final and not d.vec and d.retry > 0      # settled on the loop, probed again later
    assert f._autovec_state.runtime.ran.get(1) is None


def test_the_same_products_kept_per_row_stay_vectorized(costs):
    # the loop writes all of them too: no memory the batch holds that the loop does not
    x, w = heavy()
    f = autovec(tap_rows)
    assert explain(f, x, w).path == "vectorized"
    torch.testing.assert_close(f(x, w), tap_rows(x, w))


def test_a_small_batch_of_the_same_sum_stays_vectorized(costs):
    x, w = torch.randn(8, 300), torch.randn(40)      # 40 taps of 8 x 261: 0.3 MB in all
    f = autovec(taps)
    assert explain(f, x, w).path == "vectorized"
    torch.testing.assert_close(f(x, w), taps(x, w))


def test_a_forced_trip_count_is_not_overruled_by_the_bytes(costs, monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")
    x, w = heavy()
    assert explain(autovec(taps), x, w).path == "vectorized"


def test_memory_is_free_below_the_fresh_threshold_and_off_the_cpu(costs):
    assert cost.memory(10, 1 << 20) == (0.0, 0.0)                 # 10 MB
    hot, fresh = cost.memory(100, 1 << 20)                         # 100 MB
    assert fresh == pytest.approx(100 * (1 << 20) * 0.5e-9) and hot == pytest.approx(fresh / 10)
    assert cost.memory(100, 1 << 20, "cuda") == (0.0, 0.0)


def test_weigh_settles_on_the_loop_only_before_any_timing():
    est = {"python": 1e-3, "vectorized": 2e-5}
    d = Decision(est, 400)
    assert d.choose()                                   # the estimate alone: vectorized (probed)
    assert d.weigh(est, 400, 14e-3, 120e-3)             # with the bytes: the loop
    assert d.final and not d.vec and d.weighed and d.retry > 0
    # within twice the loop: the estimate's verdict stands (its probes time it)
    d = Decision(est, 400)
    assert not d.weigh(est, 400, 14e-3, 20e-3) and d.choose()
    # a bucket that has been timed is not re-estimated
    d = Decision(est, 400)
    d.vectorized_ran(1e-3, 400)
    assert not d.weigh(est, 400, 14e-3, 120e-3)


def test_the_loop_is_probed_again_after_its_retry(costs):
    x, w = heavy()
    f = autovec(taps)
    f(x, w)
    d = f._autovec_state.runtime.decisions[(1, 80 .bit_length())]
    calls = d.retry
    for _ in range(calls):
        torch.testing.assert_close(f(x, w), taps(x, w))
    assert not d.final and d.probe == 1          # the retry is due: a vectorized probe
    for _ in range(3):                           # (its first call runs the one-time check)
        torch.testing.assert_close(f(x, w), taps(x, w))
        if d.final:
            break
    # the probe, slower than the estimated loop, settled it on the loop again, retried later
    assert d.final and not d.vec and d.retry > 0 and d.backoff == 4 * cost._RETRY


def test_the_sums_check_reads_a_strided_batch_in_memory_order():
    # a batch computed from a strided window is laid out tap-last; torch's whole-tensor extremes
    # are far slower over such a permuted layout, so the overflow check reads it in memory order
    from autovec.runtime import _dense_order
    x, w = torch.randn(6, 50), torch.randn(9)
    batch = w[:, None, None] * x.as_strided((9, 6, 42), (1, 50, 1))
    assert not batch.is_contiguous()
    dense = _dense_order(batch)
    assert dense.is_contiguous() and dense.data_ptr() == batch.data_ptr()
    assert torch.equal(torch.stack(torch.aminmax(dense)), torch.stack(torch.aminmax(batch)))
    strided = torch.randn(8, 8)[:, ::2]             # not dense: as it is
    assert _dense_order(strided) is strided


def horner(x, coeffs):
    """Horner's rule over many points: a first-order linear recurrence with a large state."""
    y = torch.full_like(x, float(coeffs[0]))
    for c in coeffs[1:]:
        y = y * x + c
    return y


def test_a_linear_recurrence_with_a_large_state_keeps_the_loop(costs, monkeypatch):
    # 16 steps of a 50,000-element state: the parallel scan writes about 18 states per step
    # (log2 passes of products and cats), the loop two, which it reuses
    g = torch.Generator().manual_seed(0)
    x, c = torch.rand(50_000, generator=g) * 2 - 1, torch.randn(17, generator=g) / 4
    f = autovec(horner)
    torch.testing.assert_close(f(x, c), horner(x, c))
    ex = explain(f, x, c)
    assert ex.path == "python" and any("parallel scan" in n for n in ex.notes)
    small = x[:8]                   # a state of 8 elements: the scan stays
    torch.testing.assert_close(f(small, c), horner(small, c))
    assert explain(f, small, c).path == "vectorized"


def damped(x, a):
    """h_t = a_t * h_{t-1} + x_t with a factor per step and a large state."""
    h = torch.zeros(x.shape[1])
    for t in range(x.shape[0]):
        h = a[t] * h + x[t]
    return h


def test_a_recurrence_with_a_factor_per_step_and_a_large_state_keeps_the_loop(costs, monkeypatch):
    g = torch.Generator().manual_seed(1)
    x, a = torch.randn(17, 50_000, generator=g), torch.rand(17, 50_000, generator=g)
    f = autovec(damped)
    torch.testing.assert_close(f(x, a), damped(x, a))
    ex = explain(f, x, a)
    assert ex.path == "python" and any("parallel scan" in n for n in ex.notes)
    torch.testing.assert_close(f(x[:, :8], a[:, :8]), damped(x[:, :8], a[:, :8]))
    assert explain(f, x[:, :8], a[:, :8]).path == "vectorized"
