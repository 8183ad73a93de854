"""The engine's settings, as one part of a service's settings (strata.core.settings).

A decode worker reads them for its own engine; a node manager reads the same fields and hands
them, with each worker's own (its model, its port), to every worker it starts as one
serialized configuration.
"""

from __future__ import annotations

import enum
import os

from pydantic import Field, field_validator, model_validator

from strata.core.blocks import DEFAULT_BLOCK_SIZE
from strata.core.settings import StrataSettings
from strata.engine.engine import EngineConfig
from strata.engine.sparse.config import ESTIMATES, SparseConfig, parse_budget
from strata.engine.step_meter import PROFILES_DIR, find_profile


class AttentionKernel(enum.StrEnum):
    CPP = "cpp"  # the fused CPU decode kernel, built at start (torch where it cannot)
    TORCH = "torch"


class DType(enum.StrEnum):
    AUTO = "auto"  # the checkpoint's own (LoadedModel.dtype)
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


def _default_threads() -> int:
    # Workers get the cores; two torch threads fighting another busy process run many times
    # slower (docs/design/engine.md), so leave one core to the rest of the stack.
    return max(1, (os.cpu_count() or 2) - 1)


class EngineFields(StrataSettings):
    device: str = Field("cpu", description="cpu, cuda, cuda:N")
    dtype: DType = Field(
        DType.AUTO,
        description="activations', float weights' and KV cache's dtype (auto: the checkpoint's; "
        "for quantized GGUF weights bfloat16 where the device computes it natively, else float32)",
    )
    torch_threads: int = Field(
        default_factory=_default_threads,
        ge=1,
        description="torch threads of a worker (default: CPUs - 1)",
    )
    block_size: int = Field(
        DEFAULT_BLOCK_SIZE,
        ge=1,
        description="tokens per KV block (a "
        "power of two; workers report it, gateway and scheduler use it)",
    )
    kv_cache_bytes: int = Field(256 << 20, ge=1, description="the device KV pool's bytes")
    quantized_weights: bool = Field(
        True,
        description="keep a GGUF checkpoint's Q4_0/Q4_1/Q4_K/Q8_0 weights quantized on the CPU "
        "(false: widen them to the dtype at load)",
    )

    kv_blocks: int = Field(
        0, ge=0, description="KV blocks in the pool (0: as many as STRATA_KV_CACHE_BYTES holds)"
    )
    max_batched_tokens: int = Field(
        2048, ge=1, description="tokens one engine step computes at most"
    )
    max_seqs: int = Field(32, ge=1, description="sequences one engine step holds at most")
    attention_kernel: AttentionKernel = Field(
        AttentionKernel.CPP, description="cpp (fused CPU decode kernel) | torch"
    )
    profile_path: str = Field(
        PROFILES_DIR,
        description="the served model's solo step profile, "
        "priced against each step to estimate interference: a profile "
        "file, or a folder of <model>-<device>.json; empty: none",
    )
    sparse: bool = Field(
        False,
        description="the sparse long-context decode path for requests "
        "that do not choose (off: dense attention is exact)",
    )
    sparse_min_context: int = Field(
        4096, ge=1, description="tokens in the context before a row may go sparse"
    )
    sparse_budget: str = Field(
        "0.125",
        description="blocks read per row and KV head: a "
        "fraction of the context (0.125) or a count (64)",
    )
    sparse_sink_blocks: int = Field(1, ge=0, description="leading blocks always read")
    sparse_window_blocks: int = Field(4, ge=1, description="recent blocks always read")
    sparse_threshold: float = Field(
        0.1, ge=0, description="the largest estimate of left-out attention mass still trusted"
    )
    sparse_estimate: str = Field("moment", description=" | ".join(ESTIMATES))
    sparse_compensate: bool = Field(
        True, description="give the left-out mass to the left-out tokens' mean value"
    )
    sparse_adaptive: bool = Field(
        True,
        description="per layer, the budget level (the fraction, doubled, doubled again) or "
        "dense attention that measured fastest there (CPU only)",
    )

    @field_validator("sparse_budget")
    @classmethod
    def _budget(cls, text: str) -> str:
        parse_budget(text)
        return text

    @field_validator("profile_path")
    @classmethod
    def _profile(cls, path: str) -> str:
        if path and not (os.path.isdir(path) or os.path.isfile(path)):
            raise ValueError(
                f"STRATA_PROFILE_PATH {path!r} is neither a file nor a folder; "
                f"point it at an engine profile written by `strata profile` or a "
                f"folder of them named <model>-<device>.json, or leave it empty"
            )
        return path

    @model_validator(mode="after")
    def _engine_accepts(self) -> EngineFields:
        try:
            self.sparse_config()
        except ValueError as err:
            raise ValueError(f"sparse decode settings (STRATA_SPARSE_*): {err}") from None
        self.engine_config()  # the engine's own checks (block size a power of two, ...)
        return self

    def sparse_config(self) -> SparseConfig:
        blocks, fraction = parse_budget(self.sparse_budget)
        return SparseConfig(
            enabled=self.sparse,
            min_context=self.sparse_min_context,
            budget_blocks=blocks,
            budget_fraction=fraction,
            sink_blocks=self.sparse_sink_blocks,
            window_blocks=self.sparse_window_blocks,
            threshold=self.sparse_threshold,
            estimate=self.sparse_estimate,
            compensate=self.sparse_compensate,
            adaptive=self.sparse_adaptive,
        )

    def engine_config(self) -> EngineConfig:
        """ValueError naming the setting that the engine refuses."""
        return EngineConfig(
            block_size=self.block_size,
            kv_cache_bytes=self.kv_cache_bytes,
            num_blocks=self.kv_blocks,
            max_batched_tokens=self.max_batched_tokens,
            max_seqs=self.max_seqs,
            device=self.device,
            dtype=str(self.dtype),
            attention_kernel=str(self.attention_kernel),
            quantized_weights=self.quantized_weights,
            sparse=self.sparse_config(),
        )

    def profile_for(self, model: str) -> str:
        """The profile file of `model` on this device: a folder is searched for
        <model>-<device type>.json (empty when absent), a file is taken as is."""
        if os.path.isdir(self.profile_path):
            return find_profile(model, self.device, self.profile_path)
        return self.profile_path

    def engine_values(self) -> dict[str, object]:
        """These fields' values, for a worker's serialized configuration."""
        return {name: getattr(self, name) for name in EngineFields.model_fields}
