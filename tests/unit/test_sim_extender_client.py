"""How the kube-scheduler stand-in reads one HostPriority of an extender's ``/prioritize`` reply.

Go decodes JSON keys case-insensitively: the usual spellings (``host``/``score`` as tagged,
``Host``/``Score`` as many extenders write) and any other casing give the same entry; a missing
score is 0; anything but an object is an ``ExtenderError``.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpubus_local.sim.extender_client import ExtenderError, _host_score


@pytest.mark.parametrize(("entry", "expected"), [
    ({"host": "n1", "score": 7}, ("n1", 7)),
    ({"Host": "n1", "Score": 7}, ("n1", 7)),
    ({"HOST": "n1", "sCoRe": 7}, ("n1", 7)),
    ({"host": "n1", "Score": 7}, ("n1", 7)),
    ({"Host": "n1"}, ("n1", 0)),
    ({"Host": "n1", "Score": None}, ("n1", 0)),
])
def test_host_priority_keys_are_read_case_insensitively(
    entry: dict[str, Any], expected: tuple[str, int]
) -> None:
    assert _host_score(entry) == expected


def test_host_priority_that_is_not_an_object_is_an_extender_error() -> None:
    with pytest.raises(ExtenderError, match="expected a JSON object"):
        _host_score(["n1", 7])
