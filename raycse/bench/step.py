"""`raycse bench`: how fast one training step is, how much faster than naive code, how long evaluation takes.

What is timed, on randomly initialised BERT-shaped encoders (the packaged MiniLM's tokenizer, no download):

  raycse step    what a training or search trial runs per step: the next batch of the trainer's own DataLoader
                 (`raycse.training.batches.training_loader`: on CUDA tokenised ahead by worker processes into pinned
                 memory, on CPU tokenised inline, see there) and `raycse.training.step_runner.StepRunner.step` on
                 it (host-to-device copy, the passes the loss needs, backward, optimiser and scheduler step): bf16
                 autocast, fused AdamW, SDPA attention and `torch.compile` with CUDA graphs on CUDA (`--no-compile`
                 for eager bf16), as in the trainer. `host_tokenize_ms` is the loader-side tokenising of one
                 batch by one worker, timed alone.
  baseline step  written plainly below: fp32, eager attention, PyTorch's default (non-fused) AdamW, the same loss
                 and the same passes, the 2N sentences tokenised as one list inside the step. Same weights, same
                 batches in the same order.
  evaluation     one call of the `stsb_dev` objective on the trained encoder, encoded the way the trainer
                 encodes it (`raycse.encoder.model.encode_fn`).

The synthetic sentences are whole vocabulary words, `seq_len - 2` of them, so every sentence is exactly
`seq_len` tokens with [CLS] and [SEP] and every step has the same shape. A step consumes N = `batch_size`
corpus rows (sentences, or NLI triplets for supervised losses): `sentences_per_s = N * 1000 / ms_per_step`.

Model FLOPs of a step (PaLM's estimate, Chowdhery et al. 2022, app. B, with bidirectional attention):

    forward FLOPs per token  f = 2 * P + 4 * L * H * s
    step FLOPs               = s * f * (3 * R_grad + R_nograd)

P: parameters of the transformer layers (embedding tables, the unused BERT pooler and SimCSE's per-sentence MLP
head left out), L layers, H hidden size, s = seq_len; R_grad rows go forward and backward (2N for unsupervised
losses, 3N supervised, + N for off-dropout's dropout-off pass), R_nograd rows forward only (DCLR's frozen
complementary encoder: N). `tflop_per_s` = step FLOPs / step time; `mfu` divides it by the device's dense
bf16 peak (H100 SXM and H200 989, H100 PCIe 756, H100/H200 NVL 835, A100 312 TFLOP/s), None where unknown (CPU).
`tflop_per_s_all_params` and `mfu_all_params` count instead every backbone parameter P_all (embedding tables and
the BERT pooler included), 2 * P_all * s * (3 * R_grad + R_nograd): the common "6 x parameters x tokens"
accounting, which credits a step with the embedding lookups' parameters as if they were matrix products, so it
reads higher than ours (about twice for MiniLM, whose embedding table is half its parameters). It is there to
compare with figures quoted that way.

`--profile FILE` runs a few more raycse steps under torch.profiler (`raycse.bench.timing.profile_steps`) and writes
its operator table to FILE; the JSON gets the kernels' time per step and the fraction of the wall time the device was
busy (near 1: the GPU's work bounds the step; well below: the host does).

`--concurrent N` measures instead the aggregate throughput of N trials sharing the machine: see
`raycse.bench.concurrent`.
"""
from __future__ import annotations

import copy
import datetime as _dt
import math
import time
from dataclasses import dataclass

from raycse.bench.options import StepOptions, check_loss
from raycse.bench.synthetic import SHAPES, bench_tokenizer, make_encoder, synthetic_data
from raycse.bench.timing import device_name, free_device_memory, host_tokenize_ms, profile_steps, timed_steps
from raycse.losses import DEFAULT_LOSS

# Dense (no sparsity) bf16 tensor-core peaks, TFLOP/s; first match of the CUDA device name wins.
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H200 NVL", 835.0), ("H100", 989.0),
                    ("H200", 989.0), ("A100", 312.0))

PROFILE_STEPS = 5
BATCH_POOL = 8  # synthetic batches' worth of rows, reshuffled every epoch (the tokenizer caches nothing anyway)


