"""The stages of a search, one module each; the conductor (raycse/driver/run.py) lists them in order."""
