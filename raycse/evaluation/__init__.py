"""Evaluation: the STS tasks' files (`tasks`), and scoring an encoder on them: the objectives, each with its
direction, the seven test tasks, alignment and uniformity (`sts`).

May import: encoder, data and the leaves.
"""
