"""Strategic merge patch as the simulated API server applies it (``gpubus_local.sim.strategic``).

Case matrix:
- merge by key: containers (name), a container's env (name) and ports (containerPort), pod and node
  conditions (type), node addresses (type), ownerReferences (uid); primitive sets: finalizers, podCIDRs;
- replaced: lists without a strategy (tolerations, containerStatuses), every list of a kind without a
  table entry; ``null`` deletes a map key; an empty merge list changes nothing;
- order: a new element goes first, server-only elements keep their places, ``$setElementOrder`` wins,
  for a merge list only the patch has, only the server has, or both have (keyed and primitive);
- directives: ``$patch`` replace/delete in a map and in a list element, ``$setElementOrder``,
  ``$deleteFromPrimitiveList``, ``$retainKeys``; none is ever in the result, also inside added values;
- errors (PatchError): unknown or ``merge`` ``$patch`` in a map or list element, an element without its
  merge key (also in a ``$patch: replace`` list), malformed ``$setElementOrder``/``$retainKeys``/
  ``$deleteFromPrimitiveList``, an order that contradicts the patch, an object in a primitive list, a
  patch that is not an object;
- the target is never mutated and what the patch does not touch is shared, not copied; without
  directives and on a kind without a table entry it is RFC 7386 (property).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pod_manifests import directive_keys

from gpubus_local.sim.errors import PatchError
from gpubus_local.sim.jsonpatch import merge_patch
from gpubus_local.sim.strategic import strategic_merge_patch

GPU = {"limits": {"nvidia.com/gpu": "1"}}


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["f/a", "f/b"]},
            "spec": {"containers": list(containers), **spec},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"},
                                                          {"type": "PodScheduled", "status": "True"}]}}


MAIN = {"name": "main", "image": "busybox:1", "resources": GPU,
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
SIDE = {"name": "side", "image": "side:1"}
POD = pod(MAIN, SIDE, tolerations=[{"key": "k", "operator": "Exists"}])
NODE = {"kind": "Node", "metadata": {"name": "n1"}, "spec": {"podCIDRs": ["10.0.0.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                 {"type": "Hostname", "address": "n1"}],
                   "conditions": [{"type": "Ready", "status": "True"}]}}


def names(items: list[dict[str, Any]]) -> list[str]:
    return [item["name"] for item in items]


# merge by key ---------------------------------------------------------------------------------


def test_kubectl_apply_patch_changes_the_image_and_keeps_the_gpu_limits() -> None:
    patch = {"metadata": {"labels": {"a": "2"}},
             "spec": {"$setElementOrder/containers": [{"name": "main"}, {"name": "side"}],
                      "containers": [{"image": "busybox:2", "name": "main"}]}}
    result = strategic_merge_patch(POD, patch)
    assert result["spec"]["containers"] == [{**MAIN, "image": "busybox:2"}, SIDE]
    assert result["metadata"]["labels"] == {"a": "2"}
    assert directive_keys(result) == []


def test_a_container_env_merges_by_name_inside_the_container_merged_by_name() -> None:
    patch = {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "20"},
                                                               {"name": "C", "value": "3"}]}]}}
    [main, _] = strategic_merge_patch(POD, patch)["spec"]["containers"]
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "20"},
                           {"name": "C", "value": "3"}]
    assert main["resources"] is GPU


def test_container_ports_merge_by_container_port() -> None:
    target = pod({"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}]})
    patch = {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "http"}]}]}}
    [c] = strategic_merge_patch(target, patch)["spec"]["containers"]
    assert c["ports"] == [{"containerPort": 80, "protocol": "TCP", "name": "http"}]


def test_pod_conditions_merge_by_type() -> None:
    patch = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert strategic_merge_patch(POD, patch)["status"]["conditions"] == [
        {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]


def test_node_addresses_and_conditions_merge_by_type_and_pod_cidrs_as_a_set() -> None:
    patch = {"spec": {"podCIDRs": ["10.0.0.0/24", "fd00::/64"]},
             "status": {"addresses": [{"type": "Hostname", "address": "node-1"}],
                        "conditions": [{"type": "MemoryPressure", "status": "False"}]}}
    result = strategic_merge_patch(NODE, patch)
    assert result["spec"]["podCIDRs"] == ["10.0.0.0/24", "fd00::/64"]
    assert result["status"]["addresses"] == [{"type": "InternalIP", "address": "10.0.0.1"},
                                             {"type": "Hostname", "address": "node-1"}]
    assert [c["type"] for c in result["status"]["conditions"]] == ["MemoryPressure", "Ready"]


def test_owner_references_merge_by_uid_and_finalizers_as_a_set() -> None:
    target = {"kind": "Namespace", "metadata": {"name": "ns", "finalizers": ["f/a"],
                                                 "ownerReferences": [{"uid": "u1", "name": "one"}]}}
    patch = {"metadata": {"finalizers": ["f/a", "f/b"], "ownerReferences": [{"uid": "u2", "name": "two"}]}}
    meta = strategic_merge_patch(target, patch)["metadata"]
    assert meta["finalizers"] == ["f/a", "f/b"]
    assert meta["ownerReferences"] == [{"uid": "u2", "name": "two"}, {"uid": "u1", "name": "one"}]


# replaced lists, nulls ------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "patch", "path"), [
    (POD, {"spec": {"tolerations": [{"key": "other"}]}}, ("spec", "tolerations")),
    (POD, {"status": {"containerStatuses": [{"name": "main"}]}}, ("status", "containerStatuses")),
    ({"kind": "ConfigMap", "spec": {"containers": [{"name": "x", "a": 1}]}},
     {"spec": {"containers": [{"name": "y"}]}}, ("spec", "containers")),
    ({"spec": {"containers": [{"name": "x", "a": 1}]}}, {"spec": {"containers": [{"name": "y"}]}},
     ("spec", "containers")),
], ids=["tolerations", "container-statuses", "unknown-kind", "no-kind"])
def test_lists_without_a_strategy_are_replaced(target: dict[str, Any], patch: dict[str, Any],
                                               path: tuple[str, str]) -> None:
    result = strategic_merge_patch(target, patch)
    assert result[path[0]][path[1]] == patch[path[0]][path[1]]


def test_null_deletes_a_map_key_and_a_whole_merge_list() -> None:
    result = strategic_merge_patch(POD, {"metadata": {"labels": {"a": None}, "finalizers": None}})
    assert result["metadata"] == {"name": "p", "labels": {}}


def test_an_empty_merge_list_changes_nothing() -> None:
    result = strategic_merge_patch(POD, {"spec": {"containers": []}, "metadata": {"finalizers": []}})
    assert result["spec"]["containers"] == [MAIN, SIDE]
    assert result["metadata"]["finalizers"] == ["f/a", "f/b"]


# order ----------------------------------------------------------------------------------------


def test_a_new_element_goes_first_without_set_element_order() -> None:
    result = strategic_merge_patch(POD, {"spec": {"containers": [{"name": "new", "image": "n"}]},
                                         "metadata": {"finalizers": ["f/c"]}})
    assert names(result["spec"]["containers"]) == ["new", "main", "side"]
    assert result["metadata"]["finalizers"] == ["f/c", "f/a", "f/b"]


def test_server_only_elements_keep_their_places_among_patched_ones() -> None:
    target = pod(*({"name": n, "image": "i"} for n in "abcd"))
    patch = {"spec": {"containers": [{"name": "b", "image": "j"}, {"name": "d", "image": "j"}]}}
    assert names(strategic_merge_patch(target, patch)["spec"]["containers"]) == list("abcd")


def test_set_element_order_puts_the_list_in_that_order() -> None:
    target = pod(*({"name": n, "image": "i"} for n in "abc"))
    patch = {"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "new"}, {"name": "a"}],
                      "containers": [{"name": "new", "image": "n"}]},
             "metadata": {"$setElementOrder/finalizers": ["f/b", "f/a"]}}
    result = strategic_merge_patch(target, patch)
    # b, not named, keeps its place before c, which it precedes on the server
    assert names(result["spec"]["containers"]) == ["b", "c", "new", "a"]
    assert result["metadata"]["finalizers"] == ["f/b", "f/a"]


def ordered_list_case(field: str, server: list[str] | None, sent: list[str] | None,
                      order: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod whose ``field`` (``initContainers``: merged by name; ``finalizers``: a set) holds ``server``
    (None: absent) and a patch sending ``sent`` (``-x``: delete x; None: absent) in ``order``."""
    if field == "finalizers":
        patch: dict[str, Any] = {f"$setElementOrder/{field}": [f"f/{n}" for n in order]}
        if sent is not None:
            patch[field] = [f"f/{n}" for n in sent if not n.startswith("-")]
            patch[f"$deleteFromPrimitiveList/{field}"] = [f"f/{n[1:]}" for n in sent if n.startswith("-")]
        metadata = {"name": "p"} if server is None else {"name": "p", field: [f"f/{n}" for n in server]}
        return {"kind": "Pod", "metadata": metadata, "spec": {}}, {"metadata": patch}
    patch = {f"$setElementOrder/{field}": [{"name": n} for n in order]}
    if sent is not None:
        patch[field] = [{"name": n[1:], "$patch": "delete"} if n.startswith("-")
                        else {"name": n, "image": "j"} for n in sent]
    spec = {} if server is None else {field: [{"name": n, "image": "i"} for n in server]}
    return {"kind": "Pod", "metadata": {"name": "p"}, "spec": spec}, {"spec": patch}


