"""Process-wide switches read by the runtime: environment variables and the pytest plugin."""
from __future__ import annotations

import os


_RAW = getattr(os.environ, "_data", None)   # CPython's backing dict: a lookup without re-encoding
_RAW_DICT = _RAW if isinstance(_RAW, dict) else None


_KEYS: dict = {}


def env(name: str) -> str:
    """An environment variable, read on every call (tests and users may set it at run time);
    a dictionary lookup on the hot path (the encoded key is computed once)."""
    if isinstance(_RAW, dict):
        key = _KEYS.get(name)
        if key is None:
            key = _KEYS[name] = os.fsencode(name) if os.name != "nt" else name.upper()
        v = _RAW.get(key)
        if v is None:
            return ""
        return os.fsdecode(v) if isinstance(v, bytes) else v
    return os.environ.get(name, "")


def unset(name: str) -> bool:
    """True when the variable is certainly not set: one dictionary lookup (the hot path's question)."""
    if isinstance(_RAW, dict):
        key = _KEYS.get(name)
        if key is None:
            key = _KEYS[name] = os.fsencode(name) if os.name != "nt" else name.upper()
        return _RAW.get(key) is None
    return False


def key(name: str):
    """The key of `name` in the environment's backing dictionary (_RAW_DICT)."""
    return os.fsencode(name) if os.name != "nt" else name.upper()


_FALSE = ("", "0", "false", "no", "off")
_DISABLE_KEY = os.fsencode("AUTOVEC_DISABLE") if os.name != "nt" else "AUTOVEC_DISABLE"
_CHECK_KEY = os.fsencode("AUTOVEC_CHECK") if os.name != "nt" else "AUTOVEC_CHECK"


def _env_flag(name: str) -> bool:
    v = env(name)
    return bool(v) and v.strip().lower() not in _FALSE


class _Switches:
    """Mutable switches. `check_override` is set by the pytest plugin (None: not set)."""

    def __init__(self) -> None:
        self.check_override: bool | None = None

    def plain(self) -> bool:
        """Neither AUTOVEC_DISABLE nor checking is on (the hot path's one question)."""
        if _RAW_DICT is not None and _RAW_DICT.get(_DISABLE_KEY) is None and (
                self.check_override is False or self.check_override is None and _RAW_DICT.get(_CHECK_KEY) is None):
            return True   # neither variable is set: two dictionary lookups
        return not self.disabled and not self.check

    @property
    def disabled(self) -> bool:
        return _env_flag("AUTOVEC_DISABLE")

    @property
    def check(self) -> bool:
        if self.check_override is not None:
            return self.check_override
        return _env_flag("AUTOVEC_CHECK")


switches = _Switches()
