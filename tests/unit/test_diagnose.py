"""meshrun.diagnose over a corpus of failure logs (tests/unit/fixtures/failure_logs/).

About half of the corpus is real output captured on the CPU build (torchrun and meshrun
simulate failing on purpose: SIGKILL, an IndexError, a C++ stack trace, a busy port, an
unresolvable master, a store timeout, a rendezvous that never forms, a @record traceback);
the GPU-only failures (NCCL, CUDA, InfiniBand) are written after the messages torch 2.x and
NCCL print, as they appear in public bug reports. Each file's expected diagnoses are listed
below in full and in order, so a signature that fires where it should not, a missing rank or
host, or a consequence reported before its cause all fail a test.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from meshrun import diagnose
from meshrun.diagnose import (
    CATALOG,
    Diagnosis,
    diagnose_files,
    diagnose_text,
    fix_for_oom,
    parse_root_cause,
    parse_worker_failures,
    render_text,
    to_json,
)
from meshrun.errors import UsageError
from meshrun.job import parse_sets, resolve

ROOT = Path(__file__).resolve().parents[2]
LOGS = Path(__file__).resolve().parent / "fixtures" / "failure_logs"

# file -> every diagnosis, root cause first: (code, rank, host)
EXPECTED: dict[str, list[tuple[str, int | None, str | None]]] = {
    # clean runs: nothing fires (benign IPv6 / errno 97 warnings, "error" in metric names, ...)
    "clean_simulate.log": [],
    "clean_gpu_nccl.log": [],
    # real torchrun / meshrun output
    "torchrun_sigkill.log": [("host-oom-killed", 1, "localhost"),
                             ("gloo-connection-lost", 0, "localhost")],
    "simulate_sigkill.log": [("host-oom-killed", 1, "vm"), ("gloo-connection-lost", 0, "vm")],
    "torchrun_indexerror.log": [("unknown", 1, "localhost"),
                                ("gloo-connection-lost", 0, "localhost")],
    "torchrun_cpp_frames.log": [("unknown", 1, "localhost"),
                                ("gloo-connection-lost", 0, "localhost")],
    "torchrun_record_traceback.log": [("unknown", 1, "localhost")],
    "torchrun_port_in_use.log": [("port-in-use", None, None)],
    "torchrun_rendezvous_timeout.log": [("rendezvous-timeout", None, None)],
    "torchrun_rendezvous_connection.log": [("rendezvous-connection-error", None, None)],
    "torch_dns_failure.log": [("master-dns-failure", None, None)],
    "torch_store_connection_lost.log": [("store-connection-lost", None, None)],
    "store_barrier_too_few.log": [("store-barrier-timeout", None, None)],
    "meshrun_join_timeout.log": [("join-timeout", None, "vm")],
    "meshrun_port_in_use.log": [("port-in-use", None, "vm")],
    "meshrun_master_unreachable.log": [("master-unreachable", None, "vm")],
    "meshrun_master_dns.log": [("master-dns-failure", None, "vm")],
    "meshrun_store_other_job.log": [("store-other-job", None, "vm")],
    # meshrun's other start-up errors and its watchdog lines, in the formats it prints; a
    # node-level line gets the host from the node's banner
    "meshrun_duplicate_node_rank.log": [("duplicate-node-rank", None, "gpu-c")],
    "meshrun_too_many_nodes.log": [("too-many-nodes", None, "gpu-a")],
    "meshrun_preflight_mismatch.log": [("preflight-mismatch", None, "gpu-a")],
    "node_lost_node0.log": [("node-lost", None, "gpu-b"), ("nccl-remote-error", 2, "gpu-a")],
    "hang_node0.log": [("rank-hang", 11, "gpu-b"), ("rank-hang", 13, "gpu-b")],
    "node0_store_lost_node1.log": [("node-lost", None, "cpu-a"),
                                   ("store-connection-lost", 2, "cpu-b")],
    # GPU, NCCL and system failures
    "slurm_cuda_oom_node0.log": [("cuda-oom", 3, "gpu-a")],
    "slurm_cuda_oom_node1.log": [("nccl-watchdog-timeout", 8, "gpu-b"),
                                 ("nccl-watchdog-timeout", 9, "gpu-b")],
    "torchrun_duplicate_gpu.log": [("duplicate-gpu", 0, "dgx-03"), ("duplicate-gpu", 1, "dgx-03")],
    "nccl_invalid_usage_rank5.log": [("nccl-invalid-usage", 5, None)],
    "invalid_device_ordinal_node1.log": [("invalid-device-ordinal", 8, "gpu-b"),
                                         ("invalid-device-ordinal", 9, "gpu-b")],
    "torchrun_no_cuda_gpus.log": [("cuda-init-failed", 0, "trainer-worker-0"),
                                  ("cuda-init-failed", 1, "trainer-worker-0")],
    "cuda_driver_too_old.log": [("cuda-driver-too-old", None, None)],
    "mpirun_torch_missing.log": [("torch-missing", 0, None), ("torch-missing", 1, None)],
    "torchrun_module_missing.log": [("python-module-missing", 0, "ws-ml-07"),
                                    ("python-module-missing", 1, "ws-ml-07")],
    "flash_attn_undefined_symbol_rank0.log": [("torch-abi-mismatch", 0, None)],
    "gpu_ecc_error_node0.log": [("gpu-hardware-error", 5, "gpu-a"),
                                ("nccl-remote-error", 6, "gpu-a")],
    "cuda_device_assert.log": [("cuda-device-assert", 2, "gpu-a")],
    "cuda_illegal_access.log": [("cuda-illegal-memory-access", 0, "ws-ml-07")],
    "device_mismatch.log": [("device-mismatch", 1, "ws-ml-07")],
    "pg_not_initialized.log": [("pg-not-initialized", None, None)],
    "nccl_unhandled_cuda_node1.log": [("nccl-unhandled-cuda-error", 15, "gpu-b")],
    # NCCL's bootstrap failed to connect (bootstrap.cc -> 2): more than "a system error"
    "nccl_system_error_node0.log": [("nccl-bootstrap-failed", 0, "gpu-a")],
    "nccl_internal_error.log": [("nccl-internal-error", 1, "gpu-a")],
    # two nodes with different NCCL builds: each rank that said its version is named
    "nccl_versions_differ.log": [("nccl-version-differs", 0, "gpu-a"),
                                 ("nccl-version-differs", 8, "gpu-b")],
    "ib_completion_error_node1.log": [("ib-transport-error", 12, "gpu-b")],
    "nccl_socket_fallback.log": [("nccl-socket-fallback", 0, "ip-172-31-12-21"),
                                 ("nccl-socket-fallback", 1, "ip-172-31-12-21")],
    "gloo_connect_full_mesh.log": [("gloo-connect-failed", 2, "cpu-node-b")],
    "gloo_timeout_rank0.log": [("gloo-timeout", 0, None)],
    "address_family.log": [("address-family-mismatch", None, None)],
    "torchrun_segfault.log": [("segfault", 1, "a100-node-4")],
    "dataloader_shm_bus_error.log": [("shm-too-small", 0, "3f9c2b1e7d44")],
    # real: meshrun simulate of a DataLoader whose collate_fn is a lambda, spawn workers
    "dataloader_spawn_lambda.log": [("unpicklable-under-spawn", 0, "vm")],
    # DeepSpeed's op builder as its source raises it (deepspeed/ops/op_builder/builder.py)
    "deepspeed_no_cuda_compiler.log": [("deepspeed-no-cuda-compiler", 0, None)],
    # deepspeed.comm's own lines (comm.py init_distributed, mpi_discovery) under plain python
    "deepspeed_outside_launcher.log": [("deepspeed-outside-launcher", None, None)],
    # NCCL's error class alone, "Last error:" left empty (NCCL_DEBUG unset): no cause named
    "nccl_unhandled_system_error.log": [("nccl-system-error", 1, None)],
    "checkpoint_disk_full.log": [("disk-full", 0, "gpu-a")],
    "too_many_open_files.log": [("too-many-open-files", 3, "gpu-a")],
    "torch21_master_refused.log": [("master-unreachable", None, None)],
    "store_barrier_too_many.log": [("store-barrier-timeout", 3, None)],
    "unknown_plain_traceback.log": [("unknown", None, None)],
    "worker_bad_input.log": [("worker-bad-input", 0, "vm")],
    # real: the quick start in an empty venv before numpy was declared (torch's import warning
    # on the agent is advice; the workers' RuntimeError is the cause)
    "numpy_missing_node1.log": [("numpy-missing", 3, "vm"), ("numpy-missing", 2, "vm")],
    "numpy2_abi_torch24.log": [("numpy-version-mismatch", None, None)],
    # real: torch.cuda.set_device in a script run by meshrun simulate on a CPU-only torch
    "cuda_forced_cpu_run_node0.log": [("cuda-on-cpu-torch", 0, "vm")],
    # real: AutoTokenizer.from_pretrained("gpt2") on this machine, which has no internet
    "hub_offline_node0.log": [("network-download-failed", 0, "vm")],
}


def found(path: Path, **kw) -> list[tuple[str, int | None, str | None]]:
    return [(d.code, d.rank, d.host) for d in diagnose_files([path], **kw)]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus(name):
    assert found(LOGS / name) == EXPECTED[name]


def test_every_fixture_is_in_the_table_and_every_code_is_covered():
    """Every code is produced by a fixture here or by a real excerpt of tests/corpus/."""
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)
    covered = {code for rows in EXPECTED.values() for code, _, _ in rows}
    corpus = ROOT / "tests" / "corpus"
    for path in corpus.rglob("*.log"):
        _, _, text = path.read_text().partition("\n# ---\n")
        covered |= {d.code for d in diagnose_text(text)}
    assert set(diagnose.codes()) <= covered, set(diagnose.codes()) - covered


def test_catalog_has_the_codes_the_issue_names():
    named = {"nccl-system-error", "master-unreachable", "master-dns-failure",
             "store-barrier-timeout", "port-in-use", "invalid-device-ordinal", "duplicate-gpu",
             "cuda-init-failed", "torch-missing", "cuda-oom", "nccl-socket-fallback",
             "nccl-watchdog-timeout", "rendezvous-timeout", "rendezvous-connection-error",
             "node-lost", "rank-hang"}
    assert named <= set(diagnose.codes())
    assert len(diagnose.codes()) >= 25


def test_every_pattern_has_a_literal_its_matches_contain():
    # The fast path skips a pattern on lines without its literal: check the literal is
    # right on every corpus line the pattern matches.
    lines = [line for p in LOGS.glob("*.log") for line in p.read_text().splitlines()]
    for sig in CATALOG:
        for pattern, literal in zip(sig.patterns, sig.needles):
            assert literal, (sig.code, pattern.pattern)
            for line in lines:
                if pattern.search(line):
                    assert literal in line, (sig.code, pattern.pattern, line)


def test_needle_reads_only_certain_literals():
    assert diagnose.needle(re.compile(r"No module named '?torch'?")) == "No module named "
    assert diagnose.needle(re.compile(r"(?:\[Rank \d+\] )?Watchdog caught x")) == \
        "Watchdog caught x"
    assert diagnose.needle(re.compile(r"[Aa]ddress already in use")) == "ddress already in use"
    assert diagnose.needle(re.compile(r"foo bar|baz qux")) is None  # top-level alternation


# --- order: the root cause first ---------------------------------------------------------------

def test_oom_on_one_node_explains_the_timeouts_on_the_other():
    logs = [LOGS / "slurm_cuda_oom_node1.log", LOGS / "slurm_cuda_oom_node0.log"]
    result = diagnose_files(logs)
    assert [(d.code, d.rank, d.host) for d in result] == [
        ("cuda-oom", 3, "gpu-a"), ("nccl-watchdog-timeout", 8, "gpu-b"),
        ("nccl-watchdog-timeout", 9, "gpu-b")]
    oom = result[0]
    assert "2.00 GiB" in oom.cause and "GPU 3" in oom.cause and "1.23 GiB free" in oom.cause
    assert oom.file.endswith("slurm_cuda_oom_node0.log")
    assert "torch.OutOfMemoryError" in oom.line and oom.line_no > 20
    text = render_text(result).splitlines()
    assert text[0].startswith("rank 3 on gpu-a: CUDA out of memory — ")
    assert text[1].startswith("ranks 8-9 on gpu-b: NCCL collective timed out — ")
    assert "ALLREDUCE #4127" in text[1] and "600 s" in text[1]


def test_the_same_failure_in_node_and_rank_logs_is_one_diagnosis(tmp_path):
    run = tmp_path / "slurm-48213.0"
    (run / "raw").mkdir(parents=True)
    node0 = (LOGS / "slurm_cuda_oom_node0.log").read_text()
    shutil.copy(LOGS / "slurm_cuda_oom_node0.log", run / "node0.log")
    rank3 = [ln.removeprefix("[rank3]: ") for ln in node0.splitlines() if ln.startswith("[rank3]")]
    (run / "rank3.log").write_text("\n".join(rank3) + "\n")
    (run / "raw" / "rank3.stderr").write_text("Killed\n")  # raw/ is not read
    result = diagnose_files([run])
    assert [(d.code, d.rank, d.host) for d in result] == [("cuda-oom", 3, "gpu-a")]
    # an earlier run with the same id, its logs kept aside: not this run's failure
    shutil.copy(LOGS / "meshrun_port_in_use.log", run / "node0.20261123-154150.log")
    shutil.copy(LOGS / "meshrun_port_in_use.log", run / "rank3.20261123-154150-1.log")
    assert [(d.code, d.rank) for d in diagnose_files([run])] == [("cuda-oom", 3)]
    assert [d.code for d in diagnose_files([run / "node0.20261123-154150.log"])] == ["port-in-use"]


def test_the_lost_node_comes_before_what_the_survivors_report():
    first, second = diagnose_files([LOGS / "node_lost_node0.log"])
    assert first.code == "node-lost" and "node 1 (gpu-b)" in first.cause
    assert "15.3 s" in first.cause
    assert second.code == "nccl-remote-error"
    assert "Connection closed by remote peer gpu-b.cluster.local" in second.cause


def test_torchrun_tee_prefix_gives_a_local_rank_only():
    # torchrun --tee 3 prefixes "[<role><local rank>]:"; on node 1 local rank 3 is not rank 3
    log = ("[default3]:[rank11]: Traceback (most recent call last):\n"
           '[default3]:[rank11]:   File "/home/ml/job/train.py", line 212, in <module>\n'
           "[default3]:[rank11]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
           "512.00 MiB. GPU 3 has a total capacity of 39.38 GiB of which 201.06 MiB is free.\n"
           "[default2]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB.\n")
    (with_rank, local_only) = diagnose_text(log)
    assert (with_rank.rank, with_rank.local_rank) == (11, None)
    assert (local_only.rank, local_only.local_rank) == (None, 2)
    assert render_text([local_only]).startswith("local rank 2: CUDA out of memory — ")


def test_a_dns_failure_is_not_also_reported_as_a_connect_timeout():
    (only,) = diagnose_files([LOGS / "torch_dns_failure.log"])
    assert only.code == "master-dns-failure"
    assert "'trainer-0.trainer.default.svc' does not resolve" in only.cause


def test_meshrun_error_lines_keep_their_own_fix():
    (only,) = diagnose_files([LOGS / "meshrun_port_in_use.log"])
    assert only.fix.startswith("choose another --master-port")
    assert "ss -ltnp sport = :59945" in only.fix
    (pre,) = diagnose_files([LOGS / "meshrun_preflight_mismatch.log"])
    assert "node 1 (gpu-b) differs from node 0 in: installed packages, torch version" in pre.cause
    assert pre.fix.startswith("install the same versions on every node")


# --- numbers read from the messages -------------------------------------------------------------

def test_store_barrier_counts_are_interpreted():
    (few,) = diagnose_files([LOGS / "store_barrier_too_few.log"])
    assert "only 1 of 4 processes reached the store within 4 s: 3 never started" in few.cause
    assert few.priority == diagnose.EFFECT
    (many,) = diagnose_files([LOGS / "store_barrier_too_many.log"])
    assert "12 processes joined a store that expected 8: two jobs share" in many.cause
    assert many.priority == diagnose.SETUP and "--master-port" in many.fix


def test_driver_version_and_nccl_last_error_are_quoted():
    (old,) = diagnose_files([LOGS / "cuda_driver_too_old.log"])
    assert "supports CUDA up to 11.4" in old.cause
    (cuda,) = diagnose_files([LOGS / "nccl_unhandled_cuda_node1.log"])
    assert "NCCL's last error: Cuda failure 1 'invalid argument'" in cuda.cause
    (sysd,) = diagnose_files([LOGS / "nccl_system_error_node0.log"])
    assert "Connect to 10.140.28.121<36113> failed" in sysd.cause


def test_watchdog_lines_as_meshrun_prints_them():
    from meshrun.runtime.events import hang_line, node_lost_line

    lost = diagnose_text(node_lost_line(2, "gpu-c", 18.04))
    assert [(d.code, d.rank, d.host) for d in lost] == [("node-lost", None, "gpu-c")]
    assert "18.0 s" in lost[0].cause
    store = diagnose_text(node_lost_line(0, "gpu-a", 16.0, store_host=True))
    assert "hosts the job's store" in store[0].cause
    hung = diagnose_text(hang_line([(3, 1, "gpu-b"), (12, 3, "gpu-d")], 300.0))
    assert [(d.code, d.rank, d.host) for d in hung] == [("rank-hang", 3, "gpu-b"),
                                                      ("rank-hang", 12, "gpu-d")]
    nobody = diagnose_text(hang_line([], 42.0))
    assert [(d.code, d.rank) for d in nobody] == [("rank-hang", None)]


# --- the CUDA out-of-memory fix -----------------------------------------------------------------

@pytest.mark.parametrize("batch, accum, effective, fix", [
    (8, 1, 256, ("halve train.per_device_batch (8 -> 4) and double train.grad_accum (1 -> 2): "
                 "same effective batch 256")),
    (6, 2, None, ("halve train.per_device_batch (6 -> 3) and double train.grad_accum (2 -> 4): "
                  "same effective batch")),
    (3, 1, 96, ("lower train.per_device_batch (3 -> 1) and multiply train.grad_accum by 3 "
                "(1 -> 3): same effective batch 96")),
    (9, 1, None, ("lower train.per_device_batch (9 -> 3) and multiply train.grad_accum by 3 "
                  "(1 -> 3): same effective batch")),
])
def test_fix_for_oom_keeps_the_effective_batch(batch, accum, effective, fix):
    assert fix_for_oom(batch, accum, effective) == fix


def test_fix_for_oom_without_numbers_or_room():
    assert fix_for_oom(None).startswith("halve the per-device batch (train.per_device_batch) "
                                        "and double the gradient accumulation")
    assert fix_for_oom(1, 4, 64).startswith("train.per_device_batch is already 1")


def test_oom_fix_reads_the_job_config():
    # seed 001 on 16 GPUs: 4 per device x 16 x grad_accum 2 = 128
    job = resolve(recipe_defaults=None, sets=parse_sets(["train.grad_accum=2"]),
                  file_data={"train": {"per_device_batch": 4}}, world_size=16,
                  nproc_per_node=8, nnodes=2, run_id="slurm-48213.0")
    expected = ("halve train.per_device_batch (4 -> 2) and double train.grad_accum (2 -> 4): "
                "same effective batch 128")
    for given in (job, job.to_dict(), json.loads(job.to_env()["MESHRUN_JOB_CONFIG"])):
        (oom,) = diagnose_files([LOGS / "slurm_cuda_oom_node0.log"], job=given)
        assert oom.fix == expected
    (plain,) = diagnose_files([LOGS / "slurm_cuda_oom_node0.log"])
    assert plain.fix == fix_for_oom(None)


# --- torchrun's Root Cause block ----------------------------------------------------------------

def test_root_cause_block_with_a_signal():
    text = (LOGS / "torchrun_sigkill.log").read_text()
    root = parse_root_cause(text)
    assert (root.rank, root.local_rank, root.host, root.exitcode, root.pid, root.signal) == \
        (1, 1, "localhost", -9, 20185, "SIGKILL")
    assert root.error_file is None and root.time == "2026-11-23_11:05:11"
    assert root.error_line == "Signal 9 (SIGKILL) received by PID 20185"
    (other,) = [f for f in parse_worker_failures(text) if not f.root]
    assert (other.rank, other.exitcode, other.signal) == (0, -15, "SIGTERM")


def test_root_cause_block_with_a_python_traceback():
    text = (LOGS / "torchrun_record_traceback.log").read_text()
    (root,) = parse_worker_failures(text)
    assert root.root and (root.rank, root.exitcode, root.signal) == (1, 1, None)
    assert root.error_file.endswith("/attempt_0/1/error.json")
    assert root.traceback.startswith("Traceback (most recent call last):")
    assert root.error_line == "ValueError: shard 7 missing from the index (2 shards found)"
    (unknown,) = diagnose_text(text, name="torchrun.log")
    assert (unknown.rank, unknown.host, unknown.line) == (1, "localhost", root.error_line)


def test_no_block_no_root_cause():
    assert parse_root_cause((LOGS / "clean_simulate.log").read_text()) is None


# --- unknown failures ---------------------------------------------------------------------------

def test_unknown_failure_names_its_first_real_error_line_not_cpp_frames():
    first = diagnose_files([LOGS / "torchrun_cpp_frames.log"])[0]
    assert first.code == "unknown" and first.rank == 1
    assert first.line == "[rank1]: RuntimeError: shape '[4, 16]' is invalid for input of size 240"
    assert "frame #" not in first.cause and "#4 " not in first.cause
    (plain,) = diagnose_files([LOGS / "unknown_plain_traceback.log"])
    assert plain.line == "KeyError: 'video'" and plain.line_no == 10


def test_a_failed_rank_without_its_output_still_gets_a_diagnosis():
    node1_only = ("meshrun: rank 9 on node 1 (gpu-b) exited with code 3\n"
                  "meshrun:   logs: logs/r/rank9.log\n")
    (d,) = diagnose_text(node1_only)
    assert (d.code, d.rank, d.host, d.line_no) == ("unknown", 9, "gpu-b", 1)
    assert d.cause.endswith("rank 9 on node 1 (gpu-b) exited with code 3")


# --- output -------------------------------------------------------------------------------------

def test_json_shape():
    result = diagnose_files([LOGS / "torchrun_sigkill.log"])
    data = json.loads(json.dumps(to_json(result)))
    assert list(data) == ["diagnoses"]
    for item in data["diagnoses"]:
        assert {"code", "cause", "fix", "rank", "host", "line"} <= set(item)
    assert data["diagnoses"][0]["code"] == "host-oom-killed"
    assert data["diagnoses"][0]["rank"] == 1 and data["diagnoses"][0]["line_no"] == 50


def test_render_text_one_sentence_per_code():
    text = render_text(diagnose_files([LOGS / "torchrun_duplicate_gpu.log"]))
    assert text.count("\n") == 0
    assert text.startswith("ranks 0-1 on dgx-03: two ranks on one GPU — ranks 0 and 1 use "
                           "the same GPU")
    assert "; fix: call torch.cuda.set_device(int(os.environ['LOCAL_RANK']))" in text
    assert render_text([]) == "no known failure found in these logs"


def test_secrets_in_log_lines_are_redacted():
    log = ("Traceback (most recent call last):\n"
           '  File "fetch.py", line 3, in <module>\n'
           "OSError: cannot fetch https://alice:s3cret-pw@hub.example.com/taehv.pt "
           "with HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345\n")
    (d,) = diagnose_text(log)
    for secret in ("s3cret-pw", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"):
        assert secret not in d.line and secret not in d.cause
    assert "https://alice:<redacted>@hub.example.com" in d.line


# --- input errors and invariants ----------------------------------------------------------------

def test_missing_log_file_is_one_line_with_a_fix(tmp_path):
    with pytest.raises(UsageError) as err:
        diagnose_files([tmp_path / "node0.log"])
    line = err.value.line()
    assert line.startswith("meshrun: error: log file ") and "does not exist; fix: " in line
    with pytest.raises(UsageError, match="holds no"):
        diagnose_files([tmp_path])


def test_diagnosis_is_validated():
    with pytest.raises(ValueError, match="kebab"):
        Diagnosis(code="CUDA OOM", cause="c", fix="f")
    with pytest.raises(ValueError, match="rank"):
        Diagnosis(code="cuda-oom", cause="c", fix="f", rank=-1)


def test_docs_table_lists_every_code():
    doc = (ROOT / "docs" / "diagnose.md").read_text()
    for code in diagnose.codes():
        assert f"| `{code}` |" in doc, code


def test_import_does_not_import_torch():
    code = ("import meshrun.diagnose, meshrun.redact, sys; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_cli_takes_options_after_the_paths(capsys):
    """`meshrun diagnose logs/x --json` once read --json as a log file name."""
    from meshrun.cli import main

    log = str(LOGS / "meshrun_port_in_use.log")
    assert main(["diagnose", log, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["diagnoses"]
    assert [d["code"] for d in found] == [d.code for d in diagnose_files([log])]
    assert main(["diagnose", "--", log]) == 0
    assert capsys.readouterr().out == render_text(diagnose_files([log])) + "\n"


# --- no confident wrong answer from lines that only look like a cause (review of issue 11) ------

def _codes(text: str) -> list[str]:
    return [d.code for d in diagnose_text(text)]


def test_a_download_retry_warning_does_not_outrank_the_real_error():
    text = ("[rank0]: '(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): "
            "Max retries exceeded with url: /gpt2/resolve/main/config.json\"))' thrown while "
            "requesting HEAD https://huggingface.co/gpt2/resolve/main/config.json\n"
            "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    assert _codes(text)[0] == "cuda-oom"
    raised = ("[rank0]: OSError: We couldn't connect to 'https://huggingface.co' to load the "
              "files, and couldn't find them in the cached files.\n")
    assert _codes(raised) == ["network-download-failed"]


def test_torchs_numpy_warning_does_not_hide_the_ranks_own_error():
    text = ("meshrun: rank 0 on node 0 (vm) exited with code 1\n"
            "[rank0]: /x/torch/_subclasses/functional_tensor.py:368: UserWarning: Failed to "
            "initialize NumPy: No module named 'numpy' (Triggered internally at x.cpp:84.)\n"
            "[rank0]: Traceback (most recent call last):\n"
            "[rank0]:   File \"train.py\", line 3, in <module>\n"
            "[rank0]: ValueError: bad thing\n")
    found = diagnose_text(text)
    assert found[0].code == "unknown" and "ValueError: bad thing" in found[0].cause
    assert [d.code for d in found[1:]] == ["numpy-missing"]


def test_a_restart_that_announces_its_ranks_again_is_not_a_duplicate_rank():
    attempt = ("initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/2\n"
               "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
               "ValueError: bad thing\n")
    assert "duplicate-rank" not in _codes(attempt + attempt)
    twice = ("initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/2\n"
             "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/2\n")
    assert _codes(twice) == ["duplicate-rank"]


def test_nvls_out_of_memory_is_not_the_fabric_manager():
    oom = "node1:1:2 [0] transport/nvls.cc:158 NCCL WARN Cuda failure 'out of memory'\n"
    assert "fabric-manager-fault" not in _codes(oom)
    fabric = "node1:1:2 [0] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'\n"
    assert _codes(fabric) == ["fabric-manager-fault"]


def test_a_full_disk_is_not_shm_because_the_log_mentions_dev_shm():
    text = ("cache_dir=/dev/shm/hf\n"
            "OSError: [Errno 28] No space left on device: '/ckpt/model.pt'\n")
    assert _codes(text) == ["disk-full"]
    shm = "OSError: [Errno 28] No space left on device: '/dev/shm/torch_123'\n"
    assert _codes(shm) == ["shm-too-small"]


# --- logs of any size, and files that are not logs (issue 21) ------------------------------

def _big_log(path: Path, lines_before: int, cause: list[str], lines_after: int) -> int:
    """A rank log of ordinary training lines with ``cause`` between them; the cause's first
    line number."""
    filler = "[rank1]: step {} loss 2.3125 lr 0.0001 samples/s 812.4 tokens 4096 ok\n"
    with open(path, "w") as handle:
        for n in range(lines_before):
            handle.write(filler.format(n))
        for line in cause:
            handle.write(line + "\n")
        for n in range(lines_after):
            handle.write(filler.format(lines_before + n))
    return lines_before + 1


def test_a_log_too_large_to_read_whole_is_read_in_part_and_keeps_an_early_cause(tmp_path):
    """A 40 MB log whose disk-full traceback lies in the middle (neither the head nor the
    tail read whole): found, with the file's own line number, and the note says what was
    read; the same cause near the end of a small log is found the same way."""
    from meshrun.diagnose import engine

    cause = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "train.py", line 40, in <module>',
             "[rank1]:     torch.save(state, path)",
             "[rank1]: OSError: [Errno 28] No space left on device: '/ckpt/step-300.pt'"]
    big = tmp_path / "rank1.log"
    at = _big_log(big, 150_000, cause, 150_000)
    assert big.stat().st_size > engine.WHOLE_BYTES
    found = diagnose_files([big])
    assert found and found[0].code == "disk-full", [d.code for d in found]
    assert found[0].rank == 1 and found[0].line_no == at + 3
    text = engine._read(str(big))
    assert "the lines with an error word" in text and len(text) < 4 << 20
    small = tmp_path / "small" / "rank1.log"
    small.parent.mkdir()
    at = _big_log(small, 1_000, cause, 10)
    again = diagnose_files([small])
    assert again[0].code == "disk-full" and again[0].line_no == at + 3


def test_a_fifo_or_a_device_is_refused_not_read(tmp_path):
    import os

    fifo = tmp_path / "node0.log"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(UsageError) as info:
            diagnose_files([path])
        assert info.value.code == "log-unreadable" and "not a regular file" in str(info.value)


# --- round 2 (issue 23): what users hit around launching ---------------------------------------

def test_a_bare_address_in_use_names_both_causes_and_meshrun_s_own_check_only_the_port():
    bare, = diagnose_text("[rank0]: RuntimeError: Address already in use\n")
    assert bare.code == "port-in-use" and "second node was started with node 0's rank" in \
        bare.cause
    own, = diagnose_text("meshrun: error: port 29500 on this host (node 0) is already in use "
                         "by another process; fix: pass --master-port [port-in-use]\n")
    assert own.code == "port-in-use" and "node 0's rank" not in own.cause


def test_a_shm_that_cannot_be_opened_is_not_called_too_small():
    nccl = ("node08:27106:27302 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : "
            "Permission denied\n"
            "node08:27106:27302 [0] include/shm.h:48 NCCL WARN Error while creating shared "
            "memory segment nccl-shm-recv-b79-0-3-0 (size 4460544)\n")
    assert [d.code for d in diagnose_text(nccl)] == ["shm-not-writable"]
    full = ("NCCL WARN Error while creating shared memory segment nccl-shm-recv-0 (size 9637888)\n"
            "posix_fallocate failed : No space left on device\n")
    assert diagnose_text(full)[0].code == "shm-too-small"
    plain = "PermissionError: [Errno 13] Permission denied: '/data/out.bin'\n"
    assert not any(d.code == "shm-not-writable" for d in diagnose_text(plain))


def test_a_traceback_cut_before_its_error_line_is_an_unknown_with_its_last_frame():
    cut = ("step 10 loss 0.31\n"
           "Traceback (most recent call last):\n"
           '  File "train.py", line 40, in <module>\n'
           "    main()\n"
           '  File "train.py", line 33, in main\n'
           "    loss.backward()\n")
    d, = diagnose_text(cut)
    assert d.code == "unknown" and "stops before its error line" in d.cause
    assert 'line 33, in main' in d.cause
    whole = cut + "RuntimeError: boom\n"
    d, = diagnose_text(whole)
    assert d.code == "unknown" and d.cause.endswith("RuntimeError: boom")


def test_a_path_the_job_cannot_write_is_named_but_not_a_device_nor_a_warning():
    """path-not-writable: a script's output folder it may not create; a device node, /proc or
    /sys have causes of their own, and a library's warning is advice only."""
    from meshrun.diagnose import diagnose_text

    def first(text: str) -> tuple[str, str]:
        found = diagnose_text(text, name="x.log")
        return (found[0].code, found[0].cause) if found else ("-", "")

    code, cause = first("PermissionError: [Errno 13] Permission denied: '/data'\n")
    assert code == "path-not-writable" and "may not create or write /data" in cause
    assert first("PermissionError: [Errno 13] Permission denied: '/dev/nvidia0'\n")[0] != \
        "path-not-writable"
    assert first("OSError: [Errno 30] Read-only file system: '/sys/fs/x'\n")[0] != \
        "path-not-writable"
    assert first("UserWarning: cache: PermissionError: [Errno 13] Permission denied: "
                 "'/home/u/.cache'\nRuntimeError: CUDA error: device-side assert triggered\n"
                 )[0] == "cuda-device-assert"


