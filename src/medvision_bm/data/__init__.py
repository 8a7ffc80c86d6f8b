"""Upstream's Data/ folder: planner versions, the layout and plan reader, the loader's rules, task metadata, the
image as shown, download, and the phantom generator."""
