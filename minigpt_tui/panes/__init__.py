"""One pane per tab, in the order of their number keys (`minigpt_tui.workbench.PANES`)."""
