"""The Joulie custom resources as plain values, and their parsing.

Owns: the values of desired state and routing (both Joulie APIs),
the parsing of raw custom-resource JSON into them (errors name the field).
Never: I/O of any kind, Kubernetes client types, or anything above it.
"""
