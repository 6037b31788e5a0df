"""meshrun's command line: argument parsing and dispatch only.

    meshrun plan     [NODE FLAGS] [--json] [-- SCRIPT ARGS...]
    meshrun run      [NODE FLAGS] [-- SCRIPT ARGS... | -m MODULE ARGS...]
    meshrun simulate --nodes N [--nproc-per-node M] [FLAGS] -- SCRIPT ARGS...
    meshrun report   RUN_DIR [RUN_DIR...] [--baseline RUN_DIR] [--json]

Node flags (each also a ``MESHRUN_<NAME>`` variable; a flag wins):
--nnodes, --node-rank, --nproc-per-node, --master-addr, --master-port,
--run-id, --log-dir, --world-size-means, --join-timeout.

Every user error is one line on stderr and exit code 2 (see :mod:`meshrun.errors`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence

from .. import __version__
from ..errors import MeshrunError, UsageError
from ..topology import Flags

NODE_FLAGS = {
    "--nnodes": "number of nodes (machines) in the job",
    "--node-rank": "this node's index, 0 on the master",
    "--nproc-per-node": "worker processes on this node (default: one per visible GPU, "
                        "or 1 without GPUs)",
    "--master-addr": "address of node 0, which hosts the rendezvous store",
    "--master-port": "port of the rendezvous store on node 0",
    "--run-id": "job id shared by all nodes (default: the platform's job id)",
    "--log-dir": "folder for logs; a run writes <log-dir>/<run-id>/ (default ./logs)",
    "--world-size-means": "force the reading of WORLD_SIZE: nodes or processes",
    "--join-timeout": "seconds to wait for every node to join (default 600)",
}


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
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise UsageError(message, hint=f"see '{self.prog} --help'")


def _node_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("node flags (each also MESHRUN_<NAME>)")
    for flag, text in NODE_FLAGS.items():
        group.add_argument(flag, dest=flag[2:].replace("-", "_"), metavar="VALUE", help=text)


def _watch_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-timeout", metavar="SECONDS", default=None,
                        help="a node whose heartbeat is silent this long is lost (default 15)")
    parser.add_argument("--hang-timeout", metavar="SECONDS", default=None,
                        help="no rank progressing this long is a hang (default 300; 0 = off; "
                             "needs meshrun.progress(step) in the script, as recipes do)")


def _supervision(args: argparse.Namespace):
    from ..runtime.launch import Supervision

    values = {}
    for name, minimum in (("node_timeout", 2), ("hang_timeout", 0)):
        raw = getattr(args, name, None)
        env_name = "MESHRUN_" + name.upper()
        if raw is None:
            raw = os.environ.get(env_name)
            label = env_name
        else:
            label = "--" + name.replace("_", "-")
        if raw is not None and raw.strip():  # blank: unset, as every other variable
            values[name] = _seconds(raw, label, minimum)
    return Supervision(**values)


def _seconds(raw: str, label: str, minimum: float) -> float:
    """A number of seconds >= ``minimum`` (2.5 is fine); one line naming ``label`` if not."""
    import math

    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < minimum:
        raise UsageError(f"{label}={raw.strip()!r} is not a number of seconds >= {minimum:g}",
                         subject=label, hint=f"give seconds, e.g. {label} "
                                             f"{max(minimum, 15):g}" if label.startswith("--")
                         else f"set {label} to seconds, e.g. {max(minimum, 15):g}")
    return value


def _preflight_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-preflight", action="store_true",
                        help="skip the cross-node check of code, versions, packages and devices")
    parser.add_argument("--require-path", metavar="PATH", action="append", default=[],
                        help="preflight: PATH must exist on every node (repeatable)")


def _job_flags(parser: argparse.ArgumentParser) -> None:
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


def _bench_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", metavar="MIN:MAX", default="1K:1G",
                        help="bench: message sizes, doubling from MIN to MAX (default 1K:1G)")
    parser.add_argument("--iters", metavar="N", default="20",
                        help="bench: timed iterations per size (default 20)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="meshrun", description="One unchanged command on every node: detect "
                     "the platform, plan the processes, launch PyTorch's elastic agent.")
    parser.add_argument("--version", action="version", version=f"meshrun {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("plan", help="print what run would do here, and why (no side effects)")
    _node_flags(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    _job_flags(p)

    r = sub.add_parser("run", help="launch the workers of this node")
    _node_flags(r)
    r.add_argument("--max-restarts", metavar="N", default=None,
                   help="restart the workers after a failure up to N times (default 0)")
    # `meshrun simulate` tells its node agents how many workers share this host (hidden).
    r.add_argument("--simulated-workers", metavar="N", default=None, help=argparse.SUPPRESS)
    _preflight_flags(r)
    _watch_flags(r)
    _job_flags(r)

    rd = sub.add_parser("render", help="write a config or submission file from the plan "
                        "(accelerate, deepspeed, k8s, pytorchjob, trainjob, volcano, slurm, "
                        "docker)")
    rd.add_argument("target", metavar="TARGET")
    _node_flags(rd)
    _job_flags(rd)
    rd.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout "
                    "(an existing file is kept unless --force)")
    rd.add_argument("--force", action="store_true", help="overwrite the -o file")
    for flag, text in RENDER_FLAGS.items():
        rd.add_argument(flag, dest=flag[2:].replace("-", "_"), metavar="VALUE", help=text)
    rd.add_argument("--env", metavar="NAME=VALUE", action="append", default=[],
                    help="platform targets: a variable for every node (repeatable)")
    rd.add_argument("--infiniband", action="store_true",
                    help="platform targets: InfiniBand devices, memlock, IPC_LOCK")

    d = sub.add_parser("doctor", help="check this node (and, with --all-nodes, every node)")
    _node_flags(d)
    d.add_argument("--json", action="store_true", help="print the findings as JSON")
    d.add_argument("--all-nodes", action="store_true",
                   help="also run the cross-node preflight with the other nodes' doctors")
    d.add_argument("--require-path", metavar="PATH", action="append", default=[],
                   help="with --all-nodes: PATH must exist on every node (repeatable)")
    d.add_argument("--checkpoint-dir", metavar="DIR", default="checkpoints",
                   help="where checkpoints will go, for the free-space check")

    dg = sub.add_parser("diagnose", help="explain failures in logs (files or run folders)")
    dg.add_argument("paths", nargs="*", metavar="LOG", help="log files or run log folders")
    dg.add_argument("--json", action="store_true", help="print the diagnoses as JSON")
    _job_flags(dg)

    rp = sub.add_parser("report", help="what runs achieved (samples/s, MFU) and how "
                                       "throughput scaled between them")
    rp.add_argument("paths", nargs="*", metavar="RUN_DIR", help="run log folders")
    rp.add_argument("--baseline", metavar="RUN_DIR",
                    help="the run the others are compared with (default: the smallest world)")
    rp.add_argument("--json", action="store_true", help="print the report as JSON")

    b = sub.add_parser("bench", help="all-reduce / all-gather bandwidth across the job's nodes")
    _node_flags(b)
    _bench_flags(b)
    b.add_argument("--json", action="store_true", help="print the results as JSON")
    _preflight_flags(b)

    s = sub.add_parser("simulate", help="run N node agents on this machine over loopback")
    s.add_argument("--nodes", metavar="N", required=True, help="simulated nodes")
    for flag in ("--nproc-per-node", "--master-port", "--run-id", "--log-dir", "--join-timeout"):
        s.add_argument(flag, dest=flag[2:].replace("-", "_"), metavar="VALUE",
                       help=NODE_FLAGS[flag])
    s.add_argument("--max-restarts", metavar="N", default=None, help="as for run")
    _preflight_flags(s)
    _watch_flags(s)
    _job_flags(s)
    s.add_argument("--bench", action="store_true",
                   help="run the collective benchmark (as `meshrun bench`) instead of a script")
    s.add_argument("--json", action="store_true", help="with --bench: print results as JSON")
    _bench_flags(s)
    return parser


# Options that take a value: the command starts at the first word that is not one of them.
_VALUE_OPTIONS = {*NODE_FLAGS, "--nodes", "--max-restarts", "--simulated-workers",
                  "--require-path", "--sizes",
                  "--iters", "--recipe", "--config", "--set", "--checkpoint-dir",
                  "--node-timeout", "--hang-timeout", "-o", "--output", "--deepspeed",
                  "--env", "--baseline", *RENDER_FLAGS}


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None, bool]:
    """Split ``argv`` into meshrun's options and the worker command.

    Returns (options, command, is_module). ``--`` ends the options; so does the
    first bare word (the script) or ``-m MODULE``.
    """
    argv = list(argv)
    options: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return options, argv[i + 1:], False
        if token in ("-m", "--module"):
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name", hint="meshrun run -m package.train")
            return options, argv[i + 1:], True
        if token.startswith("-"):
            options.append(token)
            if token in _VALUE_OPTIONS and "=" not in token and i + 1 < len(argv):
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
    options, paths = [argv[0]], []
    rest = iter(argv[1:])
    for token in rest:
        if token == "--":
            paths += rest
        elif token.startswith("-"):
            options.append(token)
            value = next(rest, None) if token in _VALUE_OPTIONS and "=" not in token else None
            if value is not None:
                options.append(value)
        else:
            paths.append(token)
    return options, paths


def flags_from(args: argparse.Namespace) -> Flags:
    return Flags(**{name: getattr(args, name, None) for name in Flags.__dataclass_fields__})


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] in (["diagnose"], ["report"]):  # paths, options anywhere among them
            options, command = split_paths(argv)
            args, is_module = build_parser().parse_args(options), False
        else:
            options, command, is_module = split_command(argv)
            args = build_parser().parse_args(options)
        if args.verb is None:
            build_parser().print_help()
            return 2
        return _exit_if_stuck(_dispatch(args, command, is_module))
    except MeshrunError as err:
        print(err.line(), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("meshrun: interrupted", file=sys.stderr)
        return 130


def _exit_if_stuck(code: int) -> int:
    """Exit at once when a thread would stop or spoil the interpreter's exit.

    - a store call of the watchdog still stuck (its host vanished): a daemon thread inside
      a C++ call at interpreter shutdown aborts the process (SIGABRT, "terminate called
      without an active exception") and would hide ``code``;
    - any other non-daemon thread still running, such as torch's ``TailLog`` readers that
      its agent leaves running when a second signal interrupts its shutdown: the
      interpreter would wait for them forever, and the node's agent would linger after
      its workers are gone."""
    import threading

    main = threading.main_thread()
    if any(t.is_alive() and t is not main and (t.name == "meshrun-store-calls" or not t.daemon)
           for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _dispatch(args: argparse.Namespace, command: list[str] | None, is_module: bool) -> int:
    from ..plan import Command

    cmd = None
    if command:
        cmd = Command(target=command[0], args=tuple(command[1:]), module=is_module)
    if args.verb == "bench" or (args.verb == "simulate" and args.bench):
        return _bench(args, cmd)
    if args.verb == "doctor":
        return _doctor(args)
    if args.verb == "diagnose":
        return _diagnose(args, command)
    if args.verb == "report":
        from ..reports.report import render_text, report

        found = report(command or [], baseline=args.baseline)
        print(json.dumps(found.to_json(), indent=2) if args.json else render_text(found))
        return 0
    if args.verb == "render":
        return _render(args, command, is_module)
    job, cmd = job_input(args, cmd)
    if args.verb == "plan":
        return _plan(args, cmd, job)
    if cmd is None:
        raise UsageError(f"'meshrun {args.verb}' needs the training command",
                         hint=f"meshrun {args.verb} [flags] -- train.py [ARGS...] "
                              "(or -m package.module)")
    if args.verb == "run":
        from ..runtime.launch import run

        plan = make_plan_here(args, cmd, job)
        check_command(cmd)
        check_worker_env(os.environ)
        check_log_dir(plan.log_dir)
        return run(plan, max_restarts=_restarts(args),
                   preflight=not args.no_preflight, require_paths=tuple(args.require_path),
                   supervision=_supervision(args))
    if args.verb == "simulate":
        from ..runtime.simulate import simulate

        check_command(cmd)
        check_worker_env(os.environ)
        return simulate(args, cmd, max_restarts=_restarts(args), job=job)
    raise UsageError(f"unknown command {args.verb!r}", hint="see 'meshrun --help'")


def _bench(args: argparse.Namespace, cmd) -> int:
    """``meshrun bench`` / ``simulate --bench``: run meshrun.worker.collbench as the workers' command."""
    from ..worker.collbench import sizes_between
    from ..plan import Command
    from ..topology.base import parse_int

    if cmd is not None:
        raise UsageError(f"'meshrun {args.verb}' with --bench runs its own workers, not "
                         f"{cmd.display()}", subject="--bench",
                         hint="drop the script, or drop --bench")
    try:
        sizes_between(args.sizes)
    except ValueError as exc:
        raise UsageError(str(exc), subject="--sizes", hint="e.g. --sizes 1K:1G") from None
    iters = parse_int(args.iters, "--iters", minimum=1)
    bench_cmd = Command("meshrun.worker.collbench", ("--sizes", args.sizes, "--iters", str(iters)),
                        module=True)
    real_stdout = sys.stdout
    if args.json:  # everything but the JSON goes to stderr
        sys.stdout = sys.stderr
    try:
        if args.verb == "simulate":
            from ..runtime.simulate import simulate

            run_id = args.run_id or f"bench-{os.getpid()}"
            args.run_id = run_id
            log_dir = os.path.join(args.log_dir or "logs", run_id)
            code = simulate(args, bench_cmd, max_restarts=0)
        else:
            from ..runtime.launch import run

            plan = make_plan_here(args, bench_cmd)
            if plan.device == "cuda":
                _nccl_debug_to_file(plan.log_dir)
            log_dir = plan.log_dir
            code = run(plan, preflight=not args.no_preflight,
                       require_paths=tuple(args.require_path))
    finally:
        sys.stdout = real_stdout
    if code == 0 and args.json:
        try:
            with open(os.path.join(log_dir, "bench.json")) as handle:
                print(handle.read())
        except OSError:
            pass  # not node 0: node 0 prints and keeps the results
    return code


def _render(args: argparse.Namespace, command: list[str] | None, is_module: bool) -> int:
    """``meshrun render TARGET``: plan-based (accelerate, deepspeed) or spec-based (platforms)."""
    from .. import render
    from ..render import spec as platform

    if args.target in render.TARGETS:
        text = _render_hf(args, command, is_module)
    elif args.target in platform.PLATFORM_TARGETS:
        if args.deepspeed:
            raise UsageError(f"--deepspeed is for the accelerate target, not {args.target}",
                             subject="--deepspeed", hint="drop --deepspeed")
        run_flags: list[str] = []
        if args.config:
            run_flags += ["--config", args.config]
        for item in args.set:
            run_flags += ["--set", item]
        if args.checkpoint_dir:
            run_flags += ["--checkpoint-dir", args.checkpoint_dir]
        if args.recipe:
            if command:
                raise UsageError("--recipe and a command were both given", subject="--recipe",
                                 hint="give either --recipe NAME or -- SCRIPT, not both")
            run_flags += ["--recipe", args.recipe]
        values = {name: getattr(args, name, None) for name in (
            "nnodes", "nproc_per_node", "master_addr", "master_port", "run_id", "log_dir",
            "node_rank", *(f[2:].replace("-", "_") for f in RENDER_FLAGS))}
        spec = platform.spec_from_flags(args.target, command, module=is_module,
                                        env=tuple(args.env), infiniband=args.infiniband,
                                        run_flags=tuple(run_flags), **values)
        text = platform.render_platform(spec)
        for note in spec.notes:
            print(f"meshrun: note: {note}", file=sys.stderr)
    else:
        known = sorted({*render.TARGETS, *platform.PLATFORM_TARGETS})
        raise UsageError(f"unknown render target {args.target!r}", subject="meshrun render",
                         hint=f"use one of: {', '.join(known)}")
    if not args.output:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    if os.path.exists(args.output) and not args.force:
        raise UsageError(f"{args.output} exists and would be overwritten", subject="-o",
                         hint="choose another file, or pass --force")
    with open(args.output, "w") as handle:
        handle.write(text if text.endswith("\n") else text + "\n")
    print(f"meshrun: wrote {args.output}", file=sys.stderr)
    return 0


def _render_hf(args: argparse.Namespace, command: list[str] | None, is_module: bool) -> str:
    from .. import render
    from ..plan import Command

    cmd = (Command(command[0], tuple(command[1:]), is_module) if command else None)
    job, cmd = job_input(args, cmd)
    plan = make_plan_here(args, cmd, job)
    job_dict = plan.job.to_dict() if plan.job is not None else None
    extra: list[str] = []
    for flag, value in (("--config", args.config), ("--recipe", args.recipe),
                        ("--checkpoint-dir", args.checkpoint_dir)):
        if value:
            extra += [flag, value]
    for item in args.set:
        extra += ["--set", item]
    options = {}
    if args.deepspeed:
        if args.target != "accelerate":
            raise UsageError("--deepspeed is for the accelerate target", subject="--deepspeed",
                             hint="meshrun render accelerate --deepspeed ds.json")
        _read_deepspeed(args.deepspeed, plan, job_dict)
        options["deepspeed_config_file"] = args.deepspeed
        extra += ["--deepspeed", args.deepspeed]
    return render.render(args.target, plan, job_dict,
                         command=render.regenerate_command(args.target, plan, tuple(extra)),
                         **options)


def _read_deepspeed(path: str, plan, job_dict) -> None:
    from ..render.deepspeed import check_deepspeed_config

    try:
        with open(path) as handle:
            data = json.load(handle)
    except OSError as exc:
        raise UsageError(f"cannot read the DeepSpeed config {path}: {exc.strerror}",
                         subject="--deepspeed", hint="check the path") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})",
                         subject="--deepspeed", hint="fix the file, or write one with "
                         "meshrun render deepspeed -o ds.json") from None
    check_deepspeed_config(data, plan, job_dict, source=f"--deepspeed {path}")


