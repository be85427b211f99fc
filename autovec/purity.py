"""Which callables a rewritten loop body may call: pure torch functions, tensor methods,
side-effect-free user helpers and stateless nn.Modules. Also the analysis environment."""
from __future__ import annotations

import ast
import builtins
import functools
import operator
import types
import weakref

import torch

from . import fastast
from . import pins
from .analysis import names as nm
from .frontend import Captured, NoSource, attr_chain, capture, scope_lookup

_EFFECT_BUILTINS = {"print", "input", "open", "exec", "eval", "setattr", "delattr", "next", "iter",
                    "globals", "locals", "vars", "breakpoint", "__import__", "compile", "help", "exit",
                    "quit", "id", "hash"}
# modules whose functions and classes compute values without effects (the effectful builtins
# and random functions are refused by name first)
_PURE_MODULES = {"torch", "math", "cmath", "operator", "_operator", "numpy", "builtins", "functools",
                 "itertools", "numbers", "fractions", "decimal", "collections", "typing", "enum", "dataclasses"}
_RANDOM = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
           "bernoulli", "multinomial", "poisson", "dropout", "dropout1d", "dropout2d", "dropout3d",
           "alpha_dropout", "feature_alpha_dropout", "rrelu", "gumbel_softmax", "binomial",
           "random", "uniform", "shuffle", "choice", "sample", "randrange", "gauss", "seed", "manual_seed"}
_NOT_BATCHABLE_METHODS = {"item", "tolist", "numpy", "backward", "register_hook", "retain_grad", "data_ptr",
                          "storage", "untyped_storage", "share_memory_", "pin_memory", "record_stream",
                          "set_", "resize_", "copy_", "requires_grad_", "cpu", "cuda", "__setitem__",
                          "apply_", "map_", "random_", "uniform_", "normal_", "bernoulli_", "exponential_",
                          "geometric_", "log_normal_", "cauchy_", "bernoulli", "multinomial"}
_CONSUMERS = {torch.stack: "stack", torch.cat: "cat", torch.tensor: "tensor"}
if hasattr(torch, "concat"):
    _CONSUMERS[torch.concat] = "cat"
_MODULE_TRAINING_RANDOM = ("Dropout", "AlphaDropout", "FeatureAlphaDropout", "RReLU")
_MODULE_TRAINING_STATE = ("BatchNorm", "InstanceNorm", "SyncBatchNorm", "LazyBatchNorm")


# operator's functions that change their first argument (`operator.iadd(lst, [1])` extends it)
_OPERATOR_EFFECTS = {"iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imod", "imul", "imatmul", "ior", "ipow",
                     "irshift", "isub", "itruediv", "ixor", "setitem", "delitem"}

MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem", "sort",
            "reverse", "add", "discard", "write", "writelines", "put", "put_nowait", "send", "flush", "close",
            "seek", "truncate", "appendleft", "extendleft", "popleft", "rotate", "difference_update",
            "intersection_update", "symmetric_difference_update", "__setitem__", "__delitem__", "__iadd__"}


# the tensor's dunder methods that compute a new value from it (operators, conversions, reads);
# the others write into it (`__iadd__`, `__setitem__`, `__setstate__`), its attributes
# (`__setattr__`) or are the interpreter's own (`__init__`, `__reduce__`): not taken as pure
_PURE_DUNDERS = frozenset(
    f"__{n}__" for n in (
        "abs add and bool complex contains div eq float floordiv format ge getitem gt index int invert le len "
        "long lshift lt matmul mod mul ne neg nonzero or pos pow radd rand rdiv rfloordiv rlshift rmatmul rmod "
        "rmul ror rpow rrshift rshift rsub rtruediv rxor sub truediv xor").split())


def active_value(v) -> str:
    """Why using the value `v` itself in a body (an operand, an argument, an element read, a walk)
    runs Python code once per iteration in the loop and a different number of times batched, or
    "" (probeM): an iterator or a generator (each use advances it: the batch's trial rows and
    one-time check would use it up), an object whose class defines in Python an operator, a
    comparison, a conversion or an element read (`x[i] * o` calls `o.__rmul__` once per row in the
    loop, once on the whole batch: a counter, a changing factor or a rule that is not elementwise
    gives other values), or a tensor subclass that defines again in Python an attribute of
    torch.Tensor (its `__mul__` runs per row). Classes are judged once (a class patched later is
    not seen again)."""
    tp = type(v)
    if tp in _PLAIN_VALUE_TYPES:
        return ""
    why = _ACTIVE.get(tp)
    if why is None:
        why = _ACTIVE[tp] = _active_type(tp) if not issubclass(tp, torch.Tensor) else _active_subclass(tp)
    return why


def _active_subclass(tp) -> str:
    if tp is torch.Tensor:
        return ""
    tf = getattr(tp, "__torch_function__", None)
    if tf is not torch._C._disabled_torch_function_impl and \
            getattr(tf, "__func__", None) is not torch.Tensor.__torch_function__.__func__:
        return "a tensor subclass with its own `__torch_function__`"
    own = own_override(tp)
    return f"a tensor subclass with its own `{own}`" if own else ""


