"""OS refusals and bad files end in one typed message naming the path (exit 2), never a traceback,
and never lose what was on disk: disk full, read-only, permission denied, not a directory, is a
directory, symlink loops, FIFOs, Git LFS pointers, unsafe pickles, malformed reports."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import types
from pathlib import Path

import pytest
import torch

from minigpt.checks.report import load_report
from minigpt.cli import main
from minigpt.data.batches import load_ids
from minigpt.data.prepare import prepare_workspace
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import DataError, FileSystemError, TokenizerError
from minigpt.io import atomic
from minigpt.io.atomic import atomic_torch_save, atomic_write_text
from minigpt.io.files import os_error
from minigpt.io.workspace import SPLITS, Workspace
from minigpt.logs.metrics import read_metrics

LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 1048576\n"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes (temp files included, so a leftover shows)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def dev_full(monkeypatch):
    """Every atomic write goes to /dev/full: the kernel's own ENOSPC on the first real write."""

    def mkstemp(prefix="", suffix="", dir=None):
        return os.open("/dev/full", os.O_WRONLY), os.path.join(dir, f"{prefix}devfull{suffix}")

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    monkeypatch.setattr(atomic, "tempfile", types.SimpleNamespace(mkstemp=mkstemp))


# -- group 3: typed OS errors ---------------------------------------------------------------


def test_disk_full_on_a_real_tmpfs_exits_2_and_keeps_the_workspace(tmpfs, capsys):
    # GIVEN a prepared workspace on a 1.2 MB filesystem, then a bigger corpus that cannot fit
    ws = tmpfs("size=1200k") / "ws"
    assert run_cli(capsys, "prepare", "--workspace", str(ws), "--source", "demo")[0] == 0
    before = snapshot(ws)
    corpus = Path(ws.parent.parent) / "big.txt"
    corpus.write_text("".join(f"line {i} of a corpus that will not fit\n" for i in range(40_000)), encoding="utf-8")
    # WHEN prepare replaces it
    code, err = run_cli(capsys, "prepare", "--workspace", str(ws), "--source", str(corpus), "--force")
    # THEN exit 2, the file named, and every byte of the old workspace still there
    assert code == 2
    assert "Disk full" in err and "train_ids.pt" in err and "nothing was overwritten" in err
    assert snapshot(ws) == before


def test_read_only_filesystem_exits_2_naming_the_path(tmpfs, capsys):
    ws = tmpfs("size=64k,ro") / "ws"
    code, err = run_cli(capsys, "prepare", "--workspace", str(ws), "--source", "demo")
    assert code == 2
    assert "Read-only file system" in err and str(ws) in err


def test_torch_save_runtime_error_from_a_full_disk_is_typed_by_its_oserror(tmp_path, monkeypatch):
    # torch.save turns the kernel's ENOSPC into "RuntimeError: [enforce fail at inline_container.cc]"
    dev_full(monkeypatch)
    target = tmp_path / "ids.pt"
    target.write_bytes(b"old")
    with pytest.raises(FileSystemError) as info:
        atomic_torch_save(torch.zeros(100_000, dtype=torch.uint8), target)
    assert info.value.errno == errno.ENOSPC
    assert isinstance(info.value.__cause__, RuntimeError)  # the torch path, classified by type
    assert str(target) in info.value.message
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.pt"]


def test_disk_full_while_preparing_leaves_the_old_workspace_untouched(tmp_path, monkeypatch, capsys):
    ws = tmp_path / "ws"
    assert run_cli(capsys, "prepare", "--workspace", str(ws), "--source", "demo")[0] == 0
    before = snapshot(ws)
    dev_full(monkeypatch)
    code, err = run_cli(capsys, "prepare", "--workspace", str(ws), "--source", "demo")
    assert code == 2 and "Disk full" in err and "train_ids.pt" in err
    assert snapshot(ws) == before


