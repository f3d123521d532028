"""The cost model's wall clock for the first judging look's choosing and judging, before and after the published
point's first look moved into the choosing stage's Tune run: focal.yaml's full budget on one H100 (the recorded
steps), at 2, 4 and 8 trials a GPU, when the published point wins and when another configuration does.

    python benchmarks/scripts/published_ahead_model.py

P: a choosing run; T: a judging run (it scores the seven test tasks); each Tune run's first trial on a slot pays the
cold start (raycse.planning.cost_model.slot_seconds). Before: choosing (9 P), then judging (6 T when the published
point wins, else 12 T). After: choosing with the published point's 6 judging runs (9 P, then 6 T), then judging
(nothing, else the winner's 6 T).
"""
import dataclasses

import raycse
from raycse.planning.cost_model import Trial, slot_seconds
from raycse.settings.space import load_space

for share in (0.5, 0.25, 0.125):
    space = load_space("focal")
    space = dataclasses.replace(space, resources=dataclasses.replace(space.resources, gpus_per_worker=share))
    plan = raycse.plan(space, gpus=1, budget="full")
    cost = plan.cost
    shape = next(stage for stage in cost.stages if stage.name == "choose").blocks[0].most[0]
    P, T = Trial(shape.steps, shape.evals, False), Trial(shape.steps, shape.evals, True)

    def wall(trials, cost=cost):
        return slot_seconds(trials, cost.slots, cost.rates)[0] if trials else 0.0

    print(f"{cost.slots} trials a GPU: published wins {wall([P] * 9) + wall([T] * 6):.0f} s -> "
          f"{wall([P] * 9 + [T] * 6):.0f} s; another wins {wall([P] * 9) + wall([T] * 12):.0f} s -> "
          f"{wall([P] * 9 + [T] * 6) + wall([T] * 6):.0f} s")
