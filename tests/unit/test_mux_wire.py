"""Frames ready at once are cut into batches under the byte limit, in order."""

from strata.rpc.mux_wire import batches, metadata_pb
from strata.v1 import mux_pb2


def _frame(i: int, size: int) -> mux_pb2.MuxFrame:
    return mux_pb2.MuxFrame(call_id=i, message=b"x" * size)


def test_batches_keep_order_and_stay_under_the_limit():
    frames = [_frame(i, 300) for i in range(10)]
    got = list(batches(frames, limit=1000))
    assert [f.call_id for b in got for f in b.frames] == list(range(10))
    assert all(sum(f.ByteSize() for f in b.frames) <= 1000 for b in got)
    assert len(got) == 4  # three frames of ~305 bytes fit in 1000


def test_a_frame_over_the_limit_goes_alone():
    frames = [_frame(0, 10), _frame(1, 5000), _frame(2, 10)]
    assert [[f.call_id for f in b.frames] for b in batches(frames, limit=1000)] == [[0], [1], [2]]


def test_no_frames_no_batches_and_metadata_as_text():
    assert list(batches([])) == []
    pb = metadata_pb([("a", "1"), ("b", b"2")])
    assert [(m.key, m.value) for m in pb] == [("a", "1"), ("b", "2")]
