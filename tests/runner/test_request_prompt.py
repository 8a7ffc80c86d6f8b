"""A request asked outside lmms-eval's loop carries the prompt lmms-eval's loop makes of the sample's row."""

from __future__ import annotations

import dataclasses

import pytest

from fakes.samples import make_rundoc
from medvision_bm.data.docs import RunProtocol
from medvision_bm.models.base import GenSettings
from medvision_bm.runner.harness import request_for
from medvision_bm.tasks import hooks


class _Backend:
    takes_gray_slices = False


@pytest.mark.parametrize("family", ["TL", "detect", "AD"])
@pytest.mark.parametrize(("protocol", "variant"), [(RunProtocol.CURRENT, ""), (RunProtocol.CURRENT, "-CoT"),
                                                   (RunProtocol.PAPER, "")])
def test_the_prompt_is_the_one_made_of_the_row(family, protocol, variant):
    rd = dataclasses.replace(make_rundoc(3, family=family, data_root="/data/phantom"), variant=variant,
                             protocol=protocol)
    row = rd.to_lmms_row()
    for given in (row, None):
        request = request_for(rd, GenSettings(), None, _Backend(), given)
        assert request.prompt == hooks.doc_to_text(row)
        assert request.rundoc is rd
