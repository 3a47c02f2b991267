#!/bin/sh
# Install fleet-supervisor on this box (forge), idempotently: a second run reports "no change".
#
#   sudo deploy/install.sh                 # the real install, then enable --now
#   deploy/install.sh --root /tmp/r        # into a staging root (DESTDIR style): files, user
#                                          # (when ROOT/etc/passwd exists), enable (symlink only)
#   --no-venv                              # skip the venv (/opt/fleet-supervisor/venv)
#   --uv                                   # make the venv and install into it with uv (on
#                                          # PATH; its index: UV_INDEX_URL, default PyPI):
#                                          # seconds where pip takes half a minute; the venv
#                                          # still has pip, and its bytecode is compiled
#   PYTHON=/usr/bin/python3                # the interpreter the venv is made from
#   --postgresql postgresql+asyncpg://fleet@db/fleet
#                                          # the store on PostgreSQL (shared by a second
#                                          # instance): the new fleet.yaml gets store.url and
#                                          # store.password_file /etc/fleet-supervisor/pg.pass
#                                          # (0640, made empty: write the password there, or
#                                          # PGPASSWORD= in env). The role and the database are
#                                          # made by the database's admin (README: PostgreSQL).
#   --sudoers FILE                         # on a host the supervisor repairs (a Spark): only
#                                          # install FILE (from `fleet-supervisor sudoers
#                                          # --host H`, checked with visudo -c) as
#                                          # /etc/sudoers.d/fleet-supervisor (0440) and the
#                                          # root-owned helpers as
#                                          # /usr/local/libexec/fleet-supervisor/{signal,dropin};
#                                          # nothing else
#
# It makes: the system user fleet-supervisor; the venv under /opt/fleet-supervisor; the shipped
# rules and runbooks in /opt/fleet-supervisor/{playbooks,runbooks} (kept equal to this checkout);
# the config dir /etc/fleet-supervisor (0750 root:fleet-supervisor; fleet.yaml, from the example,
# and env 0640, never overwritten); the state dir /var/lib/fleet-supervisor (0750
# fleet-supervisor); the unit in /etc/systemd/system; then enables and starts it.
set -eu

ROOT=""
VENV=1
UV=0
PG_URL=""
SUDOERS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --root|--prefix) ROOT="${2:?--root needs a directory}"; shift 2 ;;
        --root=*|--prefix=*) ROOT="${1#*=}"; shift ;;
        --no-venv) VENV=0; shift ;;
        --uv) UV=1; shift ;;
        --postgresql) PG_URL="${2:?--postgresql needs a URL like postgresql+asyncpg://fleet@db/fleet}"; shift 2 ;;
        --postgresql=*) PG_URL="${1#*=}"; shift ;;
        --sudoers) SUDOERS="${2:?--sudoers needs a file (fleet-supervisor sudoers --host H)}"; shift 2 ;;
        --sudoers=*) SUDOERS="${1#*=}"; shift ;;
        -h|--help) sed -n '/^set -eu/q; 2,$p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
ROOT="${ROOT:-${DESTDIR:-}}"
ROOT="${ROOT%/}"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
USER_NAME=fleet-supervisor
UNIT=fleet-supervisor.service
OPT=/opt/fleet-supervisor
PYTHON="${PYTHON:-python3}"
CHANGES=0

say() { echo "install.sh: $*"; }
fail() { echo "install.sh: $*" >&2; exit 1; }
changed() { CHANGES=$((CHANGES + 1)); say "$*"; }

ensure_dir() {  # PATH MODE UID GID
    if [ ! -d "$1" ]; then
        mkdir -p "$1"; changed "created $1"
    fi
    if [ "$(stat -c '%a %u %g' "$1")" != "$2 $3 $4" ]; then
        chmod "$2" "$1"; chown "$3:$4" "$1"; changed "set $1 to mode $2, owner $3:$4"
    fi
}
ensure_file() {  # SOURCE DEST MODE UID GID REPLACE(1: keep it equal to SOURCE, 0: create only)
    if [ ! -e "$2" ] || { [ "$6" = 1 ] && ! cmp -s "$1" "$2"; }; then
        cp "$1" "$2"; changed "wrote $2"
    fi
    if [ "$(stat -c '%a %u %g' "$2")" != "$3 $4 $5" ]; then
        chmod "$3" "$2"; chown "$4:$5" "$2"; changed "set $2 to mode $3, owner $4:$5"
    fi
}

