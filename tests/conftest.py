"""Suite-wide settings: no test may reach a real model; hypothesis never fails on timing.

Every test runs inside ``agent_payload.testing.block_model_requests()``: a provider adapter whose
client points anywhere but loopback raises ``ModelRequestsBlockedError`` instead of sending.

Hypothesis: no per-example deadline and no "too slow" health check anywhere (a loaded CI machine
must not turn into a failure); under ``CI`` the examples are derandomized, so a CI run is
repeatable, while local runs keep exploring new examples.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from agent_payload.testing import block_model_requests

settings.register_profile(
    "agent_payload",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=bool(os.environ.get("CI")),
)
settings.load_profile("agent_payload")


@pytest.fixture(autouse=True, scope="session")
def _no_real_model_requests() -> Iterator[None]:
    with block_model_requests():
        yield
