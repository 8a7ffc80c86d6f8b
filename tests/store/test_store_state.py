"""A store state keeps where each answer is, not the answer: what it reads back is exactly what was stored."""

from __future__ import annotations

import os

from medvision_bm.io import write_text_atomic
from medvision_bm.models.base import GenResult
from medvision_bm.score.follow import answer_marks
from medvision_bm.store import samples as store_mod
from medvision_bm.store.samples import SampleStore, line_hash


def _fill(store: SampleStore, label: str, keys: range, text: str = "<answer>{i}</answer>") -> None:
    w = store.writer(label)
    for i in keys:
        w.append(GenResult(f"k{i}", text.format(i=i)), index=i, doc_sha="x")
    w.close()


def _lines(store: SampleStore) -> dict[str, bytes]:
    """key -> stripped ok line, read straight from the segment files."""
    import orjson

    out = {}
    for seg in sorted(store.samples_dir.glob("*.jsonl")):
        for raw in seg.read_bytes().split(b"\n"):
            if raw.strip():
                out.setdefault(orjson.loads(raw)["key"], raw.strip())
    return out


def test_lines_read_back_are_the_stored_lines_across_blocks_and_segments(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "_READ_BLOCK", 100)  # lines cross block boundaries
    store = SampleStore(tmp_path / "s", "sig")
    _fill(store, "a", range(0, 30))
    _fill(store, "b", range(30, 60), text="  é {i} \n multi-byte ✓")  # non-ASCII text: offsets are bytes
    seg = next(store.samples_dir.glob("b-*.jsonl"))
    with open(seg, "ab") as fh:  # a record with spaces around it on its line
        fh.write(b'   {"key": "k60", "answer_signature": "sig", "status": "ok", "doc_sha": "x", "text": "pad"}  \n')
    state = store.read()
    expected = _lines(store)
    assert len(state.ok) == 61
    for key, line in expected.items():
        assert state.answer_line(key, "x") == line
        assert state.answer_hash(key, "x") == line_hash(line)
    assert state.answer("k45", "x").text == "  é 45 \n multi-byte ✓"
    assert state.answer("k60", "x").text == "pad"
    assert state.answer_line("k1", "other-doc") is None and state.answer_hash("k1", "other-doc") is None


def test_more_segments_than_open_files_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "_MAX_OPEN_SEGMENTS", 3)
    store = SampleStore(tmp_path / "s", "sig")
    for part in range(8):
        _fill(store, f"w{part}", range(part * 5, part * 5 + 5))
    state = store.read()
    for _ in range(2):  # every segment read back twice, in an order that keeps evicting
        for i in range(40):
            assert state.answer("k" + str(i), "x").text == f"<answer>{i}</answer>"
    assert len(state._open) == 3
    state.close()
    assert not state._open
    assert state.answer("k7", "x").text == "<answer>7</answer>", "a closed state opens its segments again"


def test_a_segment_rewritten_under_a_state_is_read_again(tmp_path):
    """An import replaces its segment atomically: places read before point into another file."""
    store = SampleStore(tmp_path / "s", "sig")
    _fill(store, "a", range(10))
    state = store.read()
    seg = next(store.samples_dir.glob("*.jsonl"))
    lines = seg.read_bytes().split(b"\n")
    lines[2], lines[5] = lines[5], lines[2]
    lines.insert(0, b'{"key": "k99", "answer_signature": "sig", "status": "ok", "doc_sha": "x", "text": "new"}')
    write_text_atomic(seg, b"\n".join(lines).decode())
    for i in range(10):
        assert state.answer("k" + str(i), "x").text == f"<answer>{i}</answer>"
    assert state.answer("k99", "x").text == "new", "the re-read store holds what the rewrite added"


