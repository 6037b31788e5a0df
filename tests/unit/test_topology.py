"""Where am I: one table row per platform convention of PLATFORMS.md, then precedence,
the WORLD_SIZE rule and the GPU facts. Everything goes through ``make_plan`` with fake
host facts, so no nvidia-smi, file or network is involved."""

from __future__ import annotations

import re

import pytest
from unit_fakes import CPU_HOST, GPU8_HOST, H100, gpu_uuid, gpus, plan

from meshrun.facts import HostFacts
from meshrun.plan import Command, describe
from meshrun.topology import Flags, detect
from meshrun.topology.address import join_host_port, split_endpoint
from meshrun.topology.base import derived_port, expand_hostlist, expand_tasks_per_node

HASHED_RUN_ID = re.compile(r"^mr-[0-9a-f]{10}$")

SLURM_STEP = {"SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "SLURM_NNODES": "4",
              "SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "gpu[01-03,07]",
              "SLURM_STEP_NODELIST": "gpu[01-03,07]", "SLURM_STEP_TASKS_PER_NODE": "1(x4)",
              "SLURM_GPUS_ON_NODE": "8"}
PYTORCHJOB = {"RANK": "1", "MASTER_ADDR": "bert-master-0", "MASTER_PORT": "23456",
              "PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "1",
              "PET_MASTER_ADDR": "bert-master-0", "PET_MASTER_PORT": "23456"}
VOLCANO_SVC = {"VC_MASTER_NUM": "1", "VC_WORKER_NUM": "3",
               "VC_MASTER_HOSTS": "vj-master-0.vj",
               "VC_WORKER_HOSTS": "vj-worker-0.vj,vj-worker-1.vj,vj-worker-2.vj"}
LSF_RANKFILE = "/var/lsf/job.98765.rankfile"
LSF_HOSTS = HostFacts(hostname="c2.cluster", gpus=gpus(8),
                      files={LSF_RANKFILE: "launch1\nc1\nc1\nc2\nc2\nc3\nc3\n"})

