"""A surrogate of a recorded landscape: any configuration's dev curve, with seed noise, without training.

`benchmarks/landscape.py` records real trainings of a design of configurations, several seeds each; this module
fits a model to that file, so that a search benchmark can replay hundreds of searches through raycse's real
searcher and scheduler, each trial's training replaced by a lookup:

    surrogate = Surrogate.load("benchmarks/landscapes/focal-minilm-cls-cpu.json")
    surrogate.curve({"tau": 0.05, "m": 0.2, "lr": 4e-5}, seed=7)   # [(8, 81.9), (16, 82.6), (24, ...), (32, ...)]
    surrogate.seconds(16)          # what a trial stopped after 16 steps cost on the recording's device
    surrogate.true_objective(cfg)  # the configuration's expected best checkpoint: what a search is judged by
    surrogate.optimum()            # the best configuration of the space, for regret

The model, per recorded step s (every run of a landscape evaluates at the same steps):

  mean      a Gaussian process on the configurations' seed means, over the space's unit cube (log scale for
            loguniform parameters): constant mean, Matern 5/2 kernel with one length scale per parameter (ARD),
            a signal variance, and noise = the known variance of a mean of k seeds (pooled seed variance / k) plus
            a fitted nugget; the hyperparameters maximise the marginal likelihood (a few restarts of L-BFGS-B).
  seed      a whole residual curve (one run's values minus its configuration's mean, all steps together, scaled by
            sqrt(k / (k - 1)) to undo the shrinkage of subtracting a mean of k), drawn from the recorded runs by a
            generator seeded with (seed, configuration): the same configuration and seed always give the same
            curve, as a seeded training does, and a lucky early evaluation stays lucky later, as it does in a run.
  fidelity  the recorded steps themselves: a trial that a scheduler stops after its r-th evaluation has seen
            the first r points. A landscape records trainings of one length (the linear decay of the learning
            rate ends at the last step), so a replayed search must train that length.
  cost      start-up + steps x the median step time + evaluations x the median evaluation time, all measured
            in the recording, at its concurrency (`concurrency` trainings at once on its device).

Why a GP: a landscape holds tens (CPU) to a hundred or so (GPU) configurations in 3 dimensions, smooth in each,
with a known noise level; that is the GP's home ground (HPOBench's surrogate benchmarks use GPs and random
forests; YAHPO fits random forests and networks to tens of thousands of points). A random forest predicts
piecewise-constant steps between design points (a search would find plateaus that are the forest's, not the
landscape's) and has no notion of known noise; plain interpolation passes through the seed noise of each mean.
`fit_report()` checks the fit by leave-one-configuration-out: the GP's prediction of each configuration's mean
from all the others (exact, Rasmussen & Williams 2006, eq. 5.12), against the noise of that mean itself.

A query is a few numpy operations on arrays of (steps x configurations): tens of microseconds.
"""
from __future__ import annotations

import contextlib
import json
import math
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize
from scipy.stats import qmc

FORMAT = "raycse-landscape/1"
JITTER = 1e-8
# Seed noise is drawn from the residual curves recorded near the configuration, weighted by a Gaussian kernel whose
# width spreads the weight over about this many recorded configurations (None: every residual curve alike).
NOISE_NEIGHBOURS: float | None = 6.0


# -------------------------------------------------------------------------------------------------- the space
@dataclass(frozen=True)
class Axis:
    """One searched parameter: its name, its distribution's type and bounds."""

    name: str
    kind: str  # uniform | loguniform | int
    low: float
    high: float

    def to_unit(self, value: float) -> float:
        if self.kind == "loguniform":
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (value - self.low) / (self.high - self.low)

    def from_unit(self, u: float) -> float:
        if self.kind == "loguniform":
            return math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        value = self.low + u * (self.high - self.low)
        return float(round(value)) if self.kind == "int" else value


# ------------------------------------------------------------------------------------------ the Gaussian process
def _one_blas_thread():
    """OpenBLAS's threads spin on small matrices and stall on a busy machine (a GP fit of 32 points: 0.6 s with one
    thread, 26 s with two threads on two shared cores, measured): the fit keeps to one (threadpoolctl, which
    mlflow and sentence-transformers already require)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # the fit is only slower
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def matern52(a: np.ndarray, b: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Matern 5/2 correlation between the rows of a (n x d) and b (m x d), one length scale per dimension."""
    r = np.sqrt(np.maximum(((a[:, None, :] - b[None, :, :]) / lengths) ** 2, 0.0).sum(-1)) * math.sqrt(5.0)
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


