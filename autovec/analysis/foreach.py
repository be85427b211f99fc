"""Loops that update lists of tensors in place, one element of each list per iteration (an
optimizer's step, an EMA of weights, weight decay), as one `torch._foreach_*` call per
operation over every list: the "foreach" strategy.

    for p, g, buf in zip(params, grads, bufs):          torch._foreach_mul_(bufs, m)
        buf.mul_(m).add_(g)                     ->      torch._foreach_add_(bufs, grads)
        p.add_(buf, alpha=-lr)                          torch._foreach_add_(params, bufs, alpha=-lr)

What it takes (anything else keeps the strategies of the rest of autovec, or the loop):
- `for x in L`, `for a, b in zip(A, B, ..)` over lists or tuples of tensors (a module's
  `.parameters()` / `.buffers()` too), or `for i in range(len(L))` whose body reads `X[i]` only;
- a body of in-place methods on the elements and on their `.grad`, `.data` or `.detach()`
  (`add_`, `sub_`, `mul_`, `div_`, `addcmul_`, `addcdiv_`, `lerp_`, `copy_`, `zero_`, `pow_`,
  `clamp_min_`, `clamp_max_`, and unary ones such as `sqrt_`), chains of them (`e.mul_(d).add_(p)`),
  `x += v` and friends, and names bound to elementwise expressions of the elements and of
  Python numbers (`mhat = m / (1 - b1 ** step)`), the whole body optionally under
  `with torch.no_grad():`;
- the Python numbers are names, constants, `d[key]` of a dict, and arithmetic on them, which the
  loop would compute the same in every iteration.

Why it is exact. On the CPU a `_foreach_` operation runs the tensor operation it names on each
list element in turn (the same kernel, the same arguments). Running statement by statement over
all the lists, instead of iteration by iteration, reorders only operations of different
iterations, which the run-time guard (runtime_foreach.guard) requires to touch disjoint memory
wherever one of them writes. The guard also requires what makes every operation succeed
(one floating dtype, the CPU, the same shape within an iteration, nothing requiring grad where
grad is on, no inference tensor), so that no `_foreach_` call can raise part-way: where any of
it fails the loop runs as written.
"""
from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field

import torch

from .. import fastast
from ..frontend import Captured
from .hoist import _local_names, _no_grad_with, _resolves

# in-place methods: name -> (positional tensor operands, scalar-or-tensor operand positions, keywords)
_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor",
          "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt",
          "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
_AUG = {ast.Add: "add_", ast.Sub: "sub_", ast.Mult: "mul_", ast.Div: "div_"}
_SCALAR_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.FloorDiv, ast.Mod)
_DERIVED = ("grad", "data")

# On the CPU a `_foreach_` call saves about 0.75 us per tensor against the loop's call of the same
# operation, and the run-time check reads about 0.7 us of each tensor the operations take: a loop
# pays where its operations are at least this many times the lists it takes (an Adam step: 11
# operations on 4 lists; an EMA `e.mul_(d).add_(p, alpha=1 - d)`: 2 on 2, which keeps the loop)
_PAYS = 1.5

REASON = ("each iteration updates its own tensors of the lists in place with elementwise operations: "
          "each operation becomes one torch._foreach_* call over every list (checked per call: "
          "disjoint memory, one dtype, the CPU)")


@dataclass
class ForeachPlan:
    loop: ast.For
    form: str                          # "zip", "one" or "index"
    iters: list                        # zip / one: the iterables (evaluated once); index: the lists' names
    length: str | None = None          # index: the list whose len() is the range
    slots: list = field(default_factory=list)     # per list slot: ("base", k) or (derived kind, base slot)
    written: set = field(default_factory=set)     # slots written in place
    stored: set = field(default_factory=set)      # index form: lists stored into (`L[i] += v`)
    leaves: list = field(default_factory=list)    # scalar leaf names, in first-use order
    mappings: set = field(default_factory=set)    # of those, the ones subscripted (`group["lr"]`)
    scalars: list = field(default_factory=list)   # scalar expressions (ast), in first-use order
    ops: list = field(default_factory=list)       # (statement, [code of each operation])
    nograd: ast.With | None = None
    used: set = field(default_factory=set)        # foreach operations used (names without `_foreach_`)
    loop_id: int = 0
    strategy: str = "foreach"
    reason: str = ""
    header: str = ""
    lines: list = field(default_factory=list)     # per statement of `ops`: its (first, last) line

    def lower(self, namer, runtime):
        return lower(self, namer, runtime)


