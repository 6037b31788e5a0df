"""NCCL and gloo on this node: which interface, InfiniBand or sockets, timeouts by node count,
and the lint of the NCCL/TORCH_NCCL environment (docs/network.md). Pure.

* :mod:`.policy` — :func:`network_env`: this node's variables, each with its reason
* :mod:`.syntax` — NCCL's list syntax (``=eth0``, ``^docker``, ``mlx5_0:1``) and numbers
* :mod:`.lint` — :func:`lint_env`: names nothing reads, bad values, settings this host
  cannot honour
* :mod:`.variables` — the table of known variables and their values (``variables.toml``,
  data checked when loaded)
"""

from importlib import import_module

# name -> the submodule that defines it; imported on first use, so that the planner's
# ``from meshrun.nccl.policy import network_env`` does not load the lint's table.
_WHERE = {
    **dict.fromkeys(("LINT_CODES", "SEVERITIES", "Finding", "format_findings", "lint_env"),
                    "lint"),
    **dict.fromkeys(("DEVICES", "SCALE_TABLE", "IfaceChoice", "NetPolicy", "Scale",
                     "choose_socket_iface", "network_env", "never_chosen", "roce_v2_gid_index",
                     "scale_for"), "policy"),
    **dict.fromkeys(("NcclList", "parse_nccl_list"), "syntax"),
    **dict.fromkeys(("DEPRECATED", "KNOWN_NCCL", "KNOWN_TORCH_NCCL", "REMOVED", "RULES",
                     "UNREAD"), "variables"),
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_WHERE)
