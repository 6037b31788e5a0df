"""The catalog: every known failure, as data a contributor extends without reading the
engine (docs/diagnose.md, "Adding a signature"). Each entry gives a code, a summary, regexes,
a cause and a fix (text, or a function of :mod:`.causes` when they read the message), a
tier and what it matches in words. Checked when loaded (:func:`_check_catalog`): codes
kebab-case, every regex with a literal every match contains, known tiers, suppressed codes
that exist. This module is longer than the others because it is a table: one entry per
failure or wording of one, ~160 of them."""

from __future__ import annotations

import re

from .causes import (
    HANG_RE,
    NODE_LOST_RE,
    abi_cause,
    arch_cause,
    barrier_cause,
    barrier_fix,
    barrier_priority,
    bootstrap_cause,
    cpu_torch_cause,
    cpu_torch_fix,
    device_mismatch_cause,
    dns_cause,
    download_cause,
    driver_cause,
    dup_gpu_cause,
    early_barrier_cause,
    hang_expand,
    host_launcher_context,
    ifname_cause,
    killed_by,
    lightning_arg_cause,
    lightning_arg_fix,
    local_rank_cause,
    meshrun_fix,
    mismatch_cause,
    module_cause,
    multinomial_cause,
    nccl_detail,
    nccl_last_error,
    nccl_not_built_cause,
    nccl_versions,
    nccl_versions_differ,
    node_lost_cause,
    only_when_raised,
    oom_cause,
    oom_fix,
    port_cause,
    said,
    space_cause,
    spawn_pickle_cause,
    time_limit_cause,
    toolkit_cause,
    unless_warning,
    watchdog_cause,
)
from .records import ADVICE, EFFECT, FAULT, LOST, SETUP, Signature, sig

# --- the catalog ------------------------------------------------------------------------------

_NCCL_DEBUG = "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read the first 'NCCL WARN'"
_PEERS_FIRST = ("this rank is a victim: look for the first failure on the other ranks "
                "(meshrun diagnose over every node's and rank's log)")

#: torch.distributed's names every build with it has: missing, the build has none
_DIST_BASICS = (r"(?:init_process_group|is_initialized|get_rank|get_world_size|barrier|"
                r"all_reduce|broadcast|new_group|ReduceOp)'")
_LOW_PORT = r"(?P<port>\d{1,3}|10[01]\d|102[0-3])"   # 0-1023: only root may listen there


_NO_TOOLKIT = ("a package built a CUDA extension (torch.utils.cpp_extension: its setup.py, "
               "such as DeepSpeed's, apex's or flash-attn's, or a JIT load at run time) and "
               "found no CUDA compiler: CUDA_HOME is not set, or names a CUDA folder without "
               "nvcc (a runtime-only image, conda's cudatoolkit), and no nvcc is on PATH; the "
               "NVIDIA driver and torch's own CUDA libraries do not include the compiler")
_NO_TOOLKIT_FIX = ("install the CUDA toolkit of the CUDA version torch was built with (python "
                   "-c 'import torch; print(torch.version.cuda)'), or use an image that has it "
                   "(a -devel image), then export CUDA_HOME=/usr/local/cuda-X.Y (its bin/nvcc "
                   "must exist) and build again")
#: a download in the log (the HTTP client's name lookup failed for it)
_DOWNLOADING = re.compile(r"torchvision|torch[/\\.]hub|huggingface|from_pretrained|"
                          r"pretrained=True|[Dd]ownload|urlretrieve")
_SPAWN_PICKLE_FIX = ("define it at module level in a file the workers import (not inside a "
                     "function, __init__, the main guard or a notebook cell); or start the "
                     "ranks with a launcher (meshrun run, torchrun, Lightning's "
                     "strategy='ddp') instead of spawning them from the script")
#: a loader unpickling a file (what it finds missing is the saving script's, not spawn's)
_LOADING = re.compile(r"torch[/\\]serialization\.py|joblib|pickle\.load\(|torch\.load\(")
_CUT_SHORT = ("a checkpoint file is incomplete: its save was cut short (the disk filled, the "
              "process was killed while writing, a copy or download did not finish), so the "
              "loader met its end early (a zip checkpoint keeps its directory there)")
_CUT_SHORT_FIX = ("resume from the previous checkpoint (move the broken file away); write "
                  "checkpoints to a temporary name and rename them when whole (meshrun's recipes "
                  "do), and check the free space where they go (df -h)")
#: DDP's refusal of a module not on one GPU, up to the set of its parameters' devices
_DDP_DEVICE_IDS = (r"only work with single-device/multiple-device GPU modules or CPU modules, "
                   r"but got device_ids \[[^\]]*\], output_device \S+, and module parameters ")
_ABI_FIX = ("reinstall that package against this torch (pip install --force-reinstall "
            "--no-build-isolation PACKAGE), or install the torch it was built for; use one "
            "image on every node")
_DS_NO_NVCC = ("DeepSpeed builds its CUDA ops (fused Adam, ...) on first use and found no CUDA "
               "toolkit (nvcc, CUDA_HOME): a runtime-only image or a CPU machine")
_DS_NO_NVCC_FIX = ("use an image with the CUDA toolkit (a -devel CUDA image) and CUDA_HOME set, "
                   "or install DeepSpeed with its ops prebuilt (DS_BUILD_OPS=1 pip install "
                   "deepspeed on a machine with nvcc), or pick optimizers that need no op "
                   "(torch's AdamW)")


def launcher_cause(hit) -> str:
    return (f"the script reads {hit.group('var')}, which a launcher sets for every process "
            "(torchrun, meshrun run), but it was started without one (python train.py), "
            "or the launcher's environment did not reach it")


LAUNCHER_FIX = ("start it through a launcher: meshrun run -- train.py (it sets RANK, "
                      "LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every worker), "
                      "or meshrun simulate to try several nodes on one machine")


CHECKPOINT_RACE_FIX = ("do the checkpoint clean-up and renames on one process only (if "
                       "global rank 0; on a shared filesystem not each node's local rank 0; "
                       "HF Trainer: save_on_each_node=False)")


