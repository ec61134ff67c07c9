"""A watched loop's forked children (`os.fork()` in user code, DataLoader workers) never write,
flush, close or release the parent's run folder: only the process that opened the watch does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import minigpt
from minigpt.io.lock import acquire, holder
from minigpt.io.workspace import Workspace
from minigpt.loopwatch.loop_log import read_loop_log

ROOT = Path(__file__).resolve().parents[1]


def metrics_steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "logs" / "metrics.jsonl").read_text().splitlines()]


def closed_records(run: Path) -> int:
    return sum(1 for line in (run / "logs" / "loop.jsonl").read_text().splitlines() if '"kind":"closed"' in line)


def tiny_loop(watch, model, opt, steps: int) -> None:
    for _ in range(steps):
        x = torch.randint(0, 10, (4, 6))
        loss = torch.nn.functional.cross_entropy(model(x).view(-1, 10), x.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()


def test_a_forked_child_closing_the_watch_leaves_the_parents_log_and_lock_alone(tmp_path):
    # GIVEN a watched loop with steps still buffered (interval 20: steps 4.. wait for a flush)
    run = tmp_path / "run"
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = minigpt.watch(model, opt, workspace=run)
    tiny_loop(watch, model, opt, 6)
    # WHEN a child forked from it closes the watch (what its exit does) and exits
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        try:
            watch.flush()
            watch.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    # THEN the parent still holds the workspace, and its log has each step once and one close
    found = holder(run)
    assert found is not None and found.pid == os.getpid()
    tiny_loop(watch, model, opt, 4)
    watch.close()
    assert metrics_steps(run) == list(range(1, 11))
    assert closed_records(run) == 1


def test_a_lock_released_in_a_forked_child_stays_held_by_the_parent(tmp_path):
    lock = acquire(tmp_path, command="train")
    pid = os.fork()
    if pid == 0:
        try:
            lock.release(discard=True)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    found = holder(tmp_path)
    assert found is not None and found.pid == os.getpid()
    lock.release()
    assert holder(tmp_path) is None


def test_a_child_that_runs_the_watched_model_writes_nothing(tmp_path):
    run = tmp_path / "run"
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = minigpt.watch(model, opt, workspace=run, interval=1)
    tiny_loop(watch, model, opt, 3)
    pid = os.fork()
    if pid == 0:
        try:
            tiny_loop(watch, model, opt, 3)  # the child trains on its own copy: not the parent's run
            watch.log(val_loss=1.0)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    tiny_loop(watch, model, opt, 2)
    watch.close()
    assert metrics_steps(run) == [1, 2, 3, 4, 5]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["os_fork", "dataloader_workers", "multiprocessing_fork", "multiprocessing_spawn"])
def test_children_of_a_watched_script_leave_its_run_folder_whole(tmp_path, how):
    run = tmp_path / "run"
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import multiprocessing, os, sys, torch
            sys.path.insert(0, {str(ROOT)!r})
            import minigpt

            class Ids(torch.utils.data.Dataset):
                def __len__(self):
                    return 64
                def __getitem__(self, i):
                    return torch.randint(0, 10, (6,))

            def child():
                pass

            if __name__ == "__main__":
                model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10))
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                watch = minigpt.watch(model, opt, workspace={str(run)!r})
                loader = torch.utils.data.DataLoader(
                    Ids(), batch_size=4, num_workers=2 if {how!r} == "dataloader_workers" else 0
                )
                for step, x in enumerate(loader):
                    if step == 16:
                        break
                    if step == 5 and {how!r} == "os_fork":
                        if os.fork() == 0:
                            sys.exit(0)  # a normal exit: atexit handlers run in the child
                        os.wait()
                    if step == 5 and {how!r}.startswith("multiprocessing"):
                        ctx = multiprocessing.get_context({how!r}.split("_")[1])
                        p = ctx.Process(target=child)
                        p.start(); p.join()
                    loss = torch.nn.functional.cross_entropy(model(x).view(-1, 10), x.view(-1))
                    loss.backward(); opt.step(); opt.zero_grad()
            """
        )
    )
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path, timeout=120)
    assert metrics_steps(run) == list(range(1, 17))
    assert closed_records(run) == 1
    log = read_loop_log(Workspace(run))
    assert log is not None and log.last_step == 16
