"""The Ray and Tune glue of a search: what turns a stage's trials into a Tune experiment and its events into records.
The stages (raycse/driver/stages/) call it; nothing below the driver knows of it.

The driver's side:
    runner.py               one stage's Tune experiment: new or restored (--resume), run, its trials as records
    searcher.py             the Tune objects pickled with a search (the tagged Optuna searcher, the step stopper)
    resumable_limits.py     Tune's limits on trials at once, corrected on --resume so that a stage cannot stall
    checkpoint_recovery.py  a snapshot naming a checkpoint Tune had already deleted: the newer one takes its name
    retries.py              which failures use up a trial's retry: its own, not a preempted or lost start-up's
    reset_failures.py       a worker lost while Tune resets it for the next trial: the trial retried, not failed
    newest_first.py         the search's scheduler (ASHA or FIFO), starting the newest pending trial first
    checkpoint_retention.py what an ended trial keeps on Tune's storage: its best/, not its last/
    pacing.py               how often a trial checkpoints and Tune snapshots the search
    callback.py             Tune's events -> MLflow (only the driver writes to MLflow)
    write_queue.py          those writes, in order, on a thread of their own
    scoring.py              the untouched model and saved checkpoints scored as Ray tasks
    search_workers.py       one search's warm workers: the pool that keeps them (an actor), started once, ended
The worker's side:
    trial.py                one trial, as a Tune function trainable: it hands the training to a warm worker
    warm_workers.py         the processes that train, living for the whole search (their job, their handshake)
    trial_training.py       the training and what each report holds, wherever it runs
    trial_result.py         the results a trial reports to Tune (per evaluation, last)
    replay.py               a trial MLflow holds as finished replays its result instead of training

May import: the driver's modules below it (layout, progress, state, outcome, confirmation, concurrency), judging,
sampling, training, tracking, settings, evaluation, encoder, data, losses and the leaves.
"""
