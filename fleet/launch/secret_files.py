"""Make the deployment's internal secrets once, and the Redis ACL file from them.

    ensure_secret_files(dir)   each missing file made (random, 0600; the folder 0700);
                               an existing one is never touched: a running fleet keeps
                               its credentials across `make up`s
      redis-<component>        ─┐
      triton-inference-key      │ config/internal_secrets.py names them
      redis-users.acl          ◀┘ rewritten from the passwords on every call (hashed)

`make up` (fleet/stack.py) and the test fixtures call it before starting redis-server; for
Kubernetes, `python -m fleet.launch.secret_files DIR` writes the same files for
`kubectl create secret generic switchyard-internal --from-file=DIR` (docs/deploy.md).

The ACL file turns the `default` user off (no unauthenticated client), gives the operator's
`admin` user every command, and the components' users Switchyard's keys and channels only
(`sy:*`) without the commands Redis calls dangerous (FLUSHALL, CONFIG, KEYS, DEBUG, ACL, ...).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from config.internal_secrets import (
    REDIS_ACL_FILE,
    REDIS_COMPONENTS,
    TRITON_KEY_FILE,
    RedisComponent,
    read_secret,
    redis_password_file,
)

_SECRET_BYTES = 32  # 256 bits each, hex: nothing a URL or a shell has to quote
# What a component's user may do; `admin` may do everything.
COMPONENT_RULES = "~sy:* &sy:* +@all -@dangerous"
ADMIN_RULES = "~* &* +@all"


@dataclass(frozen=True)
class SecretFiles:
    """The secrets folder and what it holds (read back from the files)."""

    directory: Path
    redis_passwords: dict[RedisComponent, str]
    triton_inference_key: str

    @property
    def acl_file(self) -> Path:
        return self.directory / REDIS_ACL_FILE


def ensure_secret_files(directory: Path) -> SecretFiles:
    """Make whatever secret is missing in `directory`, (re)write the ACL file, return them all."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    for name in (*(redis_password_file(c) for c in REDIS_COMPONENTS), TRITON_KEY_FILE):
        _create_once(directory / name, secrets.token_hex(_SECRET_BYTES))
    files = SecretFiles(
        directory,
        {c: read_secret(directory / redis_password_file(c)) for c in REDIS_COMPONENTS},
        read_secret(directory / TRITON_KEY_FILE),
    )
    _write_private(files.acl_file, acl_text(files.redis_passwords))
    return files


def acl_text(passwords: dict[RedisComponent, str]) -> str:
    """redis-server's ACL file: `default` off, one user per component, passwords as SHA-256."""
    lines = ["user default off"]
    for component, password in passwords.items():
        rules = ADMIN_RULES if component == "admin" else COMPONENT_RULES
        digest = hashlib.sha256(password.encode()).hexdigest()
        lines.append(f"user {component} on #{digest} {rules}")
    return "\n".join(lines) + "\n"


def _create_once(path: Path, value: str) -> None:
    """Write `value` to a new file readable by its owner only; leave an existing one alone."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as out:
        out.write(value + "\n")


def _write_private(path: Path, text: str) -> None:
    """Replace `path` atomically with `text`, mode 0600 from the start."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fleet.launch.secret_files",
        description="Make the internal secrets (Redis users' passwords, their ACL file, Triton's "
        "inference key) in DIR, keeping any already there.",
    )
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    files = ensure_secret_files(args.directory)
    print(f"secrets in {files.directory}: {', '.join(sorted(p.name for p in files.directory.iterdir()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
