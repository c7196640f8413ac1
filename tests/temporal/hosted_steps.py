"""Function nodes of the hosted-pipeline tests (``tests.temporal.hosted_steps:mark``)."""

from __future__ import annotations

import os
import time
from typing import Any

from tests.orchestration_steps import record


def mark(node_input: Any) -> str:
    """Records ``<node>@<pid>`` (which process ran it), then takes $ORCHESTRA_TEST_STEP_SECONDS (default
    0): a server can be killed between its nodes."""
    record(f"{node_input.node_id}@{os.getpid()}")
    time.sleep(float(os.environ.get("ORCHESTRA_TEST_STEP_SECONDS", "0")))
    return f"{node_input.node_id} done"
