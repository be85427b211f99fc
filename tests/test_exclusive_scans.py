"""Running values read before their update (an exclusive scan): `out[i] = s` then `s = s + x[i]`
(offsets from lengths, positions before each step). The body reads the start, then the running
values but the last; the value after the loop is the last running value. Checked against the
loop: values, dtypes, Python types, the running value after the loop (its in-place update of a
tensor start included), gradients, and the forms that keep the loop."""
import copy

import pytest
import torch

from autovec import autovec, explain
from test_counted_steps import _same


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def before_sums(x):
    s = 0
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = s
        s = s + x[i]
    return out, s


def before_from(x, s):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = s * 2
        s += x[i]
    return out, s


def before_products(x):
    p = 1
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i] = p
        p = p * x[i]
    return out, p


def offsets(lengths):
    off = 0
    starts = torch.zeros(len(lengths), dtype=torch.int64)
    for i, n in enumerate(lengths.tolist()):
        starts[i] = off
        off += n
    return starts, off


@pytest.mark.parametrize("fn, make", [
    (before_sums, lambda n: (torch.randn(n, 3),)),
    (before_sums, lambda n: (torch.randint(-5, 5, (n,)),)),
    (before_sums, lambda n: (torch.randn(n, 2, dtype=torch.float64),)),
    (before_from, lambda n: (torch.randint(0, 5, (n, 2)).double(), torch.tensor([0.5, 1.5], dtype=torch.float64))),
    (before_from, lambda n: (torch.randn(n, 2), torch.zeros(2))),
    (before_from, lambda n: (torch.randn(n), torch.ones(()))),
    (before_products, lambda n: (torch.rand(n, 2) + 0.5,)),
    (offsets, lambda n: (torch.randint(1, 9, (n,)),)),
])
@pytest.mark.parametrize("n", [1, 2, 9])
def test_a_running_value_read_before_its_update_matches_the_loop(fn, make, n):
    g = autovec(fn)
    for _ in range(3):
        args = make(n)
        a, b = copy.deepcopy(args), copy.deepcopy(args)
        want, got = fn(*a), g(*b)
        _same(got, want)
        _same(b, a)        # (a tensor start updated in place by `s += x[i]`, as the loop does)
    ex = explain(fn, *make(n))
    assert ex.path == "vectorized" and ex.loops[0].strategy == "scan", str(ex)
    assert "before each update" in ex.loops[0].reason


def before_rebound(x, s):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = s * 2
        s = s + x[i]
    return out, s


def test_gradients_through_the_values_before_each_step():
    x = torch.randn(6, 3, requires_grad=True)
    s0 = torch.randn(3, requires_grad=True)
    w = torch.randn(6, 3)
    grads = []
    for f in (before_rebound, autovec(before_rebound)):
        x.grad = s0.grad = None
        out, s = f(x, s0)
        ((out * w).sum() + s.sum()).backward()
        grads.append((x.grad.clone(), s0.grad.clone()))
    torch.testing.assert_close(grads[1], grads[0])
    assert explain(before_rebound, x, s0).path == "vectorized"


def from_a_row(x):
    s = x[1]                      # (a view of x: `s += x[i]` writes into x's row 1)
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = s
        s += x[i]
    return out


def into_a_row(x):
    s = x[1]
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s += x[i]                 # (the inclusive form: the same write into x)
        out[i] = s
    return out


def squared_before(x, w):
    s = w * 1                     # (not a leaf; it requires grad)
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = s * s            # (mul saves s, which the next step changes in place)
        s += x[i]
    return out


