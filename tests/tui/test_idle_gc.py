"""Full garbage collections wait for the keyboard to be idle (minigpt_tui.idle_gc)."""

import gc

from minigpt_tui import idle_gc
from minigpt_tui.idle_gc import IdleCollector


def test_a_full_collection_waits_for_idle_input_and_thresholds_come_back_at_stop(monkeypatch):
    saved = gc.get_threshold()
    collector = IdleCollector()
    collector.start()
    try:
        assert gc.get_threshold()[2] == idle_gc.FULL_AFTER  # automatic full collections made rare
        runs = []
        monkeypatch.setattr(idle_gc.gc, "collect", lambda *a: runs.append(a) or 0)
        monkeypatch.setattr(idle_gc.gc, "get_count", lambda: (0, 0, idle_gc.PENDING))
        now = [1000.0]
        monkeypatch.setattr(idle_gc.time, "monotonic", lambda: now[0])
        collector.last_full = collector.last_input = now[0]
        now[0] += idle_gc.EVERY_S + 1
        collector.input_seen()  # a key just came: not now
        assert not collector.tick() and not runs
        now[0] += idle_gc.IDLE_S + 0.1  # idle: now
        assert collector.tick() and len(runs) == 1
        now[0] += 0.5  # not again at once
        assert not collector.tick()
        now[0] += idle_gc.EVERY_S
        monkeypatch.setattr(idle_gc.gc, "get_count", lambda: (0, 0, 0))  # nothing allocated since
        assert not collector.tick() and len(runs) == 1
    finally:
        collector.stop()
    assert gc.get_threshold() == saved
