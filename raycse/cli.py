"""The `raycse` command line: parse, validate once at the edge, run, print.

Every subcommand turns bad input into `raycse: error: <one line>` and exit status 2 (`--debug` shows the
traceback). Heavy imports (torch, ray, mlflow) happen inside the subcommands so `raycse --help` is instant.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from raycse.errors import ConfigError
from raycse.files import write_json_atomic

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2) rather than the usage block."""

    def error(self, message: str) -> None:
        raise ConfigError(message)


def _check_writable_dir(flag: str, path: Path) -> None:
    """A directory we will create or fill must be one, or be creatable: fail now, before any work."""
    if path.exists():
        if not path.is_dir():
            raise ConfigError(f"{flag}: {str(path)!r} exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"{flag}: {str(path)!r} is not writable")
        return
    first_missing = path
    while not first_missing.parent.exists():
        first_missing = first_missing.parent
    try:  # the only sure test is to try; what this creates is removed again, so nothing is left behind
        path.mkdir(parents=True)
    except OSError as err:
        raise ConfigError(f"{flag}: cannot create {str(path)!r}: {err.strerror}") from None
    shutil.rmtree(first_missing)


# --------------------------------------------------------------------------------------------- eval
def _add_eval(sub) -> None:
    p = sub.add_parser("eval", help="score an encoder on STS-B dev / the seven STS tasks")
    p.add_argument("--model", default="minilm", help="'minilm' (packaged), a local directory or a hub id")
    p.add_argument("--pooler", default="cls_before_pooler",
                   help="cls | cls_before_pooler | avg | avg_first_last | avg_top2")
    p.add_argument("--tasks", default="stsb-dev", choices=["stsb-dev", "sts", "all"])
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-len", type=int, default=None, help="truncate sentences (default: the model's limit)")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--output", default=None, help="write the figures as JSON here")
    p.set_defaults(func=_cmd_eval)


def _cmd_eval(args) -> int:
    from raycse.evaluation import format_table, run_eval
    from raycse.model import POOLERS

    if args.pooler not in POOLERS:
        raise ConfigError(f"--pooler: unknown pooler {args.pooler!r} (choose from {', '.join(POOLERS)})")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size: must be >= 1, got {args.batch_size}")
    if args.output:
        if Path(args.output).is_dir():
            raise ConfigError(f"--output: {args.output!r} is a directory; give a file name")
        _check_writable_dir("--output", Path(args.output).expanduser().parent)
    results = run_eval(args.model, pooler=args.pooler, tasks=args.tasks, batch_size=args.batch_size,
                       max_len=args.max_len, trust_remote_code=args.trust_remote_code)
    print(format_table(results, title=f"{args.model} ({args.pooler})"))
    if args.output:
        write_json_atomic(args.output, results)
    return 0



# -------------------------------------------------------------------------------------------- train
def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _field_type(field) -> type:
    annotation = str(field.type)
    for name, kind in (("bool", bool), ("int", int), ("float", float)):
        if annotation.split(" | ")[0] == name:
            return kind
    return str


def _add_train_settings(p) -> None:
    """One flag per TrainConfig field (help text from the field), one per loss hyperparameter (from the registry)."""
    import dataclasses

    from raycse.config import TrainConfig
    from raycse.losses import LOSS_NAMES, hyperparameter_catalogue

    for f in dataclasses.fields(TrainConfig):
        if not f.metadata.get("flag", True):
            continue
        kind, help_text = _field_type(f), f.metadata.get("help", "")
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
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    p.add_argument("--no-mlflow", action="store_true", help="do not record the run in MLflow")
    p.set_defaults(func=_cmd_train)


def _train_config(args):
    import dataclasses

    from raycse.config import TrainConfig
    from raycse.losses import hyperparameter_catalogue

    hparams = {name: getattr(args, f"hp_{name}") for name in hyperparameter_catalogue()
               if getattr(args, f"hp_{name}") is not None}
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if f.metadata.get("flag", True)}
    if values["gpus_per_worker"] is None:
        import torch

        values["gpus_per_worker"] = 1.0 if torch.cuda.is_available() else 0.0
    config = TrainConfig(**values, hparams=hparams, output_dir=args.output_dir)
    try:
        return config.validate()
    except ConfigError as err:  # name the flag the user typed, not the field behind it
        if err.key in values or err.key in hparams:
            message = str(err)
            detail = message.split(": ", 1)[1] if message.startswith(err.key + ":") else message
            raise ConfigError(f"{_flag(err.key)}: {detail}", key=err.key) from None
        raise


def _cmd_train(args) -> int:
    from raycse.data import GlobalBatches, load_examples
    from raycse.launch import run_training
    from raycse.model_loading import check_loadable

    config = _train_config(args)
    output = Path(config.output_dir).expanduser()
    _check_writable_dir("--output-dir", output)
    if args.resume:
        if not (output / "last").is_dir():
            raise ConfigError(f"--resume: {str(output)!r} holds no last/ checkpoint to resume from")
        if (output / "results.json").exists():
            raise ConfigError(f"--resume: {str(output)!r} holds a finished training (results.json)")
    elif output.is_dir() and any(output.iterdir()):
        raise ConfigError(f"--output-dir: {str(output)!r} exists and is not empty (pass --resume to continue it)")
    examples = load_examples(config)  # data errors now, not later; the trainer reuses what was read
    GlobalBatches(examples, config.batch_size * config.workers, config.seed)
    for flag, model in (("--model", config.model), ("--complementary", config.complementary)):
        if model is not None:
            try:
                check_loadable(model, config.trust_remote_code)
            except ConfigError as err:
                raise ConfigError(f"{flag}: {err}") from None
    if config.loss in ("dclr",) and config.complementary is None:
        print("DCLR without --complementary: the frozen complementary model is a copy of the starting weights, "
              "not the trained SimCSE model the paper uses (raycse search trains one first; pass --complementary "
              "DIR to use yours).", flush=True)
    tracking_uri = None
    if not args.no_mlflow:
        from raycse.tracking import resolve_tracking_uri

        tracking_uri = resolve_tracking_uri(args.tracking_uri)
    results = run_training(config, tracking_uri=tracking_uri, resume=args.resume,
                           examples=examples if config.workers == 1 else None)
    print(_summary_table(results))
    print(f"best checkpoint: {output / 'best'}   results: {output / 'results.json'}")
    return 0


def _summary_table(results: dict) -> str:
    from raycse.evaluation import format_table

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
    p.add_argument("--num-samples", type=int, default=None, help="search-stage trials (default: the file's)")
    p.add_argument("--max-concurrent", type=int, default=None, help="trials at once (default: what fits)")
    p.add_argument("--seed", type=int, default=None, help="the sampler's seed (default: the file's)")
    p.add_argument("--choose-seeds", type=int, default=None,
                   help="fresh seeds on which the top configurations are chosen among (default: the file's)")
    p.add_argument("--judge-seeds", type=int, default=None,
                   help="fresh seeds on which the winner and the published point are judged (default: the file's)")
    p.add_argument("--no-confirm", action="store_true",
                   help="no choosing or judging: the search stage's best, from one seed, unjudged")
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    p.add_argument("--optuna-storage", default=None, help="the Optuna study's storage (default: optuna.db beside "
                                                          "a SQLite MLflow store, else in the working directory)")
    p.add_argument("--storage-path", default="ray_results", help="Tune state and checkpoints (a path or s3://...)")
    p.add_argument("--budget", default="auto", choices=["auto", "cpu", "full"],
                   help="auto: the file's cpu_budget when the Ray cluster has no GPU")
    p.add_argument("--resume", action="store_true", help="continue an interrupted search (either stage)")
    p.set_defaults(func=_cmd_search)


def _cmd_search(args) -> int:
    from raycse.config import check_int
    from raycse.driver.run import finish, run_search
    from raycse.driver.state import SearchOptions
    from raycse.model_loading import check_loadable
    from raycse.space import load_space
    from raycse.tracking import resolve_tracking_uri

    for flag, low in (("num_samples", 1), ("max_concurrent", 1), ("choose_seeds", 1), ("judge_seeds", 2)):
        if getattr(args, flag) is not None:
            check_int(_flag(flag), getattr(args, flag), low=low)
    space = load_space(args.space)
    for key, model in (("model", space.base.model), ("train.complementary", space.base.complementary)):
        if model is not None:
            try:
                check_loadable(model, space.base.trust_remote_code)
            except ConfigError as err:
                raise ConfigError(f"{space.path}: {key}: {err}") from None
    if "://" not in args.storage_path:
        _check_writable_dir("--storage-path", Path(args.storage_path).expanduser())
    options = SearchOptions(tracking_uri=resolve_tracking_uri(args.tracking_uri), storage_path=args.storage_path,
                            resume=args.resume, num_samples=args.num_samples, max_concurrent=args.max_concurrent,
                            seed=args.seed, budget=args.budget, choose_seeds=args.choose_seeds,
                            judge_seeds=args.judge_seeds,
                            confirm=not args.no_confirm, optuna_storage=args.optuna_storage,
                            started_at=args.started_at)
    from raycse.report.tables import format_search_summary, format_timings

    outcome = run_search(space, options)
    print(format_search_summary(outcome.summary), flush=True)
    if outcome.best_checkpoint:
        print(f"Best checkpoint: {outcome.best_checkpoint}")
    print(f"MLflow: parent run {outcome.parent_run_id}, registered model {outcome.experiment!r} version "
          f"{outcome.model_version}")
    if outcome.summary.get("report"):
        print(f"Report: {outcome.summary['report']}")
    finish(outcome, options.tracking_uri)
    print(format_timings(outcome.timings))
    if outcome.model_version is not None:  # last: what to do next
        from raycse.export import export_command

        print(f"Export the winner with its model card: {export_command(outcome.experiment, options.tracking_uri)}")
    return 0 if outcome.winner is not None else 1


# ------------------------------------------------------------------------------------------- report
def _add_report(sub) -> None:
    p = sub.add_parser("report", help="tables and plots of an MLflow experiment written by raycse search")
    p.add_argument("experiment", help="the MLflow experiment name (the space file's 'experiment')")
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    p.add_argument("--optuna-storage", default=None, help="default: the storage the search recorded")
    p.add_argument("--output-dir", default="report", help="where index.html (and its images, also inline) go")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args) -> int:
    from raycse.report import report_experiment
    from raycse.tracking import resolve_tracking_uri

    print(report_experiment(resolve_tracking_uri(args.tracking_uri), args.experiment, Path(args.output_dir),
                            args.optuna_storage))
    return 0


