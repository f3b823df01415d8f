"""Per-node control logic: the node controller and its DVFS fallback state machine."""
