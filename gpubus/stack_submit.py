"""``gpubus submit`` and ``gpubus get pods`` against any API server a kubeconfig points at.

Submit watches before it creates (no polling): the progress line and the summary come from the
pod watch, the latency is measured from just before each create call to the watch event that
shows the pod Running (or already Succeeded).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson
import yaml

from gpubus.stack_pods import Pod, PodTracker, pod_rows, pods_from_documents, render_table
from shared.errors import BadInput, GpubusError
from shared.kube import KubeClient, KubeUnavailable, list_and_watch_pods
from shared.kube_types import Pod as KubePod


async def connect(kubeconfig: Path) -> KubeClient:
    """A client for ``kubeconfig`` that has answered once; BadInput/KubeUnavailable with a hint if not."""
    if not os.path.exists(kubeconfig):  # noqa: ASYNC240 - one stat before any I/O starts
        raise BadInput(f"no kubeconfig at {kubeconfig}: start `gpubus up` or pass --kubeconfig")
    try:
        kube = await KubeClient.from_kubeconfig(kubeconfig)
    except Exception as e:  # kubernetes_asyncio raises its own ConfigException for a broken file
        raise BadInput(f"cannot use kubeconfig {kubeconfig}: {e}") from e
    try:
        await kube.list_pods(field_selector="metadata.name=gpubus-ping")
    except GpubusError as e:
        await kube.close()
        raise KubeUnavailable(f"{e} (is `gpubus up` running?)") from e
    return kube


def load_pods(path: Path, count: int) -> list[Pod]:
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise BadInput(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise BadInput(f"cannot read {path}: {str(e).splitlines()[0] if str(e) else e}") from None
    return pods_from_documents(docs, count)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitOptions:
    kubeconfig: Path
    namespace: str = "default"
    timeout_s: float = 120.0
    concurrency: int = 32
    progress: bool = True


async def _create_all(kube: KubeClient, pods: list[Pod], options: SubmitOptions, tracker: PodTracker,
                      errors: list[str]) -> None:
    limit = asyncio.Semaphore(options.concurrency)

    async def create(pod: Pod) -> None:
        ns = pod["metadata"].get("namespace") or options.namespace
        async with limit:
            at = time.time()
            try:
                created = await kube.create_pod(ns, cast(KubePod, pod))
            except BadInput as e:
                errors.append(str(e))
                return
            tracker.submitted(created["metadata"]["uid"], at)
            tracker.observe(cast(Pod, created), at)

    await asyncio.gather(*(create(p) for p in pods))


async def _follow(kube: KubeClient, tracker: PodTracker, synced: asyncio.Event) -> None:
    async for event in list_and_watch_pods(kube, synced=synced):
        pod = cast(Pod, event["object"])
        if event["type"] == "DELETED":
            tracker.deleted(pod["metadata"].get("uid", ""))
        else:
            tracker.observe(pod)


async def submit(pods: list[Pod], options: SubmitOptions,
                 echo: Callable[[str], None]) -> tuple[PodTracker, list[str]]:
    """Create ``pods``, follow them until settled or timed out; returns the tracker and create errors."""
    kube = await connect(options.kubeconfig)
    tracker, errors, synced = PodTracker(), list[str](), asyncio.Event()
    follower = asyncio.create_task(_follow(kube, tracker, synced), name="submit-watch")
    tty = options.progress and sys.stderr.isatty()
    try:
        await asyncio.wait_for(synced.wait(), 30.0)
        await _create_all(kube, pods, options, tracker, errors)
        deadline = time.monotonic() + options.timeout_s
        while not tracker.settled() and time.monotonic() < deadline and not follower.done():
            if tty:
                sys.stderr.write("\r" + tracker.progress(len(pods)) + "   ")
                sys.stderr.flush()
            await asyncio.sleep(0.2)  # redraw interval of the progress line; state comes from the watch
        if tty:
            sys.stderr.write("\r" + tracker.progress(len(pods)) + "   \n")
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await follower
        await kube.close()
    return tracker, errors


async def get_pods(kubeconfig: Path, *, namespace: str | None, output: str) -> str:
    kube = await connect(kubeconfig)
    try:
        selector = f"metadata.namespace={namespace}" if namespace else None
        pods, _ = await kube.list_pods(field_selector=selector)
    finally:
        await kube.close()
    items = cast(list[dict[str, Any]], pods)
    if output == "json":
        return orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items},
                            option=orjson.OPT_INDENT_2).decode()
    if not items:
        return f"No resources found{f' in {namespace} namespace' if namespace else ''}."
    return render_table(pod_rows(items, wide=output == "wide", all_namespaces=namespace is None))
