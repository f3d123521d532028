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


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none): a library's error, fit for
    a one-line ConfigError."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
