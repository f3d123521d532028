"""Dropout restricted to the leading rows of a batch, for `Encoder.forward(dropout_rows=R)`.

ImSimCSE's off-dropout needs each sentence twice with dropout and once without. With the dropout of every
site limited to rows [0, R), the three views are one forward of 3N rows with R = 2N: one compiled graph and
one walk through the weights instead of a train-mode pass and an eval-mode pass. `install_row_dropout` makes a
backbone able to do this, or says why it cannot: every nn.Dropout becomes a `RowDropout`, an SDPA backbone's
attention becomes `row_dropout_sdpa`, and one `RowDropoutState` per encoder tells them all how many rows get
dropout in the forward under way.

The same hooks carry keyed dropout (keyed_dropout.py), which gradient caching needs: inside
`Encoder.forward(dropout_key=..., row_ids=...)` every site draws its mask from a hash of the step's key, its own
index and each row's global id instead of torch's RNG, so a row's masks do not depend on the rows beside it.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from raycse.encoder.keyed_dropout import keyed_attention, keyed_dropout
from raycse.errors import first_line

# The attention implementation that `install_row_dropout` gives an SDPA backbone: SDPA itself, but with the
# attention-probability dropout restricted to the first rows during a `forward(dropout_rows=...)`.
ROW_DROPOUT_ATTENTION = "raycse_sdpa"
# The attribute, on every submodule of an installed backbone, holding its encoder's `RowDropoutState`.
_ROW_DROPOUT_ATTRIBUTE = "raycse_row_dropout"


class RowDropoutState:
    """How many leading rows of the batch get dropout in the forward under way; None outside
    `Encoder.forward(dropout_rows=...)`, i.e. ordinary dropout. One object per Encoder, shared by its
    `RowDropout` modules and its attention calls, so one assignment reaches every dropout site."""

    def __init__(self) -> None:
        self.rows: int | None = None
        # Keyed dropout (keyed_dropout.py), set for one `Encoder.forward(dropout_key=...)`: the (B,) row keys, and
        # the index of the next dropout site in that forward. None: torch's dropout.
        self.keys: torch.Tensor | None = None
        self.site = 0

    def next_site(self) -> int:
        self.site += 1
        return self.site - 1

    def keyed(self, input: Tensor, p: float) -> Tensor:
        """Keyed dropout of `input` (B, ...) at the next site, restricted to the first `rows` rows if set."""
        site, rows = self.next_site(), self.rows
        if rows is None or rows >= input.shape[0]:
            return keyed_dropout(input, p, self.keys, site)
        if rows <= 0:
            return input
        return torch.cat([keyed_dropout(input[:rows], p, self.keys[:rows], site), input[rows:]])


class RowDropout(nn.Dropout):
    """nn.Dropout whose mask can be restricted to the first `state.rows` rows (dim 0) of its input.

    With `state.rows` None it is nn.Dropout, call for call (same RNG draws, same numbers). With R rows in train
    mode, rows [0, R) go through the very `F.dropout` call that an R-row batch would get (same mask shape,
    so the same RNG draws) and rows [R, B) pass unchanged, which is what eval mode does to them. Every dropout
    site of a BERT-family backbone sees the batch on dim 0 (token states (B, L, H); eager attention
    probabilities (B, heads, L, L)).
    """

    def __init__(self, p: float, inplace: bool, state: RowDropoutState):
        super().__init__(p, inplace)
        self.state = state

    def forward(self, input: Tensor) -> Tensor:
        if self.state.keys is not None and self.training:
            return self.state.keyed(input, self.p)
        rows = self.state.rows
        if rows is None or not self.training or rows >= input.shape[0]:
            return super().forward(input)
        if rows <= 0:
            return input
        head = nn.functional.dropout(input[:rows], self.p, True)
        return torch.cat([head, input[rows:]])


def row_dropout_sdpa(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                     dropout: float = 0.0, **kwargs) -> tuple[Tensor, None]:
    """transformers' SDPA attention function, with the attention-probability dropout on the first rows only.

    Registered as ROW_DROPOUT_ATTENTION in transformers' AttentionInterface (and SDPA's mask function under
    the same name, so masks are built exactly as for 'sdpa'). Outside a row-restricted forward it is one call
    of `sdpa_attention_forward` with the very arguments it got, so the numbers and the SDPA kernel are those of
    'sdpa'. Inside one (R rows, dropout > 0): one SDPA call with dropout on rows [0, R), one without on
    [R, B), concatenated; per-row tensors among the arguments (the mask, a position bias: dim 0 of size B)
    are split with them, broadcast ones (dim 0 of size 1) go to both. SDPA's dropout cannot be given per row;
    two calls over disjoint rows do the work of one.
    """
    state = getattr(module, _ROW_DROPOUT_ATTRIBUTE, None)
    if state is not None and state.keys is not None and module.training:
        if dropout == 0.0:
            state.next_site()
            return _SDPA_ATTENTION(module, query, key, value, attention_mask, dropout=0.0, **kwargs)
        return _keyed_attention(module, state, query, key, value, attention_mask, dropout, **kwargs), None
    rows = None if state is None else state.rows
    batch = query.shape[0]
    if rows is None or dropout == 0.0 or rows >= batch:
        return _SDPA_ATTENTION(module, query, key, value, attention_mask, dropout=dropout, **kwargs)
    if rows <= 0:
        return _SDPA_ATTENTION(module, query, key, value, attention_mask, dropout=0.0, **kwargs)

    def part(start: int, stop: int | None, part_dropout: float) -> Tensor:
        def rows_of(item):
            return item[start:stop] if isinstance(item, Tensor) and item.dim() and item.shape[0] == batch else item

        output, _ = _SDPA_ATTENTION(module, rows_of(query), rows_of(key), rows_of(value), rows_of(attention_mask),
                                    dropout=part_dropout, **{name: rows_of(v) for name, v in kwargs.items()})
        return output

    return torch.cat([part(0, rows, dropout), part(rows, None, 0.0)]), None


def _keyed_attention(module: nn.Module, state: RowDropoutState, query: Tensor, key: Tensor, value: Tensor,
                     attention_mask: Tensor | None, dropout: float, scaling: float | None = None,
                     is_causal: bool | None = None, position_bias: Tensor | None = None, **kwargs) -> Tensor:
    """The keyed-dropout forward of `row_dropout_sdpa`: explicit attention (`keyed_attention`), probabilities
    dropped by the state's keys; arguments read as transformers' `sdpa_attention_forward` reads them."""
    if kwargs.get("softcap") is not None or kwargs.get("cache") is not None:
        raise ValueError("keyed dropout: attention with softcap or a cache is not supported")
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    return keyed_attention(query, key, value, attention_mask, lambda probabilities: state.keyed(probabilities, dropout),
                           scaling=scaling, is_causal=bool(is_causal) and attention_mask is None,
                           position_bias=position_bias, num_key_value_groups=getattr(module, "num_key_value_groups", 1))


_SDPA_ATTENTION = ALL_ATTENTION_FUNCTIONS["sdpa"]
AttentionInterface.register(ROW_DROPOUT_ATTENTION, row_dropout_sdpa)
AttentionMaskInterface.register(ROW_DROPOUT_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def install_row_dropout(backbone: PreTrainedModel) -> tuple[RowDropoutState, str | None]:
    """Make `backbone` able to restrict its dropout to leading rows; returns (the shared state, why it cannot).

    Every plain nn.Dropout becomes a `RowDropout` (no parameters, so checkpoints are unchanged) and an 'sdpa'
    backbone switches to ROW_DROPOUT_ATTENTION, which is SDPA until a row-restricted forward. Both behave as
    before until `state.rows` is set. Then a self-check: a train-mode forward of a small batch with no row
    given dropout must equal the eval-mode forward. It passes for BERT, RoBERTa, ELECTRA, DistilBERT, ALBERT,
    ModernBERT (SDPA through AttentionInterface) and MPNet, DeBERTa-v2 (their own attention code, with an
    nn.Dropout on the probabilities). It fails for a backbone that applies dropout some other way (a
    functional `F.dropout`, AttentionInterface's 'eager' function, which reads `module.training`, an
    nn.Dropout subclass, which is left alone): the second element then says so, and
    `Encoder.forward(dropout_rows=...)` raises with it instead of computing wrong rows. The check runs under
    `fork_rng`, so it shifts no seed.
    """
    state = RowDropoutState()
    for module in list(backbone.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Dropout:
                replacement = RowDropout(child.p, child.inplace, state)
                replacement.train(child.training)
                setattr(module, name, replacement)
            elif isinstance(child, RowDropout):  # a backbone that another Encoder wrapped before
                child.state = state
    for module in backbone.modules():
        setattr(module, _ROW_DROPOUT_ATTRIBUTE, state)
    attention = getattr(backbone.config, "_attn_implementation", None)
    if attention == "sdpa" and type(backbone)._can_set_attn_implementation():
        backbone.set_attn_implementation(ROW_DROPOUT_ATTENTION)
    return state, _row_dropout_problem(backbone, state)


def _row_dropout_problem(backbone: PreTrainedModel, state: RowDropoutState) -> str | None:
    config = backbone.config
    where = f"the {getattr(config, 'model_type', type(backbone).__name__)} backbone " \
            f"(attention {getattr(config, '_attn_implementation', None)!r})"
    try:
        device = next(backbone.parameters()).device
    except StopIteration:
        return None  # nothing to check, and no dropout to restrict
    if device.type == "meta":
        return f"{where} has no weights yet (meta device), so row dropout could not be checked"
    # 2 rows of 5 tokens, the second padded: ids 1-4 exist in every vocabulary
    input_ids = torch.tensor([[1, 2, 3, 4, 2], [1, 3, 4, 0, 0]], device=device)
    attention_mask = (input_ids != 0).long()
    was_training = backbone.training
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            backbone.eval()
            expected = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            backbone.train()
            state.rows = 0
            got = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    except Exception as err:  # noqa: BLE001 - an architecture that wants other inputs: unverified
        return f"{where} could not be checked for row dropout ({type(err).__name__}: {first_line(err)})"
    finally:
        state.rows = None
        backbone.train(was_training)
    if not torch.allclose(got, expected, rtol=1e-5, atol=1e-6):
        return (f"{where} applies dropout outside nn.Dropout modules and SDPA attention, so it cannot be "
                f"restricted to rows; run the dropout-off rows as a separate eval-mode pass")
    return None
