"""NCCL and gloo on this node: which interface, InfiniBand or sockets, timeouts by node count,
and the lint of the NCCL/TORCH_NCCL environment (docs/network.md). Pure.

* :mod:`.policy` — :func:`network_env`: this node's variables, each with its reason
* :mod:`.syntax` — NCCL's list syntax (``=eth0``, ``^docker``, ``mlx5_0:1``) and numbers
* :mod:`.lint` — :func:`lint_env`: names nothing reads, bad values, settings this host
  cannot honour
* :mod:`.variables` — the table of known variables and their values (``variables.toml``,
  data checked when loaded)
"""

from .lint import LINT_CODES, SEVERITIES, Finding, format_findings, lint_env
from .policy import (
    DEVICES,
    SCALE_TABLE,
    IfaceChoice,
    NetPolicy,
    Scale,
    choose_socket_iface,
    network_env,
    never_chosen,
    roce_v2_gid_index,
    scale_for,
)
from .syntax import NcclList, parse_nccl_list
from .variables import DEPRECATED, KNOWN_NCCL, KNOWN_TORCH_NCCL, REMOVED, RULES, UNREAD

__all__ = ["DEPRECATED", "DEVICES", "KNOWN_NCCL", "KNOWN_TORCH_NCCL", "LINT_CODES", "REMOVED",
           "RULES", "SCALE_TABLE", "SEVERITIES", "UNREAD", "Finding", "IfaceChoice", "NcclList",
           "NetPolicy", "Scale", "choose_socket_iface", "format_findings", "lint_env",
           "network_env", "never_chosen", "parse_nccl_list", "roce_v2_gid_index", "scale_for"]