def test_two_nccl_versions_in_one_job_are_named_and_one_version_is_not():
    mixed = ("node-a:12:12 [0] NCCL INFO NCCL version 2.19.3+cuda12.2\n"
             "node-b:40:40 [0] NCCL INFO NCCL version 2.20.5+cuda12.4\n"
             "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, "
             "internal error - please report this issue to the NCCL developers, NCCL version "
             "2.19.3\nncclInternalError: Internal check failed.\n")
    found = diagnose_text(mixed, name="rank1.log")
    assert found[0].code == "nccl-version-differs", [d.code for d in found]
    assert "NCCL 2.19.3 and 2.20.5" in found[0].cause
    same = mixed.replace("2.20.5+cuda12.4", "2.19.3+cuda12.2")
    assert all(d.code != "nccl-version-differs" for d in diagnose_text(same, name="rank1.log"))
    # torch before 1.12 printed NCCL 2.10.3 as "21.0.3": one version, not two
    old = ("node-a:1:1 [0] NCCL INFO NCCL version 2.10.3+cuda11.3\n"
           "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:47, unhandled system error, "
           "NCCL version 21.0.3\n")
    assert all(d.code != "nccl-version-differs" for d in diagnose_text(old, name="rank0.log"))
    # the bootstrap's "family 0" names both of its causes
    family = ("ncclSocketInit: connecting to address  with family 0 is neither AF_INET(2) nor "
              "AF_INET6(10)\n")
    first = diagnose_text(family, name="rank0.log")[0]
    assert first.code == "nccl-interface-not-found" and "different NCCL versions" in first.cause


