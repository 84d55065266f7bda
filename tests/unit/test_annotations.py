"""HAMi annotation codecs, byte for byte (reference §2) and the init-container usage collapse (§4).

Cases: PodSingleDevice encode/decode (one slot per container, empty slots kept, the trailing slot rule,
format errors, chunks without a comma), node register JSON (omitempty, field order, Go escaping, zero
values on decode), the legacy 7- and 9-field colon form, pair scores, comma lists, usage collapse.
"""

from __future__ import annotations

import pytest

from shared import annotations as ann
from shared.errors import AnnotationError
from shared.model import ContainerDevice, DeviceInfo, DeviceUsage, DeviceUUID, PodDevices


def cd(uuid: str, mem: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid=DeviceUUID(uuid), usedmem=mem, usedcores=cores)


U = "GPU-0fc3eda5-e98b-a25b-5b0d-d1f7b5a1448"


@pytest.mark.parametrize(
    ("devices", "text"),
    [
        (((cd(U, 3000, 0),), (cd(U, 5000, 0),)), f"{U},NVIDIA,3000,0:;{U},NVIDIA,5000,0:;"),
        (((cd("uuid1", 1000, 30),), ()), "uuid1,NVIDIA,1000,30:;;"),
        (((), (cd("a", 1, 2), cd("b", 3, 4))), ";a,NVIDIA,1,2:b,NVIDIA,3,4:;"),
        (((), (), ()), ";;;"),
        ((), ""),
    ],
)
def test_pod_single_device_round_trip(devices: PodDevices, text: str) -> None:
    assert ann.encode_pod_devices(devices) == text
    assert ann.decode_pod_devices(text) == devices


def test_decode_keeps_inner_empty_slots_and_drops_only_the_trailing_one() -> None:
    assert ann.decode_pod_devices(";;a,NVIDIA,1,0:;") == ((), (), (cd("a", 1, 0),))


def test_decode_without_final_terminator_keeps_last_slot() -> None:
    assert ann.decode_pod_devices("a,NVIDIA,1,0:") == ((cd("a", 1, 0),),)


def test_idx_is_not_encoded() -> None:
    dev = ContainerDevice(uuid=DeviceUUID("a"), usedmem=1, usedcores=0, idx=5)
    assert ann.encode_pod_devices(((dev,),)) == "a,NVIDIA,1,0:;"


def test_chunk_with_comma_but_missing_fields_is_the_hami_error() -> None:
    with pytest.raises(
        AnnotationError, match=r"^pod annotation format error, missing fields, do not use nodeName"
    ):
        ann.decode_pod_devices("node1,NVIDIA:;")


def test_chunks_without_comma_are_skipped() -> None:
    assert ann.decode_pod_devices("junk:a,NVIDIA,1,2:;") == ((cd("a", 1, 2),),)


def test_non_integer_memory_is_refused() -> None:
    with pytest.raises(AnnotationError):
        ann.decode_pod_devices("a,NVIDIA,lots,0:;")


V100 = DeviceInfo(
    id=DeviceUUID("GPU-1"), count=10, devmem=32768, devcore=100, type="NVIDIA-Tesla V100-PCIE-32GB"
)


def test_node_register_json_is_byte_exact_with_omitempty() -> None:
    assert ann.encode_node_devices([V100]) == (
        '[{"id":"GPU-1","count":10,"devmem":32768,"devcore":100,'
        '"type":"NVIDIA-Tesla V100-PCIE-32GB","mode":"hami-core","health":true}]'
    )


def test_node_register_json_writes_nonzero_index_and_numa_and_omits_false_health() -> None:
    dev = DeviceInfo(id=DeviceUUID("G"), index=3, devmem=1, type="T", numa=1, mode="", health=False)
    assert (
        ann.encode_node_devices([dev])
        == '[{"id":"G","index":3,"count":10,"devmem":1,"devcore":100,"type":"T","numa":1}]'
    )


def test_node_register_json_escapes_like_go() -> None:
    dev = DeviceInfo(id=DeviceUUID("G"), devmem=1, type="A<B>&C é")
    assert '"type":"A\\u003cB\\u003e\\u0026C é"' in ann.encode_node_devices([dev])


def test_node_register_json_round_trip_and_zero_values() -> None:
    assert ann.decode_node_devices(ann.encode_node_devices([V100])) == (V100,)
    (dev,) = ann.decode_node_devices('[{"id":"G","devmem":5}]')
    assert (dev.mode, dev.health, dev.count, dev.index, dev.numa, dev.devcore) == ("", False, 0, 0, 0, 0)


@pytest.mark.parametrize(
    "text", ["{", "{}", "[1]", '[{"id":3}]', '[{"id":"a","devmem":"5"}]', '[{"health":"yes"}]']
)
def test_node_register_json_errors(text: str) -> None:
    with pytest.raises(AnnotationError):
        ann.decode_node_devices(text)


