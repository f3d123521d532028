"""The report's plots, each drawn twice: an interactive plotly figure on the page, a matplotlib PNG beside it.

The page shows Optuna's plotly figures (`optuna.visualization`) and the dev curves, which hover to a trial: its
parameters, seed, stage and status. plotly.js is inlined once in the page's head, so the page still opens offline
as one file. The PNGs (`optuna.visualization.matplotlib`, the same plots) are written beside the page and logged on
the MLflow parent run, whose artifact view shows images but runs no script.

Both renderings get the same reference marks (`References`): the untouched model's objective and the published
point's, as horizontal lines; on a slice or contour plot, the published point itself, where its parameters are.
"""
from __future__ import annotations

import contextlib
import dataclasses
import html
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raycse.reporting.load import DevCurve
from raycse.reporting.tables import fmt, fmt_params, score

BASELINE_STYLE = {"color": "#404040", "dash": "dash"}
PUBLISHED_STYLE = {"color": "#d62728", "dash": "dot"}
FIGURE_CONFIG = {"displaylogo": False, "responsive": True}  # no link out: the page stays offline
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.25, "xanchor": "left", "x": 0}


@dataclass
class Drawing:
    """One plot in both renderings: `png()` returns matplotlib Axes (one, or an array), `figure()` a plotly
    Figure."""

    png: Callable[[], Any]
    figure: Callable[[], Any]


@dataclass
class Marks:
    """The reference marks of one plot, for each rendering (None: none)."""

    png: Callable[[list[Any]], None] | None = None
    figure: Callable[[Any], None] | None = None


def optuna_plot(name: str, *args: Any, **kwargs: Any) -> Drawing:
    """One of Optuna's plots (`plot_slice`, ...): both of its modules take the same arguments."""
    import optuna

    return Drawing(png=lambda: getattr(optuna.visualization.matplotlib, name)(*args, **kwargs),
                   figure=lambda: getattr(optuna.visualization, name)(*args, **kwargs))


def plotly_script() -> str:
    """plotly.js, inline: once per page, before the figures."""
    from plotly.offline import get_plotlyjs

    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def figure_html(figure: Any, div_id: str) -> str:
    """A figure as a div and the script that draws it (plotly.js must be on the page already)."""
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=FIGURE_CONFIG)


