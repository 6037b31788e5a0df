"""``meshrun render accelerate|deepspeed`` and the worker env for accelerate / HF Trainer.

Rendered text is compared with golden files in tests/unit/golden/hf/ (the meshrun version in
headers is replaced by ``<VERSION>``). After an intended change of output, rewrite them:

    MESHRUN_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_render_hf.py

and review the diff. The files are then read back by the tools themselves: accelerate's
``load_config_from_file`` and ``accelerate launch``'s own argument handling, DeepSpeed's
``DeepSpeedConfig`` (its batch assertion included) and accelerate's ``DeepSpeedPlugin``.
Those tests skip when accelerate/DeepSpeed are not installed, except under CI=true, where
they fail.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from unit_fakes import CPU_HOST, GPU8_HOST

from meshrun import __version__
from meshrun.errors import UsageError
from meshrun.plan import make_plan
from meshrun.render import TARGETS, render, train_numbers
from meshrun.render.accelerate import hf_worker_env
from meshrun.render.deepspeed import check_deepspeed_config, deepspeed_config
from meshrun.topology import Flags

GOLDEN = Path(__file__).resolve().parent / "golden" / "hf"
UPDATE = os.environ.get("MESHRUN_UPDATE_GOLDEN") == "1"

SEEDS_NODE1 = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
SEED004_NODE1 = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "192.168.1.100"}
SEED001_NODE3 = {"WORLD_SIZE": "8", "RANK": "3", "MASTER_ADDR": "taehv-0.taehv",
                 "MASTER_PORT": "23456"}


def job(per_device_batch: int, grad_accum: int, *, world_size: int, tp: int = 1,
        mixed_precision: str = "auto", grad_clip: float = 1.0, **extra) -> dict:
    """A resolved job config in ``JobConfig.to_dict()``'s shape."""
    dp = world_size // tp
    data = {"train": {"per_device_batch": per_device_batch, "grad_accum": grad_accum,
                      "lr": 1e-4, "grad_clip": grad_clip},
            "parallel": {"tp": tp, "reshard_after_forward": True,
                         "mixed_precision": mixed_precision},
            "world_size": world_size, "dp": dp,
            "effective_batch": per_device_batch * dp * grad_accum}
    data.update(extra)
    return data


# (golden file, env, flags, facts, job, render options)
CASES = [
    ("accelerate_2x8_gpu_node1.yaml", SEEDS_NODE1, Flags(), GPU8_HOST, None, {}),
    ("accelerate_1x2_cpu.yaml", {}, Flags(nproc_per_node="2"), CPU_HOST, None, {}),
    ("accelerate_2x8_deepspeed_node1.yaml", SEED004_NODE1, Flags(), GPU8_HOST, None,
     {"deepspeed_config_file": "/shared/ds_zero3.json"}),
    ("deepspeed_seed004_2x8.json", SEED004_NODE1, Flags(), GPU8_HOST, None, {}),
    # seed 001: 8 machines x 8 GPUs, per-GPU batch 4, no accumulation: 4 x 64 = 256
    ("deepspeed_seed001_8x8.json", SEED001_NODE3, Flags(), GPU8_HOST,
     job(4, 1, world_size=64), {}),
    ("deepspeed_tp2_fp32_1x8.json", {}, Flags(), GPU8_HOST,
     job(4, 2, world_size=8, tp=2, mixed_precision="fp32", grad_clip=0), {}),
]
IDS = [case[0] for case in CASES]


def make(case):
    name, env, flags, facts, job_, options = case
    plan = make_plan(env, flags, facts)
    target = name.split("_", 1)[0]
    return plan, target, job_, options, render(target, plan, job_, **options)


def versionless(text: str) -> str:
    return text.replace(f"meshrun {__version__}", "meshrun <VERSION>")


def golden_path(tmp_path: Path, case) -> Path:
    """The rendered file written under tmp_path, as a user would write it with -o."""
    path = tmp_path / case[0]
    path.write_text(make(case)[-1])
    return path


