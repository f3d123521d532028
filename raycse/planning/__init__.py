"""The plan of a search before it runs (`raycse search --dry-run`, `raycse.plan`): its stages, and what it will cost in
wall clock, GPU-hours and disk, from recorded figures.

    dry_run.py         `raycse search --dry-run`: a search's plan and its cost, printed
    search_stages.py   a plan's stages: their trials, seeds, and the work each does (ASHA's stops, judging looks)
    cost_model.py      what a search costs: wall clock, GPU-hours and peak disk from named terms (pure)
    cost_figures.py    the recorded figures the cost model reads, each with its record; a plan's rates
    shape_records.py   which record of the model's own shape prices a GPU plan's evaluation, start-up, checkpoints
    cpu_steps.py       a CPU plan's step and evaluation: a recorded CPU step of the model's shape, else measured here
    model_facts.py     a plan's model without loading it: its shape and its weights' bytes
    judging_runs.py    the chance that the judging block reaches each sequential look
    sts_tasks_cost.py  what the seven STS test tasks cost under each choice of test_eval
    compare_plan.py    `raycse compare --dry-run`: each loss's search plan and the shared judging

May import: driver (the space a search runs, its resources), comparing, bench (a step timed where no record fits),
judging, training, tracking (the dry run reads, never writes, the stores), settings, evaluation, encoder, data,
losses and the leaves; never the commands.
"""
