"""The Joulie custom resources as plain values, and their parsing.

Owns: a node's desired state (:mod:`.desired`: NodePowerProfile, NodeTwin),
its routing (:mod:`.routing`: TelemetryProfile or TELEMETRY_*), what a worker
is given per node (:mod:`.nodeinputs`), and the parsing of raw custom-resource
JSON into those values (:mod:`.parse`; errors name the field).
Never: I/O of any kind, Kubernetes client types, or anything above it.
"""