@pytest.mark.parametrize("field", ["initContainers", "finalizers"])
@pytest.mark.parametrize(("server", "sent", "order", "expected"), [
    (None, ["b", "a"], ["c", "b", "a"], ["b", "a"]),
    (["a", "b", "c"], None, ["c", "a"], ["b", "c", "a"]),
    (["a", "b", "c"], ["new"], ["c", "new", "b"], ["a", "c", "new", "b"]),
    (["a", "b", "c"], ["new"], ["new", "c"], ["new", "a", "b", "c"]),
    (["a", "b", "c"], ["-b", "a"], ["c", "a"], ["c", "a"]),
], ids=["only-in-patch", "only-on-server", "both", "both-new-first", "with-deletion"])
def test_set_element_order_orders_a_merge_list_wherever_it_is(
        field: str, server: list[str] | None, sent: list[str] | None, order: list[str],
        expected: list[str]) -> None:
    # elements the order does not name keep their server places, before what follows them there
    target, patch = ordered_list_case(field, server, sent, order)
    result = strategic_merge_patch(target, patch)
    items = (result["metadata"] if field == "finalizers" else result["spec"])[field]
    assert [i[2:] if field == "finalizers" else i["name"] for i in items] == expected
    assert directive_keys(result) == []


# directives -----------------------------------------------------------------------------------


