"""The rows of the CDA's proxy tasks as ``load`` holds them: a strict parse's parsed.jsonl rows, read once by the
load, give the CDA the samples that enter a proxy without the parse file being read again (``report/cda.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from medvision_bm.store.layout import PARSED

if TYPE_CHECKING:
    import polars as pl

    from medvision_bm.report.load import StoreInfo

#: The fields of a parsed row the CDA reads (``cda.add_numbers``), as ``load``'s frames hold them.
HELD_FIELDS = ("dataset", "metric_key", "key", "slice_dim", "target", "values")
#: A row's ``HELD_FIELDS``: dataset, metric key, key, slice dim, target, values.
HeldRow = tuple["str | None", "str | None", "str | None", "int | None", "list[float | None]", "list[float | None] | None"]
#: Whether a sample of a task, with its dataset and metric key, enters a proxy.
Enters = Callable[[str, "str | None", "str | None"], bool]


def held_proxy_rows(frame: pl.DataFrame, stores: Sequence[StoreInfo],
                    enters: Enters) -> dict[int, list[HeldRow]]:
    """Per store whose rows the frame holds as ``load`` read them from its parsed.jsonl (a strict parse, the
    values and targets kept, one row per index), the fields (``HELD_FIELDS``) of its rows that enter a proxy, in
    index order; the stores left out are read from their parse file."""
    import polars as pl  # the report extra; summarize has it loaded already

    if any(c not in frame.columns for c in ("index", *HELD_FIELDS)):
        return {}
    task_of = {s.id: s.ref.task for s in stores if s.source == PARSED}
    rows = frame.filter(pl.col("store").is_in(list(task_of)))
    whole = rows.group_by("store").agg(((pl.col("index").null_count() == 0)
                                        & (pl.col("index").n_unique() == pl.len())).alias("ok"))
    held: dict[int, list[HeldRow]] = {sid: [] for sid, ok in whole.iter_rows() if ok}
    combos = rows.filter(pl.col("store").is_in(list(held))).select("store", "dataset", "metric_key").unique()
    entering = [(sid, ds, mk) for sid, ds, mk in combos.iter_rows() if enters(task_of[sid], ds, mk)]
    if entering:
        keys = pl.DataFrame(entering, schema={"store": pl.Int64, "dataset": pl.Utf8, "metric_key": pl.Utf8},
                            orient="row")
        picked = rows.join(keys, on=["store", "dataset", "metric_key"], how="semi", nulls_equal=True)
        for sid, *fields in picked.sort("store", "index").select("store", *HELD_FIELDS).iter_rows():
            held[sid].append(cast(HeldRow, tuple(fields)))
    return held
