"""The `raycse` command line: parse, call the Python API (raycse/api.py), print.

Exit status, the same for every command: 0 when it did what was asked; 2 for bad input (a flag, a file, a key of a
space file, a store's address: anything the user can fix), with one line `raycse: error: <message>` naming the
culprit, found before anything started or was written; 1 when a run that had started fails (a library error, a
full disk, a search without a single finished trial), with one line giving the reason; 130 when interrupted.
`--debug` shows the traceback instead. Heavy imports (torch, ray, mlflow) happen inside the subcommands so
`raycse --help` is instant. The flags are made from the Python API's option tables and TrainConfig's fields
(raycse/commands/flags.py), so the command line and the API take the same values by the same rules.
"""
from __future__ import annotations

import argparse
import sys
import time

from raycse import __version__, api
from raycse.commands.flags import (
    Parser,
    add_options,
    add_train_settings,
    culprit_as_flag,
    option_values,
    subcommand,
    train_settings,
)
from raycse.commands.quiet import quiet_libraries
from raycse.errors import ConfigError, RunFailed, first_line, one_line
from raycse.training import stop_signals

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DESCRIPTION = ("Search the hyperparameters of contrastive sentence-embedding training (SimCSE, Focal-InfoNCE, "
               "ImSimCSE, DCLR, ...): choose a configuration on some seeds, judge it against the paper's published "
               "point on others, and record every trial in MLflow.")
EXIT_TERMINATED, EXIT_HUNG_UP = 143, 129  # SIGTERM, SIGHUP: 128 + the signal's number, as for Ctrl-C's SIGINT


# --------------------------------------------------------------------------------------------- eval
def _add_eval(sub) -> None:
    p = subcommand(sub, "eval", "score an encoder on STS-B dev, the seven STS tasks, or both",
                   "Spearman correlations x 100, SentEval's way; the pooler defaults to the model's own pooling.", """
raycse eval                                   # the packaged MiniLM on STS-B dev, with its own (mean) pooling
raycse eval --model runs/focal/best --tasks sts
raycse eval --model bert-base-uncased --pooler cls_before_pooler --tasks all --output figures.json""")
    add_options(p, api.EVAL_OPTIONS)
    p.set_defaults(func=_cmd_eval, parser=p)


def _cmd_eval(args) -> int:
    from raycse.evaluation.sts import format_table

    values = option_values(args, api.EVAL_OPTIONS)
    values["pooler"] = api.evaluation_pooler(args.model, args.pooler, args.trust_remote_code)  # 'auto' named
    results = api.evaluate(**values)
    print(format_table(results, title=f"{args.model} ({values['pooler']})"))
    return EXIT_OK


# -------------------------------------------------------------------------------------------- train
def _add_train(sub) -> None:
    p = subcommand(sub, "train", "train one encoder with one loss (the body of every search trial)",
                   "The best checkpoint by the objective goes to OUTPUT_DIR/best, the figures to results.json; the run "
                   "is recorded in MLflow (experiment raycse-train).", """
raycse train --loss simcse --max-steps 250 --output-dir runs/simcse
raycse train --loss focal --tau 0.05 --m 0.2 --output-dir runs/focal
raycse train --loss simcse-sup --sup-data sick-train --batch-size 32 --output-dir runs/sup""")
    add_train_settings(p)
    p.add_argument("--output-dir", required=True, metavar="DIR", help="where best/, last/ and results.json go "
                   "(required; new, or empty)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted training from DIR/last "
                   "(default: off)")
    p.add_argument("--tracking-uri", default=None, metavar="URI", help=api.TRACKING_HELP)
    p.add_argument("--no-mlflow", action="store_true", help="do not record the run in MLflow (default: off, it is "
                   "recorded)")
    p.set_defaults(func=_cmd_train, parser=p)


