"""A process killed (SIGKILL) at any rename, link, unlink or fsync of a multi-file update (`prepare
--force`, `import nanogpt`, the start of a fresh `train`) leaves a workspace that is the old one or
the new one, never a mix, and the next command says which: it finishes the update a journal names
(`minigpt.io.commit`) or names the staged files it removes. Taking the workspace lock is one process
at a time, so a crashed run's lock is never broken while another process takes it; `train` reads
its inputs only under the lock.

The kills come from `MINIGPT_KILL_AT=file-op:N` (crash_points): a first run logs the command's file
operations, then the command is killed before each one in turn. The default tier kills each
command once, in the middle of its update; the sweeps (slow) kill it at every operation."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from minigpt.cli import main
from minigpt.data.prepare import prepare_workspace
from minigpt.data.tokenizer import CharTokenizer
from minigpt.importers.nanogpt import import_nanogpt
from minigpt.io import lock
from minigpt.io.commit import JOURNAL_NAME
from minigpt.io.crash_points import FILE_OPS_LOG, FILE_OPS_UNDER, KILL_AT, PAUSE_AT
from minigpt.io.workspace import Workspace
from minigpt.model.checkpoint import read_checkpoint
from minigpt.train.config import TrainConfig
from minigpt.train.trainer import Trainer
from tests.waiting import wait_for

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import nanogpt_writer  # noqa: E402  (a fixture module, imported from its folder like nanoGPT's scripts)

REPO = Path(__file__).resolve().parents[1]
PREPARED = (
    "tokenizer/char_tokenizer.json",
    "data/encoded/train_ids.pt",
    "data/encoded/val_ids.pt",
    "data/encoded/test_ids.pt",
)
RUN = (
    "checkpoints/mini_gpt_best.pt",
    "checkpoints/mini_gpt_latest.pt",
    "logs/metrics.jsonl",
    "logs/grads.jsonl",
    "logs/samples.jsonl",
)
FRESH_TRAIN = ("--preset", "debug", "--steps", "2", "--eval-interval", "2", "--quiet")
FINISHED = "finished the update that `minigpt {}`"


def minigpt_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "minigpt", *args], capture_output=True, text=True, env=env, timeout=300
    )


def file_ops(ws: Path, *args: str) -> list[str]:
    """The command's file operations under `ws`, in order (`op path`), from a run that completes."""
    log = ws.parent / f"{ws.name}.ops"
    done = minigpt_cli(*args, env={FILE_OPS_LOG: str(log), FILE_OPS_UNDER: str(ws)})
    assert done.returncode == 0, done.stderr
    return [line.split(" ", 1)[1] for line in log.read_text(encoding="utf-8").splitlines()]


def killed_at(op: int, ws: Path, *args: str) -> None:
    """Run the command and kill it just before its `op`-th file operation under `ws` (1-based)."""
    done = minigpt_cli(*args, env={KILL_AT: f"file-op:{op}", FILE_OPS_UNDER: str(ws)})
    assert done.returncode == -signal.SIGKILL, f"not killed at file operation {op}: {done.stderr}"


def after(ops: list[str], prefix: str) -> int:
    """The number of the operation right after the first one that starts with `prefix`: a kill
    there stops the command just after it."""
    return next(i for i, op in enumerate(ops, 1) if op.startswith(prefix)) + 1


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def contents(root: Path, names: tuple[str, ...]) -> dict[str, str | None]:
    return {name: digest(root / name) for name in names}


