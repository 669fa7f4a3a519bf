"""Files in runners: copy, delete (with the real client's "./*"), list, raw download, path checks."""

from __future__ import annotations

import base64
import os
import pwd
import shutil
from pathlib import Path

import pytest
import trio

from supervisor.base.errors import FileOperationFailed
from supervisor.core.config import ExecutionSettings, ServerSettings, Settings

from .conftest import Harness, output


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_copy_list_download_and_clear(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    files = f"/runners/{runner}/files"
    patch = {
        "delete": ["./*"],
        "copy": [
            {"path": "main.py", "content": b64("print('hi')\n")},
            {"path": "src/lib/util.py", "content": b64("X = 1\n")},
            {"path": "/workspace/abs.txt", "content": b64("absolute but inside\n")},
            {"path": "empty.txt"},
            {"path": "data/"},
        ],
    }
    assert (await harness.http.patch(files, json=patch)).status_code == 204
    listing = (await harness.http.get(files)).json()["files"]
    by_name = {f["name"]: f for f in listing}
    assert set(by_name) == {
        "./main.py",
        "./src",
        "./src/lib",
        "./src/lib/util.py",
        "./abs.txt",
        "./empty.txt",
        "./data",
    }
    assert by_name["./main.py"]["entryType"] == "-"
    assert by_name["./main.py"]["size"] == len("print('hi')\n")
    assert by_name["./main.py"]["modificationTime"] > 1_700_000_000
    assert by_name["./data"]["entryType"] == "d"
    assert by_name["./data"]["permissions"] == "rwxrwxrwt", "directories let anyone create files"
    assert set(by_name["./main.py"]) >= {
        "name",
        "entryType",
        "size",
        "modificationTime",
        "permissions",
        "owner",
        "group",
    }
    flat = (await harness.http.get(files, params={"recursive": "false"})).json()["files"]
    assert "./src/lib/util.py" not in {f["name"] for f in flat}
    sub = (await harness.http.get(files, params={"path": "src"})).json()["files"]
    assert {f["name"] for f in sub} == {"src/lib", "src/lib/util.py"} or {f["name"] for f in sub} == {
        "./src/lib",
        "./src/lib/util.py",
    }
    raw = await harness.http.get(f"{files}/raw", params={"path": "src/lib/util.py"})
    assert raw.status_code == 200
    assert raw.content == b"X = 1\n"
    assert raw.headers["content-type"] == "application/octet-stream"
    assert "attachment" in raw.headers["content-disposition"]
    assert (await harness.http.patch(files, json={"delete": ["./*"]})).status_code == 204
    assert (await harness.http.get(files)).json() == {"files": []}


async def test_copy_then_run_it(harness: Harness) -> None:
    """The real client's loop: clear, copy, run."""
    await harness.environment(10)
    runner = await harness.runner(10)
    for text in ("first", "second"):
        patch = {"delete": ["./*"], "copy": [{"path": "message.txt", "content": b64(text + "\n")}]}
        assert (await harness.http.patch(f"/runners/{runner}/files", json=patch)).status_code == 204
        messages = await harness.execute(runner, command="cat message.txt; ls")
        assert output(messages) == f"{text}\r\nmessage.txt\r\n"  # on the execution's terminal


@pytest.mark.parametrize(
    "patch",
    [
        {"copy": [{"path": "../escape.txt", "content": ""}]},
        {"copy": [{"path": "a/../../escape.txt", "content": ""}]},
        {"copy": [{"path": "/etc/passwd", "content": ""}]},
        {"delete": ["../"]},
        {"delete": ["/"]},
        {"copy": [{"path": "x", "content": "not base64!"}]},
        {"copy": [{"path": "x", "content": "aGVsbG8=\u00e9"}]},
        b'{"copy": [{"path": "x", "content": "\\ud800"}]}',  # a lone surrogate, as JSON may write it
        {"copy": [{"path": "x", "content": "", "mode": 7}]},
        {"move": []},
        {"copy": "x"},
    ],
)
async def test_bad_patches_are_400_and_write_nothing(
    harness: Harness, patch: dict[str, object] | bytes
) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    url = f"/runners/{runner}/files"
    if isinstance(patch, bytes):
        response = await harness.http.patch(url, content=patch, headers={"Content-Type": "application/json"})
    else:
        response = await harness.http.patch(url, json=patch)
    assert response.status_code == 400
    assert response.json()["message"]
    assert (await harness.http.get(f"/runners/{runner}/files")).json() == {"files": []}


async def test_missing_files_are_424(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    missing = await harness.http.get(f"/runners/{runner}/files/raw", params={"path": "nope.txt"})
    assert missing.status_code == 424
    assert "nope.txt" in missing.json()["message"]
    assert (await harness.http.get(f"/runners/{runner}/files", params={"path": "nowhere"})).status_code == 424
    assert (await harness.http.get(f"/runners/{runner}/files/raw")).status_code == 400
    escape = await harness.http.get(f"/runners/{runner}/files/raw", params={"path": "../../etc/passwd"})
    assert escape.status_code == 400
    bad = await harness.http.get(f"/runners/{runner}/files", params={"recursive": "sometimes"})
    assert bad.status_code == 400


async def test_a_download_of_a_directory_says_so(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    patch = {"copy": [{"path": "src/", "content": ""}]}
    assert (await harness.http.patch(f"/runners/{runner}/files", json=patch)).status_code == 204
    download = await harness.http.get(f"/runners/{runner}/files/raw", params={"path": "src"})
    assert download.status_code == 424
    assert download.json()["message"] == "src: is a directory"


async def test_a_large_download_streams_whole_and_a_client_leaving_ends_it(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    content = bytes(range(256)) * 20_000  # 5 MB: about 1,250 exec output chunks
    patch = {"copy": [{"path": "big.bin", "content": base64.b64encode(content).decode()}]}
    assert (await harness.http.patch(f"/runners/{runner}/files", json=patch)).status_code == 204
    download = await harness.http.get(f"/runners/{runner}/files/raw", params={"path": "big.bin"})
    assert download.status_code == 200
    assert download.content == content
    assert download.headers["content-type"] == "application/octet-stream"

    async with harness.http.stream("GET", f"/runners/{runner}/files/raw", params={"path": "big.bin"}) as r:
        async for _ in r.aiter_raw():
            break  # the client reads a little, then goes away
    await harness.wait_for(lambda: harness.cluster.execs.count == 0)


async def test_an_operation_whose_output_is_over_its_limit_fails_clearly(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    files = harness.service.files
    used = harness.service.pool.used_runner(runner)
    assert used is not None
    alloc_id = used.alloc_id
    with pytest.raises(FileOperationFailed, match="larger than the 0 MiB"):
        await files._run(alloc_id, ["/bin/sh", "-c", "head -c 5000 /dev/zero"], limit=4096)
    code, stdout, _ = await files._run(alloc_id, ["/bin/sh", "-c", "head -c 4096 /dev/zero"], limit=4096)
    assert (code, len(stdout)) == (0, 4096), "output of exactly the limit is whole"
    with trio.fail_after(10), pytest.raises(FileOperationFailed, match="larger than"):
        await files._run(alloc_id, ["/bin/sh", "-c", "head -c 5000 /dev/zero; sleep 60"], limit=4096)
    await harness.wait_for(lambda: harness.cluster.execs.count == 0)


async def test_a_runner_does_not_expire_while_a_slow_download_runs(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10, inactivity_timeout=1)
    made = await harness.execute(runner, command="head -c 20000000 /dev/zero > big.bin")
    assert made[-1] == {"type": "exit", "data": 0}
    received = 0
    async with harness.http.stream("GET", f"/runners/{runner}/files/raw", params={"path": "big.bin"}) as r:
        assert r.status_code == 200
        async for chunk in r.aiter_raw():
            if received == 0:
                await trio.sleep(1.5)  # a slow client: longer than the inactivity timeout
            received += len(chunk)
    assert received == 20_000_000
    assert harness.service.pool.used_runner(runner) is not None
    await harness.wait_for(lambda: harness.service.pool.used_runner(runner) is None, within=10)


async def test_a_link_planted_by_the_students_code_never_leads_a_file_command_out(
    harness: Harness, tmp_path: Path
) -> None:
    """The field report, step by step: the student's code links ``x`` to a directory outside the
    workspace; no file command reads, deletes or writes there."""
    outside = tmp_path / "outside-target"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    await harness.environment(10)
    runner = await harness.runner(10)
    files = f"/runners/{runner}/files"
    made = await harness.execute(runner, command=f"ln -s {outside} x")
    assert made[-1] == {"type": "exit", "data": 0}

    listed = {f["name"]: f for f in (await harness.http.get(files)).json()["files"]}
    assert listed["./x"]["entryType"] == "l", "a listing shows the link as a link"
    assert "./x/secret.txt" not in listed
    download = await harness.http.get(f"{files}/raw", params={"path": "x/secret.txt"})
    assert download.status_code == 424
    assert "leads it out of the workspace" in download.json()["message"]
    assert (await harness.http.patch(files, json={"delete": ["x/secret.txt"]})).status_code == 204
    assert (outside / "secret.txt").read_text() == "secret\n", "a delete never reaches through"

    copy = {"copy": [{"path": "x/pwned.txt", "content": b64("owned\n")}]}
    assert (await harness.http.patch(files, json=copy)).status_code == 204
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"], "a copy never writes through"
    raw = await harness.http.get(f"{files}/raw", params={"path": "x/pwned.txt"})
    assert raw.content == b"owned\n", "the link was replaced by a directory in the workspace"


# -- the container's files, as Poseidon serves them --------------------------------------------------
# In the simulated cluster a command's "/" is this machine's: what a container's commands would see.


async def test_path_slash_lists_the_containers_root_as_poseidons_ls_does(harness: Harness) -> None:
    """CodeOcean's admin file browser: ``path=/``, not recursive, privileged; names bare as
    Poseidon's ls2json writes them for a directory's entries."""
    await harness.environment(10)
    runner = await harness.runner(10)
    params = {"path": "/", "recursive": "false", "privilegedExecution": "true"}
    response = await harness.http.get(f"/runners/{runner}/files", params=params)
    assert response.status_code == 200, response.text
    listed = {f["name"]: f for f in response.json()["files"]}
    assert set(listed) == {name for name in os.listdir("/") if not name.startswith(".")}
    assert listed["etc"]["entryType"] == "d"
    assert listed["etc"]["owner"] == pwd.getpwuid(os.stat("/etc").st_uid).pw_name
    assert listed["etc"]["modificationTime"] == int(os.stat("/etc").st_mtime)


async def test_an_absolute_path_is_listed_and_downloaded_as_poseidon_does(
    harness: Harness, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("alpha\n")
    (tree / ".hidden").write_text("ls shows no dot files\n")
    (tree / "sub" / "b.bin").write_bytes(bytes(range(256)) * 3)
    (tree / "link").symlink_to("a.txt")
    await harness.environment(10)
    runner = await harness.runner(10)
    files = f"/runners/{runner}/files"
    # As the task's user: the test's directory is its own user's (whatever the unprivileged wrapper is).
    as_task = {"privilegedExecution": "true"}

    recursive = (await harness.http.get(files, params={"path": str(tree), **as_task})).json()["files"]
    assert [f["name"] for f in recursive] == [
        f"{tree}/a.txt",
        f"{tree}/link",
        f"{tree}/sub",
        f"{tree}/sub/b.bin",
    ], "ls's order, every name under the path ls names"
    link = recursive[1]
    assert (link["entryType"], link["linkTarget"]) == ("l", "a.txt")
    assert recursive[3]["size"] == 768
    assert recursive[3]["permissions"] == "rw-r--r--"
    flat = (
        await harness.http.get(files, params={"path": f"{tree}/", "recursive": "false", **as_task})
    ).json()
    assert [f["name"] for f in flat["files"]] == ["a.txt", "link", "sub"]
    single = (await harness.http.get(files, params={"path": f"{tree}/a.txt", **as_task})).json()["files"]
    assert [(f["name"], f["size"]) for f in single] == [(f"{tree}/a.txt", 6)]

    raw = await harness.http.get(f"{files}/raw", params={"path": f"{tree}/sub/b.bin", **as_task})
    assert raw.status_code == 200
    assert raw.content == bytes(range(256)) * 3
    assert raw.headers["content-length"] == "768"
    followed = await harness.http.get(f"{files}/raw", params={"path": f"{tree}/link", **as_task})
    assert followed.content == b"alpha\n", "a link is followed, as cat follows it"

    for path in (f"{tree}/none", str(tree)):
        refused = await harness.http.get(f"{files}/raw", params={"path": path, **as_task})
        assert refused.status_code == 424, refused.text
    missing = await harness.http.get(files, params={"path": f"{tree}/none", **as_task})
    assert missing.status_code == 424
    assert "No such file or directory" in missing.json()["message"]


@pytest.mark.parametrize(
    "settings",
    [
        Settings(
            server=ServerSettings(port=0),
            execution=ExecutionSettings(
                unprivileged_wrapper="setpriv --reuid=65534 --regid=65534 --clear-groups"
            ),
        )
    ],
)
async def test_an_absolute_path_is_read_as_the_user_the_request_runs_as(
    harness: Harness, settings: Settings, tmp_path: Path
) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a command as another user")
    secret = tmp_path / "secret.txt"
    secret.write_text("root only\n")
    os.chmod(secret, 0o600)
    os.chmod(tmp_path, 0o755)
    await harness.environment(10)
    runner = await harness.runner(10)
    files = f"/runners/{runner}/files"
    as_nobody = await harness.http.get(f"{files}/raw", params={"path": str(secret)})
    assert as_nobody.status_code == 424, "the operating system refuses it: Poseidon's 424"
    as_task = await harness.http.get(
        f"{files}/raw", params={"path": str(secret), "privilegedExecution": "true"}
    )
    assert (as_task.status_code, as_task.content) == (200, b"root only\n")
    hidden = tmp_path / "closed"
    hidden.mkdir(mode=0o700)
    listing = await harness.http.get(files, params={"path": str(hidden), "recursive": "false"})
    assert listing.status_code == 424
    assert "Permission denied" in listing.json()["message"]


async def test_downloads_carry_content_length_and_a_proc_file_streams_without(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    files = f"/runners/{runner}/files"
    patch = {"copy": [{"path": "out.txt", "content": b64("twelve bytes")}, {"path": "empty.txt"}]}
    assert (await harness.http.patch(files, json=patch)).status_code == 204
    relative = await harness.http.get(f"{files}/raw", params={"path": "out.txt"})
    assert (relative.headers["content-length"], relative.content) == ("12", b"twelve bytes")
    assert "transfer-encoding" not in relative.headers
    empty = await harness.http.get(f"{files}/raw", params={"path": "/workspace/empty.txt"})
    assert (empty.status_code, empty.headers["content-length"], empty.content) == (200, "0", b"")
    proc = await harness.http.get(f"{files}/raw", params={"path": "/proc/version"})
    assert proc.status_code == 200
    assert proc.content.startswith(b"Linux version"), "the file system says 0 bytes; it has a line"
    assert "content-length" not in proc.headers
    assert proc.headers["transfer-encoding"] == "chunked"


async def test_an_absolute_path_inside_the_workspace_keeps_its_guarantees(
    harness: Harness, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    await harness.environment(10)
    runner = await harness.runner(10)
    files = f"/runners/{runner}/files"
    patch = {"copy": [{"path": "src/a.txt", "content": b64("a")}]}
    assert (await harness.http.patch(files, json=patch)).status_code == 204
    made = await harness.execute(runner, command=f"ln -s {outside} x")
    assert made[-1] == {"type": "exit", "data": 0}
    escape = await harness.http.get(f"{files}/raw", params={"path": "/workspace/x/secret.txt"})
    assert escape.status_code == 424
    assert "leads it out of the workspace" in escape.json()["message"]
    named = (await harness.http.get(files, params={"path": "/workspace"})).json()["files"]
    assert {f["name"] for f in named} == {"/workspace/src", "/workspace/src/a.txt", "/workspace/x"}
    flat = (await harness.http.get(files, params={"path": "/workspace/", "recursive": "false"})).json()
    assert {f["name"] for f in flat["files"]} == {"src", "x"}
    one = (await harness.http.get(files, params={"path": "/workspace/src/a.txt"})).json()["files"]
    assert [f["name"] for f in one] == ["/workspace/src/a.txt"]
