"""The container's files as Poseidon reads them (``supervisor/desk/container_files.py``): Poseidon's
``ls`` command run against real directories with ``/bin/sh``, and its output read line by line as
Poseidon's ls2json reads it, quirks included.

Plain synchronous tests: the commands run as subprocesses in a temporary directory; nothing waits
on time."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from supervisor.base.errors import InvalidRequest
from supervisor.desk.container_files import (
    container_path,
    list_container_command,
    parse_ls_listing,
    read_container_file_command,
)


def run(argv: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=30, check=False)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "a dir 'quoted'"
    (root / "sub").mkdir(parents=True)
    (root / "one.txt").write_text("1\n")
    (root / ".dot").write_text("hidden\n")
    (root / "sub" / "two words.txt").write_text("22\n")
    (root / "link").symlink_to("one.txt")
    os.utime(root / "one.txt", (1_700_000_000, 1_700_000_000))
    return root


def test_a_recursive_listing_names_each_entry_under_the_directory_ls_names(tree: Path) -> None:
    done = run(list_container_command(str(tree), recursive=True))
    assert done.returncode == 0, done.stderr
    headers = parse_ls_listing(done.stdout)
    assert [h["name"] for h in headers] == [
        f"{tree}/link",
        f"{tree}/one.txt",
        f"{tree}/sub",
        f"{tree}/sub/two words.txt",
    ], "ls's order, no hidden names, a name with spaces whole"
    link, one = headers[0], headers[1]
    assert link == {
        "name": f"{tree}/link",
        "entryType": "l",
        "linkTarget": "one.txt",
        "size": 7,
        "modificationTime": link["modificationTime"],
        "permissions": "rwxrwxrwx",
        "owner": link["owner"],
        "group": link["group"],
    }
    assert (one["entryType"], one["size"], one["modificationTime"]) == ("-", 2, 1_700_000_000)
    assert "linkTarget" not in one, "omitted when empty, as Go's omitempty"


def test_a_flat_listing_names_entries_bare_and_a_file_by_its_path(tree: Path) -> None:
    flat = parse_ls_listing(run(list_container_command(f"{tree}/", recursive=False)).stdout)
    assert [h["name"] for h in flat] == ["link", "one.txt", "sub"]
    single = parse_ls_listing(run(list_container_command(f"{tree}/one.txt", recursive=True)).stdout)
    assert [h["name"] for h in single] == [f"{tree}/one.txt"]
    root = parse_ls_listing(run(list_container_command("/", recursive=False)).stdout)
    assert {h["name"] for h in root} == {name for name in os.listdir("/") if not name.startswith(".")}


def test_a_missing_path_writes_nothing_and_fails() -> None:
    done = run(list_container_command("/no/such/path", recursive=True))
    assert (done.stdout, done.returncode != 0) == (b"", True)
    assert b"No such file or directory" in done.stderr


def test_lines_are_read_as_poseidons_ls2json_reads_them() -> None:
    output = (
        b"/srv:\n"
        b"total 8\n"
        b"-rw-r--r--+ 1 root staff 12 1700000000 acl.txt\n"
        b"lrwxrwxrwx 1 root root 4 1700000000 unreadable\n"
        b"lrwxrwxrwx 1 root root 4 1700000000 a -> b -> c\n"
        b"\n"
        b"/srv/sub/:\n"
        b"drwxr-xr-x 2 user user 4096 1700000001 deeper\n"
        b"not an entry\n"
    )
    headers = parse_ls_listing(output)
    assert [h["name"] for h in headers] == [
        "/srv/acl.txt",
        "/srv/unreadable",
        "/srv/a -> b -> c",
        "/srv/sub/deeper",
    ]
    assert headers[0]["permissions"] == "rw-r--r--+", "an ACL's mark kept"
    assert "linkTarget" not in headers[1], "a target it may not read: the name alone"
    assert "linkTarget" not in headers[2], "more than one arrow: the name whole"
    assert (headers[3]["owner"], headers[3]["size"]) == ("user", 4096)


def test_a_file_is_read_after_a_line_with_its_size(tree: Path) -> None:
    done = run(read_container_file_command(f"{tree}/link"))
    assert (done.returncode, done.stdout) == (0, b"2\n1\n"), "a link followed, as cat follows it"
    assert run(read_container_file_command(str(tree))).returncode == 68
    assert run(read_container_file_command(f"{tree}/none")).returncode == 66
    os.mkfifo(tree / "pipe")
    assert run(read_container_file_command(f"{tree}/pipe")).returncode == 66, "no wait for a writer"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("src/a.txt", None),
        ("./", None),
        ("/workspace", None),
        ("/workspace/x", None),
        ("/workspace/../etc/passwd", "/workspace/../etc/passwd"),
        ("/workspacex/y", "/workspacex/y"),
        ("/", "/"),
    ],
)
def test_only_an_absolute_path_outside_the_workspace_is_the_containers(
    path: str, expected: str | None
) -> None:
    assert container_path(path, "/workspace") == expected


@pytest.mark.parametrize("path", ["/etc/\0passwd", "/" + "x" * 4096, "/\udcff"])
def test_an_absolute_path_that_no_command_could_take_is_400(path: str) -> None:
    with pytest.raises(InvalidRequest):
        container_path(path, "/workspace")