class _Refused(Exception):
    pass


class _Match:
    def __init__(self, cap: Captured, local: set, plan: ForeachPlan, targets: dict, index: str | None):
        self.cap, self.local, self.plan = cap, local, plan
        self.targets = targets          # loop target name -> base slot (zip / one forms)
        self.index = index              # index form: the index name
        self.lists: dict = {}           # index form: list name -> base slot
        self.derived: dict = {}         # (base slot, kind) -> slot
        self.locals: dict = {}          # body-bound name -> generated name
        self.aliases: dict = {}         # body-bound name -> the slot it is (`buf = bufs[i]`, `g = p.grad`)
        self.assigned: set = set()

    # -- values ------------------------------------------------------------------------------
    def slot(self, kind, base=None) -> int:
        if kind == "base":
            self.plan.slots.append(("base", base))
            return len(self.plan.slots) - 1
        key = (base, kind)
        if key not in self.derived:
            self.plan.slots.append((kind, base))
            self.derived[key] = len(self.plan.slots) - 1
        return self.derived[key]

    def scalar(self, node) -> str:
        """A scalar expression's reference (its position among the plan's scalars)."""
        text = ast.unparse(node)
        for k, s in enumerate(self.plan.scalars):
            if ast.unparse(s) == text:
                return f"@S{k}"
        self.plan.scalars.append(node)
        return f"@S{len(self.plan.scalars) - 1}"

    def is_scalar(self, node) -> bool:
        if isinstance(node, ast.Constant):
            return type(node.value) in (int, float)
        if isinstance(node, ast.Name):
            if node.id in self.targets or node.id in self.locals or node.id == self.index \
                    or node.id in self.assigned or node.id in self.lists:
                return False
            if node.id not in self.plan.leaves:
                self.plan.leaves.append(node.id)
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and isinstance(node.slice, ast.Constant) and type(node.slice.value) in (str, int):
            if self.is_scalar(node.value):
                self.plan.mappings.add(node.value.id)
                return True
            return False
        if isinstance(node, ast.BinOp) and isinstance(node.op, _SCALAR_OPS):
            return self.is_scalar(node.left) and self.is_scalar(node.right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self.is_scalar(node.operand)
        return False

    def element(self, node):
        """The slot of a list element (a target, `X[i]`), or None."""
        if isinstance(node, ast.Name) and node.id in self.targets:
            return self.targets[node.id]
        if self.index and isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and isinstance(node.slice, ast.Name) and node.slice.id == self.index:
            name = node.value.id
            if name in self.targets or name in self.locals or name in self.assigned or name == self.index:
                raise _Refused()
            if name not in self.lists:
                self.lists[name] = self.slot("base", len(self.plan.iters))
                self.plan.iters.append(ast.Name(id=name, ctx=ast.Load()))
            return self.lists[name]
        return None

    def writable(self, node):
        """The code of a tensor the body may write in place, and its slot (None for a local)."""
        s = self.element(node)
        if s is not None:
            return f"@L{s}", s
        if isinstance(node, ast.Name) and node.id in self.locals:
            return self.locals[node.id], self.aliases.get(node.id)
        inner, kind = None, None
        if isinstance(node, ast.Attribute) and node.attr in _DERIVED:
            inner, kind = node.value, node.attr
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach" \
                and not node.args and not node.keywords:
            inner, kind = node.func.value, "detach"
        if inner is not None:
            w = self.writable(inner)
            if w is not None and w[1] is not None and (kind != "grad" or self.plan.slots[w[1]][0] == "base"):
                s = self.slot(kind, w[1])
                return f"@L{s}", s
        return None

    def value(self, node) -> tuple[str, str]:
        """("L", code) for a list of tensors, ("S", reference) for a Python number."""
        if self.is_scalar(node):
            return "S", self.scalar(node)
        w = self.writable(node)
        if w is not None:
            return "L", w[0]
        if isinstance(node, ast.BinOp) and (type(node.op) in _BINARY or isinstance(node.op, ast.Pow)):
            a, b = self.value(node.left), self.value(node.right)
            if isinstance(node.op, ast.Pow):
                if a[0] == "L" and b[0] == "S":
                    return self.op("pow", a[1], b[1])
                raise _Refused()
            name = _BINARY[type(node.op)]
            if a[0] == "L":
                return self.op(name, a[1], b[1])
            if name in ("add", "mul"):      # `s + t`, `s * t`: torch's reflected add and mul are t + s, t * s
                return self.op(name, b[1], a[1])
            raise _Refused()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            a = self.value(node.operand)
            return self.op("neg", a[1])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr in _UNARY and len(node.args) == 1 and not node.keywords \
                    and _resolves(self.cap, f, self.local, (getattr(torch, f.attr, None),)):
                return self.op(f.attr, self.tensor(node.args[0]))        # torch.sqrt(v)
            if f.attr in _UNARY and not node.args and not node.keywords:
                return self.op(f.attr, self.tensor(f.value))             # v.sqrt()
            if f.attr in ("add", "sub", "mul", "div") and len(node.args) == 1:
                a, b = self.tensor(f.value), self.value(node.args[0])
                kw = self.keywords(node, ("alpha",) if f.attr in ("add", "sub") and b[0] == "L" else ())
                return self.op(f.attr, a, b[1], **kw)
        raise _Refused()

    def tensor(self, node) -> str:
        v = self.value(node)
        if v[0] != "L":
            raise _Refused()
        return v[1]

    def keywords(self, call: ast.Call, allowed) -> dict:
        out = {}
        for k in call.keywords:
            if k.arg not in allowed:
                raise _Refused()
            v = self.value(k.value)
            if v[0] != "S":
                raise _Refused()
            out[k.arg] = v[1]
        return out

    def op(self, name, *args, **kw):
        self.plan.used.add(name)
        inner = ", ".join(list(args) + [f"{k}={v}" for k, v in kw.items()])
        return "L", f"@F.{name}({inner})"

    # -- statements --------------------------------------------------------------------------
    def inplace(self, call: ast.Call, out: list):
        """`recv.m_(..)` (recv possibly another in-place call): appends each operation's code;
        returns the receiver's code."""
        f = call.func
        if not isinstance(f, ast.Attribute) or not f.attr.endswith("_") or f.attr.startswith("_"):
            raise _Refused()
        if isinstance(f.value, ast.Call) and isinstance(f.value.func, ast.Attribute) \
                and f.value.func.attr.endswith("_"):
            recv = self.inplace(f.value, out)
        else:
            w = self.writable(f.value)
            if w is None:
                raise _Refused()
            recv, s = w
            if s is not None:
                self.plan.written.add(s)
        m, args = f.attr, [self.value(a) for a in call.args]
        kinds = [a[0] for a in args]
        codes = [a[1] for a in args]
        if m in ("add_", "sub_"):
            if len(args) != 1:
                raise _Refused()
            kw = self.keywords(call, ("alpha",) if kinds[0] == "L" else ())
            out.append(self.op(m, recv, codes[0], **kw)[1])
        elif m in ("mul_", "div_") and len(args) == 1 and not call.keywords:
            out.append(self.op(m, recv, codes[0])[1])
        elif m in ("pow_", "clamp_min_", "clamp_max_") and kinds == ["S"] and not call.keywords:
            out.append(self.op(m, recv, codes[0])[1])
        elif m in ("addcmul_", "addcdiv_") and kinds == ["L", "L"]:
            out.append(self.op(m, recv, codes[0], codes[1], **self.keywords(call, ("value",)))[1])
        elif m == "lerp_" and len(args) + len(call.keywords) == 2 and kinds[:1] == ["L"]:
            if len(args) == 2:
                weight = args[1]
            else:
                k = call.keywords[0]
                if k.arg != "weight":
                    raise _Refused()
                weight = self.value(k.value)
            out.append(self.op(m, recv, codes[0], weight[1])[1])
        elif m == "copy_" and kinds == ["L"] and not call.keywords:
            out.append(self.op(m, recv, codes[0])[1])
        elif m in ("zero_",) + tuple(u + "_" for u in _UNARY) and not args and not call.keywords:
            out.append(self.op(m, recv)[1])
        else:
            raise _Refused()
        return recv

    def statement(self, st):
        out = []
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            self.inplace(st.value, out)
        elif isinstance(st, ast.AugAssign) and type(st.op) in _AUG:
            w = self.writable(st.target)
            if w is None or isinstance(st.target, ast.Attribute) or isinstance(st.target, ast.Call):
                raise _Refused()
            recv, s = w
            if s is not None:
                self.plan.written.add(s)
                if isinstance(st.target, ast.Subscript):
                    self.plan.stored.add(s)
            v = self.value(st.value)
            out.append(self.op(_AUG[type(st.op)], recv, v[1])[1])
        elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            name = st.targets[0].id
            if name in self.targets or name in self.locals or name == self.index \
                    or name in self.lists or name in self.plan.leaves:
                raise _Refused()
            w = self.writable(st.value)
            if w is not None and w[1] is not None:
                # another name for a list's element: its writes are that list's (the memory checks)
                self.locals[name], self.aliases[name] = w
                self.plan.ops.append((st, out))
                return
            if w is not None and isinstance(st.value, ast.Name):
                raise _Refused()     # (a second name for a local)
            v = self.value(st.value)
            if v[0] != "L":
                raise _Refused()
            gen = f"@V{len(self.locals)}"
            self.locals[name] = gen
            out.append(f"{gen} = {v[1]}")
        elif isinstance(st, ast.Pass):
            pass
        else:
            raise _Refused()
        self.plan.ops.append((st, out))


def _assigned_in(body) -> set:
    out = set()
    for st in body:
        for n in fastast.walk(st):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                out.add(n.id)
    return out


def match(cap: Captured, loop: ast.For, local: set, elsewhere: set) -> ForeachPlan | None:
    """The foreach plan of `loop`, or None. `elsewhere`: the names the function uses outside
    this loop (a name the loop binds must not be read after it: the foreach form binds none)."""
    if not isinstance(loop, ast.For) or loop.orelse or getattr(loop, "type_comment", None):
        return None
    body = loop.body
    nograd = None
    if len(body) == 1 and isinstance(body[0], ast.With) and _no_grad_with(cap, body[0], local):
        nograd, body = body[0], body[0].body
    it, tgt = loop.iter, loop.target
    targets, index, iters, form, length = {}, None, [], None, None
    if isinstance(it, ast.Call) and _resolves(cap, it.func, local, (builtins.zip,)):
        if it.keywords or not it.args or any(isinstance(a, ast.Starred) for a in it.args) \
                or not isinstance(tgt, ast.Tuple) or len(tgt.elts) != len(it.args) \
                or not all(isinstance(e, ast.Name) for e in tgt.elts) or len({e.id for e in tgt.elts}) != len(tgt.elts):
            return None
        form, iters = "zip", list(it.args)
        targets = {e.id: k for k, e in enumerate(tgt.elts)}
    elif isinstance(it, ast.Call) and _resolves(cap, it.func, local, (builtins.range,)):
        a = it.args
        if it.keywords or len(a) != 1 or not isinstance(tgt, ast.Name) or not isinstance(a[0], ast.Call) \
                or not _resolves(cap, a[0].func, local, (builtins.len,)) or len(a[0].args) != 1 \
                or a[0].keywords or not isinstance(a[0].args[0], ast.Name):
            return None
        form, index, length = "index", tgt.id, a[0].args[0].id
    elif isinstance(tgt, ast.Name):
        form, iters = "one", [it]
        targets = {tgt.id: 0}
    else:
        return None
    if not all(_iterable(e) for e in iters):
        return None     # (an iterable the loop as written would evaluate again with an effect: _access)
    plan = ForeachPlan(loop, form, iters, length, nograd=nograd, reason=REASON)
    m = _Match(cap, local, plan, targets, index)
    if form != "index":
        for k in range(len(iters)):
            m.slot("base", k)
    m.assigned = _assigned_in(body) - set(targets) - {index}
    binds = [n.id for st in body for n in fastast.walk(st) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)]
    if len(binds) != len(set(binds)):
        return None     # (a name bound twice in the body)
    try:
        for st in body:
            m.statement(st)
    except _Refused:
        return None
    if form == "index":
        if length not in m.lists or any(n in m.lists for n in m.assigned):
            return None
        # (the index only as `X[i]`: any other read would be a number per iteration)
        subs = {id(n.slice) for n in fastast.walk(loop) if isinstance(n, ast.Subscript)}
        if any(isinstance(n, ast.Name) and n.id == index and id(n) not in subs for st in body for n in fastast.walk(st)):
            return None
    if not plan.written:
        return None     # (nothing written in place: not an update of the lists)
    calls = sum(c.count("@F.") for _, codes in plan.ops for c in codes)
    if calls < _PAYS * len(spec_of(plan)[8]):
        return None     # (too few operations for the tensors the run-time check reads: _PAYS)
    bound = set(targets) | set(m.locals) | ({index} if index else set())
    if bound & elsewhere or set(plan.leaves) & _assigned_in(body):
        return None
    # (the passes after this one may change the loop's nodes: what lower reads is kept as it is now)
    plan.header = ast.unparse(loop).splitlines()[0]
    plan.iters, plan.scalars = fastast.clone(plan.iters), fastast.clone(plan.scalars)
    plan.nograd = fastast.clone(plan.nograd)
    plan.lines = [(st.lineno, st.end_lineno) for st, _ in plan.ops]
    return plan


