"""User-facing entry points: eval__<model> modules, environment helpers, parse and summarize commands."""