CATALOG: tuple[Signature, ...] = (
    # -- setup ------------------------------------------------------------------------------
    sig("preflight-mismatch", "nodes differ (preflight)",
         [r"meshrun: error: preflight: (?P<summary>[^;]+)",
          r"meshrun: error: required path (?P<path>\S+) does not exist on this node"],
         lambda h: (f"meshrun's preflight found that {h.group('summary').strip()}; no worker was "
                    "started" if h.group("summary") else
                    f"the required path {h.group('path')} is missing on this node"),
         meshrun_fix("make the nodes identical (same image, same code), or --no-preflight"),
         SETUP, "meshrun's `meshrun: error: preflight: ...` and missing `--require-path` lines"),
    sig("torch-missing", "torch is not installed",
         [r"No module named '?torch'?(?=[\s')]|$)",
          # python -m torch.distributed.run under another interpreter (sudo's, the system's)
          r"^\S*python[\d.]*: No module named torch\.distributed\s*$"],
         "the Python that runs this rank has no torch: a different interpreter, virtualenv or "
         "image than the one meshrun was installed in",
         "install torch in the environment meshrun runs from (python -m pip install torch), or "
         "activate the same environment on every node; workers use meshrun's own interpreter",
         SETUP, "`ModuleNotFoundError: No module named 'torch'`",
         suppresses=("python-module-missing",)),
    sig("numpy-version-mismatch", "numpy too new for this torch",
         [r"compiled using NumPy 1\.x cannot be run in",
          r"_ARRAY_API not found"],
         "numpy 2 is installed but this torch (or another extension) was built against numpy "
         "1.x: torch cannot use numpy (\"Numpy is not available\", \"Failed to initialize "
         "NumPy\"), and torch.distributed's object collectives fail",
         "install a numpy the build supports (python -m pip install 'numpy<2'), or a torch "
         "built for numpy 2 (torch >= 2.3); the same on every node",
         unless_warning(SETUP), "`A module that was compiled using NumPy 1.x cannot be run "
         "in NumPy 2`, `_ARRAY_API not found` (advice only in a warning)",
         suppresses=("numpy-missing", "numpy-unusable")),
    sig("numpy-too-old-for-torch", "numpy older than an extension's build",
         [r"module compiled against API version (?P<built>0x[0-9a-fA-F]+) but this version of "
          r"numpy is (?P<have>0x[0-9a-fA-F]+)"],
         lambda h: (f"the installed numpy (C API {h.group('have')}) is "
                    + ("older than" if int(h.group("have"), 16) < int(h.group("built"), 16)
                       else "not") + " the one a compiled extension was built against "
                    f"({h.group('built')}: torch, or another such as cv2 or scipy), so that "
                    "extension cannot use it; often only a warning the run outlives"),
         "upgrade numpy (python -m pip install -U 'numpy<2' for a torch older than 2.3, or the "
         "version torch's requirements name), the same on every node",
         ADVICE, "`module compiled against API version 0xN but this version of numpy is 0xM` "
         "(M lower: numpy older than the build; advice: any extension prints it, often "
         "harmlessly)",
         suppresses=("numpy-unusable", "numpy-missing", "numpy-version-mismatch")),
    sig("numpy-unusable", "torch cannot use numpy",
         [r"RuntimeError: Numpy is not available", r"Failed to initialize NumPy",
          r"PyTorch was compiled without NumPy support",
          r"Could not infer dtype of numpy\.\w+"],          # numpy 2's scalars, or an old numpy
         "torch cannot use numpy on this rank: numpy is not installed in the workers' "
         "environment (torch's wheel does not depend on it), or it is numpy 2 and this torch "
         "(< 2.3) was built against numpy 1.x; torch.distributed's object collectives, "
         "DataLoader collation of numpy arrays and tensor.numpy() need it",
         "python -c 'import numpy; print(numpy.__version__)' on every node: install numpy if "
         "missing; with numpy 2 and torch < 2.3 install 'numpy<2' (or torch >= 2.3)",
         unless_warning(SETUP), "`RuntimeError: Numpy is not available`, `Failed to "
         "initialize NumPy` where nothing says numpy is missing (its text names both causes)",
         confirm=r"\A(?![\s\S]*No module named '?numpy)",
         suppresses=("python-module-missing",), also=("numpy-missing", "numpy-version-mismatch")),
    sig("numpy-missing", "numpy is not installed",
         [r"RuntimeError: Numpy is not available", r"Failed to initialize NumPy",
          r"No module named '?numpy'?(?:\s|$)",
          r"numpy\.core\.multiarray failed to import"],
         lambda h: ("torch cannot use numpy on this rank: numpy is not installed in the "
                    "environment the workers run in (torch's wheel does not depend on it)"
                    + (", or it is older than the numpy this torch was built against"
                       if "multiarray" in h.match.group(0) else "")
                    + ", and torch.distributed's object collectives (broadcast_object_list, "
                    "all_gather_object), DataLoader collation of numpy arrays and "
                    "tensor.numpy() need it"),
         lambda h: ("install numpy in the environment meshrun runs from (python -m pip "
                    "install numpy" + (", or -U numpy when it is there but older"
                                       if "multiarray" in h.match.group(0) else "")
                    + "), on every node; a package that needs it should declare it"),
         unless_warning(SETUP), "`No module named 'numpy'`, and `Numpy is not available` / "
         "`Failed to initialize NumPy` where the log says it (advice only in torch's import "
         "warning: the run may have failed of something else)",
         confirm=r"No module named '?numpy|numpy\.core\.multiarray failed to import",
         suppresses=("python-module-missing",)),
    sig("windows-no-libuv", "torch built without libuv",
         [r"use_libuv was requested but PyTorch was buil[dt] without libuv support"],
         "this torch build has no libuv (the Windows wheels), while the TCPStore asks for its "
         "libuv backend by default since torch 2.4",
         "set USE_LIBUV=0 in every node's environment (or init_method='tcp://HOST:PORT"
         "?use_libuv=0'); multi-node training on native Windows is barely supported: WSL2 or "
         "Linux nodes are the way",
         SETUP, "`use_libuv was requested but PyTorch was built without libuv support`"),
    sig("mpi-world-mismatch", "mpirun's world differs from torch's",
         [r"MPI world size (?P<mpi>\d+) does not match torch world size (?P<torch>\d+)",
          r"MPI rank (?P<rank>\d+) does not match torch rank"],
         lambda h: ("the job was started by mpirun and DeepSpeed read its world from MPI"
                    + (f" ({h.group('mpi')} processes)" if h.group("mpi") else "")
                    + ", while torch.distributed was set up from other variables (the "
                    "script's own set-up, or a launcher's RANK/WORLD_SIZE left in the "
                    "environment" + (f": {h.group('torch')} processes" if h.group("torch")
                                     else "") + "): the script does not support being started "
                    "by mpirun as it was"),
         "start it one way only: mpirun with -np equal to nodes x GPUs and a script that takes "
         "its rank from MPI (deepspeed.init_distributed(auto_mpi_discovery=True)), or the "
         "deepspeed/torchrun launcher (or meshrun run) without mpirun",
         SETUP, "DeepSpeed's `MPI world size N does not match torch world size M`, `MPI rank R "
         "does not match torch rank`"),
    sig("deepspeed-outside-launcher", "DeepSpeed without a launcher",
         [r"Not using the DeepSpeed or (?:dist|torch\.distributed) launchers, attempting to "
          r"detect MPI environment"],
         "deepspeed.init_distributed() found none of the launcher's variables (RANK, WORLD_SIZE, "
         "MASTER_ADDR, LOCAL_RANK): the script was started with plain python, so DeepSpeed "
         "fell back to discovering an MPI job, which needs mpi4py and mpirun",
         "start the script with a launcher that sets them: meshrun run (or deepspeed, "
         "torchrun) on every node; install mpi4py only if the job really is an MPI job",
         SETUP, "DeepSpeed's `Not using the DeepSpeed or dist launchers, attempting to detect "
         "MPI environment`",
         suppresses=("python-module-missing", "mpi4py-missing")),
    sig("mpi4py-missing", "mpi4py missing",
         [r"No module named '?mpi4py'?(?:\s|$)"],
         "mpi4py is not installed: either the job is an MPI job and needs it, or (most often "
         "in training jobs) the script was started with plain python and DeepSpeed's "
         "init_distributed(), finding no launcher's variables (RANK, WORLD_SIZE, "
         "MASTER_ADDR), fell back to discovering an MPI job",
         "start the script with a launcher that sets those variables (meshrun run, deepspeed, "
         "torchrun) on every node; install mpi4py (python -m pip install mpi4py) only for a "
         "job that really runs under mpirun",
         SETUP, "`No module named 'mpi4py'` (its text names both causes)",
         suppresses=("python-module-missing",), also=("deepspeed-outside-launcher",)),
    sig("cuda-home-malformed", "the CUDA path holds a ':'",
         [r"'(?P<home>(?:/[^':]*)?:[^'\\]*)/bin/nvcc'",   # also a leading ':' ($CUDA_HOME unset)
          r"(?P<home>\S*:\S*)/bin/nvcc: not found"],
         lambda h: (f"the build called {h.group('home')}/bin/nvcc: the CUDA toolkit's folder "
                    "(CUDA_HOME or CUDA_PATH) was set like a PATH list, two folders joined by "
                    "':' (export CUDA_HOME=$CUDA_HOME:/usr/local/cuda-X), so no nvcc is found "
                    "there"),
         "set CUDA_HOME to one folder (export CUDA_HOME=/usr/local/cuda-12.1; its bin/nvcc "
         "must exist), then build again",
         SETUP, "an nvcc path with a ':' in it (`unable to execute "
         "'/usr/local/cuda-10.1:/bin/nvcc'`, the shell's `:/usr/local/cuda-10.1/bin/nvcc: not "
         "found`)",
         suppresses=("deepspeed-no-cuda-compiler", "cuda-toolkit-missing")),
    sig("cuda-toolkit-missing", "no CUDA toolkit to build an extension",
         [r"CUDA_HOME environment variable is not set\. Please set it to your CUDA install root",
          # any build that runs nvcc where there is none (apex, flash-attn, a setup.py)
          r"No such file or directory: '(?P<nvcc>[^']*/bin/nvcc)'",
          r"unable to execute '?nvcc'?: No such file or directory",
          r"nvcc was not found\.\s+Are you sure your environment has nvcc available"],
         _NO_TOOLKIT, _NO_TOOLKIT_FIX,
         SETUP, "torch.utils.cpp_extension's `CUDA_HOME environment variable is not set. Please "
         "set it to your CUDA install root.`, a build's missing `.../bin/nvcc`, `unable to "
         "execute nvcc`, flash-attn's `nvcc was not found`", also=("deepspeed-no-cuda-compiler",)),
    # a setup.py that joins CUDA_HOME (None: torch found no toolkit) with '/bin/nvcc'
    sig("cuda-toolkit-missing", "no CUDA toolkit to build an extension",
         [r"TypeError: unsupported operand type\(s\) for \+: 'NoneType' and 'str'"],
         _NO_TOOLKIT, _NO_TOOLKIT_FIX,
         SETUP, "`TypeError: unsupported operand type(s) for +: 'NoneType' and 'str'` under a "
         "build's `CUDA_HOME` + `/bin/nvcc`", near=r"CUDA_HOME|/bin/nvcc"),
    sig("deepspeed-no-cuda-compiler", "DeepSpeed cannot compile its CUDA ops",
         [r"CUDA_HOME does not exist, unable to compile CUDA op\(s\)",
          r"MissingCUDAException"],
         _DS_NO_NVCC, _DS_NO_NVCC_FIX,
         SETUP, "DeepSpeed's `MissingCUDAException: CUDA_HOME does not exist, unable to compile "
         "CUDA op(s)`"),
    # the JIT build (or pip's build of deepspeed) runs nvcc, which is not there
    sig("deepspeed-no-cuda-compiler", "DeepSpeed cannot compile its CUDA ops",
         [r"No such file or directory: '(?P<nvcc>[^']*/bin/nvcc)'"],
         _DS_NO_NVCC, _DS_NO_NVCC_FIX,
         SETUP, "a missing `.../bin/nvcc` under DeepSpeed's frames",
         near=r"(?i)deepspeed", suppresses=("cuda-toolkit-missing",)),
    sig("ninja-missing", "no Ninja to build an extension",
         [r"Ninja is required to load C\+\+ extensions",
          r"\[Errno 2\] No such file or directory: 'ninja'",
          r"die: error: must run as root",
          r"Unable to JIT load the \w+ op due to ninja not being installed"],    # DeepSpeed
         "a C++/CUDA extension is built at run time (DeepSpeed's ops such as FusedAdam, "
         "torch.utils.cpp_extension.load) with the Ninja build tool, and this node has none on "
         "PATH, or the `ninja` on PATH is another program (Debian's `ninja` package, a "
         "privilege-escalation monitor, answers 'die: error: must run as root')",
         "install the build tool in the environment on every node (python -m pip install "
         "ninja, or apt install ninja-build) and check that `ninja --version` prints a version "
         "there; or install the package with its ops prebuilt",
         SETUP, "torch's `Ninja is required to load C++ extensions`, `No such file or "
         "directory: 'ninja'`; `die: error: must run as root` in a log that builds an extension",
         confirm=r"torch_extensions|cpp_extension|[Nn]inja|JIT|jit"),
    sig("cuda-p2p-peer-limit", "more than 8 P2P peers for one GPU",
         [r"peer mapping resources exhausted"],
         "one GPU was asked to map the memory of more than 8 others: on a machine without "
         "NVSwitch CUDA allows each device at most 8 peer mappings, and this job puts more than "
         "9 GPUs in one peer-to-peer group (more than 9 processes or GPUs on one node, all "
         "with P2P)",
         "keep to 8 peers per GPU: at most 9 ranks per P2P group on a node (accelerate's "
         "num_processes and gpu_ids, --nproc-per-node), or NCCL_P2P_LEVEL / NCCL_P2P_DISABLE=1 "
         "so NCCL maps fewer peers",
         SETUP, "CUDA's `peer mapping resources exhausted` (error 60)",
         suppresses=("cuda-init-failed", "nccl-unhandled-cuda-error")),
    sig("gpu-p2p-unsupported", "GPU peer-to-peer not available",
         [r"peer access is not supported between these two devices?",
          r"Peer-to-peer access is unsupported on this platform"],
         "these GPUs cannot access each other's memory directly (consumer cards such as the "
         "RTX 3090/4090, or P2P disabled by the PCIe topology or IOMMU), which this "
         "communication path assumes; NCCL on such machines can also hang right after "
         "setting up its P2P/IPC channels",
         "disable peer-to-peer and InfiniBand where the machine has neither: NCCL_P2P_DISABLE=1 "
         "(and NCCL_IB_DISABLE=1) on every node, or the library's own switch for its custom "
         "all-reduce",
         SETUP, "CUDA's `peer access is not supported between these two devices`"),
    # a crash while NCCL sets up: on consumer multi-GPU machines most often P2P
    sig("gpu-p2p-unsupported", "GPU peer-to-peer not available",
         [r"Segmentation fault"],
         "the process crashed in native code while NCCL was setting up its communicator: on a "
         "machine with several consumer GPUs (RTX 3090/4090/5090) that is most often "
         "peer-to-peer access the cards or the PCIe topology do not really support; else a "
         "libnccl that does not match torch's",
         "set NCCL_P2P_DISABLE=1 (and NCCL_IB_DISABLE=1 without InfiniBand) on every node and "
         "rerun; if it still crashes, check that one NCCL is installed (pip list | grep -i "
         "nccl) and rerun with NCCL_DEBUG=INFO",
         SETUP, "`Segmentation fault` in a log that shows NCCL's set-up (`ncclCommInitRank`, "
         "`Init torch distributed`, `is using nccl`)",
         confirm=r"ncclCommInitRank|Init torch distributed|is using nccl",
         suppresses=("segfault",), also=("nccl-library-shadowed",)),
    sig("cuda-fork-reinit", "CUDA used before a fork",
         [r"Cannot re-initialize CUDA in forked subprocess",
          r"To use CUDA with multiprocessing, you must use the 'spawn' start method",
          r"you need to avoid running any instruction using `torch\.cuda`"],
         "CUDA was initialised in a process that then forked (DataLoader workers or "
         "multiprocessing with the fork start method, or a notebook cell that touched "
         "torch.cuda before the launcher forked), and a forked child cannot use CUDA",
         "touch no CUDA before forking: create models and tensors on the GPU inside each "
         "worker, use the spawn start method (multiprocessing.set_start_method('spawn'), "
         "DataLoader(multiprocessing_context='spawn')); in a notebook restart the kernel and "
         "run no torch.cuda cell before the launcher; or launch with meshrun run, where each "
         "rank is its own process from the start",
         FAULT, "`Cannot re-initialize CUDA in forked subprocess`, Accelerate's notebook "
         "launcher's `avoid running any instruction using torch.cuda`"),
    # torch <= 1.4 said only CUDA's own words (error 3) in the forked child
    sig("cuda-fork-reinit", "CUDA used before a fork",
         [r"cuda runtime error \(3\) : initialization error",
          r"THCudaCheck FAIL file=\S+ line=\d+ error=3 : initialization error",
          r"CUDA error: initialization error"],
         "CUDA was initialised in a process that then forked (DataLoader workers or "
         "multiprocessing with the fork start method), and a forked child cannot use CUDA",
         "touch no CUDA before forking, or none in the children: move tensors to the GPU in "
         "the main process after the DataLoader yields them (pin_memory=True), use the spawn "
         "start method (DataLoader(multiprocessing_context='spawn'), "
         "multiprocessing.set_start_method('spawn'))",
         FAULT, "CUDA's `initialization error` (error 3) in a log of forked processes "
         "(DataLoader workers, multiprocessing)",
         confirm=r"DataLoader worker|_worker_loop|popen_fork|[Ff]orked|multiprocessing[/\\]"
                 r"(?:process|pool)\.py"),
    sig("spawn-main-guard", "processes started at import",
         [r"An attempt has been made to start a new process before the",
          r"has finished its bootstrapping phase"],
         "the script starts processes (DataLoader workers, multiprocessing, mp.spawn) while "
         "being imported: with the spawn start method (Windows and macOS default) each child "
         "imports the main module again, and without an `if __name__ == \"__main__\":` guard "
         "it would start processes of its own",
         "put the script's top-level code under if __name__ == \"__main__\": main(), or use "
         "DataLoader(num_workers=0) to check",
         FAULT, "multiprocessing's `An attempt has been made to start a new process before the "
         "current process has finished its bootstrapping phase`"),
    sig("ddp-unused-parameters", "DDP: parameters without gradients",
         [r"Expected to have finished reduction in the prior iteration",
          r"parameters that were not used in producing (?:the )?loss",
          r"Parameter indices which did not receive grad for rank"],
         "DistributedDataParallel expected a gradient for every parameter, but some took no "
         "part in this step's loss (a branch not taken, a head not used, an output left out "
         "of the loss), so the previous step's gradient reduction never finished",
         "make every parameter reach the loss, or set requires_grad=False on the unused ones, "
         "or wrap with DistributedDataParallel(model, find_unused_parameters=True) (Lightning: "
         "strategy='ddp_find_unused_parameters_true'; HF Trainer: ddp_find_unused_parameters="
         "True); TORCH_DISTRIBUTED_DEBUG=DETAIL names the parameters",
         FAULT, "DDP's `Expected to have finished reduction in the prior iteration before "
         "starting a new one`"),
    sig("ddp-reentrant-checkpoint", "DDP saw a gradient twice in one backward",
         [r"Expected to mark a variable ready only once",
          r"has been marked as ready twice"],
         "DDP saw the gradient hook of one parameter fire twice in one backward: most often "
         "reentrant activation checkpointing (gradient_checkpointing, torch.utils.checkpoint "
         "with use_reentrant=True) under DDP with find_unused_parameters=True, which runs the "
         "checkpointed blocks' backward again; or a parameter used in two forward passes of "
         "one step (a module called twice, weights shared across models)",
         "use non-reentrant checkpointing (gradient_checkpointing_kwargs={'use_reentrant': "
         "False}, torch.utils.checkpoint(..., use_reentrant=False)), or turn off "
         "find_unused_parameters (ddp_find_unused_parameters=False) or set static_graph=True "
         "when the graph is the same every step",
         FAULT, "DDP's `Expected to mark a variable ready only once`, `Parameter ... has been "
         "marked as ready twice`"),
    sig("ddp-reentrant-checkpoint", "ZeRO saw a gradient twice in one backward",
         [r"has already been reduced\.\s+Gradient computed twice for this partition"],
         "DeepSpeed ZeRO (stage 1 or 2) got a second gradient for one parameter in one "
         "backward: most often reentrant activation checkpointing (gradient_checkpointing, "
         "torch.utils.checkpoint with use_reentrant=True), which runs the checkpointed blocks' "
         "backward again, or a module applied twice in one step (a Siamese model, weights "
         "shared between two branches)",
         "use non-reentrant checkpointing (gradient_checkpointing_kwargs={'use_reentrant': "
         "False}, torch.utils.checkpoint(..., use_reentrant=False)); for a module applied "
         "twice, run both inputs through it in one call (torch.cat), or use ZeRO stage 0 or 3",
         FAULT, "DeepSpeed ZeRO's `The parameter N has already been reduced. Gradient computed "
         "twice for this partition`"),
    sig("zero3-with-device-map", "ZeRO-3 with a device_map",
         [r"DeepSpeed Zero-3 is not compatible with (?:`low_cpu_mem_usage=True`|passing a "
          r"`device_map`)"],
         "the model is loaded with a device_map or low_cpu_mem_usage=True (from_pretrained) "
         "while DeepSpeed ZeRO-3 is on: ZeRO-3 partitions the weights across the ranks itself "
         "as they load, and transformers refuses both",
         "leave device_map and low_cpu_mem_usage out of from_pretrained when ZeRO-3 is on "
         "(ZeRO-3 places the weights); or use ZeRO-2, which keeps them whole on every rank",
         SETUP, "transformers' `DeepSpeed Zero-3 is not compatible with low_cpu_mem_usage=True "
         "or with passing a device_map`"),
    sig("zero-checkpoint-world-size", "a ZeRO checkpoint loaded at another world size",
         [(r"The checkpoint being loaded used a DP world size of (?P<saved>\d+) but the current "
           r"world size is (?P<now>\d+)")],
         lambda h: (f"the ZeRO checkpoint was saved by {h.group('saved')} data-parallel ranks "
                    f"and is loaded by {h.group('now')}: DeepSpeed cannot partition ZeRO's "
                    "optimizer state again for another world size (nodes or GPUs per node "
                    "changed between the save and the resume)"),
         "resume with the world size of the save (the same nodes x GPUs per node), or convert "
         "the checkpoint to a universal one (DeepSpeed's ds_to_universal.py, then "
         "load_universal) or load the model weights alone (load_optimizer_states=False)",
         SETUP, "DeepSpeed's `The checkpoint being loaded used a DP world size of N but the "
         "current world size is M`"),
    sig("collective-mismatch", "ranks ran different collectives",
         [r"Detected mismatch between collectives on ranks"],
         mismatch_cause,
         "make every rank run the same collectives in the same order, on tensors of the same "
         "shape and dtype: the same number of steps and batches on every rank (drop_last, "
         "DistributedSampler), no collective inside a rank-dependent branch; the line names "
         "the two ranks and their collectives",
         FAULT, "c10d's `Detected mismatch between collectives on ranks` "
         "(TORCH_DISTRIBUTED_DEBUG=DETAIL)"),
    sig("collective-mismatch", "ranks sent different sizes",
         [r"op\.preamble\.length <= op\.nbytes\. (?P<got>\d+) vs (?P<want>\d+)"],
         lambda h: (f"a rank received {h.group('got')} bytes where its own tensor holds "
                    f"{h.group('want')}: the ranks ran the same collective on tensors of "
                    "different sizes (a shape that depends on the rank's data, a last batch "
                    "smaller on some ranks), or different collectives at the same point"),
         "give the collective a tensor of the same shape and dtype on every rank (pad "
         "variable-size data, or all_gather the sizes first), and run the same collectives "
         "in the same order; TORCH_DISTRIBUTED_DEBUG=DETAIL names the mismatch",
         FAULT, "gloo's `op.preamble.length <= op.nbytes. A vs B`"),
    sig("checkpoint-module-prefix", "checkpoint keys carry 'module.'",
         [r"Unexpected key\(s\) in state_dict: \"module\.",
          r"unexpected key \"module\.[^\"]*\" in state_dict"],
         "the checkpoint was saved from a model wrapped in (Distributed)DataParallel, whose "
         "keys all start with 'module.', and is loaded into the bare model",
         "save model.module.state_dict() (the unwrapped model), or strip the prefix when "
         "loading: torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state, "
         "'module.')",
         FAULT, "`Unexpected key(s) in state_dict: \"module.…` when loading a checkpoint "
         "(torch 0.x: `unexpected key \"module.…\" in state_dict`)"),
    sig("checkpoint-saved-device-missing", "checkpoint saved on a GPU this node lacks",
         [r"Attempting to deserialize object on (?:a )?CUDA device (?P<dev>\d+) but "
          r"torch\.cuda\.device_count\(\) is (?P<count>\d+)",
          r"Attempting to deserialize object on a CUDA device but "
          r"torch\.cuda\.is_available\(\) is False"],
         lambda h: ("the checkpoint's tensors were saved on "
                    + (f"cuda:{h.group('dev')}, and this process sees only "
                       f"{h.group('count')} GPU(s)" if h.group("dev")
                       else "a GPU, and this process sees none")
                    + ": torch.load puts each tensor back on the device it was saved from"),
         "load with torch.load(path, map_location='cpu') (or map_location=f'cuda:{local_rank}') "
         "and move the model after; save from every rank's model.state_dict() only after "
         "moving it, or save on rank 0 only",
         FAULT, "`Attempting to deserialize object on CUDA device 2 but "
         "torch.cuda.device_count() is 1` (and `... is_available() is False`)"),
    sig("checkpoint-multi-rank-race", "ranks removing the same checkpoint",
         [(r"FileNotFoundError: \[Errno 2\] No such file or directory: "
           r"'(?P<path>[^']*(?:checkpoint|ckpt|\.pt\b|rng_state_\d+\.pth)[^']*)'")],
         lambda h: (f"more than one process removes or renames the same checkpoint path "
                    f"({h.group('path')}): the output folder is shared and every rank (or every "
                    "node's rank 0) runs the save's clean-up; the first one wins and the others "
                    "find it gone"),
         CHECKPOINT_RACE_FIX + "; transformers 4.36.0 had this bug for tmp-checkpoint "
         "folders: upgrade",
         FAULT, "`FileNotFoundError: ... No such file or directory: '...checkpoint...'` where "
         "the same log shows the path being removed or renamed (`shutil.rmtree`, `os.rename`, "
         "`'tmp-checkpoint-N' -> 'checkpoint-N'`)",
         confirm=r"shutil\.rmtree|in rmtree|os\.rmdir|os\.rename|os\.replace|shutil\.move|"
                 r"' -> '|Deleting older checkpoint"),
    # the same race seen from the remover: the folder filled again while it was removed
    sig("checkpoint-multi-rank-race", "ranks removing the same checkpoint",
         [r"\[Errno 39\] Directory not empty: "
          r"'(?P<path>[^']*(?i:checkpoint|ckpt|step|epoch)[^']*)'"],
         lambda h: (f"a folder ({h.group('path')}) was removed or renamed while another process "
                    "wrote into it: the checkpoint folder is shared and more than one rank (or "
                    "every node's rank 0) saves or cleans it up; or it was renamed onto a folder "
                    "of that name that exists and is not empty"),
         CHECKPOINT_RACE_FIX + "; write each save under a new name, then rename it",
         FAULT, "`OSError: [Errno 39] Directory not empty: '...'` on a checkpoint's folder "
         "(a path naming a checkpoint, ckpt, step or epoch)"),
    sig("checkpoint-truncated", "the checkpoint file is cut short",
         [r"PytorchStreamReader failed reading zip archive: failed finding central directory",
          r"PytorchStreamReader failed reading file \S+: file read failed",
          r"unexpected EOF(?:, expected \d+ more bytes)?\. The file might be corrupted",
          r"Error while deserializing header: MetadataIncompleteBuffer"],
         _CUT_SHORT, _CUT_SHORT_FIX,
         FAULT, "torch.load's `PytorchStreamReader failed reading zip archive: failed finding "
         "central directory` (and `... failed reading file ...: file read failed`, `unexpected "
         "EOF, expected N more bytes. The file might be corrupted`)"),
    # torch.load's legacy reader: a storage shorter than its header says
    sig("checkpoint-truncated", "the checkpoint file is broken",
         [r"storage has wrong size: expected \d+ got \d+"],
         "a checkpoint file is incomplete or broken: its save, copy or download was cut short, "
         "or more than one process wrote it at once, so a storage in it is shorter than its "
         "header says",
         "resume from the previous checkpoint or download it again (move the broken file "
         "away); save from one rank only, to a temporary name renamed when whole",
         FAULT, "torch.load's legacy reader's `storage has wrong size: expected N got M`"),
    # torch.load's legacy (pickle) reader meets the end of a file cut short
    sig("checkpoint-truncated", "the checkpoint file is cut short",
         [r"EOFError: Ran out of input"],
         _CUT_SHORT, _CUT_SHORT_FIX,
         FAULT, "`EOFError: Ran out of input` under torch.load's frames",
         near=r"torch/serialization\.py"),
    # a zip whose header is broken, not only its end: cut short, or two writers at once
    sig("checkpoint-truncated", "the checkpoint file is broken",
         [r"PytorchStreamReader failed reading file \S+: invalid header or archive is corrupted"],
         "a checkpoint file is broken inside, not only at its end: it was written by more than "
         "one process at once (every rank, or every node's rank 0, saving to the same path on "
         "a shared folder), or its save or copy was cut short",
         "resume from the previous checkpoint (move the broken file away); save from one rank "
         "only (if rank == 0, or the framework's own save), to a temporary name renamed when "
         "whole",
         FAULT, "torch.load's `PytorchStreamReader failed reading file ...: invalid header or "
         "archive is corrupted` (its text names both causes)",
         also=("checkpoint-multi-rank-race",)),
    sig("checkpoint-saved-device-missing", "checkpoint saved on a GPU this process lacks",
         [r"THCudaCheck FAIL file=\S+ line=\d+ error=10 : invalid device ordinal"],
         "the checkpoint's tensors were saved on a GPU this process does not have: torch.load "
         "puts each tensor back on the device it was saved from, and this process sees fewer "
         "GPUs",
         "load with map_location (torch.load(path, map_location=f'cuda:{local_rank}') or "
         "'cpu'), then move the model to this rank's device",
         FAULT, "torch <= 1.0's `THCudaCheck FAIL ... error=10 : invalid device ordinal` in a log "
         "whose traceback is torch.load's",
         confirm=r"torch[/\\]serialization\.py\", line \d+, in (?:load|_load|"
                 r"default_restore_location|_cuda_deserialize|restore_location)\b",
         suppresses=("invalid-device-ordinal",)),
    sig("checkpoint-is-lfs-pointer", "the checkpoint is a Git LFS pointer",
         [r"UnpicklingError: invalid load key, 'v'"],
         "the checkpoint file is a Git LFS pointer (a small text file that begins 'version "
         "https://git-lfs...'), not the weights: the repository was cloned or copied without "
         "git-lfs, so torch.load reads the pointer's first byte 'v'",
         "fetch the real file: git lfs install && git lfs pull in the repository (or download "
         "the checkpoint from where the project publishes it); head -c 100 FILE shows a "
         "pointer",
         FAULT, "`_pickle.UnpicklingError: invalid load key, 'v'.`"),
    sig("checkpoint-is-lfs-pointer", "the weights file is not a safetensors file",
         [r"Error while deserializing header: HeaderTooLarge"],
         "the .safetensors file does not begin with a safetensors header: most often a Git LFS "
         "pointer (the repository was cloned without git-lfs, so the file is a small text file "
         "beginning 'version https://git-lfs...'), or an HTML page saved in its place",
         "fetch the real file: git lfs install && git lfs pull in the repository, or download "
         "it again (huggingface-cli download ...); head -c 100 FILE shows what it is",
         FAULT, "safetensors' `Error while deserializing header: HeaderTooLarge`"),
    sig("ddp-model-on-cpu", "DDP given GPU ids for a model on the CPU",
         [_DDP_DEVICE_IDS + r"\{device\(type='cpu'\)\}",
          # torch <= 1.7; a model partly left on the CPU
          (r"only work with single-device (?:CUDA|GPU) modules, but got device_ids \S+, "
           r"output_device \S+, and module parameters \{(?:device\(type='cuda', index=\d+\), )?"
           r"device\(type='cpu'\)\}")],
         "DistributedDataParallel was given GPU ids for a model whose parameters are on the "
         "CPU: the model was never moved to its GPU, or the framework was told to use no GPU "
         "while still asked for DDP (Lightning's gpus=0 or gpus='0' means no GPU, not GPU 0)",
         "move the model to the rank's GPU before wrapping it (model.to(f'cuda:{local_rank}')), "
         "or pass no device_ids for a CPU run; in Lightning ask for devices=1 (or gpus=[0]) "
         "for GPU 0",
         SETUP, "DDP's `device_ids and output_device arguments only work with ... but got "
         "device_ids [...], ..., and module parameters {device(type='cpu')}`"),
    sig("library-single-gpu-only", "the library refuses multi-GPU training",
         # not private-transformers' `Multi-gpu and distributed training is currently not
         # supported`: a newer transformers made its check refuse one GPU too
         [r"currently does not (?:work on|support) multi GPU setups"],
         "the library this script trains with refuses to run on more than one GPU or in "
         "distributed training: this version of it does not support that (its own check "
         "says so)",
         "run it on one GPU (CUDA_VISIBLE_DEVICES=0, one process: --nproc-per-node 1), or use "
         "a version or another library that supports multi-GPU training",
         SETUP, "a library's own refusal: Unsloth's `currently does not work on multi GPU "
         "setups`"),
    sig("mmcv-datacontainer-unwrapped", "an mmcv DataContainer reached the model",
         [r"received an invalid combination of arguments - got \(DataContainer,"],
         "the batch reached the model still wrapped in mmcv's DataContainer: mmcv's own "
         "wrappers (MMDataParallel, MMDistributedDataParallel) unwrap it, so the model was "
         "wrapped in torch's DataParallel or DDP instead, or the installed mmcv does not match "
         "this mmdetection/mmsegmentation code",
         "install the mmcv version this code base names (its README or mmcv's compatibility "
         "table), and wrap the model with mmcv's MMDistributedDataParallel as its train script "
         "does",
         FAULT, "`... received an invalid combination of arguments - got (DataContainer, ...`"),
    sig("device-map-auto-with-ddp", "device_map='auto' in a multi-process job",
         [r"You can't train a model that has been loaded with `device_map='auto'` in any "
          r"distributed mode",
          # DDP handed a module spread over two GPUs or more
          _DDP_DEVICE_IDS + r"\{device\(type='cuda', index=\d+\), device\(type='cuda'",
          r"You can't train a model that has been loaded in 8-bit precision on a different "
          r"device than the one you're training on"],
         "the model was loaded with device_map='auto' (spread over every GPU the process sees, "
         "for one process), and this job runs one process per GPU",
         "load it on the rank's own GPU when training with several processes: "
         "device_map={'': int(os.environ['LOCAL_RANK'])} (or no device_map, then .to(device)); "
         "keep device_map='auto' for a single process",
         SETUP, "accelerate's `You can't train a model that has been loaded with "
         "`device_map='auto'` in any distributed mode`"),
    # DDP broadcasting parameters that are DTensors at its construction
    sig("device-map-auto-with-ddp", "DDP over tensor-parallel parameters",
         [r"found no DeviceMesh from dtensor args for c10d\.broadcast_"],
         "DistributedDataParallel was given a model whose parameters are DTensors (sharded for "
         "tensor parallelism: transformers' device_map='auto' or tp_plan, or the script's own "
         "parallelize_module), and DDP cannot broadcast them",
         "keep DDP for models whose parameters are plain tensors: load the model whole on the "
         "rank's device (device_map={'': int(os.environ['LOCAL_RANK'])}, no tp_plan); for "
         "tensor parallelism with data parallelism use FSDP2's fully_shard over a 2-D mesh "
         "instead of DDP",
         SETUP, "DDP's `found no DeviceMesh from dtensor args for c10d.broadcast_`"),
    sig("torch-shadowed", "a folder named torch hides the real one",
         [r"No module named '?torch\._C'?(?=[\s')]|$)",
          r"It appears that PyTorch has loaded the `torch/_C` folder of the PyTorch repository",
          r"cannot import name '\w+' from 'torch\._C' \(unknown location\)"],
         "Python imported a folder named torch that is not the installed torch: the script "
         "runs from torch's source tree, or a project with a torch/ folder (or torch.py) of its "
         "own is the working directory, so torch's compiled part (torch._C) is not found",
         "run from another folder (cd out of the repository), or rename the project's own "
         "torch folder or module; python -c 'import torch; print(torch.__file__)' shows which "
         "one is imported",
         SETUP, "`No module named 'torch._C'`, torch's `It appears that PyTorch has loaded the "
         "torch/_C folder of the PyTorch repository`",
         suppresses=("library-too-old-for-torch", "python-module-missing")),
    sig("library-too-old-for-torch", "a package made for another torch",
         [r"No module named '(?P<mod>torch\._six|torch\._?[\w.]+)'",
          r"from (?P<mod>torch\._six) import .*container_abcs"],
         lambda h: (f"a package imports {h.group('mod')}, which this torch does not have: the "
                    "package was made for an older torch (torch._six went in torch 2.0; other "
                    "internal modules move between releases), or for a newer one"),
         "upgrade the package that imports it (its file is the frame above the error: "
         "pip install -U PACKAGE) to a release made for this torch, or install the torch it "
         "was made for",
         SETUP, "`No module named 'torch._six'` (any `torch.` module missing)",
         suppresses=("python-module-missing",)),
    sig("library-too-old-for-torch", "a package made for another torch",
         [r"cannot import name '(?P<name>\w+)' from '(?P<mod>torch(?:\.\w+)*)'"],
         lambda h: (f"a package imports {h.group('name')} from {h.group('mod')}, which this "
                    "torch does not have: the package was made for an older torch (the name was "
                    "renamed or removed since; torch's internal modules change between "
                    "releases), or for a newer one"),
         "upgrade the package that imports it (its file is the frame above the error: "
         "pip install -U PACKAGE) to a release made for this torch, or install the torch it "
         "was made for",
         SETUP, "`ImportError: cannot import name 'X' from 'torch.…'` (not from a torch of "
         "unknown location or outside site-packages: a stray torch folder or file)",
         exclude=r"from 'torch[\w.]*' \((?![^)]*(?:site|dist)-packages[/\\]torch)",
         suppresses=("python-module-missing",)),
    sig("library-too-old-for-torch", "a script made for another torch",
         [r"module '(?P<mod>torch(?:\.\w+)*)' has no attribute '(?P<name>\w+)'"],
         lambda h: (f"the script (or a package) uses {h.group('mod')}.{h.group('name')}, which "
                    "this torch does not have: it was written for a newer torch (the name came "
                    "later) or an older one (it was removed since)"),
         "install the torch the script was written for (its README or requirements name it), "
         "or upgrade the package whose frame is above the error",
         SETUP, "`AttributeError: module 'torch.X' has no attribute 'Y'` (not torch._C's "
         "`_cuda_*`: a CPU-only torch)",
         exclude=(r"module 'torch\._C' has no attribute '_cuda|partially initialized|module "
                  r"'torch\.distributed' has no attribute '" + _DIST_BASICS)),
    sig("library-too-old-for-torch", "a package made for another torch",
         [r"PyTorch (?P<built>\S+) with CUDA \d+ \(you have (?P<have>[^)]+)\)"],
         lambda h: (f"xFormers was built for PyTorch {h.group('built')}, and this is torch "
                    f"{h.group('have')}: its compiled extensions do not load in another torch"),
         "install the xFormers release built for this torch (pip install -U xformers, or the "
         "version its release notes pair with this torch), or the torch it was built for",
         SETUP, "xFormers' `can't load C++/CUDA extensions. xFormers was built for: PyTorch X "
         "with CUDA N (you have Y)`", confirm=r"xFormers was built for"),
    sig("torch-load-weights-only", "torch.load refuses a pickled object",
         [r"Weights only load failed", r"WeightsUnpickler error: Unsupported global"],
         "since torch 2.6 torch.load defaults to weights_only=True, which refuses any pickled "
         "object that is not a tensor or a plain container (an argparse.Namespace, a numpy "
         "scalar, a custom class saved in the checkpoint)",
         "for a checkpoint you trust, torch.load(path, weights_only=False); or allow the named "
         "class with torch.serialization.add_safe_globals([...]); or save only state_dicts "
         "and plain values",
         FAULT, "`Weights only load failed`, `WeightsUnpickler error: Unsupported global`"),
    sig("bf16-unsupported-gpu", "GPU without bfloat16",
         [r"Current CUDA Device does not support bfloat16",
          r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0",
          r"bf16 is not supported on (?:this|your) (?:GPU|device)",
          r"Your setup doesn't support bf16/gpu",
          r"bf16 mixed precision requires PyTorch >= 1\.10 and a supported device",
          # cuBLAS refuses a bf16 GEMM on a GPU without bf16 (M40, Titan X, ...)
          r"CUBLAS_STATUS_NOT_SUPPORTED when calling `cublas\w+\(.*CUDA_R_16BF"],
         lambda h: ("bfloat16 was asked for where it is not supported: a GPU below compute "
                    "capability 8.0 (V100, T4, P100 and older)" + (
                        ", or a torch older than 1.10 or built for a CUDA older than 11 "
                        "(transformers checks all three)" if "bf16/gpu" in h.line else
                        ", or a torch older than 1.10 (accelerate checks both)"
                        if "PyTorch >= 1.10" in h.line else "")),
         "use float16 with a GradScaler (or fp32) on these GPUs: meshrun's recipes choose "
         "it with parallel.mixed_precision=auto; HF: fp16=True instead of bf16=True; "
         "Lightning: precision='16-mixed'",
         SETUP, "`Current CUDA Device does not support bfloat16`, `Bfloat16 is only supported "
         "on GPUs with compute capability of at least 8.0`, transformers' `Your setup doesn't "
         "support bf16/gpu`"),
    sig("fp16-trainable-params", "fp16 parameters under a GradScaler",
         [r"Attempting to unscale FP16 gradients"],
         "the trainable parameters are float16 (the model was cast with .half() or loaded in "
         "fp16), and mixed precision's GradScaler can only unscale float32 gradients",
         "keep the trainable parameters in float32 and let autocast run the forward in "
         "fp16 (HF/diffusers: cast the trained parameters, e.g. LoRA layers, to float32; "
         "do not .half() the model before training)",
         FAULT, "`ValueError: Attempting to unscale FP16 gradients.`"),
    sig("fp16-trainable-params", "bf16 parameters under fp16's GradScaler",
         [r"\"_amp_foreach_non_finite_check_and_unscale_cuda\" not implemented for 'BFloat16'"],
         "the trainable parameters are bfloat16 (the model was cast with .to(torch.bfloat16) "
         "or loaded in bf16) while training runs fp16 mixed precision, whose GradScaler cannot "
         "unscale bf16 gradients",
         "train in bf16 mixed precision (HF: bf16=True instead of fp16=True; accelerate: "
         "--mixed_precision bf16), which needs no GradScaler, or keep the trained parameters "
         "in float32",
         FAULT, "`\"_amp_foreach_non_finite_check_and_unscale_cuda\" not implemented for "
         "'BFloat16'`"),
    sig("zero-offload-client-optimizer", "ZeRO-Offload refuses the script's optimizer",
         [(r"You are using ZeRO-Offload with a client provided optimizer \(<class "
           r"'(?P<opt>[\w.]+)'>\)")],
         lambda h: (f"DeepSpeed's ZeRO-Offload check refused its own CPU optimizer "
                    f"({h.group('opt')}): this DeepSpeed's check accepts only DeepSpeedCPUAdam "
                    "(DeepSpeedCPULion was added to it in a later release)"
                    if "DeepSpeedCPU" in h.group("opt") else
                    "ZeRO-Offload (offload_optimizer to the CPU) runs the optimizer step on the "
                    f"CPU, and DeepSpeed (0.8.3 on) refuses an optimizer the script built itself "
                    f"({h.group('opt')}) unless the config allows it"),
         lambda h: ("upgrade DeepSpeed (for DeepSpeedCPULion), or set "
                    "\"zero_force_ds_cpu_optimizer\": false in the config"
                    if "DeepSpeedCPU" in h.group("opt") else
                    "let DeepSpeed build the optimizer (an \"optimizer\" section in the config) "
                    "or pass deepspeed.ops.adam.DeepSpeedCPUAdam; or set "
                    "\"zero_force_ds_cpu_optimizer\": false to keep this one (slow on the CPU)"),
         SETUP, "`ZeRORuntimeException: You are using ZeRO-Offload with a client provided "
         "optimizer (<class 'X'>)`"),
    sig("zero-untested-optimizer", "ZeRO with an untested optimizer",
         [r"You are using an untested ZeRO Optimizer"],
         "DeepSpeed ZeRO was given an optimizer it has not been tested with (not one of its "
         "own or torch's Adam/AdamW), and refuses it unless the config allows it",
         "add \"zero_allow_untested_optimizer\": true at the top level of the DeepSpeed config "
         "(and check the optimizer's state is partitioned as you expect), or use DeepSpeed's "
         "own optimizer",
         SETUP, "`You are using an untested ZeRO Optimizer. Please add "
         "<\"zero_allow_untested_optimizer\": true>`"),
    sig("nccl-cpu-tensor", "a CPU tensor in an NCCL collective",
         [r"Tensors must be CUDA and dense",
          r"No backend type associated with device type cpu"],
         "a collective of the NCCL process group got a tensor on the CPU: NCCL moves only GPU "
         "tensors (a parameter or buffer never moved to the GPU, a model loaded on the CPU, a "
         "scalar made with torch.tensor(...) without device=)",
         "move the tensor (and the model) to the rank's GPU before the collective "
         "(tensor.to(f'cuda:{local_rank}')), or create the process group with "
         "backend='cpu:gloo,cuda:nccl' for collectives on CPU tensors",
         FAULT, "`Tensors must be CUDA and dense`, `No backend type associated with device "
         "type cpu`"),
    sig("mpi-host-slots-too-few", "more MPI processes than host slots",
         [r"not enough slots available in the system to satisfy the (?P<n>\d+|N)\b"],
         lambda h: (f"mpirun was asked for {h.group('n')} processes but the hosts it was given "
                    "offer fewer slots (a host listed without :N counts one slot, or Open MPI "
                    "counts cores, not GPUs)"),
         "give each host its slot count (-H node1:8,node2:8 or 'node1 slots=8' in the "
         "hostfile), or ask for no more processes than slots (--oversubscribe to allow more "
         "on purpose)",
         SETUP, "Open MPI's `There are not enough slots available in the system to satisfy "
         "the N slots`"),
    sig("cuda-on-cpu-torch", "CUDA asked of a CPU-only torch",
         [r"module 'torch\._C' has no attribute '_cuda_\w+'",
          r"Torch not compiled with CUDA enabled",
          r"Cannot initialize CUDA without ATen_cuda library",            # torch 1.0-1.2
          # an aten operator without a CUDA kernel: a torch without CUDA (macOS, CPU wheels)
          r"Could not run 'aten::(?:empty_strided|empty\.memory_format|_to_copy|_copy_from)' "
          r"with arguments from the 'CUDA' backend"],
         cpu_torch_cause, cpu_torch_fix,
         SETUP, "`module 'torch._C' has no attribute '_cuda_setDevice'` (and other `_cuda_*`), "
         "`Torch not compiled with CUDA enabled`; the cause and fix follow meshrun's plan (a "
         "CPU run: the script forces CUDA; a GPU node: the torch build)",
         suppresses=("cuda-init-failed",)),
    sig("nccl-not-built", "torch without NCCL",
         [r"Distributed package doesn't have NCCL built in",
          r"Distributed package doesn't have NCCL \" \"built in",   # the source line's literals
          # torch <= 1.0 (THD): built without NCCL 2
          r"the distributed NCCL backend is not available; try to recompile the THD package"],
         nccl_not_built_cause,
         "use the gloo backend where there is no NCCL: backend=os.environ['MESHRUN_BACKEND'] "
         "(meshrun sets gloo on CPU runs) or meshrun.init_distributed(); for GPUs, run on Linux "
         "with a CUDA build of torch",
         SETUP, "`Distributed package doesn't have NCCL built in` (also as the traceback's source "
         "line writes it, two string literals)"),
    sig("gpu-arch-unsupported", "GPU too new (or old) for the build",
         [r"with CUDA capability (?P<sm>sm_\d+) is not compatible with the current PyTorch",
          r"no kernel image is available for execution on the device",
          r"cuda runtime error \(8\) : invalid device function"],       # torch <= 1.0
         arch_cause,
         "install a torch built for this GPU (Blackwell sm_120 needs the CUDA 12.8 wheels or "
         "newer), and rebuild compiled extensions with TORCH_CUDA_ARCH_LIST naming every GPU "
         "model the job runs on (e.g. 8.0;9.0)",
         SETUP, "`with CUDA capability sm_N is not compatible with the current PyTorch "
         "installation`, `no kernel image is available for execution on the device`, torch "
         "1.0's `invalid device function`",
         suppresses=("nccl-unhandled-cuda-error", "cuda-illegal-memory-access")),
    # torch.cuda's warning: a GPU this build has no kernels for; advice, since any visible GPU
    # (a display card the job never uses) gives it
    sig("gpu-arch-unsupported", "GPU too old for the build",
         [r"which is of cuda capability (?P<cc>[\d.]+)\.\s*PyTorch no longer supports this "
          r"GPU because it is too old",
          r"PyTorch no longer supports this GPU because it is too old"],   # on its own line
         arch_cause,
         "install an older torch whose wheels still have kernels for this GPU, or build torch "
         "from source with TORCH_CUDA_ARCH_LIST naming it; or hide it from the job "
         "(CUDA_VISIBLE_DEVICES) if the job does not use it",
         ADVICE, "torch.cuda's warning `PyTorch no longer supports this GPU because it is too "
         "old`"),
    sig("cuda-toolkit-mismatch", "CUDA toolkit differs from torch's",
         [(r"Installed CUDA version (?P<sys>\S+) does not match the version torch was compiled "
           r"with (?P<torch>[\d.]+)"),
          (r"The detected CUDA version \((?P<sys>[\d.]+)\) mismatches the version that was "
           r"used to compile"),
          # apex's setup.py (an error since 2020, a warning before)
          (r"Cuda extensions are being compiled with a version of Cuda that does not match the "
           r"version used to compile Pytorch binaries")],
         toolkit_cause,
         "install the CUDA toolkit of torch's version and point CUDA_HOME at it (nvcc --version "
         "must agree with torch.version.cuda), or use prebuilt ops/wheels (DeepSpeed: "
         "DS_BUILD_OPS=0 and its JIT, or an image that has them)",
         SETUP, "`Installed CUDA version X does not match the version torch was compiled with Y` "
         "(DeepSpeed's and torch's extension builders)"),
    sig("fabric-manager-fault", "NVSwitch fabric manager fault",
         [(r"transport/nvls\.cc:\d+ NCCL WARN Cuda failure (?:\d+ )?'(?:invalid argument|"
           r"system not yet initialized|operation not supported)'"),
          r"CUDA error: system not yet initialized",
          r"CUDA failure [\w./]+:\d+ 'system not yet initialized'",
          r"cuda runtime error \(802\) : system not yet initialized",
          r"Error 802: system not yet initialized",
          # CUDA's error 802 in other programs' words (llama.cpp's ggml, gpu-burn, samples)
          r"failed to initialize CUDA: system not yet initialized",
          r"^\s*what\(\):  Error \([\w.-]+:\d+\): system not yet initialized",
          r"code=802\(cudaErrorSystemNotReady\)", r"CUDA_ERROR_SYSTEM_NOT_READY"],
         "the GPUs' NVSwitch fabric is not ready: on HGX/DGX systems (H100, H200, A100 with "
         "NVSwitch) the fabric manager (nvidia-fabricmanager) is not running, or was restarted "
         "without resetting the GPUs, so NCCL's NVLink SHARP set-up (or CUDA itself) fails",
         "check systemctl status nvidia-fabricmanager on the node; start it, reset the GPUs "
         "(nvidia-smi -r) or reboot the node; NCCL_NVLS_ENABLE=0 avoids NVLS meanwhile",
         SETUP, "NCCL's `transport/nvls.cc: NCCL WARN Cuda failure ...`, `CUDA error: system not "
         "yet initialized` (CUDA's error 802, also `cuda runtime error (802)` and torch's "
         "`Unexpected error from cudaGetDeviceCount() ... Error 802`)",
         suppresses=("nccl-unhandled-cuda-error", "nccl-internal-error", "cuda-init-failed")),
    sig("nccl-too-old-for-gpu", "NCCL older than the GPU",
         [r"ncclMaxSharedMem (?P<need>\d+) exceeds device/fn maxSharedMem (?P<has>\d+)"],
         lambda h: ("the NCCL in use predates this GPU's architecture: its kernels ask for "
                    f"{h.group('need')} bytes of shared memory, more than this GPU gives them "
                    f"({h.group('has')}), so its collectives cannot run (e.g. NCCL 2.25 on "
                    "Blackwell RTX 50xx cards, which 2.26 supports)"
                    + said(h.text, r"NCCL version (\S+)", "; this is NCCL {}")),
         "use a newer NCCL: a torch wheel or container that bundles one made for this GPU, or "
         "pip install -U nvidia-nccl-cu12 (or -cu13) and check that no older system libnccl "
         "shadows it (LD_LIBRARY_PATH)",
         SETUP, "NCCL's `ncclMaxSharedMem N exceeds device/fn maxSharedMem M`",
         suppresses=("nccl-unhandled-cuda-error", "nccl-internal-error")),
    sig("nccl-graph-file-mismatch", "NCCL's graph file is for another machine",
         [r"NCCL WARN XML Import Channel : dev \d+ not found"],
         lambda h: ("NCCL_GRAPH_FILE (with NCCL_TOPO_FILE) points at a graph written for "
                    "another machine shape: it names a GPU this machine does not have, so "
                    "NCCL's graph import fails"
                    + said(h.text, r"NCCL_GRAPH_FILE set by environment to (\S+)", " ({})")),
         "unset NCCL_GRAPH_FILE (and NCCL_TOPO_FILE unless it describes this machine): VM "
         "images set them for their largest size (Azure's /opt/microsoft/ncv4 files); "
         "check the image's /etc/nccl.conf and profile",
         SETUP, "`graph/search.cc: NCCL WARN XML Import Channel : dev N not found` (a graph "
         "file set by the environment)",
         suppresses=("nccl-system-error", "nccl-internal-error")),
    sig("nccl-interface-not-found", "NCCL has no usable interface",
         [r"no socket interface found",
          r"with family \d+ is neither AF_INET\(2\) nor AF_INET6\(10\)",
          r"WARN Socket creation failed : Address family not supported by protocol"],
         ifname_cause,
         "set NCCL_SOCKET_IFNAME to an interface this node has (ip -br addr), or unset it and "
         "let meshrun choose per node (it names the interface holding the route to the master); "
         "a leading '^' excludes names, '=' matches one exactly",
         SETUP, "NCCL's `Bootstrap : no socket interface found`, `... is neither AF_INET(2) nor "
         "AF_INET6(10)`, `WARN Socket creation failed : Address family not supported by "
         "protocol` (no interface of the family NCCL took)",
         suppresses=("nccl-internal-error", "nccl-system-error"),
         also=("nccl-version-differs",)),
    sig("nccl-version-differs", "nodes run different NCCL versions",
         [r"NCCL version (?P<version>\d+\.\d+\.\d+)"],
         lambda h: ("the ranks run different NCCL versions (the logs show NCCL "
                    f"{' and '.join(nccl_versions(h.job_text))}): NCCL's messages between "
                    "ranks are not compatible across versions, and a mix fails in set-up or in "
                    "the first collective with internal or system errors"),
         "install the same NCCL on every node (the same image, or the same nvidia-nccl-cu* "
         "wheel; a system libnccl may shadow the wheel's: check LD_LIBRARY_PATH); meshrun's "
         "preflight compares torch's NCCL version across nodes",
         SETUP, "two different `NCCL version X.Y.Z` lines in the logs diagnosed together "
         "(every node's)",
         confirm=nccl_versions_differ,
         suppresses=("nccl-internal-error", "nccl-system-error",
                     "nccl-unhandled-cuda-error")),
    sig("launcher-env-missing", "started without a launcher",
         [r"environment variable (?P<var>[A-Z_]+) expected, but not set",
          (r"KeyError: '(?P<var>RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|MASTER_ADDR|"
           r"MASTER_PORT)'")],
         launcher_cause, LAUNCHER_FIX,
         SETUP, "`environment variable MASTER_ADDR expected, but not set`, `KeyError: 'RANK'` "
         "(and LOCAL_RANK, WORLD_SIZE, MASTER_PORT)"),
    sig("launcher-env-missing", "SLURM variables outside a SLURM job",
         [r"KeyError: '(?P<var>SLURM_(?:PROCID|NODEID|LOCALID|JOB_ID|JOBID))'"],
         lambda h: (f"the script (or its framework's SLURM support, e.g. Lightning's "
                    f"SLURMEnvironment) reads {h.group('var')}, which only SLURM sets inside a "
                    "job step, but it was started outside one (python train.py or torchrun on "
                    "a login node or another cluster, or sbatch without srun)"),
         "start it inside a SLURM job step (srun within an sbatch or salloc allocation: meshrun "
         "render slurm writes one), or let the framework pick the environment instead of "
         "forcing SLURM's",
         SETUP, "`KeyError: 'SLURM_PROCID'` (and SLURM_NODEID, SLURM_LOCALID, SLURM_JOB_ID: set "
         "for every task of a job; not SLURM_NTASKS, which a job may lack)"),
    # the same, where only the KeyError's message was kept (an IDE's or a logger's str(exc):
    # a bare 'LOCAL_RANK' line) beside the frame that read the variable
    sig("launcher-env-missing", "started without a launcher",
         [(r"os\.environ\[[\"'](?P<var>RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|"
           r"MASTER_ADDR|MASTER_PORT)[\"']\]")],
         launcher_cause, LAUNCHER_FIX, SETUP,
         "a frame reading `os.environ[\"LOCAL_RANK\"]` with the KeyError's bare message "
         "`'LOCAL_RANK'`", confirm=r"(?m)^\s*'{var}'\s*$"),
    sig("script-arguments-unknown", "arguments the script does not define",
         [r"error: unrecognized arguments: (?P<args>.+)",
          r"Some specified arguments are not used by the HfArgumentParser: (?P<args>\[.+\])",
          r"error: Unrecognized arguments: (?P<args>.+)",                 # jsonargparse
          r"ERROR: Could not consume arg: (?P<args>.+)"],                 # python-fire
         lambda h: ("the command passes arguments the script does not define ("
                    + h.group("args") + "): renamed or removed in this version of the script "
                    "(a launch script or README from another version), misspelled, or a "
                    "launcher's own option "
                    "written after the script's name (torchrun train.py --nproc_per_node 2 "
                    "hands it to the script)"),
         "compare the flags with the script's --help in this version and its example launch "
         "scripts; drop or rename the ones it lists; put the launcher's options before the "
         "script (meshrun run [options] -- train.py [its arguments])",
         SETUP, "argparse's `error: unrecognized arguments: ...`, HfArgumentParser's `Some "
         "specified arguments are not used by the HfArgumentParser: [...]` (not the launcher's "
         "--local-rank: `local-rank-argument`)",
         exclude=r"--local[-_]rank|ipykernel|kernel-[\w-]+\.json"),
    sig("local-rank-argument", "--local-rank not accepted",
         [r"unrecognized arguments: .*--local[-_]rank(?:[= ]\d+|\s|$)",
          r"Some specified arguments are not used by the HfArgumentParser: \[.*'--local[-_]rank",
          r"Could not consume arg: --local[-_]rank"],                      # python-fire
         local_rank_cause,
         "read the local rank from the environment (int(os.environ['LOCAL_RANK'])): meshrun and "
         "torchrun set it and pass no argument; or declare both spellings: "
         "parser.add_argument('--local-rank', '--local_rank', type=int)",
         SETUP, "`error: unrecognized arguments: --local-rank=0` (or `--local_rank=0`: an old "
         "launcher's spelling)"),
    sig("script-crlf", "shell script with Windows line endings",
         [r"\$'\\r': command not found", r"'\\r'\] exits with return code",
          r"bad interpreter: .*\^M",
          r"\.sh: ?line \d+: (?:--?[\w-]+|[\w.-]+=\S*): command not found",
          # dash: the name ends in '\r', so ': not found' overwrites the line's start
          r"^: not found\S*\.sh: \d+: ",
          r"Batch script contains DOS line breaks",                      # sbatch refuses it
          r"/usr/bin/env: ['\u2018](?P<interp>[\w.-]+)\\r['\u2019]: No such file or directory"],
         "the launch script has Windows (CRLF) line endings, or a space after a line-ending "
         "backslash (or the backslash is missing): each continued line became its own "
         "command, so the launcher got a stray '\\r' and the training flags never reached the "
         "script",
         "convert the script to Unix line endings (dos2unix script.sh, or sed -i 's/\\r$//' "
         "script.sh) and keep nothing after a line-ending backslash",
         SETUP, "`$'\\r': command not found`, `'\\r'] exits with return code`, `script.sh: line "
         "N: --flag: command not found` (or `key=value: command not found`: an argument run as "
         "a command), dash's `: not foundscript.sh: N: ...` (a '\\r' in the name)",
         suppresses=("python-module-missing",)),
    # the same dash message read from a file: the '\r' splits it, ': not found' on a line of
    # its own below `script.sh: N: name`
    sig("script-crlf", "shell script with Windows line endings",
         [r"^: not found\s*$"],
         "the launch script has Windows (CRLF) line endings: every command's name ends in a "
         "stray '\\r', so the shell finds none of them",
         "convert the script to Unix line endings (dos2unix script.sh, or sed -i 's/\\r$//' "
         "script.sh)",
         SETUP, "dash's `: not found` on a line of its own just below `script.sh: N: ...`",
         near=r"\.sh: \d+: ", suppresses=("python-module-missing",)),
    sig("ssh-unreachable", "a launcher cannot ssh to a node",
         [(r"ssh: connect to host (?P<host>\S+) port \d+: (?:Connection timed out|Connection "
           r"refused|No route to host)"),
          r"Permission denied \(publickey", r"Host key verification failed",
          r"but host=(?P<host>\S+) was not reachable via ssh",                  # DeepSpeed
          r"Command '\[?'?ssh .*\bhostname(?: -I)?'(?:\]')? returned non-zero exit status 255"],
         lambda h: ("the launcher starts the other nodes over ssh (a hostfile: DeepSpeed's "
                    "pdsh, a project's own script) and could not log into "
                    f"{h.group('host') or 'a node'}: no route or port 22 closed, no "
                    "passwordless key, or an unknown host key"),
         "set up passwordless ssh from the first node to every host in the hostfile (ssh HOST "
         "true must work without a prompt), or start one meshrun run on each node instead: "
         "it needs no ssh",
         SETUP, "`ssh: connect to host H port 22: Connection timed out|refused`, `Permission "
         "denied (publickey)`, `Host key verification failed`"),
    sig("host-unresolvable", "a launcher's host name does not resolve",
         [(r"ssh: Could not resolve hostname (?P<host>[^\s:]+)(?::(?P<slots>\d+))?: (?:Name or "
           r"service not known|Temporary failure in name resolution|nodename nor servname "
           r"provided)")],
         lambda h: (f"the launcher passed {h.group('host')}:{h.group('slots')} (host:slots, "
                    "as horovodrun's -H writes it) to an Open MPI too old to read that form: it "
                    "took the whole as a host name and tried to ssh to it"
                    if h.group("slots") else
                    f"the launcher was given the host name {h.group('host')} (a hostfile, "
                    "a host list) and this machine cannot resolve it to an address: a "
                    "placeholder left in the hostfile, or a node or pod name that is not in "
                    "DNS or /etc/hosts here"),
         lambda h: ("upgrade Open MPI (4.x reads host:slots), or give the slots another way "
                    "(a hostfile with 'host slots=N')" if h.group("slots") else
                    "put names that resolve here in the hostfile (check with getent hosts NAME), "
                    "or their IP addresses; for pods, a headless Service gives each one a DNS "
                    "name; or start one meshrun run on each node instead, which needs no "
                    "hostfile"),
         SETUP, "ssh's `Could not resolve hostname H: Name or service not known` from a "
         "launcher (a hostfile, pdsh, mpirun, DeepSpeed's runner in the logs; not git's ssh), and "
         "`H:N` with mpirun's or horovodrun's words (host:slots given to an Open MPI that does not "
         "read it)",
         confirm=host_launcher_context,
         suppresses=("ssh-unreachable", "hostname-lookup-failed")),
    sig("hostname-lookup-failed", "`hostname -I` unsupported",
         [r"Command '\['hostname -I'\]' returned non-zero exit status",
          r"hostname: invalid option -- 'I'", r"hostname: illegal option -- I",
          # DeepSpeed's runner, when the first node's `hostname -I` printed nothing
          r"Using IP address of  for node \S+"],
         "the launcher asked `hostname -I` for a node's address (DeepSpeed's runner and its "
         "MPI discovery do) and got none: this host's hostname command (GNU inetutils, macOS) "
         "has no -I option, or it printed no address (a container or pod)",
         "give the master address yourself (MASTER_ADDR / --master_addr, meshrun's "
         "--master-addr) so no discovery runs, or install the Debian/Ubuntu 'hostname' package "
         "whose hostname knows -I",
         SETUP, "`Command '['hostname -I']' returned non-zero exit status`, `hostname: invalid "
         "option -- 'I'`, macOS's `hostname: illegal option -- I`, DeepSpeed's `Using IP "
         "address of  for node X` (no address)",
         suppresses=("deepspeed-outside-launcher", "mpi4py-missing")),
    sig("network-download-failed", "cannot reach the download host",
         [r"Failed to resolve '(?P<site>[^']+)'",
          r"HTTPSConnectionPool\(host='(?P<site>[^']+)', port=\d+\): Max retries exceeded",
          r"We couldn't connect to '(?P<site>https?://[^']+)'",
          # transformers before huggingface_hub, then huggingface_hub's own words
          r"Connection error, and we cannot find the requested files in the cached path",
          r"An error happened while trying to locate the file on the Hub and we cannot find "
          r"the requested files in the local cache",
          r"<urlopen error \[Errno -?\d+\] (?:Temporary failure in name resolution|Name or "
          r"service not known|nodename nor servname provided|getaddrinfo failed)"],
         download_cause,
         "download the files beforehand to storage every node sees (huggingface-cli download "
         "..., HF_HOME on a shared volume) and set HF_HUB_OFFLINE=1 (HF_DATASETS_OFFLINE=1) in "
         "the job, or give the compute nodes a proxy",
         only_when_raised(SETUP), "`Failed to resolve 'huggingface.co'`, "
         "`HTTPSConnectionPool(...): Max retries exceeded`, `We couldn't connect to "
         "'https://huggingface.co'`, on the exception that ended the rank (a retry warning "
         "is advice)",
         suppresses=("master-dns-failure",)),
    # a name lookup that failed under an HTTP client's frames (a download: torch.hub,
    # torchvision's weights, the Hugging Face hub; or another web service), not the job's store
    sig("network-download-failed", "cannot reach the download host",
         [r"socket\.gaierror: \[Errno -?\d+\] (?:Temporary failure in name resolution|Name or "
          r"service not known|nodename nor servname provided|getaddrinfo failed)"],
         lambda h: (download_cause(h) if _DOWNLOADING.search(h.text) else
                    "this node cannot resolve the web host the script's HTTP client contacts "
                    "(a model or dataset download, a hub, a tracking server, an etcd "
                    "endpoint): compute nodes often have no internet access or no DNS for "
                    "outside names; it is not the job's master address"),
         "download the files beforehand to storage every node sees (torch.hub's TORCH_HOME, "
         "HF_HOME on a shared volume) and load them from there, or give the compute nodes a "
         "proxy; for another service, check its host name on the node (getent hosts NAME)",
         SETUP, "`socket.gaierror` under http.client's, urllib's, requests' or torch.hub's frames",
         near=r"[/\\]http[/\\]client\.py\b|[/\\]urllib3?[/\\]|[/\\]requests[/\\]|"
              r"torch[/\\]hub\.py|load_state_dict_from_url|download_url|huggingface_hub",
         suppresses=("master-dns-failure",)),
    sig("worker-bad-input", "a worker stopped with meshrun's own error",
         [(r"^meshrun: error: (?P<msg>.+?); fix: (?P<hint>.+?)"
           r"(?: \[(?P<said>[a-z0-9]+(?:-[a-z0-9]+)*)\])?$")],
         lambda h: h.match["msg"] + (f" [{h.match['said']}]" if h.match["said"] else ""),
         lambda h: h.match["hint"],
         SETUP, "`meshrun: error: ...; fix: ...` printed by a worker: a job config, "
         "MESHRUN_* variable or checkpoint the training side refused, or a recipe's loss "
         "that is not finite (`loss-not-finite`); the worker's own code ends the cause",
         worker_only=True),
    sig("python-module-missing", "a Python module is missing",
         [r"ModuleNotFoundError: No module named '(?P<mod>[\w.]+)'",
          r"ImportError: (?P<mod>TensorBoard) logging requires TensorBoard with Python summary "
          r"writer installed"],
         module_cause,
         "start the launcher from the environment that has the module (python -m "
         "torch.distributed.run, or meshrun from that environment: workers use meshrun's own "
         "interpreter), or install it there; one image or lock file for every node (meshrun's "
         "preflight compares installed packages across nodes)",
         SETUP, "`ModuleNotFoundError: No module named 'X'` for any other module; torch's "
         "`TensorBoard logging requires TensorBoard ...` (tensorboard)"),
    sig("accelerate-not-configured", "accelerate launch without a configuration",
         [r"'NoneType' object has no attribute 'lower'"],
         "accelerate launch found no configuration (accelerate config was never run on this "
         "machine, or its file is not where this user's HF_HOME points) and no flag for mixed "
         "precision, so its launcher read None",
         "run accelerate config once on every machine (or pass --config_file FILE, or "
         "--mixed_precision no|fp16|bf16 and the other flags), or let meshrun start the "
         "script: meshrun run --accelerate -- script.py",
         SETUP, "`AttributeError: 'NoneType' object has no attribute 'lower'` in accelerate's "
         "launch command (its frames just above)",
         near=r"accelerate[/\\]commands[/\\]launch\.py"),
    sig("launcher-not-found", "the launcher command is not on PATH",
         [(r"execve\(\): (?P<cmd>torchrun|deepspeed|accelerate|meshrun|horovodrun|mpirun|"
           r"python3?(?:\.\d+)?): No such file or directory"),
          (r"(?<![\w$'/])(?P<cmd>torchrun|deepspeed|accelerate|meshrun|horovodrun|mpirun|srun|"
           r"sbatch|salloc|python3?(?:\.\d+)?): (?:command )?not found"),
          (r"\bcommand (?P<cmd>torchrun|deepspeed|accelerate|meshrun|horovodrun|mpirun|"
           r"python3?) not found"),
          (r"command not found: (?P<cmd>torchrun|deepspeed|accelerate|meshrun|horovodrun|"
           r"mpirun|python3?)\b"),
          # PowerShell
          (r"The term '(?P<cmd>torchrun|deepspeed|accelerate|meshrun|horovodrun|mpirun|python3?)' "
           r"is not recognized as the name of a cmdlet")],
         lambda h: (f"'{h.group('cmd')}' is SLURM's own command, and this machine has none: "
                    "it is not a SLURM cluster's login node (or SLURM's bin folder is not on "
                    "PATH here), so a script written for SLURM cannot submit from it"
                    if h.group("cmd") in ("sbatch", "salloc", "srun") else
                    f"the command '{h.group('cmd')}' is not on the PATH where the job step "
                    "runs: the environment that has it (a virtualenv or conda environment, a "
                    "module, a container) is not activated there (srun, ssh and a batch "
                    "script start a fresh shell), or it is not installed in that environment"),
         "activate the environment in the job script itself before the launch (source "
         "venv/bin/activate, conda activate, module load; meshrun render slurm --setup does "
         "it), or call the launcher by its full path (python -m torch.distributed.run for "
         "torchrun)",
         SETUP, "slurmstepd's `execve(): X: No such file or directory`, the shells' `torchrun: "
         "command not found`, `command not found: torchrun` (a launcher or python by its "
         "bare name)"),
    sig("slurm-autodetect", "a framework set up a distributed job for one process",
         [r"Cannot initialize distributed with distributed_world_size=1"],
         "fairseq set up a distributed job by itself for a run of one process: it found "
         "SLURM's variables (SLURM_NODELIST, SLURM_NTASKS: a plain run inside an sbatch or "
         "salloc allocation inherits them; it reads them when --distributed-port is set) or "
         "a launcher's (MASTER_ADDR, RANK, WORLD_SIZE=1: one process started by torchrun or "
         "meshrun)",
         "tell it not to (fairseq: --distributed-port -1, and no launcher for one process: "
         "plain python), or start as many processes as --distributed-world-size says",
         SETUP, "fairseq's `Cannot initialize distributed with distributed_world_size=1`"),
    sig("nccl-library-shadowed", "an older NCCL loaded ahead of torch's",
         [r"libtorch_cuda\.so: undefined symbol: (?P<sym>nccl\w+)",
          r"libtorch_cuda\.so[^:\n]*: undefined symbol: (?P<sym>nccl\w+)"],
         lambda h: (f"torch was built against a newer NCCL than the libnccl this process loaded "
                    f"({h.group('sym')} is missing from it): another libnccl comes first — a "
                    "second nvidia-nccl-cu* wheel (cu11 beside cu12), a library that bundles its "
                    "own (cupy, an older container's /usr/lib), or LD_LIBRARY_PATH"),
         "keep one NCCL: pip list | grep -i nccl and uninstall the wheel torch does not "
         "require (pip show torch names it), unset LD_LIBRARY_PATH entries with another "
         "libnccl.so, import torch before libraries that load their own NCCL",
         SETUP, "`libtorch_cuda.so: undefined symbol: ncclCommRegister` (any `nccl*` symbol)",
         suppresses=("torch-abi-mismatch",)),
    # Windows' words for an extension's missing symbol (not torch's own DLLs: a broken torch)
    sig("torch-abi-mismatch", "extension built for another torch",
         [r"\[WinError 127\] The specified procedure could not be found"],
         abi_cause, _ABI_FIX,
         SETUP, "Windows' `[WinError 127] The specified procedure could not be found` (not for "
         "torch's own `torch\\lib` DLLs)", exclude=r"torch[/\\]lib[/\\]"),
    sig("mkl-too-new-for-torch", "an MKL newer than this torch",
         [r"undefined symbol: iJIT_NotifyEvent"],
         "this torch's libtorch_cpu.so needs iJIT_NotifyEvent, which Intel's MKL removed in "
         "2024.1: the environment has an MKL newer than the one this torch was built with "
         "(conda puts it beside a torch from the pytorch channel)",
         "install MKL 2024.0 (conda install mkl==2024.0, or pip install mkl==2024.0), or a torch "
         "from pip, whose wheels bring the MKL they were built with",
         SETUP, "`libtorch_cpu.so: undefined symbol: iJIT_NotifyEvent`",
         suppresses=("torch-abi-mismatch",)),
    sig("torch-abi-mismatch", "extension built for another torch",
         [r"(?P<so>/\S+\.so)[^:]*: undefined symbol: (?P<sym>\S+)",
          r"undefined symbol: (?P<sym>\S+)",
          (r"DLL load failed while importing (?P<so>\w+): The specified procedure could not be "
           r"found"),
          r"Symbol not found: (?P<sym>__ZN(?:3c10|2at|5torch)\S*|_torch_\w+)",  # macOS, torch's
          r"Couldn't load custom C\+\+ ops\. This can happen if your PyTorch and torchvision"],
         abi_cause,
         _ABI_FIX,
         SETUP, "`ImportError: ...so: undefined symbol: ...`"),
    sig("cuda-driver-too-old", "NVIDIA driver too old",
         [r"The NVIDIA driver on your system is too old \(found version (?P<ver>\d+)\)",
          r"CUDA driver version is insufficient for CUDA runtime version",
          # PTX built by a newer CUDA than this driver's JIT compiler knows (CUDA error 222)
          r"the provided PTX was compiled with an unsupported toolchain",
          # a container's newer CUDA on a host driver without forward compatibility (error 804)
          r"forward compatibility was attempted on non supported HW"],
         driver_cause,
         "update the NVIDIA driver on this node, or install a torch built for an older CUDA "
         "(e.g. pip install torch --index-url https://download.pytorch.org/whl/cu118)",
         SETUP, "`The NVIDIA driver on your system is too old (found version N)`, "
         "`CUDA driver version is insufficient`", suppresses=("cuda-init-failed",)),
    sig("cuda-init-failed", "CUDA unavailable",
         [r"No CUDA GPUs are available", r"no CUDA-capable device is detected",
          r"Found no NVIDIA driver on your system", r"CUDA driver initialization failed",
          r"CUDA-capable device\(s\) is/are busy or unavailable",
          r"all CUDA-capable devices are busy or unavailable",
          r"CUDA initialization: CUDA unknown error"],
         "CUDA could not start on this node: no GPU visible to the process "
         "(CUDA_VISIBLE_DEVICES empty or wrong, a container without --gpus), no "
         "driver, or GPUs held in exclusive mode by another process",
         "check nvidia-smi on the node and CUDA_VISIBLE_DEVICES in the rank's "
         "environment; in Docker pass --gpus all; let meshrun set the devices",
         SETUP, "`No CUDA GPUs are available`, `no CUDA-capable device is detected`, `Found no "
         "NVIDIA driver`, `busy or unavailable`"),
    sig("gpu-not-visible", "torch sees no GPU",
         [r"But your machine only has: \[\]",
          r"ProcessGroupNCCL is only supported with GPUs, no GPUs found"],
         "the script asks for GPUs but torch sees none: this torch is a CPU-only build, or "
         "CUDA cannot start here (no driver, a container without --gpus, "
         "CUDA_VISIBLE_DEVICES empty); the message alone does not say which",
         "python -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())' in the "
         "workers' environment: None means a CPU-only torch (install a CUDA build), False "
         "with a version means the driver or the container (nvidia-smi, --gpus all); on a CPU "
         "run make the script follow the plan (meshrun.init_distributed().device)",
         SETUP, "Lightning's `You requested GPUs: [0] But your machine only has: []`, "
         "`ProcessGroupNCCL is only supported with GPUs, no GPUs found`", names_cause=False),
    sig("gpu-hardware-error", "GPU hardware error",
         [r"uncorrectable ECC error encountered", r"GPU has fallen off the bus",
          r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+)", r"uncorrectable NVLink error",
          r"Unable to determine the device handle for GPU \S+: (?:GPU is lost|Unknown Error)"],
         "the GPU reported a hardware fault (ECC, NVLink, Xid, fell off the bus); the software "
         "is not at fault",
         "take the node out of the pool (SLURM: --exclude, Kubernetes: cordon), check "
         "nvidia-smi -q -d ECC and the kernel log (dmesg | grep Xid), and reset or replace the GPU",
         SETUP, "`uncorrectable ECC error`, `GPU has fallen off the bus`, `NVRM: Xid`"),
    sig("invalid-device-ordinal", "invalid GPU index",
         [r"invalid device ordinal"],
         "this rank asked for a GPU index this node does not have: more processes than "
         "visible GPUs, or the script used the global RANK (or a fixed cuda:N) where it needs "
         "LOCAL_RANK",
         "call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) (or meshrun.init_distributed"
         "()), and let meshrun choose the processes per node from the visible GPUs",
         SETUP, "`CUDA error: invalid device ordinal`"),
    sig("duplicate-gpu", "two ranks on one GPU",
         [(r"Duplicate GPU detected : rank (?P<rank>\d+) and rank (?P<other>\d+) both on CUDA "
          r"device (?P<bus>\w+)")],
         dup_gpu_cause,
         "call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before creating the process "
         "group (meshrun.init_distributed() does), and do not pin CUDA_VISIBLE_DEVICES to one GPU "
         "per node",
         SETUP, "NCCL's `Duplicate GPU detected : rank A and rank B both on CUDA device X`",
         suppresses=("nccl-invalid-usage",)),
    sig("port-in-use", "port already in use",
         [r"meshrun: error: port (?P<port>\d+) on this host \(node 0\) is already in use",
          r"port: (?P<port>\d+), useIpv6: \w+, code: -98, name: EADDRINUSE",
          r"EADDRINUSE", r"[Aa]ddress already in use", r"\[Errno 98\]",
          # Windows (WSAEADDRINUSE), in English and as its number beside a localised text
          r"Only one usage of each socket address", r"\(system error: 10048 - "],
         port_cause,
         meshrun_fix("choose another --master-port (or let meshrun pick one), or find the "
                      "process holding it with 'ss -ltnp'"),
         SETUP, "`EADDRINUSE`, `Address already in use`, `[Errno 98]`, meshrun's `port N ... is "
         "already in use` (torch's own words also name a second node started with node 0's "
         "rank)", exclude=r"ignoring the error", also=("duplicate-node-rank",)),
    sig("port-privileged", "a port below 1024",
         [r"Permission denied: The server socket has failed to bind to \[?[\w:.]*\]?:"
          + _LOW_PORT + r"\b",
          r"failed to bind to \[?[\w:.]*\]?:" + _LOW_PORT + r" \(errno: 13 - Permission denied\)",
          r"port: " + _LOW_PORT + r", .*code: -13, name: EACCES"],
         lambda h: (f"the master port {h.group('port')} is below 1024, where only root may "
                    "listen: a script that picks a random port ($RANDOM gives 0-32767) can "
                    "land there"),
         meshrun_fix("use a port from 1024 to 65535 (29500 is the usual one), or let meshrun "
                      "pick a free one"),
         SETUP, "c10d's `Permission denied: The server socket has failed to bind to [::]:N`, "
         "`failed to bind to H:N (errno: 13 - Permission denied)`, libuv's `port: N, ... code: "
         "-13, name: EACCES`, with N below 1024"),
    # torch 1.x's store said no more than this; the port is on the launch command
    sig("port-privileged", "a port below 1024",
         [r"RuntimeError: Permission denied\"?,?$"],
         lambda h: ("the master port" + said(h.text, r"--master[-_]port[= ]" + _LOW_PORT + r"\b",
                                             " {}")
                    + " is below 1024, where only root may listen: the store could not open it"),
         meshrun_fix("use a port from 1024 to 65535 (29500 is the usual one), or let meshrun "
                      "pick a free one"),
         SETUP, "torch 1.x's bare `RuntimeError: Permission denied` from a launch whose "
         "`--master_port` is below 1024",
         confirm=r"--master[-_]port[= ]" + _LOW_PORT + r"\b"),
    sig("master-dns-failure", "master address does not resolve",
         [r"meshrun: error: the master address (?P<target>\S+) does not resolve",
          (r"network addresses of \((?P<target>[^,()]+), (?P<port>\d+)\) cannot be retrieved "
          r"\(gai error: -?\d+ - (?:Name or service not known|Temporary failure in name "
          r"resolution|No address associated with hostname)\)"),
          (r"socket\.gaierror: \[Errno -?\d+\] (?:Name or service not known|Temporary failure "
          r"in name resolution|nodename nor servname provided)"),
          r"getaddrinfo failed",
          r"host not found: (?:Name or service not known|Temporary failure in name resolution)",
          r"TCPStore.*(?:Name or service not known|Temporary failure in name resolution)",
          r"rendezvous.*(?:Name or service not known|Temporary failure in name resolution)",
          r"MASTER_ADDR.*(?:Name or service not known|Temporary failure in name resolution)",
          (r"failed to connect/validate to host (?P<target>[^\s:\[\]]+):(?P<port>\d+) - "
           r"(?:Name or service not known|Temporary failure in name resolution)")],
         dns_cause,
         meshrun_fix("check the name on this node (getent hosts NAME); on Kubernetes check the "
                      "headless Service and the pod's subdomain; or pass node 0's IP address "
                      "as --master-addr"),
         SETUP, "torch's `cannot be retrieved (gai error: ... Name or service not known)` "
         "together with a failed connect to the same host, `socket.gaierror`, meshrun's `does "
         "not resolve`",
         confirm=r"(?:trying to connect to \(|failed to connect to \(?|to host |master address )"
                 r"\[?{target}\b",
         suppresses=("rendezvous-connection-error", "master-unreachable")),
    sig("master-dns-failure", "master address does not resolve",
         [(r"network addresses of \((?P<target>[^,()]+), (?P<port>\d+)\) cannot be retrieved "
           r"\(gai error: -3 - Temporary failure in name resolution\)")],
         dns_cause,
         meshrun_fix("make the name resolve on every node (getent hosts NAME; a machine's own "
                      "host name in /etc/hosts), or pass node 0's IP address as --master-addr"),
         SETUP, "torch's `cannot be retrieved (gai error: -3 - Temporary failure in name "
         "resolution)`: the lookup itself failed (not only the IPv6 record missing)",
         suppresses=("rendezvous-connection-error", "master-unreachable")),
    sig("address-family-mismatch", "IPv4/IPv6 mismatch",
         [r"gaierror: \[Errno -9\] Address family for hostname not supported",
          r"(?:OSError|socket\.error): \[Errno 97\] Address family not supported by protocol",
          r"ss1\.ss_family == ss2\.ss_family\. \d+ vs \d+"],
         "the master address resolves only to IPv6 (or only IPv4) while the socket was opened "
         "for the other family",
         "pass an IPv4 address as --master-addr (or a name with an A record); for NCCL/Gloo set "
         "NCCL_SOCKET_FAMILY=AF_INET or the interface with NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME",
         SETUP, "`socket.gaierror: [Errno -9] Address family for hostname not supported`, "
         "`OSError: [Errno 97] Address family not supported by protocol` (not torch's warning "
         "with the same words, printed whenever it tries IPv6 first)"),
    sig("duplicate-rank", "two processes with one rank",
         [r"initializing ddp: GLOBAL_RANK: (?P<rank>\d+), MEMBER: \d+/(?P<world>\d+)"],
         lambda h: (f"two processes started as global rank {h.group('rank')} of "
                    f"{h.group('world')}: the launcher started more processes than the script's "
                    "world (SLURM --nodes/--ntasks-per-node not matching the Trainer's num_nodes "
                    "x devices, or srun around a launcher that starts its own processes), so "
                    "the ranks collide and the job hangs or fails"),
         "start one task per device with SLURM (--nodes=N --ntasks-per-node=devices) and the "
         "same num_nodes/devices in the Trainer, or one meshrun per node (meshrun render slurm "
         "writes it)",
         SETUP, "Lightning's `initializing ddp: GLOBAL_RANK: r, MEMBER: k/N` printed twice for "
         "one rank with no failure between (a restart announces it again)",
         confirm=(r"GLOBAL_RANK: {rank}, MEMBER: (?:(?!Traceback|Error|restart|Restart)"
                  r"[\s\S])*?GLOBAL_RANK: {rank}, MEMBER: ")),
    sig("duplicate-node-rank", "two nodes with one rank",
         [(r"meshrun: error: node rank (?P<node>\d+) is already taken by (?P<holder>.+?): two "
          r"nodes were given the same rank")],
         lambda h: (f"two nodes were started as node {h.group('node')}; the other one is "
                    f"{h.group('holder')}"),
         meshrun_fix("give every node its own rank 0..N-1 (check NODE_RANK/RANK on each node)"),
         SETUP, "meshrun's `node rank N is already taken by ...`"),
    sig("store-other-job", "another job's store",
         [(r"meshrun: error: the store at (?P<where>\S+) belongs to run '(?P<theirs>[^']*)', not "
          r"to this run '(?P<ours>[^']*)'")],
         lambda h: (f"the store at {h.group('where')} belongs to run {h.group('theirs')!r}: two "
                    "jobs use the same master address and port, or the nodes of one job got "
                    "different run ids"),
         meshrun_fix("give each job its own --master-port, and the same --run-id on all nodes "
                      "of one job"),
         SETUP, "meshrun's `the store at ... belongs to run 'A', not to this run 'B'`"),
    sig("too-many-nodes", "more nodes than expected",
         [(r"meshrun: error: (?P<joined>\d+) nodes joined the store at (?P<where>\S+) but the job "
          r"has (?P<nnodes>\d+)"),
          # NVIDIA's ft_launcher (torchrun's successor in nvidia-resiliency-ext)
          (r"Maximum number of nodes \((?P<nnodes>\d+)\) exceeded\. Active participant count "
           r"would be (?P<joined>\d+)")],
         lambda h: (f"{h.group('joined')} nodes joined a job of {h.group('nnodes')}: two jobs "
                    "share the master address and port, the node count differs between nodes, "
                    "or spare nodes were started with a fixed node count (a spare needs a "
                    "range: --nnodes N:N+S)"),
         meshrun_fix("give every job its own --master-port and check --nnodes on every node "
                     "(with spares, a range: --nnodes N:N+S)"),
         SETUP, "meshrun's `N nodes joined the store at ... but the job has M`, ft_launcher's "
         "`Maximum number of nodes (M) exceeded. Active participant count would be N`"),
    # -- fault ------------------------------------------------------------------------------
    sig("cuda-oom", "CUDA out of memory",
         [(r"CUDA out of memory\.(?: Tried to allocate (?P<size>[\d.]+ [KMGT]?i?B)\.?)?"
          r"(?: GPU (?P<gpu>\d+) has a total capac?i?ty of (?P<total>[\d.]+ [KMGT]?i?B) of which "
          r"(?P<free>[\d.]+ [KMGT]?i?B|0 bytes) is free)?"
          r"(?: \(GPU (?P<gpu_old>\d+); (?P<total_old>[\d.]+ [KMGT]?i?B) total capacity; "
          r"[^;]*; (?P<free_old>[\d.]+ [KMGT]?i?B) free)?"),
          r"CUBLAS_STATUS_ALLOC_FAILED",
          r"cuda runtime error \(2\) : out of memory",           # torch <= 1.0 (THC)
          r"THCudaCheck FAIL file=\S+ line=\d+ error=2 : out of memory",
          r"MPS backend out of memory"],                        # Apple GPUs
         oom_cause, oom_fix,
         FAULT, "`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate X`, "
         "`CUBLAS_STATUS_ALLOC_FAILED`"),
    sig("cuda-alloc-failed", "the CUDA runtime could not allocate",
         [r"CUDA error: out of memory"],
         "the CUDA runtime itself could not allocate memory (not torch's caching allocator, "
         "which says how much it tried): the GPU is full or held by other processes, the "
         "context did not fit, or under WSL2 the memory given to the VM ran out",
         "check nvidia-smi for other processes on the GPU and the memory the job needs; "
         "under WSL2 raise memory= in .wslconfig; rerun with CUDA_LAUNCH_BLOCKING=1 to see "
         "which call failed",
         FAULT, "the CUDA runtime's `CUDA error: out of memory` (its causes differ: it names "
         "where to look)", names_cause=False),
    # at the process's first use of the GPU (CUDA starting, the model built or moved onto it):
    # the context itself did not fit, the GPU was full before this process came
    sig("cuda-alloc-failed", "the GPU was full before the job started",
         [r"CUDA error: out of memory"],
         "the CUDA runtime could not allocate at this process's first use of the GPU (CUDA "
         "starting, the model built or moved onto it), before any training: the GPU was "
         "already full, held by other processes (another job or user, a process left over "
         "from an earlier run), or several ranks were put on the same GPU",
         "nvidia-smi on the node: stop what holds the GPU or pick a free one "
         "(CUDA_VISIBLE_DEVICES); let meshrun give each rank its own GPU",
         SETUP, "the CUDA runtime's `CUDA error: out of memory` whose own traceback is CUDA's "
         "start-up (`_lazy_init`, `set_device`) or the model being built or moved (a module's "
         "`__init__`, `_apply`)",
         near=r"in _lazy_init|in set_device|in _apply\b|torch/nn/modules/\S+\", line \d+, "
              r"in __init__"),
    sig("host-oom-killed", "killed (host out of memory)",
         [r"Signal 9 \(SIGKILL\) received by PID", r"^\s*exitcode\s*:\s*-9 \(pid",
          r"failed \(exitcode: -9\) local_rank", r"exits with return code = -9\b",
          killed_by("SIGKILL"), r"Out of memory: Kill(?:ed)? process (?P<pid>\d+)",
          r"Memory cgroup out of memory", r"\boom-kill(?:er)?\b", r"^Killed$",
          r"is killed by signal: Killed",
          r"process \d+ terminated with signal SIGKILL",     # torch.multiprocessing.spawn
          r"exit code 137 \(interrupted by signal 9: ?SIGKILL\)",
          r"exited on signal 9 \(Killed\)",                   # mpirun
          r"died with <Signals\.SIGKILL: 9>",                  # subprocess (launchers)
          r"line \d+: +\d+ Killed +\S"],                       # a shell's job report
         "the process was killed with SIGKILL and left no Python traceback: almost always the "
         "kernel's out-of-memory killer (host RAM or the container's memory limit), sometimes "
         "the scheduler",
         "check the node's kernel log (dmesg -T | grep -i -e oom -e killed) or the pod's "
         "OOMKilled status; use fewer DataLoader workers, load data lazily, or raise the memory "
         "limit",
         FAULT, "`exitcode : -9` / `Signal 9 (SIGKILL)` in the root cause, meshrun's `was killed "
         "by SIGKILL`, the kernel's `Out of memory: Killed process`, a bare `Killed` or a "
         "shell's `line N: PID Killed ...`, `torch.multiprocessing.spawn`'s `process N "
         "terminated with signal SIGKILL`, `exit code 137 (interrupted by signal 9: SIGKILL)`, "
         "mpirun's `exited on signal 9 (Killed)`, `died with <Signals.SIGKILL: 9>`"),
    sig("job-time-limit", "the scheduler's time limit reached",
         [r"CANCELLED AT \S+ DUE TO TIME LIMIT", r"JOB CANCELLED DUE TO TIME LIMIT",
          r"PBS: job killed: walltime \d+ exceeded limit \d+",                 # PBS, Torque
          r"job exceeded wallclock limit",                                     # Moab
          r"TERM_RUNLIMIT: job killed after reaching LSF run time limit"],     # LSF
         time_limit_cause,
         "ask for more time (SLURM: #SBATCH --time=...; PBS: -l walltime=...; LSF: bsub -W), "
         "or checkpoint regularly and resubmit (meshrun resumes from the last checkpoint; "
         "SLURM's #SBATCH --signal=USR1@120 warns the job before the end)",
         FAULT, "slurmstepd's `*** JOB N ON host CANCELLED AT time DUE TO TIME LIMIT ***`, PBS's "
         "`job killed: walltime N exceeded limit M`, Moab's `job exceeded wallclock limit`, "
         "LSF's `TERM_RUNLIMIT`",
         suppresses=("host-oom-killed", "segfault")),
    sig("host-oom-killed", "killed (over SLURM's memory limit)",
         [r"exceeded memory limit \(\d+ > \d+\), being killed",
          r"Exceeded job memory limit(?! at some point)", r"task \d+: Out Of Memory"],
         "the job used more memory than SLURM gave it (--mem, --mem-per-cpu or the "
         "partition's default), and slurmstepd killed it",
         "ask for more memory (#SBATCH --mem=... or --mem-per-cpu=...; sacct -j JOB -o "
         "MaxRSS shows what it used), or use less: fewer DataLoader workers, data loaded "
         "lazily",
         FAULT, "slurmstepd's `Job N exceeded memory limit (A > B), being killed`, `Exceeded job "
         "memory limit`, srun's `task N: Out Of Memory`"),
    sig("shm-not-writable", "/dev/shm not writable",
         [r"shm_open failed : Permission denied"],
         "this process may not create files in /dev/shm (its permissions, a read-only mount, or "
         "a container or sandbox without one): NCCL's shared-memory transport cannot make its "
         "segments; a full /dev/shm says 'No space left on device' instead",
         "make /dev/shm a writable tmpfs for the job (Docker: --ipc=host or --shm-size=16g; "
         "Kubernetes: an emptyDir with medium: Memory at /dev/shm; on the host: chmod 1777 "
         "/dev/shm), or NCCL_SHM_DISABLE=1 to do without it",
         SETUP, "NCCL's `Call to shm_open failed : Permission denied`",
         suppresses=("shm-too-small", "nccl-system-error")),
    sig("shm-not-writable", "/dev/shm not writable",
         [r"(?:OSError|PermissionError): \[Errno 13\] Permission denied$",
          r"OSError: \[Errno 38\] Function not implemented$",
          r"FileNotFoundError: \[Errno 2\] No such file or directory$"],
         "Python's multiprocessing could not create a POSIX semaphore: they live in /dev/shm, "
         "which is missing or not writable here (a sandbox such as AWS Lambda or proot, a "
         "container without one, or its permissions); DataLoader workers and multiprocessing "
         "locks need it",
         "give the job a writable /dev/shm (Docker: --ipc=host; Kubernetes: an emptyDir with "
         "medium: Memory at /dev/shm; a sandbox: bind a writable folder there), or run "
         "without worker processes (DataLoader num_workers=0)",
         SETUP, "`OSError: [Errno 13] Permission denied` or `[Errno 38] Function not "
         "implemented` raised by a multiprocessing semaphore (`SemLock` in the traceback)",
         confirm=r"SemLock", suppresses=("shm-too-small",)),
    sig("shm-too-small", "shared memory too small",
         [r"unable to write to file </torch_\w+>", r"insufficient shared memory \(shm\)",
          r"shm\.h:\d+ NCCL WARN Call to posix_fallocate failed ?: No space left on device",
          r"DataLoader worker \(pid \d+\) is killed by signal: Bus error",
          r"No space left on device: '/dev/shm/",
          r"out of shared memory", r"Signal 7 \(SIGBUS\) received by PID",
          r"^\s*exitcode\s*:\s*-7 \(pid", killed_by("SIGBUS"), r"^Bus error\b",
          r"failed \(exitcode: -7\) local_rank", r"exits with return code = -7\b",

          r"Error while creating shared memory segment", (r"unable to (?:open|allocate) shared "
          r"memory"), r"failed to extend /dev/shm/\S+ to \d+ bytes"],
         "/dev/shm is too small for the DataLoader workers, their semaphores, or NCCL's "
         "shared-memory transport: "
         "containers get 64 MB by default",
         "run the container with --ipc=host or --shm-size=16g (Kubernetes: an emptyDir with "
         "medium: Memory mounted at /dev/shm), or use fewer DataLoader workers",
         FAULT, "`unable to write to file </torch_...>`, `insufficient shared memory (shm)`, "
         "SIGBUS / `Bus error`, NCCL's `Error while creating shared memory segment`",
         suppresses=("disk-full", "nccl-system-error")),
    # Semaphores and shared tensors live in /dev/shm: "No space left on device" from a
    # multiprocessing lock or a /dev/shm path is the container's shm, not the disk.
    sig("shm-too-small", "shared memory too small",
         [r"No space left on device(?!: '(?!/dev/shm))"],
         "/dev/shm is full: the DataLoader workers' semaphores and shared tensors live there, "
         "and containers get 64 MB by default (the disk itself may have room)",
         "run the container with --ipc=host or --shm-size=16g (Kubernetes: an emptyDir with "
         "medium: Memory mounted at /dev/shm), or use fewer DataLoader workers",
         FAULT, "`No space left on device` from a multiprocessing semaphore (`SemLock` in the "
         "traceback), not naming a path outside /dev/shm",
         confirm=r"_multiprocessing\.SemLock|SemLock\.__init__", suppresses=("disk-full",)),
    sig("disk-full", "disk full",
         [r"\[Errno 28\] No space left on device: '(?P<path>[^']+)'", r"No space left on device",
          r"Disk quota exceeded", r"\[Errno 122\]",
          r"write\(\): fd \d+ failed with (?:Input/output error|No space left)",
          r"PytorchStreamWriter failed writing file \S+: file write failed",
          r"\[enforce fail at inline_container\.cc:\d+\] \. unexpected pos \d+ vs \d+"],
         space_cause,
         "free space or write checkpoints elsewhere (--checkpoint-dir on a larger filesystem); "
         "keep fewer checkpoints; check df -h and quotas on every node",
         FAULT, "`No space left on device`, `Disk quota exceeded`, torch.save's "
         "`PytorchStreamWriter failed writing file ...: file write failed` (a write that fails "
         "half way: the disk or quota ran out)"),
    sig("checkpoint-unwritable", "a checkpoint file cannot be created",
         [r"RuntimeError: File (?P<path>\S+) cannot be opened\.?$",
          r"RuntimeError: Parent directory (?P<parent>.+?) does not exist\.?\s*$"],
         lambda h: (f"torch.save could not create a file in {h.group('parent')}: that folder "
                    "does not exist as torch sees it (save does not create folders; on Windows a "
                    "path with non-ASCII characters can fail so too)" if h.group("parent") else
                    f"torch.save could not create {h.group('path') or 'the checkpoint file'}: "
                    "its folder does not exist (save does not create folders), this process may "
                    "not write there, or the disk is full"),
         "create the folder first (os.makedirs(folder, exist_ok=True)), check its permissions "
         "and the free space (df -h) on every node that saves",
         FAULT, "torch.save's `RuntimeError: File X cannot be opened.` (its text names the three "
         "causes), `RuntimeError: Parent directory X does not exist.`", also=("disk-full",)),
    # older torch: open() itself raises, inside torch.save (its frames just above)
    sig("checkpoint-unwritable", "a checkpoint file cannot be created",
         [(r"(?:FileNotFoundError|IOError): \[Errno 2\] No such file or directory: "
           r"'(?P<path>[^']+)'")],
         lambda h: (f"torch.save could not create {h.group('path')}: its folder does not exist "
                    "(save does not create folders)"),
         "create the folder first (os.makedirs(folder, exist_ok=True)) on every node that "
         "saves, or save under a folder that exists",
         FAULT, "`FileNotFoundError: [Errno 2] No such file or directory: 'X'` raised inside "
         "torch.save (its traceback's `serialization.py ... in save` frames)",
         # save's own frame (torch.load also opens through _open_file_like)
         near=r"serialization\.py\"?, line \d+, in (?:save|_with_file_like)\b"),
    sig("path-not-writable", "a path the job writes is not writable",
         [(r"(?:(?:PermissionError|OSError): |^)\[Errno 13\] Permission denied: "
           r"'(?P<path>(?!/(?:dev|proc|sys)/)[^']+)'"),
          r"OSError: \[Errno 30\] Read-only file system: '(?P<ro>(?!/(?:dev|proc|sys)/)[^']+)'"],
         lambda h: (f"this process may not create or write {h.group('path') or h.group('ro')}"
                    + (" (a read-only file system)" if h.group("ro") else
                       ": it does not exist and its parent is not writable by this user, or it "
                       "belongs to another user")
                    + "; often a script's default output or checkpoint folder (/data, /mnt/...) "
                    "that exists on its author's machine only"),
         "point the script's output and checkpoint folders at a path this user can write on "
         "every node (a shared one for checkpoints), or create it with the right owner first",
         unless_warning(SETUP), "`PermissionError: [Errno 13] Permission denied: '/data'` (or "
         "OSError's, or a line that is only `[Errno 13] ...`), "
         "`OSError: [Errno 30] Read-only file system: ...` (not under /dev, /proc or /sys: "
         "devices and /dev/shm have their own causes; advice only in a warning)"),
    sig("too-many-open-files", "too many open files",
         [r"Too many open files", r"\[Errno 24\]", r"received \d+ items of ancdata"],
         "the process hit its open-file limit: DataLoader workers pass tensors through file "
         "descriptors, one per shared tensor",
         "raise the limit (ulimit -n 1048576 in the job script, LimitNOFILE for services), or "
         "torch.multiprocessing.set_sharing_strategy('file_system')",
         FAULT, "`Too many open files`, `[Errno 24]`, `received 0 items of ancdata`"),
    sig("segfault", "segmentation fault",
         [r"Signal 11 \(SIGSEGV\) received by PID", r"^\s*exitcode\s*:\s*-11 \(pid",
          r"failed \(exitcode: -11\) local_rank", r"exits with return code = -11\b",
          killed_by("SIGSEGV"), r"Segmentation fault", r"Fatal Python error: Segmentation",
          r"process \d+ terminated with signal SIGSEGV",      # torch.multiprocessing.spawn
          r"exit code 139 \(interrupted by signal 11: ?SIGSEGV\)",
          # Windows: an access violation (0xC0000005) is its segmentation fault
          r"code -1073741819 \(0xC0000005\)", r"exit status 3221225477",
          r"^Exception code: 0xc0000005$",                    # Windows' event log
          r"\bsegfault at [0-9a-f]+ ip [0-9a-f]+ sp "],
         "the process crashed in native code (SIGSEGV): the crash alone names no cause; most "
         "often mismatched library versions (an extension built for another torch or "
         "compiler, a library imported before torch), a driver, or a bug in torch or NCCL",
         "rerun with PYTHONFAULTHANDLER=1 to get the Python stack of the crash; check that "
         "compiled extensions match this torch and that every node runs the same image",
         FAULT, "`exitcode : -11` / SIGSEGV, `Segmentation fault` (an error class: names no "
         "cause)", names_cause=False),
    sig("multinomial-invalid-probabilities", "sampling from inf/NaN probabilities",
         [r"probability tensor contains either `inf`, `nan` or element < 0",
          r"sampleMultinomialOnce.*Assertion `[^`]*(?:isinf|isnan|>= zero)[^`]*` failed",
          r"invalid multinomial distribution \((?:encountering probability entry < 0|sum of "
          r"probabilities <= 0)\)",
          r"binarySearchForMultinomial.*Assertion `",
          r"ValueError: probabilities contain NaN", r"pvals < 0, pvals > 1 or pvals contains NaN"],
         multinomial_cause,
         "find where the values become inf, NaN or all zero (check the loss, the logits and "
         "the mask; torch.autograd.set_detect_anomaly(True)); for a divergence run in bf16 or "
         "fp32 instead of fp16, lower the learning rate, or resume from an earlier checkpoint",
         FAULT, "`probability tensor contains either inf, nan or element < 0`, torch 0.4's "
         "device assert in sampleMultinomialOnce",
         suppresses=("cuda-device-assert",)),
    sig("cuda-device-assert", "CUDA device-side assert",
         [r"device-side assert triggered", r"\.cu:\d+: .*Assertion `[^`]+` failed",
          r"\.hip:\d+: .*Device-side assertion `",                       # ROCm
          r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `index out of bounds"],
         "a CUDA kernel's bounds check failed: usually a class label or index out of range "
         "(labels >= number of classes, negative indices, an embedding index >= vocabulary)",
         "check label and index ranges on CPU for the failing batch; rerun with "
         "CUDA_LAUNCH_BLOCKING=1 to see the operation that failed",
         FAULT, "`device-side assert triggered`, a kernel's `Assertion ... failed`"),
    sig("cuda-illegal-memory-access", "illegal memory access on the GPU",
         [r"an illegal memory access was encountered",
          r"unspecified launch failure"],       # CUDA error 719: a kernel that faulted
         "a CUDA kernel faulted (read or wrote outside its memory): a bug in a custom/compiled "
         "kernel, a version mismatch of an extension, or a GPU or driver fault (an Xid in the "
         "node's kernel log says so)",
         "rerun with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the kernel; update or "
         "rebuild custom extensions for this torch",
         FAULT, "`CUDA error: an illegal memory access was encountered`"),
    sig("device-mismatch", "tensors on different devices",
         [r"Expected all tensors to be on the same device",
          r"Input type \(torch\.cuda\.\w+\) and weight type \(torch\.\w+\) should be the same",
          r"Input type \(torch\.\w+\) and weight type \(torch\.cuda\.\w+\) should be the same",
          # torch 1.0-1.1, then 1.2-1.5
          r"Expected object of backend \w+ but got backend \w+ for argument",
          r"Expected object of device type \w+ but got device type \w+ for argument",
          r"arguments are located on different GPUs",                    # torch <= 0.4
          r"to have the same device as tensor for argument #\d+ '\w+'; but device \d+ does "
          r"not equal \d+",                                              # torch 1.0-1.8
          r"Placeholder storage has not been allocated on MPS device",
          r"Tensor on device \S+ is not on the expected device \S+",
          r"expected device \S+ but got device \S+",
          # torch 0.4-1.0: one tensor on a GPU, the other not
          r"Expected object of type torch\.cuda\.\w+ but found type torch\.(?!cuda)\w+ for argument",
          r"Expected object of type torch\.(?!cuda)\w+ but found type torch\.cuda\.\w+ for argument",
          r"must be on the same device but got \w+ on \S+ and \w+ on \S+"],
         device_mismatch_cause,
         "move the model and every batch to the rank's device (model.to(device), "
         "batch.to(device)) with device = cuda:LOCAL_RANK (meshrun.init_distributed().device)",
         FAULT, "`Expected all tensors to be on the same device`"),
    sig("torch-no-distributed", "torch built without torch.distributed",
         [r"PyTorch built without distributed support",
          r"module 'torch\.distributed' has no attribute '" + _DIST_BASICS],
         "this torch was built without torch.distributed (an old source build, or a build with "
         "USE_DISTRIBUTED=0), so no process group can be created",
         "install a torch wheel from pytorch.org (every Linux wheel has torch.distributed), or "
         "rebuild with USE_DISTRIBUTED=1; torch.distributed.is_available() must say True",
         SETUP, "`RuntimeError: PyTorch built without distributed support`, `module "
         "'torch.distributed' has no attribute 'init_process_group'` (or another of its basic "
         "names: older Windows and macOS wheels)"),
    sig("start-method-already-set", "multiprocessing's start method set twice",
         [r"RuntimeError: context has already been set"],
         "the script called multiprocessing's set_start_method(...) when a start method was "
         "already set (by an earlier call, a library it imported, or an import run twice), "
         "and without force=True that call raises",
         "call torch.multiprocessing.set_start_method('spawn', force=True), or once only, under "
         "if __name__ == '__main__': before anything starts a process",
         FAULT, "`RuntimeError: context has already been set` (multiprocessing's "
         "set_start_method)"),
    sig("unpicklable-under-spawn", "an object a spawned process cannot receive",
         [r"Can't pickle local object '(?P<what>[^']+)'",
          r"Can't pickle <(?:function )?(?P<what><lambda>)",
          r"Can't get attribute '(?P<what>\w+)' on <module '__main__'",
          (r"Can't pickle <function (?P<what>\w+) at 0x\w+>: attribute lookup \w+ on __main__ "
           r"failed"),
          r"Can't (?:get|pickle) local object '?(?P<what>[^'>]+)"],        # Python 3.12-3.14
         spawn_pickle_cause, _SPAWN_PICKLE_FIX,
         FAULT, "`Can't pickle local object 'X'`, `Can't pickle <function <lambda>`, `Can't get "
         "attribute 'X' on <module '__main__'`, with multiprocessing's frames just above (not "
         "torch.save or torch.load of a whole model)",
         near=r"multiprocessing[/\\]|popen_spawn|spawn\.py|ForkingPickler|ddp_spawn|"
              r"_MultiProcessingDataLoaderIter"),
    # '__mp_main__' is the main module as a spawned child imports it: spawn's own words
    sig("unpicklable-under-spawn", "an object a spawned process cannot receive",
         [r"Can't get attribute '(?P<what>\w+)' on <module '__mp_main__'"],
         spawn_pickle_cause, _SPAWN_PICKLE_FIX,
         FAULT, "`Can't get attribute 'X' on <module '__mp_main__'` (a spawned child's own "
         "import of the main module; not in a log where a loader unpickles: torch.load, "
         "joblib, pickle.load)",
         confirm=lambda _m, text: not _LOADING.search(text)),
    sig("lightning-removed-argument", "a Trainer argument Lightning removed",
         [r"__init__\(\) got an unexpected keyword argument '(?P<arg>gpus|tpu_cores|ipus|"
          r"auto_select_gpus|auto_lr_find|replace_sampler_ddp|progress_bar_refresh_rate|"
          r"weights_summary|reload_dataloaders_every_epoch|max_nb_epochs)'"],
         lightning_arg_cause, lightning_arg_fix,
         SETUP, "`__init__() got an unexpected keyword argument 'gpus'` (also `tpu_cores`, "
         "`ipus`, `auto_select_gpus`, `auto_lr_find`, `replace_sampler_ddp`: Trainer "
         "arguments Lightning 2.0 removed; `progress_bar_refresh_rate`, `weights_summary` "
         "(1.7), `reload_dataloaders_every_epoch` (1.6), `max_nb_epochs` (0.5))"),
    sig("lightning-removed-argument", "a Trainer argument Lightning removed",
         [r"__init__\(\) got an unexpected keyword argument '(?P<arg>resume_from_checkpoint|"
          r"checkpoint_callback|amp_backend|amp_level)'"],
         lightning_arg_cause, lightning_arg_fix,
         SETUP, "`__init__() got an unexpected keyword argument 'resume_from_checkpoint'` (also "
         "`checkpoint_callback`, `amp_backend`, `amp_level`) with Lightning in the logs (HF's "
         "Trainer never took them)",
         confirm=r"(?i)lightning"),
    sig("slurm-submit-rejected", "SLURM refused the job",
         [(r"sbatch: error: (?P<why>Batch job submission failed: (?:Requested node configuration "
           r"is not available|Requested partition configuration not available now|Invalid "
           r"generic resource \(gres\) specification|Requested time limit is invalid|Memory "
           r"required by task is not available|Invalid feature specification|Node count "
           r"specification invalid|More processors requested than permitted|Requested node "
           r"configuration).*|Failed to validate job spec\..*|Parameter --\S+ no longer "
           r"acceptable.*|Invalid generic resource \(gres\) specification.*)")],
         lambda h: ("SLURM refused the job at submission, before anything ran: the batch "
                    "script's resource request does not fit this cluster's SLURM (its version "
                    "or its configuration): " + h.group("why").strip()),
         "change the request sbatch names: the flags in the script's #SBATCH lines (or those "
         "a tool generated: meshrun render slurm, submitit, torchx); scontrol show partition "
         "and sinfo -o '%P %G %c %m' show what nodes offer",
         SETUP, "`sbatch: error: Batch job submission failed:` with a request SLURM cannot "
         "meet (node configuration, gres, partition, time, memory, feature, node count, "
         "processors; not the controller down or a QOS limit), `Failed to validate job spec`, "
         "`Parameter --gres=... no longer acceptable`, `Invalid generic resource (gres) "
         "specification`"),
    sig("pg-not-initialized", "process group not initialized",
         [r"Default process group (?:has not been|is not) initialized",
          r"collective only supported in process-group mode"],
         "the script used torch.distributed (a collective, DDP, a distributed sampler) before "
         "creating the process group",
         "call meshrun.init_distributed() (or torch.distributed.init_process_group("
         "backend=os.environ['MESHRUN_BACKEND'])) at the start of the script",
         FAULT, "`Default process group has not been initialized`"),
    sig("pg-not-initialized", "DeepSpeed's communication not set up",
         [r"DeepSpeed backend not set, please initialize it using init_process_group\(\)",
          r"Distributed [Bb]ackend is not initialized\.? Please set dist_init_required"],
         "DeepSpeed's communication layer was not set up: the script created no process group "
         "through DeepSpeed (deepspeed.init_distributed()), or set up torch.distributed itself "
         "where this DeepSpeed version wants its own call, or none at all",
         "call deepspeed.init_distributed() before deepspeed.initialize() (it creates torch's "
         "process group too), or pass dist_init_required=True to deepspeed.initialize()",
         FAULT, "DeepSpeed's `DeepSpeed backend not set, please initialize it using "
         "init_process_group()`, `Distributed backend is not initialized. Please set "
         "dist_init_required to True`"),
    sig("nccl-unhandled-cuda-error", "NCCL: CUDA call failed",
         [r"ncclUnhandledCudaError\b", r"unhandled cuda error"],
         lambda h: ("a CUDA call inside NCCL failed on this rank (out of memory, a driver/"
                    "CUDA mismatch, a GPU fault)" + nccl_last_error(h)),
         "read NCCL's last error: 'out of memory' means the GPU was full (see cuda-oom), "
         "'invalid argument'/'unknown error' point to the driver or a GPU fault; " + _NCCL_DEBUG,
         FAULT, "`ncclUnhandledCudaError`, `unhandled cuda error`", names_cause=False),
    sig("nccl-bootstrap-failed", "NCCL bootstrap could not connect",
         [r"NCCL INFO bootstrap\.cc:\d+ -> 2\b",
          r"socketStartConnect: Connect to (?P<peer>\S+) failed"],
         bootstrap_cause,
         "set NCCL_SOCKET_IFNAME to the interface that connects the nodes (meshrun sets it per "
         "node from the route to the master; check the plan's env rows), and open the ports "
         "between the nodes; " + _NCCL_DEBUG,
         FAULT, "NCCL's `bootstrap.cc:N -> 2` (a system error in its TCP bootstrap), "
         "`socketStartConnect: Connect to ADDR failed`",
         suppresses=("nccl-system-error", "nccl-internal-error")),
    sig("nccl-system-error", "NCCL system error",
         [r"ncclSystemError\b", r"unhandled system error",
          (r"NCCL WARN (?:Net|socket\w*|Call to connect)\b.*(?:Connection refused|No route to "
          r"host|Connection timed out|Software caused connection abort)")],
         lambda h: ("a system call NCCL made failed on this rank — nearly always the network "
                    "between nodes (wrong interface, firewall, IB/RoCE setup) or a too small "
                    "/dev/shm in a container" + nccl_detail(h)),
         "set NCCL_SOCKET_IFNAME to the interface that connects the nodes (e.g. ib0, eth0), "
         "open the ports between the nodes, use --ipc=host in Docker; " + _NCCL_DEBUG,
         FAULT, "`ncclSystemError`, `unhandled system error`, NCCL WARN socket connect failures",
         names_cause=False),
    sig("nccl-internal-error", "NCCL internal error",
         [r"ncclInternalError\b", r"internal error - please report this issue to the NCCL"],
         lambda h: ("NCCL failed internally on this rank: usually a peer that disappeared in "
                    "the middle of set-up, or different NCCL versions on the nodes"
                    + nccl_last_error(h)),
         "check the other ranks' logs for a failure first, and that every node has the same "
         "torch/NCCL (meshrun's preflight compares them); " + _NCCL_DEBUG,
         FAULT, "`ncclInternalError`", names_cause=False),
    sig("nccl-invalid-usage", "NCCL invalid usage",
         [r"ncclInvalidUsage\b", r"invalid usage \(run with NCCL_DEBUG",
          r"NCCL error in: \S+, invalid usage"],
         lambda h: ("NCCL rejected how it was called: mismatched collectives between ranks, a "
                    "wrong device, or ranks on the same GPU" + nccl_last_error(h)),
         "make every rank call the same collectives in the same order on its own GPU; "
         + _NCCL_DEBUG,
         FAULT, "`ncclInvalidUsage`", names_cause=False),
    sig("ib-dmabuf-unsupported", "InfiniBand cannot register GPU memory by DMA-BUF",
         [r"Call to ibv_reg_dmabuf_mr failed with error Operation not supported"],
         "NCCL registers GPU memory with the InfiniBand adapter through DMA-BUF, which this "
         "node's RDMA stack (kernel, driver or rdma-core) does not support",
         "set NCCL_DMABUF_ENABLE=0 for the job (NCCL then registers memory the older way, "
         "through nvidia-peermem), or update the kernel, the NIC driver and rdma-core",
         FAULT, "NCCL's `Call to ibv_reg_dmabuf_mr failed with error Operation not supported`"),
    sig("ib-memlock-too-low", "locked-memory limit too low for InfiniBand",
         [(r"Call to ibv_reg_mr(?:_iova2)? failed(?: with error)? ?:? ?Cannot allocate "
           r"memory")],
         "InfiniBand/RoCE transfers register (pin) their buffers, and this process's "
         "locked-memory limit (ulimit -l) is too low for NCCL's: the limit of the shell, the "
         "container or the SLURM step is a few MB, where it must be unlimited",
         "raise the limit: ulimit -l unlimited in the job (memlock unlimited in "
         "/etc/security/limits.conf, --ulimit memlock=-1 for Docker; for SLURM, "
         "PropagateResourceLimitsExcept=MEMLOCK in slurm.conf and LimitMEMLOCK=infinity in "
         "slurmd's systemd unit); check with ulimit -l inside the job",
         SETUP, "NCCL's `Call to ibv_reg_mr failed with error Cannot allocate memory` (also "
         "`ibv_reg_mr_iova2`)",
         suppresses=("nccl-system-error", "nccl-internal-error", "nccl-unhandled-cuda-error")),
    # UCX says it as an error even on nodes it then runs without InfiniBand: advice
    sig("ib-memlock-too-low", "locked-memory limit too low for InfiniBand",
         [r"Please set max locked memory \(ulimit -l\)"],
         "UCX (MPI's transport) could not pin memory for InfiniBand: this process's "
         "locked-memory limit (ulimit -l) is too low; harmless where the job does not use "
         "InfiniBand",
         "raise the limit where the job uses InfiniBand: ulimit -l unlimited in the job "
         "(--ulimit memlock=-1 for Docker; LimitMEMLOCK=infinity for slurmd); check with "
         "ulimit -l inside the job",
         ADVICE, "UCX's `Please set max locked memory (ulimit -l)`"),
    sig("ib-hca-unusable", "NCCL picked an InfiniBand/RoCE device it cannot use",
         [r"Call to ibv_modify_qp failed with (?:error|19) No such device"],
         "NCCL chose an InfiniBand/RoCE device (HCA) whose port cannot carry its connections "
         "(ibv_modify_qp: No such device): a port that is down, not cabled, or a RoCE device "
         "without an address on the network the nodes share",
         "exclude that device (NCCL_IB_HCA=^mlx5_N, or name the good ones: NCCL_IB_HCA=mlx5_0,"
         "mlx5_1); ibv_devinfo and ibstat show each port's state; on RoCE, NCCL_IB_GID_INDEX "
         "picks the GID the network routes (show_gids lists them)",
         SETUP, "NCCL's `Call to ibv_modify_qp failed with error No such device`",
         suppresses=("nccl-system-error", "nccl-internal-error", "nccl-remote-error")),
    sig("ib-transport-error", "InfiniBand transport error",
         [(r"NET/IB ?: Got completion (?:from peer (?P<peer>\S+) )?with (?:status=|error )"
           r"(?P<err>\d+)"),
          r"\bIBV_WC_\w+_ERR\b",
          r"NET/IB ?: Got async event ?: (?P<async>port error)",
          r"Call to ibv_modify_qp failed with error (?P<qp>Connection timed out|No route to host)",
          r"Transport retry count exceeded on (?P<dev>\S+)"],
         lambda h: ("an InfiniBand port of this node reported errors (NCCL's async event: port "
                    "error): a flapping link (a bad cable, transceiver, switch port or HCA); "
                    "NCCL's transfers over it fail or stall" if h.group("async") else
                    "NCCL could not connect an InfiniBand/RoCE queue pair to the other node "
                    f"(ibv_modify_qp: {h.group('qp')}): on RoCE the GID index in use is often "
                    "one the network does not route (a link-local IPv6 GID), or the ports are "
                    "on fabrics that do not reach each other" if h.group("qp") else
                    "an InfiniBand/RoCE transfer to "
                    f"{h.group('peer') or 'a peer'} failed (work completion error"
                    f"{' ' + h.group('err') if h.group('err') else ''}): a flaky link, switch "
                    "or HCA, or the peer process died"),
         "check the peer's log first; then the links (ibstat, ibv_devinfo, port error "
         "counters); exclude the node if one HCA keeps failing; on RoCE set NCCL_IB_GID_INDEX "
         "to a routable (RoCE v2, IPv4-mapped) GID (show_gids)",
         FAULT, "NCCL's `NET/IB : Got completion from peer ... with error N` (or without the "
         "peer), `IBV_WC_*_ERR`, `Got async event : port error`, `Call to ibv_modify_qp failed "
         "with error Connection timed out`",
         suppresses=("nccl-remote-error",)),
    sig("gloo-ifname-invalid", "GLOO_SOCKET_IFNAME names no interface",
         [r"ifa != nullptr\. Unable to find address for: (?P<ifname>\S+)",
          # the check's text cut off: a name that is an interface's (eth0, enp7s0, ib0, bond0)
          (r"(?<!rp != nullptr\. )Unable to find address for: "
           r"(?P<ifname>eth\d+|en[ops]\d\w*|ib\d+|bond\d+|wlp\d\w*|wlan\d+)\s*$")],
         lambda h: (f"GLOO_SOCKET_IFNAME={h.group('ifname')} names no interface of this node"
                    + (": Gloo takes one interface name, not NCCL's '^' exclusions or a list"
                       if h.group("ifname", "")[:1] == "^" or "," in h.group("ifname", "")
                       else " (interface names differ between machines and images)")),
         "set GLOO_SOCKET_IFNAME to the one interface that connects the nodes on this node "
         "(ip -br addr), or unset it and let meshrun choose per node",
         SETUP, "Gloo's `ifa != nullptr. Unable to find address for: IFNAME` (tcp/device.cc; "
         "without the check's text, when the name is an interface's: eth0, enp7s0, ib0)"),
    sig("gloo-hostname-unresolvable", "Gloo cannot resolve this host's name",
         [r"rp != nullptr\. Unable to find address for: (?P<host>\S+)"],
         lambda h: (f"Gloo looks up this machine's own hostname ({h.group('host')}) to find the "
                    "address to listen on, and it does not resolve: a container's or a VM's "
                    "hostname missing from /etc/hosts and DNS"),
         "set GLOO_SOCKET_IFNAME to the interface that connects the nodes (ip -br addr; meshrun "
         "run sets it per node when it can tell), or make the hostname resolve (an /etc/hosts "
         "line with this host's address)",
         SETUP, "Gloo's `rp != nullptr. Unable to find address for: HOST` (tcp/device.cc)"),
    sig("gloo-connect-failed", "Gloo could not connect",
         [r"Gloo connectFullMesh failed with (?P<detail>.+)",
          r"Gloo connectFullMesh failed\b",
          r"gloo/transport/tcp/\w+\.cc:\d+\] Connect timeout",
          r"gloo/transport/tcp/\w+\.cc:\d+\].*Connection refused"],
         "the ranks could not open Gloo connections to each other: Gloo picked an interface the "
         "other nodes cannot reach (often the hostname resolving to 127.0.1.1), or a firewall",
         "set GLOO_SOCKET_IFNAME to the interface that connects the nodes (e.g. eth0), open the "
         "ports between the nodes, and make the host name resolve to a reachable address",
         FAULT, "`Gloo connectFullMesh failed`, Gloo `Connect timeout` / `Connection refused`"),
    sig("master-unreachable", "node 0 unreachable",
         [r"meshrun: error: node 0's store at (?P<where>\S+) did not answer within (?P<secs>\d+) s",
          r"\[c10d\].*\(errno: 11[01] - (?:Connection refused|Connection timed out)\)",
          r"ConnectionRefusedError: \[Errno 111\]",
          r"\[c10d\].*failed to connect.*Connection refused",
          r"RuntimeError: connect\(\) timed out\.?$"],
         lambda h: (f"nothing answered at node 0's store {h.group('where') or ''}".rstrip()
                    + ": node 0 is not running (yet, or any more), listens on another port, or a "
                    "firewall blocks the port"),
         meshrun_fix("start node 0 first with the same --master-addr/--master-port, and open "
                      "the port between the nodes (test with nc -zv ADDR PORT)"),
         FAULT, "meshrun's `node 0's store at ... did not answer`, torch's c10d `Connection "
         "refused` / `Connection timed out` (errno 110: nothing answers at that address; "
         "errno 113, no route, is `rendezvous-connection-error`)", suppresses=("rendezvous-connection-error",)),
    # -- lost -------------------------------------------------------------------------------
    sig("node-lost", "node lost",
         [NODE_LOST_RE],
         node_lost_cause,
         "look at that node: its node log, the kernel log (dmesg: OOM killer, Xid GPU errors), "
         "its network link; the other nodes' errors after this time are consequences",
         LOST, "meshrun's watchdog: `meshrun: node K (host) is lost: last heartbeat N s ago`"),
    sig("rank-hang", "rank hung",
         [HANG_RE],
         lambda h: (f"no rank made progress for {h.group('secs')} s; the stuck rank is inside "
                    "a collective the others never reached, or blocked in data loading or I/O"),
         "read the stack dumps meshrun wrote (stacks/rank<R>.txt in the run's log folder) to see "
         "where the stuck rank waits; raise --hang-timeout if steps are really that long",
         LOST, "meshrun's watchdog: `meshrun: job hung: no progress for N s; stuck: rank R on "
         "node K (host), ...`", expand=hang_expand),
    # -- effect -----------------------------------------------------------------------------
    sig("nccl-remote-error", "NCCL peer gone",
         [r"ncclRemoteError\b", r"remote process exited or there was a network error",
          # NCCL 2.10-2.17's and 2.18's words for a peer gone
          r"NCCL WARN (?:Net : |socketProgress: )Connection closed by remote peer"],
         lambda h: ("a peer of this rank exited or the network to it failed during a "
                    "collective" + nccl_last_error(h)),
         _PEERS_FIRST + "; if no rank crashed, check the network between the nodes",
         EFFECT, "`ncclRemoteError`, `remote process exited or there was a network error`"),
    sig("gloo-connection-lost", "Gloo peer gone",
         [(r"gloo/transport/tcp/\w+\.cc:\d+\] (?:Connection closed by peer|Read error|Write "
          r"error)"),
          (r"gloo/transport/tcp/\w+\.cc:\d+\] (?:writev|readv|read|write) \S+: Connection "
           r"reset by peer")],
         "a peer of this rank closed its Gloo connection: that rank crashed or was stopped",
         _PEERS_FIRST,
         EFFECT, "Gloo's `Connection closed by peer`, `Read error ... Connection reset by peer`"),
    sig("pg-timeout-too-short", "the first barrier timed out: long work on one rank",
         [(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>[2-9]|10), "
           r"OpType=(?P<op>ALLREDUCE|BARRIER), NumelIn=1, NumelOut=1, Timeout\(ms\)="
           r"(?P<timeout>\d+)\) ran for \d+ milliseconds"),
          (r"Work WorkNCCL\(SeqNum=(?P<seq>[2-9]|10), OpType=(?P<op>ALLREDUCE|BARRIER), "
           r"NumelIn=1, NumelOut=1, Timeout\(ms\)=(?P<timeout>\d+)\) timed out in blocking wait")],
         early_barrier_cause,
         "raise the process group's timeout (init_process_group(timeout=timedelta(hours=2)), "
         "TrainingArguments(ddp_timeout=7200), accelerate's InitProcessGroupKwargs(timeout="
         "...), meshrun's MESHRUN_PG_TIMEOUT) or do the long work before the job (preprocess "
         "and save the dataset once, then load it from disk in every rank)",
         LOST, "a timeout of one of the job's second to tenth collectives when it is a "
         "one-element all-reduce (a barrier): `Watchdog caught collective operation timeout: "
         "WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, ...)` (not the first: NCCL sets its "
         "connections up there, and a network hang times out there too)",
         suppresses=("nccl-watchdog-timeout",)),
    sig("nccl-watchdog-timeout", "NCCL collective timed out",
         [(r"(?:\[Rank (?P<rank>\d+)\] )?Watchdog caught collective operation timeout: "
          r"WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>\w+)[^)]*?(?:Timeout\(ms\)=(?P<timeout>"
          r"\d+))?\) ran for (?P<ran>\d+) milliseconds"),
          (r"(?:\[Rank (?P<rank>\d+)\] )?Work WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
          r"[^)]*?(?:Timeout\(ms\)=(?P<timeout>\d+))?\) timed out in blocking wait"),
          r"Some NCCL operations have failed or timed out"],
         watchdog_cause,
         _PEERS_FIRST + "; if a long step is expected (a checkpoint save, an evaluation on rank "
         "0 only), raise the process-group timeout (MESHRUN_PG_TIMEOUT seconds, or "
         "init_process_group(timeout=...))",
         EFFECT, "`Watchdog caught collective operation timeout: WorkNCCL(SeqNum=N, OpType=OP, "
         "...) ran for N milliseconds`, `timed out in blocking wait`"),
    sig("gloo-timeout", "Gloo collective timed out",
         [(r"gloo/transport/tcp/\w+\.cc:\d+\] Timed out waiting (?P<ms>\d+)ms for (?P<op>\w+) "
          r"operation")],
         lambda h: (f"this rank waited {int(h.group('ms', '0')) // 1000} s for a {h.group('op')} "
                    "its peer never sent: the peer crashed, hung or took a different code path"),
         _PEERS_FIRST + "; raise the process-group timeout only if the step is really that long",
         EFFECT, "Gloo's `Timed out waiting Nms for recv operation to complete`"),
    sig("store-barrier-timeout", "store barrier timed out",
         [(r"Timed out after (?P<secs>\d+) seconds waiting for clients\. (?P<joined>\d+)/"
          r"(?P<expected>\d+) clients joined"),
          (r"store based barrier on rank:? (?P<rank>\d+), for key: \S+ \(world_size=(?P<expected>"
          r"\d+), (?:num_workers_joined|worker_count)=(?P<joined>\d+)")],
         barrier_cause, barrier_fix, barrier_priority,
         "`DistStoreError: Timed out after N seconds waiting for clients. J/W clients joined.`, "
         "the store-based barrier's `num_workers_joined=J` (too many: shared store or wrong "
         "world size; too few: ranks missing)"),
    # the same barrier's line cut before "on rank N, for key" and its counts
    sig("store-barrier-timeout", "store barrier timed out",
         [r"imed out initializing process group in store based barrier(?! on rank:? \d+, for key)"],
         "not every process reached init_process_group within its timeout (torch's "
         "store-based barrier at the end of it): some ranks got there much later than others "
         "(a long data preprocessing, a download or a compilation before it on some ranks), "
         "failed before it, or cannot reach node 0",
         "do the slow work before the process group on every rank alike (or on one rank, then "
         "a barrier after init), or give init_process_group(timeout=timedelta(...)) enough "
         "time for it; a rank that never got there says why in its own log",
         EFFECT, "`Timed out initializing process group in store based barrier on rank` without "
         "the counts after it"),
    sig("rendezvous-timeout", "rendezvous timed out",
         [r"RendezvousTimeoutError",
          # torchelastic before torch 1.9 (etcd)
          r"RendezvousTimeoutException", r"Rendezvous timeout occured in EtcdRendezvousHandler"],
         "not every node joined torch's rendezvous in time: a node did not start, or started "
         "with another run id, endpoint or node count",
         "start every node with the same command, --nnodes, --master-addr/--master-port and "
         "run id; check the missing node's own log for why it did not join",
         EFFECT, "`RendezvousTimeoutError`"),
    sig("join-timeout", "nodes missing",
         [(r"meshrun: error: only (?P<joined>\d+) of (?P<nnodes>\d+) nodes joined the store at "
          r"(?P<where>\S+) within (?P<secs>\d+) s; missing node ranks: (?P<missing>[\d, ]+)")],
         lambda h: (f"only {h.group('joined')} of {h.group('nnodes')} nodes joined within "
                    f"{h.group('secs')} s; missing node ranks: {h.group('missing').strip()} "
                    "(not started, or cannot reach node 0)"),
         meshrun_fix("start meshrun on the missing nodes with the same --master-addr and "
                      "--master-port, and check they can reach node 0"),
         EFFECT, "meshrun's `only J of N nodes joined the store ... missing node ranks: ...`"),
    sig("rendezvous-connection-error", "cannot reach the store",
         [r"RendezvousConnectionError", (r"The client socket has timed out after (?P<after>\S+) "
          r"while trying to connect to \((?P<target>[^,]+), (?P<port>\d+)\)"),
          (r"TCP client failed to connect/validate to host (?P<target>\S+?):(?P<port>\d+) - "
          r"timed out")],
         lambda h: ("this node could not connect to the job's store"
                    + (f" at {h.group('target')}:{h.group('port')}" if h.group("target") else "")
                    + ": node 0 is not up yet, the address or port is wrong, or a firewall "
                    "drops the connection"),
         "check --master-addr/--master-port against node 0's banner, that node 0 is running, and "
         "that the port is open between the nodes (nc -zv ADDR PORT)",
         EFFECT, "`RendezvousConnectionError`, `The client socket has timed out after Nms while "
         "trying to connect to (HOST, PORT)`"),
    # the kernel says the address cannot be reached from here at all: not a node 0 that is late
    sig("rendezvous-connection-error", "no route to the store's address",
         [(r"failed to connect to (?P<target>[^\s,()]+):(?P<port>\d+) \(errno: 113 - "
           r"No route to host\)")],
         lambda h: (f"this node has no route to the job's store at {h.group('target')}:"
                    f"{h.group('port')}: that address is wrong for this node (node 0's address "
                    "on a network the others are not on, often the first interface a launcher "
                    "picked on node 0), a firewall rejects it, or node 0's machine is down (a "
                    "host that does not answer on the local network gives the same)"),
         "give every node the address of node 0 on the network they share (--master-addr; "
         "ip -br addr on node 0, then ping it from this node), open the firewall, or bring "
         "node 0 back",
         LOST, "c10d's `failed to connect to HOST:PORT (errno: 113 - No route to host)`"),
    sig("store-connection-lost", "store connection lost",
         [r"Connection was likely closed\. Did the remote server shutdown or crash\?",
          r"recvValue failed on SocketImpl\(.*Connection reset by peer",
          r"store->get\('\w+'\) got error: Connection reset by peer"],
         "this process lost its connection to the job's store on node 0: node 0 died, was "
         "stopped or became unreachable",
         "look at node 0's logs for why it stopped (meshrun diagnose with node0.log); if node 0 "
         "is healthy, check the network between the nodes",
         EFFECT, "torch's `Failed to recv, got 0 bytes. Connection was likely closed. Did the "
         "remote server shutdown or crash?` (not in a `[W` warning: torch 2.4 warns so at a "
         "normal end too)", exclude=r"^\s*\[W\d{0,4}|^W\d{4} "),
    # -- advice -----------------------------------------------------------------------------
    sig("nccl-socket-fallback", "NCCL over TCP sockets",
         [r"NET/IB : No device found", r"NCCL INFO Using network Socket\b"],
         "NCCL found no InfiniBand/RoCE device (or was told not to use it), so traffic between "
         "nodes goes over TCP sockets: many times slower, and a cause of timeouts at scale",
         "if the nodes have InfiniBand/RoCE: make the devices visible in the container "
         "(/dev/infiniband, --privileged or the RDMA device plugin), unset NCCL_IB_DISABLE, and "
         "check with ibv_devices; on a single node this is harmless",
         ADVICE, "NCCL's `NET/IB : No device found`, `Using network Socket`"),
)

