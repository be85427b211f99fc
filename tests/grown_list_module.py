"""A module of the program holding a list (tests/test_grown_list_aliases.py: a list the loop grows,
read in the loop as this module's attribute)."""
LOG: list = []
