"""The boot scripts of a simulated host: a real systemd as PID 1, fenced off from the machine.

`setsid -f unshare --pid --fork --mount-proc --mount --propagation private STAGE1` starts a
host. Stage 1 runs as PID 1 of the new PID namespace: it moves itself into its own cgroup v2
group (`/sys/fs/cgroup/unified/fleet-lab/NAME`, or the cgroup2 root's `fleet-lab/NAME`;
`fleet-lab-N/NAME` on net N, see `fleet_lab.network`) and re-execs itself in new cgroup, UTS
and IPC namespaces: systemd sees that group as its root, and
the hostname it sets (and any SysV IPC) stays the host's own, not the machine's. Stage 2 builds
the host's filesystem and execs systemd:

- `/` is an **overlay** whose lower layer is the machine's root and whose upper layer is a tmpfs:
  whatever the host's systemd or its units write (in `/tmp`, `/etc`, `/work`, anywhere) lands in
  memory and vanishes with the host. The machine's disk cannot be changed from inside.
- private `/run`, `/tmp`, `/dev` (tmpfs with only null, zero, full, random, urandom, tty bound in,
  its own devpts and `/dev/shm`), `/var/log/journal` and `/etc/systemd/system` (tmpfs holding only
  the lab's units and the masks); `/proc/sys` is read-only except for the lab's own
  `/proc/sys/vm/drop_caches` file; `/sys` is read-only; `/proc/meminfo` is the host folder's
  `meminfo` file (drills control the free memory the host reports).
- the Python the hosts run (the venv and the checkout the lab and the supervisor are installed
  from, see `python_roots`) is bound read-only at its own path when the private `/tmp` would hide
  it: a clone under `/tmp` works like one anywhere else.
- the host's folder is bound at `/var/lib/lab` (its sshd keys, containers, fault files), and
  its `bin/docker` (see `fleet_lab.containers`) becomes the host's `/usr/bin/docker`.
- the system bus (`dbus.socket`, and the `dbus.service` it starts) runs as on any host: an
  unprivileged user's `systemctl show` reaches systemd only through it.
- every host-touching unit is masked, `container=fleet-lab` is set (so units with
  `ConditionVirtualization=!container` skip), and systemd starts only `lab.target`.
"""

from __future__ import annotations

import importlib.util
import shlex
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from fleet_lab import network
from supervisor.execute import helpers

#: Where the host's own folder appears inside the host.
INSIDE = "/var/lib/lab"

#: Units that would touch the machine (its disk, kernel, consoles, logins) and are masked.
MASKED: tuple[str, ...] = (
    "systemd-tmpfiles-setup.service",
    "systemd-tmpfiles-setup-dev.service",
    "systemd-tmpfiles-clean.service",
    "systemd-tmpfiles-clean.timer",
    "systemd-sysctl.service",
    "systemd-sysusers.service",
    "systemd-modules-load.service",
    "systemd-binfmt.service",
    "proc-sys-fs-binfmt_misc.automount",
    "proc-sys-fs-binfmt_misc.mount",
    "systemd-random-seed.service",
    "systemd-machine-id-commit.service",
    "systemd-firstboot.service",
    "systemd-repart.service",
    "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service",
    "systemd-journal-flush.service",
    "systemd-remount-fs.service",
    "systemd-pcrphase.service",
    "systemd-pcrphase-sysinit.service",
    "systemd-pcrphase-initrd.service",
    "kmod-static-nodes.service",
    "ldconfig.service",
    "systemd-hwdb-update.service",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-udev-settle.service",
    "systemd-journald-audit.socket",
    "systemd-journald-dev-log.socket",
    "systemd-ask-password-console.path",
    "systemd-ask-password-wall.path",
    "systemd-user-sessions.service",
    "sys-fs-fuse-connections.mount",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "dev-hugepages.mount",
    "dev-mqueue.mount",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "man-db.timer",
    "logrotate.timer",
    "fstrim.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "ssh.service",
    "ssh.socket",
    "getty.target",
    "getty-static.service",
    "console-getty.service",
    "systemd-logind.service",
    "cryptsetup.target",
    "veritysetup.target",
    "integritysetup.target",
    "remote-cryptsetup.target",
    "remote-veritysetup.target",
    "packagekit-offline-update.service",
    "postgresql.service",
)

_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

STAGE1 = """\
#!/bin/bash
# fleet lab host {name}, stage 1: PID 1 of its own PID and mount namespace.
set -euo pipefail
mount --make-rprivate /
if [ -d /sys/fs/cgroup/unified ]; then CG=/sys/fs/cgroup/unified; else CG=/sys/fs/cgroup; fi
mkdir -p "$CG/{cgroup}/{name}"
echo $$ > "$CG/{cgroup}/{name}/cgroup.procs"
exec unshare --cgroup --uts --ipc {folder}/stage2.sh
"""