# (id, env, flags, facts, expected). ``expected`` holds LaunchPlan attributes; "source" is a
# subset of plan.source; "run_id" may be a compiled pattern; "reading" a substring of
# plan.world_size_reading.
PLATFORMS = [
    ("seeds-world-size-rank-worker",
     {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456"},
     Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=23456, nproc_per_node=8,
          world_size=16, run_id=HASHED_RUN_ID, platform="world-size-rank",
          source={"nnodes": "WORLD_SIZE", "node_rank": "RANK", "master_addr": "MASTER_ADDR",
                  "master_port": "MASTER_PORT", "nproc_per_node": "one per visible GPU (8)"},
          reading="no other node count to cross-check")),
    ("seeds-world-size-rank-master-cpu",
     {"WORLD_SIZE": "4", "RANK": "0", "MASTER_ADDR": "dlc-master", "MASTER_PORT": "29501"},
     Flags(), CPU_HOST,
     dict(nnodes=4, node_rank=0, master_addr="dlc-master", master_port=29501, nproc_per_node=1,
          world_size=4, platform="world-size-rank")),
    ("pai-newer-nproc-per-node",
     {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "23456",
      "NPROC_PER_NODE": "4"},
     Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=0, nproc_per_node=4, world_size=8, platform="world-size-rank",
          visible_devices=("0", "1", "2", "3"), source={"nproc_per_node": "NPROC_PER_NODE"})),
    ("seed004-single-node-defaults",
     {"NNODES": "1", "NODE_RANK": "0", "NPROC_PER_NODE": "8"},
     Flags(), GPU8_HOST,
     dict(nnodes=1, node_rank=0, master_addr="localhost", master_port=29500, nproc_per_node=8,
          platform="nnodes-node-rank",
          source={"nnodes": "NNODES", "node_rank": "NODE_RANK",
                  "nproc_per_node": "NPROC_PER_NODE",
                  "master_addr": "default of MASTER_ADDR (torchrun-style scripts)",
                  "master_port": "default of MASTER_PORT (torchrun-style scripts)"})),
    ("seed004-node-rank-only",
     {"NODE_RANK": "0"},
     Flags(), CPU_HOST,
     dict(nnodes=1, node_rank=0, master_addr="localhost", master_port=29500, nproc_per_node=1,
          platform="nnodes-node-rank")),
    ("seed004-two-nodes-worker",
     {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "192.168.1.100"},
     Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=1, master_addr="192.168.1.100", master_port=29500,
          world_size=16, global_ranks=tuple(range(8, 16)), platform="nnodes-node-rank",
          source={"master_addr": "MASTER_ADDR",
                  "master_port": "default of MASTER_PORT (torchrun-style scripts)"})),
    ("seed004-nproc-per-node-alone",
     {"NPROC_PER_NODE": "2"},
     Flags(), GPU8_HOST,
     dict(nnodes=1, node_rank=0, nproc_per_node=2, master_addr="127.0.0.1", master_port=0,
          platform="single-node", source={"nproc_per_node": "NPROC_PER_NODE"})),
    ("torchrun-pet-range-and-auto",
     {"PET_NNODES": "2:2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.0.0.9",
      "PET_MASTER_PORT": "29400", "PET_NPROC_PER_NODE": "auto"},
     Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=1, master_addr="10.0.0.9", master_port=29400, nproc_per_node=8,
          platform="torchrun-pet", run_id=HASHED_RUN_ID,
          source={"nnodes": "PET_NNODES", "node_rank": "PET_NODE_RANK",
                  "master_addr": "PET_MASTER_ADDR", "master_port": "PET_MASTER_PORT",
                  "nproc_per_node": "one per visible GPU (8)"})),
    ("torchrun-pet-int-nproc-default-port",
     {"PET_NNODES": "3", "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "head.local",
      "PET_NPROC_PER_NODE": "4"},
     Flags(), GPU8_HOST,
     dict(nnodes=3, node_rank=2, master_addr="head.local", master_port=29500, nproc_per_node=4,
          global_ranks=(8, 9, 10, 11), platform="torchrun-pet",
          source={"nproc_per_node": "PET_NPROC_PER_NODE", "master_port": "default (29500)"})),
    ("torchrun-pet-rdzv-endpoint",
     {"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_RDZV_ENDPOINT": "10.0.0.3:29401"},
     Flags(), CPU_HOST,
     dict(nnodes=2, node_rank=0, master_addr="10.0.0.3", master_port=29401,
          source={"master_addr": "PET_RDZV_ENDPOINT", "master_port": "PET_RDZV_ENDPOINT"})),
    ("slurm-step-gpu-list",
     SLURM_STEP, Flags(), GPU8_HOST,
     dict(nnodes=4, node_rank=2, master_addr="gpu01", master_port=18456, nproc_per_node=8,
          run_id="slurm-123456.0", platform="slurm",
          source={"nnodes": "SLURM_NNODES", "node_rank": "SLURM_NODEID",
                  "master_addr": "first host of SLURM_STEP_NODELIST=gpu[01-03,07]",
                  "master_port": "derived from SLURM_JOB_ID=123456 (15000 + last 4 digits)",
                  "nproc_per_node": "SLURM_GPUS_ON_NODE",
                  "run_id": "SLURM_JOB_ID and SLURM_STEP_ID"})),
    ("slurm-step-rack-nodelist",
     {"SLURM_JOB_ID": "987", "SLURM_STEP_ID": "3", "SLURM_STEP_NUM_NODES": "4",
      "SLURM_NNODES": "8", "SLURM_NODEID": "3", "SLURM_JOB_NODELIST": "rack[1-4]n[1-2]",
      "SLURM_STEP_NODELIST": "rack[1-2]n[1-2]"},
     Flags(), CPU_HOST,
     dict(nnodes=4, node_rank=3, master_addr="rack1n1", master_port=15987,
          run_id="slurm-987.3",
          source={"nnodes": "SLURM_STEP_NUM_NODES",
                  "master_addr": "first host of SLURM_STEP_NODELIST=rack[1-2]n[1-2]"})),
    ("slurm-step-padded-nodelist",
     {"SLURM_JOB_ID": "20250001", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "3",
      "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "node[08-10]"},
     Flags(), CPU_HOST,
     dict(nnodes=3, node_rank=1, master_addr="node08", master_port=15001,
          run_id="slurm-20250001.0", source={"nnodes": "SLURM_JOB_NUM_NODES"})),
    ("slurm-single-node-batch",
     {"SLURM_JOB_ID": "42", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
      "SLURM_JOB_NODELIST": "gpu05"},
     Flags(), CPU_HOST,
     dict(nnodes=1, node_rank=0, master_addr="gpu05", master_port=15042, run_id="slurm-42",
          platform="slurm", source={"run_id": "SLURM_JOB_ID"})),
    ("kubeflow-pytorchjob-world-size-pods",
     dict(PYTORCHJOB, WORLD_SIZE="2"), Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=1, master_addr="bert-master-0", master_port=23456,
          nproc_per_node=8, world_size=16, run_id="pytorchjob-bert",
          platform="kubeflow-pytorchjob", source={"nnodes": "PET_NNODES"},
          reading="WORLD_SIZE read as nodes: WORLD_SIZE=2 equals PET_NNODES=2")),
    ("kubeflow-pytorchjob-world-size-pods-x-nproc",
     dict(PYTORCHJOB, WORLD_SIZE="16"), Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=1, master_addr="bert-master-0", master_port=23456,
          nproc_per_node=8, world_size=16, run_id="pytorchjob-bert",
          platform="kubeflow-pytorchjob",
          reading="WORLD_SIZE read as processes: WORLD_SIZE=16 equals PET_NNODES=2 x 8 "
                  "processes per node")),
    ("kubeflow-pytorchjob-old-operator-default-port",
     {"WORLD_SIZE": "3", "RANK": "2", "MASTER_ADDR": "bert-master-0"}, Flags(), CPU_HOST,
     dict(nnodes=3, node_rank=2, master_addr="bert-master-0", master_port=23456,
          run_id="pytorchjob-bert", platform="kubeflow-pytorchjob",
          source={"master_port": "default of Kubeflow PyTorchJob",
                  "run_id": "derived from the job name in MASTER_ADDR=bert-master-0"})),
    ("kubeflow-trainer-v2",
     {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "llama-node-0-0.llama",
      "PET_MASTER_PORT": "29500", "PET_NPROC_PER_NODE": "auto"},
     Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=1, master_addr="llama-node-0-0.llama", master_port=29500,
          nproc_per_node=8, run_id="trainjob-llama", platform="kubeflow-trainer-v2",
          world_size_reading="")),
    ("kubernetes-indexed-job",
     {"JOB_COMPLETION_INDEX": "3", "MESHRUN_NNODES": "4",
      "MESHRUN_MASTER_ADDR": "train-0.train-svc"},
     Flags(), GPU8_HOST,
     dict(nnodes=4, node_rank=3, master_addr="train-0.train-svc", master_port=29500,
          global_ranks=tuple(range(24, 32)), platform="kubernetes-indexed-job",
          source={"nnodes": "MESHRUN_NNODES", "node_rank": "JOB_COMPLETION_INDEX",
                  "master_addr": "MESHRUN_MASTER_ADDR"})),
    ("volcano-svc-worker-1",
     dict(VOLCANO_SVC, VC_TASK_INDEX="1", HOSTNAME="vj-worker-1"), Flags(), CPU_HOST,
     dict(nnodes=4, node_rank=2, master_addr="vj-master-0.vj", master_port=29500,
          platform="volcano",
          source={"nnodes": "sum of VC_MASTER_NUM + VC_WORKER_NUM",
                  "node_rank": "VC_TASK_INDEX + 1 nodes of earlier tasks (task worker)",
                  "master_addr": "first host of VC_MASTER_HOSTS"})),
    ("volcano-svc-master",
     dict(VOLCANO_SVC, VC_TASK_INDEX="0", HOSTNAME="vj-master-0"), Flags(), CPU_HOST,
     dict(nnodes=4, node_rank=0, master_addr="vj-master-0.vj", platform="volcano")),
    ("volcano-svc-hostname-from-facts",
     dict(VOLCANO_SVC, VC_TASK_INDEX="2"), Flags(), HostFacts(hostname="vj-worker-2"),
     dict(nnodes=4, node_rank=3, platform="volcano")),
    ("volcano-master-task-first-then-alphabetical",
     {"VC_MASTER_NUM": "1", "VC_AGENT_NUM": "2", "VC_MASTER_HOSTS": "vj-master-0.vj",
      "VC_AGENT_HOSTS": "vj-agent-0.vj,vj-agent-1.vj", "VC_TASK_INDEX": "1",
      "HOSTNAME": "vj-agent-1"},
     Flags(), CPU_HOST,
     dict(nnodes=3, node_rank=2, master_addr="vj-master-0.vj", platform="volcano")),
    ("volcano-pytorch-plugin",
     dict(VOLCANO_SVC, VC_TASK_INDEX="1", HOSTNAME="vj-worker-1", WORLD_SIZE="4", RANK="2",
          MASTER_ADDR="vj-master-0.vj", MASTER_PORT="23456"),
     Flags(), GPU8_HOST,
     dict(nnodes=4, node_rank=2, master_addr="vj-master-0.vj", master_port=23456,
          world_size=32, platform="volcano",
          source={"nnodes": "WORLD_SIZE", "node_rank": "RANK", "master_port": "MASTER_PORT"},
          reading="WORLD_SIZE read as nodes: WORLD_SIZE=4 equals 4")),
    ("skypilot",
     {"SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_RANK": "1",
      "SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6\n", "SKYPILOT_NUM_GPUS_PER_NODE": "8",
      "SKYPILOT_TASK_ID": "sky-2024-05-01-12-00-00-000001_mycluster_1"},
     Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=1, master_addr="10.0.0.5", master_port=29500, nproc_per_node=8,
          run_id="sky-2024-05-01-12-00-00-000001_mycluster_1", platform="skypilot",
          source={"master_addr": "first line of SKYPILOT_NODE_IPS",
                  "nproc_per_node": "SKYPILOT_NUM_GPUS_PER_NODE"})),
    ("openmpi-one-rank-per-node",
     {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_NODE_RANK": "0"},
     Flags(master_addr="10.1.1.1"), GPU8_HOST,
     dict(nnodes=4, node_rank=3, master_addr="10.1.1.1", master_port=29500, platform="openmpi",
          global_ranks=tuple(range(24, 32)),
          source={"nnodes": "OMPI_COMM_WORLD_SIZE=4 / OMPI_COMM_WORLD_LOCAL_SIZE=1",
                  "node_rank": "OMPI_COMM_WORLD_RANK", "master_addr": "--master-addr"})),
    ("openmpi-master-from-exported-env",
     {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "MASTER_ADDR": "10.1.1.2"},
     Flags(), CPU_HOST,
     dict(nnodes=2, node_rank=0, master_addr="10.1.1.2", platform="openmpi",
          source={"master_addr": "MASTER_ADDR"})),
    ("pmi",
     {"PMI_SIZE": "3", "PMI_RANK": "2"}, Flags(master_addr="10.1.1.1"), CPU_HOST,
     dict(nnodes=3, node_rank=2, master_addr="10.1.1.1", platform="pmi",
          source={"nnodes": "PMI_SIZE", "node_rank": "PMI_RANK"})),
    ("pmix-namespace-run-id",
     {"PMI_SIZE": "2", "PMI_RANK": "1", "PMIX_NAMESPACE": "prterun-h1-1234@1"},
     Flags(master_addr="h1"), CPU_HOST,
     dict(nnodes=2, node_rank=1, run_id="mpi-prterun-h1-1234-1", platform="pmi")),
    ("lsf-rankfile",
     {"LSB_JOBID": "98765", "LSB_DJOB_RANKFILE": LSF_RANKFILE}, Flags(), LSF_HOSTS,
     dict(nnodes=3, node_rank=1, master_addr="c1", master_port=23765, run_id="lsf-98765",
          platform="lsf",
          source={"node_rank": "position of c2.cluster in LSB_DJOB_RANKFILE",
                  "master_port": "derived from LSB_JOBID=98765 (15000 + last 4 digits)"})),
    ("sagemaker",
     {"SM_HOSTS": '["algo-1","algo-2"]', "SM_CURRENT_HOST": "algo-2", "SM_NUM_GPUS": "8",
      "TRAINING_JOB_NAME": "bert-2024-05-01"},
     Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=1, master_addr="algo-1", master_port=29500, nproc_per_node=8,
          run_id="sm-bert-2024-05-01", platform="sagemaker",
          source={"nnodes": "length of SM_HOSTS", "nproc_per_node": "SM_NUM_GPUS"})),
    ("sagemaker-hosts-unsorted",
     {"SM_HOSTS": '["algo-2","algo-1"]', "SM_CURRENT_HOST": "algo-2"},
     Flags(), CPU_HOST,
     dict(nnodes=2, node_rank=1, master_addr="algo-1",
          source={"node_rank": "position of SM_CURRENT_HOST in sorted SM_HOSTS"})),
    ("sagemaker-master",
     {"SM_HOSTS": '["algo-1","algo-2","algo-3"]', "SM_CURRENT_HOST": "algo-1"},
     Flags(), CPU_HOST,
     dict(nnodes=3, node_rank=0, master_addr="algo-1", platform="sagemaker")),
    ("aws-batch-main-node",
     {"AWS_BATCH_JOB_NUM_NODES": "3", "AWS_BATCH_JOB_NODE_INDEX": "0",
      "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0", "AWS_BATCH_JOB_ID": "4d5e-6f#0"},
     Flags(), HostFacts(hostname="ip-10-0-0-1"),
     dict(nnodes=3, node_rank=0, master_addr="ip-10-0-0-1", master_port=29500,
          run_id="batch-4d5e-6f", platform="aws-batch",
          source={"master_addr": "this host (the main node of the AWS Batch job)"})),
    ("aws-batch-child-node",
     {"AWS_BATCH_JOB_NUM_NODES": "3", "AWS_BATCH_JOB_NODE_INDEX": "2",
      "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
      "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.1",
      "AWS_BATCH_JOB_ID": "4d5e-6f#2"},
     Flags(), HostFacts(hostname="ip-10-0-0-3"),
     dict(nnodes=3, node_rank=2, master_addr="10.0.0.1", run_id="batch-4d5e-6f",
          platform="aws-batch",
          source={"master_addr": "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"})),
    ("aws-batch-main-node-not-index-0",
     {"AWS_BATCH_JOB_NUM_NODES": "3", "AWS_BATCH_JOB_NODE_INDEX": "0",
      "AWS_BATCH_JOB_MAIN_NODE_INDEX": "1",
      "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.2"},
     Flags(), CPU_HOST,
     dict(nnodes=3, node_rank=2, master_addr="10.0.0.2", platform="aws-batch")),
    ("azureml-world-size-without-node-count",
     {"AZUREML_RUN_ID": "run_42", "AZUREML_EXPERIMENT_ID": "e1", "NODE_RANK": "1",
      "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "WORLD_SIZE": "2"},
     Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=1, master_addr="10.0.0.4", master_port=6105, world_size=16,
          run_id="aml-run_42", platform="azureml",
          source={"nnodes": "WORLD_SIZE", "node_rank": "NODE_RANK"})),
    ("azureml-node-count-and-process-world-size",
     {"AZUREML_RUN_ID": "run_43", "NODE_RANK": "0", "NODE_COUNT": "2",
      "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "WORLD_SIZE": "16"},
     Flags(), GPU8_HOST,
     dict(nnodes=2, node_rank=0, world_size=16, platform="azureml",
          source={"nnodes": "NODE_COUNT"},
          reading="WORLD_SIZE read as processes: WORLD_SIZE=16 equals NODE_COUNT=2 x 8")),
    ("nothing-set-cpu",
     {}, Flags(), CPU_HOST,
     dict(nnodes=1, node_rank=0, master_addr="127.0.0.1", master_port=0, nproc_per_node=1,
          world_size=1, global_ranks=(0,), backend="gloo", run_id=HASHED_RUN_ID,
          platform="single-node", platforms=(),
          source={"nnodes": "default: nothing names a node count, so a single node",
                  "master_addr": "default: single node, loopback",
                  "master_port": "single node: a free port is chosen at launch"})),
    ("nothing-set-gpu",
     {}, Flags(), GPU8_HOST,
     dict(nnodes=1, node_rank=0, master_addr="127.0.0.1", master_port=0, nproc_per_node=8,
          world_size=8, backend="nccl", platform="single-node")),
]