def test_in_place_running_values_from_an_inputs_row_or_with_gradients_keep_the_loop():
    """`s = x[1]` then `s += x[i]` writes into the input, whose later rows the loop reads changed
    (the inclusive form too, before this stop); a start that requires grad, changed in place after
    a step saved it for backward, makes the loop's backward raise. Both keep the loop (found by the
    second probe of exclusive scans)."""
    from conftest import outcome
    for fn in (from_a_row, into_a_row):
        x = torch.tensor([1.0, 2.0, 3.0, 4.0])
        a, b = x.clone(), x.clone()
        _same(autovec(fn)(b), fn(a))
        _same(b, a)
        assert explain(fn, x.clone()).path == "python"
    x = torch.randn(3, requires_grad=True)
    w = torch.tensor(2.0, requires_grad=True)
    want = outcome(lambda: squared_before(x, w)[0].sum().backward())
    got = outcome(lambda: autovec(squared_before)(x, w)[0].sum().backward())
    assert want[0] is RuntimeError and got[0] is RuntimeError


def divided_before(x, s):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = s / 0            # (a Python float start: ZeroDivisionError in the loop)
        s = s + x[i]
    return out


def test_a_python_start_computed_with_keeps_the_loop():
    """The loop computes the first step's value from the Python number itself (`s / 0` raises,
    `s * 1e300` stays a double), the rest from tensors: a Python start computed with keeps the
    loop where the steps are tensors."""
    from conftest import outcome
    x = torch.randn(4)
    a, b = x.clone(), x.clone()
    assert outcome(autovec(divided_before), b, 1.0) == outcome(divided_before, a, 1.0)
    assert explain(divided_before, x, 1.0).path == "python"


def read_before_and_after(x):
    s = 0
    out = torch.empty_like(x)
    out2 = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = s
        s = s + x[i]
        out2[i] = s
    return out, out2


def read_under_a_condition(x):
    s = 0
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if x[i].sum() > 0:
            out[i] = s
        s = s + x[i]
    return out


def appended_before(x):
    s = 0
    res = []
    for i in range(x.shape[0]):
        res.append(s)             # (the loop's list: a Python int, then tensors)
        s = s + x[i]
    return res, s


def appended_offsets(lengths):
    off = 0
    starts = []
    for n in lengths.tolist():
        starts.append(off)        # (Python ints all through)
        off += n
    return starts, off


def test_offsets_appended_as_python_numbers_are_a_scan():
    g = autovec(appended_offsets)
    for n in (1, 2, 11):
        lengths = torch.randint(0, 9, (n,))
        want, got = appended_offsets(lengths), g(lengths)
        assert got == want and all(type(v) is int for v in got[0]) and type(got[1]) is int
    ex = explain(appended_offsets, torch.randint(0, 9, (6,)))
    assert ex.path == "vectorized" and ex.loops[0].strategy == "scan"


def appended_tensor_start(x):
    s = torch.zeros(x.shape[1])
    res = []
    for i in range(x.shape[0]):
        res.append(s)             # (the loop's list holds the start itself first)
        s = s + x[i]
    return res, s


def read_by_the_update(x):
    s = 1.0
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        y = s * 2
        out[i] = y
        s = s + x[i] * y          # (the step reads the value: a recurrence)
    return out


@pytest.mark.parametrize("fn", [read_before_and_after, appended_before, read_by_the_update, appended_tensor_start])
def test_other_reads_before_the_update_keep_the_loop(fn):
    x = torch.randn(5, 2)
    _same(autovec(fn)(x), fn(x))
    assert explain(fn, x).path == "python"


def test_a_read_under_a_condition_is_an_exclusive_scan():
    """A store under a condition that does not read the running value (`if c: out[i] = s`)
    reads it as a store at the top level does, in the iterations where it runs."""
    for x in (torch.randn(5, 2), torch.randn(1, 2), -torch.rand(6, 2)):
        _same(autovec(read_under_a_condition)(x), read_under_a_condition(x))
    ex = explain(read_under_a_condition, torch.randn(5, 2))
    assert ex.path == "vectorized" and "before each update" in ex.loops[0].reason, str(ex)


