"""Protobuf <-> registry dataclasses for the scheduler; protobuf stops here."""

from __future__ import annotations

import math
from collections.abc import Iterable

from strata.policy.registry import (
    ModelInfo,
    NodeState,
    ReplicaState,
)
from strata.policy.scheduling.slo import DecodeLoad
from strata.rpc.convert import (
    class_delays_from_pb,
    class_delays_to_pb,
    class_tokens_from_pb,
    class_tokens_to_pb,
    phase_from_pb,
    phase_to_pb,
    positive_or_zero,
    step_line_from_pb,
    step_line_to_pb,
    tenant_load_from_pb,
    tenant_load_to_pb,
)
from strata.v1 import common_pb2


def replica_from_pb(r: common_pb2.ReplicaInfo) -> ReplicaState:
    return ReplicaState(
        model=r.model,
        replica_id=r.replica_id,
        phase=phase_from_pb(r.state),
        worker_address=r.worker_address,
        running_requests=r.running_requests,
        waiting_requests=r.waiting_requests,
        queued_tokens=r.queued_tokens,
        queued_by_class=class_tokens_from_pb(r.queued_by_class),
        kv_blocks_total=r.kv_blocks_total,
        kv_blocks_free=r.kv_blocks_free,
        waiting_for_memory=r.waiting_for_memory,
        tokens_per_s=max(0.0, r.tokens_per_s),
        max_seqs=r.max_seqs,
        block_size=max(0, r.kv_block_size),
        step_line=step_line_from_pb(r.step_line, r.step_line_samples),
        slots=DecodeLoad(
            max(0, r.slot_requests),
            max(0, r.slot_context_tokens),
            r.slot_tightest_tpot_ms if r.slot_tightest_tpot_ms > 0 else None,
        ),
        slot_turnover_s=(
            r.slot_turnover_s if math.isfinite(r.slot_turnover_s) and r.slot_turnover_s > 0 else 0.0
        ),
        max_batched_tokens=max(0, r.max_batched_tokens),
        class_delays=class_delays_from_pb(r),
        step_allowance_ms=positive_or_zero(r.step_allowance_ms),
    )


def replica_to_pb(r: ReplicaState) -> common_pb2.ReplicaInfo:
    return common_pb2.ReplicaInfo(
        model=r.model,
        replica_id=r.replica_id,
        state=phase_to_pb(r.phase),
        worker_address=r.worker_address,
        running_requests=r.running_requests,
        waiting_requests=r.waiting_requests,
        queued_tokens=r.queued_tokens,
        queued_by_class=class_tokens_to_pb(r.queued_by_class),
        kv_blocks_total=r.kv_blocks_total,
        kv_blocks_free=r.kv_blocks_free,
        waiting_for_memory=r.waiting_for_memory,
        tokens_per_s=r.tokens_per_s,
        max_seqs=r.max_seqs,
        kv_block_size=r.block_size,
        **step_line_to_pb(r.step_line),
        slot_requests=r.slots.seqs,
        slot_context_tokens=r.slots.context_tokens,
        slot_tightest_tpot_ms=r.slots.tightest_tpot_ms or 0.0,
        slot_turnover_s=r.slot_turnover_s,
        max_batched_tokens=r.max_batched_tokens,
        **class_delays_to_pb(r.class_delays),
        step_allowance_ms=r.step_allowance_ms,
    )


def model_from_pb(m: common_pb2.ModelInfo) -> ModelInfo:
    return ModelInfo(name=m.name, context_length=m.context_length, memory_bytes=m.memory_bytes)


def model_to_pb(m: ModelInfo) -> common_pb2.ModelInfo:
    return common_pb2.ModelInfo(
        name=m.name, context_length=m.context_length, memory_bytes=m.memory_bytes
    )


def node_from_pb(
    node: common_pb2.NodeInfo,
    models: Iterable[common_pb2.ModelInfo],
    arrived_routes: Iterable[str] = (),
) -> NodeState:
    return NodeState(
        node_id=node.node_id,
        address=node.address,
        memory_bytes=node.memory_bytes,
        device=node.device,
        replicas=tuple(replica_from_pb(r) for r in node.replicas),
        models=tuple(model_from_pb(m) for m in models),
        tenants=tuple(tenant_load_from_pb(t) for t in node.tenants),
        interference=node.interference or 1.0,
        safety_margin=max(0.0, node.safety_margin),
        standby_workers=node.standby_workers,
        arrived_routes=frozenset(arrived_routes),
    )


def node_to_pb(node: NodeState) -> common_pb2.NodeInfo:
    return common_pb2.NodeInfo(
        node_id=node.node_id,
        address=node.address,
        memory_bytes=node.memory_bytes,
        device=node.device,
        replicas=[replica_to_pb(r) for r in node.replicas],
        tenants=[tenant_load_to_pb(t) for t in node.tenants],
        interference=node.interference,
        safety_margin=node.safety_margin,
        standby_workers=node.standby_workers,
    )
