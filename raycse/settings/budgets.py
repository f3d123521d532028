"""The budgets a search can run (`--budget NAME`, `budget="NAME"`), named once: the file's own settings (the full
budget) and the sections of a space file whose settings replace them. `SearchSpace.with_budget` (space.py) applies
one, the search's plan chooses it (raycse/driver/layout.py), the options table offers the names (options.py) and the
reference describes each section (reference.py). A leaf of the settings: it imports nothing, so that the option
tables (and `import raycse`) stay cheap.
"""
from __future__ import annotations

FULL = "full"  # the file's own settings: the bundled model and corpus
# name -> the space file's section of it. `auto` picks the full budget or the CPU one by the cluster it finds; the
# paper's own recipe (its model, corpus and training settings, downloaded) runs only when it is named.
BUDGETS = {"cpu": "cpu_budget", "paper": "paper_budget"}
# A file without a cpu_budget runs its own settings on CPUs; one without a paper_budget has no recipe to run.
# The budgets sized for GPUs (their batches, steps and trials): a plan of one without a GPU says that it is not
# meant for the machine it would run on (raycse/planning/dry_run.py).
MEANT_FOR_GPUS = frozenset({FULL, "paper"})
OPTIONAL_BUDGETS = {"cpu"}
# What a budget's answer is judged as, one of the judging's `JUDGED_BUDGETS` (raycse/judging/confirmation_plan.py,
# `ConfirmPlan.budget`): the CPU budget's a demonstration of the mechanism, the paper's a decision as the full
# budget's is.
JUDGED_AS = {FULL: FULL, "cpu": "cpu", "paper": FULL}
# What each section is, in the reference's words (docs/reference.md); its keys are the same for every budget.
BUDGET_WORDS = {
    "cpu": "settings that replace the file's when the Ray cluster has no GPU (`--budget auto`) or with `--budget cpu`; "
           "each key below merges as it says",
    "paper": "the paper's own setting (its model, its corpus by its public location, its training recipe), run with "
             "`--budget paper` alone (never chosen by `auto`; the model and corpus are downloaded); its keys merge as "
             "`cpu_budget`'s",
}
