"""Whether the simulated-nodes process may open the file descriptors its nodes need.

A kubelet stand-in holds about four (its registration and pod-resources listeners, its channel to
the plugin, the agent's pod-resources connection), a node-agent about two (its plugin listener, its
pod-resources channel) and one more with a NATS connection of its own. 5000 nodes in one process
need over 20,000: past a common per-process limit, where gRPC logs "Too many open files" and the
nodes' registrations time out. The soft limit is raised as far as the hard one allows; a need
beyond that fails the start with the figures, instead of a timeout a minute later.
"""

from __future__ import annotations

import resource

from gpubus_local.sim.errors import SimError

#: Measured per node at 200 nodes: the hosts' process 831 descriptors, the agents' 427.
HOST_FDS = 4.5
AGENT_FDS = 2.5
#: One NATS connection per node-agent (per-node identity).
IDENTITY_FDS = 1.0
#: The process's own: NATS, the Kubernetes client, the monitor, logs, the event loop.
BASE_FDS = 128


def _per_node(*, hosts: bool, agents: bool, node_identity: bool) -> float:
    return ((HOST_FDS if hosts else 0.0)
            + ((AGENT_FDS + (IDENTITY_FDS if node_identity else 0.0)) if agents else 0.0))


def descriptors_needed(nodes: int, *, hosts: bool, agents: bool, node_identity: bool = False) -> int:
    """Descriptors a process hosting ``nodes`` nodes' kubelets (``hosts``) and/or node-agents needs."""
    return BASE_FDS + int(nodes * _per_node(hosts=hosts, agents=agents, node_identity=node_identity))


def nodes_that_fit(limit: int, *, hosts: bool, agents: bool, node_identity: bool = False) -> int:
    """How many nodes a process with ``limit`` descriptors can host."""
    per_node = _per_node(hosts=hosts, agents=agents, node_identity=node_identity)
    return max(0, int((limit - BASE_FDS) / per_node))


class DescriptorLimitError(SimError):
    """The hard limit on open files is below what the nodes need."""


def ensure_descriptors(nodes: int, *, hosts: bool, agents: bool, node_identity: bool = False) -> None:
    """Raise the soft RLIMIT_NOFILE to cover the nodes (up to the hard limit).

    DescriptorLimitError when even the hard limit is too low: it names both figures and how many
    nodes fit, so the operator can raise the limit (``ulimit -Hn``) or run fewer nodes."""
    needed = descriptors_needed(nodes, hosts=hosts, agents=agents, node_identity=node_identity)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        fit = nodes_that_fit(hard, hosts=hosts, agents=agents, node_identity=node_identity)
        what = "kubelets and node-agents" if hosts and agents else "kubelets" if hosts else "node-agents"
        raise DescriptorLimitError(
            f"{nodes} simulated nodes' {what} need about {needed} open files, but this process may "
            f"open at most {hard} (RLIMIT_NOFILE's hard limit): {fit} nodes fit. Raise the limit "
            f"(ulimit -Hn, or the container's nofile) or run fewer nodes")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