STAGE2 = """\
#!/bin/bash
# fleet lab host {name}, stage 2: build a fenced-off root, then exec systemd.
set -euo pipefail
S={folder}/stage
mkdir -p "$S"
mount -t tmpfs -o mode=755 fleet-lab-stage "$S"
mkdir "$S/upper" "$S/work" "$S/root"
mount -t overlay fleet-lab-root -o "lowerdir=/,upperdir=$S/upper,workdir=$S/work" "$S/root"
R=$S/root
mount --rbind /proc "$R/proc"
mount --bind "$R/proc/sys" "$R/proc/sys"
mount --bind {folder}/drop_caches "$R/proc/sys/vm/drop_caches"
mount -o remount,bind,ro "$R/proc/sys"
mount --bind {folder}/meminfo "$R/proc/meminfo"
mount -t tmpfs -o mode=755,nosuid fleet-lab-dev "$R/dev"
for d in {devices}; do touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
mkdir "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
ln -s /proc/self/fd "$R/dev/fd"
mount -t tmpfs -o mode=1777 fleet-lab-shm "$R/dev/shm"
mount --rbind /sys "$R/sys"
umount -R "$R/sys/fs/cgroup"
mount -o remount,bind,ro "$R/sys"
mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=755 fleet-lab-run "$R/run"
mount -t tmpfs -o mode=1777 fleet-lab-tmp "$R/tmp"
{shared}mkdir -p "$R/var/log/journal" "$R{inside}"
mount -t tmpfs fleet-lab-journal "$R/var/log/journal"
mount --bind {folder} "$R{inside}"
mount -t tmpfs -o mode=755 fleet-lab-units "$R/etc/systemd/system"
cp -a {folder}/units/. "$R/etc/systemd/system/"
echo {name} > "$R/etc/hostname"
echo "{address} {name}" >> "$R/etc/hosts"
cp {folder}/bin/docker "$R/usr/bin/docker"
install -D -m 0755 {folder}/bin/fleet-supervisor-signal "$R{signal}"
install -D -m 0755 {folder}/bin/fleet-supervisor-dropin "$R{dropin}"
{account}mkdir -p "$R/oldroot"
cd "$R"
pivot_root . oldroot
umount -l /oldroot
rmdir /oldroot
export container=fleet-lab
exec /lib/systemd/systemd --system --unit=lab.target
"""


#: The host's own, empty folders that would hide what the machine has at the same path.
PRIVATE = ("/tmp",)  # noqa: S108 (a path compared, never written)

#: The packages whose code runs inside the hosts (the launch scripts, the launchctl stand-in).
_PACKAGES = ("fleet_lab", "supervisor")


def python_roots() -> list[str]:
    """The folders the hosts need to run this Python and these packages (the venv, the folders
    the packages are installed from), as real paths, the ones inside another left out."""
    roots = {str(Path(sys.prefix).resolve())}
    for package in _PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin is not None:
            roots.add(str(Path(spec.origin).resolve().parent.parent))
    return sorted(r for r in roots if not any(r.startswith(f"{o}/") for o in roots if o != r))


def hidden(paths: Iterable[str]) -> list[str]:
    """Those of `paths` that a host's private folders (`PRIVATE`) would hide."""
    return [p for p in paths if any(p == d or p.startswith(f"{d}/") for d in PRIVATE)]


def _binds(paths: Sequence[str]) -> str:
    lines = []
    for path in paths:
        inside = f'"$R"{shlex.quote(path)}'
        lines += [
            f"mkdir -p {inside}",
            f"mount --bind {shlex.quote(path)} {inside}",
            f"mount -o remount,bind,ro {inside}",
        ]
    return "".join(f"{line}\n" for line in lines)


def stage1(name: str, folder: str) -> str:
    """Stage 1 of host `name` whose files live in `folder` (an absolute path, no spaces)."""
    return STAGE1.format(name=name, folder=folder, cgroup=network.cgroup_name())


def stage2(
    name: str, folder: str, shared: Sequence[str] = (), account: str = "", address: str = ""
) -> str:
    """Stage 2 of host `name`: the fenced-off root and the exec of systemd; `shared` are the
    machine's folders bound read-only at their own path over the host's private ones;
    `account`, the lines that make the host's login account (`fleet_lab.account`); `address`,
    where its own name resolves in its `/etc/hosts` (as a real host's does, without DNS: sudo
    looks it up, and a lab in a network namespace of its own has no DNS to ask)."""
    return STAGE2.format(
        name=name,
        address=address or "127.0.1.1",
        folder=folder,
        inside=INSIDE,
        devices=" ".join(_DEVICES),
        shared=_binds(shared),
        signal=helpers.SIGNAL,
        dropin=helpers.DROPIN,
        account=account,
    )


def traversable(paths: Iterable[str]) -> str:
    """Stage 2's lines that let any user reach `paths` in the new root `$R`: `o+x` on each
    folder above them that lacks it (this machine's Python may live under a 0700 /root; the
    mode changes in the host's overlay only)."""
    lines: list[str] = []
    for path in paths:
        for folder in reversed(Path(path).parents):
            mode = folder.stat().st_mode if folder.exists() else 0o755
            line = f'chmod o+x "$R"{shlex.quote(str(folder))}'
            if not mode & stat.S_IXOTH and line not in lines:
                lines.append(line)
    return "".join(f"{line}\n" for line in lines)


def interpreter() -> list[str]:
    """This Python's real binary and the roots `python_roots` names: what a lab host's own
    users must reach to run the lab's programs (the Mac's jobs)."""
    return [str(Path(sys.executable).resolve()), *python_roots()]


def lab_target(wants: Iterable[str]) -> str:
    """`lab.target`: journald, the system bus (an unprivileged `systemctl show` asks systemd
    through it, as on every real host; root's `systemctl` uses systemd's private socket),
    the host's sshd and its model units, nothing else."""
    units = " ".join(["systemd-journald.service", "dbus.socket", *wants])
    return f"[Unit]\nDescription=fleet lab host\nWants={units}\n"
