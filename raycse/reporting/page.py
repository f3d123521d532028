"""The page `raycse report` writes: the search's tables and its plots, in one HTML file.

The plots are interactive (plotly, raycse/reporting/plots.py): Optuna's standard plots of the persisted study, and
the dev curves of every trial against its training steps, hovering to a trial's parameters and seed. plotly.js and
the style sheet are inline and nothing else is loaded, so the page opens offline, as an MLflow artifact or an
e-mail attachment. Each plot is also written beside the page as a PNG (matplotlib), for MLflow's artifact view.

Conditional spaces (all.yaml): the loss family `loss` is a parameter of the whole study, so it is weighed
against the other parameters every trial has. A family's own parameters (`focal/tau`, ...) exist only in
that family's trials, which fANOVA and the contour plot cannot handle on the whole study, so each family
gets its own section drawn from a sub-study holding only its completed trials (renumbered from 0).
Plots Optuna refuses (one completed trial, a parameter with one value, a value space that changed during
the search) are replaced by a note saying why.
"""
from __future__ import annotations

import html
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raycse.records import (
    CONCURRENT_SLOTS,
    SLOT_UTILISATION,
    TOTAL_TIME,
    TRIAL_TIMING_KEYS,
    phase_of,
    trial_timing_label,
)
from raycse.reporting.load import SearchRecord
from raycse.reporting.plots import (
    Drawing,
    Marks,
    References,
    dev_curves,
    figure_html,
    optuna_plot,
    plain_log_ticks,
    plotly_script,
    plotting,
    with_trial_hover,
)
from raycse.reporting.tables import (
    SEED_NOISE_UNKNOWN,
    choosing_table_rows,
    fmt,
    fmt_params,
    importance_warnings,
    judging_table_rows,
    published_reference,
    score,
    search_table_rows,
    test_table_rows,
)
from raycse.tracking.stores import shown_store

