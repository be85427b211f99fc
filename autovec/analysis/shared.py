"""Loop-invariant work that a batched form computes once where the loop computes it every
iteration, and what that means for gradients.

`out[i] = x[i] * torch.sqrt(w)`: the loop takes `sqrt(w)` n times, and each copy's backward
multiplies its own incoming gradient by d sqrt / dw before autograd adds the n results. The
batched form takes `sqrt(w)` once and broadcasts it: autograd first adds the n incoming
gradients, then multiplies once. With a finite derivative that is the same sum (up to
rounding); with an infinite one (sqrt at 0) it is not: the loop's `inf * g_1 + inf * g_2`
is NaN where the g's differ in sign, or hold a 0, while the batch's `inf * (g_1 + g_2)` is
±inf. So the runtime needs to know, per loop, which tensors the body puts through
loop-invariant operations, and whether those operations' derivatives stay finite on finite
values (`shared_work`).
"""
from __future__ import annotations

import ast

from .. import fastast
from .hoist import _dotted

# operations on loop-invariant values whose derivative is finite wherever their inputs are
# (shape and linear operations, bounded activations); any other call (sqrt, log, exp, pow,
# a division by a tensor, a user's helper) may have an infinite derivative on finite values.
# Dtype casts are not among them: the batch would add the iterations' gradients in the cast's
# dtype (float16 overflows at 65504) where the loop adds them in the tensor's own
_SAFE_CALLS = frozenset({
    # shape, selection and linear operations
    "t", "T", "mT", "view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "flatten",
    "contiguous", "clone", "expand", "expand_as", "narrow", "select", "movedim", "view_as",
    "reshape_as", "detach", "sum", "mean", "neg",
    "negative", "add", "sub", "subtract", "cat", "stack", "diag", "diagonal", "tril", "triu", "flip",
    "roll", "repeat", "tile", "cumsum", "trace", "outer", "matmul", "mm", "mv", "dot", "einsum",
    "bmm", "mul", "multiply", "chunk", "split", "unbind", "squeeze_", "index_select", "gather",
    # bounded derivatives
    "sigmoid", "tanh", "relu", "softplus", "abs", "clamp", "clip", "clamp_min", "clamp_max", "sin",
    "cos", "atan", "erf", "gelu", "silu", "leaky_relu", "elu", "hardtanh", "softmax", "log_softmax",
    "normalize", "maximum", "minimum", "logsigmoid", "softsign", "hardsigmoid", "hardswish", "mish",
    "relu6", "celu", "selu", "sign",
})
# what carries no gradient at all: sizes, types, comparisons, integer results, Python numbers
_NO_GRAD = frozenset({
    "len", "shape", "size", "dim", "ndim", "ndimension", "numel", "dtype", "device", "isinstance",
    "int", "bool", "item", "tolist", "argmax", "argmin", "argsort", "nonzero", "eq", "ne", "lt", "le",
    "gt", "ge", "isnan", "isinf", "isfinite", "is_floating_point", "is_complex", "requires_grad", "any",
    "all", "range", "type", "is_cuda", "is_cpu", "stride", "element_size", "long", "bucketize",
    "searchsorted", "count_nonzero", "logical_and", "logical_or", "logical_not", "equal", "allclose",
})
# torch functions that run the code they are given (a module, a function) on their arguments
_RUNS_CODE = frozenset({"functional_call", "vmap", "grad", "grad_and_value", "jacrev", "jacfwd", "hessian",
                        "vjp", "jvp", "checkpoint", "call_for_per_sample_grads", "apply"})
_MODULES = frozenset({"torch", "F", "nn", "functional", "special", "linalg"})
_SAFE_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.MatMult)


def _chain(node):
    """`a.b.c` as "a.b.c" (a leaf value read from outside the loop), else None."""
    parts = _dotted(node)
    return None if parts is None else ".".join(parts)


