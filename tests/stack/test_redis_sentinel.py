"""The sentinel's config and the sentinel-mode users: what each login may do, nothing written
in clear where it need not be (the live failover: tests/integration/test_redis_failover.py)."""

from __future__ import annotations

import stat
from pathlib import Path

from stack.redis_sentinel import sentinel_config
from stack.secret_files import REPLICATION_RULES, acl_text, ensure_secret_files, sentinel_user_lines


def test_the_data_nodes_know_the_replication_and_sentinel_users_hashed(tmp_path: Path) -> None:
    files = ensure_secret_files(tmp_path / "secrets")
    text = acl_text(files)
    assert "user replication on #" in text and text.count(REPLICATION_RULES) == 1
    assert "user sentinel on #" in text and "&__sentinel__:hello" in text
    for password in (files.replication_password, files.sentinel_password, *files.redis_passwords.values()):
        assert password not in text
    for name in ("redis-replication", "redis-sentinel"):
        assert stat.S_IMODE((tmp_path / "secrets" / name).stat().st_mode) == 0o600


def test_components_may_only_ask_a_sentinel_where_the_primary_is(tmp_path: Path) -> None:
    files = ensure_secret_files(tmp_path / "secrets")
    lines = sentinel_user_lines(files)
    assert lines[0] == "user default off"
    gateway = next(line for line in lines if line.startswith("user gateway "))
    assert "+sentinel|get-master-addr-by-name" in gateway and "+sentinel|masters" in gateway
    assert "+@all" not in gateway and "failover" not in gateway and "+sentinel " not in gateway + " "


def test_a_sentinel_watches_the_primary_with_a_majority_quorum(tmp_path: Path) -> None:
    files = ensure_secret_files(tmp_path / "secrets")
    text = sentinel_config(
        files,
        host="127.0.0.1",
        port=26001,
        data_dir=tmp_path,
        primary=("127.0.0.1", 6390),
        master_name="switchyard",
        quorum=2,
        down_after_ms=5000,
        failover_timeout_ms=60000,
    )
    assert "sentinel monitor switchyard 127.0.0.1 6390 2\n" in text
    assert "sentinel auth-user switchyard sentinel\n" in text
    assert "sentinel sentinel-user sentinel\n" in text
    for password in files.redis_passwords.values():  # the components' passwords only hashed
        assert password not in text