_PLAIN_VALUE_TYPES = frozenset({bool, int, float, complex, str, bytes, type(None), list, tuple, dict, range, slice,
                                torch.dtype, torch.device, torch.Size, types.ModuleType, types.FunctionType,
                                types.BuiltinFunctionType, types.MethodType})
_ACTIVE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# packages whose classes are taken as they are (their operators are their own documented ones)
_KNOWN_PACKAGES = ("builtins", "torch", "numpy", "autovec", "collections", "types", "argparse", "enum", "dataclasses",
                   "typing", "functools")
_ACTIVE_DUNDERS = frozenset(
    f"__{n}__" for n in (
        "add radd iadd sub rsub isub mul rmul imul truediv rtruediv itruediv floordiv rfloordiv ifloordiv mod "
        "rmod imod pow rpow ipow matmul rmatmul imatmul and rand iand or ror ior xor rxor ixor lshift rlshift "
        "ilshift rshift rrshift irshift neg pos abs invert lt le gt ge eq ne float int index bool complex round "
        "trunc floor ceil getitem len iter contains reversed torch_function array").split())
# what dataclasses write for a class (`eq=True`, `order=True`): comparisons of its fields
_DATACLASS_WRITTEN = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"})


def _known_module(mod: str) -> bool:
    head = mod.split(".")[0]
    return head in _KNOWN_PACKAGES


def _active_type(tp) -> str:
    if getattr(tp, "__next__", None) is not None:
        return "an iterator (each use advances it)"
    import dataclasses
    for cls in tp.__mro__:
        if cls is object or _known_module(getattr(cls, "__module__", "") or ""):
            continue
        generated = dataclasses.is_dataclass(cls)
        for name, attr in cls.__dict__.items():
            if name not in _ACTIVE_DUNDERS or attr is None:
                continue      # (`__hash__ = None`: no hash)
            if generated and name in _DATACLASS_WRITTEN and isinstance(attr, types.FunctionType) \
                    and attr.__code__.co_filename == "<string>":
                continue      # (the comparisons dataclasses wrote for it)
            return f"whose class defines `{name}` in Python (called once per iteration in the loop)"
    return ""


def own_override(kind) -> str:
    """The first attribute of torch.Tensor that a subclass defines again in Python (`__add__` that
    saturates, `__mul__` that counts its calls), or "": the loop calls it once per row, where the
    batch calls it once or not at all (probeM). What nn.Parameter and nn.Buffer define again
    (construction, copies, printing, pickling, their disabled __torch_function__) changes no
    operation."""
    for cls in kind.__mro__:
        if cls is torch.Tensor or cls is torch._C.TensorBase:
            break
        for name in cls.__dict__:
            if name not in _INERT_OVERRIDES and hasattr(torch.Tensor, name):
                return name
    return ""


_INERT_OVERRIDES = frozenset({"__new__", "__init__", "__deepcopy__", "__reduce_ex__", "__reduce__", "__repr__",
                              "__str__", "__format__", "__doc__", "__module__", "__qualname__", "__dict__",
                              "__weakref__", "__slots__", "__annotations__", "__torch_function__",
                              "__init_subclass__", "__class_getitem__", "__getstate__", "__setstate__"})


def pure_tensor_method(name: str) -> bool:
    if name in _NOT_BATCHABLE_METHODS or (name.endswith("_") and not name.endswith("__")):
        return False
    if name.startswith("__") and name.endswith("__") and name not in _PURE_DUNDERS:
        return False     # (`q.__iadd__(1)` is `q += 1` on the tensor itself)
    return hasattr(torch.Tensor, name)


class Env:
    """The analysis environment of one captured function (see autovec.analysis)."""

    def __init__(self, cap: Captured):
        self.cap = cap

    def is_builtin(self, name: str) -> bool:
        found, value = self.cap.lookup(name)
        return found and getattr(builtins, name, object()) is value

    def resolve(self, path: str):
        head, *rest = path.split(".")
        found, obj = self.cap.lookup(head)
        if not found:
            return False, None
        return attr_chain(obj, rest)

    def classify(self, path: str) -> str | None:
        found, obj = self.resolve(path)
        if not found:
            return None  # checked again on the first call
        return why_impure(obj, path)

    def pure_method(self, attr: str) -> bool:
        # (`_av_fill`: the analysis's own spelling of `out[i, lo:hi] = v` on a copy of the row)
        # (`_av_own`: a tensor the iteration made, one per row under vmap: runtime.own)
        return attr in ("_av_fill", "_av_own") or pure_tensor_method(attr)

    def helper_def(self, path: str) -> ast.FunctionDef | None:
        """The syntax tree of the plain user function `path` names now (not torch's or autovec's,
        not a method), or None. The batched body looks the callee up again (batching._Inliner)."""
        found, obj = self.resolve(path)
        if not found or type(obj) is not types.FunctionType or (obj.__module__ or "").startswith(("torch", "autovec")):
            return None
        try:
            return _capture_cached(obj).tree
        except NoSource:
            return None

    def consumer(self, path: str) -> str | None:
        found, obj = self.resolve(path)
        return _CONSUMERS.get(obj) if found and _hashable(obj) else None


