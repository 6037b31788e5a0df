"""The whole command line: one sub-parser per verb, in the order ``meshrun --help`` lists
them. A verb is one module of this package with a ``VERB``; add it to :data:`VERBS`."""

from __future__ import annotations

import argparse

from .. import __version__
from . import bench, diagnose, doctor, plan, render, report, run, simulate
from .base import Verb
from .options import Parser

VERBS: dict[str, Verb] = {v.name: v for v in (
    plan.VERB, run.VERB, render.VERB, doctor.VERB, diagnose.VERB, report.VERB, bench.VERB,
    simulate.VERB)}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="meshrun", description="One unchanged command on every node: detect "
                    "the platform, plan the processes, launch PyTorch's elastic agent.")
    parser.add_argument("--version", action="version", version=f"meshrun {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=Parser)
    for verb in VERBS.values():
        verb.add_arguments(sub.add_parser(verb.name, help=verb.help))
    return parser


def verb_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The sub-parser of verb ``name``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise KeyError(name)