def check(p, expected: dict) -> None:
    for key, want in expected.items():
        if key == "source":
            for name, text in want.items():
                assert p.source[name] == text, (name, p.source[name])
        elif key == "reading":
            assert want in p.world_size_reading, p.world_size_reading
        elif isinstance(want, re.Pattern):
            assert want.match(getattr(p, key)), (key, getattr(p, key))
        else:
            assert getattr(p, key) == want, (key, getattr(p, key), want)


@pytest.mark.parametrize("env, flags, facts, expected",
                         [row[1:] for row in PLATFORMS], ids=[row[0] for row in PLATFORMS])
def test_platform_convention(env, flags, facts, expected):
    p = plan(env, flags, facts)
    check(p, expected)
    # Invariants of every plan.
    assert p.world_size == p.nnodes * p.nproc_per_node
    assert p.global_ranks == tuple(range(p.node_rank * p.nproc_per_node,
                                         (p.node_rank + 1) * p.nproc_per_node))
    assert p.env_dict()["MESHRUN_NODE_RANK"] == str(p.node_rank)
    assert p.env_dict()["MESHRUN_NNODES"] == str(p.nnodes)
    assert p.log_dir == f"logs/{p.run_id}"


def test_platform_table_covers_every_detector():
    labels = {plan(env, flags, facts).platform for _, env, flags, facts, _ in PLATFORMS}
    assert labels >= {"world-size-rank", "nnodes-node-rank", "torchrun-pet", "slurm",
                      "kubeflow-pytorchjob", "kubeflow-trainer-v2", "kubernetes-indexed-job",
                      "volcano", "skypilot", "openmpi", "pmi", "lsf", "sagemaker", "aws-batch",
                      "azureml", "single-node"}


