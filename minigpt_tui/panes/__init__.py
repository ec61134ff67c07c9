"""One pane per tab, in the order of the number keys 1-7."""
