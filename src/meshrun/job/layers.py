"""The job config's layers: a TOML file, ``--set`` overrides, recipe defaults, and their
``[profiles.<world size>]`` tables, each read into flat dotted keys checked against the
schema (:mod:`.schema`). Pure but for :func:`load_file`, which reads the file.

Precedence, lowest first::

    built-in defaults < recipe defaults < config file < [profiles.<world size>] < --set

A ``[profiles.N]`` table belongs to the layer that holds it and beats that layer's plain
values. Unknown keys are errors (with a suggestion), so typos cannot pass silently.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .schema import ALL_KEYS, SCHEMA, Knob, Scalar, check_value, show

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TOP_LEVEL = ("recipe", "train", "parallel", "checkpoint", "model", "profiles")
CONFIG_MAX_BYTES = 1 << 20  # a job config is a few hundred bytes; 1 MiB is no config


# --- reading --------------------------------------------------------------------------------

def load_file(path: str) -> dict:
    """Read a TOML config file. Missing file, bad TOML, or anything but a regular file of at
    most :data:`CONFIG_MAX_BYTES` (a FIFO would block, /dev/zero grow without end): a
    UsageError naming ``--config``."""
    from ..outfile import regular_file_or_refuse

    try:
        regular_file_or_refuse(path, "--config", CONFIG_MAX_BYTES, code="config-file-unreadable",
                               what="a TOML config file")
        with open(path, "rb") as handle:
            raw = handle.read(CONFIG_MAX_BYTES + 1)
        data = tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file", subject="--config",
                         hint="check the path; it is read relative to the directory "
                              "meshrun was started in", code="config-file-unreadable") from None
    except IsADirectoryError:
        raise UsageError(f"--config {path} is a directory, not a TOML file",
                         subject="--config", hint="name the .toml file itself",
                         code="config-file-unreadable") from None
    except PermissionError:
        raise UsageError(f"--config {path}: permission denied", subject="--config",
                         hint="make the file readable for this user",
                         code="config-file-unreadable") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"--config {path} is not UTF-8 text ({exc.reason})",
                         subject="--config", hint="save the file as UTF-8",
                         code="config-file-unreadable") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--config {path} is not valid TOML: {exc}", subject="--config",
                         hint="fix the TOML at that line (strings need quotes, tables "
                              "look like [train], keys like steps = 100)",
                              code="config-bad-toml") from None
    return data


_DOTTED = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_BARE_WORD = re.compile(r"^[^\s\"'\[\]{}=,#]+$")


def parse_sets(items: Sequence[str]) -> dict:
    """``["train.steps=20", "train.lr=1e-4"]`` -> ``{"train": {"steps": 20, "lr": 1e-4}}``.

    Each value is read as a TOML value (``20``, ``1e-4``, ``true``, ``"cosine"``,
    ``[0.9, 0.95]``); a bare word that is not TOML (``cosine``, ``mlp-tp``) is a string
    and an empty value is ``""``. A later ``--set`` of the same key wins.
    """
    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep:
            raise UsageError(f"--set {item!r} has no '='", subject="--set",
                             hint="write --set KEY=VALUE, e.g. --set train.steps=20",
                             code="bad-set")
        if not _DOTTED.match(key):
            raise UsageError(f"--set {item!r}: {key!r} is not a dotted key",
                             subject="--set",
                             hint="write --set SECTION.KEY=VALUE, e.g. --set parallel.tp=2",
                             code="bad-set")
        value = _parse_value(key, raw)
        node = out
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                above = ".".join(parts[:depth + 1])
                raise UsageError(f"--set {key}: {above} was already set to a value, not a "
                                 f"table", subject=f"--set {key}",
                                 hint=f"drop --set {above}=... or set keys under it",
                                 code="bad-set")
        if isinstance(node.get(parts[-1]), dict) and not isinstance(value, dict):
            raise UsageError(f"--set {key}={raw}: {key} is a table of keys set elsewhere",
                             subject=f"--set {key}",
                             hint=f"set single keys, e.g. --set {key}.KEY=VALUE", code="bad-set")
        node[parts[-1]] = value
    return out


def _parse_value(key: str, raw: str) -> Any:
    if raw == "":
        return ""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as exc:
        if _BARE_WORD.match(raw):
            return raw
        reason = str(exc).split(" (at ")[0]
        raise UsageError(f"--set {key}={raw}: the value is not valid TOML ({reason})",
                         subject=f"--set {key}",
                         hint="write a TOML value: 1e-4, 20, true, [0.9, 0.95], or a string "
                              f"in quotes inside shell quotes (--set '{key}=\"a b\"')"
                         , code="config-bad-toml") from None


def recipe_name(file_data: Mapping | None, sets: Mapping | None) -> str | None:
    """The recipe the job asks for (``--set recipe=`` beats the file), to pick its defaults."""
    name = None
    for where, data in (("config file", file_data), ("--set", sets)):
        if data and "recipe" in data:
            value = data["recipe"]
            if not isinstance(value, str) or not value:
                raise UsageError(f"recipe = {show(value)} in {where} is not a recipe name",
                                 subject="recipe", hint='write recipe = "NAME", e.g. '
                                                        'recipe = "mlp-tp"', code="bad-recipe-name")
            name = value
    return name




# --- one layer -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Layer:
    label: str  # source label for plan ("config job.toml")
    flat: dict[str, Any]
    profiles: dict[int, dict[str, Any]]
    profile_label: str  # prefix of its profiles' source labels ("recipe X profiles.16")



def read_layer(data: Mapping, label: str, where: str, model_schema: dict | None,
           profile_label: str) -> Layer:
    if not isinstance(data, Mapping):
        raise UsageError(f"{where} is not a table of keys", subject=where,
                         hint="a config is a TOML document with [train], [parallel], ... "
                              "tables", code="config-bad-shape")
    data = _expand(data)
    flat = _flatten(data, where, model_schema, top=True)
    profiles: dict[int, dict[str, Any]] = {}
    raw = data.get("profiles", {})
    if not isinstance(raw, Mapping):
        raise UsageError(f"profiles = {show(raw)} in {where} is not a table",
                         subject="profiles", hint="write [profiles.64] tables with the "
                                                  "overrides for world size 64",
                                                  code="config-bad-shape")
    for size, table in raw.items():
        if not re.fullmatch(r"[1-9][0-9]*", str(size)):
            raise UsageError(f"profiles.{size} in {where}: profile names are world sizes "
                             f"(total processes), not {size!r}", subject=f"profiles.{size}",
                             hint="name it after the world size it applies to, e.g. "
                                  "[profiles.64] for 8 nodes x 8 GPUs", code="config-bad-profile")
        if not isinstance(table, Mapping):
            raise UsageError(f"profiles.{size} = {show(table)} in {where} is not a table",
                             subject=f"profiles.{size}",
                             hint=f"write [profiles.{size}] followed by lines like "
                                  "train.grad_accum = 2", code="config-bad-shape")
        profiles[int(size)] = _flatten(_expand(table), f"profiles.{size} in {where}",
                                       model_schema,
                                       top=False, prefix=f"profiles.{size}.")
    return Layer(label, flat, profiles, profile_label)


def _expand(data: Mapping) -> dict:
    """Dotted keys as nested tables (``{"train.steps": 3}`` -> ``{"train": {"steps": 3}}``),
    so recipe defaults written as Python dicts may use either form, like TOML."""
    out: dict = {}
    for key, value in data.items():
        node, parts = out, str(key).split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UsageError(f"{key}: {part} is both a value and a table",
                                 subject=str(key), hint=f"set {part} one way only",
                                 code="config-bad-shape")
        if isinstance(value, Mapping) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]].update(_expand(value))
        elif isinstance(value, Mapping):
            node[parts[-1]] = _expand(value)
        else:
            node[parts[-1]] = value
    return out


def _flatten(data: Mapping, where: str, model_schema: dict | None, *, top: bool,
             prefix: str = "") -> dict[str, Any]:
    """One layer's values as ``{"train.steps": 20, ...}``, each checked against SCHEMA."""
    allowed = TOP_LEVEL if top else TOP_LEVEL[1:5]
    flat: dict[str, Any] = {}
    for name, value in data.items():
        if name not in allowed:
            if name in TOP_LEVEL:
                raise UsageError(f"{prefix}{name} in {where}: not allowed inside a profile",
                                 subject=f"{prefix}{name}",
                                 hint=f"move {name} out of the [profiles...] table",
                                 code="config-bad-shape")
            _unknown(f"{prefix}{name}", name, where)
        if name == "profiles":
            continue
        if name == "recipe":
            if not isinstance(value, str) or not value:
                raise UsageError(f"recipe = {show(value)} in {where} is not a recipe name",
                                 subject="recipe", hint='write recipe = "NAME", e.g. '
                                                        'recipe = "mlp-tp"', code="bad-recipe-name")
            flat["recipe"] = value
            continue
        if not isinstance(value, Mapping):
            raise UsageError(f"{prefix}{name} = {show(value)} in {where} is a value, but "
                             f"{name} is a table", subject=f"{prefix}{name}",
                             hint=f"write [{name}] and its keys under it, or dotted keys "
                                  f"like {name}.KEY = VALUE", code="config-bad-shape")
        for key, item in value.items():
            dotted = f"{name}.{key}"
            if name == "model":
                flat[dotted] = _check_model(dotted, item, where, model_schema, prefix)
            elif key not in SCHEMA[name]:
                _unknown(f"{prefix}{dotted}", dotted, where)
            else:
                flat[dotted] = check_value(f"{prefix}{dotted}", item, SCHEMA[name][key], where)
    return flat