@dataclass
class BenchOptions(StepOptions):
    loss: str = DEFAULT_LOSS
    eval: bool = True  # time one STS-B dev evaluation too
    baseline: bool = True  # time the naive fp32 step too
    profile: str | None = None  # write a torch.profiler summary of PROFILE_STEPS more raycse steps here

    def validate(self) -> BenchOptions:
        super().validate()
        check_loss(self.loss)
        return self


def layer_parameters(encoder) -> int:
    return sum(p.numel() for p in encoder.backbone.encoder.parameters())


def step_flops(encoder, seq_len: int, grad_rows: int, nograd_rows: int) -> float:
    """Model FLOPs of one step (module docstring): s * (2P + 4LHs) * (3 * grad_rows + nograd_rows)."""
    cfg = encoder.backbone.config
    per_token_forward = 2 * layer_parameters(encoder) + 4 * cfg.num_hidden_layers * cfg.hidden_size * seq_len
    return float(seq_len * per_token_forward * (3 * grad_rows + nograd_rows))


def pass_rows(loss_fn, batch_size: int) -> tuple[int, int]:
    """(rows with gradient, rows forward only) that one step of `loss_fn` encodes."""
    grad_rows = (3 if loss_fn.needs_hard_neg else 2) * batch_size + (batch_size if loss_fn.needs_z0 else 0)
    return grad_rows, batch_size if loss_fn.needs_complementary else 0


def peak_bf16_tflops(device) -> float | None:
    if device.type != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key in name), None)


def train_config(options: BenchOptions):
    from raycse.settings.config import TrainConfig

    return TrainConfig(model="random", loss=options.loss, batch_size=options.batch_size, max_len=options.seq_len,
                       pooler="cls", precision=options.precision, compile="always" if options.compile else "never",
                       seed=options.seed)


def total_steps(options: BenchOptions) -> int:
    """Steps the loader supplies and the LR schedule spans: warm-up, timed, and the profiled ones if asked for."""
    return options.warmup + options.steps + (PROFILE_STEPS if options.profile else 0)


def step_inputs(options: BenchOptions, data, runner, device):
    """The trainer's own DataLoader over `data` for warmup + steps steps, as `train` builds it: (loader, iterator)."""
    from raycse.training.batches import training_loader

    total = total_steps(options)
    loader = training_loader(data, math.ceil(total / len(data)), total, runner.tokenize, device, options.seed)
    return loader, iter(loader)


def raw_batches(options: BenchOptions, data):
    """The same batches in the same order, untokenised, for the baseline step."""
    from raycse.data.corpus import StepBatches

    total = options.warmup + options.steps
    return iter(StepBatches(data, math.ceil(total / len(data)), total))


def build_runner(options: BenchOptions, tokenizer, device):
    """The trainer's own StepRunner on a random encoder of `options.shape` (SDPA attention, as `from_pretrained`)."""
    from raycse.losses import build_loss
    from raycse.training.step_runner import StepRunner
    from raycse.training.trainer import freeze

    config = train_config(options)
    loss_fn = build_loss(options.loss)
    encoder = make_encoder(options.shape, tokenizer, "sdpa", options.seed, pooler=config.pooler)
    encoder.to(device).train()
    # DCLR's default complementary model, as `trainer.load_complementary` makes it: the start weights, frozen
    complementary = freeze(copy.deepcopy(encoder), device) if loss_fn.needs_complementary else None
    runner = StepRunner(encoder, loss_fn, config, device, total_steps(options), complementary)
    if options.compile and device.type == "cuda":  # the trainer's "always"; its "auto" decides per training
        runner.compile()
    return runner, loss_fn


def baseline_step_fn(options: BenchOptions, tokenizer, device, loss_fn):
    """The naive step: fp32, eager attention, default AdamW, every pass tokenised separately."""
    import torch

    from raycse.losses import Embeddings
    from raycse.training.step_runner import linear_decay

    config = train_config(options)
    encoder = make_encoder(options.shape, tokenizer, "eager", options.seed).to(device).train()
    complementary = None
    if loss_fn.needs_complementary:
        complementary = copy.deepcopy(encoder).requires_grad_(False).eval()
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = linear_decay(optimizer, options.warmup + options.steps)

    def tokens(sentences):
        batch = tokenizer(sentences, padding=True, truncation=True, max_length=options.seq_len, return_tensors="pt")
        return {k: v.to(device) for k, v in batch.items()}

    def step(batch):
        n = len(batch)
        if loss_fn.needs_hard_neg:
            sentences = [row[0] for row in batch] + [row[1] for row in batch] + [row[2] for row in batch]
        else:
            sentences = list(batch) + list(batch)
        pooled = encoder(**tokens(sentences))
        z0 = comp = None
        if loss_fn.needs_z0:
            encoder.eval()
            z0 = encoder(**tokens(sentences[:n]))
            encoder.train()
        if complementary is not None:
            with torch.no_grad():
                comp = complementary(**tokens(sentences[:n]))
        z3 = pooled[2 * n:] if loss_fn.needs_hard_neg else None
        loss = loss_fn(Embeddings(z1=pooled[:n], z2=pooled[n:2 * n], z3=z3, z0=z0, complementary=comp))
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        return loss.detach()

    return step, encoder


