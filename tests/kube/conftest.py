"""The real-control-plane tests reuse the end-to-end harness and invariants of ``tests/e2e``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