def _unknown(shown: str, dotted: str, where: str) -> None:
    leaf = dotted.split(".")[-1]
    known = list(ALL_KEYS) + (list(TOP_LEVEL) if "." not in dotted else [])
    same_leaf = [k for k in ALL_KEYS if k.split(".")[-1] == leaf and k != dotted]
    close = same_leaf + [k for k in difflib.get_close_matches(dotted, known, n=3, cutoff=0.6)
                         if k not in same_leaf]
    if not close:
        close = [k for k in ALL_KEYS
                 if difflib.get_close_matches(leaf, [k.split(".")[-1]], n=1, cutoff=0.75)]
    hint = (f"did you mean {' or '.join(close[:3])}?" if close
            else "see docs/config.md for the keys")
    raise UsageError(f"unknown key {shown} in {where}", subject=shown,
                     hint=hint + " (unknown keys are errors so typos cannot pass silently)",
                     code="config-unknown-key")



def _check_model(dotted: str, value: Any, where: str, schema: dict | None,
                 prefix: str) -> Scalar:
    shown = f"{prefix}{dotted}"
    leaf = dotted[len("model."):]
    if not isinstance(value, (int, float, bool, str)):
        raise UsageError(f"{shown} = {show(value)} in {where} is not a number, boolean or "
                         f"string", subject=shown, hint="model values are scalars, e.g. "
                                                        f"{leaf} = 64", code="config-bad-value")
    if schema is None:
        return value
    if leaf not in schema:
        close = difflib.get_close_matches(leaf, list(schema), n=3, cutoff=0.6)
        known = ", ".join(sorted(schema)) or "none"
        hint = (f"did you mean {' or '.join('model.' + c for c in close)}?" if close
                else f"the recipe's model keys are: {known}")
        raise UsageError(f"unknown key {shown} in {where}", subject=shown, hint=hint,
                         code="config-unknown-key")
    expected = schema[leaf]
    kind = ("bool" if isinstance(expected, bool) else "int" if isinstance(expected, int)
            else "float" if isinstance(expected, float) else "str")
    return check_value(shown, value, Knob(kind, expected, ""), where)