# --- a repaired host: the sudoers file and the signal helper only ------------------------
if [ -n "$SUDOERS" ]; then
    [ -f "$SUDOERS" ] || fail "--sudoers $SUDOERS: no such file"
    visudo -c -q -f "$SUDOERS" >/dev/null 2>&1 \
        || fail "--sudoers $SUDOERS: visudo refuses it: $(visudo -c -f "$SUDOERS" 2>&1 | head -n 1)"
    ensure_dir "$ROOT/usr/local/libexec/fleet-supervisor" 755 0 0
    for helper in signal dropin; do
        ensure_file "$SRC/supervisor/execute/$helper.sh" "$ROOT/usr/local/libexec/fleet-supervisor/$helper" 755 0 0 1
    done
    if [ ! -d "$ROOT/etc/sudoers.d" ]; then  # the system's own folder: never re-moded
        mkdir -p -m 755 "$ROOT/etc/sudoers.d"; changed "created $ROOT/etc/sudoers.d"
    fi
    ensure_file "$SUDOERS" "$ROOT/etc/sudoers.d/fleet-supervisor" 440 0 0 1
    if [ "$CHANGES" = 0 ]; then say "no change"; else say "$CHANGES changes"; fi
    exit 0
fi

# --- checks, before anything changes ----------------------------------------------------
for part in playbooks runbooks; do
    [ -d "$SRC/$part" ] || fail "$SRC/$part is missing: run install.sh from a full checkout"
done
# the installed fleet.yaml points at the installed rules (the example's ../playbooks is the
# checkout's folder, relative to deploy/)
EXAMPLE="$(mktemp)"
ENV_TEMPLATE="$(mktemp)"
CONTROL_TOKEN="$(mktemp)"
BUILD_DIR=""
trap 'rm -f "$EXAMPLE" "$ENV_TEMPLATE" "$CONTROL_TOKEN"; [ -z "$BUILD_DIR" ] || rm -rf "$BUILD_DIR"' EXIT
sed "s|^  path: \.\./playbooks\$|  path: $OPT/playbooks|" "$SRC/deploy/fleet.example.yaml" >"$EXAMPLE"
grep -q "^  path: $OPT/playbooks\$" "$EXAMPLE" \
    || fail "deploy/fleet.example.yaml has no playbook line '  path: ../playbooks' to point at $OPT/playbooks"
if [ -n "$PG_URL" ]; then
    case "$PG_URL" in
        postgresql+asyncpg://*:*@*) fail "--postgresql $PG_URL holds a password: put it in /etc/fleet-supervisor/pg.pass instead" ;;
        postgresql+asyncpg://*/?*) ;;
        *) fail "--postgresql expects postgresql+asyncpg://USER@HOST[:PORT]/DB, got $PG_URL" ;;
    esac
    awk -v url="$PG_URL" '
        /^  path: \/var\/lib\/fleet-supervisor\/supervisor.db$/ {
            print "  url: " url; print "  password_file: /etc/fleet-supervisor/pg.pass"; next }
        { print }' "$EXAMPLE" >"$EXAMPLE.pg" && mv "$EXAMPLE.pg" "$EXAMPLE"
    grep -q "^  url: " "$EXAMPLE" || fail "deploy/fleet.example.yaml has no store path line to replace"
fi
if [ "$UV" = 1 ] && [ "$VENV" = 1 ]; then
    command -v uv >/dev/null || fail "--uv: no uv on PATH (install it, or leave out --uv: pip does the same, slower)"
