"""The published point's first judging look trains beside the choosing runs (raycse/driver/stages/choose.py): the
judging stage then trains only the winner's runs, and starts no Tune experiment at all when the winner is the
published point. A real Ray, Tune, Optuna and MLflow, with the scale benchmark's stand-in trial in place of training
(benchmarks/simulated_trial.py), whose landscape here decides whether the published point wins."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from benchmark_modules import load_benchmark

SimulatedTrials = load_benchmark("simulated_trial").SimulatedTrials
ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = {"tau": 0.07, "m": 0.3, "lr": 3.0e-5}  # focal.yaml's


@dataclasses.dataclass(frozen=True)
class TwoLevels:
    """A landscape of two levels: the published point on one, every other configuration on the other (no noise)."""

    published_wins: bool

    def curve(self, params: dict, seed: int) -> list[tuple[int, float]]:
        published = all(abs(params.get(name, 0.0) - value) < 1e-12 for name, value in PUBLISHED.items())
        final = 86.0 if published == self.published_wins else 85.0
        return [(2, final - 1.0), (4, final)]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("published_wins", [True, False], ids=["the-published-point-wins", "another-wins"])
def test_the_published_points_first_look_trains_beside_the_choosing_runs(tmp_path, tiny_bert_dir, local_ray,
                                                                         published_wins):
    from mlflow.tracking import MlflowClient

    from raycse.driver.run import run_stages
    from raycse.driver.state import BenchmarkHook, SearchOptions
    from raycse.judging.confirmation_plan import ConfirmPlan
    from raycse.settings.space import load_space

    space = load_space(ROOT / "search_spaces" / "focal.yaml")
    base = dataclasses.replace(space.base, model=str(tiny_bert_dir), max_steps=4, eval_steps=2)
    space = dataclasses.replace(space, experiment="ahead", num_samples=3, test_eval="none", base=base,
                                max_concurrent=1, confirm=ConfirmPlan(top_k=2, choose_seeds=1, judge_seeds=2),
                                resources=dataclasses.replace(space.resources, cpus_per_worker=1, gpus_per_worker=0))
    assert space.judges_published_ahead
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = SearchOptions(tracking_uri=uri, storage_path=str(tmp_path / "ray"), budget="full",
                            benchmark=BenchmarkHook(trial_stand_in=SimulatedTrials(curve=TwoLevels(published_wins),
                                                                                   eval_interval_s=0.05)))
    state = run_stages(space, options, log=lambda line: None)

    published = state.outcome.published_key
    assert (state.winner_key == published) is published_wins
    assert [(run.stage, run.seed) for run in state.choose_runs] == [("choose", 43)] * 2
    ahead = sorted((run for run in state.judge_runs if run.config_key == published), key=lambda run: run.seed)
    assert [(run.seed, run.status) for run in ahead] == [(44, "finished"), (45, "finished")]
    # trained in the choosing stage's Tune experiment; the judging stage's holds the winner's runs, if any
    assert all(run.checkpoint.startswith(str(tmp_path / "ray" / "ahead-choose") + "/") for run in ahead)
    winners = [run for run in state.judge_runs if run.config_key != published]
    assert sorted(run.seed for run in winners) == ([] if published_wins else [44, 45])
    assert all(run.checkpoint.startswith(str(tmp_path / "ray" / "ahead-judge") + "/") for run in winners)
    assert (tmp_path / "ray" / "ahead-judge").exists() is not published_wins

    # the decision reads every judging run, wherever it trained; the choice read the choosing runs alone
    judged = {config.key: config.judge for config in state.outcome.decision.configs if config.judge}
    assert set(judged) == {published, state.winner_key} and all(block.n == 2 for block in judged.values())
    client = MlflowClient(tracking_uri=uri)
    children = client.search_runs([client.get_experiment_by_name("ahead").experiment_id],
                                  f"tags.mlflow.parentRunId = '{state.parent_run_id}'")
    stages = sorted((r.data.tags["raycse.stage"], r.data.tags["raycse.seed"]) for r in children
                    if r.data.tags["raycse.stage"] != "search")
    assert stages == sorted([("choose", "43")] * 2 + [("judge", "44"), ("judge", "45")] * (1 if published_wins else 2))
