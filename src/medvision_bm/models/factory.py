"""Builds the backend a registry record asks for from plain options (lmms-eval ``model_args``), for records that
need no data folder; the runner builds its backends from a resolved RunConfig (``runner.backends``)."""

from __future__ import annotations

from collections.abc import Mapping

from medvision_bm.errors import UserError
from medvision_bm.models.api import build_api_backend
from medvision_bm.models.base import Backend
from medvision_bm.models.baselines import OracleBackend, RandomBoxBackend
from medvision_bm.models.hf_local import TransformersBackend
from medvision_bm.models.processing import int_of
from medvision_bm.models.registry import ModelRecord


def backend_from_options(record: ModelRecord, options: Mapping[str, object]) -> Backend:
    """A backend from plain options (lmms-eval ``model_args``), for records that need no data folder."""
    if record.backend == "baseline":
        if record.name == "oracle":
            return OracleBackend()
        if record.name == "random-box":
            return RandomBoxBackend(seed=int_of(options.get("baseline_seed", 0)))
        raise UserError(f"baseline {record.name} needs the data folder; run it through `medvision-bm run`")
    if record.backend == "hf":
        weights = options.get("model_hf_id") or options.get("pretrained")
        if not weights:
            raise UserError("--model_args needs model_hf_id=FOLDER_OR_HUB_ID for the hf record")
        return TransformersBackend(str(weights), dtype=str(options.get("dtype", "auto")),
                                   device=str(options.get("device", "auto")),
                                   batch_size=int_of(options.get("batch_size", 1)))
    if record.is_api:
        return build_api_backend(record.backend, options)
    raise UserError(f"model {record.name} cannot be built from lmms-eval model_args; use `medvision-bm run`")
