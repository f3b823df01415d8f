"""Kubernetes I/O: the only package that imports the ``kubernetes`` client.

Everything above it works with plain dicts (raw API JSON) and our own errors.
"""
