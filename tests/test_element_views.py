"""In-place updates of a loop's element (`for row in x: row -= row.mean()`, `row.mul_(2).clamp_(
-1, 1)`), planned as the same updates of `x[k]` over `range(len(x))` (analysis.hoist
element_views); the loop as written is the fallback. Values, the argument after the call,
errors and the path against the loop."""
import pytest
import torch

from autovec import autovec, explain


@pytest.fixture(autouse=True)
def _always_vectorize(monkeypatch):
    monkeypatch.setenv("AUTOVEC_MIN_TRIP", "1")


def center(x):
    for row in x:
        row -= row.mean()
    return x


def scale_clip(x):
    for row in x:
        row.mul_(2).clamp_(-1, 1)
    return x


def normalize(x, eps):
    for r in x:
        r -= r.mean()
        r /= r.norm() + eps
    return None


def on_list(ps):
    for p in ps:
        p.mul_(0.5)
    return ps


def standardize_counted(x):
    # (enumerate from 0: the row's own index, read as a number; probeI)
    for i, row in enumerate(x):
        row -= row.mean()
        row /= row.std() + 1e-5 * i
    return x, i


def enumerate_rebinds_index(x):
    for i, row in enumerate(x):
        row -= i
        i = i * 2            # (the index rebound: the loop as written)
    return x, i


def read_after(x):
    for row in x:
        row -= 1
    return row


def rebinds(x):
    for row in x:
        row -= 1
        row = row * 2          # (a new tensor: not the row any more)
    return x


def _run(fn, make):
    torch.manual_seed(0)
    a = make()
    torch.manual_seed(0)
    b = make()          # (the same values and layout: an expanded tensor stays expanded)
    try:
        want = fn(a, *EXTRA.get(fn, ()))
    except Exception as e:   # noqa: BLE001
        with pytest.raises(type(e)):
            autovec(fn)(b, *EXTRA.get(fn, ()))
        return None
    got = autovec(fn)(b, *EXTRA.get(fn, ()))
    if isinstance(a, list):
        assert all(torch.equal(p, q) for p, q in zip(a, b))
    else:
        torch.testing.assert_close(b, a, rtol=0, atol=0)      # (the argument, changed in place alike)
    assert type(got) is type(want)
    return b


EXTRA = {normalize: (1e-6,)}


@pytest.mark.parametrize("fn", [center, scale_clip, normalize, standardize_counted])
@pytest.mark.parametrize("make", [lambda: torch.randn(6, 4), lambda: torch.randn(4, 6).t(),
                                  lambda: torch.randn(5, 3, dtype=torch.float64), lambda: torch.randn(1, 4)])
def test_rows_updated_through_the_element(fn, make):
    for _ in range(3):
        _run(fn, make)
    assert explain(fn, make(), *EXTRA.get(fn, ())).path == "vectorized"


@pytest.mark.parametrize("fn, make", [
    (on_list, lambda: [torch.randn(3), torch.randn(2, 2)]),           # (a list of rows of other shapes)
    (center, lambda: torch.randn(4).expand(3, 4)),                     # (rows that share memory: the loop raises)
    (center, lambda: torch.randn(())),                                 # (a 0-d tensor: the loop raises)
    (center, lambda: torch.randn(5, 3, requires_grad=True)),           # (a leaf that requires grad: the loop raises)
    (read_after, lambda: torch.randn(5, 3)),
    (rebinds, lambda: torch.randn(5, 3)),
    (enumerate_rebinds_index, lambda: torch.randn(5, 3)),
    (standardize_counted, lambda: torch.randn(0, 3)),                  # (no row: `i` unbound, as in the loop)
    (standardize_counted, lambda: [torch.randn(3), torch.randn(4)]),
])
def test_the_loop_as_written_decides_elsewhere(fn, make):
    _run(fn, make)


def test_a_generator_runs_as_written():
    rows = [torch.randn(3), torch.randn(3)]
    got = autovec(center)(iter(rows))
    assert torch.allclose(rows[0].mean(), torch.tensor(0.0), atol=1e-6)
    assert next(got, None) is None


