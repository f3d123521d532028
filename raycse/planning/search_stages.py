"""A search's stages as the driver runs them (raycse/driver/run.py: the untouched model's scoring beside the first
trials, DCLR's stage 0, search, choose, judge), each with its trials, seeds and what they do, and the work the cost
model counts for them (raycse/planning/cost_model.py): steps, evaluations, the seven test tasks where the file asks for
them, ASHA's stops in the search stage, one Tune run per judging look, and the published point's first judging
look in the choosing stage's Tune run where the space allows it.
"""
from __future__ import annotations

from dataclasses import dataclass

from raycse.planning.cost_model import Block, StageCost, Trial, asha_rungs, asha_trials, evals_of
from raycse.planning.judging_runs import look_reach
from raycse.settings.space import SearchSpace

NO_MAX_STEPS = 10**7  # the search's scheduler's max_t without max_steps (raycse/driver/tune/newest_first.py)


@dataclass
class StagePlan:
    """One stage of the plan: its trials (at most), their seeds, what they do, and the model's count of them."""

    name: str
    trials: int
    seeds: str
    what: str
    steps_per_trial: int = 0
    evals_per_trial: int = 0
    cost: StageCost | None = None  # None: the untouched model's scoring, counted beside the search stage's trials


def stage0_steps(space: SearchSpace, steps: int) -> tuple[int, int]:
    """(steps, evaluations) of stage 0's one SimCSE training (`stage0_space`: SimCSE's recipe at the search's scale),
    from the `steps` of the search's trials: its own max_steps, else its epoch over the sentences theirs read."""
    from raycse.driver.layout import stage0_space

    base, recipe = space.base, stage0_space(space).base
    if recipe.max_steps is not None:
        steps0 = recipe.max_steps
    else:
        rows = steps * base.batch_size * base.workers // max(1, base.epochs)
        steps0 = max(1, recipe.epochs * (rows // (recipe.batch_size * recipe.workers)))
    return steps0, evals_of(steps0, recipe.eval_steps)


def stages_of(space: SearchSpace, steps: int, with_stage0: bool,
            untouched_known: bool = False) -> tuple[list[StagePlan], list[StageCost]]:
    """The stages of `plan` (its trials of `steps` each) as printed, and as the cost model counts them.
    `untouched_known`: the untouched model's figures are kept from a run before or shipped, so not scored."""
    from raycse.judging.confirmation_plan import seed_blocks

    base, on_all = space.base, space.test_eval.scores_every_run
    evals = evals_of(steps, base.eval_steps)
    whole = Trial(steps, evals, on_all)
    untouched = None if untouched_known else Trial(0, 1, space.test_eval.scores_any, checkpoints=False)
    scored = " and test tasks" if space.test_eval.scores_any else ""
    stages = [StagePlan("baseline", 1, "-", f"the untouched model's objective{scored}, " + (
        "kept from a run before or shipped for this model and data: nothing to score" if untouched_known else
        "beside the first search trials (a first run: a kept score costs nothing)"), 0, 0 if untouched_known else 1)]
    if with_stage0:
        steps0, evals0 = stage0_steps(space, steps)
        stages.append(StagePlan("stage0", 1, str(base.seed), "DCLR's complementary SimCSE model, on SimCSE's recipe",
                                steps0, evals0,
                                StageCost("stage0", [Block([Trial(steps0, evals0)], [Trial(steps0, evals0)])])))
    stopped = "" if space.scheduler["name"] != "asha" else (
        f"; ASHA stops 1 in {space.scheduler['reduction_factor']:g} at each rung, expected")
    stages.append(StagePlan("search", space.num_samples, f"{base.seed} (every trial)",
                            f"{space.num_samples} configurations, the published point first{stopped}", steps, evals,
                            StageCost("search", [Block(search_trials(space, steps, on_all),
                                                       [whole] * space.num_samples)], beside=untouched)))
    if space.confirm is not None:
        confirm = space.confirm
        blocks = seed_blocks(base.seed, top_k=confirm.top_k, choose_seeds=confirm.choose_seeds,
                             judge_seeds=confirm.judge_seeds)
        ahead = published_ahead(space, steps, evals)
        if blocks.choose:
            runs = confirm.top_k * len(blocks.choose)
            beside = (f"; beside them the published point's first {len(ahead)} judging runs (judged whichever wins)"
                      if ahead else "")
            trials = [whole] * runs + ahead  # the order the driver runs them
            stages.append(StagePlan("choose", runs, _seed_range(blocks.choose),
                                    f"the top {confirm.top_k} configurations on {len(blocks.choose)} fresh seeds each"
                                    f"{beside}", steps, evals, StageCost("choose", [Block(trials, trials)])))
        stages.append(judge_stage(space, steps, evals, blocks.judge, ahead=len(ahead)))
    return stages, [stage.cost for stage in stages if stage.cost is not None]


def search_trials(space: SearchSpace, steps: int, tests: bool) -> list[Trial]:
    """The search stage's trials as expected: ASHA's stops at its rungs (driver/tune/newest_first.py's), or none."""
    base, scheduler = space.base, space.scheduler
    if scheduler["name"] != "asha":
        return [Trial(steps, evals_of(steps, base.eval_steps), tests)] * space.num_samples
    rungs = asha_rungs(steps, int(scheduler["grace_evals"] * base.eval_steps), scheduler["reduction_factor"],
                       (base.max_steps or NO_MAX_STEPS) + 1)
    return asha_trials(space.num_samples, steps, base.eval_steps, rungs, scheduler["reduction_factor"], tests)


def published_ahead(space: SearchSpace, steps: int, evals: int) -> list[Trial]:
    """The published point's judging runs of the first look, trained in the choosing stage's Tune run where the space
    allows it (`SearchSpace.judges_published_ahead`); none otherwise."""
    if not space.judges_published_ahead:
        return []
    confirm = space.confirm
    on_test = confirm.judging_seeds_on_test if space.test_eval.scores_any else 0
    return [Trial(steps, evals, index < on_test) for index in range(confirm.design_looks[0])]


def judge_stage(space: SearchSpace, steps: int, evals: int, seeds: tuple[int, ...], ahead: int = 0) -> StagePlan:
    """The winner and the published point on the judging seeds, one Tune run per look; the first `test_seeds` score
    the test tasks. Each look's block runs with the chance the looks give (judging_runs). `ahead`: the published
    point's first runs, trained in the choosing stage's Tune run (`published_ahead`), which its first look leaves
    out (at most: a winner that is the published point leaves it nothing to train)."""
    confirm = space.confirm
    looks = confirm.design_looks
    on_test = confirm.judging_seeds_on_test if space.test_eval.scores_any else 0
    blocks, start = [], 0
    for end, reach in zip(looks, look_reach(tuple(looks))):
        sides = 1 if start < ahead else 2
        trials = [Trial(steps, evals, index < on_test) for _side in range(sides) for index in range(start, end)]
        blocks.append(Block(trials, trials, reach))
        start = end
    cost = StageCost("judge", blocks)
    tests = ("" if not on_test else ", all also on the seven test tasks" if on_test == len(seeds)
             else f", the first {on_test} also on the seven test tasks")
    looked = (f"; looks after {', '.join(map(str, looks))} seeds: {cost.runs():.1f} runs expected" if len(looks) > 1
              else "")
    early = f"; the published point's first {ahead} trained beside the choosing runs" if ahead else ""
    what = f"the winner and the published point on {len(seeds)} fresh seeds each{tests}{looked}{early}"
    return StagePlan("judge", 2 * len(seeds), _seed_range(seeds), what, steps, evals, cost)


def _seed_range(seeds: tuple[int, ...]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
