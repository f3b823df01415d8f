"""``agentpool demo``: the whole system on one machine, no cluster needed.

Starts the simulation kit (API emulator with KWOK-style nodes, power
simulator), runs the real pool supervisor against it, one ``agentpool``
subprocess per shard, and shows what happens while it flips a profile, kills
a worker and takes a node out of scope. The agent is not special-cased in any
way: it is configured through its environment exactly as in a cluster.

Modules: :mod:`.scenario` (what the cluster holds), :mod:`.observe` (what
the demo sees), :mod:`.timeline` (what it does and how it confirms it),
:mod:`.view` (terminal output), :mod:`.runner` (the loop and exit status).
"""

from agentpool.demo.runner import DemoOptions, run_demo

__all__ = ["DemoOptions", "run_demo"]
