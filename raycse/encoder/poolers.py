"""The poolers' names, apart from the model code so that settings and the command line name them without torch.

SimCSE's five poolers. AUTO_POOLER is what a caller may pass besides: "the model's own pooling, else SimCSE's recipe"
(`raycse.encoder.pooler_choice.resolve_poolers`); not a pooler itself, so never in POOLERS: a forward pass or a
checkpoint always has a concrete one.
"""

POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")
AUTO_POOLER = "auto"
