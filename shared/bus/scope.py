"""What a connection that speaks for one node (per-node identity) may do, seen from the client.

With NATS's auth callout a node-agent or monitor is let in as its node only (see
``services/authn``): its replies must come to an inbox only it may read, and the JetStream
consumers it makes must name their one filter subject in the API subject, where the server's
permissions can check it. These functions give both; the callout's permissions are built from
the same ones, so client and server agree. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.events import node_token

#: The prefix of the inboxes every node-scoped connection uses (the default is ``_INBOX``).
INBOX_ROOT = "_INBOX_"


def node_inbox_prefix(node: str) -> str:
    """``_INBOX_<node token>``: replies to this node's requests, readable by it alone."""
    return f"{INBOX_ROOT}{node_token(node)}"


def scoped_filters(subjects: Sequence[str], node: str) -> list[str]:
    """``subjects`` narrowed to ``node`` and merged where they differ in one token only.

    A trailing ``*`` (any node) becomes the node's token, so ``gpubus.allocation.decided.*`` and
    ``gpubus.allocation.released.*`` become the single filter ``gpubus.allocation.*.<node>``:
    each filter is one consumer whose create request names it (a node may not create one
    with several filters, which the server's permissions could not see).
    """
    token = node_token(node)
    narrowed: list[list[str]] = []
    for subject in subjects:
        tokens = subject.split(".")
        if tokens[-1] == "*":
            tokens[-1] = token
        _merge_into(narrowed, tokens)
    return [".".join(tokens) for tokens in narrowed]


def _merge_into(filters: list[list[str]], tokens: list[str]) -> None:
    for existing in filters:
        if len(existing) != len(tokens):
            continue
        differing = [i for i, (a, b) in enumerate(zip(existing, tokens, strict=True)) if a != b]
        if not differing:
            return
        if len(differing) == 1:
            existing[differing[0]] = "*"
            return
    filters.append(tokens)
