"""Facts: what this host is, collected once per command (the only looking-around planning needs).

* :mod:`.host` — hostname, GPUs (``nvidia-smi``), CPUs, files a platform points to
* :mod:`.net` — interfaces, the route to the master, InfiniBand/RoCE ports, peermem (sysfs)

Planning (:mod:`meshrun.plan`) takes these records as arguments and never collects itself.
"""

from .host import NVIDIA_SMI_QUERY, Gpu, HostFacts, collect, parse_gpu_csv, query_gpus, usable_cpus

__all__ = ["NVIDIA_SMI_QUERY", "Gpu", "HostFacts", "collect", "parse_gpu_csv", "query_gpus",
           "usable_cpus"]
