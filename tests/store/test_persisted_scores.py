"""A writer's persisted scores: written a checkpoint at a time, found by scoring key, doc hash and answer hash; a
damaged, cut or foreign line is never handed out."""

from __future__ import annotations

import numpy as np

from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.scores import PersistedScore, PersistedScores, ScoreAppender

KEY, OTHER = "0123456789abcdef" * 2, "f" * 32


def _score(i: int, scoring: str = KEY) -> PersistedScore:
    return PersistedScore(scoring, 1000 + i, (7 << 60) + i, bytes([i % 256]) * 108, b'{"key":"s%d","success":true}' % i)


def test_a_line_reads_back_as_written_and_a_changed_or_cut_one_not_at_all():
    sc = _score(3)
    line = sc.line()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert PersistedScore.from_line(line[:-1]) == sc
    assert PersistedScore.from_line(line[:-9]) is None  # cut
    assert PersistedScore.from_line(line[:-1].replace(b"true", b"fals")) is None  # the row changed
    assert PersistedScore.from_line(line[:-1].replace(b'"m":"7', b'"m":"6')) is None  # another answer's hash
    assert PersistedScore.from_line(b'{"v":2' + line[6:-1]) is None  # another format


def test_scores_are_written_a_checkpoint_at_a_time(tmp_path):
    path = StoreLayout(tmp_path).score_file("w1")
    out = ScoreAppender(path, every=4, seconds=3600)
    for i in range(6):
        out.add(_score(i))
    assert path.read_bytes().count(b"\n") == 4 and out.written == 4  # the first checkpoint only
    out.close()
    assert path.read_bytes().count(b"\n") == 6 and out.written == 6


def test_only_lines_of_this_scoring_that_hold_their_check_are_taken(tmp_path):
    files = StoreLayout(tmp_path)
    good = [_score(i) for i in range(5)]
    damaged = good[1].line().replace(b"true", b"fals")
    files.scores.mkdir()
    files.score_file("a").write_bytes(b"".join([good[0].line(), damaged, _score(2, OTHER).line(),
                                                b"not json\n", good[3].line()]) + good[4].line()[:70])
    files.score_file("b").write_bytes(good[2].line())
    kept = PersistedScores(files, KEY)
    try:
        def taken(sha: int, mark: int) -> tuple[bytes, bytes | None] | None:
            (number,) = kept.find(np.array([sha], dtype=np.uint64), np.array([mark], dtype=np.uint64)).tolist()
            if number < 0:
                return None
            (row,) = kept.parsed_rows(np.array([number]))
            return kept.columns(np.array([number])), row

        got = {i: taken(g.sha, g.mark) for i, g in enumerate(good)}
        assert got[0] == (good[0].columns, good[0].parsed + b"\n")
        assert got[1] is None  # its check fails
        assert got[2] == (good[2].columns, good[2].parsed + b"\n")  # from the other writer's file, not the foreign line
        assert got[3] == (good[3].columns, good[3].parsed + b"\n")
        assert got[4] is None  # the torn last line
        assert taken(good[0].sha, good[0].mark + 1) is None
    finally:
        kept.close()
    assert len(PersistedScores(files, OTHER)) == 1
    assert len(PersistedScores(files, KEY, columns=108)) == 3 and len(PersistedScores(files, KEY, columns=100)) == 0


def test_rows_asked_together_come_back_in_the_order_asked_whether_their_span_is_read_at_once_or_not(tmp_path,
                                                                                                    monkeypatch):
    from medvision_bm.store import scores

    files = StoreLayout(tmp_path)
    files.scores.mkdir()
    good = [_score(i) for i in range(40)]
    files.score_file("a").write_bytes(b"".join(g.line() for g in good[0::2]))
    files.score_file("b").write_bytes(b"".join(g.line() for g in good[1::2]))
    kept = PersistedScores(files, KEY)
    try:
        order = [7, 0, 39, 12, 13, 5, 22]
        numbers = kept.find(np.array([good[i].sha for i in order] + [1], dtype=np.uint64),
                            np.array([good[i].mark for i in order] + [1], dtype=np.uint64))
        want = [good[i].parsed + b"\n" for i in order] + [None]
        assert kept.parsed_rows(numbers) == want  # each file's span read once
        monkeypatch.setattr(scores, "_SPAN_SLACK", 0)
        assert kept.parsed_rows(numbers) == want  # a span far longer than its rows: each row read alone
        assert kept.parsed_rows(np.full(3, -1)) == [None] * 3
    finally:
        kept.close()


def test_once_parsed_jsonl_holds_them_stopped_writers_scores_go_and_a_live_writers_stay(tmp_path):
    import fcntl
    import os

    from medvision_bm.store.claims import Claims, prune_score_files

    files = StoreLayout(tmp_path)
    for writer in ("dead", "live", "gone"):
        out = ScoreAppender(files.score_file(writer), every=1)
        out.add(_score(1))
        out.close()
    (files.claims).mkdir(parents=True)
    (files.claims / "dead.lease").write_text("{}")  # a lease nobody locks: its run died

    class Store:
        layout = files

        def refresh(self, state):
            return set()

    out = ScoreAppender(files.score_file("mine"), every=1)  # the finishing run's own: kept until the next finish
    out.add(_score(2))
    out.close()
    with Claims(Store(), None, "live"):  # a live run holds its lease
        assert prune_score_files(files, keep={"mine"}) == 2
        assert sorted(p.name for p in files.scores.iterdir()) == ["live.jsonl", "mine.jsonl"]
    fd = os.open(files.claims / "dead.lease", os.O_RDONLY)
    try:  # the pruning only looked at the dead lease: it is not left locked
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    assert prune_score_files(files) == 2 and not any(files.scores.iterdir())