def _diagnose(args: argparse.Namespace, paths: list[str] | None) -> int:
    from ..diagnose import diagnose_files, render_text, to_json

    if not paths:
        raise UsageError("'meshrun diagnose' needs log files or a run's log folder",
                         hint="meshrun diagnose logs/<run-id>  (or: meshrun diagnose a.log b.log)")
    job = None
    if args.config or args.set or args.recipe:
        from .. import job as config
        from .. import recipes

        file_data = config.load_file(args.config) if args.config else None
        sets = config.parse_sets(args.set) if args.set else {}
        if args.recipe:
            sets["recipe"] = args.recipe
        name = config.recipe_name(file_data, sets)
        defaults = recipes.get(name).defaults if name else None
        world = int(os.environ.get("MESHRUN_DIAGNOSE_WORLD_SIZE", "1"))
        job = config.resolve(recipe_defaults=defaults, file_data=file_data, sets=sets,
                             world_size=world, nproc_per_node=world, nnodes=1, run_id="diagnose",
                             config_path=args.config)
    found = diagnose_files(paths, job=job)
    if args.json:
        print(json.dumps(to_json(found), indent=2))
    else:
        print(render_text(found) if found else "meshrun diagnose: no known failure signature "
              "and no error line found")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from ..runtime import doctor
    from ..errors import EXIT_STARTUP

    plan = make_plan_here(args, None)
    checks = doctor.local_checks(plan, dict(os.environ), checkpoint_dir=args.checkpoint_dir)
    if args.all_nodes and plan.nnodes > 1:
        from ..runtime import preflight
        from ..runtime.store import join, open_store, store_errors

        real_stdout = sys.stdout
        if args.json:
            sys.stdout = sys.stderr  # progress lines ("waiting for nodes") stay off the JSON
        try:
            job = open_store(plan)
            with store_errors(plan, job.port, "checking the nodes (doctor --all-nodes)"):
                join(job, plan)
                mine = preflight.fingerprint(plan, require_paths=tuple(args.require_path))
                verdict = preflight.exchange(job.store, plan, mine,
                                             timeout_s=min(plan.join_timeout, 120))
        finally:
            sys.stdout = real_stdout
        checks += doctor.from_preflight(verdict)
    order = {"error": 0, "warning": 1, "info": 2}
    checks.sort(key=lambda c: order.get(c.severity, 3))
    if args.json:
        print(json.dumps({"findings": [c.to_json() for c in checks]}, indent=2))
    else:
        for check in checks:
            print(check.line())
        errors = sum(c.severity == "error" for c in checks)
        warnings = sum(c.severity == "warning" for c in checks)
        print(f"meshrun doctor: {errors} error(s), {warnings} warning(s)")
    return EXIT_STARTUP if any(c.severity == "error" for c in checks) else 0


