"""This machine's memory read bandwidth, as the engine's threads see it: the best of five sums
over 1 GiB of float32 (far larger than any cache), with the same number of torch threads.

    python -m benchmarks.weights.phase_bandwidth --threads 2

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

SIZE = 1 << 30


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    data = torch.ones(SIZE // 4)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        float(data.sum())
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"read_bytes_per_s": SIZE / best}), flush=True)


if __name__ == "__main__":
    main()
