"""Whatever ends a sandboxed check (its end, a timeout, SIGTERM, SIGHUP, Ctrl-C, even SIGKILL of
`minigpt check` itself) ends every process the model's code started, a double-forked `setsid`
grandchild included; a model that cuts its event pipe or is SIGKILLed is an error result saying so.

The processes are counted, not trusted to have recorded themselves: every process started under a
test inherits its environment, so /proc/PID/environ holding the test's own MINIGPT_TEST_PIDFILE
marks it, grandchildren and the sandbox's own processes included."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minigpt.checks.sandbox_lifecycle import ended_by_signals
from tests.waiting import eventually_sync, wait_for

FAMILIES = Path(__file__).parent / "fixtures" / "hostile_families.py"
GONE_WITHIN_S = 60.0  # far below the fixtures' 300 s sleeps: only a process left behind fails


def _family(pidfile: Path) -> list[int]:
    """Living processes (zombies aside) whose environment carries this test's marker."""
    marker = f"MINIGPT_TEST_PIDFILE={pidfile}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marker in environ.split(b"\0") and state != b"Z":
            found.append(int(name))
    return found


def _recorded(pidfile: Path) -> dict[str, int]:
    lines = pidfile.read_text().split("\n") if pidfile.exists() else []
    return {role: int(pid) for role, pid in (line.split() for line in lines if line.count(" ") == 1)}


@pytest.fixture
def pidfile(tmp_path):
    path = tmp_path / "pids.txt"
    yield path
    for pid in _family(path):  # a test that failed must not leave its 300 s sleepers running
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _command(ws, cls, config, report, *extra) -> list[str]:
    cmd = [sys.executable, "-m", "minigpt", "check", "--workspace", str(ws.root), "--model", f"{FAMILIES}:{cls}"]
    return cmd + ["--config", str(config), "--skip-overfit", "--device", "cpu", "--json", str(report), *extra]


def _env(pidfile: Path) -> dict[str, str]:
    return {**os.environ, "MINIGPT_TEST_PIDFILE": str(pidfile), "OMP_NUM_THREADS": "1"}


def _default_signals() -> None:  # as a terminal starts it, whatever this test runner ignores
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _none_left(pidfile: Path) -> None:
    def gone() -> None:
        assert _family(pidfile) == []

    eventually_sync(gone, timeout=GONE_WITHIN_S)


def _check(ws, cls, config, tmp_path, pidfile, *extra):
    report = tmp_path / "report.json"
    proc = subprocess.run(
        _command(ws, cls, config, report, *extra), capture_output=True, text=True, timeout=400, env=_env(pidfile)
    )
    return proc, json.loads(report.read_text()) if report.exists() else None


@pytest.mark.slow
def test_a_double_forked_setsid_grandchild_does_not_outlive_the_check(tiny_workspace, config, tmp_path, pidfile):
    # GIVEN a model whose constructor leaves a child and a grandchild in a session of its own
    proc, report = _check(tiny_workspace, "DaemonisesGPT", config, tmp_path, pidfile, "--only", "forward_shapes")
    assert report is not None, proc.stderr
    assert {"child", "setsid"} <= _recorded(pidfile).keys(), "the fixture started no family"
    # THEN once the check is over, no process of the test's is left
    _none_left(pidfile)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, exit_status",
    [
        (signal.SIGTERM, -signal.SIGTERM),  # ended by the signal itself, as the shell expects: $? is 143
        (signal.SIGHUP, -signal.SIGHUP),
        (signal.SIGINT, 130),  # "interrupted", as for Ctrl-C anywhere else
        (signal.SIGKILL, -signal.SIGKILL),  # nothing of the parent runs: the sandbox cleans up after it
    ],
    ids=["SIGTERM", "SIGHUP", "SIGINT", "SIGKILL"],
)
def test_a_signal_to_the_check_leaves_no_process_behind(sig, exit_status, tiny_workspace, config, tmp_path, pidfile):
    # GIVEN `minigpt check --model` whose forward started a child and a setsid grandchild, then hangs
    cmd = _command(tiny_workspace, "HangsWithFamilyGPT", config, tmp_path / "r.json", "--check-timeout", "300")
    with open(tmp_path / "err.txt", "w") as err:
        check = subprocess.Popen(
            cmd, env=_env(pidfile), stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_default_signals
        )
    try:
        wait_for(lambda: "model" in _recorded(pidfile), what="the model to start its processes and hang")
        assert len(_family(pidfile)) >= 4  # the check, the model's process, its child, the setsid grandchild
        # WHEN the check is sent the signal (`timeout`, a closed terminal, Ctrl-C, `kill -9`)
        check.send_signal(sig)
        code = check.wait(timeout=120)
    finally:
        if check.poll() is None:
            check.kill()
    # THEN it ends as the signal says, and no process of the test's is left
    assert code == exit_status, (tmp_path / "err.txt").read_text()
    assert "Traceback" not in (tmp_path / "err.txt").read_text()
    _none_left(pidfile)


