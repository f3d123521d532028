"""Settings, validated once at the edge: `TrainConfig`, whose field metadata generate the flags and carry the rules
(`config`); what the settings point at, checked and opened (`inputs`); the value checks every setting uses (`checks`);
search-space files (`space`), the shipped ones by name (`space_files`, package data in `spaces/`) and the papers'
reported rows (`paper_rows`); every space-file key described and its JSON Schema (`reference`, written to
`space.schema.json`); YAML with a key written twice refused (`strict_yaml`).

May import: sampling (the sampler table), evaluation, encoder, data, losses and the leaves.
"""
