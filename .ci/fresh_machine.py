#!/usr/bin/env python3
"""The README's quick start, checked the way a new user meets it: empty environments.

    python3 .ci/fresh_machine.py demo     # README command 1 in an empty venv; the demo trains
    python3 .ci/fresh_machine.py wheel    # a built wheel, installed non-editable, runs a job
    python3 .ci/fresh_machine.py tests    # README command 2 in an empty venv (the whole suite)
    python3 .ci/fresh_machine.py all      # the three (what .ci/run does): the suite's install
                                          # beside the demo, then the wheel in the demo's
                                          # environment; the suite's run after them

The commands are read from README.md ("## Quick start", the first ```bash block: its
non-comment lines, exactly two), never copied here, so the README cannot drift from
what CI runs. Each runs in a virtual environment made for it (``python3 -m venv``, no
system packages) and, for the demo, in a fresh clone of this repository (the demo
leaves logs/ and checkpoints/ behind). A dependency that only the test extras bring
in (numpy once hid that way) fails the demo here.

Exit 0 when every check passed; otherwise one line says which failed and why.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEP = re.compile(r"Step (\d+)/(\d+) \| Loss: ([0-9.]+)")


def readme_commands(readme: Path = ROOT / "README.md") -> list[str]:
    """The quick start's set-up commands: the non-comment lines of its first bash block."""
    text = readme.read_text()
    section = text.split("\n## Quick start", 1)
    if len(section) != 2:
        raise SystemExit("fresh_machine: README.md has no '## Quick start' section")
    quick_start = section[1].split("\n## ", 1)[0]  # up to the next section, not beyond
    block = re.search(r"```bash\n(.*?)```", quick_start, re.S)
    if block is None:
        raise SystemExit("fresh_machine: the quick start has no ```bash block")
    commands = [line.strip() for line in block.group(1).splitlines()
                if line.strip() and not line.strip().startswith("#")]
    if len(commands) != 2:
        raise SystemExit(f"fresh_machine: the quick start must have exactly two set-up "
                         f"commands, it has {len(commands)}: {commands}")
    return commands


