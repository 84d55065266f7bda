"""Discovery: the --simulate spec, XID health policy and recovery, inventory, per-node config.

Cases: table models, counts, NUMA suffix, explicit form, several groups, and each malformed
spec; deterministic UUIDs; DP_DISABLE/ENABLE_HEALTHCHECKS parsing; unhealthy on a critical
XID and healthy again after a quiet period; HAMi type naming, scaling, filtering and
replica IDs; HAMi's nodeconfig overrides.
"""

from __future__ import annotations

import pynvml
import pytest

from services.node_agent.app import open_source
from services.node_agent.discovery import HAMI_IGNORED_XIDS, HealthPolicy, HealthTracker, PhysicalDevice
from services.node_agent.errors import DiscoveryError, SimSpecError
from services.node_agent.inventory import device_infos, device_type, physical_uuid, replicas
from services.node_agent.settings import NodeAgentSettings, apply_node_config, validate
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