@dataclass
class GP:
    """A fitted GP for one output: what a prediction needs (the training inputs, the weights, the scales)."""

    x: np.ndarray  # n x d, the unit-cube configurations
    y: np.ndarray  # n, the seed means
    noise: np.ndarray  # n, the known variance of each mean
    lengths: np.ndarray  # d
    signal: float  # signal variance
    nugget: float  # extra noise variance, fitted
    mean: float  # the constant mean
    alpha: np.ndarray | None = None  # K^-1 (y - mean)
    chol: tuple | None = None

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, noise: np.ndarray, restarts: int = 3, seed: int = 0) -> GP:
        """Maximise the log marginal likelihood over log length scales, log signal, log nugget (the constant mean
        is the generalised-least-squares mean, in closed form), with its analytic gradient."""
        n, d = x.shape
        scale = float(np.var(y)) or 1.0
        squared = (x[:, None, :] - x[None, :, :]) ** 2  # n x n x d
        ones = np.ones(n)

        def negative_lml(theta):
            lengths, signal, nugget = np.exp(theta[:d]), math.exp(theta[d]), math.exp(theta[d + 1])
            scaled = squared / lengths ** 2  # n x n x d
            r5 = np.sqrt(5.0 * scaled.sum(-1))
            decay = np.exp(-r5)
            k = signal * (1.0 + r5 + r5 * r5 / 3.0) * decay + np.diag(noise + nugget + JITTER * scale)
            try:
                chol = cho_factor(k, lower=True)
            except np.linalg.LinAlgError:
                return 1e25, np.zeros_like(theta)
            k_inv_ones = cho_solve(chol, ones)
            mean = float(k_inv_ones @ y / (ones @ k_inv_ones))
            alpha = cho_solve(chol, y - mean)
            value = 0.5 * (y - mean) @ alpha + np.log(np.diag(chol[0])).sum()
            # d value / d theta = 0.5 tr((K^-1 - alpha alpha^T) dK/dtheta); the GLS mean is optimal, so its own
            # dependence on theta adds nothing
            w = cho_solve(chol, np.eye(n)) - np.outer(alpha, alpha)
            common = signal * (5.0 / 3.0) * (1.0 + r5) * decay  # d K / d log length_d = common * scaled_d
            grad = np.empty_like(theta)
            grad[:d] = 0.5 * np.einsum("ij,ijd->d", w * common, scaled)
            grad[d] = 0.5 * np.sum(w * (k - np.diag(np.diag(k)) + np.diag(np.full(n, signal))))
            grad[d + 1] = 0.5 * nugget * np.trace(w)
            return value, grad

        rng = np.random.default_rng(seed)
        bounds = [(math.log(0.03), math.log(10.0))] * d + [(math.log(scale * 1e-3), math.log(scale * 1e2)),
                                                           (math.log(scale * 1e-6), math.log(scale * 1e1))]
        starts = [np.array([math.log(0.3)] * d + [math.log(scale), math.log(scale * 1e-2)])]
        starts += [np.array([rng.uniform(lo, hi) for lo, hi in bounds]) for _ in range(restarts - 1)]
        best = min((minimize(negative_lml, s, jac=True, method="L-BFGS-B", bounds=bounds) for s in starts),
                   key=lambda result: result.fun)
        lengths, signal, nugget = np.exp(best.x[:d]), math.exp(best.x[d]), math.exp(best.x[d + 1])
        gp = cls(x, y, noise, lengths, signal, nugget, 0.0)
        gp._factor()
        return gp

    def _factor(self) -> None:
        n = len(self.y)
        scale = float(np.var(self.y)) or 1.0
        k = self.signal * matern52(self.x, self.x, self.lengths) + np.diag(self.noise + self.nugget + JITTER * scale)
        self.chol = cho_factor(k, lower=True)
        ones = np.ones(n)
        k_inv_ones = cho_solve(self.chol, ones)
        self.mean = float(k_inv_ones @ self.y / (ones @ k_inv_ones))
        self.alpha = cho_solve(self.chol, self.y - self.mean)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.mean + self.signal * matern52(x, self.x, self.lengths) @ self.alpha

    def leave_one_out(self) -> np.ndarray:
        """Each point's predictive mean from all the others, hyperparameters fixed (R&W eq. 5.12)."""
        inverse = cho_solve(self.chol, np.eye(len(self.y)))
        return self.y - self.alpha / np.diag(inverse)


