"""Runs other tools wrote, turned into workspaces: nanoGPT's checkpoints and pickles, its logs."""