fi
if [ -z "$ROOT" ] && [ "$VENV" = 1 ]; then
    # the unit's ProtectHome=yes hides /home, /root and /run/user from the service: a venv made
    # from an interpreter there (pyenv, a user's build) cannot start
    command -v "$PYTHON" >/dev/null || fail "no $PYTHON on PATH: set PYTHON=/path/to/python3.11"
    REAL_PYTHON="$("$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))')"
    case "$REAL_PYTHON" in
        /home/*|/root/*|/run/user/*)
            fail "$PYTHON is $REAL_PYTHON, which the unit's ProtectHome=yes hides from the service: run with PYTHON=/usr/bin/python3 (or sudo, whose PATH has it)" ;;
    esac
fi

# --- the user ---------------------------------------------------------------------------
if [ -z "$ROOT" ]; then
    if ! getent passwd "$USER_NAME" >/dev/null; then
        useradd --system --user-group --home-dir /var/lib/fleet-supervisor \
            --shell /usr/sbin/nologin "$USER_NAME"
        changed "created user $USER_NAME"
    fi
elif [ -f "$ROOT/etc/passwd" ]; then
    if ! grep -q "^$USER_NAME:" "$ROOT/etc/passwd"; then
        useradd --prefix "$ROOT" --system --user-group --home-dir /var/lib/fleet-supervisor \
            --shell /usr/sbin/nologin "$USER_NAME"
        changed "created user $USER_NAME in $ROOT"
    fi
else
    say "user: skipped ($ROOT/etc/passwd does not exist)"
fi
ids() {  # "UID GID" of the user, from the target root's passwd (numeric: works in a staging root)
    awk -F: -v u="$USER_NAME" '$1 == u { print $3 " " $4 }' "$ROOT/etc/passwd" 2>/dev/null || true
}
set -- $(ids)
OWNER_UID="${1:-0}"
OWNER_GID="${2:-0}"

# --- directories and files ---------------------------------------------------------------
ensure_dir "$ROOT/etc/fleet-supervisor" 750 0 "$OWNER_GID"
ensure_dir "$ROOT/var/lib/fleet-supervisor" 750 "$OWNER_UID" "$OWNER_GID"
ensure_dir "$ROOT/opt/fleet-supervisor" 755 0 0
ensure_file "$EXAMPLE" "$ROOT/etc/fleet-supervisor/fleet.yaml" 640 0 "$OWNER_GID" 0
printf '# secrets for fleet-supervisor (read by systemd: EnvironmentFile=)\n# FLEET_SUPERVISOR_TELEGRAM_TOKEN=\n' >"$ENV_TEMPLATE"
ensure_file "$ENV_TEMPLATE" "$ROOT/etc/fleet-supervisor/env" 640 0 "$OWNER_GID" 0
# the control API's token (http.control_token_file): read by the service and by the operators
# in its group (the CLI sends it); made once, kept after (rewrite it to rotate)
head -c 32 /dev/urandom | base64 >"$CONTROL_TOKEN"
ensure_file "$CONTROL_TOKEN" "$ROOT/etc/fleet-supervisor/control.token" 640 0 "$OWNER_GID" 0
if [ -n "$PG_URL" ]; then
    ensure_file /dev/null "$ROOT/etc/fleet-supervisor/pg.pass" 640 0 "$OWNER_GID" 0
fi
ensure_dir "$ROOT/opt/fleet-supervisor/docs" 755 0 0
ensure_file "$SRC/README.md" "$ROOT/opt/fleet-supervisor/docs/README.md" 644 0 0 1
ensure_file "$EXAMPLE" "$ROOT/opt/fleet-supervisor/docs/fleet.example.yaml" 644 0 0 1
ensure_file "$SRC/deploy/fleet.second.example.yaml" "$ROOT/opt/fleet-supervisor/docs/fleet.second.example.yaml" 644 0 0 1

# --- the shipped rules and runbooks: equal to the checkout's (a rule deleted there goes) -------
sync_dir() {  # SOURCE_DIR DEST_DIR SUFFIX
    ensure_dir "$2" 755 0 0
    for file in "$1"/*"$3"; do
        if [ -f "$file" ]; then ensure_file "$file" "$2/${file##*/}" 644 0 0 1; fi
    done
    for file in "$2"/*"$3"; do
        if [ -f "$file" ] && [ ! -f "$1/${file##*/}" ]; then
            rm -f "$file"; changed "removed $file (no longer shipped)"
        fi
    done
}
sync_dir "$SRC/playbooks" "$ROOT$OPT/playbooks" .yaml
sync_dir "$SRC/runbooks" "$ROOT$OPT/runbooks" .md
# the reference beside the README, where its relative links lead (docs/NAME.md, docs/img/NAME.png)
sync_dir "$SRC/docs" "$ROOT$OPT/docs/docs" .md
sync_dir "$SRC/docs/img" "$ROOT$OPT/docs/docs/img" .png

