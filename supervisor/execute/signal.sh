#!/bin/sh
# fleet-supervisor-signal: the only way the supervisor's service account signals a process as
# root. Installed root-owned (0755) at /usr/local/libexec/fleet-supervisor/signal by
# deploy/install.sh; the generated sudoers lets the account run it with exactly the units and
# containers of this host pinned in its arguments:
#
#   signal TERM|KILL PID [--unit=UNIT]... [--container=NAME]...
#
# It sends the signal only to a process that is in the cgroup of one of the named systemd units
# or of one of the named docker containers, or whose command line is a vLLM engine or worker
# (`VLLM::...`, `vllm serve`, `python -m vllm.entrypoints...`) running as the user of one of
# the named units (User=, root when unset). Anything else is refused, exit 3, with the reason.
# Exit 2: usage. Otherwise kill's own exit status.
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
me=fleet-supervisor-signal
refuse() { echo "$me: refusing to signal pid $PID ($1)" >&2; exit 3; }
[ $# -ge 2 ] || { echo "usage: $me TERM|KILL PID [--unit=UNIT]... [--container=NAME]..." >&2; exit 2; }
SIG=$1
PID=$2
shift 2
case "$SIG" in TERM|KILL) ;; *) echo "$me: signal must be TERM or KILL, not $SIG" >&2; exit 2 ;; esac
case "$PID" in ''|*[!0-9]*|0*) echo "$me: not a pid: $PID" >&2; exit 2 ;; esac
[ "$PID" -gt 1 ] || refuse "pid 1 is never signalled"
[ -r "/proc/$PID/cgroup" ] || { echo "$me: no process $PID" >&2; exit 1; }
CGROUP=$(sed -n 's/^0:://p' "/proc/$PID/cgroup")
ARGS=$(tr '\0' ' ' <"/proc/$PID/cmdline" 2>/dev/null)
OWNER=$(stat -c %U "/proc/$PID")
USERS=""
for scope in "$@"; do
    case "$scope" in
        --unit=?*)
            unit=${scope#--unit=}
            group=$(systemctl show -p ControlGroup --value -- "$unit" 2>/dev/null)
            if [ -n "$group" ]; then
                case "$CGROUP" in "$group"|"$group"/*) exec kill -s "$SIG" "$PID" ;; esac
            fi
            user=$(systemctl show -p User --value -- "$unit" 2>/dev/null)
            USERS="$USERS ${user:-root}"
            ;;
        --container=?*)
            id=$(docker inspect -f '{{.Id}}' -- "${scope#--container=}" 2>/dev/null)
            if [ -n "$id" ]; then
                case "$CGROUP" in *"$id"*) exec kill -s "$SIG" "$PID" ;; esac
            fi
            ;;
        *) echo "$me: unknown scope $scope (--unit=UNIT or --container=NAME)" >&2; exit 2 ;;
    esac
done
case "$ARGS" in
    VLLM::*|*" -m vllm.entrypoints."*|"vllm serve "*|*"/vllm serve "*)
        for user in $USERS; do
            [ "$OWNER" = "$user" ] && exec kill -s "$SIG" "$PID"
        done
        refuse "a vLLM process of $OWNER, not of${USERS:- no unit's user}"
        ;;
esac
refuse "${ARGS:-no command line}: not in the cgroup of $* and not a vLLM engine or worker"