def time_eval(encoder, eval_pooler: str) -> dict:
    """One STS-B dev evaluation as the trainer runs it: a first call (tokenising, lazy CUDA init) timed on its own,
    then the call that `eval_seconds` reports."""
    from raycse.encoder.model import encode_fn
    from raycse.evaluation.sts import build_objective

    objective = build_objective("stsb_dev")
    encode = encode_fn(encoder, eval_pooler)
    result = {"eval_sentences": len(objective.sentences)}
    # The first call also tokenises the sentences (kept for the next calls, as in a training) and, on CUDA,
    # initialises kernels; `eval_seconds` is a later call: what each evaluation of a training costs after its first.
    started = time.perf_counter()
    objective(encode)
    result["eval_first_call_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    objective(encode)
    result["eval_seconds"] = time.perf_counter() - started
    return result


def run_description(options: BenchOptions, runner, loss_fn, device, rows: tuple[int, int],
                    flops: tuple[float, float]) -> dict:
    """What is timed, on what: the JSON's first keys. `rows`: (with gradient, forward only) per step; `flops`: a
    step's model FLOPs, counted on the transformer layers and on every backbone parameter (module docstring)."""
    import torch
    import transformers

    return {
        "shape": options.shape,
        "loss": loss_fn.name,
        "batch_size": options.batch_size,
        "seq_len": options.seq_len,
        "steps": options.steps,
        "warmup": options.warmup,
        "device": device_name(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "precision": {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[runner.amp_dtype],
        "compile": runner.compiled,
        "compile_requested": options.compile,
        "attention": runner.encoder.backbone.config._attn_implementation,
        "optimizer": "AdamW (fused)" if device.type == "cuda" else "AdamW",
        "params_layers": layer_parameters(runner.encoder),
        "params_total": sum(p.numel() for p in runner.encoder.parameters()),
        "rows_per_step": {"with_grad": rows[0], "no_grad": rows[1]},
        "flops_per_step": flops[0],
        "flops_per_step_all_params": flops[1],
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def time_baseline(options: BenchOptions, tokenizer, device, loss_fn, data, flops: float, ms: float) -> dict:
    """The naive step on the same batches from the same seed: the JSON's "baseline" and "speedup" over raycse's
    `ms` per step."""
    import torch

    step, _encoder = baseline_step_fn(options, tokenizer, device, loss_fn)
    torch.manual_seed(options.seed)
    elapsed = timed_steps(step, raw_batches(options, data), options.warmup, options.steps, device)
    base_ms = 1000.0 * elapsed / options.steps
    baseline = {
        "ms_per_step": base_ms,
        "sentences_per_s": options.batch_size * 1000.0 / base_ms,
        "tflop_per_s": flops / (elapsed / options.steps) / 1e12,
        "precision": "fp32", "attention": "eager", "optimizer": "AdamW (default, not fused)", "compile": False,
    }
    del step, _encoder
    free_device_memory(device)
    return {"baseline": baseline, "speedup": base_ms / ms}


def run_bench(options: BenchOptions) -> dict:
    """Time raycse's step, the naive baseline and the STS-B dev evaluation; the figures as a JSON-ready dict."""
    import torch

    from raycse.encoder.model import pick_device

    options.validate()
    device = pick_device()
    tokenizer = bench_tokenizer()
    runner, loss_fn = build_runner(options, tokenizer, device)
    data = synthetic_data(tokenizer, options.batch_size, options.seq_len, loss_fn.needs_hard_neg,
                          min(BATCH_POOL, options.warmup + options.steps), options.seed)
    grad_rows, nograd_rows = pass_rows(loss_fn, options.batch_size)
    flops = step_flops(runner.encoder, options.seq_len, grad_rows, nograd_rows)
    backbone_params = sum(p.numel() for p in runner.encoder.backbone.parameters())
    flops_all = 2.0 * backbone_params * options.seq_len * (3 * grad_rows + nograd_rows)
    peak = peak_bf16_tflops(device)
    result = run_description(options, runner, loss_fn, device, (grad_rows, nograd_rows), (flops, flops_all))

    torch.manual_seed(options.seed)
    loader, inputs = step_inputs(options, data, runner, device)
    elapsed = timed_steps(runner.step, inputs, options.warmup, options.steps, device)
    if options.profile:
        result["profile"] = profile_steps(runner.step, inputs, PROFILE_STEPS, device, options.profile)
    del inputs  # stops a loader worker before the baseline is timed
    ms = 1000.0 * elapsed / options.steps
    tflops = flops / (elapsed / options.steps) / 1e12
    result.update({
        "ms_per_step": ms,
        "sentences_per_s": options.batch_size * 1000.0 / ms,
        "tflop_per_s": tflops,
        "peak_tflop_per_s": peak,
        "mfu": tflops / peak if peak else None,
        "tflop_per_s_all_params": tflops * flops_all / flops,
        "mfu_all_params": tflops * flops_all / flops / peak if peak else None,
    })
    result["host_tokenize_ms"] = host_tokenize_ms(runner.tokenize, data.epoch(0))
    result["loader_workers"] = loader.num_workers  # 0: the timed step includes host_tokenize_ms
    if options.eval:
        result.update(time_eval(runner.encoder, "cls" if loss_fn.needs_hard_neg else "cls_before_pooler"))
    else:
        result["eval_seconds"] = None
    del runner
    free_device_memory(device)

    if options.baseline:
        result.update(time_baseline(options, tokenizer, device, loss_fn, data, flops, ms))
    else:
        result["baseline"], result["speedup"] = None, None
    return result


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_step_row(r: dict) -> str:
    layers = SHAPES[r["shape"]]
    flags = f"{r['precision']}, {r['attention']}, {r['optimizer']}" + (", compiled" if r["compile"] else "")
    rows = [("raycse (" + flags + ")", r["ms_per_step"], r["sentences_per_s"], r["tflop_per_s"], r["mfu"])]
    if r.get("baseline"):
        b = r["baseline"]
        rows.append((f"baseline (fp32, eager, {b['optimizer']})", b["ms_per_step"], b["sentences_per_s"],
                     b["tflop_per_s"], None))
    width = max(len(row[0]) for row in rows)
    lines = [
        f"raycse bench: {r['shape']} ({layers['num_hidden_layers']}x{layers['hidden_size']}, "
        f"{r['params_layers'] / 1e6:.2f}M layer params), loss {r['loss']}, "
        f"batch {r['batch_size']} x seq {r['seq_len']}, {r['steps']} timed steps after {r['warmup']}",
        f"device: {r['device']}   torch {r['torch']}",
        f"{'':<{width}}  {'ms/step':>10}  {'sentences/s':>12}  {'TFLOP/s':>9}  {'MFU':>6}",
    ]
    for name, ms, sps, tflops, mfu in rows:
        lines.append(f"{name:<{width}}  {ms:>10.2f}  {sps:>12.1f}  {tflops:>9.4g}  "
                     f"{_fmt(None if mfu is None else 100 * mfu, '>5.1f') + ('%' if mfu is not None else ''):>6}")
    tail = [f"speedup over baseline: {_fmt(r.get('speedup'), '.2f')}x"]
    if r.get("eval_seconds") is not None:
        tail.append(f"STS-B dev evaluation: {r['eval_seconds']:.2f} s ({r['eval_sentences']} sentences)")
    lines.append("   ".join(tail))
    if r.get("profile"):
        p = r["profile"]
        busy = "" if p["device_busy_fraction"] is None else (
            f": kernels {p['device_ms_per_step']:.2f} ms/step, device busy {100 * p['device_busy_fraction']:.0f}%")
        lines.append(f"profile ({p['profiled_steps']} steps, {p['ms_per_step_profiled']:.2f} ms/step){busy} "
                     f"-> {p['table']}")
    return "\n".join(lines)
