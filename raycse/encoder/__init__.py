"""The encoder: a Hugging Face transformer with SimCSE's poolers (`model`), the poolers' names (`poolers`), which
pooler a run uses: the model's declared one or SimCSE's recipe (`pooler_choice`), finding, checking and loading a
model directory (`loading`; where a model is, without loading anything: `model_path`), dropout restricted to rows
(`row_dropout`) or keyed by sentence (`keyed_dropout`), the files that make a saved encoder a sentence-transformers
folder (`sentence_transformers_files`), and a sentence list tokenised once into evaluation batches kept for the
next trial (`eval_batches`).

May import: the leaves (errors, files) only.
"""
