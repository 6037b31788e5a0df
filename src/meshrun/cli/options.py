"""The CLI's options: the flag groups verbs share, the parser that turns errors into one line,
and what is derived from the parser rather than kept by hand beside it: which options take a
value (where the worker command starts), and the argv that gives an option again (a simulated
node's ``meshrun run``, a submission file's ``meshrun run``, a regenerate line).

Flags that are also ``MESHRUN_<NAME>`` variables read them from the environment the CLI was
handed (never ``os.environ`` directly): a flag beats its variable.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from functools import lru_cache

from ..errors import UsageError
from ..topology import Flags

# --nnodes ... : read off the topology's Flags (name, help), one flag per field.
NODE_FLAGS = {Flags.flag_name(f.name): f.metadata["help"] for f in fields(Flags)}

# Flags only the platform render targets take (docs/render.md).
RENDER_FLAGS = {
    "--job-name": "job name (DNS-1123 label)",
    "--image": "container image (k8s, pytorchjob, trainjob, volcano, docker)",
    "--gpus-per-node": "GPUs each node requests (0: a CPU job)",
    "--namespace": "Kubernetes namespace",
    "--shm-size": "shared memory size, e.g. 16Gi",
    "--cpus-per-node": "CPUs each node requests",
    "--backoff-limit": "Kubernetes Job backoffLimit",
    "--partition": "SLURM partition",
    "--time": "SLURM time limit",
    "--account": "SLURM account",
    "--run-args": "extra flags for `meshrun run` on every node, as one shell-quoted string",
    "--meshrun": "how nodes start meshrun (default: meshrun)",
    "--service-account": "Kubernetes targets: the pods' service account",
}

# Repeatable ones: what a cluster asks beyond the job (meshrun.render.cluster, docs/render.md).
RENDER_LIST_FLAGS = {
    "--volume": "KIND:SOURCE:PATH[:ro], KIND pvc, host, secret or configmap (k8s family; "
                "docker: host)",
    "--node-selector": "KEY=VALUE the nodes must carry (k8s family)",
    "--toleration": "KEY[=VALUE][:EFFECT] of a taint the pods tolerate (k8s family)",
    "--image-pull-secret": "a Secret for pulling the image (k8s family)",
    "--env-from-secret": "every key of this Secret as a variable (k8s, pytorchjob, volcano)",
    "--secret-env": "VAR=SECRET:KEY, one variable from a Secret (k8s family)",
    "--patch": "a YAML file of partial objects merged into the output last (k8s family)",
    "--setup": "a shell line run before srun, e.g. 'module load cuda' (slurm)",
}

# The job config's flags, in the order they are given again to other meshrun commands.
JOB_OPTIONS = ("config", "set", "checkpoint_dir")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise UsageError(message, hint=f"see '{self.prog} --help'", code="bad-flag")


def dest_of(flag: str) -> str:
    return flag[2:].replace("-", "_")


def add_node_flags(parser: argparse.ArgumentParser,
                   only: Iterable[str] | None = None) -> None:
    group = parser.add_argument_group("node flags (each also MESHRUN_<NAME>)")
    for flag, text in NODE_FLAGS.items():
        if only is None or flag in only:
            group.add_argument(flag, dest=dest_of(flag), metavar="VALUE", help=text)


def add_watch_flags(parser: argparse.ArgumentParser) -> None:
    """``--max-restarts`` and the supervision options, as :class:`Supervision` declares
    them (one declaration each: default, help, hidden or not)."""
    from ..runtime.supervision import flag, options

    parser.add_argument("--max-restarts", metavar="N", default=None,
                        help="restart the workers after a failure up to N times (default 0)")
    for name, meta in options():
        parser.add_argument(flag(name), dest=name, default=None,
                            metavar="X" if meta["kind"] == "factor" else "SECONDS",
                            help=argparse.SUPPRESS if meta["hidden"]
                            else f"{meta['help']} (default {meta['default']:g})")


def add_token_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--token-file", metavar="PATH", default=None,
                        help="the job token, the same secret on every node (or "
                             "MESHRUN_JOB_TOKEN): every value meshrun writes to the job's "
                             "store is signed, and what is not is ignored (docs/security.md)")


def job_token(ctx_env, args: argparse.Namespace) -> str | None:
    """The job token from ``--token-file`` or MESHRUN_JOB_TOKEN (None: none); a bad one
    is a usage error (exit 2) before anything starts."""
    from ..signing import token_from

    return token_from(ctx_env, getattr(args, "token_file", None))


def add_preflight_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-preflight", action="store_true",
                        help="skip the cross-node check of code, versions, packages and devices")
    parser.add_argument("--require-path", metavar="PATH", action="append", default=[],
                        help="preflight: PATH must exist on every node (repeatable)")


def add_console_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true",
                        help="print the whole plan on the console (every value with its "
                             "source, the workers' environment, the job config, notes); by "
                             "default a short banner, and the whole plan in node<k>.log")
    parser.add_argument("--timestamps", action="store_true",
                        help="put the time (UTC, RFC 3339) before meshrun's own console lines; "
                             "node<k>.log always has it")
    parser.add_argument("--show-ranks", metavar="RANKS", default=None,
                        help="only these global ranks' output on the console (0, 0,8, 0-7); "
                             "every rank's output still goes to the logs (like torchrun's "
                             "--local-ranks-filter, by global rank)")


def shown_ranks(args: argparse.Namespace) -> tuple[tuple[int, int], ...] | None:
    """``--show-ranks`` as rank spans (None: every rank); a bad value is one line, exit 2."""
    from ..topology.base import parse_ranks

    return None if args.show_ranks is None else parse_ranks(args.show_ranks, "--show-ranks")


def add_node_check_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-check", action="store_true",
                        help="before the script, every worker runs the node check (compute, "
                             "all-reduce, transfers between nodes; a few seconds) and a slow "
                             "node is named; the job goes on (meshrun doctor --all-nodes "
                             "refuses it)")


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("job config (docs/config.md)")
    group.add_argument("--recipe", metavar="NAME",
                       help="run a built-in recipe (mlp-tp, autoencoder) instead of a script")
    group.add_argument("--config", metavar="FILE", help="the job's TOML config")
    group.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                       help="override one config value, e.g. --set train.steps=20 (repeatable)")
    group.add_argument("--accelerate", action="store_true",
                       help="give workers the ACCELERATE_* variables an accelerate / HF Trainer "
                            "script needs (docs/hf.md)")
    group.add_argument("--deepspeed", metavar="FILE",
                       help="a DeepSpeed JSON for accelerate / HF Trainer (implies --accelerate; "
                            "its batch fields are checked against the plan)")
    group.add_argument("--checkpoint-dir", metavar="DIR",
                       help="where checkpoints go (default checkpoints/<run-id>); same as "
                            "--set checkpoint.dir=DIR")


def add_bench_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", metavar="MIN:MAX", default="1K:1G",
                        help="bench: message sizes, doubling from MIN to MAX (default 1K:1G)")
    parser.add_argument("--iters", metavar="N", default="20",
                        help="bench: timed iterations per size (default 20)")


# --- derived from the parser ---------------------------------------------------------------------

def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every action of ``parser`` and of its verbs' parsers."""
    found = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _actions(sub)
    return found