# ------------------------------------------------------------------------------------------- export
def _add_export(sub) -> None:
    p = sub.add_parser("export", help="the winner of an experiment's latest search as a sentence-transformers model "
                                      "folder with a model card (README.md)")
    p.add_argument("experiment", help="the MLflow experiment name (the space file's 'experiment')")
    p.add_argument("dir", help="the folder to write (new, or empty)")
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    p.add_argument("--push-to-hub", default=None, metavar="REPO_ID",
                   help="then upload the folder to this Hugging Face Hub repository (OWNER/NAME)")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repository private")
    p.set_defaults(func=_cmd_export)


def _cmd_export(args) -> int:
    from raycse.export import check_repo_id, check_target, export_winner, push_to_hub
    from raycse.tracking import resolve_tracking_uri

    if args.push_to_hub is not None:
        check_repo_id(args.push_to_hub)
    check_target(Path(args.dir).expanduser())
    result = export_winner(resolve_tracking_uri(args.tracking_uri), args.experiment, Path(args.dir),
                           model_id=args.push_to_hub)
    print(f"Exported the winner of {args.experiment!r} (parent run {result.parent_run_id}) to {result.folder}: "
          f"SentenceTransformer({str(result.folder)!r}) loads it; its model card is {result.folder / 'README.md'}")
    if args.push_to_hub is not None:
        print(f"Pushed to {push_to_hub(result.folder, args.push_to_hub, private=args.private)}")
    return 0