def test_answer_marks_follow_the_stored_line_not_its_place(tmp_path, monkeypatch):
    """The same answers at other offsets give the same marks (scoring reuses their rows); another answer text, or a
    missing answer, changes the mark of that sample alone."""
    from types import SimpleNamespace

    from medvision_bm.store import answer_record

    monkeypatch.setattr(answer_record, "time", SimpleNamespace(time=lambda: 1.7e9))  # the same line for the same answer
    keys, shas = [f"k{i}" for i in range(6)], ["x"] * 6

    def marks_of(folder: str, order: list[int], texts: dict[int, str]) -> list[int]:
        store = SampleStore(tmp_path / folder, "sig")
        w = store.writer("a")
        for i in order:
            w.append(GenResult(f"k{i}", texts.get(i, f"<answer>{i}</answer>"), latency_s=0.0), index=i,
                     doc_sha="x")
        w.close()
        return answer_marks(keys, shas, store.read())[1].tolist()

    base = marks_of("one", [0, 1, 2, 3, 4, 5], {})
    assert len(set(base)) == 6
    seg = next((tmp_path / "one" / "samples").glob("*.jsonl"))
    moved = SampleStore(tmp_path / "two", "sig")  # the very same lines, in other places and segments
    moved.samples_dir.mkdir(parents=True)
    lines = seg.read_bytes().splitlines(keepends=True)
    (moved.samples_dir / "p.jsonl").write_bytes(b"".join(reversed(lines[3:])))
    (moved.samples_dir / "q.jsonl").write_bytes(b"\n".join(lines[:3]))
    assert answer_marks(keys, shas, moved.read())[1].tolist() == base
    changed = marks_of("three", [0, 1, 2, 3, 4, 5], {3: "<answer>3.5</answer>"})
    assert [a != b for a, b in zip(changed, base)] == [False, False, False, True, False, False]
    missing = marks_of("four", [0, 1, 2, 4, 5], {})
    assert [a != b for a, b in zip(missing, base)] == [False, False, False, True, False, False]


def test_open_files_are_closed_with_the_state(tmp_path):
    store = SampleStore(tmp_path / "s", "sig")
    _fill(store, "a", range(3))
    before = len(os.listdir("/proc/self/fd"))
    state = store.read()
    assert state.answer("k1", "x") is not None
    assert len(os.listdir("/proc/self/fd")) == before + 1
    del state
    assert len(os.listdir("/proc/self/fd")) == before


def test_samples_whose_ids_collide_are_kept_apart(tmp_path, monkeypatch):
    """Every pair given one in-memory id: the first keeps it, the others are kept under their exact names; answers,
    duplicates and lookups of other doc hashes stay exact."""
    store = SampleStore(tmp_path / "s", "sig")
    _fill(store, "a", range(6))
    _fill(store, "b", range(3))  # the first three again: duplicates
    monkeypatch.setattr(store_mod, "_sample_id", lambda key, sha: (7, hash((sha, key)) & store_mod._CHECK_MASK))
    state = store.read()
    assert state.n_ok == 6 and len(state.ok) == 1 and len(state.ok_exact) == 5 and state.duplicates == 3
    for i in range(6):
        assert state.answered(f"k{i}", "x") and state.answer(f"k{i}", "x").text == f"<answer>{i}</answer>"
    assert not state.answered("k1", "y") and not state.answered("k9", "x")


def test_a_removed_segment_drops_its_answers_once(tmp_path, monkeypatch):
    store = SampleStore(tmp_path / "s", "sig")
    _fill(store, "a", range(3))
    _fill(store, "b", range(3, 6))
    state = store.read()
    next(store.samples_dir.glob("b-*.jsonl")).unlink()
    reads = []
    real_read = SampleStore.read
    monkeypatch.setattr(SampleStore, "read", lambda self: reads.append(1) or real_read(self))
    assert [state.answer(f"k{i}", "x") is not None for i in range(6)] == [True] * 3 + [False] * 3
    assert len(reads) == 1 and state.n_ok == 3, "the store is read again once, not once per missing answer"


def test_records_and_docs_without_a_doc_hash_still_match(tmp_path):
    """Stores written before doc hashes: the record has none and the docs row has none (None); they match, as the
    "key\\0None" names did."""
    store = SampleStore(tmp_path / "s", "sig")
    store.samples_dir.mkdir(parents=True)
    (store.samples_dir / "old.jsonl").write_text(
        '{"key": "k1", "answer_signature": "sig", "status": "ok", "text": "<answer>1</answer>"}\n')
    state = store.read()
    assert state.answered("k1", None) and state.answer("k1", None).text == "<answer>1</answer>"
    assert state.answer_hash("k1", None) is not None and not state.answered("k1", "abc")


