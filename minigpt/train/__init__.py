"""Training: the trainer, its config and presets, data-parallel runs (`distributed`), resuming, and
time-boxed runs (`time_budget`)."""
