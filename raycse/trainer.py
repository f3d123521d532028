"""The training loop: one contrastive training of a sentence encoder, read top to bottom.

Knows nothing of Ray or MLflow: progress leaves through callbacks (`on_eval`, `on_step`), so the same loop
runs under `raycse train`, as a search trial in process, or on W data-parallel workers started by Ray Train
(torch.distributed already initialised by the caller). SimCSE's recipe throughout: each unsupervised
sentence is encoded twice in one forward pass of 2N rows (two dropout masks -> z1, z2), AdamW with linear
decay and no warm-up, STS-B dev Spearman every `eval_steps`, the best checkpoint kept.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from raycse import distributed as dist_utils
from raycse.config import TrainConfig
from raycse.data import GlobalBatches, StepBatches, read_corpus, read_nli_triplets
from raycse.errors import ConfigError
from raycse.evaluation import StsbDevEvaluator, evaluate_encoder
from raycse.losses import ContrastiveLoss, Embeddings, build_loss
from raycse.model import Encoder, tokenize

NONFINITE_CHECK_EVERY = 10  # steps between host syncs of the "loss went non-finite" flag
EVAL_BATCH_SIZE = 128  # sentences per evaluation batch on CPU; on CUDA larger batches mean fewer launches


def eval_batch_size(device: torch.device) -> int:
    return 512 if device.type == "cuda" else EVAL_BATCH_SIZE


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the trial ends with status 'diverged'."""

    def __init__(self, step: int):
        super().__init__(f"loss became non-finite by step {step}")
        self.step = step


@dataclass
class EvalReport:
    """What the loop tells its caller after each STS-B dev evaluation (on every worker)."""

    step: int
    total_steps: int
    stsb_dev: float
    best_stsb_dev: float
    best_step: int
    train_loss: float
    sentences_per_s: float
    checkpoint: str | None  # the best checkpoint's directory when this evaluation improved it (rank 0), else None


# ----------------------------------------------------------------------------------------------- setup
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def pick_device() -> torch.device:
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """bf16 on CUDA where supported, else fp16 (with a grad scaler); fp32 on CPU."""
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    if precision == "bf16" or (precision == "auto" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16
    return torch.float16


@contextlib.contextmanager
def dropout_disabled(model: torch.nn.Module):
    """ImSimCSE's off-dropout pass: gradients kept, dropout off.

    For BERT-family encoders eval mode differs from train mode only in dropout (nn.Dropout modules and the
    SDPA attention's dropout_p, which reads `module.training`), so eval mode is exactly "dropout off".
    """
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def linear_decay(optimizer: torch.optim.Optimizer, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total_steps))


def sum_gradients_across_workers(parameters: list[torch.nn.Parameter]) -> None:
    """Each worker back-propagates the global loss through its own rows only; the sum is the full gradient.

    One flat all-reduce instead of DDP: the off-dropout pass runs the encoder twice per step, which DDP's
    once-per-parameter gradient hooks do not allow.
    """
    if not dist_utils.is_distributed():
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


# ------------------------------------------------------------------------------------- the input side
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

    def pin_memory(self) -> "TokenizedBatch":
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

    def tokens(self, sentences: list[str]) -> dict[str, torch.Tensor]:
        return tokenize(self.tokenizer, sentences, self.max_len, self.pad_to_multiple_of)

    def __call__(self, batch: list) -> TokenizedBatch:
        n = len(batch)
        if isinstance(batch[0], tuple):  # (sent0, sent1, hard_neg) -> the 3N rows of one forward
            columns = list(zip(*batch))
            first_rows = self.tokens(list(columns[0])) if self.first_rows else None
            return TokenizedBatch(self.tokens([s for column in columns for s in column]), n, True, first_rows)
        # Each sentence tokenised once: the step repeats the rows, which gives the very tensors that tokenising
        # the list twice would, at half the tokenising and half the host-to-device copy.
        return TokenizedBatch(self.tokens(list(batch)), n, False)


