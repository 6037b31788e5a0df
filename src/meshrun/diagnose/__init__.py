"""``meshrun diagnose``: failures in logs -> cause and fix, root cause first.

Public API: :func:`diagnose_files`, :func:`diagnose_text`, :func:`render_text`,
:func:`to_json` (docs/diagnose.md).
"""

from .engine import (
    ADVICE,
    CATALOG,
    EFFECT,
    FAULT,
    LOST,
    SETUP,
    TIERS,
    UNKNOWN,
    UNKNOWN_CODE,
    Diagnosis,
    Signature,
    WorkerFailure,
    catalog_table,
    codes,
    diagnose_files,
    diagnose_text,
    fix_for_oom,
    needle,
    parse_root_cause,
    parse_worker_failures,
    render_text,
    to_json,
)

__all__ = ["ADVICE", "CATALOG", "EFFECT", "FAULT", "LOST", "SETUP", "TIERS", "UNKNOWN",
           "UNKNOWN_CODE", "Diagnosis", "Signature", "WorkerFailure", "catalog_table", "codes",
           "diagnose_files", "diagnose_text", "fix_for_oom", "needle", "parse_root_cause",
           "parse_worker_failures", "render_text", "to_json"]
