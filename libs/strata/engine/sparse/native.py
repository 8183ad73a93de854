"""The sparse path's fused CPU kernels (sparse_kernels.cpp), compiled on first use.

Built the way strata.engine.kernels builds the dense decode kernel (same compiler flags, same
cache folder, keyed by source, flags, torch version and CPU), and used only where that kernel
is: an engine on the CPU with attention_kernel "cpp". `load()` returns the `torch.ops.
strata_sparse` namespace (block_scores, sparse_attention) or None, and the sparse path then
runs on torch operations; any failure to build is logged once and leaves it there.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from strata.engine import kernels

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("sparse_kernels.cpp")
_state: dict[str, object] = {}


def load():
    """torch.ops.strata_sparse, or None when the kernels cannot be built or loaded."""
    if "ops" in _state:
        return _state["ops"]
    ops = None
    if kernels.load() is not None:
        try:
            torch.ops.load_library(str(_build()))
            ops = torch.ops.strata_sparse
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            log.warning("strata sparse CPU kernels unavailable, using torch operations: %s", exc)
    _state["ops"] = ops
    return ops


def _build() -> Path:
    from torch.utils import cpp_extension

    key = hashlib.sha256()
    key.update(_SOURCE.read_bytes())
    key.update(" ".join(kernels._FLAGS).encode())
    key.update(torch.__version__.encode())
    key.update(kernels._cpu_signature().encode())
    target = kernels.cache_dir() / f"sparse_kernels_{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise FileNotFoundError("no C++ compiler (set CXX or install g++)")
    libs = cpp_extension.library_paths()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    command = [cxx, *kernels._FLAGS,
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
               *(f"-I{p}" for p in cpp_extension.include_paths()), str(_SOURCE), "-o", tmp,
               *(f"-L{p}" for p in libs), *(f"-Wl,-rpath,{p}" for p in libs),
               "-ltorch", "-ltorch_cpu", "-lc10"]
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"compiler exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        # renamed into place, so a concurrent loader never sees a partial file
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