def loader_workers(device: torch.device) -> int:
    """CUDA: up to 4 tokenising processes, fewer when this process has fewer CPUs (torch's intra-op thread count,
    which Ray sets to a trial's `num_cpus`). Measured on an H100 host: one worker tokenises 512 sentences in
    ~100 ms, longer than a compiled BERT-base step at batch 512, so one worker alone starves the GPU."""
    if device.type != "cuda":
        return 0
    return max(1, min(4, torch.get_num_threads() - 1))


def training_loader(batches: GlobalBatches, epochs: int, steps: int, tokenize: BatchTokenizer,
                    device: torch.device, seed: int, num_workers: int | None = None) -> DataLoader:
    """The `steps` tokenised batches of a training, in GlobalBatches' order, tokenised off the step's critical path.

    CUDA: worker processes (`loader_workers`) tokenise batches ahead into pinned memory, so the host work and the
    step's non_blocking copies hide behind the GPU's previous steps. Worker k tokenises steps k, k + W, ... and the
    DataLoader takes one batch from each worker in turn, so the order is the stream's (`StepBatches`).
    CPU: no worker. The step runs on these very cores, so a worker only moves the tokenising (about 8 ms of a
    ~45 ms tiny-shape step at batch 64 on the 2-core CPU) to a process that competes with the step's intra-op
    threads for the same 2 cores: measured there with the bench's step loop, 46-55 ms/step without a worker
    and 48 ms with one, within the run-to-run noise, so the fork, IPC and extra process per trial buy nothing.
    """
    cuda = device.type == "cuda"
    workers = loader_workers(device) if num_workers is None else num_workers
    options = {}
    if workers > 0:
        # A forked worker must not inherit a Rust thread pool the parent has used (the tokenizers library then
        # disables its parallelism in the child, with a warning); the CLI sets this too, in-process callers may not.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        options = {"prefetch_factor": 2}
    return DataLoader(StepBatches(batches, epochs, steps), batch_size=None, collate_fn=tokenize,
                      num_workers=workers, pin_memory=cuda, **options,
                      # The loader draws its workers' base seed when iterated; from its own generator, not the
                      # global one, so that adding the loader shifts no dropout mask of the training.
                      generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------- one step
def compiled(encoder: Encoder):
    """`torch.compile` with CUDA graphs ("reduce-overhead"): at the batch sizes of a search the step is bound by
    launching kernels, not by running them (BERT-base, batch 64, on an H100: 36.3 ms compiled without graphs,
    12.6 ms with; benchmarks/README.md). Shapes: the first is compiled static; a second length makes that dimension dynamic (one more
    compile, no more); a CUDA graph is recorded per distinct shape, which the loader's padding to multiples of
    8 tokens bounds to max_len / 8 per mode (train, dropout-off)."""
    return torch.compile(encoder, mode="reduce-overhead")


class StepRunner:
    """Turns a tokenised batch into the embeddings a loss needs and takes one optimiser step.

    The host's part of a step is the copy of the token tensors to the device (non_blocking: from the loader's
    pinned memory on CUDA); tokenising is the loader's (`self.tokenize`, see `training_loader`). Only the passes
    the loss asks for run: the 2N-row (or 3N supervised) dropout pass always, the dropout-off pass for
    off-dropout, the frozen complementary encoder (no_grad, eval mode, autocast) for DCLR.
    """

    def __init__(self, encoder: Encoder, loss_fn: ContrastiveLoss, config: TrainConfig, device: torch.device,
                 total_steps: int, complementary: Encoder | None = None):
        self.encoder, self.loss_fn, self.config, self.device = encoder, loss_fn, config, device
        self.complementary = complementary
        self.amp_dtype = autocast_dtype(config.precision, device)
        self.parameters = [p for p in encoder.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.parameters, lr=config.lr, weight_decay=config.weight_decay,
                                           fused=device.type == "cuda")
        self.scheduler = linear_decay(self.optimizer, total_steps)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.compiled = config.compile and device.type == "cuda"
        self.forward = compiled(encoder) if self.compiled else encoder
        if complementary is not None and self.compiled:
            self.complementary = compiled(complementary)
        self.tokenize = BatchTokenizer(encoder.tokenizer, config.max_len or encoder.max_seq_length,
                                       first_rows=loss_fn.needs_z0 or loss_fn.needs_complementary,
                                       pad_to_multiple_of=8 if device.type == "cuda" else None)

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def to_device(self, rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device, non_blocking=True) for k, v in rows.items()}

    def embeddings(self, batch: TokenizedBatch | list) -> Embeddings:
        if not isinstance(batch, TokenizedBatch):  # a raw batch (tests, reference computations): tokenised here
            batch = self.tokenize(batch)
        n, supervised = batch.n, batch.supervised
        # Every copy is queued before any compute, so none of them waits behind a forward pass.
        rows = self.to_device(batch.rows)
        if supervised:  # (sent0s, sent1s, hard_negs): one forward of 3N rows; the N-row passes take the sent0s
            tokens = rows
            first_rows = None if batch.first_rows is None else self.to_device(batch.first_rows)
        else:  # each sentence twice in one forward: independent dropout masks give the positive pair
            tokens = {k: torch.cat([v, v]) for k, v in rows.items()}
            first_rows = rows  # the N-row passes (off-dropout, DCLR) reuse the N rows
        with self.autocast():
            pooled = self.forward(**tokens)
            z1, z2 = pooled[:n], pooled[n:2 * n]
            z3 = pooled[2 * n:] if supervised else None
            z0 = complementary = None
            if self.loss_fn.needs_z0:
                with dropout_disabled(self.encoder):
                    z0 = self.forward(**first_rows)
            if self.loss_fn.needs_complementary:
                with torch.no_grad():
                    complementary = self.complementary(**first_rows)
        gather = dist_utils.gather_with_grad
        return Embeddings(z1=gather(z1), z2=gather(z2), z3=gather(z3), z0=gather(z0),
                          complementary=gather(complementary))

    def step(self, batch: TokenizedBatch | list) -> torch.Tensor:
        """One optimiser step; returns the loss as a device tensor (no host sync)."""
        if self.compiled:  # a new iteration: the CUDA graphs may reuse the previous step's output memory
            torch.compiler.cudagraph_mark_step_begin()
        loss = self.loss_fn(self.embeddings(batch))
        self.scaler.scale(loss).backward()
        sum_gradients_across_workers(self.parameters)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


