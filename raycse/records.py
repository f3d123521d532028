"""The run vocabulary: every name that leaves a process, stated once.

MLflow tags and metric names, the keys of the results a trial reports to Tune, the statuses a trial can end in,
the stages of a search, the STS task lists and the timing keys. Every module that writes or reads one of these
names imports it from here, so that a run written by `raycse search` and read by `raycse report` (or by a user's
own MLflow query) agree by construction. A leaf: it imports nothing of raycse.
"""
from __future__ import annotations

# ---------------------------------------------------------------------------------------------- MLflow tags
PARENT_RUN_TAG = "mlflow.parentRunId"  # MLflow's own: a child run's parent
SEARCH_TAG = "raycse.search"  # on a search's parent run: the search's name
PATH_TAG = "raycse.experiment_path"  # on the parent run: where Tune keeps the search's state (finds it on --resume)
BUDGET_TAG = "raycse.budget"  # on the parent run: cpu | full
RANKING_TAG = "raycse.ranking"  # on the parent run: the search stage's ranking, JSON (kept for --resume)
WINNER_TAG = "raycse.winner"  # on the parent run: the winner's configuration key, once chosen
BASELINE_TAG = "raycse.baseline"  # on the parent run: the untouched model's scores, JSON (kept for --resume)
BEST_TRIAL_TAG = "raycse.best_trial"  # on the parent run: the trial whose checkpoint was registered
BEST_CHECKPOINT_TAG = "raycse.best_checkpoint"  # on the parent run: that checkpoint's path
# on the parent run: the driver session now running, or the last (JSON: its command's start, the sessions before it,
# its process and command line; raycse/tracking/sessions.py), and how that session ended without an answer (JSON:
# stopped by a signal, or failed; when, and the time spent by then), removed when a session starts
SESSION_TAG = "raycse.session"
ENDED_TAG = "raycse.ended"
TRIAL_TAG = "raycse.trial_id"  # on a child run: its Ray trial id (also the Optuna trial's `ray_trial_id`)
STAGE_TAG = "raycse.stage"  # on a child run: one of STAGES
SEED_TAG = "raycse.seed"  # on a child run: the training seed
CONFIG_KEY_TAG = "raycse.config_key"  # on a child run: its configuration, seed excluded (seeds of one share it)
STATUS_TAG = "raycse.status"  # on a child run: one of the statuses below
STEPS_TAG = "raycse.steps"  # on a child run: the training steps it took
CHECKPOINT_TAG = "raycse.checkpoint"  # on a child run: its last Tune checkpoint (best/ inside)
ERROR_TAG = "raycse.error"  # on a failed or diverged run: the reason, one line
OUTPUT_DIR_TAG = "raycse.output_dir"  # on a `raycse train` run: its output directory (finds it on --resume)
LOSS_TAG = "raycse.loss"  # on a `raycse train` run: the loss
# on a search's parent run and on each trial run of a user's own loss: the SHA-256 of the loss's file, one tag per loss
# (raycse.loss_sha256.<loss name>), so that a run says which version of the file it trained
LOSS_HASH_TAG_PREFIX = "raycse.loss_sha256."
COMPARE_TAG = "raycse.compare"  # on a comparison's parent run (`raycse compare`): the comparison's name
COMPARE_LOSS_TAG = "raycse.compare_loss"  # on a comparison's child run: the loss it stands for (its space's name)
LOSS_SEARCH_TAG = "raycse.loss_search"  # on a comparison's child run: the experiment of that loss's search
LOSS_PARENT_RUN_TAG = "raycse.loss_parent_run"  # on a comparison's child run: that search's parent run

LOSS_ENTRY_POINTS = "raycse.losses"  # the entry-point group in which an installed distribution declares its losses

TRAIN_EXPERIMENT = "raycse-train"  # the MLflow experiment of `raycse train`
RAY_TRIAL_ID = "ray_trial_id"  # the Optuna user attribute holding a trial's Ray trial id

# ------------------------------------------------------------------------------------------------ stages
# stage 0 (DCLR's complementary model), the search (ranks), the choosing block (picks the winner among the top
# ranked), the judging block (the winner and the published point on fresh seeds: the answer's figures)
STAGE0, SEARCH, CHOOSE, JUDGE = "stage0", "search", "choose", "judge"
STAGES = (STAGE0, SEARCH, CHOOSE, JUDGE)

# ---------------------------------------------------------------------------------------------- statuses
RUNNING = "running"
FINISHED = "finished"
STOPPED = "stopped early (ASHA)"
FAILED = "failed"
DIVERGED = "diverged"
LOST = "lost"  # a run whose trial a kill took before Tune recorded it; deleted on --resume

