"""Tests for the pytest plugin: `--autovec-check` and the `autovec_check` marker."""
from __future__ import annotations

pytest_plugins = ["pytester"]

import importlib.metadata
import importlib.util
import pathlib
import subprocess
import sys

import pytest

from autovec._config import switches

REPO = pathlib.Path(__file__).resolve().parents[1]

# Each inner test asserts what it sees; the inner runs happen in this process, so the
# outer test can also see whether the switch is restored afterwards.
INNER_TESTS = """
import pytest
from autovec._config import switches

def test_plain():
    assert switches.check_override is {plain}

@pytest.mark.autovec_check
def test_marked():
    assert switches.check_override is True

def test_plain_after_marked():
    assert switches.check_override is {plain}
"""


def plugin_args() -> list[str]:
    """Load the plugin explicitly unless its entry point already does (installed package)."""
    installed = any(ep.value == "autovec.pytest_plugin"
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "autovec.pytest_plugin"]


@pytest.fixture
def inner(pytester, monkeypatch):
    pytester.syspathinsert(REPO)  # the inner run imports autovec from this checkout
    monkeypatch.setattr(switches, "check_override", None)

    def run(*args, plain="None"):
        pytester.makepyfile(INNER_TESTS.format(plain=plain))
        return pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", *args)
    return run


def test_marker_sets_switch_only_around_the_marked_test(inner):
    inner("--strict-markers").assert_outcomes(passed=3)
    assert switches.check_override is None


def test_option_sets_switch_for_the_session_and_restores_it(inner):
    inner("--autovec-check", plain="True").assert_outcomes(passed=3)
    assert switches.check_override is None


def test_previous_value_is_restored(inner):
    switches.check_override = False
    inner(plain="False").assert_outcomes(passed=3)
    assert switches.check_override is False
    inner("--autovec-check", plain="True").assert_outcomes(passed=3)
    assert switches.check_override is False


def test_switch_restored_when_marked_test_fails(pytester, inner):
    pytester.makepyfile(test_fails="""
        import pytest

        @pytest.mark.autovec_check
        def test_boom():
            raise RuntimeError("boom")
    """)
    inner("test_fails.py").assert_outcomes(failed=1)
    assert switches.check_override is None


def test_option_and_marker_are_documented(pytester):
    pytester.syspathinsert(REPO)
    help_text = pytester.runpytest(*plugin_args(), "--help").stdout.str()
    assert "--autovec-check" in help_text
    markers = pytester.runpytest(*plugin_args(), "--markers").stdout.str()
    assert "@pytest.mark.autovec_check:" in markers


def test_plugin_module_imports_nothing_heavy():
    # Load the file on its own, so the check covers the plugin and not the package __init__.
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('plugin', {str(REPO / 'autovec' / 'pytest_plugin.py')!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "heavy = [m for m in ('torch', 'numpy', 'autovec') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd="/")


def test_naming_the_plugin_explicitly_loads_it_once(inner):
    # (the entry point is named after the module: `-p autovec.pytest_plugin`, or a conftest's
    # `pytest_plugins`, beside the installed entry point, is one plugin, not a registration error;
    # probeK)
    for extra in ([], ["-p", "autovec.pytest_plugin"], ["-p", "autovec.pytest_plugin"]):
        inner(*extra, "--autovec-check", plain="True").assert_outcomes(passed=3)
    assert switches.check_override is None
