"""Generated protobuf and gRPC stubs (make proto)."""
