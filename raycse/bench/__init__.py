"""`raycse bench`: the training step timed against a naive fp32 step, the STS-B dev evaluation (step.py),
concurrent trials sharing one machine (concurrent.py), and what gradient caching costs in time and memory
(cached.py, `raycse bench --cached`); the stand-in trial and Tune's worker counts of the scale benchmark
(simulated_trial.py, trial_workers.py).

May import: driver, judging, sampling, training, settings, evaluation, encoder, data, losses and the leaves; never
the commands.
"""