# ----------------------------------------------------------------------------- code

def _fill(code: str, names: dict) -> str:
    for k in sorted(names, key=len, reverse=True):
        code = code.replace(k, names[k])
    return code


def lower(plan: ForeachPlan, namer, runtime: str):
    """(statements before the loop, the test that takes the `_foreach_` calls, those calls,
    display statements): api puts them around the loop as the other strategies left it (its
    `else`). Each `_foreach_` call gets the line of the statement it runs."""
    from ..codegen import set_lines
    k = plan.loop_id
    lists, got, scal = namer.new(f"_av_fe{k}"), namer.new(f"_av_fg{k}"), namer.new(f"_av_fs{k}")
    leaves, chunk = namer.new(f"_av_fk{k}"), namer.new(f"_av_fc{k}")
    slot_names = [namer.new(f"_av_fl{k}_{j}") for j in range(len(plan.slots))]
    names = {f"@L{j}": slot_names[j] for j in range(len(plan.slots))}
    names.update({f"@S{j}": f"{scal}[{j}]" for j in range(len(plan.scalars))})
    names["@F."] = f"{runtime}.fe."
    for _, codes in plan.ops:
        for c in codes:
            if c.startswith("@V"):
                v = c.split(" ", 1)[0]
                names[v] = namer.new(f"_av_fv{k}_{v[2:]}")
    loop = plan.loop
    iters = "".join(_access(e) + ", " for e in plan.iters)
    spec = repr(spec_of(plan))
    maps = tuple(plan.leaves.index(x) for x in sorted(plan.mappings))
    # (a name may be unbound, or a number's arithmetic raise, where the loop would raise only
    # after earlier statements: the loop then runs as the other strategies make it, and raises
    # there. The checks run outside the `try`s: with strict=True a refusal raises NotVectorizable)
    head = ast.parse("\n".join([
        "try:",
        f"    {lists} = ({iters})",
        f"except {runtime}.Error:",
        f"    {lists} = None",
        f"{lists} = {runtime}.fe_lists({k}, {lists})",
        f"{got} = None",
        f"if {runtime}.fe_ready({spec}, {lists}):",
        "    try:",
        f"        {leaves} = ({''.join(x + ', ' for x in plan.leaves)})",
        f"    except {runtime}.Error:",
        f"        {leaves} = None",
        f"    {scal} = None",
        f"    if {runtime}.fe_numbers({k}, {leaves}, {maps!r}):",
        "        try:",
        f"            {scal} = ({''.join(ast.unparse(x) + ', ' for x in plan.scalars)})",
        f"        except {runtime}.Error:",
        f"            pass",
        f"    if {scal} is not None:",
        f"        {got} = {runtime}.fe_guard({spec}, {lists}, {scal})"])).body
    set_lines(head, loop.lineno)
    run = ast.parse(f"for {chunk} in {got}:\n    {''.join(x + ', ' for x in slot_names)}= {chunk}").body[0]
    set_lines([run], loop.lineno)
    for (first, last), (_, codes) in zip(plan.lines, plan.ops):
        nodes = [ast.parse(_fill(c, names)).body[0] for c in codes]
        set_lines(nodes, first, last)
        run.body += nodes
    fast = [run]
    if plan.nograd is not None:
        w = fastast.clone(plan.nograd)
        w.body = [ast.Pass()]
        set_lines([w], plan.nograd.lineno)
        w.body = fast
        fast = [w]
    done = ast.parse(f"{runtime}.fe_done({k})").body[0]
    set_lines([done], loop.lineno)
    test = ast.parse(f"{got} is not None", mode="eval").body
    set_lines([test], loop.lineno)
    ast.fix_missing_locations(ast.Module(body=head + fast + [done], type_ignores=[]))
    return head, test, fast + [done], _display(plan)


