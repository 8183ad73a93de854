"""Decode worker settings: from the one serialized configuration its node manager hands it
(STRATA_WORKER_CONFIG, JSON), or, for a worker started by hand, flags, STRATA_* variables and
defaults (strata.core.settings)."""

from __future__ import annotations

import os

from pydantic import Field, ValidationError

from strata.core import defaults
from strata.core.settings import SettingsError, describe, load
from strata.engine.settings import EngineFields
from strata.security.settings import SecurityFields

PROG = "python -m services.worker"
CONFIG_ENV = "STRATA_WORKER_CONFIG"


class WorkerConfig(SecurityFields, EngineFields):
    """One decode worker: one model's engine behind the Worker API. Its node manager starts it
    with STRATA_WORKER_CONFIG; --print-config prints the resolved settings and exits."""

    worker_bind: str = Field(description="host:port to listen on")
    model: str = Field(
        defaults.DEFAULT_MODEL,
        description="the model to serve: a name "
        "(smollm2-135m-instruct, dummy-tiny, ...) or a checkpoint path",
    )
    replica_id: str = Field("r0", description="the replica this worker serves as")
    kvstore_addr: str = Field("", description="the node's KV tier store (empty: none)")
    otlp_endpoint: str = Field(
        "", description="OTLP/gRPC receiver for this service's spans; empty: none"
    )

    @property
    def profile(self) -> str:
        """The served model's solo step profile file ("" for none)."""
        return self.profile_for(self.model)


def load_worker() -> WorkerConfig:
    """The worker's settings: its node manager's serialized configuration when given, else
    flags and variables."""
    payload = os.environ.get(CONFIG_ENV)
    if not payload:
        return load(WorkerConfig, PROG)
    try:
        return WorkerConfig.model_validate_json(payload)
    except ValidationError as err:
        raise SettingsError(f"{CONFIG_ENV} from the node manager: {describe(err)}") from None
