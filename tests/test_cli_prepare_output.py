"""What `minigpt --help` and `minigpt prepare` print for people: no developer notes, no repr-like runs."""

from __future__ import annotations

import pytest

from minigpt.cli import build_parser
from minigpt.cli.prepare import describe_files, show_chars


def test_help_describes_the_tool_not_its_modules(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert "add_arguments" not in out and "one module per subcommand" not in out
    assert "train a small character-level GPT" in out and "exit codes: 0 success" in out


def test_characters_beyond_train_are_listed_one_by_one_never_like_a_repr():
    assert show_chars(["'", "P", ")"]) == "' P )"  # was printed as 'P) and read as Python syntax
    assert show_chars([" ", "\u00a0", "\t"]) == "space U+00A0 U+0009"
    assert show_chars(list("abcdefghijklmnopqrstuvwxyz")).endswith("t … (+6 more)")


def test_source_files_name_their_folder_once():
    files = ["/d/wt2/wiki.train.tokens", "/d/wt2/wiki.valid.tokens"]
    assert describe_files(files) == "wiki.train.tokens, wiki.valid.tokens in /d/wt2"
    assert describe_files([]) == "Python's pydoc topics"