def weight_set_beside_the_read(m, x):
    w = 100.0
    out = torch.zeros(x.shape[0])
    s = torch.zeros(())
    for i in range(x.shape[0]):
        if m[i]:
            out[i] = s
            w = 2.0               # (in the `if` with the read: the update needs it)
        else:
            w = 1.0
        s = s + x[i] * w
    return out, s


def test_an_if_with_a_read_keeps_its_other_statements_for_the_update():
    """The values added are computed without the reads before the update, but not without the
    `if` that holds one: its other statements bind what the update reads (dropping the whole
    `if` made the update read `w` from before the loop: a wrong answer)."""
    for _ in range(3):
        m, x = torch.rand(8) < 0.5, torch.randn(8)
        _same(autovec(weight_set_beside_the_read)(m, x), weight_set_beside_the_read(m, x))


def wide_before(x, s):
    out = torch.zeros(x.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i] = s
        s = s + x[i]
    return out, s


def test_a_start_its_dtype_does_not_hold_keeps_the_loop():
    """0.1 is no float32: the loop stores the Python float at the first step (into a float64
    output it stays 0.1), the batch would store float32's 0.1; a float64 start of float32 steps
    is another dtype (the loop's first value is float64, the rest float32)."""
    x = torch.randn(5)
    for s in (0.1, torch.tensor(0.1, dtype=torch.float64)):
        want, got = wide_before(x, copy.deepcopy(s)), autovec(wide_before)(x, copy.deepcopy(s))
        assert want[0][0].item() == got[0][0].item() == 0.1
        _same(got, want)
    ex = explain(wide_before, x, 0.1)
    assert ex.path == "python" and "does not hold" in str(ex)
    assert explain(wide_before, x, 0.5).path == "vectorized"


def tripled_before(x, s):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for i in range(x.shape[0]):
        out[i] = s * 3
        s = s + x[i]
    return out, s


def test_a_start_of_another_dtype_keeps_the_loop():
    """A float64 0-d start of float32 rows: the loop's running values are float32 after the
    first step (`s * 3` rounds in float32), the start float64; one batch of both would compute
    every step in float64."""
    x = torch.randn(6, 2) * 1e3
    s = torch.tensor(0.1, dtype=torch.float64)
    want, got = tripled_before(x, s), autovec(tripled_before)(x, s)
    assert torch.equal(got[0], want[0])
    _same(got, want)
    ex = explain(tripled_before, x, s)
    assert ex.path == "python" and "another dtype" in str(ex)


# --- found by the probe of these scans (stop 25) -------------------------------------------

def appended_total(lengths):
    off = 0
    starts = []
    for n in lengths.tolist():
        starts.append(off)
        off = off + n             # (the total after the loop: not the list's last element)
    return starts, off


def appended_product(x):
    p = 1
    res = []
    for i in range(x.shape[0]):
        res.append(p)
        p = p * x[i].item()
    return res, p


def negated_before(x):
    s = 0
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = -s               # (-0 of the int start stores +0.0; of 0.0, -0.0)
        s = s + x[i]
    return out


def doubled_before(x, s):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = s * 2            # (2**63 of an int start raises in setitem)
        s = s + x[i]
    return out


