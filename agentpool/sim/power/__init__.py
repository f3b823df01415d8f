"""The power simulator: Joulie's HTTP telemetry/control endpoints over a power model."""