def _nccl_debug_to_file(log_dir: str) -> None:
    """NCCL's INFO log to files, so collbench can tell which transport carried the traffic."""
    if "NCCL_DEBUG" not in os.environ:
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
        os.environ.setdefault("NCCL_DEBUG_FILE", os.path.join(
            os.path.abspath(log_dir), "nccl.%h.%p.log"))


def _restarts(args: argparse.Namespace) -> int:
    from ..topology.base import parse_int

    raw = args.max_restarts if args.max_restarts is not None else os.environ.get(
        "MESHRUN_MAX_RESTARTS")
    if raw is None or str(raw).strip() == "":
        return 0
    name = "--max-restarts" if args.max_restarts is not None else "MESHRUN_MAX_RESTARTS"
    return parse_int(raw, name, minimum=0)


def job_input(args: argparse.Namespace, cmd):
    """Read --config / --set / --recipe (files: effects) into the planner's JobInput.

    Returns (JobInput or None, command): a recipe (``--recipe``, the config's ``recipe``
    key, or ``-m meshrun.recipes.<x>``) becomes the workers' command."""
    from ..plan import Command, JobInput

    if not any(getattr(args, name, None) for name in ("recipe", "config", "set",
                                                       "checkpoint_dir")):
        if cmd is None or not cmd.module or not cmd.target.startswith("meshrun.recipes."):
            return None, cmd  # a plain script: no job config (and no import of it)
        from .. import recipes

        by_module = [r for r in recipes.RECIPES.values() if cmd.target == r.module]
        if not by_module:
            return None, cmd
        return JobInput(recipe_defaults=by_module[0].defaults), cmd
    from .. import job as config
    from .. import recipes

    file_data = config.load_file(args.config) if args.config else None
    sets = config.parse_sets(args.set) if args.set else {}
    if args.checkpoint_dir:
        sets.setdefault("checkpoint", {})["dir"] = args.checkpoint_dir
    if args.recipe:
        if cmd is not None:
            raise UsageError(f"--recipe {args.recipe} and a command ({cmd.display()}) were both "
                             "given", subject="--recipe",
                             hint="give either --recipe NAME or -- SCRIPT, not both")
        sets["recipe"] = args.recipe
    name = config.recipe_name(file_data, sets)
    if name is None and cmd is not None and cmd.module:
        name = next((r.name for r in recipes.RECIPES.values() if r.module == cmd.target), None)
    recipe = recipes.get(name) if name else None
    if recipe is not None and cmd is None:
        cmd = Command(recipe.module, module=True)
    flags = {key: flag for key, flag, given in (("recipe", "--recipe", args.recipe),
                                                 ("checkpoint.dir", "--checkpoint-dir",
                                                  args.checkpoint_dir)) if given}
    return JobInput(recipe_defaults=recipe.defaults if recipe else None, file_data=file_data,
                    sets=sets or None, config_path=args.config, flags=flags or None), cmd


