"""Evaluation: the STS tasks' files (`tasks`), and scoring an encoder on them: the objectives, each with its
direction, the seven test tasks, alignment and uniformity (`sts`); the untouched model's figures kept on disk for
the next search from the same model and data (`untouched_cache`).

May import: encoder, data and the leaves.
"""
