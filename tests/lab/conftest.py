"""The lab fixture: two simulated hosts (spark1 127.0.0.11, spark2 127.0.0.12), booted once per
test run of this package, each a real systemd as PID 1 with its own sshd and the fleet's units (see
`fleet_lab.fleet`); stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fleet_lab import fleet
from fleet_lab.lab import Lab, LabError, check_root


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