def test_doc_hashes_are_those_stored_answers_were_given():
    """Stored answers are reused only under their doc hash: making the records slotted must not change it. The value
    was computed by the code before (commit 8f5d996, ``__dict__`` of non-slotted dataclasses) for this doc and view."""
    from medvision_bm.data.docs import Doc, RunDoc, View
    from medvision_bm.store.signature import doc_sha

    view = View(image_hw=(512, 480), pixel_hw_mm=(0.75, 0.8), canvas_hw=(512, 480), content_hw=(512, 480),
                stated_pixel_hw_mm=(0.75, 0.8), header_pixel_hw=(0.75, 0.8), reshape_hw=None,
                client_resize_hw=(1024, 960))
    doc = Doc(key="Ds/Images/c1.nii.gz:d2:s7:l1", task="Ds_BoxSize_Task01_Axial", family="detect", plane="Axial",
              split="test", index=3, dataset_name="Ds", taskID="01", taskType="Box-Size",
              image_file="Ds/Images/c1.nii.gz", mask_file="Ds/Masks/c1.nii.gz", landmark_file=None, slice_dim=2,
              slice_idx=7, label=1, image_size_2d=(512, 480), pixel_size=(0.75, 0.7998046875),
              image_size_3d=(512, 480, 40), voxel_size=(0.75, 0.7998046875, 2.5),
              bounding_boxes={"min_coords": [[20, 10]], "max_coords": [[219, 109]], "center_coords": [[119, 59]],
                              "dimensions": [[200, 100]], "sizes": [[150.0, 79.98046875]]},
              meta={"image_description": "abdominal CT", "image_modality": "CT", "label_name": "liver"})
    assert doc_sha(doc, view) == "74d0d97808ef3e31"
    rd = RunDoc(doc, view)
    assert RunDoc.from_lmms_row(rd.to_lmms_row()) == rd  # through lmms-eval's rows and back
    assert not hasattr(doc, "__dict__") and not hasattr(rd, "__dict__"), "slotted: no per-record dict"


def _doc_rows(order: list[int], pad: int = 0):
    from medvision_bm.store.records import DocRow

    return [DocRow(f"k{i:03d}", i, f"{i:016x}", {"key": f"k{i:03d}", "n": i, "pad": "x" * pad}, {"image_hw": [i, i]})
            for i in order]


def test_a_new_docs_file_written_row_by_row_is_the_merged_file(tmp_path):
    """A new docs.jsonl whose rows come in (index, key) order is written one line at a time, not held; rows out of
    order (or a key twice) fall back to the merge. Either way the file is the one the merge writes: every key once,
    the last row of a key kept, in (index, key) order."""
    want = b"".join(r.line() + b"\n" for r in _doc_rows(list(range(40))))
    for n, order in enumerate((list(range(40)), [*range(20), 35, *range(20, 35), *range(36, 40)],
                               [*range(40), 7], list(reversed(range(40))))):
        store = SampleStore(tmp_path / f"s{n}", "sig")
        store.init({"x": 1})
        assert store.write_docs(_doc_rows(order)).rewritten is True
        assert store.layout.docs.read_bytes() == want, order
        assert store.write_docs(_doc_rows(order)).rewritten is False  # the same rows again: nothing rewritten


def test_a_new_docs_file_in_order_is_never_held_whole(tmp_path, monkeypatch):
    """The in-order path writes each row's line as the row comes: the rows are a generator read once, and the file
    grows while they are made (rows of about 2 KB, written in blocks of 1 MiB)."""
    store = SampleStore(tmp_path / "s", "sig")
    store.init({"x": 1})
    sizes: list[int] = []
    tmp_dir = store.layout.docs.parent

    def rows():
        for row in _doc_rows(list(range(3000)), pad=2000):
            if row.index % 1000 == 999:
                sizes.append(sum(p.stat().st_size for p in tmp_dir.glob("*.tmp")))
            yield row

    assert store.write_docs(rows()).rewritten is True
    assert sizes[0] < sizes[1] < sizes[2], sizes
    assert store.layout.docs.read_bytes().count(b"\n") == 3000