def test_hashed_run_id_is_the_same_on_every_node_and_differs_per_command():
    env0 = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456"}
    env1 = dict(env0, RANK="1")
    cmd = Command("train.py", ("--lr", "1"))
    ids = {plan(env, facts=GPU8_HOST, command=cmd).run_id for env in (env0, env1)}
    assert len(ids) == 1
    other = plan(env0, facts=GPU8_HOST, command=Command("eval.py")).run_id
    assert other not in ids


# --- SLURM list syntax ------------------------------------------------------------------------

@pytest.mark.parametrize("text, hosts", [
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("rack[1-2]n[1-2]", ["rack1n1", "rack1n2", "rack2n1", "rack2n2"]),
    ("node[08-10]", ["node08", "node09", "node10"]),
    ("gpu[01-02],cpu1", ["gpu01", "gpu02", "cpu1"]),
    ("a1,b[3],c[9-10]-ib", ["a1", "b3", "c9-ib", "c10-ib"]),
    ("single", ["single"]),
], ids=["range-and-single", "two-groups-multiply", "zero-padding", "mixed-list",
        "suffix-after-bracket", "plain-host"])
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["gpu[01-03", "gpu]01[", "gpu[03-01]", "gpu[a-c]"],
                         ids=["unbalanced-open", "unbalanced-close", "reversed-range",
                              "letters-range"])
def test_expand_hostlist_rejects(text):
    with pytest.raises(ValueError):
        expand_hostlist(text)


@pytest.mark.parametrize("text, counts", [
    ("2(x3),1", [2, 2, 2, 1]),
    ("8(x2)", [8, 8]),
    ("1", [1]),
    ("4,2(x2)", [4, 2, 2]),
], ids=["repeat-then-single", "repeat-only", "single", "single-then-repeat"])
def test_expand_tasks_per_node(text, counts):
    assert expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("job, port", [("123456", 18456), ("7", 15007), ("12340000", 15000),
                                       ("99999", 24999), ("1234_5", 17345)],
                         ids=["six-digits", "one-digit", "trailing-zeros", "max", "array-job"])
def test_derived_port(job, port):
    derived = derived_port(job, "SLURM_JOB_ID")
    assert derived.value == port
    assert derived.explicit is False
    assert f"SLURM_JOB_ID={job}" in derived.source


# --- precedence: flags > MESHRUN_* > platform -------------------------------------------------

SLURM_2 = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "1", "SLURM_NNODES": "2",
           "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}


