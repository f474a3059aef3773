"""Every repository path the README and docs/ name exists.

The docs point readers at files (`stack/redis_sentinel.py`), folders (`fleet_state/`), names in
a module (`stack/secret_files.sentinel_user_lines`) and tests (`tests/x/test_y.py::test_z`).
A file that moves leaves its old name behind in prose nobody re-reads; this test reads it.

A path is a token that starts with one of the repository's top-level folders and a slash,
in backticks or not. Not checked: `var/` (what the stack writes at run time, not in the
repository), files under `bench/results/` (each is written by a run of its benchmark), and
kubectl's `deploy/<name>` (a Deployment, not the `deploy/` folder).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
# Written by runs, not kept in the repository (the folder itself is).
GENERATED = ("bench/results/",)
# `kubectl ... deploy/gateway`: a Kubernetes resource, named like a folder.
KUBECTL_RESOURCE = re.compile(r"^deploy/[a-z-]+$")


def top_level_folders() -> set[str]:
    """The repository's own top-level folders: those on disk but dot-folders, run output (var/)
    and build metadata."""
    return {
        path.name
        for path in ROOT.iterdir()
        if path.is_dir() and not path.name.startswith((".", "__")) and path.name != "var"
        if not path.name.endswith(".egg-info")
    }


def named_paths(text: str, folders: set[str]) -> list[tuple[int, str]]:
    """(line number, path) for each repository path in `text`."""
    token = re.compile(r"(?<![\w./:$-])((?:" + "|".join(sorted(map(re.escape, folders))) + r")/[\w./*<>{},:-]*)")
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in token.finditer(line):
            path = match.group(1).rstrip(".,:;")
            if "kubectl" in line and KUBECTL_RESOURCE.match(path):
                continue
            found.append((number, path))
    return found


def _defines(module: Path, name: str) -> bool:
    source = module.read_text()
    return (
        re.search(rf"^\s*(?:async def|def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]", source, re.M)
        is not None
    )


def missing(path: str) -> str | None:
    """Why `path` names nothing in the repository; None when it does."""
    if path.startswith("var/") or (path.startswith(GENERATED) and path not in GENERATED):
        return None
    if "::" in path:  # a test: tests/x/test_y.py::test_z
        file, _, test = path.partition("::")
        if not (ROOT / file).is_file():
            return f"no file {file}"
        return None if _defines(ROOT / file, test) else f"{file} has no {test}"
    pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", path)  # deploy/overlays/<pool>: any pool
    if "*" in pattern:
        return None if any(ROOT.glob(pattern.rstrip("/"))) else "matches nothing"
    target = ROOT / path
    if path.endswith("/"):
        return None if target.is_dir() else "no such folder"
    if target.exists():
        return None
    # stack/secret_files.sentinel_user_lines: a name in a module
    module, _, name = path.rpartition(".")
    if module and name.isidentifier() and (ROOT / f"{module}.py").is_file():
        return None if _defines(ROOT / f"{module}.py", name) else f"{module}.py defines no {name}"
    return "no such file"


def test_the_path_finder_reads_paths_in_prose_and_in_backticks() -> None:
    text = "see `stack/redis_sentinel.py` and (quota/usage_formula.py).\nhttps://x.org/stack/y.py `var/logs/`"
    assert named_paths(text, {"stack", "quota", "var"}) == [
        (1, "stack/redis_sentinel.py"),
        (1, "quota/usage_formula.py"),
        (2, "var/logs/"),
    ]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("stack/redis_sentinel.py", None),
        ("server_host/redis_sentinel.py", "no such file"),
        ("fleet_state/", None),
        ("fleet_state/gone/", "no such folder"),
        ("stack/secret_files.sentinel_user_lines", None),
        ("stack/secret_files.no_such_name", "stack/secret_files.py defines no no_such_name"),
        ("tests/test_doc_paths.py::test_every_path_the_docs_name_exists", None),
        ("tests/test_doc_paths.py::test_gone", "tests/test_doc_paths.py has no test_gone"),
        ("deploy/overlays/<pool>", None),
        ("tests/nothing_*.py", "matches nothing"),
        ("var/logs/gateway.log", None),
        ("bench/results/some_run.json", None),
    ],
)
def test_a_named_path_is_checked_as_what_it_names(path: str, reason: str | None) -> None:
    assert missing(path) == reason


def test_every_path_the_docs_name_exists() -> None:
    folders = top_level_folders()
    broken = [
        f"{doc.relative_to(ROOT)}:{number}: {path} ({why})"
        for doc in DOCS
        for number, path in named_paths(doc.read_text(), folders)
        if (why := missing(path)) is not None
    ]
    assert broken == [], "\n".join(broken)
