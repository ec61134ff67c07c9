"""Messages that name the file and the cause: tokenizers validated as text on load (BOM, lone
surrogates, non-strings, duplicates, nesting) before anything is archived, unknown prompt
characters naming the tokenizer, paths printed as they are (no rich emoji codes), and --json
written where it says even after a model's chdir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.cli import main
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import TokenizerError, UnknownCharactersError

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


def write_tokenizer(path: Path, raw: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return path


def test_a_tokenizer_with_a_utf8_bom_loads(tmp_path):
    path = write_tokenizer(tmp_path / "tok.json", b"\xef\xbb\xbf" + json.dumps({"chars": ["a", "b"]}).encode())
    assert CharTokenizer.from_file(path).chars == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"chars": ["a", "\\ud800"]}', r"lone UTF-16 surrogates \(chars\[1\] = U\+D800\)"),
        ('{"chars": ["a", 7, null]}', r"chars\[1\] = '7' \(int\), chars\[2\] = 'None' \(NoneType\)"),
        ('{"chars": ["a", "b", "a"]}', r"repeats characters: \['a'\]"),
        ('{"chars": ["a", "bc"]}', r"chars\[1\] = 'bc' \(str\)"),
        ("[" * 200_000, "too deeply nested"),
    ],
)
def test_a_bad_tokenizer_names_its_file_and_the_entry(tmp_path, text, expected):
    path = write_tokenizer(tmp_path / "tok.json", text.encode())
    with pytest.raises(TokenizerError, match=expected) as info:
        CharTokenizer.from_file(path)
    assert str(path) in info.value.message


def test_train_with_a_surrogate_tokenizer_exits_2_before_archiving_the_previous_run(trained_workspace, capsys):
    # GIVEN a workspace with a finished run, whose tokenizer is then edited to hold a lone surrogate
    ws = trained_workspace
    chars = CharTokenizer.from_file(ws.tokenizer).chars
    ws.tokenizer.write_text(json.dumps({"chars": chars[:-1] + ["\ud800"]}), encoding="utf-8")
    best = ws.best_checkpoint.read_bytes()
    # WHEN a fresh run starts THEN exit 2 naming the tokenizer, and the previous run stays in place
    code = main(["train", "--workspace", str(ws.root), "--preset", "debug", "--steps", "2", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and str(ws.tokenizer) in err and "surrogate" in err
    assert ws.best_checkpoint.read_bytes() == best and not (ws.root / "previous").exists()


def test_unknown_prompt_characters_name_the_tokenizer_file(trained_workspace, capsys):
    tokenizer = CharTokenizer.from_file(trained_workspace.tokenizer)
    with pytest.raises(UnknownCharactersError, match=f"not in the vocabulary of {trained_workspace.tokenizer}"):
        tokenizer.encode("snow \u2603")
    code = main(["sample", "--workspace", str(trained_workspace.root), "--prompt", "snow \u2603"])
    assert code == 2 and str(trained_workspace.tokenizer) in capsys.readouterr().err


def test_a_model_spec_is_printed_as_written_not_as_a_rich_emoji(tiny_workspace, tmp_path, capsys):
    bad = tmp_path / "syntax.py"
    bad.write_text("def broken(:\n")
    args = ["check", "--workspace", str(tiny_workspace.root), "--checkpoint", "none", "--no-isolate"]
    main([*args, "--model", f"{bad}:M", "--only", "forward_shapes"])
    out = capsys.readouterr().out
    assert f"{bad}:M" in out and "\u24c2" not in out  # rich renders ":M" after a word as Ⓜ


@pytest.mark.slow
def test_json_goes_where_it_says_after_the_model_changes_directory(tiny_workspace, tmp_path):
    # GIVEN a model module that chdirs elsewhere when imported, and a relative --json path
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    model = tmp_path / "wandering.py"
    model.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(FIXTURES)!r})\n"
        f"os.chdir({str(elsewhere)!r})\n"
        "from tinygpt import TinyGPT, TinyGPTConfig\n"
    )
    vocab = CharTokenizer.from_file(tiny_workspace.tokenizer).vocab_size
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"vocab_size": vocab, "block_size": 32, "n_embd": 32, "n_head": 4, "n_layer": 1}))
    cmd = [sys.executable, "-m", "minigpt", "check", "--workspace", str(tiny_workspace.root), "--no-isolate"]
    cmd += ["--model", f"{model}:TinyGPT", "--config", str(config), "--only", "forward_shapes"]
    cmd += ["--json", "out/report.json"]
    (tmp_path / "out").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240)
    # THEN the report is in ./out of where the command ran, and the message says that path
    assert (tmp_path / "out" / "report.json").is_file(), done.stdout + done.stderr
    assert not (elsewhere / "out").exists()
    assert f"report written to {tmp_path / 'out' / 'report.json'}" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_that_cannot_show_a_character_gets_an_escape_not_a_traceback(tiny_workspace, tmp_path, encoding):
    ws = tmp_path / "w\u00e9\u2603"
    tiny_workspace.root.rename(ws)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": encoding, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "minigpt", "check", "--workspace", str(ws), "--only", "tokenizer_roundtrip"]
    done = subprocess.run(cmd, capture_output=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr.decode(encoding)
    assert b"Traceback" not in done.stderr and b"\\u2713" in done.stdout  # the pass mark, escaped


def test_a_newline_or_an_escape_in_a_path_keeps_the_refusal_on_one_line(tmp_path, capsys):
    # GIVEN a workspace folder whose name holds a newline and a terminal escape (clear the screen)
    ws = tmp_path / "run\nnext\x1b[2J"
    ws.mkdir()
    # WHEN a command refuses it
    code = main(["sample", "--workspace", str(ws)])
    # THEN one line names the folder with both written as escapes, and the causes follow on the next
    err = capsys.readouterr().err
    assert code == 2
    first, causes = err.rstrip("\n").split("\n")
    assert first.startswith("error: Tokenizer file not found: ") and "run\\nnext\\x1b[2J/tokenizer" in first
    assert causes.startswith("  likely causes: ") and "\x1b" not in err


def test_a_newline_in_a_path_keeps_each_check_line_one_line(tmp_path, capsys):
    ws = tmp_path / "run\nnext"
    ws.mkdir()
    main(["check", "--workspace", str(ws), "--only", "files"])
    out = capsys.readouterr().out
    assert "run\\nnext" in out
    assert not any(line.startswith("next") for line in out.splitlines()), out
