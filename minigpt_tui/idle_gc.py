"""Python's full garbage collections, moved out of the way of the keys.

Once the checks have run, the app's process holds about 250,000 objects that the collector tracks
(torch, the model, Textual's caches). Python's automatic full collection walks all of them and
stops the UI thread for a pause a person sees, every few pane switches (docs/performance.md).
So, for as long as the app runs:

- what is alive once the checks have loaded torch is collected once and frozen (`gc.freeze`: those
  objects are never walked again; torch's modules and classes live as long as the process anyway);
- automatic full collections are made rare (the third threshold, counted in younger collections);
- a full collection runs instead when no key or click came for `IDLE_S` and there has been enough
  allocation since the last one.

The young generations are collected as before: their pauses are a few milliseconds.
"""

from __future__ import annotations

import gc
import time

IDLE_S = 1.0  # no input for this long: a full collection may run now
EVERY_S = 5.0  # at most this often
FULL_AFTER = 100  # automatic full collection after this many middle-generation ones (Python: 10)
PENDING = 5  # a collection at idle only after this many middle-generation collections since the last


class IdleCollector:
    """Owned by the app: `start` at mount, `input_seen` on each key and click, `tick` on a timer,
    `freeze_loaded` once torch and the model are in, `stop` at exit (thresholds restored)."""

    def __init__(self) -> None:
        self.last_input = time.monotonic()
        self.last_full = time.monotonic()
        self.frozen = False
        self._saved = gc.get_threshold()

    def start(self) -> None:
        young, middle, _ = self._saved
        gc.set_threshold(young, middle, FULL_AFTER)

    def stop(self) -> None:
        gc.set_threshold(*self._saved)

    def input_seen(self) -> None:
        self.last_input = time.monotonic()

    def freeze_loaded(self) -> None:
        """Collect, then freeze what is left (once): called when the first check run has finished."""
        if not self.frozen:
            gc.collect()
            gc.freeze()
            self.frozen = True
            self.last_full = time.monotonic()

    def tick(self) -> bool:
        """A full collection now, if the user is idle and enough was allocated; True when it ran."""
        now = time.monotonic()
        if now - self.last_input < IDLE_S or now - self.last_full < EVERY_S or gc.get_count()[2] < PENDING:
            return False
        gc.collect()
        self.last_full = time.monotonic()
        return True
