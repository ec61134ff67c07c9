"""The engine's metadata is torch-free, options never change under you, the registry is consistent."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from minigpt.checks import FAULTS, CheckOptions, catalog, ordered_ids
from minigpt.checks.registry import implementations
from minigpt.errors import ConfigError


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import sys; {code}; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


def test_check_metadata_faults_options_and_sampler_settings_import_without_torch():
    loaded = _modules_after(
        "import minigpt.checks as c, minigpt.sample.settings, minigpt.data.tokenizer, minigpt.logs.curve; "
        "c.catalog(); c.ordered_ids(); list(c.FAULTS); c.CheckOptions().resolve(); c.Status.PASS"
    )
    assert "torch" not in loaded


@pytest.mark.slow
def test_the_runnable_engine_does_import_torch():  # the test above would pass vacuously if nothing imported it
    assert "torch" in _modules_after("import minigpt.checks as c; c.run_checks")


def test_catalog_read_without_import_matches_the_registered_checks():
    runnable = implementations()
    assert list(runnable) == ordered_ids()
    for cid, info in catalog().items():
        assert (runnable[cid].stage, runnable[cid].depends, runnable[cid].title) == (
            info.stage,
            info.depends,
            info.title,
        )


def test_every_fault_names_checks_that_exist():
    ids = set(ordered_ids())
    for fault in FAULTS.values():
        assert fault.intended in ids and set(fault.also_fails) <= ids


def test_options_are_immutable_and_a_fault_copy_keeps_checkpoint_none(tmp_path):
    # GIVEN a workspace that has a checkpoint, and a user who asked for a fresh model
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "mini_gpt_best.pt").write_bytes(b"x" * 100)
    opts = CheckOptions(workspace=tmp_path, checkpoint="none")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.workspace = "elsewhere"  # type: ignore[misc]
    # WHEN the UI injects a fault by copying the options
    faulted = dataclasses.replace(dataclasses.replace(opts, fault="no_shift"), fault=None)
    # THEN the copy still inspects a fresh model, not the workspace checkpoint
    assert faulted.resolve().checkpoint is None
    assert CheckOptions(workspace=tmp_path).resolve().checkpoint == tmp_path / "checkpoints" / "mini_gpt_best.pt"


@pytest.mark.parametrize("flag", ["checkpoint", "tokenizer", "train_data", "config_path"])
def test_a_path_named_explicitly_that_does_not_exist_is_bad_usage(tmp_path, flag):
    with pytest.raises(ConfigError, match="no such file") as err:
        CheckOptions(workspace=tmp_path, **{flag: tmp_path / "typo.pt"}).resolve()
    assert "typo.pt" in err.value.message


def test_checkpoint_none_does_not_need_a_file(tmp_path):
    assert CheckOptions(workspace=tmp_path, checkpoint="none").resolve().fresh_model_requested


def test_minigpt_help_builds_every_parser_without_importing_torch():
    loaded = _modules_after("from minigpt.cli import build_parser; build_parser().format_help()")
    assert "torch" not in loaded


def test_minigpt_help_runs_and_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "minigpt", "--help"], capture_output=True, text=True, check=True)
    for command in ("prepare", "train", "sample", "check", "report", "import"):
        assert command in out.stdout


def test_both_commands_say_their_version_from_the_one_source():
    from minigpt import __version__

    for module in ("minigpt", "minigpt_tui"):
        out = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, check=True)
        assert out.stdout.strip().endswith(__version__), (module, out.stdout)