def _hashable(obj) -> bool:
    try:
        hash(obj)
        return True
    except TypeError:
        return False


_verdicts: dict = {}
_by_id: dict = {}     # id(obj) -> (obj, None) for callables known to be pure whatever calls them


def why_impure(obj, path: str = "") -> str | None:
    """None when calling `obj` inside a batched body is safe, else a reason."""
    hit = _by_id.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]   # the steady state: a callable whose verdict depends on the object alone
    helper = type(obj) is types.FunctionType
    if helper:
        p = pins.held(obj)
        if p is not None and p.pure:
            return None     # the steady state of a helper: what its check read is unchanged (pins)
    label = path or getattr(obj, "__qualname__", type(obj).__name__)
    if isinstance(obj, torch.nn.Module):
        return module_impurity(obj, label)
    key = _key(obj)
    if key is not None and key in _verdicts:
        return _verdicts[key]
    verdict = _why_impure(obj, label)
    if helper and verdict is None:
        pins.pin(obj, pure=True)
    if key is not None:
        _verdicts[key] = verdict
        if verdict is None and key[0] == "obj":
            _by_id[id(obj)] = (obj, None)   # keeps obj alive, so its id is not reused
    return verdict


def _key(obj):
    if isinstance(obj, types.FunctionType) and (obj.__module__ or "").startswith("torch"):
        return ("obj", id(obj), obj)  # torch's own Python functions: the verdict depends on the object only
    if isinstance(obj, (types.MethodType, types.FunctionType)):
        return None  # what a Python function calls is looked up again on every check
    if isinstance(obj, functools.partial):
        inner = obj
        while isinstance(inner, functools.partial):
            inner = inner.func
        if isinstance(inner, (types.MethodType, types.FunctionType)) and _key(inner) is None:
            return None  # (the same for the Python function a partial wraps)
    if isinstance(obj, types.BuiltinMethodType) and isinstance(getattr(obj, "__self__", None), torch.Tensor):
        return ("tensor-method", obj.__name__)
    try:
        hash(obj)
    except TypeError:
        return None
    return ("obj", id(obj), obj)  # keep obj alive so its id is not reused


def _why_impure(obj, label: str, self_obj=None) -> str | None:
    name = getattr(obj, "__name__", "") or ""
    if name in _EFFECT_BUILTINS and getattr(builtins, name, None) is obj:
        return f"`{label}` has side effects"
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, torch.Tensor):
        return None if pure_tensor_method(name) else f"`.{name}()` modifies its tensor in place or leaves torch"
    if (isinstance(obj, (types.BuiltinMethodType, types.MethodWrapperType)) and owner is not None
            and not isinstance(owner, types.ModuleType) and name in MUTATORS):
        return f"`{label}` modifies a {type(owner).__name__}"
    if isinstance(obj, types.MethodType):
        inner = obj.__func__
        if isinstance(owner, torch.nn.Module):
            bad = module_impurity(owner, label)
            if bad:
                return bad
        if isinstance(inner, types.FunctionType):
            return _why_impure(inner, label, owner)     # (its `self.m()` calls: the owner's methods)
        # a compiled method bound to an object (`np.random.shuffle` is RandomState's): what it
        # touches is its object's business, so it is not known to be pure
        omod = type(owner).__module__ or ""
        if name in _RANDOM or omod.startswith(("random", "numpy.random")):
            return f"random numbers are drawn by `{label}` (a batched rewrite would draw different values)"
        if name in MUTATORS:
            return f"`{label}` modifies a {type(owner).__name__}"
        return f"cannot tell whether calling `{label}` (a method of a {type(owner).__name__}) has side effects"
    if isinstance(obj, functools.partial):
        # the wrapped callable decides (`functools.partial(print, ...)` prints)
        return why_impure(obj.func, label)
    if isinstance(obj, operator.methodcaller):
        return f"cannot tell whether calling `{label}` (an operator.methodcaller) has side effects"
    module = getattr(obj, "__module__", "") or ""
    if module in ("operator", "_operator") and (name in _OPERATOR_EFFECTS or name.strip("_") in _OPERATOR_EFFECTS):
        return f"`{label}` modifies its first argument"
    if name in _RANDOM or (module.startswith(("random", "numpy.random")) and callable(obj)):
        return f"random numbers are drawn by `{label}` (a batched rewrite would draw different values)"
    if name.endswith("_") and not name.endswith("__"):
        return f"`{label}` modifies its argument in place"
    if isinstance(obj, types.FunctionType):
        return helper_impurity(obj, label, self_obj=self_obj)
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)) and not (
            owner is None or isinstance(owner, types.ModuleType)):
        return None   # a method of a value (`d.get`); the mutating ones are refused above
    if module.split(".")[0] in _PURE_MODULES and (
            isinstance(obj, (type, types.BuiltinFunctionType, types.BuiltinMethodType)) or callable(obj)):
        return None
    if isinstance(obj, (type, types.BuiltinFunctionType, types.BuiltinMethodType)):
        # `os.remove`, `time.time`, a user class: effects, or a different value every call
        return f"cannot tell whether calling `{label}` (from `{module or '?'}`) has side effects"
    if callable(obj):
        return f"cannot tell whether calling `{label}` ({type(obj).__name__}) has side effects"
    return None


