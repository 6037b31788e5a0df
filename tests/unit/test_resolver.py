"""A node agent's resolver settings (meshrun.sockets.resolver_for_agent): `meshrun run`
starts itself again once with RES_OPTIONS set, loads the settings, and takes the variable
out of the environment its workers inherit; a user's own RES_OPTIONS is left alone.
(tests/integration/test_store_flood.py: 500 idle connections to the job store, for real.)"""

from __future__ import annotations

import pytest

from meshrun import sockets


class _Exec(Exception):
    pass


def test_without_res_options_the_agent_starts_again_with_them(monkeypatch):
    seen = {}

    def execve(path, args, env):
        seen.update(path=path, args=args, env=env)
        raise _Exec

    monkeypatch.setattr(sockets.os, "execve", execve)
    monkeypatch.setattr("sys.orig_argv", ["python", "-u", "-m", "meshrun", "run", "--", "t.py"])
    env = {"PATH": "/bin"}
    with pytest.raises(_Exec):
        sockets.resolver_for_agent(["run", "--", "t.py"], env)
    assert seen["args"] == ["python", "-u", "-m", "meshrun", "run", "--", "t.py"]   # -u kept
    assert seen["env"]["RES_OPTIONS"] == sockets.AGENT_RES_OPTIONS
    assert seen["env"]["PATH"] == "/bin"


def test_after_the_exec_the_settings_are_loaded_and_the_variables_go(monkeypatch):
    loaded = []
    monkeypatch.setattr(sockets, "load_resolver", lambda: loaded.append(1) or True)
    env = {"RES_OPTIONS": sockets.AGENT_RES_OPTIONS, "MESHRUN_RESOLVER_SET": "1", "A": "b"}
    sockets.resolver_for_agent(["run"], env)
    assert loaded == [1] and env == {"A": "b"}     # the workers never see RES_OPTIONS


def test_a_users_own_res_options_are_left_alone(monkeypatch):
    monkeypatch.setattr(sockets.os, "execve", lambda *a: pytest.fail("no exec"))
    env = {"RES_OPTIONS": "ndots:2"}
    sockets.resolver_for_agent(["run"], env)
    assert env == {"RES_OPTIONS": "ndots:2"}


def test_glibc_loads_the_settings_here():
    assert sockets.load_resolver() is True


def test_a_lookup_that_never_answers_holds_nobody_past_its_timeout(monkeypatch):
    """sockets.lookup / resolve: a DNS server that does not answer (getaddrinfo blocked) costs
    the caller its timeout, not glibc's retries; the host itself stands in for its addresses."""
    import threading
    import time

    release = threading.Event()

    def blocked(*_args, **_kwargs):
        release.wait(30)
        raise OSError("gave up")

    monkeypatch.setattr(sockets.socket, "getaddrinfo", blocked)
    start = time.monotonic()
    try:
        assert sockets.lookup("store.example", 29500, timeout=0.2) == (
            [], "name lookup did not answer within 0.2 s")
        assert sockets.resolve("store.example", timeout=0.2) == ("store.example",)
        assert time.monotonic() - start < 5
    finally:
        release.set()


def test_a_lookup_that_fails_says_why():
    infos, why = sockets.lookup("x" * 64 + ".example", 1, timeout=5)   # a label IDNA refuses
    assert infos == [] and why.startswith("cannot resolve:")
    infos, why = sockets.lookup("127.0.0.1", 1, timeout=5)
    assert why == "" and {info[4][0] for info in infos} == {"127.0.0.1"}