# -------------------------------------------------------------------------------------------------- the surrogate
class Surrogate:
    """A landscape file's curves for any configuration of its space (see the module's docstring)."""

    def __init__(self, landscape: dict, restarts: int = 3, noise_neighbours: float | None = NOISE_NEIGHBOURS):
        if landscape.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        setting = landscape["setting"]
        self.setting = setting
        self.axes = [Axis(name, d["type"], float(d["low"]), float(d["high"])) for name, d in setting["space"].items()]
        self.names = [axis.name for axis in self.axes]
        self.published = dict(setting.get("published") or {})
        self.untouched = (landscape.get("untouched") or {}).get("objective")
        runs = [r for r in landscape["runs"] if r["status"] == "ok" and r["steps"]]
        self.diverged = len(landscape["runs"]) - len(runs)
        if not runs:
            raise ValueError("the landscape holds no finished run")
        self.steps = tuple(runs[0]["steps"])
        runs = [r for r in runs if tuple(r["steps"]) == self.steps]  # runs cut short (none, normally) left out

        groups: dict[tuple, list[dict]] = {}
        for run in runs:
            groups.setdefault(tuple(run["config"][n] for n in self.names), []).append(run)
        self.configs = [dict(zip(self.names, key)) for key in groups]
        self.x = np.array([self.unit(c) for c in self.configs])
        values = [np.array([r["objective"] for r in group], dtype=float) for group in groups.values()]
        self.seeds_per_config = np.array([len(v) for v in values])
        self.means = np.array([v.mean(axis=0) for v in values])  # configurations x steps
        rows, owners = [], []
        for index, v in enumerate(values):
            if len(v) >= 2:
                rows.append((v - v.mean(axis=0)) * math.sqrt(len(v) / (len(v) - 1)))
                owners += [index] * len(v)
        if not rows:
            raise ValueError("the landscape has no configuration with two seeds: seed noise is unknown")
        self.residuals = np.concatenate(rows)  # runs x steps; the mean square of a pool is its pooled variance
        self._owner_x = self.x[np.array(owners)]  # where each residual curve was recorded
        self.noise_neighbours = noise_neighbours
        self._bandwidth = None if noise_neighbours is None else self._bandwidth_for(noise_neighbours)
        # the seed variance of each configuration's runs (pooled over its neighbourhood, or over all), per step
        self.seed_var_at = np.array([self._residual_weights(u) @ self.residuals ** 2 for u in self.x])
        self.seed_var = (self.residuals ** 2).mean(axis=0)  # pooled over the whole landscape
        with _one_blas_thread():
            self.gps = [GP.fit(self.x, self.means[:, s], self.seed_var_at[:, s] / self.seeds_per_config,
                               restarts=restarts, seed=s) for s in range(len(self.steps))]
        # every step's GP in stacked arrays, so that one query is one pass over (steps x configurations)
        self._lengths = np.stack([gp.lengths for gp in self.gps])  # steps x d
        self._weights = np.stack([gp.signal * gp.alpha for gp in self.gps])  # steps x n
        self._offsets = np.array([gp.mean for gp in self.gps])

        ok = [r for r in runs]
        self.step_s = float(np.median([r["train_s"][-1] / r["steps"][-1] for r in ok]))
        self.eval_s = float(np.median([r["eval_s"][-1] / len(r["steps"]) for r in ok]))
        self.startup_s = float(np.median([r["startup_s"] or 0.0 for r in ok]))
        recordings = landscape.get("recordings") or [{}]
        self.concurrency = int(recordings[-1].get("jobs", 1))
        self.device = recordings[-1].get("device", "unknown")
        self._optimum: tuple[dict, float] | None = None

    @classmethod
    def load(cls, path: str | Path, restarts: int = 3, noise_neighbours: float | None = NOISE_NEIGHBOURS) -> Surrogate:
        return cls(json.loads(Path(path).read_text()), restarts=restarts, noise_neighbours=noise_neighbours)

    # ------------------------------------------------------------------------------------------------ queries
    def unit(self, config: dict) -> np.ndarray:
        """A configuration's point in the unit cube; values outside the space are clipped to its bounds."""
        missing = [n for n in self.names if n not in config]
        if missing:
            raise KeyError(f"configuration {config} lacks {', '.join(missing)}")
        return np.array([min(1.0, max(0.0, axis.to_unit(float(config[axis.name])))) for axis in self.axes])

    def _mean_curves(self, units: np.ndarray) -> np.ndarray:
        """Mean curves (points x steps) at unit-cube points (points x d)."""
        diff = (units[:, None, None, :] - self.x[None, None, :, :]) / self._lengths[None, :, None, :]
        r = np.sqrt((diff * diff).sum(-1)) * math.sqrt(5.0)  # points x steps x n
        k = (1.0 + r + r * r / 3.0) * np.exp(-r)
        return self._offsets + (k * self._weights[None]).sum(-1)

    def mean_curve(self, config: dict) -> list[tuple[int, float]]:
        """The configuration's expected objective at each recorded step (the mean over seeds)."""
        return list(zip(self.steps, self._mean_curves(self.unit(config)[None])[0].tolist()))

    def _bandwidth_for(self, neighbours: float) -> float:
        """The kernel width at which a recorded configuration's residual weights spread over `neighbours`
        configurations on average (the effective number, (sum w)^2 / sum w^2, over configurations)."""
        distinct = np.unique(self._owner_x, axis=0)

        def effective(h):
            d2 = ((distinct[:, None, :] - distinct[None, :, :]) ** 2).sum(-1)
            w = np.exp(-0.5 * d2 / h ** 2)
            return float(np.mean(w.sum(1) ** 2 / (w ** 2).sum(1)))

        low, high = 1e-3, 10.0
        if effective(high) <= neighbours:
            return high
        for _ in range(60):
            mid = math.sqrt(low * high)
            low, high = (mid, high) if effective(mid) < neighbours else (low, mid)
        return high

    def _residual_weights(self, u: np.ndarray) -> np.ndarray:
        """Probabilities over the recorded residual curves for a unit-cube point: a Gaussian kernel of the distance
        to where each was recorded (`noise_neighbours`), or all alike (None)."""
        if self._bandwidth is None:
            return np.full(len(self.residuals), 1.0 / len(self.residuals))
        w = np.exp(-0.5 * ((self._owner_x - u) ** 2).sum(-1) / self._bandwidth ** 2)
        return w / w.sum()

    def noise(self, config: dict, seed: int) -> np.ndarray:
        """The seed's residual curve for this configuration: one recorded run's, drawn reproducibly from those
        recorded near it (see `noise_neighbours`)."""
        packed = struct.pack(f"<{len(self.names)}d", *(float(config[n]) for n in self.names))
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(packed)])
        weights = self._residual_weights(self.unit(config))
        return self.residuals[min(int(np.searchsorted(np.cumsum(weights), rng.random())), len(weights) - 1)]

    def curve(self, config: dict, seed: int) -> list[tuple[int, float]]:
        """What a training of `config` with `seed` reports: (step, objective) at each recorded step."""
        values = self._mean_curves(self.unit(config)[None])[0] + self.noise(config, seed)
        return list(zip(self.steps, values.tolist()))

    def true_objective(self, config: dict, kind: str = "best") -> float:
        """What a configuration is worth, without seed luck: 'best', the expected best checkpoint (the maximum
        over the curve, averaged over every recorded residual curve: what raycse keeps and confirms), or
        'final', the expected objective at the last step."""
        mean = self._mean_curves(self.unit(config)[None])[0]
        if kind == "final":
            return float(mean[-1])
        if kind != "best":
            raise ValueError(f"kind: 'best' or 'final', got {kind!r}")
        return float(self._residual_weights(self.unit(config)) @ (mean[None, :] + self.residuals).max(axis=1))

    def seconds(self, steps: int) -> float:
        """A trial's seconds on the recording's device (at its concurrency) when it stops after `steps` steps:
        start-up, the steps, and the evaluations at the recorded steps it reached."""
        evals = sum(1 for s in self.steps if s <= steps)
        return self.startup_s + steps * self.step_s + evals * self.eval_s

    def config_of_unit(self, u: np.ndarray) -> dict:
        return {axis.name: axis.from_unit(float(v)) for axis, v in zip(self.axes, np.clip(u, 0.0, 1.0))}

    def optimum(self, kind: str = "best", candidates: int = 4096) -> tuple[dict, float]:
        """The configuration with the highest true objective (a Sobol scan of the space, then L-BFGS-B from the
        best few), and that objective: the reference for a search's regret."""
        if kind == "best" and self._optimum is not None:
            return self._optimum

        def value(u):
            return self.true_objective(self.config_of_unit(np.asarray(u)), kind)

        units = qmc.Sobol(d=len(self.axes), scramble=True, seed=0).random(candidates)
        units = np.vstack([units, self.x])
        means = self._mean_curves(units)
        if kind == "best":
            weights = np.stack([self._residual_weights(u) for u in units])
            scores = (weights * (means[:, None, :] + self.residuals[None]).max(-1)).sum(-1)
        else:
            scores = means[:, -1]
        starts = units[np.argsort(scores)[-4:]]
        results = [minimize(lambda u: -value(u), s, method="L-BFGS-B", bounds=[(0.0, 1.0)] * len(self.axes))
                   for s in starts]
        best = min(results, key=lambda r: r.fun)
        found = (self.config_of_unit(best.x), float(-best.fun))
        if kind == "best":
            self._optimum = found
        return found

    # ---------------------------------------------------------------------------------------------- the fit
    def fit_report(self) -> dict:
        """Leave-one-configuration-out error of the mean model at each step, against the seed noise.

        rmse_loco: the GP's prediction of a configuration's mean from the other configurations, against its
        recorded mean. That mean carries seed noise of its own (noise_of_mean: pooled seed std / sqrt(seeds)),
        so a perfect model would score about that; model_error = sqrt(rmse_loco^2 - noise_of_mean^2) is what the
        model adds. For scale: seed_std, the spread of the configuration means (std_of_means), and the error of
        predicting every configuration by the mean of the others (rmse_constant).
        """
        per_step = []
        for s, gp in enumerate(self.gps):
            held_out = gp.leave_one_out()
            y = self.means[:, s]
            rmse = float(np.sqrt(np.mean((held_out - y) ** 2)))
            n = len(y)
            others = (y.sum() - y) / (n - 1)
            noise_of_mean = float(np.sqrt(np.mean(self.seed_var_at[:, s] / self.seeds_per_config)))
            per_step.append({
                "step": self.steps[s], "rmse_loco": round(rmse, 4), "noise_of_mean": round(noise_of_mean, 4),
                "model_error": round(math.sqrt(max(0.0, rmse ** 2 - noise_of_mean ** 2)), 4),
                "seed_std": round(math.sqrt(self.seed_var[s]), 4),
                "std_of_means": round(float(np.std(y, ddof=1)), 4),
                "rmse_constant": round(float(np.sqrt(np.mean((others - y) ** 2))), 4),
                "max_abs_loco": round(float(np.max(np.abs(held_out - y))), 4),
                "length_scales": {n_: round(float(v), 3) for n_, v in zip(self.names, gp.lengths)},
                "nugget_std": round(math.sqrt(gp.nugget), 4),
            })
        return {"configurations": len(self.configs), "runs": int(self.seeds_per_config.sum()),
                "diverged_runs_left_out": self.diverged, "steps": per_step}


