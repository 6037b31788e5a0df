"""The worker's `import torch` runs with the collector paused, then freezes what exists
(meshrun/worker/frozen.py), and changes nothing else the script sees."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from meshrun.harness import clean_env

# A package whose import makes reference cycles, some of them garbage, and reads a variable
# the script set before importing it.
PACKAGE = """
import gc, os
SEEN = os.environ.get("SET_BY_SCRIPT")
GC_ON_DURING_IMPORT = gc.isenabled()
class Node:
    def __init__(self):
        self.me = self
KEPT = [Node() for _ in range(1000)]
for _ in range(1000):
    Node()  # garbage: a cycle nobody holds
import weakref
GARBAGE = weakref.ref(Node())  # one more, watched: collected before the freeze
"""


def _run(tmp_path, script: str, *, shim: bool = False, env: dict | None = None) -> str:
    (tmp_path / "heavypkg").mkdir(exist_ok=True)
    (tmp_path / "heavypkg" / "__init__.py").write_text(PACKAGE)
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    if shim:
        command = [sys.executable, "-m", "meshrun.worker.bootstrap", "--", str(path)]
    else:
        command = [sys.executable, str(path)]
    done = subprocess.run(command, env={**clean_env(), **(env or {})}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_import_runs_without_the_collector_then_freezes_and_leaves_no_trace(tmp_path):
    out = _run(tmp_path, """
        import gc, importlib.util, os, sys
        from meshrun.worker import frozen
        frozen.install("heavypkg")
        assert importlib.util.find_spec("heavypkg") is not None  # asking imports nothing
        assert gc.get_freeze_count() == 0
        os.environ["SET_BY_SCRIPT"] = "yes"
        import heavypkg
        print(heavypkg.SEEN, heavypkg.GC_ON_DURING_IMPORT, gc.isenabled())
        print(type(heavypkg.__loader__).__name__, type(heavypkg.__spec__.loader).__name__)
        print(any(type(f).__module__ == frozen.__name__ for f in sys.meta_path))
        print(gc.get_freeze_count() >= 1000, heavypkg.GARBAGE() is None)  # kept frozen, cycles gone
        print(sum(isinstance(o, heavypkg.Node) for o in gc.get_objects()))  # ... not walked
    """)
    assert out.split("\n")[:5] == [
        "yes False True",                          # the variable counted; collector paused
        "SourceFileLoader SourceFileLoader",       # the module keeps its own loader
        "False",                                   # the finder is gone
        "True True",
        "0",
    ]


def test_a_collector_the_script_turned_off_stays_off(tmp_path):
    out = _run(tmp_path, """
        import gc
        from meshrun.worker import frozen
        gc.disable()
        frozen.install("heavypkg")
        import heavypkg
        print(gc.isenabled())
    """)
    assert out.strip() == "False"


def test_a_failing_import_restores_the_collector_and_freezes_nothing(tmp_path):
    (tmp_path / "brokenpkg").mkdir()
    (tmp_path / "brokenpkg" / "__init__.py").write_text("raise ImportError('no')\n")
    out = _run(tmp_path, """
        import gc
        from meshrun.worker import frozen
        frozen.install("brokenpkg")
        try:
            import brokenpkg
        except ImportError:
            pass
        print(gc.isenabled(), gc.get_freeze_count())
    """)
    assert out.strip() == "True 0"


def test_the_worker_shim_freezes_torchs_objects_unless_turned_off(tmp_path):
    script = """
        import gc
        import torch
        print(gc.get_freeze_count() > 100000, gc.isenabled(), type(torch.__loader__).__name__)
    """
    assert _run(tmp_path, script, shim=True).strip() == "True True SourceFileLoader"
    for off in ("0", "off", " False "):
        unfrozen = _run(tmp_path, script, shim=True, env={"MESHRUN_GC_FREEZE": off})
        assert unfrozen.strip() == "False True SourceFileLoader", off


def test_installing_twice_or_after_the_import_does_nothing(tmp_path):
    out = _run(tmp_path, """
        import sys
        from meshrun.worker import frozen
        import json
        frozen.install("json")   # imported already
        frozen.install("heavypkg")
        frozen.install("heavypkg")
        print(sum(type(f).__module__ == frozen.__name__ for f in sys.meta_path))
    """)
    assert out.strip() == "1"


def test_meshrun_s_own_process_installs_it_unless_turned_off(tmp_path):
    """The CLI of a real meshrun process (an agent's) installs the frozen import; `meshrun plan`
    never imports torch, so the finder is still waiting there when the verb returns."""
    script = """
        import contextlib, io, sys
        sys.argv = ["meshrun", "plan", "--json"]
        from meshrun.cli import _main
        with contextlib.redirect_stdout(io.StringIO()):
            _main(None)
        from meshrun.worker import frozen
        print(any(type(f).__module__ == frozen.__name__ for f in sys.meta_path),
              "torch" in sys.modules)
    """
    assert _run(tmp_path, script).strip() == "True False"
    assert _run(tmp_path, script, env={"MESHRUN_GC_FREEZE": "0"}).strip() == "False False"
