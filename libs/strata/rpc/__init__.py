"""gRPC plumbing: generated stubs (v1/), server bootstrap, interceptors, channels."""
