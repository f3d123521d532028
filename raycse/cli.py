"""The `raycse` command line: parse, call the Python API (raycse/api.py), print.

Exit status, the same for every command: 0 when it did what was asked; 2 for bad input (a flag, a file, a key of a
space file, a store's address: anything the user can fix), with one line `raycse: error: <message>` naming the
culprit, found before anything started or was written; 1 when a run that had started fails (a library error, a
full disk, a search without a single finished trial), with one line giving the reason; 130 when interrupted.
`--debug` shows the traceback instead. Heavy imports (torch, ray, mlflow) happen inside the subcommands so
`raycse --help` is instant.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from raycse import api
from raycse.errors import ConfigError, RunFailed, first_line, one_line

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
CONCURRENT_LIMIT = 64  # `raycse bench --concurrent N`: trials sharing one machine


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2) rather than the usage block."""

    def error(self, message: str) -> None:
        raise ConfigError(message)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_options(p, options: tuple[api.Option, ...]) -> None:
    """One flag per option of the Python API: the same names, defaults and rules."""
    for option in options:
        if option.kind is bool:
            if option.default:
                p.add_argument("--no-" + option.name.replace("_", "-"), dest=option.name, action="store_false",
                               help=option.help)
            else:
                p.add_argument(_flag(option.name), dest=option.name, action="store_true", help=option.help)
            continue
        p.add_argument(_flag(option.name), dest=option.name, type=option.kind, default=option.default,
                       choices=option.choices,
                       metavar=None if option.choices else "X" if option.kind is not str else option.name.upper(),
                       help=option.help if option.default is None else f"{option.help} (default: %(default)s)")


def _values(args, options: tuple[api.Option, ...]) -> dict:
    return {option.name: getattr(args, option.name) for option in options}


# --------------------------------------------------------------------------------------------- eval
def _add_eval(sub) -> None:
    p = sub.add_parser("eval", help="score an encoder on STS-B dev / the seven STS tasks")
    _add_options(p, api.EVAL_OPTIONS)
    p.set_defaults(func=_cmd_eval, parser=p)


def _cmd_eval(args) -> int:
    from raycse.evaluation.sts import format_table

    results = api.evaluate(**_values(args, api.EVAL_OPTIONS))
    print(format_table(results, title=f"{args.model} ({args.pooler})"))
    return EXIT_OK


# -------------------------------------------------------------------------------------------- train
def _add_train_settings(p) -> None:
    """One flag per TrainConfig field (help text from the field), one per loss hyperparameter (from the registry)."""
    import dataclasses

    from raycse.losses import LOSS_NAMES, hyperparameter_catalogue
    from raycse.settings.config import TrainConfig, field_kind

    for f in dataclasses.fields(TrainConfig):
        if not f.metadata.get("flag", True):
            continue
        kind, help_text = field_kind(f)[0], f.metadata.get("help", "")
        if f.name == "loss":
            help_text = f"the loss: {' | '.join(LOSS_NAMES)}"
        if kind is bool:
            p.add_argument(_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction, default=f.default,
                           help=help_text)
        else:
            p.add_argument(_flag(f.name), dest=f.name, type=kind, default=f.default, choices=f.metadata.get("choices"),
                           metavar=None if f.metadata.get("choices") else "X",
                           help=help_text if "default" in help_text else f"{help_text} (default: %(default)s)")
    p.set_defaults(gpus_per_worker=None)  # the command line's default: 1 if CUDA is available, else 0
    group = p.add_argument_group("loss hyperparameters (default: each paper's published value)")
    for name, owners in hyperparameter_catalogue().items():
        integer = all(spec.integer for spec in owners.values())
        defaults = ", ".join(f"{owner} {spec.default:g}" for owner, spec in owners.items())
        group.add_argument(_flag(name), dest=f"hp_{name}", type=int if integer else float, default=None, metavar="X",
                           help=f"{next(iter(owners.values())).allowed}; default: {defaults}")


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train one encoder with one loss (the body of every search trial)")
    _add_train_settings(p)
    p.add_argument("--output-dir", required=True, help="where best/, last/ and results.json go")
    p.add_argument("--resume", action="store_true", help="continue an interrupted training from output-dir/last")
    p.add_argument("--tracking-uri", default=None, help=api.TRACKING_HELP)
    p.add_argument("--no-mlflow", action="store_true", help="do not record the run in MLflow")
    p.set_defaults(func=_cmd_train, parser=p)


