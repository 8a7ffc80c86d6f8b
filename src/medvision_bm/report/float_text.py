"""Python's ``repr`` of many floats at once, for the files that spell each number as ``repr`` (or ``json``) does.

orjson writes a float as its shortest round-trip digits, the digits ``repr`` writes, and about five times faster;
the two differ only where ``repr`` switches to exponent notation (below 1e-4, from 1e16 on: orjson writes
``0.00001`` and ``1e-9`` where ``repr`` writes ``1e-05`` and ``1e-09``) and for the values that are not finite
(orjson writes ``null``). Those values, and everything when orjson is absent or fails the probe below, are written
by ``repr`` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

#: The magnitudes (besides 0) orjson's text is taken for: within them ``repr`` writes fixed notation (from 1e-4
#: below 1e16), with a margin on both sides.
_PLAIN_FROM, _PLAIN_BELOW = 1e-3, 1e15

#: Values whose orjson text must equal ``repr``'s before orjson is used at all.
_PROBE = (0.0, -0.0, 0.1, 0.2, 0.3, 1 / 3, 2 / 3, 1.0, -1.0, 100.0, 1e-3, 0.00123, 0.001, 0.5, 1.5, 2.5,
          123456.789, 999999999999999.9, 1e14, 12345678901234.5, 0.1 + 0.2, float(np.float32(0.1)),
          float(np.float32(1 / 3)), 7.0 / 9.0, 3.141592653589793, 2.0 ** 40, -2.0 ** 40 / 3)


@cache
def _orjson_agrees() -> bool:
    """Whether orjson is installed and writes the probe values as ``repr`` does."""
    try:
        import orjson  # a dependency of the package; without it every text is ``repr``'s
    except ImportError:  # pragma: no cover - the package depends on orjson
        return False
    values = [*_PROBE, *(-v for v in _PROBE)]
    return orjson.dumps(values).decode("ascii") == "[" + ",".join(map(repr, values)) + "]"


def float_reprs(values: Sequence[float] | np.ndarray) -> list[str]:
    """``repr`` of each float of ``values`` (Python floats or a float64 array), in order."""
    floats = np.ascontiguousarray(values, dtype=np.float64)
    if not len(floats):
        return []
    listed = floats.tolist()
    if not _orjson_agrees():
        return list(map(float.__repr__, listed))
    import orjson

    texts = orjson.dumps(listed)[1:-1].decode("ascii").split(",")
    size = np.abs(floats)
    plain = ((size >= _PLAIN_FROM) & (size < _PLAIN_BELOW)) | (floats == 0)  # NaN compares False: not plain
    if not plain.all():
        for i in np.flatnonzero(~plain).tolist():
            texts[i] = float.__repr__(listed[i])
    return texts
