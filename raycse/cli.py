"""The `raycse` command line: parse, validate once at the edge, run, print.

Every subcommand turns bad input into `raycse: error: <one line>` and exit status 2 (`--debug` shows the
traceback). Heavy imports (torch, ray, mlflow) happen inside the subcommands so `raycse --help` is instant.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from raycse.errors import ConfigError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2) rather than the usage block."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
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


def _write_json(path: str, payload: dict) -> None:
    """Write JSON atomically: a reader never sees half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, target)


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
        _write_json(args.output, results)
    return 0



# -------------------------------------------------------------------------------------------- train
HPARAM_FLAGS = ("tau", "m", "lambda", "tau_dcl", "phi", "k", "lambda_bt", "margin", "hard_neg_weight",
                "noise_steps", "noise_beta", "noise_sigma", "tau_u")


def _add_train(sub) -> None:
    from raycse.config import BUNDLED_CORPUS, TrainConfig

    d = TrainConfig()
    p = sub.add_parser("train", help="train one encoder with one loss (the body of every search trial)")
    p.add_argument("--model", default=d.model, help="'minilm' (packaged), a local directory or a hub id")
    p.add_argument("--loss", default=d.loss, help="simcse | simcse-sup | focal | off-dropout | dclr | triplet | "
                                                   "imsimcse | simcse+dcl | simcse+barlow")
    p.add_argument("--reg", default=None, help="add a regulariser with weight --lambda: dcl | barlow")
    group = p.add_argument_group("loss hyperparameters (defaults: each paper's published value)")
    for name in HPARAM_FLAGS:
        group.add_argument("--" + name.replace("_", "-"), dest=f"hp_{name}", type=int if name == "noise_steps" else float,
                           default=None, metavar="X")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="per worker")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--eval-steps", type=int, default=d.eval_steps)
    p.add_argument("--max-len", type=int, default=d.max_len)
    p.add_argument("--pooler", default=d.pooler)
    p.add_argument("--eval-pooler", default=None, help="default: cls_before_pooler for unsupervised cls training")
    p.add_argument("--corpus", default=BUNDLED_CORPUS, help="text file, URL or hf:NAME[:SPLIT[:COLUMN]] "
                                                             "(default: the bundled Wikipedia sample)")
    p.add_argument("--sup-data", default=None, help="SimCSE's NLI csv (sent0, sent1, hard_neg)")
    p.add_argument("--max-sentences", type=int, default=None)
    p.add_argument("--replace-bad-bytes", action="store_true", help="decode non-UTF-8 corpus bytes as U+FFFD "
                                                                    "instead of stopping with an error")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--workers", type=int, default=1, help="data-parallel workers through Ray Train")
    p.add_argument("--gpus-per-worker", type=float, default=None, help="default: 1 if CUDA is available, else 0")
    p.add_argument("--complementary", default=None, help="DCLR's frozen complementary model (default: start weights)")
    p.add_argument("--precision", default=d.precision, choices=["auto", "fp32", "bf16", "fp16"])
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                   help="torch.compile the encoder with CUDA graphs (CUDA only; default on)")
    p.add_argument("--no-test-eval", action="store_true", help="skip the seven STS test tasks at the end")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    p.add_argument("--no-mlflow", action="store_true", help="do not record the run in MLflow")
    p.add_argument("--output-dir", required=True)
    p.set_defaults(func=_cmd_train)


def _train_config(args):
    from raycse.config import TrainConfig

    hparams = {name: getattr(args, f"hp_{name}") for name in HPARAM_FLAGS if getattr(args, f"hp_{name}") is not None}
    gpus = args.gpus_per_worker
    if gpus is None:
        import torch

        gpus = 1.0 if torch.cuda.is_available() else 0.0
    config = TrainConfig(
        model=args.model, loss=args.loss, reg=args.reg, hparams=hparams, pooler=args.pooler,
        eval_pooler=args.eval_pooler, batch_size=args.batch_size, lr=args.lr, epochs=args.epochs,
        max_steps=args.max_steps, eval_steps=args.eval_steps, max_len=args.max_len, corpus=args.corpus,
        sup_data=args.sup_data, max_sentences=args.max_sentences, seed=args.seed, workers=args.workers,
        gpus_per_worker=gpus, complementary=args.complementary, precision=args.precision, compile=args.compile,
        test_eval=not args.no_test_eval, trust_remote_code=args.trust_remote_code, output_dir=args.output_dir,
        replace_bad_bytes=args.replace_bad_bytes,
    )
    try:
        return config.validate()
    except ConfigError as err:  # name the flag the user typed, not the dataclass field behind it
        field, _, rest = str(err).partition(":")
        if rest and field in vars(config):
            raise ConfigError(f"--{field.replace('_', '-')}:{rest}") from None
        raise


