"""The KV tier store's background migrator: promotions queued by prefetch, watermark demotions,
lease and reservation expiry. One thread, woken when there is work (a prefetch queued promotions,
a commit or reservation crossed the high watermark) and at least every interval for expiry, so
that no RPC (and no decoding request) ever waits on a migration it did not ask for. The interval
only bounds how late an expired lease or reservation is reclaimed: waking more often costs CPU
the node's engines could use."""

from __future__ import annotations

import logging
import threading

from strata.kvtier.tiered_store import TieredStore

log = logging.getLogger(__name__)


class Migrator:
    def __init__(self, store: TieredStore, interval_s: float = 0.5):
        self.store = store
        self.interval_s = interval_s
        self.rounds = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kv-migrator", daemon=True)

    def start(self) -> Migrator:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        """Its thread runs (started and neither stopped nor died)."""
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self.store.work.set()
        self._thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.store.work.wait(self.interval_s)
            self.store.work.clear()
            try:
                self.store.run_once()
                self.rounds += 1
            except OSError:
                # A disk error must not kill the migrator: blocks stay where they are (host
                # memory keeps serving them) and the next round retries.
                self.failures += 1
                log.exception("kv migration round failed; retrying next round")
