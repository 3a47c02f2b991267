"""The unprivileged account the daemon logs in as on a lab host, and the sudoers file it gets.

A lab made with `user="fleet"` (`fleet_lab.fleet.create`'s default) has every host make that
account at boot, in the host's own overlay (`useradd --root`, uid `UID`, a shell, no password
but not locked: sshd refuses a locked account even with a key). Its key is the lab's client key
(every host's sshd reads the lab's one `authorized_keys`). It has no sudo right of its own: a
drill installs the sudoers file `fleet-supervisor sudoers --host H` generates for its config
(`install_sudoers`), checked by `visudo -c` first, at `/etc/sudoers.d/fleet-supervisor`, as
`deploy/install.sh --sudoers FILE` does on a real host. The root-owned helpers it names
(`supervisor.execute.helpers`) are installed by every host's boot (`fleet_lab.boot`).

On the Mac stand-in the account is the user whose `gui/UID` domain holds the job: it needs no
sudo there (launchd jobs in the user's own domain), and its home is a Mac's, `/Users/NAME`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

#: The account's name and uid on every host: macOS gives the first user 501 (`gui/501`).
USER = "fleet"
UID = 501
#: Where the installed sudoers file goes (as `deploy/install.sh --sudoers FILE` puts it).
SUDOERS = "/etc/sudoers.d/fleet-supervisor"


@dataclass(frozen=True)
class Account:
    name: str
    home: str
    uid: int = UID

    @classmethod
    def linux(cls, name: str = USER) -> Account:
        return cls(name=name, home=f"/home/{name}")

    @classmethod
    def mac(cls, name: str = USER) -> Account:
        return cls(name=name, home=f"/Users/{name}")

    def boot_lines(self) -> str:
        """Stage 2's lines that make the account in the new root `$R` (before pivot_root)."""
        home = shlex.quote(self.home)
        lines = [
            f'mkdir -p "$R"{shlex.quote(self.home.rsplit("/", 1)[0] or "/")}',
            f'useradd --root "$R" --uid {self.uid} --user-group --create-home --home-dir {home} '
            f"--shell /bin/bash --password '*' {shlex.quote(self.name)}",
        ]
        return "".join(f"{line}\n" for line in lines)


def install_script(staged: str) -> str:
    """The shell line run inside a host (as root) that installs the sudoers file at `staged`
    (a path inside the host) once `visudo -c` accepts it; exit 1 with visudo's words if not."""
    return (
        f"visudo -c -q -f {shlex.quote(staged)} && "
        f"install -m 0440 -o root -g root {shlex.quote(staged)} {SUDOERS}"
    )
