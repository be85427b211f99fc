"""An inner loop over a list or tuple of Python numbers (`for e in edges:` inside a loop kept in
Python) has nothing to batch: the generated code tells so without calling the runtime (probeA:
the call cost 0.6 us on every outer iteration, several times the inner loop's own work), and
runs the loop as written. A list of tensors, an empty list, explain and strict mode still go
through runtime.begin."""
import pytest
import torch

from autovec import autovec, explain


def bucketize_count(x, edges):
    res = []
    for v in x.tolist():
        k = 0
        for e in edges:
            if v >= e:
                k += 1
        res.append(k)
    return res


def total_of_rows(rows):
    out = []
    for r in rows:
        s = 0.0
        for v in r:
            s += v
        out.append(s)
    return out


class _Counting:
    def __init__(self, rt):
        self.rt, self.calls = rt, 0
        self.begin = rt.begin

    def __call__(self, loop_id, space):
        self.calls += 1
        return self.begin(loop_id, space)


def _count_begins(f):
    f._autovec_state._prepare_once() if f._autovec_state.compiled is None else None
    rt = f._autovec_state.runtime
    counter = _Counting(rt)
    rt.begin = counter
    return counter


@pytest.mark.parametrize("edges", [[-1.0, 0.0, 1.0], (-1, 0, 1), [True, False], []])
def test_numbers_alone_skip_the_runtime(edges):
    x = torch.randn(50)
    f = autovec(bucketize_count)
    assert f(x, edges) == bucketize_count(x, edges)
    counter = _count_begins(f)
    assert f(x, edges) == bucketize_count(x, edges)
    assert counter.calls == 0


def test_tensors_and_nested_lists_still_ask_the_runtime():
    f = autovec(total_of_rows)
    rows = [torch.randn(4) for _ in range(3)]
    want = total_of_rows(rows)
    assert [float(v) for v in f(rows)] == pytest.approx([float(v) for v in want])
    counter = _count_begins(f)
    f(rows)
    assert counter.calls == 3           # (each row a tensor: begin decides)
    nested = [[[1.0, 2.0]], [[3.0]]]    # (elements that are lists: not numbers)
    with pytest.raises(TypeError):
        total_of_rows(nested)
    with pytest.raises(TypeError):
        f(nested)
    assert counter.calls == 4


def test_numbers_alone_give_the_loops_values_and_types():
    rows = [[1, 2, 3], [4.5, 5.5], (7,), []]
    f = autovec(total_of_rows)
    got, want = f(rows), total_of_rows(rows)
    assert got == want and [type(v) for v in got] == [type(v) for v in want]
    assert explain(f, rows).path == "python"