class _Inv:
    """An expression built from loop-invariant values alone: the outside values it reads
    (`leaves`), whether every operation on them has a finite derivative (`safe`), and whether
    it is a bare value with no operation at all (`bare`)."""

    __slots__ = ("leaves", "safe", "bare")

    def __init__(self, leaves=frozenset(), safe=True, bare=True):
        self.leaves, self.safe, self.bare = frozenset(leaves), safe, bare


def _join(parts, safe, bare=False):
    leaves, ok = set(), safe
    for p in parts:
        leaves |= p.leaves
        ok = ok and p.safe
    return _Inv(leaves, ok, bare)


class _Walk:
    def __init__(self, free):
        self.free = set(free)
        self.env: dict = {}          # body names holding invariant values -> _Inv
        self.found: dict = {}        # leaf -> safe (False once any shared work on it is unsafe)

    def note(self, inv, unknown=False):
        """`inv` meets per-iteration values here: a batched form shares it across the batch.
        `unknown`: it is passed to a callable whose body is not looked into (a helper, a
        module): whatever that does with it is shared too, so it counts as unsafe."""
        if inv is None:
            return
        if inv.bare and not unknown:
            for leaf in inv.leaves:
                if "." in leaf:
                    # `p.scale`: a read whose lookup may run code (a property): None, looked up at
                    # run time, where anything but a stored value keeps the loop under grad
                    _merge(self.found, leaf, None)
            return
        for leaf in inv.leaves:
            _merge(self.found, leaf, inv.safe and not unknown)

    def expr(self, node):  # noqa: C901 (one case per kind of expression)
        """_Inv for an invariant expression, None for one that changes per iteration."""
        if isinstance(node, ast.Constant):
            return _Inv()
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            return _Inv({node.id}) if node.id in self.free else None
        if isinstance(node, ast.Attribute) and node.attr in _NO_GRAD:
            return _Inv() if self.expr(node.value) is not None else None     # x.shape: no gradient
        if isinstance(node, ast.Compare):
            parts = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
            return None if any(p is None for p in parts) else _Inv()       # no gradient through it
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if chain is not None and chain.split(".")[0] in self.free and chain.split(".")[0] not in self.env:
                return _Inv({chain})
            inner = self.expr(node.value)
            if inner is None:
                return None
            return _join([inner], node.attr in _SAFE_CALLS)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BinOp):
            a, b = self.expr(node.left), self.expr(node.right)
            if a is None or b is None:
                self.note(a)
                self.note(b)
                return None
            safe = isinstance(node.op, _SAFE_BINOPS) or (
                isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
                and isinstance(node.right.value, (int, float)) and node.right.value != 0)
            return _join([a, b], safe)
        if isinstance(node, ast.UnaryOp):
            a = self.expr(node.operand)
            return None if a is None else _join([a], isinstance(node.op, (ast.USub, ast.UAdd)))
        if isinstance(node, ast.Subscript):
            a, s = self.expr(node.value), self.expr(node.slice)
            if a is None or s is None:
                self.note(a)
                return None
            return _join([a, s], True)
        if isinstance(node, (ast.Tuple, ast.List, ast.Dict)):
            items = node.elts if not isinstance(node, ast.Dict) else \
                list(node.values) + [k for k in node.keys if k is not None]
            parts = [self.expr(e) for e in items]
            if any(p is None for p in parts):
                for p in parts:
                    self.note(p)
                return None
            return _join(parts, True, bare=all(p.bare for p in parts))
        if isinstance(node, ast.Slice):
            parts = [self.expr(e) for e in (node.lower, node.upper, node.step) if e is not None]
            return None if any(p is None for p in parts) else _join(parts, True, bare=True)
        # anything else (conditionals, comprehensions, ..): its invariant parts meet the
        # per-iteration ones inside it, so each is shared (a comprehension's own names are new
        # values per element, never outside ones)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.note(self.expr(child))
            elif isinstance(child, ast.comprehension):
                for t in fastast.walk(child.target):
                    if isinstance(t, ast.Name):
                        self.env.pop(t.id, None)
                        self.free.discard(t.id)
                for e in [child.iter] + child.ifs:
                    self.note(self.expr(e))
        return None

    def call(self, node):
        func = node.func
        args = [self.expr(a) for a in node.args] + [self.expr(k.value) for k in node.keywords]
        last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if last in _NO_GRAD:
            # len(x), x.size(0), x.argmax(): a value no gradient flows through
            owner = self.expr(func.value) if isinstance(func, ast.Attribute) else _Inv()
            return _Inv() if owner is not None and all(a is not None for a in args) else None
        name = _chain(func)
        if name is not None and name.split(".")[0] in self.free and name.split(".")[0] not in self.env:
            # torch.sqrt(..), F.softplus(..), helper(..), self.fn(..): the function itself is no value
            head, _, last = name.rpartition(".")
            target = None
            safe = last in _SAFE_CALLS and head.split(".")[0] in _MODULES    # (a bare helper: unknown)
            if head and head.split(".")[0] not in _MODULES:
                target = _Inv({head})          # w.exp(): a method of an outside value
                safe = last in _SAFE_CALLS
        else:
            target = self.expr(func.value) if isinstance(func, ast.Attribute) else self.expr(func)
            safe = isinstance(func, ast.Attribute) and func.attr in _SAFE_CALLS
            if target is None:
                for a in args:
                    self.note(a)
                return None
        parts = args + ([target] if target is not None else [])
        if any(p is None for p in parts):
            # per-iteration arguments: the call runs on the batch, and the outside values passed
            # to it are shared; to a callable that is not a torch operation, whatever it does with
            # them is (helper(x[i], w) may take sqrt(w) inside)
            known = (safe or name is not None and name.rpartition(".")[0].split(".")[0] in _MODULES
                     or isinstance(func, ast.Attribute) and name is None) and last not in _RUNS_CODE
            for p in args:
                self.note(p, unknown=not known)
            if target is not None:
                self.note(target)
            return None
        return _join(parts, safe)

    def inner_loop(self, node: ast.For):
        """An inner loop of the body (analysis.loops._inner_loop): the batch runs it once for the
        whole batch, so what its steps compute from loop-invariant values alone (`W[k].sqrt()`
        over `range(K)`, `w.sqrt()` of `for w in W`) is shared work as any other. Its target
        holds elements of the iterable: invariant where the iterable is. The body is walked
        again until the names' states at the start of a step repeat (a later step may read what
        an earlier one bound); after it each name it binds holds its last step's value or, after
        none, its value before: taken as invariant where either may be, so that its uses are
        noted (the cautious side)."""
        it = self.expr(node.iter)
        elem = None if it is None else _join([it], it.safe)
        targets = {n.id for n in fastast.walk(node.target) if isinstance(n, ast.Name)}
        bound = targets | {n.id for st in node.body for n in fastast.walk(st)
                           if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        before = {name: self._state(name) for name in bound}
        seen = []
        for _ in range(8):
            state = tuple((name, self._key(self._state(name))) for name in sorted(bound))
            if state in seen:
                break
            seen.append(state)
            for t in targets:
                self._set(t, elem)
            for st in node.body:
                self.stmt(st)
        else:
            for n in fastast.walk(node):       # (no fixed point: every outside value read counts as unsafe)
                if isinstance(n, ast.Name) and n.id in self.free:
                    _merge(self.found, n.id, False)
        for name in bound:
            pre, post = before[name], self._state(name)
            if pre is None or post is None:
                self._set(name, pre or post)
            else:
                self._set(name, _join([pre, post], True, bare=pre.bare and post.bare))

    def _state(self, name):
        if name in self.env:
            return self.env[name]
        return _Inv({name}) if name in self.free else None

    def _set(self, name, inv):
        if inv is None:
            self.env.pop(name, None)
            self.free.discard(name)
        else:
            self.env[name] = inv

    @staticmethod
    def _key(inv):
        return None if inv is None else (inv.leaves, inv.safe, inv.bare)

    def stmt(self, node):
        if isinstance(node, ast.For) and not node.orelse:
            self.inner_loop(node)
            return
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            inv = self.expr(node.value)
            for t in node.targets:
                if inv is None:
                    self.env.pop(t.id, None)
                    self.free.discard(t.id)       # rebound per iteration
                else:
                    self.env[t.id] = inv
            if inv is not None and not inv.bare and any(t.id.startswith("_av_out") for t in node.targets):
                self.note(inv)                    # an invariant value stored every iteration
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.note(self.expr(child))
            elif isinstance(child, ast.stmt):
                self.stmt(child)
        for n in fastast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                self.env.pop(n.id, None)
                self.free.discard(n.id)


def shared_work(plan) -> tuple:
    """((outside value as source, safe), ..): the values read from outside a loop that its body
    puts through loop-invariant operations (which a batched form computes once for the whole
    batch); `safe` True when all of those operations have finite derivatives on finite values,
    False when one may not, None for a plain attribute read (`p.scale`) that the guard only looks
    up (a property runs code: the loop runs)."""
    found = _walk_plan(plan, set(plan.free))
    if plan.space.kind == "nest":
        # a loop nest's batch also shares, across one level, what does not change with that
        # level (`torch.sqrt(w[j])` across i): each level in turn, the other indices and the
        # indexed tensors held fixed
        indices = [ix for ix, _ in plan.space.levels]
        roots = {mp.base.split(".")[0].split("[")[0] for mp in plan.mapped}
        for ix in indices:
            others = set(indices) - {ix}
            level = _walk_plan(plan, set(plan.free) | roots | others)
            for leaf, safe in level.items():
                if leaf.split(".")[0] not in others:
                    _merge(found, leaf, safe)
    return tuple(sorted(found.items(), key=lambda kv: kv[0]))


def _merge(found, leaf, safe):
    """One more verdict on `leaf`: unsafe (False) wins over safe (True), which wins over a plain
    read (None)."""
    have = found.get(leaf, None)
    if safe is False or have is False:
        found[leaf] = False
    elif safe or have:
        found[leaf] = True
    else:
        found[leaf] = None


def _walk_plan(plan, free) -> dict:
    w = _Walk(free)
    texts = list(plan.body) + [o.value for o in plan.outputs if o.value and not o.marker]
    for text in texts:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for s in tree.body:
            w.stmt(s)
    return w.found


_fn_cache: dict = {}


def function_unsafe(fn) -> bool:
    """Whether a helper or a module's forward (`fn`, a Python function) puts values from outside
    its arguments (`self.w`, a global, a closure) through operations whose derivative can be
    infinite, or passes them to callables it does not look into: the batch runs it once where
    the loop runs it every iteration (see the module docstring). True where its source cannot
    be read. Per code object."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return True
    hit = _fn_cache.get(code)
    if hit is None:
        hit = _fn_cache[code] = _function_unsafe(fn)
    return hit


def _function_unsafe(fn) -> bool:
    from ..purity import _capture_cached
    try:
        tree = _capture_cached(fn).tree
    except Exception:
        return True
    a = tree.args
    params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + [x.arg for x in (a.vararg, a.kwarg) if x]
    variant = set(params[1:] if params and params[0] == "self" else params)
    loaded = {n.id for n in fastast.walk(tree) if isinstance(n, ast.Name)}
    w = _Walk(loaded - variant)
    for s in tree.body:
        w.stmt(s)
    return any(v is False for v in w.found.values())


_calls_cache: dict = {}


def self_calls(fn) -> frozenset:
    """The names `fn` calls as `self.<name>(..)` (methods, or submodules), from its source; per
    code object (empty where the source cannot be read)."""
    code = getattr(fn, "__code__", None)
    hit = _calls_cache.get(code)
    if hit is None:
        from ..purity import _capture_cached
        try:
            tree = _capture_cached(fn).tree
        except Exception:
            tree = None
        hit = _calls_cache[code] = frozenset(
            n.func.attr for n in fastast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self") if tree is not None else frozenset()
    return hit
