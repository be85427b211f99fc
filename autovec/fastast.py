"""`walk` and `clone`: ast.walk and copy.deepcopy of syntax trees, without their generic layers.

The analysis walks and copies the function's tree thousands of times on the first call; these
two were about a third of that call's time (ast.walk's nested generators, deepcopy's memo and
`__reduce_ex__`).
"""
from __future__ import annotations

import ast
import copy

_AST = ast.AST
_ATOMS = (str, int, float, bool, bytes, complex, type(None), type(Ellipsis))


def walk(node):
    """ast.walk: `node` and every node under it, in the same order (breadth first, each node's
    fields in order), reading only the fields `_fields` names."""
    todo = [node]
    i = 0
    while i < len(todo):
        n = todo[i]
        i += 1
        for f in n._fields:
            v = getattr(n, f, None)
            if isinstance(v, _AST):
                todo.append(v)
            elif type(v) is list:
                for x in v:
                    if isinstance(x, _AST):
                        todo.append(x)
        yield n


def clone(x):
    """copy.deepcopy of a tree, a list of trees, or anything else (which deepcopy copies).
    A node's fields and attributes are copied where they are nodes or lists; the rest are
    immutable (identifiers, constants, positions, and the `_av_` marks the analysis sets:
    strings, booleans, tuples of names) and are shared. Unlike deepcopy, a node reached twice
    is copied twice (nothing here relies on sharing within one copy)."""
    if isinstance(x, _AST):
        cls = x.__class__
        new = cls.__new__(cls)
        d = new.__dict__
        for k, v in x.__dict__.items():
            d[k] = clone(v) if isinstance(v, (_AST, list)) else v
        return new
    if type(x) is list:
        return [clone(v) if isinstance(v, (_AST, list)) else v if isinstance(v, _ATOMS) else copy.deepcopy(v)
                for v in x]
    return copy.deepcopy(x)
