"""`raycse bench`: the training step timed against a naive fp32 step, the STS-B dev evaluation (step.py), and
concurrent trials sharing one machine (concurrent.py)."""
