"""Generate the protobuf/gRPC Python stubs from proto/ into libs/strata/v1/.

protoc names modules after the proto path (`strata.v1.x_pb2`); the stubs live inside the
`strata.rpc` package instead, so the imports between generated modules are rewritten. The staleness
test calls `generate()` into a temporary folder and compares with the committed files.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTO_DIR = ROOT / "proto"
OUT_DIR = Path(__file__).resolve().parents[1] / "v1"


def proto_files() -> list[Path]:
    return sorted((PROTO_DIR / "strata" / "v1").glob("*.proto"))


def generate(out_dir: Path = OUT_DIR) -> list[Path]:
    """Write the stubs for every proto file into out_dir; return the files written."""
    from grpc_tools import (
        protoc,  # imported here: grpc_tools is a build-time dependency
    )

    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{PROTO_DIR}",
            f"-I{_well_known_dir()}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *[str(p.relative_to(PROTO_DIR)) for p in proto_files()],
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed: {' '.join(args)}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for src in sorted((Path(tmp) / "strata" / "v1").iterdir()):
            dst = out_dir / src.name
            dst.write_text(src.read_text())
            written.append(dst)
        (out_dir / "__init__.py").write_text(
            '"""Generated protobuf and gRPC stubs (make proto)."""\n'
        )
        written.append(out_dir / "__init__.py")
    return written


def _well_known_dir() -> str:
    import grpc_tools

    return str(Path(grpc_tools.__file__).parent / "_proto")


if __name__ == "__main__":
    for path in generate(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT_DIR):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
