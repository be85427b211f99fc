"""Process-wide switches read by the runtime: environment variables and the pytest plugin."""
from __future__ import annotations

import os


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


class _Switches:
    """Mutable switches. `check_override` is set by the pytest plugin (None: not set)."""

    def __init__(self) -> None:
        self.check_override: bool | None = None

    @property
    def disabled(self) -> bool:
        return _env_flag("AUTOVEC_DISABLE")

    @property
    def check(self) -> bool:
        if self.check_override is not None:
            return self.check_override
        return _env_flag("AUTOVEC_CHECK")


switches = _Switches()