@pytest.mark.parametrize("env, flags, field, value, source", [
    (dict(SLURM_2, MESHRUN_NNODES="3"), Flags(nnodes="4"), "nnodes", 4, "--nnodes"),
    (dict(SLURM_2, MESHRUN_NNODES="3"), Flags(), "nnodes", 3, "MESHRUN_NNODES"),
    (SLURM_2, Flags(), "nnodes", 2, "SLURM_NNODES"),
    (dict(SLURM_2, MESHRUN_NODE_RANK="1"), Flags(node_rank="0"), "node_rank", 0,
     "--node-rank"),
    (dict(SLURM_2, MESHRUN_NODE_RANK="1"), Flags(), "node_rank", 1, "MESHRUN_NODE_RANK"),
    (dict(SLURM_2, MASTER_ADDR="10.9.9.9", MESHRUN_MASTER_ADDR="10.8.8.8"),
     Flags(master_addr="10.7.7.7"), "master_addr", "10.7.7.7", "--master-addr"),
    (dict(SLURM_2, MASTER_ADDR="10.9.9.9", MESHRUN_MASTER_ADDR="10.8.8.8"), Flags(),
     "master_addr", "10.8.8.8", "MESHRUN_MASTER_ADDR"),
    (dict(SLURM_2, MASTER_ADDR="10.9.9.9"), Flags(), "master_addr", "10.9.9.9", "MASTER_ADDR"),
    (SLURM_2, Flags(), "master_addr", "n1", "first host of SLURM_JOB_NODELIST=n[1-2]"),
    (dict(SLURM_2, MESHRUN_MASTER_PORT="2001", MASTER_PORT="2002"),
     Flags(master_port="2000"), "master_port", 2000, "--master-port"),
    (dict(SLURM_2, MESHRUN_MASTER_PORT="2001", MASTER_PORT="2002"), Flags(), "master_port",
     2001, "MESHRUN_MASTER_PORT"),
    (dict(SLURM_2, MASTER_PORT="2002"), Flags(), "master_port", 2002, "MASTER_PORT"),
    (SLURM_2, Flags(), "master_port", 19242,
     "derived from SLURM_JOB_ID=4242 (15000 + last 4 digits)"),
    (dict(SLURM_2, MESHRUN_RUN_ID="env-id"), Flags(run_id="flag-id"), "run_id", "flag-id",
     "--run-id"),
    (dict(SLURM_2, MESHRUN_RUN_ID="env-id"), Flags(), "run_id", "env-id", "MESHRUN_RUN_ID"),
    (SLURM_2, Flags(), "run_id", "slurm-4242.1", "SLURM_JOB_ID and SLURM_STEP_ID"),
], ids=["nnodes-flag", "nnodes-meshrun-var", "nnodes-platform",
        "node-rank-flag", "node-rank-meshrun-var",
        "master-addr-flag", "master-addr-meshrun-var", "master-addr-explicit-beats-derived",
        "master-addr-derived",
        "master-port-flag", "master-port-meshrun-var", "master-port-explicit-beats-derived",
        "master-port-derived",
        "run-id-flag", "run-id-meshrun-var", "run-id-platform"])
def test_precedence(env, flags, field, value, source):
    p = plan(env, flags, CPU_HOST)
    assert getattr(p, field) == value
    assert p.source[field] == source


@pytest.mark.parametrize("env, flags, nproc, source", [
    ({"MESHRUN_NPROC_PER_NODE": "4", "PET_NPROC_PER_NODE": "6"}, Flags(nproc_per_node="2"),
     2, "--nproc-per-node"),
    ({"MESHRUN_NPROC_PER_NODE": "4", "PET_NPROC_PER_NODE": "6"}, Flags(), 4,
     "MESHRUN_NPROC_PER_NODE"),
    ({"PET_NPROC_PER_NODE": "6"}, Flags(), 6, "PET_NPROC_PER_NODE"),
    ({}, Flags(), 8, "one per visible GPU (8)"),
], ids=["flag", "meshrun-var", "platform", "gpu-count"])
def test_precedence_nproc_per_node(env, flags, nproc, source):
    p = plan(env, flags, GPU8_HOST)
    assert p.nproc_per_node == nproc
    assert p.source["nproc_per_node"] == source
    assert p.visible_devices == tuple(str(i) for i in range(nproc))


def test_flag_beats_contradicting_platform_values_without_error():
    # Flags are not cross-checked against platform values: they are the user's override.
    env = dict(SLURM_2, NNODES="3", MESHRUN_NNODES="5")
    p = plan(env, Flags(nnodes="2", node_rank="1"), CPU_HOST)
    assert (p.nnodes, p.node_rank) == (2, 1)
    assert p.source["nnodes"] == "--nnodes"


def test_join_timeout_and_log_dir_precedence():
    p = plan({"MESHRUN_JOIN_TIMEOUT": "30", "MESHRUN_LOG_DIR": "/tmp/x"},
             Flags(join_timeout="45"), CPU_HOST)
    assert p.join_timeout == 45
    assert p.log_dir.startswith("/tmp/x/")
    assert p.source["log_dir"] == "MESHRUN_LOG_DIR"
    default = plan({}, Flags(), CPU_HOST)
    assert default.join_timeout == 600
    assert default.source["log_dir"] == "default"


def test_spares_are_the_highest_node_ranks_and_the_world_is_the_seated_nodes():
    """--spares 1 of 3 nodes (a PyTorchJob's variables): nodes 0 and 1 train, world 2 x 8;
    node 2 waits with no rank yet; the job config and MESHRUN_NNODES see the 2 that train."""
    env = {"WORLD_SIZE": "3", "RANK": "2", "MASTER_ADDR": "m", "MASTER_PORT": "23456",
           "MESHRUN_SPARES": "1"}
    spare = plan(env, Flags(), GPU8_HOST)
    assert (spare.nnodes, spare.spares, spare.seated_nodes) == (3, 1, 2)
    assert spare.world_size == 16 and spare.global_ranks == () and spare.is_spare
    assert spare.env_dict()["MESHRUN_NNODES"] == "2"
    assert "nodes              : 3 (2 training, 1 spare)" in describe(spare)
    assert "none yet: a spare, it takes a lost node's ranks" in describe(spare)
    seated = plan({**env, "RANK": "1"}, Flags(spares="1"), GPU8_HOST)
    assert seated.global_ranks == tuple(range(8, 16)) and not seated.is_spare
    assert seated.source["spares"] == "--spares"


