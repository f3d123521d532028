"""What the Python API (raycse/api.py) does with its arguments before it starts anything: a search's space and
stores, and a comparison's spaces, checked and resolved (`search`); a training's settings turned into a validated
TrainConfig with its output directory checked, and the training started (`training`); the pooler an evaluation uses
(`evaluation`); a report's and an export's store, folder and options (`finished`). Every mistake is a ConfigError
naming the argument, raised before anything is written.

May import: comparing, driver, exporting, training, tracking, settings, encoder, losses and the leaves; never api,
cli or commands.
"""
