"""Fixtures for the unit tests: folders holding stand-in nvidia-smi scripts."""

from __future__ import annotations

import pytest
from unit_fakes import FAILING_SCRIPT, GARBAGE_SCRIPT, GPU_CSV_SCRIPT, write_nvidia_smi


@pytest.fixture(scope="session")
def gpu_bin(tmp_path_factory):
    """A PATH folder whose nvidia-smi lists 8 H100s."""
    return write_nvidia_smi(tmp_path_factory.mktemp("gpu-bin"), GPU_CSV_SCRIPT)


@pytest.fixture(scope="session")
def failing_bin(tmp_path_factory):
    """A PATH folder whose nvidia-smi fails like a host without a working driver (exit 9)."""
    return write_nvidia_smi(tmp_path_factory.mktemp("failing-bin"), FAILING_SCRIPT)


@pytest.fixture(scope="session")
def garbage_bin(tmp_path_factory):
    """A PATH folder whose nvidia-smi prints something that is not the CSV asked for."""
    return write_nvidia_smi(tmp_path_factory.mktemp("garbage-bin"), GARBAGE_SCRIPT)


@pytest.fixture(scope="session")
def empty_bin(tmp_path_factory):
    """A PATH folder without nvidia-smi: a CPU host."""
    return tmp_path_factory.mktemp("empty-bin")


@pytest.fixture(autouse=True)
def no_store_thread_left():
    """A test must close every BoundedStore it opens: a serving thread left alive makes a
    later test's ``meshrun`` CLI call exit the whole pytest process (``_exit_if_stuck``)."""
    import threading
    import time

    yield
    end = time.monotonic() + 3.0
    while True:
        left = [t.name for t in threading.enumerate()
                if t.is_alive() and t.name == "meshrun-store-calls"]
        if not left or time.monotonic() > end:
            break
        time.sleep(0.05)
    assert not left, f"{len(left)} store-call thread(s) left running by this test"


@pytest.fixture
def neutral_here(monkeypatch, tmp_path):
    """This process on a machine no platform detector recognises (only the variables
    meshrun.harness.clean_env keeps), working in an empty folder, which it returns: for
    tests that call the CLI in-process (meshrun.cli._main)."""
    import os

    from meshrun.harness import clean_env

    keep = clean_env()
    for name in list(os.environ):
        if name not in keep:
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path
