"""Stored answers to scores: the strict parse of a store (``parsed.jsonl`` and ``results.json``), used by `run`,
`parse`, `import` and the summaries that find a store scored under older rules."""
