"""The training loop: one contrastive training of a sentence encoder, read top to bottom.

Knows nothing of Ray or MLflow: progress leaves through callbacks (`on_eval`, `on_step`), so the same loop
runs under `raycse train`, as a search trial in process, or on W data-parallel workers started by Ray Train
(torch.distributed already initialised by the caller). SimCSE's recipe throughout: each unsupervised
sentence is encoded twice in one forward pass of 2N rows (two dropout masks -> z1, z2), AdamW with linear
decay and no warm-up, gradients clipped to norm 1 (the Hugging Face Trainer's default, which every paper's
code trains with), the objective scored every `eval_steps`, the best checkpoint kept.

The output directory:

  best/          the best checkpoint by the objective: a model directory (Hugging Face + sentence-transformers)
  last/          everything needed to continue after the last evaluation (model, optimiser, LR schedule, RNG
                 states, position in the data, the dev curve so far): `train(..., resume=True)` picks it up and
                 ends where an uninterrupted training with the same seed would have ended
  results.json   written at the end: the figures, the dev curve, the configuration, where the time went

Both checkpoints are written atomically at every evaluation (build beside, then rename), so a kill or a full disk
at any moment leaves the previous ones whole.
"""
from __future__ import annotations

import contextlib
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from raycse import distributed as dist_utils
from raycse import grad_cache
from raycse.config import TrainConfig
from raycse.data import GlobalBatches, StepBatches, read_corpus, read_nli_triplets
from raycse.errors import ConfigError
from raycse.evaluation import build_objective, evaluate_encoder
from raycse.files import replace_directory, write_json_atomic
from raycse.losses import ContrastiveLoss, Embeddings, build_loss
from raycse.model import Encoder, tokenize
from raycse.tokens import SharedTokens, data_fingerprint

NONFINITE_CHECK_EVERY = 10  # steps between host syncs of the "loss went non-finite" flag
EVAL_BATCH_SIZE = 128  # sentences per evaluation batch on CPU; on CUDA larger batches mean fewer launches
TRAINING_STATE_FILE = "training_state.pt"

# compile="auto": how the trainer decides whether compiling repays itself (see `decide_compile`)
COMPILE_PROBE_WARMUP = 3  # eager steps not timed first (CUDA and cuBLAS initialisation, the allocator's growth)
COMPILE_PROBE_STEPS = 10  # eager steps then timed before deciding
COMPILED_SPEEDUP = 2.5  # eager / compiled step time assumed for the decision (benchmarks/README.md, BERT-base b64)
DEFAULT_COMPILE_SECONDS = 40.0  # one cold compile when no earlier trial measured it (benchmarks/README.md)


def eval_batch_size(device: torch.device) -> int:
    return 512 if device.type == "cuda" else EVAL_BATCH_SIZE


def encode_fn(encoder: Encoder, pooler: str) -> Callable[[list[str]], torch.Tensor]:
    """The `Encode` function that evaluation takes: `encoder` with `pooler`, batches sized for its device."""
    def encode(sentences: list[str]) -> torch.Tensor:
        return encoder.encode(sentences, batch_size=eval_batch_size(encoder.device), pooler=pooler)

    return encode


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the trial ends with status 'diverged'."""

    def __init__(self, step: int):
        super().__init__(f"loss became non-finite by step {step}")
        self.step = step


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, say); the previous checkpoints are intact."""


@dataclass
class Timings:
    """Seconds spent, cumulative over the training, by what they were spent on (rank 0's clock).

    startup: model and data loading up to the first step; compile: the extra time of the steps that compiled
    (torch.compile, CUDA graph capture); train: the steps otherwise; eval: the objective's evaluations;
    checkpoint: writing best/ and last/.
    """

    startup_s: float = 0.0
    compile_s: float = 0.0
    train_s: float = 0.0
    eval_s: float = 0.0
    checkpoint_s: float = 0.0