def test_an_nnodes_range_starts_max_nodes_and_shrinks_to_min_training_nodes():
    """--nnodes MIN:MAX (or MESHRUN_NNODES): MAX nodes start and train, the job may shrink to
    MIN; with --spares the range's MAX counts the spares and MIN the training nodes; MIN:MAX
    with MIN == MAX, or MIN at the training nodes, is a fixed job."""
    from meshrun.plan.describe import describe

    two_four = plan({}, Flags(nnodes="2:4", node_rank="1", master_addr="m"))
    assert (two_four.nnodes, two_four.seated_nodes, two_four.min_nodes) == (4, 4, 2)
    assert two_four.world_size == 4 and two_four.global_ranks == (1,)
    assert "(--nnodes; shrinks to no fewer than 2 training nodes on a loss)" in describe(two_four)
    by_env = plan({"MESHRUN_NNODES": "2:4", "MESHRUN_NODE_RANK": "0", "MESHRUN_MASTER_ADDR": "m"})
    assert (by_env.nnodes, by_env.min_nodes) == (4, 2)
    with_spare = plan({}, Flags(nnodes="3:5", spares="1", node_rank="0", master_addr="m"))
    assert (with_spare.nnodes, with_spare.seated_nodes, with_spare.min_nodes) == (5, 4, 3)
    assert plan({}, Flags(nnodes="4:4", node_rank="0", master_addr="m")).min_nodes is None
    assert plan({}, Flags(nnodes="4:5", spares="1", node_rank="0",
                          master_addr="m")).min_nodes is None


@pytest.mark.parametrize("spares", ["2", "5"])
def test_spares_that_leave_no_node_to_train_are_refused_with_the_node_count_to_give(spares):
    from meshrun.errors import UsageError

    with pytest.raises(UsageError) as info:
        plan({}, Flags(nnodes="2", node_rank="0", master_addr="m", spares=spares), CPU_HOST)
    assert info.value.code == "bad-spares"
    assert f"--spares {spares} leaves no node to train: the job has 2 nodes" in str(info.value)
    assert f"give --nnodes {2 + int(spares)}" in info.value.line()


def test_topology_detect_records_every_platform_seen():
    topo = detect({"AZUREML_RUN_ID": "r", "NODE_RANK": "1", "WORLD_SIZE": "2",
                   "MASTER_ADDR": "h"})
    assert topo.platform == "azureml"
    assert topo.platforms == ("azureml", "nnodes-node-rank")
    assert topo.world_size.value == 2 and topo.world_size.source == "WORLD_SIZE"


# --- the WORLD_SIZE rule ----------------------------------------------------------------------

SEEDS = {"WORLD_SIZE": "16", "RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456"}


@pytest.mark.parametrize("env, flags, facts, nnodes, reading", [
    (SEEDS, Flags(), GPU8_HOST, 16,
     "WORLD_SIZE read as nodes: no other node count to cross-check"),
    (SEEDS, Flags(world_size_means="processes"), GPU8_HOST, 2,
     "WORLD_SIZE read as processes: forced by --world-size-means"),
    (dict(SEEDS, MESHRUN_WORLD_SIZE_MEANS="processes"), Flags(), GPU8_HOST, 2,
     "WORLD_SIZE read as processes: forced by MESHRUN_WORLD_SIZE_MEANS"),
    (dict(SEEDS, MESHRUN_WORLD_SIZE_MEANS="processes"), Flags(world_size_means="nodes"),
     GPU8_HOST, 16, "WORLD_SIZE read as nodes: forced by --world-size-means"),
    (dict(SEEDS, MESHRUN_WORLD_SIZE_MEANS=" Processes "), Flags(), GPU8_HOST, 2,
     "forced by MESHRUN_WORLD_SIZE_MEANS"),
    (dict(SEEDS, WORLD_SIZE="4"), Flags(world_size_means="processes", nproc_per_node="2"),
     CPU_HOST, 2, "WORLD_SIZE read as processes"),
    (dict(SEEDS, WORLD_SIZE="2"), Flags(nnodes="2"), GPU8_HOST, 2,
     "WORLD_SIZE read as nodes: WORLD_SIZE=2 equals --nnodes 2"),
    (SEEDS, Flags(nnodes="2"), GPU8_HOST, 2,
     "WORLD_SIZE read as processes: WORLD_SIZE=16 equals --nnodes 2 x 8 processes per node"),
    (dict(SEEDS, WORLD_SIZE="2", NNODES="2"), Flags(), CPU_HOST, 2,
     "WORLD_SIZE read as nodes: WORLD_SIZE=2 equals NNODES=2"),
    (dict(SEEDS, WORLD_SIZE="8", SLURM_JOB_ID="77", SLURM_STEP_ID="0", SLURM_NNODES="2",
          SLURM_NODEID="1"), Flags(), HostFacts(gpus=gpus(4)), 2,
     "WORLD_SIZE read as processes: WORLD_SIZE=8 equals SLURM_NNODES=2 x 4"),
    ({"NNODES": "1"}, Flags(world_size_means="nodes"), CPU_HOST, 1,
     "--world-size-means given but WORLD_SIZE is not set"),
], ids=["default-nodes", "forced-processes-flag", "forced-processes-variable",
        "flag-beats-variable", "forced-value-case-and-space", "forced-processes-cpu",
        "cross-check-nodes-flag", "cross-check-processes-flag", "cross-check-nodes-nnodes-var",
        "cross-check-processes-slurm", "forced-without-world-size"])
def test_world_size_rule(env, flags, facts, nnodes, reading):
    p = plan(env, flags, facts)
    assert p.nnodes == nnodes
    assert reading in p.world_size_reading
    if "processes" in reading and "WORLD_SIZE read as" in reading:
        assert p.world_size == int(env["WORLD_SIZE"])


def test_world_size_processes_records_the_division():
    p = plan(SEEDS, Flags(world_size_means="processes"), GPU8_HOST)
    assert p.source["nnodes"] == "WORLD_SIZE=16 / 8 processes per node"
    assert p.node_rank == 1 and p.global_ranks == tuple(range(8, 16))


def test_world_size_reading_is_in_the_plan_text():
    text = describe(plan(SEEDS, Flags(world_size_means="processes"), GPU8_HOST))
    assert re.search(r"^  WORLD_SIZE +: WORLD_SIZE read as processes: forced by "
                     r"--world-size-means$", text, re.M)


# --- GPU facts ---------------------------------------------------------------------------------

