"""`raycse export EXPERIMENT DIR`: the winner of a search as a sentence-transformers model folder with a model card.

The folder is the registered checkpoint (the parent run's `best_checkpoint/` artifact, read through the Tracker):
Hugging Face weights, tokenizer and config, and the sentence-transformers modules that reproduce the pooling the
search evaluated, so that `SentenceTransformer(DIR)` and `AutoModel.from_pretrained(DIR)` load it as it is. Beside
them goes `README.md`, the model card the Hugging Face Hub reads: a YAML header (library, pipeline, base model,
tags, training data, and a `model-index` holding the STS results, which the Hub shows as a results widget) and a
body with the search's answer - how the configuration was chosen, how sure the answer is, and where it came from.

Everything the card says comes from the search's own records: `search_summary.json` through `card_facts`
(raycse/reporting/card_facts.py), the one function that knows the summary's fields, and the parent run's `best.*`
parameters. Nothing is re-measured here.
The folder is built beside DIR and renamed into place, so a failure leaves nothing half-written. `--push-to-hub`
then uploads it with huggingface_hub; without a network that is one error line, the folder kept.
"""
from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raycse.errors import ConfigError, RunFailed, first_line
from raycse.files import replace_directory
from raycse.records import TEST_LABELS
from raycse.reporting.card_facts import CardFacts, card_facts, max_steps_bound
from raycse.reporting.load import latest_summary
from raycse.reporting.tables import fmt, fmt_params, score
from raycse.stats import Interval, format_interval, format_std
from raycse.tracking.stores import resolve_tracking_uri
from raycse.tracking.tracker import Tracker

CHECKPOINT_ARTIFACT = "best_checkpoint"  # the parent run's registered checkpoint (driver/stages/record.py)
CARD_FILE = "README.md"
PACKAGED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # what `--model minilm` is
# The Hub's ids of the data a card names: the bundled corpus is the head of SimCSE's wiki1m
KNOWN_DATASETS = {"wiki-sample": "princeton-nlp/datasets-for-simcse"}
DATA_WORDS = {"wiki-sample": "the bundled Wikipedia sample (the first 11,914 sentences of SimCSE's wiki1m)",
              "sick-train": "NLI-style triplets built from SICK's train split (a demonstration set)"}
# The seven test tasks as the Hub knows them (MTEB's copies of SentEval's sets)
TEST_DATASETS = {"STS12": "mteb/sts12-sts", "STS13": "mteb/sts13-sts", "STS14": "mteb/sts14-sts",
                 "STS15": "mteb/sts15-sts", "STS16": "mteb/sts16-sts", "STSBenchmark": "mteb/stsbenchmark-sts",
                 "SICKRelatedness": "mteb/sickr-sts"}
METRIC = "spearman_cosine"  # sentence-transformers' name for what raycse reports (x100 here, as the papers print)


class HubPushError(RunFailed, OSError):
    """The folder was written but could not be pushed (no network, no token, no permission): exit status 1."""


# ------------------------------------------------------------------------------------------- the facts
@dataclass
class Provenance:
    """Where the model came from, beyond the summary: the MLflow store and run, and the training settings the
    parent run records as `best.*` parameters (strings, as MLflow keeps them)."""

    tracking_uri: str
    parent_run_id: str
    settings: dict[str, str]
    pooler: str | None  # the pooling the checkpoint was saved with (its raycse_pooler.json)


# --------------------------------------------------------------------------------------------- the card
def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table (the Hub renders them); `|` in a cell is escaped."""
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return "\n".join([line(headers), "|" + "---|" * len(headers), *(line(row) for row in rows)])


def hub_model_id(model: str) -> str | None:
    """The base model as the Hub names it, or None for a local directory (the Hub accepts repo ids only)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if model == "minilm":
        return PACKAGED_MODEL
    if Path(model).expanduser().exists() or model.startswith((".", "/", "~")):
        return None
    try:
        validate_repo_id(model)
    except HFValidationError:
        return None
    return model


def training_datasets(settings: dict[str, str]) -> list[str]:
    """The Hub ids of the training data, where it has one: the bundled corpus, or an `hf:NAME` corpus."""
    found = []
    for value in (settings.get("corpus", ""), settings.get("sup_data", "")):
        if value in KNOWN_DATASETS:
            found.append(KNOWN_DATASETS[value])
        elif value.startswith("hf:"):
            found.append(value[3:].split(":", 1)[0])
    return found