def test_workspace_that_is_a_file_exits_2_naming_it(tmp_path, capsys):
    not_a_folder = tmp_path / "runs"
    not_a_folder.write_text("a file where the workspace should be\n")
    code, err = run_cli(capsys, "prepare", "--workspace", str(not_a_folder), "--source", "demo")
    assert code == 2
    assert "Not a directory" in err and f"{not_a_folder} is a file" in err
    assert not_a_folder.read_text() == "a file where the workspace should be\n"


def test_json_report_path_that_is_a_directory_exits_2(tiny_workspace, tmp_path, capsys):
    folder = tmp_path / "reports"
    folder.mkdir()
    code, err = run_cli(
        capsys, "check", "--workspace", str(tiny_workspace.root), "--only", "files", "--json", str(folder)
    )
    assert code == 2
    assert "Is a directory" in err and str(folder) in err
    assert list(folder.iterdir()) == []


def test_permission_denied_on_the_corpus_exits_2(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a\nb\nc\n", encoding="utf-8")
    if os.geteuid() == 0:  # root reads anything: make the OS refuse the open the way it would
        real_open = open

        def refusing_open(file, *args, **kwargs):
            if Path(file) == corpus:
                raise PermissionError(errno.EACCES, "Permission denied", str(file))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr("builtins.open", refusing_open)
    else:
        corpus.chmod(0)
    code, err = run_cli(capsys, "prepare", "--workspace", str(tmp_path / "ws"), "--source", str(corpus))
    assert code == 2
    assert f"Permission denied: cannot read {corpus}" in err
    assert not (tmp_path / "ws").exists()


def test_permission_denied_on_the_tokenizer_is_not_called_corrupt(tmp_path, monkeypatch):
    path = tmp_path / "tok.json"
    CharTokenizer.from_text("abc").save(path)
    monkeypatch.setattr(
        Path, "read_bytes", lambda self: (_ for _ in ()).throw(PermissionError(errno.EACCES, "denied", str(self)))
    )
    with pytest.raises(FileSystemError, match="Permission denied: cannot read") as info:
        CharTokenizer.from_file(path)
    assert info.value.path == str(path) and info.value.errno == errno.EACCES


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (errno.ENOSPC, "Disk full"),
        (errno.EROFS, "Read-only file system"),
        (errno.EACCES, "Permission denied"),
        (errno.EPERM, "Permission denied"),
        (errno.ENOTDIR, "Not a directory"),
        (errno.EISDIR, "Is a directory"),
        (errno.ELOOP, "Symlink loop"),
    ],
)
def test_os_error_is_classified_by_errno_not_text(tmp_path, code, expected):
    # the strerror says nothing useful: only the errno can classify it
    error = os_error(OSError(code, "some localized text"), tmp_path / "x.pt")
    assert error.message.startswith(expected) and str(tmp_path / "x.pt") in error.message
    assert isinstance(error, OSError) and error.errno == code


def test_an_oserror_the_library_did_not_type_is_classified_by_the_cli(monkeypatch, capsys):
    def refused(*args, **kwargs):
        raise OSError(errno.EROFS, "whatever the OS says", "/mnt/runs/tokenizer.json")

    monkeypatch.setattr("minigpt.data.prepare.prepare_workspace", refused)
    code, err = run_cli(capsys, "prepare", "--source", "demo")
    assert code == 2
    assert err.startswith("error: Read-only file system: cannot access /mnt/runs/tokenizer.json")


def test_keyboard_interrupt_exits_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("minigpt.data.prepare.prepare_workspace", interrupted)
    monkeypatch.setattr("minigpt.data.prepare.prepare_workspace", interrupted)
    code, err = run_cli(capsys, "prepare", "--source", "demo")
    assert code == 130 and "interrupted" in err


@pytest.mark.slow
def test_previous_that_is_a_file_exits_2_and_keeps_the_checkpoints(tiny_workspace, capsys):
    root = str(tiny_workspace.root)
    assert run_cli(capsys, "train", "--preset", "debug", "--workspace", root, "--steps", "2")[0] == 0
    before = snapshot(tiny_workspace.checkpoints)
    (tiny_workspace.root / "previous").write_text("in the way\n")
    code, err = run_cli(capsys, "train", "--preset", "debug", "--workspace", root, "--steps", "2")
    assert code == 2 and "previous" in err
    assert snapshot(tiny_workspace.checkpoints) == before


