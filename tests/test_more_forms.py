"""More spellings of loops that vectorize: `enumerate` with its start by keyword or signed,
`for ... else` without `break`. Every form is compared with the loop on random inputs, and the
call is checked to have taken the vectorized path."""
import pytest
import torch

from autovec import assert_equivalent, autovec, explain
from conftest import raises_as_loop, ran_modes


@pytest.fixture(autouse=True)
def always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def vectorizes(fn, *args, **kwargs):
    """assert_equivalent, then a fresh decorated call that must have run a vectorized path."""
    assert_equivalent(fn, *args, trials=2, **kwargs)
    fast = autovec(fn)
    fast(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    assert ran_modes(fast), explain(fn, *args)


def strategies(fn, *args):
    return [r.strategy for r in explain(fn, *args).loops]


# ----------------------------------------------------------------------------- enumerate start

def enum_kw_store(x):
    out = torch.zeros(x.shape[0])
    for k, row in enumerate(x, start=1):
        out[k - 1] = row.sum() * k
    return out


def enum_kw_append(x):
    res = []
    for k, row in enumerate(x, start=3):
        res.append(row * k + 1)
    return torch.stack(res) if res else x


def enum_negative(x):
    out = torch.zeros_like(x)
    for k, row in enumerate(x, -3):
        out[k + 3] = row * k
    return out


def enum_negative_kw(x):
    res = []
    for k, row in enumerate(x, start=-2):
        res.append(row.abs().sum() - k)
    return res


def enum_large(x):
    res = []
    for k, row in enumerate(x, start=1000003):
        res.append(row.double() * k)
    return torch.stack(res) if res else x.double()


def enum_huge(x):
    res = []
    for k, row in enumerate(x, start=4611686018427387000):      # near 2**62
        res.append(row.sum() + (k - 4611686018427387000))
    return res


def enum_huge_int(x):
    res = []
    for k, row in enumerate(x, start=4611686018427387000):
        res.append(row + k)
    return torch.stack(res) if res else x


def enum_iterable_kw(x):
    res = []
    for k, row in enumerate(iterable=x, start=2):
        res.append(row * k)
    return torch.stack(res) if res else x


def enum_zip_kw(a, b):
    res = []
    for k, (u, v) in enumerate(zip(a, b), start=2):
        res.append(u * v + k)
    return torch.stack(res) if res else a


def enum_zip_negative(a, b):
    out = torch.zeros(a.shape[0])
    for k, (u, v) in enumerate(zip(a, b), start=-1):
        out[k + 1] = (u * v).sum() * k
    return out


def enum_comprehension_kw(x):
    return [r * k for k, r in enumerate(x, start=5)]


def enum_sum_kw(x):
    total = torch.zeros(x.shape[1])
    for k, row in enumerate(x, start=1):
        total += row / k
    return total


SHAPES = [(0, 3), (1, 3), (6, 3)]


@pytest.mark.parametrize("n", [s[0] for s in SHAPES])
@pytest.mark.parametrize("fn", [enum_kw_store, enum_kw_append, enum_negative, enum_negative_kw, enum_large,
                                enum_huge, enum_huge_int, enum_iterable_kw, enum_comprehension_kw,
                                enum_sum_kw])
def test_enumerate_start_vectorizes(fn, n):
    x = torch.randn(n, 3)
    if fn is enum_huge_int:
        x = torch.randint(-5, 5, (n, 3))
    if n == 0:
        assert_equivalent(fn, x)     # nothing to run: no mode to check
    else:
        vectorizes(fn, x)


@pytest.mark.parametrize("n", [0, 1, 6])
@pytest.mark.parametrize("fn", [enum_zip_kw, enum_zip_negative])
def test_enumerate_zip_start_vectorizes(fn, n):
    a, b = torch.randn(n, 3), torch.randn(n + 2, 3)
    if n == 0:
        assert_equivalent(fn, a, b)
    else:
        vectorizes(fn, a, b)


def test_enumerate_start_gradients():
    x = torch.randn(5, 3, requires_grad=True)
    assert_equivalent(enum_kw_store, x, grad=True)
    assert_equivalent(enum_zip_kw, x, torch.randn(5, 3, requires_grad=True), grad=True)


def enum_store_past_end(x):
    out = torch.zeros(x.shape[0])
    for k, row in enumerate(x, start=2):
        out[k] = row.sum()
    return out


def test_enumerate_start_store_out_of_range_raises_as_loop():
    raises_as_loop(IndexError, enum_store_past_end, torch.randn(4, 3))


def test_enumerate_start_explain():
    for fn, args in [(enum_kw_store, (torch.randn(4, 3),)), (enum_negative, (torch.randn(4, 3),)),
                     (enum_zip_kw, (torch.randn(4, 3), torch.randn(4, 3))),
                     (enum_comprehension_kw, (torch.randn(4, 3),))]:
        e = explain(fn, *args)
        assert all(r.vectorized for r in e.loops), str(e)
        assert "enumerate" not in " ".join(r.reason for r in e.loops)


def enum_start_name(x, s: int):
    res = []
    for k, row in enumerate(x, start=s):
        res.append(row * k)
    return torch.stack(res)


def enum_start_float(x):
    res = []
    for k, row in enumerate(x, start=1.5):
        res.append(row * k)
    return torch.stack(res)


def enum_start_too_big(x):
    res = []
    for k, row in enumerate(x, start=9223372036854775807):
        res.append(row.sum() + (k - 9223372036854775807))
    return res


def test_enumerate_start_not_literal_keeps_loop():
    x = torch.randn(4, 3)
    e = explain(enum_start_name, x, 2)
    assert [r.strategy for r in e.loops] == ["python"]
    assert "not an integer literal" in e.loops[0].reason
    assert_equivalent(enum_start_name, x, 2)
    raises_as_loop(TypeError, enum_start_float, x)
    e = explain(enum_start_too_big, x)
    assert [r.strategy for r in e.loops] == ["python"] and "int64" in e.loops[0].reason
    assert_equivalent(enum_start_too_big, x)


def enum_bad_keyword(x):
    res = []
    for k, row in enumerate(x, begin=1):
        res.append(row * k)
    return res


def test_enumerate_bad_keyword_raises_as_loop():
    raises_as_loop(TypeError, enum_bad_keyword, torch.randn(3, 2))
    assert strategies(enum_bad_keyword, torch.randn(3, 2)) == ["python"]


def enum_at_two_62(x):
    res = []
    for k, row in enumerate(x, start=4611686018427387904):     # 2**62: k + k reaches int64's end
        res.append(row + (k + k))
    return res


def test_enumerate_start_at_the_limit():
    vectorizes(enum_at_two_62, torch.randint(-5, 5, (4, 3)))


# ----------------------------------------------------------------------------- for ... else

def else_store(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i].sum()
    else:
        out = out * 2
    return out


def else_rows_flag(x):
    res = []
    done = False
    for row in x:
        res.append(row.exp() - 1)
    else:
        done = True
        res.append(res[-1] if res else None)
    return res, done


def else_continue(x):
    out = torch.zeros_like(x)
    for i in range(len(x)):
        if x[i].sum() > 0:
            continue
        out[i] = x[i] * 3
    else:
        out[0:1] += 1
    return out


def else_enumerate_kw(x):
    out = torch.zeros(x.shape[0])
    for k, row in enumerate(x, start=1):
        out[k - 1] = row.norm() * k
    else:
        k = -1
    return out, k


def else_sum(x):
    total = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        total += x[i] ** 2
    else:
        total = total.sqrt()
    return total


def else_while(x):
    out = torch.zeros_like(x)
    i = 0
    while i < x.shape[0]:
        out[i] = x[i] * 2
        i += 1
    else:
        out = out + i
    return out, i


def else_nested(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * j
        else:
            j = None
    else:
        out = out.flip(0)
    return out, j


def else_no_grad(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        with torch.no_grad():
            out[i] = x[i].sum()
    else:
        out = out.clone()
    return out


def else_inside_if(x, flag: bool):
    out = torch.zeros(x.shape[0])
    if flag:
        for i in range(x.shape[0]):
            out[i] = x[i].max()
        else:
            out += 1
    return out


ELSE_FORMS = [else_store, else_rows_flag, else_continue, else_enumerate_kw, else_sum, else_while, else_nested,
              else_no_grad]


@pytest.mark.parametrize("n", [0, 1, 5])
@pytest.mark.parametrize("fn", ELSE_FORMS)
def test_for_else_vectorizes(fn, n):
    x = torch.randn(n, 3)
    if n == 0:
        assert_equivalent(fn, x)
    else:
        vectorizes(fn, x)


@pytest.mark.parametrize("flag", [True, False])
def test_for_else_inside_if(flag):
    x = torch.randn(4, 3)
    assert_equivalent(else_inside_if, x, flag)
    if flag:
        vectorizes(else_inside_if, x, flag)


def test_for_else_gradients():
    assert_equivalent(else_store, torch.randn(4, 3, requires_grad=True), grad=True)
    assert_equivalent(else_sum, torch.randn(4, 3, requires_grad=True), grad=True)


def test_for_else_explain():
    x = torch.randn(4, 3)
    for fn in ELSE_FORMS:
        e = explain(fn, x)
        # else_nested: the inner loop's `else` leaves a statement between the `for` lines, so
        # the outer loop stays Python (a known limit) and the inner one is rewritten
        assert e.loops and all(r.vectorized for r in e.loops[fn is else_nested:]), str(e)
        assert "else" not in " ".join(r.reason for r in e.loops)
    e = explain(else_store, x)
    # the rewrite runs the else block after the loop; the original source keeps the `else:`
    assert "else:" not in e.rewritten_source and "out = out * 2" in e.rewritten_source


def else_tail_raises(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i].sum()
    else:
        out[x.shape[0] + 5] = 1.0
    return out


def test_for_else_tail_raises_at_its_line():
    import inspect
    import traceback
    got = raises_as_loop(IndexError, else_tail_raises, torch.randn(3, 2))
    lines, first = inspect.getsourcelines(else_tail_raises)
    want = first + next(k for k, t in enumerate(lines) if "out[x.shape[0] + 5]" in t)
    here = [fr for fr in traceback.extract_tb(got.value.__traceback__) if fr.filename == __file__]
    assert here[-1].lineno == want and "out[x.shape[0] + 5]" in here[-1].line


# a `break` that ends the loop keeps the `else` (and the loop as written)

def else_break_in_if(x):
    out = torch.zeros(x.shape[0])
    found = -1
    for i in range(x.shape[0]):
        out[i] = x[i].sum()
        if out[i] > 1:
            found = i
            break
    else:
        found = None
    return out, found


def else_break_in_with(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        with torch.no_grad():
            out[i] = x[i].sum()
            if out[i] > 1:
                break
    else:
        out = out * 0
    return out


def else_break_in_inner_else(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j]
        else:
            if x[i].sum() > 0:
                break                 # the inner loop's `else` belongs to the outer loop
    else:
        out = out * 0
    return out


def else_break_in_kept_inner_else(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 1.5:
                break                 # the inner loop's own break: its `else` stays
            out[i, j] = x[i, j]
        else:
            if x[i].sum() > 0:
                break                 # ends the outer loop
    else:
        out = out * 0
    return out


def else_inner_break_only(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] > 0:
                out[i] = x[i, j]
                break              # ends the inner loop only: the outer `else` always runs
    else:
        out = out - 1
    return out


@pytest.mark.parametrize("fn", [else_break_in_if, else_break_in_with, else_break_in_inner_else,
                                else_break_in_kept_inner_else])
def test_for_else_with_break_agrees(fn):
    """A `break` reached through `if` blocks only: the `else` runs after the loop under `if not
    broke:` (hoist.else_as_flag) and the loop is planned as any loop ending by `break`; a
    `break` inside a `with` keeps the `else`, and the loop, as written."""
    for seed in range(4):
        torch.manual_seed(seed)
        x = torch.randn(6, 3)
        assert_equivalent(fn, x)
    e = explain(fn, x)
    if fn is else_break_in_with:
        assert e.loops[0].strategy == "python" and "else" in e.loops[0].reason, str(e)
    else:
        assert "broke" in e.rewritten_source and "else" not in e.loops[0].reason, str(e)


def test_for_else_inner_break_only_moves_the_outer_else():
    from autovec.analysis.hoist import drop_loop_else
    from autovec.frontend import capture
    cap = capture(else_inner_break_only)
    assert drop_loop_else(cap) == 1
    for seed in range(4):
        torch.manual_seed(seed)
        assert_equivalent(else_inner_break_only, torch.randn(5, 3))


# ----------------------------------------------------------------------------- a number on one side of `a if c else b`

def ifexp_row_or_zero(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] if x[i].sum() > 0 else 0
    return out


def ifexp_number_first(x, m):
    out = torch.empty(x.shape[0], x.shape[1])
    for i in range(x.shape[0]):
        out[i] = -1.5 if m[i] else x[i] * 2
    return out


def ifexp_scalar(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = x[i].sum() if x[i, 0] > 0 else -1
    return out


def ifexp_int_out(x):
    out = torch.zeros(x.shape[0], dtype=torch.int64)
    for i in range(x.shape[0]):
        out[i] = x[i].sum() if x[i].sum() > 0 else 2.7      # the store truncates 2.7 to 2
    return out


def ifexp_numbers(x):
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = 1 if x[i].sum() > 0 else 0.25
    return out


def ifexp_nested(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] if x[i, 0] > 0.5 else (0 if x[i, 1] > 0 else x[i] - 1)
    return out


def ifexp_under_if(x, d):
    out = torch.full_like(x, 7.0)
    for i in range(x.shape[0]):
        if d[i] > 0:
            out[i] = x[i].exp() if x[i].mean() > 0 else 0.0
    return out


def ifexp_enumerate_kw(x):
    out = torch.zeros_like(x)
    for k, row in enumerate(x, start=1):
        out[k - 1] = row * k if row.max() > 1 else 0
    return out


def ifexp_half(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] if x[i].sum() > 0 else 0.1
    return out


def ifexp_overflow(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] if x[i].sum() > 0 else 1e300
    return out


def ifexp_in_a_branch(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if x[i, 2] > 0:
            out[i] = x[i] if x[i].sum() > 0 else 0        # one store with the `else` branch's
        else:
            out[i] = -x[i]
    return out


IFEXP_ONE = [ifexp_in_a_branch, ifexp_row_or_zero, ifexp_scalar, ifexp_int_out, ifexp_numbers, ifexp_nested, ifexp_enumerate_kw]


@pytest.mark.parametrize("n", [0, 1, 6])
@pytest.mark.parametrize("fn", IFEXP_ONE)
def test_ifexp_number_and_tensor_vectorizes(fn, n):
    x = torch.randn(n, 3)
    if n == 0:
        assert_equivalent(fn, x)
    else:
        vectorizes(fn, x)


@pytest.mark.parametrize("n", [0, 1, 6])
def test_ifexp_two_arguments(n):
    x, m, d = torch.randn(n, 3), torch.rand(n) > 0.5, torch.randn(n)
    if n == 0:
        assert_equivalent(ifexp_number_first, x, m)
        assert_equivalent(ifexp_under_if, x, d)
    else:
        vectorizes(ifexp_number_first, x, m)
        vectorizes(ifexp_under_if, x, d)


def test_ifexp_dtypes():
    vectorizes(ifexp_half, torch.randn(6, 3, dtype=torch.float16))
    vectorizes(ifexp_half, torch.randn(6, 3, dtype=torch.float64))
    vectorizes(ifexp_row_or_zero, torch.randint(-3, 3, (6, 3)))
    assert_equivalent(ifexp_overflow, torch.randn(6, 3))      # float32 cannot hold 1e300: as the loop does
    assert_equivalent(ifexp_overflow, torch.randn(6, 3, dtype=torch.float64))


def test_ifexp_gradients():
    x = torch.randn(6, 3, requires_grad=True)
    assert_equivalent(ifexp_row_or_zero, x, grad=True)
    assert_equivalent(ifexp_scalar, x, grad=True)


def test_ifexp_explain():
    e = explain(ifexp_row_or_zero, torch.randn(5, 3))
    assert [r.strategy for r in e.loops] == ["where"], str(e)
    assert "different types" not in str(e)


def ifexp_appended(x):
    res = []
    for i in range(x.shape[0]):
        res.append(x[i] if x[i].sum() > 0 else 0)       # a list of numbers and tensors: the loop's
    return res


def ifexp_after_store(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i]
        out[i] = x[i] * 2 if x[i].sum() > 0 else 0
    return out


def ifexp_in_arithmetic(x):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = (x[i] if x[i].sum() > 0 else 0) * 2     # not the whole stored value: strict
    return out


@pytest.mark.parametrize("fn", [ifexp_appended, ifexp_after_store, ifexp_in_arithmetic])
def test_ifexp_other_places_match_the_loop(fn):
    for seed in range(3):
        torch.manual_seed(seed)
        assert_equivalent(fn, torch.randn(6, 3))
