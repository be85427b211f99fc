"""Frozen values that analysis hands to lowering: one plan (or refusal) per loop."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Refusal:
    """Why a loop keeps the Python path; `reason` names the variable and line."""

    reason: str
    lineno: int


@dataclass(frozen=True)
class Mapped:
    """A tensor read as `base[..., i + offset, ...]`, the loop index sitting at `dim`."""

    base: str        # source of the indexed expression, e.g. "x" or "self.weight"
    dim: int
    offset: int
    param: str       # name of the per-iteration slice inside the body function
    levels: tuple = ()   # loop nests: ((level, position in the subscript, offset), ...)
    wraps: bool = True   # an index, which Python counts from the end where negative (not a unit slice's)
    # where every read of it sits under conditions of the index and loop-invariant integers
    # (`values[t + 1] if t + 1 < T else last`): a Python expression of those names, true on the
    # iterations that may read it (analysis.loops._reach); None: any iteration may
    reach: str | None = None
    # a read of a tensor the loop stores into, at elements only later iterations write
    # (analysis.loops._ahead_read): the guard lets it share the store's memory, and refuses it
    # under autograd (FunctionRuntime.ahead)
    ahead: bool = False


def indexed(plan) -> list:
    """The plan's reads the guard takes as indexed tensors, in order (the generated code's
    `mapped`): every read but the element of a walked sequence (`x[i - 1]` beside
    `for i, r in enumerate(x)` is one, at its offset)."""
    targets = {t for t, _ in plan.space.elements}
    return [mp for mp in plan.mapped if mp.param not in targets]


@dataclass(frozen=True)
class IterSpace:
    """What the loop runs over.

    kind "range": `for index in range(*range_args)`.
    kind "elements": `for target in source` (and zip / enumerate forms): each
    `(target, source)` in `elements` binds `target = source[i]`; `index` is the
    enumerate counter, if any, counting from `enum_start`.
    kind "nest": perfectly nested `for` loops over ranges; `levels` holds
    `(index, range_args)` from the outermost loop in.
    """

    kind: str
    range_args: tuple[str, ...] = ()
    index: str | None = None
    enum_start: str = "0"
    elements: tuple[tuple[str, str], ...] = ()
    levels: tuple = ()
    reverse: bool = False    # `reversed(range(...))`
    # `for a, b in x` (or `in x.tolist()`): the element's name the analysis gives the row, and
    # the body's first statement `a, b = row.unbind(0)` (then `a = a.item()`, .. for .tolist())
    unpack: tuple = ()       # ((row name, (a, b, ..), Python numbers?), ...)
    # nest: (level, sequence name) of each level written `for p in pos:` (analysis.nest_levels),
    # counted over `runtime.walked_range(pos)` where the others count over their `range(..)`
    walked: tuple = ()


@dataclass(frozen=True)
class Output:
    """One value the loop produces.

    kind "store":  `target[..i..] = value` (op "" or an augmented operator such as "+").
    kind "append": `target.append(value)`; `consumer` is "stack", "cat", "tensor" when the
                   list is only consumed once, right after the loop, by that call.
    kind "accum":  `target = target <op> value` / `target <op>= value` (op "+" or "-").
    kind "best":   `target = max(target, value)`, `if value > target: target = value` (op is the
                   comparison that replaces the best), with payloads taken along.
    kind "last":   `target = value` read after the loop: the value of the last (true) iteration.
    kind "scatter": `target[idx..] op= value` with per-iteration indices (payloads hold them);
                   "+"/"-" accumulate over repeated indices, "" keeps the last write.
    kind "cat":    `target = torch.cat([target, value], dim=dim)`.
    kind "scan":   an accumulator read later in the same iteration: a prefix sum / product
                   (`exclusive`: read only before its update, by stores: the running value
                   before each step, `out[i] = s` then `s = s + x[i]`).
    kind "linrec": `target = a * target + value` with a loop-invariant factor (payload "decay").
    """

    kind: str
    target: str
    value: str                # source of the per-iteration value expression
    lineno: int
    op: str = ""
    inplace: bool = False     # accum written as an augmented assignment
    signed: bool = False      # accum: some sides of a branch subtract (their terms negated, analysis._walk)
    dim: int = 0              # store: position of the loop index in the target subscript
    offset: int = 0
    index_src: str = ""       # store: the subscript with the loop index replaced by `{}`
    consumer: str = ""
    consumer_src: str = ""    # source of the consuming call, when `consumer` is set
    flip: bool = False        # append with a consumer: `target.reverse()` is the statement right after
    consumer_guard: str = ""  # append with a consumer: `C(target) if target else D` around it, its source
                              # the loop, so the consumer takes the batch flipped along its rows
                              # (analysis._list_consumer, runtime consume's `flip`)
    marker: str = ""          # body variable that holds the per-iteration value
    cond: bool = False        # the output happens only under a data-dependent condition
    pytype: str = ""          # "item": the loop stores `value.item()` (a Python number)
    counted: str = ""         # accum: `if c: k += K` read as `k += K * int(bool(c))` with a K whose
                              # type may differ from the start's (analysis._counted): K's source;
                              # the running value's type changes at the first increment
                              # (runtime.prefix checks K and the steps)
    handed: bool = False      # counted: the loop hands the count on (`ids.append(k)`): a tensor K, which
                              # `k += K` updates in place, keeps the loop (runtime._prefix)
    joined: int = 0           # scatter: k > 1 on the first of k scatters into one tensor in each iteration
                              # (analysis._joinable_scatters), -1 on the others (runtime.scatter_join);
                              # append: k > 1 on the first of k unconditional appends into one list in
                              # each iteration (`out.append(a); out.append(b)`), -1 on the others
    record: tuple = ()        # append of a tuple / list / dict literal (`out.append((i, v.item()))`):
                              # (the literal's source with its per-iteration parts as `_av_c0`..,
                              # this part's position, how many parts); the parts are appends of
                              # their own, rebuilt into the literal per element (runtime.records)
    payloads: tuple = ()      # best: (name, marker, source) of values taken with the best one;
                              # accum of a chain of terms (`acc = acc + t1 - t2`, analysis._terms_output):
                              # ("", marker, source, pytype, sign relative to t1) of each term after
                              # the first (the value), combined by runtime.sum_terms
    nest_rows: tuple = ()     # store in a loop nest: (level, offset) per leading dimension
    bare: bool = False        # scan: every read of it stores the value as it is (`out[i] = s`)
    exclusive: str = ""       # scan: read only before its update (the values before each step), by
                              # stores ("stored") or also by appends ("appended"): analysis._value_reads
    exact: bool = False       # store: its value is read back in the iteration (analysis._forwarded): the
                              # batch must have the output's dtype and the row's shape (runtime.exact)
    chained: bool = False     # scatter written `t[a][b] op= v` (analysis.loops._chained_scatter): read as
                              # `t[a, b]`, where `t[a]` is a view, a 0-d integer `a` per iteration into a
                              # tensor `t` (runtime._scatter_prep checks it)
    method: str = ""          # store: the in-place method the loop calls on the row (`x[i].clamp_(min=0)`
                              # read as `x[i] = x[i].clamp(min=0)`: analysis._InPlaceUpdates), whose
                              # checks the store's differ by (runtime fit_store)
    fill: str = ""            # fresh output: "empty", "0" or "1" when the allocation can be made
                              # again from its metadata (torch.empty/zeros/ones[_like] with no
                              # keyword beyond dtype, device, requires_grad, memory_format);
                              # scatter: "0" where the target is a torch.zeros[_like] made right
                              # before the loop (its elements start +0.0)
    none_start: bool = False  # best: `if best is None or v < best:` (the first iteration takes its value
                              # when the loop starts from None: runtime best's `none_start`)
    row_part: bool = False    # scatter: a plain write into the loop's own row of a tensor the loop also
                              # stores that row of (`dist[i] = c; dist[i, y[i]] = v`, analysis._row_part):
                              # the guard lets the two writes meet, committed in the loop's order

    @property
    def converts_each(self) -> bool:
        """A store, or a plain scatter: setitem (scatter_prep) converts each value it writes, so
        branches may give values of several kinds (a lenient `where`, runtime._lossless)."""
        return self.kind == "store" or self.kind == "scatter" and not self.op


@dataclass(frozen=True)
class LoopPlan:
    """Everything lowering needs to rewrite one loop; no AST nodes, only source text."""

    loop_id: int
    lineno: int
    end_lineno: int
    source: str                      # the loop's original text
    form: str                        # "for" or "comprehension"
    space: IterSpace
    body: tuple[str, ...]            # body statements (source), outputs excluded
    outputs: tuple[Output, ...]
    mapped: tuple[Mapped, ...]
    index_as_value: bool             # the loop index is used as a number in the body
    free: tuple[str, ...]            # loop-invariant names the body reads
    callables: tuple[str, ...]       # call targets rooted at loop-invariant names
    live_after: tuple[str, ...] = () # iteration variables read after the loop
    branches: bool = False           # the body branches on per-iteration data
    # helpers the body calls whose returned value a condition on per-iteration data picks
    # (analysis.helpers): the batched body inlines them with `where` (batching._Inliner)
    branch_helpers: tuple[str, ...] = ()
    value_indices: tuple = ()        # loop nests: indices used as numbers in the body
    index_float: bool = False        # the index, as a number, meets Python floats (`0.1 * i`, `i / n`)
    guarded: bool = False            # the body is one `if` (no `else`) around plain statements (analysis._guarded)
    two_way: bool = False            # the body is one `if`/`else` of plain statements, both guarded alike (analysis._two_way)
    items: bool = False              # the body converts per-iteration tensors with `.item()`
    scans: tuple = ()                # (name, marker, op, position): running values read in the body
    fission_loop: object = None      # fission: the loop that stays, reading hoisted values (an AST)
    invariants: tuple = ()           # fission: statements computed once before the loop (ASTs)
    fission_stores: tuple = ()       # fission: names the loop that stays stores into (`out[t] = h`)
    notes: tuple[str, ...] = field(default=())
    # `if cond: ...; break` at the top of the body: `exit_cond` is the body variable that holds
    # the condition (the marker assignment sits at its place in `body`); `exit_tail` holds the
    # statements the stopping iteration runs as written (the ones before the `if`, then the
    # `if`'s own, without the `break`), as ASTs with the user's line numbers
    exit_cond: str = ""
    exit_tail: tuple = ()
    exit_scans: tuple = ()           # (name, marker, op, position): sums the condition reads before their update
    # (running value, output, dimension, read offset, first read's text): a running value that
    # stands for the row the step before stored (`out[t] = .. out[t - 1]`, analysis.hoist
    # stored_recurrences): it starts as that row of the output and must be what the store keeps
    carried: tuple = ()
    # the iteration's own row copied at its first mention, its parts written in the copy
    # (analysis.loops._row_local): under autograd the loop's in-place writes into the row may
    # change what its backward saved, the copy's do not (FunctionRuntime.guard keeps the loop)
    row_copies: bool = False


@dataclass(frozen=True)
class StepPlan:
    """A loop that is not vectorized, as `returns = step(*args)` per iteration followed by the
    driver's statements (appends, stores): what the compile fallback hands to torch.compile."""

    loop_id: int
    lineno: int
    params: tuple            # the step function's parameters
    args: tuple              # what the driver passes for them (expressions, as text)
    body: tuple              # the step's statements (ast nodes with the user's line numbers)
    returns: tuple           # names the step returns, rebound by the driver
    driver: tuple            # statements the driver runs after each step (text)
    calls: tuple             # callables (as text) checked for side effects before each loop
    ops: int                 # operations in one step (cost model)
    end_lineno: int = 0      # the loop's last line
    invariants: int = 0      # the last parameters are loop invariants (the others change every step)


@dataclass(frozen=True)
class LoopInfo:
    """Analysis result for one loop: a plan or a refusal, with its location."""

    lineno: int
    source: str
    plan: LoopPlan | None
    refusal: Refusal | None
    col: int = 0
    kind: str = "for"      # "for", "while", "comprehension", "generator"
    part_of: int | None = None   # line of the loop nest this inner loop is rewritten with
    step: StepPlan | None = None # the compile fallback's form of a loop that is not vectorized


def einsum_letters(spec) -> str:
    """An einsum operand's subscript for a slice read at loop-nest levels (`A[i, k]`, spec
    ((level, position, offset), ..)): one letter per level, in the tensor's dimension order;
    "" where some dimension is read by no level."""
    at = {p: "abcdefghijklmnopqrstuvwxyz"[lv] for lv, p, _ in spec}
    return "".join(at[q] for q in range(len(at))) if set(at) == set(range(len(at))) else ""
