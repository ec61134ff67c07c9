"""minigpt: a clean character-level GPT pipeline and the check engine that inspects it."""

__version__ = "0.1.0"