def _cmd_train(args) -> int:
    import dataclasses
    from pathlib import Path

    from raycse.losses import hyperparameter_catalogue
    from raycse.settings.config import TrainConfig

    settings = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if f.metadata.get("flag", True)}
    settings.update({name: getattr(args, f"hp_{name}") for name in hyperparameter_catalogue()
                     if getattr(args, f"hp_{name}") is not None})
    results = api.train(output_dir=args.output_dir, resume=args.resume, tracking_uri=args.tracking_uri,
                        mlflow=not args.no_mlflow, **settings)
    output = Path(args.output_dir).expanduser()
    print(_summary_table(results))
    print(f"best checkpoint: {output / 'best'}   results: {output / 'results.json'}")
    return EXIT_OK


def _summary_table(results: dict) -> str:
    from raycse.evaluation.sts import format_table

    lines = [f"best objective ({results['objective']}) {results['best_objective']:.2f} at step {results['best_step']} "
             f"of {results['steps']}  ({results['sentences_per_s']:.1f} sentences/s, "
             f"{results.get('wall_seconds', 0):.0f} s; {results.get('compile_decision', '')})"]
    if "avg" in results:
        lines.append(format_table({k: v for k, v in results.items() if isinstance(v, float)}, title="best checkpoint"))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- search
def _add_search(sub) -> None:
    p = sub.add_parser("search", help="Ray Tune + Optuna search over a search-space file, every trial in MLflow")
    p.add_argument("--space", required=True, help="a search-space file, e.g. search_spaces/focal.yaml")
    _add_options(p, api.SEARCH_OPTIONS)
    p.set_defaults(func=_cmd_search, parser=p)