def test_two_nodes_logs_with_different_nccl_versions_are_compared_across_files(tmp_path):
    """meshrun writes one log per rank and node: the versions are compared across every file
    diagnosed together, not within one."""
    (tmp_path / "rank0.log").write_text(
        "gpu-a:7:7 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n"
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, internal "
        "error - please report this issue to the NCCL developers, NCCL version 2.19.3\n")
    (tmp_path / "rank8.log").write_text("gpu-b:9:9 [0] NCCL INFO NCCL version 2.20.5+cuda12.4\n")
    found = diagnose_files([tmp_path / "rank0.log", tmp_path / "rank8.log"])
    assert found[0].code == "nccl-version-differs", [d.code for d in found]
    assert "2.19.3 and 2.20.5" in found[0].cause
    alone = diagnose_files([tmp_path / "rank0.log"])
    assert all(d.code != "nccl-version-differs" for d in alone)


def test_checkpoint_races_bf16_and_ib_patterns_fire_only_where_they_mean_it():
    race, = diagnose_text("OSError: [Errno 39] Directory not empty: 'runs/CKPT+2024-01-01'\n")
    assert race.code == "checkpoint-multi-rank-race"
    # a compiler's cache or a dataset's download folder is no checkpoint
    for path in ("/tmp/torchinductor_root/triton/0/abc", "~/.cache/huggingface/datasets/x.incomplete"):
        assert diagnose_text(f"OSError: [Errno 39] Directory not empty: '{path}'\n") == []
    gone = ("Deleting older checkpoint [out/checkpoint-9] due to args.save_total_limit\n"
            "FileNotFoundError: [Errno 2] No such file or directory: 'rng_state_1.pth'\n")
    assert diagnose_text(gone)[0].code == "checkpoint-multi-rank-race"
    assert not any(d.code == "checkpoint-multi-rank-race" for d in diagnose_text(
        "FileNotFoundError: [Errno 2] No such file or directory: 'rng_state_1.pth'\n"))
    bf16, = diagnose_text("ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, "
                          "using Ampere GPU with cuda>=11.0\n")
    assert bf16.code == "bf16-unsupported-gpu" and "torch older than 1.10" in bf16.cause
    ib = diagnose_text("node-1:946:988 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got "
                       "completion with error 12, opcode 1, len 0, vendor err 129\n")
    assert ib[0].code == "ib-transport-error" and "to a peer failed" in ib[0].cause


