"""Pins: what a user helper's verdicts read, written out as one identity check.

Two per-call checks read a helper's surroundings again on every call, because a rebinding must
be seen: its purity (purity.why_impure: the callables its code names, looked up in its globals,
closure and builtins, and their attributes) and, with gradients on, whether it reads a tensor
that requires grad (runtime._reaches_grad: its defaults, closure contents, every global its
code and its nested functions' code name, and what it calls through attribute chains). For a
helper such as `def gate(v): return v * torch.sigmoid(v)` those walks cost about 5 us a call,
more than the batched body.

A pin records, once, the objects those walks read: the helper's code, defaults and closure, the
globals and builtins its names resolve to, the attribute chains it calls (`torch.sigmoid`), and
the same of the helpers it calls, a few levels deep. `check()` compares each with `is` (about
0.3 us for such a helper). While it holds, a verdict computed when the pin was made is the
verdict the walk would give now, where that verdict depends on nothing else:
- purity (`pure`): every object resolved is a helper pinned the same way, or a callable whose
  verdict purity caches by its identity (torch's functions, builtins, classes); not a module,
  a bound method or a partial of a Python function, whose verdicts read their state;
- the gradient walk (`inert`): every value read is a Python atom, a module, a class, a builtin
  or a function (the helpers among them pinned too): none holds a tensor, whose requires_grad
  can change without any rebinding. Defaults are a tuple of atoms, keyword defaults none.

A helper whose pin keeps failing (a global rebound on every call) is not pinned again after
_REBUILDS tries. Pins hold their helper weakly, and tensors or other objects they compare
against through weak references, so that a pin keeps no user value alive.
"""
from __future__ import annotations

import builtins
import operator
import types
import weakref

import torch

_MISS = object()
_REBUILDS = 3
_MAX_DEPTH = 3        # helpers this many calls deep (runtime._reaches_grad looks no deeper)
_MAX_PINS = 4096
# values a pin holds strongly (small, long-lived, or not weakly referable); everything else weakly
_STRONG = (str, bytes, int, float, bool, complex, type(None), types.ModuleType, type,
           types.BuiltinFunctionType, types.CodeType, tuple)
# values whose gradient reach is fixed by identity (runtime._grad_reachable answers False for
# them, whatever their state, and the walk looks into none but functions); user functions are
# pinned themselves (a bound method is not: its object's tensors can start to require grad)
_INERT = (str, bytes, int, float, bool, complex, type(None), types.ModuleType, type,
          types.BuiltinFunctionType, types.FunctionType)


class Pin:
    __slots__ = ("ref", "check", "pure", "coverable", "inert", "grad", "rebuilds", "__weakref__")

    def __init__(self, ref, check, pure, coverable, inert, rebuilds):
        self.ref, self.check, self.inert = ref, check, inert
        self.coverable = coverable   # purity's verdict depends on nothing the check does not pin
        self.pure = pure and coverable
        self.grad = {}            # runtime._reaches_grad's verdict per `anything` flag
        self.rebuilds = rebuilds


_pins: dict = {}      # id(fn) -> Pin


def held(fn) -> Pin | None:
    """fn's pin where it still holds (everything it recorded is what fn reads now), else None."""
    p = _pins.get(id(fn))
    if p is not None and p.check is not None and p.ref() is fn and p.check(fn):
        return p
    return None


def quiet(fn, anything: bool) -> bool:
    """Whether fn's pin holds and runtime._reaches_grad found, when it was made, that fn reads no
    tensor that requires grad (`anything`: none at all), by values fixed by their identity."""
    p = held(fn)
    return p is not None and p.inert and p.grad.get(anything) is False


def pin(fn, pure: bool) -> Pin | None:
    """A new pin of fn (its verdicts just computed by the caller's walk); `pure`: the purity walk
    found it pure. None where fn is not pinned (too often rebuilt, or nothing to pin)."""
    key = id(fn)
    old = _pins.get(key)
    rebuilds = 0
    if old is not None and old.ref() is fn:
        if old.check is not None and old.check(fn):
            old.pure = old.pure or pure and old.coverable     # (found pure now, by a walk like the first)
            return old
        rebuilds = old.rebuilds + 1
        if rebuilds > _REBUILDS or old.check is None:
            old.check = None
            return None
    try:
        made = _build(fn)
    except Exception:
        made = None
    ref = _entry_ref(_pins, key, fn)
    if made is None:
        _pins[key] = Pin(ref, None, False, False, False, rebuilds)
        return None
    check, coverable, inert = made
    p = _pins[key] = Pin(ref, check, pure, coverable, inert, rebuilds)
    return p