@pytest.mark.parametrize("fn, args", [
    (appended_total, lambda: (torch.ones(2000, dtype=torch.int64),)),
    (appended_total, lambda: (torch.rand(7),)),                  # (an int start, float steps: 0, not 0.0)
    (appended_product, lambda: (torch.tensor([1, 2, 3, 4]),)),
    (negated_before, lambda: (torch.randn(5),)),
    (doubled_before, lambda: (torch.randn(4), 2 ** 62)),
    (doubled_before, lambda: (torch.randn(4, dtype=torch.complex64), float("inf"))),
    (doubled_before, lambda: (torch.randn(4), True)),
    (wide_before, lambda: (torch.randn(4), 2 ** 63)),                 # (setitem of an int past int64 raises)
    (wide_before, lambda: (torch.randint(0, 9, (4,)), 2 ** 63)),
])
def test_exclusive_scans_keep_the_loops_types_totals_and_errors(fn, args):
    """The running value after the loop is its last step, not the last value read before an
    update; a Python start whose kind differs from the steps' (an int start of float steps, a
    bool, a float of complex steps, an int past int64) keeps the loop where the value is computed
    with or appended, as the loop computes with that number itself."""
    from conftest import outcome
    g = autovec(fn)
    for _ in range(4):
        a = args()
        want, got = outcome(fn, *copy.deepcopy(a)), outcome(g, *copy.deepcopy(a))
        if isinstance(want, tuple) and want and isinstance(want[0], type):
            assert got == want
            continue
        _same(got, want)
        if isinstance(want, torch.Tensor):
            assert torch.equal(torch.signbit(got.real) if got.is_complex() else torch.signbit(got),
                               torch.signbit(want.real) if want.is_complex() else torch.signbit(want))
        if isinstance(want, tuple) and isinstance(want[0], list):
            assert [type(v) for v in got[0]] == [type(v) for v in want[0]]


def test_one_row_of_a_plain_start_carries_no_gradient():
    x = torch.randn(1, requires_grad=True)
    want, got = before_from(x, 0.5), autovec(before_from)(x, 0.5)
    assert got[0].requires_grad == want[0].requires_grad
    _same(got[0].detach(), want[0].detach())


def from_the_output(x):
    out = torch.zeros_like(x)
    s = out[0]                    # (a view of the output: `s += x[i]` writes into out's row 0)
    for i in range(x.shape[0]):
        s += x[i]
        out[i] = s
    return out


def before_from_the_output(x):
    out = torch.ones(x.shape[0], x.shape[1])
    s = out[1]
    for i in range(x.shape[0]):
        out[i] = s
        s += x[i]
    return out, s


def squares_of_a_running_sum(x):
    s = torch.zeros(x.shape[1])
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        s += x[i]
        out[i] = s * s            # (mul keeps s for backward; the next step changes it in place)
    return out


def test_in_place_running_values_from_an_output_or_under_gradients_keep_the_loop():
    """Found by the third probe of scans: a start that is a view of the output the loop stores
    into (`s = out[0]`) gave the rows without the loop's writes through `s` (and raised in the
    exclusive form under grad). Under gradients, a running value updated in place and read by an
    operation that keeps it for backward makes the loop's backward raise, and so must the call's;
    stored as it is, it runs batched."""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    _same(autovec(from_the_output)(x), from_the_output(x))
    assert explain(from_the_output, x).path == "python"
    xg = torch.randn(4, 3, requires_grad=True)
    want, got = before_from_the_output(xg), autovec(before_from_the_output)(xg)
    _same(tuple(t.detach() for t in got), tuple(t.detach() for t in want))
    from conftest import outcome
    x = torch.randn(4, 3, requires_grad=True)
    want = outcome(lambda: squares_of_a_running_sum(x).sum().backward())
    got = outcome(lambda: autovec(squares_of_a_running_sum)(x).sum().backward())
    assert want[0] is RuntimeError and got[0] is RuntimeError
    assert explain(squares_of_a_running_sum, x).path == "python"
    with torch.no_grad():         # (without gradients the batch runs)
        assert explain(squares_of_a_running_sum, x).path == "vectorized"


def test_a_start_of_another_shape_computed_with_keeps_the_loop(monkeypatch):
    # (pre-existing: the 0-d start was expanded to a row, so `s.sum()` of the first step summed
    # three ones where the loop sums one)
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")

    def sums_before(x):
        s = torch.ones(())
        out = torch.zeros(x.shape[0])
        for t in range(x.shape[0]):
            out[t] = s.sum()
            s = s + x[t]
        return out
    x = torch.rand(6, 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(autovec(sums_before)(x), sums_before(x))
    assert explain(sums_before, x).path == "python"