def test_the_gpu_full_before_the_job_is_judged_by_its_own_traceback():
    """cuda-alloc-failed at a first use of the GPU reads the frames above its own line: the
    same message text earlier in the log (another rank's, mid-training) does not decide it."""
    text = ('[rank1]: Traceback (most recent call last):\n'
            '[rank1]:   File "train.py", line 50, in <module>\n'
            '[rank1]:     loss.backward()\n'
            '[rank1]: RuntimeError: CUDA error: out of memory\n'
            '[rank0]: Traceback (most recent call last):\n'
            '[rank0]:   File "train.py", line 10, in <module>\n'
            '[rank0]:     model.cuda()\n'
            '[rank0]:   File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", '
            'line 905, in _apply\n'
            '[rank0]: RuntimeError: CUDA error: out of memory\n')
    found = diagnose_text(text, name="x.log")
    assert (found[0].code, found[0].rank) == ("cuda-alloc-failed", 0)
    assert "first use of the GPU" in found[0].cause and found[0].names_cause
    rank1 = [d for d in found if d.rank == 1]
    assert rank1 and not any("first use" in d.cause or d.names_cause for d in rank1)
    # the other order: rank 0's first use above does not decide rank 1's mid-training error
    lines = text.splitlines(keepends=True)
    swapped = diagnose_text("".join(lines[4:] + lines[:4]), name="x.log")
    rank1 = [d for d in swapped if d.rank == 1]
    assert rank1 and not any("first use" in d.cause for d in rank1)


