"""Upstream MedVision's own result files (lmms-eval samples files) brought into sample stores."""
