"""Discrete-event cluster simulator: the services' routing, engine scheduling and placement
objects on a virtual clock, with engine step costs from profiles of the real engine."""
