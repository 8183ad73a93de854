"""Run one decode worker (the node manager starts these): python -m services.worker"""

from __future__ import annotations

import logging
import time

import torch

from services.worker.config import WorkerConfig, load_worker
from services.worker.servicer import WorkerServicer
from services.worker.step_budget import StepBudget
from strata.core.settings import SettingsError
from strata.engine.async_engine import AsyncEngine
from strata.engine.engine import LLMEngine
from strata.engine.registry import load_model
from strata.engine.step_meter import learn_steps, meter_from_profile
from strata.engine.tier_link import TierLink
from strata.kvtier.client import TierClient
from strata.policy.scheduling.step_cap import StepCap
from strata.rpc.channels import install
from strata.rpc.server import Registration, run, serve_until_signal, start_server
from strata.telemetry.setup import init_tracing
from strata.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger("services.worker")


async def main(cfg: WorkerConfig) -> None:
    identity = cfg.security().identity("worker")
    install(identity)
    torch.set_num_threads(cfg.torch_threads)
    init_tracing("worker", cfg.otlp_endpoint, identity=identity)
    engine_config = cfg.engine_config()
    profile = cfg.profile
    try:
        meter = (
            meter_from_profile(profile, cfg.model, engine_config.block_size) if profile else None
        )
    except ValueError as err:
        raise SettingsError(f"STRATA_PROFILE_PATH: {err}") from None
    started = time.perf_counter()
    loaded = load_model(cfg.model)
    tier = (
        TierLink(TierClient(cfg.kvstore_addr, worker_id=f"{cfg.model}/{cfg.replica_id}"))
        if cfg.kvstore_addr
        else None
    )
    llm = LLMEngine(loaded, engine_config, tier=tier)
    warm = llm.warm_up()
    # After warm-up: its first-shape costs are neither interference nor this worker's step costs.
    learner = learn_steps(llm, meter)
    cap = StepCap()
    llm.step_budget = StepBudget(
        learner.model.line, engine_config.max_batched_tokens, engine_config.block_size, cap
    )
    engine = AsyncEngine(llm)
    e = engine.engine
    memory = (
        sum(t.numel() * t.element_size() for t in e.model.state_dict().values())
        + e.kv.numel() * e.kv.element_size()
    )
    log.info(
        "loaded %s in %.1fs (warm-up %.1fs): %d KV blocks of %d tokens, %d torch threads",
        cfg.model,
        time.perf_counter() - started,
        warm,
        e.pool.num_blocks,
        engine_config.block_size,
        cfg.torch_threads,
    )
    servicer = WorkerServicer(engine, memory, learner.meter, learner, cap)
    running = await start_server(
        [
            Registration(
                add=lambda s: worker_pb2_grpc.add_WorkerServicer_to_server(servicer, s),
                service_name=worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name,
            )
        ],
        bind=cfg.worker_bind,
        identity=identity,
    )
    log.info("worker %s (%s) listening on %s", cfg.replica_id, cfg.model, cfg.worker_bind)

    async def on_stop() -> None:
        engine.stop()
        if tier is not None:
            tier.client.close()

    await serve_until_signal(running, on_stop=on_stop)


if __name__ == "__main__":
    settings = load_worker()  # --help and bad settings stop here
    run(lambda: main(settings))