def venv(where: Path) -> dict[str, str]:
    """An empty virtual environment; the environment that has it first on PATH."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    # Nothing may point the commands at another interpreter or install outside the venv.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHON", "PYTHONUSERBASE",
                        "PIP_USER", "PIP_TARGET", "PIP_PREFIX", "PIP_ROOT")}
    env["VIRTUAL_ENV"] = str(where)
    env["PATH"] = f"{where / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # Nothing from this machine's own site-packages may leak in (pyenv shims, user site).
    env["PYTHONNOUSERSITE"] = "1"
    return env


def shell(command: str, env: dict[str, str], cwd: Path, log: Path, timeout: float) -> str:
    """Run ``command`` as a user would type it (bash), output to ``log`` and returned."""
    started = time.monotonic()
    with open(log, "w") as out:
        done = subprocess.run(["bash", "-c", command], env=env, cwd=cwd, stdout=out,
                              stderr=subprocess.STDOUT, timeout=timeout)
    text = log.read_text(errors="replace")
    took = time.monotonic() - started
    if done.returncode != 0:
        tail = "\n".join(text.splitlines()[-40:])
        raise SystemExit(f"{tail}\nfresh_machine: `{command}` exited with {done.returncode} "
                         f"after {took:.0f} s in an empty virtual environment (log: {log})")
    print(f"fresh_machine: `{command}` passed in {took:.0f} s", flush=True)
    return text


def losses(text: str) -> list[float]:
    return [float(m.group(3)) for m in STEP.finditer(text)]


def check_demo(work: Path) -> dict[str, str]:
    """README command 1, exactly as written, in an empty venv and a fresh clone; the
    environment it ran in."""
    first, _ = readme_commands()
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    _copy_uncommitted(clone)
    env = venv(work / "venv-demo")
    text = shell(first, env, clone, work / "demo.log", timeout=1200)
    found = losses(text)
    if len(found) < 2 or not found[-1] < found[0] / 2:
        raise SystemExit(f"fresh_machine: the demo did not train: losses {found} (log: "
                         f"{work / 'demo.log'})")
    print(f"fresh_machine: the demo trained: loss {found[0]} -> {found[-1]} "
          f"({len(found)} logged steps)", flush=True)
    return env


def check_wheel(work: Path, env: dict[str, str] | None = None) -> None:
    """A wheel built from the tree, installed non-editable, runs a job from a folder far
    from the source: entry point, package data and imports without the source tree.

    ``env``: the demo's environment, where README command 1 installed meshrun (editable)
    with its dependencies from the same pyproject.toml: the wheel replaces that install
    (``--force-reinstall --no-deps``; ``pip check`` then proves its dependencies are all
    there), which spares a third install of torch (23 CPU-s of CI's pre-phase). Without it
    (``fresh_machine.py wheel``), an empty venv of its own gets torch and the wheel."""
    dist = work / "dist"
    # built from a clone: a build writes into its source tree (build/, *.egg-info), and the
    # suite's `pip install -e .` runs in this one at the same time
    source = work / "source"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(source)], check=True)
    _copy_uncommitted(source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist),
                    str(source)], check=True, stdout=subprocess.DEVNULL)
    wheels = glob.glob(str(dist / "meshrun-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"fresh_machine: expected one meshrun wheel in {dist}, found {wheels}")
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    if env is None:
        env = venv(work / "venv-wheel")
        shell(f"pip install -q torch==2.13.0 {wheels[0]}", env, elsewhere,
              work / "wheel-install.log", timeout=900)
    else:
        shell(f"pip install -q --force-reinstall --no-deps {wheels[0]} && pip check", env,
              elsewhere, work / "wheel-install.log", timeout=900)
    where = subprocess.run(["python", "-c", "import meshrun; print(meshrun.__file__)"],
                           env=env, cwd=elsewhere, capture_output=True, text=True, check=True)
    if "site-packages" not in where.stdout or str(ROOT) in where.stdout:
        raise SystemExit(f"fresh_machine: meshrun was imported from {where.stdout.strip()}, "
                         "not from the installed wheel")
    # every module imports from the installed wheel (data files a module loads included)
    shell("python -c \"import importlib, pkgutil, meshrun; [importlib.import_module(m.name) for m "
          "in pkgutil.walk_packages(meshrun.__path__, 'meshrun.') if m.name != "
          "'meshrun.__main__']\"", env, elsewhere, work / "wheel-imports.log", timeout=300)
    text = shell("meshrun simulate --nodes 2 --nproc-per-node 1 --recipe mlp-tp --run-id wheel "
                 "--set train.steps=20 --set train.log_every=5", env, elsewhere,
                 work / "wheel-run.log", timeout=600)
    found = losses(text)
    if len(found) < 2 or not found[-1] < found[0]:
        raise SystemExit(f"fresh_machine: the wheel's job did not train: losses {found}")
    print(f"fresh_machine: the installed wheel ran a 2-node job ({where.stdout.strip()}); "
          f"loss {found[0]} -> {found[-1]}", flush=True)


def check_tests(work: Path, pytest_args: list[str]) -> None:
    """README command 2, exactly as written, in an empty venv, from this tree."""
    finish_tests(*start_tests(work, pytest_args))


def start_tests(work: Path, pytest_args: list[str],
                gate: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Start README command 2 (see :func:`check_tests`). ``gate``: the suite itself (not the
    installs before it) waits until that file exists (``MESHRUN_TEST_START_AFTER``,
    tests/conftest.py), so its timing tests never share the CPUs with the demo's jobs."""
    _, second = readme_commands()
    env = venv(work / "venv-tests")
    if gate is not None:
        env["MESHRUN_TEST_START_AFTER"] = str(gate)
    command = second + ("" if not pytest_args else " " + " ".join(pytest_args))
    print(f"fresh_machine: running `{command}` in an empty virtual environment", flush=True)
    return subprocess.Popen(["bash", "-c", command], env=env, cwd=ROOT,
                            start_new_session=True), command


def finish_tests(proc: subprocess.Popen, command: str) -> None:
    code = proc.wait()
    if code != 0:
        raise SystemExit(f"fresh_machine: `{command}` exited with {code}")


def _copy_uncommitted(clone: Path) -> None:
    """A developer's uncommitted edits travel into the clone (CI's tree has none)."""
    diff = subprocess.run(["git", "diff", "HEAD", "--binary"], cwd=ROOT, capture_output=True,
                          check=True).stdout
    if diff:
        subprocess.run(["git", "apply", "--allow-empty", "-"], cwd=clone, input=diff, check=True)
    listed = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "-z"],
                            cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        target = clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "all"
    if what not in ("demo", "wheel", "tests", "all"):
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory(prefix="meshrun-fresh-") as tmp:
        work = Path(tmp)
        for sub in ("demo", "wheel", "tests"):
            (work / sub).mkdir()
        if what == "all":
            # The suite's environment installs while the demo runs and then the wheel, in
            # the demo's environment; the suite starts only once both are over
            # (docs/testing.md). A failed check ends the suite's install at once.
            gate = work / "tests" / "start"
            tests, command = start_tests(work / "tests", argv[1:], gate=gate)
            try:
                check_wheel(work / "wheel", env=check_demo(work / "demo"))
                gate.touch()
                finish_tests(tests, command)
            except BaseException:
                if tests.poll() is None:
                    os.killpg(tests.pid, signal.SIGKILL)   # the install or pytest, all of it
                    tests.wait()
                raise
        elif what == "demo":
            check_demo(work / "demo")
        elif what == "wheel":
            check_wheel(work / "wheel")
        if what == "tests":
            check_tests(work / "tests", argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