@dataclass
class EvalReport:
    """What the loop tells its caller after each evaluation of the objective (on every worker)."""

    step: int
    total_steps: int
    objective: float
    best_objective: float
    best_step: int
    dev_scores: dict[str, float]  # the objective's components by name (stsb_dev, sickr_dev, dev_file)
    train_loss: float
    sentences_per_s: float
    loss_stats: dict[str, float]  # the loss's own diagnostics, means since the last evaluation (DCLR's, say)
    timings: Timings
    compile_decision: str
    checkpoint: str | None  # rank 0: the output directory, whose best/ and last/ were just written; else None


@dataclass
class Progress:
    """Where a training stands after an evaluation: what last/ saves besides the tensors."""

    step: int = 0
    best_objective: float = -math.inf
    best_step: int = 0
    dev_curve: list[dict] = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)
    compiled: bool | None = None  # the compile decision once taken (a resumed training keeps it)
    compile_decision: str = ""


# ----------------------------------------------------------------------------------------------- setup
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def pick_device() -> torch.device:
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
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
    # The data's token ids, computed once per search (raycse.tokens): batches then hold example indices, and
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
    that competes with the step's threads for the same cores (benchmarks/README.md has the measurement).
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


# ----------------------------------------------------------------------------------------- one step
def _cuda_graph_state_for_this_thread() -> None:
    """torch before 2.12 keeps its CUDA-graph trees' state in the thread that imported them and asserts in any other;
    Tune runs each trial in a thread of its own, so a second compiled trial in a reused worker would fail. This
    gives the calling thread that state, as newer torch does by itself."""
    import collections
    import threading

    from torch._inductor import cudagraph_trees as trees

    if hasattr(trees.local, "tree_manager_containers") or torch._C._is_key_in_tls("tree_manager_containers"):
        return
    trees.local.tree_manager_containers = {}
    trees.local.tree_manager_locks = collections.defaultdict(threading.Lock)
    torch._C._stash_obj_in_tls("tree_manager_containers", trees.local.tree_manager_containers)
    torch._C._stash_obj_in_tls("tree_manager_locks", trees.local.tree_manager_locks)


def compiled(encoder: Encoder):
    """`torch.compile` with CUDA graphs ("reduce-overhead"): at the batch sizes of a search the step is bound by
    launching kernels, not by running them. Shapes: the first is compiled static; a second length makes that
    dimension dynamic (one more compile, no more); a CUDA graph is recorded per distinct shape, which the
    loader's padding to multiples of 8 tokens bounds to max_len / 8 per mode (train, dropout-off)."""
    _cuda_graph_state_for_this_thread()
    return torch.compile(encoder, mode="reduce-overhead")


def decide_compile(policy: str, device: torch.device, remaining_steps: int, eager_step_s: float | None,
                   compile_seconds: float | None) -> tuple[bool, str]:
    """Whether to compile, and why, in one line for the log.

    "auto" compiles when the time the remaining steps would save repays the compile time: the saving is the
    measured eager step time x (1 - 1/COMPILED_SPEEDUP) per step; the cost is what an earlier training on this
    node measured (`compile_seconds`), else DEFAULT_COMPILE_SECONDS. A search's short trials run eager; a
    training of thousands of steps compiles.
    """
    if device.type != "cuda":
        return False, "eager: torch.compile with CUDA graphs is for CUDA only"
    if policy == "always":
        return True, "compiled: compile=always"
    if policy == "never":
        return False, "eager: compile=never"
    cost = compile_seconds if compile_seconds is not None else DEFAULT_COMPILE_SECONDS
    saving = remaining_steps * (eager_step_s or 0.0) * (1.0 - 1.0 / COMPILED_SPEEDUP)
    where = "measured on this node" if compile_seconds is not None else "default estimate"
    verdict = saving > cost
    return verdict, (f"{'compiled' if verdict else 'eager'}: {remaining_steps} steps x "
                     f"{1000 * (eager_step_s or 0.0):.1f} ms eager would save ~{saving:.0f} s compiled "
                     f"({COMPILED_SPEEDUP}x), {'>' if verdict else '<='} ~{cost:.0f} s to compile ({where})")


