"""The evaluation runner: task loop over lmms-eval, sample store, status file, run signature."""
