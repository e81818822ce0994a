"""The browser tests' Chromium: its binary, or the test is skipped with how to install it."""

from __future__ import annotations

import pytest
from chromium_cdp import find_chromium


@pytest.fixture
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip("headless Chromium not installed (Debian: apt-get install -y chromium)")
    return binary
