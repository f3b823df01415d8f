"""``kubectl agentpool status`` (also ``agentpool status``): the managed nodes at a glance.

:mod:`.rows` turns a snapshot of cluster objects into one row per managed
node (pure: owner, API, desired caps, result, backend, power, age, and what
is wrong), :mod:`.pools` finds static pools' shard counts in their
StatefulSets, :mod:`.render` prints them (a table, or JSON), :mod:`.command`
is the click command, and :mod:`agentpool.kube.clusterread` reads the
snapshot with the user's kubeconfig. Never imported by the agent itself.
"""
