"""Configuration: every option once, its parser, and the frozen settings built from them.

Owns: the options table (variable, flag, default, help, parser, field), the
parsers, the ``TELEMETRY_*`` routing, :class:`~agentpool.config.settings.Settings`
and the small per-part settings each part of the agent is given.
Never: reads the environment itself (the CLI hands it the raw values), or
imports a backend, the controller, Kubernetes I/O or the supervisor.
"""
