"""The three task families: prompts, targets, answer parsing, metrics, and the lmms-eval task YAMLs and hooks."""
