"""The command line's flags, made from what they set rather than written out: one flag per option of the Python
API's option tables (raycse/api.py) and, for `raycse train`, one per TrainConfig field and one per loss
hyperparameter; each help says its default. Also the subcommand that opens its --help with what it does and ends
with examples, the parser whose usage error is one line, and the flag named back in an error about its setting.
"""
from __future__ import annotations

import argparse
import difflib
import sys

from raycse import api
from raycse.errors import ConfigError


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2) rather than the usage block; a flag this command
    does not have is named first, with the flag it most resembles ("did you mean --space?"), rather than reported
    as a missing required one; and a flag that takes one value, given twice, is refused instead of the last one
    silently winning (`action="append"` flags, such as compare's --space, take several)."""

    def error(self, message: str) -> None:
        raise ConfigError(message)

    def parse_known_args(self, args=None, namespace=None):
        self._check_flags(list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(args, namespace)

    def _check_flags(self, args: list[str]) -> None:
        """The words up to the subcommand (or all of them, in a subcommand's parser): unknown flags and repeats."""
        by_flag = {option: action for action in self._actions for option in action.option_strings}
        commands = {name for action in self._actions if isinstance(action, argparse._SubParsersAction)
                    for name in action.choices}
        given: dict[argparse.Action, str] = {}
        words = iter(args)
        for word in words:
            if word == "--" or word in commands:
                return
            if not word.startswith("--"):
                continue
            name, has_value = word.split("=", 1)[0], "=" in word
            prefixed = {action for option, action in by_flag.items() if self.allow_abbrev and option.startswith(name)}
            if name not in by_flag and len(prefixed) > 1:
                return  # an ambiguous abbreviation: argparse names the flags it could be
            action = by_flag.get(name) or next(iter(prefixed), None)
            if action is None:
                close = difflib.get_close_matches(name, list(by_flag), n=1, cutoff=0.6)
                raise ConfigError(f"{name}: no such flag of `{self.prog}`"
                                  + (f"; did you mean {close[0]}?" if close else f" (see {self.prog} --help)"))
            takes_value = action.nargs is None and not isinstance(action, argparse._StoreConstAction)
            value = word.split("=", 1)[1] if has_value else (next(words, "") if takes_value else "")
            if takes_value and isinstance(action, argparse._StoreAction):
                if action in given:
                    raise ConfigError(f"{name}: given twice ({given[action]!r}, then {value!r}); `{self.prog}` "
                                      "takes one")
                given[action] = value


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def shown_default(help_text: str, default) -> str:
    """Every flag's help says its default: its own words when it has them ('default: the file's'), else the value."""
    if "default" in help_text:
        return help_text
    if default is None or default is False:
        return f"{help_text} (default: {'off' if default is False else 'none'})"
    if default is True:
        return f"{help_text} (default: on)"
    return f"{help_text} (default: %(default)s)"


def metavar(name: str, kind: type) -> str:
    """What a flag's value is, in a word: N for a count, X for a number, else the setting's own name (MODEL, DIR)."""
    if name in METAVARS:
        return METAVARS[name]
    return {int: "N", float: "X"}.get(kind, name.upper())


METAVARS = {"tracking_uri": "URI", "optuna_storage": "URL", "storage_path": "PATH", "output_dir": "DIR",
            "output": "FILE", "push_to_hub": "OWNER/NAME", "seed": "SEED", "max_len": "TOKENS", "model": "MODEL",
            "corpus": "SOURCE", "sup_data": "CSV", "objective": "OBJECTIVE", "complementary": "DIR",
            "objective_columns": "A,B,SCORE", "experiment": "NAME", "space": "SPACE", "step_ms": "MS", "gpus": "N"}


def subcommand(sub, name: str, summary: str, description: str, examples: str):
    """A subcommand whose --help opens with what it does and ends with examples."""
    return sub.add_parser(name, help=summary, description=f"{summary[0].upper()}{summary[1:]}. {description}",
                          epilog="examples:\n" + "\n".join(f"  {line}" for line in examples.strip().splitlines()),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


# ------------------------------------------------------------------------------ the Python API's options
def add_options(p, options: tuple[api.Option, ...]) -> None:
    """One flag per option of the Python API: the same names, defaults and rules."""
    for option in options:
        if option.kind is bool:
            if option.default:
                p.add_argument("--no-" + option.name.replace("_", "-"), dest=option.name, action="store_false",
                               help=f"{option.help} (default: on; this flag turns it off)")
            else:
                p.add_argument(flag(option.name), dest=option.name, action="store_true",
                               help=shown_default(option.help, False))
            continue
        p.add_argument(flag(option.name), dest=option.name, type=option.kind, default=option.default,
                       choices=option.choices, metavar=None if option.choices else metavar(option.name, option.kind),
                       help=shown_default(option.help, option.default))


def option_values(args, options: tuple[api.Option, ...]) -> dict:
    """The values the flags of `options` were given (or their defaults), by option name, for the Python API."""
    return {option.name: getattr(args, option.name) for option in options}


# ------------------------------------------------------------------------------ raycse train's settings
# Flags whose default depends on what else is given: None on the command line, decided by raycse.train
TRAIN_FLAG_DEFAULTS = {"gpus_per_worker": None, "eval_steps": None}
TRAIN_DEFAULT_WORDS = {"gpus_per_worker": "1 if CUDA is available, else 0",
                       "eval_steps": "125, or the run's last step when --max-steps is shorter"}


def add_train_settings(p) -> None:
    """One flag per TrainConfig field (help text from the field), one per loss hyperparameter (from the registry)."""
    import dataclasses

    from raycse.losses import LOSS_NAMES, hyperparameter_catalogue
    from raycse.settings.config import TrainConfig, field_kind

    for f in dataclasses.fields(TrainConfig):
        if not f.metadata.get("flag", True):
            continue
        kind, help_text = field_kind(f)[0], f.metadata.get("help", "")
        if f.name == "loss":
            help_text = f"the loss: {' | '.join(LOSS_NAMES)} (`raycse losses` lists their papers)"
        default = TRAIN_FLAG_DEFAULTS.get(f.name, f.default)
        if f.name in TRAIN_FLAG_DEFAULTS:
            help_text = f"{help_text} (default: {TRAIN_DEFAULT_WORDS[f.name]})"
        if kind is bool:
            p.add_argument(flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction, default=default,
                           help=f"{help_text} (default: {'on' if default else 'off'})")
        else:
            p.add_argument(flag(f.name), dest=f.name, type=kind, default=default, choices=f.metadata.get("choices"),
                           metavar=None if f.metadata.get("choices") else metavar(f.name, kind),
                           help=shown_default(help_text, default))
    group = p.add_argument_group("loss hyperparameters (default: each paper's published value)")
    for name, owners in hyperparameter_catalogue().items():
        integer = all(spec.integer for spec in owners.values())
        defaults = ", ".join(f"{owner} {spec.default:g}" for owner, spec in owners.items())
        group.add_argument(flag(name), dest=f"hp_{name}", type=int if integer else float, default=None,
                           metavar="N" if integer else "X",
                           help=f"{next(iter(owners.values())).allowed}; default: {defaults}")


def train_settings(args) -> dict:
    """The settings `add_train_settings`' flags gave, for raycse.train: every field's, and the hyperparameters given
    (an absent one is left to the loss's published default)."""
    import dataclasses

    from raycse.losses import hyperparameter_catalogue
    from raycse.settings.config import TrainConfig

    settings = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if f.metadata.get("flag", True)}
    settings.update({name: getattr(args, f"hp_{name}") for name in hyperparameter_catalogue()
                     if getattr(args, f"hp_{name}") is not None})
    return settings


# ------------------------------------------------------------------------------ errors
def culprit_as_flag(err: ConfigError, parser: argparse.ArgumentParser | None) -> str:
    """The message, naming the flag the user typed rather than the setting behind it: '--batch-size: ...' for
    'batch_size: ...', '--tau: tau=0 is out of range ...' for a hyperparameter's 'tau=0 is out of range ...'. (A
    ConfigError carries a key only when its message is about that setting; one about a file starts with the file.)"""
    message = str(err)
    if parser is None or not err.key:
        return message
    flags = {action.dest.removeprefix("hp_"): action.option_strings[-1] for action in parser._actions
             if action.option_strings and action.dest != "help"}
    typed = flags.get(err.key)
    if typed is None:
        return message
    if message.startswith(f"{err.key}:"):
        return typed + message[len(err.key):]
    return f"{typed}: {message}"
