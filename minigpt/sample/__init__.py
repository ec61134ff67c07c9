"""Generation from a model: sampling (`generate`), its settings, and the repetition measures that
judge what came out."""
