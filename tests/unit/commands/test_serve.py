"""The address `calmon serve` announces is one a browser on the machine can open."""

from __future__ import annotations

import pytest

from calmon.commands.serve import web_address


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("localhost", "http://localhost:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("::", "http://127.0.0.1:8000"),
        ("::1", "http://[::1]:8000"),
    ],
)
def test_the_announced_address_opens_in_a_browser(host: str, expected: str) -> None:
    assert web_address(host, 8000) == expected
