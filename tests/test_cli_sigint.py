"""A `minigpt` started with SIGINT ignored takes it back only when its parent asks (the UI's
training run, stopped with SIGINT), never by itself (a script's background job ignores Ctrl+C)."""

from __future__ import annotations

import signal
import subprocess
import sys

PROBE = (
    "import signal; from minigpt.cli import take_sigint; take_sigint(); "
    "print('handled' if signal.getsignal(signal.SIGINT) is signal.default_int_handler else 'ignored')"
)


def _probe(env_flag: str | None) -> str:
    env = {"PATH": "/usr/bin:/bin"}
    if env_flag is not None:
        env["MINIGPT_TAKE_SIGINT"] = env_flag
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as `nohup … &` starts it
        check=True,
    )
    return out.stdout.strip()


def test_the_uis_flag_restores_sigint_in_a_process_started_with_it_ignored():
    assert _probe("1") == "handled"


def test_without_the_flag_an_ignored_sigint_stays_ignored():
    assert _probe(None) == "ignored"
