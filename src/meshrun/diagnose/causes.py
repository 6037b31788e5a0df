"""The causes and fixes a signature computes from its message (the numbers in an
out-of-memory error, NCCL's last error, the store barrier's counts, the plan's device ...),
and the formats meshrun itself prints (the watchdog's lines, its failure report). Pure.
This module is longer than the others because it holds one small function per computed
cause or fix, ~50 of them, which the catalog's table names."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from .records import ADVICE, EFFECT, SETUP, TIERS, Hit

# --- formats meshrun itself prints ------------------------------------------------------------

#: ``meshrun.runtime.events.node_lost_line``:
#: "meshrun: node 1 (host-b) is lost: last heartbeat 12.3 s ago"
NODE_LOST_RE = (r"meshrun: node (?P<node>\d+) \((?P<host>[^)]*)\)(?P<store>, which hosts the "
                r"job's store,)? is lost: last heartbeat (?P<age>[\d.]+) s ago")
#: ``meshrun.runtime.events.hang_line``:
#: "meshrun: job hung: no progress for 300 s; stuck: rank 3 on node 1 (host-b), ..."
HANG_RE = r"meshrun: job hung: no progress for (?P<secs>[\d.]+) s; stuck: (?P<stuck>.+)$"
_STUCK_RE = re.compile(r"rank (\d+) on node (\d+) \(([^)]*)\)")
# launch.py: "meshrun: rank 1 on node 1 (vm) was killed by SIGKILL" / "... exited with code 1"
MESHRUN_FAILED = re.compile(r"meshrun: rank (?P<rank>\d+) on node (?P<node>\d+) "
                             r"\((?P<host>[^)]*)\)"
                             r" (?:exited with code (?P<code>-?\d+)|was killed by (?P<sig>SIG\w+))")
MESHRUN_DETAIL = re.compile(r"meshrun:\s{2,}\S")  # the indented lines after the failure line
MESHRUN_FIRST_ERROR = re.compile(r"meshrun:\s+first error: (?P<line>.+)$")
BANNER_RANKS = re.compile(r"^\s*global ranks\s*:\s*(?P<first>\d+)(?:-(?P<last>\d+))?\s+"
                           r"\(on (?P<host>[^)\s]+)\)")
BANNER_NODE = re.compile(r"^\s*node rank\s*:\s*(?P<node>\d+)\b")
# the short banner's first line (meshrun.plan.describe.brief): node, host and ranks in one
BANNER_BRIEF = re.compile(r"^meshrun \S+: node (?P<node>\d+) of \d+(?: \([^)]*\))? on (?P<host>\S+) "
                          r"\(platform: "
                          r".*?\), \d+ workers?: ranks? (?P<first>\d+)(?:-(?P<last>\d+))? of ")
# "; fix: HINT" at the end of meshrun's error line, before its " [code]" (meshrun.errors)
_HINT = re.compile(r"; fix: (?P<hint>.+?)(?: \[[a-z0-9]+(?:-[a-z0-9]+)*\])?$")


def killed_by(signal: str) -> str:
    """launch.py's line for a worker killed by ``signal``, naming its rank and host."""
    return (r"meshrun: rank (?P<rank>\d+) on node \d+ \((?P<host>[^)]*)\) was killed by "
            + signal + r"\b")


def meshrun_fix(default: str) -> Callable[[Hit], str]:
    """The hint meshrun printed after '; fix:' on its own error line, else ``default``."""
    def fix(hit: Hit) -> str:
        found = _HINT.search(hit.line)
        return found.group("hint").strip() if found else default
    return fix


# --- fixes with numbers -----------------------------------------------------------------------

