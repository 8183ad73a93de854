"""Sparse decode through the services: the worker honours GenerationSpec.sparse (its default,
off, on), reports the request's sparse layer steps and fallbacks on its span and the cumulative
counters in GetStats; the node sampler sums the counters' growth over worker restarts into its
NodeSample, and the metrics collector stores them."""

from __future__ import annotations

import grpc
import pytest
import torch

from services.metrics.servicer import _sample
from services.node.sampler import NodeSampler
from services.worker.config import WorkerConfig
from strata.core.settings import ConfigError
from strata.engine.async_engine import AsyncEngine
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.sequence import SamplingParams
from strata.engine.sparse import SparseConfig
from strata.node.energy import EnergyMeter, PowerModel
from strata.node.replicas import Replica, ReplicaSet, State
from strata.node.worker_process import WorkerProcess
from strata.rpc.server import Registration, channel, start_server
from strata.store.samples import insert_samples, samples_between
from strata.telemetry import names
from strata.v1 import common_pb2, metrics_pb2, worker_pb2, worker_pb2_grpc
from tests.contract.helpers import global_spans, serve_worker, spans_named
from tests.engine_helpers import run_to_end

pytest_plugins = ["tests.pg"]

MODEL = "dummy-tiny"
SPARSE = SparseConfig(
    enabled=True, min_context=256, budget_blocks=6, sink_blocks=1, window_blocks=2, threshold=1.0
)
CONFIG = EngineConfig(
    block_size=16, num_blocks=96, max_batched_tokens=512, max_seqs=4, sparse=SPARSE
)
PROMPT = "The quick brown fox jumps over the lazy dog. " * 9  # 405 byte tokens


@pytest.fixture(scope="module")
def loaded():
    torch.set_num_threads(1)
    return load_dummy(MODEL)


@pytest.fixture
async def worker(loaded):
    engine = AsyncEngine(LLMEngine(loaded, CONFIG))
    running = await serve_worker(engine, 1)
    ch = channel(running.address)
    yield worker_pb2_grpc.WorkerStub(ch)
    await ch.close()
    await running.stop(0)
    engine.stop()


def generate(rid: str, sparse: int) -> worker_pb2.WorkerGenerateRequest:
    return worker_pb2.WorkerGenerateRequest(
        request_id=rid,
        spec=common_pb2.GenerationSpec(model=MODEL, prompt=PROMPT, max_tokens=6, sparse=sparse),
    )


def dense_reference(loaded, ids: list[int]) -> list[int]:
    engine = LLMEngine(loaded, EngineConfig(block_size=16, num_blocks=96, max_batched_tokens=512))
    engine.add_request(EngineRequest("ref", ids, SamplingParams(max_tokens=6)))
    return run_to_end(engine)["ref"]


async def test_the_request_chooses_the_path_and_its_span_and_stats_say_what_ran(worker, loaded):
    stub = worker
    spans = global_spans()
    ids = load_dummy(MODEL).tokenizer.encode(PROMPT)
    assert len(ids) == 405
    off = [c async for c in stub.Generate(generate("off", common_pb2.SPARSE_MODE_OFF))]
    assert [t for c in off for t in c.token_ids] == dense_reference(loaded, ids)
    s = await stub.GetStats(worker_pb2.GetStatsRequest())
    assert (s.sparse_decode_rows, s.sparse_layer_steps, s.sparse_blocks_read) == (0, 0, 0)

    default = [c async for c in stub.Generate(generate("default", 0))]
    on = [c async for c in stub.Generate(generate("on", common_pb2.SPARSE_MODE_ON))]
    assert [t for c in on for t in c.token_ids] == [t for c in default for t in c.token_ids]
    # five decode rows per request (contexts 406..410, 26 blocks each, 6 read), two layers,
    # two KV heads; nothing fell back with the threshold at 1
    s = await stub.GetStats(worker_pb2.GetStatsRequest())
    assert (s.sparse_decode_rows, s.sparse_layer_steps, s.sparse_fallbacks) == (10, 20, 0)
    assert (s.sparse_blocks_read, s.sparse_blocks_dense) == (10 * 2 * 2 * 6, 10 * 2 * 2 * 26)
    by_id = {
        sp.attributes[names.REQUEST_ID]: sp.attributes
        for sp in spans_named(spans, names.SPAN_WORKER_GENERATE)
    }
    assert [
        (by_id[r][names.SPARSE_LAYER_STEPS], by_id[r][names.SPARSE_FALLBACKS])
        for r in ("off", "default", "on")
    ] == [(0, 0), (10, 0), (10, 0)]


async def test_an_unknown_sparse_mode_is_refused(worker):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in worker.Generate(generate("bad", 7)):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        "sparse must be SPARSE_MODE_DEFAULT (0), SPARSE_MODE_OFF (1) or SPARSE_MODE_ON (2), got 7"
    )


