#!/usr/bin/env bash
# Install everything the test suite needs, then run all of it.
#
#   ./scripts/test.sh            # the whole suite (what CI runs)
#   ./scripts/test.sh -m "not slow"   # extra arguments go to pytest
#
# As root on Debian/Ubuntu it installs SLURM, munge, Open MPI, iproute2 and a headless
# Chromium from the distribution (for the real two-node SLURM cluster, mpirun,
# network-namespace tests, and the run page in a browser);
# elsewhere those tests are skipped with the reason, unless CI=true, where they fail.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  need=()
  command -v sbatch >/dev/null 2>&1 || need+=(slurm-wlm)
  command -v munged >/dev/null 2>&1 || need+=(munge)
  command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  # the run page (meshrun report --html) is checked in a real headless browser
  command -v chromium-headless-shell >/dev/null 2>&1 || need+=(chromium-headless-shell)
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]} ..."
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

PY=${PYTHON:-python3}
# torch pinned first (an unpinned torch would pull several GB of CUDA wheels). On the
# project's machines the pin resolves to a local CPU build; on stock PyPI (Linux x86_64) it
# is the CUDA build: there, install the CPU build first from
# https://download.pytorch.org/whl/cpu (README, Quick start).
#
# Bytecode: pip compiles every module it installs (torch and the test extras: 32 of the
# 64 CPU-s of these two installs here), though the suite imports a fraction of them; the
# suite's processes instead write the bytecode of what they import, once, as they import
# it (PYTHONDONTWRITEBYTECODE, set on the project's machines, is lifted for the suite only:
# with it, nothing was ever cached and every agent and worker compiled meshrun's modules
# again). meshrun's own modules are compiled up front, as a regular install does.
"$PY" -m pip install -q --disable-pip-version-check --no-compile "torch==2.13.0"
"$PY" -m pip install -q --disable-pip-version-check --no-compile -e '.[test]'
"$PY" -m compileall -q src/meshrun >/dev/null
unset PYTHONDONTWRITEBYTECODE
# DeepSpeed ships only an sdist whose setup.py imports torch: build it against the torch
# above (an isolated build would pull a CUDA torch), without its CUDA ops. Its own config
# class checks `meshrun render deepspeed`.
python_has() { "$PY" -c "import $1" >/dev/null 2>&1; }
if ! python_has deepspeed; then
  "$PY" -m pip install -q --disable-pip-version-check setuptools wheel
  DS_BUILD_OPS=0 "$PY" -m pip install -q --disable-pip-version-check --no-compile --no-build-isolation \
    "deepspeed>=0.17"
fi
# The suite mostly waits (node agents, timeouts, a 5-minute soak): 5 workers overlap the
# waits on 2 cores (the soak holds one for its 300 s; the rest share four); tests that share
# a host resource are one xdist group each, run in the order tests/conftest.py gives
# (docs/testing.md). MESHRUN_TEST_WORKERS=0 runs it serially.
workers=${MESHRUN_TEST_WORKERS:-5}
if [ "$workers" = 0 ]; then
  exec "$PY" -m pytest -q "$@"
fi
# pytest rewrites every test module's asserts as it imports it and caches the result as
# bytecode: one collection first writes it (while CI's demo still runs: not behind its
# gate), so the workers and the controller read it (3.2 s) instead of each rewriting all
# of them at once (7.5 CPU-s apiece).
env -u MESHRUN_TEST_START_AFTER "$PY" -m pytest --collect-only -q -p no:cacheprovider \
  >/dev/null 2>&1 || true
exec "$PY" -m pytest -q -n "$workers" --dist loadgroup --no-loadscope-reorder "$@"
