"""The deploy files, checked by the real tools: systemd-analyze verify, visudo, sudo -l against a
throwaway user, and install.sh run twice into a staging root."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
SUDOERS = DEPLOY / "sudoers.d" / "fleet-supervisor"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (useradd, sudoers.d)")


def _run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False)


@pytest.fixture
def staging_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    (root / "etc/shadow").write_text("root:*:19000:0:99999:7:::\n")
    (root / "etc/gshadow").write_text("root:*::\n")
    return root


def _tree(root: Path) -> list[tuple[str, int, int, int, bytes]]:
    rows = []
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        body = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        rows.append((str(path.relative_to(root)), st.st_mode, st.st_uid, st.st_gid, body))
    return rows


@needs_root
def test_install_twice_into_a_staging_root_changes_nothing_the_second_time(
    staging_root: Path,
) -> None:
    first = _run(DEPLOY / "install.sh", "--root", staging_root, "--no-venv")
    assert first.returncode == 0, first.stderr
    assert "install.sh: created user fleet-supervisor" in first.stdout
    assert f"install.sh: enabled fleet-supervisor.service in {staging_root}" in first.stdout
    before = _tree(staging_root)
    second = _run(DEPLOY / "install.sh", "--root", staging_root, "--no-venv")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[-1] == "install.sh: no change"
    assert _tree(staging_root) == before
    etc = staging_root / "etc/fleet-supervisor"
    assert oct(etc.stat().st_mode & 0o777) == "0o750"
    assert oct((etc / "env").stat().st_mode & 0o777) == "0o640"
    assert (staging_root / "etc/systemd/system/multi-user.target.wants").is_dir()


@pytest.mark.slow
@needs_root
def test_install_with_a_real_venv_twice_changes_nothing_the_second_time(
    staging_root: Path, tmp_path: Path
) -> None:
    """The venv is built from a copy of this checkout (a copy, so edits made meanwhile do not
    count as a change); pip resolves the dependencies through whatever index this machine's pip
    is configured for (a box without one cannot run this spec)."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(DEPLOY.parent / name, checkout / name)
    for name in ("supervisor", "deploy", "playbooks", "runbooks"):
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(DEPLOY.parent / name, checkout / name, ignore=ignore)
    install = checkout / "deploy/install.sh"
    first = _run(install, "--root", staging_root)
    assert first.returncode == 0, first.stderr
    venv = staging_root / "opt/fleet-supervisor/venv"
    assert f"install.sh: created the venv {venv}" in first.stdout
    assert f"install.sh: installed fleet-supervisor from {checkout} into {venv}" in first.stdout
    version = _run(venv / "bin/fleet-supervisor", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("fleet-supervisor ")
    assert len(list(venv.glob("lib/python3.*/site-packages/supervisor/py.typed"))) == 1
    before = _tree(staging_root)
    second = _run(install, "--root", staging_root)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["install.sh: no change"]
    assert _tree(staging_root) == before
    # the checkout is left as it was: pip built from a copy, no build/ or egg-info in it
    assert sorted(p.name for p in checkout.iterdir()) == [
        "README.md", "deploy", "playbooks", "pyproject.toml", "runbooks", "supervisor",
    ]  # fmt: skip


def test_install_refuses_an_unknown_option() -> None:
    result = _run(DEPLOY / "install.sh", "--frobnicate")
    assert result.returncode == 2
    assert result.stderr == "install.sh: unknown option --frobnicate (try --help)\n"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verify_accepts_the_unit(staging_root: Path) -> None:
    exe = staging_root / "opt/fleet-supervisor/venv/bin/fleet-supervisor"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (staging_root / "bin").mkdir()
    shutil.copy("/bin/kill", staging_root / "bin/kill")
    shutil.copytree(
        "/usr/lib/systemd/system", staging_root / "usr/lib/systemd/system", symlinks=True
    )
    units = staging_root / "etc/systemd/system"
    units.mkdir(parents=True)
    shutil.copy(DEPLOY / "fleet-supervisor.service", units)
    result = _run(
        "systemd-analyze", "verify", f"--root={staging_root}", units / "fleet-supervisor.service"
    )
    assert result.returncode == 0, result.stderr
    assert "fleet-supervisor.service" not in result.stderr


def test_the_unit_has_the_settings_the_issue_asks_for() -> None:
    text = (DEPLOY / "fleet-supervisor.service").read_text().splitlines()
    for line in [
        "Type=notify", "NotifyAccess=main", "WatchdogSec=60", "Restart=on-failure",
        "User=fleet-supervisor", "NoNewPrivileges=yes", "ProtectSystem=strict",
        "ProtectHome=yes", "PrivateTmp=yes", "ReadWritePaths=/var/lib/fleet-supervisor",
        "EnvironmentFile=-/etc/fleet-supervisor/env", "ExecReload=/bin/kill -HUP $MAINPID",
    ]:  # fmt: skip
        assert line in text


def _visudo() -> str:
    """visudo, also where /usr/sbin is not on this user's PATH."""
    found = shutil.which("visudo", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if found is None:
        pytest.skip("visudo is not installed (Debian package sudo)")
    return found


def test_visudo_accepts_the_sudoers_file() -> None:
    result = _run(_visudo(), "-c", "-f", SUDOERS)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def sudo_user() -> Iterator[str]:
    """A throwaway user holding exactly the shipped sudoers rules (then removed, file and all)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (useradd, sudoers.d)")
    name = f"fstest{os.getpid() % 100000}"
    dropin = Path(f"/etc/sudoers.d/zz-{name}")
    assert _run("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name).returncode == 0
    try:
        text = SUDOERS.read_text()
        text = text.replace("Defaults:fleet-supervisor", f"Defaults:{name}")
        text = text.replace("\nfleet-supervisor ALL", f"\n{name} ALL")
        staged = Path(f"/tmp/{name}.sudoers")
        staged.write_text(text)
        checked = _run(_visudo(), "-c", "-f", staged)
        assert checked.returncode == 0, checked.stderr  # never install a file visudo refuses
        staged.chmod(0o440)
        shutil.move(staged, dropin)
        yield name
    finally:
        dropin.unlink(missing_ok=True)
        _run("userdel", name)


ALLOWED = [
    "/usr/bin/systemctl restart vllm-ds4-head.service",
    "/usr/bin/systemctl reset-failed vllm-ds4-worker.service",
    "/usr/bin/systemctl daemon-reload",
    "/usr/bin/install -D -m 0644 /dev/stdin "
    "/etc/systemd/system/vllm-a.service.d/50-fleet-supervisor-execstart.conf",
    "/usr/bin/kill -s TERM -- 4242",
    "/usr/bin/ss -Hltnp sport = :29501",
    "/usr/bin/journalctl -u vllm-a.service -n 300 --no-pager -o cat",
    "/usr/bin/rm -f -- /dev/shm/psm_1a2b /dev/shm/sem.mp-xyz",
    *[
        pytest.param(
            c, marks=pytest.mark.skipif(not Path("/usr/bin/docker").exists(), reason="no docker")
        )
        for c in (
            "/usr/bin/docker restart vllm_ds4",
            "/usr/bin/docker exec vllm_ds4 test -e /w/x.sh",
        )
    ],
]
REFUSED = [
    "/bin/sh",
    "/usr/bin/sh -c id",
    "/usr/bin/systemctl restart ssh.service",
    "/usr/bin/systemctl restart vllm-a.service ssh.service",
    "/usr/bin/systemctl edit vllm-a.service",
    "/usr/bin/rm -rf /",
    "/usr/bin/rm -f -- /dev/shm/psm_1 /etc/passwd",
    "/usr/bin/kill -s TERM -- 1 2",
    "/usr/bin/docker exec vllm_ds4 sh",
    "/usr/bin/docker run --privileged debian",
    "/usr/bin/journalctl -u ssh.service -n 300 --no-pager -o cat",
    "/usr/bin/install -D -m 0644 /dev/stdin /etc/sudoers.d/x",
]


@pytest.mark.parametrize("command", ALLOWED)
def test_sudo_allows_what_the_actions_run(sudo_user: str, command: str) -> None:
    result = _run("sudo", "-n", "-l", "-U", sudo_user, *command.split())
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("command", REFUSED)
def test_sudo_refuses_anything_else(sudo_user: str, command: str) -> None:
    result = _run("sudo", "-n", "-l", "-U", sudo_user, *command.split())
    assert result.returncode == 1
    assert result.stdout == ""


@needs_root
def test_install_the_postgresql_variant(staging_root: Path) -> None:
    url = "postgresql+asyncpg://fleet@db.lan:5432/fleet"
    first = _run(DEPLOY / "install.sh", "--root", staging_root, "--no-venv", "--postgresql", url)
    assert first.returncode == 0, first.stderr
    etc = staging_root / "etc/fleet-supervisor"
    assert f"install.sh: wrote {etc / 'pg.pass'}" in first.stdout
    before = _tree(staging_root)
    second = _run(DEPLOY / "install.sh", "--root", staging_root, "--no-venv", "--postgresql", url)
    assert second.stdout.splitlines()[-1] == "install.sh: no change"
    assert _tree(staging_root) == before
    store = yaml.safe_load((etc / "fleet.yaml").read_text())["store"]
    assert store == {
        "url": url,
        "password_file": "/etc/fleet-supervisor/pg.pass",
        "sample_retention": "7d",
    }
    assert (etc / "pg.pass").read_bytes() == b""
    assert oct((etc / "pg.pass").stat().st_mode & 0o777) == "0o640"
    docs = staging_root / "opt/fleet-supervisor/docs"
    assert (docs / "fleet.second.example.yaml").read_text() == (
        DEPLOY / "fleet.second.example.yaml"
    ).read_text()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "postgresql+asyncpg://fleet:pw@db/fleet",
            "install.sh: --postgresql postgresql+asyncpg://fleet:pw@db/fleet holds a password: "
            "put it in /etc/fleet-supervisor/pg.pass instead\n",
        ),
        (
            "postgres://db/fleet",
            "install.sh: --postgresql expects postgresql+asyncpg://USER@HOST[:PORT]/DB, "
            "got postgres://db/fleet\n",
        ),
    ],
)
def test_install_refuses_a_bad_postgresql_url(tmp_path: Path, url: str, message: str) -> None:
    result = _run(DEPLOY / "install.sh", "--root", tmp_path, "--no-venv", "--postgresql", url)
    assert (result.returncode, result.stderr) == (1, message)
    assert list(tmp_path.iterdir()) == []