def main(argv: list[str] | None = None) -> int:
    """Print a landscape's fit report, its optimum and a query's time: `python benchmarks/surrogate.py FILE`."""
    import argparse
    import time

    parser = argparse.ArgumentParser(description="fit a surrogate to a landscape file and report its fit")
    parser.add_argument("landscape")
    parser.add_argument("--output", default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    surrogate = Surrogate.load(args.landscape)
    fit_s = time.perf_counter() - started
    report = surrogate.fit_report()
    for row in report["steps"]:
        print(f"step {row['step']:>4}: LOCO rmse {row['rmse_loco']:.3f} (noise of a mean {row['noise_of_mean']:.3f}, "
              f"model error {row['model_error']:.3f}, max {row['max_abs_loco']:.3f}); seed std {row['seed_std']:.3f}, "
              f"std of means {row['std_of_means']:.3f}, constant-model rmse {row['rmse_constant']:.3f}; "
              f"length scales {row['length_scales']}")
    config, value = surrogate.optimum()
    config_pub = surrogate.published
    report["optimum"] = {"config": config, "true_objective": round(value, 4)}
    if config_pub:
        report["published"] = {"config": config_pub, "true_objective": round(surrogate.true_objective(config_pub), 4)}
    print(f"optimum {value:.2f} at {config}" + (f"; published point {report['published']['true_objective']:.2f}"
                                                if config_pub else ""))
    probe = surrogate.configs[0]
    clock = time.perf_counter()
    for seed in range(1000):
        surrogate.curve(probe, seed)
    query_us = (time.perf_counter() - clock) / 1000 * 1e6
    report.update({"fit_seconds": round(fit_s, 3), "curve_query_us": round(query_us, 1),
                   "seconds_full_run": round(surrogate.seconds(surrogate.steps[-1]), 2)})
    print(f"fit {fit_s:.2f} s; a curve query {query_us:.0f} us; a full run {report['seconds_full_run']:.1f} s "
          f"({surrogate.device}, {surrogate.concurrency} at once)")
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
