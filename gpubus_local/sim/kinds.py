"""The resources the simulated API server serves: each one's kind, and which are namespaced.

The one table the store (one bucket of objects and watchers per resource), the handlers, discovery
and the OpenAPI documents all read: serving another resource starts here. No imports, so anything
may use it.
"""

from __future__ import annotations

KINDS = {"pods": "Pod", "nodes": "Node", "namespaces": "Namespace", "resourcequotas": "ResourceQuota",
         "events": "Event"}
NAMESPACED = frozenset({"pods", "resourcequotas", "events"})
