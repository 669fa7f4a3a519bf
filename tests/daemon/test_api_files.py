"""Files in runners: copy, delete (with the real client's "./*"), list, raw download, path checks."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import trio

from supervisor.base.errors import FileOperationFailed

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
