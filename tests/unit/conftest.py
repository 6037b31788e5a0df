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