def test_worker_settings_for_the_sparse_path(monkeypatch):
    monkeypatch.setenv("STRATA_WORKER_BIND", "127.0.0.1:1")
    for k in (
        "STRATA_SPARSE",
        "STRATA_SPARSE_MIN_CONTEXT",
        "STRATA_SPARSE_BUDGET",
        "STRATA_SPARSE_THRESHOLD",
        "STRATA_SPARSE_ESTIMATE",
        "STRATA_SPARSE_COMPENSATE",
        "STRATA_SPARSE_ADAPTIVE",
    ):
        monkeypatch.delenv(k, raising=False)
    assert WorkerConfig.from_env().engine_config().sparse == SparseConfig(
        enabled=False,
        min_context=4096,
        budget_blocks=0,
        budget_fraction=0.125,
        sink_blocks=1,
        window_blocks=4,
        threshold=0.1,
        estimate="moment",
        compensate=True,
        adaptive=True,
    )
    monkeypatch.setenv("STRATA_SPARSE", "true")
    monkeypatch.setenv("STRATA_SPARSE_MIN_CONTEXT", "8192")
    monkeypatch.setenv("STRATA_SPARSE_BUDGET", "256")
    monkeypatch.setenv("STRATA_SPARSE_THRESHOLD", "0.05")
    monkeypatch.setenv("STRATA_SPARSE_ESTIMATE", "bound")
    monkeypatch.setenv("STRATA_SPARSE_COMPENSATE", "false")
    monkeypatch.setenv("STRATA_SPARSE_ADAPTIVE", "false")
    got = WorkerConfig.from_env().engine_config().sparse
    assert (
        got.enabled,
        got.min_context,
        got.budget_blocks,
        got.threshold,
        got.estimate,
        got.compensate,
        got.adaptive,
    ) == (True, 8192, 256, 0.05, "bound", False, False)
    monkeypatch.setenv("STRATA_SPARSE_COMPENSATE", "sometimes")
    with pytest.raises(
        ConfigError,
        match=r"STRATA_SPARSE_COMPENSATE \(--sparse-compensate\): "
        r"Input should be a valid boolean.*got 'sometimes'",
    ):
        WorkerConfig.from_env()
    monkeypatch.delenv("STRATA_SPARSE_COMPENSATE")
    monkeypatch.setenv("STRATA_SPARSE_BUDGET", "a lot")
    with pytest.raises(
        ConfigError,
        match=r"STRATA_SPARSE_BUDGET \(--sparse-budget\): a sparse "
        r"budget is a block count",
    ):
        WorkerConfig.from_env()
    monkeypatch.setenv("STRATA_SPARSE_BUDGET", "1.5")
    with pytest.raises(
        ConfigError,
        match=r"sparse decode settings \(STRATA_SPARSE_\*\): "
        r"budget_fraction must be in \(0, 1\], got 1.5",
    ):
        WorkerConfig.from_env()


class ScriptedWorker(worker_pb2_grpc.WorkerServicer):
    def __init__(self, script: list[tuple[int, int]]) -> None:
        self.script = script

    async def GetStats(self, request, context):
        steps, fallbacks = self.script.pop(0)
        return worker_pb2.WorkerStats(
            kv_blocks_total=8,
            kv_blocks_free=8,
            sparse_layer_steps=steps,
            sparse_fallbacks=fallbacks,
        )


async def test_node_samples_carry_the_sparse_counters_to_the_store(store):
    # the worker restarts between the second and third read: its counters start from zero
    w = ScriptedWorker([(100, 7), (160, 9), (30, 2)])
    running = await start_server(
        [
            Registration(
                add=lambda s: worker_pb2_grpc.add_WorkerServicer_to_server(w, s),
                service_name="strata.v1.Worker",
            )
        ]
    )
    replicas = ReplicaSet({})
    replica = Replica(
        "r0", "m", running.address, WorkerProcess("r0", running.address, {}), state=State.READY
    )
    replica.connect()
    replicas.replicas["r0"] = replica
    t = [0.0]
    sampler = NodeSampler(
        "node-1",
        replicas,
        EnergyMeter(None, PowerModel(1.0, 2.0), lambda: t[0]),
        None,
        wall_ms=lambda: 1_700_000_000_000 + round(t[0] * 1000),
        monotonic=lambda: t[0],
    )
    got: list[metrics_pb2.NodeSample] = []
    for _ in range(3):
        t[0] += 1.0
        got.append(await sampler.sample())
    await replica._channel.close()
    await running.stop(0)
    assert [(g.sparse_layer_steps, g.sparse_fallbacks) for g in got] == [
        (100, 7),
        (160, 9),
        (190, 11),
    ]
    records = [_sample(g) for g in got]
    assert all(r.problem() is None for r in records)
    async with store() as s:
        await insert_samples(s, records)
        back = await samples_between(s, 0, 2_000_000_000_000)
    assert [(r.sparse_layer_steps, r.sparse_fallbacks) for r in back] == [
        (100, 7),
        (160, 9),
        (190, 11),
    ]
    bad = _sample(got[0])
    bad.sparse_fallbacks = 101
    assert bad.problem() == (
        "sample of node 'node-1' at 1700000001000: sparse_fallbacks (101) "
        "cannot exceed sparse_layer_steps (100)"
    )
