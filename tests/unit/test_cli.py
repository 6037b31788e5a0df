"""The command line, through real ``python -m meshrun`` processes with a controlled
environment: a stand-in nvidia-smi (8 H100s) or none on PATH, no platform variable."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from unit_fakes import H100, neutral_env

import meshrun

SEEDS_WORKER = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "10.0.0.1",
                "MASTER_PORT": "23456"}


def meshrun_cli(*args: str, env: dict, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "meshrun", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def assert_one_error_line(done: subprocess.CompletedProcess, *names: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("meshrun: error: ") and "; fix: " in line, line
    for name in names:
        assert name in line, (name, line)
    return line


def rows(text: str) -> dict[str, list[str]]:
    """The ``key : value`` block as key -> values (env, warning and note repeat)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(" : ")
        out.setdefault(key.strip(), []).append(value)
    return out


# --- plan ------------------------------------------------------------------------------------

def test_plan_text_is_an_aligned_key_value_block(gpu_bin, tmp_path):
    (tmp_path / "train.py").write_text("pass\n")   # plan refuses a script run would refuse
    done = meshrun_cli("plan", "--", "train.py", "--lr", "1",
                       env=neutral_env(gpu_bin, **SEEDS_WORKER), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == f"meshrun {meshrun.__version__}"
    # Every row is "  <key padded> : <value>", the colons in one column.
    assert all(re.match(r"^  \S.*? +: ", line) for line in lines[1:]), lines
    assert len({line.index(" : ") for line in lines[1:]}) == 1
    table = rows(done.stdout)
    value = {key: values[0].split("  (")[0].strip() for key, values in table.items()}
    assert value["platform"] == "world-size-rank"
    assert value["nodes"] == "2"
    assert value["node rank"] == "1"
    assert value["master"] == "10.0.0.1:23456"
    assert value["processes per node"] == "8"
    assert value["devices"] == f"GPUs 0,1,2,3,4,5,6,7 ({H100})"
    assert value["world size"] == "16"
    assert value["global ranks"] == "8-15"
    assert value["backend"] == "nccl"
    assert value["command"] == "train.py --lr 1"
    assert table["nodes"][0].endswith("(WORLD_SIZE)")
    assert table["WORLD_SIZE"][0].startswith("WORLD_SIZE read as nodes")
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7  (this node's own GPUs, one per local rank)" \
        in table["env"]


def test_plan_json_with_gpus(gpu_bin):
    done = meshrun_cli("plan", "--json", env=neutral_env(gpu_bin, **SEEDS_WORKER))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {"nnodes", "node_rank", "nproc_per_node", "world_size", "master_addr", "master_port",
            "global_ranks", "visible_devices", "backend", "source", "env"} <= set(data)
    assert (data["nnodes"], data["node_rank"], data["nproc_per_node"], data["world_size"]) \
        == (2, 1, 8, 16)
    assert (data["master_addr"], data["master_port"]) == ("10.0.0.1", 23456)
    assert data["global_ranks"] == list(range(8, 16))
    assert all(type(rank) is int for rank in data["global_ranks"])
    assert data["visible_devices"] == [str(i) for i in range(8)]
    assert data["backend"] == "nccl"
    assert data["source"]["nnodes"] == "WORLD_SIZE"
    assert data["source"]["node_rank"] == "RANK"
    assert data["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert data["env"]["MESHRUN_NODE_RANK"] == "1"
    assert data["command"] is None


def test_plan_json_without_gpus(empty_bin, tmp_path):
    (tmp_path / "pkg").mkdir()                      # a module run would find
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("pass\n")
    done = meshrun_cli("plan", "--json", "-m", "pkg.train", "--epochs", "2",
                       env=neutral_env(empty_bin), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["nnodes"], data["node_rank"], data["nproc_per_node"], data["world_size"]) \
        == (1, 0, 1, 1)
    assert (data["master_addr"], data["master_port"]) == ("127.0.0.1", 0)
    assert data["global_ranks"] == [0]
    assert data["visible_devices"] == []
    assert (data["backend"], data["device"]) == ("gloo", "cpu")
    assert "CUDA_VISIBLE_DEVICES" not in data["env"]
    assert data["platform"] == "single-node"
    assert data["command"] == ["-m", "pkg.train", "--epochs", "2"]


def test_plan_flags_beat_meshrun_variables_and_cuda_visible_devices_is_honoured(gpu_bin):
    env = neutral_env(gpu_bin, MESHRUN_NNODES="3", MESHRUN_NODE_RANK="2",
                      CUDA_VISIBLE_DEVICES="2,3")
    done = meshrun_cli("plan", "--json", "--nnodes", "2", "--node-rank=1", "--master-addr",
                       "10.0.0.7", "--run-id", "exp-7", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["nnodes"], data["node_rank"], data["nproc_per_node"]) == (2, 1, 2)
    assert data["source"]["nnodes"] == "--nnodes"
    assert data["source"]["node_rank"] == "--node-rank"
    assert data["visible_devices"] == ["2", "3"]
    assert data["env"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert data["global_ranks"] == [2, 3]
    assert (data["run_id"], data["log_dir"]) == ("exp-7", "logs/exp-7")


# --- errors: one line, exit 2, no traceback ----------------------------------------------------

@pytest.mark.parametrize("args, extra, names", [
    (["plan", "--master-port", "0"], {}, ["--master-port"]),
    (["plan"], {"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "h"}, ["RANK", "WORLD_SIZE"]),
    (["plan"], {"CUDA_VISIBLE_DEVICES": "9"}, ["CUDA_VISIBLE_DEVICES"]),
    (["plan", "--json", "--nproc-per-node", "9"], {}, ["--nproc-per-node"]),
    (["plan"], {"SLURM_JOB_ID": "5", "SLURM_NNODES": "2"}, ["SLURM_NNODES", "srun"]),
    (["plan", "--bogus"], {}, ["--bogus"]),
    (["frobnicate"], {}, ["frobnicate"]),
    (["run"], {}, ["meshrun run", "train.py"]),
    (["run", "--", "train.py"], {"LOCAL_RANK": "0"}, ["LOCAL_RANK"]),
    (["run", "-m"], {}, ["-m"]),
    (["run", "--", "no_such_train.py"], {}, ["no_such_train.py does not exist (relative to"]),
    (["run", "no_such_train.py", "--lr", "1"], {}, ["no_such_train.py does not exist"]),
    (["run", "--", "tests"], {}, ["tests is a folder without __main__.py, not a script"]),
    (["run", "-m", "no_such_pkg.train"], {}, ["-m no_such_pkg.train", "'no_such_pkg'"]),
    (["simulate", "--nodes", "2", "--", "no_such_train.py"], {}, ["no_such_train.py"]),
    (["run", "--recipe", "mlp-tp", "--nproc-per-node", "2"], {"MESHRUN_PEAK_FLOPS": "fast"},
     ["MESHRUN_PEAK_FLOPS='fast'"]),
    (["run", "--recipe", "mlp-tp", "--nproc-per-node", "2", "--set", "model.hidden=101"], {},
     ["model.hidden: 101 is not divisible by tp 2"]),
    (["run", "--node-timeout", "1", "--", "tests/integration/scripts/report.py"], {},
     ["--node-timeout='1' is not a number of seconds >= 2"]),
    (["run", "--", "tests/integration/scripts/report.py"], {"MESHRUN_HANG_TIMEOUT": "soon"},
     ["MESHRUN_HANG_TIMEOUT='soon'"]),
    (["run", "--log-dir", "/proc/nope", "--", "tests/integration/scripts/report.py"], {},
     ["the log folder /proc/nope/", "--log-dir"]),
    (["run", "--show-ranks", "0-x", "--", "tests/integration/scripts/report.py"], {},
     ["--show-ranks '0-x' is not a list of ranks"]),
    (["simulate", "--nodes", "2", "--show-ranks", "3-1", "--",
      "tests/integration/scripts/report.py"], {}, ["--show-ranks '3-1' is not a list"]),
], ids=["bad-port-flag", "rank-above-world-size", "missing-gpu", "too-many-processes",
        "slurm-batch-outside-srun", "unknown-flag", "unknown-command", "run-without-command",
        "run-inside-worker", "run-dash-m-without-module", "missing-script",
        "missing-script-without-dashes", "script-is-a-folder", "missing-module",
        "simulate-missing-script", "bad-peak-flops", "recipe-model-refused-before-launch",
        "node-timeout-too-short", "hang-timeout-not-a-number", "log-dir-not-writable",
        "show-ranks-not-ranks", "simulate-show-ranks-backwards"])
def test_bad_input_through_the_cli(gpu_bin, args, extra, names):
    assert_one_error_line(meshrun_cli(*args, env=neutral_env(gpu_bin, **extra)), *names)


# --- no torch for plan -----------------------------------------------------------------------

NO_TORCH_PROBE = """
import contextlib, io, json, sys
import meshrun, meshrun.plan, meshrun.cli, meshrun.topology, meshrun.facts
after_import = 'torch' in sys.modules
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = meshrun.cli.main(["plan", "--json"])
print(json.dumps({"after_import": after_import, "after_plan": 'torch' in sys.modules,
                  "rc": rc, "nnodes": json.loads(out.getvalue())["nnodes"]}))
"""


def test_plan_names_the_flag_a_job_value_came_from(gpu_bin):
    done = meshrun_cli("plan", "--recipe", "mlp-tp", "--checkpoint-dir", "/tmp/ckpt-x",
                       "--set", "train.steps=7", "--nproc-per-node", "2",
                       env=neutral_env(gpu_bin))
    assert done.returncode == 0, done.stderr
    rows = {line.split(":")[0].strip(): line for line in done.stdout.splitlines()}
    assert rows["recipe"].rstrip().endswith("(--recipe)")
    assert rows["checkpoint.dir"].rstrip().endswith("(--checkpoint-dir)")
    assert rows["train.steps"].rstrip().endswith("(--set)")


def test_module_and_folder_commands_found_as_the_workers_find_them(tmp_path):
    """-m pkg.mod from the working directory (the workers put it first on sys.path), even
    when meshrun's own sys.path does not start with it; a folder with __main__.py."""
    from meshrun.plan import Command
    from meshrun.runtime.checks import check_command

    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "train.py").write_text("")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("")
    here = os.getcwd()
    saved = list(sys.path)
    try:
        os.chdir(tmp_path)
        sys.path[:] = [p for p in sys.path if p not in ("", ".", str(tmp_path))]
        check_command(Command("mypkg.train", module=True))
        check_command(Command("app"))
        with pytest.raises(meshrun.errors.UsageError):
            check_command(Command("nopkg.train", module=True))
    finally:
        os.chdir(here)
        sys.path[:] = saved


def test_import_and_plan_do_not_import_torch(gpu_bin):
    done = subprocess.run([sys.executable, "-c", NO_TORCH_PROBE], capture_output=True,
                          text=True, timeout=60,
                          env=neutral_env(gpu_bin, MESHRUN_NNODES="1"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"after_import": False, "after_plan": False, "rc": 0, "nnodes": 1}


def test_plan_cli_process_does_not_import_torch(empty_bin):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "meshrun", "plan"],
                          capture_output=True, text=True, timeout=60, env=neutral_env(empty_bin))
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "meshrun.plan" in imported  # the probe sees meshrun's own imports ...
    assert not {name for name in imported if name == "torch" or name.startswith("torch.")}


EXIT_DESPITE_A_THREAD = """
import sys, threading, time
from meshrun import cli
from meshrun.cli.parser import VERBS

threading.Thread(target=time.sleep, args=(60,), name="TailLog_worker_0").start()  # non-daemon

class Broken:
    def run(ctx):
        raise BrokenPipeError(32, "Broken pipe")  # the reader of this node's output is gone

VERBS["plan"].run = Broken.run
sys.exit(cli.main(["plan"]))
"""


def test_an_exception_ends_the_process_even_with_a_thread_left_running():
    """simulate killed: its nodes' output pipe breaks as they stop, the exception reaches
    main(), and torch's TailLog threads (not daemons) are still reading: the interpreter
    would wait for them forever. The process must end at once, with the error."""
    import subprocess
    import sys
    import time

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", EXIT_DESPITE_A_THREAD], capture_output=True,
                          text=True, timeout=50)
    assert time.monotonic() - started < 30          # not the thread's 60 s
    assert done.returncode == 1, done.stderr[-2000:]
    assert "BrokenPipeError" in done.stderr


def test_the_readme_gives_each_supervision_option_its_one_default():
    """Each supervision option is declared once (meshrun.runtime.supervision); the guide's
    flag table (docs/guide.md) and --help show that default, and the hidden --beat is in
    neither."""
    import re
    from pathlib import Path

    from meshrun.cli.parser import build_parser
    from meshrun.runtime.supervision import flag, options

    readme = (Path(__file__).resolve().parents[2] / "docs" / "guide.md").read_text()
    help_text = next(a for a in build_parser()._actions
                     if a.dest == "verb").choices["run"].format_help()
    for name, meta in options():
        row = re.search(rf"^\| `{flag(name)}` \(run\) \|.*\| ([0-9.]+)( s)? \|$", readme, re.M)
        if meta["hidden"]:
            assert row is None and flag(name) not in help_text, name
            continue
        assert row, f"docs/guide.md has no row for {flag(name)}"
        assert float(row[1]) == meta["default"], (name, row[1], meta["default"])
        assert f"(default {meta['default']:g})" in " ".join(help_text.split()), name


def test_simulate_gives_each_node_the_recipe_as_the_user_gave_it():
    """`simulate --recipe NAME`: every node's `meshrun run` gets `--recipe NAME` (its banner
    then says the recipe came from --recipe, not from a --set the user never wrote)."""
    from meshrun.plan.model import Command
    from meshrun.runtime.simulate import SimulateRequest, node_argv

    wanted = SimulateRequest(nodes="2", node_flags=("--set", "train.steps=2"),
                             recipe="autoencoder")
    argv = node_argv(wanted, Command("meshrun.recipes.autoencoder", (), module=True),
                     2, 1, 29500, "r", 2)
    assert argv[-4:] == ["--set", "train.steps=2", "--recipe", "autoencoder"], argv
    assert "recipe=autoencoder" not in argv and "meshrun.recipes.autoencoder" not in argv
