"""Errors that carry one readable line for the user."""

EXIT_CANNOT_ANALYZE = 3  # the exit code of a one-line error, and of an inconclusive verdict


class UserError(Exception):
    """Something the user can fix (a path, a flag, a file they wrote): the CLI prints the message as
    one line and exits 3, never a traceback."""


class ParseError(ValueError):
    """A bundle file is not what its name says. The message is one line: what is wrong, and where.

    The loader prefixes the file's bundle path, so parsers say only what they found, e.g.
    "not valid JSON: Expecting ',' delimiter at line 3 column 5" or "line 17: not a sample".
    """


def unexpected(error: Exception) -> str:
    """One line for an error no parser or fact builder foresaw: its kind and the start of its words."""
    words = " ".join(str(error).split())[:160]
    return f"unexpected content ({type(error).__name__}{': ' + words if words else ''})"
