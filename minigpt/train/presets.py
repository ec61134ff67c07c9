"""Named training presets: model shape and schedule (plain data, no torch, for `--help`)."""

PRESETS = {
    # model shape + batch size; the rest of TrainConfig keeps its defaults
    "debug": dict(
        block_size=32,
        embedding_dim=64,
        num_heads=4,
        num_layers=2,
        expansion_factor=4,
        dropout=0.0,
        batch_size=8,
        max_steps=200,
        eval_interval=50,
        warmup_steps=20,
    ),
    "small": dict(
        block_size=64,
        embedding_dim=128,
        num_heads=4,
        num_layers=4,
        expansion_factor=4,
        dropout=0.0,
        batch_size=32,
        max_steps=2500,
        eval_interval=250,
        warmup_steps=100,
        learning_rate=2e-3,
    ),
}
