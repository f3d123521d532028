"""Settings, validated once at the edge: `TrainConfig`, whose field metadata generate the flags and carry the rules
(`config`); what the settings point at, checked and opened (`inputs`); the value checks every setting uses (`checks`);
search-space files (`space`: `SearchSpace`, loading and validating a file, the defaults of what a file leaves out),
their loss families (`families`), a searched parameter's distribution (`distributions`) and how the answer is
confirmed after the search stage (`confirm`), and the budgets a search can run, named once (`budgets`: the file's
own, its `cpu_budget:` and `paper_budget:`); the shipped space files by name (`space_files`, package data in
`spaces/`) and the papers' reported rows (`paper_rows`); the training steps recorded with trials sharing a GPU and
the rule that turns them into `gpus_per_worker: auto` (`gpu_share`); every space-file key described and its JSON Schema
(`reference`, written to `space.schema.json`); YAML with a key written twice refused (`strict_yaml`); the options of
the commands beside a training's settings, one table each (`options`), and the Python API's docstrings written from
those tables and TrainConfig's fields (`docstrings`).

May import: sampling (the sampler table), evaluation, encoder, data, losses and the leaves.
"""
