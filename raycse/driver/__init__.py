"""The search driver behind `raycse search` and `raycse.search()`: a conductor that runs a list of stages.

    run.py          the conductor: the stages in order, each timed; `run_search`
    compare.py      `raycse compare`: one search per loss with the same budget, then the family judged together
    comparison.py   the family-wise judgment of a comparison (Holm verdicts, Bonferroni-adjusted intervals): pure
    state.py        what the stages share: the options, the plan, the stores, and each stage's typed products
    stages/         one module per stage (setup, baseline, tokenize, stage 0, search, confirm, test, record, report)
    outcome.py      the typed records a search produces (trials, confirmed configurations, the outcome)
    plan.py         budget, resources, concurrency, the scheduler and the Optuna study
    strategy.py     the search stage's sampler (budget-aware TPE by default; prior_sampler.py: a prior-guided one)
    concurrency.py  how many trials ran at once, from their start and end times
    tune_runner.py  one stage's Tune experiment: new or restored, run, turned into trial records
    callback.py     Tune -> MLflow, in the driver (only the driver writes to MLflow)
    confirmation.py which configurations the confirmation stage retrains, and their figures over seeds
    summary.py      search_summary.json, the file every view of a search reads
    scoring.py      the untouched model and saved checkpoints scored as Ray tasks
    trial.py        the worker side: one trial, as a Tune function trainable
    trial_result.py the results a trial reports to Tune (per evaluation, last), shared with the scale stand-in
    replay.py       the worker side: a trial MLflow holds as finished replays its result instead of training
    searcher.py     the Tune objects pickled with a search (the tagged Optuna searcher, the step-budget stopper)

Named `driver`, not `search`: `raycse.search` is the public function that runs one. Nothing here imports Ray at
module level except the modules that only a running search loads (callback, searcher).

May import: reporting, training, tracking, settings, evaluation, encoder, data, losses and the leaves; never bench,
exporting or the commands.
"""