def test_patch_replace_in_a_map_replaces_it() -> None:
    result = strategic_merge_patch(POD, {"metadata": {"labels": {"$patch": "replace", "b": "2"}}})
    assert result["metadata"]["labels"] == {"b": "2"}


def test_patch_delete_in_a_map_empties_it() -> None:
    result = strategic_merge_patch(POD, {"metadata": {"labels": {"$patch": "delete"}}})
    assert result["metadata"]["labels"] == {}


def test_patch_delete_in_a_list_element_removes_the_element_with_that_key() -> None:
    result = strategic_merge_patch(POD, {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}})
    assert result["spec"]["containers"] == [MAIN]


def test_patch_replace_in_a_list_element_replaces_the_list() -> None:
    patch = {"spec": {"containers": [{"name": "only", "image": "o"}, {"$patch": "replace"}]}}
    assert strategic_merge_patch(POD, patch)["spec"]["containers"] == [{"name": "only", "image": "o"}]


def test_delete_from_primitive_list_removes_those_values() -> None:
    result = strategic_merge_patch(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["f/a"]}})
    assert result["metadata"]["finalizers"] == ["f/b"]


def test_retain_keys_drops_the_keys_not_listed() -> None:
    target = pod(SIDE, volumes=[{"name": "v", "hostPath": {"path": "/x"}}])
    patch = {"spec": {"volumes": [{"name": "v", "emptyDir": {}, "$retainKeys": ["emptyDir", "name"]}]}}
    assert strategic_merge_patch(target, patch)["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]


def test_directives_inside_added_values_are_applied_not_stored() -> None:
    env = [{"name": "X", "value": "1"}, {"name": "Y", "$patch": "delete"}]
    resources = {"$patch": "replace", "limits": {"cpu": "1"}}
    affinity = {"nodeAffinity": {"$patch": "delete"}, "x": {"$retainKeys": ["y"], "y": 1}}
    patch = {"spec": {"containers": [{"name": "new", "image": "n", "resources": resources, "env": env}],
                      "affinity": affinity}}
    result = strategic_merge_patch(POD, patch)
    assert result["spec"]["containers"][0] == {"name": "new", "image": "n",
                                               "resources": {"limits": {"cpu": "1"}},
                                               "env": [{"name": "X", "value": "1"}]}
    assert result["spec"]["affinity"] == {"nodeAffinity": {}, "x": {"y": 1}}
    assert directive_keys(result) == []


# errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("patch", "message"), [
    ({"metadata": {"labels": {"$patch": "bogus"}}}, "unknown patch type: bogus in map"),
    ({"metadata": {"labels": {"$patch": "merge"}}}, "unknown patch type: merge in map"),
    ({"spec": {"containers": [{"name": "main", "$patch": "bogus"}]}}, "unknown patch type: bogus"),
    ({"spec": {"containers": [{"name": "main", "$patch": "merge"}]}},
     "merging lists cannot yet be specified"),
    ({"spec": {"containers": [{"image": "busybox:2"}]}}, "does not contain declared merge key: name"),
    ({"spec": {"containers": [{"$patch": "delete"}]}}, "does not contain declared merge key: name"),
    ({"spec": {"containers": [{"$patch": "replace"}, {"image": "x"}]}},
     "does not contain declared merge key: name"),
    ({"spec": {"containers": ["main"]}}, "is not an object"),
    ({"spec": {"$setElementOrder/containers": "main"}}, "invalid patch format of setElementOrder list"),
    ({"spec": {"$setElementOrder/containers": [{"image": "x"}]}}, "does not contain declared merge key"),
    ({"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "main"}],
               "containers": [{"name": "main", "image": "m"}, {"name": "side", "image": "s"}]}},
     "doesn't match $setElementOrder list"),
    ({"metadata": {"$deleteFromPrimitiveList/finalizers": "f/a"}}, "invalid patch format of primitive list"),
    ({"metadata": {"$retainKeys": "name"}}, "invalid patch format of retainKeys"),
    ({"metadata": {"$retainKeys": ["name"], "labels": {"b": "1"}}}, "invalid patch format of retainKeys"),
    ({"metadata": {"finalizers": [{"a": 1}]}}, "cannot merge lists without merge key"),
], ids=["map-unknown", "map-merge", "element-unknown", "element-merge", "no-merge-key", "delete-no-merge-key",
        "replace-no-merge-key",
        "element-not-object", "order-not-list", "order-no-key", "order-contradicts", "delete-list-not-list",
        "retain-not-list", "retain-misses-key", "object-in-set"])
