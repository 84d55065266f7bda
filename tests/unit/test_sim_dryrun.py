"""Server-side dry run in the simulated API server: the option (``gpubus_local.sim.dryrun``), the store's
dry-run writes, and the webhook side of it (``gpubus_local.sim.admission``).

Case matrix:
- the option: no value is a real write; ``All`` (once or repeated) is a dry run; any other value,
  empty included, alone or beside ``All``, is the real 422 naming the request's options kind, with
  Go's rendering of the values and a ``FieldValueNotSupported`` cause;
- DELETE's options (body or query): tested once, in ``test_sim_write_options``;
- the answers: a create's has no resourceVersion and keeps the made name, uid and timestamp; an
  update's carries the stored resourceVersion;
- the store: a dry-run create, update or delete makes the same checks as a real one (name taken: 409;
  stale resourceVersion: 409; missing object: 404) and changes nothing — objects, resourceVersion and
  watchers untouched;
- webhooks: ``sideEffects`` None and NoneOnDryRun may be called on a dry run, Some and Unknown refuse
  it with the real 400; a configuration entry without ``sideEffects`` (v1beta1) counts as Unknown; the
  AdmissionReview of a dry run says ``dryRun: true`` and carries ``dryRun: ["All"]`` in its options.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpubus_local.sim import dryrun
from gpubus_local.sim.admission import WebhookConfig, check_dry_run, review_request
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.store import Store


def pod(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", **meta},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


# --------------------------------------------------------------------------- the option


@pytest.mark.parametrize(("values", "dry"), [([], False), (["All"], True), (["All", "All"], True)])
def test_all_is_a_dry_run_and_no_value_a_real_write(values: list[str], dry: bool) -> None:
    assert dryrun.requested(values, "CreateOptions") is dry


@pytest.mark.parametrize(("values", "shown"), [
    (["true"], '[]string{"true"}'),
    ([""], '[]string{""}'),
    (["all"], '[]string{"all"}'),
    (["All", "x"], '[]string{"All", "x"}'),
    (['a"b'], r'[]string{"a\"b"}'),
])
@pytest.mark.parametrize("kind", ["CreateOptions", "UpdateOptions", "PatchOptions", "DeleteOptions"])
def test_any_other_value_is_the_real_422_on_the_options(values: list[str], shown: str, kind: str) -> None:
    with pytest.raises(ApiError) as info:
        dryrun.requested(values, kind)
    body = f'Unsupported value: {shown}: supported values: "All"'
    assert (info.value.code, info.value.reason) == (422, "Invalid")
    assert info.value.message == f'{kind}.meta.k8s.io "" is invalid: dryRun: {body}'
    assert info.value.details == {"group": "meta.k8s.io", "kind": kind, "causes": [
        {"reason": "FieldValueNotSupported", "message": body, "field": "dryRun"}]}


# --------------------------------------------------------------------------- the answers


def test_a_dry_run_create_answers_the_object_without_a_resource_version() -> None:
    obj = pod("p", uid="u-1", creationTimestamp="2025-01-01T00:00:00Z", resourceVersion="7")
    answer = dryrun.created(obj)
    assert "resourceVersion" not in answer["metadata"]
    assert answer["metadata"] == {"name": "p", "namespace": "default", "uid": "u-1",
                                  "creationTimestamp": "2025-01-01T00:00:00Z"}
    assert obj["metadata"]["resourceVersion"] == "7"  # the input is not changed


def test_a_dry_run_update_answers_the_stored_resource_version() -> None:
    new = pod("p", labels={"a": "2"}, resourceVersion="")
    answer = dryrun.updated(new, pod("p", resourceVersion="12"))
    assert answer["metadata"] == {"name": "p", "namespace": "default", "labels": {"a": "2"},
                                  "resourceVersion": "12"}


# --------------------------------------------------------------------------- the store


@pytest.fixture
def store() -> Store:
    store = Store()
    store.create("pods", pod("p", uid="u-1", labels={"a": "1"}))
    return store


def test_a_dry_run_create_stores_nothing_and_announces_nothing(store: Store) -> None:
    watcher = store.watch("pods", None, None, None, str(store.rv))
    answer = store.create("pods", pod("q", uid="u-2"), dry_run=True)
    assert answer["metadata"]["name"] == "q" and "resourceVersion" not in answer["metadata"]
    assert store.find("pods", "default", "q") is None
    assert store.rv == 1 and not watcher.drain()


def test_a_dry_run_update_leaves_the_stored_object(store: Store) -> None:
    watcher = store.watch("pods", None, None, None, str(store.rv))
    answer = store.update("pods", pod("p", uid="u-1", labels={"a": "2"}), expect_rv="1", dry_run=True)
    assert answer["metadata"]["labels"] == {"a": "2"} and answer["metadata"]["resourceVersion"] == "1"
    assert store.get("pods", "default", "p")["metadata"]["labels"] == {"a": "1"}
    assert store.rv == 1 and not watcher.drain()


def test_a_dry_run_delete_answers_the_object_and_keeps_it(store: Store) -> None:
    watcher = store.watch("pods", None, None, None, str(store.rv))
    answer = store.delete("pods", "default", "p", dry_run=True)
    assert answer == store.get("pods", "default", "p")
    assert store.rv == 1 and not watcher.drain()


@pytest.mark.parametrize(("write", "code"), [
    (lambda s: s.create("pods", pod("p"), dry_run=True), 409),
    (lambda s: s.update("pods", pod("p"), expect_rv="0", dry_run=True), 409),
    (lambda s: s.update("pods", pod("gone"), dry_run=True), 404),
    (lambda s: s.delete("pods", "default", "gone", dry_run=True), 404),
], ids=["name-taken", "stale-rv", "update-missing", "delete-missing"])
def test_a_dry_run_makes_the_checks_of_a_real_write(store: Store, write: Any, code: int) -> None:
    with pytest.raises(ApiError) as info:
        write(store)
    assert info.value.code == code and store.rv == 1


# --------------------------------------------------------------------------- webhooks


@pytest.mark.parametrize("effects", ["None", "NoneOnDryRun"])
def test_a_webhook_without_side_effects_may_see_a_dry_run(effects: Any) -> None:
    check_dry_run(WebhookConfig(name="vgpu.hami.io", url="https://h/m", side_effects=effects))


@pytest.mark.parametrize("effects", ["Some", "Unknown"])
@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_a_webhook_with_side_effects_refuses_the_dry_run(effects: Any, policy: Any) -> None:
    hook = WebhookConfig(name="vgpu.hami.io", url="https://h/m", side_effects=effects, failure_policy=policy)
    with pytest.raises(ApiError) as info:
        check_dry_run(hook)
    assert (info.value.code, info.value.reason) == (400, "BadRequest")
    assert info.value.message == 'admission webhook "vgpu.hami.io" does not support dry run'


@pytest.mark.parametrize(("entry", "effects"), [({"sideEffects": "NoneOnDryRun"}, "NoneOnDryRun"),
                                                ({"sideEffects": "None"}, "None"), ({}, "Unknown")])
def test_webhook_config_reads_side_effects(entry: dict[str, str], effects: str) -> None:
    config = WebhookConfig.from_k8s({"name": "w", "clientConfig": {"url": "https://h/m"}, **entry})
    assert config.side_effects == effects


def test_a_dry_run_review_says_so() -> None:
    real = review_request(pod("p"), "default")["request"]
    dry = review_request(pod("p"), "default", dry_run=True)["request"]
    assert real["dryRun"] is False and "dryRun" not in real["options"]
    assert dry["dryRun"] is True
    assert dry["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"]}
