"""The lab fixture: two simulated hosts (spark1 127.0.0.11, spark2 127.0.0.12), booted once per
test run of this package, each a real systemd as PID 1 with its own sshd and the fleet's units (see
`fleet_lab.fleet`); stopped at the end. Without root (or off Linux) every test of this package
is skipped, with the lab's own reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_lab import fleet
from fleet_lab.lab import Lab, LabError, check_root

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    try:
        check_root()
    except LabError as exc:
        skip = pytest.mark.skip(reason=str(exc))
        for item in items:
            if item.path.is_relative_to(HERE):
                item.add_marker(skip)


@pytest.fixture(scope="package")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    try:
        check_root()
    except LabError as exc:
        pytest.skip(str(exc))
    built = fleet.create(tmp_path_factory.mktemp("lab"))
    built.up()
    try:
        yield built
    finally:
        built.down()
