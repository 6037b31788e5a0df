"""The bad-input contract, driven by hypothesis over `meshrun plan`'s flags and `--set` values:
whatever is typed, the plan either succeeds (exit 0) or says what is wrong in one line —
``meshrun: error: <what>; fix: <how> [<code>]`` — and exits 2; never a traceback, never
another exit code (docs/security.md)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshrun.cli import _main
from meshrun.job.schema import SCHEMA

LINE = re.compile(r"^meshrun: error: .+; fix: .+ \[[a-z0-9-]+\]$")
KEYS = [f"{section}.{key}" for section, keys in SCHEMA.items() for key in keys] + \
    ["model.depth", "model.width", "recipe", "train", "nosuch.key", "train.steps.more"]

# what people type, and what breaks parsers: numbers at and past every edge, TOML of other
# types, quotes, control characters, very long text
NUMBERS = st.sampled_from(["0", "-1", "1", "2", "3", "1e999", "-1e999", "inf", "-inf", "nan",
                           "1e-320", "9" * 40, "0x10", "1_000", "1.5", "2.", ".5", "+4",
                           "-0.0", "true", "false"])
TOML = st.sampled_from(['"text"', "'x'", "[1, 2]", "[0.9, 0.999]", "[]", "{a = 1}",
                        '"', "[", "{", "1979-05-27", "07:32:00", '"""a"""', "\"a\nb\""])
VALUES = st.one_of(NUMBERS, TOML, st.text(max_size=40),
                   st.text(alphabet=st.characters(codec="utf-8"), max_size=12))
FLAG_VALUES = st.one_of(NUMBERS, st.text(max_size=20))
NODE_FLAGS = ["--nnodes", "--node-rank", "--nproc-per-node", "--master-port",
              "--join-timeout", "--master-addr", "--spares", "--run-id", "--log-dir"]


@pytest.fixture
def neutral(neutral_here):
    """A machine no platform detector recognises, working in an empty folder."""
    return neutral_here


def _plan(capsys, argv: list[str]) -> None:
    code = _main(["plan", *argv])   # any exception but meshrun's own propagates: a failure
    err = capsys.readouterr().err
    if code == 0:
        return
    lines = [line for line in err.splitlines() if line.startswith("meshrun: error:")]
    assert code == 2, (argv, code, err)
    assert len(lines) == 1 and LINE.match(lines[0]), (argv, err)
    assert "Traceback" not in err, (argv, err)


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sets=st.lists(st.tuples(st.sampled_from(KEYS), VALUES), min_size=1, max_size=3),
       recipe=st.sampled_from([None, "mlp-tp", "autoencoder"]))
def test_any_set_value_is_a_plan_or_one_line(neutral, capsys, sets, recipe):
    argv = ["--recipe", recipe] if recipe else []
    for key, value in sets:
        argv += ["--set", f"{key}={value}"]
    _plan(capsys, argv)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flags=st.lists(st.tuples(st.sampled_from(NODE_FLAGS), FLAG_VALUES), min_size=1,
                      max_size=3))
def test_any_node_flag_value_is_a_plan_or_one_line(neutral, capsys, flags):
    argv = []
    for flag, value in flags:
        argv.append(f"{flag}={value}")
    _plan(capsys, argv)