def all_files(root: Path) -> dict[str, str | None]:
    """Every file an import writes, by content (the lock's record, the journal and staged files left out)."""
    return {
        str(p.relative_to(root)): digest(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != lock.LOCK_NAME and not p.name.endswith(".tmp") and p.name != JOURNAL_NAME
    }


def leftovers(root: Path) -> list[str]:
    """Staged files and an update journal: what a killed command leaves and the next one must clear."""
    found = [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name == JOURNAL_NAME]
    return sorted(str(p.relative_to(root)) for p in found)


def which(found: dict, old: dict, new: dict) -> str:
    return "old" if found == old else "new" if found == new else f"a mix: {found}"


def next_check(root: Path, capsys) -> tuple[int, str]:
    """`minigpt check --only files`, in this process: its exit code and what it printed."""
    capsys.readouterr()
    code = main(["check", "--workspace", str(root), "--only", "files"])
    out = capsys.readouterr()
    return code, out.out + out.err


# --- prepare --force -----------------------------------------------------------------------------


class Prepared:
    """A workspace prepared from corpus A (`old`), what `prepare --force` of corpus B makes of it (`new`)."""

    def __init__(self, root: Path):
        self.a, self.b = root / "a.txt", root / "b.txt"
        # B's vocabulary is smaller than A's: its IDs are all valid under A's tokenizer, so a mix
        # is no out-of-range ID that some check would notice, only IDs that mean other characters
        self.a.write_text("".join(f"the quick brown fox jumps over the lazy dog {i}\n" for i in range(3000)))
        self.b.write_text("".join(f"JUMPS OVER LAZY DOG! {i}\n" for i in range(2000)))
        self.base = root / "base"
        prepare_workspace(self.a, self.base)
        new = root / "new"
        shutil.copytree(self.base, new)
        prepare_workspace(self.b, new, force=True)
        self.old_files, self.new_files = contents(self.base, PREPARED), contents(new, PREPARED)
        self.new_fingerprint = CharTokenizer.from_file(Workspace(new).tokenizer).fingerprint
        counted = root / "counted"
        shutil.copytree(self.base, counted)
        self.ops = file_ops(counted, *self.args(counted))

    def args(self, ws: Path) -> tuple[str, ...]:
        return ("prepare", "--force", "--source", str(self.b), "--workspace", str(ws))

    def copy(self, dest: Path) -> Path:
        shutil.copytree(self.base, dest)
        return dest


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Prepared:
    return Prepared(tmp_path_factory.mktemp("prepare_force"))


@pytest.mark.parametrize("next_command", ["check", "train"])
def test_a_prepare_killed_between_its_renames_is_finished_by_the_next_command(prepared, tmp_path, capsys, next_command):
    # GIVEN `prepare --force` of corpus B killed just after it replaced its first file
    ws = prepared.copy(tmp_path / "ws")
    killed_at(after(prepared.ops, "replace data/encoded/"), ws, *prepared.args(ws))
    # WHEN the next command runs
    capsys.readouterr()
    if next_command == "check":
        code, said = next_check(ws, capsys)
    else:
        code = main(["train", "--workspace", str(ws), *FRESH_TRAIN])
        out = capsys.readouterr()
        said = out.out + out.err
    # THEN it first finished the update and says so: the workspace is B's, whole
    assert code == 0, said
    assert FINISHED.format("prepare") in said
    assert which(contents(ws, PREPARED), prepared.old_files, prepared.new_files) == "new"
    assert leftovers(ws) == []
    if next_command == "train":  # and the run was trained on B under B's tokenizer
        fingerprint = read_checkpoint(Workspace(ws).latest_checkpoint)["tokenizer_fingerprint"]
        assert fingerprint == prepared.new_fingerprint


def test_a_prepare_killed_before_its_update_leaves_the_old_corpus_and_the_next_command_names_what_it_removes(
    prepared, tmp_path, capsys
):
    # GIVEN `prepare --force` killed once every file was staged, before it replaced any
    ws = prepared.copy(tmp_path / "ws")
    killed_at(after(prepared.ops, "fsync tokenizer/.char_tokenizer.json."), ws, *prepared.args(ws))
    assert leftovers(ws)
    # WHEN the next command runs THEN the workspace is A's, and it names each staged file it removed
    code, said = next_check(ws, capsys)
    assert code == 0, said
    assert which(contents(ws, PREPARED), prepared.old_files, prepared.new_files) == "old"
    assert "which is gone: it was stopped before it put that file in place" in said
    assert leftovers(ws) == []


@pytest.mark.slow
def test_a_prepare_killed_at_any_file_operation_leaves_the_old_or_the_new_corpus(prepared, tmp_path, capsys):
    assert len(prepared.ops) >= 12  # 4 files staged, 4 renames, their folders fsynced
    mixed = []
    for op in range(1, len(prepared.ops) + 1):
        ws = prepared.copy(tmp_path / f"ws{op}")
        killed_at(op, ws, *prepared.args(ws))
        journaled, staged = (ws / JOURNAL_NAME).exists(), leftovers(ws)
        code, said = next_check(ws, capsys)
        state = which(contents(ws, PREPARED), prepared.old_files, prepared.new_files)
        # a journal: the update was finished; else what was staged was removed (or nothing was)
        told = FINISHED.format("prepare") in said if journaled else not staged or "which is gone" in said
        if code != 0 or state not in ("old", "new") or not told or leftovers(ws):
            mixed.append(f"killed before {op} {prepared.ops[op - 1]}: {state}, check exit {code}, said {said!r}")
    assert not mixed, f"{len(mixed)} of {len(prepared.ops)} crash points:\n" + "\n".join(mixed)


# --- import nanogpt ------------------------------------------------------------------------------


class Imported:
    """A tiny nanoGPT run with its stdout log, and the workspace a whole import makes of it (`new`)."""

    def __init__(self, root: Path):
        from minigpt.data.corpus import demo_text

        self.out_dir, self.data_dir, self.log = root / "out", root / "data" / "demo_char", root / "train.log"
        nanogpt_writer.prepare_char(demo_text()[:30_000], self.data_dir)
        nanogpt_writer.train(self.data_dir, self.out_dir, max_iters=2, eval_interval=1, block_size=16, n_embd=32)
        self.log.write_text(
            "step 0: train loss 4.2000, val loss 4.2100\niter 0: loss 4.1900, time 10.00ms, mfu -100.00%\n"
        )
        new = root / "new"
        import_nanogpt(self.out_dir, self.data_dir, new, log=self.log)
        self.new_files = all_files(new)
        counted = root / "counted"
        self.ops = file_ops(counted, *self.args(counted))

    def args(self, ws: Path) -> tuple[str, ...]:
        return (
            "import", "nanogpt", "--out-dir", str(self.out_dir), "--data-dir", str(self.data_dir),
            "--log", str(self.log), "--workspace", str(ws),
        )  # fmt: skip


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Imported:
    return Imported(tmp_path_factory.mktemp("nanogpt_import"))


def test_an_import_killed_between_its_renames_is_finished_by_the_next_command(imported, tmp_path, capsys):
    # GIVEN an import into an empty folder killed just after it put its first file in place
    ws = tmp_path / "ws"
    killed_at(after(imported.ops, "replace data/encoded/"), ws, *imported.args(ws))
    # WHEN the next command runs THEN it finished the import and says so: the workspace is whole
    code, said = next_check(ws, capsys)
    assert code == 0, said
    assert FINISHED.format("import") in said
    assert which(all_files(ws), {}, imported.new_files) == "new"
    assert leftovers(ws) == []


def test_an_import_killed_before_its_update_leaves_an_empty_folder_that_takes_the_import_again(
    imported, tmp_path, capsys
):
    # GIVEN an import killed with every file staged (the checkpoint's too), before it replaced any
    ws = tmp_path / "ws"
    killed_at(after(imported.ops, "fsync checkpoints/.mini_gpt_best.pt."), ws, *imported.args(ws))
    assert any(name.startswith("checkpoints/.mini_gpt_best.pt.") for name in leftovers(ws))
    # WHEN the next command runs THEN nothing was imported (check fails for the missing files), and
    # it removed the staged files, the checkpoint-sized one included, naming each
    code, said = next_check(ws, capsys)
    assert code == 1 and "missing: tokenizer" in said
    assert "mini_gpt_best.pt." in said and "which is gone" in said
    assert which(all_files(ws), {}, imported.new_files) == "old"
    assert leftovers(ws) == []
    # AND the import, run again, is not refused
    import_nanogpt(imported.out_dir, imported.data_dir, ws, log=imported.log)
    assert which(all_files(ws), {}, imported.new_files) == "new"


@pytest.mark.slow
def test_an_import_killed_at_any_file_operation_leaves_nothing_or_the_whole_import(imported, tmp_path, capsys):
    assert len(imported.ops) >= 20  # 5 files and a link staged, 6 renames, their folders fsynced
    mixed = []
    for op in range(1, len(imported.ops) + 1):
        ws = tmp_path / f"ws{op}"
        killed_at(op, ws, *imported.args(ws))
        journaled, staged = (ws / JOURNAL_NAME).exists(), leftovers(ws)
        code, said = next_check(ws, capsys)
        state = which(all_files(ws), {}, imported.new_files)
        # a journal: the update was finished; else what was staged was removed (or nothing was)
        told = FINISHED.format("import") in said if journaled else not staged or "which is gone" in said
        ok = (state == "old" and code == 1) or (state == "new" and code == 0)
        if not ok or not told or leftovers(ws):
            mixed.append(f"killed before {op} {imported.ops[op - 1]}: {state}, check exit {code}, said {said!r}")
    assert not mixed, f"{len(mixed)} of {len(imported.ops)} crash points:\n" + "\n".join(mixed)


# --- the start of a fresh train: the previous run moved to previous/ -----------------------------


class Trained:
    """A trained workspace (`old`: its run files), and the file operations of a fresh run's start."""

    def __init__(self, root: Path, template: Path):
        self.base = root / "base"
        shutil.copytree(template, self.base)
        self.old_files = contents(self.base, RUN)
        counted = root / "counted"
        shutil.copytree(self.base, counted)
        ops = file_ops(counted, *self.args(counted))
        # the start: up to the first save of the new run (its first log writes included)
        self.ops = ops[: next(i for i, op in enumerate(ops) if op.startswith("fsync checkpoints/.mini_gpt_best.pt."))]

    def args(self, ws: Path) -> tuple[str, ...]:
        return ("train", "--workspace", str(ws), *FRESH_TRAIN)

    def state(self, ws: Path) -> str:
        """ "old": the old run in place (an archive of it or not); "new": none of it in place and all
        of it in one archive; else a mix."""
        old = {name for name, d in self.old_files.items() if d is not None}
        in_place = {name for name in old if digest(ws / name) == self.old_files[name]}
        archives = [d for d in (ws / "previous").glob("*") if not d.name.endswith(".partial")]
        archived = any(contents(d, RUN) == self.old_files for d in archives)
        if in_place == old:
            return "old"
        return "new" if not in_place and archived else f"a mix: {sorted(in_place)} in place, archived {archived}"

    def copy(self, dest: Path) -> Path:
        shutil.copytree(self.base, dest)
        return dest


@pytest.fixture(scope="module")
def trained(tmp_path_factory, _trained_template) -> Trained:
    return Trained(tmp_path_factory.mktemp("fresh_train"), _trained_template)


def test_a_fresh_train_killed_while_it_moves_the_previous_run_aside_is_finished_by_the_next_command(
    trained, tmp_path, capsys
):
    # GIVEN a fresh run killed after it removed the first of the old run's files (all archived)
    ws = trained.copy(tmp_path / "ws")
    killed_at(after(trained.ops, "unlink checkpoints/mini_gpt_best.pt"), ws, *trained.args(ws))
    # WHEN the next command runs THEN it finished the move and says so: nothing of the old run is
    # left beside the archive that holds all of it
    code, said = next_check(ws, capsys)
    assert code == 0, said
    assert FINISHED.format("train") in said and "moving the previous run to" in said
    assert trained.state(ws) == "new"


@pytest.mark.slow
def test_a_fresh_train_killed_at_any_file_operation_of_its_start_keeps_the_old_run_whole(trained, tmp_path, capsys):
    assert len(trained.ops) >= 15  # 5 files archived and removed, the journal, the new logs
    mixed = []
    for op in range(1, len(trained.ops) + 1):
        ws = trained.copy(tmp_path / f"ws{op}")
        killed_at(op, ws, *trained.args(ws))
        journaled = (ws / JOURNAL_NAME).exists()
        code, said = next_check(ws, capsys)
        state = trained.state(ws)
        told = not journaled or FINISHED.format("train") in said
        if code != 0 or state not in ("old", "new") or not told or leftovers(ws):
            mixed.append(f"killed before {op} {trained.ops[op - 1]}: {state}, check exit {code}, said {said!r}")
    assert not mixed, f"{len(mixed)} of {len(trained.ops)} crash points:\n" + "\n".join(mixed)


# --- taking the lock -----------------------------------------------------------------------------

HOLD = (
    "import sys\n"
    "from minigpt.errors import WorkspaceLockedError\n"
    "from minigpt.io import lock\n"
    "try:\n"
    "    held = lock.acquire(sys.argv[1], 'train')\n"
    "except WorkspaceLockedError as exc:\n"
    "    print('refused:', exc.message, flush=True)\n"
    "    sys.exit(0)\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"  # holds the lock until the test closes its input
)


class Taker:
    """A process that takes the workspace lock and holds it; its first line says how that went."""

    def __init__(self, ws: Path, pause: str):
        env = {**os.environ, "PYTHONPATH": str(REPO), PAUSE_AT: pause}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(ws)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.line: str | None = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        self.line = self.proc.stdout.readline().strip()

    def end(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def touch(path: Path) -> None:
    path.write_text("")


def test_a_crashed_runs_lock_is_never_broken_while_another_process_is_taking_it(tmp_path):
    # GIVEN the lock of a run that crashed (its record names a process that is gone)
    ws, gates = tmp_path / "ws", tmp_path / "gates"
    ws.mkdir()
    gates.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {"pid": dead.pid, "host": os.uname().nodename, "started": time.time() - 60, "command": "train"}
    (ws / lock.LOCK_NAME).write_text(json.dumps(record))
    # AND process B, taking it over, held inside the window where it has the flock and the file
    # still names the dead run
    b = Taker(ws, f"lock-flocked={gates}")
    c: Taker | None = None
    try:
        wait_for(lambda: (gates / "lock-flocked.paused").exists())
        # WHEN process C tries to take the lock meanwhile
        c = Taker(ws, f"lock-busy={gates}")
        taker = c
        wait_for(lambda: (gates / "lock-busy.paused").exists() or taker.line is not None)
        touch(gates / "lock-flocked.go")
        touch(gates / "lock-busy.go")
        wait_for(lambda: b.line is not None and taker.line is not None)
        # THEN B holds the workspace, and C waited for B and was refused, naming it
        assert b.line == "held"
        assert c.line is not None and c.line.startswith("refused:") and f"PID {b.proc.pid}" in c.line, c.line
        found = lock.holder(ws)
        assert found is not None and found.pid == b.proc.pid
    finally:
        for gate in ("lock-flocked.go", "lock-busy.go"):
            touch(gates / gate)
        b.end()
        if c is not None:
            c.end()


# --- train reads its inputs under the lock -------------------------------------------------------


def test_train_reads_the_tokenizer_only_once_it_holds_the_lock(prepared, tmp_path, monkeypatch):
    # GIVEN a `prepare --force` of corpus B that commits just before train takes the lock
    ws = Workspace(prepared.copy(tmp_path / "ws"))
    take = lock.acquire

    def prepare_first(workspace, command: str = "train", **kwargs) -> lock.WorkspaceLock:
        monkeypatch.setattr(lock, "acquire", take)
        prepare_workspace(prepared.b, workspace, force=True)
        return take(workspace, command, **kwargs)

    monkeypatch.setattr(lock, "acquire", prepare_first)
    # WHEN train runs
    cfg = TrainConfig.from_preset("debug", device="cpu", max_steps=2, eval_interval=2, eval_batches=2)
    Trainer(ws, cfg).run()
    # THEN its run is trained under the tokenizer its IDs were written with: B's
    assert read_checkpoint(ws.latest_checkpoint)["tokenizer_fingerprint"] == prepared.new_fingerprint
    assert CharTokenizer.from_file(ws.tokenizer).fingerprint == prepared.new_fingerprint


# --- a journal that is not ours ------------------------------------------------------------------


@pytest.mark.parametrize(
    "journal",
    [
        pytest.param("not json", id="not_json"),
        pytest.param(
            json.dumps(
                {
                    "command": "prepare",
                    "what": "x",
                    "pid": 1,
                    "host": "h",
                    "started": 0.0,
                    "replace": [["../../elsewhere/x.tmp", "data/encoded/train_ids.pt"]],
                    "remove": [],
                }
            ),
            id="a_path_outside_the_workspace",
        ),  # fmt: skip
    ],
)
def test_a_journal_that_is_not_minigpts_is_refused_naming_it_and_never_followed(tmp_path, capsys, journal):
    # GIVEN a prepared workspace with a `.minigpt.update` minigpt never wrote
    ws = tmp_path / "ws"
    prepare_workspace("demo", ws)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.tmp").write_text("not a token file")
    before = contents(ws, PREPARED)
    (ws / JOURNAL_NAME).write_text(journal)
    # WHEN prepare runs THEN it exits 2 naming the journal, and no file was renamed
    assert main(["prepare", "--source", "demo", "--workspace", str(ws)]) == 2
    err = capsys.readouterr().err
    assert f"Not a minigpt update journal: {ws / JOURNAL_NAME}" in err and "Traceback" not in err
    assert contents(ws, PREPARED) == before and (tmp_path / "elsewhere" / "x.tmp").exists()
    # AND check's files line fails with the same words
    code, said = next_check(ws, capsys)
    assert code == 1 and "Not a minigpt update journal" in said
