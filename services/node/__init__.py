"""The node manager service: python -m services.node.

It forks only to exec its decode workers. gRPC's fork handlers are for children that go on
using gRPC without an exec; with other threads inside gRPC they are skipped, and a worker may
then die with SIGSEGV before serving (how often: docs/design/scheduling.md). So the node
manager turns gRPC's fork support off before gRPC loads, as gRPC documents for fork-then-exec
programs (GRPC_ENABLE_FORK_SUPPORT); a value set by the caller is kept.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
