#!/bin/sh
# fleet-supervisor-dropin: the only way the supervisor's service account changes a unit's
# ExecStart as root. Installed root-owned (0755) at /usr/local/libexec/fleet-supervisor/dropin
# by deploy/install.sh; the generated sudoers lets the account run it with exactly the drop-in
# path and the known-good command of each configured unit pinned in its arguments:
#
#   dropin /etc/systemd/system/UNIT.d/NAME.conf -- COMMAND [ARG]...
#
# It writes `[Service]`, `ExecStart=` (clearing the unit's own) and `ExecStart=COMMAND ARG...`
# into that file (mode 0644), nothing else: the account never chooses what runs as root.
# Exit 2: usage.
set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
me=fleet-supervisor-dropin
usage() { echo "$me: $1 (usage: $me /PATH/UNIT.d/NAME.conf -- COMMAND [ARG]...)" >&2; exit 2; }
[ $# -ge 3 ] || usage "too few arguments"
FILE=$1
[ "$2" = "--" ] || usage "expected -- after the path"
shift 2
case "$FILE" in
    /*.d/*.conf) ;;
    *) usage "not a drop-in path: $FILE" ;;
esac
case "$FILE" in *..*|*"
"*) usage "not a drop-in path: $FILE" ;; esac
for word in "$@"; do
    case "$word" in *"
"*) usage "a line break in the command" ;; esac
done
mkdir -p -- "${FILE%/*}"
umask 022
printf '[Service]\nExecStart=\nExecStart=%s\n' "$*" >"$FILE.tmp"
mv -f -- "$FILE.tmp" "$FILE"
