"""The seven panes in tabs, in the order of the number keys."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import TabbedContent, TabPane

# (tab id, title); key N shows PANES[N - 1]
PANES = [
    ("checks", "Checks"),
    ("device", "Device & files"),
    ("tokenizer", "Tokenizer"),
    ("batches", "Batches"),
    ("gradients", "Gradients"),
    ("loss", "Loss"),
    ("sampler", "Sampler"),
]
# tab labels: all seven fit 80 columns ("2 Device & files" pushed the last tab to "7 Samp")
TAB_LABELS = {"device": "Device"}


def build_panes() -> dict[str, Widget]:
    from ..panes.batches import BatchesPane
    from ..panes.checks import ChecksPane
    from ..panes.device_files import DeviceFilesPane
    from ..panes.gradients import GradientsPane
    from ..panes.loss import LossPane
    from ..panes.sampler import SamplerPane
    from ..panes.tokenizer import TokenizerPane

    classes = {
        "checks": ChecksPane,
        "device": DeviceFilesPane,
        "tokenizer": TokenizerPane,
        "batches": BatchesPane,
        "gradients": GradientsPane,
        "loss": LossPane,
        "sampler": SamplerPane,
    }
    return {pane_id: classes[pane_id]() for pane_id, _ in PANES}  # the contract: no arguments


class PaneTabs(TabbedContent):
    """TabbedContent that follows a focus change only while that focus still stands.

    Textual switches to the tab of a programmatically focused widget when the TabPane.Focused
    message arrives; under load that can be after a pane key moved elsewhere (and the focused
    widget was hidden), which would undo the key press."""

    def _on_tab_pane_focused(self, event: TabPane.Focused) -> None:
        focused = self.screen.focused
        if focused is None or event.tab_pane not in focused.ancestors_with_self:
            event.prevent_default()  # Textual calls the base class's handler too unless prevented
            event.stop()


class Workbench(Vertical):
    def __init__(self, panes: dict[str, Widget], **kwargs) -> None:
        super().__init__(**kwargs)
        self.panes = panes

    def compose(self) -> ComposeResult:
        with PaneTabs(id="tabs", initial="checks"):
            for n, (pane_id, title) in enumerate(PANES, start=1):
                with TabPane(f"{n} {TAB_LABELS.get(pane_id, title)}", id=pane_id):
                    yield self.panes[pane_id]