def test_the_tenth_rounds_codes_fire_where_they_mean_it():
    """launcher-not-found: a launcher or python missing from the job step's PATH (slurmstepd,
    the shell), not any 'not found'; ninja-missing: Debian's other `ninja` only in a log that
    builds an extension; script-crlf: an argument (`--flag`, `key=value`) run as a command."""
    def first(text: str) -> str:
        found = diagnose_text(text, name="x.log")
        return found[0].code if found else "-"

    assert first("slurmstepd: error: execve(): torchrun: No such file or directory\n") == \
        "launcher-not-found"
    assert first("run.sh: line 3: torchrun: command not found\n") == "launcher-not-found"
    assert first("bash: line 1: nvidia-smi: command not found\n") != "launcher-not-found"
    assert first("Using /root/.cache/torch_extensions/py311_cu121 as PyTorch extensions root...\n"
                 "die: error: must run as root\n") == "ninja-missing"
    assert first("die: error: must run as root\n") != "ninja-missing"
    assert first("scripts/train.sh:line 15: data.max_length=2048: command not found\n") == \
        "script-crlf"
    assert first("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is "
                 "running collective: CollectiveFingerPrint(OpType=BROADCAST)\n") == \
        "collective-mismatch"
    shapes = diagnose_text(
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running "
        "collective: CollectiveFingerPrint(SequenceNumber=12, OpType=ALLGATHER, "
        "TensorShape=[7, 64]), but Rank 0 is running collective: CollectiveFingerPrint("
        "SequenceNumber=12, OpType=ALLGATHER, TensorShape=[1, 64]).Collectives differ in the "
        "following aspects: \t Tensor shapes: [7, 64]vs [1, 64]\n", name="x.log")[0]
    assert shapes.code == "collective-mismatch" and "same collective" in shapes.cause
    ops = diagnose_text(
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running "
        "collective: CollectiveFingerPrint(SequenceNumber=5, OpType=BROADCAST), but Rank 1 is "
        "running collective: CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE)."
        "Collectives differ in the following aspects: \t Op type: BROADCASTvs ALLREDUCE\n",
        name="x.log")[0]
    assert "path differs between ranks" in ops.cause


