"""benchmarks/surrogate.py on a small synthetic landscape file whose true function is known."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from benchmark_modules import load_benchmark

surrogate_module = load_benchmark("surrogate")
Surrogate = surrogate_module.Surrogate

SPACE = {"tau": {"type": "loguniform", "low": 0.02, "high": 0.2},
         "m": {"type": "uniform", "low": 0.0, "high": 0.6},
         "lr": {"type": "loguniform", "low": 1e-5, "high": 1e-4}}
STEPS = [8, 16, 24, 32]
SEED_STD = 0.1


def to_unit(config: dict) -> np.ndarray:
    out = []
    for name, d in SPACE.items():
        if d["type"] == "loguniform":
            out.append((math.log(config[name]) - math.log(d["low"])) / (math.log(d["high"]) - math.log(d["low"])))
        else:
            out.append((config[name] - d["low"]) / (d["high"] - d["low"]))
    return np.array(out)


def true_curve(config: dict) -> np.ndarray:
    """A smooth landscape with its optimum inside the space (tau's unit 0.3, lr's unit 0.7; m matters little),
    rising over the steps as a training does."""
    u = to_unit(config)
    peak = 84.0 - 6.0 * (u[0] - 0.3) ** 2 - 8.0 * (u[2] - 0.7) ** 2 - 0.5 * (u[1] - 0.5) ** 2
    return np.array([80.0 + (peak - 80.0) * (1 - math.exp(-s / 12)) for s in STEPS])


def synthetic_landscape(points: int = 32, seeds: int = 3, seed: int = 0, noise_by_lr: bool = False,
                        seed_effects: tuple[float, ...] | None = None) -> dict:
    from scipy.stats import qmc

    rng = np.random.default_rng(seed)
    units = qmc.Sobol(d=3, scramble=True, seed=seed).random(points)
    runs = []
    for u in units:
        config = {}
        for (name, d), v in zip(SPACE.items(), u):
            lo, hi = d["low"], d["high"]
            config[name] = math.exp(math.log(lo) + v * (math.log(hi) - math.log(lo))) if d["type"] == "loguniform" \
                else lo + v * (hi - lo)
        mean = true_curve(config)
        std = SEED_STD * (0.2 + 3.0 * u[2] ** 2) if noise_by_lr else SEED_STD  # 0.02 at lr 1e-5, 0.32 at 1e-4
        for s in range(seeds):
            # one offset per run plus a little per step: a lucky run stays lucky, as in training
            values = mean + rng.normal(0, std) + rng.normal(0, std / 4, len(STEPS))
            if seed_effects:  # the seed's own effect, the same in every configuration
                values = values + seed_effects[s]
            runs.append({"config": config, "seed": 42 + s, "status": "ok", "steps": STEPS,
                         "objective": [round(float(v), 4) for v in values],
                         "train_s": [0.5 * st for st in STEPS], "eval_s": [2.0 * (i + 1) for i in range(len(STEPS))],
                         "startup_s": 1.5, "wall_s": 30.0})
    runs.append({"config": runs[0]["config"], "seed": 99, "status": "diverged", "steps": [], "objective": [],
                 "train_s": [], "eval_s": [], "startup_s": None, "wall_s": 3.0})
    return {"format": "raycse-landscape/1", "preset": "test",
            "setting": {"space": SPACE, "published": {"tau": 0.07, "m": 0.3, "lr": 3e-5}, "seeds": [42, 43, 44]},
            "untouched": {"objective": 79.7}, "recordings": [{"jobs": 2, "device": "cpu"}], "runs": runs}


@pytest.fixture(scope="module")
def landscape_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("landscape") / "synthetic.json"
    path.write_text(json.dumps(synthetic_landscape()))
    return path


@pytest.fixture(scope="module")
def surrogate(landscape_file) -> Surrogate:
    return Surrogate.load(landscape_file, restarts=2)


def test_mean_curve_follows_the_true_landscape_between_the_design_points(surrogate):
    rng = np.random.default_rng(1)
    errors = []
    for _ in range(50):
        config = {"tau": float(np.exp(rng.uniform(np.log(0.02), np.log(0.2)))), "m": float(rng.uniform(0, 0.6)),
                  "lr": float(np.exp(rng.uniform(np.log(1e-5), np.log(1e-4))))}
        steps, values = zip(*surrogate.mean_curve(config))
        assert list(steps) == STEPS
        errors.append(np.array(values) - true_curve(config))
    rmse = float(np.sqrt(np.mean(np.square(errors))))
    # the landscape spans ~4 points; seed means of 3 runs carry ~0.06 of noise: the fit must be far below the spread
    assert rmse < 0.25, rmse


def test_curve_is_reproducible_per_seed_and_its_noise_is_the_recorded_one(surrogate):
    config = {"tau": 0.05, "m": 0.2, "lr": 5e-5}
    first = surrogate.curve(config, 7)
    np.random.seed(123)  # neither the global random state nor the draws for other seeds may move a seed's curve
    curves = np.array([[v for _, v in surrogate.curve(config, seed)] for seed in range(400)])
    assert surrogate.curve(config, 7) == first and curves[7].tolist() == [v for _, v in first]
    assert len({tuple(c) for c in curves}) > 20  # seeds draw different residual curves
    mean = np.array([v for _, v in surrogate.mean_curve(config)])
    # each curve is the mean plus the seed's offset plus one of the recorded residual curves
    residuals = curves - mean
    for seed, r in enumerate(residuals[:20]):
        assert np.allclose(r, surrogate.seed_offset(seed) + surrogate.interaction(config, seed))
        assert np.isclose(surrogate.residuals, surrogate.interaction(config, seed)).all(axis=1).any()
    # and their spread is the recorded seed noise (one offset of SEED_STD per run, a little more per step)
    assert residuals.std(axis=0) == pytest.approx(np.full(len(STEPS), SEED_STD), rel=0.35)
    # the same seed on another configuration is not the same draw
    other = {"tau": 0.05, "m": 0.21, "lr": 5e-5}
    draws = [tuple(surrogate.interaction(other, s)) == tuple(surrogate.interaction(config, s)) for s in range(50)]
    assert sum(draws) < 10


def test_pooled_seed_std_and_diverged_runs(surrogate):
    assert surrogate.diverged == 1
    assert len(surrogate.configs) == 32
    last_step_std = math.sqrt(surrogate.seed_var[-1] + surrogate.seed_effect_var[-1])
    assert last_step_std == pytest.approx(math.hypot(SEED_STD, SEED_STD / 4), rel=0.25)


def test_seconds_counts_start_up_steps_and_the_evaluations_reached(surrogate):
    # recorded: 0.5 s a step, 2 s an evaluation, 1.5 s start-up
    assert surrogate.seconds(32) == pytest.approx(1.5 + 32 * 0.5 + 4 * 2.0)
    assert surrogate.seconds(8) == pytest.approx(1.5 + 8 * 0.5 + 1 * 2.0)
    assert surrogate.seconds(12) == pytest.approx(1.5 + 12 * 0.5 + 1 * 2.0)
    assert surrogate.concurrency == 2


def test_optimum_and_true_objective(surrogate):
    config, value = surrogate.optimum()
    u = to_unit(config)
    assert abs(u[0] - 0.3) < 0.15 and abs(u[2] - 0.7) < 0.15, config
    assert value == pytest.approx(true_curve(config).max(), abs=0.3)
    # the expected best checkpoint is at least the expected final value (a maximum over the curve)
    published = surrogate.published
    assert surrogate.true_objective(published) >= surrogate.true_objective(published, kind="final") - 1e-9
    assert surrogate.true_objective(published) < value


def test_fit_report_leave_one_configuration_out(surrogate):
    report = surrogate.fit_report()
    assert report["configurations"] == 32 and report["diverged_runs_left_out"] == 1
    last = report["steps"][-1]
    assert last["step"] == 32
    # the held-out means are predicted far better than by the mean of the others, and near their own noise
    assert last["rmse_loco"] < 0.3 * last["rmse_constant"]
    assert last["rmse_loco"] < 4 * last["noise_of_mean"]


def test_out_of_space_values_are_clipped_and_missing_ones_refused(surrogate):
    inside = surrogate.mean_curve({"tau": 0.2, "m": 0.6, "lr": 1e-4})
    assert surrogate.mean_curve({"tau": 0.5, "m": 0.9, "lr": 1e-3}) == inside
    with pytest.raises(KeyError, match="lr"):
        surrogate.curve({"tau": 0.1, "m": 0.1}, 0)


def test_a_landscape_without_two_seeds_of_any_configuration_is_refused(tmp_path):
    one_seed = synthetic_landscape(points=8, seeds=1)
    with pytest.raises(ValueError, match="two seeds"):
        Surrogate(one_seed)
    with pytest.raises(ValueError, match="raycse-landscape"):
        Surrogate({**one_seed, "format": "something else"})


def test_seed_noise_is_drawn_from_the_runs_recorded_nearby():
    """Where the recorded seeds disagree more (here: at high learning rates), the drawn noise is larger; pooled
    over the whole landscape (noise_neighbours=None) it is the same everywhere."""
    data = synthetic_landscape(points=32, seeds=2, noise_by_lr=True)
    low, high = {"tau": 0.07, "m": 0.3, "lr": 1.2e-5}, {"tau": 0.07, "m": 0.3, "lr": 9e-5}

    def drawn_std(surrogate, config):
        return float(np.std([surrogate.noise(config, seed)[-1] for seed in range(600)]))

    local = Surrogate(data, restarts=1)
    assert drawn_std(local, high) > 4 * drawn_std(local, low)
    pooled = Surrogate(data, restarts=1, noise_neighbours=None)
    assert drawn_std(pooled, high) == pytest.approx(drawn_std(pooled, low), rel=0.3)
    # the seed noise of each configuration's mean, which the GP is told, follows the same neighbourhood
    lr_unit = local.x[:, 2]
    assert local.seed_var_at[lr_unit > 0.8, -1].mean() > 4 * local.seed_var_at[lr_unit < 0.2, -1].mean()


def test_a_seeds_own_effect_is_shared_by_every_configuration():
    """Seeds 42 and 43 shift every configuration by -0.4 and +0.4 (the interaction is small): the surrogate
    separates the two, every configuration trained with one seed gets the same offset, and so the difference
    between two configurations under one seed carries the interaction's noise only."""
    surrogate = Surrogate(synthetic_landscape(points=32, seeds=2, seed_effects=(-0.4, 0.4)), restarts=1)
    # Derivation: with two seeds, seed 42's estimated effect is the mean over the 32 configurations of
    # (v_42 - v_43) / 2 = -0.4 + (n_42 - n_43) / 2, each run's noise n an offset N(0, 0.1) plus a step's N(0, 0.025):
    # -0.4 with a sd of sqrt(2 x (0.1^2 + 0.025^2) / 4 / 32) = 0.013. Centred over the two seeds (their mean is 0
    # already), then scaled by sqrt(R / (R - 1)) = sqrt(2) for R = 2 recorded seeds, to undo the centring: +-0.566,
    # sd 0.018. Tolerance 3 sd.
    assert sorted(surrogate.seed_offsets[:, -1]) == pytest.approx([-0.4 * math.sqrt(2), 0.4 * math.sqrt(2)], abs=0.055)
    assert math.sqrt(surrogate.seed_var[-1]) == pytest.approx(math.hypot(SEED_STD, SEED_STD / 4), rel=0.3)
    a, b = {"tau": 0.05, "m": 0.2, "lr": 5e-5}, {"tau": 0.1, "m": 0.4, "lr": 2e-5}
    same_seed = [surrogate.noise(a, s)[-1] - surrogate.noise(b, s)[-1] for s in range(400)]
    assert np.std(same_seed) < 0.25  # two interactions of ~0.1 each; the offsets of +-0.6 cancel
    assert np.std([surrogate.noise(a, s)[-1] for s in range(400)]) > 0.5
    assert all(np.array_equal(surrogate.seed_offset(s), surrogate.noise(a, s) - surrogate.interaction(a, s))
               for s in range(10))
    # without the decomposition the seed effect becomes configuration noise, and the means are unchanged
    plain = Surrogate(synthetic_landscape(points=32, seeds=2, seed_effects=(-0.4, 0.4)), restarts=1,
                      seed_effects=False)
    assert math.sqrt(plain.seed_var[-1]) > 0.4
    assert np.allclose(plain.means, surrogate.means)