def _access(e) -> str:
    """An iterable as (its root's value, how to reach the list from it): the name itself (0), a
    module's `.parameters()` / `.buffers()` (1, the method's name: called only on a module that
    walks its members with torch's own methods), a dict's `d[key]` (2, the key: read only from a
    dict). The loop as written reads them again where a check refuses: none has an effect."""
    if isinstance(e, ast.Name):
        return f"({e.id}, 0, None)"
    if isinstance(e, ast.Call):
        return f"({e.func.value.id}, 1, {e.func.attr!r})"
    return f"({e.value.id}, 2, {e.slice.value!r})"


def _iterable(e) -> bool:
    """A name, `m.parameters()` / `m.buffers()` of a name, or `d[key]` of a name (_access)."""
    return (isinstance(e, ast.Name)
            or isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in ("parameters", "buffers")
            and isinstance(e.func.value, ast.Name) and not e.args and not e.keywords
            or isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and isinstance(e.slice, ast.Constant)
            and type(e.slice.value) in (str, int))


def spec_of(plan: ForeachPlan) -> tuple:
    """What the run-time checks need, as constants: (loop id, the lists' count, the slots,
    written slots, lists stored into, no_grad around the body, the operations, the list whose
    length is the range (None: zip's lists, of one length), the slots the operations take)."""
    length = None
    if plan.form == "index":
        length = next(j for j, e in enumerate(plan.iters) if e.id == plan.length)
    operands = sorted({int(j) for _, codes in plan.ops for c in codes for j in re.findall(r"@L(\d+)", c)})
    return (plan.loop_id, len(plan.iters), tuple(plan.slots), tuple(sorted(plan.written)),
            tuple(sorted(plan.stored)), plan.nograd is not None, tuple(sorted(plan.used)), length, tuple(operands))


