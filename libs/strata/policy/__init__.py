"""Pure policies shared by the services and the simulator: no grpc, no torch, no I/O.

Every policy gets its clock and RNG injected, so the simulator drives the same objects on a
virtual clock that the services drive on the wall clock.
"""