def need(module: str):
    """Import a tool the test reads files with; skip without it, but fail under CI=true."""
    if os.environ.get("CI") == "true":
        return __import__(module)
    return pytest.importorskip(module)


# --- golden files ------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rendered_text_matches_golden(case):
    text = versionless(make(case)[-1])
    path = GOLDEN / case[0]
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path.name}: run with MESHRUN_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} changed: MESHRUN_UPDATE_GOLDEN=1 rewrites it"


@pytest.mark.parametrize("case", [c for c in CASES if c[4] is None], ids=lambda c: c[0])
def test_header_names_the_version_and_a_command_that_writes_the_same_file(case):
    """Run the header's regenerate line (its flags, no environment) and get the same text."""
    _, target, _, _, text = make(case)
    if target == "deepspeed":
        header = json.loads(text)["_meshrun"]
        written, command = header["generated_by"], header["regenerate"]
    else:
        first, second = text.splitlines()[:2]
        written = first.removeprefix("# generated by ")
        command = second.removeprefix("# regenerate: ")
    assert written == f"meshrun {__version__}"
    argv = shlex.split(command)
    assert argv[:3] == ["meshrun", "render", target]
    values = dict(zip(argv[3::2], argv[4::2], strict=True))
    options = ({"deepspeed_config_file": values.pop("--deepspeed")} if "--deepspeed" in values
               else {})
    flags = Flags(**{key[2:].replace("-", "_"): value for key, value in values.items()})
    again = make_plan({}, flags, case[3])
    assert render(target, again, None, **options) == text


def test_version_is_in_every_header_so_goldens_substitute_it():
    for case in CASES:
        assert f"meshrun {__version__}" in make(case)[-1]


# --- registry ----------------------------------------------------------------------------

def test_registry_maps_each_target_to_its_render_function():
    assert set(TARGETS) >= {"accelerate", "deepspeed"}
    for name, target in TARGETS.items():
        function = target.load()
        assert function.__name__ == f"render_{name}" == target.function
        assert target.suffix in ("yaml", "json")


def test_unknown_target_is_one_line_with_the_choices():
    with pytest.raises(UsageError) as err:
        render("kubernetes", make_plan({}, Flags(), CPU_HOST))
    line = err.value.line()
    assert line.startswith("meshrun: error: unknown render target 'kubernetes'")
    assert "fix: use one of: accelerate, deepspeed" in line and "\n" not in line


def test_render_does_not_import_torch():
    code = ("import sys\n"
            "from meshrun.facts import HostFacts\n"
            "from meshrun.plan import make_plan\n"
            "from meshrun.topology import Flags\n"
            "from meshrun.render import TARGETS, render\n"
            "plan = make_plan({}, Flags(nnodes='2', node_rank='0', master_addr='h'), "
            "HostFacts(hostname='h', gpus=()))\n"
            "for name in TARGETS: render(name, plan)\n"
            "from meshrun.render.accelerate import hf_worker_env\n"
            "hf_worker_env(plan, None, '/x.json')\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- batch arithmetic and bad job configs ------------------------------------------------

def test_batch_fields_follow_deepspeeds_rule_over_the_data_parallel_size():
    plan = make_plan(SEED001_NODE3, Flags(), GPU8_HOST)          # 8 nodes x 8 GPUs
    ds = deepspeed_config(plan, job(4, 1, world_size=64))
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"],
            ds["gradient_accumulation_steps"]) == (256, 4, 1)    # seed 001: 4 x 64 = 256
    tp = deepspeed_config(plan, job(4, 2, world_size=64, tp=4))  # dp = 64 / 4 = 16
    assert tp["train_batch_size"] == 4 * 16 * 2
    seed004 = deepspeed_config(make_plan(SEED004_NODE1, Flags(), GPU8_HOST), None)
    assert seed004["train_batch_size"] == 1 * 8 * 2 * 8          # seed 004: 1 x 8 x 2 x 8
    assert seed004["zero_optimization"]["stage"] == 3
    assert seed004["zero_optimization"]["reduce_bucket_size"] == 5e8
    assert seed004["bf16"] == {"enabled": True}                  # auto on GPUs
    cpu = deepspeed_config(make_plan({}, Flags(), CPU_HOST), None)
    assert cpu["bf16"] == {"enabled": False}                     # auto on CPU: fp32


