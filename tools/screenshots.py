"""Save SVG screenshots of the panes into assets/ for the README (not a test).

python3 tools/screenshots.py [WORKSPACE]   (default: the demo workspace, built on first use)
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minigpt_tui import demo  # noqa: E402
from minigpt_tui.app import MiniGPTApp  # noqa: E402

ASSETS = ROOT / "assets"
SIZE = (120, 40)


async def wait(pilot, condition, timeout=180.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        await pilot.pause(0.1)


async def shoot(workspace: Path) -> None:
    ASSETS.mkdir(exist_ok=True)
    app = MiniGPTApp(workspace, device="cpu", skip_overfit=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait(pilot, lambda: app.session.last_report is not None)
        await pilot.pause(0.5)
        for key, name in [("1", "checks"), ("2", "device"), ("5", "gradients"), ("6", "loss")]:
            await pilot.press(key)
            await pilot.pause(1.0)
            app.save_screenshot(str(ASSETS / f"{name}.svg"))
        await pilot.press("3")
        await pilot.pause(0.5)
        app.query_one("#tok-input").focus()
        await pilot.press(*"Hello, wörld ☃")
        await pilot.pause(0.3)
        app.save_screenshot(str(ASSETS / "tokenizer.svg"))
        await pilot.press("escape", "f")
        await wait(pilot, lambda: type(app.screen).__name__ == "FaultMenuScreen")
        await pilot.pause(0.3)
        app.save_screenshot(str(ASSETS / "faults.svg"))
        menu = app.screen.query_one("#fault-list")
        menu.highlighted = menu.get_option_index("no_shift")
        previous = app.session.last_report
        await pilot.press("enter")
        await wait(pilot, lambda: app.session.last_report is not previous)
        await pilot.press("4")
        await pilot.pause(1.0)
        app.save_screenshot(str(ASSETS / "batches.svg"))
        await pilot.press("1")
        await pilot.pause(0.5)
        app.save_screenshot(str(ASSETS / "checks-no-shift.svg"))
    print("\n".join(sorted(str(p.relative_to(ROOT)) for p in ASSETS.glob("*.svg"))))


def main() -> None:
    if len(sys.argv) > 1:
        workspace = Path(sys.argv[1])
    else:
        workspace = demo.demo_dir()
        if not demo.is_ready(workspace):
            demo.build_demo(workspace, lambda stage, f: print(f"{f:4.0%} {stage}", end="\r"), lambda: False)
    asyncio.run(shoot(workspace))


if __name__ == "__main__":
    main()