@pytest.mark.slow
def test_a_model_that_closes_its_event_pipe_is_an_error_not_a_traceback(tiny_workspace, config, tmp_path, pidfile):
    # GIVEN a model that closes the check's event pipe and keeps running, with a budget of 300 s
    proc, report = _check(tiny_workspace, "ClosesPipeGPT", config, tmp_path, pidfile, "--check-timeout", "300")
    # THEN the closed pipe is noticed (not at the budget's end, not as a traceback), the rest run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    checks = {c["id"]: c for c in report["checks"]}
    assert "closed its event pipe and kept running during forward_shapes" in checks["forward_shapes"]["summary"]
    assert checks["sampler_settings"]["status"] == "pass"
    _none_left(pidfile)


@pytest.mark.slow
def test_a_sigkilled_check_process_is_named_killed_with_the_oom_killer_as_a_cause(
    tiny_workspace, config, tmp_path, pidfile
):
    proc, report = _check(tiny_workspace, "OomKilledGPT", config, tmp_path, pidfile, "--only", "forward_shapes")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = {c["id"]: c for c in report["checks"]}["forward_shapes"]
    assert "was killed by SIGKILL during forward_shapes" in result["summary"]
    assert any("out-of-memory killer" in c and "dmesg" in c for c in result["causes"]), result["causes"]
    assert not any("os._exit" in c for c in result["causes"])


def test_an_ignored_sighup_stays_ignored_while_checks_run():
    # GIVEN a process started under `nohup` (SIGHUP ignored) and a caller's own SIGTERM handler
    def own(signum, frame):
        pass

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN), signal.signal(signal.SIGTERM, own)
    try:
        with ended_by_signals():
            # THEN the sandbox takes neither over, and after the run each is as it was
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is own
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def test_checks_on_a_worker_thread_leave_signals_alone():
    # the UI runs checks on a worker thread, where Python cannot set handlers: the keeper covers it
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def run() -> None:
        with ended_by_signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert seen == [before]  # the block ran (no ValueError from signal.signal) and changed nothing


# how each signal may end it; a SIGINT in the interpreter's last moments (after the report, once
# Python has restored the default handlers) ends it by the signal itself: $? is 130 either way
ENDED_BY = {
    signal.SIGTERM: {-signal.SIGTERM},
    signal.SIGHUP: {-signal.SIGHUP},
    signal.SIGINT: {130, -signal.SIGINT},
    signal.SIGKILL: {-signal.SIGKILL},
}


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sig=st.sampled_from([signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL]),
    delay=st.floats(0.3, 5.0),  # start-up, the checks, and on a quiet machine the end of the run
)
def test_a_signal_at_any_moment_of_a_sandboxed_check_leaves_no_process_behind(
    sig, delay, tiny_workspace, config, tmp_path, pidfile
):
    # GIVEN `minigpt check --model` on a model that leaves a child and a setsid grandchild each time
    # it is built, signalled at a random moment: starting, importing torch, forking its keeper, mid-check
    pidfile.unlink(missing_ok=True)
    report, err_path = tmp_path / "r.json", tmp_path / "err.txt"
    with open(err_path, "w") as err:
        check = subprocess.Popen(
            _command(tiny_workspace, "DaemonisesGPT", config, report),
            env=_env(pidfile),
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=_default_signals,
        )
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            check.wait(timeout=delay)  # the moment, unless it finished before
        if check.poll() is None:
            check.send_signal(sig)
        code = check.wait(timeout=120)
    finally:
        if check.poll() is None:
            check.kill()
    # THEN it ended as that signal says (or had finished), without a traceback, leaving nothing running
    errors = err_path.read_text()
    assert code in {0, 1} | ENDED_BY[sig], errors
    assert "Traceback" not in errors, errors
    _none_left(pidfile)
