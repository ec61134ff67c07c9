"""The torch thread policy: the user's environment wins, a busy machine gets one thread."""

from __future__ import annotations

import os
import threading

import pytest

from minigpt import threads
from minigpt.cli import main as cli_main


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


def test_sampling_and_preparing_get_one_thread_on_a_quiet_machine(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(threads, "physical_cores", lambda: 8)
    assert threads.recommended("sample") == 1
    assert threads.recommended("prepare") == 1


def test_an_unknown_purpose_is_refused():
    with pytest.raises(ValueError, match="unknown thread purpose 'sampel'"):
        threads.recommended("sampel")


@pytest.fixture
def applied(monkeypatch) -> list[tuple[str, str]]:
    """Every call of threads.apply as (purpose, thread name); the policy itself still runs."""
    calls: list[tuple[str, str]] = []
    real = threads.apply

    def record(purpose: str, **kw) -> int:
        calls.append((purpose, threading.current_thread().name))
        return real(purpose, **kw)

    monkeypatch.setattr(threads, "apply", record)
    return calls


def test_minigpt_sample_applies_the_thread_policy(trained_workspace, applied, capsys):
    code = cli_main(["sample", "--workspace", str(trained_workspace.root), "--max-new-tokens", "5", "--seed", "0"])
    assert code == 0
    assert [p for p, _ in applied] == ["sample"]


def test_minigpt_prepare_applies_the_thread_policy(tmp_path, applied, capsys):
    assert cli_main(["prepare", "--source", "demo", "--workspace", str(tmp_path / "ws")]) == 0
    assert [p for p, _ in applied] == ["prepare"]


def test_minigpt_check_applies_the_thread_policy(trained_workspace, applied, capsys):
    cli_main(["check", "--workspace", str(trained_workspace.root), "--only", "files"])
    assert [p for p, _ in applied] == ["checks"]


def test_minigpt_train_applies_the_thread_policy(tiny_workspace, applied, capsys):
    code = cli_main(["train", "--workspace", str(tiny_workspace.root), "--preset", "debug", "--steps", "2", "--quiet"])
    assert code == 0
    assert [p for p, _ in applied] == ["train"]


def test_the_demo_build_applies_the_thread_policy_in_its_own_thread(tmp_path, applied):
    from minigpt_tui.demo import build_demo

    def build() -> None:
        build_demo(tmp_path / "demo", lambda stage, f: None, lambda: False, steps=2)

    worker = threading.Thread(target=build, name="demo-worker")
    worker.start()
    worker.join()
    # OpenMP keeps the thread count per thread: it must be set in the thread that trains
    assert applied == [("train", "demo-worker")]