def _entry_ref(table: dict, key, obj):
    """A weak reference to obj for a new entry table[key] (a pin or a stamp), whose death
    removes that entry; the table emptied first where it is full."""
    if len(table) >= _MAX_PINS:
        table.clear()
    return weakref.ref(obj, lambda r, k=key: table.pop(k, None) if table.get(k) is not None
                       and table[k].ref is r else None)


def _build(fn):
    """(check, purity coverable, inert) for fn, or None where it cannot be pinned."""
    from .frontend import NoSource
    from .purity import _by_id, _key, _static_scan, loaded_chains
    from .runtime import _user_code, code_names

    consts: dict = {"MISS": _MISS}
    terms: list = []
    seen: set = set()
    state = {"coverable": True, "inert": True}

    def const(v):
        name = f"C{len(consts)}"
        if isinstance(v, _STRONG) or v is _MISS:
            consts[name] = v
            return name
        try:
            consts[name] = weakref.ref(v)
        except TypeError:
            consts[name] = v
            return name
        return f"{name}()"

    def same(expr, v):
        # (a weakly held value: its reference is dead, so None, once the value is gone)
        c = const(v)
        term = f"{expr} is {c}" if not c.endswith("()") else f"({expr} is {c} and {c} is not None)"
        if term not in seen:
            seen.add(term)
            terms.append(term)

    def inert(v):
        if not isinstance(v, _INERT) and v is not _MISS:
            state["inert"] = False

    visited: dict = {}

    def resolved(f, fname, gname, head):
        """The object head names in f's scope now, with the terms that pin it (scope_lookup)."""
        code = f.__code__
        if head in code.co_freevars and f.__closure__ is not None:
            cell = f.__closure__[code.co_freevars.index(head)]
            v = cell.cell_contents            # (an empty cell: ValueError, nothing pinned)
            same(f"{const(cell)}.cell_contents", v)
            return v
        g = f.__globals__
        v = g.get(head, _MISS)
        same(f"{gname}.get({head!r}, MISS)", v)
        if v is not _MISS:
            return v
        b = g.get("__builtins__", builtins)
        same(f"{gname}.get('__builtins__', MISS)", b if "__builtins__" in g else _MISS)
        bd = b if isinstance(b, dict) else vars(b)
        v = bd.get(head, _MISS)
        same(f"{const(bd)}.get({head!r}, MISS)", v)
        return v

    def visit(f, depth):
        if id(f) in visited:
            return
        if depth > _MAX_DEPTH:
            raise _Unpinned
        visited[id(f)] = f
        fname = "F" if f is fn else const(f)
        code = f.__code__
        same(f"{fname}.__code__", code)
        same(f"{fname}.__defaults__", f.__defaults__)
        same(f"{fname}.__kwdefaults__", f.__kwdefaults__)
        for d in f.__defaults__ or ():
            inert(d)
        if f.__kwdefaults__:
            state["inert"] = False           # (a dict: changed in place, unseen by identity)
        values = []
        if f.__closure__ is not None:
            same(f"{fname}.__closure__", f.__closure__)
            for cell in f.__closure__:
                v = cell.cell_contents
                same(f"{const(cell)}.cell_contents", v)
                values.append(v)
        g = f.__globals__
        gname = const(g)
        for name in code_names(code):        # (its nested functions' and lambdas' names too)
            v = g.get(name, _MISS)
            same(f"{gname}.get({name!r}, MISS)", v)
            values.append(v)
        for v in values:
            inert(v)
            if _user_code(v):
                visit(v, depth + 1)
        # the purity walk's targets (purity._helper_impurity)
        try:
            reason, targets = _static_scan(f)
        except NoSource:
            reason, targets = "no source", ()
        if reason:
            # (an impure helper keeps the loop; and the walks' view of what it calls is partial)
            state["coverable"] = state["inert"] = False
            return
        for kind, path in list(targets) + [("chain", p) for p in loaded_chains(f)]:
            if kind in ("input", "self", "self-attr", "reach", "self-reach"):
                # (a module's own forward only; and chains on the first parameter, which name no
                # global: a global of that name, read here, would run its getters; probeR. Values
                # read through subscripts: purity's own check, which runs no code)
                continue
            head, *rest = path.split(".")
            obj = resolved(f, fname, gname, head)
            for part in rest:
                if obj is _MISS:
                    break
                if _hooked(obj, part):
                    # (a read that runs the user's code, `__getattr__` or a property: the pin's own
                    # check would run it on every call; probeE)
                    raise _Unpinned
                nxt = getattr(obj, part, _MISS)
                same(f"getattr({const(obj)}, {part!r}, MISS)", nxt)
                obj = nxt
            if obj is _MISS:
                continue
            inert(obj)       # (what it calls or reads, the gradient walk looks into too: runtime._call_targets)
            if _user_code(obj):
                visit(obj, depth + 1)
                continue
            if kind == "chain":
                continue     # (a value read: purity's walk does not look at it)
            hit = _by_id.get(id(obj))
            if hit is not None and hit[0] is obj and hit[1] is None:
                continue
            if isinstance(obj, torch.nn.Module) or _key(obj) is None:
                state["coverable"] = False      # (a verdict that reads the object's state)

    try:
        visit(fn, 0)
    except (_Unpinned, ValueError):
        return None
    if not terms:
        return None
    src = "def check(F):\n    try:\n        return (" + "\n                and ".join(terms) + \
          ")\n    except Exception:\n        return False\n"
    ns = dict(consts)
    exec(compile(src, f"<autovec pin {getattr(fn, '__qualname__', '?')}>", "exec"), ns)
    check = ns["check"]
    check.source = src
    return check, state["coverable"], state["inert"]


