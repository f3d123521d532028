"""The stores: the only door to MLflow (`tracker`), store addresses checked before they are opened (`stores`), SQLite
in write-ahead-log mode (`sqlite_wal`), a search's folder read where it is now (`relocation`), and how long the
driver's calls to the stores take (`latency`).

May import: settings and the leaves.
"""
