"""The lines `minigpt check` prints for people: one result a line (wrapped to the terminal), a
run of checks skipped for the same reason as one line, and why the demo's warnings are expected."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from minigpt.checks.result import STATUS_STYLE, CheckResult, Status
from minigpt.cli.output import hanging, wrap_width
from minigpt.data.corpus import DEMO_EXPECTED, demo_text
from minigpt.data.tokenizer import CharTokenizer, fingerprint_chars
from minigpt.errors import MiniGPTError, one_line
from minigpt.io.workspace import Workspace

ID_WIDTH = 24  # the check-id column


class ResultLines:
    """The human-readable lines of the results, as they arrive: a status, the id and the summary,
    wrapped to the terminal; causes and fixes under a failure (under a warning too with --verbose).
    Checks skipped one after another for the same reason share one line: seventeen loop checks
    without a watched loop are one line naming the reason once. The JSON report keeps every result."""

    def __init__(self, console: Console, *, verbose: bool, workspace: Workspace) -> None:
        self.console = console
        self.width = wrap_width(console)
        self.verbose = verbose
        self.workspace = workspace
        self.skipped: list[CheckResult] = []  # a run of skips with one summary, not printed yet
        self.expected_warnings = 0  # warnings the demo always gets (counted for the closing line)
        self._expected: dict[str, str] | None = None
        # checks skipped only because a check they need did not pass, under the first check of the
        # chain that did not: one line each at the end, not a line per link of the chain
        self.blocked: dict[str, list[CheckResult]] = {}
        self._root: dict[str, str] = {}
        self._status: dict[str, Status] = {}

    def add(self, r: CheckResult) -> None:
        self._status[r.id] = r.status
        waited_on = r.values.get("blocked_by") if r.status is Status.SKIP else None
        if waited_on and not r.values.get("asked_for"):
            root = self._root.get(waited_on[0], waited_on[0])
            self._root[r.id] = root
            self.blocked.setdefault(root, []).append(r)
            return
        if r.status is Status.SKIP and (not self.skipped or self.skipped[0].summary == r.summary):
            self.skipped.append(r)
            return
        self.flush()
        if r.status is Status.SKIP:
            self.skipped.append(r)
            return
        self._line(r.status, r.id, r.summary, r.duration_s)
        if r.status in (Status.FAIL, Status.ERROR) or (self.verbose and r.status is Status.WARN):
            for c in r.causes:
                self._note("cause: ", c)
            for f in r.fixes:
                self._note("try:   ", f)
        expected = self.expected().get(r.id) if r.status is Status.WARN else None
        if expected:
            self.expected_warnings += 1
            self._note("", expected, style="")

    def finish(self) -> None:
        """Print what is held back: the last run of skips, then, per check that did not pass, the
        checks that were not run because of it."""
        self.flush()
        for root, group in self.blocked.items():
            status = self._status.get(root)
            why = f"{root} {status.value}" if status is not None else root
            names = ", ".join(r.id for r in group)
            listed = names if len(group) <= 3 or self.verbose else f"{', '.join(r.id for r in group[:3])}, …"
            self._line(Status.SKIP, f"{len(group)} checks", f"not run: they need {why} ({listed})", 0.0)
        self.blocked = {}

    def flush(self) -> None:
        """Print the run of skips held back (one line for several)."""
        group, self.skipped = self.skipped, []
        if len(group) == 1:
            self._line(Status.SKIP, group[0].id, group[0].summary, group[0].duration_s)
        elif group:
            stages = {r.stage for r in group}
            what = f"{len(group)} {stages.pop()} checks" if len(stages) == 1 else f"{len(group)} checks"
            self._line(Status.SKIP, what, group[0].summary, sum(r.duration_s for r in group))
            if self.verbose:
                self._note("checks: ", ", ".join(r.id for r in group))

    def expected(self) -> dict[str, str]:
        """The demo's expected warnings (`DEMO_EXPECTED`), when the workspace's tokenizer is the demo
        corpus's: a workspace does not record its source, but the vocabulary of this Python's
        documentation is its own. Read once, at the first warning that could be one."""
        if self._expected is None:
            try:
                ours = CharTokenizer.from_file(self.workspace.tokenizer).fingerprint
            except MiniGPTError:  # no readable tokenizer: the checks say so themselves
                ours = None
            demo = ours is not None and ours == fingerprint_chars(sorted(set(demo_text())))
            self._expected = dict(DEMO_EXPECTED) if demo else {}
        return self._expected

    def _line(self, status: Status, what: str, summary: str, seconds: float) -> None:
        head = Text.assemble((f"{status.mark} {status.value:<5}", STATUS_STYLE[status.value]), f" {what:<{ID_WIDTH}} ")
        body = Text.assemble(one_line(summary), " ", (f"({seconds:.2f}s)", "dim"))  # a path's newline stays in
        self.console.print(hanging(head, body, self.width))

    def _note(self, label: str, text: str, style: str = "dim") -> None:
        head = Text.assemble("      ", (label, style))
        self.console.print(hanging(head, one_line(text), self.width))