BAD_JOBS = [
    ("other-world-size", job(4, 1, world_size=8), "job config",
     "resolved for world size 8 but this plan has 16"),
    ("tp-does-not-divide", job(4, 1, world_size=16, tp=3, dp=5), "parallel.tp",
     "world size 16 (2 nodes x 8) is not divisible by parallel.tp 3"),
    ("effective-batch-off", job(4, 1, world_size=16, effective_batch=128), "effective_batch",
     "effective batch 128 is not per_device_batch 4 x dp 16 x grad_accum 1 = 64"),
    ("dp-off", job(4, 1, world_size=16, tp=2, dp=16), "job config",
     "dp 16 but world size 16 / tp 2 = 8"),
    ("precision-name", job(4, 1, world_size=16, mixed_precision="fp16"),
     "parallel.mixed_precision", "'fp16'"),
    ("batch-zero", job(0, 1, world_size=16), "train.per_device_batch", "is 0"),
    ("accum-bool", job(4, True, world_size=16), "train.grad_accum", "is True"),
    ("accum-missing", {"train": {"per_device_batch": 2}, "world_size": 16},
     "train.grad_accum", "is missing"),
    ("clip-negative", job(4, 1, world_size=16, grad_clip=-1), "train.grad_clip", "is -1"),
    ("train-not-a-table", {"train": [1, 2]}, "train", "not a table"),
]


@pytest.mark.parametrize("name,bad,subject,text", BAD_JOBS, ids=[b[0] for b in BAD_JOBS])
def test_bad_job_configs_stop_with_one_line(name, bad, subject, text):
    plan = make_plan(SEEDS_NODE1, Flags(), GPU8_HOST)            # 2 nodes x 8 GPUs
    for call in (lambda: render("deepspeed", plan, bad), lambda: render("accelerate", plan, bad),
                 lambda: hf_worker_env(plan, bad)):
        with pytest.raises(UsageError) as err:
            call()
        line = err.value.line()
        assert err.value.subject == subject and text in line, line
        assert line.startswith("meshrun: error: ") and "; fix: " in line and "\n" not in line


# --- checking a DeepSpeed file the user brings -------------------------------------------

def test_a_config_for_one_node_used_on_two_is_refused_with_the_arithmetic():
    """Seed 002's bug, for DeepSpeed: a file written for 1 node x 8 GPUs run on 2 x 8."""
    one_node = deepspeed_config(make_plan({"NPROC_PER_NODE": "8"}, Flags(), GPU8_HOST), None)
    two_nodes = make_plan(SEEDS_NODE1, Flags(), GPU8_HOST)
    with pytest.raises(UsageError) as err:
        check_deepspeed_config(one_node, two_nodes, source="ds.json")
    line = err.value.line()
    assert ("ds.json: train_batch_size 64 is not train_micro_batch_size_per_gpu 1 x "
            "gradient_accumulation_steps 8 x data-parallel size 16 (2 nodes x 8 processes / "
            "tp 1) = 128") in line
    assert "fix: regenerate it for this plan: meshrun render deepspeed --nnodes 2" in line
    # The file rendered for the plan passes; HF-style "auto" fields are left to HF.
    assert check_deepspeed_config(deepspeed_config(two_nodes, None), two_nodes).dp == 16
    auto = dict(one_node, train_batch_size="auto", train_micro_batch_size_per_gpu="auto")
    check_deepspeed_config(auto, two_nodes)


