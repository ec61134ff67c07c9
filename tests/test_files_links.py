"""Links and special files where minigpt writes or locks: never followed, never opened, refused at
once with their path. Real symbolic links, FIFOs and folders; a process that would block on a FIFO
runs under a timeout so a regression fails instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.cli import main
from minigpt.errors import UnsafePathError
from minigpt.io import lock
from minigpt.io.files import open_log, open_regular
from minigpt.logs.follow import LineFollower

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "minigpt", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


# --- the workspace lock ---


def test_a_symlinked_lock_is_refused_and_its_target_is_untouched(tmp_path, capsys):
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".minigpt.lock").symlink_to(outside)
    with pytest.raises(UnsafePathError, match=r"\.minigpt\.lock.* is a symbolic link to .*precious\.txt"):
        lock.acquire(ws)
    assert outside.read_text() == "keep me\n"
    assert lock.holder(ws) is None  # the reader never opens it either
    with pytest.raises(UnsafePathError, match="symbolic link"):
        lock.holder(ws, refuse_unsafe=True)
    assert outside.read_text() == "keep me\n"


def test_a_dangling_symlinked_lock_is_not_created_through(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    target = tmp_path / "created-through-the-link"
    (ws / ".minigpt.lock").symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        lock.acquire(ws)
    assert not target.exists()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_lock_that_is_a_fifo_or_a_folder_is_refused_at_once_in_a_process(tmp_path, kind):
    # GIVEN a workspace whose lock is a FIFO (opening it for reading would block forever) or a folder
    ws = tmp_path / "ws"
    ws.mkdir()
    if kind == "fifo":
        os.mkfifo(ws / ".minigpt.lock")
    else:
        (ws / ".minigpt.lock").mkdir()
    # WHEN another process asks who holds it, then tries to take it (a timeout turns a block into a failure)
    code = (
        "import sys; from minigpt.io import lock; from minigpt.errors import UnsafePathError\n"
        "print('holder', lock.holder(sys.argv[1]))\n"
        "try:\n    lock.acquire(sys.argv[1])\nexcept UnsafePathError as e:\n    print('refused', e.message)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code, str(ws)], capture_output=True, text=True, timeout=30, env=env)
    # THEN it answers at once, naming the path and what it is
    assert out.returncode == 0, out.stderr
    assert "holder None" in out.stdout
    what = "a FIFO (named pipe)" if kind == "fifo" else "a folder"
    assert f"refused Refused to lock {ws / '.minigpt.lock'}: the workspace lock is {what}" in out.stdout


def test_train_on_a_fifo_lock_exits_2_naming_it(tiny_workspace, capsys):
    os.mkfifo(tiny_workspace.root / ".minigpt.lock")
    code = main(["train", "--workspace", str(tiny_workspace.root), "--preset", "debug", "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "is a FIFO (named pipe)" in err and ".minigpt.lock" in err
    assert "Traceback" not in err


def test_prepare_refuses_a_symlinked_lock_before_reading_the_corpus(tmp_path, capsys):
    outside = tmp_path / "outside.txt"
    outside.write_text("x" * 100)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".minigpt.lock").symlink_to(outside)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\nline two\nline three\n" * 50)
    assert main(["prepare", "--source", str(corpus), "--workspace", str(ws)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert outside.read_text() == "x" * 100
    assert not (ws / "tokenizer").exists()


def test_a_workspace_whose_folders_lead_into_another_is_refused_naming_both(tmp_path, tiny_workspace):
    # GIVEN workspace A that has trained (its lock file exists) and B whose checkpoints/ and logs/ point into A
    a = tiny_workspace.root
    lock.acquire(a).release()
    (a / "checkpoints").mkdir()
    (a / "checkpoints" / "mini_gpt_latest.pt").write_bytes(b"A's live checkpoint")
    b = tmp_path / "b"
    b.mkdir()
    (b / "checkpoints").symlink_to(a / "checkpoints")
    (b / "logs").symlink_to(a / "logs")
    # WHEN B takes its lock THEN it is refused, naming B's folder and workspace A
    with pytest.raises(UnsafePathError) as info:
        lock.acquire(b)
    assert str(b) in info.value.message and str(a.resolve()) in info.value.message
    assert "checkpoints/" in info.value.message
    assert not (b / ".minigpt.lock").exists()
    assert (a / "checkpoints" / "mini_gpt_latest.pt").read_bytes() == b"A's live checkpoint"


def test_a_folder_linked_to_plain_storage_outside_any_workspace_is_fine(tmp_path):
    store = tmp_path / "bigdisk" / "ckpts"
    store.mkdir(parents=True)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "checkpoints").symlink_to(store)
    lock.acquire(ws).release()


def test_a_command_that_fails_under_a_lock_it_created_leaves_no_lock_file(tmp_path):
    ws = tmp_path / "ws"
    with pytest.raises(RuntimeError), lock.acquire(ws, "import"):
        raise RuntimeError("refused")
    assert not (ws / ".minigpt.lock").exists()
    lock.acquire(ws).release()  # and the next writer takes it as usual
    with pytest.raises(RuntimeError), lock.acquire(ws):
        raise RuntimeError("refused")
    assert (ws / ".minigpt.lock").exists()  # a lock file it did not create stays


def test_a_lock_record_nested_thousands_deep_is_an_unreadable_record_not_a_traceback(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".minigpt.lock").write_text("[" * 4000)
    assert lock.holder(ws) is None
    lock.acquire(ws).release()


# --- logs and other files opened for writing ---


def test_open_log_refuses_a_link_and_never_truncates_its_target(tmp_path):
    outside = tmp_path / "outside.log"
    outside.write_text("someone else's log\n")
    link = tmp_path / "tui_train.log"
    link.symlink_to(outside)
    for mode in ("a", "wb"):
        with pytest.raises(UnsafePathError, match="symbolic link"):
            open_log(link, mode)
    assert outside.read_text() == "someone else's log\n"


def test_open_regular_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UnsafePathError, match=r"is a FIFO \(named pipe\)"):
        open_regular(fifo, os.O_WRONLY | os.O_APPEND)
    with pytest.raises(UnsafePathError, match=r"is a FIFO \(named pipe\)"):
        open_regular(fifo, os.O_RDONLY, action="read")


def test_open_log_appends_and_creates_a_regular_file(tmp_path):
    path = tmp_path / "logs" / "metrics.jsonl"
    path.parent.mkdir()
    with open_log(path) as fh:
        fh.write("one\n")
    with open_log(path) as fh:
        fh.write("two\n")
    assert path.read_text() == "one\ntwo\n"


def test_the_ui_follower_reads_a_fifo_as_missing_without_blocking(tmp_path):
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    assert LineFollower(fifo).poll_lines() == []


# --- the UI's training log (minigpt_tui/training.py) ---


class _SleepingRun:
    """A TrainingRun whose "trainer" prints a line and sleeps: the log handling is what is tested."""

    @staticmethod
    def make(workspace):
        from minigpt_tui.training import TrainingRun

        class Run(TrainingRun):
            @property
            def command(self) -> list[str]:
                return [sys.executable, "-c", "import time; print('running', flush=True); time.sleep(30)"]

        return Run(workspace, [])


def test_the_ui_never_truncates_a_file_its_training_log_links_to(tmp_path):
    import asyncio

    outside = tmp_path / "precious.log"
    outside.write_text("someone else's\n")
    (tmp_path / "ws" / "logs").mkdir(parents=True)
    (tmp_path / "ws" / "logs" / "tui_train.log").symlink_to(outside)
    run = _SleepingRun.make(tmp_path / "ws")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        asyncio.run(run.start())
    assert run.process is None and outside.read_text() == "someone else's\n"


def test_two_uis_starting_a_run_at_once_write_two_logs(tmp_path):
    import asyncio

    async def both() -> tuple[Path, Path, str]:
        first, second = _SleepingRun.make(tmp_path / "ws"), _SleepingRun.make(tmp_path / "ws")
        await first.start()
        for _ in range(400):  # until the first trainer has written its line
            if "running" in first.log_path.read_text():
                break
            await asyncio.sleep(0.05)
        await second.start()  # while the first trainer still writes its log
        text = first.log_path.read_text()
        for run in (first, second):
            run.process.kill()
            await run.process.wait()
        return first.log_path, second.log_path, text

    a, b, first_text = asyncio.run(both())
    assert a.name == "tui_train.log" and b.name == f"tui_train.{os.getpid()}.log"
    assert "running" in first_text  # the second UI did not empty the first one's log


def test_a_fresh_run_over_a_symlinked_checkpoint_never_writes_through_it(trained_workspace, tmp_path, capsys):
    # GIVEN a workspace whose best checkpoint is a link to a file outside it
    ws = trained_workspace
    outside = tmp_path / "outside.pt"
    outside.write_bytes(b"not yours to overwrite")
    ws.best_checkpoint.unlink()
    ws.best_checkpoint.symlink_to(outside)
    # WHEN a fresh run archives the previous one and saves its own
    code = main(["train", "--workspace", str(ws.root), "--preset", "debug", "--steps", "2", "--quiet"])
    # THEN the link was moved aside as a link, the new checkpoint is a file, the target is untouched
    assert code == 0, capsys.readouterr().err
    assert outside.read_bytes() == b"not yours to overwrite"
    assert ws.best_checkpoint.is_file() and not ws.best_checkpoint.is_symlink()
    archived = list((ws.root / "previous").glob("*/checkpoints/mini_gpt_best.pt"))
    assert len(archived) == 1 and archived[0].is_symlink()


def test_training_may_share_another_workspaces_data_by_a_link_but_prepare_may_not_write_it(tmp_path, tiny_workspace):
    a = tiny_workspace.root
    lock.acquire(a).release()
    b = tmp_path / "b"
    b.mkdir()
    (b / "data").symlink_to(a / "data")
    (b / "tokenizer").symlink_to(a / "tokenizer")
    lock.acquire(b, "train").release()  # train only reads data/ and tokenizer/
    with pytest.raises(UnsafePathError, match="its data/ resolves to"):
        lock.acquire(b, "prepare")


def test_a_lock_that_is_a_hard_link_to_another_file_is_refused_and_the_file_kept(tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.link(outside, ws / ".minigpt.lock")
    with pytest.raises(UnsafePathError, match="2 hard links"):
        lock.acquire(ws)
    assert outside.read_text() == "keep me\n"


def test_a_folder_linked_elsewhere_under_another_workspace_but_outside_its_folders_is_fine(tmp_path, tiny_workspace):
    home = tiny_workspace.root  # a workspace (with a lock file) that also holds other things
    lock.acquire(home).release()
    (home / "runs" / "b-logs").mkdir(parents=True)
    b = tmp_path / "b"
    b.mkdir()
    (b / "logs").symlink_to(home / "runs" / "b-logs")
    lock.acquire(b, "train").release()
    (b / "checkpoints").symlink_to(home / "checkpoints" / "nested")
    with pytest.raises(UnsafePathError, match="checkpoints/ resolves to"):
        lock.acquire(b, "train")