def _cmd_train(args) -> int:
    from raycse.data import GlobalBatches
    from raycse.launch import run_training

    config = _train_config(args)
    output = Path(config.output_dir).expanduser()
    _check_writable_dir("--output-dir", output)
    if output.is_dir() and any(output.iterdir()):
        raise ConfigError(f"--output-dir: {str(output)!r} exists and is not empty")
    from raycse.trainer import load_examples

    GlobalBatches(load_examples(config), config.batch_size * config.workers, config.seed)  # data errors now, not later
    from raycse.model import check_loadable

    for model in filter(None, (config.model, config.complementary)):
        check_loadable(model, config.trust_remote_code)
    tracking_uri = None
    if not args.no_mlflow:
        from raycse.tracking import resolve_tracking_uri

        tracking_uri = resolve_tracking_uri(args.tracking_uri)
    results = run_training(config, tracking_uri=tracking_uri)
    print(_summary_table(results))
    print(f"best checkpoint: {output / 'best'}   results: {output / 'results.json'}")
    return 0


def _summary_table(results: dict) -> str:
    from raycse.evaluation import format_table

    lines = [f"best STS-B dev {results['best_stsb_dev']:.2f} at step {results['best_step']} of {results['steps']}  "
             f"({results['sentences_per_s']:.1f} sentences/s, {results.get('wall_seconds', 0):.0f} s)"]
    figures = {k: v for k, v in results.items() if isinstance(v, float) and k not in ("best_stsb_dev",)}
    if "avg" in figures:
        lines.append(format_table(figures, title="best checkpoint"))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- search
def _add_search(sub) -> None:
    p = sub.add_parser("search", help="Ray Tune + Optuna search over a search-space file, every trial in MLflow")
    p.add_argument("--space", required=True, help="a search-space file, e.g. search_spaces/focal.yaml")
    p.add_argument("--num-samples", type=int, default=None)
    p.add_argument("--max-concurrent", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    p.add_argument("--storage-path", default="ray_results", help="Tune state and checkpoints (a path or s3://...)")
    p.add_argument("--budget", default="auto", choices=["auto", "cpu", "full"],
                   help="auto: the file's cpu_budget when the Ray cluster has no GPU")
    p.add_argument("--resume", action="store_true", help="continue an interrupted search")
    p.set_defaults(func=_cmd_search)


def _cmd_search(args) -> int:
    from raycse.search import SearchOptions, run_search
    from raycse.space import load_space
    from raycse.tracking import resolve_tracking_uri

    for flag in ("num_samples", "max_concurrent"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ConfigError(f"--{flag.replace('_', '-')}: must be >= 1, got {value}")
    space = load_space(args.space)
    if "://" not in args.storage_path:
        _check_writable_dir("--storage-path", Path(args.storage_path).expanduser())
    options = SearchOptions(tracking_uri=resolve_tracking_uri(args.tracking_uri), storage_path=args.storage_path,
                            resume=args.resume, num_samples=args.num_samples, max_concurrent=args.max_concurrent,
                            seed=args.seed, budget=args.budget)
    from raycse.report import format_search_summary

    summary = run_search(space, options)
    print(format_search_summary(summary, space))
    return 0 if summary.best is not None else 1


# ------------------------------------------------------------------------------------------- report
def _add_report(sub) -> None:
    p = sub.add_parser("report", help="tables and plots of an MLflow experiment written by raycse search")
    p.add_argument("experiment", help="the MLflow experiment name (the space file's 'experiment')")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--output-dir", default="report", help="where the PNG plots go")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args) -> int:
    from raycse.report import report_experiment
    from raycse.tracking import resolve_tracking_uri

    print(report_experiment(resolve_tracking_uri(args.tracking_uri), args.experiment, Path(args.output_dir)))
    return 0


# -------------------------------------------------------------------------------------------- bench
def _add_bench(sub) -> None:
    from raycse.bench import PRECISIONS, SHAPES, BenchOptions

    d = BenchOptions()
    p = sub.add_parser("bench", help="time raycse's training step against a naive fp32 step, and the STS-B dev eval")
    p.add_argument("--shape", default=d.shape, choices=list(SHAPES), help="random-weight BERT shape")
    p.add_argument("--loss", default=d.loss, help="any loss `raycse train --loss` takes")
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
    p.add_argument("--output", default=None, help="write the figures as JSON here")
    p.set_defaults(func=_cmd_bench)


def _cmd_bench(args) -> int:
    from raycse.bench import BenchOptions, format_concurrent, format_table, run_bench, run_concurrent

    options = BenchOptions(shape=args.shape, loss=args.loss, batch_size=args.batch_size, steps=args.steps,
                           warmup=args.warmup, seq_len=args.seq_len, compile=args.compile,
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
        _write_json(args.output, results)
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
    _add_bench(sub)
    return parser


def _quiet_libraries() -> None:
    """Progress bars and INFO chatter of transformers, the hub and MLflow drown raycse's own output."""
    import logging

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")  # an unreachable server fails in seconds
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow is imported, later
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        from transformers.utils import logging as hf_logging

        from huggingface_hub.utils import logging as hub_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        hub_logging.set_verbosity_error()  # offline: one error line, not ten retry warnings
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    if "-h" not in argv and "--help" not in argv:
        _quiet_libraries()
    try:
        args = build_parser().parse_args(argv)
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
