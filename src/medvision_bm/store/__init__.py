"""The results-folder format: file names, sample stores and their segments, signatures, the status file, store
discovery and judged parses. Written by the runner, the importer and the judge; read by every stage above."""