# -------------------------------------------------------------------------------------------- bench
def _add_bench(sub) -> None:
    from raycse.bench.step import PRECISIONS, SHAPES, BenchOptions

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
    p.set_defaults(func=_cmd_bench)


def _cmd_bench(args) -> int:
    from raycse.bench.concurrent import format_concurrent, run_concurrent
    from raycse.bench.step import BenchOptions, format_table, run_bench

    if args.cached:
        return _cmd_bench_cached(args)
    options = BenchOptions(shape=args.shape, loss=args.loss or BenchOptions.loss, batch_size=args.batch_size,
                           steps=args.steps, warmup=args.warmup, seq_len=args.seq_len, compile=args.compile,
                           precision=args.precision, eval=not args.no_eval, baseline=not args.no_baseline,
                           profile=args.profile).validate()
    if args.concurrent is not None:
        if args.concurrent < 1:
            raise ConfigError(f"--concurrent: must be >= 1, got {args.concurrent}")
        results = run_concurrent(options, args.concurrent)
        print(format_concurrent(results))
    else:
        results = run_bench(options)
        print(format_table(results))
    if args.output:
        write_json_atomic(args.output, results)
    return 0


def _cmd_bench_cached(args) -> int:
    from raycse.bench.cached import CachedBenchOptions, format_cached, parse_losses, run_cached_bench

    options = CachedBenchOptions(shape=args.shape, losses=parse_losses(args.loss or "all"),
                                 batch_size=args.batch_size, cached_batch_size=args.cached_batch_size,
                                 steps=args.steps, warmup=args.warmup, seq_len=args.seq_len, compile=args.compile,
                                 precision=args.precision).validate()
    results = run_cached_bench(options, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_cached(results))
    if args.output:
        write_json_atomic(args.output, results)
    return 0


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


def main(argv: list[str] | None = None) -> int:
    started_at = time.perf_counter()  # a search's time_total_s runs from here
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    if "-h" not in argv and "--help" not in argv:
        _quiet_libraries()
    try:
        args = build_parser().parse_args(argv)
        args.started_at = started_at
        return args.func(args)
    except ConfigError as err:
        if debug:
            raise
        print(f"raycse: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("raycse: interrupted", file=sys.stderr)
        return 130
    except OSError as err:  # disk full, permission denied, ...: the user's environment, not a bug
        if debug:
            raise
        print(f"raycse: error: {err}", file=sys.stderr)
        return 1
    except Exception as err:  # a bug or a library failure: one line, the traceback behind --debug
        if debug:
            raise
        message = str(err).strip().splitlines()[0] if str(err).strip() else ""
        print(f"raycse: error: {type(err).__name__}: {message} (run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