@lru_cache(maxsize=1)
def value_options() -> frozenset[str]:
    """Every option string, of any verb, that takes a value (``--nnodes 2``): read off the
    parser, so a new flag cannot be forgotten here."""
    from .parser import build_parser

    return frozenset(opt for action in _actions(build_parser()) if action.nargs != 0
                     for opt in action.option_strings)


def options_argv(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 dests: Sequence[str]) -> list[str]:
    """The argv that gives the options ``dests`` of ``args`` again, as ``parser`` reads them
    (switches given, values given, repeated options once per value); in ``dests``' order."""
    by_dest = {a.dest: a for a in parser._actions if a.option_strings}
    argv: list[str] = []
    for dest in dests:
        action = by_dest[dest]
        value = getattr(args, dest, None)
        flag = action.option_strings[-1]
        if action.nargs == 0:
            if value and value != action.default:
                argv.append(flag)
        elif isinstance(value, list):
            for item in value:
                argv += [flag, str(item)]
        elif value not in (None, "") and value != action.default:
            argv += [flag, str(value)]
    return argv


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None, bool]:
    """Split ``argv`` into meshrun's options and the worker command.

    Returns (options, command, is_module). ``--`` ends the options; so does the
    first bare word (the script) or ``-m MODULE``.
    """
    argv = list(argv)
    takes_value = value_options()
    options: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return options, argv[i + 1:], False
        if token in ("-m", "--module"):
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name", hint="meshrun run -m package.train",
                                 code="bad-flag")
            return options, argv[i + 1:], True
        if token.startswith("-"):
            options.append(token)
            if token in takes_value and "=" not in token and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
            i += 1
            continue
        if not options or options == ["render"]:
            options.append(token)  # the verb itself; `render` is followed by its TARGET
            i += 1
            continue
        return options, argv[i:], False
    return options, None, False


