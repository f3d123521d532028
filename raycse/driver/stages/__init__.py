"""The stages of a search, one module each, named after its stage; the conductor (raycse/driver/run.py) lists them in
order.

    base.py      what every stage is: a name, what it needs and produces, `run`
    setup.py     Ray, the budget and the space it runs, the MLflow parent run, the Optuna study's storage
    baseline.py  the untouched model's objective, scored beside the first trials
    tokenize.py  the training data tokenised once for every trial
    stage0.py    DCLR's complementary SimCSE model, where none is given
    search.py    the Tune trials sampled by Optuna, early-stopped by ASHA
    choose.py    the top configurations on fresh seeds (and the published point's first judging look)
    judge.py     the winner and the published point on further fresh seeds, look by look
    test.py      judging checkpoints still without test figures, scored on the seven STS test tasks
    record.py    the decision, the summary, MLflow, the registered model
    report.py    the report page"""
