"""Imports the check modules in pipeline order, which registers every check."""

from . import data_checks, generation_checks, model_checks, training_checks  # noqa: F401
