"""`raycse bench`: the training step timed against a naive fp32 step, the STS-B dev evaluation (step.py),
concurrent trials sharing one machine (concurrent.py), and what gradient caching costs in time and memory
(cached.py, `raycse bench --cached`)."""
