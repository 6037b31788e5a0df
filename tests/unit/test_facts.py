"""Host facts: nvidia-smi's CSV, a stand-in nvidia-smi on PATH (working, failing, absent,
garbled), and the LSF rank file read once for the pure detector."""

from __future__ import annotations

import dataclasses
import socket

import pytest
from unit_fakes import H100, gpu_uuid, plan

from meshrun.errors import UsageError
from meshrun.facts import Gpu, collect, parse_gpu_csv, query_gpus
from meshrun.topology import Flags


@pytest.mark.parametrize("text, expected", [
    ("0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559\n",
     (Gpu(0, "GPU-aaaa", H100, 81559),)),
    ("0, GPU-a, NVIDIA A100-SXM4-40GB, 40960\n\n1, GPU-b, NVIDIA A100-SXM4-40GB, 40960\n",
     (Gpu(0, "GPU-a", "NVIDIA A100-SXM4-40GB", 40960),
      Gpu(1, "GPU-b", "NVIDIA A100-SXM4-40GB", 40960))),
    ("3, GPU-c, Tesla T4, [N/A]", (Gpu(3, "GPU-c", "Tesla T4", 0),)),
    ("2, GPU-d, Tesla T4", (Gpu(2, "GPU-d", "Tesla T4", 0),)),
    ("", ()),
], ids=["one-gpu", "two-gpus-blank-line", "memory-not-available", "no-memory-column", "empty"])
def test_parse_gpu_csv(text, expected):
    assert parse_gpu_csv(text) == expected


@pytest.mark.parametrize("text", ["No devices were found", "0, GPU-a", "x, GPU-a, T4, 1"],
                         ids=["message", "two-columns", "index-not-a-number"])
def test_parse_gpu_csv_rejects(text):
    with pytest.raises(ValueError):
        parse_gpu_csv(text)


def test_query_gpus_with_stand_in(gpu_bin):
    gpus, error = query_gpus({"PATH": str(gpu_bin)})
    assert error == ""
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[5] == Gpu(5, gpu_uuid(5), H100, 81559)


def test_query_gpus_without_nvidia_smi_is_a_cpu_host(empty_bin):
    assert query_gpus({"PATH": str(empty_bin)}) == ((), "")


def test_query_gpus_failing_nvidia_smi_reports_why(failing_bin):
    gpus, error = query_gpus({"PATH": str(failing_bin)})
    assert gpus == ()
    assert error.startswith("nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it "
                            "couldn't communicate with the NVIDIA driver")
    assert "\n" not in error


def test_query_gpus_garbled_output(garbage_bin):
    gpus, error = query_gpus({"PATH": str(garbage_bin)})
    assert gpus == ()
    assert error == "nvidia-smi printed something unexpected: line 'No devices were found'"


def test_failing_nvidia_smi_plan_warns_and_falls_back_to_cpu(failing_bin):
    facts = collect({"PATH": str(failing_bin)})
    assert facts.gpus == ()
    assert "exit 9" in facts.gpu_error
    p = plan({}, Flags(), facts)
    assert (p.backend, p.device, p.nproc_per_node) == ("gloo", "cpu", 1)
    assert len(p.warnings) == 1
    assert "NVIDIA-SMI has failed" in p.warnings[0]
    assert p.warnings[0].endswith("; running on CPU")


def test_collect_reads_gpus_and_hostname(gpu_bin):
    facts = collect({"PATH": str(gpu_bin)})
    assert len(facts.gpus) == 8 and facts.gpu_error == ""
    assert facts.hostname == socket.gethostname()
    assert facts.files == {}
    p = plan({}, Flags(), facts)
    assert p.nproc_per_node == 8 and p.backend == "nccl"


def test_collect_reads_the_lsf_rankfile(tmp_path, empty_bin):
    rankfile = tmp_path / "rankfile"
    text = "login1\nc7\nc7\nc8\nc8\n"
    rankfile.write_text(text)
    env = {"PATH": str(empty_bin), "LSB_JOBID": "31337", "LSB_DJOB_RANKFILE": str(rankfile)}
    facts = collect(env)
    assert facts.files == {str(rankfile): text}
    p = plan(env, Flags(), dataclasses.replace(facts, hostname="c8"))
    assert (p.nnodes, p.node_rank, p.master_addr, p.master_port) == (2, 1, "c7", 16337)
    assert p.run_id == "lsf-31337"


def test_collect_leaves_an_unreadable_rankfile_to_the_detector(tmp_path, empty_bin):
    missing = tmp_path / "gone"
    env = {"PATH": str(empty_bin), "LSB_JOBID": "1", "LSB_DJOB_RANKFILE": str(missing)}
    facts = collect(env)
    assert facts.files == {}
    with pytest.raises(UsageError) as info:
        plan(env, Flags(), facts)
    assert info.value.line() == (f"meshrun: error: LSB_DJOB_RANKFILE={missing} cannot be read; "
                                 "fix: run meshrun inside the LSF job, or pass --nnodes/"
                                 "--node-rank/--master-addr [lsf-rankfile-unreadable]")
