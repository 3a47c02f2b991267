"""A lab host's boot script shows it the Python it runs even from a clone under /tmp: the host's
private /tmp would hide the checkout and its venv, so they are bound read-only at their own path
(`fleet_lab.boot`; the lab itself boots in tests/lab)."""

from __future__ import annotations

import sys
from pathlib import Path

from fleet_lab import boot


def test_only_what_the_private_tmp_would_hide_is_bound() -> None:
    paths = ["/tmp/clone", "/tmpfoo/clone", "/root/clone", "/tmp"]
    assert boot.hidden(paths) == ["/tmp/clone", "/tmp"]


def test_the_python_roots_hold_the_venv_and_the_checkout() -> None:
    roots = boot.python_roots()
    here = Path(__file__).resolve().parent.parent
    assert any(here == Path(r) or here.is_relative_to(r) for r in roots), roots
    assert any(Path(sys.prefix).resolve().is_relative_to(r) for r in roots), roots
    assert not any(a != b and Path(a).is_relative_to(b) for a in roots for b in roots)


def test_a_clone_under_tmp_is_bound_read_only_over_the_host_s_private_tmp() -> None:
    lines = boot.stage2("spark1", "/var/lib/lab1/spark1", ["/tmp/clone"]).splitlines()
    private = lines.index('mount -t tmpfs -o mode=1777 fleet-lab-tmp "$R/tmp"')
    assert lines[private + 1 : private + 4] == [
        'mkdir -p "$R"/tmp/clone',
        'mount --bind /tmp/clone "$R"/tmp/clone',
        'mount -o remount,bind,ro "$R"/tmp/clone',
    ]
    assert lines.index("pivot_root . oldroot") > private + 3


def test_a_host_s_own_name_resolves_without_dns() -> None:
    """As on a real host (sudo looks its name up; a lab in a network namespace of its own has
    no DNS to ask, and sudo then warns before it answers)."""
    lines = boot.stage2("spark1", "/var/lib/lab1/spark1", address="127.0.4.11").splitlines()
    assert 'echo "127.0.4.11 spark1" >> "$R/etc/hosts"' in lines
