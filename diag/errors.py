"""Errors that carry one readable line for the user."""


class ParseError(ValueError):
    """A bundle file is not what its name says. The message is one line: what is wrong, and where.

    The loader prefixes the file's bundle path, so parsers say only what they found, e.g.
    "not valid JSON: Expecting ',' delimiter at line 3 column 5" or "line 17: not a sample".
    """