# ----------------------------------------------------------------------------- what a trial reports to Tune
OBJECTIVE = "objective"  # the development objective of the evaluation reported; drives ASHA and Optuna
BEST_OBJECTIVE = "best_objective"
BEST_STEP = "best_step"
STEP = "step"  # the training step of the evaluation reported (ASHA's time attribute)
TOTAL_STEPS = "total_steps"  # the steps the trial will take in all (how far along it is, for the status line)
TRAIN_LOSS = "train_loss"
SENTENCES_PER_S = "sentences_per_s"
COMPILE_DECISION = "compile_decision"
FINAL = "final"  # 1 on a finished trial's last report (its best objective and test figures)
DIVERGED_KEY = "diverged"  # 1 when the loss went non-finite
ERROR = "error"
REPLAYED = "replayed"  # 1 on the replayed result of a trial MLflow already holds as finished
SET_ASIDE = "set_aside"  # on a trial's first report after its checkpoint could not be read: the file, and why
CHECKPOINT_PATH = "checkpoint_path"  # a replayed result's checkpoint
TRIAL_ID = "trial_id"
BASELINE_OBJECTIVE = "baseline_objective"  # metric on the parent run
BEST_OBJECTIVE_STD = "best_objective_std"  # metric on the parent run: the winner's std over its judging seeds
WINNER_MINUS_PUBLISHED = "winner_minus_published"  # metric on the parent run: the judged figure's paired difference

DIFF_PREFIX = "diff/"  # metrics on a comparison's parent run: diff/A - B, the paired difference on the test average

# A loss's own statistics (DCLR's removed fraction, say) under one namespace, so that both commands log any
# loss's statistics without a list of names to keep up to date.
LOSS_STAT_PREFIX = "loss/"


def loss_stat(name: str) -> str:
    return f"{LOSS_STAT_PREFIX}{name}"


def loss_hash_tag(loss: str) -> str:
    """The tag holding the SHA-256 of a user's loss file, by the loss's declared name."""
    return f"{LOSS_HASH_TAG_PREFIX}{loss}"


# ------------------------------------------------------------------------------------------- STS tasks
STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")
SEVEN_TASKS = (*STS_YEARS, "STSBenchmark", "SICKRelatedness")
TEST_KEYS = (*SEVEN_TASKS, "avg")  # the seven test tasks and their plain mean, the papers' "Avg."
TEST_LABELS = {**{year: year for year in STS_YEARS}, "STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R",
               "avg": "Avg."}  # the papers' Table 2 column names
DEV_FIGURES = ("stsb_dev", "sickr_dev", "dev_file")  # the parts an objective can be made of
# what a trial's best checkpoint is scored on at the end: the test tasks, SICK-R dev, alignment and uniformity
FINAL_KEYS = (*TEST_KEYS, "sickr_dev", "alignment", "uniformity")

# ------------------------------------------------------------------------------------------------ timings
# a trial's seconds by what they were spent on, cumulative over the trial (summed over trials on the parent run)
TRIAL_STARTUP, TRIAL_COMPILE, TRIAL_TRAIN, TRIAL_EVAL, TRIAL_CHECKPOINT = TRIAL_TIMING_KEYS = (
    "trial_startup_s", "trial_compile_s", "trial_train_s", "trial_eval_s", "trial_checkpoint_s")
# the search's time spent (raycse/tracking/sessions.py): its driver sessions' seconds to the answer, summed
TOTAL_TIME = "time_total_s"
EARLIER_SESSIONS = "time_earlier_sessions_s"  # of it, the sessions before this one (a resumed search's)
AFTER_ANSWER_PREFIX = "after_answer_"  # a driver phase after the answer (the report page): after_answer_<phase>_s
SLOT_UTILISATION = "slot_utilisation"
CONCURRENT_SLOTS = "concurrent_slots"
# the search stage's trials running at once, from their start and end times (raycse/driver/concurrency.py)
SEARCH_MEAN_RUNNING = "search_mean_running"  # over the stage
SEARCH_MEAN_RUNNING_STARTING = "search_mean_running_starting"  # while trials remained to start
SEARCH_SLOT_USE = "search_slot_use"  # the latter over the slots
TRIAL_STARTED_AT = "trial_started_at"  # in every report: the wall-clock time (time.time()) the trainable started
REPORTED_AT = "reported_at"  # in every report: the wall-clock time of the report
TRIAL_PROCESS = "trial_process_id"  # in every report: the process id of the one that trains (a warm worker's)


def phase_key(phase: str) -> str:
    """The metric of a driver phase's wall-clock seconds: time_<phase>_s."""
    return f"time_{phase}_s"


def after_answer_key(phase: str) -> str:
    """The metric of a driver phase's seconds after the answer (not in the time spent): after_answer_<phase>_s."""
    return f"{AFTER_ANSWER_PREFIX}{phase}_s"


def phase_of(key: str) -> str | None:
    """The phase a timing metric of the time spent names ('earlier sessions' for the sessions before this one), or
    None when it names none (the total included)."""
    if key.startswith("time_") and key.endswith("_s") and key != TOTAL_TIME:
        return key[len("time_"):-len("_s")].replace("_", " ")
    return None


def after_answer_phase(key: str) -> str | None:
    """The phase that an after-answer timing metric names, or None."""
    if key.startswith(AFTER_ANSWER_PREFIX) and key.endswith("_s"):
        return key[len(AFTER_ANSWER_PREFIX):-len("_s")]
    return None


def trial_timing_label(key: str) -> str:
    """'trial_train_s' -> 'train'."""
    return key[len("trial_"):-len("_s")]
