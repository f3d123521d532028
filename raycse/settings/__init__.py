"""Settings, validated once at the edge: `TrainConfig`, whose field metadata generate the flags and carry the rules
(`config`); what the settings point at, checked and opened (`inputs`); the value checks every setting uses (`checks`);
search-space files (`space`) and the papers' reported rows (`paper_rows`); YAML with a key written twice refused
(`strict_yaml`).

May import: evaluation, encoder, data, losses and the leaves.
"""