def test_a_config_that_disagrees_with_the_job_is_refused():
    plan = make_plan(SEEDS_NODE1, Flags(), GPU8_HOST)
    the_job = job(2, 4, world_size=16)
    good = deepspeed_config(plan, the_job)
    assert check_deepspeed_config(good, plan, the_job).effective_batch == 128
    other = dict(good, train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=2)
    with pytest.raises(UsageError, match="train_micro_batch_size_per_gpu is 4 but the job "
                                         "config's train.per_device_batch is 2"):
        check_deepspeed_config(other, plan, the_job)
    with pytest.raises(UsageError, match="bf16.enabled is false but the job config resolves "
                                         "to bf16"):
        check_deepspeed_config(dict(good, bf16={"enabled": False}), plan, the_job)
    with pytest.raises(UsageError, match="train_batch_size is '128'"):
        check_deepspeed_config(dict(good, train_batch_size="128"), plan, the_job)


# --- worker env --------------------------------------------------------------------------

def env_of(rows) -> dict[str, str]:
    return {row.name: row.value for row in rows}


def test_worker_env_for_accelerate_scripts():
    cpu = make_plan({}, Flags(nnodes="2", node_rank="0", master_addr="h"), CPU_HOST)
    assert env_of(hf_worker_env(cpu)) == {"ACCELERATE_MIXED_PRECISION": "no",
                                          "ACCELERATE_USE_CPU": "true"}
    gpu = make_plan(SEEDS_NODE1, Flags(), GPU8_HOST)
    rows = hf_worker_env(gpu, job(2, 4, world_size=16))
    assert env_of(rows) == {"ACCELERATE_MIXED_PRECISION": "bf16",
                            "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}
    assert all(row.reason for row in rows)
    ds = hf_worker_env(gpu, job(2, 4, world_size=16), "/shared/ds.json")
    assert env_of(ds) == {"ACCELERATE_MIXED_PRECISION": "no",
                          "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4",
                          "ACCELERATE_USE_DEEPSPEED": "true",
                          "ACCELERATE_DEEPSPEED_CONFIG_FILE": "/shared/ds.json"}


def test_worker_env_keeps_what_the_user_set_and_says_so():
    plan = make_plan(SEEDS_NODE1, Flags(), GPU8_HOST)
    rows = hf_worker_env(plan, None, env={"ACCELERATE_MIXED_PRECISION": "fp16"})
    assert rows[0].value == "fp16"
    assert rows[0].reason.startswith("kept: set in the environment (meshrun would set bf16")


# --- read back by accelerate -------------------------------------------------------------

ACCELERATE_CASES = [c for c in CASES if c[0].startswith("accelerate")]


@pytest.mark.parametrize("case", ACCELERATE_CASES, ids=lambda c: c[0])
def test_accelerate_loads_the_config_and_launch_derives_the_plan(case, tmp_path, monkeypatch):
    need("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import (
        prepare_deepspeed_cmd_env,
        prepare_multi_gpu_env,
        prepare_simple_launcher_cmd_env,
    )

    for name in list(os.environ):  # accelerate launch copies os.environ: start clean
        if name.startswith("ACCELERATE_"):
            monkeypatch.delenv(name)
    plan, _, job_, options, _ = make(case)
    path = golden_path(tmp_path, case)
    config = load_config_from_file(str(path))
    assert (config.num_machines, config.num_processes, config.machine_rank) == (
        plan.nnodes, plan.world_size, plan.node_rank)
    assert (config.main_process_ip, config.main_process_port) == (plan.master_addr,
                                                                  plan.master_port)
    assert config.gpu_ids == (",".join(plan.visible_devices) if plan.device == "cuda" else None)

    # What `accelerate launch --config_file FILE train.py` would hand torchrun and workers.
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    kind = config.distributed_type.value
    if kind == "DEEPSPEED":
        args.deepspeed_fields_from_accelerate_config = ",".join(
            list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else []))
        cmd, env = prepare_deepspeed_cmd_env(args)
        assert cmd is None  # "standard": torchrun on this node, no pdsh/ssh
    elif kind == "MULTI_GPU":
        env = prepare_multi_gpu_env(args)
    else:  # MULTI_CPU / NO: accelerate's simple launcher
        _, env = prepare_simple_launcher_cmd_env(args)
    if kind in ("DEEPSPEED", "MULTI_GPU"):
        assert (int(args.nnodes), int(args.nproc_per_node), int(args.node_rank)) == (
            plan.nnodes, plan.nproc_per_node, plan.node_rank)
        assert args.rdzv_backend == "static"
        assert args.rdzv_endpoint == f"{plan.master_addr}:{plan.master_port}"
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(plan.visible_devices)
    # meshrun's worker env says what accelerate launch says, for every variable it sets.
    ours = env_of(hf_worker_env(plan, job_, options.get("deepspeed_config_file")))
    assert {k: env[k].lower() for k in ours} == {k: v.lower() for k, v in ours.items()}


