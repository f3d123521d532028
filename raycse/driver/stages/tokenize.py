"""Tokenize: the training data tokenised once for every trial (raycse.data.tokens), handed to the trials through Ray's
object store; or nothing, where trials must tokenise themselves (a searched max_len or model, or a tokenizer whose
batches the shared ids would not reproduce). Resume: done again (a second or two)."""
from __future__ import annotations

from raycse.driver.stages.base import Stage
from raycse.driver.state import SearchState


class TokenizeStage(Stage):
    name = "tokenize"
    needs = ("space",)
    produces = ("shared_tokens",)

    def run(self, state: SearchState) -> None:
        from transformers import AutoTokenizer

        from raycse.data.corpus import load_examples
        from raycse.data.tokens import data_fingerprint, share_tokens
        from raycse.encoder.loading import resolve_model_path

        space = state.space
        searched = {param for family in space.families.values() for param in family.space}
        if searched & {"max_len", "model"}:
            state.log("Each trial tokenises its own data: the search varies max_len.")
            return
        base = space.base
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(base.model),
                                                  trust_remote_code=base.trust_remote_code)
        examples = load_examples(base)
        shared = share_tokens(tokenizer, examples, base.max_len, data_fingerprint(base))
        if not shared.check(tokenizer, examples, base.max_len):
            state.log("Each trial tokenises its own data: this tokenizer's batches are not plain right-padded ids.")
            return
        state.shared_tokens = shared
