"""Lists that used to be copied by hand are derived from one owner; these tests guard each
derivation (issue 12, "no lists that drift").

- the platform variables: each topology detector declares what it reads (READS, FAMILIES,
  CONTEXT); a simulated node's environment, render's refused --env names and the tests'
  neutral environment are derived from that;
- the node flags: the topology's Flags (help text, what a submission file does with each);
- the options that take a value and the argv that gives options again: read off the parser;
- the run-id pattern and default port: meshrun.plan.model;
- what reads like an error: meshrun.diagnose.lines.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator, Mapping
from dataclasses import fields

import pytest
from test_topology import PLATFORMS

from meshrun import topology
from meshrun.cli import build_parser, split_command
from meshrun.cli.options import NODE_FLAGS, options_argv, value_options
from meshrun.errors import UsageError
from meshrun.plan import model
from meshrun.render import spec as render_spec
from meshrun.runtime.simulate import node_env
from meshrun.topology import Flags
from meshrun.topology.base import HostInfo

VARIABLE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]*)+$|^(?:RANK|NNODES|HOSTNAME)$")
NOT_VARIABLES = {"MASTER"}  # volcano: the task named "master" comes first


def _declared(module) -> tuple[set[str], tuple[str, ...]]:
    return ({*module.READS, *getattr(module, "CONTEXT", ())}, getattr(module, "FAMILIES", ()))


def _string_constants(module) -> set[str]:
    """Every string constant in ``module`` that looks like a variable name (docstrings out)."""
    tree = ast.parse(inspect.getsource(module))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs and VARIABLE.match(node.value)} - NOT_VARIABLES


@pytest.mark.parametrize("detector", topology.DETECTORS, ids=lambda d: d.__name__.rsplit(".")[-1])
def test_every_variable_a_detector_names_is_declared(detector):
    names, families = _declared(detector)
    undeclared = {n for n in _string_constants(detector)
                  if n not in names and not n.startswith(families)
                  and not (n.endswith("_") and n in families)}
    assert not undeclared, f"{detector.__name__} reads {sorted(undeclared)} without declaring them"
    unused = {n for n in detector.READS if n not in _string_constants(detector)}
    assert not unused, f"{detector.__name__} declares {sorted(unused)} but never names them"


def test_topology_itself_declares_what_it_reads():
    # less __all__'s names and the prefix of Flags.env_name
    constants = _string_constants(topology) - set(topology.__all__) - {"MESHRUN_"}
    assert constants <= set(topology.READS)
    assert set(topology.READS) <= topology.PLATFORM_VARIABLES


class Recording(Mapping):
    """An environment that notes every name asked of it ("*" when it was walked)."""

    def __init__(self, data: Mapping[str, str]):
        self.data, self.asked = dict(data), set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return self.data[key]

    def __contains__(self, key: object) -> bool:
        self.asked.add(key)
        return key in self.data

    def get(self, key, default=None):
        self.asked.add(key)
        return self.data.get(key, default)

    def __iter__(self) -> Iterator[str]:
        self.asked.add("*")
        return iter(self.data)

    def items(self):
        self.asked.add("*")
        return self.data.items()

    def __len__(self) -> int:
        return len(self.data)


@pytest.mark.parametrize("case", PLATFORMS, ids=lambda c: c[0])
def test_detectors_read_only_what_they_declare(case):
    _id, env, _flags, facts, _expected = case
    host = HostInfo(hostname=facts.hostname, files=facts.files)
    for detector in topology.DETECTORS:
        seen = Recording(env)
        try:
            detector.detect(seen, host)
        except UsageError:
            pass
        names, families = _declared(detector)
        stray = {n for n in seen.asked
                 if n != "*" and n not in names and not n.startswith(families)}
        assert not stray, f"{detector.__name__} read {sorted(stray)} undeclared"
        if "*" in seen.asked:
            assert families, f"{detector.__name__} walks the environment but declares no FAMILIES"


@pytest.mark.parametrize("case", PLATFORMS, ids=lambda c: c[0])
def test_a_simulated_node_sees_no_platform(case):
    _id, env, _flags, facts, _expected = case
    host = HostInfo(hostname=facts.hostname, files=facts.files)
    kept = node_env({**env, "HOSTNAME": "box", "MESHRUN_JOB_CONFIG": "a = 1",
                     "CUDA_VISIBLE_DEVICES": "0", "OMPI_MCA_btl": "self"})
    found = topology.detect(kept, Flags(), host)
    assert found.platforms == ()  # MESHRUN_* ones may remain: a node's own flags beat them
    assert found.platform in ("single-node", "manual (flags / MESHRUN_*)")
    assert {"HOSTNAME", "MESHRUN_JOB_CONFIG", "CUDA_VISIBLE_DEVICES", "OMPI_MCA_btl"} <= set(kept)


def test_a_simulated_node_keeps_meshrun_variables_and_its_flags_beat_them():
    kept = node_env({"MESHRUN_NNODES": "5", "MESHRUN_LOG_DIR": "/tmp/x", "VC_WORKER_NUM": "2"})
    assert kept == {"MESHRUN_NNODES": "5", "MESHRUN_LOG_DIR": "/tmp/x"}
    found = topology.detect(kept, Flags(nnodes="2"))
    assert found.nnodes.value == 2 and found.nnodes.source == "--nnodes"
    assert found.log_dir.value == "/tmp/x"


def _render(env=(), run_args=None):
    return render_spec.spec_from_flags("slurm", ["train.py"], nnodes="2", env=env,
                                       run_args=run_args)


def _one_of_each_family() -> list[str]:
    return [f"{prefix}WORKER_NUM" for prefix in topology.PLATFORM_FAMILIES]


@pytest.mark.parametrize("name", sorted(topology.PLATFORM_VARIABLES | topology.CONTEXT_VARIABLES)
                         + _one_of_each_family())
def test_render_refuses_every_platform_variable_in_env(name):
    with pytest.raises(UsageError, match="belongs to the platform") as caught:
        _render(env=[f"{name}=1"])
    assert caught.value.code == "render-bad-env"


@pytest.mark.parametrize("field", [f.name for f in fields(Flags)])
def test_render_and_node_flags(field):
    how = next(f.metadata["render"] for f in fields(Flags) if f.name == field)
    flag, variable = Flags.flag_name(field), Flags.env_name(field)
    assert flag in NODE_FLAGS and flag in value_options()
    if how == "run":  # passed to every node's meshrun run: allowed in both
        assert flag in _render(run_args=f"{flag} 1").run_flags
        assert (variable, "1") in _render(env=[f"{variable}=1"]).env
    else:
        with pytest.raises(UsageError, match="node flag"):
            _render(run_args=f"{flag} 1")
        with pytest.raises(UsageError, match="set by the file itself"):
            _render(env=[f"{variable}=1"])


def test_render_gives_run_node_flags_to_every_node(tmp_path):
    from meshrun.cli import main

    out = tmp_path / "job.sbatch"
    assert main(["render", "slurm", "--nnodes", "2", "--join-timeout", "900", "-o", str(out),
                 "--", "train.py"]) == 0
    assert "meshrun run --join-timeout 900 -- train.py" in out.read_text()


def test_every_option_that_takes_a_value_is_known_to_the_command_splitter():
    parser = build_parser()
    verbs = next(a for a in parser._actions if a.dest == "verb" or getattr(a, "choices", None)
                 and isinstance(a.choices, dict)).choices
    for verb, sub in verbs.items():
        for action in sub._actions:
            if not action.option_strings or action.nargs == 0:
                continue
            for option in action.option_strings:
                argv = [verb, option, "x", "train.py", "--lr", "1"]
                options, command, _module = split_command(argv)
                assert command == ["train.py", "--lr", "1"], (verb, option)
                assert options == [verb, option, "x"]


def test_options_argv_gives_the_options_again():
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict))
    run = verbs.choices["run"]
    argv = ["--config", "job.toml", "--set", "a=1", "--set", "b=2", "--no-preflight",
            "--require-path", "/data", "--node-timeout", "30", "--accelerate"]
    dests = ("config", "set", "no_preflight", "require_path", "node_timeout", "accelerate",
             "checkpoint_dir", "hang_timeout")
    first = run.parse_args(argv)
    again = options_argv(run, first, dests)
    second = run.parse_args(again)
    assert {d: getattr(first, d) for d in dests} == {d: getattr(second, d) for d in dests}
    assert again == ["--config", "job.toml", "--set", "a=1", "--set", "b=2", "--no-preflight",
                     "--require-path", "/data", "--node-timeout", "30", "--accelerate"]


def test_run_id_and_port_have_one_owner():
    from meshrun.render import validate

    assert validate.RUN_ID is model.RUN_ID
    assert render_spec.DEFAULT_MASTER_PORT == model.DEFAULT_MASTER_PORT
    assert render_spec.RenderSpec.__dataclass_fields__["master_port"].default == \
        model.DEFAULT_MASTER_PORT


def test_the_launcher_and_diagnose_read_errors_alike():
    from meshrun.diagnose import lines
    from meshrun.runtime import launch

    assert launch.reads_like_error is lines.reads_like_error
    for said in ("RuntimeError: CUDA error: invalid device ordinal",
                 "meshrun: error: --nnodes 'x' is not a whole number; fix: ... [bad-number]",
                 "FATAL: exception not rethrown", "Killed"):
        assert lines.reads_like_error(said), said
    for noise in ("  frame #3: c10::Error::Error() + 0x1c", "Step 3 loss 0.2",
                  "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"):
        assert not lines.reads_like_error(noise), noise
