"""Fixtures: a sluice database (DATABASE_URL, as set by `pgtest-run`) and clients on it."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import pytest

import sluicemq as sluice


@pytest.fixture(scope="session")
def dsn() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        pytest.exit("DATABASE_URL is not set: run the tests with `make test-python`", returncode=2)
    return url


@pytest.fixture(scope="session")
def client(dsn: str) -> Iterator[sluice.Client]:
    with sluice.Client(dsn) as c:
        yield c


@pytest.fixture
def queue(client: sluice.Client) -> Iterator[str]:
    """A fresh queue name (not created), dropped afterwards."""
    name = "py_" + uuid.uuid4().hex[:12]
    yield name
    client.drop_queue(name)


def run(coro):  # type: ignore[no-untyped-def]
    """Run a coroutine to completion (the tests need no asyncio plugin)."""
    return asyncio.run(coro)
