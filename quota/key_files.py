"""Keys kept in files under `var/`: the admin key and one key per configured team.

    var/admin-api-key          the admin key (or SWITCHYARD_ADMIN_KEY in the environment, which wins)
    var/keys/<team>-api-key    a key of each team in switchyard.yaml, which `make up` writes;
                               the first team's is the default of the CLI and the printed curl

Each is written once with mode 0600 and reused while it still works. The gateway reads
only the admin key's hash; the plaintext never leaves these files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from config.environment import SwitchyardEnvironment, variable_name
from quota.keys import SyncKeyStore, generate_key, hash_key

ADMIN_KEY_ENV = variable_name(SwitchyardEnvironment, "admin_key")
ADMIN_KEY_FILE = "admin-api-key"
TEAM_KEYS_DIR = "keys"


def admin_key_path(var_path: Path) -> Path:
    return var_path / ADMIN_KEY_FILE


def team_key_path(var_path: Path, team_id: str) -> Path:
    return var_path / TEAM_KEYS_DIR / f"{team_id}-api-key"


def default_key_path(var_path: Path, team_ids: Iterable[str]) -> Path | None:
    """The first configured team's key file: what the CLI uses when no key is given. None
    when no team is configured."""
    first = next(iter(team_ids), None)
    return None if first is None else team_key_path(var_path, first)


def read_key_file(path: Path) -> str | None:
    """The key in `path` (surrounding whitespace dropped), or None if it is missing or empty."""
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        return None
    return key or None


def write_key_file(path: Path, key: str) -> None:
    """Write `key` readable by its owner only (0600), replacing the file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode is masked by the umask; fchmod is not
        os.write(fd, (key + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def ensure_admin_key(var_path: Path) -> Path:
    """Create `var/admin-api-key` if it is missing; returns its path."""
    path = admin_key_path(var_path)
    if read_key_file(path) is None:
        write_key_file(path, generate_key())
    return path


def find_admin_key(var_path: Path, from_environment: str | None) -> str | None:
    """The admin key: `from_environment` (SWITCHYARD_ADMIN_KEY) when given, which wins, else
    `var/admin-api-key`'s; None when neither exists."""
    return from_environment or read_key_file(admin_key_path(var_path))


def load_admin_key_hash(var_path: Path, environment: SwitchyardEnvironment | None = None) -> str | None:
    """The admin key's hash (`find_admin_key`); None when there is none (then no key is an admin).
    `environment`: None reads this process's."""
    key = find_admin_key(var_path, (environment if environment is not None else SwitchyardEnvironment()).admin_key)
    return hash_key(key) if key else None


def ensure_team_key(store: SyncKeyStore, path: Path, team_id: str) -> Path:
    """Make sure `path` holds a key of `team_id` that resolves: reuse it if it still does
    (a fresh Redis, or a revoked key, gets a new one). Returns `path`."""
    existing = read_key_file(path)
    if existing is not None and store.resolve(existing) == team_id:
        return path

    write_key_file(path, store.create(team_id))
    return path


def ensure_team_keys(store: SyncKeyStore, var_path: Path, team_ids: Iterable[str]) -> dict[str, Path]:
    """A working key file for every team in `team_ids` (`ensure_team_key`), by team."""
    return {team: ensure_team_key(store, team_key_path(var_path, team), team) for team in team_ids}
