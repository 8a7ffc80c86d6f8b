"""Models: the registry (one typed record per model) and the backends that answer requests."""
