"""What both halves of multiplexed calls share about the wire (proto/strata/v1/mux.proto): how
frames ready at once are cut into MuxBatch messages, and metadata as text pairs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from strata.v1 import mux_pb2

# A batch stays well under the channels' 64 MiB message limit: frames ready at once are cut
# into batches of at most this many bytes (a larger frame goes alone: the largest valid
# request is 4.1 MB).
MAX_BATCH_BYTES = 4 * 1024 * 1024
# The details of a call past its deadline, on either side (grpc's own words for it).
DEADLINE_DETAILS = "Deadline Exceeded"


def batches(
    frames: Sequence[mux_pb2.MuxFrame], limit: int = MAX_BATCH_BYTES
) -> Iterator[mux_pb2.MuxBatch]:
    """`frames` in order, as consecutive batches of at most `limit` bytes each (a single
    larger frame is a batch of its own)."""
    start, size = 0, 0
    for i, frame in enumerate(frames):
        n = frame.ByteSize()
        if i > start and size + n > limit:
            yield mux_pb2.MuxBatch(frames=frames[start:i])
            start, size = i, 0
        size += n
    if start < len(frames):
        yield mux_pb2.MuxBatch(frames=frames[start:])


def metadata_pb(pairs: Sequence[tuple[str, str | bytes]]) -> list[mux_pb2.MuxMetadatum]:
    """Call metadata as frames carry it: text values (Strata's metadata has no binary keys)."""
    return [
        mux_pb2.MuxMetadatum(key=k, value=v.decode() if isinstance(v, bytes) else v)
        for k, v in pairs
    ]
