"""The real ``kubectl apply``, ``patch`` and ``replace`` against the SimApiServer, as ``gpubus up`` users do.

Case matrix: apply twice with a changed image and label (a strategic merge patch with
``$setElementOrder``: the GPU limits survive, no directive is stored); patch of a container's
resources (422, the real Forbidden message, printed by kubectl from the Status causes); replace
(PUT) of an image, then of ``spec.nodeName`` (422); a strategic patch deleting a label and adding a
finalizer; ``--type merge`` still RFC 7386 for metadata; a malformed directive (400). kubectl
validates as by default (server-side, against the stand-in's OpenAPI document).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sim_fixtures
from kubectl import kubectl, needs_kubectl
from pod_manifests import FORBIDDEN, directive_keys, pod_yaml

pytestmark = needs_kubectl

# this module's SimApiServer and its kubeconfig (bound by name: see sim_fixtures)
server = sim_fixtures.server
config = sim_fixtures.config


async def apply(config: Path, *, image: str, label: str) -> None:
    code, out, err = await kubectl(config, "apply", "-f", "-",
                                   stdin=pod_yaml("gpu", image=image, label=label, gpumem="3000", side=True))
    assert code == 0, (out, err)


async def get_pod(config: Path) -> dict[str, Any]:
    code, out, err = await kubectl(config, "get", "pod", "gpu", "-o", "json")
    assert code == 0, err
    pod: dict[str, Any] = json.loads(out)
    return pod


async def test_apply_again_changes_image_and_label_and_keeps_gpu_limits(config: Path) -> None:
    await apply(config, image="busybox:1", label="1")
    await apply(config, image="busybox:2", label="2")
    pod = await get_pod(config)
    main, side = pod["spec"]["containers"]
    assert (main["name"], main["image"], side["name"]) == ("main", "busybox:2", "side")
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}
    assert pod["metadata"]["labels"] == {"a": "2"}
    assert directive_keys(pod) == []


async def test_patching_container_resources_is_forbidden_with_the_real_message(config: Path) -> None:
    await apply(config, image="busybox:1", label="1")
    code, _, err = await kubectl(config, "patch", "pod", "gpu", "-p", json.dumps(
        {"spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}))
    assert code != 0
    assert f'The Pod "gpu" is invalid: {FORBIDDEN}' in err
    assert (await get_pod(config))["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


async def test_replace_may_change_an_image_but_not_the_node(config: Path) -> None:
    await apply(config, image="busybox:1", label="1")
    pod = await get_pod(config)
    pod["spec"]["containers"][0]["image"] = "busybox:3"
    code, out, err = await kubectl(config, "replace", "-f", "-", stdin=json.dumps(pod))
    assert code == 0, (out, err)
    pinned = await get_pod(config)
    pinned["spec"]["nodeName"] = "node-1"
    code, _, err = await kubectl(config, "replace", "-f", "-", stdin=json.dumps(pinned))
    assert code != 0
    assert f'The Pod "gpu" is invalid: {FORBIDDEN}' in err
    stored = (await get_pod(config))["spec"]
    assert (stored["containers"][0]["image"], stored.get("nodeName")) == ("busybox:3", None)


async def test_strategic_patch_deletes_a_label_and_merges_finalizers(config: Path) -> None:
    await apply(config, image="busybox:1", label="1")
    for patch in ({"metadata": {"finalizers": ["x.io/a"]}},
                  {"metadata": {"labels": {"a": None, "b": "2"}, "finalizers": ["x.io/b"]}}):
        code, out, err = await kubectl(config, "patch", "pod", "gpu", "-p", json.dumps(patch))
        assert code == 0, (out, err)
    meta = (await get_pod(config))["metadata"]
    assert meta["labels"] == {"b": "2"}
    assert meta["finalizers"] == ["x.io/b", "x.io/a"]  # a new element goes first, as on a real server


async def test_merge_type_patch_is_still_rfc_7386_for_metadata(config: Path) -> None:
    await apply(config, image="busybox:1", label="1")
    code, out, err = await kubectl(config, "patch", "pod", "gpu", "--type", "merge", "-p",
                                   json.dumps({"metadata": {"labels": {"a": None, "c": "3"},
                                                            "annotations": {"k": "v"}}}))
    assert code == 0, (out, err)
    meta = (await get_pod(config))["metadata"]
    assert meta["labels"] == {"c": "3"}
    assert meta["annotations"]["k"] == "v"


async def test_unknown_patch_directive_is_a_bad_request(config: Path) -> None:
    await apply(config, image="busybox:1", label="1")
    code, _, err = await kubectl(config, "patch", "pod", "gpu", "-p",
                                 json.dumps({"metadata": {"labels": {"$patch": "bogus"}}}))
    assert code != 0
    assert "(BadRequest)" in err and "unknown patch type: bogus" in err
