"""API clients of the tests."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

#: what the ``make_client`` fixture gives: an API client on the test's migrated database, with
#: the extra settings passed as keywords
ClientFactory = Callable[..., TestClient]
