"""pytest plugin: `--autovec-check` and the `autovec_check` marker turn on equivalence checking.

Loaded by every pytest run once autovec is installed (entry point `pytest11`), so it
imports nothing heavy: the switches module is imported only when checking is asked for.
"""
from __future__ import annotations

import pytest

_PREVIOUS = pytest.StashKey[object]()  # check_override before this session set it

_MARKER = ("autovec_check: run every autovec call in this test against the original "
           "function as well, raising EquivalenceError on any difference")


def _switches():
    from autovec._config import switches

    return switches


def pytest_addoption(parser) -> None:
    group = parser.getgroup("autovec")
    group.addoption(
        "--autovec-check", action="store_true", default=False, dest="autovec_check",
        help="check every autovec call against the original function "
             "(raise EquivalenceError on any difference)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", _MARKER)
    if config.getoption("autovec_check", default=False):
        switches = _switches()
        config.stash[_PREVIOUS] = switches.check_override
        switches.check_override = True


def pytest_unconfigure(config) -> None:
    if _PREVIOUS in config.stash:
        _switches().check_override = config.stash[_PREVIOUS]
        del config.stash[_PREVIOUS]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if item.get_closest_marker("autovec_check") is None:
        yield
        return
    switches = _switches()
    previous = switches.check_override
    switches.check_override = True
    try:
        yield  # an old-style wrapper receives the test's outcome, never its exception
    finally:
        switches.check_override = previous