def _display(plan: ForeachPlan):
    """What a person would write: the `_foreach_` calls over the lists."""
    base = []
    for j, (kind, b) in enumerate(plan.slots):
        if kind == "base":
            e = plan.iters[b]
            base.append(ast.unparse(e) if isinstance(e, (ast.Name, ast.Attribute, ast.Subscript)) else f"list({ast.unparse(e)})")
        else:
            src = base[b] if b < len(base) else f"_l{b}"
            attr = f"{kind}()" if kind == "detach" else kind
            base.append(f"[t.{attr} for t in {src}]")
    names = {f"@L{j}": base[j] for j in range(len(plan.slots))}
    names.update({f"@S{j}": ast.unparse(s) for j, s in enumerate(plan.scalars)})
    names["@F."] = "torch._foreach_"
    lines = []
    for _, codes in plan.ops:
        for c in codes:
            if c.startswith("@V"):
                v, rest = c.split(" ", 1)
                c = f"_v{v[2:]} {rest}"
            lines.append(_fill(c.replace("@V", "_v"), names))
    nodes = ast.parse("\n".join(lines) or "pass").body
    if plan.nograd is not None:
        w = fastast.clone(plan.nograd)
        w.body = nodes
        nodes = [w]
    from ..codegen import set_lines
    set_lines(nodes, plan.loop.lineno, plan.loop.end_lineno)
    return nodes


