"""Multi-tenant scheduling policies, pure: level 1 (which replica, admission), level 2 (a node's
fair queue and preemption), and the interference-aware safety margin. Shared by the services and
the simulator."""
