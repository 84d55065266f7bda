"""``gpubus submit`` and ``gpubus get pods`` against any API server a kubeconfig points at.

Submit watches before it creates (no polling): the progress line and the summary come from the
pod watch, the latency is measured from just before each create call to the watch event that
shows the pod Running (or already Succeeded).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson
import yaml

from gpubus.pods import Pod, PodCopies, PodTracker, pod_rows, pods_from_documents, render_table
from shared.errors import BadInput, GpubusError
from shared.kube import KubeClient, KubeUnavailable, list_and_watch_pods
from shared.kube_types import Pod as KubePod
from shared.tasks import cancel_and_wait


async def connect(kubeconfig: Path) -> KubeClient:
    """A client for ``kubeconfig`` that has answered once; BadInput/KubeUnavailable with a hint if not."""
    check_kubeconfig(kubeconfig)
    try:
        kube = await KubeClient.from_kubeconfig(kubeconfig)
    except Exception as e:  # kubernetes_asyncio raises its own ConfigException for a broken file
        raise BadInput(f"cannot use kubeconfig {kubeconfig}: {' '.join(str(e).split())}") from e
    try:
        await kube.list_pods(field_selector="metadata.name=gpubus-ping")
    except GpubusError as e:
        await kube.close()
        raise KubeUnavailable(f"{e} (is `gpubus up` running?)") from e
    return kube


def check_kubeconfig(path: Path) -> None:
    """BadInput in one line for a kubeconfig that is missing, unreadable, not YAML or not a mapping
    (the Kubernetes client would fail on those with a TypeError or a multi-line YAML report)."""
    missing = f"no kubeconfig at {path}: start `gpubus up` or pass --kubeconfig"
    doc = _read_yaml(path, yaml.safe_load, missing=missing, what=f"kubeconfig {path}", verb="use")
    if not isinstance(doc, dict):
        raise BadInput(f"cannot use kubeconfig {path}: not a kubeconfig (empty, or not a YAML mapping)")


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's report in one line: the problem and where, without the context lines."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        mark = e.problem_mark
        return f"{e.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(e).split())


def _read_yaml(path: Path, load: Callable[[str], Any], *, missing: str, what: str, verb: str = "read") -> Any:
    """``load`` of the file's text; BadInput in one line when it is missing, unreadable or not YAML."""
    try:
        loaded = load(path.read_text(encoding="utf-8"))
        return list(loaded) if isinstance(loaded, Iterator) else loaded  # safe_load_all is lazy
    except FileNotFoundError:
        raise BadInput(missing) from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read {what}: {e}") from None
    except yaml.YAMLError as e:
        raise BadInput(f"cannot {verb} {what}: not valid YAML ({_yaml_problem(e)})") from None


def load_pods(path: Path, count: int) -> PodCopies:
    docs = _read_yaml(path, yaml.safe_load_all, missing=f"no such file: {path}", what=str(path))
    return pods_from_documents(docs, count)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitOptions:
    kubeconfig: Path
    namespace: str = "default"
    timeout_s: float = 120.0
    concurrency: int = 32
    progress: bool = True


async def _create_all(kube: KubeClient, pods: PodCopies, options: SubmitOptions, tracker: PodTracker,
                      errors: list[str]) -> None:
    """Create with ``options.concurrency`` workers, each taking the next copy (made only then) when free."""
    copies = iter(pods)  # shared: next() never awaits, so the workers cannot take the same copy

    async def worker() -> None:
        for pod in copies:
            ns = pod["metadata"].get("namespace") or options.namespace
            at = time.time()
            try:
                created = await kube.create_pod(ns, cast(KubePod, pod))
            except BadInput as e:
                errors.append(str(e))
                continue
            tracker.submitted(created["metadata"]["uid"], at)
            tracker.observe(cast(Pod, created), at)

    await asyncio.gather(*(worker() for _ in range(min(options.concurrency, len(pods)))))


async def _follow(kube: KubeClient, tracker: PodTracker, synced: asyncio.Event) -> None:
    async for event in list_and_watch_pods(kube, synced=synced):
        pod = cast(Pod, event["object"])
        if event["type"] == "DELETED":
            tracker.deleted(pod["metadata"].get("uid", ""))
        else:
            tracker.observe(pod)


async def submit(pods: PodCopies, options: SubmitOptions,
                 echo: Callable[[str], None]) -> tuple[PodTracker, list[str]]:
    """Create ``pods``, follow them until settled or ``timeout_s`` (creating included); returns the
    tracker and create errors."""
    kube = await connect(options.kubeconfig)
    tracker, errors, synced = PodTracker(), list[str](), asyncio.Event()
    follower = asyncio.create_task(_follow(kube, tracker, synced), name="submit-watch")
    tty = options.progress and sys.stderr.isatty()
    try:
        await asyncio.wait_for(synced.wait(), 30.0)
        deadline = time.monotonic() + options.timeout_s
        with contextlib.suppress(TimeoutError):  # the pods not created by then are counted as missing
            await asyncio.wait_for(_create_all(kube, pods, options, tracker, errors),
                                   options.timeout_s if math.isfinite(options.timeout_s) else None)
        while not tracker.settled() and time.monotonic() < deadline and not follower.done():
            if tty:
                sys.stderr.write("\r" + tracker.progress(len(pods)) + "   ")
                sys.stderr.flush()
            await asyncio.sleep(0.2)  # redraw interval of the progress line; state comes from the watch
        if tty:
            sys.stderr.write("\r" + tracker.progress(len(pods)) + "   \n")
    finally:
        await cancel_and_wait(follower)
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