# ------------------------------------------------------------------------------------------- train
def load_examples(config: TrainConfig) -> list:
    if config.sup_data is not None:
        return read_nli_triplets(config.sup_data, max_rows=config.max_sentences)
    return read_corpus(config.corpus, max_sentences=config.max_sentences, replace_bad_bytes=config.replace_bad_bytes)


def load_complementary(config: TrainConfig, device: torch.device) -> Encoder:
    """DCLR's frozen complementary model: a given checkpoint, else a frozen copy of the starting weights."""
    source = config.complementary or config.model
    encoder = Encoder.from_pretrained(source, pooler=config.resolved_eval_pooler,
                                      trust_remote_code=config.trust_remote_code)
    encoder.requires_grad_(False).eval().to(device)
    if device.type == "cuda":
        encoder.to(torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    return encoder


def train(config: TrainConfig,
          on_eval: Callable[[EvalReport], None] | None = None,
          on_step: Callable[[int, int], None] | None = None) -> dict:
    """Train, evaluating on STS-B dev every `eval_steps`; returns (and on rank 0 writes) results.json."""
    if config.output_dir is None:
        raise ConfigError("output_dir: required")
    started = time.perf_counter()
    rank, world_size = dist_utils.rank(), dist_utils.world_size()
    # The same seed on every worker while the model is built: the freshly initialised MLP head must start
    # identical everywhere (there is no DDP broadcast; summed gradients keep identical weights identical).
    seed_everything(config.seed)
    device = pick_device()
    output_dir = Path(config.output_dir)
    best_dir = output_dir / "best"

    loss_fn = build_loss(config.loss, config.reg, **config.hparams)
    encoder = Encoder.from_pretrained(config.model, pooler=config.pooler, trust_remote_code=config.trust_remote_code)
    encoder.to(device).train()
    seed_everything(config.seed + rank)  # then distinct dropout masks per worker, reproducible per seed
    complementary = load_complementary(config, device) if loss_fn.needs_complementary else None
    batches = GlobalBatches(load_examples(config), config.batch_size, config.seed, rank, world_size)
    total_steps = len(batches) * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    runner = StepRunner(encoder, loss_fn, config, device, total_steps, complementary)
    dev_evaluator = StsbDevEvaluator() if rank == 0 else None
    eval_pooler = config.resolved_eval_pooler

    def encode(sentences: list[str]) -> torch.Tensor:
        return encoder.encode(sentences, batch_size=eval_batch_size(device), pooler=eval_pooler)

    dev_curve: list[dict] = []
    best_stsb_dev, best_step = -math.inf, 0
    nonfinite = torch.zeros((), dtype=torch.float32, device=device)
    loss_sum = torch.zeros((), dtype=torch.float32, device=device)
    steps_since_eval, train_seconds, window_start = 0, 0.0, time.perf_counter()
    sentences_per_step = config.batch_size * world_size

    step = 0
    tokenized = iter(training_loader(batches, config.epochs, total_steps, runner.tokenize, device, config.seed))
    try:
        for step, batch in enumerate(tokenized, start=1):
            loss = runner.step(batch)
            nonfinite = torch.maximum(nonfinite, (~torch.isfinite(loss)).float())
            loss_sum += torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0)
            steps_since_eval += 1
            if on_step is not None:
                on_step(step, total_steps)
            last = step == total_steps
            if (step % NONFINITE_CHECK_EVERY == 0 or step % config.eval_steps == 0 or last) \
                    and dist_utils.any_flag(nonfinite):
                raise TrainingDiverged(step)
            if step % config.eval_steps == 0 or last:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                train_seconds += time.perf_counter() - window_start
                stsb_dev = dev_evaluator(encode) if dev_evaluator is not None else 0.0
                stsb_dev = dist_utils.broadcast_float(stsb_dev, device)
                improved = stsb_dev > best_stsb_dev or best_step == 0  # the first evaluation always saves
                if improved:
                    best_stsb_dev, best_step = stsb_dev, step
                    if rank == 0:
                        encoder.save(best_dir, pooler=eval_pooler)  # atomic: a kill leaves the last complete one
                train_loss = float(loss_sum.item()) / steps_since_eval
                dev_curve.append({"step": step, "stsb_dev": stsb_dev, "train_loss": train_loss})
                report = EvalReport(step, total_steps, stsb_dev, best_stsb_dev, best_step, train_loss,
                                    sentences_per_step * step / max(train_seconds, 1e-9),
                                    str(best_dir) if (improved and rank == 0) else None)
                if on_eval is not None:
                    on_eval(report)
                loss_sum.zero_()
                steps_since_eval = 0
                window_start = time.perf_counter()
    finally:
        # The stream ends after total_steps by itself; when the loop raises (a diverged trial, a stopped search
        # trial), dropping the last reference stops a loader worker now, not whenever the traceback is freed.
        del tokenized

    results = {
        "best_stsb_dev": best_stsb_dev,
        "best_step": best_step,
        "steps": step,
        "dev_curve": dev_curve,
        "sentences_per_s": sentences_per_step * step / max(train_seconds, 1e-9),
        "train_seconds": train_seconds,
        "device": str(device),
        "world_size": world_size,
        "config": config.to_dict(),
    }
    if rank == 0:
        if config.test_eval:
            best = Encoder.from_pretrained(str(best_dir), pooler=eval_pooler).to(device)
            # the seven test tasks, their mean, SICK-R dev, alignment and uniformity, scored on the reloaded files
            results.update(evaluate_encoder(
                lambda s: best.encode(s, batch_size=eval_batch_size(device), pooler=eval_pooler), tasks="all"))
        results["wall_seconds"] = time.perf_counter() - started
        write_json_atomic(output_dir / "results.json", results)
    return results


def write_json_atomic(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)


def remove_partial_output(output_dir: str | Path) -> None:
    """After a failure before the first checkpoint, leave no half-written output directory behind."""
    path = Path(output_dir)
    if path.exists() and not (path / "best").exists():
        shutil.rmtree(path, ignore_errors=True)
