"""The evaluation runner: flags to a typed run config, the task loop over lmms-eval, the backend factory and the
engine settings that enter a local model's answer signature."""
