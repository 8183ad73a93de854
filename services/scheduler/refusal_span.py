"""The SLA check's terms as route-span attributes (a refusal's, and an admitted request's), so a
trace shows why it was judged as it was."""

from __future__ import annotations

from strata.policy.scheduling.admission import TtftEstimate
from strata.telemetry import names


def estimate_attributes(terms: TtftEstimate) -> dict[str, str | float | int]:
    """The estimate judged, each of its terms, what admission allowed and the chosen node."""
    return {
        names.NODE_ID: terms.node_id,
        names.ROUTE_ESTIMATED_TTFT_MS: round(terms.estimate_ms, 1),
        names.ROUTE_SLOT_WAIT_MS: round(terms.slot_wait_ms, 1),
        names.ROUTE_AHEAD_MS: round(terms.ahead_ms, 1),
        names.ROUTE_OWN_PREFILL_MS: round(terms.own_prefill_ms, 1),
        names.ROUTE_OBSERVED_MS: round(terms.observed_ms, 1),
        names.ROUTE_SOLO_MS: round(terms.solo_ms, 1),
        names.ROUTE_ALLOWED_TTFT_MS: round(terms.allowed_ms, 1),
        names.ROUTE_HELD_SEQS: terms.held_seqs,
        names.ROUTE_QUEUED_AHEAD: terms.queued_ahead,
        names.ROUTE_LENT_MS: round(terms.lent_ms, 1),
    }
