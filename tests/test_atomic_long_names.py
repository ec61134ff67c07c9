"""A file name of the legal 255 bytes is written atomically: its temporary name beside it is cut to
fit (it passed 255 bytes and the write was refused as "File name too long")."""

from __future__ import annotations

import os

from minigpt.cli import main
from minigpt.io.atomic import atomic_write_text
from minigpt.io.leftovers import remove_dead_temp_files


def test_a_255_byte_name_is_written_and_its_temp_name_fits(tmp_path):
    target = tmp_path / ("a" * 250 + ".json")
    atomic_write_text("{}\n", target)
    assert target.read_text() == "{}\n"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary file left


def test_a_255_byte_name_of_multibyte_characters(tmp_path):
    target = tmp_path / ("é" * 127 + "x")  # 255 bytes in UTF-8
    assert len(os.fsencode(target.name)) == 255
    atomic_write_text("x", target)
    assert target.read_text() == "x"


def test_check_json_to_a_255_byte_name(tiny_workspace, tmp_path):
    report = tmp_path / ("r" * 250 + ".json")
    assert main(["check", "--workspace", str(tiny_workspace.root), "--only", "environment", "--json", str(report)]) == 0
    assert report.is_file()


def test_a_cut_temp_name_is_still_recognised_as_a_dead_writers(tmp_path):
    import subprocess
    import sys

    # GIVEN the temporary name a writer (now gone) made for a 255-byte file name
    target = tmp_path / ("b" * 255)
    code = (
        "import sys; from pathlib import Path; from minigpt.io.atomic import temp_prefix; "
        "print(temp_prefix(Path(sys.argv[1])))"
    )
    prefix = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, check=True)
    dead = tmp_path / (prefix.stdout.strip() + "abcdefgh.tmp")
    assert len(os.fsencode(dead.name)) <= 255
    dead.write_text("half")
    # WHEN the next command cleans up THEN it is known for a dead writer's file and removed
    notices = remove_dead_temp_files([tmp_path])
    assert not dead.exists() and len(notices) == 1