# --- the venv ----------------------------------------------------------------------------
if [ "$VENV" = 1 ]; then
    VENV_DIR="$ROOT/opt/fleet-supervisor/venv"
    STAMP="$VENV_DIR/.installed-from"
    WANT="$(cd "$SRC" && cat pyproject.toml $(find supervisor -name '*.py' | LC_ALL=C sort) | sha256sum | cut -d' ' -f1)"
    if [ ! -x "$VENV_DIR/bin/python" ]; then
        if [ "$UV" = 1 ]; then
            uv venv --quiet --seed --allow-existing --python "$PYTHON" "$VENV_DIR"
        else
            "$PYTHON" -m venv "$VENV_DIR"
        fi
        changed "created the venv $VENV_DIR"
    fi
    if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
        # built from a copy: pip builds in the source tree, and a build/ left in the checkout
        # would ship modules deleted since (and dirty the checkout)
        BUILD_DIR="$(mktemp -d)"
        cp "$SRC/pyproject.toml" "$SRC/README.md" "$BUILD_DIR/"
        cp -R "$SRC/supervisor" "$BUILD_DIR/supervisor"
        find "$BUILD_DIR/supervisor" -name __pycache__ -prune -exec rm -rf {} +
        if [ "$UV" = 1 ]; then
            uv pip install --quiet --python "$VENV_DIR/bin/python" --compile-bytecode \
                --upgrade "$BUILD_DIR"
        else
            "$VENV_DIR/bin/pip" install --quiet --upgrade "$BUILD_DIR"
        fi
        rm -rf "$BUILD_DIR"
        echo "$WANT" >"$STAMP"
        changed "installed fleet-supervisor from $SRC into $VENV_DIR"
    fi
else
    say "venv: skipped (--no-venv)"
fi

# --- the unit ----------------------------------------------------------------------------
ensure_dir "$ROOT/etc/systemd/system" 755 0 0
UNIT_CHANGED=$CHANGES
ensure_file "$SRC/deploy/$UNIT" "$ROOT/etc/systemd/system/$UNIT" 644 0 0 1
if [ -z "$ROOT" ]; then
    if [ "$CHANGES" != "$UNIT_CHANGED" ]; then
        systemctl daemon-reload; say "systemctl daemon-reload"
    fi
    if ! systemctl is-enabled --quiet "$UNIT"; then
        systemctl enable --quiet "$UNIT"; changed "enabled $UNIT"
    fi
    if ! systemctl is-active --quiet "$UNIT"; then
        systemctl start "$UNIT"; changed "started $UNIT"
    elif [ "$CHANGES" != 0 ]; then
        systemctl restart "$UNIT"; say "restarted $UNIT (something changed)"
    fi
else
    if ! systemctl --root="$ROOT" is-enabled --quiet "$UNIT" 2>/dev/null; then
        systemctl --root="$ROOT" enable --quiet "$UNIT"; changed "enabled $UNIT in $ROOT"
    fi
fi

if [ "$CHANGES" = 0 ]; then
    say "no change"
else
    say "$CHANGES changes"
fi
