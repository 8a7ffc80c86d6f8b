"""Data layer: planner versions, the on-disk layout, NIfTI slices, the phantom generator."""
