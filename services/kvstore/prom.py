"""The KV tier store's Prometheus metrics, from the same figures GetStats answers:

strata_kvstore_blocks{tier}, strata_kvstore_bytes{tier}, strata_kvstore_capacity_bytes{tier}
strata_kvstore_hits_total{tier}, strata_kvstore_misses_total
strata_kvstore_evictions_total{tier}
strata_kvstore_migrations_total{direction}       promote (disk -> host) | demote (host -> disk)
strata_kvstore_backpressure_total                writers refused slots under memory pressure
strata_kvstore_pressure                          1 while the host tier is past its watermark
strata_kvstore_peer_pulled_blocks_total, strata_kvstore_checksum_failures_total
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from services.kvstore.servicer import store_stats
from strata.kvtier.tiered_store import TieredStore
from strata.telemetry.prometheus import counter, gauge


def store_families(store: TieredStore) -> Iterable[Metric]:
    s = store_stats(store)
    tiers = list(s.tiers)
    by_tier = ("tier",)
    yield gauge("strata_kvstore_blocks", "Blocks held", by_tier,
                (((t.tier,), t.blocks) for t in tiers))  # fmt: skip
    yield gauge("strata_kvstore_bytes", "Bytes used", by_tier,
                (((t.tier,), t.bytes_used) for t in tiers))  # fmt: skip
    yield gauge("strata_kvstore_capacity_bytes", "Bytes the tier may hold", by_tier,
                (((t.tier,), t.bytes_capacity) for t in tiers))  # fmt: skip
    yield counter("strata_kvstore_hits", "Blocks served", by_tier,
                  (((t.tier,), t.hits) for t in tiers))  # fmt: skip
    yield counter("strata_kvstore_misses", "Blocks asked for and not held", (), [((), s.misses)])
    yield counter("strata_kvstore_evictions", "Blocks dropped from the node", by_tier,
                  (((t.tier,), t.evictions) for t in tiers))  # fmt: skip
    c = store.counters
    yield counter(
        "strata_kvstore_migrations",
        "Blocks moved between tiers",
        ("direction",),
        [(("promote",), c.promotions), (("demote",), c.demotions)],
    )
    yield counter(
        "strata_kvstore_backpressure",
        "Writers refused slots under memory pressure",
        (),
        [((), s.reserve_refused)],
    )
    yield gauge("strata_kvstore_pressure", "1 while under memory pressure", (),
                [((), 1.0 if s.pressure else 0.0)])  # fmt: skip
    yield counter("strata_kvstore_peer_pulled_blocks", "Blocks pulled from peer stores", (),
                  [((), s.peer_blocks_pulled)])  # fmt: skip
    yield counter("strata_kvstore_checksum_failures", "Blocks that failed their checksum", (),
                  [((), s.checksum_failures)])  # fmt: skip