def find(cap: Captured, matchers=None) -> list:
    """The plans of the function's loops that sit in no other loop (nor in a nested function or
    class), in source order: each loop's first plan among `matchers` (match functions of this
    signature; by default foreach's)."""
    matchers = matchers or (match,)
    fn = cap.tree
    local = _local_names(fn)
    out = []
    own = set()     # a comprehension's names that its own `for` binds (its scope, not the function's)
    for c in fastast.walk(fn):
        if isinstance(c, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            bound = {n.id for g in c.generators for n in fastast.walk(g.target) if isinstance(n, ast.Name)}
            own |= {id(n) for n in fastast.walk(c) if isinstance(n, ast.Name) and n.id in bound}

    def walk(stmts):
        for st in stmts:
            if isinstance(st, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                               ast.ClassDef)):
                if isinstance(st, ast.For):
                    inside = {id(n) for n in fastast.walk(st)} | own
                    elsewhere = {n.id for n in fastast.walk(fn) if isinstance(n, ast.Name) and id(n) not in inside}
                    elsewhere |= _declared(fn)
                    for m in matchers:
                        p = m(cap, st, local, elsewhere)
                        if p is not None:
                            out.append(p)
                            break
                continue
            for name in ("body", "orelse", "finalbody"):
                walk(getattr(st, name, []) or [])
            for h in getattr(st, "handlers", []) or []:
                walk(h.body)
            for c in getattr(st, "cases", []) or []:
                walk(c.body)

    walk(fn.body)
    return out


def _declared(fn) -> set:
    out = set()
    for n in fastast.walk(fn):
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            out |= set(n.names)
    a = fn.args
    out |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    out |= {x.arg for x in (a.vararg, a.kwarg) if x}
    return out
