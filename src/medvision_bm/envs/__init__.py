"""Per-model-family environments: frozen requirements, building, checking and reuse."""