def _cmd_search(args) -> int:
    from raycse.report.tables import format_search_summary, format_timings

    outcome = api.search(args.space, **_values(args, api.SEARCH_OPTIONS), started_at=args.started_at)
    print(format_search_summary(outcome.summary), flush=True)
    if outcome.best_checkpoint:
        print(f"Best checkpoint: {outcome.best_checkpoint}")
    print(f"MLflow: parent run {outcome.parent_run_id}, registered model {outcome.experiment!r} version "
          f"{outcome.model_version}")
    if outcome.summary.get("report"):
        print(f"Report: {outcome.summary['report']}")
    print(format_timings(outcome.timings))
    if outcome.winner is None:
        print("raycse: error: the search has no answer: no configuration finished a run (each trial's reason is in "
              "the table above)", file=sys.stderr)
        return EXIT_FAILED
    if outcome.model_version is not None:  # last: what to do next
        from raycse.export import export_command

        uri = api.resolve_tracking_uri(args.tracking_uri)  # the search's store, checked by it already
        print(f"Export the winner with its model card: {export_command(outcome.experiment, uri)}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------- report
def _add_report(sub) -> None:
    p = sub.add_parser("report", help="tables and plots of an MLflow experiment written by raycse search")
    p.add_argument("experiment", help="the MLflow experiment name (the space file's 'experiment')")
    _add_options(p, api.REPORT_OPTIONS)
    p.set_defaults(func=_cmd_report, parser=p)


def _cmd_report(args) -> int:
    print(api.report(args.experiment, **_values(args, api.REPORT_OPTIONS)))
    return EXIT_OK


# ------------------------------------------------------------------------------------------- export
def _add_export(sub) -> None:
    p = sub.add_parser("export", help="the winner of an experiment's latest search as a sentence-transformers model "
                                      "folder with a model card (README.md)")
    p.add_argument("experiment", help="the MLflow experiment name (the space file's 'experiment')")
    p.add_argument("dir", help="the folder to write (new, or empty)")
    _add_options(p, api.EXPORT_OPTIONS)
    p.set_defaults(func=_cmd_export, parser=p)


def _cmd_export(args) -> int:
    result = api.export(args.experiment, args.dir, **_values(args, api.EXPORT_OPTIONS))
    print(f"Exported the winner of {args.experiment!r} (parent run {result.parent_run_id}) to {result.folder}: "
          f"SentenceTransformer({str(result.folder)!r}) loads it; its model card is {result.folder / 'README.md'}")
    if args.push_to_hub is not None:
        print(f"Pushed to {result.url}")
    return EXIT_OK


# -------------------------------------------------------------------------------------------- bench
def _add_bench(sub) -> None:
    from raycse.bench.options import PRECISIONS
    from raycse.bench.step import BenchOptions
    from raycse.bench.synthetic import SHAPES

    d = BenchOptions()
    p = sub.add_parser("bench", help="time raycse's training step against a naive fp32 step, and the STS-B dev eval")
    p.add_argument("--shape", default=d.shape, choices=list(SHAPES), help="random-weight BERT shape")
    p.add_argument("--loss", default=None, help=f"any loss `raycse train --loss` takes (default: {d.loss}); with "
                                                "--cached also a comma-separated list or 'all' (its default)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="corpus rows (sentences) per step")
    p.add_argument("--steps", type=int, default=d.steps, help="timed steps")
    p.add_argument("--warmup", type=int, default=d.warmup, help="untimed steps first")
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="tokens per sentence, [CLS] and [SEP] included")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                   help="torch.compile the encoder with CUDA graphs, as the trainer does (CUDA only; default on)")
    p.add_argument("--precision", default=d.precision, choices=list(PRECISIONS))
    p.add_argument("--no-eval", action="store_true", help="skip timing the STS-B dev evaluation")
    p.add_argument("--no-baseline", action="store_true", help="skip timing the naive fp32 step")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="also profile a few raycse steps (torch.profiler): operator table to FILE")
    p.add_argument("--concurrent", type=int, default=None, metavar="N",
                   help="instead: aggregate sentences/s of N concurrent trials, Ray tasks with 1/N GPU each")
    p.add_argument("--cached", action="store_true",
                   help="instead: gradient caching's cost per loss, each configuration in its own process: uncached "
                        "--batch-size, uncached --cached-batch-size, cached in chunks of --batch-size, and keyed "
                        "dropout in one chunk (step time, peak memory)")
    p.add_argument("--cached-batch-size", type=int, default=512, help="with --cached: the large batch (default 512)")
    p.add_argument("--output", default=None, help="write the figures as JSON here")
    p.set_defaults(func=_cmd_bench, parser=p)


def _cmd_bench(args) -> int:
    from raycse.bench.concurrent import format_concurrent, run_concurrent
    from raycse.bench.step import BenchOptions, format_table, run_bench
    from raycse.files import write_json_atomic
    from raycse.settings.checks import check_int, check_writable_file

    for name in ("output", "profile"):
        if getattr(args, name) is not None:
            check_writable_file(name, getattr(args, name))
    if args.cached:
        return _cmd_bench_cached(args)
    options = BenchOptions(shape=args.shape, loss=args.loss or BenchOptions.loss, batch_size=args.batch_size,
                           steps=args.steps, warmup=args.warmup, seq_len=args.seq_len, compile=args.compile,
                           precision=args.precision, eval=not args.no_eval, baseline=not args.no_baseline,
                           profile=args.profile).validate()
    if args.concurrent is not None:
        check_int("concurrent", args.concurrent, low=1, high=CONCURRENT_LIMIT)
    if args.concurrent is not None:
        results = run_concurrent(options, args.concurrent)
        print(format_concurrent(results))
    else:
        results = run_bench(options)
        print(format_table(results))
    if args.output:
        write_json_atomic(args.output, results)
    return EXIT_OK


