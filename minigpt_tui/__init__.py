"""Full-screen terminal inspector for minigpt runs (see minigpt_tui.app)."""
