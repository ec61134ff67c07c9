"""The seven panes in tabs, in the order of the number keys."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, TypeVar

from textual.binding import Binding
from textual.widget import MountError, Widget
from textual.widgets import Input, TabbedContent, TabPane

from minigpt_tui.widgets.blank import BLANK_CONTAINERS

if TYPE_CHECKING:  # a pane's module is imported when the pane is built
    from minigpt_tui.panes.checks import ChecksPane
    from minigpt_tui.panes.loss import LossPane

W = TypeVar("W", bound=Widget)

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


# (module, class) per pane: a pane's module is imported when the pane is built, so the first
# frame loads only the checks pane
PANE_CLASSES = {
    "checks": ("minigpt_tui.panes.checks", "ChecksPane"),
    "device": ("minigpt_tui.panes.device_files", "DeviceFilesPane"),
    "tokenizer": ("minigpt_tui.panes.tokenizer", "TokenizerPane"),
    "batches": ("minigpt_tui.panes.batches", "BatchesPane"),
    "gradients": ("minigpt_tui.panes.gradients", "GradientsPane"),
    "loss": ("minigpt_tui.panes.loss", "LossPane"),
    "sampler": ("minigpt_tui.panes.sampler", "SamplerPane"),
}


def build_panes(ids: Iterable[str] | None = None) -> dict[str, Widget]:
    """New panes: all seven, or those in `ids`, in key order."""
    wanted = set(ids) if ids is not None else set(PANE_CLASSES)
    panes = {}
    for pane_id, _ in PANES:
        if pane_id in wanted:
            module, name = PANE_CLASSES[pane_id]
            panes[pane_id] = getattr(import_module(module), name)()  # the contract: no arguments
    return panes


class Panes(Mapping[str, Widget]):
    """The panes built so far, by tab id in key order. The app reaches the two it speaks to through
    typed properties and their public methods; the others only hear the messages it hands on."""

    def __init__(self) -> None:
        self._by_id: dict[str, Widget] = {}

    def add(self, panes: dict[str, Widget]) -> None:
        self._by_id.update(panes)

    def __getitem__(self, pane_id: str) -> Widget:
        return self._by_id[pane_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    @property
    def checks(self) -> ChecksPane | None:
        if "checks" not in self._by_id:
            return None  # not built yet: its module is not imported for nothing
        from minigpt_tui.panes.checks import ChecksPane

        return self._typed("checks", ChecksPane)

    @property
    def loss(self) -> LossPane | None:
        if "loss" not in self._by_id:
            return None  # not built yet: its module is not imported for nothing
        from minigpt_tui.panes.loss import LossPane

        return self._typed("loss", LossPane)

    def _typed(self, pane_id: str, kind: type[W]) -> W | None:
        pane = self._by_id.get(pane_id)
        if pane is not None and not isinstance(pane, kind):
            raise TypeError(f"the {pane_id} pane is a {type(pane).__name__}, not a {kind.__name__}")
        return pane


class PaneTab(TabPane):
    """A pane's tab page, drawn as its background (widgets/blank.py): it has padding, no border."""

    BLANK = BLANK_CONTAINERS


class AfterFirstFrame(Widget):
    """Mounts its pane in its place after the first refresh (Textual's `Lazy`, plus a guard: a quit
    in that instant must not try to mount into a tab that is being torn down)."""

    DEFAULT_CSS = "AfterFirstFrame { display: none; }"

    def __init__(self, pane: Widget) -> None:
        super().__init__()
        self._pane = pane

    def on_mount(self) -> None:
        self.call_after_refresh(self._mount_pane)

    async def _mount_pane(self) -> None:
        parent = self.parent
        if not isinstance(parent, Widget) or not self.is_attached or not self.app.is_running:
            return
        try:
            await parent.mount(self._pane, after=self)
            await self.remove()
        except MountError:  # the app is closing under us: nothing to show
            return


class FocusFollowingTabs(TabbedContent):
    """TabbedContent that follows a focus change only while that focus still stands.

    Textual switches to the tab of a programmatically focused widget when the TabPane.Focused
    message arrives; under load that can be after a pane key moved elsewhere (and the focused
    widget was hidden), which would undo the key press. A handler of the subclass runs before
    TabbedContent's own, and `prevent_default` skips the base class's handler."""

    def on_tab_pane_focused(self, event: TabPane.Focused) -> None:
        focused = self.screen.focused
        if focused is None or event.tab_pane not in focused.ancestors_with_self:
            event.prevent_default()
            event.stop()


class Workbench(FocusFollowingTabs):
    """The seven tabs with the panes given (the checks pane drawn with the first frame, the others
    mounted after it); a pane not given leaves its tab empty until `add_panes`. The tabs widget
    itself, a child of the screen: Textual draws every container between the screen and a pane in
    full on every frame, so the stack is kept short."""

    BLANK = BLANK_CONTAINERS  # drawn as its background (widgets/blank.py)

    # the page keys pressed on the tab bar (or anywhere that does not scroll itself) page the
    # shown pane, home and end take it to its top and end: without a mouse they are the only way
    # to its lower half
    BINDINGS = [
        Binding("pagedown", "scroll_pane('page_down')", "Page down", show=False),
        Binding("pageup", "scroll_pane('page_up')", "Page up", show=False),
        Binding("home", "scroll_pane('scroll_top', 'scroll_home')", "Top", show=False),
        Binding("end", "scroll_pane('scroll_bottom', 'scroll_end')", "End", show=False),
    ]

    def __init__(self, panes: dict[str, Widget], **kwargs) -> None:
        kwargs.setdefault("id", "tabs")
        super().__init__(initial="checks", **kwargs)
        self.panes = panes
        for n, (pane_id, title) in enumerate(PANES, start=1):
            pane = panes.get(pane_id)
            # the hidden panes mount after the first frame (Lazy): their widgets styled before it
            # would delay the first paint
            children = [] if pane is None else [pane if pane_id == "checks" else AfterFirstFrame(pane)]
            self.compose_add_child(PaneTab(f"{n} {TAB_LABELS.get(pane_id, title)}", *children, id=pane_id))

    def action_scroll_pane(self, *actions: str) -> None:
        """The shown pane's own scroll key: its first widget that scrolls and takes keys (a table,
        the pane itself; never a text field) gets the focus and the key, as if it had had it. The
        first of `actions` the widget has runs (a table's top is `scroll_top`, a pane's `scroll_home`)."""
        if not self.active:
            return
        shown = self.get_pane(self.active).query("*")  # the pane and what it holds, in order
        scrolls = [w for w in shown if w.allow_vertical_scroll and not isinstance(w, Input)]
        target = next((w for w in scrolls if w.focusable), scrolls[0] if scrolls else None)
        if target is None:
            return  # all of it is in view
        if target.focusable:
            target.focus()
        run = next((getattr(target, f"action_{a}") for a in actions if hasattr(target, f"action_{a}")), None)
        if run is not None:
            run()

    def add_panes(self, panes: dict[str, Widget]) -> None:
        """Mount panes built after the first frame into their empty tabs."""
        if not self.is_attached or not self.app.is_running:
            return  # a quit in that instant: nothing to show
        try:
            for pane_id, pane in panes.items():
                self.query_one(f"TabPane#{pane_id}", TabPane).mount(pane)
        except MountError:  # the app is closing under us
            return
