"""Keyed dropout: masks that depend on what a row is, never on how the batch was cut into chunks.

Gradient caching (grad_cache.py) encodes a batch in chunks, twice. Its parameter gradients equal the full-batch
step's only if every row gets the same dropout masks whichever chunk it lands in, and whether the batch is split
across workers or not. torch's dropout cannot give that: a forward of B rows draws each site's mask for all B rows
from one RNG stream, so the same row gets another mask in another chunk. Keyed dropout draws no random numbers at
all. Each mask element is a hash of

    (the step's key, the dropout site, the row's global id, the element's coordinates within the row)

mapped to a uniform u in [0, 1); the element is kept where u >= p and scaled by 1 / (1 - p). The key is a pure
function of the seed and the step (`step_key`), so every worker computes the same masks with no communication and
a resumed training recomputes them. The site is a counter reset at each forward (so a layer shared across depths,
as in ALBERT, gets a fresh mask at each use). The coordinates are packed 16 bits per dimension, not flattened, so
that a row padded to another length (each worker pads its own rows) keeps the masks of its real tokens.

The hash is a counter-based one (Mueller's 32-bit integer mixer, two multiply / xor-shift rounds) written as
int64 tensor operations with every product below 2**63, so it is exact on any device and traceable by
torch.compile, which fuses it into the dropout; it touches no RNG state, so a loss that draws from the global
generator (DCLR's noise) sees the same state however the batch was chunked. Eager, it costs about a dozen
elementwise passes per dropout site: that is why the trainer uses it only with `mini_batch_size` set and keeps
torch's dropout otherwise.

Attention-probability dropout needs the probabilities themselves, which the fused SDPA kernels never
materialise: `keyed_attention` computes softmax(QK^T / sqrt(d) + mask) explicitly, drops, and multiplies by V.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

MASK32 = 0xFFFFFFFF
_MIXER = 0x045D9F3B  # Mueller's multiplier: odd, below 2**31, so a 32-bit value times it stays below 2**63
_GOLDEN = 0x61C88647  # 2**32 / golden ratio, modulo 2**32 (negated): spreads consecutive integers
_BITS_PER_DIM = 16  # coordinates packed into the element index: each dimension of a row below 65,536
_MAX_DIMS = 3  # three packed dimensions = 48 bits, which int64 holds


def _mix(x: Tensor) -> Tensor:
    """A 32-bit integer hash, elementwise, of int64 values in [0, 2**32): every bit of the input reaches every
    bit of the output. Out of place on the input, in place on its own intermediates."""
    x = x ^ (x >> 16)
    x.mul_(_MIXER).bitwise_and_(MASK32)
    x ^= x >> 16
    x.mul_(_MIXER).bitwise_and_(MASK32)
    x ^= x >> 16
    return x


def _mix_int(x: int) -> int:
    """`_mix` on a Python int (the same function, for constants)."""
    x &= MASK32
    for _ in range(2):
        x ^= x >> 16
        x = (x * _MIXER) & MASK32
    return x ^ (x >> 16)


def step_key(seed: int, step: int) -> int:
    """The dropout key of training step `step` (0-based) under `seed`: splitmix64 of the pair, 62 bits.

    A pure function of the two, so every worker has it without communication, and a resumed training has it
    from its step count alone; no RNG stream is drawn from, so DCLR's noise and the data order stay where the
    uncached training has them."""
    z = (seed * 0x9E3779B97F4A7C15 + step * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return (z ^ (z >> 31)) >> 2


def row_keys(key: Tensor, row_ids: Tensor) -> Tensor:
    """(B,) int64 per-row keys of one forward: the step's key (a 0-d int64 tensor) hashed with each row's global
    id. Computed once per forward; each dropout site hashes its own index in (`keyed_dropout`)."""
    key = key.to(device=row_ids.device, dtype=torch.int64)
    low, high = key & MASK32, (key >> 32) & MASK32
    return _mix(_mix((row_ids.to(torch.int64) & MASK32) ^ low) ^ high)


def _element_index(shape: torch.Size, device: torch.device) -> Tensor:
    """int64 tensor of `shape` (a row's dimensions): each element's coordinates, 16 bits each, hashed to 32 bits.

    Eager, kept per shape and device: a forward meets a handful of shapes, and each costs a dozen small kernels."""
    if torch.compiler.is_compiling():
        return _compute_element_index(shape, device)
    cache_key = (tuple(shape), str(device))
    if cache_key not in _ELEMENT_INDEX_CACHE:
        if len(_ELEMENT_INDEX_CACHE) >= _ELEMENT_INDEX_CACHE_SIZE:
            del _ELEMENT_INDEX_CACHE[next(iter(_ELEMENT_INDEX_CACHE))]
        _ELEMENT_INDEX_CACHE[cache_key] = _compute_element_index(shape, device)
    return _ELEMENT_INDEX_CACHE[cache_key]


_ELEMENT_INDEX_CACHE: dict[tuple, Tensor] = {}
_ELEMENT_INDEX_CACHE_SIZE = 64  # row shapes: (length, hidden), (heads, length, length) for each padded length


def _compute_element_index(shape: torch.Size, device: torch.device) -> Tensor:
    if len(shape) > _MAX_DIMS or any(size >= 2**_BITS_PER_DIM for size in shape):
        raise ValueError(f"keyed dropout: a row of shape {tuple(shape)} has more than {_MAX_DIMS} dimensions or one "
                         f"of {2**_BITS_PER_DIM} or more elements")
    index = torch.zeros((1,) * len(shape), dtype=torch.int64, device=device)
    for dim, size in enumerate(shape):
        view = [1] * len(shape)
        view[dim] = size
        index = (index << _BITS_PER_DIM) | torch.arange(size, device=device, dtype=torch.int64).view(view)
    return _mix((index & MASK32) ^ _mix((index >> 32) + _GOLDEN))


def keep_mask(shape: torch.Size, p: float, keys: Tensor, site: int) -> Tensor:
    """Boolean mask of `shape` (B, ...): True where an element is kept, with probability 1 - p (to 2**-32).

    keys: the (B,) row keys of the rows (`row_keys`); site: this dropout site's index within the forward.
    Element (b, c) depends on keys[b], site and the coordinates c only."""
    site_key = _mix_int((site + 1) * _GOLDEN)
    seeds = _mix(keys ^ site_key).view(-1, *([1] * (len(shape) - 1)))
    x = seeds ^ _element_index(shape[1:], keys.device)
    # `_mix` in place with one scratch tensor (on a CPU, allocating full-size temporaries costs as much as the
    # arithmetic); its last xor-shift is left out: the comparison reads the top bits, which the multiply mixed last
    if torch.compiler.is_compiling():  # inductor fuses the whole of it into one kernel
        for _ in range(2):
            x = ((x ^ (x >> 16)) * _MIXER) & MASK32
    else:
        shifted = torch.empty_like(x)
        for _ in range(2):
            x ^= torch.bitwise_right_shift(x, 16, out=shifted)
            x.mul_(_MIXER).bitwise_and_(MASK32)
    return x >= round(p * 2**32)


def keyed_dropout(x: Tensor, p: float, keys: Tensor, site: int) -> Tensor:
    """Dropout of x (B, ...) with the keyed mask: kept elements scaled by 1 / (1 - p), the others zeroed.

    Autograd saves the boolean mask only, as torch's dropout does."""
    if p <= 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    return torch.where(keep_mask(x.shape, p, keys, site), x, 0.0) * (1.0 / (1.0 - p))


def keyed_attention(query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                    drop, scaling: float | None = None, is_causal: bool = False,
                    position_bias: Tensor | None = None, num_key_value_groups: int = 1) -> Tensor:
    """Attention with the dropout on its probabilities done by `drop(probabilities)`, computed explicitly.

    Follows transformers' `sdpa_attention_forward` (and SDPA): query (B, heads, Lq, d), key and value
    (B, kv_heads, Lk, d); a boolean mask means True = attend, a float mask is added; `position_bias` is added;
    with no mask `is_causal` masks the future. The softmax runs in float32. Returns (B, Lq, heads, d), as
    transformers' attention functions do.
    """
    if num_key_value_groups > 1:
        key = key.repeat_interleave(num_key_value_groups, dim=1)
        value = value.repeat_interleave(num_key_value_groups, dim=1)
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    scores = torch.matmul(query, key.transpose(-1, -2)).float() * scale
    if position_bias is not None:
        scores = scores + position_bias.float()
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(torch.float32).min)
        else:
            scores = scores + attention_mask.float()
    elif is_causal and query.shape[2] > 1:
        causal = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~causal, torch.finfo(torch.float32).min)
    probabilities = drop(torch.softmax(scores, dim=-1).to(value.dtype))
    return torch.matmul(probabilities, value).transpose(1, 2).contiguous()
