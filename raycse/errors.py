"""The one exception type that the command line turns into a one-line error.

Anything the user can get wrong (a flag, a key of a space file, a path, a hyperparameter out of range)
raises `ConfigError` with a message that names the culprit and what is allowed. `raycse.cli` prints it as
`raycse: error: <message>` and exits with status 2, with no traceback unless `--debug` is given.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input: the message names the culprit (flag, key or path) and the allowed values.

    `key` is the setting at fault when there is one (a TrainConfig field or a loss hyperparameter), so the
    command line can name the flag the user typed rather than the field behind it.
    """

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key

    @classmethod
    def at(cls, key: str, detail: str) -> ConfigError:
        """'<key>: <detail>', remembering the key."""
        return cls(f"{key}: {detail}", key=key)


QUOTE_LIMIT = 200  # characters of a user's value that an error message quotes


def shown(value, limit: int = QUOTE_LIMIT) -> str:
    """`repr(value)` for an error message, cut to about `limit` characters (its start and its end, where a path's
    file name is): a message quotes what the user gave, never all of a ten-million-character value."""
    if isinstance(value, str) and len(value) > limit:
        head, tail = limit * 2 // 3, limit // 3
        return f"{value[:head]!r}...{value[-tail:]!r} ({len(value):,} characters)"
    try:
        text = repr(value)
    except ValueError:  # an integer beyond Python's 4300 digits of text
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    if len(text) > limit:
        return f"{text[:limit]}... ({type(value).__name__}, {len(text):,} characters as text)"
    return text


def one_line(text: str, limit: int = 1000) -> str:
    """A message as one printable line of about `limit` characters at most: an over-long middle is cut, and line
    breaks and other control characters (a file name may hold them) are escaped."""
    if len(text) > limit:
        head, tail = limit * 2 // 3, limit // 4
        text = f"{text[:head]} ...[{len(text) - head - tail:,} characters cut]... {text[-tail:]}"
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class RunFailed(Exception):
    """A run that had started failed, for a reason its message states whole (what was done, what was not, what to do
    next): the command line prints it as it is, without the exception's type, and exits with status 1."""


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none): a library's error, fit for
    a one-line ConfigError."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
