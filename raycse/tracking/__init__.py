"""The stores: the only door to MLflow (`tracker`), store addresses checked before they are opened (`stores`), SQLite
in write-ahead-log mode (`sqlite_wal`), a new SQLite store copied from an empty one (`store_template`), a search's
folder read where it is now (`relocation`), how long the driver's calls to the stores take (`latency`), and a
search's driver sessions with its time spent, as its parent run records them (`sessions`).

May import: settings and the leaves.
"""
