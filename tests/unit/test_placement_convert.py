"""The planner's view of a node: serving replicas count toward their model, a hot standby only
takes memory."""

from services.placement.convert import node_capacity
from strata.v1 import common_pb2


def test_a_standby_takes_memory_but_is_no_replica_of_its_model():
    node = common_pb2.NodeInfo(
        node_id="n1",
        memory_bytes=10_000,
        replicas=[
            common_pb2.ReplicaInfo(
                model="m", replica_id="m-0", state=common_pb2.REPLICA_STATE_READY
            ),
            common_pb2.ReplicaInfo(
                model="m", replica_id="m-1", state=common_pb2.REPLICA_STATE_STANDBY
            ),
            common_pb2.ReplicaInfo(
                model="m", replica_id="m-2", state=common_pb2.REPLICA_STATE_DRAINING
            ),
        ],
    )
    cap = node_capacity(node, lambda model: 3_000, managed={("n1", "m-0")})
    assert [(r.replica_id, r.managed) for r in cap.replicas] == [("m-0", True)]
    assert cap.memory_bytes == 7_000