def _cmd_train(args) -> int:
    from pathlib import Path

    result = api.train(output_dir=args.output_dir, resume=args.resume, tracking_uri=args.tracking_uri,
                       mlflow=not args.no_mlflow, **train_settings(args))
    output = Path(args.output_dir).expanduser()
    print(_summary_table(result.results))
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
    p = subcommand(sub, "search", "Ray Tune + Optuna search over a search-space file, every trial in MLflow",
                   "The search stage ranks configurations, fresh seeds choose the winner among the best, and further "
                   "seeds judge it against the paper's published point; the answer is printed, recorded in MLflow "
                   "and shown on a report page.", """
raycse search --space search_spaces/focal.yaml
raycse search --space search_spaces/focal.yaml --experiment focal-2     # the same file again, beside the first
raycse search --space search_spaces/focal.yaml --dry-run --gpus 8       # the plan and its cost, nothing run
raycse search --space search_spaces/focal.yaml --resume                 # continue an interrupted search""")
    p.add_argument("--space", required=True, metavar="SPACE", help="a search-space file, e.g. "
                   "search_spaces/focal.yaml (required; `raycse spaces` lists the shipped ones)")
    add_options(p, api.SEARCH_OPTIONS)
    _add_plan_flags(p, dry_run="print the budget, every stage with its trials, seeds and resources, and the wall "
                    "clock, GPU-hours and disk it would take; creates no store, folder or Ray cluster (default: off)")
    p.set_defaults(func=_cmd_search, parser=p)


def _add_plan_flags(p, dry_run: str | None = None) -> None:
    """--step-ms and --gpus, what a plan is made for (and --dry-run with its help, unless an option table has it)."""
    dry = p.add_argument_group("the plan without running it")
    if dry_run:
        dry.add_argument("--dry-run", action="store_true", help=dry_run)
    dry.add_argument("--step-ms", type=float, default=None, metavar="MS", help="with --dry-run: a trial's training "
                     "step in milliseconds, with the plan's trials sharing each GPU (default: a CPU plan takes the "
                     "recorded CPU step of its model's shape, measuring a few steps here only where none is recorded; "
                     "a GPU plan takes a recorded GPU figure for its model, or is refused)")
    dry.add_argument("--gpus", type=int, default=None, metavar="N", help="with --dry-run: plan for N GPUs (the "
                     "full budget when N > 0, the CPU budget when 0; default: this machine's)")


def _plan_flags_need_dry_run(args) -> None:
    for name in ("step_ms", "gpus"):
        if getattr(args, name) is not None:
            raise ConfigError.at(name, "only applies with --dry-run")


def _cmd_search(args) -> int:
    if args.dry_run:
        return _cmd_dry_run(args)
    _plan_flags_need_dry_run(args)
    from raycse.reporting.tables import format_search_summary, format_timings

    outcome = api.search(args.space, **option_values(args, api.SEARCH_OPTIONS), _started_at=args.started_at)
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
        from raycse.exporting import export_command

        uri = api.resolve_tracking_uri(args.tracking_uri)  # the search's store, checked by it already
        print(f"Export the winner with its model card: {export_command(outcome.experiment, uri)}")
    return EXIT_OK


def _cmd_dry_run(args) -> int:
    from raycse.planning.dry_run import format_dry_run

    print(format_dry_run(api.plan(args.space, **option_values(args, api.SEARCH_OPTIONS), step_ms=args.step_ms,
                                  gpus=args.gpus)))
    return EXIT_OK


# ------------------------------------------------------------------------------------------- compare
def _add_compare(sub) -> None:
    p = subcommand(sub, "compare", "compare losses fairly: each searched with the same budget, judged together",
                   "Each space (one loss each) runs its search and choosing stages with the same budget; then every "
                   "loss's tuned winner and published point are judged on the same fresh seeds, on the seven-task "
                   "STS test average, with Holm's family-wise error control over every pair; the table, the pairwise "
                   "verdicts and compare_summary.json follow.", """
raycse compare --space simcse --space focal
raycse compare --space focal --space imsimcse --space barlow --budget cpu --experiment losses-cpu
raycse compare --space simcse --space focal --state runs/compare     # every store in one folder
raycse compare --space simcse --space focal --dry-run --gpus 1       # the plan and its cost, nothing run
raycse compare --space simcse --space focal --resume                 # continue an interrupted comparison""")
    p.add_argument("--space", required=True, action="append", metavar="SPACE", help="a search-space file (one loss), "
                   "given once per loss, at least twice (required; `raycse spaces` lists the shipped ones)")
    add_options(p, api.COMPARE_OPTIONS)
    _add_plan_flags(p)
    p.set_defaults(func=_cmd_compare, parser=p)


