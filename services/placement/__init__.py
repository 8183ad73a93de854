"""Placement planner: decides which models run on which nodes and applies it through node
managers."""