def writes_input(mod) -> bool:
    """Whether calling the module writes into its input: an activation made with `inplace=True`
    (nn.ReLU, LeakyReLU, ELU, SiLU, Hardtanh, Dropout, ..), or a Sequential that starts with one."""
    while isinstance(mod, torch.nn.Sequential) and len(mod):
        mod = mod[0]
    return getattr(mod, "inplace", False) is True


def _python_forward(fwd):
    """A module class's forward as a Python function: an @autovec forward is its original."""
    if not isinstance(fwd, types.FunctionType) and getattr(fwd, "_autovec_state", None) is not None:
        fwd = getattr(fwd, "__wrapped__", fwd)
    return fwd


# torch.nn's hooks for every module call (register_module_forward_hook, ..): each dict is
# changed in place, so these references see every registration
_GLOBAL_HOOKS = tuple((name, getattr(torch.nn.modules.module, name)) for name in (
    "_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks", "_global_backward_hooks")
    if isinstance(getattr(torch.nn.modules.module, name, None), dict))


# how torch.nn calls a module, as torch defines it (a profiler or a call counter may wrap them)
_CALL_PATH = tuple((name, torch.nn.Module.__dict__.get(name)) for name in ("__call__", "_wrapped_call_impl",
                                                                           "_call_impl"))


def global_hooks() -> str | None:
    """The first of torch.nn's global module hooks that is registered, or a module call path
    that is no longer torch's own (`nn.Module.__call__` wrapped), or None: each runs on every
    module call, once per iteration in the loop and once in a batched call."""
    for name, hooks in _GLOBAL_HOOKS:
        if hooks:
            return name.strip("_").replace("_", " ") + " registered"
    d = torch.nn.Module.__dict__
    for name, fn in _CALL_PATH:
        if d.get(name) is not fn or not (getattr(fn, "__module__", None) or "").startswith("torch.nn."):
            return f"its own `nn.Module.{name}` (replaced: it runs on every module call)"
    return None


def module_impurity(mod: torch.nn.Module, label: str = "module") -> str | None:
    """Reason a module call may have effects: hooks (its own, its submodules', or torch.nn's
    global ones), training-mode randomness or statistics, an activation that writes into its
    input (inplace=True), or a custom forward that is not a side-effect-free helper."""
    hooked = global_hooks()
    if hooked:
        return f"`{label}` is a module, and torch.nn has {hooked} (they run on every module call)"
    known = pins.stamped(mod)
    if known is not None and known.get("pure"):
        return None         # (the steady state: the tree is what it was when found pure)
    verdict = _module_impurity(mod, label)
    if known is not None and verdict is None:
        known["pure"] = True
    return verdict


def _module_impurity(mod, label):
    if writes_input(mod):
        # (the loop's rows are views of the caller's tensors: each call overwrites one; inside a
        # module, an inplace activation on the module's own intermediate values is no effect)
        return f"`{label}` has inplace=True: it writes into its input (the caller's rows)"
    for sub_name, sub in mod.named_modules():
        where = f"`{label}{'.' + sub_name if sub_name else ''}`"
        if any(sub.__dict__.get(name) for name in pins.MODULE_HOOKS):
            return f"{where} has hooks"
        if "forward" in sub.__dict__:
            # (replaced on the instance, a debugging or adapter patch: not its class's forward)
            return f"{where} has its forward replaced on the instance"
        cls = type(sub)
        cname = cls.__name__
        if sub.training and cname.startswith(_MODULE_TRAINING_RANDOM):
            return f"{where} is a {cname} in training mode (random)"
        p = getattr(sub, "dropout", None)
        if sub.training and isinstance(p, (int, float)) and not isinstance(p, bool) and p > 0:
            # a dropout probability the module applies itself (MultiheadAttention, RNNs):
            # random in training mode like a Dropout submodule
            return f"{where} is a {cname} with dropout={p} in training mode (random)"
        if getattr(sub, "scale_grad_by_freq", False) and any(q.requires_grad for q in sub.parameters(recurse=False)):
            # its gradient scales each call's rows by their counts in that call: one batched call
            # counts over every iteration
            return f"{where} is a {cname} with scale_grad_by_freq=True (its gradient depends on each call's indices)"
        if sub.training and cname.startswith(_MODULE_TRAINING_STATE):
            return f"{where} is a {cname} in training mode (it updates running statistics)"
        if not cls.__module__.startswith("torch.nn.") or not pins.torch_forward(cls):
            # (a class of its own, or a torch.nn class whose forward a patch replaced)
            fwd = _python_forward(getattr(cls, "forward", None))
            if isinstance(fwd, types.FunctionType):
                bad = helper_impurity(fwd, f"{cls.__qualname__}.forward", module=sub)
                if bad:
                    return bad
            else:
                return f"{where} has no Python forward to check"
    return None


_checking: set = set()