def test_atomic_write_text_into_a_folder_named_like_the_file_is_typed(tmp_path):
    (tmp_path / "out.json").mkdir()
    with pytest.raises(FileSystemError, match="Is a directory"):
        atomic_write_text("{}", tmp_path / "out.json")
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


# -- group 9: true messages -----------------------------------------------------------------


def test_symlink_loop_is_called_a_loop_not_missing(tmp_path):
    loop = tmp_path / "train_ids.pt"
    os.symlink(loop, loop)
    with pytest.raises(DataError, match="symlink loop"):
        load_ids(loop)
    with pytest.raises(TokenizerError, match="symlink loop"):
        CharTokenizer.from_file(loop)
    with pytest.raises(DataError, match="symlink loop"):
        read_metrics(loop)


def test_dangling_symlink_says_where_it_points(tmp_path):
    link = tmp_path / "tok.json"
    os.symlink(tmp_path / "gone.json", link)
    with pytest.raises(TokenizerError, match="symbolic link to .*gone.json, which does not exist"):
        CharTokenizer.from_file(link)


def test_fifo_is_called_a_fifo_and_never_opened(tmp_path):
    fifo = tmp_path / "train_ids.pt"
    os.mkfifo(fifo)  # opening it would block forever
    with pytest.raises(DataError, match="is a FIFO"):
        load_ids(fifo)
    with pytest.raises(TokenizerError, match="is a FIFO"):
        CharTokenizer.from_file(fifo)
    with pytest.raises(DataError, match="is a FIFO"):
        read_metrics(fifo)
    with pytest.raises(DataError, match="is a FIFO"):
        prepare_workspace(fifo, tmp_path / "ws")


def test_git_lfs_pointer_is_named_with_the_fix(tmp_path):
    for path in (tmp_path / "train_ids.pt", tmp_path / "tok.json"):
        path.write_text(LFS_POINTER)
    with pytest.raises(DataError, match="Git LFS pointer") as info:
        load_ids(tmp_path / "train_ids.pt")
    assert "git lfs pull" in info.value.message and "Unsupported operand" not in info.value.message
    with pytest.raises(TokenizerError, match="Git LFS pointer.*git lfs pull"):
        CharTokenizer.from_file(tmp_path / "tok.json")


class Holder:  # a class outside torch's weights-only allow-list
    def __init__(self, ids):
        self.ids = ids


def test_unsafe_id_file_is_refused_with_the_whole_safety_reason(tmp_path):
    path = tmp_path / "train_ids.pt"
    torch.save(Holder(torch.arange(10)), path)
    with pytest.raises(DataError) as info:
        load_ids(path)
    message = info.value.message
    assert "Refused to load" in message and "Holder" in message
    assert "arbitrary code" in message and message.endswith(".")  # whole, not cut mid-sentence
    assert "weights_only set to False" not in str(info.value)


def test_duplicate_tokenizer_characters_are_named_as_duplicates(tmp_path):
    path = tmp_path / "tok.json"
    path.write_text(json.dumps({"chars": ["a", "b", "a"]}), encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"repeats characters: \['a'\]") as info:
        CharTokenizer.from_file(path)
    assert "small" not in str(info.value)


def test_empty_chars_list_is_not_a_tokenizer(tmp_path):
    path = tmp_path / "tok.json"
    path.write_text('{"chars": []}', encoding="utf-8")
    with pytest.raises(TokenizerError, match="Empty tokenizer"):
        CharTokenizer.from_file(path)


def test_empty_id_tensor_is_a_data_error(tmp_path):
    path = tmp_path / "train_ids.pt"
    torch.save(torch.zeros(0, dtype=torch.long), path)
    with pytest.raises(DataError, match="holds 0 IDs"):
        load_ids(path)