def check_log_dir(path: str) -> None:
    """The run's log folder can be made and written: else one line and exit 2, not a
    traceback from the log router."""
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(13, "permission denied")
    except OSError as exc:
        raise UsageError(f"the log folder {path} cannot be written ({exc.strerror})",
                         subject="--log-dir", hint="pass --log-dir on a writable filesystem "
                         "(or set MESHRUN_LOG_DIR)") from None


def check_worker_env(env: Mapping[str, str]) -> None:
    """Variables the workers read that meshrun can check before starting them."""
    from ..recipes import parse_peak_flops

    parse_peak_flops(env.get("MESHRUN_PEAK_FLOPS", ""))


def check_command(cmd) -> None:
    """The workers' script must exist here (relative to this directory), and a module's
    top-level package must be importable: else one line and exit 2 before anything starts.
    (A module's parent package is not imported here: only its top level is looked up.)"""
    import importlib.util

    if cmd.module:
        import importlib.machinery

        top = cmd.target.split(".")[0]
        try:  # the workers run with this folder first on sys.path (meshrun.worker.bootstrap)
            found = bool(top) and (
                importlib.machinery.PathFinder.find_spec(top, [os.getcwd(), *sys.path])
                is not None or importlib.util.find_spec(top) is not None)
        except (ImportError, ValueError):
            found = False
        if not found:
            raise UsageError(f"-m {cmd.target}: no module named {top!r} for {sys.executable}",
                             subject="-m", hint="install the package into this Python "
                             "environment, or start meshrun from the folder that holds it")
        return
    if os.path.isdir(cmd.target) and os.path.isfile(os.path.join(cmd.target, "__main__.py")):
        return  # a folder with __main__.py runs as python runs it
    if not os.path.isfile(cmd.target):
        where = os.getcwd()
        what = ("is a folder without __main__.py, not a script" if os.path.isdir(cmd.target)
                else "does not exist")
        raise UsageError(f"the training script {cmd.target} {what} (relative to {where})",
                         subject="SCRIPT", hint="check the path; every node runs it from its "
                         "own working directory, so it must exist there on every node")