def test_accelerate_deepspeed_plugin_loads_the_rendered_file(tmp_path, monkeypatch):
    need("accelerate")
    from accelerate.utils import DeepSpeedPlugin

    plan = make_plan(SEED004_NODE1, Flags(), GPU8_HOST)
    the_job = job(2, 4, world_size=16, grad_clip=0.5)
    path = tmp_path / "ds.json"
    path.write_text(render("deepspeed", plan, the_job))
    for row in hf_worker_env(plan, the_job, str(path)):
        monkeypatch.setenv(row.name, row.value)
    plugin = DeepSpeedPlugin()   # what Accelerator() / HF Trainer build from that env
    plugin.set_mixed_precision(os.environ["ACCELERATE_MIXED_PRECISION"])
    assert plugin.hf_ds_config.is_zero3()
    assert (plugin.zero_stage, plugin.gradient_accumulation_steps, plugin.gradient_clipping) == (
        3, 4, 0.5)
    assert plugin.deepspeed_config["bf16"]["enabled"] is True
    assert plugin.deepspeed_config["train_micro_batch_size_per_gpu"] == 2


# --- read back by DeepSpeed --------------------------------------------------------------

DEEPSPEED_CASES = [c for c in CASES if c[0].startswith("deepspeed")]


@pytest.mark.parametrize("case", DEEPSPEED_CASES, ids=lambda c: c[0])
def test_deepspeed_config_class_accepts_the_file_on_the_plans_world(case, tmp_path,
                                                                     monkeypatch):
    need("deepspeed")
    import deepspeed.comm
    from deepspeed.runtime.config import DeepSpeedConfig

    plan, _, job_, _, _ = make(case)
    nums = train_numbers(plan, job_)
    path = golden_path(tmp_path, case)

    # DeepSpeedConfig asks deepspeed.comm for the data-parallel world size. A process group
    # of 16 or 64 ranks cannot be started here, so answer as each of its ranks would.
    def world(size):
        monkeypatch.setattr(deepspeed.comm, "get_rank", lambda group=None: 0)
        monkeypatch.setattr(deepspeed.comm, "get_world_size", lambda group=None: size)

    world(nums.dp)
    config = DeepSpeedConfig(str(path))
    assert config.world_size == nums.dp
    assert (config.train_batch_size, config.train_micro_batch_size_per_gpu,
            config.gradient_accumulation_steps) == (nums.effective_batch,
                                                    nums.per_device_batch, nums.grad_accum)
    assert config.zero_optimization_stage == 3
    zero = config.zero_config   # seed 004's values, not DeepSpeed's defaults (5e7, 1e5)
    assert (zero.prefetch_bucket_size, zero.param_persistence_threshold) == (5e8, 1e6)
    assert config.bfloat16_config.enabled == (nums.precision == "bf16")
    assert config.gradient_clipping == nums.grad_clip
    # The same file on twice the data-parallel size trips DeepSpeed's own batch check.
    world(nums.dp * 2)
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        DeepSpeedConfig(str(path))


def test_deepspeed_config_class_single_process_without_a_process_group(tmp_path):
    """One process: DeepSpeedConfig runs unpatched (no process group means world size 1)."""
    need("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    plan = make_plan({}, Flags(), CPU_HOST)
    path = tmp_path / "ds.json"
    path.write_text(render("deepspeed", plan, job(3, 2, world_size=1)))
    config = DeepSpeedConfig(str(path))
    assert (config.world_size, config.train_batch_size) == (1, 6)