def helper_impurity(fn: types.FunctionType, label: str, depth: int = 0, module=None, self_obj=None) -> str | None:
    """Check a user helper: no global/nonlocal, no writes to attributes or to subscripts of
    values it did not create, no impure calls. The calls it makes are looked up in its
    globals and closure on every check, so rebinding a name is seen. `self_obj`: what its first
    parameter is (a method's object, a forward's module), whose methods it calls are checked too
    (`self.next_factor()` that counts: probeN)."""
    key = (fn.__code__, id(fn))
    if key in _checking:
        return None  # recursion: the other calls decide
    _checking.add(key)
    try:
        return _helper_impurity(fn, label, depth, module, module if self_obj is None else self_obj)
    finally:
        _checking.discard(key)


_parsed: dict = {}
_split: dict = {}     # a helper's call targets -> (kind, path, path's parts), per targets tuple


def _capture_cached(fn):
    """Source analysis is per code object; name lookups use this function's own scope."""
    hit = _parsed.get(fn.__code__)
    if hit is None:
        try:
            hit = capture(fn)
        except NoSource as e:
            hit = e
        _parsed[fn.__code__] = hit
    if isinstance(hit, NoSource):
        raise hit
    return Captured(fn=fn, tree=hit.tree, filename=hit.filename, qualname=fn.__qualname__)


def _helper_impurity(fn, label, depth, module=None, self_obj=None) -> str | None:
    if depth > 4:
        return f"helper `{label}` calls too deeply nested helpers to check"
    if (fn.__module__ or "").startswith("torch"):
        return None
    try:
        static = _static_scan(fn)
    except NoSource as e:
        return f"helper `{label}` cannot be checked for side effects: {e}"
    reason, targets = static
    if reason:
        return reason.replace("{label}", label)
    parts = _split.get(targets)
    if parts is None:
        parts = _split[targets] = tuple((kind, path, path.split(".")) for kind, path in targets)
    for kind, path, (head, *rest) in parts:
        if kind == "train-only" and module is not None and not module.training:
            continue            # (the module's own dropout, in eval mode: no random numbers)
        if kind == "self":
            if self_obj is None:
                continue        # (a plain function's first parameter: what it is, the call site knows)
            found, obj = attr_chain(self_obj, rest)
            if not found or isinstance(obj, torch.nn.Module) and isinstance(self_obj, torch.nn.Module):
                continue        # (a submodule: the module's own check walks its tree, and an inplace
                                # activation on the forward's argument is an "input" target)
            bad = why_impure(obj, f"self.{'.'.join(rest)}")
            if bad:
                return bad if bad.startswith("helper") else f"helper `{label}`: {bad}"
            continue
        if kind == "self-attr":
            if self_obj is not None:
                bad = _getter_impurity(self_obj, rest, label)
                if bad:
                    return bad
            continue
        if kind in ("reach", "self-reach"):
            name, steps = _CHAIN_STEPS[path]
            if kind == "self-reach":
                found, obj = self_obj is not None, self_obj
            else:
                found, obj = scope_lookup(fn, name)
            why = _reached_activity(obj, steps, label) if found else ""
            if why:
                return why if why.startswith("helper") else f"helper `{label}` reads `{path}`, {why}"
            continue
        if kind == "value":
            found, obj = scope_lookup(fn, head)
            why = active_value(obj) if found else ""
            if why:
                return f"helper `{label}` reads `{head}`, a {type(obj).__name__} object {why}"
            continue
        if kind == "input":
            if head == "self" and module is not None:
                found, obj = attr_chain(module, rest)
                if found and isinstance(obj, torch.nn.Module) and writes_input(obj):
                    return f"`{path}` in `{label}` has inplace=True: it writes into the caller's tensor"
            continue
        # (Env.resolve / Captured.lookup: the name in the helper's scope now, then its attributes)
        found, obj = scope_lookup(fn, head)
        if found and rest:
            found, obj = attr_chain(obj, rest)
        if not found:
            continue
        hit = _by_id.get(id(obj))
        if hit is not None and hit[0] is obj and hit[1] is None:
            continue            # why_impure's first answer: a callable pure whatever calls it
        # (torch's own Python functions go through why_impure: it refuses the random ones by name,
        # `F.dropout` in a module's forward)
        bad = helper_impurity(obj, path, depth + 1) if isinstance(obj, types.FunctionType) and not (
            obj.__module__ or "").startswith("torch") else why_impure(obj, path)
        if bad:
            return bad if bad.startswith("helper") or kind != "name" else f"helper `{label}`: {bad}"
    return None


_static: dict = {}
_chains: dict = {}


def _params(tree: ast.FunctionDef) -> set:
    """The names of a function's parameters."""
    a = tree.args
    return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | {x.arg for x in (a.vararg, a.kwarg) if x}