def _cmd_compare(args) -> int:
    from raycse.reporting.compare_table import format_comparison

    if args.dry_run:
        from raycse.planning.compare_plan import format_compare_plan, plan_comparison

        loaded, options, name, _ = api.compare_inputs(args.space, option_values(args, api.COMPARE_OPTIONS))
        print(format_compare_plan(plan_comparison(loaded, options, name, step_ms=args.step_ms, gpus=args.gpus)))
        return EXIT_OK
    _plan_flags_need_dry_run(args)
    outcome = api.compare(args.space, **option_values(args, api.COMPARE_OPTIONS))
    print(format_comparison(outcome.summary), flush=True)
    print(f"MLflow: comparison {outcome.name!r}, parent run {outcome.parent_run_id}; summary: {outcome.summary_path}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------- report
def _add_report(sub) -> None:
    p = subcommand(sub, "report", "tables and plots of an MLflow experiment written by raycse search",
                   "Writes OUTPUT_DIR/index.html (images inline) for the experiment's latest search and logs it on "
                   "the search's parent run (its report/ artifact); changes nothing else in the stores and creates "
                   "neither.", """
raycse report raycse-focal
raycse report raycse-focal --tracking-uri http://head:5000 --output-dir focal-report""")
    p.add_argument("experiment", metavar="EXPERIMENT", help="the MLflow experiment name (the space file's "
                   "'experiment', or search's --experiment)")
    add_options(p, api.REPORT_OPTIONS)
    p.set_defaults(func=_cmd_report, parser=p)


def _cmd_report(args) -> int:
    print(api.report(args.experiment, **option_values(args, api.REPORT_OPTIONS)))
    return EXIT_OK


# ------------------------------------------------------------------------------------------- export
def _add_export(sub) -> None:
    p = subcommand(sub, "export", "the winner of an experiment's latest search as a sentence-transformers model folder "
                   "with a model card (README.md)", "SentenceTransformer(DIR) loads the folder; --push-to-hub uploads "
                   "it.", """
raycse export raycse-focal focal-model
raycse export raycse-focal focal-model --push-to-hub me/focal-minilm --private
raycse export compare-simcse-focal focal-model --loss focal    # one loss's winner of a comparison""")
    p.add_argument("experiment", metavar="EXPERIMENT", help="the MLflow experiment name (the space file's "
                   "'experiment', or search's --experiment; with --loss, a comparison's)")
    p.add_argument("dir", metavar="DIR", help="the folder to write (new, or empty)")
    add_options(p, api.EXPORT_OPTIONS)
    p.set_defaults(func=_cmd_export, parser=p)


def _cmd_export(args) -> int:
    result = api.export(args.experiment, args.dir, **option_values(args, api.EXPORT_OPTIONS))
    print(f"Exported the winner of {args.experiment!r} (parent run {result.parent_run_id}) to {result.folder}: "
          f"SentenceTransformer({str(result.folder)!r}) loads it; its model card is {result.folder / 'README.md'}")
    if args.push_to_hub is not None:
        print(f"Pushed to {result.url}")
    return EXIT_OK


# -------------------------------------------------------------------------------------------- bench
def _add_bench(sub) -> None:
    from raycse.bench.command import add_bench_arguments, run_bench_command

    p = subcommand(sub, "bench", "time raycse's training step against a naive fp32 step, and the STS-B dev eval",
                   "Random-weight BERT shapes, so nothing is downloaded; the figures are sentences/s and ms a "
                   "step.", """
raycse bench --shape bert-base --batch-size 64
raycse bench --concurrent 4 --shape tiny
raycse bench --cached --loss focal,simcse --output cached.json""")
    add_bench_arguments(p)
    p.set_defaults(func=run_bench_command, parser=p)


# ------------------------------------------------------------------------------- spaces, losses, status
def _add_listings(sub) -> None:
    p = subcommand(sub, "spaces", "the shipped search-space files, one line each",
                   "Each is a complete search: pass its path to `raycse search --space`.", "raycse spaces")
    p.set_defaults(func=_cmd_spaces, parser=p)
    p = subcommand(sub, "losses", "each loss, its paper and its hyperparameters with their published defaults",
                   "A base loss takes --reg to add a regulariser (weight --lambda); a preset is a base loss with its "
                   "regulariser. Your own loss is a file with a Term subclass and its declaration, named in a space "
                   "file as ./my_loss.py:MyLoss (docs/own-loss.md): name it here to check it and see it listed.", """
raycse losses
raycse losses ./my_loss.py:MyLoss""")
    p.add_argument("loss", nargs="*", metavar="LOSS", help="your own loss: ./my_loss.py:MyLoss, "
                   "package.module:MyLoss or an installed entry point, loaded and tried as a search would")
    p.set_defaults(func=_cmd_losses, parser=p)
    p = subcommand(sub, "status", "where a search stands: its stage, trials done and planned, the search stage's "
                   "leading configuration, the choosing means, the answer once judged, the time spent and left, and "
                   "for a search that stopped, how, and the command that continues it",
                   "Reads MLflow only, so it works while the search runs in another process or on a tracking server.",
                   """
raycse status raycse-focal
raycse status raycse-focal --tracking-uri http://head:5000""")
    p.add_argument("experiment", metavar="EXPERIMENT", help="the MLflow experiment name (the space file's "
                   "'experiment', or search's --experiment)")
    p.add_argument("--tracking-uri", default=None, metavar="URI", help=api.TRACKING_HELP)
    p.set_defaults(func=_cmd_status, parser=p)


def _cmd_spaces(args) -> int:
    from raycse.settings.space_files import packaged_spaces, summary_line

    files = packaged_spaces()
    width = max((len(name) for name in files), default=0)
    for name, path in files.items():
        print(f"{name:<{width}}  {summary_line(path)}  ({path})")
    return EXIT_OK


def _cmd_losses(args) -> int:
    from raycse.losses.listing import format_losses

    print(format_losses(args.loss))
    return EXIT_OK


def _cmd_status(args) -> int:
    from raycse.reporting.status import format_status

    print(format_status(api.status(args.experiment, tracking_uri=args.tracking_uri)))
    return EXIT_OK


# -------------------------------------------------------------------------------------------- cache
def _add_cache(sub) -> None:
    p = subcommand(sub, "cache", "the untouched model's figures kept between searches",
                   "A search scores the untouched model once per model, data and objective, and keeps the figures in "
                   "$RAYCSE_CACHE_DIR (else $XDG_CACHE_HOME/raycse); `clear` forgets them, so the next search scores "
                   "again.", """
raycse cache clear""")
    p.add_argument("action", choices=["clear"], help="clear: forget every kept figure")
    p.set_defaults(func=_cmd_cache, parser=p)


def _cmd_cache(args) -> int:
    from raycse.evaluation import untouched_cache
    from raycse.files import cache_dir

    removed = untouched_cache.clear()
    print(f"removed {removed} cached figure file{'s' if removed != 1 else ''} from {cache_dir()}")
    return EXIT_OK


# --------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="raycse", description=DESCRIPTION, epilog="`raycse COMMAND --help` explains each command, "
                     "with examples; `raycse search --space focal --dry-run` shows a search's plan without running it.")
    parser.add_argument("--version", action="version", version=f"raycse {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks (default: off)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")
    _add_eval(sub)
    _add_train(sub)
    _add_search(sub)
    _add_compare(sub)
    _add_report(sub)
    _add_export(sub)
    _add_listings(sub)
    _add_bench(sub)
    _add_cache(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    started_at = time.perf_counter()  # a search's time_total_s runs from here
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    subparser = None
    try:
        args = build_parser().parse_args(argv)  # imports nothing heavy: --help and usage errors answer at once
        args.started_at, subparser = started_at, args.parser
        quiet_libraries()
        return args.func(args)
    except ConfigError as err:  # bad input, found before anything started: exit 2
        if debug:
            raise
        print(f"raycse: error: {one_line(culprit_as_flag(err, subparser))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM or SIGHUP (raycse/training/stop_signals.py): 130, 143, 129
        return stop_signals.report_stop(err)
    except RunFailed as err:  # a run that failed, said whole (export's push): one line, exit 1
        if debug:
            raise
        print(f"raycse: error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as err:  # a run that failed (disk full, a library's error, a bug): one line, exit 1
        if stop_signals.received() is not None:  # a library that turned a stop into an error of its own
            return stop_signals.report_stop(err)
        if debug:
            raise
        reason = err.strerror if isinstance(err, OSError) and err.strerror else first_line(err)
        where = f" ({err.filename})" if isinstance(err, OSError) and err.filename else ""
        print(f"raycse: error: {one_line(f'{type(err).__name__}: {reason}{where}')} (run with --debug for the "
              "traceback)", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
