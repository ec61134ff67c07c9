"""The torch thread policy: the user's environment wins, a busy machine gets one thread."""

from __future__ import annotations

import os

from minigpt import threads


def test_omp_num_threads_set_by_the_user_is_left_alone(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.recommended("train") is None
    assert threads.child_env("train")["OMP_NUM_THREADS"] == "3"


def test_a_busy_machine_gets_one_thread(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (99.0, 99.0, 99.0))
    assert threads.recommended("train") == 1
    assert threads.child_env("train", base={})["OMP_NUM_THREADS"] == "1"


def test_a_quiet_machine_trains_on_its_physical_cores_and_checks_on_one(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(threads, "physical_cores", lambda: 8)
    assert threads.recommended("train") == 8
    assert threads.recommended("checks") == 1
    assert threads.recommended("train", share_with=1) == 7


def test_physical_cores_is_at_least_one_and_at_most_the_usable_cpus():
    assert 1 <= threads.physical_cores() <= len(threads.usable_cpus())