def nested(x, n):
    for i in range(n):
        for row in x:
            row -= i
    return x


@pytest.mark.parametrize("make", [lambda: torch.randn(4, 3), lambda: [1.0, 2.0, 3.0]])
def test_an_element_loop_inside_a_vectorized_nest(make):
    """The inner loop, rewritten as `x[k] -= i`, plans the nest; where the nest's call is refused
    (a list of Python numbers, which `row -= i` leaves as it is), its fallback runs the inner loop
    as written (put back, since only the nest is planned)."""
    torch.manual_seed(0)
    a = make()
    torch.manual_seed(0)
    b = make()
    want, got = nested(a, 3), autovec(nested)(b, 3)
    if isinstance(want, list):
        assert got == want == [1.0, 2.0, 3.0]
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert explain(nested, make(), 3).path == "vectorized"


def printed(x, y):
    out = torch.empty_like(y)
    for i in range(y.shape[0]):
        out[i] = y[i] * 2      # (rewritten: the function's code is generated)
    for row in x:
        row -= 1
        print(row)            # (a side effect: this loop is not rewritten)
    return x, out


def test_a_loop_that_is_not_rewritten_goes_back_as_written(capsys):
    """Not vectorized, the element loop runs as the user wrote it, beside a loop that is
    (`row -= 1` on a list of numbers rebinds `row` and leaves the list as it is; `x[k] -= 1`
    would change it)."""
    y = torch.randn(5)
    got, out = autovec(printed)([1.0, 2.0], y)
    assert got == [1.0, 2.0]
    torch.testing.assert_close(out, y * 2)
    assert capsys.readouterr().out == "0.0\n1.0\n"
    assert explain(printed, [1.0, 2.0], y).path == "vectorized"


def scale_nonleaf(x):
    y = x * 1
    for row in y:
        row.mul_(2)
    return y


def add_operand(x, w):
    for row in x:
        row.add_(w)
    return x


@pytest.mark.parametrize("fn, args", [
    (scale_nonleaf, lambda: (torch.randn(4, 3, requires_grad=True),)),          # (a row of a tensor that requires grad)
    (add_operand, lambda: (torch.randn(4, 3), torch.randn(3, requires_grad=True))),   # (an operand that does)
])
def test_in_place_updates_of_rows_under_autograd_raise_as_the_loop(fn, args):
    # iterating a tensor gives unbind's views, which in-place methods raise on under autograd;
    # `x[k].mul_(2)` would not: the loop runs (and raises), found by probing the zip form
    with pytest.raises(RuntimeError) as want:
        fn(*args())
    with pytest.raises(RuntimeError) as got:
        autovec(fn)(*args())
    assert str(got.value) == str(want.value)
    with torch.no_grad():           # (without autograd the rows are plain views: vectorized)
        torch.manual_seed(0)
        a = args()
        torch.manual_seed(0)
        b = args()
        fast = autovec(fn)
        torch.testing.assert_close(fast(*b), fn(*a))
        assert explain(fast, *args()).path == "vectorized"


def normalize_channels(tensor, mean, std):
    for t, m, s in zip(tensor, mean, std):
        t.sub_(m).div_(s)
    return tensor


def shift_both(a, b):
    for x, y in zip(a, b):
        x.mul_(2)
        y.add_(x)
    return a, b


