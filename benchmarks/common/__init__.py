"""What every benchmark shares: the supervised stack, process sampling, machine facts, ports."""
