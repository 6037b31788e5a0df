"""Host resources the integration tests share, each brought up once per session.

- ``slurm_cluster``: the real two-node SLURM cluster of tests/cluster/slurm_up.sh (slurmctld
  + two slurmd on this host, under /tmp/meshrun-slurm); the environment to submit with.
- ``two_hosts``: the network namespaces h1 and h2 of tests/cluster/mpi_two_hosts.sh; the
  script's path (``two_hosts exec h2 CMD``, ``two_hosts mpirun ...``).

Both are exclusive (a fixed folder, fixed namespace names): the tests that use them carry
the ``slurm`` or ``netns``/``mpi`` marker, which tests/conftest.py turns into one xdist
group each, so they run on one worker, which brings the resource up once. Without root or
the Debian packages they are skipped, except under CI=true, where that is a failure.
"""

import pytest
from helpers import ROOT, clean_env, require, sh

CLUSTER = ROOT / "tests" / "cluster"
SLURM_DIR = "/tmp/meshrun-slurm"
HOSTS = CLUSTER / "mpi_two_hosts.sh"


@pytest.fixture(scope="session")
def slurm_cluster():
    require("slurmctld", "slurmd", "munged", "sbatch",
            hint=" (apt-get install slurm-wlm munge; scripts/test.sh does)")
    sh(CLUSTER / "slurm_up.sh", SLURM_DIR)
    yield clean_env(SLURM_CONF=f"{SLURM_DIR}/etc/slurm.conf")
    sh(CLUSTER / "slurm_down.sh", SLURM_DIR, check=False, timeout=60)


@pytest.fixture(scope="session")
def two_hosts():
    require("ip", "unshare", hint=" (apt-get install iproute2 util-linux)")
    sh(HOSTS, "up")
    yield HOSTS
    sh(HOSTS, "down", check=False, timeout=60)