def _hooked(obj, part) -> bool:
    """Whether reading `obj.part` would run code of the user's (runtime._codeless_attr)."""
    from .runtime import _HOOKED, _codeless_attr
    return _codeless_attr(obj, part) is _HOOKED


class _Unpinned(Exception):
    pass



# ----------------------------------------------------------------------------- module stamps
#
# A module's verdicts (purity.module_impurity, batching.module_form, runtime._module_unsafe's
# part that does not read requires_grad) read its tree: each submodule's class, its attributes
# (`training`, `inplace`, `dim`, ..), its hooks, parameters, buffers and children. For a small
# model those walks cost tens of microseconds a call. A stamp records, once, what they read, and
# `check()` compares it (a few microseconds): the class and its forward, every entry of each
# submodule's __dict__ by identity (the dicts of parameters, buffers and children by their
# entries), and the forward and backward hooks empty. Only for trees of torch.nn's own classes
# with their own forward (a custom class's forward reads what a helper reads: the walks run on
# every call), without hooks, and without scale_grad_by_freq (whose verdict reads requires_grad).

_stamps: dict = {}      # id(module) -> Stamp
# a module's own hooks that run on every call of it (forward, or its backward): purity refuses them
MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_CONTAINERS = ("_modules", "_parameters", "_buffers")


def torch_forward(cls) -> bool:
    """Whether a class's forward is torch.nn's own (not a class of the user's, nor a torch.nn
    class whose forward a patch replaced)."""
    return (getattr(getattr(cls, "forward", None), "__module__", None) or "").startswith("torch.nn.")


class Stamp:
    __slots__ = ("ref", "check", "verdicts", "rebuilds", "__weakref__")

    def __init__(self, ref, check, rebuilds):
        self.ref, self.check, self.rebuilds = ref, check, rebuilds
        self.verdicts = {}


