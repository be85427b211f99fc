"""Generate small, seeded Python programs with loops over torch tensors, for differential
fuzzing of autovec.

`generate(seed)` returns a `Program`: the text of a complete module that defines `f(...)`
(the function under test, with a loop), any pure helpers it calls, and `make_inputs()`
(the arguments for `f`, drawn from a torch.Generator seeded by the program's seed). The same
seed always gives the same text. `kind` names the loop form: `vec/...` for loops autovec is
meant to vectorize, `exact/...` for loops it must leave computing exactly what they compute
(loop-carried state, side effects, random draws, exceptions...).

`generate(seed, family=...)` draws from another family of forms, so that the default family
keeps every seed's program: "rec" (`rec/...`: linear recurrences in the spellings autovec
scans, factors above 1 now and then) and "compile" (`compile/...`: sequential loops for the
compile fallback, and bodies it must refuse; their `make_inputs(variant=0)` gives other
inputs for variant 1). Their files are `<family>_seed_N.py`.

Each form is one small method of `Gen`; the shared pieces (inputs, per-iteration values,
conditions, list consumers) are methods too, so a form reads like the loop it writes.
"""
from __future__ import annotations

import importlib.util
import os
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_OUT = Path(tempfile.gettempdir()) / "autovec-fuzz"

FLOATS = ("float32", "float64")
INTS = ("int64",)


# ----------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Val:
    """A per-iteration value: its source text, dtype (our model of torch's promotion; a
    wrong guess only changes what is tested, never the verdict) and sizes."""
    expr: str
    dtype: str
    dims: tuple = ()       # source expressions of the sizes, e.g. ("x.shape[1]",)
    sizes: tuple = ()      # the same sizes as numbers, for inputs built in make_inputs

    def with_expr(self, expr, dtype=None):
        return Val(expr, dtype or self.dtype, self.dims, self.sizes)

    def scalar(self, expr, dtype=None):
        return Val(expr, dtype or self.dtype, (), ())

    @property
    def is_float(self):
        return self.dtype in FLOATS


def promote(a: str, b: str) -> str:
    order = ["bool", "uint8", "int16", "int32", "int64", "bfloat16", "float16", "float32", "float64"]
    return max(a, b, key=order.index)


# elementwise ops: (template, result dtype or None for "the same")
FLOAT_OPS = [("({} * 2.0)", None), ("({} + 1.5)", None), ("torch.exp({})", None), ("torch.tanh({})", None),
             ("torch.sigmoid({})", None), ("torch.relu({})", None), ("({0} * {0} - 0.5)", None),
             ("{}.abs()", None), ("torch.clamp({}, -1.0, 1.0)", None), ("(-{})", None),
             ("({} / 3.0)", None), ("({} ** 2)", None), ("torch.sin({})", None)]
INT_OPS = [("({} * 2)", None), ("({} + 1)", None), ("({} % 3)", None), ("{}.abs()", None),
           ("({} // 2)", None), ("torch.clamp({}, min=0)", None), ("({} / 2)", "float32"),
           ("({}.float() * 0.5)", "float32"), ("({0} * {0})", None)]
BOOL_OPS = [("(~{})", None), ("({}.long() * 3)", "int64"), ("{}.float()", "float32"),
            ("torch.logical_not({})", None), ("{}.int()", "int32")]

HELPERS = {
    "scale": "def scale(r):\n    return r * 2.0 + 1.0\n",
    "center": "def center(r):\n    return r - r.mean()\n",
    "unit": "def unit(r):\n    return r / (r.norm() + 1e-6)\n",
    "score": "def score(a, b):\n    return (a * b).sum()\n",
    "squash": "def squash(r):\n    s = torch.sigmoid(r)\n    return s * (1.0 - s)\n",
}

WEIGHT_HELPER = '''def _weight(g, shape, dtype, scale=0.5, grad=False):
    """A weight drawn from `g`, scaled; a leaf that requires grad if asked."""
    w = torch.randn(shape, generator=g, dtype=dtype) * scale
    return w.requires_grad_() if grad else w
'''

TENSOR_HELPER = '''
def _tensor(g, shape, dtype, layout="contiguous", grad=False, special=False, low=-4, high=5):
    """A random tensor; `layout` "t" (transposed), "step" (every other row) or "expand"
    (one row repeated) gives a non-contiguous one; `special` plants nan, inf and -0.0."""
    full = list(shape)
    if layout == "t":
        full = full[::-1]
    elif layout == "step":
        full[0] = 2 * full[0]
    elif layout == "expand":
        full = full[1:]
    if dtype.is_floating_point:
        t = torch.randn(full, generator=g, dtype=dtype)
    elif dtype == torch.bool:
        t = torch.rand(full, generator=g) > 0.5
    else:
        t = torch.randint(low, high, full, generator=g, dtype=dtype)
    if special and t.numel():
        k = torch.randint(0, t.numel(), (3,), generator=g).tolist()
        flat = t.view(-1)
        flat[k[0]], flat[k[1]], flat[k[2]] = float("nan"), float("inf"), -0.0
    if layout == "t":
        t = t.t()
    elif layout == "step":
        t = t[::2]
    elif layout == "expand":
        t = t.expand(*shape)
    return t.detach().requires_grad_() if grad else t


def _seeded(g, module, grad):
    """`module` with parameters drawn from `g` (its own init uses the global RNG)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            p.requires_grad_(grad)
    return module
'''


@dataclass(frozen=True)
class Tensor:
    """An input tensor of `f`: its name, dtype and shape (n first)."""
    name: str
    dtype: str
    shape: tuple

    def row(self, expr: str) -> Val:
        dims = tuple(f"{self.name}.shape[{k}]" for k in range(1, len(self.shape)))
        return Val(expr, self.dtype, dims, tuple(self.shape[1:]))


@dataclass
class Loop:
    """An indexed loop header: lines before the body, the index name, the current row of
    the main tensor, and the line that ends an iteration (the while loop's increment)."""
    head: list
    index: str
    row: Val
    tail: list


# ----------------------------------------------------------------------------- programs


@dataclass(frozen=True)
class Program:
    seed: int
    kind: str          # "vec/<form>", "exact/<form>", "rec/<form>" or "compile/<form>"
    source: str

    @property
    def vectorizable(self) -> bool:
        return self.kind.startswith("vec/")

    @property
    def family(self) -> str:
        """"default" (vec/ and exact/ forms), "rec" or "compile"."""
        fam = self.kind.split("/")[0]
        return fam if fam in FAMILIES else "default"

    @property
    def stem(self) -> str:
        """The file and module name: the default family's are seed_N, the others' <family>_seed_N."""
        return f"seed_{self.seed}" if self.family == "default" else f"{self.family}_seed_{self.seed}"

    @property
    def module_name(self) -> str:
        return f"avfuzz_{self.stem}"

    def path(self, out_dir=None) -> Path:
        return Path(out_dir or DEFAULT_OUT) / f"{self.stem}.py"

    def write(self, out_dir=None) -> Path:
        """Write the source to its file (atomically: other runs may write the same seed)."""
        path = self.path(out_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.read_text() == self.source:
            return path
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(self.source)
        os.replace(tmp, path)
        return path

    def load(self, out_dir=None):
        """Import the program from its file (so inspect.getsource works); a fresh module."""
        path = self.write(out_dir)
        name = self.module_name
        sys.modules.pop(name, None)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    def reset(self, mod):
        """Run the module again in its own namespace: fresh globals for the next call."""
        exec(compile(self.source, mod.__file__, "exec"), mod.__dict__)

    def make_inputs(self, out_dir=None, variant=0) -> tuple:
        mod = self.load(out_dir)
        return mod.make_inputs(variant) if variant else mod.make_inputs()


class Gen:
    """Builds one program from a seeded random stream."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.params: list[str] = []
        self.inputs: list[str] = []          # lines of make_inputs
        self.aliases: dict[str, str] = {}    # param -> what make_inputs passes (an alias of another)
        self.helpers: dict[str, str] = {}
        self.lines: list[str] = []
        self.n = self.pick_n()
        self.d = self.rng.choice([1, 2, 3, 4, 5])
        self.no_grad = False                 # set by forms that write into their arguments
        self.n_delta = self.pick([0, 0, 0, 0, -1, 1])  # an `n` argument may be off x's length
        self.variants = False                # make_inputs(variant) (family "compile")
        self.rec_tail: list[str] = []

    # -------------------------------------------------------------- randomness

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, seq):
        return self.rng.choice(list(seq))

    def pick_n(self) -> int:
        r = self.rng.random()
        if r < 0.08:
            return 0
        if r < 0.2:
            return 1
        if r < 0.5:
            return self.rng.randint(2, 5)
        if r < 0.8:
            return self.rng.randint(6, 20)
        return self.rng.randint(21, 50)

    # -------------------------------------------------------------- emitting

    def emit(self, depth: int, text: str):
        self.lines.append("    " * depth + text)

    def emit_all(self, depth: int, lines):
        for line in lines:
            self.emit(depth, line)

    def helper(self, name: str) -> str:
        self.helpers[name] = HELPERS[name]
        return name

    # -------------------------------------------------------------- inputs

    def tensor(self, name, shape, dtype, *, readonly=True, grad_ok=True, low=-4, high=5, special_p=None,
               grad_p=None) -> Tensor:
        """An input tensor; sometimes non-contiguous, sometimes requiring grad, sometimes with
        nan/inf planted (floats; with probability `special_p`, 0.12 unless given)."""
        layouts = ["contiguous"] * 6 + ["step"]
        if len(shape) == 2:
            layouts.append("t")
        if readonly and len(shape) >= 1 and shape[0] > 1:
            layouts.append("expand")
        layout = self.pick(layouts)
        grad = dtype in FLOATS and grad_ok and not self.no_grad and self.chance(0.3 if grad_p is None else grad_p)
        special = dtype in FLOATS and self.chance(0.12 if special_p is None else special_p)
        opts = ""
        if layout != "contiguous":
            opts += f", layout={layout!r}"
        if grad:
            opts += ", grad=True"
        if special:
            opts += ", special=True"
        if dtype == "uint8":
            low = max(low, 0)
        if dtype not in FLOATS and dtype != "bool" and (low, high) != (-4, 5):
            opts += f", low={low}, high={high}"
        self.param(name, f"_tensor(g, {tuple(shape)!r}, torch.{dtype}{opts})")
        return Tensor(name, dtype, tuple(shape))

    def param(self, name, expr):
        self.params.append(name)
        self.inputs.append(f"{name} = {expr}")

    def main(self, name="x", dtypes=None, rank=None, **kw) -> Tensor:
        """The tensor a loop walks over: (n,) or (n, d)."""
        dtype = self.pick(dtypes or (FLOATS[0], FLOATS[0], FLOATS[-1], INTS[0], "bool"))
        rank = rank or self.pick([1, 2, 2])
        shape = (self.n,) if rank == 1 else (self.n, self.d)
        return self.tensor(name, shape, dtype, **kw)

    def like(self, x: Tensor, name: str, rows=None, dtype=None, **kw) -> Tensor:
        """A second input with x's row shape (and x's dtype, or another)."""
        dtype = dtype or (x.dtype if self.chance(0.8) else self.pick(FLOATS + INTS))
        shape = ((self.n if rows is None else rows),) + x.shape[1:]
        return self.tensor(name, shape, dtype, **kw)

    def count(self, x: Tensor) -> str:
        """The trip-count expression for x's first dimension."""
        form = self.pick(["{x}.shape[0]", "len({x})", "{x}.size(0)", "{x}.shape[0]", "n"])
        if form == "n":
            if "n" not in self.params:
                n = max(x.shape[0] + self.n_delta, 0)
                self.param("n", f"torch.tensor({n})" if self.chance(0.1) else str(n))
            return "n"
        return form.format(x=x.name)

    # -------------------------------------------------------------- per-iteration values

    def elementwise(self, v: Val) -> Val:
        ops = FLOAT_OPS if v.is_float else BOOL_OPS if v.dtype == "bool" else INT_OPS
        tmpl, dtype = self.pick(ops)
        return v.with_expr(tmpl.format(v.expr), dtype)

    def combine(self, a: Val, b: Val) -> Val:
        """A binary op of two rows of the same shape."""
        if "bool" in (a.dtype, b.dtype):
            if a.dtype == b.dtype == "bool":
                tmpl, dtype = self.pick([("({} & {})", "bool"), ("({} ^ {})", "bool"), ("({} | {})", "bool")])
                return a.with_expr(tmpl.format(a.expr, b.expr), dtype)
            return a.with_expr(f"({a.expr} * {b.expr})", promote(a.dtype, b.dtype))
        tmpl = self.pick(["({} + {})", "({} * {})", "({} - {})", "(({} - {}) ** 2)", "torch.maximum({}, {})"])
        return a.with_expr(tmpl.format(a.expr, b.expr), promote(a.dtype, b.dtype))

    def with_index(self, v: Val, i: str) -> Val:
        tmpl, dtype = self.pick([("({} * {})", None), ("({} + {})", None), ("({} * ({} + 1))", None),
                                 ("({} - 0.5 * {})", "float32")])
        dtype = "int64" if v.dtype in ("bool", "int32") and dtype is None else dtype
        if dtype == "float32" and v.dtype == "float64":
            dtype = "float64"
        return v.with_expr(tmpl.format(v.expr, i), dtype)

    def reduce(self, v: Val) -> Val:
        """A 0-d value from a row."""
        if not v.dims:
            if self.chance(0.5):
                return v
            return v.scalar(f"{v.expr}.sum()", "int64" if v.dtype in ("bool", "int32") else v.dtype)
        if v.is_float:
            opts = ["sum", "mean", "norm", "amax", "dot", "helper", "max"]
        elif v.dtype == "bool":
            opts = ["sum", "any", "all"]
        else:
            opts = ["sum", "max", "positive"]
        op = self.pick(opts)
        if op == "dot":
            w = self.vector("wv", v)
            return v.scalar(f"torch.dot({v.expr}, {w})")
        if op == "helper":
            return v.scalar(f"{self.helper('score')}({v.expr}, {v.expr})")
        if op == "positive":
            return v.scalar(f"({v.expr} > 0).sum()", "int64")
        if op in ("any", "all"):
            return v.scalar(f"{v.expr}.{op}()", "bool")
        dtype = "int64" if op == "sum" and v.dtype in ("bool", "int32") else v.dtype
        return v.scalar(f"{v.expr}.{op}()", dtype)

    def vector(self, name: str, like: Val) -> str:
        """A loop-invariant vector input of the row's size and dtype (e.g. `torch.dot`'s `w`)."""
        if name not in self.params:
            self.tensor(name, like.sizes, like.dtype, readonly=True)
        return name

    def row_op(self, v: Val) -> Val:
        """A row-to-row op that is not elementwise (softmax, matmul, centring, a helper)."""
        if not v.is_float:
            return v.with_expr(f"({v.expr} - {v.expr}.min())") if v.dtype != "bool" else v
        op = self.pick(["softmax", "matmul", "matmul", "center", "unit", "scale", "squash", "norm_div"])
        if op == "softmax":
            return v.with_expr(f"torch.softmax({v.expr}, dim=0)")
        if op == "matmul":
            k = self.rng.randint(1, 4)
            if "W" not in self.params:
                self.tensor("W", (v.sizes[0], k), v.dtype)
            return Val(f"({v.expr} @ W)", v.dtype, ("W.shape[1]",), (k,))
        if op == "norm_div":
            return v.with_expr(f"({v.expr} / ({v.expr}.norm() + 1e-6))")
        return v.with_expr(f"{self.helper(op)}({v.expr})")

    def value(self, row: Val, index=None, others=(), want="any") -> Val:
        """A per-iteration value built from `row` (and other rows, and the index as a number).
        want: "any", "scalar" (0-d) or "same" (the row's shape)."""
        v = row
        if self.chance(0.7):
            v = self.elementwise(v)
        if others and self.chance(0.7):
            v = self.combine(v, self.pick(others))
        if index and self.chance(0.3):
            v = self.with_index(v, index)
        if self.chance(0.2):
            v = self.invariant(v, keep_dims=want != "any")
        if want == "scalar" or (want == "any" and v.dims and self.chance(0.35)):
            return self.reduce(v)
        if v.dims and (want == "any" and self.chance(0.3) or want == "same" and self.chance(0.2)):
            v2 = self.row_op(v)
            if want == "any" or v2.dims == v.dims:
                v = v2
        if self.chance(0.2):
            v = self.elementwise(v)
        return v

    def invariant(self, v: Val, keep_dims: bool) -> Val:
        """`v` combined with a loop-invariant argument: a 0-d tensor, a vector or a Python
        number, of any dtype (promotion treats a 0-d row and a batch of rows differently)."""
        form = self.pick(["0d", "0d", "number"] + ([] if keep_dims and not v.dims else ["vector"]))
        dtype = self.pick(["float32", "float64", "int64", "bool"])
        op = self.pick(["*", "+", "*"])
        name = self.fresh("c")
        if form == "number":
            self.param(name, self.pick(["2", "-1", "0.5", "1.25", "True"]))
            return v.with_expr(f"({v.expr} {op} {name})")
        if form == "0d":
            value = {"bool": "True", "int64": "3"}.get(dtype, "1.5")
            self.param(name, f"torch.tensor({value}, dtype=torch.{dtype})")
            return v.with_expr(f"({v.expr} {op} {name})", promote(v.dtype, dtype))
        size = v.sizes[0] if v.dims else self.d
        self.tensor(name, (size,), dtype)
        dims = v.dims or (f"{name}.shape[0]",)
        return Val(f"({v.expr} {op} {name})", promote(v.dtype, dtype), dims, (size,))

    def fresh(self, prefix: str) -> str:
        k = 0
        while f"{prefix}{k}" in self.params:
            k += 1
        return f"{prefix}{k}"

    def item(self, v: Val) -> Val:
        """`.item()` of a 0-d value: a Python number."""
        py = "float" if v.is_float else "bool" if v.dtype == "bool" else "int"
        return v.scalar(f"{v.expr}.item()", "py" + py)

    def cond(self, row: Val, index=None, others=()) -> str:
        """A per-iteration condition on the data (sometimes on the index only)."""
        if index and self.chance(0.12):
            return self.pick([f"{index} % 2 == 0", f"{index} > 0", f"{index} < 3", f"{index} == 0"])
        s = self.value(row, index, others, want="scalar")
        if s.dtype == "bool":
            return s.expr if self.chance(0.5) else f"not {s.expr}"
        op = self.pick([">", ">", "<", ">=", "=="])
        t = self.pick(["0", "0.5", "1", "-0.25"]) if s.is_float else self.pick(["0", "1", "2", "3"])
        if self.chance(0.15):
            return f"{s.expr}.item() {op} {t}"
        return f"{s.expr} {op} {t}"

    # -------------------------------------------------------------- outputs

    def alloc(self, count: str, v: Val, full: bool) -> str:
        """A preallocation for `out[i] = v` (torch.empty only when every row is written)."""
        dims = ", ".join((count,) + v.dims)
        dtype = v.dtype if not v.dtype.startswith("py") else {"pyfloat": "float64", "pyint": "int64",
                                                                 "pybool": "bool"}[v.dtype]
        if self.chance(0.15):
            dtype = self.pick(["float32", "float64", "int64"])
        full = full and not self.n_delta   # `range(n)` may not cover every row
        ctor = self.pick(["empty", "zeros", "zeros"] if full else ["zeros", "zeros", "ones"])
        return f"torch.{ctor}({dims}, dtype=torch.{dtype})"

    def consume(self, lst: str, v: Val) -> str:
        """What the loop's list becomes: the return expression."""
        opts = ["torch.stack({l})", "{l}", "torch.stack({l})"]
        if v.dims:
            opts.append("torch.cat({l})")
        else:
            opts += ["torch.tensor({l})", "torch.tensor({l})"]
        if v.dtype.startswith("py"):
            opts = ["{l}", "torch.tensor({l})", "sum({l})"]
        if self.chance(0.1):
            return f"{lst}, len({lst})"
        return self.pick(opts).format(l=lst)

    def accum_init(self, v: Val) -> str:
        if v.dtype.startswith("py"):
            return self.pick(["0.0", "0", "0.0"])
        if not v.dims:
            return self.pick(["0.0", "0", "torch.tensor(0.0)", f"torch.zeros((), dtype=torch.{v.dtype})"])
        return self.pick([f"torch.zeros({', '.join(v.dims)}, dtype=torch.{v.dtype})", "0.0",
                          f"torch.zeros({', '.join(v.dims)})"])

    # -------------------------------------------------------------- loops

    def indexed_loop(self, x: Tensor, depth=1, allow_while=True) -> Loop:
        """`for i in range(N)`, `for i, row in enumerate(x)` or a counted `while`."""
        i = self.pick(["i", "i", "k", "t"])
        form = self.pick(["range", "range", "range", "enumerate"] + (["while"] if allow_while else []))
        count = self.count(x)
        if form == "enumerate":
            return Loop([f"for {i}, row in enumerate({x.name}):"], i, x.row("row"), [])
        row = x.row(f"{x.name}[{i}]" if len(x.shape) == 1 or self.chance(0.7) else f"{x.name}[{i}, :]")
        if form == "while":
            return Loop([f"{i} = 0", f"while {i} < {count}:"], i, row, [f"{i} += 1"])
        return Loop([f"for {i} in range({count}):"], i, row, [])

    # ============================================================== vectorizable forms

    def vec_prealloc(self):
        x = self.main()
        others = [self.like(x, "y").row("")] if self.chance(0.3) else []
        loop = self.indexed_loop(x)
        others = [o.with_expr(f"y[{loop.index}]") for o in others]
        v = self.value(loop.row, loop.index, others)
        self.emit(1, f"out = {self.alloc(self.count(x), v, full=True)}")
        self.emit_all(1, loop.head)
        self.emit(2, f"out[{loop.index}] = {v.expr}")
        self.emit_all(2, loop.tail)
        self.emit(1, "return out")

    def vec_prealloc_arg(self):
        self.no_grad = self.chance(0.5)
        x = self.main()
        loop = self.indexed_loop(x)
        v = self.value(loop.row, loop.index)
        dtype = v.dtype if not v.dtype.startswith("py") else "float64"
        shape = (self.n,) + v.sizes
        if self.chance(0.2) and len(shape) == 2 and v.dims:
            self.param("out", f"torch.zeros({shape[::-1]!r}, dtype=torch.{dtype}).t()")
        else:
            self.param("out", f"torch.zeros({shape!r}, dtype=torch.{dtype})")
        self.emit_all(1, loop.head)
        self.emit(2, f"out[{loop.index}] = {v.expr}")
        self.emit_all(2, loop.tail)
        self.emit(1, self.pick(["return out", "return None", "return out.sum()"]))

    def vec_range_step(self):
        """`range(a, b, step)`, with offsets `x[i - 1]` / `x[i + 1]` the bounds allow."""
        x = self.main()
        a = self.pick([0, 1, 1, 2])
        hi = self.pick(["", " - 1"])
        step = self.pick([1, 2, 3])
        count = self.count(x)
        i = "i"
        row = x.row(f"x[{i}]")
        others = []
        if a >= 1:
            others.append(x.row(f"x[{i} - 1]"))
        if hi:
            others.append(x.row(f"x[{i} + 1]"))
        v = self.value(row, i, others)
        self.emit(1, f"out = {self.alloc(count, v, full=False)}")
        self.emit(1, f"for {i} in range({a}, {count}{hi}, {step}):" if (a or step > 1 or hi)
                  else f"for {i} in range({count}):")
        self.emit(2, f"out[{i}] = {v.expr}")
        self.emit(1, "return out")

    def vec_for_row(self):
        x = self.main()
        v = self.value(x.row("row"))
        self.emit(1, "res = []")
        self.emit(1, f"for row in {x.name}:")
        self.emit(2, f"res.append({v.expr})")
        self.emit(1, f"return {self.consume('res', v)}")

    def vec_zip(self):
        x = self.main()
        rows = self.n if self.chance(0.8) else self.n + self.rng.randint(1, 2)
        y = self.like(x, "y", rows=rows)
        v = self.value(x.row("a"), others=[y.row("b")])
        names = ["x", "y"]
        if self.chance(0.2):
            z = self.like(x, "z")
            v = self.combine(v, z.row("c")) if v.dims == z.row("c").dims else v
            names.append("z")
        targets = ", ".join("abc"[:len(names)])
        if self.chance(0.3):
            s = self.reduce(v) if v.dims and self.chance(0.5) else v
            self.emit(1, f"s = {self.accum_init(s)}")
            self.emit(1, f"for {targets} in zip({', '.join(names)}):")
            self.emit(2, f"s += {s.expr}")
            self.emit(1, "return s")
            return
        self.emit(1, "res = []")
        self.emit(1, f"for {targets} in zip({', '.join(names)}):")
        self.emit(2, f"res.append({v.expr})")
        self.emit(1, f"return {self.consume('res', v)}")

    def vec_enumerate(self):
        x = self.main()
        start = self.pick(["", "", ", start=1"])
        v = self.value(x.row("row"), "i")
        if start or self.chance(0.4):
            self.emit(1, "res = []")
            self.emit(1, f"for i, row in enumerate({x.name}{start}):")
            self.emit(2, f"res.append({v.expr})")
            self.emit(1, f"return {self.consume('res', v)}")
            return
        self.emit(1, f"out = {self.alloc('len(' + x.name + ')', v, full=True)}")
        self.emit(1, f"for i, row in enumerate({x.name}):")
        self.emit(2, f"out[i] = {v.expr}")
        self.emit(1, "return out")

    def vec_while(self):
        x = self.main()
        count = self.count(x)
        v = self.value(x.row("x[i]"), "i")
        self.emit(1, f"out = {self.alloc(count, v, full=True)}")
        self.emit(1, "i = 0")
        self.emit(1, f"while i < {count}:")
        self.emit(2, f"out[i] = {v.expr}")
        self.emit(2, "i += 1")
        self.emit(1, "return out")

    def vec_columns(self):
        """`out[:, j] = ...` column writes."""
        x = self.main(rank=2)
        col = Val(f"x[:, j]", x.dtype, ("x.shape[0]",), (self.n,))
        v = self.value(col, "j", want="same")
        if v.is_float and self.chance(0.5):
            v = v.with_expr(f"({v.expr} - x[:, j].float().mean())")
        self.emit(1, self.pick(["out = torch.zeros_like(x)", "out = torch.empty_like(x)",
                                f"out = torch.zeros(x.shape, dtype=torch.{v.dtype})"]))
        self.emit(1, "for j in range(x.shape[1]):")
        self.emit(2, f"out[:, j] = {v.expr}")
        self.emit(1, "return out")

    def vec_accumulate(self):
        x = self.main()
        loop = self.indexed_loop(x)
        v = self.value(loop.row, loop.index)
        if not v.dims and self.chance(0.3):
            v = self.item(v)
        op = self.pick(["s += {}", "s = s + {}", "s -= {}", "s = {} + s"])
        self.emit(1, f"s = {self.accum_init(v)}")
        self.emit_all(1, loop.head)
        self.emit(2, op.format(v.expr))
        self.emit_all(2, loop.tail)
        self.emit(1, "return s")

    def vec_product(self):
        x = self.main(dtypes=FLOATS)
        loop = self.indexed_loop(x)
        v = self.value(loop.row, loop.index, want=self.pick(["scalar", "same"]))
        # keep the factors near 1 so that reassociation stays within tolerance
        factor = v.with_expr(f"(1.0 + 0.1 * torch.tanh({v.expr}))")
        if not factor.dims and self.chance(0.3):
            factor = self.item(factor)
        init = "1.0" if self.chance(0.5) or not factor.dims else f"torch.ones({', '.join(factor.dims)}, dtype=torch.{x.dtype})"
        self.emit(1, f"p = {init}")
        self.emit_all(1, loop.head)
        self.emit(2, self.pick(["p *= {}", "p = p * {}"]).format(factor.expr))
        self.emit_all(2, loop.tail)
        self.emit(1, "return p")

    def vec_count(self):
        x = self.main()
        loop = self.indexed_loop(x)
        c = self.cond(loop.row, loop.index)
        self.emit(1, "c = 0")
        self.emit_all(1, loop.head)
        self.emit(2, f"if {c}:")
        self.emit(3, self.pick(["c += 1", "c += 1", "c = c + 1", "c += 2"]))
        self.emit_all(2, loop.tail)
        self.emit(1, "return c")

    def vec_running_max(self):
        x = self.main(dtypes=("float32", "float64", "int64"))
        loop = self.indexed_loop(x)
        v = self.value(loop.row, loop.index, want="scalar")
        if self.chance(0.5):
            v = self.item(v)
        fn = self.pick(["max", "max", "min"])
        init = self.pick(['float("-inf")' if fn == "max" else 'float("inf")', "0", "0.0"])
        self.emit(1, f"best = {init}")
        self.emit_all(1, loop.head)
        self.emit(2, self.pick([f"best = {fn}(best, {{}})", f"best = {fn}({{}}, best)"]).format(v.expr))
        self.emit_all(2, loop.tail)
        self.emit(1, "return best")

    def vec_argbest(self):
        x = self.main(dtypes=("float32", "float64", "int64", "int64"))
        loop = self.indexed_loop(x)
        v = self.value(loop.row, loop.index, want="scalar")
        if self.chance(0.5):
            v = self.item(v)
        op = self.pick([">", ">=", "<", "<="])
        init = 'float("-inf")' if op[0] == ">" else 'float("inf")'
        self.emit(1, f"best, idx = {init}, -1")
        self.emit_all(1, loop.head)
        self.emit(2, f"v = {v.expr}")
        self.emit(2, f"if v {op} best:")
        if self.chance(0.5):
            self.emit(3, f"best, idx = v, {loop.index}")
        else:
            self.emit(3, "best = v")
            self.emit(3, f"idx = {loop.index}")
        self.emit_all(2, loop.tail)
        self.emit(1, "return best, idx")

    def vec_filter(self):
        x = self.main()
        loop = self.indexed_loop(x)
        c = self.cond(loop.row, loop.index)
        v = self.value(loop.row, loop.index)
        if not v.dims and self.chance(0.3):
            v = self.item(v)
        self.emit(1, "res = []")
        self.emit_all(1, loop.head)
        self.emit(2, f"if {c}:")
        self.emit(3, f"res.append({v.expr})")
        self.emit_all(2, loop.tail)
        self.emit(1, f"return {self.consume('res', v)}")

    def vec_if_else(self):
        x = self.main()
        loop = self.indexed_loop(x)
        c = self.cond(loop.row, loop.index)
        a = self.value(loop.row, loop.index, want="same")
        b = self.value(loop.row, loop.index, want="same")
        i = loop.index
        shape = self.pick(["store", "assign", "default", "append"])
        if shape == "append":
            self.emit(1, "res = []")
        else:
            self.emit(1, f"out = {self.alloc(self.count(x), a, full=True)}")
        self.emit_all(1, loop.head)
        if shape == "store":
            self.emit_all(2, [f"if {c}:", f"    out[{i}] = {a.expr}", "else:", f"    out[{i}] = {b.expr}"])
        elif shape == "default":
            self.emit_all(2, [f"v = {b.expr}", f"if {c}:", f"    v = {a.expr}", f"out[{i}] = v"])
        else:
            self.emit_all(2, [f"if {c}:", f"    v = {a.expr}", "else:", f"    v = {b.expr}"])
            self.emit(2, "res.append(v)" if shape == "append" else f"out[{i}] = v")
        self.emit_all(2, loop.tail)
        self.emit(1, f"return {self.consume('res', a)}" if shape == "append" else "return out")

    def vec_continue(self):
        x = self.main()
        loop = self.indexed_loop(x, allow_while=False)
        c = self.cond(loop.row, loop.index)
        v = self.value(loop.row, loop.index)
        shape = self.pick(["store", "append", "accum"])
        self.emit(1, {"store": f"out = {self.alloc(self.count(x), v, full=False)}", "append": "res = []",
                      "accum": f"s = {self.accum_init(v)}"}[shape])
        self.emit_all(1, loop.head)
        self.emit(2, f"if {c}:")
        self.emit(3, "continue")
        self.emit(2, {"store": f"out[{loop.index}] = {v.expr}", "append": f"res.append({v.expr})",
                      "accum": f"s += {v.expr}"}[shape])
        self.emit(1, {"store": "return out", "append": f"return {self.consume('res', v)}", "accum": "return s"}[shape])

    def scatter_inputs(self):
        k = self.rng.randint(1, 6)
        low = -k if self.chance(0.2) else 0
        self.tensor("idx", (self.n,), "int64", low=low, high=k)
        w = self.main("w", dtypes=("float32", "float64", "int64"), rank=self.pick([1, 1, 2]))
        return k, w

    def vec_scatter_add(self):
        k, w = self.scatter_inputs()
        dims = ", ".join((str(k),) + tuple(f"w.shape[{d}]" for d in range(1, len(w.shape))))
        val = self.pick(["w[i]", "w[i]", "w[i] * 2", "1"])
        op = self.pick(["+=", "+=", "-="])
        self.emit(1, f"hist = torch.zeros({dims}, dtype=w.dtype)")
        self.emit(1, f"for i in range({self.count(w)}):")
        self.emit(2, f"hist[idx[i]] {op} {val}")
        self.emit(1, "return hist")

    def vec_scatter_set(self):
        k, w = self.scatter_inputs()
        dims = ", ".join((str(k),) + tuple(f"w.shape[{d}]" for d in range(1, len(w.shape))))
        v = self.value(w.row("w[i]"), "i", want="same")
        self.emit(1, f"out = torch.zeros({dims}, dtype=torch.{v.dtype})")
        self.emit(1, "for i in range(idx.shape[0]):")
        self.emit(2, f"out[idx[i]] = {v.expr}")
        self.emit(1, "return out")

    def vec_cat_accum(self):
        x = self.main()
        piece = self.pick(["x[i:i + 1]", "x[i].unsqueeze(0)", "x[i:i + 1] * 2", "x[i].reshape(1, -1)"])
        if len(x.shape) == 1 and "reshape" in piece:
            piece = "x[i].reshape(1)"
        rest = ", ".join(f"x.shape[{d}]" for d in range(1, len(x.shape)))
        init = self.pick(["x[:0]", f"torch.zeros(0{', ' + rest if rest else ''}, dtype=x.dtype)",
                          f"torch.empty(0{', ' + rest if rest else ''})"])
        self.emit(1, f"acc = {init}")
        self.emit(1, f"for i in range({self.count(x)}):")
        self.emit(2, f"acc = torch.cat([acc, {piece}])")
        self.emit(1, "return acc")

    def vec_comprehension(self):
        x = self.main()
        if self.chance(0.5):
            gen, row, i = f"for row in {x.name}", x.row("row"), None
        else:
            gen, row, i = f"for i in range({self.count(x)})", x.row(f"{x.name}[i]"), "i"
        form = self.pick(["stack", "stack", "tensor", "list", "cat", "filtered"])
        if form == "tensor":
            v = self.value(row, i, want="scalar")
            v = self.item(v) if self.chance(0.5) else v
            self.emit(1, f"return torch.tensor([{v.expr} {gen}])")
            return
        v = self.value(row, i, want="same" if form == "cat" else "any")
        if form == "cat" and not v.dims:
            v = v.with_expr(f"{v.expr}.reshape(1)")
        if form == "filtered":
            c = self.cond(row, i)
            self.emit(1, f"return [{v.expr} {gen} if {c}]")
            return
        wrap = {"stack": "torch.stack([{}])", "list": "[{}]", "cat": "torch.cat([{}])"}[form]
        self.emit(1, "return " + wrap.format(f"{v.expr} {gen}"))

    def vec_genexp(self):
        x = self.main()
        fn = self.pick(["sum", "sum", "max", "min", "any", "all"])
        v = self.value(x.row(f"{x.name}[i]"), "i", want="scalar")
        if fn in ("any", "all"):
            v = v.scalar(f"({v.expr} > 0)", "bool") if v.dtype != "bool" else v
        if self.chance(0.4):
            v = self.item(v)
        if fn == "sum" and self.chance(0.3):
            v = self.value(x.row(f"{x.name}[i]"), "i", want="same")
        self.emit(1, f"return {fn}({v.expr} for i in range({self.count(x)}))")

    def vec_nested(self):
        if self.chance(0.4):
            x = self.main(rank=2)
            v = self.value(Val("x[i, j]", x.dtype), "j")
            self.emit(1, f"out = {self.alloc('x.shape[0], x.shape[1]', v, full=True)}")
            self.emit(1, "for i in range(x.shape[0]):")
            self.emit(2, "for j in range(x.shape[1]):")
            self.emit(3, f"out[i, j] = {v.expr}")
            self.emit(1, "return out")
            return
        x = self.main(dtypes=FLOATS)
        y = self.tensor("y", (self.rng.randint(0, 6),) + x.shape[1:], x.dtype)
        a, b = x.row("x[i]"), y.row("y[j]")
        if a.dims:
            pair = self.pick([f"(x[i] - y[j]).norm()", f"torch.dot(x[i], y[j])", f"(x[i] * y[j]).sum()",
                              f"{self.helper('score')}(x[i], y[j])"])
        else:
            pair = self.pick(["x[i] + y[j]", "x[i] * y[j] - 1.0", "torch.maximum(x[i], y[j])"])
        self.emit(1, "out = torch.zeros(x.shape[0], y.shape[0], dtype=x.dtype)")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, "for j in range(y.shape[0]):")
        self.emit(3, f"out[i, j] = {pair}")
        self.emit(1, "return out")

    def vec_live_out(self):
        """Names the loop leaves behind: the index, the row, a temporary (unbound when n == 0)."""
        x = self.main()
        loop = self.indexed_loop(x)
        v = self.value(loop.row, loop.index)
        if self.chance(0.3):
            self.emit(1, f"{loop.index} = -1")
        self.emit(1, f"out = {self.alloc(self.count(x), v, full=True)}")
        self.emit_all(1, loop.head)
        self.emit(2, f"tmp = {v.expr}")
        self.emit(2, f"out[{loop.index}] = tmp")
        self.emit_all(2, loop.tail)
        extra = self.pick([loop.index, "tmp", loop.row.expr if loop.row.expr == "row" else loop.index])
        self.emit(1, f"return out, {extra}")

    def vec_accumulate_arg(self):
        """`acc += v` into a tensor the caller passed: an in-place effect on an argument."""
        self.no_grad = True
        x = self.main(dtypes=("float32", "float64", "int64"))
        loop = self.indexed_loop(x)
        v = self.value(loop.row, loop.index, want="same")
        self.param("acc", f"torch.zeros({v.sizes!r}, dtype=torch.{self.pick([x.dtype, 'float64'])})")
        self.emit_all(1, loop.head)
        self.emit(2, self.pick(["acc += {}", "acc -= {}", "acc.add_({})"]).format(v.expr))
        self.emit_all(2, loop.tail)
        self.emit(1, self.pick(["return acc", "return None", "return acc.sum()"]))

    def vec_accumulate_view(self):
        """An accumulator that starts as a view of the input (`s = x[0]`): `s += ...` writes x."""
        self.no_grad = True
        x = self.main(dtypes=("float32", "float64", "int64"), readonly=False)
        start = self.pick([0, 1])
        self.emit(1, self.pick(["s = x[0]", "s = x[0]", "s = x[-1]"]))
        self.emit(1, f"for i in range({start}, {self.count(x)}):")
        self.emit(2, self.pick(["s += x[i]", "s += x[i] * 2", "s = s + x[i]", "s *= 1"]))
        self.emit(1, self.pick(["return s", "return s, x"]))

    def vec_same_tensor(self):
        """`f(t, t)`: the output is the input, written at the index it reads (or not)."""
        self.no_grad = True
        x = self.main(dtypes=("float32", "float64", "int64"), readonly=False)
        self.params.append("out")
        self.aliases["out"] = self.pick(["x", "x", "x.clone()"])
        body = self.pick(["out[i] = x[i] * 2", "out[i] = x[i] - x.sum()", "out[i] = x[i] / (x[i].abs().sum() + 1)",
                          "out[i] = x[i] + x[0]", "out[i] = x[-1 - i] * 1", "x[i] = x[i] * 2", "x[i] *= 2",
                          "x[i] -= x.max()"])
        if x.dtype == "int64" and "/" in body:
            body = body.replace("/", "//")
        self.emit(1, f"for i in range({self.count(x)}):")
        self.emit(2, body)
        self.emit(1, self.pick(["return out", "return x", "return None"]))

    def vec_write_index(self):
        """Writes at other positions than `i`: reversed, shifted, doubled, chained, last-wins."""
        x = self.main()
        i = "i"
        v = self.value(x.row("x[i]"), i, want="same")
        rest = "".join(f", {d}" for d in v.dims)
        form = self.pick(["rev", "shift", "double", "chain", "half", "rev_range", "reversed"])
        rows = {"shift": f"{self.count(x)} + 1", "double": f"2 * {self.count(x)}"}.get(form, self.count(x))
        dtype = v.dtype if not v.dtype.startswith("py") else "float64"
        self.emit(1, f"out = torch.zeros({rows}{rest}, dtype=torch.{dtype})")
        header = {"rev_range": f"for i in range({self.count(x)} - 1, -1, -1):",
                  "reversed": f"for i in reversed(range({self.count(x)})):"}.get(form, f"for i in range({self.count(x)}):")
        self.emit(1, header)
        target = {"rev": "out[len(x) - 1 - i]", "shift": "out[i + 1]", "double": "out[2 * i]",
                  "chain": "out[i][...]", "half": "out[i // 2]"}.get(form, "out[i]")
        self.emit(2, f"{target} = {v.expr}")
        self.emit(1, "return out")

    def vec_sources(self):
        """Other things to iterate over: lists of tensors (ragged too), x.T, unbind, slices."""
        x = self.main(rank=2)
        src = self.pick(["xs", "xs", "ragged", "mixed", "x.T", "x.unbind(1)", "x[1:]", "x[::2]", "x.flip(0)"])
        if src == "xs":
            self.param("xs", "[r.detach().requires_grad_(r.requires_grad) for r in x.unbind(0)]")
            row = x.row("row")
        elif src == "mixed":
            # every other row in float64: each element computes at its own precision in the loop
            self.param("xs", "[r.detach().double() if k % 2 else r.detach() for k, r in enumerate(x.unbind(0))]")
            src, row = "xs", x.row("row")
        elif src == "ragged":
            self.param("xs", f"[torch.randn({self.rng.randint(1, 3)} + k % 2, generator=g) for k in range({self.n})]")
            src, row = "xs", Val("row", "float32")
        elif src in ("x.T", "x.unbind(1)"):
            row = Val("row", x.dtype, ("x.shape[0]",), (self.n,))
        else:
            row = x.row("row")
        v = self.value(row, want=self.pick(["scalar", "same"]))
        if self.chance(0.5):
            self.emit(1, "res = []")
            self.emit(1, f"for row in {src}:")
            self.emit(2, f"res.append({v.expr})")
            self.emit(1, f"return {self.pick(['torch.stack(res)', 'res'])}")
        else:
            self.emit(1, f"return torch.stack([{v.expr} for row in {src}])")

    def vec_branches(self):
        """Ternaries, if without else, elif chains."""
        x = self.main()
        loop = self.indexed_loop(x, allow_while=False)
        c1, c2 = self.cond(loop.row, loop.index), self.cond(loop.row, loop.index)
        a, b, c = (self.value(loop.row, loop.index, want="same") for _ in range(3))
        i = loop.index
        form = self.pick(["ternary", "no_else", "elif", "nested"])
        self.emit(1, f"out = {self.alloc(self.count(x), a, full=form in ('ternary', 'elif'))}")
        self.emit_all(1, loop.head)
        if form == "ternary":
            self.emit(2, f"out[{i}] = {a.expr} if {c1} else {b.expr}")
        elif form == "no_else":
            self.emit_all(2, [f"if {c1}:", f"    out[{i}] = {a.expr}"])
        elif form == "elif":
            self.emit_all(2, [f"if {c1}:", f"    out[{i}] = {a.expr}", f"elif {c2}:", f"    out[{i}] = {b.expr}",
                              "else:", f"    out[{i}] = {c.expr}"])
        else:
            self.emit_all(2, [f"if {c1}:", f"    if {c2}:", f"        out[{i}] = {a.expr}", "    else:",
                              f"        out[{i}] = {b.expr}"])
        self.emit_all(2, loop.tail)
        self.emit(1, "return out")

    def vec_two_loops(self):
        """A second loop reading what the first wrote."""
        x = self.main()
        v = self.value(x.row("x[i]"), "i")
        self.emit(1, f"out = {self.alloc(self.count(x), v, full=True)}")
        self.emit(1, f"for i in range({self.count(x)}):")
        self.emit(2, f"out[i] = {v.expr}")
        second = self.pick(["s = 0\n    for i in range(len(out)):\n        s = s + out[i]\n    return out, s",
                            "res = []\n    for row in out:\n        res.append(row * 2)\n    return res",
                            "for i in range(len(out)):\n        out[i] = out[i] + 1\n    return out"])
        self.emit(1, second)

    def vec_consumers(self):
        """Lists consumed with a dim, a dtype or a start value."""
        x = self.main(dtypes=("float32", "float64", "int64"))
        v = self.value(x.row("row"), want=self.pick(["scalar", "same"]))
        self.emit(1, "res = []")
        self.emit(1, "for row in x:")
        self.emit(2, f"res.append({v.expr})")
        opts = ["torch.stack(res, dim=-1)", "torch.tensor(res, dtype=torch.float64)", "sum(res, 0.0)",
                f"sum(res, torch.ones((), dtype=torch.{x.dtype}))", "torch.stack(res).sum(0)", "tuple(res)"]
        if v.dims:
            opts += ["torch.stack(res, dim=1)", "torch.cat(res, dim=0)", "torch.cat(res, dim=-1)"]
        self.emit(1, f"return {self.pick(opts)}")

    def vec_globals(self):
        """A module-level tensor and a closure read in the body (pure)."""
        x = self.main(dtypes=FLOATS)
        self.helpers["GLOBAL"] = f"SHIFT = torch.linspace(-1.0, 1.0, {self.d}, dtype=torch.{x.dtype})\n"
        inner = self.pick(["    def g(r):\n        return r * scale + SHIFT",
                           "    g = lambda r: torch.tanh(r) * scale"])
        row = "x[i]" if len(x.shape) == 2 else "x[i] * torch.ones_like(SHIFT)"
        self.emit(1, "scale = 0.5")
        self.emit(0, inner)
        self.emit(1, f"out = torch.zeros({self.count(x)}, SHIFT.shape[0], dtype=x.dtype)")
        self.emit(1, f"for i in range({self.count(x)}):")
        self.emit(2, f"out[i] = g({row}) + SHIFT")
        self.emit(1, "return out")

    def vec_row_inplace(self):
        """In-place updates through the rows the loop yields (views of the argument)."""
        self.no_grad = True
        x = self.main(dtypes=("float32", "float64", "int64"), rank=2, readonly=False)
        op = self.pick(["row *= 2", "row += 1", "row.mul_(3)", "row -= row.min()", "row[0] = row.sum()",
                        "row.clamp_(min=0)"])
        self.emit(1, f"for row in {self.pick(['x', 'x', 'x.unbind(0)'])}:")
        self.emit(2, op)
        self.emit(1, self.pick(["return x", "return None", "return x.sum()"]))

    def vec_multi_out(self):
        """Two outputs written in one body, plus a zip with a Python list of numbers."""
        x = self.main()
        if self.chance(0.4):
            self.param("ws", f"[round(v, 3) for v in torch.randn({self.n}, generator=g).tolist()]")
            v = self.value(x.row("row"), want="same")
            self.emit_all(1, ["res = []", "for w, row in zip(ws, x):", f"    res.append({v.expr} * w)",
                              f"return {self.pick(['torch.stack(res)', 'res'])}"])
            return
        a = self.value(x.row("x[i]"), "i")
        b = self.value(x.row("x[i]"), "i", want="scalar")
        self.emit(1, f"a = {self.alloc(self.count(x), a, full=True)}")
        self.emit(1, f"b = {self.alloc(self.count(x), b, full=True)}")
        self.emit(1, f"for i in range({self.count(x)}):")
        self.emit(2, f"a[i] = {a.expr}")
        self.emit(2, f"b[i] = {b.expr}")
        self.emit(1, self.pick(["return a, b", "return {'a': a, 'b': b}"]))

    def vec_triangular(self):
        """Nests whose inner range depends on the outer index."""
        x = self.main(dtypes=("float32", "float64", "int64"))
        inner = self.pick(["range(i)", "range(i + 1, len(x))", "range(i, len(x))"])
        body = self.pick(["out[i] += x[j]", "out[i, j] = (x[i] - x[j]).abs().sum()", "out[j] += x[i] * 2"])
        shape = "len(x), len(x)" if "out[i, j]" in body else "x.shape"
        self.emit(1, f"out = torch.zeros({shape}, dtype=x.dtype)")
        self.emit(1, "for i in range(len(x)):")
        self.emit(2, f"for j in {inner}:")
        self.emit(3, body)
        self.emit(1, "return out")

    def vec_list_out(self):
        """A Python list as the output: `outs[i] = v` into `[None] * n`."""
        x = self.main()
        v = self.value(x.row("x[i]"), "i")
        self.emit(1, f"outs = {self.pick(['[None] * len(x)', '[0.0] * len(x)', 'list(range(len(x)))'])}")
        self.emit(1, "for i in range(len(x)):")
        self.emit(2, f"outs[i] = {v.expr}")
        self.emit(1, self.pick(["return outs", "return torch.stack(outs) if outs else None"]))

    def vec_item_index(self):
        """Python ints from tensors as indices: `hist[idx[i].item()] += w[i]`."""
        k, w = self.scatter_inputs()
        ix = self.pick(["idx[i].item()", "int(idx[i])", "idx[i].tolist()"])
        self.emit(1, f"hist = torch.zeros({k}, *w.shape[1:], dtype=w.dtype)")
        self.emit(1, "for i in range(len(idx)):")
        self.emit(2, f"hist[{ix}] {self.pick(['+=', '=', '-='])} w[i]")
        self.emit(1, "return hist")

    def vec_slice_write(self):
        """Writes and reads of part of a row: `out[i, :2] = ...`, `out[i, 1:] += ...`."""
        x = self.main(rank=2, dtypes=("float32", "float64", "int64"))
        body = self.pick(["out[i, :2] = x[i, -2:] * 2", "out[i, 1:] += x[i, :-1]", "out[i, 0] = x[i].sum()",
                          "out[i, ::2] = x[i, ::2] + 1", "out[i][1:] = x[i][1:] - x[i][:-1]"])
        self.emit(1, "out = torch.zeros_like(x)")
        self.emit(1, f"for i in range({self.count(x)}):")
        self.emit(2, body)
        self.emit(1, "return out")

    def vec_for_else(self):
        """`for ... else:` without a break: the else block always runs."""
        x = self.main()
        v = self.value(x.row("x[i]"), "i")
        self.emit(1, "res = []")
        self.emit(1, f"for i in range({self.count(x)}):")
        self.emit(2, f"res.append({v.expr})")
        self.emit(1, "else:")
        self.emit(2, self.pick(["res.append(res[-1] if res else None)", "done = True"]))
        self.emit(1, self.pick(["return res", "return res, locals().get('done')"]))

    def vec_no_grad(self):
        """A body under `torch.no_grad()` (or the whole loop)."""
        x = self.main(dtypes=FLOATS)
        v = self.value(x.row("x[i]"), "i", want="same")
        self.emit(1, f"out = torch.zeros({', '.join(('len(x)',) + v.dims)}, dtype=torch.{v.dtype})")
        if self.chance(0.5):
            self.emit_all(1, ["with torch.no_grad():", "    for i in range(len(x)):", f"        out[i] = {v.expr}"])
        else:
            self.emit_all(1, ["for i in range(len(x)):", "    with torch.no_grad():", f"        out[i] = {v.expr}"])
        self.emit(1, "return out")

    def vec_attributes(self):
        """Weights read from an object (`self.weight`, as in a method) or a stateless module."""
        x = self.main(dtypes=("float32",), rank=2)
        k = self.rng.randint(1, 4)
        grad = self.chance(0.3)
        form = self.pick(["namespace", "linear", "sequential"])
        if form == "namespace":
            self.param("self", f"types.SimpleNamespace(weight=_tensor(g, ({self.d}, {k}), torch.float32, grad={grad}), "
                               f"bias=_tensor(g, ({k},), torch.float32))")
            self.params.insert(0, self.params.pop())     # `self` first, like a method
            call = self.pick(["row @ self.weight + self.bias", "torch.tanh(row @ self.weight) * self.bias"])
        else:
            layers = f"torch.nn.Linear({self.d}, {k})" if form == "linear" else \
                f"torch.nn.Sequential(torch.nn.Linear({self.d}, {k}), torch.nn.Tanh(), torch.nn.Linear({k}, 2))"
            self.param("model", f"_seeded(g, {layers}, {grad})")
            call = "model(row)"
        self.emit(1, "res = []")
        self.emit(1, f"for row in {x.name}:")
        self.emit(2, f"res.append({call})")
        self.emit(1, self.pick(["return torch.stack(res)", "return res"]))

    # ============================================================== forms that must stay exact

    def exact_impure_helper(self):
        """A helper with a side effect or a random draw, called in the body."""
        x = self.main(dtypes=FLOATS)
        kind = self.pick(["log", "noise", "counter"])
        self.helpers["IMPURE"] = {
            "log": "LOG = []\n\n\ndef h(r):\n    LOG.append(r.sum().item())\n    return r * 2\n",
            "noise": "def h(r):\n    return r + torch.randn(r.shape, dtype=r.dtype)\n",
            "counter": "CALLS = [0]\n\n\ndef h(r):\n    CALLS[0] += 1\n    return r * CALLS[0]\n",
        }[kind]
        self.emit(1, f"out = torch.zeros_like(x)")
        self.emit(1, f"for i in range({self.count(x)}):")
        self.emit(2, "out[i] = h(x[i])")
        ret = {"log": "out, list(LOG)", "noise": "out", "counter": "out, CALLS[0]"}[kind]
        self.emit(1, f"return {ret}")

    def exact_early_return(self):
        x = self.main()
        loop = self.indexed_loop(x, allow_while=False)
        c = self.cond(loop.row, loop.index)
        self.emit(1, "res = []")
        self.emit_all(1, loop.head)
        self.emit(2, f"if {c}:")
        self.emit(3, self.pick([f"return {loop.index}", "return res", f"return {loop.row.expr}"]))
        self.emit(2, f"res.append({loop.row.expr} * 2)")
        self.emit(1, "return None")

    def exact_rebind(self):
        """Rebinding the index or the iterated tensor inside the body."""
        x = self.main(dtypes=("float32", "float64", "int64"))
        form = self.pick(["index", "input", "bound", "while_step", "while_data"])
        if form == "index":
            self.emit_all(1, ["out = torch.zeros(2 * len(x) + 1, *x.shape[1:], dtype=x.dtype)",
                              "for i in range(len(x)):", "    j = i", "    i = i * 2 + 1", "    out[i] = x[j] * i",
                              "return out, i if len(x) else None"])
        elif form == "input":
            self.emit_all(1, ["out = torch.zeros_like(x)", "for i in range(len(x)):", "    x = x + 1",
                              "    out[i] = x[i]", "return out"])
        elif form == "bound":
            self.emit_all(1, ["n = len(x)", "out = torch.zeros_like(x)", "for i in range(n):", "    n = n - 1",
                              "    out[i] = x[i] * n", "return out, n"])
        elif form == "while_step":
            step = self.pick([2, 3])
            self.emit_all(1, ["out = torch.zeros_like(x)", "i = 0", f"while i <= len(x) - 1:",
                              "    out[i] = x[i] * 2", f"    i += {step}", "return out, i"])
        else:
            self.emit_all(1, ["out = torch.zeros_like(x)", "i = 0", "while i < len(x) and x[i].sum() > -1:",
                              "    out[i] = x[i] * 2", "    i += 1", "return out, i"])

    def exact_for_else_break(self):
        x = self.main()
        c = self.cond(x.row("x[i]"), "i")
        self.emit_all(1, ["found = -1", f"for i in range({self.count(x)}):", f"    if {c}:", "        found = i",
                          "        break", "else:", "    found = None", "return found"])

    def exact_try(self):
        """try/except or assert in the body: the exception decides the result."""
        x = self.main(dtypes=("float32", "int64"))
        form = self.pick(["try_index", "try_value", "assert"])
        self.tensor("idx", (self.n,), "int64", low=-self.n - 2, high=self.n + 2)
        self.emit(1, "out = torch.zeros_like(x)")
        self.emit(1, f"for i in range({self.count(x)}):")
        if form == "try_index":
            self.emit_all(2, ["try:", "    out[i] = x[idx[i]] * 2", "except IndexError:", "    out[i] = -1"])
        elif form == "try_value":
            self.emit_all(2, ["try:", "    if x[i].sum() > 1:", "        raise ValueError(i)", "    out[i] = x[i] + 1",
                              "except ValueError as e:", "    out[i] = e.args[0]"])
        else:
            self.emit_all(2, ["assert idx[i] < len(x), f'index {int(idx[i])} at {i}'", "out[i] = x[idx[i]]"])
        self.emit(1, "return out")

    def exact_stateful_module(self):
        """Modules whose calls draw random numbers or update buffers (dropout, batch norm)."""
        x = self.main(dtypes=("float32",), rank=2)
        layers = self.pick([f"torch.nn.Dropout(0.5)", f"torch.nn.BatchNorm1d({self.d})",
                            f"torch.nn.Sequential(torch.nn.Linear({self.d}, 3), torch.nn.Dropout(0.3))"])
        self.param("model", f"_seeded(g, {layers}, False)")
        row = "row" if "BatchNorm" not in layers else "row.unsqueeze(0).expand(2, -1)"
        self.emit(1, "res = []")
        self.emit(1, f"for row in {x.name}:")
        self.emit(2, f"res.append(model({row}))")
        self.emit(1, "return torch.stack(res) if res else None")

    def exact_carried(self):
        """`out[i] = out[i - 1] ... + x[i]`: each iteration reads the previous one's write."""
        x = self.main(dtypes=("float32", "float64", "int64"))
        init = self.pick(["x.clone()", "torch.zeros_like(x)"])
        expr = self.pick(["out[i - 1] + x[i]", "out[i - 1] * 0.5 + x[i]", "torch.maximum(out[i - 1], x[i])",
                          "out[i - 1] - x[i] * i", "x[i] + out.sum(0)", "x[i] - out[:i].sum(0)", "out[0] + x[i]"])
        if "0.5" in expr and x.dtype == "int64":
            expr = "out[i - 1] // 2 + x[i]"
        self.emit(1, f"out = {init}")
        self.emit(1, f"for i in range(1, {self.count(x)}):")
        self.emit(2, f"out[i] = {expr}")
        self.emit(1, "return out")

    def exact_running_state(self):
        x = self.main(dtypes=FLOATS)
        step = self.pick(["h * 0.5 + {r}", "torch.tanh(h + {r})", "h + {r}", "torch.maximum(h, {r})", "inplace",
                          "scan_out"])
        loop = self.indexed_loop(x)
        if step == "inplace":
            # `h += row` then `res.append(h)`: the list holds n references to one tensor
            self.emit(1, "h = torch.zeros_like(x[0]) if len(x) else torch.zeros(())")
            self.emit(1, "res = []")
            self.emit_all(1, loop.head)
            self.emit(2, self.pick(["h += {r}", "h.add_({r})", "h *= 0.5\n        h += {r}"]).format(r=loop.row.expr))
            self.emit(2, "res.append(h)")
            self.emit_all(2, loop.tail)
            self.emit(1, self.pick(["return res", "return torch.stack(res) if res else h"]))
            return
        if step == "scan_out":
            self.emit(1, self.pick(["s = 0.0", "s = torch.zeros_like(x[0]) if len(x) else 0.0"]))
            self.emit(1, "out = torch.zeros_like(x)")
            self.emit_all(1, loop.head)
            self.emit(2, self.pick(["s = s + {r}", "s = s * 0.9 + {r}", "s = torch.maximum(s, {r}) if {i} else {r}"])
                      .format(r=loop.row.expr, i=loop.index))
            self.emit(2, f"out[{loop.index}] = s")
            self.emit_all(2, loop.tail)
            self.emit(1, "return out, s")
            return
        self.emit(1, "h = torch.zeros_like(x[0]) if len(x) else 0.0" if "maximum" in step or self.chance(0.5)
                  else "h = 0.0")
        self.emit(1, "res = []")
        self.emit_all(1, loop.head)
        self.emit(2, "h = " + step.format(r=loop.row.expr))
        self.emit(2, self.pick(["res.append(h)", "res.append(h * 2)"]))
        self.emit_all(2, loop.tail)
        self.emit(1, self.pick(["return res, h", "return torch.stack(res) if res else h", "return res"]))

    def exact_break(self):
        x = self.main()
        loop = self.indexed_loop(x, allow_while=False)
        c = self.cond(loop.row, loop.index)
        v = self.value(loop.row, loop.index)
        self.emit(1, "res = []")
        self.emit_all(1, loop.head)
        self.emit(2, f"if {c}:")
        self.emit(3, "break")
        self.emit(2, f"res.append({v.expr})")
        self.emit(1, f"return {self.consume('res', v)}")

    def exact_break_rich(self):
        """`if cond: ...; break` with work before it (a temporary the condition reads, an append or
        a count that the stopping iteration still does), assignments in the `if`, and the loop
        variables read after the loop."""
        x = self.main()
        loop = self.indexed_loop(x, allow_while=True)
        v = self.value(loop.row, loop.index)
        self.emit(1, "res = []")
        self.emit(1, "found = -1")
        self.emit(1, "count = 0")
        self.emit_all(1, loop.head)
        t = "u" if loop.index == "t" else "t"     # (not the loop's own counter: a `while` would never end)
        self.emit(2, f"{t} = {v.expr}")
        before = self.pick(["", f"res.append({t})", "count += 1"])
        if before:
            self.emit(2, before)
        c = self.cond(loop.row.with_expr(t) if self.chance(0.5) and not v.dtype.startswith("py") else loop.row,
                      loop.index)
        self.emit(2, f"if {c}:")
        self.emit(3, self.pick([f"found = {loop.index}", "found = 100", "count += 10", f"res.append({t} * 0)"]))
        self.emit(3, "break")
        if before != f"res.append({t})":
            self.emit(2, f"res.append({t} * 2)")
        if before != "count += 1" and self.chance(0.5):
            self.emit(2, "count += 1")
        self.emit_all(2, loop.tail)          # a `while` loop's counter step
        last = self.pick([loop.index, "found", "count", "len(res)"])
        self.emit(1, f"return ({self.consume('res', v)} if res else None), {last}, found, count")

    def exact_break_elements(self):
        """`for row in x` / `for a, b in zip(x, y)` that stops early, the element read after."""
        x = self.main()
        pair = self.chance(0.5)
        y = self.like(x, "y") if pair else None
        head = "for a, b in zip(x, y):" if pair else "for a in x:"
        row = x.row("a")
        others = [y.row("b")] if pair else []
        v = self.value(row, None, others)
        c = self.cond(row, None, others)
        self.emit(1, "res = []")
        self.emit(1, "stopped = False")
        self.emit(1, head)
        self.emit(2, f"if {c}:")
        self.emit(3, self.pick(["stopped = True", "res.append(a)"]))
        self.emit(3, "break")
        self.emit(2, f"res.append({v.expr})")
        self.emit(1, f"return res, stopped, a")

    def exact_break_sites(self):
        """Several places that stop the loop: two or three top-level `if c: ..; break`s, or an
        `if` / `elif` chain of them (with an `else` sometimes), work between them (a temporary a
        later condition reads, an append, a count), assignments in the `if`s, the loop variables
        read after the loop."""
        x = self.main()
        loop = self.indexed_loop(x, allow_while=True)
        v = self.value(loop.row, loop.index)
        t = "u" if loop.index == "t" else "t"     # (not the loop's own counter: a `while` would never end)
        self.emit(1, "res = []")
        self.emit(1, "found = -1")
        self.emit(1, "count = 0")
        self.emit_all(1, loop.head)
        sites = self.pick([2, 2, 3])
        chain = self.chance(0.3)
        for k in range(sites):
            row = loop.row
            if k and not chain and self.chance(0.4) and not v.dtype.startswith("py"):
                self.emit(2, f"{t} = {v.expr}")
                row = loop.row.with_expr(t)
            c = self.cond(row, loop.index)
            self.emit(2, f"{'elif' if chain and k else 'if'} {c}:")
            self.emit(3, self.pick([f"found = {loop.index}", f"found = {100 + k}", f"count += {10 + k}",
                                    f"res.append({v.expr} * 0)", "pass"]))
            self.emit(3, "break")
            if not chain:
                self.emit(2, self.pick(["", f"res.append({v.expr})", "count += 1"]) or "pass")
        if chain and self.chance(0.5):
            self.emit(2, "else:")
            self.emit(3, self.pick([f"res.append({v.expr})", "count += 1"]))
        elif self.chance(0.5):
            self.emit(2, f"res.append({v.expr} * 2)")
        self.emit_all(2, loop.tail)          # a `while` loop's counter step
        last = self.pick([loop.index, "found", "count", "len(res)"])
        self.emit(1, f"return ({self.consume('res', v)} if res else None), {last}, found, count")

    def exact_break_budget(self):
        """Stop when a running total would pass a limit: the condition reads the total before
        its update (integers vectorize, floats and Python numbers keep the loop)."""
        x = self.main(rank=1, dtypes=("int64", "int64", "int32", "float32", "bool"))
        loop = self.indexed_loop(x, allow_while=False)
        c = loop.row.expr
        if self.chance(0.2):
            c = f"{c}.item()"
        init = self.pick(["0", "0", "5", "torch.tensor(0)"])
        limit = self.pick(["3", "10", "40", "-1", "100000"])
        op, cmp = self.pick([("+", f"spent + v > {limit}"), ("+", f"spent > {limit}"),
                             ("-", f"spent - v < -{limit}")])
        self.emit(1, f"spent = {init}")
        self.emit(1, "taken = 0")
        self.emit_all(1, loop.head)
        self.emit(2, f"v = {c}")
        self.emit(2, f"if {cmp}:")
        self.emit(3, self.pick(["break", "taken -= 100", "spent = spent * 1"]))
        if self.lines[-1].strip() != "break":
            self.emit(3, "break")
        self.emit(2, self.pick([f"spent = spent {op} v", f"spent {op}= v"]))
        self.emit(2, "taken += 1")
        self.emit(1, f"return spent, taken, {loop.index}")

    def exact_append_arg(self):
        x = self.main()
        v = self.value(x.row("row"))
        self.param("log", self.pick(["[]", "[]", "[torch.zeros(())]"]))
        self.emit(1, f"for row in {x.name}:")
        self.emit(2, f"log.append({v.expr})")
        if self.chance(0.3):
            self.emit(2, "log.append(len(log))")
        self.emit(1, "return len(log)")

    def exact_print(self):
        x = self.main(dtypes=("float32", "int64"))
        loop = self.indexed_loop(x)
        v = self.value(loop.row, loop.index)
        self.emit(1, f"out = {self.alloc(self.count(x), v, full=True)}")
        self.emit_all(1, loop.head)
        self.emit(2, f"out[{loop.index}] = {v.expr}")
        self.emit(2, self.pick([f"print({loop.index})", f"print('row', {loop.index}, out[{loop.index}].sum().item())",
                                f"print({loop.index}, end=' ')"]))
        self.emit_all(2, loop.tail)
        self.emit(1, "return out")

    def exact_inplace_arg(self):
        """In-place updates of an argument, reading a neighbour that may already be updated."""
        self.no_grad = True
        x = self.main(dtypes=("float32", "float64", "int64"), readonly=False)
        body = self.pick([["x[i] += 1", "out[i] = x[i + 1] if i + 1 < len(x) else x[i]"],
                          ["x[i + 1] += x[i]"], ["x[i + 1] = x[i + 1] * 2 + x[i]"],
                          ["x[i] = x[i] - x[i + 1]"]])
        count = "len(x) - 1" if "out" not in body[-1] else "len(x)"
        if "out" in body[-1]:
            self.emit(1, "out = torch.zeros_like(x)")
        self.emit(1, f"for i in range({count}):")
        self.emit_all(2, body)
        self.emit(1, "return out" if "out" in body[-1] else "return x.sum()")

    def exact_alias(self):
        """An output that is an input: `f(t, t)` or a view of it, read at another index."""
        self.no_grad = True
        x = self.main(dtypes=("float32", "float64", "int64"), readonly=False)
        expr = self.pick(["x[i - 1] * 2", "x[i - 1] + x[i]", "x[i - 1] + 1", "x[i + 1] - x[i - 1]"])
        self.params.append("out")
        self.aliases["out"] = self.pick(["x", "x", "x[1:]", "x.view(x.shape)"])
        start = self.pick([1, 1, 2])
        stop = "len(out)" if "i + 1" not in expr else "len(out) - 1"
        self.emit(1, f"for i in range({start}, {stop}):")
        self.emit(2, f"out[i] = {expr}")
        self.emit(1, self.pick(["return out", "return out.sum()"]))

    def exact_partial_strided(self):
        """In-place smoothing over a strided part of the argument."""
        self.no_grad = True
        x = self.main(dtypes=FLOATS, readonly=False)
        a, step = self.pick([(1, 2), (2, 3), (1, 1)])
        self.emit(1, f"for i in range({a}, len(x) - 1, {step}):")
        self.emit(2, self.pick(["x[i] = (x[i - 1] + x[i + 1]) / 2", "x[i] = x[i - 1] * 2 - x[i + 1] * i"]))
        self.emit(1, "return x")

    def exact_random(self):
        x = self.main(dtypes=FLOATS)
        loop = self.indexed_loop(x)
        draw = self.pick([f"torch.randn({loop.row.expr}.shape)", "torch.rand(())",
                          f"torch.rand({loop.row.expr}.shape, dtype={x.name}.dtype)"])
        form = self.pick(["store", "count", "append"])
        if form == "count":
            self.emit(1, "c = 0")
        elif form == "append":
            self.emit(1, "res = []")
        else:
            self.emit(1, f"out = torch.zeros_like({x.name})")
        self.emit_all(1, loop.head)
        if form == "count":
            self.emit_all(2, ["if torch.rand(()) < 0.5:", "    c += 1"])
        elif form == "append":
            self.emit(2, f"res.append({loop.row.expr} * {draw})")
        else:
            self.emit(2, f"out[{loop.index}] = {loop.row.expr} + {draw}")
        self.emit_all(2, loop.tail)
        self.emit(1, {"count": "return c", "append": "return res", "store": "return out"}[form])

    def exact_raise(self):
        """An exception mid-loop, after some writes into an argument."""
        self.no_grad = True
        form = self.pick(["index", "offset", "value"])
        if form == "index":
            x = self.main(dtypes=("float32", "int64"))
            bad = self.rng.randint(0, max(self.n - 1, 0))
            self.param("idx", f"torch.arange({self.n}).flip(0).index_fill(0, torch.tensor([{bad}]), {self.n + 3})"
                       if self.n else "torch.zeros(0, dtype=torch.long)")
            self.param("out", "torch.zeros_like(x)")
            self.emit(1, f"for i in range({self.count(x)}):")
            self.emit(2, "out[i] = x[idx[i]] * 2")
            self.emit(1, "return out")
            return
        if form == "offset":
            x = self.main(dtypes=("float32", "int64"))
            self.param("out", "torch.zeros_like(x)")
            self.emit(1, f"for i in range({self.count(x)}):")
            self.emit(2, "out[i] = x[i + 1] - x[i]")
            self.emit(1, "return out")
            return
        x = self.main(dtypes=("float32", "float64"))
        self.param("out", "torch.zeros_like(x)")
        loop = self.indexed_loop(x, allow_while=False)
        s = self.value(loop.row, loop.index, want="scalar")
        self.emit_all(1, loop.head)
        self.emit(2, f"out[{loop.index}] = {loop.row.expr} * 3")
        self.emit(2, f"if {s.expr} > 1.0:")
        self.emit(3, f"raise ValueError(f\"row {{{loop.index}}} is too large\")")
        self.emit(1, "return out")

    def exact_py_floats(self):
        """Loops over a Python list of floats."""
        self.param("xs", f"[round(v, 4) for v in torch.randn({self.n}, generator=g).tolist()]")
        form = self.pick(["sum", "store", "comp", "best"])
        if form == "sum":
            self.emit_all(1, ["s = 0.0", "for v in xs:", f"    s += {self.pick(['v * 2', 'v * v', 'abs(v)'])}",
                              "return s"])
        elif form == "store":
            self.emit_all(1, ["out = torch.zeros(len(xs))", "for i, v in enumerate(xs):",
                              f"    out[i] = {self.pick(['v * 2', 'v - 1.0', 'v * i'])}", "return out"])
        elif form == "comp":
            self.emit(1, f"return torch.tensor([{self.pick(['v * 2', 'v + 1', 'max(v, 0.0)'])} for v in xs])")
        else:
            self.emit_all(1, ['best = float("-inf")', "for v in xs:", "    best = max(best, v)", "return best"])

    # ============================================================== newer features
    # (fission, running extremes, scans, reversed ranges, in-place prefixes, unit slices,
    # preallocated outputs replaced by the batch). Chosen by `generate` from their own
    # random stream, so the programs of the older forms keep their seeds.

    def functional(self) -> str:
        self.helpers["F"] = "import torch.nn.functional as F\n"
        return "F"

    def rnn_inputs(self, gates: int, mixed_ok=True):
        """xs (n[, B], din), h (and c) ([B,] H), weights; all of one float dtype (rarely not)."""
        dt = self.pick(FLOATS + ("float32",))
        batch = self.pick([None, None, 1, 2, 3])
        din, hid = self.rng.randint(1, 4), self.rng.randint(1, 5)
        bshape = (batch,) if batch else ()
        xs = self.tensor("xs", (self.n,) + bshape + (din,), dt)
        self.tensor("h", bshape + (hid,), dt)
        if gates == 4:
            self.tensor("c", bshape + (hid,), dt)
        wdt = self.pick(FLOATS) if mixed_ok and self.chance(0.05) else dt
        return xs, dt, wdt, din, hid

    def rnn_loop(self, xs):
        """The loop header over time steps: a Loop whose row is the step's input."""
        form = self.pick(["range", "range", "range", "iter", "enumerate", "reversed", "while"])
        count = self.count(xs)
        if form == "iter":
            return Loop(["for x_t in xs:"], None, Val("x_t", xs.dtype), [])
        if form == "enumerate":
            return Loop(["for t, x_t in enumerate(xs):"], "t", Val("x_t", xs.dtype), [])
        if form == "reversed":
            head = self.pick([f"for t in reversed(range({count})):", f"for t in range({count} - 1, -1, -1):"])
            return Loop([head], "t", Val("xs[t]", xs.dtype), [])
        if form == "while":
            return Loop(["t = 0", f"while t < {count}:"], "t", Val("xs[t]", xs.dtype), ["t += 1"])
        return Loop([f"for t in range({count}):"], "t", Val("xs[t]", xs.dtype), [])

    def rnn_body(self, r: str) -> list:
        """`e = <independent of h>`, then the recurrence on h."""
        F = self.functional()
        indep = self.pick(["torch.relu({r} @ w1 + b1)", "{r} @ w1", "torch.tanh({r} @ w1) * b1",
                           F + ".linear({r}, w1.T, b1)", "torch.relu({r} @ w1 + b1) * 2.0 - b1"]).format(r=r)
        lines = [f"e = {indep}"]
        if self.chance(0.25):
            lines.append(self.pick(["e = e + b1", "u = torch.sigmoid(e)\ne = e * u", "e = e.clamp(-2.0, 2.0)"]))
        lines += ("h = " + self.pick(["torch.tanh(e + h @ w_hh)", "torch.tanh(e + h @ w_hh) * 0.5 + h * 0.5",
                                      "torch.relu(e - h @ w_hh)", "torch.sigmoid(h @ w_hh + e) * e",
                                      "torch.tanh(e + h @ w_hh + b1)"])).split("\n")
        return [ln for line in lines for ln in line.split("\n")]

    def rnn_weights(self, wdt, din, hid):
        self.tensor("w1", (din, hid), wdt)
        self.tensor("b1", (hid,), wdt)
        self.tensor("w_hh", (hid, hid), wdt)

    def rnn_collect(self, has_index: bool):
        """(init line, per-step line, return) for what the loop keeps of h."""
        form = self.pick(["stack", "stack", "list", "store", "sum", "last", "both"] if has_index else
                         ["stack", "stack", "list", "sum", "last", "both"])
        if form == "store":
            return (["out = torch.zeros(xs.shape[0], *h.shape, dtype=h.dtype)"], ["out[t] = h"], "out, h")
        if form == "last":
            return ([], [], self.pick(["h", "h.sum()"]))
        if form == "sum":
            return (["outs = []"], ["outs.append(h.sum())"], self.pick(["outs", "torch.stack(outs) if outs else h"]))
        if form == "both":
            return (["outs = []"], ["outs.append(e + h)"], "torch.stack(outs) if outs else None, h")
        return (["outs = []"], ["outs.append(h)"],
                self.pick(["torch.stack(outs), h", "outs", "torch.stack(outs) if outs else h"]))

    def vec_fission_rnn(self):
        """Sequential loop with heavy independent work: `e = relu(xs[t] @ w1 + b1)` for every t
        at once, `h = tanh(e + h @ w_hh)` stays a loop."""
        xs, dt, wdt, din, hid = self.rnn_inputs(1)
        self.rnn_weights(wdt, din, hid)
        loop = self.rnn_loop(xs)
        init, step, ret = self.rnn_collect(loop.index is not None)
        self.emit_all(1, init)
        self.emit_all(1, loop.head)
        self.emit_all(2, self.rnn_body(loop.row.expr))
        self.emit_all(2, step)
        self.emit_all(2, loop.tail)
        self.emit(1, f"return {ret}")

    def lstm_body(self, r: str, hid: int) -> list:
        F = self.functional()
        z = self.pick(["{r} @ w_ih.T + h @ w_hh.T", "{r} @ w_ih.T + h @ w_hh.T + b", "h @ w_hh.T + {r} @ w_ih.T",
                       F + ".linear({r}, w_ih, b) + " + F + ".linear(h, w_hh)"]).format(r=r)
        split = self.pick(["gi, gf, gg, go = z.chunk(4, dim=-1)", f"gi, gf, gg, go = torch.split(z, {hid}, dim=-1)",
                           f"gi, gf, gg, go = z[..., :{hid}], z[..., {hid}:{2 * hid}], z[..., {2 * hid}:{3 * hid}], "
                           f"z[..., {3 * hid}:]"])
        return [f"z = {z}", split, "c = torch.sigmoid(gf) * c + torch.sigmoid(gi) * torch.tanh(gg)",
                "h = torch.sigmoid(go) * torch.tanh(c)"]

    def vec_fission_lstm(self):
        """An LSTM cell over time: the input projection is independent, the gates are not."""
        xs, dt, wdt, din, hid = self.rnn_inputs(4)
        self.tensor("w_ih", (4 * hid, din), wdt)
        self.tensor("w_hh", (4 * hid, hid), wdt)
        self.tensor("b", (4 * hid,), wdt)
        loop = self.rnn_loop(xs)
        self.emit(1, "hs = []")
        self.emit_all(1, loop.head)
        self.emit_all(2, self.lstm_body(loop.row.expr, hid))
        self.emit(2, self.pick(["hs.append(h)", "hs.append(h)", "hs.append(c + h)"]))
        self.emit_all(2, loop.tail)
        self.emit(1, self.pick(["return torch.stack(hs), h, c", "return hs, c", "return torch.stack(hs) if hs else h"]))

    def exact_fission_effects(self):
        """A fission candidate whose body also mutates a weight the independent part reads,
        prints, or appends to the caller's list: the order of effects must be kept."""
        effect = self.pick(["mutate_helper", "mutate_direct", "mutate_global", "print", "log", "log"])
        if effect.startswith("mutate") and self.chance(0.7):
            self.no_grad = True
        lstm = self.chance(0.3)
        xs, dt, wdt, din, hid = self.rnn_inputs(4 if lstm else 1, mixed_ok=False)
        if lstm:
            self.tensor("w_ih", (4 * hid, din), wdt)
            self.tensor("w_hh", (4 * hid, hid), wdt)
            self.tensor("b", (4 * hid,), wdt)
            w = self.pick(["w_ih", "b"])
        else:
            self.rnn_weights(wdt, din, hid)
            w = self.pick(["w1", "w1", "b1"])
        loop = self.rnn_loop(xs)
        t = loop.index or "len(log)"
        if effect == "mutate_helper":
            self.helpers["DECAY"] = self.pick(["def decay(w):\n    w.mul_(0.9)\n    return w\n",
                                               "def decay(w):\n    w += 0.125\n",
                                               "def decay(w):\n    with torch.no_grad():\n        w.mul_(0.5)\n"])
            line = f"decay({w})"
        elif effect == "mutate_direct":
            line = self.pick([f"{w} += 0.25", f"{w}.mul_(0.5)", f"{w}[0] = 1.0" if w != "b1" else f"{w}.zero_()"])
        elif effect == "mutate_global":
            self.helpers["STATE"] = "STATE = {}\n\n\ndef remember(w):\n    STATE.setdefault('w', w)\n    STATE['w'].add_(1.0)\n"
            line = f"remember({w})"
        elif effect == "print":
            line = self.pick([f"print('step', {loop.index or 'x_t.shape'})", "print(tuple(h.shape))",
                              f"print({loop.index or 0}, end=' ')"])
        else:
            self.param("log", "[]")
            line = self.pick(["log.append(e.shape)", "log.append(h)", "log.append(h.sum().item())", "log.append(len(log))",
                              "log.append(e)"] if not lstm else ["log.append(z)", "log.append(c.sum().item())",
                                                                  "log.append(len(log))"])
        body = self.lstm_body(loop.row.expr, hid) if lstm else self.rnn_body(loop.row.expr)
        pos = self.pick(["first", "last", "middle"])
        if pos == "first":
            body = [line] + body
        elif pos == "last":
            body = body + [line]
        else:
            body = body[:1] + [line] + body[1:]
        self.emit(1, "outs = []")
        self.emit_all(1, loop.head)
        self.emit_all(2, body)
        self.emit(2, "outs.append(h)")
        self.emit_all(2, loop.tail)
        self.emit(1, self.pick(["return torch.stack(outs) if outs else h", "return outs, h"]))

    # -------------------------------------------------------------- running extremes

    def extreme_init(self, x: Tensor, fn: str) -> str:
        inf = '-inf' if fn in ("maximum", "max") else 'inf'
        if len(x.shape) == 1:
            return self.pick([f'torch.tensor(float("{inf}"))', "x[0]", "torch.tensor(0)", "torch.zeros(())",
                              f'torch.tensor(float("{inf}"), dtype=x.dtype)' if x.dtype in FLOATS else "x[0]"])
        return self.pick([f'torch.full((x.shape[1],), float("{inf}"))', "x[0]", "x[0].clone()",
                          "torch.zeros(x.shape[1])", "torch.zeros_like(x[0])", f'torch.tensor(float("{inf}"))',
                          f'torch.full_like(x[0], {"-" if "-" in inf else ""}1e9)' if x.dtype in FLOATS else "x[-1]"])

    def vec_running_extreme(self):
        """`m = torch.maximum(m, x[i])` (amax), or read in the loop (cummax), NaN sometimes."""
        x = self.main(dtypes=("float32", "float32", "float64", "int64"), special_p=0.35)
        fn = self.pick(["maximum", "minimum", "max", "min"])
        loop = self.indexed_loop(x)
        r = loop.row.expr
        if self.chance(0.2):
            r = self.elementwise(loop.row).expr
        call = self.pick([f"torch.{fn}(m, {r})", f"torch.{fn}({r}, m)"])
        read = self.pick(["none", "none", "store", "append", "drawdown"])
        self.emit(1, f"m = {self.extreme_init(x, fn)}")
        if read in ("store", "drawdown"):
            self.emit(1, self.pick(["out = torch.empty_like(x)", "out = torch.zeros_like(x)",
                                    "out = torch.zeros(x.shape, dtype=torch.float64)"]) if self.n_delta == 0 and
                      "n" not in self.params else "out = torch.zeros_like(x)")
        elif read == "append":
            self.emit(1, "res = []")
        self.emit_all(1, loop.head)
        self.emit(2, f"m = {call}")
        if read == "store":
            self.emit(2, f"out[{loop.index}] = m")
        elif read == "drawdown":
            self.emit(2, f"out[{loop.index}] = " + self.pick([f"m - {loop.row.expr}", f"({loop.row.expr} - m) / m"]))
        elif read == "append":
            self.emit(2, self.pick(["res.append(m)", "res.append(m * 2)"]))
        self.emit_all(2, loop.tail)
        self.emit(1, {"none": "return m", "store": self.pick(["return out", "return out, m"]),
                      "drawdown": "return out", "append": self.pick(["return res", "return torch.stack(res) if res else m"])}[read])

    def vec_drawdown(self):
        """`peak = torch.max(peak, p[i]); dd[i] = peak - p[i]`, forwards or reversed."""
        p = self.main("p", dtypes=("float32", "float64", "int64"), rank=self.pick([1, 1, 2]), special_p=0.3)
        head = self.pick([f"for i in range({self.count(p)}):", f"for i in range({self.count(p)}):",
                          "for i in reversed(range(p.shape[0])):", "for i in range(p.shape[0] - 1, -1, -1):",
                          "for i in range(1, p.shape[0]):"])
        fn = self.pick(["max", "maximum", "min", "fmax"])
        self.emit(1, f"peak = {self.pick(['p[0]', 'p[0]', 'p[-1]', 'torch.zeros_like(p[0])', 'p[0].clone()'])}")
        self.emit(1, self.pick(["dd = torch.empty_like(p)", "dd = torch.zeros_like(p)", "dd = torch.zeros_like(p, dtype=torch.float64)"])
                  if "range(1" not in head and "n" not in self.params else "dd = torch.zeros_like(p)")
        self.emit(1, head)
        self.emit(2, f"peak = torch.{fn}(peak, p[i])")
        self.emit(2, self.pick(["dd[i] = peak - p[i]", "dd[i] = (peak - p[i]) / peak", "dd[i] = p[i] - peak"]))
        self.emit(1, self.pick(["return dd", "return dd, peak", "return dd.max()"]))

    def exact_running_extreme(self):
        """Running extremes that are not a scan: in place on one tensor (the list holds one object),
        a decayed max, a product inside."""
        x = self.main(dtypes=("float32", "float64"), special_p=0.3)
        loop = self.indexed_loop(x)
        r = loop.row.expr
        form = self.pick(["out_same", "copy_same", "decay", "nonlinear", "inplace_init_view"])
        init = self.pick(["x[0].clone()", "torch.zeros_like(x[0])"]) if form != "inplace_init_view" else "x[0]"
        if form == "inplace_init_view":
            self.no_grad = True
        self.emit(1, f"m = {init}")
        self.emit(1, "res = []")
        self.emit_all(1, loop.head)
        if form in ("out_same", "inplace_init_view"):
            self.emit(2, f"torch.maximum(m, {r}, out=m)")
        elif form == "copy_same":
            self.emit(2, f"m.copy_(torch.minimum(m, {r}))")
        elif form == "decay":
            self.emit(2, f"m = torch.maximum(m * 0.9, {r})")
        else:
            self.emit(2, f"m = torch.maximum(m, {r} * m)")
        self.emit(2, "res.append(m)")
        self.emit_all(2, loop.tail)
        self.emit(1, self.pick(["return res", "return torch.stack(res) if res else m", "return m, x"]))

    # -------------------------------------------------------------- scans

    def vec_scan(self):
        """Running sums and products read in the loop: `s = s + x[i]; out[i] = s`,
        `total += x[t]; trace.append(total * 0.5)`, `.item()` sums."""
        x = self.main(dtypes=("float32", "float32", "float64", "int64", "int32", "bool"))
        loop = self.indexed_loop(x)
        r = loop.row
        form = self.pick(["sum", "sum", "sum", "prod", "item"])
        if form == "item":
            v = self.item(self.reduce(r) if r.dims else r)
            self.emit(1, f"s = {self.pick(['0', '0.0', '0'])}")
            self.emit(1, "res = []")
            self.emit_all(1, loop.head)
            self.emit(2, self.pick(["s += {}", "s = s + {}", "s = {} + s"]).format(v.expr))
            self.emit(2, self.pick(["res.append(s)", "res.append(s * 0.5)", "res.append((s, 1))"]))
            self.emit_all(2, loop.tail)
            self.emit(1, self.pick(["return res", "return res, s", "return torch.tensor(res)"]))
            return
        if form == "prod":
            v = r.with_expr(f"(1.0 + 0.1 * torch.tanh({r.expr}.float()))", "float32") if r.dtype != "float64" else \
                r.with_expr(f"(1.0 + 0.1 * torch.tanh({r.expr}))")
            op = self.pick(["p = p * {}", "p = {} * p", "p *= {}"])
            name = "p"
            init = self.pick(["1.0", "1", "torch.ones(())"] + ([f"torch.ones({', '.join(r.dims)})"] if r.dims else []))
        else:
            v = self.value(r, loop.index, want="same") if self.chance(0.4) else r
            op = self.pick(["s = s + {}", "s = {} + s", "s += {}", "s -= {}", "s = s - {}"])
            name = "s"
            init = self.accum_init(v)
            if self.chance(0.2):
                self.no_grad = True
                self.param("total", f"torch.zeros({v.sizes!r}, dtype=torch.{self.pick(FLOATS)})")
                init = None
                name = "total"
                op = op.replace("s", "total", 1).replace(" s", " total")
        read = self.pick(["store", "store", "append_new", "append_new"])
        if init is not None:
            self.emit(1, f"{name} = {init}")
        if read == "store":
            full = self.n_delta == 0 and "n" not in self.params and loop.head[0].startswith("for")
            self.emit(1, self.pick(["out = torch.empty_like(x)", "out = torch.zeros_like(x)"]) if full and x.dtype != "bool"
                      else f"out = torch.zeros(x.shape, dtype=torch.{self.pick(['float32', 'float64'] if v.is_float or form == 'prod' else ['float32', 'float64', 'int64'])})")
        else:
            self.emit(1, "trace = []")
        self.emit_all(1, loop.head)
        self.emit(2, op.format(v.expr))
        if read == "store":
            self.emit(2, f"out[{loop.index}] = {name}")
        else:
            self.emit(2, self.pick([f"trace.append({name} * 0.5)", f"trace.append({name} + 0)", f"trace.append({name}.clone())"]))
        self.emit_all(2, loop.tail)
        res = "out" if read == "store" else self.pick(["torch.stack(trace) if trace else None", "trace"])
        self.emit(1, f"return {res}, {name}" if self.chance(0.6) else f"return {res}")

    def exact_scan_alias(self):
        """`total += x[t]; hist.append(total)`: the list holds the same tensor each time (or
        the first iteration rebinds a number, later ones add in place)."""
        x = self.main(dtypes=("float32", "float64", "int64"))
        loop = self.indexed_loop(x)
        r = loop.row.expr
        init = self.pick(["torch.zeros_like(x[0])", "0.0", "0", "x[0].clone()", "torch.zeros(())", "arg"])
        if init == "arg":
            self.no_grad = True
            self.param("total", f"torch.zeros({x.shape[1:]!r}, dtype=torch.{self.pick(FLOATS)})")
        else:
            self.emit(1, f"total = {init}")
        op = self.pick(["total += {}", "total.add_({})", "total *= 1\n        total += {}", "total -= {}"])
        if op == "total.add_({})" and init in ("0.0", "0"):
            op = "total += {}"
        self.emit(1, "hist = []")
        self.emit_all(1, loop.head)
        self.emit_all(2, op.format(r).split("\n        "))
        self.emit(2, self.pick(["hist.append(total)", "hist.append(total)", "hist.append(total[...])",
                                "hist.append(total.view(total.shape))"]))
        self.emit_all(2, loop.tail)
        self.emit(1, self.pick(["return hist", "return torch.stack(hist) if hist else total", "return hist, total"]))

    def vec_linear_rec(self):
        """`h = a * h + x[t]`: a float in [-1.5, 1.5] or a per-channel tensor (inf/nan sometimes),
        forwards or reversed (`G = r[t] + gamma * G; ret[t] = G`)."""
        x = self.main(dtypes=FLOATS, special_p=0.2)
        form = self.pick(["float", "float", "arg", "tensor0", "channel"])
        value = round(self.rng.uniform(-1.5, 1.5), 2)
        if self.chance(0.1):
            value = self.pick(['float("nan")', 'float("inf")', "1.0", "-1.0", "0.0"])
        if form == "float":
            a = str(value)
        else:
            a = "a"
            if form == "arg":
                self.param("a", str(value))
            elif form == "tensor0":
                self.param("a", f"torch.tensor({value}, dtype=torch.{self.pick(FLOATS)})")
            else:
                size = x.shape[1] if len(x.shape) == 2 else self.d
                extra = ""
                if self.chance(0.2):
                    bad = self.pick(['float("nan")', 'float("inf")', '-float("inf")'])
                    extra = f".index_fill_(0, torch.tensor([0]), {bad})"
                self.param("a", f"torch.empty({size}, dtype=torch.{self.pick([x.dtype, x.dtype, 'float32'])})"
                                f".uniform_(-1.5, 1.5, generator=g){extra}")
        count = self.count(x)
        head = self.pick([f"for t in range({count}):", f"for t in range({count}):", f"for t in reversed(range({count})):",
                          f"for t in range({count} - 1, -1, -1):", f"for t in range({count} - 1, 0, -2):",
                          f"for t in range(1, {count}):"])
        step = self.pick(["{a} * h + x[t]", "h * {a} + x[t]", "x[t] + {a} * h", "{a} * h + (1 - {a}) * x[t]",
                          "{a} * h - 2.0 * x[t]"]).format(a=a)
        init = self.pick(["0.0", "0.0", "torch.zeros_like(x[0])", "x[-1]", "torch.zeros(())"])
        read = self.pick(["none", "store", "store", "append"])
        self.emit(1, f"h = {init}")
        if read == "store":
            self.emit(1, self.pick(["out = torch.empty_like(x)", "out = torch.zeros_like(x)"])
                      if "-2)" not in head and "range(1" not in head and "n" not in self.params else "out = torch.zeros_like(x)")
        elif read == "append":
            self.emit(1, "res = []")
        self.emit(1, head)
        self.emit(2, f"h = {step}")
        if read == "store":
            self.emit(2, "out[t] = h")
        elif read == "append":
            self.emit(2, "res.append(h)")
        self.emit(1, {"none": "return h", "store": self.pick(["return out", "return out, h"]),
                      "append": self.pick(["return res", "return torch.stack(res) if res else None"])}[read])

    # -------------------------------------------------------------- in-place prefixes

    def vec_prefix_inplace(self):
        """`acc[k] += acc[k - 1]` (cumsum in place), `x[:, j] = x[:, j] * x[:, j - 1]`, ints too;
        and near misses (`-=`, a factor, a stride of 2) that must stay loops."""
        self.no_grad = True
        dt = self.pick(["float32", "float64", "int64", "int64", "int32"])
        if self.chance(0.5):
            x = self.main(dtypes=(dt,), readonly=False)
            acc = self.pick(["acc = x.clone()", "acc = x", "acc = x.clone()", "acc = x.double()"])
            start = self.pick([1, 1, 2])
            back = "k - 2" if start == 2 and self.chance(0.5) else "k - 1"
            body = self.pick(["acc[k] += acc[{b}]", "acc[k] += acc[{b}]", "acc[k] = acc[k] + acc[{b}]",
                              "acc[k] = acc[{b}] + acc[k]", "acc[k] *= acc[{b}]", "acc[k] = acc[k] * acc[{b}]",
                              "acc[k] -= acc[{b}]", "acc[k] += 2 * acc[{b}]", "acc[k] = torch.maximum(acc[k], acc[{b}])"]
                             ).format(b=back)
            if "*" in body and dt in FLOATS:
                self.inputs[-1] = self.inputs[-1]  # products of floats stay in range for n <= 50
            self.emit(1, acc)
            self.emit(1, f"for k in range({start}, {self.count(x).replace('x', 'acc') if self.chance(0.5) else self.count(x)}):")
            self.emit(2, body)
            self.emit(1, self.pick(["return acc", "return acc, x", "return x"]))
            return
        m = self.rng.randint(0, 8)
        self.tensor("x", (self.n, m), dt, readonly=False)
        start = self.pick([1, 2])
        body = self.pick(["x[:, j] = x[:, j] * x[:, j - 1]", "x[:, j] = x[:, j] * x[:, j - 1]", "x[:, j] += x[:, j - 1]",
                          "x[:, j] = x[:, j - 1] + x[:, j]", "x[:, j] *= x[:, j - 1]", "x[:, j] = x[:, j] - x[:, j - 1]",
                          "x[..., j] += x[..., j - 1]"])
        self.emit(1, f"for j in range({start}, {self.pick(['x.shape[1]', 'x.size(1)', 'x.shape[-1]'])}):")
        self.emit(2, body)
        self.emit(1, self.pick(["return x", "return None", "return x.sum()"]))

    # -------------------------------------------------------------- unit slices

    def vec_unit_slices(self):
        """`x[b:b + 1]` as a batch of one: losses accumulated, columns concatenated, a stack on dim 1."""
        F = self.functional()
        form = self.pick(["loss", "loss", "loss_list", "columns", "stack_dim", "rows"])
        if form in ("loss", "loss_list"):
            k = self.rng.randint(1, 5)
            self.tensor("logits", (self.n, k), self.pick(FLOATS))
            bad = self.chance(0.1)
            self.tensor("y", (self.n,), "int64", low=0 if not bad else -1, high=k if not bad else k + 1)
            count = self.count(Tensor("logits", "float32", (self.n, k)))
            loss = self.pick([F + ".cross_entropy(logits[b:b + 1], y[b:b + 1])",
                              F + ".cross_entropy(logits[b:b + 1], y[b:b + 1], reduction='sum')",
                              F + ".nll_loss(" + F + ".log_softmax(logits[b:b + 1], dim=1), y[b:b + 1])",
                              F + ".cross_entropy(logits[b:b + 1] * 2.0, y[b:b + 1], label_smoothing=0.1)",
                              F + ".mse_loss(logits[b:b + 1], torch.zeros_like(logits[b:b + 1]))"])
            if form == "loss":
                self.emit(1, f"loss = {self.pick(['0.0', '0.0', 'torch.zeros(())', '0'])}")
                self.emit(1, f"for b in range({count}):")
                self.emit(2, self.pick(["loss = loss + {}", "loss += {}"]).format(loss))
                self.emit(1, self.pick(["return loss", "return loss / max(logits.shape[0], 1)", "return loss / logits.shape[0]"]))
            else:
                self.emit(1, "losses = []")
                self.emit(1, f"for b in range({count}):")
                self.emit(2, f"losses.append({loss})")
                self.emit(1, self.pick(["return torch.stack(losses)", "return losses", "return sum(losses)"]))
            return
        x = self.main(rank=2, dtypes=("float32", "float64", "int64"))
        if form == "columns":
            piece = self.pick(["x[:, j:j + 1] * 2", "torch.tanh(x[:, j:j + 1].float())", "x[:, j:j + 1] - x[:, j:j + 1].sum()",
                               "x[:, j:j + 1]", "x[:, j:j + 1].T"])
            self.emit(1, "out = []")
            self.emit(1, f"for j in range({self.pick(['x.shape[1]', 'x.size(1)'])}):")
            self.emit(2, f"out.append({piece})")
            self.emit(1, "return " + self.pick(["torch.cat(out, dim=1)", "torch.cat(out, dim=-1)", "torch.cat(out, 1)",
                                                "torch.cat(out, dim=0)", "torch.cat(out, dim=1) if out else x"]))
        elif form == "stack_dim":
            if self.chance(0.5):
                self.param("x3", f"_tensor(g, ({self.n}, {self.d}, {self.rng.randint(1, 3)}), torch.float32, "
                                 f"grad={self.chance(0.3)})")
                src = "x3"
            else:
                src = "x"
            body = self.pick(["r * 2", "r + 1", "r.abs()", "r[0:1]" if src == "x" else "r[:, 0:1]"])
            self.emit(1, "return torch.stack([{} for r in {}], dim={})".format(body, src, self.pick([1, -1, 0, "1"])))
        else:
            count = self.count(x)
            piece = self.pick(["x[i:i + 1] * 2", "x[i:i + 1].sum(dim=1)", "x[i:i + 1].T @ x[i:i + 1]" if x.dtype != "int64"
                               else "x[i:i + 1] * x[i:i + 1]", "x[i:i + 1] - x[i].mean()" if x.dtype != "int64" else "x[i:i + 1] - 1"])
            self.emit(1, "res = []")
            self.emit(1, f"for i in range({count}):")
            self.emit(2, f"res.append({piece})")
            self.emit(1, "return " + self.pick(["torch.cat(res)", "torch.stack(res)", "res"]))

    # -------------------------------------------------------------- preallocated outputs

    def vec_prealloc_full(self):
        """`out = torch.empty_like(x)` written entirely (replaced by the batch), `torch.zeros`
        written from 1 (row 0 kept), an output passed by the caller."""
        form = self.pick(["empty", "empty", "partial", "arg"])
        if form == "arg":
            self.no_grad = self.chance(0.6)
        x = self.main()
        count = self.count(x)
        full_ok = self.n_delta == 0 and "n" not in self.params
        v = self.value(x.row("x[i]"), "i", want=self.pick(["same", "same", "scalar"]))
        if form == "empty" and full_ok:
            alloc = self.pick(["torch.empty_like(x)", "torch.empty_like(x)", "torch.empty(x.shape, dtype=x.dtype)",
                               "x.new_empty(x.shape)", "torch.empty_like(x, dtype=torch.float64)", "torch.zeros_like(x)",
                               f"torch.empty({', '.join(('len(x)',) + v.dims)}, dtype=torch.{v.dtype if not v.dtype.startswith('py') else 'float64'})"])
            head = self.pick(["for i in range(len(x)):", "for i in range(x.shape[0]):", "for i, _ in enumerate(x):",
                              "for i in reversed(range(len(x))):"])
        elif form == "arg":
            shape = x.shape if self.chance(0.8) else x.shape[:1]
            self.param("out", f"torch.randn({shape!r}, generator=g, dtype=torch.{self.pick(FLOATS)})")
            alloc = None
            head = self.pick([f"for i in range({count}):", "for i in range(1, len(out)):", "for i in range(len(x)):"])
        else:
            alloc = self.pick(["torch.zeros_like(x)", "torch.ones(x.shape, dtype=torch.float64)", "torch.full_like(x, 7)"])
            head = self.pick([f"for i in range(1, {count}):", f"for i in range(0, {count}, 2):",
                              f"for i in range({count} - 1):"])
        if alloc:
            self.emit(1, f"out = {alloc}")
        self.emit(1, head)
        self.emit(2, f"out[i] = {v.expr}")
        self.emit(1, self.pick(["return out", "return out", "return out, out.sum()"] +
                               (["return None"] if form == "arg" else [])))

    def exact_prealloc_alias(self):
        """A preallocated output that another name also refers to (a view, a list, the same
        object), or that the body reads: replacing it by the batch would lose those."""
        x = self.main()
        v = self.value(x.row("x[i]"), "i", want="same")
        form = self.pick(["view", "same", "list", "row_view", "read_prev", "read_self"])
        self.emit(1, self.pick(["out = torch.empty_like(x)", "out = torch.zeros_like(x)"]) if form not in ("read_self",)
                  else "out = torch.zeros_like(x)")
        pre = {"view": "alias = out.view(out.shape)", "same": "alias = out", "list": "keep = [out]",
               "row_view": "first = out[:1]", "read_prev": "", "read_self": ""}[form]
        if pre:
            self.emit(1, pre)
        self.emit(1, "for i in range(len(x)):")
        if form == "read_prev":
            self.emit(2, f"out[i] = {v.expr} + (out[i - 1] if i else 0)")
        elif form == "read_self":
            self.emit(2, f"out[i] = {v.expr} + out.sum()")
        else:
            self.emit(2, f"out[i] = {v.expr}")
        ret = {"view": "alias", "same": "alias, out", "list": "keep", "row_view": "first, out", "read_prev": "out",
               "read_self": "out"}[form]
        self.emit(1, f"return {ret}")


    # ============================================================== family "rec": linear recurrences
    # Spellings of `h = a * h + b` that autovec recognises as scans (and near misses it must
    # keep exact): the lerp form, a factor outside a sum, discounted returns with done flags,
    # divisions, negated factors, gates that change every step. Reached only through
    # `generate(seed, family="rec")`, so the default family keeps its programs.

    def rec_main(self, rank=None) -> Tensor:
        if self.chance(0.15):
            self.n = self.rng.randint(60, 600)       # long enough for the blocked scans
        return self.main("x", dtypes=FLOATS, rank=rank, special_p=0.05)

    def rec_value(self, lo=-0.99, hi=0.999, big=0.12) -> float:
        """A factor: mostly in [lo, hi], now and then exactly 1, -1 or 0, or above 1 in magnitude."""
        r = self.rng.random()
        if r < 0.06:
            return self.pick([1.0, -1.0, 0.0])
        if r < 0.06 + big:
            return round(self.pick([1, 1, -1]) * self.rng.uniform(1.01, 1.6), 3)
        if r < 0.3:
            return round(self.rng.uniform(lo, 0.0), 3)
        return round(self.rng.uniform(0.0, hi), 3)

    def rec_factor(self, x: Tensor, state: tuple, name="a", value=None, forms=None) -> str:
        """A loop-invariant factor: a literal, a Python float argument, a 0-d tensor or a
        per-feature tensor (of the state's size), of x's dtype or the other one."""
        value = self.rec_value() if value is None else value
        form = self.pick(forms or (["literal", "arg", "arg", "tensor0", "tensor0"] +
                                   (["feature", "feature"] if state else ["feature"])))
        grad = not self.no_grad and self.chance(0.25)
        dt = x.dtype if self.chance(0.75) else self.pick(FLOATS)
        if form == "literal":
            return f"({value})" if value < 0 else repr(value)
        if form == "arg":
            self.param(name, repr(value))
            return name
        if form == "tensor0":
            self.param(name, f"torch.tensor({value}, dtype=torch.{dt}{', requires_grad=True' if grad else ''})")
            return name
        size = state[0] if state else self.d     # a 0-d state broadcasts to (d,) after one step
        lo, hi = (0.0, 0.99) if value >= 0 else (-0.99, 0.99)
        expr = f"torch.empty({size}, dtype=torch.{dt}).uniform_({lo}, {hi}, generator=g)"
        if size and (abs(value) > 1 or self.chance(0.1)):
            expr += f".index_fill_(0, torch.tensor([{self.rng.randrange(size)}]), {value})"
        self.param(name, expr + (".requires_grad_()" if grad else ""))
        return name

    def rec_loop(self, x: Tensor, cols: bool, others=(), backward_p=0.3):
        """(head lines, index or None, {input: row expression}, tail lines) for a walk over
        x's rows (or columns), reading the same step of the inputs in `others`."""
        names = [x.name] + list(others)
        if cols:
            count = f"{x.name}.shape[1]"
            form = self.pick(["range", "reversed", "negstep"] if self.chance(backward_p) else ["range"])
        else:
            count = self.count(x)
            fwd = ["range", "range", "enumerate", "while"] + (["iter"] if not others else ["zip"])
            form = self.pick(["reversed", "negstep", "reversed_step"] if self.chance(backward_p) else fwd)
        t = "t"

        def rows(tmpl):
            return {nm: tmpl.format(nm) for nm in names}
        sl = "{}[:, t]" if cols else "{}[t]"
        if form == "range":
            return [f"for t in range({count}):"], t, rows(sl), []
        if form == "reversed":
            return [f"for t in reversed(range({count})):"], t, rows(sl), []
        if form == "negstep":
            return [f"for t in range({count} - 1, -1, -1):"], t, rows(sl), []
        if form == "reversed_step":
            return [self.pick([f"for t in range({count} - 1, 0, -1):", f"for t in range(1, {count}):"])], t, rows(sl), []
        if form == "while":
            return ["t = 0", f"while t < {count}:"], t, rows(sl), ["t += 1"]
        if form == "enumerate":
            r = rows(sl)
            r[x.name] = "x_t"
            return [f"for t, x_t in enumerate({x.name}):"], t, r, []
        if form == "iter":
            return [f"for x_t in {x.name}:"], None, {x.name: "x_t"}, []
        # zip
        targets = [f"{nm}_t" for nm in names]
        return [f"for {', '.join(targets)} in zip({', '.join(names)}):"], None, dict(zip(names, targets)), []

    def rec_init(self, x: Tensor, cols: bool, state: tuple) -> str:
        opts = ["0.0", "0.0", "0", "torch.zeros(())", "h0", "h0"]
        if cols:
            opts += ["torch.zeros(x.shape[0], dtype=x.dtype)", "x[:, 0]", "torch.zeros(x.shape[0])"]
        else:
            opts += ["torch.zeros_like(x[0])", "torch.zeros_like(x[0])", "x[0]", "x[-1].clone()"]
            if len(x.shape) == 2:
                opts.append("torch.zeros(x.shape[1])")
        init = self.pick(opts)
        if init == "h0":
            dt = x.dtype if self.chance(0.8) else self.pick(FLOATS)
            grad = not self.no_grad and self.chance(0.3)
            self.param("h0", f"_tensor(g, {state!r}, torch.{dt}{', grad=True' if grad else ''})")
        return init

    def rec_program(self, x: Tensor, cols: bool, head, index, pre: list, step: str, state: tuple,
                    broadcast_state=False):
        """Emit `h = init; [out/res]; loop: pre; h = step; [out[t] = h / res.append(h)]; return`."""
        init = self.rec_init(x, cols, state)
        reads = ["none", "store", "store", "append", "append"] if index else ["none", "append", "append"]
        if broadcast_state:       # h may take another shape than x's rows: no preallocated output
            reads = ["none", "append"]
        read = self.pick(reads)
        self.emit(1, f"h = {init}")
        if read == "store":
            full = head[0].startswith("for") and "n" not in self.params and "0, -1)" not in head[0] \
                and "range(1," not in head[0]
            alloc = ["torch.zeros_like(x)", "torch.zeros(x.shape, dtype=torch.float64)"]
            if full:
                alloc += ["torch.empty_like(x)", "torch.empty_like(x)"]
            self.emit(1, f"out = {self.pick(alloc)}")
        elif read == "append":
            self.emit(1, "res = []")
        self.emit_all(1, head[:-1])
        self.emit(1, head[-1])
        self.emit_all(2, pre)
        self.emit(2, self.pick([f"h = {step}"] * 6 + [f"h = ({step})"]))
        if read == "store":
            self.emit(2, f"out[:, {index}] = h" if cols else f"out[{index}] = h")
        elif read == "append":
            self.emit(2, self.pick(["res.append(h)", "res.append(h)", "res.append(h * 2.0)"]))
        self.emit_all(2, self.rec_tail)
        ret = {"none": ["h", "h", "h.sum()"], "store": ["out", "out", "(out, h)"],
               "append": ["torch.stack(res)", "torch.stack(res) if res else h", "res",
                          "torch.stack(res, dim=-1) if res else None"]}[read]
        self.emit(1, f"return {self.pick(ret)}")

    def rec_setup(self, others=(), backward_p=0.3):
        x = self.rec_main()
        cols = len(x.shape) == 2 and self.chance(0.15)
        state = (x.shape[0],) if cols else x.shape[1:]
        head, index, rows, tail = self.rec_loop(x, cols, others, backward_p)
        self.rec_tail = tail
        X = rows[x.name]
        if self.chance(0.2):      # b = some elementwise function of the row
            X = self.pick(["torch.tanh({})", "({} * 0.5)", "{}.sin()", "({} - 0.25)"]).format(X)
        return x, cols, state, head, index, rows, X

    def rec_lerp(self):
        """`h = h + a * (x[t] - h)` (EMA as a lerp) and its rearrangements; the factor of h is 1 - a."""
        x, cols, state, head, index, rows, X = self.rec_setup()
        value = self.rec_value(lo=-0.5, hi=1.0)
        if value > 1 and self.chance(0.5):
            value = round(value + 1.0, 3)       # 1 - a below -1
        a = self.rec_factor(x, state, value=value)
        step = self.pick(["h + {a} * ({X} - h)", "h + {a} * ({X} - h)", "h + ({X} - h) * {a}", "h - {a} * (h - {X})",
                          "(1 - {a}) * h + {a} * {X}", "{a} * {X} + (1.0 - {a}) * h", "torch.lerp(h, {X}, {a})"])
        self.rec_program(x, cols, head, index, [], step.format(a=a, X=X), state, broadcast_state=a == "a" and not state)

    def rec_scaled_sum(self):
        """`h = a * (h + x[t])`: the factor outside the sum."""
        x, cols, state, head, index, rows, X = self.rec_setup()
        a = self.rec_factor(x, state)
        step = self.pick(["{a} * (h + {X})", "{a} * (h + {X})", "(h + {X}) * {a}", "({X} + h) * {a}",
                          "{a} * (h - {X})"])
        self.rec_program(x, cols, head, index, [], step.format(a=a, X=X), state, broadcast_state=a == "a" and not state)

    def rec_dones(self):
        """Discounted returns with done flags: `G = r[t] + gamma * G * (1 - d[t])`, mostly backwards."""
        x, cols, state, head, index, rows, X = self.rec_setup(others=("done",), backward_p=0.7)
        gamma = self.rec_value(lo=0.8, hi=1.0, big=0.08) if self.chance(0.8) else self.rec_value()
        G = self.rec_factor(x, state, name="gamma", value=gamma)
        shape = x.shape
        ddt = self.pick(["float32", "float32", x.dtype, "float64", "int64", "bool"])
        p = self.pick([0.05, 0.2, 0.5])
        expr = f"(torch.rand({shape!r}, generator=g) < {p})"
        if ddt != "bool":
            expr += f".to(torch.{ddt})"
            if self.n and self.chance(0.12):     # a flag of -1 or 2: a factor above 1 (or negative) at one step
                k = self.rng.randrange(self.n)
                expr += f".index_fill_(0, torch.tensor([{k}]), {self.pick([-1, 2])})"
        self.param("done", expr)
        D = rows["done"]
        nd = f"(~{D})" if ddt == "bool" and self.chance(0.6) else f"(1 - {D})"
        if ddt == "bool" and self.chance(0.5):
            nd = f"(1 - {D}.float())"
        step = self.pick(["{X} + {G} * h * {nd}", "{X} + {G} * h * {nd}", "{X} + {G} * {nd} * h", "{G} * h * {nd} + {X}",
                          "{X} + h * {G} * {nd}", "{X} + {nd} * ({G} * h)"])
        self.rec_program(x, cols, head, index, [], step.format(G=G, X=X, nd=nd), state,
                         broadcast_state=G == "gamma" and not state)

    def rec_resets(self):
        """A running value reset under a condition right before its update: `if done[t]: h = 0`
        then `h = x[t] + gamma * h` (returns at episode ends, sums per segment), sometimes reset
        to another value, on flags of several elements or NaN (truthy), mostly backwards."""
        x, cols, state, head, index, rows, X = self.rec_setup(others=("done",), backward_p=0.6)
        G = self.rec_factor(x, state, name="gamma", value=self.rec_value(lo=0.8, hi=1.0, big=0.08)) \
            if self.chance(0.7) else None
        ddt = self.pick(["bool", "bool", "float32", "int64"])
        p = self.pick([0.05, 0.2, 0.5])
        expr = f"(torch.rand({x.shape!r}, generator=g) < {p})"
        if ddt != "bool":
            expr += f".to(torch.{ddt})"
            if ddt == "float32" and self.n and self.chance(0.2):
                expr += f".index_fill_(0, torch.tensor([{self.rng.randrange(self.n)}]), float('nan'))"
        self.param("done", expr)
        D = rows["done"]
        test = D if self.chance(0.15) else self.pick([f"{D}.any()", f"{D}.all()", f"{D}.sum() > 0"])
        reset = self.pick(["0", "0.0", "0.0", "0", "1.0"])
        step = "{X} + h" if G is None else self.pick(["{X} + {G} * h", "{G} * h + {X}", "h * {G} + {X}"])
        self.rec_program(x, cols, head, index, [f"if {test}:", f"    h = {reset}"], step.format(G=G, X=X), state,
                         broadcast_state=G == "gamma" and not state)

    def rec_divide(self):
        """`h = (h * a + x[t]) / c`: the factor is a / c."""
        x, cols, state, head, index, rows, X = self.rec_setup()
        a = self.rec_factor(x, state) if self.chance(0.7) else None
        cval = self.pick([2.0, 1.5, 4.0, 1.25, 3.0, 1.0, 0.5, -2.0, 0.9])
        c = self.rec_factor(x, state, name="c", value=cval, forms=["literal", "literal", "arg", "tensor0"])
        step = self.pick(["(h * {a} + {X}) / {c}", "({a} * h + {X}) / {c}", "({X} + {a} * h) / {c}",
                          "({X} - h * {a}) / {c}"] if a else ["(h + {X}) / {c}", "({X} + h) / {c}", "(h - {X}) / {c}"])
        self.rec_program(x, cols, head, index, [], step.format(a=a, c=c, X=X), state,
                         broadcast_state=(a == "a") and not state)

    def rec_negated(self):
        """`h = -a * h + x[t]`: a negated factor (alternating signs)."""
        x, cols, state, head, index, rows, X = self.rec_setup()
        a = self.rec_factor(x, state, value=self.rec_value(lo=-0.5, hi=0.999))
        step = self.pick(["-{a} * h + {X}", "-{a} * h + {X}", "{X} - {a} * h", "-({a} * h) + {X}", "{X} + (-{a}) * h",
                          "-h * {a} + {X}"])
        self.rec_program(x, cols, head, index, [], step.format(a=a, X=X), state, broadcast_state=a == "a" and not state)

    def rec_gated(self):
        """A factor that changes every step: `g = torch.sigmoid(z[t]); h = g * h + (1 - g) * x[t]`,
        or read from an input (`a[t]`, above 1 now and then)."""
        form = self.pick(["sigmoid", "sigmoid", "sigmoid", "input"])
        name = "z" if form == "sigmoid" else "a"
        x, cols, state, head, index, rows, X = self.rec_setup(others=(name,))
        zshape = x.shape if self.chance(0.85) or cols else x.shape[:1]   # per step and feature, or per step only
        grad = not self.no_grad and self.chance(0.3)
        dt = x.dtype if self.chance(0.8) else self.pick(FLOATS)
        if form == "sigmoid":
            self.param("z", f"_tensor(g, {zshape!r}, torch.{dt}{', grad=True' if grad else ''})")
            Z = rows["z"]
            gate = self.pick(["torch.sigmoid({Z})", "torch.sigmoid({Z})", "{Z}.sigmoid()", "torch.sigmoid({Z} * 2.0 - 1.0)"]
                             ).format(Z=Z)
            if len(zshape) == 1 and len(x.shape) == 2 and not cols:
                gate = f"{gate}.unsqueeze(-1)" if self.chance(0.5) else gate   # (1,) against (d,), or 0-d
            pre = [f"gate = {gate}"]
            step = self.pick(["gate * h + (1 - gate) * {X}", "gate * h + (1 - gate) * {X}", "(1 - gate) * {X} + gate * h",
                              "h * gate + {X} * (1.0 - gate)", "gate * h + {X}", "h + (1 - gate) * ({X} - h)"])
        else:
            hi = self.pick([0.99, 0.99, 1.0, 1.3])
            lo = self.pick([0.0, -0.99, -1.3]) if hi < 1.3 else 0.0
            expr = f"torch.empty({zshape!r}, dtype=torch.{dt}).uniform_({lo}, {hi}, generator=g)"
            self.param("a", expr + (".requires_grad_()" if grad else ""))
            A = rows["a"]
            pre = [] if self.chance(0.6) else [f"f_t = {A}"]
            A = "f_t" if pre else A
            step = self.pick(["{A} * h + {X}", "h * {A} + {X}", "{X} + {A} * h", "{A} * h + (1 - {A}) * {X}"])
            gate = A
        self.rec_program(x, cols, head, index, pre, step.format(X=X, A=gate), state)

    # ============================================================== family "compile": sequential loops
    # Loops with a true loop-carried dependence whose straight-line body the compile fallback
    # (`autovec(f, fallback="compile")`) may run as a torch.compile'd step, and bodies it must
    # refuse. Reached through `generate(seed, family="compile")`; their `make_inputs(variant)`
    # gives other inputs for variant 1 (another trip count, sometimes another batch shape or
    # Python number), which the runner's compile mode uses for a last call.

    def comp_inputs(self, body: str, list_ok=True):
        """x (or a list xs) of T steps ([B,] D) and the weights; returns (source name, is_list, dtype)."""
        self.variants = True
        self.helpers["WEIGHT"] = WEIGHT_HELPER
        dt = self.pick(FLOATS + ("float32",))
        t0 = self.rng.randint(10, 24)
        t1 = self.pick([t0, self.rng.randint(2, 30), self.rng.randint(10, 30), 1, 0])
        b0 = self.pick(["()", "()", "(2,)", "(3,)"])
        b1 = b0 if self.chance(0.8) else self.pick(["()", "(1,)", "(2,)", "(4,)"])
        H = self.rng.randint(1, 5)
        D = H if body not in ("proj", "lstm") else self.rng.randint(1, 4)
        is_list = list_ok and self.chance(0.3)
        if is_list:
            t1 = max(t1, 1)
        self.inputs.append(f"T = {t0} if variant == 0 else {t1}")
        self.inputs.append(f"B = {b0} if variant == 0 else {b1}")
        grad = not self.no_grad and self.chance(0.3)
        self.wgrad = not self.no_grad and self.chance(0.25)
        self.dt, self.H, self.D = dt, H, D
        if is_list:
            src = "xs"
            if grad:
                self.param("xs", f"[r.detach().requires_grad_() for r in _tensor(g, (T, *B, {D}), torch.{dt})]")
            else:
                self.param("xs", f"list(_tensor(g, (T, *B, {D}), torch.{dt}).unbind(0))")
            if self.chance(0.1):      # variant 1: one step of another width (the loop raises there)
                self.inputs.append("if variant:\n        k = len(xs) // 2\n        xs[k] = torch.cat([xs[k]] * 2, -1).detach().requires_grad_(xs[k].requires_grad)")
        else:
            src = "x"
            layout = ", layout='step'" if self.chance(0.15) else ""
            self.param("x", f"_tensor(g, (T, *B, {D}), torch.{dt}{layout}{', grad=True' if grad else ''})")
        return src, is_list, dt

    def weight(self, name, shape, scale=0.5):
        dt = self.dt if self.chance(0.95) else self.pick(FLOATS)
        self.param(name, f"_weight(g, {shape!r}, torch.{dt}, {scale}{', grad=True' if self.wgrad else ''})")

    def comp_loop(self, src: str, is_list: bool, other=None):
        """(head, index or None, row expression, {other: its row}): `other` (a mask `m`, or a
        second input `y`) is read at the same step, or walked together with `zip`."""
        n = f"len({src})" if is_list or self.chance(0.3) else f"{src}.shape[0]"
        forms = ["range", "range", "iter", "enumerate"] + ([] if is_list else ["reversed", "negstep", "from1"])
        if other:
            forms = [f for f in forms if f != "iter"] + ["zip", "zip"]
        form = self.pick(forms)
        rows = {other: f"{other}[t]"} if other else {}
        if form == "range":
            return f"for t in range({n}):", "t", f"{src}[t]", rows
        if form == "iter":
            return f"for x_t in {src}:", None, "x_t", rows
        if form == "enumerate":
            return f"for t, x_t in enumerate({src}):", "t", "x_t", rows
        if form == "reversed":
            return f"for t in reversed(range({n})):", "t", f"{src}[t]", rows
        if form == "negstep":
            return f"for t in range({n} - 1, -1, -1):", "t", f"{src}[t]", rows
        if form == "from1":
            return f"for t in range(1, {n}):", "t", f"{src}[t]", rows
        return f"for x_t, {other}_t in zip({src}, {other}):", None, "x_t", {other: f"{other}_t"}

    def comp_h_init(self, src, is_list):
        first = f"{src}[0]"
        opts = ["torch.zeros(U.shape[0], dtype=U.dtype)", "h0", "h0",
                f"torch.zeros(*{first}.shape[:-1], U.shape[0], dtype={first}.dtype)"]
        if self.dt == "float32" or self.chance(0.1):    # float32 whatever the inputs (else matmul raises)
            opts.append("torch.zeros(U.shape[0])")
        if self.D == self.H:
            opts += [f"torch.zeros_like({first})", f"{first} * 0.5"]
        init = self.pick(opts)
        if init == "h0":
            self.param("h0", f"_tensor(g, (*B, {self.H}), torch.{self.dt}"
                             f"{', grad=True' if not self.no_grad and self.chance(0.3) else ''})")
        return init

    def comp_body(self, body: str, R: str, rows: dict) -> tuple:
        """(lines before the loop, body lines, carried names besides h)."""
        if body == "tanh":
            return [], [self.pick(["h = torch.tanh(h @ U + {R})", "h = torch.tanh({R} + h @ U) * 0.5 + h * 0.5",
                                   "h = torch.tanh(torch.matmul(h, U) + {R})", "h = (h @ U + {R}).clamp(-1.0, 1.0)",
                                   "h = torch.sigmoid(h @ U) * torch.tanh({R}) + 0.5 * h",
                                   "h = (h.matmul(U) + {R}).tanh()", "h = (h @ U).add({R}).clamp(min=-1.0, max=1.0)",
                                   "h = torch.tanh(h @ U.T + {R})", "h = torch.tanh(h @ U + {R}).to(h.dtype)"]
                                  ).format(R=R)], []
        if body == "temps":
            return [], self.pick([["a = h @ U", f"b = a + {R}", "h = torch.tanh(b)"],
                                  [f"u = torch.sigmoid({R})", "v = torch.tanh(h @ U)", "h = u * v + (1 - u) * h"],
                                  ["prev = h", f"h = torch.tanh(prev @ U + {R})", "d = h - prev"]]), []
        if body == "proj":
            self.weight("W", (self.D, self.H))
            self.weight("bias", (self.H,), 0.1)
            return [], [f"pre = {R} @ W + bias", "h = torch.relu(pre + h @ U) - 0.1 * h"], []
        if body == "scale":
            self.inputs.append(f"scale = {self.pick(['0.5', '1.5', '-0.25'])} if variant == 0 else "
                               f"{self.pick(['0.5', '0.75', '2.0'])}")
            self.params.append("scale")
            return [], [f"h = torch.tanh(h @ U + {R} * scale)"], []
        if body == "global":
            self.helpers["BIAS"] = f"BIAS = torch.linspace(-0.5, 0.5, {self.H}, dtype=torch.{self.dt})\n"
            return [], [f"h = torch.tanh(h @ U + {R} + BIAS)"], []
        if body == "config":
            self.helpers["CFG"] = "CFG = {'scale': 1.0}\n"
            self.inputs.append(f"scale = 0.5 if variant == 0 else {self.pick(['0.5', '0.75'])}")
            self.params.append("scale")
            return ["CFG['scale'] = scale"], [f"h = torch.tanh(h @ U + {R} * CFG['scale'])"], []
        if body == "pair":
            return [], [self.pick(["h = torch.tanh(h @ U + {R} * {Y})", "h = torch.tanh(h @ U + {R}) + 0.1 * {Y}",
                                   "u = torch.sigmoid({Y})\nh = u * torch.tanh(h @ U + {R}) + (1 - u) * h"]
                                  ).format(R=R, Y=rows["y"])], []
        if body == "helper":
            self.helpers["CELL"] = "def cell(h, r, U):\n    return torch.tanh(h @ U + r)\n"
            return [], [f"h = cell(h, {R}, U)"], []
        if body == "functional":
            F = self.functional()
            return [], [self.pick([f"h = {F}.layer_norm(torch.tanh(h @ U + {R}), (U.shape[0],))",
                                   f"h = {F}.gelu(h @ U + {R}) * 0.5", f"h = {F}.normalize(h @ U + {R}, dim=-1)"])], []
        if body == "masked":
            return [], [f"h = torch.where({rows['m']} > 0, torch.tanh(h @ U + {R}), h)"], []
        if body == "hc":
            c_init = self.pick(["torch.zeros_like(h)", "h", "h * 0", "h + 1.0"])
            return [f"c = {c_init}"], self.pick([
                ["h = torch.tanh(h @ U + {R})", "c = c * 0.9 + h.sigmoid() * c.cos()"],
                ["h, c = torch.tanh(h @ U + {R} + c), c * 0.5 + h"],
                ["c = c + h * {R}", "h = torch.tanh(c @ U)"],
                ["c, h = h, torch.tanh(h @ U + {R} - c)"]]), ["c"]
        if body == "lstm":
            self.weight("Wx", (self.D, 4 * self.H))
            self.weight("Wh", (self.H, 4 * self.H))
            split = self.pick(["i, f, g_, o = z.chunk(4, dim=-1)", f"i, f, g_, o = torch.split(z, {self.H}, dim=-1)"])
            return ["c = torch.zeros_like(h)"], [f"z = {R} @ Wx + h @ Wh", split,
                                                 "c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g_)",
                                                 "h = torch.sigmoid(o) * torch.tanh(c)"], ["c"]
        if body == "extra":
            form = self.pick(["max", "max", "sum", "sum", "prod", "prod", "flag", "flag", "sum0", "count"])
            init = {"max": "m = torch.full_like(h, -2.0)", "sum": "s = torch.zeros(())", "sum0": "s = 0.0",
                    "count": "k = 0", "prod": "p = torch.ones_like(h)",
                    "flag": "seen = torch.zeros((), dtype=torch.bool)"}[form]
            line = {"max": "m = torch.maximum(m, h)", "sum": "s = s + h.sum()", "sum0": "s = s + h.mean()",
                    "count": "k = k + 1", "prod": "p = p * (1.0 + 0.1 * h)",
                    "flag": "seen = seen | (h.sum() > 0.5)"}[form]
            name = init.split(" ")[0]
            return [init], [f"h = torch.tanh(h @ U + {R})", line], [name]
        raise ValueError(body)

    def comp_program(self, body: str, refusal=None):
        if refusal == "inplace" or self.chance(0.05):
            self.no_grad = self.chance(0.7)
        src, is_list, dt = self.comp_inputs(body)
        self.weight("U", (self.H, self.H), self.pick([0.5, 0.5, 0.3, 1.0]))
        other = {"masked": "m", "pair": "y"}.get(body)
        head, t, R, rows = self.comp_loop(src, is_list, other)
        if body == "masked":
            self.param("m", f"(torch.rand((T, *B, 1), generator=g) < 0.7).to(torch.{self.pick(['float32', 'int64', 'bool'])})")
        elif body == "pair":
            if is_list:
                self.param("y", f"list(_tensor(g, (T, *B, {self.D}), torch.{self.dt}).unbind(0))")
            else:
                self.param("y", f"_tensor(g, (T, *B, {self.D}), torch.{self.dt})")
        h_init = self.comp_h_init(src, is_list)
        pre, lines, carried = self.comp_body(body, R, rows)
        first = f"{src}[0]"
        # what the loop keeps: appends and stores at the end of the body
        collect = self.pick(["stack", "stack", "list", "store", "last", "log", "both", "sum"] if t else
                            ["stack", "stack", "list", "last", "log", "both", "sum"])
        if collect == "both" and not carried:
            collect = "stack"
        if refusal == "append_first" and collect == "last":
            collect = "stack"
        if collect == "store" and self.no_grad and self.chance(0.4):
            collect = "store_arg"
        init, step, ret = [], [], "h"
        if collect in ("stack", "list"):
            init, step = ["outs = []"], [self.pick(["outs.append(h)", "outs.append(h)", "outs.append(h * 2.0)"])]
            ret = self.pick(["torch.stack(outs) if outs else h", "(torch.stack(outs) if outs else None, h)"]) \
                if collect == "stack" else "outs"
        elif collect == "sum":
            init, step, ret = ["outs = []"], ["outs.append(h.sum())"], "outs"
        elif collect == "both":
            c = carried[0]
            init, step = ["hs = []", "cs = []"], ["hs.append(h)", f"cs.append({c})"]
            ret = f"hs, cs, {c}"
        elif collect == "store":
            init = [f"out = torch.zeros(len({src}), *{first}.shape[:-1], U.shape[0], dtype={first}.dtype)"
                    if is_list else f"out = torch.zeros(*{src}.shape[:-1], U.shape[0], dtype={src}.dtype)"]
            step, ret = [self.pick([f"out[{t}] = h", f"out[{t}] = h", f"out[{t}] = h.tanh()", f"out[{t} + 1] = h",
                                    f"out[-1 - {t}] = h"])], "out, h"
            if "+ 1]" in step[0]:
                init = [init[0].replace("zeros(len(xs)", "zeros(len(xs) + 1").replace("zeros(*x.shape[:-1]",
                                                                                      "zeros(x.shape[0] + 1, *x.shape[1:-1]")]
        elif collect == "store_arg":
            self.param("out", f"torch.zeros((T, *B, {self.H}), dtype=torch.{self.pick(FLOATS)})")
            step, ret = [f"out[{t}] = h"], self.pick(["out", "None", "h"])
        elif collect == "log":
            self.param("log", "[]")
            step, ret = [self.pick(["log.append(h)", "log.append(h.sum())"])], self.pick(["h", "None"])
        if carried and collect not in ("both",) and self.chance(0.5):
            ret = f"({ret}, {', '.join(carried)})" if not ret.startswith("(") else ret[:-1] + f", {', '.join(carried)})"
        body_lines = [ln.format(R=R) for ln in lines]
        body_lines = self.comp_refuse(refusal, body_lines, step, t, R) if refusal else body_lines + step
        body_lines = [ln for line in body_lines for ln in line.split("\n")]
        self.emit(1, f"h = {h_init}")
        self.emit_all(1, pre + init)
        d = 1
        if self.chance(0.08):     # the loop under no_grad (dynamo guards on the grad mode)
            self.emit(1, "with torch.no_grad():")
            d = 2
        self.emit(d, head)
        self.emit_all(d + 1, body_lines)
        self.emit(1, f"return {ret}")

    def comp_refuse(self, refusal, lines, step, t, R):
        """The body with what keeps it from being a pure step (print, in place, break, ...)."""
        idx = t or "0"
        if refusal == "print":
            extra = self.pick([f"print({idx})", "print(tuple(h.shape))", f"print('step', {idx}, end=' ')"])
            pos = self.rng.randint(0, len(lines))
            return lines[:pos] + [extra] + lines[pos:] + step
        if refusal == "inplace":
            extra = self.pick(["h.mul_(0.5)", "h.mul_(0.5)", "h += 0.25", "h.clamp_(-0.5, 0.5)", "h.add_(h)"])
            return lines + [extra] + step
        if refusal == "break":
            thr = self.pick(["0.0", "0.5", "-0.5", "2.0", "100"])
            cond = self.pick([f"h.sum() > {thr}", f"h.mean().item() < {thr}", f"bool((h > {thr}).all())"])
            pos = self.pick([0, len(lines)])
            return lines[:pos] + [f"if {cond}:", "    break"] + lines[pos:] + step
        if refusal == "index":
            if not t:
                return lines + ["h = h * 0.9"] + step     # (no index to use: an assignment after the update)
            extra = self.pick([f"h = h * (1.0 / ({t} + 1))", f"h = h + 0.01 * {t}", f"h = torch.tanh(h + {t})"])
            return lines + [extra] + step
        if refusal == "append_first":
            return step + lines
        # other: continue, a random draw, the filled list read, .item(), a counter, a helper with effects
        form = self.pick(["continue", "random", "read_list", "item", "impure", "if"])
        if form == "continue" and t:
            return [f"if {t} % 3 == 1:", "    continue"] + lines + step
        if form == "random":
            return lines + ["h = h + 0.01 * torch.randn(h.shape, dtype=h.dtype)"] + step
        if form == "read_list" and step and "outs.append" in step[0]:
            return lines + ["h = h + (outs[-1] * 0.1 if outs else 0.0)"] + step
        if form == "item":
            return lines + ["h = h * (1.0 if h.sum().item() > 0 else -1.0)"] + step
        if form == "impure":
            self.helpers["IMPURE"] = "CALLS = [0]\n\n\ndef bump(h):\n    CALLS[0] += 1\n    return h * (1.0 + 0.01 * CALLS[0])\n"
            return lines + ["h = bump(h)"] + step
        return lines + ["if h.sum() > 0:", "    h = h * 0.5"] + step

    def comp_rnn(self):
        """`h = torch.tanh(h @ U + x[t])` and variants: one carried value, temporaries, a
        projection, a Python number or a global in the body, a helper, torch.nn.functional."""
        self.comp_program(self.pick(["tanh", "tanh", "tanh", "temps", "proj", "scale", "global", "config", "helper",
                                     "functional", "masked", "pair"]))

    def comp_multi(self):
        """Several carried values: `h, c`, an LSTM cell, a running max / sum / counter."""
        self.comp_program(self.pick(["hc", "hc", "lstm", "extra", "extra"]))

    def comp_refuse_print(self):
        self.comp_program(self.pick(["tanh", "hc", "temps"]), refusal="print")

    def comp_refuse_inplace(self):
        self.comp_program(self.pick(["tanh", "hc", "temps"]), refusal="inplace")

    def comp_refuse_break(self):
        self.comp_program(self.pick(["tanh", "hc", "temps"]), refusal="break")

    def comp_refuse_index(self):
        self.comp_program(self.pick(["tanh", "hc", "temps"]), refusal="index")

    def comp_refuse_append_first(self):
        self.comp_program(self.pick(["tanh", "hc", "temps"]), refusal="append_first")

    def comp_refuse_other(self):
        self.comp_program(self.pick(["tanh", "hc", "temps"]), refusal="other")

    def comp_simple(self, grad_ok=True):
        """x (T, [B,] H), U and h = zeros: the plain setting of the forms below."""
        self.no_grad = not grad_ok
        self.variants = True
        self.helpers["WEIGHT"] = WEIGHT_HELPER
        self.dt, self.wgrad = self.pick(FLOATS), False
        H = self.rng.randint(1, 5)
        self.H = self.D = H
        self.inputs.append(f"T = {self.rng.randint(10, 24)} if variant == 0 else {self.rng.randint(0, 30)}")
        self.inputs.append(f"B = {self.pick(['()', '()', '(2,)'])}")
        grad = grad_ok and self.chance(0.3)
        self.param("x", f"_tensor(g, (T, *B, {H}), torch.{self.dt}{', grad=True' if grad else ''})")
        self.weight("U", (H, H))
        self.emit(1, f"h = {self.pick(['torch.zeros_like(x[0])', 'torch.zeros(*x.shape[1:-1], U.shape[0], dtype=U.dtype)'])}")

    def comp_driver_order(self):
        """Appends and stores at the end of the body where a later one reads what an earlier
        one filled (`log.append(h); log.append(len(log))`): the step may not compute both
        values before the driver does the first."""
        self.comp_simple()
        form = self.pick(["len_same", "len_other", "read_store", "read_last", "sum_list"])
        head = self.pick(["for t in range(x.shape[0]):", "for t, x_t in enumerate(x):"])
        R = "x_t" if "x_t" in head else "x[t]"
        if form == "len_same":
            init, tail, ret = ["log = []"], ["log.append(h)", "log.append(len(log))"], "log"
        elif form == "len_other":
            init, tail, ret = ["outs = []", "sizes = []"], ["outs.append(h)", "sizes.append(len(outs))"], "outs, sizes"
        elif form == "read_store":
            init = ["out = torch.zeros(*x.shape[:-1], U.shape[0], dtype=U.dtype)", "totals = []"]
            tail, ret = ["out[t] = h", "totals.append(out.sum())"], "out, totals"
        elif form == "read_last":
            init, tail, ret = ["outs = []", "pairs = []"], ["outs.append(h)", "pairs.append(outs[-1] * 2.0)"], "outs, pairs"
        else:
            init, tail, ret = ["outs = []", "run = []"], ["outs.append(h.sum())", "run.append(sum(outs))"], "outs, run"
        self.emit_all(1, init)
        self.emit(1, head)
        self.emit(2, f"h = torch.tanh(h @ U + {R})")
        self.emit_all(2, tail)
        self.emit(1, f"return {ret}")

    def comp_alias_after(self):
        """What the loop appends is a view of an input, the carried value itself or a loop
        invariant; changed in place after the loop, the list must see the change."""
        self.comp_simple(grad_ok=False)
        form = self.pick(["row", "element", "state", "invariant"])
        head = "for x_t in x:" if form == "element" else "for t in range(x.shape[0]):"
        R = "x_t" if form == "element" else "x[t]"
        self.emit(1, "outs = []")
        self.emit(1, head)
        self.emit(2, f"h = torch.tanh(h @ U + {R})")
        self.emit(2, {"row": "outs.append(x[t])", "element": "outs.append(x_t)", "state": "outs.append(h)",
                      "invariant": "outs.append(U)"}[form])
        after = {"row": ["x.mul_(2.0)", "x[0] = 7.0", "x += 1"], "element": ["x.mul_(2.0)", "x.zero_()"],
                 "state": ["h.add_(1.0)", "h.zero_()"], "invariant": ["U.mul_(2.0)", "U.zero_()"]}[form]
        self.emit(1, self.pick(after))
        self.emit(1, self.pick(["return outs, h", "return [o.clone() for o in outs]", "return torch.stack(outs) if outs else h"]))

    def comp_store_self(self):
        """The step's result stored into the tensor the loop reads: `x[t + 1] = h` (the next
        step must see it), or into the row it just read."""
        self.no_grad = True
        self.variants = True
        self.helpers["WEIGHT"] = WEIGHT_HELPER
        self.dt, self.wgrad = self.pick(FLOATS), False
        H = self.rng.randint(1, 5)
        self.H = self.D = H
        self.inputs.append(f"T = {self.rng.randint(10, 24)} if variant == 0 else {self.rng.randint(2, 30)}")
        self.param("x", f"_tensor(g, (T, {H}), torch.{self.dt})")
        self.weight("U", (H, H))
        form = self.pick(["next", "same", "prev"])
        self.emit(1, f"h = {self.pick(['torch.zeros_like(x[0])', 'x[0].clone()', 'torch.zeros(U.shape[0], dtype=U.dtype)'])}")
        if form == "next":
            self.emit(1, "for t in range(x.shape[0] - 1):")
            self.emit(2, "h = torch.tanh(h @ U + x[t])")
            self.emit(2, self.pick(["x[t + 1] = h", "x[t + 1] = x[t + 1] * 0.5 + h"]))
        elif form == "same":
            self.emit(1, "for t in range(x.shape[0]):")
            self.emit(2, "h = torch.tanh(h @ U + x[t])")
            self.emit(2, "x[t] = h")
        else:
            self.emit(1, "for t in range(1, x.shape[0]):")
            self.emit(2, "h = torch.tanh(h @ U + x[t] + x[t - 1])")
            self.emit(2, "x[t] = h")
        self.emit(1, self.pick(["return x, h", "return h", "return x.sum()"]))

    # -------------------------------------------------------------- assembling

    def source(self, kind: str) -> str:
        helpers = "\n\n".join(self.helpers[k] for k in sorted(self.helpers))
        parts = [f'"""autovec fuzz program: seed {self.seed}, form {kind}."""', "import types", "", "import torch", ""]
        if helpers:
            parts += ["", helpers]
        parts += ["", f"def f({', '.join(self.params)}):", *self.lines, "", ""]
        if self.variants:
            parts += ["def make_inputs(variant=0):",
                      f"    g = torch.Generator().manual_seed({self.seed} + 1000003 * variant)"]
        else:
            parts += ["def make_inputs():", f"    g = torch.Generator().manual_seed({self.seed})"]
        parts += ["    " + line for line in self.inputs]
        names = [self.aliases.get(p, p) for p in self.params]
        parts += [f"    return ({', '.join(names)},)", "", TENSOR_HELPER]
        return "\n".join(parts)


VEC_FORMS = {
    "prealloc": Gen.vec_prealloc, "prealloc_arg": Gen.vec_prealloc_arg, "range_step": Gen.vec_range_step,
    "for_row": Gen.vec_for_row, "zip": Gen.vec_zip, "enumerate": Gen.vec_enumerate, "while": Gen.vec_while,
    "columns": Gen.vec_columns, "accumulate": Gen.vec_accumulate, "product": Gen.vec_product,
    "count": Gen.vec_count, "running_max": Gen.vec_running_max, "argbest": Gen.vec_argbest,
    "filter": Gen.vec_filter, "if_else": Gen.vec_if_else, "continue": Gen.vec_continue,
    "scatter_add": Gen.vec_scatter_add, "scatter_set": Gen.vec_scatter_set, "cat_accum": Gen.vec_cat_accum,
    "comprehension": Gen.vec_comprehension, "genexp": Gen.vec_genexp, "nested": Gen.vec_nested,
    "live_out": Gen.vec_live_out, "accumulate_arg": Gen.vec_accumulate_arg,
    "accumulate_view": Gen.vec_accumulate_view, "same_tensor": Gen.vec_same_tensor,
    "write_index": Gen.vec_write_index, "sources": Gen.vec_sources, "branches": Gen.vec_branches,
    "two_loops": Gen.vec_two_loops, "consumers": Gen.vec_consumers, "globals": Gen.vec_globals,
    "row_inplace": Gen.vec_row_inplace, "multi_out": Gen.vec_multi_out, "triangular": Gen.vec_triangular,
    "list_out": Gen.vec_list_out, "item_index": Gen.vec_item_index, "slice_write": Gen.vec_slice_write,
    "for_else": Gen.vec_for_else, "no_grad": Gen.vec_no_grad, "attributes": Gen.vec_attributes,
}
EXACT_FORMS = {
    "carried": Gen.exact_carried, "running_state": Gen.exact_running_state, "break": Gen.exact_break,
    "append_arg": Gen.exact_append_arg, "print": Gen.exact_print, "inplace_arg": Gen.exact_inplace_arg,
    "alias": Gen.exact_alias, "partial_strided": Gen.exact_partial_strided, "random": Gen.exact_random,
    "raise": Gen.exact_raise, "py_floats": Gen.exact_py_floats, "impure_helper": Gen.exact_impure_helper,
    "early_return": Gen.exact_early_return, "rebind": Gen.exact_rebind, "for_else_break": Gen.exact_for_else_break,
    "try": Gen.exact_try, "stateful_module": Gen.exact_stateful_module,
}
# forms for the newer features: picked for about a third of the seeds, from a random stream
# of their own, so that the other seeds keep the programs they had before these existed
NEW_VEC_FORMS = {
    "fission_rnn": Gen.vec_fission_rnn, "fission_lstm": Gen.vec_fission_lstm,
    "running_extreme": Gen.vec_running_extreme, "drawdown": Gen.vec_drawdown, "scan": Gen.vec_scan,
    "linear_rec": Gen.vec_linear_rec, "prefix_inplace": Gen.vec_prefix_inplace, "unit_slices": Gen.vec_unit_slices,
    "prealloc_full": Gen.vec_prealloc_full,
}
NEW_EXACT_FORMS = {
    "fission_effects": Gen.exact_fission_effects, "running_extreme": Gen.exact_running_extreme,
    "scan_alias": Gen.exact_scan_alias, "prealloc_alias": Gen.exact_prealloc_alias,
}
NEW_SHARE = 0.35
KINDS = ([f"vec/{k}" for k in VEC_FORMS] + [f"exact/{k}" for k in EXACT_FORMS] +
         [f"vec/{k}" for k in NEW_VEC_FORMS] + [f"exact/{k}" for k in NEW_EXACT_FORMS])


# family "rec": spellings of linear recurrences (scans) and near misses; family "compile":
# sequential loops for the compile fallback (and bodies it must refuse). Neither is drawn by
# the default family, so every default seed keeps its program; `generate(seed, family=...)`
# picks one of their forms from a stream of its own.
def rec_coupled(self):
    """Two running values in one loop, the second sometimes updated from the first after its
    update (momentum: `v = mu * v + g[t]; w = w - lr * v`), before it, or not at all; each
    read afterwards (a scan) or only at the end (a total)."""
    x = self.main(dtypes=("float32", "float64"), rank=self.pick([1, 2]))
    loop = self.indexed_loop(x, allow_while=False)
    i, row = loop.index, loop.row.expr
    zero = "0.0" if len(x.shape) == 1 else f"torch.zeros({x.name}.shape[1], dtype={x.name}.dtype)"
    self.emit(1, f"a = {zero}")
    self.emit(1, f"b = {zero}")
    self.emit(1, "outs = []")
    self.emit_all(1, loop.head)
    first = self.pick([f"a = 0.9 * a + {row}", f"a = a + {row}", f"a = a * 0.5 + {row} * 2"])
    uses = self.pick(["a", "a", f"{row}", "(a * 2)", f"(a - {row})"])
    second = self.pick([f"b = b - 0.1 * {uses}", f"b = b + {uses}", f"b = 0.8 * b + {uses}"])
    if self.chance(0.2):
        self.emit(2, second)
        self.emit(2, first)
    else:
        self.emit(2, first)
        self.emit(2, second)
    if self.chance(0.6):
        self.emit(2, f"outs.append({self.pick(['b', 'a + b', 'b * 2'])})")
    self.emit_all(2, loop.tail)
    self.emit(1, self.pick(["return a, b, outs", "return b"]))


REC_FORMS = {
    "lerp": Gen.rec_lerp, "scaled_sum": Gen.rec_scaled_sum, "dones": Gen.rec_dones, "divide": Gen.rec_divide,
    "negated": Gen.rec_negated, "gated": Gen.rec_gated, "coupled": rec_coupled, "resets": Gen.rec_resets,
}
COMPILE_FORMS = {
    "rnn": Gen.comp_rnn, "multi": Gen.comp_multi,
    "store_self": Gen.comp_store_self, "driver_order": Gen.comp_driver_order, "alias_after": Gen.comp_alias_after,
    "refuse_print": Gen.comp_refuse_print, "refuse_inplace": Gen.comp_refuse_inplace,
    "refuse_break": Gen.comp_refuse_break, "refuse_index": Gen.comp_refuse_index,
    "refuse_append_first": Gen.comp_refuse_append_first, "refuse_other": Gen.comp_refuse_other,
}
# ============================================================== family "scan2": newer scans
# Running extremes read inside the loop (Python max/min of .item() or 0-d tensors, `if x[i] >
# best: best = x[i]`, arg-best with payloads), running log-sum-exp with torch.logaddexp, and
# fission of sequential loops with loop-invariant computations in the body. Reached only
# through `generate(seed, family="scan2")`, so the other families keep their programs.

def _s2_values(self, name="x", rank=1, int_ok=True, grad_ok=True, nan_p=0.15):
    """(n,) or (n, d) small integer-valued values (ties), float32/float64 or int64; NaN now and then."""
    n = self.n
    shape = (n,) if rank == 1 else (n, self.d)
    dt = self.pick(FLOATS + ("float32",) + (("int64",) if int_ok else ()))
    hi = self.pick([2, 3, 5])
    expr = f"torch.randint(-{hi}, {hi + 1}, {shape!r}, generator=g)"
    expr = f"{expr}.to(torch.{dt})" if dt != "int64" else expr
    if dt in FLOATS and n and self.chance(nan_p):
        expr += f".index_fill_(0, torch.tensor([{self.rng.randrange(n)}]), float('nan'))"
    if dt in FLOATS and grad_ok and not self.no_grad and self.chance(0.3):
        expr += ".requires_grad_()"
    self.param(name, expr)
    return Tensor(name, dt, shape)


def _s2_loop(self, x, index="i"):
    """(head, index, row, tail): forwards, backwards, from 1, or a while loop."""
    cnt = self.pick([f"{x.name}.shape[0]", f"len({x.name})"])
    form = self.pick(["range", "range", "range", "reversed", "from1", "while", "enumerate"])
    i = index
    if form == "range":
        return [f"for {i} in range({cnt}):"], i, f"{x.name}[{i}]", []
    if form == "reversed":
        return [self.pick([f"for {i} in reversed(range({cnt})):", f"for {i} in range({cnt} - 1, -1, -1):"])], i, \
            f"{x.name}[{i}]", []
    if form == "from1":
        return [f"for {i} in range(1, {cnt}):"], i, f"{x.name}[{i}]", []
    if form == "enumerate":
        return [f"for {i}, v_ in enumerate({x.name}):"], i, "v_", []
    return [f"{i} = 0", f"while {i} < {cnt}:"], i, f"{x.name}[{i}]", [f"{i} += 1"]


def scan2_item_extreme(self):
    """`m = max(m, x[i].item())` (Python floats) or `m = min(x[i], m)` (0-d tensors), read in the loop."""
    x = _s2_values(self, grad_ok=True)
    head, i, r, tail = _s2_loop(self, x)
    fn = self.pick(["max", "min"])
    item = self.chance(0.5)
    v = f"{r}.item()" if item else r
    call = self.pick([f"{fn}(m, {v})", f"{fn}({v}, m)"])
    inf = "-inf" if fn == "max" else "inf"
    inits = [f"float('{inf}')", "0", "10.0", "-10.0"] + ([f"{x.name}[0].item()"] if item else [f"{x.name}[0]"])
    if not item:
        inits += [f"torch.tensor(float('{inf}'))", f"torch.tensor(0.0, dtype={x.name}.dtype)" if x.dtype in FLOATS
                  else "torch.tensor(0)"]
    self.emit(1, f"m = {self.pick(inits)}")
    read = self.pick(["none", "append", "append", "store", "gap"])
    if read == "append":
        self.emit(1, "vals = []")
    elif read in ("store", "gap"):
        self.emit(1, self.pick([f"out = torch.zeros({x.name}.shape[0])", f"out = torch.zeros_like({x.name}, dtype=torch.float64)",
                                f"out = torch.full(({x.name}.shape[0],), -1.0)"]))
    self.emit_all(1, head)
    self.emit(2, f"m = {call}")
    if read == "append":
        self.emit(2, self.pick(["vals.append(m)", "vals.append(m * 2)"]))
    elif read == "store":
        self.emit(2, f"out[{i}] = m")
    elif read == "gap":
        self.emit(2, f"out[{i}] = m - {r}")
    self.emit_all(2, tail)
    self.emit(1, {"none": "return m", "append": self.pick(["return vals", "return vals, m"]),
                  "store": "return out, m", "gap": "return out"}[read])


def scan2_if_best(self):
    """`if x[i] > best: best = x[i]` then `gap[i] = best - x[i]` (a running max read in the loop)."""
    x = _s2_values(self)
    head, i, r, tail = _s2_loop(self, x)
    op = self.pick([">", ">=", "<", "<="])
    lt = op.startswith("<")
    inf = "inf" if lt else "-inf"
    init = self.pick([f"float('{inf}')", f"{x.name}[0]", "0", "10.0", f"torch.tensor(float('{inf}'))"])
    swapped = self.chance(0.3)
    cond = f"best {'>' if op[0] == '<' else '<'}{op[1:]} {r}" if swapped else f"{r} {op} best"
    self.emit(1, f"best = {init}")
    out = self.pick(["gap", "gap", "append", "none"])
    if out == "gap":
        self.emit(1, self.pick([f"gap = torch.zeros({x.name}.shape[0])", f"gap = torch.zeros_like({x.name})",
                                f"gap = torch.empty({x.name}.shape[0], dtype=torch.float64)"]
                               if "range(1" not in head[0] else [f"gap = torch.zeros({x.name}.shape[0])"]))
    elif out == "append":
        self.emit(1, "vals = []")
    self.emit_all(1, head)
    self.emit(2, f"if {cond}:")
    self.emit(3, f"best = {r}")
    if out == "gap":
        self.emit(2, f"gap[{i}] = " + self.pick([f"best - {r}", f"{r} - best"]))
    elif out == "append":
        self.emit(2, "vals.append(best)")
    self.emit_all(2, tail)
    self.emit(1, {"gap": self.pick(["return gap", "return gap, best"]), "append": "return vals, best",
                  "none": "return best"}[out])


def scan2_argbest(self):
    """`if v > best: best, idx = v, i` (>=, <, <=, `if best < v`) with the payload appended or stored."""
    x = _s2_values(self)
    head, i, r, tail = _s2_loop(self, x)
    op = self.pick([">", ">=", "<", "<="])
    lt = op.startswith("<")
    inf = "inf" if lt else "-inf"
    item = self.chance(0.25)
    vexpr = f"{r}.item()" if item else r
    init = self.pick([f"float('{inf}')", f"float('{inf}')", f"{x.name}[0]" + (".item()" if item else ""), "0", "10.0"])
    pinit = self.pick(["-1", "0", "None"])
    swapped = self.chance(0.3)
    flip = {">": "<", ">=": "<=", "<": ">", "<=": ">="}
    cond = f"best {flip[op]} v" if swapped else f"v {op} best"
    self.emit(1, f"best, idx = {init}, {pinit}" if self.chance(0.5) else f"best = {init}\n    idx = {pinit}")
    read = self.pick(["append", "append", "store", "none"])
    if read == "append":
        self.emit(1, "vals = []")
        self.emit(1, "where = []")
    elif read == "store":
        self.emit(1, self.pick([f"vals = torch.zeros({x.name}.shape[0], dtype=torch.float64)",
                                f"vals = torch.full(({x.name}.shape[0],), -5.0)"]))
        self.emit(1, self.pick([f"where = torch.full(({x.name}.shape[0],), -1, dtype=torch.long)",
                                f"where = torch.zeros({x.name}.shape[0], dtype=torch.long)"]))
        if pinit == "None":
            pinit = "-1"
            self.lines[-3] = self.lines[-3].replace("None", "-1")
    self.emit_all(1, head)
    self.emit(2, f"v = {vexpr}")
    body = self.pick(["tuple", "two"])
    self.emit(2, f"if {cond}:")
    if body == "tuple":
        self.emit(3, f"best, idx = v, {i}")
    else:
        self.emit(3, "best = v")
        self.emit(3, f"idx = {i}")
    if read == "append":
        self.emit(2, "vals.append(best)")
        self.emit(2, "where.append(idx)")
    elif read == "store":
        self.emit(2, f"vals[{i}] = best")
        self.emit(2, f"where[{i}] = idx")
    self.emit_all(2, tail)
    self.emit(1, {"append": self.pick(["return vals, where", "return vals, where, best, idx"]),
                  "store": self.pick(["return vals, where", "return vals, where, idx"]),
                  "none": "return best, idx"}[read])


def scan2_logaddexp(self):
    """`s = torch.logaddexp(s, x[t])`, read in the loop or only the final value."""
    rank = self.pick([1, 2, 2])
    dt = self.pick(FLOATS)
    shape = (self.n,) if rank == 1 else (self.n, self.d)
    expr = f"torch.randn({shape!r}, generator=g, dtype=torch.{dt}) * {self.pick([1, 3, 30])}"
    if self.n and self.chance(0.3):
        k = self.pick([0, self.n - 1, self.rng.randrange(self.n)])     # first or last steps: a -inf prefix
        ks = list(range(k + 1)) if k == 0 or self.chance(0.3) else [k]
        expr = f"({expr}).index_fill_(0, torch.tensor({ks}), float('{self.pick(['-inf', '-inf', 'inf', 'nan'])}'))"
    if self.chance(0.3):
        expr = f"({expr}).requires_grad_()"
    self.param("x", expr)
    cols = rank == 2 and self.chance(0.3)
    cnt = "x.shape[1]" if cols else self.pick(["x.shape[0]", "len(x)"])
    row = "x[:, t]" if cols else "x[t]"
    head = self.pick([f"for t in range({cnt}):", f"for t in range({cnt}):", f"for t in reversed(range({cnt})):",
                      f"for t in range({cnt} - 1, -1, -1):", f"for t in range(1, {cnt}):"])
    st = ("x.shape[0]",) if cols else (() if rank == 1 else ("x.shape[1]",))
    shp = f"({st[0]},)" if st else "()"
    inits = ["float('-inf')", f"torch.full({shp}, float('-inf'), dtype=x.dtype)", f"torch.zeros({shp}, dtype=x.dtype)",
             "x[:, 0]" if cols else "x[0]", f"torch.tensor(float('-inf'), dtype=x.dtype)"]
    init = self.pick(inits)
    if init == "float('-inf')":
        init = f"torch.tensor(float('-inf'), dtype=x.dtype)" if self.chance(0.5) else f"torch.full({shp}, -float('inf'), dtype=x.dtype)"
    if self.chance(0.15):
        self.param("s0", f"torch.randn({shp}, generator=g, dtype=torch.{dt})" + (".requires_grad_()" if self.chance(0.5) else ""))
        init = "s0"
    self.emit(1, f"s = {init}")
    read = self.pick(["none", "append", "append", "store", "minus"])
    if read in ("append", "minus"):
        self.emit(1, "outs = []")
    elif read == "store":
        self.emit(1, "out = torch.zeros_like(x)")
    self.emit(1, head)
    self.emit(2, "s = " + self.pick([f"torch.logaddexp(s, {row})", f"torch.logaddexp({row}, s)"]))
    if read == "append":
        self.emit(2, "outs.append(s)")
    elif read == "minus":
        self.emit(2, f"outs.append({row} - s)")
    elif read == "store":
        self.emit(2, (f"out[:, t] = s" if cols else "out[t] = s"))
    self.emit(1, {"none": "return s", "append": self.pick(["return outs", "return torch.stack(outs) if outs else s"]),
                  "minus": "return outs, s", "store": "return out, s"}[read])


def scan2_fission_inv(self):
    """A sequential RNN whose body also computes loop invariants (`Ut = U.t()`, `bias = b * 2.0`),
    uses them inside expressions, reads a name before assigning it, or assigns it twice."""
    dt = self.pick(FLOATS + ("float32",))
    T = self.pick([0, 1, 2, self.rng.randint(3, 12)])
    D, H = self.rng.randint(1, 4), self.rng.randint(1, 4)
    wg = lambda: ".requires_grad_()" if self.chance(0.3) else ""
    self.param("x", f"torch.randn(({T}, {D}), generator=g, dtype=torch.{dt})" + wg())
    self.param("W", f"(torch.randn(({D}, {H}), generator=g, dtype=torch.{dt}) * 0.5)" + wg())
    self.param("U", f"(torch.randn(({H}, {H}), generator=g, dtype=torch.{dt}) * 0.5)" + wg())
    self.param("b", f"torch.randn(({H},), generator=g, dtype=torch.{dt})" + wg())
    form = self.pick(["names", "inline", "read_before", "twice", "mixed"])
    self.emit(1, "h = torch.zeros(U.shape[0], dtype=U.dtype)" if self.chance(0.7) else "h = b * 0.0")
    if form == "read_before":
        self.emit(1, "Ut = U.t()")
    self.emit(1, "outs = []")
    self.emit(1, self.pick(["for t in range(x.shape[0]):", "for t in range(len(x)):", "for t in reversed(range(x.shape[0])):"]))
    bias = self.pick(["b * 2.0", "b + 1.0", "torch.sigmoid(b)", "b"])
    act = self.pick(["torch.tanh", "torch.relu", "torch.sigmoid"])
    if form == "names":
        body = ["Ut = U.t()", f"bias = {bias}", f"h = {act}(x[t] @ W + h @ Ut + bias)"]
        if self.chance(0.5):
            body = [body[1], body[0], body[2]]
    elif form == "inline":
        body = [f"h = {act}(x[t] @ W + h @ U.t() + {bias})"]
    elif form == "read_before":
        body = ["y = h @ Ut", "Ut = U.t()", f"h = {act}(x[t] @ W + y + {bias})"]
    elif form == "twice":
        body = ["Ut = U.t()", "Ut = Ut * 0.5", f"bias = {bias}", f"h = {act}(x[t] @ W + h @ Ut + bias)"]
        if self.chance(0.4):
            body = ["Ut = U.t()", f"h = {act}(x[t] @ W + h @ Ut + {bias})", "Ut = U * 2.0"]
    else:
        body = ["Wt = W.t().t()", "e = x[t] @ Wt", f"bias = {bias}", "Ut = U.t()", f"h = {act}(e + h @ Ut + bias)"]
    body.append(self.pick(["outs.append(h)", "outs.append(h)", "outs.append(h + bias)" if "bias =" in " ".join(body) else "outs.append(h * 2)"]))
    self.emit_all(2, body)
    self.emit(1, self.pick(["return torch.stack(outs) if outs else h", "return outs, h", "return h"]))


def scan2_counter(self):
    """A count under a condition read in the loop (`if x[i] > t: k += 1` then `ids[i] = k`):
    int or float starts, steps of any int, `-=`, truthiness of the row itself, rows of several
    elements (the loop raises), the count appended, stored or returned."""
    x = self.main(dtypes=("float32", "float64", "int64", "bool"), rank=self.pick([1, 1, 1, 2]))
    loop = self.indexed_loop(x, allow_while=self.chance(0.3))
    i, row = loop.index, loop.row.expr
    self.emit(1, f"cnt = {self.pick(['0', '0', '3', '-1', '0.0'])}")
    self.emit(1, "out = []")
    self.emit_all(1, loop.head)
    cond = self.pick([f"{row} > 0", f"{row}", f"({row} * 2).sum() < 1", f"{row} == {row}"])
    self.emit(2, f"if {cond}:")
    self.emit(3, f"cnt {self.pick(['+=', '+=', '-='])} {self.pick(['1', '1', '2', '7'])}")
    if self.chance(0.2):
        self.emit(2, "k2 = cnt * 2")
        self.emit(2, "out.append(k2)")
    else:
        self.emit(2, f"out.append({self.pick(['cnt', 'cnt', f'cnt + {i}'])})")
    self.emit_all(2, loop.tail)
    self.emit(1, self.pick(["return out, cnt", "return torch.tensor(out) if out else None"]))


SCAN2_FORMS = {
    "item_extreme": scan2_item_extreme, "if_best": scan2_if_best, "argbest": scan2_argbest,
    "logaddexp": scan2_logaddexp, "fission_inv": scan2_fission_inv, "counter": scan2_counter,
}
SCAN2_KINDS = [f"scan2/{k}" for k in SCAN2_FORMS]


FORM_WEIGHTS = {"compile/rnn": 3, "compile/multi": 3, "scan2/argbest": 2, "scan2/item_extreme": 2, "win/nest": 3,
                "store2/triangle": 3, "store2/forward": 4, "lost/stored_rec": 3}   # the forms the fallback takes, drawn more often
def store2_rows(self):
    """Several stores into one output per iteration: whole rows and single columns, in any
    order, sometimes an update (`+=`), a store under a condition, or a read of the output
    between stores (those keep the loop)."""
    x = self.main(rank=2, dtypes=("float32", "float64", "int64"))
    loop = self.indexed_loop(x, allow_while=False)
    i = loop.index
    dtype = self.pick(["float32", "float64", x.dtype])
    ctor = self.pick(["zeros", "ones", "zeros"])
    self.emit(1, f"out = torch.{ctor}({self.count(x)}, x.shape[1], dtype=torch.{dtype})")
    self.emit_all(1, loop.head)
    for k in range(self.pick([2, 2, 3, 4])):
        col = self.rng.randrange(self.d)
        if self.chance(0.35):
            target = f"out[{i}]"
            v = self.value(loop.row, i, want="same")
        else:
            target = f"out[{i}, {col}]"
            v = self.value(loop.row, i, want="scalar")
        expr = v.expr
        if k and self.chance(0.1):
            expr = f"({expr}) + out[{i}, {self.rng.randrange(self.d)}]"     # a read between stores
        op = "+=" if k and self.chance(0.1) else "="
        if k and self.chance(0.15):
            self.emit(2, f"if {self.cond(loop.row, i)}:")
            self.emit(3, f"{target} {op} {expr}")
        else:
            self.emit(2, f"{target} {op} {expr}")
    self.emit_all(2, loop.tail)
    self.emit(1, self.pick(["return out", "return out.sum(0)"]))


def store2_forward(self):
    """A row stored, then read back or updated in the same iteration (`out[i] = v`, then
    `out[i] += w`, `out[i] = f(out[i])`, `y[i] = out[i] + 1`; analysis._forwarded): outputs
    of several dtypes, values of another dtype or shape than the row's (the store converts them:
    the loop decides), a row bound to a name (the loop), an update under a condition."""
    x = self.main(rank=2, dtypes=("float32", "float64", "int64"))
    loop = self.indexed_loop(x, allow_while=False)
    i = loop.index
    dtype = self.pick(["float32", "float64", "int64", "float16", x.dtype, x.dtype])
    self.emit(1, f"out = torch.zeros({self.count(x)}, x.shape[1], dtype=torch.{dtype})")
    has_y = self.chance(0.5)
    if has_y:
        self.emit(1, f"y = torch.zeros({self.count(x)}, x.shape[1])")
    self.emit_all(1, loop.head)
    row = f"out[{i}]"
    self.emit(2, f"{row} = {self.value(loop.row, i, want='same').expr}")
    for _ in range(self.pick([1, 2, 3])):
        form = self.pick(["aug", "aug", "fn", "bin", "y", "y", "name", "cond", "scalar"])
        if form == "aug":
            v = self.pick([self.value(loop.row, i, want="same").expr, "2", "0.5", row, "x[0]"])
            self.emit(2, f"{row} {self.pick(['+=', '-=', '*=', '/='])} {v}")
        elif form == "fn":
            self.emit(2, f"{row} = " + self.pick([f"torch.relu({row})", f"{row} / ({row}.abs().sum() + 1)",
                                                 f"torch.tanh({row}.float())", f"{row}.clamp(-1, 1)", f"-{row}",
                                                 f"{row} * ({row} > 0)"]))
        elif form == "bin":
            self.emit(2, f"{row} = {row} * 2 + {self.value(loop.row, i, want='same').expr}")
        elif form == "y" and has_y:
            self.emit(2, f"y[{i}] = {self.pick([f'{row} + 1', row, f'{row}.sum() * x[{i}]'])}")
        elif form == "name":
            self.emit(2, f"r = {row}")
            self.emit(2, f"{row} = r * 3")
        elif form == "cond":
            self.emit(2, f"if {self.cond(loop.row, i)}:")
            self.emit(3, f"{row} = {row} + 1")
        elif form == "scalar":
            self.emit(2, f"{row} = " + self.pick(["1.5", "0", f"x[{i}].sum()", f"x[{i}, :1]"]))
    self.emit_all(2, loop.tail)
    self.emit(1, "return out, y" if has_y else "return out")


def store2_appends(self):
    """Two or three appends into one list per iteration (interleaved in the list's order): rows,
    reductions, `.item()` numbers, values of several dtypes or shapes (the loop decides), one
    under a condition (the loop), gradients on some; the list stacked, concatenated, summed,
    returned, or a caller's list."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64"), rank=self.pick([1, 2, 2]))
    loop = self.indexed_loop(x)
    i, row = loop.index, loop.row.expr
    fl = x.dtype in FLOATS
    pool = [row, f"{row} * 2", f"-{row}", f"({row} + 1)"]
    if len(x.shape) == 2:
        pool += [f"{row}.sum()", f"{row}.max()", f"{row}.abs().sum()", f"{row}[:1]"]
    if fl:
        pool += [f"{row}.sum().item()", f"{row}.float().mean()", f"{row}.exp()"]
    k = self.pick([2, 2, 3])
    vals = [self.pick(pool) for _ in range(k)]
    if self.chance(0.5):
        vals = [vals[0]] * k if self.chance(0.3) else [vals[0], vals[0].replace(row, f"({row} * 3)")] + vals[2:]
    consumer = self.pick(["stack", "stack", "list", "sum", "cat", "caller"])
    if consumer == "caller":
        self.param("log", "[]")
    else:
        self.emit(1, "log = []")
    self.emit_all(1, loop.head)
    for j, v in enumerate(vals):
        if j == k - 1 and self.chance(0.1):
            self.emit(2, f"if ({row}).sum() > 0:")
            self.emit(3, f"log.append({v})")
        else:
            self.emit(2, f"log.append({v})")
    self.emit_all(2, loop.tail)
    self.emit(1, {"stack": "return torch.stack(log) if log else None", "list": "return log",
                  "sum": "return sum(log)", "cat": "return torch.cat(log) if log else None",
                  "caller": "return len(log)"}[consumer])


def store2_records(self):
    """An appended literal per iteration (`log.append((i, v.item()))`, dicts, lists, nested):
    index, `.item()` numbers, Python bools, tensors, constants and a loop-invariant name as
    parts, sometimes under a condition; the list returned, a caller's list, a comprehension,
    made a tensor afterwards, or read in the loop / appended twice (both keep the loop)."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64", "float16"), rank=self.pick([1, 2, 2]))
    self.param("tag", self.pick(["'run'", "3", "None", "[1, 2]"]))
    fl = x.dtype in FLOATS
    comp = self.chance(0.25)
    if comp:
        i, row = "i", x.row("r").expr
        head = [f"for i, r in enumerate({x.name})"]
    else:
        loop = self.indexed_loop(x)
        i, row = loop.index, loop.row.expr
    one = f"{row}.sum()" if len(x.shape) == 2 else row
    pool = [i, f"{one}.item()", f"{one}.item()", f"{one} > 0", f"bool({one} > 0)", "tag", "'a'", "1.5"]
    pool += [row, f"{one} * 2"] if self.chance(0.4) else [f"{i} * 2"]
    if fl:
        pool += [f"{one}.abs().item()", f"float({one})", f"({one} * 0.5).item()"]
    else:
        pool += [f"int({one})", f"{one}.item() + 1"]
    k = self.pick([1, 2, 2, 3, 4])
    parts = [self.pick(pool) for _ in range(k)]
    kind = self.pick(["tuple", "tuple", "dict", "list", "nested"])
    if kind == "tuple":
        lit = "(" + ", ".join(parts) + ("," if k == 1 else "") + ")"
    elif kind == "list":
        lit = "[" + ", ".join(parts) + "]"
    elif kind == "dict":
        keys = [self.pick(["'idx'", "'loss'", "'ok'", "'v'", "0", "'idx'"]) for _ in parts]   # duplicate keys too
        lit = "{" + ", ".join(f"{a}: {b}" for a, b in zip(keys, parts)) + "}"
    else:
        lit = "{'p': (" + ", ".join(parts) + ",), 'q': [" + parts[0] + "]}"
    cond = f"{one} > 0" if self.chance(0.25) else None
    if comp:
        tail = f" if {cond}" if cond else ""
        out = f"[{lit} {head[0]}{tail}]"
        self.emit(1, f"return {out}" if self.chance(0.7) else f"log = {out}\n    return len(log), log")
        return
    consumer = self.pick(["list", "list", "caller", "tensor", "read", "twice"])
    if consumer == "caller":
        self.param("log", "[(0,)]")
    else:
        self.emit(1, "log = []")
    self.emit_all(1, loop.head)
    at = 2
    if cond:
        self.emit(2, f"if {cond}:")
        at = 3
    self.emit(at, f"log.append({lit})")
    if consumer == "twice":
        self.emit(at, f"log.append(({i},))")
    if consumer == "read":
        self.emit(at, "n_seen = len(log)")
    self.emit_all(2, loop.tail)
    self.emit(1, {"list": "return log", "caller": "return len(log)", "read": "return log",
                  "twice": "return log", "tensor": "return torch.tensor(log) if log else None"}[consumer])


def store2_nest(self):
    """A loop nest whose store leaves out some of its indices: `out[i] += A[i, j] * x[j]`
    (matvec), `C[i, j] += A[i, k] * B[k, j]`, `out[j] -= ..`, `out[j, i] = ..` (transposed),
    `out[i] = ..` (the last inner write wins); `*=`, a read of the output, or an index of
    another tensor keep the loop."""
    dt = self.pick(["float32", "float32", "float64", "int64"])
    a = self.tensor("A", (self.n, self.d), dt)
    self.tensor("v", (self.d,), dt)
    three = self.chance(0.25)
    if three:
        self.tensor("B", (self.d, self.rng.randint(1, 4)), dt)
        self.emit(1, f"out = torch.{self.pick(['zeros', 'ones'])}(A.shape[0], B.shape[1], dtype=torch.{dt})")
        self.emit(1, "for i in range(A.shape[0]):")
        self.emit(2, "for j in range(B.shape[1]):")
        self.emit(3, "for k in range(A.shape[1]):")
        op = self.pick(["+=", "+=", "-=", "="])
        self.emit(4, f"out[i, j] {op} A[i, k] * B[k, j]")
        self.emit(1, "return out")
        return
    target, size = self.pick([("out[i]", "A.shape[0]"), ("out[i]", "A.shape[0]"), ("out[j]", "A.shape[1]"),
                              ("out[j, i]", "A.shape[1], A.shape[0]"), ("out[i, 0]", "A.shape[0], 2")])
    op = self.pick(["+=", "+=", "-=", "=", "*="])
    val = self.pick(["A[i, j] * v[j]", "A[i, j]", "(A[i, j] - v[j]).abs()", "A[i, j] * 2 + out[i]" if target == "out[i]"
                     else "A[i, j] + 1", "v[j] * i"])
    self.emit(1, f"out = torch.zeros({size}, dtype=torch.{dt})")
    self.emit(1, "for i in range(A.shape[0]):")
    self.emit(2, "for j in range(A.shape[1]):")
    self.emit(3, f"{target} {op} {val}")
    self.emit(1, self.pick(["return out", "return out.sum()"]))


def store2_views(self):
    """Rows appended as they are (`rows.append(x[i])`, `r`, `x[i].view(-1)`, a name bound to one,
    in a tuple), forward, reversed, gathered or under a condition, then a write into the input
    before the list is returned or stacked: the loop's list holds views that see the write."""
    x = self.main(dtypes=("float32", "float64", "int64"), rank=2, readonly=False)
    self.no_grad = True
    order = self.pick(["forward", "reversed", "gather", "elements", "step"])
    if order == "gather":
        self.param("perm", f"torch.randperm({self.n})")
        head, row = f"for i in range({x.name}.shape[0]):", f"{x.name}[perm[i]]"
    elif order == "reversed":
        head, row = f"for i in reversed(range({x.name}.shape[0])):", f"{x.name}[i]"
    elif order == "elements":
        head, row = f"for r in {x.name}:", "r"
    elif order == "step":
        head, row = f"for i in range(0, {x.name}.shape[0], 2):", f"{x.name}[i]"
    else:
        head, row = f"for i in range({x.name}.shape[0]):", f"{x.name}[i]"
    val = self.pick([row, row, f"{row}.view(-1)", f"{row}.detach()", f"{row} * 1", f"({row},)"])
    self.emit(1, "rows = []")
    self.emit(1, head)
    at = 2
    if self.chance(0.25):
        self.emit(2, f"if {row}[0] > 0:")
        at = 3
    if self.chance(0.3):
        self.emit(at, f"v = {val}")
        val = "v"
    self.emit(at, f"rows.append({val})")
    self.emit(1, self.pick([f"{x.name}.mul_(2)", f"{x.name}[0] += 1", f"{x.name}.zero_()", "pass"]))
    self.emit(1, self.pick(["return rows", "return rows", "return torch.stack(rows) if rows and not "
                            "isinstance(rows[0], tuple) else rows"]))


def store2_einsum(self):
    """Sums of products over a loop nest (`C[i, j] += A[i, k] * B[k, j]` and its relatives):
    two or three levels in any order, one to three factors with their indices in any order,
    the store at any permutation of the kept levels, ranges that start past 0 or step by 2,
    targets made by zeros / given by the caller / holding -0.0, mixed dtypes, `+=` / `-=`."""
    levels = ["i", "j", "k"][: self.pick([2, 3, 3])]
    sizes = {lv: self.rng.randint(1, 5) for lv in levels}
    kept = self.rng.sample(levels, self.rng.randint(1, len(levels) - 1))
    dt = self.pick(["float32", "float32", "float64"])
    factors = []
    for f in range(self.pick([1, 2, 2, 3])):
        own = self.rng.sample(levels, self.rng.randint(1, len(levels)))
        fdt = dt if self.chance(0.85) else self.pick(["float32", "float64"])
        name = "ABC"[f]
        self.tensor(name, tuple(sizes[lv] + 1 for lv in own), fdt, special_p=0.05)
        factors.append(f"{name}[{', '.join(own)}]")
    shape = ", ".join(str(sizes[lv] + 1) for lv in kept)
    start = self.pick(["zeros", "zeros", "given", "minus_zero", "written"])
    if start == "given":
        self.tensor("out", tuple(sizes[lv] + 1 for lv in kept), dt, readonly=False, grad_ok=False)
    else:
        self.emit(1, f"out = torch.zeros({shape}, dtype=torch.{dt})")
        if start == "minus_zero":
            self.emit(1, "out.neg_()")
        elif start == "written":
            self.emit(1, f"out[{', '.join('0' for _ in kept)}] = -0.0")
    order = self.rng.sample(levels, len(levels))
    for depth, lv in enumerate(order):
        head = self.pick([f"range({sizes[lv]})", f"range({sizes[lv]})", f"range(1, {sizes[lv] + 1})",
                          f"range(0, {sizes[lv] + 1}, 2)"])
        self.emit(1 + depth, f"for {lv} in {head}:")
    op = self.pick(["+=", "+=", "-="])
    self.emit(1 + len(levels), f"out[{', '.join(kept)}] {op} {' * '.join(factors)}")
    self.emit(1, "return out")


def store2_triangle(self):
    """Triangular nests: an inner range starting or ending at the outer index plus a constant
    (`range(i + c, n)`, `range(i)`, `range(a, i + c)`), outer ranges with a start, constants
    that empty some rows; stores into a new tensor or an argument, sums, appends; sometimes the
    inner index read after the nest, a step, or a bound the body changes (those keep the loops)."""
    dt = self.pick(["float32", "float32", "float64", "int64"])
    x = self.tensor("A", (self.n, self.n + self.rng.randint(0, 2)), dt)
    c = self.pick([0, 1, 1, 2, -1])
    off = "" if c == 0 else (f" + {c}" if c > 0 else f" - {-c}")
    outer = self.pick(["range(A.shape[0])", "range(A.shape[0])", "range(1, A.shape[0])", "range(0, A.shape[0], 2)"])
    inner = self.pick([f"range(i{off}, A.shape[1])", f"range(i{off})", f"range(0, i{off})",
                       f"range(max(0, 1), i{off})", f"range(i{off}, A.shape[1], 2)"])
    val = self.pick(["A[i, j]", "A[i, j] * 2 + 1", "(A[i, j] - A[j % A.shape[0], i % A.shape[1]]).abs()",
                     "A[i, j] * j"])
    out = self.pick(["store", "store", "sum", "append", "arg"])
    if out == "store":
        self.emit(1, f"out = torch.zeros(A.shape[0], A.shape[1], dtype=torch.{dt})")
    elif out == "arg":
        self.tensor("out", (self.n, self.n + 2), dt, readonly=False)
    elif out == "sum":
        self.emit(1, self.pick(["s = 0.0", "s = 0", "s = torch.zeros(())"]))
    else:
        self.emit(1, "outs = []")
    self.emit(1, f"for i in {outer}:")
    self.emit(2, f"for j in {inner}:")
    if out in ("store", "arg"):
        self.emit(3, f"out[i, j] = {val}")
    elif out == "sum":
        self.emit(3, f"s = s + {val}")
    else:
        self.emit(3, f"outs.append({val})")
    ret = {"store": "out", "arg": "out", "sum": "s", "append": "outs"}[out]
    if self.chance(0.15):
        ret += ", j"      # (unbound, NameError, where no inner iteration runs)
    self.emit(1, f"return {ret}")


STORE2_FORMS = {"rows": store2_rows, "appends": store2_appends, "records": store2_records, "nest": store2_nest,
                "views": store2_views, "einsum": store2_einsum, "triangle": store2_triangle,
                "forward": store2_forward}


def _number_list(self, n: int, kind: str) -> str:
    """The source of a list (or tuple) of `n` Python numbers of `kind`, sometimes of other kinds."""
    if kind == "float":
        vals = [self.pick(["0.5", "1.25", "-0.75", "2.0", "0.1", "3.0", "1e-3"]) for _ in range(n)]
    elif kind == "int":
        vals = [str(self.rng.randint(-3, 5)) for _ in range(n)]
    else:
        vals = [self.pick(["True", "False"]) for _ in range(n)]
    if n and self.chance(0.12):     # an element of another kind: the loop
        vals[self.rng.randrange(n)] = self.pick(["2", "0.5", "True", "__import__('numpy').float64(1.5)", "2 ** 70", "None"])
    text = ", ".join(vals)
    return f"({text},)" if text and self.chance(0.2) else f"[{text}]"


def nums_indexed(self):
    """A list of Python numbers indexed by the loop (`temps[i]`), in arithmetic with the row,
    in Python arithmetic first, or as a condition; the list is sometimes shorter, of mixed
    kinds, a tuple, or read at `i - 1` (Python wraps around)."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64", "float16"))
    loop = self.indexed_loop(x, allow_while=self.chance(0.3))
    i = loop.index
    kind = self.pick(["float", "float", "int", "bool"])
    self.param("w", _number_list(self, max(self.n + self.pick([0, 0, 0, 0, -1, 1]), 0), kind))
    at = self.pick([i, i, i, f"{i} - 1"])
    v = self.value(loop.row, i, want=self.pick(["any", "same"]))
    if kind == "bool":
        use = self.pick(["cond", "cond", "arith"])
    else:
        use = self.pick(["arith", "arith", "py", "cond"])
    num = f"w[{at}]"
    if use == "py":
        num = self.pick([f"(w[{at}] * 2 + 1)", f"(w[{at}] - 0.5)", f"abs(w[{at}])", f"(w[{at}] ** 2)"])
    out = self.pick(["store", "append", "accum"])
    if out == "store":
        self.emit(1, f"out = {self.alloc(self.count(x), v, full=False)}")
    elif out == "append":
        self.emit(1, "outs = []")
    else:
        self.emit(1, f"total = {self.pick(['0.0', '0'])}")
    self.emit_all(1, loop.head)
    if use == "cond":
        value = v.expr
        self.emit(2, f"if {num}{self.pick(['', ' > 0', ' == 1'] if kind != 'bool' else [''])}:")
        depth = 3
    else:
        value = self.pick([f"({v.expr}) * {num}", f"{num} * ({v.expr})", f"({v.expr}) + {num}",
                           f"({v.expr}) / ({num} + 10)"])
        depth = 2
    self.emit(depth, {"store": f"out[{i}] = {value}", "append": f"outs.append({value})",
                      "accum": f"total = total + {value}"}[out])
    self.emit_all(2, loop.tail)
    self.emit(1, {"store": "return out", "append": self.pick(["return outs", "return torch.stack(outs) if outs else None"]),
                  "accum": "return total"}[out])


def nums_gather(self):
    """A loop-invariant list of numbers indexed by a per-iteration integer: `w =
    weights[int(y[i])]` (labels as integers, floats rounded toward zero by int(), negative,
    out of range or NaN), accumulated, stored or appended."""
    loss = self.main("loss", dtypes=("float32", "float64"), rank=self.pick([1, 1, 2]))
    c = self.rng.randint(1, 5)
    ydt = self.pick(["int64", "int64", "int32", "float32"])
    lo = self.pick([0, 0, -c])
    hi = c + (1 if self.chance(0.1) else 0)
    if ydt == "float32":
        self.param("y", f"(torch.rand(({self.n},), generator=g) * {hi - lo} + {lo})"
                   + (".index_fill_(0, torch.tensor([0]), float('nan'))" if self.n and self.chance(0.1) else ""))
    else:
        self.tensor("y", (self.n,), f"torch.{ydt}".split(".")[1], low=lo, high=hi)
    self.param("weights", _number_list(self, c, self.pick(["float", "float", "int"])))
    loop = self.indexed_loop(loss, allow_while=False)
    i = loop.index
    lab = self.pick([f"int(y[{i}])", f"int(y[{i}])", f"y[{i}]" if ydt != "float32" else f"int(y[{i}])",
                     f"int(y[{i}].item())"])
    form = self.pick(["ratio", "store", "append"])
    row = loop.row.expr
    if form == "ratio":
        self.emit(1, f"num = {self.pick(['0.0', '0'])}")
        self.emit(1, "den = 0.0")
    elif form == "store":
        self.emit(1, "out = torch.zeros_like(loss)")
    else:
        self.emit(1, "outs = []")
    self.emit_all(1, loop.head)
    self.emit(2, f"w = weights[{lab}]")
    if form == "ratio":
        self.emit(2, f"num = num + w * {row}")
        self.emit(2, "den = den + w")
    elif form == "store":
        self.emit(2, f"out[{i}] = {row} * w")
    else:
        self.emit(2, self.pick([f"outs.append({row} * w)", "outs.append(w)", f"outs.append(w + {row}.sum())"]))
    self.emit_all(2, loop.tail)
    self.emit(1, {"ratio": self.pick(["return num / den if den else num", "return num, den"]),
                  "store": "return out", "append": self.pick(["return outs", "return torch.stack(outs) if outs else None"])}[form])


def nums_zip(self):
    """A list of Python numbers walked beside a tensor: `zip(w, x)`, `zip(x, w)` or
    `enumerate(w)` with `x[i]`; sometimes of another length, of mixed kinds, or with a `break`;
    the loop variables are read after the loop."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64"))
    kind = self.pick(["float", "float", "int", "bool"])
    self.param("w", _number_list(self, max(self.n + self.pick([0, 0, 0, -1, 1, 3]), 0), kind))
    form = self.pick(["zip", "zip_rev", "enumerate"])
    head = {"zip": "for t, row in zip(w, x):", "zip_rev": "for row, t in zip(x, w):",
            "enumerate": "for i, t in enumerate(w):"}[form]
    row = x.row("row" if form != "enumerate" else "x[i]")
    v = self.value(row, want=self.pick(["any", "same"]))
    out = self.pick(["append", "accum"])
    self.emit(1, "outs = []" if out == "append" else f"total = {self.pick(['0.0', '0'])}")
    if form == "enumerate":
        self.emit(1, "i = -1")
    self.emit(1, "t = None")
    self.emit(1, head)
    if self.chance(0.15):
        self.emit(2, f"if {self.cond(row)}:")
        self.emit(3, "break")
    if kind == "bool" and self.chance(0.6):
        self.emit(2, "if t:")
        depth = 3
    else:
        depth = 2
    value = self.pick([f"({v.expr}) * t", f"t * ({v.expr})", f"({v.expr}) + t * 2", f"({v.expr}) - t"])
    self.emit(depth, f"outs.append({value})" if out == "append" else f"total = total + {value}")
    self.emit(1, (self.pick(["return outs, t", "return (torch.stack(outs) if outs else None), t"]) if out == "append"
                  else "return total, t") + (", i" if form == "enumerate" else ""))


def nums_math(self):
    """math functions and round() of per-iteration Python numbers (`.item()` values of a row,
    or elements of a list), where the values may be out of the function's domain or range
    (math.log of 0 or a negative, math.exp of a large value, math.floor of NaN or inf): the
    loop raises there, and so must autovec; stored, appended, summed or multiplied with the row."""
    self.helpers["math"] = "import math\n"
    x = self.main(dtypes=("float32", "float64", "float64", "int64"), rank=1)
    loop = self.indexed_loop(x, allow_while=False)
    i = loop.index
    if self.chance(0.3):
        self.param("w", _number_list(self, max(self.n + self.pick([0, 0, 0, 1]), 0), self.pick(["float", "int"])))
        num = f"w[{i}]"
    else:
        num = f"{loop.row.expr}.item()"
    fn = self.pick(["math.exp", "math.log", "math.sqrt", "math.floor", "math.ceil", "math.trunc", "round",
                    "math.tanh", "math.sin", "math.log1p", "math.expm1", "math.fabs", "math.isnan", "math.cosh",
                    "math.atan", "math.asin", "math.log10", "math.erf", "math.isfinite"])
    arg = self.pick([num, num, f"-{num}", f"{num} * 300", f"{num} + 1", f"abs({num})"])
    value = f"{fn}({arg})"
    if self.chance(0.3) and fn not in ("math.isnan", "math.isfinite"):
        value = self.pick([f"{value} * {loop.row.expr}", f"{value} + 0.5", f"{value} * 2"])
    out = self.pick(["append", "accum", "store"])
    if out == "store":
        self.emit(1, f"out = torch.zeros({self.count(x)}, dtype=torch.float64)")
    elif out == "append":
        self.emit(1, "outs = []")
    else:
        self.emit(1, f"total = {self.pick(['0.0', '0'])}")
    self.emit_all(1, loop.head)
    self.emit(2, {"store": f"out[{i}] = {value}", "append": f"outs.append({value})",
                  "accum": f"total = total + {value}"}[out])
    self.emit_all(2, loop.tail)
    self.emit(1, {"store": "return out", "append": "return outs", "accum": "return total"}[out])


NUMS_FORMS = {"indexed": nums_indexed, "gather": nums_gather, "zip": nums_zip, "math": nums_math}


# ============================================================== family "rows": rows unpacked,
# `.item()` numbers with min()/max(), constants stored into rows under branches

def rows_unpack(self):
    """`for a, b in p` (p: (n, k) integers, k sometimes not the names' count), `in p.tolist()`,
    `enumerate(p)` with `(a, b)`, or a comprehension / generator over them; the names index a
    table or enter arithmetic, and are sometimes read after the loop."""
    k = self.pick([2, 2, 2, 3, 1])
    names = self.pick([["a", "b"], ["a", "b"], ["a", "b", "c"]])
    c = self.rng.randint(2, 6)
    src = self.pick(["p", "p", "p.tolist()", "list"])
    if src == "list":     # a list of row tensors (and, for .tolist(), the loop's AttributeError)
        src = self.pick(["p", "p.tolist()"])
        self.param("p", f"list(_tensor(g, {(self.n, k)!r}, torch.int64, low={-c}, high={c}))")
    else:
        self.tensor("p", (self.n, k), self.pick(["int64", "int64", "int32"]), low=-c, high=c)
    self.tensor("emb", (c, self.d), self.pick(FLOATS))
    target = ", ".join(names)
    a, b = names[0], names[1]
    val = self.pick([f"(emb[{a}] * emb[{b}]).sum()", f"(emb[{a}] - emb[{b}]).norm()", f"emb[{a}] + emb[{b}]",
                     f"emb[{a}] * {b}", f"{a} * 2 + {b}"])
    form = self.pick(["for", "for", "enumerate", "comp", "gen"])
    if form == "comp":
        self.emit(1, f"outs = [{val} for {target} in {src}]")
        self.emit(1, self.pick(["return outs", "return torch.stack(outs) if outs else None"]))
        return
    if form == "gen":
        self.emit(1, f"return sum({val} for {target} in {src})")
        return
    head = f"for {target} in {src}:" if form == "for" else f"for j, ({target}) in enumerate({src}):"
    out = self.pick(["append", "accum"])
    self.emit(1, "outs = []" if out == "append" else f"total = {self.pick(['0.0', '0'])}")
    self.emit(1, head)
    if form == "enumerate" and self.chance(0.5):
        val = f"({val}) * j"
    self.emit(2, f"outs.append({val})" if out == "append" else f"total = total + {val}")
    ret = "outs" if out == "append" else "total"
    if self.chance(0.4):
        ret += f", {a}, {b}"     # (unbound, NameError, when the loop does not run)
    self.emit(1, f"return {ret}")


def rows_tolist(self):
    """`for v in w.tolist()` / `enumerate(w.tolist())` with one name: Python numbers (ints, floats,
    bools; sometimes a matrix, a 0-d tensor or a list, which keep the loop and its error) that
    index a table, scale rows or enter arithmetic; the name sometimes read after the loop."""
    kind = self.pick(["int64", "int64", "float32", "float64", "bool"])
    c = self.rng.randint(2, 6)
    shape = self.pick([(self.n,), (self.n,), (self.n,), (self.n, 2), ()])
    if self.chance(0.1):
        self.param("w", f"list(_tensor(g, {(self.n,)!r}, torch.int64, low=0, high={c}))")
    elif shape == ():
        self.param("w", f"torch.tensor({c - 1}, dtype=torch.{kind})")
    else:
        self.tensor("w", shape, kind, low=0 if kind == "int64" else -3, high=c)
    x = self.tensor("x", (self.n, self.d), self.pick(FLOATS))
    self.tensor("emb", (c, self.d), self.pick(FLOATS))
    form = self.pick(["for", "enumerate", "enumerate"])
    head = "for v in w.tolist():" if form == "for" else "for i, v in enumerate(w.tolist()):"
    pool = ["v * 2 + 1", "emb[v % 2]" if kind == "int64" else "v * 0.5"]
    if form == "enumerate":
        pool += ["x[i] * v", "x[i].sum() + v", "x[i, :v].sum()" if kind == "int64" else "x[i] - v"]
    val = self.pick(pool)
    out = self.pick(["append", "append", "accum"])
    self.emit(1, "outs = []" if out == "append" else f"total = {self.pick(['0.0', '0'])}")
    self.emit(1, head)
    self.emit(2, f"outs.append({val})" if out == "append" else f"total = total + {val}")
    ret = "outs" if out == "append" else "total"
    if out == "append" and "x[" in val and self.chance(0.5):
        ret = "torch.stack(outs) if outs else None"
    if self.chance(0.4):
        ret += ", v"      # (unbound, NameError, when the loop does not run)
    self.emit(1, f"return {ret}")


def rows_items(self):
    """`.item()` numbers in the batch: min()/max() of Python numbers (some of another kind,
    NaN among them), and arithmetic with rows (a float32 row times a Python float)."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64", "float16"), rank=self.pick([1, 2, 2]))
    loop = self.indexed_loop(x, allow_while=False)
    i, row = loop.index, loop.row.expr
    red = self.pick([f"{row}.sum()", f"{row}.max()", f"{row}.abs().sum()", f"{row}.float().norm()"])
    v = f"{red}.item()"
    lit = self.pick(["1.0", "0.5", "0", "2", "float('nan')", "-1.5"])
    f = self.pick([f"min({lit}, {v})", f"max({lit}, {v})", f"min({v}, {lit})", f"max(0.0, {v} - 1.0)",
                   f"min({v}, {lit}, 2.0 * {v})", f"abs({v}) + 1"])
    out = self.pick(["store", "accum", "append"])
    if out == "store":
        self.emit(1, f"out = torch.zeros_like({x.name}, dtype=torch.{self.pick(['float32', 'float64', x.dtype])})")
    elif out == "accum":
        self.emit(1, f"total = {self.pick(['0.0', '0', 'torch.zeros(())'])}")
    else:
        self.emit(1, "outs = []")
    self.emit_all(1, loop.head)
    self.emit(2, f"fac = {f}")
    value = self.pick([f"{row} * fac", "fac", f"fac * {row}.sum()", f"({row} + fac) / 2"])
    self.emit(2, {"store": f"out[{i}] = {value}", "accum": f"total = total + {value}",
                  "append": f"outs.append({value})"}[out])
    self.emit_all(2, loop.tail)
    self.emit(1, {"store": "return out", "accum": "return total", "append": "return outs"}[out])


def rows_branch(self):
    """A stored row under a data-dependent branch: a Python constant in one branch, a row in
    the other (`if not keep[i]: out[i] = 0 else: out[i] = x[i] / 0.9`), the condition through
    `not` sometimes; outputs of several dtypes."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64"), rank=self.pick([1, 2, 2, 2]))
    self.tensor("keep", (self.n,), self.pick(["bool", "bool", "float32", "int64"]))
    loop = self.indexed_loop(x, allow_while=False)
    i, row = loop.index, loop.row.expr
    cond = self.pick([f"keep[{i}]", f"not keep[{i}]", f"keep[{i}] > 0", f"not ({row}.sum() > 0)",
                      f"0 < {row}.sum() <= 2", f"-1 <= {row}.sum().item() < 1", f"keep[{i}] == 0 < {row}.max()"])
    const = self.pick(["0", "0.0", "-1", "1.5", "True", "1e30"])
    value = self.pick([f"{row} / 0.9", f"{row} * 2", row, f"{row}.abs()"])
    dtype = self.pick(["float32", "float64", "int64", x.dtype])
    ctor = "zeros_like" if self.n_delta else self.pick(["empty_like", "zeros_like"])   # (`range(n)` may miss rows)
    self.emit(1, self.pick([f"out = {x.name}.clone()", f"out = torch.{ctor}({x.name}, dtype=torch.{dtype})"]))
    self.emit_all(1, loop.head)
    first, second = (const, value) if self.chance(0.5) else (value, const)
    self.emit(2, f"if {cond}:")
    self.emit(3, f"out[{i}] = {first}")
    self.emit(2, "else:")
    self.emit(3, f"out[{i}] = {second}")
    self.emit_all(2, loop.tail)
    self.emit(1, "return out")


def rows_mixed(self):
    """Python's max / min of a constant and a 0-d tensor (`max(0, x2 - x1)`: the int in some
    iterations, the tensor in others), then arithmetic with tensors (the IoU spelling), or a
    use that tells the two apart: an output, a comparison, a method, a division of two such
    values, another constant or dtype (those keep the loop)."""
    x = self.main(dtypes=("float32", "float32", "float64", "float16", "bfloat16", "int64"), rank=2)
    y = self.tensor("y", (self.n, self.d), self.pick([x.dtype, x.dtype, "float64", "float32"]))
    loop = self.indexed_loop(x, allow_while=False)
    i = loop.index
    c = self.pick(["0", "0", "0.0", "1", "-1", "0.5"])
    a, b = f"x[{i}, 0] - y[{i}, 0]", f"y[{i}, -1] - x[{i}, -1]"
    pa = self.pick([f"max({c}, {a})", f"min({a}, {c})", f"max({a}, {c})"])
    pb = self.pick([f"max({c}, {b})", f"min({c}, {b})"])
    use = self.pick(["iou", "iou", "iou", "neg", "out", "cmp", "method", "div", "sum"])
    self.emit(1, "out = torch.zeros(x.shape[0], dtype=torch.float64)" if self.chance(0.3)
              else "out = torch.zeros(x.shape[0], dtype=x.dtype)")
    self.emit_all(1, loop.head)
    self.emit(2, f"p = {pa}")
    self.emit(2, f"q = {pb}")
    expr = {"iou": f"p * q / (x[{i}].abs().sum() + y[{i}].abs().sum() - p * q + 1)",
            "neg": f"-p + x[{i}, 1] * q", "out": "p", "cmp": f"(p > 0.25) * x[{i}, 1]",
            "method": f"p.abs() + x[{i}, 1]", "div": f"p / q + x[{i}, 1]", "sum": f"p + q - x[{i}, 1]"}[use]
    self.emit(2, f"out[{i}] = {expr}")
    self.emit_all(2, loop.tail)
    self.emit(1, "return out")


ROWS_FORMS = {"unpack": rows_unpack, "items": rows_items, "branch": rows_branch, "mixed": rows_mixed,
              "tolist": rows_tolist}


def win_index(self):
    """A sliding window of the loop's own index, `x[i + a:i + b]` along a dimension after whole
    ones: ranges that sometimes start a window before row 0 or end one past the last row (Python
    counts from the end, or clips), steps above one, reversed ranges, reductions of the window,
    products with a filter, several outputs."""
    rank = self.pick([1, 1, 2, 2, 3])
    dtypes = ("float32", "float32", "float64", "int64")
    x = self.main(dtypes=dtypes, rank=rank) if rank < 3 else \
        self.tensor("x", (self.n, self.d, 3), self.pick(dtypes))
    dim = self.pick([0, 0, 0, 1]) if rank >= 2 else 0
    w = self.rng.randint(1, 4)
    a = self.pick([0, 0, -1, -2, 1])
    b = a + self.pick([w, w, w, w, 0])          # (width 0 sometimes: empty windows)
    size = f"{x.name}.shape[{dim}]"
    lo = self.pick([max(0, -a), max(0, -a), 0, 1])
    hi = self.pick([f"{size} - {b}", f"{size} - {b}", f"{size} - {b} + 1", f"{size} - {b} + 2", f"{size}"])
    step = self.pick(["", "", "", ", 2", ", 3"])
    head = f"range({lo}, {hi}{step})"
    if self.chance(0.15):
        head = f"reversed({head})"
    lead = ":, " * dim
    tail = ""
    if self.chance(0.3):
        # an Ellipsis for the whole dimensions before the window (and one after it, at rank 3)
        lead, tail = "..., ", (", :" if rank - dim == 2 else "")
        if rank - dim > 2:
            lead, tail = ":, " * dim, ""
    off = lambda c: "" if c == 0 else (f" + {c}" if c > 0 else f" - {-c}")    # noqa: E731
    win = f"{x.name}[{lead}i{off(a)}:i{off(b)}{tail}]"
    red_dim = dim                  # the window's own dimension in one iteration's value
    fl = x.dtype if x.dtype != "int64" else "float32"
    red = self.pick([f"{win}.sum({red_dim})", f"{win}.sum()", f"{win}.max({red_dim}).values",
                     f"{win}.float().mean({red_dim})", f"{win}.prod({red_dim})", f"{win} * 2",
                     f"({win} - {win}.min()).abs().sum()"])
    if rank == 1 and self.chance(0.3):
        self.tensor("filt", (w,), x.dtype if x.dtype != "int64" else "float32")
        red = f"torch.dot({win}.to(filt.dtype), filt)" if b - a == w else red
    out = self.pick(["append", "append", "accum", "store"])
    if out == "store":
        self.emit(1, f"out = torch.zeros({size} + 4, dtype=torch.{fl})")
    self.emit(1, "outs = []" if out == "append" else "total = 0.0")
    self.emit(1, f"for i in {head}:")
    self.emit(2, f"v = {red}")
    if out == "append":
        self.emit(2, "outs.append(v)")
        self.emit(1, self.pick(["return outs", "return torch.stack(outs) if outs else None"]))
    elif out == "accum":
        self.emit(2, "total = total + v")
        self.emit(1, "return total")
    else:
        self.emit(2, "total = total + 0.0")
        self.emit(2, "out[i] = v.sum()")
        self.emit(1, "return out")


def win_bounds(self):
    """Windows with bounds read from tensors: `x[s:s + w]` with `s = st[k]` (negative starts,
    starts past the end, repeats and any order), or `x[lo[k]:hi[k]]` of several widths."""
    x = self.main(dtypes=("float32", "float64", "int64"), rank=self.pick([1, 2]))
    w = self.rng.randint(1, 3)
    k = self.rng.randint(1, 6)
    top = self.pick([f"{x.shape[0] - w + 1}", f"{x.shape[0]}", f"{x.shape[0] - w + 1}"])
    low = self.pick([0, 0, 0, -3])
    self.tensor("st", (k,), self.pick(["int64", "int64", "int32"]), low=low, high=int(top) if int(top) > low else low + 1)
    form = self.pick(["start", "start", "bounds"])
    self.emit(1, "outs = []")
    self.emit(1, "for k in range(st.shape[0]):")
    if form == "start":
        self.emit(2, "s = st[k]")
        win = f"{x.name}[s:s + {w}]"
    else:
        self.emit(2, f"e = st[k] + {self.pick([w, w, 'k % 2 + 1'])}")
        win = f"{x.name}[st[k]:e]"
    self.emit(2, f"outs.append({self.pick([f'{win}.sum(0)', f'{win} * 3', f'{win}.float().norm()'])})")
    self.emit(1, self.pick(["return outs", "return torch.stack(outs)"]))


def _append_each(self, loop, value: str):
    """`outs.append(value)` in the loop, the list returned or stacked."""
    self.emit(1, "outs = []")
    self.emit_all(1, loop.head)
    self.emit(2, f"outs.append({value})")
    self.emit_all(2, loop.tail)
    self.emit(1, self.pick(["return outs", "return torch.stack(outs) if outs else None"]))


def win_masked(self):
    """A boolean-mask selection reduced at once: `x[i][x[i] > c].sum()`, `x[i][m[i]].max()`,
    `x[y == c].mean(0)` (classes that may be empty), masks of another shape, integer data."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64"), rank=self.pick([1, 2, 2]))
    form = self.pick(["self", "given", "classes"])
    red = self.pick(["sum()", "sum()", "mean()", "max()", "min()", "sum(0)", "mean(0)"])
    if form == "classes":
        k = self.rng.randint(1, 5)
        self.tensor("y", (self.n,), self.pick(["int64", "int64", "int32"]), low=0, high=k)
        self.emit(1, "outs = []")
        self.emit(1, f"for c in range({k + self.pick([0, 0, 1])}):")
        self.emit(2, f"outs.append({x.name}[y == c].{red})")
        self.emit(1, self.pick(["return outs", "return torch.stack(outs)"]))
        return
    loop = self.indexed_loop(x, allow_while=False)
    i, row = loop.index, loop.row.expr
    if form == "given":
        shape = x.shape if self.chance(0.9) else (x.shape[0],) + tuple(s + 1 for s in x.shape[1:])
        self.tensor("m", shape, "bool")
        mask = f"m[{i}]"
    else:
        mask = f"{row} > {self.pick(['0', '0.5', '2', '-1'])}"
    _append_each(self, loop, f"{row}[{mask}].{red} {self.pick(['', '* 2', '+ 1'])}")


def _span_loop(self, x, kind, lo_hi):
    """The loop over x's rows and the span's bounds `a[i]` / `b[i]` (either may be open; read
    through int() where `kind` is "int")."""
    loop = self.indexed_loop(x, allow_while=False)
    i = loop.index
    lo = f"a[{i}]" if lo_hi in ("lo", "both") else ""
    hi = f"b[{i}]" if lo_hi in ("hi", "both") else ""
    if kind == "int":
        lo, hi = (f"int({v})" if v else "" for v in (lo, hi))
    return loop, lo, hi


def win_span(self):
    """A ragged span reduced along it: `h[i, :lengths[i]].mean(0)`, `x[i][s:e].sum()`, with bounds
    that are negative, past the ends, empty, computed in the body, floats, or a Python list."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64", "bool"), rank=self.pick([2, 2, 3]))
    t = x.shape[1]
    kind = self.pick(["tensor", "tensor", "int", "list", "float"])
    lo_hi = self.pick(["hi", "hi", "lo", "both"])
    for name in ("a", "b"):
        if kind == "list":
            self.param(name, repr([self.rng.randint(-t - 2, t + 2) for _ in range(self.n)]))
        elif kind == "float":
            self.param(name, f"torch.randint(0, {t + 1}, ({self.n},)).float()")
        else:
            self.tensor(name, (self.n,), self.pick(["int64", "int64", "int32"]), low=-t - 2, high=t + 3)
    red = self.pick(["sum()", "sum(0)", "mean(0)", "mean()", "max()", "min()", "sum(dim=0)"])
    loop, lo, hi = _span_loop(self, x, kind, lo_hi)
    i, row = loop.index, loop.row.expr
    sliced = self.pick([f"{x.name}[{i}, {lo}:{hi}]", f"{row}[{lo}:{hi}]"])
    _append_each(self, loop, f"{sliced}.{red}{self.pick(['', ' * 2'])}")


def win_selexpr(self):
    """Elementwise arithmetic on masked selections, reduced at once: `(pred[y == c] == c).float()
    .mean()`, `((x[i][m[i]] - mu[i]) ** 2).sum()`, `x[i][x[i] > 0].log().mean()`, with NaN and
    inf planted, integer data, empty selections, gradients (the loop)."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64"), rank=self.pick([1, 2, 2]))
    red = self.pick(["sum()", "mean()", "max()", "min()", "sum(0)", "mean(0)"])
    fl = x.dtype in FLOATS
    if self.chance(0.35):
        k = self.rng.randint(1, 5)
        self.tensor("y", (self.n,), "int64", low=0, high=k)
        sel = f"{x.name}[y == c]"
        e = self.pick([f"({sel} == c)", f"({sel} * 2 - c)", f"({sel} - y[y == c])", f"{sel}.abs()"])
        if e.startswith(f"({sel} ==") or self.chance(0.3):
            e += ".float()"
        self.emit(1, "outs = []")
        self.emit(1, f"for c in range({k + self.pick([0, 0, 1])}):")
        self.emit(2, f"outs.append({e}.{red})")
        self.emit(1, self.pick(["return outs", "return torch.stack(outs)"]))
        return
    loop = self.indexed_loop(x, allow_while=False)
    i, row = loop.index, loop.row.expr
    if self.chance(0.5):
        self.tensor("m", x.shape, "bool")
        mask = f"m[{i}]"
    else:
        mask = f"{row} > {self.pick(['0', '0.5', '-1'])}"
    sel = f"{row}[{mask}]"
    pool = [f"({sel} * 2 + 1)", f"({sel} - {row}.mean())" if fl else f"({sel} - 1)", f"{sel}.abs()",
            f"({sel} ** 2)", f"(-{sel})", f"({sel} > 1)"]
    if fl:
        pool += [f"{sel}.log()", f"{sel}.sqrt()", f"{sel}.exp()", f"({sel} / {row}.sum())"]
    e = self.pick(pool)
    if e.endswith("> 1)"):
        e += self.pick([".float()", ".long()", ""])
    _append_each(self, loop, f"{e}.{red}")


def win_spanexpr(self):
    """Elementwise arithmetic on ragged spans with the same bounds, reduced at once:
    `(x[i, :b[i]] - y[i, :b[i]]).abs().mean()`, `x[i][a[i]:b[i]].log().sum()`, `(h[i, :n] * w).sum(0)`,
    a span bound to a name first; bounds negative, past the ends, empty, from int() or a Python
    list; NaN and inf planted, a second tensor of another width, gradients (a weight that
    requires them keeps the loop)."""
    dt = self.pick(["float32", "float32", "float64"])
    t = max(self.d, 1)
    if self.chance(0.25):
        # per-sequence class losses: padding targets out of range, NaN scores in the padding
        self.helpers["F"] = "import torch.nn.functional as F\n"
        k = self.rng.randint(1, 4)
        self.tensor("x", (self.n, t, k), dt)
        self.tensor("y", (self.n, t), "int64", low=0, high=k, special_p=0)
        self.tensor("b", (self.n,), "int64", low=0 if self.chance(0.8) else -1, high=t + 2, special_p=0)
        pad = self.pick(["-1", "k", "-100"]).replace("k", str(k))
        self.emit(1, f"m = torch.arange(y.shape[1]) >= b[:, None]")
        self.emit(1, f"y = y.masked_fill(m, {pad})")
        if self.chance(0.5):
            self.emit(1, "x = x.masked_fill(m[..., None], float('nan'))")
        fn = self.pick(["F.cross_entropy", "F.cross_entropy", "F.nll_loss"])
        arg = self.pick(["x[i, :b[i]]", "x[i, :int(b[i])]", "x[i][:b[i]]"])
        first = arg if fn != "F.nll_loss" else f"torch.log_softmax({arg}, -1)"
        red = self.pick(["", "", ", reduction='sum'", ", reduction='none'"])
        self.emit(1, "loss = 0.0")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"loss = loss + {fn}({first}, {arg.replace('x', 'y', 1)}{red})" + (".sum()" if "none" in red else ""))
        self.emit(1, "return loss")
        return
    trail = self.pick([(), (), (2,)])
    x = self.tensor("x", (self.n, t) + trail, dt)
    y = self.tensor("y", (self.n, t if self.chance(0.85) else t + 1) + trail, dt)
    kind = self.pick(["tensor", "tensor", "int", "list"])
    lo_hi = self.pick(["hi", "hi", "lo", "both"])
    for name in ("a", "b"):
        if kind == "list":
            self.param(name, repr([self.rng.randint(-t - 2, t + 2) for _ in range(self.n)]))
        else:
            self.tensor(name, (self.n,), self.pick(["int64", "int64", "int32"]), low=-t - 2, high=t + 3)
    w = None
    if self.chance(0.4):
        w = self.tensor("w", trail, dt) if trail else "w"
        if not trail:
            self.param("w", f"torch.tensor(0.7, dtype=torch.{dt}, requires_grad={self.chance(0.3)})")
    self.tensor("c", (self.n,), dt)
    loop, lo, hi = _span_loop(self, x, kind, lo_hi)
    i, row = loop.index, loop.row.expr
    A = self.pick([f"x[{i}, {lo}:{hi}]", f"{row}[{lo}:{hi}]"])
    B = f"y[{i}, {lo}:{hi}]"
    pool = [f"({A} - {B}).abs()", f"(({A} - {B}) ** 2)", f"({A} * 2 + 1)", f"{A}.exp()", f"torch.log({A}.abs() + 1)",
            f"{A}.log()", f"(torch.sigmoid({A}) * {B})", f"({A} - c[{i}])", f"({A} > 0).float()"]
    if w is not None:
        pool += [f"({A} * w)", f"(w - {A})"]
    e = self.pick(pool)
    red = self.pick(["sum()", "mean()", "max()", "min()", "sum(0)", "mean(0)"])
    if self.chance(0.2):
        self.emit(1, "outs = []")
        self.emit_all(1, loop.head)
        self.emit(2, f"seq = {A}")
        self.emit(2, f"outs.append({e.replace(A, 'seq')}.{red})")
        self.emit_all(2, loop.tail)
        self.emit(1, self.pick(["return outs", "return torch.stack(outs) if outs else None"]))
        return
    _append_each(self, loop, f"{e}.{red}")


def win_nest(self):
    """Windows in a loop nest, one per level: `x[i + a:i + b, j + c:j + d]` (or strided starts
    `x[i * s:i * s + k, ..]`, whole dimensions before them, an integer after), levels swapped,
    one level without a window, ranges that run windows past the ends (Python clips them),
    reductions, stores into a new tensor, appends stacked or kept (views of x)."""
    rank = self.pick([2, 2, 2, 3])
    dtypes = ("float32", "float32", "float64", "int64")
    h, w = self.rng.randint(1, 7), self.rng.randint(1, 7)
    x = self.tensor("x", (h, w) if rank == 2 else (2, h, w), self.pick(dtypes))
    lead = "" if rank == 2 else self.pick([":, ", "1, ", "..., "])
    ka, kb = self.rng.randint(1, 3), self.rng.randint(1, 3)
    strided = self.chance(0.3)
    off = lambda c: "" if c == 0 else (f" + {c}" if c > 0 else f" - {-c}")    # noqa: E731
    d0, d1 = (1, 2) if rank == 3 and lead != "1, " else (0, 1)
    if strided:
        s = self.rng.randint(1, 3)
        win_i, win_j = f"i * {s}:i * {s} + {ka}", f"j * {s}:j * {s} + {kb}"
        hi_i = self.pick([f"({x.name}.shape[{d0}] - {ka}) // {s} + 1", f"{x.name}.shape[{d0}] // {s}"])
        hi_j = self.pick([f"({x.name}.shape[{d1}] - {kb}) // {s} + 1", f"{x.name}.shape[{d1}] // {s}"])
        ri, rj = f"range({hi_i})", f"range({hi_j})"
    else:
        a = self.pick([0, 0, 0, -1, 1])
        win_i, win_j = f"i{off(a)}:i{off(a + ka)}", f"j:j + {kb}"
        ri = self.pick([f"range({max(0, -a)}, {x.name}.shape[{d0}] - {a + ka} + 1)",
                        f"range({max(0, -a)}, {x.name}.shape[{d0}] - {a + ka} + 1, 2)",
                        f"range({x.name}.shape[{d0}] - {a + ka}, {max(0, -a) - 1}, -1)",
                        f"range({x.name}.shape[{d0}])"])
        rj = self.pick([f"range({x.name}.shape[{d1}] - {kb} + 1)", f"range(0, {x.name}.shape[{d1}] - {kb} + 1, 2)",
                        f"range({x.name}.shape[{d1}])"])
    form = self.pick(["both", "both", "both", "swapped", "one"])
    if form == "swapped":
        # the outer level's window along the later dimension, the inner one's along the first
        win = f"{x.name}[{lead}j:j + {ka}, i:i + {kb}]"
        ri, rj = f"range({x.name}.shape[{d1}] - {kb} + 1)", f"range({x.name}.shape[{d0}] - {ka} + 1)"
    elif form == "one":
        win = f"{x.name}[{lead}{win_i}]"
    else:
        win = f"{x.name}[{lead}{win_i}, {win_j}]"
    fl = x.dtype != "int64"
    red = self.pick([f"{win}.sum()", f"{win}.sum() * (j + 1)", f"{win}.max()", f"{win}.float().mean()",
                     f"({win} * 2).amin()", f"{win}.sum(-1)" if form != "one" else f"{win}.sum()"]
                    + ([f"{win}.norm()", f"({win} - {win}.mean()).abs().sum()"] if fl else []))
    out = self.pick(["append", "append", "store", "accum", "views"])
    if out == "store" and not red.endswith("(-1)"):
        self.emit(1, f"out = torch.zeros({x.name}.shape[{d0}] + 3, {x.name}.shape[{d1}] + 3, "
                     f"dtype=torch.{'float64' if x.dtype == 'float64' else 'float32'})")
    else:
        out = out if out != "store" else "append"
        self.emit(1, "outs = []" if out in ("append", "views") else "total = 0.0")
    self.emit(1, f"for i in {ri}:")
    self.emit(2, f"for j in {rj}:")
    if out == "append":
        self.emit(3, f"outs.append({red})")
        self.emit(1, self.pick(["return outs", "return torch.stack(outs) if outs else None"]))
    elif out == "views":
        self.emit(3, f"outs.append({win})")
        self.emit(1, "return outs")
    elif out == "accum":
        self.emit(3, f"total = total + {red}")
        self.emit(1, "return total")
    else:
        self.emit(3, f"out[i, j] = {red}")
        self.emit(1, "return out")


WIN_FORMS = {"index": win_index, "bounds": win_bounds, "masked": win_masked, "span": win_span,
             "selexpr": win_selexpr, "spanexpr": win_spanexpr, "nest": win_nest}


def fill_slices(self):
    """`out[i, lo:hi] = v` with bounds that change per iteration (lengths, starts and ends,
    a bound computed in the body; negative, past the end, floats, a Python list), on the
    row's first or second dimension, into a copy, a new tensor or an argument written in
    place; sometimes under a condition or with a value that changes per iteration."""
    rank = self.pick([2, 2, 3])
    dt = self.pick(["float32", "float64", "int64", "bool"])
    shape = (self.n, self.d) if rank == 2 else (self.n, self.rng.randint(1, 3), self.d)
    where = self.pick(["clone", "new", "arg"])
    if where == "arg":
        self.no_grad = True
    x = self.tensor("x", shape, dt, readonly=where != "arg")
    span = max(shape[1:])
    lenkind = self.pick(["tensor", "tensor", "tensor", "list", "float"])
    lo, hi = -span - 2, span + 3
    if lenkind == "list":
        self.param("lengths", "[" + ", ".join(str(self.rng.randint(lo, hi - 1)) for _ in range(self.n + self.pick([0, 0, 1, -1]))) + "]")
    elif lenkind == "float":
        self.param("lengths", f"torch.randint({lo}, {hi}, ({self.n},), generator=g).float()")
    else:
        self.tensor("lengths", (self.n,), self.pick(["int64", "int64", "int32"]), low=lo, high=hi)
    both = self.chance(0.25)
    if both:
        self.tensor("ends", (self.n,), "int64", low=lo, high=hi)
    loop = self.indexed_loop(x, allow_while=self.chance(0.3))
    i = loop.index
    if where == "clone":
        self.emit(1, "out = x.clone()")
    elif where == "new":
        self.emit(1, f"out = torch.{self.pick(['zeros', 'ones'])}({', '.join('x.shape[%d]' % k for k in range(rank))}, dtype=torch.{self.pick([dt, 'float32'])})")
    else:
        self.emit(1, "out = x")
    self.emit_all(1, loop.head)
    b = f"lengths[{i}]"
    if self.chance(0.3):
        self.emit(2, f"L = lengths[{i}] {self.pick(['- 1', '+ 1', '* 2', '// 2'])}")
        b = "L"
    sl = f"{b}:ends[{i}]" if both else self.pick([f"{b}:", f":{b}", f"{b}:", f"-1:{b}" if self.chance(0.3) else f"{b}:"])
    target = f"out[{i}, {sl}]" if rank == 2 else self.pick([f"out[{i}, :, {sl}]", f"out[{i}, {sl}]", f"out[{i}, {sl}, :]"])
    v = self.pick(["0", "-1.5", "True", "float('-inf')", "pad", "1", f"x[{i}].sum()"])
    if v == "pad":
        self.param("pad", self.pick(["torch.tensor(2.5)", "torch.tensor(3)", "0.25"]))
    if self.chance(0.25):
        # a store into the same row first (sometimes with a statement between them, which may
        # read the stored row)
        row_t = target.split(",")[0] + "]"
        self.emit(2, f"{row_t} = {self.pick([f'x[{i}] * 2', '0.5', f'x[{i}]', f'x[{i}].sum()'])}")
        if self.chance(0.3):
            self.emit(2, self.pick([f"z = x[{i}].sum()", f"z = {row_t}.sum()"]))
    if self.chance(0.12):
        self.emit(2, f"if {self.cond(loop.row, i)}:")
        self.emit(3, f"{target} = {v}")
    else:
        self.emit(2, f"{target} = {v}")
    self.emit_all(2, loop.tail)
    self.emit(1, self.pick(["return out", "return out.sum(0)", "return None"]) if where == "arg" else "return out")


def fill_updates(self):
    """`out[i] op= v` (and `out[i, c] op= v`, `out[:, i] op= v`) into an output of any dtype
    (float16 to bool) with values of other dtypes and ranks, 0-d tensors, Python numbers from
    `.item()` or a number list: the loop's in-place update decides the dtype it computes in,
    and raises where its output cannot hold the result."""
    self.no_grad = self.chance(0.5)
    x = self.main(dtypes=("float32", "float64", "int64", "bool", "float16"))
    odt = self.pick(["float32", "float64", "int64", "int32", "float16", "bool"])
    cols = len(x.shape) == 2 and self.chance(0.2)
    where = self.pick(["arg", "clone", "new"])
    shape = x.shape if not cols else x.shape[::-1]
    if where == "arg":
        self.no_grad = True
        self.param("out", f"(torch.randn({tuple(shape)!r}, generator=g) * 4).to(torch.{odt})")
    loop = self.indexed_loop(x, allow_while=False)
    i = loop.index
    v = self.value(loop.row, i, want=self.pick(["same", "scalar", "scalar"]))
    src = self.pick(["value", "value", "item", "list"])
    val = v.expr
    if src == "item" and not v.dims:
        val = f"({v.expr}).item()"
    elif src == "list":
        self.param("w", _number_list(self, self.n, self.pick(["float", "int"])))
        val = f"w[{i}]"
    if where == "clone":
        self.emit(1, f"out = {self.pick(['x.clone()', f'x.to(torch.{odt})'])}")
    elif where == "new":
        self.emit(1, f"out = torch.{self.pick(['zeros', 'ones'])}({', '.join('x.shape[%d]' % k for k in range(len(shape)))}, dtype=torch.{odt})")
    self.emit_all(1, loop.head)
    op = self.pick(["+=", "+=", "*=", "-=", "/="])
    if cols:
        target = f"out[:, {i}]"
    elif len(shape) == 2 and self.chance(0.2) and not v.dims:
        target = f"out[{i}, {self.rng.randrange(self.d)}]"
    else:
        target = f"out[{i}]"
    if self.chance(0.1):
        self.emit(2, f"if {self.cond(loop.row, i)}:")
        self.emit(3, f"{target} {op} {val}")
    else:
        self.emit(2, f"{target} {op} {val}")
    self.emit_all(2, loop.tail)
    self.emit(1, "return out")


FILL_FORMS = {"slices": fill_slices, "updates": fill_updates}


def meth_rows(self):
    """In-place tensor methods on a row of an argument or an output, as statements
    (`out[i].clamp_(min=0)`, `out[i].zero_()`, `out[i].copy_(v)`, `out[i].fill_(v)`), in outputs
    of any dtype and with values of other dtypes: the method refuses to cast a result of
    another kind (`int_row.clamp_(min=0.5)`, `int_row.sqrt_()`) and raises on a larger result,
    where a store would cast it, and under gradients its backward may need what it overwrote."""
    self.no_grad = self.chance(0.5)
    x = self.main(dtypes=("float32", "float64", "int64", "bool", "float16"))
    odt = self.pick(["float32", "float64", "int64", "int32", "float16", "bool"])
    where = self.pick(["arg", "clone", "new", "empty"])
    cols = len(x.shape) == 2 and where in ("arg", "new") and self.chance(0.2)
    shape = x.shape if not cols else x.shape[::-1]
    if where == "arg":
        self.no_grad = True
        self.param("out", f"(torch.randn({tuple(shape)!r}, generator=g) * 4).to(torch.{odt})")
    if where == "empty":     # (every row written: the output's other contents are garbage)
        loop = Loop(["for i in range(x.shape[0]):"], "i", x.row("x[i]"), [])
    else:
        loop = self.indexed_loop(x, allow_while=False)
    i = loop.index
    if where == "clone":
        self.emit(1, f"out = {self.pick(['x.clone()', f'x.to(torch.{odt})', 'x * 1'])}")
    elif where == "new":
        self.emit(1, f"out = torch.{self.pick(['zeros', 'ones'])}({', '.join('x.shape[%d]' % k for k in range(len(shape)))}, dtype=torch.{odt})")
    elif where == "empty":
        self.emit(1, "out = torch.empty_like(x)")
    if cols:
        target = f"out[:, {i}]"
    elif len(shape) == 2 and where != "empty" and self.chance(0.15):
        target = f"out[{i}, 1:]"
    else:
        target = f"out[{i}]"
    want = self.pick(["same", "scalar", "scalar"])
    v = self.value(loop.row, i, want=want)
    c = self.pick(["0", "0.5", "-1", "2", "True"])
    call = self.pick([f"clamp_(min={c})", f"clamp_(-{c}, {c})" if c != "True" else "clamp_(-1, 1)", f"clamp_min_({c})",
                      f"clamp_max_({v.expr})", "zero_()", f"fill_({v.expr})", f"fill_({c})", "neg_()", "abs_()",
                      "relu_()", "sqrt_()", "exp_()", "sigmoid_()", "floor_()", f"copy_({v.expr})",
                      f"masked_fill_({v.expr} > 0, {c})", f"add_({v.expr}, alpha=2)", f"mul_({v.expr})",
                      f"lerp_({v.expr}, 0.25)", f"pow_(2)", f"nan_to_num_(0.0)"])
    if call.startswith("fill_(") and v.expr in call and v.dims and self.chance(0.7):
        call = f"fill_(({v.expr}).sum())"
    if where == "empty":
        call = f"copy_({v.expr})"       # (every row written: the output's other contents are garbage)
    self.emit_all(1, loop.head)
    if where != "empty" and self.chance(0.25):
        self.emit(2, f"if {self.cond(loop.row, i)}:")
        self.emit(3, f"{target}.{call}")
    else:
        self.emit(2, f"{target}.{call}")
    self.emit_all(2, loop.tail)
    self.emit(1, self.pick(["return out", "return out", "return out.sum()"]))


METH_FORMS = {"rows": meth_rows}

# family "half": the default family's vectorizable forms with float16 / bfloat16 among the
# floating dtypes (weak Python scalars, 0-d operands and reductions behave differently there)
HALF_FORMS = {**VEC_FORMS, **NEW_VEC_FORMS}
# ============================================================== family "lost": forms that stayed on Python
# A count read under its own condition before its update (compaction indices), `while` stop
# conditions with several `and` terms, sums updated by a chain of `+` / `-` terms.

def lost_compaction(self):
    """`if c: idx[i] = k; k += K`: the count before this iteration's increment, stored into an
    output of some dtype (int8 wraps, float16 rounds, bool), computed with or as it is."""
    x = self.main(dtypes=("float32", "float64", "int64", "bool"), rank=self.pick([1, 1, 1, 2]))
    loop = self.indexed_loop(x, allow_while=self.chance(0.3))
    i, row = loop.index, loop.row.expr
    dt = self.pick(["int64", "int64", "float32", "int8", "float16", "bool"])
    self.emit(1, f"idx = torch.full(({x.name}.shape[0],), -1, dtype=torch.{dt})")
    self.emit(1, f"cnt = {self.pick(['0', '0', '5', '-3', '250'])}")
    self.emit_all(1, loop.head)
    cond = self.pick([f"{row} > 0", f"{row}", f"({row} * 2).sum() < 1", f"{row} != 1"])
    self.emit(2, f"if {cond}:")
    if self.chance(0.2):
        self.emit(3, f"y = {row} * 2")
        self.emit(3, f"idx[{i}] = {self.pick(['cnt', 'cnt * 2'])}")
    else:
        self.emit(3, f"idx[{i}] = {self.pick(['cnt', 'cnt', 'cnt * 2', 'cnt - 1'])}")
    self.emit(3, self.pick([f"cnt += {self.pick(['1', '1', '2'])}", "cnt = cnt + 1", "cnt -= 1", "cnt += 1.5"]))
    self.emit_all(2, loop.tail)
    self.emit(1, "return idx, cnt")


def lost_while_and(self):
    """`while i < n and a and b ...: i += 1` (or, not, indices a skipped term would read out of
    range), with or without a store per iteration."""
    x = self.main(dtypes=("float32", "float64", "int64"), rank=1)
    y = self.tensor("y", (self.n,), self.pick(["float32", "int64"]))
    self.param("t", self.pick(["1", "2.5", "3", "0"]))
    self.param("table", "torch.tensor([1.0, -2.0, 3.0, 4.0])")
    terms = [f"{x.name}[i] < t", f"{x.name}[i] > -t", f"{y.name}[i] != 0", f"({x.name}[i] > 0 or {y.name}[i] > 1)",
             f"not {x.name}[i] == 2", f"0 <= {y.name}[i] < 4 and table[{y.name}[i].long()] > -3"]
    k = self.pick([2, 2, 3])
    picked = self.rng.sample(terms, k)
    store = self.chance(0.4)
    if store:
        self.emit(1, f"out = torch.zeros({x.name}.shape[0])")
    self.emit(1, f"i = {self.pick(['0', '0', '1'])}")
    self.emit(1, f"while i < {self.pick([f'{x.name}.shape[0]', f'len({x.name})'])} and {' and '.join(picked)}:")
    if store:
        self.emit(2, f"out[i] = {x.name}[i] * 2")
    self.emit(2, "i += 1")
    self.emit(1, "return (out, i)" if store else "return i")


def lost_sum_terms(self):
    """`total = total + a[i] - b[i] ...`: terms of one dtype or of several, Python numbers, starts
    of every kind (the runtime keeps the loop where a step would change type)."""
    rank = self.pick([1, 1, 2])
    a = self.main("a", dtypes=("float32", "float64", "int64", "int32", "bool"), rank=rank)
    b = self.tensor("b", (self.n,) if rank == 1 else (self.n, self.d),
                    a.dtype if self.chance(0.7) else self.pick(["float32", "float64", "int64"]))
    loop = self.indexed_loop(a, allow_while=self.chance(0.2))
    i = loop.index
    self.emit(1, f"total = {self.pick(['0', '0.0', 'torch.zeros(())', f'torch.zeros((), dtype={a.name}.dtype)', '3'])}")
    self.emit_all(1, loop.head)
    ta, tb = f"{a.name}[{i}]", f"{b.name}[{i}]"
    if rank == 1 and self.chance(0.3):
        ta, tb = f"{ta}.item()", f"{tb}.item()"
    self.emit(2, self.pick([f"total = total + {ta} + {tb}", f"total = total + {ta} - {tb}",
                            f"total = total - {ta} - {tb}", f"total = total + {ta} * 2 + {tb} - {ta}"]))
    self.emit_all(2, loop.tail)
    self.emit(1, "return total")


def lost_scatter_reduce(self):
    """A per-bin maximum, minimum or product over repeated indices (`best[idx[i]] =
    torch.maximum(best[idx[i]], w[i])`, torch.minimum, the two-tensor torch.max / torch.min,
    Python's max / min, in either order, `out[idx[i]] *= w[i]`, `out[idx[i]] = out[idx[i]] *
    w[i]`): into a new tensor or an argument, of the values' dtype or another, elements or
    rows, under a condition now and then, with int64 / int32 / uint8 indices, negative ones and
    now and then one out of range; NaN, inf, -0.0 and gradients from the inputs."""
    k = self.rng.randint(1, 6)
    low = -k if self.chance(0.2) else 0
    high = k + 1 if self.chance(0.1) else k
    idt = self.pick(["int64", "int64", "int64", "int32", "uint8"])
    self.tensor("idx", (self.n,), idt, low=max(low, 0) if idt == "uint8" else low, high=high)
    form = self.pick(["maximum", "minimum", "max", "min", "py_max", "py_min", "imul", "mul"])
    product = form in ("imul", "mul")
    dtypes = ("float32", "float64", "int64", "int32", "float16") if product else \
        ("float32", "float32", "float64", "int64", "int32", "bool", "float16")
    w = self.main("w", dtypes=dtypes, rank=self.pick([1, 1, 2]))
    dt = w.dtype if self.chance(0.75) else self.pick(dtypes)
    dims = ", ".join((str(k),) + tuple(f"w.shape[{d}]" for d in range(1, len(w.shape))))
    if self.chance(0.3):
        shape = (k,) + tuple(w.shape[1:])
        self.tensor("best", shape, dt, readonly=False)
    elif dt == "bool":
        self.emit(1, f"best = torch.{self.pick(['zeros', 'ones'])}({dims}, dtype=torch.bool)")
    else:
        start = self.pick(["1", "1", "2", "-1"] if product else
                          (["float('-inf')", "float('inf')", "0", "-0.0", "1.5"] if dt in FLOATS else ["0", "-100", "100"]))
        self.emit(1, f"best = torch.full(({dims},), {start}, dtype=torch.{dt})")
    val = self.pick(["w[i]", "w[i]", "w[i]", "w[i] * 2", "w[i] + 1"])
    cell = "best[idx[i]]"
    if form == "imul":
        stmt = f"{cell} *= {val}"
    elif form == "mul":
        val = val if val == "w[i]" else f"({val})"
        stmt = self.pick([f"{cell} = {cell} * {val}", f"{cell} = {val} * {cell}"])
    else:
        fn = {"maximum": "torch.maximum", "minimum": "torch.minimum", "max": "torch.max", "min": "torch.min",
              "py_max": "max", "py_min": "min"}[form]
        stmt = self.pick([f"{cell} = {fn}({cell}, {val})", f"{cell} = {fn}({val}, {cell})"])
    self.emit(1, f"for i in range({'idx.shape[0]' if self.chance(0.5) else self.count(w)}):")
    if self.chance(0.3):
        self.emit(2, f"if {self.pick(['w[i].sum() > 0', 'idx[i] != 0', 'w[i].max() < 1'])}:")
        self.emit(3, stmt)
    else:
        self.emit(2, stmt)
    self.emit(1, "return best")


def lost_kept_rows(self):
    """A body guarded by one condition (`if c:` around it all, `if not c: continue` before it, or
    a comprehension's `if`), whose outputs are running totals, counts and appended values, often
    with inputs that require grad (Token._run_selected: the kept rows alone run with grad).
    The kept rows go through functions whose derivative is infinite or NaN where the condition
    is false (sqrt, log, 1 / v) or an index that is only valid there, sometimes through a helper
    (with a branch of its own now and then, which keeps the loop), the index used as a number,
    the loop's variables read after it, reversed and stepped ranges."""
    x = self.main(dtypes=("float32", "float32", "float64"), rank=self.pick([1, 2, 2]), grad_p=0.8)
    lab = self.tensor("lab", (self.n,), "int64", low=-1, high=3)
    two = len(x.shape) == 2
    self.param("W", f"torch.randn(3, {x.shape[1] if two else 1}, generator=torch.Generator().manual_seed(1))")
    conds = [(f"{x.name}[i].sum() > 0", "pos"), (f"lab[i] >= 0", "lab"), (f"{x.name}[i].min() > -0.5", "pos"),
             (f"lab[i] != -1", "lab")]
    cond, kind = self.pick(conds)
    xi = f"{x.name}[i]"
    vals = {"pos": [f"torch.log({xi}.sum())", f"(1 / {xi}.sum())", f"torch.sqrt({xi}.sum())"],
            "lab": [f"torch.log_softmax(W @ {xi if two else xi + '.reshape(1)'}, 0)[lab[i]]",
                    f"({xi}.sum() * lab[i])", f"torch.exp({xi}.sum())"]}[kind]
    val = self.pick(vals)
    if self.chance(0.2):
        self.emit(1, "def h(v):")
        self.emit(2, self.pick(["return v * 2", "return v * 2 if v.sum() > 1 else v * 0"]))
        val = f"h({val})"
    if self.chance(0.2):
        val = f"{val} * i"
    shape = self.pick(["for", "for", "continue", "comp", "rev", "step"])
    count = self.count(x)
    if shape == "comp":
        self.emit(1, f"out = [{val} for i in range({count}) if {cond}]")
        self.emit(1, "return torch.stack(out) if out else None")
        return
    outs = self.pick([["total"], ["total", "count"], ["kept"], ["total", "kept"]])
    self.emit(1, f"total = {self.pick(['0.0', 'torch.zeros(())', '0'])}")
    self.emit(1, "count = 0")
    self.emit(1, "kept = []")
    self.emit(1, "i = -1")
    rng = {"rev": f"range({count} - 1, -1, -1)", "step": f"range(0, {count}, 2)"}.get(shape, f"range({count})")
    self.emit(1, f"for i in {rng}:")
    stmts = []
    if "total" in outs:
        stmts.append(self.pick([f"total = total + {val}", f"total = total - {val}", f"total += {val}"]))
    if "count" in outs:
        stmts.append("count += 1")
    if "kept" in outs:
        stmts.append(f"kept.append({val})")
    if shape == "continue":
        self.emit(2, f"if not ({cond}):")
        self.emit(3, "continue")
        for st in stmts:
            self.emit(2, st)
    else:
        self.emit(2, f"if {cond}:")
        for st in stmts:
            self.emit(3, st)
    self.emit(1, "return total, count, (torch.stack(kept) if kept else None), i")


def lost_two_way(self):
    """Plain assignments, then one `if` / `else` whose sides both add to running totals, counts,
    appended values or stores of the row, often with inputs that require grad (Token._run_sides:
    each side on its own rows, after the condition of every row without grad). Each side goes through functions whose
    derivative is infinite or NaN on the other side's rows (sqrt, log, 1 / v) or an index only
    valid there; the branch as a conditional expression (a statement's value, or a name's the
    outputs read); now and then an output one side leaves alone, an `elif`, no `else`, a statement
    after the `if`, an assignment read after the loop, or a helper with a branch of its own (those keep the
    loop under grad), reversed and stepped ranges."""
    x = self.main(dtypes=("float32", "float32", "float64"), rank=self.pick([1, 2, 2]), grad_p=0.8)
    lab = self.tensor("lab", (self.n,), "int64", low=-1, high=3)
    two = len(x.shape) == 2
    self.param("W", f"torch.randn(3, {x.shape[1] if two else 1}, generator=torch.Generator().manual_seed(1))")
    xi = f"{x.name}[i]"
    prefix = self.pick([[], [], [f"s = {xi}.sum()"], [f"d = {xi} * 2", "s = d.sum()"]])
    sv = "s" if prefix else f"{xi}.sum()"
    kind = self.pick(["pos", "lab"])
    if kind == "pos":
        cond = self.pick([f"{sv} > 0", f"{sv} >= 0"])
        yes = self.pick([f"torch.log({sv})", f"torch.sqrt({sv})", f"(1 / {sv})"])
        no = self.pick([f"torch.log(-{sv})", f"torch.sqrt(-{sv})", f"{sv} ** 2", f"(1 / {sv})"])
    else:
        cond = self.pick(["lab[i] >= 0", "lab[i] != -1"])
        yes = f"torch.log_softmax(W @ {xi if two else xi + '.reshape(1)'}, 0)[lab[i]]"
        no = self.pick([f"{sv} * 0.1", f"torch.exp({sv})", f"torch.sqrt({sv})"])
    if self.chance(0.15):
        self.emit(1, "def h(v):")
        self.emit(2, self.pick(["return v * 2", "return v * 2 if v.sum() > 1 else v * 0"]))
        yes = f"h({yes})"
    if self.chance(0.15):
        no = f"{no} * i"
    outs = self.pick([["total"], ["total", "count"], ["kept"], ["total", "kept"], ["out"], ["out", "total"]])
    self.emit(1, f"total = {self.pick(['0.0', 'torch.zeros(())', '0'])}")
    self.emit(1, "count = 0")
    self.emit(1, "kept = []")
    self.emit(1, "i = -1")
    self.emit(1, "s = None")
    count = self.count(x)
    self.emit(1, f"out = torch.zeros({count}, dtype={x.name}.dtype)")
    shape = self.pick(["for", "for", "for", "rev", "step"])
    rng = {"rev": f"range({count} - 1, -1, -1)", "step": f"range(0, {count}, 2)"}.get(shape, f"range({count})")
    self.emit(1, f"for i in {rng}:")
    for st in prefix:
        self.emit(2, st)

    def side(val, k):
        sts = []
        if "total" in outs:
            sts.append(self.pick([f"total = total + {val}", f"total = total - {val}", f"total += {val}"]))
        if "count" in outs:
            sts.append(f"count += {k}")
        if "kept" in outs:
            sts.append(f"kept.append({val})")
        if "out" in outs:
            sts.append(f"out[i] = {val}")
        return sts
    odd = self.pick(["", "", "", "", "", "one_sided", "elif", "after", "value", "value", "named", "noelse",
                     "elif_noelse"])
    if odd in ("value", "named"):
        # the branch as a conditional expression: the statement's whole value, or a name's that
        # the outputs then read (several of them in one body keep the loop under grad)
        if odd == "named":
            self.emit(2, f"v = {yes} if {cond} else {no}")
            yes = no = "v"
        for st in side(yes, 1):
            if odd == "value":
                name, _, val = st.partition(" = ")
                if st.startswith("kept.append("):
                    st = f"kept.append({yes} if {cond} else {no})"
                elif st.startswith("count += "):
                    st = f"count += 1 if {cond} else 0"
                elif st.startswith("total += "):
                    st = f"total += {yes} if {cond} else {no}"
                elif st.startswith("total = total "):
                    st = f"{name} = total {val.split(' ')[1]} ({yes} if {cond} else {no})"
                else:
                    st = f"{name} = {yes} if {cond} else {no}"
            self.emit(2, st)
        self.emit(1, "return total, count, (torch.stack(kept) if kept else None), i, out")
        return
    self.emit(2, f"if {cond}:")
    for st in side(yes, 1):
        self.emit(3, st)
    if odd in ("elif", "elif_noelse"):
        self.emit(2, f"elif {xi}.sum() {self.pick(['> 5', '< -0.5'])}:")
        for st in side(no, 2):
            self.emit(3, st)
    if odd not in ("noelse", "elif_noelse"):
        self.emit(2, "else:")
        other = side(no, 0)
        if odd == "one_sided" and len(other) > 1:
            other = other[1:]
        for st in other:
            self.emit(3, st)
    if odd == "after" or odd == "noelse" and self.chance(0.5):
        self.emit(2, "count += 1")      # (else a guarded body: its stores run as a side too)
    self.emit(1, "return total, count, (torch.stack(kept) if kept else None), i, out" + (", s" if prefix and self.chance(0.2) else ""))


def lost_element_views(self):
    """In-place updates of the loop's element (`for row in x: row -= row.mean()`, in-place method
    chains, `row[0] = c`, a second tensor read alongside), of tensors of several dtypes and
    layouts (expanded rows share memory: the loop decides), now and then with the element read
    after the loop or rebound (the loop as written), or a list of rows instead of a tensor."""
    self.no_grad = self.chance(0.6)
    x = self.main(dtypes=("float32", "float32", "float64", "int64"), rank=self.pick([1, 2, 2]), readonly=False)
    self.param("w", f"torch.ones({x.shape[1] if len(x.shape) == 2 else 1}, dtype=x.dtype)")
    floaty = x.dtype != "int64"
    pool = ["row *= 2", "row.add_(1)", "row.clamp_(-1, 1)", "row += row", "row.mul_(3).sub_(1)", "row += w",
            "row.copy_(row * 2)", "row.neg_()"]
    if floaty:
        pool += ["row -= row.mean()", "row /= row.abs().max() + 1", "row.mul_(0.5).add_(row.min())"]
    if len(x.shape) == 2:
        pool.append("row[0] = 5")
    body = self.rng.sample(pool, self.rng.randint(1, 3))
    if self.chance(0.1):
        body.append("row = row * 2")            # (rebound: the loop as written)
    src = "x" if not self.chance(0.15) else "list(x.unbind(0))"
    self.emit(1, f"for row in {src}:" if src == "x" else f"rows = {src}")
    if src != "x":
        self.emit(1, "for row in rows:")
    for st in body:
        self.emit(2, st)
    self.emit(1, self.pick(["return x", "return x", "return x.sum()", "return row"]))


def lost_reversed_build(self):
    """Walks backwards (`reversed(x)`, `x.flip(0)`, `torch.flip(x, [0])`, `x[::-1]`, zips of
    them, `reversed(list(zip(..)))`, `enumerate(reversed(x))`, a reversed range) building a list
    front-first (`insert(0, v)`, a deque's `appendleft`) or forwards, a discounted return as the
    value: over a tensor (rows or elements, of several dtypes, requiring grad now and then), a
    list of Python floats or ints, a list of tensors, a second sequence of another length now
    and then. Pitfalls: `insert` at other positions, appends beside inserts, the list read in
    the loop or given as an argument, the element kept as it is, updated in place or read after
    the loop, `break` / `continue` after a count, an error raised part-way and caught in the
    function, `reversed` shadowed, the walked sequence read in the loop; empty inputs."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64"), rank=self.pick([1, 1, 2]), grad_p=0.3,
                  readonly=False)
    d = self.tensor("d", ((self.n if self.chance(0.8) else self.rng.randint(0, 8)),), "float32", grad_ok=False,
                    low=0, high=2)
    self.param("gamma", self.pick(["0.9", "0.99", "1", "0.5"]))
    seq = self.pick(["x"] * 6 + ["x.tolist()", "list(x.unbind(0))", "tuple(x.tolist())"])
    self.emit(1, f"seq = {seq}")
    ds = self.pick(["d", "d", "d.tolist()"])
    self.emit(1, f"ds = {ds}")
    if self.chance(0.08):
        self.helpers["reversed"] = "def reversed(s):\n    return list(s)\n"     # (not the builtin)
    walk = self.pick(["reversed(seq)", "reversed(seq)", "seq.flip(0)", "torch.flip(seq, [0])", "torch.flip(seq, (0,))",
                      "seq[::-1]", "zip", "zip_list", "enumerate", "range"])
    kind = self.pick(["list", "list", "list", "deque", "list()", "arg"])
    if kind == "deque":
        self.helpers["deque"] = "from collections import deque\n"
        self.emit(1, "out = deque()")
    elif kind == "arg":
        self.param("out0", "[torch.tensor(7.0)]")
        self.emit(1, "out = out0")
    else:
        self.emit(1, f"out = {'[]' if kind == 'list' else 'list()'}")
    self.emit(1, f"R = {self.pick(['0', '0', '0.0', 'torch.zeros(())'])}")
    self.emit(1, "cnt = 0")
    lim = self.rng.randint(0, 12)
    caught = self.chance(0.06)
    depth = 1
    if caught:
        self.emit(1, "try:")
        depth = 2
    mask = False
    if walk == "zip":
        self.emit(depth, f"for r, m in zip({self.pick(['reversed(seq)', 'seq[::-1]', 'seq.flip(0)'])}, reversed(ds)):")
        mask = True
    elif walk == "zip_list":
        self.emit(depth, "for r, m in reversed(list(zip(seq, ds))):")
        mask = True
    elif walk == "enumerate":
        self.emit(depth, "for j, r in enumerate(reversed(seq)):")
    elif walk == "range":
        self.emit(depth, "for t in reversed(range(len(seq))):")
        self.emit(depth + 1, "r = seq[t]")
    else:
        self.emit(depth, f"for r in {walk}:")
    b = depth + 1
    step = self.pick(["R = r + gamma * R", "R = gamma * R + r", "R = r - 0.5 * R", "R = r * 2 + gamma * R"])
    if mask:
        step = self.pick(["R = r + gamma * R * (1 - m)", "R = r + gamma * R * m", step])
    if walk == "enumerate":
        step = self.pick([step, "R = r + gamma * R + j"])
    pit = self.pick(["none"] * 18 + ["break", "continue", "read_list", "keep", "in_place", "mention", "raise",
                                      "after", "max"])
    if pit == "break":
        self.emit(b, "cnt += 1")
        self.emit(b, f"if cnt > {lim}:")
        self.emit(b + 1, "break")
    elif pit == "continue":
        self.emit(b, "cnt += 1")
        self.emit(b, "if cnt % 3 == 0:")
        self.emit(b + 1, "continue")
    elif pit == "raise":
        self.emit(b, "cnt += 1")
        self.emit(b, f"if cnt > {lim}:")
        self.emit(b + 1, "raise ValueError('stop')")
    elif pit == "in_place" and seq in ("x", "list(x.unbind(0))"):
        self.emit(b, "r.mul_(2)")
    elif pit == "mention":
        self.emit(b, "R = R + len(seq) * 0")
    if pit == "read_list":
        step += " + len(out) * 0.01"
    self.emit(b, step)
    if pit == "max":
        self.emit(b, "R = max(R, r) if not isinstance(r, torch.Tensor) or r.dim() == 0 else R")
    value = "r" if pit == "keep" else "R"
    front = ["appendleft", "insert0"] if kind == "deque" else ["insert0"]
    how = self.pick(front * 12 + ["insert1", "insert_end", "append", "mixed"])
    if how == "appendleft":
        self.emit(b, f"out.appendleft({value})")
    elif how == "insert0":
        self.emit(b, f"out.insert(0, {value})")
    elif how == "insert1":
        self.emit(b, f"out.insert(1, {value})")
    elif how == "insert_end":
        self.emit(b, f"out.insert(len(out), {value})")
    elif how == "append":
        self.emit(b, f"out.append({value})")
    else:
        self.emit(b, f"out.insert(0, {value})")
        self.emit(b, f"out.append({value} * 2)")
    if caught:
        self.emit(1, "except ValueError:")
        self.emit(2, "return list(out), R, cnt")
    if kind == "deque":
        ret = self.pick(["list(out)", "torch.stack(list(out))", "torch.tensor(out)", "type(out).__name__, list(out)"])
    else:
        ret = self.pick(["out", "torch.stack(out)", "torch.stack(out)", "torch.tensor(out)"])
    tail = self.pick(["", "", ", R", ", cnt"])
    if pit == "after":
        tail = ", r"
    self.emit(1, f"return {ret}{tail}")


def lost_unbind_walk(self):
    """Walks of a tensor's slices (`x.unbind(d)`, `torch.unbind(x, d)`, `x.split(1, d)`,
    `torch.split(x, 1, dim=d)`, negative and out-of-range dimensions) in loops, zips with a
    second walk of another length, enumerates with a start and comprehensions: appends, sums and
    products of the element. Pitfalls: the element changed in place, kept, compared by `is` or
    read after the loop, `split(2, ..)` / `chunk`, a list instead of a tensor."""
    x = self.main(dtypes=("float32", "float32", "float64", "int64"), rank=self.pick([1, 2, 2]), grad_p=0.3,
                  readonly=False)
    rank = len(x.shape)
    self.tensor("y", (self.rng.randint(0, 8), 3), "float32")
    self.emit(1, f"seq = {self.pick(['x'] * 8 + ['list(x.unbind(0))', 'x.tolist()'])}")
    d = self.pick(list(range(-rank, rank)) * 6 + [rank, -rank - 1])
    unbind = self.chance(0.6)
    walk = self.pick([f"seq.unbind({d})", f"torch.unbind(seq, {d})", f"seq.unbind(dim={d})"] if unbind else
                     [f"seq.split(1, {d})", f"torch.split(seq, 1, dim={d})", f"seq.split(1, dim={d})"] * 4
                     + [f"seq.split(2, {d})", f"seq.chunk(2, {d})"])
    body = self.pick(["e * 2", "e.abs() + 1", "torch.tanh(e * 1.0)", "e.sum()", "e.clamp(min=0) - e", "e * e"])
    form = self.pick(["append", "sum", "enumerate", "zip", "comprehension"])
    pit = self.pick(["none"] * 14 + ["in_place", "keep", "is", "after"])
    if form == "comprehension":
        self.emit(1, f"out = [{'e' if pit == 'keep' else body} for e in {walk}]")
    else:
        self.emit(1, "out = []")
        self.emit(1, "total = 0.0")
        head = {"zip": f"e, g in zip({walk}, y.unbind(0))",
                "enumerate": f"t, e in enumerate({walk}, {self.pick([0, 0, 2, -1])})"}
        self.emit(1, f"for {head.get(form, 'e in ' + walk)}:")
        if pit == "in_place":
            self.emit(2, "e.mul_(2)")
        elif pit == "is":
            self.emit(2, "if e is seq:")
            self.emit(3, "total = total + 1")
        value = "e" if pit == "keep" else body + {"zip": " * g.sum()", "enumerate": " * t"}.get(form, "")
        self.emit(2, f"total = total + ({value}).sum()" if form == "sum" else f"out.append({value})")
    ret = "total" if form == "sum" else self.pick(["torch.stack(out)", "torch.stack(out)", "out", "len(out)"])
    self.emit(1, f"return {ret}" + (", e" if pit == "after" and form != "comprehension" else ""))


def lost_stored_rec(self):
    """A running value stored into an output and read back (`out[t] = a * out[t - 1] + x[t]`,
    `adv[t] = d + g * adv[t + 1]` over a reversed range, `y[t + 1] = .. y[t]`, by column
    `out[:, t]`): outputs of other dtypes than the values (an int or float64 output), a start at
    0 (`out[-1]` wraps), outputs too short or empty, the output being the input, a factor that is
    a tensor (requiring grad now and then), a second such output (its own, the same memory, a
    view of it, or one that reads the first's row), and the forms the loop keeps: other reads of
    the output, a read in a condition, a conditional or second store, `break`, `continue`, a step
    of 2, `.item()`, a name `out_prev` of the user's."""
    self.no_grad = self.chance(0.5)
    x = self.main(dtypes=("float32", "float32", "float64", "int64"), rank=self.pick([1, 2, 2]), readonly=False,
                  special_p=0.05)
    xn = x.name
    col = len(x.shape) == 2 and self.chance(0.2)
    floaty = x.dtype != "int64"
    fac = self.pick(["0.5", "0.9", "a", "a", "w"])
    if fac == "a":
        self.param("a", self.pick(["0.3", "0.8", "-0.5", "1.5"]))
    elif fac == "w":
        g = floaty and not self.no_grad and self.chance(0.4)
        self.param("w", f"torch.tensor({self.pick(['0.7', '-0.4'])}{', requires_grad=True' if g else ''})")
    if self.chance(0.15):
        self.emit(1, "out_prev = 1.0")       # (the user's name: the carry takes another)
    alloc = self.pick(["zeros", "zeros", "empty", "clone", "dtype", "longer", "short", "alias"])
    shape = f"{xn}.shape"
    if alloc == "zeros":
        self.emit(1, f"out = torch.zeros_like({xn})")
    elif alloc == "empty":
        self.emit(1, f"out = torch.full_like({xn}, 2)")     # (not empty_like: rows the loop never stores are returned)
        self.emit(1, f"out[{':, ' if col else ''}0] = {xn}[{':, ' if col else ''}0]" if self.n else "pass")
    elif alloc == "clone":
        self.emit(1, f"out = {xn}.clone()")
    elif alloc == "dtype":
        self.emit(1, f"out = torch.zeros({shape}, dtype=torch.{self.pick(['float32', 'float64', 'int64'])})")
    elif alloc == "longer":
        self.emit(1, f"out = torch.zeros({xn}.shape[0] + 1, *{xn}.shape[1:])" if not col else
                  f"out = torch.zeros({xn}.shape[0], {xn}.shape[1] + 1)")
    elif alloc == "short":
        self.emit(1, f"out = torch.zeros(max({xn}.shape[0] - 2, 0), *{xn}.shape[1:])" if not col else
                  f"out = torch.zeros({xn}.shape[0], max({xn}.shape[1] - 2, 0))")
    else:
        self.emit(1, f"out = {xn}")
    N = f"{xn}.shape[1]" if col else self.count(x)
    direction = self.pick(["from1", "from1", "from0", "rev", "negstep", "ahead"])
    k = {"from1": 0, "from0": 0, "rev": 0, "negstep": 0, "ahead": 1}[direction]
    back = -1 if direction in ("from1", "from0", "ahead") else 1
    rng = {"from1": f"range(1, {N})", "from0": f"range({N})", "rev": f"reversed(range({N} - 1))",
           "negstep": f"range({N} - 2, -1, -1)", "ahead": f"range({N} - 1)"}[direction]
    pit = self.pick([None] * 8 + ["two_back", "own_row", "whole", "cond_read", "cond_store", "break", "continue",
                                  "step2", "second_store", "item"])
    if pit == "step2":
        rng = f"range(2, {N}, 2)"
    if pit == "item" and (len(x.shape) != 1 or col):
        pit = None

    def at(off):
        i = "t" if off == 0 else f"t + {off}" if off > 0 else f"t - {-off}"
        return f"out[:, {i}]" if col else f"out[{i}]"
    prev = at(k + back if pit != "step2" else -2)
    xi = f"{xn}[:, t]" if col else f"{xn}[t]"
    value = self.pick([f"{fac} * {prev} + {xi}", f"{xi} + {fac} * {prev}", f"{prev} + {xi}",
                       f"(1 - {fac}) * {prev} + {fac} * {xi}", "delta + {fac} * {prev}".format(fac=fac, prev=prev)]
                      + ([f"{prev} * {xi}"] if floaty else []))
    if pit == "item":
        value = f"{fac} * {prev}.item() + {xi}.item()"
    if pit == "two_back":
        value += f" + 0.25 * {at(k + 2 * back)}"
    elif pit == "own_row":
        value += f" + 0.5 * {at(k)}"
    elif pit == "whole":
        value += " + 0.01 * out.sum()"
    self.emit(1, f"for t in {rng}:")
    if "delta" in value:
        self.emit(2, f"delta = {xi} * 2 - 1")
    if pit == "continue":
        self.emit(2, "if t == 2:")
        self.emit(3, "continue")
    if pit in ("cond_read", "cond_store"):
        self.emit(2, f"if {prev + '.sum() > 0' if pit == 'cond_read' else 't % 2'}:")
        self.emit(3, f"{at(k)} = {value}")
    else:
        self.emit(2, f"{at(k)} = {value}")
    if pit == "second_store":
        self.emit(2, f"{at(k + back)} = {xi} * 0")
    if pit == "break":
        self.emit(2, "if t > 3:")
        self.emit(3, "break")
    if pit is None and self.chance(0.3):
        # a second stored recurrence (its own output, sometimes the same memory, a view of it,
        # or one that reads the first's row)
        other = self.pick(["fresh", "fresh", "same", "view", "reads"])
        decl = {"fresh": "torch.zeros_like(out)", "same": "out", "view": "out[:]", "reads": "torch.zeros_like(out)"}
        self.lines.insert(next(j for j, ln in enumerate(self.lines) if ln.strip().startswith("for t in ")),
                          "    out2 = " + decl[other])
        at2 = at(k + back).replace("out[", "out2[")
        extra = f" + {at(k)}" if other == "reads" else ""
        self.emit(2, f"{at(k).replace('out[', 'out2[')} = 0.5 * {at2} + {xi} * 2{extra}")
        self.emit(1, "return out, out2")
        return
    self.emit(1, self.pick(["return out", "return out", "return out, t", "return out.sum()"]
                           + (["return out, out_prev"] if "out_prev = 1.0" in self.lines[-1] or any(
                               "out_prev = 1.0" in ln for ln in self.lines) else [])))


def lost_number_branch(self):
    """`s = <Python number of the index> if <condition on the index> else <number>` (a warm-up
    factor), then used with the row: int and float sides, mixed kinds, a side that divides by
    zero on a kept iteration, the number read after the loop."""
    x = self.main(dtypes=("float32", "float64", "int64", "int32", "float16"), rank=self.pick([1, 2]))
    self.param("k", self.pick(["3", "7", "0", "-2", "2.5"]))
    self.emit(1, f"out = torch.zeros_like({x.name}, dtype=torch.float32)" if self.chance(0.3)
              else f"out = torch.zeros_like({x.name})")
    self.emit(1, f"for i in range({x.name}.shape[0]):")
    a = self.pick(["(i + 1) / k", "i * 2", "0.5 ** (i // 3)", "1.0 / (i - 4)", "i % 3", "i - k", "k"])
    b = self.pick(["1.0", "1", "0.0", "k", "2 * k", "-1.5", "i"])
    cond = self.pick(["i < k", "i % 2", "i >= 3", "i == k", "k > i > 1"])
    self.emit(2, f"s = {a} if {cond} else {b}")
    self.emit(2, self.pick([f"out[i] = {x.name}[i] * s", f"out[i] = {x.name}[i] + s - s * s",
                            f"out[i] = s", f"out[i] = torch.clamp({x.name}[i], max=s)"]))
    self.emit(1, self.pick(["return out", "return out", "return out, s"]))


def lost_sunk_appends(self):
    """Every way through an `if` / `elif` / `else` ends in one append to the same list
    (analysis.hoist.sunk_appends): Python numbers of the row (`.item()`, float(), int()) or
    tensors, int and float sides, a nested `if`, a `continue` or a statement before an append,
    the list read after the loop, a second list appended beside the branch."""
    x = self.main(dtypes=("float32", "float64", "int64", "int32"), rank=self.pick([1, 2]))
    self.param("k", self.pick(["0.5", "1", "-1", "2.0", "0"]))
    numbers = self.chance(0.7)
    self.emit(1, "res = []")
    side = self.chance(0.25)
    if side:
        self.emit(1, "other = []")
    walk = self.pick(["for r in X:", "for i in range(X.shape[0]):", "for i, r in enumerate(X):"]).replace("X", x.name)
    self.emit(1, walk)
    if walk.startswith("for i in range"):
        self.emit(2, f"r = {x.name}[i]")
    self.emit(2, self.pick(["v = r.sum().item()", "v = float(r.max())", "v = r.float().mean().item()",
                            "v = int(r.min())"]))
    if numbers:
        vals = ["1.0", "-1.0", "0", "v * k", "v", "int(v)", "v / 2", "v - k", "k", "2", "True", "abs(v)"]
    else:
        vals = ["r * 2", "r - v", "torch.zeros_like(r)", "r.float() * k", "r.abs()", "r + 1"]
    conds = ["v > k", "v < -k", "abs(v) < k", "v == 0", "v >= 1", "v % 2 == 0"]

    def ending(depth):
        if self.chance(0.15):
            self.emit(depth, f"if {self.pick(conds)}:")
            self.emit(depth + 1, "continue")
        if self.chance(0.15):
            self.emit(depth, "w = v * 3")
            self.emit(depth, f"res.append({self.pick(['w', 'w + 1']) if numbers else 'r * w'})")
        else:
            self.emit(depth, f"res.append({self.pick(vals)})")
    self.emit(2, f"if {self.pick(conds)}:")
    ending(3)
    for _ in range(self.pick([0, 1, 1, 2])):
        self.emit(2, f"elif {self.pick(conds)}:")
        ending(3)
    self.emit(2, "else:")
    if self.chance(0.25):
        self.emit(3, f"if {self.pick(conds)}:")
        ending(4)
        self.emit(3, "else:")
        ending(4)
    else:
        ending(3)
    if side:
        self.emit(2, "other.append(v)")
    ret = ["res", "len(res)"] + (["torch.tensor(res)"] if numbers else ["torch.stack(res) if res else res"])
    self.emit(1, f"return {self.pick(ret)}" + (", other" if side else ""))


def lost_branch_continue(self):
    """`continue` at several depths of nested branches, with outputs before and after each
    branch (analysis.loops._normalize_continue): appends, stores, running totals and counts,
    a value read after the loop; conditions on the row's data or its index."""
    x = self.main(dtypes=("float32", "float64", "int64"), rank=self.pick([1, 2]))
    self.param("k", self.pick(["0.5", "1", "-1", "0"]))
    xi = f"{x.name}[i]"
    outs = self.pick([["res"], ["res", "tot"], ["out"], ["out", "cnt"], ["res", "cnt", "out"]])
    if "res" in outs:
        self.emit(1, "res = []")
    if "tot" in outs:
        self.emit(1, "tot = 0.0")
    if "cnt" in outs:
        self.emit(1, "cnt = 0")
    if "out" in outs:
        self.emit(1, f"out = torch.zeros_like({x.name}, dtype=torch.float64)")
    self.emit(1, f"for i in range({x.name}.shape[0]):")
    self.emit(2, f"s = {xi}.sum()" + (".item()" if self.chance(0.4) else ""))
    conds = ["s > k", "s < -k", "s == 0", "i % 3 == 0", "i > 2", "s * s > 4", "abs(s) < k"]

    def update(depth):
        kind = self.pick(outs)
        if kind == "res":
            self.emit(depth, f"res.append({self.pick([xi + ' * 2', 's', xi, xi + ' - s'])})")
        elif kind == "tot":
            self.emit(depth, f"tot = tot + {self.pick(['s', 's * 2', '1.0'])}")
        elif kind == "cnt":
            self.emit(depth, "cnt += 1")
        else:
            self.emit(depth, f"out[i] = {self.pick([xi + ' * 2', 's', xi + ' + 1'])}")

    def block(depth, level):
        if self.chance(0.3):
            update(depth)
        self.emit(depth, f"if {self.pick(conds)}:")
        if level < 2 and self.chance(0.5):
            block(depth + 1, level + 1)
        else:
            if self.chance(0.4):
                update(depth + 1)
            self.emit(depth + 1, "continue")
        if self.chance(0.4):
            self.emit(depth, "else:")
            if self.chance(0.5):
                update(depth + 1)
            else:
                self.emit(depth + 1, "s = s * 2")
        if self.chance(0.6):
            update(depth)
    block(2, 0)
    update(2)
    self.emit(1, f"return {', '.join(outs)}" + (", s" if self.chance(0.2) else ""))


def lost_branch_mix(self):
    """An `if` / `elif` / `else` whose sides update different outputs, some on every side, some
    on one (stores, appends, running totals and counts, a running max), with names assigned on
    the sides and read after the branch, and statements before and after it; conditions on the
    row's data, its `.item()` or the index; values from outside the loop on some sides."""
    x = self.main(dtypes=("float32", "float64", "int64"), rank=self.pick([1, 2]))
    self.param("k", self.pick(["0.5", "1", "-1", "2.0"]))
    self.param("w", self.pick(["3.0", "torch.tensor(2.5)", "-1"]))
    xi = f"{x.name}[i]"
    floaty = x.dtype != "int64"
    self.emit(1, "res = []")
    self.emit(1, "tot = 0.0")
    self.emit(1, "cnt = 0")
    self.emit(1, f"out = torch.zeros({x.name}.shape[0], dtype=torch.float64)")
    self.emit(1, "best = -1e9")
    self.emit(1, f"for i in range({x.name}.shape[0]):")
    self.emit(2, f"s = {xi}.sum()" + (".item()" if self.chance(0.5) else ""))
    conds = ["s > k", "s < -k", "s == 0", "i % 3 == 0", "i > 2", "abs(s) < k", "s >= w"]
    vals = ["s", "s * 2", "w", "k", "s - k", "1", "0.5", "s * w"]

    def update(depth):
        kind = self.pick(["res", "tot", "cnt", "out", "best", "name", "name"])
        v = self.pick(vals)
        if kind == "res":
            self.emit(depth, f"res.append({v})")
        elif kind == "tot":
            self.emit(depth, self.pick([f"tot = tot + {v}", f"tot += {v}", f"tot = tot - {v}"]))
        elif kind == "cnt":
            self.emit(depth, self.pick(["cnt += 1", "cnt -= 1", "cnt = cnt + 2"]))
        elif kind == "out":
            self.emit(depth, self.pick([f"out[i] = {v}", f"out[i] += {v}"]))
        elif kind == "best":
            self.emit(depth, f"best = max(best, {v})")
        else:
            self.emit(depth, f"t = {v}")
    self.emit(2, "t = 0")
    if self.chance(0.3):
        update(2)
    self.emit(2, f"if {self.pick(conds)}:")
    for _ in range(self.pick([1, 1, 2, 3])):
        update(3)
    for _ in range(self.pick([0, 1, 2])):
        self.emit(2, f"elif {self.pick(conds)}:")
        for _ in range(self.pick([1, 2])):
            update(3)
    if self.chance(0.7):
        self.emit(2, "else:")
        for _ in range(self.pick([1, 2])):
            update(3)
    if self.chance(0.5):
        self.emit(2, self.pick(["res.append(t)", "tot = tot + t", "out[i] = t"]))
    if self.chance(0.3):
        update(2)
    self.emit(1, f"return {self.pick(['res, tot, cnt', 'out, best', 'res, out', 'tot, cnt, best', 'res, t'])}")


def lost_guarded_ahead(self):
    """Reads of rows ahead of (or behind) the index under conditions of the index (runtime's
    _unread, _padded_rows): `x[i + 1] if i + 1 < n else ..`, `if i + 2 < n:` / `elif`, an early
    `continue`, `and` with a data test, enumerate, reversed and stepped ranges, a second tensor
    of another length; some conditions let an iteration read past the end (the loop raises),
    some read a name the body binds, a float bound, or the row's data (the guard refuses)."""
    x = self.main(dtypes=("float32", "float64", "int64"), rank=self.pick([1, 2]))
    other = self.chance(0.4)
    if other:
        self.like(x, "y", rows=max(self.n + self.pick([-2, -1, 0, 0, 1]), 0))
    z = "y" if other else x.name
    c = self.pick([1, 1, 1, 2, -1, -2])
    n = self.pick(["n", f"{x.name}.shape[0]", f"len({x.name})", f"{x.name}.size(0)"])
    if n == "n":
        self.emit(1, f"n = {x.name}.shape[0]")
    m = "len(y)" if other and self.chance(0.5) else n
    k = abs(c)
    lim = self.pick([f"i + {c} < {m}", f"i < {m} - {c}", f"i + {c} <= {m} - 1", f"i != {m} - {k}",
                     f"{m} - i > {c}", f"i + {c} <= {m}", f"i + {c} < {m} + 1", f"i + {c} < lim",
                     f"i + {c} < {m} and s > 0", f"s > 0 and i + {c} < {m}"]) if c > 0 else \
        self.pick([f"i >= {k}", f"i - {k} >= 0", f"i > {k - 1}", f"i >= {k - 1}", f"i != 0", f"i >= {k} or s > 0"])
    if "lim" in lim:
        self.param("lim", self.pick(["3.5", "1000.0", str(self.n)]))
    read = f"{z}[i {'+' if c > 0 else '-'} {k}]"
    rng = self.pick(["range", "range", "rev", "step", "enum"])
    head = {"range": f"for i in range({n}):", "rev": f"for i in reversed(range({n})):",
            "step": f"for i in range(0, {n}, 2):", "enum": f"for i, r in enumerate({x.name}):"}[rng]
    row = "r" if rng == "enum" else f"{x.name}[i]"
    shape = self.pick(["ifexp", "if", "elif", "continue", "append", "total"])
    self.emit(1, "out = []")
    self.emit(1, "tot = 0")
    self.emit(1, head)
    self.emit(2, f"s = {row}.sum()")
    if self.chance(0.15):
        self.emit(2, "lim = 2")       # (a name the body binds: not the guard's to evaluate)
    if shape == "ifexp":
        self.emit(2, f"v = {read} * 2 if {lim} else {row}")
        self.emit(2, "out.append(v + s)")
    elif shape == "if":
        self.emit(2, f"if {lim}:")
        self.emit(3, f"v = {read} - {row}")
        self.emit(2, "else:")
        self.emit(3, f"v = {row} * 0")
        self.emit(2, "out.append(v)")
    elif shape == "elif":
        self.emit(2, f"if {lim}:")
        self.emit(3, f"out.append({read} + {row})")
        self.emit(2, f"elif s > 1:")
        self.emit(3, f"out.append({row} * 3)")
        self.emit(2, "else:")
        self.emit(3, f"out.append({row})")
    elif shape == "continue":
        self.emit(2, f"if not ({lim}):")
        self.emit(3, "continue")
        self.emit(2, f"out.append({read} * s)")
    elif shape == "append":
        self.emit(2, f"if {lim}:")
        self.emit(3, f"out.append({read})")
    else:
        self.emit(2, f"if {lim}:")
        self.emit(3, f"tot = tot + {read}.sum()")
    self.emit(1, "return (torch.stack(out) if out else None), tot")


def lost_chained_scan(self):
    """Recurrences written as RL code writes them (CleanRL's GAE): `adv[t] = last = delta +
    c * last` (a chained assignment: analysis.loops._split_chains), the factor and terms set on
    both sides of a branch on the index (`if t == T - 1:` the bootstrap values, else the next
    row's) or on the data, reversed or forward ranges, a reset by a done flag, other chained
    targets (`a[t] = b[t] = v`, `x = y = v`, a subscript of a chained name)."""
    x = self.main(dtypes=("float32", "float64"), rank=self.pick([1, 2]))
    self.like(x, "v", dtype=x.dtype)
    self.like(x, "d", dtype=self.pick([x.dtype, "int64", "bool"]), grad_ok=False)
    self.param("nv", self.pick(["0.5", f"torch.randn({x.shape[1:]!r}, generator=g, dtype=torch.{x.dtype})"]))
    self.param("gamma", self.pick(["0.99", "0.9", "1.0", "0.5"]))
    self.param("lam", self.pick(["0.95", "1.0", "0.8"]))
    n = self.pick([f"{x.name}.shape[0]", f"len({x.name})"])
    self.emit(1, f"T = {n}")
    self.emit(1, f"adv = torch.zeros_like({x.name})")
    self.emit(1, "other = torch.zeros_like(adv)")
    self.emit(1, "last = 0")
    rng = self.pick(["reversed(range(T))", "range(T - 1, -1, -1)", "range(T)"])
    self.emit(1, f"for t in {rng}:")
    cond = self.pick(["t == T - 1", "t + 1 >= T", "t >= T - 1", f"{x.name}[t].sum() > 0"])
    if self.chance(0.8):
        self.emit(2, f"if {cond}:")
        self.emit(3, self.pick(["nnt = 1.0", "nnt = 1.0 - d[t]", "nnt = 0.5"]))
        self.emit(3, self.pick(["nval = nv", "nval = v[t] * 0", "nval = v[t]"]))
        self.emit(2, "else:")
        self.emit(3, self.pick([f"nnt = 1.0 - d[t + 1]", "nnt = 1.0 - d[t]", "nnt = 0.5"]))
        self.emit(3, self.pick(["nval = v[t + 1]", "nval = v[t]"]))
    else:
        self.emit(2, "nnt = 1.0 - d[t]")
        self.emit(2, "nval = v[t + 1] if t + 1 < T else nv")
    self.emit(2, f"delta = {x.name}[t] + gamma * nval * nnt - v[t]")
    chain = self.pick(["adv[t] = last = delta + gamma * lam * nnt * last",
                       "last = adv[t] = delta + gamma * lam * nnt * last",
                       "adv[t] = other[t] = delta * 2",
                       "adv[t] = last = delta + gamma * last",
                       "a = b = delta * nnt\n        adv[t] = a + b"])
    for line in chain.split("\n        "):
        self.emit(2, line)
    self.emit(1, self.pick(["return adv, adv + v", "return adv, other", "return adv, last"]))


def lost_interleaved(self):
    """Stores into one tensor at several offsets (runtime._rows_apart, _one_output): `out[i] = a;
    out[i + 1] = b` over stepped ranges (steps that keep the rows apart, and ones that let them
    meet), loop nests storing `pe[p, j]` and `pe[p, j + 1]`, a second name for the output (`b =
    out`, or the same tensor passed twice), a read of the target, running totals that are the
    output itself."""
    x = self.main(dtypes=("float32", "float64", "int64"), rank=1)
    k = self.pick([2, 2, 3, 1])
    offs = self.pick([[0, 1], [0, 1, 2], [1, 0], [0, 2], [0, -1]])
    alias = self.pick(["", "", "name", "param"])
    if alias == "param":
        self.params.append("o2")
        self.inputs.append(f"o2 = None")
    nest = self.chance(0.3)
    self.emit(1, f"out = torch.zeros({x.name}.shape[0] * {k} + 3, dtype=torch.float64)")
    other = "out"
    if alias == "name":
        self.emit(1, "other = out")
        other = "other"
    elif alias == "param":
        self.emit(1, "other = out if o2 is None else o2")
        other = "other"
    vals = [self.pick([f"i * {c} + 0.25", f"{x.name}[0] * i * {c}", f"float(i) ** 0.5 * {c}"]) for c in (1, 2, -3)]
    if nest:
        self.emit(1, "grid = torch.zeros(4, out.shape[0], dtype=torch.float64)")
        self.emit(1, "for p in range(4):")
        self.emit(2, f"for i in range(0, {x.name}.shape[0] * {k}, {k}):")
        for j, o in enumerate(offs):
            idx = f"i + {o}" if o > 0 else f"i - {-o}" if o < 0 else "i"
            self.emit(3, f"grid[p, {idx}] = {vals[j % 3]} + p")
        self.emit(1, "return grid")
        return
    start = 1 if min(offs) < 0 else 0
    self.emit(1, f"for i in range({start}, {x.name}.shape[0] * {k}, {k}):")
    for j, o in enumerate(offs):
        idx = f"i + {o}" if o > 0 else f"i - {-o}" if o < 0 else "i"
        target = other if j == 1 else "out"
        if self.chance(0.15):
            self.emit(2, f"{target}[{idx}] = out[i] + 1")
        else:
            self.emit(2, f"{target}[{idx}] = {vals[j % 3]}")
    if self.chance(0.2):
        self.emit(2, "out += 1")
    self.emit(1, "return out")


def lost_stop34(self):
    """This stop's forms, on inputs that change between calls (variant 1): writes into a tensor
    the iteration made (index dtypes and ranges, clones edited, in-place methods, a part kept
    before a write, a value kept twice), inner loops beside other statements (zero trips, a
    carried value, an in-place running value), a row updated after reads of its own row under a
    condition, and a linear recurrence whose state grows between calls."""
    self.variants = True
    n, d = max(self.n, 2), max(self.d, 2)
    form = self.pick(["fresh", "fresh", "clone", "methods", "kept", "inner", "inner", "clip", "state"])
    dt = self.pick(["float32", "float32", "float64"])
    if form == "fresh":
        c = d + 1
        kdt = self.pick(["int64", "int64", "int32", "uint8", "int16"])
        lo = self.pick([0, 0, -c])
        hi = self.pick([c, c, c + 1])
        self.param("x", f"_tensor(g, ({n},), torch.{dt})")
        self.param("k", f"torch.randint({lo}, {c} if variant == 0 else {hi}, ({n},), generator=g).to(torch.{kdt})")
        make = self.pick([f"torch.zeros({c}, dtype=torch.{dt})", f"torch.full(({c},), 0.5, dtype=torch.{dt})",
                          f"torch.zeros({c}, dtype=torch.long)", f"torch.zeros(2, {c}, dtype=torch.{dt})[1]"])
        op = self.pick(["=", "=", "+="])
        self.emit(1, "out = []")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"t = {make}")
        if self.chance(0.3):
            self.emit(2, "s = t.sum() * 2")
        self.emit(2, f"t[k[i]] {op} x[i]")
        self.emit(2, self.pick(["out.append(t)", "out.append(t * 2)", "out.append(t.sum())"]))
        self.emit(1, "return out")
        return
    if form == "clone":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        self.param("k", f"torch.randint(0, {d}, ({n},), generator=g)")
        self.emit(1, f"out = torch.empty({n}, {d}, dtype=torch.{dt})")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, self.pick(["r = x[i].clone()", "r = x[i] * 1", "r = x[i].detach().clone()", "r = x[i]"]))
        self.emit(2, self.pick(["r[k[i]] = 0", "r[k[i]] += 1", "r[0] = r[k[i]] * 2"]))
        self.emit(2, "out[i] = r * 2")
        self.emit(1, "return out, x")
        return
    if form == "methods":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        self.emit(1, "out = []")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"m = torch.ones({d}, {d}, dtype=torch.{dt})")
        self.emit(2, self.pick(["m.fill_diagonal_(0)", "m.triu_(1)", "m.mul_(x[i, 0])", "m.clamp_(max=0.5)"]))
        self.emit(2, "t = x[i] * 2")
        self.emit(2, self.pick(["t += 1", "t.clamp_(min=0)", "t *= x[i, 0]"]))
        self.emit(2, "out.append(m @ t)")
        self.emit(1, "return torch.stack(out)")
        return
    if form == "kept":
        self.param("x", f"_tensor(g, ({n},), torch.{dt})")
        self.param("k", f"torch.randint(0, 4, ({n},), generator=g)")
        self.emit(1, "a, b = [], []")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"t = torch.zeros(4, dtype=torch.{dt})")
        what = self.pick(["early", "twice", "alias"])
        if what == "early":
            self.emit(2, "v = t[k[i]]")
            self.emit(2, "t[k[i]] = x[i]")
            self.emit(2, "a.append(v * 1)")
        elif what == "twice":
            self.emit(2, "t[k[i]] = x[i]")
            self.emit(2, "a.append(t)")
            self.emit(2, "b.append(t[:2])")
        else:
            self.emit(2, "u = t")
            self.emit(2, "w = u[k[i]]")
            self.emit(2, "t[k[i]] = x[i]")
            self.emit(2, "a.append(w + 0)")
        self.emit(1, "if a:")
        self.emit(2, "a[0].add_(5)")
        self.emit(1, "return a, b")
        return
    if form == "inner":
        m = self.pick([0, 1, 3])
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        self.param("m", f"{m} if variant == 0 else {self.pick([0, 2, m])}")
        what = self.pick(["sum", "aug", "chain", "carried", "branch"])
        self.emit(1, f"out = torch.zeros({n}, dtype=torch.{dt})")
        self.emit(1, "c = 1.0")
        self.emit(1, "for i in range(x.shape[0]):")
        if what == "aug":
            self.emit(2, f"s = torch.zeros((), dtype=torch.{dt})")
        else:
            self.emit(2, "s = 0.0")
        self.emit(2, f"for j in range(min(m, {d})):")
        if what == "sum":
            self.emit(3, "s = s + x[i, j] * 0.5 ** j")
        elif what == "aug":
            self.emit(3, "s += x[i, j] * (j + 1)")
        elif what == "chain":
            self.emit(3, "s = torch.tanh(s + x[i, j])")
        elif what == "carried":
            self.emit(3, "s = s + x[i, j] * c")
        else:
            self.emit(3, "if j % 2 == 0:")
            self.emit(4, "s = s - x[i, j]")
        if what == "carried":
            self.emit(2, "c = s * 0.5 + 1.0")
        self.emit(2, "out[i] = s")
        self.emit(1, "return out")
        return
    if form == "clip":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}) * (1 if variant == 0 else 3)")
        self.emit(1, f"norms = torch.empty({n}, dtype=torch.{dt})")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, "nrm = x[i].norm()")
        self.emit(2, "norms[i] = nrm")
        self.emit(2, "if nrm > 1.5:")
        self.emit(3, self.pick(["x[i] *= 1.5 / (nrm + 1e-6)", "x[i] /= nrm", "x[i] -= x[i].mean()"]))
        self.emit(1, "return norms, x")
        return
    self.param("x", f"_tensor(g, ({self.pick([8, 64])} if variant == 0 else 40000,), torch.{dt}) * 0.5")
    self.param("c", f"_tensor(g, ({self.pick([3, 9])},), torch.{dt}) / 4")
    self.emit(1, "y = torch.zeros_like(x)")
    self.emit(1, "for k in range(c.shape[0]):")
    self.emit(2, "y = y * x + c[k]")
    self.emit(1, "return y")


def lost_stop37(self):
    """This stop's forms, on inputs that change between calls (variant 1): zipped elements
    updated in place (tensors, lists and tuples of numbers, unequal lengths), parts of the element
    at fixed positions updated in place (box clipping), a running best from a None start (ties,
    `.item()` values), sums and products of `row.item()` over rows of one element (several in
    variant 1: the loop raises), and `.item()` of a list of Python numbers (the loop raises)."""
    self.variants = True
    n, d = max(self.n, 2), max(self.d, 2)
    form = self.pick(["zip", "zip", "part", "part", "none", "none", "item", "numlist"])
    dt = self.pick(["float32", "float32", "float64"])
    if form == "zip":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        src = self.pick(["tensor", "list", "tuple"])
        k = self.pick([n, n, n - 1, n + 1])
        if src == "tensor":
            self.param("m", f"_tensor(g, ({k},), torch.{dt}) * (1 if variant == 0 else 3)")
        elif src == "list":
            self.param("m", f"[0.5 * j - 1 for j in range({k})] if variant == 0 else [j for j in range({k})]")
        else:
            self.param("m", f"tuple(1.5 - j for j in range({k}))")
        self.param("s", f"_tensor(g, ({n},), torch.{dt}).abs() + 0.5")
        self.emit(1, "for t, a, b in zip(x, m, s):")
        self.emit(2, self.pick(["t.sub_(a).div_(b)", "t.mul_(b).add_(a)", "t -= a", "t.clamp_(min=a)"]))
        if self.chance(0.3):
            self.emit(2, "t *= 2")
        self.emit(1, "return x")
        return
    if form == "part":
        self.param("x", f"_tensor(g, ({n}, 4), torch.{dt}) * 20 if variant == 0 else _tensor(g, ({n}, 1), torch.{dt})")
        self.param("w", self.pick(["10.0", "5", "0.0"]))
        self.emit(1, "for box in x:")
        self.emit(2, self.pick(["box[0::2].clamp_(0, w)", "box[0].clamp_(0, w)", "box[1:3].mul_(2)", "box[-1] -= w"]))
        if self.chance(0.4):
            self.emit(2, self.pick(["box[1::2].clamp_(0, w / 2)", "box[0].abs_()"]))
        self.emit(1, "return x")
        return
    if form == "none":
        self.param("x", f"torch.randint(0, 4, ({n},), generator=g).to(torch.{dt})" if self.chance(0.5)
                   else f"_tensor(g, ({n},), torch.{dt})")
        op = self.pick(["<", ">", "<=", ">="])
        value = self.pick(["x[i]", "x[i].item()"])
        self.emit(1, "best = None")
        self.emit(1, "at = -1")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"if best is None or {value} {op} best:")
        self.emit(3, f"best, at = {value}, i")
        self.emit(1, "return best, at")
        return
    if form == "item":
        self.param("x", f"_tensor(g, ({n}, 1), torch.{dt}) if variant == 0 else _tensor(g, ({n}, 2), torch.{dt})")
        op = self.pick(["+=", "*="])
        self.emit(1, f"s = {self.pick(['0', '1', '0.5', 'torch.tensor(1.0)'])}")
        self.emit(1, "for row in x:")
        self.emit(2, f"s {op} row.item()")
        self.emit(1, "return s")
        return
    self.param("x", f"[0.5 * j for j in range({n})] if variant == 0 else _tensor(g, ({n},), torch.{dt})")
    self.emit(1, "s = 0.0")
    self.emit(1, f"for i in range({n}):")
    self.emit(2, "s += x[i].item()")
    self.emit(1, "return s")


def lost_stop43(self):
    """This stop's forms, on inputs that change between calls: loop nests over names' elements
    (_stop43_elements), and several scatters into one tensor in
    each iteration (degrees, symmetric adjacency, two-way messages), sums (`+=` / `-=`, mixed)
    or stores (the last write wins), two or three of them, under conditions or not, over an
    edge list walked as rows or as `tolist()` pairs, with repeated and negative indices, int32
    beside int64 indices, Python numbers or tensors as values, int / float64 / float16 / bool
    targets, rows of features, inputs that require grad, and a read of the target that keeps
    the loop."""
    self.variants = True
    n, d = max(self.n, 3), max(self.d, 2)
    if self.chance(0.4):
        _stop43_elements(self, n, d)
        return
    if self.chance(0.2):
        _stop43_search(self, d)
        return
    if self.chance(0.1):
        _stop43_budget(self, n)
        return
    if self.chance(0.12):
        _stop43_totals(self, n)
        return
    m = self.pick([f"{n} + variant", "0", f"{3 * n} + variant"])
    low = self.pick([0, 0, -n])
    self.param("e", f"_tensor(g, ({m}, 2), torch.int64, low={low}, high={n})")
    self.param("e2", f"_tensor(g, ({m}, 2), torch.{self.pick(['int64', 'int32'])}, low={low}, high={n})")
    dt = self.pick(["float32", "float64", "int64", "float16", "bool"])
    grad = dt in ("float32", "float64") and self.chance(0.3)
    self.param("w", f"_tensor(g, ({m},), torch.{dt if dt != 'bool' else 'float32'}, grad={grad})")
    rows = self.chance(0.25) and dt != "bool"
    shape = f"({n}, {d})" if rows else self.pick([f"({n},)", f"({n}, {n})"])
    two = shape == f"({n}, {n})"
    self.param("h", f"_tensor(g, ({n}, {d}), torch.{dt if dt not in ('bool', 'int64') else 'float32'})")
    self.emit(1, f"A = torch.zeros({shape}, dtype=torch.{dt})")
    walk = self.pick(["rows", "pairs"]) if not two else "rows"
    if walk == "pairs":
        self.emit(1, "for s, t in e.tolist():")
        ix = [("s",), ("t",), ("s",)]
        val = {"w": "1", "h": "h[s]"}
    else:
        self.emit(1, "for k in range(e.shape[0]):")
        ix = [("e[k, 0]", "e[k, 1]"), ("e2[k, 1]", "e[k, 0]"), ("e[k, 1]", "e[k, 1]")]
        if not two:
            ix = [(a,) for a, _ in ix]
        val = {"w": "w[k]", "h": "h[e[k, 0]]"}
    sums = dt != "bool" and self.chance(0.6)
    values = ([val["h"], "h[0] * 2", val["h"] + " * -1"] if rows else
              [val["w"], "2" if dt in ("int64", "bool") or walk == "pairs" else val["w"] + " * 2", "True" if dt == "bool" else "1"])
    for j in range(self.pick([2, 2, 3])):
        sub = ", ".join(ix[j])
        ind = 2
        if self.chance(0.2) and walk == "rows" and not rows:
            self.emit(2, f"if {val['w']}{' > 0' if dt != 'bool' else ''}:")
            ind = 3
        op = self.pick(["+=", "-="]) if sums else "="
        v = values[j] if dt != "bool" else self.pick(["True", "False"])
        self.emit(ind, f"A[{sub}] {op} {v}")
    if self.chance(0.1):
        self.emit(2, f"h = h + A.sum() * 0")
    self.emit(1, "return A")


def lost_stop44(self):
    """This stop's forms, on inputs that change between calls: several updates of one running
    value in an iteration (Python int / float / tensor starts, `+=` / `-=` / `*=` or the
    rebinding spelling, mixed sometimes, under conditions, values of several dtypes and kinds,
    a read of the value that keeps the loop), branches between Python numbers under a
    per-element condition used in totals, stores and arithmetic, and rows compared with a 0-d
    threshold of another dtype."""
    self.variants = True
    n = max(self.n, 3)
    dt = self.pick(["float32", "float64", "float16", "int64", "int8"])
    self.param("x", f"_tensor(g, ({n} + variant,), torch.{dt}, low=-3, high=4)")
    self.param("y", f"_tensor(g, ({n} + variant,), torch.{self.pick(['float32', 'float64', dt])}, low=-3, high=4)")
    self.param("t", self.pick(["0.5", "1", "torch.tensor(0.1, dtype=torch.float64)", "torch.tensor(1, dtype=torch.int64)",
                               "torch.tensor(0.5, dtype=torch.float16)", "2 ** 53 + 1"]))
    form = self.pick(["accum", "accum", "where", "compare"])
    if form == "accum":
        start = self.pick(["0", "0.0", "1", "torch.zeros(())", f"torch.zeros((), dtype=torch.{dt})",
                           "torch.ones((), dtype=torch.float64)"])
        self.emit(1, f"c = {start}")
        self.emit(1, "for i in range(x.shape[0]):")
        vals = ["x[i]", "y[i]", "x[i].item()", "1", "0.5", "x[i] * 2", "(x[i] > t).item()", "y[i].item()"]
        op = self.pick(["+", "+", "-", "*"])
        for j in range(self.pick([2, 2, 3])):
            v = self.pick(vals)
            ind = 2
            if self.chance(0.4):
                self.emit(2, f"if {self.pick(['x[i] > t', 'y[i] < 0', 'i % 3 == 0'])}:")
                ind = 3
            o = op if not self.chance(0.1) else self.pick(["+", "-"])
            self.emit(ind, self.pick([f"c {o}= {v}", f"c = c {o} {v}"]))
        if self.chance(0.1):
            self.emit(2, "c = c * 1")
        self.emit(1, "return c")
    elif form == "where":
        a, b = self.pick([("1", "0"), ("1.0", "0.5"), ("0.1", "0.7"), ("3", "5"), ("True", "False"), ("2 ** 60", "1")])
        self.emit(1, self.pick(["c = 0.0", "c = 0", "out = torch.zeros_like(y)"]))
        head = self.lines[-1].strip()
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"v = {a} if x[i] > t else {b}")
        if head.startswith("out"):
            self.emit(2, self.pick(["out[i] = y[i] * v", "out[i] = v", "out[i] = y[i] + v / 7"]))
            self.emit(1, "return out")
        else:
            self.emit(2, self.pick(["c += v", "c = c + v * 2", "c += v / 7"]))
            self.emit(1, "return c")
    else:
        self.emit(1, "k = -1")
        self.emit(1, "hits = 0")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, self.pick(["if x[i] > t:", "if x[i].item() == t:", "if y[i] < t:"]))
        if self.chance(0.5):
            self.emit(3, "k = i")
            self.emit(3, "break")
        else:
            self.emit(3, "hits += 1")
        self.emit(1, "return k, hits")


def lost_stop52(self):
    """Stop 52's forms, on inputs that change between calls: tests of the loop's index against a
    bound the loop does not change (`v[t + 1] if t + 1 < T else 0.0`, `if t == T - 1:`, `if i > 0:`,
    `i <= T // 2`), which split the range into pieces (frontend._IndexSplits), with running values,
    stores read back a step later and `continue`; Python's `max` / `min` of a number in totals and
    stores (frontend._NumberExtremes); in-place row updates under `enumerate`; ragged spans under a
    condition. Of several dtypes, with NaN and zeros."""
    self.variants = True
    n = max(self.n, 1)
    dt = self.pick(["float32", "float64", "int64"])
    fdt = dt if dt != "int64" else "float32"
    special = dt != "int64" and self.chance(0.3)
    form = self.pick(["split", "split", "split", "extreme", "extreme", "enum", "span"])
    if form == "split":
        self.param("x", f"_tensor(g, ({n} + variant, 3), torch.{fdt}, special={special}, low=-3, high=4)")
        bound = self.pick(["x.shape[0]", "len(x)", "x.size(0)"])
        self.emit(1, f"T = {bound}")
        head = self.pick(["range(T)", "reversed(range(T))", "range(T - 1, -1, -1)", "range(1, T)", "range(0, T, 1)"])
        i = "t"
        off = self.pick(["", " + 1", " - 1", " + 2"])
        op = self.pick(["<", "<=", ">", ">=", "==", "!="])
        rhs = self.pick(["T", "T - 1", "0", "1", "T // 2", "3"])
        test = f"{i}{off} {op} {rhs}" if self.chance(0.7) else f"{rhs} {op} {i}{off}"
        read = self.pick(["x[t]", "x[t - 1]", "x[t + 1] if t + 1 < T else x[t]", "x[t].sum()"])
        kind = self.pick(["carry", "store", "back", "cont", "total"])
        if kind == "carry":
            self.emit(1, "c = " + self.pick(["0.0", "torch.zeros(3)", "0"]))
            self.emit(1, "out = torch.zeros_like(x)")
            self.emit(1, f"for t in {head}:")
            self.emit(2, f"nv = ({read}) if {test} else {self.pick(['0.0', '0', 'x[t] * 2'])}")
            self.emit(2, f"c = {self.pick(['0.5', '0.9'])} * c + nv")
            self.emit(2, "out[t] = c")
            self.emit(1, "return out, c")
        elif kind == "store":
            self.emit(1, "out = torch.zeros_like(x)")
            self.emit(1, f"for t in {head}:")
            self.emit(2, f"if {test}:")
            self.emit(3, f"out[t] = {read} * 2")
            self.emit(2, "else:")
            self.emit(3, "out[t] = x[t] - 1")
            self.emit(1, "return out")
        elif kind == "back":
            self.emit(1, "out = torch.zeros_like(x)")
            self.emit(1, f"for t in {head}:")
            prev = "out[t - 1]" if "reversed" not in head and "-1, -1" not in head else "out[(t + 1) % T]"
            self.emit(2, f"out[t] = x[t] + ({prev} if {test} else 0)")
            self.emit(1, "return out, t" if self.chance(0.5) else "return out")
        elif kind == "cont":
            self.emit(1, "c = torch.zeros(3, dtype=x.dtype)")
            self.emit(1, "res = []")
            self.emit(1, f"for t in {head}:")
            self.emit(2, f"if {test}:")
            self.emit(3, "continue")
            self.emit(2, "c = 0.5 * c + x[t]")
            self.emit(1, "return c")
        else:
            self.emit(1, "tot = " + self.pick(["0", "0.0"]))
            self.emit(1, f"for t in {head}:")
            self.emit(2, f"tot = tot + (x[t].sum() if {test} else {self.pick(['0', '1.5', '-x[t].sum()'])})")
            self.emit(1, "return tot")
        return
    if form == "extreme":
        self.param("x", f"_tensor(g, ({n} + variant, 3), torch.{dt}, special={special}, low=-3, high=4)")
        fn = self.pick(["max", "min"])
        k = self.pick(["0", "0.0", "-0.0", "1", "0.5"])
        val = self.pick(["x[i].sum()", "x[i, 0]", "x[i].sum() - 1", "x[i, 1] * 2"])
        call = f"{fn}({k}, {val})" if self.chance(0.5) else f"{fn}({val}, {k})"
        kind = self.pick(["total", "total", "store", "named"])
        if kind == "total":
            self.emit(1, "tot = " + self.pick(["0", "0.0", "0.0", "torch.zeros(())"]))
            self.emit(1, "for i in range(x.shape[0]):")
            self.emit(2, self.pick([f"tot += {call}", f"tot = tot + {call}"]))
            if self.chance(0.2):
                self.emit(2, "tot -= 0.5")
            self.emit(1, "return tot")
        elif kind == "named":
            self.emit(1, "tot = 0.0")
            self.emit(1, "for i in range(x.shape[0]):")
            self.emit(2, f"d = {val}")
            self.emit(2, f"tot += {fn}({k}, d)" if self.chance(0.5) else f"tot += {fn}(d, {k})")
            self.emit(1, "return tot")
        else:
            self.emit(1, f"out = torch.zeros(x.shape[0], dtype=torch.{self.pick([fdt, 'float64', dt])})")
            self.emit(1, "for i in range(x.shape[0]):")
            self.emit(2, f"out[i] = {call}")
            self.emit(1, "return out")
        return
    if form == "enum":
        self.param("x", f"_tensor(g, ({n} + variant, 4), torch.{fdt}, special={special}, low=-3, high=4)")
        self.emit(1, "x = x.clone()")
        self.emit(1, "for i, row in enumerate(x):")
        self.emit(2, self.pick(["row -= row.mean()", "row *= i", "row.mul_(2).add_(i)", "row -= x[0]"]))
        if self.chance(0.5):
            self.emit(2, self.pick(["row /= row.abs().max() + 1e-3 * i", "row += 1"]))
        self.emit(1, "return x, i")
        return
    L = self.pick([4, 7])
    self.param("h", f"_tensor(g, ({n} + variant, {L}, 3), torch.{fdt}, special={special}, low=-3, high=4)")
    self.param("lengths", f"_tensor(g, ({n} + variant,), torch.int64, low={self.pick([-2, 0, 1])}, high={L + 2})")
    self.emit(1, "out = torch.full((h.shape[0], h.shape[2]), -1.0, dtype=h.dtype)")
    self.emit(1, "for i in range(h.shape[0]):")
    self.emit(2, f"if lengths[i] > {self.pick([0, 1, 2])}:")
    self.emit(3, "out[i] = " + self.pick(["h[i, :lengths[i]].mean(0)", "h[i, :lengths[i]].sum(0)",
                                        "(h[i, :lengths[i]] * 2).sum(0)", "h[i, 1:lengths[i]].mean(0)"]))
    self.emit(1, "return out")


def lost_stop51(self):
    """Stop 51's forms, on inputs that change between calls: a conditional expression inside a
    statement's value (`d = x[i] - (x[i - 1] if i > 0 else 0)`), `itertools.product` of ranges,
    `range(a, b, -1)` walks (appends, stores, sums, nests), Python's `max` / `min` envelopes and
    stores into `t[i + s]`, `t[a][b] op= v` scatters (confusion matrices), counts started together
    (`tp, fp = 0, 0`), the index read after an in-place scan; of several dtypes, with NaN and zeros."""
    self.variants = True
    n = max(self.n, 1)
    dt = self.pick(["float32", "float64", "int64"])
    form = self.pick(["inner", "inner", "product", "down", "down", "envelope", "shifted", "chained", "counts"])
    special = dt != "int64" and self.chance(0.3)
    if form == "inner":
        self.param("x", f"_tensor(g, ({n} + variant, 3), torch.{dt}, special={special}, low=-3, high=4)")
        side = self.pick(["x[i - 1]", "x[i + 1]", "x[i] * 2", "x[i].sum()"])
        other = self.pick(["0", "0.0", "1", "-2.5", "x[i]"])
        cond = self.pick(["i > 0", "i + 1 < x.shape[0]", "x[i].sum() > 0", "i % 2 == 0", "bool(x[i, 0] > 1)"])
        if side == "x[i + 1]" and "i + 1 <" not in cond:
            cond = "i + 1 < x.shape[0]"
        inner = f"({side} if {cond} else {other})"
        value = self.pick([f"x[i] - {inner}", f"x[i] * {inner}", f"torch.relu(x[i] + {inner})", f"{inner} + 1"])
        kind = self.pick(["store", "append", "total"])
        if kind == "store":
            self.emit(1, "out = torch.zeros_like(x, dtype=torch.float64)")
            self.emit(1, "for i in range(x.shape[0]):")
            self.emit(2, f"out[i] = {value}")
            self.emit(1, "return out")
        elif kind == "append":
            self.emit(1, "res = []")
            self.emit(1, "for i in range(x.shape[0]):")
            self.emit(2, f"res.append({value})")
            self.emit(1, "return res")
        else:
            self.emit(1, "tot = 0")
            self.emit(1, "for i in range(x.shape[0]):")
            self.emit(2, f"tot = tot + ({value}).sum()")
            self.emit(1, "return tot")
        return
    if form == "product":
        self.param("x", f"_tensor(g, ({n} + variant, 3), torch.{dt}, special={special}, low=-3, high=4)")
        self.param("y", f"_tensor(g, ({self.pick([1, 2, 4])} + variant, 3), torch.{dt}, low=-3, high=4)")
        rng2 = self.pick(["range(y.shape[0])", "range(1, y.shape[0])", "range(0, y.shape[0], 2)"])
        self.emit(1, "import itertools")
        body = self.pick(["out[i, j] = (x[i] - y[j]).abs().sum()", "out[i, j] = x[i] @ y[j]", "out[i, j] += x[i, 0] * j"])
        self.emit(1, "out = torch.zeros(x.shape[0], y.shape[0], dtype=x.dtype)")
        self.emit(1, f"for i, j in itertools.product(range(x.shape[0]), {rng2}):")
        if self.chance(0.2):
            self.emit(2, "if x[i, 0] > 2:")
            self.emit(3, "continue")
        self.emit(2, body)
        self.emit(1, "return out")
        return
    if form == "down":
        self.param("x", f"_tensor(g, ({n} + variant, 3), torch.{dt}, special={special}, low=-3, high=4)")
        lo = self.pick(["-1", "0", "1"])
        self.emit(1, "res = []")
        self.emit(1, "tot = 0")
        self.emit(1, f"for i in range(x.shape[0] - 1, {lo}, -1):")
        if self.chance(0.3):
            self.emit(2, "for j in range(x.shape[1]):")
            self.emit(3, "res.append(x[i, j] * 2)")
        else:
            self.emit(2, self.pick(["res.append(x[i] * i)", "tot = tot + x[i].sum()", "res.append(x[i] - x[i - 1])"]))
            if self.chance(0.3):
                self.emit(2, "if x[i, 0] > 2:")
                self.emit(3, "break")
        self.emit(1, "return res, tot")
        return
    if form in ("envelope", "shifted"):
        self.param("p", f"_tensor(g, ({n} + variant,), torch.{dt}, special={special}, low=-3, high=4)")
        self.emit(1, "p = p.clone()")
        if form == "envelope":
            fn = self.pick(["max", "min", "torch.maximum", "torch.minimum"])
            if self.chance(0.5):
                self.emit(1, "for i in range(len(p) - 2, -1, -1):")
                self.emit(2, f"p[i] = {fn}(p[i], p[i + 1])" if self.chance(0.5) else f"p[i] = {fn}(p[i + 1], p[i])")
            else:
                self.emit(1, "for i in range(1, len(p)):")
                self.emit(2, f"p[i] = {fn}(p[i], p[i - 1])")
        else:
            self.emit(1, self.pick(["for i in range(p.shape[0] - 1, 0, -1):", "for i in range(1, len(p)):",
                                    "for i in reversed(range(1, p.size(0))):"]))
            self.emit(2, self.pick(["p[i - 1] = torch.maximum(p[i - 1], p[i])", "p[i - 1] = p[i - 1] + p[i]",
                                    "p[i - 1] = max(p[i - 1], p[i])", "p[i - 1] += p[i]"]))
        self.emit(1, "return p, i")
        return
    if form == "chained":
        C = self.pick([3, 5])
        self.param("y", f"_tensor(g, ({n} + variant,), torch.{self.pick(['int64', 'int32', 'int64'])}, low=0, high={C})")
        self.param("q", f"_tensor(g, ({n} + variant,), torch.int64, low=0, high={C})")
        self.param("w", f"_tensor(g, ({n} + variant,), torch.{dt}, low=-3, high=4)")
        self.emit(1, f"cm = torch.zeros({C}, {C}, dtype=torch.{self.pick(['int64', 'float32', dt])})")
        self.emit(1, self.pick(["for k in range(len(y)):", "for k in range(y.shape[0]):"]))
        self.emit(2, self.pick(["cm[y[k]][q[k]] += 1", "cm[y[k]][q[k]] = w[k]", "cm[y[k]][q[k]] += w[k]",
                                "cm[q[k]][y[k]] -= 1"]))
        self.emit(1, "return cm")
        return
    self.param("y", f"_tensor(g, ({n} + variant,), torch.{self.pick(['int64', 'bool'])}, low=0, high=2)")
    self.emit(1, self.pick(["tp, fp = 0, 0", "fp, tp = 0, 0", "tp, fp = 0.0, 0"]))
    self.emit(1, "prec = []")
    self.emit(1, "for t in range(len(y)):")
    self.emit(2, "if y[t] == 1:")
    self.emit(3, "tp += 1")
    self.emit(2, "else:")
    self.emit(3, "fp += 1")
    self.emit(2, self.pick(["prec.append(tp / (tp + fp))", "prec.append(tp)", "prec.append(tp - fp)"]))
    self.emit(1, "return prec, tp, fp")


def lost_stop50(self):
    """Stop 50's forms, on inputs that change between calls: running products of a chain of
    factors (`c = c * lam * r[t]`, read in the loop or after it), sums of terms with Python
    numbers beside tensors (`s = s + x[t] - 1.5`), the loop index compared with narrow integer
    rows, stores into disjoint parts of a row under a condition, one statement reading and
    writing part of the row by indices (`x[i, k[i]] = x[i, k[i]] * 2`), and stores by computed
    indices into a row the iteration made; of several dtypes, with NaN, infinities, zeros."""
    self.variants = True
    n = max(self.n, 1)
    dt = self.pick(["float32", "float64", "int64", "int32"])
    form = self.pick(["prod", "prod", "sum", "cmp", "parts", "rowidx", "onehot"])
    if form in ("prod", "sum"):
        self.param("x", f"_tensor(g, ({n} + variant,), torch.{dt}, special={dt.startswith('float') and self.chance(0.3)}, "
                        "low=-2, high=3)")
        self.param("m", f"_tensor(g, ({n} + variant,), torch.{self.pick([dt, dt, 'float32', 'bool'])}, low=0, high=2)")
        k = self.pick(["0.5", "2", "-1.5", "lam", "1e30", "True", "3"])
        self.param("lam", self.pick(["0.9", "2", "torch.tensor(0.5)", "-0.75"]))
        op = "*" if form == "prod" else self.pick(["+", "-"])
        terms = self.pick([[k, "x[t]"], ["x[t]", k], ["x[t]", "m[t]"], [k, "x[t]", "m[t]"], ["x[t].item()", k],
                           ["(1 - m[t])", k], ["x[t]", "x[t].item()"]])
        order = self.pick(["c first", "c middle"])
        chain = f" {op} ".join(terms)
        value = f"c {op} {chain}" if order == "c first" or op != "*" else f"{terms[0]} * c * {' * '.join(terms[1:])}"
        self.emit(1, f"c = {self.pick(['1.0', '1', '0.0', '0', 'torch.ones(())', 'x[0] * 0 + 1', '-0.0'])}")
        self.emit(1, "out = []")
        self.emit(1, "for t in range(x.shape[0]):")
        if self.chance(0.25):
            self.emit(2, f"if {self.pick(['m[t]', 'x[t] > 0', 'bool(m[t])'])}:")
            self.emit(3, f"c = {value}")
        else:
            self.emit(2, f"c = {value}")
        if self.chance(0.4):
            self.emit(2, self.pick(["out.append(c)", "out.append(c * 1)"]))
        self.emit(1, "return c, out")
        return
    if form == "cmp":
        ndt = self.pick(["int8", "uint8", "int16", "int64", "float16"])
        self.param("x", f"_tensor(g, ({n} * 40 + variant, 2), torch.{ndt}, low=0, high=100)")
        test = self.pick(["x[i] > i", "x[i] == i", "x[i].ge(i)", "torch.eq(x[i], i)", "x[i] <= i + 1", "x[i] != 2 * i"])
        if self.chance(0.5):
            self.emit(1, "out = torch.empty(x.shape, dtype=torch.bool)")
            self.emit(1, "for i in range(x.shape[0]):")
            self.emit(2, f"out[i] = {test}")
            self.emit(1, "return out")
        else:
            self.emit(1, f"return torch.stack([torch.where({test}, x[i], x[i] * 0) for i in range(x.shape[0])])")
        return
    if form == "parts":
        self.param("x", f"_tensor(g, ({n} + variant, 4), torch.{dt}, special={dt.startswith('float') and self.chance(0.3)}, "
                        "low=-3, high=4)")
        cond = self.pick(["x[i, 3] > 0", "x[i, 2] != 0", "bool(x[i, 3] > 1)"])
        a = self.pick(["x[i, 0] *= 2", "x[i, 0] = x[i, 0] + 1", "x[i, 0] = -x[i, 0]", "x[i, 0] += x[i, 3]"])
        b = self.pick(["x[i, 1] *= 3", "x[i, 1] = 7", "x[i, 1] -= x[i, 0]", "x[i, 1] = x[i, 2] * 2"])
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"if {cond}:")
        self.emit(3, a)
        self.emit(3, b)
        if self.chance(0.3):
            self.emit(2, "else:")
            self.emit(3, self.pick(["x[i, 2] = 0", "x[i, 1] = x[i, 1] * 2"]))
        self.emit(1, "return x")
        return
    if form == "rowidx":
        self.param("x", f"_tensor(g, ({n} + variant, 6), torch.{dt}, low=-3, high=4)")
        self.param("k", f"_tensor(g, ({n} + variant, {self.pick([1, 3, 5])}), torch.int64, low=0, high=6)")
        self.emit(1, "x = x.clone()")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, self.pick(["x[i, k[i]] = x[i, k[i]] * 2", "x[i, k[i]] = x[i, k[i]] + 1",
                                "x[i, k[i]] = torch.where(x[i, k[i]] < 0, x[i, k[i]] * 2, x[i, k[i]])"]))
        self.emit(1, "return x")
        return
    self.param("k", f"_tensor(g, ({n} + variant, {self.pick([1, 4, 9])}), torch.int64, low=0, high=5)")
    self.param("v", f"_tensor(g, ({n} + variant, 1), torch.{self.pick(['float32', 'float64'])}, low=-3, high=4)")
    self.emit(1, "out = []")
    self.emit(1, "for i in range(k.shape[0]):")
    self.emit(2, "r = torch.zeros(5, dtype=v.dtype)")
    self.emit(2, self.pick(["r[k[i]] = v[i]", "r[k[i]] = v[i] * 2", "r[k[i]] = 1.0"]))
    self.emit(2, "out.append(r)")
    self.emit(1, "return torch.stack(out) if out else v")


def lost_stop49(self):
    """Stop 49's forms, on inputs that change between calls: a running best under a condition
    (`if c: best = max(best, v)`, `if c and v > best: best = v; idx = t`, the tracker nested in
    an `if`), restarts spelled `if c: run += v` / `else: run = 0` with more statements on a side,
    `if` / `else` sides reading each other's running values (`if y[t]: tp += 1` / `else: auc += tp`),
    counts by each iteration's own Python number (`if c: s += x[t].item()`) read in the loop,
    linear recurrences in update form (`h += a * (v - h)`), and rows moved by their own shift or
    count (torch.roll, torch.rot90); of several dtypes, with NaN, infinities and ties."""
    self.variants = True
    n = max(self.n, 1)
    dt = self.pick(["float32", "float64", "int64"])
    self.param("x", f"_tensor(g, ({n} + variant,), torch.{dt}, special={dt != 'int64' and self.chance(0.3)}, "
                    "low=-3, high=4)")
    self.param("y", f"_tensor(g, ({n} + variant,), torch.{self.pick(['bool', 'bool', 'int64', 'float32'])}, "
                    "low=0, high=2)")
    cond = self.pick(["y[t]", "x[t] > 0", "not y[t]", "bool(y[t])", "y[t] and x[t] < 2", "int(x[t]) % 2 == 0"])
    form = self.pick(["best", "best", "streak", "split", "count", "update", "move"])
    if form == "move":
        # rows moved by their own shift or count (torch.roll, torch.rot90), of several dtypes
        side = self.pick([3, 3, 4])
        self.param("im", f"_tensor(g, ({n} + variant, 2, 3, {side}), torch.{self.pick(['float32', 'int64', 'float64'])}, "
                         f"layout='{self.pick(['contiguous', 'contiguous', 'step'])}')")
        self.param("k", f"_tensor(g, ({n} + variant,), torch.{self.pick(['int64', 'int32', 'bool'])}, low=-9, high=9)")
        shift = self.pick(["int(k[i])", "k[i]", "k[i].item()", "3", "(int(k[i]),)"])
        call = self.pick([f"torch.roll(im[i], {shift})", f"torch.roll(im[i], {shift}, dims={self.pick([0, 1, -1, 2])})",
                          f"im[i].roll({shift}, 1)", f"torch.rot90(im[i], {shift.replace('(int(k[i]),)', 'int(k[i])')}, dims=(1, 2))",
                          f"im[i].rot90({shift.replace('(int(k[i]),)', 'int(k[i])')}, [1, 2])"])
        if self.chance(0.5):
            self.emit(1, "out = torch.zeros_like(im)")
            self.emit(1, "for i in range(im.shape[0]):")
            self.emit(2, f"out[i] = {call}" + self.pick(["", " * 2", " + im[i]"]))
            self.emit(1, "return out")
        else:
            self.emit(1, f"return torch.stack([{call} for i in range(im.shape[0])])")
        return
    if form == "update":
        # a linear recurrence in update form (`mean += (v - mean) / (t + 1)`, `ema += a * (v - ema)`)
        v = self.pick(["x[t].item()", "x[t]", "float(x[t])", "x[t] * 2"])
        upd = self.pick(["h += (" + v + " - h) / (t + 1)", "h += 0.25 * (" + v + " - h)", "h -= 0.5 * (h - " + v + ")",
                         "h += " + v + " - 0.5 * h"])
        self.emit(1, f"h = {self.pick(['0.0', '0', 'torch.zeros(())', 'x[0] * 0', '1.5'])}")
        self.emit(1, "out = []")
        self.emit(1, "res = torch.zeros(x.shape[0], dtype=torch.float64)")
        self.emit(1, "for t in range(x.shape[0]):")
        self.emit(2, upd)
        read = self.pick(["out.append(h)", "res[t] = h", "out.append(h * 1)", ""])
        if read:
            self.emit(2, read)
        self.emit(1, "return h, out, res")
        return
    if form == "best":
        v = self.pick(["x[t].item()", "x[t]", "int(x[t])", "-x[t].item()", "float(x[t])"])
        start = self.pick(["-100.0", "0", "None", "x[0]", "0.0", "-1"])
        shape = self.pick(["max", "min2", "and", "nested", "nested_none"])
        self.emit(1, f"best = {start}")
        self.emit(1, "idx = -1")
        self.emit(1, "out = []")
        self.emit(1, "for t in range(x.shape[0]):")
        if shape == "max" and start != "None":
            self.emit(2, f"if {cond}:")
            self.emit(3, f"best = max(best, {v})")
        elif shape == "min2" and start != "None":
            self.emit(2, f"if {cond}:")
            self.emit(3, f"best = min({v}, best)")
        elif shape == "and" and start != "None":
            self.emit(2, f"if {cond} and {v} {self.pick(['>', '>=', '<'])} best:")
            self.emit(3, f"best = {v}")
            self.emit(3, "idx = t")
        else:
            self.emit(2, f"if {cond}:")
            self.emit(3, f"if best is None or {v} {self.pick(['>', '>=', '<='])} best:")
            self.emit(4, f"best = {v}")
            self.emit(4, "idx = t")
        if self.chance(0.15):
            self.emit(2, "out.append(best)")
        self.emit(1, "return best, idx, out")
        return
    if form == "streak":
        inc = self.pick(["1", "2", "x[t].item()", "int(x[t])", "1.5"])
        zero = self.pick(["0", "0.0"])
        self.emit(1, f"run = {self.pick(['0', '0.0', 'torch.zeros(())'])}")
        self.emit(1, "best = 0")
        self.emit(1, "out = []")
        self.emit(1, "for t in range(x.shape[0]):")
        self.emit(2, f"if {cond}:")
        self.emit(3, f"run {self.pick(['+=', '-=', '+='])} {inc}")
        if self.chance(0.5):
            self.emit(3, self.pick(["best = max(best, run)", "out.append(run)", "x[t] = 0"]))
        self.emit(2, "else:")
        self.emit(3, f"run = {zero}")
        if self.chance(0.3):
            self.emit(3, self.pick(["out.append(-1)", "best = best + 0"]))
        if self.chance(0.3):
            self.emit(2, "out.append(run)")
        self.emit(1, "return run, best, out, x")
        return
    if form == "split":
        inc = self.pick(["1", "x[t].item()", "int(x[t])", "x[t]", "0.5"])
        self.emit(1, f"a = {self.pick(['0', '0.0', 'torch.zeros(())'])}")
        self.emit(1, f"b = {self.pick(['0', '0.0'])}")
        self.emit(1, "out = []")
        self.emit(1, "for t in range(x.shape[0]):")
        self.emit(2, f"if {cond}:")
        self.emit(3, f"a += {inc}")
        if self.chance(0.2):
            self.emit(3, "x[t] = -1")
        self.emit(2, "else:")
        self.emit(3, self.pick(["b += a", "b = b + a * 2", "b -= a", "out.append(a)"]))
        if self.chance(0.3):
            self.emit(2, "out.append(b)")
        self.emit(1, "return a, b, out")
        return
    v = self.pick(["x[t].item()", "int(x[t])", "float(x[t])", "bool(x[t] > 0)", "x[t]", "x[t].item() * 2.0"])
    self.emit(1, f"s = {self.pick(['0', '0.0', '0.0', '3'])}")
    self.emit(1, "out = []")
    self.emit(1, f"res = torch.zeros(x.shape[0], dtype=torch.float64)")
    self.emit(1, "for t in range(x.shape[0]):")
    self.emit(2, f"if {cond}:")
    self.emit(3, f"s {self.pick(['+=', '-=', '+='])} {v}")
    self.emit(2, self.pick(["out.append(s)", "res[t] = s", "out.append(s)"]))
    self.emit(1, "return s, out, res")


def lost_stop48(self):
    """Stop 48's forms, on inputs that change between calls: running logical or / and (`f |= m[t]`,
    `f = f | m[t]`, `f = m[t] & f`, torch.logical_or / logical_and, Python's `or` / `and` of
    bools) of bool, int and float steps from tensor or Python starts, read before or after the
    update, appended, under a condition or only after the loop; and running sums of several terms
    a step with the running value anywhere in the sum (`s = x[t] + s - y[t]`, `a + (s - b)`,
    `x[i] += x[i - 1] + y[i]`), of several dtypes and Python numbers."""
    self.variants = True
    n, d = max(self.n, 1), max(self.d, 1)
    if self.chance(0.3):
        # a name read before the statement that assigns it (`prev = c` after `if c != prev:`)
        dt = self.pick(["float32", "int64", "float64"])
        self.param("x", f"_tensor(g, ({n} + variant, {d}), torch.{dt}, low=-2, high=3)")
        start, value = self.pick([("-1", "int(x[t].sum())"), ("0.0", "x[t].sum().item()"), (f"torch.zeros({d}, dtype=torch.{dt})", "x[t]"),
                                  ("x[0]", "x[t]"), ("x[0].clone()", "x[t] * 2"), ("None", "x[t]"), ("0", "x[t]"),
                                  (f"torch.zeros(1, {d}, dtype=torch.{dt})", "x[t]"), ("UNBOUND", "x[t]"), ("False", "bool(x[t, 0] > 0)")])
        read = self.pick(["out.append(c - prev)", "rows[t] = prev", "if bool(torch.as_tensor(c != prev).all()):\n            out.append(c)",
                          "out.append(prev)", "rows[t] = c - prev", "out.append(torch.as_tensor(prev).sum())"])
        if start != "UNBOUND":
            self.emit(1, f"prev = {start}")
        self.emit(1, "out = []")
        self.emit(1, f"rows = torch.zeros(x.shape[0], {d}, dtype=torch.float64)")
        self.emit(1, self.pick(["for t in range(x.shape[0]):", "for t in range(1, x.shape[0]):",
                                "for t in reversed(range(x.shape[0])):"]))
        self.emit(2, f"c = {self.pick(['x[t]', 'x[t].sum().item()', 'int(x[t, 0])'])}")
        if self.chance(0.1):
            self.emit(2, "if t == 2:")
            self.emit(3, "continue")
        for line in read.split("\n"):
            self.emit(2, line.strip() if not line.startswith("            ") else "    " + line.strip())
        self.emit(2, f"prev = {value}")
        if self.chance(0.2):
            self.emit(1, "if isinstance(prev, torch.Tensor) and prev.dtype.is_floating_point:")
            self.emit(2, "prev.add_(1)")
        self.emit(1, "return out, rows" + ("" if start == "UNBOUND" else ", prev"))
        return
    if self.chance(0.5):
        dt = self.pick(["bool", "bool", "bool", "int64", "float32", "uint8"])
        self.param("m", f"_tensor(g, ({n} + variant, {d}), torch.{dt}, special={dt == 'float32' and self.chance(0.3)}, "
                        "low=0, high=3)")
        start = self.pick([f"torch.zeros({d}, dtype=torch.bool)", f"torch.ones({d}, dtype=torch.bool)", "False",
                           "True", "torch.zeros((), dtype=torch.bool)", f"torch.zeros({d}, dtype=torch.long)", "0",
                           f"torch.zeros(2, {d}, dtype=torch.bool)", "f0"])
        if start == "f0":
            self.param("f0", f"_tensor(g, ({d},), torch.bool)")
        v = self.pick(["m[t]", "m[t] > 0", "m[t] != 0", "bool(m[t].sum() > 1)", "(m[t] > 0).any()", "m[t, 0] > 0"])
        upd = self.pick(["f |= {v}", "f &= {v}", "f = f | {v}", "f = {v} | f", "f = f & {v}",
                         "f = torch.logical_or(f, {v})", "f = torch.logical_and({v}, f)", "f = f or {v}",
                         "f = f and {v}"]).format(v=v)
        read = self.pick(["", "out.append(f)", "out.append(~f)", "rows[t] = f", "BEFORE rows[t] = f",
                          "BEFORE rows[t] = ~f", "BEFORE out.append(f)", "cnt = cnt + int(torch.as_tensor(f).sum())"])
        self.emit(1, "f = " + start)
        self.emit(1, "out = []")
        self.emit(1, "cnt = 0")
        self.emit(1, "rows = torch.zeros(m.shape, dtype=torch.bool)")
        self.emit(1, "for t in range(m.shape[0]):")
        if read.startswith("BEFORE "):
            self.emit(2, read[7:])
        if self.chance(0.2):
            self.emit(2, "if t % 3 != 1:")
            self.emit(3, upd)
        else:
            self.emit(2, upd)
        if read and not read.startswith("BEFORE "):
            self.emit(2, read)
        self.emit(1, "return f, out, cnt, rows")
        return
    dt = self.pick(["float32", "float64", "int64"])
    self.param("x", f"_tensor(g, ({n} + variant, {d}), torch.{dt}, special={dt != 'int64' and self.chance(0.2)}, "
                    "low=-5, high=9)")
    self.param("y", f"_tensor(g, ({n} + variant, {d}), torch.{self.pick([dt, dt, 'float32', 'int64'])}, low=-5, high=9)")
    a, b = self.pick([("x[t]", "y[t]"), ("x[t]", "2 * y[t]"), ("x[t].sum().item()", "1"), ("x[t, 0]", "y[t, 0]"),
                      ("x[t]", "0.5"), ("int(x[t].sum())", "t")])
    if self.chance(0.3):
        self.emit(1, "x = x.clone()")
        self.emit(1, "for t in range(1, x.shape[0]):")
        self.emit(2, self.pick(["x[t] += x[t - 1] + y[t]", "x[t] = x[t] + x[t - 1] - y[t]",
                                "x[t] = y[t] + (x[t - 1] + x[t])"]))
        self.emit(1, "return x")
        return
    upd = self.pick(["s = s + {a} + {b}", "s = {a} + s - {b}", "s = {a} + (s - {b})", "s = ({a} + {b}) + s",
                     "s = {a} - (s + {b})", "s = s - {a} - {b}"]).format(a=a, b=b)
    start = self.pick(["0.0", "0", f"torch.zeros({d})", "torch.zeros(())", f"torch.zeros({d}, dtype=torch.{dt})"])
    read = self.pick(["out.append(s)", "BEFORE out.append(s)", "res[t] = s", "BEFORE res[t] = s", ""])
    self.emit(1, "s = " + start)
    self.emit(1, "out = []")
    self.emit(1, f"res = torch.zeros(x.shape[0], {d}, dtype=torch.float64)")
    self.emit(1, "for t in range(x.shape[0]):")
    if read.startswith("BEFORE "):
        self.emit(2, read[7:])
    self.emit(2, upd)
    if read and not read.startswith("BEFORE "):
        self.emit(2, read)
    self.emit(1, "return s, out, res")


def lost_stop47(self):
    """Stop 47's forms, on inputs that change between calls: in-place recurrences with a lag of k
    rows (`x[i] += x[i - k]`, `x[i] = x[i - k] * x[i]`) and in-place running extremes
    (`torch.maximum(x[i], x[i - k])`, `torch.min`), starting at, after or before the lag (the
    loop's wrap-around), by rows or by columns, of several dtypes, with NaN, -0.0 and grads;
    and running values reset to 0 before an update (`if done[t]: c = 0` then `c += v`, `c -= v`,
    `c = c + 1`), of floats, ints, Python ints from `.item()`, from a Python or a tensor start,
    stored, appended or returned."""
    self.variants = True
    n, d = max(self.n, 1), max(self.d, 1)
    branch = self.pick(["lag", "lag", "reset", "reset", "helper", "mask", "counts"])
    if branch == "counts":
        # counts into a Python list (of ints, or with a float or bool element), by Python ints,
        # tensors or floats, under a condition, with indices past the end or negative
        self.param("lab", f"_tensor(g, ({n} + variant,), torch.{self.pick(['int64', 'int32'])}, low=-3, high={self.pick([4, 4, 6])})")
        self.param("w", f"_tensor(g, ({n} + variant,), torch.{self.pick(['int64', 'float32'])}, low=-2, high=5)")
        self.param("counts", self.pick(["[0, 0, 0, 0]", "[0, 1, 2, 3]", "[0, 1.5, 2, 3]", "[0, True, 2, 3]", "[0] * 5"]))
        val = self.pick(["1", "w[i].item()", "int(w[i])", "w[i]", "2.5", "True"])
        op = self.pick(["+=", "-=", "+="])
        self.emit(1, "counts = list(counts)")
        self.emit(1, "for i in range(lab.shape[0]):")
        if self.chance(0.3):
            self.emit(2, "if w[i] > 0:")
            self.emit(3, f"counts[{self.pick(['lab[i]', 'int(lab[i])'])}] {op} {val}")
        else:
            self.emit(2, f"counts[{self.pick(['lab[i]', 'int(lab[i])'])}] {op} {val}")
        self.emit(1, "return counts")
        return
    if branch == "helper":
        # a helper calling methods of an object the loop passes it: stateful, random or pure,
        # by position or keyword, directly or handed on to another helper
        self.helpers["TICK"] = ("class Tick:\n    def __init__(self):\n        self.k = 0\n\n"
                                "    def step(self):\n        self.k += 1\n        return self.k * 0.5\n\n"
                                "    def scale(self):\n        return 2.0\n\n\n"
                                "def use(o, v):\n    return v * o.METHOD()\n\n\n"
                                "def relay(v, *, obj):\n    return use(obj, v) + 1.0\n").replace(
            "METHOD", self.pick(["step", "scale", "random", "step"]))
        obj = self.pick(["Tick()", "Tick()", "__import__('random').Random(variant)", "Tick()"])
        if "random" in obj:
            self.helpers["TICK"] = self.helpers["TICK"].replace("o.step()", "o.random()").replace("o.scale()", "o.random()")
        self.param("x", f"_tensor(g, ({n} + variant, {d}), torch.float32)")
        self.param("o", obj)
        call = self.pick(["use(o, x[i])", "relay(x[i], obj=o)", "use(o, x[i]) * 2"])
        self.emit(1, "out = torch.zeros_like(x)")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"out[i] = {call}")
        self.emit(1, "return out, getattr(o, 'k', None)")
        return
    if branch == "mask":
        dt = self.pick(["float32", "float64", "int64"])
        shape = self.pick([f"({n} + variant, {d})", f"({n} + variant, {d}, 3)"])
        self.param("img", f"_tensor(g, {shape}, torch.{dt})")
        self.param("m", f"_tensor(g, {self.pick([shape, f'({n} + variant, {d})'])}, torch.bool)")
        self.param("v", self.pick(["0", "-1.5", f"_tensor(g, ({n} + variant,), torch.{dt})",
                                   f"_tensor(g, ({n} + variant,), torch.float64)", "torch.tensor(2.0)"]))
        line = self.pick(["img[i][m[i]] = {v}", "img[i, m[i]] = {v}", "img[i][m[i]] += {v}", "img[i][m[i]] *= 2"])
        vv = "v[i]" if self.inputs[-1].startswith("v = _tensor") else "v"
        self.emit(1, "img = img.clone()")
        self.emit(1, self.pick(["for i in range(img.shape[0]):", "for i in range(m.shape[0]):"]))
        if self.chance(0.2):
            self.emit(2, "if img[i].sum() > 0:")
            self.emit(3, line.format(v=vv))
        else:
            self.emit(2, line.format(v=vv))
        self.emit(1, "return img")
        return
    if branch == "lag":
        k = self.pick([1, 2, 3, 5])
        dt = self.pick(["float32", "float64", "int64", "int32", "bool", "float16"])
        cols = self.chance(0.3)
        shape = f"({d}, {n} + variant)" if cols else f"({n} + variant, {d})"
        grad = dt in ("float32", "float64") and self.chance(0.15)
        self.param("x", f"_tensor(g, {shape}, torch.{dt}, special={dt.startswith('float') and self.chance(0.3)}, "
                        f"layout={self.pick(['contiguous', 'contiguous', 't'])!r}, low=-3, high=4)")
        if grad:
            self.inputs.append("x = x.detach().requires_grad_()")
        # (entries after the index: the recurrence runs on that part alone, probeQ)
        tail = self.pick(["", "", "", ", 0", ", :1", ", -1", ", 1:"]) if d > 1 else ""
        ix = (":, i" if cols else "i") + tail
        ixk = (f":, i - {k}" if cols else f"i - {k}") + tail
        ext = dt == "bool" or self.chance(0.5)
        if self.chance(0.25) and not dt.startswith("bool"):
            # a forward fill from the row k before, by `if` (one element per row) or `torch.where`
            test = self.pick(["torch.isnan({r})", "{r} == 0", "{r} < 0", "torch.isnan({r}) | ({r} > 2)", "~torch.isfinite({r})"])
            t = test.format(r=f"x[{ix}]")
            line = self.pick([f"if {t}:\n            x[{ix}] = x[{ixk}]", f"x[{ix}] = torch.where({t}, x[{ixk}], x[{ix}])"])
        elif ext:
            f = self.pick(["torch.maximum", "torch.minimum", "torch.max", "torch.min"])
            a, b = self.pick([(f"x[{ix}]", f"x[{ixk}]"), (f"x[{ixk}]", f"x[{ix}]")])
            line = f"x[{ix}] = {f}({a}, {b})"
        else:
            line = self.pick([f"x[{ix}] += x[{ixk}]", f"x[{ix}] = x[{ix}] + x[{ixk}]", f"x[{ix}] *= x[{ixk}]",
                              f"x[{ix}] = x[{ixk}] * x[{ix}]"])
        start = self.pick([str(k), str(k), str(k + 1), "0" if k > 1 else "1", "1"])
        dim = 1 if cols else 0
        stop = self.pick([f"x.shape[{dim}]", f"x.shape[{dim}] - 1"])
        self.emit(1, "x = x * 1" if grad else "x = x")
        if self.chance(0.3):
            # walking back, reading the row k after (suffix scans, backward fills)
            line = line.replace(f"i - {k}", f"i + {k}")
            stop = self.pick([f"x.shape[{dim}] - {k}", f"x.shape[{dim}]", f"x.shape[{dim}] - {k} - 1"])
            self.emit(1, self.pick([f"for i in reversed(range({self.pick(['0', '1'])}, {stop})):",
                                    f"for i in range({stop} - 1, -1, -1):"]))
            self.emit(2, line)
            self.emit(1, "return x")
            return
        if self.chance(0.25):
            # the lag held in an argument (`x[i - lag]`), whose value may be another int, 0, negative
            self.param("lag", f"{k} if variant == 0 else {self.pick([str(k), '1', '0', '-1', '2'])}")
            line = line.replace(f"i - {k}", "i - lag")
            start = self.pick(["lag", "lag", "1", "lag + 1"])
            if "lag" not in line:
                self.emit(1, "del lag")
        self.emit(1, f"for i in range({start}, {stop}):")
        self.emit(2, line)
        self.emit(1, "return x")
        return
    dt = self.pick(["float32", "float64", "int64", "int32"])
    self.param("x", f"_tensor(g, ({n} + variant, {self.pick(['1', str(d)])}), torch.{dt}, low=-5, high=9)"
               if self.chance(0.3) else f"_tensor(g, ({n} + variant,), torch.{dt}, low=-5, high=9)")
    self.param("done", f"_tensor(g, ({n} + variant,), torch.bool)" if self.chance(0.7)
               else f"_tensor(g, ({n} + variant,), torch.int64, low=0, high=3)")
    start = self.pick(["0", "0", "0.0", "3", "torch.zeros(())", f"torch.zeros((), dtype=torch.{dt})", "-0.0"])
    self.param("c0", start)
    step = self.pick(["c += x[t]", "c -= x[t]", "c = c + 1", "c += 1", "c += x[t].item()",
                      "c = c + x[t] * 2", "c += 0.5"])
    use = self.pick(["store", "append", "final", "store"])
    self.emit(1, "c = c0")
    self.emit(1, "out = torch.zeros(x.shape, dtype=torch.float64)")
    self.emit(1, "seen = []")
    self.emit(1, "for t in range(x.shape[0]):")
    if self.chance(0.3):
        # a restart as one conditional assignment (`c = 0 if done[t] else <update>`), either way round
        upd = self.pick(["c + 1", "c + x[t].item()", "c + int(x[t])", "c + x[t]", "0.5 * c + 1.0", "c - 1"])
        z = self.pick(["0", "0.0"])
        self.emit(2, self.pick([f"c = {z} if done[t] else {upd}", f"c = {upd} if done[t] else {z}"]))
        self.emit(2, self.pick(["out[t] = c", "seen.append(c)", "pass"]))
        self.emit(1, "return c, out, seen")
        return
    self.emit(2, "if done[t]:")
    self.emit(3, self.pick(["c = 0", "c = 0.0", "c = 0"]))
    if self.chance(0.4):
        # a read between the reset and the update (position ids: `pos[t] = c` then `c += 1`)
        self.emit(2, self.pick(["out[t] = c", "out[t] = c * 2", "seen.append(c)", "out[t] = c + x[t]"]))
    self.emit(2, step)
    if use == "store":
        self.emit(2, "out[t] = c")
    elif use == "append":
        self.emit(2, "seen.append(c)")
    self.emit(1, "return c, out, seen")


def lost_stop46(self):
    """Stop 46's forms, on inputs that change between calls: updates of parts of the loop's row
    (`out[i, 0] += a; out[i, 1] -= b`, strided `out[i, 0::2] *= w`), disjoint or not, with a read
    of the row between them, under a condition, into an argument, a clone or a fresh tensor, of
    several dtypes, with values that require grad; and conditions that hold on no row of the
    first inputs and on some of the other inputs (the one-time check waits for them: the
    runtime's partial checks)."""
    self.variants = True
    n, d = max(self.n, 2), max(self.d, 4)
    form = self.pick(["parts", "parts", "parts", "rare", "rare"])
    dt = self.pick(["float32", "float64", "int64", "float32"])
    if form == "parts":
        grad = dt != "int64" and self.chance(0.2)
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}, grad={grad})")
        self.param("y", f"_tensor(g, ({n}, {d}), torch.{dt})")
        self.param("w", self.pick(["0.5", "2", "-1", "torch.tensor(1.5)"]) if dt != "int64" else self.pick(["2", "-1", "3"]))
        out = self.pick(["x.clone()", "torch.zeros_like(y)", "torch.ones_like(y)", "y"])
        self.emit(1, f"out = {out}")
        self.emit(1, "for i in range(x.shape[0]):")
        parts = ["0", "1", "2", "3", "0::2", "1::2", "2:", ":2", "-1"]
        vals = ["x[i, 0]", "y[i, 1] * w", "w", "x[i, {p}]", "y[i, {p}] + 1", "out[i, {p}]", "x[i, 3] - y[i, 2]"]
        for j in range(self.pick([2, 2, 3])):
            p = self.pick(parts)
            v = self.pick(vals).format(p=p)
            op = self.pick(["+=", "-=", "*=", "+=", "="]) if dt != "int64" else self.pick(["+=", "-=", "*="])
            line = f"out[i, {p}] {op} {v}"
            if self.chance(0.15):
                self.emit(2, f"if {self.pick(['x[i, 0] > 0', 'y[i, 1] < 0.5', 'i % 2 == 0'])}:")
                self.emit(3, line)
            else:
                self.emit(2, line)
        self.emit(1, "return out")
    else:
        self.param("x", f"_tensor(g, ({n},), torch.{dt})")
        if dt != "int64":
            self.inputs.append("if variant:\n        x[x.shape[0] // 2] = float(\"nan\")")
            cond = self.pick(["not torch.isfinite(x[i])", "x[i].isnan()", "x[i] > 1e6 or x[i].isnan()"])
        else:
            self.inputs.append("if variant:\n        x[x.shape[0] // 2] = 1000")
            cond = "x[i] > 100"
        kind = self.pick(["count", "total", "store", "both"])
        self.emit(1, "c = 0")
        self.emit(1, "total = 0.0" if dt != "int64" else "total = 0")
        self.emit(1, "out = torch.zeros(x.shape[0])")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"if {cond}:")
        if kind in ("count", "both"):
            self.emit(3, "c += 1")
        if kind in ("total", "both"):
            self.emit(3, self.pick(["total += i", "total = total + 1"]))
        if kind == "store":
            self.emit(3, "out[i] = 1.0")
        if self.chance(0.5):
            self.emit(2, "else:")
            self.emit(3, self.pick(["out[i] = x[i] * 2", "total += 0"]))
        self.emit(1, "return c, total, out")


def _stop43_totals(self, n):
    """Totals updated by int and float literals under conditions (hoist.float_totals): a float or
    int start, a rebinding between the start and the loop or in the loop, element nests and
    index loops, reads of the total's type in the loop."""
    self.param("x", f"_tensor(g, ({n} + variant,), torch.float32, low=0, high=4)")
    self.param("y", f"_tensor(g, ({max(n - 2, 1)},), torch.float32, low=0, high=4)")
    self.param("flag", self.pick(["True", "False"]))
    self.emit(1, self.pick(["c = 0.0", "c = 0.0", "c = -0.0", "c = 0", "c = 1.5"]))
    if self.chance(0.15):
        self.emit(1, "if flag:")
        self.emit(2, "c = 0")
    nest = self.chance(0.5)
    self.emit(1, "for p in x:")
    ind = 2
    if nest:
        self.emit(2, "for q in y:")
        ind = 3
    other = "q" if nest else "2.0"
    if self.chance(0.1):
        self.emit(ind, "if p > 3.5:")
        self.emit(ind + 1, "c = 0")
    self.emit(ind, f"if p > {other}:")
    self.emit(ind + 1, self.pick(["c += 1", "c = c + 2", "c -= 1", "c += 1.5"]))
    self.emit(ind, f"elif p == {other}:")
    self.emit(ind + 1, self.pick(["c += 0.5", "c = c - 0.25", "c += 1"]))
    if self.chance(0.1):
        self.emit(ind, "if type(c) is int:")
        self.emit(ind + 1, "c += 3")
    self.emit(1, "return c, type(c).__name__")


def _stop43_budget(self, n):
    """A budget spent until the next cost would pass it (`if spent + c > limit: break`), the
    total an int or a tensor of int8 / int16 / int32 / int64, 0-d or of shape (1,), updated in
    place or rebound (an int8 total wraps where an int64 one does not)."""
    dt = self.pick(["int8", "int16", "int32", "int64", "uint8"])
    shape = self.pick(["()", "(1,)"])
    self.param("costs", f"_tensor(g, ({n} + variant,), torch.{self.pick(['int64', 'int32', 'int8'])}, low=0, high=60)")
    self.param("spent", self.pick(["0", f"torch.zeros({shape}, dtype=torch.{dt})"]))
    self.param("limit", self.pick(["100", "1000", "10 ** 6"]))
    self.emit(1, "n = 0")
    self.emit(1, self.pick(["for c in costs:", "for k in range(len(costs)):"]))
    c = "c" if self.lines[-1].strip().startswith("for c") else "costs[k]"
    self.emit(2, f"if spent + {c} > limit:")
    self.emit(3, "break")
    self.emit(2, self.pick([f"spent += {c}", f"spent = spent + {c}"]))
    self.emit(2, "n += 1")
    self.emit(1, "return spent, n")


def _stop43_search(self, d):
    """Searches of 2,100 to 9,000 iterations that stop early, late or never (Token.find_exit
    looks at the first iterations first after a call that stopped among them), with work
    before the `break`, stores, a running total after it, reversed and stepped ranges,
    element walks and grads."""
    n = self.pick([2100, 3000, 9000])
    at = self.pick(["5", "40", "300", "700", f"{n - 3}", "None"])
    dt = self.pick(["float32", "float64"])
    self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}, grad={self.chance(0.2)}, low=0, high=1)")
    self.param("at", f"{at} if variant == 0 else {self.pick(['3', '250', '2000', 'None'])}")
    self.param("out", f"torch.zeros({n}, {d}, dtype=torch.{dt})")
    self.emit(1, "x = x * 0.01")
    self.emit(1, "if at is not None:")
    self.emit(2, "x = x.clone()")
    self.emit(2, "x[at] = x[at] + 10")
    self.emit(1, "total = torch.zeros(x.shape[1], dtype=x.dtype)")
    head = self.pick(["for i in range(x.shape[0]):", "for i in range(0, x.shape[0], 2):",
                      "for i in reversed(range(x.shape[0])):", "for r in x:"])
    self.emit(1, head)
    row = "r" if "r in" in head else "x[i]"
    if "i in" in head and self.chance(0.5):
        self.emit(2, f"out[i] = {row} * 2")
    self.emit(2, f"if {row}.sum() > {self.pick(['5.0', '1.0', '50.0'])}:")
    self.emit(3, "break")
    self.emit(2, f"total = total + {row}")
    self.emit(1, f"return total, out, {'r' if 'r in' in head else 'i'}")


def _stop43_elements(self, n, d):
    """Loop nests over names' elements (`for p in pos: for q in neg:`, enumerate), on tensors of
    one or two dimensions, lists, tuples, generators and a 0-d tensor, with the element read
    after the nest, rebound or captured (which keep the loop), accumulations, counts, stores at
    the enumerate counters, three levels, and grads."""
    dt = self.pick(["float32", "float64", "int64"])
    rows = self.chance(0.3) and dt != "int64"
    shape = f"({n} + variant, {d})" if rows else f"({n} + variant,)"
    grad = dt != "int64" and self.chance(0.3)
    self.param("pos", f"_tensor(g, {shape}, torch.{dt}, grad={grad})")
    seq = self.pick(["tensor", "tensor", "tensor", "list", "tuple", "gen", "0d"]) if not rows else "tensor"
    neg = {"tensor": f"_tensor(g, ({max(n - 1, 1)}, {d}) if {rows} else ({max(n - 1, 1)},), torch.{dt})",
           "list": f"_tensor(g, ({max(n - 1, 1)},), torch.{dt}).tolist()",
           "tuple": f"tuple(_tensor(g, ({max(n - 1, 1)},), torch.{dt}).tolist())",
           "gen": f"_tensor(g, ({max(n - 1, 1)},), torch.{dt}).tolist()",     # (walked as a generator, below)
           "0d": f"_tensor(g, (), torch.{dt})"}[seq]
    self.param("neg", neg)
    self.param("third", f"_tensor(g, (2,), torch.{dt})")
    kind = self.pick(["sum", "count", "store", "three", "after", "rebind", "closure", "best"])
    enum = self.chance(0.3) or kind == "store"
    outer = "for a, p in enumerate(pos):" if enum else "for p in pos:"
    inner = "for b, q in enumerate(neg):" if enum and self.chance(0.5) else "for q in neg:"
    val = "((p - q) ** 2).sum()" if rows else self.pick(["(p - q).abs()", "p * q", "p - q * 2"])
    if seq == "gen":
        self.emit(1, "neg = (v for v in neg)")      # (one walk uses it up: the loop's other rows see none)
    if kind == "store":
        self.emit(1, f"out = torch.zeros(len(pos), {max(n - 1, 1)})")
    self.emit(1, self.pick(["c = 0.0", "c = torch.zeros(())", "c = 0"]) if kind != "best" else "c = None")
    self.emit(1, outer)
    self.emit(2, inner)
    ind = 3
    if kind == "three":
        self.emit(3, "for r in third:")
        ind = 4
        val = f"{val} - r"
    if kind == "count":
        self.emit(ind, f"if {'p.sum() > q.sum()' if rows else 'p > q'}:")
        self.emit(ind + 1, "c += 1")
    elif kind == "store":
        self.emit(ind, f"out[a, {'b' if 'b,' in inner else '0'}] = {val}")
    elif kind == "rebind":
        self.emit(ind, "p = p * 2")
        self.emit(ind, f"c += {val}")
    elif kind == "closure":
        self.emit(ind, f"c += (lambda: {val})()")
    elif kind == "best":
        self.emit(ind, f"if c is None or {val} > c:")
        self.emit(ind + 1, f"c = {val}")
    else:
        self.emit(ind, f"c += {val}")
    if kind == "after":
        self.emit(1, "return c, p")
    elif kind == "store":
        self.emit(1, "return out, c")
    else:
        self.emit(1, "return c")


def lost_stop42(self):
    """This stop's forms, on inputs that change between calls: inner loops over loop-invariant
    values (lists, tuples, ranges, tensors, lists of tensors; plain, reversed, enumerated,
    zipped; with grads and a sqrt at 0 where a weight is 0), search loops with an `else`
    (for / while, a break or a return in `if` / `elif` blocks, an else that assigns, appends or
    returns, a break inside a `with` that keeps the else as written, a name bound by an
    `except .. as` in the body), loops over a walked method of a chain of tensor methods
    (`e.t().tolist()` alone, under enumerate, as zip's first non-name sequence; `.unbind()` of a
    transpose), and an in-place total beside a torch.nn.functional call."""
    self.variants = True
    n, d = max(self.n, 3), max(self.d, 2)
    kind = self.pick(["else", "else", "receiver", "receiver", "bce", "inner", "inner"])
    if kind == "inner":
        # an inner loop over loop-invariant values (runtime._walked_free): coefficients as a list, a
        # tuple, a range or a tensor, walked plainly, reversed, enumerated or zipped, with grads
        dt = self.pick(["float32", "float64"])
        self.param("x", f"_tensor(g, ({n} + variant, {d}), torch.{dt}, grad={self.chance(0.3)})")
        self.param("cs", self.pick(["[0.5, -1.0, 2.0]", "(1, 2.5, -0.5)", "range(3)",
                                    f"_tensor(g, (3,), torch.{dt}, grad={self.chance(0.3)})", "[]"]))
        self.param("ws", f"[_tensor(g, ({d},), torch.{dt}, grad={self.chance(0.3)}) for _ in range(2)]")
        head, step = self.pick([("for c in cs:", "y = y * x[i] + c"), ("for c in reversed(cs):", "y = y * x[i] + c"),
                                ("for k, c in enumerate(cs, 1):", "y = y + c * x[i] ** k"),
                                ("for w in ws:", "y = torch.tanh(y * w + x[i])"),
                                ("for w in ws:", "y = y * w.abs().sqrt() + x[i]"),
                                ("for w, c in zip(ws, cs):", "y = y * w + c")])
        self.emit(1, "out = []")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, self.pick(["y = x[i] * 0", "y = torch.zeros_like(x[i])", "y = x[i]"]))
        self.emit(2, head)
        self.emit(3, step)
        self.emit(2, "out.append(y)")
        self.emit(1, "return torch.stack(out)")
        return
    if kind == "receiver":
        self.param("x", f"_tensor(g, ({n} + variant, {d}), torch.float32, grad={self.chance(0.3)})")
        self.param("e", f"_tensor(g, (2, {n} + 2), torch.int64, low=0, high={n}, layout={self.pick(['contiguous', 't'])!r})")
        head = self.pick(["for s, d in e.t().tolist():", "for k, (s, d) in enumerate(e.t().tolist()):",
                          "for s, d in e.long().t().contiguous().tolist():",
                          "for w, (s, d) in zip(x, e.t().tolist()):", "for col in e.t().float().unbind():"])
        self.emit(1, "out = []")
        self.emit(1, head)
        if "col" in head:
            self.emit(2, "out.append(col.sum() * 2)")
        else:
            body = self.pick(["x[s] - x[d]", "x[s] * x[d]", "(x[s] + x[d]).sum()", "x[s].abs() + 1"])
            if "w," in head:
                body = f"w * ({body})"
            self.emit(2, f"out.append({body})")
        self.emit(1, "return torch.stack(out) if out else None")
        return
    if kind == "bce":
        self.param("z", f"_tensor(g, ({n} + variant,), torch.float32, grad={self.chance(0.5)})")
        self.param("y", f"_tensor(g, ({n} + variant,), torch.float32, low=0, high=2)")
        self.emit(1, "loss = torch.zeros(())")
        self.emit(1, "for i in range(z.shape[0]):")
        f = self.pick(["torch.nn.functional.binary_cross_entropy_with_logits(z[i], (y[i] > 0).float())",
                       "torch.nn.functional.softplus(z[i])", "torch.nn.functional.mse_loss(z[i], y[i])"])
        self.emit(2, f"loss {self.pick(['+=', '-='])} {f}")
        self.emit(1, "return loss")
        return
    dt = self.pick(["float32", "float64", "int64"])
    self.param("x", f"_tensor(g, ({n} + variant, {d}), torch.{dt})")
    self.param("t", self.pick(["2.0", "5.0", "100.0", "-1.0"]))
    self.param("log", "[]")
    xv = "x.float()" if dt == "int64" else "x"
    loop = self.pick(["for", "for", "while"])
    if loop == "for":
        self.emit(1, f"for i in range({self.pick(['x.shape[0]', 'len(x)', '1, x.shape[0]'])}):")
    else:
        self.emit(1, "i = 0")
        self.emit(1, "while i < x.shape[0]:")
    ind = 2
    if self.chance(0.2):
        self.emit(2, "try:")
        self.emit(3, "raise KeyError(i)")
        self.emit(2, f"except KeyError as {self.pick(['broke', 'returning', 'err'])}:")
        self.emit(3, "pass")
    cond = self.pick([f"{xv}[i].sum() > t", f"{xv}[i].max() > t", f"({xv}[i] * 2).abs().sum() > t"])
    exit_ = self.pick(["break", "break", "return i, None"])
    where = self.pick(["if", "if", "elif", "with"])
    if where == "with":
        self.emit(ind, "with torch.no_grad():")
        self.emit(ind + 1, f"if {cond}:")
        self.emit(ind + 2, "break")
    elif where == "elif":
        self.emit(ind, f"if {xv}[i].min() < -t * 3:")
        self.emit(ind + 1, "log.append(i)")
        self.emit(ind, f"elif {cond}:")
        self.emit(ind + 1, exit_)
    else:
        self.emit(ind, f"if {cond}:")
        if self.chance(0.3):
            self.emit(ind + 1, "log.append(-i)")
        self.emit(ind + 1, exit_)
    if loop == "while":
        self.emit(ind, "i += 1")
    self.emit(1, "else:")
    tail = self.pick(["assign", "append", "return"])
    if tail == "assign":
        self.emit(2, "i = -1")
    elif tail == "append":
        self.emit(2, "log.append('else')")
    else:
        self.emit(2, "return -1, log")
    self.emit(1, "return i, log")


def lost_stop41(self):
    """This stop's form, on inputs that change between calls (variant 1): triangular nests whose
    indices only index (sums, counts under a condition, stores on either side of the diagonal, a
    symmetric fill, a running minimum, appends, in-place row updates), with offsets on either
    bound, inputs that require grad, sqrt at equal rows, float64 and int rows, and a bound past
    the tensor's end or a row count that changes between calls."""
    self.variants = True
    n, d = max(self.n, 3), max(self.d, 2)
    if self.chance(0.35):
        _stop41_in_place(self, n, d)
        return
    dt = self.pick(["float32", "float32", "float64", "int64"])
    grad = dt != "int64" and self.chance(0.4)
    layout = self.pick(["contiguous", "contiguous", "t", "step"])
    self.param("x", f"_tensor(g, ({n} + variant * {self.pick([0, 0, 1, 2])}, {d}), torch.{dt}, {layout!r}, grad={grad})")
    c = self.pick(["1", "1", "0", "2", "- 1"])
    if self.chance(0.5):
        head = f"for j in range(i + {c}, {self.pick(['x.shape[0]', 'len(x)', 'x.shape[0]', 'm'])}):".replace("+ - ", "- ")
    else:
        head = f"for j in range({self.pick(['', '0, ', '1, '])}i{'' if c == '0' else ' + ' + c}):".replace("+ - ", "- ")
    if "m)" in head:
        self.param("m", f"{n} + variant * {self.pick([0, 1, -1])}")
    xv = "x.float()" if dt == "int64" else "x"
    form = self.pick(["sum", "sum", "count", "store", "sym", "min", "append", "rows"])
    if form == "sum":
        self.emit(1, "s = 0.0")
    elif form == "count":
        self.emit(1, "s = 0")
    elif form == "append":
        self.emit(1, "s = []")
    elif form in ("store", "sym"):
        self.emit(1, f"s = torch.zeros(x.shape[0] + 2, x.shape[0] + 2, dtype={xv}.dtype)")
    elif form == "min":
        self.emit(1, "s = torch.full((x.shape[0] + 2,), float('inf'))")
    else:
        self.emit(1, f"s = torch.zeros(x.shape[0] + 2, {d}, dtype={xv}.dtype)")
    self.emit(1, f"for i in range({self.pick(['x.shape[0]', 'len(x)', '1, x.shape[0]'])}):")
    self.emit(2, head)
    pair = self.pick(["(x[i] - x[j])", "(x[i] * x[j])", "(x[i] + x[j] * 2)"])
    val = self.pick([f"{pair}.abs().sum()", f"{pair}.float().pow(2).sum()", f"{pair}.float().pow(2).sum().sqrt()",
                     f"{pair}.float().norm()", f"torch.exp(-{pair}.float().pow(2).sum())"])
    if form == "sum":
        self.emit(3, f"s = s + {val}")
    elif form == "count":
        self.emit(3, f"if {val} < {self.pick(['2.0', '5.0', '0.5'])}:")
        self.emit(4, "s += 1")
    elif form == "store":
        self.emit(3, f"s[{self.pick(['i, j', 'j, i'])}] = {val}")
    elif form == "sym":
        self.emit(3, f"s[i, j] = s[j, i] = {val}")
    elif form == "min":
        self.emit(3, f"d = {val}")
        self.emit(3, "if d < s[i]:")
        self.emit(4, "s[i] = d")
    elif form == "append":
        self.emit(3, f"s.append({val})")
    else:
        self.emit(3, f"s[{self.pick(['i', 'j'])}] {self.pick(['+=', '-='])} {pair}")
    self.emit(1, "return s")


def _stop41_in_place(self, n, d):
    """Stored recurrences in place: `x[i] += a * x[i - 1]`, `x[i] = x[i] + ..`, discounted returns
    over reversed ranges, by row or by column, the row also read outside a sum, `*=`, int
    tensors, a factor that requires grad."""
    dt = self.pick(["float32", "float32", "float64", "int64"])
    # (x itself never requires grad: the fuzzer deep-copies the arguments, which a non-leaf refuses,
    # and the loop raises on a leaf; tests/test_stored_recurrence.py checks the gradients)
    self.param("x", f"_tensor(g, ({n} + variant, {d}), torch.{dt}, {self.pick(['contiguous', 't', 'step'])!r})")
    self.param("b", f"_tensor(g, ({n} + 1, {d}), torch.float32, grad={self.chance(0.3)})")
    a = self.pick(["0.5", "-0.9", "2", "0.25"])
    col = self.chance(0.3)
    row = (lambda k: f"x[:, {k}]") if col else (lambda k: f"x[{k}]")
    size = "x.shape[1]" if col else "x.shape[0]"
    back = self.chance(0.4)
    if back:
        self.emit(1, f"for t in {self.pick([f'reversed(range({size} - 1))', f'range({size} - 2, -1, -1)'])}:")
        cur, prev = row("t"), row("t + 1")
    else:
        self.emit(1, f"for t in range(1, {size}):")
        cur, prev = row("t"), row("t - 1")
    form = self.pick(["aug", "aug", "sum", "sum2", "saved", "mul", "cumsum"])
    term = self.pick([f"{a} * {prev}", f"{a} * {prev} * b[t]" if not col else f"{a} * {prev}", f"{prev} / 3"])
    if form == "aug":
        self.emit(2, f"{cur} {self.pick(['+=', '-='])} {term}")
    elif form == "sum":
        self.emit(2, f"{cur} = {cur} + {term}")
    elif form == "sum2":
        self.emit(2, f"{cur} = {term} - {cur}")
    elif form == "saved":
        self.emit(2, f"{cur} = {term} + {cur} * {self.pick(['b[t]', '2', 'torch.sin(' + cur + ')'])}")
    elif form == "mul":
        self.emit(2, f"{cur} *= 1 + {term}")
    else:
        self.emit(2, f"{cur} += {prev}")
    self.emit(1, "return x")


def lost_stop40(self):
    """This stop's forms, on inputs that change between calls (variant 1): lists of tensors of
    several shapes updated in place (Adam- and RMSprop-like bodies, names bound to elements,
    `.grad`, `.data`, `with torch.no_grad()`), on lists that sometimes share a tensor, a view of
    one buffer, a float64 element or a tensor that requires grad (foreach); sequences of several
    lengths padded into rows beside their mask, with casts, constants, too few columns, a
    sequence that is a view of the target (ragged)."""
    self.variants = True
    form = self.pick(["adam", "adam", "rms", "alias", "ragged", "ragged", "ragged2"])
    n = self.pick([12, 16, 24] if form in ("adam", "rms", "alias") else [24, 32])
    dt = self.pick(["float32", "float32", "float64"])
    shapes = f"[({self.rng.randint(1, 4)} + k % 3, 2 + k % 2) if k % 2 else ({self.rng.randint(1, 6)} + k % 4,) for k in range({n})]"
    if form in ("adam", "rms", "alias"):
        trap = self.pick(["none", "none", "none", "shared", "buffer", "f64", "grad", "short"])
        self.inputs.append(f"shapes = {shapes}")
        for name in ("ps", "gs", "ms"):
            self.param(name, f"[_tensor(g, s, torch.{dt}) for s in shapes]")
        self.param("vs", f"[_tensor(g, s, torch.{dt}).abs() + 0.1 for s in shapes]")
        if trap != "none":
            fix = {"shared": "ms[3] = ms[2] if variant == 1 else ms[3]",
                   "buffer": "_b = _tensor(g, (64,), torch.%s); ps[1], ps[2] = (_b[0:ps[1].numel()].view(ps[1].shape), _b[2:2 + ps[2].numel()].view(ps[2].shape)) if variant == 1 else (ps[1], ps[2])" % dt,
                   "f64": "gs[5] = gs[5].double() if variant == 1 else gs[5]",
                   "grad": "ps[4] = ps[4].requires_grad_() if variant == 1 else ps[4]",
                   "short": "vs = vs[:-1] if variant == 1 else vs"}[trap]
            self.inputs.append(fix)
        lr, b1 = self.pick(["1e-3", "0.1"]), self.pick(["0.9", "0.5"])
        if form == "adam":
            self.param("step", self.pick(["1", "3"]))
            self.emit(1, f"for i in range(len(ps)):")
            self.emit(2, f"ms[i].mul_({b1}).add_(gs[i], alpha=1 - {b1})")
            self.emit(2, "vs[i].mul_(0.99).addcmul_(gs[i], gs[i], value=0.01)")
            self.emit(2, f"mhat = ms[i] / (1 - {b1} ** step)")
            self.emit(2, "vhat = vs[i] / (1 - 0.99 ** step)")
            self.emit(2, f"ps[i].{self.pick(['sub_', 'add_'])}({lr} * mhat / (vhat.sqrt() + 1e-8))")
        elif form == "rms":
            nograd = self.chance(0.5)
            self.emit(1, "for p, g2, v in zip(ps, gs, vs):")
            ind = 2
            if nograd:
                self.emit(2, "with torch.no_grad():")
                ind = 3
            self.emit(ind, "v.mul_(0.9).addcmul_(g2, g2, value=0.1)")
            self.emit(ind, f"p.addcdiv_(g2, torch.sqrt(v) + 1e-6, value=-{lr})")
        else:
            self.emit(1, "for i in range(len(ps)):")
            self.emit(2, "buf = ms[i]")
            self.emit(2, "d_p = gs[i].add(ps[i], alpha=0.01)")
            self.emit(2, f"buf.mul_({b1}).add_(d_p)")
            self.emit(2, f"ps[i].add_(d_p.add(buf, alpha={b1}), alpha=-{lr})")
        self.emit(1, "return ps, ms, vs")
        return
    tdt = self.pick(["long", "long", "int32", "float32", "bool", "uint8"])
    sdt = self.pick(["long", "long", "float64", "int16"])
    cols = self.pick(["12", "12", "10"])
    low = self.pick(["0", "1"])
    self.param("seqs", f"[_tensor(g, (int(k),), torch.{sdt}) for k in torch.randint({low}, 13, ({n},), generator=g)]")
    self.param("ids", f"torch.zeros({n} + variant, {cols}, dtype=torch.{tdt})")
    self.param("mask", f"torch.zeros({n}, {cols}, dtype=torch.{self.pick(['bool', 'uint8', 'float32'])})")
    if self.chance(0.2):
        self.inputs.append(f"seqs[2] = ids[5, :{self.pick(['3', '0'])}] if variant == 1 else seqs[2]")
    const = self.pick(["1", "True", "-1", "300", "1.5"])
    if form == "ragged":
        self.emit(1, "for i, s in enumerate(seqs):")
        if self.chance(0.3):
            self.emit(2, f"ids[i, -{self.pick(['len(s)', 's.shape[0]', 's.size(0)'])}:] = s")
        else:
            self.emit(2, f"ids[i, :{self.pick(['len(s)', 's.shape[0]', 's.size(0)'])}] = s")
        self.emit(2, f"mask[i, :len(s)] = {const}")
    else:
        self.emit(1, "for i in range(len(seqs)):")
        self.emit(2, "k = len(seqs[i])")
        self.emit(2, f"mask[i][:k] = {const}")
        self.emit(2, "ids[i][:k] = seqs[i]")
    self.emit(1, "return ids, mask")


def lost_stop39(self):
    """This stop's forms, on inputs that change between calls (variant 1): fission whose loop
    keeps a hoisted value past its use (new values, views of new values, views of the input,
    conversions that copy at times, expanded values, invariants), then an in-place change of a
    kept value; `return` inside a loop (first matches, a nest, a `while`, a bare return, `else`
    and `finally` around it)."""
    self.variants = True
    n, d = max(self.n, 2), max(self.d, 3)
    dt = self.pick(["float32", "float32", "float64"])
    form = self.pick(["fission", "fission", "fission", "ret", "ret", "nest", "while"])
    if form == "fission":
        grad = self.chance(0.5)
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}, grad={grad}) if variant == 0 else "
                        f"_tensor(g, ({n}, {d + 1}), torch.{dt})[:, :{d}].requires_grad_({grad})")
        self.param("h", f"_tensor(g, ({d},), torch.{dt})")
        self.param("b", f"_tensor(g, ({d},), torch.{dt}, grad={self.chance(0.3)})")
        kept = self.pick(["torch.exp(x[i])", "torch.exp(x[i])[:2]", "x[i] * 2", "x[i].view(-1)", "x[i]",
                          "x[i].contiguous()", "x[i].float()", "torch.exp(x[i]).expand(2, -1)", "b * 2.0",
                          "torch.sigmoid(x[i]).unsqueeze(0)", "x[i].t()"])
        self.emit(1, "outs = []")
        self.emit(1, "for i in range(x.shape[0]):")
        if self.chance(0.3):
            self.emit(2, f"e = {kept}")
            kept = "e"
        self.emit(2, f"h = torch.tanh(h * 0.5 + {self.pick(['x[i]', 'x[i] * 2', 'torch.sin(x[i])'])})")
        self.emit(2, f"outs.append({kept})")
        self.emit(1, "y = (outs[-1] * outs[-1]).sum()     # (saves outs[-1]: an in-place change of a row sharing it raises)")
        # (not on a value its own exp / sigmoid saved, with gradients: the loop's backward raises
        # there and the copy's does not, a documented difference that kept lists have too)
        if self.chance(0.7) and not (grad and ("exp" in kept or "sigmoid" in kept or kept == "e")):
            self.emit(1, f"outs[0].{self.pick(['mul_(2)', 'zero_()', 'add_(1)'])}")
        self.emit(1, "return h, outs, x, y")
        return
    self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
    self.param("t", self.pick(["0.5", "1.5", "-100.0", "100.0"]) + " if variant == 0 else " + self.pick(["0.0", "2.5"]))
    if form == "ret":
        self.emit(1, "log = []")
        if self.chance(0.3):
            self.emit(1, "try:")
            ind = 2
        else:
            ind = 1
        self.emit(ind, "for i in range(x.shape[0]):")
        self.emit(ind + 1, f"s = x[i].{self.pick(['sum()', 'max()', 'mean()'])}")
        self.emit(ind + 1, "if s > t:")
        self.emit(ind + 2, self.pick(["return i", "return i, s * 2", "return", "return x[i] * s"]))
        if self.chance(0.4):
            self.emit(ind + 1, "elif s < -t:")
            self.emit(ind + 2, "return -i")
        if self.chance(0.3):
            self.emit(ind, "else:")
            self.emit(ind + 1, "log.append(-1)")
        if ind == 2:
            self.emit(1, "finally:")
            self.emit(2, "log.append(0)")
        self.emit(1, "return log")
        return
    if form == "nest":
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, "for j in range(x.shape[1]):")
        self.emit(3, "if x[i, j] > t:")
        self.emit(4, "return i, j")
        self.emit(1, "return None")
        return
    self.emit(1, "k = 0")
    self.emit(1, "while k < x.shape[0]:")
    self.emit(2, "if x[k].min() > t - 2:")
    self.emit(3, "return k")
    self.emit(2, "k += 1")
    self.emit(1, "return -1")


def lost_stop38(self):
    """This stop's forms, on inputs that change between calls (variant 1): stores into a Python
    list by index (two stores into one list, a loop-invariant value, numbers, offsets, a list too
    short), updates through a name for the row (`r = x[i]; r[r < 0] = 0`, then reads of it; `r -=
    r[0]`, which meets its own source), masked stores after a top-k read, updates of a row from a
    part of it (disjoint or overlapping), updates through a tensor index, and a zip part unpacked."""
    self.variants = True
    n, d = max(self.n, 2), max(self.d, 4)
    form = self.pick(["list", "list", "alias", "alias", "topk", "part", "part", "index", "zip"])
    dt = self.pick(["float32", "float32", "float64"])
    if form == "list":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        self.param("w", f"_tensor(g, ({d},), torch.{dt})")
        extra = self.pick([0, 0, 1, -1])
        self.emit(1, f"res = [None] * (x.shape[0] + ({extra} if variant == 0 else {self.pick([0, 1, -1])}))")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"res[i] = {self.pick(['x[i] * 2', 'torch.tanh(x[i] @ w)', 'x[i].sum().item()', 'w', 'x[i]'])}")
        if self.chance(0.3) and extra >= 0:
            self.emit(2, f"res[i + 1] = {self.pick(['x[i] - 1', '-1.0', 'w'])}")
        self.emit(1, "return res")
        return
    if form == "alias":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}) if variant == 0 else _tensor(g, ({d}, {n}), torch.{dt}).t()")
        self.param("b", f"_tensor(g, ({d},), torch.{dt})")
        self.emit(1, "out = []")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, "r = x[i]")
        self.emit(2, self.pick(["r[r < 0] = 0", "r += b", "r.clamp_(min=0)", "r -= r[0]", "r[1:] = r[:-1]",
                                "r.mul_(b)", "r[r > b] = b.max()"]))
        self.emit(2, f"out.append({self.pick(['r.sum()', 'x[i] * 1', 'r[0] + 1'])})")
        self.emit(1, "return torch.stack(out), x")
        return
    if form == "topk":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}) if variant == 0 else "
                        f"torch.randint(0, 3, ({n}, {d}), generator=g).to(torch.{dt})")
        self.param("k", self.pick(["2", "1", str(d)]))
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, self.pick(["v, _ = torch.topk(x[i], k)", "v = torch.sort(x[i], descending=True).values"]))
        value = self.pick(["-float('inf')", "0", "v[0]"])
        self.emit(2, f"x[i][x[i] < v[k - 1]] = {value}")
        self.emit(1, "return x")
        return
    if form == "part":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}) if variant == 0 else _tensor(g, ({d}, {n}), torch.{dt}).t()")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, self.pick(["x[i, 2:] += x[i, :2]", "x[i, 0] /= x[i, 1]", "x[i, :2] = x[i, 2:4]",
                                "x[i, 1:] = x[i, :-1]", "x[i] -= x[i][0]", "x[i, 2:] -= x[i, :2] * 0.5",
                                "x[i, 1:] += x[i, :-1]"]))
        self.emit(1, "return x")
        return
    if form == "index":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        self.param("y", f"_tensor(g, ({n}, 2), torch.{dt})")
        self.param("idx", f"torch.tensor([0, 3]) if variant == 0 else torch.tensor([{self.pick(['1, 1', '3, 0', '0, 0'])}])")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, self.pick(["x[i, idx] += y[i]", "x[i, idx] *= 2", "x[i][idx] -= y[i]"]))
        self.emit(1, "return x")
        return
    self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
    self.param("s", f"_tensor(g, ({n}, 2), torch.{dt}).abs() + 1 if variant == 0 else "
                    f"_tensor(g, ({self.pick([n, n - 1, n + 1])}, {self.pick([2, 3])}), torch.{dt}).abs() + 1")
    self.emit(1, "out = []")
    self.emit(1, "for row, (h, w) in zip(x, s):")
    self.emit(2, f"out.append(row * {self.pick(['h + w', 'h / w', '(h - w).abs()'])})")
    self.emit(1, "return torch.stack(out)")


def lost_stop36(self):
    """This stop's forms, on inputs that change between calls (variant 1): a row stored and an
    element of it at a per-iteration column; `if`/`else` stores of one element merged (nests,
    elif chains, constants a narrow dtype may refuse); mask stores into the loop's own row
    (after a store of the row, masks reading it); stores into the outer row from an inner loop
    (conditional, after a break, counters, constants, the indices as values); a per-iteration
    number over a tensor and a tensor's power of one; shape reads of a written tensor."""
    self.variants = True
    n, d = max(self.n, 2), max(self.d, 2)
    form = self.pick(["rowpart", "merged", "merged", "rowmask", "rowmask", "inner", "inner", "inner", "rdiv", "meta"])
    dt = self.pick(["float32", "float32", "float64"])
    it = self.pick(["int64", "int64", "int32", "int8", "uint8"])
    if form == "rowpart":
        self.param("y", f"torch.randint(0, {d}, ({n},), generator=g) - (0 if variant == 0 else {self.pick([0, d, 1])})")
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        tdt = self.pick([dt, it])
        self.emit(1, f"out = torch.{self.pick(['empty', 'zeros'])}({n}, {d}, dtype=torch.{tdt})")
        self.emit(1, "for i in range(x.shape[0]):")
        first = self.pick(["out[i].fill_(0.1)", "out[i] = x[i] * 2", "out[i] = 3"])
        second = self.pick(["out[i, y[i]] = 1.5", "out[i, y[i]] = x[i].sum()", "out[i, y[i]] = -7"])
        for line in ([first, second] if self.chance(0.7) else [second, first]):
            self.emit(2, line)
        if self.chance(0.3):
            self.emit(2, "out[i, y[i] - 1] = 0")
        self.emit(1, "return out")
        return
    if form == "merged":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}) * (1 if variant == 0 else 4)")
        tdt = self.pick([dt, it, "float64"])
        a, b, c = (self.pick(["x[i, j] * 2", "1", "-100", "0.5", "300", "x[i, j].abs()", "float('nan')"]) for _ in range(3))
        self.emit(1, f"out = torch.zeros({n}, {d}, dtype=torch.{tdt})")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, "for j in range(x.shape[1]):")
        self.emit(3, "if x[i, j] > 0.5:")
        self.emit(4, f"out[i, j] = {a}")
        if self.chance(0.5):
            self.emit(3, "elif x[i, j] < -1:")
            self.emit(4, f"out[i, j] = {c}")
        self.emit(3, "else:")
        self.emit(4, f"out[i, j] = {b}")
        self.emit(1, "return out")
        return
    if form == "rowmask":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}) * (1 if variant == 0 else 3)")
        tdt = self.pick([dt, it])
        self.emit(1, f"out = torch.zeros({n}, {d}, dtype=torch.{tdt})")
        self.emit(1, "for i in range(x.shape[0]):")
        if self.chance(0.6):
            self.emit(2, self.pick(["out[i] = x[i] * 3", "out[i] = torch.cumsum(x[i], 0) - 1", "out[i].fill_(2)"]))
        mask = self.pick(["x[i] > 0", "out[i] < 0", "(x[i] > 1) | (x[i] < -1)", "torch.isnan(x[i])", "~(x[i] > 0)"])
        self.emit(2, f"out[i][{mask}] = {self.pick(['0', '-100', '2.5', 'x[i].max()', '300'])}")
        if self.chance(0.3):
            self.emit(2, f"out[i][out[i] == 0] = {self.pick(['1', '0.5'])}")
        self.emit(1, "return out")
        return
    if form == "inner":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}) * (1 if variant == 0 else 5)")
        tdt = self.pick([dt, it, "int64"])
        what = self.pick(["ifexp", "count", "break", "index", "tensor", "cond"])
        self.emit(1, f"out = torch.{self.pick(['zeros', 'ones'])}({n}, {d}, dtype=torch.{tdt})")
        self.emit(1, "for i in range(x.shape[0]):")
        if what == "count":
            self.emit(2, "c = 0")
        self.emit(2, f"for j in range({self.pick(['x.shape[1]', 'x.shape[1] - 1', '1, x.shape[1]'])}):")
        if what == "ifexp":
            self.emit(3, f"out[i, j] = {self.pick(['x[i, j]', 'x[i, j] * 2'])} if x[i, j] > 0 else {self.pick(['-100', '0.5', '300', '1e10'])}")
        elif what == "count":
            self.emit(3, "if x[i, j] > 0:")
            self.emit(4, "out[i, j] = c")
            self.emit(4, "c += 1")
        elif what == "break":
            self.emit(3, "if x[i, j] < -1.5:")
            self.emit(4, "break")
            self.emit(3, "out[i, j] = x[i, j] * 2")
        elif what == "index":
            self.emit(3, f"out[i, j] = {self.pick(['i + j', 'i * 40 + j', 'j'])}")
        elif what == "tensor":
            self.emit(3, "out[i, j] = x[i, j] - x[i].mean()")
        else:
            self.emit(3, "if x[i, j] > 0:")
            self.emit(4, f"out[i, j] = {self.pick(['x[i, j]', '7', 'x[i, j].item()'])}")
        if self.chance(0.4):
            self.emit(2, "out[i, -1] = -1")
        self.emit(1, "return out")
        return
    if form == "rdiv":
        ydt = self.pick([dt, it, "float64"])
        self.param("y", f"(torch.randint(1, 100, ({n},), generator=g) * (1 if variant == 0 else 3)).to(torch.{ydt})")
        self.param("x", f"_tensor(g, ({n},), torch.{dt}) * (1 if variant == 0 else 1e30)")
        value = self.pick(["x[i].item() / y[i]", "i / y[i]", "(i + 0.5) / y[i]", "x[i] ** (i / 2)",
                           "torch.pow(y[i], i - 1)", "y[i] ** x[i].item()", "300 / y[i]"])
        self.emit(1, "out = []")
        self.emit(1, "for i in range(y.shape[0]):")
        self.emit(2, f"out.append({value})")
        self.emit(1, "return torch.stack(out)")
        return
    self.param("y", f"_tensor(g, ({n}, {d}), torch.{dt})")
    self.param("e", self.pick(["0.1", "0.0", "2"]))
    self.emit(1, "for i in range(y.shape[0]):")
    self.emit(2, self.pick(["y[i] = y[i] * (1 - e) + e / y.shape[1]", "y[i] = y[i].to(y.dtype) * y.ndim"]))
    self.emit(1, "return y")


def lost_stop35(self):
    """This stop's forms, on inputs that change between calls (variant 1): mask stores into a
    tensor the iteration made (values of several kinds and dtypes), named selections reduced
    and counted (empty ones included), `*_like` factories beside the index as a number,
    while loops counting down, reads only later iterations write (steps of either sign), and
    inner loops that branch on the data or end with `break` (ints, bools, tensors carried)."""
    self.variants = True
    n, d = max(self.n, 2), max(self.d, 2)
    form = self.pick(["mask", "mask", "select", "like", "down", "ahead", "ahead", "inner", "inner", "inner"])
    dt = self.pick(["float32", "float32", "float64"])
    if form == "mask":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}) * (1 if variant == 0 else 3)")
        make = self.pick(["x[i].clone()", "x[i] * 2", f"torch.zeros({d}, dtype=torch.long)",
                          f"torch.zeros({d}, dtype=torch.uint8)", "x[i] > 0"])
        mask = self.pick(["r > 0", "x[i] < -0.5", "(x[i] > 1) | (x[i] < -1)", "~(x[i] > 0)"])
        value = self.pick(["0", "-1.5", "True", "2.7", "x[i].max()", "x[i][:2]", "300"])
        self.emit(1, "out = []")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, f"r = {make}")
        self.emit(2, f"r[{mask}] = {value}")
        if self.chance(0.4):
            self.emit(2, f"r[{self.pick(['x[i] > 2', 'r == 0'])}] = {self.pick(['1', '0.5'])}")
        self.emit(2, "out.append(r)")
        self.emit(1, "return torch.stack(out)")
        return
    if form == "select":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        self.param("m", f"torch.rand({n}, {d}, generator=g) > (0.3 if variant == 0 else 0.9)")
        self.emit(1, f"out = torch.zeros({n}, dtype=torch.{dt})")
        self.emit(1, "tot, cnt = 0.0, 0")
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, self.pick(["v = x[i][m[i]]", "v = x[i][~m[i]]", "v = x[i][x[i] > 0]"]))
        use = self.pick([["out[i] = v.sum() / max(v.numel(), 1)"], ["out[i] = len(v)"],
                         ["tot = tot + v.sum()", "cnt += v.numel()"], ["out[i] = v.max() - v.min()"]])
        for line in use:
            self.emit(2, line)
        self.emit(1, "return out, tot, cnt")
        return
    if form == "like":
        self.param("p", f"torch.arange({d})")
        self.param("q", f"{n} if variant == 0 else {n + 3}")
        fn = self.pick(["torch.full_like(rel, 3)", "torch.ones_like(rel) * 2", "torch.zeros_like(rel, dtype=torch.float64)",
                        f"torch.full_like(rel, 2.5, dtype=torch.{dt})"])
        self.emit(1, "out = []")
        self.emit(1, "for i in range(q):")
        self.emit(2, "rel = p - i")
        self.emit(2, f"out.append(torch.maximum(rel.abs(), {fn}))")
        self.emit(1, "return torch.stack(out)")
        return
    if form == "down":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        self.param("s", f"{n - 1} if variant == 0 else {self.pick([-1, 0, n - 2])}")
        step = self.pick(["1", "1", "2"])
        test = self.pick(["t >= 0", "t > 0", "t >= 1"])
        body = self.pick([["out[t] = x[t] * 2 + t"], ["g = x[t] + 0.5 * g", "out[t] = g"]])
        self.emit(1, "out = torch.zeros_like(x)")
        self.emit(1, f"g = torch.zeros({d}, dtype=torch.{dt})")
        self.emit(1, "t = s")
        self.emit(1, f"while {test}:")
        for line in body:
            self.emit(2, line)
        self.emit(2, f"t -= {step}")
        self.emit(1, "return out, t")
        return
    if form == "ahead":
        self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt})")
        self.param("a", self.pick(["0.97", "-0.5", "2"]))
        rng, body = self.pick([
            ("range(x.shape[0] - 1, 0, -1)", "y[t] -= a * y[t - 1]"),
            ("range(x.shape[0] - 1, -1, -1)", "y[t] -= a * y[t - 1]"),
            ("range(x.shape[0] - 1)", "y[t] = y[t + 1] - a * y[t]"),
            ("reversed(range(1, x.shape[0]))", "y[t] = y[t] - y[t - 1] * a"),
            ("range(x.shape[0] - 1, 1, -2)", "y[t] = y[t - 1] * a + torch.tanh(y[t - 2])"),
            ("range(1, x.shape[0])", "y[t] = y[t] - a * y[t - 1]"),
            ("range(x.shape[0] - 2)", "y[t] = y[t + 2] * a + y[t + 1]"),
            ("range(x.shape[0] - 1, 0, -1)", "y[:, 0] = y[:, 0] * 1"),
        ])
        self.emit(1, self.pick(["y = x.clone()", "y = x"]))
        self.emit(1, f"for t in {rng}:")
        self.emit(2, body)
        self.emit(1, "return y")
        return
    self.param("x", f"_tensor(g, ({n}, {d}), torch.{dt}) * (1 if variant == 0 else 2)")
    self.param("th", self.pick(["0.5", "1.0", "-5.0"]))
    what = self.pick(["search", "count", "best", "acc", "flag"])
    self.emit(1, f"out = torch.zeros({n}, dtype=torch.{dt})")
    self.emit(1, f"ks = torch.zeros({n}, dtype=torch.long)")
    self.emit(1, "for i in range(x.shape[0]):")
    if what == "search":
        self.emit(2, f"b = {d}")
        self.emit(2, f"for k in range({d}):")
        self.emit(3, "if x[i, k] > th:")
        self.emit(4, "b = k")
        self.emit(4, "break")
        self.emit(2, "ks[i] = b")
    elif what == "count":
        self.emit(2, "c = 0")
        self.emit(2, f"for k in range({d}):")
        self.emit(3, "if x[i, k] > th:")
        self.emit(4, "c += 1")
        if self.chance(0.6):
            self.emit(4, "if c > 2:")
            self.emit(5, "break")
        self.emit(2, "ks[i] = c")
    elif what == "best":
        self.emit(2, "best, at = x[i, 0], 0")
        self.emit(2, f"for k in range(1, {d}):")
        self.emit(3, "if x[i, k] > best:")
        self.emit(4, "best, at = x[i, k], k")
        self.emit(2, "out[i] = best")
        self.emit(2, "ks[i] = at")
    elif what == "acc":
        self.emit(2, f"acc = torch.zeros((), dtype=torch.{dt})")
        self.emit(2, f"for k in range({d}):")
        self.emit(3, "if x[i, k] < th:")
        self.emit(4, "break")
        self.emit(3, self.pick(["acc += x[i, k]", "acc = acc * 0.5 + x[i, k]", "acc -= 1"]))
        self.emit(2, "out[i] = acc")
    else:
        self.emit(2, "found = False")
        self.emit(2, f"for k in range({d}):")
        self.emit(3, "if x[i, k] > th:")
        self.emit(4, "found = True")
        self.emit(3, "elif found:")
        self.emit(4, "break")
        self.emit(2, "ks[i] = found")
    self.emit(1, "return out, ks")


def lost_stop33(self):
    """This stop's forms, on inputs that change between calls (variant 1: other values of the same
    shapes, sometimes ones the fast forms must refuse): lists of tensors indexed by the loop
    (offsets, kept elements, inference or grad elements), indices read only as `c * i` (bounds of
    narrow integer types), rows picked by one integer per iteration (evenly or not), vector
    scatters (repeated columns, dtypes), whole-body span fills, a row stored on the sides of a
    branch (views bound on a side), `torch.tensor` of numbers."""
    self.variants = True
    n, d = max(self.n, 2), max(self.d, 2)
    form = self.pick(["list", "list", "scaled", "pick", "scatter", "fill", "sides", "numbers"])
    dt = self.pick(["float32", "float32", "float64"])
    if form == "list":
        grad = not self.no_grad and self.chance(0.2)
        self.param("xs", f"[t.detach().requires_grad_({grad}) for t in _tensor(g, ({n}, {d}), torch.{dt}).unbind(0)]")
        if self.chance(0.15):
            self.inputs.append("if variant:\n        k = len(xs) // 2\n        xs[k] = xs[k].detach().double().requires_grad_(xs[k].requires_grad)")
        o = self.pick([0, 1, 1, -1])
        what = self.pick(["store", "acc", "keep", "keep_view"])
        lo, hi = (1, "len(xs)") if o < 0 else (0, f"len(xs) - {o}" if o else "len(xs)")
        idx = "t" if o == 0 else f"t + {o}" if o > 0 else "t - 1"
        if what == "store":
            self.emit(1, f"out = torch.zeros(len(xs), {d}, dtype=torch.{dt})")
            self.emit(1, f"for t in range({lo}, {hi}):")
            self.emit(2, f"out[t] = xs[{idx}] * 2 - xs[t]")
            self.emit(1, "return out")
        elif what == "acc":
            self.emit(1, "total = 0.0")
            self.emit(1, f"for t in range({lo}, {hi}):")
            self.emit(2, f"total = total + (xs[{idx}] * xs[t]).sum()")
            self.emit(1, "return total")
        else:
            self.emit(1, "kept = []")
            self.emit(1, f"for t in range({lo}, {hi}):")
            self.emit(2, f"kept.append(xs[{idx}]{'.view(-1)' if what == 'keep_view' else ''})")
            self.emit(1, "if kept:")
            self.emit(2, "kept[0].mul_(3)")
            self.emit(1, "return kept, xs")
        return
    if form == "scaled":
        c = self.pick([2, 2, 3])
        far = self.chance(0.25)      # (bounds past 128: a uint8 bound's product by c wraps in uint8)
        self.param("x", f"_tensor(g, ({c * (n + (140 if far else 0)) + 2},), torch.{dt})")
        bound = self.pick(["n", "torch.tensor(n, dtype=torch.uint8)", "torch.tensor(n)", "n - 1"])
        self.param("n", f"{n} if variant == 0 else {max(n - 1, 1)}")
        args = self.pick([f"{bound}", f"1, {bound}", f"0, {bound}, 2", f"{bound} - 1, -1, -1"])
        if far:
            self.inputs.append("n = n + 130")
            self.param("a", f"torch.tensor(n - {self.pick([1, 3])}, dtype=torch.uint8)")
            self.param("b", "torch.tensor(n, dtype=torch.uint8) if variant == 0 else n")
            args = self.pick(["a, n", "a, b"])
        self.emit(1, "out = torch.zeros(x.shape[0])")
        self.emit(1, f"for i in range({args}):")
        self.emit(2, f"out[{c} * i + 1] = x[{c} * i] * {c} + (i * {c}) ** 0.5")
        if self.chance(0.2):
            self.emit(1, "return out, i")
        else:
            self.emit(1, "return out")
        return
    if form == "pick":
        self.param("x", f"_tensor(g, ({n + 3}, {d}), torch.{dt})")
        even = f"torch.arange(0, {n + 3}, 2)[:{(n + 4) // 2}]"
        self.param("idx", f"{even} if variant == 0 else torch.randint(-{n}, {n + 3}, ({(n + 4) // 2},), generator=g)")
        what = self.pick(["store", "keep", "col"])
        if what == "keep":
            self.emit(1, "kept = []")
            self.emit(1, "for i in range(idx.shape[0]):")
            self.emit(2, "kept.append(x[idx[i]])")
            self.emit(1, "if kept:")
            self.emit(2, "kept[-1].add_(1)")
            self.emit(1, "return kept, x")
        else:
            self.emit(1, f"out = torch.zeros(idx.shape[0], {n + 3 if what == 'col' else d}, dtype=torch.{dt})")
            self.emit(1, "for i in range(idx.shape[0]):")
            self.emit(2, "out[i] = x[idx[i]] * 2" if what == "store" else "out[i] = x.t()[:, idx[i] % x.shape[1]].sum() + x[:, 0]")
            self.emit(1, "return out")
        return
    if form == "scatter":
        k = self.pick([1, 2, 3])
        vdt = self.pick([dt, dt, dt, "float64", "int64"])
        self.param("out", f"torch.zeros({n}, {k + 3}, dtype=torch.{dt})")
        self.param("cols", f"torch.stack([torch.randperm({k + 3}, generator=g)[:{k}] for _ in range({n})]) if variant == 0 "
                           f"else torch.randint(-{k + 3}, {k + 3}, ({n}, {k}), generator=g)")
        self.param("v", f"_tensor(g, ({n}, {k}), torch.{vdt})")
        self.no_grad = True
        op = self.pick(["=", "+=", "= out[i, cols[i]] +"])
        val = self.pick(["v[i]", "1.5", "v[i] * 2"])
        if op == "= out[i, cols[i]] +":
            stmt = f"out[i, cols[i]] = out[i, cols[i]] + {val}"
        else:
            stmt = f"out[i, cols[i]] {op} {val}"
        self.emit(1, "for i in range(cols.shape[0]):")
        if self.chance(0.3):
            self.emit(2, "if v[i].sum() > 0:")
            self.emit(3, stmt)
        else:
            self.emit(2, stmt)
        self.emit(1, "return out")
        return
    if form == "fill":
        big = self.chance(0.5)
        rows, T, D = (n, 30, 70) if big else (n, 5, 2)
        self.param("t", f"_tensor(g, ({rows}, {T}, {D}), torch.{self.pick([dt, 'int8', 'float16'])})")
        self.param("L", f"torch.randint(0, {T + 1}, ({rows},), generator=g) if variant == 0 else "
                        f"torch.randint(-{T}, {T + 3}, ({rows},), generator=g)")
        self.no_grad = True
        v = self.pick(["-1e9", "0", "7", "-1", "1000"])
        span = self.pick(["L[i]:", ":L[i]", "L[i]:, 1", "1:L[i], :"])
        rng = self.pick(["range(t.shape[0])", "range(t.shape[0] - 1, -1, -1)", "range(0, t.shape[0], 2)"])
        self.emit(1, f"for i in {rng}:")
        self.emit(2, f"t[i, {span}] = {v}")
        self.emit(1, "return t")
        return
    if form == "sides":
        self.param("x", f"_tensor(g, ({n},), torch.{dt})")
        self.param("y", f"torch.zeros({n}, dtype=torch.{dt})")
        self.param("c", f"_tensor(g, ({n},), torch.float32)")
        self.no_grad = True
        view = self.pick(["", "after", "inside", "each"])
        self.emit(1, "for i in range(x.shape[0]):")
        self.emit(2, "if c[i] > 0.5:")
        if view:
            self.emit(3, "r = x[i]")          # (a view: it shows the store below)
            self.emit(3, "x[i] = r * 2")
            if view == "inside":
                self.emit(3, "y[i] = r")
        else:
            self.emit(3, "x[i] = -x[i]")
        if view == "each":
            self.emit(2, "else:")
            self.emit(3, "r = -x[i]")
            self.emit(3, "x[i] = r")
            self.emit(2, "y[i] = r + 1")
        else:
            self.emit(2, "elif c[i] < -0.5:")
            self.emit(3, "x[i] = 1 - x[i]")
            if view == "after":
                self.emit(2, "else:")
                self.emit(3, "r = x[i] * 1")
                self.emit(2, "y[i] = r + 1")
        self.emit(1, "return x, y")
        return
    self.param("x", f"_tensor(g, ({n}, 4), torch.{dt})")
    elems = self.pick(["[a, b, a + b, 1.0]", "[int(a), 2, True]", "(a > 0, b < 0)", "[a, b]"])
    kw = self.pick(["", "", ", dtype=torch.float64"]) if "int(" not in elems and ">" not in elems else ""
    self.emit(1, "rows = []")
    self.emit(1, "for i in range(x.shape[0]):")
    self.emit(2, "a, b = x[i, 0].item() * 1e6, x[i, 1].item()")
    self.emit(2, f"rows.append(torch.tensor({elems}{kw}) * 2)")
    self.emit(1, "return torch.stack(rows) if rows else None")


LOST_FORMS = {"stop52": lost_stop52, "stop51": lost_stop51, "stop50": lost_stop50, "stop49": lost_stop49, "stop48": lost_stop48, "stop47": lost_stop47, "stop46": lost_stop46, "stop44": lost_stop44, "stop43": lost_stop43, "stop42": lost_stop42, "stop41": lost_stop41, "stop40": lost_stop40, "stop39": lost_stop39, "stop38": lost_stop38, "stop37": lost_stop37, "stop36": lost_stop36, "stop35": lost_stop35, "stop34": lost_stop34, "stop33": lost_stop33, "interleaved": lost_interleaved, "chained_scan": lost_chained_scan, "guarded_ahead": lost_guarded_ahead, "branch_mix": lost_branch_mix, "branch_continue": lost_branch_continue, "sunk_appends": lost_sunk_appends, "number_branch": lost_number_branch, "stored_rec": lost_stored_rec, "compaction": lost_compaction, "while_and": lost_while_and,
              "sum_terms": lost_sum_terms, "scatter_reduce": lost_scatter_reduce, "kept_rows": lost_kept_rows,
              "two_way": lost_two_way, "element_views": lost_element_views, "reversed_build": lost_reversed_build,
              "unbind_walk": lost_unbind_walk}

# family "ints": the same forms with narrow integer data (int32, int16, uint8) beside int64:
# a Python int or a 0-d int64 value does not widen them, a batch of int64 values would
INTS_FORMS = {**VEC_FORMS, **NEW_VEC_FORMS}
BREAK_FORMS = {"break": Gen.exact_break, "break_rich": Gen.exact_break_rich,
               "break_elements": Gen.exact_break_elements, "break_budget": Gen.exact_break_budget,
               "break_sites": Gen.exact_break_sites}
FAMILIES = {"default": None, "rec": REC_FORMS, "compile": COMPILE_FORMS, "scan2": SCAN2_FORMS, "brk": BREAK_FORMS,
            "store2": STORE2_FORMS, "nums": NUMS_FORMS, "fill": FILL_FORMS, "half": HALF_FORMS,
            "ints": INTS_FORMS, "rows": ROWS_FORMS, "win": WIN_FORMS, "meth": METH_FORMS, "lost": LOST_FORMS}
REC_KINDS = [f"rec/{k}" for k in REC_FORMS]
COMPILE_KINDS = [f"compile/{k}" for k in COMPILE_FORMS]


def generate(seed: int, kind: str | None = None, family: str = "default") -> Program:
    """The program for `seed` (optionally forcing its form): same seed, same source.
    `family`: "default" (the vec/ and exact/ forms), "rec", "compile", "scan2" or "brk"."""
    gen = Gen(seed)
    if kind is None and family != "default":
        forms = FAMILIES[family]
        kinds = [f"{family}/{k}" for k in sorted(forms) for _ in range(FORM_WEIGHTS.get(f"{family}/{k}", 1))]
        kind = random.Random(f"autovec-fuzz-{family}-{seed}").choice(kinds)
    elif kind is None:
        side = random.Random(f"autovec-fuzz-new-forms-{seed}")   # str seeds hash the same in every process
        if side.random() < NEW_SHARE:
            vec = side.random() < 0.65
            forms = NEW_VEC_FORMS if vec else NEW_EXACT_FORMS
            kind = ("vec/" if vec else "exact/") + side.choice(sorted(forms))
        else:
            vec = gen.chance(0.7)
            forms = VEC_FORMS if vec else EXACT_FORMS
            kind = ("vec/" if vec else "exact/") + gen.pick(sorted(forms))
    family, form = kind.split("/")
    if family in ("rec", "compile", "scan2", "brk", "store2", "nums", "fill", "half", "ints", "rows", "win", "meth",
                  "lost"):
        table = FAMILIES[family]
    else:
        table = {**VEC_FORMS, **NEW_VEC_FORMS} if family == "vec" else {**EXACT_FORMS, **NEW_EXACT_FORMS}
    if family in ("half", "ints"):
        global FLOATS, INTS
        saved = FLOATS, INTS
        if family == "half":
            FLOATS = ("float16", "bfloat16", "float32")      # every form's floating dtypes, this program only
        else:
            INTS = ("int32", "int16", "uint8", "int64")
        try:
            table[form](gen)
        finally:
            FLOATS, INTS = saved
    else:
        table[form](gen)
    return Program(seed, kind, gen.source(kind))
