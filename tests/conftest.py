"""Suite-wide settings: no test may reach a real model.

Every test runs inside ``agent_payload.testing.block_model_requests()``: a provider adapter whose
client points anywhere but loopback raises ``ModelRequestsBlockedError`` instead of sending.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_payload.testing import block_model_requests


@pytest.fixture(autouse=True, scope="session")
def _no_real_model_requests() -> Iterator[None]:
    with block_model_requests():
        yield
