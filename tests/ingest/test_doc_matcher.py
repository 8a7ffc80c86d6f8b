"""The import's doc look-up (``ingest.upstream_match.DocMatcher``): a record's image path matches a doc whose path is
the same, a tail of it or has it as a tail, each at a ``/``; of several docs the first in order is taken; the
identity (slice, label) must agree; docs are fetched back only when a record points at them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from medvision_bm.ingest.upstream_files import Candidate, UpstreamFile
from medvision_bm.ingest.upstream_match import DocMatcher


@dataclass
class _Doc:
    image_file: str
    slice_idx: int
    label: int = 1
    slice_dim: int = 2
    family: str = "detect"
    biometric_profile: dict | None = None
    dataset_name: str = "D"
    taskType: str = "Box"


def _cand(image: str, slice_idx: int, label: int = 1) -> Candidate:
    uf = UpstreamFile(Path("f.jsonl"), "task", "", "model", None, None)
    return Candidate(uf, 1, 0, {"image_file": image, "slice_dim": 2, "slice_idx": slice_idx, "label": label},
                     None, "answer", None)


DOCS = [_Doc("D/Images/a.nii.gz", 3), _Doc("E/Images/a.nii.gz", 3), _Doc("D/Images/b.nii.gz", 3),
        _Doc("D/Images/a.nii.gz", 4), _Doc("D/Images/a.nii.gz", 3, label=2)]


@pytest.mark.parametrize(("image", "slice_idx", "label", "want"), [
    ("/cluster/Data/Datasets/D/Images/a.nii.gz", 3, 1, 0),  # below Datasets/: the same path
    ("/cluster/Data/Datasets/E/Images/a.nii.gz", 3, 1, 1),
    ("scratch/D/Images/b.nii.gz", 3, 1, 2),  # no Datasets/ in it: ours is a tail of it
    ("/scratch/D/Images/b.nii.gz", 3, 1, None),  # absolute, no Datasets/ in it: no file of the data
    ("Images/b.nii.gz", 3, 1, 2),  # it is a tail of ours
    ("a.nii.gz", 3, 1, 0),  # a tail of two docs: the first in order
    ("D/Images/a.nii.gz", 4, 1, 3),
    ("D/Images/a.nii.gz", 3, 2, 4),
    ("X/Images/a.nii.gz", 3, 1, None),  # a shared tail ("Images/a.nii.gz") is not a match
    ("D/Images/a.nii", 3, 1, None),  # not at a "/"
    ("D/Images/a.nii.gz", 5, 1, None),
])
def test_a_record_finds_the_doc_its_path_and_identity_name(image: str, slice_idx: int, label: int,
                                                           want: int | None) -> None:
    fetched: list[int] = []

    def fetch(pos: int) -> _Doc:
        fetched.append(pos)
        return DOCS[pos]

    matcher = DocMatcher(iter(DOCS), lambda c, d: [], fetch=fetch)
    pos, item, why = matcher.match_at(_cand(image, slice_idx, label))
    assert pos == want, why
    if want is None:
        assert item is None and "no doc of ours" in why
    else:
        assert item is DOCS[want] and why == ""
        assert fetched[-1] == want and len(fetched) <= 2  # only docs the record points at are read back


def test_a_held_sequence_needs_no_fetch_and_a_differing_dataset_is_named() -> None:
    matcher = DocMatcher(DOCS, lambda c, d: [])
    doc, why = matcher.match(_cand("D/Images/a.nii.gz", 4))
    assert doc is DOCS[3] and why == ""
    cand = _cand("D/Images/a.nii.gz", 4)
    cand.doc["dataset_name"] = "Other"
    assert matcher.match(cand) == (None, "dataset_name 'Other' differs from ours ('D')")
