"""medvision_bm: a benchmark suite for quantitative medical image analysis with vision-language models."""

__version__ = "0.1.0"