@pytest.mark.parametrize("args", [
    lambda: (torch.randn(3, 4, 4), torch.randn(3), torch.rand(3) + 0.5),
    lambda: (torch.randn(3, 4, 4), [0.485, 0.456, 0.406], (0.229, 0.224, 0.225)),    # (torchvision's lists)
    lambda: (torch.randn(5, 4), torch.randn(3), torch.rand(4) + 0.5),                # (zip stops at the shortest)
    lambda: (torch.randn(4, 4, 3).permute(2, 0, 1), torch.randn(3), torch.rand(3) + 0.5),
    lambda: (torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4), torch.rand(3, 4) + 0.5),
    lambda: (torch.randint(0, 9, (3, 4)), [1, 2, 3], [1, 1, 1]),                      # (int rows: the loop raises)
    lambda: (torch.randn(3, 4), {0: 1.0, 1: 2.0, 2: 3.0}, [1.0, 1.0, 1.0]),            # (a dict: keys, not values)
    lambda: (torch.randn(3, 4), "abc", [1.0, 1.0, 1.0]),                               # (a string: the loop raises)
])
def test_zipped_elements_updated_in_place(args):
    torch.manual_seed(0)
    a = args()
    torch.manual_seed(0)
    b = args()
    try:
        want = normalize_channels(*a)
    except Exception as e:   # noqa: BLE001
        with pytest.raises(type(e)) as got:
            autovec(normalize_channels)(*b)
        assert str(got.value) == str(e)
        return
    got = autovec(normalize_channels)(*b)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert got is b[0]


def test_zip_of_torchvision_normalize_is_vectorized():
    x = torch.randn(3, 8, 8)
    assert explain(normalize_channels, x, torch.randn(3), torch.rand(3) + 0.5).path == "vectorized"
    # zip stops at the shortest source: the rows of the others past it are never read
    assert explain(normalize_channels, torch.randn(5, 4), torch.randn(3), torch.rand(4) + 0.5).path == "vectorized"


@pytest.mark.parametrize("same", [False, True])
def test_two_zipped_elements_updated(same):
    a = torch.randn(4, 3)
    b = a if same else torch.randn(4, 3)
    a2 = a.clone()
    b2 = a2 if same else b.clone()
    shift_both(a, b)
    autovec(shift_both)(a2, b2)
    torch.testing.assert_close(a2, a, rtol=0, atol=0)
    torch.testing.assert_close(b2, b, rtol=0, atol=0)


def clip_boxes(boxes, w, h):
    for box in boxes:
        box[0::2].clamp_(0, w)
        box[1::2].clamp_(0, h)
    return boxes


def first_coordinate(boxes, w):
    for b in boxes:
        b[0].clamp_(0, w)
        b[-1] -= 1
    return boxes


@pytest.mark.parametrize("fn", [clip_boxes, first_coordinate])
@pytest.mark.parametrize("make", [
    lambda: torch.randn(40, 4) * 20,
    lambda: (torch.randn(4, 40) * 20).t(),                       # (non-contiguous rows)
    lambda: torch.randint(-30, 30, (40, 4)),                     # (int boxes, float bounds: the loop decides)
    lambda: [torch.randn(4) * 20 for _ in range(5)],            # (a list of boxes: the loop as written)
    lambda: torch.randn(40, 1),                                  # (too few coordinates: the loop raises)
])
def test_parts_of_rows_at_fixed_positions_updated_in_place(fn, make):
    args = (10.0, 5.0) if fn is clip_boxes else (10.0,)
    torch.manual_seed(0)
    a = make()
    torch.manual_seed(0)
    b = make()
    try:
        fn(a, *args)
    except Exception as e:   # noqa: BLE001
        with pytest.raises(type(e)) as got:
            autovec(fn)(b, *args)
        assert str(got.value) == str(e)
        return
    autovec(fn)(b, *args)
    if isinstance(a, list):
        assert all(torch.equal(p, q) for p, q in zip(a, b))
    else:
        torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_box_clipping_is_vectorized():
    assert explain(clip_boxes, torch.randn(40, 4), 10.0, 5.0).path == "vectorized"


def test_enumerate_gives_the_index_the_loop_leaves():
    for n in (1, 7):
        a, b = torch.randn(n, 4), None
        b = a.clone()
        want, got = standardize_counted(a), autovec(standardize_counted)(b)
        assert got[1] == want[1] and type(got[1]) is int
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    assert explain(standardize_counted, torch.randn(7, 4)).path == "vectorized"
    assert explain(enumerate_rebinds_index, torch.randn(7, 4)).path == "python"