def card_data(facts: CardFacts, provenance: Provenance):
    """The YAML header: what the Hub indexes, and the model-index it draws the results widget from (the winner's
    seven test tasks, means over its judging seeds, as `raycse search` prints them)."""
    from huggingface_hub import EvalResult, ModelCardData

    results = []
    seeds = next((figure.get("n") for figure in facts.winner_test.values() if figure and figure.get("n")), None)
    metric_name = f"Spearman (cosine) x100, mean over {counted(seeds, 'seed')}" if seeds else "Spearman (cosine) x100"
    for task, dataset in TEST_DATASETS.items():
        figure = facts.winner_test.get(task)
        if figure and figure.get("mean") is not None:
            results.append(EvalResult(
                task_type="semantic-similarity", task_name="Semantic Similarity", dataset_type=dataset,
                dataset_name=TEST_LABELS[task], dataset_split="test", metric_type=METRIC, metric_name=metric_name,
                metric_value=round(float(figure["mean"]), 2)))
    return ModelCardData(
        language="en", library_name="sentence-transformers", pipeline_tag="sentence-similarity",
        base_model=hub_model_id(facts.base_model), datasets=training_datasets(provenance.settings) or None,
        tags=["sentence-transformers", "sentence-similarity", "feature-extraction", "raycse", facts.family],
        model_name=facts.experiment, eval_results=results or None)


def _figure(figure: dict | None) -> str:
    if not figure or figure.get("mean") is None:
        return "-"
    n = figure.get("n")
    return f"{score(figure['mean'])}" + (f" ± {format_std(figure['std'], n or 3)}" if figure.get("std") is not None
                                         else "") + (f" (n = {n})" if n else "")


def _interval(versus: dict) -> str:
    """`+0.42, 95% interval [+0.10, +0.74], n = 18, df = 17`, as the printed answer has it."""
    return format_interval(Interval(**{k: versus.get(k) for k in ("mean", "std", "n", "df", "low", "high")}))


