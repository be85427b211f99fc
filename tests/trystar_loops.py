"""A loop nest inside `try` / `except*` (Python 3.11 syntax: imported by the tests that need it)."""


def element_read_in_except_star(pos, neg):
    c = 0.0
    try:
        for p in pos:
            for q in neg:
                c += p * q
        raise ValueError("x")
    except* ValueError:
        c = c + p
    return c
