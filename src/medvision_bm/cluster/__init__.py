"""Cluster submission: plans of SLURM jobs (env warm-up, sharded evaluation arrays, finalize, summary), the
sbatch scripts that run them, a local N-worker fallback, and the per-task status view."""