def stamped(mod) -> dict | None:
    """The verdicts recorded for module `mod` while its stamp holds (the callers fill the dict:
    "pure", ("form", rank), "unsafe"); a new, empty dict where the tree changed; None where the
    module is not stamped (a class of its own, hooks, or rebuilt too often)."""
    key = id(mod)
    s = _stamps.get(key)
    rebuilds = 0
    if s is not None and s.ref() is mod:
        if s.check is not None and s.check(mod):
            return s.verdicts
        rebuilds = s.rebuilds + 1
        if rebuilds > _REBUILDS:
            s.check = None
            return None
    try:
        check = _module_check(mod)
    except Exception:
        check = None
    ref = _entry_ref(_stamps, key, mod)
    s = _stamps[key] = Stamp(ref, check, rebuilds if check is not None else rebuilds + _REBUILDS)
    return s.verdicts if check is not None else None


def _atom(v) -> bool:
    """A value compared by equality (immutable: a number, a string, a dtype, a tuple of them)."""
    if type(v) is tuple:
        return all(_atom(x) for x in v)
    return v is None or type(v) in (bool, int, float, complex, str, bytes, torch.dtype)


def _module_check(mod):
    """The stamp's check for mod's tree, or None where it is not stamped."""
    consts: dict = {"MISS": _MISS}
    lines = ["def check(M):", "    try:", "        s0 = M"]
    emit = lines.append
    seen: dict = {}

    def const(v):
        name = f"C{len(consts)}"
        consts[name] = v
        return name

    def held(v) -> str:
        """An expression that is v while v lives: v itself where small or long-lived, else a
        weak reference's call."""
        if isinstance(v, _STRONG) or v is None:
            return const(v)
        try:
            return const(weakref.ref(v)) + "()"
        except TypeError:
            return const(v)      # (the module's own dicts and sets: not weakly referable)

    def visit(m, var):
        cls = type(m)
        if not (cls.__module__ or "").startswith("torch.nn.") or not torch_forward(cls):
            raise _Unpinned
        d = m.__dict__
        if any(d.get(k) for k in MODULE_HOOKS) or d.get("scale_grad_by_freq"):
            raise _Unpinned
        seen[id(m)] = var
        dv = f"d{var[1:]}"
        emit(f"        {dv} = {var}.__dict__")
        emit(f"        if type({var}) is not {const(cls)} or {const(cls)}.forward is not {const(cls.forward)} "
             f"or tuple({dv}) != {const(tuple(d))}:")
        emit("            return False")
        emit(f"        if {' or '.join(f'{dv}.get({k!r})' for k in MODULE_HOOKS)}:")
        emit("            return False")
        # plain values (`training`, `inplace`, `dim`, a shape) at once, by one C-level getter
        atoms = [k for k, v in d.items() if _atom(v)]
        if atoms:
            get = const(operator.itemgetter(*atoms))
            want = tuple(d[k] for k in atoms)
            emit(f"        if {get}({dv}) != {const(want if len(atoms) > 1 else want[0])}:")
            emit("            return False")
        for k, v in d.items():
            if k in MODULE_HOOKS or _atom(v):
                continue
            if k in _CONTAINERS and isinstance(v, dict):
                cv = f"{dv}[{k!r}]"
                emit(f"        if tuple({cv}) != {const(tuple(v))}:")
                emit("            return False")
                for name, item in v.items():
                    if k == "_modules" and isinstance(item, torch.nn.Module):
                        if id(item) in seen:
                            emit(f"        if {cv}[{name!r}] is not {seen[id(item)]}:")
                            emit("            return False")
                            continue
                        child = f"s{len(seen)}"
                        emit(f"        {child} = {cv}[{name!r}]")
                        emit(f"        if {child} is not {held(item)}:")
                        emit("            return False")
                        visit(item, child)
                    else:
                        emit(f"        if {cv}[{name!r}] is not {held(item)}:")
                        emit("            return False")
                continue
            if isinstance(v, (dict, set)):
                continue     # (the module's own registries of other hooks: no verdict reads them)
            emit(f"        if {dv}[{k!r}] is not {held(v)}:")
            emit("            return False")

    visit(mod, "s0")
    emit("        return True")
    emit("    except Exception:")
    emit("        return False")
    src = "\n".join(lines) + "\n"
    ns = dict(consts)
    exec(compile(src, f"<autovec stamp {type(mod).__name__}>", "exec"), ns)
    check = ns["check"]
    check.source = src
    return check