def loaded_chains(fn) -> tuple:
    """Per code object: the attribute chains on outside names a helper reads (`mod.W`, `K.W`,
    `cfg.a.b`; loaded, called or not), as dotted paths; () where its source is unknown."""
    code = fn.__code__
    hit = _chains.get(code)
    if hit is None:
        try:
            tree = _capture_cached(fn).tree
        except NoSource:
            hit = ()
        else:
            local = nm.stores(tree) | _params(tree)
            paths = []
            for n in fastast.walk(tree):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" \
                        and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) \
                        and isinstance(n.args[1].value, str) and n.args[1].value.isidentifier() \
                        and (isinstance(n.args[0], ast.Name) or isinstance(n.args[0], ast.Attribute) and _chain(n.args[0])):
                    # (`getattr(K, "W")`: the chain `K.W`)
                    n = ast.Attribute(value=n.args[0], attr=n.args[1].value, ctx=ast.Load())
                if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and _chain(n):
                    root = n
                    while isinstance(root, ast.Attribute):
                        root = root.value
                    if root.id not in local:
                        paths.append(ast.unparse(n))
            hit = tuple(dict.fromkeys(paths))
        _chains[code] = hit
    return hit


def _static_scan(fn):
    """Per code object: a reason the helper is impure whatever its names refer to, or the
    names and attribute paths it calls (looked up again on every check)."""
    code = fn.__code__
    hit = _static.get(code)
    if hit is not None:
        return hit
    tree = _capture_cached(fn).tree
    args = tree.args
    params = _params(tree)
    # (the names the body binds: not the helper's own name, which its `def` binds outside it:
    # `helper.calls += 1` writes the function's attribute, an effect; probeM)
    local = nm.stores(ast.Module(body=tree.body, type_ignores=[])) | params
    # local names bound only to functions defined in the helper (`def`, `lambda`), whose own
    # calls this walk sees; any other local called (`add = LOG.append; add(v)`, a parameter)
    # is a callable the scan cannot name
    defined = {n.name for n in fastast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n is not tree}
    defined |= {t.id for n in fastast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda)
                for t in n.targets if isinstance(t, ast.Name)}
    defined -= {t.id for n in fastast.walk(tree) if isinstance(n, ast.Assign) and not isinstance(n.value, ast.Lambda)
                for t in n.targets if isinstance(t, ast.Name)} | params
    targets, reason = [], None
    parents = {id(c): p for p in fastast.walk(tree) for c in ast.iter_child_nodes(p)}
    positional = args.posonlyargs + args.args
    first = positional[0].arg if positional else None
    for n in fastast.walk(tree):
        line = getattr(n, "lineno", tree.lineno)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and first is not None and _chain(n) \
                and not (isinstance(parents.get(id(n)), ast.Attribute)) \
                and not (isinstance(parents.get(id(n)), ast.Call) and parents[id(n)].func is n):
            chain = ast.unparse(n).split(".")
            if chain[0] == first:
                # `self.pp`: a property of the first parameter's object runs its getter, checked
                # where the object is known (a getter that counts: probeO)
                targets.append(("self-attr", ".".join(chain)))
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and (n.id not in local or n.id == first):
            p = parents.get(id(n))
            chain = _element_chain(n, parents)
            if chain is not None:
                # a value read through an outside object (`FACT[0]`, `CFG.s`, `S["a"]["b"]`,
                # `self.lst[0]`): the object it reaches, checked on every check as a value used
                # as it is (probeB, stop 51)
                targets.append(("self-reach" if n.id == first and n.id in local else "reach", chain))
            if n.id not in local and not (isinstance(p, ast.Attribute) and p.value is n
                                          or isinstance(p, ast.Call) and p.func is n):
                # an outside value used as it is (`sum(islice(GEN, 1))`, `v * SCALE`): checked on
                # every check for Python code a use of it runs (active_value; probeN)
                targets.append(("value", n.id))
        if isinstance(n, (ast.Import, ast.ImportFrom)) and not _pure_import(n):
            # (what an import in the body binds is not in the helper's globals, where the check
            # looks its calls up: `import heapq; heapq.heappush(h, v)` changes the caller's heap;
            # `math`'s and `cmath`'s functions compute values alone)
            reason = f"helper `{{label}}` imports inside its body (line {line}): its calls cannot be checked"
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            reason = f"helper `{{label}}` uses `global`/`nonlocal` (line {line})"
        elif isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)):
            reason = "helper `{label}` is a generator or coroutine"
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            reason = (f"helper `{{label}}` updates `{n.target.id}` in place with `{ast.unparse(n)}` "
                      f"(line {line})")
        elif isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, (ast.Store, ast.Del)):
            root = n.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in local - params):
                reason = f"helper `{{label}}` writes `{ast.unparse(n)}` (line {line})"
        elif isinstance(n, ast.Call) and _writes_argument(n, params):
            reason = (f"helper `{{label}}` calls `{ast.unparse(n.func)}` with `out=` or `inplace=` on its argument "
                      f"(line {line}): it writes into the caller's tensor")
        elif isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute) and module_input_call(n, params):
                # `self.act(x)` in a module's forward: a submodule that writes into its input
                # writes into the caller's rows (writes_input, checked on each call)
                targets.append(("input", ast.unparse(f)))
            if isinstance(f, ast.Attribute) and first is not None and _chain(f):
                chain = ast.unparse(f).split(".")
                if chain[0] == first and len(chain) > 1:
                    # `self.m(..)`, `self.sub.m(..)`: a method of the first parameter's object,
                    # checked where that object is known (helper_impurity's self_obj)
                    targets.append(("self", ".".join(chain)))
            if isinstance(f, ast.Attribute):
                root = f.value
                while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                    root = root.func if isinstance(root, ast.Call) else root.value
                mutates = f.attr in MUTATORS or f.attr.endswith("_") and not f.attr.endswith("__")
                if isinstance(root, ast.Name) and root.id not in local:
                    if _chain(f):
                        # `F.dropout(h, p, self.training)`: random only while the module trains
                        targets.append(("train-only" if _training_flag(n, params) else "attr", ast.unparse(f)))
                    elif mutates or not pure_tensor_method(f.attr):
                        # `LOGS["a"].append(v)`, `make().normal()`: a method of an outside value
                        # the scan cannot name
                        reason = f"helper `{{label}}` calls `{ast.unparse(f)}` (line {line}), which may have side effects"
                    continue
                if not isinstance(root, ast.Name) and mutates:
                    reason = f"helper `{{label}}` calls `{ast.unparse(f)}` (line {line}), which may have side effects"
                if isinstance(root, ast.Name) and root.id in params and (
                        mutates or f.attr in _NOT_BATCHABLE_METHODS - {"item", "tolist", "numpy", "cpu", "cuda"}):
                    reason = f"helper `{{label}}` modifies its argument with `.{f.attr}()` (line {line})"

            elif isinstance(f, ast.Name) and f.id not in local:
                targets.append(("name", f.id))
            elif isinstance(f, ast.Name) and f.id not in defined:
                reason = (f"helper `{{label}}` calls `{f.id}` (line {line}), a local name or argument whose "
                          f"callable it cannot check for side effects")
            elif not isinstance(f, (ast.Name, ast.Attribute, ast.Lambda)):
                # `getattr(log, "append")(v)`, `fns[0](v)`, `(a if c else b)(v)`
                reason = (f"helper `{{label}}` calls the value of `{ast.unparse(f)}` (line {line}), which it "
                          f"cannot check for side effects")
        if reason:
            break
    hit = (reason, tuple(dict.fromkeys(targets)))
    _static[code] = hit
    return hit