def make_plan_here(args: argparse.Namespace, cmd=None, job=None):
    """Collect this host's facts and plan (the one place the CLI reads os.environ)."""
    from dataclasses import replace

    from ..facts import host as facts, net as netfacts
    from ..plan import make_plan

    env = dict(os.environ)
    host = facts.collect(env)
    simulated = _simulated_workers(args)
    first = make_plan(env, flags_from(args), host, cmd, job,  # validates; finds the master
                      simulated_workers=simulated)
    net = netfacts.collect(first.master_addr, first.master_port, env=env)
    plan = make_plan(env, flags_from(args), replace(host, net=net), cmd, job,
                     simulated_workers=simulated)
    deepspeed = getattr(args, "deepspeed", None) if args.verb != "render" else None
    if getattr(args, "accelerate", False) or deepspeed:
        from ..render.accelerate import hf_worker_env

        job_dict = plan.job.to_dict() if plan.job is not None else None
        path = None
        if deepspeed:
            _read_deepspeed(deepspeed, plan, job_dict)
            path = os.path.abspath(deepspeed)
        plan = replace(plan, env=plan.env + tuple(hf_worker_env(plan, job_dict, path, env=env)))
    return plan


def _simulated_workers(args: argparse.Namespace) -> int:
    raw = getattr(args, "simulated_workers", None)
    if raw is None:
        return 0
    from ..topology.base import parse_int

    return parse_int(raw, "--simulated-workers", minimum=1)


def _plan(args: argparse.Namespace, cmd, job=None) -> int:
    from ..plan import describe

    plan = make_plan_here(args, cmd, job)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2, sort_keys=True))
    else:
        print(describe(plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
