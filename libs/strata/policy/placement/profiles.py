"""Engine profiles as the batch-aware planner's engine costs, per model and kind of device.

`strata profile` measures a real engine's step costs into a JSON profile (strata.core.profile);
ProfileCosts answers the two questions the placement latency model asks of it
(strata.policy.placement.capacity.EngineCosts):

    prefill_s(N)          a prompt of N tokens prefilled from an empty context, in chunks of
                          the engine's max_batched_tokens, its last chunk sampling one token
    decode_step_s(B, C)   a step of B one-token decodes at mean context C (the profile's
                          decode line: each decode reads its C + 1 keys)

A profile is keyed by (model, device kind): a node's device "cuda:1" is of kind "cuda", so a
profile measured on one GPU stands for every GPU of that kind in the cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from strata.core.blocks import DEFAULT_BLOCK_SIZE
from strata.core.profile import EngineProfile, StepShape, load_profile, prefill_keys
from strata.policy.placement.capacity import EngineCosts

NO_PROFILES = "none"


def device_kind(device: str) -> str:
    return device.split(":", 1)[0] or "cpu"


class ProfileCosts:
    """EngineCosts from one engine profile."""

    def __init__(self, profile: EngineProfile) -> None:
        self._costs = profile.costs
        self._block = int(profile.engine.get("block_size", DEFAULT_BLOCK_SIZE))
        self._chunk = max(1, int(profile.engine.get("max_batched_tokens", 2048)))
        self._max_batch = int(profile.engine.get("max_seqs", 32))
        self._share = profile.colocation_share
        self._prefill_share = profile.prefill_colocation_share
        self._prefill: dict[int, float] = {}

    @property
    def max_batch(self) -> int:
        return self._max_batch

    @property
    def colocation_share(self) -> float:
        return self._share

    @property
    def prefill_colocation_share(self) -> float:
        return self._prefill_share

    def prefill_s(self, tokens: float) -> float:
        n = max(1, round(tokens))
        if n not in self._prefill:
            total, done = 0.0, 0
            while done < n:
                chunk = min(self._chunk, n - done)
                last = done + chunk >= n
                total += self._costs.seconds(
                    StepShape(
                        tokens=chunk,
                        sampled=1 if last else 0,
                        prefill_keys=prefill_keys(1, chunk, done + chunk, self._block),
                        prefill_longest=chunk,
                        prefill_context=done,
                    )
                )
                done += chunk
            self._prefill[n] = total
        return self._prefill[n]

    def decode_step_s(self, batch: float, context: float) -> float:
        return self._costs.decode_seconds(batch, batch * (context + 1))


class ProfileTable:
    """The profiles found at a path, looked up by (model, device kind)."""

    def __init__(
        self, costs: Mapping[tuple[str, str], EngineCosts], sources: Mapping[tuple[str, str], str]
    ) -> None:
        self._costs = dict(costs)
        self.sources = dict(sources)

    def __call__(self, model: str, device: str) -> EngineCosts | None:
        return self._costs.get((model, device_kind(device)))

    def describe(self) -> str:
        return ", ".join(f"{m} on {d}" for m, d in sorted(self._costs)) or "none"


def load_profiles(path: str) -> ProfileTable:
    """Every profile in `path` (a JSON file, or a folder of them); `none` loads nothing.
    Raises ValueError naming the file when one is malformed or two claim the same key."""
    if path == NO_PROFILES:
        return ProfileTable({}, {})
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".json"))
    elif os.path.isfile(path):
        files = [path]
    else:
        raise ValueError(
            f"no engine profile file or folder at {path!r}; write one with "
            f"`strata profile` or set it to {NO_PROFILES!r}"
        )
    costs: dict[tuple[str, str], EngineCosts] = {}
    sources: dict[tuple[str, str], str] = {}
    for f in files:
        profile = load_profile(f)
        key = (profile.model, device_kind(profile.device))
        if key in sources:
            raise ValueError(f"{f} and {sources[key]} both profile {key[0]} on {key[1]}; keep one")
        costs[key], sources[key] = ProfileCosts(profile), f
    return ProfileTable(costs, sources)
