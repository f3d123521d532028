"""The value checks every setting uses: a type, a range, a name or a path a program can use.

Each raises `ConfigError` naming the setting (`<name>: <what is wrong>`) and says which type or range was expected
and what was given, quoting a value only in part when it is long. The settings themselves say which check applies
to them (TrainConfig's field metadata, the search options of the Python API, the keys of a space file); these are
the rules, written once.
"""
from __future__ import annotations

import datetime
import math
import numbers
import os
import re
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError, shown

INT_LIMIT = 2**31 - 1  # the largest integer every library below us (tokenizers, torch's sizes, SQLite) takes whole
SEED_LIMIT = 2**32 - 1  # NumPy's and Optuna's samplers take seeds in [0, 2^32)
CONFIRM_SEEDS_LIMIT = 100  # seeds per confirmed configuration: far more than any interval here needs
NAME_LIMIT = 100  # characters of an experiment name: it becomes a directory, a study and a registered model
NAME_BYTES = 255  # bytes of one path component on Linux, macOS and Windows file systems
PATH_BYTES = 4095  # bytes of a whole path (PATH_MAX less the terminating NUL)


def describe(value: Any) -> str:
    """What kind of thing `value` is, in the words of a settings file ('a string', 'a list', ...)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, numbers.Integral):
        return "an integer"
    if isinstance(value, numbers.Real):
        return "a number"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "a date"
    if isinstance(value, (bytes, bytearray)):
        return "binary data"
    return f"a {type(value).__name__}"


def _got(value: Any, right_type: bool) -> str:
    return shown(value) if right_type else f"{describe(value)} {shown(value)}"


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        return False


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """An int (never a bool) in [low, high], or a ConfigError naming `name`."""
    right_type = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if right_type and low is not None and value < low:
        raise ConfigError.at(name, f"must be an integer >= {low}, got {shown(value)}")
    if right_type and high is not None and value > high:
        raise ConfigError.at(name, f"must be an integer <= {high}, got {shown(value)}")
    if not right_type:
        bound = {(True, True): f" from {low} to {high}", (True, False): f" >= {low}", (False, True): f" <= {high}",
                 (False, False): ""}[low is not None, high is not None]
        raise ConfigError.at(name, f"must be an integer{bound}, got {_got(value, right_type)}")
    return int(value)


def check_number(name: str, value: Any, low: float | None = None, strict: bool = False,
                 high: float | None = None) -> float:
    """A finite real number (never a bool) above `low` (strictly if `strict`) and at most `high`."""
    right_type = isinstance(value, numbers.Real) and not isinstance(value, bool)
    ok = right_type and _finite(value)
    if ok and low is not None:
        ok = value > low if strict else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        bounds = [f"{'>' if strict else '>='} {low:g}" if low is not None else "",
                  f"<= {high:g}" if high is not None else ""]
        bound = " and ".join(b for b in bounds if b)
        raise ConfigError.at(name, f"must be a finite number{' ' + bound if bound else ''}, "
                                   f"got {_got(value, right_type)}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError.at(name, f"must be true or false, got {_got(value, False)}")
    return value


def check_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError.at(name, f"must be a string, got {_got(value, False)}")
    if not value.strip():
        raise ConfigError.at(name, "must not be empty")
    return value


def check_choice(name: str, value: Any, choices) -> Any:
    if not isinstance(value, (str, int, float, bool, type(None))) or value not in choices:
        raise ConfigError.at(name, f"{shown(value)} is not one of {', '.join(map(str, choices))}")
    return value


def check_path_text(name: str, value: Any) -> str:
    """A string a file system can take as a path: no NUL byte, encodable, every component at most 255 bytes and
    the whole at most 4095 (beyond those the operating system answers with an error that quotes it all)."""
    check_str(name, value)
    if "\x00" in value:
        raise ConfigError.at(name, f"{shown(value)} holds a NUL character, which no path can")
    try:
        encoded = os.fsencode(value)
    except UnicodeEncodeError:
        raise ConfigError.at(name, f"{shown(value)} cannot be written as a file name on this system") from None
    if len(encoded) > PATH_BYTES:
        raise ConfigError.at(name, f"{shown(value)} is too long for a path ({len(encoded):,} bytes; at most "
                                   f"{PATH_BYTES:,})")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > NAME_BYTES:
        raise ConfigError.at(name, f"{shown(value)} has a file or folder name of {len(longest):,} bytes (at most "
                                   f"{NAME_BYTES})")
    return value


_NAME_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f/:]")


def check_name(name: str, value: Any, limit: int = NAME_LIMIT) -> str:
    """An experiment's name, which becomes the Tune experiment's directory, the MLflow experiment, the Optuna
    study and the registered model: 1 to `limit` characters, no control character, and none of '/' and ':'
    (MLflow refuses them in a registered model's name)."""
    check_str(name, value)
    if len(value) > limit:
        raise ConfigError.at(name, f"{shown(value)} is too long for a name ({len(value):,} characters; at most "
                                   f"{limit})")
    bad = _NAME_FORBIDDEN.search(value)
    if bad:
        raise ConfigError.at(name, f"{shown(value)} holds {bad.group()!r}: a name may not hold '/', ':' or a "
                                   "control character")
    if value.strip() in (".", ".."):
        raise ConfigError.at(name, f"{shown(value)} is not a usable name")
    return value


def check_writable_dir(name: str, value: Any) -> Path:
    """A directory a run will create or fill: one that exists and is writable, or one that can be created.

    Whether a directory can be created is only sure by trying (a permission bit does not say it for root, nor for
    /proc or a read-only mount): the first missing folder is made and removed again at once, so that nothing is left.
    """
    path = Path(check_path_text(name, value)).expanduser()
    try:
        if path.exists():
            if not path.is_dir():
                raise ConfigError.at(name, f"{shown(value)} exists and is not a directory")
            if not os.access(path, os.W_OK | os.X_OK):
                raise ConfigError.at(name, f"{shown(value)} is not writable")
            return path
        first_missing = path.absolute()
        while not first_missing.parent.exists():
            first_missing = first_missing.parent
        if not first_missing.parent.is_dir():
            raise ConfigError.at(name, f"cannot create {shown(value)}: {str(first_missing.parent)!r} is not a "
                                       "directory")
        first_missing.mkdir()
        first_missing.rmdir()
    except OSError as err:
        raise ConfigError.at(name, f"cannot create {shown(value)}: {err.strerror}") from None
    return path


def check_writable_file(name: str, value: Any) -> Path:
    """A file a command will write: a path that is not a directory, in a folder that exists or can be created."""
    path = Path(check_path_text(name, value)).expanduser()
    if path.is_dir() or value.endswith("/"):
        raise ConfigError.at(name, f"{shown(value)} is a directory; give a file name")
    check_writable_dir(name, str(path.absolute().parent))
    return path


def mapping(value: Any, where: str, key: str) -> dict:
    """A file's section as a dict ({} when it is absent)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key or 'top level'}: expected a mapping, got {type(value).__name__}")
    return dict(value)


def no_unknown(section: dict, allowed: set, where: str, prefix: str) -> None:
    """A section's keys are among `allowed`: a misspelt key is an error, not a silently ignored setting."""
    unknown = sorted(set(map(str, section)) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key {shown(prefix + unknown[0])} (allowed: {', '.join(sorted(allowed))})")
