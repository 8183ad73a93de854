"""Home nodes: a partition of the pool by guaranteed share, which routing prefers while it
costs a request little, and which by default takes no other tenant's requests.

Each tenant with a guaranteed share g has a home of round(g x N) of the N nodes holding a READY
replica of the model (largest remainder, at least one; shares summing past 1 are scaled down
to fit); the tenants without a guarantee share the nodes left as one common home. Nodes are
dealt in node-id order to the tenants in name order, so every scheduler replica computes the
same homes from the same heartbeats.

A request goes home when its home's best replica is estimated to give its first token within
`slack_s` of the best replica anywhere and, for a class with a TTFT target, within
`ttft_fraction` of that target; otherwise it goes to the best replica it may reach (below).
So in calm periods each tenant's work stays on its own nodes, as on a static
partition, and a tenant whose demand outgrows its home spills over instead of queueing there.

Why (docs/design/scheduling.md, "Home nodes"): on a pool whose steps cost mostly a fixed
time, spreading one tenant's backlog over every node put its prefill chunks into every other
tenant's decode steps; the tenants within their shares then decoded slower than on a static
partition of their shares.

With `guests` off (the default), a home with a guarantee serves its owner only: every tenant
reaches its own home and the common one (the nodes no guarantee holds, the pool's capacity to
borrow), as on a static partition of the guarantees with the rest pooled. With guests on, it
reaches every node. A guest's decodes share every step of the node it lands on: a burst that
spills into the homes of tenants within their shares slows their decodes, which no queue
priority undoes (docs/design/scheduling.md measures both).

Homes follow the tenants the scheduler has routed for lately (a tenant not seen for
`forget_s` drops out, and the others' homes widen). Pure: a clock is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

COMMON = ""  # the home key of the tenants without a guarantee


@dataclass(slots=True, frozen=True)
class HomeSettings:
    slack_s: float = 0.5  # a home may be this much slower to a first token than the best
    ttft_fraction: float = 0.25  # ... and at most this fraction of the class's TTFT target
    forget_s: float = 600.0  # a tenant not routed for this long has no home
    guests: bool = False  # whether others' requests may go to a home with a guarantee

    def __post_init__(self) -> None:
        if not (self.slack_s >= 0 and 0 < self.ttft_fraction <= 1 and self.forget_s > 0):
            raise ValueError(
                f"home slack_s must be >= 0, ttft_fraction in (0, 1] and forget_s positive, "
                f"got {self.slack_s}, {self.ttft_fraction}, {self.forget_s}"
            )


def home_partition(shares: Mapping[str, float], nodes: Sequence[str]) -> dict[str, frozenset[str]]:
    """Homes of the tenants in `shares` (tenant -> guaranteed share) over `nodes` (module
    docstring): tenant -> node ids, the tenants without a guarantee under COMMON (absent when
    no node is left for them). Empty when there are fewer nodes than tenants with a guarantee
    (no partition to prefer)."""
    ordered = sorted(nodes)
    n = len(ordered)
    sure = sorted(t for t, s in shares.items() if s > 0)
    if not sure or n < len(sure):
        return {}
    total = sum(shares[t] for t in sure)
    scale = 1.0 / total if total > 1.0 else 1.0
    exact = {t: n * shares[t] * scale for t in sure}
    count = {t: max(1, math.floor(x)) for t, x in exact.items()}
    # Room for the common home only when some tenant has no guarantee.
    want = min(n, round(sum(exact.values())))
    for t in sorted(sure, key=lambda t: (math.floor(exact[t]) - exact[t], t)):
        if sum(count.values()) >= want:
            break
        count[t] += 1
    while sum(count.values()) > n:  # the one-node floors overshot: take from the largest
        largest = max(sure, key=lambda t: (count[t], t))
        count[largest] -= 1
    out: dict[str, frozenset[str]] = {}
    i = 0
    for t in sure:
        out[t] = frozenset(ordered[i : i + count[t]])
        i += count[t]
    if i < n:
        out[COMMON] = frozenset(ordered[i:])
    return out


@dataclass(slots=True)
class Homes:
    """The homes of the tenants routed for lately, per model, recomputed when those tenants
    or the model's nodes change."""

    settings: HomeSettings = HomeSettings()
    _seen: dict[str, tuple[float, float]] = field(default_factory=dict)  # tenant -> share, at
    _shares: tuple[tuple[str, float], ...] = ()
    # model -> (shares, the nodes' membership count, their number, homes), as last computed
    _homes: dict[str, tuple[tuple[tuple[str, float], ...], int, int, dict[str, frozenset[str]]]] = (
        field(default_factory=dict)
    )
    # (model, tenant) -> (its home, the home and the common one), as last computed
    _reach: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = field(
        default_factory=dict
    )

    def observe(self, tenant: str, guaranteed_share: float, now: float) -> None:
        """`tenant` was routed for at `now`; tenants not routed for in forget_s drop out."""
        known = self._seen.get(tenant)
        self._seen[tenant] = (guaranteed_share, now)
        cutoff = now - self.settings.forget_s
        stale = [t for t, (_, at) in self._seen.items() if at < cutoff]
        for t in stale:
            del self._seen[t]
        if stale or known is None or known[0] != guaranteed_share:
            self._shares = tuple(sorted((t, share) for t, (share, _) in self._seen.items()))

    def home(
        self, tenant: str, model: str, nodes: Collection[str], members: int
    ) -> frozenset[str] | None:
        """`tenant`'s home among `nodes` (the ids of the nodes holding a READY replica of
        `model`; `members` changes whenever they do: NodeRegistry.ready_members), or None when
        the pool has no partition to prefer. observe() the tenant first."""
        cached = self._homes.get(model)
        if cached is None or cached[0] is not self._shares or cached[1] != members:
            computed = home_partition(dict(self._shares), list(nodes))
            cached = self._homes[model] = (self._shares, members, len(nodes), computed)
        _, _, count, homes = cached
        share = self._seen.get(tenant, (0.0, 0.0))[0]
        found = homes.get(tenant if share > 0 else COMMON)
        if found is None or len(found) >= count:
            return None  # no partition, or the home is the whole pool
        return found

    def reach(
        self, tenant: str, model: str, nodes: Collection[str], members: int
    ) -> frozenset[str] | None:
        """Where `tenant`'s requests may go among `nodes` (as for home()): None (anywhere)
        with guests allowed or no partition, else its home and the common one."""
        if self.settings.guests:
            return None
        home = self.home(tenant, model, nodes, members)
        if home is None:
            return None
        key = (model, tenant)
        cached = self._reach.get(key)
        if cached is None or cached[0] is not home:
            common = self._homes[model][3].get(COMMON, frozenset())
            cached = self._reach[key] = (home, home | common)
        return cached[1]

    def prefer(self, home_est_ms: float, best_est_ms: float, ttft_target_ms: float | None) -> bool:
        """Whether a request goes to its home's best replica, estimated at `home_est_ms` to its
        first token, rather than to the best anywhere at `best_est_ms`."""
        if home_est_ms > best_est_ms + 1000.0 * self.settings.slack_s:
            return False
        return not ttft_target_ms or home_est_ms <= self.settings.ttft_fraction * ttft_target_ms
