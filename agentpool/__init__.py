"""agentpool: the node-side power agent of Joulie, run as a multiprocess supervisor."""

__version__ = "0.1.0"
