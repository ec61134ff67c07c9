"""What the panes share: the check options, one CheckContext (rebuilt when a fault changes),
and the last report. Torch is imported lazily, so the first screen paints before it loads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # heavy imports only for type checkers
    from minigpt.checks import CheckContext, CheckOptions, Report


class Session:
    def __init__(self, options: CheckOptions | Callable[[], CheckOptions]):
        # a callable builds the options on first use: CheckOptions imports torch, and the UI
        # passes a factory so its first screen paints before torch has loaded
        self._make_options: Callable[[], CheckOptions] | None = options if callable(options) else None
        self._options: CheckOptions | None = None if callable(options) else options
        self._options_lock = threading.Lock()
        self._context: CheckContext | None = None
        self._lock = threading.Lock()
        self.last_report: Report | None = None

    @property
    def options(self) -> CheckOptions:
        if self._options is None:
            with self._options_lock:
                if self._options is None:
                    assert self._make_options is not None  # None only when the options were given
                    self._options = self._make_options()
        return self._options

    @options.setter
    def options(self, value: CheckOptions) -> None:
        self._options = value

    @property
    def fault(self) -> str | None:
        return self.options.fault

    @property
    def context(self) -> CheckContext:
        """Built on first use (in a worker thread: it imports torch)."""
        with self._lock:
            if self._context is None:
                from minigpt.checks import CheckContext

                self._context = CheckContext(self.options)
            return self._context

    def set_fault(self, fault: str | None) -> None:
        """Apply or clear an injected fault; the next context is built fresh."""
        with self._lock:
            self.options = replace(self.options, fault=fault)
            self._context = None

    def reload(self) -> None:
        """Forget cached files (after training wrote a new checkpoint, say)."""
        with self._lock:
            self._context = None