def fix_for_oom(per_device_batch: int | None, grad_accum: int | None = None,
                effective_batch: int | None = None) -> str:
    """The CUDA out-of-memory fix: a smaller micro-batch, more accumulation, same effective batch.

    ``fix_for_oom(8, 1, 256)`` is "halve train.per_device_batch (8 -> 4) and double
    train.grad_accum (1 -> 2): same effective batch 256". The batch is divided by its
    smallest factor (3 -> 1 and accumulation x3 for an odd prime), so the product stays
    exact. Without the per-device batch the advice is given in words; at a per-device
    batch of 1 the memory has to come from elsewhere (sharding, checkpointing).
    """
    rest = ("; if it still does not fit, shard parameters and optimizer state (DeepSpeed ZeRO-3 "
            "or FSDP) or enable activation checkpointing")
    if per_device_batch is None:
        return ("halve the per-device batch (train.per_device_batch) and double the gradient "
                "accumulation (train.grad_accum): the effective batch stays the same" + rest)
    if per_device_batch <= 1:
        return ("train.per_device_batch is already 1, so the batch cannot shrink: shard "
                "parameters and optimizer state (DeepSpeed ZeRO-3 or FSDP), enable activation "
                "checkpointing, use a shorter sequence/clip, or GPUs with more memory")
    accum = grad_accum if grad_accum and grad_accum > 0 else 1
    smaller = max(d for d in range(1, per_device_batch // 2 + 1) if per_device_batch % d == 0)
    factor = per_device_batch // smaller
    same = f"same effective batch {effective_batch}" if effective_batch else "same effective batch"
    batch = f"train.per_device_batch ({per_device_batch} -> {smaller})"
    steps = f"train.grad_accum ({accum} -> {accum * factor})"
    if factor == 2:
        return f"halve {batch} and double {steps}: {same}"
    return (f"lower {batch} and multiply {steps.replace(' (', f' by {factor} (', 1)}: "
            f"{same}")


def _job_numbers(job: Any) -> tuple[int | None, int | None, int | None]:
    """(per_device_batch, grad_accum, effective_batch) from a JobConfig or its dict, if any."""
    if job is None:
        return None, None, None
    if isinstance(job, Mapping):
        train = job.get("train") if isinstance(job.get("train"), Mapping) else {}
        values = (train.get("per_device_batch"), job.get("grad_accum", train.get("grad_accum")),
                  job.get("effective_batch"))
    else:
        train = getattr(job, "train", None)
        values = (getattr(train, "per_device_batch", None),
                  getattr(job, "grad_accum", getattr(train, "grad_accum", None)),
                  getattr(job, "effective_batch", None))
    return tuple(v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
                 for v in values)  # type: ignore[return-value]


def oom_cause(hit: Hit) -> str:
    size, gpu = hit.group("size"), hit.group("gpu") or hit.group("gpu_old")
    free = hit.group("free") or hit.group("free_old")
    total = hit.group("total") or hit.group("total_old")
    where = f" on GPU {gpu}" if gpu else ""
    room = f" ({free} free of {total})" if free and total else ""
    need = f"needed {size} more{where}{room}" if size else f"ran out of memory{where}"
    return (f"this rank {need}: its batch, activations and optimizer state do not fit on the "
            "GPU (another process on the same GPU, or two ranks sharing one, can also cause it)")


def oom_fix(hit: Hit) -> str:
    return fix_for_oom(*_job_numbers(hit.job))


def said(text: str, pattern: str, template: str) -> str:
    """``template`` filled with ``pattern``'s first group where ``text`` has it, else "":
    a detail a cause adds when the log happens to say it (a version, a file)."""
    found = re.search(pattern, text)
    return template.format(found.group(1)) if found else ""


def nccl_last_error(hit: Hit) -> str:
    """NCCL's 'Last error:' detail, which torch prints on the lines after the error."""
    for i, text in enumerate(hit.following):
        if text.strip() == "Last error:" and i + 1 < len(hit.following):
            detail = hit.following[i + 1].strip()
            return f" (NCCL's last error: {detail})" if detail else ""
        if text.strip().startswith("Last error:") and len(text.strip()) > len("Last error:"):
            return f" (NCCL's {text.strip()[0].lower()}{text.strip()[1:]})"
    return ""


def nccl_detail(hit: Hit) -> str:
    """NCCL's last error after the exception, or the text of the NCCL WARN line itself."""
    last = nccl_last_error(hit)
    if last:
        return last
    _, warn, text = hit.line.partition("NCCL WARN ")
    return f" (NCCL WARN {text.strip()})" if warn and text.strip() else ""


def _barrier_counts(hit: Hit) -> tuple[int, int]:
    return int(hit.group("joined") or 0), int(hit.group("expected") or 0)


def barrier_cause(hit: Hit) -> str:
    joined, expected = _barrier_counts(hit)
    secs = hit.group("secs")
    within = f" within {secs} s" if secs else ""
    if joined > expected:
        return (f"{joined} processes joined a store that expected {expected}: two jobs share "
                "this master address and port, or the world size differs between nodes")
    if joined < expected:
        return (f"only {joined} of {expected} processes reached the store{within}: "
                f"{expected - joined} never started, failed before joining, or cannot reach "
                "node 0")
    return (f"all {expected} processes joined but the barrier still timed out{within}: the "
            "store was too slow or a process left early")


def barrier_fix(hit: Hit) -> str:
    joined, expected = _barrier_counts(hit)
    if joined > expected:
        return ("give every job its own --master-port and check that --nnodes and "
                "--nproc-per-node are the same on every node")
    return ("find the missing ranks: their own logs show why they did not join (start-up "
            "errors, a node not started); check every node uses the same node count and master "
            "address:port")


def barrier_priority(hit: Hit) -> int:
    joined, expected = _barrier_counts(hit)
    return SETUP if joined > expected else EFFECT


def driver_cause(hit: Hit) -> str:
    found = hit.group("ver")
    if found and found.isdigit():
        number = int(found)
        return (f"the NVIDIA driver supports CUDA up to {number // 1000}.{(number % 1000) // 10}, "
                "older than the CUDA this torch build needs")
    return "the NVIDIA driver is older than the CUDA runtime this torch build needs"


def watchdog_cause(hit: Hit) -> str:
    op, seq = hit.group("op", "a collective"), hit.group("seq")
    timeout = hit.group("timeout")
    waited = f" for {int(timeout) // 1000} s" if timeout and timeout.isdigit() else ""
    which = f"{op} #{seq}" if seq else op
    return (f"this rank waited{waited} in {which} for ranks that never joined it: another rank "
            "crashed, hung or took a different code path (uneven data, a collective inside "
            "'if rank == 0')")


def early_barrier_cause(hit: Hit) -> str:
    """The ranks that waited a whole timeout at one of the job's first barriers (a
    one-element all-reduce among its first collectives, after the first)."""
    timeout = hit.group("timeout")
    waited = f" {int(timeout) // 1000} s" if timeout and timeout.isdigit() else ""
    return (f"this rank waited{waited} in one of the job's first barriers ({hit.group('op')} "
            f"#{hit.group('seq')}, one element) while another rank was still doing long work "
            "alone before it (dataset preparation or tokenization on the main process, a "
            "download, an evaluation or a checkpoint save on rank 0): the process group's "
            "timeout is shorter than that work; if every rank timed out there, the one doing "
            "the work included, or none does such work, it is a hang instead (a rank that "
            "failed or hung before the barrier: its own log says which)")


def hang_expand(hit: Hit) -> list[tuple[int | None, str | None]]:
    stuck = [(int(r), h) for r, _n, h in _STUCK_RE.findall(hit.group("stuck", ""))]
    return stuck or [(None, None)]


def node_lost_cause(hit: Hit) -> str:
    who = f"node {hit.group('node')} ({hit.group('host')})"
    store = " — it hosts the job's store, so every node stops" if hit.group("store") else ""
    return (f"{who} sent no heartbeat for {hit.group('age')} s: it was killed, lost power or "
            f"network, or froze{store}")


def module_cause(hit: Hit) -> str:
    binary = re.search(r"of binary: (\S+)", hit.text)
    ran = f" ({binary.group(1)})" if binary else ""
    if hit.group("mod") == "TensorBoard":   # older torch said so for any failed import of it
        return ("torch.utils.tensorboard could not import tensorboard in the environment this "
                f"rank runs in{ran}: it is not installed there, older than 1.14, or its own "
                "import failed (a dependency of it)")
    return (f"Python module '{hit.group('mod')}' is not installed in the environment this "
            f"rank runs in{ran}: a different virtualenv, image or node than the one that has "
            "it, or a launcher (torchrun, deepspeed) found on PATH that belongs to another "
            "Python")


def abi_cause(hit: Hit) -> str:
    if "torchvision" in hit.line:
        return ("torchvision's compiled operators were built for another torch than the one "
                "installed (torch upgraded without torchvision, or the two from different "
                "sources)")
    so, sym = hit.group("so"), hit.group("sym")
    which = f"{os.path.basename(so)} was" if so else "a compiled extension was"
    what = f"its symbol {sym} does not exist here" if sym else "a function it needs is not here"
    return (f"{which} built against a different torch (or CUDA) than the one installed: "
            f"{what}")


def space_cause(hit: Hit) -> str:
    path = hit.group("path")
    where = f" writing {path}" if path else ""
    kind = "the quota is used up" if "quota" in hit.match.group(0).lower() else "the disk is full"
    return f"{kind}{where}: checkpoints, logs or caches filled the filesystem"


def dns_cause(hit: Hit) -> str:
    target = hit.group("target")
    name = f"'{target}'" if target else "the master address"
    return (f"{name} does not resolve on this node: a typo, a DNS record not created yet "
            "(Kubernetes creates pod records late), or a name only other nodes know")


def dup_gpu_cause(hit: Hit) -> str:
    other = hit.group("other")
    pair = f"ranks {hit.group('rank')} and {other}" if other else "two ranks"
    return (f"{pair} use the same GPU: the script never called torch.cuda.set_device(LOCAL_RANK) "
            "(every rank on cuda:0), or CUDA_VISIBLE_DEVICES gives every process the same GPU")


# an exception's line (a pasted one may begin with a quote)
_RAISED = re.compile(r"^\s*[\"'`]?(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b")


def only_when_raised(tier: int) -> Callable[[Hit], int]:
    """``tier`` on the line of an exception (``OSError: ...``, ``urllib3.exceptions.
    NameResolutionError: ...``); advice on anything else: libraries log their retries
    (``... thrown while requesting HEAD``) and go on from a cache."""
    def priority(hit: Hit) -> int:
        return tier if _RAISED.match(hit.line) else ADVICE

    priority.label = f"{TIERS[tier]} (advice in a retry warning)"  # type: ignore[attr-defined]
    return priority


def unless_warning(tier: int) -> Callable[[Hit], int]:
    """``tier``, or advice when the line is only a warning (torch warns at import that it
    could not load numpy, and may run on without ever needing it)."""
    def priority(hit: Hit) -> int:
        return ADVICE if "Warning:" in hit.line else tier

    priority.label = f"{TIERS[tier]} (advice in a warning)"  # type: ignore[attr-defined]
    return priority


def ifname_cause(hit: Hit) -> str:
    named = re.search(r"NCCL_SOCKET_IFNAME(?: set (?:by environment )?to |=)(\S+)", hit.text)
    which = f"NCCL_SOCKET_IFNAME={named.group(1)}" if named else "NCCL_SOCKET_IFNAME"
    if "neither AF_INET" in hit.line and "connecting to address" in hit.line:
        # the address came from a peer and is no address: the peer had none to give, or
        # its bootstrap message is laid out by another NCCL version
        return (f"NCCL received a peer's bootstrap address that is no address: {which} names "
                "an interface some node does not have (names differ between machines and "
                "images), or the nodes run different NCCL versions (their bootstrap messages "
                "differ; compare `NCCL version` on every node)")
    return (f"NCCL found no network interface to bootstrap with: {which} names an interface "
            "this node does not have (names differ between machines and images), or no "
            "interface is up")


def _nccl_version(text: str) -> tuple[int, int, int]:
    """``X.Y.Z`` as NCCL numbers it. torch before 1.12 wrote NCCL >= 2.9's version code with
    the old formula (2.10.3, code 21003, as "21.0.3"): such a major is read back."""
    major, minor, patch = (int(x) for x in text.split("."))
    if major >= 10:
        code = major * 1000 + minor * 100 + patch
        major, minor, patch = code // 10000, code % 10000 // 100, code % 100
    return major, minor, patch


@functools.lru_cache(maxsize=1)
def nccl_versions(text: str) -> tuple[str, ...]:
    """The NCCL versions the logs name (``NCCL version X.Y.Z``), oldest first. Asked once for
    every rank's version line of one diagnosis, with the same text: read once (a str's hash
    is kept, so the cache's lookup costs nothing; the last text is held until the next)."""
    found = {_nccl_version(v) for v in re.findall(r"NCCL version (\d+\.\d+\.\d+)", text)}
    return tuple(".".join(map(str, v)) for v in sorted(found))


def nccl_versions_differ(match: re.Match, job_text: str) -> bool:
    """Two different NCCL versions in the logs diagnosed together (every node's)."""
    return len(nccl_versions(job_text)) > 1


def bootstrap_cause(hit: Hit) -> str:
    used = re.search(r"(?:Bootstrap : Using|OOB) (\w[\w.-]*):(\S+?)<", hit.text)
    via = f" over {used.group(1)} ({used.group(2)})" if used else ""
    warn = re.search(r"NCCL WARN (\S*(?:[Cc]onnect|socket|[Rr]ecv|[Ss]end)\S*.*)", hit.text)
    said = (f" (NCCL WARN {warn.group(1).strip()})" if warn else
            f" (NCCL: {hit.line.strip()})" if "Connect to" in hit.line else "")
    return (f"NCCL's bootstrap could not connect its ranks{via}: the interface NCCL chose does "
            "not connect the nodes (an IPoIB, docker, VPN or other virtual interface), or a "
            f"firewall blocks the ports{said}")


def nccl_not_built_cause(hit: Hit) -> str:
    if "THD package" in hit.line:   # torch 0.4-1.0's distributed backend
        return ("this torch (0.4-1.0, whose distributed backend is THD) was built without NCCL "
                "2: a source build that found no NCCL 2 (or took the NCCL 1 it bundles), or a "
                "nightly built without it")
    if hit.device == "cpu":
        return ("the script asks for the nccl backend, but meshrun planned a CPU run and this "
                "torch has no NCCL (CPU-only builds, Windows and macOS never do)")
    return ("the script asks for the nccl backend and this torch has no NCCL: a CPU-only "
            "build, or a Windows or macOS build (NCCL exists only for Linux CUDA builds)")


def arch_cause(hit: Hit) -> str:
    sm, cc = hit.group("sm"), hit.group("cc")
    if "no longer supports" in hit.line:   # torch.cuda's warning on a GPU this build dropped
        gpu = f"this GPU (compute capability {cc})" if cc else "this GPU"
        return (f"{gpu} is older than any architecture this torch build has kernels for: "
                "its wheels dropped that GPU generation")
    gpu = f"this GPU ({sm})" if sm else "this GPU"
    return (f"{gpu} is not among the architectures this torch or a compiled extension was "
            "built for: a newer GPU with an older build, or an extension compiled on another "
            "GPU model")


def toolkit_cause(hit: Hit) -> str:
    torch = (hit.group("torch") or said(hit.text, r"PyTorch \(([\d.]+)\)", "{}")
             or said(hit.text, r"Pytorch binaries were compiled with Cuda ([\d.]*\d)", "{}"))
    system = hit.group("sys") or said(hit.text, r"Cuda compilation tools, release ([\d.]+)",
                                      "{}")
    here = f" ({system})" if system else ""
    return (f"the CUDA toolkit on this node{here} is not the one torch was built with "
            f"({torch or 'another version'}): extensions compiled here (DeepSpeed's ops, apex, "
            "flash-attn) fail to build or load")


def download_cause(hit: Hit) -> str:
    site = hit.group("site") or "the download host"
    cause = (f"this node cannot reach {site}: compute nodes often have no internet access or "
             "no DNS for outside names; the script tried to download a model, tokenizer or "
             "dataset at start")
    if "We couldn't connect" in hit.match.group(0):   # transformers' words in offline mode too
        cause += (", or the job runs offline (HF_HUB_OFFLINE=1 or TRANSFORMERS_OFFLINE=1, set "
                  "in the environment or by the script itself) and the files are not in the "
                  "cache")
    return cause


def cpu_torch_cause(hit: Hit) -> str:
    if hit.device == "cpu":
        return ("the script forces CUDA (torch.cuda.set_device, .cuda(), device='cuda' or "
                "backend='nccl') but meshrun planned a CPU run: no GPU is visible on this node, "
                "and this torch is a CPU-only build; the torch build is not the problem")
    if hit.device == "cuda":
        return ("this torch is a CPU-only build, on a node where meshrun found GPUs: the "
                "environment the workers run in has the wrong torch")
    return ("the script asked for CUDA and this torch is a CPU-only build: either the node has "
            "no GPU and the script forces CUDA, or the node has GPUs and the wrong torch")


def cpu_torch_fix(hit: Hit) -> str:
    follow = ("make the script follow the plan: device = torch.device('cuda', local_rank) if "
              "torch.cuda.is_available() else torch.device('cpu'), backend = "
              "os.environ['MESHRUN_BACKEND'] (gloo on CPU), or meshrun.init_distributed()")
    build = ("install a CUDA build of torch in the environment meshrun runs from (pip install "
             "torch --index-url https://download.pytorch.org/whl/cu124, or your platform's "
             "image)")
    if hit.device == "cpu":
        return follow
    if hit.device == "cuda":
        return build
    return f"{follow}; on a GPU node, {build}"


def port_cause(hit: Hit) -> str:
    port = hit.group("port")
    which = f"port {port}" if port else "the port"
    text = (f"{which} is already taken on this host: another job (or a previous run that has "
            "not exited) listens there")
    if hit.line.lstrip().startswith("meshrun: error: port"):
        return text          # meshrun checked the port itself: nothing else binds it
    return text + ("; or a second node was started with node 0's rank (each node needs its "
                   "own NODE_RANK / --node-rank) and tried to open the job's store too")


def local_rank_cause(hit: Hit) -> str:
    if "--local_rank" in hit.match.group(0):
        return ("a launcher passed --local_rank=N (torch.distributed.launch, deprecated, or a "
                "launch script of its kind) and the script's argparse does not declare it, so "
                "every worker exits with code 2")
    return ("the launcher passed --local-rank=N (torch.distributed.launch since torch 2.0 "
            "writes it with a dash) but the script's argparse only knows --local_rank, so every "
            "worker exits with code 2")


def mismatch_cause(hit: Hit) -> str:
    """c10d's collective check (TORCH_DISTRIBUTED_DEBUG=DETAIL) compared the ranks' next
    collective; its text says in which aspects they differ."""
    text = " ".join((hit.line, *hit.following))
    ops = set(re.findall(r"OpType=(\w+)", text))
    other_op = "Op type" in text or len(ops) > 1
    tensors = [a for a in ("shapes", "dtypes", "devices") if f"Tensor {a}" in text]
    path = ("the ranks issued different collectives at the same point: the script's path "
            "differs between ranks (a branch only some ranks take, a different number of "
            "batches per rank, a layer or a broadcast some ranks skip), so their collectives "
            "no longer pair up")
    shape = (f"the ranks issued the same collective with different tensor "
             f"{', '.join(tensors) or 'shapes or dtypes'}: each rank passes tensors of its own "
             "(a last batch of another size, a per-rank buffer, a tensor left on another "
             "device)")
    if other_op:
        return path + "; without this check such a job hangs until its timeout"
    if tensors:
        return shape
    return (path + ", or the same collective got tensors of different shapes or dtypes on "
            "different ranks")


def host_launcher_context(match: re.Match, text: str) -> bool:
    """ssh's failed lookup is a launcher's (not git's): host:slots with MPI's words in the logs,
    a plain name with a launcher's."""
    if match.group("slots"):
        return bool(re.search(r"mpirun|horovodrun|orted|ORTE|Open MPI", text))
    return bool(re.search(r"pdsh|hostfile|mpirun|horovodrun|deepspeed|runner\.py|ORTE|srun",
                          text, re.I)) and "Could not read from remote repository" not in text


#: a Trainer argument Lightning removed -> (the release that removed it, what replaces it)
_LIGHTNING_ARGS = {
    "gpus": ("2.0", "accelerator='gpu', devices=N"),
    "tpu_cores": ("2.0", "accelerator='tpu', devices=N"),
    "ipus": ("2.0", "accelerator='ipu', devices=N"),
    "auto_select_gpus": ("2.0", "devices='auto' (or a list of free GPUs)"),
    "resume_from_checkpoint": ("2.0", "trainer.fit(model, ckpt_path=PATH)"),
    "auto_lr_find": ("2.0", "the Tuner: Tuner(trainer).lr_find(model)"),
    "replace_sampler_ddp": ("2.0", "use_distributed_sampler="),
    "amp_backend": ("2.0", "precision='16-mixed' (native AMP)"),
    "amp_level": ("2.0", "precision='16-mixed' (native AMP)"),
    "progress_bar_refresh_rate": ("1.7", "callbacks=[TQDMProgressBar(refresh_rate=N)]"),
    "checkpoint_callback": ("1.7", "enable_checkpointing="),
    "weights_summary": ("1.7", "enable_model_summary="),
    "reload_dataloaders_every_epoch": ("1.6", "reload_dataloaders_every_n_epochs=1"),
    "max_nb_epochs": ("0.8", "max_epochs="),
}


def lightning_arg_cause(hit: Hit) -> str:
    release = _LIGHTNING_ARGS[hit.group("arg")][0]
    return (f"Lightning {release} removed the Trainer's {hit.group('arg')}= argument, and this "
            "script (or a package) was written for an older Lightning")


def lightning_arg_fix(hit: Hit) -> str:
    release, instead = _LIGHTNING_ARGS[hit.group("arg")]
    older = (f"pytorch-lightning<{release} for `import pytorch_lightning`, lightning<{release} "
             "for `import lightning`" if release == "2.0" else f"pytorch-lightning<{release}")
    return (f"use {instead} instead of {hit.group('arg')}=, or install the Lightning the "
            f"script was written for ({older})")


_SCHEDULERS = (("LSF", "LSF"), ("PBS", "PBS"), ("wallclock", "Moab"))   # (its words, its name)


def time_limit_cause(hit: Hit) -> str:
    """The scheduler that ended the job, by its own words (SLURM's when no other's)."""
    name = next((name for words, name in _SCHEDULERS if words in hit.line), "SLURM")
    return (f"the batch scheduler ({name}) ended the job when it reached its time limit (the "
            "partition's or queue's default or maximum, or the one asked for): the training "
            "had not finished")


def multinomial_cause(hit: Hit) -> str:
    """What the sampler got, by the wording: all-zero weights, numpy's NaNs, or a divergence."""
    if "sum of probabilities <= 0" in hit.line or "binarySearch" in hit.line:
        return ("sampling (torch.multinomial) got weights that are all zero: everything masked "
                "out, or probabilities that underflowed to 0")
    if "pvals" in hit.line or "probabilities contain NaN" in hit.line:
        return ("numpy's sampling (random.choice, multinomial) got probabilities that are NaN "
                "or out of [0, 1]: weights divided by a sum of 0, or a model's outputs that "
                "diverged")
    return ("sampling (torch.multinomial: generate(do_sample=True), a policy's actions) got "
            "probabilities that are inf, NaN or negative: the model's outputs overflowed or "
            "diverged (fp16 overflow, a learning rate too high, a broken checkpoint)")


def device_mismatch_cause(hit: Hit) -> str:
    """Two GPUs named in the message: a model split over them; else the usual mixes."""
    gpus = sorted(set(re.findall(r"cuda:\d+", hit.line)))
    if len(gpus) > 1:
        return (f"an operation got tensors on two GPUs of one process ({', '.join(gpus)}): a "
                "model spread over several GPUs (device_map='auto' or a hand-made split) whose "
                "block got its input on another GPU than its weights, or code that puts a "
                "tensor on a fixed GPU (.cuda(), cuda:0) instead of this rank's")
    return ("an operation mixed tensors on different devices: the model on GPU and the batch "
            "on CPU, code that puts a tensor on the default GPU (.cuda(), 'cuda', cuda:0) "
            "instead of this rank's, or a rank given another GPU than its model's (a launcher "
            "or framework that counted the processes per node or LOCAL_RANK wrongly)")


def spawn_pickle_cause(hit: Hit) -> str:
    """What a spawned process could not receive, and why pickle cannot carry it."""
    return (f"{hit.group('what')} has to reach another process by pickling (a process started "
            "with spawn: DataLoader workers, Lightning's ddp_spawn, mp.spawn, the default on "
            "Windows and macOS; or a multiprocessing pool's task), and pickle carries only what "
            "can be imported by name: not a function or class defined inside another function, "
            "nor a lambda, nor a class defined only in an interactive __main__ or under its "
            "`if __name__ == '__main__':` guard")
