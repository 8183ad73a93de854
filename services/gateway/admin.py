"""Admin gRPC servicer: tenants, their API keys and the SLA classes, served next to the tenant
API by the gateway.

Every call needs `authorization: Bearer <admin key>` (the gateway's admin key file). A change
served here reaches this gateway's caches at once (tenant directory, key cache); other gateways
read it within their cache TTLs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.gateway.convert import (
    changes_from_update,
    record,
    settings_from_record,
    sla_from_record,
    sla_record,
)
from strata.core.sla import SlaTable
from strata.gateway.admin_key import is_admin_key
from strata.gateway.auth import Authenticator, bearer_key
from strata.gateway.tenant_directory import TenantDirectory
from strata.store.sla_classes import InvalidSlaClassError, load_sla_table, put_sla_class
from strata.store.tenants import (
    InvalidTenantError,
    TenantExistsError,
    UnknownTenantError,
    create_tenant,
    delete_tenant,
    issue_api_key,
    list_tenants,
    revoke_api_key,
    tenant_info,
    update_tenant,
)
from strata.v1 import admin_pb2, admin_pb2_grpc

T = TypeVar("T")
MISSING_ADMIN_KEY = (
    "missing admin key: send metadata 'authorization: Bearer <admin key>' "
    "(the gateway writes it to the admin_key file in its data dir)"
)
WRONG_ADMIN_KEY = (
    "this key is not the gateway's admin key; use the one in the admin_key file "
    "of the gateway's data dir"
)


class AdminServicer(admin_pb2_grpc.AdminServicer):
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        admin_key: str,
        auth: Authenticator,
        tenants: TenantDirectory,
        sla_seed: SlaTable,
        forget: Callable[[str], None] = lambda tenant: None,
    ):
        self.forget = forget  # drops a deleted tenant's metric series
        self.sessions = sessions
        self.admin_key = admin_key
        self.auth = auth
        self.tenants = tenants
        self.sla_seed = sla_seed

    async def _authorize(self, context: grpc.aio.ServicerContext) -> None:
        given = bearer_key(context.invocation_metadata())
        if given is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, MISSING_ADMIN_KEY)
        if not is_admin_key(given, self.admin_key):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, WRONG_ADMIN_KEY)

    async def _store(
        self, context: grpc.aio.ServicerContext, work: Callable[[AsyncSession], Awaitable[T]]
    ) -> T:
        """Run `work` in a session; store errors become status codes with the store's
        sentence."""
        try:
            async with self.sessions() as session:
                return await work(session)
        except TenantExistsError as err:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, str(err))
        except (InvalidTenantError, InvalidSlaClassError) as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except UnknownTenantError as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))

    async def CreateTenant(
        self, request: admin_pb2.CreateTenantRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateTenantResponse:
        await self._authorize(context)
        name = request.tenant.name
        s = settings_from_record(request.tenant)

        async def work(session: AsyncSession) -> admin_pb2.CreateTenantResponse:
            await create_tenant(
                session,
                name,
                s.sla_class,
                weight=s.weight,
                guaranteed_share=s.guaranteed_share,
                burst_share=s.burst_share,
                rate_limit_rps=s.rate_limit_rps,
            )
            key = await issue_api_key(session, name) if request.issue_key else ""
            return admin_pb2.CreateTenantResponse(
                tenant=record(await tenant_info(session, name)), api_key=key
            )

        reply = await self._store(context, work)
        # A cached "no such tenant" from before must not outlive the creation.
        self.tenants.invalidate(name)
        return reply

    async def UpdateTenant(
        self, request: admin_pb2.UpdateTenantRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.TenantRecord:
        await self._authorize(context)
        name = await _required(context, "tenant.name", request.tenant.name)
        changes = changes_from_update(request)

        async def work(session: AsyncSession) -> admin_pb2.TenantRecord:
            await update_tenant(session, name, changes)
            return record(await tenant_info(session, name))

        reply = await self._store(context, work)
        self.tenants.invalidate(name)
        return reply

    async def GetTenant(
        self, request: admin_pb2.GetTenantRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.TenantRecord:
        await self._authorize(context)
        name = await _required(context, "name", request.name)
        return await self._store(context, lambda s: _record_of(s, name))

    async def ListTenants(
        self, request: admin_pb2.ListTenantsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListTenantsResponse:
        await self._authorize(context)
        infos = await self._store(context, list_tenants)
        return admin_pb2.ListTenantsResponse(tenants=[record(i) for i in infos])

    async def DeleteTenant(
        self, request: admin_pb2.DeleteTenantRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DeleteTenantResponse:
        await self._authorize(context)
        name = await _required(context, "name", request.name)
        revoked = await self._store(context, lambda s: delete_tenant(s, name))
        self.auth.forget_tenant(name)
        self.tenants.invalidate(name)
        self.forget(name)
        return admin_pb2.DeleteTenantResponse(keys_revoked=revoked)

    async def IssueKey(
        self, request: admin_pb2.IssueKeyRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.IssueKeyResponse:
        await self._authorize(context)
        name = await _required(context, "tenant", request.tenant)
        key = await self._store(context, lambda s: issue_api_key(s, name))
        return admin_pb2.IssueKeyResponse(tenant=name, api_key=key)

    async def RevokeKey(
        self, request: admin_pb2.RevokeKeyRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.RevokeKeyResponse:
        await self._authorize(context)
        key = await _required(context, "api_key", request.api_key.strip())
        found = await self._store(context, lambda s: revoke_api_key(s, key))
        if not found:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                "no such API key (keys are stored hashed: check that the whole key was copied)",
            )
        self.auth.forget(key)
        return admin_pb2.RevokeKeyResponse(revoked=True)

    async def ListSlaClasses(
        self, request: admin_pb2.ListSlaClassesRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListSlaClassesResponse:
        await self._authorize(context)
        table = await self._store(context, lambda s: load_sla_table(s, self.sla_seed))
        ordered = sorted(table.classes.values(), key=lambda c: (-c.priority, c.name))
        return admin_pb2.ListSlaClassesResponse(
            classes=[sla_record(c) for c in ordered], default_class=table.default
        )

    async def PutSlaClass(
        self, request: admin_pb2.SlaClassRecord, context: grpc.aio.ServicerContext
    ) -> admin_pb2.SlaClassRecord:
        await self._authorize(context)
        sla = sla_from_record(request)
        stored = await self._store(context, lambda s: put_sla_class(s, sla, self.sla_seed))
        self.tenants.invalidate_all()
        return sla_record(stored)


async def _record_of(session: AsyncSession, name: str) -> admin_pb2.TenantRecord:
    return record(await tenant_info(session, name))


async def _required(context: grpc.aio.ServicerContext, field: str, value: str) -> str:
    if not value:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{field} is required")
    return value
