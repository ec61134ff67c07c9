"""Small reusable renderables and widgets shared by the panes."""
