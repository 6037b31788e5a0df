"""Tensors handed to collectives are made on the job's device (NCCL has no CPU path).

The first GPU run found ``meshrun bench`` all-reducing a CPU tensor on an NCCL group
(``RuntimeError: No backend type associated with device type cpu``): on the CPU, gloo takes
CPU tensors, so no CPU test saw it. Two checks that would have:

- collbench's collectives run under torch's ``FakeTensorMode`` with a fake CUDA device (no GPU
  needed) against a stand-in ``dist`` that records each tensor's device;
- a lint over ``meshrun.worker`` and ``meshrun.recipes``: a tensor made by a torch factory
  (``torch.tensor``, ``zeros``, ...) and handed to a tensor collective in the same function
  must be given ``device=`` (object collectives, which pickle, are left out).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from meshrun.worker.collbench import collective_op, slowest

SRC = Path(__file__).resolve().parents[2] / "src" / "meshrun"

# torch.distributed's tensor collectives, and ProcessGroup methods of the same kind
COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
               "reduce_scatter", "reduce_scatter_tensor", "broadcast", "reduce", "all_to_all",
               "all_to_all_single", "send", "recv", "isend", "irecv", "allreduce", "allgather",
               "reduce_scatter_single", "scatter", "gather"}
FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "randn", "rand",
             "randint", "arange", "linspace", "eye"}


class RecordingDist:
    """The part of ``torch.distributed`` collbench uses, recording each tensor's device."""

    class ReduceOp:
        MAX = "max"

    def __init__(self) -> None:
        self.devices: list[tuple[str, torch.device]] = []

    def all_reduce(self, tensor, op=None):
        self.devices.append(("all_reduce", tensor.device))

    def all_gather_single(self, out, inp):
        self.devices += [("all_gather out", out.device), ("all_gather in", inp.device)]


def test_collbench_gives_nccl_tensors_on_the_gpu():
    """Under a fake CUDA device (FakeTensorMode: no GPU, no memory), every tensor collbench
    hands a collective, the timing's MAX all-reduce included, is on that device."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    dist = RecordingDist()
    with FakeTensorMode():
        device = torch.device("cuda", 0)
        for collective in ("all_reduce", "all_gather"):
            op, nbytes = collective_op(dist, collective, 1 << 20, 2, device)
            op()
            assert nbytes == 1 << 20
        took = slowest(dist, 0.25, device)
        assert took.device.type == "cuda"
    assert [name for name, _ in dist.devices] == [
        "all_reduce", "all_gather out", "all_gather in", "all_reduce"]
    assert all(d.type == "cuda" for _, d in dist.devices), dist.devices


def test_collbench_on_the_cpu_keeps_cpu_tensors():
    dist = RecordingDist()
    took = slowest(dist, 0.25, torch.device("cpu"))
    assert float(took.item()) == 0.25 and dist.devices == [("all_reduce", torch.device("cpu"))]


# --- the lint -------------------------------------------------------------------------------

def _factory_without_device(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
            and node.func.attr in FACTORIES
            and not any(k.arg == "device" for k in node.keywords))


def _assigned(function: ast.AST) -> dict[str, list[ast.AST]]:
    """name -> every value assigned to it in ``function`` (tuple assignments unpacked)."""
    out: dict[str, list[ast.AST]] = {}
    for node in ast.walk(function):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts))
            for name, value in pairs:
                if isinstance(name, ast.Name):
                    out.setdefault(name.id, []).append(value)
    return out


def host_tensors_in_collectives(source: str, where: str = "") -> list[str]:
    """``where:line collective(name)`` for each tensor made by a torch factory without
    ``device=`` (so on the CPU) and handed to a tensor collective in the same function."""
    found = []
    tree = ast.parse(source)
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        assigned = _assigned(function)
        for call in ast.walk(function):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr in COLLECTIVES):
                continue
            args = []
            for arg in call.args:   # pg.allreduce([buf]), pg.allgather([rows], [row])
                args += arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
            for arg in args:
                values = assigned.get(arg.id, []) if isinstance(arg, ast.Name) else [arg]
                if any(_factory_without_device(v) for v in values):
                    name = arg.id if isinstance(arg, ast.Name) else "a new tensor"
                    found.append(f"{where}:{call.lineno} {call.func.attr}({name})")
    return found


BUG = '''
def timing(dist, device, start, iters):
    took = torch.tensor([(time.perf_counter() - start) / iters])
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    return float(took.item())
'''


@pytest.mark.parametrize("source, expected", [
    (BUG, [":4 all_reduce(took)"]),                                 # the bug the GPU found
    (BUG.replace("iters])", "iters], device=device)"), []),
    ("def f(pg, n, device):\n    out, got = torch.ones(n), torch.empty(n, device=device)\n"
     "    pg.send([out], 1, 0)\n    pg.recv([got], 0, 0)\n", [":3 send(out)"]),
    ("def f(dist):\n    dist.all_reduce(torch.zeros(1))\n", [":2 all_reduce(a new tensor)"]),
    ("def f(dist, row):\n    rows = [torch.empty_like(row)]\n    dist.all_gather(rows, row)\n",
     []),
    ("def f(dist):\n    box = [1]\n    dist.broadcast_object_list(box, src=0)\n", []),
])
def test_the_lint_finds_a_host_tensor_handed_to_a_collective(source, expected):
    assert host_tensors_in_collectives(source) == expected


def test_no_worker_or_recipe_hands_a_collective_a_host_tensor():
    """Every tensor meshrun's workers and recipes hand a collective is made on the device
    (or derived from one that is): an NCCL group would refuse a CPU tensor."""
    found = []
    for folder in ("worker", "recipes"):
        for path in sorted((SRC / folder).glob("*.py")):
            found += host_tensors_in_collectives(path.read_text(),
                                                 str(path.relative_to(SRC.parent)))
    assert found == []
