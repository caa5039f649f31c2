"""The machine lock behind the ``solo`` marker (tests/solo_lock.py): event-order assertions with
threads (``flock`` locks belong to an open file, so two threads' opens contend like two workers)."""

from __future__ import annotations

import threading
import uuid

import pytest

from tests.solo_lock import fcntl, machine_turn

pytestmark = pytest.mark.skipif(fcntl is None, reason="flock is POSIX-only")


def _run(run_id, solo, log, name, entered=None, release=None):
    with machine_turn(run_id, solo=solo):
        log.append(f"{name} in")
        if entered is not None:
            entered.set()
        if release is not None:
            assert release.wait(10)
        log.append(f"{name} out")


def test_ordinary_tests_share_the_machine():
    run_id, log = uuid.uuid4().hex, []
    a_in, b_in, release = threading.Event(), threading.Event(), threading.Event()
    a = threading.Thread(target=_run, args=(run_id, False, log, "a", a_in, release))
    b = threading.Thread(target=_run, args=(run_id, False, log, "b", b_in, release))
    a.start(), b.start()
    assert a_in.wait(10) and b_in.wait(10)  # both inside at once
    release.set()
    a.join(), b.join()
    assert sorted(log[:2]) == ["a in", "b in"]


def test_a_solo_test_waits_for_the_running_test_and_holds_off_the_next():
    run_id, log = uuid.uuid4().hex, []
    a_in, a_release, s_release = threading.Event(), threading.Event(), threading.Event()
    a = threading.Thread(target=_run, args=(run_id, False, log, "a", a_in, a_release))
    a.start()
    assert a_in.wait(10)
    s_in = threading.Event()
    s = threading.Thread(target=_run, args=(run_id, True, log, "solo", s_in, s_release))
    s.start()
    assert not s_in.wait(0.3)  # the ordinary test still runs
    b = threading.Thread(target=_run, args=(run_id, False, log, "b"))
    b.start()  # queued behind the solo test (turnstile), not beside it
    a_release.set()
    assert s_in.wait(10)
    b.join(0.3)
    assert b.is_alive() and "b in" not in log
    s_release.set()
    for t in (a, s, b):
        t.join(10)
    assert log == ["a in", "a out", "solo in", "solo out", "b in", "b out"]


def test_no_run_id_locks_nothing():
    log = []
    with machine_turn(None, solo=True), machine_turn(None, solo=True):
        log.append("nested")
    assert log == ["nested"]
