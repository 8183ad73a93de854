from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlacementAssignment(_message.Message):
    __slots__ = ("model", "node_id", "replica_id", "reason")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    model: str
    node_id: str
    replica_id: str
    reason: str
    def __init__(self, model: _Optional[str] = ..., node_id: _Optional[str] = ..., replica_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PlacementMove(_message.Message):
    __slots__ = ("model", "from_node_id", "from_replica_id", "to_node_id", "to_replica_id", "state", "reason")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FROM_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    TO_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TO_REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    model: str
    from_node_id: str
    from_replica_id: str
    to_node_id: str
    to_replica_id: str
    state: str
    reason: str
    def __init__(self, model: _Optional[str] = ..., from_node_id: _Optional[str] = ..., from_replica_id: _Optional[str] = ..., to_node_id: _Optional[str] = ..., to_replica_id: _Optional[str] = ..., state: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PlacementPlan(_message.Message):
    __slots__ = ("version", "assignments", "unplaced_models", "created_unix_ms", "policy", "rejected", "moves", "cordoned_nodes")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    UNPLACED_MODELS_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    CORDONED_NODES_FIELD_NUMBER: _ClassVar[int]
    version: int
    assignments: _containers.RepeatedCompositeFieldContainer[PlacementAssignment]
    unplaced_models: _containers.RepeatedScalarFieldContainer[str]
    created_unix_ms: int
    policy: str
    rejected: bool
    moves: _containers.RepeatedCompositeFieldContainer[PlacementMove]
    cordoned_nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, version: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[PlacementAssignment, _Mapping]]] = ..., unplaced_models: _Optional[_Iterable[str]] = ..., created_unix_ms: _Optional[int] = ..., policy: _Optional[str] = ..., rejected: _Optional[bool] = ..., moves: _Optional[_Iterable[_Union[PlacementMove, _Mapping]]] = ..., cordoned_nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class GetPlanRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReplanRequest(_message.Message):
    __slots__ = ("cordon", "uncordon")
    CORDON_FIELD_NUMBER: _ClassVar[int]
    UNCORDON_FIELD_NUMBER: _ClassVar[int]
    cordon: _containers.RepeatedScalarFieldContainer[str]
    uncordon: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cordon: _Optional[_Iterable[str]] = ..., uncordon: _Optional[_Iterable[str]] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("model", "node_id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    node_id: str
    def __init__(self, model: _Optional[str] = ..., node_id: _Optional[str] = ...) -> None: ...

class RedLineCheck(_message.Message):
    __slots__ = ("model", "node_id", "window", "ttft_p99_ms", "tpot_p99_ms", "sla_class", "ttft_target_ms", "tpot_target_ms", "ok", "modelled", "bursting")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    SLA_CLASS_FIELD_NUMBER: _ClassVar[int]
    TTFT_TARGET_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_TARGET_MS_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    MODELLED_FIELD_NUMBER: _ClassVar[int]
    BURSTING_FIELD_NUMBER: _ClassVar[int]
    model: str
    node_id: str
    window: int
    ttft_p99_ms: float
    tpot_p99_ms: float
    sla_class: str
    ttft_target_ms: float
    tpot_target_ms: float
    ok: bool
    modelled: bool
    bursting: str
    def __init__(self, model: _Optional[str] = ..., node_id: _Optional[str] = ..., window: _Optional[int] = ..., ttft_p99_ms: _Optional[float] = ..., tpot_p99_ms: _Optional[float] = ..., sla_class: _Optional[str] = ..., ttft_target_ms: _Optional[float] = ..., tpot_target_ms: _Optional[float] = ..., ok: _Optional[bool] = ..., modelled: _Optional[bool] = ..., bursting: _Optional[str] = ...) -> None: ...

class PairBenefit(_message.Message):
    __slots__ = ("model", "other", "benefit")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OTHER_FIELD_NUMBER: _ClassVar[int]
    BENEFIT_FIELD_NUMBER: _ClassVar[int]
    model: str
    other: str
    benefit: float
    def __init__(self, model: _Optional[str] = ..., other: _Optional[str] = ..., benefit: _Optional[float] = ...) -> None: ...

class PlacementDecision(_message.Message):
    __slots__ = ("action", "model", "replica_id", "node_id", "from_node_id", "reason", "benefit", "migration_cost", "window_loads", "pairs", "red_line")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BENEFIT_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_COST_FIELD_NUMBER: _ClassVar[int]
    WINDOW_LOADS_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    RED_LINE_FIELD_NUMBER: _ClassVar[int]
    action: str
    model: str
    replica_id: str
    node_id: str
    from_node_id: str
    reason: str
    benefit: float
    migration_cost: float
    window_loads: _containers.RepeatedScalarFieldContainer[float]
    pairs: _containers.RepeatedCompositeFieldContainer[PairBenefit]
    red_line: _containers.RepeatedCompositeFieldContainer[RedLineCheck]
    def __init__(self, action: _Optional[str] = ..., model: _Optional[str] = ..., replica_id: _Optional[str] = ..., node_id: _Optional[str] = ..., from_node_id: _Optional[str] = ..., reason: _Optional[str] = ..., benefit: _Optional[float] = ..., migration_cost: _Optional[float] = ..., window_loads: _Optional[_Iterable[float]] = ..., pairs: _Optional[_Iterable[_Union[PairBenefit, _Mapping]]] = ..., red_line: _Optional[_Iterable[_Union[RedLineCheck, _Mapping]]] = ...) -> None: ...

class ModelPlacement(_message.Message):
    __slots__ = ("model", "replicas", "reason", "peak_rate", "sla_class")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PEAK_RATE_FIELD_NUMBER: _ClassVar[int]
    SLA_CLASS_FIELD_NUMBER: _ClassVar[int]
    model: str
    replicas: int
    reason: str
    peak_rate: float
    sla_class: str
    def __init__(self, model: _Optional[str] = ..., replicas: _Optional[int] = ..., reason: _Optional[str] = ..., peak_rate: _Optional[float] = ..., sla_class: _Optional[str] = ...) -> None: ...

class NodeWindowLoad(_message.Message):
    __slots__ = ("node_id", "device", "models", "window_loads", "peak", "mean")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_LOADS_FIELD_NUMBER: _ClassVar[int]
    PEAK_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    device: str
    models: _containers.RepeatedScalarFieldContainer[str]
    window_loads: _containers.RepeatedScalarFieldContainer[float]
    peak: float
    mean: float
    def __init__(self, node_id: _Optional[str] = ..., device: _Optional[str] = ..., models: _Optional[_Iterable[str]] = ..., window_loads: _Optional[_Iterable[float]] = ..., peak: _Optional[float] = ..., mean: _Optional[float] = ...) -> None: ...

class PlacementExplanation(_message.Message):
    __slots__ = ("plan_version", "created_unix_ms", "policy", "summary", "rejected", "window_s", "windows", "decisions", "models", "nodes", "violations", "notes")
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    plan_version: int
    created_unix_ms: int
    policy: str
    summary: str
    rejected: bool
    window_s: float
    windows: int
    decisions: _containers.RepeatedCompositeFieldContainer[PlacementDecision]
    models: _containers.RepeatedCompositeFieldContainer[ModelPlacement]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeWindowLoad]
    violations: _containers.RepeatedCompositeFieldContainer[RedLineCheck]
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, plan_version: _Optional[int] = ..., created_unix_ms: _Optional[int] = ..., policy: _Optional[str] = ..., summary: _Optional[str] = ..., rejected: _Optional[bool] = ..., window_s: _Optional[float] = ..., windows: _Optional[int] = ..., decisions: _Optional[_Iterable[_Union[PlacementDecision, _Mapping]]] = ..., models: _Optional[_Iterable[_Union[ModelPlacement, _Mapping]]] = ..., nodes: _Optional[_Iterable[_Union[NodeWindowLoad, _Mapping]]] = ..., violations: _Optional[_Iterable[_Union[RedLineCheck, _Mapping]]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...
