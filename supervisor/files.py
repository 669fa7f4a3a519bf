"""File operations in runners, through Nomad's exec: copy (a tar on stdin), delete, list, download."""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Sequence
from typing import Any, Final

from .commands import (
    CLEAR_WORKSPACE,
    MISSING_EXIT_CODE,
    delete_and_extract_command,
    list_files_command,
    parse_file_listing,
    read_file_command,
    tar_archive,
    workspace_path,
)
from .errors import InvalidRequest, SupervisorError
from .nomad import NomadClient

__all__ = ["FileNotAvailable", "FileOperationFailed", "FileService"]

_STDIN_CHUNK: Final = 64 * 1024
_MAX_DOWNLOAD: Final = 256 * 1024 * 1024
_MAX_LISTING: Final = 64 * 1024 * 1024


class FileNotAvailable(SupervisorError):
    """The file does not exist or cannot be read (HTTP 424)."""


class FileOperationFailed(SupervisorError):
    """The command in the runner failed; the message carries its stderr."""


def parse_patch(body: Any, workspace: str) -> tuple[list[str], list[tuple[str, bytes | None]]]:
    """Poseidon's ``{"delete": [...], "copy": [{"path", "content"}]}``, checked and made relative."""
    if not isinstance(body, dict):
        raise InvalidRequest("body must be a JSON object")
    unknown = sorted(set(body) - {"delete", "copy"})
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0]!r}")
    deletions_raw = body.get("delete") or []
    copies_raw = body.get("copy") or []
    if not isinstance(deletions_raw, list) or not isinstance(copies_raw, list):
        raise InvalidRequest("delete and copy must be arrays")
    deletions = []
    for i, path in enumerate(deletions_raw):
        if path == CLEAR_WORKSPACE or path in ("./", ".", "*"):
            deletions.append(".")
        else:
            deletions.append(workspace_path(path, workspace, field=f"delete[{i}]"))
    copies: list[tuple[str, bytes | None]] = []
    for i, entry in enumerate(copies_raw):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise InvalidRequest(f"copy[{i}] must be an object with a path")
        extra = sorted(set(entry) - {"path", "content"})
        if extra:
            raise InvalidRequest(f"copy[{i}]: unknown field {extra[0]!r}")
        raw_path: str = entry["path"]
        relative = workspace_path(raw_path, workspace, field=f"copy[{i}].path")
        if relative == ".":
            raise InvalidRequest(f"copy[{i}].path names the workspace itself")
        if raw_path.endswith("/"):
            copies.append((relative, None))
            continue
        content = entry.get("content", "")
        if not isinstance(content, str):
            raise InvalidRequest(f"copy[{i}].content must be a base64 string")
        try:
            copies.append((relative, base64.b64decode(content, validate=True)))
        except binascii.Error:
            raise InvalidRequest(f"copy[{i}].content is not valid base64") from None
    return deletions, copies


class FileService:
    def __init__(self, client: NomadClient, *, task: str, workspace: str) -> None:
        self._client = client
        self._task = task
        self.workspace = workspace

    async def _run(
        self, alloc_id: str, argv: Sequence[str], *, stdin: bytes | None = None, limit: int = _MAX_LISTING
    ) -> tuple[int, bytes, bytes]:
        async with self._client.open_exec(alloc_id, task=self._task, command=argv) as session:
            if stdin is not None:
                for start in range(0, len(stdin), _STDIN_CHUNK):
                    await session.send_stdin(stdin[start : start + _STDIN_CHUNK])
                await session.close_stdin()
            exited, stdout, stderr = await session.wait_exit(max_output_bytes=limit)
        return exited.exit_code, stdout, stderr

    async def update(
        self, alloc_id: str, deletions: list[str], copies: list[tuple[str, bytes | None]]
    ) -> None:
        archive = tar_archive(copies, mtime=time.time()) if copies else None
        argv = delete_and_extract_command(deletions, extract=archive is not None)
        code, _, stderr = await self._run(alloc_id, argv, stdin=archive)
        if code != 0:
            raise FileOperationFailed(
                f"updating files failed (exit {code}): {stderr.decode(errors='replace').strip()}"
            )

    async def list(self, alloc_id: str, path: str, *, recursive: bool) -> list[dict[str, Any]]:
        relative = workspace_path(path, self.workspace)
        code, stdout, stderr = await self._run(alloc_id, list_files_command(relative, recursive=recursive))
        if code == MISSING_EXIT_CODE:
            raise FileNotAvailable(f"{path}: no such file or directory")
        if code != 0:
            raise FileOperationFailed(
                f"listing files failed (exit {code}): {stderr.decode(errors='replace').strip()}"
            )
        return parse_file_listing(stdout)

    async def read(self, alloc_id: str, path: str) -> bytes:
        relative = workspace_path(path, self.workspace)
        code, stdout, stderr = await self._run(alloc_id, read_file_command(relative), limit=_MAX_DOWNLOAD)
        if code == MISSING_EXIT_CODE:
            raise FileNotAvailable(f"{path}: no such file, or not readable")
        if code != 0:
            raise FileOperationFailed(
                f"reading {path} failed (exit {code}): {stderr.decode(errors='replace').strip()}"
            )
        return stdout