@contextlib.contextmanager
def plotting():
    """Agg, Optuna's rc changes (it switches to ggplot) undone afterwards, and none of its chatter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna

    verbosity = optuna.logging.get_verbosity()
    open_figures = set(plt.get_fignums())
    # optuna's "unique value length is less than 2" and the like: checked before
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        with matplotlib.rc_context(), warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # a parameter that took one value: Optuna still draws it, matplotlib widens the axis and says so
            warnings.filterwarnings("ignore", message="Attempting to set identical")
            yield
    finally:
        optuna.logging.set_verbosity(verbosity)
        for number in set(plt.get_fignums()) - open_figures:  # left by a plot Optuna gave up on half-way
            plt.close(number)


def plain_log_ticks(figure: Any) -> None:
    """Label a figure's log-scale axes in plain numbers ("0.02", "0.1", "3e-05"), as a space file writes them.

    matplotlib's default writes each label as mathtext ("2×10⁻²"), which its parser then lays out: about a quarter
    of a second of a report's first plots in a process. Which ticks get a label is matplotlib's choice still.

    Args:
        figure: a matplotlib Figure; its axes of any other scale are left as they are.

    Example:
        >>> import matplotlib.pyplot as plt
        >>> figure, ax = plt.subplots()
        >>> ax.set_xscale("log")
        >>> plain_log_ticks(figure)
        >>> ax.xaxis.get_major_formatter()(0.02)
        '0.02'
    """
    from matplotlib.ticker import LogFormatter, LogFormatterMathtext

    class PlainLogFormatter(LogFormatter):
        def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
            return f"{x:g}"

    def plain(formatter: Any, base: float) -> Any:  # the same choice of ticks (base, label-only-base), spelt plain
        if not isinstance(formatter, LogFormatterMathtext):  # not matplotlib's default: someone chose it
            return formatter
        return PlainLogFormatter(base, labelOnlyBase=formatter.labelOnlyBase)

    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log":
                base = axis.get_transform().base
                axis.set_major_formatter(plain(axis.get_major_formatter(), base))
                axis.set_minor_formatter(plain(axis.get_minor_formatter(), base))


# ------------------------------------------------------------------------------------- reference marks
def _axis_pairs(figure: Any) -> list[tuple[str, str, str]]:
    """(x axis, y axis, x axis title) of each subplot of a plotly figure ('x', 'y'; 'x2', 'y2'; ...)."""
    pairs = []
    for name in sorted(key for key in figure.layout.to_plotly_json() if key.startswith("xaxis")):
        suffix = name[len("xaxis"):]
        pairs.append((f"x{suffix}", f"y{suffix}", figure.layout[name].title.text or ""))
    return pairs or [("x", "y", "")]


@dataclass
class References:
    """The marks every objective axis gets: the untouched model and the published point."""

    baseline: float | None
    published: tuple[float, str] | None  # (objective, where it comes from); None in another family's section
    published_family: str
    published_params: dict[str, Any]  # study parameter name -> the published value

    def _lines(self) -> list[tuple[float, str, dict]]:
        lines = []
        if self.baseline is not None:
            lines.append((self.baseline, f"baseline, untouched model ({score(self.baseline)})", BASELINE_STYLE))
        if self.published is not None:
            lines.append((self.published[0], f"published point, {self.published_family}, {self.published[1]} "
                                             f"({score(self.published[0])})", PUBLISHED_STYLE))
        return lines

    # matplotlib
    def _png_lines(self, ax: Any) -> list[Any]:
        drawn = [ax.axhline(value, color=style["color"], linestyle="--" if style["dash"] == "dash" else ":",
                            linewidth=1.3, label=label) for value, label, style in self._lines()]
        if drawn and not ax.get_autoscaley_on():  # Optuna fixed the limits: widen them so that the lines show
            low, high = ax.get_ylim()
            values = [value for value, _, _ in self._lines()]
            pad = 0.05 * (max(high, *values) - min(low, *values))
            ax.set_ylim(min(low, min(values) - pad), max(high, max(values) + pad))
        return drawn

    # plotly
    def _figure_lines(self, figure: Any) -> None:
        for index, (value, label, style) in enumerate(self._lines()):
            for number, (x, y, _) in enumerate(_axis_pairs(figure)):
                figure.add_shape(type="line", xref=f"{x} domain", x0=0, x1=1, yref=y, y0=value, y1=value,
                                 line={**style, "width": 1.5}, name=label, showlegend=number == 0,
                                 legendrank=900 + index)

    def horizontal(self, x_label: str | None = None) -> Marks:
        """For a plot with its own legend (history, dev curves): the lines join it."""
        def png(axes: list[Any]) -> None:
            for ax in axes:
                self._png_lines(ax)
            axes[0].legend(fontsize=8, bbox_to_anchor=(1.02, 1), loc="upper left", borderaxespad=0.0)
            if x_label:
                axes[0].set_xlabel(x_label)
        return Marks(png, self._figure_lines)

    def slice(self) -> Marks:
        """Objective lines across; the published point where its parameter values are."""
        def png(axes: list[Any]) -> None:
            handles = []
            for ax in axes:
                handles = self._png_lines(ax)
                value = self.published_params.get(ax.get_xlabel())
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    handles.append(ax.axvline(value, color=PUBLISHED_STYLE["color"], linestyle="-.", linewidth=1.2,
                                              label="published value"))
            if handles:
                axes[0].figure.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8)

        def figure(fig: Any) -> None:
            self._figure_lines(fig)
            fig.update_layout(legend=LEGEND_BELOW)  # the right-hand side holds the trial-number colour bar
            shown = False
            for x, y, title in _axis_pairs(fig):
                value = self.published_params.get(title)
                if value is not None and self.published is not None:
                    self._star(fig, [value], [self.published[0]], x, y, showlegend=not shown)
                    shown = True
        return Marks(png, figure)

    def contour(self, params: list[str]) -> Marks:
        x_value, y_value = (self.published_params.get(p) for p in params)
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x_value, y_value))

        def png(axes: list[Any]) -> None:
            if numeric:
                axes[0].plot([x_value], [y_value], marker="*", markersize=14, color=PUBLISHED_STYLE["color"],
                             linestyle="", label="published point")
                axes[0].legend(fontsize=8, loc="lower right")

        def figure(fig: Any) -> None:
            if numeric:
                self._star(fig, [x_value], [y_value], "x", "y", showlegend=True)
                fig.update_layout(legend=LEGEND_BELOW)  # the right-hand side holds the objective's colour bar
        return Marks(png, figure)

    def _star(self, figure: Any, x: list, y: list, xaxis: str, yaxis: str, showlegend: bool) -> None:
        import plotly.graph_objects as go

        params = fmt_params({k.rsplit("/", 1)[-1]: v for k, v in self.published_params.items()})
        figure.add_trace(go.Scatter(
            x=x, y=y, xaxis=xaxis, yaxis=yaxis, mode="markers", name="published point", legendgroup="published",
            showlegend=showlegend, marker={"symbol": "star", "size": 15, "color": PUBLISHED_STYLE["color"]},
            hovertemplate=f"published point ({html.escape(self.published_family)}): {html.escape(params)}"
                          "<extra></extra>"))

    def for_family(self, family: str) -> References:
        """A family's section: the published objective line only in the published family's own plots."""
        return dataclasses.replace(self, published=self.published if family == self.published_family else None)


# ---------------------------------------------------------------------------------------- hover text
def trial_hover(curve: DevCurve) -> str:
    """What hovering a trial shows: which trial, its configuration, its seed, how it ended."""
    number = f" (Optuna #{curve.optuna_number})" if curve.optuna_number is not None else ""
    return (f"<b>trial {html.escape(curve.trial_id)}</b>{number}<br>{html.escape(curve.family)}: "
            f"{html.escape(fmt_params(curve.params)) or '-'}<br>seed {fmt(curve.seed)} · {html.escape(curve.stage)} · "
            f"{html.escape(curve.status)}")


def with_trial_hover(figure: Any, curves: list[DevCurve]) -> None:
    """Optuna's optimisation history hovers to the trial's parameters and seed, not only its number and value."""
    by_number = {c.optuna_number: c for c in curves if c.optuna_number is not None}
    for trace in figure.data:
        if trace.mode == "markers" and trace.x is not None and by_number:
            trace.text = [trial_hover(by_number[n]) if n in by_number else f"Optuna #{n}" for n in trace.x]
            trace.hovertemplate = "%{text}<br>value %{y:.2f}<extra></extra>"


# ------------------------------------------------------------------------------------------ dev curves
STAGE_LINES = {"search": "solid", "confirm": "dash", "stage0": "dot"}


def dev_curves(curves: list[DevCurve], target_name: str) -> Drawing:
    """Each child run's objective against its training steps (MLflow's step-indexed history)."""
    def png():
        import matplotlib.pyplot as plt

        figure, ax = plt.subplots(figsize=(9, 4.8))
        for curve in curves:
            steps, values = zip(*curve.points)
            ax.plot(steps, values, marker="o", markersize=3, linewidth=1,
                    linestyle={"solid": "-", "dash": "--", "dot": ":"}[STAGE_LINES.get(curve.stage, "solid")],
                    label=f"{curve.trial_id} ({curve.stage})" if len(curves) <= 12 else None)
        ax.set(xlabel="training step", ylabel=target_name, title="Dev curves")
        return ax

    def figure():
        import plotly.graph_objects as go

        fig = go.Figure()
        for curve in curves:
            steps, values = zip(*curve.points)
            fig.add_trace(go.Scatter(
                x=list(steps), y=list(values), mode="lines+markers", name=f"{curve.trial_id} ({curve.stage})",
                legendgroup=curve.stage, line={"dash": STAGE_LINES.get(curve.stage, "solid"), "width": 1.5},
                hovertemplate=trial_hover(curve) + "<br>step %{x}: %{y:.2f}<extra></extra>"))
        fig.update_layout(title="Dev curves", xaxis_title="training step", yaxis_title=target_name,
                          hovermode="closest", template="plotly_white")
        return fig
    return Drawing(png, figure)
