"""How the search stage proposes its configurations: one table from a sampler's name to its factory.

    samplers.py      the table (`SAMPLERS`: tpe, prior, tpe-optuna, random, grid), the space file's defaults, and
                     `sampler`, which builds the one a search runs
    prior_guided.py  `PriorGuidedSampler`: TPE whose start-up trials are drawn around the published point

May import: the leaves and Optuna; never settings (they read this table), nor anything above.
"""
