"""The node manager's library: decode worker processes and the replicas they serve."""
