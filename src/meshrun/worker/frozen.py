"""``import torch`` without Python's garbage collector walking torch's half a million objects.

Importing torch creates about 500,000 objects the cyclic garbage collector tracks, and while
it does, the collector runs its full collections again and again, each walking every one
made so far: a fifth of the import's CPU time (1.44 -> 1.17 CPU-s here), and more in every
later full collection, such as the ones of torch's lazy ``import torch._dynamo`` at the
first ``optimizer.zero_grad()`` (with it 2.83 -> 2.26 CPU-s; bench/import_freeze.py). :func:`install` makes the next
``import torch`` of this process run with the collector paused, then collect once and move
what is left (torch's modules, functions and types, alive for the process's life) to the
collector's permanent generation (:func:`gc.freeze`), and resume it as it was.

The import itself is untouched: it happens when and where the script imports torch, so
whatever the script sets before (``OMP_NUM_THREADS``, ``CUDA_VISIBLE_DEVICES``) counts as
under ``python``. What differs: objects alive at that moment are no longer walked by the
collector (reference counting still frees them as usual; a reference cycle among them made
before ``import torch`` is never collected), and a worker's DataLoader processes forked
later copy fewer pages. Every meshrun worker (the bootstrap shim) and every meshrun agent
does it; ``MESHRUN_GC_FREEZE=0`` turns it off (for the agents and the workers).
"""

from __future__ import annotations

import gc
import importlib.abc
import sys
import threading

OFF = "MESHRUN_GC_FREEZE"


def enabled(env) -> bool:
    """False when ``MESHRUN_GC_FREEZE`` says off (0, false, off, no)."""
    return env.get(OFF, "").strip().lower() not in ("0", "false", "off", "no")


def install(name: str = "torch") -> None:
    """Pause the collector during the next import of ``name`` (a top-level package), then
    freeze what exists. Nothing happens if it is imported already, or if a finder of this
    module waits already (for any name: one a process)."""
    if name in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder(name))


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the other finders for ``name``'s spec and wraps its
    loader; leaves ``sys.meta_path`` when that loader runs (a ``find_spec`` that only asks,
    as ``importlib.util.find_spec`` does, changes nothing)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asking = threading.local()

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or getattr(self.asking, "now", False):
            return None  # another name, or a finder after this one asking again
        finders = list(sys.meta_path)
        after = finders[finders.index(self) + 1:] if self in finders else finders
        spec = None
        self.asking.now = True
        try:
            for finder in after:  # the finders after this one, in their order
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if find is not None else None
                if spec is not None:
                    break
        finally:
            self.asking.now = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, finder: _Finder) -> None:
        self.loader = loader
        self.finder = finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        # The module keeps its own loader, as if this one had never been.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        enabled = gc.isenabled()
        gc.disable()
        try:
            self.loader.exec_module(module)
            gc.collect()
            gc.freeze()
        finally:
            if enabled:
                gc.enable()

    def __getattr__(self, attr):
        return getattr(self.loader, attr)