_CHAIN_STEPS: dict = {}


def _element_chain(n: ast.Name, parents) -> str | None:
    """The text of the longest read `n.a[0]["k"].b` a helper makes from the name `n` (attributes,
    and subscripts by constants; a subscript by anything else ends it, marked "any"), where it
    is read as a value: not the receiver of a method call (`CFG.f(x)`: the callable's own
    check), not a target. Its steps go to _CHAIN_STEPS. None where `n` is read as it is."""
    steps, top = [], n
    while True:
        p = parents.get(id(top))
        if isinstance(p, ast.Attribute) and p.value is top and isinstance(p.ctx, ast.Load):
            steps.append(p.attr)
        elif isinstance(p, ast.Subscript) and p.value is top and isinstance(p.ctx, ast.Load):
            key = p.slice
            if isinstance(key, ast.Constant) and type(key.value) in (int, str):
                steps.append(("key", key.value))
            else:
                steps.append(("any",))
                top = p
                break
        else:
            break
        top = p
    p = parents.get(id(top))
    if isinstance(p, ast.Call) and p.func is top and steps and type(steps[-1]) is str:
        steps.pop()            # (`CFG.inner.f(x)`: the object the method is read from)
    if not steps:
        return None
    text = ast.unparse(top) if steps[-1] != ("any",) else ast.unparse(top.value) + "[..]"
    _CHAIN_STEPS[text] = (n.id, tuple(steps))
    return text


def _reached_activity(obj, steps, label) -> str:
    """Why the value a helper reaches from `obj` along `steps` (_element_chain) runs Python code
    a different number of times batched than in the loop, or "": an object on the way whose class
    reads attributes or elements with Python code of its own (`__getattr__`, `__getattribute__`,
    `__getitem__`, a dict's `__missing__`: _read_hook), a getter (_getter_impurity), or the value
    itself (active_value). Read without running code (runtime._peek: stored attributes, dict, list
    and tuple entries); where the path goes through what only code would give, that code's own
    check. A subscript by a value ("any") checks one element of each type of a list, tuple or dict."""
    peek, unknown = _PEEK or _load_peek()
    anyway = steps[-1] == ("any",)
    cur = obj
    for k, st in enumerate(steps[:-1] if anyway else steps):
        hook = _read_hook(cur, type(st) is str)
        if hook:
            return hook
        nxt = peek(cur, (st,))
        if nxt is unknown:
            attrs = []
            for a in steps[k:]:
                if type(a) is not str:
                    break
                attrs.append(a)
            if attrs and not isinstance(cur, (torch.nn.Module, types.ModuleType)):
                return _getter_impurity(cur, attrs, label) or ""
            return ""
        if isinstance(nxt, torch.Tensor) and nxt is cur:
            break        # (a tensor on the way stands for the rest of the path)
        cur = nxt
    v = cur
    if anyway:
        hook = _read_hook(v, False)
        if hook:
            return hook
        if type(v) is dict:
            v = list(v.values())
        if type(v) is list or type(v) is tuple:
            for kind in set(map(type, v)):
                if kind in _PLAIN_VALUE_TYPES:
                    continue
                why = active_value(next(e for e in v if type(e) is kind))
                if why:
                    return f"an element of it is a {kind.__name__} object {why}"
        return ""
    if type(v) in _PLAIN_VALUE_TYPES:
        return ""
    why = active_value(v)
    return f"a {type(v).__name__} object {why}" if why else ""


