"""What every verb shares: the :class:`Context` it runs in (its parsed options, the worker
command, the environment the CLI read once) and the small :class:`Verb` base each verb
module subclasses (``cli/<verb>.py``: its options and what it does)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import UsageError
from ..plan import Command


@dataclass
class Context:
    """One command line, parsed: ``args`` (argparse), ``words`` (the worker command or, for
    diagnose/report, the paths), ``module`` (``-m MODULE``), ``env`` (``os.environ`` as the
    CLI read it, once; nothing below the CLI reads ``os.environ`` itself)."""

    args: argparse.Namespace
    words: list[str] | None
    module: bool
    env: Mapping[str, str]
    parser: argparse.ArgumentParser  # the verb's own parser

    def command(self) -> Command | None:
        if not self.words:
            return None
        return Command(target=self.words[0], args=tuple(self.words[1:]), module=self.module)

    def require(self, cmd: Command | None, verb: str) -> Command:
        if cmd is None:
            raise UsageError(f"'meshrun {verb}' needs the training command",
                             hint=f"meshrun {verb} [flags] -- train.py [ARGS...] "
                                  "(or -m package.module)", code="no-command")
        return cmd


class Verb:
    """A meshrun verb: ``name``, one line of ``help``, its options and its ``run``."""

    name = ""
    help = ""
    takes_paths = False  # diagnose/report: paths with options anywhere among them

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the verb's options to its parser."""

    def run(self, ctx: Context) -> int:
        """Do it; return the exit code (errors are raised as MeshrunError)."""
        raise NotImplementedError
