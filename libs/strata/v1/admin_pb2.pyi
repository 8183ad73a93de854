from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TenantRecord(_message.Message):
    __slots__ = ("name", "sla_class", "weight", "guaranteed_share", "burst_share", "rate_limit_rps", "created_unix_ms", "active_keys")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLA_CLASS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    GUARANTEED_SHARE_FIELD_NUMBER: _ClassVar[int]
    BURST_SHARE_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_RPS_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_KEYS_FIELD_NUMBER: _ClassVar[int]
    name: str
    sla_class: str
    weight: float
    guaranteed_share: float
    burst_share: float
    rate_limit_rps: float
    created_unix_ms: int
    active_keys: int
    def __init__(self, name: _Optional[str] = ..., sla_class: _Optional[str] = ..., weight: _Optional[float] = ..., guaranteed_share: _Optional[float] = ..., burst_share: _Optional[float] = ..., rate_limit_rps: _Optional[float] = ..., created_unix_ms: _Optional[int] = ..., active_keys: _Optional[int] = ...) -> None: ...

class CreateTenantRequest(_message.Message):
    __slots__ = ("tenant", "issue_key")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ISSUE_KEY_FIELD_NUMBER: _ClassVar[int]
    tenant: TenantRecord
    issue_key: bool
    def __init__(self, tenant: _Optional[_Union[TenantRecord, _Mapping]] = ..., issue_key: _Optional[bool] = ...) -> None: ...

class CreateTenantResponse(_message.Message):
    __slots__ = ("tenant", "api_key")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    tenant: TenantRecord
    api_key: str
    def __init__(self, tenant: _Optional[_Union[TenantRecord, _Mapping]] = ..., api_key: _Optional[str] = ...) -> None: ...

class UpdateTenantRequest(_message.Message):
    __slots__ = ("tenant", "fields")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    tenant: TenantRecord
    fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant: _Optional[_Union[TenantRecord, _Mapping]] = ..., fields: _Optional[_Iterable[str]] = ...) -> None: ...

class GetTenantRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants",)
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantRecord]
    def __init__(self, tenants: _Optional[_Iterable[_Union[TenantRecord, _Mapping]]] = ...) -> None: ...

class DeleteTenantRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTenantResponse(_message.Message):
    __slots__ = ("keys_revoked",)
    KEYS_REVOKED_FIELD_NUMBER: _ClassVar[int]
    keys_revoked: int
    def __init__(self, keys_revoked: _Optional[int] = ...) -> None: ...

class IssueKeyRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class IssueKeyResponse(_message.Message):
    __slots__ = ("tenant", "api_key")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    api_key: str
    def __init__(self, tenant: _Optional[str] = ..., api_key: _Optional[str] = ...) -> None: ...

class RevokeKeyRequest(_message.Message):
    __slots__ = ("api_key",)
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    api_key: str
    def __init__(self, api_key: _Optional[str] = ...) -> None: ...

class RevokeKeyResponse(_message.Message):
    __slots__ = ("revoked",)
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    revoked: bool
    def __init__(self, revoked: _Optional[bool] = ...) -> None: ...

class SlaClassRecord(_message.Message):
    __slots__ = ("name", "priority", "ttft_ms", "tpot_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    priority: int
    ttft_ms: float
    tpot_ms: float
    def __init__(self, name: _Optional[str] = ..., priority: _Optional[int] = ..., ttft_ms: _Optional[float] = ..., tpot_ms: _Optional[float] = ...) -> None: ...

class ListSlaClassesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSlaClassesResponse(_message.Message):
    __slots__ = ("classes", "default_class")
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_CLASS_FIELD_NUMBER: _ClassVar[int]
    classes: _containers.RepeatedCompositeFieldContainer[SlaClassRecord]
    default_class: str
    def __init__(self, classes: _Optional[_Iterable[_Union[SlaClassRecord, _Mapping]]] = ..., default_class: _Optional[str] = ...) -> None: ...
