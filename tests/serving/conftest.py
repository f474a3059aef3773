"""Serving-core fixtures: the gateway tests' scripted backend, for the units that run on one."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import FakeBackend


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()
