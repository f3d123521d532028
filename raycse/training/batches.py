"""The input side of a training step: a batch of sentences (or triplets) tokenised off the step's critical path.

`BatchTokenizer` turns a raw batch into a `TokenizedBatch` (CPU tensors, pinned on CUDA); `training_loader` runs
it in DataLoader workers on CUDA, in order, so that the step only copies tokens to the device.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from raycse.data.corpus import GlobalBatches, StepBatches
from raycse.data.tokens import SharedTokens
from raycse.encoder.model import tokenize


@dataclass
class TokenizedBatch:
    """One step's input as the loader hands it over: CPU token tensors (pinned on CUDA), nothing left to do on
    the host but the copy to the device.

    Unsupervised: `rows` holds the N sentences once (the step repeats them to 2N on the device). Supervised:
    `rows` holds the 3N rows sent0s, sent1s, hard_negs in one padding, and `first_rows` the N sent0s padded on
    their own when the loss has an N-row pass (off-dropout, DCLR), else None.
    """

    rows: dict[str, torch.Tensor]
    n: int
    supervised: bool
    first_rows: dict[str, torch.Tensor] | None = None

    def pin_memory(self) -> TokenizedBatch:
        """Called by the DataLoader's pin-memory thread (pin_memory=True), so the step's copies can be async."""
        pin = lambda rows: None if rows is None else {k: v.pin_memory() for k, v in rows.items()}  # noqa: E731
        return TokenizedBatch(pin(self.rows), self.n, self.supervised, pin(self.first_rows))


@dataclass
class BatchTokenizer:
    """The loader-side half of a step: a raw batch (sentences or triplets) -> a `TokenizedBatch`.

    Calls the tokenizer exactly as `Encoder.tokenize` does (dynamic padding, truncation to max_len). It holds the
    tokenizer, never the Encoder: a loader worker started by spawn or forkserver gets a pickled copy of this
    object, and the model's (CUDA) weights must not travel with it.
    """

    tokenizer: object
    max_len: int
    first_rows: bool  # whether supervised batches also need their sent0s tokenised on their own
    # CUDA: pad each batch to a multiple of 8 tokens, so that CUDA-graph replay sees at most max_len / 8 shapes
    # (a graph is recorded per shape) and the matrix products get tensor-core-friendly sizes. None: no rounding.
    pad_to_multiple_of: int | None = None
    # The data's token ids, computed once per search (raycse.data.tokens): batches then hold example indices, and
    # making a batch is padding, not tokenising.
    shared: SharedTokens | None = None

    def tokens(self, sentences: list[str]) -> dict[str, torch.Tensor]:
        return tokenize(self.tokenizer, sentences, self.max_len, self.pad_to_multiple_of)

    def __call__(self, batch: list) -> TokenizedBatch:
        n = len(batch)
        if isinstance(batch[0], int):  # indices into the shared token ids
            pad = self.shared.pad
            if self.shared.supervised:
                first_rows = pad(batch, [0], self.pad_to_multiple_of) if self.first_rows else None
                return TokenizedBatch(pad(batch, [0, 1, 2], self.pad_to_multiple_of), n, True, first_rows)
            return TokenizedBatch(pad(batch, [0], self.pad_to_multiple_of), n, False)
        if isinstance(batch[0], tuple):  # (sent0, sent1, hard_neg) -> the 3N rows of one forward
            columns = list(zip(*batch))
            first_rows = self.tokens(list(columns[0])) if self.first_rows else None
            return TokenizedBatch(self.tokens([s for column in columns for s in column]), n, True, first_rows)
        # Each sentence tokenised once: the step repeats the rows, which gives the very tensors that tokenising
        # the list twice would, at half the tokenising and half the host-to-device copy.
        return TokenizedBatch(self.tokens(list(batch)), n, False)


def loader_workers(device: torch.device) -> int:
    """CUDA: up to 4 tokenising processes, fewer when this process has fewer CPUs (torch's intra-op thread count,
    which Ray sets to a trial's `num_cpus`): at large batches one worker tokenises slower than a compiled step
    runs, and the GPU would wait on it."""
    if device.type != "cuda":
        return 0
    return max(1, min(4, torch.get_num_threads() - 1))


def training_loader(batches: GlobalBatches, epochs: int, steps: int, tokenize: BatchTokenizer,
                    device: torch.device, seed: int, num_workers: int | None = None, start: int = 0) -> DataLoader:
    """The `steps` tokenised batches of a training, in GlobalBatches' order, tokenised off the step's critical path.

    CUDA: worker processes (`loader_workers`) tokenise batches ahead into pinned memory, so the host work and the
    step's non_blocking copies hide behind the GPU's previous steps. Worker k tokenises steps k, k + W, ... and the
    DataLoader takes one batch from each worker in turn, so the order is the stream's (`StepBatches`).
    CPU: no worker. The step runs on these very cores, so a worker would only move the tokenising to a process
    that competes with the step's threads for the same cores (benchmarks/step-speed.md has the measurement).
    `start`: the first step to yield is step start + 1 (a resumed training).
    """
    cuda = device.type == "cuda"
    workers = loader_workers(device) if num_workers is None else num_workers
    options = {}
    if workers > 0:
        # A forked worker must not inherit a Rust thread pool the parent has used (the tokenizers library then
        # disables its parallelism in the child, with a warning); the CLI sets this too, in-process callers may not.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        options = {"prefetch_factor": 2}
    return DataLoader(StepBatches(batches, epochs, steps, start), batch_size=None, collate_fn=tokenize,
                      num_workers=workers, pin_memory=cuda, **options,
                      # The loader draws its workers' base seed when iterated; from its own generator, not the
                      # global one, so that adding the loader shifts no dropout mask of the training.
                      generator=torch.Generator().manual_seed(seed))
