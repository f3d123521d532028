"""The one exception type that the command line turns into a one-line error.

Anything the user can get wrong (a flag, a key of a space file, a path, a hyperparameter out of range)
raises `ConfigError` with a message that names the culprit and what is allowed. `raycse.cli` prints it as
`raycse: error: <message>` and exits with status 2, with no traceback unless `--debug` is given.
"""


class ConfigError(ValueError):
    """Bad user input: the message names the culprit (flag, key or path) and the allowed values."""