IMPORTANCE_SEED = 0
STYLE = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; }
tr.published td { background: #fff4e0; }
caption { caption-side: top; text-align: left; color: #555; padding-bottom: 0.3em; }
figure { margin: 1em 0; } img { max-width: 100%; } figure.plot > div { width: 100%; }
figcaption { color: #555; font-size: 0.9em; }
.verdict { font-size: 1.15em; border-left: 4px solid #4a7; padding-left: 0.6em; }
.warning { background: #fff3cd; border: 1px solid #e0b000; padding: 0.5em 0.8em; }
.note { color: #555; font-style: italic; }
"""


@dataclass
class RenderedReport:
    html: str
    images: list[Path]  # the PNG of each plot, beside the page
    figures: list[str]  # the element id of each interactive figure on the page
    warnings: list[str]
    importances: dict[str, float]  # of the whole study (fANOVA, seeded)


@dataclass
class _Page:
    """The page's HTML, top to bottom; each plot is an interactive figure on it and a PNG beside it."""

    out_dir: Path
    parts: list[str] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    scope: str = ""  # the loss family whose section is being written: it prefixes the warnings listed apart

    def add(self, markup: str) -> None:
        self.parts.append(markup)

    def heading(self, text: str, level: int = 2) -> None:
        self.add(f"<h{level}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str, css_class: str = "") -> None:
        self.add(f'<p class="{css_class}">{html.escape(text)}</p>' if css_class else f"<p>{html.escape(text)}</p>")

    def warn(self, text: str) -> None:
        self.warnings.append(f"{self.scope}: {text}" if self.scope else text)
        self.paragraph(f"Warning: {text}", "warning")

    def skip(self, what: str, why: str) -> None:
        text = f"{what}: not drawn ({why})"
        self.warnings.append(f"{self.scope}: {text}" if self.scope else text)
        self.paragraph(f"{text}.", "note")

    def table(self, headers: list[str], rows: list[list[Any]], caption: str = "",
              highlighted: Callable[[list[Any]], bool] = lambda row: False) -> None:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = "".join(
            f'<tr{" class=published" if highlighted(row) else ""}>'
            + "".join(f"<td>{html.escape(v if isinstance(v, str) else fmt(v))}</td>" for v in row) + "</tr>"
            for row in rows)
        caption_html = f"<caption>{html.escape(caption)}</caption>" if caption else ""
        self.add(f"<table>{caption_html}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def plot(self, name: str, caption: str, drawing: Drawing, marks: Marks | None = None) -> None:
        """Draw both renderings, add the reference marks; a refusal becomes a note on the page."""
        import matplotlib.pyplot as plt
        import numpy as np

        marks = marks or Marks()
        try:
            axes = list(np.ravel(drawing.png()))  # Optuna returns one Axes, or an array of them for several parameters
        except (ValueError, RuntimeError) as err:
            self.skip(caption, f"Optuna refused: {err}")
            return
        figure = axes[0].figure
        if not any(ax.has_data() for ax in axes):
            plt.close(figure)
            self.skip(caption, "nothing to draw")
            return
        if marks.png is not None:
            marks.png(axes)
        plain_log_ticks(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        plt.close(figure)
        path = self.out_dir / f"{name}.png"
        path.write_bytes(buffer.getvalue())
        self.images.append(path)
        interactive = drawing.figure()
        if marks.figure is not None:
            marks.figure(interactive)
        element = f"plot-{name}"
        self.figures.append(element)
        self.add(f'<figure class="plot">{figure_html(interactive, element)}'
                 f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _distinct_values(trials: list[Any], param: str) -> int:
    return len({t.params[param] for t in trials if param in t.params})


def _is_numeric(trials: list[Any], param: str) -> bool:
    from optuna.distributions import FloatDistribution, IntDistribution

    return all(isinstance(t.distributions[param], (FloatDistribution, IntDistribution))
               for t in trials if param in t.distributions)


def _evaluated_once(evaluator: Any) -> Any:
    """`evaluator`, computing its study's importances once: the page's figures and both of Optuna's plots of them
    (interactive and still) would otherwise fit fANOVA's forest three times, for the same numbers."""
    import optuna

    class EvaluatedOnce(optuna.importance.BaseImportanceEvaluator):
        def __init__(self):
            self.raw: dict = {}

        def evaluate(self, study, params=None, *, target=None):
            key = (None if params is None else tuple(params), target)
            if key not in self.raw:
                self.raw[key] = evaluator.evaluate(study, params=params, target=target)
            return dict(self.raw[key])

    return EvaluatedOnce()


def _importances(page: _Page, study: Any, params: list[str] | None, name: str, target_name: str,
                 seed_noise_std: float | None) -> dict[str, float]:
    """Seeded fANOVA importances, plotted by Optuna, with the warnings that say how far to trust them."""
    import optuna

    completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    for warning in importance_warnings([t.value for t in completed], seed_noise_std):
        page.warn(f"importances: {warning}")
    caption = "Parameter importances (fANOVA, seed 0)"
    if len(completed) < 2:
        page.skip(caption, f"{len(completed)} completed trial{'s' if len(completed) != 1 else ''}: "
                           "fANOVA needs at least 2")
        return {}
    evaluator = _evaluated_once(optuna.importance.FanovaImportanceEvaluator(seed=IMPORTANCE_SEED))
    try:
        importances = optuna.importance.get_param_importances(study, evaluator=evaluator, params=params)
    except (ValueError, RuntimeError) as err:
        page.skip(caption, f"Optuna refused: {err}")
        return {}
    page.plot(name, caption, optuna_plot("plot_param_importances", study, evaluator=evaluator, params=params,
                                         target_name=target_name))
    return {k: float(v) for k, v in importances.items()}


def _parameter_plots(page: _Page, study: Any, params: list[str], importances: dict[str, float], prefix: str,
                     references: References, target_name: str) -> None:
    """Slice, parallel coordinates, and the contour of the two most important numeric parameters."""
    import optuna

    completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not completed:
        page.skip("Slice, parallel-coordinate and contour plots", "no completed trial")
        return
    page.plot(f"{prefix}slice", "Slice: the objective against each parameter",
              optuna_plot("plot_slice", study, params=params, target_name=target_name), references.slice())
    page.plot(f"{prefix}parallel_coordinates", "Parallel coordinates",
              optuna_plot("plot_parallel_coordinate", study, params=params, target_name=target_name))
    ranked = sorted(params, key=lambda p: -importances.get(p, 0.0))  # stable: the space's order without importances
    varied = [p for p in ranked if _is_numeric(completed, p) and _distinct_values(completed, p) >= 2]
    caption = "Contour of the two most important numeric parameters"
    if len(varied) < 2:
        page.skip(caption, f"needs 2 numeric parameters that took 2 or more values, found {len(varied)}")
        return
    pair = varied[:2]
    page.plot(f"{prefix}contour", f"Contour: {pair[0]} x {pair[1]}, the two most important numeric parameters",
              optuna_plot("plot_contour", study, params=pair, target_name=target_name), references.contour(pair))


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _search_plots(page: _Page, record: SearchRecord, references: References, target_name: str) -> dict[str, float]:
    import optuna

    study, summary = record.study, record.summary
    if record.curves:
        page.plot("dev_curves", "Dev curves: each trial's objective at its evaluations, by training step (search "
                  "trials solid, confirmation runs dashed); hover a point for the trial's parameters and seed",
                  dev_curves(record.curves, target_name), references.horizontal())
    else:
        page.skip("Dev curves", "no trial logged an objective")
    completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not completed:
        page.skip("Optuna's plots", "no search trial completed")
        return {}
    history = optuna_plot("plot_optimization_history", study, target_name=target_name)
    history_marks = references.horizontal("Optuna trial number")
    page.plot("optimization_history", "Optimisation history (Optuna's trial numbers)", history, Marks(
        history_marks.png, lambda figure: (with_trial_hover(figure, record.curves), history_marks.figure(figure))))

    page.heading("Parameter importances")
    conditional = any("loss" in t.params for t in completed)
    if conditional:
        page.paragraph("fANOVA weighs only the parameters every trial has: here the loss family, 'loss'; each "
                       "family's own parameters are weighed within its section below.", "note")
    if summary.get("seed_noise_std") is None:
        page.warn(f"importances: {SEED_NOISE_UNKNOWN}")
    importances = _importances(page, study, None, "importances", target_name, summary.get("seed_noise_std"))

    page.heading("Parameters")
    if not conditional:
        params = list(dict.fromkeys(p for t in completed for p in t.params))
        _parameter_plots(page, study, params, importances, "", references, target_name)
        return importances
    page.plot("slice_loss", "The objective of each loss family",
              optuna_plot("plot_slice", study, params=["loss"], target_name=target_name), references.slice())
    families = list(dict.fromkeys([*(summary.get("searched_params") or {}), *(t.params["loss"] for t in completed)]))
    for family in families:
        trials = [t for t in completed if t.params.get("loss") == family]
        params = list(dict.fromkeys(p for t in trials for p in t.params if p.startswith(f"{family}/")))
        page.heading(f"Loss family {family}: {len(trials)} completed trial{'s' if len(trials) != 1 else ''}", 3)
        page.scope = family
        if not trials or not params:
            page.paragraph("No completed trial." if not trials else "No parameter of its own was searched.", "note")
            continue
        sub_study = optuna.create_study(direction=study.direction)
        sub_study.add_trials(trials)
        family_importances = _importances(page, sub_study, params, f"family_{_safe_name(family)}_importances",
                                          target_name, summary.get("seed_noise_std"))
        _parameter_plots(page, sub_study, params, family_importances, f"family_{_safe_name(family)}_",
                         references.for_family(family), target_name)
    page.scope = ""
    return importances


def render_report(record: SearchRecord, out_dir: Path) -> RenderedReport:
    """The whole page: verdict, reference points, confirmation, test tasks, search table, Optuna's plots."""
    summary = record.summary
    page = _Page(out_dir)
    references = _references(record)
    target_name = summary.get("objective_description") or summary.get("objective") or "objective"

    page.add(f"<h1>raycse search report: {html.escape(record.experiment)}</h1>")
    page.table(["", ""], [["space file", str(summary.get("space_file"))], ["model", str(summary.get("model"))],
                          ["budget", str(summary.get("budget"))], ["objective", target_name],
                          ["MLflow parent run", record.parent_run_id],
                          ["Optuna study", f"{summary.get('study_name')} in {shown_store(record.optuna_storage)}"]])
    _answer(page, summary, references)
    _confirmation(page, summary)

    page.heading("Search")
    headers, rows = search_table_rows(record.rows, summary.get("searched_params") or {})
    page.table(headers, rows, f"{len(rows)} search trials, best first. best objective: the highest dev score over "
               "the trial's evaluations, reached at the training step 'best step'.",
               lambda row: row[-1] == "published")
    with plotting():
        importances = _search_plots(page, record, references, target_name)
    timings = summary.get("timings") or {}
    if timings:
        _timings(page, timings)
    script = plotly_script() if page.figures else ""  # plotly.js once, before the figures that use it
    document = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>raycse report: {html.escape(record.experiment)}</title><style>{STYLE}</style>{script}"
                "</head><body>\n" + "\n".join(page.parts) + "\n</body></html>\n")
    return RenderedReport(html=document, images=page.images, figures=page.figures, warnings=page.warnings,
                          importances=importances)


def _references(record: SearchRecord) -> References:
    """The untouched model and the published point, as every objective axis marks them; in a conditional space the
    published parameters are named as the study names them (`family/param`)."""
    summary = record.summary
    published = summary.get("published") or {}
    conditional = any("loss" in t.params for t in record.study.trials)
    family = published.get("family", "-")
    return References(
        baseline=(summary.get("baseline") or {}).get("objective"),
        published=published_reference(summary, record.rows), published_family=family,
        published_params={(f"{family}/{k}" if conditional else k): v
                          for k, v in (published.get("params") or {}).items()})


def _answer(page: _Page, summary: dict, references: References) -> None:
    """The answer block, the verdict, and the two points the answer is set against."""
    from raycse.reporting.answer import answer_block

    page.heading("Answer")
    for line in answer_block(summary):
        page.paragraph(line, "answer")
    page.heading("Verdict")
    page.paragraph(summary.get("verdict") or "No configuration was found.", "verdict")

    page.heading("Reference points")
    published = summary.get("published") or {}
    baseline_pooler = (summary.get("baseline") or {}).get("eval_pooler")
    page.paragraph(f"Baseline: the untouched model scores {score(references.baseline)}"
                   + (f" ({baseline_pooler} pooling)" if baseline_pooler else "") + " before any training.")
    page.paragraph(f"Published point: {published.get('family', '-')} {fmt_params(published.get('params') or {})}"
                   + (f", which scores {score(references.published[0])} ({references.published[1]})."
                      if references.published else "."))


def _confirmation(page: _Page, summary: dict) -> None:
    """The choosing and judging blocks, and the seven test tasks; a note when the search ran neither block."""
    headers, rows = choosing_table_rows(summary)
    if rows:
        page.heading("Choosing")
        page.table(headers, rows, "The top configurations of the search on the same fresh seeds; the best dev mean "
                   "wins. Stds over fewer than 3 seeds are shown to one significant digit.",
                   lambda row: row[-1] == "winner")
    headers, rows = judging_table_rows(summary)
    if rows:
        page.heading("Judging")
        page.table(headers, rows, "The winner and the published point on further fresh seeds, which alone judge "
                   "them; the difference is paired by seed, with its Student-t 95% interval, n and df.")
    else:
        page.paragraph("The search ran no choosing or judging: the answer is its best trial, from one seed.", "note")
    headers, rows, notes = test_table_rows(summary)
    if rows:
        page.heading("The seven STS test tasks")
        page.table(headers, rows, "Spearman x100 on held-out test sets; the same model and data in every row "
                   "(mean ± std over the judging seeds).")
        for note in notes:
            page.paragraph(note, "note")


def _timings(page: _Page, timings: dict[str, float]) -> None:
    page.heading("Where the time went")
    phases = [[phase_of(key), f"{value:.1f}"] for key, value in timings.items() if phase_of(key)]
    trials = [[trial_timing_label(key), f"{timings[key]:.1f}"] for key in TRIAL_TIMING_KEYS if key in timings]
    page.table(["driver phase", "seconds"], [*phases, ["total", f"{timings.get(TOTAL_TIME, 0.0):.1f}"]],
               "The time spent: from the command's start to the answer, every session of a resumed search counted "
               "(the time between a stop and its resume is not); the phases add up to the total, and this page is "
               "written after it.")
    utilisation = 100 * timings.get(SLOT_UTILISATION, 0.0)
    page.table(["trials, summed", "seconds"], trials,
               f"Slot utilisation {utilisation:.0f}% of {timings.get(CONCURRENT_SLOTS, 1):.0f} concurrent "
               "trial slot(s): (train + eval) / ((search + confirm) x slots).")