def _seeds(seeds: list[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else ", ".join(map(str, seeds))


def counted(n: Any, word: str) -> str:
    """`1 seed`, `2 seeds`: a count that agrees in number with its noun."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _method(facts: CardFacts) -> str:
    """How the answer was reached, in the card's words."""
    if not facts.judged:
        return (f"The search stage tried {counted(facts.searched, 'configuration')} (one seed each) and this is its "
                "best; no confirmation stage ran, so nothing judges it (one seed moves STS figures by up to ~2 "
                "points).")
    method, seeds = facts.method, facts.method.get("seeds") or {}
    chosen = (f"the top {method['top_k']} were trained on {counted(method['choose_seeds'], 'fresh seed')} "
              f"({_seeds(seeds.get('choose') or [])}) and the best mean won"
              if method.get("top_k", 1) > 1 else "its first-ranked configuration is the winner")
    return (f"The search stage tried {counted(facts.searched, 'configuration')} (seed {seeds.get('search', '?')}) "
            f"and ranked them on dev; {chosen}. The winner and the published point were then trained on "
            f"{counted(method.get('judge_seeds'), 'further fresh seed')} ({_seeds(seeds.get('judge') or [])}), which "
            "alone give the figures below: no run that chose the winner judges it.")


def _data(settings: dict[str, str]) -> str:
    name = settings.get("sup_data") or settings.get("corpus") or "?"
    shown = name if name.startswith(("http://", "https://", "hf:")) else Path(name).name  # a local file: its name
    words = DATA_WORDS.get(name, f"`{shown}`")
    return words + (f", of which the first {settings['max_sentences']} rows" if settings.get("max_sentences") else "")


def card_body(facts: CardFacts, provenance: Provenance, model_id: str = "PATH_OR_REPO_ID") -> str:
    """The card's Markdown: the model, how to use it, how it was chosen, how sure that is, and where it came from.
    No path of this machine: a card is published, and a local base model is named by its folder's name."""
    s = provenance.settings
    steps = facts.checkpoint.get("steps") or s.get("max_steps") or "?"
    corpus = _data(s)
    text = "\n".join([*_introduction(facts, model_id, steps, corpus), *_how_it_was_chosen(facts),
                      *_test_tasks(facts), *_training(facts, provenance, steps, corpus),
                      *_where_it_came_from(facts, provenance)])
    local = _local_model(facts.base_model)
    return text.replace(facts.base_model, local.name) if local else text


def _local_model(model: str) -> Path | None:
    """A base model named by a path of this machine (not a Hub id, not a bare name), else None."""
    a_path = model.startswith((".", "/", "~")) or "/" in model
    if model == "minilm" or hub_model_id(model) is not None or not a_path:
        return None
    return Path(model).expanduser()


def store_words(uri: str) -> str:
    """A store as a published card names it: a server by its address (a password masked), a local SQLite file or
    folder by its name alone, not by where it lies on this machine."""
    from raycse.tracking.stores import hidden, sqlite_file

    path = sqlite_file(uri)
    if path is not None:
        return f"the SQLite file `{path.name}`"
    if "://" not in uri or uri.startswith("file:"):
        return f"the folder `{Path(uri.removeprefix('file://')).name}`"
    return hidden(uri)


def _introduction(facts: CardFacts, model_id: str, steps: Any, corpus: str) -> list[str]:
    base = hub_model_id(facts.base_model) or facts.base_model
    return [
        f"# {facts.experiment}",
        "",
        f"A [sentence-transformers](https://www.sbert.net) model: `{base}` trained with the **{facts.family}** "
        f"loss ({fmt_params(facts.params) or 'its published hyperparameters'}) on {corpus}, for {steps} steps. "
        f"A raycse search (Ray Tune + Optuna) chose the configuration among {facts.searched}.",
        "",
        *(f"- {line}" for line in facts.answer),
        "",
        facts.whose_test_figures(),
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f"model = SentenceTransformer({model_id!r})",
        'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])',
        "print(model.similarity(embeddings[:1], embeddings[1:]))",
        "```",
        "",
    ]


def _how_it_was_chosen(facts: CardFacts) -> list[str]:
    """The method, the dev figures (which chose, so they judge nothing), what the seeds can resolve, the verdict."""
    published = facts.published or {}
    judged = " over its judging seeds" if facts.judged else " (its one search trial)"
    return [
        "## How it was chosen",
        "",
        _method(facts),
        "",
        markdown_table(["", f"{facts.objective} (dev: the data that chose; shown, not judged)"], [
            [f"the published point ({published.get('family', '-')} {fmt_params(published.get('params') or {})})",
             "this configuration" if facts.is_published else _figure(published)],
            [f"**this configuration** ({facts.family} {fmt_params(facts.params)}){judged}", _figure(facts.winner)],
            ["this configuration − the published point (dev, not judged)",
             "the same configuration" if facts.is_published else
             _interval(facts.versus_published_dev) if facts.versus_published_dev else "-"]]),
        "",
        "Means ± std over seeds (n seeds); the interval is Student-t, 95%, paired by seed. "
        + (f"Seed noise (the pooled within-configuration std): {facts.seed_noise:.2f}, df = {facts.seed_noise_df}"
           + (f"; the smallest difference the judging seeds could detect (80% power): {facts.detectable:.2f}"
              if facts.detectable is not None else "") + "." if facts.seed_noise is not None
           else "No seed noise was measured (no configuration had 2 valid seeds).")
        + (" This search ran on the CPU budget: a demonstration of the mechanism on a small slice of data, not a "
           "decision." if facts.budget == "cpu" else ""),
        "",
        f"**Verdict.** {facts.verdict or 'No verdict was recorded.'}",
        "",
    ]


def _test_tasks(facts: CardFacts) -> list[str]:
    headers, rows, notes = facts.test_table
    if not rows:
        return []
    return ["## The seven STS test tasks", "", markdown_table(headers, rows), "",
            "Spearman correlation x100 of cosine similarities on SentEval's test sets; mean ± std over the "
            "judging seeds. The model-index above holds the winner's row.", "",
            *(line for note in notes for line in (note, ""))]


def _training(facts: CardFacts, provenance: Provenance, steps: Any, corpus: str) -> list[str]:
    s, trial = provenance.settings, facts.checkpoint
    return ["## Training", "", markdown_table(["setting", "value"], [
        ["base model", f"`{facts.base_model}`" + (" (a local directory)" if _local_model(facts.base_model) else "")],
        ["loss", s.get("loss", facts.family) + (f" + {s['reg']}" if s.get("reg") else "")],
        *[[name, fmt(value)] for name, value in facts.params.items()],
        ["training data", corpus],
        ["steps", f"{steps}{max_steps_bound(s, steps)}; this checkpoint is the one at step "
                  f"{trial.get('best_step', '?')}, the best on dev"],
        *[[name, s[name]] for name in ("batch_size", "lr", "max_len", "epochs", "pooler")  # a searched one is above
          if s.get(name) and name not in facts.params and not (name == "epochs" and max_steps_bound(s, steps))],
        ["pooling of this folder", provenance.pooler or "-"],
        ["seed of this checkpoint", str(trial.get("seed", "?"))],
    ]), "", f"This checkpoint is {facts.checkpoint_rule or 'the registered one'}; its own {facts.objective}: "
        f"{score(trial.get('best_objective'))} (trial `{trial.get('trial_id', '?')}`).", ""]


def _where_it_came_from(facts: CardFacts, provenance: Provenance) -> list[str]:
    return ["## Where it came from", "", markdown_table(["", ""], [
        ["search", f"{counted(facts.searched, 'configuration')} searched ({facts.budget} budget)"],
        ["MLflow", f"parent run `{provenance.parent_run_id}` in experiment `{facts.experiment}` "
                   f"({store_words(provenance.tracking_uri)})"],
        ["registered model", f"`{facts.registered_model.get('name', '-')}` version "
                             f"{facts.registered_model.get('version', '-')}"],
        ["Optuna study", f"`{facts.study_name}` in {store_words(facts.optuna_storage)}"],
    ]), ""]


def model_card(facts: CardFacts, provenance: Provenance, model_id: str = "PATH_OR_REPO_ID"):
    """The whole card, as huggingface_hub's ModelCard (its `.content` is what README.md holds)."""
    from huggingface_hub import ModelCard

    header = card_data(facts, provenance).to_yaml()
    return ModelCard(f"---\n{header}\n---\n\n{card_body(facts, provenance, model_id)}")


# ------------------------------------------------------------------------------------------- the folder
@dataclass
class ExportResult:
    folder: Path
    parent_run_id: str
    card: Any  # huggingface_hub.ModelCard
    url: str | None = None  # the Hub repository's, once pushed


def check_target(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ConfigError(f"DIR: {str(out_dir)!r} exists and is not an empty directory")


def export_winner(tracking_uri: str, experiment: str, out_dir: Path, model_id: str | None = None) -> ExportResult:
    """Write the experiment's latest winner to `out_dir` (new or empty): the checkpoint and its README.md, whose
    usage example loads `model_id` (the Hub repository it will be pushed to; default: the folder)."""
    out_dir = Path(out_dir).expanduser()
    check_target(out_dir)
    tracker = Tracker.existing(tracking_uri, experiment)
    parent_run_id, summary = latest_summary(tracker)
    if not summary.get("winner"):
        raise ConfigError(f"the latest search of {experiment!r} (parent run {parent_run_id}) has no winner (no "
                          "configuration finished): there is nothing to export")
    run = tracker.run(parent_run_id)
    settings = {k.removeprefix("best."): v for k, v in run.data.params.items() if k.startswith("best.")}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial", dir=out_dir.parent))
    try:
        try:
            folder = Path(tracker.download_artifact(parent_run_id, CHECKPOINT_ARTIFACT, str(staging)))
        except Exception as err:  # noqa: BLE001 - MLflow raises its own, OSError or a store's error for a missing one
            raise ConfigError(f"the latest search of {experiment!r} (parent run {parent_run_id}) has no "
                              f"{CHECKPOINT_ARTIFACT}/ artifact: {first_line(err)}") from None
        if not (folder / "modules.json").is_file():
            raise ConfigError(f"{CHECKPOINT_ARTIFACT}/ of parent run {parent_run_id} is not a sentence-transformers "
                              "folder (no modules.json)")
        pooler_file = folder / "raycse_pooler.json"
        pooler = json.loads(pooler_file.read_text()).get("pooler") if pooler_file.is_file() else None
        facts = card_facts(summary)
        # the usage example loads the folder by its name (as from beside it), never by this machine's path
        card = model_card(facts, Provenance(tracking_uri, parent_run_id, settings, pooler), model_id or out_dir.name)
        (folder / CARD_FILE).write_text(card.content, encoding="utf-8")
        replace_directory(folder, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(folder=out_dir, parent_run_id=parent_run_id, card=card)


def check_repo_id(repo_id: str) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise ConfigError(f"--push-to-hub: {first_line(err)}") from None
    if "/" not in repo_id:
        raise ConfigError(f"--push-to-hub: {repo_id!r} is not OWNER/NAME")


def push_to_hub(folder: Path, repo_id: str, private: bool = False) -> str:
    """Create the Hub repository if needed and upload the folder; the repository's URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message="raycse export")
    except Exception as err:  # noqa: BLE001 - httpx, huggingface_hub and OS errors all mean "not pushed"
        raise HubPushError(f"--push-to-hub {repo_id}: not pushed ({type(err).__name__}: {first_line(err)}); the "
                           f"folder {str(folder)!r} is complete: push it later with `hf upload {repo_id} "
                           f"{folder}`") from None
    return str(url)


def export_command(experiment: str, tracking_uri: str) -> str:
    """The command that exports a search's winner, as `raycse search` prints it at its end (with --tracking-uri
    only where the search's store is not the one `raycse export` finds by default here)."""
    words = ["raycse", "export", experiment, f"{experiment}-model"]
    try:
        default = resolve_tracking_uri(None)
    except ConfigError:  # a malformed $MLFLOW_TRACKING_URI: the flag then says where the search wrote
        default = None
    if tracking_uri != default:
        words += ["--tracking-uri", tracking_uri]
    return " ".join(shlex.quote(word) for word in words)
