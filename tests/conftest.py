import copy
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CASES = Path(os.environ.get("AUTOVEC_CASES", ROOT.parent / "shared" / "cases"))


def case_paths():
    if not CASES.is_dir():
        return []
    return sorted(p for p in CASES.glob("*.py") if not p.name.startswith(("_", "verify")))


def load_case(path: Path):
    name = f"avcase_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def clone(x):
    return copy.deepcopy(x)


def ran_modes(fast) -> set:
    """How the vectorized loops of an @autovec function ran ("batched", "vmap", "broadcast",
    "direct"): each loop's last vectorized run that was not followed by a fall-back to the loop
    (runtime.failed forgets the mode); empty when every loop kept Python."""
    rt = fast._autovec_state.runtime
    return set(rt.ran.values()) if rt is not None else set()


def raises_as_loop(exc, fn, *args):
    """Call `fn` and `autovec(fn)` on the same arguments: both must raise `exc` with the same
    message. Returns autovec's pytest.ExceptionInfo (for checks of its traceback)."""
    import pytest
    from autovec import autovec
    with pytest.raises(exc) as want:
        fn(*args)
    with pytest.raises(exc) as got:
        autovec(fn)(*args)
    assert str(got.value) == str(want.value)
    return got


def outcome(fn, *args):
    """fn(*args), or (its exception's type, message): what a call gives, errors included."""
    try:
        return fn(*args)
    except Exception as e:      # noqa: BLE001 (the loop's own error is the expected outcome)
        return (type(e), str(e))