_HOOKS: dict = {}
_ATTR_HOOKS = ("__getattr__", "__getattribute__")
_ITEM_HOOKS = ("__getitem__", "__missing__")


def _read_hook(holder, attribute: bool) -> str:
    """Why reading an attribute (or an element) of `holder` runs Python code of its class's own
    (`__getattr__`, `__getattribute__`; `__getitem__`, `__missing__`), or "". Classes of the known
    packages (torch's modules, dicts, lists) and modules read as they are. Judged once per class."""
    tp = type(holder)
    if tp in _PLAIN_VALUE_TYPES or issubclass(tp, (torch.nn.Module, torch.Tensor)):
        return ""       # (`issubclass` of its type: `isinstance` would read `__class__` through its hook)
    key = (tp, attribute)
    hit = _HOOKS.get(key)
    if hit is None:
        hit = ""
        for cls in tp.__mro__:
            if cls is object or _known_module(getattr(cls, "__module__", "") or ""):
                continue
            found = next((h for h in (_ATTR_HOOKS if attribute else _ITEM_HOOKS) if h in cls.__dict__), None)
            if found:
                hit = f"a {tp.__name__} object whose class defines `{found}` in Python (run once per iteration in the loop)"
                break
        if len(_HOOKS) < 4096:
            _HOOKS[key] = hit
    return hit


_PEEK: list = []


def _load_peek():
    from .runtime import _UNKNOWN, _peek      # (runtime imports this module)
    _PEEK[:] = [_peek, _UNKNOWN]
    return _PEEK


def _getter_impurity(obj, rest, label) -> str | None:
    """A reason a Python getter along `obj.a.b` (a property, another descriptor's `__get__`, a
    class's `__getattr__` where the attribute is not stored) is impure, or None; the values read
    where no such code runs."""
    cur = obj
    for attr in rest:
        kind = type(cur)
        found = None
        for klass in kind.__mro__:
            if attr in klass.__dict__:
                found = klass.__dict__[attr]
                break
        d = getattr(cur, "__dict__", None)
        if isinstance(found, property):
            if isinstance(found.fget, types.FunctionType):
                bad = helper_impurity(found.fget, f"{kind.__qualname__}.{attr}", self_obj=cur)
                if bad:
                    return bad if bad.startswith("helper") else f"helper `{label}`: {bad}"
            elif found.fget is not None and not _known_module(getattr(kind, "__module__", "") or ""):
                return f"helper `{label}` reads `{attr}`, a property it cannot check"
        elif hasattr(type(found), "__get__") and not isinstance(found, (types.FunctionType, staticmethod, classmethod)) \
                and not _known_module(getattr(type(found), "__module__", "") or ""):
            return f"helper `{label}` reads `{attr}` through a descriptor it cannot check"
        if isinstance(d, dict) and attr in d:
            cur = d[attr]
        elif found is not None and not hasattr(type(found), "__get__"):
            cur = found
        else:
            return None      # (a value a getter computes, checked above, or a module's member: stop here)
    return None


def _pure_import(n) -> bool:
    """`import math`, `from cmath import sqrt`: modules whose every function computes a value alone."""
    if isinstance(n, ast.Import):
        return all(a.name in ("math", "cmath") for a in n.names)
    return n.module in ("math", "cmath") and not n.level


def _writes_argument(call: ast.Call, params) -> bool:
    """`torch.mul(v, 3, out=v)` (any `out=`), or `F.relu(v, inplace=True)` on a parameter `v`."""
    kw = nm.in_place_keyword(call)
    if kw == "out":
        return True
    first = nm.first_arg_root(call)
    return kw == "inplace" and (first is None or isinstance(first, ast.Name) and first.id in params)


def module_input_call(call: ast.Call, params) -> bool:
    """`self.sub(x, ..)` with `x` (or a slice of it) a parameter of the forward, not `self`."""
    first = nm.first_arg_root(call)
    return isinstance(first, ast.Name) and first.id in params and first.id != "self"


_DROPOUTS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"}


def _training_flag(call: ast.Call, params) -> bool:
    """A functional dropout whose `training` argument is the module's own `self.training`."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr in _DROPOUTS) or not params:
        return False
    flag = next((k.value for k in call.keywords if k.arg == "training"), None)
    if flag is None and len(call.args) >= 3:
        flag = call.args[2]
    return (isinstance(flag, ast.Attribute) and flag.attr == "training" and isinstance(flag.value, ast.Name)
            and flag.value.id == "self" and "self" in params)


def _chain(node) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)
