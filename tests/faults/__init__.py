"""Faults of the agent's surroundings (issue 43), each played against the real processes."""
