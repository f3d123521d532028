"""A warm worker's garbage collection after each trial (raycse/driver/tune/warm_workers.py, `_release_memory`), with
what its imports made counted (before) and frozen (after: gc.freeze once the imports are done). Prints the objects
the collector tracks and the seconds of 5 collections each way.

    python benchmarks/scripts/gc_collect.py
"""
import gc
import time

# a warm worker's imports, as WarmWorker.__init__ has them
import raycse.driver.tune.trial_training
import raycse.training.trainer  # noqa: F401


def seconds() -> list[float]:
    spans = []
    for _ in range(5):
        started = time.perf_counter()
        gc.collect()
        spans.append(round(time.perf_counter() - started, 4))
    return spans


print(f"tracked objects: {len(gc.get_objects())}")
print(f"gc.collect(), the imports counted: {seconds()} s")
gc.freeze()
print(f"gc.collect(), the imports frozen ({gc.get_freeze_count()} objects): {seconds()} s")
