"""The statistics of a search's answer, pure: figures in, judgments out. No Ray, Tune, MLflow or torch here (a test
holds that), so every rule can be simulated by the thousand (benchmarks/judging_sim.py, comparison_sim.py,
selection_bias.py) and read without a cluster.

    ranking.py              the search stage's ranking: which configurations go on to be chosen among
    judgment.py             how a judging block becomes a judgment: failures, the looks' boundaries (alpha
                            spending)
    sequential_estimate.py  the point estimate of a sequential judgment, adjusted for its stopping rule
    confirmation_plan.py    how an answer is reached, one type (`ConfirmPlan`; a space file's `search.confirm` is
                            parsed into it): top_k, the seeds of each block (search, choosing, judging), the judging
                            looks and figure, the defaults and the budgets' default plans
    seed_scores.py          the seed-level scores a decision reads: each confirmation run, the untouched model
    power.py                what the judging stage can resolve: the smallest detectable difference, seeds to detect
    decision.py             the decision behind the answer: the winner, and whether it beats the published point
                            and the untouched model
    verdict.py              the decision in words, each figure naming the set it comes from
    comparison.py           the family-wise judgment of `raycse compare` (Holm verdicts, adjusted intervals)

A new statistic of the answer is one function here, with a simulation in benchmarks/ that measures it.

May import: the leaves (records, stats) and NumPy/SciPy; nothing else of raycse.
"""