def test_malformed_patches_are_refused(patch: dict[str, Any], message: str) -> None:
    before = copy.deepcopy(POD)
    with pytest.raises(PatchError, match=message.replace("$", r"\$")):
        strategic_merge_patch(POD, patch)
    assert before == POD


def test_a_patch_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(PatchError, match="must be a JSON object"):
        strategic_merge_patch(POD, [{"op": "add"}])


# immutability and sharing ---------------------------------------------------------------------


def test_the_target_is_never_mutated_and_untouched_parts_are_shared() -> None:
    before = copy.deepcopy(POD)
    patch = {"spec": {"$setElementOrder/containers": [{"name": "main"}, {"name": "side"}],
                      "containers": [{"name": "main", "image": "busybox:2"}]}}
    result = strategic_merge_patch(POD, patch)
    assert before == POD
    assert result["metadata"] is POD["metadata"] and result["status"] is POD["status"]
    assert result["spec"]["tolerations"] is POD["spec"]["tolerations"]
    main, side = result["spec"]["containers"]
    assert side is SIDE and main["resources"] is GPU and main["env"] is MAIN["env"]


def test_the_patch_is_never_mutated() -> None:
    patch = {"spec": {"containers": [{"name": "side", "$patch": "delete"}, {"name": "new", "image": "n"}],
                      "$setElementOrder/containers": [{"name": "new"}, {"name": "main"}]},
             "metadata": {"labels": {"$patch": "replace", "x": "1"},
                          "$deleteFromPrimitiveList/finalizers": ["f/a"]}}
    before = copy.deepcopy(patch)
    strategic_merge_patch(POD, patch)
    assert patch == before


KEYS = st.sampled_from(["a", "b", "c", "d"])
SCALARS = st.one_of(st.integers(-3, 3), st.text("xy", max_size=2), st.booleans())
VALUES = st.recursive(st.one_of(SCALARS, st.lists(SCALARS, max_size=3)),
                      lambda inner: st.dictionaries(KEYS, st.one_of(inner, st.none()), max_size=3),
                      max_leaves=12)
DOCUMENTS = st.dictionaries(KEYS, VALUES, max_size=4)


@given(target=DOCUMENTS, patch=DOCUMENTS)
def test_without_directives_a_kind_without_a_table_entry_merges_as_rfc_7386(
        target: dict[str, Any], patch: dict[str, Any]) -> None:
    before = copy.deepcopy(target)
    assert strategic_merge_patch(target, patch) == merge_patch(target, patch)
    assert target == before


@given(patch=st.dictionaries(st.sampled_from(["metadata", "spec", "status"]),
                             st.dictionaries(KEYS, VALUES, max_size=3), max_size=2))
def test_parts_of_a_pod_the_patch_leaves_alone_are_the_very_same_objects(patch: dict[str, Any]) -> None:
    result = strategic_merge_patch(POD, patch)
    for part in ("metadata", "spec", "status"):
        if part not in patch:
            assert result[part] is POD[part]
        else:
            for key, value in POD[part].items():
                if key not in patch[part]:
                    assert result[part][key] is value
