"""The heat table: per block, when it was last read, how often (decayed), and live references.

Frequency decays exponentially with a half-life, so a block that was popular an hour ago cools
down instead of squatting in host memory forever. Clock readings come from the caller.
"""

from __future__ import annotations

from strata.policy.kv_tiering import BlockHeat


class HeatTable:
    def __init__(self, half_life_s: float = 60.0):
        if half_life_s <= 0:
            raise ValueError(f"half_life_s must be positive, got {half_life_s}")
        self.half_life_s = half_life_s
        self._heat: dict[int, BlockHeat] = {}

    def __len__(self) -> int:
        return len(self._heat)

    def get(self, block_hash: int) -> BlockHeat | None:
        return self._heat.get(block_hash)

    def touch(self, block_hash: int, now: float) -> BlockHeat:
        heat = self._heat.get(block_hash)
        if heat is None:
            heat = self._heat[block_hash] = BlockHeat(last_access=now, frequency=1.0)
        else:
            heat.frequency = heat.decayed(now, self.half_life_s) + 1.0
            heat.last_access = now
        return heat

    def add_ref(self, block_hash: int, now: float) -> None:
        heat = self._heat.get(block_hash)
        if heat is None:
            heat = self._heat[block_hash] = BlockHeat(last_access=now)
        heat.live_refs += 1

    def drop_ref(self, block_hash: int) -> None:
        heat = self._heat.get(block_hash)
        if heat is not None and heat.live_refs > 0:
            heat.live_refs -= 1

    def forget(self, block_hash: int) -> None:
        self._heat.pop(block_hash, None)
