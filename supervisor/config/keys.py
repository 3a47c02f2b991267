"""The endpoints' API keys: where each comes from (`api_key_file`, `api_key_env`), checked when
the config loads, read when the daemon starts or reloads and when `probe` or `doctor` runs.

Loading checks what every command can see without reading a secret: the file is there and
nobody but its owner and group may read it (the mode `chmod o-rwx` gives). Reading is left to
the commands that send the key, so that a person's `status` works where only the daemon's user
may read the file. A key lives on its endpoint (`Endpoint.with_key`) and never in a dump, a repr,
a log line, the store or an error text: what a person reads names the key's source instead.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping
from pathlib import Path

from supervisor.config.errors import ConfigError, ConfigIssue
from supervisor.config.models import FleetConfig
from supervisor.config.sections import StoreConfig
from supervisor.config.supervised import Endpoint


def key_problems(endpoint: Endpoint) -> list[tuple[str, str]]:
    """(field, what is wrong) for the endpoint's key source as the config file gives it."""
    found: list[tuple[str, str]] = []
    if endpoint.api_key_file is not None and endpoint.api_key_env is not None:
        found.append(("api_key_env", "give api_key_file or api_key_env, not both"))
    elif problem := key_file_problem(endpoint):
        found.append(("api_key_file", problem))
    if endpoint.keyed and any(name.lower() == "authorization" for name in endpoint.headers):
        found.append(("headers", "an Authorization header and an API key: give one"))
    return found


def key_file_problem(endpoint: Endpoint) -> str | None:
    """What is wrong with the endpoint's key file as anyone may see it (None: nothing)."""
    path = endpoint.api_key_file
    if path is None:
        return None
    return secret_file_problem(path)


def peer_problems(store: StoreConfig, base_dir: Path) -> list[tuple[str, str]]:
    """(field, what is wrong) for the peers' question (`store.peers`): it needs PostgreSQL and
    the shared token's file, which nobody but its owner and group may read."""
    if not store.peers and store.peer_token_file is None:
        return []
    if store.url is None:
        return [("peers", "the peers' question needs a shared PostgreSQL store (store.url)")]
    if store.peer_token_file is None:
        return [("peer_token_file", "store.peers needs the shared token's file")]
    path = store.peer_token_file.expanduser()
    problem = secret_file_problem(path if path.is_absolute() else base_dir / path)
    return [("peer_token_file", problem)] if problem else []


def secret_file_problem(path: Path) -> str | None:
    """What is wrong with a file holding a secret, as anyone may see it (None: nothing)."""
    try:
        status = path.stat()
    except OSError as err:
        return f"cannot read {path}: {err.strerror or type(err).__name__}"
    if not stat.S_ISREG(status.st_mode):
        return f"{path} is not a file"
    if status.st_mode & 0o007:
        mode = stat.S_IMODE(status.st_mode)
        return f"{path} may be read by others (mode {mode:04o}): chmod o-rwx {path}"
    return None


class KeyMissingError(Exception):
    """The key cannot be read: one sentence naming its source, never its value."""


def read_key(endpoint: Endpoint, environ: Mapping[str, str]) -> str:
    """The endpoint's key from its file or the environment; raises `KeyMissingError`."""
    if endpoint.api_key_file is not None:
        path = endpoint.api_key_file
        if problem := key_file_problem(endpoint):
            raise KeyMissingError(problem)
        try:
            key = path.read_text(encoding="utf-8").strip()
        except OSError as err:
            raise KeyMissingError(
                f"cannot read {path}: {err.strerror or type(err).__name__}"
            ) from None
        except UnicodeDecodeError:
            raise KeyMissingError(f"{path} is not UTF-8 text") from None
        if not key:
            raise KeyMissingError(f"{path} is empty")
        return key
    name = endpoint.api_key_env or ""
    key = environ.get(name, "").strip()
    if not key:
        raise KeyMissingError(f"${name} is not set in the daemon's environment")
    return key


def read_keys(
    config: FleetConfig, environ: Mapping[str, str]
) -> tuple[FleetConfig, dict[str, str]]:
    """`config` with each keyed endpoint whose key could be read holding it, and why each other
    one's could not (by endpoint name)."""
    problems: dict[str, str] = {}
    endpoints: dict[str, Endpoint] = {}
    for name, endpoint in config.endpoints.items():
        endpoints[name] = endpoint
        if endpoint.keyed:
            try:
                endpoints[name] = endpoint.with_key(read_key(endpoint, environ))
            except KeyMissingError as err:
                problems[name] = str(err)
    return config.model_copy(update={"endpoints": endpoints}), problems


def with_keys(config: FleetConfig, environ: Mapping[str, str]) -> FleetConfig:
    """`config` with every keyed endpoint holding its key; raises `ConfigError` naming the file,
    the line and the field of each key that cannot be read."""
    keyed, problems = read_keys(config, environ)
    if problems:
        raise ConfigError(
            [
                ConfigIssue(
                    str(config.source),
                    config.key_lines.get(name),
                    f"endpoints.{name}.{key_field(config.endpoints[name])}",
                    problem,
                )
                for name, problem in problems.items()
            ]
        )
    return keyed


def key_field(endpoint: Endpoint) -> str:
    """The field the endpoint's key comes from."""
    return "api_key_file" if endpoint.api_key_file is not None else "api_key_env"


def scrub(text: str, endpoint: Endpoint) -> str:
    """`text` without the endpoint's key (a server that echoes what it was sent)."""
    key = endpoint.secret()
    return text.replace(key, f"<key from {endpoint.key_source}>") if key else text
