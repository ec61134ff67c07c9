"""The models and their files: MiniGPT (`gpt`), nanoGPT's GPT (`nanogpt`), the forward contract
any model is called through (`contract`), a user's own model class (`user`), sizing before
allocation (`memory`), checkpoints, and per-parameter gradient statistics (`gradstats`)."""