def test_a_missing_folder_is_a_checkpoint_cause_only_inside_torch_save():
    """checkpoint-unwritable from an older torch's `FileNotFoundError` only when the frames just
    above it are torch.save's (Signature.near); the same error reading a dataset is not."""
    saving = ('Traceback (most recent call last):\n'
              '  File "main.py", line 170, in <module>\n'
              "    torch.save(model.state_dict(), 'models/a.pth')\n"
              '  File "/opt/lib/python3.7/site-packages/torch/serialization.py", line 369, '
              'in save\n'
              "    with _open_file_like(f, 'wb') as opened_file:\n"
              "FileNotFoundError: [Errno 2] No such file or directory: 'models/a.pth'\n")
    found = diagnose_text(saving, name="x.log")
    assert found[0].code == "checkpoint-unwritable" and "models/a.pth" in found[0].cause
    reading = ('Traceback (most recent call last):\n'
               '  File "main.py", line 20, in <module>\n'
               "    data = open('data/train.csv')\n"
               "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'\n")
    assert all(d.code != "checkpoint-unwritable" for d in diagnose_text(reading, name="x.log"))
    loading = ('Traceback (most recent call last):\n'
               '  File "main.py", line 20, in <module>\n'
               "    state = torch.load('ckpt/last.pth')\n"
               '  File "/opt/lib/python3.11/site-packages/torch/serialization.py", line 1479, '
               'in load\n'
               '  File "/opt/lib/python3.11/site-packages/torch/serialization.py", line 759, '
               'in _open_file_like\n'
               "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/last.pth'\n")
    assert all(d.code != "checkpoint-unwritable" for d in diagnose_text(loading, name="x.log"))


def test_the_eleventh_rounds_codes():
    def first(text: str) -> str:
        found = diagnose_text(text, name="x.log")
        return found[0].code if found else "-"

    assert first("RuntimeError: Expected to mark a variable ready only once. This error is "
                 "caused by one of the following reasons\n") == "ddp-reentrant-checkpoint"
    assert first("ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` "
                 "or with passing a `device_map`.\n") == "zero3-with-device-map"
    assert first("command torchrun not found\n") == "launcher-not-found"
    assert first(": not foundpts/COCO_test.sh: 2: ./data/scripts/COCO_test.sh:\n") == \
        "script-crlf"
    # the same read from a file: the '\r' splits the line
    assert first("./data/scripts/COCO_test.sh: 2: ./data/scripts/COCO_test.sh: \r: not found\n"
                 ) == "script-crlf"
    assert first("Error: not found\n: not found\n") != "script-crlf"
    assert first("zsh: command not found: torchrun\n") == "launcher-not-found"
    assert first("/opt/venv/bin/python: not found\n") != "launcher-not-found"
    assert first("ValueError: DeepSpeed Zero-3 is not compatible with passing a `device_map`.\n"
                 ) == "zero3-with-device-map"


