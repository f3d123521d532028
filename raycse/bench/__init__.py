"""`raycse bench`: the training step and the evaluation timed on this machine, alone or with trials sharing it.

    command.py               `raycse bench`'s flags and what it runs
    step.py                  the training step timed against a naive fp32 step, and the STS-B dev evaluation
    options.py               what every step benchmark is told: the shape of the step it times, checked once
    synthetic.py             what the steps run on: random BERT-shaped encoders and synthetic batches
    timing.py                how a step is timed (synchronised with the device) and profiled; the device's name
    concurrent.py            N trials sharing one machine (`raycse bench --concurrent N`)
    cached.py                what gradient caching costs in time and memory (`raycse bench --cached`)
    cached_configuration.py  one configuration of `--cached`, measured in a process of its own

The dry run's cost model, which reads these measurements, is raycse/planning/; the scale benchmark's stand-in trial
lives with it in benchmarks/.

May import: driver (the local Ray's resources), training, settings, evaluation, encoder, data, losses and the
leaves; never planning or the commands.
"""
