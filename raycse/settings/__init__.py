"""Settings, validated once at the edge: `TrainConfig`, whose field metadata generate the flags and carry the rules
(`config`); what the settings point at, checked and opened (`inputs`); the value checks every setting uses (`checks`);
search-space files (`space`: `SearchSpace`, loading and validating a file), every key of their `search:` and
`resources:` sections declared once, in one table from which the parser's key sets, the checks, the fields, what a
budget may replace and the reference are made (`space_keys`; `TestScoring`, which runs score the test tasks), their
loss families (`families`), a searched parameter's distribution (`distributions`), the `search.confirm` section
parsed into the judging's `ConfirmPlan` (`confirm`), and the budgets a search can run, named once (`budgets`: the
file's own, its `cpu_budget:` and `paper_budget:`); the shipped space files by name (`space_files`, package data in
`spaces/`) and the papers' reported rows (`paper_rows`); the training steps recorded with trials sharing a GPU and
the rule that turns them into `gpus_per_worker: auto` (`gpu_share`); every space-file key described and its JSON Schema
(`reference`, written to `space.schema.json`); YAML with a key written twice refused (`strict_yaml`); the options of
the commands beside a training's settings, one table each (`options`), and the Python API's docstrings written from
those tables and TrainConfig's fields (`docstrings`).

A new training setting is one TrainConfig field (`config`); a new key of `search:` or `resources:` is one row of
`space_keys.SPACE_KEYS` (tests/test_space_keys.py adds one in a copy of the package).

May import: judging (the confirmation plan: `ConfirmPlan`, its defaults and looks), sampling (the sampler table),
evaluation, encoder, data, losses and the leaves.
"""
