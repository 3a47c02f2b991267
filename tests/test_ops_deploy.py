"""The deploy files, checked by the real tools: systemd-analyze verify, visudo, sudo -l against a
throwaway user, and install.sh run twice into a staging root."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from supervisor import cli

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (useradd, sudoers.d)")


#: Where this checkout's set-up put uv (scripts/setup.sh; absent where it fell back to pip).
UV_BIN = Path(sys.executable).parent


def _run(*argv: str | Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = None if path is None else {**os.environ, "PATH": path}
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=False, env=env
    )


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
    count as a change), with `--uv` where this checkout's set-up has uv (uv resolves the
    dependencies on PyPI: about 5 s of CPU where pip takes 35): pip's way runs in a real host in
    `tests/test_install.py`. Without uv, pip resolves through whatever index this machine's pip
    is configured for (a box without one cannot run this spec)."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(DEPLOY.parent / name, checkout / name)
    for name in ("supervisor", "deploy", "docs", "playbooks", "runbooks"):
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(DEPLOY.parent / name, checkout / name, ignore=ignore)
    install = checkout / "deploy/install.sh"
    uv = (UV_BIN / "uv").exists()
    path = f"{UV_BIN}:{os.environ['PATH']}" if uv else None
    first = _run(install, "--root", staging_root, *(["--uv"] if uv else []), path=path)
    assert first.returncode == 0, first.stderr
    venv = staging_root / "opt/fleet-supervisor/venv"
    assert f"install.sh: created the venv {venv}" in first.stdout
    assert f"install.sh: installed fleet-supervisor from {checkout} into {venv}" in first.stdout
    version = _run(venv / "bin/fleet-supervisor", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("fleet-supervisor ")
    assert len(list(venv.glob("lib/python3.*/site-packages/supervisor/py.typed"))) == 1
    before = _tree(staging_root)
    second = _run(install, "--root", staging_root, *(["--uv"] if uv else []), path=path)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["install.sh: no change"]
    assert _tree(staging_root) == before
    # the checkout is left as it was: pip built from a copy, no build/ or egg-info in it
    assert sorted(p.name for p in checkout.iterdir()) == [
        "README.md", "deploy", "docs", "playbooks", "pyproject.toml", "runbooks", "supervisor",
    ]  # fmt: skip


def test_install_with_uv_asks_for_it_on_path_before_anything_changes(
    staging_root: Path,
) -> None:
    before = _tree(staging_root)
    result = _run(DEPLOY / "install.sh", "--root", staging_root, "--uv", path="/usr/bin:/bin")
    assert result.returncode == 1
    assert result.stderr == (
        "install.sh: --uv: no uv on PATH (install it, or leave out --uv: pip does the same, "
        "slower)\n"
    )
    assert _tree(staging_root) == before


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


def _generated(host: str | None = None) -> str:
    """`fleet-supervisor sudoers` for deploy/fleet.example.yaml (its playbook: the shipped one)."""
    argv = ["--config", str(DEPLOY / "fleet.example.yaml"), "sudoers"]
    if host is not None:
        argv += ["--host", host]
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(argv) == 0
    return out.getvalue()


def _visudo() -> str:
    """visudo, also where /usr/sbin is not on this user's PATH."""
    found = shutil.which("visudo", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if found is None:
        pytest.skip("visudo is not installed (Debian package sudo)")
    return found


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sudoers") / "fleet-supervisor"
    path.write_text(_generated())
    return path


def test_visudo_accepts_the_generated_sudoers_file(generated: Path) -> None:
    result = _run(_visudo(), "-c", "-f", generated)
    assert result.returncode == 0, result.stderr


def test_the_generated_file_names_who_needs_each_command() -> None:
    text = _generated("spark1")
    assert text.startswith(
        "# /etc/sudoers.d/fleet-supervisor for spark1: generated by `fleet-supervisor sudoers`"
    )
    assert (
        "# rule eaddrinuse-29501: kill_processes\n"
        "# rule orphan-enginecore: kill_processes\n"
        "supervisor ALL = (root) NOPASSWD: /usr/local/libexec/fleet-supervisor/signal "
        "^(TERM|KILL) [1-9][0-9]* --unit\\=vllm-ds4-head\\.service --container\\=vllm_ds4$\n"
    ) in text
    assert "vllm-ds4-worker" not in text  # spark2's unit: not on spark1
    assert "/usr/bin/kill" not in text  # no signal to a pid the daemon picked
    assert "docker ^restart" not in text  # no shipped rule restarts a container


@pytest.fixture(scope="module")
def sudo_user(generated: Path) -> Iterator[str]:
    """A throwaway user holding exactly the generated sudoers rules (then removed, file and all).
    Where docker is /usr/local/bin/docker (no /usr/bin/docker), the rules name that path; the
    signal helper is the checkout's copy (the same text install.sh installs)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (useradd, sudoers.d)")
    name = f"fstest{os.getpid() % 100000}"
    dropin = Path(f"/etc/sudoers.d/zz-{name}")
    assert _run("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name).returncode == 0
    try:
        text = generated.read_text()
        text = text.replace("Defaults:supervisor", f"Defaults:{name}")
        text = text.replace("\nsupervisor ALL", f"\n{name} ALL")
        for installed, checkout in CHECKOUT.items():
            text = text.replace(installed, checkout)
        if not Path("/usr/bin/docker").exists() and Path("/usr/local/bin/docker").exists():
            text = text.replace("NOPASSWD: /usr/bin/docker ", "NOPASSWD: /usr/local/bin/docker ")
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


HELPER = "/usr/local/libexec/fleet-supervisor/signal"
DROPIN = "/usr/local/libexec/fleet-supervisor/dropin"
#: not installed on this machine: the checkout's copies stand at the paths sudo resolves
CHECKOUT = {
    HELPER: str(DEPLOY.parent / "supervisor/execute/signal.sh"),
    DROPIN: str(DEPLOY.parent / "supervisor/execute/dropin.sh"),
}
HEAD_DROPIN = "/etc/systemd/system/vllm-ds4-head.service.d/50-fleet-supervisor-execstart.conf"
MXFP4 = "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/quantization/mxfp4.py"
ALLOWED = [
    "systemctl stop vllm-ds4-head.service",
    "systemctl reset-failed vllm-ds4-worker.service",
    "systemctl start ollama.service",
    "systemctl daemon-reload",
    f"{DROPIN} {HEAD_DROPIN} -- /usr/bin/docker exec vllm_ds4 bash /workspace/vllm-head.sh",
    f"{HELPER} TERM 4242 --unit=vllm-ds4-head.service --container=vllm_ds4",
    f"{HELPER} KILL 4242 --unit=vllm-ds4-worker.service --container=vllm_ds4",
    "ss -Hltnp sport = :29501",
    "journalctl -u vllm-ds4-head.service -n 300 --no-pager -o cat",
    "journalctl -u vllm-ds4-head.service --since @1764000000 -n 300 --no-pager -o cat",
    "journalctl --follow --no-pager --quiet --output=json --output-fields=MESSAGE,MESSAGE_ID,"
    "UNIT,_SYSTEMD_UNIT,_PID,SYSLOG_IDENTIFIER,JOB_TYPE,JOB_RESULT,EXIT_CODE,EXIT_STATUS,"
    "UNIT_RESULT,N_RESTARTS --lines=0 --unit=ollama.service --unit=vllm-ds4-head.service",
    "rm -f -- /dev/shm/psm_1a2b /dev/shm/sem.mp-xyz",
    'sh -c echo~3~>~"$1" sh /proc/sys/vm/drop_caches',
    "docker exec vllm_ds4 test -e /workspace/vllm-head.sh",
    "docker exec vllm_ds4 head -c 65536 -- /workspace/vllm-worker.sh",
    f"docker exec vllm_ds4 sed -i.bak -e 12,15d -e 30,33d {MXFP4}",
    f"docker exec vllm_ds4 python3 -m py_compile {MXFP4}",
    "docker inspect --format {{.State.Status}} vllm_ds4",
]
REFUSED = [
    "/bin/sh",
    "sh -c id",
    "systemctl restart ssh.service",
    "systemctl stop vllm-ds4-head.service ssh.service",
    "systemctl edit vllm-ds4-head.service",
    "systemctl stop vllm-other.service",
    "rm -rf /",
    "rm -f -- /dev/shm/psm_1 /etc/passwd",
    # a signal to any pid the daemon picks: neither kill nor the helper without the host's units
    "kill -s KILL -- 4242",
    f"{HELPER} KILL 1",
    f"{HELPER} KILL 4242 --unit=ssh.service",
    f"{HELPER} KILL 4242 --unit=vllm-ds4-head.service --unit=ssh.service",
    # reading and editing inside a container: only the paths the rules name
    "docker exec vllm_ds4 cat /etc/shadow",
    "docker exec vllm_ds4 head -c 65536 -- /etc/shadow",
    "docker exec vllm_ds4 head -c 65536 -- /workspace/../etc/shadow",
    "docker exec vllm_ds4 sed -i.bak -e 1,2d /etc/shadow",
    "docker exec vllm_ds4 sh",
    "docker exec other test -e /workspace/vllm-head.sh",
    # containers: none restarted (no shipped rule does), least of all an unconfigured one
    "docker restart vllm_ds4",
    "docker restart unconfigured",
    "docker run --privileged debian",
    "journalctl -u ssh.service -n 300 --no-pager -o cat",
    "install -D -m 0644 /dev/stdin /etc/sudoers.d/x",
    # a unit's ExecStart: only the known-good command, written by the helper (never free text)
    f"install -D -m 0644 /dev/stdin {HEAD_DROPIN}",
    f"{DROPIN} {HEAD_DROPIN} -- /bin/sh -c id",
    f"{DROPIN} /etc/systemd/system/ssh.service.d/x.conf -- /usr/bin/docker exec vllm_ds4 bash "
    "/workspace/vllm-head.sh",
]


def _words(command: str) -> list[str]:
    """The command's words (`~` stands for a space inside one word); the helper as the spec
    finds it (see `sudo_user`)."""
    words = [word.replace("~", " ") for word in command.split()]
    return [CHECKOUT.get(word, word) for word in words]


@pytest.mark.parametrize("command", ALLOWED)
def test_sudo_allows_what_the_rules_run(sudo_user: str, command: str) -> None:
    result = _run("sudo", "-n", "-l", "-U", sudo_user, *_words(command))
    assert result.returncode == 0, (command, result.stderr)


@pytest.mark.parametrize("command", REFUSED)
def test_sudo_refuses_anything_else(sudo_user: str, command: str) -> None:
    result = _run("sudo", "-n", "-l", "-U", sudo_user, *_words(command))
    assert result.returncode == 1, command
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
    # the README's relative links (docs/NAME.md, docs/img/NAME.png) lead to shipped files
    readme = (docs / "README.md").read_text()
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (docs / link).is_file(), link


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


@needs_root
def test_install_sudoers_on_a_repaired_host_twice(tmp_path: Path, generated: Path) -> None:
    root = tmp_path / "spark1"
    root.mkdir()
    first = _run(DEPLOY / "install.sh", "--root", root, "--sudoers", generated)
    assert first.returncode == 0, first.stderr
    helper = root / "usr/local/libexec/fleet-supervisor/signal"
    installed = root / "etc/sudoers.d/fleet-supervisor"
    assert f"install.sh: wrote {installed}" in first.stdout
    assert helper.read_text() == (DEPLOY.parent / "supervisor/execute/signal.sh").read_text()
    dropin = root / "usr/local/libexec/fleet-supervisor/dropin"
    assert dropin.read_text() == (DEPLOY.parent / "supervisor/execute/dropin.sh").read_text()
    assert oct(helper.stat().st_mode & 0o777) == "0o755"
    assert oct(installed.stat().st_mode & 0o777) == "0o440"
    assert installed.read_text() == generated.read_text()
    assert sorted(p.name for p in root.iterdir()) == ["etc", "usr"]  # nothing else: no user
    second = _run(DEPLOY / "install.sh", "--root", root, "--sudoers", generated)
    assert second.stdout == "install.sh: no change\n"


def test_install_refuses_a_sudoers_file_visudo_refuses(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_text("fleet ALL = (root) NOPASSWD: sh\n")  # not an absolute path
    result = _run(DEPLOY / "install.sh", "--root", tmp_path / "r", "--sudoers", bad)
    assert result.returncode == 1
    assert result.stderr.startswith(f"install.sh: --sudoers {bad}: visudo refuses it: ")
    assert not (tmp_path / "r").exists()
