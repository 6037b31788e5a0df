"""meshrun: one unchanged command on every node.

``import meshrun`` is cheap and never imports torch; the launcher and the
worker-side helpers import it only when they run.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "arrive", "destroy_process_group", "init_distributed", "log",
           "progress"]


def __getattr__(name: str):  # meshrun.init_distributed: imports meshrun.worker.dist on first use
    if name == "init_distributed":
        from .worker.dist import init_distributed

        return init_distributed
    if name == "progress":  # meshrun.progress(step): no torch until the first report
        from .worker.progress import progress

        return progress
    if name == "destroy_process_group":  # leave the job with every rank (gloo's exit race)
        from .worker.leave import destroy_process_group

        return destroy_process_group
    if name == "log":  # meshrun.log({...}, step=N): a script's figures in metrics.jsonl
        from .worker.metrics import log

        return log
    if name == "arrive":  # meshrun.arrive(): the step's own work is done (stragglers)
        from .worker.progress import arrive

        return arrive
    raise AttributeError(f"module 'meshrun' has no attribute {name!r}")
