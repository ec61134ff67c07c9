"""Modal screens: help, fault menu, confirm, demo setup."""
