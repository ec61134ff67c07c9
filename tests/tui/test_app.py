"""The app shell: pane keys, inputs keep their digits, help, quit, export, palette, worker errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from textual.widgets import Input, TabbedContent

from minigpt_tui.screens.confirm import ConfirmScreen
from minigpt_tui.screens.help import HelpScreen
from minigpt_tui.widgets.key_footer import KeyFooter
from minigpt_tui.workbench import PANES
from tests.waiting import eventually, stays, wait_until

from .conftest import SIZE, record_notifications, wait_for_report


@pytest.mark.slow  # a few seconds: the full run (CI) only
async def test_number_keys_show_the_seven_panes_in_order(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        tabs = app.query_one(TabbedContent)
        for n, (pane_id, _) in enumerate(PANES, start=1):
            await pilot.press(str(n))

            def shown(pane_id=pane_id, n=n):
                assert tabs.active == pane_id, (app.focused, app.screen, n)

            await eventually(pilot, shown)
        assert [p for p, _ in PANES] == ["checks", "device", "tokenizer", "batches", "gradients", "loss", "sampler"]
        assert app.is_running


@pytest.mark.slow
async def test_digits_typed_into_an_input_stay_in_the_input(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        field = app.query_one("#tok-input", Input)
        field.focus()
        await pilot.press("1", "2", "q", "f")
        await wait_until(pilot, lambda: field.value == "12qf", what="the typed keys in the field")
        assert field.value == "12qf"
        assert app.query_one(TabbedContent).active == "tokenizer"
        assert app.is_running
        await pilot.press("escape", "1")  # leaving the field gives the keys back
        await wait_until(pilot, lambda: app.query_one(TabbedContent).active == "checks", what="the checks pane")


async def test_help_screen_opens_and_closes(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="the help screen to close")


async def test_q_quits(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, what="the app to quit")


async def test_export_writes_the_report_json_into_the_workspace(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("ctrl+e")
        await wait_until(pilot, lambda: list((workspace / "reports").glob("check-*.json")), what="the report file")
        data = json.loads(next((workspace / "reports").glob("check-*.json")).read_text())
        assert data["exit_code"] == 0
        assert [c["id"] for c in data["checks"]][:2] == ["environment", "files"]


@pytest.mark.slow
async def test_letters_never_export_or_quit_from_the_sampler_form(workspace, make_app):
    # GIVEN the sampler pane, the focus on its Stop button (as after a click or a few tabs)
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("7")
        await pilot.pause()
        prompt = app.query_one("#prompt", Input)
        app.query_one("#stop").focus()
        await pilot.pause()
        # WHEN a person types words
        await pilot.press("e", "q", "u", "i", "t")
        # THEN they land in the prompt: no report written, the app still running
        await wait_until(
            pilot, lambda: prompt.value.endswith("equit") and app.focused is prompt, what="the letters in the prompt"
        )
        assert app.is_running
        await stays(
            pilot,
            lambda: app.is_running and not list((workspace / "reports").glob("check-*.json")),
            0.3,
            what="no export and the app running",
        )


async def test_e_alone_exports_nothing_anywhere(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("e")
        await stays(
            pilot,
            lambda: not (workspace / "reports").exists() or not list((workspace / "reports").glob("check-*.json")),
            0.5,
            what="no report file",
        )


async def test_in_the_sampler_the_first_tab_or_escape_lands_in_the_prompt(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("7")
        tabs = app.query_one(TabbedContent).query_one("Tabs")
        prompt = app.query_one("#prompt", Input)
        # the scroll keys work at once, digits still switch panes
        await wait_until(pilot, lambda: app.focused is app.panes["sampler"], what="the focus on the sampler pane")
        await pilot.press("tab")
        assert app.focused is prompt

        # in the field, the one key the footer shows is the way out (every other key is the field's)
        def field_keys():
            assert [(k.key, k.description) for k in app.query_one(KeyFooter).keys] == [("escape", "Leave field")]

        await eventually(pilot, field_keys)
        await pilot.press("escape")  # out of the field: back to the tab bar
        assert app.focused is tabs

        def bar_keys():
            assert "escape" not in [k.key for k in app.query_one(KeyFooter).keys] and app.query_one(KeyFooter).keys

        await eventually(pilot, bar_keys)
        await pilot.press("escape")  # and back in
        assert app.focused is prompt


async def test_help_scrolls_with_the_arrow_keys_at_once(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
        box = app.screen.query_one("#help-box")
        # 80x24 does not hold the whole table
        await wait_until(pilot, lambda: box.max_scroll_y > 0, what="the help table to overflow")
        await pilot.press("down", "down", "down")
        await wait_until(pilot, lambda: box.scroll_y > 0, what="the help to scroll down")
        await pilot.press("end")
        await wait_until(pilot, lambda: box.scroll_y == box.max_scroll_y, what="the help to scroll to its end")


async def test_palette_has_one_command_per_check_and_fault(workspace, make_app):
    from minigpt.checks import FAULTS, ordered_ids

    app = make_app(workspace)
    async with app.run_test(size=SIZE):
        titles = [title for title, _, _ in app.palette_commands()]
    for cid in ordered_ids():
        assert f"Run check: {cid}" in titles
    for name in FAULTS:
        assert f"Inject fault: {name}" in titles
    for title in ("Run all checks", "Start/stop training", "Export the report", "Clear fault"):
        assert title in titles


async def test_palette_pane_commands_switch_panes(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        commands = {title: callback for title, _, callback in app.palette_commands()}
        commands["Show pane 5: Gradients"]()
        await wait_until(pilot, lambda: app.query_one(TabbedContent).active == "gradients", what="the gradients pane")


async def test_a_failing_worker_is_notified_and_the_app_keeps_running(workspace, make_app):
    # GIVEN a tokenizer file that is not JSON (the tokenizer pane's loader raises)
    (workspace / "tokenizer" / "char_tokenizer.json").write_text("garbage " * 20)
    app = make_app(workspace)
    notified = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        report = await wait_for_report(pilot, app)
        await wait_until(
            pilot, lambda: any(severity == "error" for severity, _ in notified), what="an error notification"
        )
        # THEN the error is visible, the checks name the broken file, and the app still answers keys
        assert app.is_running
        assert report.by_id()["tokenizer_roundtrip"].status.value == "fail"
        await pilot.press("2")
        await wait_until(pilot, lambda: app.query_one(TabbedContent).active == "device", what="the device pane")


async def test_a_check_run_that_raises_is_notified_and_the_app_keeps_running(workspace, make_app, monkeypatch):
    import minigpt.checks

    def broken(*args, **kwargs):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(minigpt.checks, "run_checks", broken)
    app = make_app(workspace)
    notified = record_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot, lambda: any("engine exploded" in message for _, message in notified), what="the error notification"
        )
        assert app.is_running
        await pilot.press("4")
        await wait_until(pilot, lambda: app.query_one(TabbedContent).active == "batches", what="the batches pane")


async def test_without_a_workspace_the_app_asks_before_building_the_demo(tmp_path, make_app):
    app = make_app(tmp_path / "empty")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the demo question")
        await pilot.press("n")  # open as it is: the files check says what is missing
        report = await wait_for_report(pilot, app)
        assert report.by_id()["files"].status.value == "fail"
        assert app.is_running


@pytest.mark.slow  # a few seconds: the full run (CI) only
def test_tmux_drive_script_runs_the_real_program(workspace, tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    import pytest

    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed")
    script = Path(__file__).with_name("tmux_drive.sh")
    done = subprocess.run(
        ["bash", str(script), str(workspace), str(tmp_path / "captures")], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "selected device" in (tmp_path / "captures" / "2.txt").read_text()


@pytest.mark.slow
async def test_demo_flag_builds_trains_and_opens_the_demo_workspace(tmp_path, make_app, monkeypatch):
    from minigpt_tui import demo

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    app = make_app(".", demo_mode=True, demo_steps=20)
    async with app.run_test(size=SIZE) as pilot:
        report = await wait_for_report(pilot, app)
        assert app.workspace.root == tmp_path / "cache" / "minigpt-tui" / "demo"
        assert demo.is_ready(app.workspace.root)
        assert report.by_id()["checkpoint_load"].values["step"] == 20
        assert report.exit_code == 0


@pytest.mark.slow
async def test_q_cancels_the_demo_build_and_an_incomplete_demo_is_rebuilt(tmp_path, make_app, monkeypatch):
    from textual.widgets import Label

    from minigpt_tui import demo
    from minigpt_tui.screens.setup import DemoSetupScreen

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    app = make_app(".", demo_mode=True, demo_steps=100_000)
    async with app.run_test(size=(80, 24)) as pilot:

        def training() -> bool:
            return isinstance(app.screen, DemoSetupScreen) and "training step" in str(
                app.screen.query_one("#setup-stage", Label).render()
            )

        await wait_until(pilot, training, what="the demo to train")
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, what="the app to quit")
    root = tmp_path / "cache" / "minigpt-tui" / "demo"
    assert not demo.is_ready(root) and demo.is_incomplete(root)

    # WHEN the demo opens again, THEN it is rebuilt (with a notice), not opened half-trained
    again = make_app(".", demo_mode=True, demo_steps=20)
    async with again.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(again.screen, DemoSetupScreen), what="the demo build to start")
        reason = str(again.screen.query_one("#setup-reason").render())
        assert "rebuilding" in reason and "incomplete" in reason
        report = await wait_for_report(pilot, again)
        assert report.by_id()["checkpoint_load"].values["step"] == 20
        assert demo.is_ready(root)


async def test_header_names_the_judged_checkpoint_and_fits_80_columns(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for_report(pilot, app)
        ckpt = app.session.last_report.judged_file("checkpoint")
        assert ckpt is not None and ckpt.step == 60
        assert app.sub_title.startswith("ckpt step 60 ")
        assert len(f"{app.title} — {app.sub_title}") <= 80 - 18
        assert app.sub_title.endswith(str(workspace)[-8:])  # the path's end survives the cut
        await pilot.resize_terminal(200, 40)
        # room enough: the whole path
        await wait_until(pilot, lambda: app.sub_title.endswith(f"· {workspace}"), what="the whole path in the header")


def test_header_subtitle_cuts_the_path_from_the_left():
    from minigpt_tui.header import header_subtitle

    text = header_subtitle(80, "minigpt-tui", "no_shift", "ckpt step 1200 09:14", "cpu", "/home/u/runs/" + "x" * 60)
    assert text == "FAULT no_shift · ckpt step 1200 09:14 · cpu"  # no room left for the path
    text = header_subtitle(80, "minigpt-tui", None, "ckpt step 1200 09:14", "cpu", "/home/u/runs/" + "x" * 60)
    assert text.startswith("ckpt step 1200 09:14 · cpu · …")
    assert text.endswith("xxxx") and len("minigpt-tui — " + text) <= 62


@pytest.mark.slow
async def test_a_checkpoint_moved_away_by_a_cli_run_makes_the_header_and_status_say_so(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for_report(pilot, app)
        judged = app.session.last_report.judged_file("checkpoint")
        assert judged is not None and f"ckpt step {judged.step}" in app.sub_title
        # WHEN another terminal's `minigpt train` moves the run to previous/
        moved = workspace / "previous" / "20260101-000000" / "checkpoints"
        moved.mkdir(parents=True)
        os.replace(judged.path, moved / Path(judged.path).name)
        # THEN the header and the checks' status stop describing it as current
        await wait_until(pilot, lambda: "moved away" in app.sub_title, what="the header to notice")
        assert "r re-checks" in app.sub_title
        status = str(app.panes["checks"].query_one("#checks-status").render())
        assert status.startswith("STALE (the checkpoint these results judged was moved away since")


def test_judged_change_names_a_rewritten_or_missing_checkpoint(tmp_path):
    from minigpt.checks import FileIdentity
    from minigpt_tui.header import judged_change

    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"12345")
    st = path.stat()
    same = FileIdentity("checkpoint", str(path), st.st_size, st.st_mtime, step=3)
    assert judged_change(same) is None
    path.write_bytes(b"123456")
    assert judged_change(same) == "replaced"
    path.unlink()
    assert judged_change(same) == "moved away"
    assert judged_change(None) is None


async def test_a_demo_that_cannot_be_built_says_where_and_why_and_stays(tmp_path, make_app, monkeypatch):
    # GIVEN a cache folder that cannot hold the demo (a file stands where its folder must be)
    from minigpt_tui import demo

    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    monkeypatch.setattr(demo, "demo_dir", lambda: blocker / "demo")
    app = make_app(blocker / "demo", demo_mode=True)
    async with app.run_test(size=SIZE) as pilot:
        # THEN a dialog names the folder and the cause, and stays until answered
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the failure dialog")
        text = str(app.screen.question)
        assert str(blocker / "demo") in text and "Not a directory" in text and "XDG_CACHE_HOME" in text
        await stays(
            pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.is_running, 0.5, what="the dialog and the app"
        )
        await pilot.press("y")  # Quit
        await wait_until(pilot, lambda: not app.is_running, what="the app to quit")