def test_the_twelfth_rounds_codes():
    def first(text: str) -> tuple[str, str]:
        found = diagnose_text(text, name="x.log")
        return (found[0].code, found[0].cause) if found else ("-", "")

    code, cause = first("deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being "
                        "loaded used a DP world size of 4 but the current world size is 6.\n")
    assert code == "zero-checkpoint-world-size" and "saved by 4" in cause and "by 6" in cause
    assert first("misc/ibvwrap.cc:288 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error "
                 "Operation not supported\n")[0] == "ib-dmabuf-unsupported"
    assert first("  File \"/x/torch/utils/cpp_extension.py\", line 873, in "
                 "verify_ninja_availability\nFileNotFoundError: [Errno 2] No such file or "
                 "directory: 'ninja'\n")[0] == "ninja-missing"


def test_the_thirteenth_to_fifteenth_rounds_codes_stay_off_ordinary_logs():
    """Each of this round's codes on its own message, and on the look-alikes a read-through
    of them found (a network hang at the first collective, torch.load's pickling, DeepSpeed's
    GPU optimizer, a QOS limit, git's ssh, HF's Trainer): named right, or not named at all."""
    def first(text: str) -> tuple[str, str]:
        found = diagnose_text(text, name="x.log")
        return (found[0].code, found[0].cause) if found else ("-", "")

    def timeout(rank: int, seq: int) -> str:
        return (f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum="
                f"{seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
                "1800100 milliseconds before timing out.\n")

    assert first(timeout(1, 3))[0] == "pg-timeout-too-short"
    assert first(timeout(0, 1) + timeout(1, 1))[0] == "nccl-watchdog-timeout"   # set-up: a hang
    opt = ("deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with "
           "a client provided optimizer (<class '{}'>) which in most cases will yield poor "
           "performance.\n")
    assert "later release" in first(opt.format("deepspeed.ops.lion.cpu_lion.DeepSpeedCPULion"))[1]
    fused = first(opt.format("deepspeed.ops.adam.fused_adam.FusedAdam"))
    assert fused[0] == "zero-offload-client-optimizer" and "refuses an optimizer" in fused[1]
    assert first("sbatch: error: Batch job submission failed: Requested node configuration is "
                 "not available\n")[0] == "slurm-submit-rejected"
    assert first("sbatch: error: Batch job submission failed: Job violates accounting/QOS "
                 "policy (job submit limit, user's size and/or time limits)\n")[0] == "-"
    assert first("Traceback (most recent call last):\n  File \"predict.py\", line 3, in "
                 "<module>\nAttributeError: Can't get attribute 'Net' on <module '__main__' "
                 "from 'predict.py'>\n")[0] != "unpicklable-under-spawn"
    assert first("ssh: Could not resolve hostname github.com: Temporary failure in name "
                 "resolution\nfatal: Could not read from remote repository.\n")[0] == "-"
    assert first("Using hostfile at /job/hostfile\nssh: Could not resolve hostname node-0: "
                 "Name or service not known\n")[0] == "host-unresolvable"
    assert first("TypeError: __init__() got an unexpected keyword argument "
                 "'resume_from_checkpoint'\n")[0] == "-"
    gpus = first("TypeError: Trainer.__init__() got an unexpected keyword argument 'gpus'\n")
    assert gpus[0] == "lightning-removed-argument" and "Lightning 2.0" in gpus[1]
    assert first("AttributeError: module 'torch.distributed' has no attribute "
                 "'init_process_group'\n")[0] == "torch-no-distributed"
    assert first("AttributeError: partially initialized module 'torch' has no attribute "
                 "'zeros' (most likely due to a circular import)\n")[0] == "-"
    assert first("RuntimeError: context has already been set\n")[0] == "start-method-already-set"
    assert first("RuntimeError: The server socket has failed to listen on any local network "
                 "address. port: 443, useIpv6: false, code: -13, name: EACCES, message: "
                 "permission denied\n")[0] == "port-privileged"
    assert first("RuntimeError: The server socket has failed to listen on any local network "
                 "address. port: 4430, useIpv6: false, code: -13, name: EACCES, message: "
                 "permission denied\n")[0] != "port-privileged"
    too_old = first("NCCL INFO NCCL version 2.25.1+cuda12.8\nNCCL INFO ncclMaxSharedMem 82240 "
                    "exceeds device/fn maxSharedMem 79856\n")
    assert too_old[0] == "nccl-too-old-for-gpu" and "this is NCCL 2.25.1+cuda12.8" in too_old[1]


