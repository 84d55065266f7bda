"""docs/events/asyncapi.yaml is a valid AsyncAPI 3.0 document by the AsyncAPI Initiative's own
parser (@asyncapi/parser, tests/asyncapi/), with every payload $ref resolved to its schema file.

Cases: the committed document is valid, every channel and message is there and every payload's
fields resolve; a copy with a missing schema file or a bad operation action is refused, naming it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from consumer_builds import asyncapi_validator

from shared.contract import messages

pytestmark = pytest.mark.timeout(600)  # npm ci of the parser on a fresh machine

DOCS = Path(__file__).resolve().parents[2] / "docs" / "events"


def validate(document: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*asyncapi_validator(), str(document)], capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_committed_document_is_valid_asyncapi() -> None:
    done = validate(DOCS / "asyncapi.yaml")
    assert done.returncode == 0, done.stderr
    n = len(messages())
    fields = sum(len(m.schema.get("properties", {})) for m in messages())
    summary = f"valid AsyncAPI 3.0.0: {n} channels, {n} messages, {fields} payload fields resolved"
    assert summary in done.stdout


def test_a_missing_payload_schema_is_refused(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "events")
    (tmp_path / "events" / "schemas" / "pod.rejected.v1.json").unlink()
    done = validate(tmp_path / "events" / "asyncapi.yaml")
    assert done.returncode == 1
    assert "invalid-ref" in done.stderr and "pod.rejected.v1.json" in done.stderr


def test_a_bad_operation_is_refused(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "events")
    path = tmp_path / "events" / "asyncapi.yaml"
    path.write_text(path.read_text().replace("action: receive", "action: listen", 1))
    done = validate(path)
    assert done.returncode == 1
    assert '"action" property must be equal to one of the allowed values' in done.stderr