class StepRunner:
    """Turns a tokenised batch into the embeddings a loss needs and takes one optimiser step.

    The host's part of a step is the copy of the token tensors to the device (non_blocking: from the loader's
    pinned memory on CUDA); tokenising is the loader's (`self.tokenize`, see `training_loader`). Only the passes
    the loss asks for run: the 2N-row (or 3N supervised) dropout pass always, the dropout-off pass for
    off-dropout, the frozen complementary encoder (no_grad, eval mode, autocast) for DCLR. With `mini_batch_size`
    set, `grad_cache.backward` runs them instead, in chunks.
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
        self.compiled = False
        self.forward = encoder
        self.loss = loss_fn
        self.shapes_seen: set[tuple] = set()
        if config.mini_batch_size is not None and not encoder.supports_dropout_rows:
            raise ConfigError.at("mini_batch_size", f"gradient caching needs keyed dropout, which this model cannot "
                                                    f"have: {encoder.row_dropout_problem}")
        self.tokenize = BatchTokenizer(encoder.tokenizer, config.max_len or encoder.max_seq_length,
                                       first_rows=loss_fn.needs_z0 or loss_fn.needs_complementary,
                                       pad_to_multiple_of=8 if device.type == "cuda" else None)

    def compile(self) -> None:
        """From the next step on, run the compiled encoder (and DCLR's frozen one) and the compiled loss: one fused
        graph for the loss's few small kernels, DCLR's noise ascent included (its gradient is in closed form)."""
        self.compiled = True
        self.forward = compiled(self.encoder)
        if self.complementary is not None:
            self.complementary = compiled(self.complementary)
        self.loss = torch.compile(self.loss_fn)

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
        # ImSimCSE's dropout-off pass rides in the same forward (3N rows, dropout on the first 2N only) where the
        # encoder allows it: one compiled graph and one backward instead of two.
        one_forward_z0 = self.loss_fn.needs_z0 and not supervised and self.encoder.supports_dropout_rows
        with self.autocast():
            if one_forward_z0:
                pooled = self.forward(**{k: torch.cat([v, v, v]) for k, v in rows.items()}, dropout_rows=2 * n)
            else:
                pooled = self.forward(**tokens)
            z1, z2 = pooled[:n], pooled[n:2 * n]
            z3 = pooled[2 * n:] if supervised else None
            z0 = complementary = None
            if one_forward_z0:
                z0 = pooled[2 * n:]
            elif self.loss_fn.needs_z0:
                with dropout_disabled(self.encoder):
                    z0 = self.forward(**first_rows)
            if self.loss_fn.needs_complementary:
                with torch.no_grad():
                    complementary = self.complementary(**first_rows)
        gather = dist_utils.gather_with_grad
        return Embeddings(z1=gather(z1), z2=gather(z2), z3=gather(z3), z0=gather(z0),
                          complementary=gather(complementary))

    def backward(self, batch: TokenizedBatch | list) -> torch.Tensor:
        """The loss of one batch, its parameter gradients in `.grad` (summed across workers); no optimiser step.

        With `mini_batch_size` set, by gradient caching (grad_cache.py: chunks, keyed dropout masks)."""
        if self.compiled:  # a new iteration: the CUDA graphs may reuse the previous step's output memory
            torch.compiler.cudagraph_mark_step_begin()
        if self.config.mini_batch_size is None:
            loss = self.loss(self.embeddings(batch))
            self.scaler.scale(loss).backward()
        else:
            loss = grad_cache.backward(self, batch if isinstance(batch, TokenizedBatch) else self.tokenize(batch))
        sum_gradients_across_workers(self.parameters)
        return loss.detach()

    def step(self, batch: TokenizedBatch | list) -> torch.Tensor:
        """One optimiser step; returns the loss as a device tensor (no host sync)."""
        loss = self.backward(batch)
        if self.config.max_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)  # clip the true gradient, not the fp16-scaled one
            torch.nn.utils.clip_grad_norm_(self.parameters, self.config.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def compiles_on(self, batch: TokenizedBatch) -> bool:
        """Whether this batch's shape is new to the compiled encoder: its step records a graph (timed apart)."""
        if not self.compiled:
            return False
        shape = (batch.n, *batch.rows["input_ids"].shape)
        if shape in self.shapes_seen:
            return False
        self.shapes_seen.add(shape)
        return True


# ----------------------------------------------------------------------------------------- checkpoints
def _rng_states() -> dict:
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _restore_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _writing_checkpoint(path: Path):
    """OSErrors while a checkpoint is written become one CheckpointWriteError naming the checkpoint."""
    @contextlib.contextmanager
    def guard():
        try:
            yield
        except OSError as err:
            if isinstance(err, CheckpointWriteError):
                raise
            reason = err.strerror or str(err)
            raise CheckpointWriteError(err.errno, f"cannot write the checkpoint {path}: {reason}; "
                                                  "the previous checkpoint is intact") from err
    return guard()


def save_last(output_dir: Path, runner: StepRunner, progress: Progress, rank: int) -> None:
    """Write last/ atomically (rank 0): the tensors, the progress, and every rank's RNG states (gathered)."""
    rng_states = dist_utils.gather_objects(_rng_states())  # a collective: every rank takes part
    if rank != 0:
        return
    target = output_dir / "last"
    with _writing_checkpoint(target):
        output_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".last.", suffix=".partial", dir=output_dir))
        try:
            torch.save({
                "model": runner.encoder.state_dict(),
                "optimizer": runner.optimizer.state_dict(),
                "scheduler": runner.scheduler.state_dict(),
                "scaler": runner.scaler.state_dict(),
                "progress": asdict(progress),
                "rng_by_rank": rng_states,
            }, staging / TRAINING_STATE_FILE)
            replace_directory(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def load_last(last_dir: Path, runner: StepRunner, rank: int) -> Progress:
    """Put the runner back where last/ left it; returns the progress (RNG states restored last)."""
    state_file = last_dir / TRAINING_STATE_FILE
    if not state_file.is_file():
        raise ConfigError(f"cannot resume: {last_dir} holds no {TRAINING_STATE_FILE}")
    try:
        state = torch.load(state_file, map_location="cpu", weights_only=False)  # RNG states must stay on the CPU
    except (OSError, RuntimeError, EOFError) as err:
        raise ConfigError(f"cannot resume from {state_file}: {err}") from None
    if len(state["rng_by_rank"]) != dist_utils.world_size():
        raise ConfigError(f"cannot resume from {last_dir}: it was written by {len(state['rng_by_rank'])} worker(s), "
                          f"this training has {dist_utils.world_size()}")
    runner.encoder.load_state_dict(state["model"])
    runner.optimizer.load_state_dict(state["optimizer"])
    runner.scheduler.load_state_dict(state["scheduler"])
    runner.scaler.load_state_dict(state["scaler"])
    saved = state["progress"]
    progress = Progress(**{**saved, "timings": Timings(**saved["timings"])})
    _restore_rng_states(state["rng_by_rank"][rank])
    return progress


# ------------------------------------------------------------------------------------------- train
def load_examples(config: TrainConfig) -> list:
    if config.sup_data is not None:
        return read_nli_triplets(config.sup_data, max_rows=config.max_sentences)
    return read_corpus(config.corpus, max_sentences=config.max_sentences, replace_bad_bytes=config.replace_bad_bytes)


def freeze(encoder: Encoder, device: torch.device) -> Encoder:
    """`encoder`, in place, as a model that never trains: no gradients, eval mode, on `device`, and on CUDA in
    bf16 (fp16 where unsupported), since without optimiser steps it needs no float32 master weights."""
    encoder.requires_grad_(False).eval().to(device)
    if device.type == "cuda":
        encoder.to(torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    return encoder


def load_complementary(config: TrainConfig, device: torch.device) -> Encoder:
    """DCLR's frozen complementary model (`freeze`): a given checkpoint, else the starting weights."""
    source = config.complementary or config.model
    encoder = Encoder.from_pretrained(source, pooler=config.poolers()[1], trust_remote_code=config.trust_remote_code)
    return freeze(encoder, device)


def train(config: TrainConfig,
          on_eval: Callable[[EvalReport], None] | None = None,
          on_step: Callable[[int, int], None] | None = None,
          resume: bool = False,
          examples: list | None = None,
          compile_seconds: float | None = None,
          shared_tokens: SharedTokens | None = None) -> dict:
    """Train, scoring the objective every `eval_steps`; returns (and on rank 0 writes) results.json.

    resume: continue from output_dir/last. examples: the training data already read (else `load_examples`).
    compile_seconds: what compiling cost on this node before, for compile="auto" (`decide_compile`).
    shared_tokens: the data's token ids made once for a whole search (used when made from this configuration).
    """
    if config.output_dir is None:
        raise ConfigError("output_dir: required")
    started = time.perf_counter()
    rank, world_size = dist_utils.rank(), dist_utils.world_size()
    # The same seed on every worker while the model is built: the freshly initialised MLP head must start
    # identical everywhere (there is no DDP broadcast; summed gradients keep identical weights identical).
    seed_everything(config.seed)
    device = pick_device()
    output_dir = Path(config.output_dir)
    train_pooler, eval_pooler = config.poolers()

    loss_fn = build_loss(config.loss, config.reg, **config.hparams)
    encoder = Encoder.from_pretrained(config.model, pooler=train_pooler, trust_remote_code=config.trust_remote_code)
    encoder.to(device).train()
    seed_everything(config.seed + rank)  # then distinct dropout masks per worker, reproducible per seed
    complementary = load_complementary(config, device) if loss_fn.needs_complementary else None
    if shared_tokens is not None and shared_tokens.fingerprint == data_fingerprint(config):
        examples = list(range(len(shared_tokens)))  # the loader pads the shared ids of these indices
    else:
        shared_tokens = None
        examples = examples if examples is not None else load_examples(config)
    batches = GlobalBatches(examples, config.batch_size, config.seed, rank, world_size)
    total_steps = len(batches) * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    runner = StepRunner(encoder, loss_fn, config, device, total_steps, complementary)
    runner.tokenize.shared = shared_tokens
    objective = build_objective(config.objective, config.objective_columns) if rank == 0 else None
    encode = encode_fn(encoder, eval_pooler)

    progress = load_last(output_dir / "last", runner, rank) if resume else Progress()
    timings = progress.timings
    timings.startup_s += time.perf_counter() - started
    if progress.compiled is None and config.compile != "auto":
        progress.compiled, progress.compile_decision = decide_compile(config.compile, device, total_steps, None, None)
    if progress.compiled:
        runner.compile()

    def evaluate(step: int, loss_sum: torch.Tensor, steps_since_eval: int, stats_sum: dict) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()
        clock = time.perf_counter()
        scores = objective(encode) if objective is not None else {"objective": 0.0}
        value = dist_utils.broadcast_float(scores["objective"], device)
        timings.eval_s += time.perf_counter() - clock
        improved = value > progress.best_objective or progress.best_step == 0  # the first evaluation always saves
        if improved:
            progress.best_objective, progress.best_step = value, step
        dev_scores = {k: v for k, v in scores.items() if k != "objective"}
        train_loss = float(loss_sum.item()) / steps_since_eval
        progress.step = step
        progress.dev_curve.append({"step": step, "objective": value, **dev_scores, "train_loss": train_loss})
        clock = time.perf_counter()
        with _writing_checkpoint(output_dir / "best"):
            if improved and rank == 0:
                encoder.save(output_dir / "best", pooler=eval_pooler)
        save_last(output_dir, runner, progress, rank)
        timings.checkpoint_s += time.perf_counter() - clock
        report = EvalReport(
            step=step, total_steps=total_steps, objective=value, best_objective=progress.best_objective,
            best_step=progress.best_step, dev_scores=dev_scores, train_loss=train_loss,
            sentences_per_s=config.batch_size * world_size * step / max(timings.train_s, 1e-9),
            loss_stats={k: float(v.item()) / steps_since_eval for k, v in stats_sum.items()},
            timings=Timings(**asdict(timings)), compile_decision=progress.compile_decision,
            checkpoint=str(output_dir) if rank == 0 else None)
        if on_eval is not None:
            on_eval(report)

    start_step = progress.step
    probe_clock: float | None = None  # set once the probe's warm-up steps are done (compile="auto")
    nonfinite = torch.zeros((), dtype=torch.float32, device=device)
    loss_sum = torch.zeros((), dtype=torch.float32, device=device)
    stats_sum: dict[str, torch.Tensor] = {}
    steps_since_eval = 0
    step = progress.step
    tokenized = iter(training_loader(batches, config.epochs, total_steps, runner.tokenize, device, config.seed,
                                     start=progress.step))
    window_start = time.perf_counter()
    try:
        for step, batch in enumerate(tokenized, start=progress.step + 1):
            compiling = runner.compiles_on(batch)
            if compiling:
                torch.cuda.synchronize()
                timings.train_s += time.perf_counter() - window_start
                window_start = time.perf_counter()
            loss = runner.step(batch)
            if compiling:  # the graph's recording, less what an ordinary step of it costs, is compile time
                torch.cuda.synchronize()
                elapsed = time.perf_counter() - window_start
                typical = timings.train_s / max(step - 1, 1)
                timings.compile_s += max(0.0, elapsed - typical)
                timings.train_s += min(elapsed, typical)
                window_start = time.perf_counter()
            nonfinite = torch.maximum(nonfinite, (~torch.isfinite(loss)).float())
            loss_sum += torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0)
            for name, value in loss_fn.stats().items():
                stats_sum[name] = stats_sum.get(name, 0.0) + value
            steps_since_eval += 1
            if on_step is not None:
                on_step(step, total_steps)
            last = step == total_steps
            if (step % NONFINITE_CHECK_EVERY == 0 or step % config.eval_steps == 0 or last) \
                    and dist_utils.any_flag(nonfinite):
                raise TrainingDiverged(step)
            probed = step - start_step - COMPILE_PROBE_WARMUP
            if progress.compiled is None and probed == 0 and not last:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                probe_clock = time.perf_counter()  # an evaluation inside the probe counts as steps: a rare excess
            if progress.compiled is None and (probed >= COMPILE_PROBE_STEPS or last):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                eager_step_s = (time.perf_counter() - probe_clock) / probed if probe_clock and probed > 0 else None
                decision, reason = decide_compile(config.compile, device, total_steps - step, eager_step_s,
                                                  compile_seconds)
                # every worker follows rank 0, whose clock the others' may differ from
                progress.compiled = bool(dist_utils.broadcast_float(float(decision), device))
                progress.compile_decision = reason
                if progress.compiled:
                    runner.compile()
            if step % config.eval_steps == 0 or last:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                timings.train_s += time.perf_counter() - window_start
                evaluate(step, loss_sum, steps_since_eval, stats_sum)
                loss_sum.zero_()
                stats_sum = {}
                steps_since_eval = 0
                window_start = time.perf_counter()
    finally:
        # The stream ends after total_steps by itself; when the loop raises (a diverged trial, a stopped search
        # trial), dropping the last reference stops a loader worker now, not whenever the traceback is freed.
        del tokenized

    results = {
        "objective": config.objective,
        "best_objective": progress.best_objective,
        "best_step": progress.best_step,
        "steps": step,
        "dev_curve": progress.dev_curve,
        "sentences_per_s": config.batch_size * world_size * step / max(timings.train_s, 1e-9),
        "train_seconds": timings.train_s,
        "timings": asdict(timings),
        "compile_decision": progress.compile_decision,
        "poolers": {"train": train_pooler, "eval": eval_pooler},
        "device": str(device),
        "world_size": world_size,
        "config": config.to_dict(),
    }
    if rank == 0:
        if config.test_eval:
            clock = time.perf_counter()
            best = Encoder.from_pretrained(str(output_dir / "best"), pooler=eval_pooler).to(device)
            # the seven test tasks, their mean, SICK-R dev, alignment and uniformity, scored on the reloaded files
            results.update(evaluate_encoder(encode_fn(best, eval_pooler), tasks="all"))
            results["test_eval_seconds"] = time.perf_counter() - clock
        results["wall_seconds"] = time.perf_counter() - started
        write_json_atomic(output_dir / "results.json", results)
    return results
