"""Kubernetes Events about Node objects: what an operator should see in ``kubectl describe node``.

Pure logic, no I/O and no Kubernetes client: :mod:`.reasons` names what can
happen (CamelCase reasons, their type and action), :mod:`.tracker` turns the
supervisor's view of a node (tick results, restarts, stops, takeovers) into
events, only on a change, and :mod:`.correlator` decides when each may be
written (client-go's aggregation and spam filter: repeats become one Event's
count, a per-node and a per-pod budget). The writes themselves are
:mod:`agentpool.kube.events`'s; the supervisor wires the two together
(:mod:`.hooks`). Not to be confused with a watch event
(:class:`agentpool.kube.informer.InformerEvent`). Workers never import this package.
"""
