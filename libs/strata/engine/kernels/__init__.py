"""Native CPU kernels for the engine, compiled on first use.

`load()` builds decode_attention.cpp into a shared library with the system C++ compiler (no
ninja, which torch's cpp_extension.load requires and this deployment lacks), caches it under a
name keyed by the source, flags, torch version and CPU, and registers its ops with torch.
The engine calls `load()` when it starts (EngineConfig.attention_kernel "cpp", the default) and
uses the ops when it returns them. Any failure to build leaves the engine on its pure-torch path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("decode_attention.cpp")
# -fopenmp because at::parallel_for is an inline `#pragma omp parallel` in torch's headers (without
# it the op runs on one thread). It must bind to torch's own libgomp, not a second runtime (two
# pools spin against each other, many times slower; docs/design/engine.md): the rpath puts
# torch's lib directory first and both share the soname libgomp.so.1, and load() checks that
# only one is mapped. -fno-trapping-math lets GCC compute both sides of a float select and blend
# them (if-conversion): without it a loop with a conditional float operation (exp_nonpositive's
# clamp, SwiGLU's sigmoid) stays scalar with a branch per element. It changes no result, only
# whether floating-point exceptions may be raised by work whose result is then discarded.
_FLAGS = (
    "-O3",
    "-march=native",
    "-mprefer-vector-width=512",
    "-ffp-contract=fast",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fopenmp",
    "-shared",
    "-fPIC",
    "-std=c++17",
)

_state: dict[str, object] = {}


def cache_dir() -> Path:
    override = os.environ.get("STRATA_KERNEL_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "strata" / "kernels"


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (empty where there is none)."""
    line = _cpu_signature()
    return frozenset(line.split(":", 1)[1].split()) if line.startswith("flags") else frozenset()


def _cpu_signature() -> str:
    # -march=native ties the binary to this CPU's instruction set
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


_HEADER = Path(__file__).with_name("cpu_math.h")  # shared by every kernel source


def _command(source: Path, out: Path) -> list[str]:
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise FileNotFoundError("no C++ compiler (set CXX or install g++)")
    libs = cpp_extension.library_paths()
    return [
        cxx,
        *_FLAGS,
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-I{_HEADER.parent}",
        *(f"-I{p}" for p in cpp_extension.include_paths()),
        str(source),
        "-o",
        str(out),
        *(f"-L{p}" for p in libs),
        *(f"-Wl,-rpath,{p}" for p in libs),
        "-ltorch",
        "-ltorch_cpu",
        "-lc10",
    ]


def build_library(source: Path, stem: str) -> Path:
    """Compile `source` (which may include cpu_math.h) into the cache, once per source, header,
    flags, torch version and CPU; the cached library's path."""
    key = hashlib.sha256()
    key.update(source.read_bytes())
    key.update(_HEADER.read_bytes())
    key.update(" ".join(_FLAGS).encode())
    key.update(torch.__version__.encode())
    key.update(_cpu_signature().encode())
    target = cache_dir() / f"{stem}_{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # build under a temporary name and rename, so a concurrent loader never sees a partial file
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        started = time.monotonic()
        done = subprocess.run(_command(source, Path(tmp)), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"compiler exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        os.replace(tmp, target)
        log.info("compiled %s in %.1f s", target.name, time.monotonic() - started)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _openmp_runtimes() -> set[str]:
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return set()
    return {
        line.split()[-1] for line in maps.splitlines() if "libgomp" in line or "libiomp" in line
    }


def load():
    """The `torch.ops.strata` namespace with decode_attention, or None when it cannot be built."""
    if "ops" in _state:
        return _state["ops"]
    ops = None
    try:
        torch.ops.load_library(str(build_library(_SOURCE, "decode_attention")))
        runtimes = _openmp_runtimes()
        if len(runtimes) > 1:
            raise RuntimeError(
                f"two OpenMP runtimes are loaded ({', '.join(sorted(runtimes))}); "
                "their thread pools would contend"
            )
        ops = torch.ops.strata
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        log.warning("strata CPU attention kernel unavailable, using the torch path: %s", exc)
    _state["ops"] = ops
    return ops


def load_extra(source: Path, stem: str, namespace: str, what: str):
    """`torch.ops.<namespace>` from another kernel source (the sparse path's, the quantized
    layers', the norm's), built like decode_attention.cpp and only where it is (the base
    library loads); None when it cannot be built, logged once as `what` unavailable."""
    key = f"extra:{stem}"
    if key in _state:
        return _state[key]
    ops = None
    if load() is not None:
        try:
            torch.ops.load_library(str(build_library(source, stem)))
            ops = getattr(torch.ops, namespace)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            log.warning("%s unavailable, using torch operations: %s", what, exc)
    _state[key] = ops
    return ops