#: (a log, whether diagnose's first code must be CODE or must not be, CODE ('-': none))
LOOK_ALIKES = [
    # other wordings of known causes, and the lines they must leave alone: a dtype mismatch
    # between two CUDA tensors, a store's name lookup (not a download's), a segfault reported
    # by torch.multiprocessing, a pickle's end outside torch.load (a spawned worker's pipe),
    # ENOENT without a semaphore, CUDA's error 3 without a fork (and under one)
    ('RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) '
     'should be the same\n',
     True, 'device-mismatch'),
    ('RuntimeError: Input type (torch.cuda.HalfTensor) and weight type '
     '(torch.cuda.FloatTensor) should be the same\n',
     True, '-'),
    ('  File "/usr/lib/python3.10/http/client.py", line 941, in connect\n  File '
     '"/usr/lib/python3.10/socket.py", line 955, in getaddrinfo\nsocket.gaierror: [Errno -2] '
     'Name or service not known\n',
     True, 'network-download-failed'),
    ('  File "/opt/torch/distributed/rendezvous.py", line 185, in _create_c10d_store\n  File '
     '"/usr/lib/python3.10/socket.py", line 955, in getaddrinfo\nsocket.gaierror: [Errno -2] '
     'Name or service not known\n',
     True, 'master-dns-failure'),
    ('torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal '
     'SIGSEGV\n',
     True, 'segfault'),
    ('torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal '
     'SIGKILL\n',
     True, 'host-oom-killed'),
    ('RuntimeError: CUDA error: unspecified launch failure\n',
     True, 'cuda-illegal-memory-access'),
    ("ModuleNotFoundError: No module named 'torch._C'\n",
     True, 'torch-shadowed'),
    ("ModuleNotFoundError: No module named 'torch._six'\n",
     True, 'library-too-old-for-torch'),
    ('ImportError: /env/lib/python3.10/site-packages/torch/lib/libtorch_cpu.so: undefined '
     'symbol: iJIT_NotifyEvent\n',
     True, 'mkl-too-new-for-torch'),
    ('ImportError: /env/lib/python3.10/site-packages/ext/_C.so: undefined symbol: '
     '_ZN3c104cuda9SetDeviceEi\n',
     True, 'torch-abi-mismatch'),
    ('RuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n',
     True, 'multinomial-invalid-probabilities'),
    ('  File "C:\\Python310\\lib\\multiprocessing\\spawn.py", line 126, in _main\n    self = '
     'reduction.pickle.load(from_parent)\nEOFError: Ran out of input\n',
     False, 'checkpoint-truncated'),
    ('Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
     'FileNotFoundError: [Errno 2] No such file or directory\n',
     False, 'shm-not-writable'),
    ('RuntimeError: CUDA error: initialization error\n',
     False, 'cuda-fork-reinit'),
    ('  File "/opt/torch/utils/data/_utils/worker.py", line 287, in _worker_loop\n'
     'RuntimeError: CUDA error: initialization error\n',
     True, 'cuda-fork-reinit'),
    # the sixteenth set's codes: stale flags (not the launcher's --local-rank), DDP's device
    # ids for a CPU model (not a model over two GPUs)
    ('train.py: error: unrecognized arguments: --ground_truths_key x\n',
     True, 'script-arguments-unknown'),
    ('train.py: error: unrecognized arguments: --local-rank=0\n',
     True, 'local-rank-argument'),
    ('ValueError: DistributedDataParallel device_ids and output_device arguments only work '
     'with single-device/multiple-device GPU modules or CPU modules, but got device_ids '
     "[None], output_device None, and module parameters {device(type='cpu')}.\n",
     True, 'ddp-model-on-cpu'),
    ('ValueError: DistributedDataParallel device_ids and output_device arguments only work '
     'with single-device/multiple-device GPU modules or CPU modules, but got device_ids [0], '
     "output_device 0, and module parameters {device(type='cuda', index=0), "
     "device(type='cuda', index=1)}.\n",
     True, 'device-map-auto-with-ddp'),
    # the first read-through's look-alikes: SLURM's note on a finished job, CUDA's error 3
    # under torchrun (no fork), a notebook's own arguments, torch's own DLL on Windows, an
    # operator a CUDA build lacks, a display card's warning beside the real error, a job
    # ended by its time limit
    ('slurmstepd: error: Exceeded job memory limit at some point.\n',
     True, '-'),
    ('E0302 14:01:31.120000 2281 torch/distributed/elastic/multiprocessing/api.py:869] failed '
     '(exitcode: 1) local_rank: 1\n[rank1]: RuntimeError: CUDA error: initialization error\n',
     False, 'cuda-fork-reinit'),
    ('ipykernel_launcher.py: error: unrecognized arguments: -f '
     '/root/.local/share/jupyter/runtime/kernel-3f2a.json\n',
     False, 'script-arguments-unknown'),
    ('OSError: [WinError 127] The specified procedure could not be found. Error loading '
     '"C:\\venv\\Lib\\site-packages\\torch\\lib\\torch_python.dll" or one of its '
     'dependencies.\n',
     False, 'torch-abi-mismatch'),
    ("NotImplementedError: Could not run 'aten::slow_conv3d_forward' with arguments from the "
     "'CUDA' backend.\n",
     False, 'cuda-on-cpu-torch'),
    ('    Found GPU1 NVIDIA GeForce GT 710 which is of cuda capability 3.5.\n    PyTorch no '
     'longer supports this GPU because it is too old.\ntorch.OutOfMemoryError: CUDA out of '
     'memory. Tried to allocate 2.00 GiB.\n',
     True, 'cuda-oom'),
    ('slurmstepd: error: *** JOB 4412873 ON gpu-a07 CANCELLED AT 2024-06-02T14:00:12 DUE TO '
     'TIME LIMIT ***\n/var/spool/slurmd/job4412873/slurm_script: line 24: 181233 Killed        '
     '          python train.py\n',
     True, 'job-time-limit'),
    # the rarer causes' wordings: a spawned child's '__mp_main__' (no frames needed), but a
    # pickling error of __main__ needs its frames; another scheduler's time limit
    ("AttributeError: Can't get attribute 'worker' on <module '__mp_main__' from 'train.py'>\n",
     True, 'unpicklable-under-spawn'),
    ("_pickle.PicklingError: Can't pickle <function f at 0x7f00>: attribute lookup f on "
     '__main__ failed\n',
     True, '-'),
    ('=>> PBS: job killed: walltime 259217 exceeded limit 259200\n',
     True, 'job-time-limit'),
    # the second read-through's look-alikes: UCX's memlock note on a job that runs on
    # (advice), torch < 1.9's missing torch.distributed.run, ssh's 255 after hours of
    # training (and DeepSpeed's probe), a loader unpickling another script's __main__ class,
    # torch 2.4's warning at a normal end, a folder named like a launcher
    ('[1669:0:1669] ib_iface.c:988 UCX ERROR ibv_create_cq() failed: Cannot allocate memory. '
     "Please set max locked memory (ulimit -l) to 'unlimited'\nTraceback (most recent call "
     'last):\n  File "train.py", line 40, in <module>\nKeyError: \'input_ids\'\n',
     False, 'ib-memlock-too-low'),
    ('/usr/bin/python: No module named torch.distributed.run\n',
     False, 'torch-missing'),
    ("subprocess.CalledProcessError: Command 'ssh -o ServerAliveInterval=30 node2 python "
     "train.py' returned non-zero exit status 255.\n",
     False, 'ssh-unreachable'),
    ("subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no node2 hostname' "
     'returned non-zero exit status 255.\n',
     True, 'ssh-unreachable'),
    ('  File "/opt/torch/serialization.py", line 1040, in load\nAttributeError: Can\'t get '
     "attribute 'Net' on <module '__mp_main__' from 'eval.py'>\n",
     False, 'unpicklable-under-spawn'),
    ('[W729 10:15:17.529 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=76): '
     'Connection reset by peer\n',
     True, '-'),
    ("FileNotFoundError: [Errno 2] No such file or directory: 'deepspeed'\n",
     False, 'launcher-not-found'),
    # the seventeenth set's wordings, read after its figure: torch 1.0's tensor types (not a
    # dtype's), a check's 'must be on the same device but got ... on'
    ('RuntimeError: Expected object of type torch.cuda.LongTensor but found type '
     "torch.LongTensor for argument #3 'index'\n",
     True, 'device-mismatch'),
    ('RuntimeError: Expected object of type torch.cuda.FloatTensor but found type '
     "torch.cuda.LongTensor for argument #2 'other'\n",
     True, '-'),
    ('RuntimeError: stft input and window must be on the same device but got self on cuda:1 '
     'and window on cuda:0\n',
     True, 'device-mismatch'),
]


@pytest.mark.parametrize("text, same, code", LOOK_ALIKES,
                         ids=[f"{i}-{'is' if same else 'not'}-{code}"
                              for i, (_, same, code) in enumerate(LOOK_ALIKES)])
def test_other_wordings_of_known_causes_and_their_look_alikes(text, same, code):
    """The wordings set's patterns (tests/corpus/wordings/) on their messages, and on the
    look-alikes that mean something else (the read-throughs' logs, in real threads' words)."""
    found = diagnose_text(text, name="x.log")
    first = found[0].code if found else "-"
    assert (first == code) if same else (first != code), (first, text)


def test_an_older_numpy_than_the_build_says_so():
    api = ("RuntimeError: Failed to initialize NumPy: module compiled against API version {} "
           "but this version of numpy is {}\n")
    too_old = diagnose_text(api.format("0x10", "0xf"), name="x.log")[0]
    assert too_old.code == "numpy-too-old-for-torch" and "older than" in too_old.cause
