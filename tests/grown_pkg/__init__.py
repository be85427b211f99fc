"""A package of the program whose submodule holds a list (tests/test_grown_list_aliases.py)."""
from . import sub  # noqa: F401
