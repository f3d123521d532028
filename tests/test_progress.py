"""A search's progress as a person sees it: a live status line on a terminal, plain lines in a pipe.

The figures are checked on `SearchProgress` fed as the conductor and Tune's callback feed it (Tune's trials are
stand-ins with the three attributes the display reads). Then a tiny search runs in a real terminal - tmux - and its
screen is read with `capture-pane` while it runs: the status line with the trial count and the estimated time
left sits under the trial lines, and never enters the scrollback. The same search's winner is then exported, and
the exported folder scores what its checkpoint scored (one tiny search serves both: the machine has 2 cores).
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from raycse.driver import progress
from raycse.driver.progress import CLEAR_LINE, SearchProgress, short_duration


@dataclass
class Trial:
    """What the display reads of a Tune trial."""

    trial_id: str
    status: str = "PENDING"
    last_result: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_durations_read_as_a_person_writes_them():
    assert [short_duration(s) for s in (0, 45.4, 192, 3900)] == ["0s", "45s", "3m12s", "1h05m"]


def test_the_figures_of_the_status_line():
    clock = Clock()
    shown = SearchProgress(io.StringIO(), live=False, started_at=clock.now - 30, clock=clock)
    shown.stage("search")
    shown.plan(4)
    trials = [Trial("a", "RUNNING"), Trial("b")]
    shown.seen(trials, started=trials[0])
    assert shown.text() == "search | 0/4 trials done, 1 running | 30s elapsed | time left: estimating"
    clock.now += 10
    shown.reported("a", step=8, total_steps=16, best=80.5)
    # a: 8 of its 16 steps in 10 s, so 10 s left; the 3 trials to come take 20 s each, one at a time so far
    assert shown.remaining() == pytest.approx(70.0)
    trials[1].status = "RUNNING"
    shown.seen(trials, started=trials[1])  # two at once: the slots the stage has
    assert shown.remaining() == pytest.approx(10.0 + 20.0 + 10.0)  # b and the 2 to come share the 2 slots with a
    clock.now += 10
    shown.reported("a", step=16, total_steps=16, best=81.25)
    trials[0].status, trials[0].last_result = "TERMINATED", {"best_objective": 81.25}
    shown.seen(trials, ended=trials[0])
    assert shown.text() == ("search | 1/4 trials done, 1 running | best 81.25 | 50s elapsed | "
                            "about 30s left in this stage")  # b has 10 s of its 20 s left, then one more
    shown.reported("b", step=4, total_steps=16, best=float("nan"))  # a diverged evaluation is no best
    assert shown.best == 81.25
    shown.stage("judge")  # one run's dev figure decides nothing here: no best
    shown.plan(2)
    shown.reported("c", step=8, total_steps=16, best=90.0)
    assert "best" not in shown.text()
    shown.stage("test")  # a stage without trials: its name and the clock only
    assert shown.text() == "test | 50s elapsed"


def test_plain_lines_in_a_pipe():
    out = io.StringIO()
    clock = Clock()
    shown = SearchProgress(out, live=False, started_at=clock.now, clock=clock)
    shown.stage("confirm")
    shown.plan(2)
    trials = [Trial("a", "RUNNING"), Trial("b", "RUNNING")]
    shown.seen(trials)
    clock.now += 20
    shown.reported("a", step=16, total_steps=16, best=81.0)
    shown.reported("b", step=8, total_steps=16, best=80.0)
    trials[0].status = "TERMINATED"
    shown.seen(trials, ended=trials[0])
    assert out.getvalue() == "confirm | 1/2 trials done, 1 running | 20s elapsed | about 20s left in this stage\n"
    assert "\x1b" not in out.getvalue()


def test_a_trials_finished_line_comes_before_the_count_it_makes(tmp_path, tiny_bert_dir):
    """In a pipe, "1/2 trials done" follows the line of the trial that ended ("trial a  finished: ..."), which Tune's
    callback writes once MLflow holds the trial's end, never before it."""
    from raycse.driver.tune.callback import MlflowSearchCallback
    from raycse.settings.space import load_space
    from raycse.tracking.tracker import Tracker

    space_file = tmp_path / "space.yaml"
    space_file.write_text(f"experiment: order\nmodel: {tiny_bert_dir}\nloss: simcse\n"
                          "space: {tau: {type: uniform, low: 0.03, high: 0.1}}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = Tracker(uri, "order").start_run("order")
    out = io.StringIO()
    with progress.displayed(stream=out) as shown:
        shown.stage("search")
        shown.plan(2)
        callback = MlflowSearchCallback(uri, "order", parent, load_space(space_file),
                                        log=lambda line: out.write(line + "\n"))
        trials = [Trial("a", "RUNNING", config={"tau": 0.05}), Trial("b", "RUNNING", config={"tau": 0.06})]
        for trial in trials:
            callback.on_trial_start(0, trials, trial)
        trials[0].status = "TERMINATED"
        trials[0].last_result = {"step": 16, "total_steps": 16, "best_objective": 81.0}
        callback.on_trial_complete(0, trials, trials[0])
        callback.on_experiment_end(trials)  # every write done
    lines = out.getvalue().splitlines()
    finished = lines.index("trial a  finished: best objective 81.00")
    counted = next(i for i, line in enumerate(lines) if line.startswith("search | 1/2 trials done"))
    assert finished < counted, lines


# ----------------------------------------------------------------------------- the estimate, on recorded timings
RECORDED = (Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "quick-start-cpu" / "2026-11-26-cpu2"
            / "trials.json")


def replayed_estimates(stage: str):
    """The stage's recorded trials (their starts, evaluations with their timings, and ends) fed to the status line
    in the order they happened: (event, the time truly left, the estimate) after each."""
    trials = json.loads(RECORDED.read_text())["stages"][stage]
    events = [(t["started_at"], 0, "start", t, None) for t in trials]
    events += [(r["at"], 1, "report", t, r) for t in trials for r in t["reports"]]
    events += [(t["ended_at"], 2, "end", t, None) for t in trials]
    events.sort(key=lambda e: (e[0], e[1]))
    end, clock = max(t["ended_at"] for t in trials), Clock()
    clock.now = events[0][0]
    shown = SearchProgress(io.StringIO(), live=False, started_at=clock.now, clock=clock)
    shown.stage(stage)
    shown.plan(len(trials), tests=sum(t["scores_test"] for t in trials))
    tune = {t["trial_id"]: Trial(t["trial_id"], config={"raycse_trial": {"sampled": {}, "seed": 43, "stage": stage,
                                                                         "test": t["scores_test"]}})
            for t in trials}
    seen = []
    for at, _, event, trial, report in events:
        clock.now, tune_trial = at, tune[trial["trial_id"]]
        if event == "start":
            tune_trial.status = "RUNNING"
            seen.append(tune_trial)
            shown.seen(seen, started=tune_trial)
        elif event == "report":
            shown.reported(trial["trial_id"], report["step"], report["total_steps"], None)
            tune_trial.last_result = {"step": report["step"], "trial_eval_s": report["eval_s"]}
        else:
            tune_trial.status = "TERMINATED"
            shown.seen(seen, ended=tune_trial)
        yield f"{event} {trial['trial_id']}", end - at, shown.remaining()


def test_the_judging_stages_time_left_counts_its_test_scoring():
    """The CPU main job's judging stage (two runs at once, two of the four scoring the seven test tasks, about 92 s
    each): from the first evaluation on, the estimate is within a fifth of the time truly left, plus 10 s. The
    estimate that counted trials by their steps alone said "about 44s left" with 130 s to go."""
    replay = list(replayed_estimates("judge"))
    first = next(i for i, (event, _, _) in enumerate(replay) if event.startswith("report"))
    for event, truth, estimate in replay[first:]:
        assert estimate is not None and abs(estimate - truth) <= 0.2 * truth + 10, (event, truth, estimate)
    ended_first = next((truth, estimate) for event, truth, estimate in replay if event.startswith("end"))
    assert ended_first[0] > 120 and ended_first[1] > 120  # 1/4 done, 130 s to go


def test_the_search_stages_time_left_is_never_short():
    """The same search's search stage (ASHA stops nothing early there: every trial runs its 16 steps): from the first
    evaluation on, the estimate never falls short of the time left by more than a fifth, plus 10 s."""
    replay = list(replayed_estimates("search"))
    first = next(i for i, (event, _, _) in enumerate(replay) if event.startswith("report"))
    for event, truth, estimate in replay[first:]:
        assert estimate is not None and estimate >= 0.8 * truth - 10, (event, truth, estimate)


def test_lines_printed_while_shown_go_above_the_status_line(monkeypatch):
    terminal = io.StringIO()
    monkeypatch.setattr(terminal, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    with progress.displayed(stream=terminal) as shown:
        assert shown.live and sys.stdout is not terminal
        shown.stage("search")
        progress.plan_trials(3)
        print("trial a  search  step 2")
    text = terminal.getvalue()
    # each line is written after the status line is cleared, and the status line is drawn again under it
    assert f"{CLEAR_LINE}trial a  search  step 2\n{CLEAR_LINE}search | 0/3 trials done" in text
    assert text.endswith(CLEAR_LINE)  # and nothing of it is left once the block ends
    assert progress._shown is None


# ------------------------------------------------------------------------------------- a real terminal
SPACE = """\
experiment: tiny-progress
model: {model}
loss: focal
train: {{batch_size: 8, max_steps: 4, eval_steps: 2, max_sentences: 160, lr: 1.0e-4}}
space:
  tau: {{type: loguniform, low: 0.02, high: 0.2}}
  m: {{type: uniform, low: 0.0, high: 0.6}}
published: {{tau: 0.07, m: 0.3}}
search: {{num_samples: 3, seed: 0, test_eval: none, scheduler: {{name: fifo}}}}
resources: {{workers: 1, cpus_per_worker: 2}}
"""
STATUS = re.compile(r"^search \| (\d)/3 trials done(, 1 running)?( \| best \d+\.\d\d)? \| \S+ elapsed \| "
                    r"(about (\S+) left in this stage|time left: estimating)$")
EXIT = "RAYCSE-EXIT="


def _tmux() -> str:
    binary = shutil.which("tmux")
    if binary is None:
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail("CI is set but tmux is not on PATH: .ci/run installs Debian's tmux")
        pytest.skip("no tmux on PATH (Debian: apt-get install tmux); CI runs this test")
    return binary


@pytest.fixture(scope="module")
def searched_in_tmux(tmp_path_factory, tiny_bert_dir):
    """A tiny search run in a 160 x 40 tmux pane; every screen seen while it ran, and the whole scrollback."""
    tmux = _tmux()
    tmp = tmp_path_factory.mktemp("tmux-search")
    space = tmp / "space.yaml"
    space.write_text(SPACE.format(model=tiny_bert_dir))
    uri = f"sqlite:///{tmp}/mlflow.db"
    command = (f"{sys.executable} -m raycse search --space {space} --tracking-uri {uri} --storage-path {tmp}/ray "
               f"--no-confirm; echo {EXIT}$?; sleep 900")
    socket = f"raycse-test-{os.getpid()}"  # a tmux server of this test's own, started with this environment
    tmux_cmd = [tmux, "-L", socket, "-f", "/dev/null"]
    # pytest-xdist's workers set COLUMNS=80 and LINES=24, which would win over the pane's 160 columns and cut the
    # status line at 79 characters ("about 1m12s le")
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    env["TERM"] = os.environ.get("TERM") or "xterm"
    subprocess.run([*tmux_cmd, "new-session", "-d", "-s", "search", "-x", "160", "-y", "40", "-c", str(tmp),
                    command], check=True, env=env)
    screens = []
    try:
        deadline = time.monotonic() + 840
        while time.monotonic() < deadline:
            screen = subprocess.run([*tmux_cmd, "capture-pane", "-p", "-t", "search"], capture_output=True,
                                    text=True, check=True).stdout
            screens.append(screen)
            if EXIT in screen:
                break
            time.sleep(0.5)
        history = subprocess.run([*tmux_cmd, "capture-pane", "-p", "-J", "-S", "-", "-t", "search"],
                                 capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run([*tmux_cmd, "kill-server"], check=False)
    return {"tmp": tmp, "uri": uri, "screens": screens, "history": history}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_search_on_a_terminal_shows_a_status_line(searched_in_tmux):
    history = searched_in_tmux["history"]
    assert f"{EXIT}0" in history, history[-3000:]
    midway = []  # screens of the search stage under way, with an estimate of the time left
    for screen in searched_in_tmux["screens"]:
        lines = [line.rstrip() for line in screen.splitlines() if line.strip()]
        match = STATUS.match(lines[-1]) if lines else None
        if match and match.group(5) and int(match.group(1)) < 3:
            midway.append(lines)
    bottoms = list(dict.fromkeys(screen.rstrip().splitlines()[-1] for screen in searched_in_tmux["screens"]
                                 if screen.strip()))
    assert midway, f"no screen showed the status line with an estimated time left while trials ran: {bottoms[-12:]}"
    # the status line is the bottom line, once: the log lines (trial lines, and the driver's own, such as the
    # baseline's, which may come last for a moment) scroll above it
    trial_line = re.compile(r"^trial \S+\s+(search\s+focal|finished: best objective)")
    for lines in midway:
        assert not [line for line in lines[:-1] if STATUS.match(line)], lines[-3:]
    assert any(trial_line.match(lines[-2]) for lines in midway), [lines[-3:] for lines in midway]
    # the scrollback keeps every trial line and no status line; the answer follows, then the export command
    kept = history.splitlines()
    assert not [line for line in kept if " elapsed | " in line or "trials done" in line]
    assert sum(1 for line in kept if re.match(r"^trial \S+\s+finished: best objective", line)) == 3
    assert any(line.startswith("Export the winner with its model card: raycse export tiny-progress ")
               for line in kept)


@pytest.mark.slow
def test_the_exported_winner_scores_what_its_checkpoint_scored(searched_in_tmux):
    import torch
    from mlflow.tracking import MlflowClient
    from sentence_transformers import SentenceTransformer
    from sts_reference import stsb_dev

    from raycse.cli import main
    from raycse.encoder.model import EVAL_BATCH_TOKENS

    tmp, uri = searched_in_tmux["tmp"], searched_in_tmux["uri"]
    assert f"{EXIT}0" in searched_in_tmux["history"]
    client = MlflowClient(tracking_uri=uri)
    [parent] = client.search_runs([client.get_experiment_by_name("tiny-progress").experiment_id],
                                  filter_string="tags.`raycse.search` LIKE '%'")
    summary = json.loads(Path(client.download_artifacts(parent.info.run_id, "search_summary.json",
                                                        str(tmp))).read_text())
    registered = next(t for t in summary["trials"] if t["trial_id"] == parent.data.tags["raycse.best_trial"])
    assert main(["export", "tiny-progress", str(tmp / "exported"), "--tracking-uri", uri]) == 0
    model = SentenceTransformer(str(tmp / "exported"), device="cpu")

    def in_raycses_batches(sentences):
        # The same sentences padded together as in raycse's evaluation (longest first, as many a batch as fit the
        # CPU's padded-token budget), so the vectors agree to the last bit and the figure to 1e-6; other batches
        # change them by rounding, which can reorder a random tiny model's nearly tied cosines.
        counts = [len(ids) for ids in model.tokenizer(sentences, truncation=True)["input_ids"]]
        order = sorted(range(len(sentences)), key=lambda i: counts[i], reverse=True)
        vectors = torch.empty(len(sentences), model.get_sentence_embedding_dimension())
        start = 0
        while start < len(order):
            rows = order[start:start + max(1, EVAL_BATCH_TOKENS["cpu"] // counts[order[start]])]
            vectors[rows] = torch.from_numpy(model.encode([sentences[i] for i in rows], batch_size=len(rows)))
            start += len(rows)
        return vectors

    dev = stsb_dev(in_raycses_batches)
    assert dev == pytest.approx(registered["best_objective"], abs=1e-6)
