"""Property-based edges (Hypothesis): numbers from the whole range of their types, texts with markup,
control characters and lone surrogates, and paths that are links, loops, FIFOs and devices, fed to
every entry point that takes them: the option parsers of `train` and `check`, the sampler (CLI and
the UI's fields), `check`'s input paths and `report diff`. Each answer is a documented exit code
(0, 1 failed check, 2 refused) and never a traceback; nothing outside the workspace changes.
Example counts are bounded so the default tier stays fast; `derandomize` keeps a run repeatable."""

from __future__ import annotations

import math
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from minigpt.cli import main
from minigpt.errors import ConfigError, SamplerSettingsError
from minigpt.sample.generate import filter_logits
from minigpt.sample.settings import SamplerSettings, validate
from minigpt.train.option_ranges import RANGES, parser_for
from minigpt_tui.panes.sampler_form import FIELDS as SAMPLER_FIELDS
from minigpt_tui.panes.sampler_form import read_settings


def _exit_code(argv: list[str]) -> int:
    """`minigpt ARGV`'s exit status: argparse's own refusals (an option with no value) exit 2 too."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


FAST = settings(max_examples=200, deadline=None, derandomize=True)
CLI = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# every float and int a user could type: subnormals, the float and int64 limits, inf, nan, -0.0
any_float = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
edge_int = st.sampled_from([0, 1, -1, 9, 10, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30])
any_int = st.one_of(st.integers(), edge_int)
hostile_text = st.one_of(
    st.text(max_size=60),  # lone surrogates and control characters included
    st.sampled_from(["[/b]", "[bold red]x", ":smiley:", "1e-320", "0x10", "1_000", " 5 ", "٣", "inf", "-nan", ""]),
    st.text(alphabet="[]/\\:\x00\x1b\n\r\t\ud800 ", max_size=20),
)
number_text = st.one_of(any_float.map(repr), any_int.map(str), hostile_text)


EDGE_TEXTS = ["nan", "-nan", "inf", "-inf", "-0.0", "5e-324", "1e-39", str(2**63), str(2**63 - 1), "1e309", "0", "-1"]


@pytest.mark.parametrize("flag", sorted(RANGES))
@settings(max_examples=60, deadline=None, derandomize=True)
@given(text=st.one_of(st.sampled_from(EDGE_TEXTS), number_text))
def test_every_option_parser_returns_a_value_in_range_or_refuses_naming_the_flag(flag, text):
    wanted = RANGES[flag]
    try:
        value = parser_for(flag)(text)
    except ConfigError as exc:
        assert exc.message.startswith(f"{flag} must be ")
        assert len(exc.message) < 300  # a pasted text is shortened, never echoed whole
        return
    # accepted: a number of the option's kind that the range itself accepts, never NaN
    assert isinstance(value, int) if wanted.kind == "int" else isinstance(value, float)
    assert not math.isnan(value)
    assert wanted.lo <= value <= wanted.hi
    assert wanted.problem(value) is None


@FAST
@given(
    temperature=st.one_of(any_float, st.integers(min_value=-5, max_value=5)),
    top_k=st.one_of(st.none(), any_int),
    top_p=any_float,
    penalty=any_float,
    logits=st.lists(st.floats(min_value=-1e4, max_value=1e4), min_size=2, max_size=12),
)
@example(temperature=1e-39, top_k=None, top_p=1.0, penalty=1.0, logits=[60.0, 59.0])  # divides into inf
@example(temperature=1.0, top_k=None, top_p=5e-324, penalty=1.0, logits=[1.0, 1.0])
@example(temperature=1.0, top_k=None, top_p=1.0, penalty=1e300, logits=[-5.0, -3.0])  # every token to -inf
@example(temperature=1.0, top_k=2**63, top_p=1.0, penalty=1e6, logits=[1e4, -1e4])
def test_settings_the_validator_accepts_always_give_a_distribution_to_sample_from(
    temperature, top_k, top_p, penalty, logits
):
    settings_ = SamplerSettings(temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=penalty, seed=0)
    try:
        validate(settings_, vocab_size=len(logits))
    except SamplerSettingsError:
        return  # refused with its range: the CLI exits 2, the UI shows it inline
    filtered = filter_logits(torch.tensor(logits), [0, 1, 1], settings_)
    probs = torch.softmax(filtered, dim=-1)
    assert torch.isfinite(probs).all() and abs(float(probs.sum()) - 1.0) < 1e-4
    torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(0))  # what generate() calls


@FAST
@given(texts=st.fixed_dictionaries({name: hostile_text for name, _, _ in SAMPLER_FIELDS}))
def test_the_sampler_pane_fields_take_any_text_without_raising(texts):
    values, errors, notes = read_settings(texts, vocab_size=65)
    # each field either parsed or carries an inline error; a rejected column is never run
    assert set(values) | set(errors) == {name for name, _, _ in SAMPLER_FIELDS}
    assert all(isinstance(message, str) and message for message in errors.values())
    if not errors:  # a column the pane would run: the sampler's own validator accepts it
        validate(SamplerSettings(**values), vocab_size=65)


@CLI
@given(
    flag=st.sampled_from(["--temperature", "--top-k", "--top-p", "--repetition-penalty", "--seed", "--max-new-tokens"]),
    text=number_text,
)
def test_sample_cli_answers_any_number_with_an_exit_code_never_a_traceback(trained_workspace, capsys, flag, text):
    if flag == "--max-new-tokens" and text.strip().isdigit() and int(text) > 4:
        text = "4"  # a valid large count would only take long
    argv = ["sample", "--workspace", str(trained_workspace.root), "--max-new-tokens", "2", "--prompt", "The "]
    code = _exit_code([*argv, flag, text])
    out = capsys.readouterr()
    assert code in (0, 2), out.err
    assert "Traceback" not in out.err + out.out


def _path_kinds(root: Path) -> dict[str, Path]:
    """Inputs that are no regular file, made under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    kinds = {
        "missing": root / "missing.pt",
        "folder": root / "a folder",
        "fifo": root / "fifo",
        "loop": root / "loop1",
        "dangling": root / "dangling",
        "markup": root / "run[bold]x[red]:smiley:",
        "control": root / "line\nbreak\x1b[31m",
        "empty": root / "empty.pt",
        "text": root / "text.pt",
        "dev_null": Path(os.devnull),
    }
    kinds["folder"].mkdir()
    os.mkfifo(kinds["fifo"])
    os.symlink(root / "loop2", kinds["loop"])
    os.symlink(kinds["loop"], root / "loop2")
    os.symlink(root / "nowhere", kinds["dangling"])
    kinds["markup"].write_text("[bold]not a checkpoint[/bold]")
    kinds["control"].write_bytes(b"\x00\x01\xff")
    kinds["empty"].write_bytes(b"")
    kinds["text"].write_text("hello")
    return kinds