def split_paths(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``diagnose``/``report``: (the verb and its options, the paths), options anywhere;
    after ``--`` every word is a path."""
    takes_value = value_options()
    options, paths = [argv[0]], []
    rest = iter(argv[1:])
    for token in rest:
        if token == "--":
            paths += rest
        elif token.startswith("-"):
            options.append(token)
            value = next(rest, None) if token in takes_value and "=" not in token else None
            if value is not None:
                options.append(value)
        else:
            paths.append(token)
    return options, paths


def flags_from(args: argparse.Namespace) -> Flags:
    return Flags(**{f.name: getattr(args, f.name, None) for f in fields(Flags)})


# --- flags that are also MESHRUN_* variables, read from the environment handed in -----------------

def seconds(raw: str, label: str, minimum: float, example: float | None = None) -> float:
    """A number of seconds >= ``minimum`` (2.5 is fine); one line naming ``label`` if not."""
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < minimum:
        shown = max(minimum, 15 if example is None else example)
        raise UsageError(f"{label}={raw.strip()!r} is not a number of seconds >= {minimum:g}",
                         subject=label, hint=f"give seconds, e.g. {label} {shown:g}"
                         if label.startswith("--") else f"set {label} to seconds, e.g. {shown:g}",
                         code="bad-seconds")
    return value


def flag_or_env(args: argparse.Namespace, name: str, env: Mapping[str, str]
                ) -> tuple[str | None, str]:
    """(the raw value of ``--name`` or else ``MESHRUN_NAME``, which of the two gave it); a
    blank variable is unset, as every other variable."""
    raw = getattr(args, name, None)
    if raw is not None:
        return raw, "--" + name.replace("_", "-")
    env_name = "MESHRUN_" + name.upper()
    raw = env.get(env_name)
    return (raw if raw is not None and raw.strip() else None), env_name


def supervision(args: argparse.Namespace, env: Mapping[str, str]):
    """The supervision options (:class:`meshrun.runtime.supervision.Supervision`), each from
    its flag or else its ``MESHRUN_<NAME>`` variable, checked: one line and exit 2 if not.
    ``--beat`` comes first: a node timeout must be at least two beats."""
    from ..runtime.supervision import Supervision, options

    values: dict[str, float] = {}
    for name, meta in options():
        raw, label = flag_or_env(args, name, env)
        if raw is None or not raw.strip():
            continue
        if meta["kind"] == "seconds":
            beat = values.get("beat", Supervision.beat)
            values[name] = seconds(raw, label, max(meta["minimum"],
                                                   meta["minimum_beats"] * beat),
                                   example=meta["default"] or None)
            continue
        try:
            factor = float(raw.strip())
        except ValueError:
            factor = math.nan
        if not math.isfinite(factor) or factor <= meta["minimum"]:
            raise UsageError(f"{label}={raw.strip()!r} is not a factor above "
                             f"{meta['minimum']:g}", subject=label, code="bad-slow-factor",
                             hint=f"give how many times slower than the others counts as "
                                  f"slow, e.g. {label}{' ' if label.startswith('--') else '='}"
                                  f"{meta['default']:g}")
        values[name] = factor
    chosen = Supervision(**values)
    if chosen.node_timeout < chosen.minimum("node_timeout"):  # the default, at a long beat
        raise UsageError(f"--beat {chosen.beat:g} leaves the node timeout "
                         f"({chosen.node_timeout:g} s) shorter than two beats",
                         subject="--beat", code="bad-seconds",
                         hint="give a shorter --beat or a longer --node-timeout")
    return chosen


def restarts(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """``--max-restarts`` (or ``MESHRUN_MAX_RESTARTS``), default 0."""
    from ..topology.base import parse_int

    raw, label = flag_or_env(args, "max_restarts", env)
    if raw is None or not str(raw).strip():
        return 0
    return parse_int(raw, label, minimum=0)