UNKNOWN_CODE = "unknown"


def _check_catalog(catalog: tuple[Signature, ...]) -> dict[str, Signature]:
    """Checked when the module loads (each :class:`Signature` checks its own code, tier and
    words): every regex has a literal every match contains (how lines are skipped quickly),
    every suppressed code exists, ``unknown`` is no signature's. Returns code -> its first
    signature (a code may have several, e.g. two ways to see a full /dev/shm)."""
    by_code: dict[str, Signature] = {}
    for entry in catalog:
        by_code.setdefault(entry.code, entry)
    for entry in catalog:
        if entry.code == UNKNOWN_CODE:
            raise ValueError("'unknown' is the engine's code for what no signature knows")
        for pattern, literal in zip(entry.patterns, entry.needles):
            if literal is None:
                raise ValueError(f"signature {entry.code}: {pattern.pattern!r} has no literal "
                                 "every match contains (needle); give it a fixed word")
        for other in entry.suppresses:
            if other not in by_code:
                raise ValueError(f"signature {entry.code} suppresses unknown code {other!r}")
    return by_code


BY_CODE = _check_catalog(CATALOG)


def codes() -> list[str]:
    """Every code the catalog can report (without ``unknown``), in catalog order."""
    return list(BY_CODE)


# Every pattern has a literal it cannot match without (tests check it): one regex of those
# literals skips the many lines no signature can match.
ANY = re.compile("|".join(sorted({re.escape(n or "") for s in CATALOG for n in s.needles},
                                  key=len, reverse=True)))
