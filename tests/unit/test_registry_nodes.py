"""NodeRegistry: heartbeats replace a node's state, silence past the TTL removes it."""

from __future__ import annotations

import pytest

from strata.policy.clock import ManualClock
from strata.policy.registry import (
    ModelInfo,
    NodeRegistry,
    NodeState,
    ReplicaPhase,
    ReplicaState,
)


def node(node_id: str, *replicas: ReplicaState, models: tuple[ModelInfo, ...] = ()) -> NodeState:
    return NodeState(
        node_id=node_id, address=f"{node_id}:1", memory_bytes=10, replicas=replicas, models=models
    )


def replica(model: str, rid: str, phase: ReplicaPhase = ReplicaPhase.READY) -> ReplicaState:
    return ReplicaState(model=model, replica_id=rid, phase=phase)


def test_node_expires_after_ttl_on_the_injected_clock():
    clock = ManualClock()
    reg = NodeRegistry(clock=clock, ttl_s=5.0)
    reg.heartbeat(node("a"))
    clock.advance(2.0)
    reg.heartbeat(node("b"))
    clock.advance(3.0)  # a silent for exactly the TTL: still alive
    assert [n.node_id for n in reg.nodes()] == ["a", "b"]
    assert reg.expire() == []
    clock.advance(0.5)  # a silent 5.5 s, b 3.5 s
    assert [n.node_id for n in reg.nodes()] == ["b"]
    assert reg.get("a") is None
    assert reg.expire() == ["a"]
    clock.advance(2.0)
    assert reg.expire() == ["b"]
    assert reg.nodes() == []


def test_heartbeat_refreshes_and_replaces_state():
    clock = ManualClock(100.0)
    reg = NodeRegistry(clock=clock, ttl_s=1.0)
    reg.heartbeat(node("a", replica("m", "r1", ReplicaPhase.LOADING)))
    clock.advance(0.9)
    reg.heartbeat(node("a", replica("m", "r1")))
    clock.advance(0.9)
    alive = reg.get("a")
    assert alive is not None and alive.last_seen == pytest.approx(100.9)
    assert [(loc.node.node_id, loc.replica.replica_id) for loc in reg.ready_replicas("m")] == [
        ("a", "r1")
    ]


def test_ready_replicas_only_ready_sorted_by_node_then_replica():
    reg = NodeRegistry(clock=ManualClock())
    reg.heartbeat(node("b", replica("m", "r2"), replica("m", "r1"), replica("x", "r3")))
    reg.heartbeat(node("a", replica("m", "r9", ReplicaPhase.DRAINING), replica("m", "r8")))
    assert [(loc.node.node_id, loc.replica.replica_id) for loc in reg.ready_replicas("m")] == [
        ("a", "r8"),
        ("b", "r1"),
        ("b", "r2"),
    ]


def test_models_from_live_nodes_and_known_models_remember_the_gone():
    clock = ManualClock()
    reg = NodeRegistry(clock=clock, ttl_s=1.0)
    reg.heartbeat(node("b", models=(ModelInfo("m", 2048, 800), ModelInfo("k", 512, 4))))
    reg.heartbeat(node("a", models=(ModelInfo("m", 4096, 900),)))
    assert reg.models() == [ModelInfo("k", 512, 4), ModelInfo("m", 4096, 900)]  # lowest id wins
    clock.advance(2.0)
    reg.heartbeat(node("c", replica("z", "r1", ReplicaPhase.LOADING)))
    assert reg.models() == []
    assert reg.known_models() == ["k", "m", "z"]
    assert reg.knows_model("m") and not reg.knows_model("q")


def test_ttl_must_be_positive():
    with pytest.raises(ValueError, match="ttl_s must be positive, got 0"):
        NodeRegistry(clock=ManualClock(), ttl_s=0)
