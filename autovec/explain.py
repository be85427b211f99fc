"""The report a person reads: every loop, the strategy chosen and why, the rewrite, a diff."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LoopReport:
    lineno: int
    source: str
    strategy: str
    reason: str
    ran: str = ""      # with arguments: how that call ran the vectorized loop (batched body, vmap, ...)

    @property
    def vectorized(self) -> bool:
        return self.strategy not in ("compile", "python")


@dataclass
class Explanation:
    function: str
    loops: list[LoopReport]
    rewritten_source: str
    diff: str
    path: str | None = None
    estimate: dict | None = None
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        out = [f"autovec: {self.function}"]
        if not self.loops:
            out.append("  no loops found")
        for r in self.loops:
            first = r.source.splitlines()[0] if r.source else ""
            out.append(f"  line {r.lineno}: {first}")
            out.append(f"    strategy: {r.strategy}" + (" (vectorized)" if r.vectorized else "")
                       + (f"; this call ran it as {r.ran}" if r.ran else ""))
            out.append(f"    reason:   {r.reason}")
        if self.path is not None:
            out.append(f"  a call with these arguments runs: {self.path}")
            if self.estimate:
                est = ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in self.estimate.items())
                out.append(f"  estimated: {est}")
        for note in self.notes:
            first, *rest = note.splitlines() or [""]
            out.append(f"  note: {first}")
            out.extend("      " + line for line in rest)
        if self.diff:
            out.append("  rewritten source:")
            out.extend("    " + line for line in self.rewritten_source.splitlines())
        return "\n".join(out)

    def _repr_pretty_(self, p, cycle):  # IPython
        p.text(str(self))
