"""Starting Ray the one way raycse does: join the cluster named by RAY_ADDRESS, else start a local one."""
from __future__ import annotations

import os


def start_ray() -> bool:
    """Start (or join) Ray unless it already runs; True if this call started it.

    The workers inherit two settings: tokenizers' own thread pool off (a DataLoader worker forked after the parent
    used it would warn and disable it anyway), and Hugging Face's offline mode as the driver has it (default
    online: users have networks; tests and CI set HF_HUB_OFFLINE=1).
    """
    import ray

    if ray.is_initialized():
        return False
    ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false",
                                       "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0")}})
    return True
