"""The seven test sets' and STS-B dev's distinct sentences made into evaluation batches by the packaged MiniLM's
tokenizer: once for a fresh encoder, then for a judging run's best checkpoint saved and reloaded three times (what
each judging run in a worker does). Runs on the code before the change (`_tokenized_for_encoding`) and after it
(`raycse.encoder.eval_batches`):

    python benchmarks/scripts/ab_eval_batches.py                                  # this checkout
    git worktree add /tmp/old REV && (cd /tmp/old && PYTHONPATH=/tmp/old python /path/to/ab_eval_batches.py)  # older
"""
import tempfile
import time
from pathlib import Path

from raycse.encoder import model
from raycse.evaluation.sts import SPLIT_OF_RESULT, concatenate, load_sts_task


def main() -> None:
    sentences = list(dict.fromkeys(
        sentence for key in SPLIT_OF_RESULT for pairs in [concatenate(load_sts_task(SPLIT_OF_RESULT[key]).values())]
        for sentence in (*pairs.sentences1, *pairs.sentences2)))
    first = model.Encoder.from_pretrained("minilm", pooler="avg")
    try:
        from raycse.encoder.eval_batches import evaluation_batches

        def batches(encoder):
            return evaluation_batches(encoder.tokenizer, sentences, encoder.max_seq_length, 128, 1024)
        code = "new"
    except ImportError:
        def batches(encoder):
            return encoder._tokenized_for_encoding(sentences, 128, None, 1024)
        code = "old"
    clock = time.perf_counter()
    batches(first)
    fresh = time.perf_counter() - clock
    reloaded_s = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as folder:
            first.save(Path(folder) / "best", "avg")
            reloaded = model.Encoder.from_pretrained(str(Path(folder) / "best"), pooler="avg")
            clock = time.perf_counter()
            batches(reloaded)
            reloaded_s.append(time.perf_counter() - clock)
    print(f"{code}: {len(sentences)} sentences; fresh {fresh:.2f} s; each reloaded checkpoint "
          + ", ".join(f"{seconds:.2f}" for seconds in reloaded_s) + " s")


if __name__ == "__main__":
    main()
