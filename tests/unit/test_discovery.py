"""Discovery: the --simulate spec, XID health policy and recovery, inventory, per-node config.

Cases: table models, counts, NUMA suffix, explicit form, several groups, and each malformed
spec; deterministic UUIDs; DP_DISABLE/ENABLE_HEALTHCHECKS exactly as NVIDIA's plugin (its own
test table), malformed XID words; unhealthy on a critical XID, healthy again after a quiet
period, never for an unwatchable device; HAMi type naming, scaling, filtering and replica IDs
within 63 characters; settings precedence CLI > env (incl. HAMi names) > file, then HAMi's
per-node nodeconfig; value bounds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from services.node_agent.app import open_source
from services.node_agent.discovery import HAMI_IGNORED_XIDS, HealthPolicy, HealthTracker, PhysicalDevice
from services.node_agent.errors import DiscoveryError, SimSpecError
from services.node_agent.inventory import device_infos, device_type, physical_uuid, replicas
from services.node_agent.settings import MAX_SPLIT_COUNT, NodeAgentSettings, apply_node_config, load, validate
from services.node_agent.simulated import SimModel, build_devices, parse_spec, simulated_uuid
from shared.config import SettingsError
from shared.model import DeviceUUID

# -- simulate spec -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("4xA100-80GB", ((4, SimModel(name="A100-SXM4-80GB", memory_mib=81920)),)),
        ("A10", ((1, SimModel(name="A10", memory_mib=24576)),)),
        ("2xT4@1", ((2, SimModel(name="Tesla T4", memory_mib=15360, numa=1)),)),
        ("2x{name=Foo,mem=24576,numa=1}", ((2, SimModel(name="Foo", memory_mib=24576, numa=1)),)),
        (
            "1xA10+2xL4",
            ((1, SimModel(name="A10", memory_mib=24576)), (2, SimModel(name="L4", memory_mib=23034))),
        ),
        (
            "1xA10, 1x{name=X,mem=1}",
            ((1, SimModel(name="A10", memory_mib=24576)), (1, SimModel(name="X", memory_mib=1))),
        ),
    ],
)
def test_spec_parses(spec: str, expected: object) -> None:
    assert parse_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("4xB9000", "unknown model 'B9000'"),
        ("0xA10", "outside 1..64"),
        ("2x{mem=1}", "needs name= and mem="),
        ("2x{name=X,mem=lots}", "must be non-negative integers"),
        ("2x{name=X,mem=1,color=red}", "needs name= and mem="),
        ("2x{name}", "not key=value"),
        ("4xA100-80GB;;", "cannot parse"),
    ],
)
def test_bad_spec_is_refused_with_a_reason(spec: str, message: str) -> None:
    with pytest.raises(SimSpecError, match=message):
        parse_spec(spec)


def test_simulated_uuids_are_stable_per_node_and_look_like_nvidia_uuids() -> None:
    first = build_devices("node-1", "2xA10")
    assert [d.uuid for d in first] == [d.uuid for d in build_devices("node-1", "2xA10")]
    assert first[0].uuid != simulated_uuid("node-2", 0)
    assert first[0].uuid.startswith("GPU-") and first[0].uuid.count("-") == 5
    assert [d.index for d in first] == [0, 1]


# -- health ------------------------------------------------------------------------------------------


def test_hami_ignored_xids_do_not_mark_unhealthy_but_others_do() -> None:
    policy = HealthPolicy.parse("", "")
    assert all(not policy.is_critical(x) for x in HAMI_IGNORED_XIDS)
    assert policy.is_critical(79)


@pytest.mark.parametrize(
    ("disable", "enable", "xid", "critical"),
    [
        ("all", "", 79, False),
        ("xids", "", 79, False),
        ("79", "", 79, False),
        ("", "13", 13, True),
        ("", "all", 31, True),
        ("48,79", "", 48, False),
    ],
)
def test_healthcheck_env_switches(disable: str, enable: str, xid: int, critical: bool) -> None:
    assert HealthPolicy.parse(disable, enable).is_critical(xid) is critical


def test_device_recovers_after_a_quiet_period_and_a_new_xid_restarts_the_clock() -> None:
    gpu = DeviceUUID("GPU-1")
    tracker = HealthTracker(policy=HealthPolicy(), recovery_s=60)
    down = tracker.on_xid(gpu, 79, now=0)
    assert down is not None and not down.healthy and down.reason == "XID 79"
    assert tracker.on_xid(gpu, 79, now=30) is None  # already unhealthy: no second transition
    assert tracker.on_probe_ok(gpu, now=80) is None  # only 50 s since the last XID
    up = tracker.on_probe_ok(gpu, now=95)
    assert up is not None and up.healthy
    assert tracker.on_xid(gpu, 13, now=100) is None  # ignored XID


# -- inventory ------------------------------------------------------------------------------------------

GPU0 = PhysicalDevice(
    uuid=DeviceUUID("GPU-00000000-0000-0000-0000-000000000000"),
    index=0,
    name="A100-SXM4-80GB",
    memory_mib=81920,
    numa=1,
)
GPU1 = PhysicalDevice(
    uuid=DeviceUUID("GPU-11111111-0000-0000-0000-000000000000"),
    index=1,
    name="NVIDIA H100 80GB HBM3",
    memory_mib=81559,
)


def test_type_gets_the_nvidia_prefix_unless_it_has_one() -> None:
    assert device_type("A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert device_type("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"


def test_scaling_split_and_health_shape_the_registered_devices() -> None:
    settings = NodeAgentSettings(
        node_name="n", device_split_count=4, device_memory_scaling=1.5, device_core_scaling=2
    )
    infos = device_infos([GPU0, GPU1], settings, frozenset({GPU1.uuid}))
    assert [(i.count, i.devmem, i.devcore, i.numa, i.health) for i in infos] == [
        (4, 122880, 200, 1, True),
        (4, 122338, 200, 0, False),
    ]


def test_filtered_devices_are_hidden_by_uuid_or_index() -> None:
    by_uuid = NodeAgentSettings(node_name="n", filter_uuids=(GPU0.uuid,))
    by_index = NodeAgentSettings(node_name="n", filter_indexes=(1,))
    assert [i.id for i in device_infos([GPU0, GPU1], by_uuid, frozenset())] == [GPU1.uuid]
    assert [i.id for i in device_infos([GPU0, GPU1], by_index, frozenset())] == [GPU0.uuid]


def test_replicas_are_uuid_dash_i_and_strip_back_to_the_physical_uuid() -> None:
    infos = device_infos([GPU0], NodeAgentSettings(node_name="n", device_split_count=3), frozenset())
    reps = replicas(infos, with_numa=True)
    assert [r.id for r in reps] == [f"{GPU0.uuid}-{i}" for i in range(3)]
    assert {physical_uuid(r.id) for r in reps} == {GPU0.uuid}
    assert reps[0].numa == 1
    assert replicas(infos, with_numa=False)[0].numa is None
    assert physical_uuid("MIG-abc::2") == "MIG-abc"


# -- settings --------------------------------------------------------------------------------------------


def test_hami_nodeconfig_entry_for_this_node_overrides_settings() -> None:
    doc = {
        "nodeconfig": [
            {"name": "other", "devicesplitcount": 2},
            {
                "name": "n",
                "operatingmode": "hami-core",
                "devicesplitcount": 5,
                "devicememoryscaling": 2,
                "libcudaloglevel": "3",
                "enablegetpreferredallocation": False,
                "filterdevices": {"uuid": ["GPU-x"], "index": [3]},
            },
        ]
    }
    s = apply_node_config(NodeAgentSettings(node_name="n"), doc)
    assert (s.device_split_count, s.device_memory_scaling, s.lib_cuda_log_level) == (5, 2.0, 3)
    assert (s.enable_preferred_allocation, s.filter_uuids, s.filter_indexes) == (False, ("GPU-x",), (3,))


def test_bad_nodeconfig_and_settings_are_refused() -> None:
    with pytest.raises(SettingsError):
        apply_node_config(
            NodeAgentSettings(node_name="n"), {"nodeconfig": [{"name": "n", "devicesplitcount": "x"}]}
        )
    with pytest.raises(SettingsError, match="node name is required"):
        validate(NodeAgentSettings())
    with pytest.raises(SettingsError, match="split count"):
        validate(NodeAgentSettings(node_name="n", device_split_count=0))


def test_missing_nvml_fails_clearly_or_advertises_nothing() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine")
    with pytest.raises(DiscoveryError, match="NVML is not usable on this node"):
        open_source(NodeAgentSettings(node_name="n"))
    assert open_source(NodeAgentSettings(node_name="n", fail_on_init_error=False)) is None


# -- health policy: NVIDIA's TestGetDisabledHealthCheckXids, case by case --------------------------------

_DEFAULT = dict.fromkeys(HAMI_IGNORED_XIDS, True)


@pytest.mark.parametrize(
    ("disable", "enable", "all_off", "critical"),
    [
        ("", "", False, {13: False, 31: False, 43: False, 45: False, 68: False, 109: False, 79: True}),
        ("all", "", True, {13: False, 79: False, 555: False}),
        ("xids", "", True, {13: False, 79: False, 555: False}),
        ("", "all", False, {13: True, 31: True, 109: True, 555: True}),
        ("11", "11", False, {11: True, 13: False, 555: True}),
        ("", "31", False, {31: True, 13: False, 555: True}),
        ("48, 79,", "", False, {48: False, 79: False, 13: False, 80: True}),
        ("all", "all", False, {13: True, 79: True}),
        ("XIDS", "", True, {79: False}),
    ],
)
def test_healthchecks_follow_nvidias_table(
    disable: str, enable: str, all_off: bool, critical: dict[int, bool]
) -> None:
    policy = HealthPolicy.parse(disable, enable)
    assert policy.enabled is not all_off
    assert {xid: policy.is_critical(xid) for xid in critical} == critical


def test_disable_all_with_an_enable_list_stays_off_as_in_nvidias_plugin() -> None:
    policy = HealthPolicy.parse("all", "48")
    assert not policy.enabled  # NVIDIA's IsAllDisabled only looks at the "all" switch
    assert policy.is_critical(48) and not policy.is_critical(79)


@pytest.mark.parametrize("words", ["not-an-int", "-68", "68x", "\u00b2", "1" * 30])
def test_malformed_xid_words_are_ignored_and_reported(words: str) -> None:
    policy = HealthPolicy.parse(f"{words},79", words)
    assert dict(policy.disabled) == {**_DEFAULT, 79: True}
    assert len(policy.malformed) == 2 and all(len(w) <= 32 for w in policy.malformed)


def test_a_device_whose_xids_cannot_be_watched_stays_unhealthy() -> None:
    gpu = DeviceUUID("GPU-1")
    tracker = HealthTracker(policy=HealthPolicy(), recovery_s=60)
    down = tracker.on_unwatchable(gpu, now=0, reason="no XID events: Not Supported")
    assert down is not None and not down.healthy
    assert tracker.on_probe_ok(gpu, now=10_000) is None
    assert tracker.unhealthy() == {gpu}


def test_a_lost_device_recovers_when_it_answers_again() -> None:
    gpu = DeviceUUID("GPU-1")
    tracker = HealthTracker(policy=HealthPolicy(), recovery_s=5)
    assert tracker.on_lost(gpu, now=0, reason="event wait failed") is not None
    up = tracker.on_probe_ok(gpu, now=5)
    assert up is not None and up.healthy


# -- replica IDs and settings bounds -------------------------------------------------------------------


def test_replica_ids_stay_within_the_kubelets_63_characters_at_the_largest_split() -> None:
    settings = NodeAgentSettings(node_name="n", device_split_count=MAX_SPLIT_COUNT)
    ids = [r.id for r in replicas(device_infos([GPU0], settings, frozenset()), with_numa=False)]
    assert len(ids) == MAX_SPLIT_COUNT and max(map(len, ids)) <= 63


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"device_split_count": MAX_SPLIT_COUNT + 1}, "split count must be 1..1000"),
        ({"heartbeat_s": 0}, "heartbeat_s must be > 0"),
        ({"watch_interval_s": -1}, "watch_interval_s must be > 0"),
        ({"allocate_wait_s": -0.5}, "allocate_wait_s must be >= 0"),
        ({"metrics_port": 70000}, "metrics port must be 0..65535"),
        ({"libvgpu_version": "../../etc"}, "must not contain '/'"),
        ({"gpu_core_policy": "sometimes"}, "default, force or disable"),
        ({"resource_name": "gpu"}, "domain/name"),
    ],
)
def test_out_of_range_settings_are_refused_by_name(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        validate(NodeAgentSettings(node_name="n", **changes))


# -- settings precedence ---------------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NODE_NAME", "HOOK_PATH", "DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS"):
        monkeypatch.delenv(name, raising=False)
    for name in ("NODE_NAME", "HOOK_PATH", "DEVICE_SPLIT_COUNT", "DISABLE_HEALTHCHECKS", "NODE_CONFIG_FILE"):
        monkeypatch.delenv(f"GPUBUS_NODE_AGENT_{name}", raising=False)
    return monkeypatch


def test_cli_beats_env_beats_file(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    file = tmp_path / "agent.yaml"
    file.write_text("node_name: from-file\ndevice_split_count: 3\nhook_path: /file\nheartbeat_s: 7\n")
    clean_env.setenv("GPUBUS_NODE_AGENT_DEVICE_SPLIT_COUNT", "4")
    clean_env.setenv("HOOK_PATH", "/hami-env")
    s = load({"device_split_count": 5}, file=str(file))
    assert (s.node_name, s.device_split_count, s.hook_path, s.heartbeat_s) == (
        "from-file",
        5,
        "/hami-env",
        7.0,
    )
    assert load({}, file=str(file)).device_split_count == 4


def test_our_env_name_beats_hamis_and_hamis_beats_the_file(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    file = tmp_path / "agent.yaml"
    file.write_text("node_name: from-file\ndisable_healthchecks: '48'\n")
    clean_env.setenv("NODE_NAME", "from-hami-env")
    clean_env.setenv("DP_DISABLE_HEALTHCHECKS", "all")
    s = load({}, file=str(file))
    assert (s.node_name, s.disable_healthchecks) == ("from-hami-env", "all")
    clean_env.setenv("GPUBUS_NODE_AGENT_NODE_NAME", "from-our-env")
    assert load({}, file=str(file)).node_name == "from-our-env"
    assert load({"node_name": "from-cli"}, file=str(file)).node_name == "from-cli"


def test_hamis_per_node_config_overrides_every_other_source(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"nodeconfig": [{"name": "n1", "devicesplitcount": 7}]}))
    clean_env.setenv("GPUBUS_NODE_AGENT_NODE_CONFIG_FILE", str(config))
    assert load({"node_name": "n1", "device_split_count": 2}).device_split_count == 7
    assert load({"node_name": "n2", "device_split_count": 2}).device_split_count == 2


def test_per_node_values_are_validated_like_any_other(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"nodeconfig": [{"name": "n1", "devicesplitcount": 0}]}))
    with pytest.raises(SettingsError, match="split count"):
        load({"node_name": "n1", "node_config_file": str(config)})
    config.write_text("{not json")
    with pytest.raises(SettingsError, match="cannot read per-node config"):
        load({"node_name": "n1", "node_config_file": str(config)})