def _tree(root: Path) -> dict[str, tuple]:
    """What a command could change under `root`: each entry's kind, size and mtime."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            s = p.lstat()
            seen[str(p)] = (stat.S_IFMT(s.st_mode), s.st_size, s.st_mtime_ns)
    return seen


@CLI
@given(
    flag=st.sampled_from(["--checkpoint", "--tokenizer", "--train-data", "--metrics", "--config"]),
    kind=st.sampled_from(
        ["missing", "folder", "fifo", "loop", "dangling", "markup", "control", "empty", "text", "dev_null"]
    ),
)
def test_check_answers_any_kind_of_input_path_and_changes_nothing_outside(tiny_workspace, tmp_path, capsys, flag, kind):
    outside = tmp_path / "outside"
    shutil.rmtree(outside, ignore_errors=True)
    paths = _path_kinds(outside)
    before = _tree(outside)
    code = _exit_code(["check", "--workspace", str(tiny_workspace.root), flag, str(paths[kind]), "--skip-overfit"])
    out = capsys.readouterr()
    assert code in (0, 1, 2), out.err
    assert "Traceback" not in out.err + out.out
    assert _tree(outside) == before


@CLI
@given(
    kind=st.sampled_from(["fifo", "loop", "dangling", "markup", "control", "empty", "text", "folder"]),
    content=st.one_of(
        st.just('{"checks": [{"name": "files", "status": NaN}]}'),
        st.just('{"checks": "[/b]"}'),
        st.just("[" * 5000),
        hostile_text,
    ),
)
def test_report_diff_answers_any_file_with_an_exit_code(tmp_path, capsys, kind, content):
    outside = tmp_path / "outside"
    shutil.rmtree(outside, ignore_errors=True)
    paths = _path_kinds(outside)
    written = outside / "report.json"
    written.write_text(content, errors="surrogatepass")
    code = _exit_code(["report", "diff", str(written), str(paths[kind])])
    out = capsys.readouterr()
    assert code == 2, out  # neither side is a report: the comparison cannot be made
    assert "Traceback" not in out.err + out.out
