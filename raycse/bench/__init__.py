"""`raycse bench` and the plan of `raycse search --dry-run`:

    command.py          `raycse bench`'s flags and what it runs
    step.py             the training step timed against a naive fp32 step, and the STS-B dev evaluation
    options.py          what every step benchmark is told: the shape of the step it times, checked once
    synthetic.py        what the steps run on: random BERT-shaped encoders and synthetic batches
    timing.py           how a step is timed (synchronised with the device) and profiled; the device's name
    concurrent.py       N trials sharing one machine (`raycse bench --concurrent N`)
    cached.py           what gradient caching costs in time and memory (`raycse bench --cached`)
    simulated_trial.py  the stand-in trial of the scale benchmark
    trial_workers.py    Tune's worker counts of the scale benchmark
    dry_run.py          `raycse search --dry-run`: a search's plan and its cost, printed
    search_stages.py    a plan's stages: their trials, seeds, and the work each does (ASHA's stops, judging looks)
    cost_model.py       what a search costs: wall clock, GPU-hours and peak disk from named terms (pure)
    cost_figures.py     the recorded figures the cost model reads, each with its record; a plan's rates
    judging_runs.py     the chance that the judging block reaches each sequential look
    sts_tasks_cost.py   what the seven STS test tasks cost under each choice of test_eval
    compare_plan.py     `raycse compare --dry-run`: each loss's search plan and the shared judging

May import: driver, comparing, judging, sampling, training, tracking (the dry run reads, never writes, the stores),
settings, evaluation, encoder, data, losses and the leaves; never the commands.
"""
