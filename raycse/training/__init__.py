"""Training: the loop read top to bottom (`trainer`), one optimiser step (`step_runner`), one step's input
(`batches`), `best/` and `last/` (`checkpoints`), when to compile (`compile_policy`), a large batch's step in chunks
(`grad_cache`), all-gather across workers (`distributed`), one `raycse train` as an MLflow run in process or on Ray
Train workers (`launch`), what `raycse.train` returns (`result`), starting Ray and the TorchTrainer
(`ray_runtime`), and how a run stops on Ctrl-C, SIGTERM or SIGHUP (`stop_signals`: every command's, below the
driver, the comparison and the command line, which use it).

May import: settings, tracking, evaluation, encoder, data, losses and the leaves; never driver, reporting, bench or the
commands. The trainer itself knows nothing of Ray or MLflow: only `launch` and `ray_runtime` do.
"""
