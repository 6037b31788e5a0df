"""Every malformed or inconsistent input stops the plan with one line: what is wrong, which
variable or flag, and the fix (``meshrun: error: ...; fix: ...``), exit code 2."""

from __future__ import annotations

import pytest
from unit_fakes import CPU_HOST, GPU8_HOST, gpu_uuid, plan

from meshrun.errors import EXIT_USAGE, UsageError
from meshrun.facts import HostFacts
from meshrun.topology import Flags

SLURM_STEP = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NNODES": "2",
              "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}
SEEDS = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "10.0.0.1"}
TWO_NODES = Flags(nnodes="2", node_rank="0", master_addr="10.0.0.1")
NO_GPU_DRIVER = HostFacts(gpu_error="nvidia-smi failed (exit 9): NVIDIA-SMI has failed")

# (id, env, flags, facts, names that must appear in the line, a fragment of the reason)
BAD = [
    # --- node rank outside the node count
    ("rank-equals-world-size", dict(SEEDS, RANK="2"), Flags(), CPU_HOST,
     ["RANK", "WORLD_SIZE"], "is not below the node count 2"),
    ("node-rank-flag-equals-nnodes", {}, Flags(nnodes="2", node_rank="2", master_addr="h"),
     CPU_HOST, ["--node-rank", "--nnodes"], "node ranks run 0..1"),
    ("indexed-job-without-node-count", {"JOB_COMPLETION_INDEX": "1"}, Flags(), CPU_HOST,
     ["JOB_COMPLETION_INDEX", "MESHRUN_NNODES", "--nnodes"], "nothing set the node count"),
    ("indexed-job-index-0-without-node-count", {"JOB_COMPLETION_INDEX": "0"}, Flags(), CPU_HOST,
     ["JOB_COMPLETION_INDEX", "MESHRUN_NNODES", "--nnodes"], "nothing set the node count"),
    # --- numbers: flags
    ("nnodes-flag-negative", {}, Flags(nnodes="-1"), CPU_HOST, ["--nnodes"], "out of range"),
    ("nnodes-flag-zero", {}, Flags(nnodes="0"), CPU_HOST, ["--nnodes"], "must be >= 1"),
    ("nnodes-flag-not-a-number", {}, Flags(nnodes="two"), CPU_HOST, ["--nnodes"],
     "is not a whole number"),
    ("node-rank-flag-negative", {}, Flags(node_rank="-1"), CPU_HOST, ["--node-rank"],
     "must be >= 0"),
    ("node-rank-flag-not-a-number", {}, Flags(node_rank="first"), CPU_HOST, ["--node-rank"],
     "is not a whole number"),
    ("nproc-flag-negative", {}, Flags(nproc_per_node="-2"), CPU_HOST, ["--nproc-per-node"],
     "out of range"),
    ("nproc-flag-zero", {}, Flags(nproc_per_node="0"), CPU_HOST, ["--nproc-per-node"],
     "must be >= 1"),
    ("nproc-flag-not-a-number", {}, Flags(nproc_per_node="1.5"), CPU_HOST,
     ["--nproc-per-node"], "is not a whole number"),
    ("port-flag-negative", {}, Flags(master_port="-5"), CPU_HOST, ["--master-port"],
     "must be 1..65535"),
    ("port-flag-zero", {}, Flags(master_port="0"), CPU_HOST, ["--master-port"],
     "must be 1..65535"),
    ("port-flag-65536", {}, Flags(master_port="65536"), CPU_HOST, ["--master-port"],
     "must be 1..65535"),
    ("port-flag-abc", {}, Flags(master_port="abc"), CPU_HOST, ["--master-port"],
     "is not a whole number"),
    ("join-timeout-flag-zero", {}, Flags(join_timeout="0"), CPU_HOST, ["--join-timeout"],
     "must be >= 1"),
    ("join-timeout-flag-not-a-number", {}, Flags(join_timeout="soon"), CPU_HOST,
     ["--join-timeout"], "is not a whole number"),
    # --- numbers: MESHRUN_* variables
    ("meshrun-nnodes-negative", {"MESHRUN_NNODES": "-1"}, Flags(), CPU_HOST, ["MESHRUN_NNODES"],
     "out of range"),
    ("meshrun-nnodes-not-a-number", {"MESHRUN_NNODES": "two"}, Flags(), CPU_HOST,
     ["MESHRUN_NNODES"], "is not a whole number"),
    ("meshrun-node-rank-negative", {"MESHRUN_NODE_RANK": "-3"}, Flags(), CPU_HOST,
     ["MESHRUN_NODE_RANK"], "out of range"),
    ("meshrun-node-rank-not-a-number", {"MESHRUN_NODE_RANK": "x"}, Flags(), CPU_HOST,
     ["MESHRUN_NODE_RANK"], "is not a whole number"),
    ("meshrun-nproc-negative", {"MESHRUN_NPROC_PER_NODE": "-1"}, Flags(), CPU_HOST,
     ["MESHRUN_NPROC_PER_NODE"], "out of range"),
    ("meshrun-nproc-not-a-number", {"MESHRUN_NPROC_PER_NODE": "all"}, Flags(), CPU_HOST,
     ["MESHRUN_NPROC_PER_NODE"], "is not a whole number"),
    ("meshrun-port-zero", {"MESHRUN_MASTER_PORT": "0"}, Flags(), CPU_HOST,
     ["MESHRUN_MASTER_PORT"], "must be 1..65535"),
    ("meshrun-port-65536", {"MESHRUN_MASTER_PORT": "65536"}, Flags(), CPU_HOST,
     ["MESHRUN_MASTER_PORT"], "must be 1..65535"),
    ("meshrun-port-abc", {"MESHRUN_MASTER_PORT": "abc"}, Flags(), CPU_HOST,
     ["MESHRUN_MASTER_PORT"], "is not a whole number"),
    ("meshrun-join-timeout-negative", {"MESHRUN_JOIN_TIMEOUT": "-1"}, Flags(), CPU_HOST,
     ["MESHRUN_JOIN_TIMEOUT"], "out of range"),
    # --- numbers: platform variables
    ("nnodes-var-negative", {"NNODES": "-2"}, Flags(), CPU_HOST, ["NNODES"], "out of range"),
    ("nnodes-var-not-a-number", {"NNODES": "2x"}, Flags(), CPU_HOST, ["NNODES"],
     "is not a whole number"),
    ("node-rank-var-negative", {"NODE_RANK": "-1"}, Flags(), CPU_HOST, ["NODE_RANK"],
     "out of range"),
    ("node-rank-var-not-a-number", {"NODE_RANK": "1st"}, Flags(), CPU_HOST, ["NODE_RANK"],
     "is not a whole number"),
    ("nproc-var-negative", {"NPROC_PER_NODE": "-8"}, Flags(), CPU_HOST, ["NPROC_PER_NODE"],
     "out of range"),
    ("nproc-var-not-a-number", {"NPROC_PER_NODE": "eight"}, Flags(), CPU_HOST,
     ["NPROC_PER_NODE"], "is not a whole number"),
    ("master-port-var-zero", dict(SEEDS, MASTER_PORT="0"), Flags(), CPU_HOST, ["MASTER_PORT"],
     "out of range"),
    ("master-port-var-65536", dict(SEEDS, MASTER_PORT="65536"), Flags(), CPU_HOST,
     ["MASTER_PORT"], "must be 1..65535"),
    ("master-port-var-abc", dict(SEEDS, MASTER_PORT="abc"), Flags(), CPU_HOST, ["MASTER_PORT"],
     "is not a whole number"),
    ("world-size-zero", {"WORLD_SIZE": "0"}, Flags(), CPU_HOST, ["WORLD_SIZE"], "must be >= 1"),
    ("world-size-not-a-number", {"WORLD_SIZE": "two"}, Flags(), CPU_HOST, ["WORLD_SIZE"],
     "is not a whole number"),
    ("rank-negative", {"RANK": "-1"}, Flags(), CPU_HOST, ["RANK"], "out of range"),
    ("slurm-nnodes-negative", dict(SLURM_STEP, SLURM_NNODES="-1"), Flags(), CPU_HOST,
     ["SLURM_NNODES"], "out of range"),
    ("slurm-nodeid-not-a-number", dict(SLURM_STEP, SLURM_NODEID="x"), Flags(), CPU_HOST,
     ["SLURM_NODEID"], "is not a whole number"),
    ("slurm-gpus-on-node-not-a-number", dict(SLURM_STEP, SLURM_GPUS_ON_NODE="gpu:8"), Flags(),
     GPU8_HOST, ["SLURM_GPUS_ON_NODE"], "is not a whole number"),
    ("pet-nnodes-zero", {"PET_NNODES": "0"}, Flags(), CPU_HOST, ["PET_NNODES"], "must be >= 1"),
    ("pet-nnodes-range-not-a-number", {"PET_NNODES": "2:3x"}, Flags(), CPU_HOST,
     ["PET_NNODES"], "is not a whole number"),
    ("pet-node-rank-negative", {"PET_NODE_RANK": "-1"}, Flags(), CPU_HOST, ["PET_NODE_RANK"],
     "out of range"),
    ("pet-nproc-not-a-number", {"PET_NPROC_PER_NODE": "eight"}, Flags(), CPU_HOST,
     ["PET_NPROC_PER_NODE"], "is not a whole number"),
    ("pet-master-port-70000", {"PET_MASTER_PORT": "70000"}, Flags(), CPU_HOST,
     ["PET_MASTER_PORT"], "outside 1..65535"),
    ("skypilot-num-nodes-not-a-number", {"SKYPILOT_NUM_NODES": "x"}, Flags(), CPU_HOST,
     ["SKYPILOT_NUM_NODES"], "is not a whole number"),
    ("skypilot-node-rank-negative", {"SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_RANK": "-1"},
     Flags(), CPU_HOST, ["SKYPILOT_NODE_RANK"], "out of range"),
    ("ompi-rank-not-a-number", {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "x"},
     Flags(), CPU_HOST, ["OMPI_COMM_WORLD_RANK"], "is not a whole number"),
    ("pmi-size-zero", {"PMI_SIZE": "0", "PMI_RANK": "0"}, Flags(), CPU_HOST, ["PMI_SIZE"],
     "must be >= 1"),
    ("aws-batch-index-not-a-number", {"AWS_BATCH_JOB_NODE_INDEX": "x"}, Flags(), CPU_HOST,
     ["AWS_BATCH_JOB_NODE_INDEX"], "is not a whole number"),
    ("volcano-num-not-a-number", {"VC_WORKER_NUM": "x"}, Flags(), CPU_HOST, ["VC_WORKER_NUM"],
     "is not a whole number"),
    ("indexed-job-index-negative", {"JOB_COMPLETION_INDEX": "-1"}, Flags(), CPU_HOST,
     ["JOB_COMPLETION_INDEX"], "out of range"),
    ("sagemaker-num-gpus-not-a-number", {"SM_HOSTS": '["algo-1"]', "SM_NUM_GPUS": "x"}, Flags(),
     CPU_HOST, ["SM_NUM_GPUS"], "is not a whole number"),
    # --- several nodes without a master address / rank
    ("no-master-flags-only", {}, Flags(nnodes="2", node_rank="1"), CPU_HOST,
     ["--master-addr", "MASTER_ADDR", "--nnodes"], "2 nodes (--nnodes) but no master address"),
    ("no-master-seed004-default-localhost", {"NNODES": "2", "NODE_RANK": "1"}, Flags(),
     CPU_HOST, ["NNODES", "MASTER_ADDR", "localhost"], "other nodes cannot reach"),
    ("no-master-indexed-job", {"JOB_COMPLETION_INDEX": "1", "MESHRUN_NNODES": "2"}, Flags(),
     CPU_HOST, ["MESHRUN_NNODES", "MESHRUN_MASTER_ADDR"], "but no master address"),
    ("no-master-mpi", {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}, Flags(),
     CPU_HOST, ["OMPI_COMM_WORLD_SIZE", "--master-addr"], "but no master address"),
    ("no-node-rank", {}, Flags(nnodes="2", master_addr="h"), CPU_HOST, ["--node-rank"],
     "nothing says which one this is"),
    # --- GPUs
    ("nproc-above-visible-gpus", {}, Flags(nproc_per_node="9"), GPU8_HOST,
     ["--nproc-per-node"], "this node has 8 visible GPUs"),
    ("meshrun-nproc-above-cuda-visible-devices",
     {"MESHRUN_NPROC_PER_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1"}, Flags(), GPU8_HOST,
     ["MESHRUN_NPROC_PER_NODE"], "2 visible GPUs (0, 1)"),
    ("pet-nproc-above-visible-gpus", {"PET_NPROC_PER_NODE": "16"}, Flags(), GPU8_HOST,
     ["PET_NPROC_PER_NODE"], "invalid device ordinal"),
    ("cuda-visible-devices-missing-gpu", {"CUDA_VISIBLE_DEVICES": "8"}, Flags(), GPU8_HOST,
     ["CUDA_VISIBLE_DEVICES"], "names GPU 8, but this host has GPUs: 0, 1, 2, 3, 4, 5, 6, 7"),
    ("cuda-visible-devices-on-cpu-host", {"CUDA_VISIBLE_DEVICES": "0"}, Flags(), CPU_HOST,
     ["CUDA_VISIBLE_DEVICES"], "this host has GPUs: none"),
    ("cuda-visible-devices-duplicate", {"CUDA_VISIBLE_DEVICES": "1,1"}, Flags(), GPU8_HOST,
     ["CUDA_VISIBLE_DEVICES"], "names GPU 1 twice"),
    ("cuda-visible-devices-index-and-its-uuid", {"CUDA_VISIBLE_DEVICES": f"0,{gpu_uuid(0)}"},
     Flags(), GPU8_HOST, ["CUDA_VISIBLE_DEVICES"], "twice"),
    ("cuda-visible-devices-bad-token", {"CUDA_VISIBLE_DEVICES": "0,gpu1"}, Flags(), GPU8_HOST,
     ["CUDA_VISIBLE_DEVICES", "gpu1"], "neither a GPU index nor a UUID"),
    ("cuda-visible-devices-trailing-comma", {"CUDA_VISIBLE_DEVICES": "0,1,"}, Flags(),
     GPU8_HOST, ["CUDA_VISIBLE_DEVICES"], "neither a GPU index nor a UUID"),
    ("cuda-visible-devices-unknown-uuid",
     {"CUDA_VISIBLE_DEVICES": "GPU-deadbeef-0000-0000-0000-000000000000"}, Flags(), GPU8_HOST,
     ["CUDA_VISIBLE_DEVICES", "GPU-deadbeef"], "matches no GPU of this host"),
    ("cuda-visible-devices-ambiguous-uuid-prefix", {"CUDA_VISIBLE_DEVICES": "GPU-"}, Flags(),
     GPU8_HOST, ["CUDA_VISIBLE_DEVICES"], "matches several GPUs"),
    ("slurm-gpus-promised-none-visible", dict(SLURM_STEP, SLURM_GPUS_ON_NODE="4"), Flags(),
     CPU_HOST, ["SLURM_GPUS_ON_NODE", "--nproc-per-node"], "promises 4 GPUs but none is visible"),
    ("sagemaker-gpus-promised-driver-broken", {"SM_HOSTS": '["algo-1"]', "SM_NUM_GPUS": "8"},
     Flags(), NO_GPU_DRIVER, ["SM_NUM_GPUS"], "NVIDIA-SMI has failed"),
    # --- contradicting sources
    ("nnodes-vs-slurm-nnodes", dict(SLURM_STEP, NNODES="3", NODE_RANK="0", MASTER_ADDR="n1"),
     Flags(), CPU_HOST, ["SLURM_NNODES=2", "NNODES=3", "--nnodes"], "disagree on the nnodes"),
    ("pet-nnodes-vs-nnodes", {"PET_NNODES": "2", "NNODES": "3", "MASTER_ADDR": "h"}, Flags(),
     CPU_HOST, ["PET_NNODES=2", "NNODES=3"], "disagree"),
    ("rank-vs-pet-node-rank",
     {"RANK": "1", "PET_NODE_RANK": "0", "PET_NNODES": "2", "MASTER_ADDR": "h"}, Flags(),
     CPU_HOST, ["PET_NODE_RANK=0", "RANK=1", "--node-rank"], "disagree on the node rank"),
    ("master-addr-vs-pet-master-addr",
     {"MASTER_ADDR": "10.0.0.1", "PET_MASTER_ADDR": "10.0.0.2", "PET_NNODES": "2",
      "PET_NODE_RANK": "0"}, Flags(), CPU_HOST,
     ["PET_MASTER_ADDR=10.0.0.2", "MASTER_ADDR=10.0.0.1", "--master-addr"], "disagree"),
    ("master-port-vs-pet-master-port",
     {"MASTER_PORT": "23456", "PET_MASTER_PORT": "29500"}, Flags(), CPU_HOST,
     ["PET_MASTER_PORT=29500", "MASTER_PORT=23456"], "disagree"),
    ("world-size-neither-nodes-nor-processes",
     {"WORLD_SIZE": "3", "PET_NNODES": "2", "PET_NODE_RANK": "0", "MASTER_ADDR": "h"}, Flags(),
     GPU8_HOST, ["WORLD_SIZE=3", "PET_NNODES=2", "--world-size-means"], "2 x 8 = 16"),
    ("world-size-vs-nnodes-flag", {"WORLD_SIZE": "4", "RANK": "0", "MASTER_ADDR": "h"},
     Flags(nnodes="3"), CPU_HOST, ["WORLD_SIZE=4", "--nnodes 3"], "is neither the node count"),
    ("world-size-forced-nodes-vs-nnodes",
     {"WORLD_SIZE": "4", "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "h"},
     Flags(world_size_means="nodes"), CPU_HOST, ["WORLD_SIZE=4", "NNODES=2"],
     "means 4 nodes"),
    ("world-size-forced-processes-vs-pet-nnodes",
     {"WORLD_SIZE": "24", "PET_NNODES": "2", "PET_NODE_RANK": "0", "MASTER_ADDR": "h"},
     Flags(world_size_means="processes"), GPU8_HOST, ["WORLD_SIZE=24", "PET_NNODES=2"],
     "means 3 nodes"),
    ("world-size-processes-not-divisible", dict(SEEDS, WORLD_SIZE="12"),
     Flags(world_size_means="processes"), GPU8_HOST, ["WORLD_SIZE=12", "--nproc-per-node"],
     "not a multiple of 8 processes per node"),
    # --- launch shapes that go wrong
    ("srun-several-tasks-per-node", dict(SLURM_STEP, SLURM_STEP_TASKS_PER_NODE="8(x2)"),
     Flags(), GPU8_HOST, ["SLURM_STEP_TASKS_PER_NODE", "--ntasks-per-node=1"],
     "srun started 8 meshrun copies on this node"),
    ("mpirun-two-ranks-per-node",
     {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, Flags(master_addr="h"), GPU8_HOST,
     ["OMPI_COMM_WORLD_LOCAL_SIZE", "ppr:1:node"], "mpirun started 2 meshrun copies"),
    ("pmi-four-ranks-per-node", {"PMI_SIZE": "8", "PMI_RANK": "5", "MPI_LOCALNRANKS": "4"},
     Flags(master_addr="h"), CPU_HOST, ["MPI_LOCALNRANKS"], "started 4 meshrun copies"),
    ("mpi-uneven-placement",
     {"OMPI_COMM_WORLD_SIZE": "5", "OMPI_COMM_WORLD_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, Flags(master_addr="h"), CPU_HOST,
     ["OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"], "spread unevenly"),
    ("slurm-batch-script-outside-srun",
     {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_NODEID": "0",
      "SLURM_JOB_NODELIST": "n[1-2]"}, Flags(), CPU_HOST,
     ["SLURM_NNODES", "SLURM_STEP_ID", "srun --ntasks-per-node=1"], "outside srun"),
    ("elastic-pet-nnodes-range", {"PET_NNODES": "1:4"}, Flags(), CPU_HOST,
     ["PET_NNODES=4", "--nnodes 1:4"], "is an elastic range from the platform"),
    ("elastic-nnodes-flag-reversed", {}, Flags(nnodes="4:2"), CPU_HOST,
     ["--nnodes '4:2'", "--nnodes 2:4"], "has MIN 4 above MAX 2"),
    ("elastic-min-above-training-nodes", {}, Flags(nnodes="4:5", spares="2", node_rank="0",
                                                   master_addr="h"), CPU_HOST,
     ["--nnodes", "at most 3"], "MIN 4 is more than the 3 nodes that train"),
    ("inside-worker-local-rank", {"LOCAL_RANK": "0"}, Flags(), CPU_HOST, ["LOCAL_RANK"],
     "already a worker"),
    ("inside-worker-torchelastic-run-id", {"TORCHELASTIC_RUN_ID": "abc"}, Flags(), CPU_HOST,
     ["TORCHELASTIC_RUN_ID"], "already a worker"),
    # --- addresses and ids
    ("master-addr-flag-with-port", {}, Flags(nnodes="2", node_rank="0",
                                             master_addr="10.0.0.1:29500"), CPU_HOST,
     ["--master-addr", "--master-port"], "includes a port"),
    ("master-addr-var-with-port", dict(SEEDS, MASTER_ADDR="10.0.0.1:29500"), Flags(), CPU_HOST,
     ["MASTER_ADDR", "MASTER_PORT"], "includes a port"),
    ("master-addr-with-scheme", {}, Flags(nnodes="2", node_rank="0",
                                          master_addr="http://10.0.0.1"), CPU_HOST,
     ["--master-addr", "http://10.0.0.1"], "is not a host name or IP address"),
    ("pet-master-addr-with-scheme",
     {"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "tcp://head"}, Flags(),
     CPU_HOST, ["PET_MASTER_ADDR"], "is not a host name or IP address"),
    ("meshrun-master-addr-with-space",
     {"MESHRUN_NNODES": "2", "MESHRUN_NODE_RANK": "0", "MESHRUN_MASTER_ADDR": "node 0"},
     Flags(), CPU_HOST, ["MESHRUN_MASTER_ADDR"], "is not a host name or IP address"),
    # --- IPv6: stored bare, endpoints read as [addr]:port, never split into garbage
    ("master-addr-flag-bracketed-ipv6-with-port", {},
     Flags(nnodes="2", node_rank="0", master_addr="[fd00::1]:29500"), CPU_HOST,
     ["--master-addr", "[fd00::1]:29500", "--master-port"], "includes a port"),
    ("master-addr-var-bare-ipv6-with-port", dict(SEEDS, MASTER_ADDR="fd00::1:29500"), Flags(),
     CPU_HOST, ["MASTER_ADDR=fd00::1:29500", "MASTER_PORT"], "includes a port"),
    ("master-addr-brackets-around-a-name", {},
     Flags(nnodes="2", node_rank="0", master_addr="[node-0]"), CPU_HOST,
     ["--master-addr", "[node-0]", "fd00::1"], "is not a host name or IP address"),
    ("master-addr-colons-but-not-ipv6", dict(SEEDS, MASTER_ADDR="fd00:zz::1"), Flags(),
     CPU_HOST, ["MASTER_ADDR"], "is not a host name or IP address"),
    ("pet-rdzv-endpoint-ambiguous-ipv6", {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "fd00::1:2"},
     Flags(), CPU_HOST, ["PET_RDZV_ENDPOINT", "[addr]:port", "[fd00::1]:2", "[fd00::1:2]"],
     "is ambiguous"),
    ("pet-rdzv-endpoint-neither-endpoint-nor-ipv6",
     {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "fd00::1:99999"}, Flags(), CPU_HOST,
     ["PET_RDZV_ENDPOINT", "[addr]:port"], "neither host:port nor an IPv6 address"),
    ("pet-rdzv-endpoint-brackets-around-a-name",
     {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "[node-0]:29400"}, Flags(), CPU_HOST,
     ["PET_RDZV_ENDPOINT", "[addr]:port"], "brackets must hold an IPv6 address"),
    ("pet-rdzv-endpoint-unclosed-bracket",
     {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "[fd00::1:29400"}, Flags(), CPU_HOST,
     ["PET_RDZV_ENDPOINT"], "is not an endpoint"),
    ("pet-rdzv-endpoint-ipv6-port-out-of-range",
     {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "[fd00::1]:70000"}, Flags(), CPU_HOST,
     ["PET_RDZV_ENDPOINT", "70000"], "not one in 1..65535"),
    ("pet-rdzv-endpoint-port-not-a-number",
     {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "node-0:http"}, Flags(), CPU_HOST,
     ["PET_RDZV_ENDPOINT", "'http'"], "not one in 1..65535"),
    ("pet-rdzv-endpoint-colon-without-port",
     {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "[fd00::1]:"}, Flags(), CPU_HOST,
     ["PET_RDZV_ENDPOINT"], "without a port"),
    ("pet-rdzv-endpoint-no-host", {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": ":29400"}, Flags(),
     CPU_HOST, ["PET_RDZV_ENDPOINT"], "has no host"),
    ("run-id-with-space", {}, Flags(run_id="my run"), CPU_HOST, ["--run-id"],
     "is not a usable run id"),
    ("run-id-with-slash", {"MESHRUN_RUN_ID": "team/run1"}, Flags(), CPU_HOST,
     ["MESHRUN_RUN_ID"], "is not a usable run id"),
    ("run-id-dot-dot", {}, Flags(run_id="../escape"), CPU_HOST, ["--run-id"],
     "is not a usable run id"),
    ("run-id-too-long", {}, Flags(run_id="r" * 129), CPU_HOST, ["--run-id", "at most 128"],
     "is not a usable run id"),
    ("world-size-means-flag-bad", {}, Flags(world_size_means="gpus"), CPU_HOST,
     ["--world-size-means", "gpus"], "neither 'nodes' nor 'processes'"),
    ("world-size-means-var-bad", {"MESHRUN_WORLD_SIZE_MEANS": "pods"}, Flags(), CPU_HOST,
     ["MESHRUN_WORLD_SIZE_MEANS"], "neither 'nodes' nor 'processes'"),
    # --- platform files and lists
    ("sm-hosts-not-json", {"SM_HOSTS": "[algo-1,algo-2]"}, Flags(), CPU_HOST, ["SM_HOSTS"],
     "is not a JSON list of host names"),
    ("sm-hosts-json-object", {"SM_HOSTS": '{"algo-1": 1}'}, Flags(), CPU_HOST, ["SM_HOSTS"],
     "is not a JSON list of host names"),
    ("sm-hosts-empty-list", {"SM_HOSTS": "[]"}, Flags(), CPU_HOST, ["SM_HOSTS"],
     "is not a JSON list of host names"),
    ("sm-current-host-not-in-hosts",
     {"SM_HOSTS": '["algo-1","algo-2"]', "SM_CURRENT_HOST": "algo-3"}, Flags(), CPU_HOST,
     ["SM_CURRENT_HOST", "SM_HOSTS", "--node-rank"], "is not in SM_HOSTS"),
    ("lsf-rankfile-unreadable",
     {"LSB_JOBID": "98765", "LSB_DJOB_RANKFILE": "/nonexistent/rankfile"}, Flags(), CPU_HOST,
     ["LSB_DJOB_RANKFILE", "/nonexistent/rankfile"], "cannot be read"),
    ("slurm-hostlist-unbalanced", dict(SLURM_STEP, SLURM_JOB_NODELIST="gpu[01-04"), Flags(),
     CPU_HOST, ["SLURM_JOB_NODELIST", "--master-addr"], "is not a SLURM host list"),
    ("slurm-hostlist-reversed-range", dict(SLURM_STEP, SLURM_STEP_NODELIST="gpu[04-01]"),
     Flags(), CPU_HOST, ["SLURM_STEP_NODELIST"], "bad range '04-01'"),
]

assert len({row[0] for row in BAD}) == len(BAD), "duplicate ids"


@pytest.mark.parametrize("env, flags, facts, names, fragment", [row[1:] for row in BAD],
                         ids=[row[0] for row in BAD])
def test_bad_input_is_one_line_with_name_and_fix(env, flags, facts, names, fragment):
    with pytest.raises(UsageError) as info:
        plan(env, flags, facts)
    err = info.value
    line = err.line()
    assert "\n" not in line and "\r" not in line
    assert line.startswith("meshrun: error: ")
    assert "; fix: " in line
    _, _, fix = line.partition("; fix: ")
    assert fix.strip(), line
    assert fragment in line, line
    for name in names:
        assert name in line, (name, line)
    assert err.subject and err.subject in line, (err.subject, line)
    assert err.exit_code == EXIT_USAGE == 2
    assert str(err) == line


def test_there_are_at_least_45_distinct_bad_inputs():
    assert len(BAD) >= 45


def test_the_same_input_passes_once_fixed():
    # Guard against rows that fail for an unrelated reason: fixing the named value plans fine.
    plan(dict(SEEDS, RANK="1"), Flags(), CPU_HOST)
    plan({}, Flags(nnodes="2", node_rank="1", master_addr="h"), CPU_HOST)
    plan({"CUDA_VISIBLE_DEVICES": "7"}, Flags(), GPU8_HOST)
    plan(dict(SLURM_STEP, SLURM_STEP_TASKS_PER_NODE="1(x2)"), Flags(), GPU8_HOST)
    plan({"PET_NNODES": "4:4", "PET_NODE_RANK": "3", "PET_MASTER_ADDR": "h"}, Flags(), CPU_HOST)


@pytest.mark.parametrize("env, flags, addr, port", [
    ({}, Flags(nnodes="2", node_rank="1", master_addr="[fd00::1]", master_port="29500"),
     "fd00::1", 29500),
    (dict(SEEDS, RANK="1", MASTER_ADDR="fd00::1", MASTER_PORT="29500"), Flags(), "fd00::1",
     29500),
    ({"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_RDZV_ENDPOINT": "[fd00::1]:2"}, Flags(),
     "fd00::1", 2),
    ({"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_RDZV_ENDPOINT": "[fd00::1:2]"}, Flags(),
     "fd00::1:2", 29500),
    ({"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_RDZV_ENDPOINT": "[fd00::1]:29400"}, Flags(),
     "fd00::1", 29400),
], ids=["flag-port-separate", "master-addr-port-separate", "rdzv-endpoint-bracketed-port",
        "rdzv-endpoint-bracketed-address-alone", "rdzv-endpoint-in-range-port"])
def test_ipv6_inputs_plan_once_written_as_the_fix_says(env, flags, addr, port):
    p = plan(env, flags, CPU_HOST)
    assert (p.master_addr, p.master_port) == (addr, port)