# -- group 10: report diff on malformed reports, text with few line breaks --------------------


def write_report(path: Path, checks) -> Path:
    path.write_text(json.dumps({"schema_version": 1, "checks": checks}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("checks", "expected"),
    [
        ({"files": "pass"}, '"checks" is a dict'),
        (["files"], r"checks\[0\] should be an object"),
        ([{"status": "pass"}], r"checks\[0\] should be an object"),
    ],
)
def test_report_diff_on_a_malformed_report_exits_2(tmp_path, capsys, checks, expected):
    good = write_report(tmp_path / "a.json", [{"id": "files", "status": "pass", "summary": "ok"}])
    bad = write_report(tmp_path / "b.json", checks)
    code, err = run_cli(capsys, "report", "diff", str(good), str(bad))
    assert code == 2
    assert "Malformed check report" in err and str(bad) in err
    with pytest.raises(DataError, match=expected):
        load_report(bad)


def test_report_diff_without_summaries_still_diffs(tmp_path, capsys):
    a = write_report(tmp_path / "a.json", [{"id": "files", "status": "pass"}])
    b = write_report(tmp_path / "b.json", [{"id": "files", "status": "fail"}])
    assert run_cli(capsys, "report", "diff", str(a), str(b))[0] == 0


def test_prepare_cuts_an_article_on_two_lines_inside_a_line_with_a_notice(tmp_path, capsys):
    article = tmp_path / "article.txt"
    article.write_text("A headline\n" + "An article that never breaks its lines. " * 280, encoding="utf-8")
    code = main(["prepare", "--workspace", str(tmp_path / "ws"), "--source", str(article)])
    out = capsys.readouterr().out
    assert code == 0
    assert "has only 2 line(s)" in " ".join(out.split())
    ws = Workspace(tmp_path / "ws")
    tok = CharTokenizer.from_file(ws.tokenizer)
    text = "".join(tok.decode(load_ids(ws.ids(s))) for s in SPLITS)
    assert text == article.read_text(encoding="utf-8")


def test_prepare_waits_for_no_one_it_refuses_while_a_training_run_holds_the_workspace(tmp_path):
    from minigpt.data.prepare import prepare_workspace
    from minigpt.errors import WorkspaceLockedError
    from minigpt.io import lock

    with lock.acquire(tmp_path / "ws", "train"):
        with pytest.raises(WorkspaceLockedError, match="train"):
            prepare_workspace("demo", tmp_path / "ws")
    assert not (tmp_path / "ws" / "tokenizer").exists()  # nothing written
    prepare_workspace("demo", tmp_path / "ws")  # free again


def test_files_are_written_with_the_umask_mode_not_0600(tmp_path):
    import os

    from minigpt.io.atomic import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text("x", tmp_path / "a.txt")
        os.umask(0o077)
        atomic_write_text("x", tmp_path / "b.txt")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("mode", ["a", "wb"])
def test_disk_full_while_appending_to_a_log_names_the_log(tmp_path, mode):
    # GIVEN a log opened as the trainer and the watch open theirs, whose writes then reach a full
    # disk (its descriptor replaced by /dev/full: the kernel's own ENOSPC, which names no file)
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    from minigpt.io.files import open_log
    from minigpt.logs.record import write_metrics

    path = tmp_path / "metrics.jsonl"
    log = open_log(path, mode)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, log.fileno())
    os.close(full)
    # WHEN a line is written and flushed
    with pytest.raises(OSError) as info:
        if mode == "a":
            write_metrics(log, {"step": 1, "train_loss": 2.0}, sync=True)
        else:
            log.write(b'{"step": 1}\n')
            log.flush()
    # THEN the error names the log: "Disk full: could not write PATH", not "the OS did not name it"
    message = os_error(info.value, action="write").message
    assert message.startswith(f"Disk full: could not write {path}"), message
    with contextlib.suppress(OSError):  # the buffered line fails again on close
        log.close()
