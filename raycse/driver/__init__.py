"""The search driver behind `raycse search` and `raycse.search()`: a conductor that runs a list of stages.

    run.py           the conductor: the stages in order, each timed; `run_search`
    state.py         what the stages share: the options, the space it runs, the stores, and each stage's typed products
    stages/          one module per stage, named after it: setup, baseline, tokenize, stage0, search, choose,
                     judge, test, record, report
    layout.py        the budget, the space the search runs (`space_to_run`), resources, concurrency and the Optuna
                     study's storage
    concurrency.py   how many trials really ran at once, from their start and end times
    preflight.py     what a search checks before it starts anything (the last of the validation)
    confirmation.py  which configurations the choosing and judging stages retrain, and their figures over seeds
    outcome.py       the typed records a search produces (trials, confirmed configurations, the outcome) and
                     how a trial ended (finished once it reached its last step)
    loaded.py        a finished search's outcome read back from its records (`raycse.load`)
    standing.py      where a search stands in its stores: not started, started (to resume) or finished (read back)
    summary.py       search_summary.json, the file every view of a search reads
    progress.py      how far along a search is, as a person watching it reads it
    time_left.py     how long a stage has left: each trial's own pace, its planned test scoring, the slots
    tune/            the Ray and Tune glue: the stage's experiment, the trial, the callback to MLflow, recovery

The statistics of the answer live in raycse/judging/ and the samplers in raycse/sampling/, below the driver;
`raycse compare` (raycse/comparing.py) runs the driver once per loss.

Named `driver`, not `search`: `raycse.search` is the public function that runs one. Nothing here imports Ray at
module level except the modules that only a running search loads (tune/callback, tune/searcher).

May import: judging, sampling, reporting, training, tracking, settings, evaluation, encoder, data, losses and the
leaves; never bench, exporting, comparing or the commands.
"""