@pytest.mark.parametrize("cvd, visible, names", [
    (None, tuple(str(i) for i in range(8)), 8),
    ("2,3", ("2", "3"), 2),
    (" 5 , 1 ", ("5", "1"), 2),
    (f"{gpu_uuid(4)},{gpu_uuid(6)}", (gpu_uuid(4), gpu_uuid(6)), 2),
    ("GPU-7aaa", ("GPU-7aaa",), 1),
    ("MIG-1f2e3d4c-aaaa-bbbb-cccc-000000000000", ("MIG-1f2e3d4c-aaaa-bbbb-cccc-000000000000",), 1),
], ids=["unset-all-gpus", "indices", "indices-with-spaces", "full-uuids", "uuid-prefix",
        "mig-device"])
def test_cuda_visible_devices_is_honoured(cvd, visible, names):
    env = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    p = plan(env, Flags(), GPU8_HOST)
    assert p.visible_devices == visible
    assert p.nproc_per_node == len(visible)
    assert len(p.gpu_names) == names
    assert p.env_dict()["CUDA_VISIBLE_DEVICES"] == ",".join(visible)
    assert p.backend == "nccl" and p.device == "cuda"


def test_two_nodes_of_eight_gpus_each_see_their_own_eight():
    base = {"WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456"}
    for rank, ranks in ((0, range(0, 8)), (1, range(8, 16))):
        p = plan(dict(base, RANK=str(rank)), Flags(), GPU8_HOST)
        assert (p.nnodes, p.nproc_per_node, p.world_size) == (2, 8, 16)
        assert p.visible_devices == ("0", "1", "2", "3", "4", "5", "6", "7")
        assert p.env_dict()["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
        assert p.global_ranks == tuple(ranks)
        assert p.gpu_names == (H100,) * 8


def test_fewer_processes_than_gpus_takes_the_first_ones_and_warns():
    p = plan({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, Flags(nproc_per_node="2"), GPU8_HOST)
    assert p.visible_devices == ("4", "5")
    assert p.env_dict()["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert p.warnings == ("using 2 of 4 visible GPUs (--nproc-per-node 2)",)


@pytest.mark.parametrize("env, flags, nproc, source", [
    ({}, Flags(), 1, "no GPU visible: one CPU process per node"),
    ({}, Flags(nproc_per_node="3"), 3, "--nproc-per-node"),
    ({"PET_NPROC_PER_NODE": "4"}, Flags(), 4, "PET_NPROC_PER_NODE"),
    ({"PET_NPROC_PER_NODE": "auto"}, Flags(), 1, "no GPU visible: one CPU process per node"),
], ids=["default", "flag", "pet-number", "pet-auto"])
def test_no_gpu_runs_cpu_workers_with_gloo(env, flags, nproc, source):
    p = plan(env, flags, CPU_HOST)
    assert (p.backend, p.device) == ("gloo", "cpu")
    assert p.nproc_per_node == nproc
    assert p.source["nproc_per_node"] == source
    assert p.visible_devices == () and p.gpu_names == ()
    assert "CUDA_VISIBLE_DEVICES" not in p.env_dict()
    assert p.env_dict()["MESHRUN_BACKEND"] == "gloo"


@pytest.mark.parametrize("cvd", ["", "-1", "NoDevFiles"], ids=["empty", "minus-one",
                                                                "no-dev-files"])
def test_cuda_visible_devices_hiding_all_gpus_means_cpu(cvd):
    p = plan({"CUDA_VISIBLE_DEVICES": cvd}, Flags(), GPU8_HOST)
    assert (p.backend, p.nproc_per_node, p.visible_devices) == ("gloo", 1, ())


def test_gpu_error_warns_and_falls_back_to_cpu():
    facts = HostFacts(hostname="n", gpu_error="nvidia-smi failed (exit 9): NVIDIA-SMI has failed")
    p = plan({}, Flags(), facts)
    assert p.backend == "gloo" and p.nproc_per_node == 1
    assert p.warnings == ("nvidia-smi failed (exit 9): NVIDIA-SMI has failed; running on CPU",)


@pytest.mark.parametrize("env, expected", [
    ({}, "1"),
    ({"OMP_NUM_THREADS": "6"}, None),
], ids=["set-for-several-processes", "user-value-kept"])
def test_omp_num_threads(env, expected):
    p = plan(env, Flags(), GPU8_HOST)
    assert p.env_dict().get("OMP_NUM_THREADS") == expected
    single = plan(env, Flags(), CPU_HOST)
    assert "OMP_NUM_THREADS" not in single.env_dict()


def test_platform_label_names_flags_when_no_convention_is_seen():
    host = CPU_HOST.host_info()
    assert detect({}, Flags(), host).platform == "single-node"
    manual = detect({}, Flags(nnodes="2", node_rank="1", master_addr="10.0.0.1"), host)
    assert manual.platform == "manual (flags / MESHRUN_*)"
    by_env = detect({"MESHRUN_NNODES": "2", "MESHRUN_NODE_RANK": "0"}, Flags(), host)
    assert by_env.platform == "manual (flags / MESHRUN_*)"


# --- IPv6 master addresses -----------------------------------------------------------------
# Stored bare (what getaddrinfo and torch's TCPStore take: TCPStore("[::1]", ...) never
# connects), accepted bare or bracketed from every source, printed bracketed beside a port.

PET_2 = {"PET_NNODES": "2", "PET_NODE_RANK": "1"}
SEEDS_2 = {"WORLD_SIZE": "2", "RANK": "1"}
SKY_2 = {"SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_RANK": "1"}


@pytest.mark.parametrize("env, flags, addr, port, shown", [
    ({}, Flags(nnodes="2", node_rank="1", master_addr="[::1]", master_port="29650"),
     "::1", 29650, "[::1]:29650"),
    ({}, Flags(nnodes="2", node_rank="1", master_addr="fd00::1", master_port="29650"),
     "fd00::1", 29650, "[fd00::1]:29650"),
    ({"MESHRUN_NNODES": "2", "MESHRUN_NODE_RANK": "1", "MESHRUN_MASTER_ADDR": " [fd00::1] "},
     Flags(), "fd00::1", 29500, "[fd00::1]:29500"),
    (dict(SEEDS_2, MASTER_ADDR="[fd00::1]", MASTER_PORT="23456"), Flags(),
     "fd00::1", 23456, "[fd00::1]:23456"),
    (dict(SEEDS_2, MASTER_ADDR="fe80::1%eth0"), Flags(), "fe80::1%eth0", 29500,
     "[fe80::1%eth0]:29500"),
    (dict(PET_2, PET_MASTER_ADDR="[fd00::1]", PET_MASTER_PORT="29400"), Flags(),
     "fd00::1", 29400, "[fd00::1]:29400"),
    (dict(PET_2, PET_RDZV_ENDPOINT="[::1]:29400"), Flags(), "::1", 29400, "[::1]:29400"),
    (dict(PET_2, PET_RDZV_ENDPOINT="[fd00::1]"), Flags(), "fd00::1", 29500,
     "[fd00::1]:29500"),
    (dict(PET_2, PET_RDZV_ENDPOINT="fd00::1"), Flags(), "fd00::1", 29500, "[fd00::1]:29500"),
    (dict(PET_2, PET_RDZV_ENDPOINT="2001:db8::abcd"), Flags(), "2001:db8::abcd", 29500,
     "[2001:db8::abcd]:29500"),
    (dict(PET_2, PET_RDZV_ENDPOINT="fd00::1:29400"), Flags(), "fd00::1", 29400,
     "[fd00::1]:29400"),
    (dict(PET_2, PET_RDZV_ENDPOINT="10.0.0.3:29401"), Flags(), "10.0.0.3", 29401,
     "10.0.0.3:29401"),
    (dict(PET_2, PET_RDZV_ENDPOINT="node-0.svc:29401"), Flags(), "node-0.svc", 29401,
     "node-0.svc:29401"),
    (dict(PET_2, PET_RDZV_ENDPOINT="node-0.svc"), Flags(), "node-0.svc", 29500,
     "node-0.svc:29500"),
    (dict(SKY_2, SKYPILOT_NODE_IPS="fd00::5\nfd00::6\n"), Flags(), "fd00::5", 29500,
     "[fd00::5]:29500"),
    (dict(SKY_2, SKYPILOT_NODE_IPS="[fd00::5]\n[fd00::6]\n"), Flags(), "fd00::5", 29500,
     "[fd00::5]:29500"),
    ({"VC_WORKER_NUM": "2", "VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": "[fd00::7],[fd00::8]"},
     Flags(), "fd00::7", 29500, "[fd00::7]:29500"),
], ids=["flag-bracketed", "flag-bare", "meshrun-var-bracketed", "master-addr-bracketed",
        "master-addr-link-local-zone", "pet-master-addr-bracketed", "rdzv-endpoint-v6-port",
        "rdzv-endpoint-v6-bracketed-no-port", "rdzv-endpoint-v6-bare-no-port",
        "rdzv-endpoint-v6-bare-letters", "rdzv-endpoint-v6-bare-5-digit-port",
        "rdzv-endpoint-v4-port", "rdzv-endpoint-name-port", "rdzv-endpoint-name",
        "skypilot-ips-bare", "skypilot-ips-bracketed", "volcano-hosts-bracketed"])
def test_master_address_is_stored_bare_and_shown_bracketed(env, flags, addr, port, shown):
    p = plan(env, flags, CPU_HOST)
    assert (p.master_addr, p.master_port) == (addr, port)
    assert "[" not in p.master_addr
    row = next(line for line in describe(p).splitlines() if line.lstrip().startswith("master "))
    assert row.split(" : ", 1)[1].split()[0] == shown, row


def test_single_node_master_is_shown_with_auto_port():
    row = next(line for line in describe(plan()).splitlines()
               if line.lstrip().startswith("master "))
    assert row.split(" : ", 1)[1].split()[0] == "127.0.0.1:auto"


@pytest.mark.parametrize("env", [
    dict(PET_2, MASTER_ADDR="[fd00::1]", PET_MASTER_ADDR="fd00::1"),
    dict(PET_2, MASTER_ADDR="fd00::1", PET_MASTER_ADDR="[fd00::1]"),
    dict(PET_2, MASTER_ADDR="fd00::1", PET_RDZV_ENDPOINT="[fd00::1]:29400"),
], ids=["brackets-vs-bare", "bare-vs-brackets", "master-addr-vs-rdzv-endpoint"])
def test_bracketed_and_bare_ipv6_are_the_same_master(env):
    assert plan(env, Flags(), CPU_HOST).master_addr == "fd00::1"


def test_run_id_hash_does_not_depend_on_brackets():
    bare = plan({}, Flags(nnodes="2", node_rank="0", master_addr="fd00::1"))
    bracketed = plan({}, Flags(nnodes="2", node_rank="1", master_addr="[fd00::1]"))
    assert bare.run_id == bracketed.run_id


@pytest.mark.parametrize("host, port, text", [
    ("fd00::1", 29400, "[fd00::1]:29400"), ("::1", 1, "[::1]:1"),
    ("10.0.0.1", 29400, "10.0.0.1:29400"), ("node-0.svc", 29400, "node-0.svc:29400"),
])
def test_join_host_port_round_trips_through_meshrun_and_torch(host, port, text):
    assert join_host_port(host, port) == text
    assert split_endpoint(text, "X") == (host, port)
    utils = pytest.importorskip("torch.distributed.elastic.rendezvous.utils")
    assert utils.parse_rendezvous_endpoint(text, default_port=1) == (host, port)


@pytest.mark.parametrize("endpoint", [
    "[fd00::1]:29400", "[fd00::1]", "[::1]:1", "10.0.0.1:29400", "10.0.0.1", "node-0:29400",
    "node-0.svc",
])
def test_endpoints_torch_reads_are_read_the_same(endpoint):
    utils = pytest.importorskip("torch.distributed.elastic.rendezvous.utils")
    host, port = utils.parse_rendezvous_endpoint(endpoint, default_port=-1)
    assert split_endpoint(endpoint, "X") == (host, None if port == -1 else port)


@pytest.mark.parametrize("endpoint, expected", [
    # torch splits these at the last colon ("fd00:" port 1); meshrun reads the address.
    ("fd00::1", ("fd00::1", None)), ("::1", ("::1", None)),
    ("2001:db8::abcd", ("2001:db8::abcd", None)),
    # "1:29400" is no IPv6 group, so only the host:port reading makes sense (torch agrees).
    ("fd00::1:29400", ("fd00::1", 29400)),
])
def test_unbracketed_ipv6_endpoint_is_read_one_way_only(endpoint, expected):
    assert split_endpoint(endpoint, "PET_RDZV_ENDPOINT") == expected