def test_legacy_nine_field_form() -> None:
    (dev,) = ann.decode_node_register("GPU-ebe7,10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:")
    assert dev == DeviceInfo(
        id=DeviceUUID("GPU-ebe7"),
        count=10,
        devmem=7680,
        devcore=100,
        type="NVIDIA-Tesla P4",
        numa=0,
        health=True,
        index=1,
        mode="hami-core",
    )


def test_legacy_seven_field_form_defaults_mode_and_index() -> None:
    devs = ann.decode_node_devices_legacy("A,10,100,100,T,1,false:B,5,200,100,T,0,True:")
    assert [(d.id, d.mode, d.index, d.health, d.numa) for d in devs] == [
        ("A", "hami-core", 0, False, 1),
        ("B", "hami-core", 0, True, 0),
    ]


#: HAMi v2.10 ``pkg/device/devices.go`` ``DecodeNodeDevices``: every malformed part is an error
#: naming it (before v2.10 a bad number was read as 0). Fields are checked in its order: count,
#: memory, core, health, numa, then (9-field form) index.
LEGACY_ERRORS = [
    ("no-colon-here", "node annotation missing device separator"),
    ("A:", 'malformed node annotation segment: "A"'),
    ("A,10,100,100,T:", "unexpected field count 5 in node annotation"),
    ("A,x,100,100,T,0,true:", 'invalid count field: strconv.ParseInt: parsing "x": invalid syntax'),
    ("A,,100,100,T,0,true:", 'invalid count field: strconv.ParseInt: parsing "": invalid syntax'),
    ("A, 10,100,100,T,0,true:", 'invalid count field: strconv.ParseInt: parsing " 10": invalid syntax'),
    ("A,1_0,100,100,T,0,true:", 'invalid count field: strconv.ParseInt: parsing "1_0": invalid syntax'),
    (
        "A,10,99999999999,100,T,0,true:",
        'invalid memory field: strconv.ParseInt: parsing "99999999999": value out of range',
    ),
    ("A,10,1.5,100,T,0,true:", 'invalid memory field: strconv.ParseInt: parsing "1.5": invalid syntax'),
    ("A,10,100,abc,T,0,true:", 'invalid core field: strconv.ParseInt: parsing "abc": invalid syntax'),
    ("A,10,100,100,T,0,yes:", 'invalid health field: strconv.ParseBool: parsing "yes": invalid syntax'),
    ("A,10,100,100,T,n,yes:", 'invalid health field: strconv.ParseBool: parsing "yes": invalid syntax'),
    ("A,10,100,100,T,n,true:", 'invalid numa field: strconv.Atoi: parsing "n": invalid syntax'),
    ("A,10,100,100,T,0,true,i,mig:", 'invalid index field: strconv.Atoi: parsing "i": invalid syntax'),
    ("A,10,100,100,T,0,true,-1,mig:", "index field must not be negative: -1"),
    ('A,"1",100,100,T,0,true:', 'invalid count field: strconv.ParseInt: parsing "\\"1\\"": invalid syntax'),
]


@pytest.mark.parametrize(("text", "message"), LEGACY_ERRORS)
def test_legacy_form_errors_name_the_field_as_hami_v2_10(text: str, message: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        ann.decode_node_devices_legacy(text)
    assert str(caught.value) == message


def test_legacy_form_reads_signed_numbers_and_the_nine_field_form() -> None:
    """Go's ParseInt takes a sign; the 9-field form carries index and mode (devices.go)."""
    (dev,) = ann.decode_node_devices_legacy("GPU-a,+10,-0,100,NVIDIA-A100,1,T,3,mig:")
    assert (dev.count, dev.devmem, dev.numa, dev.health, dev.index, dev.mode) == (10, 0, 1, True, 3, "mig")


def test_pair_scores() -> None:
    assert ann.decode_pair_scores('[{"uuid":"GPU-0","score":{"GPU-1":50}}]') == {"GPU-0": {"GPU-1": 50}}
    with pytest.raises(AnnotationError):
        ann.decode_pair_scores('[{"score":{}}]')


def test_parse_list_trims_and_drops_empties() -> None:
    assert ann.parse_list(" a, ,b ,") == ("a", "b")
    assert ann.parse_list("  ") == ()
    assert ann.parse_list(None) == ()


def test_collapse_takes_init_max_and_app_sum_then_the_larger() -> None:
    devices = (
        (cd("B", 9000, 10),),  # init 1
        (cd("B", 1000, 50), cd("A", 5, 5)),  # init 2
        (cd("B", 2000, 20),),  # app
        (cd("B", 3000, 20),),  # app
    )
    got = ann.collapse_usage(devices, init_count=2)
    assert list(got) == ["A", "B"]
    assert got[DeviceUUID("A")] == DeviceUsage(used=1, usedmem=5, usedcores=5)
    assert got[DeviceUUID("B")] == DeviceUsage(used=2, usedmem=9000, usedcores=50)


def test_annotation_keys() -> None:
    assert ann.DEVICES_ALLOCATED == "hami.io/vgpu-devices-allocated"
    assert ann.NODE_REGISTER == "hami.io/node-nvidia-register"
    assert ann.BindPhase("allocating") is ann.BindPhase.ALLOCATING
