"""What the command line (raycse/cli.py) is built from, below its commands: the flags, made from the Python API's
option tables, TrainConfig's fields and the loss registry, with the parser and the subcommands' --help (`flags`);
the libraries' progress bars and chatter silenced before a command runs (`quiet`).

May import: api (its option tables), settings (TrainConfig), losses (the hyperparameter catalogue) and the leaves.
"""