def _cmd_bench_cached(args) -> int:
    from raycse.bench.cached import CachedBenchOptions, format_cached, parse_losses, run_cached_bench
    from raycse.files import write_json_atomic

    options = CachedBenchOptions(shape=args.shape, losses=parse_losses(args.loss or "all"),
                                 batch_size=args.batch_size, cached_batch_size=args.cached_batch_size,
                                 steps=args.steps, warmup=args.warmup, seq_len=args.seq_len, compile=args.compile,
                                 precision=args.precision).validate()
    results = run_cached_bench(options, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_cached(results))
    if args.output:
        write_json_atomic(args.output, results)
    return EXIT_OK


# -------------------------------------------------------------------------------------------- cache
def _add_cache(sub) -> None:
    p = sub.add_parser("cache", help="the untouched model's figures kept between searches ($RAYCSE_CACHE_DIR, "
                                     "else $XDG_CACHE_HOME/raycse)")
    p.add_argument("action", choices=["clear"], help="clear: forget every kept figure (the next search scores again)")
    p.set_defaults(func=_cmd_cache, parser=p)


def _cmd_cache(args) -> int:
    from raycse.evaluation import untouched_cache

    removed = untouched_cache.clear()
    print(f"removed {removed} cached figure file{'s' if removed != 1 else ''} from {untouched_cache.cache_dir()}")
    return EXIT_OK


# --------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="raycse", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_eval(sub)
    _add_train(sub)
    _add_search(sub)
    _add_report(sub)
    _add_export(sub)
    _add_bench(sub)
    _add_cache(sub)
    return parser


def _quiet_libraries() -> None:
    """Progress bars and INFO chatter of transformers, the hub and MLflow drown raycse's own output."""
    import logging

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")  # an unreachable server fails in seconds
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow is imported, later
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        from huggingface_hub.utils import logging as hub_logging
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        hub_logging.set_verbosity_error()  # offline: one error line, not ten retry warnings
    except ImportError:
        pass


def _culprit_as_flag(err: ConfigError, parser: argparse.ArgumentParser | None) -> str:
    """The message, naming the flag the user typed rather than the setting behind it: '--batch-size: ...' for
    'batch_size: ...', '--tau: tau=0 is out of range ...' for a hyperparameter's 'tau=0 is out of range ...'. (A
    ConfigError carries a key only when its message is about that setting; one about a file starts with the file.)"""
    message = str(err)
    if parser is None or not err.key:
        return message
    flags = {action.dest.removeprefix("hp_"): action.option_strings[-1] for action in parser._actions
             if action.option_strings and action.dest != "help"}
    flag = flags.get(err.key)
    if flag is None:
        return message
    if message.startswith(f"{err.key}:"):
        return flag + message[len(err.key):]
    return f"{flag}: {message}"


def main(argv: list[str] | None = None) -> int:
    started_at = time.perf_counter()  # a search's time_total_s runs from here
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    if "-h" not in argv and "--help" not in argv:
        _quiet_libraries()
    subparser = None
    try:
        args = build_parser().parse_args(argv)
        args.started_at, subparser = started_at, args.parser
        return args.func(args)
    except ConfigError as err:  # bad input, found before anything started: exit 2
        if debug:
            raise
        print(f"raycse: error: {one_line(_culprit_as_flag(err, subparser))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("raycse: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RunFailed as err:  # a run that failed, said whole (export's push): one line, exit 1
        if debug:
            raise
        print(f"raycse: error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as err:  # a run that failed (disk full, a library's error, a bug): one line, exit 1
        if debug:
            raise
        reason = err.strerror if isinstance(err, OSError) and err.strerror else first_line(err)
        where = f" ({err.filename})" if isinstance(err, OSError) and err.filename else ""
        print(f"raycse: error: {one_line(f'{type(err).__name__}: {reason}{where}')} (run with --debug for the "
              "traceback)", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
