"""Tenant SDK (AsyncClient, Client), the `strata` command line and the container health probe."""

from strata.client.sdk import AsyncClient, Client, build_request
from strata.client.settings import MissingApiKey

__all__ = ["AsyncClient", "Client", "MissingApiKey", "build_request"]
