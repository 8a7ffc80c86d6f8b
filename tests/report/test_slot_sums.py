"""The open slots' sums of the bootstrap (``replicates._SlotSums``): shared by the slots that come in together,
rows of their own otherwise, and the same to the bit as a zeroed accumulator per slot with its parts added in
order."""

from __future__ import annotations

import numpy as np

from medvision_bm.report.replicates import _SlotSums


def test_slot_sums_are_those_of_one_zeroed_accumulator_per_slot() -> None:
    rng = np.random.default_rng(5)
    width, n_boot = 3, 7
    pool = _SlotSums(width, n_boot)
    # segments of slots: (0, 1, 2) come in together, then 1 in other company, then a slot twice in one segment
    segments = [(0, 1, 2), (3, 4), (0, 1, 2), (5, 1), (3, 4), (6, 6, 0), (2, 7), (8,)]
    left = {s: sum(seg.count(s) for seg in segments) for seg in segments for s in seg}
    want: dict[int, np.ndarray] = {}
    kinds = []
    for seg in segments:
        shared, rows, first, new = pool.segment(seg)
        kinds.append("new" if new else "shared" if shared is not None else "rows")
        part = rng.normal(size=(n_boot, len(seg) * width))
        part[rng.random(part.shape) < 0.2] = -0.0
        if shared is not None:
            if new:
                np.add(part, 0.0, out=shared)
            else:
                shared += part
        else:
            block = part.reshape(n_boot, len(seg), width).transpose(1, 0, 2)
            for i, row in enumerate(rows.tolist()):
                if first[i]:
                    pool.sums[row] = np.add(block[i], 0.0)
                else:
                    pool.sums[row] += block[i]
        for i, slot in enumerate(seg):
            want.setdefault(slot, np.zeros((n_boot, width)))
            want[slot] += part[:, i * width:(i + 1) * width]
            left[slot] -= 1
        done = [s for s in dict.fromkeys(seg) if not left[s]]
        if done:
            got = [sums for piece in pool.close(done) for sums in piece]
            for k, slot in enumerate(done):
                assert np.ascontiguousarray(got[k]).tobytes() == want[slot].T.tobytes(), slot
    assert kinds == ["new", "new", "shared", "rows", "shared", "rows", "rows", "new"]
    assert not pool.row and not pool.shared and not pool.arrays
